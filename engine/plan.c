/*
 * plan.c — the epoch plan: keyed Feistel permutation, page-window order, shards, batches
 * (see plan.h for the contract).
 *
 * Design. Everything is computed per index from keys derived from (seed, epoch); no
 * permutation is ever stored. The only per-epoch state is, for shuffle=pages with an
 * explicit page table, the prefix sums of page sizes in permuted page order ("cum",
 * npages+1 words): a position's window and page are found by binary search in it
 * (O(log npages)). It is built on first use of an epoch (O(npages) Feistel evaluations)
 * and kept in a small LRU cache of BFS_PLAN_EPOCH_CACHE epochs, since readers of a mount
 * work on one or two epochs at a time (a sweep of jobs may spread over a few more). With
 * no page table, pages have a fixed size and the same prefix sums have a closed form, so
 * that case is O(1) per epoch and per index like shuffle=full.
 *
 * Pages order of one epoch, in symbols: P pages, window size W, page permutation pi;
 * permuted slot q holds page pi(q); cum[q] = sum of |page pi(q')| for q' < q; window w is
 * slots [wW, min(wW+W, P)), i.e. epoch positions [cum[wW], cum[min(wW+W, P)]); inside it a
 * keyed bijection sigma_w maps local position j to offset sigma_w(j) in the concatenation
 * of the window's pages in slot order.
 *
 * Thread safety: the plan is read-only after creation except slots[] and clock, guarded
 * by lock. A slot's table is immutable once published; refs keeps it alive while a caller
 * reads it without the lock. When every slot is in use, the caller keeps a private table
 * for the duration of its call (correct, only slower).
 */
#include "engine/plan.h"
#include "base/mix.h"

#include "base/err.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Salts and tags that separate the keys of each use (arbitrary fixed constants; they are
 * part of the order's definition: changing one changes every epoch's order). */
#define PLAN_SALT    0xbb67ae8584caa73bull /* frac(sqrt(3)), SHA-512's second IV word */
#define TAG_FULL     1u
#define TAG_PAGES    2u
#define TAG_WINDOW   3u
#define PERM_SALT    0x3c6ef372fe94f82bull /* frac(sqrt(5)), SHA-512's third IV word */
#define GOLDEN_GAMMA 0x9e3779b97f4a7c15ull /* splitmix64's increment: 2^64 / phi, odd */

struct epoch_table {
    uint64_t epoch;
    uint64_t *cum;      /* npages+1 prefix sums; NULL: slot empty */
    unsigned refs;      /* callers reading cum without the lock */
    uint64_t last_used; /* plan clock at last acquire, for LRU */
};

struct bfs_plan {
    bfs_plan_opts o; /* validated, defaults filled in */
    uint64_t n;
    uint64_t per_shard;
    uint64_t batches;

    /* shuffle=pages */
    uint64_t npages;
    uint64_t *page_first; /* npages+1 entries, owned; NULL: pages of page_samples */
    uint64_t page_samples;
    uint64_t last_page_size; /* page_first == NULL: size of page npages-1, 1..page_samples */
    uint64_t nwindows;

    pthread_mutex_t lock;
    struct epoch_table slots[BFS_PLAN_EPOCH_CACHE]; /* guarded by lock */
    uint64_t clock;                                 /* guarded by lock */
};

/* What a call needs of one epoch; lives on the caller's stack. */
typedef struct epoch_view {
    bfs_perm perm;       /* full: the order; pages: the page order pi */
    uint64_t win_key;    /* pages: base key of the in-window bijections */
    uint64_t qstar;      /* pages without table: slot holding the (short) last page */
    const uint64_t *cum; /* pages with table: prefix sums (slot's or private) */
    int slot;            /* cache slot held, or -1 */
    uint64_t *own;       /* private table to free at release, or NULL */
    /* memo of the last window's bijection (batches mostly stay in one window) */
    uint64_t memo_w;
    bfs_perm memo_sigma;
} epoch_view;

/* ---- mixing and the Feistel bijection -------------------------------------------------- */

