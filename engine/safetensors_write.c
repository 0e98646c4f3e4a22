/*
 * safetensors_write.c — the batch-file encoder (see safetensors.h): the headers and
 * layouts of image batches (bfs_st_batch_layout, bfs_st_write_header) and token batches
 * (bfs_st_tok_layout, bfs_st_tok_write_header). The engine's batch assembly calls it;
 * the dtypes and the parser are safetensors.c.
 *
 * One emitter (emit_json) writes the JSON; it counts every byte even past the
 * end of its buffer, so the same code both writes the header and measures it. The
 * layout is sized by a dry run with the widest possible numbers (20-digit epoch, batch
 * index and offsets, 10-digit dimensions, the longest image dtype name), so the real
 * header always fits ahead of labels_off and the file size depends only on the shape,
 * the dtype and the extra metadata, never on which batch is written. Labels and indices
 * come first in the data, right before the page-aligned images, so the I64 tensors are
 * 8-byte aligned whatever the images' size (see safetensors.h).
 */
#include "engine/safetensors.h"
#include "engine/safetensors_internal.h"
#include "base/utf8.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* ---- encoder ------------------------------------------------------------------------ */

/* A bounded writer that counts past its capacity (dst may be NULL to only measure). */
typedef struct emitter {
    uint8_t *dst;
    size_t cap;
    size_t len;
} emitter;

static void put(emitter *e, const void *s, size_t n)
{
    if (e->dst && e->len <= e->cap && n <= e->cap - e->len)
        memcpy(e->dst + e->len, s, n);
    e->len += n;
}

static void put_s(emitter *e, const char *s)
{
    put(e, s, strlen(s));
}

static void put_u64(emitter *e, uint64_t v)
{
    char buf[24];
    int n = snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    put(e, buf, (size_t)n);
}

/* A JSON string literal: quotes, backslashes and control characters escaped, other
 * bytes (valid UTF-8, checked by the caller) as they are. */
static void put_json_string(emitter *e, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    put(e, "\"", 1);
    for (const uint8_t *p = (const uint8_t *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char esc[2] = {'\\', (char)*p};
            put(e, esc, 2);
        } else if (*p < 0x20) {
            char esc[6] = {'\\', 'u', '0', '0', hex[*p >> 4], hex[*p & 15]};
            put(e, esc, 6);
        } else
            put(e, p, 1);
    }
    put(e, "\"", 1);
}

static void put_tensor(emitter *e, const char *name, const char *dtype, const uint64_t *shape,
                       unsigned ndim, uint64_t begin, uint64_t end)
{
    put(e, "\"", 1);
    put_s(e, name);
    put_s(e, "\":{\"dtype\":\"");
    put_s(e, dtype);
    put_s(e, "\",\"shape\":[");
    for (unsigned i = 0; i < ndim; i++) {
        if (i)
            put(e, ",", 1);
        put_u64(e, shape[i]);
    }
    put_s(e, "],\"data_offsets\":[");
    put_u64(e, begin);
    put(e, ",", 1);
    put_u64(e, end);
    put_s(e, "]}");
}

/* The numbers the JSON holds; the dry run that sizes the layout fills them with maxima
 * (widest != 0: every field tensor's dimensions and offsets too). */
typedef struct header_numbers {
    uint64_t b, h, w;
    uint64_t epoch, batch_index, fingerprint;
    uint64_t labels, indices, images, end; /* data-relative: begins in data order, end */
    int widest;
    const uint64_t *field_begin; /* data-relative, per field tensor (widest: unused) */
    const uint64_t *field_bytes;
} header_numbers;

static void put_field_tensors(emitter *e, const bfs_st_batch_desc *d, const char *dtype_name,
                              const uint64_t *img_shape, const header_numbers *n)
{
    for (uint32_t i = 0; i < d->n_fields; i++) {
        const bfs_st_field_tensor *t = &d->fields[i];
        uint64_t shape[BFS_ST_MAX_DIMS];
        unsigned ndim = 4;
        if (t->image)
            memcpy(shape, img_shape, 4 * sizeof *shape);
        else {
            ndim = 1 + t->ndim;
            shape[0] = n->b;
            for (uint32_t k = 0; k < t->ndim; k++)
                shape[1 + k] = n->widest ? UINT64_MAX : t->shape[k];
        }
        uint64_t begin = n->widest ? UINT64_MAX : n->field_begin[i];
        uint64_t end = n->widest ? UINT64_MAX : n->field_begin[i] + n->field_bytes[i];
        put(e, ",", 1);
        put_tensor(e, t->name, t->image ? dtype_name : bfs_dtype_name(t->dtype), shape, ndim, begin,
                   end);
    }
}

