#!/usr/bin/env bash
# codec_pillow.sh — PNG and WebP samples against Pillow. Files of every kind the decoders
# handle (tests/gen_codec.py: 8 and 16-bit RGB/RGBA, gray 1/8/16-bit, gray+alpha 8/16,
# palette with and without tRNS, 4-bit palette, Adam7, RGB with tRNS; WebP lossy, lossless,
# both with alpha), made from gen_imagefolder's photo-like JPEGs:
#  1. the engine's whole decode (engine_tool decode: bfs_decoder_probe + _decode_image)
#     equals np.asarray(Image.open(f).convert("RGB")) byte for byte;
#  2. corrupt files (truncated PNG and WebP, a flipped IDAT byte, a damaged WebP bitstream)
#     fail with the format's own error;
#  3. batches served from the ImageFolder of those files, and from the .bfs files mkbatchfs
#     packs of it (the bytes as they are, and --raw pixels), equal Pillow's decode put through today's transform (eval, train with flips,
#     none) within engine_pillow.sh's bound, 1.5/255 mean absolute error (the decode being
#     exact, what is left is the resampler's rounding: the script prints the worst MAE).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
source tests/pyenv.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$BUILD/tests/gen_imagefolder" "$tmp/jpg" 2 3 120 300 7 >/dev/null
"$PY" tests/gen_codec.py "$tmp/jpg" "$tmp/src" --corrupt
mv "$tmp/src/bad" "$tmp/bad"

# 1 and 2: whole decodes
"$PY" - "$BUILD/tests/engine_tool" "$tmp/src" "$tmp/bad" "$tmp/out.rgb" <<'PYEOF'
import os, subprocess, sys
import numpy as np
from PIL import Image
tool, src, bad, out = sys.argv[1:]
n = 0
for c in sorted(os.listdir(src)):
    for f in sorted(os.listdir(os.path.join(src, c))):
        p = os.path.join(src, c, f)
        r = subprocess.run([tool, "decode", p, out], capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"FAIL: {p}: {r.stderr.strip()}")
        ref = np.asarray(Image.open(p).convert("RGB"))
        w, h = map(int, r.stdout.split())
        if (h, w) != ref.shape[:2]:
            sys.exit(f"FAIL: {p}: size {w}x{h}, Pillow {ref.shape[1]}x{ref.shape[0]}")
        got = np.fromfile(out, np.uint8).reshape(ref.shape)
        if not np.array_equal(ref, got):
            d = np.abs(ref.astype(int) - got)
            sys.exit(f"FAIL: {p}: differs from Pillow in {(d > 0).sum()} values, by up to {d.max()}")
        n += 1
print(f"ok - {n} PNG and WebP files decode whole to Pillow's convert('RGB') pixels, byte for byte")
want = {"cut.png": "corrupt or truncated PNG", "crc.png": "corrupt or truncated PNG",
        "cut.webp": "corrupt or truncated WebP", "bits.webp": "corrupt or truncated WebP"}
for f in sorted(os.listdir(bad)):
    p = os.path.join(bad, f)
    r = subprocess.run([tool, "decode", p, out], capture_output=True, text=True)
    kind = f.split("-")[-1]
    if r.returncode != 1 or want[kind] not in r.stderr:
        sys.exit(f"FAIL: {p}: exit {r.returncode}, {r.stderr.strip()!r}; wanted {want[kind]!r}")
print(f"ok - {len(os.listdir(bad))} corrupt PNG and WebP files fail with their format's error")
PYEOF

