/*
 * trainer.c — the trainer's side of the Redis transport (see remote.h): requests and
 * their cancellation, batch values read from the socket straight into their buffer or
 * file, the count of live workers, a group's claims. On the connection and commands of
 * remote.c (redis_internal.h).
 */
#include "engine/remote/remote.h"
#include "engine/remote/remote_internal.h"
#include "engine/remote/redis_internal.h"
#include "base/endian.h"
#include "base/err.h"
#include "base/hash.h"
#include "base/io.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the trainer's side ---------------------------------------------------------------- */

int bfs_remote_request(bfs_remote *r, uint64_t epoch, uint64_t k, int ttl_ms, char id[64])
{
    char q[96], ttl[24], e[24], kk[24], jobs[64];
    id[0] = '\0';
    bfs_rconn_key(r, q, sizeof q, "q:%" PRIu64 ":%" PRIu64, epoch, k);
    snprintf(ttl, sizeof ttl, "%d", ttl_ms > 0 ? ttl_ms : 1);
    const char *set[6] = {"SET", q, "1", "NX", "PX", ttl};
    redisReply *rep = bfs_rconn_run(r, 6, set, NULL);
    if (!rep)
        return bfs_rconn_failure(r);
    int mine = rep->type == REDIS_REPLY_STATUS;
    freeReplyObject(rep);
    if (!mine) {
        /* queued already, unless what is there is no marker of ours: SET NX does not look
         * at a key's type, and a key of another type there (written by hand, or a bug)
         * would stop the batch from being queued for good */
        const char *type[2] = {"TYPE", q};
        if (!(rep = bfs_rconn_run(r, 2, type, NULL)))
            return bfs_rconn_failure(r);
        int marker = rep->type == REDIS_REPLY_STATUS &&
                     (!strcmp(rep->str, "string") || !strcmp(rep->str, "none"));
        char what[32];
        snprintf(what, sizeof what, "%.31s", rep->type == REDIS_REPLY_STATUS ? rep->str : "?");
        freeReplyObject(rep);
        if (marker)
            return 0;
        const char *del[2] = {"DEL", q};
        bfs_rconn_simple(r, 2, del, NULL);
        snprintf(r->error, sizeof r->error, "%s held a %s, not a request marker (deleted)", q,
                 what);
        return BFS_E_REMOTE_REFUSED;
    }
    bfs_rconn_key(r, jobs, sizeof jobs, "jobs");
    snprintf(e, sizeof e, "%" PRIu64, epoch);
    snprintf(kk, sizeof kk, "%" PRIu64, k);
    /* w: how long the asker waits; a worker skips the job once that has passed (the asker
     * computed the batch itself, or asked again with a new job) */
    const char *av[12] = {"XADD", jobs, "MAXLEN", "~", "100000", "*", "e", e, "k", kk, "w", ttl};
    if (!(rep = bfs_rconn_run(r, 12, av, NULL)))
        return bfs_rconn_failure(r);
    if (rep->type == REDIS_REPLY_STRING && rep->len < 64) {
        memcpy(id, rep->str, rep->len);
        id[rep->len] = '\0';
    }
    freeReplyObject(rep);
    return 1;
}

int bfs_remote_cancel(bfs_remote *r, const char *id)
{
    if (!id[0])
        return 0;
    char jobs[64];
    bfs_rconn_key(r, jobs, sizeof jobs, "jobs");
    const char *del[3] = {"XDEL", jobs, id};
    return bfs_rconn_simple(r, 3, del, NULL);
}

/* ---- values straight into their buffer ------------------------------------------------
 * A 38 MB GET through hiredis is copied three times before it reaches the batch: into the
 * reader's growing buffer (reallocated as it grows), into the reply object, and out of it.
 * fetch_direct sends the command itself and reads the reply's header line, then the
 * value's bytes straight into dst (hashed as they come, while in cache): one copy, from
 * the kernel. Used when hiredis holds nothing unread (always, between synchronous
 * commands); any I/O error drops the connection, so the next command starts clean. */

#define BOUNCE (1u << 20) /* a value is read in pieces of this size, each hashed while hot */

/* Read exactly n bytes (the socket has hiredis's reply timeout). 0 or -1 (r->error). */
static int sock_read(bfs_remote *r, void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n) {
        ssize_t got = read(r->c->fd, p, n);
        if (got > 0) {
            p += got, n -= (size_t)got;
            continue;
        }
        if (got < 0 && errno == EINTR)
            continue;
        snprintf(r->error, sizeof r->error, "GET from %s:%d: %s", r->url.host, r->url.port,
                 got == 0 ? "connection closed" : strerror(errno));
        return -1;
    }
    return 0;
}

