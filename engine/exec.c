/*
 * exec.c — the executor (see exec.h): the job table and its worker pool (single-flight
 * batches), the finished batches it keeps as the in-memory batch cache, prefetch along the
 * readers' walks, and the host-wide store's glue (cache_dir=). The remote side (remote=)
 * is a job source in engine/exec_remote.c: this file starts it and asks it whether a new
 * job is its (exec_internal.h); it calls the job table back only through the operations
 * this file hands it (SRC_OPS, at "the job source" below: callbacks, so no circle).
 *
 * All job state is guarded by x->lock. A job's states, and the only moves between them
 * (set_state asserts them in debug and sanitizer builds, base/check.h):
 *
 *   PREPARING -> READY      found in the host-wide store (store_lookup)
 *             -> FAILED     its indices could not be planned
 *             -> REMOTE     asked of the remote workers (remote=)
 *             -> RUNNING    computed here
 *   REMOTE    -> READY      fetched from Redis (bfs_exec_src_done)
 *             -> RUNNING    handed to the local workers (bfs_exec_src_give_up)
 *   RUNNING   -> READY      its last slot finished (finish_slot)
 *             -> SEALING    the same in memfd mode: its bytes go into a sealed file first
 *             -> FAILED     a slot failed (bad_sample=fail, a resource)
 *   SEALING   -> READY      (to_memfd done, by the worker that finished it)
 *   READY, FAILED: final; the job leaves the table only by eviction (or acquire drops a
 *   FAILED one whose error was a resource's, to compute it again).
 *
 * PREPARING is written by its creator outside the lock (the header, the indices, the
 * store), REMOTE by the remote thread, RUNNING by the workers, each claiming a few slots
 * at a time (bfs_engine_claim_slots). Workers pick the oldest demanded job first, then the
 * oldest prefetched one, so a reader's request is never stuck behind prefetches. A job is
 * freed only with no reference left (refs: callers' batches, a worker or the remote thread
 * working on it unlocked).
 *
 * Readers (x->rt, guarded by x->lock) are a fixed table of BFS_EXEC_MAX_READERS
 * (exec_readers.c, called only from here).
 * The jobs are the in-memory batch cache's entries: each job embeds its bfs_bc_entry, and
 * the cache (x->bc, cache/batchcache.h) keeps the list of them (the job table), the byte
 * and file budgets, the regrets that grow the passed-batch bound, and evicts (over the
 * budget the batch read farthest ahead goes, least recently used among equals; batches no
 * reader will read are kept to the passed bound), fed the reader table (readers_cb) and
 * calling back drop_job_cb for what it evicted. It has no lock: every call to it but for
 * its memory (bfs_bc_memory: buffers and their pool, batch files, the reaper, under a
 * leaf lock of their own) is made under x->lock, asserted through its ops.held.
 */
#include "engine/exec_internal.h"
#include "engine/exec_readers_internal.h"
#include "cache/batchcache.h"
#include "base/check.h"
#include "base/err.h"

#include <errno.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/io.h"
#include "base/clock.h"
#include "engine/dataset/guard.h"

/* REMOTE: asked of the remote workers (remote=), fetched by the remote thread, or handed
 * to the local workers (RUNNING) when none came in time. SEALING: computed, its bytes
 * being moved into a sealed memory file (memfd mode). */
enum { JOB_PREPARING, JOB_REMOTE, JOB_RUNNING, JOB_SEALING, JOB_READY, JOB_FAILED };

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

/* The cache's view of each state (bfs_bc_entry.state, set with it by set_state). */
static const int CACHE_STATE[] = {
    [JOB_PREPARING] = BFS_BC_MAKING, [JOB_REMOTE] = BFS_BC_FETCHING, [JOB_RUNNING] = BFS_BC_MAKING,
    [JOB_SEALING] = BFS_BC_MAKING,   [JOB_READY] = BFS_BC_READY,     [JOB_FAILED] = BFS_BC_FAILED,
};

struct bfs_batch { /* a job; "batch" is the name callers see */
    /* its entry in the batch cache (cache/batchcache.h; guarded by lock): (epoch, k), the
     * bytes (data: a buffer, or a read-only mapping of fd in memfd mode), fd (the file
     * holding the bytes of a READY batch, or -1: a sealed memfd, or the verified cache_dir
     * entry it came from, never written in place), refs (references held by callers, and
     * the creator while preparing), used (LRU tick); the cache's list is the job table */
    bfs_bc_entry ce;
    bfs_exec *x;
    uint64_t *idx;
    uint32_t len;
    uint32_t claim_slots; /* slots a worker takes per claim (bfs_engine_claim_slots) */
    uint32_t next;        /* next slot to claim */
    uint32_t active;      /* slots being computed */
    uint32_t done;        /* slots finished */
    uint32_t substituted; /* slots holding a substitute for a bad sample: never published */
    int state;
    int demand; /* someone waits for it */
    int rc;
    char err[512];
    bfs_claim *claim;     /* MINE claim in the host-wide store: publish when READY */
    uint64_t seq;         /* creation order (FIFO among equals) */
    bfs_exec_rjob remote; /* the job source's part (exec_internal.h; its thread's while the
                           * job is REMOTE) */
    int detached;         /* out of the job table (a failure to retry), freed at its last unref */
    uint64_t remote_turn; /* the source's round that last handled it (bfs_exec_src_choose;
                           * guarded by lock) */
};

