/*
 * fetch_http.c — the pure HTTP part of the object-storage layer: the header block of a
 * response parsed (status, Content-Length, Content-Range, ETag, Last-Modified, S3's
 * region hint) and the check that a body is exactly the range asked for, before fetch.c
 * copies a byte of it into a reader's buffer. No I/O, no allocation: fuzzed by
 * tests/fuzz/fuzz_fetch.c, tested by tests/check_fetch.c.
 *
 * A server is not trusted: every number is bounds-checked, a header the layer relies on
 * that is malformed or sent twice with different values makes the response refused
 * (-EPROTO), and nothing of the input reaches a message but numbers and the status.
 */
#include "engine/dataset/fetch_internal.h"
#include "base/err.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <strings.h>

/* A folded header value is joined into this many bytes at most; longer ones of the
 * headers we read are refused (an ETag is a few dozen bytes on every store). */
#define HTTP_VALUE_MAX 1024

static int is_ws(char c)
{
    return c == ' ' || c == '\t';
}

/* Digits [s, s + n) into *v: 1..19 digits (fits uint64). 0 or -1. */
static int decimal(const char *s, size_t n, uint64_t *v)
{
    if (n == 0 || n > 19)
        return -1;
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        x = x * 10 + (uint64_t)(s[i] - '0');
    }
    *v = x;
    return 0;
}

/* "HTTP/1.1 206 Partial Content", "HTTP/2 200", "HTTP/1.0 404" -> status. */
static int parse_status(const char *s, size_t n, int *status)
{
    if (n < 5 || memcmp(s, "HTTP/", 5))
        return -1;
    size_t i = 5;
    while (i < n && ((s[i] >= '0' && s[i] <= '9') || s[i] == '.'))
        i++;
    if (i == 5 || i >= n || s[i] != ' ')
        return -1;
    i++;
    uint64_t v;
    if (n - i < 3 || decimal(s + i, 3, &v) || v < 100 || v > 599)
        return -1;
    if (n - i > 3 && s[i + 3] != ' ')
        return -1;
    *status = (int)v;
    return 0;
}

/* "bytes A-B/T", "bytes A-B/ *" or "bytes * /T" (no spaces around / and -). */
static int parse_range(const char *v, size_t n, bfs_http_head *h)
{
    if (n < 6 || strncasecmp(v, "bytes", 5) || !is_ws(v[5]))
        return -1;
    size_t i = 6;
    while (i < n && is_ws(v[i]))
        i++;
    const char *slash = memchr(v + i, '/', n - i);
    if (!slash)
        return -1;
    const char *range = v + i, *tot = slash + 1;
    size_t rn = (size_t)(slash - range), tn = n - (size_t)(tot - v);
    int known = !(tn == 1 && tot[0] == '*');
    uint64_t total = 0, first, last;
    if (known && decimal(tot, tn, &total))
        return -1;
    if (rn == 1 && range[0] == '*') {
        if (!known)
            return -1;
        h->unsatisfied = 1, h->has_range = 1, h->total_known = 1, h->total = total;
        return 0;
    }
    const char *dash = memchr(range, '-', rn);
    if (!dash || decimal(range, (size_t)(dash - range), &first) ||
        decimal(dash + 1, rn - (size_t)(dash + 1 - range), &last) || first > last ||
        (known && last >= total))
        return -1;
    h->has_range = 1, h->unsatisfied = 0, h->first = first, h->last = last;
    h->total_known = known, h->total = total;
    return 0;
}

/* Copy a printable value (no control bytes) of at most cap - 1 bytes. 0 or -1. */
static int copy_text(char *dst, size_t cap, const char *v, size_t n)
{
    if (n >= cap)
        return -1;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)v[i] < 0x20 || v[i] == 0x7f)
            return -1;
    memcpy(dst, v, n);
    dst[n] = '\0';
    return 0;
}

/* One logical header (name, its unfolded value) applied to h. 0 or -EPROTO. */
static int apply_header(bfs_http_head *h, const char *name, size_t nn, const char *v, size_t vn,
                        int truncated, char *err, size_t errlen)
{
#define IS(lit) (nn == sizeof(lit) - 1 && !strncasecmp(name, lit, nn))
    if (IS("content-length")) {
        uint64_t x;
        if (truncated || decimal(v, vn, &x))
            return bfs_errf(-EPROTO, err, errlen, "malformed Content-Length header");
        if (h->has_length && h->length != x)
            return bfs_errf(-EPROTO, err, errlen, "two different Content-Length headers");
        h->has_length = 1, h->length = x;
    } else if (IS("content-range")) {
        bfs_http_head t = *h;
        if (truncated || parse_range(v, vn, &t))
            return bfs_errf(-EPROTO, err, errlen, "malformed Content-Range header");
        if (h->has_range &&
            (h->unsatisfied != t.unsatisfied || h->first != t.first || h->last != t.last ||
             h->total_known != t.total_known || h->total != t.total))
            return bfs_errf(-EPROTO, err, errlen, "two different Content-Range headers");
        *h = t;
    } else if (IS("etag")) {
        if (truncated || copy_text(h->etag, sizeof h->etag, v, vn))
            return bfs_errf(-EPROTO, err, errlen, "malformed ETag header (too long or binary)");
    } else if (IS("last-modified")) {
        if (truncated || copy_text(h->last_modified, sizeof h->last_modified, v, vn))
            return bfs_errf(-EPROTO, err, errlen, "malformed Last-Modified header");
    } else if (IS("x-amz-bucket-region")) {
        /* only a hint for messages: kept when it looks like a region, else dropped */
        int ok = !truncated && vn > 0 && vn < sizeof h->bucket_region;
        for (size_t i = 0; ok && i < vn; i++)
            ok = (v[i] >= 'a' && v[i] <= 'z') || (v[i] >= '0' && v[i] <= '9') || v[i] == '-';
        if (ok)
            memcpy(h->bucket_region, v, vn), h->bucket_region[vn] = '\0';
    }
    return 0;
#undef IS
}

