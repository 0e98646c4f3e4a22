/*
 * format.c — the Redis transport's pure parts (see remote.h): `remote=` URLs, keys and
 * declines (batch values: auth.c). No hiredis here, so that option parsing
 * (engine/pipeline_values.c) and the fuzz target link without it.
 */
#include "engine/remote/remote.h"
#include "engine/remote/remote_internal.h"
#include "base/endian.h"
#include "base/err.h"
#include "base/hash.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static const uint8_t ERROR_MAGIC[8] = {'B', 'F', 'S', 'R', 'E', 'R', 'R', '1'};

/* ---- URLs ------------------------------------------------------------------------------ */

static int hexval(int c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Percent-decode [s, s + n) into out (cap bytes with the NUL). -1 on a bad escape, a NUL
 * or overflow. */
static int unescape(const char *s, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)s[i];
        if (c == '%') {
            if (i + 2 >= n)
                return -1;
            int h = hexval((unsigned char)s[i + 1]), l = hexval((unsigned char)s[i + 2]);
            if (h < 0 || l < 0)
                return -1;
            c = h * 16 + l;
            i += 2;
        }
        if (c == 0 || o + 1 >= cap)
            return -1;
        out[o++] = (char)c;
    }
    out[o] = '\0';
    return 0;
}

int bfs_remote_decimal(const char *s, size_t n, uint64_t max, uint64_t *v)
{
    if (!n || n > 20)
        return -1;
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        if (x > (max - (uint64_t)(s[i] - '0')) / 10)
            return -1;
        x = x * 10 + (uint64_t)(s[i] - '0');
    }
    *v = x;
    return 0;
}

int bfs_remote_parse_url(const char *s, bfs_remote_url *u, char *err, size_t errlen)
{
    static const char scheme[] = "redis://";
    memset(u, 0, sizeof *u);
    u->port = 6379;
    if (strncmp(s, scheme, sizeof scheme - 1))
        return bfs_errf(-EINVAL, err, errlen,
                        "remote=%.64s: not a Redis URL (redis://[[USER]:PASS@]HOST[:PORT][/DB])",
                        s);
    const char *a = s + sizeof scheme - 1;
    const char *slash = strchr(a, '/');
    const char *end = slash ? slash : a + strlen(a);
    const char *at = NULL;
    for (const char *p = a; p < end; p++)
        if (*p == '@')
            at = p;
    if (strpbrk(a, "?#"))
        return bfs_errf(
            -EINVAL, err, errlen,
            "remote=: query or fragment not supported (redis://[[USER]:PASS@]HOST[:PORT][/DB])");
    if (at) {
        const char *colon = memchr(a, ':', (size_t)(at - a));
        if (!colon)
            return bfs_errf(
                -EINVAL, err, errlen,
                "remote=: credentials must be USER:PASS@ or :PASS@ (no ':' before '@')");
        if (unescape(a, (size_t)(colon - a), u->user, sizeof u->user) ||
            unescape(colon + 1, (size_t)(at - colon - 1), u->pass, sizeof u->pass))
            return bfs_errf(-EINVAL, err, errlen,
                            "remote=: user or password too long, NUL, or a bad %%XX escape");
        if (!u->pass[0])
            return bfs_errf(-EINVAL, err, errlen, "remote=: empty password after ':'");
        a = at + 1;
    }
    const char *host = a, *host_end, *port = NULL;
    if (*a == '[') {
        const char *close = memchr(a, ']', (size_t)(end - a));
        if (!close)
            return bfs_errf(-EINVAL, err, errlen, "remote=: IPv6 address without ']'");
        host = a + 1, host_end = close;
        if (close + 1 < end) {
            if (close[1] != ':')
                return bfs_errf(-EINVAL, err, errlen, "remote=: junk after the IPv6 address");
            port = close + 2;
        }
        for (const char *p = host; p < host_end; p++)
            if (hexval((unsigned char)*p) < 0 && *p != ':' && *p != '.')
                return bfs_errf(-EINVAL, err, errlen, "remote=: bad IPv6 address");
    } else {
        const char *colon = memchr(a, ':', (size_t)(end - a));
        host_end = colon ? colon : end;
        if (colon)
            port = colon + 1;
        for (const char *p = host; p < host_end; p++)
            if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                  (*p >= '0' && *p <= '9') || *p == '.' || *p == '-' || *p == '_'))
                return bfs_errf(-EINVAL, err, errlen,
                                "remote=: bad character '%c' in the host name", *p);
    }
    size_t hn = (size_t)(host_end - host);
    if (!hn)
        return bfs_errf(-EINVAL, err, errlen, "remote=: no host (redis://HOST[:PORT][/DB])");
    if (hn >= sizeof u->host)
        return bfs_errf(-EINVAL, err, errlen, "remote=: host name too long");
    memcpy(u->host, host, hn);
    u->host[hn] = '\0';
    if (port) {
        uint64_t v;
        if (bfs_remote_decimal(port, (size_t)(end - port), 65535, &v) || v == 0)
            return bfs_errf(-EINVAL, err, errlen, "remote=: port must be 1..65535");
        u->port = (int)v;
    }
    if (slash && slash[1]) {
        uint64_t v;
        if (bfs_remote_decimal(slash + 1, strlen(slash + 1), INT32_MAX, &v))
            return bfs_errf(-EINVAL, err, errlen, "remote=: database must be a number (/DB)");
        u->db = (int)v;
    }
    return 0;
}

