/*
 * check_remote.c — the Redis transport (engine/remote/remote.h) against a redis-server of
 * the suite's own on 127.0.0.1: URLs (good ones, and each bad one refused with its reason),
 * values (every header field and the checksum checked), one job from request to fetch,
 * one job per batch however many trainers ask, a dead worker's job reclaimed after
 * claim_ms, corrupt and truncated values refused and deleted, passwords (none, wrong,
 * right), an unreachable server, a server restarted under a connection, heartbeats and
 * group claim counters.
 */
#include "engine/remote/remote.h"
#include "base/err.h"
#include "tests/testutil.h"

#include <check.h>
#include <errno.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define FP 0x0123456789abcdefull

static tu_redis srv;

static void server_up(void)
{
    memset(&srv, 0, sizeof srv);
    ck_assert_msg(tu_redis_start(&srv, 0, NULL) == 0,
                  "redis-server did not start (make deps installs it)");
}

static void server_down(void)
{
    tu_redis_free(&srv);
}

static bfs_remote *conn(void)
{
    bfs_remote_url u = {.port = srv.port};
    snprintf(u.host, sizeof u.host, "127.0.0.1");
    bfs_remote *r;
    char err[512];
    int rc = bfs_remote_connect(&u, FP, 2000, &r, err, sizeof err);
    ck_assert_msg(rc == 0, "connect: %s", err);
    return r;
}

static void sleep_ms(int ms)
{
    nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL);
}

/* A raw SET of key to len bytes, around the transport (a corrupt value). */
static void raw_set(const char *key, const void *v, size_t len)
{
    redisContext *c = redisConnect("127.0.0.1", srv.port);
    ck_assert(c && !c->err);
    redisReply *rep = redisCommand(c, "SET %s %b", key, v, len);
    ck_assert_ptr_nonnull(rep);
    freeReplyObject(rep);
    redisFree(c);
}

