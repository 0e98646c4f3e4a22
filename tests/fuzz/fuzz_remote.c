/*
 * fuzz_remote.c — libFuzzer target for the untrusted bytes of the Redis transport
 * (engine/remote/remote.c): `remote=` URLs (bfs_remote_parse_url) and batch values as
 * Redis hands them back (bfs_remote_value_check).
 *
 * Failures stored by workers (bfs_remote_error_check) are checked on the same bytes: a
 * negative code with a printable message, or 0; and one built from them reads back.
 * Input: byte 0 picks the part. URL (even): the rest, NUL-terminated, parsed; on success
 * the fields are bounded and NUL-terminated, the port in 1..65535, the db >= 0, and the
 * URL written back without its password (bfs_remote_url_text) parses to the same host,
 * port, db and user; on failure -EINVAL with a message. Value (odd): bytes 1..8 are the
 * size the caller expects (mod 4 KiB), the rest the value; the check without a key either
 * refuses it (BFS_E_REMOTE_VALUE, BFS_E_REMOTE_AUTH) or returns a payload inside the value
 * whose header matches and whose bytes hash to the header's checksum; the check with a
 * key (remote_key=) refuses it (no input can carry a tag of a key it does not know); then
 * a valid value, plain and authenticated, is built from the same payload and must pass,
 * and with one byte flipped (chosen by the input) must not.
 * Seeds: tests/fuzz/seeds/remote/.
 */
#include "engine/remote/remote.h"
#include "base/endian.h"
#include "base/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_remote: %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);  \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void url(const uint8_t *d, size_t n)
{
    char *s = malloc(n + 1);
    CHECK(s);
    memcpy(s, d, n);
    s[n] = '\0';
    bfs_remote_url u;
    char err[256] = "";
    int rc = bfs_remote_parse_url(s, &u, err, sizeof err);
    if (rc) {
        CHECK(rc == -EINVAL);
        CHECK(err[0] && memchr(err, '\0', sizeof err));
    } else {
        CHECK(memchr(u.host, '\0', sizeof u.host) && u.host[0]);
        CHECK(memchr(u.user, '\0', sizeof u.user) && memchr(u.pass, '\0', sizeof u.pass));
        CHECK(u.port >= 1 && u.port <= 65535 && u.db >= 0);
        char text[700];
        bfs_remote_url_text(&u, text, sizeof text);
        bfs_remote_url v;
        /* written back (password masked) it parses to the same place, unless the user
         * needs escapes the text does not write */
        if (!strpbrk(u.user, ":@/%?#") && bfs_remote_parse_url(text, &v, err, sizeof err) == 0) {
            CHECK(!strcmp(v.host, u.host) && v.port == u.port && v.db == u.db);
            CHECK(!strcmp(v.user, u.user));
        }
    }
    free(s);
}

static void value(const uint8_t *d, size_t n)
{
    if (n < 8)
        return;
    uint64_t want = bfs_ld64(d) % 4096, fp = 0x9e3779b97f4a7c15ull;
    d += 8, n -= 8;
    uint64_t epoch = n >= 24 ? bfs_ld64(d + 16) : 0, k = n >= 32 ? bfs_ld64(d + 24) : 0;
    const uint8_t *p = NULL;
    /* a failure stored by a worker: a negative code and a bounded, printable message */
    char msg[64];
    int failed = bfs_remote_error_check(d, n, fp, epoch, k, msg, sizeof msg);
    CHECK(failed <= 0);
    if (failed)
        for (size_t i = 0; msg[i]; i++)
            CHECK((unsigned char)msg[i] >= 0x20 && msg[i] != 0x7f && i < sizeof msg);
    uint8_t ev[BFS_REMOTE_HDR + BFS_REMOTE_ERR_MAX];
    char text[BFS_REMOTE_ERR_MAX + 1];
    size_t tn = n < BFS_REMOTE_ERR_MAX ? n : BFS_REMOTE_ERR_MAX;
    for (size_t i = 0; i < tn; i++)
        text[i] = d[i] ? (char)d[i] : ' ';
    text[tn] = '\0';
    size_t en = bfs_remote_error_value(ev, fp, epoch, k, -5, text);
    CHECK(bfs_remote_error_check(ev, en, fp, epoch, k, msg, sizeof msg) == -5);
    int rc = bfs_remote_value_check(d, n, NULL, fp, epoch, k, want, &p);
    if (rc) {
        CHECK(rc == BFS_E_REMOTE_VALUE || rc == BFS_E_REMOTE_AUTH);
    } else {
        CHECK(p == d + BFS_REMOTE_HDR && n == BFS_REMOTE_HDR + want);
    }
    bfs_remote_auth key = {.on = 1};
    memset(key.key, 0x5c, sizeof key.key);
    memset(key.id, 0x36, sizeof key.id);
    rc = bfs_remote_value_check(d, n, &key, fp, epoch, k, want, &p);
    CHECK(rc == BFS_E_REMOTE_VALUE || rc == BFS_E_REMOTE_AUTH);
    /* a value built from these bytes passes; any byte flipped fails */
    uint64_t size = n < want ? n : want;
    uint8_t *v = malloc(BFS_REMOTE_HDR_MAX + size + 1);
    CHECK(v);
    size_t at = n ? d[0] * 251u + (n > 1 ? d[1] : 0) : 0;
    for (int keyed = 0; keyed < 2; keyed++) {
        const bfs_remote_auth *a = keyed ? &key : NULL;
        size_t hl = bfs_remote_hdr_len(a);
        memcpy(v + hl, d, size);
        CHECK(bfs_remote_value_header(v, a, fp, epoch, k, v + hl, size) == (int)hl);
        CHECK(bfs_remote_value_check(v, hl + size, a, fp, epoch, k, size, &p) == 0 && p == v + hl);
        v[at % (hl + size)] ^= 0x01;
        rc = bfs_remote_value_check(v, hl + size, a, fp, epoch, k, size, &p);
        CHECK(rc == BFS_E_REMOTE_VALUE || rc == BFS_E_REMOTE_AUTH);
    }
    free(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!size)
        return 0;
    if (data[0] & 1)
        value(data + 1, size - 1);
    else
        url(data + 1, size - 1);
    return 0;
}
