/*
 * samplecache.c — the decoded-sample cache (see samplecache.h for the design).
 *
 * Layout: index[idx] is an atomic pointer to the newest entry of sample idx; entries of
 * one sample (one per scale) are chained through `next`, which is written once before
 * the entry is published and never again. Publication is a release CAS on index[idx];
 * lookups load it with acquire, so an entry's pixels are visible before its pointer.
 * Nothing is removed before destroy: no reclamation problem, no lock on the read path.
 */
#include "cache/samplecache.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest scaled side accepted: keeps 3 * w * h far from overflowing size_t. */
#define SAMPLECACHE_MAX_SIDE (1 << 20)

struct bfs_samplecache_entry {
    struct bfs_samplecache_entry *next; /* older entry of the same sample; set before publish */
    uint64_t idx;
    size_t bytes; /* charged to the budget: header + pixels */
    int w, h, scale;
    uint8_t rgb[]; /* packed RGB8, 3 * w bytes a row */
};

struct bfs_samplecache {
    uint64_t n;
    uint64_t budget;
    _Atomic(bfs_samplecache_entry *) *index; /* n heads; published by CAS (see top) */
    _Atomic uint64_t bytes;                  /* reserved + held; CAS keeps it <= budget */
    _Atomic uint64_t hits, misses, inserts, refused;
};

static void count(_Atomic uint64_t *c)
{
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

int bfs_samplecache_create(uint64_t nsamples, uint64_t budget_bytes, bfs_samplecache **out)
{
    *out = NULL;
    if (!budget_bytes)
        return -EINVAL;
    if (nsamples > SIZE_MAX / sizeof(_Atomic(bfs_samplecache_entry *)))
        return -ENOMEM;
    bfs_samplecache *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    /* all-zero bytes are null pointers, lock-free atomic ones included (the atomic
     * pointer has the plain pointer's representation on every target we build for);
     * calloc of a large array maps zero pages, so untouched parts cost no memory */
    c->index = calloc(nsamples ? nsamples : 1, sizeof *c->index);
    if (!c->index) {
        free(c);
        return -ENOMEM;
    }
    c->n = nsamples;
    c->budget = budget_bytes;
    *out = c;
    return 0;
}

void bfs_samplecache_destroy(bfs_samplecache *c)
{
    if (!c)
        return;
    for (uint64_t i = 0; i < c->n; i++) {
        bfs_samplecache_entry *en = atomic_load_explicit(&c->index[i], memory_order_relaxed);
        while (en) {
            bfs_samplecache_entry *next = en->next;
            free(en);
            en = next;
        }
    }
    free(c->index);
    free(c);
}

static void describe(const bfs_samplecache_entry *en, bfs_samplecache_image *out)
{
    *out = (bfs_samplecache_image){
        .rgb = en->rgb, .stride = (size_t)en->w * 3, .w = en->w, .h = en->h, .scale = en->scale};
}

static const bfs_samplecache_entry *find(const bfs_samplecache_entry *en, int scale)
{
    for (; en; en = en->next)
        if (en->scale == scale)
            return en;
    return NULL;
}

int bfs_samplecache_lookup(bfs_samplecache *c, uint64_t idx, int scale, bfs_samplecache_image *out)
{
    if (idx >= c->n)
        return -ERANGE;
    const bfs_samplecache_entry *en =
        find(atomic_load_explicit(&c->index[idx], memory_order_acquire), scale);
    if (!en) {
        count(&c->misses);
        return -ENOENT;
    }
    count(&c->hits);
    describe(en, out);
    return 0;
}

/* Take `need` bytes of the budget, or none: the counter never exceeds the budget. */
static int take(bfs_samplecache *c, uint64_t need)
{
    uint64_t cur = atomic_load_explicit(&c->bytes, memory_order_relaxed);
    do {
        if (need > c->budget || cur > c->budget - need)
            return -ENOSPC;
    } while (!atomic_compare_exchange_weak_explicit(&c->bytes, &cur, cur + need,
                                                    memory_order_relaxed, memory_order_relaxed));
    return 0;
}

static void give(bfs_samplecache *c, uint64_t n)
{
    atomic_fetch_sub_explicit(&c->bytes, n, memory_order_relaxed);
}

int bfs_samplecache_reserve(bfs_samplecache *c, uint64_t idx, int scale, int w, int h,
                            bfs_samplecache_entry **out, uint8_t **pixels)
{
    *out = NULL;
    *pixels = NULL;
    if (idx >= c->n)
        return -ERANGE;
    if (w < 1 || h < 1 || w > SAMPLECACHE_MAX_SIDE || h > SAMPLECACHE_MAX_SIDE ||
        (scale != 1 && scale != 2 && scale != 4 && scale != 8))
        return -EINVAL;
    size_t bytes = sizeof(bfs_samplecache_entry) + (size_t)w * (size_t)h * 3;
    if (take(c, bytes)) {
        count(&c->refused);
        return -ENOSPC;
    }
    bfs_samplecache_entry *en = malloc(bytes);
    if (!en) {
        give(c, bytes);
        return -ENOMEM;
    }
    en->next = NULL;
    en->idx = idx;
    en->bytes = bytes;
    en->w = w, en->h = h, en->scale = scale;
    *out = en;
    *pixels = en->rgb;
    return 0;
}

void bfs_samplecache_publish(bfs_samplecache *c, bfs_samplecache_entry *en,
                             bfs_samplecache_image *out)
{
    _Atomic(bfs_samplecache_entry *) *head = &c->index[en->idx];
    bfs_samplecache_entry *cur = atomic_load_explicit(head, memory_order_acquire);
    for (;;) {
        const bfs_samplecache_entry *same = find(cur, en->scale);
        if (same) { /* lost a race with another worker decoding the same sample */
            describe(same, out);
            bfs_samplecache_abandon(c, en);
            return;
        }
        en->next = cur;
        if (atomic_compare_exchange_weak_explicit(head, &cur, en, memory_order_release,
                                                  memory_order_acquire))
            break;
    }
    count(&c->inserts);
    describe(en, out);
}

void bfs_samplecache_abandon(bfs_samplecache *c, bfs_samplecache_entry *en)
{
    if (!en)
        return;
    give(c, en->bytes);
    free(en);
}

void bfs_samplecache_get_stats(const bfs_samplecache *c, bfs_samplecache_stats *st)
{
    memset(st, 0, sizeof *st);
    if (!c)
        return;
    st->hits = atomic_load_explicit(&c->hits, memory_order_relaxed);
    st->misses = atomic_load_explicit(&c->misses, memory_order_relaxed);
    st->inserts = atomic_load_explicit(&c->inserts, memory_order_relaxed);
    st->refused_budget = atomic_load_explicit(&c->refused, memory_order_relaxed);
    st->bytes = atomic_load_explicit(&c->bytes, memory_order_relaxed);
    st->budget_bytes = c->budget;
    st->index_bytes = c->n * sizeof *c->index;
}

void bfs_samplecache_stats_json(const bfs_samplecache_stats *s, char *buf, size_t len)
{
    snprintf(buf, len,
             "{\"hits\": %llu, \"misses\": %llu, \"inserts\": %llu, \"refused_budget\": %llu, "
             "\"bytes\": %llu, \"budget_bytes\": %llu}",
             (unsigned long long)s->hits, (unsigned long long)s->misses,
             (unsigned long long)s->inserts, (unsigned long long)s->refused_budget,
             (unsigned long long)s->bytes, (unsigned long long)s->budget_bytes);
}
