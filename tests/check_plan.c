/*
 * check_plan.c — the counter-based generator (engine/rng.h) and the epoch plan
 * (engine/plan.h): Philox known answers, determinism, ranges and loose statistics with
 * fixed seeds (they pass or fail the same way on every run), the keyed bijection for
 * many n, every shuffle mode, shards, batches, page locality, the per-epoch table cache
 * under threads, and the O(1)-memory promise at n = 10^9.
 *
 * Golden values (rng_golden, plan_golden) pin the exact streams: the served bytes
 * depend on them, so a change there must be deliberate (and announced: every cached
 * batch and every reproduced experiment changes with it).
 */
#include "base/err.h"
#include "engine/plan.h"
#include "engine/rng.h"
#include "tests/testutil.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

/* ck_assert sends a message to the parent process on every success (check's mark_point),
 * which costs a system call: these cost nothing unless they fail, so they can sit in loops
 * over millions of indices (and keep the timings printed below honest). */
#define CHECK_MSG(expr, ...)                                                                       \
    do {                                                                                           \
        if (!(expr))                                                                               \
            ck_abort_msg(__VA_ARGS__);                                                             \
    } while (0)
#define CHECK(expr) CHECK_MSG(expr, "%s:%d: failed: %s", __FILE__, __LINE__, #expr)
#define CHECK_EQ(x, y)                                                                             \
    do {                                                                                           \
        unsigned long long check_x_ = (unsigned long long)(x);                                     \
        unsigned long long check_y_ = (unsigned long long)(y);                                     \
        CHECK_MSG(check_x_ == check_y_, "%s:%d: %s is %lld, want %s = %lld", __FILE__, __LINE__,   \
                  #x, (long long)check_x_, #y, (long long)check_y_);                               \
    } while (0)

/* ---- helpers --------------------------------------------------------------------------- */

typedef struct plan_args {
    int shuffle;
    uint64_t n;
    uint32_t shard_index, shard_count;
    uint32_t batch;
    int drop_last;
    uint32_t window_pages, page_samples;
    const uint64_t *page_first;
    uint64_t npages;
    uint64_t seed;
    int pad;
} plan_args;

/* A plan from a, with batch 1, shard 0/1, drop_last 0 unless given; fails the test on
 * error. */
static bfs_plan *mk(plan_args a)
{
    bfs_plan_opts o;
    bfs_plan_opts_default(&o);
    o.seed = a.seed;
    o.shuffle = a.shuffle;
    o.shard_index = a.shard_index;
    o.shard_count = a.shard_count ? a.shard_count : 1;
    o.batch = a.batch ? a.batch : 1;
    o.drop_last = a.drop_last;
    o.pad = a.pad;
    o.window_pages = a.window_pages;
    o.page_samples = a.page_samples;
    char err[512] = "";
    bfs_plan *p = NULL;
    int rc = bfs_plan_create(&o, a.n, a.page_first, a.npages, &p, err, sizeof err);
    CHECK_MSG(rc == 0, "bfs_plan_create(n=%llu, shuffle=%d): %d %s", (unsigned long long)a.n,
              a.shuffle, rc, err);
    ck_assert_ptr_nonnull(p);
    return p;
}

/* This shard's whole order of one epoch (bfs_plan_shard_size values, malloc'ed). */
static uint64_t *order_of(bfs_plan *p, uint64_t epoch)
{
    uint64_t per = bfs_plan_shard_size(p);
    uint64_t *o = malloc((per ? per : 1) * sizeof *o);
    ck_assert_ptr_nonnull(o);
    for (uint64_t i = 0; i < per; i++)
        CHECK_EQ(bfs_plan_position(p, epoch, i, &o[i]), 0);
    return o;
}

/* Page table of random sizes 1..maxsize, one page in ten empty (also at the ends). */
static uint64_t *random_pages(uint64_t n, uint64_t seed, uint32_t maxsize, uint64_t *npages)
{
    uint64_t cap = 64, np = 0, st = seed;
    uint64_t *pf = malloc(cap * sizeof *pf);
    ck_assert_ptr_nonnull(pf);
    pf[0] = 0;
    while (pf[np] < n || np == 0) {
        uint64_t r = tu_rand(&st);
        uint64_t sz = r % 10 == 0 ? 0 : 1 + (r >> 8) % maxsize;
        if (sz > n - pf[np])
            sz = n - pf[np];
        if (np + 2 > cap) {
            cap *= 2;
            pf = realloc(pf, cap * sizeof *pf);
            ck_assert_ptr_nonnull(pf);
        }
        pf[np + 1] = pf[np] + sz;
        np++;
    }
    *npages = np;
    return pf;
}

/* Page table of fixed-size pages (what a NULL table means). */
static uint64_t *uniform_pages(uint64_t n, uint64_t size, uint64_t *npages)
{
    uint64_t np = (n + size - 1) / size;
    uint64_t *pf = malloc((np + 1) * sizeof *pf);
    ck_assert_ptr_nonnull(pf);
    for (uint64_t p = 0; p < np; p++)
        pf[p] = p * size;
    pf[np] = n;
    *npages = np;
    return pf;
}

/*
 * 1 when order (a bijection on [0, n)) visits samples window by window: cut the order
 * greedily wherever every page seen so far is complete; then each page's samples must lie
 * within one piece and no piece may hold more than w pages. The plan's true windows are
 * unions of such pieces, so shuffle=pages always passes; a full shuffle interleaves
 * every page and fails.
 */
static int page_local(const uint64_t *order, uint64_t n, const uint64_t *pf, uint64_t np,
                      uint32_t w)
{
    uint64_t *page_of = malloc(n * sizeof *page_of);
    uint64_t *left = malloc(np * sizeof *left);
    int64_t *piece = malloc(np * sizeof *piece);
    CHECK(page_of && left && piece);
    for (uint64_t p = 0; p < np; p++) {
        left[p] = pf[p + 1] - pf[p];
        piece[p] = -1;
        for (uint64_t s = pf[p]; s < pf[p + 1]; s++)
            page_of[s] = p;
    }
    int64_t cur = -1;
    uint64_t open = 0, pages_in = 0;
    int ok = 1;
    for (uint64_t g = 0; g < n && ok; g++) {
        uint64_t p = page_of[order[g]];
        if (piece[p] < 0) {
            if (open == 0) {
                cur++;
                pages_in = 0;
            }
            piece[p] = cur;
            open++;
            if (++pages_in > w)
                ok = 0;
        } else if (piece[p] != cur) {
            ok = 0;
        }
        if (--left[p] == 0)
            open--;
    }
    free(page_of);
    free(left);
    free(piece);
    return ok;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static long max_rss_kb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static const int all_modes[] = {BFS_SHUFFLE_FULL, BFS_SHUFFLE_PAGES, BFS_SHUFFLE_NONE};

/* ---- Philox and the generator ---------------------------------------------------------- */

START_TEST(philox_kat)
{
    /* Random123 kat_vectors, philox4x32 10: counter, key -> output. */
    static const struct {
        uint32_t ctr[4], key[2], out[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
         {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        uint32_t out[4];
        bfs_philox4x32_10(kat[i].ctr, kat[i].key, out);
        for (int w = 0; w < 4; w++)
            CHECK_MSG(out[w] == kat[i].out[w], "kat %zu word %d: %08x, want %08x", i, w, out[w],
                      kat[i].out[w]);
        uint32_t io[4]; /* out may alias ctr */
        memcpy(io, kat[i].ctr, sizeof io);
        bfs_philox4x32_10(io, kat[i].key, io);
        ck_assert_mem_eq(io, kat[i].out, sizeof io);
    }
}
END_TEST

START_TEST(rng_golden)
{
    /* The first words of (seed 0, epoch 0, sample 0, stream 0) and of a busier input:
     * pinned so that a change to key/counter derivation cannot go unnoticed. */
    static const uint32_t want0[6] = {0xf524b485u, 0x31fbb48au, 0xa3993b8fu,
                                      0x6a8ba098u, 0xc1e35c4bu, 0xfd2b0f6eu};
    static const uint32_t want1[6] = {0xd0ac452fu, 0xdc80f028u, 0x0a653d43u,
                                      0x37c07b9bu, 0x58a85b0fu, 0x491313dbu};
    bfs_rng r;
    bfs_rng_init(&r, 0, 0, 0, 0);
    for (int i = 0; i < 6; i++)
        CHECK_MSG(bfs_rng_u32(&r) == want0[i], "stream 0 word %d", i);
    bfs_rng_init(&r, 12345, 7, 0x100000003ull, BFS_RNG_STREAM_FLIP);
    for (int i = 0; i < 6; i++)
        CHECK_MSG(bfs_rng_u32(&r) == want1[i], "stream 1 word %d", i);
}
END_TEST

START_TEST(rng_determinism)
{
    bfs_rng a, b;
    bfs_rng_init(&a, 42, 3, 1000, BFS_RNG_STREAM_CROP);
    bfs_rng_init(&b, 42, 3, 1000, BFS_RNG_STREAM_CROP);
    for (int i = 0; i < 1000; i++)
        CHECK_EQ(bfs_rng_u32(&a), bfs_rng_u32(&b));
    /* a copy taken mid-block continues identically */
    (void)bfs_rng_u32(&a);
    bfs_rng c = a;
    for (int i = 0; i < 100; i++)
        CHECK_EQ(bfs_rng_u64(&a), bfs_rng_u64(&c));

    /* changing any one input changes the stream */
    struct {
        uint64_t seed, epoch, index;
        uint32_t stream;
    } in[] = {
        {42, 3, 1000, 0}, {43, 3, 1000, 0},       {42, 4, 1000, 0},
        {42, 3, 1001, 0}, {42, 3, 1000, 1},       {42, 3, 1000 + (1ull << 32), 0},
        {0, 0, 0, 0},     {0, 0, 0, 0xffffffffu}, {UINT64_MAX, UINT64_MAX, UINT64_MAX, 0},
        {1, 0, 0, 0},     {0, 1ull << 63, 0, 0},  {42, 3, 1000 + (1ull << 63), 0},
    };
    size_t m = sizeof in / sizeof in[0];
    uint32_t first[16][8];
    for (size_t i = 0; i < m; i++) {
        bfs_rng_init(&a, in[i].seed, in[i].epoch, in[i].index, in[i].stream);
        for (int w = 0; w < 8; w++)
            first[i][w] = bfs_rng_u32(&a);
    }
    for (size_t i = 0; i < m; i++)
        for (size_t j = i + 1; j < m; j++) {
            int same = 0;
            for (int w = 0; w < 8; w++)
                same += first[i][w] == first[j][w];
            CHECK_MSG(same < 2, "inputs %zu and %zu share %d of 8 words", i, j, same);
        }
}
END_TEST

START_TEST(rng_ranges)
{
    bfs_rng r;
    bfs_rng_init(&r, 7, 0, 0, 0);
    double lo = 1, hi = 0;
    for (int i = 0; i < 100000; i++) {
        double u = bfs_rng_uniform(&r);
        CHECK(u >= 0.0 && u < 1.0);
        CHECK(u == ldexp(floor(ldexp(u, 53)), -53)); /* on the 2^-53 grid */
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
    }
    CHECK(lo < 1e-3 && hi > 1 - 1e-3);

    for (int i = 0; i < 10000; i++) {
        double x = bfs_rng_uniform_range(&r, -2.0, 3.0);
        CHECK(x >= -2.0 && x < 3.0);
        x = bfs_rng_uniform_range(&r, 1.0, nextafter(1.0, 2.0)); /* one-ulp range */
        CHECK(x == 1.0);
        x = bfs_rng_uniform_range(&r, 1e300, 1.5e300);
        CHECK(x >= 1e300 && x < 1.5e300);
    }
    CHECK(bfs_rng_uniform_range(&r, 5.0, 5.0) == 5.0);
    CHECK(bfs_rng_uniform_range(&r, 5.0, 4.0) == 5.0);
    /* a degenerate range still consumes a draw: later draws do not depend on a, b */
    bfs_rng s1, s2;
    bfs_rng_init(&s1, 1, 2, 3, 4);
    s2 = s1;
    (void)bfs_rng_uniform_range(&s1, 0, 0);
    (void)bfs_rng_uniform_range(&s2, 0, 1);
    CHECK_EQ(bfs_rng_u32(&s1), bfs_rng_u32(&s2));

    CHECK_EQ(bfs_rng_int(&r, 5, 5), 5);
    CHECK_EQ(bfs_rng_int(&r, 3, 1), 3);
    int seen[7] = {0};
    for (int i = 0; i < 1000; i++) {
        int64_t v = bfs_rng_int(&r, -3, 3);
        CHECK(v >= -3 && v <= 3);
        seen[v + 3] = 1;
    }
    for (int i = 0; i < 7; i++)
        CHECK(seen[i]);
    int neg = 0, pos = 0, lo2 = 0, hi2 = 0;
    for (int i = 0; i < 1000; i++) {
        int64_t v = bfs_rng_int(&r, INT64_MIN, INT64_MAX);
        neg += v < 0;
        pos += v > 0;
        v = bfs_rng_int(&r, INT64_MIN, INT64_MIN + 1);
        CHECK(v == INT64_MIN || v == INT64_MIN + 1);
        lo2 += v == INT64_MIN;
        v = bfs_rng_int(&r, INT64_MAX - 1, INT64_MAX);
        CHECK(v == INT64_MAX - 1 || v == INT64_MAX);
        hi2 += v == INT64_MAX;
        v = bfs_rng_int(&r, 0, UINT32_MAX); /* exactly 2^32 values */
        CHECK(v >= 0 && v <= (int64_t)UINT32_MAX);
        v = bfs_rng_int(&r, -1, UINT32_MAX); /* 2^32 + 1 values: the 64-bit path */
        CHECK(v >= -1 && v <= (int64_t)UINT32_MAX);
        v = bfs_rng_int(&r, -(1ll << 40), 1ll << 40);
        CHECK(v >= -(1ll << 40) && v <= 1ll << 40);
    }
    CHECK(neg > 400 && pos > 400);
    CHECK(lo2 > 400 && lo2 < 600);
    CHECK(hi2 > 400 && hi2 < 600);
}
END_TEST

START_TEST(rng_uniformity)
{
    /* Fixed seeds: these statistics are the same on every run; the bounds are loose
     * (about 5 standard deviations) so they only catch real defects. */
    bfs_rng r;
    bfs_rng_init(&r, 2024, 1, 99, 0);
    const int N = 100000;
    unsigned bins[10] = {0};
    for (int i = 0; i < N; i++)
        bins[bfs_rng_int(&r, 0, 9)]++;
    double chi = 0;
    for (int b = 0; b < 10; b++)
        chi += (bins[b] - N / 10.0) * (bins[b] - N / 10.0) / (N / 10.0);
    CHECK_MSG(chi < 40, "int(0,9) chi-square %.1f (9 dof)", chi);

    /* range 2^31 + 1 rejects almost half of the 32-bit draws; plain modulo would put
     * about 2/3 of the values below 2^30 instead of 1/2 */
    unsigned below = 0;
    for (int i = 0; i < N; i++)
        below += bfs_rng_int(&r, 0, 1ll << 31) < (1ll << 30);
    CHECK_MSG(fabs(below / (double)N - 0.5) < 0.01, "P(v < 2^30) = %.4f", below / (double)N);

    unsigned bit[32] = {0};
    double sum = 0;
    for (int i = 0; i < N; i++) {
        uint32_t v = bfs_rng_u32(&r);
        for (int b = 0; b < 32; b++)
            bit[b] += v >> b & 1;
        sum += bfs_rng_uniform(&r);
    }
    for (int b = 0; b < 32; b++)
        CHECK_MSG(fabs(bit[b] / (double)N - 0.5) < 0.01, "bit %d set %.4f", b, bit[b] / (double)N);
    CHECK_MSG(fabs(sum / N - 0.5) < 0.005, "mean uniform %.4f", sum / N);

    /* across samples: the first draw of consecutive sample indices */
    memset(bins, 0, sizeof bins);
    for (int i = 0; i < N; i++) {
        bfs_rng_init(&r, 0, 0, (uint64_t)i, BFS_RNG_STREAM_CROP);
        bins[(int)(bfs_rng_uniform(&r) * 10)]++;
    }
    chi = 0;
    for (int b = 0; b < 10; b++)
        chi += (bins[b] - N / 10.0) * (bins[b] - N / 10.0) / (N / 10.0);
    CHECK_MSG(chi < 40, "across samples chi-square %.1f (9 dof)", chi);
}
END_TEST

/* ---- the keyed bijection ---------------------------------------------------------------- */

START_TEST(perm_bijection)
{
    static const uint64_t ns[] = {1,  2,  3,   4,   5,   7,    16,    63,
                                  64, 65, 255, 256, 257, 1000, 65537, 1000000};
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        uint64_t n = ns[t];
        uint8_t *seen = malloc(n);
        ck_assert_ptr_nonnull(seen);
        for (uint64_t key = 0; key < (n > 100000 ? 1u : 3u); key++) {
            bfs_perm p;
            bfs_perm_init(&p, n, key * 0x1234567ull);
            memset(seen, 0, n);
            for (uint64_t i = 0; i < n; i++) {
                uint64_t j = bfs_perm_apply(&p, i);
                CHECK_MSG(j < n && !seen[j], "n=%llu: %llu -> %llu twice or out of range",
                          (unsigned long long)n, (unsigned long long)i, (unsigned long long)j);
                seen[j] = 1;
                CHECK_EQ(bfs_perm_inverse(&p, j), i);
            }
            CHECK_EQ(bfs_perm_apply(&p, n), n); /* outside: unchanged */
            CHECK_EQ(bfs_perm_inverse(&p, n + 5), n + 5);
        }
        free(seen);
    }
    bfs_perm p;
    bfs_perm_init(&p, 0, 1);
    CHECK_EQ(bfs_perm_apply(&p, 0), 0);
}
END_TEST

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

START_TEST(perm_huge)
{
    static const uint64_t ns[] = {1ull << 40, (1ull << 40) + 1, (1ull << 63) + 5, UINT64_MAX};
    enum { K = 20000 };
    uint64_t *img = malloc(2 * K * sizeof *img);
    ck_assert_ptr_nonnull(img);
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        uint64_t n = ns[t];
        bfs_perm p;
        bfs_perm_init(&p, n, 99);
        for (uint64_t k = 0; k < K; k++) {
            uint64_t a = k * (n / K), b = n - 1 - k; /* spread, and the top end */
            img[2 * k] = bfs_perm_apply(&p, a);
            img[2 * k + 1] = bfs_perm_apply(&p, b);
            CHECK(img[2 * k] < n && img[2 * k + 1] < n);
            CHECK_EQ(bfs_perm_inverse(&p, img[2 * k]), a);
            CHECK_EQ(bfs_perm_inverse(&p, img[2 * k + 1]), b);
        }
        qsort(img, 2 * K, sizeof *img, cmp_u64);
        for (size_t i = 1; i < 2 * K; i++)
            CHECK(img[i] != img[i - 1]); /* the 2K inputs are distinct, so are images */
    }
    free(img);
}
END_TEST

START_TEST(perm_uniformity)
{
    /* Over many keys a keyed permutation should look like a random one. Fixed keys: the
     * statistics are the same every run; bounds at z = 6. A Feistel network on a
     * 16-element domain (n = 5..16) fails the first check with z > 100. */
    uint64_t st = 77;
    for (uint32_t n = 3; n <= 6; n++) {
        uint32_t fact = 1;
        for (uint32_t i = 2; i <= n; i++)
            fact *= i;
        const uint32_t per = 300, K = fact * per;
        unsigned *cnt = calloc(fact, sizeof *cnt);
        ck_assert_ptr_nonnull(cnt);
        for (uint32_t k = 0; k < K; k++) {
            bfs_perm p;
            bfs_perm_init(&p, n, tu_rand(&st));
            uint32_t used[8] = {0}, code = 0; /* Lehmer code of the permutation */
            for (uint32_t i = 0; i < n; i++) {
                uint32_t v = (uint32_t)bfs_perm_apply(&p, i), rank = 0;
                for (uint32_t j = 0; j < v; j++)
                    rank += !used[j];
                used[v] = 1;
                code = code * (n - i) + rank;
            }
            cnt[code]++;
        }
        double chi = 0, dof = fact - 1;
        for (uint32_t c = 0; c < fact; c++)
            chi += (cnt[c] - (double)per) * (cnt[c] - (double)per) / per;
        double z = (chi - dof) / sqrt(2 * dof);
        CHECK_MSG(z < 6, "n=%u: permutations chi-square %.1f (%g dof), z=%.1f", n, chi, dof, z);
        free(cnt);
    }
    /* Feistel sizes: where i goes (n x n table) and where the pair (0, 1) goes */
    static const uint32_t ns[] = {65, 100, 300};
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        uint32_t n = ns[t], K = 60000;
        unsigned *m = calloc((size_t)n * n, sizeof *m), *pair = calloc((size_t)n * n, sizeof *pair);
        CHECK(m && pair);
        for (uint32_t k = 0; k < K; k++) {
            bfs_perm p;
            bfs_perm_init(&p, n, tu_rand(&st));
            for (uint32_t i = 0; i < n; i++)
                m[(size_t)i * n + bfs_perm_apply(&p, i)]++;
            pair[bfs_perm_apply(&p, 0) * n + bfs_perm_apply(&p, 1)]++;
        }
        double e = (double)K / n, chi = 0, dof = (double)(n - 1) * (n - 1);
        for (size_t c = 0; c < (size_t)n * n; c++)
            chi += (m[c] - e) * (m[c] - e) / e;
        double z = (chi - dof) / sqrt(2 * dof);
        CHECK_MSG(z < 6, "n=%u: position chi-square z=%.1f", n, z);
        double e2 = (double)K / n / (n - 1), chi2 = 0, dof2 = (double)n * (n - 1) - 1;
        for (size_t a = 0; a < n; a++)
            for (size_t b = 0; b < n; b++)
                if (a != b)
                    chi2 += (pair[a * n + b] - e2) * (pair[a * n + b] - e2) / e2;
        double z2 = (chi2 - dof2) / sqrt(2 * dof2);
        CHECK_MSG(z2 < 6, "n=%u: pair chi-square z=%.1f", n, z2);
        free(m);
        free(pair);
    }
}
END_TEST

/* ---- plans: orders ---------------------------------------------------------------------- */

START_TEST(plan_bijection_all_modes)
{
    static const uint64_t ns[] = {1, 2, 3, 7, 255, 256, 257, 1000, 65537, 1000000};
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        uint64_t n = ns[t], np = 0;
        uint64_t *pf = random_pages(n, n, 40, &np);
        plan_args cases[] = {
            {.shuffle = BFS_SHUFFLE_FULL, .n = n},
            {.shuffle = BFS_SHUFFLE_NONE, .n = n},
            {.shuffle = BFS_SHUFFLE_PAGES, .n = n}, /* default 256-sample pages, 8 per window */
            {.shuffle = BFS_SHUFFLE_PAGES, .n = n, .page_samples = 7, .window_pages = 3},
            {.shuffle = BFS_SHUFFLE_PAGES, .n = n, .page_samples = 1, .window_pages = 1},
            {.shuffle = BFS_SHUFFLE_PAGES, .n = n, .page_first = pf, .npages = np},
            {.shuffle = BFS_SHUFFLE_PAGES,
             .n = n,
             .page_first = pf,
             .npages = np,
             .window_pages = 1},
        };
        uint8_t *seen = malloc(n);
        ck_assert_ptr_nonnull(seen);
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            if (n == 1000000 && cases[c].page_samples == 1)
                continue; /* a million one-sample windows: slow under sanitizers, adds nothing */
            cases[c].seed = 5;
            bfs_plan *p = mk(cases[c]);
            CHECK_EQ(bfs_plan_samples(p), n);
            CHECK_EQ(bfs_plan_shard_size(p), n);
            uint64_t *o = order_of(p, 3);
            memset(seen, 0, n);
            for (uint64_t i = 0; i < n; i++) {
                CHECK_MSG(o[i] < n && !seen[o[i]], "n=%llu case %zu: position %llu",
                          (unsigned long long)n, c, (unsigned long long)i);
                seen[o[i]] = 1;
            }
            /* the inverse, on every sample for small n and a stride for large */
            uint64_t step = n > 70000 ? 997 : 1;
            for (uint64_t i = 0; i < n; i += step) {
                uint32_t shard = 99;
                uint64_t sp = 0;
                CHECK_EQ(bfs_plan_locate(p, 3, o[i], &shard, &sp), 0);
                CHECK_EQ(shard, 0);
                CHECK_EQ(sp, i);
            }
            free(o);
            bfs_plan_destroy(p);
        }
        free(seen);
        free(pf);
    }
}
END_TEST

