/*
 * pack_transform.c — the packer's workers (see pack.c): each file of an ImageFolder, sample
 * of a .bfs source or sample read from shards through the transform the options ask for
 * (kept as it is once checked, a lossless restart re-encoding, shrunk through the
 * caller's resampler, lz4 raw pixels), into its slot of the window. See pack_internal.h.
 */
#include "engine/dataset/pack_internal.h"
#include "engine/dataset/image.h"
#include "engine/dataset/jpeg.h"
#include "base/err.h"
#include "base/hash.h"
#include "base/io.h"

#include <errno.h>
#include <lz4.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Shrink rgb (w x h) so its longer side is o->max_side, through the caller's resampler
 * (o->resize; the engine's is Pillow-bilinear antialiased). scratch: the thread's. */
static int shrink(const bfs_pack_opts *o, uint8_t **rgb, int *w, int *h, void **scratch)
{
    int max_side = o->max_side;
    int side = *w > *h ? *w : *h;
    if (max_side <= 0 || side <= max_side)
        return 0;
    double f = (double)max_side / side;
    int nw = (int)lround(*w * f), nh = (int)lround(*h * f);
    nw = nw < 1 ? 1 : nw;
    nh = nh < 1 ? 1 : nh;
    uint8_t *out = malloc((size_t)nw * nh * 3);
    if (!out)
        return -ENOMEM;
    int rc = o->resize(scratch, *rgb, *w, *h, out, nw, nh);
    if (rc) {
        free(out);
        return rc;
    }
    free(*rgb);
    *rgb = out, *w = nw, *h = nh;
    return 0;
}

/* --restart: replace r's JPEG bytes by their restart-marked re-encoding, and *hd by its
 * header, where bfs_jpeg_add_restarts can. Returns 0 when it did (the re-encoding read
 * every coefficient: the file decoded whole), 1 when r keeps its bytes undecoded (not
 * eligible, marked so already, or libjpeg-turbo failed: bfs_jpeg_check decides whether it
 * is corrupt), -ENOMEM. A file marked so already counts as restarted. */
static int restart(const bfs_pack_opts *o, result *r, bfs_jpeg_header *hd)
{
    uint8_t *out;
    size_t n;
    bfs_jpeg_header nh;
    if (!o->restart)
        return 1;
    int rc = bfs_jpeg_add_restarts(r->data, r->len, 1, &out, &n);
    if (rc == 1 && hd->restart_interval == 1 && !hd->progressive && hd->scan_components == 3 &&
        hd->components == 3 && !hd->arithmetic && hd->adobe_transform != 0 &&
        !(bfs_jpeg_sample_flags(hd) & BFS_F_ODD_SAMPLING))
        r->restarted = 1; /* marked so already, and croppable by windows */
    if (rc == -ENOMEM)
        return rc;
    if (rc != 0)
        return 1;
    if (bfs_jpeg_parse_header(out, n, &nh) || nh.width != hd->width || nh.height != hd->height) {
        free(out);
        return 1;
    }
    free(r->data);
    r->data = out, r->len = n;
    *hd = nh;
    r->restarted = 1;
    return 0;
}

/* r skips its sample for rc (its data freed). */
static void fail_sample(result *r, int rc)
{
    free(r->data);
    r->data = NULL, r->len = 0;
    r->err = rc;
    r->reason = rc == BFS_E_NOT_JPEG ? "not a JPEG, PNG or WebP image" : bfs_strerror(rc);
}

/* Decoded pixels (rgb, owned: freed here) into r: shrunk to max_side, then stored as lz4
 * raw pixels (raw) or re-encoded as JPEG (gray: one component). */
static void transform_pixels(const bfs_pack_opts *o, uint8_t *rgb, int w, int h, int gray,
                             result *r, void **scratch)
{
    int rc = shrink(o, &rgb, &w, &h, scratch);
    if (rc) {
        free(rgb);
        fail_sample(r, rc);
        return;
    }
    r->s.width = (uint16_t)w;
    r->s.height = (uint16_t)h;
    if (o->raw) {
        size_t raw = (size_t)w * h * 3;
        if (raw > (size_t)LZ4_MAX_INPUT_SIZE || raw > UINT32_MAX) {
            r->err = -EFBIG;
            r->reason = "too large for --raw (use --max-side)";
            free(rgb);
            return;
        }
        int bound = LZ4_compressBound((int)raw);
        uint8_t *z = malloc((size_t)bound);
        int zn = z ? LZ4_compress_default((const char *)rgb, (char *)z, (int)raw, bound) : 0;
        free(rgb);
        if (zn <= 0) {
            free(z);
            r->err = -ENOMEM;
            r->reason = "out of memory (lz4)";
            return;
        }
        r->s.flags = BFS_KIND_RAW;
        r->s.raw_size = (uint32_t)raw;
        r->data = z, r->len = (size_t)zn;
        return;
    }
    uint8_t *jpg;
    size_t jlen;
    rc = bfs_jpeg_encode_rgb(rgb, w, h, o->quality > 0 ? o->quality : 90, gray, &jpg, &jlen);
    free(rgb);
    if (rc) {
        r->err = rc;
        r->reason = "re-encoding failed";
        return;
    }
    bfs_jpeg_header nh;
    if (bfs_jpeg_parse_header(jpg, jlen, &nh) != 0) {
        free(jpg);
        r->err = BFS_E_JPEG_HEADER;
        r->reason = "re-encoded JPEG unreadable";
        return;
    }
    r->data = jpg, r->len = jlen;
    r->reencoded = 1;
    if (restart(o, r, &nh) < 0) { /* out of memory: the output must not depend on it */
        fail_sample(r, -ENOMEM);
        return;
    }
    r->s.flags = bfs_jpeg_sample_flags(&nh);
}

/* A PNG's or WebP's bytes (owned) into r: stored as they are (BFS_KIND_CODEC) once
 * bfs_image_check has decoded them whole; with --raw, or a side over --max-side, decoded
 * and stored as a JPEG's pixels would be (raw pixels, or a JPEG re-encoding). */
static void transform_codec(const bfs_pack_opts *o, uint8_t *data, size_t len, uint32_t label,
                            result *r, void **scratch)
{
    bfs_image_facts f;
    int rc = bfs_image_probe(data, len, &f);
    if (rc) {
        free(data);
        fail_sample(r, rc);
        return;
    }
    r->s.label = label;
    int side = f.width > f.height ? f.width : f.height;
    if (!o->raw && (o->max_side <= 0 || side <= o->max_side)) {
        if ((rc = bfs_image_check(data, len, &f, r->why, sizeof r->why))) {
            free(data);
            fail_sample(r, rc);
            return;
        }
        r->s.width = (uint16_t)f.width;
        r->s.height = (uint16_t)f.height;
        r->s.flags = f.flags;
        r->data = data, r->len = len;
        return;
    }
    uint8_t *rgb = NULL;
    int w, h;
    rc = bfs_image_decode_rgb(data, len, &rgb, &w, &h, r->why, sizeof r->why);
    free(data);
    if (rc) {
        fail_sample(r, rc);
        return;
    }
    transform_pixels(o, rgb, w, h, 0, r, scratch);
}

/* An image's bytes (owned: kept as the payload or freed) into r, as the options say. Every
 * image is decoded whole once, by the transform itself (a restart re-encoding, a shrink,
 * raw pixels) or by bfs_jpeg_check / bfs_image_check, so a corrupt file is skipped in
 * every mode alike. */
static void transform_bytes(const bfs_pack_opts *o, uint8_t *data, size_t len, uint32_t label,
                            result *r, void **scratch)
{
    uint8_t *rgb = NULL;
    int rc;
    r->in_bytes = len;
    int fmt = bfs_image_sniff(data, len);
    if (fmt == BFS_IMAGE_PNG || fmt == BFS_IMAGE_WEBP) {
        transform_codec(o, data, len, label, r, scratch);
        return;
    }
    bfs_jpeg_header hd;
    if ((rc = bfs_jpeg_parse_header(data, len, &hd))) {
        free(data);
        fail_sample(r, rc);
        return;
    }
    r->s.label = label;
    int side = hd.width > hd.height ? hd.width : hd.height;
    if (!o->raw && (o->max_side <= 0 || side <= o->max_side)) {
        r->s.width = (uint16_t)hd.width;
        r->s.height = (uint16_t)hd.height;
        r->data = data, r->len = len; /* stored as is */
        rc = restart(o, r, &hd);
        if (rc == 1) /* not decoded on the way */
            rc = bfs_jpeg_check(r->data, r->len, r->why, sizeof r->why);
        if (rc) {
            r->restarted = 0;
            fail_sample(r, rc);
            return;
        }
        r->s.flags = bfs_jpeg_sample_flags(&hd);
        return;
    }
    int w, h;
    rc = bfs_jpeg_decode_rgb(data, len, &rgb, &w, &h);
    /* TurboJPEG keeps its reason to itself: the check names it (and, should it pass, the
     * file is still one the transform cannot use) */
    if (rc == BFS_E_JPEG_DATA && (rc = bfs_jpeg_check(data, len, r->why, sizeof r->why)) == 0)
        rc = BFS_E_JPEG_DATA;
    free(data);
    if (rc) {
        free(rgb);
        fail_sample(r, rc);
        return;
    }
    transform_pixels(o, rgb, w, h, hd.components == 1, r, scratch);
}

/* File `path` of an ImageFolder into r. */
static void transform(const bfs_pack_opts *o, const char *path, uint32_t label, result *r,
                      void **scratch)
{
    uint8_t *data = NULL;
    size_t len = 0, cap = 0;
    int rc = bfs_read_file(path, &data, &cap, &len);
    if (rc) {
        free(data);
        r->err = rc;
        r->reason = bfs_strerror(rc);
        return;
    }
    transform_bytes(o, data, len, label, r, scratch);
}

/* Sample i of a .bfs source into r: its payload read and verified (a sample that fails is
 * skipped, like an unreadable file), then JPEG, PNG and WebP images as the options say; raw samples
 * and token sequences are kept as they are. */
static void transform_sample(const bfs_pack_opts *o, const bfs_reader *in, uint64_t i, result *r,
                             void **scratch)
{
    bfs_sample s;
    int rc = bfs_get_sample(in, i, &s);
    uint8_t *data = rc ? NULL : malloc(s.length ? s.length : 1);
    if (!rc && !data)
        rc = -ENOMEM;
    if (!rc)
        rc = bfs_read_sample(in, i, BFS_VERIFY_SAMPLE, &s, data, s.length);
    if (rc) {
        free(data);
        r->err = rc;
        r->reason = bfs_strerror(rc);
        return;
    }
    if ((s.flags & BFS_KIND_MASK) == BFS_KIND_RAW ||
        (s.flags & BFS_KIND_MASK) == BFS_KIND_TOKENS) { /* raw pixels, token sequences */
        r->in_bytes = s.length;
        r->s = (bfs_sample_in){.label = s.label,
                               .width = s.width,
                               .height = s.height,
                               .flags = s.flags,
                               .raw_size = s.raw_size};
        r->data = data, r->len = s.length;
        return;
    }
    transform_bytes(o, data, s.length, s.label, r, scratch);
}

/* A record of fields (taken from it) into r: each image through the transform as an
 * ImageFolder's file (one that fails skips the sample, its field named), every value
 * hashed. */
static void transform_record(const pack *p, item *it, result *r, void **scratch)
{
    const bfs_schema *sc = &p->schema;
    r->rec = it->rec;
    memset(&it->rec, 0, sizeof it->rec);
    it->has_rec = 0;
    r->s.label = r->rec.label;
    if (!(r->vin = calloc(sc->n, sizeof *r->vin))) {
        r->err = -ENOMEM;
        r->reason = "out of memory";
        return;
    }
    for (uint32_t k = 0; k < sc->n; k++) {
        bfs_value *v = &r->rec.v[k];
        bfs_value_in *vi = &r->vin[k];
        if (sc->f[k].kind == BFS_FIELD_IMAGE && v->data) {
            result ir = {0};
            transform_bytes(p->o, v->data, v->len, r->rec.label, &ir, scratch);
            r->in_bytes += ir.in_bytes;
            v->data = NULL, v->len = 0;
            if (ir.err) {
                r->err = ir.err;
                r->reason = ir.reason;
                if (k)
                    snprintf(r->why, sizeof r->why, "image field %s%s%.100s", sc->f[k].name,
                             ir.why[0] ? ": " : "", ir.why);
                else
                    memcpy(r->why, ir.why, sizeof r->why);
                return;
            }
            v->data = ir.data, v->len = ir.len;
            *vi = (bfs_value_in){.data = ir.data,
                                 .len = ir.len,
                                 .width = ir.s.width,
                                 .height = ir.s.height,
                                 .flags = ir.s.flags,
                                 .raw_size = ir.s.raw_size};
            if (k == 0) {
                r->s = ir.s;
                r->reencoded = ir.reencoded, r->restarted = ir.restarted;
            }
        } else {
            r->in_bytes += v->len;
            *vi = (bfs_value_in){
                .data = v->len ? v->data : NULL, .len = v->len, .raw_size = v->len ? v->count : 0};
        }
        vi->checksum = bfs_xxh64(vi->data, vi->len, 0);
    }
    r->s.label = r->rec.label;
}

void *bfs_pack_worker(void *arg)
{
    worker_arg *a = arg;
    pack *p = a->p;
    void *scratch = NULL; /* o->resize's */
    for (;;) {
        pthread_mutex_lock(&p->lock);
        while (!p->stop && ((p->next < p->n && p->next >= p->written + p->window) ||
                            (p->next >= p->n && !p->eof)))
            pthread_cond_wait(&p->space, &p->lock);
        if (p->stop || p->next >= p->n || (a->cancel && *a->cancel)) {
            pthread_mutex_unlock(&p->lock);
            break;
        }
        size_t i = p->next++;
        pthread_mutex_unlock(&p->lock);

        result r = {0};
        if (p->items) {
            item *it = &p->items[i % p->window]; /* ours until written (see produce) */
            uint8_t *data = it->data;
            it->data = NULL;
            r.in_bytes = it->len;
            if (it->skip) {
                free(data);
                r.err = -EINVAL;
                r.reason = it->skip;
            } else if (it->has_rec)
                transform_record(p, it, &r, &scratch);
            else
                transform_bytes(p->o, data, it->len, it->label, &r, &scratch);
        } else if (p->in)
            transform_sample(p->o, p->in, i, &r, &scratch);
        else
            transform(p->o, p->f.paths[i], p->f.labels[i], &r, &scratch);
        if (!r.err)
            r.hash = bfs_xxh64(r.data, r.len, 0);
        pthread_mutex_lock(&p->lock);
        r.ready = 1;
        p->slots[i % p->window] = r;
        pthread_cond_broadcast(&p->ready);
        pthread_mutex_unlock(&p->lock);
    }
    if (scratch)
        p->o->resize(&scratch, NULL, 0, 0, NULL, 0, 0);
    return NULL;
}
