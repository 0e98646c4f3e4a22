/*
 * exec_readers.c — the executor's table of active readers (see exec_readers_internal.h):
 * who reads, where each is on its walk, how far ahead it is prefetched, its pace.
 *
 * Neighbours: engine/exec.c embeds the table (x->rt) and calls it under x->lock
 * (bfs_exec_follow, bfs_exec_readers, the tuner's settings); this file calls nothing of
 * the executor, and of the walk model (cache/walk.c) bfs_bc_walk_next and bfs_bc_lex_next.
 *
 * Locks: none of its own; the table is guarded by x->lock, held by every caller (HELD).
 */
#include "engine/exec_readers_internal.h"
#include "base/check.h"

#include <stddef.h>

#define HELD(t) BFS_ASSERT(!(t)->held || (t)->held((t)->held_arg))

typedef bfs_exec_rt_reader reader;

_Static_assert(BFS_EXEC_MAX_READERS <= BFS_BC_MAX_READERS,
               "bfs_exec_rt_walks fills a policy table");

void bfs_exec_rt_init(bfs_exec_rt *t, int (*held)(const void *arg), const void *held_arg)
{
    *t = (bfs_exec_rt){.prefetch = BFS_PREFETCH_AUTO, .held = held, .held_arg = held_arg};
}

