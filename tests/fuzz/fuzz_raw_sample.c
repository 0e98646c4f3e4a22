/*
 * fuzz_raw_sample.c — libFuzzer target for raw samples (BFS_KIND_RAW: an lz4 block of
 * width * height * 3 RGB bytes, mkbatchfs --raw): the decoder's lz4 path
 * (engine/decode.c, decode_raw) and what the engine's render() does with its pixels.
 *
 * Input: 20 bytes of facts, then a payload.
 *   [0]      flags: bit 0 compress (the target lz4-compresses pixels taken from the
 *            payload, so deep paths are reached with valid blocks), bit 1 wild table facts
 *            (any int width, height, raw_size instead of what a .bfs table allows),
 *            bit 2 truncate the compressed block, bit 3 flip one of its bytes, bits 4-5
 *            augment (none, eval, train), bit 6 also ask for a bad scale and region
 *   [1], [2] width, height (1..48 when table facts); [3] output side (1..64)
 *   [4..11]  seed, epoch and index of the geometry; [12..15] wild width, height (int16);
 *   [16..19] wild raw_size
 * Checked (decode.h, bfs.h, docs/format.md):
 *  - no crash; a failed decode returns BFS_E_RAW_DATA (block does not decompress to
 *    raw_size, or facts that cannot describe a raw sample) or -EINVAL (region, scale,
 *    dst), nothing else; a block that cannot decode to raw_size bytes (more than 255
 *    output bytes per input byte) is refused before the output buffer is allocated;
 *  - a valid block (compressed here, table facts) decodes, and its pixels equal the
 *    pixels compressed, both through bfs_decoder_decode and bfs_decoder_decode_image;
 *  - any success covers the whole image at scale 1 (x0 = y0 = 0, w x h = width x
 *    height, stride 3 * width), every byte readable; raw samples get scale 1 from
 *    bfs_decoder_max_scale, and other scales or regions outside the image are -EINVAL;
 *  - the engine's render path: bfs_augment_geometry, resize_plan_extent (the extent of
 *    resize_source_extent), decode of that region, the crop render() hands to
 *    resize_rgb8 (with the coefficients the plan kept); the resized window equals the
 *    resize of the whole decoded image, computed without a plan (the crop hands over the
 *    right pixels, and the kept coefficients are the right ones).
 */
#include "engine/augment.h"
#include "engine/dataset/bfs.h"
#include "engine/decode.h"
#include "base/err.h"
#include "engine/pipeline.h"
#include "engine/resize.h"

#include <errno.h>
#include <lz4.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_raw_sample: %s:%d: contract violated: %s\n", __FILE__, __LINE__, \
                    #cond);                                                                        \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define FACTS 20

static volatile uint8_t sink;
static bfs_decoder *dec;
static resize_scratch rs;

static void touch(const uint8_t *p, size_t n)
{
    uint8_t x = 0;
    for (size_t i = 0; i < n; i++)
        x ^= p[i];
    sink = x;
}

