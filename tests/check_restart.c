/*
 * check_restart.c — restart-marked JPEGs (mkbatchfs --restart, engine/decode.c windows):
 *  - bfs_jpeg_add_restarts is lossless: the whole image decodes to the original's pixels,
 *    for 4:2:0, 4:2:2, 4:4:4, 4:4:0 and progressive input, at sizes that are not multiples
 *    of the MCU; what it does not take (gray, CMYK, arithmetic, corrupt, bad interval) it
 *    refuses with the documented code;
 *  - a crop decoded through a restart-segment window equals the same crop decoded from the
 *    original file, byte for byte, at every IDCT scale, for intervals that tile the MCU rows
 *    (column windows) and intervals that do not (whole-row windows), and windows were
 *    really used (the decoder's counter); a table entry that disagrees with the file gets
 *    no window;
 *  - a restart layout that is not what the header promises (a marker out of sequence, a
 *    scan cut short) falls back to the plain path: the same result as without windows;
 *  - our entropy decoder (engine/huff.h) decodes what libjpeg-turbo decodes to the same
 *    pixels: windows, whole files, and coefficients written to make blocks end where its
 *    two-symbols-a-lookup loop must stop; a segment cut short, which libjpeg-turbo warns
 *    of, stops it;
 *  - a reused decoder lends no Huffman or quantization tables from one file to the next;
 *  - end to end: an ImageFolder packed with and without --restart gives batches whose
 *    tensors are byte-identical, over two epochs of train and eval.
 */
#include "engine/dataset/bfs.h"
#include "engine/decode.h"
#include "engine/engine.h"
#include "base/err.h"
#include "engine/exec.h"
#include "engine/dataset/jpeg.h"
#include "engine/dataset/pack.h"
#include "engine/huff.h"
#include "engine/ycc.h"
#include "engine/pipeline.h"
#include "tests/testutil.h"

#include <check.h>
#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <jpegint.h> /* jpeg_natural_order */

typedef struct kind {
    const char *name;
    int subsamp, progressive;
} kind;

static const kind KINDS[] = {
    {"4:2:0", TJSAMP_420, 0},
    {"4:2:2", TJSAMP_422, 0},
    {"4:4:4", TJSAMP_444, 0},
    {"4:4:0", TJSAMP_440, 0},
    {"progressive 4:2:0", TJSAMP_420, 1},
};
#define NKINDS (sizeof KINDS / sizeof KINDS[0])

/* sizes: not multiples of the MCU, one narrower than two MCUs, one tall */
static const int SIZES[][2] = {{203, 141}, {331, 250}, {23, 190}, {128, 64}};
#define NSIZES (sizeof SIZES / sizeof SIZES[0])

static void make(const kind *k, int w, int h, uint64_t seed, uint8_t **out, size_t *len)
{
    tu_jpeg_opts o = {.width = w,
                      .height = h,
                      .quality = 92,
                      .subsamp = k->subsamp,
                      .progressive = k->progressive,
                      .seed = seed};
    ck_assert_int_eq(tu_make_jpeg(&o, out, len), 0);
}

static void whole(const uint8_t *jpg, size_t len, uint8_t **rgb, int *w, int *h)
{
    ck_assert_int_eq(bfs_jpeg_decode_rgb(jpg, len, rgb, w, h), 0);
}

START_TEST(add_restarts_is_lossless)
{
    for (size_t ki = 0; ki < NKINDS; ki++)
        for (size_t si = 0; si < NSIZES; si++) {
            uint8_t *jpg, *rst, *a, *b;
            size_t len, rlen;
            int aw, ah, bw, bh;
            make(&KINDS[ki], SIZES[si][0], SIZES[si][1], ki * 10 + si, &jpg, &len);
            ck_assert_int_eq(bfs_jpeg_add_restarts(jpg, len, 1, &rst, &rlen), 0);
            bfs_jpeg_header h;
            ck_assert_int_eq(bfs_jpeg_parse_header(rst, rlen, &h), 0);
            ck_assert_int_eq(h.restart_interval, 1);
            ck_assert_int_eq(h.progressive, 0);
            ck_assert_int_eq(h.scan_components, 3);
            /* already marked that way: nothing to do */
            uint8_t *again;
            size_t alen;
            ck_assert_int_eq(bfs_jpeg_add_restarts(rst, rlen, 1, &again, &alen), 1);
            whole(jpg, len, &a, &aw, &ah);
            whole(rst, rlen, &b, &bw, &bh);
            ck_assert_int_eq(aw, bw);
            ck_assert_int_eq(ah, bh);
            ck_assert_msg(memcmp(a, b, (size_t)aw * ah * 3) == 0, "%s %dx%d: pixels differ",
                          KINDS[ki].name, aw, ah);
            free(a), free(b), free(jpg), free(rst);
        }
}
END_TEST

START_TEST(add_restarts_refuses)
{
    uint8_t *jpg, *out = NULL;
    size_t len, olen;
    tu_jpeg_opts g = {.width = 50, .height = 40, .quality = 90, .subsamp = TJSAMP_GRAY, .seed = 1};
    ck_assert_int_eq(tu_make_jpeg(&g, &jpg, &len), 0);
    ck_assert_int_eq(bfs_jpeg_add_restarts(jpg, len, 1, &out, &olen), 1); /* gray */
    free(jpg);
    g.subsamp = TJSAMP_411; /* decoded whole anyway: nothing to gain */
    ck_assert_int_eq(tu_make_jpeg(&g, &jpg, &len), 0);
    ck_assert_int_eq(bfs_jpeg_add_restarts(jpg, len, 1, &out, &olen), 1);
    free(jpg);
    make(&KINDS[0], 120, 90, 2, &jpg, &len);
    ck_assert_int_eq(bfs_jpeg_add_restarts(jpg, len, 0, &out, &olen), -EINVAL);
    ck_assert_int_eq(bfs_jpeg_add_restarts(jpg, len, 65536, &out, &olen), -EINVAL);
    /* truncated in the scan: a warning to libjpeg, corrupt to us; the file is kept as is */
    ck_assert_int_eq(bfs_jpeg_add_restarts(jpg, len * 2 / 3, 1, &out, &olen), BFS_E_JPEG_DATA);
    ck_assert_int_eq(bfs_jpeg_add_restarts(jpg, 1, 1, &out, &olen), BFS_E_NOT_JPEG);
    ck_assert_ptr_null(out);
    free(jpg);
}
END_TEST

