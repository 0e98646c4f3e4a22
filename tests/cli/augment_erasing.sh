#!/usr/bin/env bash
# augment_erasing.sh — erasing= (timm's RandomErasing after normalize) through the
# engine's batches: the same batch with and without it differs only inside the box that
# `engine_tool erase` reports for each sample; the box is timm's (2%..1/3 of the image,
# aspect 0.3..1/0.3, inside it); about P of the samples are erased; the box's values are
# N(0,1) each (pixel), one N(0,1) per channel (rand) or 0 (const), in f32, f16, bf16 and
# both layouts; and dtype=u8 is refused with a message naming erasing= and the dtypes.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
source tests/pyenv.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$BUILD/tests/gen_imagefolder" "$tmp/src" 4 50 120 300 7
tool=$BUILD/tests/engine_tool
if "$tool" batch "$tmp/src" "batch=4,erasing=0.5" 0 0 "$tmp/x.st" 2>"$tmp/err"; then
    echo "FAIL: erasing=0.5 with dtype=u8 was accepted" >&2; exit 1
fi
grep -q "erasing= erases after normalize, as timm's RandomErasing: it needs dtype=f16|bf16|f32" "$tmp/err" ||
    { echo "FAIL: unexpected message: $(cat "$tmp/err")" >&2; exit 1; }
check() { # options (erasing= and the mode appended to them)
    local base="batch=200,size=64x48,seed=9,$1" mode=$2 p=$3
    "$tool" batch "$tmp/src" "$base" 1 0 "$tmp/plain.st"
    "$tool" batch "$tmp/src" "$base,erasing=$p,erasing_mode=$mode" 1 0 "$tmp/erased.st"
    "$PY" - "$tmp" "$tool" "$tmp/src" "$base,erasing=$p,erasing_mode=$mode" "$mode" "$p" <<'PYEOF'
import json, math, struct, subprocess, sys
import numpy as np
tmp, tool, src, opts, mode, p = sys.argv[1:7]
p = float(p)
def tensors(path):
    raw = open(path, 'rb').read()
    n = struct.unpack('<Q', raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    dts = {'F32': np.float32, 'F16': np.float16, 'BF16': np.uint16, 'I64': np.int64, 'U8': np.uint8}
    out = {}
    for k, t in hdr.items():
        if k == '__metadata__':
            continue
        b, e = t['data_offsets']
        a = np.frombuffer(raw[8 + n + b:8 + n + e], dtype=dts[t['dtype']]).reshape(t['shape'])
        if t['dtype'] == 'BF16':
            a = (a.astype(np.uint32) << 16).view(np.float32)
        out[k] = a.astype(np.float32) if a.dtype != np.int64 else a
    return out
plain, erased = tensors(f'{tmp}/plain.st'), tensors(f'{tmp}/erased.st')
nchw = 'layout=nchw' in opts
values, count = [], 0
for j, idx in enumerate(plain['indices']):
    a, b = plain['images'][j], erased['images'][j]
    if nchw:
        a, b = a.transpose(1, 2, 0), b.transpose(1, 2, 0)
    H, W = a.shape[:2]
    box = subprocess.run([tool, 'erase', '-', opts, '1', str(idx)], check=True,
                         capture_output=True, text=True).stdout.split()
    mask = np.zeros((H, W), bool)
    if box[0] != 'none':
        top, left, h, w = map(int, box)
        count += 1
        assert 0 <= top and top + h <= H and 0 <= left and left + w <= W, box
        assert 0.02 * H * W * 0.7 <= h * w <= H * W / 3 * 1.3, (box, h * w)
        assert 0.3 / 1.5 <= h / w <= 1.5 / 0.3, box
        mask[top:top + h, left:left + w] = True
        inside = b[mask]
        if mode == 'const':
            assert (inside == 0).all(), inside[:4]
        elif mode == 'rand':
            assert (inside == inside[0]).all(), 'rand: one value per channel'
        values.append(inside.ravel())
    if not np.array_equal(a[~mask], b[~mask]):
        sys.exit(f'FAIL: sample {idx}: values outside the box {box} changed')
n = len(plain['indices'])
assert abs(count / n - p) < 0.15, (count, n, p)
v = np.concatenate(values) if values else np.zeros(0)
if mode == 'pixel':
    assert abs(v.mean()) < 0.05 and abs(v.std() - 1) < 0.05, (v.mean(), v.std())
print(f'{opts}: {count} of {n} samples erased ({count / n:.2f}, P {p}); '
      f'{v.size} values, mean {v.mean():.3f}, std {v.std():.3f}')
PYEOF
}
check "dtype=f32" pixel 0.5
check "dtype=f16,layout=nchw" pixel 0.25
check "dtype=bf16" rand 0.5
check "dtype=f32,layout=nchw" const 1