struct bfs_exec {
    bfs_engine *e;
    pthread_mutex_t lock;
#ifdef BFS_LOCK_CHECKS
    _Atomic unsigned long lock_owner; /* pthread_self() of the holder, 0: free */
#endif
    pthread_cond_t work;  /* workers: a slot may be claimable */
    pthread_cond_t ready; /* waiters: a job finished */
    bfs_bc *bc;           /* the batch cache: the job table (its entries), the budgets, the batches'
                           * memory (cache/batchcache.h; guarded by lock but bfs_bc_memory's) */
    uint64_t seq, tick;
    int stop, shutdown;
    bfs_store *store; /* host-wide store, or NULL (set before use, then read-only) */
    int nthreads;     /* threads started */
    int active;       /* workers with id < active may compute (guarded by lock) */
    bfs_exec_rt rt;   /* the readers (exec_readers.c; guarded by lock) */
    int nworkers;     /* worker contexts allocated */
    pthread_t *threads;
    bfs_engine_worker **workers;
    bfs_exec_stats st;       /* counters (guarded by lock) */
    bfs_exec_remote *remote; /* remote workers, or NULL (bfs_exec_set_remote; guarded by lock) */
    uint64_t src_round;      /* rounds of the remote side (src_choose; guarded by lock) */
};

/* The executor's lock. Functions marked "Locked." say LOCKED(x) first: in sanitizer and
 * debug builds (BFS_LOCK_CHECKS, `make SANITIZER=...` or `make DEBUG=1`) each lock and
 * unlock records the holder, and LOCKED aborts with the function's name when the calling
 * thread does not hold the lock; elsewhere it compiles to nothing. */
#ifdef BFS_LOCK_CHECKS
#define LOCKED(x) locked_check((x), __func__)
static void locked_check(const bfs_exec *x, const char *fn)
{
    if (x && atomic_load(&x->lock_owner) != (unsigned long)pthread_self()) { /* NULL: destroy */
        fprintf(stderr, "batchfs: %s called without the executor's lock\n", fn);
        abort();
    }
}
#define OWN(x)    atomic_store(&(x)->lock_owner, (unsigned long)pthread_self())
#define DISOWN(x) atomic_store(&(x)->lock_owner, 0ul)
#else
#define LOCKED(x) ((void)0)
#define OWN(x)    ((void)0)
#define DISOWN(x) ((void)0)
#endif

static void xlock(bfs_exec *x)
{
    pthread_mutex_lock(&x->lock);
    OWN(x);
}

static void xunlock(bfs_exec *x)
{
    DISOWN(x);
    pthread_mutex_unlock(&x->lock);
}

static void xwait(bfs_exec *x, pthread_cond_t *c)
{
    DISOWN(x);
    pthread_cond_wait(c, &x->lock);
    OWN(x);
}

/* Job j moves to state `to`: only along the state machine at the top of this file. Locked. */
static void set_state(bfs_exec *x, bfs_batch *j, int to)
{
    LOCKED(x);
    BFS_ASSERT(j->state >= JOB_PREPARING && j->state <= JOB_FAILED);
    BFS_ASSERT(LEGAL[j->state] & TO(to));
    j->state = to;
    j->ce.state = CACHE_STATE[to];
}

/* Whether the calling thread holds x->lock: the cache's ops.held (checked in debug and
 * sanitizer builds only). */
static int held_cb(const void *arg)
{
#ifdef BFS_LOCK_CHECKS
    const bfs_exec *x = arg;
    return atomic_load(&x->lock_owner) == (unsigned long)pthread_self();
#else
    (void)arg;
    return 1;
#endif
}

/* The job of a cache entry (embedded in it). */
static bfs_batch *job_of(bfs_bc_entry *e)
{
    return (bfs_batch *)(void *)((char *)e - offsetof(bfs_batch, ce));
}

static bfs_batch *find(bfs_exec *x, uint64_t epoch, uint64_t k)
{
    bfs_bc_entry *e = bfs_bc_find(x->bc, epoch, k);
    return e ? job_of(e) : NULL;
}

/* Every job: for (JOBS(x, b)) {...} */
#define JOBS(x, b)                                                                                 \
    bfs_batch *b = job_of_or_null(bfs_bc_entries((x)->bc));                                        \
    b;                                                                                             \
    b = job_of_or_null(b->ce.next)

static bfs_batch *job_of_or_null(bfs_bc_entry *e)
{
    return e ? job_of(e) : NULL;
}

static void free_job(bfs_exec *x, bfs_batch *j);

