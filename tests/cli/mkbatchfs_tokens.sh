#!/usr/bin/env bash
# tests/cli/mkbatchfs_tokens.sh — mkbatchfs --tokens: a flat file of token ids (nanoGPT's
# train.bin, u16 and u32) packs into one token-sequence sample per document; --info,
# --cat and --verify work on it; the documents joined are the file; re-packing keeps it;
# every user mistake is refused with a message naming it; a mount of it says that sequence
# pipelines are not built yet.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
MK=$BUILD/mkbatchfs

T=$(mktemp -d "${TMPDIR:-/tmp}/cli-tokens.XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() {
    echo "FAIL: $*" >&2
    for f in stdout stderr; do
        if [ -s "$T/$f" ]; then echo "--- $f of the last command:" >&2; head -n 20 "$T/$f" >&2; fi
    done
    exit 1
}
ok() { echo "ok - $*"; }
rc=0
run() { set +e; "$@" >"$T/stdout" 2>"$T/stderr"; rc=$?; set -e; }
expect_rc() { [ "$rc" -eq "$1" ] || fail "$2: exit status $rc, expected $1"; }
expect_err() { grep -qF -- "$1" "$T/stderr" || fail "$2: stderr does not mention '$1'"; }

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

# packing the same file twice, and re-packing the .bfs: byte-identical
run "$MK" --quiet --tokens u16 --doc-sep 50256 "$T/train.bin" "$T/again.bfs"
cmp -s "$T/u16.bfs" "$T/again.bfs" || fail "two packs of one token file differ"
run "$MK" "$T/u16.bfs" "$T/repack.bfs"
expect_rc 0 "re-pack of a token .bfs"
cmp -s "$T/u16.bfs" "$T/repack.bfs" || fail "re-packing a token .bfs changed it"
ok "deterministic; a token .bfs re-packs byte-identically"

# user mistakes
run "$MK" --tokens u16 "$T/train.bin" "$T/x.bfs"
expect_rc 2 "--tokens without --doc-sep"
expect_err "--tokens needs --doc-sep T" "--tokens without --doc-sep"
run "$MK" --tokens u8 --doc-sep 1 "$T/train.bin" "$T/x.bfs"
expect_rc 2 "--tokens u8"
expect_err "'u8' is not u16 or u32" "--tokens u8"
run "$MK" --tokens u16 --doc-sep 70000 "$T/train.bin" "$T/x.bfs"
expect_rc 2 "--doc-sep 70000 with u16"
expect_err "does not fit in u16 tokens" "--doc-sep 70000"
run "$MK" --tokens u16 --doc-sep 1 --raw "$T/train.bin" "$T/x.bfs"
expect_rc 2 "--tokens --raw"
expect_err "do not apply" "--tokens --raw"
run "$MK" --doc-sep 1 "$T/train.bin" "$T/x.bfs"
expect_rc 2 "--doc-sep without --tokens"
expect_err "--doc-sep applies only with --tokens" "--doc-sep without --tokens"
head -c 5 "$T/train.bin" >"$T/odd.bin"
run "$MK" --tokens u16 --doc-sep 50256 "$T/odd.bin" "$T/x.bfs"
expect_rc 1 "an odd byte count"
expect_err "5 bytes is not a whole number of 2-byte tokens" "an odd byte count"
: >"$T/empty.bin"
run "$MK" --tokens u16 --doc-sep 50256 "$T/empty.bin" "$T/x.bfs"
expect_rc 1 "an empty token file"
expect_err "is empty: no tokens to pack" "an empty token file"
run "$MK" --tokens u16 --doc-sep 50256 "$T" "$T/x.bfs"
expect_rc 1 "a directory as token file"
expect_err "not a regular file" "a directory as token file"
[ ! -e "$T/x.bfs" ] || fail "a refused pack left $T/x.bfs"
ok "refused with a message: no --doc-sep, u8, a separator over u16, image options, --doc-sep alone, odd size, empty file, a directory"

# not served yet: a clear message, not a crash or substituted images
run "$BUILD/batchfs" --bench "$T/u16.bfs" -o batch=4
expect_rc 1 "batchfs --bench of a token .bfs"
expect_err "holds token sequences" "batchfs --bench of a token .bfs"
expect_err "not built yet" "batchfs --bench of a token .bfs"
ok "batchfs refuses a token dataset: sequence pipelines are not built yet"
echo "all mkbatchfs --tokens checks passed"
