#!/usr/bin/env bash
# tests/cli/top.sh — `batchfs top MNT` as a user meets it (programs/top.c,
# programs/statsjson.c):
#   1. usage and not-a-mount errors: exit 2 for usage, exit 1 with a message naming the
#      path for a directory without stats (/tmp too), a missing path, a stats file that is
#      not JSON or not batchfs statistics;
#   2. a stand-in mount (a directory with a `stats` file written by this script, in the
#      format of engine/service.c bfs_service_stats with the optional sample_cache and autotune sections):
#      plain lines (piped): -n 2 gives exactly 2 lines with every field in order and the
#      values of the file; with `stats` a FIFO that gives each open the next step of the
#      counters, images/s, batches/s, served_MiB/s and hit% are rates between samples;
#   3. under a terminal (script(1) from util-linux, a pty): the full-screen view shows the
#      autotune decisions and their reasons, the readers and the cache rows; `q` ends it
#      with status 0 within a few seconds, so do Ctrl-C (the pty sends SIGINT) and SIGTERM;
#      each time the output ends with the exit-alternate-screen sequence and `stty -g` is
#      the same before and after (the terminal is restored); a string from /stats with an
#      escape sequence is shown defused;
#   4. a real mount (tests/mount/lib.sh; exit 77 only without /dev/fuse), prefetch=0: a
#      live reader read 3 batches; /stats batches.opened_bytes is their 3 files' sizes;
#      `top -n 2 --interval 0.2 | cat` prints 2 lines with served=3, computed=3, readers=1
#      and rates 0; under a pty it shows the mount and quits on `q`; when the mount goes
#      away under a running top, top exits 1 naming MNT/stats.
# Nothing depends on timing: rates are checked through a FIFO that hands top one step per
# sample (their ratios do not depend on the time between samples), and the real mount's
# counters do not move while top watches.
# Run: BUILD=build bash tests/cli/top.sh (tests/run.sh does). About 15 s.
. "$(dirname "$0")/../mount/lib.sh"

command -v script >/dev/null || fail "script(1) (util-linux) is needed for the terminal checks"

rc=0
# run CMD...: stdout/stderr in $T/out, $T/err; status in $rc
run() {
    set +e
    "$@" >"$T/out" 2>"$T/err"
    rc=$?
    set -e
}
expect() { # RC WHAT
    if [ "$rc" -ne "$1" ]; then
        echo "--- stdout:" >&2 && head -c 2000 "$T/out" >&2
        echo "--- stderr:" >&2 && cat "$T/err" >&2
        fail "$2: exit status $rc, expected $1"
    fi
}
expect_err() { # TEXT WHAT
    grep -qF -- "$1" "$T/err" || { cat "$T/err" >&2; fail "$2: stderr lacks '$1'"; }
}

# ---- 1. usage and not-a-mount errors ------------------------------------------------------
run "$BATCHFS" top
expect 2 "top without MNT"
expect_err "batchfs top MNT" "top without MNT"
run "$BATCHFS" --top
expect 2 "--top without MNT"
run "$BATCHFS" top "$T" "$T"
expect 2 "top with two MNTs"
run "$BATCHFS" top "$T" --interval 0
expect 2 "--interval 0"
expect_err "--interval 0: must be a number of seconds" "--interval 0"
run "$BATCHFS" top "$T" --interval abc
expect 2 "--interval abc"
run "$BATCHFS" top "$T" -n -1
expect 2 "-n -1"
run "$BATCHFS" top "$T" -o batch=4
expect 2 "top with -o"
expect_err "unknown argument '-o'" "top with -o"
run "$BATCHFS" --help
expect 0 "--help"
grep -qF "batchfs top MNT [--interval S] [-n N]" "$T/out" || fail "--help does not show top"
ok "usage errors: exit 2 with a message; --help shows top"

