#!/usr/bin/env bash
# tests/mount/cache_dir_substitute.sh — a batch that holds a substitute is never published
# to cache_dir, so a sample that is unreadable for a while cannot poison the store:
#  - mount A (ImageFolder, cache_dir=D, bad_sample=substitute) is up when one image is
#    overwritten in place by garbage (same size); A reads epoch 0: the batch holding that
#    sample is served with a substitute (it differs from the engine's bytes), every other
#    batch is published; /stats counts the withheld batch (cache_dir.unpublished_substituted);
#  - the image is restored (content and mtime: the dataset's identity, so the fingerprint,
#    is the original one again) and A is unmounted;
#  - mount B, fresh, same dataset, same D: every batch of epoch 0 equals the engine's
#    in-process bytes of the intact dataset; the batch A substituted is computed, not
#    served from the store, and published now.
. "$(dirname "$0")/lib.sh"
require_fuse

"$GEN" "$T/images" 2 12 48 96 3
D=$T/store
mkdir -m 700 "$D" "$T/a" "$T/b" "$T/ref" "$T/bak"
PIPE=batch=6,size=32,seed=11
OPTS=$PIPE,epochs=1,cache_dir=$D,bad_sample=substitute
NB=4
BADFILE=class_001/img_00002.jpg BAD=14 # index = class 1 * 12 + 2
expect_log "^batchfs: bad sample $BAD \\(.*/${BADFILE//./\\.}\\): .*; substituted by "

for k in $(seq 0 $((NB - 1))); do ref_batch "$T/images" "$PIPE" 0 $k "$T/ref/$k"; done
KBAD=$(pyx -c '
import sys, bfs
for k in range(int(sys.argv[3])):
    if int(sys.argv[2]) in bfs.i64(bfs.tensors("%s/%d" % (sys.argv[1], k))[0]["indices"][2]):
        print(k)' "$T/ref" "$BAD" "$NB")
[ -n "$KBAD" ] || fail "sample $BAD is in no batch of epoch 0"

mount_bfs "$T/images" "$T/a" -o "$OPTS"
# unreadable for a while: garbage in place (same inode, same size), the original kept
cp -p "$T/images/$BADFILE" "$T/bak/img"
head -c "$(stat -c %s "$T/bak/img")" /dev/zero | tr '\0' 'x' >"$T/images/$BADFILE"
for k in $(seq 0 $((NB - 1))); do cat "$T/a/epoch/0/batch_$k" >"$T/a.$k" || fail "A: batch $k"; done
cmp -s "$T/a.$KBAD" "$T/ref/$KBAD" && fail "A: batch $KBAD holds no substitute (the test is broken)"
wait_idle "$T/a"
stat_of() { pyx -c 'import bfs, sys; d = bfs.stats(sys.argv[1]); print(eval(sys.argv[2]))' "$@"; }
[ "$(stat_of "$T/a" "d['bad_samples']")" -ge 1 ] || fail "A: no bad sample counted"
unpub=$(stat_of "$T/a" "d['cache_dir']['unpublished_substituted']")
pub=$(stat_of "$T/a" "d['cache_dir']['published']")
[ "$unpub" = 1 ] || fail "A: cache_dir.unpublished_substituted = $unpub, expected 1"
[ "$pub" = $((NB - 1)) ] || fail "A: published $pub batches, expected $((NB - 1)) (all but the substituted one)"
ok "A served batch $KBAD with a substitute and did not publish it ($pub others published)"

cp -p "$T/bak/img" "$T/images/$BADFILE" # the original bytes and mtime
unmount_bfs "$T/a"

mount_bfs "$T/images" "$T/b" -o "$OPTS"
for k in $(seq 0 $((NB - 1))); do
    cmp "$T/b/epoch/0/batch_$k" "$T/ref/$k" || fail "B: batch $k differs from the intact dataset's"
done
wait_idle "$T/b"
served=$(stat_of "$T/b" "d['cache_dir']['served']")
computed=$(stat_of "$T/b" "d['batches']['computed']")
[ "$served" = $((NB - 1)) ] && [ "$computed" = 1 ] ||
    fail "B: served $served from cache_dir and computed $computed, expected $((NB - 1)) and 1"
[ "$(stat_of "$T/b" "d['bad_samples']")" = 0 ] || fail "B: bad samples after the restore"
unmount_bfs "$T/b"
ok "B, fresh on the restored dataset: every batch equals the engine's; batch $KBAD recomputed"
