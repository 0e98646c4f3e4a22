# tests/mount/lib.sh — sourced by every tests/mount/*.sh case. Executed directly (as
# tests/run.sh does with every tests/mount/*.sh), it tests itself: see the end of the file.
#
# A case is run from anywhere as `BUILD=build bash tests/mount/CASE.sh` (tests/run.sh does
# so from the repository root); exit 0 pass, 77 skip, anything else fail. This file:
#   - cds to the repository root, makes BUILD absolute, names the programs;
#   - makes a temporary directory $T (and $T/run, exported as XDG_RUNTIME_DIR: where
#     background daemons without syslog log) and installs `trap cleanup EXIT`, which always
#     unmounts what the case mounted (fusermount3 -u, then lazy -z), stops the daemons
#     (TERM, then KILL), checks that each exited 0, prints their logs when the case
#     failed, and — when it passed — scans every daemon log for lines the case did not
#     declare (expect_log);
#   - require_fuse: exit 77 with a loud message only when the machine has no usable
#     /dev/fuse or no fusermount3;
#   - mount_bfs SOURCE MNT ARGS...: `batchfs SOURCE MNT ARGS... -f` in the background,
#     log in $T/daemon.N.log, waits (10 s at most) until the kernel lists the mount;
#   - unmount_bfs MNT: fusermount3 -u, then the daemon must exit 0 within 10 s;
#   - wait_exit PID SECONDS: wait for a daemon to exit; when it does not, show_stacks
#     prints where each of its threads waits (kernel wait channel and stack, gdb's
#     backtraces), so a hang in CI says where it hangs;
#   - helpers: fail/ok, need_py (the numpy venv as $PY), is_mounted, wait_idle (poll
#     /stats until no batch is in flight), ref_batch (engine_tool's in-process bytes),
#     same_remote (a file and its copy at an s3:// or https:// URL serve the same bytes),
#     gen_tokens (a small token dataset),
#     and $T/bfs.py, a stdlib-only Python module for safetensors headers, tensors and
#     /stats (`pyx` runs python3 with it importable).
# Like libfuse's test/cases and squashfuse's ll-smoke: one script per case.

set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
BATCHFS=$BUILD/batchfs
MKBATCHFS=$BUILD/mkbatchfs
GEN=$BUILD/tests/gen_imagefolder
ENGINE_TOOL=$BUILD/tests/engine_tool
CASE=$(basename "${BASH_SOURCE[1]:-$0}" .sh)

for _p in "$BATCHFS" "$MKBATCHFS" "$GEN" "$ENGINE_TOOL"; do
    if [ ! -x "$_p" ]; then
        echo "FAIL: $CASE: $_p is missing: run 'make all-tests' (BUILD=$BUILD)" >&2
        exit 1
    fi
done

T=$(mktemp -d "${TMPDIR:-/tmp}/batchfs-mount-$CASE.XXXXXX")
# a daemon in the background with no syslog daemon to hear it logs to a file in the runtime
# directory (fs/log.h): in $T, never /run/batchfs
mkdir -m 700 "$T/run"
export XDG_RUNTIME_DIR=$T/run
MOUNTS=()      # mount points mounted by mount_bfs, in order
DAEMONS=()     # the matching daemon pids ('' once reaped)
LOGS=()        # the matching daemon logs
BG_PIDS=()     # other background processes of the case (readers): killed at exit
# extended regexes of daemon log lines the case expects; the autotuner's info lines
# (a change of workers or cache budget) come with timing, so any case may see them
EXPECTED=('^batchfs: autotune: [0-9]+ workers? \(.*\); cache [0-9]+ MiB \(.*\)$')
DAEMON_PID='' DAEMON_LOG=''
DAEMON_WRAP=() # a command mount_bfs runs the daemon through (after resetting its signals)

fail() {
    echo "FAIL: $CASE: $*" >&2
    exit 1
}
ok() { echo "ok - $*"; }

# Lines matching this extended regex are allowed in daemon logs (until the case ends).
expect_log() { EXPECTED+=("$1"); }

is_mounted() { # MNT: listed in /proc/self/mounts as a batchfs mount?
    local abs
    abs=$(realpath -m -- "$1")
    awk -v m="$abs" '$2 == m && $3 == "fuse.batchfs" { found = 1 } END { exit !found }' \
        /proc/self/mounts
}