/* Random regions (and the four corners) at every scale: the window's pixels equal the
 * plain file's. Returns the number of windowed decodes. */
static uint64_t compare_crops(const char *what, const uint8_t *plain, size_t plen,
                              const uint8_t *rst, size_t rlen, uint64_t seed)
{
    bfs_decoder *dp, *dr;
    ck_assert_int_eq(bfs_decoder_create(&dp), 0);
    ck_assert_int_eq(bfs_decoder_create(&dr), 0);
    bfs_image_info ip, ir;
    ck_assert_int_eq(bfs_decoder_probe(plain, plen, &ip), 0);
    ck_assert_int_eq(bfs_decoder_probe(rst, rlen, &ir), 0);
    uint64_t rs = seed;
    for (int s = 1; s <= 8; s *= 2) {
        int sw = (ip.width + s - 1) / s, sh = (ip.height + s - 1) / s;
        for (int t = 0; t < 60; t++) {
            int x0 = (int)(tu_rand(&rs) % (uint64_t)sw);
            int y0 = (int)(tu_rand(&rs) % (uint64_t)sh);
            int x1 = x0 + 1 + (int)(tu_rand(&rs) % (uint64_t)(sw - x0));
            int y1 = y0 + 1 + (int)(tu_rand(&rs) % (uint64_t)(sh - y0));
            int cw = sw / 3 + 1, ch = sh / 3 + 1;
            if (t < 4) { /* corners: image edges inside the window */
                x0 = t & 1 ? sw - cw : 0, y0 = t & 2 ? sh - ch : 0;
                x1 = x0 + cw, y1 = y0 + ch;
            }
            bfs_pixels a, b;
            ck_assert_int_eq(bfs_decoder_decode(dp, plain, plen, &ip, s, x0, y0, x1, y1, &a), 0);
            ck_assert_int_eq(bfs_decoder_decode(dr, rst, rlen, &ir, s, x0, y0, x1, y1, &b), 0);
            ck_assert_int_eq(b.img_w, sw);
            ck_assert_int_eq(b.img_h, sh);
            ck_assert(b.x0 <= x0 && b.y0 <= y0 && b.x0 + b.w >= x1 && b.y0 + b.h >= y1);
            for (int y = y0; y < y1; y++) {
                const uint8_t *pa = a.rgb + (size_t)(y - a.y0) * a.stride + 3 * (size_t)(x0 - a.x0);
                const uint8_t *pb = b.rgb + (size_t)(y - b.y0) * b.stride + 3 * (size_t)(x0 - b.x0);
                ck_assert_msg(memcmp(pa, pb, 3 * (size_t)(x1 - x0)) == 0,
                              "%s %dx%d scale 1/%d region %d,%d-%d,%d: row %d differs", what,
                              ip.width, ip.height, s, x0, y0, x1, y1, y);
            }
        }
    }
    bfs_decode_stats st;
    bfs_decoder_get_stats(dr, &st);
    bfs_decoder_destroy(dp);
    bfs_decoder_destroy(dr);
    return st.windowed;
}

START_TEST(window_crops_equal_plain_crops)
{
    /* 1: column windows everywhere; 2, 5 and 7 divide the MCUs per row of some sizes and
     * kinds only (column windows there, whole-row windows elsewhere) */
    static const int intervals[] = {1, 2, 5, 7};
    uint64_t windowed = 0;
    for (size_t ki = 0; ki < NKINDS; ki++)
        for (size_t si = 0; si < NSIZES; si++)
            for (size_t ii = 0; ii < sizeof intervals / sizeof intervals[0]; ii++) {
                uint8_t *jpg, *rst;
                size_t len, rlen;
                make(&KINDS[ki], SIZES[si][0], SIZES[si][1], ki * 10 + si + 100, &jpg, &len);
                ck_assert_int_eq(bfs_jpeg_add_restarts(jpg, len, intervals[ii], &rst, &rlen), 0);
                char what[128];
                snprintf(what, sizeof what, "%s interval %d", KINDS[ki].name, intervals[ii]);
                windowed += compare_crops(what, jpg, len, rst, rlen, ki * 1000 + si * 10 + ii);
                free(jpg), free(rst);
            }
    ck_assert_uint_gt(windowed, 1000); /* windows were really used */
}
END_TEST

/* engine/huff.h's entropy decoder, which decodes every window by default, against
 * libjpeg-turbo's on the same windows: the same pixels, at every quality (100 and noise:
 * large values, codes of up to 16 bits), sampling, interval and scale. */
