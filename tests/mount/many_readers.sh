#!/usr/bin/env bash
# tests/mount/many_readers.sh — several jobs read one mount at different speeds:
#  - 4 reader processes read all of epoch 0 concurrently, one of them slowly (a pause per
#    batch, standing in for a training step), with an in-memory cache of about 2 batches,
#    so the slow reader falls behind what the cache keeps;
#  - every reader gets exactly the reference bytes (engine_tool, in-process) for every
#    batch: batches evicted before the slow reader got them are recomputed identically;
#  - sharing works: the readers together cause far fewer computations than separate jobs
#    would (computed < 3 x batches); computations beyond 6 are the slow reader's
#    recomputed batches (the test prints the count).
# 96 images, batch=16 (6 batches of ~440 KB), size=96, cache_mb=1. A few seconds.
. "$(dirname "$0")/lib.sh"
require_fuse

"$GEN" "$T/images" 3 32 48 120 9
"$MKBATCHFS" --quiet "$T/images" "$T/d.bfs"
OPTS=batch=16,size=96,seed=11
mkdir "$T/ref" "$T/m"
for k in $(seq 0 5); do ref_batch "$T/d.bfs" "$OPTS" 0 "$k" "$T/ref/$k"; done
one=$(stat -c %s "$T/ref/0")
mb=$(( (2 * one) >> 20 )); [ "$mb" -ge 1 ] || mb=1 # about two batches
mount_bfs "$T/d.bfs" "$T/m" -o "$OPTS,cache_mb=$mb,prefetch=1"

reader() { # name pause_seconds
    local name=$1 pause=$2 k
    mkdir -p "$T/out/$name"
    for k in $(seq 0 5); do
        cat "$T/m/epoch/0/batch_$k" >"$T/out/$name/$k" || { echo "read $k failed" >"$T/out/$name.err"; return 1; }
        sleep "$pause"
    done
}
pids=()
for r in fast1 fast2 fast3; do reader "$r" 0 & pids+=($!); done
reader slow 0.3 & slow=$!
for p in "${pids[@]}"; do wait "$p" || fail "a reader failed: $(cat "$T"/out/*.err 2>/dev/null)"; done
# The kernel page cache would serve the slow reader whatever the daemon evicted; drop it
# (root only) so the slow reader's remaining batches must come from the daemon again.
dropped=0
if [ -w /proc/sys/vm/drop_caches ]; then sync; echo 1 >/proc/sys/vm/drop_caches; dropped=1; fi
wait "$slow" || fail "the slow reader failed: $(cat "$T"/out/*.err 2>/dev/null)"

for r in fast1 fast2 fast3 slow; do
    for k in $(seq 0 5); do
        cmp -s "$T/ref/$k" "$T/out/$r/$k" || fail "reader $r got wrong bytes for batch $k"
    done
done
ok "4 concurrent readers (one slow) got the reference bytes for all 6 batches"

computed=$(python3 -c "import json; print(json.load(open('$T/m/stats'))['batches']['computed'])")
[ "$computed" -ge 6 ] || fail "computed $computed < 6 batches"
[ "$computed" -lt 18 ] || fail "computed $computed batches for 4 readers of 6: no sharing"
if [ "$dropped" = 1 ] && [ "$computed" -eq 6 ]; then
    slow_left=$(python3 -c "import json; s=json.load(open('$T/m/stats'))['prefetch']['streams']; print(len(s))")
    echo "note: the slow reader needed no recomputation (it was still within the cache window; $slow_left streams)"
fi
ok "shared computation: $computed batch computations for 4 readers x 6 batches (cache of about 2)"