void bfs_remote_url_text(const bfs_remote_url *u, char *buf, size_t cap)
{
    int v6 = strchr(u->host, ':') != NULL;
    snprintf(buf, cap, "redis://%s%s%s%s%s%s:%d/%d", u->user, u->pass[0] ? ":***" : "",
             u->user[0] || u->pass[0] ? "@" : "", v6 ? "[" : "", u->host, v6 ? "]" : "", u->port,
             u->db);
}

/* ---- values ---------------------------------------------------------------------------- */

void bfs_remote_key(char *buf, size_t cap, uint64_t fp, uint64_t epoch, uint64_t k)
{
    snprintf(buf, cap, "bfs:{%016" PRIx64 "}:b:%" PRIu64 ":%" PRIu64, fp, epoch, k);
}

size_t bfs_remote_error_value(uint8_t *out, uint64_t fp, uint64_t epoch, uint64_t k, int rc,
                              const char *msg)
{
    size_t n = strnlen(msg, BFS_REMOTE_ERR_MAX);
    memcpy(out, ERROR_MAGIC, 8);
    bfs_st64(out + 8, fp);
    bfs_st64(out + 16, epoch);
    bfs_st64(out + 24, k);
    bfs_st64(out + 32, (uint64_t)(int64_t)rc);
    memcpy(out + BFS_REMOTE_HDR, msg, n);
    bfs_st64(out + 40, bfs_xxh64(out + BFS_REMOTE_HDR, n, fp));
    return BFS_REMOTE_HDR + n;
}

int bfs_remote_error_check(const uint8_t *v, size_t len, uint64_t fp, uint64_t epoch, uint64_t k,
                           char *msg, size_t cap)
{
    if (len < BFS_REMOTE_HDR || len > BFS_REMOTE_HDR + BFS_REMOTE_ERR_MAX ||
        memcmp(v, ERROR_MAGIC, 8) || bfs_ld64(v + 8) != fp || bfs_ld64(v + 16) != epoch ||
        bfs_ld64(v + 24) != k ||
        bfs_xxh64(v + BFS_REMOTE_HDR, len - BFS_REMOTE_HDR, fp) != bfs_ld64(v + 40))
        return 0;
    int64_t rc = (int64_t)bfs_ld64(v + 32);
    if (rc >= 0 || rc < INT32_MIN)
        return 0;
    size_t n = len - BFS_REMOTE_HDR;
    if (cap) {
        size_t m = n < cap - 1 ? n : cap - 1;
        for (size_t i = 0; i < m; i++) /* (a message for a log line: no control bytes) */
            msg[i] = v[BFS_REMOTE_HDR + i] < 0x20 || v[BFS_REMOTE_HDR + i] == 0x7f
                         ? '?'
                         : (char)v[BFS_REMOTE_HDR + i];
        msg[m] = '\0';
    }
    return (int)rc;
}
