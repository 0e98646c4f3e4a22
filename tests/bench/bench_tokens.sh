#!/usr/bin/env bash
# tests/bench/bench_tokens.sh [TOKENS] — the token pipelines through the mount (issue 20):
#  1. pack=concat read in order through the mount (every batch computed: a fresh epoch),
#     best of 3 epochs, vs `cat` of the same batch bytes from tmpfs, best of 3, both into
#     /dev/null: ratio of bytes/s (target >= 0.9), and the daemon's CPU seconds per GB;
#  2. the order a shell's glob gives (`cat MNT/epoch/N/batch_*`: batch_0, batch_1,
#     batch_10, batch_100, ...) against numeric order, on one mount of a smaller dataset
#     (BFS_TOKENS_GLOB tokens, default 1.5 * 10^8): the daemon's CPU seconds per epoch,
#     whole epochs read alternately in each order by the same command (after one epoch in
#     numeric order), medians of 3 each: ratio glob / numeric (target ~1);
#  3. random access on a dataset of TOKENS tokens (default 10^9, ~1M documents of mean
#     1,000 tokens, u16 ids): the time to read batch K (the last of an epoch) vs batch 0,
#     each the first read of its epoch on a fresh mount (so each builds its epoch's table),
#     median of 3 (target <= 2).
# The datasets are made once under $BFS_TOKENS_DIR (default /var/tmp/batchfs-tokens): a
# flat u16 file each and its .bfs. Prints ratios measured in one run. BFS_TOKENS_OPTS adds
# options to every mount; BFS_TOKENS_NO_RANDOM=1 stops after the second measurement.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
N=${1:-1000000000}
D=${BFS_TOKENS_DIR:-/var/tmp/batchfs-tokens}
W=$(mktemp -d "${TMPDIR:-/tmp}/bench-tokens.XXXXXX")
SHM=$(mktemp -d /dev/shm/bench-tokens.XXXXXX)
M=$W/mnt
mkdir -p "$D" "$M"
cleanup() { fusermount3 -u "$M" 2>/dev/null || true; rm -rf "$W" "$SHM"; }
trap cleanup EXIT
now() { date +%s.%N; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }

