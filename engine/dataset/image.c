/*
 * image.c — format sniffing, PNG (libspng) and WebP (libwebp) whole-image decoding to
 * Pillow's RGB, and the any-format check (see image.h).
 *
 * PNG: libspng decodes to the file's own sample layout (SPNG_FMT_RAW: big-endian, sub-byte
 * depths packed), and the rows are converted here, since Pillow's rules (16-bit gray
 * clipped, 16-bit colour by its high byte, palette padded with black) are not libspng's
 * conversions. 8-bit RGB, the common case, decodes straight into the destination.
 */
#include "engine/dataset/image.h"
#include "engine/dataset/bfs.h"
#include "engine/dataset/jpeg.h"
#include "base/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <spng.h>
#include <webp/decode.h>

/* The .bfs table's width and height are 16-bit. */
#define MAX_SIDE 65535

/* Ancillary chunks libspng keeps in memory (text, ICC profiles): bounded so a file of many
 * large ones cannot take the process's memory (libspng refuses a chunk over the limit as
 * well, IDAT included: 256 MiB holds any IDAT a writer splits, and Pillow refuses text past
 * 64 MB anyway). */
#define CHUNK_LIMIT (256u << 20)

static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

int bfs_image_sniff(const uint8_t *data, size_t len)
{
    if (len >= 8 && !memcmp(data, png_sig, 8))
        return BFS_IMAGE_PNG;
    if (len >= 12 && !memcmp(data, "RIFF", 4) && !memcmp(data + 8, "WEBP", 4))
        return BFS_IMAGE_WEBP;
    if (len >= 2 && data[0] == 0xFF && data[1] == 0xD8)
        return BFS_IMAGE_JPEG;
    return BFS_IMAGE_UNKNOWN;
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int size_ok(uint64_t w, uint64_t h)
{
    return w <= MAX_SIDE && h <= MAX_SIDE && w * h <= BFS_JPEG_MAX_PIXELS;
}

/* PNG: signature, then IHDR first (length 13): width, height, depth, colour type,
 * compression, filter, interlace. */
static int png_probe(const uint8_t *data, size_t len, bfs_image_facts *f)
{
    if (len < 8 + 8 + 13 || be32(data + 8) != 13 || memcmp(data + 12, "IHDR", 4))
        return BFS_E_PNG_DATA;
    const uint8_t *p = data + 16;
    uint32_t w = be32(p), h = be32(p + 4);
    int depth = p[8], ct = p[9];
    int ok_depth = ct == 0   ? depth == 1 || depth == 2 || depth == 4 || depth == 8 || depth == 16
                   : ct == 3 ? depth == 1 || depth == 2 || depth == 4 || depth == 8
                   : ct == 2 || ct == 4 || ct == 6 ? depth == 8 || depth == 16
                                                   : 0;
    if (!w || !h || w > INT32_MAX || h > INT32_MAX || !ok_depth || p[10] || p[11] || p[12] > 1)
        return BFS_E_PNG_DATA;
    if (!size_ok(w, h))
        return BFS_E_IMAGE_TOO_LARGE;
    f->width = (int)w, f->height = (int)h;
    f->flags = BFS_KIND_CODEC;
    return 0;
}

static int webp_probe(const uint8_t *data, size_t len, bfs_image_facts *f)
{
    WebPBitstreamFeatures ft;
    VP8StatusCode st = WebPGetFeatures(data, len, &ft);
    if (st != VP8_STATUS_OK)
        return st == VP8_STATUS_UNSUPPORTED_FEATURE ? BFS_E_WEBP_UNSUPPORTED : BFS_E_WEBP_DATA;
    if (ft.has_animation)
        return BFS_E_WEBP_UNSUPPORTED;
    if (ft.width <= 0 || ft.height <= 0)
        return BFS_E_WEBP_DATA;
    if (!size_ok((uint64_t)ft.width, (uint64_t)ft.height))
        return BFS_E_IMAGE_TOO_LARGE; /* WebP's 14-bit sides cannot: kept for the reader */
    f->width = ft.width, f->height = ft.height;
    f->flags = BFS_KIND_CODEC | BFS_F_WEBP;
    return 0;
}

int bfs_image_probe(const uint8_t *data, size_t len, bfs_image_facts *f)
{
    switch (bfs_image_sniff(data, len)) {
    case BFS_IMAGE_PNG:
        return png_probe(data, len, f);
    case BFS_IMAGE_WEBP:
        return webp_probe(data, len, f);
    default:
        return BFS_E_NOT_JPEG;
    }
}

static void set_why(char *why, size_t whylen, const char *msg)
{
    if (why && whylen)
        snprintf(why, whylen, "%s", msg);
}

/* libspng allocates through these: the calls are this object's, so the test build's
 * --wrap fault shims (tests/fault.h) see them. A failed one is remembered for the thread's
 * decode under way: libspng reports zlib's running out inside inflate as a corrupt stream
 * (SPNG_EIDAT_STREAM), which must not make a sample bad. */
static _Thread_local int spng_alloc_failed;

static void *spng_malloc_cb(size_t n)
{
    void *p = malloc(n);
    spng_alloc_failed |= !p;
    return p;
}
static void *spng_realloc_cb(void *p, size_t n)
{
    void *q = realloc(p, n);
    spng_alloc_failed |= !q && n;
    return q;
}
static void *spng_calloc_cb(size_t n, size_t m)
{
    void *p = calloc(n, m);
    spng_alloc_failed |= !p;
    return p;
}
static void spng_free_cb(void *p)
{
    free(p);
}

/* One row of the file's samples (SPNG_FMT_RAW) to Pillow's RGB. */
static void png_row(const uint8_t *in, uint8_t *out, int w, int ct, int depth,
                    const uint8_t pal[256][3])
{
    switch (ct) {
    case 0:
    case 3:
        for (int x = 0; x < w; x++) {
            unsigned v;
            if (depth == 16) {
                v = (unsigned)in[2 * x] << 8 | in[2 * x + 1];
                v = v > 255 ? 255 : v; /* Pillow's I;16 -> L clips */
            } else if (depth == 8) {
                v = in[x];
            } else {
                int per = 8 / depth, sh = 8 - depth * (x % per + 1);
                v = (unsigned)(in[x / per] >> sh) & ((1u << depth) - 1);
                if (ct == 0)
                    v = v * 255 / ((1u << depth) - 1); /* 1: x255, 2: x85, 4: x17 */
            }
            if (ct == 3) {
                memcpy(out + 3 * x, pal[v], 3);
            } else {
                out[3 * x] = out[3 * x + 1] = out[3 * x + 2] = (uint8_t)v;
            }
        }
        return;
    case 4: { /* gray + alpha: the gray sample's (high) byte */
        int step = depth == 16 ? 4 : 2;
        for (int x = 0; x < w; x++)
            out[3 * x] = out[3 * x + 1] = out[3 * x + 2] = in[step * x];
        return;
    }
    default: { /* 2 (RGB) or 6 (RGBA), 8 or 16-bit: each sample's (high) byte */
        int bps = depth / 8, step = (ct == 6 ? 4 : 3) * bps;
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++)
                out[3 * x + c] = in[step * x + c * bps];
        return;
    }
    }
}

