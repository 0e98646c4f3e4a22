/* jpeg.c — JPEG header walker and whole-image decode/encode (see jpeg.h). */
#include "engine/dataset/jpeg.h"
#include "engine/dataset/bfs.h"
#include "base/err.h"

#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include <jpeglib.h>

#include <jerror.h>

static int be16(const uint8_t *p)
{
    return (p[0] << 8) | p[1];
}

static int parse_sof(const uint8_t *seg, size_t n, int marker, bfs_jpeg_header *h)
{
    /* SOF: P(1) Y(2) X(2) Nf(1) then Nf * (C, HV, Tq) */
    if (n < 6)
        return BFS_E_JPEG_HEADER;
    int precision = seg[0];
    h->height = be16(seg + 1);
    h->width = be16(seg + 3);
    h->components = seg[5];
    if (n < 6 + 3 * (size_t)h->components)
        return BFS_E_JPEG_HEADER;
    if (marker == 0xC3 || (marker >= 0xC5 && marker <= 0xC7) || marker == 0xCB || marker >= 0xCD)
        return BFS_E_JPEG_UNSUPPORTED; /* lossless or hierarchical */
    if (precision != 8)
        return BFS_E_JPEG_UNSUPPORTED;
    if (h->width == 0 || h->height == 0) /* height 0 means a DNL marker: not supported */
        return BFS_E_JPEG_HEADER;
    if ((uint64_t)h->width * (uint64_t)h->height > BFS_JPEG_MAX_PIXELS)
        return BFS_E_JPEG_TOO_LARGE;
    if (h->components != 1 && h->components != 3 && h->components != 4)
        return BFS_E_JPEG_HEADER;
    for (int c = 0; c < h->components; c++) {
        h->hs[c] = seg[6 + 3 * c + 1] >> 4;
        h->vs[c] = seg[6 + 3 * c + 1] & 15;
        h->dqt_used |= 1u << (seg[6 + 3 * c + 2] & 3);
        if (seg[6 + 3 * c + 2] > 3)
            h->dqt_used |= 1u << 8; /* no such table: never self-contained */
        if (h->hs[c] < 1 || h->hs[c] > 4 || h->vs[c] < 1 || h->vs[c] > 4)
            return BFS_E_JPEG_HEADER;
    }
    h->progressive = marker == 0xC2 || marker == 0xCA;
    h->arithmetic = marker >= 0xC9;
    return 0;
}

int bfs_jpeg_parse_header(const uint8_t *d, size_t len, bfs_jpeg_header *h)
{
    memset(h, 0, sizeof *h);
    h->adobe_transform = -1;
    if (len < 4 || d[0] != 0xFF || d[1] != 0xD8)
        return BFS_E_NOT_JPEG;
    int have_sof = 0;
    size_t pos = 2;
    for (;;) {
        /* a marker: 0xFF, optional fill 0xFF bytes, then the code */
        if (pos >= len || d[pos] != 0xFF)
            return BFS_E_JPEG_HEADER;
        while (pos < len && d[pos] == 0xFF)
            pos++;
        if (pos >= len)
            return BFS_E_JPEG_HEADER;
        int m = d[pos++];
        if (m == 0x01 || (m >= 0xD0 && m <= 0xD7))
            continue; /* TEM, RSTn: no length */
        if (m == 0xD8 || m == 0xD9 || m == 0x00)
            return BFS_E_JPEG_HEADER; /* SOI again or EOI before SOS */
        if (pos + 2 > len)
            return BFS_E_JPEG_HEADER;
        size_t seglen = (size_t)be16(d + pos);
        if (seglen < 2 || pos + seglen > len)
            return BFS_E_JPEG_HEADER;
        const uint8_t *seg = d + pos + 2;
        size_t n = seglen - 2;
        if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
            if (have_sof)
                return BFS_E_JPEG_HEADER;
            int rc = parse_sof(seg, n, m, h);
            if (rc)
                return rc;
            have_sof = 1;
            h->sof_offset = (size_t)(seg - d);
        } else if (m == 0xEE && n >= 12 && memcmp(seg, "Adobe", 5) == 0) {
            h->adobe_transform = seg[11];
        } else if (m == 0xDB) { /* DQT: (Pq Tq, 64 or 128 values)... */
            for (size_t i = 0; i < n;) {
                size_t tl = 1 + ((seg[i] >> 4) ? 128 : 64);
                if (i + tl > n)
                    return BFS_E_JPEG_HEADER;
                h->dqt_defined |= 1u << (seg[i] & 3);
                i += tl;
            }
        } else if (m == 0xC4) { /* DHT: (Tc Th, 16 counts, values)... */
            for (size_t i = 0; i < n;) {
                if (i + 17 > n)
                    return BFS_E_JPEG_HEADER;
                size_t count = 0;
                for (int b = 1; b <= 16; b++)
                    count += seg[i + b];
                if (i + 17 + count > n)
                    return BFS_E_JPEG_HEADER;
                h->dht_defined |= 1u << ((seg[i] >> 4 ? 4 : 0) + (seg[i] & 3));
                i += 17 + count;
            }
        } else if (m == 0xDD) {
            if (n < 2)
                return BFS_E_JPEG_HEADER;
            h->restart_interval = be16(seg); /* a later DRI replaces an earlier one */
        } else if (m == 0xDA) {
            if (!have_sof || n < 1 || seg[0] < 1 || seg[0] > 4)
                return BFS_E_JPEG_HEADER; /* Ns: 1..4 components in a scan */
            h->scan_components = seg[0];
            h->scan_offset = pos + seglen;
            for (size_t c = 0; c < (size_t)seg[0] && 2 + 2 * c < n; c++) {
                unsigned t = seg[2 + 2 * c]; /* Td Ta */
                h->dht_used |= 1u << (t >> 4 & 3) | 1u << (4 + (t & 3));
                if ((t >> 4) > 3 || (t & 15) > 3)
                    h->dht_used |= 1u << 8;
            }
            return 0;
        }
        pos += seglen;
    }
}

