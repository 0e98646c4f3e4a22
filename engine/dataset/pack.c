/*
 * pack.c — ImageFolder -> .bfs (see pack.h).
 *
 * Three phases: scan (sorted class directories, sorted recursive file lists), a parallel
 * transform (workers read each file, parse its JPEG header, optionally re-encode or
 * decode to raw pixels), and an ordered append by the calling thread into a bfs_writer.
 * Workers run at most WINDOW items ahead of the writer, which bounds memory to about
 * WINDOW payloads whatever the dataset size.
 *
 * Sharded sources (WebDataset, TFRecord) have no list to scan: the calling thread reads
 * the shards as streams (produce) and hands each sample's image bytes to the workers in
 * the window's input slots, between appends; p->n grows as it reads, p->eof ends it.
 */
#include "engine/dataset/pack.h"
#include "engine/dataset/bfs.h"
#include "engine/dataset/tokfile.h"
#include "engine/dataset/tfrecord.h"
#include "engine/dataset/wds.h"
#include "engine/dataset/manifest.h"
#include "engine/dataset/record.h"
#include "base/err.h"
#include "engine/dataset/folder.h"
#include "base/hash.h"
#include "base/io.h"
#include "engine/dataset/image.h"
#include "engine/dataset/jpeg.h"
#include "base/clock.h"
#include "base/endian.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <lz4.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct result {
    int ready; /* guarded by pack.lock */
    int err;   /* 0, or why the file is skipped */
    const char *reason;
    char why[160]; /* libjpeg-turbo's message for a corrupt JPEG, or "" */
    uint8_t *data; /* payload (owned) */
    size_t len;
    uint64_t hash; /* XXH64 of the payload, computed by the worker */
    uint64_t in_bytes;
    int reencoded;
    int restarted;
    bfs_sample_in s;
    bfs_record rec;    /* a record of fields (version 3): its values (owned) */
    bfs_value_in *vin; /* and their descriptions for the writer (owned), or NULL */
} result;

/* A sample read from a shard, waiting for a worker (sharded sources). */
typedef struct item {
    uint8_t *data; /* its image (owned; the worker takes it) */
    size_t len;
    uint32_t label;
    const char *skip; /* why it cannot be packed, or NULL */
    char *name;       /* "SHARD:KEY", for messages (owned; freed when written) */
    char *skip_owned; /* skip's storage when it is not static text (owned) */
    int has_rec;      /* rec holds the sample's fields (version 3) */
    bfs_record rec;
} item;

typedef struct pack {
    const bfs_pack_opts *o;
    bfs_folder f;   /* the files, their labels, the class names (a .bfs source: names) */
    bfs_reader *in; /* a .bfs source, or NULL */
    const char *src;
    uint64_t n; /* items: files, or the source's samples; sharded: read so far (guarded by
                   lock, written by the calling thread only) */
    int eof;    /* guarded by lock: n is final (at once, except for sharded sources) */
    /* a sharded source (shards.n > 0), read by the calling thread (produce) */
    bfs_shard_list shards;
    item *items;         /* window input slots: item i in items[i % window] */
    size_t shard;        /* the shard being read (shards.n: all read) */
    int fd;              /* its descriptor, or -1 */
    int reading;         /* a reader below is open on fd */
    bfs_wds wds;         /* WebDataset reader */
    bfs_tfr tfr;         /* TFRecord reader */
    uint64_t done_bytes; /* bytes of the shards finished */
    uint64_t *per_class; /* samples packed per label (sharded: grown as labels come) */
    uint32_t nper;       /* its length */
    uint64_t ignored;    /* tar members in no sample (finished shards) */
    /* fields (record.h): every member kept, unless o->image_only */
    int fields_mode;
    int schema_ready;
    bfs_schema schema;
    bfs_members mem;     /* the sample being read */
    bfs_manifest man;    /* manifest reader */
    char image_col[256]; /* manifest: the image's column */
    bfs_writer *w;       /* for bfs_writer_set_fields once the schema is known */
    uint64_t extra;      /* members in no field */
    char extra_name[64]; /* the first such member's name */
    /* work distribution */
    pthread_mutex_t lock;
    pthread_cond_t space, ready;
    size_t next;    /* guarded by lock: next item to claim */
    size_t written; /* guarded by lock: items consumed by the writer */
    int stop;       /* guarded by lock */
    result *slots;
    size_t window;
} pack;

static char temp_path[4096]; /* for signal handlers: see bfs_pack_temp_path */

const char *bfs_pack_temp_path(void)
{
    return temp_path[0] ? temp_path : NULL;
}

/* ---- transform (workers) ---------------------------------------------------------- */

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

typedef struct worker_arg {
    pack *p;
    atomic_int *cancel;
} worker_arg;

static void *worker(void *arg)
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

/* ---- progress --------------------------------------------------------------------- */

/* The progress bar's line: frac done, what is counted (e.g. "12/40 files"), the bytes
 * read so far; at most ten redraws a second, and always the final one. */
