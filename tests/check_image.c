/*
 * check_image.c — PNG and WebP decoding (engine/dataset/image.h) and their path through
 * the engine's decoder and a folder source: every PNG colour type and bit depth to
 * Pillow's convert("RGB") rules, WebP lossless exact, corrupt, truncated and oversized
 * files refused with the format's error, bad samples substituted or failing a batch.
 * Pillow itself is compared in tests/cli/codec_pillow.sh; out-of-memory walks in
 * check_fault.c.
 */
#include "base/err.h"
#include "engine/dataset/bfs.h"
#include "engine/dataset/image.h"
#include "engine/decode.h"
#include "engine/engine.h"
#include "engine/exec.h"
#include "engine/pipeline.h"
#include "engine/safetensors.h"
#include "cache/samplecache.h"
#include "tests/testutil.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define W 13 /* odd: sub-byte rows end inside a byte */
#define H 7

/* Decode data whole; the pixels (malloc'ed) or NULL with *rc set. */
static uint8_t *decode(const uint8_t *data, size_t len, int *rc)
{
    bfs_image_facts f;
    if ((*rc = bfs_image_probe(data, len, &f)))
        return NULL;
    ck_assert_int_eq(f.width, W);
    ck_assert_int_eq(f.height, H);
    uint8_t *rgb = malloc((size_t)W * H * 3);
    char why[128];
    if ((*rc = bfs_image_decode(data, len, &f, rgb, (size_t)W * H * 3, why, sizeof why))) {
        free(rgb);
        return NULL;
    }
    return rgb;
}

/* One PNG kind: rows of samples and the RGB Pillow gives for them. */
static void png_case(const char *name, int ct, int depth, const uint8_t *rows, const uint8_t *plte,
                     int nplte, const uint8_t *trns, int ntrns, const uint8_t *want)
{
    uint8_t *png;
    size_t len;
    ck_assert_int_eq(tu_make_png(rows, W, H, ct, depth, plte, nplte, trns, ntrns, &png, &len), 0);
    int rc;
    uint8_t *got = decode(png, len, &rc);
    ck_assert_msg(got, "%s: %s", name, bfs_strerror(rc));
    for (int i = 0; i < W * H * 3; i++)
        ck_assert_msg(got[i] == want[i], "%s: byte %d (pixel %d, %d): %u, want %u", name, i,
                      i / 3 % W, i / 3 / W, got[i], want[i]);
    bfs_image_facts f;
    ck_assert_int_eq(bfs_image_check(png, len, &f, NULL, 0), 0);
    ck_assert_uint_eq(f.flags, BFS_KIND_CODEC);
    free(got);
    free(png);
}

static uint8_t sample_at(int x, int y, int c, int max)
{
    return (uint8_t)((x * 37 + y * 101 + c * 53 + 7) % (max + 1));
}

/* Every colour type and bit depth, as Pillow 13's convert("RGB") gives them (the rules
 * verified against Pillow by tests/cli/codec_pillow.sh). */
