#!/usr/bin/env bash
# tests/mount/remote.sh — remote workers through Redis (remote=, `batchfs worker`,
# docs/scale-out.md), against a redis-server of the case's own on 127.0.0.1:
#  1. a mount with remote= served by a worker: identical bytes to a plain mount, nothing
#     computed by the mount (/stats remote.hits, batches.computed 0, remote.workers 1);
#     then the values evicted from Redis: a new mount gets them again, without waiting;
#  2. a worker that dies holding jobs (a "ghost" consumer takes them and never answers):
#     another worker takes them over after remote_claim_ms, the reader gets its batch;
#  3. Redis killed mid-epoch: the mount computes (fallback), identical bytes, no hang;
#     Redis restarted: worker and mounts reconnect and are served remotely again;
#  4. a corrupt value in Redis: refused (checksum), counted, served right;
#  5. a mount of another pipeline: the worker names it in its log with the options that
#     differ, and does not serve it;
#  6. Redis unreachable at mount: remote_fallback=wait refuses the mount with the reason,
#     remote_fallback=local mounts and computes;
#  7. group= across mounts through Redis: two mounts' readers of epoch/N/next get every batch
#     of the epoch once between them (identical bytes), then ENODATA;
#  8. a batch that fails on the worker (bad_sample=fail) fails on the mount at once, even
#     with remote_fallback=wait, the worker's message in the mount's log;
#  9. a wrong password: the worker exits 1 saying AUTH was refused;
# and first, usage errors of `batchfs worker` and of the remote options (exit 2, a reason).
. "$(dirname "$0")/lib.sh"
require_fuse
command -v redis-server >/dev/null || fail "redis-server is missing (make deps installs it)"

"$GEN" "$T/images" 3 16 48 120 4
"$MKBATCHFS" --quiet "$T/images" "$T/d.bfs"
OPTS=batch=8,size=32,seed=5 # 48 samples: 6 batches an epoch

# a tiny RESP client: raw Redis commands around batchfs (ghost consumers, corrupt values)
cat >"$T/resp.py" <<'EOF'
import socket, sys
def conn(port):
    s = socket.create_connection(("127.0.0.1", int(port)), timeout=10)
    return s, s.makefile("rb")
def cmd(c, *a):
    s, f = c
    out = b"*%d\r\n" % len(a)
    for x in a:
        x = x if isinstance(x, bytes) else str(x).encode()
        out += b"$%d\r\n%s\r\n" % (len(x), x)
    s.sendall(out)
    return read(f)
def read(f):
    l = f.readline(); t, v = l[:1], l[1:-2]
    if t == b"+": return v.decode()
    if t == b"-": raise SystemExit("redis error: " + v.decode())
    if t == b":": return int(v)
    if t == b"$":
        n = int(v)
        return None if n < 0 else f.read(n + 2)[:-2]
    if t == b"*":
        n = int(v)
        return None if n < 0 else [read(f) for _ in range(n)]
    raise SystemExit("bad reply %r" % l)
if __name__ == "__main__":
    port, what = sys.argv[1], sys.argv[2]
    c = conn(port)
    if what == "ping": print(cmd(c, "PING"))
    elif what == "xlen": print(cmd(c, "XLEN", sys.argv[3]))
    elif what == "zcard": print(cmd(c, "ZCARD", sys.argv[3]))
    elif what == "set": print(cmd(c, "SET", sys.argv[3], sys.argv[4].encode()))
    elif what == "del": print(cmd(c, "DEL", sys.argv[3]))
    elif what == "ghost":  # take every queued job as consumer "ghost", answer none
        r = cmd(c, "XREADGROUP", "GROUP", "workers", "ghost", "COUNT", "100", "STREAMS", sys.argv[3], ">")
        print(sum(len(s[1]) for s in r) if r else 0)