/* Drop a reference to j; a detached job (acquire) goes with its last one. Locked. */
static void unref(bfs_exec *x, bfs_batch *j)
{
    LOCKED(x);
    BFS_ASSERT(j->ce.refs > 0);
    if (--j->ce.refs == 0 && j->detached)
        free_job(x, j);
}

/* Free what is the job's beyond its memory: the cache dropped it (evicted), or free_job.
 * Locked (the cache calls it under x->lock). */
static void drop_job_cb(void *arg, bfs_bc_entry *e)
{
    bfs_exec *x = arg;
    LOCKED(x);
    (void)x;
    bfs_batch *j = job_of(e);
    BFS_ASSERT(j->ce.refs == 0);
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
static void free_job(bfs_exec *x, bfs_batch *j)
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

static void evict(bfs_exec *x)
{
    bfs_bc_evict(x->bc, 0);
}

/* The job a worker should serve: the oldest demanded with slots left, else the oldest
 * prefetched. Locked. */
static bfs_batch *pick(bfs_exec *x)
{
    LOCKED(x);
    bfs_batch *best = NULL;
    for (JOBS(x, b)) {
        if (b->state != JOB_RUNNING || b->next >= b->len)
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
        set_state(x, j, JOB_FAILED);
        x->st.failed++;
        bfs_bc_give_back(x->bc, j->ce.data, j->ce.size); /* a failed batch keeps only its error */
        j->ce.data = NULL;
    } else {
        x->st.computed++;
        set_state(x, j, bfs_bc_files(x->bc) ? JOB_SEALING : JOB_READY);
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
static void to_memfd(bfs_exec *x, bfs_batch *j, const uint8_t *src)
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

typedef struct worker_arg {
    bfs_exec *x;
    int id;
} worker_arg;

static void *worker_main(void *arg)
{
    worker_arg *a = arg;
    bfs_exec *x = a->x;
    bfs_engine_worker *w = x->workers[a->id];
    int a_id = a->id;
    free(a);
    bfs_guard_thread(); /* token rows read a mapped dataset inside guards */
    xlock(x);
    for (;;) {
        bfs_batch *j = NULL; /* (set by pick before use: gcc cannot tell) */
        while (!x->stop && (a_id >= x->active || !(j = pick(x))))
            xwait(x, &x->work);
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
        if (slot == 0)
            bfs_engine_advise(x->e, j->idx, j->len);
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
            xunlock(x);
            to_memfd(x, j, j->ce.data);
            xlock(x);
            set_state(x, j, JOB_READY);
            pthread_cond_broadcast(&x->ready);
        }
        bfs_claim *claim = NULL;
        if (j->claim && (j->state == JOB_READY || j->state == JOB_FAILED)) {
            claim = j->claim;
            j->claim = NULL;
        }
        if (completed && claim) /* within the cache's budget before the store's I/O */
            evict(x);
        int ready = j->state == JOB_READY;
        /* A substitute stands in for a sample that may be unreadable only for a while (a
         * file being replaced, a flaky disk): the store would serve it to every later
         * mount of the intact dataset as if it were the dataset's batch. */
        int substituted = j->substituted != 0;
        xunlock(x);
        if (claim)
            settle_claim(x, j, claim, ready, substituted);
        xlock(x);
        unref(x, j);
        /* once let go of: a reader that released the batch meanwhile could not evict it
         * (this worker held it), so it may be the one to go */
        if (completed)
            evict(x);
    }
    xunlock(x);
    return NULL;
}

/* ---- the job source (exec_internal.h: the remote side, engine/exec_remote.c) ----------
 * The job-table operations the remote side calls (SRC_OPS; bfs_exec_src_ops documents
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
        unref(x, rjob_job(list[i]));
    evict(x);
    xunlock(x);
}

static void src_announced(bfs_exec *x, uint64_t epoch, uint64_t k)
{
    xlock(x);
    bfs_batch *j = find(x, epoch, k);
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
    set_state(x, j, JOB_RUNNING);
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
        to_memfd(x, j, j->ce.data);
    }
    xlock(x);
    set_state(x, j, JOB_READY);
    x->st.remote_hits++;
    x->st.remote_wait_ns += (uint64_t)((bfs_mono_s() - rj->t0) * 1e9);
    remote_settle(x, j);
    return 0;
}

static const bfs_exec_src_ops SRC_OPS = {
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

int bfs_exec_set_remote(bfs_exec *x, const bfs_pipeline_opts *o, char *err, size_t errlen)
{
    bfs_exec_remote *rs;
    char why[1024] = "";
    int conn;
    int rc = bfs_exec_remote_open(x, x->e, &SRC_OPS, o, &rs, &conn, why, sizeof why, err, errlen);
    if (rc)
        return rc;
    xlock(x);
    x->remote = rs;
    xunlock(x);
    if (bfs_exec_remote_start(rs)) {
        xlock(x);
        x->remote = NULL;
        xunlock(x);
        bfs_exec_remote_stop(rs);
        return bfs_errf(-EAGAIN, err, errlen, "remote: cannot start its thread");
    }
    if (conn)
        return bfs_errf(conn, err, errlen, "%s", why);
    return 0;
}

/* The job table's consistency, walked at destroy (debug and sanitizer builds): states in
 * range, no reference left, a batch file only for a READY job and a REMOTE one's file only
 * while it is REMOTE, no bytes held by a FAILED job, the cache's view of each state, and
 * (bfs_bc_check) the batch buffers the jobs hold, byte for byte, those that the cache's
 * memory counts as given out. Locked. */
static void check_jobs(bfs_exec *x)
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
    }
    bfs_bc_check(x->bc);
}

