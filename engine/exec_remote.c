/*
 * exec_remote.c — the executor's remote side (remote=, docs/scale-out.md): a job source
 * (engine/exec_internal.h) that asks `batchfs worker`s for the executor's batches through
 * Redis (engine/remote/remote.h).
 *
 * A mount with remote= asks `batchfs worker`s for its batches through Redis. The executor
 * makes a new job REMOTE (instead of RUNNING) while workers are alive or
 * remote_fallback=wait (remote_takes); the remote thread, with two connections of its own
 * (commands; announcements), queues a Redis job for it, fetches the batch when a worker
 * announces it (or every REMOTE_POLL_S, announcements being fire-and-forget), and hands
 * the job to the local workers (RUNNING) when remote_wait_ms passes, Redis fails or no
 * worker is alive (remote_fallback=local). Each round handles at most REMOTE_MAX jobs,
 * chosen and ordered by need (bfs_exec_src_choose: awaited first, then prefetches nearest
 * their reader, and none starves), which is the order their requests enter the stream.
 * While a job is REMOTE only the remote thread touches it (its bytes and its rjob).
 *
 * Neighbours: engine/exec.c opens, starts and stops it (bfs_exec_set_remote,
 * bfs_exec_destroy) and asks it whether a new job is its (bfs_exec_remote_takes, _added,
 * _stats); this file calls the executor back only through the job-table operations it was
 * handed (bfs_exec_src_ops: callbacks, no circle of calls), and engine/remote/.
 *
 * Locks: the executor's x->lock guards rs->workers (read by bfs_exec_remote_takes and
 * _stats, called under it; written by the remote thread holding it: ops->lock); the job-table
 * operations take it themselves. The remote thread never holds it during a Redis call.
 * Everything else of remote_side is the remote thread's alone (or set before it starts).
 */
#include "engine/exec_internal.h"
#include "base/clock.h"
#include "base/err.h"
#include "engine/remote/remote.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define REMOTE_ALIVE_MS 10000 /* a worker counts as alive this long after a heartbeat */
#define REMOTE_POLL_S   0.25  /* a REMOTE job is looked for at least this often */
#define REMOTE_COUNT_S  1.0   /* workers are counted this often */
#define REMOTE_MAX      64    /* REMOTE jobs handled per round: the request window */
#define REMOTE_FAIR     8     /* of which, when more are REMOTE, those that waited longest */
_Static_assert(REMOTE_FAIR > 0 && REMOTE_FAIR < REMOTE_MAX, "a round needs both kinds");
_Static_assert(REMOTE_MAX <= BFS_EXEC_SRC_MAX, "bfs_exec_src_choose takes at most that");

typedef struct bfs_exec_remote {
    bfs_exec *x; /* (opaque here: only passed to ops) */
    bfs_engine *e;
    const bfs_exec_src_ops *ops; /* the executor's job-table operations */
    bfs_remote_url url;
    int wait_ms, fallback; /* remote_wait_ms= (also each request's TTL), remote_fallback= */
    char canonical[BFS_CANONICAL_MAX];
    bfs_remote *cmd, *sub; /* the remote thread's; NULL: to be connected */
    int wake_fd;           /* eventfd: a job became REMOTE, or stop */
    pthread_t thread;
    int started;
    int workers; /* live workers at the last count, -1: not counted yet (guarded by x->lock) */
    int down;    /* Redis failing (remote thread only) */
    int said_none;
    double next_connect;
    /* lines about single batches (declined, refused, corrupt): the first of each kind,
     * then at most one a minute with a count, so that a worker declining every batch does
     * not fill the log (remote thread only) */
    double said_at[3];
    unsigned long unsaid[3];
} remote_side;

enum { SAY_DECLINED, SAY_BAD, SAY_REFUSED };

