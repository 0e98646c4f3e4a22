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
 * Readers (x->readers, guarded by x->lock) are a fixed table of BFS_EXEC_MAX_READERS.
 * The finished jobs are the in-memory batch cache: which to evict is cache/batchcache.h's
 * policy, fed the reader table (over the budget the batch read farthest ahead goes, least
 * recently used among equals; batches no reader will read are kept to passed_max); their
 * memory (buffers and their pool, batch files, the reaper that releases them) is
 * cache/batchcache.h's bfs_bc_mem, under a leaf lock of its own taken inside x->lock.
 */
#include "engine/exec_internal.h"
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
#include "base/mix.h"
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

#define MAX_FAILED   1024                  /* failed batches remembered (their error only) */
#define PASSED_FIRST ((uint64_t)256 << 20) /* the adaptive passed-batch bound's start */
#define GHOSTS       1024u /* batches evicted as passed, remembered (a direct-mapped table) */

struct bfs_batch { /* a job; "batch" is the name callers see */
    bfs_exec *x;
    uint64_t epoch, k;
    uint8_t *data; /* malloc'ed, or a read-only mapping of fd (memfd mode) */
    uint64_t size;
    int fd; /* the file holding the bytes of a READY batch (memfd mode), or -1: a sealed
             * memfd, or the verified cache_dir entry it came from (never written in place) */
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
    int refs;         /* references held by callers (and the creator while preparing) */
    bfs_claim *claim; /* MINE claim in the host-wide store: publish when READY */
    uint64_t seq;     /* creation order (FIFO among equals) */
    uint64_t used;    /* LRU tick */
    struct bfs_batch *next_job;
    bfs_exec_rjob remote; /* the job source's part (exec_internal.h; its thread's while the
                           * job is REMOTE) */
    int detached;         /* out of the job table (a failure to retry), freed at its last unref */
    uint64_t remote_turn; /* the source's round that last handled it (bfs_exec_src_choose;
                           * guarded by lock) */
};

typedef struct reader {
    uint64_t key; /* 0: free slot */
    uint32_t id;
    uint64_t epoch, k;
    int64_t stride;
    int depth;   /* own depth, or -1: x->prefetch */
    int crossed; /* it went on from one epoch to the next (continues()) at least once */
    int lex;     /* it walks the names' string order (a shell's glob), not a stride */
    int lex_run; /* its last steps that followed that order, in a row */
    int known;   /* its walk is known: its next batches are prefetched (bfs_exec_follow) */
    uint64_t batches;
    double asked;  /* when it asked for its last batch */
    double waited; /* how long it waited for that batch */
    double own_s, wait_s;
} reader;

struct bfs_exec {
    bfs_engine *e;
    pthread_mutex_t lock;
#ifdef BFS_LOCK_CHECKS
    _Atomic unsigned long lock_owner; /* pthread_self() of the holder, 0: free */
#endif
    pthread_cond_t work;  /* workers: a slot may be claimable */
    pthread_cond_t ready; /* waiters: a job finished */
    bfs_batch *jobs;      /* every job, any state (guarded by lock) */
    uint64_t seq, tick;
    uint64_t cache_bytes; /* budget for finished unreferenced jobs */
    uint64_t passed_max;  /* of which at most this no active reader will read */
    int passed_fixed;     /* no doubling on regrets (bfs_exec_set_passed_max) */
    int huge_later;       /* huge-page batch files from the first passed eviction on */
    struct {
        uint64_t epoch1, k; /* epoch + 1 (0: empty), batch */
    } ghosts[GHOSTS];       /* recently evicted as passed, for regrets */
    int stop, shutdown;
    int memfd;             /* finished batches go to sealed memfds (guarded by lock) */
    uint64_t file_budget;  /* batch files (a descriptor each) that may be held: the process's
                            * descriptor limit less a reserve (fd_budget); UINT64_MAX: no
                            * limit (guarded by lock) */
    uint64_t files_making; /* batch files being made now, counted against it (to_memfd) */
    uint64_t files_fresh;  /* files granted since the last count (st.files, by evict_for) */
    int said_files;        /* the log said the budget was reached */
    bfs_bc_mem *mem;       /* batch buffers, batch files, the reaper (cache/batchcache.h) */
    bfs_store *store;      /* host-wide store, or NULL (set before use, then read-only) */
    int nthreads;          /* threads started */
    int active;            /* workers with id < active may compute (guarded by lock) */
    int prefetch;          /* default depth per reader (guarded by lock) */
    reader readers[BFS_EXEC_MAX_READERS]; /* guarded by lock */
    uint32_t next_reader_id;              /* guarded by lock */
    uint64_t reader_news;                 /* guarded by lock: bfs_exec_readers_news */
    void (*news_fn)(void *);              /* guarded by lock: bfs_exec_on_reader_news */
    void *news_arg;
    int nworkers; /* worker contexts allocated */
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
}

static bfs_batch *find(bfs_exec *x, uint64_t epoch, uint64_t k)
{
    for (bfs_batch *b = x->jobs; b; b = b->next_job)
        if (b->epoch == epoch && b->k == k)
            return b;
    return NULL;
}

