/*
 * check_engine.c — the batch pipeline: determinism (thread counts, access orders,
 * repeats), epochs and seeds that differ, shards, crop-aware decoding equal to a full
 * decode, output types and layouts, bad samples (substitute and fail), batch sizes
 * known up front.
 */
#include "engine/augment.h"
#include "engine/dataset/bfs.h"
#include "engine/decode.h"
#include "engine/engine.h"
#include "base/clock.h"
#include "base/endian.h"
#include "base/err.h"
#include "engine/exec.h"
#include "engine/exec_readers_internal.h"
#include "engine/dataset/jpeg.h"
#include "engine/dataset/pack.h"
#include "engine/pipeline.h"
#include "engine/safetensors.h"
#include "engine/tokens.h"
#include "tests/testutil.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

static tu_dataset ds;
static const char *tmp, *folder, *packed; /* ds's directory, ImageFolder and its .bfs */

static void setup(void)
{
    char err[512];
    ck_assert_msg(tu_dataset_make(&ds, "check_engine", 3, 12, 48, 160, 17, 2, err, sizeof err) == 0,
                  "%s", err);
    tmp = ds.dir, folder = ds.folder, packed = ds.packed;
}

static void teardown(void)
{
    tu_dataset_free(&ds);
}

static bfs_engine *engine(const char *src, const char *opts)
{
    bfs_pipeline_opts o;
    bfs_pipeline_defaults(&o);
    char err[1024];
    ck_assert_msg(bfs_pipeline_parse(&o, opts, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(bfs_pipeline_finish(&o, err, sizeof err) == 0, "%s", err);
    bfs_engine *e;
    ck_assert_msg(bfs_engine_create(src, &o, &e, err, sizeof err) == 0, "%s", err);
    return e;
}

/* A new executor of e with `threads` workers and a cache of cache_bytes. */
static bfs_exec *exec_new(bfs_engine *e, int threads, uint64_t cache_bytes)
{
    bfs_exec *x;
    ck_assert_int_eq(bfs_exec_create(e, threads, cache_bytes, &x), 0);
    return x;
}

/* Compute batch k of epoch with a fresh executor of `threads` workers; malloc'ed copy. */
static uint8_t *batch(bfs_engine *e, int threads, uint64_t epoch, uint64_t k, uint64_t *size)
{
    bfs_exec *x = exec_new(e, threads, 0);
    bfs_batch *b;
    char err[512];
    ck_assert_msg(bfs_exec_get(x, epoch, k, &b, err, sizeof err) == 0, "%s", err);
    *size = bfs_batch_size(b);
    ck_assert_uint_eq(*size, bfs_engine_batch_bytes(e, epoch, k));
    uint8_t *copy = malloc(*size);
    memcpy(copy, bfs_batch_data(b), *size);
    bfs_batch_release(b);
    bfs_exec_destroy(x);
    return copy;
}

static void check_same(const uint8_t *a, uint64_t an, const uint8_t *b, uint64_t bn)
{
    ck_assert_uint_eq(an, bn);
    ck_assert_int_eq(memcmp(a, b, an), 0);
}

START_TEST(deterministic_across_threads_orders_and_sources)
{
    const char *opts = "batch=8,size=32,seed=5";
    bfs_engine *e = engine(packed, opts);
    uint64_t n1, n2, n8, nf;
    uint8_t *b1 = batch(e, 1, 3, 2, &n1);
    uint8_t *b2 = batch(e, 2, 3, 2, &n2);
    uint8_t *b8 = batch(e, 8, 3, 2, &n8);
    check_same(b1, n1, b2, n2);
    check_same(b1, n1, b8, n8);
    /* another access order: every batch of the epoch first, then batch 2 again */
    bfs_exec *x = exec_new(e, 3, 1 << 20);
    for (uint64_t k = bfs_engine_batches(e); k-- > 0;)
        ck_assert_int_eq(bfs_exec_prefetch(x, 3, k), 0);
    bfs_batch *b;
    ck_assert_int_eq(bfs_exec_get(x, 3, 2, &b, NULL, 0), 0);
    check_same(b1, n1, bfs_batch_data(b), bfs_batch_size(b));
    bfs_batch_release(b);
    bfs_exec_destroy(x);
    /* the same dataset read as an ImageFolder serves the same pixels, labels and indices
     * (only the fingerprint in the metadata differs) */
    bfs_engine *ef = engine(folder, opts);
    uint8_t *bf = batch(ef, 2, 3, 2, &nf);
    ck_assert_uint_eq(nf, n1);
    bfs_st_file sf, sp;
    ck_assert_int_eq(bfs_st_parse(bf, nf, &sf), 0);
    ck_assert_int_eq(bfs_st_parse(b1, n1, &sp), 0);
    const bfs_st_tensor *ti = bfs_st_find(&sp, "images");
    ck_assert_ptr_nonnull(ti);
    ck_assert_int_eq(memcmp(b1 + ti->offset, bf + ti->offset, n1 - ti->offset), 0);
    free(bf);
    bfs_engine_destroy(ef);
    free(b1);
    free(b2);
    free(b8);
    bfs_engine_destroy(e);
}
END_TEST

START_TEST(epochs_and_seeds_differ)
{
    bfs_engine *e = engine(packed, "batch=8,size=24,seed=1");
    bfs_engine *f = engine(packed, "batch=8,size=24,seed=2");
    uint64_t a, b, c;
    uint8_t *e0 = batch(e, 2, 0, 0, &a), *e1 = batch(e, 2, 1, 0, &b), *f0 = batch(f, 2, 0, 0, &c);
    ck_assert_uint_eq(a, b);
    ck_assert_int_ne(memcmp(e0 + 4096, e1 + 4096, a - 4096), 0);
    ck_assert_int_ne(memcmp(e0 + 4096, f0 + 4096, a - 4096), 0);
    ck_assert_uint_ne(bfs_engine_fingerprint(e), bfs_engine_fingerprint(f));
    free(e0);
    free(e1);
    free(f0);
    bfs_engine_destroy(e);
    bfs_engine_destroy(f);
    /* knobs do not change bytes or fingerprints */
    bfs_engine *g = engine(packed, "batch=8,size=24,seed=1,threads=1,prefetch=7");
    bfs_engine *h = engine(packed, "batch=8,size=24,seed=1");
    ck_assert_uint_eq(bfs_engine_fingerprint(g), bfs_engine_fingerprint(h));
    bfs_engine_destroy(g);
    bfs_engine_destroy(h);
}
END_TEST

START_TEST(shards_disjoint_and_header)
{
    /* 36 samples, 3 shards of 12, batches of 4: every index once per epoch */
    int seen[36] = {0};
    for (int s = 0; s < 3; s++) {
        char opts[128];
        snprintf(opts, sizeof opts, "batch=4,size=16,shard=%d/3", s);
        bfs_engine *e = engine(packed, opts);
        ck_assert_uint_eq(bfs_engine_batches(e), 3);
        for (uint64_t k = 0; k < 3; k++) {
            uint64_t n;
            uint8_t *b = batch(e, 2, 4, k, &n);
            bfs_st_file f;
            ck_assert_int_eq(bfs_st_parse(b, n, &f), 0);
            const bfs_st_tensor *im = bfs_st_find(&f, "images"), *lb = bfs_st_find(&f, "labels"),
                                *ix = bfs_st_find(&f, "indices");
            ck_assert_ptr_nonnull(im);
            ck_assert_ptr_nonnull(lb);
            ck_assert_ptr_nonnull(ix);
            /* batchfs/2: labels, indices (8-byte aligned), then the images at 4096 */
            ck_assert_uint_eq(im->offset, 4096);
            ck_assert_uint_eq(lb->offset, 4096 - 4 * 16);
            ck_assert_uint_eq(ix->offset, 4096 - 4 * 8);
            ck_assert_int_eq(im->ndim, 4);
            ck_assert_uint_eq(im->shape[0], 4);
            ck_assert_uint_eq(im->shape[1], 16);
            ck_assert_uint_eq(im->shape[3], 3);
            ck_assert_str_eq(bfs_st_meta_get(&f, "format"), "batchfs/2");
            ck_assert_str_eq(bfs_st_meta_get(&f, "epoch"), "4");
            for (int j = 0; j < 4; j++) {
                int64_t idx, label;
                memcpy(&idx, b + ix->offset + 8 * j, 8);
                memcpy(&label, b + lb->offset + 8 * j, 8);
                ck_assert(idx >= 0 && idx < 36);
                ck_assert_int_eq(label, idx / 12); /* 12 per class, classes in order */
                seen[idx]++;
            }
            free(b);
        }
        bfs_engine_destroy(e);
    }
    for (int i = 0; i < 36; i++)
        ck_assert_int_eq(seen[i], 1);
}
END_TEST

/* pad=1: 36 samples over 5 shards of ceil(36/5) = 8 (batches of 4): a `padded` U8 [B]
 * tensor marks the 5*8 - 36 = 4 repeats, and the others are every sample once; pad=0
 * batches have no such tensor. */
START_TEST(pad_marks_repeats)
{
    int seen[36] = {0}, padded = 0;
    for (int s = 0; s < 5; s++) {
        char opts[128];
        snprintf(opts, sizeof opts, "batch=4,size=16,drop_last=0,pad=1,shard=%d/5", s);
        bfs_engine *e = engine(packed, opts);
        ck_assert_uint_eq(bfs_engine_batches(e), 2);
        for (uint64_t k = 0; k < 2; k++) {
            uint64_t n;
            uint8_t *b = batch(e, 2, 3, k, &n);
            bfs_st_file f;
            ck_assert_int_eq(bfs_st_parse(b, n, &f), 0);
            const bfs_st_tensor *ix = bfs_st_find(&f, "indices"), *pd = bfs_st_find(&f, "padded");
            ck_assert_ptr_nonnull(pd);
            ck_assert_int_eq(pd->dtype, BFS_DT_U8);
            ck_assert_int_eq(pd->ndim, 1);
            ck_assert_uint_eq(pd->shape[0], 4);
            for (int j = 0; j < 4; j++) {
                int64_t idx;
                memcpy(&idx, b + ix->offset + 8 * j, 8);
                ck_assert(idx >= 0 && idx < 36);
                ck_assert(b[pd->offset + j] <= 1);
                if (b[pd->offset + j])
                    padded++;
                else
                    seen[idx]++;
            }
            free(b);
        }
        bfs_engine_destroy(e);
    }
    ck_assert_int_eq(padded, 4);
    for (int i = 0; i < 36; i++)
        ck_assert_int_eq(seen[i], 1);
    bfs_engine *e = engine(packed, "batch=4,size=16,shard=0/5,pad=0");
    uint64_t n;
    uint8_t *b = batch(e, 1, 3, 0, &n);
    bfs_st_file f;
    ck_assert_int_eq(bfs_st_parse(b, n, &f), 0);
    ck_assert_ptr_null(bfs_st_find(&f, "padded"));
    ck_assert_uint_eq(f.n_tensors, 3);
    free(b);
    bfs_engine_destroy(e);
}
END_TEST

/* Crop-aware decoding gives exactly the pixels of a full decode inside the region. */
START_TEST(crop_decode_equals_full_decode)
{
    int samps[] = {TJSAMP_420, TJSAMP_422, TJSAMP_444, TJSAMP_440};
    bfs_decoder *d;
    ck_assert_int_eq(bfs_decoder_create(&d), 0);
    uint64_t rs = 99;
    for (int si = 0; si < 4; si++) {
        uint8_t *jpg, *full;
        size_t len;
        int w, h;
        tu_jpeg_opts jo = {
            .width = 203, .height = 141, .quality = 90, .subsamp = samps[si], .seed = (uint64_t)si};
        ck_assert_int_eq(tu_make_jpeg(&jo, &jpg, &len), 0);
        ck_assert_int_eq(bfs_jpeg_decode_rgb(jpg, len, &full, &w, &h), 0);
        bfs_image_info info;
        ck_assert_int_eq(bfs_decoder_probe(jpg, len, &info), 0);
        for (int t = 0; t < 60; t++) {
            int x0 = (int)(tu_rand(&rs) % 200), y0 = (int)(tu_rand(&rs) % 138);
            int x1 = x0 + 1 + (int)(tu_rand(&rs) % (unsigned)(203 - x0));
            int y1 = y0 + 1 + (int)(tu_rand(&rs) % (unsigned)(141 - y0));
            bfs_pixels px;
            ck_assert_int_eq(bfs_decoder_decode(d, jpg, len, &info, 1, x0, y0, x1, y1, &px), 0);
            ck_assert(px.x0 <= x0 && px.y0 <= y0 && px.x0 + px.w >= x1 && px.y0 + px.h >= y1);
            for (int y = y0; y < y1; y++)
                ck_assert_msg(memcmp(px.rgb + (size_t)(y - px.y0) * px.stride + 3 * (x0 - px.x0),
                                     full + ((size_t)y * w + x0) * 3, 3 * (size_t)(x1 - x0)) == 0,
                              "samp %d region %d,%d-%d,%d row %d differs", samps[si], x0, y0, x1,
                              y1, y);
        }
        bfs_decode_stats st;
        bfs_decoder_get_stats(d, &st);
        ck_assert_uint_gt(st.cropped, 0);
        free(full);
        free(jpg);
    }
    bfs_decoder_destroy(d);
}
END_TEST

START_TEST(scaled_decode_close_to_full)
{
    /* an eval pipeline on large images uses 1/2..1/8 IDCT; compare with the exact path on
     * the same geometry: within a few levels on average */
    char big[4200];
    snprintf(big, sizeof big, "%s/big", tmp);
    ck_assert_int_eq(tu_make_imagefolder(big, 1, 3, 900, 1000, 3), 0);
    bfs_engine *e = engine(big, "batch=3,size=64,augment=eval,shuffle=none");
    uint64_t n;
    uint8_t *b = batch(e, 2, 0, 0, &n);
    bfs_engine_destroy(e);
    /* reference: full decode + Pillow-exact resize of the same window */
    for (int i = 0; i < 3; i++) {
        char p[4300];
        snprintf(p, sizeof p, "%s/class_000/img_%05d.jpg", big, i);
        uint8_t *jpg, *rgb;
        size_t len;
        int w, h;
        ck_assert_int_eq(tu_read_file(p, &jpg, &len), 0);
        ck_assert_int_eq(bfs_jpeg_decode_rgb(jpg, len, &rgb, &w, &h), 0);
        bfs_pipeline_opts o;
        bfs_pipeline_defaults(&o);
        ck_assert_int_eq(bfs_pipeline_parse(&o, "size=64,augment=eval", NULL, 0), 0);
        ck_assert_int_eq(bfs_pipeline_finish(&o, NULL, 0), 0);
        bfs_geometry g;
        ck_assert_int_eq(bfs_augment_geometry(&o, 0, (uint64_t)i, w, h, &g), 0);
        bfs_out_format f;
        bfs_out_format_init(&f, &o);
        uint8_t *ref = calloc(64 * 64 * 3, 1);
        bfs_out_slot slot = {&f, ref, 0, g.spec.win_w, g.spec.win_h};
        resize_src src = {rgb, (size_t)w * 3, 0, 0, w, h};
        resize_scratch rs = {0};
        ck_assert_int_eq(resize_rgb8(&g.spec, &src, bfs_out_store_row, &slot, &rs), 0);
        double mae = 0;
        for (int k = 0; k < 64 * 64 * 3; k++)
            mae += fabs((double)ref[k] - b[4096 + i * 64 * 64 * 3 + k]);
        mae /= 64 * 64 * 3;
        ck_assert_msg(mae < 4.0, "image %d: scaled-IDCT MAE %.2f levels", i, mae);
        resize_scratch_free(&rs);
        free(ref);
        free(rgb);
        free(jpg);
    }
    free(b);
}
END_TEST

START_TEST(dtypes_and_layouts)
{
    bfs_engine *u = engine(packed, "batch=4,size=20,seed=3");
    bfs_engine *uc = engine(packed, "batch=4,size=20,seed=3,layout=nchw");
    bfs_engine *f32 = engine(packed, "batch=4,size=20,seed=3,dtype=f32");
    bfs_engine *f16 = engine(packed, "batch=4,size=20,seed=3,dtype=f16,layout=nchw");
    bfs_engine *b16 = engine(packed, "batch=4,size=20,seed=3,dtype=bf16");
    uint64_t nu, nuc, n32, n16, nb;
    uint8_t *bu = batch(u, 2, 1, 1, &nu), *buc = batch(uc, 2, 1, 1, &nuc);
    uint8_t *b32 = batch(f32, 2, 1, 1, &n32), *b16h = batch(f16, 2, 1, 1, &n16);
    uint8_t *bb = batch(b16, 2, 1, 1, &nb);
    const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
    const int HW = 20 * 20;
    for (int s = 0; s < 4; s++)
        for (int p = 0; p < HW; p++)
            for (int c = 0; c < 3; c++) {
                uint8_t v = bu[4096 + (size_t)(s * HW + p) * 3 + c];
                ck_assert_uint_eq(buc[4096 + (size_t)(s * 3 + c) * HW + p], v);
                float want = (float)((v / 255.0 - mean[c]) / sd[c]);
                float got;
                memcpy(&got, b32 + 4096 + ((size_t)(s * HW + p) * 3 + c) * 4, 4);
                ck_assert_float_eq_tol(got, want, 1e-6);
                uint16_t h16;
                memcpy(&h16, b16h + 4096 + ((size_t)(s * 3 + c) * HW + p) * 2, 2);
                ck_assert_uint_eq(h16, bfs_f32_to_f16(want));
                memcpy(&h16, bb + 4096 + ((size_t)(s * HW + p) * 3 + c) * 2, 2);
                ck_assert_uint_eq(h16, bfs_f32_to_bf16(want));
            }
    /* conversions against known bit patterns */
    ck_assert_uint_eq(bfs_f32_to_f16(1.0f), 0x3c00);
    ck_assert_uint_eq(bfs_f32_to_f16(-2.0f), 0xc000);
    ck_assert_uint_eq(bfs_f32_to_f16(65504.0f), 0x7bff);
    ck_assert_uint_eq(bfs_f32_to_f16(65520.0f), 0x7c00);
    ck_assert_uint_eq(bfs_f32_to_f16(0.1f), 0x2e66);
    ck_assert_uint_eq(bfs_f32_to_f16(5.9604645e-8f), 0x0001);
    ck_assert_uint_eq(bfs_f32_to_f16(1.0009765625f), 0x3c01);
    ck_assert_uint_eq(bfs_f32_to_f16(1.00048828125f), 0x3c00); /* tie: to even */
    ck_assert_uint_eq(bfs_f32_to_bf16(1.0f), 0x3f80);
    ck_assert_uint_eq(bfs_f32_to_bf16(-2.5f), 0xc020);
    ck_assert_uint_eq(bfs_f32_to_bf16(1.00390625f), 0x3f80); /* tie: to even */
    ck_assert_uint_eq(bfs_f32_to_bf16(1.01171875f), 0x3f82); /* tie: up to even */
    free(bu);
    free(buc);
    free(b32);
    free(b16h);
    free(bb);
    bfs_engine_destroy(u);
    bfs_engine_destroy(uc);
    bfs_engine_destroy(f32);
    bfs_engine_destroy(f16);
    bfs_engine_destroy(b16);
}
END_TEST

START_TEST(flip_mirrors)
{
    bfs_engine *a = engine(packed, "batch=4,size=16,seed=9,flip=0");
    bfs_engine *b = engine(packed, "batch=4,size=16,seed=9,flip=1");
    uint64_t na, nb;
    uint8_t *ba = batch(a, 1, 0, 0, &na), *bb = batch(b, 1, 0, 0, &nb);
    for (int s = 0; s < 4; s++)
        for (int y = 0; y < 16; y++)
            for (int x = 0; x < 16; x++)
                ck_assert_int_eq(memcmp(ba + 4096 + ((size_t)(s * 16 + y) * 16 + x) * 3,
                                        bb + 4096 + ((size_t)(s * 16 + y) * 16 + 15 - x) * 3, 3),
                                 0);
    free(ba);
    free(bb);
    bfs_engine_destroy(a);
    bfs_engine_destroy(b);
}
END_TEST

/* A flipped u8 NHWC row is the row mirrored, at every width (the vector path's 21-pixel
 * steps and the scalar rest), and nothing outside the row is written or read. */
START_TEST(store_row_flips_every_width)
{
    bfs_pipeline_opts o;
    bfs_pipeline_defaults(&o);
    ck_assert_int_eq(bfs_pipeline_finish(&o, NULL, 0), 0);
    bfs_out_format f;
    bfs_out_format_init(&f, &o);
    ck_assert_int_eq(f.dtype, BFS_OUT_U8);
    for (int w = 1; w <= 200; w++) {
        /* the source row alone in its buffer, the output between guard bytes */
        uint8_t *rgb = malloc(3 * (size_t)w), *out = malloc(3 * (size_t)w + 128);
        for (int k = 0; k < 3 * w; k++)
            rgb[k] = (uint8_t)(k * 37 + w);
        memset(out, 0xa5, 3 * (size_t)w + 128);
        bfs_out_slot slot = {&f, out + 64, 1, w, 2};
        bfs_out_store_row(&slot, 0, rgb, w);
        for (int x = 0; x < w; x++)
            ck_assert_msg(memcmp(out + 64 + 3 * x, rgb + 3 * (w - 1 - x), 3) == 0,
                          "width %d pixel %d", w, x);
        for (int k = 0; k < 64; k++)
            ck_assert(out[k] == 0xa5 && out[64 + 3 * w + k] == 0xa5);
        free(rgb);
        free(out);
    }
}
END_TEST

static void corrupt_one(const char *dir, int cls, int i, size_t keep)
{
    char p[4300];
    snprintf(p, sizeof p, "%s/class_%03d/img_%05d.jpg", dir, cls, i);
    uint8_t *d;
    size_t n;
    ck_assert_int_eq(tu_read_file(p, &d, &n), 0);
    ck_assert_uint_lt(keep, n);
    if (keep > 600) /* garble entropy data instead of truncating */
        for (size_t k = 600; k < keep; k += 7)
            d[k] = (uint8_t)(d[k] * 31 + 7);
    ck_assert_int_eq(tu_write_file(p, d, keep > 600 ? n : keep), 0);
    free(d);
}

START_TEST(bad_samples)
{
    /* folder source: sample 5 truncated right after its header, sample 14 garbled */
    corrupt_one(folder, 0, 5, 400);
    corrupt_one(folder, 1, 2, 3000);
    bfs_engine *e = engine(folder, "batch=36,size=16,shuffle=none");
    uint64_t n;
    uint8_t *b = batch(e, 2, 0, 0, &n);
    bfs_st_file f;
    ck_assert_int_eq(bfs_st_parse(b, n, &f), 0);
    const bfs_st_tensor *ix = bfs_st_find(&f, "indices");
    int64_t v5, v14, v0;
    memcpy(&v5, b + ix->offset + 8 * 5, 8);
    memcpy(&v14, b + ix->offset + 8 * 14, 8);
    memcpy(&v0, b + ix->offset, 8);
    ck_assert_int_eq(v0, 0);
    ck_assert_int_ne(v5, 5); /* substituted: provenance shows the replacement */
    ck_assert_int_ne(v14, 14);
    /* deterministic: the same substitutes again */
    uint64_t n2;
    uint8_t *b2 = batch(e, 1, 0, 0, &n2);
    check_same(b, n, b2, n2);
    free(b);
    free(b2);
    bfs_engine_destroy(e);

    /* fail mode: the batch fails with a message naming the file */
    e = engine(folder, "batch=12,size=16,shuffle=none,bad_sample=fail");
    bfs_exec *x = exec_new(e, 2, 0);
    bfs_batch *bt;
    char err[512] = "";
    int rc = bfs_exec_get(x, 0, 0, &bt, err, sizeof err);
    ck_assert_int_eq(rc, BFS_E_JPEG_HEADER); /* cut inside its header */
    ck_assert_ptr_nonnull(strstr(err, "img_00005.jpg"));
    ck_assert_int_eq(bfs_exec_get(x, 0, 2, &bt, err, sizeof err), 0); /* other batches fine */
    bfs_batch_release(bt);
    ck_assert_int_eq(bfs_exec_get(x, 0, 3, &bt, err, sizeof err), -ERANGE);
    bfs_exec_stats st;
    bfs_exec_get_stats(x, &st);
    ck_assert_uint_eq(st.failed, 1);
    ck_assert_uint_ge(st.stages.bad_samples, 1);
    bfs_exec_destroy(x);
    bfs_engine_destroy(e);
}
END_TEST

/* The index in slot j of batch b (n bytes). */
static int64_t slot_index(const uint8_t *b, uint64_t n, int j)
{
    bfs_st_file f;
    ck_assert_int_eq(bfs_st_parse(b, n, &f), 0);
    const bfs_st_tensor *ix = bfs_st_find(&f, "indices");
    int64_t v;
    memcpy(&v, b + ix->offset + 8 * (size_t)j, 8);
    return v;
}

START_TEST(bad_in_every_epoch)
{
    /* sample 1 of the folder: 256 x 256, damaged in its bottom-right corner (near the end
     * of its scan data), so a crop in its upper part decodes and the whole file does not */
    uint8_t *jpg = NULL;
    size_t len;
    tu_jpeg_opts jo = {
        .width = 256, .height = 256, .quality = 90, .subsamp = TJSAMP_420, .seed = 5};
    /* changed bytes may decode into other valid codes, unnoticed by any decoder: damage
     * more until libjpeg-turbo notices */
    for (size_t nb = 8; nb <= 1024; nb *= 2) {
        free(jpg);
        ck_assert_int_eq(tu_make_jpeg(&jo, &jpg, &len), 0);
        ck_assert_int_eq(tu_damage_scan(jpg, len, 0.97, nb), 0);
        if (bfs_jpeg_check(jpg, len, NULL, 0) == BFS_E_JPEG_DATA)
            break;
    }
    char p[4300];
    snprintf(p, sizeof p, "%s/class_000/img_00001.jpg", folder);
    ck_assert_int_eq(tu_write_file(p, jpg, len), 0);
    bfs_decoder *d;
    bfs_image_info info;
    bfs_pixels px;
    ck_assert_int_eq(bfs_decoder_create(&d), 0);
    ck_assert_int_eq(bfs_decoder_probe(jpg, len, &info), 0);
    ck_assert_int_eq(bfs_decoder_decode(d, jpg, len, &info, 1, 0, 0, 256, 128, &px), 0);
    ck_assert_int_eq(bfs_decoder_decode(d, jpg, len, &info, 1, 0, 224, 256, 256, &px),
                     BFS_E_JPEG_DATA);
    /* a checked decode of the top half reads on: it fails, as the whole-file check does */
    ck_assert_int_eq(bfs_decoder_decode_checked(d, jpg, len, &info, 1, 0, 0, 256, 128, &px),
                     BFS_E_JPEG_DATA);
    ck_assert_int_eq(bfs_jpeg_check(jpg, len, NULL, 0), BFS_E_JPEG_DATA);
    bfs_decoder_destroy(d);
    free(jpg);

    /* an epoch whose crop of sample 1 stays in the top half, one whose crop reaches the
     * bottom rows */
    const char *opts = "batch=36,size=16,shuffle=none,scale=0.05:0.2";
    bfs_pipeline_opts o;
    bfs_pipeline_defaults(&o);
    char err[512];
    ck_assert_int_eq(bfs_pipeline_parse(&o, opts, err, sizeof err), 0);
    ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), 0);
    int top = -1, bottom = -1;
    for (int ep = 0; ep < 256 && (top < 0 || bottom < 0); ep++) {
        bfs_geometry g;
        ck_assert_int_eq(bfs_augment_geometry(&o, (uint64_t)ep, 1, 256, 256, &g), 0);
        double y1 = g.origin_y + g.spec.box[3];
        if (top < 0 && y1 < 112) /* well above the damage, margins included */
            top = ep;
        if (bottom < 0 && y1 > 248)
            bottom = ep;
    }
    ck_assert_msg(top >= 0 && bottom >= 0, "no epoch with such crops: %d %d", top, bottom);

    /* substituted in both, whichever comes first in a mount */
    for (int first = 0; first < 2; first++) {
        bfs_engine *e = engine(folder, opts);
        for (int i = 0; i < 2; i++) {
            uint64_t ep = (uint64_t)((i == first) ? top : bottom), n;
            bfs_exec *x = exec_new(e, 2, 0);
            bfs_batch *b;
            ck_assert_int_eq(bfs_exec_get(x, ep, 0, &b, err, sizeof err), 0);
            n = bfs_batch_size(b);
            ck_assert_msg(slot_index(bfs_batch_data(b), n, 1) != 1,
                          "epoch %llu (crop in the %s): sample 1 served", (unsigned long long)ep,
                          ep == (uint64_t)top ? "top half" : "bottom rows");
            ck_assert_int_eq(slot_index(bfs_batch_data(b), n, 0), 0);
            bfs_exec_stats st;
            bfs_exec_get_stats(x, &st);
            ck_assert_uint_eq(st.stages.bad_samples, 1);
            bfs_batch_release(b);
            bfs_exec_destroy(x);
        }
        bfs_engine_destroy(e);
    }
}
END_TEST

