/* batchcache.c — the in-memory batch cache's eviction policy (see batchcache.h). */
#include "cache/batchcache.h"

#include <stddef.h>

int64_t bfs_bc_walk_len(int64_t nb, int64_t r0, int64_t s)
{
    return (nb - r0 + s - 1) / s;
}

int64_t bfs_bc_lex_next(uint64_t k, uint64_t nb)
{
    if (k >= nb)
        return -1;
    if (k == 0) /* "0" is a prefix of no other name */
        return nb > 1 ? 1 : -1;
    uint64_t last = nb - 1;
    if (k <= last / 10) /* "k" is followed by "k0" */
        return (int64_t)(k * 10);
    /* else by the next name of k's own length or shorter: drop the digits that cannot
     * grow (9s, or past the last batch), then add one */
    while (k % 10 == 9 || k + 1 > last)
        if ((k /= 10) == 0)
            return -1; /* "9", "99", ... or the last one-digit name: the order's end */
    return (int64_t)(k + 1);
}

uint64_t bfs_bc_lex_rank(uint64_t k, uint64_t nb)
{
    /* the names before "k": for each length L, the L-digit numbers below k's first L
     * digits (and those digits themselves when k is longer: a prefix comes first), or,
     * for L longer than k, below k followed by zeros */
    uint64_t prefix[21];
    int m = 0;
    for (uint64_t v = k;; v /= 10) {
        prefix[m++] = v; /* prefix[i]: k without its last i digits */
        if (v < 10)
            break;
    }
    uint64_t count = 0, lo = 0, top = 10, scaled = k; /* L-digit numbers: [lo, top) */
    for (int L = 1; lo < nb && L <= 20; L++) {
        uint64_t hi = top < nb ? top : nb, bound;
        if (L <= m) {
            bound = prefix[m - L] + (L < m);
        } else {
            scaled = scaled > UINT64_MAX / 10 ? UINT64_MAX : scaled * 10;
            bound = scaled;
        }
        bound = bound < lo ? lo : bound > hi ? hi : bound;
        count += bound - lo;
        if (top > UINT64_MAX / 10)
            break;
        lo = top, top *= 10;
    }
    return count;
}

uint64_t bfs_bc_next_read(const bfs_bc_reader *r, int n, uint64_t nb_u, uint64_t epoch, uint64_t k)
{
    uint64_t best = UINT64_MAX;
    int64_t nb = (int64_t)nb_u;
    for (int i = 0; i < n; i++) {
        int64_t s = r[i].stride ? r[i].stride : 1;
        int64_t d = (int64_t)k - (int64_t)r[i].k, steps;
        if (r[i].lex) { /* the names' string order: steps are differences of ranks */
            if (k >= nb_u || r[i].k >= nb_u)
                continue;
            uint64_t rk = bfs_bc_lex_rank(k, nb_u), rr = bfs_bc_lex_rank(r[i].k, nb_u);
            if (r[i].epoch == epoch && rk > rr)
                steps = (int64_t)(rk - rr);
            else if (r[i].epoch + 1 == epoch && r[i].crossed)
                steps = nb - (int64_t)rr + (int64_t)rk;
            else
                continue;
        } else if (s == 1) { /* in order, the common case, without the divisions (this runs for
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
                  uint64_t next_read, int file)
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
    if (!file)
        return;
    c->files++;
    if (!c->far_file || next_read > c->far_file_next ||
        (next_read == c->far_file_next && used < c->far_file_used))
        c->far_file = item, c->far_file_next = next_read, c->far_file_used = used;
}

const void *bfs_bc_victim(const bfs_bc_choice *c, uint64_t budget, uint64_t files_max,
                          uint64_t passed_max, int *passed)
{
    const void *v = NULL;
    int p = 0;
    if (c->held > budget)
        v = c->far, p = c->far_next == UINT64_MAX;
    else if (c->files > files_max)
        v = c->far_file, p = c->far_file_next == UINT64_MAX;
    else if (c->passed > passed_max)
        v = c->oldest_passed, p = 1;
    if (passed)
        *passed = p;
    return v;
}
