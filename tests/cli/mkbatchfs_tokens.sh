#!/usr/bin/env bash
# tests/cli/mkbatchfs_tokens.sh — mkbatchfs --tokens: a flat file of token ids (nanoGPT's
# train.bin, u16 and u32), a .npy of ids with a .npy of document offsets, and a Megatron
# indexed dataset (.bin + .idx) pack into one token-sequence sample per document; --info,
# --cat and --verify work on it; the documents joined are the file; re-packing keeps it;
# every user mistake is refused with a message naming it; batchfs --bench serves it
# (the pipelines themselves: tests/cli/tokens_pack.sh).
. "$(dirname "$0")/lib.sh" tokens
refused() { # RC WHAT MESSAGE COMMAND...: exits RC, stderr has MESSAGE
    local want=$1 what=$2 msg=$3
    shift 3
    run "$@"
    expect_rc "$want" "$what"
    expect_err "$msg" "$what"
}

# a GPT-2-like token file: 200 documents ending with <|endoftext|> (50256), then a last one
# without it; and the same ids as u32
python3 - "$T" <<'EOF'
import random, struct, sys
random.seed(7)
toks = []
for _ in range(200):
    toks += [random.randrange(50256) for _ in range(random.randrange(0, 600))] + [50256]
toks += [11, 12, 13]
open(f"{sys.argv[1]}/train.bin", "wb").write(struct.pack(f"<{len(toks)}H", *toks))
open(f"{sys.argv[1]}/train32.bin", "wb").write(struct.pack(f"<{len(toks)}I", *toks))
open(f"{sys.argv[1]}/ntok", "w").write(str(len(toks)))
EOF
ntok=$(cat "$T/ntok")

for w in u16 u32; do
    bin=$T/train.bin
    [ $w = u16 ] || bin=$T/train32.bin
    run "$MK" --tokens $w --doc-sep 50256 "$bin" "$T/$w.bfs"
    expect_rc 0 "--tokens $w"
    expect_err "packed $ntok tokens ($w) in 201 documents" "--tokens $w summary"
    run "$MK" --info "$T/$w.bfs"
    expect_rc 0 "--info of a $w token pack"
    grep -q "^format: *batchfs dataset, version 2$" "$T/stdout" || fail "--info: not version 2"
    grep -q "^samples: *201 (201 token sequences)$" "$T/stdout" || fail "--info: sample line"
    grep -Eq "^tokens: *$ntok \($w\), 1\.\.[0-9]+ per sequence" "$T/stdout" || fail "--info: tokens line"
    grep -q "WARNING" "$T/stdout" && fail "--info: 201 documents for $((ntok / 1024)) rows warned"
    run "$MK" --verify "$T/$w.bfs"
    expect_rc 0 "--verify of a $w token pack"
    for i in $(seq 0 200); do "$MK" --cat "$T/$w.bfs" "$i"; done >"$T/joined"
    cmp -s "$T/joined" "$bin" || fail "$w: the documents joined are not the token file"
    size=$([ $w = u16 ] && echo 2 || echo 4)
    [ "$("$MK" --cat "$T/$w.bfs" 0 | tail -c "$size" | od -An -tu"$size" | tr -d ' ')" = 50256 ] ||
        fail "$w: document 0 does not end with its separator"
done
"$MK" --cat "$T/u16.bfs" 200 | od -An -tu2 | tr -s ' ' | grep -qx ' 11 12 13' ||
    fail "the last document (no separator) is not its tokens"
ok "--tokens u16 and u32: 201 documents, version 2, --info/--verify/--cat; joined, the file"

# one document (nanoGPT's shakespeare_char): --info warns that pack=concat would serve the
# same rows every epoch, and names shuffle=rows
python3 -c 'import struct, sys; open(sys.argv[1], "wb").write(struct.pack("<3000H", *[i % 65 for i in range(3000)]))' "$T/one.bin"
run "$MK" --quiet --tokens u16 --doc-sep 50256 "$T/one.bin" "$T/one.bfs"
expect_rc 0 "--tokens of one document"
run "$MK" --info "$T/one.bfs"
expect_rc 0 "--info of one document"
grep -q "^WARNING: *1 document for 2 rows of 1024 tokens: pack=concat cuts each epoch's rows from at most 1 document .*mount with shuffle=rows" "$T/stdout" ||
    fail "--info of one document: no warning: $(cat "$T/stdout")"
ok "--info warns of fewer documents than rows of 1024 tokens (1 for 2), not of 201 for $((ntok / 1024))"

# packing the same file twice, and re-packing the .bfs: byte-identical
run "$MK" --quiet --tokens u16 --doc-sep 50256 "$T/train.bin" "$T/again.bfs"
cmp -s "$T/u16.bfs" "$T/again.bfs" || fail "two packs of one token file differ"
run "$MK" "$T/u16.bfs" "$T/repack.bfs"
expect_rc 0 "re-pack of a token .bfs"
cmp -s "$T/u16.bfs" "$T/repack.bfs" || fail "re-packing a token .bfs changed it"
ok "deterministic; a token .bfs re-packs byte-identically"

