#!/usr/bin/env bash
# tests/bench/bench_autotune.sh CORPUS — the autotuner against a grid of fixed settings,
# in one run (issue "Autotuning"):
#  1. fast: one reader reading batches as fast as it can;
#  2. slow: one reader that spends 1.5x a batch's compute time per batch (a training step);
#  3. four: four readers at once, starting at batches 0, Q, 2Q, 3Q of one epoch (Q = a
#     quarter of it), each reading R batches in order;
#  4. change: one reader that reads as fast as it can for the first half of its batches,
#     then spends the slow step per batch (its speed changes in the middle of the epoch).
# For each scenario, every grid point threads x prefetch (fixed) and `auto` run on a fresh
# mount; each prints images/s (all readers together) and the daemon's CPU seconds.
# Reported: autotuned / best grid point images/s (target >= 0.95); for "slow", the
# daemon's CPU time / the least CPU time among grid points that keep the reader fed
# (within 5% of the best images/s) (target <= 1.2). Then peak RSS with ram_mb=512 under
# the four-reader load (target: never above ram_mb). Each point is the best of $REPS runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
corpus=${1:?usage: bench_autotune.sh CORPUS_DIR}
base=${BENCH_OPTS:-batch=64,size=224}
REPS=${REPS:-2}
THREADS=${THREADS:-"1 $(nproc)"}
PREFETCH=${PREFETCH:-"0 1 3 8"}
work=$(mktemp -d "${TMPDIR:-/tmp}/batchfs-btune.XXXXXX")
mnt=$work/mnt
mkdir -p "$mnt"
dpid=
cleanup() {
    fusermount3 -u "$mnt" 2>/dev/null || true
    [ -n "$dpid" ] && wait "$dpid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
tck=$(getconf CLK_TCK)
mount_it() { # options
    "$BUILD/batchfs" "$work/c.bfs" "$mnt" -f -o "$1" 2>>"$work/daemon.log" &
    dpid=$!
    for _ in $(seq 100); do mountpoint -q "$mnt" && return 0; sleep 0.1; done
    echo "mount failed: $(cat "$work/daemon.log")" >&2; exit 1
}
umount_it() { # prints "cpu_seconds peak_rss_mb"
    local c r
    c=$(awk -v t="$tck" '{printf "%.3f", ($14 + $15) / t}' "/proc/$dpid/stat")
    r=$(awk '/VmHWM/ {printf "%.0f", $2 / 1024}' "/proc/$dpid/status")
    fusermount3 -u "$mnt"; wait "$dpid" || true; dpid=
    echo "$c $r"
}
cat >"$work/reader.py" <<'PYEOF'
import os, sys, time
# reader.py MNT EPOCH FIRST COUNT PAUSE_S [FROM] -> prints "images seconds wait_seconds"
# (pauses PAUSE_S after each batch from its FROM-th batch on; FROM defaults to 0)
mnt, epoch, first, count, pause = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
pause_from = int(sys.argv[6]) if len(sys.argv) > 6 else 0
nb = len(os.listdir(f"{mnt}/epoch/{epoch}"))
per = int(os.getxattr(f"{mnt}/epoch/{epoch}/batch_0", "user.batchfs.samples"))
buf = None
t0 = time.perf_counter(); wait = 0.0
for i in range(count):
    k = (first + i) % nb
    a = time.perf_counter()
    with open(f"{mnt}/epoch/{epoch}/batch_{k}", "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        if buf is None or len(buf) != size:
            buf = bytearray(size)
        mv, got = memoryview(buf), 0
        while got < size:
            n = f.readinto(mv[got:])
            if not n:
                raise SystemExit(f"short read of batch {k}")
            got += n
    wait += time.perf_counter() - a
    if pause and i >= pause_from:
        time.sleep(pause)
print(count * per, time.perf_counter() - t0, wait)
PYEOF

"$BUILD/mkbatchfs" --quiet "$corpus" "$work/c.bfs"
mount_it "$base"
nb=$(ls "$mnt/epoch/0" | wc -l)
per=$(python3 -c "import os; print(os.getxattr('$mnt/epoch/0/batch_0', 'user.batchfs.samples').decode())")
umount_it >/dev/null
Q=$((nb / 4)); R=${R:-$((nb / 4))}; N=${N:-$((nb / 2))}
# a batch's compute time on one core, for the slow reader's step
mount_it "$base,threads=1,prefetch=0"
t1=$(python3 "$work/reader.py" "$mnt" 0 0 4 0 | awk '{print $2 / 4}')
umount_it >/dev/null
step=$(awk -v t="$t1" 'BEGIN{printf "%.4f", 1.5 * t}')
echo "corpus $corpus: $nb batches of $per per epoch ($base); a batch takes ${t1}s on one core; slow step ${step}s"

epoch=1
run() { # scenario options -> prints "images_per_s cpu_s rss_mb" (best images/s of REPS)
    local sc=$1 opts=$2 best= line
    for _ in $(seq "$REPS"); do
        epoch=$((epoch + 1)) # a fresh epoch each run: nothing cached
        mount_it "$base,$opts"
        case $sc in
        fast) line=$(python3 "$work/reader.py" "$mnt" "$epoch" 0 "$N" 0 | awk '{print $1 / $2}') ;;
        slow) line=$(python3 "$work/reader.py" "$mnt" "$epoch" 0 "$N" "$step" | awk '{print $1 / $2}') ;;
        change) line=$(python3 "$work/reader.py" "$mnt" "$epoch" 0 "$N" "$step" $((N / 2)) | awk '{print $1 / $2}') ;;
        four) local t0 t1_ i
              t0=$(date +%s.%N)
              for i in 0 1 2 3; do python3 "$work/reader.py" "$mnt" "$epoch" $((i * Q)) "$R" 0 >/dev/null & done
              wait $(jobs -p | grep -v "^$dpid$")
              t1_=$(date +%s.%N)
              line=$(awk -v a="$t0" -v b="$t1_" -v n=$((4 * R * per)) 'BEGIN{print n / (b - a)}') ;;
        esac
        local res; res=$(umount_it)
        if [ -z "$best" ] || awk -v a="$line" -v b="${best%% *}" 'BEGIN{exit !(a > b)}'; then best="$line $res"; fi
    done
    echo "$best"
}