static void own_vs_libjpeg(const char *what, const uint8_t *rst, size_t rlen, uint64_t seed,
                           uint64_t *used)
{
    bfs_decoder *own, *lib;
    ck_assert_int_eq(bfs_decoder_create(&own), 0);
    ck_assert_int_eq(bfs_decoder_create(&lib), 0);
    ck_assert_int_eq(bfs_decoder_set_own_entropy(own, 1), 0);
    ck_assert_int_eq(bfs_decoder_set_own_entropy(lib, 0), 0);
    bfs_image_info info;
    ck_assert_int_eq(bfs_decoder_probe(rst, rlen, &info), 0);
    uint64_t rs = seed;
    for (int s = 1; s <= 8; s *= 2) {
        int sw = (info.width + s - 1) / s, sh = (info.height + s - 1) / s;
        for (int t = 0; t < 25; t++) {
            int x0 = (int)(tu_rand(&rs) % (uint64_t)sw), y0 = (int)(tu_rand(&rs) % (uint64_t)sh);
            int x1 = x0 + 1 + (int)(tu_rand(&rs) % (uint64_t)(sw - x0));
            int y1 = y0 + 1 + (int)(tu_rand(&rs) % (uint64_t)(sh - y0));
            bfs_pixels a, b;
            ck_assert_int_eq(bfs_decoder_decode(own, rst, rlen, &info, s, x0, y0, x1, y1, &a), 0);
            ck_assert_int_eq(bfs_decoder_decode(lib, rst, rlen, &info, s, x0, y0, x1, y1, &b), 0);
            ck_assert(a.x0 == b.x0 && a.y0 == b.y0 && a.w == b.w && a.h == b.h);
            for (int y = 0; y < a.h; y++)
                ck_assert_msg(memcmp(a.rgb + (size_t)y * a.stride, b.rgb + (size_t)y * b.stride,
                                     3 * (size_t)a.w) == 0,
                              "%s scale 1/%d region %d,%d-%d,%d: row %d differs", what, s, x0, y0,
                              x1, y1, a.y0 + y);
        }
    }
    bfs_decode_stats so, sl;
    bfs_decoder_get_stats(own, &so);
    bfs_decoder_get_stats(lib, &sl);
    ck_assert_uint_eq(so.own_entropy, so.windowed); /* every window, by ours */
    ck_assert_uint_eq(sl.own_entropy, 0);
    ck_assert_uint_eq(sl.windowed, so.windowed);
    *used += so.own_entropy;
    bfs_decoder_destroy(own);
    bfs_decoder_destroy(lib);
}

START_TEST(own_entropy_equals_libjpeg)
{
    static const int qualities[] = {30, 75, 95, 100};
    static const int intervals[] = {1, 3};
    uint64_t used = 0;
    for (size_t ki = 0; ki < NKINDS; ki++)
        for (size_t qi = 0; qi < sizeof qualities / sizeof qualities[0]; qi++)
            for (size_t ii = 0; ii < sizeof intervals / sizeof intervals[0]; ii++) {
                int w = qi & 1 ? 331 : 203, h = qi & 1 ? 250 : 141;
                uint8_t *rgb = malloc((size_t)w * h * 3), *jpg, *rst;
                size_t len, rlen;
                ck_assert_ptr_nonnull(rgb);
                tu_fill_rgb(rgb, w, h, ki * 100 + qi);
                if (qi == 3) { /* noise over the texture: large values, long codes */
                    uint64_t ns = ki + 1;
                    for (size_t i = 0; i < (size_t)w * h * 3; i++)
                        rgb[i] = (uint8_t)(rgb[i] / 2 + tu_rand(&ns) % 128);
                }
                ck_assert_int_eq(tu_encode_jpeg(rgb, w, h, qualities[qi], KINDS[ki].subsamp,
                                                KINDS[ki].progressive, &jpg, &len),
                                 0);
                ck_assert_int_eq(bfs_jpeg_add_restarts(jpg, len, intervals[ii], &rst, &rlen), 0);
                char what[128];
                snprintf(what, sizeof what, "%s quality %d interval %d", KINDS[ki].name,
                         qualities[qi], intervals[ii]);
                own_vs_libjpeg(what, rst, rlen, ki * 1000 + qi * 10 + ii, &used);
                free(rgb), free(jpg), free(rst);
            }
    ck_assert_uint_gt(used, 1000); /* our decoder was really used */
}
END_TEST

/* The same scan with a fill byte before every restart marker (FF FF Dn), which is legal
 * and libjpeg-turbo skips (jdmarker.c next_marker). (Before a stuffed FF 00 it is not
 * legal: libjpeg-turbo's slow path reads FF FF 00 as FF, as ours does, its fast path
 * does not.) */
static uint8_t *with_fill_bytes(const uint8_t *j, size_t len, size_t *out_len)
{
    uint8_t *o = malloc(2 * len);
    ck_assert_ptr_nonnull(o);
    size_t i = 2, n = 2;
    memcpy(o, j, 2);
    while (i + 4 <= len && !(j[i] == 0xFF && j[i + 1] == 0xDA)) { /* markers before SOS */
        size_t seg = 2 + ((size_t)j[i + 2] << 8 | j[i + 3]);
        memcpy(o + n, j + i, seg);
        i += seg, n += seg;
    }
    ck_assert_uint_lt(i + 4, len);
    size_t sos = 2 + ((size_t)j[i + 2] << 8 | j[i + 3]);
    memcpy(o + n, j + i, sos);
    i += sos, n += sos;
    for (; i < len; i++) {
        if (j[i] == 0xFF && i + 1 < len && j[i + 1] >= 0xD0 && j[i + 1] <= 0xD7)
            o[n++] = 0xFF;
        o[n++] = j[i];
    }
    *out_len = n;
    return o;
}

/* A whole-file decode through libjpeg-turbo's API, with engine/huff.h's decoder installed
 * (own) or not. Returns the RGB pixels, NULL on an error or a warning. */
typedef struct tjerr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    int warnings;
} tjerr;

static void tj_error(j_common_ptr c)
{
    longjmp(((tjerr *)(void *)c->err)->jb, 1);
}

static void tj_message(j_common_ptr c, int level)
{
    if (level < 0)
        ((tjerr *)(void *)c->err)->warnings++;
}

