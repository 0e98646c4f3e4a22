#!/usr/bin/env bash
# tests/bench/soak.sh [SECONDS] — a long run of one mount under mixed load, not in CI:
# 8 readers of different speeds (reader i sleeps i x 15 ms after each batch, so they
# spread over epochs and the cache churns), each walking epochs in order and rolling over
# to the next epoch, a cache_dir shared by a second mount of the same pipeline that starts
# half way (its batches come from the store), for SECONDS (default 1800).
#
# Every SOAK_EVERY seconds (default 30) it prints a row: elapsed time, the daemon's RSS,
# the memory of its cgroup (v2 memory.current or v1 memory.usage_in_bytes; the
# cgroup holds this script and its readers too), its open file descriptors, batches served,
# reader errors and the daemon's own counters of failures. At the end: pass when there
# were 0 errors and, after warm-up (the first quarter), RSS and open fds stayed within
# +-5% of their mean (exit 0), else fail (exit 1).
#
# Data: an ImageFolder the test generator makes (2,000 JPEGs of 64..320 px), packed once.
# Knobs are pinned (cache_mb=64, sample_cache_mb=32) so that steady state is reached in
# minutes: with the default budget (half of RAM) the cache grows for a long time.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
secs=${1:-1800}
every=${SOAK_EVERY:-30}
work=$(mktemp -d "${TMPDIR:-/tmp}/batchfs-soak.XXXXXX")
m1=$work/m1 m2=$work/m2
mkdir -p "$m1" "$m2" "$work/store"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    fusermount3 -u "$m2" 2>/dev/null || true
    fusermount3 -u "$m1" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

"$BUILD/tests/gen_imagefolder" "$work/src" 20 100 64 320 11 >/dev/null
"$BUILD/mkbatchfs" --quiet "$work/src" "$work/ds.bfs"
opts="batch=32,size=64,epochs=100000,cache_mb=64,sample_cache_mb=32,cache_dir=$work/store,cache_dir_mb=256"
"$BUILD/batchfs" "$work/ds.bfs" "$m1" -o "$opts" -f 2>"$work/daemon1.log" &
d1=$!
for _ in $(seq 100); do mountpoint -q "$m1" && break; sleep 0.1; done
mountpoint -q "$m1" || { cat "$work/daemon1.log"; echo "soak: mount failed" >&2; exit 1; }
nb=$(ls "$m1/epoch/0" | grep -c '^batch_')

# reader MNT I: epochs in order from epoch I, every batch, sleeping I x 15 ms per batch;
# counts batches in $work/served.I and errors in $work/errors.I
reader() {
    local mnt=$1 i=$2 e=$2 k n=0 bad=0
    while :; do
        for ((k = 0; k < nb; k++)); do
            if cat "$mnt/epoch/$e/batch_$k" >/dev/null 2>>"$work/reader.$i.err"; then
                n=$((n + 1))
            else
                bad=$((bad + 1))
            fi
            echo "$n" >"$work/served.$i"
            echo "$bad" >"$work/errors.$i"
            [ "$i" -gt 0 ] && sleep "$(awk -v i="$i" 'BEGIN{print i*0.015}')"
        done
        e=$((e + 1))
    done
}
for i in 0 1 2 3 4 5 6 7; do
    mnt=$m1
    [ "$i" -ge 6 ] && mnt=$m2 # readers 6 and 7 use the second mount once it is up
    if [ "$mnt" = "$m1" ]; then reader "$mnt" "$i" & pids+=($!); fi
done

# the daemon's cgroup memory: v1's memory controller where mounted, else v2's
cgmem=/sys/fs/cgroup/memory$(sed -n 's/^[0-9]*:memory://p' /proc/$d1/cgroup)/memory.usage_in_bytes
[ -r "$cgmem" ] || cgmem=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/$d1/cgroup)/memory.current
stat_of() { python3 -c "
import json, sys
s = json.load(open(sys.argv[1]))
print(s['batches']['failed'], s['reads']['errors'], s.get('cache_dir', {}).get('corrupt', 0))" "$1/stats"; }
sum_files() { cat "$work"/$1.* 2>/dev/null | awk '{s+=$1} END{print s+0}'; }

printf '%7s %9s %11s %5s %9s %7s %s\n' "t_s" "rss_MiB" "cgroup_MiB" "fds" "served" "errors" "daemon failed/read_errors/store_corrupt"
t0=$SECONDS started2=0 rows=()
while [ $((SECONDS - t0)) -lt "$secs" ]; do
    sleep "$every"
    t=$((SECONDS - t0))
    if [ $started2 = 0 ] && [ "$t" -ge $((secs / 2)) ]; then
        "$BUILD/batchfs" "$work/ds.bfs" "$m2" -o "$opts" -f 2>"$work/daemon2.log" &
        pids+=($!)
        for _ in $(seq 100); do mountpoint -q "$m2" && break; sleep 0.1; done
        reader "$m2" 6 & pids+=($!)
        reader "$m2" 7 & pids+=($!)
        started2=1
    fi
    kill -0 $d1 2>/dev/null || { echo "soak: the daemon died" >&2; cat "$work/daemon1.log" >&2; exit 1; }
    rss=$(awk '/^VmRSS/{printf "%.1f", $2/1024}' /proc/$d1/status)
    cgm=$(awk '{printf "%.1f", $1/1048576}' "$cgmem" 2>/dev/null || echo "?")
    fds=$(ls /proc/$d1/fd | wc -l)
    row="$t $rss $cgm $fds $(sum_files served) $(sum_files errors)"
    rows+=("$row")
    printf '%7s %9s %11s %5s %9s %7s %s\n' $row "$(stat_of "$m1" | tr ' ' /)"
done

errors=$(sum_files errors)
read -r failed rerr corrupt <<<"$(stat_of "$m1")"
printf '%s\n' "${rows[@]}" | awk -v warm="$((secs / 4))" -v errors="$errors" -v failed="$failed" '
    $1 >= warm { n++; rss[n] = $2; fds[n] = $4; srss += $2; sfds += $4 }
    END {
        if (n == 0) { print "soak: too short for a verdict"; exit 1 }
        mr = srss / n; mf = sfds / n; ok = 1
        for (i = 1; i <= n; i++) {
            if (rss[i] < mr * 0.95 || rss[i] > mr * 1.05) ok = 0
            if (fds[i] < mf * 0.95 || fds[i] > mf * 1.05) ok = 0
        }
        printf "after warm-up: RSS mean %.1f MiB, fds mean %.1f, over %d samples; reader errors %d, failed batches %d\n", mr, mf, n, errors, failed
        if (errors + failed > 0) ok = 0
        print ok ? "soak: PASS" : "soak: FAIL"
        exit !ok
    }'
