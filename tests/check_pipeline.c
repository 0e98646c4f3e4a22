/*
 * check_pipeline.c — pipeline options (engine/pipeline.h): defaults against DESIGN.md's
 * table, every option's valid and invalid forms and its messages, unknown keys, the
 * normalize/dtype rules, validation of a hand-edited struct, the canonical text (pinned:
 * changing it changes every fingerprint and orphans every cache directory), fingerprints
 * (knobs and epochs never change them, every data option does), spec files, --help.
 */
#include "base/hash.h"
#include "engine/pipeline.h"
#include "engine/dataset/bfs.h"

#include <check.h>
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* DESIGN.md "Pipeline options", in its order, with each option's class. */
static const struct {
    const char *name;
    int cls;
} design[] = {
    {"seed", BFS_OPT_DATA},
    {"batch", BFS_OPT_DATA},
    {"epochs", BFS_OPT_LISTING},
    {"shuffle", BFS_OPT_DATA},
    {"drop_last", BFS_OPT_DATA},
    {"shard", BFS_OPT_DATA},
    {"pad", BFS_OPT_DATA},
    {"size", BFS_OPT_DATA},
    {"size_schedule", BFS_OPT_DATA},
    {"augment", BFS_OPT_DATA},
    {"scale", BFS_OPT_DATA},
    {"ratio", BFS_OPT_DATA},
    {"flip", BFS_OPT_DATA},
    {"color_jitter", BFS_OPT_DATA},
    {"grayscale_p", BFS_OPT_DATA},
    {"randaugment", BFS_OPT_DATA},
    {"trivialaugment", BFS_OPT_DATA},
    {"autoaugment", BFS_OPT_DATA},
    {"erasing", BFS_OPT_DATA},
    {"erasing_mode", BFS_OPT_DATA},
    {"mixup", BFS_OPT_DATA},
    {"cutmix", BFS_OPT_DATA},
    {"mix_prob", BFS_OPT_DATA},
    {"switch_prob", BFS_OPT_DATA},
    {"label_smoothing", BFS_OPT_DATA},
    {"classes", BFS_OPT_DATA},
    {"dtype", BFS_OPT_DATA},
    {"normalize", BFS_OPT_DATA},
    {"layout", BFS_OPT_DATA},
    {"bad_sample", BFS_OPT_DATA},
    /* token datasets only (docs/sequences.md) */
    {"pack", BFS_OPT_DATA},
    {"seq_len", BFS_OPT_DATA},
    {"buckets", BFS_OPT_DATA},
    {"batch_tokens", BFS_OPT_DATA},
    {"pad_id", BFS_OPT_DATA},
    {"positions", BFS_OPT_DATA},
    {"fields", BFS_OPT_DATA},
    {"text_len", BFS_OPT_DATA},
    {"token_len", BFS_OPT_DATA},
    {"min_box_area", BFS_OPT_DATA},
    {"source", BFS_OPT_DATA},
    {"mix_labels", BFS_OPT_DATA},
    {"epoch_samples", BFS_OPT_DATA},
    {"mix_schedule", BFS_OPT_DATA},
    {"threads", BFS_OPT_KNOB},
    {"prefetch", BFS_OPT_KNOB},
    {"cache_mb", BFS_OPT_KNOB},
    {"cache_dir", BFS_OPT_KNOB},
    {"cache_dir_mb", BFS_OPT_KNOB},
    {"sample_cache_mb", BFS_OPT_KNOB},
    {"cpu_budget", BFS_OPT_KNOB},
    {"ram_mb", BFS_OPT_KNOB},
    /* beyond DESIGN.md's table: batch files on 2 MiB pages (docs/engine.md, Batch memory) */
    {"huge_pages", BFS_OPT_KNOB},
    /* the pool file libbatchfs-gpu registers once (docs/gpu.md) */
    {"gpu_pool_mb", BFS_OPT_KNOB},
    /* remote workers (DESIGN.md "Beyond one host"; docs/scale-out.md) */
    {"remote", BFS_OPT_KNOB},
    {"remote_ttl", BFS_OPT_KNOB},
    {"remote_wait_ms", BFS_OPT_KNOB},
    {"remote_fallback", BFS_OPT_KNOB},
    {"remote_claim_ms", BFS_OPT_KNOB},
    {"remote_key", BFS_OPT_KNOB},
    /* dynamic sharding (engine/claims.h): never changes a byte */
    {"group", BFS_OPT_KNOB},
    /* datasets in object storage (docs/sources.md): never change a byte */
    {"s3_region", BFS_OPT_KNOB},
    {"s3_endpoint", BFS_OPT_KNOB},
    {"ca", BFS_OPT_KNOB},
    {"fetch_retries", BFS_OPT_KNOB},
    {"fetch_timeout_ms", BFS_OPT_KNOB},
    {"fetch_parallel", BFS_OPT_KNOB},
    {"source_cache", BFS_OPT_KNOB},
    {"source_cache_mb", BFS_OPT_KNOB},
};
#define N_DESIGN (sizeof design / sizeof design[0])

static char err[BFS_PIPELINE_ERRLEN];

static bfs_pipeline_opts fresh(void)
{
    bfs_pipeline_opts o;
    bfs_pipeline_defaults(&o);
    return o;
}

/* set key=value on o; must succeed */
static void ok(bfs_pipeline_opts *o, const char *key, const char *value)
{
    err[0] = '\0';
    int rc = bfs_pipeline_set(o, key, value, err, sizeof err);
    ck_assert_msg(rc == 0, "%s=%s: rc %d: %s", key, value, rc, err);
}

/* key=value on fresh defaults: -EINVAL, o unchanged, message names option and value and
 * contains `want` (what is allowed, or the reason) */
static void bad(const char *key, const char *value, const char *want)
{
    bfs_pipeline_opts o = fresh(), before = o;
    err[0] = '\0';
    int rc = bfs_pipeline_set(&o, key, value, err, sizeof err);
    ck_assert_msg(rc == -EINVAL, "%s=%s: rc %d (want -EINVAL)", key, value, rc);
    ck_assert_msg(memcmp(&o, &before, sizeof o) == 0, "%s=%s changed the options", key, value);
    char kv[256];
    snprintf(kv, sizeof kv, "%s=%s", key, value);
    ck_assert_msg(strstr(err, kv), "message lacks '%s': %s", kv, err);
    ck_assert_msg(strstr(err, want), "message lacks '%s': %s", want, err);
}

static uint64_t fp_of(const char *text, uint64_t identity)
{
    bfs_pipeline_opts o = fresh();
    ck_assert_msg(bfs_pipeline_parse(&o, text, err, sizeof err) == 0, "%s: %s", text, err);
    ck_assert_msg(bfs_pipeline_finish(&o, err, sizeof err) == 0, "%s: %s", text, err);
    return bfs_pipeline_fingerprint(&o, identity);
}

static void canon_of(const char *text, char *buf, size_t cap)
{
    bfs_pipeline_opts o = fresh();
    ck_assert_msg(bfs_pipeline_parse(&o, text, err, sizeof err) == 0, "%s: %s", text, err);
    ck_assert_msg(bfs_pipeline_finish(&o, err, sizeof err) == 0, "%s: %s", text, err);
    ck_assert_int_gt(bfs_pipeline_canonical(&o, buf, cap), 0);
}

/* ---- table and defaults ------------------------------------------------------------ */

START_TEST(remote_options)
{
    bfs_pipeline_opts o = fresh();
    ok(&o, "remote", "redis://bob:s%40c@[::1]:7000/3");
    ck_assert_str_eq(o.remote, "redis://bob:s%40c@[::1]:7000/3");
    ok(&o, "remote_fallback", "wait");
    ck_assert_int_eq(o.remote_fallback, BFS_REMOTE_WAIT);
    ok(&o, "remote_wait_ms", "250");
    ck_assert_int_eq(o.remote_wait_ms, 250);
    ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), 0); /* round trip of each */
    ok(&o, "remote", "none");
    ck_assert_str_eq(o.remote, "");
    bad("remote", "http://h", "not a Redis URL");
    bad("remote", "redis://h:0", "port must be 1..65535");
    bad("remote", "redis://pw@h", "USER:PASS@");
    bad("remote", "redis://h/x", "database must be a number");
    bad("remote_fallback", "later", "one of local|wait");
    bad("remote_ttl", "0", "1..2592000");
    bad("remote_claim_ms", "-1", "1..86400000");
    ok(&o, "remote_key", "/etc/batchfs/key");
    ck_assert_str_eq(o.remote_key, "/etc/batchfs/key");
    ok(&o, "remote_key", "none");
    ck_assert_str_eq(o.remote_key, "");
    bad("remote_key", "key", "an absolute path");
    /* object storage (docs/sources.md) */
    ck_assert_str_eq(o.s3_region, "");
    ok(&o, "s3_region", "eu-west-3");
    ck_assert_str_eq(o.s3_region, "eu-west-3");
    ok(&o, "s3_region", "auto");
    ck_assert_str_eq(o.s3_region, "");
    bad("s3_region", "EU_West", "auto or 1..63");
    bad("s3_region", "", "auto or 1..63");
    ok(&o, "s3_endpoint", "http://127.0.0.1:9000");
    ck_assert_str_eq(o.s3_endpoint, "http://127.0.0.1:9000");
    ok(&o, "s3_endpoint", "https://storage.googleapis.com/base");
    ok(&o, "s3_endpoint", "none");
    ck_assert_str_eq(o.s3_endpoint, "");
    bad("s3_endpoint", "ftp://host", "http://HOST");
    bad("s3_endpoint", "http://", "http://HOST");
    bad("s3_endpoint", "https://a b", "http://HOST");
    bad("s3_endpoint", "http://h/?a", "without spaces, a query"); /* the fetcher refused it */
    bad("s3_endpoint", "http://me:secret@host", "without user:password@");
    ok(&o, "ca", "/etc/ssl/mine.pem");
    ck_assert_str_eq(o.ca, "/etc/ssl/mine.pem");
    bad("ca", "mine.pem", "an absolute path");
    ck_assert_int_eq(o.fetch_retries, 5);
    ck_assert_int_eq(o.fetch_timeout_ms, 10000);
    ok(&o, "fetch_retries", "0");
    bad("fetch_retries", "101", "0..100");
    bad("fetch_timeout_ms", "0", "1..3600000");
    ck_assert_int_eq(o.fetch_parallel, 256);
    bad("fetch_parallel", "0", "1..256");
    ok(&o, "source_cache", "auto");
    ck_assert_str_eq(o.source_cache, "auto");
    ok(&o, "source_cache", "/var/cache/bfs");
    ok(&o, "source_cache", "none");
    ck_assert_str_eq(o.source_cache, "");
    bad("source_cache", "rel/dir", "an absolute path, auto or none");
    ck_assert_int_eq(o.source_cache_mb, 10240);
    bad("source_cache_mb", "0", "1..1099511627776");
}
END_TEST

