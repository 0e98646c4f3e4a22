/*
 * decode.c — crop-aware JPEG and raw decoding (see decode.h).
 *
 * One jpeg_decompress_struct per thread, reused for every sample (creating one costs
 * more than decoding a small crop). Errors longjmp back to bfs_decoder_decode, which
 * aborts the decompressor so it is reusable.
 */
#include "engine/decode.h"
#include "engine/bfs.h"
#include "engine/err.h"
#include "engine/jpeg.h"

#include <errno.h>
#include <lz4.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

/* Pixels of margin around a crop, in output (scaled) pixels: h2v2 fancy upsampling reads
 * one chroma sample (two luma pixels) beyond each side. */
#define MARGIN 4

/* Scaled IDCT only where the resize afterwards still shrinks this much (see max_scale). */
#define SCALE_SLACK 2.0

/* Refuse images whose decode buffers would be absurd (decompression bombs). */
#define MAX_PIXELS (1ULL << 28)

typedef struct err_mgr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    int warnings;
} err_mgr;

struct bfs_decoder {
    struct jpeg_decompress_struct cinfo;
    err_mgr jerr;
    struct jpeg_progress_mgr progress;
    uint8_t *buf; /* decoded region, RGB */
    size_t cap;
    uint8_t *row4; /* one CMYK row */
    size_t row4_cap;
    /* counters: incremented by the owning worker, read by /stats from other threads */
    _Atomic uint64_t n_cropped, n_full, n_scaled, n_raw;
};

static void on_error(j_common_ptr c)
{
    err_mgr *e = (err_mgr *)c->err;
    longjmp(e->jb, 1);
}

/* Progressive files may hold any number of scans, each a full pass of entropy decoding:
 * a small file can cost minutes (a CPU bomb). libjpeg-turbo's TJFLAG_LIMITSCANS uses the
 * same limit. */
#define MAX_SCANS 500

static void on_progress(j_common_ptr c)
{
    if (c->is_decompressor && ((j_decompress_ptr)c)->input_scan_number > MAX_SCANS)
        on_error(c);
}

static void on_message(j_common_ptr c, int level)
{
    /* level -1: a warning, e.g. "premature end of data segment" for truncated files:
     * libjpeg goes on with gray; to us the sample is corrupt. Trace messages ignored. */
    if (level < 0)
        ((err_mgr *)c->err)->warnings++;
}

int bfs_decoder_create(bfs_decoder **out)
{
    bfs_decoder *d = calloc(1, sizeof *d);
    if (!d)
        return -ENOMEM;
    d->cinfo.err = jpeg_std_error(&d->jerr.pub);
    d->jerr.pub.error_exit = on_error;
    d->jerr.pub.emit_message = on_message;
    if (setjmp(d->jerr.jb)) {
        free(d);
        return -ENOMEM;
    }
    jpeg_create_decompress(&d->cinfo);
    d->progress.progress_monitor = on_progress;
    d->cinfo.progress = &d->progress;
    *out = d;
    return 0;
}

void bfs_decoder_destroy(bfs_decoder *d)
{
    if (!d)
        return;
    jpeg_destroy_decompress(&d->cinfo);
    free(d->buf);
    free(d->row4);
    free(d);
}

void bfs_decoder_get_stats(const bfs_decoder *d, bfs_decode_stats *st)
{
    st->cropped = atomic_load_explicit(&d->n_cropped, memory_order_relaxed);
    st->full = atomic_load_explicit(&d->n_full, memory_order_relaxed);
    st->scaled = atomic_load_explicit(&d->n_scaled, memory_order_relaxed);
    st->raw = atomic_load_explicit(&d->n_raw, memory_order_relaxed);
}

int bfs_decoder_probe(const uint8_t *data, size_t len, bfs_image_info *info)
{
    bfs_jpeg_header h;
    int rc = bfs_jpeg_parse_header(data, len, &h);
    if (rc)
        return rc;
    info->width = h.width;
    info->height = h.height;
    info->flags = bfs_jpeg_sample_flags(&h);
    info->raw_size = 0;
    return 0;
}

static int scaled(int v, int s)
{
    return (v + s - 1) / s; /* libjpeg's jdiv_round_up for scale 1/s */
}

int bfs_decoder_max_scale(const bfs_image_info *info, double box_w, double box_h, int need_w,
                          int need_h)
{
    if ((info->flags & BFS_KIND_MASK) != BFS_KIND_JPEG)
        return 1;
    /* After a 1/s IDCT (close to an s x s box filter) the antialiased resize must still
     * shrink by SCALE_SLACK or more, so the result stays within Pillow's tolerance
     * (tests/cli/engine_pillow.sh measures the MAE). */
    int s = 8;
    while (s > 1 && (box_w / s < SCALE_SLACK * need_w || box_h / s < SCALE_SLACK * need_h))
        s /= 2;
    return s;
}

