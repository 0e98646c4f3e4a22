#!/usr/bin/env bash
# tests/mount/group_next.sh — dynamic sharding (group=NAME, docs/options.md):
#  - three mounts of one dataset and pipeline with group=g (different knobs), one reader
#    each opening epoch/1/next concurrently until ENODATA: together they get every batch of
#    the epoch exactly once; each file's bytes equal batch_K of a plain mount, K is the
#    file's user.batchfs.batch xattr (fgetxattr) and its metadata's "batch"; next is listed
#    with size 0 under group= only; /stats group.claims add up to the batch count;
#  - another group name, or another pipeline in the same group, has its own counter;
#  - a batch that fails (bad_sample=fail) is given back and tried 3 times, then lost;
#  - bad group names are refused before mounting, naming the option;
#  - claims taken ahead (up to the prefetch depth) are computed before they are opened, the
#    group's other mounts get the batches after them, and at unmount they go back;
#  - the last mount of a group removes its file from /dev/shm.
# About 5 s.
. "$(dirname "$0")/lib.sh"
require_fuse

"$GEN" "$T/images" 3 16 48 120 3 # 48 images
"$MKBATCHFS" --quiet "$T/images" "$T/d.bfs"
OPTS=batch=2,size=16,seed=3,epochs=3 # 24 batches per epoch
NB=24
mkdir "$T/plain" "$T/a" "$T/b" "$T/c" "$T/other" "$T/seed"
G=grp-$$-$RANDOM # (unique: groups are per user and host)

mount_bfs "$T/d.bfs" "$T/plain" -o "$OPTS"
mount_bfs "$T/d.bfs" "$T/a" -o "$OPTS,group=$G"
mount_bfs "$T/d.bfs" "$T/b" -o "$OPTS,group=$G,threads=1"
mount_bfs "$T/d.bfs" "$T/c" -o "$OPTS,group=$G,prefetch=0"

# listing: next only under group=, after the batches, size 0
[ -e "$T/plain/epoch/1/next" ] && fail "a mount without group= has epoch/1/next"
ls "$T/a/epoch/1" | grep -qx next || fail "epoch/1/next not listed under group="
[ "$(ls "$T/a/epoch/1" | grep -c .)" = $((NB + 1)) ] || fail "epoch/1 lists $(ls "$T/a/epoch/1" | grep -c .) names"
[ "$(stat -c %s "$T/a/epoch/1/next")" = 0 ] || fail "next has size $(stat -c %s "$T/a/epoch/1/next"), not 0"
[ -z "$(ls /dev/shm | grep -F -- "-$G-")" ] && fail "no group file for $G under /dev/shm"
ok "next: listed under group= only, size 0; the group's file is in /dev/shm"

# reader MNT OUT: open MNT/epoch/1/next until ENODATA; one line per batch: K (xattr),
# the metadata's epoch and batch, the sha256 of the bytes; the last line says how it ended
cat >"$T/reader.py" <<'EOF'
import bfs, errno, hashlib, os, sys, time
mnt, out = sys.argv[1], sys.argv[2]
while not os.path.exists(out + ".go"):  # (all readers start together)
    time.sleep(0.005)
with open(out, "w") as o:
    while True:
        try:
            fd = os.open(mnt + "/epoch/1/next", os.O_RDONLY)
        except OSError as e:
            o.write("end %s\n" % errno.errorcode.get(e.errno, e.errno))
            break
        k = os.getxattr(fd, "user.batchfs.batch").decode()
        ep = os.getxattr(fd, "user.batchfs.epoch").decode()
        chunks = []
        while True:
            c = os.read(fd, 1 << 16)
            if not c:
                break
            chunks.append(c)
        if os.fstat(fd).st_size != 0:
            sys.exit("fstat size of an open next is not 0")
        os.close(fd)
        data = b"".join(chunks)
        meta = bfs.header(data)[0]["__metadata__"]
        o.write("%s %s %s %s %s\n" % (k, ep, meta["epoch"], meta["batch"],
                                      hashlib.sha256(data).hexdigest()))
        time.sleep(0.01)  # a training step: the readers interleave
EOF
for m in a b c; do
    pyx "$T/reader.py" "$T/$m" "$T/$m.out" &
    BG_PIDS+=($!)
done
for m in a b c; do touch "$T/$m.out.go"; done
for p in "${BG_PIDS[@]}"; do wait "$p" || fail "a reader failed"; done
BG_PIDS=()
for m in a b c; do
    [ "$(tail -n 1 "$T/$m.out")" = "end ENODATA" ] || fail "reader of $m ended with '$(tail -n 1 "$T/$m.out")', not ENODATA"
