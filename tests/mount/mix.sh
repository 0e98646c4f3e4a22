#!/usr/bin/env bash
# tests/mount/mix.sh — mixtures of datasets through the mount (source=, docs/mixing.md):
#   - three sources with weights 0.5/0.3/0.2: every batch within one sample of its
#     proportions (the `sources` tensor), `indices` local to the source, labels as stored
#     (mix_labels=shared) or offset by the classes before (offset); a source smaller than
#     its share repeated pass by pass, a larger one subsampled without repeats;
#   - each mixed-in sample's image equals the one-source mount's image of that sample
#     cropped with the same key (augment=none: the same pixels);
#   - bytes identical across thread counts, read orders and remounts; shard=I/N batch K is
#     the unsharded batch K*N+I; epoch 40 batch 7 of a fresh mount computes one batch;
#   - two sources with a schedule (step and linear); epoch_samples=;
#   - /stats counts samples per source, `batchfs top` shows them; MNT/pipeline read back
#     as a spec file mounts the same fingerprint; another weight, another fingerprint;
#   - errors at mount, naming the source, nothing mounted: a token dataset among image
#     ones, a missing file, a bad weight, a schedule out of order, SOURCE and source= both.
# Three small ImageFolders packed (30, 14, 100 samples). Ten seconds or so.
. "$(dirname "$0")/lib.sh"
require_fuse
need_py

"$GEN" "$T/fa" 3 10 40 80 1 >/dev/null && "$GEN" "$T/fb" 2 7 40 80 2 >/dev/null &&
    "$GEN" "$T/fc" 4 25 40 80 3 >/dev/null || fail "gen_imagefolder"
for x in a b c; do
    "$MKBATCHFS" "$T/f$x" "$T/$x.bfs" >/dev/null 2>&1 || fail "mkbatchfs f$x"
done
mkdir "$T/m1" "$T/m2" "$T/m3" "$T/ma" "$T/mb" "$T/mc" "$T/out"
MIX="source=a.bfs:0.5+b.bfs:0.3+c.bfs:0.2"
OPTS=batch=10,size=24,seed=7,augment=none

# 1. three sources: proportions, repeats, subsampling, labels, images against one-source
mount_bfs "" m1 -o "$MIX,$OPTS,threads=1"
mount_bfs a.bfs ma -o "$OPTS,drop_last=0"
mount_bfs b.bfs mb -o "$OPTS,drop_last=0"
mount_bfs c.bfs mc -o "$OPTS,drop_last=0"
[ "$(ls "$T/m1/epoch/0" | wc -l)" = 14 ] || fail "144 samples in batches of 10: want 14 batches"
cat >"$T/check.py" <<'EOF'
import sys
import numpy as np
sys.path.insert(0, "python")
import batchfs
from batchfs import load_file

T = sys.argv[1]
W = [0.5, 0.3, 0.2]
N = [30, 14, 100]
CLASSES = [3, 2, 4]

def one_image(src, idx, lab):
    """sample idx of source src as its own mount serves it (augment=none: same pixels)"""
    m = T + "/m" + "abc"[src]
    nb = len([f for f in __import__("os").listdir(m + "/epoch/0")])
    for k in range(nb):
        b = load_file(f"{m}/epoch/0/batch_{k}", "numpy")
        hit = np.nonzero(b["indices"] == idx)[0]
        if len(hit):
            assert b["labels"][hit[0]] == lab, (src, idx, b["labels"][hit[0]], lab)
            return b["images"][hit[0]]
    raise AssertionError(f"sample {idx} of source {src} not in epoch 0 of its own mount")

