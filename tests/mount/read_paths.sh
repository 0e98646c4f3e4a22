#!/usr/bin/env bash
# tests/mount/read_paths.sh — every way of reading a batch gives the same bytes, equal to
# the engine's in-process bytes (engine_tool): cat, dd bs=1M, dd bs=4096 at random
# offsets of a cold file, python mmap, two processes at once. Epochs differ; batch K read
# cold equals batch K read after 0..K-1; a remount (and other performance knobs) gives
# identical bytes; an ImageFolder and its .bfs serve identical tensors.
# The read paths run twice: with FUSE passthrough where the machine allows it (root,
# Linux >= 6.9: reads go to the batch's memfd) and with passthrough=off (every read is
# copied by the daemon), so both ways of serving are checked whatever the default; then
# with huge_pages=1 (batch files on a private tmpfs with 2 MiB pages, under passthrough),
# and huge_pages=auto, the default, which puts batch files there once the daemon
# recycles memory.
# 64 images, batch=16 (4 batches an epoch), size=48. About 15 s.
. "$(dirname "$0")/lib.sh"
require_fuse

"$GEN" "$T/images" 4 16 64 240 3
"$MKBATCHFS" --quiet "$T/images" "$T/data.bfs"
OPTS=batch=16,size=48
M=$T/mnt
mkdir "$M" "$T/ref" "$T/out"
for e in 0 1; do
    for k in 0 1 2 3; do ref_batch "$T/data.bfs" "$OPTS" $e $k "$T/ref/e${e}_b$k"; done
done
size=$(stat -c %s "$T/ref/e0_b0")

# ---- each read path on a batch nobody has read yet (so it reaches the daemon) --------
read_paths() { # EXTRA_OPTS MODE_NAME
mount_bfs "$T/data.bfs" "$M" -o "$OPTS,epochs=4$1"
active=$(pyx -c 'import bfs, sys; print(int(bfs.stats(sys.argv[1])["passthrough"]["active"]))' "$M")
echo "# $2: passthrough active: $active"
if [ "$1" = ",passthrough=off" ] && [ "$active" = 1 ]; then fail "passthrough=off: /stats says passthrough is active"; fi
huge=$(pyx -c 'import bfs, sys; print(int(bfs.stats(sys.argv[1])["passthrough"]["huge_pages"]))' "$M")
case "$1,$active,$huge" in
,huge_pages=1,1,1) echo "# batch files on the private huge-page tmpfs" ;;
,huge_pages=1,1,0) fail "huge_pages=1 under passthrough: /stats says the batch files are not on huge pages" ;;
*,1) fail "$2: /stats says huge_pages without huge_pages=1" ;;
esac
cat "$M/epoch/0/batch_0" >"$T/out/cat"
cmp "$T/out/cat" "$T/ref/e0_b0" || fail "cat of epoch 0 batch 0 differs from engine_tool's bytes"
dd if="$M/epoch/0/batch_1" of="$T/out/dd1M" bs=1M status=none
cmp "$T/out/dd1M" "$T/ref/e0_b1" || fail "dd bs=1M of batch 1 differs"

# dd bs=4096 at random block offsets of a cold file (batch 2), the last block included
blocks=$(((size + 4095) / 4096))
for skip in $(shuf -i 0-$((blocks - 1)) -n 8 --random-source=<(yes)) $((blocks - 1)) 0; do
    dd if="$M/epoch/0/batch_2" of="$T/out/blk" bs=4096 skip="$skip" count=1 status=none
    dd if="$T/ref/e0_b2" of="$T/out/blk.ref" bs=4096 skip="$skip" count=1 status=none
    cmp "$T/out/blk" "$T/out/blk.ref" || fail "dd bs=4096 skip=$skip of batch 2 differs"
done
# unaligned pread()s too, then the whole file
pyx - "$M/epoch/0/batch_2" "$T/ref/e0_b2" <<'EOF' || fail "pread at odd offsets of batch 2"
import os, random, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
ref = open(sys.argv[2], "rb").read()
rnd = random.Random(7)
for _ in range(50):
    off, n = rnd.randrange(0, len(ref) + 100), rnd.choice([1, 7, 4095, 4097, 65536, 1 << 20])
    got = os.pread(fd, n, off)
    if got != ref[off:off + n]:
        sys.exit("pread(%d, %d): %d bytes differ from the reference" % (n, off, len(got)))
EOF
cmp "$M/epoch/0/batch_2" "$T/ref/e0_b2" || fail "batch 2 read whole after block reads differs"
ok "cat, dd bs=1M, dd bs=4096 at random offsets, pread at odd offsets: the engine's bytes"