/* Forget readers idle too long, or idle a while with their key gone. Locked. */
static void expire_readers(bfs_exec_rt *t, double now, bfs_exec_alive_fn alive)
{
    HELD(t);
    for (int i = 0; i < BFS_EXEC_MAX_READERS; i++) {
        reader *r = &t->readers[i];
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

/* The active reader with this id, or NULL (gone, or its slot taken). */
static reader *by_id(bfs_exec_rt *t, uint32_t id)
{
    for (int i = 0; i < BFS_EXEC_MAX_READERS; i++)
        if (t->readers[i].key && t->readers[i].id == id)
            return &t->readers[i];
    return NULL;
}

void bfs_exec_rt_waited(bfs_exec_rt *t, uint32_t id, uint64_t epoch, uint64_t k, double wait_s)
{
    HELD(t);
    reader *r = by_id(t, id);
    /* not when the reader moved on meanwhile (a threaded loader's next request) */
    if (r && r->epoch == epoch && r->k == k) {
        r->waited = wait_s;
        r->wait_s = r->batches <= 1 ? wait_s : smooth(r->wait_s, wait_s, r->batches - 1);
    }
}

/* A reader appeared or its pace became known (bfs_exec_on_reader_news). Locked. */
static void news(bfs_exec_rt *t)
{
    HELD(t);
    t->news++;
    if (t->news_fn)
        t->news_fn(t->news_arg);
}

/* Does a request for (epoch, k) continue the walk of a reader last at (e0, k0) with
 * stride s (0: not known yet, taken as 1), or in the names' string order (lex)? Its walk's
 * next step (bfs_bc_walk_next, the one walk model of prefetch and eviction), taken as one
 * that goes on across epochs: within the epoch, the next step; from the walk's last batch,
 * the next epoch's first batch of the same residue (in string order: batch 0): a training
 * loop (or a rank reading k = r, r + s, ..., or `cat epoch/N/batch_*` epoch after epoch)
 * going on with its next epoch. */
static int continues(uint64_t e0, uint64_t k0, int64_t s, int lex, uint64_t epoch, uint64_t k,
                     uint64_t nb)
{
    bfs_bc_reader walk = {.stride = s, .crossed = 1, .lex = lex};
    return bfs_bc_walk_next(&walk, nb, UINT64_MAX, &e0, &k0) == 0 && e0 == epoch && k0 == k;
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
static void step_to(bfs_exec_rt *t, reader *r, uint64_t k, uint64_t nb)
{
    HELD(t);
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

uint32_t bfs_exec_rt_follow(bfs_exec_rt *t, uint64_t key, uint64_t epoch, uint64_t k, double now,
                            double wait_s, bfs_exec_alive_fn alive, uint64_t nb,
                            uint64_t cache_batches, bfs_bc_reader *walk, int *depth, double *own_s)
{
    HELD(t);
    reader *r = NULL, *adopt = NULL;
    for (int i = 0; i < BFS_EXEC_MAX_READERS && !r; i++)
        if (t->readers[i].key == key)
            r = &t->readers[i];
    if (!r) { /* a new key: the next batch of a reader whose process is gone? (a shell
               * loop of `cat`s, one process per batch, and per epoch) */
        for (int i = 0; i < BFS_EXEC_MAX_READERS && alive && !adopt; i++) {
            reader *c = &t->readers[i];
            if (c->key && continues(c->epoch, c->k, c->stride, c->lex, epoch, k, nb) &&
                !alive(c->key))
                adopt = c;
        }
        if (adopt) {
            r = adopt;
            r->key = key;
        } else {
            /* a free slot (after forgetting stale readers), else the least recent */
            expire_readers(t, now, alive);
            for (int i = 0; i < BFS_EXEC_MAX_READERS; i++) {
                reader *c = &t->readers[i];
                if (!c->key) {
                    r = c;
                    break;
                }
                if (!r || c->asked < r->asked)
                    r = c;
            }
            *r = (reader){.key = key,
                          .id = ++t->next_reader_id,
                          .epoch = epoch,
                          .k = k,
                          .depth = -1,
                          .asked = now};
            news(t);
        }
    }
    if (r->batches) { /* the step it took since its last batch, less the wait for it */
        double own = now - r->asked - r->waited;
        r->own_s = smooth(r->own_s, own > 0 ? own : 0, r->batches);
        if (wait_s >= 0)
            r->wait_s = smooth(r->wait_s, wait_s, r->batches);
        if (r->epoch == epoch && k != r->k) {
            step_to(t, r, k, nb);
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
        news(t); /* its pace is known now */
    uint32_t id = r->id;
    *walk =
        (bfs_bc_reader){.stride = r->stride ? r->stride : 1, .crossed = r->crossed, .lex = r->lex};
    /* nothing ahead of a walk not known yet: a reader's first batch says nothing of its
     * next (data-parallel ranks reading K, K + W, ... of their own mounts each wasted the 3
     * batches after K) */
    int d = !r->known ? 0 : r->depth >= 0 ? r->depth : t->prefetch;
    /* the budget is shared by the active readers, each holding one batch being read */
    unsigned active = 0;
    for (int i = 0; i < BFS_EXEC_MAX_READERS; i++)
        active += t->readers[i].key != 0;
    uint64_t per = cache_batches / (active ? active : 1);
    if ((uint64_t)d + 1 > per)
        d = per > 1 ? (int)(per - 1) : 0;
    *depth = d;
    *own_s = r->known && r->batches >= 2 ? r->own_s : 0;
    return id;
}

int bfs_exec_rt_list(bfs_exec_rt *t, double now, bfs_exec_alive_fn alive, bfs_exec_reader *out,
                     int max)
{
    HELD(t);
    int n = 0;
    expire_readers(t, now, alive);
    for (int i = 0; i < BFS_EXEC_MAX_READERS && n < max; i++) {
        const reader *r = &t->readers[i];
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
                                     .depth = r->depth >= 0 ? r->depth : t->prefetch,
                                     .batches = r->batches,
                                     .own_s = r->own_s,
                                     .wait_s = r->wait_s,
                                     .idle_s = now - r->asked};
    }
    return n;
}

void bfs_exec_rt_sort(bfs_exec_reader *out, int n)
{
    for (int i = 1; i < n; i++) /* id order: insertion sort, n <= 64 */
        for (int j = i; j > 0 && out[j - 1].id > out[j].id; j--) {
            bfs_exec_reader tmp = out[j];
            out[j] = out[j - 1];
            out[j - 1] = tmp;
        }
}

int bfs_exec_rt_walks(const bfs_exec_rt *t, bfs_bc_reader *out)
{
    HELD(t);
    int n = 0;
    for (int i = 0; i < BFS_EXEC_MAX_READERS; i++) {
        const reader *r = &t->readers[i];
        if (r->key)
            out[n++] = (bfs_bc_reader){r->epoch, r->k, r->stride, r->crossed, r->lex};
    }
    return n;
}

int bfs_exec_rt_fetched(bfs_exec_rt *t, uint32_t id, bfs_exec_rt_mark *m)
{
    HELD(t);
    const reader *r = by_id(t, id);
    if (!r || !r->fetched)
        return 0;
    *m = r->mark;
    return 1;
}

void bfs_exec_rt_set_fetched(bfs_exec_rt *t, uint32_t id, const bfs_exec_rt_mark *m)
{
    HELD(t);
    reader *r = by_id(t, id);
    if (r)
        r->fetched = 1, r->mark = *m;
}

/* Whether the read of batch k of epoch lies on walk at or after the read the mark m was set
 * at and before the mark itself: at most m->steps steps of the walk from that read. */
static int read_since_mark(const bfs_bc_reader *walk, uint64_t nb, uint64_t ne, uint64_t epoch,
                           uint64_t k, const bfs_exec_rt_mark *m)
{
    uint64_t e = m->at_epoch, b = m->at_k;
    for (uint64_t d = 0; d < m->steps; d++) {
        if (e == epoch && b == k)
            return 1;
        if (bfs_bc_walk_next(walk, nb, ne, &e, &b) != 0)
            return 0;
    }
    return 0;
}

int bfs_exec_rt_fetch_from(const bfs_bc_reader *walk, uint64_t nb, uint64_t ne, uint64_t epoch,
                           uint64_t k, const bfs_exec_rt_mark *m, const uint64_t (*win)[2],
                           int nwin, int *keep)
{
    *keep = 0;
    if (!m || !nwin || !read_since_mark(walk, nb, ne, epoch, k, m))
        return 0; /* no mark, or this read is not past the one that set it: all of it */
    /* a reader that keeps its walk: the window up to the mark is fetched */
    for (int i = nwin - 1; i >= 0; i--)
        if (win[i][0] == m->epoch && win[i][1] == m->k)
            return i + 1;
    /* a window that shrank (its size follows the measured step, which varies): the mark
     * further along the walk than its end, all of it is fetched already and the mark stays
     * (asked anew, the whole window counted again at each such read: 70 fetches for 30
     * batches read under ThreadSanitizer's timing) */
    uint64_t e = win[nwin - 1][0], b = win[nwin - 1][1];
    for (uint64_t d = 0; d < m->steps && bfs_bc_walk_next(walk, nb, ne, &e, &b) == 0; d++)
        if (e == m->epoch && b == m->k) {
            *keep = 1;
            return nwin;
        }
    return 0;
}

void bfs_exec_rt_set_depth(bfs_exec_rt *t, uint32_t id, int depth)
{
    HELD(t);
    reader *r = by_id(t, id);
    if (r)
        r->depth = depth < 0 ? -1 : depth;
}

void bfs_exec_rt_set_prefetch(bfs_exec_rt *t, int depth)
{
    HELD(t);
    if (depth >= 0)
        t->prefetch = depth;
}

int bfs_exec_rt_prefetch(const bfs_exec_rt *t)
{
    HELD(t);
    return t->prefetch;
}

void bfs_exec_rt_on_news(bfs_exec_rt *t, void (*fn)(void *), void *arg)
{
    HELD(t);
    t->news_fn = fn, t->news_arg = arg;
}

uint64_t bfs_exec_rt_news(const bfs_exec_rt *t)
{
    HELD(t);
    return t->news;
}