for e in (0, 1):
    drawn = [[] for _ in W]
    for k in range(14):
        b = load_file(f"{T}/m1/epoch/{e}/batch_{k}", "numpy")
        assert sorted(b) == ["images", "indices", "labels", "sources"], sorted(b)
        s, i, l = b["sources"], b["indices"], b["labels"]
        c = np.bincount(s, minlength=3)
        for j in range(3):
            assert abs(c[j] - W[j] * 10) < 1, (e, k, c)
        for j in range(10):
            assert 0 <= i[j] < N[s[j]], (s[j], i[j])
            assert 0 <= l[j] < CLASSES[s[j]], (s[j], l[j])
            drawn[s[j]].append(int(i[j]))
        if e == 0 and k < 3:
            for j in range(10):
                ref = one_image(int(s[j]), int(i[j]), int(l[j]))
                assert np.array_equal(ref, b["images"][j]), (k, j)
    # a: 70 draws of 30 (passes: every sample 2 or 3 times); b: 42 of 14 (3 each);
    # c: 28 of 100 (no repeat)
    for j, want in ((0, (2, 3)), (1, (3, 3)), (2, (0, 1))):
        cnt = np.bincount(drawn[j], minlength=N[j])
        assert cnt.min() >= want[0] and cnt.max() <= want[1], (j, cnt.min(), cnt.max())
    assert len(set(drawn[2])) == 28
print("ok")
EOF
out=$("$PY" "$T/check.py" "$T" 2>&1) || fail "proportions: $out"
ok "three sources: every batch within one sample of 0.5/0.3/0.2; repeats and subsampling; images equal the sources' own"

read_all() { # MNT TAG ORDER...: epoch 2, every batch, into $T/out/TAG.K
    local m=$1 tag=$2 k
    shift 2
    for k in "$@"; do cat "$m/epoch/2/batch_$k" >"$T/out/$tag.$k" || fail "read $m batch $k"; done
}
read_all "$T/m1" t1 $(seq 0 13)
mount_bfs "" m2 -o "$MIX,$OPTS,threads=2,prefetch=4"
read_all "$T/m2" t2 $(seq 13 -1 0)
for k in $(seq 0 13); do
    cmp -s "$T/out/t1.$k" "$T/out/t2.$k" || fail "batch $k differs between threads=1 and 2 (reversed order)"
done
ok "the same bytes with other thread counts and read orders"

# shards: batch K of shard I of 3 is the unsharded batch 3K+I
for i in 0 1 2; do
    mkdir -p "$T/s$i"
    mount_bfs "" "s$i" -o "$MIX,$OPTS,shard=$i/3"
    n=$(ls "$T/s$i/epoch/2" | wc -l)
    [ "$n" = 4 ] || fail "shard $i/3: $n batches, want 4 (14 div 3)"
    for k in 0 1 2 3; do
        "$PY" - "$T/s$i/epoch/2/batch_$k" "$T/out/t1.$((3 * k + i))" <<'EOF' || fail "shard $i/3 batch $k is not batch $((3 * k + i))"
import sys
sys.path.insert(0, "python")
from batchfs import load_file
a, b = load_file(sys.argv[1], "numpy"), load_file(sys.argv[2], "numpy")
for t in ("images", "labels", "indices", "sources"):
    assert (a[t] == b[t]).all(), t
EOF
    done
done
ok "shard=I/3 batch K is the unsharded mount's batch 3K+I"

# pad=1: shard 2 of 4 has ceil(14/4) = 4 batches, its last (stratum 3*4 + 2 = 14) repeating
# batch 0 and marked `padded`
mkdir -p "$T/sp"
mount_bfs "" sp -o "$MIX,$OPTS,shard=2/4,pad=1"
[ "$(ls "$T/sp/epoch/2" | wc -l)" = 4 ] || fail "pad=1 shard 2/4: want 4 batches"
"$PY" - "$T/sp/epoch/2" "$T/out" <<'EOF' || fail "pad=1 over a mixture"
import sys
import numpy as np
sys.path.insert(0, "python")
from batchfs import load_file
m, out = sys.argv[1], sys.argv[2]
for k, (ref, pad) in enumerate(((2, 0), (6, 0), (10, 0), (0, 1))):
    a, b = load_file(f"{m}/batch_{k}", "numpy"), load_file(f"{out}/t1.{ref}", "numpy")
    assert (a["indices"] == b["indices"]).all() and (a["sources"] == b["sources"]).all(), k
    assert (a["padded"] == pad).all(), (k, a["padded"])