pyx - "$M/epoch/0/batch_3" "$T/ref/e0_b3" <<'EOF' || fail "python mmap of batch 3"
import mmap, sys, bfs
with open(sys.argv[1], "rb") as f:
    mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    ref = open(sys.argv[2], "rb").read()
    if len(mm) != len(ref):
        sys.exit("mmap length %d, expected %d" % (len(mm), len(ref)))
    # touch the pages back to front first (page faults out of order), then compare all
    for off in range(len(mm) - 1, -1, -4096):
        mm[off]
    if mm[:] != ref:
        sys.exit("mmap bytes differ from the reference")
    hdr, base = bfs.header(mm)  # batch=16: labels and indices fill the 256 bytes before 4096
    offs = [base + hdr[k]["data_offsets"][0] for k in ("labels", "indices", "images")]
    if offs != [4096 - 256, 4096 - 128, 4096]:
        sys.exit("labels, indices, images at %s, not 3840, 3968, 4096" % offs)
EOF
ok "python mmap of batch 3 (pages faulted back to front): the engine's bytes, images at 4096"

# all paths on one batch agree with each other (page cache now)
cat "$M/epoch/0/batch_3" >"$T/out/x.cat"
dd if="$M/epoch/0/batch_3" of="$T/out/x.dd" bs=1M status=none
pyx -c 'import mmap,sys; f=open(sys.argv[1],"rb"); open(sys.argv[2],"wb").write(mmap.mmap(f.fileno(),0,access=mmap.ACCESS_READ)[:])' \
    "$M/epoch/0/batch_3" "$T/out/x.mmap"
for f in x.cat x.dd x.mmap; do cmp "$T/out/$f" "$T/ref/e0_b3" || fail "$f of batch 3 differs"; done

# two processes at once on a cold batch (single-flight in the daemon), several times
for k in 0 1 2 3; do
    cat "$M/epoch/1/batch_$k" >"$T/out/p1_$k" &
    p1=$!
    python3 -c 'import sys; open(sys.argv[2],"wb").write(open(sys.argv[1],"rb").read())' \
        "$M/epoch/1/batch_$k" "$T/out/p2_$k" &
    p2=$!
    wait $p1 || fail "concurrent cat of epoch 1 batch $k failed"
    wait $p2 || fail "concurrent python read of epoch 1 batch $k failed"
    cmp "$T/out/p1_$k" "$T/ref/e1_b$k" || fail "concurrent reader 1 of epoch 1 batch $k differs"
    cmp "$T/out/p2_$k" "$T/ref/e1_b$k" || fail "concurrent reader 2 of epoch 1 batch $k differs"
done
ok "two processes reading one cold batch at once (4 batches): identical, the engine's bytes"

# different epochs differ (images and order), and differ from each other within an epoch
pyx - "$T/ref" <<'EOF' || fail "epochs and batches should differ"
import sys, bfs
r = sys.argv[1]
t = {(e, k): bfs.tensors("%s/e%d_b%d" % (r, e, k))[0] for e in (0, 1) for k in range(4)}
for k in range(4):
    if t[(0, k)]["images"] == t[(1, k)]["images"] or t[(0, k)]["indices"] == t[(1, k)]["indices"]:
        sys.exit("epoch 0 and epoch 1 batch %d have the same images or indices" % k)
for e in (0, 1):
    idx = sum((bfs.i64(t[(e, k)]["indices"][2]) for k in range(4)), [])
    if sorted(idx) != list(range(64)):
        sys.exit("epoch %d: indices are not a permutation of 0..63: %s" % (e, idx))
EOF
cmp -s "$M/epoch/0/batch_0" "$M/epoch/1/batch_0" && fail "epoch 0 and 1 batch 0 are identical"
ok "epochs differ; each epoch's indices are a permutation of the dataset"
if [ "$active" = 1 ]; then
    opens=$(pyx -c 'import bfs, sys; print(bfs.stats(sys.argv[1])["passthrough"]["opens"])' "$M")
    [ "$opens" -ge 8 ] || fail "$2: passthrough active but only $opens passthrough opens"
fi
unmount_bfs "$M"
ok "$2: every read path gives the engine's bytes"
}
read_paths "" "default (passthrough=auto)"
read_paths ",passthrough=off" "passthrough=off"
# huge_pages=1 has an effect only under passthrough; otherwise the daemon says so
expect_log '^batchfs: note: huge_pages=1 has no effect'
read_paths ",huge_pages=1" "huge_pages=1"

