#!/usr/bin/env bash
# tests/mount/tokens.sh — a dataset of token sequences through the mount (docs/sequences.md):
#  - pack=concat with positions: every batch of two epochs, read last-first, equals the
#    engine's in-process bytes, and its listed size is its size;
#  - pack=bucket: listed sizes differ between batches and are what a read returns; its
#    /pipeline as a spec file mounts the same pipeline; two
#    mounts with shard=0/2 and 1/2 read the same bucket at every step, no document twice;
#  - cache_dir: a second mount serves an epoch from the store, identical bytes;
#  - remote=: a `batchfs worker` computes every bucket batch of an epoch for a mount;
#  - a corrupt document: substituted (logged once, counted in /stats, the other batches
#    as from the intact file) or, with bad_sample=fail, its batches fail with EIO;
#  - the dataset truncated in place under the mount (documents are read through a
#    mapping, where that raises SIGBUS): the batches computed after it fail with EIO,
#    logged once, and the daemon lives on; touched in place: the same;
#  - an image option on it is refused at mount with a message;
#  - 150 documents for ~250 rows of seq_len=100: the log warns, naming shuffle=rows; with
#    shuffle=rows it does not, and the batches are the engine's.
# 150 documents, ~25k tokens. A few seconds.
. "$(dirname "$0")/lib.sh"
require_fuse

python3 - "$T" <<'EOF'
import random, struct, sys
T = sys.argv[1]
random.seed(5)
ids = []
for d in range(150):
    ids += [random.randrange(0, 50000) for _ in range(random.randrange(1, 330))] + [50256]
open(T + "/train.bin", "wb").write(struct.pack("<%dH" % len(ids), *ids))
EOF
"$MKBATCHFS" --tokens u16 --doc-sep 50256 "$T/train.bin" "$T/t.bfs" >/dev/null 2>&1 || fail "mkbatchfs --tokens"
M=$T/mnt
mkdir "$M" "$T/ref"
# every pack=concat mount here has fewer documents than rows, and says so (docs/sequences.md)
W_ROWS='^batchfs: warning: .*/(t|bad|trunc)\.bfs: 150 documents for [0-9]+ rows of seq_len=100 per epoch: pack=concat shuffles documents, not rows, .*use shuffle=rows.*$'
expect_log "$W_ROWS"

# ---- concat: every batch equals the engine's, sizes listed up front -----------------------
O=seq_len=100,batch=4,positions=1
mount_bfs "$T/t.bfs" "$M" -o "$O,epochs=2"
NB=$(ls "$M/epoch/0" | wc -l)
[ "$NB" -gt 10 ] || fail "concat: $NB batches listed"
for e in 1 0; do
    for k in $(seq $((NB - 1)) -1 0); do # the last batch first: random access
        ref_batch "$T/t.bfs" "$O" $e $k "$T/ref/e${e}_b$k"
        size=$(stat -c %s "$M/epoch/$e/batch_$k")
        cmp -s "$M/epoch/$e/batch_$k" "$T/ref/e${e}_b$k" || fail "concat: epoch $e batch $k differs from the engine's"
        [ "$size" = "$(stat -c %s "$T/ref/e${e}_b$k")" ] || fail "concat: epoch $e batch $k: listed size $size"
    done
done
pyx - "$M" "$T/ref/e0_b0" <<'EOF' || fail "concat: batch contents"
import sys, bfs
t, meta = bfs.tensors(sys.argv[2])
assert meta["kind"] == "tokens" and meta["pack"] == "concat", meta
assert list(t) == ["tokens", "positions"], list(t)
assert t["tokens"][0] == "I32" and t["tokens"][1] == [4, 100], t["tokens"][:2]
s = bfs.stats(sys.argv[1])
assert s["bad_samples"] == 0 and s["batches"]["failed"] == 0, s
EOF
[ "$(grep -Ec "$W_ROWS" "$DAEMON_LOG")" = 1 ] || fail "concat: no warning of fewer documents than rows"
unmount_bfs "$M"
ok "pack=concat: $NB batches of 2 epochs, read last-first, equal the engine's bytes and listed sizes"