/* the recipe options (docs/augment.md): values, ranges, the one-policy rule, and their
 * place in the canonical text and the fingerprint */
START_TEST(recipe_options)
{
    bfs_pipeline_opts o = fresh();
    ck_assert(o.jitter[0] == 0 && o.jitter[3] == 0 && o.grayscale_p == 0);
    ck_assert(o.randaug[0] == 0 && o.trivialaug == 0 && o.autoaug == 0);
    ok(&o, "color_jitter", "0.4:0.4:0.4:0.1");
    ck_assert(o.jitter[0] == 0.4 && o.jitter[2] == 0.4 && o.jitter[3] == 0.1);
    ok(&o, "color_jitter", "1/2:0:100:0.5");
    ck_assert(o.jitter[0] == 0.5 && o.jitter[1] == 0 && o.jitter[2] == 100 && o.jitter[3] == 0.5);
    const char *jitter_bad[] = {"0.4",        "0.4:0.4:0.4",       "0.4:0.4:0.4:0.6", "-1:0:0:0",
                                "0:0:0:-0.1", "0.4:0.4:0.4:0.1:0", "a:b:c:d",         "100.5:0:0:0",
                                "nan:0:0:0",  "0:0:0:inf",         "0.4::0.4:0.1",    ""};
    for (size_t i = 0; i < sizeof jitter_bad / sizeof *jitter_bad; i++)
        bad("color_jitter", jitter_bad[i], "B:C:S:H, decimals: B, C, S in 0..100, H in 0..0.5");
    ok(&o, "grayscale_p", "0.2");
    ck_assert(o.grayscale_p == 0.2);
    bad("grayscale_p", "1.1", "a number in 0..1");
    ok(&o, "randaugment", "2:9");
    ck_assert(o.randaug[0] == 2 && o.randaug[1] == 9);
    ok(&o, "randaugment", "16:30");
    ok(&o, "randaugment", "none");
    ck_assert(o.randaug[0] == 0);
    const char *ra_bad[] = {"0:9", "17:9", "2:31", "2", "2:", ":9", "2:9:1", "-1:9", "two:9", ""};
    for (size_t i = 0; i < sizeof ra_bad / sizeof *ra_bad; i++)
        bad("randaugment", ra_bad[i], "none, or N:M with integers N in 1..16 and M in 0..30");
    ok(&o, "trivialaugment", "1");
    bad("trivialaugment", "2", "0");
    ok(&o, "autoaugment", "imagenet");
    bad("autoaugment", "cifar10", "imagenet");

    ok(&o, "erasing", "0.25");
    ck_assert(o.erasing == 0.25);
    bad("erasing", "1.5", "a number in 0..1");
    ok(&o, "erasing_mode", "rand");
    ck_assert_int_eq(o.erasing_mode, BFS_ERASE_RAND);
    bad("erasing_mode", "zero", "pixel");
    /* erasing acts after normalize: u8 outputs refuse it, float ones take it */
    o = fresh();
    ck_assert_int_eq(bfs_pipeline_parse(&o, "erasing=0.25", err, sizeof err), 0);
    ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "erasing= erases after normalize, as timm's RandomErasing: it "
                              "needs dtype=f16|bf16|f32"),
                  "%s", err);
    o = fresh();
    ck_assert_int_eq(bfs_pipeline_parse(&o, "erasing=0.25,dtype=bf16", err, sizeof err), 0);
    ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), 0);

    ok(&o, "mixup", "0.8");
    ok(&o, "cutmix", "1");
    ck_assert(o.mixup == 0.8 && o.cutmix == 1);
    bad("mixup", "-1", "a number in 0..100");
    bad("cutmix", "101", "a number in 0..100");
    ok(&o, "mix_prob", "1/2");
    bad("mix_prob", "1.5", "a number in 0..1");
    bad("switch_prob", "-0.5", "a number in 0..1");
    ok(&o, "label_smoothing", "0.1");
    bad("label_smoothing", "2", "a number in 0..1");
    ok(&o, "classes", "1000");
    ck_assert_uint_eq(o.classes, 1000);
    bad("classes", "-1", "0..1048576");

    /* one policy at a time, named in the message */
    const char *two[] = {"randaugment=2:9,trivialaugment=1",
                         "trivialaugment=1,autoaugment=imagenet",
                         "randaugment=1:0,autoaugment=imagenet"};
    for (size_t i = 0; i < 3; i++) {
        o = fresh();
        ck_assert_int_eq(bfs_pipeline_parse(&o, two[i], err, sizeof err), 0);
        ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), -EINVAL);
        ck_assert_msg(strstr(err, "randaugment=, trivialaugment= and autoaugment= are "
                                  "alternatives"),
                      "%s", err);
    }

    /* not in the canonical text at their defaults (old fingerprints hold), in it otherwise */
    char c[2048];
    canon_of("color_jitter=0:0:0:0,grayscale_p=0,randaugment=none,trivialaugment=0", c, sizeof c);
    ck_assert_ptr_null(strstr(c, "jitter"));
    ck_assert_ptr_null(strstr(c, "grayscale"));
    ck_assert_ptr_null(strstr(c, "randaugment"));
    ck_assert_ptr_null(strstr(c, "trivialaugment"));
    ck_assert_uint_eq(fp_of("randaugment=none,autoaugment=none", 1), fp_of("", 1));
    canon_of("randaugment=2:9,color_jitter=0.4:0.4:0.4:0,grayscale_p=1/5", c, sizeof c);
    ck_assert_msg(strstr(c, "color_jitter = 0.4:0.4:0.4:0\n"), "%s", c);
    ck_assert_msg(strstr(c, "grayscale_p = 0.2\n"), "%s", c);
    ck_assert_msg(strstr(c, "randaugment = 2:9\n"), "%s", c);
    const char *differ[] = {"randaugment=2:9",        "randaugment=2:10",
                            "randaugment=3:9",        "trivialaugment=1",
                            "autoaugment=imagenet",   "color_jitter=0.4:0:0:0",
                            "color_jitter=0:0:0:0.1", "grayscale_p=0.1"};
    uint64_t fp[8];
    for (size_t i = 0; i < 8; i++) {
        fp[i] = fp_of(differ[i], 1);
        ck_assert_uint_ne(fp[i], fp_of("", 1));
        for (size_t k = 0; k < i; k++)
            ck_assert_msg(fp[i] != fp[k], "%s and %s share a fingerprint", differ[i], differ[k]);
    }
}
END_TEST

/* size_schedule=: parsing, the canonical text, and the size of each epoch (FFCV's
 * get_resolution for linear: np.interp, then rounded half to even to a multiple of 32,
 * the ramp's ends exact) */
START_TEST(size_schedules)
{
    bfs_pipeline_opts o = fresh();
    uint32_t h, w;
    bfs_pipeline_size_at(&o, 5, &h, &w);
    ck_assert(h == 224 && w == 224);
    ok(&o, "size_schedule", "0:128:2:160x192:5:224");
    ck_assert_uint_eq(o.sched_n, 3);
    static const uint32_t step_h[] = {128, 128, 160, 160, 160, 224, 224};
    for (uint64_t ep = 0; ep < 7; ep++) {
        bfs_pipeline_size_at(&o, ep, &h, &w);
        ck_assert_msg(h == step_h[ep], "epoch %llu: %u", (unsigned long long)ep, h);
        ck_assert(w == (step_h[ep] == 160 ? 192 : step_h[ep]));
    }
    o.augment = BFS_AUG_EVAL; /* a training schedule: eval mounts keep size= */
    bfs_pipeline_size_at(&o, 6, &h, &w);
    ck_assert(h == 224 && w == 224);
    o = fresh();
    ok(&o, "size", "100");
    ok(&o, "size_schedule", "3:64"); /* before the first point: its size */
    bfs_pipeline_size_at(&o, 0, &h, &w);
    ck_assert(h == 64 && w == 64);
    /* FFCV's ResNet-50 ramp: 160 until epoch 11, 192 from 13 (its start_ramp, end_ramp) */
    ok(&o, "size_schedule", "linear:11:160:13:192");
    static const uint32_t lin[] = {160, 160, 192, 192, 192}; /* 12: 176 / 32 = 5.5 -> 6 */
    for (uint64_t ep = 10; ep < 15; ep++) {
        bfs_pipeline_size_at(&o, ep, &h, &w);
        ck_assert_msg(h == lin[ep - 10] && w == h, "epoch %llu: %u", (unsigned long long)ep, h);
    }
    ok(&o, "size_schedule", "linear:0:160:88:192"); /* 160 + 32 * e / 88: 176 at 44 */
    bfs_pipeline_size_at(&o, 44, &h, &w);           /* 176 / 32 = 5.5: half to even, 6 -> 192 */
    ck_assert_uint_eq(h, 192);
    bfs_pipeline_size_at(&o, 43, &h, &w); /* 175.6 / 32 = 5.49 -> 160 */
    ck_assert_uint_eq(h, 160);
    char c[2048];
    canon_of("size_schedule=linear:0:160:10:192x224", c, sizeof c);
    ck_assert_msg(strstr(c, "size_schedule = linear:0:160:10:192x224\n"), "%s", c);
    canon_of("size_schedule=none", c, sizeof c);
    ck_assert_ptr_null(strstr(c, "size_schedule"));
    const char *sched_bad[] = {
        "0:128:0:160", "5:128:2:160", "0",      "0:",   "0:128:", "linear:0:16", "0:9000", "0:0",
        "a:128",       "0:128x",      "0:x128", ":128", ""};
    for (size_t i = 0; i < sizeof sched_bad / sizeof *sched_bad; i++)
        bad("size_schedule", sched_bad[i], "pairs E:S, epochs ascending");
    /* 17 points: one too many (the message cuts so long a value) */
    ck_assert_int_eq(bfs_pipeline_set(&o, "size_schedule",
                                      "0:32:1:32:2:32:3:32:4:32:5:32:6:32:7:32:8:32:9:32:10:32:"
                                      "11:32:12:32:13:32:14:32:15:32:16:32",
                                      err, sizeof err),
                     -EINVAL);
    ck_assert_int_eq(bfs_pipeline_set(&o, "size_schedule",
                                      "0:32:1:32:2:32:3:32:4:32:5:32:6:32:7:32:8:32:9:32:10:32:"
                                      "11:32:12:32:13:32:14:32:15:32",
                                      err, sizeof err),
                     0);
}
END_TEST

