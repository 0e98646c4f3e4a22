/*
 * check_remote.c — the Redis transport (engine/remote/remote.h) against a redis-server of
 * the suite's own on 127.0.0.1: URLs (good ones, and each bad one refused with its reason),
 * values (every header field and the checksum checked; with remote_key=, authenticated),
 * key files, one job from request to fetch,
 * one job per batch however many trainers ask, a dead worker's job reclaimed after
 * claim_ms, corrupt and truncated values refused and deleted, passwords (none, wrong,
 * right), an unreachable server, a server restarted under a connection, heartbeats and
 * group claim counters, declines, keys of the wrong type, stale and cancelled jobs; a
 * reused group name (engine/claims.h across hosts): one log line at the first claim of an
 * epoch already claimed, none for a fresh one, and the reset that deletes the group's
 * counters and given-back lists (and no other group's). And the mount's requests
 * (engine/exec.c): with more batches waiting for workers than it handles in a round, the
 * batch a reader waits for is requested first, then the nearest prefetches, and none
 * starves.
 */
#include "engine/remote/remote.h"
#include "engine/claims.h"
#include "engine/exec.h"
#include "engine/pipeline.h"
#include "base/err.h"
#include "tests/testutil.h"

#include <check.h>
#include <errno.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
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

/* A connection to the suite's server for pipeline fp. */
static bfs_remote *conn_fp(uint64_t fp)
{
    bfs_remote_url u = {.port = srv.port};
    snprintf(u.host, sizeof u.host, "127.0.0.1");
    bfs_remote *r;
    char err[512];
    int rc = bfs_remote_connect(&u, fp, 2000, &r, err, sizeof err);
    ck_assert_msg(rc == 0, "connect: %s", err);
    return r;
}

