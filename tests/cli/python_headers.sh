#!/usr/bin/env bash
# tests/cli/python_headers.sh — the Python package's safetensors reader (python/batchfs/
# _safetensors.py) on hostile batch files: `batchfs.Batches` pointed at a directory laid
# out like a mount (DIR/epoch/0/batch_K) whose files have crafted headers. Each must
# raise SafetensorsError naming the rule, from ds[i], iteration, load_file and
# read_header alike, never RecursionError or a bare ValueError, and quickly: all of them
# together in under 5 s of CPU (0.4 s here; before the pre-scan, 200,000 nested
# brackets raised RecursionError and 400 numbers of 4,000 digits took 5 s to raise a bare
# ValueError). Headers that only look hostile (brackets, quotes and backslash runs inside
# strings, across the pre-scan's 1 MiB pieces, 32 dimensions) must still load, equal to
# the `safetensors` package's reading. No FUSE, no build needed: the test venv only.
. "$(dirname "$0")/lib.sh" python_headers
source tests/pyenv.sh # $PY: numpy, safetensors

PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=$PWD/python "$PY" - "$T" <<'EOF' || fail "hostile headers (above)"
import json, os, struct, sys, time
import numpy as np
from safetensors import safe_open
import batchfs

T = sys.argv[1]
D = T + "/mnt"
os.makedirs(D + "/epoch/0")
files = []


def write(raw, data=b""):
    path = f"{D}/epoch/0/batch_{len(files)}"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + data)
    return path


def tensor(name, shape, offs, dtype="U8"):
    return b'{"%s": {"dtype": "%s", "shape": [%s], "data_offsets": [%s]}}' % (
        name, dtype.encode(), shape, offs)


nums = b",".join([b"9" * 4000] * 400)
hostile = [  # (header, data, what the message says)
    (b"[" * 200000 + b"]" * 200000, b"", "nests arrays in arrays"),
    (tensor(b"a", nums, b"0, 0"), b"", "number literal longer than 20 characters"),
    (b'{"a": ' * 100000 + b"{}" + b"}" * 100000, b"", "nests objects deeper than"),
    (b'{"a": {"dtype": "U8", "shape": [1, 2', b"", "unbalanced bracket"),
    (b'{"a": {"dtype": "U8", "shape": [1]]}}', b"", "unbalanced bracket"),
    (b'{"a": ' + b"[" * 200000, b"", "nests arrays in arrays"),
    (tensor(b"a", b",".join([b"0"] * 100000), b"0, 0"), b"", "array of more than 32 items"),
    (tensor(b"a", b",".join([b"1"] * 33), b"0, 1"), b"x", "array of more than 32 items"),
    (tensor(b"a", b"1", b"0, 1." + b"0" * 5000), b"x", "number literal longer than 20"),
    (tensor(b"a", b"1", b"0, -" + b"1" * 25), b"x", "number literal longer than 20"),
    (tensor(b"a", b"1", b"0, 18446744073709551616"), b"x", "below 2^64"),
    (tensor(b"a", b"18446744073709551616", b"0, 1"), b"x", "below 2^64"),
    (tensor(b"a", b"4294967296, 4294967296, 0", b"0, 0"), b"",
     "element count overflows 64 bits"),
    (b"{" + b",".join(b'"k%d": {}' % i for i in range(100000)) + b"}", b"",
     "is not a JSON object shaped as"),
    (b'{"__metadata__": {"a": ' + b"[" * 100000 + b"]" * 100000 + b"}}", b"",
     "nests arrays in arrays"),
    # a name ending in an escaped backslash: the brackets after it are structure
    (b'{"a\\\\": ' + b"[" * 100000 + b"]" * 100000 + b"}", b"", "nests arrays in arrays"),
    (b'{"a\\\\\\"": ' + b"[" * 100000 + b"]" * 100000 + b"}", b"", "nests arrays in arrays"),
    (tensor(b"\\ud800", b"1", b"0, 1"), b"x", "lone surrogate"),
    (b'{"__metadata__": {"k": "\\udc00"}}', b"", "lone surrogate"),
    (tensor(b"n" * (1 << 20), b"1", b"0, 1", "U7"), b"x", "unknown dtype 'U7'"),
    (b'{"a": ' + b"{" * 300000, b"", "nests objects deeper than"),
]
for raw, data, _ in hostile:
    files.append(write(raw, data))

ds = batchfs.Batches(D)
assert len(ds) == len(hostile), (len(ds), len(hostile))
t0 = time.process_time()
for i, (raw, data, needle) in enumerate(hostile):
    path = files[i]
    for how, fn in (("ds[i]", lambda: ds[i]), ("load_file", lambda: batchfs.load_file(path)),
                    ("read_header", lambda: batchfs.read_header(path)),
                    ("torch", lambda: batchfs.load_file(path, "torch"))):
        try:
            fn()
        except batchfs.SafetensorsError as e:
            msg = str(e)
            assert needle in msg and path in msg, f"{path} ({how}): {msg[:300]!r} lacks {needle!r}"
            assert len(msg) < len(path) + 300, f"{path} ({how}): a message of {len(msg)} characters"
        except BaseException as e:
            raise AssertionError(f"{path} ({how}, header {raw[:40]!r}...): "
                                 f"{type(e).__name__}: {str(e)[:200]}, not SafetensorsError")
        else:
            raise AssertionError(f"{path} ({how}): no error")
it = iter(batchfs.Batches(D))
try:
    next(it)
    raise AssertionError("iteration over the hostile directory did not raise")
except batchfs.SafetensorsError as e:
    assert "nests arrays in arrays" in str(e), str(e)
cpu = time.process_time() - t0
assert cpu < 5, f"{len(hostile)} hostile headers took {cpu:.1f} s of CPU"
print(f"ok - {len(hostile)} hostile headers refused with SafetensorsError by ds[i], iteration, "
      f"load_file and read_header in {cpu:.2f} s of CPU")

# what only looks hostile loads, as the reference reads it
E = T + "/ok"
os.makedirs(E + "/epoch/0")
meta = {"brackets": "[[[{{{" * 50000 + "]]]}}}" * 50000,
        "quotes": '\\"[' * 10000 + '"',
        "backslashes": "\\" * 1_500_001,  # a run of 3 MB in the file: across pieces
        "digits": "9" * 100000, "surrogate pair": "\U0001F600",
        "big": "[" * 3_000_000}  # a string across the pre-scan's pieces
names = ['a\\"[[', "b\\", "c]]}{", "\\\\" * 3]
hdr = {"__metadata__": meta}
data = b""
for k, name in enumerate(names):
    shape = [1] * 32 if k == 0 else [2, 3]
    n = int(np.prod(shape))
    hdr[name] = {"dtype": "U8", "shape": shape, "data_offsets": [len(data), len(data) + n]}
    data += bytes(range(k, k + n))
raw = json.dumps(hdr).encode()
raw += b" " * (-len(raw) % 8)
path = f"{E}/epoch/0/batch_0"
with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(raw)) + raw + data)
got = batchfs.Batches(E)[0]
_, got_meta = batchfs.load_file_with_metadata(path)
with safe_open(path, framework="np") as f:
    assert got_meta == f.metadata() == meta
    assert sorted(got) == sorted(f.keys()) == sorted(names), (sorted(got), sorted(f.keys()))
    for name in names:
        assert np.array_equal(got[name], f.get_tensor(name)), name
        assert got[name].shape == f.get_tensor(name).shape
print("ok - brackets, quotes, backslash runs and digits inside strings (across 1 MiB pieces),"
      " 32 dimensions: loaded as safetensors loads them")
EOF