require_fuse() {
    local why=
    if [ ! -e /dev/fuse ]; then
        why="/dev/fuse does not exist (no fuse module; in a container pass --device /dev/fuse)"
    elif [ ! -c /dev/fuse ]; then
        why="/dev/fuse is not a character device"
    elif ! command -v fusermount3 >/dev/null 2>&1; then
        why="fusermount3 is not installed (Debian package fuse3; 'make deps' installs it)"
    elif ! { exec 9<>/dev/fuse; } 2>/dev/null; then
        why="/dev/fuse cannot be opened for reading and writing"
    fi
    if [ -n "$why" ]; then
        { exec 9>&-; } 2>/dev/null || true
        {
            echo "########################################################################"
            echo "## SKIP: $CASE: cannot test the mount on this machine:"
            echo "##   $why"
            echo "## The FUSE mount of batchfs is NOT tested here."
            echo "########################################################################"
        } >&2
        exit 77
    fi
    exec 9>&-
}

# Print a daemon's log, framed, to stderr: its last 40 lines, or the start of the first
# sanitizer report (the stacks that matter) and every SUMMARY line.
show_log() { # LOG
    echo "--- daemon log $1:" >&2
    if [ ! -s "$1" ]; then
        echo "  (empty)" >&2
    elif grep -q "Sanitizer" "$1"; then
        { grep -m1 -A50 "ERROR: .*Sanitizer\|WARNING: .*Sanitizer" "$1"; grep "^SUMMARY" "$1"; } |
            sed 's/^/  | /' >&2
    else
        tail -n 40 "$1" | sed 's/^/  | /' >&2
    fi
}

# mount_bfs SOURCE MNT [ARGS...]: start `batchfs SOURCE MNT ARGS... -f` (SOURCE "": none,
# as with -o source=) in $T (relative
# paths are relative to $T) in the background (stop signals reset to their defaults:
# libfuse only installs its handlers over the default, bash makes background jobs ignore
# SIGINT, and a harness may run the tests under nohup, which ignores SIGHUP), log
# to $T/daemon.N.log, and wait for the mount. Sets DAEMON_PID and DAEMON_LOG. Fails the
# case (log printed) if the daemon exits first or the mount does not appear within 10 s.
mount_bfs() {
    local src=$1 mnt=$2
    shift 2
    local n=${#MOUNTS[@]}
    local log=$T/daemon.$n.log abs=$mnt
    case $mnt in /*) ;; *) abs=$T/$mnt ;; esac
    (cd "$T" && exec env --default-signal=INT,QUIT,HUP,TERM "${DAEMON_WRAP[@]}" "$BATCHFS" ${src:+"$src"} "$mnt" "$@" -f) \
        >"$log" 2>&1 </dev/null &
    local pid=$!
    MOUNTS+=("$abs") DAEMONS+=("$pid") LOGS+=("$log")
    DAEMON_PID=$pid DAEMON_LOG=$log
    local i
    for i in $(seq 100); do
        if is_mounted "$abs"; then return 0; fi
        if ! kill -0 "$pid" 2>/dev/null; then
            local rc=0
            wait "$pid" || rc=$?
            DAEMONS[n]=
            fail "batchfs $src $mnt $* exited with status $rc before mounting"
        fi
        sleep 0.1
    done
    fail "batchfs $src $mnt $*: not mounted after 10 s"
}

# wait_exit PID SECONDS: wait for a child started by this shell (a daemon of mount_bfs)
# to exit; sets WAIT_RC to its exit status. Returns 1 (WAIT_RC=timeout) if it is still
# running after SECONDS. Not in $(...): a subshell cannot wait for its parent's children.
WAIT_RC=
wait_exit() {
    local pid=$1 i
    for i in $(seq $(($2 * 10))); do
        if ! kill -0 "$pid" 2>/dev/null; then
            WAIT_RC=0
            wait "$pid" || WAIT_RC=$?
            return 0
        fi
        sleep 0.1
    done
    WAIT_RC=timeout
    show_stacks "$pid"
    return 1
}

# show_stacks PID: where a process that should have exited is stuck, to stderr: each
# thread's kernel wait channel and stack (root) and, with gdb, its user stack.
show_stacks() {
    local t
    echo "--- process $1 did not exit; its threads:" >&2
    for t in /proc/"$1"/task/*; do
        [ -d "$t" ] || continue
        echo "  thread ${t##*/} ($(cat "$t/comm" 2>/dev/null)): $(cat "$t/wchan" 2>/dev/null)" >&2
        sed 's/^/    | /' "$t/stack" >&2 2>/dev/null || true
    done
    if command -v gdb >/dev/null 2>&1; then
        timeout 60 gdb -p "$1" -batch -nx -ex 'thread apply all bt' 2>&1 |
            grep -E '^(Thread|#)' | sed 's/^/  | /' >&2 || true
    fi
}

