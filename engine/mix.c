/*
 * mix.c — a mixture's epoch order (mix.h has the design).
 */
#include "engine/mix.h"
#include "base/err.h"
#include "engine/plan.h"
#include "engine/rng.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIX_SLOTS    4u           /* epoch tables kept */
#define MIX_ROWS_MAX (1u << 20)   /* table entries (rows * sources) before checkpointing */
#define ONE          (1ull << 32) /* fixed-point 1 of the weights */

typedef struct mix_tab {
    uint64_t epoch;
    uint64_t *cum; /* rows x n: counts drawn from each source before stratum r*G; NULL: empty */
    uint64_t q[BFS_MIX_SOURCES];
    uint32_t refs;
    uint64_t used; /* clock of the last use */
} mix_tab;

struct bfs_mix {
    bfs_mix_desc d;
    uint32_t n;
    uint64_t count[BFS_MIX_SOURCES], first[BFS_MIX_SOURCES];
    uint64_t seed;
    int shuffle;
    uint64_t E, B, C, G, rows; /* positions, stratum size, strata, checkpoint step, rows */
    uint64_t shards, shard, batches;
    uint64_t served; /* strata served per epoch (drop_last=1: whole ones only) */
    pthread_mutex_t lock;
    mix_tab slot[MIX_SLOTS]; /* guarded by lock */
    uint64_t clock;
};

/* The epoch's weights as fixed point summing to exactly ONE: floors, then the units left
 * to the largest remainders (ties: lower number) among positive weights. */
static void fixed_weights(const bfs_mix *m, uint64_t epoch, uint64_t *q)
{
    double w[BFS_MIX_SOURCES], rem[BFS_MIX_SOURCES];
    bfs_pipeline_mix_weights(&m->d, m->count, epoch, w);
    uint64_t sum = 0;
    for (uint32_t k = 0; k < m->n; k++) {
        double x = w[k] * (double)ONE;
        q[k] = x >= (double)ONE ? ONE : (uint64_t)x;
        rem[k] = w[k] > 0 ? x - (double)q[k] : -1;
        sum += q[k];
    }
    while (sum < ONE) {
        uint32_t best = 0;
        for (uint32_t k = 1; k < m->n; k++)
            if (rem[k] > rem[best])
                best = k;
        q[best]++, rem[best] -= 1, sum++;
    }
    while (sum > ONE) { /* rounding of w's sum above 1: take from the largest */
        uint32_t best = 0;
        for (uint32_t k = 1; k < m->n; k++)
            if (q[k] > q[best])
                best = k;
        q[best]--, sum--;
    }
}

/* Stratum at position t of length len: cnt[k] samples of source k, cum advanced by them. */
static void stratum(const bfs_mix *m, const uint64_t *q, uint64_t t, uint64_t len, uint64_t *cum,
                    uint32_t *cnt)
{
    __int128 behind[BFS_MIX_SOURCES];
    uint64_t frac[BFS_MIX_SOURCES], left = len;
    for (uint32_t k = 0; k < m->n; k++) {
        uint64_t prod = q[k] * len; /* q <= 2^32, len <= 2^16 */
        cnt[k] = (uint32_t)(prod >> 32);
        frac[k] = prod & (ONE - 1);
        left -= cnt[k];
        behind[k] = (__int128)q[k] * (__int128)(t + len) - ((__int128)(cum[k] + cnt[k]) << 32);
    }
    while (left--) { /* never more than the sources with a fraction (their sum is left) */
        int best = -1;
        for (uint32_t k = 0; k < m->n; k++)
            if (frac[k] && (best < 0 || behind[k] > behind[best]))
                best = (int)k;
        cnt[best]++;
        frac[best] = 0;
    }
    for (uint32_t k = 0; k < m->n; k++)
        cum[k] += cnt[k];
}