static void progress_line(const bfs_pack_opts *o, double frac, const char *count, uint64_t bytes_in,
                          double t0, int final)
{
    static double last;
    double t = bfs_mono_s();
    if (!o->progress || !o->progress_out || (!final && t - last < 0.1))
        return;
    last = t;
    double el = t - t0;
    double mbs = el > 0 ? bytes_in / el / 1e6 : 0;
    double eta = frac > 0 ? el / frac - el : 0;
    char bar[31];
    int fill = (int)(frac * 30);
    for (int i = 0; i < 30; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    fprintf(o->progress_out, "\r[%s] %3.0f%% %s  %.1f MB  %.1f MB/s  ETA %.0fs   %s", bar,
            frac * 100, count, bytes_in / 1e6, mbs, eta, final ? "\n" : "");
    fflush(o->progress_out);
}

static void progress(const pack *p, const bfs_pack_report *rep, uint64_t done, double t0, int final)
{
    const bfs_pack_opts *o = p->o;
    char count[64];
    if (p->items) { /* sharded: the bytes of the shards read tell how far */
        uint64_t at = p->done_bytes + (!p->reading                                 ? 0
                                       : p->shards.format == BFS_FORMAT_WEBDATASET ? p->wds.tar.off
                                       : p->shards.format == BFS_FORMAT_MANIFEST   ? p->man.off
                                                                                   : p->tfr.in_off);
        snprintf(count, sizeof count, "%llu samples", (unsigned long long)done);
        progress_line(o, p->shards.total ? (double)at / p->shards.total : 1, count, at, t0, final);
        return;
    }
    snprintf(count, sizeof count, "%llu/%llu files", (unsigned long long)done,
             (unsigned long long)rep->files);
    progress_line(o, rep->files ? (double)done / rep->files : 1, count, rep->bytes_in, t0, final);
}

/* ---- driver ----------------------------------------------------------------------- */

#define ITEM_NAME_MAX 4200

/* What messages call item i: its file, or "SRC[i]" for a .bfs source (written to buf,
 * ITEM_NAME_MAX bytes). */
static const char *item_name(const pack *p, size_t i, char *buf)
{
    if (p->items)
        return p->items[i % p->window].name;
    if (!p->in)
        return p->f.paths[i];
    snprintf(buf, ITEM_NAME_MAX, "%s[%zu]", p->src, i);
    return buf;
}

/* Why r's sample is skipped: its reason, with libjpeg-turbo's message when there is one
 * ("corrupt JPEG data (Premature end of JPEG file)"), into buf. */
static const char *skip_reason(const result *r, char *buf, size_t len)
{
    if (!r->why[0])
        return r->reason;
    snprintf(buf, len, "%s (%s)", r->reason, r->why);
    return buf;
}

static int add_skip(bfs_pack_report *rep, const char *path, const char *reason)
{
    bfs_pack_skip *v = realloc(rep->skipped, (rep->nskipped + 1) * sizeof *v);
    if (!v)
        return -ENOMEM;
    rep->skipped = v;
    v[rep->nskipped].path = strdup(path);
    v[rep->nskipped].reason = strdup(reason);
    if (!v[rep->nskipped].path || !v[rep->nskipped].reason) {
        free(v[rep->nskipped].path);
        free(v[rep->nskipped].reason);
        return -ENOMEM;
    }
    rep->nskipped++;
    return 0;
}

void bfs_pack_report_free(bfs_pack_report *rep)
{
    if (!rep)
        return;
    for (uint64_t i = 0; i < rep->nskipped; i++) {
        free(rep->skipped[i].path);
        free(rep->skipped[i].reason);
    }
    free(rep->skipped);
    rep->skipped = NULL;
    rep->nskipped = 0;
}

static ssize_t fd_read_cb(void *ctx, void *buf, size_t n)
{
    ssize_t k = read(*(int *)ctx, buf, n);
    return k < 0 ? -errno : k;
}

/* Open shard path and start its format's reader (WebDataset, TFRecord or manifest) on it,
 * read as a stream. Returns 0 or the open's error, naming the file. */
static int open_shard(pack *p, const char *path, char *err, size_t errlen)
{
    const bfs_pack_opts *o = p->o;
    struct stat st;
    int fd = bfs_open_regular(path, &st);
    if (fd < 0)
        return bfs_errf(fd, err, errlen, "%s: %s", path, bfs_strerror(fd));
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    p->fd = fd;
    bfs_shard_in in = {fd_read_cb, &p->fd};
    if (p->shards.format == BFS_FORMAT_WEBDATASET)
        bfs_wds_init(&p->wds, in, o->image_key, o->label_key);
    else if (p->shards.format == BFS_FORMAT_TFRECORD)
        bfs_tfr_init(&p->tfr, in, o->image_key, o->label_key);
    else
        bfs_manifest_init(&p->man, in, bfs_manifest_is_name(path) == 2);
    p->reading = 1;
    return 0;
}

/* The next sample of the sharded source into *s, opening the next shard when one ends.
 * 1, 0 (all read) or a negative error with err naming the shard. */
static int next_shard_sample(pack *p, bfs_shard_sample *s, char *err, size_t errlen)
{
    char why[1024];
    while (p->shard < p->shards.n) {
        const char *path = p->shards.paths[p->shard];
        int wds = p->shards.format == BFS_FORMAT_WEBDATASET;
        int rc;
        if (!p->reading && (rc = open_shard(p, path, err, errlen)))
            return rc;
        rc = wds ? bfs_wds_next(&p->wds, s, why, sizeof why)
                 : bfs_tfr_next_sample(&p->tfr, s, why, sizeof why);
        if (rc < 0)
            return bfs_errf(rc, err, errlen, "%s: %s", path, why);
        if (rc > 0)
            return 1;
        p->done_bytes += p->shards.sizes[p->shard]; /* with what follows a tar's end */
        p->ignored += wds ? p->wds.ignored : 0;
        bfs_tfr_close(&p->tfr);
        close(p->fd);
        p->fd = -1, p->reading = 0;
        p->shard++;
    }
    return 0;
}

/* Manifests: the image column's path (relative to the manifest's directory) read into its
 * member, as bytes. 0, 1 with *skip (in whybuf), or a resource error. */
static int manifest_image(pack *p, const char *manifest, const char **skip, char *whybuf,
                          size_t whycap)
{
    if (!p->image_col[0]) { /* the first sample tells which column */
        const char *names[] = {"image", "path", "file_name", "filepath", "filename"};
        if (p->o->image_key)
            snprintf(p->image_col, sizeof p->image_col, "%s", p->o->image_key);
        for (size_t i = 0; !p->image_col[0] && i < sizeof names / sizeof *names; i++)
            if (bfs_members_find(&p->mem, names[i], 0))
                snprintf(p->image_col, sizeof p->image_col, "%s", names[i]);
        if (!p->image_col[0])
            return 2; /* no image column: the caller fails the pack */
    }
    bfs_member *mb = (bfs_member *)bfs_members_find(&p->mem, p->image_col, 0);
    json_t *j = mb ? mb->json : NULL;
    if (!mb || json_is_null(j) || (json_is_string(j) && !json_string_length(j))) {
        snprintf(whybuf, whycap, "no image (column '%s' is missing or empty)", p->image_col);
        *skip = whybuf;
        return 1;
    }
    if (!json_is_string(j) || memchr(json_string_value(j), 0, json_string_length(j))) {
        snprintf(whybuf, whycap, "column '%s' is not a path (a string)", p->image_col);
        *skip = whybuf;
        return 1;
    }
    const char *rel = json_string_value(j), *slash = strrchr(manifest, '/');
    char path[8192];
    if (rel[0] == '/' || !slash)
        snprintf(path, sizeof path, "%s", rel);
    else
        snprintf(path, sizeof path, "%.*s/%s", (int)(slash - manifest), manifest, rel);
    uint8_t *data = NULL;
    size_t cap = 0, len = 0;
    int rc = bfs_read_file(path, &data, &cap, &len);
    if (rc) {
        free(data);
        if (bfs_err_is_resource(rc))
            return rc;
        snprintf(whybuf, whycap, "image '%.400s': %s", rel,
                 rc == BFS_E_NOT_REGULAR ? "not a regular file" : bfs_strerror(rc));
        *skip = whybuf;
        return 1;
    }
    json_decref(j);
    mb->json = NULL;
    free(mb->data); /* a CSV cell's text */
    mb->type = BFS_MEMBER_BYTES, mb->data = data, mb->len = len;
    return 0;
}

/* Fields mode: the next sample of the source as members (p->mem) into it: its name, and
 * its record (or image and label when the schema is the image alone), or why it is
 * skipped. The first sample that is not skipped makes the schema (and declares the
 * fields to the writer). 1, 0 (all read) or an error naming the shard. */
static int next_fields_item(pack *p, item *it, bfs_pack_report *rep, char *err, size_t errlen)
{
    const bfs_pack_opts *o = p->o;
    char why[1024], whybuf[1200];
    for (;;) {
        if (p->shard >= p->shards.n)
            return 0;
        const char *path = p->shards.paths[p->shard];
        int fmt = p->shards.format, notex = 0, rc;
        if (!p->reading && (rc = open_shard(p, path, err, errlen)))
            return rc;
        const char *skip = NULL, *key;
        uint64_t off = 0;
        if (fmt == BFS_FORMAT_WEBDATASET)
            rc = bfs_wds_next_members(&p->wds, &p->mem, &off, why, sizeof why), key = p->wds.key;
        else if (fmt == BFS_FORMAT_TFRECORD)
            rc = bfs_tfr_next_members(&p->tfr, &p->mem, &off, &notex, why, sizeof why),
            key = p->tfr.key;
        else
            rc = bfs_manifest_next(&p->man, &p->mem, &skip, whybuf, sizeof whybuf, why, sizeof why),
            key = p->man.key;
        if (rc < 0)
            return bfs_errf(rc, err, errlen, "%s: %s", path, why);
        if (rc == 0) {
            p->done_bytes += p->shards.sizes[p->shard];
            p->ignored += fmt == BFS_FORMAT_WEBDATASET ? p->wds.ignored : 0;
            bfs_tfr_close(&p->tfr);
            bfs_manifest_close(&p->man);
            close(p->fd);
            p->fd = -1, p->reading = 0;
            p->shard++;
            continue;
        }
        size_t need = strlen(path) + strlen(key) + 2;
        if (!(it->name = malloc(need)))
            return bfs_errf(-ENOMEM, err, errlen, "out of memory");
        snprintf(it->name, need, "%s:%s", path, key);
        if (notex)
            skip = "not a tf.train.Example";
        if (!skip && fmt == BFS_FORMAT_MANIFEST) {
            rc = manifest_image(p, path, &skip, whybuf, sizeof whybuf);
            if (rc == 2)
                return bfs_errf(-EINVAL, err, errlen,
                                "%s: no image column (image, path, file_name, filepath or "
                                "filename) in the first sample: name it with --image-key",
                                it->name);
            if (rc < 0)
                return bfs_errf(rc, err, errlen, "%s: %s", it->name, bfs_strerror(rc));
        }
        if (!skip && !p->schema_ready) {
            int src = fmt == BFS_FORMAT_WEBDATASET ? BFS_SRC_WDS
                      : fmt == BFS_FORMAT_TFRECORD ? BFS_SRC_TFRECORD
                                                   : BFS_SRC_MANIFEST;
            const char *ik = fmt == BFS_FORMAT_MANIFEST ? p->image_col : o->image_key;
            if ((rc = bfs_schema_make(&p->schema, src, o->fields, o->nfields, &p->mem, ik,
                                      o->label_key, why, sizeof why)))
                return bfs_errf(rc, err, errlen, "%s (the first sample): %s", it->name, why);
            p->schema_ready = 1;
            rep->nfields = p->schema.n;
            size_t k = 0;
            for (uint32_t f = 0; f < p->schema.n && k < sizeof rep->fields; f++)
                k += (size_t)snprintf(
                    rep->fields + k, sizeof rep->fields - k, "%s%s %s%s%s%s", f ? ", " : "",
                    p->schema.f[f].name, bfs_field_kind_name(p->schema.f[f].kind),
                    p->schema.f[f].kind == BFS_FIELD_ARRAY ? " " : "",
                    p->schema.f[f].kind == BFS_FIELD_ARRAY ? bfs_fdt_name(p->schema.f[f].dtype)
                                                           : "",
                    p->schema.f[f].flags & BFS_FIELDF_OPTIONAL ? " (optional)" : "");
            if (p->schema.has_label && k < sizeof rep->fields)
                snprintf(rep->fields + k, sizeof rep->fields - k, "; label from %s%s%s",
                         p->schema.label.member, p->schema.label.key[0] ? ":" : "",
                         p->schema.label.key);
            if (p->schema.n > 1 &&
                (rc = bfs_writer_set_fields(p->w, p->schema.f, p->schema.n, why, sizeof why)))
                return bfs_errf(rc, err, errlen, "%s", why);
        }
        if (!skip) {
            rc = bfs_schema_convert(&p->schema, &p->mem, &it->rec, whybuf, sizeof whybuf, &skip);
            if (rc < 0)
                return bfs_errf(rc, err, errlen, "%s: out of memory", it->name);
            if (!rc && it->rec.extra) {
                p->extra += it->rec.extra;
                if (!p->extra_name[0])
                    for (size_t i = 0; i < p->mem.n && !p->extra_name[0]; i++) {
                        int used = 0;
                        for (uint32_t f = 0; f < p->schema.n && !used; f++)
                            used = !strcasecmp(p->mem.v[i].name, p->schema.from[f].member);
                        if (!used && !(p->schema.has_label &&
                                       !strcasecmp(p->mem.v[i].name, p->schema.label.member)))
                            snprintf(p->extra_name, sizeof p->extra_name, "%s", p->mem.v[i].name);
                    }
            }
        }
        if (skip) {
            if (skip == whybuf && !(skip = it->skip_owned = strdup(whybuf)))
                return bfs_errf(-ENOMEM, err, errlen, "out of memory");
            it->skip = skip;
        } else if (p->schema.n > 1)
            it->has_rec = 1;
        else { /* the image alone: written as before (version 1) */
            it->data = it->rec.v[0].data, it->len = it->rec.v[0].len;
            it->label = it->rec.label;
            it->rec.v[0].data = NULL;
            bfs_record_free(&it->rec);
        }
        (void)off;
        bfs_members_clear(&p->mem);
        return 1;
    }
}

/* Sharded sources: read samples into the free input slots, up to a window ahead of the
 * writer (which is this thread: p->written is stable here), or to the end. */
static int produce(pack *p, bfs_pack_report *rep, char *err, size_t errlen)
{
    while (!p->eof && p->n < p->written + p->window) {
        bfs_shard_sample s;
        item *it = &p->items[p->n % p->window];
        int rc;
        if (p->fields_mode) {
            it->skip = NULL, it->data = NULL, it->len = 0, it->label = 0;
            rc = next_fields_item(p, it, rep, err, errlen);
        } else
            rc = next_shard_sample(p, &s, err, errlen);
        if (rc < 0)
            return rc;
        if (rc > 0 && !p->fields_mode) {
            const char *path = p->shards.paths[p->shard];
            size_t need = strlen(path) + strlen(s.key) + 2;
            it->name = malloc(need);
            if (!it->name) {
                free(s.image);
                return bfs_errf(-ENOMEM, err, errlen, "out of memory");
            }
            snprintf(it->name, need, "%s:%s", path, s.key);
            it->data = s.image, it->len = s.image_len;
            it->label = (uint32_t)s.label;
            it->skip = s.skip;
        }
        pthread_mutex_lock(&p->lock);
        if (rc > 0)
            p->n++;
        else
            p->eof = 1;
        pthread_cond_broadcast(&p->space);
        pthread_mutex_unlock(&p->lock);
    }
    return 0;
}

/* Count a sample of label l (growing per_class for sharded sources). */
static int count_label(pack *p, uint32_t l)
{
    if (l >= p->nper) {
        uint32_t n = p->nper ? p->nper : 64;
        while (n <= l)
            n *= 2;
        uint64_t *v = realloc(p->per_class, n * sizeof *v);
        if (!v)
            return -ENOMEM;
        memset(v + p->nper, 0, (n - p->nper) * sizeof *v);
        p->per_class = v, p->nper = n;
    }
    p->per_class[l]++;
    return 0;
}

static int write_all_items(pack *p, bfs_writer *w, bfs_pack_report *rep, atomic_int *cancel,
                           double t0, char *err, size_t errlen)
{
    const bfs_pack_opts *o = p->o;
    int rc = 0;
    char name[ITEM_NAME_MAX];
    for (size_t i = 0;; i++) {
        if (p->items && (rc = produce(p, rep, err, errlen)))
            return rc;
        if (i >= p->n) /* eof: produce read to the end */
            break;
        pthread_mutex_lock(&p->lock);
        while (!p->slots[i % p->window].ready && !(cancel && *cancel))
            pthread_cond_wait(&p->ready, &p->lock);
        result r = p->slots[i % p->window];
        pthread_mutex_unlock(&p->lock);
        if (cancel && *cancel)
            return bfs_errf(-ECANCELED, err, errlen, "interrupted");
        if (r.err) {
            char why[256];
            const char *reason = skip_reason(&r, why, sizeof why);
            if (bfs_err_is_resource(r.err)) /* not the file's fault: skipping would lose it */
                rc = bfs_errf(r.err, err, errlen, "%s: %s", item_name(p, i, name), reason);
            else if (o->strict)
                rc = bfs_errf(r.err, err, errlen, "%s: %s (--strict)", item_name(p, i, name),
                              reason);
            else
                rc = add_skip(rep, item_name(p, i, name), reason);
        } else {
            if (r.vin) {
                rc = bfs_writer_add_record(w, r.rec.label, r.vin);
                for (uint32_t k = 0; k < p->schema.n; k++)
                    r.len += r.rec.v[k].len;
            } else
                rc = bfs_writer_add_hashed(w, &r.s, r.data, r.len, r.hash);
            if (rc)
                bfs_errf(rc, err, errlen, "writing %s: %s", bfs_writer_temp_path(w),
                         bfs_strerror(rc));
            rep->packed++;
            rep->reencoded += (uint64_t)r.reencoded;
            rep->restarted += (uint64_t)r.restarted;
            if ((r.s.flags & BFS_KIND_MASK) == BFS_KIND_TOKENS) { /* a token .bfs re-packed */
                rep->tokens += r.s.raw_size;
                rep->longest = r.s.raw_size > rep->longest ? r.s.raw_size : rep->longest;
            }
            rep->bytes_out += r.len;
            if (!rc && count_label(p, r.s.label))
                rc = bfs_errf(-ENOMEM, err, errlen, "out of memory");
        }
        rep->bytes_in += r.in_bytes;
        free(r.data);
        bfs_record_free(&r.rec);
        free(r.vin);
        pthread_mutex_lock(&p->lock);
        p->slots[i % p->window].ready = 0;
        p->written = i + 1;
        pthread_cond_broadcast(&p->space);
        pthread_mutex_unlock(&p->lock);
        if (p->items) {
            item *it = &p->items[i % p->window];
            free(it->name);
            free(it->skip_owned);
            it->name = it->skip_owned = NULL;
        }
        if (rc)
            return rc;
        progress(p, rep, i + 1, t0, 0);
    }
    return 0;
}

/* A signal may set *cancel while the writer waits on a condition variable; this thread
 * wakes it up periodically so the cancel is seen. */
typedef struct waker {
    pack *p;
    atomic_int *cancel;
    int done; /* guarded by p->lock */
} waker;

static void *waker_main(void *arg)
{
    waker *k = arg;
    for (;;) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&k->p->lock);
        int done = k->done;
        if (*k->cancel) {
            k->p->stop = 1;
            pthread_cond_broadcast(&k->p->ready);
            pthread_cond_broadcast(&k->p->space);
        }
        pthread_mutex_unlock(&k->p->lock);
        if (done)
            return NULL;
    }
}

