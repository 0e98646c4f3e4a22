#!/usr/bin/env bash
# tests/bench/bench_sample_cache.sh CORPUS — the decoded-sample cache (sample_cache_mb=),
# measured in one process per configuration: `batchfs --bench` reads epoch 0 then epoch 1
# (-o epochs=2, --batches beyond the epoch: the run continues into epoch 1 and prints
# images/s per epoch) and this prints
#  1. epoch 1 / epoch 0 images/s with the cache large enough for the corpus (target >= 2:
#     epoch 1 skips JPEG decoding);
#  2. the same ratio without the cache, for reference (~1.0: what is left of warm-up and
#     noise in the method);
#  3. the filling epoch's cost: cached epoch 0 / uncached epoch 0 images/s (< 1: the
#     cache decodes whole images where the uncached path decodes only the crop, into
#     fresh memory);
#  4. the same for augment=eval, and for size=64 (crops small enough for scaled IDCT:
#     entries are per IDCT scale, so the hit rate grows over epochs).
# With epochs=2 the bench does no warm-up in either configuration (its warm-up epoch would
# be one it reads). Prints ratios; asserts nothing (timings on shared machines are noisy).
#
# Environment: BUILD (default build), SAMPLE_CACHE_MB (default 4096), BENCH_OPTS (default
# batch=64,size=224).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
corpus=${1:?usage: bench_sample_cache.sh CORPUS_DIR}
mb=${SAMPLE_CACHE_MB:-4096}
opts=${BENCH_OPTS:-batch=64,size=224}
work=$(mktemp -d "${TMPDIR:-/tmp}/batchfs-bscache.XXXXXX")
trap 'rm -rf "$work"' EXIT

"$BUILD/mkbatchfs" --quiet "$corpus" "$work/c.bfs"

# bench OPTS -> one JSON line
bench() { "$BUILD/batchfs" --bench "$work/c.bfs" --batches 1000000000 --reference 50 --json -o "$1"; }

# report LABEL UNCACHED_JSON CACHED_JSON
report() {
    python3 - "$1" "$2" "$3" <<'PY'
import json, sys
label, off, on = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
def eps(j):
    return [e["images_per_s"] for e in j["epochs"]]
o, c = eps(off), eps(on)
e = on["epochs"]
sc = on["sample_cache"]
print(f"{label}:")
for i, row in enumerate(e):
    n = row["sample_cache_hits"] + row["sample_cache_misses"]
    hit = row["sample_cache_hits"] / n if n else 0
    print(f"  epoch {row['epoch']}: uncached {o[i]:8.1f} images/s, cached {c[i]:8.1f} images/s "
          f"(hit rate {hit:.2f})")
print(f"  cache: {sc['inserts']} entries, {sc['bytes'] / 2**20:.0f} MiB of "
      f"{sc['budget_bytes'] / 2**20:.0f} MiB, {sc['refused_budget']} refused for budget")
print(f"  epoch 1 / epoch 0 images/s with the cache:    {c[1] / c[0]:.2f} (target >= 2.0)")
print(f"  epoch 1 / epoch 0 images/s without the cache: {o[1] / o[0]:.2f} (reference)")
print(f"  filling epoch 0, cached / uncached images/s:  {c[0] / o[0]:.2f}")
PY
}

echo "corpus $corpus, $opts, sample_cache_mb=$mb"
off=$(bench "$opts,epochs=2")
on=$(bench "$opts,epochs=2,sample_cache_mb=$mb")
report "augment=train ($opts)" "$off" "$on"

off=$(bench "$opts,epochs=2,augment=eval")
on=$(bench "$opts,epochs=2,augment=eval,sample_cache_mb=$mb")
report "augment=eval ($opts)" "$off" "$on"

small="$opts,size=64"
off=$(bench "$small,epochs=3")
on=$(bench "$small,epochs=3,sample_cache_mb=$mb")
report "augment=train, size=64 (scaled IDCT: one entry per sample and scale)" "$off" "$on"