static uint64_t stratum_len(const bfs_mix *m, uint64_t c)
{
    uint64_t t = c * m->B;
    return m->E - t < m->B ? m->E - t : m->B;
}

static int tab_build(const bfs_mix *m, mix_tab *tb, uint64_t epoch)
{
    if (!(tb->cum = malloc(m->rows * m->n * sizeof *tb->cum)))
        return -ENOMEM;
    tb->epoch = epoch;
    fixed_weights(m, epoch, tb->q);
    uint64_t cum[BFS_MIX_SOURCES] = {0};
    uint32_t cnt[BFS_MIX_SOURCES];
    for (uint64_t c = 0; c < m->C; c++) {
        if (c % m->G == 0)
            memcpy(tb->cum + (c / m->G) * m->n, cum, m->n * sizeof *cum);
        stratum(m, tb->q, c * m->B, stratum_len(m, c), cum, cnt);
    }
    return 0;
}

/* The epoch's table: a cached slot (refs taken) or *own, built here. */
static int tab_get(bfs_mix *m, uint64_t epoch, mix_tab *own, mix_tab **out)
{
    pthread_mutex_lock(&m->lock);
    m->clock++;
    mix_tab *free_slot = NULL;
    for (uint32_t i = 0; i < MIX_SLOTS; i++) {
        mix_tab *s = &m->slot[i];
        if (s->cum && s->epoch == epoch) {
            s->refs++, s->used = m->clock;
            pthread_mutex_unlock(&m->lock);
            *out = s;
            return 0;
        }
        if (!s->refs && (!free_slot || !s->cum || (free_slot->cum && s->used < free_slot->used)))
            free_slot = s;
    }
    /* built under the lock: one build per epoch, O(strata * sources) integer steps */
    int rc;
    if (free_slot) {
        free(free_slot->cum);
        free_slot->cum = NULL;
        rc = tab_build(m, free_slot, epoch);
        if (!rc)
            free_slot->refs = 1, free_slot->used = m->clock, *out = free_slot;
    } else {
        memset(own, 0, sizeof *own);
        rc = tab_build(m, own, epoch);
        *out = own;
    }
    pthread_mutex_unlock(&m->lock);
    return rc;
}

static void tab_put(bfs_mix *m, mix_tab *tb, mix_tab *own)
{
    if (tb == own) {
        free(own->cum);
        return;
    }
    pthread_mutex_lock(&m->lock);
    tb->refs--;
    pthread_mutex_unlock(&m->lock);
}

/* Counts before stratum c (cum) and in it (cnt). */
static void stratum_at(const bfs_mix *m, const mix_tab *tb, uint64_t c, uint64_t *cum,
                       uint32_t *cnt)
{
    uint64_t r = c / m->G;
    memcpy(cum, tb->cum + r * m->n, m->n * sizeof *cum);
    for (uint64_t s = r * m->G; s < c; s++)
        stratum(m, tb->q, s * m->B, stratum_len(m, s), cum, cnt);
    uint64_t before[BFS_MIX_SOURCES];
    memcpy(before, cum, m->n * sizeof *cum);
    stratum(m, tb->q, c * m->B, stratum_len(m, c), cum, cnt);
    memcpy(cum, before, m->n * sizeof *cum);
}

/* A source's order for one pass, cached across the draws of one call. */
typedef struct draw_cache {
    uint64_t pass[BFS_MIX_SOURCES]; /* UINT64_MAX: none yet */
    bfs_perm perm[BFS_MIX_SOURCES];
} draw_cache;