# 3: batches against Pillow + the transform (engine_pillow.sh's reference)
check() { # options epoch batch-index engine-source
    local opts=$1 epoch=$2 k=$3 esrc=$4
    "$BUILD/tests/engine_tool" batch "$esrc" "$opts" "$epoch" "$k" "$tmp/b.st"
    "$PY" - "$tmp/b.st" "$tmp/src" "$opts" "$epoch" "$BUILD/tests/engine_tool" "$esrc" <<'PYEOF'
import json, os, struct, subprocess, sys
import numpy as np
from PIL import Image
path, src, opts, epoch, tool, esrc = sys.argv[1:]
raw = open(path, 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
def tensor(name, dt):
    t = hdr[name]; b, e = t['data_offsets']
    return np.frombuffer(raw[8 + n + b:8 + n + e], dtype=dt).reshape(t['shape'])
images, indices = tensor('images', np.uint8), tensor('indices', np.int64)
files = [os.path.join(src, c, f) for c in sorted(os.listdir(src))
         for f in sorted(os.listdir(os.path.join(src, c)))]
worst = 0.0
for j, idx in enumerate(indices):
    g = subprocess.run([tool, 'geometry', esrc, opts, epoch, str(idx)], check=True,
                       capture_output=True, text=True).stdout.split()
    W, H = int(g[0]), int(g[1]); box = tuple(float(v) for v in g[2:6])
    ow, oh, wx, wy, ww, wh, flip, ox, oy, iw, ih = (int(v) for v in g[6:17])
    im = Image.open(files[idx]).convert('RGB')
    assert im.size == (W, H), (files[idx], im.size, W, H)
    im = im.crop((ox, oy, ox + iw, oy + ih))
    ref = im.resize((ow, oh), Image.BILINEAR, box=box).crop((wx, wy, wx + ww, wy + wh))
    if flip:
        ref = ref.transpose(Image.FLIP_LEFT_RIGHT)
    ref = np.asarray(ref, dtype=np.int16)
    mae = np.abs(ref - images[j].astype(np.int16)).mean()
    worst = max(worst, mae)
    if mae > 1.5:
        sys.exit(f'FAIL: sample {idx} ({files[idx]}): MAE {mae:.3f} > 1.5')
print(f'ok - {opts} from {os.path.basename(esrc)}: {len(indices)} PNG/WebP samples match Pillow, worst MAE {worst:.4f} levels')
PYEOF
}
# packed: bytes stored as they are (a version 3 file), and decoded to lz4 pixels (--raw)
"$BUILD/mkbatchfs" --quiet --no-fsync "$tmp/src" "$tmp/codec.bfs"
"$BUILD/mkbatchfs" --quiet --no-fsync --raw "$tmp/src" "$tmp/raw.bfs"
for esrc in "$tmp/src" "$tmp/codec.bfs" "$tmp/raw.bfs"; do
    check "batch=36,size=64,augment=eval,shuffle=none" 0 0 "$esrc"
    check "batch=36,size=48,augment=train,seed=4,flip=1" 0 1 "$esrc"
    check "batch=36,size=40x56,augment=none" 0 2 "$esrc"
done

# 4. mkbatchfs: corrupt PNG/WebP files skipped and listed (--strict fails naming one);
#    --info counts the kinds, --verify checks their headers, a re-pack is byte-identical,
#    --cat gives the file's bytes, --max-side re-encodes the large ones as JPEG
fail() { echo "FAIL: $*" >&2; exit 1; }
mkdir -p "$tmp/mixed/a" "$tmp/mixed/b"
cp "$tmp/src/class_000/"*-rgb8.png "$tmp/src/class_000/"*-lossy.webp "$tmp/mixed/a/"
cp "$tmp/bad/"* "$tmp/mixed/b/"
cp "$tmp/jpg/class_001/"*.jpg "$tmp/mixed/b/"
"$BUILD/mkbatchfs" --no-fsync "$tmp/mixed" "$tmp/m.bfs" 2>"$tmp/err" || fail "pack with corrupt files: $(cat "$tmp/err")"
for f in "$tmp"/bad/*; do
    case $f in *.png) want="corrupt or truncated PNG" ;; *) want="corrupt or truncated WebP" ;; esac
    grep -qF "$tmp/mixed/b/$(basename "$f"): $want" "$tmp/err" || { cat "$tmp/err"; fail "$f not listed as skipped ($want)"; }
done
grep -qF "skipped 4 of 13 files" "$tmp/err" || { cat "$tmp/err"; fail "skip count"; }
echo "ok - corrupt PNG and WebP files are skipped and listed with their reason"
if "$BUILD/mkbatchfs" --no-fsync --strict "$tmp/mixed" "$tmp/s.bfs" 2>"$tmp/err"; then fail "--strict packed corrupt files"; fi
grep -qE "$tmp/mixed/b/.*(PNG|WebP).*--strict" "$tmp/err" || { cat "$tmp/err"; fail "--strict names no file"; }
echo "ok - --strict fails on the first corrupt PNG or WebP, naming it"
"$BUILD/mkbatchfs" --info "$tmp/m.bfs" | grep -qF "samples:       9 (3 jpeg, 0 raw, 3 png, 3 webp)" ||
    fail "--info: $("$BUILD/mkbatchfs" --info "$tmp/m.bfs")"
"$BUILD/mkbatchfs" --verify "$tmp/m.bfs" >/dev/null || fail "--verify"
"$BUILD/mkbatchfs" --quiet --no-fsync "$tmp/m.bfs" "$tmp/re.bfs"
cmp -s "$tmp/m.bfs" "$tmp/re.bfs" || fail "re-pack of a .bfs with PNG/WebP samples differs"
first=$(ls "$tmp/mixed/a" | head -1)
"$BUILD/mkbatchfs" --cat "$tmp/m.bfs" 0 | cmp -s - "$tmp/mixed/a/$first" || fail "--cat 0 is not $first"
"$BUILD/mkbatchfs" --quiet --no-fsync --max-side 100 "$tmp/m.bfs" "$tmp/small.bfs"
"$BUILD/mkbatchfs" --info "$tmp/small.bfs" | grep -qF "samples:       9 (9 jpeg, 0 raw)" ||
    fail "--max-side: $("$BUILD/mkbatchfs" --info "$tmp/small.bfs")"
echo "ok - mkbatchfs --info, --verify, re-pack, --cat and --max-side with PNG and WebP samples"