START_TEST(table_matches_design)
{
    size_t n = 0;
    while (bfs_pipeline_option_at(n))
        n++;
    ck_assert_uint_eq(n, N_DESIGN);
    for (size_t i = 0; i < n; i++) {
        const bfs_pipeline_option *p = bfs_pipeline_option_at(i);
        ck_assert_str_eq(p->name, design[i].name);
        ck_assert_msg(p->cls == design[i].cls, "%s: class %d", p->name, p->cls);
        ck_assert(p->syntax && *p->syntax && p->def && *p->def && p->help && *p->help);
    }
    ck_assert_ptr_null(bfs_pipeline_option_at(n + 1000));
}
END_TEST

START_TEST(defaults_match_design)
{
    bfs_pipeline_opts o = fresh();
    ck_assert_uint_eq(o.seed, 0);
    ck_assert_uint_eq(o.batch, 256);
    ck_assert_uint_eq(o.epochs, 100);
    ck_assert_int_eq(o.shuffle, BFS_SHUFFLE_FULL);
    ck_assert_int_eq(o.drop_last, 1);
    ck_assert_uint_eq(o.shard_index, 0);
    ck_assert_uint_eq(o.shard_count, 1);
    ck_assert_uint_eq(o.out_h, 224);
    ck_assert_uint_eq(o.out_w, 224);
    ck_assert_int_eq(o.augment, BFS_AUG_TRAIN);
    ck_assert(o.scale[0] == 0.08 && o.scale[1] == 1.0);
    ck_assert(o.ratio[0] == 3.0 / 4.0 && o.ratio[1] == 4.0 / 3.0); /* torchvision's values */
    ck_assert(o.flip == 0.5);
    ck_assert_int_eq(o.dtype, BFS_OUT_U8);
    ck_assert_int_eq(o.layout, BFS_LAYOUT_NHWC);
    ck_assert_int_eq(o.bad_sample, BFS_BAD_SUBSTITUTE);
    ck_assert_int_eq(o.threads, BFS_AUTO);
    ck_assert_int_eq(o.prefetch, BFS_AUTO);
    ck_assert_int_eq(o.cache_mb, BFS_AUTO);
    ck_assert_str_eq(o.cache_dir, "");
    ck_assert_int_eq(o.cache_dir_mb, 4096);
    ck_assert_int_eq(o.sample_cache_mb, 0);
    ck_assert_int_eq(o.cpu_budget, 0); /* online CPUs, resolved by the engine */
    ck_assert_int_eq(o.ram_mb, 0);     /* half of free RAM, resolved by the engine */
    ck_assert(o.given[0] == 0 && o.given[1] == 0);
    ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), 0);
    ck_assert_int_eq(o.normalize, 0); /* u8: none */

    /* float dtypes default to imagenet */
    static const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    const char *floats[] = {"f16", "bf16", "f32"};
    for (int i = 0; i < 3; i++) {
        o = fresh();
        ok(&o, "dtype", floats[i]);
        ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), 0);
        ck_assert_int_eq(o.normalize, 1);
        ck_assert(memcmp(o.mean, mean, sizeof mean) == 0 && memcmp(o.std, std, sizeof std) == 0);
    }
}
END_TEST

/* ---- each option ---------------------------------------------------------------------- */

START_TEST(integers)
{
    bfs_pipeline_opts o = fresh();
    ok(&o, "seed", "0");
    ok(&o, "seed", "18446744073709551615");
    ck_assert_uint_eq(o.seed, UINT64_MAX);
    ok(&o, "seed", "007");
    ck_assert_uint_eq(o.seed, 7);
    const char *seed_bad[] = {
        "18446744073709551616",   "-1", "+1", " 1", "1 ", "0x10", "", "1e3", "abc", "1.0",
        "99999999999999999999999"};
    for (size_t i = 0; i < sizeof seed_bad / sizeof *seed_bad; i++)
        bad("seed", seed_bad[i], "must be an integer in 0..18446744073709551615");

    ok(&o, "batch", "1");
    ok(&o, "batch", "65536");
    ck_assert_uint_eq(o.batch, 65536);
    const char *batch_bad[] = {"0", "65537", "-5", "4294967297", "1.5", "", "32k"};
    for (size_t i = 0; i < sizeof batch_bad / sizeof *batch_bad; i++)
        bad("batch", batch_bad[i], "must be an integer in 1..65536");

    ok(&o, "epochs", "1");
    ok(&o, "epochs", "1000000");
    ck_assert_uint_eq(o.epochs, 1000000);
    bad("epochs", "0", "1..1000000");
    bad("epochs", "1000001", "1..1000000");

    /* the knobs with auto */
    ok(&o, "threads", "1");
    ok(&o, "threads", "1024");
    ck_assert_int_eq(o.threads, 1024);
    ok(&o, "threads", "auto");
    ck_assert_int_eq(o.threads, BFS_AUTO);
    bad("threads", "0", "auto or an integer in 1..1024");
    bad("threads", "1025", "auto or an integer in 1..1024");
    bad("threads", "Auto", "auto or an integer in 1..1024");
    bad("threads", "-1", "auto or an integer in 1..1024");

    ok(&o, "prefetch", "0");
    ck_assert_int_eq(o.prefetch, 0);
    ok(&o, "prefetch", "1024");
    ok(&o, "prefetch", "auto");
    ck_assert_int_eq(o.prefetch, BFS_AUTO);
    bad("prefetch", "1025", "auto or an integer in 0..1024");
    bad("prefetch", "-1", "auto or an integer in 0..1024");

    ok(&o, "cache_mb", "0");
    ok(&o, "cache_mb", "1099511627776");
    ck_assert_int_eq(o.cache_mb, 1LL << 40);
    ok(&o, "cache_mb", "auto");
    ck_assert_int_eq(o.cache_mb, BFS_AUTO);
    bad("cache_mb", "1099511627777", "auto or an integer in 0..1099511627776");
    bad("cache_mb", "-1", "0..1099511627776");

    ok(&o, "cache_dir_mb", "1");
    ok(&o, "cache_dir_mb", "1099511627776");
    bad("cache_dir_mb", "0", "an integer in 1..1099511627776");
    bad("cache_dir_mb", "auto", "an integer in 1..1099511627776");

    ok(&o, "sample_cache_mb", "0");
    ok(&o, "sample_cache_mb", "1099511627776");
    ck_assert_int_eq(o.sample_cache_mb, 1LL << 40);
    bad("sample_cache_mb", "-1", "0..1099511627776");
    bad("sample_cache_mb", "1099511627777", "0..1099511627776");

    ok(&o, "cpu_budget", "1");
    ok(&o, "cpu_budget", "1024");
    ck_assert_int_eq(o.cpu_budget, 1024);
    bad("cpu_budget", "0", "an integer in 1..1024");
    bad("cpu_budget", "1025", "an integer in 1..1024");

    ok(&o, "ram_mb", "16");
    ok(&o, "ram_mb", "1099511627776");
    ck_assert_int_eq(o.ram_mb, 1LL << 40);
    bad("ram_mb", "15", "an integer in 16..1099511627776");
    bad("ram_mb", "0", "16..1099511627776");
}
END_TEST