# user mistakes
refused 2 "--tokens without --doc-sep" "--tokens needs --doc-sep T" "$MK" --tokens u16 "$T/train.bin" "$T/x.bfs"
refused 2 "--tokens u8" "'u8' is not u16, u32, npy or megatron" "$MK" --tokens u8 --doc-sep 1 "$T/train.bin" "$T/x.bfs"
run "$MK" --tokens u16 --doc-sep 70000 "$T/train.bin" "$T/x.bfs"
expect_rc 2 "--doc-sep 70000 with u16"
expect_err "does not fit in u16 tokens" "--doc-sep 70000"
refused 2 "--tokens --raw" "do not apply" "$MK" --tokens u16 --doc-sep 1 --raw "$T/train.bin" "$T/x.bfs"
refused 2 "--doc-sep without --tokens" "--doc-sep applies only with --tokens" "$MK" --doc-sep 1 "$T/train.bin" "$T/x.bfs"
head -c 5 "$T/train.bin" >"$T/odd.bin"
refused 1 "an odd byte count" "5 bytes is not a whole number of 2-byte tokens" "$MK" --tokens u16 --doc-sep 50256 "$T/odd.bin" "$T/x.bfs"
: >"$T/empty.bin"
refused 1 "an empty token file" "is empty: no tokens to pack" "$MK" --tokens u16 --doc-sep 50256 "$T/empty.bin" "$T/x.bfs"
refused 1 "a directory as token file" "not a regular file" "$MK" --tokens u16 --doc-sep 50256 "$T" "$T/x.bfs"
[ ! -e "$T/x.bfs" ] || fail "a refused pack left $T/x.bfs"
ok "refused with a message: no --doc-sep, u8, a separator over u16, image options, --doc-sep alone, odd size, empty file, a directory"

# .npy and Megatron files, written here as numpy and Megatron-LM write them (no numpy
# needed): each case's expected documents go to CASE.want, one file of u16/u32 ids each
python3 - "$T" <<'EOF'
import struct, sys
T = sys.argv[1]
def npy(path, descr, values, fmt):
    d = "{'descr': '%s', 'fortran_order': False, 'shape': (%d,), }" % (descr, len(values))
    pad = 64 - (10 + len(d) + 1) % 64
    hdr = (d + " " * pad + "\n").encode()
    open(path, "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr +
                           struct.pack("<%d%s" % (len(values), fmt), *values))
def want(name, docs, wide):
    with open(f"{T}/{name}.want", "wb") as f:
        for d in docs:
            f.write(struct.pack("<%d%s" % (len(d), "I" if wide else "H"), *d))
    open(f"{T}/{name}.ndocs", "w").write(str(len(docs)))
docs = [[5, 6, 7], [8], [9, 10, 11, 12], [13, 14]]
flat = sum(docs, [])
# u2 ids, N+1 boundaries as int64; an empty document (a repeated boundary) is left out
npy(f"{T}/a.npy", "<u2", flat, "H")
npy(f"{T}/a_off.npy", "<i8", [0, 3, 4, 4, 8, 10], "q")
want("a", docs, False)
# i4 ids over u16, starts as int32
big = [[70000, 1], [2, 3, 70001]]
npy(f"{T}/b.npy", "<i4", sum(big, []), "i")
npy(f"{T}/b_off.npy", "<i4", [0, 2], "i")
want("b", big, True)
# refusals: a negative id, offsets not from 0, a 2-D array
npy(f"{T}/neg.npy", "<i8", [1, 2, -3], "q")
npy(f"{T}/neg_off.npy", "<i8", [0, 3], "q")
npy(f"{T}/off1.npy", "<i8", [1, 3], "q")
open(f"{T}/twod.npy", "wb").write(open(f"{T}/a.npy", "rb").read().replace(b"(10,)", b"(5,2)"))
# Megatron: sequences of u16 (code 8); document 1 joins sequences 1 and 2, document 2 is
# empty, then sequence 3
def megatron(prefix, code, fmt, seqs, doc_idx):
    size = struct.calcsize(fmt)
    data, ptrs, p = b"", [], 0
    for q in seqs:
        ptrs.append(p)
        data += struct.pack("<%d%s" % (len(q), fmt), *q)
        p += len(q) * size
    open(prefix + ".bin", "wb").write(data)
    idx = b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", code)
    idx += struct.pack("<Q", len(seqs)) + struct.pack("<Q", len(doc_idx))
    idx += struct.pack("<%di" % len(seqs), *[len(q) for q in seqs])
    idx += struct.pack("<%dq" % len(seqs), *ptrs) + struct.pack("<%dq" % len(doc_idx), *doc_idx)
    open(prefix + ".idx", "wb").write(idx)
