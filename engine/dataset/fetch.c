/*
 * fetch.c — objects in object storage read by byte ranges over libcurl (fetch.h): open,
 * one request with its retries, and reads. The process-wide side (the configuration, the
 * handle pool, the counters, the reason) is fetch_pool.c.
 *
 * Neighbours: fetch_http.c parses each response's headers and decides whether its body
 * is the range asked for; fetch_s3.c makes s3:// request URLs and finds credentials and
 * the region; the .bfs reader (bfs_read.c) is the caller.
 *
 * A request: an easy handle taken from the pool (curl_easy_reset keeps its live
 * connection, so consecutive requests of a thread reuse it), every option set again,
 * the headers collected by header_cb (the last response's only: a redirect's are
 * dropped), the body handed to body_cb, which checks the headers once (bfs_http_parse_head,
 * bfs_http_check_body, the ETag) before it copies a byte into the caller's buffer and
 * never copies past its end. A failure is either retried (timeouts, connection errors,
 * resets, a body cut short, 5xx, 429, 408) after an exponential backoff with jitter, at
 * most conf.retries times, or final (everything else).
 *
 * Threads: objects are immutable after open (each holds a reference to the configuration
 * it was opened under); a request's state is its own.
 */
#include "engine/dataset/fetch.h"
#include "engine/dataset/fetch_internal.h"
#include "base/err.h"
#include "base/hash.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* a header block larger than this is refused (S3 and nginx send under 1 KiB) */
#define HEADER_MAX 16384
/* the start of an error response's body kept for S3's <Code> */
#define ERRBODY_MAX 2048
/* SHA-256 of the empty payload: x-amz-content-sha256 of GET and HEAD (S3 requires it) */
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* ---- objects ------------------------------------------------------------------------- */

struct bfs_object {
    bfs_fetch_cfg *conf; /* as at open; one reference */
    char *display;       /* the URL for messages: no user, password or query */
    char *req_url;       /* the URL requested */
    int s3;              /* signed as S3 when creds.have */
    int follow;          /* follow redirects (https:// and http:// URLs, not S3's) */
    const char *scheme;  /* "http" or "https": redirects only to it */
    bfs_s3_creds *creds; /* s3:// only; wiped at close */
    char sigv4[96];      /* "aws:amz:REGION:s3" */
    struct curl_slist *hdr_open, *hdr_read;
    uint64_t size, identity;
    char etag[256], last_modified[64];
};

uint64_t bfs_object_size(const bfs_object *o)
{
    return o->size;
}

uint64_t bfs_object_identity(const bfs_object *o)
{
    return o->identity;
}

const char *bfs_object_url(const bfs_object *o)
{
    return o->display;
}

int bfs_fetch_is_remote(const char *path)
{
    return path && (!strncmp(path, "http://", 7) || !strncmp(path, "https://", 8) ||
                    !strncmp(path, "s3://", 5));
}

void bfs_object_close(bfs_object *o)
{
    if (!o)
        return;
    curl_slist_free_all(o->hdr_open);
    curl_slist_free_all(o->hdr_read);
    if (o->creds) {
        bfs_s3_creds_wipe(o->creds);
        free(o->creds);
    }
    free(o->display);
    free(o->req_url);
    bfs_fetch_cfg_unref(o->conf);
    free(o);
}

/* ---- one request ---------------------------------------------------------------------- */

/* What one attempt came to. */
enum outcome {
    OUT_OK,
    OUT_RETRY,    /* transient: timeouts, resets, 5xx, 429, a body cut short */
    OUT_NOTFOUND, /* 404 */
    OUT_DENIED,   /* 401, 403 */
    OUT_CHANGED,  /* 412, or another ETag */
    OUT_BAD,      /* a response that is not the range asked for, or breaks HTTP */
    OUT_STATUS,   /* another status (3xx not followed, 4xx) */
    OUT_INVAL,    /* curl refused the URL */
    OUT_TLS,      /* the server's certificate is not trusted */
    OUT_NOMEM,
};