/* tmp/NAME.bfs of docs token documents of per u16 ids each, the last of each the
 * separator 50256, id i of the file (i * mult) % 50000 (its path into tok) */
static void pack_token_docs(const char *name, int docs, int per, int mult, char *tok, size_t len)
{
    char bin[4200], err[1024];
    snprintf(bin, sizeof bin, "%s/%s.bin", tmp, name);
    snprintf(tok, len, "%s/%s.bfs", tmp, name);
    uint16_t *ids = malloc((size_t)docs * per * sizeof *ids);
    ck_assert_ptr_nonnull(ids);
    for (int i = 0; i < docs * per; i++)
        ids[i] = i % per == per - 1 ? 50256 : (uint16_t)(i * mult % 50000);
    ck_assert_int_eq(tu_write_file(bin, ids, (size_t)docs * per * sizeof *ids), 0);
    free(ids);
    bfs_pack_opts po = {.tokens = 2, .doc_sep = 50256};
    bfs_pack_report rep;
    ck_assert_msg(bfs_pack(bin, tok, &po, &rep, NULL, err, sizeof err) == 0, "%s", err);
    bfs_pack_report_free(&rep);
}

/* Token rows read their documents through a mapping: a dataset truncated in place between
 * two rows of a batch faults inside the row's guard, and the row fails with BFS_E_CHANGED
 * (the pread path's error for it) instead of killing the process; so do later rows. */
