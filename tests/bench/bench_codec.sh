#!/usr/bin/env bash
# tests/bench/bench_codec.sh CORPUS — PNG and WebP samples per CPU second, batchfs against
# Pillow, on the same files. PER_CLASS photos of each class of the ImageNet-like JPEG
# corpus are converted by Pillow into PNG (8-bit RGB, Pillow's default compression) and
# WebP (lossy, Pillow's default quality 80) ImageFolders, packed with mkbatchfs (a version
# 3 file storing the bytes as they are), then for each format:
#  - batchfs: `batchfs --bench` with one worker thread (augment=train, size=224, u8:
#    RandomResizedCrop + bilinear resize + flip), `images_per_cpu_s` (process CPU time);
#  - Pillow: in one Python process, for every file, Image.open(f).convert("RGB") then
#    torchvision's RandomResizedCrop done as F.resized_crop does it (crop, then resize to
#    224 x 224 BILINEAR), images per process CPU second (time.process_time);
#  - the ratio batchfs / Pillow measured in this run (target >= 1.0).
# The decode is whole in both (batchfs decodes PNG and WebP whole: docs/engine.md).
# Asserts nothing (timings on shared machines are noisy).
#
# Environment: BUILD (default build), PER_CLASS (default 32), PY (a Python with Pillow;
# default: the test venv of tests/pyenv.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
corpus=${1:?usage: bench_codec.sh CORPUS_DIR}
per=${PER_CLASS:-32}
source tests/pyenv.sh
work=$(mktemp -d "${TMPDIR:-/tmp}/batchfs-bcodec.XXXXXX")
trap 'rm -rf "$work"' EXIT

"$PY" - "$corpus" "$work" "$per" <<'PYEOF'
import os, sys
from PIL import Image
corpus, work, per = sys.argv[1], sys.argv[2], int(sys.argv[3])
n = 0
for c in sorted(os.listdir(corpus)):
    d = os.path.join(corpus, c)
    if not os.path.isdir(d):
        continue
    for fmt in ("png", "webp"):
        os.makedirs(os.path.join(work, fmt, c), exist_ok=True)
    for f in sorted(x for x in os.listdir(d) if x.endswith(".jpg"))[:per]:
        im = Image.open(os.path.join(d, f)).convert("RGB")
        stem = os.path.splitext(f)[0]
        im.save(os.path.join(work, "png", c, stem + ".png"))
        im.save(os.path.join(work, "webp", c, stem + ".webp"), quality=80)
        n += 1
print(f"converted {n} corpus photos to PNG and WebP")
PYEOF

for fmt in png webp; do
    n=$(find "$work/$fmt" -type f | wc -l)
    mb=$(du -sm "$work/$fmt" | cut -f1)
    "$BUILD/mkbatchfs" --quiet --no-fsync "$work/$fmt" "$work/$fmt.bfs"
    batches=$((n / 32))
    out=$("$BUILD/batchfs" --bench "$work/$fmt.bfs" --batches "$batches" --json \
        -o batch=32,size=224,augment=train,dtype=u8,threads=1)
    ours=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['images_per_cpu_s'])" "$out")
    pil=$("$PY" - "$work/$fmt" <<'PYEOF'
import math, os, random, sys, time
from PIL import Image
root = sys.argv[1]
files = [os.path.join(root, c, f) for c in sorted(os.listdir(root))
         for f in sorted(os.listdir(os.path.join(root, c)))]
rng = random.Random(0)
def rrc_box(w, h):  # torchvision RandomResizedCrop.get_params, scale (0.08, 1), ratio 3/4..4/3
    area = w * h
    for _ in range(10):
        ta = area * rng.uniform(0.08, 1.0)
        ar = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
        cw, ch = int(round(math.sqrt(ta * ar))), int(round(math.sqrt(ta / ar)))
        if 0 < cw <= w and 0 < ch <= h:
            x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
            return x, y, x + cw, y + ch
    return 0, 0, w, h
for f in files[:8]:  # warm-up: imports, first allocations
    Image.open(f).convert("RGB")
t0 = time.process_time()
for f in files:
    im = Image.open(f).convert("RGB")
    out = im.crop(rrc_box(*im.size)).resize((224, 224), Image.BILINEAR)
    if rng.random() < 0.5:
        out = out.transpose(Image.FLIP_LEFT_RIGHT)
cpu = time.process_time() - t0
print(f"{len(files) / cpu:.1f}")
PYEOF
)
    printf '%-4s (%d photos, %d MB): batchfs %7.1f samples per CPU second, Pillow decode + same resize %7.1f: ratio %.2f (target >= 1.0)\n' \
        "$fmt" "$n" "$mb" "$ours" "$pil" "$(awk -v a="$ours" -v b="$pil" 'BEGIN{print a/b}')"
done
