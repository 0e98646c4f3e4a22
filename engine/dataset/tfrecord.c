/*
 * tfrecord.c — TFRecord framing, CRC-32C and the tf.train.Example reader (see
 * tfrecord.h).
 *
 * The protobuf reader walks the bytes in place: no allocation, every length checked
 * against the message that holds it before it is used. Compressed files go through zlib's
 * inflate between the shard's reads and the framing (read_some).
 */
#include "engine/dataset/tfrecord.h"
#include "base/endian.h"
#include "base/err.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* ---- CRC-32C (Castagnoli, reflected polynomial 0x82f63b78), slicing by 8 ---------------- */

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
}

uint32_t bfs_crc32c(uint32_t crc, const void *data, size_t n)
{
    const uint8_t *p = data;
    pthread_once(&crc_once, crc_init);
    crc = ~crc;
    while (n >= 8) {
        uint32_t lo = bfs_ld32(p) ^ crc, hi = bfs_ld32(p + 4);
        crc = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
              crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xff] ^
              crc_table[2][(hi >> 8) & 0xff] ^ crc_table[1][(hi >> 16) & 0xff] ^
              crc_table[0][hi >> 24];
        p += 8, n -= 8;
    }
    while (n--)
        crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xff];
    return ~crc;
}

uint32_t bfs_tfr_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* ---- record framing ---------------------------------------------------------------------- */

void bfs_tfr_init(bfs_tfr *r, bfs_shard_in in, const char *image_key, const char *label_key)
{
    memset(r, 0, sizeof *r);
    r->in = in;
    r->image_key = image_key ? image_key : "image/encoded";
    r->label_key = label_key ? label_key : "image/class/label";
}

/* ---- compressed files ---------------------------------------------------------------------- */

#define Z_IN (64u << 10) /* compressed bytes read at a time */

struct bfs_tfr_z {
    z_stream zs;
    uint8_t in[Z_IN];
    int eof;            /* the shard has no more bytes */
    int stream_end;     /* the last inflate ended a stream: the next byte starts another */
    uint64_t stream_at; /* the file's byte where the current stream starts */
    char why[320];      /* what went wrong (read_some returned -EINVAL) */
};

void bfs_tfr_close(bfs_tfr *r)
{
    if (!r)
        return;
    free(r->buf);
    r->buf = NULL;
    r->cap = r->len = 0;
    if (r->z) {
        inflateEnd(&r->z->zs);
        free(r->z);
        r->z = NULL;
    }
}

static const char *z_name(const bfs_tfr *r)
{
    return r->compression == BFS_TFR_GZIP ? "GZIP" : "ZLIB";
}

/* Up to n bytes of the shard itself (the first bytes, kept to tell the compression, first):
 * how many (0: its end) or a negative errno. */
static ssize_t read_raw(bfs_tfr *r, uint8_t *buf, size_t n)
{
    if (r->head_pos < r->head_len) {
        size_t k = r->head_len - r->head_pos < n ? r->head_len - r->head_pos : n;
        memcpy(buf, r->head + r->head_pos, k);
        r->head_pos += k;
        return (ssize_t)k;
    }
    for (;;) {
        ssize_t k = r->in.read_cb(r->in.ctx, buf, n);
        if (k == -EINTR)
            continue;
        if (k > 0)
            r->in_off += (uint64_t)k;
        return k;
    }
}

/* RFC 1950: CM 8 (deflate), CINFO <= 7 (a window of 32 KiB at most), FCHECK, no FDICT. */
static int zlib_header(const uint8_t *h)
{
    return (h[0] & 15) == 8 && (h[0] >> 4) <= 7 && ((h[0] << 8) | h[1]) % 31 == 0 && !(h[1] & 32);
}