typedef struct xfer {
    const bfs_object *o;
    int opening;  /* the open's probe: the body is not kept */
    uint8_t *buf; /* the caller's */
    uint64_t off, len, got;
    char hdr[HEADER_MAX];
    size_t hn;
    int hdr_over;
    int checked; /* the headers were checked (on the first body bytes) */
    bfs_http_head h;
    enum outcome refused; /* OUT_OK, or why body_cb stopped the transfer */
    char why[512];
    char body[ERRBODY_MAX]; /* the start of an error response's body */
    size_t bn;
} xfer;

static size_t header_cb(char *p, size_t sz, size_t nm, void *u)
{
    xfer *x = u;
    size_t n = sz * nm;
    if (n >= 5 && !memcmp(p, "HTTP/", 5)) /* a new response: the last one counts */
        x->hn = 0, x->hdr_over = 0;
    if (x->hn + n >= sizeof x->hdr) {
        x->hdr_over = 1;
        return n;
    }
    memcpy(x->hdr + x->hn, p, n);
    x->hn += n;
    return n;
}

/* Parse the headers collected (once per attempt). OUT_OK or OUT_BAD with x->why. */
static enum outcome head_parse(xfer *x)
{
    if (x->checked)
        return x->refused;
    x->checked = 1;
    if (x->hdr_over) {
        snprintf(x->why, sizeof x->why, "response headers over %d bytes", HEADER_MAX);
        return x->refused = OUT_BAD;
    }
    if (bfs_http_parse_head(x->hdr, x->hn, &x->h, x->why, sizeof x->why))
        return x->refused = OUT_BAD;
    int st = x->h.status;
    if (st < 200 || st > 299 || x->opening)
        return OUT_OK;
    if (x->o->etag[0] && x->h.etag[0] && strcmp(x->o->etag, x->h.etag)) {
        snprintf(x->why, sizeof x->why, "the object's ETag changed since it was opened");
        return x->refused = OUT_CHANGED;
    }
    if (bfs_http_check_body(&x->h, x->off, x->len, x->o->size, x->why, sizeof x->why))
        return x->refused = OUT_BAD;
    return OUT_OK;
}

static size_t body_cb(char *p, size_t sz, size_t nm, void *u)
{
    xfer *x = u;
    size_t n = sz * nm;
    atomic_fetch_add(&bfs_fetch_counter.bytes, n);
    if (head_parse(x) != OUT_OK)
        return 0; /* stop: CURLE_WRITE_ERROR */
    if (x->h.status < 200 || x->h.status > 299) {
        size_t k = n < sizeof x->body - 1 - x->bn ? n : sizeof x->body - 1 - x->bn;
        memcpy(x->body + x->bn, p, k);
        x->bn += k;
        x->body[x->bn] = '\0';
        return n;
    }
    if (x->opening) { /* the probe needs the headers: its byte is read (keeping the
                       * connection), a server ignoring Range that sends it all is cut off */
        x->got += n;
        return x->got <= 4096 ? n : 0;
    }
    if (n > x->len - x->got) {
        snprintf(x->why, sizeof x->why,
                 "the server sent more than the %" PRIu64 " bytes of the range", x->len);
        x->refused = OUT_BAD;
        return 0;
    }
    memcpy(x->buf + x->got, p, n);
    x->got += n;
    return n;
}

/* S3's error code (<Code>AccessDenied</Code>) of an error body, letters only, into out. */
static void s3_code(const char *body, char *out, size_t outlen)
{
    out[0] = '\0';
    const char *c = strstr(body, "<Code>");
    if (!c)
        return;
    c += 6;
    size_t n = 0;
    while (n + 1 < outlen && ((c[n] >= 'A' && c[n] <= 'Z') || (c[n] >= 'a' && c[n] <= 'z') ||
                              (c[n] >= '0' && c[n] <= '9')))
        n++;
    if (strncmp(c + n, "</Code>", 7))
        n = 0;
    memcpy(out, c, n);
    out[n] = '\0';
}

