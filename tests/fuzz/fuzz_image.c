/*
 * fuzz_image.c — libFuzzer target for the PNG and WebP paths (engine/dataset/image.c and
 * the engine decoder's BFS_KIND_CODEC branch in engine/decode.c).
 *
 * Every input goes through bfs_image_sniff, bfs_image_probe and bfs_decoder_probe (which
 * must agree), and, when its header parses to at most 4 megapixels, through a whole
 * decode (bfs_image_decode into a buffer of exactly the image's size, read in full),
 * bfs_image_check (mkbatchfs's verdict, which must agree with the decode), the engine
 * decoder's region decode and cache-entry decode (the same pixels as the whole decode),
 * and with table facts that disagree with the file (another size, the other format, a
 * buffer one byte short): errors only. PNG inputs are also tried with every chunk CRC
 * recomputed, so mutations reach the chunks and the zlib stream behind the CRC check.
 * Errors allowed: BFS_E_PNG_DATA, BFS_E_WEBP_DATA, BFS_E_WEBP_UNSUPPORTED,
 * BFS_E_IMAGE_TOO_LARGE, BFS_E_NOT_JPEG (no signature), -EINVAL (bad facts), -ENOMEM.
 */
#include "base/err.h"
#include "engine/dataset/bfs.h"
#include "engine/dataset/image.h"
#include "engine/decode.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define DECODE_MAX_PIXELS (4ull << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_image: %s:%d: contract violated: %s\n", __FILE__, __LINE__,      \
                    #cond);                                                                        \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static volatile uint8_t sink;

static void touch(const uint8_t *p, size_t n)
{
    uint8_t x = 0;
    for (size_t i = 0; i < n; i++)
        x ^= p[i];
    sink = x;
}

static int image_error(int rc)
{
    return rc == BFS_E_PNG_DATA || rc == BFS_E_WEBP_DATA || rc == BFS_E_WEBP_UNSUPPORTED ||
           rc == BFS_E_IMAGE_TOO_LARGE || rc == BFS_E_NOT_JPEG || rc == -EINVAL || rc == -ENOMEM;
}

static bfs_decoder *dec;

static void one(const uint8_t *data, size_t size)
{
    int fmt = bfs_image_sniff(data, size);
    CHECK(fmt >= BFS_IMAGE_UNKNOWN && fmt <= BFS_IMAGE_WEBP);
    bfs_image_facts f;
    int rc = bfs_image_probe(data, size, &f);
    CHECK(rc == 0 || image_error(rc));
    if (fmt != BFS_IMAGE_PNG && fmt != BFS_IMAGE_WEBP) {
        CHECK(rc == BFS_E_NOT_JPEG);
        return;
    }
    bfs_image_info info;
    int prc = bfs_decoder_probe(data, size, &info);
    CHECK(prc == rc);
    if (rc)
        return;
    CHECK(f.width >= 1 && f.width <= 65535 && f.height >= 1 && f.height <= 65535);
    CHECK(f.flags == (fmt == BFS_IMAGE_WEBP ? (BFS_KIND_CODEC | BFS_F_WEBP) : BFS_KIND_CODEC));
    CHECK(info.width == f.width && info.height == f.height && info.flags == f.flags);
    CHECK(bfs_decoder_max_scale(&info, 1e6, 1e6, 1, 1) == 1);
    if ((uint64_t)f.width * (uint64_t)f.height > DECODE_MAX_PIXELS)
        return;

    size_t n = (size_t)f.width * (size_t)f.height * 3;
    uint8_t *rgb = malloc(n), *dst = malloc(n);
    if (!rgb || !dst)
        goto out;
    char why[160];
    rc = bfs_image_decode(data, size, &f, rgb, n, why, sizeof why);
    CHECK(rc == 0 || (image_error(rc) && rc != BFS_E_NOT_JPEG && rc != -EINVAL));
    CHECK(strlen(why) < sizeof why);
    if (rc == 0)
        touch(rgb, n);
    bfs_image_facts cf;
    int crc = bfs_image_check(data, size, &cf, NULL, 0);
    CHECK(crc == rc || (rc == -ENOMEM || crc == -ENOMEM));
    if (crc == 0)
        CHECK(cf.width == f.width && cf.height == f.height && cf.flags == f.flags);

    /* the engine's decoder: a region comes back as the whole image, equal to it */
    bfs_pixels px;
    int x1 = f.width > 3 ? f.width - 1 : f.width, y1 = f.height > 2 ? f.height / 2 + 1 : f.height;
    int drc = bfs_decoder_decode(dec, data, size, &info, 1, 0, 0, x1, y1, &px);
    CHECK(drc == rc || drc == -ENOMEM || rc == -ENOMEM);
    if (drc == 0 && rc == 0) {
        CHECK(px.x0 == 0 && px.y0 == 0 && px.w == f.width && px.h == f.height && px.scale == 1);
        for (int y = 0; y < f.height; y++)
            CHECK(!memcmp(px.rgb + (size_t)y * px.stride, rgb + (size_t)y * f.width * 3,
                          (size_t)f.width * 3));
    }
    drc = bfs_decoder_decode_image(dec, data, size, &info, 1, dst, n);
    CHECK(drc == rc || drc == -ENOMEM || rc == -ENOMEM);
    if (drc == 0 && rc == 0)
        CHECK(!memcmp(dst, rgb, n));
    CHECK(bfs_decoder_decode_image(dec, data, size, &info, 1, dst, n - 1) == -EINVAL);
    CHECK(bfs_decoder_decode(dec, data, size, &info, 2, 0, 0, 1, 1, &px) == -EINVAL);
    /* facts that disagree with the file: errors only */
    bfs_image_info bad = info;
    bad.flags ^= BFS_F_WEBP;
    drc = bfs_decoder_decode(dec, data, size, &bad, 1, 0, 0, 1, 1, &px);
    CHECK(drc == (fmt == BFS_IMAGE_PNG ? BFS_E_WEBP_DATA : BFS_E_PNG_DATA));
    if (f.width > 1) {
        bad = info;
        bad.width--;
        drc = bfs_decoder_decode_image(dec, data, size, &bad, 1, dst, n);
        CHECK(drc != 0 && image_error(drc));
    }
out:
    free(rgb);
    free(dst);
}

/* A copy of a PNG with every chunk's CRC recomputed (chunks as far as they go). */
static uint8_t *fix_crcs(const uint8_t *data, size_t size)
{
    uint8_t *c = malloc(size);
    if (!c)
        return NULL;
    memcpy(c, data, size);
    size_t p = 8;
    while (p + 12 <= size) {
        uint32_t len =
            (uint32_t)c[p] << 24 | (uint32_t)c[p + 1] << 16 | (uint32_t)c[p + 2] << 8 | c[p + 3];
        if (len > size - p - 12)
            break;
        uint32_t crc = (uint32_t)crc32(0, c + p + 4, len + 4);
        uint8_t *q = c + p + 8 + len;
        q[0] = (uint8_t)(crc >> 24), q[1] = (uint8_t)(crc >> 16), q[2] = (uint8_t)(crc >> 8),
        q[3] = (uint8_t)crc;
        p += 12 + (size_t)len;
    }
    return c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dec && bfs_decoder_create(&dec))
        return 0;
    one(data, size);
    if (bfs_image_sniff(data, size) == BFS_IMAGE_PNG) {
        uint8_t *c = fix_crcs(data, size);
        if (c && memcmp(c, data, size))
            one(c, size);
        free(c);
    }
    return 0;
}
