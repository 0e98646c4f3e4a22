#!/usr/bin/env bash
# tests/mount/interrupt.sh — a reader waiting for a batch that hangs can be killed.
# The source is a hung file system: an ImageFolder whose last sample is a symlink into a
# second batchfs mount, whose daemon is then stopped (SIGSTOP), so the worker that reads
# that sample waits for good. A reader of the batch waits in the daemon; `kill -9` makes
# the kernel send FUSE INTERRUPT, which must end the wait with EINTR at once (before, the
# reader stayed in D state until the source came back). SIGTERM likewise. /stats counts
# the interrupted requests. An open of epoch/N/next (group=) waiting for its claimed batch
# likewise, 3 times: each returns its claim untried. Once the source resumes, the batch is
# served (the odd sample substituted), by next too (the returned claim, then ENODATA), and
# the mounts unmount cleanly. A few seconds.
. "$(dirname "$0")/lib.sh"
require_fuse

"$GEN" "$T/a" 1 8 64 200 3
"$GEN" "$T/src" 1 8 64 200 5
M1=$T/m1 M2=$T/m2
mkdir "$M1" "$M2"
mount_bfs "$T/a" "$M2" -o batch=2,size=16
P2=$DAEMON_PID
ln -s "$M2/epoch/0/batch_0" "$T/src/class_000/zz_hung.jpg"
expect_log '^batchfs: bad sample 8 \(.*/zz_hung\.jpg\): .*; substituted by sample [0-9]+ \(bad_sample=substitute\)$'
mount_bfs "$T/src" "$M1" -o batch=9,size=32
P1=$DAEMON_PID
M3=$T/m3 # the same source with group=: one batch per epoch, claimed by opens of next
mkdir "$M3"
mount_bfs "$T/src" "$M3" -o batch=9,size=32,group=int-$$-$RANDOM

resume() { kill -CONT "$P2" 2>/dev/null || true; }
fail() { # resume the source first, so that cleanup can unmount
    resume
    echo "FAIL: $CASE: $*" >&2
    exit 1
}
gone_within() { # PID SECONDS
    local i
    for i in $(seq $(($2 * 10))); do
        kill -0 "$1" 2>/dev/null || return 0
        sleep 0.1
    done
    return 1
}

kill -STOP "$P2"
for sig in KILL TERM; do
    cat "$M1/epoch/0/batch_0" >/dev/null 2>&1 &
    reader=$!
    sleep 1
    kill -0 "$reader" 2>/dev/null || fail "the reader of a hung batch returned (SIG$sig round)"
    kill -"$sig" "$reader"
    if ! gone_within "$reader" 10; then
        grep -E '^State' /proc/"$reader"/status >&2 || true
        fail "a reader waiting for a hung batch ignored SIG$sig for 10 s"
    fi
    wait "$reader" 2>/dev/null || true
    ok "SIG$sig ends a reader's wait for a hung batch"
done
pyx - "$M1" <<'EOF' || fail "/stats while the source hangs"
import sys, bfs
st = bfs.stats(sys.argv[1])
if st["reads"]["interrupted"] < 2:
    sys.exit("/stats reads.interrupted = %d after two interrupted readers" % st["reads"]["interrupted"])
EOF
ok "/stats counts the interrupted requests"

# an open of epoch/0/next waits for its claimed batch: the same, 3 times (KILL, TERM,
# KILL); each interrupted open returns its claim untried, so the epoch's one batch is
# not lost after 3 (a failed batch is dropped after 3 tries)
for sig in KILL TERM KILL; do
    cat "$M3/epoch/0/next" >/dev/null 2>&1 &
    reader=$!
    sleep 1
    kill -0 "$reader" 2>/dev/null || fail "the opener of next on a hung batch returned (SIG$sig round)"
    kill -"$sig" "$reader"
    if ! gone_within "$reader" 10; then
        grep -E '^State' /proc/"$reader"/status >&2 || true
        fail "an open of next waiting for a hung batch ignored SIG$sig for 10 s"
    fi
    wait "$reader" 2>/dev/null || true
done
pyx - "$M3" <<'EOF' || fail "/stats of the group mount while the source hangs"
import sys, bfs
st = bfs.stats(sys.argv[1])
g, r = st["group"], st["reads"]
if r["interrupted"] != 3 or g["given_back"] != 3 or g["lost"] != 0 or g["claims"] != 0:
    sys.exit("reads.interrupted %d, group given_back %d lost %d claims %d; want 3 3 0 0"
             % (r["interrupted"], g["given_back"], g["lost"], g["claims"]))
EOF
ok "SIGKILL, SIGTERM, SIGKILL end opens of next waiting for a hung batch; the claim is returned untried"

resume
timeout 30 cat "$M1/epoch/0/batch_0" >"$T/b0" || fail "the batch after the source resumed"
[ "$(stat -c %s "$T/b0")" = "$(stat -c %s "$M1/epoch/0/batch_0")" ] || fail "short batch"
# the claim interrupted 3 times is handed out once more, then the epoch is used up
timeout 30 python3 - "$M3/epoch/0/next" "$T/b0" <<'EOF' || fail "next after the source resumed"
import errno, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
k = os.getxattr(fd, "user.batchfs.batch").decode()
data = b""
while True:
    c = os.read(fd, 1 << 20)
    if not c:
        break
    data += c
os.close(fd)
if k != "0" or data != open(sys.argv[2], "rb").read():
    sys.exit("next gave batch %s (%d bytes), not batch 0" % (k, len(data)))
try:
    os.open(sys.argv[1], os.O_RDONLY)
    sys.exit("a second open of next succeeded: the epoch has one batch")
except OSError as e:
    if e.errno != errno.ENODATA:
        raise
EOF
unmount_bfs "$M1"
unmount_bfs "$M3"
unmount_bfs "$M2"
ok "served once the source resumed (next: the returned claim, then ENODATA); the mounts unmount cleanly"