static int png_err(int rc, char *why, size_t whylen)
{
    if (spng_alloc_failed)
        return -ENOMEM;
    /* SPNG_EZLIB(_INIT): libspng 0.7's inflateInit failed, which only running out of
     * memory makes it do (data errors are SPNG_EIDAT_STREAM and the like) */
    if (rc == SPNG_EMEM || rc == SPNG_EZLIB || rc == SPNG_EZLIB_INIT)
        return -ENOMEM;
    set_why(why, whylen, spng_strerror(rc));
    return BFS_E_PNG_DATA;
}

static int png_decode(const uint8_t *data, size_t len, const bfs_image_facts *f, uint8_t *dst,
                      char *why, size_t whylen)
{
    struct spng_alloc alloc = {spng_malloc_cb, spng_realloc_cb, spng_calloc_cb, spng_free_cb};
    uint8_t *buf = NULL;
    int rc;
    spng_alloc_failed = 0;
    spng_ctx *ctx = spng_ctx_new2(&alloc, 0);
    if (!ctx)
        return -ENOMEM;
    struct spng_ihdr ih;
    if ((rc = spng_set_png_buffer(ctx, data, len)) ||
        (rc = spng_set_image_limits(ctx, MAX_SIDE, MAX_SIDE)) ||
        (rc = spng_set_chunk_limits(ctx, CHUNK_LIMIT, CHUNK_LIMIT)) ||
        (rc = spng_get_ihdr(ctx, &ih))) {
        rc = png_err(rc, why, whylen);
        goto out;
    }
    if ((int)ih.width != f->width || (int)ih.height != f->height) {
        set_why(why, whylen, "image size differs from the sample's");
        rc = BFS_E_PNG_DATA;
        goto out;
    }
    size_t w = ih.width, h = ih.height;
    if (ih.color_type == SPNG_COLOR_TYPE_TRUECOLOR && ih.bit_depth == 8) {
        rc = spng_decode_image(ctx, dst, w * h * 3, SPNG_FMT_RAW, 0);
        rc = rc ? png_err(rc, why, whylen) : 0;
        goto out;
    }
    uint8_t pal[256][3];
    memset(pal, 0, sizeof pal); /* Pillow pads a short palette with black */
    size_t n;
    if ((rc = spng_decoded_image_size(ctx, SPNG_FMT_RAW, &n))) {
        rc = png_err(rc, why, whylen);
        goto out;
    }
    if (ih.color_type == SPNG_COLOR_TYPE_INDEXED) {
        struct spng_plte plte;
        if ((rc = spng_get_plte(ctx, &plte))) {
            rc = png_err(rc, why, whylen);
            goto out;
        }
        for (uint32_t i = 0; i < plte.n_entries && i < 256; i++)
            pal[i][0] = plte.entries[i].red, pal[i][1] = plte.entries[i].green,
            pal[i][2] = plte.entries[i].blue;
    }
    if (!(buf = malloc(n ? n : 1))) {
        rc = -ENOMEM;
        goto out;
    }
    if ((rc = spng_decode_image(ctx, buf, n, SPNG_FMT_RAW, 0))) {
        rc = png_err(rc, why, whylen);
        goto out;
    }
    size_t rowbytes = n / h;
    for (size_t y = 0; y < h; y++)
        png_row(buf + y * rowbytes, dst + y * w * 3, (int)w, ih.color_type, ih.bit_depth,
                (const uint8_t(*)[3])pal);
    rc = 0;
out:
    free(buf);
    spng_ctx_free(ctx);
    return rc;
}

