#!/usr/bin/env bash
# tests/mount/install.sh — `make install PREFIX=X` keeps every file under X (the mount
# helper in X/sbin, as SBINDIR defaults to PREFIX/sbin; /sbin is left alone), and
# `DESTDIR=D PREFIX=/usr/local` under D/usr/local with the files naming /usr/local. Then
# what mount(8) does for `mount -t fuse.batchfs` (and fstab): run
# SBINDIR/mount.fuse.batchfs SOURCE MNT -o OPTIONS with no PATH at all (mount(8) gives
# helpers none). The helper must find PREFIX/bin/batchfs through mount.fuse3 (package
# fuse3), mount(8)'s options with no meaning here (noauto, nofail, x-*) must be dropped, the
# man pages must land in PREFIX/share/man/man1, and `make uninstall` must remove the helper,
# the programs and the pages it installed. Nothing is written outside $T.
. "$(dirname "$0")/lib.sh"
require_fuse
[ -x /sbin/mount.fuse3 ] || fail "/sbin/mount.fuse3 is missing (package fuse3; 'make deps' installs it)"

"$GEN" "$T/images" 2 8 32 64 3
"$MKBATCHFS" --quiet "$T/images" "$T/data.bfs"
mkdir "$T/mnt"
# (a helper in /sbin before the install: it must be the same file after)
sbin_before=$(stat -c '%i %Y %s' /sbin/mount.fuse.batchfs 2>/dev/null || echo none)
make -s install BUILD="$BUILD" PREFIX="$T/prefix" >"$T/install.log" 2>&1 ||
    { cat "$T/install.log" >&2; fail "make install"; }
sbin_after=$(stat -c '%i %Y %s' /sbin/mount.fuse.batchfs 2>/dev/null || echo none)
if [ "$sbin_after" != "$sbin_before" ]; then
    # (put back what this test wrote outside $T: only a helper naming our PREFIX)
    if grep -qsF "$T/prefix" /sbin/mount.fuse.batchfs; then rm -f /sbin/mount.fuse.batchfs; fi
    fail "make install PREFIX=$T/prefix wrote /sbin/mount.fuse.batchfs, outside PREFIX"
fi
[ -x "$T/prefix/bin/batchfs" ] && [ -x "$T/prefix/bin/mkbatchfs" ] || fail "make install: programs missing"
[ -x "$T/prefix/sbin/mount.fuse.batchfs" ] || fail "make install: no mount helper in PREFIX/sbin"
grep -q "SBINDIR=/sbin" "$T/install.log" || { cat "$T/install.log" >&2; fail "make install does not say where mount(8) looks for the helper"; }
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
# (XDG_RUNTIME_DIR: with no syslog daemon the daemon's log goes there, not to /run/batchfs)
(cd / && env -i XDG_RUNTIME_DIR="$XDG_RUNTIME_DIR" "$T/prefix/sbin/mount.fuse.batchfs" "$T/data.bfs" "$T/mnt" \
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

make -s uninstall BUILD="$BUILD" PREFIX="$T/prefix" >"$T/install.log" 2>&1 ||
    { cat "$T/install.log" >&2; fail "make uninstall"; }
[ ! -e "$T/prefix/sbin/mount.fuse.batchfs" ] && [ ! -e "$T/prefix/bin/batchfs" ] ||
    fail "make uninstall left the helper or the programs"
left=$(find "$T/prefix" -type f -o -type l)
[ -z "$left" ] || fail "make uninstall left: $left"
ok "make uninstall removes the programs, the man pages and its mount helper"

# DESTDIR (packaging): every file under DESTDIR/PREFIX, naming PREFIX (not DESTDIR)
make -s install BUILD="$BUILD" DESTDIR="$T/dest" PREFIX=/usr/local >"$T/install.log" 2>&1 ||
    { cat "$T/install.log" >&2; fail "make install DESTDIR="; }
outside=$(find "$T/dest" \( -type f -o -type l \) ! -path "$T/dest/usr/local/*")
[ -z "$outside" ] || fail "make install DESTDIR=$T/dest PREFIX=/usr/local wrote outside DESTDIR/PREFIX: $outside"
h=$T/dest/usr/local/sbin/mount.fuse.batchfs
[ -x "$h" ] || fail "make install DESTDIR=: no helper in DESTDIR/PREFIX/sbin"
grep -qx 'PATH="/usr/local/bin:.*' "$h" || fail "the helper under DESTDIR does not put /usr/local/bin first: $(cat "$h")"
grep -qF "$T/dest" "$h" "$T/dest/usr/local/lib/pkgconfig/batchfs-gpu.pc" && fail "an installed file names DESTDIR"
ok "make install DESTDIR=D PREFIX=/usr/local: every file under D/usr/local, none naming D"
