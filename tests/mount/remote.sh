#!/usr/bin/env bash
# tests/mount/remote.sh — remote workers through Redis (remote=, `batchfs worker`,
# docs/scale-out.md), against a redis-server of the case's own on 127.0.0.1:
#  1. a mount with remote= served by a worker: identical bytes to a plain mount, nothing
#     computed by the mount (/stats remote.hits, batches.computed 0, remote.workers 1);
#     then the values evicted from Redis: a new mount gets them again, without waiting;
#  2. a worker stopped with SIGTERM leaves the set of live workers at once (no mount waits
#     for it); a worker that dies holding jobs (a "ghost" consumer, kept alive by a
#     heartbeat of the test's, takes them and never answers): another worker takes them
#     over after remote_claim_ms, the reader gets its batch; jobs a mount computed itself
#     are deleted from the stream (no worker computes them again);
#  3. Redis killed mid-epoch: the mount computes (fallback), identical bytes, no hang;
#     Redis restarted: worker and mounts reconnect and are served remotely again;
#  4. a corrupt value in Redis: refused (checksum), counted, computed here right; a list at
#     batch keys, with remote_fallback=wait and a worker alive: no stall, computed here;
#     forged values (the fingerprint is public): a "failure" with EINTR computed here and
#     served, a batch of other bytes with the right XXH64 served by a mount without
#     remote_key= (as docs/scale-out.md says);
#  5. a mount of another pipeline: the worker names it in its log with the options that
#     differ, and does not serve it;
#  6. Redis unreachable at mount: remote_fallback=wait refuses the mount with the reason,
#     remote_fallback=local mounts and computes;
#  7. group= across mounts through Redis: two mounts' readers of epoch/N/next get every batch
#     of the epoch once between them (identical bytes), then ENODATA;
#  8. a batch that fails on the worker (bad_sample=fail) is declined: the mount computes it
#     at once, even with remote_fallback=wait, and fails it only as its own data says;
#  9. a worker whose copy of an ImageFolder has a sample bad only there: its batch holds a
#     substitute and is declined, never stored; an intact mount serves and publishes the
#     right bytes;
# 10. a worker whose .bfs changed in place: it declines and stops; a mount computes;
# 11. remote_key=: a worker and mounts with the key, identical bytes; a forged value
#     refused and computed here; bad key files refused at mount;
# 12. a reused group name (7's run1, whose epoch 7 is used up): a new mount's first open of
#     next gets ENODATA and its log says 6 of 6 were claimed, since when, and how to start
#     clean; `batchfs group-reset` deletes the group's keys (saying how many) and the next
#     mount of run1 starts epoch 7 at batch 0 without that line;
# 13. a wrong password: the worker exits 1 saying AUTH was refused;
# and first, usage errors of `batchfs worker` and of the remote options (exit 2, a reason).
. "$(dirname "$0")/lib.sh"
require_fuse
command -v redis-server >/dev/null || fail "redis-server is missing (make deps installs it)"

