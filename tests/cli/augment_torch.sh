#!/usr/bin/env bash
# augment_torch.sh — the engine's image ops (engine/imgops.h) against torchvision's
# (torchvision.transforms.v2.functional on uint8 tensors, in the torch venv of
# tests/torch_env.sh): every op with random magnitudes on 200 photographs of the bench
# corpus (tests/bench/corpus/make_corpus.sh, 4 classes of 50, resized to random sizes),
# byte for byte (and again through the portable C paths, BFS_IMGOPS_PORTABLE=1); and the
# recipes' magnitude tables against torch.linspace
# (tests/augment_ref.py); then each policy and color_jitter + grayscale_p through the
# engine's batches (engine_tool batch), sample by sample against torchvision's ops in the
# order and with the magnitudes the engine drew (augment_ref.py --pipeline). The corpus
# and the venv are made once per machine and kept in /var/tmp (every build's run shares
# them).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
source tests/torch_env.sh
corpus=${BFS_AUGMENT_CORPUS:-/var/tmp/batchfs-augment-corpus}
BUILD=$BUILD bash tests/bench/corpus/make_corpus.sh "$corpus" 4 50 >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$TORCH_PY" tests/augment_ref.py "$BUILD/tests/engine_tool" "$corpus" "$tmp" 200 11
# the portable C paths of the ops that have AVX2 ones (warps, sharpness), on 60 photos
BFS_IMGOPS_PORTABLE=1 "$TORCH_PY" tests/augment_ref.py "$BUILD/tests/engine_tool" "$corpus" "$tmp" 60 12 |
    sed 's/^/portable: /'
mkdir "$tmp/pipeline"
"$TORCH_PY" tests/augment_ref.py --pipeline "$BUILD/tests/engine_tool" "$corpus" "$tmp/pipeline" 40
