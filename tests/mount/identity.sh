#!/usr/bin/env bash
# tests/mount/identity.sh — the mount serves the bytes of a recorded build. A fixed corpus
# made here (images, a multi-field dataset, token documents, a mixture of two image sets)
# is mounted with a dozen option sets; the SHA-256 of each set's `pipeline` text and of
# every batch of epochs 0 and 1 must equal tests/identity.sha256, recorded from b088b8d
# (before issue 33's redesign), so that a refactor of the executor, the service or the
# facade cannot change a byte unseen.
#
# A change that means to change bytes (a new default, a fixed resampler) re-records:
#   RECORD=1 BUILD=build bash tests/mount/identity.sh
# and says in its commit which sets changed and why. The corpus comes from the suite's
# generators with fixed seeds, so the hashes hold wherever the same libjpeg-turbo encodes.
. "$(dirname "$0")/lib.sh"
require_fuse
REF=$PWD/tests/identity.sha256
GF=$BUILD/tests/gen_fields

"$GEN" "$T/img" 3 16 40 160 11 >/dev/null || fail "gen_imagefolder img"
"$GEN" "$T/imb" 2 9 40 120 12 >/dev/null || fail "gen_imagefolder imb"
"$MKBATCHFS" "$T/img" "$T/a.bfs" >/dev/null 2>&1 || fail "mkbatchfs img"
"$MKBATCHFS" "$T/imb" "$T/b.bfs" >/dev/null 2>&1 || fail "mkbatchfs imb"
"$GF" "$T/f.bfs" 24 3 >/dev/null || fail "gen_fields"
python3 - "$T" <<'PY'
import random, struct, sys
random.seed(17)
ids = []
for d in range(60):
    ids += [random.randrange(0, 50000) for _ in range(random.randrange(1, 200))] + [50256]
open(sys.argv[1] + "/t.bin", "wb").write(struct.pack("<%dH" % len(ids), *ids))
PY
"$MKBATCHFS" --tokens u16 --doc-sep 50256 "$T/t.bin" "$T/t.bfs" >/dev/null 2>&1 ||
    fail "mkbatchfs --tokens"
# pack=concat over 60 documents warns that rows outnumber documents (docs/sequences.md)
expect_log '^batchfs: warning: .*/t\.bfs: 60 documents for [0-9]+ rows of seq_len=[0-9]+ per epoch: .*$'

# NAME SOURCE OPTIONS: one set per line
SETS="train a.bfs batch=8,size=48,seed=3
eval a.bfs batch=8,size=40,augment=eval,drop_last=0
f32_nchw a.bfs batch=6,size=32,seed=4,dtype=f32,layout=nchw,scale=0.3:1,flip=1
bf16 a.bfs batch=5,size=32,seed=5,dtype=bf16,normalize=0.5,0.5,0.5/0.25,0.25,0.25
pages a.bfs batch=8,size=32,seed=6,shuffle=pages
noshuffle a.bfs batch=7,size=32,augment=none,shuffle=none,drop_last=0
shard_pad a.bfs batch=4,size=32,seed=7,shard=1/3,pad=1,drop_last=0
threads1 a.bfs batch=8,size=48,seed=3,threads=1,prefetch=0,sample_cache_mb=16
fields f.bfs batch=4,size=32,seed=8
mix - batch=8,size=32,seed=9,source=a.bfs:0.7+b.bfs:0.3
tokens t.bfs seq_len=64,batch=4,positions=1,seed=10
rows t.bfs seq_len=64,batch=4,shuffle=rows,seed=11
bucket t.bfs pack=bucket,buckets=16:64:200,batch=3,seed=12"

out=$T/sums
: >"$out"
n=0
while read -r name src opts; do
    n=$((n + 1))
    m=$T/m$n
    mkdir "$m"
    case $src in -) src= ;; *) src=$T/$src ;; esac
    mount_bfs "$src" "$m" -o "epochs=2,$opts"
    # the fingerprint and the data-changing options: the pipeline text without paths
    printf '%s pipeline %s\n' "$name" "$(grep -v '^source' "$m/pipeline" | sha256sum | cut -c1-64)" >>"$out"
    for e in 0 1; do
        for f in $(ls "$m/epoch/$e" | sort -t_ -k2 -n); do
            printf '%s %s/%s %s\n' "$name" "$e" "$f" "$(sha256sum <"$m/epoch/$e/$f" | cut -c1-64)" >>"$out"
        done
    done
    unmount_bfs "$m"
done <<<"$SETS"

if [ "${RECORD:-0}" = 1 ]; then
    {
        echo "# tests/identity.sha256 — recorded by tests/mount/identity.sh (RECORD=1) from $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
        echo "# SET WHAT SHA-256 (pipeline: its text without source lines; E/batch_K: a batch)"
        cat "$out"
    } >"$REF"
    ok "recorded $(wc -l <"$out") hashes of $n option sets in $REF"
    exit 0
fi
[ -f "$REF" ] || fail "$REF is missing: record it with RECORD=1 (see this file's head)"
if ! diff <(grep -v '^#' "$REF") "$out" >"$T/diff"; then
    sed 's/^/    /' "$T/diff" | head -40 >&2
    fail "batches differ from the recorded build ($(grep -c '^[<>]' "$T/diff") line(s) of the diff above: < recorded, > now)"
fi
ok "$(wc -l <"$out") hashes of $n option sets equal the recorded build's"
