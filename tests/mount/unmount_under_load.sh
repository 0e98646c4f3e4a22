#!/usr/bin/env bash
# tests/mount/unmount_under_load.sh — the daemon is stopped while three readers loop over
# batches (cat and dd, epoch after epoch, 3.3 MB batches of 64 images): (a) fusermount3 -u
# (retried while busy, then lazy -z, as a user would), (b) SIGTERM, (c) SIGINT, (d)
# SIGHUP. Each time: the daemon exits within 10 s, by itself, with status 0 or a clean
# non-zero status and a message — never by a signal (no crash, no core); the mount is gone;
# no reader hangs (every read runs under `timeout`); a reader either fails with an error
# or completes, and every file a reader completed equals the engine's bytes (no partial
# or garbage batch ever looks complete). Then, on an idle mount, a SIGTERM that one of the
# engine's threads handles must end the daemon too, while SIGHUP ignored at start (nohup)
# stays ignored; and on a relative mountpoint, as a user types it, SIGINT must unmount it.
# About 20 s.
. "$(dirname "$0")/lib.sh"
require_fuse

"$GEN" "$T/images" 4 80 160 400 9 # 320 images: 5 batches of 64 an epoch
"$MKBATCHFS" --quiet "$T/images" "$T/data.bfs"
OPTS=batch=64,size=128
NB=5
NREADERS=3
M=$T/mnt
mkdir "$M" "$T/ref"
# stderr texts a reader may meet once the daemon goes away (ENOENT: the mount is gone)
ERRORS="Transport endpoint is not connected|Software caused connection abort|Input/output error|No such file or directory|Interrupted system call"
# the daemon logs nothing in a clean stop, or says it was interrupted
expect_log '^batchfs: epoch [0-9]+ batch [0-9]+: .*(shut|interrupt|exit)'

# reader R DIR: epochs R, R+NREADERS, ..., batches 0..NB-1, one file each; stops at the
# first failure (its status and stderr kept as .rc/.err) or when $T/stop appears.
reader() {
    local r=$1 dir=$2 e k f rc
    mkdir -p "$dir"
    for ((e = r; e < 1000; e += NREADERS)); do
        for ((k = 0; k < NB; k++)); do
            [ ! -e "$T/stop" ] || return 0
            f=$dir/e${e}_b$k
            rc=0
            if ((r % 2)); then
                timeout 30 dd if="$M/epoch/$e/batch_$k" of="$f.part" bs=1M status=none 2>"$f.err" || rc=$?
            else
                timeout 30 cat "$M/epoch/$e/batch_$k" >"$f.part" 2>"$f.err" || rc=$?
            fi
            if [ $rc -eq 0 ]; then
                mv "$f.part" "$f" && rm -f "$f.err"
            else
                echo $rc >"$f.rc"
                return 0
            fi
        done
    done
}

# scenario NAME STOP_COMMAND...
scenario() {
    local name=$1 i r
    shift
    local out=$T/out_$name
    rm -f "$T/stop"
    mount_bfs "$T/data.bfs" "$M" -o "$OPTS,epochs=1000"
    local daemon=$DAEMON_PID log=$DAEMON_LOG
    local readers=()
    for ((r = 0; r < NREADERS; r++)); do
        reader $r "$out/r$r" &
        readers+=($!) BG_PIDS+=($!)
    done
    # under load: every reader has completed a batch and is reading more
    for i in $(seq 200); do
        [ "$(find "$out" -name 'e*_b*' ! -name '*.*' | wc -l)" -ge $((2 * NREADERS)) ] && break
        [ "$i" -lt 200 ] || fail "$name: readers completed no batches in 20 s"
        sleep 0.1
    done
    sleep 0.3
    "$@"
    wait_exit "$daemon" 10 || fail "$name: the daemon is still running 10 s after the stop"
    forget "$daemon"
    local status=$WAIT_RC
    [ "$status" -lt 128 ] || fail "$name: the daemon died of signal $((status - 128)) (a crash)"
    if grep -q "Sanitizer" "$log"; then fail "$name: a sanitizer report in the daemon log"; fi
    if [ "$status" -ne 0 ] && ! grep -q '^batchfs: ' "$log"; then
        fail "$name: the daemon exited with status $status without a message"
    fi
    touch "$T/stop"
    for pid in "${readers[@]}"; do
        wait "$pid" || fail "$name: reader $pid failed"
    done
    if is_mounted "$M"; then fail "$name: $M is still mounted after the daemon exited"; fi
    [ -d "$M" ] && [ -z "$(ls -A "$M")" ] || fail "$name: $M is not an empty directory again"

    # every completed file is the engine's batch; every failure an error, never a hang
    local f base e k done_n=0 failed=0 msgs=
    for f in "$out"/r*/e*_b*; do
        base=${f##*/}
        case $base in
        *.rc)
            failed=$((failed + 1))
            rc=$(cat "$f")
            [ "$rc" -ne 124 ] || fail "$name: ${f%.rc}: the read hung (timeout 30 s)"
            msg=$(cat "${f%.rc}.err")
            [[ $msg =~ $ERRORS ]] || fail "$name: ${f%.rc}: exit $rc, unexpected error '$msg'"
            msgs+="${BASH_REMATCH[0]}; "
            ;;
        *.err | *.part) ;;
        *)
            e=${base%_b*} e=${e#e} k=${base#*_b}
            [ -f "$T/ref/$base" ] || ref_batch "$T/data.bfs" "$OPTS" "$e" "$k" "$T/ref/$base"
            cmp -s "$f" "$T/ref/$base" ||
                fail "$name: $f ($(stat -c %s "$f") bytes) completed but differs from the engine's batch ($(stat -c %s "$T/ref/$base") bytes)"
            done_n=$((done_n + 1))
            ;;
        esac
    done
    ok "$name: daemon exited with status $status; $done_n complete batches all correct; $failed readers stopped by: ${msgs:-(none)}"
    rm -rf "$out"
}

