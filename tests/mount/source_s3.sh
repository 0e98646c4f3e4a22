#!/usr/bin/env bash
# tests/mount/source_s3.sh — a dataset mounted from an S3-compatible store (issue 34,
# docs/sources.md): moto's S3 server on 127.0.0.1 (tests/servers_env.sh) behind
# tests/mount/s3server.py, which checks every request's SigV4 signature against the
# case's keys and keeps the objects across a restart; reached with s3_endpoint= (path
# style), requests signed from the environment's credentials; the files uploaded as
# docs/sources.md tells users to, with curl --aws-sigv4.
#  - every batch's bytes equal a local mount's: images shuffle=full and pages, two
#    shards, a key with a space, a token dataset, a mixture of two objects (also mounted
#    by the Python package);
#  - a `batchfs worker` reading the s3:// object serves a local mount (Redis);
#  - refused at mount, naming the URL: no such key, no such bucket, a bad s3_endpoint, a
#    wrong secret (naming the access key id);
#  - the server paused past fetch_retries: EIO, the reason in the log and /stats, the
#    daemon lives, the batch right once it is back; killed mid-epoch and started again
#    within the retries: the batches delayed, not failed;
#  - the secret access key is in no log, /stats or /pipeline, nor in a refusal;
#  - mkbatchfs --verify / --info of s3:// with AWS_ENDPOINT_URL(_S3).
# Needs the test servers' venv (PyPI, once). About 30 s.
. "$(dirname "$0")/lib.sh"
require_fuse
. tests/servers_env.sh

free_port() { python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])"; }
unset AWS_PROFILE AWS_SESSION_TOKEN AWS_DEFAULT_REGION AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3
export AWS_SHARED_CREDENTIALS_FILE=$T/none AWS_CONFIG_FILE=$T/none
export AWS_ACCESS_KEY_ID=AKIDBATCHFSTEST AWS_REGION=us-east-1
SECRET=batchfs-secret-$RANDOM$RANDOM
export AWS_SECRET_ACCESS_KEY=$SECRET

# moto's S3 server, through tests/mount/s3server.py: signatures checked against the keys
# above, and the objects of $T/s3state loaded at start, so that a server killed and
# started again serves the same objects (ETag, Last-Modified) as a store that was down
PORT=$(free_port)
EP=http://127.0.0.1:$PORT
S3_PID=
start_s3() {
    S3SRV_KEY_ID=$AWS_ACCESS_KEY_ID S3SRV_SECRET=$SECRET \
        "$(dirname "$MOTO_SERVER")/python" tests/mount/s3server.py "$PORT" "$T/s3state" \
        >>"$T/moto.log" 2>&1 </dev/null &
    S3_PID=$!
    BG_PIDS+=($S3_PID)
    disown $S3_PID # killed at exit (BG_PIDS): no "Killed" from bash
    for _ in $(seq 400); do curl -s -o /dev/null "$EP/" && return 0; sleep 0.05; done
    cat "$T/moto.log" >&2
    fail "the S3 server did not start"
}
mkdir -p "$T/s3state"
start_s3
s3() { # METHOD PATH [FILE]: curl --aws-sigv4, as docs/sources.md shows users (the key
    # on stdin, not in ps; S3 wants x-amz-content-sha256, which curl 7.88 does not send)
    printf 'user = "%s:%s"\n' "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" |
        curl -sf --config - --aws-sigv4 "aws:amz:$AWS_REGION:s3" \
            -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" $([ "$1" = HEAD ] && echo -I || echo "-X $1") \
            ${3:+-T "$3"} "$EP/$2"
}
s3_put() { # BUCKET/KEY FILE: uploads, and keeps the copy a restarted server loads
    local key=$1 f=$2 lm
    s3 PUT "${key// /%20}" "$f" >/dev/null || fail "uploading $f as s3://$key"
    lm=$(s3 HEAD "${key// /%20}" | tr -d '\r' | sed -n 's/^last-modified: //Ip')
    mkdir -p "$(dirname "$T/s3state/$key")"
    cp "$f" "$T/s3state/$key"
    touch -d "$lm" "$T/s3state/$key" || fail "Last-Modified '$lm' of s3://$key"
}
! curl -sf -o /dev/null "$EP/" || fail "the S3 server answers unsigned requests"
"$GEN" "$T/src" 3 20 48 160 3
"$MKBATCHFS" --quiet "$T/src" "$T/d.bfs"
"$GEN" "$T/src2" 2 12 48 120 4
"$MKBATCHFS" --quiet "$T/src2" "$T/e.bfs"
gen_tokens "$T/t.bfs" 9 100
s3 PUT bkt >/dev/null || fail "making the bucket"
s3_put bkt/d.bfs "$T/d.bfs"
s3_put "bkt/my set/e.bfs" "$T/e.bfs"
s3_put bkt/t.bfs "$T/t.bfs"
ok "uploaded with curl --aws-sigv4"

