#!/usr/bin/env bash
# tests/mount/pad_elastic.sh — shards that lose nothing and elastic resume (issue 32):
#   - pad=1 over N=7 shard mounts of 3,000 samples (batch=64, drop_last=0): each shard
#     serves ceil(3000/7) = 429 samples, every batch has a `padded` U8 [B] tensor, and
#     the samples not marked padded are every sample exactly once, with 7*429 - 3000 = 3
#     marked; pad=0 (the default) loses 3000 mod 7 = 4 and has no `padded` tensor;
#   - Batches: a run that changes world size W=4 -> 2 -> 3, each step's global batches
#     concatenated in rank order, equals the uninterrupted run's batches 0, 1, 2, ...
#     (the states go through JSON, as a checkpoint stores them); pad=True gives every
#     rank ceil(n/W) batches, the repeats marked `padded`; a position that is not a
#     multiple of the batch size and the old {"epoch", "batch"} states.
# About 15 s (3,000 small images).
. "$(dirname "$0")/lib.sh"
require_fuse
need_py

"$GEN" "$T/images" 3 1000 16 24 11 # 3 classes of 1,000 images
"$MKBATCHFS" --quiet "$T/images" "$T/data.bfs"
mkdir "$T/mnt"

PYTHONPATH=$PWD/python BATCHFS_BIN=$BATCHFS "$PY" - "$T" <<'EOF' || fail "pad=1 and elastic resume"
import json, os, sys
import numpy as np
import batchfs

T = sys.argv[1]
SRC, MNT = T + "/data.bfs", T + "/mnt"
n, N = 3000, 7

def shard_samples(pad):
    """(dataset index, padded) of every sample of every shard of epoch 1."""
    out = []
    for i in range(N):
        opts = dict(batch=64, size=8, epochs=2, drop_last=0, shard=f"{i}/{N}", augment="none")
        if pad:
            opts["pad"] = 1
        with batchfs.mount(SRC, MNT, **opts) as m:
            total = 0
            for b in batchfs.Batches(m, epoch=1):
                assert ("padded" in b) == pad, sorted(b)
                mark = b["padded"] if pad else np.zeros(len(b["indices"]), np.uint8)
                assert mark.dtype == np.uint8 and mark.shape == b["indices"].shape
                out += zip(b["indices"].tolist(), mark.tolist())
                total += len(b["indices"])
            assert total == (-(-n // N) if pad else n // N), (i, total)
    return out

got = shard_samples(True)
real = sorted(s for s, p in got if not p)
assert real == list(range(n)), "pad=1: the samples not padded are not every sample once"
assert sum(p for _, p in got) == N * -(-n // N) - n == 3, sum(p for _, p in got)
got = shard_samples(False)
assert len(got) == n - n % N and len(set(s for s, _ in got)) == n - 4
print("ok - pad=1 over 7 shards of 3,000: 429 each, every sample once among the 3,000 not "
      "padded, 3 padded; pad=0 loses 4 and has no padded tensor")

with batchfs.mount(SRC, MNT, batch=100, size=8, epochs=2, augment="none") as m:
    nb = batchfs.batch_count(m, 0)
    assert nb == 30, nb
    whole = [b["indices"].tolist() for b in batchfs.Batches(m, world=1)]
    assert len(whole) == 2 * nb

    def steps(world, state, count):
        """count steps of `world` ranks from state: the global batches of each step, in
        rank order, and the state after them (every rank's the same, through JSON)."""
        ranks = [batchfs.Batches(m, rank=r, world=world) for r in range(world)]
        its = []
        for ds in ranks:
            if state is not None:
                ds.load_state_dict(json.loads(json.dumps(state)))
            its.append(iter(ds))
        seen = []
        for _ in range(count):
            for it in its:
                seen.append(next(it)["indices"].tolist())
        states = [ds.state_dict() for ds in ranks]
        assert all(s["position"] == states[0]["position"] and s["epoch"] == states[0]["epoch"]
                   for s in states), states
        return seen, states[0]

    a, s = steps(4, None, 3)       # 12 batches: position 1,200 of epoch 0
    assert s["epoch"] == 0 and s["position"] == 1200, s
    b, s = steps(2, s, 4)          # 8 more: 2,000
    assert s["position"] == 2000, s
    c, s = steps(3, s, 5)          # 3 steps end epoch 0 (batch 29 lost), 2 in epoch 1
    assert s["epoch"] == 1 and s["position"] == 600, s
    assert a + b + c == whole[:29] + whole[30:36], "W=4 -> 2 -> 3 differs from the whole run"
    print("ok - W=4 -> 2 -> 3 equals the uninterrupted run sample for sample (states through JSON)")

    # pad=True: ceil(30/4) = 8 steps, the last one's 2 extra batches repeat 0 and 1
    ranks = [batchfs.Batches(m, epoch=0, rank=r, world=4, pad=True) for r in range(4)]
    assert [len(ds) for ds in ranks] == [8] * 4
    last = [ds[7] for ds in ranks]
    assert [int(b["padded"].min()) for b in last] == [0, 0, 1, 1]
    assert [int(b["padded"].max()) for b in last] == [0, 0, 1, 1]
    assert last[2]["indices"].tolist() == whole[0] and last[3]["indices"].tolist() == whole[1]
    assert len(list(ranks[3])) == 16  # two epochs of 8, every rank
    assert len(batchfs.Batches(m, rank=3, world=4)) == 7  # without pad: floor
    print("ok - Batches(pad=True): 8 batches per rank of 4 over 30, the 2 repeats marked padded")

    ds = batchfs.Batches(m, rank=0, world=2)
    try:
        ds.load_state_dict({"epoch": 0, "position": 150, "batch_size": 50})
        raise AssertionError("position 150 with batch 100 accepted")
    except ValueError as e:
        assert "not a multiple of this mount's batch size 100" in str(e), e
    ds.load_state_dict({"epoch": 1, "batch": 3})  # an old state: rank 0's next after 3
    assert ds.positions()[:2] == [(1, 4), (1, 6)], ds.positions()[:2]
    print("ok - a position off the batch grid is refused; old {epoch, batch} states resume")
EOF
ok "pad=1 shards and elastic resume"
