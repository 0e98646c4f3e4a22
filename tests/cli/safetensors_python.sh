#!/usr/bin/env bash
# tests/cli/safetensors_python.sh — batch files written by engine/safetensors (through
# build/tests/st_tool) must load in the reference implementation (the `safetensors`
# Python package, Rust underneath) and in a numpy-only reader written from the format
# description, with the right shapes, dtypes, values and metadata, laid out as
# batchfs/2 promises (labels, indices, images; I64 tensors 8-byte aligned, 64 when B is
# a multiple of 8, images 4096-aligned, no holes); and st_tool's parser
# must accept standard files written by safetensors.numpy.save_file (8-byte-aligned
# header, no 4096 padding, every numpy dtype, zero-size and scalar tensors, metadata).
# Run from the repository root (tests/run.sh does); BUILD names the build directory.
set -euo pipefail
: "${BUILD:=build}"
TOOL=$PWD/$BUILD/tests/st_tool
if [ ! -x "$TOOL" ]; then
    echo "safetensors_python: $TOOL is missing; run 'make all-tests' first" >&2
    exit 1
fi
source tests/pyenv.sh

work=$(mktemp -d "${TMPDIR:-/tmp}/safetensors_python.XXXXXX")
trap 'rm -rf "$work"' EXIT

"$PY" - "$TOOL" "$work" <<'EOF'
import json
import struct
import subprocess
import sys

import numpy as np
import safetensors
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

tool, work = sys.argv[1], sys.argv[2]
failures = 0


def fail(msg):
    global failures
    failures += 1
    print("FAIL:", msg)