/* The first bytes: which compression, and the inflater when there is one. */
static int start(bfs_tfr *r)
{
    r->started = 1;
    while (r->head_len < sizeof r->head) {
        ssize_t k = r->in.read_cb(r->in.ctx, r->head + r->head_len, sizeof r->head - r->head_len);
        if (k == -EINTR)
            continue;
        if (k < 0)
            return (int)k;
        if (k == 0)
            break;
        r->head_len += (size_t)k, r->in_off += (uint64_t)k;
    }
    const uint8_t *h = r->head;
    if (r->head_len == sizeof r->head && bfs_tfr_mask(bfs_crc32c(0, h, 8)) == bfs_ld32(h + 8))
        r->compression = BFS_TFR_PLAIN; /* a record's length checksum: plain */
    else if (r->head_len >= 2 && h[0] == 0x1f && h[1] == 0x8b)
        r->compression = BFS_TFR_GZIP;
    else if (r->head_len >= 2 && zlib_header(h))
        r->compression = BFS_TFR_ZLIB;
    else
        r->compression = BFS_TFR_PLAIN; /* the framing says what is wrong */
    if (r->compression == BFS_TFR_PLAIN)
        return 0;
    if (!(r->z = calloc(1, sizeof *r->z)))
        return -ENOMEM;
    /* 15 + 16: gzip; 15: zlib (its header and Adler-32) */
    if (inflateInit2(&r->z->zs, r->compression == BFS_TFR_GZIP ? 15 + 16 : 15) != Z_OK) {
        free(r->z);
        r->z = NULL;
        return -ENOMEM;
    }
    return 0;
}

/* Up to n decompressed bytes into buf: how many (0 at the end of the file, after a whole
 * stream), or -EINVAL (r->z->why says why), -ENOMEM, a read error. */
static ssize_t inflate_some(bfs_tfr *r, uint8_t *buf, size_t n)
{
    bfs_tfr_z *z = r->z;
    z_stream *zs = &z->zs;
    uInt want = n > (1u << 30) ? (1u << 30) : (uInt)n;
    zs->next_out = buf;
    zs->avail_out = want;
    while (zs->avail_out == want) { /* until some bytes come out */
        if (!zs->avail_in && !z->eof) {
            ssize_t k = read_raw(r, z->in, sizeof z->in);
            if (k < 0)
                return k;
            z->eof = k == 0;
            zs->next_in = z->in, zs->avail_in = (uInt)k;
        }
        if (z->stream_end) {
            if (!zs->avail_in)
                return 0; /* the file ends after a whole stream */
            if (inflateReset(zs) != Z_OK)
                return -ENOMEM;
            z->stream_end = 0; /* another stream follows (concatenated gzip members) */
            z->stream_at = r->in_off - zs->avail_in;
        }
        int zr = inflate(zs, Z_NO_FLUSH);
        uint64_t at = r->in_off - zs->avail_in; /* the file's bytes consumed */
        if (zr == Z_STREAM_END)
            z->stream_end = 1;
        else if (zr == Z_MEM_ERROR)
            return -ENOMEM;
        else if (zr == Z_NEED_DICT || zr == Z_DATA_ERROR || zr == Z_STREAM_ERROR) {
            char from[96] = "";
            if (z->stream_at) /* not the first stream: bytes after one, maybe no stream */
                snprintf(from, sizeof from, " (in what follows the stream's end at byte %llu)",
                         (unsigned long long)z->stream_at);
            snprintf(z->why, sizeof z->why, "%s data corrupt at byte %llu%s: %s", z_name(r),
                     (unsigned long long)at, from, zs->msg ? zs->msg : "needs a preset dictionary");
            return -EINVAL;
        } else if (!zs->avail_in && z->eof && zs->avail_out) {
            snprintf(z->why, sizeof z->why,
                     "truncated: the file ends at byte %llu, inside its %s stream (%llu bytes "
                     "decompressed)",
                     (unsigned long long)at, z_name(r),
                     (unsigned long long)(r->off + (want - zs->avail_out)));
            return -EINVAL;
        }
    }
    return (ssize_t)(want - zs->avail_out);
}

/* Up to n bytes of the record stream into buf: how many (fewer only at the end) or a
 * negative errno (-EINVAL from a compressed file: r->z->why). */
static ssize_t read_some(bfs_tfr *r, void *buf, size_t n)
{
    size_t got = 0;
    if (!r->started) {
        int rc = start(r);
        if (rc)
            return rc;
    }
    while (got < n) {
        ssize_t k = r->z ? inflate_some(r, (uint8_t *)buf + got, n - got)
                         : read_raw(r, (uint8_t *)buf + got, n - got);
        if (k < 0)
            return k;
        if (k == 0)
            break;
        got += (size_t)k;
    }
    r->off += got;
    return (ssize_t)got;
}

/* A read error for err: a compressed file's own, or the callback's. */
static int read_error(bfs_tfr *r, int rc, char *err, size_t errlen)
{
    if (rc == -EINVAL && r->z && r->z->why[0])
        return bfs_errf(rc, err, errlen, "%s", r->z->why);
    return bfs_errf(rc, err, errlen, "reading: %s", bfs_strerror(rc));
}