/* Key for (seed, epoch, tag). Each step is a bijection of the new input given the
 * previous ones, so for a fixed seed distinct epochs get distinct keys and vice versa. */
static uint64_t derive_key(uint64_t seed, uint64_t epoch, uint64_t tag)
{
    uint64_t h = bfs_mix64(seed ^ PLAN_SALT);
    h = bfs_mix64(h ^ tag);
    return bfs_mix64(h ^ epoch);
}

/* Next value of a splitmix64 stream (Steele, Lea, Flood 2014). */
static inline uint64_t splitmix_next(uint64_t *state)
{
    *state += GOLDEN_GAMMA;
    return bfs_mix64(*state);
}

/* Uniform in [0, bound), bound <= 2^32, without bias (Lemire 2019, "Fast random integer
 * generation in an interval": multiply, reject the few low products that would bias). */
static uint32_t draw_below(uint64_t *state, uint32_t bound)
{
    uint64_t m = (splitmix_next(state) >> 32) * bound;
    if ((uint32_t)m < bound) {
        uint32_t threshold = (uint32_t)-bound % bound;
        while ((uint32_t)m < threshold)
            m = (splitmix_next(state) >> 32) * bound;
    }
    return (uint32_t)(m >> 32);
}

void bfs_perm_init(bfs_perm *p, uint64_t n, uint64_t key)
{
    p->n = n;
    p->half_bits = 0;
    p->half_mask = 0;
    /* Mixing the key first keeps structured keys (k, k + gamma, ...) from sharing round
     * keys shifted by one round. */
    uint64_t s = bfs_mix64(key ^ PERM_SALT);
    if (n <= BFS_PERM_SMALL) {
        for (uint32_t i = 0; i < n; i++)
            p->fwd[i] = (uint8_t)i;
        for (uint32_t i = (uint32_t)n; i-- > 1;) { /* Fisher-Yates */
            uint32_t j = draw_below(&s, i + 1);
            uint8_t t = p->fwd[i];
            p->fwd[i] = p->fwd[j];
            p->fwd[j] = t;
        }
        for (uint32_t i = 0; i < n; i++)
            p->inv[p->fwd[i]] = (uint8_t)i;
        return;
    }
    uint32_t bits = 64u - (uint32_t)__builtin_clzll(n - 1); /* to hold n-1; n > 64 here */
    bits += bits & 1u;
    p->half_bits = bits / 2;
    p->half_mask = p->half_bits == 32 ? 0xffffffffull : (1ull << p->half_bits) - 1;
    for (unsigned r = 0; r < BFS_PERM_ROUNDS; r++)
        p->round_key[r] = splitmix_next(&s);
}

/* One pass of the network over [0, 2^(2h)): rounds (L, R) -> (R, L ^ F_r(R)). */
static inline uint64_t feistel_forward(const bfs_perm *p, uint64_t x)
{
    const uint32_t h = p->half_bits;
    const uint64_t m = p->half_mask;
    uint64_t l = x >> h, r = x & m;
    for (unsigned i = 0; i < BFS_PERM_ROUNDS; i++) {
        uint64_t t = l ^ (bfs_mix64(r ^ p->round_key[i]) & m);
        l = r;
        r = t;
    }
    return l << h | r;
}

static inline uint64_t feistel_backward(const bfs_perm *p, uint64_t x)
{
    const uint32_t h = p->half_bits;
    const uint64_t m = p->half_mask;
    uint64_t l = x >> h, r = x & m;
    for (unsigned i = BFS_PERM_ROUNDS; i-- > 0;) {
        uint64_t t = r ^ (bfs_mix64(l ^ p->round_key[i]) & m);
        r = l;
        l = t;
    }
    return l << h | r;
}

uint64_t bfs_perm_apply(const bfs_perm *p, uint64_t i)
{
    if (i >= p->n)
        return i;
    if (p->n <= BFS_PERM_SMALL)
        return p->fwd[i];
    /* Cycle walking: i lies on a cycle of the network that returns to i < n, so this
     * ends; the domain is < 4n, so the expected number of passes is < 4. */
    uint64_t x = i;
    do
        x = feistel_forward(p, x);
    while (x >= p->n);
    return x;
}