/* Set the options of one request on h. 0, or -ENOMEM. */
static int setup(CURL *h, const bfs_object *o, xfer *x, const char *range, char *errbuf)
{
    const bfs_fetch_cfg *c = o->conf;
    CURLcode e = CURLE_OK;
#define SET(opt, val)                                                                              \
    do {                                                                                           \
        if (e == CURLE_OK)                                                                         \
            e = curl_easy_setopt(h, opt, val);                                                     \
    } while (0)
    SET(CURLOPT_URL, o->req_url);
    SET(CURLOPT_PROTOCOLS_STR, "http,https");
    SET(CURLOPT_NOSIGNAL, 1L);
    SET(CURLOPT_TIMEOUT_MS, (long)c->timeout_ms);
    SET(CURLOPT_CONNECTTIMEOUT_MS, (long)c->timeout_ms);
    SET(CURLOPT_SSL_VERIFYPEER, 1L);
    SET(CURLOPT_SSL_VERIFYHOST, 2L);
    SET(CURLOPT_TCP_KEEPALIVE, 1L);
    SET(CURLOPT_BUFFERSIZE, 256L * 1024);
    SET(CURLOPT_USERAGENT, "batchfs");
    SET(CURLOPT_ERRORBUFFER, errbuf);
    SET(CURLOPT_HEADERFUNCTION, header_cb);
    SET(CURLOPT_HEADERDATA, x);
    SET(CURLOPT_WRITEFUNCTION, body_cb);
    SET(CURLOPT_WRITEDATA, x);
    SET(CURLOPT_RANGE, range);
    SET(CURLOPT_HTTPHEADER, x->opening ? o->hdr_open : o->hdr_read);
    if (o->follow) {
        SET(CURLOPT_FOLLOWLOCATION, 1L);
        SET(CURLOPT_MAXREDIRS, 5L);
        SET(CURLOPT_REDIR_PROTOCOLS_STR, o->scheme);
    }
    if (c->ca_blob) {
        struct curl_blob blob = {.data = c->ca_blob, .len = c->ca_len, .flags = CURL_BLOB_NOCOPY};
        SET(CURLOPT_CAINFO_BLOB, &blob);
    }
    if (o->creds && o->creds->have) {
        SET(CURLOPT_AWS_SIGV4, o->sigv4);
        SET(CURLOPT_USERNAME, o->creds->key_id);
        SET(CURLOPT_PASSWORD, o->creds->secret);
    }
#undef SET
    return e == CURLE_OUT_OF_MEMORY ? -ENOMEM : e ? -EINVAL : 0;
}

