/*
 * check_samplecache.c — the decoded-sample cache (cache/samplecache.h, sample_cache_mb=):
 *  - the claim it rests on: a whole-image decode at scale s holds, inside any region, the
 *    very pixels the crop-aware decoder returns for that region at s — for every JPEG
 *    kind the decoder meets (4:2:0, 4:2:2, 4:4:4, 4:4:0, 4:1:1, gray, progressive, RGB,
 *    CMYK, YCCK, arithmetic) and every scale 1, 2, 4, 8;
 *  - the determinism contract: batches with the cache on are byte-identical to batches
 *    with it off, over three epochs, for train, eval and none, from an ImageFolder, a
 *    .bfs and a raw (lz4 pixels) .bfs, with scaled IDCT in play, with a corrupt sample
 *    whose crop decodes though the whole image does not, and with a budget too small
 *    for the dataset;
 *  - the table itself: budget never exceeded (also under concurrent inserts), no
 *    eviction, publish races, abandon, stats.
 * Each engine-level test also checks that the cache was really used (hits), so a cache
 * that silently did nothing could not pass.
 */
#include "engine/dataset/bfs.h"
#include "engine/decode.h"
#include "engine/engine.h"
#include "base/err.h"
#include "engine/exec.h"
#include "engine/dataset/pack.h"
#include "engine/pipeline.h"
#include "cache/samplecache.h"
#include "tests/testutil.h"

#include <check.h>
#include <errno.h>
#include <lz4.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>

#include <jpeglib.h>

/* ---- JPEGs of every kind ---------------------------------------------------------------- */

enum { CS_YCC, CS_RGB, CS_CMYK, CS_YCCK };

/* A JPEG written with the libjpeg API: colour space, luma sampling (chroma 1x1),
 * progressive, arithmetic coding. *out is malloc'ed. */