int bfs_exec_create(bfs_engine *e, int threads, uint64_t cache_bytes, bfs_exec **out)
{
    *out = NULL;
    if (threads <= 0)
        threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    threads = threads < 1 ? 1 : threads > 1024 ? 1024 : threads;
    bfs_exec *x = calloc(1, sizeof *x);
    if (!x)
        return -ENOMEM;
    x->e = e;
    pthread_mutex_init(&x->lock, NULL);
    pthread_cond_init(&x->work, NULL);
    pthread_cond_init(&x->ready, NULL);
    bfs_exec_rt_init(&x->rt, held_cb, x);
    bfs_bc_ops ops = {.arg = x, .readers = readers_cb, .drop = drop_job_cb, .held = held_cb};
    if (bfs_bc_create(&ops, cache_bytes, &x->bc)) {
        bfs_exec_destroy(x);
        return -ENOMEM;
    }
    x->threads = calloc((size_t)threads, sizeof *x->threads);
    x->workers = calloc((size_t)threads, sizeof *x->workers);
    if (!x->threads || !x->workers) {
        bfs_exec_destroy(x);
        return -ENOMEM;
    }
    x->nworkers = threads;
    x->active = threads; /* before any worker reads it */
    for (int i = 0; i < threads; i++) {
        worker_arg *a = malloc(sizeof *a);
        if (!a || bfs_engine_worker_create(e, &x->workers[i])) {
            free(a);
            bfs_exec_destroy(x);
            return -ENOMEM;
        }
        a->x = x, a->id = i;
        int rc = pthread_create(&x->threads[i], NULL, worker_main, a);
        if (rc) {
            free(a);
            bfs_engine_worker_destroy(x->workers[i]);
            x->workers[i] = NULL;
            bfs_exec_destroy(x);
            return -rc;
        }
        x->nthreads++;
    }
    *out = x;
    return 0;
}

void bfs_exec_destroy(bfs_exec *x)
{
    if (!x)
        return;
    xlock(x);
    x->stop = x->shutdown = 1;
    pthread_cond_broadcast(&x->work);
    pthread_cond_broadcast(&x->ready);
    xunlock(x);
    for (int i = 0; i < x->nthreads; i++)
        pthread_join(x->threads[i], NULL);
    for (int i = 0; i < x->nworkers; i++)
        bfs_engine_worker_destroy(x->workers[i]);
    bfs_exec_remote_stop(x->remote); /* (its thread ends: x->stop is set) */
    x->remote = NULL;
    xlock(x);
    if (BFS_CHECKS && x->bc)
        check_jobs(x);
    for (bfs_bc_entry *e; x->bc && (e = bfs_bc_entries(x->bc));) {
        bfs_bc_unlink(x->bc, e);
        free_job(x, job_of(e));
    }
    xunlock(x);
    bfs_bc_destroy(x->bc); /* its memory's reaper releases what it was given, then ends */
    free(x->threads);
    free(x->workers);
    pthread_mutex_destroy(&x->lock);
    pthread_cond_destroy(&x->work);
    pthread_cond_destroy(&x->ready);
    free(x);
}

void bfs_exec_consumed(bfs_exec *x, uint64_t epoch, uint64_t k)
{
    xlock(x);
    bfs_batch *j = find(x, epoch, k);
    if (j)
        j->ce.used = 0; /* oldest possible: LRU evicts it first */
    xunlock(x);
}

void bfs_exec_shutdown(bfs_exec *x)
{
    xlock(x);
    x->shutdown = 1;
    pthread_cond_broadcast(&x->ready);
    xunlock(x);
}

/* Ask the host-wide store for j's bytes (unlocked; j is PREPARING, so only this thread
 * touches it). Returns 1 when j->ce.data now holds the published batch; otherwise 0, with
 * j->claim set when this process should compute and publish it. A batch another daemon
 * is computing is waited for only when a reader demands it (up to STORE_WAIT_MS). */
