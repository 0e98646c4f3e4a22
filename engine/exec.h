/*
 * exec.h — the executor: a worker pool that computes batches, one sample per unit of work
 * (every worker cooperates on the oldest wanted batch, so one batch finishes fast: low
 * latency for random access), single-flight per (epoch, batch), prefetch along each
 * reader's walk, and a byte-budgeted cache of finished batches (evicted by the readers'
 * walks: cache/batchcache.h), shared with other daemons through the host-wide store
 * (cache_dir=) and with `batchfs worker`s through Redis (remote=).
 *
 * Neighbours: fs/ (read requests and the readers they follow) and `batchfs --bench` call
 * it; the autotuner (tuner.h) changes the thread count, the prefetch depths and the cache
 * budget through it.
 *
 * Batches are reference-counted: bfs_exec_get returns one reference; the data stays valid
 * and unchanged until bfs_batch_release. Every function is thread-safe.
 */
#ifndef BATCHFS_ENGINE_EXEC_H
#define BATCHFS_ENGINE_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "cache/store.h"
#include "engine/api.h"
#include "engine/engine.h"

/* BFS_PREFETCH_AUTO, prefetch=auto's depth until the autotuner chooses: engine/api.h */

typedef struct bfs_exec bfs_exec;

typedef struct bfs_exec_stats {
    uint64_t computed;   /* batches computed */
    uint64_t hits;       /* gets served from a finished batch */
    uint64_t joins;      /* gets that joined a computation in flight (single-flight) */
    uint64_t misses;     /* gets that started a computation */
    uint64_t prefetched; /* computations started by prefetch */
    uint64_t evictions;
    uint64_t failed;          /* batches that failed (bad_sample=fail) */
    uint64_t cached_bytes;    /* finished batches held now */
    uint64_t files;           /* batch files held now (a descriptor each; memfd mode) */
    uint64_t file_budget;     /* batch files that may be held (bfs_exec_set_memfd); 0: none
                               * are made (not in memfd mode) */
    uint64_t files_refused;   /* batches kept without a file (served by copying): the
                               * budget was reached with every file in use, or no descriptor */
    uint64_t fd_limit;        /* the process's descriptor limit (soft; 0: unlimited) */
    uint32_t in_flight;       /* batches queued or being computed */
    int threads;              /* workers allowed to compute now (bfs_exec_set_threads) */
    int max_threads;          /* workers started */
    int prefetch;             /* default prefetch depth per reader */
    int fetch_ahead;          /* a remote source: batches whose payloads were last fetched
                               * beyond those prefetched (bfs_exec_follow) */
    uint64_t fetched_batches; /* batches whose payloads were fetched ahead (once per walk) */
    uint64_t cache_budget;    /* finished-batch budget now */
    uint64_t evicted_passed;  /* evictions of batches no active reader will read */
    uint64_t evicted_ahead;   /* evictions of batches a reader would still read (window) */
    uint64_t passed_budget;   /* the passed-batch bound now (bfs_exec_set_passed_max) */
    uint64_t passed_regrets;  /* new jobs for batches evicted as passed (each doubles it) */
    uint64_t store_hits;      /* batches served from the host-wide store, not computed */
    uint64_t store_publishes; /* batches this process computed and published */
    uint64_t store_withheld;  /* computed with a substitute for a bad sample: not published */
    int huge_files;           /* batch files live on the private huge-page tmpfs */
    int buffers;              /* batch buffers allocated now: in use + pooled */
    uint64_t buffer_allocs;   /* batch buffers ever allocated (not taken from the pool) */
    uint64_t pool_bytes;      /* the pool file of bfs_exec_use_pool (0: none), */
    uint64_t pool_used;       /* the bytes of its windows held by batches now, */
    uint64_t pool_misses;     /* and the batches that found no window free */
    bfs_stage_stats stages;   /* summed over workers */
    /* remote workers (remote=; bfs_exec_set_remote) */
    int remote;                /* set */
    int remote_workers;        /* alive at the last count (-1: not counted yet) */
    uint64_t remote_requested; /* batches asked of the workers */
    uint64_t remote_hits;      /* served from Redis */
    uint64_t remote_fallbacks; /* computed here after all: no worker alive, remote_wait_ms
                                * passed, or Redis failed */
    uint64_t remote_errors;    /* Redis requests that failed */
    uint64_t remote_corrupt;   /* values refused (checksum, authentication, a key of another
                                * type): computed here */
    uint64_t remote_declined;  /* batches a worker declined (its copy or resources):
                                * computed here */
    uint64_t remote_wait_ns;   /* summed wait of remote_hits, from asking to READY */
    char remote_key_id[20];    /* remote_key='s id in hex, or "none" */
} bfs_exec_stats;

