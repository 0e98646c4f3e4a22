#!/usr/bin/env bash
# tests/mount/source_changes.sh — an ImageFolder edited while mounted (issue 21, item 3):
#  - the fingerprint covers each file's name, size and mtime: a mount made after an edit
#    has another one;
#  - a file rewritten after the mount, and one deleted, are bad samples when read:
#    substituted (bad_sample=substitute), logged by name with the reason, counted in
#    /stats, and the batches holding them are not published to cache_dir
#    (unpublished_substituted), so other mounts of the old fingerprint never get new bytes;
#  - with bad_sample=fail the batch holding the rewritten file fails with EIO, logged;
#  - a file changed in place with its size and mtime put back (touch -r) is caught by its
#    ctime.
# 32 images, batch=8, size=32. A few seconds.
. "$(dirname "$0")/lib.sh"
require_fuse

OPTS=batch=8,size=32
"$GEN" "$T/src" 2 16 64 200 4
M=$T/mnt
mkdir "$M" "$T/store"
fingerprint() { sed -n 's/^fingerprint = //p' "$1/pipeline"; }

mount_bfs "$T/src" "$M" -o "$OPTS,cache_dir=$T/store"
fp0=$(fingerprint "$M")
nb=$(ls "$M/epoch/0" | grep -c '^batch_')
[ "$nb" = 4 ] || fail "32 samples at batch=8 should make 4 batches, the mount lists $nb"
for k in $(seq 0 3); do cat "$M/epoch/0/batch_$k" >/dev/null; done

# after the mount: one file rewritten (another image's bytes, a new size), one deleted
changed=$T/src/class_000/img_00003.jpg gone=$T/src/class_001/img_00005.jpg
cp "$T/src/class_001/img_00009.jpg" "$changed"
rm "$gone"
expect_log '^batchfs: bad sample [0-9]+ \(.*/class_000/img_00003\.jpg\): file changed or vanished since the folder was scanned at mount; substituted by sample [0-9]+ \(bad_sample=substitute\)$'
expect_log '^batchfs: bad sample [0-9]+ \(.*/class_001/img_00005\.jpg\): file changed or vanished since the folder was scanned at mount; substituted by sample [0-9]+ \(bad_sample=substitute\)$'
for k in $(seq 0 3); do cat "$M/epoch/1/batch_$k" >/dev/null || fail "epoch 1 batch $k: read failed"; done
pyx - "$M" <<'EOF' || fail "/stats after the edits"
import sys, bfs
st = bfs.stats(sys.argv[1])
# each epoch reads the two once; prefetch may have begun epoch 2 (a third bad read)
if st["bad_samples"] < 2:
    sys.exit("/stats bad_samples = %d, want 2 or more (the rewritten and the deleted file)"
             % st["bad_samples"])
store, computed = st["cache_dir"], st["batches"]["computed"]
if store["unpublished_substituted"] < 1:
    sys.exit("cache_dir unpublished_substituted = 0: the batches holding them were published")
if store["published"] + store["unpublished_substituted"] != computed or store["save_errors"]:
    sys.exit("cache_dir %s for %d computed batches: a batch with a substitute was published?"
             % (store, computed))
EOF
grep -q 'class_000/img_00003\.jpg): file changed' "$DAEMON_LOG" || fail "the log does not name the rewritten file"
unmount_bfs "$M"
ok "a file rewritten and one deleted after mounting: substituted, logged by name, counted, not published"

# a new mount sees the edited folder: another fingerprint (size and mtime are in it)
mount_bfs "$T/src" "$M" -o "$OPTS"
fp1=$(fingerprint "$M")
[ -n "$fp0" ] && [ "$fp0" != "$fp1" ] || fail "the fingerprint did not change with the folder ($fp0, $fp1)"
unmount_bfs "$M"
ok "a mount after the edits has another fingerprint ($fp0 -> $fp1)"

# bad_sample=fail: the batch holding a file rewritten after the mount fails with EIO
mount_bfs "$T/src" "$M" -o "$OPTS,bad_sample=fail,drop_last=0" # every file read once
touch -d '2001-01-01' "$T/src/class_001/img_00002.jpg"
expect_log '^batchfs: bad sample [0-9]+ \(.*/class_001/img_00002\.jpg\): file changed or vanished since the folder was scanned at mount; failing epoch 2 batch [0-9]+ \(bad_sample=fail\)$'
failed=0
nb=$(ls "$M/epoch/0" | grep -c '^batch_') # 31 files now: 4 batches, the last of 7
for k in $(seq 0 $((nb - 1))); do
    if ! cat "$M/epoch/2/batch_$k" >/dev/null 2>"$T/cat.err"; then
        grep -q 'Input/output error' "$T/cat.err" || fail "epoch 2 batch $k: not EIO: $(cat "$T/cat.err")"
        failed=$((failed + 1))
    fi
done
[ "$failed" = 1 ] || fail "bad_sample=fail: $failed batches failed, want exactly 1"
unmount_bfs "$M"
ok "bad_sample=fail: the batch holding a file touched after mounting fails with EIO, logged"
# rewritten in place with its size and mtime put back (rsync --inplace, cp
# --preserve=timestamps, touch -r): only the ctime tells, and it is checked too
mount_bfs "$T/src" "$M" -o "$OPTS,drop_last=0"
for k in $(seq 0 3); do cat "$M/epoch/3/batch_$k" >/dev/null || fail "epoch 3 batch $k: read failed"; done
kept=$T/src/class_000/img_00007.jpg
cp -p "$kept" "$T/kept.ref"
size=$(stat -c %s "$kept")
byte=$(od -An -tu1 -j $((size / 2)) -N1 "$kept" | tr -d ' ')
printf "\\$(printf %03o $(((byte + 1) % 256)))" | dd of="$kept" bs=1 seek=$((size / 2)) conv=notrunc status=none
touch -r "$T/kept.ref" "$kept"
[ "$(stat -c %s.%Y "$kept")" = "$(stat -c %s.%Y "$T/kept.ref")" ] || fail "the test did not keep size and mtime"
cmp -s "$kept" "$T/kept.ref" && fail "the test did not change the file's bytes"
expect_log '^batchfs: bad sample [0-9]+ \(.*/class_000/img_00007\.jpg\): file changed or vanished since the folder was scanned at mount; substituted by sample [0-9]+ \(bad_sample=substitute\)$'
for k in $(seq 0 3); do cat "$M/epoch/4/batch_$k" >/dev/null || fail "epoch 4 batch $k: read failed"; done
grep -q 'class_000/img_00007\.jpg): file changed' "$DAEMON_LOG" ||
    fail "a file changed with its size and mtime kept was not caught (its bytes were served)"
unmount_bfs "$M"
ok "a file rewritten in place with its size and mtime kept: caught by its ctime, substituted"
echo "PASS: source_changes"