START_TEST(enums)
{
    static const struct {
        const char *key, *names[5];
        int values[5];
        const char *bad;
    } cases[] = {
        {"shuffle",
         {"full", "pages", "none", "rows"},
         {BFS_SHUFFLE_FULL, BFS_SHUFFLE_PAGES, BFS_SHUFFLE_NONE, BFS_SHUFFLE_ROWS},
         "one of full|pages|none|rows"},
        {"drop_last", {"0", "1"}, {0, 1}, "one of 0|1"},
        {"pad", {"0", "1"}, {0, 1}, "one of 0|1"},
        {"augment",
         {"train", "eval", "none"},
         {BFS_AUG_TRAIN, BFS_AUG_EVAL, BFS_AUG_NONE},
         "one of train|eval|none"},
        {"dtype",
         {"u8", "f16", "bf16", "f32"},
         {BFS_OUT_U8, BFS_OUT_F16, BFS_OUT_BF16, BFS_OUT_F32},
         "one of u8|f16|bf16|f32"},
        {"layout", {"nhwc", "nchw"}, {BFS_LAYOUT_NHWC, BFS_LAYOUT_NCHW}, "one of nhwc|nchw"},
        {"bad_sample",
         {"substitute", "fail"},
         {BFS_BAD_SUBSTITUTE, BFS_BAD_FAIL},
         "one of substitute|fail"},
        {"huge_pages", {"0", "1", "auto"}, {0, 1, BFS_HUGE_AUTO}, "one of 0|1|auto"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        bfs_pipeline_opts o = fresh();
        for (int i = 0; cases[c].names[i]; i++) {
            ok(&o, cases[c].key, cases[c].names[i]);
            int got = !strcmp(cases[c].key, "shuffle")      ? o.shuffle
                      : !strcmp(cases[c].key, "drop_last")  ? o.drop_last
                      : !strcmp(cases[c].key, "pad")        ? o.pad
                      : !strcmp(cases[c].key, "augment")    ? o.augment
                      : !strcmp(cases[c].key, "dtype")      ? o.dtype
                      : !strcmp(cases[c].key, "layout")     ? o.layout
                      : !strcmp(cases[c].key, "huge_pages") ? o.huge_pages
                                                            : o.bad_sample;
            ck_assert_msg(got == cases[c].values[i], "%s=%s -> %d", cases[c].key, cases[c].names[i],
                          got);
        }
        bad(cases[c].key, "", cases[c].bad);
        bad(cases[c].key, "x", cases[c].bad);
        bad(cases[c].key, "nonesuch", cases[c].bad);
        char upper[32];
        snprintf(upper, sizeof upper, "%s", cases[c].names[0]);
        upper[0] = (char)(upper[0] >= 'a' && upper[0] <= 'z' ? upper[0] - 32 : 'X');
        bad(cases[c].key, upper, cases[c].bad);
        char trail[32]; /* a prefix of a longer name or a name plus junk never matches */
        snprintf(trail, sizeof trail, "%s ", cases[c].names[0]);
        bad(cases[c].key, trail, cases[c].bad);
    }
    bad("drop_last", "true", "one of 0|1");
    bad("drop_last", "2", "one of 0|1");
    bad("shuffle", "ful", "one of full|pages|none|rows");
    bad("dtype", "float32", "one of u8|f16|bf16|f32");
}
END_TEST

START_TEST(shard_and_size)
{
    bfs_pipeline_opts o = fresh();
    ok(&o, "shard", "3/4");
    ck_assert_uint_eq(o.shard_index, 3);
    ck_assert_uint_eq(o.shard_count, 4);
    ok(&o, "shard", "65535/65536");
    ok(&o, "shard", "0/1");
    ck_assert_uint_eq(o.shard_count, 1);
    const char *shard_bad[] = {"1/1",  "4/4", "0/0",   "0/65537", "1",    "1/",  "/2",
                               "-1/2", "a/b", "1/2/3", " 0/1",    "0/1 ", "0:1", ""};
    for (size_t i = 0; i < sizeof shard_bad / sizeof *shard_bad; i++)
        bad("shard", shard_bad[i], "I/N with integers N in 1..65536 and I < N");

    ok(&o, "size", "1");
    ck_assert(o.out_h == 1 && o.out_w == 1);
    ok(&o, "size", "8192");
    ck_assert(o.out_h == 8192 && o.out_w == 8192);
    ok(&o, "size", "224x160"); /* HxW: height first */
    ck_assert(o.out_h == 224 && o.out_w == 160);
    const char *size_bad[] = {"0",         "8193", "224x0", "224x", "x224", "224X224",
                              "224x160x3", "-224", "1e3",   "",     "0x0",  "224 "};
    for (size_t i = 0; i < sizeof size_bad / sizeof *size_bad; i++)
        bad("size", size_bad[i], "H or HxW, integers in 1..8192");
}
END_TEST

START_TEST(reals)
{
    bfs_pipeline_opts o = fresh();
    ok(&o, "scale", "1:1");
    ok(&o, "scale", "0.5:0.5");
    ok(&o, "scale", "1/3:1/2"); /* fractions: exactly p/q in double */
    ck_assert(o.scale[0] == 1.0 / 3.0 && o.scale[1] == 0.5);
    ok(&o, "scale", "8e-2:1");
    ck_assert(o.scale[0] == 0.08);
    const char *scale_bad[] = {"0:1",   "0.5:0.4", "0.5:1.01", "0.5",     "a:b",    "1/0:1",
                               "nan:1", "inf:1",   "0x1p-3:1", "0.5:1:1", "-0.5:1", "0.5 :1",
                               ":1",    "0.5:",    "1e999:1",  "",        "0.1:1/0"};
    for (size_t i = 0; i < sizeof scale_bad / sizeof *scale_bad; i++)
        bad("scale", scale_bad[i], "A:B with 0 < A <= B <= 1");

    ok(&o, "ratio", "3/4:4/3");
    ck_assert(o.ratio[0] == 0.75 && o.ratio[1] == 4.0 / 3.0);
    ok(&o, "ratio", "0.5:100");
    ck_assert(o.ratio[1] == 100);
    bad("ratio", "0.5:100.5", "A:B with 0 < A <= B <= 100");
    bad("ratio", "0:2", "A:B with 0 < A <= B <= 100");
    bad("ratio", "2:1", "A:B with 0 < A <= B <= 100");
    bad("ratio", "-1:1", "A:B with 0 < A <= B <= 100");

    ok(&o, "flip", "0");
    ok(&o, "flip", "1");
    ok(&o, "flip", "0.25");
    ck_assert(o.flip == 0.25);
    ok(&o, "flip", "1/3");
    ck_assert(o.flip == 1.0 / 3.0);
    ok(&o, "flip", "-0"); /* one zero: -0 is stored as +0 */
    ck_assert(o.flip == 0 && !signbit(o.flip));
    const char *flip_bad[] = {"1.5", "-0.1", "nan", "inf", "-inf", "", "0.5.", "half", "1/0"};
    for (size_t i = 0; i < sizeof flip_bad / sizeof *flip_bad; i++)
        bad("flip", flip_bad[i], "a number in 0..1");
}
END_TEST

START_TEST(normalize_values)
{
    bfs_pipeline_opts o = fresh();
    ok(&o, "normalize", "imagenet");
    ck_assert_int_eq(o.normalize, 1);
    ck_assert(o.mean[0] == 0.485f && o.mean[1] == 0.456f && o.mean[2] == 0.406f);
    ck_assert(o.std[0] == 0.229f && o.std[1] == 0.224f && o.std[2] == 0.225f);
    ok(&o, "normalize", "none");
    ck_assert_int_eq(o.normalize, 0);
    ck_assert(o.mean[0] == 0 && o.mean[2] == 0 && o.std[0] == 1 && o.std[2] == 1);
    ok(&o, "normalize", "0.5,0.25,-1/0.5,2,1e-3");
    ck_assert_int_eq(o.normalize, 1);
    ck_assert(o.mean[0] == 0.5f && o.mean[1] == 0.25f && o.mean[2] == -1.0f);
    ck_assert(o.std[0] == 0.5f && o.std[1] == 2.0f && o.std[2] == 1e-3f);
    const char *forms[] = {"0.5,0.5/0.2,0.2,0.2",
                           "0.5,0.5,0.5",
                           "a,b,c/d,e,f",
                           "0.5,0.5,0.5/0.2,0.2,0.2,0.2",
                           "0.5,0.5,0.5,/0.2,0.2,0.2",
                           "1e39,0,0/1,1,1",
                           "ImageNet",
                           "",
                           "nan,0,0/1,1,1",
                           "0,0,0/1,1,1/1,1,1",
                           " 0,0,0/1,1,1",
                           "1/2,0,0/1,1,1"};
    for (size_t i = 0; i < sizeof forms / sizeof *forms; i++)
        bad("normalize", forms[i], "imagenet, none or m0,m1,m2/s0,s1,s2");
    bad("normalize", "0.5,0.5,0.5/0.2,0.2,0", "std must be > 0");
    bad("normalize", "0.5,0.5,0.5/0.2,-0.2,1", "std must be > 0");
    bad("normalize", "0,0,0/1e-50,1,1", "std must be > 0"); /* 0 as a float */
}
END_TEST

START_TEST(cache_dir)
{
    bfs_pipeline_opts o = fresh();
    ok(&o, "cache_dir", "/var/cache/batchfs");
    ck_assert_str_eq(o.cache_dir, "/var/cache/batchfs");
    ok(&o, "cache_dir", "none");
    ck_assert_str_eq(o.cache_dir, "");
    ok(&o, "cache_dir", "/a#b=c");
    ck_assert_str_eq(o.cache_dir, "/a#b=c");
    const char *rel[] = {"relative/path", "./x", "", "~/x", " /x"};
    for (size_t i = 0; i < sizeof rel / sizeof *rel; i++)
        bad("cache_dir", rel[i], "an absolute path, auto or none");

    char path[1100];
    memset(path, 'a', sizeof path);
    path[0] = '/';
    path[1023] = '\0'; /* 1023 bytes: fits */
    ok(&o, "cache_dir", path);
    ck_assert_uint_eq(strlen(o.cache_dir), 1023);
    path[1023] = 'a';
    path[1024] = '\0';
    bfs_pipeline_opts before = o;
    ck_assert_int_eq(bfs_pipeline_set(&o, "cache_dir", path, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "too long"));
    ck_assert_ptr_nonnull(strstr(err, "cache_dir=/aaaa"));
    ck_assert_ptr_nonnull(strstr(err, "...")); /* long values are cut in messages */
    ck_assert(memcmp(&o, &before, sizeof o) == 0);
}
END_TEST

START_TEST(group_names)
{
    bfs_pipeline_opts o = fresh();
    ck_assert_str_eq(o.group, "");
    ok(&o, "group", "train-run_7.a");
    ck_assert_str_eq(o.group, "train-run_7.a");
    ok(&o, "group", "none");
    ck_assert_str_eq(o.group, "");
    char name[80];
    memset(name, 'g', sizeof name);
    name[64] = '\0'; /* 64 bytes: fits */
    ok(&o, "group", name);
    ck_assert_uint_eq(strlen(o.group), 64);
    name[64] = 'g', name[65] = '\0';
    const char *badv[] = {name, "", "a/b", "a b", "x,y", "..\x01", "caf\xc3\xa9", "a*"};
    for (size_t i = 0; i < sizeof badv / sizeof *badv; i++) {
        bfs_pipeline_opts before = o;
        ck_assert_int_eq(bfs_pipeline_set(&o, "group", badv[i], err, sizeof err), -EINVAL);
        ck_assert_msg(strstr(err, "group=") && strstr(err, "A-Z a-z 0-9 . _ -"), "%s", err);
        ck_assert(memcmp(&o, &before, sizeof o) == 0);
    }
    /* not data-changing: neither in the canonical text nor in the fingerprint */
    char c1[1024], c2[1024];
    canon_of("", c1, sizeof c1);
    canon_of("group=abc", c2, sizeof c2);
    ck_assert_str_eq(c1, c2);
    ck_assert_ptr_null(strstr(c2, "group"));
}
END_TEST

START_TEST(missing_and_unknown)
{
    bfs_pipeline_opts o = fresh(), before = o;
    ck_assert_int_eq(bfs_pipeline_set(&o, "batch", NULL, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "batch"));
    ck_assert_ptr_nonnull(strstr(err, "missing value"));
    ck_assert_ptr_nonnull(strstr(err, "1..65536"));

    ck_assert_int_eq(bfs_pipeline_set(&o, "bogus", "1", err, sizeof err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "unknown option 'bogus'"));
    for (size_t i = 0; bfs_pipeline_option_at(i); i++)
        ck_assert_msg(strstr(err, bfs_pipeline_option_at(i)->name), "no %s in: %s",
                      bfs_pipeline_option_at(i)->name, err);
    ck_assert_ptr_null(strstr(err, "did you mean"));
    ck_assert(memcmp(&o, &before, sizeof o) == 0);

    ck_assert_int_eq(bfs_pipeline_set(&o, "bach", "1", err, sizeof err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "did you mean 'batch'?"));
    ck_assert_int_eq(bfs_pipeline_set(&o, "Seed", "1", err, sizeof err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "did you mean 'seed'?"));
    ck_assert_int_eq(bfs_pipeline_set(&o, "", "1", err, sizeof err), -ENOENT);
    ck_assert_int_eq(bfs_pipeline_set(&o, "spec", "/x", err, sizeof err), -ENOENT);
    ck_assert_int_eq(bfs_pipeline_set(&o, "threads\n", "1", err, sizeof err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "'threads\\x0a'")); /* control bytes escaped */

    /* err may be NULL or tiny: no overflow, NUL-terminated */
    ck_assert_int_eq(bfs_pipeline_set(&o, "batch", "0", NULL, 0), -EINVAL);
    char tiny[6] = "zzzzz";
    ck_assert_int_eq(bfs_pipeline_set(&o, "batch", "0", tiny, 0), -EINVAL);
    ck_assert_str_eq(tiny, "zzzzz");
    ck_assert_int_eq(bfs_pipeline_set(&o, "batch", "0", tiny, sizeof tiny), -EINVAL);
    ck_assert_str_eq(tiny, "batch");
    ck_assert_int_eq(bfs_pipeline_set(&o, "nope", "0", tiny, sizeof tiny), -ENOENT);

    /* the given bits: set only by successful sets, row index = bit */
    ck_assert(o.given[0] == 0 && o.given[1] == 0);
    ok(&o, "dtype", "f16");
    ck_assert(o.given[0] == 1u << 26 && o.given[1] == 0);
    ck_assert_str_eq(bfs_pipeline_option_at(26)->name, "dtype");
}
END_TEST

START_TEST(parse_o_text)
{
    bfs_pipeline_opts o = fresh();
    ck_assert_int_eq(bfs_pipeline_parse(&o, "batch=1,batch=2", err, sizeof err), 0);
    ck_assert_uint_eq(o.batch, 2); /* last one wins */
    ck_assert_int_eq(bfs_pipeline_parse(&o, ",,seed=5,,", err, sizeof err), 0);
    ck_assert_uint_eq(o.seed, 5);
    ck_assert_int_eq(bfs_pipeline_parse(&o, "", err, sizeof err), 0);
    ck_assert_int_eq(bfs_pipeline_parse(&o, NULL, err, sizeof err), 0);
    ck_assert_int_eq(
        bfs_pipeline_parse(&o, "dtype=f32,normalize=0.5,.25,-1/+2,2,3,size=32x16,cache_dir=/a=b",
                           err, sizeof err),
        0);
    ck_assert(o.mean[1] == 0.25f && o.mean[2] == -1.0f && o.std[0] == 2.0f && o.std[2] == 3.0f);
    ck_assert(o.out_h == 32 && o.out_w == 16);
    ck_assert_str_eq(o.cache_dir, "/a=b");
    ck_assert_int_eq(bfs_pipeline_parse(&o, "normalize=imagenet,batch=8", err, sizeof err), 0);
    ck_assert_uint_eq(o.batch, 8);
    ck_assert_int_eq(o.normalize, 1);

    /* stops at the first error; earlier items applied */
    o = fresh();
    ck_assert_int_eq(bfs_pipeline_parse(&o, "seed=9,nope=2,batch=3", err, sizeof err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "nope"));
    ck_assert_uint_eq(o.seed, 9);
    ck_assert_uint_eq(o.batch, 256);
    ck_assert_int_eq(bfs_pipeline_parse(&o, "batch=3,shard=1/1", err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "shard=1/1"));
    ck_assert_int_eq(bfs_pipeline_parse(&o, "drop_last", err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "drop_last: missing value"));
    ck_assert_int_eq(bfs_pipeline_parse(&o, "=5", err, sizeof err), -ENOENT);
    ck_assert_int_eq(bfs_pipeline_parse(&o, "normalize=imagenet,5", err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "normalize=imagenet,5"));
    ck_assert_int_eq(bfs_pipeline_parse(&o, "batch= 5", err, sizeof err), -EINVAL);
}
END_TEST

/* ---- cross-option rules ------------------------------------------------------------------ */

START_TEST(normalize_with_dtype)
{
    bfs_pipeline_opts o = fresh();
    ck_assert_int_eq(bfs_pipeline_parse(&o, "normalize=imagenet", err, sizeof err), 0);
    ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "normalize=imagenet"));
    ck_assert_ptr_nonnull(strstr(err, "dtype=u8"));
    ck_assert_ptr_nonnull(strstr(err, "f16|bf16|f32"));

    o = fresh();
    ck_assert_int_eq(
        bfs_pipeline_parse(&o, "dtype=u8,normalize=0.5,0.5,0.5/0.25,0.25,0.25", err, sizeof err),
        0);
    ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "normalize=0.5,0.5,0.5/0.25,0.25,0.25"));

    o = fresh(); /* u8 with an explicit none is fine */
    ck_assert_int_eq(bfs_pipeline_parse(&o, "normalize=none", err, sizeof err), 0);
    ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), 0);
    ck_assert_int_eq(o.normalize, 0);

    o = fresh(); /* order does not matter: dtype after normalize */
    ck_assert_int_eq(bfs_pipeline_parse(&o, "normalize=imagenet,dtype=bf16", err, sizeof err), 0);
    ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), 0);
    ck_assert_int_eq(o.normalize, 1);

    o = fresh(); /* float with none: mean 0, std 1 (x/255) */
    ck_assert_int_eq(bfs_pipeline_parse(&o, "dtype=f32,normalize=none", err, sizeof err), 0);
    ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), 0);
    ck_assert_int_eq(o.normalize, 0);
    ck_assert(o.mean[0] == 0 && o.std[0] == 1);

    o = fresh(); /* dtype switched back to u8, normalize never given: none */
    ck_assert_int_eq(bfs_pipeline_parse(&o, "dtype=f32,dtype=u8", err, sizeof err), 0);
    ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), 0);
    ck_assert_int_eq(o.normalize, 0);

    /* finish is idempotent */
    char a[1024], b[1024];
    o = fresh();
    ck_assert_int_eq(bfs_pipeline_parse(&o, "dtype=f16", err, sizeof err), 0);
    ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), 0);
    ck_assert_int_gt(bfs_pipeline_canonical(&o, a, sizeof a), 0);
    ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), 0);
    ck_assert_int_gt(bfs_pipeline_canonical(&o, b, sizeof b), 0);
    ck_assert_str_eq(a, b);
}
END_TEST