#define STORE_WAIT_MS 60000
static int store_lookup(bfs_exec *x, bfs_batch *j, int demand, int memfd)
{
    bfs_store_key key = {bfs_engine_fingerprint(x->e), j->ce.epoch, j->ce.k};
    bfs_claim c;
    int rc = bfs_store_claim(x->store, key, &c);
    if (rc == 0 && c.state == BFS_STORE_BUSY) {
        bfs_store_claim_close(&c);
        if (!demand)
            return 0; /* a prefetch computes rather than block its caller */
        rc = bfs_store_wait(x->store, key, STORE_WAIT_MS, &c);
    }
    if (rc)
        return 0;
    if (c.state == BFS_STORE_HIT && c.size == j->ce.size) {
        int fd;
        const uint8_t *map;
        xlock(x);
        int slot = memfd && bfs_bc_file_slot(x->bc);
        xunlock(x);
        if (slot && bfs_store_claim_take(&c, &fd, &map) == 0) {
            /* the entry file is exactly the batch: it backs the batch file itself, no
             * copy (it is never written in place: publication makes a new inode) */
            xlock(x);
            bfs_bc_file_made(x->bc, 0);
            bfs_bc_give_back(x->bc, j->ce.data, j->ce.size);
            j->ce.data = (uint8_t *)map;
            j->ce.fd = fd;
            xunlock(x);
            return 1;
        }
        if (slot) {
            xlock(x);
            bfs_bc_file_made(x->bc, 0);
            xunlock(x);
        }
        if (slot)
            to_memfd(x, j, c.data); /* straight from the entry's mapping */
        else                        /* (memfd mode without a descriptor: served by copying) */
            memcpy(j->ce.data, c.data, j->ce.size);
        bfs_store_claim_close(&c);
        return 1;
    }
    if (c.state == BFS_STORE_MINE) {
        bfs_claim *mine = malloc(sizeof *mine);
        if (mine) {
            *mine = c;
            j->claim = mine;
            return 0;
        }
        bfs_store_abandon(&c);
        return 0;
    }
    bfs_store_claim_close(&c); /* a hit of the wrong size (cannot happen for one
                                * fingerprint): compute instead */
    return 0;
}

void bfs_exec_set_passed_max(bfs_exec *x, uint64_t bytes, int grow)
{
    xlock(x);
    bfs_bc_set_passed_max(x->bc, bytes, grow);
    xunlock(x);
}

void bfs_exec_set_store(bfs_exec *x, bfs_store *s)
{
    x->store = s;
}

/* Batch files the process may hold: its descriptor limit less those open now (the FUSE
 * session, Redis, the store, the dataset, stdio, the log) and a reserve for what opens and
 * closes as batches are computed: a source file and a file being sealed per worker, the
 * reaper's closes not yet done (it is woken at 16: cache/batchmem.c), store claims and
 * publications, and a sixteenth of the limit. At the usual 1,024: ~920; at 64: ~25. */
#define FD_RESERVE 24
static uint64_t fd_budget(int threads)
{
    uint64_t limit = bfs_fd_limit();
    if (limit == UINT64_MAX)
        return UINT64_MAX;
    int open_now = bfs_fd_count();
    uint64_t used =
        (uint64_t)(open_now >= 0 ? open_now : 64) + FD_RESERVE + 2 * (uint64_t)threads + limit / 16;
    return limit > used ? limit - used : 0;
}

void bfs_exec_set_memfd(bfs_exec *x, int on, int huge)
{
    if (on) /* where batch files go is decided before the first (LATER: memfds first) */
        bfs_bc_use_files(bfs_bc_memory(x->bc), huge == 1);
    uint64_t budget = on ? fd_budget(x->nthreads) : UINT64_MAX;
    xlock(x);
    bfs_bc_set_files(x->bc, on, budget, huge == BFS_EXEC_HUGE_LATER);
    xunlock(x);
    if (on && budget < 64)
        fprintf(stderr,
                "batchfs: note: the descriptor limit (ulimit -n %llu) leaves room for %llu "
                "batch files: fewer finished batches are kept, and batches beyond it are "
                "served by copying (raise ulimit -n)\n",
                (unsigned long long)bfs_fd_limit(), (unsigned long long)budget);
}

/* The store's noteworthy events (corrupt entries removed, saves that failed, a full file
 * system) go to the daemon's log like every other message. */
static void store_log_cb(void *arg, const char *msg)
{
    (void)arg;
    fprintf(stderr, "batchfs: %s\n", msg);
}

int bfs_exec_open_store(const bfs_pipeline_opts *o, bfs_store **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!o->cache_dir[0])
        return 0;
    char dir[1024], why[512] = "";
    const char *path = o->cache_dir;
    int rc;
    if (!strcmp(path, "auto")) {
        if ((rc = bfs_store_default_dir(dir, sizeof dir, why, sizeof why)))
            return bfs_errf(rc, err, errlen, "cache_dir=auto: %s", why);
        path = dir;
    }
    bfs_store_opts so = {.budget_bytes = (uint64_t)o->cache_dir_mb << 20, .log_cb = store_log_cb};
    if ((rc = bfs_store_open(path, &so, out, why, sizeof why))) {
        if (!strncmp(why, "cache_dir ", 10)) /* names the directory already */
            return bfs_errf(rc, err, errlen, "%s", why);
        return bfs_errf(rc, err, errlen, "cache_dir=%s: %s", path, why);
    }
    return 0;
}

