#!/usr/bin/env python3
"""fetch_server.py ROOT [CERT KEY] - the HTTP object server of tests/check_fetch.c (never
the product's); with CERT and KEY (PEM files) it speaks HTTPS.

Serves the files under ROOT on 127.0.0.1 (a free port, printed on stdout as one line
"PORT\\n" once it listens) as an object store would: GET and HEAD with one Range
("bytes=A-B"), 206 with Content-Range, an ETag (size and mtime) and Last-Modified,
If-Match (412 when it does not match), keep-alive (HTTP/1.1). Paths are percent-decoded,
so an S3 path-style request /BUCKET/KEY reads ROOT/BUCKET/KEY.

Faults, queued by the test with GET /__ctl?fault=F&count=N (each applies to the next N
object requests, in order of queueing): status codes (503, 500, 429, 404, 403 with an S3
XML error body, 412, 301), hang (no answer for 30 s), cut (half the body, then the connection
closed), badrange (a Content-Range one byte off, with its bytes), norange (200 and the
whole object), more (the range and 100 bytes more, no Content-Length, then closed),
short (10 bytes fewer, no Content-Length, then closed). GET /__last answers the headers
of the last object request (one "name: value" line each); GET /__count the number of
object requests so far; GET /__conns the number of connections accepted so far (this
one's included); GET /__reset drops queued faults. Fault 301 is S3's answer for a bucket
of another region (x-amz-bucket-region: eu-north-1).

SigV4: when FETCH_SERVER_SECRET is set, a request with an AWS4-HMAC-SHA256 Authorization
header has its signature checked as S3 checks it (canonical request from the path as
sent, the signed headers, x-amz-content-sha256) and is refused with 403
SignatureDoesNotMatch when it is wrong.
"""
import email.utils
import hashlib
import hmac
import os
import re
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = sys.argv[1]
lock = threading.Lock()
faults = []  # [fault, remaining]
state = {"count": 0, "last": "", "conns": 0}


def next_fault():
    with lock:
        state["count"] += 1
        while faults:
            f = faults[0]
            if f[1] > 0:
                f[1] -= 1
                if f[1] == 0:
                    faults.pop(0)
                return f[0]
            faults.pop(0)
    return None