START_TEST(finish_validates_struct)
{
    bfs_pipeline_opts o;

    o = fresh();
    o.batch = 0;
    ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "batch=0: must be an integer in 1..65536"));

    o = fresh();
    o.shard_index = 2;
    o.shard_count = 2;
    ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "shard=2/2"));

    o = fresh();
    o.shard_count = 0;
    ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "shard=0/0"));

    o = fresh();
    o.shuffle = 7;
    ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "shuffle="));

    o = fresh();
    o.scale[0] = NAN;
    ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "scale="));

    o = fresh();
    o.out_w = 9000;
    ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "size=224x9000"));

    o = fresh();
    o.threads = -5;
    ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "threads=-5"));

    o = fresh();
    o.cpu_budget = 2000;
    ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "cpu_budget=2000"));

    o = fresh();
    o.cpu_budget = 8; /* explicit values and 0 (default) both pass */
    o.ram_mb = 16;
    ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), 0);

    o = fresh();
    memcpy(o.cache_dir, "relative", 9);
    ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "cache_dir=relative"));
}
END_TEST

/* ---- canonical text and fingerprint ------------------------------------------------------- */

static const char default_canonical[] = "seed = 0\n"
                                        "batch = 256\n"
                                        "shuffle = full\n"
                                        "drop_last = 1\n"
                                        "shard = 0/1\n"
                                        "size = 224x224\n"
                                        "augment = train\n"
                                        "scale = 0.08:1\n"
                                        "ratio = 0.75:1.3333333333333333\n"
                                        "flip = 0.5\n"
                                        "dtype = u8\n"
                                        "normalize = none\n"
                                        "layout = nhwc\n"
                                        "bad_sample = substitute\n";

START_TEST(canonical_text)
{
    char c[1024];
    canon_of("", c, sizeof c);
    ck_assert_str_eq(c, default_canonical);

    canon_of("dtype=f32,layout=nchw,size=160x128,scale=1/3:0.9,flip=0,seed=18446744073709551615", c,
             sizeof c);
    ck_assert_str_eq(c, "seed = 18446744073709551615\n"
                        "batch = 256\n"
                        "shuffle = full\n"
                        "drop_last = 1\n"
                        "shard = 0/1\n"
                        "size = 160x128\n"
                        "augment = train\n"
                        "scale = 0.3333333333333333:0.9\n"
                        "ratio = 0.75:1.3333333333333333\n"
                        "flip = 0\n"
                        "dtype = f32\n"
                        "normalize = 0.485,0.456,0.406/0.229,0.224,0.225\n"
                        "layout = nchw\n"
                        "bad_sample = substitute\n");

    /* spellings of the same pipeline have one text */
    char d[1024];
    canon_of("size=224,scale=8e-2:1.0,ratio=0.75:4/3,flip=1/2,seed=000", d, sizeof d);
    ck_assert_str_eq(d, default_canonical);
    canon_of("dtype=f32,normalize=imagenet", c, sizeof c);
    canon_of("dtype=f32,normalize=0.485,0.456,0.406/0.229,0.224,0.225", d, sizeof d);
    ck_assert_str_eq(c, d);
    canon_of("dtype=f32,normalize=none", c, sizeof c);
    canon_of("dtype=f32,normalize=0,-0,0.0/1,1,1", d, sizeof d);
    ck_assert_str_eq(c, d);
    ck_assert_ptr_nonnull(strstr(c, "normalize = 0,0,0/1,1,1\n"));

    /* round trip: canonical text is a spec that reproduces itself */
    const char *pipelines[] = {"", "dtype=f32,normalize=0.1,0.2,0.3/0.7,0.8,0.9,scale=1/7:3/7",
                               "shuffle=pages,drop_last=0,shard=5/8,augment=eval,dtype=bf16",
                               "ratio=1/3:99.99,flip=0.123456789,seed=42,bad_sample=fail",
                               "shard=2/7,pad=1"};
    for (size_t i = 0; i < sizeof pipelines / sizeof *pipelines; i++) {
        canon_of(pipelines[i], c, sizeof c);
        bfs_pipeline_opts o = fresh();
        ck_assert_msg(bfs_pipeline_parse_spec(&o, c, "canonical", err, sizeof err) == 0, "%s", err);
        ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), 0);
        ck_assert_int_gt(bfs_pipeline_canonical(&o, d, sizeof d), 0);
        ck_assert_str_eq(c, d);
    }

    /* length and -ENOSPC */
    bfs_pipeline_opts o = fresh();
    ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), 0);
    int n = bfs_pipeline_canonical(&o, c, sizeof c);
    ck_assert_int_eq(n, (int)strlen(default_canonical));
    ck_assert_int_eq(bfs_pipeline_canonical(&o, c, (size_t)n), -ENOSPC);
    ck_assert_int_eq(bfs_pipeline_canonical(&o, c, (size_t)n + 1), n);
    ck_assert_int_eq(bfs_pipeline_canonical(&o, NULL, 0), -ENOSPC);
}
END_TEST