/*
 * bfs_exec_create - start `threads` workers (<= 0: online CPUs) over engine e, keeping
 * at most cache_bytes of finished, unreferenced batches (0: keep none beyond those
 * referenced or in flight), plus freed batch buffers kept for reuse: two, and more while
 * the budget has room (bfs_bc_free in cache/batchcache.h).
 * Returns 0, -ENOMEM or -EAGAIN (threads).
 */
int bfs_exec_create(bfs_engine *e, int threads, uint64_t cache_bytes, bfs_exec **out);

/*
 * bfs_exec_set_passed_max - of the cache budget, at most `bytes` may hold finished batches
 * that no active reader will read (read already, or off every reader's stride); beyond
 * that the least recently used of them are evicted even under budget, so memory is
 * recycled while it is still mapped and warm instead of growing to the budget with fresh
 * pages (UINT64_MAX: only the budget bounds them). With grow, the bound then doubles (up
 * to the budget) each time a batch evicted as passed is asked for again (stats:
 * passed_regrets); without, it stays. The default: 256 MiB, growing.
 */
void bfs_exec_set_passed_max(bfs_exec *x, uint64_t bytes, int grow);

/*
 * bfs_exec_set_store - share finished batches through the host-wide store s (cache_dir=),
 * keyed by (bfs_engine_fingerprint, epoch, batch): a batch another daemon already
 * published is read instead of computed; a batch computed here is published, unless a
 * slot holds a substitute for a bad sample (BFS_ENGINE_SUBSTITUTED; counted in
 * store_withheld; the batch is still served and cached here). Call before
 * the first get/prefetch; s must outlive x. Store errors never fail a read: the batch is
 * computed instead.
 */
void bfs_exec_set_store(bfs_exec *x, bfs_store *s);

/*
 * bfs_exec_set_remote - ask `batchfs worker`s for batches through Redis (o->remote, with
 * remote_wait_ms, remote_fallback, remote_key; remote_ttl is the workers' own: how long
 * they keep a value; docs/scale-out.md), before the first batch: a batch that is neither
 * cached nor in cache_dir is queued for the workers and served from Redis once one stored
 * it (checked against its header and its checksum, or with remote_key its authentication
 * tag), and computed here when no worker is alive, Redis fails, or remote_wait_ms passes
 * (remote_fallback=local; wait: asked again and waited for). Batches are asked for in the
 * order readers need them: those a reader waits for first, then prefetches nearest their
 * reader's position; a few turns of each round go to those waiting longest, so every batch
 * is asked for however many wait. Starts a thread with two Redis connections.
 * Returns 0; or, when Redis cannot be reached now, its error with a message, the remote
 * side installed anyway (it connects again every second; batches are computed here
 * meanwhile, or waited for with remote_fallback=wait); -ENOMEM, -EINVAL (URL), -EAGAIN.
 */
int bfs_exec_set_remote(bfs_exec *x, const bfs_pipeline_opts *o, char *err, size_t errlen);

