#!/usr/bin/env bash
# tests/mount/install.sh — `make install` into a temporary PREFIX and SBINDIR, then what
# mount(8) does for `mount -t fuse.batchfs` (and fstab): run SBINDIR/mount.fuse.batchfs
# SOURCE MNT -o OPTIONS with no PATH at all (mount(8) gives helpers none). The helper must
# find PREFIX/bin/batchfs through mount.fuse3 (package fuse3), mount(8)'s options with no
# meaning here (noauto, nofail, x-*) must be dropped, the man pages must land in
# PREFIX/share/man/man1, and `make uninstall` must remove the helper, the programs and the
# pages it installed. Nothing is written outside $T.
. "$(dirname "$0")/lib.sh"
require_fuse
[ -x /sbin/mount.fuse3 ] || fail "/sbin/mount.fuse3 is missing (package fuse3; 'make deps' installs it)"

"$GEN" "$T/images" 2 8 32 64 3
"$MKBATCHFS" --quiet "$T/images" "$T/data.bfs"
mkdir "$T/sbin" "$T/mnt"
ln -s /sbin/mount.fuse3 "$T/sbin/mount.fuse3"
make -s install BUILD="$BUILD" PREFIX="$T/prefix" SBINDIR="$T/sbin" >"$T/install.log" 2>&1 ||
    { cat "$T/install.log" >&2; fail "make install"; }
[ -x "$T/prefix/bin/batchfs" ] && [ -x "$T/prefix/bin/mkbatchfs" ] || fail "make install: programs missing"
[ -x "$T/sbin/mount.fuse.batchfs" ] || fail "make install: no mount helper in SBINDIR"
for f in lib/libbatchfs-gpu.so.1 lib/libbatchfs-gpu.so lib/libbatchfs-gpu.a include/batchfs_gpu.h; do
    [ -e "$T/prefix/$f" ] || fail "make install: $f missing"
done
# the man pages, where man(1) finds them under PREFIX
for p in batchfs mkbatchfs; do
    cmp "$T/prefix/share/man/man1/$p.1" "docs/man/$p.1" || fail "make install: share/man/man1/$p.1 missing or not docs/man/$p.1"
done
if command -v man >/dev/null; then
    MANPATH="$T/prefix/share/man" man -P cat mkbatchfs 2>/dev/null | grep -q -- "--verify" ||
        fail "man mkbatchfs with MANPATH=PREFIX/share/man does not show the installed page"
fi
grep -qx "prefix=$T/prefix" "$T/prefix/lib/pkgconfig/batchfs-gpu.pc" ||
    fail "make install: batchfs-gpu.pc does not name PREFIX: $(head -1 "$T/prefix/lib/pkgconfig/batchfs-gpu.pc")"

rc=0
MOUNTS+=("$T/mnt") DAEMONS+=("") LOGS+=("") # (unmounted by the cleanup if a check fails)
(cd / && env -i "$T/sbin/mount.fuse.batchfs" "$T/data.bfs" "$T/mnt" \
    -o batch=4,size=16,noauto,nofail,x-systemd.automount) >"$T/out" 2>&1 || rc=$?
[ $rc = 0 ] || { cat "$T/out" >&2; fail "the mount helper without PATH: exit $rc"; }
is_mounted "$T/mnt" || fail "the mount helper exited 0 but nothing is mounted"
# the daemon is PREFIX/bin/batchfs (not one /bin/sh's default PATH would find elsewhere)
pid=$(pgrep -n -f -- "batchfs $T/data.bfs $T/mnt") || fail "no daemon for $T/mnt"
[ "$(readlink "/proc/$pid/exe")" = "$T/prefix/bin/batchfs" ] ||
    fail "the daemon runs $(readlink "/proc/$pid/exe"), not $T/prefix/bin/batchfs"
grep -qx "batch = 4" "$T/mnt/pipeline" || fail "the mount helper lost -o batch=4: $(cat "$T/mnt/pipeline")"
cmp <(cat "$T/mnt/epoch/0/batch_1") <(ref_batch "$T/data.bfs" batch=4,size=16 0 1 /dev/stdout) ||
    fail "through the mount helper, batch 1 differs from engine_tool's"
fusermount3 -u "$T/mnt"
ok "mount.fuse.batchfs with no PATH runs PREFIX/bin/batchfs; noauto, nofail, x-* dropped; bytes as engine_tool's"

make -s uninstall BUILD="$BUILD" PREFIX="$T/prefix" SBINDIR="$T/sbin" >"$T/install.log" 2>&1 ||
    { cat "$T/install.log" >&2; fail "make uninstall"; }
[ ! -e "$T/sbin/mount.fuse.batchfs" ] && [ ! -e "$T/prefix/bin/batchfs" ] ||
    fail "make uninstall left the helper or the programs"
left=$(find "$T/prefix" -type f -o -type l)
[ -z "$left" ] || fail "make uninstall left: $left"
ok "make uninstall removes the programs, the man pages and its mount helper"