START_TEST(plan_none_identity)
{
    bfs_plan *p = mk((plan_args){.shuffle = BFS_SHUFFLE_NONE, .n = 1000, .seed = 9});
    for (uint64_t e = 0; e < 3; e++)
        for (uint64_t i = 0; i < 1000; i++) {
            uint64_t s;
            CHECK_EQ(bfs_plan_position(p, e, i, &s), 0);
            CHECK_EQ(s, i);
        }
    bfs_plan_destroy(p);
    /* shards stride over the identity */
    p = mk((plan_args){.shuffle = BFS_SHUFFLE_NONE, .n = 1000, .shard_index = 2, .shard_count = 3});
    for (uint64_t i = 0; i < 333; i++) {
        uint64_t s;
        CHECK_EQ(bfs_plan_position(p, 0, i, &s), 0);
        CHECK_EQ(s, 2 + 3 * i);
    }
    bfs_plan_destroy(p);
}
END_TEST

static uint64_t matches(const uint64_t *a, const uint64_t *b, uint64_t n)
{
    uint64_t m = 0;
    for (uint64_t i = 0; i < n; i++)
        m += a[i] == b[i];
    return m;
}

START_TEST(plan_orders_differ)
{
    const uint64_t n = 5000;
    plan_args modes[] = {
        {.shuffle = BFS_SHUFFLE_FULL, .n = n},
        {.shuffle = BFS_SHUFFLE_PAGES, .n = n},
        {.shuffle = BFS_SHUFFLE_PAGES, .n = n, .page_samples = 16, .window_pages = 4},
    };
    for (size_t c = 0; c < sizeof modes / sizeof modes[0]; c++) {
        plan_args a = modes[c];
        bfs_plan *s0 = mk(a);
        a.seed = 1;
        bfs_plan *s1 = mk(a);
        a.seed = 0;
        a.batch = 77; /* batching and drop_last do not change the order */
        a.drop_last = 1;
        bfs_plan *s0b = mk(a);
        uint64_t *e0 = order_of(s0, 0), *e1 = order_of(s0, 1), *f0 = order_of(s1, 0);
        uint64_t *again = order_of(s0b, 0), *big = order_of(s0, 1ull << 63);
        CHECK_EQ(matches(e0, again, n), n);
        /* a random permutation has about 1 fixed point relative to another; with
         * page windows of 64 samples the orders still share almost nothing */
        CHECK_MSG(matches(e0, e1, n) < 20, "mode %zu: epochs 0 and 1 share %llu", c,
                  (unsigned long long)matches(e0, e1, n));
        CHECK_MSG(matches(e0, f0, n) < 20, "mode %zu: seeds 0 and 1 share %llu", c,
                  (unsigned long long)matches(e0, f0, n));
        CHECK(matches(e0, big, n) < 20);
        CHECK(matches(e1, big, n) < 20);
        /* and none is the identity */
        uint64_t fixed = 0;
        for (uint64_t i = 0; i < n; i++)
            fixed += e0[i] == i;
        CHECK(fixed < 20);
        free(e0);
        free(e1);
        free(f0);
        free(again);
        free(big);
        bfs_plan_destroy(s0);
        bfs_plan_destroy(s1);
        bfs_plan_destroy(s0b);
    }
}
END_TEST

