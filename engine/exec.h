/*
 * exec.h — the executor: a worker pool that computes batches, one sample per unit of work
 * (every worker cooperates on the oldest wanted batch, so one batch finishes fast: low
 * latency for random access), single-flight per (epoch, batch), prefetch, and a small
 * byte-budgeted LRU of finished batches.
 *
 * Neighbours: fs/ (read requests and per-reader prefetch) and `batchfs --bench` call it;
 * the autotuner (later) changes the thread count and prefetch depth through it. It owns
 * no policy about *what* to prefetch: callers say.
 *
 * Batches are reference-counted: bfs_exec_get returns one reference; the data stays valid
 * and unchanged until bfs_batch_release. Every function is thread-safe.
 */
#ifndef BATCHFS_ENGINE_EXEC_H
#define BATCHFS_ENGINE_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "cache/store.h"
#include "engine/engine.h"

/* prefetch=auto until the autotuner chooses: batches computed ahead of each reader */
#define BFS_PREFETCH_AUTO 3

typedef struct bfs_exec bfs_exec;
typedef struct bfs_batch bfs_batch;

typedef struct bfs_exec_stats {
    uint64_t computed;   /* batches computed */
    uint64_t hits;       /* gets served from a finished batch */
    uint64_t joins;      /* gets that joined a computation in flight (single-flight) */
    uint64_t misses;     /* gets that started a computation */
    uint64_t prefetched; /* computations started by prefetch */
    uint64_t evictions;
    uint64_t failed;       /* batches that failed (bad_sample=fail) */
    uint64_t cached_bytes; /* finished batches held now */
    uint32_t in_flight;    /* batches queued or being computed */
    int threads;
    uint64_t store_hits;      /* batches served from the host-wide store, not computed */
    uint64_t store_publishes; /* batches this process computed and published */
    bfs_stage_stats stages;   /* summed over workers */
} bfs_exec_stats;

/*
 * bfs_exec_create - start `threads` workers (<= 0: online CPUs) over engine e, keeping
 * at most cache_bytes of finished, unreferenced batches (0: keep none beyond those
 * referenced or in flight), plus up to two freed batch buffers kept for reuse.
 * Returns 0, -ENOMEM or -EAGAIN (threads).
 */
int bfs_exec_create(bfs_engine *e, int threads, uint64_t cache_bytes, bfs_exec **out);

/*
 * bfs_exec_set_store - share finished batches through the host-wide store s (cache_dir=),
 * keyed by (bfs_engine_fingerprint, epoch, batch): a batch another daemon already
 * published is read instead of computed; a batch computed here is published. Call before
 * the first get/prefetch; s must outlive x. Store errors never fail a read: the batch is
 * computed instead.
 */
void bfs_exec_set_store(bfs_exec *x, bfs_store *s);

/*
 * bfs_exec_set_memfd - from now on (on != 0), each finished batch is moved into a sealed
 * memory file (memfd_create, F_SEAL_WRITE): one copy of ~1% of its compute time, after
 * which its bytes can never change, so the mount can make that file the backing file of
 * the batch file (FUSE passthrough: reads and mmap go from the kernel straight to it) and
 * it may be handed to other processes. The batch's buffer returns to the pool. A batch
 * that could not be moved (no memory) keeps its buffer and has no file (bfs_batch_fd -1).
 */
void bfs_exec_set_memfd(bfs_exec *x, int on);

/*
 * bfs_exec_open_store - open the store o->cache_dir names ("" : none, *out = NULL; "auto":
 * the per-user default directory under /dev/shm, created if needed) with the budget
 * cache_dir_mb, for bfs_exec_set_store. Returns 0 or an error with a message naming the
 * directory in err. The caller closes *out (bfs_store_close) after bfs_exec_destroy.
 */
int bfs_exec_open_store(const bfs_pipeline_opts *o, bfs_store **out, char *err, size_t errlen);

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

/* bfs_exec_consumed - a hint that batch k of epoch has been read in full by its reader:
 * it becomes the first to evict (the kernel's page cache serves repeat reads). */
void bfs_exec_consumed(bfs_exec *x, uint64_t epoch, uint64_t k);

/* bfs_exec_shutdown - wake every waiter with -ESHUTDOWN and refuse new work (unmount). */
void bfs_exec_shutdown(bfs_exec *x);

/* bfs_exec_get_stats - counters now. */
void bfs_exec_get_stats(bfs_exec *x, bfs_exec_stats *st);

/* bfs_batch_data / bfs_batch_size - the batch file's bytes; valid until release. */
const uint8_t *bfs_batch_data(const bfs_batch *b);
uint64_t bfs_batch_size(const bfs_batch *b);

/* bfs_batch_fd - the sealed memfd holding the batch's bytes (bfs_exec_set_memfd), or -1;
 * owned by the executor, open until the batch is freed (after the last release). */
int bfs_batch_fd(const bfs_batch *b);

/* bfs_batch_release - drop a reference; accepts NULL. */
void bfs_batch_release(bfs_batch *b);

#endif
