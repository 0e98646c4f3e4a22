/* batchcache.c — the in-memory batch cache's eviction policy (see batchcache.h). */
#include "cache/batchcache.h"

#include <stddef.h>

int64_t bfs_bc_walk_len(int64_t nb, int64_t r0, int64_t s)
{
    return (nb - r0 + s - 1) / s;
}

uint64_t bfs_bc_next_read(const bfs_bc_reader *r, int n, uint64_t nb_u, uint64_t epoch, uint64_t k)
{
    uint64_t best = UINT64_MAX;
    int64_t nb = (int64_t)nb_u;
    for (int i = 0; i < n; i++) {
        int64_t s = r[i].stride ? r[i].stride : 1;
        int64_t d = (int64_t)k - (int64_t)r[i].k, steps;
        if (s == 1) { /* in order, the common case, without the divisions (this runs for
                       * every cached batch and reader at every eviction) */
            if (r[i].epoch == epoch && d > 0)
                steps = d;
            else if (r[i].epoch + 1 == epoch && r[i].crossed && (int64_t)r[i].k < nb)
                steps = nb - (int64_t)r[i].k + (int64_t)k;
            else
                continue;
        } else if (r[i].epoch == epoch) {
            if (d % s || d / s <= 0)
                continue; /* behind it, its own batch (read already), or off its stride */
            steps = d / s;
        } else if (r[i].crossed && s > 0 && epoch == r[i].epoch + 1 && (int64_t)r[i].k < nb &&
                   (int64_t)k % s == (int64_t)r[i].k % s) {
            int64_t r0 = (int64_t)r[i].k % s, m = bfs_bc_walk_len(nb, r0, s);
            steps = (m - 1 - ((int64_t)r[i].k - r0) / s) + ((int64_t)k - r0) / s + 1;
        } else {
            continue;
        }
        if ((uint64_t)steps < best)
            best = (uint64_t)steps;
    }
    return best;
}

void bfs_bc_begin(bfs_bc_choice *c)
{
    *c = (bfs_bc_choice){0};
}

void bfs_bc_offer(bfs_bc_choice *c, const void *item, uint64_t size, uint64_t used,
                  uint64_t next_read)
{
    c->held += size;
    if (next_read == UINT64_MAX) {
        c->passed += size;
        if (!c->oldest_passed || used < c->oldest_passed_used)
            c->oldest_passed = item, c->oldest_passed_used = used;
    }
    /* the over-budget victim: farthest next read, least recently used among equals */
    if (!c->far || next_read > c->far_next || (next_read == c->far_next && used < c->far_used))
        c->far = item, c->far_next = next_read, c->far_used = used;
}

const void *bfs_bc_victim(const bfs_bc_choice *c, uint64_t budget, uint64_t passed_max, int *passed)
{
    const void *v = NULL;
    int p = 0;
    if (c->held > budget)
        v = c->far, p = c->far_next == UINT64_MAX;
    else if (c->passed > passed_max)
        v = c->oldest_passed, p = 1;
    if (passed)
        *passed = p;
    return v;
}
