/*
 * exec_jobs.c — the executor's job table (see exec_jobs_internal.h and exec.c's header
 * for the state machine): the moves between states, references, the worker threads that
 * claim slots and compute them (pick, finish_slot, to_memfd, settle_claim), the batch
 * cache's callbacks (its entries are the jobs: readers_cb, drop_job_cb, held), and the
 * job-table operations the remote side calls back (bfs_job_src_ops: choose a round by need,
 * release it, announcements, batch files, done, give up, counters).
 *
 * Neighbours: engine/exec.c calls it; it calls the batch cache (cache/batchcache.h), the
 * readers' table (exec_readers.c: their walks for the cache and the remote rounds), the
 * engine (samples), the store (publishing): never exec.c, nor exec_remote.c.
 *
 * Locks: x->lock guards the jobs; "Locked." functions run under it. Workers and the
 * remote side's operations take it themselves and never hold it while computing a
 * sample, sealing a file or publishing to the store.
 */
#include "engine/exec_jobs_internal.h"
#include "base/check.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"
#include "engine/dataset/guard.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

/* The moves the state machine above allows: LEGAL[from] has bit `to` set. */
#define TO(st) (1u << (st))
static const unsigned LEGAL[] = {
    [JOB_PREPARING] = TO(JOB_READY) | TO(JOB_FAILED) | TO(JOB_REMOTE) | TO(JOB_RUNNING),
    [JOB_REMOTE] = TO(JOB_READY) | TO(JOB_RUNNING),
    [JOB_RUNNING] = TO(JOB_READY) | TO(JOB_SEALING) | TO(JOB_FAILED),
    [JOB_SEALING] = TO(JOB_READY),
    [JOB_READY] = 0,
    [JOB_FAILED] = 0,
};

/* The cache's view of each state (bfs_bc_entry.state, set with it by bfs_job_set_state). */
static const int CACHE_STATE[] = {
    [JOB_PREPARING] = BFS_BC_MAKING, [JOB_REMOTE] = BFS_BC_FETCHING, [JOB_RUNNING] = BFS_BC_MAKING,
    [JOB_SEALING] = BFS_BC_MAKING,   [JOB_READY] = BFS_BC_READY,     [JOB_FAILED] = BFS_BC_FAILED,
};

/* RUNNING job j leaves x->running. Locked. */
static void run_unlink(bfs_exec *x, bfs_batch *j)
{
    LOCKED(x);
    if (j->run_prev)
        j->run_prev->run_next = j->run_next;
    else
        x->running = j->run_next;
    if (j->run_next)
        j->run_next->run_prev = j->run_prev;
    j->run_prev = j->run_next = NULL;
}

/* Job j moves to state `to`: only along the state machine at the top of exec.c; in
 * x->running while RUNNING. Locked. */
void bfs_job_set_state(bfs_exec *x, bfs_batch *j, int to)
{
    LOCKED(x);
    BFS_ASSERT(j->state >= JOB_PREPARING && j->state <= JOB_FAILED);
    BFS_ASSERT(LEGAL[j->state] & TO(to));
    if (j->state == JOB_RUNNING)
        run_unlink(x, j);
    j->state = to;
    j->ce.state = CACHE_STATE[to];
    if (to == JOB_RUNNING) {
        j->run_prev = NULL;
        j->run_next = x->running;
        if (x->running)
            x->running->run_prev = j;
        x->running = j;
    }
}

/* Whether the calling thread holds x->lock: the cache's ops.held (checked in debug and
 * sanitizer builds only). */
int bfs_job_held(const void *arg)
{
#ifdef BFS_DEBUG_CHECKS
    const bfs_exec *x = arg;
    return atomic_load(&x->lock_owner) == (unsigned long)pthread_self();
#else
    (void)arg;
    return 1;
#endif
}

bfs_batch *bfs_job_find(bfs_exec *x, uint64_t epoch, uint64_t k)
{
    bfs_bc_entry *e = bfs_bc_find(x->bc, epoch, k);
    return e ? job_of(e) : NULL;
}