static void emit_json(emitter *e, const bfs_st_batch_desc *d, const char *dtype_name,
                      const header_numbers *n)
{
    char fp[17];
    snprintf(fp, sizeof fp, "%016llx", (unsigned long long)n->fingerprint);
    put_s(e, "{\"__metadata__\":{\"format\":\"" BFS_ST_FORMAT "\",\"layout\":\"");
    put_s(e, d->nchw ? "nchw" : "nhwc");
    put_s(e, "\",\"epoch\":\"");
    put_u64(e, n->epoch);
    put_s(e, "\",\"batch\":\"");
    put_u64(e, n->batch_index);
    put_s(e, "\",\"fingerprint\":\"");
    put_s(e, fp);
    put(e, "\"", 1);
    for (uint32_t i = 0; i < d->n_extra; i++) {
        put(e, ",", 1);
        put_json_string(e, d->extra[i].key);
        put(e, ":", 1);
        put_json_string(e, d->extra[i].value);
    }
    put_s(e, "},");
    uint64_t img[4] = {n->b, n->h, n->w, 3};
    if (d->nchw)
        img[1] = 3, img[2] = n->h, img[3] = n->w;
    put_tensor(e, "images", dtype_name, img, 4, n->images, n->end);
    put(e, ",", 1);
    put_tensor(e, "labels", "I64", &n->b, 1, n->labels, n->indices);
    put(e, ",", 1);
    put_tensor(e, "indices", "I64", &n->b, 1, n->indices, n->images);
    put_field_tensors(e, d, dtype_name, img, n);
    put(e, "}", 1);
}

static const char *const reserved_keys[] = {"format", "layout", "epoch", "batch", "fingerprint"};