EOF
resp() { python3 "$T/resp.py" "$@"; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port)
R=redis://127.0.0.1:$PORT
REDIS_PID=
start_redis() { # [ARGS...]: redis-server on $PORT, waited for
    redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$T" "$@" \
        >>"$T/redis.log" 2>&1 &
    REDIS_PID=$!
    BG_PIDS+=("$REDIS_PID")
    local i
    for i in $(seq 100); do
        if python3 -c "import socket; socket.create_connection(('127.0.0.1',$PORT),1)" 2>/dev/null; then
            return 0
        fi
        sleep 0.05
    done
    fail "redis-server did not start on port $PORT: $(tail -3 "$T/redis.log")"
}
stop_redis() { kill -KILL "$REDIS_PID"; wait "$REDIS_PID" 2>/dev/null || true; }
W_PID=
start_worker() { # NAME [OPTIONS]: `batchfs worker` in the background, until it serves
    local name=$1 extra=${2:-}
    "$BATCHFS" worker "$T/d.bfs" -o "$OPTS,remote=$R,threads=1$extra" --name "$name" \
        >"$T/$name.log" 2>&1 </dev/null &
    W_PID=$!
    BG_PIDS+=("$W_PID")
    local i
    for i in $(seq 100); do
        grep -q "serving pipeline" "$T/$name.log" && return 0
        kill -0 "$W_PID" 2>/dev/null || fail "worker $name exited: $(cat "$T/$name.log")"
        sleep 0.1
    done
    fail "worker $name did not start: $(cat "$T/$name.log")"
}
stat_of() { python3 -c "import json,sys; d=json.load(open(sys.argv[1]+'/stats')); print(eval(sys.argv[2]))" "$@"; }
same_as_ref() { # MNT EPOCH K...
    local m=$1 e=$2 k
    shift 2
    for k in "$@"; do
        cmp -s "$m/epoch/$e/batch_$k" "$T/ref/epoch/$e/batch_$k" ||
            fail "$m: epoch $e batch $k differs from a plain mount's"
    done
}
expect_log 'remote: no worker of pipeline [0-9a-f]+ is alive'
expect_log 'remote: [0-9]+ worker\(s\) alive'
expect_log 'remote.*(Connection refused|Connection reset|connection lost|Server closed)'
expect_log 'remote: Redis answers again'
expect_log 'remote: bfs:.*deleted, to be computed again'
expect_log 'computing batches here until Redis answers'
expect_log 'remote.*NOAUTH' # (a mount still up when Redis comes back with a password)

# ---- 0. usage errors
usage() { # WANT ARGS...: batchfs ARGS... exits 2 saying WANT
    local want=$1 out rc=0
    shift
    out=$("$BATCHFS" "$@" 2>&1) || rc=$?
    [ "$rc" = 2 ] || fail "batchfs $*: exit $rc, expected 2 ($out)"
    case $out in *"$want"*) ;; *) fail "batchfs $*: '$out' does not say '$want'" ;; esac
}
usage "which Redis? give -o remote=" worker "$T/d.bfs" -o "$OPTS"
usage "worker takes one SOURCE" worker -o "remote=redis://127.0.0.1"
usage "mount options (-o fsname=x) mean nothing to a worker" worker "$T/d.bfs" -o "remote=redis://127.0.0.1,fsname=x"
usage "-s is not a worker's option" worker "$T/d.bfs" -o "remote=redis://127.0.0.1" -s
usage "--name is a worker's option" "$T/d.bfs" "$T" --name w
usage "remote=http://h: not a Redis URL" "$T/d.bfs" "$T" -o remote=http://h
usage "remote=redis://h:99999: port must be 1..65535" "$T/d.bfs" "$T" -o remote=redis://h:99999
usage "remote_fallback=later: must be one of local|wait" "$T/d.bfs" "$T" -o remote_fallback=later
usage "remote_wait_ms=0: must be an integer in 1..86400000" "$T/d.bfs" "$T" -o remote_wait_ms=0
ok "usage errors: worker without remote=, stray arguments, bad URLs and values, each named"

mkdir "$T/ref" "$T/m1" "$T/m2" "$T/m3" "$T/m4" "$T/m6" "$T/m7" "$T/g1" "$T/g2"
start_redis
mount_bfs "$T/d.bfs" ref -o "$OPTS"