static int grow(uint8_t **buf, size_t *cap, size_t need)
{
    if (*cap >= need)
        return 0;
    uint8_t *b = realloc(*buf, need);
    if (!b)
        return -ENOMEM;
    *buf = b, *cap = need;
    return 0;
}

/* Pillow's MULDIV255: (a * b + 128) / 255 with its exact rounding. */
static inline uint8_t muldiv255(unsigned a, unsigned b)
{
    unsigned t = a * b + 128;
    return (uint8_t)(((t >> 8) + t) >> 8);
}

/* libjpeg delivers Adobe-style inverted CMYK (YCCK already converted to it); Pillow
 * reads it as "CMYK;I" and converts with r = 255 - c - k style arithmetic, which on the
 * stored values becomes K - (255 - C) * K / 255. */
static void cmyk_row_to_rgb(const uint8_t *in, uint8_t *out, int w)
{
    for (int x = 0; x < w; x++) {
        unsigned k = in[4 * x + 3];
        for (int c = 0; c < 3; c++)
            out[3 * x + c] = (uint8_t)(k - muldiv255(255 - in[4 * x + c], k));
    }
}

/* lz4 raw pixels into dst (the decoder's buffer when NULL; dst_size bytes otherwise). */
static int decode_raw(bfs_decoder *d, const uint8_t *data, size_t len, const bfs_image_info *info,
                      uint8_t *dst, size_t dst_size, bfs_pixels *out)
{
    size_t need = (size_t)info->width * info->height * 3;
    if (need != info->raw_size || need > (size_t)LZ4_MAX_INPUT_SIZE || len > (size_t)INT32_MAX)
        return BFS_E_RAW_DATA;
    if (dst && dst_size < need)
        return -EINVAL;
    if (!dst && grow(&d->buf, &d->cap, need))
        return -ENOMEM;
    uint8_t *to = dst ? dst : d->buf;
    int n = LZ4_decompress_safe((const char *)data, (char *)to, (int)len, (int)need);
    if (n != (int)need)
        return BFS_E_RAW_DATA;
    *out = (bfs_pixels){.rgb = to,
                        .stride = (size_t)info->width * 3,
                        .w = info->width,
                        .h = info->height,
                        .img_w = info->width,
                        .img_h = info->height,
                        .scale = 1};
    atomic_fetch_add_explicit(&d->n_raw, 1, memory_order_relaxed);
    return 0;
}

/*
 * Decode [x0, x1) x [y0, y1) at 1/scale. With dst == NULL the pixels go to the decoder's
 * buffer (region plus margin, columns snapped); otherwise the region must be the whole
 * scaled image, and its rows go to dst, packed (stride = 3 * scaled width), exactly as a
 * whole-region request would decode them into the buffer.
 */
