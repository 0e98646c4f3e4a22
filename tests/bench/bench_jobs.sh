#!/usr/bin/env bash
# tests/bench/bench_jobs.sh CORPUS — many jobs, one host (issue "shared cache"), in one run:
#  1. 4 jobs (processes: shell loops of `cat`) read epoch 0 of one mount at once vs 1 job
#     alone on a fresh mount: daemon CPU time 4 jobs / 1 job (target <= 1.25) and the
#     slowest of the 4 jobs' images/s / the solo job's (target >= 0.90);
#  2. the same, with the 4 jobs staggered (each starts when the previous one is 1 batch in)
#     and one of them slow (a pause per batch, a training step): every job's bytes are
#     compared with the solo job's; daemon CPU / solo;
#  3. cache_dir: a second mount of the same pipeline with a warm cache_dir: daemon CPU of
#     the second mount / the first (target <= 0.10).
# Daemon CPU is utime+stime of the daemon process (/proc/PID/stat), started in the
# foreground so its pid is known (BFS_DEBUG=1 also prints its utime/stime ticks per
# mount). Prints ratios, asserts nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
corpus=${1:?usage: bench_jobs.sh CORPUS_DIR}
opts=${BENCH_OPTS:-batch=128,size=224}
work=$(mktemp -d "${TMPDIR:-/tmp}/batchfs-bjobs.XXXXXX")
mnt=$work/mnt
store=/dev/shm/batchfs-bjobs.$$
mkdir -p "$mnt"
dpid=
cleanup() {
    fusermount3 -u "$mnt" 2>/dev/null || true
    [ -n "$dpid" ] && wait "$dpid" 2>/dev/null || true
    rm -rf "$work" "$store"
}
trap cleanup EXIT
now() { date +%s.%N; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }
tck=$(getconf CLK_TCK)
cpu_of() { awk -v t="$tck" '{printf "%.3f", ($14 + $15) / t}' "/proc/$1/stat"; }
mount_it() { # extra options
    "$BUILD/batchfs" "$work/c.bfs" "$mnt" -f -o "$opts${1:+,$1}" 2>>"$work/daemon.log" &
    dpid=$!
    for _ in $(seq 100); do mountpoint -q "$mnt" && return 0; sleep 0.1; done
    echo "mount failed: $(cat "$work/daemon.log")" >&2; exit 1
}
umount_it() { # prints the daemon's CPU seconds
    local c; c=$(cpu_of "$dpid"); [ -n "${BFS_DEBUG:-}" ] && awk '{print "utime", $14, "stime", $15}' /proc/$dpid/stat >&2
    fusermount3 -u "$mnt"; wait "$dpid" || true; dpid=
    echo "$c"
}
job() { # out_dir|- pause: read epoch 0 in order, one `cat` per batch; prints seconds
    local out=$1 pause=$2 t0 k dst=/dev/null
    [ "$out" = - ] || mkdir -p "$out"
    t0=$(now)
    for k in $(seq 0 $((nb - 1))); do
        [ "$out" = - ] || dst=$out/$k
        cat "$mnt/epoch/0/batch_$k" >"$dst"
        [ "$pause" = 0 ] || sleep "$pause"
    done
    awk -v a="$t0" -v b="$(now)" 'BEGIN{print b-a}'
}

"$BUILD/mkbatchfs" --quiet "$corpus" "$work/c.bfs"
mount_it
nb=$(ls "$mnt/epoch/0" | wc -l)
per=$(python3 -c "import os; print(os.getxattr('$mnt/epoch/0/batch_0', 'user.batchfs.samples').decode())")
umount_it >/dev/null
echo "corpus $corpus: $nb batches of $per images per epoch ($opts)"
mkdir -p /dev/shm/batchfs-bjobs.$$.out
outs=/dev/shm/batchfs-bjobs.$$.out
trap 'cleanup; rm -rf "$outs"' EXIT

# 1. solo, then 4 at once (output to /dev/null: on 2 cores, copying the bytes out would
# make the readers, not the pipeline, the bottleneck); the reference bytes for 2 and 3
mount_it
t_solo=$(job - 0)
cpu_solo=$(umount_it)
mount_it
for j in 1 2 3 4; do job - 0 >"$work/t$j" & done
wait $(jobs -p | grep -v "^$dpid$") 2>/dev/null || true
cpu_four=$(umount_it)
slowest=$(sort -g "$work"/t[1-4] | tail -n 1)
echo "1. 4 jobs at once: daemon CPU ${cpu_four}s vs ${cpu_solo}s for 1 job: $(ratio "$cpu_four" "$cpu_solo") (target <= 1.25);" \
     "slowest job $(ratio "$t_solo" "$slowest") of the solo job's images/s (target >= 0.90)"
mount_it
job "$outs/solo" 0 >/dev/null
umount_it >/dev/null

# 2. staggered, one slow
mount_it
step=$(awk -v t="$t_solo" -v n="$nb" 'BEGIN{printf "%.3f", 1.5 * t / n}')
for j in 1 2 3 4; do
    pause=0; [ "$j" = 4 ] && pause=$step
    job "$outs/s$j" "$pause" >"$work/s$j" &
    sleep "$(awk -v t="$t_solo" -v n="$nb" 'BEGIN{printf "%.3f", t / n}')"
done
wait $(jobs -p | grep -v "^$dpid$") 2>/dev/null || true
stats=$(cat "$mnt/stats")
cpu_stag=$(umount_it)
for j in 1 2 3 4; do
    for k in $(seq 0 $((nb - 1))); do
        cmp -s "$outs/solo/$k" "$outs/s$j/$k" || { echo "staggered job $j batch $k differs" >&2; exit 1; }
    done
done
computed=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['batches']['computed'])" "$stats")
echo "2. 4 staggered jobs (one pausing ${step}s per batch): daemon CPU $(ratio "$cpu_stag" "$cpu_solo") of 1 job;" \
     "$computed computations for $nb batches; bytes identical"

# 3. cache_dir: first mount computes and publishes, the second reads the store
mount_it "cache_dir=$store"
job "$outs/c1" 0 >/dev/null
cpu_c1=$(umount_it)
mount_it "cache_dir=$store"
job "$outs/c2" 0 >/dev/null
cpu_c2=$(umount_it)
for k in $(seq 0 $((nb - 1))); do
    cmp -s "$outs/solo/$k" "$outs/c2/$k" || { echo "cache_dir batch $k differs" >&2; exit 1; }
done
echo "3. second mount with a warm cache_dir: daemon CPU ${cpu_c2}s vs ${cpu_c1}s: $(ratio "$cpu_c2" "$cpu_c1") (target <= 0.10); bytes identical"