START_TEST(plan_golden)
{
    /* Pin the orders: first positions of epochs 0 and 1, seed 0, n = 1000. */
    static const uint64_t want_full[2][8] = {{350, 212, 281, 737, 68, 735, 85, 74},
                                             {779, 500, 846, 171, 896, 583, 419, 46}};
    static const uint64_t want_pages[2][8] = {{780, 764, 829, 785, 824, 769, 532, 763},
                                              {123, 111, 110, 127, 125, 487, 402, 481}};
    bfs_plan *f = mk((plan_args){.shuffle = BFS_SHUFFLE_FULL, .n = 1000});
    bfs_plan *g = mk((plan_args){
        .shuffle = BFS_SHUFFLE_PAGES, .n = 1000, .page_samples = 10, .window_pages = 4});
    for (uint64_t e = 0; e < 2; e++)
        for (uint64_t i = 0; i < 8; i++) {
            uint64_t s;
            CHECK_EQ(bfs_plan_position(f, e, i, &s), 0);
            CHECK_MSG(s == want_full[e][i], "full epoch %llu position %llu: %llu",
                      (unsigned long long)e, (unsigned long long)i, (unsigned long long)s);
            CHECK_EQ(bfs_plan_position(g, e, i, &s), 0);
            CHECK_MSG(s == want_pages[e][i], "pages epoch %llu position %llu: %llu",
                      (unsigned long long)e, (unsigned long long)i, (unsigned long long)s);
        }
    bfs_plan_destroy(f);
    bfs_plan_destroy(g);
}
END_TEST