/* Positions [j0, j1) of stratum c into out (global indices) and pass. */
static void stratum_fill(const bfs_mix *m, const mix_tab *tb, uint64_t epoch, uint64_t c,
                         uint64_t j0, uint64_t j1, draw_cache *dc, uint64_t *out, uint32_t *pass)
{
    uint64_t cum[BFS_MIX_SOURCES], start[BFS_MIX_SOURCES + 1];
    uint32_t cnt[BFS_MIX_SOURCES];
    stratum_at(m, tb, c, cum, cnt);
    start[0] = 0;
    for (uint32_t k = 0; k < m->n; k++)
        start[k + 1] = start[k] + cnt[k];
    uint64_t len = stratum_len(m, c);
    bfs_perm slots;
    if (m->shuffle == BFS_SHUFFLE_FULL) {
        bfs_rng r;
        bfs_rng_init(&r, m->seed, epoch, c, BFS_RNG_STREAM_MIX_SLOTS);
        bfs_perm_init(&slots, len, bfs_rng_u64(&r));
    }
    for (uint64_t j = j0; j < j1; j++) {
        uint64_t s = m->shuffle == BFS_SHUFFLE_FULL ? bfs_perm_apply(&slots, j) : j;
        uint32_t k = 0;
        while (start[k + 1] <= s)
            k++;
        uint64_t t = cum[k] + (s - start[k]), p = t / m->count[k], i = t % m->count[k];
        if (m->shuffle == BFS_SHUFFLE_FULL) {
            if (dc->pass[k] != p) {
                bfs_rng r;
                bfs_rng_init(&r, m->seed, epoch, (uint64_t)k << 40 | p, BFS_RNG_STREAM_MIX_DRAWS);
                bfs_perm_init(&dc->perm[k], m->count[k], bfs_rng_u64(&r));
                dc->pass[k] = p;
            }
            i = bfs_perm_apply(&dc->perm[k], i);
        }
        out[j - j0] = m->first[k] + i;
        if (pass)
            pass[j - j0] = p > UINT32_MAX ? UINT32_MAX : (uint32_t)p;
    }
}

/* What a call that draws needs: the epoch's table (held) and a fresh draw cache. */
static int draws_begin(bfs_mix *m, uint64_t epoch, draw_cache **dc, mix_tab *own, mix_tab **tb)
{
    if (!(*dc = malloc(sizeof **dc)))
        return -ENOMEM;
    memset((*dc)->pass, 0xff, sizeof(*dc)->pass);
    int rc = tab_get(m, epoch, own, tb);
    if (rc)
        free(*dc);
    return rc;
}

static void draws_end(bfs_mix *m, draw_cache *dc, mix_tab *tb, mix_tab *own)
{
    tab_put(m, tb, own);
    free(dc);
}

int bfs_mix_create(const bfs_mix_desc *d, const uint64_t *count, const uint64_t *first,
                   const bfs_pipeline_opts *o, bfs_mix **out, char *err, size_t errlen)
{
    *out = NULL;
    if (o->shuffle == BFS_SHUFFLE_PAGES)
        return bfs_errf(-EINVAL, err, errlen,
                        "shuffle=pages does not apply to mixtures (each source is drawn in its "
                        "own keyed order): use shuffle=full or none");
    bfs_mix *m = calloc(1, sizeof *m);
    if (!m)
        return bfs_errf(-ENOMEM, err, errlen, "out of memory");
    m->d = *d;
    m->n = d->n;
    uint64_t sum = 0;
    for (uint32_t k = 0; k < m->n; k++) {
        m->count[k] = count[k];
        m->first[k] = first[k];
        sum += count[k];
    }
    m->seed = o->seed;
    m->shuffle = o->shuffle;
    m->E = o->epoch_samples ? o->epoch_samples : sum;
    m->B = o->batch;
    m->C = (m->E + m->B - 1) / m->B;
    m->shards = o->shard_count;
    m->shard = o->shard_index;
    uint64_t served = o->drop_last ? m->E / m->B : m->C;
    m->served = served;
    /* pad=1: every shard ceil(served/N) batches, those past the end repeating strata */
    m->batches = o->pad ? (served + m->shards - 1) / m->shards : served / m->shards;
    m->G = (m->C * m->n + MIX_ROWS_MAX - 1) / MIX_ROWS_MAX;
    if (!m->G)
        m->G = 1;
    m->rows = m->C / m->G + 1;
    pthread_mutex_init(&m->lock, NULL);
    if (!m->batches) {
        bfs_errf(-EINVAL, err, errlen,
                 "an epoch of %llu samples (%s) makes %llu batch%s of %llu, fewer than the "
                 "%llu shards: lower batch= or raise epoch_samples=%s (or pad=1)",
                 (unsigned long long)m->E, o->epoch_samples ? "epoch_samples=" : "the sources' sum",
                 (unsigned long long)served, served == 1 ? "" : "es", (unsigned long long)m->B,
                 (unsigned long long)m->shards, o->drop_last ? " (or drop_last=0)" : "");
        bfs_mix_destroy(m);
        return -EINVAL;
    }
    *out = m;
    return 0;
}