static void unlink_job(bfs_exec *x, bfs_batch *j)
{
    for (bfs_batch **p = &x->jobs; *p; p = &(*p)->next_job)
        if (*p == j) {
            *p = j->next_job;
            return;
        }
}

static void free_job(bfs_exec *x, bfs_batch *j);

/* Drop a reference to j; a detached job (acquire) goes with its last one. Locked. */
static void unref(bfs_exec *x, bfs_batch *j)
{
    LOCKED(x);
    BFS_ASSERT(j->refs > 0);
    if (--j->refs == 0 && j->detached)
        free_job(x, j);
}

/* What the cache budget has left for pooled buffers: the budget less the finished batches
 * held (as of the last eviction). Locked. */
static uint64_t room(const bfs_exec *x)
{
    LOCKED(x);
    return x->st.cached_bytes < x->cache_bytes ? x->cache_bytes - x->st.cached_bytes : 0;
}

/* Give a job's memory back: its batch file (memfd mode: data maps it; readers of it hold
 * their own) or its buffer. Locked. */
static void free_job(bfs_exec *x, bfs_batch *j)
{
    LOCKED(x);
    BFS_ASSERT(j->refs == 0);
    if (j->fd >= 0)
        bfs_bc_release(x->mem, j->data, j->size, j->fd);
    else
        bfs_bc_free(x->mem, j->data, j->size, room(x));
    if (j->claim) {
        bfs_store_abandon(j->claim);
        free(j->claim);
    }
    if (j->remote.fd >= 0)
        close(j->remote.fd);
    free(j->idx);
    free(j);
}

/* The active readers, as the eviction policy takes them. Locked. */
static int reader_table(const bfs_exec *x, bfs_bc_reader *out)
{
    LOCKED(x);
    int n = 0;
    for (int i = 0; i < BFS_EXEC_MAX_READERS; i++) {
        const reader *r = &x->readers[i];
        if (r->key)
            out[n++] = (bfs_bc_reader){r->epoch, r->k, r->stride, r->crossed, r->lex};
    }
    return n;
}

/* The passed-batch bound adapts. Keeping finished batches no reader will read costs
 * memory that, on VMs that hand free memory back to the host, is fresh for every batch
 * (docs/engine.md, "Batch memory"); it pays only when a reader comes back for one (an
 * epoch read again, a job that starts later). So the bound starts at PASSED_FIRST, and
 * each regret — a new job for a batch evicted as passed, remembered here — doubles it, up
 * to the cache's budget. */
static uint32_t ghost_slot(uint64_t epoch, uint64_t k)
{
    return (uint32_t)(bfs_mix64(epoch * 0x9E3779B97F4A7C15ull ^ k) % GHOSTS);
}

/* Batch (epoch, k) was evicted as passed: remembered for regrets; and from now on memory
 * is recycled, so BFS_EXEC_HUGE_LATER's huge pages start (bfs_exec_set_memfd). Locked. */
static void passed_evicted(bfs_exec *x, uint64_t epoch, uint64_t k)
{
    LOCKED(x);
    if (x->huge_later) {
        x->huge_later = 0;
        bfs_bc_use_huge(x->mem);
    }
    uint32_t i = ghost_slot(epoch, k);
    x->ghosts[i].epoch1 = epoch + 1, x->ghosts[i].k = k;
}

/* A new job for (epoch, k): a regret when it was evicted as passed. Locked. */
static void ghost_check(bfs_exec *x, uint64_t epoch, uint64_t k)
{
    LOCKED(x);
    uint32_t i = ghost_slot(epoch, k);
    if (x->ghosts[i].epoch1 != epoch + 1 || x->ghosts[i].k != k)
        return;
    x->ghosts[i].epoch1 = 0;
    x->st.passed_regrets++;
    if (!x->passed_fixed && x->passed_max < x->cache_bytes)
        x->passed_max = x->passed_max > x->cache_bytes / 2 ? x->cache_bytes : 2 * x->passed_max;
}

/* Evict finished, unreferenced jobs until within budget, as the policy of
 * cache/batchcache.h says: first what no active reader will read (LRU first), then what
 * the nearest reader will read last. What no active reader
 * will read is also kept to passed_max bytes even under budget, so that a daemon reading
 * an epoch larger than that recycles memory it touched moments ago instead of growing to
 * the whole budget: fresh memory costs a page fault per page, and on VMs that hand freed
 * memory back to the host (virtio free page reporting) ~2 ms per MiB more (measured: a
 * 38 MB batch file 80-96 ms on cold pages, 2 ms on recycled huge pages), as much as half
 * of computing that batch (see docs/engine.md, "Batch memory", for the measurements: a
 * sequential reader fell from 2,500 to 1,400 images/s after 1.4 GB without this bound).
 * A re-read of a batch evicted this way is computed again, identically (a regret, which
 * raises passed_max: see above). Batch files are bounded by file_budget as well (one
 * descriptor each: a daemon of small batches at the usual limit of 1,024 descriptors ran
 * out after ~1,000 batches, and every open of its sources failed), with room left for
 * `need` more; returns the batch files held then. Locked. Failed jobs keep only their error
 * (failures are deterministic: a retry would fail again), at most MAX_FAILED of them;
 * acquire drops those that failed for lack of a resource (bfs_err_is_resource), which are
 * not. */
