#!/usr/bin/env bash
# tests/mount/interrupt.sh — a reader waiting for a batch that hangs can be killed.
# The source is a hung file system: an ImageFolder whose last sample is a symlink into a
# second batchfs mount, whose daemon is then stopped (SIGSTOP), so the worker that reads
# that sample waits for good. A reader of the batch waits in the daemon; `kill -9` makes
# the kernel send FUSE INTERRUPT, which must end the wait with EINTR at once (before, the
# reader stayed in D state until the source came back). SIGINT likewise. /stats counts
# the interrupted requests. Once the source resumes, the batch is served (the odd sample
# substituted) and both mounts unmount cleanly. A few seconds.
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

resume
timeout 30 cat "$M1/epoch/0/batch_0" >"$T/b0" || fail "the batch after the source resumed"
[ "$(stat -c %s "$T/b0")" = "$(stat -c %s "$M1/epoch/0/batch_0")" ] || fail "short batch"
unmount_bfs "$M1"
unmount_bfs "$M2"
ok "served once the source resumed; both mounts unmount cleanly"