/* Drop a reference to j; a detached job (acquire) goes with its last one. Locked. */
void bfs_job_unref(bfs_exec *x, bfs_batch *j)
{
    LOCKED(x);
    BFS_ASSERT(j->ce.refs > 0);
    if (--j->ce.refs == 0 && j->detached)
        bfs_job_free(x, j);
}

/* Free what is the job's beyond its memory: the cache dropped it (evicted), or bfs_job_free.
 * Locked (the cache calls it under x->lock). */
static void drop_job_cb(void *arg, bfs_bc_entry *e)
{
    bfs_exec *x = arg;
    LOCKED(x);
    bfs_batch *j = job_of(e);
    BFS_ASSERT(j->ce.refs == 0);
    if (j->state == JOB_RUNNING) /* (at destroy) */
        run_unlink(x, j);
    if (j->claim) {
        bfs_store_abandon(j->claim);
        free(j->claim);
    }
    if (j->remote.fd >= 0)
        close(j->remote.fd);
    free(j->idx);
    free(j);
}

/* Give a job's memory back (its batch file: data maps it, readers of it hold their own; or
 * its buffer), then the rest. Locked. */
void bfs_job_free(bfs_exec *x, bfs_batch *j)
{
    LOCKED(x);
    bfs_bc_entry_release(x->bc, &j->ce);
    drop_job_cb(x, &j->ce);
}

/* The active readers, as the eviction policy takes them, and the batches per epoch (the
 * cache's ops.readers). Locked. */
static int readers_cb(void *arg, bfs_bc_reader *out, uint64_t *nb)
{
    bfs_exec *x = arg;
    LOCKED(x);
    *nb = bfs_engine_batches(x->e);
    return bfs_exec_rt_walks(&x->rt, out);
}

void bfs_job_evict(bfs_exec *x)
{
    bfs_bc_evict(x->bc, 0);
}

/* The job a worker should serve: the oldest demanded with slots left, else the oldest
 * prefetched. Among the RUNNING jobs only (x->running): a walk of the whole job table per
 * claim, ~520 finished token batches, was ~4% of a token daemon's CPU. Locked. */
static bfs_batch *pick(bfs_exec *x)
{
    LOCKED(x);
    bfs_batch *best = NULL;
    for (bfs_batch *b = x->running; b; b = b->run_next) {
        if (b->next >= b->len)
            continue;
        if (!best || b->demand > best->demand || (b->demand == best->demand && b->seq < best->seq))
            best = b;
    }
    return best;
}

/* Locked. Returns 1 when this slot completed the job: it is then FAILED, READY, or
 * SEALING (memfd mode: the caller moves its bytes with to_memfd, then makes it READY).
 * The caller evicts once it let go of the job (each pass over the job table costs a
 * look-up per reader per batch cached: with 512 KiB token batches ~7% of the daemon's
 * CPU went to two passes per batch), and before publishing it to the store as well. */
static int finish_slot(bfs_exec *x, bfs_batch *j)
{
    LOCKED(x);
    j->active--;
    j->done++;
    if (j->active || (j->done < j->len && !j->rc))
        return 0;
    if (j->rc) {
        bfs_job_set_state(x, j, JOB_FAILED);
        x->st.failed++;
        bfs_bc_give_back(x->bc, j->ce.data, j->ce.size); /* a failed batch keeps only its error */
        j->ce.data = NULL;
    } else {
        x->st.computed++;
        /* SEALING: the completing worker has more to do unlocked (batch-level steps, the
         * move into a batch file) before the batch is READY */
        bfs_job_set_state(x, j,
                          bfs_bc_files(x->bc) || bfs_engine_batch_end_needed(x->e) ? JOB_SEALING
                                                                                   : JOB_READY);
    }
    if (j->state != JOB_SEALING)
        pthread_cond_broadcast(&x->ready);
    return 1;
}

/*
 * Move the bytes of job j (SEALING or PREPARING: no other thread touches its data) from
 * src into a new read-only batch file (bfs_bc_to_file), mapped read-only as j->ce.data; j's
 * buffer goes back to the pool. The file never changes after this, so the mount can hand
 * it to the kernel as the batch file's backing file (FUSE passthrough) and readers may map
 * it. On failure (no file, no memory, no descriptor left within the budget: bfs_bc_file_slot) j
 * keeps its buffer, with src copied into it if needed, and j->ce.fd stays -1: the batch is
 * still served, by copying. Unlocked.
 */