START_TEST(png_kinds_as_pillow)
{
    static uint8_t rows[W * H * 8], want[W * H * 3];
    static const int gray_depths[] = {1, 2, 4, 8, 16};
    for (size_t k = 0; k < sizeof gray_depths / sizeof *gray_depths; k++) {
        int d = gray_depths[k];
        size_t rb = ((size_t)W * d + 7) / 8;
        memset(rows, 0, sizeof rows);
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                unsigned v, out;
                if (d == 16) { /* spread over the range: Pillow clips 16-bit gray */
                    v = (unsigned)sample_at(x, y, 0, 255) * (x % 3 ? 1u : 257u);
                    rows[y * rb + 2 * x] = (uint8_t)(v >> 8), rows[y * rb + 2 * x + 1] = (uint8_t)v;
                    out = v > 255 ? 255 : v;
                } else {
                    v = sample_at(x, y, 0, (1 << d) - 1);
                    rows[y * rb + x * d / 8] |= (uint8_t)(v << (8 - d - x * d % 8));
                    out = v * 255 / ((1u << d) - 1);
                }
                for (int c = 0; c < 3; c++)
                    want[(y * W + x) * 3 + c] = (uint8_t)out;
            }
        char name[32];
        snprintf(name, sizeof name, "gray%d", d);
        png_case(name, 0, d, rows, NULL, 0, d == 8 ? (const uint8_t *)"\0\5" : NULL, 2, want);
    }
    /* RGB, RGBA, gray+alpha at 8 and 16 bits: each sample's high byte, alpha dropped */
    static const int cts[] = {2, 6, 4};
    for (int k = 0; k < 3; k++)
        for (int d = 8; d <= 16; d += 8) {
            int ct = cts[k], ch = ct == 2 ? 3 : ct == 6 ? 4 : 2, bps = d / 8;
            for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++)
                    for (int c = 0; c < ch; c++)
                        for (int b = 0; b < bps; b++)
                            rows[((y * W + x) * ch + c) * bps + b] = sample_at(x + b, y, c, 255);
            for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++)
                    for (int c = 0; c < 3; c++)
                        want[(y * W + x) * 3 + c] = sample_at(x, y, ct == 4 ? 0 : c, 255);
            char name[32];
            snprintf(name, sizeof name, "ct%d-%d", ct, d);
            png_case(name, ct, d, rows, NULL, 0, NULL, 0, want);
        }
    /* a short palette (with tRNS) at 2, 4 and 8 bits: 3 entries of 4 at 2 bits, 5 of 16
     * or 256 at 4 and 8 bits; indexes past it are black */
    static const uint8_t plte[15] = {10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 250, 1, 2};
    static const uint8_t trns[2] = {0, 128};
    for (int d = 2; d <= 8; d *= 2) {
        size_t rb = ((size_t)W * d + 7) / 8;
        memset(rows, 0, sizeof rows);
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                unsigned v = sample_at(x, y, 1, d == 2 ? 3 : 7), n = d == 2 ? 3 : 5;
                rows[y * rb + x * d / 8] |= (uint8_t)(v << (8 - d - x * d % 8));
                for (int c = 0; c < 3; c++)
                    want[(y * W + x) * 3 + c] = v < n ? plte[v * 3 + c] : 0;
            }
        char name[32];
        snprintf(name, sizeof name, "palette%d", d);
        png_case(name, 3, d, rows, plte, d == 2 ? 3 : 5, trns, 2, want);
    }
}
END_TEST

START_TEST(webp_lossless_exact_lossy_decodes)
{
    uint8_t rgb[W * H * 3];
    tu_fill_rgb(rgb, W, H, 5);
    for (int lossless = 0; lossless <= 1; lossless++) {
        uint8_t *webp;
        size_t len;
        ck_assert_int_eq(tu_make_webp(rgb, W, H, lossless, &webp, &len), 0);
        ck_assert_int_eq(bfs_image_sniff(webp, len), BFS_IMAGE_WEBP);
        bfs_image_facts f;
        ck_assert_int_eq(bfs_image_check(webp, len, &f, NULL, 0), 0);
        ck_assert_uint_eq(f.flags, BFS_KIND_CODEC | BFS_F_WEBP);
        int rc;
        uint8_t *got = decode(webp, len, &rc);
        ck_assert_ptr_nonnull(got);
        if (lossless)
            ck_assert_int_eq(memcmp(got, rgb, sizeof rgb), 0);
        free(got);
        free(webp);
    }
}
END_TEST

static int data_error(int rc)
{
    return rc == BFS_E_PNG_DATA || rc == BFS_E_WEBP_DATA || rc == BFS_E_NOT_JPEG ||
           rc == BFS_E_WEBP_UNSUPPORTED || rc == BFS_E_IMAGE_TOO_LARGE;
}

/* Every truncation and a damaged byte at every place: refused with a data error (or, for
 * a damaged byte libwebp's lossy decoder does not notice, decoded), never a crash. */