static uint64_t evict_for(bfs_exec *x, uint64_t need)
{
    LOCKED(x);
    bfs_bc_reader rd[BFS_EXEC_MAX_READERS];
    int nrd = reader_table(x, rd);
    uint64_t nb = bfs_engine_batches(x->e);
    for (;;) {
        unsigned failed = 0;
        bfs_batch *old_failed = NULL;
        bfs_bc_choice c;
        bfs_bc_begin(&c);
        uint64_t kept_files = x->files_making; /* files that cannot go now */
        for (bfs_batch *b = x->jobs; b; b = b->next_job) {
            /* a REMOTE job's file is the remote thread's (remote_fd is not read here, under
             * the lock: that thread sets it unlocked): counted as held in memfd mode */
            kept_files += (b->state == JOB_REMOTE && x->memfd) +
                          (b->fd >= 0 && (b->refs || b->state != JOB_READY));
            if (b->refs)
                continue;
            if (b->state == JOB_FAILED) {
                failed++;
                if (!old_failed || b->used < old_failed->used)
                    old_failed = b;
            }
            if (b->state == JOB_READY)
                bfs_bc_offer(&c, b, b->size, b->used, bfs_bc_next_read(rd, nrd, nb, b->epoch, b->k),
                             b->fd >= 0);
        }
        x->st.cached_bytes = c.held;
        x->st.files = c.files + kept_files;
        x->files_fresh = 0; /* (counted now: as files_making, or held) */
        uint64_t files_max =
            x->file_budget > kept_files + need ? x->file_budget - kept_files - need : 0;
        int passed = 0;
        bfs_batch *victim =
            failed > MAX_FAILED
                ? old_failed
                : (bfs_batch *)bfs_bc_victim(&c, x->cache_bytes, files_max, x->passed_max, &passed);
        if (!victim)
            return x->st.files;
        unlink_job(x, victim);
        if (victim->state == JOB_READY) {
            x->st.evictions++;
            if (passed) {
                x->st.evicted_passed++;
                passed_evicted(x, victim->epoch, victim->k);
            } else
                x->st.evicted_ahead++;
            BFS_ASSERT(x->st.cached_bytes >= victim->size); /* (held: the sum offered) */
            x->st.cached_bytes -= victim->size;
        }
        free_job(x, victim);
    }
}

static void evict(bfs_exec *x)
{
    evict_for(x, 0);
}

/* Room for one more batch file (a descriptor) within the budget, after evicting for it
 * as for memory: then it is counted as being made (the caller makes it and takes it off
 * files_making), and 1 is returned. Else 0: the batch stays in its buffer and is served
 * by copying (bfs_batch_fd -1), counted in files_refused, and said once in the log.
 * Below the budget by the last count (each finished batch makes one) no pass over the
 * jobs is made for it: the executor keeps to one pass per finished batch (finish_slot).
 * Locked. */
static int file_slot(bfs_exec *x)
{
    LOCKED(x);
    if (x->file_budget == UINT64_MAX || x->st.files + x->files_fresh < x->file_budget ||
        evict_for(x, 1) < x->file_budget) {
        x->files_making++;
        x->files_fresh++;
        return 1;
    }
    x->st.files_refused++;
    if (!x->said_files) {
        x->said_files = 1;
        fprintf(stderr,
                "batchfs: the descriptor limit (ulimit -n %llu) holds %llu batch files, all "
                "in use by open batches: further batches are served by copying until some "
                "close (raise ulimit -n for more)\n",
                (unsigned long long)bfs_fd_limit(), (unsigned long long)x->file_budget);
    }
    return 0;
}

/*
 * A buffer for a new job of size bytes taken from a finished batch that no active reader
 * will read (the least recently used of them), when the batches in buffers, finished and
 * in the making, leave the cache's budget no room for the new one: evicted now rather
 * than once the new one finishes, so its memory, touched moments ago, is reused instead
 * of fresh memory (a page fault and zeroing per page; ~2 ms per MiB on VMs that give
 * freed memory back to the host). Without this, a cache full at its budget (a small
 * cache_mb, or --bench) allocated a fresh buffer for most batches: the pool keeps more
 * than two only within the budget's room. Only batches held in buffers (not batch files:
 * readers may map those). NULL when there is room or no such batch. Locked.
 */