int bfs_jpeg_self_contained(const bfs_jpeg_header *h)
{
    return !h->progressive && h->scan_components == h->components &&
           !(h->dqt_used & ~h->dqt_defined) && !(h->dht_used & ~h->dht_defined);
}

uint16_t bfs_jpeg_sample_flags(const bfs_jpeg_header *h)
{
    uint16_t f = BFS_KIND_JPEG;
    if (h->progressive)
        f |= BFS_F_PROGRESSIVE;
    if (h->arithmetic)
        f |= BFS_F_ARITHMETIC;
    if (h->components == 1)
        f |= BFS_COLOR_GRAY;
    else if (h->components == 4)
        f |= BFS_COLOR_CMYK;
    if (h->components == 3) {
        /* croppable with plain chroma upsampling: luma 1x1, 2x1, 1x2 or 2x2, chroma 1x1 */
        int ok = h->hs[0] <= 2 && h->vs[0] <= 2 && h->hs[1] == 1 && h->vs[1] == 1 &&
                 h->hs[2] == 1 && h->vs[2] == 1;
        if (!ok)
            f |= BFS_F_ODD_SAMPLING;
    }
    int hs = h->hs[0] >= 1 && h->hs[0] <= 4 ? h->hs[0] : 1;
    int vs = h->vs[0] >= 1 && h->vs[0] <= 4 ? h->vs[0] : 1;
    f |= (uint16_t)((hs - 1) << BFS_SAMP_H_SHIFT);
    f |= (uint16_t)((vs - 1) << BFS_SAMP_V_SHIFT);
    return f;
}

int bfs_jpeg_decode_rgb(const uint8_t *data, size_t len, uint8_t **rgb, int *w, int *h)
{
    bfs_jpeg_header hd;
    int rc = bfs_jpeg_parse_header(data, len, &hd);
    if (rc)
        return rc;
    tjhandle tj = tjInitDecompress();
    if (!tj)
        return -ENOMEM;
    int cmyk = hd.components == 4;
    size_t px = (size_t)hd.width * hd.height;
    uint8_t *buf = malloc(px * (cmyk ? 4 : 3));
    if (!buf) {
        tjDestroy(tj);
        return -ENOMEM;
    }
    /* TJFLAG_STOPONWARNING: a truncated file is a warning to libjpeg; to us it is corrupt.
     * TJFLAG_LIMITSCANS: refuse progressive files with absurd scan counts (CPU bombs). */
    rc = tjDecompress2(tj, data, (unsigned long)len, buf, hd.width, 0, hd.height,
                       cmyk ? TJPF_CMYK : TJPF_RGB, TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS);
    tjDestroy(tj);
    if (rc != 0) {
        free(buf);
        return BFS_E_JPEG_DATA;
    }
    if (cmyk) {
        /* libjpeg delivers Adobe-style inverted CMYK (YCCK already converted to it); the
         * conversion is Pillow's, so packed raw pixels equal what Pillow decodes. */
        for (size_t i = 0; i < px; i++) {
            unsigned k = buf[4 * i + 3];
            for (int c = 0; c < 3; c++) { /* Pillow's K - MULDIV255(255 - C, K) */
                unsigned t = (255u - buf[4 * i + c]) * k + 128;
                buf[3 * i + c] = (uint8_t)(k - (((t >> 8) + t) >> 8));
            }
        }
        uint8_t *shrunk = realloc(buf, px * 3);
        if (shrunk)
            buf = shrunk;
    }
    *rgb = buf;
    *w = hd.width;
    *h = hd.height;
    return 0;
}