EOF
unmount_bfs "$T/sp"
ok "pad=1 over a mixture: every shard 4 batches, the repeat marked padded"

# a fresh mount computes only what is read: epoch 40 batch 7, prefetch off
unmount_bfs "$T/m2"
mount_bfs "" m2 -o "$MIX,$OPTS,prefetch=0"
cat "$T/m2/epoch/40/batch_7" >"$T/out/e40" || fail "read epoch 40 batch 7"
computed=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["batches"]["computed"])' "$T/m2/stats")
[ "$computed" = 1 ] || fail "epoch 40 batch 7 of a fresh mount computed $computed batches"
cat "$T/m1/epoch/40/batch_7" | cmp -s - "$T/out/e40" || fail "epoch 40 batch 7 differs between mounts"
ok "epoch 40 batch 7 of a fresh mount computes one batch, the same bytes"

# /stats and top count per source
"$PY" - "$T/m1/stats" <<'EOF' || fail "/stats sources"
import json, sys
s = json.load(open(sys.argv[1]))["sources"]
assert [x["samples"] for x in s] == [30, 14, 100], s
assert s[0]["path"].endswith("/a.bfs") and s[2]["path"].endswith("/c.bfs"), s
d = [x["drawn"] for x in s]
assert sum(d) > 0 and abs(d[0] / sum(d) - 0.5) < 0.02 and abs(d[2] / sum(d) - 0.2) < 0.02, d
EOF
top=$("$BATCHFS" top "$T/m1" -n 1 2>&1) || fail "batchfs top: $top"
grep -q "sources=a.bfs:[0-9]*,b.bfs:[0-9]*,c.bfs:[0-9]*" <<<"$top" || fail "top shows no sources: $top"
ok "/stats and top count the samples drawn from each source"

# MNT/pipeline as a spec file: the same mixture, the same fingerprint
fp1=$(sed -n 's/^fingerprint = //p' "$T/m1/pipeline")
grep -q "^source = $T/a.bfs:0.5, $T/b.bfs:0.3, $T/c.bfs:0.2\$" "$T/m1/pipeline" ||
    fail "MNT/pipeline source line: $(grep ^source "$T/m1/pipeline")"
cp "$T/m1/pipeline" "$T/spec"
mount_bfs "" m3 -o spec="$T/spec"
[ "$(sed -n 's/^fingerprint = //p' "$T/m3/pipeline")" = "$fp1" ] || fail "spec file of MNT/pipeline: another fingerprint"
unmount_bfs "$T/m3"
mount_bfs "" m3 -o "source=a.bfs:0.5+b.bfs:0.25+c.bfs:0.25,$OPTS"
[ "$(sed -n 's/^fingerprint = //p' "$T/m3/pipeline")" != "$fp1" ] || fail "another weight, the same fingerprint"
unmount_bfs "$T/m3"
mount_bfs "" m3 -o "source=a.bfs:5+b.bfs:3+c.bfs:2,$OPTS"
[ "$(sed -n 's/^fingerprint = //p' "$T/m3/pipeline")" = "$fp1" ] || fail "weights 5:3:2 are 0.5:0.3:0.2, yet another fingerprint"
unmount_bfs "$T/m3"
ok "MNT/pipeline mounts as a spec; weights enter the fingerprint normalized"

# a long source list (30 hard links with long names: ~7 kB): MNT/pipeline shows it whole
long=$T/$(printf 'd%.0s' $(seq 200))
mkdir "$long"
lst=
for i in $(seq 30); do
    ln "$T/a.bfs" "$long/s$i.bfs"
    lst="$lst${lst:++}$long/s$i.bfs:1"
done
mount_bfs "" m3 -o "source=$lst,$OPTS"
grep -q "^fingerprint = " "$T/m3/pipeline" || fail "MNT/pipeline of a 30-source mixture is cut: $(wc -c <"$T/m3/pipeline") bytes"
grep -q "s30.bfs:1\$" "$T/m3/pipeline" || fail "MNT/pipeline lacks source 30"
unmount_bfs "$T/m3"
ok "a 30-source mixture's MNT/pipeline is whole"

