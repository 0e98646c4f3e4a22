#!/usr/bin/env bash
# tests/bench/bench_sources.sh CORPUS — a dataset read from object storage vs the same
# file on local disk (docs/sources.md), in one run:
#  1. the first epoch, read in order through a fresh mount, from http:// (nginx on
#     127.0.0.1 behind tests/bench/delay_proxy.c adding BENCH_DELAY_MS, default 20, to
#     every round trip: a far store; this kernel has no `tc netem`) vs from the local file
#     with the page cache dropped: images/s per wall second (target >= 0.9) and per CPU
#     second of the daemon, medians of 3 rounds alternating the two; and per wall second
#     for the batches after the 5th alone (the ramp of a fresh mount left out);
#  2. bytes fetched for that epoch / the payload bytes it needs (target <= 1.05);
#  3. shard=0/4's first epoch: bytes fetched / the file's size (target <= 0.3);
#  4. a second mount of the host with the same source_cache= (the first read the epoch):
#     payload bytes fetched (target 0), and its images/s against the local file's.
# The server, the proxy and the daemon share this machine's cores: the per-CPU-second
# ratio says what the fetch path costs the daemon. Needs root (drop_caches) and nginx.
# Prints ratios; asserts nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
corpus=${1:?usage: bench_sources.sh CORPUS_DIR}
opts=${BENCH_OPTS:-batch=64,size=224} # 12 batches of the bench corpus: prefetch has batches to overlap
delay=${BENCH_DELAY_MS:-20}
command -v nginx >/dev/null || { echo "bench_sources: no nginx (make deps installs it)"; exit 0; }
work=$(mktemp -d "${TMPDIR:-/tmp}/batchfs-bsrc.XXXXXX")
mnt=$work/mnt
mkdir -p "$mnt" "$work/www" "$work/logs"
chmod 755 "$work" "$work/www" # nginx's workers run as www-data
pids=()
cleanup() {
    fusermount3 -u "$mnt" 2>/dev/null || true
    [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])"; }
now() { date +%s.%N; }
median() { sort -g | awk '{v[NR]=$1} END{print v[int((NR+1)/2)]}'; }

"$BUILD/mkbatchfs" --quiet "$corpus" "$work/www/c.bfs"
port=$(free_port) pport=$(free_port)
cat >"$work/nginx.conf" <<EOF
worker_processes 2;
pid $work/nginx.pid;
error_log $work/logs/error.log;
events { worker_connections 512; }
http {
  access_log off;
  client_body_temp_path $work/logs; proxy_temp_path $work/logs;
  fastcgi_temp_path $work/logs; uwsgi_temp_path $work/logs; scgi_temp_path $work/logs;
  keepalive_requests 100000;
  server { listen 127.0.0.1:$port; root $work/www; }
}
EOF
nginx -c "$work/nginx.conf"
cc -O2 -o "$work/delay_proxy" tests/bench/delay_proxy.c
"$work/delay_proxy" "$pport" "$port" "$delay" >"$work/proxy.out" 2>&1 &
pids+=($!)
for _ in $(seq 50); do grep -q ready "$work/proxy.out" 2>/dev/null && break; sleep 0.1; done
url=http://127.0.0.1:$pport/c.bfs

# the payload bytes of the samples: the sample table's lengths (docs/format.md)
payload=$(python3 - "$work/www/c.bfs" <<'EOF'
import struct, sys
f = open(sys.argv[1], "rb").read()
n, = struct.unpack_from("<Q", f, 16)
tab, = struct.unpack_from("<Q", f, 56)
rec, = struct.unpack_from("<I", f, 108)
print(sum(struct.unpack_from("<I", f, tab + i * rec + 8)[0] for i in range(n)))
EOF
)
size=$(stat -c %s "$work/www/c.bfs")

mount_it() { # SOURCE [extra options]
    "$BUILD/batchfs" "$1" "$mnt" -o "$opts${2:+,$2}"
    for _ in $(seq 100); do mountpoint -q "$mnt" && return 0; sleep 0.1; done
    echo "mount failed" >&2; exit 1
}
daemon_cpu() { # the mount's daemon CPU seconds so far
    local pid
    pid=$(pgrep -f "batchfs $1 $mnt" | head -1)
    awk '{printf "%.3f", ($14 + $15) / 100}' "/proc/$pid/stat"
}
stat_source() { python3 -c "import json; s=json.load(open('$mnt/stats')).get('source',{}); print(s.get('$1',0))"; }

