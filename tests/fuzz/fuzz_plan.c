/*
 * fuzz_plan.c — libFuzzer target for the epoch plan (engine/plan.c).
 *
 * The input's first bytes choose the options and a small n (1..1024); with flag bit 0 of
 * byte 18 set, the remaining bytes are page sizes (0..15 samples, so empty pages occur)
 * of an explicit page table, the last page taking whatever is left. bfs_plan_create must
 * either refuse with -EINVAL and a message, or give a plan for which, for every shard:
 * positions are distinct dataset indices, shards are disjoint and each holds floor(n/N),
 * the batches concatenate to the shard's order, and bfs_plan_locate inverts it. The raw
 * bijection (bfs_perm) is checked on the same n. A violated contract aborts (CHECK).
 */
#include "base/err.h"
#include "engine/plan.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_N      1024u
#define MAX_SHARDS 8u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_plan: %s:%d: contract violated: %s\n", __FILE__, __LINE__,       \
                    #cond);                                                                        \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static uint64_t take(const uint8_t **p, size_t *left, size_t bytes)
{
    uint64_t v = 0;
    for (size_t i = 0; i < bytes && *left; i++, (*p)++, (*left)--)
        v |= (uint64_t) * *p << (8 * i);
    return v;
}

/* Check shard I of the plan made from o; marks owner[] (shard + 1). Returns samples. */
static uint64_t check_shard(bfs_plan *p, uint64_t epoch, uint64_t n, uint32_t I, uint8_t *owner)
{
    uint64_t per = bfs_plan_shard_size(p), nb = bfs_plan_batches(p);
    CHECK(nb >= 1);
    static uint64_t order[MAX_N], batch[MAX_N];
    for (uint64_t i = 0; i < per; i++) {
        CHECK(bfs_plan_position(p, epoch, i, &order[i]) == 0);
        CHECK(order[i] < n);
        CHECK(owner[order[i]] == 0);
        owner[order[i]] = (uint8_t)(I + 1);
        uint32_t s = 0;
        uint64_t sp = 0;
        CHECK(bfs_plan_locate(p, epoch, order[i], &s, &sp) == 0);
        CHECK(s == I && sp == i);
    }
    uint64_t beyond = 0;
    CHECK(bfs_plan_position(p, epoch, per, &beyond) == -ERANGE);
    uint64_t pos = 0;
    for (uint64_t k = 0; k < nb; k++) {
        uint32_t len = bfs_plan_batch_len(p, k);
        CHECK(len >= 1 && pos + len <= per);
        CHECK(bfs_plan_batch_indices(p, epoch, k, batch) == (int)len);
        CHECK(memcmp(batch, order + pos, len * sizeof *batch) == 0);
        pos += len;
    }
    CHECK(bfs_plan_batch_len(p, nb) == 0);
    CHECK(bfs_plan_batch_indices(p, epoch, nb, batch) == -ERANGE);
    return per;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *in = data;
    size_t left = size;
    bfs_plan_opts o;
    bfs_plan_opts_default(&o);
    o.shuffle = (int)(take(&in, &left, 1) % 4);     /* 3: an invalid mode */
    uint64_t n = take(&in, &left, 2) % (MAX_N + 1); /* 0: invalid */
    uint8_t sh = (uint8_t)take(&in, &left, 1);
    o.shard_count = sh % (MAX_SHARDS + 1);            /* 0: invalid */
    o.shard_index = (uint32_t)(sh >> 4) % MAX_SHARDS; /* may be >= count: invalid */
    o.batch = (uint32_t)(take(&in, &left, 2) % 700);  /* 0: invalid */
    o.drop_last = (int)(take(&in, &left, 1) % 3);     /* 2: invalid */
    o.window_pages = (uint32_t)(take(&in, &left, 1) % 16);
    o.page_samples = (uint32_t)(take(&in, &left, 1) % 40);
    o.seed = take(&in, &left, 8);
    uint64_t epoch = take(&in, &left, 1);
    int explicit_pages = (int)(take(&in, &left, 1) & 1);

    static uint64_t pf[MAX_N * 2 + 2];
    uint64_t npages = 0;
    if (explicit_pages) {
        pf[0] = 0;
        while (pf[npages] < n && npages < MAX_N * 2) {
            uint64_t sz = left ? take(&in, &left, 1) % 16 : n - pf[npages];
            if (sz > n - pf[npages])
                sz = n - pf[npages];
            pf[npages + 1] = pf[npages] + sz;
            npages++;
        }
        if (pf[npages] < n) /* ran out of room: last page takes the rest */
            pf[npages] = n;
        if (npages == 0) { /* n = 0: one empty page */
            pf[1] = 0;
            npages = 1;
        }
    }

    char err[512];
    bfs_plan *p = NULL;
    int rc = bfs_plan_create(&o, n, explicit_pages ? pf : NULL, npages, &p, err, sizeof err);
    if (rc) {
        CHECK(rc == -EINVAL && p == NULL && err[0] != '\0');
        return 0;
    }
    CHECK(n >= 1 && o.shard_count >= 1 && o.shard_index < o.shard_count);
    bfs_plan_destroy(p);

    /* every shard of these options */
    static uint8_t owner[MAX_N];
    memset(owner, 0, n);
    uint64_t total = 0;
    for (uint32_t i = 0; i < o.shard_count; i++) {
        o.shard_index = i;
        rc = bfs_plan_create(&o, n, explicit_pages ? pf : NULL, npages, &p, err, sizeof err);
        CHECK(rc == 0);
        total += check_shard(p, epoch, n, i, owner);
        if (i == 0)
            for (uint64_t s = 0; s < n; s++) {
                int r = bfs_plan_locate(p, epoch, s, NULL, NULL);
                CHECK(r == 0 || r == -ENOENT);
            }
        bfs_plan_destroy(p);
    }
    CHECK(total == n / o.shard_count * o.shard_count);

    /* the raw bijection */
    bfs_perm perm;
    bfs_perm_init(&perm, n, o.seed);
    memset(owner, 0, n);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t j = bfs_perm_apply(&perm, i);
        CHECK(j < n && !owner[j]);
        owner[j] = 1;
        CHECK(bfs_perm_inverse(&perm, j) == i);
    }
    return 0;
}