# ---- 1. served by a worker
start_worker w1
mount_bfs "$T/d.bfs" m1 -o "$OPTS,remote=$R,remote_wait_ms=30000"
same_as_ref "$T/m1" 0 0 1 2 3 4 5
computed=$(stat_of "$T/m1" "d['batches']['computed']")
hits=$(stat_of "$T/m1" "d['remote']['hits']")
workers=$(stat_of "$T/m1" "d['remote']['workers']")
[ "$computed" = 0 ] && [ "$hits" -ge 6 ] && [ "$workers" = 1 ] ||
    fail "m1: computed $computed, remote hits $hits, workers $workers (expected 0, >= 6, 1)"
ok "a worker served epoch 0: $hits batches from Redis, identical bytes, none computed here"

# evicted values (Redis's maxmemory policy, or the TTL): asked for again, served again
for k in 0 1 2 3 4 5; do resp "$PORT" del "bfs:{$(sed -n 's/^fingerprint = //p' "$T/m1/pipeline")}:b:0:$k" >/dev/null; done
mount_bfs "$T/d.bfs" m7 -o "$OPTS,remote=$R,remote_wait_ms=30000"
t0=$(date +%s%N)
same_as_ref "$T/m7" 0 0 1 2 3 4 5
ms=$((($(date +%s%N) - t0) / 1000000))
hits=$(stat_of "$T/m7" "d['remote']['hits']")
[ "$hits" -ge 6 ] && [ "$ms" -lt 20000 ] || fail "after eviction: $hits remote hits in $ms ms (expected >= 6, well under remote_wait_ms)"
ok "values evicted from Redis: asked for and computed again by the worker ($hits hits, $ms ms), identical bytes"

# ---- 2. a worker dies holding jobs: another takes them over after remote_claim_ms
kill -TERM "$W_PID"
wait "$W_PID" || fail "worker w1 exited with status $? on SIGTERM"
grep -q "stopping: " "$T/w1.log" || fail "w1 did not say it stopped: $(cat "$T/w1.log")"
FP=$(sed -n 's/^fingerprint = //p' "$T/m1/pipeline")
[ -n "$FP" ] || fail "no fingerprint in m1/pipeline"
JOBS="bfs:{$FP}:jobs"
cat "$T/m1/epoch/1/batch_0" >"$T/got.1.0" & # waits: w1's heartbeat still counts
reader=$!
BG_PIDS+=("$reader")
for i in $(seq 100); do [ "$(resp "$PORT" xlen "$JOBS")" -ge 1 ] && break; sleep 0.05; done
taken=$(resp "$PORT" ghost "$JOBS")
[ "$taken" -ge 1 ] || fail "the ghost consumer took no job"
start_worker w2 ",remote_claim_ms=500"
wait "$reader" || fail "the reader of epoch 1 batch 0 failed"
cmp -s "$T/got.1.0" "$T/ref/epoch/1/batch_0" || fail "epoch 1 batch 0 differs after a take-over"
for i in $(seq 50); do grep -q "took over" "$T/w2.log" && break; sleep 0.1; done
grep -q "took over" "$T/w2.log" || fail "w2 never took over the ghost's jobs: $(cat "$T/w2.log")"
ok "w2 took over $taken job(s) a dead worker held; the reader got identical bytes"

# ---- 3. Redis killed mid-epoch, then restarted
stop_redis
t0=$(date +%s%N)
same_as_ref "$T/m1" 2 0 1 2 3 4 5
ms=$((($(date +%s%N) - t0) / 1000000))
[ "$ms" -lt 20000 ] || fail "epoch 2 with Redis down took $ms ms (remote_wait_ms is 30000)"
fb=$(stat_of "$T/m1" "d['remote']['fallbacks']")
[ "$fb" -ge 1 ] || fail "m1 counted no fallback with Redis down"
ok "Redis down: epoch 2 computed here ($fb fallbacks), identical bytes, no wait"
start_redis
for i in $(seq 100); do grep -q "Redis is back" "$T/w2.log" && [ "$(resp "$PORT" zcard "bfs:{$FP}:workers")" -ge 1 ] && break; sleep 0.1; done
[ "$(resp "$PORT" zcard "bfs:{$FP}:workers")" -ge 1 ] || fail "w2 did not come back: $(tail -3 "$T/w2.log")"
mount_bfs "$T/d.bfs" m2 -o "$OPTS,remote=$R,remote_wait_ms=30000"
same_as_ref "$T/m2" 3 0 1 2 3 4 5
hits=$(stat_of "$T/m2" "d['remote']['hits']")
[ "$hits" -ge 6 ] || fail "m2 after the restart: $hits remote hits, expected >= 6"
ok "Redis restarted: the worker reconnected, a new mount got epoch 3 from it"

