#!/usr/bin/env bash
# tests/mount/cache_dir_full.sh — a cache_dir whose file system fills up long before the
# budget (a 1 MiB tmpfs mounted by the test; cache_dir_mb is 4096) is visible and keeps
# working:
#  - batches of ~220 KB, three epochs: saves meet ENOSPC; the daemon evicts least recently
#    used entries and saves again (/stats: cache_dir.no_space, evictions, published beyond
#    what fits, save_errors 0); one log line names the directory and the error (rate-
#    limited: one, not one per event); every batch equals the engine's bytes;
#  - batches of ~1.2 MB, larger than the file system: every save fails, the batches are
#    still served, equal to the engine's; /stats counts each failure (save_errors); the log
#    has one line for them, naming the directory and the error.
# Needs root (mount -t tmpfs): skipped, loudly, where the mount fails.
. "$(dirname "$0")/lib.sh"
require_fuse

FULL=$T/full
mkdir "$FULL" "$T/a" "$T/b" "$T/ref"
if ! mount -t tmpfs -o size=1m,mode=0700 tmpfs "$FULL" 2>"$T/mount.err"; then
    echo "## SKIP: $CASE: cannot mount a tmpfs ($(cat "$T/mount.err")): a full cache_dir is NOT tested" >&2
    exit 77
fi
# the tmpfs goes before lib.sh's cleanup removes $T (lazily: a daemon may still hold it)
trap 'rc=$?; umount -l "$FULL" 2>/dev/null; (exit $rc); cleanup' EXIT
D=$FULL/store
re_d=${D//./\\.}
expect_log "^batchfs: cache_dir $re_d: its file system is full \\(No space left on device\\) before the budget .*: evicted [0-9]+ least recently used entries"
expect_log "^batchfs: cache_dir $re_d: could not save epoch [0-9]+ batch [0-9]+: No space left on device; the batch is served but not stored"

"$GEN" "$T/images" 2 16 64 160 5 # 32 images
stat_of() { pyx -c 'import bfs, sys; d = bfs.stats(sys.argv[1]); print(eval(sys.argv[2]))' "$@"; }

# ---- entries fill the file system: evict and save again -------------------------------
PIPE=batch=8,size=96,seed=2 # 221 KB a batch: 4 fit in 1 MiB
mount_bfs "$T/images" "$T/a" -o "$PIPE,epochs=3,cache_dir=$D"
for e in 0 1 2; do
    for k in 0 1 2 3; do
        ref_batch "$T/images" "$PIPE" $e $k "$T/ref/a$e.$k"
        cmp "$T/a/epoch/$e/batch_$k" "$T/ref/a$e.$k" || fail "A: epoch $e batch $k differs from the engine's"
    done
done
wait_idle "$T/a"
nospace=$(stat_of "$T/a" "d['cache_dir']['no_space']")
evicted=$(stat_of "$T/a" "d['cache_dir']['evictions']")
pub=$(stat_of "$T/a" "d['cache_dir']['published']")
errs=$(stat_of "$T/a" "d['cache_dir']['save_errors']")
usage=$(stat_of "$T/a" "d['cache_dir']['usage_bytes']")
[ "$nospace" -ge 1 ] && [ "$evicted" -ge 1 ] || fail "A: no_space $nospace, evictions $evicted (expected >= 1 each)"
[ "$pub" -ge 8 ] && [ "$errs" = 0 ] || fail "A: published $pub (expected >= 8: more than fit), save_errors $errs (expected 0)"
[ "$usage" -le $((1 << 20)) ] || fail "A: usage_bytes $usage > the 1 MiB file system"
n=$(grep -c "its file system is full" "$DAEMON_LOG" || true)
[ "$n" = 1 ] || fail "A: $n 'file system is full' lines for $nospace events, expected 1 (rate-limited)"
unmount_bfs "$T/a"
ok "file system full $nospace times: evicted $evicted entries, published $pub, one log line, bytes equal"

# ---- batches larger than the file system: every save fails, reads do not ---------------
PIPE=batch=8,size=224,seed=2 # 1.2 MB a batch
mount_bfs "$T/images" "$T/b" -o "$PIPE,epochs=1,cache_dir=$D"
for k in 0 1 2 3; do
    ref_batch "$T/images" "$PIPE" 0 $k "$T/ref/b.$k"
    cmp "$T/b/epoch/0/batch_$k" "$T/ref/b.$k" || fail "B: batch $k differs from the engine's"
done
wait_idle "$T/b"
errs=$(stat_of "$T/b" "d['cache_dir']['save_errors']")
pub=$(stat_of "$T/b" "d['cache_dir']['published']")
[ "$errs" = 4 ] && [ "$pub" = 0 ] || fail "B: save_errors $errs, published $pub (expected 4 and 0)"
n=$(grep -c "could not save epoch" "$DAEMON_LOG" || true)
[ "$n" = 1 ] || fail "B: $n 'could not save' lines for $errs failures, expected 1 (rate-limited)"
grep -q "cache_dir $D: could not save epoch 0 batch [0-3]: No space left on device" "$DAEMON_LOG" ||
    fail "B: the log line does not name $D and the error"
unmount_bfs "$T/b"
ok "saves larger than the file system: $errs failures counted, one log line, every batch served"