# ---- huge_pages=auto (the default): huge pages once the daemon recycles memory (its first
# batch evicted as passed: cache_mb=8 makes that soon) ----------------------------------------
BIG=batch=16,size=224 # 16 x 224 x 224 x 3 = 2.4 MB: huge pages, not only large folios
for e in 0 1; do for k in 0 3; do ref_batch "$T/data.bfs" "$BIG" $e $k "$T/ref/big_e${e}_b$k"; done; done
hstate() { pyx -c 'import bfs, sys; s = bfs.stats(sys.argv[1]); print(int(s["passthrough"]["active"]), int(s["passthrough"]["huge_pages"]), int(s["cache"]["evicted_passed"] > 0))' "$M"; }
for hp in "" ",huge_pages=0"; do
    mount_bfs "$T/data.bfs" "$M" -o "$BIG,cache_mb=8,prefetch=0$hp"
    cmp -s "$M/epoch/0/batch_0" "$T/ref/big_e0_b0" || fail "huge_pages${hp:-=auto}: a 2.4 MB batch differs from the engine's"
    before=$(hstate)
    for e in 0 1; do for k in 0 1 2 3; do cat "$M/epoch/$e/batch_$k" >/dev/null; done; done
    after=$(hstate)
    cmp -s "$M/epoch/1/batch_3" "$T/ref/big_e1_b3" || fail "huge_pages${hp:-=auto}: a 2.4 MB batch differs from the engine's after the switch"
    unmount_bfs "$M"
    case "$hp|$before|$after" in
    "|1 0 0|1 1 1") ok "huge_pages=auto: 2.4 MB batches on 4 KiB pages until memory is recycled, then on 2 MiB pages; the engine's bytes" ;;
    "|0 0 "*"|0 0 "*) ok "huge_pages=auto: no passthrough here, so no huge pages (the engine's bytes)" ;;
    ",huge_pages=0|"?" 0 0|"?" 0 1") ok "huge_pages=0: 2.4 MB batches stay on 4 KiB pages" ;;
    *) fail "huge_pages${hp:-=auto} with 2.4 MB batches: /stats passthrough active, huge_pages, evicted: $before before, $after after" ;;
    esac
done

# ---- determinism: batch 3 cold on a fresh mount == after 0..2; remount; other knobs --
mount_bfs "$T/data.bfs" "$M" -o "$OPTS,epochs=4"
cat "$M/epoch/2/batch_3" >"$T/out/cold3"
unmount_bfs "$M"
mount_bfs "$T/data.bfs" "$M" -o "$OPTS,epochs=4"
for k in 0 1 2 3; do cat "$M/epoch/2/batch_$k" >"$T/out/seq$k"; done
unmount_bfs "$M"
cmp "$T/out/cold3" "$T/out/seq3" || fail "epoch 2 batch 3: read cold differs from read after 0..2"
ref_batch "$T/data.bfs" "$OPTS" 2 3 "$T/ref/e2_b3"
cmp "$T/out/cold3" "$T/ref/e2_b3" || fail "epoch 2 batch 3 differs from engine_tool's"
ok "batch 3 read cold on a fresh mount == batch 3 read after 0..2 on another mount == engine_tool"

mount_bfs "$T/data.bfs" "$M" -o "$OPTS,epochs=100,threads=1,prefetch=0,cache_mb=0,fuse_threads=2"
for k in 3 0 2 1; do
    cmp "$M/epoch/2/batch_$k" "$T/out/seq$k" || fail "epoch 2 batch $k differs with threads=1,prefetch=0,cache_mb=0"
done
cmp "$M/epoch/0/batch_1" "$T/ref/e0_b1" || fail "epoch 0 batch 1 differs on a remount with other knobs"
unmount_bfs "$M"
ok "remount with other knobs (threads=1, prefetch=0, cache_mb=0, epochs=100), reverse order: identical bytes"

# ---- an ImageFolder and its .bfs serve identical tensors -------------------------------
# (files not named as images and hidden directories are not samples of either: the mount
# says so, as mkbatchfs does)
M2=$T/mnt2
mkdir "$M2" "$T/images/.ipynb_checkpoints"
echo "not an image" >"$T/images/class_001/notes.txt"
expect_log '^batchfs: note: 1 file below the class directories is not named .jpg, .jpeg, .png or .webp'
expect_log '^batchfs: note: 1 hidden directory beside the class directories'
mount_bfs "$T/data.bfs" "$M" -o "$OPTS,epochs=3"
mount_bfs "$T/images" "$M2" -o "$OPTS,epochs=3"
for e in 0 2; do
    for k in 0 1 2 3; do
        cat "$M/epoch/$e/batch_$k" >"$T/out/bfs_$e$k" &
        cat "$M2/epoch/$e/batch_$k" >"$T/out/dir_$e$k"
        wait $!
    done
done
pyx - "$T/out" <<'EOF' || fail ".bfs vs ImageFolder"
import sys, bfs
o = sys.argv[1]
for e in (0, 2):
    for k in range(4):
        a, ma = bfs.tensors("%s/bfs_%d%d" % (o, e, k))
        b, mb = bfs.tensors("%s/dir_%d%d" % (o, e, k))
        for name in ("images", "labels", "indices"):
            if a[name] != b[name]:
                sys.exit("epoch %d batch %d: %s differ between the .bfs and the ImageFolder" % (e, k, name))
        if ma["fingerprint"] == mb["fingerprint"]:
            sys.exit("the .bfs and the ImageFolder have the same fingerprint (dataset identity ignored?)")
EOF
unmount_bfs "$M2"
unmount_bfs "$M"
grep -q "note: 1 file below the class directories" "${LOGS[${#LOGS[@]} - 1]}" ||
    fail "the ImageFolder mount did not note the file that is not a sample"
ok "the ImageFolder (with a stray file and a hidden directory) and its .bfs serve identical images, labels and indices (8 batches); fingerprints differ"
