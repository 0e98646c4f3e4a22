#!/usr/bin/env bash
# tests/mount/listing.sh — the tree a user sees: the names listed at every level, sizes
# from stat equal to the bytes read, ENOENT for every name that is not there, EROFS for
# every write, the xattrs, /pipeline and /stats.
# 64 images, batch=8 (8 batches an epoch), size=32, epochs=3. A few seconds.
. "$(dirname "$0")/lib.sh"
require_fuse

"$GEN" "$T/images" 4 16 64 200 1
"$MKBATCHFS" --quiet "$T/images" "$T/data.bfs"
M=$T/mnt
mkdir "$M"
mount_bfs "$T/data.bfs" "$M" -o batch=8,size=32,epochs=3

# ---- names ----------------------------------------------------------------------------
[ "$(ls "$M" | tr '\n' ' ')" = "epoch pipeline stats " ] || fail "ls MNT: $(ls "$M" | tr '\n' ' ')"
[ "$(ls -a "$M" | tr '\n' ' ')" = ". .. epoch pipeline stats " ] || fail "ls -a MNT: $(ls -a "$M")"
[ "$(ls "$M/epoch" | tr '\n' ' ')" = "0 1 2 " ] || fail "ls MNT/epoch (epochs=3): $(ls "$M/epoch" | tr '\n' ' ')"
want=$(for k in $(seq 0 7); do echo "batch_$k"; done)
for e in 0 1 2; do
    [ "$(ls -U "$M/epoch/$e")" = "$want" ] || fail "ls -U MNT/epoch/$e: $(ls -U "$M/epoch/$e" | tr '\n' ' ')"
done
[ -d "$M/epoch/2" ] && [ -f "$M/epoch/2/batch_7" ] && [ -f "$M/pipeline" ] && [ -f "$M/stats" ] ||
    fail "types of entries (epoch dirs are directories, batches and /pipeline, /stats files)"
[ "$(stat -c %a "$M/epoch/0/batch_0")" = 444 ] && [ "$(stat -c %a "$M/epoch/0")" = 555 ] ||
    fail "modes: batch $(stat -c %a "$M/epoch/0/batch_0"), epoch dir $(stat -c %a "$M/epoch/0")"
ok "ls: root, epoch/ (0..2), epoch/N/ (batch_0..batch_7), types and modes"

# ---- sizes: stat == bytes read, for every batch of epoch 1 ------------------------------
# header, labels 8*8 and indices 8*8 in the first 4096 bytes, then images 8*32*32*3
want_size=$((4096 + 8 * 32 * 32 * 3))
for k in $(seq 0 7); do
    f=$M/epoch/1/batch_$k
    s=$(stat -c %s "$f")
    r=$(cat "$f" | wc -c)
    [ "$s" -eq "$r" ] || fail "batch_$k: stat says $s bytes, read gives $r"
    [ "$s" -eq "$want_size" ] || fail "batch_$k: $s bytes, expected $want_size"
done
ok "stat size == bytes read == $want_size for every batch of epoch 1"

# ---- names that are not there: ENOENT, every time ------------------------------------
pyx - "$M" <<'EOF' || fail "ENOENT checks"
import errno, os, sys
m = sys.argv[1]
absent = ["epoch/0/batch_8", "epoch/0/batch_01", "epoch/0/batch_00", "epoch/0/batch_",
          "epoch/0/batch_-1", "epoch/0/batch_+1", "epoch/0/batch_1x", "epoch/0/batch_ 1",
          "epoch/0/Batch_1", "epoch/0/batch_18446744073709551616",
          "epoch/0/batch_99999999999999999999", "epoch/3", "epoch/03", "epoch/00",
          "epoch/-1", "epoch/1000000", "epoch/x", "epoch/3/batch_0", "nope", "Pipeline",
          "stats2", "epoch/0/nope", "epoch/0/.hidden", "epochs"]
bad = []
for _ in range(2):          # the second pass meets the kernel's cached negative entries
    for name in absent:
        for call in (os.stat, os.lstat, lambda p: open(p, "rb")):
            try:
                call(os.path.join(m, name))
                bad.append("%s: exists" % name)
            except OSError as e:
                if e.errno != errno.ENOENT:
                    bad.append("%s: %s, expected ENOENT" % (name, errno.errorcode[e.errno]))
for name in ["pipeline/x", "stats/x", "epoch/0/batch_0/x"]:
    try:
        os.stat(os.path.join(m, name))
        bad.append("%s: exists" % name)
    except OSError as e:
        if e.errno != errno.ENOTDIR:
            bad.append("%s: %s, expected ENOTDIR" % (name, errno.errorcode[e.errno]))