START_TEST(token_rows_truncated_between_rows)
{
    char tok[4200], err[1024];
    pack_token_docs("tokens", 400, 300, 7, tok, sizeof tok);

    bfs_pipeline_opts o;
    bfs_pipeline_defaults(&o);
    ck_assert_int_eq(bfs_pipeline_parse(&o, "seq_len=512,batch=8", err, sizeof err), 0);
    ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), 0);
    bfs_source *src;
    ck_assert_msg(bfs_source_open(tok, &src, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(bfs_pipeline_check_kind(&o, 1, err, sizeof err), 0);
    bfs_tokens *t;
    ck_assert_msg(bfs_tokens_create(src, &o, 0, &t, err, sizeof err) == 0, "%s", err);
    uint64_t idx[8];
    uint8_t *dst = calloc(1, bfs_tokens_max_batch_bytes(t));
    ck_assert_ptr_nonnull(dst);
    uint64_t k = bfs_tokens_batches(t) - 1;
    ck_assert_int_eq(bfs_tokens_batch_begin(t, 0, k, dst, idx), 8);
    bfs_tokens_scratch sc = {0};
    bfs_tokens_bad bad;
    ck_assert_int_eq(bfs_tokens_row(t, &sc, 0, k, 0, idx[0], dst, 1, &bad), 0);
    ck_assert_int_eq(bad.rc, 0);
    ck_assert_int_eq(truncate(tok, 4096), 0); /* the documents' pages past 4 KiB are gone */
    for (uint32_t j = 1; j < 8; j++)
        ck_assert_int_eq(bfs_tokens_row(t, &sc, 0, k, j, idx[j], dst, 1, &bad), BFS_E_CHANGED);
    /* the next batch's first row checks the file itself */
    ck_assert_int_eq(bfs_tokens_row(t, &sc, 0, 0, 0, 0, dst, 1, &bad), BFS_E_CHANGED);
    bfs_tokens_scratch_free(&sc);
    free(dst);
    bfs_tokens_destroy(t);
    bfs_source_close(src);
}
END_TEST

/* Token documents are verified once per mount: bytes overwritten in place later are
 * caught by the file's identity after each claim of rows (bfs_engine_claim_end), and the
 * executor fails the batch with BFS_E_CHANGED rather than serve them. */
/* An engine (seq_len=64, batch=4) and a 2-thread executor over token file tok. */
static void token_exec(const char *tok, bfs_engine **e, bfs_exec **x)
{
    char err[1024];
    bfs_pipeline_opts o;
    bfs_pipeline_defaults(&o);
    ck_assert_int_eq(bfs_pipeline_parse(&o, "seq_len=64,batch=4", err, sizeof err), 0);
    ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), 0);
    ck_assert_msg(bfs_engine_create(tok, &o, e, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(bfs_exec_create(*e, 2, 0, x), 0);
}

START_TEST(token_claims_check_the_file)
{
    char tok[4200], err[1024];
    pack_token_docs("claim", 200, 100, 5, tok, sizeof tok);
    bfs_engine *e;
    bfs_exec *x;
    token_exec(tok, &e, &x);
    bfs_batch *b;
    ck_assert_msg(bfs_exec_get(x, 0, 0, &b, err, sizeof err) == 0, "%s", err);
    bfs_batch_release(b);
    ck_assert_int_eq(bfs_engine_claim_end(e, 0, 0, err, sizeof err), 0);
    /* one byte of the payloads changed in place (its mtime with it) */
    struct stat st;
    ck_assert_int_eq(stat(tok, &st), 0);
    int fd = open(tok, O_RDWR);
    ck_assert_int_ge(fd, 0);
    uint8_t c;
    ck_assert_int_eq(pread(fd, &c, 1, 200), 1);
    c ^= 1;
    ck_assert_int_eq(pwrite(fd, &c, 1, 200), 1);
    struct timespec later[2] = {st.st_atim, {st.st_mtim.tv_sec + 1, st.st_mtim.tv_nsec}};
    ck_assert_int_eq(futimens(fd, later), 0);
    close(fd);
    err[0] = 0;
    ck_assert_int_eq(bfs_engine_claim_end(e, 0, 1, err, sizeof err), BFS_E_CHANGED);
    ck_assert_ptr_nonnull(strstr(err, "claim.bfs"));
    ck_assert_int_eq(bfs_exec_get(x, 0, 1, &b, err, sizeof err), BFS_E_CHANGED);
    bfs_exec_destroy(x);
    bfs_engine_destroy(e);
}
END_TEST

/* A token .bfs changed in place with its size and mtime put back (rsync --inplace,
 * cp --preserve=timestamps, touch -r): its documents were verified once, so only the
 * file's identity can tell, and only its ctime differs. */
START_TEST(token_file_changed_keeping_times)
{
    char tok[4200], err[1024];
    pack_token_docs("kept", 200, 100, 5, tok, sizeof tok);
    bfs_engine *e;
    bfs_exec *x;
    token_exec(tok, &e, &x);
    bfs_batch *b;
    /* every document read (and so verified) once */
    for (uint64_t k = 0; k < bfs_engine_batches(e); k++) {
        ck_assert_msg(bfs_exec_get(x, 0, k, &b, err, sizeof err) == 0, "%s", err);
        bfs_batch_release(b);
    }
    ck_assert_int_eq(tu_flip_keeping_times(tok, 200), 0);
    err[0] = 0;
    ck_assert_int_eq(bfs_exec_get(x, 1, 0, &b, err, sizeof err), BFS_E_CHANGED);
    ck_assert_ptr_nonnull(strstr(err, "kept.bfs"));
    bfs_exec_destroy(x);
    bfs_engine_destroy(e);
}
END_TEST

/* ---- epoch tables built in pieces by several threads ---------------------------------- */

enum { TT_DOCS = 150000 }; /* over two pieces of 65,536 positions: three of them */

typedef struct tt_arg {
    bfs_tokens *t;
    uint64_t epoch, k0, k1; /* batches [k0, k1) */
    uint8_t *out;           /* concat: the batches' token tensors, one after another */
    int rc;                 /* (threads assert nothing: the main thread checks rc) */
} tt_arg;

static void *tt_rows(void *p)
{
    tt_arg *a = p;
    bfs_tokens_scratch sc = {0};
    uint64_t idx[8];
    uint8_t *dst = malloc(bfs_tokens_max_batch_bytes(a->t));
    if (!dst)
        a->rc = -ENOMEM;
    for (uint64_t k = a->k0; k < a->k1 && !a->rc; k++) {
        int n = bfs_tokens_batch_begin(a->t, a->epoch, k, dst, idx);
        uint64_t bytes = bfs_tokens_batch_bytes(a->t, a->epoch, k), tb = (uint64_t)n * 64 * 4;
        bfs_tokens_bad bad;
        for (int j = 0; j < n && !a->rc; j++)
            a->rc = bfs_tokens_row(a->t, &sc, a->epoch, k, (uint32_t)j, idx[j], dst, 0, &bad);
        if (n < 0)
            a->rc = n;
        else if (a->out) /* concat: its tokens tensor ends the file */
            memcpy(a->out + (k - a->k0) * 8 * 64 * 4, dst + bytes - tb, tb);
    }
    bfs_tokens_scratch_free(&sc);
    free(dst);
    return NULL;
}

/* An epoch's table is built in pieces by every thread that needs it: rows computed by
 * four threads at once at the start of fresh epochs are the epoch's shuffled stream of
 * documents (from the per-position order) cut into rows, and pack=bucket's batches are
 * each bucket's documents in epoch order. */
START_TEST(token_tables_built_in_pieces)
{
    char bin[4200], tok[4200], err[1024];
    snprintf(bin, sizeof bin, "%s/pieces.bin", tmp);
    snprintf(tok, sizeof tok, "%s/pieces.bfs", tmp);
    /* document d: d % 5 + 1 ids (d * 3 + i) % 50000, then the separator */
    uint64_t total = 0, *start = malloc((TT_DOCS + 1) * sizeof *start);
    ck_assert_ptr_nonnull(start);
    for (uint64_t d = 0; d < TT_DOCS; d++)
        start[d] = total, total += d % 5 + 2;
    start[TT_DOCS] = total;
    uint16_t *ids = malloc(total * sizeof *ids);
    ck_assert_ptr_nonnull(ids);
    for (uint64_t d = 0; d < TT_DOCS; d++) {
        for (uint64_t i = 0; i < d % 5 + 1; i++)
            ids[start[d] + i] = (uint16_t)((d * 3 + i) % 50000);
        ids[start[d + 1] - 1] = 50256;
    }
    ck_assert_int_eq(tu_write_file(bin, ids, total * sizeof *ids), 0);
    bfs_pack_opts po = {.tokens = 2, .doc_sep = 50256};
    bfs_pack_report rep;
    ck_assert_msg(bfs_pack(bin, tok, &po, &rep, NULL, err, sizeof err) == 0, "%s", err);
    bfs_pack_report_free(&rep);
    bfs_source *src;
    ck_assert_msg(bfs_source_open(tok, &src, err, sizeof err) == 0, "%s", err);

    for (int pack = 0; pack < 2; pack++) {
        bfs_pipeline_opts o;
        bfs_pipeline_defaults(&o);
        const char *text = pack ? "pack=bucket,buckets=3:5:6,batch=8,drop_last=0"
                                : "seq_len=64,batch=8,drop_last=1";
        ck_assert_msg(bfs_pipeline_parse(&o, text, err, sizeof err) == 0, "%s", err);
        ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), 0);
        bfs_tokens *t;
        ck_assert_msg(bfs_tokens_create(src, &o, 0, &t, err, sizeof err) == 0, "%s", err);
        uint64_t nb = bfs_tokens_batches(t);
        /* the reference: the epoch's documents, one position at a time */
        uint64_t *order = malloc(TT_DOCS * sizeof *order);
        ck_assert_ptr_nonnull(order);
        for (uint64_t epoch = 3; epoch < 9; epoch += 5) { /* two epochs, one table each */
            for (uint64_t p = 0; p < TT_DOCS; p++)
                ck_assert_int_eq(bfs_tokens_doc_order(t, epoch, p, &order[p]), 0);
            if (!pack) {
                uint8_t *out = malloc(nb * 8 * 64 * 4);
                ck_assert_ptr_nonnull(out);
                tt_arg a[4];
                pthread_t th[4];
                for (int i = 0; i < 4; i++) {
                    a[i] = (tt_arg){t, epoch, nb * i / 4, nb * (i + 1) / 4, NULL, 0};
                    a[i].out = out + a[i].k0 * 8 * 64 * 4;
                    ck_assert_int_eq(pthread_create(&th[i], NULL, tt_rows, &a[i]), 0);
                }
                for (int i = 0; i < 4; i++) {
                    pthread_join(th[i], NULL);
                    ck_assert_int_eq(a[i].rc, 0);
                }
                uint64_t at = 0; /* token of the stream */
                for (uint64_t p = 0; p < TT_DOCS && at < nb * 8 * 64; p++) {
                    uint64_t d = order[p];
                    for (uint64_t i = start[d]; i < start[d + 1] && at < nb * 8 * 64; i++, at++)
                        ck_assert_msg(bfs_ld32(out + 4 * at) == ids[i], "epoch %llu token %llu",
                                      (unsigned long long)epoch, (unsigned long long)at);
                }
                ck_assert_uint_eq(at, nb * 8 * 64);
                free(out);
            } else {
                /* batches in chunk order are bucket 0's documents in epoch order, then
                 * bucket 1's, then bucket 2's; the tables built by four threads at once */
                uint64_t *chunk_batch = malloc(nb * sizeof *chunk_batch);
                ck_assert_ptr_nonnull(chunk_batch);
                tt_arg a[4];
                pthread_t th[4];
                for (int i = 0; i < 4; i++) { /* bucket tables are built by batch_begin */
                    a[i] = (tt_arg){t, epoch, nb * i / 4, nb * i / 4 + 1, NULL, 0};
                    ck_assert_int_eq(pthread_create(&th[i], NULL, tt_rows, &a[i]), 0);
                }
                for (int i = 0; i < 4; i++) {
                    pthread_join(th[i], NULL);
                    ck_assert_int_eq(a[i].rc, 0);
                }
                for (uint64_t k = 0; k < nb; k++) {
                    uint64_t c;
                    ck_assert_int_eq(bfs_tokens_chunk(t, epoch, k, &c), 0);
                    chunk_batch[c] = k;
                }
                uint64_t p[3] = {0, 0, 0}, idx[8];
                static const uint64_t bound[3] = {3, 5, 6};
                int b = 0;
                for (uint64_t c = 0; c < nb; c++) {
                    int n = bfs_tokens_batch_indices(t, epoch, chunk_batch[c], idx);
                    ck_assert_int_gt(n, 0);
                    for (int j = 0; j < n; j++) {
                        uint64_t len = idx[j] % 5 + 2; /* its ids and the separator */
                        while (b < 2 && len > bound[b])
                            b++; /* buckets come in order, each whole */
                        while (p[b] < TT_DOCS && (order[p[b]] % 5 + 2 > bound[b] ||
                                                  (b && order[p[b]] % 5 + 2 <= bound[b - 1])))
                            p[b]++;
                        ck_assert_uint_lt(p[b], TT_DOCS);
                        ck_assert_uint_eq(idx[j], order[p[b]]);
                        p[b]++;
                    }
                }
                free(chunk_batch);
            }
        }
        free(order);
        bfs_tokens_destroy(t);
    }
    bfs_source_close(src);
    /* the executor's claims of rows follow each batch's width: ~64K tokens a claim */
    bfs_pipeline_opts o;
    bfs_pipeline_defaults(&o);
    ck_assert_int_eq(bfs_pipeline_parse(&o, "pack=bucket,buckets=3:5:6,batch=8", err, sizeof err),
                     0);
    ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), 0);
    bfs_engine *e;
    ck_assert_msg(bfs_engine_create(tok, &o, &e, err, sizeof err) == 0, "%s", err);
    int seen[7] = {0};
    for (uint64_t k = 0; k < bfs_engine_batches(e); k++) {
        uint32_t c = bfs_engine_claim_slots(e, 2, k);
        ck_assert_msg(c == 65536 / 3 || c == 65536 / 5 || c == 65536 / 6, "claim %u", c);
        seen[65536 / c]++;
    }
    ck_assert(seen[3] && seen[5] && seen[6]);
    bfs_engine_destroy(e);
    /* with a token budget per batch the buckets' batches have different row counts: the
     * autotuner's rows per batch is their mean, not batch 0's */
    bfs_pipeline_defaults(&o);
    ck_assert_int_eq(
        bfs_pipeline_parse(&o, "pack=bucket,buckets=3:5:6,batch_tokens=48", err, sizeof err), 0);
    ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), 0);
    ck_assert_msg(bfs_engine_create(tok, &o, &e, err, sizeof err) == 0, "%s", err);
    uint64_t rows = 0, nb = bfs_engine_batches(e);
    uint32_t lo = UINT32_MAX, hi = 0;
    for (uint64_t k = 0; k < nb; k++) {
        uint32_t r = bfs_engine_batch_len(e, 0, k);
        rows += r, lo = r < lo ? r : lo, hi = r > hi ? r : hi;
    }
    ck_assert_uint_eq(lo, 8);  /* 48 / 6 */
    ck_assert_uint_eq(hi, 16); /* 48 / 3 */
    ck_assert_uint_eq(bfs_engine_mean_batch_len(e), (uint32_t)((double)rows / nb + 0.5));
    bfs_engine_destroy(e);
    free(ids);
    free(start);
}
END_TEST

