"""tests/bfsfile.py — the .bfs format in pure Python, written from docs/format.md alone
(not from the C code), so tests can check that the C reader and writer and the document
agree byte for byte: write_v3() makes a version 3 file, read() parses versions 1-3 and
returns every field's values, checking what the document says a reader must check.

    fields: [dict(name=, kind=, dtype=, flags=, shape=(..), follows=None|index)]
    records: [(label, [value, ...])] with a value per field: bytes (images, text, bytes),
             or a list of numbers (tokens, arrays, boxes, flattened), or None (no value);
             image values are dicts: dict(data=bytes, width=, height=, flags=)
"""
import struct

P1, P2, P3, P4, P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                      0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5)
M = (1 << 64) - 1
MAGIC = b"\x89BFS\r\n\x1a\n"
KINDS = {"image": 1, "text": 2, "tokens": 3, "array": 4, "boxes": 5, "bytes": 6}
DTYPES = {"u8": (0, "B"), "u16": (1, "H"), "u32": (2, "I"), "i32": (3, "i"), "i64": (4, "q"),
          "f32": (5, "f")}
DT_BY_CODE = {v[0]: (k, v[1]) for k, v in DTYPES.items()}
KIND_BY_CODE = {v: k for k, v in KINDS.items()}


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M


def _round(acc, v):
    return (_rotl((acc + v * P2) & M, 31) * P1) & M


def xxh64(data, seed=0):
    """XXH64 as the xxHash specification gives it."""
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + P1 + P2) & M, (seed + P2) & M, seed, (seed - P1) & M]
        while i + 32 <= n:
            for k in range(4):
                v[k] = _round(v[k], struct.unpack_from("<Q", data, i + 8 * k)[0])
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & M
        for k in range(4):
            h = ((h ^ _round(0, v[k])) * P1 + P4) & M
    else:
        h = (seed + P5) & M
    h = (h + n) & M
    while i + 8 <= n:
        h = (_rotl(h ^ _round(0, struct.unpack_from("<Q", data, i)[0]), 27) * P1 + P4) & M
        i += 8
    if i + 4 <= n:
        h = (_rotl(h ^ (struct.unpack_from("<I", data, i)[0] * P1) & M, 23) * P2 + P3) & M
        i += 4
    while i < n:
        h = (_rotl(h ^ (data[i] * P5) & M, 11) * P1) & M
        i += 1
    h ^= h >> 33
    h = (h * P2) & M
    h ^= h >> 29
    h = (h * P3) & M
    return h ^ (h >> 32)


assert xxh64(b"") == 0xEF46DB3751D8E999 and xxh64(b"abc") == 0x44BC2CF5AD770999


def _value_bytes(field, value):
    """(payload, raw_size, width, height, flags) of one value."""
    if value is None:
        return b"", 0, 0, 0, 0
    if field["kind"] == "image":
        return value["data"], value.get("raw_size", 0), value["width"], value["height"], value.get("flags", 0)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value), len(value), 0, 0, 0
    fmt = DTYPES[field["dtype"]][1]
    return struct.pack("<%d%s" % (len(value), fmt), *value), len(value), 0, 0, 0


def write_v3(path, fields, classes, records, page_size=4096):
    heap = bytearray()
    table = bytearray()
    max_count = [0] * len(fields)
    ds_flags = 0
    for label, values in records:
        for f, (fd, v) in enumerate(zip(fields, values)):
            data, raw, w, h, fl = _value_bytes(fd, v)
            rec = bytearray(32)
            if data:
                inp = len(heap) % page_size
                if inp and len(data) > page_size - inp:  # never straddle a page it fits in
                    heap += bytes(page_size - inp)
                struct.pack_into("<QIIHHHHII", rec, 0, len(heap), len(data), label if f == 0 else 0,
                                 w, h, fl, 0, xxh64(data) & 0xFFFFFFFF, raw)
                heap += data
            table += rec
            max_count[f] = max(max_count[f], len(data) if fd["kind"] == "image" else raw)
            if fd["kind"] == "image" and data:
                ds_flags |= {0: 1, 1: 2, 3: 8}[fl & 3]
    ct = bytearray()
    names = bytearray()
    base = 8 * len(classes)
    for c in classes:
        b = c.encode()
        ct += struct.pack("<II", base + len(names), len(b))
        names += b + b"\0"
    ct += names
    ft = bytearray(struct.pack("<II", len(fields), 64))
    for f, fd in enumerate(fields):
        d = bytearray(64)
        d[0:len(fd["name"])] = fd["name"].encode()
        shape = list(fd.get("shape", ())) + [0, 0, 0]
        follows = fd.get("follows")
        struct.pack_into("<BBBB3II", d, 32, KINDS[fd["kind"]], DTYPES[fd.get("dtype", "u8")][0],
                         fd.get("flags", 0), len(fd.get("shape", ())), *shape[:3],
                         0xFFFFFFFF if follows is None else follows)
        struct.pack_into("<Q", d, 56, max_count[f])
        ft += d
    pages = [heap[p:p + page_size] for p in range(0, len(heap), page_size)]
    pt = b"".join(struct.pack("<Q", xxh64(bytes(p))) for p in pages)
    heap_off = 4096
    st_off = (heap_off + len(heap) + 7) & ~7
    ct_off = st_off + len(table)
    ft_off = (ct_off + len(ct) + 7) & ~7
    pt_off = ft_off + len(ft)
    size = pt_off + len(pt)
    out = bytearray(size)
    out[heap_off:heap_off + len(heap)] = heap
    out[st_off:st_off + len(table)] = table
    out[ct_off:ct_off + len(ct)] = ct
    out[ft_off:ft_off + len(ft)] = ft
    out[pt_off:] = pt
    tables = xxh64(bytes(table) + bytes(ct) + bytes(ft) + pt)
    hdr = bytearray(128)
    struct.pack_into("<8sIIQIIQQQQQQQQQIIQ", hdr, 0, MAGIC, 3, 128, len(records), len(classes),
                     page_size, heap_off, len(heap), len(pages), st_off, ct_off, len(ct), pt_off,
                     size, tables, ds_flags, 32 * len(fields), ft_off)
    struct.pack_into("<Q", hdr, 120, xxh64(bytes(hdr[:120])))
    out[:128] = hdr
    with open(path, "wb") as fh:
        fh.write(out)