/* ---- plans: shards and batches ---------------------------------------------------------- */

START_TEST(plan_shards_partition)
{
    static const uint64_t ns[] = {64, 257, 1000, 1003};
    static const uint32_t shard_counts[] = {1, 2, 3, 4, 7};
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        uint64_t n = ns[t], np;
        uint64_t *pf = random_pages(n, 3 * n, 12, &np);
        plan_args modes[] = {
            {.shuffle = BFS_SHUFFLE_FULL, .n = n},
            {.shuffle = BFS_SHUFFLE_NONE, .n = n},
            {.shuffle = BFS_SHUFFLE_PAGES, .n = n, .page_samples = 16, .window_pages = 2},
            {.shuffle = BFS_SHUFFLE_PAGES,
             .n = n,
             .page_first = pf,
             .npages = np,
             .window_pages = 3},
        };
        int32_t *owner = malloc(n * sizeof *owner);
        uint64_t *where = malloc(n * sizeof *where);
        CHECK(owner && where);
        for (size_t c = 0; c < sizeof modes / sizeof modes[0]; c++)
            for (size_t k = 0; k < sizeof shard_counts / sizeof shard_counts[0]; k++) {
                uint32_t N = shard_counts[k];
                uint64_t per = n / N, total = 0;
                for (uint64_t i = 0; i < n; i++)
                    owner[i] = -1;
                for (uint32_t I = 0; I < N; I++) {
                    plan_args a = modes[c];
                    a.shard_index = I;
                    a.shard_count = N;
                    a.seed = 11;
                    bfs_plan *p = mk(a);
                    CHECK_EQ(bfs_plan_shard_size(p), per);
                    uint64_t *o = order_of(p, 5);
                    for (uint64_t i = 0; i < per; i++) {
                        CHECK_MSG(o[i] < n && owner[o[i]] < 0,
                                  "n=%llu mode %zu shard %u/%u: sample %llu twice",
                                  (unsigned long long)n, c, I, N, (unsigned long long)o[i]);
                        owner[o[i]] = (int32_t)I;
                        where[o[i]] = i;
                        total++;
                    }
                    CHECK_EQ(bfs_plan_position(p, 5, per, &o[0]), -ERANGE);
                    /* the bulk look-up gives the same order, in any pieces */
                    uint64_t *b = malloc((per + 1) * sizeof *b);
                    ck_assert_ptr_nonnull(b);
                    uint64_t cut = per / 3;
                    CHECK_EQ(bfs_plan_positions(p, 5, 0, cut, b), 0);
                    CHECK_EQ(bfs_plan_positions(p, 5, cut, per - cut, b + cut), 0);
                    for (uint64_t i = 0; i < per; i++)
                        CHECK_EQ(b[i], o[i]);
                    CHECK_EQ(bfs_plan_positions(p, 5, per, 0, b), 0);
                    CHECK_EQ(bfs_plan_positions(p, 5, cut, per - cut + 1, b), -ERANGE);
                    CHECK_EQ(bfs_plan_positions(p, 5, per + 1, 0, b), -ERANGE);
                    free(b);
                    free(o);
                    /* locate agrees with the owners, from any shard's plan */
                    if (I == N - 1)
                        for (uint64_t s = 0; s < n; s++) {
                            uint32_t sh;
                            uint64_t sp;
                            int rc = bfs_plan_locate(p, 5, s, &sh, &sp);
                            if (owner[s] < 0) {
                                CHECK_EQ(rc, -ENOENT);
                            } else {
                                CHECK_EQ(rc, 0);
                                CHECK_EQ(sh, (uint32_t)owner[s]);
                                CHECK_EQ(sp, where[s]);
                            }
                        }
                    bfs_plan_destroy(p);
                }
                CHECK_EQ(total, N * per);
                if (n % N == 0)
                    for (uint64_t s = 0; s < n; s++)
                        CHECK(owner[s] >= 0);
            }
        free(owner);
        free(where);
        free(pf);
    }
}
END_TEST