static void make_jpeg_lib(int w, int h, int cs, int hs, int vs, int progressive, int arith,
                          uint64_t seed, uint8_t **out, size_t *len)
{
    uint8_t *rgb = malloc((size_t)w * h * 3);
    ck_assert_ptr_nonnull(rgb);
    tu_fill_rgb(rgb, w, h, seed);
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    unsigned char *buf = NULL;
    unsigned long size = 0;
    jpeg_mem_dest(&c, &buf, &size);
    int four = cs == CS_CMYK || cs == CS_YCCK;
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = four ? 4 : 3;
    c.in_color_space = four ? JCS_CMYK : JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_colorspace(&c, cs == CS_CMYK   ? JCS_CMYK
                            : cs == CS_YCCK ? JCS_YCCK
                            : cs == CS_RGB  ? JCS_RGB
                                            : JCS_YCbCr);
    jpeg_set_quality(&c, 88, TRUE);
    c.comp_info[0].h_samp_factor = hs;
    c.comp_info[0].v_samp_factor = vs;
    for (int i = 1; i < c.num_components; i++)
        c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
    if (four) /* K at full resolution, like luma */
        c.comp_info[3].h_samp_factor = hs, c.comp_info[3].v_samp_factor = vs;
    c.arith_code = arith ? TRUE : FALSE;
    if (progressive)
        jpeg_simple_progression(&c);
    jpeg_start_compress(&c, TRUE);
    uint8_t *row = malloc((size_t)w * 4);
    ck_assert_ptr_nonnull(row);
    while (c.next_scanline < c.image_height) {
        const uint8_t *src = rgb + (size_t)c.next_scanline * w * 3;
        JSAMPROW r = (JSAMPROW)src;
        if (four) {
            for (int x = 0; x < w; x++) { /* some CMYK from RGB: K from the darkest */
                uint8_t k = src[3 * x] < src[3 * x + 1] ? src[3 * x] : src[3 * x + 1];
                row[4 * x] = src[3 * x], row[4 * x + 1] = src[3 * x + 1];
                row[4 * x + 2] = src[3 * x + 2], row[4 * x + 3] = (uint8_t)(255 - k / 2);
            }
            r = row;
        }
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(row);
    free(rgb);
    *out = malloc(size);
    ck_assert_ptr_nonnull(*out);
    memcpy(*out, buf, size);
    *len = size;
    free(buf);
}

typedef struct kind {
    const char *name;
    int lib; /* 0: TurboJPEG (subsamp), 1: libjpeg API (cs, hs, vs, arith) */
    int subsamp, progressive;
    int cs, hs, vs, arith;
} kind;

static const kind KINDS[] = {
    {"4:2:0", 0, TJSAMP_420, 0, 0, 0, 0, 0},
    {"4:2:2", 0, TJSAMP_422, 0, 0, 0, 0, 0},
    {"4:4:4", 0, TJSAMP_444, 0, 0, 0, 0, 0},
    {"4:4:0", 0, TJSAMP_440, 0, 0, 0, 0, 0},
    {"4:1:1 (odd)", 0, TJSAMP_411, 0, 0, 0, 0, 0},
    {"gray", 0, TJSAMP_GRAY, 0, 0, 0, 0, 0},
    {"progressive 4:2:0", 0, TJSAMP_420, 1, 0, 0, 0, 0},
    {"progressive 4:4:4", 0, TJSAMP_444, 1, 0, 0, 0, 0},
    {"progressive gray", 0, TJSAMP_GRAY, 1, 0, 0, 0, 0},
    {"RGB (no transform)", 1, 0, 0, CS_RGB, 1, 1, 0},
    {"CMYK", 1, 0, 0, CS_CMYK, 1, 1, 0},
    {"YCCK 4:2:0", 1, 0, 0, CS_YCCK, 2, 2, 0},
    {"progressive CMYK", 1, 0, 1, CS_CMYK, 1, 1, 0},
    {"arithmetic 4:2:0", 1, 0, 0, CS_YCC, 2, 2, 1},
    {"arithmetic 4:2:2", 1, 0, 0, CS_YCC, 2, 1, 1},
};
#define NKINDS (sizeof KINDS / sizeof KINDS[0])

static void make_kind(const kind *k, int w, int h, uint64_t seed, uint8_t **out, size_t *len)
{
    if (k->lib) {
        make_jpeg_lib(w, h, k->cs, k->hs, k->vs, k->progressive, k->arith, seed, out, len);
        return;
    }
    tu_jpeg_opts o = {.width = w,
                      .height = h,
                      .quality = 90,
                      .subsamp = k->subsamp,
                      .progressive = k->progressive,
                      .seed = seed};
    ck_assert_int_eq(tu_make_jpeg(&o, out, len), 0);
}

/* ---- the claim: whole-image pixels = region pixels, every kind, every scale ------------- */

START_TEST(whole_image_equals_region_decode)
{
    /* sizes that are not multiples of any iMCU, one of them tall */
    static const int sizes[][2] = {{203, 141}, {97, 230}, {333, 77}};
    bfs_decoder *d;
    ck_assert_int_eq(bfs_decoder_create(&d), 0);
    uint64_t rs = 12345;
    long compared = 0;
    for (size_t ki = 0; ki < NKINDS; ki++) {
        for (size_t si = 0; si < 3; si++) {
            int W = sizes[si][0], H = sizes[si][1];
            uint8_t *jpg;
            size_t len;
            make_kind(&KINDS[ki], W, H, ki * 7 + si, &jpg, &len);
            bfs_image_info info;
            ck_assert_int_eq(bfs_decoder_probe(jpg, len, &info), 0);
            for (int s = 1; s <= 8; s *= 2) {
                int sw = (W + s - 1) / s, sh = (H + s - 1) / s;
                size_t size = (size_t)sw * sh * 3;
                uint8_t *whole = malloc(size);
                ck_assert_ptr_nonnull(whole);
                ck_assert_int_eq(bfs_decoder_decode_image(d, jpg, len, &info, s, whole, size), 0);
                ck_assert_int_eq(bfs_decoder_decode_image(d, jpg, len, &info, s, whole, size - 1),
                                 -EINVAL);
                for (int t = 0; t < 40; t++) {
                    int x0 = (int)(tu_rand(&rs) % (uint64_t)sw);
                    int y0 = (int)(tu_rand(&rs) % (uint64_t)sh);
                    int x1 = x0 + 1 + (int)(tu_rand(&rs) % (uint64_t)(sw - x0));
                    int y1 = y0 + 1 + (int)(tu_rand(&rs) % (uint64_t)(sh - y0));
                    if (t == 0) /* the whole image as a region too */
                        x0 = y0 = 0, x1 = sw, y1 = sh;
                    bfs_pixels px;
                    ck_assert_int_eq(bfs_decoder_decode(d, jpg, len, &info, s, x0, y0, x1, y1, &px),
                                     0);
                    ck_assert_int_eq(px.img_w, sw);
                    ck_assert_int_eq(px.img_h, sh);
                    for (int y = y0; y < y1; y++) {
                        const uint8_t *a =
                            px.rgb + (size_t)(y - px.y0) * px.stride + 3 * (size_t)(x0 - px.x0);
                        const uint8_t *b = whole + ((size_t)y * sw + x0) * 3;
                        ck_assert_msg(memcmp(a, b, 3 * (size_t)(x1 - x0)) == 0,
                                      "%s %dx%d scale 1/%d region %d,%d-%d,%d: row %d differs",
                                      KINDS[ki].name, W, H, s, x0, y0, x1, y1, y);
                    }
                    compared++;
                }
                free(whole);
            }
            free(jpg);
        }
    }
    bfs_decode_stats st;
    bfs_decoder_get_stats(d, &st);
    ck_assert_uint_gt(st.cropped, 0); /* the crop path was exercised */
    ck_assert_uint_gt(st.scaled, 0);
    ck_assert_int_eq(compared, (long)(NKINDS * 3 * 4 * 40));
    bfs_decoder_destroy(d);
}
END_TEST

/* ---- raw (lz4) samples: the decoder's contract ------------------------------------------- */

START_TEST(raw_decode_contract)
{
    enum { W = 7, H = 5, N = W * H * 3 };
    uint8_t pix[N];
    for (int i = 0; i < N; i++)
        pix[i] = (uint8_t)(i * 37 + 11);
    char blk[LZ4_COMPRESSBOUND(N)];
    int zn = LZ4_compress_default((const char *)pix, blk, N, (int)sizeof blk);
    ck_assert_int_gt(zn, 0);
    bfs_decoder *d;
    ck_assert_int_eq(bfs_decoder_create(&d), 0);
    bfs_image_info info = {W, H, BFS_KIND_RAW, N};
    const uint8_t *b = (const uint8_t *)blk;
    bfs_pixels px;
    /* any region inside the image gives the whole image at scale 1 */
    ck_assert_int_eq(bfs_decoder_decode(d, b, (size_t)zn, &info, 1, 2, 1, 4, 3, &px), 0);
    ck_assert_int_eq(px.x0, 0);
    ck_assert_int_eq(px.w, W);
    ck_assert_int_eq(px.h, H);
    ck_assert_int_eq(px.scale, 1);
    ck_assert_mem_eq(px.rgb, pix, N);
    /* raw samples have no scaled decode, and regions lie inside the image */
    ck_assert_int_eq(bfs_decoder_decode(d, b, (size_t)zn, &info, 2, 0, 0, 4, 3, &px), -EINVAL);
    ck_assert_int_eq(bfs_decoder_decode(d, b, (size_t)zn, &info, 1, 0, 0, W + 1, H, &px), -EINVAL);
    ck_assert_int_eq(bfs_decoder_decode(d, b, (size_t)zn, &info, 1, 3, 0, 3, H, &px), -EINVAL);
    ck_assert_int_eq(bfs_decoder_decode(d, b, (size_t)zn, &info, 1, -1, 0, W, H, &px), -EINVAL);
    /* facts that describe no image: zero or negative sides (whose product can still match
     * raw_size in size_t arithmetic) */
    bfs_image_info zero = {0, H, BFS_KIND_RAW, 0};
    ck_assert_int_eq(bfs_decoder_decode_image(d, (const uint8_t *)"", 1, &zero, 1, pix, N),
                     -EINVAL);
    ck_assert_int_eq(bfs_decoder_decode(d, (const uint8_t *)"", 1, &zero, 1, 0, 0, 1, 1, &px),
                     BFS_E_RAW_DATA);
    bfs_image_info neg = {-1, -1, BFS_KIND_RAW, 3};
    ck_assert_int_eq(bfs_decoder_decode(d, b, (size_t)zn, &neg, 1, 0, 0, 1, 1, &px),
                     BFS_E_RAW_DATA);
    /* a 4-byte block cannot hold 1.2 GB of pixels (lz4: <= 255 bytes out per byte in):
     * refused before the decoder's buffer grows to that size */
    bfs_image_info huge = {20000, 20000, BFS_KIND_RAW, 20000u * 20000u * 3u};
    size_t before = mallinfo2().hblkhd;
    ck_assert_int_eq(bfs_decoder_decode(d, b, 4, &huge, 1, 0, 0, 1, 1, &px), BFS_E_RAW_DATA);
    ck_assert_uint_lt(mallinfo2().hblkhd, before + (64u << 20));
    bfs_decoder_destroy(d);
}
END_TEST

/* ---- the table ---------------------------------------------------------------------------- */

static void fill_entry(uint8_t *p, int w, int h, uint64_t idx, int scale)
{
    for (size_t i = 0; i < (size_t)w * h * 3; i++)
        p[i] = (uint8_t)(idx * 31 + (uint64_t)scale * 7 + i);
}

static int entry_ok(const bfs_samplecache_image *im, uint64_t idx, int scale)
{
    for (size_t i = 0; i < (size_t)im->w * im->h * 3; i++)
        if (im->rgb[i] != (uint8_t)(idx * 31 + (uint64_t)scale * 7 + i))
            return 0;
    return 1;
}

START_TEST(table_basics)
{
    bfs_samplecache *c;
    ck_assert_int_eq(bfs_samplecache_create(10, 0, &c), -EINVAL);
    ck_assert_ptr_null(c);
    bfs_samplecache_destroy(NULL);
    bfs_samplecache_abandon(NULL, NULL);
    bfs_samplecache_stats st;
    bfs_samplecache_get_stats(NULL, &st);
    ck_assert_uint_eq(st.budget_bytes, 0);

    uint64_t budget = 3 * (10 * 10 * 3 + 64);
    ck_assert_int_eq(bfs_samplecache_create(10, budget, &c), 0);
    bfs_samplecache_image im;
    bfs_samplecache_entry *en;
    uint8_t *px;
    ck_assert_int_eq(bfs_samplecache_lookup(c, 3, 1, &im), -ENOENT);
    ck_assert_int_eq(bfs_samplecache_lookup(c, 10, 1, &im), -ERANGE);
    ck_assert_int_eq(bfs_samplecache_reserve(c, 10, 1, 10, 10, &en, &px), -ERANGE);
    ck_assert_int_eq(bfs_samplecache_reserve(c, 3, 3, 10, 10, &en, &px), -EINVAL);
    ck_assert_int_eq(bfs_samplecache_reserve(c, 3, 1, 0, 10, &en, &px), -EINVAL);
    /* sample 3 at scales 1 and 2: two entries, found by scale */
    ck_assert_int_eq(bfs_samplecache_reserve(c, 3, 1, 10, 10, &en, &px), 0);
    fill_entry(px, 10, 10, 3, 1);
    bfs_samplecache_publish(c, en, &im);
    ck_assert(entry_ok(&im, 3, 1));
    ck_assert_int_eq(bfs_samplecache_reserve(c, 3, 2, 5, 5, &en, &px), 0);
    fill_entry(px, 5, 5, 3, 2);
    bfs_samplecache_publish(c, en, &im);
    ck_assert_int_eq(bfs_samplecache_lookup(c, 3, 1, &im), 0);
    ck_assert_int_eq(im.w, 10);
    ck_assert_int_eq(im.scale, 1);
    ck_assert_uint_eq(im.stride, 30);
    ck_assert(entry_ok(&im, 3, 1));
    ck_assert_int_eq(bfs_samplecache_lookup(c, 3, 2, &im), 0);
    ck_assert_int_eq(im.w, 5);
    ck_assert(entry_ok(&im, 3, 2));
    ck_assert_int_eq(bfs_samplecache_lookup(c, 3, 4, &im), -ENOENT);
    /* a publish race: the second entry of (3, 1) is dropped, the first one returned */
    bfs_samplecache_get_stats(c, &st);
    uint64_t before = st.bytes;
    ck_assert_int_eq(bfs_samplecache_reserve(c, 3, 1, 10, 10, &en, &px), 0);
    memset(px, 0xEE, 300);
    bfs_samplecache_publish(c, en, &im);
    ck_assert(entry_ok(&im, 3, 1));
    bfs_samplecache_get_stats(c, &st);
    ck_assert_uint_eq(st.bytes, before);
    /* abandon gives the room back */
    ck_assert_int_eq(bfs_samplecache_reserve(c, 4, 1, 10, 10, &en, &px), 0);
    bfs_samplecache_get_stats(c, &st);
    ck_assert_uint_gt(st.bytes, before);
    bfs_samplecache_abandon(c, en);
    bfs_samplecache_get_stats(c, &st);
    ck_assert_uint_eq(st.bytes, before);
    ck_assert_int_eq(bfs_samplecache_lookup(c, 4, 1, &im), -ENOENT);
    /* fill to the budget: refused, nothing evicted */
    int refused = 0;
    for (uint64_t i = 5; i < 10; i++) {
        int rc = bfs_samplecache_reserve(c, i, 1, 10, 10, &en, &px);
        if (rc == -ENOSPC) {
            refused++;
            continue;
        }
        ck_assert_int_eq(rc, 0);
        fill_entry(px, 10, 10, i, 1);
        bfs_samplecache_publish(c, en, &im);
    }
    ck_assert_int_gt(refused, 0);
    bfs_samplecache_get_stats(c, &st);
    ck_assert_uint_le(st.bytes, budget);
    ck_assert_uint_eq(st.budget_bytes, budget);
    ck_assert_uint_eq(st.refused_budget, (uint64_t)refused);
    ck_assert_uint_eq(st.inserts, 2 + 5 - (uint64_t)refused);
    ck_assert_uint_eq(st.index_bytes, 10 * sizeof(void *));
    ck_assert_int_eq(bfs_samplecache_lookup(c, 3, 1, &im), 0); /* still there */
    ck_assert(entry_ok(&im, 3, 1));
    ck_assert_int_eq(bfs_samplecache_lookup(c, 3, 2, &im), 0);
    /* an entry larger than the whole budget */
    ck_assert_int_eq(bfs_samplecache_reserve(c, 9, 1, 1000, 1000, &en, &px), -ENOSPC);
    bfs_samplecache_destroy(c);
}
END_TEST

/* Workers insert and look up overlapping keys of random sizes; a watcher samples bytes. */
typedef struct race_ctx {
    bfs_samplecache *c;
    uint64_t budget;
    int seed;
    _Atomic int stop, bad;
} race_ctx;

static void *race_worker(void *arg)
{
    race_ctx *r = arg;
    uint64_t s = (uint64_t)r->seed;
    for (int i = 0; i < 20000; i++) {
        uint64_t idx = tu_rand(&s) % 64;
        int scale = 1 << (tu_rand(&s) % 4);
        int w = 1 + (int)((idx * 7 + (uint64_t)scale) % 40), h = 1 + (int)(idx % 13);
        bfs_samplecache_image im;
        if (bfs_samplecache_lookup(r->c, idx, scale, &im) == 0) {
            if (!entry_ok(&im, idx, scale) || im.w != w || im.h != h)
                atomic_store(&r->bad, 1);
            continue;
        }
        bfs_samplecache_entry *en;
        uint8_t *px;
        int rc = bfs_samplecache_reserve(r->c, idx, scale, w, h, &en, &px);
        if (rc == -ENOSPC)
            continue;
        if (rc) {
            atomic_store(&r->bad, 1);
            continue;
        }
        if (i % 17 == 0) { /* a failed fill */
            bfs_samplecache_abandon(r->c, en);
            continue;
        }
        fill_entry(px, w, h, idx, scale);
        bfs_samplecache_publish(r->c, en, &im);
        if (!entry_ok(&im, idx, scale))
            atomic_store(&r->bad, 1);
    }
    return NULL;
}

static void *race_watch(void *arg)
{
    race_ctx *r = arg;
    while (!atomic_load(&r->stop)) {
        bfs_samplecache_stats st;
        bfs_samplecache_get_stats(r->c, &st);
        if (st.bytes > r->budget)
            atomic_store(&r->bad, 2);
    }
    return NULL;
}

START_TEST(table_concurrent_budget)
{
    race_ctx r = {.budget = 64 * 1024};
    atomic_init(&r.stop, 0);
    atomic_init(&r.bad, 0);
    ck_assert_int_eq(bfs_samplecache_create(64, r.budget, &r.c), 0);
    pthread_t t[4], watch;
    race_ctx rr[4];
    ck_assert_int_eq(pthread_create(&watch, NULL, race_watch, &r), 0);
    for (int i = 0; i < 4; i++) {
        rr[i].c = r.c, rr[i].budget = r.budget, rr[i].seed = i + 1;
        atomic_init(&rr[i].stop, 0);
        atomic_init(&rr[i].bad, 0);
        ck_assert_int_eq(pthread_create(&t[i], NULL, race_worker, &rr[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        int bad = atomic_load(&rr[i].bad);
        ck_assert_msg(bad == 0, "worker %d: wrong pixels, size or error from the cache", i);
    }
    atomic_store(&r.stop, 1);
    pthread_join(watch, NULL);
    int over = atomic_load(&r.bad);
    ck_assert_msg(over == 0, "bytes went above the budget while workers ran");
    bfs_samplecache_stats st;
    bfs_samplecache_get_stats(r.c, &st);
    ck_assert_uint_le(st.bytes, r.budget);
    ck_assert_uint_gt(st.hits, 0);
    ck_assert_uint_gt(st.refused_budget, 0); /* the budget was reached */
    /* bytes = exactly what the published entries hold */
    uint64_t sum = 0;
    for (uint64_t idx = 0; idx < 64; idx++)
        for (int scale = 1; scale <= 8; scale *= 2) {
            bfs_samplecache_image im;
            if (bfs_samplecache_lookup(r.c, idx, scale, &im) == 0)
                sum += (uint64_t)im.w * im.h * 3;
        }
    ck_assert_uint_ge(st.bytes, sum);
    ck_assert_uint_le(st.bytes, sum + st.inserts * 64);
    bfs_samplecache_destroy(r.c);
}
END_TEST

/* ---- engine: cache on vs off, byte for byte ------------------------------------------------ */

static char *tmp;
static char folder[4096], packed[4096], rawpacked[4096], bigfolder[4096];

/* An extra class holding one image of every kind, sizes 60..260. */
static void add_kinds_class(const char *dir, int per_kind, int min_side, int max_side,
                            uint64_t seed)
{
    char cdir[4200];
    snprintf(cdir, sizeof cdir, "%s/class_kinds", dir);
    ck_assert(mkdir(cdir, 0755) == 0 || errno == EEXIST);
    uint64_t s = seed;
    for (size_t k = 0; k < NKINDS; k++)
        for (int i = 0; i < per_kind; i++) {
            int span = max_side - min_side + 1;
            int w = min_side + (int)(tu_rand(&s) % (uint64_t)span);
            int h = min_side + (int)(tu_rand(&s) % (uint64_t)span);
            uint8_t *jpg;
            size_t len;
            make_kind(&KINDS[k], w, h, seed + k * 100 + (uint64_t)i, &jpg, &len);
            char p[4300];
            snprintf(p, sizeof p, "%s/k%02zu_%d.jpg", cdir, k, i);
            ck_assert_int_eq(tu_write_file(p, jpg, len), 0);
            free(jpg);
        }
}

static void pack(const char *src, const char *out, int raw)
{
    bfs_pack_opts po = {.jobs = 2, .raw = raw};
    bfs_pack_report rep;
    char err[512];
    ck_assert_msg(bfs_pack(src, out, &po, &rep, NULL, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(rep.nskipped, 0);
    bfs_pack_report_free(&rep);
}

static void setup(void)
{
    tmp = tu_mkdtemp("check_samplecache");
    ck_assert_ptr_nonnull(tmp);
    snprintf(folder, sizeof folder, "%s/src", tmp);
    snprintf(packed, sizeof packed, "%s/data.bfs", tmp);
    snprintf(rawpacked, sizeof rawpacked, "%s/raw.bfs", tmp);
    snprintf(bigfolder, sizeof bigfolder, "%s/big", tmp);
    /* 420 mostly, every 7th progressive, 11th gray, 13th 4:4:4 (tu_make_imagefolder) */
    ck_assert_int_eq(tu_make_imagefolder(folder, 2, 12, 40, 180, 23), 0);
    add_kinds_class(folder, 2, 60, 260, 5);
    pack(folder, packed, 0);
}

static void teardown(void)
{
    tu_rmtree(tmp);
    free(tmp);
}

static bfs_engine *engine(const char *src, const char *opts)
{
    bfs_pipeline_opts o;
    bfs_pipeline_defaults(&o);
    char err[1024];
    ck_assert_msg(bfs_pipeline_parse(&o, opts, err, sizeof err) == 0, "%s: %s", opts, err);
    ck_assert_msg(bfs_pipeline_finish(&o, err, sizeof err) == 0, "%s: %s", opts, err);
    bfs_engine *e;
    ck_assert_msg(bfs_engine_create(src, &o, &e, err, sizeof err) == 0, "%s", err);
    return e;
}

typedef struct run_result {
    uint8_t *bytes; /* every batch of every epoch, concatenated */
    size_t size;
    bfs_samplecache_stats sc;
    bfs_stage_stats stages;
} run_result;

/* Every batch of epochs 0..epochs-1, in a shuffled batch order, with `threads` workers
 * and prefetch (so samples of different batches decode concurrently). */
static run_result run(const char *src, const char *opts, int epochs, int threads)
{
    bfs_engine *e = engine(src, opts);
    uint64_t nb = bfs_engine_batches(e);
    run_result r = {0};
    for (uint64_t k = 0; k < nb; k++)
        r.size += bfs_engine_batch_bytes(e, 0, k);
    /* room for every epoch's finished batches, so that none is evicted: with room for one
     * epoch, the last epoch's batches, which no reader will read, and this epoch's
     * prefetched ones, which no registered reader awaits either, competed for it, and a
     * prefetched batch evicted before its get was computed again: its bad sample counted
     * twice (bad_samples 10 of 6 once in five runs under load) */
    bfs_exec *x;
    ck_assert_int_eq(bfs_exec_create(e, threads, r.size * (size_t)epochs, &x), 0);
    r.size *= (size_t)epochs;
    r.bytes = malloc(r.size);
    ck_assert_ptr_nonnull(r.bytes);
    size_t off = 0;
    for (int ep = 0; ep < epochs; ep++) {
        for (uint64_t k = 0; k < nb; k++)
            ck_assert_int_eq(bfs_exec_prefetch(x, (uint64_t)ep, k), 0);
        for (uint64_t i = 0; i < nb; i++) {
            uint64_t k = (i * 5 + (uint64_t)ep) % nb; /* another order each epoch... */
            if (nb % 5 == 0)
                k = i; /* ...when 5 and nb are coprime */
            bfs_batch *b;
            char err[512];
            ck_assert_msg(bfs_exec_get(x, (uint64_t)ep, k, &b, err, sizeof err) == 0, "%s", err);
            size_t at = off;
            for (uint64_t j = 0; j < k; j++)
                at += bfs_engine_batch_bytes(e, 0, j);
            ck_assert_uint_eq(bfs_batch_size(b), bfs_engine_batch_bytes(e, 0, k));
            memcpy(r.bytes + at, bfs_batch_data(b), bfs_batch_size(b));
            bfs_batch_release(b);
        }
        for (uint64_t k = 0; k < nb; k++)
            off += bfs_engine_batch_bytes(e, 0, k);
    }
    bfs_exec_stats xs;
    bfs_exec_get_stats(x, &xs);
    ck_assert_uint_eq(xs.evictions, 0);
    ck_assert_uint_eq(xs.computed, nb * (uint64_t)epochs); /* each batch once */
    r.stages = xs.stages;
    bfs_exec_destroy(x);
    bfs_engine_sample_cache_stats(e, &r.sc);
    bfs_engine_destroy(e);
    return r;
}

/* The same pipeline with the cache off and on: identical bytes; returns the cached run's
 * cache counters. min_hits: hits the cached run must have had. */
static bfs_samplecache_stats same_bytes(const char *src, const char *opts, const char *cache,
                                        int epochs, uint64_t min_hits)
{
    char on[512];
    snprintf(on, sizeof on, "%s,%s", opts, cache);
    run_result off = run(src, opts, epochs, 2);
    run_result hot = run(src, on, epochs, 3);
    ck_assert_uint_eq(off.sc.budget_bytes, 0); /* off really is off */
    ck_assert_uint_eq(off.sc.hits + off.sc.misses, 0);
    ck_assert_uint_eq(off.size, hot.size);
    size_t first = 0;
    while (first < off.size && off.bytes[first] == hot.bytes[first])
        first++;
    ck_assert_msg(first == off.size,
                  "%s on %s: cached bytes differ from uncached at byte %zu of %zu", on, src, first,
                  off.size);
    ck_assert_uint_eq(off.stages.bad_samples, hot.stages.bad_samples);
    ck_assert_uint_le(hot.sc.bytes, hot.sc.budget_bytes);
    ck_assert_msg(hot.sc.hits >= min_hits, "%s on %s: %llu hits, expected >= %llu", on, src,
                  (unsigned long long)hot.sc.hits, (unsigned long long)min_hits);
    free(off.bytes);
    free(hot.bytes);
    return hot.sc;
}

static uint64_t samples_of(const char *src)
{
    bfs_engine *e = engine(src, "batch=1");
    uint64_t n = bfs_engine_samples(e);
    bfs_engine_destroy(e);
    return n;
}

START_TEST(on_off_identical_train_eval_none)
{
    static const char *pipes[] = {
        "batch=7,size=32,seed=3,augment=train",
        "batch=7,size=48,seed=3,augment=train,dtype=f16,layout=nchw",
        "batch=5,size=40x24,seed=9,augment=eval,drop_last=0",
        "batch=6,size=36,augment=none,shuffle=none,drop_last=0,dtype=f32",
    };
    const char *srcs[] = {folder, packed};
    uint64_t n = samples_of(packed);
    for (size_t s = 0; s < 2; s++)
        for (size_t p = 0; p < sizeof pipes / sizeof pipes[0]; p++) {
            bfs_samplecache_stats st =
                same_bytes(srcs[s], pipes[p], "sample_cache_mb=64", 3, n / 2);
            /* everything fits: no refusals; epochs 1 and 2 mostly hit (a sample whose
             * crop picks another IDCT scale than before misses once more) */
            ck_assert_uint_eq(st.refused_budget, 0);
            ck_assert_uint_gt(st.inserts, 0);
            ck_assert_uint_ge(st.hits, st.misses);
        }
}
END_TEST

START_TEST(on_off_identical_raw_source)
{
    pack(folder, rawpacked, 1);
    uint64_t n = samples_of(rawpacked);
    same_bytes(rawpacked, "batch=7,size=32,seed=4", "sample_cache_mb=64", 3, n);
    same_bytes(rawpacked, "batch=7,size=40,augment=eval", "sample_cache_mb=64", 2, n / 2);
}
END_TEST

START_TEST(on_off_identical_scaled_idct)
{
    /* large images, small output: the IDCT scale varies with each epoch's crop, so one
     * sample gets entries at several scales */
    ck_assert_int_eq(tu_make_imagefolder(bigfolder, 1, 6, 600, 1000, 41), 0);
    add_kinds_class(bigfolder, 1, 500, 900, 77);
    uint64_t n = samples_of(bigfolder);
    run_result probe = run(bigfolder, "batch=4,size=24,seed=2,sample_cache_mb=256", 4, 2);
    ck_assert_uint_gt(probe.stages.decode_scaled, 0);
    free(probe.bytes);
    bfs_samplecache_stats st =
        same_bytes(bigfolder, "batch=4,size=24,seed=2", "sample_cache_mb=256", 4, 1);
    ck_assert_uint_gt(st.inserts, n); /* some samples at more than one scale */
    same_bytes(bigfolder, "batch=4,size=40,augment=eval", "sample_cache_mb=256", 2, n / 2);
}
END_TEST

START_TEST(tiny_budget_identical_and_bounded)
{
    /* 1 MiB holds a few of these images (up to 260x260x3 = 200 KB): most are refused */
    uint64_t n = samples_of(packed);
    bfs_samplecache_stats st =
        same_bytes(packed, "batch=7,size=32,seed=8,augment=train", "sample_cache_mb=1", 3, 1);
    ck_assert_uint_le(st.bytes, 1u << 20);
    ck_assert_uint_gt(st.refused_budget, 0);
    ck_assert_uint_lt(st.inserts, n);
    ck_assert_uint_eq(st.budget_bytes, 1u << 20);
}
END_TEST

START_TEST(corrupt_sample_same_outcome)
{
    /* A JPEG cut short: crops in its upper part decode, the whole image does not. A
     * folder's file is decoded whole the first time it is used (checked), so it is bad in
     * every epoch, cached or not, whatever the crop. */
    char dir[4200], cdir[4300], p[4400];
    snprintf(dir, sizeof dir, "%s/trunc", tmp);
    ck_assert_int_eq(tu_make_imagefolder(dir, 1, 6, 80, 120, 9), 0);
    snprintf(cdir, sizeof cdir, "%s/class_000", dir);
    uint8_t *jpg;
    size_t len;
    tu_jpeg_opts jo = {
        .width = 160, .height = 480, .quality = 90, .subsamp = TJSAMP_420, .seed = 3};
    ck_assert_int_eq(tu_make_jpeg(&jo, &jpg, &len), 0);
    snprintf(p, sizeof p, "%s/img_00000.jpg", cdir); /* sample 0 */
    ck_assert_int_eq(tu_write_file(p, jpg, len * 2 / 3), 0);
    /* the premise: a top region decodes, the whole image does not */
    bfs_decoder *d;
    ck_assert_int_eq(bfs_decoder_create(&d), 0);
    bfs_image_info info;
    ck_assert_int_eq(bfs_decoder_probe(jpg, len * 2 / 3, &info), 0);
    bfs_pixels px;
    ck_assert_int_eq(bfs_decoder_decode(d, jpg, len * 2 / 3, &info, 1, 10, 10, 100, 100, &px), 0);
    uint8_t *whole = malloc(160 * 480 * 3);
    ck_assert_int_ne(bfs_decoder_decode_image(d, jpg, len * 2 / 3, &info, 1, whole, 160 * 480 * 3),
                     0);
    free(whole);
    bfs_decoder_destroy(d);
    free(jpg);
    /* small crops anywhere: over 6 epochs some fall in the decodable part, and yet */
    const char *opts = "batch=3,size=16,seed=1,scale=0.02:0.05,shuffle=none";
    run_result off = run(dir, opts, 6, 2);
    ck_assert_uint_eq(off.stages.bad_samples, 6); /* substituted in each of the 6 epochs */
    same_bytes(dir, opts, "sample_cache_mb=16", 6, 5);
    free(off.bytes);
}
END_TEST

static Suite *samplecache_suite(void)
{
    Suite *s = suite_create("samplecache");
    TCase *t = tcase_create("table");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, whole_image_equals_region_decode);
    tcase_add_test(t, raw_decode_contract);
    tcase_add_test(t, table_basics);
    tcase_add_test(t, table_concurrent_budget);
    suite_add_tcase(s, t);
    TCase *e = tcase_create("engine");
    tcase_add_checked_fixture(e, setup, teardown);
    tcase_set_timeout(e, 300);
    tcase_add_test(e, on_off_identical_train_eval_none);
    tcase_add_test(e, on_off_identical_raw_source);
    tcase_add_test(e, on_off_identical_scaled_idct);
    tcase_add_test(e, tiny_budget_identical_and_bounded);
    tcase_add_test(e, corrupt_sample_same_outcome);
    suite_add_tcase(s, e);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(samplecache_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
