#!/usr/bin/env bash
# tests/bench/bench_fields.sh CORPUS — an image + caption dataset (.bfs version 3: the
# corpus's images as field jpg, a caption of 20..200 bytes each, tests/gen_fields --from)
# against the same images alone (the version 1 .bfs they come from): `batchfs --bench`
# images/s of each, runs interleaved, the best of BENCH_ROUNDS (3) each, and their ratio
# (target >= 0.95: a caption is a pread and a copy of ~100 bytes against a ~1 ms decode).
# Prints ratios; asserts nothing (timings on shared machines are noisy).
#
# Environment: BUILD (default build), BENCH_OPTS (default batch=64,size=224),
# BENCH_BATCHES (default 30), BENCH_ROUNDS (default 3).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
corpus=${1:?usage: bench_fields.sh CORPUS_DIR}
opts=${BENCH_OPTS:-batch=64,size=224}
work=$(mktemp -d "${TMPDIR:-/tmp}/batchfs-bfields.XXXXXX")
trap 'rm -rf "$work"' EXIT

"$BUILD/mkbatchfs" --quiet "$corpus" "$work/c.bfs"
"$BUILD/tests/gen_fields" --from "$work/c.bfs" "$work/f.bfs" 1
ips() { # FILE -> images/s of one --bench run
    "$BUILD/batchfs" --bench "$1" --batches "${BENCH_BATCHES:-30}" --json -o "$opts" |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["images_per_s"])'
}
best_c=0 best_f=0
for _ in $(seq "${BENCH_ROUNDS:-3}"); do
    c=$(ips "$work/c.bfs")
    f=$(ips "$work/f.bfs")
    best_c=$(awk -v a="$c" -v b="$best_c" 'BEGIN{print (a > b) ? a : b}')
    best_f=$(awk -v a="$f" -v b="$best_f" 'BEGIN{print (a > b) ? a : b}')
done
printf 'images alone:      %8.1f images/s\n' "$best_c"
printf 'image + caption:   %8.1f images/s   ratio %.3f (target >= 0.95)\n' "$best_f" \
    "$(awk -v a="$best_f" -v b="$best_c" 'BEGIN{print a/b}')"
