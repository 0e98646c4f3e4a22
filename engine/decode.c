/*
 * decode.c — crop-aware JPEG and raw decoding (see decode.h).
 *
 * One jpeg_decompress_struct per thread, reused from sample to sample while each file
 * brings every table it decodes with; before any other file (tables missing, progressive,
 * several scans) it is made anew, since libjpeg keeps DHT/DQT tables from file to file and
 * a file would otherwise decode with tables borrowed from whichever file the thread saw
 * last (bfs_jpeg_self_contained). Errors longjmp back to the decode, which aborts the
 * decompressor so it is reusable.
 */
#include "engine/decode.h"
#include "engine/dataset/bfs.h"
#include "engine/huff.h"
#include "engine/ycc.h"
#include "base/err.h"
#include "engine/dataset/image.h"
#include "engine/dataset/jpeg.h"

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
    uint8_t *win; /* restart-segment window: a JPEG of the MCUs a crop needs */
    size_t win_cap;
    size_t *seg; /* offsets of restart segments: start of i at 2i, end at 2i + 1 */
    size_t seg_cap;
    /* counters: incremented by the owning worker, read by /stats from other threads */
    _Atomic uint64_t n_cropped, n_full, n_scaled, n_raw, n_window, n_own;
    bfs_huff *huff; /* our entropy decoder for windows (huff.h); NULL: libjpeg-turbo's */
    int stale;      /* cinfo could not be made anew (no memory): make it before using it */
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
    if (bfs_huff_wanted() && !(d->huff = bfs_huff_create())) {
        free(d);
        return -ENOMEM;
    }
    d->cinfo.err = jpeg_std_error(&d->jerr.pub);
    d->jerr.pub.error_exit = on_error;
    d->jerr.pub.emit_message = on_message;
    if (setjmp(d->jerr.jb)) {
        bfs_huff_destroy(d->huff);
        free(d);
        return -ENOMEM;
    }
    jpeg_create_decompress(&d->cinfo);
    d->progress.progress_monitor = on_progress;
    d->cinfo.progress = &d->progress;
    *out = d;
    return 0;
}

/* Replace the decompressor by a new one: no tables left from earlier files. */
static int fresh_decompressor(bfs_decoder *d)
{
    jpeg_destroy_decompress(&d->cinfo); /* also after a failed create: frees what there is */
    d->stale = 1;
    if (setjmp(d->jerr.jb)) {
        jpeg_destroy_decompress(&d->cinfo); /* jpeg_create_decompress could not allocate */
        return -ENOMEM;
    }
    jpeg_create_decompress(&d->cinfo);
    d->cinfo.progress = &d->progress;
    d->stale = 0;
    return 0;
}

int bfs_decoder_set_own_entropy(bfs_decoder *d, int on)
{
    if (on && !d->huff && !(d->huff = bfs_huff_create()))
        return -ENOMEM;
    if (!on) {
        bfs_huff_destroy(d->huff);
        d->huff = NULL;
    }
    return 0;
}

void bfs_decoder_destroy(bfs_decoder *d)
{
    if (!d)
        return;
    jpeg_destroy_decompress(&d->cinfo);
    free(d->buf);
    free(d->row4);
    free(d->win);
    free(d->seg);
    bfs_huff_destroy(d->huff);
    free(d);
}

void bfs_decoder_get_stats(const bfs_decoder *d, bfs_decode_stats *st)
{
    st->cropped = atomic_load_explicit(&d->n_cropped, memory_order_relaxed);
    st->full = atomic_load_explicit(&d->n_full, memory_order_relaxed);
    st->scaled = atomic_load_explicit(&d->n_scaled, memory_order_relaxed);
    st->raw = atomic_load_explicit(&d->n_raw, memory_order_relaxed);
    st->windowed = atomic_load_explicit(&d->n_window, memory_order_relaxed);
    st->own_entropy = atomic_load_explicit(&d->n_own, memory_order_relaxed);
}