void bfs_job_to_memfd(bfs_exec *x, bfs_batch *j, const uint8_t *src)
{
    const uint8_t *map;
    int fd, rc = -EMFILE;
    xlock(x);
    int slot = bfs_bc_file_slot(x->bc);
    xunlock(x);
    if (slot)
        rc = bfs_bc_to_file(bfs_bc_memory(x->bc), src, j->ce.size, &map, &fd);
    xlock(x);
    if (slot)
        bfs_bc_file_made(x->bc, rc);
    if (rc) {
        xunlock(x);
        if (src != j->ce.data)
            memcpy(j->ce.data, src, j->ce.size);
        return;
    }
    bfs_bc_give_back(x->bc, j->ce.data, j->ce.size);
    j->ce.data = (uint8_t *)map;
    j->ce.fd = fd;
    xunlock(x);
}

/* Publish a finished job's bytes to the host-wide store under its MINE claim, or give the
 * claim up (failed, or holding a substitute). Unlocked: I/O; the bytes of a READY batch
 * never change. */
static void settle_claim(bfs_exec *x, bfs_batch *j, bfs_claim *claim, int ready, int substituted)
{
    if (ready && !substituted) {
        if (bfs_store_publish(claim, j->ce.data, j->ce.size) == 0) {
            xlock(x);
            x->st.store_publishes++;
            xunlock(x);
        }
    } else {
        bfs_store_abandon(claim);
        if (ready) {
            xlock(x);
            x->st.store_withheld++;
            xunlock(x);
        }
    }
    free(claim);
}

/* The error of a batch that failed with rc, `what` saying why (the sample and the call):
 * for want of a descriptor (EMFILE, ENFILE) the sample is not at fault, the limit is what
 * to change. (The mount's log line names the batch.) */
static void batch_error(char *out, size_t len, int rc, const char *what)
{
    if (rc == -EMFILE)
        snprintf(out, len,
                 "out of file descriptors, all %llu the daemon may open are in use (raise its "
                 "limit: `ulimit -n` before starting batchfs, LimitNOFILE= under systemd; "
                 "then read the batch again): %s",
                 (unsigned long long)bfs_fd_limit(), what);
    else if (rc == -ENFILE)
        snprintf(out, len,
                 "the system's table of open files is full (raise fs.file-max or close files "
                 "elsewhere, then read the batch again): %s",
                 what);
    else
        snprintf(out, len, "%s", what);
}