/*
 * bfs_exec_set_memfd - from now on (on != 0), each finished batch is moved into a
 * read-only memory file: one copy of ~5% of its compute time, after which its bytes can
 * never change, so the mount can make that file the backing file of the batch file (FUSE
 * passthrough: reads and mmap go from the kernel straight to it) and it may be handed to
 * other processes. The file is a sealed memfd (memfd_create, F_SEAL_WRITE), or with huge
 * == 1 an O_TMPFILE on a private tmpfs with 2 MiB pages (huge_pages=1; needs
 * CAP_SYS_ADMIN, else memfds; bfs_exec_stats.huge_files tells); huge == BFS_EXEC_HUGE_LATER:
 * memfds until the executor first evicts a batch no reader will read (from then on it
 * recycles memory), then huge pages: fresh huge pages cost ~10x fresh small ones on VMs
 * that hand memory back to the host, recycled ones far less. The batch's buffer returns
 * to the pool. A batch that could not be moved (no memory) keeps its buffer and has no file
 * (bfs_batch_fd -1).
 */
#define BFS_EXEC_HUGE_LATER 2
void bfs_exec_set_memfd(bfs_exec *x, int on, int huge);
/*
 * bfs_exec_use_pool - batches are computed into windows of one pool file of bytes
 * (bfs_bc_use_pool): a GPU loader maps it and registers it once, and copies each batch
 * from its window while an open file holds the batch. Before the first batch; not with
 * bfs_exec_set_memfd (which would move each batch out of its window). 0 or a negative
 * errno.
 * bfs_exec_pool_fd - the pool file (the executor keeps it; -1: none) and *size.
 * bfs_exec_window - 1 with *off when batch b (referenced) lies in the pool at *off.
 */
int bfs_exec_use_pool(bfs_exec *x, uint64_t bytes);
int bfs_exec_pool_fd(bfs_exec *x, uint64_t *size);
int bfs_exec_window(bfs_exec *x, const bfs_batch *b, uint64_t *off);
/* With a store (bfs_exec_set_store), a batch found in it is not copied: when the entry
 * file holds exactly the batch (bfs_claim.exact), that verified file is the batch's file. */

/* bfs_exec_destroy - stop the workers (finishing the samples they hold) and free
 * everything. All batches must have been released. Accepts NULL. */
void bfs_exec_destroy(bfs_exec *x);

/*
 * bfs_exec_get - batch k of epoch, computed now if needed (or joined if already in
 * flight); blocks until ready. Returns 0 with *out referenced; -ERANGE (no such batch);
 * a BFS_E_* error for a batch that failed under bad_sample=fail (err names the sample);
 * -ESHUTDOWN after bfs_exec_shutdown; -ENOMEM.
 */
int bfs_exec_get(bfs_exec *x, uint64_t epoch, uint64_t k, bfs_batch **out, char *err,
                 size_t errlen);

/*
 * bfs_exec_prefetch - start computing batch k of epoch if it is not finished or in
 * flight; never blocks on the computation. Prefetches run after demanded batches.
 * Returns 0 (queued, in flight or finished), -ERANGE, -ESHUTDOWN or -ENOMEM.
 */
int bfs_exec_prefetch(bfs_exec *x, uint64_t epoch, uint64_t k);

/*
 * Readers. A reader is one consumer of batch files (the mount keys them by the requesting
 * pid). The executor keeps a small table of active readers: position, stride, the time
 * each spends between batches, and its prefetch depth. The table drives three things:
 *  - prefetch: after a reader starts batch k with stride s, batches k+s .. k+d*s are
 *    computed ahead (d its depth), bounded by the cache budget shared among readers; or
 *    the next d in the names' string order for a reader seen walking it (a shell's glob);
 *    nothing while its walk is not known (its first batch, a step off its stride);
 *  - eviction, a sliding window over every reader (tf.data service's cross-trainer cache,
 *    with recomputation instead of skipping): a finished batch that no active reader will
 *    read is evicted first (least recently used first), then the one whose next read by
 *    any reader is farthest away. A reader that falls behind the window gets its batches
 *    recomputed, with the same bytes;
 *  - the autotuner's inputs (bfs_exec_readers).
 */