done
cat "$T/a.out" "$T/b.out" "$T/c.out" | grep -v '^end' >"$T/all"
[ "$(wc -l <"$T/all")" = $NB ] || fail "the group served $(wc -l <"$T/all") batches of $NB"
[ "$(cut -d' ' -f1 "$T/all" | sort -n | uniq | wc -l)" = $NB ] || fail "a batch was served twice: $(cut -d' ' -f1 "$T/all" | sort -n | uniq -d)"
while read -r k ep mep mk sum; do
    [ "$k" -lt $NB ] || fail "batch index $k out of range"
    [ "$ep" = 1 ] && [ "$mep" = 1 ] && [ "$mk" = "$k" ] || fail "batch $k: epoch xattr $ep, metadata epoch $mep batch $mk"
    [ "$(sha256sum <"$T/plain/epoch/1/batch_$k" | cut -d' ' -f1)" = "$sum" ] ||
        fail "next gave batch $k with bytes other than plain epoch/1/batch_$k"
done <"$T/all"
ok "3 mounts x 1 reader: $NB batches, each once ($(for m in a b c; do grep -vc '^end' "$T/$m.out"; done | paste -sd/)), bytes = batch_K, xattr = metadata batch"

# an exhausted epoch stays exhausted; another epoch is fresh
python3 -c 'import os,sys
try:
    os.open(sys.argv[1], os.O_RDONLY)
except OSError as e:
    sys.exit(0 if e.errno == 61 else "errno %d" % e.errno)
sys.exit("opened")' "$T/b/epoch/1/next" || fail "epoch 1 next after exhaustion"
k=$(python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); print(os.getxattr(fd, "user.batchfs.batch").decode())' "$T/c/epoch/2/next")
[ "$k" = 0 ] || fail "epoch 2's first claim is batch $k, not 0"
claims=0
for m in a b c; do
    n=$(pyx -c 'import bfs,sys; g=bfs.stats(sys.argv[1])["group"]; assert g["name"]==sys.argv[2]; print(g["claims"])' "$T/$m" "$G")
    claims=$((claims + n))
done
[ $claims = $((NB + 1)) ] || fail "/stats group.claims add up to $claims, expected $((NB + 1))"
ok "after exhaustion open fails with ENODATA; epoch 2 starts at 0; /stats claims add up"

# another group, another pipeline (seed) in the same group: their own counters
mount_bfs "$T/d.bfs" "$T/other" -o "$OPTS,group=$G-2"
mount_bfs "$T/d.bfs" "$T/seed" -o "${OPTS/seed=3/seed=4},group=$G"
for m in other seed; do
    k=$(python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); print(os.getxattr(fd, "user.batchfs.batch").decode())' "$T/$m/epoch/1/next")
    [ "$k" = 0 ] || fail "mount $m: first claim of epoch 1 is $k, not 0 (shares the counter)"
done
ok "another group name, another pipeline: own counters"

# bad names: refused before mounting, naming the option
mkdir "$T/bad"
for name in "a/b" "" "x$(printf 'y%.0s' $(seq 64))" 'a*b'; do
    rc=0
    timeout 20 "$BATCHFS" "$T/d.bfs" "$T/bad" -o "$OPTS,group=$name" -f >"$T/err" 2>&1 || rc=$?
    [ $rc -ne 0 ] && [ $rc -lt 124 ] || fail "group=$name: exit $rc"
    grep -qF "group=" "$T/err" || { cat "$T/err" >&2; fail "group=$name: message does not name group="; }
    if is_mounted "$T/bad"; then fail "group=$name mounted"; fi
done
ok "bad group names refused: $(head -n 1 "$T/err")"

# a batch that fails (bad_sample=fail): its claim is given back and handed out again first,
# 3 tries in all, then lost; every other batch is served once
cp -a "$T/images" "$T/badimg"
python3 - "$T/badimg/class_001/img_00005.jpg" <<'EOF2'
import sys
d = open(sys.argv[1], "rb").read()
open(sys.argv[1], "wb").write(d[:d.find(b"\xff\xda") + 40])
EOF2
expect_log "^batchfs: bad sample [0-9]+ \\(.*img_00005\\.jpg\\): .*; failing epoch 1 batch [0-9]+ \\(bad_sample=fail\\)$"
mkdir "$T/fail"
mount_bfs "$T/badimg" "$T/fail" -o "$OPTS,group=$G-fail,bad_sample=fail"
python3 - "$T/fail/epoch/1/next" >"$T/fail.out" <<'EOF2'
import errno, os, sys
for _ in range(100):
    try:
        fd = os.open(sys.argv[1], os.O_RDONLY)
    except OSError as e:
        print(errno.errorcode.get(e.errno, e.errno))
        if e.errno == errno.ENODATA:
            break
        continue
    print("ok", os.getxattr(fd, "user.batchfs.batch").decode())
    os.close(fd)