/* Find or create the job for (epoch, k). Locked on entry and exit; may unlock while
 * preparing a new job. Returns the job with one reference taken, or NULL and *rc. */
static bfs_batch *acquire(bfs_exec *x, uint64_t epoch, uint64_t k, int demand, int *rc)
{
    LOCKED(x);
    bfs_batch *j = find(x, epoch, k);
    if (j && j->state == JOB_FAILED && bfs_err_is_resource(j->rc)) {
        /* the process ran out of memory or descriptors: that may be over now, and unlike
         * a bad sample it says nothing about the batch, so compute it again. A worker may
         * still hold it (settling its claim after waking the readers): then it is only
         * detached, and freed by the last unref. */
        bfs_bc_unlink(x->bc, &j->ce);
        if (j->ce.refs)
            j->detached = 1;
        else
            free_job(x, j);
        j = NULL;
    }
    if (j) {
        j->ce.refs++;
        if (demand) {
            if (j->state == JOB_READY)
                x->st.hits++;
            else
                x->st.joins++;
            j->demand = 1;
            if (j->state == JOB_RUNNING)
                pthread_cond_broadcast(&x->work); /* priority changed */
        }
        return j;
    }
    const bfs_pipeline_opts *o = bfs_engine_opts(x->e);
    uint32_t len = epoch < o->epochs ? bfs_engine_batch_len(x->e, epoch, k) : 0;
    if (!len) {
        *rc = -ERANGE;
        return NULL;
    }
    j = calloc(1, sizeof *j);
    uint64_t size = bfs_engine_batch_bytes(x->e, epoch, k);
    if (j && !(j->ce.data = bfs_bc_take_passed(x->bc, size)))
        j->ce.data = bfs_bc_alloc(bfs_bc_memory(x->bc), size);
    if (!j || !(j->idx = malloc(len * sizeof *j->idx)) || !j->ce.data) {
        if (j) {
            free(j->idx);
            bfs_bc_give_back(x->bc, j->ce.data, size);
        }
        free(j);
        *rc = -ENOMEM;
        return NULL;
    }
    j->x = x;
    j->ce.fd = -1;
    j->remote.fd = -1;
    j->remote.epoch = epoch, j->remote.k = k, j->remote.size = size;
    j->ce.epoch = epoch, j->ce.k = k, j->len = len, j->ce.size = size;
    j->claim_slots = bfs_engine_claim_slots(x->e, epoch, k);
    j->state = JOB_PREPARING;
    j->ce.state = CACHE_STATE[JOB_PREPARING];
    j->demand = demand;
    j->ce.refs = 1;
    j->seq = x->seq++;
    bfs_bc_insert(x->bc, &j->ce); /* (a regret when it was evicted as passed) */
    if (demand)
        x->st.misses++;
    else
        x->st.prefetched++;
    int memfd = bfs_bc_files(x->bc);
    xunlock(x);
    int n = bfs_engine_batch_begin(x->e, epoch, k, j->ce.data, j->idx);
    int hit = n >= 0 && x->store && store_lookup(x, j, demand, memfd);
    xlock(x);
    if (hit) {
        set_state(x, j, JOB_READY);
        x->st.store_hits++;
        pthread_cond_broadcast(&x->ready);
    } else if (n < 0) {
        bfs_bc_give_back(x->bc, j->ce.data, j->ce.size); /* a failed batch keeps only its error */
        j->ce.data = NULL;
        j->rc = n;
        snprintf(j->err, sizeof j->err, "planning epoch %llu batch %llu: %s",
                 (unsigned long long)epoch, (unsigned long long)k, bfs_strerror(n));
        set_state(x, j, JOB_FAILED);
        pthread_cond_broadcast(&x->ready);
    } else if (x->remote && bfs_exec_remote_takes(x->remote)) {
        /* asked of the remote workers first (no worker alive: computed here at once) */
        set_state(x, j, JOB_REMOTE);
        j->remote.buf = j->ce.data;
        bfs_exec_remote_added(x->remote, &j->remote);
        x->st.remote_requested++;
    } else {
        set_state(x, j, JOB_RUNNING);
        pthread_cond_broadcast(&x->work);
    }
    return j;
}

/* The end of a get: wait for job j (acquired, referenced; NULL when acquire failed with
 * rc), then hand it out or drop it with the error. Locked. */
static int get_wait(bfs_exec *x, bfs_batch *j, int rc, uint64_t epoch, uint64_t k, bfs_batch **out,
                    bfs_exec_cancel *cancel, char *err, size_t errlen)
{
    LOCKED(x);
    while (j && j->state < JOB_READY && !x->shutdown &&
           !(cancel && atomic_load_explicit(&cancel->requested, memory_order_relaxed)))
        xwait(x, &x->ready);
    if (j && j->state == JOB_READY) {
        j->ce.used = ++x->tick;
        *out = j;
    } else if (j) {
        /* interrupted: the batch goes on being computed (for the next reader, or this
         * one's retry); only this wait ends */
        rc = j->state == JOB_FAILED ? j->rc : x->shutdown ? -ESHUTDOWN : -EINTR;
        if (err && errlen)
            snprintf(err, errlen, "%s",
                     j->state == JOB_FAILED ? j->err
                     : rc == -EINTR         ? "interrupted"
                                            : "shutting down");
        unref(x, j);
        evict(x);
    } else if (err && errlen) {
        snprintf(err, errlen, "epoch %llu batch %llu: %s", (unsigned long long)epoch,
                 (unsigned long long)k, rc == -ERANGE ? "no such batch" : bfs_strerror(rc));
    }
    return rc;
}