# ---- concat, shuffle=rows: no warning; the engine's bytes ----------------------------------
mount_bfs "$T/t.bfs" "$M" -o "$O,shuffle=rows,epochs=3"
for e in 2 0; do
    for k in $((NB - 1)) 0 3; do
        ref_batch "$T/t.bfs" "$O,shuffle=rows" $e $k "$T/ref/rows_e${e}_b$k"
        cmp -s "$M/epoch/$e/batch_$k" "$T/ref/rows_e${e}_b$k" || fail "shuffle=rows: epoch $e batch $k differs from the engine's"
    done
done
cmp -s "$T/ref/rows_e0_b0" "$T/ref/e0_b0" && fail "shuffle=rows: batch 0 as without it"
grep -q warning "$DAEMON_LOG" && fail "shuffle=rows: the log warns: $(grep warning "$DAEMON_LOG")"
unmount_bfs "$M"
ok "pack=concat,shuffle=rows: batches of 2 epochs equal the engine's; no warning logged"

# ---- bucket: batch files of different sizes, listed before they are computed ---------------
mount_bfs "$T/t.bfs" "$M" -o pack=bucket,buckets=16:64:330,batch=3,epochs=2
sizes=$(for f in "$M"/epoch/0/batch_*; do stat -c %s "$f"; done | sort -u | wc -l)
[ "$sizes" -ge 2 ] || fail "pack=bucket: all batch files listed with one size"
for f in "$M"/epoch/1/batch_*; do
    [ "$(stat -c %s "$f")" = "$(cat "$f" | wc -c)" ] || fail "pack=bucket: $f: listed size is not its size"
done
# the same pipeline from its own /pipeline as a spec file: same fingerprint, same bytes
cp "$M/pipeline" "$T/bucket.spec"
mkdir "$T/ms"
mount_bfs "$T/t.bfs" "$T/ms" -o "spec=$T/bucket.spec"
cmp -s "$T/ms/epoch/1/batch_3" "$M/epoch/1/batch_3" || fail "pack=bucket: the spec file's mount serves other bytes"
unmount_bfs "$T/ms"
unmount_bfs "$M"
ok "pack=bucket: $sizes different batch sizes, each listed as read"

# ---- coordinated reads: two replicas' mounts read the same bucket at every step -----------
mkdir "$T/m0" "$T/m1"
mount_bfs "$T/t.bfs" "$T/m0" -o pack=bucket,buckets=16:64:330,batch=2,shard=0/2
mount_bfs "$T/t.bfs" "$T/m1" -o pack=bucket,buckets=16:64:330,batch=2,shard=1/2
pyx - "$T/m0" "$T/m1" <<'EOF' || fail "coordinated reads: replicas out of step"
import os, sys, bfs
m0, m1 = sys.argv[1:3]
n = len(os.listdir(m0 + "/epoch/3"))
assert n == len(os.listdir(m1 + "/epoch/3")) and n > 4, n
seen, shapes = set(), set()
for k in range(n):
    a, _ = bfs.tensors("%s/epoch/3/batch_%d" % (m0, k))
    b, _ = bfs.tensors("%s/epoch/3/batch_%d" % (m1, k))
    assert a["tokens"][1] == b["tokens"][1], (k, a["tokens"][1], b["tokens"][1])
    shapes.add(tuple(a["tokens"][1]))
    for t in (a, b):
        docs = bfs.i64(t["indices"][2])
        assert not seen & set(docs), "a document served twice"
        seen |= set(docs)
assert len(shapes) > 1, shapes
EOF
unmount_bfs "$T/m0"
unmount_bfs "$T/m1"
ok "coordinated reads: two mounts with shard=0/2 and 1/2 read batches of the same shape at every step"