static uint64_t rd(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* A resize's output window, row by row. */
typedef struct window {
    uint8_t *rgb;
    int w, h, rows;
} window;

static void store_cb(void *ctx, int row, const uint8_t *rgb, int width)
{
    window *win = ctx;
    CHECK(row == win->rows && row < win->h && width == win->w);
    memcpy(win->rgb + (size_t)row * 3 * (size_t)width, rgb, (size_t)width * 3);
    win->rows++;
}

/* A successful raw decode: the whole image, at scale 1. */
static void check_pixels(const bfs_pixels *px, const bfs_image_info *in)
{
    CHECK(px->scale == 1 && px->x0 == 0 && px->y0 == 0);
    CHECK(px->w == in->width && px->h == in->height && px->img_w == in->width &&
          px->img_h == in->height);
    CHECK(px->stride == (size_t)in->width * 3 && px->rgb != NULL);
    touch(px->rgb, px->stride * (size_t)px->h);
}

/* render() in engine/engine.c, for a raw sample: geometry, source extent, decode of that
 * region, the crop handed to the resize. The window must equal the same resize fed the
 * whole image (whole = the full decode, packed rows). */
static void render_like_engine(const uint8_t *blk, size_t len, const bfs_image_info *in,
                               const uint8_t *whole, const uint8_t *f)
{
    static const int augs[3] = {BFS_AUG_NONE, BFS_AUG_EVAL, BFS_AUG_TRAIN};
    bfs_pipeline_opts o;
    bfs_pipeline_defaults(&o);
    o.augment = augs[((f[0] >> 4) & 3) % 3];
    o.out_w = 1u + f[3] % 64;
    o.out_h = 1u + (f[3] + f[4]) % 64;
    o.seed = rd(f + 4, 4);
    char err[BFS_PIPELINE_ERRLEN];
    CHECK(bfs_pipeline_finish(&o, err, sizeof err) == 0);
    bfs_geometry g;
    CHECK(bfs_augment_geometry(&o, f[8], rd(f + 9, 3), in->width, in->height, &g) == 0);
    resize_spec *sp = &g.spec;
    CHECK(bfs_decoder_max_scale(in, sp->box[2] - sp->box[0], sp->box[3] - sp->box[1], sp->out_w,
                                sp->out_h) == 1);
    int ox = g.origin_x, oy = g.origin_y;
    int x0, y0, x1, y1, e[4];
    CHECK(resize_source_extent(sp, &e[0], &e[1], &e[2], &e[3]) == 0);
    CHECK(resize_plan_extent(sp, &rs, &x0, &y0, &x1, &y1) == 0); /* as render() does */
    CHECK(x0 == e[0] && y0 == e[1] && x1 == e[2] && y1 == e[3]);
    CHECK(x0 >= 0 && y0 >= 0 && x0 < x1 && y0 < y1 && x1 + ox <= in->width &&
          y1 + oy <= in->height);
    bfs_pixels px;
    CHECK(bfs_decoder_decode(dec, blk, len, in, 1, x0 + ox, y0 + oy, x1 + ox, y1 + oy, &px) == 0);
    check_pixels(&px, in);
    /* the crop render() hands over */
    const uint8_t *pix = px.rgb;
    int bx = px.x0 - ox, by = px.y0 - oy, bw = px.w, bh = px.h;
    if (bx < 0)
        pix += (size_t)(-bx) * 3, bw += bx, bx = 0;
    if (by < 0)
        pix += (size_t)(-by) * px.stride, bh += by, by = 0;
    bw = bx + bw > sp->in_w ? sp->in_w - bx : bw;
    bh = by + bh > sp->in_h ? sp->in_h - by : bh;
    CHECK(bx <= x0 && by <= y0 && bx + bw >= x1 && by + bh >= y1); /* covers the extent */
    size_t wsize = (size_t)sp->win_w * (size_t)sp->win_h * 3;
    window a = {malloc(wsize), sp->win_w, sp->win_h, 0};
    window b = {malloc(wsize), sp->win_w, sp->win_h, 0};
    CHECK(a.rgb && b.rgb);
    resize_src src = {pix, px.stride, bx, by, bw, bh};
    CHECK(resize_rgb8(sp, &src, store_cb, &a, &rs) == 0 && a.rows == a.h);
    /* reference: the spec's whole image, from the full decode */
    resize_src ref = {whole + (size_t)oy * (size_t)in->width * 3 + (size_t)ox * 3,
                      (size_t)in->width * 3,
                      0,
                      0,
                      sp->in_w,
                      sp->in_h};
    CHECK(resize_rgb8(sp, &ref, store_cb, &b, &rs) == 0 && b.rows == b.h);
    CHECK(memcmp(a.rgb, b.rgb, wsize) == 0);
    free(a.rgb);
    free(b.rgb);
}

/* Decode blk with facts in; want_pixels (raw_size bytes) when it must decode to them. */
static void decode_and_check(const uint8_t *blk, size_t len, const bfs_image_info *in,
                             const uint8_t *want_pixels, const uint8_t *f)
{
    int w = in->width, h = in->height;
    int plausible = w > 0 && h > 0 && (uint64_t)w * (uint64_t)h * 3 == in->raw_size;
    int rx1 = w > 0 ? w : 1, ry1 = h > 0 ? h : 1;
    bfs_pixels px;
    memset(&px, 0, sizeof px);
    int rc = bfs_decoder_decode(dec, blk, len, in, 1, 0, 0, rx1, ry1, &px);
    if (rc) {
        CHECK(rc == BFS_E_RAW_DATA || rc == -EINVAL || rc == -ENOMEM);
        CHECK(!want_pixels);
        /* the whole-image form fails too */
        uint8_t one[3];
        int rc2 = bfs_decoder_decode_image(dec, blk, len, in, 1, one, sizeof one);
        CHECK(rc2 == BFS_E_RAW_DATA || rc2 == -EINVAL || rc2 == -ENOMEM);
        return;
    }
    CHECK(plausible); /* facts that cannot describe a raw sample never decode */
    check_pixels(&px, in);
    size_t n = in->raw_size;
    uint8_t *copy = malloc(n);
    CHECK(copy != NULL);
    memcpy(copy, px.rgb, n);
    if (want_pixels)
        CHECK(memcmp(copy, want_pixels, n) == 0);

    /* the decoded-sample cache's form: the same bytes into dst, exactly sized */
    uint8_t *dst = malloc(n + 1);
    CHECK(dst != NULL);
    CHECK(bfs_decoder_decode_image(dec, blk, len, in, 1, dst, n) == 0);
    CHECK(memcmp(dst, copy, n) == 0);
    CHECK(bfs_decoder_decode_image(dec, blk, len, in, 1, dst, n - 1) == -EINVAL);
    CHECK(bfs_decoder_decode_image(dec, blk, len, in, 2, dst, n + 1) == -EINVAL);
    free(dst);

    /* raw samples are decoded at scale 1 only, inside the image */
    CHECK(bfs_decoder_max_scale(in, w, h, 1, 1) == 1);
    if (f[0] & 0x40) {
        CHECK(bfs_decoder_decode(dec, blk, len, in, 2, 0, 0, (w + 1) / 2, (h + 1) / 2, &px) ==
              -EINVAL);
        CHECK(bfs_decoder_decode(dec, blk, len, in, 1, 0, 0, w + 1, h, &px) == -EINVAL);
        CHECK(bfs_decoder_decode(dec, blk, len, in, 1, 0, 0, w, 0, &px) == -EINVAL);
        CHECK(bfs_decoder_decode(dec, blk, len, in, 1, -1, 0, w, h, &px) == -EINVAL);
    }
    /* a crop inside the image */
    int cx0 = f[12] % w, cy0 = f[13] % h;
    CHECK(bfs_decoder_decode(dec, blk, len, in, 1, cx0, cy0, cx0 + 1 + f[14] % (w - cx0),
                             cy0 + 1 + f[15] % (h - cy0), &px) == 0);
    check_pixels(&px, in);
    CHECK(memcmp(px.rgb, copy, n) == 0);

    render_like_engine(blk, len, in, copy, f);
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < FACTS)
        return 0;
    if (!dec)
        CHECK(bfs_decoder_create(&dec) == 0);
    const uint8_t *f = data, *pay = data + FACTS;
    size_t plen = size - FACTS;
    bfs_image_info in = {.flags = BFS_KIND_RAW};
    int wild = f[0] & 2;
    if (wild) {
        in.width = (int16_t)rd(f + 12, 2);
        in.height = (int16_t)rd(f + 14, 2);
        in.raw_size = (uint32_t)rd(f + 16, 4);
        if (f[16] == 0xFF) /* often consistent, so large images are reached too */
            in.raw_size = (uint32_t)((uint64_t)(uint16_t)in.width * (uint16_t)in.height * 3);
    } else { /* what a .bfs table can say (bfs_get_sample checks these) */
        in.width = 1 + f[1] % 48;
        in.height = 1 + f[2] % 48;
        in.raw_size = (uint32_t)(in.width * in.height * 3);
    }

    if (!(f[0] & 1) || wild) { /* the payload is the block */
        decode_and_check(pay, plen, &in, NULL, f);
        return 0;
    }
    /* compress pixels taken from the payload (repeated to fill the image) */
    size_t n = in.raw_size;
    uint8_t *pixels = malloc(n);
    CHECK(pixels != NULL);
    for (size_t i = 0; i < n; i++)
        pixels[i] = plen ? pay[i % plen] : (uint8_t)i;
    int bound = LZ4_compressBound((int)n);
    char *blk = malloc((size_t)bound);
    CHECK(blk != NULL);
    int zn = LZ4_compress_default((const char *)pixels, blk, (int)n, bound);
    CHECK(zn > 0);
    size_t len = (size_t)zn;
    int mutated = 0;
    if (f[0] & 4) { /* truncated: never the pixels */
        len -= 1 + f[5] % len;
        mutated = 1;
    }
    if ((f[0] & 8) && len) {
        blk[f[6] % len] ^= (char)(1u << (f[7] & 7));
        mutated = 1;
    }
    /* exactly len bytes, so ASan sees a read past the block */
    uint8_t *exact = malloc(len ? len : 1);
    CHECK(exact != NULL);
    memcpy(exact, blk, len);
    decode_and_check(exact, len, &in, mutated ? NULL : pixels, f);
    free(exact);
    free(blk);
    free(pixels);
    return 0;
}