int bfs_http_parse_head(const char *block, size_t n, bfs_http_head *h, char *err, size_t errlen)
{
    memset(h, 0, sizeof *h);
    int have_status = 0;
    const char *name = NULL;
    size_t nn = 0, vn = 0;
    int truncated = 0;
    char val[HTTP_VALUE_MAX];
    size_t i = 0;
    for (;;) {
        /* the next line [s, s + ln), without its CR LF; at the end a virtual blank line
         * flushes the header in progress */
        const char *s = block + i;
        size_t ln = 0;
        int end = i >= n;
        if (!end) {
            const char *nl = memchr(s, '\n', n - i);
            ln = nl ? (size_t)(nl - s) : n - i;
            i += ln + (nl != NULL);
            if (ln && s[ln - 1] == '\r')
                ln--;
        }
        if (!end && ln && is_ws(s[0])) { /* obsolete folding: continues the value */
            if (!name)
                return bfs_errf(-EPROTO, err, errlen, "header continuation line without a header");
            size_t a = 0;
            while (a < ln && is_ws(s[a]))
                a++;
            size_t b = ln;
            while (b > a && is_ws(s[b - 1]))
                b--;
            if (b > a) {
                if (vn + 1 + (b - a) > sizeof val) {
                    truncated = 1;
                } else {
                    if (vn)
                        val[vn++] = ' ';
                    memcpy(val + vn, s + a, b - a), vn += b - a;
                }
            }
            continue;
        }
        if (name) { /* a new line or the end: the header in progress is complete */
            int rc = apply_header(h, name, nn, val, vn, truncated, err, errlen);
            if (rc)
                return rc;
            name = NULL;
        }
        if (end)
            break;
        if (ln >= 5 && !memcmp(s, "HTTP/", 5)) { /* a (new) response starts: only the last counts */
            memset(h, 0, sizeof *h);
            if (parse_status(s, ln, &h->status))
                return bfs_errf(-EPROTO, err, errlen, "malformed HTTP status line");
            have_status = 1;
            continue;
        }
        if (ln == 0)
            continue; /* the blank line that ends a response's headers */
        if (!have_status)
            return bfs_errf(-EPROTO, err, errlen, "response does not start with a status line");
        const char *colon = memchr(s, ':', ln);
        if (!colon || colon == s)
            return bfs_errf(-EPROTO, err, errlen, "header line without a name and colon");
        name = s, nn = (size_t)(colon - s);
        for (size_t k = 0; k < nn; k++)
            if (is_ws(name[k]) || (unsigned char)name[k] < 0x21 || name[k] == 0x7f)
                return bfs_errf(-EPROTO, err, errlen, "malformed header name");
        size_t a = nn + 1, b = ln;
        while (a < b && is_ws(s[a]))
            a++;
        while (b > a && is_ws(s[b - 1]))
            b--;
        truncated = b - a > sizeof val;
        vn = truncated ? 0 : b - a;
        memcpy(val, s + a, vn);
    }
    if (!have_status)
        return bfs_errf(-EPROTO, err, errlen, "response without a status line");
    return 0;
}

int bfs_http_check_body(const bfs_http_head *h, uint64_t off, uint64_t len, uint64_t size,
                        char *err, size_t errlen)
{
    if (len == 0 || off > size || len > size - off)
        return bfs_errf(-EIO, err, errlen,
                        "bytes %" PRIu64 "+%" PRIu64 " asked past the size %" PRIu64, off, len,
                        size);
    uint64_t last = off + len - 1;
    if (h->status == 200) {
        if (off != 0 || len != size)
            return bfs_errf(-EIO, err, errlen,
                            "HTTP 200 (the whole object) to a request for bytes %" PRIu64
                            "-%" PRIu64 ": the server ignores Range",
                            off, last);
        if (h->has_length && h->length != len)
            return bfs_errf(-EIO, err, errlen,
                            "Content-Length %" PRIu64 " of the whole object, opened as %" PRIu64
                            " bytes",
                            h->length, size);
        return 0;
    }
    if (h->status != 206)
        return bfs_errf(-EIO, err, errlen, "HTTP %d, not 206 Partial Content", h->status);
    if (!h->has_range || h->unsatisfied)
        return bfs_errf(-EIO, err, errlen, "206 response without a Content-Range");
    if (h->first != off || h->last != last)
        return bfs_errf(-EIO, err, errlen,
                        "Content-Range bytes %" PRIu64 "-%" PRIu64 ", asked for bytes %" PRIu64
                        "-%" PRIu64,
                        h->first, h->last, off, last);
    if (h->total_known && h->total != size)
        return bfs_errf(-EIO, err, errlen,
                        "Content-Range total %" PRIu64 ", opened as %" PRIu64 " bytes", h->total,
                        size);
    if (h->has_length && h->length != len)
        return bfs_errf(-EIO, err, errlen,
                        "Content-Length %" PRIu64 " for a range of %" PRIu64 " bytes", h->length,
                        len);
    return 0;
}