/* A .bfs file as the source: its classes; its samples, in order, are read by the
 * workers (transform_sample) and named "SRC[i]" in messages (item_name). */
static int open_bfs_source(const char *src, pack *p, char *err, size_t errlen)
{
    char why[512] = "";
    int rc = bfs_open(src, &p->in, why, sizeof why);
    if (rc)
        return bfs_errf(rc, err, errlen,
                        "SRC is a file, so it must be a .bfs dataset to re-pack, and: %s", why);
    if ((rc = bfs_verify_tables(p->in))) /* labels are in the tables: never re-pack bad ones */
        return bfs_errf(rc, err, errlen, "%s: %s", src, bfs_strerror(rc));
    const bfs_info *info = bfs_get_info(p->in);
    bfs_folder *f = &p->f;
    uint32_t nc = info->class_count;
    if (!(f->classes = calloc(nc ? nc : 1, sizeof *f->classes)))
        return bfs_errf(-ENOMEM, err, errlen, "out of memory");
    f->class_cap = nc;
    for (uint32_t c = 0; c < nc; c++) {
        const char *name;
        size_t len;
        if ((rc = bfs_class_name(p->in, c, &name, &len)))
            return bfs_errf(rc, err, errlen, "%s: class %u: %s", src, c, bfs_strerror(rc));
        if (!(f->classes[c] = strndup(name, len)))
            return bfs_errf(-ENOMEM, err, errlen, "out of memory");
        f->nclasses = c + 1;
    }
    p->n = info->sample_count;
    if (p->n == 0)
        return bfs_errf(BFS_E_EMPTY, err, errlen, "%s: no samples", src);
    return 0;
}

