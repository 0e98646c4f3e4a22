#!/usr/bin/env bash
# tests/bench/bench_gpu.sh — libbatchfs-gpu's CPU fallback against a plain loop that
# read()s each whole batch file into one reused buffer (issue 15's bar: >= 0.9), per wall
# second and per CPU second, measured in one run. Batch files of a batch=64, size=224 u8
# mount (9.6 MB each, ImageNet-sized) are read on the mount once (computed and cached by
# the daemon), then timed on the mount and on a tmpfs copy; each with a consumer that does
# nothing and one that reads every byte (consume=sum), at depth 3 (the device default),
# 2 (the host default) and 1.
# With BFS_GPU_BENCH_DEVICE=cuda, also device=cuda (tests/gpu/run.sh has the device's own
# references).
# Run: BUILD=build bash tests/bench/bench_gpu.sh [ROUNDS] (make bench does).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${BUILD:-build}
case $B in /*) ;; *) B=$PWD/$B ;; esac
rounds=${1:-20}
T=$(mktemp -d /dev/shm/bench-gpu.XXXXXX)
M=$T/mnt
trap 'fusermount3 -u "$M" 2>/dev/null; rm -rf "$T"' EXIT
"$B/tests/gen_imagefolder" "$T/img" 4 64 300 600 11 >/dev/null
"$B/mkbatchfs" --quiet "$T/img" "$T/data.bfs"
mkdir "$M"
"$B/batchfs" "$T/data.bfs" "$M" -o batch=64,size=224,epochs=2
mkdir -p "$T/files/epoch"
cp -r "$M/epoch/0" "$M/epoch/1" "$T/files/epoch/"
echo "files: $(find "$T/files" -type f | wc -l) batch files of $(stat -c %s "$T/files/epoch/0/batch_0") bytes, $rounds rounds; ratio = loader bytes/s over the read() loop's"
printf '%-8s %-8s %-6s %-10s %-10s\n' where consumer depth wall CPU
for where in mount tmpfs; do
    dir=$M && [ $where = tmpfs ] && dir=$T/files
    for consume in none sum; do
        for depth in 3 2 1; do
            arg=() && [ $consume = sum ] && arg=(consume=sum)
            out=$("$B/tests/gpu_tool" bench "$dir" "$rounds" "${arg[@]}" device=cpu depth=$depth)
            r=$(echo "$out" | grep -o 'ratio_wall=[0-9.]* ratio_cpu=[0-9.]*')
            r=$(echo "$r" | sed "s/ratio_[a-z]*=//g")
            printf "%-8s %-8s %-6s %-10s %-10s\n" $where $consume $depth ${r}
        done
    done
done
if [ "${BFS_GPU_BENCH_DEVICE:-}" = cuda ]; then
    "$B/tests/gpu_tool" bench "$M" "$rounds" device=cuda
fi