uint64_t bfs_perm_inverse(const bfs_perm *p, uint64_t v)
{
    if (v >= p->n)
        return v;
    if (p->n <= BFS_PERM_SMALL)
        return p->inv[v];
    uint64_t x = v;
    do
        x = feistel_backward(p, x);
    while (x >= p->n);
    return x;
}

/* ---- options and creation ------------------------------------------------------------- */

void bfs_plan_opts_default(bfs_plan_opts *o)
{
    memset(o, 0, sizeof *o);
    o->shuffle = BFS_SHUFFLE_FULL;
    o->shard_index = 0;
    o->shard_count = 1;
    o->batch = BFS_PLAN_BATCH_DEFAULT;
    o->drop_last = 1;
    o->window_pages = BFS_PLAN_WINDOW_PAGES_DEFAULT;
    o->page_samples = BFS_PLAN_PAGE_SAMPLES_DEFAULT;
}

static int check_opts(const bfs_plan_opts *o, uint64_t n, char *err, size_t errlen)
{
    if (o->shuffle != BFS_SHUFFLE_FULL && o->shuffle != BFS_SHUFFLE_PAGES &&
        o->shuffle != BFS_SHUFFLE_NONE)
        return bfs_errf(-EINVAL, err, errlen, "shuffle: unknown mode %d (use full, pages or none)",
                        o->shuffle);
    if (o->shard_count == 0)
        return bfs_errf(-EINVAL, err, errlen,
                        "shard=%" PRIu32 "/0: the shard count must be at least 1", o->shard_index);
    if (o->shard_index >= o->shard_count)
        return bfs_errf(-EINVAL, err, errlen,
                        "shard=%" PRIu32 "/%" PRIu32 ": the shard index must be below the "
                        "shard count (shards are numbered 0..%" PRIu32 ")",
                        o->shard_index, o->shard_count, o->shard_count - 1);
    if (o->batch == 0 || o->batch > INT32_MAX)
        return bfs_errf(-EINVAL, err, errlen, "batch=%" PRIu32 ": must be between 1 and %d",
                        o->batch, INT32_MAX);
    if (o->drop_last != 0 && o->drop_last != 1)
        return bfs_errf(-EINVAL, err, errlen, "drop_last=%d: must be 0 or 1", o->drop_last);
    if (o->pad != 0 && o->pad != 1)
        return bfs_errf(-EINVAL, err, errlen, "pad=%d: must be 0 or 1", o->pad);
    if (n == 0)
        return bfs_errf(-EINVAL, err, errlen, "the dataset has no samples: nothing to plan");
    if (n < o->shard_count)
        return bfs_errf(-EINVAL, err, errlen,
                        "shard=%" PRIu32 "/%" PRIu32 ": the dataset has only %" PRIu64
                        " samples, fewer than the %" PRIu32 " shards; use at most %" PRIu64
                        " shards",
                        o->shard_index, o->shard_count, n, o->shard_count, n);
    uint64_t per = n / o->shard_count + (o->pad && n % o->shard_count != 0);
    if (o->drop_last && per < o->batch)
        return bfs_errf(-EINVAL, err, errlen,
                        "batch=%" PRIu32 " with drop_last=1: shard %" PRIu32 "/%" PRIu32
                        " has only %" PRIu64 " sample%s per epoch, not enough for one batch; "
                        "use batch=%" PRIu64 " or less, or drop_last=0",
                        o->batch, o->shard_index, o->shard_count, per, per == 1 ? "" : "s", per);
    return 0;
}