START_TEST(sizes_and_ranges)
{
    bfs_engine *e = engine(packed, "batch=10,size=8x12,drop_last=0,epochs=2");
    ck_assert_uint_eq(bfs_engine_batches(e), 4);
    ck_assert_uint_eq(bfs_engine_batch_len(e, 0, 3), 6);
    /* labels and indices lie in the page before the images (4096) */
    ck_assert_uint_eq(bfs_engine_batch_bytes(e, 0, 0), 4096 + 10 * 8 * 12 * 3);
    ck_assert_uint_eq(bfs_engine_batch_bytes(e, 0, 3), 4096 + 6 * 8 * 12 * 3);
    uint64_t n;
    uint8_t *b = batch(e, 2, 1, 3, &n);
    bfs_st_file f;
    ck_assert_int_eq(bfs_st_parse(b, n, &f), 0);
    const bfs_st_tensor *im = bfs_st_find(&f, "images");
    ck_assert_uint_eq(im->shape[0], 6);
    ck_assert_uint_eq(im->shape[1], 8);
    ck_assert_uint_eq(im->shape[2], 12);
    free(b);
    bfs_exec *x = exec_new(e, 1, 0);
    bfs_batch *bt;
    ck_assert_int_eq(bfs_exec_get(x, 2, 0, &bt, NULL, 0), -ERANGE); /* epoch beyond */
    ck_assert_int_eq(bfs_exec_get(x, 0, 4, &bt, NULL, 0), -ERANGE);
    ck_assert_int_eq(bfs_exec_prefetch(x, 0, 99), -ERANGE);
    bfs_exec_shutdown(x);
    ck_assert_int_eq(bfs_exec_get(x, 0, 0, &bt, NULL, 0), -ESHUTDOWN);
    bfs_exec_destroy(x);
    bfs_engine_destroy(e);
    /* a shard smaller than a batch with drop_last=1 has no batches: a clear error */
    bfs_pipeline_opts o;
    bfs_pipeline_defaults(&o);
    ck_assert_int_eq(bfs_pipeline_parse(&o, "batch=64", NULL, 0), 0);
    ck_assert_int_eq(bfs_pipeline_finish(&o, NULL, 0), 0);
    char err[512];
    ck_assert_int_eq(bfs_engine_create(packed, &o, &e, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "batch"));
}
END_TEST

