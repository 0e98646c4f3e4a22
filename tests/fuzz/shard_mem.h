/*
 * shard_mem.h — a shard read from memory (bfs_shard_in) for the shard readers' fuzz
 * targets: at most `step` bytes per call when step is set, so that every way the input
 * can be cut between reads is tried.
 */
#ifndef BATCHFS_TESTS_FUZZ_SHARD_MEM_H
#define BATCHFS_TESTS_FUZZ_SHARD_MEM_H

#include <string.h>
#include <sys/types.h>

#include "engine/dataset/shard.h"

typedef struct shard_mem {
    const uint8_t *p;
    size_t n, pos, step;
} shard_mem;

static ssize_t shard_mem_read(void *ctx, void *buf, size_t n)
{
    shard_mem *m = ctx;
    size_t k = m->n - m->pos;
    k = k < n ? k : n;
    k = m->step && k > m->step ? m->step : k;
    memcpy(buf, m->p + m->pos, k);
    m->pos += k;
    return (ssize_t)k;
}

/* the bytes p[0..n) as a shard, read step bytes at a time (0: as many as asked) */
static inline bfs_shard_in shard_mem_in(shard_mem *m, const uint8_t *p, size_t n, size_t step)
{
    *m = (shard_mem){p, n, 0, step};
    return (bfs_shard_in){shard_mem_read, m};
}

#endif
