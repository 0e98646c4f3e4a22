#!/usr/bin/env bash
# tests/mount/python_pkg.sh — the Python package python/ (`import batchfs`):
#   - `pip install ./python` (the command itself, from the root) into a fresh venv gives
#     a working package: numpy installed with it, the programs built (`make programs`,
#     this run's BUILD, so only copied) into batchfs/bin/ and found there, the
#     `mkbatchfs` command, py.typed, batchfs.gpu a copy of gpu/python/batchfs_gpu.py;
#     python/README.md's first example runs there as written (paths and sizes made
#     small), with no BATCHFS_BIN, PYTHONPATH or build/ on PATH, its mount point missing;
#     without its programs the package's `batchfs` command exits 127 naming the places
#     tried (never running itself); python/ alone (no C tree) does not build, and says so;
#   - with the test venv (numpy, safetensors) and the source tree's package:
#     mount() as a context manager mounts (the mount answers inside the block) and
#     unmounts (the daemon exits 0), also lazily while arrays still map batch files;
#     a missing mount point is made and removed after (a failed mount too), one that
#     cannot be made raises MountError; find_binary() with no program anywhere names
#     every place it tried and the commands that install one;
#     a bad option, a missing source and a daemon that never mounts raise MountError
#     with the daemon's own message / a timeout; options from keywords (bools, tuples);
#     Batches (rank 1 of 3, two pipelines) equal safetensors.numpy.load_file of the same
#     files byte for byte, zero-copy views of one mapping, the read() fallback too;
#     state_dict()/load_state_dict() resume gives exactly the remaining batches (inside an
#     epoch, at an epoch's end, from another world size); stats() has the documented keys;
#     the strict header parser rejects bad lengths, offsets, holes, overlaps, duplicate
#     keys; torch DataLoader(batch_size=None) where torch is installed (else said).
# About 25 s (the pip install: 5-15 s).
. "$(dirname "$0")/lib.sh"
require_fuse
need_py # $PY: python with numpy and safetensors

"$GEN" "$T/images" 3 16 48 160 7 # 48 images
"$MKBATCHFS" --quiet "$T/images" "$T/data.bfs"
mkdir "$T/mnt"
export PYTHONDONTWRITEBYTECODE=1 BATCHFS_BIN=$BATCHFS

