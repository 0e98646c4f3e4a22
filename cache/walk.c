/*
 * walk.c — the readers' walks: the one model of where a reader goes next, used by both
 * prefetch (engine/exec.c follows a reader's walk forward, bfs_bc_walk_next, and tells a
 * reader's next request from a new walk with it) and eviction (bfs_bc_next_read: in how
 * many steps of that same walk a reader reaches a batch, the inverse). See batchcache.h.
 *
 * A walk: k, k + s, k + 2s, ... of an epoch of nb batches (s, the stride, may be
 * negative; 0 counts as 1), or the batches in the order of their names sorted as strings
 * (lex: a shell's glob); a reader that crossed from one epoch into the next before goes on
 * at the next epoch's first batch of the same residue (lex: batch 0) after the last of its
 * epoch. Pure functions: no state, no locks.
 */
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

int bfs_bc_walk_next(const bfs_bc_reader *r, uint64_t nb, uint64_t ne, uint64_t *epoch, uint64_t *k)
{
    if (r->lex) { /* the names' string order, and on into the next epoch's once crossed */
        int64_t next = bfs_bc_lex_next(*k, nb);
        if (next < 0) {
            if (!r->crossed || *epoch + 1 >= ne || *k >= nb)
                return -1;
            ++*epoch, next = 0;
        }
        *k = (uint64_t)next;
        return 0;
    }
    int64_t s = r->stride ? r->stride : 1, next = (int64_t)*k + s;
    if (r->crossed && s > 0 && (uint64_t)next >= nb) {
        /* after the last batch of its residue: the next epoch's first of that residue */
        if (*k >= nb || *epoch + 1 >= ne)
            return -1; /* k outside the epoch: no walk to go on with */
        ++*epoch, *k = *k % (uint64_t)s;
        return 0;
    }
    if (next < 0 || (uint64_t)next >= nb)
        return -1;
    *k = (uint64_t)next;
    return 0;
}