/* The executor tests' fixture: the dataset, and e4, an engine of 4 images of 32x32 a
 * batch, whose batches are `one` bytes each. */
static bfs_engine *e4;
static uint64_t one;

static void exec_setup(void)
{
    setup();
    e4 = engine(packed, "batch=4,size=32");
    one = bfs_engine_batch_bytes(e4, 0, 0);
}

static void exec_teardown(void)
{
    bfs_engine_destroy(e4);
    teardown();
}

/* get + release batch k of epoch 0 */
static void touch(bfs_exec *x, uint64_t k)
{
    bfs_batch *b;
    char err[512];
    ck_assert_msg(bfs_exec_get(x, 0, k, &b, err, sizeof err) == 0, "%s", err);
    bfs_batch_release(b);
}

/* Stats once evictions reach n: a worker drops its own reference to a batch just after
 * the waiter wakes, and evicts then (bounded wait, then whatever they are). */
static void stats_after(bfs_exec *x, uint64_t n, bfs_exec_stats *st)
{
    for (int i = 0; i < 500; i++) {
        bfs_exec_get_stats(x, st);
        if (st->evictions >= n)
            return;
        usleep(10000);
    }
}

/* Stats once cached_bytes is `bytes` (updated when the worker drops its reference to a
 * finished batch, just after the waiter wakes; bounded wait). */
static void stats_cached(bfs_exec *x, uint64_t bytes, bfs_exec_stats *st)
{
    for (int i = 0; i < 500; i++) {
        bfs_exec_get_stats(x, st);
        if (st->cached_bytes == bytes)
            return;
        usleep(10000);
    }
}

/* The window: with readers known, eviction takes what no reader will read first, then the
 * batch whose next read is farthest away; plain LRU would pick other victims here. */
START_TEST(reader_aware_eviction)
{
    bfs_exec *x = exec_new(e4, 1, 2 * one);
    bfs_exec_set_prefetch(x, 0);
    bfs_exec_follow(x, 7, 0, 0, 1.0, 0, NULL); /* one reader at batch 0, stride 1 */
    touch(x, 2);
    touch(x, 1); /* LRU order now: 2 (oldest), 1 */
    touch(x, 0); /* 3 held > 2: victim 0 (the reader's own, read: passed), not LRU's 2 */
    bfs_exec_stats st;
    stats_after(x, 1, &st);
    ck_assert_uint_eq(st.computed, 3);
    ck_assert_uint_eq(st.evictions, 1);
    ck_assert_uint_eq(st.evicted_passed, 1);
    touch(x, 3); /* held 1,2,3: the reader reads 1 next, 2 then, 3 last: victim 3 */
    stats_after(x, 2, &st);
    ck_assert_uint_eq(st.evicted_ahead, 1);
    touch(x, 1);
    touch(x, 2);
    bfs_exec_get_stats(x, &st);
    ck_assert_uint_eq(st.computed, 4); /* 1 and 2 were kept: hits */
    ck_assert_uint_eq(st.hits, 2);
    /* a second reader behind: its next batch (1) outranks the first reader's far ones */
    bfs_exec_follow(x, 7, 0, 1, 2.0, 0, NULL); /* reader 7 moves to 1: needs 2 next */
    touch(x, 5);                               /* held 1,2,5: 1 passed -> evicted */
    stats_after(x, 3, &st);
    ck_assert_uint_eq(st.evicted_passed, 2);
    touch(x, 2);
    bfs_exec_get_stats(x, &st);
    ck_assert_uint_eq(st.computed, 5); /* 2 still there */
    bfs_exec_destroy(x);
}
END_TEST

/* Batches no reader will read stay cached only up to passed_max, even far under budget;
 * what a reader will still read is not bounded by it. */
START_TEST(passed_batches_bounded)
{
    ck_assert_uint_ge(bfs_engine_batches(e4), 9);
    bfs_exec *x = exec_new(e4, 1, 64 * one);
    bfs_exec_set_prefetch(x, 0);
    bfs_exec_set_passed_max(x, 2 * one, 0);
    for (uint64_t k = 0; k < 5; k++) { /* a reader reads 0..4 */
        bfs_exec_follow(x, 7, 0, k, 1.0 + (double)k, 0, NULL);
        touch(x, k);
    }
    bfs_exec_stats st;
    stats_after(x, 3, &st);
    ck_assert_uint_eq(st.computed, 5);
    ck_assert_uint_eq(st.evicted_passed, 3);
    ck_assert_uint_eq(st.cached_bytes, 2 * one);
    touch(x, 4); /* the two most recently used passed batches were kept */
    touch(x, 3);
    bfs_exec_get_stats(x, &st);
    ck_assert_uint_eq(st.computed, 5);
    /* four batches ahead of the reader (it is at 4, stride 1): all kept */
    for (uint64_t k = 5; k < 9; k++)
        touch(x, k);
    stats_cached(x, 6 * one, &st);
    ck_assert_uint_eq(st.computed, 9);
    ck_assert_uint_eq(st.evicted_ahead, 0);
    ck_assert_uint_eq(st.cached_bytes, 6 * one);
    /* no bound: nothing more is evicted */
    bfs_exec_set_passed_max(x, UINT64_MAX, 0);
    touch(x, 0);
    stats_cached(x, 7 * one, &st);
    ck_assert_uint_eq(st.evictions, 3);
    ck_assert_uint_eq(st.cached_bytes, 7 * one);
    bfs_exec_destroy(x);
}
END_TEST

/* The default passed-batch bound grows on regrets: a batch evicted as passed and asked
 * for again doubles it, so an epoch read twice is soon served from memory. */
START_TEST(passed_bound_grows_on_regrets)
{
    bfs_exec *x = exec_new(e4, 1, 64 * one);
    bfs_exec_set_prefetch(x, 0);
    bfs_exec_set_passed_max(x, 2 * one, 1);
    bfs_exec_stats st;
    bfs_exec_get_stats(x, &st);
    ck_assert_uint_eq(st.passed_budget, 2 * one);
    for (uint64_t k = 0; k < 6; k++) { /* a reader reads 0..5: 0..3 evicted as passed */
        bfs_exec_follow(x, 7, 0, k, 1.0 + (double)k, 0, NULL);
        touch(x, k);
    }
    stats_after(x, 4, &st);
    ck_assert_uint_eq(st.evicted_passed, 4);
    ck_assert_uint_eq(st.passed_regrets, 0);
    touch(x, 1); /* a regret: computed again, the bound doubled */
    bfs_exec_get_stats(x, &st);
    ck_assert_uint_eq(st.computed, 7);
    ck_assert_uint_eq(st.passed_regrets, 1);
    ck_assert_uint_eq(st.passed_budget, 4 * one);
    touch(x, 4); /* still cached: no regret */
    bfs_exec_get_stats(x, &st);
    ck_assert_uint_eq(st.computed, 7);
    touch(x, 2); /* evicted before the bound grew: a regret */
    bfs_exec_get_stats(x, &st);
    ck_assert_uint_eq(st.passed_regrets, 2);
    ck_assert_uint_eq(st.passed_budget, 8 * one);
    /* fixed: no growth */
    bfs_exec_set_passed_max(x, one, 0);
    bfs_exec_get_stats(x, &st);
    ck_assert_uint_eq(st.passed_budget, one);
    touch(x, 3);
    bfs_exec_get_stats(x, &st);
    ck_assert_uint_eq(st.passed_regrets, 3);
    ck_assert_uint_eq(st.passed_budget, one);
    bfs_exec_destroy(x);
}
END_TEST

/* Freed batch buffers are kept, while the budget has room, for the next burst as large as
 * the largest so far: a second prefetch window of the same size allocates nothing. */