START_TEST(plan_batches_partition)
{
    const uint64_t n = 1003; /* 3 shards of 334, one sample left out */
    static const uint32_t batches[] = {1, 7, 32, 333, 334};
    for (size_t m = 0; m < 3; m++)
        for (int drop = 0; drop <= 1; drop++)
            for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
                uint32_t B = batches[b];
                plan_args a = {.shuffle = all_modes[m],
                               .n = n,
                               .shard_index = 1,
                               .shard_count = 3,
                               .batch = B,
                               .drop_last = drop,
                               .seed = 3,
                               .page_samples = 10,
                               .window_pages = 2};
                bfs_plan *p = mk(a);
                uint64_t per = 334;
                uint64_t want = drop ? per / B : (per + B - 1) / B;
                CHECK_EQ(bfs_plan_batches(p), want);
                uint64_t *o = order_of(p, 2);
                uint64_t *buf = malloc(B * sizeof *buf);
                ck_assert_ptr_nonnull(buf);
                uint64_t pos = 0;
                for (uint64_t k = 0; k < want; k++) {
                    uint32_t len = bfs_plan_batch_len(p, k);
                    uint32_t expect = per - k * B < B ? (uint32_t)(per - k * B) : B;
                    CHECK_EQ(len, expect);
                    CHECK_EQ(bfs_plan_batch_indices(p, 2, k, buf), (int)len);
                    for (uint32_t i = 0; i < len; i++)
                        CHECK_EQ(buf[i], o[pos + i]); /* in shard order */
                    pos += len;
                }
                /* drop_last=1 covers whole batches only; 0 covers the shard */
                CHECK_EQ(pos, drop ? per / B * B : per);
                CHECK_EQ(bfs_plan_batch_len(p, want), 0);
                CHECK_EQ(bfs_plan_batch_len(p, UINT64_MAX), 0);
                CHECK_EQ(bfs_plan_batch_indices(p, 2, want, buf), -ERANGE);
                CHECK_EQ(bfs_plan_locate(p, 2, n, NULL, NULL), -ERANGE);
                free(buf);
                free(o);
                bfs_plan_destroy(p);
            }
    /* the last partial batch, explicitly: 10 samples in batches of 4 -> 4, 4, 2 */
    bfs_plan *p = mk((plan_args){.shuffle = BFS_SHUFFLE_FULL, .n = 10, .batch = 4});
    CHECK_EQ(bfs_plan_batches(p), 3);
    CHECK_EQ(bfs_plan_batch_len(p, 2), 2);
    bfs_plan_destroy(p);
    p = mk((plan_args){.shuffle = BFS_SHUFFLE_FULL, .n = 10, .batch = 4, .drop_last = 1});
    CHECK_EQ(bfs_plan_batches(p), 2);
    CHECK_EQ(bfs_plan_batch_len(p, 1), 4);
    CHECK_EQ(bfs_plan_batch_len(p, 2), 0);
    bfs_plan_destroy(p);
    /* a batch larger than the shard: drop_last=0 keeps one partial batch */
    p = mk((plan_args){.shuffle = BFS_SHUFFLE_FULL, .n = 10, .batch = 64});
    CHECK_EQ(bfs_plan_batches(p), 1);
    CHECK_EQ(bfs_plan_batch_len(p, 0), 10);
    bfs_plan_destroy(p);
}
END_TEST