static uint8_t *decode_whole(const uint8_t *jpg, size_t len, int own, int *installed)
{
    struct jpeg_decompress_struct c;
    tjerr e;
    bfs_huff *h = bfs_huff_create();
    ck_assert_ptr_nonnull(h);
    uint8_t *volatile rgb = NULL;
    c.err = jpeg_std_error(&e.pub);
    e.pub.error_exit = tj_error;
    e.pub.emit_message = tj_message;
    e.warnings = 0;
    jpeg_create_decompress(&c);
    if (setjmp(e.jb)) {
        jpeg_destroy_decompress(&c);
        bfs_huff_destroy(h);
        free(rgb);
        return NULL;
    }
    jpeg_mem_src(&c, jpg, (unsigned long)len);
    jpeg_read_header(&c, TRUE);
    c.out_color_space = JCS_RGB;
    jpeg_start_decompress(&c);
    *installed = own && bfs_huff_install(h, &c);
    size_t stride = (size_t)c.output_width * 3;
    rgb = malloc(stride * c.output_height);
    ck_assert_ptr_nonnull(rgb);
    while (c.output_scanline < c.output_height) {
        JSAMPROW row = rgb + stride * c.output_scanline;
        jpeg_read_scanlines(&c, &row, 1);
    }
    jpeg_abort_decompress(&c);
    jpeg_destroy_decompress(&c);
    bfs_huff_destroy(h);
    if (e.warnings) {
        free(rgb);
        return NULL;
    }
    return rgb;
}

/* Whole files, not only windows: no restart markers, intervals of several MCUs, fill bytes
 * (FF FF before markers and stuffed bytes, which build_window does not take), grayscale. */
START_TEST(own_entropy_whole_files)
{
    static const int subsamp[] = {TJSAMP_420, TJSAMP_422, TJSAMP_444, TJSAMP_GRAY};
    for (size_t si = 0; si < sizeof subsamp / sizeof subsamp[0]; si++)
        for (int variant = 0; variant < 4; variant++) {
            tu_jpeg_opts o = {.width = 203,
                              .height = 141,
                              .quality = 60 + 13 * variant,
                              .subsamp = subsamp[si],
                              .seed = si * 10 + (uint64_t)variant};
            uint8_t *jpg, *f = NULL;
            size_t len, flen;
            ck_assert_int_eq(tu_make_jpeg(&o, &jpg, &len), 0);
            if (variant >= 1 && subsamp[si] != TJSAMP_GRAY) { /* intervals 1 and 5 */
                uint8_t *rst;
                size_t rlen;
                ck_assert_int_eq(bfs_jpeg_add_restarts(jpg, len, variant == 1 ? 1 : 5, &rst, &rlen),
                                 0);
                free(jpg);
                jpg = rst, len = rlen;
            }
            if (variant == 3 && subsamp[si] != TJSAMP_GRAY) { /* and fill bytes */
                f = with_fill_bytes(jpg, len, &flen);
                ck_assert_uint_gt(flen, len);
                free(jpg);
                jpg = f, len = flen;
            }
            int ia = 0, ib = 0;
            uint8_t *a = decode_whole(jpg, len, 1, &ia), *b = decode_whole(jpg, len, 0, &ib);
            ck_assert_ptr_nonnull(b); /* clean to libjpeg-turbo */
            ck_assert_ptr_nonnull(a);
            ck_assert_int_eq(ia, 1);
            size_t n = (size_t)o.width * o.height * 3;
            ck_assert_msg(memcmp(a, b, n) == 0, "sampling %zu variant %d: pixels differ", si,
                          variant);
            /* cut short in the scan: libjpeg-turbo warns; ours stops with an error */
            ck_assert_ptr_null(decode_whole(jpg, len * 2 / 3, 1, &ia));
            free(a), free(b), free(jpg);
        }
}
END_TEST

/* A restart segment whose data ends before its MCU does: libjpeg-turbo warns ("premature
 * end of data segment") and decodes zero bits on; ours stops with an error (the bits past
 * the marker are counted: huff.c, refill_slow). Zero bits decode as the shortest codes, so
 * only that count tells: without it the MCU decodes, wrong and silent. Segments cut to 0,
 * 1 and 3 bytes, early and late in the scan, restart interval 1 (every window's) and 4. */
START_TEST(own_entropy_short_segment)
{
    static const int intervals[] = {1, 4};
    int cases = 0;
    for (size_t ii = 0; ii < sizeof intervals / sizeof intervals[0]; ii++)
        for (int which = 3; which <= 20; which += 17)
            for (int keep = 0; keep <= 3; keep += 1 + (keep == 1)) {
                tu_jpeg_opts o = {.width = 203,
                                  .height = 141,
                                  .quality = 90,
                                  .subsamp = TJSAMP_420,
                                  .seed = 77 + ii};
                uint8_t *jpg, *rst;
                size_t len, rlen;
                ck_assert_int_eq(tu_make_jpeg(&o, &jpg, &len), 0);
                ck_assert_int_eq(bfs_jpeg_add_restarts(jpg, len, intervals[ii], &rst, &rlen), 0);
                free(jpg);
                /* segment `which` (after the which-th restart marker) cut to keep bytes */
                size_t at[64];
                int n = 0;
                for (size_t i = 0; i + 1 < rlen && n < 64; i++)
                    if (rst[i] == 0xFF && rst[i + 1] >= 0xD0 && rst[i + 1] <= 0xD7)
                        at[n++] = i;
                ck_assert_int_gt(n, which + 1);
                size_t from = at[which - 1] + 2 + (size_t)keep, to = at[which];
                ck_assert_uint_gt(to, from + 4); /* a real cut: the MCU needs more bits */
                memmove(rst + from, rst + to, rlen - to);
                rlen -= to - from;
                int ia = 0, ib = 0;
                uint8_t *b = decode_whole(rst, rlen, 0, &ib), *a = decode_whole(rst, rlen, 1, &ia);
                ck_assert_msg(b == NULL, "interval %d segment %d: libjpeg-turbo did not warn",
                              intervals[ii], which);
                ck_assert_msg(a == NULL, "interval %d segment %d cut to %d bytes: ours decoded it",
                              intervals[ii], which, keep);
                free(rst);
                cases++;
            }
    ck_assert_int_eq(cases, 12);
}
END_TEST

