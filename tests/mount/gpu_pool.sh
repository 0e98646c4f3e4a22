#!/usr/bin/env bash
# tests/mount/gpu_pool.sh — gpu_pool_mb= (docs/gpu.md, "copy=pool"): the daemon's side.
# Batches are computed into windows of one pool file, /.pool, served under FUSE
# passthrough, so that a reader's mmap of it maps the daemon's own pages. For a batch file
# the caller holds open, user.batchfs.window names its window ("OFFSET SIZE"): over three
# epochs through a pool of a few batches (windows recycled many times) every window of
# the mapping equals the batch file's bytes. The lease: a batch file held open keeps its
# window while the 44 other batches go through the pool. Refusals: a pool too small, with
# cache_mb=; no window for a batch the caller has not open; no /.pool without the option
# (nor without passthrough: a note in the log). huge_pages=1 on a pool mount: a note
# naming gpu_pool_mb= (batches stay in the pool, not in batch files). With group=, an open
# epoch/N/next names the window of the batch it served; listxattr lists the window.
. "$(dirname "$0")/lib.sh"
require_fuse
"$GEN" "$T/images" 4 60 40 90 3
"$MKBATCHFS" --quiet "$T/images" "$T/d.bfs"
mkdir "$T/mnt"
OPTS="batch=16,size=64,epochs=3,threads=2"