# forget PID: the daemon was reaped by the case.
forget() {
    local i
    for i in "${!DAEMONS[@]}"; do
        if [ "${DAEMONS[i]}" = "$1" ]; then DAEMONS[i]=; fi
    done
}

# unmount_bfs MNT: fusermount3 -u (retried for 5 s while busy), then the daemon that
# mounted MNT must exit with status 0 within 10 s and the mount must be gone.
unmount_bfs() {
    local mnt=$1 i pid='' log=''
    for i in "${!MOUNTS[@]}"; do
        if [ "${MOUNTS[i]}" = "$mnt" ] && [ -n "${DAEMONS[i]}" ]; then
            pid=${DAEMONS[i]} log=${LOGS[i]}
        fi
    done
    for i in $(seq 50); do
        fusermount3 -u "$mnt" 2>"$T/fusermount.err" && break
        sleep 0.1
    done
    if is_mounted "$mnt"; then
        cat "$T/fusermount.err" >&2
        fail "fusermount3 -u $mnt: still mounted after 5 s"
    fi
    [ -n "$pid" ] || return 0
    wait_exit "$pid" 10 || fail "daemon $pid did not exit within 10 s of the unmount of $mnt"
    forget "$pid"
    [ "$WAIT_RC" = 0 ] || fail "daemon of $mnt exited with status $WAIT_RC after a clean unmount"
}

# wait_idle MNT: poll MNT/stats until no batch is in flight (10 s at most), so that
# counters checked next do not depend on timing.
wait_idle() {
    local i
    for i in $(seq 200); do
        if pyx -c 'import bfs, sys; sys.exit(bfs.stats(sys.argv[1])["batches"]["in_flight"] != 0)' "$1"; then
            return 0
        fi
        sleep 0.05
    done
    fail "$1/stats: batches still in flight after 10 s"
}

# ref_batch SOURCE PIPELINE_OPTS EPOCH K OUT: the batch computed in-process by the engine
# (no mount), the reference bytes.
ref_batch() {
    "$ENGINE_TOOL" batch "$1" "$2" "$3" "$4" "$5" || fail "engine_tool batch $*"
}

# need_py: the test venv (numpy, pillow, safetensors) as $PY, via tests/pyenv.sh (which
# exits 77 when PyPI is unreachable outside CI). pyenv.sh prefixes $PWD to the venv
# path, so it is given one relative to the repository root whatever BUILD is.
need_py() {
    BFS_VENV=$(realpath -m --relative-to="$PWD" "${BFS_VENV:-$BUILD/venv}")
    export BFS_VENV
    . tests/pyenv.sh
    [ -x "$PY" ] || fail "tests/pyenv.sh gave PY=$PY, not an executable"
}

# pyx ARGS...: python3 (stdlib only) with $T/bfs.py importable as `bfs`.
pyx() { PYTHONPATH=$T${PYTHONPATH:+:$PYTHONPATH} python3 "$@"; }

# gen_tokens OUT.bfs SEED DOCS: a token dataset of DOCS documents (1..299 random u16 ids
# each, GPT-2's <|endoftext|> 50256 ending each), packed with mkbatchfs --tokens u16.
gen_tokens() {
    python3 - "$T/tokens.bin" "$2" "$3" <<'PYEOF'
import random, struct, sys
random.seed(int(sys.argv[2]))
ids = []
for d in range(int(sys.argv[3])):
    ids += [random.randrange(0, 50000) for _ in range(random.randrange(1, 300))] + [50256]
open(sys.argv[1], "wb").write(struct.pack("<%dH" % len(ids), *ids))
PYEOF
    "$MKBATCHFS" --tokens u16 --doc-sep 50256 "$T/tokens.bin" "$1" >/dev/null 2>&1 ||
        fail "mkbatchfs --tokens"
}

