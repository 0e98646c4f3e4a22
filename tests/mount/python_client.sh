#!/usr/bin/env bash
# tests/mount/python_client.sh — batches as a Python user meets them: a ~15-line
# numpy-only reader and safetensors.numpy.load_file both parse every batch and agree;
# shapes and dtypes for dtype=u8/f32 x layout=nhwc/nchw (and a non-square size); the
# float batch is the u8 batch / 255 transposed; labels match the ImageFolder's class order
# (gen_imagefolder writes class_XXX/ with PER_CLASS images each: label == index //
# PER_CLASS); each epoch's indices are a permutation; metadata epoch/batch/fingerprint;
# mapped, labels and indices are 8-byte aligned (64 for batch=8) and images page-aligned.
# Needs the test venv (tests/pyenv.sh: numpy, safetensors). About 10 s.
. "$(dirname "$0")/lib.sh"
require_fuse
need_py # $PY: python with numpy and safetensors

PER=12
"$GEN" "$T/images" 5 $PER 48 160 5 # 60 images, labels 0..4
M=$T/mnt
mkdir "$M"

cat >"$T/reader.py" <<'EOF'
import json, struct, numpy as np

DT = {"U8": np.uint8, "F16": np.float16, "F32": np.float32, "I64": np.int64}

def read_batch(path):
    """A batchfs batch (safetensors) as numpy views of one buffer, and its metadata."""
    buf = open(path, "rb").read()
    (n,) = struct.unpack("<Q", buf[:8])              # 8-byte little-endian header length
    header = json.loads(buf[8:8 + n])                # JSON header
    meta = header.pop("__metadata__", {})
    out = {}
    for name, t in header.items():
        a, b = t["data_offsets"]                     # relative to the end of the header
        arr = np.frombuffer(buf, DT[t["dtype"]], (b - a) // np.dtype(DT[t["dtype"]]).itemsize, 8 + n + a)
        out[name] = arr.reshape(t["shape"])
    return out, meta
EOF

check() { # OPTS: mount SOURCE with OPTS, check every batch of epochs 0 and 1 in Python
    local opts=$1
    mount_bfs "$T/images" "$M" -o "$opts,epochs=2"
    "$PY" - "$M" "$opts" "$PER" "$T/out_${opts//[^a-z0-9]/_}.npz" <<'EOF' || fail "Python client with -o $opts"
import json, mmap, os, struct, sys
import numpy as np
from safetensors.numpy import load_file
from safetensors import safe_open
sys.path.insert(0, os.path.dirname(sys.argv[4]))
from reader import read_batch

m, opts, per, save = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
o = dict(kv.split("=") for kv in opts.split(","))
B = int(o["batch"])
H, W = (int(x) for x in (o["size"].split("x") * 2)[:2])
dtype = {"u8": np.uint8, "f32": np.float32, "f16": np.float16}[o.get("dtype", "u8")]
layout = o.get("layout", "nhwc")
fp = os.getxattr(m, "user.batchfs.fingerprint").decode()
n = 60
nb = n // B                                           # drop_last=1
def die(msg):
    sys.exit("-o %s: %s" % (opts, msg))
if sorted(os.listdir(m + "/epoch/0"), key=lambda s: int(s[6:])) != ["batch_%d" % k for k in range(nb)]:
    die("epoch/0 lists %s" % os.listdir(m + "/epoch/0"))
saved = {}
for e in (0, 1):
    seen = []
    for k in range(nb):
        path = "%s/epoch/%d/batch_%d" % (m, e, k)
        t, meta = read_batch(path)
        st = load_file(path)
        with safe_open(path, framework="np") as f:
            meta2 = f.metadata()
        if sorted(t) != ["images", "indices", "labels"] or sorted(st) != sorted(t):
            die("tensors %s / load_file %s" % (sorted(t), sorted(st)))
        for name in t:
            if t[name].dtype != st[name].dtype or t[name].shape != st[name].shape or \
               not np.array_equal(t[name], st[name]):
                die("%s: the numpy reader and load_file disagree" % name)
        img, lab, idx = t["images"], t["labels"], t["indices"]
        want = (B, H, W, 3) if layout == "nhwc" else (B, 3, H, W)
        if img.shape != want or img.dtype != dtype:
            die("images %s %s, expected %s %s" % (img.shape, img.dtype, want, np.dtype(dtype)))
        if lab.shape != (B,) or idx.shape != (B,) or lab.dtype != np.int64 or idx.dtype != np.int64:
            die("labels %s %s, indices %s %s" % (lab.shape, lab.dtype, idx.shape, idx.dtype))
        if not np.array_equal(lab, idx // per):
            die("epoch %d batch %d: labels %s != indices // %d %s" % (e, k, lab, per, idx // per))
        if not ((idx >= 0) & (idx < n)).all():
            die("indices out of range: %s" % idx)
        if k == 0:  # mapped, as numpy sees it: I64 aligned (64 when B % 8 == 0), images on a page
            with open(path, "rb") as f:
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            (hn,) = struct.unpack("<Q", mm[:8])
            hdr = json.loads(mm[8:8 + hn])
            i64_align = 64 if B % 8 == 0 else 8
            for name, align in (("labels", i64_align), ("indices", i64_align), ("images", 4096)):
                v = np.frombuffer(mm, np.uint8, 1, 8 + hn + hdr[name]["data_offsets"][0])
                addr = v.ctypes.data
                del v
                if addr % align:
                    die("epoch %d: %s mapped at %#x, not %d-byte aligned" % (e, name, addr, align))
            mm.close()
        want_meta = {"format": "batchfs/2", "layout": layout, "epoch": str(e), "batch": str(k),
                     "fingerprint": fp}
        if meta != want_meta or meta2 != want_meta:
            die("metadata %s / safe_open %s, expected %s" % (meta, meta2, want_meta))
        if dtype == np.uint8:
            if img.min() == img.max():
                die("images are flat")
        else:
            if not np.isfinite(img).all() or not (-0.001 <= img.min() and img.max() <= 1.001):
                die("normalize=none float images outside [0, 1]: %s..%s" % (img.min(), img.max()))
        seen += idx.tolist()
        if e == 0 and k < 2:
            saved["images%d" % k] = img
            saved["indices%d" % k] = idx
    if len(set(seen)) != len(seen) or len(seen) != nb * B:
        die("epoch %d: %d indices, %d distinct" % (e, len(seen), len(set(seen))))
np.savez(save, **saved)
print("ok - -o %s: %d batches x 2 epochs, images %s %s, labels of batch 0: %s" % (
    opts, nb, img.shape, img.dtype, t["labels"][:8].tolist()))
EOF
    unmount_bfs "$M"
}

check batch=8,size=24,dtype=u8,layout=nhwc
check batch=3,size=15,dtype=u8,layout=nhwc # 2025 bytes of images: batchfs/1 put labels at 6121
check batch=8,size=24,dtype=u8,layout=nchw
check batch=8,size=24,dtype=f32,normalize=none,layout=nhwc
check batch=8,size=24,dtype=f32,normalize=none,layout=nchw
check batch=16,size=16x40,dtype=f16,normalize=none,layout=nchw

# The four spellings of one pipeline hold the same pixels: u8 nchw is u8 nhwc transposed,
# and f32 with normalize=none is u8 / 255 (rounded to u8 by the engine: within 0.5/255).
"$PY" - "$T" <<'EOF' || fail "layouts and dtypes do not hold the same pixels"
import sys, numpy as np
t = sys.argv[1]
def L(name):
    return np.load("%s/out_batch_8_size_24_%s.npz" % (t, name))
u_hwc, u_chw = L("dtype_u8_layout_nhwc"), L("dtype_u8_layout_nchw")
f_hwc, f_chw = L("dtype_f32_normalize_none_layout_nhwc"), L("dtype_f32_normalize_none_layout_nchw")
for k in (0, 1):
    i = "images%d" % k
    for d in (u_chw, f_hwc, f_chw):
        if not np.array_equal(d["indices%d" % k], u_hwc["indices%d" % k]):
            sys.exit("batch %d: indices differ between dtypes/layouts" % k)
    if not np.array_equal(u_chw[i], u_hwc[i].transpose(0, 3, 1, 2)):
        sys.exit("batch %d: u8 nchw is not u8 nhwc transposed" % k)
    if not np.array_equal(f_chw[i], f_hwc[i].transpose(0, 3, 1, 2)):
        sys.exit("batch %d: f32 nchw is not f32 nhwc transposed" % k)
    err = np.abs(f_hwc[i] * 255 - u_hwc[i].astype(np.float32)).max()
    if err > 0.5 + 1e-3:
        sys.exit("batch %d: f32 * 255 differs from u8 by up to %.3f" % (k, err))
print("ok - u8/f32 x nhwc/nchw hold the same pixels (transposes; |f32*255 - u8| <= 0.5)")
EOF

# normalize=imagenet: (x/255 - mean)/std of the same pixels
mount_bfs "$T/images" "$M" -o batch=8,size=24,dtype=f32,layout=nhwc,epochs=1
"$PY" - "$M/epoch/0/batch_0" "$T/out_batch_8_size_24_dtype_f32_normalize_none_layout_nhwc.npz" <<'EOF' || fail "normalize=imagenet"
import sys, numpy as np
from safetensors.numpy import load_file
x = load_file(sys.argv[1])["images"]
ref = np.load(sys.argv[2])["images0"]
mean, std = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)
err = np.abs(x - (ref - mean) / std).max()
if err > 1e-4:
    sys.exit("normalize=imagenet differs from (x - mean)/std by %g" % err)
print("ok - dtype=f32 (normalize=imagenet by default) == (x/255 - mean)/std, max error %.2g" % err)
EOF
unmount_bfs "$M"