# refusals, before anything mounts
for bad in "gpu_pool_mb=1,batch=200,size=64:is too small" "gpu_pool_mb=8,cache_mb=16,batch=8:not both"; do
    o=${bad%%:*} want=${bad#*:}
    if out=$("$BATCHFS" "$T/d.bfs" "$T/mnt" -f -o "$o" 2>&1); then fail "-o $o mounted"; fi
    grep -q "$want" <<<"$out" || fail "-o $o: no '$want' in: $out"
done
ok "a pool too small for its batches, and cache_mb= with gpu_pool_mb=, are refused"

mount_bfs "$T/d.bfs" "$T/mnt" -o "$OPTS"
[ ! -e "$T/mnt/.pool" ] || fail "/.pool without gpu_pool_mb="
unmount_bfs "$T/mnt"

expect_log '^batchfs: note: huge_pages=1 has no effect: with gpu_pool_mb= batches are kept in the pool file'
mount_bfs "$T/d.bfs" "$T/mnt" -o "$OPTS,gpu_pool_mb=2,huge_pages=1"
# huge_pages=1 cannot act on a pool mount (no batch files of their own): the note says so
grep -q "huge_pages=1 has no effect: with gpu_pool_mb= batches are kept in the pool file" "$DAEMON_LOG" ||
    fail "no note naming gpu_pool_mb= for huge_pages=1 on a pool mount: $(grep huge_pages "$DAEMON_LOG")"
ok "huge_pages=1 on a pool mount: the note names gpu_pool_mb="
if [ "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["passthrough"]["active"])' "$T/mnt/stats")" != True ]; then
    grep -q "gpu_pool_mb= has no /.pool to offer" "$DAEMON_LOG" || fail "no note on the pool without passthrough"
    [ ! -e "$T/mnt/.pool" ] || fail "/.pool without passthrough"
    ok "no FUSE passthrough here: no /.pool, and the log says why (the rest needs passthrough)"
    exit 0
fi
# batches are copied on a pool mount: reads as large as in copying mode (1 MiB; 128 KiB
# under passthrough cost a token mount 1.5 s of daemon CPU per GB against 0.8)
[ "$(stat -c %o "$T/mnt/epoch/0/batch_0")" = 1048576 ] ||
    fail "a pool mount's batch files advise $(stat -c %o "$T/mnt/epoch/0/batch_0")-byte reads, not 1 MiB"
python3 - "$T/mnt" <<'PYEOF' || fail "windows of /.pool"
import json, mmap, os, sys
m = sys.argv[1]
size = int(os.getxattr(m, "user.batchfs.pool"))
assert os.stat(m + "/.pool").st_size == size == 2 << 20, size
assert "user.batchfs.pool" in os.listxattr(m)
pf = os.open(m + "/.pool", os.O_RDONLY)
pool = mmap.mmap(pf, size, prot=mmap.PROT_READ)
nb = len(os.listdir(m + "/epoch/0"))

def whole(fd):
    out = b""
    while chunk := os.read(fd, 1 << 20):
        out += chunk
    return out

def window(fd):
    off, n = map(int, os.getxattr(fd, "user.batchfs.window").split())
    return off, n

# no window for a batch the caller has not open
try:
    os.getxattr(m + "/epoch/0/batch_1", "user.batchfs.window")
    raise SystemExit("a window for a batch not open")
except OSError as e:
    assert e.errno == 61, e  # ENODATA

# the lease: batch 0 of epoch 0 held open while everything else goes through the pool
held = os.open(m + "/epoch/0/batch_0", os.O_RDONLY)
hoff, hn = window(held)
want = whole(held)
assert hn == len(want) and pool[hoff:hoff + hn] == want
offsets = set()
checked = 0
for e in range(3):
    for k in range(nb):
        if (e, k) == (0, 0):
            continue
        fd = os.open(f"{m}/epoch/{e}/batch_{k}", os.O_RDONLY)
        off, n = window(fd)
        data = whole(fd)
        assert n == len(data), (e, k, n, len(data))
        assert pool[off:off + n] == data, f"epoch {e} batch {k}: window {off} differs"
        assert not (off < hoff + hn and hoff < off + n), f"window {off} overlaps the held one"
        offsets.add(off)
        os.close(fd)
        checked += 1
assert pool[hoff:hoff + hn] == want, "the held batch's window changed"
os.close(held)
stats = json.load(open(m + "/stats"))
st = stats["pool"]
assert st["served"] and st["bytes"] == size and st["windows"] >= checked + 1, st
# backing_files counts batches: the open /.pool is not one (and a pool's batches are copied)
assert stats["passthrough"]["backing_files"] == 0, stats["passthrough"]
assert st["misses"] == 0, st
batch = len(want)
assert checked * batch > 4 * size, (checked, batch, size)  # the pool went round
print(f"{checked} batches, {len(offsets)} distinct windows of a {size >> 20} MiB pool "
      f"({batch} bytes a batch), every one equal; the held window unchanged; /stats {st}")
PYEOF
ok "every window of /.pool equals its batch file; an open file keeps its window"
unmount_bfs "$T/mnt"

# group=: an open epoch/N/next names the window of the batch it served, and listxattr of
# batch and next files lists user.batchfs.window on a pool mount
mount_bfs "$T/d.bfs" "$T/mnt" -o "$OPTS,gpu_pool_mb=2,group=pool-$$-$RANDOM"
python3 - "$T/mnt" <<'PYEOF' || fail "user.batchfs.window of epoch/N/next"
import mmap, os, sys
m = sys.argv[1]
size = int(os.getxattr(m, "user.batchfs.pool"))
for f in ("epoch/0/batch_0", "epoch/0/next"):
    assert "user.batchfs.window" in os.listxattr(f"{m}/{f}"), (f, os.listxattr(f"{m}/{f}"))
pool = mmap.mmap(os.open(m + "/.pool", os.O_RDONLY), size, prot=mmap.PROT_READ)
for _ in range(3):
    fd = os.open(m + "/epoch/1/next", os.O_RDONLY)
    k = int(os.getxattr(fd, "user.batchfs.batch"))
    off, n = map(int, os.getxattr(fd, "user.batchfs.window").split())
    data = b""
    while chunk := os.read(fd, 1 << 20):
        data += chunk
    assert n == len(data) and pool[off:off + n] == data, (k, off, n, len(data))
    with open(f"{m}/epoch/1/batch_{k}", "rb") as f:
        assert f.read() == data, k
    os.close(fd)
print("  next: 3 batches, each window equal to the batch it served")
PYEOF
ok "group=: an open next file names its batch's window; listxattr lists user.batchfs.window"
unmount_bfs "$T/mnt"
