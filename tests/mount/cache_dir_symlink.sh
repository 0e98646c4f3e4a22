#!/usr/bin/env bash
# tests/mount/cache_dir_symlink.sh — cache_dir=PATH does not follow a symlink that another
# user planted in a world-writable sticky directory (like /tmp):
#  - $T/pub (mode 1777) holds `cache`, a symlink owned by uid 12345 to a directory of ours:
#    the daemon refuses to mount, names the link and its owner, and creates nothing behind
#    it;
#  - our own symlink there is followed: the mount works and the entries land in the target;
#  - the default directory (cache_dir=auto, /dev/shm/batchfs-<uid>) still works.
# Run as root (chown -h to another uid); skipped, loudly, otherwise.
. "$(dirname "$0")/lib.sh"
require_fuse
if [ "$(id -u)" != 0 ]; then
    echo "## SKIP: $CASE: not root: cannot give a symlink to another user: NOT tested" >&2
    exit 77
fi

"$GEN" "$T/images" 2 8 48 96 1
mkdir "$T/pub" "$T/target" "$T/m"
chmod 1777 "$T/pub"
chmod 700 "$T/target"
ln -s "$T/target" "$T/pub/cache"
chown -h 12345:12345 "$T/pub/cache"
PIPE=batch=4,size=16

# the planted link: refused before mounting (timeout: a daemon that mounts stays up)
rc=0
timeout 10 "$BATCHFS" "$T/images" "$T/m" -o "$PIPE,cache_dir=$T/pub/cache" -f >"$T/refused.log" 2>&1 || rc=$?
if is_mounted "$T/m"; then fusermount3 -u -z "$T/m"; fi
[ $rc != 0 ] && [ $rc != 124 ] || fail "cache_dir through a planted symlink: batchfs exited $rc (mounted?)"
grep -q "cache_dir $T/pub/cache: $T/pub/cache is a symbolic link owned by uid 12345" "$T/refused.log" ||
    { cat "$T/refused.log" >&2; fail "the refusal does not name the link and its owner"; }
[ -z "$(ls -A "$T/target")" ] || fail "something was created behind the planted link: $(ls -A "$T/target")"
ok "a symlink planted by uid 12345 in a sticky directory is refused: $(head -c 160 "$T/refused.log")..."

# our own link in the same directory: followed
chown -h 0:0 "$T/pub/cache"
mount_bfs "$T/images" "$T/m" -o "$PIPE,cache_dir=$T/pub/cache"
ref_batch "$T/images" "$PIPE" 0 1 "$T/ref"
cmp "$T/m/epoch/0/batch_1" "$T/ref" || fail "batch 1 through our own symlink differs"
wait_idle "$T/m"
unmount_bfs "$T/m"
[ -n "$(find "$T/target/v2" -name '*.st')" ] || fail "no entry under the link's target"
ok "our own symlink is followed: entries in its target"

# the default directory
mount_bfs "$T/images" "$T/m" -o "$PIPE,seed=9,cache_dir=auto"
ref_batch "$T/images" "$PIPE,seed=9" 0 0 "$T/ref"
cmp "$T/m/epoch/0/batch_0" "$T/ref" || fail "cache_dir=auto: batch 0 differs"
unmount_bfs "$T/m"
ok "cache_dir=auto still works"