/* One attempt's outcome from curl's code and the response; the reason into x->why. */
static enum outcome classify(CURL *h, CURLcode rc, xfer *x, const char *errbuf, int *os_errno)
{
    long oe = 0;
    curl_easy_getinfo(h, CURLINFO_OS_ERRNO, &oe);
    *os_errno = (int)oe;
    if (x->refused != OUT_OK)
        return x->refused;
    char text[CURL_ERROR_SIZE];
    bfs_fetch_clean_text(text, sizeof text, errbuf[0] ? errbuf : curl_easy_strerror(rc));
    switch (rc) {
    case CURLE_OK:
        break;
    case CURLE_OUT_OF_MEMORY:
        snprintf(x->why, sizeof x->why, "out of memory");
        return OUT_NOMEM;
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
        snprintf(x->why, sizeof x->why, "%s", text);
        return OUT_INVAL;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
        snprintf(x->why, sizeof x->why, "TLS: %s", text);
        return OUT_TLS;
    case CURLE_TOO_MANY_REDIRECTS:
        snprintf(x->why, sizeof x->why, "%s", text);
        return OUT_STATUS;
    case CURLE_WRITE_ERROR: /* body_cb stopped it */
        if (x->opening && x->h.status >= 200 && x->h.status <= 299)
            break;
        snprintf(x->why, sizeof x->why, "%s", text);
        return OUT_BAD;
    default: /* timeouts, refused or reset connections, names not resolved, cut bodies */
        snprintf(x->why, sizeof x->why, "%s", text);
        return OUT_RETRY;
    }
    if (head_parse(x) != OUT_OK)
        return x->refused;
    int st = x->h.status;
    char code[64];
    s3_code(x->body, code, sizeof code);
    snprintf(x->why, sizeof x->why, "HTTP %d%s%s%s", st, code[0] ? " (" : "", code,
             code[0] ? ")" : "");
    if (st >= 200 && st <= 299) {
        if (x->opening || x->got == x->len)
            return OUT_OK;
        snprintf(x->why, sizeof x->why, "the body ended after %" PRIu64 " of %" PRIu64 " bytes",
                 x->got, x->len);
        return OUT_RETRY;
    }
    if (st >= 500 || st == 429 || st == 408)
        return OUT_RETRY;
    if (st == 404)
        return OUT_NOTFOUND;
    if (st == 401 || st == 403)
        return OUT_DENIED;
    if (st == 412)
        return OUT_CHANGED;
    if (x->opening && st == 416 && x->h.unsatisfied && x->h.total == 0)
        return OUT_OK; /* an empty object: no byte 0 to send */
    return OUT_STATUS;
}