typedef struct bfs_exec_reader {
    uint32_t id;       /* small stable number, for /stats */
    uint64_t key;      /* the caller's key (a pid) */
    uint64_t epoch, k; /* the batch it started last */
    int64_t stride;    /* k minus its previous batch; 0 until known (treated as 1) */
    int walk;          /* BFS_EXEC_WALK_*: what its next batches are taken to be */
    int depth;         /* prefetch depth in use */
    uint64_t batches;  /* batches started */
    double own_s;      /* smoothed time between batches not spent waiting for one: the
                        * reader's read + compute step; 0 until two batches are seen */
    double wait_s;     /* smoothed time the reader waited for a batch to be computed */
    double idle_s;     /* since its last batch */
} bfs_exec_reader;

/* A reader's walk: not known (its first batch, or a step off its stride: nothing is
 * prefetched), by stride (k + s, k + 2s, ...), or in the order of the batch files' names
 * sorted as strings (a shell's glob, `ls`: batch_0, batch_1, batch_10, ...). */
enum { BFS_EXEC_WALK_UNKNOWN, BFS_EXEC_WALK_STRIDE, BFS_EXEC_WALK_NAMES };

#define BFS_EXEC_MAX_READERS 64
#define BFS_EXEC_READER_IDLE 30.0 /* seconds without a batch before a reader is forgotten */

/* bfs_exec_alive_fn - does the reader key still exist (a live process)? */
typedef int (*bfs_exec_alive_fn)(uint64_t key);

/*
 * bfs_exec_follow - reader `key` asked for batch k of epoch at time `now` (seconds on
 * CLOCK_MONOTONIC) and waited wait_s for it to be computed (wait_s < 0: not known yet,
 * reported later with bfs_exec_reader_waited). Records its position and stride and
 * prefetches its next batches (bfs_exec_prefetch): from its second batch on (a first step
 * is taken on trust), and after a step that breaks its stride only once the next step
 * confirms one; two steps in a row in the names' string order (0, 1, 10, 100, ..., where a
 * stride does not explain them) make it a reader in that order, followed in it.
 * bfs_exec_get_as calls it when the request arrives, once k
 * is acquired, before waiting for k: the next batches are then queued while k is computed,
 * so workers that finish their part of k move straight on (called after the wait, a reader
 * with depth 1 left the workers idle at every batch boundary: 6-10% of a fast reader's
 * rate at batch=64). A key seen for the first time whose batch is exactly the next one of
 * a reader whose key is gone (alive() false; alive may be NULL) takes over that reader: a
 * shell loop of `cat` is one reader, not one per pid. The next one of a walk k0, k0 + s,
 * ... at its epoch's end is the next epoch's first batch of the same residue (k0 mod s; in
 * the names' order, batch 0); a reader that has gone on to a next epoch once also
 * prefetches across epoch ends (never at or beyond the pipeline's `epochs`).
 * Returns the reader's id.
 */
uint32_t bfs_exec_follow(bfs_exec *x, uint64_t key, uint64_t epoch, uint64_t k, double now,
                         double wait_s, bfs_exec_alive_fn alive);

/* bfs_exec_reader_waited - reader id (bfs_exec_follow's) waited wait_s for batch k of
 * epoch; ignored when the reader has asked for another batch since. */
void bfs_exec_reader_waited(bfs_exec *x, uint32_t id, uint64_t epoch, uint64_t k, double wait_s);

/* bfs_exec_cancel (engine/api.h): a wait that another thread may end. */
/* bfs_exec_cancel_wait - end the wait that c was given to (now or when it starts). */
void bfs_exec_cancel_wait(bfs_exec *x, bfs_exec_cancel *c);

