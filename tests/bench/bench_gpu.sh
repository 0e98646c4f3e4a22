#!/usr/bin/env bash
# tests/bench/bench_gpu.sh — libbatchfs-gpu's CPU fallback against a plain read() loop
# over the same batch files (issue 15's bar: >= 0.9), per wall second and per CPU
# second, measured in one run. Batch files of a batch=64, size=224 u8 mount (9.6 MB
# each, ImageNet-sized) are copied to a tmpfs once, so both sides read page-cache bytes
# and nothing is computed while timed. Where a CUDA driver and device exist
# (BFS_GPU_BENCH_DEVICE=cuda), the same run with device=cuda: see tests/gpu/run.sh for
# the device's own references.
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
echo "files: $(find "$T/files" -type f | wc -l) batch files of $(stat -c %s "$T/files/epoch/0/batch_0") bytes, $rounds rounds"
echo "-- on the mount (computed once, then served from the daemon's cache): mapped, no copy"
"$B/tests/gpu_tool" bench "$M" "$rounds" device=cpu ${BFS_GPU_BENCH_ARGS:-}
fusermount3 -u "$M"
echo "-- a copy on tmpfs (not a mount: pread into the ring's buffers), depth 3 and 1"
"$B/tests/gpu_tool" bench "$T/files" "$rounds" device=cpu ${BFS_GPU_BENCH_ARGS:-}
"$B/tests/gpu_tool" bench "$T/files" "$rounds" device=cpu depth=1
if [ "${BFS_GPU_BENCH_DEVICE:-}" = cuda ]; then
    "$B/tests/gpu_tool" bench "$T/files" "$rounds" device=cuda
fi
