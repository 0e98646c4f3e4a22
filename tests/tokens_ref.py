"""tests/tokens_ref.py — a small reference implementation of the token pipelines
(pack=concat|pad|bucket, docs/sequences.md) in numpy, checked against batchfs's batches.

    python tokens_ref.py DOCS.npz ORDER_FILE OPTIONS EPOCH BATCH_DIR

DOCS.npz holds the documents as the test wrote them (arrays d0, d1, ...), independent of
the .bfs; ORDER_FILE is `engine_tool order` for the same pipeline without shard= (the
keyed document permutation, tested on its own in check_plan; for pack=bucket also the
keyed order of the epoch's batches, and for shuffle=rows the keyed order of the epoch's
rows after a line "rows", which is recomputed here from (seed, epoch): Philox4x32-10 and
the keyed permutation bfs_perm, written from engine/rng.c and engine/plan.c); BATCH_DIR holds batchfs's batch_K files of shard
I/N. Everything else — concatenation, windows, sharding, bucketing, chunks, padding,
masks, lengths, positions, the file's tensors and metadata — is computed here and
compared byte for byte. Exits 1 with the first difference.
"""
import json
import os
import struct
import sys

import numpy as np
from safetensors.numpy import load_file


M64 = (1 << 64) - 1


def mix64(x):  # base/mix.h
    x ^= x >> 30
    x = (x * 0xbf58476d1ce4e5b9) & M64
    x ^= x >> 27
    x = (x * 0x94d049bb133111eb) & M64
    return x ^ (x >> 31)


def philox_u64(seed, epoch, sample, stream):
    """The first bfs_rng_u64 of bfs_rng_init(seed, epoch, sample, stream) (engine/rng.c)."""
    k = mix64(mix64(seed ^ 0x6a09e667f3bcc908) ^ epoch)
    k0, k1 = k & 0xffffffff, k >> 32
    c = [0, stream, sample & 0xffffffff, sample >> 32]
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & 0xffffffff, (p0 >> 32) ^ c[3] ^ k1, p0 & 0xffffffff]
        k0, k1 = (k0 + 0x9E3779B9) & 0xffffffff, (k1 + 0xBB67AE85) & 0xffffffff
    return c[0] << 32 | c[1]


def perm(n, key):
    """bfs_perm_init(n, key) as a list: perm[i] = bfs_perm_apply(i) (engine/plan.c)."""
    s = [mix64(key ^ 0x3c6ef372fe94f82b)]

    def nxt():
        s[0] = (s[0] + 0x9e3779b97f4a7c15) & M64
        return mix64(s[0])
    if n <= 64:  # BFS_PERM_SMALL: Fisher-Yates with Lemire's unbiased draws
        f = list(range(n))
        for i in range(n - 1, 0, -1):
            bound = i + 1
            m = (nxt() >> 32) * bound
            if m & 0xffffffff < bound:
                while m & 0xffffffff < (1 << 32) % bound:
                    m = (nxt() >> 32) * bound
            j = m >> 32
            f[i], f[j] = f[j], f[i]
        return f
    bits = (n - 1).bit_length()
    bits += bits & 1
    h = bits // 2
    mask = (1 << h) - 1
    keys = [nxt() for _ in range(8)]  # BFS_PERM_ROUNDS

    def fwd(x):
        l, r = x >> h, x & mask
        for rk in keys:
            l, r = r, l ^ (mix64(r ^ rk) & mask)
        return l << h | r
    out = []
    for i in range(n):
        x = fwd(i)
        while x >= n:  # cycle walking
            x = fwd(x)
        out.append(x)
    return out


def rows_order(seed, epoch, windows):
    """shuffle=rows: the window at each position of the epoch (stream BFS_RNG_STREAM_ROWS)."""
    return perm(windows, philox_u64(seed, epoch, 0, 9))


def opts(text):
    o = {"batch": "256", "shard": "0/1", "seed": "0", "drop_last": "1", "pack": "concat", "seq_len": "1024",
         "pad_id": "0", "positions": "0", "batch_tokens": "0", "buckets": "none"}
    for kv in filter(None, text.split(",")):
        k, v = kv.split("=", 1)
        o[k] = v
    return o


