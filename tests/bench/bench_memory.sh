#!/usr/bin/env bash
# tests/bench/bench_memory.sh CORPUS [EPOCHS] — where batches live (docs/engine.md, "Batch
# memory"): one reader reads EPOCHS (default 12) fresh epochs in order, batch by batch,
# through a fresh mount, with 4 KiB batch files (huge_pages=0), with huge_pages=auto (the
# default: 4 KiB pages until the daemon recycles memory, then 2 MiB pages for batches of
# 2 MiB or more) and with huge_pages=1; prints images/s per epoch and the mean over the first and the last third.
# With the passed-batch bound (256 MiB at first) the daemon recycles memory after a few
# hundred MiB, so the last third shows the steady state; the first third shows the cost of
# fresh pages.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
corpus=${1:?usage: bench_memory.sh CORPUS_DIR [EPOCHS]}
epochs=${2:-12}
opts=${BENCH_OPTS:-batch=256,size=224}
work=$(mktemp -d "${TMPDIR:-/tmp}/batchfs-bmem.XXXXXX")
mnt=$work/mnt
mkdir -p "$mnt"
cleanup() { fusermount3 -u "$mnt" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
"$BUILD/mkbatchfs" --quiet "$corpus" "$work/c.bfs"
for extra in ",huge_pages=0" ",huge_pages=auto" ",huge_pages=1"; do
    "$BUILD/batchfs" "$work/c.bfs" "$mnt" -o "$opts$extra"
    rates=$(python3 tests/bench/read_epochs.py "$mnt" "$epochs")
    hp=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['passthrough']['huge_pages'])" "$mnt/stats")
    fusermount3 -u "$mnt"
    third=$((epochs / 3))
    first=$(echo "$rates" | head -n "$third" | awk '{s+=$1} END{printf "%.0f", s/NR}')
    last=$(echo "$rates" | tail -n "$third" | awk '{s+=$1} END{printf "%.0f", s/NR}')
    echo "${extra#,} (huge pages in use: $hp): images/s per epoch: $(echo $rates)"
    echo "   first third $first, last third $last images/s"
    sleep 3 # let the freed memory go (free page reporting) as between two real jobs
done
