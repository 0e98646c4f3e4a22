#!/usr/bin/env bash
# tests/mount/prefetch.sh — prefetch follows each reader (told apart by pid) and its
# stride, as /stats shows, from the reader's second batch on. First a data-parallel rank
# (rank 1 of 3: batches 1, 4, 7 of epoch 1) on a fresh mount: no batch is computed that it
# does not read (its first batch prefetched nothing: its stride was not known yet). Then
# one Python process reads:
#   epoch 0: batches 0, 1, 2   -> /stats: batch 0 prefetched nothing (walk "unknown"),
#            batch 1 did (walk "stride"), batch 2 was served from prefetched work; a
#            stream for that pid (epoch 0, batch 2, stride 1);
#   epoch 1: batches 0, 2, 4   -> the stream records stride 2; batch 6, prefetched along
#            the stride, is a hit; batch 5, off the stride, is a miss;
# a second process gets a stream of its own; with prefetch=0 nothing is prefetched.
# No timing assertions: after each read the test polls /stats until no batch is in flight.
# 128 images, batch=16 (8 batches an epoch), size=32, prefetch=2. A few seconds.
. "$(dirname "$0")/lib.sh"
require_fuse

"$GEN" "$T/images" 4 32 48 160 6
M=$T/mnt
mkdir "$M"

cat >"$T/prefetch.py" <<'EOF'
import os, sys, time, bfs
m, mode = sys.argv[1], sys.argv[2]
me = os.getpid()

def die(msg):
    sys.exit("prefetch (%s): %s" % (mode, msg))

def idle():
    for _ in range(400):
        st = bfs.stats(m)
        if st["batches"]["in_flight"] == 0:
            return st
        time.sleep(0.025)
    die("batches still in flight after 10 s")

def read(e, k):
    with open("%s/epoch/%d/batch_%d" % (m, e, k), "rb") as f:
        n = len(f.read())
    if n != os.stat("%s/epoch/%d/batch_%d" % (m, e, k)).st_size:
        die("short read of epoch %d batch %d" % (e, k))
    return idle()

def stream(st):
    s = [s for s in st["prefetch"]["streams"] if s["pid"] == me]
    if len(s) != 1:
        die("/stats streams %s: expected one for pid %d" % (st["prefetch"]["streams"], me))
    return s[0]

def served(st):
    return st["cache"]["hits"] + st["cache"]["joins"]

s0 = idle()
if mode == "off":
    for k in range(3):
        st = read(0, k)
    if st["batches"]["prefetched"] != 0 or st["prefetch"]["depth"] != 0:
        die("prefetch=0 but prefetched = %d, depth = %d" % (st["batches"]["prefetched"], st["prefetch"]["depth"]))
    if st["cache"]["misses"] - s0["cache"]["misses"] != 3:
        die("prefetch=0: 3 reads gave %d misses" % (st["cache"]["misses"] - s0["cache"]["misses"]))
    print("ok - prefetch=0: 3 sequential reads, 3 misses, nothing prefetched")
    sys.exit(0)

if mode == "rank":            # rank 1 of 3 of a data-parallel job: 1, 4, 7 of epoch 1
    for k in (1, 4, 7):
        st = read(1, k)
        if k == 1 and st["batches"]["prefetched"] != s0["batches"]["prefetched"]:
            die("a reader's first batch prefetched %d batches: %s"
                % (st["batches"]["prefetched"] - s0["batches"]["prefetched"], st["batches"]))
        if k == 1 and stream(st)["walk"] != "unknown":
            die("after its first batch the stream is %s, expected walk 'unknown'" % stream(st))
    computed = st["batches"]["computed"] - s0["batches"]["computed"]
    if computed != 3 or stream(st)["stride"] != 3:
        die("a rank reading 1, 4, 7 made %d batches computed (expected 3, none it does not "
            "read); stream %s" % (computed, stream(st)))
    print("ok - a rank reading 1, 4, 7: 3 batches computed, %d of them prefetched, stream %s"
          % (st["batches"]["prefetched"] - s0["batches"]["prefetched"], stream(st)))
    sys.exit(0)

