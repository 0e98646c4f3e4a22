#!/usr/bin/env bash
# tests/mount/logs.sh — where a background daemon's messages go (issue 21, item 2):
#  - log=FILE: each line appended with an ISO 8601 UTC time stamp, the pid and the mount
#    point; a bad sample is logged with its file and reason, and /stats lists it in
#    recent_bad_samples; the daemon's last lines are written before it exits;
#  - log= naming a file that cannot be opened: the mount is refused on the terminal;
#  - no syslog daemon (BATCHFS_SYSLOG_SOCKET names a missing socket): in the background the
#    lines go to $XDG_RUNTIME_DIR/batchfs/MNT-ESCAPED.log (0600, directory 0700) and the
#    terminal says so in one line; a log directory that is a symbolic link or open to
#    others is refused with a warning (the mount goes on); with -f and log=syslog the lines
#    stay on stderr, which says why;
#  - by default in the background, syslog (LOG_DAEMON, tagged with the mount point):
#    checked by listening on /dev/log when no syslog daemon holds it (root only), else
#    skipped with the reason.
# 16 images (one not a JPEG), batch=4, size=32. A few seconds.
. "$(dirname "$0")/lib.sh"
require_fuse

"$GEN" "$T/src" 2 8 64 200 4
printf 'not a jpeg' >"$T/src/class_001/img_00002.jpg"
M=$T/mnt
mkdir "$M"
MOUNTS+=("$M") DAEMONS+=("") LOGS+=("") # background mounts: the cleanup unmounts them
wait_gone() { # PID: the background daemon exits after its unmount
    local i
    for i in $(seq 100); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
    fail "daemon $1 still running 10 s after its unmount"
}
read_all() { local k; for k in 0 1 2 3; do cat "$M/epoch/0/batch_$k" >/dev/null; done; }

# ---- log=FILE ----------------------------------------------------------------------------
"$BATCHFS" "$T/src" "$M" -o batch=4,size=32,log="$T/daemon.log" || fail "background mount with log=FILE"
is_mounted "$M" || fail "not mounted"
pid=$(pgrep -n -f "batchfs $T/src $M") || fail "no daemon"
read_all
pyx - "$M" <<'EOF' || fail "/stats recent_bad_samples"
import sys, bfs
st = bfs.stats(sys.argv[1])
bad = st["recent_bad_samples"]
if len(bad) != 1 or not bad[0]["name"].endswith("class_001/img_00002.jpg") or \
        bad[0]["reason"] != "not a JPEG file" or bad[0]["index"] != 10:
    sys.exit("recent_bad_samples = %r" % bad)
EOF
fusermount3 -u "$M"
wait_gone "$pid"
re="^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z batchfs\[$pid\] \[$M\] bad sample 10 \(.*/class_001/img_00002\.jpg\): not a JPEG file; substituted by sample [0-9]+ \(bad_sample=substitute\)$"
grep -Eq "$re" "$T/daemon.log" || { cat "$T/daemon.log" >&2; fail "log=FILE: no time-stamped bad-sample line"; }
ok "log=FILE: time stamp, pid, mount point and the bad sample's file and reason; /stats recent_bad_samples"

# ---- log= that cannot be opened: refused where the user sees it ---------------------------
set +e
"$BATCHFS" "$T/src" "$M" -o batch=4,size=32,log="$T/no/such/dir/x.log" 2>"$T/err"
rc=$?
set -e
[ "$rc" = 1 ] || fail "log= in a missing directory: exit $rc, want 1"
grep -q "log=$T/no/such/dir/x.log: No such file or directory" "$T/err" || { cat "$T/err" >&2; fail "log=: no message"; }
is_mounted "$M" && fail "log= in a missing directory: mounted anyway"
ok "log= naming a file that cannot be opened: refused on the terminal, nothing mounted"

# ---- no syslog daemon (containers): a file in the runtime directory, said on the terminal ----
# BATCHFS_SYSLOG_SOCKET (tests/README.md) makes the daemon check that path instead of /dev/log
mdir=$(printf '%s' "${M#/}" | tr / -)
flog=$XDG_RUNTIME_DIR/batchfs/$mdir.log
BATCHFS_SYSLOG_SOCKET=$T/no-syslog "$BATCHFS" "$T/src" "$M" -o batch=4,size=32 2>"$T/err" ||
    { cat "$T/err" >&2; fail "background mount without syslog"; }
pid=$(pgrep -n -f "batchfs $T/src $M") || fail "no daemon"
want="batchfs: no syslog socket ($T/no-syslog: No such file or directory): logging to $flog instead"
[ "$(cat "$T/err")" = "$want" ] || { cat "$T/err" >&2; fail "without syslog: the terminal did not get: $want"; }
read_all
fusermount3 -u "$M"
wait_gone "$pid"
re="^[0-9]{4}-[0-9-]+T[0-9:.]+Z batchfs\[$pid\] \[$M\] bad sample 10 \(.*/class_001/img_00002\.jpg\): not a JPEG file; substituted"
grep -Eq "$re" "$flog" || { cat "$flog" >&2; fail "without syslog: no bad-sample line in $flog"; }
[ "$(stat -c '%a %u' "$flog")" = "600 $(id -u)" ] && [ "$(stat -c '%a %u' "$(dirname "$flog")")" = "700 $(id -u)" ] ||
    fail "log file or directory not private: $(stat -c '%n %a %u' "$flog" "$(dirname "$flog")")"
ok "no syslog socket in the background: the terminal names $flog (0600, in a 0700 directory); the lines are there"