def np_load(path):
    """numpy-only reader: 8-byte length, JSON, np.frombuffer at the data offset."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {}) or {}
    types = {"U8": "<u1", "I8": "<i1", "U16": "<u2", "I16": "<i2", "U32": "<u4", "I32": "<i4",
             "U64": "<u8", "I64": "<i8", "F16": "<f2", "F32": "<f4", "F64": "<f8",
             "BOOL": "?", "BF16": "<u2"}
    out = {}
    for name, t in header.items():
        b, e = t["data_offsets"]
        dt = np.dtype(types[t["dtype"]])
        a = np.frombuffer(raw, dtype=dt, count=(e - b) // dt.itemsize, offset=8 + n + b)
        if t["dtype"] == "BF16":  # bfloat16 = the high half of a float32
            a = (a.astype(np.uint32) << 16).view(np.float32)
        out[name] = (t["dtype"], a.reshape(t["shape"]))
    return out, meta, n, len(raw)


def run(*args):
    return subprocess.run([tool, *args], check=True, capture_output=True, text=True).stdout


esize = {"u8": 1, "f16": 2, "bf16": 2, "f32": 4}
npdt = {"u8": np.uint8, "f16": np.float16, "bf16": np.float32, "f32": np.float32}
extras = {"note": 'caf\u00e9 "quoted" back\\slash \U0001F600', "seed": "42", "nl": "a\nb\tc"}
cases = 0
for dt in ["u8", "f16", "bf16", "f32"]:
    for layout in ["nhwc", "nchw"]:
        for b, h, w in [(1, 1, 1), (2, 3, 5), (4, 7, 9), (3, 32, 17), (16, 24, 24), (8, 15, 15),
                        (13, 5, 3), (256, 3, 5)]:
            cases += 1
            path = f"{work}/{dt}_{layout}_{b}x{h}x{w}.safetensors"
            epoch, batch = 7 + b, 1000 + h
            margs = [a for k, v in extras.items() for a in ("-m", f"{k}={v}")]
            run("write", "-e", str(epoch), "-k", str(batch), "-f", "00000000deadbeef", *margs,
                path, dt, layout, str(b), str(h), str(w))
            shape = (b, h, w, 3) if layout == "nhwc" else (b, 3, h, w)
            n_img = b * h * w * 3
            want_images = (np.arange(n_img) % 251).reshape(shape)
            want_meta = {"format": "batchfs/2", "layout": layout, "epoch": str(epoch),
                         "batch": str(batch), "fingerprint": "00000000deadbeef", **extras}
            tag = f"{dt}/{layout}/{b}x{h}x{w}"

            # the size formula without extras: images at the first multiple of 4096 that
            # holds 8 bytes, the widest JSON (491 bytes) and 16 * B of labels and indices
            size = int(run("size", dt, layout, str(b), str(h), str(w)))
            if size != (8 + 491 + 16 * b + 4095) // 4096 * 4096 + n_img * esize[dt]:
                fail(f"{tag}: st_tool size {size}")

            # numpy-only reader
            tensors, meta, n, flen = np_load(path)
            images_off = 8 + n + 16 * b
            if flen != images_off + n_img * esize[dt]:
                fail(f"{tag}: header length {n}, file size {flen}")
            # the layout: data order labels, indices, images, each naturally aligned
            hdr = json.loads(open(path, "rb").read()[8:8 + n])
            offs = {k: hdr[k]["data_offsets"] for k in ["labels", "indices", "images"]}
            if offs != {"labels": [0, 8 * b], "indices": [8 * b, 16 * b],
                        "images": [16 * b, 16 * b + n_img * esize[dt]]}:
                fail(f"{tag}: data offsets {offs}")
            if (8 + n) % 8 or images_off % 4096 or (b % 8 == 0 and (8 + n) % 64):
                fail(f"{tag}: labels at {8 + n}, images at {images_off}: misaligned")
            if list(tensors) != ["images", "labels", "indices"]:
                fail(f"{tag}: tensor order {list(tensors)}")
            if meta != want_meta:
                fail(f"{tag}: metadata {meta}")
            tdt, img = tensors["images"]
            if tdt != dt.upper() or img.shape != shape or not np.array_equal(img, want_images):
                fail(f"{tag}: numpy reader images {tdt} {img.shape}")
            for name, base in [("labels", 0), ("indices", 1000)]:
                tdt, a = tensors[name]
                if tdt != "I64" or a.shape != (b,) or not np.array_equal(a, np.arange(b) + base):
                    fail(f"{tag}: numpy reader {name} {tdt} {a}")

            # the reference implementation: full validation by the Rust core
            raw = open(path, "rb").read()
            ref = dict(safetensors.deserialize(raw))
            if ref["images"]["dtype"] != dt.upper() or list(ref["images"]["shape"]) != list(shape):
                fail(f"{tag}: deserialize images {ref['images']['dtype']} {ref['images']['shape']}")
            with safe_open(path, framework="np") as f:
                if f.metadata() != want_meta:
                    fail(f"{tag}: safe_open metadata {f.metadata()}")
                if list(f.keys()) != sorted(["images", "labels", "indices"]):
                    fail(f"{tag}: safe_open keys {list(f.keys())}")
            if dt != "bf16":  # numpy has no bfloat16; deserialize covered it above
                arrs = load_file(path)
                img = arrs["images"]
                if img.dtype != npdt[dt] or img.shape != shape or not np.array_equal(img, want_images):
                    fail(f"{tag}: load_file images {img.dtype} {img.shape}")
                if arrs["labels"].dtype != np.int64 or not np.array_equal(arrs["labels"], np.arange(b)):
                    fail(f"{tag}: load_file labels {arrs['labels']}")
                if not np.array_equal(arrs["indices"], np.arange(b) + 1000):
                    fail(f"{tag}: load_file indices {arrs['indices']}")
            else:
                bits = np.frombuffer(ref["images"]["data"], dtype="<u2").astype(np.uint32) << 16
                if not np.array_equal(bits.view(np.float32).reshape(shape), want_images):
                    fail(f"{tag}: deserialize bf16 images")

            # st_tool's own parser agrees
            lines = run("check", path).splitlines()
            dims = ",".join(map(str, shape))
            want = [f"images {dt.upper()} [{dims}]", f"labels I64 [{b}]", f"indices I64 [{b}]"]
            if lines != want:
                fail(f"{tag}: st_tool check printed {lines}")
            got = run("batch", path).split()
            if got != [dt.upper(), layout, str(b), str(h), str(w), str(epoch), str(batch),
                       "00000000deadbeef"]:
                fail(f"{tag}: st_tool batch printed {got}")

# standard files written by the reference writer (no 4096 padding)
rng = np.random.default_rng(5)
std = {
    "weight": rng.standard_normal((3, 5)).astype(np.float32),
    "bias": np.arange(7, dtype=np.float64),
    "half": np.ones((2, 2, 2), np.float16),
    "ids": np.arange(6, dtype=np.int64).reshape(2, 3),
    "i32": np.arange(5, dtype=np.int32),
    "u16": np.arange(3, dtype=np.uint16),
    "i8": np.array([-1, 2, -3], np.int8),
    "u8 odd": np.arange(13, dtype=np.uint8),
    "mask": np.array([True, False, True]),
    "scalar": np.array(3.5, np.float32),
    "empty": np.zeros((0, 4), np.float32),
    "caf\u00e9/\u6f22\u5b57 \"q\"": np.arange(2, dtype=np.uint32),
}
names = {np.float32: "F32", np.float64: "F64", np.float16: "F16", np.int64: "I64",
         np.int32: "I32", np.uint16: "U16", np.int8: "I8", np.uint8: "U8", np.bool_: "BOOL",
         np.uint32: "U32"}
for meta in [None, {"format": "np", "k": "v \u00e9"}]:
    path = f"{work}/std.safetensors"
    save_file(std, path, metadata=meta)
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    if (8 + n) % 4096 == 0:
        fail("the reference file happens to be 4096-aligned: pick other tensors")
    out = subprocess.run([tool, "check", path], capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"st_tool check rejects a save_file file: {out.stderr}")
        continue
    got = {}
    for line in out.stdout.splitlines():
        name, dtype, shape = line.rsplit(" ", 2)
        got[name] = (dtype, shape)
    want = {k: (names[v.dtype.type], "[" + ",".join(map(str, v.shape)) + "]")
            for k, v in std.items()}
    if got != want:
        fail(f"st_tool check on a save_file file: {got} != {want}")
    mout = run("meta", path).splitlines()
    if mout != [f"{k}={v}" for k, v in (meta or {}).items()] and sorted(mout) != sorted(
            f"{k}={v}" for k, v in (meta or {}).items()):
        fail(f"st_tool meta on a save_file file: {mout}")
    if subprocess.run([tool, "batch", path], capture_output=True).returncode == 0:
        fail("st_tool batch accepts a file that is not a batch")
    # and a truncated or padded copy is rejected
    for bad in [raw[:-1], raw + b"\0", raw[:8 + n]]:
        p = f"{work}/bad.safetensors"
        open(p, "wb").write(bad)
        if subprocess.run([tool, "check", p], capture_output=True).returncode == 0:
            fail(f"st_tool check accepts a file of {len(bad)} bytes (real {len(raw)})")

print(f"{cases} batch files checked against safetensors {safetensors.__version__} and numpy; "
      f"{failures} failures")
sys.exit(1 if failures else 0)
EOF
