#!/usr/bin/env bash
# tests/mount/fields.sh — batches of a multi-field dataset (.bfs version 3: jpg, caption,
# depth, boxes, box_classes, emb, meta, tok; tests/gen_fields_main.c) carry every field:
#   - every value equals the Python reference computed from the values written (captions
#     byte-equal, padded rows zero, lengths and counts), images and the second image field
#     equal the batches of version 1 twins of the same JPEGs (images as today), labels and
#     indices as today; every tensor naturally aligned, images on a page; stat gives the
#     exact size before a read;
#   - batchfs.Batches yields the dict, batchfs.texts decodes the captions;
#   - two mounts (other threads) give identical bytes; a third mount with the same
#     cache_dir computes nothing and serves the same bytes; shards and random access;
#   - fields=jpg,caption serves only those (in -o, after other options); text_len=N cuts
#     at a character boundary and counts in /stats; unknown fields, no image field,
#     text_len without text are refused naming the fields;
#   - a caption with a checksum error substitutes the whole sample (bad_sample=substitute)
#     or fails its batch (bad_sample=fail);
#   - a remote worker (redis-server where installed) serves the same bytes; group=
#     readers of epoch/N/next get every batch once.
# 40 samples, batch=8, size=32. A few seconds.
. "$(dirname "$0")/lib.sh"
require_fuse
need_py

GF=$BUILD/tests/gen_fields
"$GF" "$T/f.bfs" 40 3 --classic "$T/a.bfs" "$T/b.bfs" >"$T/ref.jsonl" || fail "gen_fields"
D=$T/store
mkdir -m 700 "$D"
mkdir "$T/m1" "$T/m2" "$T/m3" "$T/ta" "$T/tb" "$T/out"
OPTS=batch=8,size=32,seed=5
NB=5

read_all() { # MNT TAG: epoch 0 and 1, every batch, into $T/out/TAG.E.K
    local e k
    for e in 0 1; do for k in $(seq 0 $((NB - 1))); do
        cat "$1/epoch/$e/batch_$k" >"$T/out/$2.$e.$k" || fail "read $1/epoch/$e/batch_$k"
    done; done
}

mount_bfs "$T/f.bfs" "$T/m1" -o "$OPTS,cache_dir=$D"
mount_bfs "$T/a.bfs" "$T/ta" -o "$OPTS"
mount_bfs "$T/b.bfs" "$T/tb" -o "$OPTS"
# stat before any read gives the exact size
sz=$(stat -c %s "$T/m1/epoch/1/batch_3")
read_all "$T/m1" m1
read_all "$T/ta" ta
read_all "$T/tb" tb
[ "$sz" = "$(stat -c %s "$T/out/m1.1.3")" ] || fail "stat said $sz bytes, the batch has $(stat -c %s "$T/out/m1.1.3")"

cat >"$T/check.py" <<'EOF'
"""Check batches of the multi-field mount against the values gen_fields wrote."""
import json, os, struct, subprocess, sys
import numpy as np
sys.path.insert(0, "python")
sys.path.insert(0, "tests")
import batchfs
from boxes_ref import transform

out, nb, tag = sys.argv[1], int(sys.argv[2]), sys.argv[3]
text_len = int(sys.argv[4]) if len(sys.argv) > 4 else 0
ref = [json.loads(l) for l in open(sys.argv[5] if len(sys.argv) > 5 else out + "/../ref.jsonl")]
B = 8
def raw(s): return bytes.fromhex(s)
_geom = {}
def geom(e, i):  # sample i's geometry in epoch e, as the engine chose it (engine_tool)
    if (e, i) not in _geom:
        g = subprocess.run([os.environ["ENGINE_TOOL"], "geometry", os.environ["FBFS"], os.environ["GOPTS"],
                            str(e), str(i)], capture_output=True, text=True, check=True).stdout.split()
        _geom[e, i] = {"box": [float(v) for v in g[2:6]], "out": (int(g[6]), int(g[7])),
                       "win": tuple(int(v) for v in g[8:12]), "flip": int(g[12]),
                       "origin": (int(g[13]), int(g[14]))}
    return _geom[e, i]
def cut(b, n):  # text_len: at a character boundary
    if len(b) <= n: return b
    while n and (b[n] & 0xc0) == 0x80: n -= 1
    return b[:n]
