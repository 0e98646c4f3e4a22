/*
 * remote.c — the Redis transport (see remote.h) on hiredis's synchronous API: the
 * connection and its commands (redis_internal.h), the worker's side, announcements and
 * a group's claim counters. The trainer's side (requests, values fetched straight into
 * their buffer, claims) is trainer.c.
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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* ---- connections ----------------------------------------------------------------------- */

static struct timeval ms_tv(int ms)
{
    return (struct timeval){.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
}

void bfs_rconn_drop(bfs_remote *r)
{
    if (r->c)
        redisFree(r->c);
    r->c = NULL;
}

/* r->error = "WHAT: " + r->error (WHAT is formatted) */
static void wrap_error(bfs_remote *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void wrap_error(bfs_remote *r, const char *fmt, ...)
{
    char what[160], why[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(why, sizeof why, "%.319s", r->error);
    snprintf(r->error, sizeof r->error, "%.159s: %.319s", what, why);
}

static int open_conn_once(bfs_remote *r);

int bfs_rconn_open(bfs_remote *r)
{
    r->opening = 1;
    int rc = open_conn_once(r);
    r->opening = 0;
    return rc;
}

static int open_conn_once(bfs_remote *r)
{
    bfs_rconn_drop(r);
    redisContext *c = redisConnectWithTimeout(r->url.host, r->url.port, ms_tv(r->timeout_ms));
    if (!c) {
        snprintf(r->error, sizeof r->error, "connecting to %s:%d: out of memory", r->url.host,
                 r->url.port);
        return -ENOMEM;
    }
    if (c->err) {
        snprintf(r->error, sizeof r->error, "connecting to %s:%d: %s", r->url.host, r->url.port,
                 c->errstr);
        redisFree(c);
        return BFS_E_REMOTE;
    }
    redisSetTimeout(c, ms_tv(r->timeout_ms));
    r->c = c;
    redisReply *rep;
    char db[16];
    if (r->url.pass[0]) {
        const char *av[3] = {"AUTH", r->url.user, r->url.pass};
        int ac = r->url.user[0] ? 3 : 2;
        if (!r->url.user[0])
            av[1] = r->url.pass;
        if (!(rep = bfs_rconn_run(r, ac, av, NULL))) {
            wrap_error(r, "AUTH%s%.64s at %.64s:%d refused", r->url.user[0] ? " as " : "",
                       r->url.user, r->url.host, r->url.port);
            bfs_rconn_drop(r);
            return BFS_E_REMOTE;
        }
        freeReplyObject(rep);
    }
    if (r->url.db) {
        snprintf(db, sizeof db, "%d", r->url.db);
        const char *av[2] = {"SELECT", db};
        if (!(rep = bfs_rconn_run(r, 2, av, NULL))) {
            wrap_error(r, "SELECT %d refused", r->url.db);
            bfs_rconn_drop(r);
            return BFS_E_REMOTE;
        }
        freeReplyObject(rep);
    }
    if (r->subscribed) {
        char done[64];
        snprintf(done, sizeof done, "bfs:%s:done", r->tag);
        const char *av[2] = {"SUBSCRIBE", done};
        if (!(rep = bfs_rconn_run(r, 2, av, NULL))) {
            wrap_error(r, "SUBSCRIBE refused");
            bfs_rconn_drop(r);
            return BFS_E_REMOTE;
        }
        freeReplyObject(rep);
        return 0;
    }
    const char *ping[1] = {"PING"};
    if (!(rep = bfs_rconn_run(r, 1, ping, NULL))) { /* (run's message names PING and the server) */
        bfs_rconn_drop(r);
        return BFS_E_REMOTE;
    }
    freeReplyObject(rep);
    return 0;
}

/* A command's reply, or NULL with r->error set (an ERROR reply is freed and NULL too). An
 * I/O error drops the connection: the next command reconnects. */
redisReply *bfs_rconn_run(bfs_remote *r, int argc, const char **argv, const size_t *lens)
{
    int fresh = !r->c || r->opening;
    r->refused = 0;
    if (!r->c && bfs_rconn_open(r))
        return NULL;
    redisReply *rep = redisCommandArgv(r->c, argc, argv, lens);
    /* A connection that the server closed since its last use (a Redis restart): the
     * command did not run; connect again and run it once more. */
    if (!rep && !fresh &&
        (r->c->err == REDIS_ERR_EOF ||
         (r->c->err == REDIS_ERR_IO && (errno == EPIPE || errno == ECONNRESET)))) {
        bfs_rconn_drop(r);
        if (bfs_rconn_open(r))
            return NULL;
        rep = redisCommandArgv(r->c, argc, argv, lens);
    }
    if (!rep) {
        snprintf(r->error, sizeof r->error, "%s to %s:%d: %s", argv[0], r->url.host, r->url.port,
                 r->c->errstr[0] ? r->c->errstr : "connection lost");
        bfs_rconn_drop(r);
        return NULL;
    }
    if (rep->type == REDIS_REPLY_ERROR) {
        snprintf(r->error, sizeof r->error, "%s: %.*s", argv[0], (int)rep->len, rep->str);
        freeReplyObject(rep);
        r->refused = 1;
        return NULL;
    }
    return rep;
}

/* The code of a command that got no reply from run: Redis refused it (an error reply: a key
 * of another type, maxmemory, an ACL) or the connection failed. */
int bfs_rconn_failure(const bfs_remote *r)
{
    return r->refused ? BFS_E_REMOTE_REFUSED : BFS_E_REMOTE;
}

int bfs_remote_connect(const bfs_remote_url *u, uint64_t fp, int timeout_ms, bfs_remote **out,
                       char *err, size_t errlen)
{
    *out = NULL;
    bfs_remote *r = calloc(1, sizeof *r);
    if (!r)
        return bfs_errf(-ENOMEM, err, errlen, "remote: out of memory");
    r->url = *u;
    r->fp = fp;
    r->timeout_ms = timeout_ms > 0 ? timeout_ms : 1000;
    snprintf(r->tag, sizeof r->tag, "{%016" PRIx64 "}", fp);
    int rc = bfs_rconn_open(r);
    if (rc) {
        char text[600];
        bfs_remote_url_text(u, text, sizeof text);
        bfs_errf(rc, err, errlen, "remote=%s: %s", text, r->error);
        free(r);
        return rc;
    }
    *out = r;
    return 0;
}

void bfs_remote_close(bfs_remote *r)
{
    if (!r)
        return;
    bfs_rconn_drop(r);
    free(r->bounce);
    free(r);
}

const char *bfs_remote_error(const bfs_remote *r)
{
    return r->error;
}

/* "bfs:{FP}:" + suffix */
void bfs_rconn_key(const bfs_remote *r, char *buf, size_t cap, const char *fmt, ...)
{
    int n = snprintf(buf, cap, "bfs:%s:", r->tag);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, cap - (size_t)n, fmt, ap);
    va_end(ap);
}

/* Run a command whose reply only matters as success. 0 or BFS_E_REMOTE. */
int bfs_rconn_simple(bfs_remote *r, int argc, const char **argv, const size_t *lens)
{
    redisReply *rep = bfs_rconn_run(r, argc, argv, lens);
    if (!rep)
        return BFS_E_REMOTE;
    freeReplyObject(rep);
    return 0;
}

int bfs_remote_describe(bfs_remote *r, const char *pipeline_text)
{
    char fp[20];
    snprintf(fp, sizeof fp, "%016" PRIx64, r->fp);
    const char *av[4] = {"HSET", "bfs:pipelines", fp, pipeline_text};
    return bfs_rconn_simple(r, 4, av, NULL);
}

int bfs_remote_pipeline_text(bfs_remote *r, uint64_t fp, char *buf, size_t cap)
{
    char f[20];
    snprintf(f, sizeof f, "%016" PRIx64, fp);
    const char *av[3] = {"HGET", "bfs:pipelines", f};
    redisReply *rep = bfs_rconn_run(r, 3, av, NULL);
    if (!rep)
        return BFS_E_REMOTE;
    snprintf(buf, cap, "%.*s", rep->type == REDIS_REPLY_STRING ? (int)rep->len : 0,
             rep->type == REDIS_REPLY_STRING ? rep->str : "");
    freeReplyObject(rep);
    return 0;
}

/* Redis's clock in ms (TIME), so that heartbeats of hosts with other clocks compare. */
int bfs_rconn_ms(bfs_remote *r, uint64_t *ms)
{
    const char *av[1] = {"TIME"};
    redisReply *rep = bfs_rconn_run(r, 1, av, NULL);
    if (!rep)
        return BFS_E_REMOTE;
    int ok = rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
             rep->element[0]->type == REDIS_REPLY_STRING &&
             rep->element[1]->type == REDIS_REPLY_STRING;
    if (ok)
        *ms = strtoull(rep->element[0]->str, NULL, 10) * 1000 +
              strtoull(rep->element[1]->str, NULL, 10) / 1000;
    freeReplyObject(rep);
    if (!ok) {
        snprintf(r->error, sizeof r->error, "TIME: unexpected reply");
        return BFS_E_REMOTE;
    }
    return 0;
}

/* ---- the worker's side ----------------------------------------------------------------- */

/* Fill job from a stream entry [id, [field, value, ...]]. -1 when malformed. */
static int parse_entry(const redisReply *e, bfs_remote_job *job)
{
    if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 ||
        e->element[0]->type != REDIS_REPLY_STRING || e->element[0]->len >= sizeof job->id)
        return -1;
    memcpy(job->id, e->element[0]->str, e->element[0]->len);
    job->id[e->element[0]->len] = '\0';
    const redisReply *f = e->element[1];
    int have = 0;
    if (f->type != REDIS_REPLY_ARRAY)
        return -2;
    for (size_t i = 0; i + 1 < f->elements; i += 2) {
        const redisReply *n = f->element[i], *v = f->element[i + 1];
        if (n->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING || n->len != 1)
            return -2;
        uint64_t x;
        if (bfs_remote_decimal(v->str, v->len, UINT64_MAX, &x))
            return -2;
        if (n->str[0] == 'e')
            job->epoch = x, have |= 1;
        else if (n->str[0] == 'k')
            job->k = x, have |= 2;
        else if (n->str[0] == 'w')
            job->wait_ms = x;
    }
    /* the entry's ID is "MS-SEQ", MS the time Redis added it (its own clock) */
    job->queued_ms = strtoull(job->id, NULL, 10);
    return have == 3 ? 0 : -2;
}

static int ensure_group(bfs_remote *r, const char *jobs)
{
    const char *av[6] = {"XGROUP", "CREATE", jobs, "workers", "0", "MKSTREAM"};
    redisReply *rep = bfs_rconn_run(r, 6, av, NULL);
    if (rep) {
        freeReplyObject(rep);
        return 0;
    }
    return strstr(r->error, "BUSYGROUP") ? 0 : BFS_E_REMOTE;
}

/* A malformed entry: acknowledge and delete it so that no one takes it again. */
static void discard(bfs_remote *r, const char *jobs, const char *id)
{
    const char *ack[4] = {"XACK", jobs, "workers", id};
    const char *del[3] = {"XDEL", jobs, id};
    bfs_rconn_simple(r, 4, ack, NULL);
    bfs_rconn_simple(r, 3, del, NULL);
}

/* The first entry of a list of entries: 1 (job set), 0 (none), -1 after discarding a
 * malformed one (try again). */
static int first_entry(bfs_remote *r, const char *jobs, const redisReply *list, bfs_remote_job *job)
{
    for (size_t i = 0; list && list->type == REDIS_REPLY_ARRAY && i < list->elements; i++) {
        const redisReply *e = list->element[i];
        if (e->type == REDIS_REPLY_NIL)
            continue; /* deleted while pending */
        int rc = parse_entry(e, job);
        if (rc == 0)
            return 1;
        if (rc == -2) {
            discard(r, jobs, job->id);
            return -1;
        }
    }
    return 0;
}

/* Taken job: 1 to serve it, 0 when its asker has stopped waiting for it (its w passed on
 * Redis's clock: the asker computed the batch itself or queued a new job, or is gone), so
 * it is acknowledged, deleted and counted in job->skipped; -1 on a failed TIME (served). */
static int stale(bfs_remote *r, const char *jobs, bfs_remote_job *job)
{
    uint64_t now;
    if (!job->wait_ms || !job->queued_ms)
        return 1; /* (a job of a mount that says nothing of its wait) */
    if (bfs_rconn_ms(r, &now))
        return 1;
    if (now <= job->queued_ms + job->wait_ms)
        return 1;
    discard(r, jobs, job->id);
    job->skipped++;
    return 0;
}

int bfs_remote_take(bfs_remote *r, const char *name, int claim_ms, int block_ms,
                    bfs_remote_job *job)
{
    char jobs[64], idle[24], block[24];
    bfs_rconn_key(r, jobs, sizeof jobs, "jobs");
    snprintf(idle, sizeof idle, "%d", claim_ms > 0 ? claim_ms : 1);
    snprintf(block, sizeof block, "%d", block_ms > 0 ? block_ms : 1);
    memset(job, 0, sizeof *job);
    for (int tries = 0; tries < 64; tries++) {
        unsigned skipped = job->skipped;
        memset(job, 0, sizeof *job);
        job->skipped = skipped;
        const char *av[8] = {"XAUTOCLAIM", jobs, "workers", name, idle, "0-0", "COUNT", "1"};
        redisReply *rep = bfs_rconn_run(r, 8, av, NULL);
        if (!rep) {
            if (!strstr(r->error, "NOGROUP") || ensure_group(r, jobs))
                return BFS_E_REMOTE;
            continue;
        }
        int got = rep->type == REDIS_REPLY_ARRAY && rep->elements >= 2
                      ? first_entry(r, jobs, rep->element[1], job)
                      : 0;
        freeReplyObject(rep);
        if (got > 0 && (got = stale(r, jobs, job)) == 0)
            continue; /* (skipped; look again) */
        if (got < 0)
            continue;
        if (got) {
            job->reclaimed = 1;
            return 1;
        }
        /* nothing to reclaim: wait for a new job, the socket's timeout beyond the block */
        const char *rg[11] = {"XREADGROUP", "GROUP", "workers", name, "COUNT", "1",
                              "BLOCK",      block,   "STREAMS", jobs, ">"};
        if (r->c)
            redisSetTimeout(r->c, ms_tv(block_ms + r->timeout_ms));
        rep = bfs_rconn_run(r, 11, rg, NULL);
        if (r->c)
            redisSetTimeout(r->c, ms_tv(r->timeout_ms));
        if (!rep) {
            if (!strstr(r->error, "NOGROUP") || ensure_group(r, jobs))
                return BFS_E_REMOTE;
            continue;
        }
        got = 0;
        if (rep->type == REDIS_REPLY_ARRAY && rep->elements >= 1) {
            const redisReply *s = rep->element[0]; /* [stream, [entries]] */
            if (s->type == REDIS_REPLY_ARRAY && s->elements == 2)
                got = first_entry(r, jobs, s->element[1], job);
        }
        freeReplyObject(rep);
        if (got > 0 && (got = stale(r, jobs, job)) == 0)
            continue;
        if (got < 0)
            continue;
        return got;
    }
    return 0;
}

int bfs_remote_stored(bfs_remote *r, uint64_t epoch, uint64_t k)
{
    char b[96];
    bfs_remote_key(b, sizeof b, r->fp, epoch, k);
    /* a string: a value (checked by the mounts that fetch it); a key of another type (a
     * list written by hand) is no value, and is overwritten by the worker's SET */
    const char *av[2] = {"TYPE", b};
    redisReply *rep = bfs_rconn_run(r, 2, av, NULL);
    if (!rep)
        return BFS_E_REMOTE;
    int n = rep->type == REDIS_REPLY_STATUS && !strcmp(rep->str, "string");
    freeReplyObject(rep);
    return n;
}

/* Send the iovecs' bytes on socket fd, all of them (a blocking socket with a send timeout
 * may take part of them); MSG_NOSIGNAL: a closed connection is an error, not a SIGPIPE.
 * 0, or -1 with errno. */
static int send_all(int fd, struct iovec *iov, int n)
{
    while (n > 0) {
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (w == 0)
                errno = EPIPE;
            return -1;
        }
        size_t left = (size_t)w;
        while (n > 0 && left >= iov->iov_len)
            left -= iov->iov_len, iov++, n--;
        if (n > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return 0;
}

/* SET key (hdr + data) PX ttl, the value written from where it lies. Through hiredis a
 * 38 MB batch was copied twice before it left (into one buffer with its header, then into
 * hiredis's command), each copy into fresh pages: perf gave the two copies, their page
 * faults and zeroing 27% of a worker's CPU (batch=256, size=224). 0, BFS_E_REMOTE (the
 * connection is dropped) or BFS_E_REMOTE_REFUSED (an error reply: maxmemory, an ACL). */
static int set_direct(bfs_remote *r, const char *key, const uint8_t *hdr, size_t hl,
                      const uint8_t *data, uint64_t size, const char *ttl)
{
    char pre[160], post[64];
    int pl = snprintf(pre, sizeof pre, "*5\r\n$3\r\nSET\r\n$%zu\r\n%s\r\n$%" PRIu64 "\r\n",
                      strlen(key), key, (uint64_t)hl + size);
    int ql = snprintf(post, sizeof post, "\r\n$2\r\nPX\r\n$%zu\r\n%s\r\n", strlen(ttl), ttl);
    int fresh = !r->c;
    r->refused = 0;
    /* hiredis must hold nothing (always so between synchronous commands): a connection
     * that does is dropped, so that this command starts a clean one */
    if (r->c && (r->c->reader->pos != r->c->reader->len || (r->c->obuf && r->c->obuf[0])))
        bfs_rconn_drop(r);
    void *reply = NULL;
    for (int tries = 0;; tries++) {
        if (!r->c && bfs_rconn_open(r))
            return BFS_E_REMOTE;
        struct iovec iov[4] = {
            {pre, (size_t)pl}, {(void *)hdr, hl}, {(void *)data, (size_t)size}, {post, (size_t)ql}};
        int e = 0;
        if (send_all(r->c->fd, iov, 4))
            e = errno;
        else if (redisGetReply(r->c, &reply) != REDIS_OK || !reply)
            e = r->c->err == REDIS_ERR_EOF ? EPIPE : r->c->err == REDIS_ERR_IO ? errno : EPROTO;
        if (!e)
            break;
        char why[128];
        snprintf(why, sizeof why, "%s",
                 r->c->errstr[0] ? r->c->errstr
                 : e == EPIPE    ? "connection lost"
                                 : strerror(e));
        bfs_rconn_drop(r);
        /* a connection the server closed since its last use (a Redis restart): once more on
         * a new one (SET twice stores the same value) */
        if (!fresh && !tries && (e == EPIPE || e == ECONNRESET))
            continue;
        snprintf(r->error, sizeof r->error, "SET to %s:%d: %s", r->url.host, r->url.port, why);
        return BFS_E_REMOTE;
    }
    redisReply *rep = reply;
    int rc = 0;
    if (rep->type == REDIS_REPLY_ERROR) {
        snprintf(r->error, sizeof r->error, "SET: %.*s", (int)rep->len, rep->str);
        r->refused = 1;
        rc = BFS_E_REMOTE_REFUSED;
    }
    freeReplyObject(rep);
    return rc;
}

int bfs_remote_put(bfs_remote *r, uint64_t epoch, uint64_t k, const uint8_t *data, uint64_t size,
                   int ttl_ms)
{
    uint8_t hdr[BFS_REMOTE_HDR_MAX];
    int hl = bfs_remote_value_header(hdr, &r->url.auth, r->fp, epoch, k, data, size);
    if (hl != (int)bfs_remote_hdr_len(&r->url.auth)) {
        snprintf(r->error, sizeof r->error, "authenticating a batch failed (OpenSSL)");
        return -EIO;
    }
    char b[96], ttl[24], done[64], msg[48];
    bfs_remote_key(b, sizeof b, r->fp, epoch, k);
    snprintf(ttl, sizeof ttl, "%d", ttl_ms > 0 ? ttl_ms : 1);
    int rc = set_direct(r, b, hdr, (size_t)hl, data, size, ttl);
    if (rc)
        return BFS_E_REMOTE;
    /* the request marker has done its work: a request after the value is evicted or has
     * expired queues a job at once instead of waiting for the marker to expire */
    char q[96];
    bfs_rconn_key(r, q, sizeof q, "q:%" PRIu64 ":%" PRIu64, epoch, k);
    const char *del[2] = {"DEL", q};
    if ((rc = bfs_rconn_simple(r, 2, del, NULL)))
        return rc;
    bfs_rconn_key(r, done, sizeof done, "done");
    snprintf(msg, sizeof msg, "%" PRIu64 " %" PRIu64, epoch, k);
    const char *pub[3] = {"PUBLISH", done, msg};
    return bfs_rconn_simple(r, 3, pub, NULL);
}

int bfs_remote_decline(bfs_remote *r, uint64_t epoch, uint64_t k, int rc, const char *msg,
                       int ttl_ms)
{
    uint8_t v[BFS_REMOTE_HDR + BFS_REMOTE_ERR_MAX];
    size_t n = bfs_remote_error_value(v, r->fp, epoch, k, rc, msg);
    char b[96], ttl[24], q[96], done[64], m[48];
    bfs_remote_key(b, sizeof b, r->fp, epoch, k);
    snprintf(ttl, sizeof ttl, "%d", ttl_ms > 0 ? ttl_ms : 1);
    const char *av[5] = {"SET", b, (const char *)v, "PX", ttl};
    size_t lens[5] = {3, strlen(b), n, 2, strlen(ttl)};
    bfs_rconn_key(r, q, sizeof q, "q:%" PRIu64 ":%" PRIu64, epoch, k);
    const char *del[2] = {"DEL", q};
    bfs_rconn_key(r, done, sizeof done, "done");
    snprintf(m, sizeof m, "%" PRIu64 " %" PRIu64, epoch, k);
    const char *pub[3] = {"PUBLISH", done, m};
    int e = bfs_rconn_simple(r, 5, av, lens);
    if (!e)
        e = bfs_rconn_simple(r, 2, del, NULL);
    return e ? e : bfs_rconn_simple(r, 3, pub, NULL);
}

int bfs_remote_ack(bfs_remote *r, const bfs_remote_job *job)
{
    char jobs[64];
    bfs_rconn_key(r, jobs, sizeof jobs, "jobs");
    const char *ack[4] = {"XACK", jobs, "workers", job->id};
    const char *del[3] = {"XDEL", jobs, job->id};
    int rc = bfs_rconn_simple(r, 4, ack, NULL);
    return rc ? rc : bfs_rconn_simple(r, 3, del, NULL);
}

int bfs_remote_leave(bfs_remote *r, const char *name)
{
    char w[64];
    bfs_rconn_key(r, w, sizeof w, "workers");
    const char *av[3] = {"ZREM", w, name};
    return bfs_rconn_simple(r, 3, av, NULL);
}

int bfs_remote_heartbeat(bfs_remote *r, const char *name)
{
    uint64_t now;
    if (bfs_rconn_ms(r, &now))
        return BFS_E_REMOTE;
    char w[64], score[24], old[24];
    bfs_rconn_key(r, w, sizeof w, "workers");
    snprintf(score, sizeof score, "%" PRIu64, now);
    snprintf(old, sizeof old, "(%" PRIu64, now > 3600000 ? now - 3600000 : 0);
    const char *add[4] = {"ZADD", w, score, name};
    const char *trim[4] = {"ZREMRANGEBYSCORE", w, "-inf", old};
    int rc = bfs_rconn_simple(r, 4, add, NULL);
    return rc ? rc : bfs_rconn_simple(r, 4, trim, NULL);
}

/* Jobs queued and workers alive for pipeline fp (another than r's). */
static int other_pipeline(bfs_remote *r, uint64_t fp, uint64_t now, int alive_ms, long long *queued,
                          long long *alive)
{
    char jobs[64], w[64], min[24];
    snprintf(jobs, sizeof jobs, "bfs:{%016" PRIx64 "}:jobs", fp);
    snprintf(w, sizeof w, "bfs:{%016" PRIx64 "}:workers", fp);
    snprintf(min, sizeof min, "%" PRIu64, now > (uint64_t)alive_ms ? now - (uint64_t)alive_ms : 0);
    const char *xlen[2] = {"XLEN", jobs};
    const char *zc[4] = {"ZCOUNT", w, min, "+inf"};
    redisReply *a = bfs_rconn_run(r, 2, xlen, NULL);
    if (!a)
        return BFS_E_REMOTE;
    *queued = a->type == REDIS_REPLY_INTEGER ? a->integer : 0;
    freeReplyObject(a);
    redisReply *b = bfs_rconn_run(r, 4, zc, NULL);
    if (!b)
        return BFS_E_REMOTE;
    *alive = b->type == REDIS_REPLY_INTEGER ? b->integer : 0;
    freeReplyObject(b);
    return 0;
}

int bfs_remote_orphans(bfs_remote *r, int alive_ms,
                       void (*fn)(void *arg, uint64_t fp, long long queued), void *arg)
{
    uint64_t now;
    if (bfs_rconn_ms(r, &now))
        return BFS_E_REMOTE;
    const char *av[2] = {"HKEYS", "bfs:pipelines"};
    redisReply *rep = bfs_rconn_run(r, 2, av, NULL);
    if (!rep)
        return BFS_E_REMOTE;
    int n = 0, rc = 0;
    for (size_t i = 0; rep->type == REDIS_REPLY_ARRAY && i < rep->elements && !rc; i++) {
        const redisReply *e = rep->element[i];
        uint64_t fp;
        char hex[17];
        if (e->type != REDIS_REPLY_STRING || e->len != 16)
            continue;
        memcpy(hex, e->str, 16);
        hex[16] = '\0';
        char *end;
        fp = strtoull(hex, &end, 16);
        if (*end || fp == r->fp)
            continue;
        long long queued, alive;
        if ((rc = other_pipeline(r, fp, now, alive_ms, &queued, &alive)))
            break;
        if (queued > 0 && alive == 0) {
            fn(arg, fp, queued);
            n++;
        }
    }
    freeReplyObject(rep);
    return rc ? rc : n;
}

int bfs_remote_subscribe(bfs_remote *r)
{
    r->subscribed = 1;
    return bfs_rconn_open(r);
}

int bfs_remote_announced(bfs_remote *r, int timeout_ms, int wake_fd, uint64_t *epoch, uint64_t *k)
{
    if (!r->c && bfs_rconn_open(r))
        return BFS_E_REMOTE;
    for (;;) {
        void *v = NULL;
        if (redisGetReplyFromReader(r->c, &v) != REDIS_OK) {
            snprintf(r->error, sizeof r->error, "announcements: %s", r->c->errstr);
            bfs_rconn_drop(r);
            return BFS_E_REMOTE;
        }
        if (v) { /* ["message", channel, "E K"] */
            redisReply *m = v;
            int ok = m->type == REDIS_REPLY_ARRAY && m->elements == 3 &&
                     m->element[2]->type == REDIS_REPLY_STRING &&
                     sscanf(m->element[2]->str, "%" SCNu64 " %" SCNu64, epoch, k) == 2;
            freeReplyObject(m);
            if (ok)
                return 1;
            continue; /* a subscription confirmation, or junk */
        }
        struct pollfd p[2] = {{.fd = r->c->fd, .events = POLLIN},
                              {.fd = wake_fd, .events = POLLIN}};
        int n = poll(p, wake_fd >= 0 ? 2 : 1, timeout_ms);
        if (n == 0 || (n > 0 && !(p[0].revents & (POLLIN | POLLHUP | POLLERR))))
            return 0; /* timed out, or woken */
        if (n < 0 && errno == EINTR)
            return 0;
        if (n < 0 || redisBufferRead(r->c) != REDIS_OK) { /* (also EOF: a restart) */
            snprintf(r->error, sizeof r->error, "announcements: %s",
                     r->c->errstr[0] ? r->c->errstr : "connection lost");
            bfs_rconn_drop(r);
            return BFS_E_REMOTE;
        }
        timeout_ms = 0; /* what came is read; no second wait */
    }
}

int bfs_remote_claim_return(bfs_remote *r, const char *group, uint64_t epoch, uint64_t batch,
                            uint32_t tries)
{
    char l[256], v[48];
    bfs_rconn_key(r, l, sizeof l, "g:%s:%" PRIu64 ":back", group, epoch);
    snprintf(v, sizeof v, "%" PRIu64 " %u", batch, tries);
    const char *push[3] = {"RPUSH", l, v};
    const char *ex[3] = {"EXPIRE", l, "604800"};
    int rc = bfs_rconn_simple(r, 3, push, NULL);
    return rc ? rc : bfs_rconn_simple(r, 3, ex, NULL);
}

int bfs_remote_claim_returned(bfs_remote *r, const char *group, uint64_t epoch, uint64_t *batch,
                              uint32_t *tries)
{
    char l[256];
    bfs_rconn_key(r, l, sizeof l, "g:%s:%" PRIu64 ":back", group, epoch);
    const char *av[2] = {"LPOP", l};
    redisReply *rep = bfs_rconn_run(r, 2, av, NULL);
    if (!rep)
        return BFS_E_REMOTE;
    int got = rep->type == REDIS_REPLY_STRING &&
              sscanf(rep->str, "%" SCNu64 " %" SCNu32, batch, tries) == 2;
    freeReplyObject(rep);
    return got;
}

/* ---- a group's claim counters: what is there, and a clean start ------------------------ */

int bfs_remote_claim_info(bfs_remote *r, const char *group, uint64_t epoch, uint64_t *count,
                          long long *age_s)
{
    char g[256];
    bfs_rconn_key(r, g, sizeof g, "g:%s:%" PRIu64, group, epoch);
    const char *get[2] = {"GET", g}, *ttl[2] = {"TTL", g};
    redisReply *rep = bfs_rconn_run(r, 2, get, NULL);
    if (!rep)
        return BFS_E_REMOTE;
    *count = rep->type == REDIS_REPLY_STRING ? strtoull(rep->str, NULL, 10) : 0;
    freeReplyObject(rep);
    *age_s = -1;
    if (!*count || !(rep = bfs_rconn_run(r, 2, ttl, NULL)))
        return 0; /* (the age is only for the message) */
    /* the counter's first INCR set its TTL to a week (bfs_remote_claim) */
    if (rep->type == REDIS_REPLY_INTEGER && rep->integer >= 0 && rep->integer <= 604800)
        *age_s = 604800 - rep->integer;
    freeReplyObject(rep);
    return 0;
}

int bfs_remote_claims_reset(bfs_remote *r, const char *group, long long *deleted)
{
    char match[256];
    bfs_rconn_key(r, match, sizeof match, "g:%s:*", group); /* (names hold no glob characters) */
    char cursor[32] = "0";
    *deleted = 0;
    do {
        const char *scan[6] = {"SCAN", cursor, "MATCH", match, "COUNT", "1000"};
        redisReply *rep = bfs_rconn_run(r, 6, scan, NULL);
        if (!rep)
            return BFS_E_REMOTE;
        int ok = rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
                 rep->element[0]->type == REDIS_REPLY_STRING &&
                 rep->element[1]->type == REDIS_REPLY_ARRAY;
        if (!ok) {
            freeReplyObject(rep);
            snprintf(r->error, sizeof r->error, "SCAN %s: unexpected reply", match);
            return BFS_E_REMOTE;
        }
        snprintf(cursor, sizeof cursor, "%s", rep->element[0]->str);
        const redisReply *keys = rep->element[1];
        for (size_t i = 0; i < keys->elements; i++) {
            if (keys->element[i]->type != REDIS_REPLY_STRING)
                continue;
            const char *del[2] = {"DEL", keys->element[i]->str};
            redisReply *d = bfs_rconn_run(r, 2, del, NULL);
            if (!d) {
                freeReplyObject(rep);
                return BFS_E_REMOTE;
            }
            *deleted += d->type == REDIS_REPLY_INTEGER ? d->integer : 0;
            freeReplyObject(d);
        }
        freeReplyObject(rep);
    } while (strcmp(cursor, "0"));
    return 0;
}
