#!/usr/bin/env bash
# tests/bench/bench_mix.sh CORPUS — a three-source mixture (source=A:0.5+B:0.3+C:0.2, the
# corpus's classes split three ways and packed apart) against the whole corpus packed as
# one source, with the same options: `batchfs --bench` images/s of each, runs
# interleaved, the best of BENCH_ROUNDS (3) each, and their ratio (target >= 0.95: a
# mixture adds a stratum's counts and two keyed permutations per batch, ~microseconds
# against ~1 ms decodes per image). Also per CPU second. Prints ratios; asserts nothing
# (timings on shared machines are noisy).
#
# Environment: BUILD (default build), BENCH_OPTS (default batch=64,size=224),
# BENCH_BATCHES (default 30), BENCH_ROUNDS (default 3).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
corpus=${1:?usage: bench_mix.sh CORPUS_DIR}
opts=${BENCH_OPTS:-batch=64,size=224}
work=$(mktemp -d "${TMPDIR:-/tmp}/batchfs-bmix.XXXXXX")
trap 'rm -rf "$work"' EXIT

mkdir "$work/A" "$work/B" "$work/C"
i=0
for d in "$corpus"/*/; do # classes in turn to A, B, C (symlinked: nothing copied)
    ln -s "$(realpath "$d")" "$work/$(printf 'ABC' | cut -c$((i % 3 + 1)))/$(basename "$d")"
    i=$((i + 1))
done
"$BUILD/mkbatchfs" --quiet "$corpus" "$work/one.bfs"
for s in A B C; do "$BUILD/mkbatchfs" --quiet "$work/$s" "$work/$s.bfs"; done
run() { # OPTS -> "images_per_s cpu_s" of one --bench run
    "$BUILD/batchfs" --bench "$@" --batches "${BENCH_BATCHES:-30}" --json |
        python3 -c 'import json, sys; j = json.load(sys.stdin); print(j["images_per_s"], j.get("images_per_cpu_s", 0))'
}
best_o=0 best_m=0 cpu_o=0 cpu_m=0
for _ in $(seq "${BENCH_ROUNDS:-3}"); do
    read -r o oc < <(run "$work/one.bfs" -o "$opts")
    read -r m mc < <(run -o "source=$work/A.bfs:0.5+$work/B.bfs:0.3+$work/C.bfs:0.2,$opts")
    best_o=$(awk -v a="$o" -v b="$best_o" 'BEGIN{print (a > b) ? a : b}')
    best_m=$(awk -v a="$m" -v b="$best_m" 'BEGIN{print (a > b) ? a : b}')
    cpu_o=$(awk -v a="$oc" -v b="$cpu_o" 'BEGIN{print (a > b) ? a : b}')
    cpu_m=$(awk -v a="$mc" -v b="$cpu_m" 'BEGIN{print (a > b) ? a : b}')
done
printf 'one source:        %8.1f images/s  %8.1f images per CPU s\n' "$best_o" "$cpu_o"
printf 'three-source mix:  %8.1f images/s  %8.1f images per CPU s   ratio %.3f wall, %.3f CPU (target >= 0.95)\n' \
    "$best_m" "$cpu_m" "$(awk -v a="$best_m" -v b="$best_o" 'BEGIN{print a/b}')" \
    "$(awk -v a="$cpu_m" -v b="$cpu_o" 'BEGIN{print (b > 0) ? a / b : 0}')"