EOF2
[ "$(grep -c '^EIO$' "$T/fail.out")" = 3 ] || fail "expected 3 EIO opens (tries of the failing batch): $(sort "$T/fail.out" | uniq -c | tr '\n' ' ')"
[ "$(grep '^ok' "$T/fail.out" | sort -u | wc -l)" = $((NB - 1)) ] && [ "$(grep -c '^ok' "$T/fail.out")" = $((NB - 1)) ] ||
    fail "expected $((NB - 1)) distinct batches served: $(grep -c '^ok' "$T/fail.out")"
[ "$(tail -n 1 "$T/fail.out")" = ENODATA ] || fail "the failing group did not end with ENODATA"
gs=$(pyx -c 'import bfs,sys; g=bfs.stats(sys.argv[1])["group"]; print(g["given_back"], g["lost"], g["claims"])' "$T/fail")
[ "$gs" = "2 1 $((NB - 1))" ] || fail "/stats group given_back lost claims = $gs, expected 2 1 $((NB - 1))"
ok "a failing batch: EIO 3 times (given back twice, then lost), the other $((NB - 1)) served once"

# claims taken ahead: a mount whose next is opened takes up to its prefetch depth of claims
# more and computes their batches (prefetch=2 here); another mount of the group gets the
# batch after them; at unmount the claims not opened go back, untried, to the group
mkdir "$T/ahead" "$T/behind"
mount_bfs "$T/d.bfs" "$T/ahead" -o "$OPTS,group=$G-ahead,prefetch=2"
mount_bfs "$T/d.bfs" "$T/behind" -o "$OPTS,group=$G-ahead,prefetch=0"
next_k() { python3 -c 'import os,sys
fd = os.open(sys.argv[1], os.O_RDONLY)
k = os.getxattr(fd, "user.batchfs.batch").decode()
while os.read(fd, 1 << 20):
    pass
print(k)' "$1/epoch/1/next"; }
group_of() { pyx -c 'import bfs,sys; st=bfs.stats(sys.argv[1]); g=st["group"]; c=st["cache"]
print(g["ahead"], g["given_back"], st["batches"]["prefetched"], c["hits"], c["misses"])' "$1"; }
[ "$(next_k "$T/ahead")" = 0 ] || fail "ahead: the first open of next is not batch 0"
wait_idle "$T/ahead"
[ "$(group_of "$T/ahead")" = "2 0 2 0 1" ] || fail "ahead after one open: ahead given_back prefetched hits misses = $(group_of "$T/ahead"), want 2 0 2 0 1"
[ "$(next_k "$T/behind")" = 3 ] || fail "behind: got batch $(next_k "$T/behind"), not 3 (after the 2 taken ahead)"
[ "$(next_k "$T/ahead")" = 1 ] || fail "ahead: the second open is not batch 1 (its first claim ahead)"
wait_idle "$T/ahead"
# batch 1 was computed before its open (a cache hit), and batch 4 taken ahead in its place
[ "$(group_of "$T/ahead")" = "2 0 3 1 1" ] || fail "ahead after two opens: $(group_of "$T/ahead"), want 2 0 3 1 1"
unmount_bfs "$T/ahead"
got=$(for _ in $(seq 30); do next_k "$T/behind" 2>/dev/null || { echo end; break; }; done | tr '\n' ' ')
[ "$got" = "2 4 $(seq -s ' ' 5 23) end " ] || fail "behind after ahead's unmount got: $got (want 2 4, the returned claims, then 5..23)"
unmount_bfs "$T/behind"
ok "claims ahead: prefetch=2 took 2 more and computed them (the next open a cache hit), the other mount got batch 3; at unmount 2 and 4 went back to the group"

for m in a b c other seed plain fail; do unmount_bfs "$T/$m"; done
ls /dev/shm | grep -qF -- "-$G" && fail "group files left after the last mount: $(ls /dev/shm | grep -F -- "-$G")"
ok "the last mount of each group removed its file"