START_TEST(canonical_ignores_locale)
{
    /* A locale whose decimal point is ',' must change neither parsing nor the text. */
    const char *names[] = {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "fr_FR.utf8", "ru_RU.UTF-8"};
    const char *got = NULL;
    for (size_t i = 0; i < sizeof names / sizeof *names && !got; i++)
        got = setlocale(LC_NUMERIC, names[i]);
    if (!got)
        fprintf(stderr, "canonical_ignores_locale: no comma-decimal locale installed; "
                        "checked in the C locale only\n");
    char c[1024];
    canon_of("scale=0.08:1,flip=0.25", c, sizeof c);
    ck_assert_ptr_nonnull(strstr(c, "scale = 0.08:1\nratio = 0.75:1.3333333333333333\n"));
    ck_assert_ptr_nonnull(strstr(c, "flip = 0.25\n"));
    setlocale(LC_NUMERIC, "C");
}
END_TEST

/* Every data option of image datasets (tokens 0) or of token datasets (1; their help
 * starts "token datasets") appears as "name=" in one of diff[0..nd). */
static void covered(const char *const *diff, size_t nd, int tokens)
{
    for (size_t i = 0; bfs_pipeline_option_at(i); i++) {
        const bfs_pipeline_option *p = bfs_pipeline_option_at(i);
        if (p->cls != BFS_OPT_DATA || (strstr(p->help, "token datasets") == p->help) != tokens ||
            strstr(p->help, "multi-field datasets") == p->help || /* field_options */
            strstr(p->help, "mixtures") == p->help ||             /* check_mix.c */
            strstr(p->help, "a mixture") == p->help)
            continue;
        char key[64];
        snprintf(key, sizeof key, "%s=", p->name);
        int found = 0;
        for (size_t j = 0; j < nd; j++)
            found |= strstr(diff[j], key) != NULL;
        ck_assert_msg(found, "no fingerprint case for %s", p->name);
    }
}

START_TEST(fingerprints)
{
    /* the documented construction */
    char c[1024], buf[2048];
    canon_of("", c, sizeof c);
    int n = snprintf(buf, sizeof buf, "batchfs/2\n%016llx\n%s", 0x0123456789abcdefULL, c);
    ck_assert_uint_eq(fp_of("", 0x0123456789abcdefULL), bfs_xxh64(buf, (size_t)n, 0));

    uint64_t base = fp_of("", 1);
    ck_assert_uint_eq(fp_of("", 1), base); /* stable */
    ck_assert_uint_ne(fp_of("", 2), base); /* dataset identity */
    ck_assert_uint_eq(fp_of("threads=1", 1), fp_of("threads=8", 1));

    /* knobs and epochs never change it */
    const char *same[] = {"threads=1",
                          "threads=8",
                          "prefetch=0",
                          "prefetch=64",
                          "cache_mb=0",
                          "cache_mb=512",
                          "cache_dir=/tmp/x",
                          "cache_dir_mb=1",
                          "sample_cache_mb=100",
                          "cpu_budget=3",
                          "ram_mb=64",
                          "epochs=1",
                          "epochs=1000000",
                          "batch=256,seed=0",
                          "pad=0", /* pad= enters the canonical text only when 1 */
                          "huge_pages=1",
                          "huge_pages=0",
                          "remote=redis://:pw@10.1.2.3:7000/2,remote_ttl=5",
                          "remote_wait_ms=1,remote_fallback=wait,remote_claim_ms=9",
                          "remote_key=/etc/batchfs/key",
                          "group=g1",
                          "group=other"};
    for (size_t i = 0; i < sizeof same / sizeof *same; i++)
        ck_assert_msg(fp_of(same[i], 1) == base, "%s changed the fingerprint", same[i]);

    /* every data-changing option does, each to a different value */
    const char *diff[] = {"seed=1",
                          "batch=255",
                          "shuffle=pages",
                          "shuffle=none",
                          "drop_last=0",
                          "shard=0/2",
                          "shard=1/2",
                          "shard=1/2,pad=1",
                          "pad=1",
                          "size=225",
                          "size=224x225",
                          "augment=eval",
                          "augment=none",
                          "dtype=f32,erasing=0.25",
                          "erasing_mode=const",
                          "size_schedule=0:160:10:192",
                          "size_schedule=linear:0:160:10:192",
                          "mixup=0.8",
                          "cutmix=1",
                          "mixup=0.8,mix_prob=0.5",
                          "mixup=0.8,cutmix=1,switch_prob=0.3",
                          "label_smoothing=0.1",
                          "label_smoothing=0.1,classes=1000",
                          "color_jitter=0.4:0.4:0.4:0.1",
                          "grayscale_p=0.1",
                          "randaugment=2:9",
                          "trivialaugment=1",
                          "autoaugment=imagenet",
                          "scale=0.09:1",
                          "scale=0.08:0.99",
                          "ratio=0.75:1.3",
                          "ratio=0.7:4/3",
                          "flip=0.4",
                          "dtype=f16",
                          "dtype=bf16",
                          "dtype=f32",
                          "dtype=f32,normalize=none",
                          "dtype=f32,normalize=0.485,0.456,0.406/0.229,0.224,0.226",
                          "layout=nchw",
                          "bad_sample=fail"};
    size_t nd = sizeof diff / sizeof *diff;
    uint64_t fps[sizeof diff / sizeof *diff];
    for (size_t i = 0; i < nd; i++) {
        fps[i] = fp_of(diff[i], 1);
        ck_assert_msg(fps[i] != base, "%s did not change the fingerprint", diff[i]);
        for (size_t j = 0; j < i; j++)
            ck_assert_msg(fps[i] != fps[j], "%s and %s collide", diff[i], diff[j]);
    }
    /* each data option of image datasets is covered above (token_options: the others) */
    covered(diff, nd, 0);

    /* pad=: in the text only when 1 */
    canon_of("pad=1", c, sizeof c);
    ck_assert_msg(strstr(c, "shard = 0/1\npad = 1\n"), "%s", c);
    canon_of("pad=0", c, sizeof c);
    ck_assert_ptr_null(strstr(c, "pad"));
}
END_TEST

/* Parse, finish and check against a token dataset (sequences=1) or an image one. */
static int kind_of(const char *text, int sequences, bfs_pipeline_opts *o)
{
    *o = fresh();
    ck_assert_msg(bfs_pipeline_parse(o, text, err, sizeof err) == 0, "%s: %s", text, err);
    ck_assert_msg(bfs_pipeline_finish(o, err, sizeof err) == 0, "%s: %s", text, err);
    return bfs_pipeline_check_kind(o, sequences, err, sizeof err);
}

/* pad=1 is refused for token datasets, naming the option; pad=0 (a spec file's default
 * line) is accepted */
START_TEST(pad_kind)
{
    bfs_pipeline_opts o;
    ck_assert_int_eq(kind_of("pad=1", 1, &o), -EINVAL);
    ck_assert_msg(strstr(err, "pad=1 is not available for token datasets"), "%s", err);
    ck_assert_int_eq(kind_of("pad=0", 1, &o), 0);
    ck_assert_int_eq(kind_of("pad=1", 0, &o), 0);
}
END_TEST

/* fields= and text_len=: resolved against the dataset's fields (unknown names refused,
 * naming the fields), one canonical text per choice, in the fingerprint of multi-field
 * datasets only: a dataset of one field ("images") fingerprints as before. */
