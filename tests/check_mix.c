/*
 * check_mix.c — the epoch order of mixtures (engine/mix.h) and the source=, mix_schedule=
 * options (engine/pipeline.h): every batch within one sample of its proportions, running
 * counts close to the weights, a small source repeated pass by pass and a large one
 * subsampled without repeats, shards that are the unsharded batches K*N+I, positions that
 * agree with batches, determinism across creations and checkpointed tables, schedules.
 */
#include "engine/mix.h"
#include "engine/pipeline.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_MSG(expr, ...)                                                                       \
    do {                                                                                           \
        if (!(expr))                                                                               \
            ck_abort_msg(__VA_ARGS__);                                                             \
    } while (0)
#define CHECK(expr) CHECK_MSG(expr, "%s:%d: failed: %s", __FILE__, __LINE__, #expr)

/* A mixture from option text ("source=...,batch=...") over sources of count[] samples. */
static bfs_mix *make(const char *opts, const uint64_t *count, bfs_mix_desc *d, bfs_pipeline_opts *o)
{
    char err[BFS_PIPELINE_ERRLEN];
    bfs_pipeline_defaults(o);
    ck_assert_msg(bfs_pipeline_parse(o, opts, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(bfs_pipeline_finish(o, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(bfs_pipeline_mix(o, d, err, sizeof err) == 0, "%s", err);
    uint64_t first[BFS_MIX_SOURCES];
    first[0] = 0;
    for (uint32_t k = 1; k < d->n; k++)
        first[k] = first[k - 1] + count[k - 1];
    bfs_mix *m;
    ck_assert_msg(bfs_mix_create(d, count, first, o, &m, err, sizeof err) == 0, "%s", err);
    return m;
}

static uint32_t which(const uint64_t *count, uint32_t n, uint64_t g, uint64_t *local)
{
    uint32_t k = 0;
    while (k + 1 < n && g >= count[k])
        g -= count[k++];
    *local = g;
    return k;
}

/* Check an epoch: per-batch proportions, running counts, draws per sample. */
static void check_epoch(bfs_mix *m, const bfs_mix_desc *d, const uint64_t *count, uint64_t epoch,
                        uint32_t B)
{
    uint32_t n = d->n;
    double w[BFS_MIX_SOURCES];
    bfs_mix_weights(m, epoch, w);
    uint64_t nb = bfs_mix_batches(m), total = 0, cum[BFS_MIX_SOURCES] = {0};
    uint64_t *idx = malloc(B * sizeof *idx);
    uint32_t **seen = calloc(n, sizeof *seen);
    for (uint32_t k = 0; k < n; k++)
        seen[k] = calloc(count[k], sizeof **seen);
    for (uint64_t b = 0; b < nb; b++) {
        int len = bfs_mix_batch_indices(m, epoch, b, idx, NULL);
        CHECK(len == (int)bfs_mix_batch_len(m, b) && len > 0);
        uint32_t c[BFS_MIX_SOURCES] = {0};
        for (int j = 0; j < len; j++) {
            uint64_t local;
            uint32_t k = which(count, n, idx[j], &local);
            c[k]++;
            seen[k][local]++;
        }
        total += (uint64_t)len;
        for (uint32_t k = 0; k < n; k++) {
            double want = w[k] * len;
            CHECK_MSG(c[k] >= floor(want - 1e-9) && c[k] <= ceil(want + 1e-9),
                      "epoch %llu batch %llu: %u of source %u, want %.3f",
                      (unsigned long long)epoch, (unsigned long long)b, c[k], k, want);
            cum[k] += c[k];
            CHECK_MSG(fabs((double)cum[k] - w[k] * (double)total) < 2.0,
                      "running count of source %u is %llu after %llu, want %.3f", k,
                      (unsigned long long)cum[k], (unsigned long long)total, w[k] * total);
        }
    }
    /* each source's samples drawn evenly: whole passes plus part of one, no sample twice
     * more than another */
    for (uint32_t k = 0; k < n; k++) {
        uint32_t lo = UINT32_MAX, hi = 0;
        for (uint64_t i = 0; i < count[k]; i++) {
            lo = seen[k][i] < lo ? seen[k][i] : lo;
            hi = seen[k][i] > hi ? seen[k][i] : hi;
        }
        CHECK_MSG(hi - lo <= 1, "source %u: a sample drawn %u times, another %u", k, hi, lo);
        CHECK_MSG(hi == (cum[k] + count[k] - 1) / count[k], "source %u: %u passes for %llu draws",
                  k, hi, (unsigned long long)cum[k]);
        free(seen[k]);
    }
    free(seen);
    free(idx);
}

START_TEST(mix_proportions)
{
    static const struct {
        const char *opts;
        uint64_t count[3];
        uint32_t B;
    } cases[] = {
        {"source=a:0.7+b:0.3,batch=10", {500, 800}, 10},
        {"source=a:0.5+b:0.3+c:0.2,batch=16", {30, 14, 1000}, 16},   /* a, b repeated */
        {"source=a:1+b:1+c:1,batch=7,drop_last=0", {5, 900, 33}, 7}, /* a short last batch */
        {"source=a+b+c,batch=32", {100, 2000, 3}, 32},               /* by sizes */
        {"source=a:0.001+b:0.999,batch=64,epoch_samples=100000", {10, 50}, 64},
        {"source=a:2+b:1,batch=5,shuffle=none", {50, 50}, 5},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bfs_mix_desc d;
        bfs_pipeline_opts o;
        bfs_mix *m = make(cases[i].opts, cases[i].count, &d, &o);
        for (uint64_t e = 0; e < 3; e++)
            check_epoch(m, &d, cases[i].count, e, cases[i].B);
        bfs_mix_destroy(m);
    }
}
END_TEST

/* A source larger than its share: no sample twice in an epoch; other epochs other ones. */
START_TEST(mix_subsample)
{
    bfs_mix_desc d;
    bfs_pipeline_opts o;
    uint64_t count[2] = {10000, 100};
    bfs_mix *m = make("source=a:0.5+b:0.5,batch=20,epoch_samples=400", count, &d, &o);
    uint64_t idx[20];
    uint8_t *hit[2] = {calloc(10000, 1), calloc(10000, 1)};
    for (uint64_t e = 0; e < 2; e++)
        for (uint64_t b = 0; b < bfs_mix_batches(m); b++) {
            int len = bfs_mix_batch_indices(m, e, b, idx, NULL);
            for (int j = 0; j < len; j++)
                if (idx[j] < 10000) {
                    CHECK_MSG(!hit[e][idx[j]], "sample %llu twice in epoch %llu",
                              (unsigned long long)idx[j], (unsigned long long)e);
                    hit[e][idx[j]] = 1;
                }
        }
    int same = 0, n0 = 0;
    for (int i = 0; i < 10000; i++)
        same += hit[0][i] && hit[1][i], n0 += hit[0][i];
    ck_assert_int_eq(n0, 200);
    CHECK_MSG(same < 30, "epochs 0 and 1 drew %d of the same 200 samples", same);
    free(hit[0]);
    free(hit[1]);
    bfs_mix_destroy(m);
}
END_TEST

/* Shard I of N: batch K is the unsharded mount's batch K*N+I; positions agree. */
START_TEST(mix_shards_and_positions)
{
    uint64_t count[3] = {37, 120, 9};
    bfs_mix_desc d1, dn;
    bfs_pipeline_opts o1, on;
    bfs_mix *one = make("source=a:0.2+b:0.5+c:0.3,batch=8,seed=3", count, &d1, &o1);
    uint64_t E = bfs_mix_samples(one), *pos = malloc(E * sizeof *pos);
    ck_assert_int_eq(bfs_mix_positions(one, 4, 0, E, pos), 0);
    uint64_t a[8], b[8];
    for (uint64_t k = 0; k < bfs_mix_batches(one); k++) {
        int len = bfs_mix_batch_indices(one, 4, k, a, NULL);
        for (int j = 0; j < len; j++)
            CHECK(pos[k * 8 + j] == a[j]);
    }
    uint64_t part[5];
    ck_assert_int_eq(bfs_mix_positions(one, 4, 13, 5, part), 0);
    ck_assert_int_eq(memcmp(part, pos + 13, sizeof part), 0);
    ck_assert_int_eq(bfs_mix_positions(one, 4, E - 2, 3, part), -ERANGE);
    for (uint32_t N = 2; N <= 5; N++)
        for (uint32_t I = 0; I < N; I++) {
            char t[128];
            snprintf(t, sizeof t, "source=a:0.2+b:0.5+c:0.3,batch=8,seed=3,shard=%u/%u", I, N);
            bfs_mix *sh = make(t, count, &dn, &on);
            ck_assert_uint_eq(bfs_mix_batches(sh), bfs_mix_batches(one) / N);
            for (uint64_t k = 0; k < bfs_mix_batches(sh); k++) {
                int la = bfs_mix_batch_indices(sh, 4, k, a, NULL);
                int lb = bfs_mix_batch_indices(one, 4, k * N + I, b, NULL);
                ck_assert_int_eq(la, lb);
                ck_assert_int_eq(memcmp(a, b, (size_t)la * sizeof *a), 0);
            }
            bfs_mix_destroy(sh);
        }
    free(pos);
    bfs_mix_destroy(one);
}
END_TEST

/* pad=1: every shard ceil(C/N) batches; the non-padded ones cover each stratum once. */
START_TEST(mix_pad)
{
    uint64_t count[2] = {37, 100}; /* 137 samples: 13 batches of 10 (drop_last=1) */
    bfs_mix_desc d;
    bfs_pipeline_opts o;
    bfs_mix *one = make("source=a:0.4+b:0.6,batch=10", count, &d, &o);
    ck_assert_uint_eq(bfs_mix_batches(one), 13);
    uint32_t seen[13] = {0};
    uint64_t a[10], b[10];
    for (uint32_t I = 0; I < 5; I++) {
        char t[96];
        snprintf(t, sizeof t, "source=a:0.4+b:0.6,batch=10,shard=%u/5,pad=1", I);
        bfs_mix *sh = make(t, count, &d, &o);
        ck_assert_uint_eq(bfs_mix_batches(sh), 3); /* ceil(13/5) */
        for (uint64_t k = 0; k < 3; k++) {
            uint64_t c = k * 5 + I;
            ck_assert_int_eq(bfs_mix_padded(sh, k), c >= 13);
            int la = bfs_mix_batch_indices(sh, 0, k, a, NULL);
            int lb = bfs_mix_batch_indices(one, 0, c % 13, b, NULL);
            ck_assert_int_eq(la, lb);
            ck_assert_int_eq(memcmp(a, b, (size_t)la * sizeof *a), 0);
            if (c < 13)
                seen[c]++;
        }
        bfs_mix_destroy(sh);
    }
    for (int c = 0; c < 13; c++)
        ck_assert_uint_eq(seen[c], 1);
    bfs_mix_destroy(one);
}
END_TEST

/* Many strata: the table keeps checkpoints; a far batch equals the sequential order. */
START_TEST(mix_checkpoints)
{
    uint64_t count[2] = {1000, 3000};
    bfs_mix_desc d;
    bfs_pipeline_opts o;
    bfs_mix *m = make("source=a:0.37+b:0.63,batch=1,epoch_samples=3000000", count, &d, &o);
    uint64_t E = bfs_mix_samples(m), *pos = malloc(E * sizeof *pos);
    ck_assert_int_eq(bfs_mix_positions(m, 2, 0, E, pos), 0);
    uint64_t ks[] = {0, 1, 524287, 524288, 1999999, E - 1};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        uint64_t x;
        ck_assert_int_eq(bfs_mix_batch_indices(m, 2, ks[i], &x, NULL), 1);
        CHECK(x == pos[ks[i]]);
    }
    uint64_t na = 0;
    for (uint64_t p = 0; p < E; p++)
        na += pos[p] < 1000;
    CHECK_MSG(llabs((long long)na - (long long)(0.37 * E)) <= 1, "%llu of source a",
              (unsigned long long)na);
    free(pos);
    bfs_mix_destroy(m);
}
END_TEST

/* Two creations agree; seeds and epochs change the order; the pass of a repeat. */
START_TEST(mix_determinism)
{
    uint64_t count[2] = {7, 50};
    bfs_mix_desc d;
    bfs_pipeline_opts o;
    bfs_mix *m1 = make("source=a:0.5+b:0.5,batch=10,seed=9", count, &d, &o);
    bfs_mix *m2 = make("source=a:0.5+b:0.5,batch=10,seed=9", count, &d, &o);
    bfs_mix *m3 = make("source=a:0.5+b:0.5,batch=10,seed=10", count, &d, &o);
    uint64_t a[10], b[10], c[10];
    uint32_t pa[10];
    int differ_seed = 0, differ_epoch = 0, repeats = 0;
    for (uint64_t k = 0; k < bfs_mix_batches(m1); k++) {
        bfs_mix_batch_indices(m1, 1, k, a, pa);
        bfs_mix_batch_indices(m2, 1, k, b, NULL);
        ck_assert_int_eq(memcmp(a, b, sizeof a), 0);
        bfs_mix_batch_indices(m3, 1, k, c, NULL);
        differ_seed |= memcmp(a, c, sizeof a) != 0;
        bfs_mix_batch_indices(m1, 2, k, c, NULL);
        differ_epoch |= memcmp(a, c, sizeof a) != 0;
        for (int j = 0; j < 10; j++)
            repeats += pa[j] > 0;
    }
    CHECK(differ_seed && differ_epoch);
    CHECK(repeats > 0); /* source a (7 samples) drawn ~28 times: passes 1.. are repeats */
    bfs_mix_destroy(m1);
    bfs_mix_destroy(m2);
    bfs_mix_destroy(m3);
}
END_TEST

START_TEST(mix_schedule_weights)
{
    uint64_t count[2] = {100, 100};
    bfs_mix_desc d;
    bfs_pipeline_opts o;
    double w[2];
    bfs_mix *m = make("source=a+b,mix_schedule=2@0.9/0.1+6@0.5/0.5,batch=10", count, &d, &o);
    bfs_mix_weights(m, 0, w); /* before the first point: the first point's */
    ck_assert(fabs(w[0] - 0.9) < 1e-12);
    bfs_mix_weights(m, 5, w);
    ck_assert(fabs(w[0] - 0.9) < 1e-12);
    bfs_mix_weights(m, 6, w);
    ck_assert(fabs(w[0] - 0.5) < 1e-12);
    bfs_mix_weights(m, 100, w);
    ck_assert(fabs(w[0] - 0.5) < 1e-12);
    check_epoch(m, &d, count, 3, 10);
    check_epoch(m, &d, count, 7, 10);
    bfs_mix_destroy(m);
    m = make("source=a+b,mix_schedule=linear:2@0.9/0.1+6@0.5/0.5,batch=10", count, &d, &o);
    bfs_mix_weights(m, 4, w);
    ck_assert(fabs(w[0] - 0.7) < 1e-12);
    ck_assert(fabs(w[1] - 0.3) < 1e-12);
    check_epoch(m, &d, count, 4, 10);
    bfs_mix_destroy(m);
    /* a zero weight: the source is left out of that epoch */
    m = make("source=a+b,mix_schedule=0@1/0+1@1/1,batch=10", count, &d, &o);
    uint64_t idx[10];
    for (uint64_t k = 0; k < bfs_mix_batches(m); k++) {
        bfs_mix_batch_indices(m, 0, k, idx, NULL);
        for (int j = 0; j < 10; j++)
            CHECK(idx[j] < 100);
    }
    bfs_mix_destroy(m);
}
END_TEST

/* Option errors name the option and the problem; the canonical text and identity. */
START_TEST(mix_options)
{
    static const struct {
        const char *opts, *want;
    } bad[] = {
        {"source=a:0.5+b", "weights on some sources only"},
        {"source=a:0+b:1", "not a positive decimal"},
        {"source=a:-1+b:1", "not a positive decimal"},
        {"source=a:nan+b:1", "not a positive decimal"},
        {"source=a:1++b:1", "an empty source"},
        {"source=a", "one dataset without a weight is the SOURCE argument"},
        {"source=#a:1+b:1", "a '#' first or after a space"},
        {"source=a:1+ #b:1", "a '#' first or after a space"},
        {"source=a\nseed = 3:1+b:1", "a control character"},
        {"source=a+b,mix_schedule=0@1/2/3", "3 weights per point, but source= has 2"},
        {"source=a+b,mix_schedule=3@1/1+3@1/2", "ascending"},
        {"source=a+b,mix_schedule=0@0/0", "all 0"},
        {"source=a+b,mix_schedule=x@1/1", "EPOCH@W"},
        {"source=a+b,mix_schedule=0@1/-1", "decimal >= 0"},
        {"mix_labels=offset", "mix_labels= is an option of mixtures"},
        {"epoch_samples=5", "epoch_samples= is an option of mixtures"},
        {"mix_schedule=0@1", "mix_schedule= is an option of mixtures"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        bfs_pipeline_opts o;
        char err[BFS_PIPELINE_ERRLEN] = "";
        bfs_pipeline_defaults(&o);
        int rc = bfs_pipeline_parse(&o, bad[i].opts, err, sizeof err);
        if (!rc)
            rc = bfs_pipeline_finish(&o, err, sizeof err);
        ck_assert_msg(rc == -EINVAL && strstr(err, bad[i].want), "%s: rc %d, '%s'", bad[i].opts, rc,
                      err);
    }
    /* object storage URLs (docs/sources.md): a port's ':' has a '/' after it, so it is
     * the path's; a weight after the last '/' is a weight */
    {
        bfs_pipeline_opts u;
        bfs_mix_desc d;
        char e[BFS_PIPELINE_ERRLEN];
        bfs_pipeline_defaults(&u);
        ck_assert_msg(bfs_pipeline_parse(&u,
                                         "source=s3://bkt/a.bfs:0.7+https://h.example:8443/"
                                         "d/b.bfs:0.3",
                                         e, sizeof e) == 0 &&
                          bfs_pipeline_finish(&u, e, sizeof e) == 0 &&
                          bfs_pipeline_mix(&u, &d, e, sizeof e) == 0,
                      "%s", e);
        ck_assert_uint_eq(d.n, 2);
        ck_assert_str_eq(d.path[0], "s3://bkt/a.bfs");
        ck_assert_str_eq(d.path[1], "https://h.example:8443/d/b.bfs");
        ck_assert(d.weight[0] == 0.7 && d.weight[1] == 0.3);
        bfs_pipeline_defaults(&u);
        ck_assert_msg(bfs_pipeline_parse(&u, "source=http://127.0.0.1:9000/a.bfs+s3://b/c.bfs", e,
                                         sizeof e) == 0 &&
                          bfs_pipeline_finish(&u, e, sizeof e) == 0 &&
                          bfs_pipeline_mix(&u, &d, e, sizeof e) == 0,
                      "%s", e);
        ck_assert_str_eq(d.path[0], "http://127.0.0.1:9000/a.bfs");
        ck_assert(d.weight[0] == 0 && d.weight[1] == 0);
    }
    /* a spec file: ',' between sources; `source = ONE` without a weight is MNT/pipeline's
     * identity line of a one-SOURCE mount and means nothing */
    bfs_pipeline_opts o;
    char err[BFS_PIPELINE_ERRLEN], canon[BFS_CANONICAL_MAX];
    bfs_pipeline_defaults(&o);
    ck_assert_msg(bfs_pipeline_parse_spec(&o, "source = /d/a.bfs:0.7, /d/b.bfs:0.3\n", "s", err,
                                          sizeof err) == 0,
                  "%s", err);
    ck_assert_str_eq(o.mix, "/d/a.bfs:0.7+ /d/b.bfs:0.3");
    bfs_pipeline_defaults(&o);
    ck_assert_int_eq(bfs_pipeline_parse_spec(&o, "source = /d/a.bfs\n", "s", err, sizeof err), 0);
    ck_assert_str_eq(o.mix, "");
    /* mixture options enter the canonical text only for mixtures */
    bfs_pipeline_defaults(&o);
    bfs_pipeline_finish(&o, err, sizeof err);
    bfs_pipeline_canonical(&o, canon, sizeof canon);
    ck_assert_ptr_null(strstr(canon, "mix_"));
    ck_assert_ptr_null(strstr(canon, "source"));
    bfs_pipeline_defaults(&o);
    bfs_pipeline_parse(&o, "source=a:7+b:3,mix_schedule=linear:0@0.50/0.5", err, sizeof err);
    bfs_pipeline_finish(&o, err, sizeof err);
    bfs_pipeline_canonical(&o, canon, sizeof canon);
    ck_assert_ptr_nonnull(strstr(canon, "mix_schedule = linear:0@0.5/0.5\n"));
    ck_assert_ptr_nonnull(strstr(canon, "mix_labels = shared\n"));
    ck_assert_ptr_null(strstr(canon, "source"));
    /* the identity: weights normalized (7:3 is 0.7:0.3), another weight another identity */
    bfs_mix_desc d1, d2, d3;
    bfs_pipeline_mix(&o, &d1, err, sizeof err);
    bfs_pipeline_parse(&o, "source=a:0.7+b:0.3", err, sizeof err);
    bfs_pipeline_mix(&o, &d2, err, sizeof err);
    bfs_pipeline_parse(&o, "source=a:0.6+b:0.4", err, sizeof err);
    bfs_pipeline_mix(&o, &d3, err, sizeof err);
    ck_assert_uint_eq(bfs_pipeline_mix_identity(&d1, 5), bfs_pipeline_mix_identity(&d2, 5));
    ck_assert_uint_ne(bfs_pipeline_mix_identity(&d2, 5), bfs_pipeline_mix_identity(&d3, 5));
    ck_assert_uint_ne(bfs_pipeline_mix_identity(&d2, 5), bfs_pipeline_mix_identity(&d2, 6));
}
END_TEST

static Suite *mix_suite(void)
{
    Suite *s = suite_create("mix");
    TCase *t = tcase_create("mix");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, mix_proportions);
    tcase_add_test(t, mix_subsample);
    tcase_add_test(t, mix_shards_and_positions);
    tcase_add_test(t, mix_checkpoints);
    tcase_add_test(t, mix_pad);
    tcase_add_test(t, mix_determinism);
    tcase_add_test(t, mix_schedule_weights);
    tcase_add_test(t, mix_options);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(mix_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