/* ---- token sequences ---------------------------------------------------------------- */

size_t bfs_tokens_doc_end(const uint8_t *p, size_t n, int size, uint32_t sep)
{
    if (size == 2) {
        for (size_t i = 0; i < n; i++)
            if (bfs_ld16(p + 2 * i) == sep)
                return i + 1;
    } else {
        for (size_t i = 0; i < n; i++)
            if (bfs_ld32(p + 4 * i) == sep)
                return i + 1;
    }
    return 0;
}

/* Room for need bytes in the growing document *doc (capacity *cap). 0 or -ENOMEM. */
static int doc_reserve(uint8_t **doc, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 1 << 16;
    while (c < need)
        c *= 2;
    uint8_t *d = realloc(*doc, c);
    if (!d)
        return -ENOMEM;
    *doc = d, *cap = c;
    return 0;
}

/* Append n bytes to the growing document doc (len, cap). 0 or -ENOMEM. */
static int doc_append(uint8_t **doc, size_t *len, size_t *cap, const uint8_t *p, size_t n)
{
    if (doc_reserve(doc, cap, *len + n))
        return -ENOMEM;
    memcpy(*doc + *len, p, n);
    *len += n;
    return 0;
}

static void token_progress(const bfs_pack_opts *o, const bfs_pack_report *rep, uint64_t total,
                           double t0, int final)
{
    char count[64];
    snprintf(count, sizeof count, "%llu documents", (unsigned long long)rep->packed);
    progress_line(o, total ? (double)rep->bytes_in / total : 1, count, rep->bytes_in, t0, final);
}

