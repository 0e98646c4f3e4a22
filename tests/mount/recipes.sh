#!/usr/bin/env bash
# tests/mount/recipes.sh — a training recipe through the mount (docs/augment.md):
# randaugment, color_jitter, grayscale_p, erasing, mixup and cutmix with label smoothing,
# f16. Every batch of two epochs read through the mount (passthrough batch files: the
# batch-level mixing happens before a batch is sealed into its file) equals engine_tool's
# in-process bytes, twice (a second mount, other thread counts: bytes depend on (seed,
# epoch, sample) only); `targets` F32 [B, 4] is in every batch and each row sums to 1;
# /stats counts the ops, Erasing, Mixup and CutMix; the fingerprint differs from the
# plain pipeline's. Then size_schedule= (step and linear): each epoch's batch files have
# that epoch's size (stat before any compute, and the header's shape), with the bytes
# engine_tool computes, mixing included; and the Python package's Batches yield `targets`
# and each epoch's size.
. "$(dirname "$0")/lib.sh"
require_fuse
"$GEN" "$T/images" 4 24 40 90 3 # 4 classes of 24 images
"$MKBATCHFS" --quiet "$T/images" "$T/d.bfs"
mkdir "$T/mnt" "$T/ref"
OPTS="batch=16,size=32,seed=5,epochs=2,randaugment=2:9,color_jitter=0.4:0.4:0.4:0.1,grayscale_p=0.2"
OPTS="$OPTS,erasing=0.5,dtype=f16,mixup=0.8,cutmix=1.0,label_smoothing=0.1"
for e in 0 1; do for k in 0 1 2 3 4 5; do ref_batch "$T/d.bfs" "$OPTS" $e $k "$T/ref/e${e}_b$k"; done; done
for threads in 1 2; do
    mount_bfs "$T/d.bfs" "$T/mnt" -o "$OPTS,threads=$threads"
    for e in 0 1; do for k in 0 1 2 3 4 5; do
        cmp -s "$T/mnt/epoch/$e/batch_$k" "$T/ref/e${e}_b$k" ||
            fail "threads=$threads: epoch $e batch $k differs from engine_tool's bytes"
    done; done
    fp=$(python3 -c 'import os, sys; print(os.getxattr(sys.argv[1], "user.batchfs.fingerprint").decode())' "$T/mnt")
    cp "$T/mnt/stats" "$T/stats.json"
    unmount_bfs "$T/mnt"
done
ok "12 batches through two mounts equal engine_tool's bytes"
pyx - "$T" <<'PYEOF' || fail "targets or /stats"
import json, struct, sys, bfs
T = sys.argv[1]
for e in (0, 1):
    for k in range(6):
        t, _ = bfs.tensors(f"{T}/ref/e{e}_b{k}")
        dt, shape, raw = t["targets"]
        assert dt == "F32" and shape == [16, 4], (dt, shape)
        vals = struct.unpack("<%df" % (len(raw) // 4), raw)
        for i in range(16):
            assert abs(sum(vals[4 * i:4 * i + 4]) - 1) < 1e-5, vals[4 * i:4 * i + 4]
with open(f"{T}/stats.json") as f:
    st = json.load(f)
ops = st["augment_ops"]
for name in ("Erasing", "Brightness", "Hue"):
    assert ops.get(name, {}).get("applied", 0) > 0, (name, ops)
assert ops.get("Mixup", {}).get("applied", 0) + ops.get("CutMix", {}).get("applied", 0) > 0, ops
assert st["stage_us_per_image"]["augment"] > 0, st["stage_us_per_image"]
print("targets rows sum to 1; /stats augment_ops:", ", ".join(f"{k} {v['applied']}" for k, v in ops.items()))
PYEOF
mount_bfs "$T/d.bfs" "$T/mnt" -o "batch=16,size=32,seed=5,epochs=2,dtype=f16"
plain=$(python3 -c 'import os, sys; print(os.getxattr(sys.argv[1], "user.batchfs.fingerprint").decode())' "$T/mnt")
[ -f "$T/mnt/epoch/0/batch_0" ] || fail "plain mount lists no batch"
unmount_bfs "$T/mnt"
[ "$plain" != "$fp" ] || fail "the recipe options left the fingerprint as the plain pipeline's"
ok "fingerprint $fp differs from the plain pipeline's $plain"

# progressive resizing: each epoch its own shape, stat'ed before compute
for sched in "0:32:1:48x40:2:64" "linear:0:32:3:96"; do
    SOPTS="batch=16,size=224,seed=2,epochs=4,size_schedule=$sched,mixup=0.5,cutmix=1.0,dtype=bf16"
    mount_bfs "$T/d.bfs" "$T/mnt" -o "$SOPTS"
    sizes=""
    for e in 0 1 2 3; do
        sizes="$sizes $(stat -c %s "$T/mnt/epoch/$e/batch_1")"
        ref_batch "$T/d.bfs" "$SOPTS" $e 1 "$T/ref/s$e"
        cmp -s "$T/mnt/epoch/$e/batch_1" "$T/ref/s$e" ||
            fail "size_schedule=$sched: epoch $e batch 1 differs from engine_tool's bytes"
    done
    unmount_bfs "$T/mnt"
    shapes=$(pyx - "$T" <<'PYEOF'
import sys, bfs
T = sys.argv[1]
print(" ".join("x".join(map(str, bfs.tensors(f"{T}/ref/s{e}")[0]["images"][1][1:3])) for e in range(4)))
PYEOF
)
    case $sched in
    0:*) want="32x32 48x40 64x64 64x64" ;;
    *) want="32x32 64x64 64x64 96x96" ;; # 32 + 64 e / 3: 53.3 -> 64, 74.7 -> 64, then 96
    esac
    [ "$shapes" = "$want" ] || fail "size_schedule=$sched: shapes $shapes, want $want"
    ok "size_schedule=$sched: epochs 0..3 as $shapes (stat sizes$sizes), engine_tool's bytes"
done

# the Python package: `targets` and scheduled sizes come through Batches as they are
need_py
PYTHONPATH=$PWD/python BATCHFS_BIN=$BATCHFS "$PY" - "$T" <<'PYEOF' || fail "the Python package's view of a recipe"
import sys
import numpy as np
import batchfs
T = sys.argv[1]
with batchfs.mount(T + "/d.bfs", T + "/mnt", batch=16, size=32, epochs=2, mixup=0.8, cutmix=1.0,
                   label_smoothing=0.1, dtype="f16", size_schedule="0:32:1:48") as m:
    for epoch, side in ((0, 32), (1, 48)):
        b = next(iter(batchfs.Batches(m, epoch=epoch)))
        assert sorted(b) == ["images", "indices", "labels", "targets"], sorted(b)
        assert b["images"].shape == (16, side, side, 3), b["images"].shape
        assert b["targets"].shape == (16, 4) and b["targets"].dtype == np.float32
        assert np.allclose(b["targets"].sum(1), 1, atol=1e-5), b["targets"].sum(1)
print("Batches: targets float32 [16, 4], images 32 then 48 px")
PYEOF
ok "the Python package yields targets and each epoch's size"