# same_remote NAME FILE URL EPOCHS OPTS: FILE mounted at $T/a and the same file at URL (an
# s3:// or https:// source, docs/sources.md) at $T/b with OPTS: every batch of those
# epochs has the same bytes, /pipeline the same fingerprint, and /stats a `source` section
# without retries or failures; both unmounted after. $T/a and $T/b must exist.
same_remote() {
    local name=$1 src=$2 url=$3 epochs=$4 opts=$5 n k a b
    mount_bfs "$src" "$T/a" -o "$opts"
    mount_bfs "$url" "$T/b" -o "$opts"
    n=$(ls "$T/a/epoch/0" | grep -c '^batch_')
    [ "$(ls "$T/b/epoch/0" | grep -c '^batch_')" = "$n" ] || fail "$name: the remote mount lists another number of batches"
    for e in $(seq 0 $((epochs - 1))); do
        for k in $(seq 0 $((n - 1))); do
            a=$(sha256sum <"$T/a/epoch/$e/batch_$k") || fail "$name: local epoch $e batch $k"
            b=$(sha256sum <"$T/b/epoch/$e/batch_$k") || fail "$name: remote epoch $e batch $k"
            [ "$a" = "$b" ] || fail "$name: epoch $e batch $k differs from the local mount's"
        done
    done
    cmp -s <(grep -v '^source' "$T/a/pipeline") <(grep -v '^source' "$T/b/pipeline") ||
        fail "$name: /pipeline differs (fingerprint?)"
    pyx - "$T/b" <<'EOF' || fail "$name: /stats source"
import sys, bfs
s = bfs.stats(sys.argv[1]).get("source")
if not s or s["requests"] < 1 or s["bytes"] == 0 or s["failures"] or s["retries"]:
    sys.exit("source section %r" % (s,))
EOF
    unmount_bfs "$T/b"
    unmount_bfs "$T/a"
    ok "$name: $epochs epochs of $n batches, bytes equal to a local mount's"
}

# source_paused PID WHAT: the server PID paused past the retries while epoch 5 batch 2 is
# read from $T/b (a remote mount with prefetch=0 and short retries; $T/a: the same file
# mounted locally, same options): EIO, the reason in the log and /stats (a failure, no
# bad sample), the daemon lives; the server resumed: the batch equals $T/a's. Leaves both
# mounted.
source_paused() {
    local pid=$1 what=$2
    kill -STOP "$pid"
    if cat "$T/b/epoch/5/batch_2" >/dev/null 2>"$T/err"; then
        kill -CONT "$pid"
        fail "$what: a batch was served while the server was paused"
    fi
    kill -CONT "$pid"
    grep -q "Input/output error" "$T/err" || fail "$what: paused server: $(cat "$T/err")"
    grep -q "object store did not serve a read" "$DAEMON_LOG" || fail "$what: the log does not say why"
    is_mounted "$T/b" || fail "$what: the daemon died"
    pyx - "$T/b" <<'PYEOF' || fail "$what: /stats after the pause"
import sys, bfs
st = bfs.stats(sys.argv[1])
if st["source"]["failures"] < 1 or st["bad_samples"]:
    sys.exit("source %r, bad_samples %d: want failures and no bad sample"
             % (st["source"], st["bad_samples"]))
PYEOF
    [ "$(sha256sum <"$T/b/epoch/5/batch_2")" = "$(sha256sum <"$T/a/epoch/5/batch_2")" ] ||
        fail "$what: the failed batch, read again with the server back, differs"
    ok "$what paused past the retries: EIO with the reason logged, then the batch's bytes"
}

