/*
 * check_tuner.c — the autotuner's model and chooser (engine/tuner.h) on simulated
 * timings: formulas against hand-computed values, the chooser against a brute-force grid
 * of the same model, both budgets, fixed values, hysteresis, and the "why" texts.
 */
#include "engine/tuner.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define NEAR_EQ(a, b)                                                                              \
    ck_assert_msg(fabs((a) - (b)) < 1e-9, "%.12f != %.12f", (double)(a), (double)(b))

/* A first look of one slow sample (a token mount's first row builds its epoch's table)
 * must not stay the estimate once thousands of fast ones are measured; later, an
 * exponential average with a half-life of 1 s. */
START_TEST(smooth_outlier_first_look)
{
    double est = bfs_tune_smooth(0, 228e-6, 1, 1, 0.02);
    ck_assert_double_eq_tol(est, 228e-6, 1e-12);
    est = bfs_tune_smooth(est, 10000 * 9e-6, 10000, 10001, 0.02);
    ck_assert_double_eq_tol(est, (228e-6 + 10000 * 9e-6) / 10001, 1e-9);
    ck_assert(est < 10e-6);
    /* no new samples: unchanged */
    ck_assert_double_eq_tol(bfs_tune_smooth(est, 0, 0, 10001, 1.0), est, 1e-15);
    /* a look of few samples among many: the half-life decides (1 s: half way) */
    double e2 = bfs_tune_smooth(10e-6, 10 * 20e-6, 10, 1000000, 1.0);
    ck_assert_double_eq_tol(e2, 15e-6, 1e-9);
}
END_TEST

START_TEST(p_empty_hand_values)
{
    NEAR_EQ(bfs_tune_p_empty(0, 2, 3), 1.0);          /* no buffer: always empty */
    NEAR_EQ(bfs_tune_p_empty(3, 5, 5), 0.25);         /* x = y: 1/(n+1) */
    NEAR_EQ(bfs_tune_p_empty(1, 1.5, 1), 0.5 / 1.25); /* rho 1.5: (1-1.5)/(1-2.25) = 0.4 */
    NEAR_EQ(bfs_tune_p_empty(3, 1.5, 1), 0.5 / (pow(1.5, 4) - 1));
    NEAR_EQ(bfs_tune_p_empty(1, 1, 4), 0.75 / (1 - 0.0625)); /* rho 0.25 */
    NEAR_EQ(bfs_tune_p_empty(2, 1, INFINITY), 1.0);          /* a consumer that never pauses */
    ck_assert(bfs_tune_p_empty(2000, 10, 1) >= 0);           /* rho^n overflows: 0, no NaN */
    ck_assert(bfs_tune_p_empty(2000, 10, 1) < 1e-12);
    /* more buffer, less chance of finding it empty, whenever the producer is faster */
    for (int n = 0; n < 10; n++)
        ck_assert(bfs_tune_p_empty(n + 1, 3, 2) < bfs_tune_p_empty(n, 3, 2));
}
END_TEST

START_TEST(reader_time_hand_values)
{
    double w;
    /* c = 0.15 s, x = 10/s, L = 0.1 s, n = 1 (acts as 1/V = 4): rho 1.5,
     * P = 0.5 / (1.5^5 - 1), W = P * 0.1 */
    double p = 0.5 / (pow(1.5, 1 / BFS_TUNE_VARIABILITY + 1) - 1);
    NEAR_EQ(bfs_tune_reader_time(0.15, 10, 0.1, 1, &w), 0.15 + p * 0.1);
    NEAR_EQ(w, p * 0.1);
    /* a fast reader is held to the producer's rate: T >= 1/x */
    NEAR_EQ(bfs_tune_reader_time(0.001, 10, 0.1, 4, NULL), 0.1);
    /* no prefetch: it waits the whole latency after its own step */
    NEAR_EQ(bfs_tune_reader_time(0.2, 10, 0.1, 0, &w), 0.3);
    NEAR_EQ(w, 0.1);
}
END_TEST

