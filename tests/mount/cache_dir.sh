#!/usr/bin/env bash
# tests/mount/cache_dir.sh — cache_dir= shares finished batches between daemons:
#  - mount A (cache_dir=D) reads epoch 0: it computes and publishes every batch;
#  - mount B, same dataset and pipeline but other knobs (threads=1), same D, mounted
#    while A is still up: reads epoch 0 without computing anything (/stats: computed 0,
#    cache_dir.served == batches) and the bytes equal A's;
#  - mount C with another seed (another fingerprint) shares nothing: it computes;
#  - a corrupted entry in D is detected, recomputed, never served torn, and logged with its
#    path and the reason.
. "$(dirname "$0")/lib.sh"
require_fuse

"$GEN" "$T/images" 3 16 48 120 4
"$MKBATCHFS" --quiet "$T/images" "$T/d.bfs"
D=$T/store
mkdir -m 700 "$D"
mkdir "$T/a" "$T/b" "$T/c"
OPTS=batch=8,size=32,seed=5,cache_dir=$D

stat_of() { python3 -c "import json,sys; d=json.load(open(sys.argv[1]+'/stats')); print(eval(sys.argv[2]))" "$@"; }
read_all() { local m=$1 k; for k in $(seq 0 5); do cat "$m/epoch/0/batch_$k" >"$T/$(basename "$m").$k"; done; }

mount_bfs "$T/d.bfs" "$T/a" -o "$OPTS"
read_all "$T/a"
pub=$(stat_of "$T/a" "d['cache_dir']['published']")
[ "$pub" -ge 6 ] || fail "mount A published $pub batches, expected >= 6"
ok "A computed and published $pub batches"

mount_bfs "$T/d.bfs" "$T/b" -o "$OPTS,threads=1"
read_all "$T/b"
served=$(stat_of "$T/b" "d['cache_dir']['served']")
computed=$(stat_of "$T/b" "d['batches']['computed']")
[ "$served" -ge 6 ] && [ "$computed" -eq 0 ] ||
    fail "mount B: served $served from cache_dir, computed $computed (expected >= 6 and 0)"
for k in $(seq 0 5); do cmp "$T/a.$k" "$T/b.$k" || fail "batch $k differs between A and B"; done
ok "B computed nothing: $served batches served from cache_dir, identical bytes"

# where the file system takes user xattrs, an entry is exactly the batch file (its trailer
# is the xattr user.batchfs.entry), and under FUSE passthrough B serves the entries
# themselves, without a copy (cache_dir.zero_copy)
ent=$(find "$D" -type f -path '*/0/0.st')
if python3 -c "import os,sys; os.getxattr(sys.argv[1], 'user.batchfs.entry')" "$ent" 2>/dev/null; then
    [ "$(stat -c %s "$ent")" = "$(stat -c %s "$T/a.0")" ] || fail "entry $ent is not exactly batch 0"
    zc=$(stat_of "$T/b" "d['cache_dir']['zero_copy']")
    if [ "$(stat_of "$T/b" "d['passthrough']['active']")" = True ]; then
        [ "$zc" -ge 6 ] || fail "B served from cache_dir under passthrough with $zc zero-copy batches (< 6)"
        ok "entries are the batch files: $zc of B's batches are backed by them (zero copy)"
    else
        ok "entries are the batch files (no passthrough here: served by copying)"
    fi
else
    ok "no user xattrs under $D: entries carry their trailer in the file"
fi
# removing every entry under a live mount changes nothing for its readers
find "$D" -type f -name '*.st' -delete
for k in $(seq 0 5); do
    cat "$T/b/epoch/0/batch_$k" | cmp - "$T/a.$k" || fail "batch $k differs after its entry was removed"
done
ok "entries removed under B: B still serves identical bytes"
unmount_bfs "$T/b"
# the store is empty again: publish epoch 0 anew for the corruption check below
find "$D" -type f -name '*.st' | grep -q . && fail "entries left after removal"
mount_bfs "$T/d.bfs" "$T/b" -o "$OPTS"
read_all "$T/b"
unmount_bfs "$T/b"

mount_bfs "$T/d.bfs" "$T/c" -o "batch=8,size=32,seed=6,cache_dir=$D"
cat "$T/c/epoch/0/batch_0" >/dev/null
[ "$(stat_of "$T/c" "d['cache_dir']['served']")" -eq 0 ] || fail "another pipeline was served A's batch"
ok "another seed shares nothing"
unmount_bfs "$T/c"

# corrupt every stored entry of epoch 0 (one byte in the payload), then read again
find "$D" -type f -path '*/0/*' ! -name '*.lock' ! -name '.*' | while read -r f; do
    printf '\x5a' | dd of="$f" bs=1 seek=5000 conv=notrunc status=none
done
mount_bfs "$T/d.bfs" "$T/b" -o "$OPTS"
read_all "$T/b"
for k in $(seq 0 5); do cmp "$T/a.$k" "$T/b.$k" || fail "batch $k served torn after corruption"; done
corrupt=$(stat_of "$T/b" "d['cache_dir']['corrupt']")
[ "$corrupt" -ge 1 ] || fail "corrupted entries not detected (corrupt=$corrupt)"
# each one logged, with its path and the reason
n=$(grep -cE "^batchfs: cache_dir $D: entry v2/[0-9a-f]{16}/0/[0-9]+\.st \(epoch 0, batch [0-9]+\) payload checksum mismatch \(corrupt\): removed, recomputing$" "$DAEMON_LOG" || true)
[ "$n" = "$corrupt" ] || fail "$corrupt corrupt entries removed, $n logged with path and reason"
ok "corrupted entries detected ($corrupt) and recomputed, bytes identical"
unmount_bfs "$T/b"

# cache_dir=auto: the per-user default directory under /dev/shm, private to the user
mount_bfs "$T/d.bfs" "$T/c" -o "batch=8,size=32,seed=7,cache_dir=auto"
cat "$T/c/epoch/0/batch_0" >/dev/null
# the per-user directory outlives this test: the batch is either published now or served
# from an earlier run, never neither
[ "$(stat_of "$T/c" "d['cache_dir']['published'] + d['cache_dir']['served']")" -ge 1 ] ||
    fail "cache_dir=auto neither published nor served the batch"
auto=/dev/shm/batchfs-$(id -u)
[ "$(stat -c %a "$auto")" = 700 ] || fail "$auto is not private (mode $(stat -c %a "$auto"))"
ok "cache_dir=auto uses $auto (mode 700)"
expect_log "corrupt|removed|checksum"