void *bfs_job_worker_main(void *arg)
{
    bfs_job_worker_arg *a = arg;
    bfs_exec *x = a->x;
    bfs_engine_worker *w = x->workers[a->id];
    int a_id = a->id;
    free(a);
    char name[16];
    snprintf(name, sizeof name, "bfs-worker-%d", a_id % 1000);
    pthread_setname_np(pthread_self(), name);
    bfs_guard_thread(); /* token rows read a mapped dataset inside guards */
    xlock(x);
    for (;;) {
        bfs_batch *j = NULL; /* (set by pick before use: gcc cannot tell) */
        while (!x->stop && (a_id >= x->active || !(j = pick(x))))
            xwait(x, a_id >= x->active ? &x->parked : &x->work);
        if (x->stop)
            break;
        /* a claim of one slot (an image), or of several when slots are cheap (rows of
         * tokens): each claim costs a pass over the job table and the lock */
        uint32_t slot = j->next, n = j->claim_slots;
        if (n > j->len - slot)
            n = j->len - slot;
        j->next += n;
        j->active++;
        xunlock(x);
        /* cold data: when a batch starts, the kernel reads all its samples' payloads while
         * the workers decode the first ones. Not when the job is created: read-ahead for
         * prefetched batches queued on the disk ahead of the demanded batch's reads (its
         * first batch took 2x as long under a 200 MB/s throttle). */
        if (slot == 0 && !j->advised)
            bfs_engine_advise(x->e, j->ce.epoch, j->idx, j->len);
        char err[512] = "";
        int rc = 0;
        uint32_t subs = 0;
        for (uint32_t s = slot; s < slot + n && !rc; s++) {
            rc = bfs_engine_sample(x->e, w, j->ce.epoch, j->ce.k, s, j->idx[s], j->ce.data, err,
                                   sizeof err);
            if (rc == BFS_ENGINE_SUBSTITUTED) {
                subs++;
                rc = 0;
            }
        }
        if (!rc) /* after the claim's reads: a dataset changed in place during them */
            rc = bfs_engine_claim_end(x->e, j->ce.epoch, j->ce.k, err, sizeof err);
        xlock(x);
        j->substituted += subs;
        j->done += n - 1; /* finish_slot counts the last */
        if (rc && !j->rc) {
            j->rc = rc;
            batch_error(j->err, sizeof j->err, rc, err[0] ? err : bfs_strerror(rc));
            j->next = j->len; /* claim nothing more of a failed batch */
        }
        j->ce.refs++; /* keep j alive while it is sealed and its claim settled, unlocked */
        int completed = finish_slot(x, j);
        if (completed && j->state == JOB_SEALING) {
            int to_file = bfs_bc_files(x->bc); /* (asked under the lock) */
            xunlock(x);
            bfs_engine_batch_end(x->e, w, j->ce.epoch, j->ce.k, j->ce.data);
            if (to_file)
                bfs_job_to_memfd(x, j, j->ce.data);
            xlock(x);
            bfs_job_set_state(x, j, JOB_READY);
            pthread_cond_broadcast(&x->ready);
        }
        bfs_claim *claim = NULL;
        if (j->claim && (j->state == JOB_READY || j->state == JOB_FAILED)) {
            claim = j->claim;
            j->claim = NULL;
        }
        if (completed && claim) /* within the cache's budget before the store's I/O */
            bfs_job_evict(x);
        int ready = j->state == JOB_READY;
        /* A substitute stands in for a sample that may be unreadable only for a while (a
         * file being replaced, a flaky disk): the store would serve it to every later
         * mount of the intact dataset as if it were the dataset's batch. */
        int substituted = j->substituted != 0;
        if (claim) { /* (the lock kept otherwise: a release and a take again per claim) */
            xunlock(x);
            settle_claim(x, j, claim, ready, substituted);
            xlock(x);
        }
        bfs_job_unref(x, j);
        /* once let go of: a reader that released the batch meanwhile could not evict it
         * (this worker held it), so it may be the one to go */
        if (completed)
            bfs_job_evict(x);
    }
    xunlock(x);
    return NULL;
}

bfs_bc_ops bfs_job_cache_ops(bfs_exec *x)
{
    return (bfs_bc_ops){.arg = x, .readers = readers_cb, .drop = drop_job_cb, .held = bfs_job_held};
}

/* ---- the job source (exec_internal.h: the remote side, engine/exec_remote.c) ----------
 * The job-table operations the remote side calls (bfs_job_src_ops; bfs_exec_src_ops documents
 * them): each takes x->lock itself. */

static int src_stopping(bfs_exec *x)
{
    xlock(x);
    int stop = x->stop;
    xunlock(x);
    return stop;
}

/* A REMOTE job's rank in a round: awaited (a reader waits for it) before prefetched; among
 * prefetches the one their nearest reader reads sooner (bfs_bc_next_read, the eviction's
 * walk model; UINT64_MAX: no reader will), then the older. */
typedef struct remote_rank {
    bfs_batch *j;
    uint64_t next; /* 0: awaited; else 1 + steps until a reader reads it (saturating) */
} remote_rank;

/* Whether a ranks before b: by need (next), then the older (seq). */
static int remote_before(const remote_rank *a, const remote_rank *b)
{
    return a->next != b->next ? a->next < b->next : a->j->seq < b->j->seq;
}

/* Whether a has waited longer than b for a turn: the older last turn, then the older job. */
static int remote_longer(const bfs_batch *a, const bfs_batch *b)
{
    return a->remote_turn != b->remote_turn ? a->remote_turn < b->remote_turn : a->seq < b->seq;
}