mkdir "$T/empty"
run "$BATCHFS" top "$T/empty" -n 1
expect 1 "top of an empty directory"
expect_err "batchfs top: $T/empty is not a batchfs mount (no $T/empty/stats" "empty directory"
if [ ! -e /tmp/stats ]; then
    run "$BATCHFS" top /tmp
    expect 1 "top /tmp"
    expect_err "/tmp is not a batchfs mount" "top /tmp"
fi
run "$BATCHFS" --top "$T/nowhere"
expect 1 "top of a missing path"
expect_err "$T/nowhere: No such file or directory" "missing path"
mkdir "$T/junk"
printf 'version: 1\n' >"$T/junk/stats"
run "$BATCHFS" top "$T/junk/"
expect 1 "stats not JSON"
expect_err "$T/junk/ is not a batchfs mount: $T/junk/stats is not batchfs statistics (byte 7: invalid token near 'version')" "junk"
printf '[1, 2]' >"$T/junk/stats"
run "$BATCHFS" top "$T/junk"
expect 1 "stats JSON but not batchfs statistics"
expect_err 'no "version"' "not statistics"
[ ! -s "$T/out" ] || fail "a failed top wrote to stdout"
ok "not a mount: exit 1, the message names the path"

# ---- 2. a stand-in mount, plain lines -------------------------------------------------------
F=$T/fake
mkdir "$F"
# write_stats_to FILE I: the stats of step I (counters grow with I) into FILE, in
# $T/write_stats.sh (sourced by the FIFO feeder too)
cat >"$T/write_stats.sh" <<'SHEOF'
write_stats_to() {
    local f=$1 i=$2
    cat >"$f" <<EOF
{
  "version": "9.9.9",
  "fingerprint": "00000000000000ff",
  "uptime_s": $((10 + i)).0,
  "threads": 6,
  "images": $((1000 + 640 * i)),
  "images_per_s": 100.0,
  "stage_us_per_image": {"read": 10.0, "decode": 800.0, "resize": 150.0, "augment": 60.0, "encode": 40.0},
  "augment_ops": {"Rotate": {"applied": $((3 * i)), "us_each": 209.4}, "Erasing": {"applied": $i, "us_each": 550.2}},
  "decodes": {"cropped": 1, "full": 2, "scaled": 3, "raw": 0},
  "bad_samples": 0,
  "batches": {"served": $((10 + 10 * i)), "computed": $((12 + 10 * i)), "failed": 0, "in_flight": 2, "prefetched": 8, "opened": $((10 + 10 * i)), "opened_bytes": $((41943040 * i))},
  "cache": {"hits": $((5 + 3 * i)), "joins": 0, "misses": $((5 + i)), "evictions": 0, "bytes": 1048576, "budget_bytes": 1073741824},
  "sample_cache": {"hits": $((7 * i)), "misses": $((100 + i)), "bytes": 52428800, "budget_bytes": 268435456},
  "group": {"name": "sweep7", "claims": $((4 * i)), "given_back": 0, "lost": 1, "exhausted": 2, "ahead": 3},
  "source": {"requests": $((30 * i)), "bytes": 7340032, "retries": 4, "failures": 0, "wait_s": 0.5, "prefetch": {"requests": 10, "samples": 40, "hits": 40, "waits": 3, "dropped": 0, "ahead": 5}, "cache": {"hits": 77, "hit_bytes": 1000, "stored": 5, "stored_bytes": 500, "full": 0, "evicted": 0, "usage_bytes": 2097152, "budget_bytes": 10737418240}},
  "remote": {"url": "redis://127.0.0.1:6379/0", "workers": 3, "requested": $((20 * i)), "hits": $((19 * i)), "fallbacks": $i, "errors": 0, "corrupt": 2, "wait_s": 1.5},
  "autotune": {"threads": {"value": 6, "why": "six workers: 4.1 batch/s predicted \u001b[2J for 2 readers"},
    "prefetch": {"value": 4, "why": "M/M/1/4: P(empty)=0.02 at depth 4"},
    "cache_bytes": {"value": 536870912, "why": "half of ram_mb"},
    "period_ms": 2000, "model": {"sample_us": 960.0, "batch_header_us": 12.0},
    "readers": [{"id": 1, "epoch": 0, "batch": 12, "stride": 2, "consume_batch_per_s": 2.5, "think_ms": 400.0, "depth": 4, "predicted_wait_ms": 3.5},
                {"id": 7, "epoch": 1, "batch": 3, "stride": 1, "consume_batch_per_s": 1.0, "think_ms": 1000.0, "depth": 2, "predicted_wait_ms": 0.0}]},
  "reads": {"requests": 512, "bytes": 33554432, "errors": 0},
  "passthrough": {"active": false, "opens": 0, "backing_files": 0},
  "prefetch": {"depth": 4, "streams": [
    {"id": 1, "pid": 4242, "epoch": 0, "batch": 12, "stride": 2, "depth": 4, "batches": 7, "step_ms": 400.0, "wait_ms": 1.0, "idle_s": 0.1}
  ]},
  "a_future_key": {"nested": [1, 2, {"x": null}]}
}
EOF
}
SHEOF
. "$T/write_stats.sh"
export T
# write_stats DIR I: step I written whole, then renamed
write_stats() {
    write_stats_to "$1/stats.tmp" "$2"
    mv -f "$1/stats.tmp" "$1/stats"
}
write_stats "$F" 0