START_TEST(corrupt_and_truncated)
{
    uint8_t rgb[W * H * 3];
    tu_fill_rgb(rgb, W, H, 9);
    uint8_t *files[2];
    size_t lens[2];
    ck_assert_int_eq(tu_make_png(rgb, W, H, 2, 8, NULL, 0, NULL, 0, &files[0], &lens[0]), 0);
    ck_assert_int_eq(tu_make_webp(rgb, W, H, 0, &files[1], &lens[1]), 0);
    for (int k = 0; k < 2; k++) {
        uint8_t *d = files[k];
        size_t len = lens[k];
        bfs_image_facts f;
        /* a PNG cut after its last IDAT's data (in its CRC or IEND) keeps every pixel:
         * libspng and Pillow decode it */
        for (size_t cut = 0; cut < (k ? len : len - 16); cut++) {
            int rc = bfs_image_check(d, cut, &f, NULL, 0);
            ck_assert_msg(rc != 0 && (data_error(rc) || rc == BFS_E_JPEG_HEADER),
                          "%s cut at %zu: %d", k ? "webp" : "png", cut, rc);
        }
        for (size_t i = 16; i < len; i++) {
            d[i] ^= 0x5A;
            int rc = bfs_image_check(d, len, &f, NULL, 0);
            ck_assert_msg(rc == 0 || data_error(rc), "byte %zu: %d", i, rc);
            /* PNG: IHDR and the IDAT's head are covered by CRCs; the last IDAT's own CRC,
             * and deflate bytes past the last pixel, are not read (nor by Pillow) */
            ck_assert_msg(k || i >= 41 || rc, "png byte %zu damaged, still decoded", i);
            d[i] ^= 0x5A;
        }
        free(d);
    }
    /* a PNG table entry of another size, WebP bytes for a PNG entry */
    uint8_t *png;
    size_t len;
    ck_assert_int_eq(tu_make_png(rgb, W, H, 2, 8, NULL, 0, NULL, 0, &png, &len), 0);
    bfs_image_facts f = {W + 1, H, BFS_KIND_CODEC};
    uint8_t *buf = malloc((size_t)(W + 1) * H * 3);
    ck_assert_int_eq(bfs_image_decode(png, len, &f, buf, (size_t)(W + 1) * H * 3, NULL, 0),
                     BFS_E_PNG_DATA);
    f.width = W;
    ck_assert_int_eq(bfs_image_decode(png, len, &f, buf, 10, NULL, 0), -EINVAL);
    free(buf);
    free(png);
}
END_TEST

/* Headers claiming sides over 65535 or more than 2^28 pixels: refused before decoding. */
START_TEST(decompression_bombs)
{
    uint8_t row[4] = {0};
    uint8_t *png;
    size_t len;
    ck_assert_int_eq(tu_make_png(row, 1, 1, 0, 8, NULL, 0, NULL, 0, &png, &len), 0);
    static const uint32_t sizes[][2] = {{70000, 1}, {1, 65536}, {20000, 20000}};
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < 4; i++) {
            png[16 + i] = (uint8_t)(sizes[k][0] >> (24 - 8 * i));
            png[20 + i] = (uint8_t)(sizes[k][1] >> (24 - 8 * i));
        }
        bfs_image_facts f;
        ck_assert_int_eq(bfs_image_probe(png, len, &f), BFS_E_IMAGE_TOO_LARGE);
        bfs_image_info info;
        ck_assert_int_eq(bfs_decoder_probe(png, len, &info), BFS_E_IMAGE_TOO_LARGE);
    }
    free(png);
}
END_TEST