/*
 * bfs_exec_get_as - bfs_exec_get for reader `key` (the mount's: a pid), in the order that
 * keeps its pipeline full: batch k is acquired first (demanded, referenced), then the
 * reader is followed (bfs_exec_follow, now on CLOCK_MONOTONIC: its next batches are queued
 * behind k while k is computed), then k is waited for and the wait recorded. Same returns
 * as bfs_exec_get, and -EINTR when cancel (may be NULL) was cancelled before k was ready:
 * k goes on being computed, so that a retry finds it.
 */
int bfs_exec_get_as(bfs_exec *x, uint64_t key, bfs_exec_alive_fn alive, uint64_t epoch, uint64_t k,
                    bfs_exec_cancel *cancel, bfs_batch **out, char *err, size_t errlen);

/* bfs_exec_get_cancel - bfs_exec_get whose wait cancel (may be NULL) can end, with
 * -EINTR as bfs_exec_get_as; no reader is followed (the mount's opens of epoch/N/next,
 * whose next batch is another claim). */
int bfs_exec_get_cancel(bfs_exec *x, uint64_t epoch, uint64_t k, bfs_exec_cancel *cancel,
                        bfs_batch **out, char *err, size_t errlen);

/* bfs_exec_readers - the active readers at time now (at most max), in id order; readers
 * idle longer than BFS_EXEC_READER_IDLE, or idle over 2 s with their key gone (alive),
 * are forgotten first. Returns how many were written. */
int bfs_exec_readers(bfs_exec *x, double now, bfs_exec_alive_fn alive, bfs_exec_reader *out,
                     int max);

/* bfs_exec_readers_news - a count that grows when a reader appears or its pace is first
 * measured (its second batch). bfs_exec_on_reader_news - call fn(arg) each time it grows
 * (NULL: no more calls; once it returns, no call is running). fn runs under the executor's
 * lock: it must be quick and must not call the executor. The autotuner wakes itself with
 * it, so that a new reader gets its depth at once, not after the autotuner's longest
 * sleep (2 s). */
uint64_t bfs_exec_readers_news(bfs_exec *x);
void bfs_exec_on_reader_news(bfs_exec *x, void (*fn)(void *), void *arg);

/* bfs_exec_set_prefetch - the depth of readers without one of their own (-1: keep).
 * bfs_exec_set_reader_depth - the depth of reader id (the autotuner's per-reader choice;
 * -1: back to the default). Unknown ids are ignored. */
void bfs_exec_set_prefetch(bfs_exec *x, int depth);
void bfs_exec_set_reader_depth(bfs_exec *x, uint32_t id, int depth);

/* bfs_exec_set_cache_bytes - change the finished-batch budget (evicts at once if lower). */
void bfs_exec_set_cache_bytes(bfs_exec *x, uint64_t bytes);

/* bfs_exec_set_threads - how many of the workers started at create may compute (1 ..
 * that count; others sleep). Returns the count now in effect. */
int bfs_exec_set_threads(bfs_exec *x, int n);

/* bfs_exec_consumed - a hint that batch k of epoch has been read in full by its reader:
 * it becomes the first to evict (the kernel's page cache serves repeat reads). */
void bfs_exec_consumed(bfs_exec *x, uint64_t epoch, uint64_t k);

/* bfs_exec_shutdown - wake every waiter with -ESHUTDOWN and refuse new work (unmount). */
void bfs_exec_shutdown(bfs_exec *x);

/* bfs_exec_get_stats - counters now (what the cache holds: a walk of its entries).
 * bfs_exec_prefetch_depth - the default depth alone (st.prefetch): no walk, for callers
 * per batch. */
void bfs_exec_get_stats(bfs_exec *x, bfs_exec_stats *st);
int bfs_exec_prefetch_depth(bfs_exec *x);

/* The batch handles (bfs_batch_data, _size, _substitutes, _fd, _release) are public:
 * engine/api.h. */

#endif