int bfs_decoder_probe(const uint8_t *data, size_t len, bfs_image_info *info)
{
    int fmt = bfs_image_sniff(data, len);
    if (fmt == BFS_IMAGE_PNG || fmt == BFS_IMAGE_WEBP) {
        bfs_image_facts f;
        int rc = bfs_image_probe(data, len, &f);
        if (rc)
            return rc;
        *info = (bfs_image_info){.width = f.width, .height = f.height, .flags = f.flags};
        return 0;
    }
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

/* lz4 raw pixels into dst (the decoder's buffer when NULL; dst_size bytes otherwise): the
 * whole image, at scale 1 only, whatever region inside it was asked for. */
static int decode_raw(bfs_decoder *d, const uint8_t *data, size_t len, const bfs_image_info *info,
                      int scale, int x0, int y0, int x1, int y1, uint8_t *dst, size_t dst_size,
                      bfs_pixels *out)
{
    if (info->width <= 0 || info->height <= 0)
        return BFS_E_RAW_DATA;
    size_t need = (size_t)info->width * (size_t)info->height * 3;
    if (need != info->raw_size || need > (size_t)LZ4_MAX_INPUT_SIZE || len > (size_t)INT32_MAX)
        return BFS_E_RAW_DATA;
    if (scale != 1 || x0 < 0 || y0 < 0 || x1 > info->width || y1 > info->height || x0 >= x1 ||
        y0 >= y1)
        return -EINVAL;
    /* An lz4 block yields at most 255 bytes per byte (a match's length bytes add 255
     * each): a block too short for raw_size is corrupt, refused before the buffer for
     * raw_size bytes (up to 2 GB from a table entry) is allocated. */
    if ((uint64_t)len * 255 < need)
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

/* A PNG or WebP (BFS_KIND_CODEC): always the whole image at scale 1, into dst (dst_size
 * bytes) or the decoder's buffer, whatever region inside it was asked for. */
static int decode_codec(bfs_decoder *d, const uint8_t *data, size_t len, const bfs_image_info *info,
                        int scale, int x0, int y0, int x1, int y1, uint8_t *dst, size_t dst_size,
                        bfs_pixels *out)
{
    int webp = (info->flags & BFS_F_WEBP) != 0;
    if (info->width <= 0 || info->height <= 0)
        return webp ? BFS_E_WEBP_DATA : BFS_E_PNG_DATA;
    if ((uint64_t)info->width * (uint64_t)info->height > BFS_JPEG_MAX_PIXELS)
        return BFS_E_IMAGE_TOO_LARGE;
    if (scale != 1 || x0 < 0 || y0 < 0 || x1 > info->width || y1 > info->height || x0 >= x1 ||
        y0 >= y1)
        return -EINVAL;
    /* the table says which format: bytes of another are a corrupt sample */
    if (bfs_image_sniff(data, len) != (webp ? BFS_IMAGE_WEBP : BFS_IMAGE_PNG))
        return webp ? BFS_E_WEBP_DATA : BFS_E_PNG_DATA;
    size_t need = (size_t)info->width * (size_t)info->height * 3;
    if (dst && dst_size < need)
        return -EINVAL;
    if (!dst && grow(&d->buf, &d->cap, need))
        return -ENOMEM;
    uint8_t *to = dst ? dst : d->buf;
    bfs_image_facts f = {info->width, info->height, info->flags};
    int rc = bfs_image_decode(data, len, &f, to, need, NULL, 0);
    if (rc)
        return rc;
    *out = (bfs_pixels){.rgb = to,
                        .stride = (size_t)info->width * 3,
                        .w = info->width,
                        .h = info->height,
                        .img_w = info->width,
                        .img_h = info->height,
                        .scale = 1};
    atomic_fetch_add_explicit(&d->n_full, 1, memory_order_relaxed);
    return 0;
}

/*
 * Restart-segment windows. A baseline JPEG with restart markers (a DRI interval of R MCUs)
 * is a row-major sequence of segments of R MCUs, each decodable on its own: at every RSTn
 * the entropy decoder restarts and the DC predictions reset. On photos entropy decoding
 * is ~80% of a decode (570 of 710 µs per bench-corpus photo: docs/engine.md), and the
 * crop path pays it for every row above the crop (jpeg_skip_scanlines) and every column
 * beside it (jpeg_crop_scanline saves only the IDCT). So, for a crop, build a smaller JPEG: the
 * file's header with the window's size in its SOF, then only the segments covering the
 * window's MCU rows and columns, renumbered RST0..7 in order, then EOI; decode that.
 * Pixels: the IDCT works per block, so the window's blocks decode exactly as in the whole
 * image; fancy upsampling treats the window's edges as image edges, which moves pixels
 * within one chroma sample of them, and the window keeps MARGIN output pixels or more
 * around the region (tests/check_restart.c compares window crops with plain ones).
 * Columns are cut only when R divides the MCUs per row (segments then tile each row);
 * otherwise windows are whole rows, starting at a row that starts a segment.
 * Returns 1 with the window (*wdata, *wlen: the decoder's buffer) and its place in the
 * image (*ox, *oy: origin, multiples of the MCU size; *ww, *wh: size, unscaled pixels);
 * 0 when there is nothing to gain, the layout is not as expected (no DRI, not one
 * interleaved baseline scan of a croppable sampling, a size other than the table's, a
 * marker out of sequence, a truncated scan) or memory is short: the caller then decodes
 * the file as it is, and reports whatever is wrong with it.
 * Corrupt data in segments the window leaves out goes unnoticed, as it does below the
 * crop on the plain path: a sample is bad when what its crop needs does not decode. A
 * checked decode (bfs_decoder_decode_checked) never takes a window.
 */
static int build_window(bfs_decoder *d, const uint8_t *data, size_t len, const bfs_jpeg_header *hp,
                        const bfs_image_info *info, int scale, int x0, int y0, int x1, int y1,
                        const uint8_t **wdata, size_t *wlen, int *ox, int *oy, int *ww, int *wh)
{
    /* the file's own header decides (a table entry may disagree with it: the plain path
     * then reports the sample as corrupt), and it must be croppable by itself */
    if (!hp)
        return 0;
    const bfs_jpeg_header h = *hp;
    if (h.restart_interval <= 0 || h.progressive || h.arithmetic || h.components != 3 ||
        h.scan_components != 3 || h.sof_offset + 5 > h.scan_offset || h.width != info->width ||
        h.height != info->height || (bfs_jpeg_sample_flags(&h) & BFS_F_ODD_SAMPLING))
        return 0;
    long W = h.width, H = h.height, R = h.restart_interval;
    long mw = 8L * h.hs[0], mh = 8L * h.vs[0]; /* croppable: luma has the largest factors */
    long M = (W + mw - 1) / mw, MR = (H + mh - 1) / mh, nseg = (M * MR + R - 1) / R;
    /* the region and its margin in unscaled pixels */
    long ux0 = (long)(x0 - MARGIN) * scale, uy0 = (long)(y0 - MARGIN) * scale;
    long ux1 = (long)(x1 + MARGIN) * scale, uy1 = (long)(y1 + MARGIN) * scale;
    ux0 = ux0 < 0 ? 0 : ux0, uy0 = uy0 < 0 ? 0 : uy0;
    ux1 = ux1 > W ? W : ux1, uy1 = uy1 > H ? H : uy1;
    long r0 = uy0 / mh, r1 = (uy1 + mh - 1) / mh, c0 = 0, c1 = M;
    if (M % R == 0) {
        c0 = ux0 / mw / R * R;
        c1 = ((ux1 + mw - 1) / mw + R - 1) / R * R;
    } else {
        while ((r0 * M) % R)
            r0--;
    }
    if (r0 == 0 && c0 == 0 && c1 == M)
        return 0; /* the crop path skips nothing less */
    int whole_rows = c0 == 0 && c1 == M;
    long s_first = whole_rows ? r0 * M / R : (r0 * M + c0) / R;
    long s_last = whole_rows ? (r1 * M + R - 1) / R - 1 : ((r1 - 1) * M + c1) / R - 1;
    if (s_last >= nseg)
        s_last = nseg - 1;

    /* find segments s_first..s_last: segment k is [seg[2i], seg[2i + 1]), i = k - s_first
     * (no memory, or none of the above: the plain path decodes it) */
    size_t nneed = (size_t)(s_last - s_first + 1) * 2;
    if (nneed > d->seg_cap) {
        size_t *n = realloc(d->seg, nneed * sizeof *n);
        if (!n)
            return 0;
        d->seg = n, d->seg_cap = nneed;
    }
    size_t p = h.scan_offset;
    long k = 0;
    if (s_first == 0)
        d->seg[0] = p;
    while (k <= s_last) {
        const uint8_t *q = p < len ? memchr(data + p, 0xFF, len - p) : NULL;
        if (!q)
            return 0;
        size_t f = (size_t)(q - data), e = f;
        while (e + 1 < len && data[e + 1] == 0xFF)
            e++; /* fill bytes before a marker */
        if (e + 1 >= len)
            return 0;
        int b = data[e + 1];
        if (b == 0x00 && e == f) { /* a stuffed 0xFF data byte */
            p = f + 2;
            continue;
        }
        if (b == 0x00)
            return 0;
        if (k >= s_first)
            d->seg[2 * (k - s_first) + 1] = f;
        k++;
        if (b < 0xD0 || b > 0xD7) /* EOI or another marker: the scan ends */
            break;
        if (b != 0xD0 + ((k - 1) & 7))
            return 0;
        if (k >= s_first && k <= s_last)
            d->seg[2 * (k - s_first)] = e + 2;
        p = e + 2;
    }
    if (k <= s_last)
        return 0;
#define SEG_START(sg) d->seg[2 * ((sg)-s_first)]
#define SEG_END(sg)   d->seg[2 * ((sg)-s_first) + 1]

    size_t need = h.scan_offset + 2;
    if (whole_rows) {
        for (long sg = s_first; sg <= s_last; sg++)
            need += SEG_END(sg) - SEG_START(sg) + 2;
    } else {
        for (long r = r0; r < r1; r++)
            for (long sg = (r * M + c0) / R; sg < (r * M + c1) / R; sg++)
                need += SEG_END(sg) - SEG_START(sg) + 2;
    }
    if (grow(&d->win, &d->win_cap, need))
        return 0;
    long wx = c0 * mw, wy = r0 * mh;
    long wW = (c1 == M ? W : c1 * mw) - wx, wH = (r1 == MR ? H : r1 * mh) - wy;
    uint8_t *o = d->win;
    memcpy(o, data, h.scan_offset);
    o[h.sof_offset + 1] = (uint8_t)(wH >> 8), o[h.sof_offset + 2] = (uint8_t)wH;
    o[h.sof_offset + 3] = (uint8_t)(wW >> 8), o[h.sof_offset + 4] = (uint8_t)wW;
    o += h.scan_offset;
    long n = 0;
#define EMIT(sg)                                                                                   \
    do {                                                                                           \
        if (n) {                                                                                   \
            *o++ = 0xFF;                                                                           \
            *o++ = (uint8_t)(0xD0 + ((n - 1) & 7));                                                \
        }                                                                                          \
        size_t l_ = SEG_END(sg) - SEG_START(sg);                                                   \
        memcpy(o, data + SEG_START(sg), l_);                                                       \
        o += l_;                                                                                   \
        n++;                                                                                       \
    } while (0)
    if (whole_rows) {
        for (long sg = s_first; sg <= s_last; sg++)
            EMIT(sg);
    } else {
        for (long r = r0; r < r1; r++)
            for (long sg = (r * M + c0) / R; sg < (r * M + c1) / R; sg++)
                EMIT(sg);
    }
#undef EMIT
#undef SEG_START
#undef SEG_END
    *o++ = 0xFF;
    *o++ = 0xD9;
    *wdata = d->win, *wlen = (size_t)(o - d->win);
    *ox = (int)wx, *oy = (int)wy, *ww = (int)wW, *wh = (int)wH;
    return 1;
}

/* One libjpeg pass over a file (or a window of it, see build_window). */
typedef struct pass {
    const uint8_t *data;
    size_t len;
    int iw, ih;         /* the file's size */
    int sw, sh;         /* scaled */
    int x0, y0, x1, y1; /* the region, scaled, in the file's coordinates */
    int ox, oy;         /* the file's origin in the image (a window's), unscaled */
    int windowed;
    int whole; /* read the file to EOI, the rows below the region too (checked decodes) */
} pass;

static int decode_pass(bfs_decoder *d, const pass *p, const bfs_image_info *info, int scale,
                       int cmyk, int croppable, uint8_t *dst, bfs_pixels *out)
{
    struct jpeg_decompress_struct *c = &d->cinfo;
    d->jerr.warnings = 0;
    if (setjmp(d->jerr.jb)) {
        jpeg_abort_decompress(c);
        return BFS_E_JPEG_DATA;
    }
    jpeg_mem_src(c, p->data, (unsigned long)p->len);
    if (jpeg_read_header(c, TRUE) != JPEG_HEADER_OK) {
        jpeg_abort_decompress(c);
        return BFS_E_JPEG_HEADER;
    }
    /* The table may disagree with the file (a corrupt entry, or a folder file changed
     * after probing): trust the file, but only when it is what we planned for. */
    if ((int)c->image_width != p->iw || (int)c->image_height != p->ih ||
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
    if ((int)c->output_width != p->sw || (int)c->output_height != p->sh) {
        jpeg_abort_decompress(c);
        return -EINVAL;
    }
    /* a window is of a file decoded whole and clean before (huff.h): our entropy decoder */
    if (p->windowed && d->huff && bfs_huff_install(d->huff, c))
        atomic_fetch_add_explicit(&d->n_own, 1, memory_order_relaxed);
    bfs_ycc_install(c); /* YCbCr to RGB with AVX-512 where the CPU has it (ycc.h) */

    /* Region to decode: the request plus a margin, columns snapped by libjpeg. */
    JDIMENSION cx = 0, cw = c->output_width;
    int ry0 = 0, ry1 = p->sh;
    if (croppable) {
        int mx0 = p->x0 - MARGIN < 0 ? 0 : p->x0 - MARGIN;
        int mx1 = p->x1 + MARGIN > p->sw ? p->sw : p->x1 + MARGIN;
        ry0 = p->y0 - MARGIN < 0 ? 0 : p->y0 - MARGIN;
        ry1 = p->y1 + MARGIN > p->sh ? p->sh : p->y1 + MARGIN;
        cx = (JDIMENSION)mx0;
        cw = (JDIMENSION)(mx1 - mx0);
        if (cx != 0 || cw != c->output_width)
            jpeg_crop_scanline(c, &cx, &cw);
    }
    size_t stride = (size_t)cw * 3;
    /* a checked decode reads the last row into one more row of the buffer (below) */
    size_t rows = (size_t)(ry1 - ry0) + (p->whole && ry1 < p->sh);
    if ((!dst && grow(&d->buf, &d->cap, stride * rows)) ||
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
    /* A checked decode goes on to EOI: the rows below the region are entropy-decoded
     * (skipped), but the last one, which is read: libjpeg-turbo skips a request that
     * reaches the end without decoding anything. */
    if (p->whole && ry1 < p->sh) {
        JDIMENSION rest = (JDIMENSION)(p->sh - 1 - ry1);
        JSAMPROW row = cmyk ? d->row4 : d->buf + (size_t)(ry1 - ry0) * stride;
        if ((rest && jpeg_skip_scanlines(c, rest) != rest) ||
            jpeg_read_scanlines(c, &row, 1) != 1) {
            jpeg_abort_decompress(c);
            return BFS_E_JPEG_DATA;
        }
    }
    /* Otherwise rows below the region are never decoded; finishing would read to EOI for
     * nothing. A window may end inside its last segment (whole rows): it is never
     * finished. */
    if ((ry1 < p->sh && !p->whole) || p->windowed)
        jpeg_abort_decompress(c);
    else
        jpeg_finish_decompress(c);
    if (d->jerr.warnings)
        return BFS_E_JPEG_DATA;
    *out = (bfs_pixels){.rgb = to,
                        .stride = stride,
                        .x0 = (int)cx + p->ox / scale,
                        .y0 = ry0 + p->oy / scale,
                        .w = (int)cw,
                        .h = ry1 - ry0,
                        .img_w = scaled(info->width, scale),
                        .img_h = scaled(info->height, scale),
                        .scale = scale};
    if (p->windowed)
        atomic_fetch_add_explicit(&d->n_window, 1, memory_order_relaxed);
    if (scale > 1)
        atomic_fetch_add_explicit(&d->n_scaled, 1, memory_order_relaxed);
    if (p->windowed || (croppable && ((int)cw != p->sw || ry1 - ry0 != p->sh)))
        atomic_fetch_add_explicit(&d->n_cropped, 1, memory_order_relaxed);
    else
        atomic_fetch_add_explicit(&d->n_full, 1, memory_order_relaxed);
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
                  int whole, bfs_pixels *out)
{
    if ((info->flags & BFS_KIND_MASK) == BFS_KIND_RAW)
        return decode_raw(d, data, len, info, scale, x0, y0, x1, y1, dst, dst_size, out);
    if ((info->flags & BFS_KIND_MASK) == BFS_KIND_CODEC)
        return decode_codec(d, data, len, info, scale, x0, y0, x1, y1, dst, dst_size, out);
    if (scale != 1 && scale != 2 && scale != 4 && scale != 8)
        return -EINVAL;
    if ((uint64_t)info->width * info->height > BFS_JPEG_MAX_PIXELS)
        return BFS_E_JPEG_TOO_LARGE;
    int sw = scaled(info->width, scale), sh = scaled(info->height, scale);
    if (x0 < 0 || y0 < 0 || x1 > sw || y1 > sh || x0 >= x1 || y0 >= y1)
        return -EINVAL;
    if (dst &&
        (x0 != 0 || y0 != 0 || x1 != sw || y1 != sh || dst_size / 3 / (size_t)sw < (size_t)sh))
        return -EINVAL;
    if (len < 4 || data[0] != 0xFF || data[1] != 0xD8)
        return BFS_E_NOT_JPEG;

    int cmyk = (info->flags & BFS_COLOR_MASK) == BFS_COLOR_CMYK;
    int croppable = !(info->flags & (BFS_F_PROGRESSIVE | BFS_F_ODD_SAMPLING)) &&
                    (info->flags & BFS_COLOR_MASK) == BFS_COLOR_YCC;
    /* the decompressor is reused only for files that bring every table they use (see
     * bfs_jpeg_self_contained): any other gets a fresh one, as a new process would */
    bfs_jpeg_header h;
    int parsed = bfs_jpeg_parse_header(data, len, &h) == 0;
    if (d->stale || !parsed || !bfs_jpeg_self_contained(&h)) {
        int rc = fresh_decompressor(d);
        if (rc)
            return rc;
    }
    /* a crop of a file with restart markers: decode only the segments it needs */
    int ox = 0, oy = 0, iw = info->width, ih = info->height, windowed = 0;
    if (croppable && !dst && !whole) {
        windowed = build_window(d, data, len, parsed ? &h : NULL, info, scale, x0, y0, x1, y1,
                                &data, &len, &ox, &oy, &iw, &ih);
        if (windowed) { /* region and image in the window's coordinates from here on */
            x0 -= ox / scale, x1 -= ox / scale, y0 -= oy / scale, y1 -= oy / scale;
            sw = scaled(iw, scale), sh = scaled(ih, scale);
        }
    }
    pass p = {.data = data,
              .len = len,
              .iw = iw,
              .ih = ih,
              .sw = sw,
              .sh = sh,
              .x0 = x0,
              .y0 = y0,
              .x1 = x1,
              .y1 = y1,
              .ox = ox,
              .oy = oy,
              .windowed = windowed,
              .whole = whole || dst};
    return decode_pass(d, &p, info, scale, cmyk, croppable, dst, out);
}

int bfs_decoder_decode(bfs_decoder *d, const uint8_t *data, size_t len, const bfs_image_info *info,
                       int scale, int x0, int y0, int x1, int y1, bfs_pixels *out)
{
    return decode(d, data, len, info, scale, x0, y0, x1, y1, NULL, 0, 0, out);
}

int bfs_decoder_decode_checked(bfs_decoder *d, const uint8_t *data, size_t len,
                               const bfs_image_info *info, int scale, int x0, int y0, int x1,
                               int y1, bfs_pixels *out)
{
    return decode(d, data, len, info, scale, x0, y0, x1, y1, NULL, 0, 1, out);
}

int bfs_decoder_decode_image(bfs_decoder *d, const uint8_t *data, size_t len,
                             const bfs_image_info *info, int scale, uint8_t *dst, size_t dst_size)
{
    if (info->width <= 0 || info->height <= 0 || scale < 1)
        return -EINVAL;
    bfs_pixels px;
    return decode(d, data, len, info, scale, 0, 0, scaled(info->width, scale),
                  scaled(info->height, scale), dst, dst_size, 1, &px);
}