/* How the byte offsets of records read (r->off): in the file, or after decompression. */
static const char *of(const bfs_tfr *r)
{
    return !r->z                            ? ""
           : r->compression == BFS_TFR_GZIP ? " of the GZIP-decompressed data"
                                            : " of the ZLIB-decompressed data";
}

static int truncated(bfs_tfr *r, uint64_t at, char *err, size_t errlen)
{
    return bfs_errf(-EINVAL, err, errlen,
                    "truncated: the stream ends at byte %llu%s, inside record %llu (from byte "
                    "%llu)",
                    (unsigned long long)r->off, of(r), (unsigned long long)r->index,
                    (unsigned long long)at);
}

int bfs_tfr_next(bfs_tfr *r, char *err, size_t errlen)
{
    uint8_t head[12], tail[4];
    uint64_t at = r->off;
    ssize_t k = read_some(r, head, sizeof head);
    if (k < 0)
        return read_error(r, (int)k, err, errlen);
    if (k == 0)
        return 0;
    if (k < (ssize_t)sizeof head)
        return truncated(r, at, err, errlen);
    uint64_t len = bfs_ld64(head);
    if (bfs_tfr_mask(bfs_crc32c(0, head, 8)) != bfs_ld32(head + 8)) {
        if (at == 0)
            return bfs_errf(-EINVAL, err, errlen,
                            "not a TFRecord file%s: bad length checksum at byte 0%s",
                            r->z ? " once decompressed" : " (nor GZIP- or ZLIB-compressed)", of(r));
        return bfs_errf(-EINVAL, err, errlen,
                        "record %llu at byte %llu%s: bad length checksum (CRC-32C mismatch)",
                        (unsigned long long)r->index, (unsigned long long)at, of(r));
    }
    if (len > BFS_TFR_RECORD_MAX)
        return bfs_errf(-EINVAL, err, errlen,
                        "record %llu at byte %llu%s: %llu bytes, over the 1 GiB this reads",
                        (unsigned long long)r->index, (unsigned long long)at, of(r),
                        (unsigned long long)len);
    if (len > r->cap || !r->buf) {
        size_t c = r->cap ? r->cap : 65536;
        while (c < len)
            c *= 2;
        uint8_t *b = realloc(r->buf, c);
        if (!b)
            return bfs_errf(-ENOMEM, err, errlen, "out of memory (a record of %llu bytes)",
                            (unsigned long long)len);
        r->buf = b, r->cap = c;
    }
    k = read_some(r, r->buf, (size_t)len);
    if (k >= 0 && (uint64_t)k == len)
        k = read_some(r, tail, sizeof tail);
    else if (k >= 0)
        k = 0; /* short: truncated */
    if (k < 0)
        return read_error(r, (int)k, err, errlen);
    if (k != (ssize_t)sizeof tail)
        return truncated(r, at, err, errlen);
    if (bfs_tfr_mask(bfs_crc32c(0, r->buf, (size_t)len)) != bfs_ld32(tail))
        return bfs_errf(-EINVAL, err, errlen,
                        "record %llu at byte %llu%s: bad data checksum (CRC-32C mismatch)",
                        (unsigned long long)r->index, (unsigned long long)at, of(r));
    r->len = (size_t)len;
    r->index++;
    return 1;
}

/* ---- protobuf ------------------------------------------------------------------------------ */

typedef struct pb {
    const uint8_t *p, *end;
} pb;