for sc in ${SCENARIOS:-fast slow four change}; do
    echo "== $sc =="
    rows=()
    for t in $THREADS; do for p in $PREFETCH; do
        r=$(run "$sc" "threads=$t,prefetch=$p")
        rows+=("$r")
        printf '  threads=%s prefetch=%-2s %8.1f images/s  daemon CPU %6.2fs\n' "$t" "$p" ${r% *}
    done; done
    a=$(run "$sc" "threads=auto,prefetch=auto")
    printf '  auto                 %8.1f images/s  daemon CPU %6.2fs\n' ${a% *}
    best=$(printf '%s\n' "${rows[@]}" | sort -g -k1 | tail -n 1 | cut -d' ' -f1)
    echo "  autotuned / best grid point: $(awk -v a="${a%% *}" -v b="$best" 'BEGIN{printf "%.2f", a/b}') (target >= 0.95)"
    if [ "$sc" = slow ] || [ "$sc" = change ]; then
        least=$(printf '%s\n' "${rows[@]}" | awk -v b="$best" '$1 >= 0.95 * b {print $2}' | sort -g | head -n 1)
        acpu=$(echo "$a" | cut -d' ' -f2)
        echo "  daemon CPU autotuned / least among fed grid points: $(awk -v a="$acpu" -v b="$least" 'BEGIN{printf "%.2f", a/b}') (target <= 1.2)"
    fi
done

echo "== RAM budget: four readers, ram_mb=512 =="
REPS=1 r=$(run four "threads=auto,prefetch=auto,cache_mb=auto,ram_mb=512")
echo "  peak RSS $(echo "$r" | cut -d' ' -f3) MB with ram_mb=512 (target: <= 512)"
