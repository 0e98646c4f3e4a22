#!/usr/bin/env bash
# tests/mount/source_https.sh — a dataset mounted from an HTTPS server (issue 34,
# docs/sources.md): nginx on 127.0.0.1 with a certificate of a CA this test makes.
#  - every batch's bytes equal a local mount's of the same file: images with shuffle=full
#    and shuffle=pages, two shards, a multi-field dataset (every field fetched ahead), a
#    token dataset (pack=concat, the rows' documents fetched ahead), plain http:// too;
#    payloads fetched past the batches computed for a reader whose walk is known;
#  - refused at mount with a message naming the URL: a missing object (404), a server
#    whose CA is not trusted (no ca=), a ca= file that holds no certificate;
#  - the server paused past fetch_retries: the batch fails with EIO (not a substituted
#    sample), the log and /stats say why, the daemon lives, and the same batch has its
#    bytes once the server is back; the server killed and restarted within the retries:
#    the reader gets its batch, the right bytes;
#  - the object replaced under the mount: batches fail as for a file changed in place;
#  - source_cache=: a later mount of the host fetches no payload, the same bytes;
#  - mkbatchfs --verify and --info of an http:// URL.
# Needs nginx and openssl (make deps); skips without them outside CI. About 20 s.
. "$(dirname "$0")/lib.sh"
require_fuse
for tool in nginx openssl; do
    if ! command -v $tool >/dev/null; then
        [ "${CI:-}" = true ] && fail "$tool is missing (make deps installs it)"
        echo "SKIP: $CASE: no $tool (make deps installs it)" >&2
        exit 77
    fi
done

free_port() { python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])"; }
chmod 755 "$T" # nginx serves as nobody
W=$T/www
mkdir -p "$W" "$T/ngx"
chmod 755 "$W"

# a CA, and a certificate for 127.0.0.1 and localhost signed by it
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$T/ca.key" -out "$T/ca.pem" -days 2 \
    -subj "/CN=batchfs test CA" >/dev/null 2>&1 || fail "openssl: the CA"
openssl req -newkey rsa:2048 -nodes -keyout "$T/srv.key" -out "$T/srv.csr" \
    -subj "/CN=127.0.0.1" >/dev/null 2>&1 || fail "openssl: the server key"
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$T/san.ext"
openssl x509 -req -in "$T/srv.csr" -CA "$T/ca.pem" -CAkey "$T/ca.key" -CAcreateserial \
    -out "$T/srv.pem" -days 2 -extfile "$T/san.ext" >/dev/null 2>&1 || fail "openssl: signing"
chmod 644 "$T/srv.key"

SPORT=$(free_port) PPORT=$(free_port)
cat >"$T/ngx/nginx.conf" <<EOF
daemon off;
master_process off;
pid $T/ngx/nginx.pid;
error_log $T/ngx/error.log;
events { worker_connections 512; }
http {
  access_log $T/ngx/access.log;
  client_body_temp_path $T/ngx; proxy_temp_path $T/ngx; fastcgi_temp_path $T/ngx;
  uwsgi_temp_path $T/ngx; scgi_temp_path $T/ngx;
  server {
    listen 127.0.0.1:$SPORT ssl;
    listen 127.0.0.1:$PPORT;
    ssl_certificate $T/srv.pem;
    ssl_certificate_key $T/srv.key;
    root $W;
  }
}
EOF
NGINX_PID=
start_nginx() {
    nginx -c "$T/ngx/nginx.conf" 2>>"$T/ngx/stderr" &
    NGINX_PID=$!
    disown "$NGINX_PID" # killed at exit (BG_PIDS): no "Killed" from bash
    BG_PIDS+=("$NGINX_PID")
    for _ in $(seq 100); do
        curl -s -o /dev/null "http://127.0.0.1:$PPORT/" && return 0
        sleep 0.05
    done
    cat "$T/ngx/stderr" "$T/ngx/error.log" >&2
    fail "nginx did not start"
}
start_nginx

