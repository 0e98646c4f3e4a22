#!/usr/bin/env bash
# tests/cli/tokens_pack.sh — the token pipelines (pack=concat|pad|bucket, docs/sequences.md)
# against a reference implementation in numpy (tests/tokens_ref.py), byte for byte: u16
# and u32 datasets, several epochs, shards, drop_last both ways, shuffle=none, positions,
# pad_id, batch_tokens; coordinated reads (batch K of every replica has the same shape);
# shuffle=rows (a one-document corpus: other rows every epoch) and the warning of a concat
# pipeline with fewer documents than rows; options of the wrong kind and pipelines without
# batches refused with a message.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
. tests/pyenv.sh
MK=$BUILD/mkbatchfs
TOOL=$BUILD/tests/engine_tool

T=$(mktemp -d "${TMPDIR:-/tmp}/cli-tokpack.XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# 240 documents of 1..600 tokens (ids < 50000, the last one the separator 50256, as in
# nanoGPT's train.bin) as u16; the same documents as u32 ids shifted past 2^16 in a .npy
"$PY" - "$T" <<'EOF'
import sys, numpy as np
T = sys.argv[1]
rng = np.random.default_rng(11)
docs = []
for i in range(240):
    n = int(rng.choice([rng.integers(1, 40), rng.integers(40, 200), rng.integers(200, 600)]))
    docs.append(np.append(rng.integers(0, 50000, n - 1), 50256).astype(np.int64))
np.concatenate(docs).astype("<u2").tofile(T + "/train.bin")
np.savez(T + "/docs16.npz", **{"d%d" % i: d for i, d in enumerate(docs)})
big = [d + 70000 for d in docs]
np.save(T + "/ids32.npy", np.concatenate(big).astype("<u4"))
np.save(T + "/off32.npy", np.cumsum([0] + [len(d) for d in big]).astype("<i8"))
np.savez(T + "/docs32.npz", **{"d%d" % i: d for i, d in enumerate(big)})
one = rng.integers(0, 65, 6000)  # one document, as nanoGPT's shakespeare_char
one.astype("<u2").tofile(T + "/one.bin")
np.savez(T + "/docs1.npz", d0=one)
EOF
"$MK" --tokens u16 --doc-sep 50256 "$T/train.bin" "$T/t16.bfs" >/dev/null 2>&1 || fail "pack u16"
"$MK" --tokens npy --offsets "$T/off32.npy" "$T/ids32.npy" "$T/t32.bfs" >/dev/null 2>&1 ||
    fail "pack u32"
"$MK" --tokens u16 --doc-sep 50256 "$T/one.bin" "$T/one.bfs" >/dev/null 2>&1 || fail "pack one"

check() { # BFS DOCS OPTIONS EPOCH
    local bfs=$1 docs=$2 o=$3 ep=$4 noshard
    noshard=$o # pad's plan shards the order itself; concat and bucket order all documents
    case $o in *pack=pad*) noshard=$(echo "$o" | sed -E 's/(^|,)shard=[0-9]+\/[0-9]+//') ;; esac
    rm -rf "$T/b" && mkdir "$T/b"
    "$TOOL" order "$bfs" "$noshard" "$ep" - >"$T/order" 2>/dev/null || fail "order: $o"
    "$TOOL" epoch "$bfs" "$o" "$ep" "$T/b" 2>"$T/log" || { cat "$T/log" >&2; fail "engine_tool epoch: $o"; }
    "$PY" tests/tokens_ref.py "$docs" "$T/order" "$o" "$ep" "$T/b" || fail "reference: $o epoch $ep"
}
for ep in 0 3; do
    check "$T/t16.bfs" "$T/docs16.npz" "batch=3,seq_len=50" $ep
    check "$T/t16.bfs" "$T/docs16.npz" "batch=4,seq_len=128,positions=1,shard=1/3,seed=9" $ep
    check "$T/t16.bfs" "$T/docs16.npz" "pack=pad,batch=4,seq_len=100,pad_id=9" $ep
    check "$T/t16.bfs" "$T/docs16.npz" "pack=bucket,buckets=40:200:600,batch=3" $ep
    check "$T/t16.bfs" "$T/docs16.npz" "pack=bucket,buckets=64:256,batch_tokens=1024,shard=1/2,drop_last=0" $ep