static int check_desc(const bfs_st_batch_desc *d)
{
    if (!d || !bfs_st_image_dtype(d->dtype) || (d->nchw != 0 && d->nchw != 1) || !d->batch ||
        !d->height || !d->width || d->n_extra > BFS_ST_MAX_EXTRA || (d->n_extra && !d->extra))
        return -EINVAL;
    for (uint32_t i = 0; i < d->n_extra; i++) {
        const char *k = d->extra[i].key, *v = d->extra[i].value;
        if (!k || !v)
            return -EINVAL;
        size_t kl = strlen(k), vl = strlen(v);
        if (!kl || kl > BFS_ST_MAX_EXTRA_LEN || vl > BFS_ST_MAX_EXTRA_LEN ||
            !bfs_utf8_valid((const uint8_t *)k, kl) || !bfs_utf8_valid((const uint8_t *)v, vl))
            return -EINVAL;
        for (size_t r = 0; r < sizeof reserved_keys / sizeof *reserved_keys; r++)
            if (!strcmp(k, reserved_keys[r]))
                return -EINVAL;
        for (uint32_t j = 0; j < i; j++)
            if (!strcmp(k, d->extra[j].key))
                return -EINVAL;
    }
    if (d->n_fields > BFS_ST_MAX_FIELD_TENSORS || (d->n_fields && !d->fields))
        return -EINVAL;
    for (uint32_t i = 0; i < d->n_fields; i++) {
        const bfs_st_field_tensor *t = &d->fields[i];
        const char *nm = t->name;
        size_t nl = nm ? strlen(nm) : 0;
        if (!nl || nl > BFS_ST_NAME_MAX || (nm[0] >= '0' && nm[0] <= '9') ||
            strspn(nm, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != nl ||
            !strcmp(nm, "images") || !strcmp(nm, "labels") || !strcmp(nm, "indices"))
            return -EINVAL;
        for (uint32_t j = 0; j < i; j++)
            if (!strcmp(nm, d->fields[j].name))
                return -EINVAL;
        if (t->image)
            continue;
        if (!bfs_st_dtype_valid(t->dtype) || !bfs_dtype_size(t->dtype) ||
            t->ndim >= BFS_ST_MAX_DIMS)
            return -EINVAL;
        for (uint32_t k = 0; k < t->ndim; k++)
            if (!t->shape[k])
                return -EINVAL;
    }
    return 0;
}

/* Bytes of field tensor t of a batch of b samples whose images take images bytes. */
static int field_bytes(const bfs_st_field_tensor *t, uint64_t b, uint64_t images, uint64_t *out)
{
    if (t->image) {
        *out = images;
        return 0;
    }
    uint64_t v = b * bfs_dtype_size(t->dtype); /* b < 2^32, size <= 16 */
    for (uint32_t k = 0; k < t->ndim; k++)
        if (__builtin_mul_overflow(v, t->shape[k], &v))
            return -EOVERFLOW;
    *out = v;
    return 0;
}

int bfs_st_batch_layout(const bfs_st_batch_desc *d, bfs_st_layout *out)
{
    int rc = check_desc(d);
    if (rc)
        return rc;
    bfs_st_layout l;
    uint64_t hw, images;
    if (__builtin_mul_overflow((uint64_t)d->height, (uint64_t)d->width, &hw) ||
        __builtin_mul_overflow(hw, 3u * (uint64_t)bfs_dtype_size(d->dtype), &l.sample_bytes) ||
        __builtin_mul_overflow(l.sample_bytes, (uint64_t)d->batch, &images))
        return -EOVERFLOW;
    l.images_bytes = images;
    l.labels_bytes = l.indices_bytes = 8ull * d->batch;
    uint64_t before = 0, after = 0; /* field tensors' bytes ahead of labels, after images */
    for (uint32_t i = 0; i < d->n_fields; i++) {
        if (field_bytes(&d->fields[i], d->batch, images, &l.field_bytes[i]) ||
            __builtin_add_overflow(d->fields[i].image ? after : before, l.field_bytes[i],
                                   d->fields[i].image ? &after : &before))
            return -EOVERFLOW;
    }

    /* Dry run with the widest numbers any batch could carry (see the file comment). */
    header_numbers widest;
    memset(&widest, 0, sizeof widest);
    widest.b = widest.h = widest.w = UINT32_MAX;
    widest.epoch = widest.batch_index = widest.fingerprint = UINT64_MAX;
    widest.labels = widest.indices = widest.images = widest.end = UINT64_MAX;
    widest.widest = 1;
    emitter e = {NULL, 0, 0};
    emit_json(&e, d, "BF16", &widest);
    /* 8 + under 100 KB of JSON (8 extras of 2 x 1024 bytes, 6 per escaped byte, 61 field
     * tensors of under 300 bytes) + 2^36 + the fields' bytes */
    uint64_t need;
    if (__builtin_add_overflow(8 + (uint64_t)e.len + l.labels_bytes + l.indices_bytes, before,
                               &need) ||
        need > UINT64_MAX - BFS_ST_IMAGES_ALIGN)
        return -EOVERFLOW;
    l.images_off = (need + BFS_ST_IMAGES_ALIGN - 1) / BFS_ST_IMAGES_ALIGN * BFS_ST_IMAGES_ALIGN;
    l.indices_off = l.images_off - l.indices_bytes;
    l.labels_off = l.indices_off - l.labels_bytes;
    l.header_size = l.labels_off - before;
    /* ahead of labels: by element size, smallest first (stable), so each tensor ends
     * where one of at least its element size begins (labels: 8-byte aligned) */
    uint64_t at = l.header_size;
    for (size_t es = 1; es <= 16; es *= 2)
        for (uint32_t i = 0; i < d->n_fields; i++)
            if (!d->fields[i].image && bfs_dtype_size(d->fields[i].dtype) == es) {
                l.field_off[i] = at;
                at += l.field_bytes[i];
            }
    if (__builtin_add_overflow(l.images_off, images, &at))
        return -EOVERFLOW;
    for (uint32_t i = 0; i < d->n_fields; i++)
        if (d->fields[i].image) {
            l.field_off[i] = at;
            at += l.field_bytes[i]; /* after <= its sum: checked */
        }
    if (__builtin_add_overflow(l.images_off + images, after, &l.file_size))
        return -EOVERFLOW;
    if (out)
        *out = l;
    return 0;
}

uint64_t bfs_st_batch_size(const bfs_st_batch_desc *d)
{
    bfs_st_layout l;
    return bfs_st_batch_layout(d, &l) ? 0 : l.file_size;
}

int bfs_st_write_header(const bfs_st_batch_desc *d, uint8_t *dst, size_t cap)
{
    bfs_st_layout l;
    int rc = bfs_st_batch_layout(d, &l);
    if (rc)
        return rc;
    if (!dst || cap < l.header_size)
        return -ENOSPC;
    header_numbers n = {.b = d->batch, .h = d->height, .w = d->width, .epoch = d->epoch};
    n.batch_index = d->batch_index;
    n.fingerprint = d->fingerprint;
    n.labels = l.labels_off - l.header_size;
    n.indices = l.indices_off - l.header_size;
    n.images = l.images_off - l.header_size;
    n.end = l.images_off + l.images_bytes - l.header_size;
    uint64_t begin[BFS_ST_MAX_FIELD_TENSORS];
    for (uint32_t i = 0; i < d->n_fields; i++)
        begin[i] = l.field_off[i] - l.header_size;
    n.field_begin = begin;
    n.field_bytes = l.field_bytes;
    size_t json_cap = (size_t)l.header_size - 8;
    emitter e = {dst + 8, json_cap, 0};
    emit_json(&e, d, bfs_dtype_name(d->dtype), &n);
    if (e.len > json_cap) /* cannot happen: the layout was sized by a wider dry run */
        return -EOVERFLOW;
    memset(dst + 8 + e.len, ' ', json_cap - e.len);
    uint64_t hl = json_cap;
    for (int i = 0; i < 8; i++)
        dst[i] = (uint8_t)(hl >> (8 * i));
    return 0;
}

/* ---- encoder: token batches ----------------------------------------------------------- */

static int plain_ascii(const char *s)
{
    if (!s || !*s)
        return 0;
    for (; *s; s++)
        if (*s < 0x20 || *s > 0x7e || *s == '"' || *s == '\\')
            return 0;
    return 1;
}

/* n: the numbers to write; widest: all UINT64_MAX (the dry run that sizes the header) */
static void emit_tok_json(emitter *e, const bfs_st_tok_desc *d, const uint64_t *off, int widest)
{
    char fp[17];
    snprintf(fp, sizeof fp, "%016llx", (unsigned long long)(widest ? UINT64_MAX : d->fingerprint));
    put_s(e, "{\"__metadata__\":{\"format\":\"" BFS_ST_FORMAT "\",\"kind\":\"tokens\",\"pack\":\"");
    put_s(e, d->pack);
    put_s(e, "\",\"epoch\":\"");
    put_u64(e, widest ? UINT64_MAX : d->epoch);
    put_s(e, "\",\"batch\":\"");
    put_u64(e, widest ? UINT64_MAX : d->batch_index);
    put_s(e, "\",\"fingerprint\":\"");
    put_s(e, fp);
    put_s(e, "\"}");
    for (uint32_t i = 0; i < d->n; i++) {
        const bfs_st_tok_tensor *t = &d->t[i];
        uint64_t shape[2] = {widest ? UINT64_MAX : t->shape[0], widest ? UINT64_MAX : t->shape[1]};
        put(e, ",", 1);
        put_tensor(e, t->name, bfs_dtype_name(t->dtype), shape, t->ndim,
                   widest ? UINT64_MAX : off[i], widest ? UINT64_MAX : off[i + 1]);
    }
    put(e, "}", 1);
}

int bfs_st_tok_layout(const bfs_st_tok_desc *d, bfs_st_tok_place *out)
{
    if (!d || !d->n || d->n > BFS_ST_TOK_MAX || d->aligned >= d->n || !plain_ascii(d->pack))
        return -EINVAL;
    bfs_st_tok_place l;
    memset(&l, 0, sizeof l);
    uint64_t before = 0, total = 0;
    for (uint32_t i = 0; i < d->n; i++) {
        const bfs_st_tok_tensor *t = &d->t[i];
        size_t es = bfs_dtype_size(t->dtype);
        uint64_t elems = t->shape[0];
        if (!plain_ascii(t->name) || !es || t->ndim < 1 || t->ndim > 2)
            return -EINVAL;
        if ((t->ndim == 2 && __builtin_mul_overflow(elems, t->shape[1], &elems)) ||
            __builtin_mul_overflow(elems, (uint64_t)es, &l.bytes[i]) ||
            __builtin_add_overflow(total, l.bytes[i], &total))
            return -EOVERFLOW;
        for (uint32_t j = 0; j < i; j++)
            if (!strcmp(t->name, d->t[j].name))
                return -EINVAL;
        if (i < d->aligned)
            before += l.bytes[i];
    }
    emitter e = {NULL, 0, 0};
    emit_tok_json(&e, d, NULL, 1);
    uint64_t need = 8 + (uint64_t)e.len + before;
    uint64_t at = (need + BFS_ST_IMAGES_ALIGN - 1) / BFS_ST_IMAGES_ALIGN * BFS_ST_IMAGES_ALIGN;
    l.header_size = at - before;
    uint64_t o = l.header_size;
    for (uint32_t i = 0; i < d->n; i++) {
        l.off[i] = o;
        o += l.bytes[i];
    }
    if (__builtin_add_overflow(l.header_size, total, &l.file_size))
        return -EOVERFLOW;
    if (out)
        *out = l;
    return 0;
}

int bfs_st_tok_write_header(const bfs_st_tok_desc *d, uint8_t *dst, size_t cap)
{
    bfs_st_tok_place l;
    int rc = bfs_st_tok_layout(d, &l);
    if (rc)
        return rc;
    if (!dst || cap < l.header_size)
        return -ENOSPC;
    uint64_t off[BFS_ST_TOK_MAX + 1];
    for (uint32_t i = 0; i < d->n; i++)
        off[i] = l.off[i] - l.header_size;
    off[d->n] = l.file_size - l.header_size;
    size_t json_cap = (size_t)l.header_size - 8;
    emitter e = {dst + 8, json_cap, 0};
    emit_tok_json(&e, d, off, 0);
    if (e.len > json_cap) /* cannot happen: the layout was sized by a wider dry run */
        return -EOVERFLOW;
    memset(dst + 8 + e.len, ' ', json_cap - e.len);
    for (int i = 0; i < 8; i++)
        dst[i] = (uint8_t)((uint64_t)json_cap >> (8 * i));
    return 0;
}
