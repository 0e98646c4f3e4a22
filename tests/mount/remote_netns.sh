#!/usr/bin/env bash
# tests/mount/remote_netns.sh — remote workers on other "hosts": each worker runs in a
# network namespace of its own (a veth pair to this one), reaching Redis over it; the
# trainer mounts run here (docs/scale-out.md):
#  1. a worker in one namespace is killed with SIGKILL while it holds jobs; a worker in
#     another takes them over after remote_claim_ms: every batch is served, identical to
#     a plain mount's, none computed by the mount;
#  2. two jobs of the same pipeline read the same epoch at once: a fresh worker computes
#     each batch once (its count), both mounts get every batch from Redis.
# Needs root (ip netns, veth); skips (77) with the reason where namespaces cannot be made.
. "$(dirname "$0")/lib.sh"
require_fuse
command -v redis-server >/dev/null || fail "redis-server is missing (make deps installs it)"
command -v ip >/dev/null || fail "ip (iproute2) is missing (make deps installs it)"
[ "$(id -u)" = 0 ] || {
    echo "SKIP: $CASE: network namespaces need root" >&2
    exit 77
}

ID=$$
NETS=()
WORKER_PIDS=()
ns_cleanup() {
    local p n
    set +e # (a worker already gone is no reason to keep its namespace)
    for p in "${WORKER_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
    for p in "${WORKER_PIDS[@]}"; do wait "$p" 2>/dev/null; done
    for n in "${NETS[@]}"; do ip netns del "$n" 2>/dev/null; done
    ip link del "bh1$ID" 2>/dev/null
    ip link del "bh2$ID" 2>/dev/null
}
trap 'rc=$?; ns_cleanup; (exit $rc); cleanup' EXIT

# host N: namespace bfsN.ID, veth bhN.ID (here, 10.(230+N).S.1) <-> bwN.ID (there, .2), S
# from this run's pid so that a run never meets another's addresses
S=$((ID % 250 + 1))
make_host() {
    local n=$1 ns=bfs$1.$ID
    ip netns add "$ns" || { echo "SKIP: $CASE: ip netns add failed" >&2; exit 77; }
    NETS+=("$ns")
    ip link add "bh$n$ID" type veth peer name "bw$n$ID" || {
        echo "SKIP: $CASE: no veth pairs here" >&2
        exit 77
    }
    ip link set "bw$n$ID" netns "$ns"
    ip addr add "10.$((230 + n)).$S.1/24" dev "bh$n$ID"
    ip link set "bh$n$ID" up
    ip -n "$ns" addr add "10.$((230 + n)).$S.2/24" dev "bw$n$ID"
    ip -n "$ns" link set "bw$n$ID" up
    ip -n "$ns" link set lo up
}
make_host 1
make_host 2

# bigger batches than the other cases: a worker holds a job long enough to be killed with it
"$GEN" "$T/images" 4 40 500 800 9
"$MKBATCHFS" --quiet "$T/images" "$T/d.bfs"
OPTS=batch=40,size=224,seed=3 # 160 samples: 4 batches an epoch

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$PORT" --bind 127.0.0.1 10.231.$S.1 10.232.$S.1 --protected-mode no --save '' \
    --appendonly no --dir "$T" >"$T/redis.log" 2>&1 &
BG_PIDS+=($!)
for i in $(seq 100); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1',$PORT),1)" 2>/dev/null && break
    sleep 0.05
done
# Redis answers from the namespaces over the veth pairs
for n in 1 2; do
    ip netns exec "bfs$n.$ID" python3 -c "import socket; socket.create_connection(('10.$((230 + n)).$S.1',$PORT),2)" ||
        fail "Redis unreachable from namespace bfs$n.$ID"
done

start_worker() { # HOST NAME [OPTIONS]: a worker in namespace bfsHOST.ID
    local n=$1 name=$2 extra=${3:-}
    ip netns exec "bfs$n.$ID" "$BATCHFS" worker "$T/d.bfs" \
        -o "$OPTS,remote=redis://10.$((230 + n)).$S.1:$PORT,threads=1$extra" --name "$name" \
        >"$T/$name.log" 2>&1 </dev/null &
    W_PID=$!
    WORKER_PIDS+=("$W_PID")
    for i in $(seq 100); do
        grep -q "serving pipeline" "$T/$name.log" && return 0
        kill -0 "$W_PID" 2>/dev/null || fail "worker $name exited: $(cat "$T/$name.log")"
        sleep 0.1
    done
    fail "worker $name did not start: $(cat "$T/$name.log")"
}
wait_held() { # CONSUMER [SECONDS]: wait (10 s at most) until it holds a job unacknowledged;
    # print how many
    python3 - "$PORT" "$FP" "$1" "${2:-10}" <<'EOF'
import socket, sys, time
port, fp, who, secs = sys.argv[1:]
s = socket.create_connection(("127.0.0.1", int(port)))
f = s.makefile("rb")
a = ["XPENDING", "bfs:{%s}:jobs" % fp, "workers", "-", "+", "100", who]
req = ("*%d\r\n" % len(a) + "".join("$%d\r\n%s\r\n" % (len(x), x) for x in a)).encode()
def skip():  # read one reply, return its array length (or 0)
    l = f.readline()
    if l[:1] == b"*":
        n = int(l[1:])
        for _ in range(max(n, 0)):
            skip()
        return max(n, 0)
    if l[:1] == b"$":
        n = int(l[1:])
        if n >= 0: f.read(n + 2)
    return 0
end = time.time() + float(secs)
while True:
    s.sendall(req)
    n = skip()
    if n:
        print(n); sys.exit(0)
    if time.time() >= end:
        break
    time.sleep(0.002)
print(0)
EOF
}
stat_of() { python3 -c "import json,sys; d=json.load(open(sys.argv[1]+'/stats')); print(eval(sys.argv[2]))" "$@"; }
expect_log 'remote: no worker of pipeline [0-9a-f]+ is alive'
expect_log 'remote: batches from Redis are checked, not authenticated \(no remote_key=\)'
expect_log 'remote: [0-9]+ worker\(s\) alive'
# at the end Redis is stopped before the mounts
expect_log 'remote.*(Connection refused|Connection reset|connection lost|Server closed)'