# a mount refused after going to the background (Redis unreachable with remote_fallback=wait)
# makes no log file and names none: the choice is made once the mount works
rm -f "$flog"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
rc=0
BATCHFS_SYSLOG_SOCKET=$T/no-syslog "$BATCHFS" "$T/src" "$M" \
    -o batch=4,size=32,remote=redis://127.0.0.1:$port,remote_fallback=wait 2>"$T/err" || rc=$?
[ $rc = 1 ] || { cat "$T/err" >&2; fail "a mount refused in the background: exit $rc"; }
grep -q "remote_fallback=wait" "$T/err" || { cat "$T/err" >&2; fail "the refusal did not reach the terminal"; }
grep -q "logging to" "$T/err" && { cat "$T/err" >&2; fail "a refused mount named a log file"; }
[ ! -e "$flog" ] || fail "a refused mount made its log file $flog"
ok "a mount refused in the background: the reason on the terminal, no log file"

# a log directory that is a symbolic link, or not private: refused, said, the mount goes on
for kind in symlink open; do
    export XDG_RUNTIME_DIR=$T/rt-$kind
    mkdir -m 700 "$XDG_RUNTIME_DIR" "$T/elsewhere-$kind"
    if [ $kind = symlink ]; then ln -s "$T/elsewhere-$kind" "$XDG_RUNTIME_DIR/batchfs"; else mkdir -m 755 "$XDG_RUNTIME_DIR/batchfs"; fi
    BATCHFS_SYSLOG_SOCKET=$T/no-syslog "$BATCHFS" "$T/src" "$M" -o batch=4,size=32 2>"$T/err" ||
        { cat "$T/err" >&2; fail "background mount without syslog, log directory a $kind"; }
    pid=$(pgrep -n -f "batchfs $T/src $M") || fail "no daemon"
    fusermount3 -u "$M"
    wait_gone "$pid"
    case $kind in
    symlink) why="log directory $XDG_RUNTIME_DIR/batchfs is a symbolic link: remove it" ;;
    open) why="log directory $XDG_RUNTIME_DIR/batchfs is not private to this user (owner uid $(id -u), mode 755" ;;
    esac
    grep -qF "batchfs: warning: no syslog socket ($T/no-syslog: No such file or directory), and $why" "$T/err" &&
        grep -qF "messages are lost (give -o log=FILE)" "$T/err" || { cat "$T/err" >&2; fail "log directory a $kind: no clear warning"; }
    [ -z "$(ls -A "$T/elsewhere-$kind")" ] || fail "a log file was written through the $kind"
done
export XDG_RUNTIME_DIR=$T/run
ok "a log directory that is a symbolic link or open to others: refused with a warning, nothing written there"

# -f with log=syslog and no syslog: stderr keeps the lines, and says why
export BATCHFS_SYSLOG_SOCKET=$T/no-syslog
expect_log "^batchfs: log=syslog: no syslog socket \($T/no-syslog: No such file or directory\): messages stay on stderr\$"
expect_log "^batchfs: bad sample 10 \(.*img_00002\.jpg\): not a JPEG file; substituted by sample [0-9]+ \(bad_sample=substitute\)\$"
mount_bfs "$T/src" "$M" -o batch=4,size=32,log=syslog,threads=2
read_all
# the daemon's threads are named for what they do (top -H, ps -L, perf; docs/architecture.md)
names=$(cat /proc/"$DAEMON_PID"/task/*/comm | sort | tr '\n' ' ')
for want in bfs-worker-0 bfs-worker-1 bfs-reaper bfs-tuner bfs-watch; do
    case " $names" in *" $want "*) ;; *) fail "no thread named $want among: $names" ;; esac
done
ok "the daemon's threads named: $names"
unmount_bfs "$M"
unset BATCHFS_SYSLOG_SOCKET
grep -q "messages stay on stderr" "$DAEMON_LOG" && grep -q "bad sample 10" "$DAEMON_LOG" ||
    { cat "$DAEMON_LOG" >&2; fail "-f, log=syslog, no syslog: the lines did not stay on stderr"; }
ok "-f with log=syslog and no syslog socket: the lines stay on stderr, which says so"

# ---- syslog, the default in the background --------------------------------------------------
if [ -e /dev/log ]; then
    echo "SKIP: $CASE: syslog: /dev/log exists (a syslog daemon holds it; this test does not read its files)"
elif [ "$(id -u)" != 0 ]; then
    echo "SKIP: $CASE: syslog: listening on /dev/log needs root"
else
    python3 - "$T/syslog.txt" <<'EOF' &
import os, socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("/dev/log")
s.settimeout(15)
with open(sys.argv[1], "w") as out:
    out.write("ready\n"); out.flush()
    try:
        while True:
            out.write(s.recv(8192).decode(errors="replace") + "\n"); out.flush()
    except socket.timeout:
        pass
    finally:
        os.unlink("/dev/log")
EOF
    lpid=$!
    BG_PIDS+=("$lpid")
    for _ in $(seq 50); do [ -s "$T/syslog.txt" ] && break; sleep 0.1; done
    "$BATCHFS" "$T/src" "$M" -o batch=4,size=32 || fail "background mount (syslog)"
    pid=$(pgrep -n -f "batchfs $T/src $M") || fail "no daemon"
    read_all
    fusermount3 -u "$M"
    wait_gone "$pid"
    kill "$lpid" 2>/dev/null; wait "$lpid" 2>/dev/null || true
    rm -f /dev/log
    # <28>: facility daemon (3) x 8 + warning (4)
    grep -Eq "^<28>.* batchfs\[$pid\]: \[$M\] bad sample 10 \(.*img_00002\.jpg\): not a JPEG file" "$T/syslog.txt" ||
        { cat "$T/syslog.txt" >&2; fail "syslog: no bad-sample message at daemon.warning"; }
    ok "syslog by default in the background: LOG_DAEMON, warning, tagged with pid and mount point"
fi
echo "PASS: logs"
