#!/usr/bin/env bash
# tests/cli/gpu_python.sh — the Python binding gpu/python/batchfs_gpu.py over the built
# libbatchfs-gpu, on a directory laid out like a mount (DIR/epoch/{0,1}/batch_{0..3},
# written by st_tool, each file's tensor bytes then made unique so that a view left on a
# recycled buffer shows another batch's bytes):
#   - device=cpu: order and count, rank/world, epoch_begin, seek; numpy.from_dlpack of
#     images/labels/indices equals safetensors.numpy.load_file of the file (dtype, shape,
#     bytes); 1000 capsules never consumed are dropped; arrays taken through DLPack and
#     Batch objects stay equal to their files after later batches and after the Loader is
#     closed; release is once only; dropping a Batch releases it at once (no cycle);
#     errors: missing path (ENOENT, the path), unknown parameter (its name), a truncated
#     file (EBADMSG, named on the iteration that reaches it; iteration goes on);
#   - device=cuda on the suite's fake driver (device pointers are never touched from
#     Python): __dlpack_device__ (2, 0), .device cuda:0, copy=staging, the DLPack stream
#     argument (None, -1, 1, 2, a handle, 0 refused) counted in cuStreamWaitEvent calls,
#     dl_device refused, capsules and Batches dropped, consumed or outliving the Loader
#     leave no device memory, pinned memory or context reference behind (the fake's
#     counters), also when the consumer drops the capsule with an exception pending;
#     dtype=f32 / layout=nchw;
#   - token batches (mkbatchfs --tokens, engine_tool epoch: pack=concat with positions,
#     pad, bucket of several shapes): on the host every tensor through numpy.from_dlpack,
#     numpy() and __array_interface__ equals load_file (names in data order, int32 /
#     int64 / uint8); on the fake driver the device bytes (read back through the driver)
#     equal the files, DLPack says kDLInt 32 for the tokens, nothing leaks; dtype= is
#     refused (EINVAL, naming the file);
#   - the ctypes structs match the header's sizes and offsets (cc), the module compiles
#     and imports without warnings.
# Run: BUILD=build bash tests/cli/gpu_python.sh (tests/run.sh does). About a second.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
B=$PWD/$BUILD
for f in "$B/libbatchfs-gpu.so" "$B/tests/st_tool" "$B/tests/fakecuda/libcuda.so.1" \
    "$B/mkbatchfs" "$B/tests/engine_tool"; do
    [ -e "$f" ] || { echo "gpu_python: $f is missing; run 'make all-tests' first" >&2; exit 1; }
done
source tests/pyenv.sh