# ---- cache_dir: a second mount serves from the store --------------------------------------
mount_bfs "$T/t.bfs" "$M" -o "$O,cache_dir=$T/store"
cat "$M"/epoch/0/batch_* >"$T/first"
unmount_bfs "$M"
mount_bfs "$T/t.bfs" "$M" -o "$O,cache_dir=$T/store,prefetch=0"
cat "$M"/epoch/0/batch_* >"$T/second"
cmp -s "$T/first" "$T/second" || fail "cache_dir: the second mount's bytes differ"
pyx -c 'import bfs, sys; s = bfs.stats(sys.argv[1]); assert s["cache_dir"]["served"] > 0, s["cache_dir"]' "$M" ||
    fail "cache_dir: the second mount computed every batch again"
unmount_bfs "$M"
ok "cache_dir: a second mount serves token batches from the store"

# ---- remote workers: a worker computes token batches of varying size for a mount ----------
if command -v redis-server >/dev/null; then
    PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$T" >"$T/redis.log" 2>&1 &
    RPID=$!
    BG_PIDS+=("$RPID")
    for i in $(seq 100); do
        python3 -c "import socket; socket.create_connection(('127.0.0.1',$PORT),1)" 2>/dev/null && break
        sleep 0.05
    done
    B=pack=bucket,buckets=16:64:330,batch=3
    expect_log 'remote: batches from Redis are checked, not authenticated \(no remote_key=\)'
    "$BATCHFS" worker "$T/t.bfs" -o "$B,remote=redis://127.0.0.1:$PORT,threads=1" --name w1 \
        >"$T/w1.log" 2>&1 </dev/null &
    WPID=$!
    BG_PIDS+=("$WPID")
    for i in $(seq 100); do
        grep -q "serving pipeline" "$T/w1.log" && break
        sleep 0.1
    done
    grep -q "serving pipeline" "$T/w1.log" || fail "remote: the worker did not start: $(cat "$T/w1.log")"
    mkdir "$T/mr" "$T/rref"
    mount_bfs "$T/t.bfs" "$T/mr" -o "$B,remote=redis://127.0.0.1:$PORT,remote_wait_ms=30000,prefetch=0"
    n=$(ls "$T/mr/epoch/2" | wc -l)
    for k in $(seq 0 $((n - 1))); do
        ref_batch "$T/t.bfs" "$B" 2 $k "$T/rref/b$k"
        cmp -s "$T/mr/epoch/2/batch_$k" "$T/rref/b$k" || fail "remote: epoch 2 batch $k differs from the engine's"
    done
    pyx -c 'import bfs, sys; s = bfs.stats(sys.argv[1]); assert s["batches"]["computed"] == 0 and s["remote"]["hits"] > 0, (s["batches"], s["remote"])' "$T/mr" ||
        fail "remote: the mount computed token batches itself"
    unmount_bfs "$T/mr"
    kill -TERM "$WPID" && { wait "$WPID" || fail "remote: the worker exited $? on SIGTERM: $(tail -3 "$T/w1.log")"; }
    kill -TERM "$RPID" && wait "$RPID" || true
    ok "remote: a worker computed all $n bucket batches of an epoch (sizes vary), bytes as the engine's"
else
    fail "redis-server is missing (make deps installs it)"
fi