if bad:
    print("\n".join(bad), file=sys.stderr)
    sys.exit(1)
EOF
ok "ENOENT for batch_8, batch_01, epoch/3 and 21 other absent names (twice); ENOTDIR below files"

# ---- read-only: EROFS for every way of writing --------------------------------------
b=$M/epoch/0/batch_0
sum0=$(md5sum <"$b")
for what in "echo x > $b" "echo x >> $b" "echo x > $M/new" "touch $b" "touch $M/new" \
    "mkdir $M/d" "mkdir $M/epoch/5" "rm -f $b" "rmdir $M/epoch/0" "mv $b $M/epoch/0/batch_9" \
    "ln -s x $M/l" "truncate -s 0 $b" "chmod 777 $b"; do
    if out=$(bash -c "$what" 2>&1); then fail "'$what' succeeded on a read-only mount"; fi
    case $out in *"Read-only file system"*) ;; *) fail "'$what': '$out', expected 'Read-only file system'" ;; esac
done
pyx - "$M" <<'EOF' || fail "EROFS checks"
import errno, os, sys
m = sys.argv[1]
b = m + "/epoch/0/batch_0"
calls = {
    "open w": lambda: open(b, "wb"), "open a": lambda: open(b, "ab"),
    "open r+": lambda: open(b, "r+b"), "O_RDONLY|O_TRUNC": lambda: os.open(b, os.O_RDONLY | os.O_TRUNC),
    "create": lambda: open(m + "/epoch/0/batch_99", "wb"), "mkdir": lambda: os.mkdir(m + "/d"),
    "unlink": lambda: os.unlink(b), "rmdir": lambda: os.rmdir(m + "/epoch/2"),
    "rename": lambda: os.rename(b, m + "/epoch/0/x"), "link": lambda: os.link(b, m + "/x"),
    "symlink": lambda: os.symlink("x", m + "/x"), "utime": lambda: os.utime(b),
    "chmod": lambda: os.chmod(b, 0o600), "truncate": lambda: os.truncate(b, 0),
    "mknod": lambda: os.mkfifo(m + "/fifo"),
    "setxattr": lambda: os.setxattr(b, "user.x", b"1"),
    "removexattr": lambda: os.removexattr(m, "user.batchfs.fingerprint"),
}
bad = []
for name, call in calls.items():
    try:
        call()
        bad.append(name + ": succeeded")
    except OSError as e:
        if e.errno != errno.EROFS:
            bad.append("%s: %s, expected EROFS" % (name, errno.errorcode[e.errno]))
if bad:
    print("\n".join(bad), file=sys.stderr)
    sys.exit(1)
EOF
[ "$(md5sum <"$b")" = "$sum0" ] || fail "batch_0 changed after the refused writes"
[ "$(ls "$M" | tr '\n' ' ')" = "epoch pipeline stats " ] || fail "root changed after the refused writes"
ok "EROFS for 13 shell writes and 17 system calls; nothing changed"

# ---- xattrs and /pipeline --------------------------------------------------------------
pyx - "$M" <<'EOF' || fail "xattr and /pipeline checks"
import errno, os, sys, bfs
m = sys.argv[1]
def die(msg):
    print(msg, file=sys.stderr)
    sys.exit(1)
fp = os.getxattr(m, "user.batchfs.fingerprint").decode()
if len(fp) != 16 or int(fp, 16) < 0:
    die("fingerprint xattr %r is not 16 hex digits" % fp)
if os.listxattr(m) != ["user.batchfs.fingerprint"]:
    die("listxattr(root) = %r" % os.listxattr(m))
want = ["user.batchfs.epoch", "user.batchfs.batch", "user.batchfs.samples"]
for e, k in [(0, 0), (2, 7), (1, 3)]:
    f = "%s/epoch/%d/batch_%d" % (m, e, k)
    if sorted(os.listxattr(f)) != sorted(want):
        die("listxattr(%s) = %r" % (f, os.listxattr(f)))
    got = [os.getxattr(f, n).decode() for n in want]
    if got != [str(e), str(k), "8"]:
        die("%s: epoch/batch/samples xattrs %r" % (f, got))
    meta = bfs.header(f)[0]["__metadata__"]
    if (meta["epoch"], meta["batch"], meta["fingerprint"]) != (str(e), str(k), fp):
        die("%s: metadata %r vs xattrs %r, fingerprint %s" % (f, meta, got, fp))