T=$(mktemp -d "${TMPDIR:-/tmp}/gpu_python.XXXXXX")
trap 'rm -rf "$T"' EXIT
export PYTHONDONTWRITEBYTECODE=1 # no __pycache__ in the source tree
export PYTHONPATH=$PWD/gpu/python
export BATCHFS_GPU_LIBRARY=$B/libbatchfs-gpu.so
unset BATCHFS_GPU_LIBCUDA
# an ASan build's library (make SANITIZER=address) needs ASan's runtime loaded first;
# CPython itself leaks by design, so leak checking is off for this process
if grep -q ' U __asan_' <<<"$(nm -D "$BATCHFS_GPU_LIBRARY" 2>/dev/null)"; then
    export LD_PRELOAD=$(cc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0
fi
# a ThreadSanitizer build's (make SANITIZER=thread) too: its runtime cannot be dlopen'ed
# ("cannot allocate memory in static TLS block"); CPython is not instrumented, so what
# TSan checks is the library's own code
if grep -q ' U __tsan_' <<<"$(nm -D "$BATCHFS_GPU_LIBRARY" 2>/dev/null)"; then
    export LD_PRELOAD=$(cc -print-file-name=libtsan.so)
fi

"$PY" -c 'import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)' \
    gpu/python/batchfs_gpu.py "$T/batchfs_gpu.pyc"
"$PY" -X dev -W error -c 'import batchfs_gpu' || { echo "FAIL: import warns" >&2; exit 1; }
echo "ok: the module compiles and imports under -X dev -W error"

if command -v cc >/dev/null; then
    cat >"$T/layout.c" <<'C'
#include "gpu/batchfs_gpu.h"
#include "gpu/dlpack.h"
#include <stddef.h>
#include <stdio.h>
int main(void)
{
    printf("batch %zu %zu %zu %zu\n", sizeof(bfsg_batch), offsetof(bfsg_batch, tensors),
           offsetof(bfsg_batch, device_type), offsetof(bfsg_batch, ready_event));
    printf("tensor %zu %zu %zu\n", sizeof(bfsg_tensor), offsetof(bfsg_tensor, data),
           offsetof(bfsg_tensor, nbytes));
    printf("stats %zu %zu %zu\n", sizeof(bfsg_stats), offsetof(bfsg_stats, device),
           offsetof(bfsg_stats, fallback));
    printf("managed %zu %zu %zu\n", sizeof(bfsg_DLManagedTensor),
           offsetof(bfsg_DLManagedTensor, manager_ctx), offsetof(bfsg_DLTensor, byte_offset));
    printf("api %d %d %d\n", BFSG_API_VERSION, BFSG_MAX_TENSORS, BFSG_MAX_DIMS);
    return 0;
}
C
    cc -I. "$T/layout.c" -o "$T/layout" && "$T/layout" >"$T/layout.txt"
else
    echo "note: no C compiler here: the ctypes struct layout is not compared with the header"
fi

"$PY" - "$B" "$T" <<'EOF'
import ctypes
import errno
import gc
import json
import os
import struct
import subprocess
import sys
import time
import traceback

import numpy as np
from safetensors.numpy import load_file

import batchfs_gpu as bg

build, tmp = sys.argv[1], sys.argv[2]
st_tool, fake = f"{build}/tests/st_tool", f"{build}/tests/fakecuda/libcuda.so.1"
t0 = time.monotonic()
passed, failed = 0, []


class Skip(Exception):
    pass


def section(fn):
    """run one group of checks: 'ok: <doc>', 'note: ...' where it cannot run here, or FAIL
    with the traceback"""
    global passed
    try:
        fn()
        passed += 1
        print(f"ok: {fn.__doc__}")
    except Skip as e:
        print(f"note: {e}: not checked here ({fn.__doc__})")
    except Exception:
        failed.append(fn.__name__)
        print(f"FAIL: {fn.__name__} ({fn.__doc__})")
        traceback.print_exc(file=sys.stdout)


def make_dir(d, n_epochs=2, n_batches=4, shape=(3, 5, 7)):
    """d/epoch/E/batch_K with st_tool; then each file's tensor bytes made its own"""
    for e in range(n_epochs):
        os.makedirs(f"{d}/epoch/{e}", exist_ok=True)
        for k in range(n_batches):
            p = f"{d}/epoch/{e}/batch_{k}"
            subprocess.run([st_tool, "write", "-e", str(e), "-k", str(k), p, "u8", "nhwc",
                            *map(str, shape)], check=True, stdout=subprocess.DEVNULL)
            raw = bytearray(open(p, "rb").read())
            (n,) = struct.unpack("<Q", raw[:8])
            hdr = json.loads(raw[8:8 + n])
            salt = 1 + e * n_batches + k
            for name, t in hdr.items():
                if name == "__metadata__":
                    continue
                lo, hi = (8 + n + o for o in t["data_offsets"])
                dt = np.uint8 if t["dtype"] == "U8" else np.int64
                a = np.frombuffer(raw, dt, (hi - lo) // np.dtype(dt).itemsize, lo).copy()
                a += dt(salt * 37 % 256 if dt == np.uint8 else salt * 100)  # wraps
                raw[lo:hi] = a.tobytes()
            open(p, "wb").write(raw)


D = f"{tmp}/mnt"
make_dir(D)
ALL = [(e, k) for e in range(2) for k in range(4)]
ref = {}


def want(path):
    if path not in ref:
        ref[path] = load_file(path)
    return ref[path]


def same(arr, path, name):
    w = want(path)[name]
    assert arr.dtype == w.dtype and arr.shape == w.shape, \
        f"{path} {name}: {arr.dtype}{arr.shape} != {w.dtype}{w.shape}"
    assert np.array_equal(arr, w), f"{path} {name}: bytes differ"


fc = ctypes.CDLL(fake)
fc.fake_cuda_counter.restype = ctypes.c_ulonglong
fc.fake_cuda_counter.argtypes = [ctypes.c_char_p]


def cnt(name):
    return fc.fake_cuda_counter(name.encode())


def layout():
    """the ctypes structs have the header's sizes and offsets"""
    p = f"{tmp}/layout.txt"
    if not os.path.exists(p):
        raise Skip("no C compiler")
    got = {l.split()[0]: list(map(int, l.split()[1:])) for l in open(p)}
    s = ctypes.sizeof
    mine = {
        "batch": [s(bg._CBatch), bg._CBatch.tensors.offset, bg._CBatch.device_type.offset,
                  bg._CBatch.ready_event.offset],
        "tensor": [s(bg._CTensor), bg._CTensor.data.offset, bg._CTensor.nbytes.offset],
        "stats": [s(bg._CStats), bg._CStats.device.offset, bg._CStats.fallback.offset],
        "managed": [s(bg._DLManagedTensor), bg._DLManagedTensor.manager_ctx.offset,
                    bg._DLTensor.byte_offset.offset],
        "api": [bg.API_VERSION, bg._MAX_TENSORS, bg._MAX_DIMS],
    }
    assert got == mine, f"C {got} != ctypes {mine}"


def order_and_bytes():
    """device=cpu: 8 batches in order; images/labels/indices via numpy.from_dlpack equal load_file (dtype, shape, bytes); strides in elements; stats"""
    with bg.Loader(D, device="cpu") as l:
        assert l.device == "cpu", l.device
        seen = []
        for b in l:
            seen.append((b.epoch, b.index))
            assert b.path == f"{D}/epoch/{b.epoch}/batch_{b.index}", b.path
            assert b.device == "cpu" and b.keys() == ["images", "labels", "indices"], b
            for name in b.keys():
                t = b[name]
                assert t.__dlpack_device__() == (1, 0) and t.device == "cpu"
                same(np.from_dlpack(t), b.path, name)
                same(t.numpy(), b.path, name)
                same(np.asarray(bg._ArrayInterface(t)), b.path, name)  # numpy < 1.22's path
            img = b["images"]
            assert (img.dtype, img.shape, img.strides) == ("uint8", (3, 5, 7, 3), (105, 21, 3, 1)), img
            assert b["labels"].dtype == "int64" and b["labels"].shape == (3,)
            assert img.nbytes == 315 and img.data_ptr != 0
        assert seen == ALL, seen
        assert l.next_batch() is None  # stays at the end
        st = l.stats()
        assert st["batches"] == 8 and st["copy"] == "read" and st["device"] == "cpu", st
        assert list(st) == [f for f, _ in bg._CStats._fields_], list(st)
    assert l.closed
    try:
        l.next_batch()
        raise AssertionError("next_batch on a closed loader")
    except ValueError:
        pass


def rank_world_seek():
    """world=2 rank=1 gives batches 1,3 of each epoch; epoch_begin=1; seek(1, 2) resumes there; seek to another rank's batch raises EINVAL"""
    with bg.Loader(D, device="cpu", rank=1, world=2) as l:
        got = [(b.epoch, b.index) for b in l]
        assert got == [(0, 1), (0, 3), (1, 1), (1, 3)], got
        l.seek(0, 3)
        assert (lambda b: (b.epoch, b.index))(l.next_batch()) == (0, 3)
        try:
            l.seek(1, 2)
            raise AssertionError("seek to rank 0's batch")
        except bg.BatchfsGpuError as e:
            assert e.errno == errno.EINVAL and "batch 2" in str(e), e
    with bg.Loader(D, device="cpu", epoch_begin=1, depth=1) as l:
        assert [(b.epoch, b.index) for b in l] == ALL[4:]
    with bg.Loader(D, device="cpu") as l:
        b = l.next_batch()
        l.seek(1, 2)
        got = [(x.epoch, x.index) for x in l]
        assert got == [(1, 2), (1, 3)], got
        same(b["images"].numpy(), b.path, "images")  # still held across the seek


def unconsumed_capsules():
    """1000 capsules never consumed are dropped (destructor, no crash); a consumed one is renamed and its array outlives the capsule"""
    with bg.Loader(D, device="cpu") as l:
        b = l.next_batch()
        t = b["labels"]
        for _ in range(1000):
            c = t.__dlpack__()
            assert type(c).__name__ == "PyCapsule" and 'capsule object "dltensor"' in repr(c)
            del c
        caps = [b[n].__dlpack__(max_version=(1, 0)) for n in b.keys() for _ in range(300)]
        del caps
        c = t.__dlpack__()
        a = np.from_dlpack(type("Wrap", (), {"__dlpack__": lambda self, **kw: c,
                                             "__dlpack_device__": lambda self: (1, 0)})())
        assert 'capsule object "used_dltensor"' in repr(c), repr(c)
        del c, t, b
        gc.collect()
        for _ in l:
            pass
        same(a, f"{D}/epoch/0/batch_0", "labels")


def outlive_loader():
    """5 arrays from 5 batches (Batch objects dropped) and 2 Batch objects stay equal to their files after later batches, a seek and close()"""
    l = bg.Loader(D, device="cpu", depth=2)
    arrays, batches = [], []
    for i in range(5):
        b = l.next_batch()
        arrays.append((b.path, np.from_dlpack(b["images"]), np.from_dlpack(b["indices"])))
        if i in (1, 3):
            batches.append(b)
        del b
    gc.collect()
    rest = [(b.epoch, b.index) for b in l]
    assert rest == ALL[5:], rest
    l.seek(0, 0)
    for b in l:  # the ring cycles once more over fresh files
        pass
    del b
    l.close()
    l.close()  # twice is fine
    gc.collect()
    for path, img, idx in arrays:
        same(img, path, "images")
        same(idx, path, "indices")
    for b in batches:
        same(b["images"].numpy(), b.path, "images")
        same(np.from_dlpack(b["labels"]), b.path, "labels")  # a new capsule after close


def release_once():
    """Batch.release() is once only, later uses raise ValueError; with-block releases; tensors already exported keep their data"""
    with bg.Loader(D, device="cpu") as l:
        b = l.next_batch()
        a = np.from_dlpack(b["images"])
        t = b["labels"]
        b.release()
        b.release()
        assert b.released
        for f in (lambda: t.__dlpack__(), lambda: t.numpy(), lambda: b.sync()):
            try:
                f()
                raise AssertionError("use after release")
            except ValueError:
                pass
        with l.next_batch() as b2:
            pass
        assert b2.released
        list(l)
        same(a, f"{D}/epoch/0/batch_0", "images")
        b.__del__()  # collection after an explicit release: no second release


def errors_named():
    """a missing path raises ENOENT naming it; an unknown parameter and a bad value name themselves; a truncated batch file raises EBADMSG naming it on the iteration that reaches it, and iteration goes on"""
    missing = f"{tmp}/nope"
    try:
        bg.Loader(missing, device="cpu")
        raise AssertionError("no error")
    except bg.BatchfsGpuError as e:
        assert isinstance(e, OSError) and e.errno == errno.ENOENT and missing in str(e), e
    for kw, needle in [({"colour": "red"}, "colour"), ({"device": "tpu"}, "device=tpu"),
                       ({"depth": 9}, "depth"), ({"dtype": "f64"}, "dtype")]:
        try:
            bg.Loader(D, **{"device": "cpu", **kw})
            raise AssertionError(f"{kw}: no error")
        except bg.BatchfsGpuError as e:
            assert e.errno == errno.EINVAL and needle in str(e), (kw, e)
    bad = f"{tmp}/bad"
    make_dir(bad, n_epochs=1)
    victim = f"{bad}/epoch/0/batch_2"
    os.truncate(victim, os.path.getsize(victim) - 10)
    with bg.Loader(bad, device="cpu") as l:
        it = iter(l)
        assert (next(it).index, next(it).index) == (0, 1)
        try:
            next(it)
            raise AssertionError("truncated file delivered")
        except bg.BatchfsGpuError as e:
            assert e.errno == errno.EBADMSG and victim in str(e), e
        b = next(it)
        assert b.index == 3
        same(b["images"].numpy(), b.path, "images")
        assert next(it, None) is None


def no_cycle():
    """dropping the last reference to a Batch releases it at once: a loop that drops its batches reuses the ring (fake CUDA: no new device buffer)"""
    gc.disable()
    try:
        with bg.Loader(D, device="cuda", cuda_library=fake, depth=2) as l:
            for _ in range(2):  # both slots of the ring allocated
                b = l.next_batch()
                assert b["images"].__dlpack_device__() == (2, 0)
                del b
            allocs = cnt("dev_allocs")
            for _ in range(2):
                b = l.next_batch()
                t = b["images"]
                del b, t
            assert cnt("dev_allocs") == allocs, (allocs, cnt("dev_allocs"))
            held = [l.next_batch()]  # a held batch leaves the ring: a fresh slot replaces it
            l.next_batch()
            l.next_batch()  # the batch in the fresh slot, filled (allocated) by now
            assert cnt("dev_allocs") == allocs + 1, (allocs, cnt("dev_allocs"))
            del held
    finally:
        gc.enable()


def cuda_fake():
    """device=cuda (fake driver): (2, 0), cuda:0, staging; __dlpack__ stream None/1/2/handle wait once each, -1 not at all, 0 refused, dl_device=(1,0) refused; numpy() refused; every buffer, pinned page and context reference is gone once Batches and capsules (1000 dropped, some outliving close(), one dropped by numpy with an exception pending) are"""
    base = {k: cnt(k) for k in ("dev_live", "host_live", "ctx_refs", "events_live")}
    unraisable = []
    hook, sys.unraisablehook = sys.unraisablehook, lambda u: unraisable.append(u)
    try:
        class Stream:
            cuda_stream = 0x5000
        l = bg.Loader(D, device="cuda", cuda_library=fake, stream=Stream())
        assert l.device.startswith("cuda:0"), l.device
        st = l.stats()
        assert st["copy"] == "staging", st
        b = l.next_batch()
        t = b["images"]
        assert t.__dlpack_device__() == (2, 0) and t.device == "cuda:0" and b.device == "cuda:0"
        assert t.dtype == "uint8" and t.shape == (3, 5, 7, 3) and t.data_ptr % 256 == 0
        for stream, waits in [(1, 1), (None, 1), (-1, 0), (2, 1), (0x7f00_0000_1000, 1)]:
            w = cnt("wait_event")
            c = t.__dlpack__(stream=stream)
            assert type(c).__name__ == "PyCapsule", c
            assert cnt("wait_event") - w == waits, (stream, cnt("wait_event") - w)
            del c
        for bad, exc in [({"stream": 0}, ValueError), ({"stream": "1"}, TypeError),
                         ({"stream": 1, "dl_device": (1, 0)}, BufferError),
                         ({"stream": 1, "copy": True}, BufferError)]:
            try:
                t.__dlpack__(**bad)
                raise AssertionError(f"{bad} accepted")
            except exc:
                pass
        try:
            t.numpy()
            raise AssertionError("numpy() of device memory")
        except TypeError:
            pass
        caps = [t.__dlpack__(stream=-1) for _ in range(1000)]
        del caps
        b.sync()
        try:
            np.from_dlpack(t)  # numpy drops the capsule with its error pending
            raise AssertionError("numpy took device memory")
        except (RuntimeError, SystemError, BufferError):
            pass
        assert any("Unsupported device" in str(u.exc_value) for u in unraisable), \
            [str(u.exc_value) for u in unraisable]
        keep = [l.next_batch() for _ in range(3)]
        late = keep[1]["labels"].__dlpack__(stream=1)
        del b, t
        l.close()
        assert cnt("dev_live") > base["dev_live"]  # kept batches outlive the loader
        c2 = keep[2]["indices"].__dlpack__(stream=2)  # a capsule made after close()
        del keep
        gc.collect()
        assert cnt("dev_live") > base["dev_live"]  # the capsules hold theirs
        del late, c2
        gc.collect()
        now = {k: cnt(k) for k in base}
        assert now == base, (now, base)
    finally:
        sys.unraisablehook = hook


def cuda_convert():
    """device=cuda (fake): dtype=f32 gives float32, layout=nchw gives [B,3,H,W] with element strides; dtype=bf16 gives bfloat16; stats count the conversions"""
    with bg.Loader(D, device="cuda", cuda_library=fake, dtype="f32", layout="nchw",
                   epoch_end=1) as l:
        n = 0
        for b in l:
            t = b["images"]
            assert t.dtype == "float32" and t.shape == (3, 3, 5, 7), t
            assert t.strides == (105, 35, 7, 1) and t.nbytes == 315 * 4, t.strides
            assert b["labels"].dtype == "int64"
            n += 1
        assert n == 4 and l.stats()["converted"] == 4, l.stats()
    with bg.Loader(D, device="cuda", cuda_library=fake, dtype="bf16",
                   normalize=((0.5, 0.5, 0.5), (0.25, 0.5, 1.0))) as l:
        b = l.next_batch()
        assert b["images"].dtype == "bfloat16" and b["images"].shape == (3, 5, 7, 3)
        c = b["images"].__dlpack__(stream=1)
        get = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
            ("PyCapsule_GetPointer", ctypes.pythonapi))
        m = bg._DLManagedTensor.from_address(get(c, b"dltensor"))
        dt = m.dl_tensor.dtype
        assert (dt.code, dt.bits, dt.lanes, m.dl_tensor.ndim) == (4, 16, 1, 4)
        assert [m.dl_tensor.shape[k] for k in range(4)] == [3, 5, 7, 3]
        assert m.dl_tensor.data == b["images"].data_ptr and m.dl_tensor.device.device_type == 2


# token batches: 90 documents of 1..299 u16 tokens (each ending with 50256), packed and
# written by the engine for three pipelines, epochs 0 and 1
TOK_CASES = {
    "concat": ("batch=3,seq_len=40,positions=1", ["tokens", "positions"]),
    "pad": ("pack=pad,batch=4,seq_len=64,pad_id=3", ["lengths", "indices", "tokens", "mask"]),
    "bucket": ("pack=bucket,buckets=16:64:300,batch_tokens=600,drop_last=0",
               ["lengths", "indices", "tokens", "mask"]),
}


def make_tokens():
    tdir = f"{tmp}/tok"
    if os.path.isdir(tdir):
        return tdir
    rng = np.random.default_rng(5)
    docs = [np.append(rng.integers(0, 50000, int(rng.integers(0, 299))), 50256)
            for _ in range(90)]
    os.makedirs(tdir)
    np.concatenate(docs).astype("<u2").tofile(f"{tdir}/train.bin")
    subprocess.run([f"{build}/mkbatchfs", "--tokens", "u16", "--doc-sep", "50256",
                    f"{tdir}/train.bin", f"{tdir}/t.bfs"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for pack, (opts, _) in TOK_CASES.items():
        for e in range(2):
            os.makedirs(f"{tdir}/{pack}/epoch/{e}")
            subprocess.run([f"{build}/tests/engine_tool", "epoch", f"{tdir}/t.bfs", opts, str(e),
                            f"{tdir}/{pack}/epoch/{e}"], check=True)
    return tdir


def data_order(path):
    raw = open(path, "rb").read(1 << 16)
    (n,) = struct.unpack("<Q", raw[:8])
    hdr = json.loads(raw[8:8 + n])
    assert hdr["__metadata__"]["kind"] == "tokens", hdr["__metadata__"]
    return [k for k, _ in sorted(((k, v["data_offsets"][0]) for k, v in hdr.items()
                                  if k != "__metadata__"), key=lambda kv: kv[1])]


def tokens_cpu():
    """token batches on the host (concat+positions, pad, bucket): every batch of 2 epochs, names in data order, each tensor through from_dlpack, numpy() and __array_interface__ equal to load_file; bucket shapes vary; dtype= refused with EINVAL naming the file"""
    tdir = make_tokens()
    for pack, (_, names) in TOK_CASES.items():
        d = f"{tdir}/{pack}"
        nb = len(os.listdir(f"{d}/epoch/0"))
        shapes = set()
        with bg.Loader(d, device="cpu") as l:
            n = 0
            for b in l:
                assert (b.epoch, b.index) == (n // nb, n % nb), (b.epoch, b.index, n)
                assert b.keys() == names == data_order(b.path), (b.keys(), names)
                for name in names:
                    t = b[name]
                    same(np.from_dlpack(t), b.path, name)
                    same(t.numpy(), b.path, name)
                    same(np.asarray(bg._ArrayInterface(t)), b.path, name)
                    assert t.nbytes == want(b.path)[name].nbytes
                assert b["tokens"].dtype == "int32" and b["tokens"].ndim == 2, b
                if pack != "concat":
                    assert (b["lengths"].dtype, b["mask"].dtype) == ("int64", "uint8"), b
                shapes.add(b["tokens"].shape)
                n += 1
            assert n == 2 * nb and l.stats()["converted"] == 0, (n, nb, l.stats())
        assert len(shapes) >= (3 if pack == "bucket" else 1), (pack, shapes)
    with bg.Loader(f"{tdir}/pad", device="cpu", dtype="f16") as l:
        try:
            l.next_batch()
            raise AssertionError("dtype=f16 on a token batch")
        except bg.BatchfsGpuError as e:
            assert e.errno == errno.EINVAL and "batch_0: a token batch (pack=pad)" in str(e), e


def tokens_cuda_fake():
    """token batches on the fake device (depth 1: buffers grow for larger bucket batches): device bytes read back through the driver equal load_file for every tensor of every batch; DLPack of the tokens says (2, 0), kDLInt 32, its shape; nothing leaks"""
    tdir = make_tokens()
    fc.cuDevicePrimaryCtxRetain.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
    fc.cuCtxPushCurrent_v2.argtypes = [ctypes.c_void_p]
    fc.cuCtxPopCurrent_v2.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    fc.cuDevicePrimaryCtxRelease_v2.argtypes = [ctypes.c_int]
    fc.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
    get = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", ctypes.pythonapi))

    def device_array(t):
        ctx, prev = ctypes.c_void_p(), ctypes.c_void_p()
        assert fc.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
        assert fc.cuCtxPushCurrent_v2(ctx) == 0
        buf = ctypes.create_string_buffer(t.nbytes)
        rc = fc.cuMemcpyDtoH_v2(buf, t.data_ptr, t.nbytes)
        fc.cuCtxPopCurrent_v2(ctypes.byref(prev))
        fc.cuDevicePrimaryCtxRelease_v2(0)
        assert rc == 0, rc
        return np.frombuffer(buf.raw, t.dtype).reshape(t.shape)

    base = {k: cnt(k) for k in ("dev_live", "host_live", "ctx_refs", "events_live")}
    for pack, (_, names) in TOK_CASES.items():
        d = f"{tdir}/{pack}"
        with bg.Loader(d, device="cuda", cuda_library=fake, depth=1) as l:
            n = 0
            for b in l:
                assert b.device == "cuda:0" and b.keys() == names, b
                b.sync()
                for name in names:
                    t = b[name]
                    assert t.__dlpack_device__() == (2, 0) and t.data_ptr % 256 == 0
                    same(device_array(t), b.path, name)
                c = b["tokens"].__dlpack__(stream=1)
                m = bg._DLManagedTensor.from_address(get(c, b"dltensor"))
                dt = m.dl_tensor.dtype
                assert (dt.code, dt.bits, dt.lanes, m.dl_tensor.ndim) == (0, 32, 1, 2), dt
                assert tuple(m.dl_tensor.shape[k] for k in range(2)) == b["tokens"].shape
                assert m.dl_tensor.data == b["tokens"].data_ptr
                del c, m
                n += 1
            assert n == 2 * len(os.listdir(f"{d}/epoch/0")), n
        del b, t
        gc.collect()
        now = {k: cnt(k) for k in base}
        assert now == base, (pack, now, base)


def torch_interop():
    """torch.from_dlpack on the host tensors equals the files"""
    try:
        import torch
    except ImportError:
        raise Skip("torch is not installed") from None
    with bg.Loader(D, device="cpu") as l:
        for b in l:
            for name in b.keys():
                same(b[name].torch().numpy(), b.path, name)


for fn in (layout, order_and_bytes, rank_world_seek, unconsumed_capsules, outlive_loader,
           release_once, errors_named, no_cycle, cuda_fake, cuda_convert, tokens_cpu,
           tokens_cuda_fake, torch_interop):
    section(fn)
print(f"gpu_python: {passed} passed, {len(failed)} failed{': ' + ' '.join(failed) if failed else ''}"
      f" ({time.monotonic() - t0:.1f} s)")
sys.exit(1 if failed else 0)
EOF
