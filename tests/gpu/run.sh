#!/usr/bin/env bash
# tests/gpu/run.sh — the device check for a machine with an NVIDIA GPU and driver, no
# network needed (no pip, no apt): builds with make, makes its own data with the test
# generator, mounts it (or, without FUSE, writes the batch files in-process with
# engine_tool), then prints one line each:
#   bytes      device bytes == file bytes, for copy=staging, copy=register, copy=auto
#   delivery   loader MB/s against pinned cuMemcpyHtoDAsync of the same sizes (bar >= 0.9),
#              host copies per batch, staging vs registration ns/MB as copy=auto timed them
#   overlap    copies overlapping a busy kernel on the consumer stream
#   pool       a mount with gpu_pool_mb= (under passthrough): copy=pool's bytes == the
#              files, its delivery against pinned DMA (bar >= 0.9) and its overlap
#   convert    dtype=f16/f32 + layout=nchw on the device == the CPU reference, bit for bit
#   tokens     token batches (pack=bucket: several shapes; pack=concat) on the device ==
#              the files, depth 1 (one slot, grown for larger batches) and the default
#   torch      a PyTorch loop through gpu/python when torch imports, else "skipped"
# Finishes within 8 minutes (the build is most of it). Exit 0 when every line is ok.
# Run: bash tests/gpu/run.sh [BUILD]   (CUDA_LIB=/path/libcuda.so.1 to pick a driver)
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build}
case $B in /*) ;; *) B=$PWD/$B ;; esac
T=$(mktemp -d) M=$T/mnt P=$T/mntp
cleanup() { fusermount3 -u "$M" 2>/dev/null; fusermount3 -u "$P" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
bad=0
line() { printf '%-9s %s\n' "$1" "$2"; }
fail() { line "$1" "FAIL: $2"; bad=1; }

start=$SECONDS
if ! make -s -j"$(nproc)" BUILD="$B" all-tests >"$T/build.log" 2>&1; then
    if [ -x "$B/tests/gpu_tool" ]; then line build "make failed (missing -dev packages?), using the binaries in $B"
    else tail -20 "$T/build.log"; line build "FAIL: make failed and $B has no gpu_tool"; exit 1; fi
else
    line build "ok ($((SECONDS - start)) s)"
fi
TOOL=$B/tests/gpu_tool
lib=${CUDA_LIB:-libcuda.so.1}
nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current \
    --format=csv,noheader 2>/dev/null | sed 's/^/gpu       /'

# data: 1,280 images of photo-like sizes; batch=128 at 224x224 u8 (19 MB per batch)
"$B/tests/gen_imagefolder" "$T/img" 8 160 200 640 5 >/dev/null || { line data FAIL; exit 1; }
"$B/mkbatchfs" --quiet "$T/img" "$T/data.bfs" || { line data FAIL; exit 1; }
OPTS=batch=128,size=224,epochs=2
D=$M
mkdir "$M"
if [ -e /dev/fuse ] && "$B/batchfs" "$T/data.bfs" "$M" -o $OPTS 2>"$T/mount.log"; then
    line data "mounted ($OPTS), passthrough $(grep -o '"active": *[a-z]*' "$M/stats" | head -1 | grep -o '[a-z]*$')"
    cat "$M"/epoch/*/batch_* >/dev/null # compute every batch once: the timed runs read, not decode
else
    D=$T/files
    for e in 0 1; do
        mkdir -p "$D/epoch/$e"
        for k in $(seq 0 9); do
            "$B/tests/engine_tool" batch "$T/data.bfs" "$OPTS" $e $k "$D/epoch/$e/batch_$k" || exit 1
        done
    done
    line data "no FUSE here: batch files written in-process ($OPTS)"
fi

# bytes
"$TOOL" files "$D" 0 2 >"$T/want"
for copy in staging register auto; do
    if "$TOOL" read "$D" device=cuda cuda_library="$lib" copy=$copy >"$T/got" 2>"$T/err"; then
        if cmp -s <(grep -v ^stats "$T/got") "$T/want"; then
            line bytes "ok copy=$copy: $(grep -c . "$T/want") batches equal the files ($(grep ^stats "$T/got" | grep -o 'device=[^=]* copy=[a-z]*'))"
        else fail bytes "copy=$copy: device bytes differ from the files"; fi
    elif [ $copy = register ] && grep -q "copy=register:" "$T/err"; then
        line bytes "n/a copy=register: $(cat "$T/err")"
    else fail bytes "copy=$copy: $(cat "$T/err")"; fi
done

# delivery and overlap (copy=auto, the default)
"$TOOL" device "$D" 5 device=cuda cuda_library="$lib" >"$T/dev" 2>&1 || fail delivery "$(cat "$T/dev")"
sed -n 's/^device: /delivery  /p; s/^delivery: /delivery  /p; s/^overlap: /overlap   /p' "$T/dev"
# the reason copy=auto stages: its copies must overlap the consumer's kernels
grep -q 'overlapped=yes' "$T/dev" || fail overlap "copies did not overlap kernels: $(grep '^overlap' "$T/dev")"

# the pool file: registered once, each batch copied from its window (no host copy)
mkdir "$P"
if [ "$D" != "$M" ]; then
    line pool "n/a: no FUSE mount here"
elif ! "$B/batchfs" "$T/data.bfs" "$P" -o "$OPTS,gpu_pool_mb=1536" 2>"$T/pool.log"; then
    fail pool "the mount with gpu_pool_mb= failed: $(tail -1 "$T/pool.log")"