# check_lines FILE N: N plain lines, every field in order; prints nothing
FIELDS='^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2} images/s=[^ ]+ avg_images/s=[^ ]+ batches/s=[^ ]+ served=[^ ]+ computed=[^ ]+ in_flight=[^ ]+ hit%=[^ ]+ dir_hit%=[^ ]+ sample_hit%=[^ ]+ threads=[^ ]+ prefetch=[^ ]+ readers=[^ ]+ served_MiB/s=[^ ]+$'
check_lines() {
    local n
    n=$(wc -l <"$1")
    [ "$n" -eq "$2" ] || { cat "$1" >&2; fail "expected $2 plain lines, got $n"; }
    if grep -vqE "$FIELDS" "$1"; then
        cat "$1" >&2
        fail "a plain line lacks the expected fields"
    fi
}
# field FILE LINE KEY: the value of KEY= on line LINE
field() { sed -n "$2p" "$1" | tr ' ' '\n' | awk -v k="$3=" 'index($0, k) == 1 { print substr($0, length(k) + 1) }'; }

run "$BATCHFS" top "$F" -n 2 --interval 0.1
expect 0 "top -n 2 of a stand-in mount"
check_lines "$T/out" 2
for want in "images/s=0.0" "avg_images/s=100.0" "batches/s=0.00" "served=10" "computed=12" \
    "in_flight=2" "hit%=-" "dir_hit%=-" "sample_hit%=-" "threads=6" "prefetch=4" "readers=1" \
    "served_MiB/s=0.0"; do
    grep -q " $want\( \|$\)" "$T/out" || { cat "$T/out" >&2; fail "plain line lacks $want"; }
done
ok "plain lines: -n 2 gives 2 lines with every field; unchanged counters give rate 0, no hit rate"

# rates between samples: `stats` is a FIFO, and each open of it by top gets the next step
# (one step: +640 images, +10 batches, +40 MiB of batch files opened, 3 hits of 4 lookups,
# 7 of 8 in the sample cache). So whatever time top measures between samples (a loaded
# machine), images/s is exactly 64 times batches/s, served_MiB/s 4 times, and the hit
# rates are those of one step; averages would differ.
F2=$T/fifo
mkdir "$F2"
mkfifo "$F2/stats"
python3 - "$F2/stats" "$T/fifo.steps" <<'PYEOF' &
import ctypes, os, struct, subprocess, sys
fifo, steps = sys.argv[1], sys.argv[2]
# the next step only once top has closed the previous one (else the next write could reach
# the same open, or be lost with it): inotify's IN_CLOSE_NOWRITE is top's close
libc = ctypes.CDLL(None, use_errno=True)
ino = libc.inotify_init1(os.O_CLOEXEC)
IN_CLOSE_NOWRITE = 0x10
if ino < 0 or libc.inotify_add_watch(ino, fifo.encode(), IN_CLOSE_NOWRITE) < 0:
    sys.exit("inotify: %s" % os.strerror(ctypes.get_errno()))