static bfs_tune_input base(bfs_tune_reader *r, int n)
{
    return (bfs_tune_input){.sample_s = 1e-3,
                            .batch_s = 0,
                            .samples = 64, /* C = 64 ms of work per batch */
                            .batch_bytes = 10 << 20,
                            .cpu_budget = 8,
                            .ram_bytes = 4ull << 30,
                            .fixed_depth = -1,
                            .nreaders = n,
                            .readers = r};
}

/* brute force over the same model: the best rate of any threads x depths; the rate is a
 * sum of independent per-reader terms, so each reader's depth is searched with the others
 * held fixed */
static double grid_best(const bfs_tune_input *in)
{
    double best = 0;
    for (int w = 1; w <= in->cpu_budget; w++) {
        int d[BFS_EXEC_MAX_READERS] = {0};
        for (int i = 0; i < in->nreaders; i++) {
            double bi = -1;
            int bn = 0;
            for (int n = 0; n <= BFS_TUNE_MAX_DEPTH; n++) {
                d[i] = n;
                double r = bfs_tune_rate(in, w, d, NULL);
                if (r > bi)
                    bi = r, bn = n;
            }
            d[i] = bn;
        }
        double r = bfs_tune_rate(in, w, d, NULL);
        best = r > best ? r : best;
    }
    return best;
}

START_TEST(chooser_matches_grid)
{
    /* scenarios: one fast reader, one slow, four at different paces */
    bfs_tune_reader fast[1] = {{.id = 1, .own_s = 0.002}};
    bfs_tune_reader slow[1] = {{.id = 1, .own_s = 1.5 * 0.064}};
    bfs_tune_reader four[4] = {{.id = 1, .own_s = 0.002},
                               {.id = 2, .own_s = 0.05},
                               {.id = 3, .own_s = 0.2},
                               {.id = 4, .own_s = 0.002}};
    struct {
        bfs_tune_reader *r;
        int n;
    } sc[] = {{fast, 1}, {slow, 1}, {four, 4}};
    for (unsigned s = 0; s < sizeof sc / sizeof sc[0]; s++) {
        bfs_tune_input in = base(sc[s].r, sc[s].n);
        bfs_tune_choice c;
        bfs_tune_choose(&in, &c);
        double best = grid_best(&in);
        ck_assert_msg(c.rate >= best / 1.011, "scenario %u: chose %.3f, grid best %.3f", s, c.rate,
                      best);
        ck_assert_int_ge(c.threads, 1);
        ck_assert_int_le(c.threads, in.cpu_budget);
    }
}
END_TEST

START_TEST(slow_reader_gets_few_workers_fast_gets_all_useful)
{
    bfs_tune_reader slow = {.id = 1, .own_s = 1.5 * 0.064}; /* 1.5x a batch on one core */
    bfs_tune_input in = base(&slow, 1);
    bfs_tune_choice c;
    bfs_tune_choose(&in, &c);
    ck_assert_int_lt(c.threads, in.cpu_budget);
    ck_assert_int_le(c.threads, 2);
    ck_assert_int_ge(c.depth[0], 1);
    ck_assert_msg(c.wait_s[0] < 0.01 * slow.own_s, "predicted wait %f", c.wait_s[0]);
    bfs_tune_reader fast = {.id = 1, .own_s = 0.002};
    in = base(&fast, 1);
    bfs_tune_choose(&in, &c);
    ck_assert_int_eq(c.threads, in.cpu_budget); /* producer-bound: every worker helps */
    ck_assert_int_ge(c.depth[0], 1);            /* and it computes while the reader reads */
}
END_TEST

