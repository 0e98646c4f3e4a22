#!/usr/bin/env bash
# tests/bench/bench_recipes.sh CORPUS — a training recipe with RandAugment and
# RandomErasing (issue 35): the batchfs mount against torchvision in a DataLoader, on the
# same JPEGs and cores, in one run. Both: RandomResizedCrop 224 + flip + RandAugment(2, 9)
# + float32 normalized (ImageNet) + RandomErasing(0.25, constant 0), batches of 256,
# `nproc` DataLoader workers / daemon threads, one warm-up epoch then the median of 3
# (tests/bench/peers.py: torchvision-recipe, batchfs). batchfs runs
# `-o randaugment=2:9,erasing=0.25,erasing_mode=const,dtype=f32`. Prints images/s and
# images per CPU second (every process, the daemon included) of each, batchfs /
# torchvision for both (target >= 2.5), and the daemon's µs per use of each op from /stats
# `augment_ops` (with uses). Asserts nothing.
#
# torchvision comes from the torch venv of tests/torch_env.sh (made when missing); when it
# cannot be made (no network) the comparison is skipped with the reason, exit 0.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
corpus=${1:?usage: bench_recipes.sh CORPUS_DIR}
workers=$(nproc)
work=$(mktemp -d "${TMPDIR:-/tmp}/batchfs-brecipes.XXXXXX")
mnt=$work/mnt
mkdir -p "$mnt"
cleanup() { fusermount3 -u "$mnt" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }
if ! (source tests/torch_env.sh && echo "$TORCH_PY" >"$work/py") 2>"$work/venv.err"; then
    echo "recipe bench skipped: no torch venv:"; tail -3 "$work/venv.err" | sed 's/^/  /'
    exit 0
fi
py=$(cat "$work/py")
echo "torchvision: $("$py" -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__)")"
"$BUILD/mkbatchfs" --quiet --no-fsync "$corpus" "$work/c.bfs"
echo "corpus $corpus: $(find "$corpus" -type f -name '*.jpg' | wc -l) JPEGs, $workers workers/threads, batches of 256, float32"

tv=$("$py" tests/bench/peers.py torchvision-recipe "$corpus" 256 "$workers" 2>"$work/tv.err") ||
    { echo "torchvision failed:"; tail -5 "$work/tv.err"; exit 1; }
opts="batch=256,size=224,randaugment=2:9,erasing=0.25,erasing_mode=const,dtype=f32"
"$BUILD/batchfs" "$work/c.bfs" "$mnt" -o "$opts"
for _ in $(seq 100); do mountpoint -q "$mnt" && break; sleep 0.1; done
pid=$(pgrep -n -f "batchfs $work/c.bfs $mnt")
bfs=$(python3 tests/bench/peers.py batchfs "$mnt" 256 "$workers" "$pid")
stats=$(cat "$mnt/stats")
fusermount3 -u "$mnt"
for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done

printf '%-44s %7.0f images/s  %7.0f images per CPU second\n' "torchvision v2 recipe, DataLoader" \
    "$(field "$tv" images_per_s)" "$(field "$tv" images_per_cpu_s)"
printf '%-44s %7.0f images/s  %7.0f images per CPU second\n' "batchfs mount, the same recipe" \
    "$(field "$bfs" images_per_s)" "$(field "$bfs" images_per_cpu_s)"
echo "  (-o $opts)"
echo "batchfs / torchvision: $(ratio "$(field "$bfs" images_per_s)" "$(field "$tv" images_per_s)") per wall second, $(ratio "$(field "$bfs" images_per_cpu_s)" "$(field "$tv" images_per_cpu_s)") per CPU second (target >= 2.5)"
python3 - "$stats" <<'PYEOF'
import json, sys
s = json.loads(sys.argv[1])
st = s["stage_us_per_image"]
print("daemon, us per image: " + ", ".join(f"{k} {v}" for k, v in st.items()))
print("each op, us per use (uses): " + ", ".join(
    f"{k} {v['us_each']} ({v['applied']})" for k, v in s["augment_ops"].items()))
PYEOF