int bfs_exec_get(bfs_exec *x, uint64_t epoch, uint64_t k, bfs_batch **out, char *err, size_t errlen)
{
    return bfs_exec_get_cancel(x, epoch, k, NULL, out, err, errlen);
}

int bfs_exec_get_cancel(bfs_exec *x, uint64_t epoch, uint64_t k, bfs_exec_cancel *cancel,
                        bfs_batch **out, char *err, size_t errlen)
{
    *out = NULL;
    int rc = 0;
    xlock(x);
    if (x->shutdown) {
        xunlock(x);
        return -ESHUTDOWN;
    }
    bfs_batch *j = acquire(x, epoch, k, 1, &rc);
    rc = get_wait(x, j, rc, epoch, k, out, cancel, err, errlen);
    xunlock(x);
    return rc;
}

void bfs_exec_cancel_wait(bfs_exec *x, bfs_exec_cancel *c)
{
    atomic_store(&c->requested, 1);
    xlock(x); /* a waiter between its test and its wait sees the flag */
    pthread_cond_broadcast(&x->ready);
    xunlock(x);
}

int bfs_exec_get_as(bfs_exec *x, uint64_t key, bfs_exec_alive_fn alive, uint64_t epoch, uint64_t k,
                    bfs_exec_cancel *cancel, bfs_batch **out, char *err, size_t errlen)
{
    *out = NULL;
    int rc = 0;
    double t0 = bfs_mono_s();
    xlock(x);
    if (x->shutdown) {
        xunlock(x);
        return -ESHUTDOWN;
    }
    /* k first, demanded and referenced: the workers start it before the prefetches below,
     * and while the reader's position moves to k (so that k counts as read) it cannot be
     * evicted */
    bfs_batch *j = acquire(x, epoch, k, 1, &rc);
    uint32_t id = 0;
    if (j) { /* (no such batch, no memory: no reader moves there) */
        xunlock(x);
        id = bfs_exec_follow(x, key, epoch, k, t0, -1, alive);
        xlock(x);
    }
    rc = get_wait(x, j, rc, epoch, k, out, cancel, err, errlen);
    xunlock(x);
    if (id)
        bfs_exec_reader_waited(x, id, epoch, k, bfs_mono_s() - t0);
    return rc;
}

int bfs_exec_prefetch(bfs_exec *x, uint64_t epoch, uint64_t k)
{
    int rc = 0;
    xlock(x);
    if (x->shutdown) {
        xunlock(x);
        return -ESHUTDOWN;
    }
    bfs_batch *j = acquire(x, epoch, k, 0, &rc);
    if (j) {
        j->ce.used = ++x->tick;
        unref(x, j);
        evict(x);
    }
    xunlock(x);
    return rc;
}

void bfs_exec_get_stats(bfs_exec *x, bfs_exec_stats *st)
{
    xlock(x);
    *st = x->st;
    bfs_bc_stats cs;
    bfs_bc_get_stats(x->bc, &cs);
    st->cached_bytes = cs.cached_bytes;
    st->files = cs.files;
    st->files_refused = cs.files_refused;
    st->evictions = cs.evictions;
    st->evicted_passed = cs.evicted_passed;
    st->evicted_ahead = cs.evicted_ahead;
    st->passed_regrets = cs.passed_regrets;
    st->threads = x->active;
    st->max_threads = x->nthreads;
    st->prefetch = bfs_exec_rt_prefetch(&x->rt);
    st->cache_budget = cs.budget;
    st->file_budget = cs.file_budget == UINT64_MAX ? 0 : cs.file_budget;
    st->fd_limit = bfs_fd_limit() == UINT64_MAX ? 0 : bfs_fd_limit();
    st->passed_budget = cs.passed_max < cs.budget ? cs.passed_max : cs.budget;
    st->in_flight = 0;
    for (JOBS(x, b))
        st->in_flight += b->state < JOB_READY;
    xunlock(x);
    bfs_bc_mem_stats ms;
    bfs_bc_mem_get_stats(bfs_bc_memory(x->bc), &ms);
    st->buffers = ms.buffers;
    st->buffer_allocs = ms.buffer_allocs;
    st->huge_files = ms.huge_files;
    xlock(x);
    st->remote = 0;
    st->remote_workers = 0;
    snprintf(st->remote_key_id, sizeof st->remote_key_id, "none");
    if (x->remote)
        bfs_exec_remote_stats(x->remote, st);
    xunlock(x);
    memset(&st->stages, 0, sizeof st->stages);
    for (int i = 0; i < x->nthreads; i++) {
        bfs_stage_stats w;
        bfs_engine_worker_stats(x->workers[i], &w);
        st->stages.samples += w.samples;
        st->stages.read_ns += w.read_ns;
        st->stages.decode_ns += w.decode_ns;
        st->stages.resize_ns += w.resize_ns;
        st->stages.bad_samples += w.bad_samples;
        st->stages.texts_cut += w.texts_cut;
        st->stages.decode_cropped += w.decode_cropped;
        st->stages.decode_full += w.decode_full;
        st->stages.decode_scaled += w.decode_scaled;
        st->stages.decode_raw += w.decode_raw;
        st->stages.decode_windowed += w.decode_windowed;
    }
    st->stages.encode_ns = bfs_engine_encode_ns(x->e);
}