/* Read and forget n bytes of a reply. 0, or -1 with the connection dropped. */
static int skip(bfs_remote *r, uint64_t n)
{
    while (n) {
        uint8_t scratch[65536];
        size_t c = n < sizeof scratch ? (size_t)n : sizeof scratch;
        if (sock_read(r, scratch, c)) {
            bfs_rconn_drop(r);
            return -1;
        }
        n -= c;
    }
    return 0;
}

/* The reply's first line without its CRLF. 0 or -1. */
static int sock_line(bfs_remote *r, char *line, size_t cap)
{
    size_t n = 0;
    for (;;) {
        char ch;
        if (sock_read(r, &ch, 1))
            return -1;
        if (ch == '\n' && n && line[n - 1] == '\r') {
            line[n - 1] = '\0';
            return 0;
        }
        if (n + 1 >= cap) {
            snprintf(r->error, sizeof r->error, "GET: reply line too long");
            return -1;
        }
        line[n++] = ch;
    }
}

static const uint8_t DECLINE_MAGIC[8] = {'B', 'F', 'S', 'R', 'E', 'R', 'R', '1'};

/* 1 (dst holds a checked batch), 0 (no value), BFS_E_REMOTE_VALUE or BFS_E_REMOTE_AUTH (a
 * wrong value, read to its end; *foreign: made with another key or none, not forged),
 * BFS_E_REMOTE_DECLINED (a worker declined it: r->error has its message),
 * BFS_E_REMOTE_REFUSED (an error reply: a key of another type), BFS_E_REMOTE (the
 * connection is dropped, or the file could not be written), -ENOMEM. */
