#!/usr/bin/env bash
# augment_mix.sh — mixup= and cutmix= (timm's Mixup in batch mode) through the engine's
# batches, against timm's own code for the engine's draws: for each batch, the draws
# `engine_tool mixdraw` reports (lam, CutMix or Mixup, the box) applied as timm applies
# them — Mixup._mix_batch on float batches (torch, float32, then the output dtype),
# FastCollateMixup's formula on u8 ones — to the same batch served without mixing must
# give the served images exactly, and timm.data.mixup.mixup_target(labels, classes, lam,
# label_smoothing) the served `targets` exactly; over dtypes, layouts, an odd batch, a
# shard, mix_prob and switch_prob. Then the draws' distribution over 400 batches (Beta's
# mean, the CutMix share), and the refusals (classes= below the dataset's class count).
# Needs the torch venv (tests/torch_env.sh, with timm).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
source tests/torch_env.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$BUILD/tests/gen_imagefolder" "$tmp/src" 4 15 60 120 5
tool=$BUILD/tests/engine_tool
if "$tool" batch "$tmp/src" "batch=4,mixup=0.8,classes=3" 0 0 "$tmp/x.st" 2>"$tmp/err"; then
    echo "FAIL: classes=3 on a 4-class dataset was accepted" >&2; exit 1
fi
grep -q "classes=3 is fewer than the 4 classes of" "$tmp/err" ||
    { echo "FAIL: unexpected message: $(cat "$tmp/err")" >&2; exit 1; }
"$TORCH_PY" - "$tool" "$tmp/src" "$tmp" <<'PYEOF'
import json, re, struct, subprocess, sys
import numpy as np
import torch
from timm.data.mixup import mixup_target
tool, src, tmp = sys.argv[1:4]
DT = {'F32': np.float32, 'F16': np.float16, 'BF16': np.uint16, 'I64': np.int64, 'U8': np.uint8}

