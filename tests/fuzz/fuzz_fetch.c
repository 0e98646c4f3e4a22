/*
 * fuzz_fetch.c — libFuzzer target for what the object-storage layer takes from outside
 * (engine/dataset/fetch_http.c, fetch_s3.c): response header blocks with the range a
 * read asked for, and s3:// URLs with s3_endpoint= values.
 *
 * Input: byte 0 picks the part. Response (even): bytes 1..24 are the offset, length and
 * object size of the read (little-endian, reduced so they mostly fit), the rest the
 * header block. bfs_http_parse_head either refuses it (-EPROTO with a one-line reason) or
 * gives a status in 100..599, a range with first <= last (< total when known), and an
 * ETag / Last-Modified without control bytes. bfs_http_check_body then refuses (-EIO,
 * with a reason) or passes only a 206 whose Content-Range is exactly the range asked for
 * (total the size, Content-Length the length, when given) or a 200 for the whole object.
 * The body after the block's first blank line is copied as fetch.c's body_cb does, into a
 * buffer of exactly the length (ASan: never past it).
 * URL (odd): the rest, NUL-terminated, as an s3:// URL: refused with -EINVAL and a
 * one-line message, or a bucket of [A-Za-z0-9._-] and a key without control bytes whose
 * percent-encoding decodes back to it and holds only unreserved bytes, '/' and %XX; the
 * request URLs (AWS, and the same input as an endpoint when bfs_s3_check_endpoint takes
 * it) start with the endpoint and end with the encoded key.
 * Seeds: tests/fuzz/seeds/fetch/.
 */
#include "engine/dataset/fetch_internal.h"
#include "base/endian.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_fetch: %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static int printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return 0;
    return 1;
}

static int one_line(const char *err, size_t cap)
{
    return err[0] && memchr(err, '\0', cap) && !strchr(err, '\n');
}

static void response(const uint8_t *d, size_t n)
{
    if (n < 24)
        return;
    /* small numbers mostly, so that ranges in the input can match them */
    uint64_t off = bfs_ld64(d) % 100000, len = bfs_ld64(d + 8) % 100000,
             osize = bfs_ld64(d + 16) % 200000;
    d += 24, n -= 24;
    const char *block = (const char *)d;
    size_t hn = n;
    const uint8_t *body = NULL;
    size_t bn = 0;
    for (size_t i = 0; i + 3 < n; i++)
        if (!memcmp(d + i, "\r\n\r\n", 4)) {
            hn = i + 4, body = d + i + 4, bn = n - i - 4;
            break;
        }
    bfs_http_head h;
    char err[512] = "";
    int rc = bfs_http_parse_head(block, hn, &h, err, sizeof err);
    if (rc) {
        CHECK(rc == -EPROTO && one_line(err, sizeof err));
        return;
    }
    CHECK(h.status >= 100 && h.status <= 599);
    if (h.has_range && !h.unsatisfied)
        CHECK(h.first <= h.last && (!h.total_known || h.last < h.total));
    if (h.unsatisfied)
        CHECK(h.has_range && h.total_known);
    CHECK(memchr(h.etag, '\0', sizeof h.etag) && printable(h.etag));
    CHECK(memchr(h.last_modified, '\0', sizeof h.last_modified) && printable(h.last_modified));
    CHECK(memchr(h.bucket_region, '\0', sizeof h.bucket_region) && printable(h.bucket_region));
    err[0] = '\0';
    rc = bfs_http_check_body(&h, off, len, osize, err, sizeof err);
    if (rc) {
        CHECK(rc == -EIO && one_line(err, sizeof err));
        return;
    }
    CHECK(len > 0 && off + len <= osize);
    if (h.status == 206) {
        CHECK(h.has_range && !h.unsatisfied && h.first == off && h.last == off + len - 1);
        CHECK(!h.total_known || h.total == osize);
    } else {
        CHECK(h.status == 200 && off == 0 && len == osize);
    }
    CHECK(!h.has_length || h.length == len);
    /* the copy of body_cb: in pieces, refused past len */
    uint8_t *buf = malloc(len);
    CHECK(buf);
    uint64_t got = 0;
    for (size_t i = 0; i < bn;) {
        size_t piece = 1 + (body[i] % 61);
        if (piece > bn - i)
            piece = bn - i;
        if (piece > len - got)
            break; /* refused: more than the range */
        memcpy(buf + got, body + i, piece);
        got += piece, i += piece;
    }
    CHECK(got <= len);
    free(buf);
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static void url(const uint8_t *d, size_t n)
{
    char *s = malloc(n + 1);
    CHECK(s);
    memcpy(s, d, n);
    s[n] = '\0';
    char *bucket, *key, err[512] = "";
    int rc = bfs_s3_parse_url(s, &bucket, &key, err, sizeof err);
    if (rc) {
        CHECK(rc == -EINVAL && one_line(err, sizeof err));
        CHECK(!bucket && !key);
    } else {
        CHECK(bucket[0] && strlen(bucket) <= 255 && key[0] && printable(key));
        CHECK(strspn(bucket, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
              strlen(bucket));
        char *e = bfs_url_encode_path(key);
        CHECK(e);
        /* only unreserved bytes, '/' and %XX; decodes back to the key */
        size_t kn = 0;
        for (size_t i = 0; e[i]; i++) {
            char c;
            if (e[i] == '%') {
                int hi = hexval(e[i + 1]), lo = hi < 0 ? -1 : hexval(e[i + 2]);
                CHECK(hi >= 0 && lo >= 0);
                c = (char)(hi * 16 + lo);
                i += 2;
            } else {
                CHECK(strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~/",
                             e[i]));
                c = e[i];
            }
            CHECK(key[kn++] == c);
        }
        CHECK(key[kn] == '\0');
        char *u = bfs_s3_request_url(bucket, key, NULL, "us-east-1");
        CHECK(u && !strncmp(u, "https://", 8));
        CHECK(strlen(u) >= strlen(e) && !strcmp(u + strlen(u) - strlen(e), e));
        free(u);
        u = bfs_s3_request_url(bucket, key, "http://127.0.0.1:9000/", "us-east-1");
        CHECK(u && !strncmp(u, "http://127.0.0.1:9000/", 22) && u[22] != '/');
        free(u);
        free(e);
        free(bucket);
        free(key);
    }
    /* the same bytes as s3_endpoint= */
    err[0] = '\0';
    rc = bfs_s3_check_endpoint(s, err, sizeof err);
    if (rc) {
        CHECK(rc == -EINVAL && one_line(err, sizeof err));
    } else {
        CHECK(!strncmp(s, "http://", 7) || !strncmp(s, "https://", 8));
        CHECK(!strpbrk(s, " ?#\n\r\t"));
        char *u = bfs_s3_request_url("b", "k", s, "us-east-1");
        CHECK(u && !strncmp(u, s, strcspn(s, "/") + 2));
        CHECK(strlen(u) >= 4 && !strcmp(u + strlen(u) - 4, "/b/k"));
        free(u);
    }
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] % 2 == 0)
        response(data + 1, size - 1);
    else
        url(data + 1, size - 1);
    return 0;
}