/*
 * The REMOTE jobs this round handles, in the order they are handled (each referenced),
 * at most max (at most BFS_EXEC_SRC_MAX); returns how many. A job is requested from Redis
 * at its first turn, so this order is the order in which jobs enter the stream, and
 * workers take them in that order: the batches readers wait for first (the oldest first),
 * then prefetches nearest their reader first. When more than max are REMOTE, the last
 * `fair` places go to the jobs that have waited longest since their last turn, so none
 * starves (a far prefetch, or one no reader will read, still gets a turn within about
 * pending / fair rounds, and with it its request and its remote_wait_ms deadline).
 * "Awaited" is `demand`: a reader asked for the batch itself (it stays so when that
 * reader's wait was interrupted: its retry asks for it again).
 */
static int src_choose(bfs_exec *x, bfs_exec_rjob **out, int max, int fair, int *memfd)
{
    BFS_ASSERT(max > 0 && max <= BFS_EXEC_SRC_MAX && fair >= 0 && fair < max);
    bfs_batch *list[BFS_EXEC_SRC_MAX];
    remote_rank top[BFS_EXEC_SRC_MAX]; /* the neediest, in order */
    xlock(x);
    *memfd = bfs_bc_files(x->bc);
    bfs_bc_reader rd[BFS_BC_MAX_READERS];
    uint64_t nb, round = ++x->src_round;
    int nrd = readers_cb(x, rd, &nb);
    int n = 0;
    uint64_t pending = 0;
    for (JOBS(x, b)) {
        if (b->state != JOB_REMOTE)
            continue;
        pending++;
        uint64_t steps = b->demand ? 0 : bfs_bc_next_read(rd, nrd, nb, b->ce.epoch, b->ce.k);
        remote_rank r = {b, b->demand ? 0 : steps == UINT64_MAX ? UINT64_MAX : steps + 1};
        if (n == max && !remote_before(&r, &top[n - 1]))
            continue;
        int i = n < max ? n++ : n - 1; /* (a full table drops its last) */
        for (; i > 0 && remote_before(&r, &top[i - 1]); i--)
            top[i] = top[i - 1];
        top[i] = r;
    }
    if (pending > (uint64_t)max)
        n = max - fair;
    for (int i = 0; i < n; i++) {
        list[i] = top[i].j;
        list[i]->remote_turn = round;
    }
    int by_need = n;
    if (pending > (uint64_t)max) { /* the rest: those that waited longest for a turn */
        for (JOBS(x, b)) {
            if (b->state != JOB_REMOTE || b->remote_turn == round)
                continue;
            if (n == max && !remote_longer(b, list[n - 1]))
                continue;
            int i = n < max ? n++ : n - 1;
            for (; i > by_need && remote_longer(b, list[i - 1]); i--)
                list[i] = list[i - 1];
            list[i] = b;
        }
        for (int i = by_need; i < n; i++)
            list[i]->remote_turn = round;
    }
    for (int i = 0; i < n; i++) {
        list[i]->ce.refs++;
        out[i] = &list[i]->remote;
    }
    xunlock(x);
    return n;
}

/* The job of a source's rjob (embedded in it). */
static bfs_batch *rjob_job(bfs_exec_rjob *rj)
{
    return (bfs_batch *)(void *)((char *)rj - offsetof(bfs_batch, remote));
}

static void src_release(bfs_exec *x, bfs_exec_rjob **list, int n)
{
    xlock(x);
    for (int i = 0; i < n; i++)
        bfs_job_unref(x, rjob_job(list[i]));
    bfs_job_evict(x);
    xunlock(x);
}

static void src_announced(bfs_exec *x, uint64_t epoch, uint64_t k)
{
    xlock(x);
    bfs_batch *j = bfs_job_find(x, epoch, k);
    if (j && j->state == JOB_REMOTE)
        j->remote.announced = 1;
    xunlock(x);
}

static void src_open_file(bfs_exec *x, bfs_exec_rjob *rj)
{
    rj->fd = bfs_bc_file_open(bfs_bc_memory(x->bc), rj->size, &rj->sealable);
}

/* Close a REMOTE job's batch file, if it has one. */
static void remote_file_close(bfs_exec_rjob *rj)
{
    if (rj->fd >= 0) {
        close(rj->fd);
        rj->fd = -1;
    }
}