def read(path):
    """(version, fields, classes, records) as write_v3 takes them; versions 1 and 2 give
    one field ("images" or "tokens"). Asserts what docs/format.md says a reader checks."""
    d = open(path, "rb").read()
    (magic, version, hsize, count, nclass, page_size, heap_off, heap_size, npages, st_off,
     ct_off, ct_size, pt_off, size, tables, ds_flags, rec_size, ft_off) = struct.unpack_from(
        "<8sIIQIIQQQQQQQQQIIQ", d, 0)
    assert magic == MAGIC and hsize == 128 and size == len(d)
    assert struct.unpack_from("<Q", d, 120)[0] == xxh64(d[:120]), "header checksum"
    if version < 3:
        assert rec_size == 32 and ft_off == 0
        kind = "tokens" if ds_flags & 4 else "image"
        fields = [dict(name="tokens" if ds_flags & 4 else "images", kind=kind, dtype="u8",
                       flags=1 if ds_flags & 4 else 0, shape=(), follows=None)]
        ft = b""
    else:
        n, dsize = struct.unpack_from("<II", d, ft_off)
        assert dsize == 64 and n * 32 == rec_size
        ft = d[ft_off:ft_off + 8 + 64 * n]
        fields = []
        for f in range(n):
            o = ft_off + 8 + 64 * f
            name = d[o:o + 32].rstrip(b"\0").decode()
            kind, dt, flags, rank = d[o + 32:o + 36]
            shape = struct.unpack_from("<3I", d, o + 36)[:rank]
            follows, res, maxc = struct.unpack_from("<IIQ", d, o + 48)
            assert res == 0
            fields.append(dict(name=name, kind=KIND_BY_CODE[kind], dtype=DT_BY_CODE[dt][0],
                               flags=flags, shape=tuple(shape),
                               follows=None if follows == 0xFFFFFFFF else follows, max_count=maxc))
        assert pt_off == ft_off + len(ft)
    table = d[st_off:st_off + count * rec_size]
    assert xxh64(table + d[ct_off:ct_off + ct_size] + ft + d[pt_off:pt_off + 8 * npages]) == tables
    classes = []
    for c in range(nclass):
        off, ln = struct.unpack_from("<II", d, ct_off + 8 * c)
        classes.append(d[ct_off + off:ct_off + off + ln].decode())
    records = []
    for i in range(count):
        vals, label = [], 0
        for f, fd in enumerate(fields):
            off, ln, lab, w, h, fl, res, ck, raw = struct.unpack_from("<QIIHHHHII", d,
                                                                      st_off + i * rec_size + 32 * f)
            data = d[heap_off + off:heap_off + off + ln]
            assert (xxh64(data) & 0xFFFFFFFF) == ck if ln else (off, raw, ck) == (0, 0, 0)
            if f == 0:
                label = lab
            if not ln:
                vals.append(None)
            elif fd["kind"] == "image":
                vals.append(dict(data=data, width=w, height=h, flags=fl, raw_size=raw))
            elif fd["kind"] in ("text", "bytes"):
                vals.append(data)
            elif version < 3:
                vals.append(list(struct.unpack("<%d%s" % (raw, "I" if fl & 0x1000 else "H"), data)))
            else:
                fmt = DT_BY_CODE[KINDS and DTYPES[fd["dtype"]][0]][1]
                vals.append(list(struct.unpack("<%d%s" % (raw, fmt), data)))
        records.append((label, vals))
    return version, fields, classes, records