START_TEST(budgets_and_fixed_values)
{
    bfs_tune_reader r[3] = {
        {.id = 1, .own_s = 0.2}, {.id = 2, .own_s = 0.15}, {.id = 3, .own_s = 0.3}};
    bfs_tune_input in = base(r, 3);
    in.cpu_budget = 1; /* producer slower than the readers want: deep buffers pay */
    bfs_tune_choice c;
    bfs_tune_choose(&in, &c);
    int deep = 0;
    for (int i = 0; i < 3; i++)
        deep += c.depth[i];
    ck_assert_int_eq(c.threads, 1);
    /* RAM for 2 pooled + 2 per reader + 5 more batches: depths cut to fit */
    in.ram_bytes = (2 + 6 + 5) * in.batch_bytes;
    bfs_tune_choice small;
    bfs_tune_choose(&in, &small);
    uint64_t need = 0;
    for (int i = 0; i < 3; i++)
        need += (uint64_t)(small.depth[i] + 1) * in.batch_bytes;
    ck_assert_uint_le(need, small.cache_bytes);
    ck_assert_uint_le(small.cache_bytes + (2 + 6) * in.batch_bytes, in.ram_bytes);
    ck_assert_msg(deep > 2, "depths %d %d %d", c.depth[0], c.depth[1], c.depth[2]);
    /* fixed values win */
    in = base(r, 3);
    in.fixed_threads = 3;
    in.fixed_depth = 2;
    in.cache_fixed = 1, in.fixed_cache = 123 << 20;
    bfs_tune_choose(&in, &c);
    ck_assert_int_eq(c.threads, 3);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(c.depth[i], 2);
    ck_assert_int_eq(c.new_depth, 2);
    ck_assert_uint_eq(c.cache_bytes, 123 << 20);
    ck_assert_ptr_nonnull(strstr(c.why_threads, "fixed"));
    /* cache_mb=0 is a fixed budget too (no batch cache), not "the tuner's": a prefetched
     * batch would be evicted unread, so the tuner prefetches nothing */
    in = base(r, 3);
    in.cache_fixed = 1, in.fixed_cache = 0;
    bfs_tune_choose(&in, &c);
    ck_assert_uint_eq(c.cache_bytes, 0);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(c.depth[i], 0);
    ck_assert_ptr_nonnull(strstr(c.why_cache, "fixed"));
    /* a RAM budget the pooled, open and in-flight batches fill (ram_mb=70, 3 readers of
     * 10 MiB batches: 80 MiB for those alone): the cache keeps one batch, and the reason
     * says it is over the budget, not that the budget left 10 MiB for it */
    in = base(r, 3);
    in.ram_bytes = 70ull << 20;
    bfs_tune_choose(&in, &c);
    ck_assert_uint_eq(c.cache_bytes, in.batch_bytes);
    ck_assert_str_eq(c.why_cache, "RAM budget 70 MiB leaves nothing after the 80 MiB that 8 "
                                  "pooled, open and in-flight batches of 10.5 MB take: the cache "
                                  "keeps one finished batch (10 MiB), over the budget");
    ck_assert_msg(!strstr(c.why_cache, "MiB for finished batches"), "%s", c.why_cache);
}
END_TEST

/* Batch files take a descriptor each: the cache budget holds no more batches than the
 * descriptors allow (the executor's file_budget), depths are cut to fit them, and the
 * reason names the descriptors; a fixed cache_mb stays, but prefetch fits the files. */
