#!/usr/bin/env bash
# tests/mount/readme_examples.sh — the README's reader examples, taken from README.md as
# they stand (its ```python / ```c blocks after "**Python package**", "**Python**",
# "**C**", "**PyTorch**" and "**GPU**") with /mnt/train replaced by a test mount, run
# against it: the package example (python/, numpy; train.bfs, batch=256, size=224,
# epochs=90 made small) must mount, read every batch of 2 epochs as [8,40,40,3] uint8 and
# [8] labels, print images/s and unmount; the numpy one must give the
# images and labels safetensors.numpy.load_file gives; the C one, wrapped in a main(),
# must compile without warnings and find the images at byte 4096 and the labels 8-byte
# aligned before them (batch=8: at 4096 - 128), the bytes numpy sees;
# the PyTorch example (batchfs.Batches in a DataLoader; run for 2 epochs where torch is
# installed: $BFS_TORCH_PY or the test venv; otherwise said and skipped) must yield every
# batch of this rank, [B,H,W,3] uint8.
# and the GPU training loop (batchfs.gpu's Loader and DLPack into torch; on the CPU fallback
# without a GPU) runs 3 epochs x 6 steps where torch is installed, and so does the
# captions (CLIP-style) loop: at most 12 lines, 2 epochs x 5 contrastive steps on a
# gen_fields dataset whose captions mkbatchfs --tokenize turned into ids (a SentencePiece
# model trained here by spm_train).
# A README edit that breaks an example fails here. About 5 s.
. "$(dirname "$0")/lib.sh"
require_fuse
need_py # $PY: python with numpy and safetensors

"$GEN" "$T/images" 3 16 48 160 7 # 48 images: 6 batches of 8
"$MKBATCHFS" --quiet "$T/images" "$T/data.bfs"
M=$T/mnt
mkdir "$M"

# block MARKER LANG: the first ```LANG block after the line starting with MARKER in README
block() {
    awk -v mark="$1" -v lang="$2" '
        index($0, mark) == 1 { found = 1; next }
        found && !inside && $0 == "```" lang { inside = 1; next }
        inside && $0 == "```" { exit }
        inside { print }' README.md | sed "s#/mnt/train#$M#g"
}
block "**Python package**" python >"$T/package_example.py"
block "**Python**, numpy only" python >"$T/numpy_example.py"
block "**C**" c >"$T/c_example.body"
block "**PyTorch**" python >"$T/torch_example.py"
block "**GPU**" python >"$T/gpu_example.py"
block "**Images and captions**" python >"$T/clip_example.py"
for f in package_example.py numpy_example.py c_example.body torch_example.py gpu_example.py clip_example.py; do
    [ -s "$T/$f" ] || fail "README.md: no example found for $f (was a heading renamed?)"
done

# ---- the Python package (mounts $M itself) -----------------------------------------------
{
    echo 'seen = []'
    sed -e "s#\"train.bfs\"#\"$T/data.bfs\"#" -e 's/batch=256, size=224, epochs=90/batch=8, size=40, epochs=2/' \
        -e 's/^        \.\.\.$/        seen.append((ds.state_dict()["epoch"], images.shape, str(images.dtype), labels.shape))/' \
        "$T/package_example.py"
    cat <<'EOF'
assert len(seen) == 2 * 6, seen
assert all(s[1:] == ((8, 40, 40, 3), "uint8", (8,)) for s in seen), seen
assert mnt.process is None, "still mounted after the example's with block"
EOF
} >"$T/package_check.py"
grep -q "seen.append" "$T/package_check.py" && grep -q "batch=8, size=40" "$T/package_check.py" &&
    grep -q "$T/data.bfs" "$T/package_check.py" ||
    fail "README's package example: no longer 'train.bfs', 'batch=256, size=224, epochs=90' and a '...' loop body"
out=$(BATCHFS_BIN=$BATCHFS PYTHONPATH=$PWD/python "$PY" "$T/package_check.py") ||
    fail "the README's Python package example failed (above)"
if is_mounted "$M"; then fail "README's package example left $M mounted"; fi
echo "$out" | grep -Eq '^[0-9]+(\.[0-9]+)?$' || fail "README's package example printed '$out', not images/s"
ok "Python package example: mounted, 2 epochs x 6 batches [8,40,40,3] uint8, $out images/s, unmounted"

mount_bfs "$T/data.bfs" "$M" -o batch=8,size=40,epochs=3

# ---- numpy ---------------------------------------------------------------------------
{
    cat "$T/numpy_example.py"
    cat <<'EOF'
from safetensors.numpy import load_file
ref = load_file(PATH)
assert images.shape == (8, 40, 40, 3) and images.dtype == np.uint8, images.shape
assert (images == ref["images"]).all(), "images differ from load_file's"
assert (labels == ref["labels"]).all(), "labels differ from load_file's"
print(int(images[0].astype(np.uint64).sum()), 8 + n + h["images"]["data_offsets"][0],
      8 + n + h["labels"]["data_offsets"][0], int(labels.sum()))
EOF
} | sed "s#PATH#\"$M/epoch/0/batch_0\"#" >"$T/numpy_check.py"
py_out=$("$PY" "$T/numpy_check.py") || fail "the README's numpy example failed (above)"
ok "numpy example: images [8,40,40,3] and labels as load_file gives them"