/* A grayscale baseline JPEG whose quantized coefficients are exactly coef (zigzag order,
 * 64 per 8x8 block, row by row): quality 100 (every divisor 1), Huffman tables optimized
 * for these coefficients (optimize) or the standard ones, a restart marker after every
 * MCU (restarts) or none. */
static uint8_t *jpeg_of_coefficients(int bw, int bh, const int16_t *coef, int optimize,
                                     int restarts, size_t *len)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr err;
    unsigned char *out = NULL;
    unsigned long outlen = 0;
    c.err = jpeg_std_error(&err);
    jpeg_create_compress(&c);
    jpeg_mem_dest(&c, &out, &outlen);
    c.image_width = (JDIMENSION)bw * 8, c.image_height = (JDIMENSION)bh * 8;
    c.input_components = 1, c.in_color_space = JCS_GRAYSCALE;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 100, TRUE);
    c.optimize_coding = optimize ? TRUE : FALSE;
    c.restart_interval = restarts ? 1 : 0;
    jvirt_barray_ptr arr[1];
    arr[0] = (*c.mem->request_virt_barray)((j_common_ptr)&c, JPOOL_IMAGE, TRUE, (JDIMENSION)bw,
                                           (JDIMENSION)bh, 1);
    jpeg_write_coefficients(&c, arr);
    for (int by = 0; by < bh; by++) {
        JBLOCKARRAY row =
            (*c.mem->access_virt_barray)((j_common_ptr)&c, arr[0], (JDIMENSION)by, 1, TRUE);
        for (int bx = 0; bx < bw; bx++)
            for (int k = 0; k < 64; k++)
                row[0][bx][jpeg_natural_order[k]] = coef[((size_t)by * bw + bx) * 64 + k];
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    *len = outlen;
    return out;
}

/* Blocks that end where the two-symbols-a-lookup loop must stop (huff.c decode): the last
 * coefficient at zigzag 63 after runs that start at every k from 40 to 63 (so a symbol
 * lands on 63 from k 48 on, where a pair's second symbol is the next block's), runs of 16
 * and more (ZRL), blocks ending early (EOB), dense blocks of small values (pairs) and
 * large ones (values past the lookahead), with optimized and standard tables, whole and
 * with a restart marker after every MCU: ours decodes them to libjpeg-turbo's pixels. */
START_TEST(own_entropy_block_ends)
{
    enum { BW = 40, BH = 24 };
    int16_t *coef = calloc((size_t)BW * BH * 64, sizeof *coef);
    ck_assert_ptr_nonnull(coef);
    uint64_t rs = 7;
    for (int b = 0; b < BW * BH; b++) {
        int16_t *q = coef + (size_t)b * 64;
        /* modes by b % 8: 0 small values, the last run from anywhere after 40; 1-3 the
         * same with the last run from 48 (1, 2) or 48..51 (3), where a symbol of run 12..15
         * lands on 63: frequent enough for a short code, so that the bits after it (the
         * next block's DC, small) often make a whole second symbol that is not this
         * block's; 4 only the run's start and 63; 5 large values, sparse (values past the
         * lookahead, long codes); 6 dense small values, then an EOB; 7 one run from the
         * start (ZRLs) to 63 */
        int mode = b % 8;
        int from = mode == 1 || mode == 2 ? 48 : mode == 3 ? 48 + (b / 8) % 4 : 40 + (b / 8) % 24;
        q[0] = (int16_t)(mode == 5 ? (int)(tu_rand(&rs) % 201) - 100 : (int)(tu_rand(&rs) % 3) - 1);
        int last = mode == 6 ? 1 + (int)(tu_rand(&rs) % 40) : 63;
        for (int k = 1; k < 64; k++) {
            int v = 0;
            if (mode <= 3)
                v = k == from - 1                  ? 1
                    : k < from && tu_rand(&rs) % 3 ? (int)(tu_rand(&rs) % 7) - 3
                                                   : 0;
            else if (mode == 4)
                v = k == from - 1;
            else if (mode == 5)
                v = tu_rand(&rs) % 4 == 0 ? (int)(tu_rand(&rs) % 2001) - 1000 : 0;
            else if (mode == 6)
                v = k <= last ? (int)(tu_rand(&rs) % 5) - 2 : 0;
            if (k == 63 && last == 63)
                v = mode == 5 ? 700 : mode <= 3 ? 1 : (tu_rand(&rs) % 2 ? 1 : -2);
            q[k] = (int16_t)v;
        }
    }
    for (int optimize = 0; optimize < 2; optimize++)
        for (int r = 0; r < 2; r++) {
            size_t n;
            uint8_t *f = jpeg_of_coefficients(BW, BH, coef, optimize, r, &n);
            ck_assert_ptr_nonnull(f);
            int ia = 0, ib = 0;
            uint8_t *a = decode_whole(f, n, 1, &ia), *bb = decode_whole(f, n, 0, &ib);
            ck_assert_ptr_nonnull(bb);
            ck_assert_ptr_nonnull(a);
            ck_assert_int_eq(ia, 1);
            ck_assert_msg(memcmp(a, bb, (size_t)BW * BH * 64 * 3) == 0,
                          "optimize %d, restarts %d: pixels differ", optimize, r);
            free(a), free(bb), free(f);
        }
    free(coef);
}
END_TEST