static int webp_decode(const uint8_t *data, size_t len, const bfs_image_facts *f, uint8_t *dst,
                       char *why, size_t whylen)
{
    WebPDecoderConfig cfg;
    if (!WebPInitDecoderConfig(&cfg))
        return -EINVAL; /* a libwebp of another ABI */
    VP8StatusCode st = WebPGetFeatures(data, len, &cfg.input);
    if (st == VP8_STATUS_OK && (cfg.input.width != f->width || cfg.input.height != f->height)) {
        set_why(why, whylen, "image size differs from the sample's");
        return BFS_E_WEBP_DATA;
    }
    if (st == VP8_STATUS_OK && cfg.input.has_animation)
        return BFS_E_WEBP_UNSUPPORTED;
    if (st == VP8_STATUS_OK) {
        cfg.output.colorspace = MODE_RGB;
        cfg.output.is_external_memory = 1;
        cfg.output.u.RGBA.rgba = dst;
        cfg.output.u.RGBA.stride = f->width * 3;
        cfg.output.u.RGBA.size = (size_t)f->width * (size_t)f->height * 3;
        st = WebPDecode(data, len, &cfg);
        WebPFreeDecBuffer(&cfg.output);
    }
    switch (st) {
    case VP8_STATUS_OK:
        return 0;
    case VP8_STATUS_OUT_OF_MEMORY:
        return -ENOMEM;
    case VP8_STATUS_UNSUPPORTED_FEATURE:
        return BFS_E_WEBP_UNSUPPORTED;
    case VP8_STATUS_NOT_ENOUGH_DATA:
        set_why(why, whylen, "truncated");
        return BFS_E_WEBP_DATA;
    default:
        set_why(why, whylen, "bitstream error");
        return BFS_E_WEBP_DATA;
    }
}

int bfs_image_decode(const uint8_t *data, size_t len, const bfs_image_facts *f, uint8_t *dst,
                     size_t dst_size, char *why, size_t whylen)
{
    set_why(why, whylen, "");
    int fmt = bfs_image_sniff(data, len);
    if (fmt != BFS_IMAGE_PNG && fmt != BFS_IMAGE_WEBP)
        return BFS_E_NOT_JPEG;
    if (f->width <= 0 || f->height <= 0 || !size_ok((uint64_t)f->width, (uint64_t)f->height))
        return f->width <= 0 || f->height <= 0 ? -EINVAL : BFS_E_IMAGE_TOO_LARGE;
    if (dst_size / 3 / (size_t)f->width < (size_t)f->height)
        return -EINVAL;
    return fmt == BFS_IMAGE_PNG ? png_decode(data, len, f, dst, why, whylen)
                                : webp_decode(data, len, f, dst, why, whylen);
}

int bfs_image_decode_rgb(const uint8_t *data, size_t len, uint8_t **rgb, int *w, int *h, char *why,
                         size_t whylen)
{
    set_why(why, whylen, "");
    if (bfs_image_sniff(data, len) == BFS_IMAGE_JPEG)
        return bfs_jpeg_decode_rgb(data, len, rgb, w, h);
    bfs_image_facts f;
    int rc = bfs_image_probe(data, len, &f);
    if (rc)
        return rc;
    size_t n = (size_t)f.width * (size_t)f.height * 3;
    uint8_t *out = malloc(n);
    if (!out)
        return -ENOMEM;
    if ((rc = bfs_image_decode(data, len, &f, out, n, why, whylen))) {
        free(out);
        return rc;
    }
    *rgb = out, *w = f.width, *h = f.height;
    return 0;
}

int bfs_image_check(const uint8_t *data, size_t len, bfs_image_facts *f, char *why, size_t whylen)
{
    set_why(why, whylen, "");
    if (bfs_image_sniff(data, len) != BFS_IMAGE_PNG &&
        bfs_image_sniff(data, len) != BFS_IMAGE_WEBP) {
        bfs_jpeg_header hd;
        int rc = bfs_jpeg_parse_header(data, len, &hd);
        if (!rc)
            rc = bfs_jpeg_check(data, len, why, whylen);
        if (rc)
            return rc;
        f->width = hd.width, f->height = hd.height;
        f->flags = bfs_jpeg_sample_flags(&hd);
        return 0;
    }
    uint8_t *rgb;
    int w, h;
    int rc = bfs_image_decode_rgb(data, len, &rgb, &w, &h, why, whylen);
    if (rc)
        return rc;
    free(rgb);
    return bfs_image_probe(data, len, f);
}