/* pad=1 (issue 32): N=7 shards of 3,000 samples each get ceil(3000/7) = 429 positions;
 * dropping the padded ones, every sample is served exactly once over the 7 shards, and
 * 7*429 - 3000 = 3 positions are padded. Every order, both drop_last values. */
START_TEST(plan_pad_coverage)
{
    const uint64_t n = 3000;
    const uint32_t N = 7, B = 32;
    const uint64_t per = (n + N - 1) / N;
    uint64_t *buf = malloc(B * sizeof *buf);
    uint8_t *seen = malloc(n);
    CHECK(buf && seen);
    for (size_t m = 0; m < 3; m++)
        for (int drop = 0; drop <= 1; drop++) {
            memset(seen, 0, n);
            uint64_t padded = 0, served = 0;
            for (uint32_t I = 0; I < N; I++) {
                bfs_plan *p = mk((plan_args){.shuffle = all_modes[m],
                                             .n = n,
                                             .shard_index = I,
                                             .shard_count = N,
                                             .batch = B,
                                             .drop_last = drop,
                                             .seed = 9,
                                             .page_samples = 10,
                                             .window_pages = 2,
                                             .pad = 1});
                CHECK_EQ(bfs_plan_shard_size(p), per);
                CHECK_EQ(bfs_plan_batches(p), drop ? per / B : (per + B - 1) / B);
                for (uint64_t k = 0; k < bfs_plan_batches(p); k++) {
                    int len = bfs_plan_batch_indices(p, 4, k, buf);
                    CHECK_EQ(len, (int)bfs_plan_batch_len(p, k));
                    for (int i = 0; i < len; i++) {
                        uint64_t sp = k * B + (uint64_t)i;
                        CHECK(buf[i] < n);
                        served++;
                        if (bfs_plan_padded(p, sp)) {
                            padded++;
                            continue;
                        }
                        CHECK_MSG(!seen[buf[i]], "mode %zu shard %u: sample %llu twice", m, I,
                                  (unsigned long long)buf[i]);
                        seen[buf[i]] = 1;
                        /* locate finds the one position that is not padded */
                        uint32_t sh;
                        uint64_t at;
                        CHECK_EQ(bfs_plan_locate(p, 4, buf[i], &sh, &at), 0);
                        CHECK_EQ(sh, I);
                        CHECK_EQ(at, sp);
                    }
                }
                CHECK_EQ(bfs_plan_padded(p, per), 0);
                bfs_plan_destroy(p);
            }
            if (!drop) { /* every shard served whole: every sample once, 3 repeats */
                CHECK_EQ(served, N * per);
                CHECK_EQ(padded, N * per - n);
                CHECK_EQ(padded, 3);
                for (uint64_t s = 0; s < n; s++)
                    CHECK_MSG(seen[s], "mode %zu: sample %llu never served", m,
                              (unsigned long long)s);
            }
        }
    /* pad=0 keeps floor(n/N) and loses n mod N = 4 samples; pad=1 with N | n pads nothing */
    bfs_plan *p = mk((plan_args){.shuffle = BFS_SHUFFLE_FULL, .n = n, .shard_count = N});
    CHECK_EQ(bfs_plan_shard_size(p), n / N);
    CHECK_EQ(bfs_plan_padded(p, 0), 0);
    bfs_plan_destroy(p);
    p = mk((plan_args){.shuffle = BFS_SHUFFLE_FULL, .n = 3003, .shard_count = N, .pad = 1});
    CHECK_EQ(bfs_plan_shard_size(p), 429);
    for (uint64_t sp = 0; sp < 429; sp++)
        CHECK_EQ(bfs_plan_padded(p, sp), 0);
    bfs_plan_destroy(p);
    free(buf);
    free(seen);
}
END_TEST

