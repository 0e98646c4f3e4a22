#!/usr/bin/env bash
# tests/bench/bench_shard_bytes.sh CORPUS [N...] — static sharding reads only its bytes
# (docs/engine.md, "Plan"): for each payload page size in PAGE_SIZES (default "8M 1M":
# mkbatchfs's default, and one that gives the 2,000-image bench corpus as many pages per
# window as a large dataset has), the corpus is packed into a .bfs on the disk; then for
# each shard count N (default 4 2), each shuffle (pages, full) and each shard I of N: the
# file's pages are dropped from the page cache (fdatasync, posix_fadvise DONTNEED: only
# this file), a daemon is mounted in the foreground with shard=I/N (and BENCH_OPTS, whose
# prefetch=0 keeps it from reading ahead into epoch 1), one reader reads its epoch 0
# whole, and the daemon's read_bytes (/proc/PID/io: bytes it made the kernel fetch from
# the disk) are divided by the heap's payload bytes. Prints that fraction per shard, its
# mean and the target 1/N, and the fraction of .bfs pages touched (any byte in the page
# cache after the epoch, mincore). Samples are read one by one, so any shard reads about
# 1/N of the bytes; the shuffle decides how many pages those bytes lie in: about 1/N plus
# two shared windows (2 x 8 pages) for pages, nearly all for full. Nothing is asserted.
# Needs a disk-backed BENCH_DIR (tmpfs reads count no bytes; default /var/tmp); skips
# with a message when read_bytes stay 0.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
corpus=${1:?usage: bench_shard_bytes.sh CORPUS_DIR [N...]}
shift
counts=${*:-4 2}
page_sizes=${PAGE_SIZES:-8M 1M}
opts=${BENCH_OPTS:-batch=32,size=64,augment=eval,prefetch=0}
work=$(mktemp -d "${BENCH_DIR:-/var/tmp}/batchfs-bshard.XXXXXX")
mnt=$work/mnt
mkdir -p "$mnt"
cleanup() { fusermount3 -u "$mnt" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
bfs=$work/c.bfs

drop() { # this file's pages out of the page cache
    python3 -c '
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.fdatasync(fd)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
os.close(fd)' "$bfs"
}
resident() { # PAGE_BYTES -> "cached-bytes pages-touched": this file in the page cache
    python3 -c '
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
fd = os.open(sys.argv[1], os.O_RDONLY)
n = os.fstat(fd).st_size
pg = os.sysconf("SC_PAGE_SIZE")
a = libc.mmap(None, n, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
vec = (ctypes.c_ubyte * ((n + pg - 1) // pg))()
if a in (None, ctypes.c_void_p(-1).value) or libc.mincore(a, n, vec) != 0:
    sys.exit("mincore: " + os.strerror(ctypes.get_errno()))
libc.munmap(a, n)
heap, size = int(sys.argv[2]), int(sys.argv[3])
touched = set()
for i, v in enumerate(vec):
    if v & 1 and i * pg >= heap:
        touched.add((i * pg - heap) // size)
print(sum(v & 1 for v in vec) * pg, len(touched))' "$bfs" "$heap_offset" "$1"
}
mean() { printf '%s\n' "$@" | awk '{s+=$1} END{printf "%.3f", s/NR}'; }
read_bytes() { awk '$1 == "read_bytes:" {print $2}' "/proc/$1/io"; }

one() { # SHUFFLE I N -> "read_bytes pages-touched" of shard I/N's epoch 0, cold
    drop
    local left pid b touched
    read -r left _ < <(resident "$page_bytes")
    [ "$left" -le $((64 * 1024)) ] || echo "warning: $left bytes of the file still cached" >&2
    "$BUILD/batchfs" "$bfs" "$mnt" -f -o "$opts,shuffle=$1,shard=$2/$3" &
    pid=$!
    for _ in $(seq 200); do
        mountpoint -q "$mnt" && break
        sleep 0.05
    done
    python3 tests/bench/read_epochs.py "$mnt" 1 >/dev/null
    b=$(read_bytes "$pid")
    fusermount3 -u "$mnt"
    wait "$pid"
    read -r _ touched < <(resident "$page_bytes")
    echo "$b $touched"
}

for page in $page_sizes; do
    "$BUILD/mkbatchfs" --quiet --no-fsync --page-size "$page" "$corpus" "$bfs"
    # page_size (header offset 28), heap_offset (32), heap_size (40), page_count (48)
    read -r page_bytes heap_offset payload pages < <(python3 -c '
import struct, sys
h = open(sys.argv[1], "rb").read(56)
print(struct.unpack_from("<I", h, 28)[0], *struct.unpack_from("<QQQ", h, 32))' "$bfs")
    echo "$(basename "$corpus"): $payload payload bytes in $pages pages of $page; $opts"
    for N in $counts; do
        for shuffle in pages full; do
            fr=() pt=()
            for I in $(seq 0 $((N - 1))); do
                read -r b t < <(one "$shuffle" "$I" "$N")
                if [ "$b" -eq 0 ]; then
                    echo "skipped: read_bytes is 0 (is $work on tmpfs, or I/O accounting off?)"
                    exit 0
                fi
                fr+=("$(awk -v b="$b" -v p="$payload" 'BEGIN{printf "%.3f", b/p}')")
                pt+=("$(awk -v t="$t" -v p="$pages" 'BEGIN{printf "%.2f", t/p}')")
            done
            printf '  N=%d shuffle=%-5s read_bytes / payload: %s  mean %s (target 1/N = %.3f);' \
                "$N" "$shuffle" "${fr[*]}" "$(mean "${fr[@]}")" "$(awk -v n="$N" 'BEGIN{print 1/n}')"
            printf ' pages touched: %s  mean %s\n' "${pt[*]}" "$(mean "${pt[@]}")"
        done
    done
done