static bfs_remote *conn(void)
{
    return conn_fp(FP);
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

/* A key file of the given bytes and mode; its path in path (256 bytes). */
static void key_file(char *path, const char *name, const char *bytes, mode_t mode)
{
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(path, 256, "%s/check_remote.%d.%s", tmp, (int)getpid(), name);
    unlink(path);
    ck_assert_int_eq(tu_write_file(path, bytes, strlen(bytes)), 0);
    ck_assert_int_eq(chmod(path, mode), 0);
}

static void load(bfs_remote_auth *a, const char *name, const char *bytes)
{
    char path[256], err[512];
    key_file(path, name, bytes, 0600);
    ck_assert_msg(bfs_remote_load_key(path, a, err, sizeof err) == 0, "%s", err);
    unlink(path);
}

START_TEST(value_checks)
{
    uint8_t v[BFS_REMOTE_HDR + 100];
    for (int i = 0; i < 100; i++)
        v[BFS_REMOTE_HDR + i] = (uint8_t)(i * 7);
    ck_assert_int_eq(bfs_remote_value_header(v, NULL, FP, 3, 5, v + BFS_REMOTE_HDR, 100),
                     BFS_REMOTE_HDR);
    const uint8_t *p = NULL;
    ck_assert_int_eq(bfs_remote_value_check(v, sizeof v, NULL, FP, 3, 5, 100, &p), 0);
    ck_assert_ptr_eq(p, v + BFS_REMOTE_HDR);
    /* another pipeline, epoch, batch or size: refused */
    ck_assert_int_eq(bfs_remote_value_check(v, sizeof v, NULL, FP + 1, 3, 5, 100, &p),
                     BFS_E_REMOTE_VALUE);
    ck_assert_int_eq(bfs_remote_value_check(v, sizeof v, NULL, FP, 4, 5, 100, &p),
                     BFS_E_REMOTE_VALUE);
    ck_assert_int_eq(bfs_remote_value_check(v, sizeof v, NULL, FP, 3, 6, 100, &p),
                     BFS_E_REMOTE_VALUE);
    ck_assert_int_eq(bfs_remote_value_check(v, sizeof v, NULL, FP, 3, 5, 99, &p),
                     BFS_E_REMOTE_VALUE);
    /* truncated, short of a header, empty */
    ck_assert_int_eq(bfs_remote_value_check(v, sizeof v - 1, NULL, FP, 3, 5, 100, &p),
                     BFS_E_REMOTE_VALUE);
    ck_assert_int_eq(bfs_remote_value_check(v, 20, NULL, FP, 3, 5, 100, &p), BFS_E_REMOTE_VALUE);
    ck_assert_int_eq(bfs_remote_value_check(v, 0, NULL, FP, 3, 5, 100, &p), BFS_E_REMOTE_VALUE);
    /* any flipped byte, header or payload */
    for (size_t i = 0; i < sizeof v; i++) {
        v[i] ^= 0x10;
        ck_assert_int_eq(bfs_remote_value_check(v, sizeof v, NULL, FP, 3, 5, 100, &p),
                         BFS_E_REMOTE_VALUE);
        v[i] ^= 0x10;
    }
}
END_TEST

/* remote_key=: values only a holder of the key can make (issue 30, item 3). */
START_TEST(authenticated_values)
{
    bfs_remote_auth a, a2, b;
    load(&a, "a", "0123456789abcdef0123456789abcdef\n");
    load(&a2, "a2", "0123456789abcdef0123456789abcdef"); /* without the newline: the same */
    load(&b, "b", "another secret of enough bytes");
    ck_assert_mem_eq(a.key, a2.key, sizeof a.key);
    ck_assert_mem_eq(a.id, a2.id, sizeof a.id);
    ck_assert(memcmp(a.id, b.id, sizeof a.id) != 0);
    char idtext[20];
    bfs_remote_key_id_text(&a, idtext, sizeof idtext);
    ck_assert_uint_eq(strlen(idtext), 16);
    bfs_remote_key_id_text(NULL, idtext, sizeof idtext);
    ck_assert_str_eq(idtext, "none");

    enum { N = 3000 };
    uint8_t *v = malloc(BFS_REMOTE_HDR_AUTH + N), *w = malloc(BFS_REMOTE_HDR_AUTH + N);
    for (int i = 0; i < N; i++)
        v[BFS_REMOTE_HDR_AUTH + i] = (uint8_t)(i * 11);
    ck_assert_int_eq(bfs_remote_value_header(v, &a, FP, 3, 5, v + BFS_REMOTE_HDR_AUTH, N),
                     BFS_REMOTE_HDR_AUTH);
    const uint8_t *p = NULL;
    size_t len = BFS_REMOTE_HDR_AUTH + N;
    ck_assert_int_eq(bfs_remote_value_check(v, len, &a, FP, 3, 5, N, &p), 0);
    ck_assert_ptr_eq(p, v + BFS_REMOTE_HDR_AUTH);
    ck_assert_int_eq(bfs_remote_value_check(v, len, &a2, FP, 3, 5, N, &p), 0);
    /* another key, no key */
    ck_assert_int_eq(bfs_remote_value_check(v, len, &b, FP, 3, 5, N, &p), BFS_E_REMOTE_AUTH);
    ck_assert_int_eq(bfs_remote_value_check(v, len, NULL, FP, 3, 5, N, &p), BFS_E_REMOTE_AUTH);
    /* any byte flipped: refused (the header's names as a wrong value, the rest as forged) */
    for (size_t i = 0; i < len; i++) {
        v[i] ^= 0x04;
        int rc = bfs_remote_value_check(v, len, &a, FP, 3, 5, N, &p);
        ck_assert_msg(rc == (i >= 8 && i < 40 ? BFS_E_REMOTE_VALUE : BFS_E_REMOTE_AUTH) ||
                          (i < 8 && rc == BFS_E_REMOTE_VALUE),
                      "byte %zu flipped: %d", i, rc);
        v[i] ^= 0x04;
    }
    /* two values of the same bytes differ (a fresh nonce each), both good */
    memcpy(w, v, len);
    ck_assert_int_eq(bfs_remote_value_header(w, &a, FP, 3, 5, w + BFS_REMOTE_HDR_AUTH, N),
                     BFS_REMOTE_HDR_AUTH);
    ck_assert(memcmp(w, v, BFS_REMOTE_HDR_AUTH) != 0);
    ck_assert_int_eq(bfs_remote_value_check(w, len, &a, FP, 3, 5, N, &p), 0);
    /* a forger without the key: other bytes under a plain header with the right XXH64
     * (the fingerprint is public) pass the plain check, and never the keyed one */
    uint8_t *f = malloc(BFS_REMOTE_HDR + N);
    memset(f + BFS_REMOTE_HDR, 0xee, N);
    ck_assert_int_eq(bfs_remote_value_header(f, NULL, FP, 3, 5, f + BFS_REMOTE_HDR, N),
                     BFS_REMOTE_HDR);
    ck_assert_int_eq(bfs_remote_value_check(f, BFS_REMOTE_HDR + N, NULL, FP, 3, 5, N, &p), 0);
    ck_assert_int_eq(bfs_remote_value_check(f, BFS_REMOTE_HDR + N, &a, FP, 3, 5, N, &p),
                     BFS_E_REMOTE_AUTH);
    /* nor one made with another key, whose id it copies */
    ck_assert_int_eq(bfs_remote_value_header(w, &b, FP, 3, 5, w + BFS_REMOTE_HDR_AUTH, N),
                     BFS_REMOTE_HDR_AUTH);
    memcpy(w + 40, a.id, 8);
    ck_assert_int_eq(bfs_remote_value_check(w, len, &a, FP, 3, 5, N, &p), BFS_E_REMOTE_AUTH);
    free(f);
    free(v);
    free(w);
}
END_TEST

/* remote_key=FILE refused with a reason: unsafe modes, too short, not a file, missing. */
START_TEST(key_files)
{
    bfs_remote_auth a;
    char path[256], err[512];
    key_file(path, "open", "0123456789abcdef0123456789abcdef", 0644);
    ck_assert_int_eq(bfs_remote_load_key(path, &a, err, sizeof err), -EPERM);
    ck_assert_msg(strstr(err, "chmod 600") && strstr(err, "0644"), "%s", err);
    ck_assert_int_eq(a.on, 0);
    ck_assert_int_eq(chmod(path, 0660), 0);
    ck_assert_int_eq(bfs_remote_load_key(path, &a, err, sizeof err), -EPERM);
    ck_assert_int_eq(chmod(path, 0400), 0);
    ck_assert_int_eq(bfs_remote_load_key(path, &a, err, sizeof err), 0);
    ck_assert_ptr_null(strstr(err, "0123456789abcdef")); /* (no message shows the key) */
    unlink(path);
    key_file(path, "short", "tooshort\n", 0600);
    ck_assert_int_eq(bfs_remote_load_key(path, &a, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "at least 16") && strstr(err, "openssl rand"), "%s", err);
    unlink(path);
    ck_assert_int_eq(bfs_remote_load_key(path, &a, err, sizeof err), -ENOENT);
    ck_assert_msg(strstr(err, path), "%s", err);
    ck_assert_int_eq(mkfifo(path, 0600), 0); /* refused without blocking */
    ck_assert_int_eq(bfs_remote_load_key(path, &a, err, sizeof err), BFS_E_NOT_REGULAR);
    unlink(path);
    char big[5000];
    memset(big, 'k', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    key_file(path, "big", big, 0600);
    ck_assert_int_eq(bfs_remote_load_key(path, &a, err, sizeof err), -EINVAL);
    unlink(path);
}
END_TEST

START_TEST(job_round_trip)
{
    bfs_remote *trainer = conn(), *trainer2 = conn(), *worker = conn();
    uint8_t batch[5000], got[5000];
    char id[64];
    for (size_t i = 0; i < sizeof batch; i++)
        batch[i] = (uint8_t)(i * 13 + 1);
    ck_assert_int_eq(bfs_remote_fetch(trainer, 2, 9, got, sizeof got), 0); /* not there */
    /* two trainers ask: one job */
    ck_assert_int_eq(bfs_remote_request(trainer, 2, 9, 10000, id), 1);
    ck_assert_int_eq(bfs_remote_request(trainer2, 2, 9, 10000, id), 0);
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
    ck_assert_int_eq(bfs_remote_request(trainer, 2, 9, 10000, id), 1);
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
    char id[64];
    ck_assert_int_eq(bfs_remote_request(t, 0, 4, 10000, id), 1);
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
    bfs_remote_value_header(v, NULL, FP, 1, 1, batch, sizeof batch);
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
    bfs_remote_value_header(v, NULL, FP, 2, 1, batch, sizeof batch);
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
    bfs_remote_value_header(v, NULL, FP, 1, 1, batch, sizeof batch);
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
    char id[64];
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
    ck_assert_int_eq(bfs_remote_request(r, 0, 0, 1000, id), 1);
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
    char id[64];
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
    ck_assert_int_eq(bfs_remote_request(t, 0, 1, 10000, id), 1);
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

/* Run take(g, epoch) with stderr in a file; what it wrote into out. */
static int take_logged(bfs_claims *g, uint64_t epoch, bfs_group_claim *c, char *out, size_t cap)
{
    char path[] = "/tmp/check_remote_log.XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    int rc = bfs_claims_take(g, epoch, c);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t n = pread(fd, out, cap - 1, 0);
    out[n > 0 ? n : 0] = '\0';
    close(fd);
    return rc;
}

START_TEST(reused_group_and_reset)
{
    char url[64], err[512], log[4096];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", srv.port);
    bfs_claims *run1, *run2;
    bfs_group_claim c;
    ck_assert_int_eq(bfs_claims_open_remote("reuse", FP, 4, url, &run1, err, sizeof err), 0);
    for (uint64_t k = 0; k < 3; k++) {
        ck_assert_int_eq(take_logged(run1, 2, &c, log, sizeof log), 0);
        ck_assert_uint_eq(c.batch, k);
        ck_assert_str_eq(log, ""); /* (its own claims: nothing to say) */
    }
    bfs_claims_give_back(run1, &c); /* a given-back list: a key of its own */
    bfs_claims_close(run1);
    bfs_remote *r = conn();
    uint64_t count;
    long long age;
    ck_assert_int_eq(bfs_remote_claim_info(r, "reuse", 2, &count, &age), 0);
    ck_assert_uint_eq(count, 3);
    ck_assert(age >= 0 && age <= 5);
    ck_assert_int_eq(bfs_remote_claim_info(r, "reuse", 9, &count, &age), 0);
    ck_assert_uint_eq(count, 0);
    ck_assert_int_eq(age, -1);
    uint64_t k;
    ck_assert_int_eq(bfs_remote_claim(r, "reuse2", 2, &k), 0); /* another group */

    /* a second run under the same name: one line at its first claim of epoch 2 */
    ck_assert_int_eq(bfs_claims_open_remote("reuse", FP, 4, url, &run2, err, sizeof err), 0);
    ck_assert_int_eq(take_logged(run2, 2, &c, log, sizeof log), 0);
    ck_assert_uint_eq(c.batch, 2); /* (the claim given back first) */
    ck_assert_msg(strstr(log, "batchfs: group=reuse epoch 2: 3 of 4 batches were claimed before "
                              "this mount's first claim, the first ") &&
                      strstr(log, " s ago: by the group's other mounts, or by an earlier run") &&
                      strstr(log, "batchfs group-reset SOURCE -o remote=URL,group=reuse") &&
                      !strstr(log, "used up") && strchr(log, '\n') == log + strlen(log) - 1,
                  "log: %s", log);
    ck_assert_int_eq(take_logged(run2, 2, &c, log, sizeof log), 0);
    ck_assert_uint_eq(c.batch, 3);
    ck_assert_str_eq(log, ""); /* once per epoch */
    ck_assert_int_eq(take_logged(run2, 2, &c, log, sizeof log), -ENODATA);
    ck_assert_str_eq(log, "");
    ck_assert_int_eq(take_logged(run2, 5, &c, log, sizeof log), 0); /* a fresh epoch */
    ck_assert_str_eq(log, "");
    bfs_claims_close(run2);
    /* used up: the line says so */
    ck_assert_int_eq(bfs_claims_open_remote("reuse", FP, 4, url, &run2, err, sizeof err), 0);
    ck_assert_int_eq(take_logged(run2, 2, &c, log, sizeof log), -ENODATA);
    ck_assert_msg(strstr(log, "4 of 4 batches were claimed") &&
                      strstr(log, "(the epoch is used up: opens of next fail with ENODATA)"),
                  "log: %s", log);
    bfs_claims_close(run2);

    /* the reset: counters of epochs 2 and 5, no given-back list left (handed out): 2 keys;
     * another group's stays */
    long long deleted = -1;
    ck_assert_int_eq(bfs_claims_reset_remote("reuse", FP, url, &deleted, err, sizeof err), 0);
    ck_assert_int_eq(deleted, 2);
    ck_assert_int_eq(bfs_remote_claim_info(r, "reuse", 2, &count, &age), 0);
    ck_assert_uint_eq(count, 0);
    ck_assert_int_eq(bfs_remote_claim_info(r, "reuse2", 2, &count, &age), 0);
    ck_assert_uint_eq(count, 1);
    ck_assert_int_eq(bfs_claims_open_remote("reuse", FP, 4, url, &run2, err, sizeof err), 0);
    ck_assert_int_eq(take_logged(run2, 2, &c, log, sizeof log), 0);
    ck_assert_uint_eq(c.batch, 0);
    ck_assert_str_eq(log, "");
    bfs_claims_close(run2);
    /* a given-back list is one of its keys too; nothing to delete is 0 */
    ck_assert_int_eq(bfs_remote_claim_return(r, "reuse", 7, 1, 0), 0);
    ck_assert_int_eq(bfs_claims_reset_remote("reuse", FP, url, &deleted, err, sizeof err), 0);
    ck_assert_int_eq(deleted, 2); /* g:reuse:2 and g:reuse:7:back */
    ck_assert_int_eq(bfs_claims_reset_remote("reuse", FP, url, &deleted, err, sizeof err), 0);
    ck_assert_int_eq(deleted, 0);
    ck_assert_int_eq(bfs_claims_reset_remote("bad/name", FP, url, &deleted, err, sizeof err),
                     -EINVAL);
    bfs_remote_close(r);
}
END_TEST

/* A worker's decline (issue 30, items 1 and 2): the mount is told to compute the batch
 * itself; nothing of the worker's failure is served or kept as the batch's. */
START_TEST(declined_batches)
{
    bfs_remote *t = conn(), *w = conn();
    uint8_t got[100];
    ck_assert_int_eq(bfs_remote_decline(w, 3, 2, BFS_E_CHANGED, "bad sample 7 (x.jpg)", 60000), 0);
    ck_assert_int_eq(bfs_remote_fetch(t, 3, 2, got, sizeof got), BFS_E_REMOTE_DECLINED);
    ck_assert_str_eq(bfs_remote_error(t), "bad sample 7 (x.jpg)");
    /* a decline of another batch (a key someone copied) is a wrong value */
    uint8_t v[BFS_REMOTE_HDR + BFS_REMOTE_ERR_MAX];
    size_t n = bfs_remote_error_value(v, FP, 3, 9, BFS_E_JPEG_DATA, "elsewhere");
    char key[96];
    bfs_remote_key(key, sizeof key, FP, 3, 3);
    raw_set(key, v, n);
    ck_assert_int_eq(bfs_remote_fetch(t, 3, 3, got, sizeof got), BFS_E_REMOTE_VALUE);
    /* a forged "failure" with EINTR as its code: still only a decline */
    n = bfs_remote_error_value(v, FP, 3, 5, -EINTR, "interrupted");
    bfs_remote_key(key, sizeof key, FP, 3, 5);
    raw_set(key, v, n);
    ck_assert_int_eq(bfs_remote_fetch(t, 3, 5, got, sizeof got), BFS_E_REMOTE_DECLINED);
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

/* Keys of another type (issue 30, item 4): a list at a batch's key, at its request marker
 * or at the job stream is refused for that batch, deleted where it is a batch's own key,
 * and the connection stays up. */
START_TEST(wrong_types)
{
    bfs_remote *t = conn(), *w = conn();
    redisContext *c = redisConnect("127.0.0.1", srv.port);
    char b[96], q[96], jobs[64], id[64];
    uint8_t got[100];
    bfs_remote_key(b, sizeof b, FP, 4, 1);
    snprintf(q, sizeof q, "bfs:{%016" PRIx64 "}:q:4:2", (uint64_t)FP);
    snprintf(jobs, sizeof jobs, "bfs:{%016" PRIx64 "}:jobs", (uint64_t)FP);
    freeReplyObject(redisCommand(c, "RPUSH %s x", b));
    ck_assert_int_eq(bfs_remote_stored(w, 4, 1), 0); /* no value: the worker stores one */
    ck_assert_int_eq(bfs_remote_fetch(t, 4, 1, got, sizeof got), BFS_E_REMOTE_REFUSED);
    ck_assert_msg(strstr(bfs_remote_error(t), "WRONGTYPE") &&
                      strstr(bfs_remote_error(t), "deleted"),
                  "%s", bfs_remote_error(t));
    redisReply *rep = redisCommand(c, "EXISTS %s", b);
    ck_assert_int_eq(rep->integer, 0);
    freeReplyObject(rep);
    ck_assert_int_eq(bfs_remote_fetch(t, 4, 1, got, sizeof got), 0); /* the same connection */
    /* a list as the request marker: refused, deleted; the next request queues */
    freeReplyObject(redisCommand(c, "RPUSH %s x", q));
    ck_assert_int_eq(bfs_remote_request(t, 4, 2, 10000, id), BFS_E_REMOTE_REFUSED);
    ck_assert_msg(strstr(bfs_remote_error(t), "list"), "%s", bfs_remote_error(t));
    ck_assert_int_eq(bfs_remote_request(t, 4, 2, 10000, id), 1);
    ck_assert(id[0]);
    /* a string as the job stream */
    freeReplyObject(redisCommand(c, "DEL %s", jobs));
    freeReplyObject(redisCommand(c, "SET %s x", jobs));
    ck_assert_int_eq(bfs_remote_request(t, 4, 3, 10000, id), BFS_E_REMOTE_REFUSED);
    ck_assert_msg(strstr(bfs_remote_error(t), "WRONGTYPE"), "%s", bfs_remote_error(t));
    ck_assert_int_eq(bfs_remote_workers(t, 10000), 0); /* still connected */
    redisFree(c);
    bfs_remote_close(t);
    bfs_remote_close(w);
}
END_TEST

/* Values of a pipeline with remote_key= (issue 30, item 3), through Redis. */
START_TEST(keyed_transport)
{
    bfs_remote_url u = {.port = srv.port};
    snprintf(u.host, sizeof u.host, "127.0.0.1");
    bfs_remote_url ku = u;
    load(&ku.auth, "k", "shared secret of the pipeline!!");
    bfs_remote *kw, *kt, *t = conn();
    char err[512];
    ck_assert_int_eq(bfs_remote_connect(&ku, FP, 2000, &kw, err, sizeof err), 0);
    ck_assert_int_eq(bfs_remote_connect(&ku, FP, 2000, &kt, err, sizeof err), 0);
    enum { N = 200000 };
    uint8_t *batch = malloc(N), *got = malloc(N);
    for (int i = 0; i < N; i++)
        batch[i] = (uint8_t)(i * 31 + 7);
    ck_assert_int_eq(bfs_remote_put(kw, 5, 1, batch, N, 60000), 0);
    ck_assert_int_eq(bfs_remote_fetch(kt, 5, 1, got, N), 1);
    ck_assert_mem_eq(got, batch, N);
    int fd = memfd_create("check_remote", MFD_CLOEXEC);
    ck_assert_int_eq(bfs_remote_fetch_fd(kt, 5, 1, fd, N), 1);
    ck_assert_int_eq(pread(fd, got, N, 0), N);
    ck_assert_mem_eq(got, batch, N);
    close(fd);
    /* a mount without the key cannot check it: refused, and kept for those who can */
    ck_assert_int_eq(bfs_remote_fetch(t, 5, 1, got, N), BFS_E_REMOTE_AUTH);
    ck_assert_msg(strstr(bfs_remote_error(t), "kept"), "%s", bfs_remote_error(t));
    ck_assert_int_eq(bfs_remote_stored(t, 5, 1), 1);
    /* a forged value (plain, right XXH64 of other bytes): refused by the keyed mount and
     * deleted; served by a mount without a key (what docs/scale-out.md says) */
    memset(batch, 0xab, N);
    ck_assert_int_eq(bfs_remote_put(t, 5, 2, batch, N, 60000), 0);
    ck_assert_int_eq(bfs_remote_fetch(t, 5, 2, got, N), 1);
    ck_assert_int_eq(bfs_remote_fetch(kt, 5, 2, got, N), BFS_E_REMOTE_AUTH);
    ck_assert_msg(strstr(bfs_remote_error(kt), "deleted"), "%s", bfs_remote_error(kt));
    ck_assert_int_eq(bfs_remote_stored(t, 5, 2), 0);
    /* a keyed value with its payload changed in Redis: forged, refused, deleted */
    ck_assert_int_eq(bfs_remote_put(kw, 5, 3, batch, N, 60000), 0);
    char key[96];
    bfs_remote_key(key, sizeof key, FP, 5, 3);
    redisContext *c = redisConnect("127.0.0.1", srv.port);
    freeReplyObject(redisCommand(c, "SETRANGE %s 1000 x", key));
    redisFree(c);
    ck_assert_int_eq(bfs_remote_fetch(kt, 5, 3, got, N), BFS_E_REMOTE_AUTH);
    ck_assert_int_eq(bfs_remote_stored(t, 5, 3), 0);
    free(batch);
    free(got);
    bfs_remote_close(kw);
    bfs_remote_close(kt);
    bfs_remote_close(t);
}
END_TEST

/* Jobs nobody waits for (issue 30, item 7): a job whose asker's wait is over is skipped by
 * workers, a job its asker cancelled is gone, and a worker that leaves is not counted. */
START_TEST(stale_and_cancelled_jobs)
{
    bfs_remote *t = conn(), *w = conn();
    bfs_remote_job j;
    char id[64];
    ck_assert_int_eq(bfs_remote_take(w, "w", 30000, 10, &j), 0); /* makes the group */
    ck_assert_int_eq(bfs_remote_request(t, 6, 1, 100, id), 1);   /* waited for 100 ms */
    ck_assert_int_eq(bfs_remote_request(t, 6, 2, 60000, id), 1);
    sleep_ms(250);
    ck_assert_int_eq(bfs_remote_take(w, "w", 30000, 100, &j), 1);
    ck_assert_uint_eq(j.k, 2);
    ck_assert_uint_eq(j.skipped, 1);
    ck_assert_uint_eq(j.wait_ms, 60000);
    ck_assert_uint_gt(j.queued_ms, 0);
    ck_assert_int_eq(bfs_remote_ack(w, &j), 0);
    /* cancelled by its asker */
    ck_assert_int_eq(bfs_remote_request(t, 6, 3, 60000, id), 1);
    ck_assert_int_eq(bfs_remote_cancel(t, id), 0);
    ck_assert_int_eq(bfs_remote_cancel(t, ""), 0);
    ck_assert_int_eq(bfs_remote_take(w, "w", 30000, 50, &j), 0);
    /* a worker that leaves is not alive any more */
    ck_assert_int_eq(bfs_remote_heartbeat(w, "w"), 0);
    ck_assert_int_eq(bfs_remote_workers(t, 10000), 1);
    ck_assert_int_eq(bfs_remote_leave(w, "w"), 0);
    ck_assert_int_eq(bfs_remote_workers(t, 10000), 0);
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

/* ---- the mount's requests (engine/exec.c's remote thread) ------------------------------ */

#define WAITED 3 /* the batch the reader waits for */

typedef struct getter {
    bfs_exec *x;
    bfs_batch *b;
    int rc;
    char err[512];
} getter;

static void *get_waited(void *p)
{
    getter *g = p;
    g->rc = bfs_exec_get(g->x, 0, WAITED, &g->b, g->err, sizeof g->err);
    return NULL;
}

/*
 * More REMOTE jobs than the executor handles in a round (REMOTE_MAX, 64): every batch of
 * an epoch of 75 is prefetched while Redis is down, a reader at batch 3 waits for it (an
 * old job: 71 newer ones), then Redis comes up. The first requests in the stream are the
 * awaited batch, then 4, 5, ... (nearest the reader first); every batch is requested
 * (none starves); and the batch a worker stores for the awaited job is served, byte for
 * byte the one computed here. Before the requests were ordered by need, a round took the
 * 64 newest REMOTE jobs, so batches 0-10 were never requested and the reader waited for
 * ever (remote_fallback=wait).
 */
START_TEST(requests_by_need)
{
    tu_dataset d;
    char err[1024];
    ck_assert_msg(tu_dataset_make(&d, "check_remote_need", 3, 25, 24, 40, 5, 2, err, sizeof err) ==
                      0,
                  "%s", err);
    char text[256];
    snprintf(text, sizeof text,
             "batch=1,size=16,remote=redis://127.0.0.1:%d,remote_fallback=wait,"
             "remote_wait_ms=600000",
             srv.port);
    bfs_pipeline_opts o;
    bfs_pipeline_defaults(&o);
    ck_assert_msg(bfs_pipeline_parse(&o, text, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(bfs_pipeline_finish(&o, err, sizeof err) == 0, "%s", err);
    bfs_engine *e;
    ck_assert_msg(bfs_engine_create(d.packed, &o, &e, err, sizeof err) == 0, "%s", err);
    uint64_t nb = bfs_engine_batches(e);
    ck_assert_uint_eq(nb, 75);
    bfs_exec *x;
    ck_assert_int_eq(bfs_exec_create(e, 1, 64 << 20, &x), 0);
    bfs_exec_set_prefetch(x, 0);
    /* Redis down: jobs made now stay REMOTE (wait) and none is requested yet */
    tu_redis_stop(&srv);
    ck_assert_int_ne(bfs_exec_set_remote(x, &o, err, sizeof err), 0);
    for (uint64_t k = 0; k < nb; k++)
        ck_assert_int_eq(bfs_exec_prefetch(x, 0, k), 0);
    bfs_exec_follow(x, 7, 0, WAITED, 1.0, 0, NULL); /* a reader at 3: 4, 5, ... next */
    getter g = {.x = x};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, get_waited, &g), 0);
    bfs_exec_stats st;
    for (int i = 0; i < 1000; i++) { /* its get joined the job (bounded wait) */
        bfs_exec_get_stats(x, &st);
        if (st.joins == 1)
            break;
        sleep_ms(10);
    }
    ck_assert_uint_eq(st.joins, 1);
    ck_assert_uint_eq(st.in_flight, nb);
    ck_assert_uint_eq(st.remote_requested, nb);
    ck_assert_int_eq(tu_redis_start(&srv, srv.port, NULL), 0);
    /* a worker reads the stream in its order */
    bfs_remote *w = conn_fp(bfs_engine_fingerprint(e));
    char seen[75] = {0};
    uint64_t distinct = 0, order[10];
    bfs_remote_job job;
    for (int idle = 0; distinct < nb && idle < 30;) {
        int rc = bfs_remote_take(w, "w", 600000, 500, &job);
        ck_assert_int_ge(rc, 0);
        if (!rc) {
            idle++;
            continue;
        }
        ck_assert_uint_eq(job.epoch, 0);
        ck_assert_uint_lt(job.k, nb);
        ck_assert_int_eq(bfs_remote_ack(w, &job), 0);
        if (distinct < 10)
            order[distinct] = job.k;
        if (!seen[job.k])
            seen[job.k] = 1, distinct++;
        if (distinct == 10)
            for (int i = 0; i < 10; i++)
                ck_assert_msg(order[i] == WAITED + (uint64_t)i,
                              "request %d was for batch %" PRIu64 ", not %" PRIu64
                              " (awaited first, then nearest the reader)",
                              i, order[i], WAITED + (uint64_t)i);
    }
    for (uint64_t k = 0; k < nb; k++)
        ck_assert_msg(seen[k], "batch %" PRIu64 " was never requested", k);
    /* the worker stores the awaited batch: the reader gets it, as computed here */
    bfs_engine *e2;
    ck_assert_msg(bfs_engine_create(d.packed, &o, &e2, err, sizeof err) == 0, "%s", err);
    bfs_exec *local;
    ck_assert_int_eq(bfs_exec_create(e2, 1, 0, &local), 0);
    bfs_batch *want;
    ck_assert_msg(bfs_exec_get(local, 0, WAITED, &want, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(
        bfs_remote_put(w, 0, WAITED, bfs_batch_data(want), bfs_batch_size(want), 60000), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_msg(g.rc == 0, "%s", g.err);
    ck_assert_uint_eq(bfs_batch_size(g.b), bfs_batch_size(want));
    ck_assert_mem_eq(bfs_batch_data(g.b), bfs_batch_data(want), bfs_batch_size(want));
    bfs_exec_get_stats(x, &st);
    ck_assert_uint_eq(st.remote_hits, 1);
    ck_assert_uint_eq(st.computed, 0);
    bfs_batch_release(g.b);
    bfs_batch_release(want);
    bfs_exec_destroy(local);
    bfs_engine_destroy(e2);
    bfs_remote_close(w);
    bfs_exec_destroy(x);
    bfs_engine_destroy(e);
    tu_dataset_free(&d);
}
END_TEST

static Suite *remote_suite(void)
{
    Suite *s = suite_create("remote");
    TCase *tc = tcase_create("offline");
    tcase_add_test(tc, url_parse);
    tcase_add_test(tc, value_checks);
    tcase_add_test(tc, authenticated_values);
    tcase_add_test(tc, key_files);
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
    tcase_add_test(tc, declined_batches);
    tcase_add_test(tc, wrong_types);
    tcase_add_test(tc, keyed_transport);
    tcase_add_test(tc, stale_and_cancelled_jobs);
    tcase_add_test(tc, reused_group_and_reset);
    suite_add_tcase(s, tc);
    tc = tcase_create("exec"); /* the mount's side: a dataset, an engine, an executor */
    tcase_add_checked_fixture(tc, server_up, server_down);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, requests_by_need);
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