def tensors(path):
    raw = open(path, 'rb').read()
    n = struct.unpack('<Q', raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    out = {}
    for k, t in hdr.items():
        if k != '__metadata__':
            b, e = t['data_offsets']
            out[k] = (np.frombuffer(raw[8 + n + b:8 + n + e], dtype=DT[t['dtype']]).reshape(t['shape']), t['dtype'])
    return out

def run(*args):
    return subprocess.run([tool, *args], check=True, capture_output=True, text=True).stdout

def as_torch(a, dt):
    if dt == 'BF16':
        return torch.from_numpy(a.astype(np.int16)).view(torch.bfloat16).float()
    return torch.from_numpy(a.astype(np.float32))

def to_dtype(t, dt):
    if dt == 'F32':
        return t.numpy()
    if dt == 'F16':
        return t.to(torch.float16).numpy()
    return t.to(torch.bfloat16).view(torch.int16).numpy().astype(np.uint16)

cases = [
    ('batch=20,size=32,seed=3,dtype=f32', 'mixup=0.8,cutmix=1.0,label_smoothing=0.1', 6),
    ('batch=21,size=24x40,seed=4,dtype=u8,drop_last=0', 'mixup=0.4,mix_prob=0.7', 3),
    ('batch=16,size=32,seed=5,dtype=f16,layout=nchw', 'cutmix=1.0,classes=10', 4),
    ('batch=16,size=32,seed=6,dtype=bf16,shard=1/2', 'mixup=1.0,cutmix=0.5,switch_prob=0.8,label_smoothing=0.2', 2),
    ('batch=12,size=32,seed=7,dtype=u8', 'label_smoothing=0.1', 2),
]
mixed_seen = {'mixup': 0, 'cutmix': 0, 'none': 0}
for base, mix, nbatches in cases:
    shard = re.search(r'shard=(\d+)/(\d+)', base)
    si, sn = (int(shard[1]), int(shard[2])) if shard else (0, 1)
    for epoch in ('0', '1'):
        for k in range(nbatches):
            opts = base + ',' + mix
            try:
                run('batch', src, base, epoch, str(k), f'{tmp}/plain.st')
            except subprocess.CalledProcessError:
                break  # past the shard's last batch
            run('batch', src, opts, epoch, str(k), f'{tmp}/mixed.st')
            plain, got = tensors(f'{tmp}/plain.st'), tensors(f'{tmp}/mixed.st')
            (x, dt), (y, _) = plain['images'], got['images']
            labels = plain['labels'][0]
            assert np.array_equal(labels, got['labels'][0]), 'labels must stay as they are'
            lam, cut, yl, yh, xl, xh = run('mixdraw', '-', opts, epoch, str(k * sn + si)).split()
            lam, cut, yl, yh, xl, xh = float(lam), int(cut), int(yl), int(yh), int(xl), int(xh)
            nchw = 'layout=nchw' in base
            if dt == 'U8':  # FastCollateMixup._mix_batch_collate
                want = x.copy()
                n = len(x)
                for i in range(n):
                    j = n - i - 1
                    if lam != 1.0:
                        if cut:
                            sl = (slice(None), slice(yl, yh), slice(xl, xh)) if nchw else (slice(yl, yh), slice(xl, xh))
                            m = x[i].copy(); m[sl] = x[j][sl]
                        else:
                            m = x[i].astype(np.float32) * lam + x[j].astype(np.float32) * (1 - lam)
                            np.rint(m, out=m)
                        want[i] = m.astype(np.uint8)
            else:  # Mixup._mix_batch on the float batch
                t = as_torch(x, dt)
                if not nchw:
                    t = t.permute(0, 3, 1, 2).contiguous()
                if lam != 1.0:
                    if cut:
                        t[:, :, yl:yh, xl:xh] = t.flip(0)[:, :, yl:yh, xl:xh]
                    else:
                        t_flipped = t.flip(0).mul_(1. - lam)
                        t.mul_(lam).add_(t_flipped)
                if not nchw:
                    t = t.permute(0, 2, 3, 1).contiguous()
                want = to_dtype(t, dt)
            if not np.array_equal(want, y):
                sys.exit(f'FAIL: {opts} epoch {epoch} batch {k}: images differ from timm\'s mixing '
                         f'(lam {lam}, cutmix {cut}) in {int((want != y).sum())} values')
            classes = int(re.search(r'classes=(\d+)', opts)[1]) if 'classes=' in opts else 4
            ls = float(re.search(r'label_smoothing=([0-9.]+)', opts)[1]) if 'label_smoothing' in opts else 0.0
            ref = mixup_target(torch.from_numpy(labels.copy()), classes, lam, ls).numpy()
            tg = got['targets'][0]
            if tg.shape != ref.shape or not np.array_equal(ref, tg):
                sys.exit(f'FAIL: {opts} epoch {epoch} batch {k}: targets differ from timm\'s '
                         f'mixup_target (lam {lam}): {tg[:2]} vs {ref[:2]}')
            mixed_seen['none' if lam == 1.0 else 'cutmix' if cut else 'mixup'] += 1
print(f'images and targets equal to timm\'s for every batch: {mixed_seen}')
# the draws' distribution: Beta(a, a) has mean 1/2; CutMix with probability switch_prob
lams, cuts, mixed = [], 0, 0
for b in range(400):
    lam, cut = run('mixdraw', '-', 'size=224,mixup=0.8,cutmix=1.0,mix_prob=0.6,switch_prob=0.3', '0', str(b)).split()[:2]
    if float(lam) != 1.0:
        mixed += 1
        cuts += int(cut)
        if not int(cut):
            lams.append(float(lam))
share, cshare, mean = mixed / 400, cuts / max(mixed, 1), float(np.mean(lams))
print(f'400 batches: {share:.2f} mixed (mix_prob 0.6), {cshare:.2f} of them CutMix (switch_prob 0.3), '
      f'Mixup lam mean {mean:.3f} (Beta(0.8, 0.8): 0.5)')
assert abs(share - 0.6) < 0.08 and abs(cshare - 0.3) < 0.1 and abs(mean - 0.5) < 0.06
PYEOF