done
check "$T/t16.bfs" "$T/docs16.npz" "batch=5,seq_len=64,shuffle=none,drop_last=0" 1
check "$T/t16.bfs" "$T/docs16.npz" "batch=4,seq_len=80,shuffle=pages,shard=1/2" 2
check "$T/t16.bfs" "$T/docs16.npz" "pack=pad,batch=7,seq_len=30,shard=2/3,drop_last=0" 2
check "$T/t16.bfs" "$T/docs16.npz" "pack=bucket,buckets=100:300:500,batch=2,shuffle=none,shard=0/2" 0
check "$T/t32.bfs" "$T/docs32.npz" "batch=2,seq_len=333,positions=1" 1
check "$T/t32.bfs" "$T/docs32.npz" "pack=pad,batch=3,seq_len=256" 0
echo "ok - concat, pad and bucket equal the numpy reference (u16, u32, shards, epochs)"

# shuffle=rows: the windows of the documents in dataset order, permuted per epoch (the
# reference recomputes the permutation: both of bfs_perm's forms, W <= 64 and W > 64)
for ep in 0 1; do
    check "$T/one.bfs" "$T/docs1.npz" "batch=4,seq_len=64,shuffle=rows,shard=1/3" $ep
    grep -q "warning" "$T/log" && fail "shuffle=rows warned: $(cat "$T/log")"
    cp "$T/order" "$T/rows$ep" && rm -rf "$T/rows$ep.b" && cp -r "$T/b" "$T/rows$ep.b"
    check "$T/t16.bfs" "$T/docs16.npz" "batch=3,seq_len=50,shuffle=rows,positions=1,drop_last=0,shard=0/2,seed=5" $ep
done
check "$T/t32.bfs" "$T/docs32.npz" "batch=2,seq_len=333,shuffle=rows" 3
check "$T/one.bfs" "$T/docs1.npz" "batch=2,seq_len=100,shuffle=rows,seed=3" 2 # 60 rows: a table
"$TOOL" order "$T/one.bfs" "batch=4,seq_len=64,shuffle=rows" 1 - >"$T/rows1.all"
cmp -s "$T/rows1" "$T/rows1.all" || fail "shuffle=rows: the row order depends on shard="
"$TOOL" order "$T/one.bfs" "batch=4,seq_len=64,shuffle=rows,seed=1" 1 - >"$T/rows1.seed"
cmp -s "$T/rows1" "$T/rows1.seed" && fail "shuffle=rows: seed= does not change the row order"
"$PY" - "$T" <<'EOF' || fail "shuffle=rows: epochs"
import os, sys
import numpy as np
from safetensors.numpy import load_file
T = sys.argv[1]
perm = [[int(x) for x in open("%s/rows%d" % (T, e)).read().split()[2:]] for e in (0, 1)]
assert perm[0] != perm[1] and perm[0] != sorted(perm[0]), "the rows are not shuffled per epoch"
n = len(os.listdir(T + "/rows0.b"))
same = sum(np.array_equal(load_file("%s/rows0.b/batch_%d" % (T, k))["tokens"],
                          load_file("%s/rows1.b/batch_%d" % (T, k))["tokens"]) for k in range(n))
assert n > 2 and same == 0, (n, same)
print("ok - one document, shuffle=rows: %d batches of epoch 0 all differ from epoch 1's" % n)
EOF
# without it: batch K is the same every epoch, and the pipeline says so
for ep in 0 1; do
    rm -rf "$T/same$ep" && mkdir "$T/same$ep"
    "$TOOL" epoch "$T/one.bfs" "batch=4,seq_len=64" $ep "$T/same$ep" 2>"$T/log$ep" || fail "one document"
done
"$PY" - "$T" <<'EOF' || fail "one document without shuffle=rows: epochs differ"
import os, sys
import numpy as np
from safetensors.numpy import load_file
T = sys.argv[1]
n = len(os.listdir(T + "/same0"))
assert n > 2 and all(np.array_equal(load_file("%s/same0/batch_%d" % (T, k))["tokens"],
                                    load_file("%s/same1/batch_%d" % (T, k))["tokens"])
                     for k in range(n))