static int decode(bfs_decoder *d, const uint8_t *data, size_t len, const bfs_image_info *info,
                  int scale, int x0, int y0, int x1, int y1, uint8_t *dst, size_t dst_size,
                  bfs_pixels *out)
{
    if ((info->flags & BFS_KIND_MASK) == BFS_KIND_RAW) {
        if (dst && scale != 1)
            return -EINVAL;
        return decode_raw(d, data, len, info, dst, dst_size, out);
    }
    if (scale != 1 && scale != 2 && scale != 4 && scale != 8)
        return -EINVAL;
    if ((uint64_t)info->width * info->height > MAX_PIXELS)
        return BFS_E_JPEG_UNSUPPORTED;
    int sw = scaled(info->width, scale), sh = scaled(info->height, scale);
    if (x0 < 0 || y0 < 0 || x1 > sw || y1 > sh || x0 >= x1 || y0 >= y1)
        return -EINVAL;
    if (dst &&
        (x0 != 0 || y0 != 0 || x1 != sw || y1 != sh || dst_size / 3 / (size_t)sw < (size_t)sh))
        return -EINVAL;
    if (len < 4 || data[0] != 0xFF || data[1] != 0xD8)
        return BFS_E_NOT_JPEG;

    struct jpeg_decompress_struct *c = &d->cinfo;
    int cmyk = (info->flags & BFS_COLOR_MASK) == BFS_COLOR_CMYK;
    int croppable = !(info->flags & (BFS_F_PROGRESSIVE | BFS_F_ODD_SAMPLING)) &&
                    (info->flags & BFS_COLOR_MASK) == BFS_COLOR_YCC;
    d->jerr.warnings = 0;
    if (setjmp(d->jerr.jb)) {
        jpeg_abort_decompress(c);
        return BFS_E_JPEG_DATA;
    }
    jpeg_mem_src(c, data, (unsigned long)len);
    if (jpeg_read_header(c, TRUE) != JPEG_HEADER_OK) {
        jpeg_abort_decompress(c);
        return BFS_E_JPEG_HEADER;
    }
    /* The table may disagree with the file (a corrupt entry, or a folder file changed
     * after probing): trust the file, but only when it is what we planned for. */
    if ((int)c->image_width != info->width || (int)c->image_height != info->height ||
        (c->num_components == 4) != cmyk) {
        jpeg_abort_decompress(c);
        return BFS_E_JPEG_DATA;
    }
    c->out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
    c->scale_num = 1;
    c->scale_denom = (unsigned)scale;
    c->dct_method = JDCT_ISLOW;
    c->do_fancy_upsampling = TRUE;
    jpeg_start_decompress(c);
    if ((int)c->output_width != sw || (int)c->output_height != sh) {
        jpeg_abort_decompress(c);
        return -EINVAL;
    }

    /* Region to decode: the request plus a margin, columns snapped by libjpeg. */
    JDIMENSION cx = 0, cw = c->output_width;
    int ry0 = 0, ry1 = sh;
    if (croppable) {
        int mx0 = x0 - MARGIN < 0 ? 0 : x0 - MARGIN;
        int mx1 = x1 + MARGIN > sw ? sw : x1 + MARGIN;
        ry0 = y0 - MARGIN < 0 ? 0 : y0 - MARGIN;
        ry1 = y1 + MARGIN > sh ? sh : y1 + MARGIN;
        cx = (JDIMENSION)mx0;
        cw = (JDIMENSION)(mx1 - mx0);
        if (cx != 0 || cw != c->output_width)
            jpeg_crop_scanline(c, &cx, &cw);
    }
    size_t stride = (size_t)cw * 3;
    if ((!dst && grow(&d->buf, &d->cap, stride * (size_t)(ry1 - ry0))) ||
        (cmyk && grow(&d->row4, &d->row4_cap, (size_t)cw * 4))) {
        jpeg_abort_decompress(c);
        return -ENOMEM;
    }
    if (ry0 > 0 && (int)jpeg_skip_scanlines(c, (JDIMENSION)ry0) != ry0) {
        jpeg_abort_decompress(c);
        return BFS_E_JPEG_DATA;
    }
    uint8_t *to = dst ? dst : d->buf;
    for (int y = ry0; y < ry1;) {
        JSAMPROW row = cmyk ? d->row4 : to + (size_t)(y - ry0) * stride;
        JDIMENSION got = jpeg_read_scanlines(c, &row, 1);
        if (got != 1) {
            jpeg_abort_decompress(c);
            return BFS_E_JPEG_DATA;
        }
        if (cmyk)
            cmyk_row_to_rgb(d->row4, to + (size_t)(y - ry0) * stride, (int)cw);
        y++;
    }
    /* Rows below the region are never decoded; finishing would read to EOI for nothing. */
    if (ry1 < sh)
        jpeg_abort_decompress(c);
    else
        jpeg_finish_decompress(c);
    if (d->jerr.warnings)
        return BFS_E_JPEG_DATA;
    *out = (bfs_pixels){.rgb = to,
                        .stride = stride,
                        .x0 = (int)cx,
                        .y0 = ry0,
                        .w = (int)cw,
                        .h = ry1 - ry0,
                        .img_w = sw,
                        .img_h = sh,
                        .scale = scale};
    if (scale > 1)
        atomic_fetch_add_explicit(&d->n_scaled, 1, memory_order_relaxed);
    if (croppable && ((int)cw != sw || ry1 - ry0 != sh))
        atomic_fetch_add_explicit(&d->n_cropped, 1, memory_order_relaxed);
    else
        atomic_fetch_add_explicit(&d->n_full, 1, memory_order_relaxed);
    return 0;
}

int bfs_decoder_decode(bfs_decoder *d, const uint8_t *data, size_t len, const bfs_image_info *info,
                       int scale, int x0, int y0, int x1, int y1, bfs_pixels *out)
{
    return decode(d, data, len, info, scale, x0, y0, x1, y1, NULL, 0, out);
}

int bfs_decoder_decode_image(bfs_decoder *d, const uint8_t *data, size_t len,
                             const bfs_image_info *info, int scale, uint8_t *dst, size_t dst_size)
{
    if (info->width <= 0 || info->height <= 0 || scale < 1)
        return -EINVAL;
    bfs_pixels px;
    return decode(d, data, len, info, scale, 0, 0, scaled(info->width, scale),
                  scaled(info->height, scale), dst, dst_size, &px);
}