mkdir "$T/a" "$T/b"
O="s3_endpoint=$EP"
same_remote "s3, shuffle=full" "$T/d.bfs" s3://bkt/d.bfs 2 "batch=8,size=32,$O"
same_remote "s3, shuffle=pages" "$T/d.bfs" s3://bkt/d.bfs 1 "batch=8,size=32,shuffle=pages,$O"
same_remote "s3, shard 0/2" "$T/d.bfs" s3://bkt/d.bfs 1 "batch=8,size=32,shard=0/2,$O"
same_remote "s3, shard 1/2" "$T/d.bfs" s3://bkt/d.bfs 1 "batch=8,size=32,shard=1/2,$O"
same_remote "s3, a key with a space" "$T/e.bfs" "s3://bkt/my set/e.bfs" 1 "batch=8,size=32,$O"
expect_log '^batchfs: warning: .*t\.bfs: 100 documents for [0-9]+ rows of seq_len=64 per epoch: pack=concat shuffles documents, not rows, .*$'
same_remote "s3, tokens pack=concat" "$T/t.bfs" s3://bkt/t.bfs 1 "batch=4,seq_len=64,$O"

# a mixture of two objects against the same mixture of the local files
mount_bfs "" "$T/a" -o "batch=8,size=32,source=$T/d.bfs:0.6+$T/e.bfs:0.4"
mount_bfs "" "$T/b" -o "batch=8,size=32,source=s3://bkt/d.bfs:0.6+s3://bkt/my set/e.bfs:0.4,$O"
n=$(ls "$T/a/epoch/0" | grep -c '^batch_')
for k in $(seq 0 $((n - 1))); do
    [ "$(sha256sum <"$T/a/epoch/0/batch_$k")" = "$(sha256sum <"$T/b/epoch/0/batch_$k")" ] ||
        fail "mixture: batch $k differs"
done
# the Python package mounts the same mixture of URLs (its local paths are made absolute,
# URLs kept)
PYTHONPATH=$PWD/python python3 - "$T" "$BATCHFS" "$O" <<'PYEOF' || fail "batchfs.mount of s3:// URLs"
import hashlib, sys, batchfs
T, binary, opt = sys.argv[1], sys.argv[2], sys.argv[3]
mix = {"s3://bkt/d.bfs": 0.6, "s3://bkt/my set/e.bfs": 0.4}
with batchfs.mount(mix, T + "/c", binary=binary, batch=8, size=32,
                   s3_endpoint=opt.split("=", 1)[1]) as m:
    got = open(m.path + "/epoch/0/batch_1", "rb").read()
want = open(T + "/a/epoch/0/batch_1", "rb").read()
if got != want:
    sys.exit("batch 1 from batchfs.mount differs from the local mixture's")
PYEOF
for f in "${LOGS[@]}" "$T/b/stats" "$T/b/pipeline"; do
    ! grep -q "$SECRET" "$f" || fail "the secret access key is in $f"
done
unmount_bfs "$T/b"
unmount_bfs "$T/a"
ok "a mixture of two s3:// objects (batchfs, and batchfs.mount in Python): $n batches equal to the local mixture's; no secret in logs, /stats, /pipeline"

# a `batchfs worker` reading the s3:// object computes a local mount's batches (Redis of
# the case's own): the mount computes none itself, the bytes are the local file's
if command -v redis-server >/dev/null; then
    RPORT=$(free_port)
    redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$T" \
        >"$T/redis.log" 2>&1 &
    BG_PIDS+=($!)
    disown $!
    for _ in $(seq 100); do
        python3 -c "import socket; socket.create_connection(('127.0.0.1',$RPORT),1)" 2>/dev/null && break
        sleep 0.05
    done
    R=redis://127.0.0.1:$RPORT
    "$BATCHFS" worker s3://bkt/d.bfs -o "batch=8,size=32,$O,remote=$R,threads=1" --name ws3 \
        >"$T/ws3.log" 2>&1 </dev/null &
    BG_PIDS+=($!)
    disown $!
    for _ in $(seq 100); do grep -q "serving pipeline" "$T/ws3.log" && break; sleep 0.1; done
    grep -q "serving pipeline" "$T/ws3.log" || fail "the s3:// worker did not start: $(cat "$T/ws3.log")"
    mount_bfs "$T/d.bfs" "$T/a" -o batch=8,size=32
    expect_log '^batchfs: remote: batches from Redis are checked, not authenticated .*$'
    mount_bfs "$T/d.bfs" "$T/b" -o "batch=8,size=32,remote=$R,remote_wait_ms=30000"
    for k in 0 1 2 3 4 5 6; do
        cmp -s "$T/a/epoch/0/batch_$k" "$T/b/epoch/0/batch_$k" || fail "worker: batch $k differs"
    done
    pyx - "$T/b" <<'PYEOF' || fail "a worker on s3:// served the mount"