static void src_give_up(bfs_exec *x, bfs_exec_rjob *rj)
{
    bfs_batch *j = rjob_job(rj);
    xlock(x);
    remote_file_close(rj);
    bfs_job_set_state(x, j, JOB_RUNNING);
    x->st.remote_fallbacks++;
    pthread_cond_broadcast(&x->work);
    xunlock(x);
}

static void src_count(bfs_exec *x, int which)
{
    xlock(x);
    if (which == BFS_EXEC_SRC_DECLINED)
        x->st.remote_declined++;
    else if (which == BFS_EXEC_SRC_CORRUPT)
        x->st.remote_corrupt++;
    else
        x->st.remote_errors++;
    xunlock(x);
}

/* The end of a REMOTE job that became READY or FAILED (set by the caller, under x->lock,
 * which this releases): wake its readers, then settle its cache_dir claim. */
static void remote_settle(bfs_exec *x, bfs_batch *j)
{
    LOCKED(x);
    bfs_claim *claim = j->claim;
    int ready = j->state == JOB_READY;
    j->claim = NULL;
    pthread_cond_broadcast(&x->ready);
    xunlock(x);
    if (claim)
        settle_claim(x, j, claim, ready, 0);
}

static int src_done(bfs_exec *x, bfs_exec_rjob *rj, int memfd)
{
    bfs_batch *j = rjob_job(rj);
    if (rj->fd >= 0) {
        const uint8_t *map;
        int fd;
        int rc =
            bfs_bc_file_seal(bfs_bc_memory(x->bc), rj->fd, rj->sealable, j->ce.size, &map, &fd);
        rj->fd = -1; /* (sealed, or closed) */
        if (rc)
            return -1;
        xlock(x);
        bfs_bc_give_back(x->bc, j->ce.data, j->ce.size); /* (unwritten: the value is in fd) */
        j->ce.data = (uint8_t *)map;
        j->ce.fd = fd;
        xunlock(x);
    } else if (memfd) {
        bfs_job_to_memfd(x, j, j->ce.data);
    }
    xlock(x);
    bfs_job_set_state(x, j, JOB_READY);
    x->st.remote_hits++;
    x->st.remote_wait_ns += (uint64_t)((bfs_mono_s() - rj->t0) * 1e9);
    remote_settle(x, j);
    return 0;
}

const bfs_exec_src_ops bfs_job_src_ops = {
    .lock = xlock,
    .unlock = xunlock,
    .stopping = src_stopping,
    .choose = src_choose,
    .release = src_release,
    .announced = src_announced,
    .open_file = src_open_file,
    .done = src_done,
    .give_up = src_give_up,
    .count = src_count,
};

/* The job table's consistency, walked at destroy (debug and sanitizer builds): states in
 * range, no reference left, a batch file only for a READY job and a REMOTE one's file only
 * while it is REMOTE, no bytes held by a FAILED job, the cache's view of each state, the
 * RUNNING jobs and those of x->running one and the same, and
 * (bfs_bc_check) the batch buffers the jobs hold, byte for byte, those that the cache's
 * memory counts as given out. Locked. */
void bfs_job_check_all(bfs_exec *x)
{
    LOCKED(x);
    for (JOBS(x, j)) {
        BFS_ASSERT(j->state >= JOB_PREPARING && j->state <= JOB_FAILED);
        BFS_ASSERT(j->ce.refs == 0);
        BFS_ASSERT(j->ce.fd < 0 || j->state == JOB_READY);
        BFS_ASSERT(j->remote.fd < 0 || j->state == JOB_REMOTE);
        BFS_ASSERT(j->state != JOB_FAILED || !j->ce.data);
        BFS_ASSERT(j->done <= j->len && j->next <= j->len);
        BFS_ASSERT(j->ce.state == CACHE_STATE[j->state]);
        int listed = 0;
        for (bfs_batch *r = x->running; r && !listed; r = r->run_next)
            listed = r == j;
        BFS_ASSERT(listed == (j->state == JOB_RUNNING));
    }
    bfs_bc_check(x->bc);
}