# the Python package: a mixture as {path: weight}
BFS_BIN=$(realpath "$BATCHFS") "$PY" - "$T" <<'EOF' || fail "batchfs.mount of a mixture"
import os, sys
sys.path.insert(0, "python")
import batchfs
import numpy as np
T = sys.argv[1]
with batchfs.mount({f"{T}/a.bfs": 0.5, f"{T}/c.bfs": 0.5}, f"{T}/py", batch=10, size=24,
                   augment="none", binary=os.environ["BFS_BIN"]) as m:
    b = next(iter(batchfs.Batches(m)))
    assert (np.bincount(b["sources"], minlength=2) == [5, 5]).all(), b["sources"]
    assert f"source = {T}/a.bfs:0.5, {T}/c.bfs:0.5" in open(f"{T}/py/pipeline").read()
EOF
ok "batchfs.mount({a: 0.5, c: 0.5}) mounts the mixture"

# 2. two sources, labels offset, a schedule and epoch_samples
mount_bfs "" m3 -o "source=a.bfs+b.bfs,mix_labels=offset,mix_schedule=linear:0@1/0+4@0.5/0.5,epoch_samples=40,$OPTS"
[ "$(ls "$T/m3/epoch/0" | wc -l)" = 4 ] || fail "epoch_samples=40: want 4 batches"
"$PY" - "$T/m3" <<'EOF' || fail "schedule"
import sys
import numpy as np
sys.path.insert(0, "python")
from batchfs import load_file
m = sys.argv[1]
for e, wb in ((0, 0.0), (2, 0.25), (4, 0.5), (9, 0.5)):
    for k in range(4):
        b = load_file(f"{m}/epoch/{e}/batch_{k}", "numpy")
        c = np.bincount(b["sources"], minlength=2)
        assert abs(c[1] - 10 * wb) < 1, (e, k, c)
        lab = b["labels"]
        assert ((b["sources"] == 0) <= (lab < 3)).all() and ((b["sources"] == 1) <= (lab >= 3)).all(), (lab, b["sources"])
EOF
unmount_bfs "$T/m3"
ok "a linear schedule from 1/0 to 0.5/0.5 over epochs 0..4; epoch_samples=40; labels offset"

# 3. errors at mount: named, nothing mounted
python3 -c 'import struct, sys; open(sys.argv[1], "wb").write(struct.pack("<600H", *([7] * 99 + [50256]) * 6))' "$T/t.bin"
"$MKBATCHFS" --tokens u16 --doc-sep 50256 "$T/t.bin" "$T/t.bfs" >/dev/null 2>&1 || fail "mkbatchfs --tokens"
refuse() { # WANT ARGS...: batchfs ARGS must fail before mounting, saying WANT
    local want=$1 out rc=0
    shift
    out=$(cd "$T" && "$BATCHFS" "$@" -f 2>&1) || rc=$?
    [ "$rc" != 0 ] || fail "batchfs $* mounted"
    grep -qF -- "$want" <<<"$out" || fail "batchfs $*: no '$want' in: $out"
    is_mounted "$T/m3" && fail "batchfs $*: half-mounted"
    return 0
}
refuse "source 3 ($T/t.bfs) holds token sequences, source 1 ($T/a.bfs) images" m3 -o "source=a.bfs+b.bfs+t.bfs"
refuse "source 2: nope.bfs: No such file or directory" m3 -o "source=a.bfs+nope.bfs"
refuse "a weight that is not a positive decimal" m3 -o "source=a.bfs:0+b.bfs:1"
refuse "epochs not in ascending order" m3 -o "source=a.bfs+b.bfs,mix_schedule=4@1/1+2@1/0"
refuse "2 weights per point, but source= has 3 sources" m3 -o "$MIX,mix_schedule=0@1/1"
refuse "so there is no SOURCE argument" a.bfs m3 -o "$MIX"
refuse "mix_labels= is an option of mixtures" a.bfs m3 -o mix_labels=offset
ok "a token source, a missing file, bad weights and schedules, SOURCE and source= both: refused, named"