START_TEST(url_parse)
{
    bfs_remote_url u;
    char err[256];
    ck_assert_int_eq(bfs_remote_parse_url("redis://localhost", &u, err, sizeof err), 0);
    ck_assert_str_eq(u.host, "localhost");
    ck_assert_int_eq(u.port, 6379);
    ck_assert_int_eq(u.db, 0);
    ck_assert_str_eq(u.pass, "");
    ck_assert_int_eq(
        bfs_remote_parse_url("redis://bob:s%40cr%3At@10.0.0.2:7000/3", &u, err, sizeof err), 0);
    ck_assert_str_eq(u.user, "bob");
    ck_assert_str_eq(u.pass, "s@cr:t");
    ck_assert_str_eq(u.host, "10.0.0.2");
    ck_assert_int_eq(u.port, 7000);
    ck_assert_int_eq(u.db, 3);
    ck_assert_int_eq(bfs_remote_parse_url("redis://:pw@[::1]:6380/", &u, err, sizeof err), 0);
    ck_assert_str_eq(u.user, "");
    ck_assert_str_eq(u.pass, "pw");
    ck_assert_str_eq(u.host, "::1");
    ck_assert_int_eq(u.port, 6380);
    char text[600];
    bfs_remote_url_text(&u, text, sizeof text);
    ck_assert_str_eq(text, "redis://:***@[::1]:6380/0"); /* never the password */

    static const struct {
        const char *url, *why;
    } bad[] = {
        {"http://x", "not a Redis URL"},
        {"redis://", "no host"},
        {"redis://host:0", "port must be 1..65535"},
        {"redis://host:65536", "port must be 1..65535"},
        {"redis://host:12x", "port must be 1..65535"},
        {"redis://host/x", "database must be a number"},
        {"redis://host/99999999999", "database must be a number"},
        {"redis://pw@host", "USER:PASS@"},
        {"redis://u:@host", "empty password"},
        {"redis://u:p%zz@host", "escape"},
        {"redis://u:p%00@host", "escape"},
        {"redis://ho st", "bad character"},
        {"redis://[::1", "without ']'"},
        {"redis://[::1]x", "junk after"},
        {"redis://host?timeout=1", "query"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = '\0';
        ck_assert_int_eq(bfs_remote_parse_url(bad[i].url, &u, err, sizeof err), -EINVAL);
        ck_assert_msg(strstr(err, bad[i].why), "%s: '%s' lacks '%s'", bad[i].url, err, bad[i].why);
    }
}
END_TEST

START_TEST(value_checks)
{
    uint8_t v[BFS_REMOTE_HDR + 100];
    for (int i = 0; i < 100; i++)
        v[BFS_REMOTE_HDR + i] = (uint8_t)(i * 7);
    bfs_remote_value_header(v, FP, 3, 5, v + BFS_REMOTE_HDR, 100);
    const uint8_t *p = NULL;
    ck_assert_int_eq(bfs_remote_value_check(v, sizeof v, FP, 3, 5, 100, &p), 0);
    ck_assert_ptr_eq(p, v + BFS_REMOTE_HDR);
    /* another pipeline, epoch, batch or size: refused */
    ck_assert_int_eq(bfs_remote_value_check(v, sizeof v, FP + 1, 3, 5, 100, &p),
                     BFS_E_REMOTE_VALUE);
    ck_assert_int_eq(bfs_remote_value_check(v, sizeof v, FP, 4, 5, 100, &p), BFS_E_REMOTE_VALUE);
    ck_assert_int_eq(bfs_remote_value_check(v, sizeof v, FP, 3, 6, 100, &p), BFS_E_REMOTE_VALUE);
    ck_assert_int_eq(bfs_remote_value_check(v, sizeof v, FP, 3, 5, 99, &p), BFS_E_REMOTE_VALUE);
    /* truncated, short of a header, empty */
    ck_assert_int_eq(bfs_remote_value_check(v, sizeof v - 1, FP, 3, 5, 100, &p),
                     BFS_E_REMOTE_VALUE);
    ck_assert_int_eq(bfs_remote_value_check(v, 20, FP, 3, 5, 100, &p), BFS_E_REMOTE_VALUE);
    ck_assert_int_eq(bfs_remote_value_check(v, 0, FP, 3, 5, 100, &p), BFS_E_REMOTE_VALUE);
    /* any flipped byte, header or payload */
    for (size_t i = 0; i < sizeof v; i++) {
        v[i] ^= 0x10;
        ck_assert_int_eq(bfs_remote_value_check(v, sizeof v, FP, 3, 5, 100, &p),
                         BFS_E_REMOTE_VALUE);
        v[i] ^= 0x10;
    }
}
END_TEST

START_TEST(job_round_trip)
{
    bfs_remote *trainer = conn(), *trainer2 = conn(), *worker = conn();
    uint8_t batch[5000], got[5000];
    for (size_t i = 0; i < sizeof batch; i++)
        batch[i] = (uint8_t)(i * 13 + 1);
    ck_assert_int_eq(bfs_remote_fetch(trainer, 2, 9, got, sizeof got), 0); /* not there */
    /* two trainers ask: one job */
    ck_assert_int_eq(bfs_remote_request(trainer, 2, 9, 10000), 1);
    ck_assert_int_eq(bfs_remote_request(trainer2, 2, 9, 10000), 0);
    bfs_remote_job job;
    ck_assert_int_eq(bfs_remote_take(worker, "w1", 30000, 100, &job), 1);
    ck_assert_uint_eq(job.epoch, 2);
    ck_assert_uint_eq(job.k, 9);
    ck_assert_int_eq(job.reclaimed, 0);
    ck_assert_int_eq(bfs_remote_stored(worker, 2, 9), 0);
    ck_assert_int_eq(bfs_remote_put(worker, 2, 9, batch, sizeof batch, 60000), 0);
    ck_assert_int_eq(bfs_remote_ack(worker, &job), 0);
    ck_assert_int_eq(bfs_remote_stored(worker, 2, 9), 1);
    ck_assert_int_eq(bfs_remote_fetch(trainer2, 2, 9, got, sizeof got), 1);
    ck_assert_mem_eq(got, batch, sizeof batch);
    /* straight into a file, as a mount in memfd mode fetches (through a 1 MiB buffer) */
    int fd = memfd_create("check_remote", MFD_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bfs_remote_fetch_fd(trainer2, 2, 9, fd, sizeof batch), 1);
    memset(got, 0, sizeof got);
    ck_assert_int_eq(pread(fd, got, sizeof got, 0), (ssize_t)sizeof got);
    ck_assert_mem_eq(got, batch, sizeof batch);
    ck_assert_int_eq(bfs_remote_fetch_fd(trainer2, 2, 8, fd, sizeof batch), 0); /* not there */
    close(fd);
    /* stored: its marker is gone, so once the value is evicted a request queues a job */
    char evict[96];
    bfs_remote_key(evict, sizeof evict, FP, 2, 9);
    redisContext *ec = redisConnect("127.0.0.1", srv.port);
    freeReplyObject(redisCommand(ec, "DEL %s", evict));
    redisFree(ec);
    ck_assert_int_eq(bfs_remote_request(trainer, 2, 9, 10000), 1);
    ck_assert_int_eq(bfs_remote_take(worker, "w1", 30000, 100, &job), 1);
    ck_assert_int_eq(bfs_remote_put(worker, 2, 9, batch, sizeof batch, 60000), 0);
    ck_assert_int_eq(bfs_remote_ack(worker, &job), 0);
    ck_assert_mem_eq(got, batch, sizeof batch);
    /* nothing more queued */
    ck_assert_int_eq(bfs_remote_take(worker, "w1", 30000, 50, &job), 0);
    /* the stored value has the TTL asked for */
    char key[96];
    bfs_remote_key(key, sizeof key, FP, 2, 9);
    redisContext *c = redisConnect("127.0.0.1", srv.port);
    redisReply *rep = redisCommand(c, "PTTL %s", key);
    ck_assert(rep->type == REDIS_REPLY_INTEGER && rep->integer > 50000 && rep->integer <= 60000);
    freeReplyObject(rep);
    redisFree(c);
    bfs_remote_close(trainer);
    bfs_remote_close(trainer2);
    bfs_remote_close(worker);
    bfs_remote_close(NULL);
}
END_TEST

START_TEST(dead_worker_reclaimed)
{
    bfs_remote *t = conn(), *a = conn(), *b = conn();
    ck_assert_int_eq(bfs_remote_request(t, 0, 4, 10000), 1);
    bfs_remote_job ja, jb;
    ck_assert_int_eq(bfs_remote_take(a, "a", 300, 100, &ja), 1); /* a takes it and "dies" */
    ck_assert_int_eq(bfs_remote_take(b, "b", 300, 50, &jb), 0);  /* held: not b's yet */
    sleep_ms(350);
    ck_assert_int_eq(bfs_remote_take(b, "b", 300, 50, &jb), 1);
    ck_assert_int_eq(jb.reclaimed, 1);
    ck_assert_uint_eq(jb.epoch, 0);
    ck_assert_uint_eq(jb.k, 4);
    ck_assert_str_eq(jb.id, ja.id);
    ck_assert_int_eq(bfs_remote_ack(b, &jb), 0);
    sleep_ms(350); /* acknowledged: no one reclaims it again */
    ck_assert_int_eq(bfs_remote_take(a, "a", 300, 50, &ja), 0);
    bfs_remote_close(t);
    bfs_remote_close(a);
    bfs_remote_close(b);
}
END_TEST

START_TEST(malformed_job_skipped)
{
    bfs_remote *w = conn();
    bfs_remote_job j;
    ck_assert_int_eq(bfs_remote_take(w, "w", 30000, 10, &j), 0); /* makes the group */
    char jobs[64];
    snprintf(jobs, sizeof jobs, "bfs:{%016" PRIx64 "}:jobs", (uint64_t)FP);
    redisContext *c = redisConnect("127.0.0.1", srv.port);
    freeReplyObject(redisCommand(c, "XADD %s * e x k 1", jobs));
    freeReplyObject(redisCommand(c, "XADD %s * e 1 k 2", jobs));
    ck_assert_int_eq(bfs_remote_take(w, "w", 30000, 100, &j), 1); /* the good one */
    ck_assert_uint_eq(j.epoch, 1);
    ck_assert_uint_eq(j.k, 2);
    redisReply *rep = redisCommand(c, "XLEN %s", jobs);
    ck_assert_int_eq(rep->integer, 1); /* the bad one deleted */
    freeReplyObject(rep);
    redisFree(c);
    bfs_remote_close(w);
}
END_TEST

START_TEST(corrupt_value_deleted)
{
    bfs_remote *r = conn();
    uint8_t batch[1000], got[1000];
    memset(batch, 5, sizeof batch);
    char key[96];
    bfs_remote_key(key, sizeof key, FP, 1, 1);
    /* garbage */
    raw_set(key, "not a batch", 11);
    ck_assert_int_eq(bfs_remote_fetch(r, 1, 1, got, sizeof got), BFS_E_REMOTE_VALUE);
    ck_assert_ptr_nonnull(strstr(bfs_remote_error(r), "deleted"));
    ck_assert_int_eq(bfs_remote_stored(r, 1, 1), 0);
    /* a good header, the payload cut short */
    uint8_t v[BFS_REMOTE_HDR + sizeof batch];
    bfs_remote_value_header(v, FP, 1, 1, batch, sizeof batch);
    memcpy(v + BFS_REMOTE_HDR, batch, sizeof batch);
    raw_set(key, v, sizeof v - 10);
    ck_assert_int_eq(bfs_remote_fetch(r, 1, 1, got, sizeof got), BFS_E_REMOTE_VALUE);
    ck_assert_int_eq(bfs_remote_stored(r, 1, 1), 0);
    /* the right size, one payload byte flipped (read straight into the batch, hashed as
     * it came), or the header of another epoch: refused; the connection stays usable */
    v[BFS_REMOTE_HDR + 500] ^= 1;
    raw_set(key, v, sizeof v);
    ck_assert_int_eq(bfs_remote_fetch(r, 1, 1, got, sizeof got), BFS_E_REMOTE_VALUE);
    v[BFS_REMOTE_HDR + 500] ^= 1;
    bfs_remote_value_header(v, FP, 2, 1, batch, sizeof batch);
    raw_set(key, v, sizeof v);
    ck_assert_int_eq(bfs_remote_fetch(r, 1, 1, got, sizeof got), BFS_E_REMOTE_VALUE);
    /* far longer than the batch: read to its end and refused */
    size_t big = 300000;
    uint8_t *huge = calloc(1, big);
    raw_set(key, huge, big);
    free(huge);
    ck_assert_int_eq(bfs_remote_fetch(r, 1, 1, got, sizeof got), BFS_E_REMOTE_VALUE);
    ck_assert_int_eq(bfs_remote_stored(r, 1, 1), 0);
    /* the whole value: served */
    bfs_remote_value_header(v, FP, 1, 1, batch, sizeof batch);
    raw_set(key, v, sizeof v);
    ck_assert_int_eq(bfs_remote_fetch(r, 1, 1, got, sizeof got), 1);
    ck_assert_mem_eq(got, batch, sizeof batch);
    bfs_remote_close(r);
}
END_TEST

START_TEST(passwords)
{
    tu_redis s = {0};
    static const char *const extra[] = {"--requirepass", "right", NULL};
    ck_assert_int_eq(tu_redis_start(&s, 0, extra), 0);
    bfs_remote_url u;
    char url[128], err[512];
    bfs_remote *r = NULL;
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", s.port);
    ck_assert_int_eq(bfs_remote_parse_url(url, &u, err, sizeof err), 0);
    ck_assert_int_eq(bfs_remote_connect(&u, FP, 2000, &r, err, sizeof err), BFS_E_REMOTE);
    ck_assert_msg(strstr(err, "NOAUTH"), "%s", err);
    snprintf(url, sizeof url, "redis://:wrong@127.0.0.1:%d", s.port);
    ck_assert_int_eq(bfs_remote_parse_url(url, &u, err, sizeof err), 0);
    ck_assert_int_eq(bfs_remote_connect(&u, FP, 2000, &r, err, sizeof err), BFS_E_REMOTE);
    ck_assert_msg(strstr(err, "AUTH") && strstr(err, "refused") && !strstr(err, "wrong"), "%s",
                  err); /* says AUTH failed, never echoes the password */
    ck_assert_ptr_null(r);
    snprintf(url, sizeof url, "redis://:right@127.0.0.1:%d/2", s.port);
    ck_assert_int_eq(bfs_remote_parse_url(url, &u, err, sizeof err), 0);
    ck_assert_int_eq(bfs_remote_connect(&u, FP, 2000, &r, err, sizeof err), 0);
    ck_assert_int_eq(bfs_remote_request(r, 0, 0, 1000), 1);
    bfs_remote_close(r);
    /* a database the server does not have */
    snprintf(url, sizeof url, "redis://:right@127.0.0.1:%d/99", s.port);
    ck_assert_int_eq(bfs_remote_parse_url(url, &u, err, sizeof err), 0);
    ck_assert_int_eq(bfs_remote_connect(&u, FP, 2000, &r, err, sizeof err), BFS_E_REMOTE);
    ck_assert_msg(strstr(err, "SELECT 99"), "%s", err);
    tu_redis_free(&s);
}
END_TEST

START_TEST(unreachable)
{
    tu_redis s = {0};
    ck_assert_int_eq(tu_redis_start(&s, 0, NULL), 0);
    int port = s.port;
    tu_redis_free(&s); /* a port nothing listens on now */
    bfs_remote_url u = {.port = port};
    snprintf(u.host, sizeof u.host, "127.0.0.1");
    bfs_remote *r = NULL;
    char err[512];
    ck_assert_int_eq(bfs_remote_connect(&u, FP, 500, &r, err, sizeof err), BFS_E_REMOTE);
    ck_assert_msg(strstr(err, "connecting to 127.0.0.1") && strstr(err, "refused"), "%s", err);
    ck_assert_ptr_null(r);
}
END_TEST

START_TEST(server_restarted)
{
    bfs_remote *t = conn(), *w = conn();
    uint8_t b[100], got[100];
    memset(b, 9, sizeof b);
    bfs_remote_job j;
    ck_assert_int_eq(bfs_remote_take(w, "w", 30000, 10, &j), 0);
    ck_assert_int_eq(bfs_remote_put(w, 0, 1, b, sizeof b, 60000), 0);
    tu_redis_stop(&srv);
    ck_assert_int_eq(bfs_remote_fetch(t, 0, 1, got, sizeof got), BFS_E_REMOTE);
    ck_assert_int_eq(bfs_remote_take(w, "w", 30000, 10, &j), BFS_E_REMOTE);
    ck_assert_int_eq(tu_redis_start(&srv, srv.port, NULL), 0);
    /* the same connections work again; the data did not survive (no persistence) */
    ck_assert_int_eq(bfs_remote_fetch(t, 0, 1, got, sizeof got), 0);
    ck_assert_int_eq(bfs_remote_request(t, 0, 1, 10000), 1);
    ck_assert_int_eq(bfs_remote_take(w, "w", 30000, 100, &j), 1); /* group made again */
    ck_assert_uint_eq(j.k, 1);
    bfs_remote_close(t);
    bfs_remote_close(w);
}
END_TEST

START_TEST(workers_and_claims)
{
    bfs_remote *r = conn();
    ck_assert_int_eq(bfs_remote_workers(r, 10000), 0);
    ck_assert_int_eq(bfs_remote_heartbeat(r, "w1"), 0);
    ck_assert_int_eq(bfs_remote_heartbeat(r, "w2"), 0);
    ck_assert_int_eq(bfs_remote_heartbeat(r, "w1"), 0);
    ck_assert_int_eq(bfs_remote_workers(r, 10000), 2);
    sleep_ms(120);
    ck_assert_int_eq(bfs_remote_workers(r, 100), 0); /* none in the last 100 ms */
    uint64_t k;
    for (uint64_t i = 0; i < 3; i++) {
        ck_assert_int_eq(bfs_remote_claim(r, "g", 5, &k), 0);
        ck_assert_uint_eq(k, i);
    }
    ck_assert_int_eq(bfs_remote_claim(r, "g", 6, &k), 0); /* another epoch */
    ck_assert_uint_eq(k, 0);
    ck_assert_int_eq(bfs_remote_claim(r, "h", 5, &k), 0); /* another group */
    ck_assert_uint_eq(k, 0);
    ck_assert_int_eq(bfs_remote_describe(r, "batch=4 seed=1"), 0);
    char text[64];
    ck_assert_int_eq(bfs_remote_pipeline_text(r, FP, text, sizeof text), 0);
    ck_assert_str_eq(text, "batch=4 seed=1");
    ck_assert_int_eq(bfs_remote_pipeline_text(r, FP + 1, text, sizeof text), 0);
    ck_assert_str_eq(text, "");
    bfs_remote_close(r);
}
END_TEST

START_TEST(failed_batches)
{
    bfs_remote *t = conn(), *w = conn();
    uint8_t got[100];
    ck_assert_int_eq(bfs_remote_put_error(w, 3, 2, BFS_E_JPEG_DATA, "bad sample 7 (x.jpg)", 60000),
                     0);
    ck_assert_int_eq(bfs_remote_fetch(t, 3, 2, got, sizeof got), BFS_E_JPEG_DATA);
    ck_assert_str_eq(bfs_remote_error(t), "bad sample 7 (x.jpg)");
    ck_assert_int_eq(bfs_remote_stored(t, 3, 2), 1); /* kept: every mount fails it */
    /* a failure of another batch (a key someone copied) is a wrong value, not a failure */
    uint8_t v[BFS_REMOTE_HDR + BFS_REMOTE_ERR_MAX];
    size_t n = bfs_remote_error_value(v, FP, 3, 9, BFS_E_JPEG_DATA, "elsewhere");
    char key[96];
    bfs_remote_key(key, sizeof key, FP, 3, 3);
    raw_set(key, v, n);
    ck_assert_int_eq(bfs_remote_fetch(t, 3, 3, got, sizeof got), BFS_E_REMOTE_VALUE);
    /* the message is cut at BFS_REMOTE_ERR_MAX, control bytes shown as '?' */
    char long_msg[2000];
    memset(long_msg, 'a', sizeof long_msg - 1);
    long_msg[sizeof long_msg - 1] = '\0';
    long_msg[3] = '\n';
    n = bfs_remote_error_value(v, FP, 3, 4, -EIO, long_msg);
    ck_assert_uint_eq(n, BFS_REMOTE_HDR + BFS_REMOTE_ERR_MAX);
    char msg[64];
    ck_assert_int_eq(bfs_remote_error_check(v, n, FP, 3, 4, msg, sizeof msg), -EIO);
    ck_assert_int_eq(msg[3], '?');
    ck_assert_uint_eq(strlen(msg), sizeof msg - 1);
    ck_assert_int_eq(bfs_remote_error_check(v, n, FP + 1, 3, 4, msg, sizeof msg), 0);
    v[BFS_REMOTE_HDR + 5] ^= 1;
    ck_assert_int_eq(bfs_remote_error_check(v, n, FP, 3, 4, msg, sizeof msg), 0);
    bfs_remote_close(t);
    bfs_remote_close(w);
}
END_TEST

START_TEST(announcements)
{
    bfs_remote *s = conn(), *w = conn();
    ck_assert_int_eq(bfs_remote_subscribe(s), 0);
    uint64_t e = 0, k = 0;
    ck_assert_int_eq(bfs_remote_announced(s, 50, -1, &e, &k), 0); /* nothing yet */
    uint8_t b[64] = {1};
    ck_assert_int_eq(bfs_remote_put(w, 7, 3, b, sizeof b, 60000), 0);
    ck_assert_int_eq(bfs_remote_put(w, 7, 4, b, sizeof b, 60000), 0);
    ck_assert_int_eq(bfs_remote_announced(s, 2000, -1, &e, &k), 1);
    ck_assert_uint_eq(e, 7);
    ck_assert_uint_eq(k, 3);
    ck_assert_int_eq(bfs_remote_announced(s, 2000, -1, &e, &k), 1);
    ck_assert_uint_eq(k, 4);
    /* the server restarts: one failed call, then subscribed again */
    tu_redis_stop(&srv);
    ck_assert_int_eq(bfs_remote_announced(s, 500, -1, &e, &k), BFS_E_REMOTE);
    ck_assert_int_eq(tu_redis_start(&srv, srv.port, NULL), 0);
    ck_assert_int_eq(bfs_remote_announced(s, 50, -1, &e, &k), 0);
    ck_assert_int_eq(bfs_remote_put(w, 8, 1, b, sizeof b, 60000), 0);
    ck_assert_int_eq(bfs_remote_announced(s, 2000, -1, &e, &k), 1);
    ck_assert_uint_eq(e, 8);
    bfs_remote_close(s);
    bfs_remote_close(w);
}
END_TEST

static Suite *remote_suite(void)
{
    Suite *s = suite_create("remote");
    TCase *tc = tcase_create("offline");
    tcase_add_test(tc, url_parse);
    tcase_add_test(tc, value_checks);
    suite_add_tcase(s, tc);
    tc = tcase_create("redis");
    tcase_add_checked_fixture(tc, server_up, server_down);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, job_round_trip);
    tcase_add_test(tc, dead_worker_reclaimed);
    tcase_add_test(tc, malformed_job_skipped);
    tcase_add_test(tc, corrupt_value_deleted);
    tcase_add_test(tc, passwords);
    tcase_add_test(tc, unreachable);
    tcase_add_test(tc, server_restarted);
    tcase_add_test(tc, workers_and_claims);
    tcase_add_test(tc, announcements);
    tcase_add_test(tc, failed_batches);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as the daemon and the worker do (remote.h) */
    SRunner *sr = srunner_create(remote_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