START_TEST(field_options)
{
    static const char *const names[] = {"jpg", "caption", "depth", "meta"};
    static const unsigned char kind[] = {BFS_FIELD_IMAGE, BFS_FIELD_TEXT, BFS_FIELD_IMAGE,
                                         BFS_FIELD_BYTES};
    static const char *const one[] = {"images"};
    static const unsigned char one_kind[] = {BFS_FIELD_IMAGE};
    bfs_pipeline_opts o;
    uint64_t pick;
    char c[BFS_CANONICAL_MAX];

    /* a classic dataset: the options stay out of the text and the fingerprint */
    uint64_t base = fp_of("", 1);
    ck_assert_int_eq(kind_of("fields=images", 0, &o), 0);
    ck_assert_int_eq(bfs_pipeline_check_fields(&o, one, one_kind, 1, &pick, err, sizeof err), 0);
    ck_assert_uint_eq(pick, 1);
    ck_assert_int_eq(o.fielded, 0);
    ck_assert_uint_eq(bfs_pipeline_fingerprint(&o, 1), base);
    ck_assert_int_gt(bfs_pipeline_canonical(&o, c, sizeof c), 0);
    ck_assert_ptr_null(strstr(c, "fields"));
    ck_assert_int_eq(kind_of("fields=caption", 0, &o), 0);
    ck_assert_int_eq(bfs_pipeline_check_fields(&o, one, one_kind, 1, &pick, err, sizeof err),
                     -EINVAL);
    ck_assert_msg(strstr(err, "no field \"caption\"; its fields are: images"), "%s", err);
    ck_assert_int_eq(kind_of("text_len=10", 0, &o), 0);
    ck_assert_int_eq(bfs_pipeline_check_fields(&o, one, one_kind, 1, &pick, err, sizeof err),
                     -EINVAL);
    ck_assert_msg(strstr(err, "text_len=10: none of the fields served is text"), "%s", err);

    /* a multi-field dataset: default all, in the dataset's order */
    ck_assert_int_eq(kind_of("", 0, &o), 0);
    ck_assert_int_eq(bfs_pipeline_check_fields(&o, names, kind, 4, &pick, err, sizeof err), 0);
    ck_assert_uint_eq(pick, 15);
    ck_assert_int_gt(bfs_pipeline_canonical(&o, c, sizeof c), 0);
    ck_assert_msg(strstr(c, "fields = jpg,caption,depth,meta\ntext_len = max\n"), "%s", c);
    uint64_t all = bfs_pipeline_fingerprint(&o, 1);
    ck_assert_uint_ne(all, base);
    /* the same choice spelled otherwise: one text, one fingerprint */
    ck_assert_int_eq(kind_of("fields=meta,jpg,caption,depth,jpg", 0, &o), 0);
    ck_assert_int_eq(bfs_pipeline_check_fields(&o, names, kind, 4, &pick, err, sizeof err), 0);
    ck_assert_uint_eq(bfs_pipeline_fingerprint(&o, 1), all);
    /* another choice, text_len: other fingerprints */
    ck_assert_int_eq(kind_of("fields=caption,jpg", 0, &o), 0);
    ck_assert_int_eq(bfs_pipeline_check_fields(&o, names, kind, 4, &pick, err, sizeof err), 0);
    ck_assert_uint_eq(pick, 3);
    ck_assert_str_eq(o.fields, "jpg,caption");
    uint64_t two = bfs_pipeline_fingerprint(&o, 1);
    ck_assert_uint_ne(two, all);
    ck_assert_int_eq(kind_of("fields=caption,jpg,text_len=77", 0, &o), 0);
    ck_assert_int_eq(bfs_pipeline_check_fields(&o, names, kind, 4, &pick, err, sizeof err), 0);
    ck_assert_uint_ne(bfs_pipeline_fingerprint(&o, 1), two);
    ck_assert_int_gt(bfs_pipeline_canonical(&o, c, sizeof c), 0);
    /* the canonical text is a spec that reproduces itself */
    bfs_pipeline_opts r = fresh();
    ck_assert_msg(bfs_pipeline_parse_spec(&r, c, "canonical", err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(bfs_pipeline_finish(&r, err, sizeof err), 0);
    ck_assert_int_eq(bfs_pipeline_check_kind(&r, 0, err, sizeof err), 0);
    ck_assert_int_eq(bfs_pipeline_check_fields(&r, names, kind, 4, &pick, err, sizeof err), 0);
    ck_assert_uint_eq(bfs_pipeline_fingerprint(&r, 1), bfs_pipeline_fingerprint(&o, 1));
    /* refusals */
    ck_assert_int_eq(kind_of("fields=caption,nope", 0, &o), 0);
    ck_assert_int_eq(bfs_pipeline_check_fields(&o, names, kind, 4, &pick, err, sizeof err),
                     -EINVAL);
    ck_assert_msg(strstr(err, "no field \"nope\"; its fields are: jpg, caption, depth, meta"), "%s",
                  err);
    ck_assert_int_eq(kind_of("fields=caption,meta", 0, &o), 0);
    ck_assert_int_eq(bfs_pipeline_check_fields(&o, names, kind, 4, &pick, err, sizeof err),
                     -EINVAL);
    ck_assert_msg(strstr(err, "at least one image field"), "%s", err);
    ck_assert_int_eq(kind_of("fields=jpg,text_len=5", 0, &o), 0);
    ck_assert_int_eq(bfs_pipeline_check_fields(&o, names, kind, 4, &pick, err, sizeof err),
                     -EINVAL);
    ck_assert_int_eq(kind_of("token_len=77", 0, &o), 0);
    ck_assert_int_eq(bfs_pipeline_check_fields(&o, names, kind, 4, &pick, err, sizeof err),
                     -EINVAL);
    ck_assert_msg(strstr(err, "token_len=77: none of the fields served is tokens"), "%s", err);
    ck_assert_int_eq(kind_of("min_box_area=9", 0, &o), 0);
    ck_assert_int_eq(bfs_pipeline_check_fields(&o, names, kind, 4, &pick, err, sizeof err),
                     -EINVAL);
    ck_assert_msg(strstr(err, "min_box_area=9: none of the fields served is boxes"), "%s", err);
    /* token_len and min_box_area are part of the fingerprint where they apply */
    static const unsigned char kind2[] = {BFS_FIELD_IMAGE, BFS_FIELD_TOKENS, BFS_FIELD_BOXES,
                                          BFS_FIELD_BYTES};
    ck_assert_int_eq(kind_of("", 0, &o), 0);
    ck_assert_int_eq(bfs_pipeline_check_fields(&o, names, kind2, 4, &pick, err, sizeof err), 0);
    uint64_t plain = bfs_pipeline_fingerprint(&o, 1);
    ck_assert_int_eq(kind_of("token_len=77", 0, &o), 0);
    ck_assert_int_eq(bfs_pipeline_check_fields(&o, names, kind2, 4, &pick, err, sizeof err), 0);
    ck_assert_uint_ne(bfs_pipeline_fingerprint(&o, 1), plain);
    ck_assert_int_eq(kind_of("min_box_area=9", 0, &o), 0);
    ck_assert_int_eq(bfs_pipeline_check_fields(&o, names, kind2, 4, &pick, err, sizeof err), 0);
    ck_assert_uint_ne(bfs_pipeline_fingerprint(&o, 1), plain);
    bad("fields", "a,9b", "field names");
    bad("fields", "a,,b", "field names");
    bad("fields", "", "field names");
    bad("text_len", "0", "max or an integer in 1..1048576");
    bad("text_len", "1048577", "max or an integer");
    ck_assert_int_eq(kind_of("text_len=8", 1, &o), -EINVAL);
    ck_assert_msg(strstr(err, "text_len= is an option of datasets with several fields"), "%s", err);
}
END_TEST

START_TEST(token_options)
{
    bfs_pipeline_opts o;
    char canon[2048], img[2048];
    /* image datasets: the token options are refused, and left out of the canonical text,
     * so image fingerprints are what they were before token datasets existed */
    ck_assert_int_eq(kind_of("seed=3", 0, &o), 0);
    ck_assert_int_gt(bfs_pipeline_canonical(&o, img, sizeof img), 0);
    ck_assert_ptr_null(strstr(img, "pack ="));
    ck_assert_ptr_nonnull(strstr(img, "size = 224"));
    ck_assert_int_eq(kind_of("seq_len=512", 0, &o), -EINVAL);
    ck_assert_msg(strstr(err, "seq_len= is an option of token datasets"), "%s", err);
    /* token datasets: image options refused, token options in the canonical text */
    ck_assert_int_eq(kind_of("size=64", 1, &o), -EINVAL);
    ck_assert_msg(strstr(err, "size= is an image option"), "%s", err);
    ck_assert_int_eq(kind_of("dtype=f16", 1, &o), -EINVAL);
    ck_assert_int_eq(kind_of("seed=3", 1, &o), 0);
    ck_assert_int_gt(bfs_pipeline_canonical(&o, canon, sizeof canon), 0);
    ck_assert_ptr_nonnull(strstr(canon, "pack = concat\nseq_len = 1024\nbuckets = none\n"));
    ck_assert_ptr_null(strstr(canon, "size ="));
    ck_assert_ptr_null(strstr(canon, "dtype ="));
    /* options that belong to another pack= */
    ck_assert_int_eq(kind_of("buckets=8:16", 1, &o), -EINVAL);
    ck_assert_msg(strstr(err, "buckets= applies to pack=bucket only, not pack=concat"), "%s", err);
    ck_assert_int_eq(kind_of("pack=pad,positions=1", 1, &o), -EINVAL);
    ck_assert_int_eq(kind_of("pad_id=7", 1, &o), -EINVAL);
    ck_assert_msg(strstr(err, "pad_id= applies to pack=pad|bucket only"), "%s", err);
    ck_assert_int_eq(kind_of("pack=bucket", 1, &o), -EINVAL);
    ck_assert_msg(strstr(err, "pack=bucket needs buckets="), "%s", err);
    ck_assert_int_eq(kind_of("pack=bucket,buckets=8,seq_len=8", 1, &o), -EINVAL);
    /* shuffle=rows: pack=concat only */
    ck_assert_int_eq(kind_of("shuffle=rows", 1, &o), 0);
    ck_assert_int_eq(kind_of("shuffle=rows", 0, &o), -EINVAL);
    ck_assert_msg(strstr(err, "shuffle=rows permutes the rows cut from token documents "
                              "(pack=concat), and this dataset holds images; use shuffle=full, "
                              "pages or none"),
                  "%s", err);
    ck_assert_int_eq(kind_of("shuffle=rows,pack=pad", 1, &o), -EINVAL);
    ck_assert_msg(strstr(err, "pack=pad serves one document per row"), "%s", err);
    ck_assert_int_eq(kind_of("shuffle=rows,pack=bucket,buckets=8", 1, &o), -EINVAL);
    ck_assert_msg(strstr(err, "pack=bucket serves one document per row"), "%s", err);
    /* a spec file made from MNT/pipeline lists every token option, the other modes' at
     * their defaults: accepted, with the same fingerprint */
    const char *specs[] = {"seq_len=64,positions=1", "seq_len=64,shuffle=rows",
                           "pack=pad,pad_id=3,seq_len=32",
                           "pack=bucket,buckets=16:64,batch_tokens=512"};
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) {
        ck_assert_int_eq(kind_of(specs[i], 1, &o), 0);
        uint64_t fp = bfs_pipeline_fingerprint(&o, 7);
        char text[2048];
        ck_assert_int_gt(bfs_pipeline_canonical(&o, text, sizeof text), 0);
        bfs_pipeline_opts s = fresh();
        ck_assert_msg(bfs_pipeline_parse_spec(&s, text, "p.spec", err, sizeof err) == 0, "%s", err);
        ck_assert_msg(bfs_pipeline_finish(&s, err, sizeof err) == 0, "%s", err);
        ck_assert_msg(bfs_pipeline_check_kind(&s, 1, err, sizeof err) == 0, "%s: %s", specs[i],
                      err);
        ck_assert_uint_eq(bfs_pipeline_fingerprint(&s, 7), fp);
    }
    ck_assert_int_eq(kind_of("pack=bucket,buckets=8:16:32,batch_tokens=64,pad_id=2", 1, &o), 0);
    ck_assert_uint_eq(o.nbuckets, 3);
    ck_assert_uint_eq(o.buckets[2], 32);
    /* bucket bounds */
    bad("buckets", "16:8", "strictly ascending");
    bad("buckets", "8::16", "ascending integers");
    bad("buckets", "0:8", "ascending integers");
    bad("buckets", "8:1048577", "ascending integers");
    {
        bfs_pipeline_opts m = fresh();
        ck_assert_int_eq(bfs_pipeline_set(&m, "buckets",
                                          "1:2:3:4:5:6:7:8:9:10:11:12:13:14:15:16:17:18:19:20:21:"
                                          "22:23:24:25:26:27:28:29:30:31:32:33",
                                          err, sizeof err),
                         -EINVAL);
        ck_assert_msg(strstr(err, "more than 32 bounds"), "%s", err);
        ck_assert_int_eq(bfs_pipeline_set(&m, "buckets",
                                          "1:2:3:4:5:6:7:8:9:10:11:12:13:14:15:16:17:18:19:20:21:"
                                          "22:23:24:25:26:27:28:29:30:31:32",
                                          err, sizeof err),
                         0);
        ck_assert_uint_eq(m.nbuckets, 32);
        ck_assert_int_eq(bfs_pipeline_finish(&m, err, sizeof err), 0); /* round trip */
    }
    bad("seq_len", "0", "1..1048576");
    /* every token option changes the fingerprint of a token dataset, each differently */
    const char *diff[] = {"pack=pad",
                          "pack=bucket,buckets=64",
                          "pack=bucket,buckets=64:128",
                          "pack=bucket,buckets=64,batch_tokens=4096",
                          "pack=pad,pad_id=1",
                          "seq_len=2048",
                          "positions=1",
                          "shuffle=rows",
                          "seed=1"};
    size_t nd = sizeof diff / sizeof *diff;
    uint64_t fps[sizeof diff / sizeof *diff];
    ck_assert_int_eq(kind_of("", 1, &o), 0);
    uint64_t base = bfs_pipeline_fingerprint(&o, 1);
    for (size_t i = 0; i < nd; i++) {
        ck_assert_int_eq(kind_of(diff[i], 1, &o), 0);
        fps[i] = bfs_pipeline_fingerprint(&o, 1);
        ck_assert_msg(fps[i] != base, "%s did not change the fingerprint", diff[i]);
        for (size_t j = 0; j < i; j++)
            ck_assert_msg(fps[i] != fps[j], "%s and %s collide", diff[i], diff[j]);
    }
    covered(diff, nd, 1);
}
END_TEST

/* ---- spec files -------------------------------------------------------------------------- */

START_TEST(spec_files)
{
    const char *spec = "\xEF\xBB\xBF# training pipeline\n"
                       "\n"
                       "seed = 42\n"
                       "   batch=128   # per GPU\n"
                       "\tdtype\t=\tf32\t\n"
                       "normalize = 0.5,0.5,0.5/0.25,0.25,0.25 # custom\n"
                       "cache_dir = /var/cache/b#1  \r\n"
                       "size = 160x128\r\n"
                       "   # indented comment\n"
                       "#batch = 1\n"
                       "batch = 64\n"
                       "shard = 1/4"; /* no final newline */
    bfs_pipeline_opts o = fresh();
    ck_assert_msg(bfs_pipeline_parse_spec(&o, spec, "train.spec", err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(o.seed, 42);
    ck_assert_uint_eq(o.batch, 64); /* last one wins */
    ck_assert_int_eq(o.dtype, BFS_OUT_F32);
    ck_assert(o.mean[0] == 0.5f && o.std[2] == 0.25f);
    ck_assert_str_eq(o.cache_dir, "/var/cache/b#1");
    ck_assert(o.out_h == 160 && o.out_w == 128);
    ck_assert(o.shard_index == 1 && o.shard_count == 4);
    ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), 0);

    o = fresh();
    ck_assert_int_eq(bfs_pipeline_parse_spec(&o, "", "e.spec", err, sizeof err), 0);
    ck_assert_int_eq(bfs_pipeline_parse_spec(&o, "\n\n  \n# x\n", "e.spec", err, sizeof err), 0);
    ck_assert_int_eq(bfs_pipeline_parse_spec(&o, NULL, "e.spec", err, sizeof err), 0);

    /* bad lines, with their numbers */
    ck_assert_int_eq(bfs_pipeline_parse_spec(&o, "seed = 1\n# c\nbatch 32\nepochs = 5\n", "my.spec",
                                             err, sizeof err),
                     -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "my.spec:3: "));
    ck_assert_ptr_nonnull(strstr(err, "'batch 32'"));
    ck_assert_ptr_nonnull(strstr(err, "key = value"));
    ck_assert_uint_eq(o.seed, 1); /* lines before the error applied */
    ck_assert_uint_eq(o.epochs, 100);

    ck_assert_int_eq(bfs_pipeline_parse_spec(&o, "\n\n\n\nbatch = 0\n", "my.spec", err, sizeof err),
                     -EINVAL);
    ck_assert_str_eq(err, "my.spec:5: batch=0: must be an integer in 1..65536");

    ck_assert_int_eq(
        bfs_pipeline_parse_spec(&o, "seed=1\nbatchsize = 3\n", "my.spec", err, sizeof err),
        -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "my.spec:2: unknown option 'batchsize'"));

    ck_assert_int_eq(bfs_pipeline_parse_spec(&o, "batch =\n", NULL, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "spec:1: batch=: must be an integer in 1..65536");

    ck_assert_int_eq(bfs_pipeline_parse_spec(&o, " = 3\n", "s", err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "s:1: expected 'key = value', got '= 3'"));
    ck_assert_int_eq(bfs_pipeline_parse_spec(&o, "bat ch = 3\n", "s", err, sizeof err), -ENOENT);
    ck_assert_int_eq(bfs_pipeline_parse_spec(&o, "batch = 32#c\n", "s", err, sizeof err),
                     -EINVAL); /* '#' starts a comment only after a space */
    ck_assert_ptr_nonnull(strstr(err, "s:1: batch=32#c"));
    ck_assert_int_eq(bfs_pipeline_parse_spec(&o, "seed = 1, batch = 2\n", "s", err, sizeof err),
                     -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "seed=1, batch = 2"));
    ck_assert_int_eq(bfs_pipeline_parse_spec(&o, "x\x01y\n", "s", err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "'x\\x01y'"));

    /* MNT/pipeline's identity lines: source ignored, fingerprint kept for the engine */
    bfs_pipeline_defaults(&o);
    ck_assert_msg(bfs_pipeline_parse_spec(&o, "source = /x/y.bfs\nfingerprint = 0123456789abcdef\n",
                                          "p", err, sizeof err) == 0,
                  "%s", err);
    ck_assert_int_eq(o.want_fingerprint_set, 1);
    ck_assert_uint_eq(o.want_fingerprint, 0x0123456789abcdefULL);
    ck_assert(o.given[0] == 0 && o.given[1] == 0);
    ck_assert_int_eq(bfs_pipeline_parse_spec(&o, "fingerprint = 0123\n", "p", err, sizeof err),
                     -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "p:1: fingerprint=0123: must be 16 hex digits"));
    ck_assert_int_eq(
        bfs_pipeline_parse_spec(&o, "fingerprint = 0123456789abcdeg\n", "p", err, sizeof err),
        -EINVAL);
}
END_TEST