START_TEST(bad_layout_falls_back)
{
    uint8_t *jpg, *rst;
    size_t len, rlen;
    make(&KINDS[0], 331, 250, 7, &jpg, &len);
    ck_assert_int_eq(bfs_jpeg_add_restarts(jpg, len, 1, &rst, &rlen), 0);
    bfs_jpeg_header h;
    ck_assert_int_eq(bfs_jpeg_parse_header(rst, rlen, &h), 0);
    bfs_image_info info;
    ck_assert_int_eq(bfs_decoder_probe(rst, rlen, &info), 0);
    bfs_decoder *d;
    ck_assert_int_eq(bfs_decoder_create(&d), 0);
    bfs_pixels px;

    /* a crop near the bottom right: windowed */
    ck_assert_int_eq(bfs_decoder_decode(d, rst, rlen, &info, 1, 200, 150, 300, 240, &px), 0);
    bfs_decode_stats st;
    bfs_decoder_get_stats(d, &st);
    ck_assert_uint_eq(st.windowed, 1);

    /* the 5th RST marker renumbered out of sequence: no window; libjpeg resyncs with a
     * warning, which the plain path reports as corrupt data */
    uint8_t *bad = malloc(rlen);
    ck_assert_ptr_nonnull(bad);
    memcpy(bad, rst, rlen);
    int seen = 0;
    for (size_t i = h.scan_offset; i + 1 < rlen; i++)
        if (bad[i] == 0xFF && bad[i + 1] >= 0xD0 && bad[i + 1] <= 0xD7 && ++seen == 5) {
            bad[i + 1] = bad[i + 1] == 0xD7 ? 0xD0 : bad[i + 1] + 1;
            break;
        }
    ck_assert_int_eq(seen, 5);
    int rc = bfs_decoder_decode(d, bad, rlen, &info, 1, 200, 150, 300, 240, &px);
    ck_assert_int_eq(rc, BFS_E_JPEG_DATA);
    bfs_decoder_get_stats(d, &st);
    ck_assert_uint_eq(st.windowed, 1);

    /* the scan cut before the window's segments: no window, and the plain path reports
     * the truncation */
    rc = bfs_decoder_decode(d, rst, rlen / 2, &info, 1, 200, 150, 300, 240, &px);
    ck_assert_int_eq(rc, BFS_E_JPEG_DATA);
    bfs_decoder_get_stats(d, &st);
    ck_assert_uint_eq(st.windowed, 1);

    /* a table entry that disagrees with the file (its size): no window is built from the
     * file's header; the plain path reports the sample as corrupt */
    bfs_image_info lie = info;
    lie.width -= 16;
    ck_assert_int_eq(bfs_decoder_decode(d, rst, rlen, &lie, 1, 100, 150, 200, 240, &px),
                     BFS_E_JPEG_DATA);
    bfs_decoder_get_stats(d, &st);
    ck_assert_uint_eq(st.windowed, 1);

    /* and the decoder is still fine */
    ck_assert_int_eq(bfs_decoder_decode(d, rst, rlen, &info, 1, 10, 10, 60, 60, &px), 0);
    bfs_decoder_get_stats(d, &st);
    ck_assert_uint_eq(st.windowed, 2);
    bfs_decoder_destroy(d);
    free(bad), free(jpg), free(rst);
}
END_TEST

/* A reused decoder lends no tables: libjpeg keeps DHT/DQT tables from file to file in one
 * decompressor, so a file without its own Huffman tables (legal: decoders then use the
 * standard ones) decoded after a file with optimized tables would borrow those. Found by
 * fuzz_jpeg_header comparing crops with whole decodes. */
START_TEST(decoder_lends_no_tables)
{
    uint8_t *a, *b, *opt;
    size_t alen, blen, olen;
    make(&KINDS[0], 120, 90, 11, &a, &alen); /* standard tables (TurboJPEG's default) */
    make(&KINDS[0], 200, 150, 12, &b, &blen);
    ck_assert_int_eq(bfs_jpeg_add_restarts(b, blen, 1, &opt, &olen), 0); /* optimized tables */
    /* a without its DHT segments */
    uint8_t *bare = malloc(alen);
    ck_assert_ptr_nonnull(bare);
    size_t n = 0, pos = 2;
    memcpy(bare, a, 2), n = 2;
    int dropped = 0;
    while (pos + 4 <= alen && a[pos] == 0xFF && a[pos + 1] != 0xDA) {
        size_t seg = 2 + ((size_t)a[pos + 2] << 8 | a[pos + 3]);
        if (a[pos + 1] == 0xC4)
            dropped++;
        else
            memcpy(bare + n, a + pos, seg), n += seg;
        pos += seg;
    }
    ck_assert_int_gt(dropped, 0);
    memcpy(bare + n, a + pos, alen - pos), n += alen - pos;
    bfs_jpeg_header h;
    ck_assert_int_eq(bfs_jpeg_parse_header(bare, n, &h), 0);
    ck_assert_int_eq(bfs_jpeg_self_contained(&h), 0);
    ck_assert_int_eq(bfs_jpeg_parse_header(a, alen, &h), 0);
    ck_assert_int_eq(bfs_jpeg_self_contained(&h), 1);

    bfs_image_info ia, io;
    ck_assert_int_eq(bfs_decoder_probe(a, alen, &ia), 0);
    ck_assert_int_eq(bfs_decoder_probe(opt, olen, &io), 0);
    bfs_decoder *fresh, *used;
    ck_assert_int_eq(bfs_decoder_create(&fresh), 0);
    ck_assert_int_eq(bfs_decoder_create(&used), 0);
    size_t size = (size_t)ia.width * ia.height * 3;
    uint8_t *want = malloc(size), *got = malloc(size);
    ck_assert(want && got);
    ck_assert_int_eq(bfs_decoder_decode_image(fresh, bare, n, &ia, 1, want, size), 0);
    uint8_t *ref;
    int rw, rh;
    ck_assert_int_eq(bfs_jpeg_decode_rgb(a, alen, &ref, &rw, &rh), 0);
    ck_assert(memcmp(want, ref, size) == 0); /* the standard tables are a's own */
    uint8_t *big = malloc((size_t)io.width * io.height * 3);
    ck_assert_ptr_nonnull(big);
    ck_assert_int_eq(
        bfs_decoder_decode_image(used, opt, olen, &io, 1, big, (size_t)io.width * io.height * 3),
        0);
    ck_assert_int_eq(bfs_decoder_decode_image(used, bare, n, &ia, 1, got, size), 0);
    ck_assert_msg(memcmp(want, got, size) == 0, "tables borrowed from the previous file");
    bfs_pixels px; /* and a crop */
    ck_assert_int_eq(bfs_decoder_decode(used, opt, olen, &io, 1, 50, 40, 150, 120, &px), 0);
    ck_assert_int_eq(bfs_decoder_decode(used, bare, n, &ia, 1, 30, 20, 90, 70, &px), 0);
    for (int y = 20; y < 70; y++)
        ck_assert(memcmp(px.rgb + (size_t)(y - px.y0) * px.stride + 3 * (size_t)(30 - px.x0),
                         want + ((size_t)y * ia.width + 30) * 3, 60 * 3) == 0);
    bfs_decoder_destroy(fresh);
    bfs_decoder_destroy(used);
    free(a), free(b), free(opt), free(bare), free(want), free(got), free(ref), free(big);
}
END_TEST

