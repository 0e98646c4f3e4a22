"""augment_ref.py — torchvision's side of tests/cli/augment_torch.sh.

    augment_ref.py TOOL CORPUS TMP N_PHOTOS SEED
    augment_ref.py --pipeline TOOL CORPUS TMP N_PHOTOS

--pipeline: the recipe options through the engine (`TOOL batch`) on a folder of PNGs made
from N_PHOTOS photographs at exactly the output size (64 x 48), with scale=1:1 and ratio=4/3
so that the crop is the whole image and the resize an identity. Each served sample must
equal torchvision's ops applied to the (flipped, per `TOOL geometry`) PNG, in the order and
with the magnitudes `TOOL recipe` reports: what the fused path does after the resize,
through the real batch writer, for each policy and for color_jitter + grayscale_p.

Takes N_PHOTOS photographs of CORPUS (JPEG files, sorted), resizes each to a random size
(48..260 px a side, a quarter of them square, so that rotations by 90 degrees take
torch.rot90's path), and applies every op of engine/imgops.h with random magnitudes
through `TOOL ops` (the engine's bfs_imgop_apply) and through
torchvision.transforms.v2.functional on a uint8 CHW tensor, as torchvision's
auto-augment code calls it (nearest sampling, fill None). Every output must be
byte-identical; the first difference fails with the op, the magnitude and the photo.
Then torch.linspace's magnitude tables against bfs_imgop_linspace (float32 bit for bit).
Prints one line per op: images, values compared, differing values (0).
"""
import math
import os
import subprocess
import sys

import numpy as np
import torch
import torchvision.transforms.v2.functional as F
from PIL import Image

NEAREST = F.InterpolationMode.NEAREST
OPS = ['Identity', 'ShearX', 'ShearY', 'TranslateX', 'TranslateY', 'Rotate', 'Brightness',
       'Color', 'Contrast', 'Sharpness', 'Posterize', 'Solarize', 'AutoContrast', 'Equalize',
       'Invert', 'Hue', 'Grayscale']


def reference(img, op, m):
    """torchvision on HWC uint8 img: _AutoAugmentBase._apply_image_or_video_transform."""
    t = torch.from_numpy(np.array(img)).permute(2, 0, 1).contiguous()  # a writable copy
    if op == 'Identity':
        r = t
    elif op == 'ShearX':
        r = F.affine(t, angle=0.0, translate=[0, 0], scale=1.0,
                     shear=[math.degrees(math.atan(m)), 0.0], interpolation=NEAREST,
                     fill=None, center=[0, 0])
    elif op == 'ShearY':
        r = F.affine(t, angle=0.0, translate=[0, 0], scale=1.0,
                     shear=[0.0, math.degrees(math.atan(m))], interpolation=NEAREST,
                     fill=None, center=[0, 0])
    elif op == 'TranslateX':
        r = F.affine(t, angle=0.0, translate=[int(m), 0], scale=1.0, shear=[0.0, 0.0],
                     interpolation=NEAREST, fill=None)
    elif op == 'TranslateY':
        r = F.affine(t, angle=0.0, translate=[0, int(m)], scale=1.0, shear=[0.0, 0.0],
                     interpolation=NEAREST, fill=None)
    elif op == 'Rotate':
        r = F.rotate(t, angle=m, interpolation=NEAREST, fill=None)
    elif op == 'Brightness':
        r = F.adjust_brightness(t, brightness_factor=m)
    elif op == 'Color':
        r = F.adjust_saturation(t, saturation_factor=m)
    elif op == 'Contrast':
        r = F.adjust_contrast(t, contrast_factor=m)
    elif op == 'Sharpness':
        r = F.adjust_sharpness(t, sharpness_factor=m)
    elif op == 'Posterize':
        r = F.posterize(t, bits=int(m))
    elif op == 'Solarize':
        r = F.solarize(t, threshold=m)
    elif op == 'AutoContrast':
        r = F.autocontrast(t)
    elif op == 'Equalize':
        r = F.equalize(t)
    elif op == 'Invert':
        r = F.invert(t)
    elif op == 'Hue':
        r = F.adjust_hue(t, hue_factor=m)
    elif op == 'Grayscale':
        r = F.rgb_to_grayscale(t, num_output_channels=3)
    else:
        raise ValueError(op)
    return r.permute(1, 2, 0).numpy()