/* ---- --help ------------------------------------------------------------------------------ */

START_TEST(help_text)
{
    const char *h = bfs_pipeline_help();
    ck_assert_ptr_nonnull(h);
    ck_assert_ptr_eq(h, bfs_pipeline_help());
    ck_assert_ptr_nonnull(strstr(h, "option"));
    ck_assert_ptr_nonnull(strstr(h, "default"));
    ck_assert_ptr_nonnull(strstr(h, "meaning"));
    for (size_t i = 0; i < N_DESIGN; i++) {
        char key[64];
        snprintf(key, sizeof key, "  %s=", design[i].name);
        ck_assert_msg(strstr(h, key), "help lacks %s", design[i].name);
    }
    /* each row carries its default in the default column */
    const char *defaults[][2] = {{"seed=N", "0"},
                                 {"batch=N", "256"},
                                 {"epochs=N", "100"},
                                 {"shuffle=", "full"},
                                 {"drop_last=", "1"},
                                 {"shard=I/N", "0/1"},
                                 {"size=", "224"},
                                 {"augment=", "train"},
                                 {"scale=A:B", "0.08:1"},
                                 {"ratio=A:B", "3/4:4/3"},
                                 {"flip=P", "0.5"},
                                 {"dtype=", "u8"},
                                 {"layout=", "nhwc"},
                                 {"bad_sample=", "substitute"},
                                 {"threads=", "auto"},
                                 {"prefetch=", "auto"},
                                 {"cache_mb=", "auto"},
                                 {"cache_dir=", "none"},
                                 {"cache_dir_mb=N", "4096"},
                                 {"sample_cache_mb=N", "0"},
                                 {"cpu_budget=N", "online CPUs"},
                                 {"ram_mb=N", "half of free RAM"},
                                 {"huge_pages=", "auto"},
                                 {"gpu_pool_mb=N", "0"},
                                 {"remote=", "none"},
                                 {"remote_ttl=S", "600"},
                                 {"remote_wait_ms=N", "10000"},
                                 {"remote_fallback=", "local"},
                                 {"remote_claim_ms=N", "30000"},

                                 {"group=", "none"}};
    for (size_t i = 0; i < sizeof defaults / sizeof *defaults; i++) {
        const char *row = strstr(h, defaults[i][0]);
        ck_assert_msg(row, "no row %s", defaults[i][0]);
        const char *sp = strstr(row, "  ");
        while (sp && *sp == ' ')
            sp++;
        ck_assert_msg(sp && strncmp(sp, defaults[i][1], strlen(defaults[i][1])) == 0,
                      "row %s: default is not %s", defaults[i][0], defaults[i][1]);
    }
    /* aligned: every row's default starts in the same column as the "default" heading */
    const char *head = strstr(h, "  option");
    ck_assert_ptr_nonnull(head);
    size_t dcol = (size_t)(strstr(head, "default") - head);
    const char *row = strstr(h, "  seed=N");
    ck_assert(row[dcol] == '0' && row[dcol - 1] == ' ');
    row = strstr(h, "  ram_mb=N");
    ck_assert(strncmp(row + dcol, "half of free RAM", 16) == 0);
    /* no line wider than 100 columns; knobs are said to never change bytes */
    for (const char *l = h; *l;) {
        size_t len = strcspn(l, "\n");
        ck_assert_msg(len <= 100, "help line of %zu columns: %.*s", len, (int)len, l);
        l += len + (l[len] == '\n');
    }
    ck_assert_ptr_nonnull(strstr(h, "never change a byte"));
    ck_assert_ptr_nonnull(strstr(h, "Unknown options are errors"));
}
END_TEST

static Suite *pipeline_suite(void)
{
    Suite *s = suite_create("pipeline");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, remote_options);
    tcase_add_test(tc, table_matches_design);
    tcase_add_test(tc, defaults_match_design);
    tcase_add_test(tc, integers);
    tcase_add_test(tc, enums);
    tcase_add_test(tc, shard_and_size);
    tcase_add_test(tc, reals);
    tcase_add_test(tc, recipe_options);
    tcase_add_test(tc, size_schedules);
    tcase_add_test(tc, normalize_values);
    tcase_add_test(tc, cache_dir);
    tcase_add_test(tc, group_names);
    tcase_add_test(tc, missing_and_unknown);
    tcase_add_test(tc, parse_o_text);
    tcase_add_test(tc, normalize_with_dtype);
    tcase_add_test(tc, finish_validates_struct);
    tcase_add_test(tc, canonical_text);
    tcase_add_test(tc, canonical_ignores_locale);
    tcase_add_test(tc, fingerprints);
    tcase_add_test(tc, token_options);
    tcase_add_test(tc, field_options);
    tcase_add_test(tc, pad_kind);
    tcase_add_test(tc, spec_files);
    tcase_add_test(tc, help_text);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(pipeline_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