# ---- 4. a corrupt value is refused and served right
resp "$PORT" set "bfs:{$FP}:b:4:0" "not a batch" >/dev/null
mount_bfs "$T/d.bfs" m3 -o "$OPTS,remote=$R,remote_wait_ms=30000"
same_as_ref "$T/m3" 4 0
corrupt=$(stat_of "$T/m3" "d['remote']['corrupt']")
[ "$corrupt" = 1 ] || fail "m3: remote.corrupt $corrupt, expected 1"
ok "a corrupt value in Redis was refused, counted and served right"

# ---- 5. another pipeline: named by the worker, not served
mount_bfs "$T/d.bfs" m4 -o "batch=8,size=32,seed=6,remote=$R,remote_fallback=wait,remote_wait_ms=1000"
cat "$T/m4/epoch/0/batch_0" >/dev/null 2>&1 & # waits for a worker that never comes
BG_PIDS+=($!)
for i in $(seq 150); do grep -q "refusing" "$T/w2.log" && break; sleep 0.1; done
line=$(grep "refusing" "$T/w2.log" || true)
case $line in
*"seed = 6 (here: seed = 5)"*) ok "the worker named the other pipeline and the option that differs" ;;
*) fail "w2 did not name the other pipeline's differing option: '$line'" ;;
esac

# ---- 6. Redis unreachable at mount
CLOSED=$(free_port)
mkdir -p "$T/m5"
out=$("$BATCHFS" "$T/d.bfs" "$T/m5" -o "$OPTS,remote=redis://127.0.0.1:$CLOSED,remote_fallback=wait" 2>&1) &&
    fail "a mount with remote_fallback=wait and no Redis succeeded"
case $out in
*"Connection refused"*"remote_fallback=wait"*) ok "no Redis, remote_fallback=wait: mount refused ($out)" ;;
*) fail "no Redis, remote_fallback=wait: unclear message: '$out'" ;;
esac
is_mounted "$T/m5" && fail "m5 stayed mounted"
mount_bfs "$T/d.bfs" m6 -o "$OPTS,remote=redis://127.0.0.1:$CLOSED"
same_as_ref "$T/m6" 5 0 1
grep -q "computing batches here until Redis answers" "$DAEMON_LOG" || fail "m6 did not say it computes here"
ok "no Redis, remote_fallback=local: mounted, computed here, identical bytes"

# ---- 7. group= across mounts: the claim counter is in Redis
mount_bfs "$T/d.bfs" g1 -o "$OPTS,remote=$R,group=run1"
mount_bfs "$T/d.bfs" g2 -o "$OPTS,remote=$R,group=run1"
cat >"$T/next.py" <<'EOF'
import errno, hashlib, os, sys
mnt, out = sys.argv[1], sys.argv[2]
with open(out, "w") as o:
    while True:
        try:
            fd = os.open(mnt + "/epoch/7/next", os.O_RDONLY)
        except OSError as e:
            o.write("end %s\n" % errno.errorcode.get(e.errno, e.errno))
            break
        k = os.getxattr(fd, "user.batchfs.batch").decode()
        data = b""
        while True:
            c = os.read(fd, 1 << 16)
            if not c:
                break
            data += c
        os.close(fd)
        o.write("%s %s\n" % (k, hashlib.sha256(data).hexdigest()))