/* The engine's decoder: probe, a region (the whole image comes back), a cache entry. */
START_TEST(decoder_entry_points)
{
    uint8_t rgb[W * H * 3];
    tu_fill_rgb(rgb, W, H, 3);
    uint8_t *png;
    size_t len;
    ck_assert_int_eq(tu_make_png(rgb, W, H, 2, 8, NULL, 0, NULL, 0, &png, &len), 0);
    bfs_decoder *d;
    ck_assert_int_eq(bfs_decoder_create(&d), 0);
    bfs_image_info info;
    ck_assert_int_eq(bfs_decoder_probe(png, len, &info), 0);
    ck_assert_int_eq(info.width, W);
    ck_assert_uint_eq(info.flags, BFS_KIND_CODEC);
    ck_assert_int_eq(bfs_decoder_max_scale(&info, 1000, 1000, 10, 10), 1);
    bfs_pixels px;
    ck_assert_int_eq(bfs_decoder_decode(d, png, len, &info, 1, 3, 2, 9, 5, &px), 0);
    ck_assert_int_eq(px.x0, 0);
    ck_assert_int_eq(px.w, W);
    ck_assert_int_eq(px.h, H);
    for (int y = 0; y < H; y++)
        ck_assert_int_eq(memcmp(px.rgb + y * px.stride, rgb + y * W * 3, W * 3), 0);
    uint8_t dst[W * H * 3];
    ck_assert_int_eq(bfs_decoder_decode_image(d, png, len, &info, 1, dst, sizeof dst), 0);
    ck_assert_int_eq(memcmp(dst, rgb, sizeof dst), 0);
    ck_assert_int_eq(bfs_decoder_decode(d, png, len, &info, 2, 0, 0, 3, 3, &px), -EINVAL);
    bfs_image_info webp = info;
    webp.flags |= BFS_F_WEBP; /* a table saying WebP for PNG bytes */
    ck_assert_int_eq(bfs_decoder_decode(d, png, len, &webp, 1, 0, 0, W, H, &px), BFS_E_WEBP_DATA);
    bfs_decode_stats st;
    bfs_decoder_get_stats(d, &st);
    ck_assert_uint_eq(st.full, 2);
    bfs_decoder_destroy(d);
    free(png);
}
END_TEST

/* A folder of PNG and WebP files, one of each corrupt: substituted, or failing its batch. */
START_TEST(bad_png_webp_samples)
{
    char *dir = tu_mkdtemp("check_image");
    char p[4200];
    snprintf(p, sizeof p, "%s/c", dir);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    uint8_t rgb[40 * 30 * 3];
    for (int i = 0; i < 8; i++) {
        tu_fill_rgb(rgb, 40, 30, (uint64_t)i);
        uint8_t *f;
        size_t len;
        if (i % 2)
            ck_assert_int_eq(tu_make_webp(rgb, 40, 30, i % 4 == 1, &f, &len), 0);
        else
            ck_assert_int_eq(tu_make_png(rgb, 40, 30, 2, 8, NULL, 0, NULL, 0, &f, &len), 0);
        if (i == 2 || i == 5)
            len = len * 2 / 3; /* truncated */
        snprintf(p, sizeof p, "%s/c/%d.%s", dir, i, i % 2 ? "webp" : "png");
        ck_assert_int_eq(tu_write_file(p, f, len), 0);
        free(f);
    }
    snprintf(p, sizeof p, "%s", dir);
    for (int fail = 0; fail <= 1; fail++) {
        bfs_pipeline_opts o;
        bfs_pipeline_defaults(&o);
        char err[1024] = "";
        ck_assert_int_eq(bfs_pipeline_parse(&o,
                                            fail ? "batch=8,size=16,shuffle=none,bad_sample=fail"
                                                 : "batch=8,size=16,shuffle=none",
                                            err, sizeof err),
                         0);
        ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), 0);
        bfs_engine *e;
        ck_assert_msg(bfs_engine_create(p, &o, &e, err, sizeof err) == 0, "%s", err);
        bfs_exec *x;
        ck_assert_int_eq(bfs_exec_create(e, 2, 0, &x), 0);
        bfs_batch *b;
        int rc = bfs_exec_get(x, 0, 0, &b, err, sizeof err);
        if (fail) {
            ck_assert_msg(rc == BFS_E_PNG_DATA || rc == BFS_E_WEBP_DATA, "rc %d: %s", rc, err);
            ck_assert_msg(strstr(err, "2.png") || strstr(err, "5.webp"), "%s", err);
        } else {
            ck_assert_msg(rc == 0, "%s", err);
            bfs_st_file f;
            ck_assert_int_eq(bfs_st_parse(bfs_batch_data(b), bfs_batch_size(b), &f), 0);
            const bfs_st_tensor *ix = bfs_st_find(&f, "indices");
            int64_t v[8];
            memcpy(v, bfs_batch_data(b) + ix->offset, sizeof v);
            for (int i = 0; i < 8; i++)
                ck_assert_msg((v[i] == i) == (i != 2 && i != 5), "slot %d holds %lld", i,
                              (long long)v[i]);
            bfs_batch_release(b);
            bfs_exec_stats st;
            bfs_exec_get_stats(x, &st);
            ck_assert_uint_eq(st.stages.bad_samples, 2);
        }
        bfs_exec_destroy(x);
        bfs_engine_destroy(e);
    }
    tu_rmtree(dir);
    free(dir);
}
END_TEST