START_TEST(buffer_pool_follows_bursts)
{
    bfs_exec *x = exec_new(e4, 2, 64 * one);
    bfs_exec_stats st;
    for (int round = 0; round < 3; round++) {
        bfs_batch *b[5];
        char err[512];
        bfs_exec_set_passed_max(x, UINT64_MAX, 0);
        for (uint64_t k = 0; k < 5; k++) /* five batches at once */
            ck_assert_int_eq(bfs_exec_prefetch(x, (uint64_t)round, k), 0);
        for (uint64_t k = 0; k < 5; k++)
            ck_assert_msg(bfs_exec_get(x, (uint64_t)round, k, &b[k], err, sizeof err) == 0, "%s",
                          err);
        for (int k = 0; k < 5; k++)
            bfs_batch_release(b[k]);
        stats_cached(x, 5 * one, &st);    /* the workers' references are dropped */
        bfs_exec_set_passed_max(x, 0, 0); /* all five evicted (no reader will read them) */
        bfs_exec_get_stats(x, &st);
        ck_assert_uint_eq(st.computed, 5 * (uint64_t)(round + 1));
        ck_assert_uint_eq(st.evictions, 5 * (uint64_t)(round + 1));
        ck_assert_uint_eq(st.buffer_allocs, 5); /* the first round's, reused since */
        ck_assert_int_eq(st.buffers, 5);
    }
    bfs_exec_set_cache_bytes(x, one); /* a smaller budget: the pool gives back all but 2 */
    bfs_exec_get_stats(x, &st);
    ck_assert_int_eq(st.buffers, 2);
    bfs_exec_destroy(x);
}
END_TEST

/* A cache full at its budget (four batches here, as --bench's prefetch window) hands a new
 * batch the buffer of a batch no reader will read, so a long run of prefetched batches
 * reuses the same few buffers instead of allocating fresh ones at every epoch's start
 * (4 buffers for 48 batches; 18-19 before). */
START_TEST(full_cache_reuses_passed_buffers)
{
    bfs_exec *x = exec_new(e4, 1, 4 * one);
    bfs_exec_stats st;
    char err[512];
    uint64_t nb = bfs_engine_batches(e4);
    for (uint64_t i = 0; i < 48; i++) {
        uint64_t ep = i / nb, k = i % nb;
        for (uint64_t p = 1; p <= 3 && (i + p) / nb == ep; p++) /* as --bench: the epoch's */
            ck_assert_int_eq(bfs_exec_prefetch(x, ep, (i + p) % nb), 0);
        bfs_batch *b;
        ck_assert_msg(bfs_exec_get(x, ep, k, &b, err, sizeof err) == 0, "%s", err);
        bfs_batch_release(b);
    }
    bfs_exec_get_stats(x, &st);
    ck_assert_uint_ge(st.computed, 48);
    ck_assert_uint_le(st.buffer_allocs, 6); /* the window (4), plus two */
    ck_assert_uint_ge(st.evicted_passed, 10);
    bfs_exec_destroy(x);
}
END_TEST

/* memfd mode (the mount under passthrough): every finished batch lives in a sealed memory
 * file holding exactly the bytes of the malloc path; nothing can write it again. */
START_TEST(memfd_batches_sealed)
{
    bfs_exec *x = exec_new(e4, 2, 64 * one), *plain = exec_new(e4, 2, 64 * one);
    char err[512];
    bfs_exec_set_memfd(x, 1, 0);
    for (uint64_t k = 0; k < 3; k++) {
        bfs_batch *b, *p;
        ck_assert_msg(bfs_exec_get(x, 0, k, &b, err, sizeof err) == 0, "%s", err);
        ck_assert_msg(bfs_exec_get(plain, 0, k, &p, err, sizeof err) == 0, "%s", err);
        int fd = bfs_batch_fd(b);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(bfs_batch_fd(p), -1);
        ck_assert_mem_eq(bfs_batch_data(b), bfs_batch_data(p), one);
        struct stat st;
        ck_assert_int_eq(fstat(fd, &st), 0);
        ck_assert_int_eq(st.st_size, (off_t)one);
        int seals = fcntl(fd, F_GET_SEALS);
        ck_assert_int_eq(seals & (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW),
                         F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW);
        ck_assert_int_eq(pwrite(fd, "x", 1, 0), -1); /* sealed: no one writes it */
        bfs_batch_release(b);
        bfs_batch_release(p);
    }
    bfs_exec_destroy(x);
    bfs_exec_destroy(plain);
}
END_TEST

/* Batch files (memfds) open in this process now. */
static int batch_files_open(void)
{
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        char target[256];
        ssize_t len = readlinkat(dirfd(d), de->d_name, target, sizeof target - 1);
        if (len > 0) {
            target[len] = 0;
            n += strncmp(target, "/memfd:batchfs-batch", 20) == 0;
        }
    }
    closedir(d);
    return n;
}

/* Evicted batch files are closed (by the executor's reaper thread, soon after), a batch
 * held by a caller is not, and destroy releases the rest before it returns. */
START_TEST(evicted_batch_files_released)
{
    char err[512];
    ck_assert_int_eq(batch_files_open(), 0);
    bfs_exec *x = exec_new(e4, 2, 2 * one); /* room for 2 finished */
    bfs_exec_set_memfd(x, 1, 0);
    bfs_batch *held;
    ck_assert_msg(bfs_exec_get(x, 0, 0, &held, err, sizeof err) == 0, "%s", err);
    uint8_t first[64];
    memcpy(first, bfs_batch_data(held), sizeof first);
    for (uint64_t k = 1; k < 12; k++) {
        bfs_batch *b;
        ck_assert_msg(bfs_exec_get(x, 1, k % bfs_engine_batches(e4), &b, err, sizeof err) == 0,
                      "%s", err);
        bfs_batch_release(b);
    }
    int open_now = 0;
    for (int i = 0; i < 500 && (open_now = batch_files_open()) > 3; i++)
        usleep(10000);
    ck_assert_msg(open_now <= 3, "%d batch files open after evictions (budget: 2, held: 1)",
                  open_now);
    ck_assert_int_ge(fcntl(bfs_batch_fd(held), F_GET_SEALS), 0); /* still open */
    ck_assert_mem_eq(bfs_batch_data(held), first, sizeof first);
    bfs_batch_release(held);
    bfs_exec_destroy(x);
    ck_assert_int_eq(batch_files_open(), 0);
}
END_TEST

/* Batch files are a descriptor each: under a descriptor limit of 64 they are kept to the
 * executor's file budget (the limit less those open and a reserve), evicted as for memory,
 * far under the byte budget; every batch is still right. Without it the files piled up
 * until every open failed (EMFILE). */
START_TEST(batch_files_within_descriptor_budget)
{
    struct rlimit rl;
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    rl.rlim_cur = 64; /* (this test runs in a process of its own) */
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
    char err[512];
    uint64_t nb = bfs_engine_batches(e4);
    bfs_exec *x = exec_new(e4, 2, 1024 * one);
    bfs_exec_set_passed_max(x, UINT64_MAX, 0); /* only the descriptors bound the cache */
    bfs_exec_set_memfd(x, 1, 0);
    bfs_exec_stats st;
    bfs_exec_get_stats(x, &st);
    ck_assert_uint_gt(st.file_budget, 0);
    ck_assert_uint_lt(st.file_budget, 64);
    uint8_t *ref = NULL;
    for (uint64_t i = 0; i < 3 * 64; i++) {
        uint64_t ep = i / nb, k = i % nb;
        bfs_batch *b;
        ck_assert_msg(bfs_exec_get(x, ep, k, &b, err, sizeof err) == 0, "%s", err);
        ck_assert_int_ge(bfs_batch_fd(b), 0);
        if (i == 5) {
            uint64_t size;
            ref = batch(e4, 1, ep, k, &size);
            check_same(ref, size, bfs_batch_data(b), bfs_batch_size(b));
        }
        bfs_batch_release(b);
        bfs_exec_get_stats(x, &st);
        ck_assert_uint_le(st.files, st.file_budget);
    }
    free(ref);
    ck_assert_uint_ge(st.evictions, 3 * 64 - st.file_budget - 2);
    ck_assert_uint_eq(st.files_refused, 0);
    int open_now = 0;
    for (int i = 0; i < 500 && (open_now = batch_files_open()) > (int)st.file_budget; i++)
        usleep(10000); /* (the reaper closes evicted files soon after) */
    ck_assert_int_le(open_now, (int)st.file_budget);
    bfs_exec_destroy(x);
}
END_TEST

static int alive_none(uint64_t key)
{
    (void)key;
    return 0;
}

static int alive_all(uint64_t key)
{
    (void)key;
    return 1;
}

static void count_news(void *arg)
{
    (*(int *)arg)++;
}

/* Readers: stride, own step time, depth, and a shell loop of `cat` (a new pid per batch,
 * each continuing where the dead one stopped) is one reader. */
START_TEST(readers_follow_and_adopt)
{
    bfs_exec *x = exec_new(e4, 1, 64 * one);
    bfs_exec_set_prefetch(x, 2);
    int pokes = 0;
    bfs_exec_on_reader_news(x, count_news, &pokes);
    ck_assert_uint_eq(bfs_exec_readers_news(x), 0);
    uint32_t a = bfs_exec_follow(x, 100, 0, 0, 10.0, 0.5, alive_all);
    ck_assert_uint_eq(bfs_exec_readers_news(x), 1); /* a new reader */
    ck_assert_uint_eq(bfs_exec_follow(x, 100, 0, 2, 11.0, 0.1, alive_all), a);
    ck_assert_uint_eq(bfs_exec_readers_news(x), 2); /* its pace measured */
    ck_assert_int_eq(pokes, 2);                     /* the hook heard both */
    bfs_exec_reader r[BFS_EXEC_MAX_READERS];
    ck_assert_int_eq(bfs_exec_readers(x, 11.5, alive_all, r, BFS_EXEC_MAX_READERS), 1);
    ck_assert_uint_eq(r[0].id, a);
    ck_assert_int_eq(r[0].stride, 2);
    ck_assert_int_eq(r[0].depth, 2);
    ck_assert_msg(fabs(r[0].own_s - 0.5) < 1e-9, "own %f", r[0].own_s); /* 11 - 10 - 0.5 */
    ck_assert_msg(fabs(r[0].idle_s - 0.5) < 1e-9, "idle %f", r[0].idle_s);
    /* a new live key elsewhere is a second reader */
    uint32_t b = bfs_exec_follow(x, 200, 0, 7, 11.6, 0, alive_all);
    ck_assert_uint_ne(b, a);
    /* a new key at reader a's next batch (2 + 2) takes it over when a's key is gone */
    uint64_t news = bfs_exec_readers_news(x);
    ck_assert_uint_eq(bfs_exec_follow(x, 101, 0, 4, 12.0, 0, alive_none), a);
    ck_assert_uint_eq(bfs_exec_readers_news(x), news); /* no news: the same reader */
    ck_assert_int_eq(pokes, (int)news);                /* the hook heard each, no more */
    bfs_exec_on_reader_news(x, NULL, NULL);
    /* ... but not when it is alive, nor off its stride */
    ck_assert_uint_ne(bfs_exec_follow(x, 102, 0, 6, 12.1, 0, alive_all), a);
    bfs_exec_set_reader_depth(x, a, 5);
    int n = bfs_exec_readers(x, 12.2, alive_all, r, BFS_EXEC_MAX_READERS);
    ck_assert_int_eq(n, 3);
    ck_assert_uint_eq(r[0].id, a);
    ck_assert_uint_eq(r[0].key, 101);
    ck_assert_int_eq(r[0].depth, 5);
    ck_assert_uint_eq(r[0].k, 4);
    /* the wait reported after the fact (the mount follows a reader before waiting):
     * reader c asks at 13.0, waits 0.2 s, asks again at 13.5: own step 0.3 s */
    uint32_t c = bfs_exec_follow(x, 400, 1, 0, 13.0, -1, alive_all);
    bfs_exec_reader_waited(x, c, 1, 0, 0.2);
    ck_assert_uint_eq(bfs_exec_follow(x, 400, 1, 1, 13.5, -1, alive_all), c);
    bfs_exec_reader_waited(x, c, 1, 1, 0.1);
    bfs_exec_reader_waited(x, c, 1, 0, 5.0); /* late, for batch 0: ignored */
    n = bfs_exec_readers(x, 13.6, alive_all, r, BFS_EXEC_MAX_READERS);
    int ci = 0;
    while (ci < n && r[ci].id != c)
        ci++;
    ck_assert_int_lt(ci, n);
    ck_assert_msg(fabs(r[ci].own_s - 0.3) < 1e-9, "own %f", r[ci].own_s);
    /* smoothed from the third batch on, as own_s: the second replaces the first */
    ck_assert_msg(fabs(r[ci].wait_s - 0.1) < 1e-9, "wait %f", r[ci].wait_s);
    /* readers idle 2 s with their key gone, or 30 s, are forgotten */
    ck_assert_int_eq(bfs_exec_readers(x, 16.0, alive_none, r, BFS_EXEC_MAX_READERS), 0);
    bfs_exec_follow(x, 300, 0, 0, 20.0, 0, alive_all);
    ck_assert_int_eq(bfs_exec_readers(x, 51.0, alive_all, r, BFS_EXEC_MAX_READERS), 0);
    /* thread count: clamped to the workers started */
    ck_assert_int_eq(bfs_exec_set_threads(x, 8), 1);
    ck_assert_int_eq(bfs_exec_set_threads(x, 0), 1);
    bfs_exec_destroy(x);
}
END_TEST