# ---- C ---------------------------------------------------------------------------------
{
    cat <<'EOF'
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
int main(void)
{
EOF
    sed 's/^/    /' "$T/c_example.body"
    cat <<'EOF'
    if (p == MAP_FAILED || !strstr(json, "\"images\""))
        return 1;
    uint64_t sum = 0;
    for (size_t i = 0; i < 40 * 40 * 3; i++)
        sum += images[i];
    int64_t lsum = 0;
    for (size_t i = 0; i < 8; i++)
        lsum += labels[i];
    printf("%llu %llu %llu %lld\n", (unsigned long long)sum,
           (unsigned long long)(images - p), (unsigned long long)((const uint8_t *)labels - p),
           (long long)lsum);
    return 0;
}
EOF
} >"$T/c_example.c"
${CC:-cc} -std=c11 -Wall -Wextra -Werror -Wno-unused-result -o "$T/c_example" "$T/c_example.c" ||
    fail "the README's C example does not compile (wrapped: $T/c_example.c)"
c_out=$("$T/c_example") || fail "the README's C example failed"
[ "$c_out" = "$py_out" ] ||
    fail "C example read '$c_out' (sum of image 0, images and labels offsets, sum of labels), numpy '$py_out'"
read -r _ c_images c_labels _ <<<"$c_out"
[ "$c_images" = 4096 ] && [ "$c_labels" = $((4096 - 16 * 8)) ] ||
    fail "C example: images at byte $c_images, labels at $c_labels; batch=8 puts them at 4096, 3968"
ok "C example: compiles with -Wall -Wextra -Werror, labels at 3968, images at 4096, the bytes numpy sees"

# ---- PyTorch ---------------------------------------------------------------------------
TPY=${BFS_TORCH_PY:-$PY}
if "$TPY" -c "import torch, safetensors.torch" 2>/dev/null; then
    {
        sed -e 's/range(90)/range(2)/' -e 's/^        \.\.\.$/        seen.append((epoch, tuple(images.shape), str(images.dtype), tuple(labels.shape)))/' \
            "$T/torch_example.py" | sed '1i seen = []'
        cat <<'EOF'
assert len(seen) == 2 * 6, seen
assert all(s[1:] == ((8, 40, 40, 3), "torch.uint8", (8,)) for s in seen), seen
print(len(seen))
EOF
    } >"$T/torch_check.py"
    grep -q "seen.append" "$T/torch_check.py" || fail "README's PyTorch example: its loop body is no longer '...'"
    PYTHONPATH=$PWD/python "$TPY" "$T/torch_check.py" >/dev/null || fail "the README's PyTorch example failed (above)"
    ok "PyTorch example: 2 epochs x 6 batches, each [8,40,40,3] uint8 with [8] labels"
    # the GPU loop: on a GPU where there is one, else the library's CPU fallback
    { echo 'steps = 0'; sed 's/opt\.step()$/opt.step(); steps += 1/' "$T/gpu_example.py"
      echo 'print("steps", steps)'; } >"$T/gpu_check.py"
    grep -q "steps += 1" "$T/gpu_check.py" || fail "README's GPU example: its loop no longer ends in opt.step()"
    out=$(PYTHONPATH=$PWD/python BATCHFS_GPU_LIBRARY=$BUILD/libbatchfs-gpu.so "$TPY" "$T/gpu_check.py") ||
        fail "the README's GPU example failed (above)"
    [ "$(echo "$out" | tail -1)" = "steps 18" ] || fail "README's GPU example: expected 18 steps (3 epochs x 6), got '$out'"
    ok "GPU example: 18 training steps through batchfs.gpu and DLPack"
    # the CLIP-style loop: captions tokenized by mkbatchfs --tokenize (a SentencePiece model
    # trained here), images and ids into two towers and a contrastive loss
    "$BUILD/tests/gen_fields" "$T/pairs.bfs" 40 3 >"$T/pairs.jsonl" || fail "gen_fields"
    for _ in $(seq 30); do echo "a red fox jumps over the lazy dog; café au lait ☕ à la plage"; done >"$T/spm.txt"
    (cd "$T" && spm_train --input=spm.txt --model_prefix=clip --vocab_size=30 >spm.log 2>&1) ||
        fail "spm_train: $(tail -2 "$T/spm.log")"
    "$MKBATCHFS" --quiet --tokenize caption="$T/clip.model:bos:eos" "$T/pairs.bfs" "$T/pairs_tok.bfs" ||
        fail "mkbatchfs --tokenize"
    { echo 'steps = 0'
      sed -e "s#\"pairs_tok.bfs\"#\"$T/pairs_tok.bfs\"#" -e "s#\"/mnt/pairs\"#\"$T/clip_mnt\"#" \
          -e 's/batch=256, size=224, epochs=32/batch=8, size=32, epochs=2/' \
          -e 's/opt\.step()$/opt.step(); steps += 1/' "$T/clip_example.py"
      echo 'print("steps", steps, loss.item())'; } >"$T/clip_check.py"
    grep -q "steps += 1" "$T/clip_check.py" && grep -q "batch=8, size=32, epochs=2" "$T/clip_check.py" &&
        grep -q "$T/pairs_tok.bfs" "$T/clip_check.py" ||
        fail "README's captions example: no longer \"pairs_tok.bfs\", batch=256, size=224, epochs=32 and opt.step()"
    [ "$(grep -c . "$T/clip_example.py")" -le 12 ] || fail "README's captions example is over 12 lines"
    out=$(BATCHFS_BIN=$BATCHFS PYTHONPATH=$PWD/python "$TPY" "$T/clip_check.py") ||
        fail "the README's captions example failed (above)"
    echo "$out" | tail -1 | grep -q "^steps 10 " || fail "README's captions example: expected 10 steps (2 epochs x 5), got '$out'"
    ok "captions example: 10 contrastive steps on images and --tokenize'd caption ids ($(echo "$out" | tail -1))"
else
    echo "   (PyTorch and GPU examples not run: no torch for $TPY; set BFS_TORCH_PY to a python with torch)"
fi
unmount_bfs "$M"