for i in range(4):  # the first sample and 3 more
    # (cat's open for writing waits for top's open for reading)
    subprocess.run(["bash", "-c", '. "$0"; write_stats_to "$1" %d' % i,
                    os.environ["T"] + "/write_stats.sh", fifo], check=True)
    closed = False
    while not closed:
        buf = os.read(ino, 4096)
        off = 0
        while off < len(buf):
            wd, mask, cookie, n = struct.unpack_from("iIII", buf, off)
            closed = closed or bool(mask & IN_CLOSE_NOWRITE)
            off += 16 + n
    open(steps, "a").write("%d\n" % i)
PYEOF
feeder=$!
BG_PIDS+=("$feeder")
run "$BATCHFS" --top "$F2" --interval 0.2 -n 3
expect 0 "top of a stand-in whose stats is a FIFO"
wait "$feeder" || fail "the FIFO feeder failed"
[ "$(wc -l <"$T/fifo.steps")" = 4 ] || fail "top read the FIFO $(wc -l <"$T/fifo.steps") times, expected 4"
check_lines "$T/out" 3
for l in 1 2 3; do
    ips=$(field "$T/out" $l images/s) bps=$(field "$T/out" $l batches/s)
    hit=$(field "$T/out" $l hit%) shit=$(field "$T/out" $l sample_hit%) mib=$(field "$T/out" $l served_MiB/s)
    awk -v a="$ips" -v b="$bps" -v h="$hit" -v s="$shit" -v m="$mib" 'BEGIN {
        # (images/s and served_MiB/s have 1 decimal, batches/s 2: ratios within rounding)
        exit !(a > 0 && b > 0 && (a - 0.05) / (b + 0.005) <= 64 && (a + 0.05) / (b - 0.005) >= 64 &&
               (m - 0.05) / (b + 0.005) <= 4 && (m + 0.05) / (b - 0.005) >= 4 &&
               h == 75.0 && s == 87.5) }' ||
        { cat "$T/out" >&2; fail "line $l: images/s=$ips batches/s=$bps served_MiB/s=$mib hit%=$hit sample_hit%=$shit: not rates of one step"; }
done
# the average is the daemon's own (100.0 in every file), not the rate
[ "$(field "$T/out" 1 avg_images/s)" = 100.0 ] || fail "avg_images/s is not the daemon's"
ok "plain lines: images/s, batches/s, served_MiB/s and hit rates come from differences between samples"