# source_restarted PID START WHAT: epoch 6's batch 0 read from $T/b (a remote mount with
# prefetch=0 and retries to spare), the server PID killed, batches 1..6 read while it is
# down, and START (a command) run to start it again once the daemon has retried (not
# after a fixed time, so a slow machine cannot start it before the first attempt): every
# batch equals $T/a's, /stats counts retries and no failure. Leaves both mounted.
source_restarted() {
    local pid=$1 start=$2 what=$3 reader
    cat "$T/b/epoch/6/batch_0" >/dev/null || fail "$what: the first batch before the kill"
    kill -KILL "$pid"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
    (for k in 1 2 3 4 5 6; do sha256sum <"$T/b/epoch/6/batch_$k" || exit 1; done) >"$T/got" 2>"$T/err" &
    reader=$!
    for _ in $(seq 400); do
        pyx -c "import sys, bfs; sys.exit(bfs.stats('$T/b')['source']['retries'] < 1)" && break
        sleep 0.05
    done
    $start
    wait $reader || fail "$what: the reads across a server restart failed: $(cat "$T/err")"
    for k in 1 2 3 4 5 6; do sha256sum <"$T/a/epoch/6/batch_$k"; done >"$T/want"
    cmp -s "$T/got" "$T/want" || fail "$what: the batches read across a restart differ"
    pyx - "$T/b" <<'PYEOF' || fail "$what: /stats after the restart"
import sys, bfs
s = bfs.stats(sys.argv[1])["source"]
if s["retries"] < 1 or s["failures"]:
    sys.exit("source %r: want retries, no failure" % (s,))
PYEOF
    ok "$what killed mid-epoch and started again: 6 batches delayed, not failed, a local mount's bytes"
}

cat >"$T/bfs.py" <<'PYEOF'
"""Stdlib-only helpers for the mount tests: safetensors batches and /stats."""
import json, struct

def header(path_or_bytes):
    """(json header dict, offset of the tensor data) of a safetensors file, or of its
    bytes (bytes, mmap, memoryview)."""
    if not isinstance(path_or_bytes, str):
        raw = bytes(path_or_bytes[:8])
        n = struct.unpack("<Q", raw)[0]
        return json.loads(bytes(path_or_bytes[8:8 + n])), 8 + n
    with open(path_or_bytes, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)), 8 + n