static uint8_t *take_passed_buffer(bfs_exec *x, uint64_t size)
{
    LOCKED(x);
    uint64_t held = 0; /* in buffers: finished, and in the making */
    for (bfs_batch *b = x->jobs; b; b = b->next_job)
        if (b->fd < 0 && b->data)
            held += b->size;
    if (held + size <= x->cache_bytes)
        return NULL;
    bfs_bc_reader rd[BFS_EXEC_MAX_READERS];
    int nrd = reader_table(x, rd);
    uint64_t nb = bfs_engine_batches(x->e);
    bfs_batch *victim = NULL;
    for (bfs_batch *b = x->jobs; b; b = b->next_job)
        if (!b->refs && b->state == JOB_READY && b->fd < 0 && b->size == size &&
            (!victim || b->used < victim->used) &&
            bfs_bc_next_read(rd, nrd, nb, b->epoch, b->k) == UINT64_MAX)
            victim = b;
    if (!victim)
        return NULL;
    uint8_t *data = victim->data;
    unlink_job(x, victim);
    x->st.evictions++;
    x->st.evicted_passed++;
    passed_evicted(x, victim->epoch, victim->k);
    /* (cached_bytes is as of the last eviction: the victim may have finished since) */
    x->st.cached_bytes -= x->st.cached_bytes >= victim->size ? victim->size : x->st.cached_bytes;
    victim->data = NULL; /* taken: free_job frees the rest */
    free_job(x, victim);
    return data;
}

/* The job a worker should serve: the oldest demanded with slots left, else the oldest
 * prefetched. Locked. */
static bfs_batch *pick(bfs_exec *x)
{
    LOCKED(x);
    bfs_batch *best = NULL;
    for (bfs_batch *b = x->jobs; b; b = b->next_job) {
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
        bfs_bc_free(x->mem, j->data, j->size, room(x)); /* a failed batch keeps only its error */
        j->data = NULL;
    } else {
        x->st.computed++;
        set_state(x, j, x->memfd ? JOB_SEALING : JOB_READY);
    }
    if (j->state != JOB_SEALING)
        pthread_cond_broadcast(&x->ready);
    return 1;
}

/*
 * Move the bytes of job j (SEALING or PREPARING: no other thread touches its data) from
 * src into a new read-only batch file (bfs_bc_to_file), mapped read-only as j->data; j's
 * buffer goes back to the pool. The file never changes after this, so the mount can hand
 * it to the kernel as the batch file's backing file (FUSE passthrough) and readers may map
 * it. On failure (no file, no memory, no descriptor left within the budget: file_slot) j
 * keeps its buffer, with src copied into it if needed, and j->fd stays -1: the batch is
 * still served, by copying. Unlocked.
 */
static void to_memfd(bfs_exec *x, bfs_batch *j, const uint8_t *src)
{
    const uint8_t *map;
    int fd, rc = -EMFILE;
    xlock(x);
    int slot = file_slot(x);
    xunlock(x);
    if (slot)
        rc = bfs_bc_to_file(x->mem, src, j->size, &map, &fd);
    xlock(x);
    BFS_ASSERT(x->files_making >= (uint64_t)(slot != 0));
    x->files_making -= slot != 0;
    if (slot && rc)
        x->st.files_refused++;
    if (rc) {
        xunlock(x);
        if (src != j->data)
            memcpy(j->data, src, j->size);
        return;
    }
    bfs_bc_free(x->mem, j->data, j->size, room(x));
    j->data = (uint8_t *)map;
    j->fd = fd;
    xunlock(x);
}

/* Publish a finished job's bytes to the host-wide store under its MINE claim, or give the
 * claim up (failed, or holding a substitute). Unlocked: I/O; the bytes of a READY batch
 * never change. */