static int fetch_direct(bfs_remote *r, const char *key_, uint64_t epoch, uint64_t k, uint8_t *dst,
                        int fd, uint64_t size, int *foreign)
{
    if (!dst && !r->bounce && !(r->bounce = malloc(BOUNCE))) {
        snprintf(r->error, sizeof r->error, "GET: out of memory");
        return BFS_E_REMOTE;
    }
    const char *av[2] = {"GET", key_};
    char *cmd = NULL;
    int len = redisFormatCommandArgv(&cmd, 2, av, NULL);
    if (len < 0) {
        snprintf(r->error, sizeof r->error, "GET: out of memory");
        return BFS_E_REMOTE;
    }
    size_t off = 0;
    while (off < (size_t)len) {
        ssize_t w = write(r->c->fd, cmd + off, (size_t)len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            snprintf(r->error, sizeof r->error, "GET to %s:%d: %s", r->url.host, r->url.port,
                     strerror(errno));
            free(cmd);
            bfs_rconn_drop(r);
            return BFS_E_REMOTE;
        }
        off += (size_t)w;
    }
    free(cmd);
    char line[256];
    if (sock_line(r, line, sizeof line)) {
        bfs_rconn_drop(r);
        return BFS_E_REMOTE;
    }
    if (line[0] == '-') { /* WRONGTYPE (a list at the key): Redis is fine, the key is not */
        snprintf(r->error, sizeof r->error, "GET %s: %s", key_, line + 1);
        return BFS_E_REMOTE_REFUSED;
    }
    uint64_t n;
    if (line[0] != '$' || (strcmp(line, "$-1") &&
                           bfs_remote_decimal(line + 1, strlen(line + 1), UINT64_MAX / 2, &n))) {
        snprintf(r->error, sizeof r->error, "GET: unexpected reply '%.40s'", line);
        bfs_rconn_drop(r);
        return BFS_E_REMOTE;
    }
    if (!strcmp(line, "$-1"))
        return 0;
    uint8_t hdr[BFS_REMOTE_HDR_MAX];
    size_t hl = n >= size ? (size_t)(n - size) : 0;
    int batch_sized = n >= size && (hl == BFS_REMOTE_HDR || hl == BFS_REMOTE_HDR_AUTH);
    size_t head = n < 8 ? (size_t)n : 8;
    if (sock_read(r, hdr, head)) {
        bfs_rconn_drop(r);
        return BFS_E_REMOTE;
    }
    uint64_t left = n - head + 2; /* the rest of the value and its CRLF */
    if (n >= BFS_REMOTE_HDR && n <= BFS_REMOTE_HDR + BFS_REMOTE_ERR_MAX &&
        !memcmp(hdr, DECLINE_MAGIC, 8)) {
        uint8_t v[BFS_REMOTE_HDR + BFS_REMOTE_ERR_MAX + 2];
        memcpy(v, hdr, 8);
        if (sock_read(r, v + 8, (size_t)left)) {
            bfs_rconn_drop(r);
            return BFS_E_REMOTE;
        }
        char msg[BFS_REMOTE_ERR_MAX + 1];
        if (!bfs_remote_error_check(v, (size_t)n, r->fp, epoch, k, msg, sizeof msg))
            return BFS_E_REMOTE_VALUE;
        snprintf(r->error, sizeof r->error, "%s", msg);
        return BFS_E_REMOTE_DECLINED;
    }
    if (!batch_sized) { /* of no size a value of this batch has */
        if (skip(r, left))
            return BFS_E_REMOTE;
        return BFS_E_REMOTE_VALUE;
    }
    if (sock_read(r, hdr + 8, hl - 8)) {
        bfs_rconn_drop(r);
        return BFS_E_REMOTE;
    }
    left -= hl - 8;
    bfs_remote_check chk;
    int rc = bfs_remote_check_begin(&chk, &r->url.auth, hdr, hl, r->fp, epoch, k, size);
    if (rc) {
        *foreign = rc == BFS_E_REMOTE_AUTH;
        if (skip(r, left))
            return BFS_E_REMOTE;
        return rc == -ENOMEM ? BFS_E_REMOTE : rc;
    }
    for (uint64_t got = 0; got < size;) {
        size_t chunk = size - got < BOUNCE ? (size_t)(size - got) : BOUNCE;
        uint8_t *to = dst ? dst + got : r->bounce;
        if (sock_read(r, to, chunk)) {
            bfs_remote_check_abort(&chk);
            bfs_rconn_drop(r);
            return BFS_E_REMOTE;
        }
        bfs_remote_check_update(&chk, to, chunk);
        left -= chunk;
        if (!dst) {
            int w = bfs_pwrite_all(fd, to, chunk, got);
            if (w) { /* the file, not the connection: read the rest, then say so */
                snprintf(r->error, sizeof r->error, "writing the batch file: %s", strerror(-w));
                bfs_remote_check_abort(&chk);
                skip(r, left);
                return BFS_E_REMOTE;
            }
        }
        got += chunk;
    }
    if (skip(r, left)) { /* the CRLF */
        bfs_remote_check_abort(&chk);
        return BFS_E_REMOTE;
    }
    rc = bfs_remote_check_end(&chk);
    if (rc == -EIO) {
        snprintf(r->error, sizeof r->error, "GET: checking the value failed (OpenSSL)");
        return BFS_E_REMOTE;
    }
    return rc ? rc : 1;
}