/* ---- end to end: packed with and without --restart ---------------------------------------- */

static char *tmp;
static char folder[4096], plain_bfs[4096], rst_bfs[4096];

static void pack(const char *out, int restart, uint64_t expect_restarted)
{
    bfs_pack_opts po = {.jobs = 2, .restart = restart};
    bfs_pack_report rep;
    char err[512];
    ck_assert_msg(bfs_pack(folder, out, &po, &rep, NULL, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(rep.nskipped, 0);
    ck_assert_uint_eq(rep.restarted, expect_restarted);
    bfs_pack_report_free(&rep);
}

static void setup(void)
{
    tmp = tu_mkdtemp("check_restart");
    ck_assert_ptr_nonnull(tmp);
    snprintf(folder, sizeof folder, "%s/src", tmp);
    snprintf(plain_bfs, sizeof plain_bfs, "%s/plain.bfs", tmp);
    snprintf(rst_bfs, sizeof rst_bfs, "%s/rst.bfs", tmp);
    /* 2 x 20 images: 4:2:0 mostly, progressive, gray (not given markers), 4:4:4 */
    ck_assert_int_eq(tu_make_imagefolder(folder, 2, 20, 60, 300, 77), 0);
    pack(plain_bfs, 0, 0);
}

static void teardown(void)
{
    tu_rmtree(tmp);
    free(tmp);
}

/* every batch of epochs 0 and 1, the tensors only (the header names the dataset's
 * fingerprint, which is the file's: another file, another fingerprint) */
static uint8_t *tensors(const char *src, const char *opts, size_t *size, uint64_t *windowed)
{
    bfs_pipeline_opts o;
    bfs_pipeline_defaults(&o);
    char err[1024];
    ck_assert_msg(bfs_pipeline_parse(&o, opts, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(bfs_pipeline_finish(&o, err, sizeof err) == 0, "%s", err);
    bfs_engine *e;
    ck_assert_msg(bfs_engine_create(src, &o, &e, err, sizeof err) == 0, "%s", err);
    bfs_exec *x;
    ck_assert_int_eq(bfs_exec_create(e, 2, 64 << 20, &x), 0);
    uint8_t *out = NULL;
    *size = 0;
    for (uint64_t ep = 0; ep < 2; ep++)
        for (uint64_t k = 0; k < bfs_engine_batches(e); k++) {
            bfs_batch *b;
            ck_assert_msg(bfs_exec_get(x, ep, k, &b, err, sizeof err) == 0, "%s", err);
            const uint8_t *p = bfs_batch_data(b);
            uint64_t hl = 0;
            for (int i = 7; i >= 0; i--)
                hl = hl << 8 | p[i];
            size_t n = bfs_batch_size(b) - 8 - (size_t)hl;
            out = realloc(out, *size + n);
            ck_assert_ptr_nonnull(out);
            memcpy(out + *size, p + 8 + hl, n);
            *size += n;
            bfs_batch_release(b);
        }
    bfs_exec_stats xs;
    bfs_exec_get_stats(x, &xs);
    ck_assert_uint_eq(xs.stages.bad_samples, 0);
    bfs_exec_destroy(x);
    bfs_engine_destroy(e);
    *windowed = xs.stages.decode_windowed;
    return out;
}

START_TEST(packed_with_restart_same_tensors)
{
    /* every colour JPEG gets markers: all but the gray ones (every 11th, counted over the
     * whole folder by tu_make_imagefolder) */
    bfs_pipeline_opts o;
    bfs_pipeline_defaults(&o);
    char err[512];
    ck_assert_msg(bfs_pipeline_parse(&o, "batch=1", err, sizeof err) == 0, "%s", err);
    ck_assert_msg(bfs_pipeline_finish(&o, err, sizeof err) == 0, "%s", err);
    bfs_engine *e;
    ck_assert_msg(bfs_engine_create(plain_bfs, &o, &e, err, sizeof err) == 0, "%s", err);
    uint64_t n = bfs_engine_samples(e);
    bfs_engine_destroy(e);
    uint64_t gray = 0;
    for (uint64_t k = 0; k < n; k++)
        gray += k % 11 == 10;
    pack(rst_bfs, 1, n - gray);
    static const char *opts[] = {"batch=8,size=48,seed=3", "batch=8,size=64,augment=eval",
                                 "batch=5,size=24,seed=9"};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        size_t na, nb;
        uint64_t wa, wb;
        uint8_t *a = tensors(plain_bfs, opts[i], &na, &wa);
        uint8_t *b = tensors(rst_bfs, opts[i], &nb, &wb);
        ck_assert_uint_eq(na, nb);
        ck_assert_msg(memcmp(a, b, na) == 0, "%s: tensors differ", opts[i]);
        ck_assert_uint_eq(wa, 0);
        ck_assert_uint_gt(wb, 0);
        free(a), free(b);
    }
}
END_TEST

/* Our YCbCr to RGB (ycc.h) against the one libjpeg-turbo installs, on every (Y, Cb, Cr):
 * 4096 rows of 4096, converted by each with the decoder's output width set to 4096; then
 * each width 1..200 of random samples, with guard bytes after the row (the tail's masked
 * stores write nothing past 3 * width). */
#define YW 4096
START_TEST(ycc_equals_libjpeg_on_every_colour)
{
    uint8_t *jpg;
    size_t len;
    make(&KINDS[0], 64, 48, 5, &jpg, &len);
    struct jpeg_decompress_struct c;
    struct jpeg_error_mgr jerr;
    c.err = jpeg_std_error(&jerr);
    jpeg_create_decompress(&c);
    jpeg_mem_src(&c, jpg, (unsigned long)len);
    ck_assert_int_eq(jpeg_read_header(&c, TRUE), JPEG_HEADER_OK);
    c.out_color_space = JCS_RGB;
    c.do_fancy_upsampling = TRUE;
    jpeg_start_decompress(&c);
    void (*ref)(j_decompress_ptr, JSAMPIMAGE, JDIMENSION, JSAMPARRAY, int) =
        c.cconvert->color_convert;
    if (!bfs_ycc_install(&c)) {
        ck_assert_int_eq(bfs_ycc_available(), 0);
        fprintf(stderr, "ycc: no AVX-512 VBMI here: libjpeg-turbo's conversion kept\n");
        jpeg_destroy_decompress(&c);
        free(jpg);
        return;
    }
    void (*ours)(j_decompress_ptr, JSAMPIMAGE, JDIMENSION, JSAMPARRAY, int) =
        c.cconvert->color_convert;
    ck_assert_ptr_ne(ours, ref);
    JDIMENSION saved = c.output_width;
    size_t pad = 256, obytes = 3 * YW + pad;
    JSAMPLE *plane[3], *o1 = malloc(obytes), *o2 = malloc(obytes);
    JSAMPROW row[3];
    JSAMPARRAY arr[3] = {&row[0], &row[1], &row[2]};
    for (int ci = 0; ci < 3; ci++)
        row[ci] = plane[ci] = malloc(YW + pad);
    c.output_width = YW;
    for (uint32_t r = 0; r < YW; r++) {
        for (uint32_t x = 0; x < YW; x++) {
            uint32_t i = r * YW + x;
            plane[0][x] = (JSAMPLE)i, plane[1][x] = (JSAMPLE)(i >> 8),
            plane[2][x] = (JSAMPLE)(i >> 16);
        }
        ref(&c, arr, 0, &o1, 1);
        ours(&c, arr, 0, &o2, 1);
        if (memcmp(o1, o2, 3 * YW) != 0) {
            size_t b = 0;
            while (o1[b] == o2[b])
                b++;
            uint32_t i = r * YW + (uint32_t)b / 3;
            ck_abort_msg("Y %u Cb %u Cr %u: channel %zu is %u, libjpeg-turbo's %u", i & 255,
                         (i >> 8) & 255, i >> 16, b % 3, o2[b], o1[b]);
        }
    }
    uint32_t seed = 7;
    for (JDIMENSION w = 1; w <= 200; w++) {
        for (int ci = 0; ci < 3; ci++)
            for (JDIMENSION x = 0; x < w + 64; x++)
                plane[ci][x] = (JSAMPLE)((seed = seed * 1103515245u + 12345u) >> 16);
        memset(o1, 0xA5, obytes);
        memset(o2, 0xA5, obytes);
        c.output_width = w;
        ref(&c, arr, 0, &o1, 1);
        ours(&c, arr, 0, &o2, 1);
        ck_assert_mem_eq(o2, o1, 3 * w);
        for (size_t b = 3 * w; b < obytes; b++)
            ck_assert_msg(o2[b] == 0xA5, "width %u: byte %zu past the row written", w, b);
    }
    c.output_width = saved;
    for (int ci = 0; ci < 3; ci++)
        free(plane[ci]);
    free(o1);
    free(o2);
    jpeg_destroy_decompress(&c);
    free(jpg);
}
END_TEST

/* BATCHFS_YCC=libjpeg keeps libjpeg-turbo's (read once: in a child) */
START_TEST(ycc_env_keeps_libjpeg)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        setenv("BATCHFS_YCC", "libjpeg", 1);
        _exit(bfs_ycc_available() == 0 ? 0 : 1);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}
END_TEST

static Suite *restart_suite(void)
{
    Suite *s = suite_create("restart");
    TCase *t = tcase_create("decode");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, add_restarts_is_lossless);
    tcase_add_test(t, add_restarts_refuses);
    tcase_add_test(t, window_crops_equal_plain_crops);
    tcase_add_test(t, own_entropy_equals_libjpeg);
    tcase_add_test(t, own_entropy_whole_files);
    tcase_add_test(t, own_entropy_short_segment);
    tcase_add_test(t, own_entropy_block_ends);
    tcase_add_test(t, bad_layout_falls_back);
    tcase_add_test(t, decoder_lends_no_tables);
    tcase_add_test(t, ycc_equals_libjpeg_on_every_colour);
    tcase_add_test(t, ycc_env_keeps_libjpeg);
    suite_add_tcase(s, t);
    TCase *e = tcase_create("engine");
    tcase_set_timeout(e, 120);
    tcase_add_checked_fixture(e, setup, teardown);
    tcase_add_test(e, packed_with_restart_same_tensors);
    suite_add_tcase(s, e);
    return s;
}

int main(void)
{
    SRunner *r = srunner_create(restart_suite());
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