elif ! grep -q '"served": true' "$P/stats"; then
    line pool "n/a: no /.pool (no FUSE passthrough here: $(grep -o 'gpu_pool_mb=[^(]*' "$T/pool.log" | head -1))"
else
    cat "$P"/epoch/*/batch_* >/dev/null
    if "$TOOL" read "$P" device=cuda cuda_library="$lib" copy=pool >"$T/gotp" 2>"$T/err" &&
        cmp -s <(grep -v ^stats "$T/gotp") "$T/want"; then
        line pool "ok copy=pool: $(grep -c . "$T/want") batches equal the files ($(grep ^stats "$T/gotp" | grep -o 'pooled=[0-9]* pool_staged=[0-9]*'))"
    else fail pool "copy=pool: $(cat "$T/err") device bytes differ from the files or the loader failed"; fi
    "$TOOL" device "$P" 5 device=cuda cuda_library="$lib" copy=pool >"$T/devp" 2>&1 || fail pool "$(cat "$T/devp")"
    sed -n 's/^delivery: /pool      delivery /p; s/^overlap: /pool      overlap /p' "$T/devp"
    grep -q 'overlapped=yes' "$T/devp" || fail pool "copy=pool copies did not overlap kernels"
    fusermount3 -u "$P"
fi

# convert: the device against the host, same table
for dt in f16 f32; do
    "$TOOL" read "$D" device=cuda cuda_library="$lib" dtype=$dt layout=nchw epoch_end=1 >"$T/dev_$dt" 2>&1 &&
        "$TOOL" read "$D" device=cpu dtype=$dt layout=nchw epoch_end=1 >"$T/cpu_$dt" 2>&1 ||
        { fail convert "$dt: $(tail -1 "$T/dev_$dt")"; continue; }
    if cmp -s <(grep -v ^stats "$T/dev_$dt") <(grep -v ^stats "$T/cpu_$dt"); then
        line convert "ok dtype=$dt layout=nchw: $(grep -vc ^stats "$T/dev_$dt") batches equal the CPU reference"
    else fail convert "dtype=$dt: the device's values differ from the CPU reference"; fi
done

# tokens: 3,000 documents (stdlib random), pack=bucket of 4 bounds and pack=concat
PY=${PYTHON:-python3}
"$PY" -c 'import random, struct, sys
r = random.Random(7); out = []
for _ in range(3000):
    out += [r.randrange(50000) for _ in range(r.choice([r.randrange(127), r.randrange(127, 511), r.randrange(511, 2047)]))] + [50256]
open(sys.argv[1], "wb").write(struct.pack("<%dH" % len(out), *out))' "$T/train.bin" &&
    "$B/mkbatchfs" --tokens u16 --doc-sep 50256 "$T/train.bin" "$T/tok.bfs" >/dev/null 2>&1 ||
    fail tokens "could not make the token dataset"
for TOPTS in pack=bucket,buckets=128:512:1024:2048,batch_tokens=65536,drop_last=0 batch=16,seq_len=1024,positions=1; do
    TD=$T/tok_${TOPTS%%,*}
    for e in 0 1; do
        mkdir -p "$TD/epoch/$e"
        "$B/tests/engine_tool" epoch "$T/tok.bfs" "$TOPTS" $e "$TD/epoch/$e" || fail tokens "engine_tool epoch $TOPTS"
    done
    "$TOOL" files "$TD" 0 2 >"$T/want_tok"
    shapes=$(grep -o 'tokens:i32:\[[0-9,]*\]' "$T/want_tok" | sort -u | wc -l)
    for depth in 1 3; do
        if "$TOOL" read "$TD" device=cuda cuda_library="$lib" depth=$depth >"$T/got_tok" 2>"$T/err" &&
            cmp -s <(grep -v ^stats "$T/got_tok") "$T/want_tok"; then
            line tokens "ok ${TOPTS%%,*} depth=$depth: $(grep -c . "$T/want_tok") batches ($shapes shapes) equal the files"
        else fail tokens "${TOPTS%%,*} depth=$depth: $(cat "$T/err") device bytes differ from the files or the loader failed"; fi
    done
done

# torch
if "$PY" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    if PYTHONPATH=gpu/python BATCHFS_GPU_LIBRARY=$B/libbatchfs-gpu.so "$PY" - "$D" >"$T/torch" 2>&1 <<'PY'
import sys, time, torch, batchfs_gpu
model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.LazyLinear(10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
t0, n = time.time(), 0
with batchfs_gpu.Loader(sys.argv[1], dtype="f32", layout="nchw",
                        stream=torch.cuda.current_stream().cuda_stream) as loader:
    for batch in loader:
        x = torch.from_dlpack(batch["images"]); y = torch.from_dlpack(batch["labels"])
        loss = torch.nn.functional.cross_entropy(model(x), y % 10)
        opt.zero_grad(); loss.backward(); opt.step(); n += 1
torch.cuda.synchronize()
print(f"{n} steps, loss {loss.item():.3f}, {n / (time.time() - t0):.1f} steps/s")
PY
    then line torch "ok $(tail -1 "$T/torch")"; else fail torch "$(tail -3 "$T/torch" | tr '\n' ' ')"; fi
else
    line torch "skipped (torch with CUDA does not import here)"
fi
line total "$([ $bad = 0 ] && echo ok || echo FAILED) in $((SECONDS - start)) s"
exit $bad