def magnitude(rng, op):
    """A random magnitude over the op's whole range in the recipes (and beyond)."""
    if op in ('ShearX', 'ShearY'):
        return float(rng.uniform(-0.99, 0.99))
    if op in ('TranslateX', 'TranslateY'):
        return float(rng.uniform(-120, 120))
    if op == 'Rotate':
        return float(rng.choice([rng.uniform(-135, 135), rng.uniform(-135, 135), 90.0, 180.0,
                                 -90.0, 0.0]))
    if op in ('Brightness', 'Color', 'Contrast', 'Sharpness'):
        return float(rng.uniform(0, 2))
    if op == 'Posterize':
        return float(rng.integers(0, 9))
    if op == 'Solarize':
        return float(np.float32(rng.uniform(0, 1))) * 255.0
    if op == 'Hue':
        return float(rng.uniform(-0.5, 0.5))
    return 0.0


def main():
    tool, corpus, tmp, n_photos, seed = sys.argv[1:6]
    rng = np.random.default_rng(int(seed))
    files = sorted(os.path.join(r, f) for r, _, fs in os.walk(corpus) for f in fs
                   if f.endswith('.jpg'))[:int(n_photos)]
    if len(files) < int(n_photos):
        sys.exit(f'augment_ref: {corpus} has {len(files)} photos, {n_photos} wanted')
    lines, cases = [], []
    for i, f in enumerate(files):
        h = int(rng.integers(48, 261))
        w = h if i % 4 == 0 else int(rng.integers(48, 261))
        img = np.asarray(Image.open(f).convert('RGB').resize((w, h), Image.BILINEAR)).copy()
        src = os.path.join(tmp, f'in{i}.rgb')
        img.tofile(src)
        for op in OPS:
            m = magnitude(rng, op)
            out = os.path.join(tmp, f'out{i}_{op}.rgb')
            lines.append(f'{src} {out} {w} {h} {op} {m!r}\n')
            cases.append((f, img, op, m, out))
    subprocess.run([tool, 'ops'], input=''.join(lines), text=True, check=True)
    stats = {op: [0, 0] for op in OPS}
    for f, img, op, m, out in cases:
        got = np.fromfile(out, dtype=np.uint8).reshape(img.shape)
        want = reference(img, op, m)
        diff = int((got != want).sum())
        if diff:
            sys.exit(f'augment_ref: {op}({m!r}) on {f} resized to {img.shape[1]}x{img.shape[0]}: '
                     f'{diff} of {got.size} values differ from torchvision, at most by '
                     f'{int(np.abs(got.astype(int) - want.astype(int)).max())}')
        stats[op][0] += 1
        stats[op][1] += got.size
        os.unlink(out)
    for op, (n, values) in stats.items():
        print(f'{op:13s} {n} images, {values} values, 0 differ from torchvision')
    # the magnitude tables: torch.linspace as the auto-augment recipes call it
    tables = [(0.0, hi, bins) for bins in (10, 31) for hi in (0.3, 30.0, 0.9, 0.99, 32.0, 135.0)]
    tables += [(1.0, 0.0, 10), (1.0, 0.0, 31)]
    tables += [(0.0, 150.0 / 331.0 * s, bins) for s in (96, 128, 160, 192, 224, 256, 288)
               for bins in (10, 31)]
    req = ''.join(f'linspace {a!r} {b!r} {n}\n' for a, b, n in tables)
    got = subprocess.run([tool, 'ops'], input=req, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    # torch's kernel takes the scalar formula for tables shorter than two vectors: always
    # with AVX-512 (16 floats); with AVX2 the first 16 of 31 values come from its vector
    # formula, which may differ in the last bit
    cap = torch.backends.cpu.get_cpu_capability()
    ulps = 0 if cap.startswith('AVX512') else 1
    for (a, b, n), line in zip(tables, got, strict=True):
        mine = np.array([float(v) for v in line.split()], dtype=np.float32)
        want = torch.linspace(a, b, n).numpy()
        far = np.abs(mine.view(np.int32) - want.view(np.int32)) > ulps
        if far.any():
            sys.exit(f'augment_ref: linspace({a}, {b}, {n}) differs from torch ({cap}) '
                     f'by more than {ulps} ulp at {np.nonzero(far)[0].tolist()}')
    print(f'linspace: {len(tables)} magnitude tables within {ulps} ulp of torch.linspace '
          f'(CPU capability {cap})')


def tensors(path):
    """The tensors of a safetensors file, by name."""
    import json
    import struct
    raw = open(path, 'rb').read()
    n = struct.unpack('<Q', raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    out = {}
    for name, t in hdr.items():
        if name == '__metadata__':
            continue
        b, e = t['data_offsets']
        dt = {'U8': np.uint8, 'I64': np.int64, 'F32': np.float32}[t['dtype']]
        out[name] = np.frombuffer(raw[8 + n + b:8 + n + e], dtype=dt).reshape(t['shape'])
    return out


def pipeline():
    tool, corpus, tmp, n_photos = sys.argv[2:6]
    n = int(n_photos)
    files = sorted(os.path.join(r, f) for r, _, fs in os.walk(corpus) for f in fs
                   if f.endswith('.jpg'))[:n]
    src = os.path.join(tmp, 'png')
    pixels = []
    for i, f in enumerate(files):  # two classes, file names sorting as made
        d = os.path.join(src, f'c{i % 2}')
        os.makedirs(d, exist_ok=True)
        Image.open(f).convert('RGB').resize((64, 48), Image.BILINEAR).save(
            os.path.join(d, f'{i:04d}.png'))
    order = sorted(os.path.join(r, f) for r, _, fs in os.walk(src) for f in fs)
    pixels = [np.asarray(Image.open(p).convert('RGB')) for p in order]
    base = f'batch={n},size=48x64,scale=1:1,ratio=4/3:4/3,flip=0.5,seed=5'
    recipes = ['randaugment=2:9', 'randaugment=3:27', 'trivialaugment=1',
               'autoaugment=imagenet', 'color_jitter=0.4:0.4:0.4:0.1,grayscale_p=0.2',
               'color_jitter=0.8:0:0.5:0.5,grayscale_p=1/3,randaugment=1:15']
    for recipe in recipes:
        opts = base + ',' + recipe
        used = {}
        for epoch in ('0', '3'):
            out = os.path.join(tmp, 'b.st')
            subprocess.run([tool, 'batch', src, opts, epoch, '0', out], check=True)
            t = tensors(out)
            for j, idx in enumerate(t['indices']):
                g = subprocess.run([tool, 'geometry', src, opts, epoch, str(idx)], check=True,
                                   capture_output=True, text=True).stdout.split()
                ops = subprocess.run([tool, 'recipe', '-', opts, epoch, str(idx)], check=True,
                                     capture_output=True, text=True).stdout.split('\n')
                want = pixels[idx][:, ::-1] if int(g[12]) else pixels[idx]
                want = np.ascontiguousarray(want)
                for line in filter(None, ops):
                    op, m = line.split()
                    want = np.ascontiguousarray(reference(want, op, float(m)))
                    used[op] = used.get(op, 0) + 1
                got = t['images'][j]
                if not np.array_equal(got, want):
                    sys.exit(f'augment_ref: {opts} epoch {epoch} sample {idx} ({order[idx]}, '
                             f'ops {ops}): {int((got != want).sum())} values differ from '
                             f'torchvision')
        print(f'{recipe}: 2 epochs x {n} samples equal to torchvision; ops used: '
              + ', '.join(f'{k} {v}' for k, v in sorted(used.items())))


if __name__ == '__main__':
    if sys.argv[1] == '--pipeline':
        pipeline()
    else:
        main()
