#!/usr/bin/env bash
# tests/bench/bench_cold.sh CORPUS [MBPS...] — a first epoch from a cold disk (issue
# "Autotuning", cold data): the page cache is dropped, the daemon's disk reads are
# throttled to MBPS MB/s (a blkio cgroup: v1 blkio.throttle or v2 io.max), and one reader
# reads epoch 0 in order; once with the payload read-ahead (posix_fadvise WILLNEED when a
# batch starts, the default) and once without (BATCHFS_NO_READAHEAD=1), alternating, 2
# rounds each. Prints images/s and the ratio. Needs root (drop_caches, cgroups); skips
# with a message otherwise. Default throttles: 100 and 200 MB/s.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
corpus=${1:?usage: bench_cold.sh CORPUS_DIR [MBPS...]}
shift
rates=${*:-100 200}
opts=${BENCH_OPTS:-batch=256,size=224}
work=$(mktemp -d /var/tmp/batchfs-bcold.XXXXXX) # on the disk, not tmpfs
mnt=$work/mnt
mkdir -p "$mnt"
cg=
cleanup() {
    fusermount3 -u "$mnt" 2>/dev/null || true
    [ -n "$cg" ] && rmdir "$cg" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
if [ ! -w /proc/sys/vm/drop_caches ]; then
    echo "skipped: /proc/sys/vm/drop_caches not writable (run as root)"
    exit 0
fi
"$BUILD/mkbatchfs" --quiet --no-fsync "$corpus" "$work/c.bfs"
dev=$(stat -c '%d' "$work/c.bfs")
majmin="$((dev >> 8)):$((dev & 255))"
# the whole disk's major:minor (a partition's throttle does not apply to the disk's I/O)
disk=$(basename "$(readlink -f "/sys/dev/block/$majmin")")
[ -e "/sys/class/block/$disk/partition" ] && disk=$(basename "$(dirname "$(readlink -f "/sys/class/block/$disk")")")
majmin=$(cat "/sys/class/block/$disk/dev")
if [ -d /sys/fs/cgroup/blkio ]; then
    cg=/sys/fs/cgroup/blkio/batchfs-bench-cold.$$
    mkdir "$cg"
    throttle() { echo "$majmin $(($1 * 1048576))" >"$cg/blkio.throttle.read_bps_device"; }
elif [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw io /sys/fs/cgroup/cgroup.controllers; then
    cg=/sys/fs/cgroup/batchfs-bench-cold.$$
    mkdir "$cg"
    throttle() { echo "$majmin rbps=$(($1 * 1048576))" >"$cg/io.max"; }
else
    echo "skipped: no blkio/io cgroup controller to throttle the disk"
    exit 0
fi
run() { # ENV...: images/s of a cold epoch 0
    sync
    echo 3 >/proc/sys/vm/drop_caches
    sh -c 'echo $$ >"$1/cgroup.procs" 2>/dev/null || echo $$ >"$1/tasks"; shift; exec "$@"' \
        sh "$cg" env "$@" "$BUILD/batchfs" "$work/c.bfs" "$mnt" -o "$opts"
    python3 tests/bench/read_epochs.py "$mnt" 1
    fusermount3 -u "$mnt"
}
echo "disk $disk ($majmin), $opts; page cache dropped before each run"
for mbps in $rates; do
    throttle "$mbps"
    on=() off=()
    for _ in 1 2; do
        on+=("$(run)")
        off+=("$(run BATCHFS_NO_READAHEAD=1)")
    done
    a=$(printf '%s\n' "${on[@]}" | awk '{s+=$1} END{print s/NR}')
    b=$(printf '%s\n' "${off[@]}" | awk '{s+=$1} END{print s/NR}')
    printf '%4d MB/s: read-ahead %s images/s, none %s images/s: ratio %.2f\n' "$mbps" \
        "${on[*]}" "${off[*]}" "$(awk -v a="$a" -v b="$b" 'BEGIN{print a/b}')"
done