void bfs_mix_destroy(bfs_mix *m)
{
    if (!m)
        return;
    for (uint32_t i = 0; i < MIX_SLOTS; i++)
        free(m->slot[i].cum);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

uint64_t bfs_mix_samples(const bfs_mix *m)
{
    return m->E;
}

uint64_t bfs_mix_batches(const bfs_mix *m)
{
    return m->batches;
}

/* The stratum batch k of this shard is (pad=1: past the served ones, from the start). */
static uint64_t stratum_of(const bfs_mix *m, uint64_t k)
{
    uint64_t c = k * m->shards + m->shard;
    return c < m->served ? c : c % m->served;
}

uint32_t bfs_mix_batch_len(const bfs_mix *m, uint64_t k)
{
    return k < m->batches ? (uint32_t)stratum_len(m, stratum_of(m, k)) : 0;
}

int bfs_mix_padded(const bfs_mix *m, uint64_t k)
{
    return k < m->batches && k * m->shards + m->shard >= m->served;
}

int bfs_mix_batch_indices(bfs_mix *m, uint64_t epoch, uint64_t k, uint64_t *out, uint32_t *pass)
{
    if (k >= m->batches)
        return -ERANGE;
    draw_cache *dc;
    mix_tab own, *tb;
    int rc = draws_begin(m, epoch, &dc, &own, &tb);
    if (rc)
        return rc;
    uint64_t c = stratum_of(m, k), len = stratum_len(m, c);
    stratum_fill(m, tb, epoch, c, 0, len, dc, out, pass);
    draws_end(m, dc, tb, &own);
    return (int)len;
}

int bfs_mix_positions(bfs_mix *m, uint64_t epoch, uint64_t first, uint64_t n, uint64_t *out)
{
    if (first > m->E || n > m->E - first)
        return -ERANGE;
    draw_cache *dc;
    mix_tab own, *tb;
    int rc = draws_begin(m, epoch, &dc, &own, &tb);
    if (rc)
        return rc;
    for (uint64_t p = first; p < first + n;) {
        uint64_t c = p / m->B, j = p % m->B, len = stratum_len(m, c);
        uint64_t take = len - j < first + n - p ? len - j : first + n - p;
        stratum_fill(m, tb, epoch, c, j, j + take, dc, out + (p - first), NULL);
        p += take;
    }
    draws_end(m, dc, tb, &own);
    return 0;
}

int bfs_mix_counts(bfs_mix *m, uint64_t epoch, uint64_t *out)
{
    mix_tab own, *tb;
    int rc = tab_get(m, epoch, &own, &tb);
    if (rc)
        return rc;
    uint32_t cnt[BFS_MIX_SOURCES];
    stratum_at(m, tb, m->C - 1, out, cnt);
    for (uint32_t k = 0; k < m->n; k++)
        out[k] += cnt[k];
    tab_put(m, tb, &own);
    return 0;
}

void bfs_mix_weights(const bfs_mix *m, uint64_t epoch, double *w)
{
    bfs_pipeline_mix_weights(&m->d, m->count, epoch, w);
}