"$GEN" "$T/images" 3 16 48 120 4
"$MKBATCHFS" --quiet "$T/images" "$T/d.bfs"
OPTS=batch=8,size=32,seed=5 # 48 samples: 6 batches an epoch
REMOTE_TOOL=$BUILD/tests/remote_tool # forges values (tests/remote_tool_main.c)
[ -x "$REMOTE_TOOL" ] || fail "$REMOTE_TOOL is missing (make all-tests builds it)"

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
    elif what == "keys": print(len(cmd(c, "KEYS", sys.argv[3])))
    elif what == "set": print(cmd(c, "SET", sys.argv[3], sys.argv[4].encode()))
    elif what == "setfile": print(cmd(c, "SET", sys.argv[3], open(sys.argv[4], "rb").read()))
    elif what == "rpush": print(cmd(c, "RPUSH", sys.argv[3], sys.argv[4]))
    elif what == "heartbeat":  # ZADD KEY now NAME, now on Redis's clock, as a worker does
        s, us = cmd(c, "TIME")
        print(cmd(c, "ZADD", sys.argv[3], int(s) * 1000 + int(us) // 1000, sys.argv[4]))
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
expect_log 'remote: epoch [0-9]+ batch [0-9]+: bfs:.*\(deleted\); computing it here'
expect_log 'remote: batches from Redis are checked, not authenticated \(no remote_key=\)'
expect_log 'remote: epoch [0-9]+ batch [0-9]+: a worker could not compute it \(.*\); computing it here'
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
usage "group-reset: which group? give -o group=NAME" group-reset "$T/d.bfs" -o "remote=redis://127.0.0.1"
usage "group-reset: give -o remote=redis://HOST[:PORT]" group-reset "$T/d.bfs" -o "group=g"
usage "group-reset takes one SOURCE" group-reset -o "remote=redis://127.0.0.1,group=g"
usage "group-reset: -f is not its option" group-reset "$T/d.bfs" -o "remote=redis://127.0.0.1,group=g" -f
ok "usage errors: worker and group-reset without remote= or group=, stray arguments, bad URLs and values, each named"

mkdir "$T/ref" "$T/m1" "$T/m2" "$T/m3" "$T/m4" "$T/m6" "$T/m7" "$T/m8" "$T/g1" "$T/g2"
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

# ---- 2. a worker stopped cleanly leaves at once; a worker that dies holding jobs: another
# takes them over after remote_claim_ms
FP=$(sed -n 's/^fingerprint = //p' "$T/m1/pipeline")
[ -n "$FP" ] || fail "no fingerprint in m1/pipeline"
JOBS="bfs:{$FP}:jobs"
WORKERS="bfs:{$FP}:workers"
kill -TERM "$W_PID"
wait "$W_PID" || fail "worker w1 exited with status $? on SIGTERM"
grep -q "stopping: " "$T/w1.log" || fail "w1 did not say it stopped: $(cat "$T/w1.log")"
[ "$(resp "$PORT" zcard "$WORKERS")" = 0 ] ||
    fail "w1 stopped with SIGTERM but is still in $WORKERS: mounts would wait for it ~10 s a batch"
for i in $(seq 50); do [ "$(stat_of "$T/m1" "d['remote']['workers']")" = 0 ] && break; sleep 0.1; done
t0=$(date +%s%N)
same_as_ref "$T/m1" 6 0 1 2 3 4 5
ms=$((($(date +%s%N) - t0) / 1000000))
[ "$ms" -lt 20000 ] || fail "epoch 6 after the worker stopped took $ms ms: the mount waited for it"
ok "a worker stopped with SIGTERM left the live set at once: the mount computed epoch 6 at once ($ms ms)"

# a ghost: alive (a heartbeat of the test's), takes jobs, never answers
resp "$PORT" heartbeat "$WORKERS" ghost >/dev/null
for i in $(seq 50); do [ "$(stat_of "$T/m1" "d['remote']['workers']")" = 1 ] && break; sleep 0.1; done
cat "$T/m1/epoch/1/batch_0" >"$T/got.1.0" & # waits: the ghost counts as alive
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

# a mount that gives up on its jobs (remote_wait_ms passed: computed here) deletes them
for i in $(seq 100); do [ "$(resp "$PORT" xlen "$JOBS")" = 0 ] && break; sleep 0.1; done
kill -STOP "$W_PID" # w2 alive (its heartbeat thread too is stopped, but counts 10 s more)
mount_bfs "$T/d.bfs" m8 -o "$OPTS,remote=$R,remote_wait_ms=300"
same_as_ref "$T/m8" 6 0 1 2 3 4 5
fb=$(stat_of "$T/m8" "d['remote']['fallbacks']")
for i in $(seq 50); do [ "$(resp "$PORT" xlen "$JOBS")" = 0 ] && break; sleep 0.1; done
left=$(resp "$PORT" xlen "$JOBS")
kill -CONT "$W_PID"
[ "$fb" -ge 1 ] || fail "m8 counted no fallback with its worker stopped"
[ "$left" = 0 ] || fail "$left job(s) of batches m8 computed itself are left in $JOBS for the next worker"
ok "jobs of batches a mount computed itself ($fb) were deleted from the stream: no worker computes them again"

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

# a key of another type at batch keys: with remote_fallback=wait and a worker alive, the
# mount neither stalls nor takes Redis for down; each such batch is computed here
for k in 0 1 2; do resp "$PORT" rpush "bfs:{$FP}:b:10:$k" x >/dev/null; done
mkdir "$T/mw"
mount_bfs "$T/d.bfs" mw -o "$OPTS,remote=$R,remote_fallback=wait,remote_wait_ms=600000"
for k in 0 1 2 3 4 5; do
    timeout 30 cat "$T/mw/epoch/10/batch_$k" >"$T/mw.$k" || fail "epoch 10 batch $k (a list at its key): stalled or failed"
    cmp -s "$T/mw.$k" "$T/ref/epoch/10/batch_$k" || fail "epoch 10 batch $k differs"
done
corrupt=$(stat_of "$T/mw" "d['remote']['corrupt']")
[ "$corrupt" -ge 3 ] || fail "mw: remote.corrupt $corrupt with 3 lists at batch keys, expected >= 3"
grep -q "Redis answers again" "$DAEMON_LOG" && fail "mw took a WRONGTYPE reply for Redis down"
ok "lists at 3 batch keys, remote_fallback=wait: computed here at once, counted ($corrupt), no stall"

# forged values: anyone who can write to Redis knows the fingerprint
"$REMOTE_TOOL" decline "$FP" 20 0 4 "interrupted" >"$T/forged.err"
resp "$PORT" setfile "bfs:{$FP}:b:20:0" "$T/forged.err" >/dev/null
cmp -s "$T/mw/epoch/20/batch_0" "$T/ref/epoch/20/batch_0" ||
    fail "a forged failure (EINTR) in Redis failed or changed epoch 20 batch 0"
size=$(stat -c %s "$T/ref/epoch/21/batch_1")
"$REMOTE_TOOL" batch "$FP" 21 1 "$size" 7 >"$T/forged.bin"
resp "$PORT" setfile "bfs:{$FP}:b:21:1" "$T/forged.bin" >/dev/null
tail -c "$size" "$T/forged.bin" >"$T/forged.batch"
cmp -s "$T/mw/epoch/21/batch_1" "$T/forged.batch" ||
    fail "a forged batch with the right XXH64 was not served by a mount without remote_key= (docs/scale-out.md says it is)"
ok "forged values: a failure with EINTR is only a decline (computed here, right bytes); a batch of other bytes is served without remote_key=, as documented"

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

# ---- 8. a batch that fails on the worker (bad_sample=fail) is declined: the mount computes it
# at once, even with remote_fallback=wait, and fails it itself (its own data has the bad sample)
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
expect_log '^batchfs: bad sample [0-9]+ \(.*img_00005\.jpg\): .*failing epoch 9 batch [0-9]+ \(bad_sample=fail\)$'
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
grep -q "declined: mounts compute it" "$T/wbad.log" || fail "the worker did not decline the batch: $(cat "$T/wbad.log")"
grep -q "a worker could not compute it (bad sample" "$DAEMON_LOG" || fail "the mount did not log the worker's message"
kill -TERM "$wbad"
wait "$wbad" || true
ok "a batch failing on the worker (bad_sample=fail): declined, computed and failed by the mount itself at once ($ms ms)"

# ---- 9. a sample bad only on the worker's copy: the substituted batch is never shared
kill -TERM "$W_PID" # w2: the workers below are the pipelines' only ones
wait "$W_PID" || true
cp -a "$T/images" "$T/wimg" # the same files, times kept: the same fingerprint
"$BATCHFS" worker "$T/wimg" -o "$OPTS,remote=$R,threads=1" --name wsub >"$T/wsub.log" 2>&1 </dev/null &
wsub=$!
BG_PIDS+=("$wsub")
for i in $(seq 100); do grep -q "serving pipeline" "$T/wsub.log" && break; sleep 0.1; done
grep -q "serving pipeline" "$T/wsub.log" || fail "worker wsub did not start: $(cat "$T/wsub.log")"
# rewritten on the worker's host after its scan (a sync in progress, a bad disk)
python3 - "$T/wimg/class_001/img_00005.jpg" <<'EOF2'
import sys
d = open(sys.argv[1], "rb").read()
open(sys.argv[1], "wb").write(d[:d.find(b"\xff\xda") + 40])
EOF2
mkdir "$T/mref" "$T/msub" "$T/store"
mount_bfs "$T/images" mref -o "$OPTS"
mount_bfs "$T/images" msub -o "$OPTS,remote=$R,remote_wait_ms=30000,cache_dir=$T/store"
for k in 0 1 2 3 4 5; do
    cmp -s "$T/msub/epoch/12/batch_$k" "$T/mref/epoch/12/batch_$k" ||
        fail "epoch 12 batch $k from the worker with a bad sample differs from the intact folder's"
done
declined=$(stat_of "$T/msub" "d['remote']['declined']")
published=$(stat_of "$T/msub" "d['cache_dir']['published']")
[ "$declined" -ge 1 ] || fail "msub: remote.declined $declined, expected >= 1"
grep -q "substituted there: its batch is not shared" "$T/wsub.log" || fail "wsub did not decline its substituted batch: $(cat "$T/wsub.log")"
ok "a sample bad only on the worker: its batch declined ($declined), the intact mount computed it, $published batch(es) published to cache_dir, all right"
kill -TERM "$wsub"
wait "$wsub" || true

# ---- 10. a worker whose .bfs is changed in place: it declines and stops; mounts compute
cp "$T/d.bfs" "$T/w.bfs"
"$BATCHFS" worker "$T/w.bfs" -o "$OPTS,remote=$R,threads=1" --name wchg >"$T/wchg.log" 2>&1 </dev/null &
wchg=$!
BG_PIDS+=("$wchg")
for i in $(seq 100); do grep -q "serving pipeline" "$T/wchg.log" && break; sleep 0.1; done
for i in $(seq 50); do [ "$(stat_of "$T/m2" "d['remote']['workers']")" = 1 ] && break; sleep 0.1; done
touch "$T/w.bfs" # in place: its identity changed under the worker
for k in 0 1 2 3 4 5; do
    cat "$T/m2/epoch/13/batch_$k" >"$T/chg.$k" 2>"$T/chg.err" || fail "epoch 13 batch $k failed: $(cat "$T/chg.err") (a worker's own changed file must not fail mounts)"
    cmp -s "$T/chg.$k" "$T/ref/epoch/13/batch_$k" || fail "epoch 13 batch $k differs"
done
for i in $(seq 100); do kill -0 "$wchg" 2>/dev/null || break; sleep 0.1; done
kill -0 "$wchg" 2>/dev/null && fail "the worker whose dataset changed is still running: $(cat "$T/wchg.log")"
rc=0
wait "$wchg" || rc=$?
[ "$rc" = 1 ] || fail "the worker whose dataset changed exited with $rc, expected 1: $(cat "$T/wchg.log")"
grep -q "changed in place under this worker: stopping" "$T/wchg.log" || fail "wchg did not say why it stopped: $(cat "$T/wchg.log")"
ok "a worker's .bfs changed in place: the worker declined and stopped (exit 1), the mount computed epoch 13"

# ---- 11. remote_key=: values authenticated with a key the workers and mounts share
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/key"
chmod 600 "$T/key"
"$BATCHFS" worker "$T/d.bfs" -o "$OPTS,remote=$R,threads=1,remote_key=$T/key" --name wk \
    >"$T/wk.log" 2>&1 </dev/null &
wk=$!
BG_PIDS+=("$wk")
for i in $(seq 100); do grep -q "serving pipeline" "$T/wk.log" && break; sleep 0.1; done
keyid=$(sed -n 's/.*authenticated with remote_key id \([0-9a-f]*\).*/\1/p' "$T/wk.log")
[ ${#keyid} = 16 ] || fail "worker wk does not name its key's id: $(cat "$T/wk.log")"
mkdir "$T/mk"
mount_bfs "$T/d.bfs" mk -o "$OPTS,remote=$R,remote_wait_ms=30000,remote_key=$T/key"
grep -q "not authenticated" "$DAEMON_LOG" && fail "mk (with remote_key=) says its values are not authenticated"
same_as_ref "$T/mk" 14 0 1 2 3 4 5
hits=$(stat_of "$T/mk" "d['remote']['hits']")
[ "$hits" -ge 6 ] || fail "mk: $hits remote hits with the worker's key, expected >= 6"
[ "$(stat_of "$T/mk" "d['remote']['key']")" = "$keyid" ] || fail "mk's /stats remote.key is not the worker's key id $keyid"
grep -q "$(head -c 12 "$T/key")" "$T/wk.log" "$DAEMON_LOG" && fail "the key was logged"
size=$(stat -c %s "$T/ref/epoch/15/batch_1")
"$REMOTE_TOOL" batch "$FP" 15 1 "$size" 7 >"$T/forged.bin"
resp "$PORT" setfile "bfs:{$FP}:b:15:1" "$T/forged.bin" >/dev/null
same_as_ref "$T/mk" 15 1
corrupt=$(stat_of "$T/mk" "d['remote']['corrupt']")
[ "$corrupt" -ge 1 ] || fail "mk served epoch 15 batch 1 right but counted no refused value"
ok "remote_key=: worker and mount share a key (id $keyid): $hits batches from Redis, a forged one refused ($corrupt) and computed here"
chmod 644 "$T/key"
mkdir -p "$T/mk2"
out=$("$BATCHFS" "$T/d.bfs" "$T/mk2" -o "$OPTS,remote=$R,remote_key=$T/key" 2>&1) &&
    fail "a mount with a key file readable by others succeeded"
case $out in *"chmod 600"*) ;; *) fail "a key file readable by others: unclear message '$out'" ;; esac
is_mounted "$T/mk2" && fail "mk2 stayed mounted"
usage "remote_key=key: an absolute path" "$T/d.bfs" "$T" -o remote_key=key
ok "remote_key=: a key file readable by others refused at mount ($out)"
kill -TERM "$wk"
wait "$wk" || true

# ---- 12. a reused group name, and a clean start with group-reset
# (two mounts of 7 starting together may see each other's first claims: that line is fine)
expect_log "^batchfs: group=run1 epoch [0-9]+: [0-9]+ of 6 batches were claimed before this mount's first claim"
mkdir "$T/g3" "$T/g4"
mount_bfs "$T/d.bfs" g3 -o "$OPTS,remote=$R,group=run1"
python3 -c 'import errno, os, sys
try:
    os.open(sys.argv[1], os.O_RDONLY)
    sys.exit("opened")
except OSError as e:
    sys.exit(0 if e.errno == errno.ENODATA else "errno %d" % e.errno)' "$T/g3/epoch/7/next" ||
    fail "a reused group name: the first open of a used-up epoch did not fail with ENODATA"
line=$(grep "group=run1 epoch 7:" "$DAEMON_LOG" || true)
case $line in
"batchfs: group=run1 epoch 7: 6 of 6 batches were claimed before this mount's first claim, the first "[0-9]*" s ago (the epoch is used up: opens of next fail with ENODATA): "*"earlier run with this group name"*"batchfs group-reset SOURCE -o remote=URL,group=run1"*) ;;
*) fail "a reused group name: the mount's log does not explain the used-up epoch: '$line'" ;;
esac
ok "a reused group name: ENODATA at once, and one log line says 6 of 6 claimed and how to start clean"
for m in g1 g2 g3; do unmount_bfs "$T/$m"; done
nkeys=$(resp "$PORT" keys "bfs:{$FP}:g:run1:*")
[ "$nkeys" -ge 1 ] || fail "no keys of group run1 in Redis before the reset"
resp "$PORT" set "bfs:{$FP}:g:run10:7" 3 >/dev/null # (another group, a name that starts alike)
out=$("$BATCHFS" group-reset "$T/d.bfs" -o "$OPTS,remote=$R,group=run1" 2>&1) || fail "group-reset: $out"
[ "$out" = "batchfs group-reset: group=run1 of pipeline $FP at $R/0: deleted $nkeys key(s) (claim counters and given-back lists); its epochs start over" ] ||
    fail "group-reset said: '$out' (expected $nkeys keys)"
