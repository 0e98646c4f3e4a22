#!/usr/bin/env bash
# tests/mount/descriptors.sh — a daemon of small batches within its descriptor limit.
# Under FUSE passthrough every finished batch the mount keeps is a file (a memfd: one
# descriptor); before the executor budgeted them, a daemon at `ulimit -n 64` ran out
# after ~60 batches (every later batch of an ImageFolder failed: its JPEGs could not be
# opened) and aborted at unmount ("libgcc_s.so.1 must be installed for pthread_cancel to
# work"). An ImageFolder of 160 tiny images, batch=1 (160 batches an epoch), read by one
# Python process from two mounts at once, the second without a limit as the reference:
#   1. `ulimit -n 64`: 6 epochs (960 batches), every batch equal to the reference's;
#      /stats: fd_limit 64, batch files within file_budget, evictions; clean unmount;
#   2. `ulimit -n 1024` (soft and hard, systemd's soft default): 10 epochs, the same;
#   3. a soft limit below the hard one is raised to it at start (/stats fd_limit);
#   4. descriptors exhausted under the daemon (its limit lowered to 4 with prlimit while
#      mounted): a batch that needs one fails with an error naming the limit, not as a bad
#      sample, the batches it holds are still served, and the unmount is clean (status 0,
#      no abort).
# No log line about "Too many open files" as a sample's fault, no "libgcc_s". ~15 s.
. "$(dirname "$0")/lib.sh"
require_fuse

"$GEN" "$T/images" 4 40 16 24 5 # 160 images
OPTS=batch=1,size=8,epochs=20
M=$T/lim R=$T/ref
mkdir "$M" "$R"
expect_log '^batchfs: note: the descriptor limit \(ulimit -n 64\) leaves room for [0-9]+ batch files: '
expect_log '^batchfs: epoch 0 batch 1[0-9]{2}: out of file descriptors, all 4 the daemon may open are in use \(raise its limit: `ulimit -n` before starting batchfs, LimitNOFILE= under systemd; then read the batch again\): sample [0-9]+ \(.*\) in epoch 0 batch 1[0-9]{2}: Too many open files$'

cat >"$T/readall.py" <<'EOF'
import sys, bfs
m, ref, e0, e1 = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
nb = 160
for e in range(e0, e1):
    for k in range(nb):
        p = "/epoch/%d/batch_%d" % (e, k)
        with open(m + p, "rb") as f:
            a = f.read()
        with open(ref + p, "rb") as f:
            b = f.read()
        if a != b:
            sys.exit("%s%s: %d bytes differ from the reference's %d" % (m, p, len(a), len(b)))
st = bfs.stats(m)
c = st["cache"]
print("ok - %d batches equal to the reference; fd_limit %d, batch files %d of a budget of %d, "
      "%d evictions, %d refused, passthrough %s"
      % ((e1 - e0) * nb, c["fd_limit"], c["files"], c["file_budget"], c["evictions"],
         c["files_refused"], st["passthrough"]["active"]))
if st["batches"]["failed"] or st["reads"]["errors"]:
    sys.exit("failures: %s %s" % (st["batches"], st["reads"]))
if c["files"] > c["file_budget"] and st["passthrough"]["active"]:
    sys.exit("%d batch files held, over the budget of %d" % (c["files"], c["file_budget"]))
print(c["fd_limit"], c["file_budget"], c["evictions"], 1 if st["passthrough"]["active"] else 0)
EOF

no_fd_trouble() { # LOG: no descriptor trouble blamed on a sample, no abort
    ! grep -E "libgcc_s|Aborted|Too many open files" "$1" || fail "descriptor trouble in $1"
}

mount_bfs "$T/images" "$R" -o "$OPTS"