static uint64_t prefetched(bfs_exec *x)
{
    bfs_exec_stats st;
    bfs_exec_get_stats(x, &st);
    return st.prefetched;
}

/* A walk goes on into the next epoch: a new process at the next epoch's first batch of
 * the walk continues the dead one's reader; once a reader has gone on to a next epoch, at
 * its walk's last batch the next epoch's first ones are prefetched (at the walk's residue
 * for a strided rank), never beyond `epochs`; a reader of one epoch gets nothing beyond. */
START_TEST(walks_continue_into_next_epoch)
{
    bfs_engine *e = engine(packed, "batch=2,size=32,epochs=3");
    uint64_t nb = bfs_engine_batches(e);
    ck_assert_uint_ge(nb, 8);
    bfs_exec *x = exec_new(e, 1, 64 * bfs_engine_batch_bytes(e, 0, 0));
    bfs_exec_set_prefetch(x, 2);
    /* first epoch: its end prefetches nothing of the next (nor its first batch: the walk
     * is not known yet) */
    uint32_t a = bfs_exec_follow(x, 100, 0, nb - 2, 1.0, 0, alive_all);
    ck_assert_uint_eq(prefetched(x), 0);
    ck_assert_uint_eq(bfs_exec_follow(x, 101, 0, nb - 1, 2.0, 0, alive_none), a);
    ck_assert_uint_eq(prefetched(x), 0);
    /* a new process at (1, 0) is the same reader (its stride kept) */
    ck_assert_uint_eq(bfs_exec_follow(x, 102, 1, 0, 3.0, 0, alive_none), a);
    ck_assert_uint_eq(prefetched(x), 2); /* (1, 1), (1, 2) */
    bfs_exec_reader r[BFS_EXEC_MAX_READERS];
    ck_assert_int_eq(bfs_exec_readers(x, 3.1, alive_all, r, BFS_EXEC_MAX_READERS), 1);
    ck_assert_int_eq(r[0].stride, 1);
    ck_assert_uint_eq(r[0].epoch, 1);
    /* it went on once: epoch 1's end prefetches (2, 0) and (2, 1) */
    for (uint64_t k = 1; k < nb - 1; k++)
        bfs_exec_follow(x, 102, 1, k, 3.0 + 0.01 * (double)k, 0, alive_all);
    uint64_t p0 = prefetched(x);
    bfs_exec_follow(x, 102, 1, nb - 1, 4.0, 0, alive_all);
    ck_assert_uint_eq(prefetched(x), p0 + 1); /* (2, 1); (2, 0) came with (1, nb - 2) */
    bfs_batch *b;
    char err[256];
    ck_assert_int_eq(bfs_exec_get(x, 2, 1, &b, err, sizeof err), 0); /* prefetched: no miss */
    bfs_batch_release(b);
    bfs_exec_stats st;
    bfs_exec_get_stats(x, &st);
    ck_assert_uint_eq(st.misses, 0);
    /* and they count as ahead of it, not passed: kept when passed batches must go */
    for (uint64_t k = 1; k < nb; k++) { /* epoch 1 finished (prefetched from 1 on) */
        ck_assert_int_eq(bfs_exec_get(x, 1, k, &b, err, sizeof err), 0);
        bfs_batch_release(b);
    }
    bfs_exec_set_passed_max(x, 0, 0);
    ck_assert_int_eq(bfs_exec_get(x, 2, 1, &b, err, sizeof err), 0);
    bfs_batch_release(b);
    bfs_exec_get_stats(x, &st);
    ck_assert_uint_eq(st.misses, 0);
    ck_assert_uint_gt(st.evicted_passed, 0); /* epoch 1's read batches did go */
    bfs_exec_set_passed_max(x, 64 * bfs_engine_batch_bytes(e, 0, 0), 0);
    /* the last epoch's end: nothing beyond epochs=3 */
    uint64_t p1 = prefetched(x);
    bfs_exec_follow(x, 102, 2, nb - 1, 5.0, 0, alive_all);
    ck_assert_uint_eq(prefetched(x), p1);
    /* a rank with stride 3 and residue 1, past one epoch boundary: from its last batch of
     * epoch 1 to (2, 1), (2, 4) */
    uint64_t last = 1 + 3 * ((nb - 2) / 3);
    uint32_t c = bfs_exec_follow(x, 500, 0, last - 3, 6.0, 0, alive_all);
    ck_assert_uint_eq(bfs_exec_follow(x, 500, 0, last, 7.0, 0, alive_all), c);
    ck_assert_uint_eq(bfs_exec_follow(x, 500, 1, 1, 8.0, 0, alive_all), c);
    ck_assert_int_eq(bfs_exec_readers(x, 8.1, alive_all, r, BFS_EXEC_MAX_READERS), 2);
    ck_assert_int_eq(r[1].stride, 3);
    double t = 8.0;
    for (uint64_t k = 4; k <= last; k += 3) /* its walk through epoch 1, a process a batch */
        ck_assert_uint_eq(bfs_exec_follow(x, 500 + k, 1, k, t += 0.1, 0, alive_none), c);
    ck_assert_int_eq(bfs_exec_get(x, 2, 4, &b, err, sizeof err), 0);
    bfs_batch_release(b);
    bfs_exec_get_stats(x, &st);
    ck_assert_uint_eq(st.misses, 0); /* (2, 4) was prefetched by the rank's walk */
    /* but a process starting elsewhere in the next epoch is another reader */
    ck_assert_uint_ne(bfs_exec_follow(x, 600, 2, 2, t + 0.1, 0, alive_none), c);
    bfs_exec_destroy(x);
    bfs_engine_destroy(e);
}
END_TEST

/* Reader `key` reads batch k of epoch as the mount does (acquired, followed, waited). */
static void read_as(bfs_exec *x, uint64_t key, bfs_exec_alive_fn alive, uint64_t epoch, uint64_t k)
{
    bfs_batch *b;
    char err[512];
    ck_assert_msg(bfs_exec_get_as(x, key, alive, epoch, k, NULL, &b, err, sizeof err) == 0, "%s",
                  err);
    bfs_batch_release(b);
}

static uint64_t lex_names[1024];

static int cmp_batch_names(const void *a, const void *b)
{
    char x[32], y[32];
    snprintf(x, sizeof x, "batch_%llu", (unsigned long long)*(const uint64_t *)a);
    snprintf(y, sizeof y, "batch_%llu", (unsigned long long)*(const uint64_t *)b);
    return strcmp(x, y);
}

/* The order of `cat epoch/N/batch_*`: the names sorted as strings. */
static void glob_order(uint64_t nb)
{
    ck_assert_uint_le(nb, 1024);
    for (uint64_t k = 0; k < nb; k++)
        lex_names[k] = k;
    qsort(lex_names, nb, sizeof lex_names[0], cmp_batch_names);
}

/* A reader in a shell's glob order (0, 1, 10, 11, ..., 19, 2, 20, ...) is recognised from
 * its third batch on and its next batches in that order are prefetched: no miss after
 * the third; in the next epoch (a new `cat`, adopted) none after its first, and at that
 * epoch's end the next epoch's first names are prefetched. Followed by its stride (before),
 * it missed nearly every batch. */
START_TEST(readers_in_glob_order)
{
    bfs_engine *e = engine(packed, "batch=1,size=16,epochs=3");
    uint64_t nb = bfs_engine_batches(e);
    ck_assert_uint_ge(nb, 21); /* 0, 1, 10, ..., 19, 2, 20: not the numbers' order */
    bfs_exec *x = exec_new(e, 2, 4 * nb * bfs_engine_batch_bytes(e, 0, 0));
    bfs_exec_set_prefetch(x, 2);
    glob_order(nb);
    for (uint64_t i = 0; i < nb; i++)
        read_as(x, 100, alive_all, 0, lex_names[i]);
    bfs_exec_stats st;
    bfs_exec_get_stats(x, &st);
    ck_assert_uint_eq(st.misses, 3); /* 0 and 1: the walk not known yet; 10: not a stride */
    ck_assert_uint_eq(st.prefetched, nb - 3);
    bfs_exec_reader r[BFS_EXEC_MAX_READERS];
    ck_assert_int_eq(bfs_exec_readers(x, bfs_mono_s(), alive_all, r, BFS_EXEC_MAX_READERS), 1);
    ck_assert_int_eq(r[0].walk, BFS_EXEC_WALK_NAMES);
    /* the next epoch, a process per batch: the same reader, every batch but the first
     * (the reader had not gone on to a next epoch before) prefetched */
    for (uint64_t i = 0; i < nb; i++)
        read_as(x, 200 + i, alive_none, 1, lex_names[i]);
    bfs_exec_get_stats(x, &st);
    ck_assert_uint_eq(st.misses, 4);
    ck_assert_uint_eq(st.misses + st.prefetched, 2 * nb + 2); /* and epoch 2's first two */
    ck_assert_int_eq(bfs_exec_readers(x, bfs_mono_s(), alive_all, r, BFS_EXEC_MAX_READERS), 1);
    read_as(x, 300, alive_none, 2, 0);
    read_as(x, 300, alive_none, 2, 1);
    bfs_exec_get_stats(x, &st);
    ck_assert_uint_eq(st.misses, 4);
    bfs_exec_destroy(x);
    bfs_engine_destroy(e);
}
END_TEST

/* A reader's first batch says nothing of its next: nothing is prefetched until its second
 * (a data-parallel rank reading K, K + W, ... of its own mount wasted the 3 batches after
 * K), and from there on its stride is followed; a step off its stride prefetches nothing
 * until a stride is confirmed. No batch is computed that it does not read. */