stop_fusermount() {
    local i
    for i in $(seq 10); do # busy while files are open: a user retries, then goes lazy
        if fusermount3 -u "$M" 2>"$T/fusermount.err"; then
            echo "   fusermount3 -u succeeded (try $i)"
            return 0
        fi
        grep -q "busy" "$T/fusermount.err" || { cat "$T/fusermount.err" >&2; fail "fusermount3 -u $M"; }
        sleep 0.1
    done
    echo "   fusermount3 -u: busy 10 times; fusermount3 -u -z"
    fusermount3 -u -z "$M" || fail "fusermount3 -u -z $M"
}
stop_signal() { kill -"$1" "$DAEMON_PID"; } # the daemon mount_bfs just started
scenario fusermount stop_fusermount
scenario SIGTERM stop_signal TERM
scenario SIGINT stop_signal INT
scenario SIGHUP stop_signal HUP

# stopped_idle NAME SIGNAL MNT: the idle daemon just signalled exits 0 within 10 s and
# leaves MNT unmounted.
stopped_idle() {
    wait_exit "$DAEMON_PID" 10 || fail "$1: the daemon is still running 10 s after $2"
    forget "$DAEMON_PID"
    [ "$WAIT_RC" = 0 ] || fail "$1: the daemon exited with status $WAIT_RC after $2"
    if is_mounted "$3"; then fail "$1: $3 is still mounted (dead) after the daemon exited"; fi
}

# ---- a signal handled by a thread other than the session loop's, on an idle mount -------
# The kernel gives a process's signal to any of its threads that does not block it; the
# handler only flags the session's end, and libfuse < 3.18 then waits for the next request
# before its loop returns: on an idle mount, for ever.
# tgkill sends SIGTERM to one of the engine's threads directly (one that does not block
# it: libfuse's request threads do), so the loop's thread never sees it.
mount_bfs "$T/data.bfs" "$M" -o "$OPTS"
cat "$M/epoch/0/batch_0" >/dev/null
tid=$(for t in /proc/"$DAEMON_PID"/task/*; do
    t=${t##*/}
    [ "$t" != "$DAEMON_PID" ] || continue
    blk=$(awk '/^SigBlk:/ { print $2 }' /proc/"$DAEMON_PID"/task/"$t"/status)
    if (((0x$blk >> 14) & 1)); then continue; fi # (bit 14: SIGTERM blocked)
    echo "$t"
    break
done)
[ -n "$tid" ] || fail "worker thread: no thread of daemon $DAEMON_PID takes SIGTERM"
python3 -c 'import ctypes, sys; l = ctypes.CDLL(None, use_errno=True); sys.exit(l.tgkill(int(sys.argv[1]), int(sys.argv[2]), 15) != 0)' \
    "$DAEMON_PID" "$tid" || fail "tgkill $DAEMON_PID $tid SIGTERM"
stopped_idle "worker thread" "a SIGTERM its thread $tid handled" "$M"
ok "worker thread: a SIGTERM handled by thread $tid (not the session loop's) ends an idle daemon"

# ---- a stop signal ignored when the daemon starts stays ignored (README: under nohup,
# SIGHUP does nothing; libfuse installs its handlers only over the default action)
DAEMON_WRAP=(env --ignore-signal=HUP)
mount_bfs "$T/data.bfs" "$M" -o "$OPTS"
DAEMON_WRAP=()
kill -HUP "$DAEMON_PID"
sleep 1
kill -0 "$DAEMON_PID" 2>/dev/null || fail "nohup: SIGHUP stopped a daemon started with SIGHUP ignored"
ref_batch "$T/data.bfs" "$OPTS" 0 1 "$T/ref/nohup_b1"
cmp -s "$M/epoch/0/batch_1" "$T/ref/nohup_b1" || fail "nohup: after SIGHUP, batch_1 is not the engine's"
unmount_bfs "$M"
ok "nohup: a daemon started with SIGHUP ignored keeps serving after SIGHUP, unmounts cleanly"

# ---- a relative mountpoint, as a user types it: a signal must still unmount it ---------
# (the daemon runs in / once mounted, so it must keep the mountpoint's absolute path)
mkdir "$T/rel"
mount_bfs data.bfs rel -o "$OPTS" # relative to the daemon's working directory, $T
cat "$T/rel/epoch/0/batch_0" >/dev/null
kill -INT "$DAEMON_PID"
stopped_idle "relative mountpoint ('batchfs data.bfs rel -f')" SIGINT "$T/rel"
ok "relative mountpoint: SIGINT unmounts it"