seqs = [[1, 2], [3], [4, 5, 6], [7, 7]]
megatron(f"{T}/m", 8, "H", seqs, [0, 1, 3, 3, 4])
want("m", [[1, 2], [3, 4, 5, 6], [7, 7]], False)
megatron(f"{T}/m32", 4, "i", [[100000], [5, 6]], [0, 1, 2])
want("m32", [[100000], [5, 6]], True)
idx = open(f"{T}/m.idx", "rb").read()
open(f"{T}/mtrunc.idx", "wb").write(idx[:-8])
open(f"{T}/mtrunc.bin", "wb").write(open(f"{T}/m.bin", "rb").read())
open(f"{T}/mshort.idx", "wb").write(idx)
open(f"{T}/mshort.bin", "wb").write(open(f"{T}/m.bin", "rb").read()[:-2])
EOF
joined_is() { # BFS CASE: the samples joined are CASE.want, and there are CASE.ndocs
    local n i
    n=$(cat "$T/$2.ndocs")
    [ "$("$MK" --info "$1" | sed -n 's/^samples: *\([0-9]*\) .*/\1/p')" = "$n" ] ||
        fail "$2: not $n documents"
    for i in $(seq 0 $((n - 1))); do "$MK" --cat "$1" "$i"; done >"$T/joined"
    cmp -s "$T/joined" "$T/$2.want" || fail "$2: the samples are not the expected documents"
}
run "$MK" --tokens npy --offsets "$T/a_off.npy" "$T/a.npy" "$T/a.bfs"
expect_rc 0 "--tokens npy (u2 ids, int64 boundaries)"
expect_err "packed 10 tokens (u16) in 4 documents" "--tokens npy summary"
expect_err "1 empty documents left out" "--tokens npy: the empty document"
joined_is "$T/a.bfs" a
run "$MK" --tokens npy --offsets "$T/b_off.npy" "$T/b.npy" "$T/b.bfs"
expect_rc 0 "--tokens npy (i4 ids, int32 starts)"
expect_err "(u32) in 2 documents" "--tokens npy i4: stored as u32"
joined_is "$T/b.bfs" b
run "$MK" --tokens megatron "$T/m" "$T/m.bfs"
expect_rc 0 "--tokens megatron (u16)"
expect_err "packed 8 tokens (u16) in 3 documents" "--tokens megatron summary"
joined_is "$T/m.bfs" m
run "$MK" --tokens megatron "$T/m32.idx" "$T/m32.bfs"
expect_rc 0 "--tokens megatron (i32, named by its .idx)"
joined_is "$T/m32.bfs" m32
run "$MK" --verify "$T/m32.bfs"
expect_rc 0 "--verify of a Megatron pack"
ok "--tokens npy (u2 + int64 boundaries, i4 + int32 starts) and megatron (u16, i32): the documents, empty ones left out"

refused 1 "a negative id" "the id at byte 144 is -3" "$MK" --tokens npy --offsets "$T/neg_off.npy" "$T/neg.npy" "$T/x.bfs"
refused 1 "offsets not from 0" "offset 0 is 1: offsets must start at 0" "$MK" --tokens npy --offsets "$T/off1.npy" "$T/a.npy" "$T/x.bfs"
refused 1 "a 2-D .npy" "shape is not (N,)" "$MK" --tokens npy --offsets "$T/a_off.npy" "$T/twod.npy" "$T/x.bfs"
refused 2 "--tokens npy without --offsets" "--tokens npy needs --offsets" "$MK" --tokens npy "$T/a.npy" "$T/x.bfs"
refused 2 "--tokens megatron --doc-sep" "--doc-sep applies only with --tokens u16|u32" "$MK" --tokens megatron --doc-sep 1 "$T/m" "$T/x.bfs"
refused 2 "--offsets with u16" "--offsets applies only with --tokens npy" "$MK" --tokens u16 --doc-sep 1 --offsets "$T/a_off.npy" "$T/train.bin" "$T/x.bfs"
refused 1 "a truncated .idx" "cannot hold 4 sequences" "$MK" --tokens megatron "$T/mtrunc" "$T/x.bfs"
refused 1 "a .bin shorter than its index" "is not inside the 14-byte .bin" "$MK" --tokens megatron "$T/mshort" "$T/x.bfs"
refused 1 "a missing Megatron dataset" "nothere.bin" "$MK" --tokens megatron "$T/nothere" "$T/x.bfs"
[ ! -e "$T/x.bfs" ] || fail "a refused pack left $T/x.bfs"
ok "refused with a message: a negative id, offsets not from 0, a 2-D array, no --offsets, --doc-sep or --offsets where they do not apply, a truncated .idx, a short .bin, a missing dataset"

# served: batchfs --bench runs the default pipeline (pack=concat) over it
run "$BUILD/batchfs" --bench "$T/u16.bfs" -o batch=2,seq_len=16 --batches 3
expect_rc 0 "batchfs --bench of a token .bfs"
grep -q "rows/s" "$T/stdout" || fail "--bench of a token .bfs does not count rows"
ok "batchfs --bench serves a token dataset (pack=concat)"
echo "all mkbatchfs --tokens checks passed"
