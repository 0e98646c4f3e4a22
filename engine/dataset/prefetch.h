/*
 * prefetch.h — a remote file's payloads fetched ahead of the workers that read them.
 *
 * Neighbours: the .bfs reader (bfs_read.c) owns one per remote file. bfs_advise_samples
 * (called as a batch starts, with all its samples) hands it the byte ranges the batch
 * will read; it sorts them, joins neighbours into runs (shuffle=pages gives few, long
 * runs; shuffle=full many short ones) and fetches the runs on its own threads, several at
 * once, while the workers decode the first samples. A worker's read takes its range from
 * here (waiting for it when it is on its way) or, when it was never asked for, evicted,
 * or failed, reads it itself. So a batch costs about one round trip to the object store,
 * not one per sample.
 *
 * Invariants: a range is fetched at most once while it is held; the bytes held are
 * bounded (bfs_prefetch_configure): a new range that finds no room is not prefetched (the
 * ranges held are needed sooner), unless ranges unread for 10 s (their reader went
 * elsewhere) or failed ones can be dropped for it; a request's bytes are copied once,
 * into the reader's buffer, outside the lock; nothing here
 * decides a byte of a batch (the reader verifies every sample's checksum as it does for
 * its own reads, and a failed prefetch is read again by the worker, which reports the
 * error). Thread-safe: one lock (guards every field of bfs_prefetch), threads made on the
 * first bfs_prefetch_want.
 */
#ifndef BATCHFS_ENGINE_DATASET_PREFETCH_H
#define BATCHFS_ENGINE_DATASET_PREFETCH_H

#include <stddef.h>
#include <stdint.h>

typedef struct bfs_prefetch bfs_prefetch;

/* Counters of every prefetcher of the process, for /stats' `source` section. */
typedef struct bfs_prefetch_stats {
    uint64_t runs;    /* requests sent for prefetched ranges */
    uint64_t ranges;  /* ranges (samples) asked for and fetched ahead */
    uint64_t hits;    /* reads served from a prefetched range (waited for or not) */
    uint64_t waits;   /* of those, reads that waited for their range to arrive */
    uint64_t dropped; /* ranges dropped unread to make room */
    uint64_t threads; /* fetch threads running now (every prefetcher's) */
} bfs_prefetch_stats;

/*
 * bfs_prefetch_configure - process-wide: threads (fetch_parallel=, 1..256) and the bytes
 * held at most per prefetcher. Takes effect for prefetchers created later.
 */
void bfs_prefetch_configure(unsigned threads, uint64_t budget_bytes);

/* bfs_prefetch_set_stale_ms - process-wide: after how long an unread range may be dropped
 * for a new one (default 10000; tests set less). */
void bfs_prefetch_set_stale_ms(unsigned ms);

/* How a prefetcher reads: exactly len bytes at off into buf, 0 or an error
 * (bfs_object_read's contract). Called from the prefetcher's threads, several at once. */
typedef int (*bfs_prefetch_read_fn)(void *ctx, void *buf, size_t len, uint64_t off);

/* bfs_prefetch_create - a prefetcher reading through read(ctx, ...) (ctx not owned; it
 * must outlive the prefetcher). 0, or -ENOMEM. */
int bfs_prefetch_create(bfs_prefetch_read_fn read, void *ctx, bfs_prefetch **out);

/* bfs_prefetch_destroy - stop its threads (a fetch in flight is waited for) and free
 * everything. NULL is a no-op. */
void bfs_prefetch_destroy(bfs_prefetch *p);

/*
 * bfs_prefetch_want - fetch the n ranges [off[i], off[i] + len[i]) ahead, in the order of
 * their offsets; ranges already held and empty ones are skipped, ranges that do not fit
 * in the room left (after dropping failed and stale ones) are not prefetched. Never
 * fails: a prefetcher that cannot start its threads or allocate fetches nothing.
 */
void bfs_prefetch_want(bfs_prefetch *p, const uint64_t *off, const uint32_t *len, uint32_t n);

/*
 * bfs_prefetch_take - the range [off, off + len) into buf when it was asked for: waits
 * while it is on its way, then gives it up (a range is taken once). Returns 1 (buf
 * filled), 0 (not held: read it yourself), or the fetch's error (BFS_E_CHANGED, -EIO,
 * ...; read it yourself to get the error of your own read).
 */
int bfs_prefetch_take(bfs_prefetch *p, uint64_t off, void *buf, size_t len);

/* bfs_prefetch_get_stats - the process's counters so far. */
void bfs_prefetch_get_stats(bfs_prefetch_stats *st);

#endif