EOF
grep -qF "warning: $T/one.bfs: 1 document for 93 rows of seq_len=64 per epoch: pack=concat shuffles documents, not rows" \
    "$T/log0" || fail "no warning of 1 document for 93 rows: $(cat "$T/log0")"
grep -qF "use shuffle=rows" "$T/log0" || fail "the warning does not name shuffle=rows"
"$TOOL" epoch "$T/one.bfs" "batch=4,seq_len=64,shuffle=none" 0 "$T/same0" 2>"$T/log" || fail "shuffle=none"
grep -q warning "$T/log" && fail "shuffle=none warned: $(cat "$T/log")"
"$TOOL" epoch "$T/t16.bfs" "batch=4,seq_len=1024" 0 "$T/same0" 2>"$T/log" || fail "240 documents"
grep -q warning "$T/log" && fail "240 documents for 43 rows warned: $(cat "$T/log")"
"$TOOL" epoch "$T/t16.bfs" "batch=4,seq_len=64,shuffle=pages" 0 "$T/same0" 2>"$T/log" || fail "240 documents"
grep -qF "240 documents for 693 rows of seq_len=64" "$T/log" || fail "no warning for 240 documents, 693 rows: $(cat "$T/log")"
echo "ok - shuffle=rows against the reference; fewer documents than rows warned of unless shuffle=rows|none"

# coordinated reads: batch K of every replica comes from the same bucket
o="pack=bucket,buckets=40:200:600,batch=2,seed=4"
for r in 0 1 2; do
    rm -rf "$T/r$r" && mkdir "$T/r$r"
    "$TOOL" epoch "$T/t16.bfs" "$o,shard=$r/3" 5 "$T/r$r" || fail "replica $r"
done
"$PY" - "$T" <<'EOF' || fail "replicas out of step"
import os, sys
from safetensors.numpy import load_file
T = sys.argv[1]
n = [len(os.listdir("%s/r%d" % (T, r))) for r in range(3)]
assert n[0] == n[1] == n[2], n
widths = set()
for k in range(n[0]):
    s = {load_file("%s/r%d/batch_%d" % (T, r, k))["tokens"].shape for r in range(3)}
    assert len(s) == 1, (k, s)
    widths |= s
assert len(widths) > 1, widths   # the epoch does use several buckets
docs = [set(load_file("%s/r%d/batch_%d" % (T, r, k))["indices"].tolist())
        for r in range(3) for k in range(n[0])]
assert sum(map(len, docs)) == len(set().union(*docs)), "a document served twice"
print("ok - 3 replicas: %d batches each, the same shape at every step, %d shapes" % (n[0], len(widths)))
EOF

# refusals
refused() { # WHAT MESSAGE OPTIONS
    if "$TOOL" batch "$T/t16.bfs" "$3" 0 0 "$T/x" 2>"$T/err"; then fail "$1 accepted"; fi
    grep -qF -- "$2" "$T/err" || fail "$1: stderr lacks '$2': $(cat "$T/err")"
}
refused "size= on tokens" "size= is an image option" "size=64"
refused "buckets= without pack=bucket" "buckets= applies to pack=bucket only" "buckets=8:16"
refused "pack=bucket without buckets" "pack=bucket needs buckets=" "pack=bucket"
refused "seq_len= with pack=bucket" "seq_len= does not apply to pack=bucket" \
    "pack=bucket,buckets=50:600,seq_len=512"
refused "rows longer than the dataset" "fewer than one batch of 256" "seq_len=4096"
refused "too few documents per bucket" "no bucket holds enough" "pack=bucket,buckets=5:6,batch=250"
refused "shuffle=rows with pack=pad" "shuffle=rows permutes the rows cut from token documents (pack=concat), and pack=pad serves one document per row; use shuffle=full, pages or none" "pack=pad,shuffle=rows"
refused "shuffle=rows with pack=bucket" "and pack=bucket serves one document per row" "pack=bucket,buckets=50:600,shuffle=rows"
echo "ok - refused with a message: image options, buckets= without pack=bucket, no batches, shuffle=rows with pad|bucket"
echo "all token pipeline checks passed"