# ---- 3. under a terminal --------------------------------------------------------------------
# in_pty NAME INPUT_SCRIPT CMD: run CMD under script(1) (a 150x50 pty as stdin/stdout), with what
# INPUT_SCRIPT prints (a shell snippet, run in the background) as keyboard input; the
# pty output in $T/NAME.out, `stty -g` before and after CMD in $T/NAME.before/.after;
# sets rc and the elapsed seconds in $elapsed.
elapsed=0
in_pty() {
    local name=$1 input=$2 cmd=$3 t0
    t0=$(date +%s%N)
    set +e
    # script(1) runs CMD with $SHELL -c; dash (CI's /bin/sh, SHELL unset) dies of the pty's
    # SIGINT while it waits for top, bash waits and goes on when top exits 0, as an
    # interactive shell would (top runs in its own process group there)
    bash -c "$input" | SHELL=/bin/bash timeout 20 script -qfec \
        "stty cols 150 rows 50; stty -g >'$T/$name.before'; echo \$\$ >'$T/$name.pid'; $cmd; r=\$?; stty -g >'$T/$name.after'; exit \$r" \
        /dev/null >"$T/$name.out" 2>"$T/$name.err"
    rc=$?
    set -e
    elapsed=$((($(date +%s%N) - t0) / 1000000))
    if [ "$rc" -ne 0 ]; then
        echo "--- $name: the end of the pty output:" >&2
        tail -c 600 "$T/$name.out" | sed 's/\x1b\[[0-9;?]*[A-Za-z]//g; s/\r//g' >&2
        cat "$T/$name.err" >&2
    fi
}
# restored NAME: the output ends by leaving the alternate screen; the tty modes are back
restored() {
    [ -s "$T/$1.out" ] || fail "$1: no output under the pty"
    [ "$(head -c 8 "$T/$1.out")" = $'\e[?1049h' ] || fail "$1: did not start in the alternate screen"
    [ "$(tail -c 8 "$T/$1.out")" = $'\e[?1049l' ] ||
        fail "$1: the output does not end with the exit-alternate-screen sequence (ends: $(tail -c 16 "$T/$1.out" | od -An -c | tr -s ' '))"
    grep -qF $'\e[?25h' "$T/$1.out" || fail "$1: the cursor was not shown again"
    [ -s "$T/$1.before" ] && [ -s "$T/$1.after" ] || fail "$1: stty -g before/after missing"
    cmp -s "$T/$1.before" "$T/$1.after" ||
        fail "$1: terminal modes not restored: $(cat "$T/$1.before") -> $(cat "$T/$1.after")"
}
# strip NAME: the visible text of the pty output (escape sequences removed)
strip() { sed 's/\x1b\[[0-9;?]*[A-Za-z]//g; s/\r//g' "$T/$1.out"; }

write_stats "$F" 5
in_pty quit "sleep 1.5; printf q" "'$BATCHFS' top '$F' --interval 0.2"
[ "$rc" -eq 0 ] || { cat "$T/quit.err" >&2; fail "q: top under a pty exited $rc"; }
[ "$elapsed" -lt 5000 ] || fail "q: top took $elapsed ms to quit (q sent after 1.5 s)"
restored quit
strip quit >"$T/quit.txt"
for want in "batchfs top  $F" "batchfs 9.9.9" "throughput" "time per image" "decode" \
    "ops, us each" "Rotate 209" "Erasing 550" "memory" "samples" "cache_dir" "readers         2" "4242" "autotune" \
    "remote" "workers 3" "corrupt 2" "source" "fetched 7.00 MiB" "5 batches ahead" "retries 4" "sweep7" "lost 1" "epoch ends 2" "ahead 3" \
    "six workers: 4.1 batch/s predicted ?[2J for 2 readers" "M/M/1/4: P(empty)=0.02" \
    "half of ram_mb" "512 MiB" "every 2000 ms"; do
    grep -qF -- "$want" "$T/quit.txt" || { cat "$T/quit.txt" >&2; fail "the view lacks '$want'"; }
done
if grep -qF $'\e[2J for' "$T/quit.out"; then fail "an escape sequence from /stats reached the terminal"; fi
grep -q '|#\+ *|' "$T/quit.txt" || fail "no stage bars in the view"
ok "terminal: the view has throughput, stages, caches, readers and autotune reasons; q quits in ${elapsed} ms"

in_pty ctrlc "sleep 1; printf '\\003'" "'$BATCHFS' top '$F' --interval 0.2"
[ "$rc" -eq 0 ] || { cat "$T/ctrlc.err" >&2; fail "Ctrl-C: top under a pty exited $rc"; }
[ "$elapsed" -lt 5000 ] || fail "Ctrl-C: top took $elapsed ms to quit"
restored ctrlc
ok "terminal: Ctrl-C quits with status 0 and the terminal restored"

# SIGTERM to top itself: the pty's shell execs nothing, so take top's pid from ps
in_pty term "sleep 1; p=\$(cat '$T/term.pid'); kill -TERM \$(ps -o pid= --ppid \$p); sleep 3" \
    "'$BATCHFS' top '$F' --interval 0.2"