static int fetch_any(bfs_remote *r, uint64_t epoch, uint64_t k, uint8_t *dst, int fd, uint64_t size)
{
    char b[96];
    bfs_remote_key(b, sizeof b, r->fp, epoch, k);
    int fresh = !r->c, foreign = 0;
    if (!r->c && bfs_rconn_open(r))
        return BFS_E_REMOTE;
    int rc;
    if (r->c->reader->pos == r->c->reader->len && (!r->c->obuf || !r->c->obuf[0])) {
        rc = fetch_direct(r, b, epoch, k, dst, fd, size, &foreign);
        if (rc == BFS_E_REMOTE && !fresh && !r->c) { /* a closed connection: once more */
            if (bfs_rconn_open(r))
                return BFS_E_REMOTE;
            rc = fetch_direct(r, b, epoch, k, dst, fd, size, &foreign);
        }
    } else { /* (never seen) hiredis holds unread bytes: its own way */
        const char *av[2] = {"GET", b};
        redisReply *rep = bfs_rconn_run(r, 2, av, NULL);
        if (!rep)
            return bfs_rconn_failure(r);
        const uint8_t *p = NULL;
        char msg[BFS_REMOTE_ERR_MAX + 1];
        int declined = rep->type == REDIS_REPLY_STRING &&
                       bfs_remote_error_check((const uint8_t *)rep->str, rep->len, r->fp, epoch, k,
                                              msg, sizeof msg);
        rc = rep->type != REDIS_REPLY_STRING
                 ? 0
                 : bfs_remote_value_check((const uint8_t *)rep->str, rep->len, &r->url.auth, r->fp,
                                          epoch, k, size, &p);
        if (declined) {
            snprintf(r->error, sizeof r->error, "%s", msg);
            rc = BFS_E_REMOTE_DECLINED;
        } else if (rc == 0 && p) {
            rc = 1;
            if (dst)
                memcpy(dst, p, size);
            else if (bfs_pwrite_all(fd, p, size, 0))
                rc = BFS_E_REMOTE;
        } else if (rc < 0 && rc != BFS_E_REMOTE_VALUE && rc != BFS_E_REMOTE_AUTH) {
            rc = BFS_E_REMOTE;
        }
        freeReplyObject(rep);
    }
    if (rc == BFS_E_REMOTE_AUTH && !r->url.auth.on) {
        /* made with a key, which this mount lacks: the mounts that have it can use it, so
         * it stays */
        snprintf(r->error, sizeof r->error,
                 "%s: authenticated with a remote_key, and this mount has none: kept for the "
                 "mounts that have it",
                 b);
        return rc;
    }
    if (rc == BFS_E_REMOTE_VALUE || rc == BFS_E_REMOTE_AUTH || rc == BFS_E_REMOTE_REFUSED) {
        /* wrong bytes, a forgery or a key of another type: out of the way, so that a worker
         * stores the batch again. A mount with a key deletes values made without it or with
         * another one too: in a pipeline whose workers have the key such a value is forged
         * (or a misconfigured worker's, which the log says), and if kept it would stand in
         * the way of the batch for good (a value may be stored without a TTL) */
        char why[600];
        snprintf(why, sizeof why, "%.599s",
                 rc == BFS_E_REMOTE_REFUSED ? r->error
                 : foreign ? "made without remote_key= or with another key (remote_key= must "
                             "be the same file on the workers and mounts of a pipeline), or "
                             "forged"
                           : bfs_strerror(rc));
        snprintf(r->error, sizeof r->error, "%s: %s (deleted)", b, why);
        char q[96];
        bfs_rconn_key(r, q, sizeof q, "q:%" PRIu64 ":%" PRIu64, epoch, k);
        const char *del[3] = {"DEL", b, q};
        bfs_rconn_simple(r, 3, del, NULL);
    }
    return rc;
}

int bfs_remote_fetch(bfs_remote *r, uint64_t epoch, uint64_t k, uint8_t *dst, uint64_t size)
{
    return fetch_any(r, epoch, k, dst, -1, size);
}

int bfs_remote_fetch_fd(bfs_remote *r, uint64_t epoch, uint64_t k, int fd, uint64_t size)
{
    return fetch_any(r, epoch, k, NULL, fd, size);
}

int bfs_remote_workers(bfs_remote *r, int alive_ms)
{
    uint64_t now;
    if (bfs_rconn_ms(r, &now))
        return BFS_E_REMOTE;
    char w[64], min[24];
    bfs_rconn_key(r, w, sizeof w, "workers");
    snprintf(min, sizeof min, "%" PRIu64, now > (uint64_t)alive_ms ? now - (uint64_t)alive_ms : 0);
    const char *av[4] = {"ZCOUNT", w, min, "+inf"};
    redisReply *rep = bfs_rconn_run(r, 4, av, NULL);
    if (!rep)
        return BFS_E_REMOTE;
    int n = rep->type == REDIS_REPLY_INTEGER ? (int)rep->integer : 0;
    freeReplyObject(rep);
    return n;
}

int bfs_remote_claim(bfs_remote *r, const char *group, uint64_t epoch, uint64_t *k)
{
    char g[256];
    bfs_rconn_key(r, g, sizeof g, "g:%s:%" PRIu64, group, epoch);
    const char *av[2] = {"INCR", g};
    redisReply *rep = bfs_rconn_run(r, 2, av, NULL);
    if (!rep)
        return BFS_E_REMOTE;
    long long n = rep->type == REDIS_REPLY_INTEGER ? rep->integer : 0;
    freeReplyObject(rep);
    if (n < 1) {
        snprintf(r->error, sizeof r->error, "INCR %s: unexpected reply", g);
        return BFS_E_REMOTE;
    }
    if (n == 1) { /* counters of old epochs go away on their own (a week) */
        const char *ex[3] = {"EXPIRE", g, "604800"};
        bfs_rconn_simple(r, 3, ex, NULL);
    }
    *k = (uint64_t)n - 1;
    return 0;
}