START_TEST(plan_create_errors)
{
    uint64_t bad_start[] = {1, 5, 10}, unsorted[] = {0, 6, 5, 10}, short_end[] = {0, 5, 9};
    uint64_t good[] = {0, 5, 10};
    struct {
        bfs_plan_opts o;
        uint64_t n;
        const uint64_t *pf;
        uint64_t np;
        const char *says;
    } cases[] = {
        {{.shuffle = 7, .shard_count = 1, .batch = 1}, 10, NULL, 0, "shuffle"},
        {{.shuffle = -1, .shard_count = 1, .batch = 1}, 10, NULL, 0, "shuffle"},
        {{.shard_index = 3, .shard_count = 3, .batch = 1}, 10, NULL, 0, "shard=3/3"},
        {{.shard_count = 0, .batch = 1}, 10, NULL, 0, "shard=0/0"},
        {{.shard_count = 1, .batch = 0}, 10, NULL, 0, "batch=0"},
        {{.shard_count = 1, .batch = 0x80000000u}, 10, NULL, 0, "batch=2147483648"},
        {{.shard_count = 1, .batch = 1, .drop_last = 2}, 10, NULL, 0, "drop_last=2"},
        {{.shard_count = 1, .batch = 1}, 0, NULL, 0, "no samples"},
        {{.shard_count = 3, .batch = 1}, 2, NULL, 0, "shard=0/3"},
        {{.shard_count = 2, .batch = 6, .drop_last = 1}, 10, NULL, 0, "drop_last=0"},
        {{.shuffle = BFS_SHUFFLE_PAGES, .shard_count = 1, .batch = 1},
         10,
         bad_start,
         2,
         "starts at sample 1"},
        {{.shuffle = BFS_SHUFFLE_PAGES, .shard_count = 1, .batch = 1},
         10,
         unsorted,
         3,
         "not sorted"},
        {{.shuffle = BFS_SHUFFLE_PAGES, .shard_count = 1, .batch = 1},
         10,
         short_end,
         2,
         "covers 9 samples"},
        {{.shuffle = BFS_SHUFFLE_PAGES, .shard_count = 1, .batch = 1}, 10, good, 0, "no pages"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[512] = "unchanged";
        bfs_plan *p = (bfs_plan *)&err; /* must be reset to NULL */
        int rc =
            bfs_plan_create(&cases[i].o, cases[i].n, cases[i].pf, cases[i].np, &p, err, sizeof err);
        CHECK_MSG(rc == -EINVAL, "case %zu: rc %d", i, rc);
        ck_assert_ptr_null(p);
        CHECK_MSG(strstr(err, cases[i].says), "case %zu: message '%s' lacks '%s'", i, err,
                  cases[i].says);
        rc = bfs_plan_create(&cases[i].o, cases[i].n, cases[i].pf, cases[i].np, &p, NULL, 0);
        CHECK_EQ(rc, -EINVAL);
    }
    /* the zero-batch message says what to change */
    bfs_plan_opts o;
    bfs_plan_opts_default(&o);
    char err[512];
    bfs_plan *p;
    CHECK_EQ(bfs_plan_create(&o, 100, NULL, 0, &p, err, sizeof err), -EINVAL);
    CHECK_MSG(strstr(err, "batch=256") && strstr(err, "100 samples") &&
                  strstr(err, "batch=100 or less"),
              "%s", err);
    /* a page table is ignored (not even read) outside shuffle=pages */
    o.batch = 1;
    CHECK_EQ(bfs_plan_create(&o, 10, bad_start, 2, &p, err, sizeof err), 0);
    bfs_plan_destroy(p);
    bfs_plan_destroy(NULL);
    /* defaults as documented */
    bfs_plan_opts_default(&o);
    CHECK_EQ(o.shuffle, BFS_SHUFFLE_FULL);
    CHECK_EQ(o.shard_count, 1);
    CHECK_EQ(o.batch, 256);
    CHECK_EQ(o.drop_last, 1);
    CHECK_EQ(o.window_pages, 8);
}
END_TEST

/* ---- plans: pages ---------------------------------------------------------------------- */

START_TEST(plan_pages_locality)
{
    uint64_t n = 5000, np;
    uint64_t *pf = random_pages(n, 17, 30, &np);
    for (uint64_t e = 0; e < 4; e++) {
        bfs_plan *p = mk((plan_args){.shuffle = BFS_SHUFFLE_PAGES,
                                     .n = n,
                                     .page_first = pf,
                                     .npages = np,
                                     .window_pages = 4,
                                     .seed = e});
        uint64_t *o = order_of(p, e);
        CHECK_MSG(page_local(o, n, pf, np, 4), "epoch %llu not page-local", (unsigned long long)e);
        free(o);
        bfs_plan_destroy(p);
    }
    /* the check can fail: a full shuffle of the same samples is not page-local */
    bfs_plan *f = mk((plan_args){.shuffle = BFS_SHUFFLE_FULL, .n = n});
    uint64_t *o = order_of(f, 0);
    CHECK(!page_local(o, n, pf, np, 4));
    free(o);
    bfs_plan_destroy(f);
    free(pf);

    /* fixed-size pages: the same, and each shard reads only about its share of pages */
    const uint64_t S = 10, W = 4, N = 4;
    n = 10000;
    pf = uniform_pages(n, S, &np);
    uint8_t *touched = malloc(np);
    ck_assert_ptr_nonnull(touched);
    for (int mode = 0; mode < 2; mode++) {
        for (uint32_t I = 0; I < N; I++) {
            bfs_plan *p = mk((plan_args){.shuffle = mode ? BFS_SHUFFLE_FULL : BFS_SHUFFLE_PAGES,
                                         .n = n,
                                         .page_samples = S,
                                         .window_pages = W,
                                         .shard_index = I,
                                         .shard_count = N});
            if (mode == 0 && I == 0) {
                bfs_plan *whole = mk((plan_args){
                    .shuffle = BFS_SHUFFLE_PAGES, .n = n, .page_samples = S, .window_pages = W});
                uint64_t *w = order_of(whole, 1);
                CHECK(page_local(w, n, pf, np, W));
                free(w);
                bfs_plan_destroy(whole);
            }
            uint64_t *so = order_of(p, 1), count = 0;
            memset(touched, 0, np);
            for (uint64_t i = 0; i < bfs_plan_shard_size(p); i++)
                touched[so[i] / S] = 1;
            for (uint64_t q = 0; q < np; q++)
                count += touched[q];
            if (mode == 0) /* its windows, plus parts of two shared with neighbours */
                CHECK_MSG(count <= np / N + 2 * W, "shard %u reads %llu of %llu pages", I,
                          (unsigned long long)count, (unsigned long long)np);
            else /* the contrast: a full shuffle's shard touches most pages */
                CHECK(count > np / 2);
            free(so);
            bfs_plan_destroy(p);
        }
    }
    free(touched);
    free(pf);

    /* a page table of uneven pages (as in a .bfs): shard I's block of the epoch order
     * touches the pages of the windows it overlaps, and neighbours share at most the one
     * window their boundary cuts, so all shards together touch at most npages + (N-1)*W
     * pages, where strided shards would touch nearly every page each */
    n = 6001;
    pf = random_pages(n, 29, 30, &np);
    uint64_t *page_of = malloc(n * sizeof *page_of);
    touched = malloc(np);
    ck_assert(page_of && touched);
    for (uint64_t q = 0; q < np; q++)
        for (uint64_t s = pf[q]; s < pf[q + 1]; s++)
            page_of[s] = q;
    for (uint32_t shards = 2; shards <= 5; shards += 3)
        for (int mode = 0; mode < 2; mode++) {
            uint64_t sum = 0;
            for (uint32_t I = 0; I < shards; I++) {
                bfs_plan *p = mk((plan_args){.shuffle = mode ? BFS_SHUFFLE_FULL : BFS_SHUFFLE_PAGES,
                                             .n = n,
                                             .page_first = pf,
                                             .npages = np,
                                             .window_pages = W,
                                             .shard_index = I,
                                             .shard_count = shards,
                                             .seed = 3});
                uint64_t *so = order_of(p, 2);
                memset(touched, 0, np);
                for (uint64_t i = 0; i < bfs_plan_shard_size(p); i++)
                    touched[page_of[so[i]]] = 1;
                for (uint64_t q = 0; q < np; q++)
                    sum += touched[q];
                free(so);
                bfs_plan_destroy(p);
            }
            if (mode == 0)
                CHECK_MSG(sum <= np + (shards - 1) * W, "%u shards touch %llu pages of %llu",
                          shards, (unsigned long long)sum, (unsigned long long)np);
            else /* the contrast */
                CHECK(sum > np * shards / 2);
        }
    free(page_of);
    free(touched);
    free(pf);
}
END_TEST

START_TEST(plan_pages_closed_form)
{
    /* No page table (fixed-size pages, closed form) and the equivalent explicit table
     * (prefix sums per epoch) must give the same order. */
    static const uint64_t ns[] = {5, 1000, 1001, 1279, 256 * 8 * 3 + 17};
    static const uint32_t sizes[] = {1, 7, 256}, windows[] = {1, 3, 8};
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++)
        for (size_t si = 0; si < 3; si++)
            for (size_t wi = 0; wi < 3; wi++)
                for (uint32_t N = 1; N <= 3; N += 2) {
                    uint64_t n = ns[t], np;
                    if (n < N)
                        continue;
                    uint64_t *pf = uniform_pages(n, sizes[si], &np);
                    plan_args a = {.shuffle = BFS_SHUFFLE_PAGES,
                                   .n = n,
                                   .page_samples = sizes[si],
                                   .window_pages = windows[wi],
                                   .shard_index = N - 1,
                                   .shard_count = N,
                                   .seed = 8};
                    bfs_plan *closed = mk(a);
                    a.page_first = pf;
                    a.npages = np;
                    bfs_plan *table = mk(a);
                    for (uint64_t e = 0; e < 3; e++) {
                        uint64_t *x = order_of(closed, e * 7), *y = order_of(table, e * 7);
                        CHECK_MSG(matches(x, y, n / N) == n / N, "n=%llu S=%u W=%u N=%u epoch %llu",
                                  (unsigned long long)n, sizes[si], windows[wi], N,
                                  (unsigned long long)(e * 7));
                        free(x);
                        free(y);
                    }
                    for (uint64_t s = 0; s < n; s += 1 + n / 50) {
                        uint32_t s1 = 0, s2 = 0;
                        uint64_t p1 = 0, p2 = 0;
                        int r1 = bfs_plan_locate(closed, 4, s, &s1, &p1);
                        int r2 = bfs_plan_locate(table, 4, s, &s2, &p2);
                        CHECK_EQ(r1, r2);
                        CHECK(s1 == s2 && p1 == p2);
                    }
                    bfs_plan_destroy(closed);
                    bfs_plan_destroy(table);
                    free(pf);
                }
}
END_TEST