int bfs_jpeg_encode_rgb(const uint8_t *rgb, int w, int h, int quality, int gray, uint8_t **out,
                        size_t *len)
{
    tjhandle tj = tjInitCompress();
    if (!tj)
        return -ENOMEM;
    unsigned char *buf = NULL;
    unsigned long size = 0;
    int rc = tjCompress2(tj, rgb, w, 0, h, TJPF_RGB, &buf, &size, gray ? TJSAMP_GRAY : TJSAMP_420,
                         quality, 0);
    tjDestroy(tj);
    if (rc != 0) {
        tjFree(buf);
        return -EINVAL;
    }
    *out = malloc(size);
    if (!*out) {
        tjFree(buf);
        return -ENOMEM;
    }
    memcpy(*out, buf, size);
    *len = size;
    tjFree(buf);
    return 0;
}

/* Whole decodes (bfs_jpeg_check, bfs_jpeg_add_restarts): one error manager and one jump
 * target for the decompressor (and the compressor); the first warning is an error too (a
 * truncated file or a bad Huffman code is only a warning to libjpeg, which goes on with
 * gray: to us the file is corrupt, and there is no point in decoding the rest of it). The
 * first message is kept for the user. */
typedef struct jerr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    int oom; /* libjpeg-turbo ran out of memory: not the file's fault */
    char *why;
    size_t whylen;
} jerr;

static void j_note(j_common_ptr c)
{
    jerr *e = (jerr *)c->err;
    if (e->pub.msg_code == JERR_OUT_OF_MEMORY)
        e->oom = 1;
    if (e->why && e->whylen && !e->why[0]) {
        char msg[JMSG_LENGTH_MAX];
        e->pub.format_message(c, msg);
        snprintf(e->why, e->whylen, "%s", msg);
    }
}

static void j_on_error(j_common_ptr c)
{
    j_note(c);
    longjmp(((jerr *)c->err)->jb, 1);
}

static void j_on_message(j_common_ptr c, int level)
{
    if (level < 0)
        j_on_error(c);
}

/* the scan limit of decode.c (a progressive file can be a CPU bomb) */
#define J_MAX_SCANS 500

static void j_on_progress(j_common_ptr c)
{
    if (c->is_decompressor && ((j_decompress_ptr)c)->input_scan_number > J_MAX_SCANS) {
        jerr *e = (jerr *)c->err;
        if (e->why && e->whylen && !e->why[0])
            snprintf(e->why, e->whylen, "more than %d progressive scans", J_MAX_SCANS);
        longjmp(e->jb, 1);
    }
}

static void j_init(jerr *e, char *why, size_t whylen)
{
    memset(e, 0, sizeof *e);
    jpeg_std_error(&e->pub);
    e->pub.error_exit = j_on_error;
    e->pub.emit_message = j_on_message;
    e->why = why, e->whylen = whylen;
    if (why && whylen)
        why[0] = 0;
}

int bfs_jpeg_check(const uint8_t *data, size_t len, char *why, size_t whylen)
{
    bfs_jpeg_header hd;
    int rc = bfs_jpeg_parse_header(data, len, &hd);
    if (why && whylen)
        why[0] = 0;
    if (rc)
        return rc;
    struct jpeg_decompress_struct c;
    struct jpeg_progress_mgr progress = {.progress_monitor = j_on_progress};
    jerr err;
    j_init(&err, why, whylen);
    memset(&c, 0, sizeof c); /* jpeg_destroy_decompress of a zeroed struct frees nothing */
    c.err = &err.pub;
    if (setjmp(err.jb)) {
        jpeg_destroy_decompress(&c);
        return err.oom ? -ENOMEM : BFS_E_JPEG_DATA;
    }
    jpeg_create_decompress(&c);
    c.progress = &progress;
    jpeg_mem_src(&c, data, (unsigned long)len);
    jpeg_read_header(&c, TRUE);
    /* Set up as the engine's whole decode at full scale (decode.c), so that libjpeg-turbo
     * accepts or refuses the same files; then skip every row but the last: skipped rows
     * are only entropy-decoded, which is where corruption shows (the IDCT, upsampling and
     * colour conversion cannot fail on data), and a skip that reaches the last row would
     * decode nothing. */
    c.out_color_space = c.num_components == 4 ? JCS_CMYK : JCS_RGB;
    c.dct_method = JDCT_ISLOW;
    c.do_fancy_upsampling = TRUE;
    jpeg_start_decompress(&c);
    JSAMPARRAY row = (*c.mem->alloc_sarray)((j_common_ptr)&c, JPOOL_IMAGE,
                                            c.output_width * (JDIMENSION)c.output_components, 1);
    JDIMENSION rest = c.output_height - 1;
    if ((rest && jpeg_skip_scanlines(&c, rest) != rest) || jpeg_read_scanlines(&c, row, 1) != 1) {
        if (why && whylen)
            snprintf(why, whylen, "fewer rows than the header says");
        longjmp(err.jb, 1);
    }
    jpeg_finish_decompress(&c); /* reads on to EOI: a file cut short warns here */
    jpeg_destroy_decompress(&c);
    return 0;
}