static int check_pages(const uint64_t *pf, uint64_t npages, uint64_t n, char *err, size_t errlen)
{
    if (npages == 0)
        return bfs_errf(-EINVAL, err, errlen, "shuffle=pages: the page table has no pages");
    if (npages > (SIZE_MAX / sizeof(uint64_t)) - 1)
        return bfs_errf(-EINVAL, err, errlen, "shuffle=pages: %" PRIu64 " pages is too many",
                        npages);
    if (pf[0] != 0)
        return bfs_errf(-EINVAL, err, errlen,
                        "shuffle=pages: the page table starts at sample %" PRIu64 ", not 0", pf[0]);
    for (uint64_t p = 0; p < npages; p++)
        if (pf[p + 1] < pf[p])
            return bfs_errf(-EINVAL, err, errlen,
                            "shuffle=pages: page table not sorted: page %" PRIu64
                            " starts at sample %" PRIu64 ", page %" PRIu64 " at %" PRIu64,
                            p, pf[p], p + 1, pf[p + 1]);
    if (pf[npages] != n)
        return bfs_errf(-EINVAL, err, errlen,
                        "shuffle=pages: the page table covers %" PRIu64
                        " samples but the dataset has %" PRIu64,
                        pf[npages], n);
    return 0;
}

int bfs_plan_create(const bfs_plan_opts *o, uint64_t n, const uint64_t *page_first, uint64_t npages,
                    bfs_plan **out, char *err, size_t errlen)
{
    *out = NULL;
    if (err && errlen)
        err[0] = '\0';
    bfs_plan_opts v = *o;
    if (v.window_pages == 0)
        v.window_pages = BFS_PLAN_WINDOW_PAGES_DEFAULT;
    if (v.page_samples == 0)
        v.page_samples = BFS_PLAN_PAGE_SAMPLES_DEFAULT;
    int rc = check_opts(&v, n, err, errlen);
    if (rc)
        return rc;
    if (v.shuffle == BFS_SHUFFLE_PAGES && page_first) {
        rc = check_pages(page_first, npages, n, err, errlen);
        if (rc)
            return rc;
    }

    bfs_plan *p = calloc(1, sizeof *p);
    if (!p)
        return bfs_errf(-ENOMEM, err, errlen, "out of memory for its plan");
    p->o = v;
    p->n = n;
    p->per_shard = n / v.shard_count + (v.pad && n % v.shard_count != 0);
    p->batches = p->per_shard / v.batch + (!v.drop_last && p->per_shard % v.batch != 0);

    if (v.shuffle == BFS_SHUFFLE_PAGES) {
        if (page_first) {
            p->npages = npages;
            p->page_first = malloc((size_t)(npages + 1) * sizeof *p->page_first);
            if (!p->page_first) {
                rc = -ENOMEM;
                goto fail_alloc;
            }
            memcpy(p->page_first, page_first, (size_t)(npages + 1) * sizeof *page_first);
        } else {
            p->page_samples = v.page_samples;
            p->npages = n / v.page_samples + (n % v.page_samples != 0);
            p->last_page_size = n - (p->npages - 1) * v.page_samples;
        }
        p->nwindows = p->npages / v.window_pages + (p->npages % v.window_pages != 0);
    }

    rc = pthread_mutex_init(&p->lock, NULL);
    if (rc) {
        rc = -rc;
        goto fail_mutex;
    }
    *out = p;
    return 0;

fail_mutex:
    free(p->page_first);
fail_alloc:
    free(p);
    return bfs_errf(rc, err, errlen, "%s for its plan",
                    rc == -ENOMEM ? "out of memory" : bfs_strerror(rc));
}

void bfs_plan_destroy(bfs_plan *p)
{
    if (!p)
        return;
    for (unsigned i = 0; i < BFS_PLAN_EPOCH_CACHE; i++)
        free(p->slots[i].cum);
    pthread_mutex_destroy(&p->lock);
    free(p->page_first);
    free(p);
}

uint64_t bfs_plan_samples(const bfs_plan *p)
{
    return p->n;
}

uint64_t bfs_plan_shard_size(const bfs_plan *p)
{
    return p->per_shard;
}

uint64_t bfs_plan_batches(const bfs_plan *p)
{
    return p->batches;
}

uint32_t bfs_plan_batch_len(const bfs_plan *p, uint64_t k)
{
    if (k >= p->batches)
        return 0;
    uint64_t left = p->per_shard - k * p->o.batch;
    return left < p->o.batch ? (uint32_t)left : p->o.batch;
}