# ---- a corrupt document ------------------------------------------------------------------
# document 7's payload: its tokens, found in the file, one byte flipped
python3 - "$T/train.bin" "$T/t.bfs" "$T/bad.bfs" <<'EOF'
import struct, sys
ids = struct.unpack("<%dH" % (len(open(sys.argv[1], "rb").read()) // 2), open(sys.argv[1], "rb").read())
docs, cur = [], []
for x in ids:
    cur.append(x)
    if x == 50256:
        docs.append(cur); cur = []
payload = struct.pack("<%dH" % len(docs[7]), *docs[7])
data = bytearray(open(sys.argv[2], "rb").read())
at = data.find(payload)
assert at > 0 and data.find(payload, at + 1) < 0, "document 7 not found once"
data[at + 2] ^= 0xFF
open(sys.argv[3], "wb").write(data)
EOF
expect_log '^batchfs: bad sample 7 \(sample 7 of .*/bad\.bfs\): .*; substituted by document [0-9]+ \(bad_sample=substitute\)$'
expect_log '^batchfs: bad sample 7 \(sample 7 of .*/bad\.bfs\): .*; failing epoch 0 batch [0-9]+ \(bad_sample=fail\)$'
mount_bfs "$T/bad.bfs" "$M" -o "$O"
bad=0
for k in $(seq 0 $((NB - 1))); do
    cat "$M/epoch/0/batch_$k" >"$T/b" || fail "substitute: batch $k: read failed"
    cmp -s "$T/b" "$T/ref/e0_b$k" || bad=$((bad + 1))
done
[ "$bad" -ge 1 ] || fail "substitute: no batch differs from the intact file's"
[ "$bad" -le 3 ] || fail "substitute: $bad batches differ (a document of <= 330 tokens spans <= 5 rows of 100: 2 batches of 4)"
n=$(pyx -c 'import bfs, sys; print(bfs.stats(sys.argv[1])["bad_samples"])' "$M")
[ "$n" -ge 1 ] || fail "substitute: /stats counts $n bad samples"
[ "$(grep -c 'bad sample 7 ' "$DAEMON_LOG")" = 1 ] || fail "substitute: not logged exactly once"
unmount_bfs "$M"
mount_bfs "$T/bad.bfs" "$M" -o "$O,bad_sample=fail,prefetch=0"
failed=0
for k in $(seq 0 $((NB - 1))); do
    if ! cat "$M/epoch/0/batch_$k" >/dev/null 2>"$T/cat.err"; then
        failed=$((failed + 1))
        grep -q "Input/output error" "$T/cat.err" || fail "fail: batch $k: not EIO: $(cat "$T/cat.err")"
    fi
done
[ "$failed" = "$bad" ] || fail "fail: $failed batches failed, $bad held the bad document"
unmount_bfs "$M"
ok "a corrupt document: substituted in $bad batch(es), logged once, counted; with bad_sample=fail those fail with EIO"

# ---- the dataset changed in place under the mount -------------------------------------------
expect_log '^batchfs: .*/trunc\.bfs: dataset file changed since it was opened \(overwritten or truncated in place\); every batch computed from now on fails .*$'
expect_log '^batchfs: epoch [01] batch [0-9]+: .*dataset file changed since it was opened.*$'
for how in truncate touch; do
    cp "$T/t.bfs" "$T/trunc.bfs"
    mount_bfs "$T/trunc.bfs" "$M" -o "$O,epochs=2,prefetch=0"
    cmp -s "$M/epoch/0/batch_0" "$T/ref/e0_b0" || fail "$how: batch 0 before the change"
    if [ $how = truncate ]; then truncate -s 4096 "$T/trunc.bfs"; else touch -d '+1 hour' "$T/trunc.bfs"; fi
    failed=0
    for k in 0 $((NB / 2)) $((NB - 1)); do
        if cat "$M/epoch/1/batch_$k" >/dev/null 2>"$T/cat.err"; then continue; fi
        grep -q "Input/output error" "$T/cat.err" || fail "$how: batch $k: not EIO: $(cat "$T/cat.err")"
        failed=$((failed + 1))
    done
    [ $failed = 3 ] || fail "$how: $failed of 3 batches computed after the change failed"
    cmp -s "$M/epoch/0/batch_0" "$T/ref/e0_b0" || fail "$how: batch 0, computed before, is gone"
    [ "$(grep -c 'trunc\.bfs: dataset file changed' "$DAEMON_LOG")" = 1 ] || fail "$how: not logged once"
    unmount_bfs "$M"
done
ok "the dataset truncated or touched in place: later batches fail with EIO, logged once; the daemon lives"

# ---- an image option on a token dataset ---------------------------------------------------
if "$BATCHFS" "$T/t.bfs" "$M" -o size=64 -f >"$T/out" 2>&1; then fail "size= on a token dataset mounted"; fi
grep -q "size= is an image option, and this dataset holds token sequences" "$T/out" ||
    fail "size= on tokens: $(cat "$T/out")"
ok "an image option on a token dataset is refused with a message"