EOF
python3 "$T/next.py" "$T/g1" "$T/g1.out" &
r1=$!
python3 "$T/next.py" "$T/g2" "$T/g2.out" || fail "the reader of g2 failed"
wait "$r1" || fail "the reader of g1 failed"
for g in g1 g2; do
    [ "$(tail -n 1 "$T/$g.out")" = "end ENODATA" ] || fail "$g's reader ended with '$(tail -n 1 "$T/$g.out")'"
done
got=$(cat "$T/g1.out" "$T/g2.out" | grep -v '^end' | cut -d' ' -f1 | sort -n | tr '\n' ' ')
[ "$got" = "0 1 2 3 4 5 " ] || fail "the group's readers got batches '$got', not each of 0..5 once"
while read -r k sum; do
    [ "$k" = end ] && continue
    [ "$sum" = "$(sha256sum <"$T/ref/epoch/7/batch_$k" | cut -d' ' -f1)" ] || fail "next gave other bytes for batch $k"
done < <(cat "$T/g1.out" "$T/g2.out")
ok "group=run1 across two mounts through Redis: batches $(grep -vc '^end' "$T/g1.out") + $(grep -vc '^end' "$T/g2.out"), each once, identical bytes, then ENODATA"

# ---- 8. a batch that fails on the worker (bad_sample=fail) fails on the mount at once, even
# with remote_fallback=wait, with the worker's message
cp -a "$T/images" "$T/badimg"
python3 - "$T/badimg/class_001/img_00005.jpg" <<'EOF2'
import sys
d = open(sys.argv[1], "rb").read()
open(sys.argv[1], "wb").write(d[:d.find(b"\xff\xda") + 40])
EOF2
"$BATCHFS" worker "$T/badimg" -o "$OPTS,bad_sample=fail,remote=$R,threads=1" --name wbad \
    >"$T/wbad.log" 2>&1 </dev/null &
wbad=$!
BG_PIDS+=("$wbad")
for i in $(seq 100); do grep -q "serving pipeline" "$T/wbad.log" && break; sleep 0.1; done
mkdir "$T/mbad"
expect_log 'remote: epoch 9 batch [0-9]+ failed on a worker: bad sample [0-9]+ \(.*img_00005\.jpg\)'
mount_bfs "$T/badimg" mbad -o "$OPTS,bad_sample=fail,remote=$R,remote_fallback=wait,remote_wait_ms=600000"
failed=0 served=0
t0=$(date +%s%N)
for k in 0 1 2 3 4 5; do
    if timeout 60 cat "$T/mbad/epoch/9/batch_$k" >/dev/null 2>"$T/mbad.err"; then
        served=$((served + 1))
    else
        grep -q "Input/output error" "$T/mbad.err" || fail "batch $k: $(cat "$T/mbad.err")"
        failed=$((failed + 1))
    fi
done
ms=$((($(date +%s%N) - t0) / 1000000))
[ "$failed" = 1 ] && [ "$served" = 5 ] && [ "$ms" -lt 30000 ] ||
    fail "with a bad sample: $failed failed, $served served in $ms ms (expected 1, 5, no wait)"
grep -q "stored as failed" "$T/wbad.log" || fail "the worker did not store the failure: $(cat "$T/wbad.log")"
grep -q "failed on a worker: bad sample" "$DAEMON_LOG" || fail "the mount did not log the worker's message"
kill -TERM "$wbad"
wait "$wbad" || true
ok "a batch failing on the worker (bad_sample=fail) failed on the mount at once with its message ($ms ms)"

# ---- 9. a wrong password
stop_redis
start_redis --requirepass right
if "$BATCHFS" worker "$T/d.bfs" -o "$OPTS,remote=redis://:wrong@127.0.0.1:$PORT" >"$T/w3.log" 2>&1; then
    fail "a worker with a wrong password ran"
fi
grep -q "AUTH at 127.0.0.1:$PORT refused" "$T/w3.log" || fail "wrong password: unclear message: $(cat "$T/w3.log")"
grep -q "wrong" "$T/w3.log" && fail "the worker logged the password"
ok "a wrong password: the worker exits 1, AUTH refused, the password never logged"