static void settle_claim(bfs_exec *x, bfs_batch *j, bfs_claim *claim, int ready, int substituted)
{
    if (ready && !substituted) {
        if (bfs_store_publish(claim, j->data, j->size) == 0) {
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
            rc = bfs_engine_sample(x->e, w, j->epoch, j->k, s, j->idx[s], j->data, err, sizeof err);
            if (rc == BFS_ENGINE_SUBSTITUTED) {
                subs++;
                rc = 0;
            }
        }
        if (!rc) /* after the claim's reads: a dataset changed in place during them */
            rc = bfs_engine_claim_end(x->e, j->epoch, j->k, err, sizeof err);
        xlock(x);
        j->substituted += subs;
        j->done += n - 1; /* finish_slot counts the last */
        if (rc && !j->rc) {
            j->rc = rc;
            batch_error(j->err, sizeof j->err, rc, err[0] ? err : bfs_strerror(rc));
            j->next = j->len; /* claim nothing more of a failed batch */
        }
        j->refs++; /* keep j alive while it is sealed and its claim settled, unlocked */
        int completed = finish_slot(x, j);
        if (completed && j->state == JOB_SEALING) {
            xunlock(x);
            to_memfd(x, j, j->data);
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
    *memfd = x->memfd;
    bfs_bc_reader rd[BFS_EXEC_MAX_READERS];
    int nrd = reader_table(x, rd);
    uint64_t nb = bfs_engine_batches(x->e), round = ++x->src_round;
    int n = 0;
    uint64_t pending = 0;
    for (bfs_batch *b = x->jobs; b; b = b->next_job) {
        if (b->state != JOB_REMOTE)
            continue;
        pending++;
        uint64_t steps = b->demand ? 0 : bfs_bc_next_read(rd, nrd, nb, b->epoch, b->k);
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
        for (bfs_batch *b = x->jobs; b; b = b->next_job) {
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
        list[i]->refs++;
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
    rj->fd = bfs_bc_file_open(x->mem, rj->size, &rj->sealable);
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
        int rc = bfs_bc_file_seal(x->mem, rj->fd, rj->sealable, j->size, &map, &fd);
        rj->fd = -1; /* (sealed, or closed) */
        if (rc)
            return -1;
        xlock(x);
        bfs_bc_free(x->mem, j->data, j->size, room(x)); /* (unwritten: the value is in fd) */
        j->data = (uint8_t *)map;
        j->fd = fd;
        xunlock(x);
    } else if (memfd) {
        to_memfd(x, j, j->data);
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
 * while it is REMOTE, no bytes held by a FAILED job, and the batch buffers the jobs hold,
 * byte for byte, those that the cache's memory counts as given out. Locked. */
static void check_jobs(bfs_exec *x)
{
    LOCKED(x);
    uint64_t in_buffers = 0;
    for (const bfs_batch *j = x->jobs; j; j = j->next_job) {
        BFS_ASSERT(j->state >= JOB_PREPARING && j->state <= JOB_FAILED);
        BFS_ASSERT(j->refs == 0);
        BFS_ASSERT(j->fd < 0 || j->state == JOB_READY);
        BFS_ASSERT(j->remote.fd < 0 || j->state == JOB_REMOTE);
        BFS_ASSERT(j->state != JOB_FAILED || !j->data);
        BFS_ASSERT(j->done <= j->len && j->next <= j->len);
        if (j->fd < 0 && j->data)
            in_buffers += j->size;
    }
    bfs_bc_mem_stats ms;
    bfs_bc_mem_get_stats(x->mem, &ms);
    BFS_ASSERT(ms.buffer_bytes_out == in_buffers);
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
    x->cache_bytes = cache_bytes;
    x->passed_max = PASSED_FIRST;
    x->file_budget = UINT64_MAX;
    pthread_mutex_init(&x->lock, NULL);
    pthread_cond_init(&x->work, NULL);
    pthread_cond_init(&x->ready, NULL);
    if (bfs_bc_mem_create(&x->mem)) {
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
    x->prefetch = BFS_PREFETCH_AUTO;
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
    if (BFS_CHECKS && x->mem)
        check_jobs(x);
    while (x->jobs) { /* (none without x->mem) */
        bfs_batch *j = x->jobs;
        x->jobs = j->next_job;
        free_job(x, j);
    }
    xunlock(x);
    bfs_bc_mem_destroy(x->mem); /* its reaper releases what it was given, then ends */
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
        j->used = 0; /* oldest possible: LRU evicts it first */
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
 * touches it). Returns 1 when j->data now holds the published batch; otherwise 0, with
 * j->claim set when this process should compute and publish it. A batch another daemon
 * is computing is waited for only when a reader demands it (up to STORE_WAIT_MS). */
#define STORE_WAIT_MS 60000
static int store_lookup(bfs_exec *x, bfs_batch *j, int demand, int memfd)
{
    bfs_store_key key = {bfs_engine_fingerprint(x->e), j->epoch, j->k};
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
    if (c.state == BFS_STORE_HIT && c.size == j->size) {
        int fd;
        const uint8_t *map;
        xlock(x);
        int slot = memfd && file_slot(x);
        xunlock(x);
        if (slot && bfs_store_claim_take(&c, &fd, &map) == 0) {
            /* the entry file is exactly the batch: it backs the batch file itself, no
             * copy (it is never written in place: publication makes a new inode) */
            xlock(x);
            BFS_ASSERT(x->files_making > 0);
            x->files_making--;
            bfs_bc_free(x->mem, j->data, j->size, room(x));
            j->data = (uint8_t *)map;
            j->fd = fd;
            xunlock(x);
            return 1;
        }
        if (slot) {
            xlock(x);
            BFS_ASSERT(x->files_making > 0);
            x->files_making--;
            xunlock(x);
        }
        if (slot)
            to_memfd(x, j, c.data); /* straight from the entry's mapping */
        else                        /* (memfd mode without a descriptor: served by copying) */
            memcpy(j->data, c.data, j->size);
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
    x->passed_max = bytes;
    x->passed_fixed = !grow;
    evict(x);
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
        bfs_bc_use_files(x->mem, huge == 1);
    uint64_t budget = on ? fd_budget(x->nthreads) : UINT64_MAX;
    xlock(x);
    x->memfd = on;
    x->huge_later = on && huge == BFS_EXEC_HUGE_LATER;
    x->file_budget = budget;
    evict(x);
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
        unlink_job(x, j);
        if (j->refs)
            j->detached = 1;
        else
            free_job(x, j);
        j = NULL;
    }
    if (j) {
        j->refs++;
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
    if (j && !(j->data = take_passed_buffer(x, size)))
        j->data = bfs_bc_alloc(x->mem, size);
    if (!j || !(j->idx = malloc(len * sizeof *j->idx)) || !j->data) {
        if (j) {
            free(j->idx);
            bfs_bc_free(x->mem, j->data, size, room(x));
        }
        free(j);
        *rc = -ENOMEM;
        return NULL;
    }
    j->x = x;
    j->fd = -1;
    j->remote.fd = -1;
    j->remote.epoch = epoch, j->remote.k = k, j->remote.size = size;
    j->epoch = epoch, j->k = k, j->len = len, j->size = size;
    j->claim_slots = bfs_engine_claim_slots(x->e, epoch, k);
    j->state = JOB_PREPARING;
    j->demand = demand;
    j->refs = 1;
    j->seq = x->seq++;
    j->next_job = x->jobs;
    x->jobs = j;
    if (demand)
        x->st.misses++;
    else
        x->st.prefetched++;
    ghost_check(x, epoch, k);
    int memfd = x->memfd;
    xunlock(x);
    int n = bfs_engine_batch_begin(x->e, epoch, k, j->data, j->idx);
    int hit = n >= 0 && x->store && store_lookup(x, j, demand, memfd);
    xlock(x);
    if (hit) {
        set_state(x, j, JOB_READY);
        x->st.store_hits++;
        pthread_cond_broadcast(&x->ready);
    } else if (n < 0) {
        bfs_bc_free(x->mem, j->data, j->size, room(x)); /* a failed batch keeps only its error */
        j->data = NULL;
        j->rc = n;
        snprintf(j->err, sizeof j->err, "planning epoch %llu batch %llu: %s",
                 (unsigned long long)epoch, (unsigned long long)k, bfs_strerror(n));
        set_state(x, j, JOB_FAILED);
        pthread_cond_broadcast(&x->ready);
    } else if (x->remote && bfs_exec_remote_takes(x->remote)) {
        /* asked of the remote workers first (no worker alive: computed here at once) */
        set_state(x, j, JOB_REMOTE);
        j->remote.buf = j->data;
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
        j->used = ++x->tick;
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
        j->used = ++x->tick;
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
    st->threads = x->active;
    st->max_threads = x->nthreads;
    st->prefetch = x->prefetch;
    st->cache_budget = x->cache_bytes;
    st->file_budget = x->file_budget == UINT64_MAX ? 0 : x->file_budget;
    st->fd_limit = bfs_fd_limit() == UINT64_MAX ? 0 : bfs_fd_limit();
    st->passed_budget = x->passed_max < x->cache_bytes ? x->passed_max : x->cache_bytes;
    st->in_flight = 0;
    for (bfs_batch *b = x->jobs; b; b = b->next_job)
        st->in_flight += b->state < JOB_READY;
    xunlock(x);
    bfs_bc_mem_stats ms;
    bfs_bc_mem_get_stats(x->mem, &ms);
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
    return b->data;
}

uint64_t bfs_batch_size(const bfs_batch *b)
{
    return b->size;
}

uint32_t bfs_batch_substitutes(const bfs_batch *b)
{
    return b->substituted; /* (final once READY: no worker writes it any more) */
}

int bfs_batch_fd(const bfs_batch *b)
{
    return b->fd;
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

/* ---- readers ------------------------------------------------------------------------ */

/* Forget readers idle too long, or idle a while with their key gone. Locked. */
static void expire_readers(bfs_exec *x, double now, bfs_exec_alive_fn alive)
{
    LOCKED(x);
    for (int i = 0; i < BFS_EXEC_MAX_READERS; i++) {
        reader *r = &x->readers[i];
        if (!r->key)
            continue;
        double idle = now - r->asked;
        if (idle > BFS_EXEC_READER_IDLE || (idle > 2.0 && alive && !alive(r->key)))
            r->key = 0;
    }
}

/* Smoothing of a reader's step times: the newest step weighs 1/4 (a few batches follow a
 * change of pace; one slow batch does not). */
static double smooth(double old, double v, uint64_t n)
{
    return n <= 1 ? v : 0.75 * old + 0.25 * v;
}

void bfs_exec_reader_waited(bfs_exec *x, uint32_t id, uint64_t epoch, uint64_t k, double wait_s)
{
    xlock(x);
    for (int i = 0; i < BFS_EXEC_MAX_READERS; i++) {
        reader *r = &x->readers[i];
        /* not when the reader moved on meanwhile (a threaded loader's next request) */
        if (r->key && r->id == id && r->epoch == epoch && r->k == k) {
            r->waited = wait_s;
            r->wait_s = r->batches <= 1 ? wait_s : smooth(r->wait_s, wait_s, r->batches - 1);
            break;
        }
    }
    xunlock(x);
}

/* Locked: a reader appeared or its pace became known (bfs_exec_on_reader_news). */
static void news(bfs_exec *x)
{
    LOCKED(x);
    x->reader_news++;
    if (x->news_fn)
        x->news_fn(x->news_arg);
}

/* Does a request for (epoch, k) continue the walk of a reader last at (e0, k0) with
 * stride s (0: not known yet, taken as 1), or in the names' string order (lex)? Within the
 * epoch, the next step; from the walk's last batch, the next epoch's first batch of the
 * same residue (in string order: batch 0): a training loop (or a rank reading k = r, r + s,
 * ..., or `cat epoch/N/batch_*` epoch after epoch) going on with its next epoch. */
static int continues(uint64_t e0, uint64_t k0, int64_t s, int lex, uint64_t epoch, uint64_t k,
                     uint64_t nb)
{
    if (lex)
        return epoch == e0 ? bfs_bc_lex_next(k0, nb) == (int64_t)k
                           : epoch == e0 + 1 && k == 0 && k0 < nb && bfs_bc_lex_next(k0, nb) < 0;
    if (s == 0)
        s = 1;
    if (epoch == e0)
        return (int64_t)k0 + s == (int64_t)k;
    return s > 0 && epoch == e0 + 1 && k0 + (uint64_t)s >= nb && k == k0 % (uint64_t)s;
}

/* Reader r, at (r->epoch, r->k), steps to batch k of the same epoch: its stride, whether
 * it walks the names' string order, and whether its walk is known now. A step that the
 * string order explains twice in a row, where the stride does not, makes it a reader in
 * that order (`cat epoch/N/batch_*`: 0, 1, 10, 100, ...; followed by its stride, its
 * prefetches were wasted, and their evictions as passed then read counted as regrets that
 * grew the cache onto fresh memory: 4x the daemon's CPU). A first step is taken on trust;
 * a step that breaks the stride it had leaves the walk unknown until the next one confirms
 * a stride (a reader in no order prefetches nothing rather than batches it will not read).
 * Locked. */
static void step_to(bfs_exec *x, reader *r, uint64_t k, uint64_t nb)
{
    LOCKED(x);
    int64_t step = (int64_t)k - (int64_t)r->k;
    int by_name = bfs_bc_lex_next(r->k, nb) == (int64_t)k;
    int by_stride = r->stride != 0 && step == r->stride;
    r->lex_run = by_name ? r->lex_run + 1 : 0;
    if (!by_name)
        r->lex = 0;
    else if (!by_stride && r->lex_run >= 2)
        r->lex = 1;
    r->known = r->lex || by_stride || r->stride == 0;
    r->stride = step;
}

uint32_t bfs_exec_follow(bfs_exec *x, uint64_t key, uint64_t epoch, uint64_t k, double now,
                         double wait_s, bfs_exec_alive_fn alive)
{
    if (!key)
        key = UINT64_MAX; /* 0 marks a free slot */
    xlock(x);
    uint64_t nb = bfs_engine_batches(x->e), ne = bfs_engine_opts(x->e)->epochs;
    reader *r = NULL, *adopt = NULL;
    for (int i = 0; i < BFS_EXEC_MAX_READERS && !r; i++)
        if (x->readers[i].key == key)
            r = &x->readers[i];
    if (!r) { /* a new key: the next batch of a reader whose process is gone? (a shell
               * loop of `cat`s, one process per batch, and per epoch) */
        for (int i = 0; i < BFS_EXEC_MAX_READERS && alive && !adopt; i++) {
            reader *c = &x->readers[i];
            if (c->key && continues(c->epoch, c->k, c->stride, c->lex, epoch, k, nb) &&
                !alive(c->key))
                adopt = c;
        }
        if (adopt) {
            r = adopt;
            r->key = key;
        } else {
            /* a free slot (after forgetting stale readers), else the least recent */
            expire_readers(x, now, alive);
            for (int i = 0; i < BFS_EXEC_MAX_READERS; i++) {
                reader *c = &x->readers[i];
                if (!c->key) {
                    r = c;
                    break;
                }
                if (!r || c->asked < r->asked)
                    r = c;
            }
            *r = (reader){.key = key,
                          .id = ++x->next_reader_id,
                          .epoch = epoch,
                          .k = k,
                          .depth = -1,
                          .asked = now};
            news(x);
        }
    }
    if (r->batches) { /* the step it took since its last batch, less the wait for it */
        double own = now - r->asked - r->waited;
        r->own_s = smooth(r->own_s, own > 0 ? own : 0, r->batches);
        if (wait_s >= 0)
            r->wait_s = smooth(r->wait_s, wait_s, r->batches);
        if (r->epoch == epoch && k != r->k) {
            step_to(x, r, k, nb);
        } else if (r->epoch != epoch &&
                   continues(r->epoch, r->k, r->stride, r->lex, epoch, k, nb)) {
            r->crossed = 1;
            r->known = 1;
        } else if (r->epoch != epoch) { /* elsewhere: a walk to learn again */
            r->stride = 0;
            r->lex = r->lex_run = 0;
            r->known = 0;
        }
    } else if (wait_s >= 0) {
        r->wait_s = wait_s;
    }
    r->epoch = epoch, r->k = k, r->asked = now, r->waited = wait_s >= 0 ? wait_s : 0;
    if (++r->batches == 2)
        news(x); /* its pace is known now */
    uint32_t id = r->id;
    int wrap = r->crossed, lex = r->lex;
    int64_t stride = r->stride ? r->stride : 1;
    /* nothing ahead of a walk not known yet: a reader's first batch says nothing of its
     * next (data-parallel ranks reading K, K + W, ... of their own mounts each wasted the 3
     * batches after K) */
    int depth = !r->known ? 0 : r->depth >= 0 ? r->depth : x->prefetch;
    /* the budget is shared by the active readers, each holding one batch being read */
    unsigned active = 0;
    for (int i = 0; i < BFS_EXEC_MAX_READERS; i++)
        active += x->readers[i].key != 0;
    uint64_t size = bfs_engine_max_batch_bytes(x->e);
    uint64_t per = size ? x->cache_bytes / size / (active ? active : 1) : 0;
    if ((uint64_t)depth + 1 > per)
        depth = per > 1 ? (int)(per - 1) : 0;
    xunlock(x);
    /* the next `depth` batches of its walk; the walk of a reader that went on from one
     * epoch to the next before goes on into the next epoch at the same residue
     * (continues()): at a training loop's epoch end the workers keep computing, while a
     * reader of one epoch (a validation pass, a scan) costs nothing beyond it */
    if (lex) { /* the names' string order, and on into the next epoch's once crossed */
        uint64_t ep = epoch, cur = k;
        for (int d = 1; d <= depth; d++) {
            int64_t next = bfs_bc_lex_next(cur, nb);
            if (next < 0) {
                if (!wrap || ep + 1 >= ne)
                    break;
                ep++, next = 0;
            }
            cur = (uint64_t)next;
            bfs_exec_prefetch(x, ep, cur);
        }
        return id;
    }
    int64_t r0 = stride > 0 ? (int64_t)k % stride : 0;
    int64_t m = stride > 0 ? bfs_bc_walk_len((int64_t)nb, r0, stride) : 0;
    for (int d = 1; d <= depth; d++) {
        int64_t next = (int64_t)k + stride * d;
        uint64_t ep = epoch;
        if (wrap && stride > 0 && (uint64_t)next >= nb) {
            if (m <= 0 || k >= nb)
                break; /* k outside the epoch: no walk to go on with */
            int64_t i = ((int64_t)k - r0) / stride + d;
            ep = epoch + (uint64_t)(i / m);
            next = r0 + stride * (i % m);
            if (ep >= ne)
                break;
        } else if (next < 0 || (uint64_t)next >= nb) {
            break;
        }
        bfs_exec_prefetch(x, ep, (uint64_t)next);
    }
    return id;
}

int bfs_exec_readers(bfs_exec *x, double now, bfs_exec_alive_fn alive, bfs_exec_reader *out,
                     int max)
{
    int n = 0;
    xlock(x);
    expire_readers(x, now, alive);
    for (int i = 0; i < BFS_EXEC_MAX_READERS && n < max; i++) {
        const reader *r = &x->readers[i];
        if (!r->key)
            continue;
        out[n++] = (bfs_exec_reader){.id = r->id,
                                     .key = r->key,
                                     .epoch = r->epoch,
                                     .k = r->k,
                                     .stride = r->stride,
                                     .walk = !r->known ? BFS_EXEC_WALK_UNKNOWN
                                             : r->lex  ? BFS_EXEC_WALK_NAMES
                                                       : BFS_EXEC_WALK_STRIDE,
                                     .depth = r->depth >= 0 ? r->depth : x->prefetch,
                                     .batches = r->batches,
                                     .own_s = r->own_s,
                                     .wait_s = r->wait_s,
                                     .idle_s = now - r->asked};
    }
    xunlock(x);
    for (int i = 1; i < n; i++) /* id order: insertion sort, n <= 64 */
        for (int j = i; j > 0 && out[j - 1].id > out[j].id; j--) {
            bfs_exec_reader t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return n;
}

void bfs_exec_on_reader_news(bfs_exec *x, void (*fn)(void *), void *arg)
{
    xlock(x);
    x->news_fn = fn, x->news_arg = arg;
    xunlock(x);
}

uint64_t bfs_exec_readers_news(bfs_exec *x)
{
    xlock(x);
    uint64_t n = x->reader_news;
    xunlock(x);
    return n;
}

void bfs_exec_set_prefetch(bfs_exec *x, int depth)
{
    xlock(x);
    if (depth >= 0)
        x->prefetch = depth;
    xunlock(x);
}

void bfs_exec_set_reader_depth(bfs_exec *x, uint32_t id, int depth)
{
    xlock(x);
    for (int i = 0; i < BFS_EXEC_MAX_READERS; i++)
        if (x->readers[i].key && x->readers[i].id == id)
            x->readers[i].depth = depth < 0 ? -1 : depth;
    xunlock(x);
}

void bfs_exec_set_cache_bytes(bfs_exec *x, uint64_t bytes)
{
    xlock(x);
    x->cache_bytes = bytes;
    evict(x);
    /* pooled buffers beyond two lived in the budget's room: give back what no longer fits */
    bfs_bc_trim(x->mem, room(x));
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