mkdir "$T/ref" "$T/m1" "$T/m2" "$T/m3"
mount_bfs "$T/d.bfs" ref -o "$OPTS"
FP=$(sed -n 's/^fingerprint = //p' "$T/ref/pipeline")

# ---- 1. two hosts; one killed while it holds jobs
start_worker 1 w1 ",remote_claim_ms=1500"
W1=$W_PID
mount_bfs "$T/d.bfs" m1 -o "$OPTS,remote=redis://127.0.0.1:$PORT,remote_wait_ms=60000,prefetch=6"
# the mount must see w1 alive before the reader starts, or it computes the batches itself
for _ in $(seq 200); do
    [ "$(stat_of "$T/m1" "d['remote']['workers']")" -ge 1 ] && break
    sleep 0.05
done
[ "$(stat_of "$T/m1" "d['remote']['workers']")" -ge 1 ] || fail "m1 never saw w1 alive"
# a reader of epoch 0, a `cat` a batch: the mount asks for batch 0, and from the reader's
# second batch on for the next ones too (prefetch=6): w1 holds jobs for a while
(for k in 0 1 2 3; do cat "$T/m1/epoch/0/batch_$k" >/dev/null || exit 1; done) &
first=$!
# w1 is frozen (SIGSTOP) while it holds a job, then killed: a job it finishes between the
# look and the kill would leave w2 nothing to take over (seen once under UBSan, as a
# reader's first batch alone is asked for until its walk is known). Frozen, w1 can take
# nothing more, so one look tells (a 10 s look at a frozen w1 that had just finished its
# job let its heartbeat age out: the mount counted no worker and computed the other 3
# batches itself, and w1 never held a job again; ASan CI of 3067593)
held=0
for try in $(seq 20); do
    [ "$(wait_held w1)" -ge 1 ] || break
    kill -STOP "$W1"
    held=$(wait_held w1 0)
    [ "$held" -ge 1 ] && break
    kill -CONT "$W1"
done
[ "$held" -ge 1 ] || fail "w1 never held a job: $(stat_of "$T/m1" "d['remote']")"
kill -KILL "$W1"
start_worker 2 w2 ",remote_claim_ms=1500" # (within 10 s: the mount still counts w1)
wait "$first" || fail "reading epoch 0 failed"
for k in 0 1 2 3; do
    cmp -s "$T/m1/epoch/0/batch_$k" "$T/ref/epoch/0/batch_$k" || fail "epoch 0 batch $k differs"
done
computed=$(stat_of "$T/m1" "d['batches']['computed']")
[ "$computed" = 0 ] || fail "the mount computed $computed batches itself"
# (a job w1 held may have been stored before it died: w2 still takes it over, and finds it
# stored, once it has been pending remote_claim_ms)
for i in $(seq 50); do grep -q "took over" "$T/w2.log" && break; sleep 0.1; done
grep -q "took over" "$T/w2.log" || fail "w2 took nothing over from the killed w1: $(cat "$T/w2.log")"
ok "w1 killed holding $held job(s) in its namespace: w2 took them over, epoch 0 identical, none computed here"

# ---- 2. two jobs, one pipeline: each batch computed once
kill -TERM "${WORKER_PIDS[1]}"
wait "${WORKER_PIDS[1]}" || fail "w2 exited with status $? on SIGTERM"
start_worker 1 w3
mount_bfs "$T/d.bfs" m2 -o "$OPTS,remote=redis://127.0.0.1:$PORT,remote_wait_ms=60000"
mount_bfs "$T/d.bfs" m3 -o "$OPTS,remote=redis://127.0.0.1:$PORT,remote_wait_ms=60000"
for m in m2 m3; do
    (for k in 0 1 2 3; do cat "$T/$m/epoch/1/batch_$k" >"$T/$m.$k" || exit 1; done) &
    BG_PIDS+=($!)
done
wait "${BG_PIDS[-1]}" "${BG_PIDS[-2]}" || fail "a reader of epoch 1 failed"
for m in m2 m3; do
    for k in 0 1 2 3; do
        cmp -s "$T/$m.$k" "$T/ref/epoch/1/batch_$k" || fail "$m: epoch 1 batch $k differs"
    done
    c=$(stat_of "$T/$m" "d['batches']['computed']")
    [ "$c" = 0 ] || fail "$m computed $c batches itself"
done
kill -TERM "$W_PID"
wait "$W_PID" || fail "w3 exited with status $? on SIGTERM"
line=$(grep "stopping:" "$T/w3.log")
case $line in
*"stopping: 4 batches computed"*) ok "two jobs read epoch 1 at once: w3 computed each of its 4 batches once ($line)" ;;
*) fail "w3 did not compute each batch exactly once: '$line'" ;;
esac
