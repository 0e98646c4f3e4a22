"""Strict safetensors reading: the header parsed here, tensors as views of one mapping.

A safetensors file (batchfs batches are such files; docs/engine.md "Batch file" and
engine/safetensors.h describe them) is:

    [0, 8)        N, the length of the JSON header, little-endian u64
    [8, 8 + N)    UTF-8 JSON: {"__metadata__": {str: str}, NAME: {"dtype": D,
                  "shape": [d0, ...], "data_offsets": [begin, end]}, ...}
    [8 + N, end)  the data; begin/end count from its start, and the tensors cover it
                  exactly, without holes or overlaps

The checks follow the daemon's parser (engine/safetensors.c): N in [2, 10^8] and within
the file, a JSON object without duplicate keys, exactly those three keys per tensor,
shapes of non-negative integers, each tensor's byte length equal to its shape times its
element size, exact coverage of the data. A file that fails any of them raises
SafetensorsError naming the file and the rule.

Tensors are views of the file without a copy: the file is mapped with mmap
(ACCESS_COPY, a private copy-on-write mapping, so arrays are writable and a write
changes only the process's own pages), and numpy.frombuffer / torch.frombuffer make the
arrays. Where a file cannot be mapped (an empty or size-less file, a file system
without mmap) its bytes are read into memory instead.
"""
from __future__ import annotations

import json
import mmap
import os
import struct
import sys
from typing import Any, Dict, List, Tuple, Union

__all__ = ["SafetensorsError", "Header", "TensorInfo", "parse_header", "read_header",
           "load_file", "MAX_HEADER"]

MAX_HEADER = 100_000_000  # the reference reader's limit on N (BFS_ST_MAX_HEADER)

# safetensors dtype -> (numpy type string, bytes per element, torch dtype name)
_DTYPES: Dict[str, Tuple[str, int, str]] = {
    "BOOL": ("?", 1, "bool"),
    "U8": ("u1", 1, "uint8"),
    "I8": ("i1", 1, "int8"),
    "U16": ("<u2", 2, "uint16"),
    "I16": ("<i2", 2, "int16"),
    "F16": ("<f2", 2, "float16"),
    "BF16": ("", 2, "bfloat16"),  # numpy: ml_dtypes.bfloat16 where installed
    "U32": ("<u4", 4, "uint32"),
    "I32": ("<i4", 4, "int32"),
    "F32": ("<f4", 4, "float32"),
    "U64": ("<u8", 8, "uint64"),
    "I64": ("<i8", 8, "int64"),
    "F64": ("<f8", 8, "float64"),
}
# dtypes of the format that neither numpy nor this module represents
_UNSUPPORTED = {"C64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ",
                "F4", "F6_E2M3", "F6_E3M2"}

PathLike = Union[str, "os.PathLike[str]"]
BytesLike = Union[bytes, bytearray, memoryview]


class SafetensorsError(ValueError):
    """A file that is not a valid safetensors file; the message names the file and the
    rule it breaks."""


class TensorInfo:
    """One tensor of a header: name, dtype (safetensors name), shape, and its byte range
    in the file (absolute offsets)."""

    __slots__ = ("name", "dtype", "shape", "begin", "end")

    def __init__(self, name: str, dtype: str, shape: Tuple[int, ...], begin: int,
                 end: int) -> None:
        self.name, self.dtype, self.shape, self.begin, self.end = name, dtype, shape, begin, end

    def __repr__(self) -> str:
        return f"TensorInfo({self.name!r}, {self.dtype}, {list(self.shape)}, [{self.begin}, {self.end}))"


class Header:
    """A parsed header: tensors in file order of their names in the JSON, metadata, and
    where the data starts."""

    __slots__ = ("tensors", "metadata", "data_offset", "file_size")

    def __init__(self, tensors: List[TensorInfo], metadata: Dict[str, str], data_offset: int,
                 file_size: int) -> None:
        self.tensors, self.metadata = tensors, metadata
        self.data_offset, self.file_size = data_offset, file_size