def expected(docs, order, chunks, rowperm, o, epoch):
    """The batches of shard I/N: a list of (pack, {name: array}) in file order."""
    B = int(o["batch"])
    I, N = map(int, o["shard"].split("/"))
    drop = o["drop_last"] == "1"
    pack = o["pack"]
    out = []
    if pack == "concat":
        T = int(o["seq_len"])
        stream = np.concatenate([docs[d] for d in order]).astype(np.int32)
        pos = np.concatenate([np.arange(len(docs[d]), dtype=np.int32) for d in order])
        W = len(stream) // T
        per = W // N
        if o.get("shuffle") == "rows":  # dataset order, the same cuts; their order permuted
            assert list(order) == list(range(len(docs))), "shuffle=rows: not dataset order"
            ref = rows_order(int(o["seed"]), epoch, W)
            assert sorted(ref) == list(range(W))
            assert rowperm == ref, "shuffle=rows: engine_tool's row order is not the reference's"
            rowperm = ref
        else:
            rowperm = list(range(W))
        nb = per // B if drop else -(-per // B)
        for k in range(nb):
            rows = [rowperm[r * N + I] for r in range(k * B, min(k * B + B, per))]
            t = {"tokens": np.stack([stream[g * T:(g + 1) * T] for g in rows])}
            if o["positions"] == "1":
                t["positions"] = np.stack([pos[g * T:(g + 1) * T] for g in rows])
            out.append(t)
        return out

    def rows_of(ds, width):
        pad = int(o["pad_id"])
        toks = np.full((len(ds), width), pad, dtype=np.int32)
        mask = np.zeros((len(ds), width), dtype=np.uint8)
        lens = np.zeros(len(ds), dtype=np.int64)
        for j, d in enumerate(ds):
            n = min(len(docs[d]), width)
            toks[j, :n] = docs[d][:n]
            mask[j, :n] = 1
            lens[j] = n
        return {"lengths": lens, "indices": np.array(ds, dtype=np.int64), "tokens": toks,
                "mask": mask}

    if pack == "pad":
        T = int(o["seq_len"])
        per = len(docs) // N
        nb = per // B if drop else -(-per // B)
        for k in range(nb):
            ds = [int(order[p * N + I]) for p in range(k * B, min(k * B + B, per))]
            out.append(rows_of(ds, T))
        return out

    bounds = [int(x) for x in o["buckets"].split(":")]
    lists = [[] for _ in bounds]
    for d in order:  # each bucket keeps the epoch's order
        b = next((i for i, x in enumerate(bounds) if len(docs[d]) <= x), len(bounds) - 1)
        lists[b].append(int(d))
    bt = int(o["batch_tokens"])
    allchunks = []  # bucket-major: (bucket, first document, rows per replica)
    for b, lst in enumerate(lists):
        R = min(max(bt // bounds[b], 1), 65536) if bt else B
        used = len(lst) // N * N
        full, rem = divmod(used, N * R)
        allchunks += [(b, i * N * R, R) for i in range(full)]
        if rem and not drop:
            allchunks.append((b, full * N * R, rem // N))
    assert len(chunks) == len(allchunks), (len(chunks), len(allchunks))
    assert sorted(chunks) == list(range(len(allchunks))), "chunk order is not a permutation"
    for c in chunks:
        b, first, R = allchunks[c]
        out.append(rows_of(lists[b][first + I * R:first + I * R + R], bounds[b]))
    return out


def main():
    docs_npz, order_file, text, epoch, bdir = sys.argv[1:6]
    z = np.load(docs_npz)
    docs = [z["d%d" % i] for i in range(len(z.files))]
    o = opts(text)
    lines = open(order_file).read().split()
    cut = lines.index("chunks") if "chunks" in lines else len(lines)
    rcut = lines.index("rows") if "rows" in lines else cut
    order = [int(x) for x in lines[:rcut]]
    rowperm = [int(x) for x in lines[rcut + 1:cut]]
    chunks = [int(x) for x in lines[cut + 1:]]
    assert sorted(order) == list(range(len(docs))), "the order is not a permutation"
    want = expected(docs, order, chunks, rowperm, o, int(epoch))
    have = sorted(os.listdir(bdir), key=lambda s: int(s.split("_")[1]))
    if len(have) != len(want):
        sys.exit("%s: %d batches, the reference has %d" % (text, len(have), len(want)))
    for k, w in enumerate(want):
        path = os.path.join(bdir, "batch_%d" % k)
        raw = open(path, "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        head = json.loads(raw[8:8 + n])
        meta = head.pop("__metadata__")
        if (meta["kind"], meta["pack"], meta["epoch"], meta["batch"]) != \
                ("tokens", o["pack"], epoch, str(k)):
            sys.exit("%s: metadata %s" % (path, meta))
        if list(head) != list(w):
            sys.exit("%s: tensors %s, the reference has %s" % (path, list(head), list(w)))
        got = load_file(path)
        for name, arr in w.items():
            g = got[name]
            if g.dtype != arr.dtype or g.shape != arr.shape or g.tobytes() != arr.tobytes():
                bad = np.argwhere(g != arr)[:3] if g.shape == arr.shape else None
                sys.exit("%s: %s differs: %s %s vs reference %s %s; first differences at %s"
                         % (path, name, g.dtype, g.shape, arr.dtype, arr.shape, bad))
    print("ok %s epoch %s: %d batches as the reference" % (text, epoch, len(want)))


if __name__ == "__main__":
    main()