. tests/pyenv.sh # numpy
make_tokens() { # N: $D/tN.bfs, made once
    [ ! -f "$D/t$1.bfs" ] || return 0
    echo "making $1 tokens in $D (once) ..."
    "$PY" - "$D/t$1.bin" "$1" <<'EOF'
import sys
import numpy as np
# u16 ids < 50000; a separator (50256) ends a document about every 1,000 tokens
path, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(3)
with open(path, "wb") as f:
    left = n
    while left:
        m = min(left, 1 << 26)
        ids = rng.integers(0, 50000, m, dtype=np.uint16)
        ids[rng.integers(0, m, max(m // 1000, 1))] = 50256
        left -= m
        if not left:
            ids[-1] = 50256
        ids.tofile(f)
EOF
    "$BUILD/mkbatchfs" --quiet --tokens u16 --doc-sep 50256 "$D/t$1.bin" "$D/t$1.bfs.tmp"
    mv "$D/t$1.bfs.tmp" "$D/t$1.bfs"
    rm -f "$D/t$1.bin"
}
make_tokens "$N"
BFS=$D/t$N.bfs
"$BUILD/mkbatchfs" --info "$BFS" | grep -E "^(samples|tokens|file size)"
cat "$BFS" >/dev/null # the dataset in the page cache: this measures the pipeline, not the disk

# ---- 1: in-order reads through the mount vs cat from tmpfs ---------------------------------
# Both sides are read by the same command into /dev/null, best of 3: the mount's three
# passes are three fresh epochs (every batch computed), tmpfs's three reads of one set of
# files (the mount's batches, copied there after the timed passes).
O=seq_len=2048,batch=64${BFS_TOKENS_OPTS:+,$BFS_TOKENS_OPTS} # e.g. BFS_TOKENS_OPTS=huge_pages=1
NB=${BFS_TOKENS_BATCHES:-1500} # 1500 x 512 KiB = 786 MB
"$BUILD/batchfs" "$BFS" "$M" -o "$O,epochs=4"
pid=$(pgrep -nf "batchfs $BFS $M")
list() { for k in $(seq 0 $((NB - 1))); do echo "$M/epoch/$1/batch_$k"; done; }
t_mount=1e9 cpu_best=0 runs=""
for ep in 1 2 3; do
    files=$(list "$ep")
    cpu0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    t0=$(now)
    echo "$files" | xargs cat >/dev/null
    t=$(awk -v a="$(now)" -v b="$t0" 'BEGIN{print a-b}')
    cpu1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    runs="$runs $(printf '%.3f' "$t")"
    if awk -v t="$t" -v b="$t_mount" 'BEGIN{exit !(t < b)}'; then
        t_mount=$t cpu_best=$((cpu1 - cpu0))
    fi
done
list 1 | xargs cat >"$SHM/all" # the bytes of one pass, for tmpfs (not timed)
bytes=$(stat -c %s "$SHM/all")
fusermount3 -u "$M"
# the same bytes as as many files on tmpfs, read by the same command
(cd "$SHM" && split -n "$NB" -d -a 5 all b_ && rm all)
cat "$SHM"/b_* >/dev/null
t_cat=1e9
for _ in 1 2 3; do
    t0=$(now)
    ls "$SHM"/b_* | xargs cat >/dev/null
    t=$(awk -v a="$(now)" -v b="$t0" 'BEGIN{print a-b}')
    t_cat=$(awk -v t="$t" -v b="$t_cat" 'BEGIN{print (t < b ? t : b)}')
done
hz=$(getconf CLK_TCK)
printf 'pack=concat, %s: %d batches, %.0f MB\n' "$O" "$NB" "$(awk -v b="$bytes" 'BEGIN{print b/1e6}')"
printf '  through the mount (fresh epochs, each batch computed): %s s; best %.3f s, %.0f MB/s, daemon CPU %.2f s per GB\n' \
    "${runs# }" "$t_mount" "$(awk -v b="$bytes" -v t="$t_mount" 'BEGIN{print b/t/1e6}')" \
    "$(awk -v c="$cpu_best" -v h="$hz" -v b="$bytes" 'BEGIN{print c/h/(b/1e9)}')"
printf '  cat from tmpfs (best of 3): %.3f s, %.0f MB/s\n' \
    "$t_cat" "$(awk -v b="$bytes" -v t="$t_cat" 'BEGIN{print b/t/1e6}')"
echo "  ratio mount / tmpfs: $(ratio "$t_cat" "$t_mount") (target >= 0.9)"

# ---- 2: glob order against numeric order: the daemon's CPU per epoch -----------------------
NG=${BFS_TOKENS_GLOB:-150000000}
make_tokens "$NG"
GBFS=$D/t$NG.bfs
cat "$GBFS" >/dev/null
"$BUILD/batchfs" "$GBFS" "$M" -o "$O,epochs=7"
pid=$(pgrep -nf "batchfs $GBFS $M")
gnb=$(ls "$M/epoch/0" | wc -l)
# both orders as one list of paths for the same command (xargs cat); the glob's order is
# the C locale's here, and the same in others for names that differ only in digits
numeric() { for k in $(seq 0 $((gnb - 1))); do echo "$M/epoch/$1/batch_$k"; done; }
globbed() { (LC_ALL=C && printf '%s\n' "$M/epoch/$1"/batch_*); }
epoch_cpu() { # ORDER EPOCH: the daemon's CPU ticks while the epoch is read in ORDER
    local c0 c1
    c0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    "$1" "$2" | xargs cat >/dev/null
    c1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    echo $((c1 - c0))
}
secs() { printf '%s\n' "$@" | awk -v h="$hz" '{printf "%s%.2f", (NR > 1 ? " " : ""), $1 / h}'; }
epoch_cpu numeric 0 >/dev/null # the first epoch: the dataset's pages, the autotuner's looks
cpu_num=() cpu_glob=()
for ep in 1 3 5; do
    cpu_num+=("$(epoch_cpu numeric "$ep")")
    cpu_glob+=("$(epoch_cpu globbed $((ep + 1)))")
done
regrets=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['cache']['passed_regrets'])" "$M/stats")
fusermount3 -u "$M"
med3() { printf '%s\n' "$@" | sort -g | sed -n 2p; }
cn=$(med3 "${cpu_num[@]}") cg=$(med3 "${cpu_glob[@]}")
printf 'glob order vs numeric order, pack=concat, %s, %s tokens, %d batches an epoch:\n' "$O" "$NG" "$gnb"
printf '  daemon CPU per epoch, alternating: numeric %s s; glob %s s; passed regrets %s\n' \
    "$(secs "${cpu_num[@]}")" "$(secs "${cpu_glob[@]}")" "$regrets"
echo "  ratio glob / numeric daemon CPU per epoch (medians of 3): $(ratio "$cg" "$cn") (target ~1)"

[ -z "${BFS_TOKENS_NO_RANDOM:-}" ] || exit 0
# ---- 3: random access: batch K vs batch 0, each the first read of its epoch ---------------
times0=() timesk=()
for r in 1 2 3; do
    for which in 0 K; do
        "$BUILD/batchfs" "$BFS" "$M" -o "$O,epochs=100,prefetch=0"
        nb=$(ls "$M/epoch/0" | wc -l)
        k=0 ep=$((10 + r))
        [ "$which" = K ] && k=$((nb - 1)) ep=$((50 + r))
        t0=$(now)
        cat "$M/epoch/$ep/batch_$k" >/dev/null
        t=$(awk -v a="$(now)" -v b="$t0" 'BEGIN{print a-b}')
        fusermount3 -u "$M"
        if [ "$which" = 0 ]; then times0+=("$t"); else timesk+=("$t"); fi
    done
done
med() { printf '%s\n' "$@" | sort -g | sed -n 2p; }
t0m=$(med "${times0[@]}") tkm=$(med "${timesk[@]}")
printf 'random access, %s tokens, %d batches per epoch: batch 0 %.3f s, batch %d %.3f s (medians of 3, first read of an epoch on a fresh mount)\n' \
    "$N" "$nb" "$t0m" "$((nb - 1))" "$tkm"
echo "  ratio batch K / batch 0: $(ratio "$tkm" "$t0m") (target <= 2)"