/* A growable output buffer whose current block is always known here (libjpeg-turbo's
 * jpeg_mem_dest only reports it at the end: after an error its last block would leak and
 * the first one be freed twice). */
typedef struct tr_dest {
    struct jpeg_destination_mgr pub;
    uint8_t *buf;
    size_t cap, len;
} tr_dest;

static void tr_dest_init(j_compress_ptr c)
{
    tr_dest *d = (tr_dest *)c->dest;
    d->pub.next_output_byte = d->buf;
    d->pub.free_in_buffer = d->cap;
}

static boolean tr_dest_grow(j_compress_ptr c)
{
    tr_dest *d = (tr_dest *)c->dest;
    uint8_t *n = realloc(d->buf, d->cap * 2);
    if (!n) {
        c->err->msg_code = JERR_OUT_OF_MEMORY; /* j_on_error: -ENOMEM */
        c->err->error_exit((j_common_ptr)c);
    }
    d->buf = n;
    d->pub.next_output_byte = n + d->cap;
    d->pub.free_in_buffer = d->cap;
    d->cap *= 2;
    return TRUE;
}

static void tr_dest_term(j_compress_ptr c)
{
    tr_dest *d = (tr_dest *)c->dest;
    d->len = d->cap - d->pub.free_in_buffer;
}

/* Larger images keep their bytes: re-encoding holds every DCT coefficient in memory
 * (3 bytes per pixel at 4:2:0, 6 at 4:4:4), per pack worker. 2^26 pixels is 8192 x 8192. */
#define TR_MAX_PIXELS (1ULL << 26)

int bfs_jpeg_add_restarts(const uint8_t *data, size_t len, int interval, uint8_t **out,
                          size_t *outlen)
{
    if (interval < 1 || interval > 65535)
        return -EINVAL;
    bfs_jpeg_header hd;
    int rc = bfs_jpeg_parse_header(data, len, &hd);
    if (rc)
        return rc;
    if (hd.components != 3 || hd.arithmetic ||
        (bfs_jpeg_sample_flags(&hd) & BFS_F_ODD_SAMPLING) || /* never cropped: no gain */
        (uint64_t)hd.width * (uint64_t)hd.height > TR_MAX_PIXELS ||
        (hd.restart_interval == interval && !hd.progressive && hd.scan_components == 3))
        return 1;
    struct jpeg_decompress_struct src;
    struct jpeg_compress_struct dst;
    struct jpeg_progress_mgr progress = {.progress_monitor = j_on_progress};
    jerr err;
    tr_dest dest = {.pub = {.init_destination = tr_dest_init,
                            .empty_output_buffer = tr_dest_grow,
                            .term_destination = tr_dest_term},
                    .cap = len + len / 8 + 4096};
    /* volatile: read after a longjmp. Both structs start zeroed, and jpeg_destroy_* of one
     * never created, or created only in part, frees what there is (nothing when mem is
     * NULL): the handler destroys both whatever happened. */
    volatile int keep = 0;
    memset(&src, 0, sizeof src);
    memset(&dst, 0, sizeof dst);
    j_init(&err, NULL, 0);
    src.err = dst.err = &err.pub;
    if (!(dest.buf = malloc(dest.cap)))
        return -ENOMEM;
    if (setjmp(err.jb)) {
        jpeg_destroy_compress(&dst);
        jpeg_destroy_decompress(&src);
        free(dest.buf);
        return keep ? 1 : err.oom ? -ENOMEM : BFS_E_JPEG_DATA;
    }
    jpeg_create_decompress(&src);
    src.progress = &progress;
    jpeg_mem_src(&src, data, (unsigned long)len);
    jpeg_read_header(&src, TRUE);
    if (src.jpeg_color_space != JCS_YCbCr) {
        keep = 1;
        longjmp(err.jb, 1);
    }
    jvirt_barray_ptr *coef = jpeg_read_coefficients(&src);
    jpeg_create_compress(&dst);
    dst.dest = &dest.pub;
    jpeg_copy_critical_parameters(&src, &dst);
    dst.optimize_coding = TRUE;
    dst.restart_interval = (unsigned)interval;
    jpeg_write_coefficients(&dst, coef);
    jpeg_finish_compress(&dst);
    jpeg_destroy_compress(&dst);
    jpeg_destroy_decompress(&src); /* not finished: the rest of the file is not needed */
    *out = dest.buf, *outlen = dest.len;
    return 0;
}