def sigv4_ok(handler):
    """Whether the request's SigV4 signature is right for FETCH_SERVER_SECRET."""
    secret = os.environ.get("FETCH_SERVER_SECRET")
    auth = handler.headers.get("Authorization", "")
    if not secret or not auth.startswith("AWS4-HMAC-SHA256 "):
        return True
    f = dict(p.strip().split("=", 1) for p in auth[len("AWS4-HMAC-SHA256 "):].split(","))
    key_id, date, region, service, term = f["Credential"].split("/")
    signed = f["SignedHeaders"].split(";")
    url = urllib.parse.urlsplit(handler.path)
    # S3: the path URI-encoded once (as sent when the client encoded it right)
    canon_uri = urllib.parse.quote(urllib.parse.unquote(url.path), safe="/~")
    if canon_uri != url.path:
        return False
    q = sorted(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
    canon_q = "&".join("%s=%s" % (urllib.parse.quote(k, safe="~"), urllib.parse.quote(v, safe="~"))
                       for k, v in q)
    hdrs = "".join("%s:%s\n" % (h, " ".join(handler.headers.get(h, "").split())) for h in signed)
    payload = handler.headers.get("x-amz-content-sha256", "")
    creq = "\n".join([handler.command, canon_uri, canon_q, hdrs, ";".join(signed), payload])
    amz_date = handler.headers.get("x-amz-date", "")
    sts = "\n".join(["AWS4-HMAC-SHA256", amz_date, "/".join([date, region, service, term]),
                     hashlib.sha256(creq.encode()).hexdigest()])
    k = ("AWS4" + secret).encode()
    for part in (date, region, service, term):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    sig = hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()
    return hmac.compare_digest(sig, f["Signature"]) and "host" in signed and payload != ""


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def setup(self):
        with lock:
            state["conns"] += 1
        super().setup()

    def small(self, code, body=b"", ctype="text/plain", extra=()):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def control(self, path, query):
        q = urllib.parse.parse_qs(query)
        if path == "/__ctl":
            with lock:
                faults.append([q["fault"][0], int(q.get("count", ["1"])[0])])
            return self.small(200, b"ok")
        if path == "/__reset":
            with lock:
                faults.clear()
            return self.small(200, b"ok")
        if path == "/__count":
            return self.small(200, str(state["count"]).encode())
        if path == "/__conns":
            return self.small(200, str(state["conns"]).encode())
        if path == "/__last":
            return self.small(200, state["last"].encode())
        return self.small(404)

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        if url.path.startswith("/__"):
            return self.control(url.path, url.query)
        with lock:
            state["last"] = "".join("%s: %s\n" % (k.lower(), v) for k, v in self.headers.items())
        fault = next_fault()
        if not sigv4_ok(self):
            return self.small(403, b"<Error><Code>SignatureDoesNotMatch</Code></Error>",
                              "application/xml")
        if fault and fault.isdigit():
            code = int(fault)
            body = b""
            if code == 301:  # S3's answer for a bucket of another region
                return self.small(301, b"<Error><Code>PermanentRedirect</Code></Error>",
                                  "application/xml", [("x-amz-bucket-region", "eu-north-1")])
            if code in (403, 404):
                name = "AccessDenied" if code == 403 else "NoSuchKey"
                body = ("<?xml version=\"1.0\"?><Error><Code>%s</Code><Message>m</Message>"
                        "</Error>" % name).encode()
            return self.small(code, body, "application/xml")
        if fault == "hang":
            time.sleep(30)
            self.close_connection = True
            return
        path = os.path.join(ROOT, urllib.parse.unquote(url.path).lstrip("/"))
        try:
            with open(path, "rb") as f:
                data = f.read()
                st = os.fstat(f.fileno())
        except OSError:
            return self.small(404, b"<Error><Code>NoSuchKey</Code></Error>", "application/xml")
        size = len(data)
        etag = '"%x-%x"' % (size, st.st_mtime_ns)
        meta = [("ETag", etag), ("Last-Modified", email.utils.formatdate(st.st_mtime, usegmt=True)),
                ("Accept-Ranges", "bytes")]
        im = self.headers.get("If-Match")
        if im is not None and im != etag and im != "*":
            return self.small(412, b"precondition failed")
        rng = self.headers.get("Range")
        m = re.fullmatch(r"bytes=(\d+)-(\d+)", rng or "")
        if fault == "norange" or not m:
            return self.small(200, data, "application/octet-stream", meta)
        a, b = int(m.group(1)), min(int(m.group(2)), size - 1)
        if a >= size:
            return self.small(416, b"", extra=[("Content-Range", "bytes */%d" % size)])
        if fault == "badrange" and b + 1 < size:
            a, b = a + 1, b + 1
        part = data[a:b + 1]
        self.send_response(206)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Range", "bytes %d-%d/%d" % (a, b, size))
        for k, v in meta:
            self.send_header(k, v)
        if fault in ("more", "short"):
            part = data[a:b + 101] + b"x" * 100 if fault == "more" else part[:-10]
            self.send_header("Connection", "close")
            self.close_connection = True
        else:
            self.send_header("Content-Length", str(len(part)))
        self.end_headers()
        if self.command == "HEAD":
            return
        if fault == "cut":
            self.wfile.write(part[:len(part) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(part)


class Server(ThreadingHTTPServer):
    daemon_threads = True


srv = Server(("127.0.0.1", 0), Handler)
if len(sys.argv) > 3:
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[2], sys.argv[3])
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
sys.stdout.write("%d\n" % srv.server_address[1])
sys.stdout.flush()
srv.serve_forever()