static int emit_doc(bfs_writer *w, const bfs_pack_opts *o, int ts, bfs_pack_report *rep,
                    const uint8_t *doc, size_t len, char *err, size_t errlen)
{
    if (len > UINT32_MAX)
        return o->token_format == BFS_TOKENS_FLAT
                   ? bfs_errf(-EINVAL, err, errlen,
                              "document %llu has %zu tokens (over 4 GiB): is %u the "
                              "separator token (--doc-sep)?",
                              (unsigned long long)rep->packed, len / (size_t)ts, o->doc_sep)
                   : bfs_errf(-EINVAL, err, errlen,
                              "document %llu has %zu tokens: over the 4 GiB a sample may hold",
                              (unsigned long long)rep->packed, len / (size_t)ts);
    uint64_t n = len / (size_t)ts;
    bfs_sample_in in = {.flags = (uint16_t)(BFS_KIND_TOKENS | (ts == 4 ? BFS_F_TOKENS_U32 : 0)),
                        .raw_size = (uint32_t)n};
    int rc = bfs_writer_add(w, &in, doc, len);
    if (rc)
        return bfs_errf(rc, err, errlen, "writing %s: %s", bfs_writer_temp_path(w),
                        bfs_strerror(rc));
    rep->packed++, rep->tokens += n, rep->bytes_out += len;
    rep->longest = n > rep->longest ? n : rep->longest;
    rep->token_size = ts;
    return 0;
}

static int pack_tokens(const char *src, const char *out, const bfs_pack_opts *o,
                       bfs_pack_report *rep, atomic_int *cancel, char *err, size_t errlen)
{
    int ts = o->tokens;
    if (ts != 2 && ts != 4)
        return bfs_errf(-EINVAL, err, errlen, "token size %d: must be 2 (u16) or 4 (u32)", ts);
    if (o->raw || o->max_side || o->restart)
        return bfs_errf(-EINVAL, err, errlen,
                        "token sequences take no image options (raw, max-side, restart)");
    if (ts == 2 && o->doc_sep > 0xffff)
        return bfs_errf(-EINVAL, err, errlen,
                        "separator token %u does not fit in u16 tokens (0..65535)", o->doc_sep);
    double t0 = bfs_mono_s();
    struct stat st;
    int fd = bfs_open_regular(src, &st);
    if (fd < 0)
        return bfs_errf(fd, err, errlen, "%s: %s", src,
                        fd == BFS_E_NOT_REGULAR ? "not a regular file" : bfs_strerror(fd));
    if (st.st_size == 0) {
        close(fd);
        return bfs_errf(BFS_E_EMPTY, err, errlen, "%s is empty: no tokens to pack", src);
    }
    if (st.st_size % ts) {
        close(fd);
        return bfs_errf(-EINVAL, err, errlen,
                        "%s: %lld bytes is not a whole number of %d-byte tokens (u%d)", src,
                        (long long)st.st_size, ts, ts * 8);
    }
    rep->files = 1;
    rep->classes = 1;
    bfs_writer *w = NULL;
    size_t chunk_cap = (size_t)8 << 20, doc_len = 0, doc_cap = 0;
    uint8_t *chunk = malloc(chunk_cap), *doc = NULL;
    int rc = chunk ? bfs_writer_create(out, o->page_size, &w, err, errlen) : -ENOMEM;
    if (!rc) {
        snprintf(temp_path, sizeof temp_path, "%s", bfs_writer_temp_path(w));
        rc = bfs_writer_add_class(w, "documents");
    }
    uint64_t off = 0;
    while (!rc && off < (uint64_t)st.st_size) {
        if (cancel && *cancel) {
            rc = -ECANCELED;
            break;
        }
        size_t want =
            (uint64_t)st.st_size - off < chunk_cap ? (size_t)(st.st_size - off) : chunk_cap;
        ssize_t got = pread(fd, chunk, want, (off_t)off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0 || got % ts) { /* a short read mid-token: read the rest next time */
            if (got > 0 && (size_t)got > (size_t)ts)
                got -= got % ts;
            else {
                rc = got < 0 ? -errno : BFS_E_CHANGED;
                bfs_errf(rc, err, errlen, "reading %s: %s", src,
                         got < 0 ? strerror(-rc) : "the file shrank while packing");
                break;
            }
        }
        size_t n = (size_t)got / (size_t)ts, pos = 0;
        while (!rc && pos < n) {
            size_t k = bfs_tokens_doc_end(chunk + pos * ts, n - pos, ts, o->doc_sep);
            size_t take = k ? k : n - pos;
            if (doc_len + take * ts > UINT32_MAX) { /* refused before it takes 4 GiB */
                rc = emit_doc(w, o, ts, rep, doc, doc_len + take * ts, err, errlen);
                break;
            }
            rc = doc_append(&doc, &doc_len, &doc_cap, chunk + pos * ts, take * ts);
            if (rc)
                bfs_errf(rc, err, errlen, "out of memory (a document of %zu MB so far)",
                         doc_len >> 20);
            else if (k) {
                rc = emit_doc(w, o, ts, rep, doc, doc_len, err, errlen);
                doc_len = 0;
            }
            pos += take;
        }
        off += (uint64_t)got;
        rep->bytes_in = off;
        token_progress(o, rep, (uint64_t)st.st_size, t0, 0);
    }
    if (!rc && doc_len) /* the last document, without a separator */
        rc = emit_doc(w, o, ts, rep, doc, doc_len, err, errlen);
    close(fd);
    free(chunk);
    free(doc);
    if (!rc) {
        token_progress(o, rep, (uint64_t)st.st_size, t0, 1);
        rc = bfs_writer_finish(w, o->fsync, err, errlen);
        w = NULL;
    }
    bfs_writer_abort(w);
    temp_path[0] = 0;
    rep->seconds = bfs_mono_s() - t0;
    return rc;
}

