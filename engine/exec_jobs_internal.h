/*
 * exec_jobs_internal.h — the executor's job table, shared by engine/exec.c (the public
 * executor: create, get, prefetch, stats, settings) and engine/exec_jobs.c (the table's
 * core: the state machine, references, the workers, the cache's callbacks, the job-table
 * operations of the remote side). Private to those two files: the remote side
 * (exec_remote.c) sees only exec_internal.h, the readers' table (exec_readers.c) only its
 * own header. Calls go one way: exec.c calls exec_jobs.c, never the reverse.
 *
 * Locks: x->lock guards every field marked so and the whole job table (the batch cache's
 * entries); functions marked "Locked." are called holding it (LOCKED checks it in debug
 * and sanitizer builds).
 */
#ifndef BATCHFS_ENGINE_EXEC_JOBS_INTERNAL_H
#define BATCHFS_ENGINE_EXEC_JOBS_INTERNAL_H

#include "cache/batchcache.h"
#include "engine/exec_internal.h"
#include "engine/exec_readers_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

/* REMOTE: asked of the remote workers (remote=), fetched by the remote thread, or handed
 * to the local workers (RUNNING) when none came in time. SEALING: computed, its bytes
 * being moved into a sealed memory file (memfd mode). */
enum { JOB_PREPARING, JOB_REMOTE, JOB_RUNNING, JOB_SEALING, JOB_READY, JOB_FAILED };

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
    int demand;  /* someone waits for it */
    int advised; /* its samples were announced when it was planned (advise_early) */
    int rc;
    char err[512];
    bfs_claim *claim;     /* MINE claim in the host-wide store: publish when READY */
    uint64_t seq;         /* creation order (FIFO among equals) */
    bfs_exec_rjob remote; /* the job source's part (exec_internal.h; its thread's while the
                           * job is REMOTE) */
    int detached;         /* out of the job table (a failure to retry), freed at its last unref */
    uint64_t remote_turn; /* the source's round that last handled it (bfs_exec_src_choose;
                           * guarded by lock) */
    bfs_batch *run_prev, *run_next; /* x->running's list while RUNNING (guarded by lock) */
};

struct bfs_exec {
    bfs_engine *e;
    pthread_mutex_t lock;
#ifdef BFS_DEBUG_CHECKS
    _Atomic unsigned long lock_owner; /* pthread_self() of the holder, 0: free */
#endif
    pthread_cond_t work;   /* active workers: a slot may be claimable */
    pthread_cond_t parked; /* workers beyond `active`: it grew, or stop (not woken for work:
                            * at threads=1, set by the autotuner for token mounts, the
                            * second worker was woken for every batch, to find it may not
                            * compute) */
    pthread_cond_t ready;  /* waiters: a job finished */
    bfs_bc *bc; /* the batch cache: the job table (its entries), the budgets, the batches'
                 * memory (cache/batchcache.h; guarded by lock but bfs_bc_memory's) */
    uint64_t seq, tick;
    int stop, shutdown;
    bfs_store *store; /* host-wide store, or NULL (set before use, then read-only) */
    int nthreads;     /* threads started */
    int active;       /* workers with id < active may compute (guarded by lock) */
    bfs_exec_rt rt;   /* the readers (exec_readers.c; guarded by lock) */
    int fetch_ahead;  /* batches last fetched ahead of those computed (a remote source) */
    int nworkers;     /* worker contexts allocated */
    pthread_t *threads;
    bfs_engine_worker **workers;
    bfs_exec_stats st;       /* counters (guarded by lock) */
    bfs_exec_remote *remote; /* remote workers, or NULL (bfs_exec_set_remote; guarded by lock) */
    uint64_t src_round;      /* rounds of the remote side (src_choose; guarded by lock) */
    bfs_batch *running;      /* the RUNNING jobs (bfs_job_set_state), what workers pick from:
                              * not a walk of the job table per claim (guarded by lock) */
};

/* The executor's lock. Functions marked "Locked." say LOCKED(x) first: in sanitizer and
 * debug builds (BFS_DEBUG_CHECKS, `make SANITIZER=...` or `make DEBUG=1`) each lock and
 * unlock records the holder, and LOCKED aborts with the function's name when the calling
 * thread does not hold the lock; elsewhere it compiles to nothing. */
#ifdef BFS_DEBUG_CHECKS
#define LOCKED(x) locked_check((x), __func__)
static inline void locked_check(const bfs_exec *x, const char *fn)
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

static inline void xlock(bfs_exec *x)
{
    pthread_mutex_lock(&x->lock);
    OWN(x);
}

static inline void xunlock(bfs_exec *x)
{
    DISOWN(x);
    pthread_mutex_unlock(&x->lock);
}

static inline void xwait(bfs_exec *x, pthread_cond_t *c)
{
    DISOWN(x);
    pthread_cond_wait(c, &x->lock);
    OWN(x);
}

/* The job of a cache entry (embedded in it). */
static inline bfs_batch *job_of(bfs_bc_entry *e)
{
    return (bfs_batch *)(void *)((char *)e - offsetof(bfs_batch, ce));
}

static inline bfs_batch *job_of_or_null(bfs_bc_entry *e)
{
    return e ? job_of(e) : NULL;
}

/* Every job: for (JOBS(x, b)) {...} */
#define JOBS(x, b)                                                                                 \
    bfs_batch *b = job_of_or_null(bfs_bc_entries((x)->bc));                                        \
    b;                                                                                             \
    b = job_of_or_null(b->ce.next)

/* ---- exec_jobs.c ---------------------------------------------------------------------- */

/* Job j moves to state `to`: only along the state machine (exec.c's header). Locked. */
void bfs_job_set_state(bfs_exec *x, bfs_batch *j, int to);

/* The job of (epoch, k), or NULL. Locked. */
bfs_batch *bfs_job_find(bfs_exec *x, uint64_t epoch, uint64_t k);

/* Drop a reference to j; a detached job goes with its last one. Locked. */
void bfs_job_unref(bfs_exec *x, bfs_batch *j);

/* Give a job's memory back, then the rest (out of the table already). Locked. */
void bfs_job_free(bfs_exec *x, bfs_batch *j);

/* Keep the cache within its budgets (bfs_bc_evict). Locked. */
void bfs_job_evict(bfs_exec *x);

/* Move j's bytes (SEALING or PREPARING: no other thread touches its data) from src into a
 * new read-only batch file, or keep them in its buffer (to_memfd in exec_jobs.c). Unlocked. */
void bfs_job_to_memfd(bfs_exec *x, bfs_batch *j, const uint8_t *src);

/* The cache's callbacks for x (readers, drop, held: bfs_bc_create), and whether the
 * calling thread holds x->lock (held; also the readers' table's). */
bfs_bc_ops bfs_job_cache_ops(bfs_exec *x);
int bfs_job_held(const void *x);

/* A worker thread: arg is a malloc'ed bfs_job_worker_arg, freed by it. */
typedef struct bfs_job_worker_arg {
    bfs_exec *x;
    int id;
} bfs_job_worker_arg;
void *bfs_job_worker_main(void *arg);

/* The job-table operations handed to the remote side (exec_internal.h). */
extern const bfs_exec_src_ops bfs_job_src_ops;

/* The job table's consistency at destroy (debug and sanitizer builds). Locked. */
void bfs_job_check_all(bfs_exec *x);

#endif