if mode == "other":           # a second reader: its own stream, the first one's kept
    st = read(0, 5)
    pids = [s["pid"] for s in st["prefetch"]["streams"]]
    if me not in pids or len(pids) < 2:
        die("streams %s: expected this reader (%d) and the earlier one" % (pids, me))
    print("ok - a second reader (pid %d) gets its own stream: streams for pids %s" % (me, pids))
    sys.exit(0)

if s0["prefetch"]["depth"] != 2:
    die("/stats prefetch depth %s, expected 2 (prefetch=2)" % s0["prefetch"]["depth"])
# epoch 0: 0, 1, 2
st = read(0, 0)
if st["batches"]["prefetched"] != s0["batches"]["prefetched"] or stream(st)["walk"] != "unknown":
    die("reading batch 0 (a reader's first) prefetched: %s, stream %s" % (st["batches"], stream(st)))
if st["cache"]["misses"] - s0["cache"]["misses"] != 1:
    die("batch 0 should be one miss: %s" % st["cache"])
st = read(0, 1)
if st["batches"]["prefetched"] - s0["batches"]["prefetched"] != 2 or stream(st)["walk"] != "stride":
    die("reading batch 1 (the second) should prefetch 2 and 3: %s, stream %s"
        % (st["batches"], stream(st)))
a = st
st = read(0, 2)
s = stream(st)
if (s["epoch"], s["batch"], s["stride"]) != (0, 2, 1):
    die("after 0, 1, 2 the stream is %s, expected epoch 0 batch 2 stride 1" % s)
if served(st) - served(a) < 1:
    die("batch 2 was not served from prefetched work: cache %s -> %s" % (a["cache"], st["cache"]))
if st["cache"]["misses"] != a["cache"]["misses"]:
    die("batch 2 missed although prefetched: %s -> %s" % (a["cache"], st["cache"]))
print("ok - epoch 0 batches 0, 1, 2: prefetched %d (none for the first), batch 2 served from "
      "it, stream %s" % (st["batches"]["prefetched"], s))

# epoch 1: 0, 2, 4, then 6 (on the stride) and 5 (off it)
read(1, 0)
read(1, 2)
st = read(1, 4)
s = stream(st)
if (s["epoch"], s["batch"], s["stride"]) != (1, 4, 2):
    die("after 0, 2, 4 the stream is %s, expected epoch 1 batch 4 stride 2" % s)
b = st
st = read(1, 6)
if served(st) - served(b) < 1 or st["cache"]["misses"] != b["cache"]["misses"]:
    die("batch 6 (stride 2 after 4) was not prefetched: cache %s -> %s" % (b["cache"], st["cache"]))
b = st
st = read(1, 5)
if st["cache"]["misses"] - b["cache"]["misses"] != 1:
    die("batch 5 (off the stride) should be a miss: cache %s -> %s" % (b["cache"], st["cache"]))
if st["reads"]["errors"] or st["batches"]["failed"]:
    die("errors: %s %s" % (st["reads"], st["batches"]))
print("ok - epoch 1 batches 0, 2, 4: stream stride 2; batch 6 (on the stride) a hit, batch 5 a miss")
EOF

mount_bfs "$T/images" "$M" -o batch=16,size=32,epochs=2,prefetch=2,cache_mb=64
pyx "$T/prefetch.py" "$M" rank || fail "a data-parallel rank"
pyx "$T/prefetch.py" "$M" on || fail "prefetch=2"
pyx "$T/prefetch.py" "$M" other || fail "a second reader"
unmount_bfs "$M"

mount_bfs "$T/images" "$M" -o batch=16,size=32,epochs=2,prefetch=0,cache_mb=64
pyx "$T/prefetch.py" "$M" off || fail "prefetch=0"
unmount_bfs "$M"