for path, name in [(m, "user.nope"), (m + "/epoch", "user.batchfs.fingerprint"),
                   (m + "/epoch/0/batch_0", "user.batchfs.fingerprint"),
                   (m + "/pipeline", "user.batchfs.epoch")]:
    try:
        os.getxattr(path, name)
        die("getxattr(%s, %s) succeeded" % (path, name))
    except OSError as e:
        if e.errno != errno.ENODATA:
            die("getxattr(%s, %s): %s, expected ENODATA" % (path, name, errno.errorcode[e.errno]))
for d in ["epoch", "epoch/0", "pipeline", "stats"]:
    if os.listxattr(m + "/" + d):
        die("listxattr(%s) = %r, expected none" % (d, os.listxattr(m + "/" + d)))

text = open(m + "/pipeline").read()
if os.stat(m + "/pipeline").st_size != len(text.encode()):
    die("/pipeline: stat size %d, read %d" % (os.stat(m + "/pipeline").st_size, len(text)))
kv = {}
for line in text.splitlines():
    if line.strip() and not line.startswith("#"):
        k, _, v = line.partition(" = ")
        kv[k] = v
if kv.get("fingerprint") != fp:
    die("/pipeline fingerprint %r != xattr %r" % (kv.get("fingerprint"), fp))
for k, v in [("batch", "8"), ("size", "32x32"), ("epochs", "3"), ("seed", "0"),
             ("shuffle", "full"), ("dtype", "u8"), ("layout", "nhwc")]:
    if kv.get(k) != v:
        die("/pipeline: %s = %r, expected %r" % (k, kv.get(k), v))
if not kv.get("source", "").endswith("/data.bfs"):
    die("/pipeline: source = %r" % kv.get("source"))
EOF
ok "xattrs (fingerprint on the root; epoch, batch, samples on batches; ENODATA otherwise) and /pipeline"

# ---- /stats: valid JSON, counters move --------------------------------------------------
wait_idle "$M"
pyx -c 'import bfs, sys, json; json.dump(bfs.stats(sys.argv[1]), open(sys.argv[2], "w"))' "$M" "$T/s0.json"
for k in 0 1 2; do cat "$M/epoch/2/batch_$k" >/dev/null; done
wait_idle "$M"
pyx - "$M" "$T/s0.json" <<'EOF' || fail "/stats checks"
import json, os, sys, bfs
m, s0 = sys.argv[1], json.load(open(sys.argv[2]))
s1 = bfs.stats(m)
def die(msg):
    print(msg, file=sys.stderr)
    sys.exit(1)
if os.stat(m + "/stats").st_size != 0:
    die("/stats: stat size %d, expected 0 (live, read with direct I/O)" % os.stat(m + "/stats").st_size)
for key in ["version", "fingerprint", "uptime_s", "threads", "images", "images_per_s",
            "stage_us_per_image", "decodes", "bad_samples", "batches", "cache", "reads", "passthrough",
            "prefetch"]:
    if key not in s1:
        die("/stats has no %r: %s" % (key, sorted(s1)))
if s1["fingerprint"] != os.getxattr(m, "user.batchfs.fingerprint").decode():
    die("/stats fingerprint %s differs from the xattr" % s1["fingerprint"])
moved = {
    "images": (s0["images"], s1["images"]),
    "batches.computed": (s0["batches"]["computed"], s1["batches"]["computed"]),
    "reads.requests": (s0["reads"]["requests"], s1["reads"]["requests"]),
    "cache.misses+hits+joins": (sum(s0["cache"][k] for k in ("hits", "joins", "misses")),
                                sum(s1["cache"][k] for k in ("hits", "joins", "misses"))),
}
for k, (a, b) in moved.items():
    if not b > a:
        die("/stats %s did not move after 3 batch reads: %s -> %s" % (k, a, b))
if s1["images"] - s0["images"] < 24:
    die("/stats images %d -> %d after reading 3 batches of 8" % (s0["images"], s1["images"]))
# with passthrough the kernel reads batch files without the daemon: count opens instead
if s1["passthrough"]["active"]:
    if s1["passthrough"]["opens"] - s0["passthrough"]["opens"] < 3:
        die("/stats passthrough.opens moved by less than 3 batches")
elif s1["reads"]["bytes"] - s0["reads"]["bytes"] < 3 * os.stat(m + "/epoch/2/batch_0").st_size:
    die("/stats reads.bytes moved by less than 3 batches")
if s1["reads"]["errors"] != 0 or s1["batches"]["failed"] != 0 or s1["bad_samples"] != 0:
    die("/stats errors: %s" % s1)
EOF
ok "/stats is JSON, has every section, and its counters move after reads"

unmount_bfs "$M"
ok "unmounted, daemon exited 0"