START_TEST(walk_known_before_prefetch)
{
    bfs_engine *e = engine(packed, "batch=1,size=16");
    uint64_t nb = bfs_engine_batches(e);
    bfs_exec *x = exec_new(e, 2, 4 * nb * bfs_engine_batch_bytes(e, 0, 0));
    bfs_exec_set_prefetch(x, 3);
    uint64_t reads = 0;
    for (uint64_t k = 2; k < nb; k += 4, reads++) /* rank 2 of 4 */
        read_as(x, 100, alive_all, 0, k);
    bfs_exec_stats st;
    bfs_exec_get_stats(x, &st);
    ck_assert_uint_eq(st.computed, reads);
    ck_assert_uint_eq(st.misses, 2); /* its first two batches */
    ck_assert_uint_eq(st.prefetched, reads - 2);
    /* a sequential reader is prefetched from its second batch on */
    read_as(x, 200, alive_all, 1, 0);
    bfs_exec_get_stats(x, &st);
    ck_assert_uint_eq(st.prefetched, reads - 2);
    read_as(x, 200, alive_all, 1, 1);
    bfs_exec_get_stats(x, &st);
    ck_assert_uint_eq(st.prefetched, reads - 2 + 3); /* 2, 3, 4 */
    /* out of order: 7 breaks stride 1, 3 stride 6, 5 stride -4: nothing ahead of them;
     * then 7 confirms stride 2 */
    uint64_t p0 = st.prefetched;
    read_as(x, 200, alive_all, 1, 7);
    read_as(x, 200, alive_all, 1, 3);
    read_as(x, 200, alive_all, 1, 5);
    bfs_exec_get_stats(x, &st);
    ck_assert_uint_eq(st.prefetched, p0);
    bfs_exec_reader r[BFS_EXEC_MAX_READERS];
    int n = bfs_exec_readers(x, bfs_mono_s(), alive_all, r, BFS_EXEC_MAX_READERS);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(r[1].walk, BFS_EXEC_WALK_UNKNOWN);
    read_as(x, 200, alive_all, 1, 7);
    bfs_exec_get_stats(x, &st);
    ck_assert_uint_eq(st.prefetched, p0 + 3); /* 9, 11, 13 */
    bfs_exec_destroy(x);
    bfs_engine_destroy(e);
}
END_TEST

/* Fewer active workers still compute (and the same bytes). */
START_TEST(thread_count_changes)
{
    uint64_t size;
    uint8_t *ref = batch(e4, 1, 0, 3, &size);
    bfs_exec *x = exec_new(e4, 3, 0);
    ck_assert_int_eq(bfs_exec_set_threads(x, 1), 1);
    bfs_batch *b;
    ck_assert_int_eq(bfs_exec_get(x, 0, 3, &b, NULL, 0), 0);
    check_same(ref, size, bfs_batch_data(b), bfs_batch_size(b));
    bfs_batch_release(b);
    bfs_exec_stats st;
    bfs_exec_get_stats(x, &st);
    ck_assert_int_eq(st.threads, 1);
    ck_assert_int_eq(st.max_threads, 3);
    ck_assert_int_eq(bfs_exec_set_threads(x, 2), 2);
    ck_assert_int_eq(bfs_exec_get(x, 0, 4, &b, NULL, 0), 0);
    bfs_batch_release(b);
    bfs_exec_destroy(x);
    free(ref);
}
END_TEST

/* One read of batch k (epoch 0, stride 1, nb batches) as bfs_exec_follow fetches ahead:
 * the window of `ahead` batches after the `depth` prefetched ones, asked for from
 * bfs_exec_rt_fetch_from's index on, the mark moved unless kept. Returns the batches
 * asked for. */
static int fetch_read(bfs_exec_rt_mark *m, int *marked, uint64_t nb, uint64_t k, int depth,
                      int ahead)
{
    bfs_bc_reader walk = {0, 0, 1, 0, 0};
    uint64_t win[16][2], ep = 0, next = k;
    int nwin = 0;
    for (int d = 1; d <= depth + ahead && bfs_bc_walk_next(&walk, nb, 1, &ep, &next) == 0; d++)
        if (d > depth)
            win[nwin][0] = ep, win[nwin][1] = next, nwin++;
    int keep;
    int from = bfs_exec_rt_fetch_from(&walk, nb, 1, 0, k, *marked ? m : NULL,
                                      (const uint64_t(*)[2])win, nwin, &keep);
    ck_assert_int_ge(from, 0);
    ck_assert_int_le(from, nwin);
    if (nwin && !keep) {
        *m = (bfs_exec_rt_mark){win[nwin - 1][0], win[nwin - 1][1], 0, k, (uint64_t)(depth + nwin)};
        *marked = 1;
    }
    return nwin - from;
}

/* The fetch-ahead mark: a reader keeping its walk asks each batch once, a shrunk window
 * nothing; a reader that goes back along the same walk (an epoch read again, a resume a
 * few batches back) or jumps past the mark asks for its whole window again. */
START_TEST(fetch_ahead_mark_follows_the_walk)
{
    bfs_exec_rt_mark m;
    int marked = 0, asked = 0;
    for (uint64_t k = 0; k < 20; k++) /* 20 batches, depth 2, ahead 4: 17 after batch 0 */
        asked += fetch_read(&m, &marked, 20, k, 2, 4);
    ck_assert_int_eq(asked, 17); /* 3..19, each once */
    ck_assert_uint_eq(m.k, 19);
    /* epoch 0 read again by the same reader: the mark (19) lies 13 steps past the first
     * window (3..6), but behind this read's walk; every read asks its new batch */
    ck_assert_int_eq(fetch_read(&m, &marked, 20, 0, 2, 4), 4);
    for (uint64_t k = 1; k < 6; k++)
        ck_assert_int_eq(fetch_read(&m, &marked, 20, k, 2, 4), 1);
    /* a resume two batches back: 8..11 fetched as of read 5, read 3's window 6..9 */
    ck_assert_int_eq(fetch_read(&m, &marked, 20, 3, 2, 4), 4);
    /* a window that grew (read 4's 7..14 asks 10..14), then shrank: the mark (14) lies
     * past read 5's 8..11 and read 6's 9..12: nothing asked, the mark kept; read 10's
     * 13..16 asks 15, 16 */
    ck_assert_int_eq(fetch_read(&m, &marked, 20, 4, 2, 8), 5);
    ck_assert_int_eq(fetch_read(&m, &marked, 20, 5, 2, 4), 0);
    ck_assert_int_eq(fetch_read(&m, &marked, 20, 6, 2, 4), 0);
    ck_assert_uint_eq(m.k, 14);
    ck_assert_int_eq(fetch_read(&m, &marked, 20, 10, 2, 4), 2);
    /* a jump past the mark (16): the whole window (19) */
    ck_assert_int_eq(fetch_read(&m, &marked, 20, 17, 1, 2), 1);
    ck_assert_int_eq(fetch_read(&m, &marked, 20, 17, 1, 2), 0); /* the same read again */
}
END_TEST

/* The voluntary context switches of this process's threads named `name` (summed); -1 when
 * there is none. */
static long thread_switches(const char *name)
{
    DIR *d = opendir("/proc/self/task");
    ck_assert_ptr_nonnull(d);
    long sum = -1;
    for (struct dirent *de; (de = readdir(d));) {
        char path[300], comm[64] = "", line[256];
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", de->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        if (!fgets(comm, sizeof comm, f))
            comm[0] = 0;
        fclose(f);
        comm[strcspn(comm, "\n")] = 0;
        if (strcmp(comm, name))
            continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/status", de->d_name);
        if (!(f = fopen(path, "r")))
            continue;
        long v;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1)
                sum = (sum < 0 ? 0 : sum) + v;
        fclose(f);
    }
    closedir(d);
    return sum;
}

/* Workers beyond the active count sleep while batches are computed: they were woken for
 * every new batch, only to find they may not compute (the autotuner sets threads=1 for a
 * token mount: ~1 wasted wake-up per batch of 512 KiB). */
START_TEST(parked_workers_not_woken)
{
    bfs_exec *x = exec_new(e4, 3, 0);
    ck_assert_int_eq(bfs_exec_set_threads(x, 1), 1);
    usleep(50000); /* (the parked ones named themselves and went back to sleep) */
    long w1 = thread_switches("bfs-worker-1"), w2 = thread_switches("bfs-worker-2");
    ck_assert_int_ge(w1, 0);
    ck_assert_int_ge(w2, 0);
    uint64_t n = bfs_engine_batches(e4);
    ck_assert_uint_ge(n, 8);
    for (uint64_t k = 0; k < n; k++)
        touch(x, k);
    ck_assert_int_eq(thread_switches("bfs-worker-1") - w1, 0);
    ck_assert_int_eq(thread_switches("bfs-worker-2") - w2, 0);
    ck_assert_int_eq(bfs_exec_set_threads(x, 3), 3); /* and they wake when they may work */
    bfs_batch *b;
    ck_assert_int_eq(bfs_exec_get(x, 1, 0, &b, NULL, 0), 0);
    bfs_batch_release(b);
    bfs_exec_destroy(x);
}
END_TEST

static Suite *engine_suite(void)
{
    Suite *s = suite_create("engine");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, deterministic_across_threads_orders_and_sources);
    tcase_add_test(tc, epochs_and_seeds_differ);
    tcase_add_test(tc, shards_disjoint_and_header);
    tcase_add_test(tc, pad_marks_repeats);
    tcase_add_test(tc, crop_decode_equals_full_decode);
    tcase_add_test(tc, scaled_decode_close_to_full);
    tcase_add_test(tc, dtypes_and_layouts);
    tcase_add_test(tc, flip_mirrors);
    tcase_add_test(tc, store_row_flips_every_width);
    tcase_add_test(tc, bad_samples);
    tcase_add_test(tc, bad_in_every_epoch);
    tcase_add_test(tc, token_rows_truncated_between_rows);
    tcase_add_test(tc, token_tables_built_in_pieces);
    tcase_add_test(tc, token_claims_check_the_file);
    tcase_add_test(tc, token_file_changed_keeping_times);
    tcase_add_test(tc, sizes_and_ranges);
    tcase_add_test(tc, walks_continue_into_next_epoch);
    tcase_add_test(tc, readers_in_glob_order);
    tcase_add_test(tc, walk_known_before_prefetch);
    suite_add_tcase(s, tc);
    TCase *fa = tcase_create("fetch_ahead");
    tcase_add_test(fa, fetch_ahead_mark_follows_the_walk);
    suite_add_tcase(s, fa);
    TCase *ex = tcase_create("exec");
    tcase_add_checked_fixture(ex, exec_setup, exec_teardown);
    tcase_set_timeout(ex, 120);
    tcase_add_test(ex, reader_aware_eviction);
    tcase_add_test(ex, passed_batches_bounded);
    tcase_add_test(ex, passed_bound_grows_on_regrets);
    tcase_add_test(ex, buffer_pool_follows_bursts);
    tcase_add_test(ex, full_cache_reuses_passed_buffers);
    tcase_add_test(ex, memfd_batches_sealed);
    tcase_add_test(ex, evicted_batch_files_released);
    tcase_add_test(ex, batch_files_within_descriptor_budget);
    tcase_add_test(ex, readers_follow_and_adopt);
    tcase_add_test(ex, thread_count_changes);
    tcase_add_test(ex, parked_workers_not_woken);
    suite_add_tcase(s, ex);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(engine_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