# the datasets: 60 photos of 3 classes; a token corpus
"$GEN" "$T/src" 3 20 48 160 2
"$MKBATCHFS" --quiet "$T/src" "$W/d.bfs"
gen_tokens "$W/t.bfs" 7 120
"$BUILD/tests/gen_fields" "$W/f.bfs" 40 3 >/dev/null || fail "gen_fields" # many fields a sample
chmod 644 "$W"/*.bfs
HTTPS=https://127.0.0.1:$SPORT HTTP=http://127.0.0.1:$PPORT

mkdir "$T/a" "$T/b"
same_remote "https, shuffle=full" "$W/d.bfs" "$HTTPS/d.bfs" 2 "batch=8,size=32,ca=$T/ca.pem"
same_remote "https, shuffle=pages" "$W/d.bfs" "$HTTPS/d.bfs" 2 "batch=8,size=32,shuffle=pages,ca=$T/ca.pem"
same_remote "https, shard 0/2" "$W/d.bfs" "$HTTPS/d.bfs" 1 "batch=8,size=32,shard=0/2,ca=$T/ca.pem"
same_remote "https, shard 1/2" "$W/d.bfs" "$HTTPS/d.bfs" 1 "batch=8,size=32,shard=1/2,ca=$T/ca.pem"
expect_log '^batchfs: warning: .*t\.bfs: 120 documents for [0-9]+ rows of seq_len=64 per epoch: pack=concat shuffles documents, not rows, .*$'
same_remote "http, tokens pack=concat" "$W/t.bfs" "$HTTP/t.bfs" 2 "batch=4,seq_len=64"
same_remote "https, multi-field" "$W/f.bfs" "$HTTPS/f.bfs" 1 "batch=8,size=32,ca=$T/ca.pem"
# every field's value is fetched ahead, not only the images
mount_bfs "$HTTPS/f.bfs" "$T/b" -o "batch=8,size=32,ca=$T/ca.pem"
for k in 0 1 2 3; do cat "$T/b/epoch/2/batch_$k" >/dev/null; done
pyx - "$T/b" <<'PYEOF' || fail "multi-field: values not fetched ahead"
import sys, bfs
p = bfs.stats(sys.argv[1])["source"]["prefetch"]
if p["hits"] < 64:  # 32 samples of several fields each
    sys.exit("prefetch %r" % (p,))
PYEOF
unmount_bfs "$T/b"
ok "multi-field from https://: every field's value fetched ahead"
# token rows' documents are fetched ahead too (the documents each row reads)
mount_bfs "$HTTP/t.bfs" "$T/b" -o "batch=4,seq_len=64"
for k in $(seq 0 9); do cat "$T/b/epoch/4/batch_$k" >/dev/null; done
pyx - "$T/b" <<'PYEOF' || fail "tokens: documents not fetched ahead"
import sys, bfs
p = bfs.stats(sys.argv[1])["source"]["prefetch"]
if p["hits"] < 5:  # (0 without; a document two rows share is taken by one)
    sys.exit("prefetch %r" % (p,))
PYEOF
unmount_bfs "$T/b"
ok "tokens from http://: the rows' documents fetched ahead"
# payloads fetched further ahead than batches are computed: with prefetch=1, a reader of
# batches 0..3 has 5 batches computed (40 samples); the batches after are fetched too
mount_bfs "$HTTPS/d.bfs" "$T/b" -o "batch=8,size=32,ca=$T/ca.pem,prefetch=1"
for k in 0 1 2 3; do cat "$T/b/epoch/1/batch_$k" >/dev/null; done
pyx - "$T/b" <<'PYEOF' || fail "payloads not fetched beyond the computed batches"
import sys, time, bfs
for _ in range(100):  # the last read's fetches may still be on their way
    st = bfs.stats(sys.argv[1])
    p = st["source"]["prefetch"]
    if p["samples"] > 40 and p["ahead"] >= 1:
        break
    time.sleep(0.05)
else:
    sys.exit("prefetch %r, %d batches computed" % (p, st["batches"]["computed"]))
PYEOF
unmount_bfs "$T/b"
ok "https: payloads fetched past the batches computed (prefetch.ahead)"
# a reader that keeps its walk has each batch's payloads asked for ahead once, not at every
# read while the batch is in its window: behind a proxy adding 40 ms (the bench's, so that
# the window is wide: 16 batches of 2 tiny photos), one reader of an epoch's 30 batches in
# order. Asked anew at every read, the window counted about 16 a read (~300 in all)
${CC:-cc} -O2 -o "$T/delay_proxy" tests/bench/delay_proxy.c || fail "delay_proxy"
DPORT=$(free_port)
"$T/delay_proxy" "$DPORT" "$PPORT" 40 >"$T/proxy.out" 2>&1 &
disown $! # killed at exit (BG_PIDS): no "Killed" from bash
BG_PIDS+=($!)
for _ in $(seq 100); do grep -q ready "$T/proxy.out" && break; sleep 0.05; done
mount_bfs "http://127.0.0.1:$DPORT/d.bfs" "$T/b" -o "batch=2,size=32,prefetch=1"
pyx - "$T/b" <<'PYEOF' || fail "batches fetched ahead more than once"
import sys, bfs
m = sys.argv[1]
for k in range(30):
    with open("%s/epoch/1/batch_%d" % (m, k), "rb") as f:
        f.read()
p = bfs.stats(m)["source"]["prefetch"]
if p["ahead"] < 8 or p["fetched_batches"] > 30 + 16:
    sys.exit("prefetch %r: 30 batches read" % (p,))
print("  fetched ahead: %d batches for 30 read, window %d" % (p["fetched_batches"], p["ahead"]))
PYEOF
unmount_bfs "$T/b"
ok "http behind 40 ms: each batch fetched ahead once per walk (prefetch.fetched_batches)"
same_remote "http, tokens pack=pad" "$W/t.bfs" "$HTTP/t.bfs" 1 "batch=4,seq_len=64,pack=pad"

# source_cache=: a second mount of the host fetches no payload: every sample from the disk
# (drop_last=0: the 8th, short batch too, so every sample is on disk after this epoch)
mount_bfs "$HTTPS/d.bfs" "$T/b" -o "batch=8,size=32,ca=$T/ca.pem,source_cache=$T/sc,drop_last=0"
for k in $(seq 0 7); do cat "$T/b/epoch/0/batch_$k" >/dev/null; done
unmount_bfs "$T/b"
[ "$(stat -c %a "$T/sc")" = 700 ] || fail "source_cache: the directory is not 0700"
same_remote "https, source_cache (filled)" "$W/d.bfs" "$HTTPS/d.bfs" 2 "batch=8,size=32,ca=$T/ca.pem,source_cache=$T/sc,prefetch=0"
mount_bfs "$HTTPS/d.bfs" "$T/b" -o "batch=8,size=32,ca=$T/ca.pem,source_cache=$T/sc"
for k in $(seq 0 6); do cat "$T/b/epoch/3/batch_$k" >/dev/null; done
pyx - "$T/b" <<'PYEOF' || fail "source_cache: the second mount fetched payloads"
import sys, bfs
s = bfs.stats(sys.argv[1])["source"]
# the open's one request (size, ETag); the header, the tables and every payload from disk
if s["requests"] != 1 or s["prefetch"]["requests"] or s["cache"]["hits"] < 56:
    sys.exit("source %r" % (s,))
PYEOF
unmount_bfs "$T/b"
ok "source_cache: a second mount read its tables and every payload from the disk: one request"
# damaged on disk (the tables' last bytes, a sample's first): fetched again, never used
python3 - "$T/sc" <<'PYEOF'
import glob, os, sys
(f,) = glob.glob(sys.argv[1] + "/*.obj")
with open(f, "r+b") as o:
    size = os.fstat(o.fileno()).st_size
    o.seek(size - 16); o.write(b"\xa5" * 16)   # the page table's end
    o.seek(8192); o.write(b"\x5a" * 64)        # inside the heap
PYEOF
same_remote "https, source_cache damaged" "$W/d.bfs" "$HTTPS/d.bfs" 1 "batch=8,size=32,ca=$T/ca.pem,source_cache=$T/sc"

# refused at mount, the URL named
refused() { # WANT URL OPTS
    local want=$1 url=$2 opts=$3 out
    if out=$("$BATCHFS" "$url" "$T/b" -o "$opts" 2>&1); then
        fusermount3 -u "$T/b" 2>/dev/null
        fail "mounted $url ($opts)"
    fi
    grep -qF "$url" <<<"$out" || fail "the message does not name $url: $out"
    grep -qiE "$want" <<<"$out" || fail "$url: '$want' not in: $out"
    ok "refused: $(head -1 <<<"$out")"
}
refused "not found \(HTTP 404" "$HTTPS/nope.bfs" "batch=8,ca=$T/ca.pem"
refused "certificate|ca=" "$HTTPS/d.bfs" "batch=8"
printf 'not a certificate\n' >"$T/bad.pem"
if out=$("$BATCHFS" "$HTTPS/d.bfs" "$T/b" -o "batch=8,ca=$T/bad.pem" 2>&1); then
    fusermount3 -u "$T/b"
    fail "mounted with a ca= that holds no certificate"
fi
grep -q "ca=$T/bad.pem" <<<"$out" || fail "ca= without a certificate: $out"
ok "refused: $out"

# the server paused past the retries: EIO, said in the log and /stats; back: the bytes
mount_bfs "$W/d.bfs" "$T/a" -o batch=8,size=32
mount_bfs "$HTTPS/d.bfs" "$T/b" -o "batch=8,size=32,ca=$T/ca.pem,prefetch=0,fetch_retries=1,fetch_timeout_ms=1000"
expect_log "^batchfs: sample [0-9]+ \(sample [0-9]+ of https://127\.0\.0\.1:$SPORT/d\.bfs\) in epoch 5 batch 2: the dataset's object store did not serve a read .*: GET https://127\.0\.0\.1:$SPORT/d\.bfs bytes [0-9]+-[0-9]+: .* after 1 retr(y|ies)$"
source_paused "$NGINX_PID" "HTTPS server"

# killed, restarted within the retries (backoff from 100 ms, at most 5 s, 10 of them): the
# reader gets its batch. Restarted once the daemon has retried (not after a fixed time, so
# a slow machine cannot restart it before the first attempt)
unmount_bfs "$T/b"
mount_bfs "$HTTPS/d.bfs" "$T/b" -o "batch=8,size=32,ca=$T/ca.pem,prefetch=0,fetch_retries=10"
source_restarted "$NGINX_PID" start_nginx "HTTPS server"

# the object replaced under the mount (a new file renamed over it: another ETag)
cp "$W/t.bfs" "$W/new.bfs" && mv "$W/new.bfs" "$W/d.bfs"
expect_log '^batchfs: https://127\.0\.0\.1:[0-9]+/d\.bfs: dataset file changed since it was opened .*$'
if cat "$T/b/epoch/7/batch_0" >/dev/null 2>"$T/err"; then
    fail "a batch was computed from a replaced object"
fi
grep -q "dataset file changed" "$DAEMON_LOG" || fail "the log does not say the object changed"
unmount_bfs "$T/b"
unmount_bfs "$T/a"
ok "object replaced under the mount: its batches fail, nothing of the new object served"

# mkbatchfs reads URLs
out=$("$MKBATCHFS" --verify "$HTTP/t.bfs") || fail "mkbatchfs --verify of a URL: $out"
grep -q "OK" <<<"$out" || fail "--verify: $out"
"$MKBATCHFS" --info "$HTTP/t.bfs" | grep -q "^samples: *120" || fail "mkbatchfs --info of a URL"
ok "mkbatchfs --verify and --info of an http:// URL"
echo "PASS: $CASE"