[ "$(resp "$PORT" keys "bfs:{$FP}:g:run1:*")" = 0 ] || fail "group-reset left keys of run1"
[ "$(resp "$PORT" keys "bfs:{$FP}:g:run10:*")" = 1 ] || fail "group-reset of run1 deleted run10's key"
mount_bfs "$T/d.bfs" g4 -o "$OPTS,remote=$R,group=run1"
k=$(python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); print(os.getxattr(fd, "user.batchfs.batch").decode())' "$T/g4/epoch/7/next") ||
    fail "after group-reset: the open of next failed"
[ "$k" = 0 ] || fail "after group-reset: the first claim of epoch 7 is batch $k, not 0"
grep -q "were claimed before" "$DAEMON_LOG" && fail "after group-reset the mount still says the epoch was claimed"
unmount_bfs "$T/g4"
ok "group-reset: deleted $nkeys key(s) of run1 (not run10's); a new mount of run1 starts epoch 7 at batch 0"

# ---- 13. a wrong password
stop_redis
start_redis --requirepass right
if "$BATCHFS" worker "$T/d.bfs" -o "$OPTS,remote=redis://:wrong@127.0.0.1:$PORT" >"$T/w3.log" 2>&1; then
    fail "a worker with a wrong password ran"
fi
grep -q "AUTH at 127.0.0.1:$PORT refused" "$T/w3.log" || fail "wrong password: unclear message: $(cat "$T/w3.log")"
grep -q "wrong" "$T/w3.log" && fail "the worker logged the password"
ok "a wrong password: the worker exits 1, AUTH refused, the password never logged"