# 1. ulimit -n 64
DAEMON_WRAP=(bash -c 'ulimit -n 64 && exec "$@"' with-limit)
mount_bfs "$T/images" "$M" -o "$OPTS"
DAEMON_WRAP=()
pyx "$T/readall.py" "$M" "$R" 0 6 >"$T/out1" || fail "ulimit -n 64: $(cat "$T/out1")"
head -1 "$T/out1"
read -r lim budget evictions pt < <(tail -1 "$T/out1")
[ "$lim" = 64 ] || fail "ulimit -n 64: /stats cache.fd_limit is $lim"
if [ "$pt" = 1 ]; then
    [ "$budget" -gt 0 ] && [ "$budget" -lt 64 ] || fail "ulimit -n 64: file budget $budget"
    [ "$evictions" -gt 0 ] || fail "ulimit -n 64: no eviction (960 batch files in a budget of $budget?)"
else
    echo "note: no FUSE passthrough here: batches are not files, the budget is not exercised"
fi
log1=$DAEMON_LOG
unmount_bfs "$M"
no_fd_trouble "$log1"
ok "ulimit -n 64: 960 batches right, clean unmount"

# 2. ulimit -n 1024, soft and hard
DAEMON_WRAP=(bash -c 'ulimit -n 1024 && exec "$@"' with-limit)
mount_bfs "$T/images" "$M" -o "$OPTS"
DAEMON_WRAP=()
pyx "$T/readall.py" "$M" "$R" 6 16 >"$T/out2" || fail "ulimit -n 1024: $(cat "$T/out2")"
head -1 "$T/out2"
read -r lim budget evictions pt < <(tail -1 "$T/out2")
[ "$lim" = 1024 ] || fail "ulimit -n 1024: /stats cache.fd_limit is $lim"
[ "$pt" = 0 ] || [ "$evictions" -gt 0 ] || fail "ulimit -n 1024: 1,600 batches, no eviction"
log2=$DAEMON_LOG
unmount_bfs "$M"
no_fd_trouble "$log2"
ok "ulimit -n 1024: 1,600 batches right, clean unmount"

# 3. a soft limit under the hard one: raised at start
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -gt 256 ]; then
    DAEMON_WRAP=(bash -c 'ulimit -Sn 256 && exec "$@"' with-limit)
    mount_bfs "$T/images" "$M" -o "$OPTS"
    DAEMON_WRAP=()
    got=$(pyx -c 'import bfs, sys; print(bfs.stats(sys.argv[1])["cache"]["fd_limit"])' "$M")
    [ "$got" = "$hard" ] || fail "soft limit 256, hard $hard: the daemon's limit is $got"
    unmount_bfs "$M"
    ok "soft limit 256 raised to the hard limit, $hard"
else
    echo "note: hard limit $hard: nothing to raise"
fi

# 4. descriptors exhausted under a running daemon
mount_bfs "$T/images" "$M" -o "$OPTS"
pid=$DAEMON_PID
for k in 0 1 2; do cat "$M/epoch/0/batch_$k" >/dev/null || fail "batch $k"; done
if ! prlimit --pid "$pid" --nofile=4:4 2>"$T/prlimit.err"; then
    echo "SKIP: $CASE: part 4: cannot lower the daemon's limit ($(cat "$T/prlimit.err"))"
    unmount_bfs "$M"
    exit 0
fi
if cat "$M/epoch/0/batch_150" >/dev/null 2>"$T/cat.err"; then
    fail "a batch computed with no descriptor left (its JPEG cannot be opened)"
fi
cat "$M/epoch/0/batch_1" >/dev/null || fail "a batch read before could not be read again"
grep -q "out of file descriptors, all 4 the daemon may open are in use" "$DAEMON_LOG" ||
    fail "no error naming the descriptor limit in the log"
log4=$DAEMON_LOG
unmount_bfs "$M" # (exit status 0: no abort at the threads' cancel)
! grep -E "libgcc_s|Aborted" "$log4" || fail "abort at unmount"
ok "no descriptor left: the batch failed naming the limit ($(cat "$T/cat.err")), clean unmount"
unmount_bfs "$R"