const uint8_t *bfs_batch_data(const bfs_batch *b)
{
    return b->ce.data;
}

uint64_t bfs_batch_size(const bfs_batch *b)
{
    return b->ce.size;
}

uint32_t bfs_batch_substitutes(const bfs_batch *b)
{
    return b->substituted; /* (final once READY: no worker writes it any more) */
}

int bfs_batch_fd(const bfs_batch *b)
{
    return b->ce.fd;
}

void bfs_batch_release(bfs_batch *b)
{
    if (!b)
        return;
    bfs_exec *x = b->x;
    xlock(x);
    unref(x, b);
    evict(x);
    xunlock(x);
}

/* ---- readers (the table: exec_readers.c, x->rt) ------------------------------------- */

void bfs_exec_reader_waited(bfs_exec *x, uint32_t id, uint64_t epoch, uint64_t k, double wait_s)
{
    xlock(x);
    bfs_exec_rt_waited(&x->rt, id, epoch, k, wait_s);
    xunlock(x);
}

uint32_t bfs_exec_follow(bfs_exec *x, uint64_t key, uint64_t epoch, uint64_t k, double now,
                         double wait_s, bfs_exec_alive_fn alive)
{
    if (!key)
        key = UINT64_MAX; /* 0 marks a free slot */
    xlock(x);
    uint64_t nb = bfs_engine_batches(x->e), ne = bfs_engine_opts(x->e)->epochs;
    uint64_t size = bfs_engine_max_batch_bytes(x->e);
    bfs_bc_stats cs;
    bfs_bc_get_stats(x->bc, &cs);
    bfs_bc_reader walk;
    int depth;
    uint32_t id = bfs_exec_rt_follow(&x->rt, key, epoch, k, now, wait_s, alive, nb,
                                     size ? cs.budget / size : 0, &walk, &depth);
    xunlock(x);
    /* the next `depth` batches of its walk (bfs_bc_walk_next: the model eviction's
     * bfs_bc_next_read counts steps of); the walk of a reader that went on from one epoch
     * to the next before goes on into the next epoch at the same residue: at a training
     * loop's epoch end the workers keep computing, while a reader of one epoch (a
     * validation pass, a scan) costs nothing beyond it */
    uint64_t ep = epoch, next = k;
    for (int d = 1; d <= depth && bfs_bc_walk_next(&walk, nb, ne, &ep, &next) == 0; d++)
        bfs_exec_prefetch(x, ep, next);
    return id;
}

int bfs_exec_readers(bfs_exec *x, double now, bfs_exec_alive_fn alive, bfs_exec_reader *out,
                     int max)
{
    xlock(x);
    int n = bfs_exec_rt_list(&x->rt, now, alive, out, max);
    xunlock(x);
    bfs_exec_rt_sort(out, n);
    return n;
}

void bfs_exec_on_reader_news(bfs_exec *x, void (*fn)(void *), void *arg)
{
    xlock(x);
    bfs_exec_rt_on_news(&x->rt, fn, arg);
    xunlock(x);
}

uint64_t bfs_exec_readers_news(bfs_exec *x)
{
    xlock(x);
    uint64_t n = bfs_exec_rt_news(&x->rt);
    xunlock(x);
    return n;
}

void bfs_exec_set_prefetch(bfs_exec *x, int depth)
{
    xlock(x);
    bfs_exec_rt_set_prefetch(&x->rt, depth);
    xunlock(x);
}

void bfs_exec_set_reader_depth(bfs_exec *x, uint32_t id, int depth)
{
    xlock(x);
    bfs_exec_rt_set_depth(&x->rt, id, depth);
    xunlock(x);
}

void bfs_exec_set_cache_bytes(bfs_exec *x, uint64_t bytes)
{
    xlock(x);
    bfs_bc_set_budget(x->bc, bytes); /* (evicts, then trims the pool to the room left) */
    xunlock(x);
}

int bfs_exec_set_threads(bfs_exec *x, int n)
{
    xlock(x);
    x->active = n < 1 ? 1 : n > x->nthreads ? x->nthreads : n;
    n = x->active;
    pthread_cond_broadcast(&x->work);
    xunlock(x);
    return n;
}