mount_it "$work/www/c.bfs"
nb=$(ls "$mnt/epoch/0" | wc -l)
per=$(python3 -c "import os; print(os.getxattr('$mnt/epoch/0/batch_0', 'user.batchfs.samples').decode())")
fusermount3 -u "$mnt"
echo "corpus $corpus: $nb batches of $per images per epoch ($opts); payload $payload bytes in a file of $size; $delay ms added per round trip"

# 1. + 2.: first epochs, alternating local (page cache dropped) and remote
r_wall=() r_cpu=() r_rest=() fetched=()
for round in 1 2 3; do
    for side in local remote; do
        src=$work/www/c.bfs
        [ $side = remote ] && src=$url
        sync
        echo 3 >/proc/sys/vm/drop_caches
        mount_it "$src"
        t0=$(now)
        for k in $(seq 0 $((nb - 1))); do
            cat "$mnt/epoch/0/batch_$k" >/dev/null
            [ "$k" = 4 ] && t5=$(now)
        done
        t1=$(now)
        cpu=$(daemon_cpu "$src")
        [ $side = remote ] && fetched+=("$(stat_source bytes)")
        fusermount3 -u "$mnt"
        ips=$(awk -v n="$((nb * per))" -v a="$t0" -v b="$t1" 'BEGIN{print n/(b-a)}')
        ipc=$(awk -v n="$((nb * per))" -v c="$cpu" 'BEGIN{print n/c}')
        printf '   round %d %-6s: %8.1f images/s, %8.1f images per daemon CPU second\n' "$round" "$side" "$ips" "$ipc"
        eval "${side}_ips=$ips ${side}_ipc=$ipc ${side}_rest=$(awk -v a="$t5" -v b="$t1" 'BEGIN{print b-a}')"
    done
    r_wall+=("$(awk -v a="$remote_ips" -v b="$local_ips" 'BEGIN{printf "%.2f", a/b}')")
    r_rest+=("$(awk -v a="$remote_rest" -v b="$local_rest" 'BEGIN{printf "%.2f", b/a}')")
    r_cpu+=("$(awk -v a="$remote_ipc" -v b="$local_ipc" 'BEGIN{printf "%.2f", a/b}')")
done
echo "1. first epoch from http:// (+${delay} ms) / from the local file (cold): $(printf '%s\n' "${r_wall[@]}" | median) per wall second, $(printf '%s\n' "${r_cpu[@]}" | median) per daemon CPU second, medians of 3 (target >= 0.9)"
echo "   of which the batches after the 5th (the fetch pipeline full): $(printf '%s\n' "${r_rest[@]}" | median) per wall second (the first 5 wait for the first round trips, connections and the pace to be learned)"
need=$(awk -v p="$payload" -v n="$((nb * per))" -v s="$(python3 -c "import struct; print(struct.unpack_from('<Q', open('$work/www/c.bfs','rb').read(128), 16)[0])")" 'BEGIN{print p*n/s}')
f=$(printf '%s\n' "${fetched[@]}" | median)
echo "2. bytes fetched for one epoch / its payload bytes: $(awk -v a="$f" -v b="$need" 'BEGIN{printf "%.3f", a/b}') ($f of $need; target <= 1.05)"

# 3. one shard of four
mount_it "$url" shard=0/4,batch=32
for k in $(seq 0 $(($(ls "$mnt/epoch/0" | wc -l) - 1))); do cat "$mnt/epoch/0/batch_$k" >/dev/null; done
f=$(stat_source bytes)
fusermount3 -u "$mnt"
echo "3. shard=0/4, one epoch: bytes fetched / file size: $(awk -v a="$f" -v b="$size" 'BEGIN{printf "%.3f", a/b}') (target <= 0.3)"
# 4. a second mount on the host: the first filled source_cache
mount_it "$url" "source_cache=$work/sc"
for k in $(seq 0 $((nb - 1))); do cat "$mnt/epoch/0/batch_$k" >/dev/null; done
fusermount3 -u "$mnt"
mount_it "$url" "source_cache=$work/sc" # no cache_dir: every batch computed again
t0=$(now)
for k in $(seq 0 $((nb - 1))); do cat "$mnt/epoch/0/batch_$k" >/dev/null; done
t1=$(now)
f=$(python3 -c "import json; s=json.load(open('$mnt/stats'))['source']; print(s['prefetch']['samples'], s['cache']['hits'])")
fusermount3 -u "$mnt"
ips=$(awk -v n="$((nb * per))" -v a="$t0" -v b="$t1" 'BEGIN{print n/(b-a)}')
echo "4. a second mount with the same source_cache: payload samples fetched ${f% *} (target 0), read from the disk ${f#* }; $(awk -v a="$ips" -v b="$local_ips" 'BEGIN{printf "%.2f", a/b}') of the local file's images/s (last round's)"