/* A line about one batch, rate-limited per kind. Remote thread. */
static void remote_say(remote_side *rs, int kind, double now, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void remote_say(remote_side *rs, int kind, double now, const char *fmt, ...)
{
    if (rs->said_at[kind] && now - rs->said_at[kind] < 60) {
        rs->unsaid[kind]++;
        return;
    }
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (rs->unsaid[kind])
        fprintf(stderr, "batchfs: remote: %s (and %lu more like it in the last minute)\n", line,
                rs->unsaid[kind]);
    else
        fprintf(stderr, "batchfs: remote: %s\n", line);
    rs->said_at[kind] = now;
    rs->unsaid[kind] = 0;
}

static void remote_wake(remote_side *rs)
{
    uint64_t one = 1;
    if (write(rs->wake_fd, &one, sizeof one) < 0) {
        /* the counter is full: a wake-up is pending anyway */
    }
}

/* Redis failed (or came back): one line each way. Remote thread. */
static void remote_health(remote_side *rs, int ok, const char *what)
{
    if (!ok && !rs->down)
        fprintf(stderr, "batchfs: %s%s; batches are %s until Redis answers\n",
                strncmp(what, "remote=", 7) ? "remote: " : "", what,
                rs->fallback == BFS_REMOTE_WAIT ? "waited for" : "computed here");
    else if (ok && rs->down)
        fprintf(stderr, "batchfs: remote: Redis answers again\n");
    rs->down = !ok;
}

/* Connect what is not connected (at most once a second). 0 when both connections are up. */
static int remote_connect(remote_side *rs, double now)
{
    if (rs->cmd && rs->sub)
        return 0;
    if (now < rs->next_connect)
        return -1;
    rs->next_connect = now + 1;
    char err[1024];
    uint64_t fp = bfs_engine_fingerprint(rs->e);
    if (!rs->cmd) {
        if (bfs_remote_connect(&rs->url, fp, 2000, &rs->cmd, err, sizeof err)) {
            remote_health(rs, 0, err);
            return -1;
        }
        bfs_remote_describe(rs->cmd, rs->canonical);
    }
    if (!rs->sub) {
        if (bfs_remote_connect(&rs->url, fp, 2000, &rs->sub, err, sizeof err) ||
            bfs_remote_subscribe(rs->sub)) {
            remote_health(rs, 0, rs->sub ? bfs_remote_error(rs->sub) : err);
            bfs_remote_close(rs->sub);
            rs->sub = NULL;
            return -1;
        }
    }
    remote_health(rs, 1, NULL);
    return 0;
}

/* One REMOTE job's turn: ask for it, look for it, or give up on it. Unlocked (j is
 * referenced). A batch that cannot come from the workers (a worker declined it, its value
 * is wrong or forged, its key is of another type, Redis refuses to queue it) is computed
 * here at once, with remote_fallback=wait too: waiting would wait for ever. */
static void remote_step(remote_side *rs, bfs_exec_rjob *j, double now, int memfd, int workers)
{
    bfs_exec *x = rs->x;
    int rc = 0, give_up = 0;
    if (!rs->cmd) {
        give_up = rs->fallback == BFS_REMOTE_LOCAL;
    } else if (!j->asked || j->announced || now - j->polled >= REMOTE_POLL_S) {
        j->announced = 0;
        j->polled = now;
        /* memfd mode: the value goes straight into its batch file, through a 1 MiB buffer;
         * the job's batch-sized buffer is never written, so a fresh one never costs its
         * pages (a fault and a zeroing each: a quarter of the mount's CPU per remote batch,
         * measured with perf) */
        if (memfd && j->fd < 0)
            rs->ops->open_file(x, j);
        rc = j->fd >= 0 ? bfs_remote_fetch_fd(rs->cmd, j->epoch, j->k, j->fd, j->size)
                        : bfs_remote_fetch(rs->cmd, j->epoch, j->k, j->buf, j->size);
        if (rc == 1) {
            remote_health(rs, 1, NULL);
            if (rs->ops->done(x, j, memfd) == 0)
                return;
            rc = 0;
            give_up = 1; /* no file for it: computed here */
        }
        if (rc == 0 && !j->asked) {
            rc = bfs_remote_request(rs->cmd, j->epoch, j->k, rs->wait_ms, j->id);
            j->asked = rc >= 0;
            rc = rc < 0 ? rc : 0;
        }
        if (rc == BFS_E_REMOTE_DECLINED) {
            remote_say(rs, SAY_DECLINED, now,
                       "epoch %llu batch %llu: a worker could not compute it (%s); computing it "
                       "here",
                       (unsigned long long)j->epoch, (unsigned long long)j->k,
                       bfs_remote_error(rs->cmd));
            rs->ops->count(x, BFS_EXEC_SRC_DECLINED);
            give_up = 1;
        } else if (rc == BFS_E_REMOTE_VALUE || rc == BFS_E_REMOTE_AUTH ||
                   rc == BFS_E_REMOTE_REFUSED) {
            remote_say(rs, rc == BFS_E_REMOTE_REFUSED ? SAY_REFUSED : SAY_BAD, now,
                       "epoch %llu batch %llu: %s; computing it here", (unsigned long long)j->epoch,
                       (unsigned long long)j->k, bfs_remote_error(rs->cmd));
            rs->ops->count(x, BFS_EXEC_SRC_CORRUPT);
            give_up = 1;
        } else if (rc) {
            rs->ops->count(x, BFS_EXEC_SRC_ERROR);
            remote_health(rs, 0, bfs_remote_error(rs->cmd));
            bfs_remote_close(rs->cmd);
            rs->cmd = NULL;
            give_up = rs->fallback == BFS_REMOTE_LOCAL;
        } else {
            remote_health(rs, 1, NULL);
        }
    }
    if (!give_up && workers == 0 && rs->fallback == BFS_REMOTE_LOCAL)
        give_up = 1;
    if (!give_up && now >= j->deadline) {
        if (rs->fallback == BFS_REMOTE_LOCAL) {
            give_up = 1;
        } else { /* wait: ask again (the marker has expired by now) and go on waiting */
            j->asked = 0;
            j->id[0] = '\0'; /* (workers skip that entry now: its wait is over) */
            j->deadline = now + rs->wait_ms / 1e3;
        }
    }
    if (give_up) {
        /* computed here: the job this mount queued is of no use to anyone, so no worker
         * should compute it (a next worker would otherwise find it in the stream) */
        if (j->id[0] && rs->cmd)
            bfs_remote_cancel(rs->cmd, j->id);
        j->id[0] = '\0';
        rs->ops->give_up(x, j);
    }
}

static void *remote_main(void *arg)
{
    remote_side *rs = arg;
    pthread_setname_np(pthread_self(), "bfs-remote");
    bfs_exec *x = rs->x;
    bfs_exec_rjob *list[REMOTE_MAX];
    double next_count = 0;
    uint64_t fp = bfs_engine_fingerprint(rs->e);
    while (!rs->ops->stopping(x)) {
        double now = bfs_mono_s();
        remote_connect(rs, now);
        if (now >= next_count && rs->cmd) {
            next_count = now + REMOTE_COUNT_S;
            int w = bfs_remote_workers(rs->cmd, REMOTE_ALIVE_MS);
            if (w >= 0 && w == 0 && !rs->said_none)
                fprintf(stderr,
                        "batchfs: remote: no worker of pipeline %016llx is alive: batches are %s "
                        "(start `batchfs worker` with the same data and data-changing options)\n",
                        (unsigned long long)fp,
                        rs->fallback == BFS_REMOTE_LOCAL ? "computed here" : "waited for");
            if (w > 0 && rs->said_none)
                fprintf(stderr, "batchfs: remote: %d worker(s) alive\n", w);
            if (w >= 0)
                rs->said_none = w == 0;
            rs->ops->lock(x);
            rs->workers = w >= 0 ? w : rs->workers;
            rs->ops->unlock(x);
        }
        /* chosen after connecting (up to 2 s): in the order of the jobs and readers now */
        int memfd, n = rs->ops->choose(x, list, REMOTE_MAX, REMOTE_FAIR, &memfd);
        rs->ops->lock(x);
        int workers = rs->cmd ? rs->workers : 0;
        rs->ops->unlock(x);
        for (int i = 0; i < n; i++)
            remote_step(rs, list[i], now, memfd, workers);
        /* announcements, or a new job (wake_fd), or the next poll */
        uint64_t e, k;
        int got = 0, timeout = n ? (int)(REMOTE_POLL_S * 1000 / 2) : (int)(REMOTE_COUNT_S * 1000);
        if (rs->sub) {
            got = bfs_remote_announced(rs->sub, timeout, rs->wake_fd, &e, &k);
            if (got < 0) {
                bfs_remote_close(rs->sub);
                rs->sub = NULL;
            }
        } else {
            struct pollfd p = {.fd = rs->wake_fd, .events = POLLIN};
            poll(&p, 1, timeout > 50 ? 50 : timeout);
        }
        uint64_t drain;
        if (read(rs->wake_fd, &drain, sizeof drain) < 0) {
            /* nothing pending (non-blocking) */
        }
        while (got == 1) {
            rs->ops->announced(x, e, k);
            got = rs->sub ? bfs_remote_announced(rs->sub, 0, -1, &e, &k) : 0;
        }
        rs->ops->release(x, list, n);
    }
    return NULL;
}

/* ---- called by exec.c (exec_internal.h) ---------------------------------------------- */

int bfs_exec_remote_takes(const remote_side *rs)
{
    return rs->workers != 0 || rs->fallback == BFS_REMOTE_WAIT;
}

void bfs_exec_remote_added(remote_side *rs, bfs_exec_rjob *j)
{
    j->t0 = bfs_mono_s();
    j->deadline = j->t0 + rs->wait_ms / 1e3;
    remote_wake(rs);
}

void bfs_exec_remote_stats(const remote_side *rs, bfs_exec_stats *st)
{
    st->remote = 1;
    st->remote_workers = rs->workers;
    bfs_remote_key_id_text(&rs->url.auth, st->remote_key_id, sizeof st->remote_key_id);
}

void bfs_exec_remote_stop(remote_side *rs)
{
    if (!rs)
        return;
    if (rs->started) {
        remote_wake(rs);
        pthread_join(rs->thread, NULL);
    }
    bfs_remote_close(rs->cmd);
    bfs_remote_close(rs->sub);
    close(rs->wake_fd);
    explicit_bzero(&rs->url.auth, sizeof rs->url.auth); /* (the key) */
    free(rs);
}

int bfs_exec_remote_open(bfs_exec *x, bfs_engine *e, const bfs_exec_src_ops *ops,
                         const bfs_pipeline_opts *o, remote_side **out, int *conn_rc,
                         char *conn_err, size_t conn_errlen, char *err, size_t errlen)
{
    *out = NULL;
    *conn_rc = 0;
    remote_side *rs = calloc(1, sizeof *rs);
    if (!rs)
        return bfs_errf(-ENOMEM, err, errlen, "remote: out of memory");
    rs->x = x, rs->e = e, rs->ops = ops;
    int rc = bfs_remote_parse_url(o->remote, &rs->url, err, errlen);
    if (!rc && o->remote_key[0])
        rc = bfs_remote_load_key(o->remote_key, &rs->url.auth, err, errlen);
    if (rc) {
        free(rs);
        return rc;
    }
    if (!rs->url.auth.on)
        fprintf(stderr, "batchfs: remote: batches from Redis are checked, not authenticated (no "
                        "remote_key=): a client that can write to this Redis can make the mount "
                        "serve other bytes (docs/scale-out.md, \"Security\")\n");
    rs->wait_ms = o->remote_wait_ms;
    rs->fallback = o->remote_fallback;
    rs->workers = -1;
    snprintf(rs->canonical, sizeof rs->canonical, "%s", bfs_engine_canonical(e));
    rs->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (rs->wake_fd < 0) {
        rc = -errno;
        free(rs);
        return bfs_errf(rc, err, errlen, "remote: eventfd: %s", bfs_strerror(rc));
    }
    /* the first connection here, so that the mount can say at once what is wrong */
    uint64_t fp = bfs_engine_fingerprint(e);
    int conn = bfs_remote_connect(&rs->url, fp, 2000, &rs->cmd, conn_err, conn_errlen);
    if (conn == 0) {
        bfs_remote_describe(rs->cmd, rs->canonical);
        int w = bfs_remote_workers(rs->cmd, REMOTE_ALIVE_MS);
        rs->workers = w >= 0 ? w : -1;
    } else {
        rs->down = 1;
        rs->next_connect = bfs_mono_s() + 1;
    }
    *conn_rc = conn;
    *out = rs;
    return 0;
}

int bfs_exec_remote_start(remote_side *rs)
{
    rs->started = pthread_create(&rs->thread, NULL, remote_main, rs) == 0;
    return rs->started ? 0 : -EAGAIN;
}