/* pread len bytes at off: 0, a negative errno, or BFS_E_CHANGED (the file ended early). */
static int pread_full(int fd, uint8_t *buf, size_t len, uint64_t off)
{
    while (len) {
        ssize_t n = pread(fd, buf, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            return BFS_E_CHANGED;
        buf += n, len -= (size_t)n, off += (uint64_t)n;
    }
    return 0;
}

/* State shared by the .npy and Megatron packers. */
typedef struct tokpack {
    const bfs_pack_opts *o;
    bfs_pack_report *rep;
    bfs_writer *w;
    int fd;             /* the file of ids */
    const char *path;   /* its name, for messages */
    bfs_tok_dtype dt;   /* their type in it */
    int ts;             /* their size in the .bfs */
    uint8_t *raw, *doc; /* read buffer; the document being built */
    size_t raw_cap, doc_len, doc_cap;
} tokpack;

/* Append the n ids at byte off of the ids file to the document. */
static int tok_append(tokpack *t, uint64_t off, uint64_t n, char *err, size_t errlen)
{
    while (n) {
        size_t chunk = n > (1u << 20) ? (1u << 20) : (size_t)n;
        size_t bytes = chunk * (size_t)t->dt.size;
        if (bytes > t->raw_cap) {
            uint8_t *r = realloc(t->raw, bytes);
            if (!r)
                return bfs_errf(-ENOMEM, err, errlen, "out of memory");
            t->raw = r, t->raw_cap = bytes;
        }
        int rc = pread_full(t->fd, t->raw, bytes, off);
        if (rc)
            return bfs_errf(rc, err, errlen, "reading %s: %s", t->path,
                            rc == BFS_E_CHANGED ? "the file ended early" : bfs_strerror(rc));
        size_t need = t->doc_len + chunk * (size_t)t->ts;
        if (doc_reserve(&t->doc, &t->doc_cap, need))
            return bfs_errf(-ENOMEM, err, errlen, "out of memory");
        size_t bad;
        int64_t v;
        if (bfs_tok_convert(t->raw, chunk, t->dt, t->ts, t->doc + t->doc_len, &bad, &v))
            return bfs_errf(-ERANGE, err, errlen,
                            "%s: the id at byte %llu is %lld: token ids must be 0..%u", t->path,
                            (unsigned long long)(off + bad * (uint64_t)t->dt.size), (long long)v,
                            t->ts == 2 ? 65535u : 4294967295u);
        t->doc_len = need;
        off += bytes, n -= chunk;
    }
    return 0;
}

/* The document built so far into the .bfs (an empty one is counted and left out). */
static int tok_flush(tokpack *t, char *err, size_t errlen)
{
    if (!t->doc_len) {
        t->rep->ignored++;
        return 0;
    }
    int rc = emit_doc(t->w, t->o, t->ts, t->rep, t->doc, t->doc_len, err, errlen);
    t->doc_len = 0;
    return rc;
}

/* Megatron: PREFIX, PREFIX.bin or PREFIX.idx into the two paths. */
static int megatron_paths(const char *src, char *bin, char *idx, size_t cap)
{
    size_t n = strlen(src);
    if (n >= 4 && (!strcmp(src + n - 4, ".bin") || !strcmp(src + n - 4, ".idx")))
        n -= 4;
    if (n + 5 > cap)
        return -ENAMETOOLONG;
    snprintf(bin, cap, "%.*s.bin", (int)n, src);
    snprintf(idx, cap, "%.*s.idx", (int)n, src);
    return 0;
}

static int pack_tokens_files(const char *src, const char *out, const bfs_pack_opts *o,
                             bfs_pack_report *rep, atomic_int *cancel, char *err, size_t errlen)
{
    if (o->raw || o->max_side || o->restart)
        return bfs_errf(-EINVAL, err, errlen,
                        "token sequences take no image options (raw, max-side, restart)");
    int npy = o->token_format == BFS_TOKENS_NPY;
    if (npy && !o->offsets)
        return bfs_errf(-EINVAL, err, errlen, ".npy token ids need a .npy of document offsets");
    double t0 = bfs_mono_s();
    char bin[4200], idxp[4200], why[512] = "";
    const char *ids = src, *meta_path = npy ? o->offsets : idxp;
    if (!npy) {
        if (megatron_paths(src, bin, idxp, sizeof bin))
            return bfs_errf(-ENAMETOOLONG, err, errlen, "%s: name too long", src);
        ids = bin;
    }
    uint8_t *meta = NULL, head[65536];
    size_t meta_cap = 0, meta_len = 0;
    tokpack t = {.o = o, .rep = rep, .fd = -1, .path = ids};
    struct stat st;
    bfs_megatron_idx mx = {0};
    bfs_tok_dtype odt = {0, 0};
    uint64_t nel = 0, data_off = 0, onel = 0, ooff = 0;
    int rc = bfs_open_regular(ids, &st);
    if (rc < 0)
        bfs_errf(rc, err, errlen, "%s: %s", ids,
                 rc == BFS_E_NOT_REGULAR ? "not a regular file" : bfs_strerror(rc));
    else
        t.fd = rc, rc = 0;
    if (!rc && (rc = bfs_read_file(meta_path, &meta, &meta_cap, &meta_len)))
        bfs_errf(rc, err, errlen, "%s: %s", meta_path,
                 rc == BFS_E_NOT_REGULAR ? "not a regular file" : bfs_strerror(rc));
    if (!rc && npy) {
        size_t hn = st.st_size < (off_t)sizeof head ? (size_t)st.st_size : sizeof head;
        if ((rc = pread_full(t.fd, head, hn, 0)))
            bfs_errf(rc, err, errlen, "reading %s: %s", ids, bfs_strerror(rc));
        else if ((rc = bfs_npy_parse(head, hn, (uint64_t)st.st_size, &t.dt, &nel, &data_off, why,
                                     sizeof why)))
            bfs_errf(rc, err, errlen, "%s: %s", ids, why);
        else if ((rc =
                      bfs_npy_parse(meta, meta_len, meta_len, &odt, &onel, &ooff, why, sizeof why)))
            bfs_errf(rc, err, errlen, "%s: %s", o->offsets, why);
    } else if (!rc) {
        if ((rc = bfs_megatron_parse(meta, meta_len, (uint64_t)st.st_size, &mx, why, sizeof why)))
            bfs_errf(rc, err, errlen, "%s: %s", idxp, why);
        t.dt = mx.dtype;
    }
    if (!rc) {
        t.ts = bfs_tok_out_size(t.dt);
        rep->files = 1, rep->classes = 1;
        if (!(rc = bfs_writer_create(out, o->page_size, &t.w, err, errlen))) {
            snprintf(temp_path, sizeof temp_path, "%s", bfs_writer_temp_path(t.w));
            rc = bfs_writer_add_class(t.w, "documents");
        }
    }
    uint64_t total = npy ? nel * (uint64_t)t.dt.size : (uint64_t)st.st_size;
    if (!rc && npy) {
        /* offsets o[0..onel): 0 first, rising, at most nel. Ending with nel they are the
         * boundaries of onel - 1 documents; otherwise the starts of onel documents. */
        const uint8_t *ov = meta + ooff;
        uint64_t ndocs =
            onel && bfs_tok_get(ov, odt, onel - 1) == (int64_t)nel && onel > 1 ? onel - 1 : onel;
        int64_t prev = 0;
        for (uint64_t i = 0; !rc && i < onel; i++) {
            int64_t b = bfs_tok_get(ov, odt, i);
            if ((i == 0 && b != 0) || b < prev || b > (int64_t)nel)
                rc = bfs_errf(-EINVAL, err, errlen,
                              "%s: offset %llu is %lld: offsets must start at 0 and rise to at "
                              "most %llu, the ids in %s",
                              o->offsets, (unsigned long long)i, (long long)b,
                              (unsigned long long)nel, ids);
            prev = b;
        }
        for (uint64_t d = 0; !rc && d < ndocs; d++) {
            uint64_t b0 = (uint64_t)bfs_tok_get(ov, odt, d);
            uint64_t b1 = d + 1 < onel ? (uint64_t)bfs_tok_get(ov, odt, d + 1) : nel;
            rc = tok_append(&t, data_off + b0 * (uint64_t)t.dt.size, b1 - b0, err, errlen);
            if (!rc)
                rc = tok_flush(&t, err, errlen);
            rep->bytes_in = b1 * (uint64_t)t.dt.size;
            token_progress(o, rep, total, t0, 0);
            if (!rc && cancel && *cancel)
                rc = -ECANCELED;
        }
    } else if (!rc) {
        for (uint64_t d = 0; !rc && d < mx.ndoc; d++) {
            for (uint64_t q = bfs_megatron_doc(&mx, d); !rc && q < bfs_megatron_doc(&mx, d + 1);
                 q++) {
                rc = tok_append(&t, bfs_megatron_offset(&mx, q), bfs_megatron_size(&mx, q), err,
                                errlen);
                rep->bytes_in += (uint64_t)bfs_megatron_size(&mx, q) * (uint64_t)t.dt.size;
            }
            if (!rc)
                rc = tok_flush(&t, err, errlen);
            token_progress(o, rep, total, t0, 0);
            if (!rc && cancel && *cancel)
                rc = -ECANCELED;
        }
    }
    if (!rc && !rep->packed)
        rc = bfs_errf(BFS_E_EMPTY, err, errlen, "%s: no document holds a token", ids);
    if (t.fd >= 0)
        close(t.fd);
    free(meta);
    free(t.raw);
    free(t.doc);
    if (!rc) {
        token_progress(o, rep, total, t0, 1);
        rc = bfs_writer_finish(t.w, o->fsync, err, errlen);
        t.w = NULL;
    }
    bfs_writer_abort(t.w);
    temp_path[0] = 0;
    rep->seconds = bfs_mono_s() - t0;
    return rc;
}

/* Manifest sources: each a regular file, sorted by path as shards are. */
static int manifest_list(const char *const *srcs, size_t nsrcs, bfs_shard_list *l, char *err,
                         size_t errlen)
{
    memset(l, 0, sizeof *l);
    l->format = BFS_FORMAT_MANIFEST;
    if (!(l->paths = calloc(nsrcs, sizeof *l->paths)) ||
        !(l->sizes = calloc(nsrcs, sizeof *l->sizes)))
        return bfs_errf(-ENOMEM, err, errlen, "out of memory");
    for (size_t i = 0; i < nsrcs; i++) {
        struct stat st;
        if (stat(srcs[i], &st)) {
            int e = -errno;
            return bfs_errf(e, err, errlen, "%s: %s", srcs[i], bfs_strerror(e));
        }
        if (!S_ISREG(st.st_mode))
            return bfs_errf(-EINVAL, err, errlen, "%s: a manifest is a regular file", srcs[i]);
        if (!(l->paths[i] = strdup(srcs[i])))
            return bfs_errf(-ENOMEM, err, errlen, "out of memory");
        l->n = i + 1;
        l->sizes[i] = (uint64_t)st.st_size;
        l->total += (uint64_t)st.st_size;
    }
    for (size_t i = 1; i < l->n; i++)
        for (size_t j = i; j > 0 && strcmp(l->paths[j - 1], l->paths[j]) > 0; j--) {
            char *t = l->paths[j];
            uint64_t z = l->sizes[j];
            l->paths[j] = l->paths[j - 1], l->sizes[j] = l->sizes[j - 1];
            l->paths[j - 1] = t, l->sizes[j - 1] = z;
        }
    return 0;
}

/* Sharded sources, once packed: the class table ("0".."max label"), notes on labels that
 * no sample has and on tar members outside any sample. */
static int finish_shards(pack *p, bfs_writer *w, bfs_pack_report *rep, char *err, size_t errlen)
{
    uint32_t classes = 0, empty = 0;
    for (uint32_t l = 0; l < p->nper; l++)
        if (p->per_class[l])
            classes = l + 1;
    for (uint32_t l = 0; l < classes; l++) {
        char name[16];
        snprintf(name, sizeof name, "%u", l);
        empty += !p->per_class[l];
        int rc = bfs_writer_add_class(w, name);
        if (rc)
            return bfs_errf(rc, err, errlen, "class '%s': %s", name, bfs_strerror(rc));
    }
    rep->classes = classes;
    rep->ignored = p->ignored;
    rep->extra = p->extra;
    size_t k = strlen(rep->notes);
    if (empty)
        k += (size_t)snprintf(rep->notes + k, sizeof rep->notes - k,
                              "note: labels run 0..%u, and %u of them have no sample: their "
                              "classes are empty\n",
                              classes - 1, empty);
    if (p->extra && k < sizeof rep->notes)
        k += (size_t)snprintf(rep->notes + k, sizeof rep->notes - k,
                              "note: %llu members (the first: '%s') are not among the fields the "
                              "first sample set, and were not kept (--field keeps them)\n",
                              (unsigned long long)p->extra, p->extra_name);
    if (p->ignored && k < sizeof rep->notes)
        snprintf(rep->notes + k, sizeof rep->notes - k,
                 "note: %llu tar members have no WebDataset key (no '.' in their name's last "
                 "part) and are in no sample\n",
                 (unsigned long long)p->ignored);
    return 0;
}

int bfs_pack(const char *src, const char *out, const bfs_pack_opts *o, bfs_pack_report *rep,
             atomic_int *cancel, char *err, size_t errlen)
{
    return bfs_pack_sources(&src, 1, out, o, rep, cancel, err, errlen);
}

int bfs_pack_sources(const char *const *srcs, size_t nsrcs, const char *out, const bfs_pack_opts *o,
                     bfs_pack_report *rep, atomic_int *cancel, char *err, size_t errlen)
{
    memset(rep, 0, sizeof *rep);
    if (nsrcs == 0)
        return bfs_errf(-EINVAL, err, errlen, "no source");
    const char *src = srcs[0];
    int tokens =
        o->tokens || o->token_format == BFS_TOKENS_NPY || o->token_format == BFS_TOKENS_MEGATRON;
    if (tokens && (nsrcs > 1 || o->format != BFS_FORMAT_AUTO))
        return bfs_errf(-EINVAL, err, errlen,
                        "token ids are packed from one source (not shards, not several)");
    if (o->token_format == BFS_TOKENS_NPY || o->token_format == BFS_TOKENS_MEGATRON)
        return pack_tokens_files(src, out, o, rep, cancel, err, errlen);
    if (o->tokens)
        return pack_tokens(src, out, o, rep, cancel, err, errlen);
    if (nsrcs == 1 && o->format == BFS_FORMAT_AUTO) { /* a .bfs of several fields */
        bfs_reader *r;
        struct stat sb;
        int many = stat(src, &sb) == 0 && S_ISREG(sb.st_mode) && bfs_open(src, &r, NULL, 0) == 0;
        if (many) {
            many = bfs_field_count(r) > 1;
            bfs_close(r);
        }
        if (many)
            return bfs_pack_copy_fields(src, out, o, rep, cancel, err, errlen);
    }
    if (o->max_side < 0 || o->max_side > 65535 || o->quality < 0 || o->quality > 100)
        return bfs_errf(-EINVAL, err, errlen,
                        "bad options: max-side %d (0..65535), quality %d (1..100)", o->max_side,
                        o->quality);
    if (o->max_side > 0 && !o->resize)
        return bfs_errf(-EINVAL, err, errlen,
                        "bad options: max-side %d without a resampler (bfs_pack_opts.resize: the "
                        "engine's bfs_engine_pack_resize)",
                        o->max_side);
    double t0 = bfs_mono_s();
    pack p = {.o = o, .src = src, .fd = -1};
    pthread_mutex_init(&p.lock, NULL);
    pthread_cond_init(&p.space, NULL);
    pthread_cond_init(&p.ready, NULL);
    bfs_writer *w = NULL;
    pthread_t *th = NULL;
    int nth = 0, rc;
    waker wk = {&p, cancel, 0};
    pthread_t waker_th;
    int have_waker = 0;
    int jobs = o->jobs > 0 ? o->jobs : (int)sysconf(_SC_NPROCESSORS_ONLN);
    jobs = jobs < 1 ? 1 : jobs > 256 ? 256 : jobs;
    p.window = (size_t)jobs * 4 + 16;

    struct stat st;
    int manifests = o->format == BFS_FORMAT_MANIFEST;
    if (o->format == BFS_FORMAT_AUTO) { /* every source named .jsonl or .csv */
        manifests = 1;
        for (size_t i = 0; i < nsrcs; i++)
            manifests &= bfs_manifest_is_name(srcs[i]) != 0;
    }
    rc = manifests ? manifest_list(srcs, nsrcs, &p.shards, err, errlen)
                   : bfs_shard_list_make(srcs, nsrcs, o->format, &p.shards, err, errlen);
    if (rc == 0) {
        p.fields_mode = manifests || !o->image_only;
        if (manifests && o->image_only)
            rc = bfs_errf(-EINVAL, err, errlen,
                          "--image-only applies to WebDataset and TFRecord shards (a manifest "
                          "names its fields)");
        else if (!p.fields_mode && o->nfields)
            rc = bfs_errf(-EINVAL, err, errlen, "--field and --image-only exclude each other");
    }
    if (rc == 0) {
        rep->format = p.shards.format;
        rep->shards = p.shards.n;
        if (!(p.items = calloc(p.window, sizeof *p.items)))
            rc = bfs_errf(-ENOMEM, err, errlen, "out of memory");
    } else if (rc == 1) {
        p.eof = 1;
        if (o->nfields)
            rc = bfs_errf(-EINVAL, err, errlen,
                          "%s: not WebDataset or TFRecord shards or a manifest, so --field does "
                          "not apply",
                          src);
        else if (o->image_key || o->label_key)
            rc = bfs_errf(-EINVAL, err, errlen,
                          "%s: not WebDataset or TFRecord shards, so the image and label keys "
                          "do not apply",
                          src);
        else if (stat(src, &st) == 0 && S_ISREG(st.st_mode))
            rc = open_bfs_source(src, &p, err, errlen);
        else if (!(rc = bfs_folder_scan(src, &p.f, err, errlen))) {
            p.n = p.f.n;
            rep->ignored = p.f.ignored;
            bfs_folder_notes(&p.f, rep->notes, sizeof rep->notes);
        }
    }
    if (rc)
        goto out;
    rep->files = p.n;
    rep->classes = p.f.nclasses;
    if ((rc = bfs_writer_create(out, o->page_size, &w, err, errlen)))
        goto out;
    snprintf(temp_path, sizeof temp_path, "%s", bfs_writer_temp_path(w));
    p.w = w;
    for (uint32_t c = 0; c < p.f.nclasses; c++)
        if ((rc = bfs_writer_add_class(w, p.f.classes[c]))) {
            bfs_errf(rc, err, errlen, "class name '%s': %s", p.f.classes[c], bfs_strerror(rc));
            goto out;
        }
    p.slots = calloc(p.window, sizeof *p.slots);
    p.nper = p.f.nclasses;
    p.per_class = calloc(p.nper ? p.nper : 1, sizeof *p.per_class);
    th = calloc((size_t)jobs, sizeof *th);
    if (!p.slots || !p.per_class || !th) {
        rc = bfs_errf(-ENOMEM, err, errlen, "out of memory");
        goto out;
    }
    worker_arg wa = {&p, cancel};
    for (; nth < jobs; nth++)
        if ((rc = -pthread_create(&th[nth], NULL, worker, &wa))) {
            bfs_errf(rc, err, errlen, "cannot start worker threads: %s", strerror(-rc));
            goto out;
        }
    if (cancel && pthread_create(&waker_th, NULL, waker_main, &wk) == 0)
        have_waker = 1;
    rc = write_all_items(&p, w, rep, cancel, t0, err, errlen);
    rep->files = p.n;
    progress(&p, rep, rep->packed + rep->nskipped, t0, 1);
    if (!rc && p.items) {
        if (!rep->packed)
            rc = bfs_errf(BFS_E_EMPTY, err, errlen,
                          "no sample could be packed (%llu samples in %zu %s%s, all skipped)",
                          (unsigned long long)p.n, p.shards.n,
                          p.shards.format == BFS_FORMAT_MANIFEST ? "manifest" : "shard",
                          p.shards.n == 1 ? "" : "s");
        else
            rc = finish_shards(&p, w, rep, err, errlen);
    } else if (!rc)
        for (uint32_t c = 0; c < p.f.nclasses; c++)
            if (p.per_class[c] == 0) {
                rc = bfs_errf(BFS_E_EMPTY, err, errlen,
                              "class '%s' has no usable images (all its files were skipped)",
                              p.f.classes[c]);
                break;
            }
out:
    pthread_mutex_lock(&p.lock);
    p.stop = 1;
    wk.done = 1;
    pthread_cond_broadcast(&p.space);
    pthread_mutex_unlock(&p.lock);
    for (int i = 0; i < nth; i++)
        pthread_join(th[i], NULL);
    if (have_waker)
        pthread_join(waker_th, NULL);
    if (p.slots)
        for (size_t i = 0; i < p.window; i++)
            if (p.slots[i].ready) {
                free(p.slots[i].data);
                bfs_record_free(&p.slots[i].rec);
                free(p.slots[i].vin);
            }
    if (p.items)
        for (size_t i = 0; i < p.window; i++) {
            free(p.items[i].data);
            free(p.items[i].name);
            free(p.items[i].skip_owned);
            bfs_record_free(&p.items[i].rec);
        }
    if (!rc && w) {
        rc = bfs_writer_finish(w, o->fsync, err, errlen);
        w = NULL;
    }
    bfs_writer_abort(w); /* after a failure: removes the temporary file */
    temp_path[0] = 0;
    rep->seconds = bfs_mono_s() - t0;
    if (p.fd >= 0)
        close(p.fd);
    bfs_tfr_close(&p.tfr);
    bfs_manifest_close(&p.man);
    bfs_members_free(&p.mem);
    bfs_shard_list_free(&p.shards);
    free(p.items);
    bfs_folder_free(&p.f);
    bfs_close(p.in);
    free(p.slots);
    free(p.per_class);
    free(th);
    pthread_mutex_destroy(&p.lock);
    pthread_cond_destroy(&p.space);
    pthread_cond_destroy(&p.ready);
    return rc;
}