/* A uniform random value for jitter (thread-local splitmix64, seeded from the clock). */
static uint64_t jitter_rand(void)
{
    static _Thread_local uint64_t s;
    if (!s)
        s = bfs_fetch_now_ns() ^ (uint64_t)(uintptr_t)&s;
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/*
 * Run one request (the open's probe when x->opening, else the range x->off, x->len into
 * x->buf) with its retries. Returns the last attempt's outcome, x->why its reason,
 * *tries the attempts after the first, *os_errno the last socket error.
 */
static enum outcome request(const bfs_object *o, xfer *x, unsigned *tries, int *os_errno)
{
    char range[64];
    if (x->opening)
        snprintf(range, sizeof range, "0-0");
    else
        snprintf(range, sizeof range, "%" PRIu64 "-%" PRIu64, x->off, x->off + x->len - 1);
    *tries = 0;
    enum outcome out = OUT_NOMEM;
    for (unsigned attempt = 0;; attempt++) {
        if (attempt > 0) {
            unsigned ms = bfs_fetch_backoff_ms(attempt, jitter_rand());
            struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
            while (nanosleep(&ts, &ts) && errno == EINTR)
                ;
            atomic_fetch_add(&bfs_fetch_counter.retries, 1);
            *tries = attempt;
        }
        x->hn = 0, x->hdr_over = 0, x->checked = 0, x->refused = OUT_OK, x->got = 0, x->bn = 0;
        x->why[0] = x->body[0] = '\0';
        memset(&x->h, 0, sizeof x->h);
        CURL *h = bfs_fetch_handle_get();
        char errbuf[CURL_ERROR_SIZE] = "";
        if (!h || setup(h, o, x, range, errbuf)) {
            snprintf(x->why, sizeof x->why, "out of memory");
            if (h)
                bfs_fetch_handle_put(h);
            return OUT_NOMEM;
        }
        atomic_fetch_add(&bfs_fetch_counter.requests, 1);
        CURLcode rc = curl_easy_perform(h);
        out = classify(h, rc, x, errbuf, os_errno);
        /* a handle whose transfer was stopped mid-body has its connection closed by curl;
         * one that timed out or failed likewise: the pool keeps only the handle */
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
        bfs_fetch_handle_put(h);
        if (out != OUT_RETRY || attempt >= o->conf->retries)
            return out;
    }
}

/* ---- open and read -------------------------------------------------------------------- */

/* The URL without its user, password and query (a presigned URL's signature), for
 * messages; control bytes replaced. NULL: no memory. */
static char *display_url(const char *url)
{
    const char *p = strstr(url, "://");
    size_t head = p ? (size_t)(p + 3 - url) : 0;
    const char *auth = url + head;
    size_t an = strcspn(auth, "/?#");
    const char *at = memchr(auth, '@', an);
    const char *rest = at ? at + 1 : auth;
    size_t rn = strcspn(rest, "?#");
    int q = rest[rn] != '\0';
    char *d = malloc(head + rn + 5);
    if (!d)
        return NULL;
    memcpy(d, url, head);
    memcpy(d + head, rest, rn);
    strcpy(d + head + rn, q ? "?..." : "");
    for (char *c = d; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = '?';
    return d;
}

/* Check an http(s) URL with curl's parser: 0, or -EINVAL with a message. */
static int check_http_url(const char *url, const char *disp, char *err, size_t errlen)
{
    CURLU *u = curl_url();
    if (!u)
        return -ENOMEM;
    int rc = 0;
    char *host = NULL, *port = NULL;
    CURLUcode e = curl_url_set(u, CURLUPART_URL, url, 0);
    if (e == CURLUE_OUT_OF_MEMORY) {
        rc = -ENOMEM;
    } else if (e) {
        rc = bfs_errf(-EINVAL, err, errlen, "%.3000s: not a valid URL (%s)", disp,
                      curl_url_strerror(e));
    } else if (curl_url_get(u, CURLUPART_HOST, &host, 0) || !host || !*host) {
        rc = bfs_errf(-EINVAL, err, errlen, "%.3000s: no host in the URL", disp);
    } else if (!curl_url_get(u, CURLUPART_PORT, &port, 0) && port &&
               (atoi(port) < 1 || atoi(port) > 65535)) {
        rc = bfs_errf(-EINVAL, err, errlen, "%.3000s: port %.20s is not 1..65535", disp, port);
    }
    curl_free(host);
    curl_free(port);
    curl_url_cleanup(u);
    return rc;
}

/* Add "name: value" to *l. 0 or -ENOMEM (the value may be a secret: wiped after). */
static int add_header(struct curl_slist **l, const char *name, const char *value)
{
    size_t n = strlen(name) + strlen(value) + 3;
    char *s = malloc(n);
    if (!s)
        return -ENOMEM;
    snprintf(s, n, "%s: %s", name, value);
    struct curl_slist *t = curl_slist_append(*l, s);
    explicit_bzero(s, n);
    free(s);
    if (!t)
        return -ENOMEM;
    *l = t;
    return 0;
}

/* The headers of the open's probe (hdr_open) or of reads (hdr_read). */
static int make_headers(bfs_object *o, int reads)
{
    struct curl_slist **l = reads ? &o->hdr_read : &o->hdr_open;
    if (o->creds && o->creds->have) {
        if (add_header(l, "x-amz-content-sha256", EMPTY_SHA256))
            return -ENOMEM;
        if (o->creds->token[0] && add_header(l, "x-amz-security-token", o->creds->token))
            return -ENOMEM;
    }
    if (reads) {
        /* a weak ETag (W/"...") never matches If-Match (strong comparison, RFC 9110
         * 13.1.1): the date pins the object then */
        if (o->etag[0] && strncmp(o->etag, "W/", 2)) {
            if (add_header(l, "If-Match", o->etag))
                return -ENOMEM;
        } else if (o->last_modified[0]) {
            if (add_header(l, "If-Unmodified-Since", o->last_modified))
                return -ENOMEM;
        }
    }
    /* "Accept: * / *" stays: curl 7.88 signs a header given as "Name:" (to drop it) that it
     * then does not send, and S3 refuses the signature (SignatureDoesNotMatch) */
    return 0;
}

/* The message of a failed open, into err; the code it returns. */
static int open_error(const bfs_object *o, enum outcome out, const xfer *x, unsigned tries,
                      int os_errno, char *err, size_t errlen)
{
    char after[64] = "";
    if (tries)
        snprintf(after, sizeof after, " after %u retries", tries);
    const char *d = o->display;
    char who[900];
    if (o->creds && o->creds->have)
        snprintf(who, sizeof who, "credentials from %s, access key id %s", o->creds->source,
                 o->creds->key_id);
    else if (o->creds)
        snprintf(who, sizeof who,
                 "no credentials (unsigned request: set AWS_ACCESS_KEY_ID and "
                 "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)");
    else
        snprintf(who, sizeof who, "no credentials");
    int rc;
    switch (out) {
    case OUT_NOTFOUND:
        rc = bfs_errf(-ENOENT, err, errlen,
                      "%.2000s: not found (%s: no such object or bucket): check the URL%s", d,
                      x->why, o->s3 ? ", s3_endpoint= and s3_region=" : "");
        break;
    case OUT_DENIED:
        rc = bfs_errf(-EACCES, err, errlen,
                      "%.2000s: access refused (%s) with %s: use credentials that may read "
                      "the object",
                      d, x->why, who);
        break;
    case OUT_TLS:
        rc = bfs_errf(-EPROTO, err, errlen,
                      "%.2000s: %s: the server's certificate is not trusted (give its CA with "
                      "ca=FILE)",
                      d, x->why);
        break;
    case OUT_INVAL:
        rc = bfs_errf(-EINVAL, err, errlen, "%.2000s: %s", d, x->why);
        break;
    case OUT_NOMEM:
        rc = -ENOMEM;
        break;
    case OUT_RETRY:
        if (x->h.status) {
            rc = bfs_errf(-EIO, err, errlen, "%.2000s: %s%s: the server fails; try again later", d,
                          x->why, after);
        } else if (os_errno == ECONNREFUSED) {
            rc = bfs_errf(-ECONNREFUSED, err, errlen,
                          "%.2000s: connection refused%s (%s): is the server up? check the "
                          "URL%s",
                          d, after, x->why, o->s3 ? " and s3_endpoint=" : "");
        } else if (strstr(x->why, "imed out") || strstr(x->why, "imeout")) {
            rc = bfs_errf(-ETIMEDOUT, err, errlen,
                          "%.2000s: no answer within fetch_timeout_ms=%u%s (%s)", d,
                          o->conf->timeout_ms, after, x->why);
        } else {
            rc = bfs_errf(-EHOSTUNREACH, err, errlen, "%.2000s: cannot reach the server%s (%s)", d,
                          after, x->why);
        }
        break;
    case OUT_STATUS:
        if (x->h.bucket_region[0])
            rc = bfs_errf(-EINVAL, err, errlen,
                          "%.2000s: %s: the bucket is in region %s: set s3_region=%s", d, x->why,
                          x->h.bucket_region, x->h.bucket_region);
        else
            rc = bfs_errf(-EPROTO, err, errlen, "%.2000s: unexpected answer %s", d, x->why);
        break;
    default: /* OUT_BAD, OUT_CHANGED */
        rc = bfs_errf(-EPROTO, err, errlen, "%.2000s: %s", d, x->why);
        break;
    }
    return rc;
}

static int open_object(const char *url, bfs_object **out, char *err, size_t errlen);

int bfs_object_open(const char *url, bfs_object **out, char *err, size_t errlen)
{
    char msg[BFS_FETCH_REASON_MAX] = "";
    int rc = open_object(url, out, msg, sizeof msg);
    if (rc && err && errlen)
        snprintf(err, errlen, "%s", msg);
    snprintf(bfs_fetch_reason_buf(), BFS_FETCH_REASON_MAX, "%s", rc ? msg : "");
    return rc;
}

/* bfs_object_open, its message in err (never NULL). */
static int open_object(const char *url, bfs_object **out, char *err, size_t errlen)
{
    *out = NULL;
    int irc = bfs_fetch_init();
    if (irc)
        return bfs_errf(irc, err, errlen,
                        "object storage: libcurl could not start (out of memory)");
    bfs_object *o = calloc(1, sizeof *o);
    if (!o)
        return -ENOMEM;
    int rc = -ENOMEM;
    char *bucket = NULL, *key = NULL, *ident = NULL;
    int is_s3 = !strncmp(url, "s3://", 5);
    /* s3:// URLs hold no secret (and a key may hold '?'): shown whole */
    if (!(o->conf = bfs_fetch_cfg_get()) || !(o->display = is_s3 ? strdup(url) : display_url(url)))
        goto fail;
    for (char *c = o->display; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = '?';
    if (is_s3) {
        o->s3 = 1;
        o->scheme = "https";
        if ((rc = bfs_s3_parse_url(url, &bucket, &key, err, errlen)))
            goto fail;
        char region[64];
        if ((rc = bfs_s3_region_find(o->conf->s3_region, region, sizeof region, err, errlen)))
            goto fail;
        rc = -ENOMEM;
        if (!(o->creds = malloc(sizeof *o->creds)))
            goto fail;
        if ((rc = bfs_s3_creds_load(o->creds, err, errlen)))
            goto fail;
        rc = -ENOMEM;
        snprintf(o->sigv4, sizeof o->sigv4, "aws:amz:%s:s3", region);
        /* no s3_endpoint=: the AWS tools' variables (mkbatchfs --info/--verify have no
         * options), else AWS */
        const char *endpoint = o->conf->s3_endpoint, *var = "s3_endpoint";
        if (!endpoint && (endpoint = getenv(var = "AWS_ENDPOINT_URL_S3")) && !*endpoint)
            endpoint = NULL;
        if (!endpoint && (endpoint = getenv(var = "AWS_ENDPOINT_URL")) && !*endpoint)
            endpoint = NULL;
        if (endpoint && endpoint != o->conf->s3_endpoint &&
            (rc = bfs_s3_check_endpoint(endpoint, err, errlen))) {
            char why[512];
            snprintf(why, sizeof why, "%s", err);
            bfs_errf(rc, err, errlen, "%s (from the environment variable %s)", why, var);
            goto fail;
        }
        rc = -ENOMEM;
        if (!(o->req_url = bfs_s3_request_url(bucket, key, endpoint, region)))
            goto fail;
        if (asprintf(&ident, "s3:%s/%s", bucket, key) < 0) {
            ident = NULL;
            goto fail;
        }
    } else if (!strncmp(url, "http://", 7) || !strncmp(url, "https://", 8)) {
        o->follow = 1;
        o->scheme = url[4] == 's' ? "https" : "http";
        if ((rc = check_http_url(url, o->display, err, errlen)))
            goto fail;
        rc = -ENOMEM;
        if (!(o->req_url = strdup(url)))
            goto fail;
        /* the identity: host, port and path, not the scheme, user or query (which a
         * presigned URL changes at every signing) */
        const char *s = o->display + strlen(o->scheme) + 3;
        if (!(ident = strndup(s, strcspn(s, "?"))))
            goto fail;
    } else {
        rc = bfs_errf(-EINVAL, err, errlen,
                      "%.200s: not an object URL (s3://BUCKET/KEY, https://... or http://...)",
                      o->display);
        goto fail;
    }
    if ((rc = make_headers(o, 0)))
        goto fail;

    /* the probe: GET bytes 0-0 learns the size from Content-Range (or Content-Length of a
     * 200) and, unlike HEAD, gets S3's error code in the body of a refusal */
    xfer *x = calloc(1, sizeof *x);
    rc = -ENOMEM;
    if (!x)
        goto fail;
    x->o = o, x->opening = 1;
    unsigned tries;
    int os_errno = 0;
    enum outcome res = request(o, x, &tries, &os_errno);
    if (res == OUT_OK) {
        bfs_http_head *h = &x->h;
        if (h->status == 206 && h->has_range && !h->unsatisfied && h->first == 0 &&
            h->total_known) {
            o->size = h->total;
        } else if (h->status == 200 && h->has_length) {
            o->size = h->length;
        } else if (h->status == 416 && h->unsatisfied && h->total == 0) {
            o->size = 0;
        } else {
            snprintf(x->why, sizeof x->why,
                     "HTTP %d without the object's size (no Content-Range bytes 0-0/SIZE)",
                     h->status);
            res = OUT_BAD;
        }
        snprintf(o->etag, sizeof o->etag, "%s", h->etag);
        snprintf(o->last_modified, sizeof o->last_modified, "%s", h->last_modified);
    }
    if (res != OUT_OK) {
        rc = open_error(o, res, x, tries, os_errno, err, errlen);
        free(x);
        goto fail;
    }
    free(x);
    if ((rc = make_headers(o, 1)))
        goto fail;
    bfs_xxh64_state st;
    bfs_xxh64_init(&st, 0x62667366657463ull);
    bfs_xxh64_update(&st, ident, strlen(ident) + 1);
    bfs_xxh64_update(&st, &o->size, sizeof o->size);
    bfs_xxh64_update(&st, o->etag, strlen(o->etag) + 1);
    bfs_xxh64_update(&st, o->last_modified, strlen(o->last_modified) + 1);
    o->identity = bfs_xxh64_digest(&st);
    free(bucket);
    free(key);
    free(ident);
    *out = o;
    return 0;
fail:
    if (rc == -ENOMEM)
        bfs_errf(rc, err, errlen, "%.200s: out of memory", o->display ? o->display : "object");
    free(bucket);
    free(key);
    free(ident);
    bfs_object_close(o);
    return rc;
}

int bfs_object_read(bfs_object *o, void *buf, size_t len, uint64_t off)
{
    char *reason = bfs_fetch_reason_buf(); /* this thread's, BFS_FETCH_REASON_MAX bytes */
    reason[0] = '\0';
    if (len == 0)
        return 0;
    if (off > o->size || len > o->size - off) {
        snprintf(reason, BFS_FETCH_REASON_MAX,
                 "GET %.800s bytes %" PRIu64 "+%zu: past the object's %" PRIu64 " bytes",
                 o->display, off, len, o->size);
        return -EINVAL;
    }
    uint64_t t0 = bfs_fetch_now_ns();
    xfer *x = calloc(1, sizeof *x);
    if (!x) {
        snprintf(reason, BFS_FETCH_REASON_MAX, "GET %.800s: out of memory", o->display);
        atomic_fetch_add(&bfs_fetch_counter.failures, 1);
        return -ENOMEM;
    }
    x->o = o, x->buf = buf, x->off = off, x->len = len;
    unsigned tries;
    int os_errno;
    enum outcome res = request(o, x, &tries, &os_errno);
    int rc;
    switch (res) {
    case OUT_OK:
        rc = 0;
        break;
    case OUT_CHANGED:
        rc = BFS_E_CHANGED;
        break;
    case OUT_NOTFOUND:
        rc = -ENOENT;
        break;
    case OUT_DENIED:
        rc = -EACCES;
        break;
    case OUT_NOMEM:
        rc = -ENOMEM;
        break;
    default:
        rc = -EIO;
        break;
    }
    if (rc) {
        char after[64] = "";
        if (tries)
            snprintf(after, sizeof after, " after %u retries", tries);
        snprintf(
            reason, BFS_FETCH_REASON_MAX, "GET %.400s bytes %" PRIu64 "-%" PRIu64 ": %.400s%s%s",
            o->display, off, off + len - 1, x->why,
            rc == BFS_E_CHANGED ? " (the object was replaced since it was opened)" : "", after);
        atomic_fetch_add(&bfs_fetch_counter.failures, 1);
    }
    free(x);
    atomic_fetch_add(&bfs_fetch_counter.wait_ns, bfs_fetch_now_ns() - t0);
    return rc;
}