# 4. a changed source changes the fingerprint (and the running mount refuses it)
cp "$T/b.bfs" "$T/b2.bfs"
mount_bfs "" m3 -o "source=a.bfs:0.5+b2.bfs:0.5,$OPTS"
fp_a=$(sed -n 's/^fingerprint = //p' "$T/m3/pipeline")
unmount_bfs "$T/m3"
"$MKBATCHFS" "$T/fc" "$T/b2.bfs.new" >/dev/null 2>&1 && mv "$T/b2.bfs.new" "$T/b2.bfs" || fail "repack"
mount_bfs "" m3 -o "source=a.bfs:0.5+b2.bfs:0.5,$OPTS"
[ "$(sed -n 's/^fingerprint = //p' "$T/m3/pipeline")" != "$fp_a" ] || fail "a changed source kept its fingerprint"
unmount_bfs "$T/m3"
ok "a changed source changes the fingerprint"

# 5. token datasets, pack=concat: the epoch's documents drawn from the mixture; each
# epoch's rows cut whole documents of both sources laid end to end, about half of each
python3 - "$T" <<'PYEOF'
import random, struct, sys
T = sys.argv[1]
random.seed(3)
for name, base, ndocs in (("u1", 1000, 20), ("u2", 2000, 200)):
    ids = []
    for d in range(ndocs):
        ids += [base + random.randrange(0, 900) for _ in range(random.randrange(5, 60))] + [50256]
    open(f"{T}/{name}.bin", "wb").write(struct.pack("<%dH" % len(ids), *ids))
PYEOF
for x in u1 u2; do
    "$MKBATCHFS" --tokens u16 --doc-sep 50256 "$T/$x.bin" "$T/$x.bfs" >/dev/null 2>&1 || fail "mkbatchfs --tokens $x"
done
# fewer documents (~264) than rows (~470) per epoch: the mount says so (docs/sequences.md)
expect_log "documents for [0-9]* rows of seq_len=16 per epoch"
mount_bfs "" m3 -o "source=u1.bfs:0.5+u2.bfs:0.5,seq_len=16,batch=4,seed=2"
"$PY" - "$T" <<'PYEOF' || fail "token mixture"
import os, sys
import numpy as np
sys.path.insert(0, "python")
from batchfs import load_file
T = sys.argv[1]
docs = {}
for src, name in enumerate(("u1", "u2")):
    ids = np.fromfile(f"{T}/{name}.bin", dtype="<u2").tolist()
    cur = []
    for x in ids:  # a document keeps its separator (mkbatchfs --doc-sep)
        cur.append(x)
        if x == 50256:
            docs.setdefault(cur[0], []).append((tuple(cur), src))
            cur = []
nb = len(os.listdir(f"{T}/m3/epoch/0"))
streams = []
for e in (0, 1):
    stream = np.concatenate([load_file(f"{T}/m3/epoch/{e}/batch_{k}", "numpy")["tokens"].ravel()
                             for k in range(nb)]).tolist()
    streams.append(stream)
    p, n = 0, [0, 0]
    while p < len(stream):
        for d, src in docs.get(stream[p], []):
            if tuple(stream[p:p + len(d)]) == d[:len(stream) - p]:
                n[src] += 1
                p += len(d)
                break
        else:
            raise AssertionError(f"epoch {e}: position {p} starts no document")
    # 220 documents per epoch, 110 of each; the rows hold all but the last few
    assert n[0] >= 100 and n[1] >= 100 and abs(n[0] - n[1]) <= 12, n
assert streams[0] != streams[1]
PYEOF
unmount_bfs "$T/m3"
refuse "pack=concat and fixed weights" m3 -o "source=u1.bfs:0.5+u2.bfs:0.5,pack=pad"
refuse "pack=concat and fixed weights" m3 -o "source=u1.bfs+u2.bfs,mix_schedule=0@1/1"
ok "tokens, pack=concat: rows cut from documents of both sources, half each; pad and schedules refused"