import sys, bfs
st = bfs.stats(sys.argv[1])
if st["batches"]["computed"] or st["remote"]["hits"] < 7:
    sys.exit("computed %d here, %d from the worker" % (st["batches"]["computed"], st["remote"]["hits"]))
PYEOF
    ! grep -q "$SECRET" "$T/ws3.log" || fail "the secret is in the worker's log"
    unmount_bfs "$T/b"
    unmount_bfs "$T/a"
    ok "batchfs worker s3://...: a local mount's 7 batches computed by the worker, same bytes"
else
    [ "${CI:-}" = true ] && fail "redis-server is missing (make deps installs it)"
    echo "(skipped the worker case: no redis-server)"
fi

# refused at mount, naming the URL (or the option) and what is wrong
refused() { # WANT URL OPTS
    local want=$1 url=$2 opts=$3 out
    if out=$("$BATCHFS" "$url" "$T/b" -o "$opts" 2>&1); then
        fusermount3 -u "$T/b" 2>/dev/null
        fail "mounted $url ($opts)"
    fi
    grep -qF "$url" <<<"$out" || grep -qF "s3_endpoint" <<<"$out" ||
        fail "the message names neither $url nor the option: $out"
    grep -qiE "$want" <<<"$out" || fail "$url: '$want' not in: $out"
    ! grep -qe "$AWS_SECRET_ACCESS_KEY" -e "$SECRET" <<<"$out" || fail "the secret is in the message: $out"
    ok "refused: $(head -1 <<<"$out")"
}
refused "not found|NoSuchKey" s3://bkt/nope.bfs "batch=8,$O"
refused "not found|NoSuchBucket" s3://nobucket/d.bfs "batch=8,$O"
refused "s3_endpoint=ftp://x" s3://bkt/d.bfs "batch=8,s3_endpoint=ftp://x"
refused "s3://" "s3://bkt" "batch=8,$O"
# a wrong secret: refused (403), naming the key id used, never the secret (refused()
# looks for the secret of the environment it runs in: the wrong one here)
WRONG=wrong-secret-$RANDOM$RANDOM
AWS_SECRET_ACCESS_KEY=$WRONG refused "access refused.*access key id AKIDBATCHFSTEST" s3://bkt/d.bfs "batch=8,$O"

# the server paused past the retries: EIO, said in the log and /stats, the daemon lives;
# resumed: the same batch's bytes
mount_bfs "$T/d.bfs" "$T/a" -o batch=8,size=32
mount_bfs s3://bkt/d.bfs "$T/b" -o "batch=8,size=32,$O,prefetch=0,fetch_retries=1,fetch_timeout_ms=1000"
expect_log "^batchfs: sample [0-9]+ \(sample [0-9]+ of s3://bkt/d\.bfs\) in epoch 5 batch 2: the dataset's object store did not serve a read .*: GET s3://bkt/d\.bfs bytes [0-9]+-[0-9]+: .* after 1 retr(y|ies)$"
source_paused "$S3_PID" "S3 server"
unmount_bfs "$T/b"

# killed mid-epoch, started again within the retries (the same objects): the reader gets
# its batches, delayed, not failed. Started again once the daemon has retried, not after
# a fixed time
mount_bfs s3://bkt/d.bfs "$T/b" -o "batch=8,size=32,$O,prefetch=0,fetch_retries=10"
source_restarted "$S3_PID" start_s3 "S3 server"
unmount_bfs "$T/b"
unmount_bfs "$T/a"

# mkbatchfs reads s3:// with the AWS tools' endpoint variables
out=$(AWS_ENDPOINT_URL=$EP "$MKBATCHFS" --verify s3://bkt/d.bfs) || fail "mkbatchfs --verify s3://: $out"
grep -q "OK (60 samples" <<<"$out" || fail "--verify: $out"
AWS_ENDPOINT_URL_S3=$EP "$MKBATCHFS" --info "s3://bkt/my set/e.bfs" | grep -q "^samples: *24 " ||
    fail "mkbatchfs --info of s3:// with AWS_ENDPOINT_URL_S3"
ok "mkbatchfs --verify / --info of s3:// (AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_S3)"
echo "PASS: $CASE"