# ---- pip install ./python into a fresh venv, then python/README.md's first example ------
# The real command, from the checkout's root: numpy comes as a dependency and the package's
# build runs `make programs` in this checkout (with this run's BUILD: up to date, so it
# only copies them) into batchfs/bin/, which the example finds with no BATCHFS_BIN, no
# PYTHONPATH and no build/ on PATH; `mkbatchfs` is the venv's command. The example's
# mount point does not exist: mount() makes it and removes it after.
export BUILD # and the flavour of that build, should make have to compile anything
case $BUILD in */san-*) export SANITIZER=${BUILD##*/san-} ;; */debug) export DEBUG=1 ;; esac
if python3 -m venv "$T/venv" && "$T/venv/bin/pip" install -q ./python >"$T/pip.log" 2>&1; then
    mkdir "$T/fresh"
    "$GEN" "$T/fresh/images" 3 8 24 40 5 # 24 images: 3 batches of 8
    (cd "$T/fresh" && env -u BATCHFS_BIN PATH="$T/venv/bin:/usr/bin:/bin" mkbatchfs --quiet images train.bfs) ||
        fail "the pip-installed mkbatchfs command"
    awk '/^```python$/ { inside = 1; next } inside && /^```$/ { exit } inside { print }' \
        python/README.md | sed -e "s#\"/mnt/train\"#\"$T/fresh/new/mnt\"#" \
        -e 's/batch=256, size=224, epochs=90/batch=8, size=16, epochs=2/' \
        -e 's/^        \.\.\.$/        seen.append((images.shape, str(images.dtype), labels.shape))/' \
        >"$T/fresh/example.py"
    grep -q "seen.append" "$T/fresh/example.py" && grep -q "$T/fresh/new/mnt" "$T/fresh/example.py" &&
        grep -q '"train.bfs"' "$T/fresh/example.py" ||
        fail "python/README.md's first example: no longer \"train.bfs\", \"/mnt/train\" and a '...' loop body"
    {
        echo "seen = []"
        cat "$T/fresh/example.py"
        cat <<'EOF'
import filecmp, os, sys
assert seen == [((8, 16, 16, 3), "uint8", (8,))] * 6, seen
assert checkpoint == {"data": {"epoch": 2, "position": 0, "batch_size": 8, "world": 1,
                               "batch": 0}}, checkpoint
d = os.path.dirname(batchfs.__file__)
assert d.startswith(sys.prefix), (d, sys.prefix)
assert batchfs.find_binary() == d + "/bin/batchfs", batchfs.find_binary()
assert batchfs.find_binary("mkbatchfs") == d + "/bin/mkbatchfs", batchfs.find_binary("mkbatchfs")
assert mnt.command[0] == d + "/bin/batchfs", mnt.command
new = os.getcwd() + "/new"
assert mnt.created == [new, new + "/mnt"], mnt.created
assert not os.path.exists(new), "mount() left the mount point it made"
assert os.path.isfile(d + "/py.typed"), "py.typed is not installed"
assert not os.path.islink(d + "/gpu.py") and filecmp.cmp(
    d + "/gpu.py", sys.argv[1] + "/gpu/python/batchfs_gpu.py", shallow=False), "batchfs.gpu differs"
assert batchfs.gpu.Loader.__name__ == "Loader"
import numpy  # a dependency: installed with the package
print("ok - pip install ./python into a fresh venv: numpy, the programs in the package "
      "(mkbatchfs command, find_binary()), python/README.md's first example ran, 2 epochs of "
      "3 batches; its missing mount point made and removed")
EOF
    } >"$T/fresh/check.py"
    (cd "$T/fresh" && env -u BATCHFS_BIN -u PYTHONPATH PATH=/usr/bin:/bin "$T/venv/bin/python" check.py "$OLDPWD") ||
        fail "the pip-installed package (above)"
    # the package's commands without its programs: they say so, and never run themselves
    # (the venv's bin/ on PATH holds them); skipped where `make install` put a batchfs
    site=$("$T/venv/bin/python" -c 'import batchfs, os; print(os.path.dirname(batchfs.__file__))')
    rm -r "$site/bin"
    if [ ! -e /usr/local/bin/batchfs ]; then
        set +e
        (cd "$T" && env -u BATCHFS_BIN HOME="$T" PATH="$T/venv/bin:/usr/bin:/bin" timeout 10 batchfs --help) 2>"$T/cmd.err"
        rc=$?
        set -e
        [ $rc = 127 ] && grep -q "^batchfs: the batchfs program was not found; tried .*$site/bin/batchfs, .*PATH ($T/venv/bin:/usr/bin:/bin).*make install" "$T/cmd.err" ||
            fail "the batchfs command without the package's programs: exit $rc, $(cat "$T/cmd.err")"
        ok "the package's batchfs command without its programs: exit 127, names the places tried"
    fi
    # python/ without the C tree around it (an sdist): the build stops and says why
    cp -rL python "$T/alone"
    rm -rf "$T/alone/build" "$T/alone"/*.egg-info
    if "$T/venv/bin/pip" install "$T/alone" >"$T/alone.log" 2>&1; then
        fail "pip install of python/ without the C tree succeeded"
    fi
    grep -q "batchfs: the C sources of the batchfs programs are not next to this package ($T/Makefile, $T/programs/batchfs_main.c missing)" "$T/alone.log" ||
        { cat "$T/alone.log" >&2; fail "pip install of python/ without the C tree: no clear message"; }
    ok "pip install of python/ without the C tree: stops, naming the files missing"
else
    cat "$T/pip.log" >&2
    [ "${CI:-}" != true ] || fail "pip install ./python failed (above)"
    echo "   (pip install ./python into a fresh venv not checked: no PyPI for its build backend; CI checks it)"
fi

# ---- the API, from the source tree -------------------------------------------------------
PYTHONPATH=$PWD/python "$PY" - "$T" <<'EOF' || fail "batchfs package checks (above)"
import gc, json, mmap, os, struct, subprocess, sys, time
import numpy as np
from safetensors.numpy import load_file as st_load, save_file
from safetensors import safe_open
import batchfs
from batchfs import _safetensors

T = sys.argv[1]
SRC, MNT = T + "/data.bfs", T + "/mnt"


def mounted(path):
    with open("/proc/self/mounts") as f:
        return any(l.split()[1] == path and l.split()[2].startswith("fuse") for l in f)


def raises(exc, needle, fn, *a, **kw):
    try:
        fn(*a, **kw)
    except exc as e:
        assert needle in str(e), f"{exc.__name__} {str(e)!r} does not say {needle!r}"
        return e
    raise AssertionError(f"no {exc.__name__} ({needle})")


def same(got, path):
    ref = st_load(path)
    with safe_open(path, framework="np") as f:
        ref_meta = f.metadata()
    assert list(got) == ["images", "labels", "indices"] and sorted(ref) == sorted(got), \
        (list(got), list(ref))
    for k in ref:
        a, b = got[k], ref[k]
        assert a.dtype == b.dtype and a.shape == b.shape, (path, k, a.dtype, a.shape, b.dtype, b.shape)
        assert a.tobytes() == b.tobytes(), f"{path} {k}: bytes differ from load_file's"
    _, meta = batchfs.load_file_with_metadata(path)
    assert meta == ref_meta, (meta, ref_meta)
    return meta

# mount as a context manager: mounted inside, the daemon gone and exit 0 after
with batchfs.mount(SRC, MNT, batch=8, size=(16, 24), epochs=3, drop_last=True,
                   threads=None, flip=0) as m:
    assert mounted(MNT) and os.fspath(m) == MNT and m.process.poll() is None
    pl = m.pipeline()
    assert "size = 16x24" in pl and "drop_last = 1" in pl and "flip = 0" in pl, pl
    pid = m.pid
assert not mounted(MNT), "still mounted after the with block"
assert m.process is None and not m.lazy, "the unmount should not have been lazy"
try:
    os.kill(pid, 0)
    raise AssertionError("daemon still running after the with block")
except ProcessLookupError:
    pass
print("ok - mount(): mounted in the with block, unmounted and the daemon exited 0 after it")

# options from keywords
assert batchfs.format_options(dict(drop_last=False, allow_other=True, auto_unmount=False,
                                   huge_pages=True, size=(32, 48), scale=(0.5, 1),
                                   normalize=((0.5, 0.5, 0.5), (0.25, 0.5, 1)), threads=None,
                                   spec=batchfs.__file__)) == \
    "drop_last=0,allow_other,huge_pages=1,size=32x48,scale=0.5:1," \
    "normalize=0.5,0.5,0.5/0.25,0.5,1,spec=" + batchfs.__file__
raises(TypeError, "size (H, W)", batchfs.format_options, {"batch": (1, 2)})

# the daemon's refusals, raised with its message; nothing left mounted
e = raises(batchfs.MountError, "unknown option 'sise' (did you mean 'size'?)",
           batchfs.mount, SRC, MNT, batch=8, sise=16)
assert e.returncode not in (0, None) and e.stderr.startswith("batchfs: "), (e.returncode, e.stderr)
raises(batchfs.MountError, T + "/missing.bfs", batchfs.mount, T + "/missing.bfs", MNT)
raises(batchfs.MountError, "batch=0", batchfs.mount, SRC, MNT, batch=0)
assert not mounted(MNT)
with open(T + "/hang.sh", "w") as f:
    f.write("#!/bin/sh\necho starting >&2\nexec sleep 60\n")
os.chmod(T + "/hang.sh", 0o755)
t0 = time.monotonic()
e = raises(batchfs.MountError, "not mounted after 0.5 s; it said: starting",
           batchfs.mount, SRC, MNT, timeout=0.5, binary=T + "/hang.sh")
assert time.monotonic() - t0 < 5, "the hung daemon was not stopped at once"
print("ok - MountError with the daemon's message: unknown option, missing source, bad value, timeout")

# a missing mount point: made (parents too), removed after, also when the mount fails;
# one that cannot be made is a MountError saying why; an existing one stays
NEW = T + "/made/for/mnt"
with batchfs.mount(SRC, NEW, batch=8, size=16) as m:
    assert mounted(NEW) and m.created == [T + "/made", T + "/made/for", NEW], m.created
assert not os.path.exists(T + "/made"), "the mount point made by mount() is still there"
raises(batchfs.MountError, "unknown option 'sise'", batchfs.mount, SRC, NEW, sise=16)
assert not os.path.exists(T + "/made"), "a failed mount left the mount point it made"
open(T + "/file", "w").close()
e = raises(batchfs.MountError, f"cannot create the mount point {T}/file/mnt (mkdir "
           f"{T}/file/mnt: Not a directory); create it where", batchfs.mount, SRC, T + "/file/mnt")
assert e.returncode is None, e.returncode
with batchfs.mount(SRC, MNT, batch=8, size=16) as m:
    assert m.created == []
assert os.path.isdir(MNT), "mount() removed a mount point it did not make"
print("ok - mount(): a missing mount point made and removed after (a failed mount too); "
      "one that cannot be made said; an existing one kept")

# no program anywhere: the error names each place tried and the commands that fix it
import shutil
shutil.copytree(os.path.dirname(batchfs.__file__), T + "/bare/batchfs")
env = dict(os.environ, PYTHONPATH=T + "/bare", PATH=T + "/nothing")
env.pop("BATCHFS_BIN", None)
code = f"""
import batchfs, batchfs._mount as m
m._INSTALL_DIRS = ["{T}/prefix/bin"]
for name, var in (("batchfs", "BATCHFS_BIN"), ("mkbatchfs", "MKBATCHFS_BIN")):
    try:
        batchfs.find_binary(name)
        raise AssertionError(name + " found")
    except FileNotFoundError as e:
        want = ("the " + name + " program was not found; tried $" + var + " (not set), "
                "{T}/bare/batchfs/bin/" + name + ", {T}/build/" + name + ", PATH ({T}/nothing), "
                "{T}/prefix/bin/" + name + ". Install it: `make && sudo make install` in a "
                "batchfs checkout")
        assert str(e).startswith(want), (str(e), want)
        assert "`pip install ./python` from the checkout's root" in str(e), str(e)
try:
    batchfs.mount("{SRC}", "{MNT}")
    raise AssertionError("mounted without a program")
except FileNotFoundError as e:
    assert "batchfs program was not found" in str(e), str(e)
"""
r = subprocess.run([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True)
assert r.returncode == 0, r.stderr
env["BATCHFS_BIN"] = T + "/nothing/batchfs"
r = subprocess.run([sys.executable, "-c", "import batchfs; batchfs.find_binary()"], env=env,
                   stderr=subprocess.PIPE, text=True)
assert f"$BATCHFS_BIN is '{T}/nothing/batchfs', which is not an executable file" in r.stderr, r.stderr
print("ok - find_binary(): no program anywhere names every place tried and `make install` / "
      "`pip install ./python`; a bad $BATCHFS_BIN is said")

# Batches == load_file, byte for byte, for two pipelines; views of one private mapping
for opts in (dict(batch=8, size=16), dict(batch=5, size=(12, 20), dtype="f16", layout="nchw")):
    with batchfs.mount(SRC, MNT, epochs=2, **opts) as m:
        n = batchfs.batch_count(m, 0)
        assert n == 48 // opts["batch"], n
        ds = batchfs.Batches(m, epoch=1, rank=1, world=3)
        assert len(ds) == (n - n % 3) // 3, (len(ds), n)
        for i in range(len(ds)):
            meta = same(ds[i], f"{MNT}/epoch/1/batch_{1 + 3 * i}")
            assert meta["epoch"] == "1" and meta["batch"] == str(1 + 3 * i), meta
        same(ds[-1], f"{MNT}/epoch/1/batch_{1 + 3 * (len(ds) - 1)}")
        raises(IndexError, "epoch 1 has", ds.__getitem__, len(ds))
        ds.set_epoch(0)
        got = ds[np.int64(0)]
        same(got, f"{MNT}/epoch/0/batch_1")
        base = got["images"]
        while isinstance(base, np.ndarray):
            base = base.base
        base = base.obj if isinstance(base, memoryview) else base
        assert isinstance(base, mmap.mmap), type(base)
        for k in ("labels", "indices"):
            assert np.shares_memory(np.frombuffer(base, np.uint8), got[k]), k
        assert got["images"].flags.writeable
        got["labels"][:] = -1  # a private copy of the page: the file is unchanged
        same(batchfs.load_file(f"{MNT}/epoch/0/batch_1"), f"{MNT}/epoch/0/batch_1")
        real_mmap = _safetensors.mmap.mmap
        def no_mmap(*a, **kw):
            raise OSError(19, "no mmap here")
        _safetensors.mmap.mmap = no_mmap
        try:
            same(batchfs.load_file(f"{MNT}/epoch/0/batch_2"), f"{MNT}/epoch/0/batch_2")
        finally:
            _safetensors.mmap.mmap = real_mmap
        del got, base
print("ok - Batches (rank 1 of 3; u8 nhwc and f16 nchw) == load_file byte for byte, metadata too;"
      " one private mapping per batch; read() fallback")

# the resumable iterator
with batchfs.mount(SRC, MNT, batch=8, size=16, epochs=3) as m:
    full = []
    ds = batchfs.Batches(m, rank=2, world=4)
    assert ds.positions() == [(e, 2) for e in range(3)], ds.positions()
    for b in batchfs.Batches(m, rank=1, world=2):
        full.append(b["indices"].tobytes() + b["images"].tobytes())
    assert len(full) == 3 * 3, len(full)
    for stop in (0, 1, 2, 3, 5, 8):  # 3: at the end of epoch 0 (3 batches a rank)
        ds = batchfs.Batches(m, rank=1, world=2)
        seen = 0
        state = ds.state_dict()
        for b in ds:
            if seen == stop:
                break
            seen += 1
            state = ds.state_dict()
        state = json.loads(json.dumps(state))  # as a checkpoint stores it
        assert stop != 3 or state == {"epoch": 1, "position": 0, "batch_size": 8, "world": 2,
                                      "batch": 1}, state
        ds2 = batchfs.Batches(m, rank=1, world=2)
        ds2.load_state_dict(state)
        rest = [b["indices"].tobytes() + b["images"].tobytes() for b in ds2]
        assert rest == full[stop:], (stop, state, len(rest))
        assert ds2.state_dict() == {"epoch": 3, "position": 0, "batch_size": 8, "world": 2,
                                    "batch": 1}, ds2.state_dict()
    # a state of world=1 read by rank 1 of 2: resumes at rank 1's next batch
    ds = batchfs.Batches(m, rank=1, world=2)
    ds.load_state_dict({"epoch": 1, "batch": 2})
    assert ds.positions()[:2] == [(1, 3), (1, 5)], ds.positions()
    assert [b["indices"].tobytes() + b["images"].tobytes() for b in ds] == full[4:]
    raises(ValueError, "rank", batchfs.Batches, m, rank=2, world=2)

    # stats
    st = batchfs.stats(m)
    assert st == {**st, "fingerprint": os.getxattr(MNT, "user.batchfs.fingerprint").decode()}
    for key in ("version", "fingerprint", "uptime_s", "threads", "images", "images_per_s",
                "stage_us_per_image", "bad_samples", "batches", "cache", "autotune", "reads"):
        assert key in st, f"stats has no {key}: {sorted(st)}"
    assert st["batches"]["served"] >= 9, st["batches"]
    assert m.stats()["batches"]["served"] >= st["batches"]["served"]

    # arrays held at the end of the block: a lazy unmount, the arrays stay readable
    held = batchfs.Batches(m)[0]
    want = held["images"].tobytes()
assert m.lazy and not mounted(MNT) and held["images"].tobytes() == want
lingering = batchfs._mount._lingering[-1]
assert lingering.poll() is None, "the daemon exited while its files were still mapped"
del held, b  # the last batches this script holds
gc.collect()
for _ in range(100):
    if lingering.poll() is not None:
        break
    time.sleep(0.05)
assert lingering.returncode == 0, lingering.returncode
print("ok - state_dict()/load_state_dict(): exact remaining batches (in an epoch, at its end,"
      " from world=1); stats() keys; a lazy unmount keeps held arrays readable, daemon exits 0 after")

# the strict parser
def write(name, header, data=b"", n=None):
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    with open(f"{T}/{name}", "wb") as f:
        f.write(struct.pack("<Q", len(raw) if n is None else n) + raw + data)
    return f"{T}/{name}"

t = lambda dt, shape, a, b: {"dtype": dt, "shape": shape, "data_offsets": [a, b]}
with open(f"{T}/short", "wb") as f:
    f.write(b"\x02\0\0")
bad = [
    (f"{T}/short", "file of 3 bytes is shorter than the 8-byte length"),
    (write("n1", b"{", n=1), "header length 1 is not in [2, 100000000]"),
    (write("nbig", b"{}", n=50), "header length 50 exceeds the 2 bytes after it"),
    (write("json", b"{'a': 1}"), "not valid UTF-8 JSON"),
    (write("dup", b'{"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, '
                  b'"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}', b"x"),
     "duplicate key 'a'"),
    (write("nan", b'{"__metadata__": {"x": NaN}}'), "NaN is not JSON"),
    (write("hole", {"a": t("U8", [2], 0, 2), "b": t("U8", [1], 3, 4)}, b"abcd"),
     "hole in the data buffer before tensor 'b'"),
    (write("overlap", {"a": t("U8", [2], 0, 2), "b": t("U8", [2], 1, 3)}, b"abc"),
     "tensor 'b' overlaps the one before it"),
    (write("shape", {"a": t("I64", [2], 0, 8)}, b"x" * 8), "is I64 [2], 16 bytes"),
    (write("past", {"a": t("U8", [9], 0, 9)}, b"x" * 8), "need 9 data bytes, the file has only 8"),
    (write("tail", {"a": t("U8", [8], 0, 8)}, b"x" * 9), "cover 8 data bytes, the file has 9"),
    (write("key", {"a": {**t("U8", [1], 0, 1), "x": 1}}, b"x"), "exactly dtype, shape and data_offsets"),
    (write("neg", {"a": t("U8", [-1], 0, 0)}), "non-negative integers"),
    (write("dtype", {"a": t("U7", [1], 0, 1)}, b"x"), "unknown dtype 'U7'"),
    (write("meta", {"__metadata__": {"a": 1}}), "__metadata__ is not an object of strings"),
    (write("list", b"[1, 2]"), "not a JSON object"),
]
for path, needle in bad:
    raises(batchfs.SafetensorsError, needle, batchfs.load_file, path)
    raises(batchfs.SafetensorsError, needle, batchfs.read_header, path)
    raises(batchfs.SafetensorsError, path, batchfs.load_file, path)
ref = {"a": np.arange(7, dtype=np.int16), "b": np.ones((2, 3), np.float64),
       "c": np.array([True, False]), "d": np.zeros((0, 4), np.uint32),
       "e": np.arange(12, dtype=np.float32).reshape(3, 4)}
save_file(ref, f"{T}/ok.safetensors", metadata={"k": "v"})
got, meta = batchfs.load_file_with_metadata(f"{T}/ok.safetensors")
assert meta == {"k": "v"} and sorted(got) == sorted(ref), (meta, sorted(got))
for k in ref:
    assert got[k].dtype == ref[k].dtype and got[k].shape == ref[k].shape and \
        np.array_equal(got[k], ref[k]), k
bf16 = write("bf16", {"x": t("BF16", [3], 0, 6)}, bytes(6))
try:
    import ml_dtypes  # noqa: F401
except ImportError:
    raises(batchfs.SafetensorsError, "BF16 tensors need ml_dtypes", batchfs.load_file, bf16)
print(f"ok - strict header parser: {len(bad)} kinds of bad file refused, naming the file;"
      " other dtypes, empty tensors and metadata as safetensors writes them")

# torch: DataLoader(batch_size=None) over Batches
try:
    import torch
    from torch.utils.data import DataLoader
except ImportError:
    torch = None
    print("   (torch is not installed for this python: DataLoader and format='torch' not checked)")
if torch is not None:
    with batchfs.mount(SRC, MNT, batch=8, size=16, epochs=2) as m:
        for workers in (0, 2):
            ds = batchfs.Batches(m, epoch=1, rank=0, world=2, format="torch")
            got = list(DataLoader(ds, batch_size=None, num_workers=workers))
            assert len(got) == 3
            for i, b in enumerate(got):
                ref = st_load(f"{MNT}/epoch/1/batch_{2 * i}")
                for k in ref:
                    assert isinstance(b[k], torch.Tensor) and b[k].numpy().tobytes() == ref[k].tobytes(), k
            del got, b
    print("ok - torch DataLoader(batch_size=None), 0 and 2 workers: tensors equal load_file")
EOF

# ---- a dataset of token sequences: Batches over pack=bucket (shapes vary by batch) -------
"$PY" -c 'import random, struct, sys
r = random.Random(3); out = []
for _ in range(120):
    out += [r.randrange(50000) for _ in range(r.randrange(1, 300))] + [50256]
open(sys.argv[1], "wb").write(struct.pack("<%dH" % len(out), *out))' "$T/train.bin"
"$MKBATCHFS" --tokens u16 --doc-sep 50256 "$T/train.bin" "$T/tok.bfs" >/dev/null 2>&1 || fail "mkbatchfs --tokens"
PYTHONPATH=$PWD/python "$PY" - "$T" <<'EOF' || fail "Batches over a token mount"
import os, sys
from safetensors.numpy import load_file
import batchfs
T = sys.argv[1]
os.makedirs(T + "/tmnt", exist_ok=True)
with batchfs.mount(T + "/tok.bfs", T + "/tmnt", pack="bucket", buckets="32:128:300", batch=4) as m:
    ds = batchfs.Batches(m, epoch=1)
    shapes = set()
    for k in range(len(ds)):
        b, ref = ds[k], load_file(f"{m}/epoch/1/batch_{k}")
        assert list(b) == ["lengths", "indices", "tokens", "mask"], list(b)
        for name in ref:
            assert b[name].dtype == ref[name].dtype and b[name].tobytes() == ref[name].tobytes(), name
        shapes.add(b["tokens"].shape)
        del b
    assert len(shapes) > 1, shapes
    del ds
print(f"ok - Batches over a pack=bucket token mount: {len(shapes)} shapes, every tensor as load_file")
EOF

# ---- batchfs.gpu is the binding of gpu/python ------------------------------------------
(unset BATCHFS_GPU_LIBRARY; PYTHONPATH=$PWD/python:$PWD/gpu/python "$PY" -c '
import batchfs, batchfs_gpu, os, sys
assert os.path.samefile(batchfs.gpu.__file__, batchfs_gpu.__file__)
built = os.path.join(sys.argv[1], "build", "libbatchfs-gpu.so")  # of the tree, any BUILD
want = built if os.path.exists(built) else "libbatchfs-gpu.so.1"
assert batchfs.gpu.library_path() == batchfs_gpu.library_path() == want, batchfs.gpu.library_path()
print("ok - batchfs.gpu is gpu/python/batchfs_gpu.py, finding the same library")' "$PWD") ||
    fail "batchfs.gpu"
