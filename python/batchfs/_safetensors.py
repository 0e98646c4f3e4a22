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

Hostile headers are refused before json sees them, so that a bad file costs time linear
in N and raises SafetensorsError (not RecursionError, not a slow bare ValueError): a
pre-scan in C-speed bytes operations (_prescan) refuses number literals longer than a
u64's 20 digits and any structure but a header's own, an object of objects holding flat
arrays of at most 32 items (so at most 32 dimensions, numpy's limit; nothing nests
deeper than 3 levels). After the parse, integers must fit 64 bits, a shape's element
count too, names and metadata are valid UTF-8 (no lone surrogates), and messages quote
at most 60 characters of the header.

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
import re
import struct
import sys
from typing import Any, Dict, List, Tuple, Union

__all__ = ["SafetensorsError", "Header", "TensorInfo", "parse_header", "read_header",
           "load_file", "MAX_HEADER"]

MAX_HEADER = 100_000_000  # the reference reader's limit on N (BFS_ST_MAX_HEADER)
MAX_DIMS = 32  # items of an array: numpy 1.x's dimensions (NPY_MAXDIMS); the daemon takes 8
_U64 = 1 << 64

# the pre-scan (_prescan): a string once escapes are gone, a number literal longer than a
# u64's 20 digits; in the skeleton (brackets and commas), an array that is not flat or
# holds more than MAX_DIMS items, and a ']' that closes no array
_STRING = re.compile(rb'"[^"]*"')
_LONG_NUMBER = re.compile(rb"[-+.0-9eE]{21,}")
_SKELETON_DROP = bytes(c for c in range(256) if c not in b"[]{},")
_BAD_ARRAY = re.compile(rb"\[,*(?:[\[{}]|\Z)|\[,{%d}|(?:\A|[\]{}]),*\]" % MAX_DIMS)
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")  # may escape half a pair
_CHUNK = 1 << 20  # the pre-scan's piece of header: re.sub's list of pieces stays small

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
    d = dict(pairs)  # in C; the loop below runs only for a header that has a duplicate
    if len(d) != len(pairs):
        seen: Dict[str, Any] = {}
        for k, _ in pairs:
            if k in seen:
                raise ValueError(f"duplicate key {_short(k)}")
            seen[k] = None
    return d


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _is_uint(v: Any) -> bool:
    return type(v) is int and 0 <= v < _U64


def _short(v: Any, limit: int = 60) -> str:
    """repr(v) cut to `limit` characters: messages never quote a hostile header whole."""
    if isinstance(v, (list, tuple)) and len(v) > limit:
        v = v[:limit]  # repr of a long list costs time before it is cut
    r = repr(v)
    return r if len(r) <= limit else r[:limit - 3] + "..."