def tensors(path):
    """{name: (dtype, shape, bytes)} and the metadata of a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    hdr, base = header(data)
    meta = hdr.pop("__metadata__", {})
    out = {}
    for name, t in hdr.items():
        a, b = t["data_offsets"]
        out[name] = (t["dtype"], t["shape"], data[base + a:base + b])
    return out, meta

def i64(raw):
    return list(struct.unpack("<%dq" % (len(raw) // 8), raw))

def stats(mnt):
    with open(mnt + "/stats") as f:
        return json.load(f)
PYEOF

cleanup() {
    local rc=$? i pid mnt
    trap - EXIT INT TERM
    set +e
    for pid in "${BG_PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null; done
    for i in "${!MOUNTS[@]}"; do
        mnt=${MOUNTS[i]}
        if is_mounted "$mnt"; then
            fusermount3 -u "$mnt" 2>/dev/null || fusermount3 -u -z "$mnt" 2>/dev/null ||
                umount -l "$mnt" 2>/dev/null
        fi
    done
    # an unmounted daemon exits by itself, with status 0; one that does not is stopped
    for i in "${!DAEMONS[@]}"; do
        pid=${DAEMONS[i]}
        [ -n "$pid" ] || continue
        if ! wait_exit "$pid" 5; then
            echo "cleanup: daemon $pid still running 5 s after its unmount: SIGTERM" >&2
            kill -TERM "$pid" 2>/dev/null
            if ! wait_exit "$pid" 3; then
                echo "cleanup: daemon $pid ignored SIGTERM for 3 s: SIGKILL" >&2
                kill -KILL "$pid" 2>/dev/null
                wait "$pid" 2>/dev/null
            fi
            [ $rc -ne 0 ] || rc=1
        elif [ "$WAIT_RC" != 0 ] && [ $rc -eq 0 ]; then
            local sig=
            [ "$WAIT_RC" -lt 128 ] || sig=" (killed by signal $((WAIT_RC - 128)): a crash)"
            echo "FAIL: $CASE: daemon $pid (${LOGS[i]##*/}) exited with status $WAIT_RC$sig at unmount" >&2
            rc=1
        fi
    done
    if [ $rc -eq 0 ]; then
        # the final scan: every daemon line must be one the case declared
        local log line re hit bad=0
        for log in "${LOGS[@]}"; do
            [ -s "$log" ] || continue
            while IFS= read -r line; do
                hit=0
                for re in "${EXPECTED[@]}"; do
                    if [[ $line =~ $re ]]; then hit=1 && break; fi
                done
                if [ $hit -eq 0 ]; then
                    echo "FAIL: $CASE: unexpected line in daemon log $(basename "$log"): $line" >&2
                    bad=1
                fi
            done <"$log"
        done
        [ $bad -eq 0 ] || rc=1
        if compgen -G "$T/core*" >/dev/null; then
            echo "FAIL: $CASE: core file left in $T: $(ls "$T"/core*)" >&2
            rc=1
        fi
    elif [ $rc -ne 77 ]; then
        for log in "${LOGS[@]}"; do
            if [ -s "$log" ]; then show_log "$log"; fi
        done
    fi
    if [ "${KEEP:-}" = 1 ]; then echo "kept $T" >&2; else rm -rf "$T"; fi
    [ $rc -ne 0 ] || echo "PASS: $CASE"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- executed, not sourced: a test of this harness -------------------------------------
# tests/run.sh runs every tests/mount/*.sh, this file included. Run directly, it checks
# the harness the cases rely on: a mount, read and unmount round trip; and, through small
# cases of its own, that the final log scan, the crash check and the cleanup really fire.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    require_fuse
    "$GEN" "$T/images" 2 8 48 96 1
    mkdir "$T/mnt"
    mount_bfs "$T/images" "$T/mnt" -o batch=4,size=16,epochs=2
    is_mounted "$T/mnt" || fail "is_mounted: false on a mount"
    ref_batch "$T/images" batch=4,size=16 1 3 "$T/ref"
    cmp "$T/mnt/epoch/1/batch_3" "$T/ref" || fail "epoch 1 batch 3 differs from engine_tool's"
    unmount_bfs "$T/mnt"
    if is_mounted "$T/mnt"; then fail "is_mounted: true after unmount_bfs"; fi
    ok "harness: mount_bfs, read, unmount_bfs"

    # selftest NAME WANT_RC WANT_STDERR BODY: a case sourcing this file; its exit status
    # and stderr are checked, and it must leave no mount behind.
    selftest() {
        local name=$1 want=$2 text=$3 body=$4 rc=0
        printf '%s\n' ". '$PWD/tests/mount/lib.sh'" "require_fuse" \
            "\"\$GEN\" \"\$T/images\" 2 8 48 96 1" "mkdir \"\$T/mnt\"" \
            "mount_bfs \"\$T/images\" \"\$T/mnt\" -o batch=4,size=16" \
            "echo \"MNT=\$T/mnt\"" "$body" >"$T/$name.sh"
        bash "$T/$name.sh" >"$T/$name.out" 2>"$T/$name.err" || rc=$?
        local mnt
        mnt=$(sed -n 's/^MNT=//p' "$T/$name.out")
        [ -n "$mnt" ] || { cat "$T/$name.err" >&2; fail "self-test $name did not mount"; }
        if is_mounted "$mnt"; then fail "self-test $name left $mnt mounted"; fi
        [ -d "$(dirname "$mnt")" ] && fail "self-test $name left its directory $(dirname "$mnt")"
        [ $rc -eq "$want" ] || { cat "$T/$name.err" >&2; fail "self-test $name: exit $rc, expected $want"; }
        grep -qF -- "$text" "$T/$name.err" "$T/$name.out" ||
            { cat "$T/$name.err" >&2; fail "self-test $name: no '$text' in its output"; }
        ok "harness: $name -> exit $rc, '$text'"
    }
    selftest clean 0 "PASS: clean" 'cat "$T/mnt/epoch/0/batch_1" >/dev/null'
    selftest left_mounted 0 "PASS: left_mounted" 'true # cleanup unmounts'
    selftest unexpected_line 1 "unexpected line in daemon log daemon.0.log: batchfs: odd" \
        'echo "batchfs: odd" >>"$DAEMON_LOG"'
    selftest expected_line 0 "PASS: expected_line" \
        'expect_log "^batchfs: odd\$"; echo "batchfs: odd" >>"$DAEMON_LOG"'
    selftest crash 1 "exited with status" 'kill -SEGV "$DAEMON_PID"; sleep 0.3' # 139, or 1 under ASan
    selftest failing 1 "FAIL: failing: on purpose" 'fail "on purpose"'
    selftest skip 77 "MNT=" 'exit 77 # a skip after mounting still unmounts'
fi