static uint8_t *get_batch(bfs_engine *e, uint64_t epoch, uint64_t k, size_t *n)
{
    bfs_exec *x;
    ck_assert_int_eq(bfs_exec_create(e, 2, 0, &x), 0);
    bfs_batch *b;
    char err[512];
    ck_assert_msg(bfs_exec_get(x, epoch, k, &b, err, sizeof err) == 0, "%s", err);
    *n = bfs_batch_size(b);
    uint8_t *copy = malloc(*n);
    memcpy(copy, bfs_batch_data(b), *n);
    bfs_batch_release(b);
    bfs_exec_destroy(x);
    return copy;
}

/* The decoded-sample cache holds PNG and WebP images (whole, scale 1): an epoch served
 * from it is byte-identical to one decoded afresh. */
START_TEST(sample_cache_holds_png_webp)
{
    char *dir = tu_mkdtemp("check_image");
    char p[4200];
    snprintf(p, sizeof p, "%s/c", dir);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    uint8_t rgb[90 * 70 * 3];
    for (int i = 0; i < 6; i++) {
        int w = 50 + 8 * i, h = 70 - 4 * i;
        tu_fill_rgb(rgb, w, h, (uint64_t)i + 20);
        uint8_t *f;
        size_t len;
        if (i % 2)
            ck_assert_int_eq(tu_make_webp(rgb, w, h, i == 3, &f, &len), 0);
        else
            ck_assert_int_eq(tu_make_png(rgb, w, h, 2, 8, NULL, 0, NULL, 0, &f, &len), 0);
        snprintf(p, sizeof p, "%s/c/%d.%s", dir, i, i % 2 ? "webp" : "png");
        ck_assert_int_eq(tu_write_file(p, f, len), 0);
        free(f);
    }
    uint8_t *plain[2], *cached[2];
    size_t pn[2], cn[2];
    bfs_samplecache_stats st;
    for (int c = 0; c <= 1; c++) {
        bfs_pipeline_opts o;
        bfs_pipeline_defaults(&o);
        char err[1024] = "";
        ck_assert_int_eq(bfs_pipeline_parse(&o,
                                            c ? "batch=6,size=24,augment=train,epochs=2,"
                                                "sample_cache_mb=16"
                                              : "batch=6,size=24,augment=train,epochs=2",
                                            err, sizeof err),
                         0);
        ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), 0);
        bfs_engine *e;
        ck_assert_msg(bfs_engine_create(dir, &o, &e, err, sizeof err) == 0, "%s", err);
        for (int ep = 0; ep < 2; ep++)
            (c ? cached : plain)[ep] = get_batch(e, (uint64_t)ep, 0, &(c ? cn : pn)[ep]);
        if (c)
            bfs_engine_sample_cache_stats(e, &st);
        bfs_engine_destroy(e);
    }
    for (int ep = 0; ep < 2; ep++) {
        ck_assert_uint_eq(pn[ep], cn[ep]);
        ck_assert_int_eq(memcmp(plain[ep], cached[ep], pn[ep]), 0);
        free(plain[ep]);
        free(cached[ep]);
    }
    ck_assert_uint_eq(st.inserts, 6);
    ck_assert_uint_eq(st.hits, 6); /* epoch 1 decoded nothing */
    tu_rmtree(dir);
    free(dir);
}
END_TEST

static Suite *image_suite(void)
{
    Suite *s = suite_create("image");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, png_kinds_as_pillow);
    tcase_add_test(tc, webp_lossless_exact_lossy_decodes);
    tcase_add_test(tc, corrupt_and_truncated);
    tcase_add_test(tc, decompression_bombs);
    tcase_add_test(tc, decoder_entry_points);
    tcase_add_test(tc, bad_png_webp_samples);
    tcase_add_test(tc, sample_cache_holds_png_webp);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(image_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