def _utf8(s: str) -> bool:
    """False for a string with a lone surrogate (json takes "\\ud800"; UTF-8 has no such)."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _skeleton(raw: bytes, what: str) -> bytes:
    """The brackets and commas of a header outside its strings, in _CHUNK pieces (so that
    memory stays a small multiple of len(raw)); refuses a number literal longer than 20
    characters (no header has one; json would parse it in time quadratic in its length)."""
    pieces: List[bytes] = []
    in_string, tail, pos, n = False, b"", 0, len(raw)
    while pos < n:
        end = min(pos + _CHUNK, n)
        while end < n and raw[end - 1] == 0x5C:  # never end a piece inside a run of '\\'
            end += 1
        # escapes first: pairs of backslashes, left to right as JSON reads them, then \",
        # so that no quote left is inside a string
        c = raw[pos:end].replace(b"\\\\", b"").replace(b'\\"', b"")
        pos = end
        if in_string:  # the rest of a string begun in an earlier piece
            q = c.find(b'"')
            if q < 0:
                continue
            c, in_string = c[q + 1:], False
        if c.count(b'"') % 2:  # a string that goes on into the next piece
            c, in_string = c[:c.rfind(b'"')], True
        bare = _STRING.sub(b"", c)
        m = _LONG_NUMBER.search(tail + bare)
        if m:
            raise SafetensorsError(
                f"{what}: header has a number literal longer than 20 characters "
                f"({m.group()[:20].decode()}...); its numbers are integers of at most 20 "
                "digits")
        tail = bare[-20:]
        pieces.append(bare.translate(None, _SKELETON_DROP))
    return b"".join(pieces)


def _prescan(raw: bytes, what: str) -> None:
    """Refuse a header that json.loads would recurse into or spend long on, in time
    linear in len(raw) and all of it in C (bytes methods, and regular expressions that
    search or replace a bounded number of times).

    A safetensors header is {name: {"dtype": s, "shape": [ints], "data_offsets": [int,
    int]}, "__metadata__": {str: str}}. Its skeleton (its brackets and commas outside
    strings) is an object of tensor objects, each with two flat arrays of at most MAX_DIMS
    items, and at most one object without arrays; a skeleton of any other form is
    refused here (a deep nesting, a long or nested array, an object in an object's
    object, objects without arrays), and so is a number literal longer than 20
    characters. What passes nests at most 3 deep, holds no list longer than MAX_DIMS, and
    json.loads then costs about what a valid header of that size costs."""
    skeleton = _skeleton(raw, what)
    m = _BAD_ARRAY.search(skeleton)
    if m:
        raise SafetensorsError(f"{what}: header " + (
            "nests arrays in arrays" if b"[[" in skeleton.replace(b",", b"") else
            f"has an array of more than {MAX_DIMS} items or an unbalanced bracket") +
            "; a safetensors header has only flat arrays of integers (shape, data_offsets)")
    # objects: tensors, {...[...]...[...]...}, and at most one without arrays (metadata)
    braces = skeleton.translate(None, b",")
    if braces[:1] != b"{" or braces[-1:] != b"}" or \
            braces[1:-1].replace(b"{[][]}", b"") not in (b"", b"{}"):
        raise SafetensorsError(f"{what}: header " + (
            "nests objects deeper than" if b"{{{" in braces.translate(None, b"[]") else
            "is not a JSON object shaped as") +
            " {name: {dtype, shape, data_offsets}, __metadata__: {str: str}}")


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
        head = bytes(raw[8:8 + n])
        text = head.decode("utf-8")
        _prescan(head, what)
        root = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError) as e:
        if isinstance(e, SafetensorsError):
            raise
        raise SafetensorsError(f"{what}: header is not valid UTF-8 JSON: {e}") from None
    if not isinstance(root, dict):
        raise SafetensorsError(f"{what}: header is not a JSON object")
    meta = root.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise SafetensorsError(f"{what}: __metadata__ is not an object of strings")
    surrogates = _SURROGATE.search(head) is not None  # else no string can hold one
    for k, v in meta.items() if surrogates else ():
        if not _utf8(k) or not _utf8(v):
            raise SafetensorsError(f"{what}: __metadata__ {_short(k)}: a lone surrogate "
                                   "escape is not UTF-8")
    tensors: List[TensorInfo] = []
    for name, t in root.items():
        if surrogates and not _utf8(name):
            raise SafetensorsError(f"{what}: tensor {_short(name)}: a lone surrogate escape "
                                   "is not UTF-8")
        if not isinstance(t, dict) or sorted(t) != ["data_offsets", "dtype", "shape"]:
            raise SafetensorsError(f"{what}: tensor {_short(name)} is not an object of exactly "
                                   "dtype, shape and data_offsets")
        dtype, shape, offs = t["dtype"], t["shape"], t["data_offsets"]
        if not isinstance(dtype, str) or (dtype not in _DTYPES and dtype not in _UNSUPPORTED):
            raise SafetensorsError(f"{what}: tensor {_short(name)} has unknown dtype "
                                   f"{_short(dtype)}")
        if not isinstance(shape, list) or not all(_is_uint(d) for d in shape):
            raise SafetensorsError(f"{what}: tensor {_short(name)}: shape {_short(shape)} is not "
                                   "a list of non-negative integers below 2^64")
        if not isinstance(offs, list) or len(offs) != 2 or not all(_is_uint(o) for o in offs) \
                or offs[0] > offs[1]:
            raise SafetensorsError(f"{what}: tensor {_short(name)}: data_offsets {_short(offs)} "
                                   "is not [begin, end] with begin <= end below 2^64")
        if dtype in _DTYPES:
            count = 1
            for d in shape:
                count *= d
                if count >= _U64:  # as the daemon's parser: a count must fit 64 bits
                    raise SafetensorsError(f"{what}: tensor {_short(name)}: shape "
                                           f"{_short(shape)}'s element count overflows 64 bits")
            want = count * _DTYPES[dtype][1]
            if offs[1] - offs[0] != want:
                raise SafetensorsError(f"{what}: tensor {_short(name)} is {dtype} {shape}, "
                                       f"{want} bytes, but data_offsets {offs} hold "
                                       f"{offs[1] - offs[0]}")
        tensors.append(TensorInfo(name, dtype, tuple(shape), 8 + n + offs[0], 8 + n + offs[1]))
    pos = 8 + n
    for t in sorted(tensors, key=lambda t: (t.begin, t.end)):
        if t.begin != pos:
            raise SafetensorsError(f"{what}: " + (
                f"tensor {_short(t.name)} overlaps the one before it" if t.begin < pos else
                f"hole in the data buffer before tensor {_short(t.name)}"))
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