def _no_duplicates(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    d: Dict[str, Any] = {}
    for k, v in pairs:
        if k in d:
            raise ValueError(f"duplicate key {k!r}")
        d[k] = v
    return d


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _is_uint(v: Any) -> bool:
    return type(v) is int and v >= 0


def header_length(first8: BytesLike, file_size: int, what: str = "file") -> int:
    """N of the first 8 bytes, checked against [2, MAX_HEADER] and the file's size."""
    if file_size < 8 or len(first8) < 8:
        raise SafetensorsError(f"{what}: file of {file_size} bytes is shorter than the "
                               "8-byte length")
    (n,) = struct.unpack("<Q", first8[:8])
    if n < 2 or n > MAX_HEADER:
        raise SafetensorsError(f"{what}: header length {n} is not in [2, {MAX_HEADER}]")
    if n > file_size - 8:
        raise SafetensorsError(f"{what}: header length {n} exceeds the {file_size - 8} "
                               "bytes after it")
    return int(n)


def parse_header(raw: BytesLike, file_size: int, what: str = "file") -> Header:
    """Parse and check the header of a safetensors file. raw holds at least its first
    8 + N bytes; file_size is the whole file's size. Raises SafetensorsError."""
    n = header_length(raw, file_size, what)
    if len(raw) < 8 + n:
        raise SafetensorsError(f"{what}: need the first {8 + n} bytes, have {len(raw)}")
    try:
        text = bytes(raw[8:8 + n]).decode("utf-8")
        root = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError) as e:
        raise SafetensorsError(f"{what}: header is not valid UTF-8 JSON: {e}") from None
    if not isinstance(root, dict):
        raise SafetensorsError(f"{what}: header is not a JSON object")
    meta = root.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise SafetensorsError(f"{what}: __metadata__ is not an object of strings")
    tensors: List[TensorInfo] = []
    for name, t in root.items():
        if not isinstance(t, dict) or sorted(t) != ["data_offsets", "dtype", "shape"]:
            raise SafetensorsError(f"{what}: tensor {name!r} is not an object of exactly "
                                   "dtype, shape and data_offsets")
        dtype, shape, offs = t["dtype"], t["shape"], t["data_offsets"]
        if not isinstance(dtype, str) or (dtype not in _DTYPES and dtype not in _UNSUPPORTED):
            raise SafetensorsError(f"{what}: tensor {name!r} has unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(_is_uint(d) for d in shape):
            raise SafetensorsError(f"{what}: tensor {name!r}: shape {shape!r} is not a list "
                                   "of non-negative integers")
        if not isinstance(offs, list) or len(offs) != 2 or not all(_is_uint(o) for o in offs) \
                or offs[0] > offs[1]:
            raise SafetensorsError(f"{what}: tensor {name!r}: data_offsets {offs!r} is not "
                                   "[begin, end] with begin <= end")
        if dtype in _DTYPES:
            count = 1
            for d in shape:
                count *= d
            want = count * _DTYPES[dtype][1]
            if offs[1] - offs[0] != want:
                raise SafetensorsError(f"{what}: tensor {name!r} is {dtype} {shape}, {want} "
                                       f"bytes, but data_offsets {offs} hold {offs[1] - offs[0]}")
        tensors.append(TensorInfo(name, dtype, tuple(shape), 8 + n + offs[0], 8 + n + offs[1]))
    pos = 8 + n
    for t in sorted(tensors, key=lambda t: (t.begin, t.end)):
        if t.begin != pos:
            raise SafetensorsError(f"{what}: " + (
                f"tensor {t.name!r} overlaps the one before it" if t.begin < pos else
                f"hole in the data buffer before tensor {t.name!r}"))
        pos = t.end
    if pos != file_size:
        raise SafetensorsError(f"{what}: " + (
            f"tensors need {pos - 8 - n} data bytes, the file has only {file_size - 8 - n}"
            if pos > file_size else
            f"tensors cover {pos - 8 - n} data bytes, the file has {file_size - 8 - n}"))
    return Header(tensors, dict(meta), 8 + n, file_size)


def read_header(path: PathLike) -> Header:
    """The checked header of the safetensors file at path (reads only the header)."""
    what = os.fspath(path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        first = f.read(8)
        n = header_length(first, size, what)
        return parse_header(first + f.read(n), size, what)


def _read_all(f: Any) -> bytearray:
    buf = bytearray()
    while True:
        chunk = f.read(1 << 20)
        if not chunk:
            return buf
        buf += chunk


def _map(path: PathLike) -> Tuple[Any, int]:
    """(buffer, size): a private mapping of the file, or its bytes where it cannot be
    mapped (size 0 in stat, no mmap on the file system)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > 0:
            try:
                return mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY), size
            except (OSError, ValueError):
                pass
        buf = _read_all(f)
        return buf, len(buf)


def _numpy_dtype(dtype: str, what: str) -> Any:
    import numpy as np
    if dtype == "BF16":
        try:
            import ml_dtypes  # type: ignore[import-not-found]
        except ImportError:
            raise SafetensorsError(
                f"{what}: BF16 tensors need ml_dtypes for numpy (pip install ml_dtypes; "
                "JAX installs it), or format='torch'") from None
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(_DTYPES[dtype][0])


def load_file(path: PathLike, format: str = "numpy") -> Dict[str, Any]:
    """The tensors of a safetensors file as {name: array}: numpy arrays
    (format="numpy") or torch tensors (format="torch"), in the order of the header,
    views of one private mapping of the file (no copy). Raises SafetensorsError for an
    invalid file, OSError when it cannot be read."""
    tensors, _ = load_file_with_metadata(path, format)
    return tensors


def load_file_with_metadata(path: PathLike, format: str = "numpy"
                            ) -> Tuple[Dict[str, Any], Dict[str, str]]:
    """load_file and the header's __metadata__."""
    if format not in ("numpy", "torch"):
        raise ValueError(f"format={format!r}: must be 'numpy' or 'torch'")
    what = os.fspath(path)
    buf, size = _map(path)
    hdr = parse_header(memoryview(buf)[:min(size, 8 + MAX_HEADER)], size, what)
    for t in hdr.tensors:
        if t.dtype in _UNSUPPORTED:
            raise SafetensorsError(f"{what}: tensor {t.name!r} has dtype {t.dtype}, which "
                                   "this reader does not represent")
    out: Dict[str, Any] = {}
    if format == "numpy":
        import numpy as np
        for t in hdr.tensors:
            dt = _numpy_dtype(t.dtype, what)
            out[t.name] = np.frombuffer(buf, dt, (t.end - t.begin) // dt.itemsize,
                                        t.begin).reshape(t.shape)
    else:
        import torch  # type: ignore[import-not-found,unused-ignore]
        if sys.byteorder != "little":
            raise SafetensorsError(f"{what}: torch tensors of a little-endian file need a "
                                   "little-endian host; use format='numpy'")
        for t in hdr.tensors:
            tdt = getattr(torch, _DTYPES[t.dtype][2], None)
            if tdt is None:
                raise SafetensorsError(f"{what}: tensor {t.name!r}: this torch has no "
                                       f"{_DTYPES[t.dtype][2]}")
            if t.end == t.begin:  # torch.frombuffer refuses empty views
                out[t.name] = torch.empty(t.shape, dtype=tdt)
            else:
                out[t.name] = torch.frombuffer(buf, dtype=tdt,
                                               count=(t.end - t.begin) // _DTYPES[t.dtype][1],
                                               offset=t.begin).reshape(t.shape)
    return out, hdr.metadata