START_TEST(descriptor_budget)
{
    bfs_tune_reader r[3] = {
        {.id = 1, .own_s = 0.2}, {.id = 2, .own_s = 0.15}, {.id = 3, .own_s = 0.3}};
    bfs_tune_input in = base(r, 3);
    in.cpu_budget = 1; /* deep buffers pay (budgets_and_fixed_values) */
    bfs_tune_choice c;
    bfs_tune_choose(&in, &c);
    ck_assert_uint_gt(c.cache_bytes, 10 * in.batch_bytes);
    ck_assert_ptr_null(strstr(c.why_cache, "descriptors"));
    in.file_budget = 5;
    bfs_tune_choose(&in, &c);
    ck_assert_uint_eq(c.cache_bytes, 5 * in.batch_bytes);
    int held = 0;
    for (int i = 0; i < 3; i++)
        held += c.depth[i] + 1;
    ck_assert_int_le(held, 5);
    ck_assert_msg(strstr(c.why_cache, "descriptors hold 5 batch files (ulimit -n"), "%s",
                  c.why_cache);
    /* no reader: the same budget */
    in.nreaders = 0;
    bfs_tune_choose(&in, &c);
    ck_assert_uint_eq(c.cache_bytes, 5 * in.batch_bytes);
    /* cache_mb= fixed: kept, and named with what the descriptors hold */
    in = base(r, 3);
    in.cpu_budget = 1;
    in.cache_fixed = 1, in.fixed_cache = 100 * in.batch_bytes;
    in.file_budget = 4;
    bfs_tune_choose(&in, &c);
    ck_assert_uint_eq(c.cache_bytes, 100 * in.batch_bytes);
    held = 0;
    for (int i = 0; i < 3; i++)
        held += c.depth[i] + 1;
    ck_assert_int_le(held, 4);
    ck_assert_msg(strstr(c.why_cache, "fixed") && strstr(c.why_cache, "4 batch files"), "%s",
                  c.why_cache);
    /* more files than the RAM budget holds: RAM decides, as before */
    in = base(r, 3);
    in.file_budget = 100000;
    bfs_tune_choose(&in, &c);
    ck_assert_ptr_null(strstr(c.why_cache, "descriptors"));
}
END_TEST

START_TEST(hysteresis_and_why)
{
    bfs_tune_reader r = {.id = 7, .own_s = 0.05};
    bfs_tune_input in = base(&r, 1);
    bfs_tune_choice c;
    bfs_tune_choose(&in, &c);
    int w0 = c.threads;
    /* 100 steps of +-3% jitter in the timings: the thread count never moves */
    unsigned seed = 1;
    for (int i = 0; i < 100; i++) {
        seed = seed * 1103515245u + 12345u;
        double j = 1.0 + ((double)(seed >> 16 & 0xffff) / 65535.0 - 0.5) * 0.06;
        in.sample_s = 1e-3 * j;
        r.own_s = 0.05 / j;
        in.cur_threads = c.threads;
        bfs_tune_choose(&in, &c);
        ck_assert_int_eq(c.threads, w0);
    }
    /* why names the value applied, and the neighbours it was compared with */
    char want[64];
    snprintf(want, sizeof want, "%d worker(s)", c.threads);
    ck_assert_msg(strstr(c.why_threads, want) == c.why_threads, "%s", c.why_threads);
    snprintf(want, sizeof want, "%d:", c.threads);
    ck_assert_msg(!strstr(c.why_threads, want), "self comparison: %s", c.why_threads);
    snprintf(want, sizeof want, "depth %d", c.depth[0]);
    ck_assert_msg(strstr(c.why_depth, want), "%s", c.why_depth);
    ck_assert_ptr_nonnull(strstr(c.why_depth, "reader 7"));
    /* no readers: every worker ready for the first request */
    in = base(NULL, 0);
    bfs_tune_choose(&in, &c);
    ck_assert_int_eq(c.threads, in.cpu_budget);
    ck_assert_int_ge(c.new_depth, 1);
}
END_TEST

static Suite *tuner_suite(void)
{
    Suite *s = suite_create("tuner");
    TCase *tc = tcase_create("model");
    tcase_add_test(tc, smooth_outlier_first_look);
    tcase_add_test(tc, p_empty_hand_values);
    tcase_add_test(tc, reader_time_hand_values);
    tcase_add_test(tc, chooser_matches_grid);
    tcase_add_test(tc, slow_reader_gets_few_workers_fast_gets_all_useful);
    tcase_add_test(tc, budgets_and_fixed_values);
    tcase_add_test(tc, descriptor_budget);
    tcase_add_test(tc, hysteresis_and_why);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(tuner_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