[ "$rc" -eq 0 ] || { cat "$T/term.err" >&2; fail "SIGTERM: top under a pty exited $rc"; }
restored term
ok "terminal: SIGTERM ends it with status 0 and the terminal restored"

# ---- 4. a real mount ------------------------------------------------------------------------
require_fuse
"$GEN" "$T/images" 2 64 48 96 3
M=$T/mnt
mkdir "$M"
mount_bfs "$T/images" "$M" -o batch=8,size=32,epochs=100,prefetch=0
# a reader that opens and reads batches 0..2, then stays (a live reader is listed for 30 s);
# nothing is computed after (prefetch=0), so the counters top shows are known
python3 - "$M" "$T/reader.done" <<'EOF' &
import os, sys, time
for k in range(3):
    with open("%s/epoch/0/batch_%d" % (sys.argv[1], k), "rb") as f:
        f.read()
open(sys.argv[2], "w").close()
time.sleep(60)
EOF
BG_PIDS+=($!)
for _ in $(seq 300); do [ -e "$T/reader.done" ] && break; sleep 0.1; done
[ -e "$T/reader.done" ] || fail "the reader did not read 3 batches in 30 s"
wait_idle "$M"
size=$(stat -c %s "$M/epoch/0/batch_0")
opened=$(pyx -c 'import bfs,sys; b=bfs.stats(sys.argv[1])["batches"]; print(b["opened"], b["opened_bytes"])' "$M")
[ "$opened" = "3 $((3 * size))" ] || fail "/stats batches opened, opened_bytes = $opened, expected 3 $((3 * size)) (3 files of $size bytes)"
ok "mount: /stats batches.opened_bytes = the sizes of the 3 batch files opened ($opened)"
set +e
"$BATCHFS" top "$M" -n 2 --interval 0.2 2>"$T/err" | cat >"$T/out"
rc=${PIPESTATUS[0]}
set -e
expect 0 "top -n 2 of a mount, piped"
check_lines "$T/out" 2
for l in 1 2; do
    for want in images/s=0.0 served=3 computed=3 in_flight=0 readers=1 served_MiB/s=0.0; do
        sed -n "${l}p" "$T/out" | grep -q " $want\( \|$\)" || { cat "$T/out" >&2; fail "line $l of the mount lacks $want"; }
    done
done
ok "mount: 2 plain lines with the mount's counters (served=3 computed=3 readers=1, rates 0)"

in_pty mount "sleep 1; printf q" "'$BATCHFS' top '$M' --interval 0.2"
[ "$rc" -eq 0 ] || { cat "$T/mount.err" >&2; fail "q: top of a mount under a pty exited $rc"; }
restored mount
strip mount >"$T/mount.txt"
grep -qF "batchfs top  $M" "$T/mount.txt" || fail "the view of the mount lacks its title"
ok "mount: the terminal view quits on q with the terminal restored"

# the mount goes away under a running top (once it has printed 2 lines)
kill "${BG_PIDS[-1]}" && wait "${BG_PIDS[-1]}" 2>/dev/null || true
"$BATCHFS" top "$M" --interval 0.1 >"$T/gone.out" 2>"$T/gone.err" &
top_pid=$!
BG_PIDS+=("$top_pid")
for _ in $(seq 300); do [ "$(wc -l <"$T/gone.out")" -ge 2 ] && break; sleep 0.1; done
unmount_bfs "$M"
wait_exit "$top_pid" 5 || fail "top still running 5 s after its mount went away"
[ "$WAIT_RC" = 1 ] || { cat "$T/gone.err" >&2; fail "top exited $WAIT_RC when its mount went away, expected 1"; }
grep -qF "batchfs top: $M/stats: " "$T/gone.err" && grep -qF "the mount went away" "$T/gone.err" ||
    { cat "$T/gone.err" >&2; fail "no message naming $M/stats when the mount went away"; }
[ "$(wc -l <"$T/gone.out")" -ge 2 ] || fail "top printed no lines before the mount went away"
ok "mount: unmounted under a running top -> exit 1, '$(cat "$T/gone.err")'"