maxlen = {k: max(len(raw(r[k])) for r in ref) for k in ("caption", "meta", "boxes", "box_classes", "tok")}
for e in (0, 1):
    for k in range(nb):
        path = f"{out}/{tag}.{e}.{k}"
        hdr = batchfs.read_header(path)
        for t in hdr.tensors:  # natural alignment; images on a page
            size = {"U8": 1, "U16": 2, "I32": 4, "F32": 4, "I64": 8}[t.dtype]
            assert t.begin % size == 0, (t.name, t.begin)
        assert [t for t in hdr.tensors if t.name == "images"][0].begin % 4096 == 0
        b = batchfs.load_file(path)
        ta = batchfs.load_file(f"{out}/ta.{e}.{k}")
        tb = batchfs.load_file(f"{out}/tb.{e}.{k}")
        assert np.array_equal(b["indices"], ta["indices"]) and np.array_equal(b["labels"], ta["labels"])
        assert np.array_equal(b["images"], ta["images"]), "images differ from the version 1 twin's"
        assert np.array_equal(b["depth"], tb["images"]), "depth differs from its twin's images"
        L = text_len or maxlen["caption"]
        assert b["caption"].shape == (B, L), b["caption"].shape
        assert b["meta"].shape == (B, maxlen["meta"]) and b["tok"].shape == (B, maxlen["tok"] // 2)
        assert b["boxes"].shape == (B, maxlen["boxes"] // 16, 4) and b["boxes"].dtype == np.float32
        assert b["box_classes"].shape == (B, maxlen["box_classes"] // 8) and b["box_classes"].dtype == np.int64
        assert b["emb"].shape == (B, 3) and b["caption_lengths"].dtype == np.int32
        caps = batchfs.texts(b, "caption")
        for j, i in enumerate(b["indices"]):
            r = ref[int(i)]
            assert b["labels"][j] == r["label"]
            c = cut(raw(r["caption"]), L)
            assert b["caption_lengths"][j] == len(c) and bytes(b["caption"][j]) == c + bytes(L - len(c)), (i, c)
            assert caps[j] == c.decode("utf-8")
            # boxes follow the crop (docs/engine.md), their classes the boxes kept
            src = np.frombuffer(raw(r["boxes"]), dtype=np.float32).reshape(-1, 4)
            want, keep = transform(src, geom(e, int(i)), 1.0)
            cls = np.frombuffer(raw(r["box_classes"]), dtype=np.int64)[keep]
            for f, n, w in (("meta", "meta_lengths", 1), ("tok", "tok_lengths", 2),
                            ("boxes", "boxes_counts", 16), ("box_classes", "box_classes_lengths", 8)):
                v = {"boxes": want.tobytes(), "box_classes": cls.tobytes()}.get(f, raw(r[f]))
                assert b[n][j] == len(v) // w, (f, i)
                row = b[f][j].tobytes()
                assert row == v + bytes(len(row) - len(v)), (f, i)
            assert b["emb"][j].tobytes() == raw(r["emb"])
print(f"{tag}: {2 * nb} batches equal the reference")
EOF
cat >"$T/check_mnt.py" <<'EOF'
import sys
sys.path.insert(0, "python")
import batchfs, numpy as np
mnt, out = sys.argv[1], sys.argv[2]
ds = batchfs.Batches(mnt, epoch=0, epochs=1)
n = 0
for k, b in enumerate(ds):
    ref = batchfs.load_file(f"{out}/m1.0.{k}")
    assert sorted(b) == sorted(ref), sorted(b)
    for name in ref:
        assert np.array_equal(b[name], ref[name]), name
    assert len(batchfs.texts(b, "caption")) == 8
    n += 1
assert n == 5, n
import importlib.util
if importlib.util.find_spec("torch") is None:
    print("no torch in the venv: texts() of torch tensors not checked")
else:
    t = batchfs.Batches(mnt, format="torch")
    b = t[0]
    assert batchfs.texts(b, "caption") == batchfs.texts(batchfs.load_file(f"{out}/m1.0.0"), "caption")
    print("torch: texts() of torch tensors")
print("Batches: dicts equal the files; texts() decodes")
EOF
export ENGINE_TOOL=$BUILD/tests/engine_tool FBFS=$T/f.bfs GOPTS=$OPTS
"$PY" "$T/check.py" "$T/out" $NB m1 0 "$T/ref.jsonl" || fail "batches differ from the reference"
"$PY" "$T/check_mnt.py" "$T/m1" "$T/out" || fail "batchfs.Batches / texts"
ok "every field equals the reference; images equal the version 1 twins'; Batches and texts()"

# docs/multimodal.md's CLIP-style loop, as written (paths and sizes made small)
awk '/^## A CLIP-style loop/ { found = 1 } found && /^```python$/ { inside = 1; next }
     inside && /^```$/ { exit } inside { print }' docs/multimodal.md |
    sed -e "s#\"pairs.bfs\"#\"$T/f.bfs\"#" -e "s#\"/mnt/pairs\"#\"$T/ex/mnt\"#" \
        -e 's/batch=256, size=224/batch=8, size=32/' >"$T/example.py"
grep -q "$T/ex/mnt" "$T/example.py" && grep -q "batch=8, size=32" "$T/example.py" ||
    fail "docs/multimodal.md's example: no longer \"pairs.bfs\", \"/mnt/pairs\", batch=256, size=224"
{
    cat <<'EOF2'
import json, sys
sys.path.insert(0, "python")
ref = [bytes.fromhex(json.loads(l)["caption"]).decode() for l in open(sys.argv[1])]
seen = []
def step(images, captions):
    assert images.shape == (8, 32, 32, 3) and len(captions) == 8
    seen.append(captions)
EOF2
    cat "$T/example.py"
    cat <<'EOF2'
assert len(seen) == 5, len(seen)
assert sorted(c for cs in seen for c in cs) == sorted(ref)
print("docs/multimodal.md's loop: 5 batches, every caption once")
EOF2
} >"$T/example_run.py"
BATCHFS_BIN=$BATCHFS "$PY" "$T/example_run.py" "$T/ref.jsonl" || fail "docs/multimodal.md's example"
ok "docs/multimodal.md's CLIP-style loop runs as written"

# another mount with other knobs (the sample cache on) computes the same bytes; one on
# the same cache_dir computes nothing
mount_bfs "$T/f.bfs" "$T/m2" -o "$OPTS,threads=1,prefetch=0,sample_cache_mb=64"
read_all "$T/m2" m2
mount_bfs "$T/f.bfs" "$T/m3" -o "$OPTS,cache_dir=$D,threads=2,prefetch=0"
read_all "$T/m3" m3
for e in 0 1; do for k in $(seq 0 $((NB - 1))); do
    cmp "$T/out/m1.$e.$k" "$T/out/m2.$e.$k" || fail "epoch $e batch $k: mounts 1 and 2 differ"
    cmp "$T/out/m1.$e.$k" "$T/out/m3.$e.$k" || fail "epoch $e batch $k: mount 3 (cache_dir) differs"
done; done
computed=$(pyx -c 'import bfs, sys; print(bfs.stats(sys.argv[1])["batches"]["computed"])' "$T/m3")
[ "$computed" = 0 ] || fail "mount 3 computed $computed batches with every one in cache_dir"
ok "two mounts: identical bytes; a third on the same cache_dir computed nothing"
unmount_bfs "$T/m2"
unmount_bfs "$T/m3"

# random access and shards: batch 3 alone, and shard 1/2's batches (the plan's)
mount_bfs "$T/f.bfs" "$T/m2" -o "batch=4,size=32,seed=5,shard=1/2"
mount_bfs "$T/a.bfs" "$T/m3" -o "batch=4,size=32,seed=5,shard=1/2"
for k in 3 0 4; do
    cat "$T/m2/epoch/1/batch_$k" >"$T/out/s.1.$k"
    cat "$T/m3/epoch/1/batch_$k" >"$T/out/sa.1.$k"
    "$PY" - "$T/out" $k <<'EOF' || fail "shard 1/2 batch $k"
import sys
sys.path.insert(0, "python")
import batchfs, numpy as np
b, a = batchfs.load_file(f"{sys.argv[1]}/s.1.{sys.argv[2]}"), batchfs.load_file(f"{sys.argv[1]}/sa.1.{sys.argv[2]}")
assert np.array_equal(b["indices"], a["indices"]) and np.array_equal(b["images"], a["images"])
assert b["caption"].shape[0] == 4
EOF
done
ok "shard 1/2, batches read out of order: the plan's samples, with their fields"
unmount_bfs "$T/m2"
unmount_bfs "$T/m3"

# group=: two mounts of the group share epoch 1's batches through epoch/1/next, each
# equal to the plain mount's batch_K (K: the xattr)
G=fields-$$-$RANDOM
mount_bfs "$T/f.bfs" "$T/m2" -o "$OPTS,group=$G"
mount_bfs "$T/f.bfs" "$T/m3" -o "$OPTS,group=$G,threads=1"
"$PY" - "$T/m2" "$T/m3" "$T/out" $NB <<'EOF' || fail "group= over a multi-field dataset"
import errno, os, sys
got = []
for m in (sys.argv[1], sys.argv[2]) * int(sys.argv[4]):
    try:
        fd = os.open(m + "/epoch/1/next", os.O_RDONLY)
    except OSError as e:
        assert e.errno == errno.ENODATA, e
        continue
    k = int(os.getxattr(fd, "user.batchfs.batch"))
    data = b""
    while True:
        c = os.read(fd, 1 << 20)
        if not c:
            break
        data += c
    os.close(fd)
    assert data == open(f"{sys.argv[3]}/m1.1.{k}", "rb").read(), k
    got.append(k)
assert sorted(got) == list(range(int(sys.argv[4]))), got
EOF
ok "group=: two mounts' readers of epoch/1/next got every multi-field batch once, as batch_K"
unmount_bfs "$T/m2"
unmount_bfs "$T/m3"

# fields= (after other options in -o) and text_len=
mount_bfs "$T/f.bfs" "$T/m2" -o "batch=8,fields=caption,jpg,size=32,seed=5,text_len=10"
names=$(pyx -c 'import bfs, sys; print(",".join(sorted(bfs.header(sys.argv[1])[0])))' "$T/m2/epoch/0/batch_0")
[ "$names" = "__metadata__,caption,caption_lengths,images,indices,labels" ] || fail "fields=caption,jpg served $names"
grep -q "^fields = jpg,caption$" "$T/m2/pipeline" || fail "$T/m2/pipeline: $(cat "$T/m2/pipeline")"
grep -q "^text_len = 10$" "$T/m2/pipeline" || fail "text_len not in the pipeline"
for k in $(seq 0 $((NB - 1))); do cat "$T/m2/epoch/0/batch_$k" >"$T/out/c.0.$k"; done
wait_idle "$T/m2"
"$PY" - "$T/out" "$T/ref.jsonl" <<'EOF' || fail "text_len=10"
import json, sys
sys.path.insert(0, "python")
import batchfs
ref = [bytes.fromhex(json.loads(l)["caption"]) for l in open(sys.argv[2])]
long = 0
for k in range(5):
    b = batchfs.load_file(f"{sys.argv[1]}/c.0.{k}")
    assert b["caption"].shape == (8, 10)
    for j, i in enumerate(b["indices"]):
        c, n = ref[int(i)], 10
        if len(c) > 10:
            long += 1
            while (c[n] & 0xc0) == 0x80: n -= 1
        want = c[:n]
        assert bytes(b["caption"][j][:b["caption_lengths"][j]]) == want, (i, want)
        want.decode("utf-8")
assert long
EOF
cut_stat=$(pyx -c 'import bfs, sys; print(bfs.stats(sys.argv[1])["texts_cut"])' "$T/m2")
long=$("$PY" -c 'import json, sys; print(sum(len(bytes.fromhex(json.loads(l)["caption"])) > 10 for l in open(sys.argv[1])))' "$T/ref.jsonl")
[ "$long" -gt 0 ] && [ "$cut_stat" -ge "$long" ] || fail "/stats texts_cut = $cut_stat, $long captions are over 10 bytes"
ok "fields=caption,jpg serves those only; text_len=10 cuts at characters ($cut_stat cut, /stats)"
unmount_bfs "$T/m2"

# token_len= cuts tokens rows (NAME_mask marks the tokens), min_box_area= drops small boxes
# and their classes; a per-box field without its boxes, boxes without field 0, refused
mount_bfs "$T/f.bfs" "$T/m2" -o "batch=8,fields=jpg,boxes,box_classes,tok,size=32,seed=5,token_len=3,min_box_area=60"
for k in $(seq 0 $((NB - 1))); do cat "$T/m2/epoch/1/batch_$k" >"$T/out/t.1.$k"; done
grep -q "^token_len = 3$" "$T/m2/pipeline" && grep -q "^min_box_area = 60$" "$T/m2/pipeline" ||
    fail "token_len/min_box_area not in the pipeline: $(cat "$T/m2/pipeline")"
wait_idle "$T/m2"
"$PY" - "$T/out" "$T/ref.jsonl" <<'EOF' || fail "token_len=3, min_box_area=60"
import json, os, subprocess, sys
import numpy as np
sys.path.insert(0, "python")
sys.path.insert(0, "tests")
import batchfs
from boxes_ref import transform
ref = [json.loads(l) for l in open(sys.argv[2])]
cut = dropped = 0
for k in range(5):
    b = batchfs.load_file(f"{sys.argv[1]}/t.1.{k}")
    assert sorted(b) == ["box_classes", "box_classes_lengths", "boxes", "boxes_counts", "images", "indices",
                         "labels", "tok", "tok_lengths", "tok_mask"], sorted(b)
    assert b["tok"].shape == (8, 3) and b["tok_mask"].shape == (8, 3) and b["tok_mask"].dtype == np.uint8
    for j, i in enumerate(b["indices"]):
        r = ref[int(i)]
        t = np.frombuffer(bytes.fromhex(r["tok"]), dtype=np.uint16)
        n = min(len(t), 3)
        cut += len(t) > 3
        assert b["tok_lengths"][j] == n and np.array_equal(b["tok"][j][:n], t[:n]) and not b["tok"][j][n:].any()
        assert np.array_equal(b["tok_mask"][j], (np.arange(3) < n).astype(np.uint8))
        g = subprocess.run([os.environ["ENGINE_TOOL"], "geometry", os.environ["FBFS"], os.environ["GOPTS"], "1",
                            str(int(i))], capture_output=True, text=True, check=True).stdout.split()
        geom = {"box": [float(v) for v in g[2:6]], "out": (int(g[6]), int(g[7])),
                "win": tuple(int(v) for v in g[8:12]), "flip": int(g[12]), "origin": (int(g[13]), int(g[14]))}
        src = np.frombuffer(bytes.fromhex(r["boxes"]), dtype=np.float32).reshape(-1, 4)
        want, keep = transform(src, geom, 60.0)
        dropped += len(src) - len(keep)
        m = b["boxes_counts"][j]
        assert m == len(keep) and np.array_equal(b["boxes"][j][:m], want), (i, b["boxes"][j][:m], want)
        cls = np.frombuffer(bytes.fromhex(r["box_classes"]), dtype=np.int64)[keep]
        assert b["box_classes_lengths"][j] == m and np.array_equal(b["box_classes"][j][:m], cls)
assert cut and dropped, (cut, dropped)
print(f"token_len=3: {cut} rows cut; min_box_area=60: {dropped} boxes dropped with their classes")
EOF
unmount_bfs "$T/m2"
ok "token_len=3 cuts tokens (tok_mask); boxes follow the crop, min_box_area=60 drops boxes and classes"

refuse() { # WANT OPTIONS: the mount is refused and stderr says WANT
    local rc=0
    timeout 20 "$BATCHFS" "$T/f.bfs" "$T/m2" -o "$2" >"$T/err" 2>&1 || rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "-o $2: exit status $rc, expected a refusal"
    grep -qF -- "$1" "$T/err" || { cat "$T/err" >&2; fail "-o $2: stderr does not say '$1'"; }
    ! is_mounted "$T/m2" || fail "-o $2: mounted"
    echo "ok - refused: -o $2: $(head -n 1 "$T/err")"
}
refuse 'no field "nope"; its fields are: jpg, caption, depth, boxes, box_classes, emb, meta, tok' "fields=jpg,nope"
refuse 'field "box_classes" holds a value per box of field "boxes": serve that field too' "fields=jpg,box_classes"
refuse 'field "boxes" follows the crop of image field "jpg": serve that field too' "fields=depth,boxes"
refuse 'token_len=4: none of the fields served is tokens' "fields=jpg,caption,token_len=4"
refuse "choose at least one image field" "fields=caption,meta"
refuse "text_len=5: none of the fields served is text" "fields=jpg,tok,text_len=5"
refuse "fields=a,9: must be" "fields=a,9"

# a caption with a checksum error: the whole sample is substituted, or its batch fails
"$GF" "$T/bad.bfs" 40 3 --corrupt 1:5 >/dev/null || fail "gen_fields --corrupt"
expect_log "^batchfs: bad sample 5 \\(sample 5 of .*bad\\.bfs\\): .*; substituted by sample [0-9]+ \\(bad_sample=substitute\\)$"
expect_log "^batchfs: bad sample 5 \\(sample 5 of .*bad\\.bfs\\): .*; failing epoch 0 batch [0-9]+ \\(bad_sample=fail\\)$"
mount_bfs "$T/bad.bfs" "$T/m2" -o "$OPTS"
for k in $(seq 0 $((NB - 1))); do cat "$T/m2/epoch/0/batch_$k" >"$T/out/bad.0.$k"; done
"$PY" - "$T/out" "$T/ref.jsonl" <<'EOF' || fail "bad_sample=substitute"
import json, sys
sys.path.insert(0, "python")
import batchfs, numpy as np
ref = [json.loads(l) for l in open(sys.argv[2])]
seen = []
for k in range(5):
    b = batchfs.load_file(f"{sys.argv[1]}/bad.0.{k}")
    ok = batchfs.load_file(f"{sys.argv[1]}/m1.0.{k}")
    for j, i in enumerate(b["indices"]):
        seen.append(int(i))
        r = ref[int(i)]  # every field from the one sample the slot names
        assert bytes(b["caption"][j][:b["caption_lengths"][j]]).hex() == r["caption"]
        assert b["emb"][j].tobytes().hex() == r["emb"] and b["labels"][j] == r["label"]
        if ok["indices"][j] != i:  # the substituted slot
            assert ok["indices"][j] == 5, (k, j)
assert 5 not in seen and len(seen) == 40
EOF
[ "$(pyx -c 'import bfs, sys; print(bfs.stats(sys.argv[1])["bad_samples"])' "$T/m2")" -ge 1 ] ||
    fail "/stats bad_samples is 0"
unmount_bfs "$T/m2"
mount_bfs "$T/bad.bfs" "$T/m2" -o "$OPTS,bad_sample=fail"
failed=0
for k in $(seq 0 $((NB - 1))); do
    if ! cat "$T/m2/epoch/0/batch_$k" >/dev/null 2>"$T/err"; then
        grep -q "Input/output error" "$T/err" || fail "batch $k: $(cat "$T/err"), expected EIO"
        failed=$((failed + 1))
    fi
done
[ "$failed" = 1 ] || fail "bad_sample=fail: $failed batches failed, expected the one with sample 5"
ok "a caption's checksum error: the whole sample substituted (every field), or its batch fails (EIO)"
unmount_bfs "$T/m2"

# remote workers: a worker computes the batches (fields= and text_len= too); the bytes
# travel as they are
if command -v redis-server >/dev/null; then
    PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$T" >"$T/redis.log" 2>&1 &
    REDIS_PID=$!
    BG_PIDS+=("$REDIS_PID")
    for i in $(seq 100); do
        python3 -c "import socket; socket.create_connection(('127.0.0.1',$PORT),1)" 2>/dev/null && break
        sleep 0.05
    done
    ROPTS="$OPTS,fields=jpg,caption,boxes,text_len=12,remote=redis://127.0.0.1:$PORT"
    "$BATCHFS" worker "$T/f.bfs" -o "$ROPTS,threads=1" --name w1 >"$T/w1.log" 2>&1 </dev/null &
    W_PID=$!
    BG_PIDS+=("$W_PID")
    for i in $(seq 100); do grep -q "serving pipeline" "$T/w1.log" && break; sleep 0.1; done
    grep -q "serving pipeline" "$T/w1.log" || fail "worker did not start: $(cat "$T/w1.log")"
    expect_log 'remote: [0-9]+ worker\(s\) alive'
    expect_log 'remote: batches from Redis are checked, not authenticated \(no remote_key=\)'
    mount_bfs "$T/f.bfs" "$T/m2" -o "$ROPTS,remote_wait_ms=30000"
    mount_bfs "$T/f.bfs" "$T/m3" -o "$OPTS,fields=jpg,caption,boxes,text_len=12"
    for k in $(seq 0 $((NB - 1))); do
        cmp "$T/m2/epoch/0/batch_$k" "$T/m3/epoch/0/batch_$k" || fail "remote batch $k differs from a local one"
    done
    computed=$(pyx -c 'import bfs, sys; print(bfs.stats(sys.argv[1])["batches"]["computed"])' "$T/m2")
    [ "$computed" = 0 ] || fail "the remote mount computed $computed batches itself"
    ok "a remote worker served the multi-field batches: identical bytes, none computed by the mount"
    unmount_bfs "$T/m2"
    unmount_bfs "$T/m3"
    kill -TERM "$W_PID"
    wait "$W_PID" || fail "the worker exited with status $? on SIGTERM"
    kill -TERM "$REDIS_PID"
    wait "$REDIS_PID" || true
else
    echo "note: no redis-server here: remote workers not checked (make deps installs it)"
fi
unmount_bfs "$T/ta"
unmount_bfs "$T/tb"
unmount_bfs "$T/m1"
