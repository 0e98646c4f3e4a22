/*
 * batchcache.h — the eviction policy of a mount's in-memory cache of finished batches.
 *
 * The executor (engine/exec.c) holds the batches and the table of active readers; this
 * module decides, from what the executor feeds it, which finished batch to let go of.
 * The rules (docs/engine.md, "Readers and the window"):
 *   - a batch's worth is when the nearest active reader will read it (bfs_bc_next_read:
 *     readers walk k, k+s, k+2s, ... of an epoch and, once seen to, on into the next);
 *   - over the budget, the batch read farthest in the future goes first (least recently
 *     used among equals): a reader behind the window recomputes it, identically;
 *   - batches no reader will read ("passed") are kept to passed_max bytes even under the
 *     budget, oldest first out, so that memory is recycled while warm instead of the cache
 *     growing to the whole budget with fresh pages.
 * Pure functions over plain values: no allocation, no locks (the executor calls them under
 * its own), no knowledge of jobs, files or FUSE.
 */
#ifndef BATCHFS_CACHE_BATCHCACHE_H
#define BATCHFS_CACHE_BATCHCACHE_H

#include <stdint.h>

/* An active reader as the executor's reader table has it. */
typedef struct bfs_bc_reader {
    uint64_t epoch, k; /* the batch it read last */
    int64_t stride;    /* its step (0 counts as 1) */
    int crossed;       /* it went on from one epoch into the next before */
} bfs_bc_reader;

/* bfs_bc_walk_len - batches a walk r0, r0 + s, ... (0 <= r0 < s, s > 0) takes in an epoch
 * of nb batches (the executor's prefetch follows the same walks). */
int64_t bfs_bc_walk_len(int64_t nb, int64_t r0, int64_t s);

/*
 * bfs_bc_next_read - in how many of its steps the nearest of readers r[0..n) will read
 * batch k of epoch (nb batches per epoch), or UINT64_MAX when none will (behind every
 * reader, off their strides, or epochs away).
 */
uint64_t bfs_bc_next_read(const bfs_bc_reader *r, int n, uint64_t nb, uint64_t epoch, uint64_t k);

/* A choice in the making: bfs_bc_begin, bfs_bc_offer each finished, unreferenced batch,
 * then bfs_bc_victim. */
typedef struct bfs_bc_choice {
    uint64_t held;   /* bytes offered */
    uint64_t passed; /* of which no reader will read */
    const void *oldest_passed, *far;
    uint64_t oldest_passed_used, far_used, far_next;
} bfs_bc_choice;

void bfs_bc_begin(bfs_bc_choice *c);

/* bfs_bc_offer - batch `item` (opaque to the policy) of size bytes, last used at tick
 * `used`, next read in next_read steps (bfs_bc_next_read; UINT64_MAX: passed). */
void bfs_bc_offer(bfs_bc_choice *c, const void *item, uint64_t size, uint64_t used,
                  uint64_t next_read);

/*
 * bfs_bc_victim - the item to evict under budget bytes (what may be held) and passed_max
 * (what may be held of passed batches), or NULL when everything offered may stay.
 * *passed (may be NULL) says whether the victim is a passed batch (else one read ahead).
 */
const void *bfs_bc_victim(const bfs_bc_choice *c, uint64_t budget, uint64_t passed_max,
                          int *passed);

#endif