/* ---- pages: page geometry -------------------------------------------------------------- */

/* First dataset index of page pg. */
static inline uint64_t page_start(const bfs_plan *p, uint64_t pg)
{
    return p->page_first ? p->page_first[pg] : pg * p->page_samples;
}

/* cum[q]: samples in slots [0, q) of the epoch's page order, q <= npages. Without a table
 * every page holds page_samples except the last, which sits in slot qstar. (The product
 * may wrap for q = npages when n is near 2^64; the modular result is still exact.) */
static inline uint64_t cum_at(const bfs_plan *p, const epoch_view *v, uint64_t q)
{
    if (v->cum)
        return v->cum[q];
    uint64_t c = q * p->page_samples;
    return q > v->qstar ? c - (p->page_samples - p->last_page_size) : c;
}

/* Largest q in [lo, hi) with cum[q * stride] <= t, given cum[lo * stride] <= t. */
static uint64_t search_cum(const uint64_t *cum, uint64_t stride, uint64_t lo, uint64_t hi,
                           uint64_t t)
{
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (cum[mid * stride] <= t)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* The window holding epoch position g (< n). The largest such index is never an empty
 * window, since the next window starts after g. */
static uint64_t window_of(const bfs_plan *p, const epoch_view *v, uint64_t g)
{
    const uint64_t wp = p->o.window_pages;
    if (v->cum)
        return search_cum(v->cum, wp, 0, p->nwindows, g);
    /* fixed page size: window w nominally starts at w*W*S; only the slot of the short
     * last page moves later starts back, by less than one page, so one step fixes it */
    uint64_t w = g / (wp * p->page_samples);
    if (w + 1 < p->nwindows && cum_at(p, v, (w + 1) * wp) <= g)
        w++;
    return w;
}

/* The slot holding offset t (< n) of the page order, inside window w. */
static uint64_t slot_of(const bfs_plan *p, const epoch_view *v, uint64_t w, uint64_t t)
{
    const uint64_t wp = p->o.window_pages;
    uint64_t lo = w * wp, hi = lo + wp < p->npages ? lo + wp : p->npages;
    if (v->cum)
        return search_cum(v->cum, 1, lo, hi, t);
    uint64_t q = t / p->page_samples;
    if (q + 1 < p->npages && cum_at(p, v, q + 1) <= t)
        q++;
    return q;
}

/* sigma_w for window w of this epoch, memoized in the view. */
static const bfs_perm *window_perm(const bfs_plan *p, epoch_view *v, uint64_t w)
{
    if (v->memo_w != w) {
        const uint64_t wp = p->o.window_pages;
        uint64_t first = w * wp, end = first + wp < p->npages ? first + wp : p->npages;
        uint64_t start = cum_at(p, v, first);
        bfs_perm_init(&v->memo_sigma, cum_at(p, v, end) - start, bfs_mix64(v->win_key ^ w));
        v->memo_w = w;
    }
    return &v->memo_sigma;
}

/* Dataset index at epoch position g < n. */
static uint64_t pages_sample(const bfs_plan *p, epoch_view *v, uint64_t g)
{
    uint64_t w = window_of(p, v, g);
    uint64_t start = cum_at(p, v, w * p->o.window_pages);
    uint64_t t = start + bfs_perm_apply(window_perm(p, v, w), g - start);
    uint64_t q = slot_of(p, v, w, t);
    return page_start(p, bfs_perm_apply(&v->perm, q)) + (t - cum_at(p, v, q));
}

/* Epoch position of dataset index s < n. */
static uint64_t pages_position(const bfs_plan *p, epoch_view *v, uint64_t s)
{
    uint64_t pg =
        p->page_first ? search_cum(p->page_first, 1, 0, p->npages, s) : s / p->page_samples;
    uint64_t q = bfs_perm_inverse(&v->perm, pg);
    uint64_t w = q / p->o.window_pages;
    uint64_t start = cum_at(p, v, w * p->o.window_pages);
    uint64_t t = cum_at(p, v, q) + (s - page_start(p, pg));
    return start + bfs_perm_inverse(window_perm(p, v, w), t - start);
}

/* ---- pages: the per-epoch table cache ------------------------------------------------- */

static uint64_t *build_cum(const bfs_plan *p, const bfs_perm *pages)
{
    uint64_t *cum = malloc((size_t)(p->npages + 1) * sizeof *cum);
    if (!cum)
        return NULL;
    cum[0] = 0;
    for (uint64_t q = 0; q < p->npages; q++) {
        uint64_t pg = bfs_perm_apply(pages, q);
        cum[q + 1] = cum[q] + (p->page_first[pg + 1] - p->page_first[pg]);
    }
    return cum;
}

/* Find epoch's table in the cache and take a reference; -1 if absent. Caller holds lock. */
static int cache_find(bfs_plan *p, uint64_t epoch)
{
    for (unsigned i = 0; i < BFS_PLAN_EPOCH_CACHE; i++) {
        struct epoch_table *s = &p->slots[i];
        if (s->cum && s->epoch == epoch) {
            s->refs++;
            s->last_used = ++p->clock;
            return (int)i;
        }
    }
    return -1;
}

/* Get epoch's table into v->cum: from the cache, or built (outside the lock, so readers
 * of cached epochs never wait for a build) and published, or kept private if every slot
 * is in use. Two threads may build the same epoch at once; the second discards its copy. */
static int acquire_table(bfs_plan *p, uint64_t epoch, epoch_view *v)
{
    pthread_mutex_lock(&p->lock);
    int i = cache_find(p, epoch);
    if (i >= 0) {
        v->slot = i;
        v->cum = p->slots[i].cum;
    }
    pthread_mutex_unlock(&p->lock);
    if (i >= 0)
        return 0;
    uint64_t *cum = build_cum(p, &v->perm);
    if (!cum)
        return -ENOMEM;
    pthread_mutex_lock(&p->lock);
    i = cache_find(p, epoch);
    if (i >= 0) {
        v->slot = i;
        v->cum = p->slots[i].cum;
        pthread_mutex_unlock(&p->lock);
        free(cum);
        return 0;
    }
    int victim = -1;
    for (unsigned j = 0; j < BFS_PLAN_EPOCH_CACHE; j++) {
        struct epoch_table *s = &p->slots[j];
        if (s->refs)
            continue;
        if (victim < 0 || !s->cum ||
            (p->slots[victim].cum && s->last_used < p->slots[victim].last_used))
            victim = (int)j;
    }
    uint64_t *old = NULL;
    if (victim >= 0) {
        struct epoch_table *s = &p->slots[victim];
        old = s->cum;
        s->cum = cum;
        s->epoch = epoch;
        s->refs = 1;
        s->last_used = ++p->clock;
        v->slot = victim;
    } else {
        v->own = cum;
    }
    pthread_mutex_unlock(&p->lock);
    free(old);
    v->cum = cum;
    return 0;
}

static int view_acquire(bfs_plan *p, uint64_t epoch, epoch_view *v)
{
    v->cum = NULL;
    v->slot = -1;
    v->own = NULL;
    v->memo_w = UINT64_MAX;
    v->win_key = 0;
    v->qstar = 0;
    switch (p->o.shuffle) {
    case BFS_SHUFFLE_FULL:
        bfs_perm_init(&v->perm, p->n, derive_key(p->o.seed, epoch, TAG_FULL));
        return 0;
    case BFS_SHUFFLE_PAGES:
        bfs_perm_init(&v->perm, p->npages, derive_key(p->o.seed, epoch, TAG_PAGES));
        v->win_key = derive_key(p->o.seed, epoch, TAG_WINDOW);
        if (!p->page_first) {
            v->qstar = bfs_perm_inverse(&v->perm, p->npages - 1);
            return 0;
        }
        return acquire_table(p, epoch, v);
    default:
        return 0;
    }
}

static void view_release(bfs_plan *p, epoch_view *v)
{
    if (v->slot >= 0) {
        pthread_mutex_lock(&p->lock);
        p->slots[v->slot].refs--;
        pthread_mutex_unlock(&p->lock);
    }
    free(v->own);
}

/* ---- positions ------------------------------------------------------------------------- */

/* Epoch position of shard position sp (< per_shard) of this plan's shard, before the
 * pad=1 wrap: below N * per_shard < n + N. */
static inline uint64_t raw_position(const bfs_plan *p, uint64_t sp)
{
    if (p->o.shuffle == BFS_SHUFFLE_PAGES)
        return (uint64_t)p->o.shard_index * p->per_shard + sp; /* contiguous blocks */
    return sp * p->o.shard_count + p->o.shard_index;           /* strided, as DESIGN.md says */
}

/* ... and after it: pad=1 positions past n repeat the start of the epoch order (g - n < N
 * <= n, since plans have n >= N). */
static inline uint64_t epoch_position(const bfs_plan *p, uint64_t sp)
{
    uint64_t g = raw_position(p, sp);
    return g >= p->n ? g - p->n : g;
}

int bfs_plan_padded(const bfs_plan *p, uint64_t shard_position)
{
    return shard_position < p->per_shard && raw_position(p, shard_position) >= p->n;
}

static inline uint64_t sample_at(const bfs_plan *p, epoch_view *v, uint64_t g)
{
    switch (p->o.shuffle) {
    case BFS_SHUFFLE_FULL:
        return bfs_perm_apply(&v->perm, g);
    case BFS_SHUFFLE_PAGES:
        return pages_sample(p, v, g);
    default:
        return g;
    }
}

int bfs_plan_batch_indices(bfs_plan *p, uint64_t epoch, uint64_t k, uint64_t *out)
{
    uint32_t len = bfs_plan_batch_len(p, k);
    if (len == 0)
        return -ERANGE;
    epoch_view v;
    int rc = view_acquire(p, epoch, &v);
    if (rc)
        return rc;
    uint64_t first = k * p->o.batch;
    for (uint32_t i = 0; i < len; i++)
        out[i] = sample_at(p, &v, epoch_position(p, first + i));
    view_release(p, &v);
    return (int)len;
}

int bfs_plan_position(bfs_plan *p, uint64_t epoch, uint64_t shard_position, uint64_t *sample)
{
    return bfs_plan_positions(p, epoch, shard_position, 1, sample);
}

int bfs_plan_positions(bfs_plan *p, uint64_t epoch, uint64_t first, uint64_t n, uint64_t *out)
{
    if (first > p->per_shard || n > p->per_shard - first)
        return -ERANGE;
    if (!n)
        return 0; /* no view to set up (shuffle=pages may build a table for it) */
    epoch_view v;
    int rc = view_acquire(p, epoch, &v);
    if (rc)
        return rc;
    for (uint64_t i = 0; i < n; i++)
        out[i] = sample_at(p, &v, epoch_position(p, first + i));
    view_release(p, &v);
    return 0;
}

int bfs_plan_locate(bfs_plan *p, uint64_t epoch, uint64_t sample, uint32_t *shard,
                    uint64_t *shard_position)
{
    if (sample >= p->n)
        return -ERANGE;
    epoch_view v;
    int rc = view_acquire(p, epoch, &v);
    if (rc)
        return rc;
    uint64_t g;
    switch (p->o.shuffle) {
    case BFS_SHUFFLE_FULL:
        g = bfs_perm_inverse(&v.perm, sample);
        break;
    case BFS_SHUFFLE_PAGES:
        g = pages_position(p, &v, sample);
        break;
    default:
        g = sample;
        break;
    }
    view_release(p, &v);
    const uint64_t nshards = p->o.shard_count;
    if (g >= nshards * p->per_shard)
        return -ENOENT; /* in the n mod N positions no shard takes (pad=0 only) */
    uint64_t s, sp;
    if (p->o.shuffle == BFS_SHUFFLE_PAGES)
        s = g / p->per_shard, sp = g % p->per_shard;
    else
        s = g % nshards, sp = g / nshards;
    if (shard)
        *shard = (uint32_t)s;
    if (shard_position)
        *shard_position = sp;
    return 0;
}