/* Threads computing every batch of EPOCHS epochs (more than the table cache holds) in
 * different orders; the results must match a fresh single-threaded computation. */
enum { T_EPOCHS = 10, T_THREADS = 4, T_B = 100 };
typedef struct thread_job {
    bfs_plan *plan;
    int id;
    uint64_t nb;
    uint64_t *out; /* [T_EPOCHS][nb * T_B] */
    int rc;
} thread_job;

static void *thread_main(void *arg)
{
    thread_job *j = arg;
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < T_EPOCHS; k++) {
            uint64_t e = (uint64_t)((j->id * 3 + k) % T_EPOCHS);
            for (uint64_t b = 0; b < j->nb; b++) {
                uint64_t bb = j->id & 1 ? j->nb - 1 - b : b;
                int rc = bfs_plan_batch_indices(j->plan, e, bb, j->out + (e * j->nb + bb) * T_B);
                if (rc != T_B)
                    j->rc = rc;
            }
        }
    return NULL;
}

START_TEST(plan_epoch_cache_threads)
{
    uint64_t n = 20000, np;
    uint64_t *pf = random_pages(n, 5, 50, &np);
    plan_args a = {.shuffle = BFS_SHUFFLE_PAGES,
                   .n = n,
                   .page_first = pf,
                   .npages = np,
                   .batch = T_B,
                   .drop_last = 1,
                   .seed = 21,
                   .window_pages = 2};
    bfs_plan *shared = mk(a);
    uint64_t nb = bfs_plan_batches(shared);
    size_t per_thread = T_EPOCHS * nb * T_B;
    thread_job jobs[T_THREADS];
    pthread_t th[T_THREADS];
    for (int t = 0; t < T_THREADS; t++) {
        jobs[t] = (thread_job){.plan = shared, .id = t, .nb = nb, .rc = 0};
        jobs[t].out = malloc(per_thread * sizeof(uint64_t));
        ck_assert_ptr_nonnull(jobs[t].out);
        CHECK_EQ(pthread_create(&th[t], NULL, thread_main, &jobs[t]), 0);
    }
    for (int t = 0; t < T_THREADS; t++)
        pthread_join(th[t], NULL);
    uint64_t *ref = malloc(nb * T_B * sizeof *ref);
    ck_assert_ptr_nonnull(ref);
    for (uint64_t e = 0; e < T_EPOCHS; e++) {
        bfs_plan *fresh = mk(a);
        for (uint64_t b = 0; b < nb; b++)
            CHECK_EQ(bfs_plan_batch_indices(fresh, e, b, ref + b * T_B), T_B);
        for (int t = 0; t < T_THREADS; t++) {
            CHECK_EQ(jobs[t].rc, 0);
            CHECK_MSG(memcmp(ref, jobs[t].out + e * nb * T_B, nb * T_B * sizeof *ref) == 0,
                      "thread %d epoch %llu differs", t, (unsigned long long)e);
        }
        bfs_plan_destroy(fresh);
    }
    for (int t = 0; t < T_THREADS; t++)
        free(jobs[t].out);
    free(ref);
    bfs_plan_destroy(shared);
    free(pf);
}
END_TEST

/* ---- cost ---------------------------------------------------------------------------- */

START_TEST(plan_cost_large_n)
{
    /* n = 10^9: a permutation table would be 8 GB. Computing 10^6 positions spread over
     * the whole epoch must not grow the peak RSS by more than 32 MiB (in practice: 0).
     * Times are printed for the record, never asserted. */
    static const uint64_t ns[] = {1000000, 1000000000};
    const uint64_t count = 1000000;
    long rss0 = max_rss_kb();
    for (size_t t = 0; t < 2; t++)
        for (int m = 0; m < 2; m++) {
            uint64_t n = ns[t];
            bfs_plan *p = mk((plan_args){.shuffle = m ? BFS_SHUFFLE_PAGES : BFS_SHUFFLE_FULL,
                                         .n = n,
                                         .batch = 256,
                                         .drop_last = 1,
                                         .seed = 1});
            uint64_t stride = n / count, acc = 0, s;
            double t0 = now_s();
            for (uint64_t i = 0; i < count; i++) {
                CHECK_EQ(bfs_plan_position(p, 7, i * stride, &s), 0);
                acc ^= s;
            }
            double t1 = now_s();
            uint64_t buf[256], nbatch = count / 256;
            for (uint64_t k = 0; k < nbatch; k++) {
                CHECK_EQ(bfs_plan_batch_indices(p, 7, k * (n / 256 / nbatch), buf), 256);
                acc ^= buf[k & 255];
            }
            double t2 = now_s();
            printf("plan cost: %-5s n=%-10llu position() %6.1f ns/index, batch_indices() %6.1f "
                   "ns/index (checksum %llx)\n",
                   m ? "pages" : "full", (unsigned long long)n, (t1 - t0) * 1e9 / (double)count,
                   (t2 - t1) * 1e9 / (double)(nbatch * 256), (unsigned long long)acc);
            bfs_plan_destroy(p);
        }
    fflush(stdout);
    long grown = max_rss_kb() - rss0;
    CHECK_MSG(grown < 32 * 1024, "peak RSS grew by %ld KiB", grown);
}
END_TEST

static Suite *plan_suite(void)
{
    Suite *s = suite_create("plan");
    TCase *rng = tcase_create("rng");
    tcase_add_test(rng, philox_kat);
    tcase_add_test(rng, rng_golden);
    tcase_add_test(rng, rng_determinism);
    tcase_add_test(rng, rng_ranges);
    tcase_add_test(rng, rng_uniformity);
    suite_add_tcase(s, rng);
    TCase *perm = tcase_create("perm");
    tcase_set_timeout(perm, 120); /* slow under sanitizers */
    tcase_add_test(perm, perm_bijection);
    tcase_add_test(perm, perm_huge);
    tcase_add_test(perm, perm_uniformity);
    suite_add_tcase(s, perm);
    TCase *plan = tcase_create("plan");
    tcase_set_timeout(plan, 120);
    tcase_add_test(plan, plan_bijection_all_modes);
    tcase_add_test(plan, plan_none_identity);
    tcase_add_test(plan, plan_orders_differ);
    tcase_add_test(plan, plan_golden);
    tcase_add_test(plan, plan_shards_partition);
    tcase_add_test(plan, plan_batches_partition);
    tcase_add_test(plan, plan_pad_coverage);
    tcase_add_test(plan, plan_create_errors);
    tcase_add_test(plan, plan_pages_locality);
    tcase_add_test(plan, plan_pages_closed_form);
    tcase_add_test(plan, plan_epoch_cache_threads);
    tcase_add_test(plan, plan_cost_large_n);
    suite_add_tcase(s, plan);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(plan_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