static int pb_varint(pb *b, uint64_t *v)
{
    uint64_t x = 0;
    for (int i = 0; i < 10; i++) {
        if (b->p >= b->end)
            return -1;
        uint8_t c = *b->p++;
        if (i == 9 && c > 1)
            return -1; /* more than 64 bits */
        x |= (uint64_t)(c & 0x7f) << (7 * i);
        if (!(c & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* The next field: its number and wire type; for length-delimited ones, sub = the bytes. */
static int pb_field(pb *b, uint64_t *num, int *wt, pb *sub, uint64_t *val)
{
    uint64_t tag, len;
    if (pb_varint(b, &tag))
        return -1;
    *num = tag >> 3, *wt = (int)(tag & 7);
    if (*num == 0 || *num > 536870911u)
        return -1;
    switch (*wt) {
    case 0:
        return pb_varint(b, val);
    case 1:
    case 5: {
        size_t n = *wt == 1 ? 8 : 4;
        if ((size_t)(b->end - b->p) < n)
            return -1;
        b->p += n;
        return 0;
    }
    case 2:
        if (pb_varint(b, &len) || len > (uint64_t)(b->end - b->p))
            return -1;
        sub->p = b->p, sub->end = b->p + len;
        b->p += len;
        return 0;
    default: /* groups (3, 4, deprecated) and wire types 6, 7 */
        return -1;
    }
}

/* A list message (BytesList, FloatList, Int64List) of the given kind into f. */
static int pb_list(pb b, int kind, bfs_tfr_feature *f)
{
    uint64_t num, v;
    int wt;
    pb sub;
    while (b.p < b.end) {
        if (pb_field(&b, &num, &wt, &sub, &v))
            return -1;
        if (num != 1)
            continue; /* unknown field */
        if (kind == 1) {
            if (wt != 2)
                return -1;
            if (f->count++ == 0)
                f->bytes = sub.p, f->bytes_len = (size_t)(sub.end - sub.p);
        } else if (kind == 2) { /* floats: fixed32, packed or not */
            if (wt == 5)
                f->count++;
            else if (wt == 2 && (sub.end - sub.p) % 4 == 0)
                f->count += (uint64_t)(sub.end - sub.p) / 4;
            else
                return -1;
        } else if (wt == 0) {
            if (f->count++ == 0)
                f->int64 = (int64_t)v;
        } else if (wt == 2) { /* packed varints */
            while (sub.p < sub.end) {
                if (pb_varint(&sub, &v))
                    return -1;
                if (f->count++ == 0)
                    f->int64 = (int64_t)v;
            }
        } else
            return -1;
    }
    return 0;
}

/* A Feature message into f (the last kind given wins, as for a protobuf oneof; a kind
 * given twice is merged: its lists concatenated). */
static int pb_feature(pb b, bfs_tfr_feature *f)
{
    uint64_t num, v;
    int wt;
    pb sub;
    while (b.p < b.end) {
        if (pb_field(&b, &num, &wt, &sub, &v))
            return -1;
        if (num < 1 || num > 3)
            continue;
        if (wt != 2)
            return -1;
        if (f->kind != (int)num)
            memset(f, 0, sizeof *f), f->kind = (int)num;
        if (pb_list(sub, (int)num, f))
            return -1;
    }
    if (!f->kind)
        f->kind = -1; /* present, no kind set: treated as absent by callers (kind <= 0) */
    return 0;
}

static int key_is(pb k, const char *key)
{
    size_t n = strlen(key);
    return (size_t)(k.end - k.p) == n && !memcmp(k.p, key, n);
}

int bfs_tfr_example(const uint8_t *p, size_t n, const char *image_key, const char *label_key,
                    bfs_tfr_feature *image, bfs_tfr_feature *label)
{
    static const uint8_t none[1];
    if (!n)
        p = none; /* no arithmetic on a null pointer */
    pb ex = {p, p + n}, feats, entry, key, val;
    uint64_t num, v;
    int wt;
    memset(image, 0, sizeof *image);
    memset(label, 0, sizeof *label);
    while (ex.p < ex.end) {
        if (pb_field(&ex, &num, &wt, &feats, &v))
            return -EINVAL;
        if (num != 1)
            continue;
        if (wt != 2)
            return -EINVAL;
        while (feats.p < feats.end) { /* Features: map entries, field 1 */
            if (pb_field(&feats, &num, &wt, &entry, &v))
                return -EINVAL;
            if (num != 1)
                continue;
            if (wt != 2)
                return -EINVAL;
            int have_val = 0;
            key.p = key.end = entry.p; /* a missing key is "" */
            pb e = entry;
            while (e.p < e.end) {
                pb sub;
                if (pb_field(&e, &num, &wt, &sub, &v))
                    return -EINVAL;
                if ((num == 1 || num == 2) && wt != 2)
                    return -EINVAL;
                if (num == 1)
                    key = sub;
                else if (num == 2)
                    val = sub, have_val = 1;
            }
            bfs_tfr_feature f = {0}, *dst = NULL;
            if (key_is(key, image_key))
                dst = image;
            else if (key_is(key, label_key))
                dst = label;
            if (have_val && pb_feature(val, &f))
                return -EINVAL;
            if (dst) /* the last entry for a key wins */
                *dst = have_val ? f : (bfs_tfr_feature){.kind = -1};
        }
    }
    if (image->kind < 0)
        image->kind = 0;
    if (label->kind < 0)
        label->kind = 0;
    return 0;
}

int bfs_tfr_next_sample(bfs_tfr *r, bfs_shard_sample *s, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    uint64_t at = r->off;
    int rc = bfs_tfr_next(r, err, errlen);
    if (rc <= 0)
        return rc;
    snprintf(r->key, sizeof r->key, "record %llu", (unsigned long long)(r->index - 1));
    s->key = r->key;
    s->offset = at;
    bfs_tfr_feature img, lab;
    if (bfs_tfr_example(r->buf, r->len, r->image_key, r->label_key, &img, &lab)) {
        s->skip = "not a tf.train.Example";
        return 1;
    }
    if (img.kind == 0 || (img.kind == 1 && img.count == 0)) {
        s->skip = "no image (the --image-key feature is absent or empty)";
        return 1;
    }
    if (img.kind != 1 || img.count != 1) {
        s->skip = "the image feature is not one bytes value";
        return 1;
    }
    if (lab.kind == 0 || (lab.kind == 3 && lab.count == 0)) {
        s->skip = "no label (the --label-key feature is absent or empty)";
        return 1;
    }
    if (lab.kind != 3 || lab.count != 1) {
        s->skip = "the label feature is not one int64 value";
        return 1;
    }
    if (lab.int64 < 0 || lab.int64 > BFS_SHARD_LABEL_MAX) {
        s->skip = "label out of range (0..16777215)";
        return 1;
    }
    s->label = lab.int64;
    if (!(s->image = malloc(img.bytes_len ? img.bytes_len : 1)))
        return bfs_errf(-ENOMEM, err, errlen, "out of memory (an image of %zu bytes)",
                        img.bytes_len);
    memcpy(s->image, img.bytes, img.bytes_len);
    s->image_len = img.bytes_len;
    return 1;
}

/* ---- every feature (mkbatchfs keeping every field) ------------------------------------------ */

/* A growing list of values of one kind. */
typedef struct vals {
    uint8_t *p;
    size_t n, cap, es;  /* values, capacity (values), element size */
    const uint8_t *one; /* bytes_list: the first value */
    size_t one_len;
} vals;

static int vals_push(vals *v, const void *x)
{
    if (v->n == v->cap) {
        size_t c = v->cap ? v->cap * 2 : 16;
        uint8_t *np = realloc(v->p, c * v->es);
        if (!np)
            return -ENOMEM;
        v->p = np, v->cap = c;
    }
    memcpy(v->p + v->n * v->es, x, v->es);
    v->n++;
    return 0;
}

/* Every value of a Feature message (the last kind wins; a kind given twice concatenated).
 * *kind 0 when none; -1 malformed, -ENOMEM. */
static int pb_feature_values(pb b, int *kind, vals *v)
{
    uint64_t num, x;
    int wt;
    pb sub;
    *kind = 0;
    while (b.p < b.end) {
        if (pb_field(&b, &num, &wt, &sub, &x))
            return -1;
        if (num < 1 || num > 3)
            continue;
        if (wt != 2)
            return -1;
        if (*kind != (int)num) {
            *kind = (int)num;
            v->n = 0, v->one = NULL, v->one_len = 0;
            v->es = num == 1 ? 1 : num == 2 ? sizeof(float) : sizeof(int64_t);
            free(v->p);
            v->p = NULL, v->cap = 0;
        }
        pb l = sub;
        while (l.p < l.end) {
            pb s2;
            uint64_t val;
            if (pb_field(&l, &num, &wt, &s2, &val))
                return -1;
            if (num != 1)
                continue;
            if (*kind == 1) {
                if (wt != 2)
                    return -1;
                if (v->n++ == 0)
                    v->one = s2.p, v->one_len = (size_t)(s2.end - s2.p);
            } else if (*kind == 2) {
                if (wt == 5) {
                    uint32_t u = bfs_ld32(l.p - 4);
                    float f;
                    memcpy(&f, &u, 4);
                    if (vals_push(v, &f))
                        return -ENOMEM;
                } else if (wt == 2 && (s2.end - s2.p) % 4 == 0) {
                    for (const uint8_t *q = s2.p; q < s2.end; q += 4) {
                        uint32_t u = bfs_ld32(q);
                        float f;
                        memcpy(&f, &u, 4);
                        if (vals_push(v, &f))
                            return -ENOMEM;
                    }
                } else
                    return -1;
            } else if (wt == 0) {
                int64_t i = (int64_t)val;
                if (vals_push(v, &i))
                    return -ENOMEM;
            } else if (wt == 2) {
                while (s2.p < s2.end) {
                    if (pb_varint(&s2, &val))
                        return -1;
                    int64_t i = (int64_t)val;
                    if (vals_push(v, &i))
                        return -ENOMEM;
                }
            } else
                return -1;
        }
    }
    return 0;
}

int bfs_tfr_example_members(const uint8_t *p, size_t n, bfs_members *m)
{
    static const uint8_t none[1];
    if (!n)
        p = none;
    pb ex = {p, p + n}, feats, entry, key = {0}, val = {0};
    uint64_t num, v;
    int wt;
    bfs_members_clear(m);
    while (ex.p < ex.end) {
        if (pb_field(&ex, &num, &wt, &feats, &v))
            goto bad;
        if (num != 1)
            continue;
        if (wt != 2)
            goto bad;
        while (feats.p < feats.end) {
            if (pb_field(&feats, &num, &wt, &entry, &v))
                goto bad;
            if (num != 1)
                continue;
            if (wt != 2)
                goto bad;
            int have_val = 0;
            key.p = key.end = entry.p;
            pb e = entry;
            while (e.p < e.end) {
                pb sub;
                if (pb_field(&e, &num, &wt, &sub, &v))
                    goto bad;
                if ((num == 1 || num == 2) && wt != 2)
                    goto bad;
                if (num == 1)
                    key = sub;
                else if (num == 2)
                    val = sub, have_val = 1;
            }
            int kind = 0, rc = 0;
            vals vs = {0};
            if (have_val && (rc = pb_feature_values(val, &kind, &vs))) {
                free(vs.p);
                if (rc == -ENOMEM)
                    return rc;
                goto bad;
            }
            /* the last entry for a key wins: drop an earlier one */
            size_t klen = (size_t)(key.end - key.p);
            for (size_t i = 0; i < m->n; i++)
                if (strlen(m->v[i].name) == klen && !memcmp(m->v[i].name, key.p, klen)) {
                    free(m->v[i].name);
                    free(m->v[i].data);
                    memmove(&m->v[i], &m->v[i + 1], (m->n - i - 1) * sizeof *m->v);
                    m->n--;
                    break;
                }
            if (memchr(key.p, 0, klen) || kind == 0 || (kind == 1 && vs.n == 0)) {
                /* no value: as absent (an empty number list is an empty value) */
                free(vs.p);
                continue;
            }
            uint8_t *data = NULL;
            size_t len = vs.n;
            int type = kind == 1   ? BFS_MEMBER_BYTES
                       : kind == 2 ? BFS_MEMBER_FLOATS
                                   : BFS_MEMBER_INTS;
            if (kind == 1) {
                free(vs.p);
                len = vs.n == 1 ? vs.one_len : 0;
                if (vs.n == 1 && !(data = malloc(len ? len : 1)))
                    return -ENOMEM;
                if (vs.n == 1 && len)
                    memcpy(data, vs.one, len);
            } else
                data = vs.p;
            if (bfs_members_add(m, (const char *)key.p, klen, type, data, len, NULL))
                return -ENOMEM;
            if (kind == 1 && vs.n > 1)
                m->v[m->n - 1].bad = 1, m->v[m->n - 1].why = "a bytes_list of several values";
        }
    }
    return 0;
bad:
    bfs_members_clear(m);
    return -EINVAL;
}

int bfs_tfr_next_members(bfs_tfr *r, bfs_members *m, uint64_t *offset, int *not_example, char *err,
                         size_t errlen)
{
    bfs_members_clear(m);
    *not_example = 0;
    uint64_t at = r->off;
    int rc = bfs_tfr_next(r, err, errlen);
    if (rc <= 0)
        return rc;
    snprintf(r->key, sizeof r->key, "record %llu", (unsigned long long)(r->index - 1));
    *offset = at;
    rc = bfs_tfr_example_members(r->buf, r->len, m);
    if (rc == -ENOMEM)
        return bfs_errf(rc, err, errlen, "out of memory (record %llu)",
                        (unsigned long long)(r->index - 1));
    *not_example = rc != 0;
    return 1;
}
