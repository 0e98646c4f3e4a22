/*
 * fuzz_safetensors.c — libFuzzer target for engine/safetensors (parser and encoder).
 *
 * Each input is used three ways:
 *   1. as a whole file, with bfs_st_parse. On success the parser's promises are checked
 *      (safetensors.h): every tensor lies inside the input and its bytes are read (ASan
 *      sees a bad offset or length), nbytes equals product(shape) * bits / 8 computed in
 *      128 bits, the tensors tile the data buffer, names and metadata are NUL-terminated
 *      inside the pool and tensor names are unique. On failure the code is -EBADMSG or
 *      -E2BIG with a one-line message.
 *   2. as a header prefix: bfs_st_parse_header on a copy of exactly 8 + N bytes (so ASan
 *      catches a read past the header) must agree with (1); one byte less must ask for
 *      more (-ENOBUFS).
 *   3. as an encoder description: the first 32 bytes pick dtype, layout, B, H, W, epoch,
 *      batch index and fingerprint, the rest become up to 8 extra metadata pairs. When the
 *      encoder accepts them, its header must parse, be recognised as a batch with the same
 *      description, carry the extras verbatim, lay the tensors out as labels, indices
 *      (8-byte aligned, 64 when B % 8 == 0), images (4096-aligned), and cost at most one
 *      page of padding whenever the extras fit BFS_ST_EXTRA_BUDGET. Files that (1)
 *      recognises as batches are re-encoded and re-parsed the same way.
 *   5. field tensors (multi-field batches): bytes 8..31 also describe up to six field
 *      tensors (dtype, 0..3 dimensions of 1..64, or a second image); when the encoder
 *      accepts them, the header parses, each is found by name with its dtype, shape
 *      [B, ...], offset and size, aligned to its element size, the non-image ones
 *      between the header and labels by element size, smallest first, the image ones
 *      after images; labels, indices and images keep their alignment, and
 *      bfs_st_batch_from_file counts the field tensors.
 *   4. writer -> parser round trip of whole files: for every description (also shrunk to
 *      B <= 8, H, W <= 16, so every dtype, layout and extras combination gets here) whose
 *      file is at most FULL_FILE_MAX bytes, the header plus labels, indices and image bytes
 *      from a generator make an exact-size file that bfs_st_parse must accept, with the
 *      tensors (dtype, shape, offsets) and metadata the description says, each tensor's
 *      bytes those written at its offset, nothing between them, and the description
 *      recovered by bfs_st_batch_from_file; one byte short is -EBADMSG.
 */
#include "engine/safetensors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_safetensors: %s:%d: contract violated: %s\n", __FILE__,          \
                    __LINE__, #cond);                                                              \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define FULL_FILE_MAX (4u << 20) /* whole files written and parsed up to this size */

static volatile uint8_t sink;
static bfs_st_file whole, prefix, again, full; /* ~24 KiB each: static, not on the stack */

static void touch(const uint8_t *p, size_t n)
{
    uint8_t x = 0;
    for (size_t i = 0; i < n; i++)
        x ^= p[i];
    sink = x;
}

static int inside_pool(const bfs_st_file *f, const char *s, size_t len)
{
    return s >= f->pool && (size_t)(s - f->pool) + len < sizeof f->pool && s[len] == 0;
}

static void check_failure(int rc, const bfs_st_file *f)
{
    CHECK(rc == -EBADMSG || rc == -E2BIG);
    CHECK(memchr(f->err, 0, sizeof f->err) != NULL && f->err[0] != 0 && !strchr(f->err, '\n'));
}

/* What bfs_st_parse promises about a successful parse of base[0, size). */
static void check_parsed(const bfs_st_file *f, const uint8_t *base, size_t size)
{
    CHECK(f->err[0] == 0);
    CHECK(f->file_size == size && f->data_offset == 8 + f->header_len);
    CHECK(f->header_len >= 2 && f->header_len <= BFS_ST_MAX_HEADER);
    CHECK(f->data_offset + f->data_size == size);
    CHECK(f->n_tensors <= BFS_ST_MAX_TENSORS && f->n_meta <= BFS_ST_MAX_META);
    CHECK(f->pool_used <= sizeof f->pool);
    unsigned __int128 total = 0;
    for (uint32_t i = 0; i < f->n_tensors; i++) {
        const bfs_st_tensor *t = &f->tensors[i];
        CHECK(inside_pool(f, t->name, t->name_len));
        CHECK(bfs_dtype_name(t->dtype) != NULL && t->ndim <= BFS_ST_MAX_DIMS);
        int zero = 0;
        for (uint32_t k = 0; k < t->ndim; k++)
            zero |= t->shape[k] == 0;
        unsigned __int128 bits = zero ? 0 : bfs_dtype_bits(t->dtype);
        for (uint32_t k = 0; k < t->ndim && !zero; k++) {
            /* factors >= 1: the product only grows, so it must stay below 2^67 */
            CHECK(t->shape[k] <= ~(unsigned __int128)0 / bits);
            bits *= t->shape[k];
        }
        CHECK(bits % 8 == 0 && bits / 8 == t->nbytes);
        CHECK(t->offset >= f->data_offset && t->offset <= size && t->nbytes <= size - t->offset);
        touch(base + t->offset, (size_t)t->nbytes);
        total += t->nbytes;
        CHECK(bfs_st_find(f, t->name) == t || memchr(t->name, 0, t->name_len) != NULL);
        for (uint32_t j = 0; j < i; j++)
            CHECK(t->name_len != f->tensors[j].name_len ||
                  memcmp(t->name, f->tensors[j].name, t->name_len) != 0);
    }
    CHECK(total == f->data_size); /* a tiling: no overlap, no hole */
    for (uint32_t i = 0; i < f->n_meta; i++) {
        const bfs_st_meta *m = &f->meta[i];
        CHECK(inside_pool(f, m->key, m->key_len) && inside_pool(f, m->value, m->value_len));
        for (uint32_t j = 0; j < i; j++)
            CHECK(m->key_len != f->meta[j].key_len ||
                  memcmp(m->key, f->meta[j].key, m->key_len) != 0);
    }
}

static void check_same(const bfs_st_file *a, const bfs_st_file *b)
{
    CHECK(a->n_tensors == b->n_tensors && a->n_meta == b->n_meta);
    CHECK(a->data_offset == b->data_offset && a->data_size == b->data_size);
    for (uint32_t i = 0; i < a->n_tensors; i++) {
        const bfs_st_tensor *x = &a->tensors[i], *y = &b->tensors[i];
        CHECK(x->name_len == y->name_len && !memcmp(x->name, y->name, x->name_len));
        CHECK(x->dtype == y->dtype && x->ndim == y->ndim && x->offset == y->offset &&
              x->nbytes == y->nbytes);
        CHECK(!memcmp(x->shape, y->shape, x->ndim * sizeof x->shape[0]));
    }
    for (uint32_t i = 0; i < a->n_meta; i++)
        CHECK(a->meta[i].value_len == b->meta[i].value_len &&
              !memcmp(a->meta[i].value, b->meta[i].value, a->meta[i].value_len));
}

/* A whole batch file from d's header and tensor data made here (labels, indices, image
 * bytes from a generator seeded by the description), parsed back with bfs_st_parse: the
 * same tensors at the layout's offsets, their bytes exactly those written. */
static void full_file_check(const bfs_st_batch_desc *d, const bfs_st_layout *l, const uint8_t *hdr)
{
    size_t size = (size_t)l->file_size; /* exactly: ASan sees a read past the end */
    size_t b = d->batch, ib = (size_t)l->images_bytes;
    uint8_t *file = malloc(size), *labels = malloc(8 * b), *indices = malloc(8 * b);
    uint8_t *images = malloc(ib ? ib : 1);
    CHECK(file && labels && indices && images);
    uint64_t x = (d->fingerprint ^ d->epoch * 0x9e3779b97f4a7c15ull ^ d->batch_index) | 1;
    for (size_t i = 0; i < b; i++) { /* I64 little-endian, as the engine writes them */
        uint64_t lv = i * 7919 % 1000, iv = d->batch_index * b + i;
        for (int k = 0; k < 8; k++) {
            labels[8 * i + (size_t)k] = (uint8_t)(lv >> 8 * k);
            indices[8 * i + (size_t)k] = (uint8_t)(iv >> 8 * k);
        }
    }
    for (size_t i = 0; i < ib; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
        images[i] = (uint8_t)(x >> 24);
    }
    memcpy(file, hdr, (size_t)l->header_size);
    memcpy(file + l->labels_off, labels, 8 * b);
    memcpy(file + l->indices_off, indices, 8 * b);
    memcpy(file + l->images_off, images, ib);
    CHECK(bfs_st_parse(file, size, &full) == 0);
    check_parsed(&full, file, size);
    check_same(&again, &full); /* the header alone parsed the same */
    const bfs_st_tensor *im = bfs_st_find(&full, "images"), *lb = bfs_st_find(&full, "labels"),
                        *ix = bfs_st_find(&full, "indices");
    CHECK(im && lb && ix && full.n_tensors == 3);
    CHECK(im->dtype == d->dtype && im->ndim == 4 && im->shape[0] == d->batch);
    if (d->nchw)
        CHECK(im->shape[1] == 3 && im->shape[2] == d->height && im->shape[3] == d->width);
    else
        CHECK(im->shape[1] == d->height && im->shape[2] == d->width && im->shape[3] == 3);
    CHECK(im->offset == l->images_off && im->nbytes == l->images_bytes);
    CHECK(im->nbytes == (uint64_t)d->batch * l->sample_bytes);
    CHECK(l->sample_bytes == (uint64_t)d->height * d->width * 3 * bfs_dtype_size(d->dtype));
    const bfs_st_tensor *i64[2] = {lb, ix};
    const uint64_t offs[2] = {l->labels_off, l->indices_off};
    for (int k = 0; k < 2; k++) {
        CHECK(i64[k]->dtype == BFS_DT_I64 && i64[k]->ndim == 1 && i64[k]->shape[0] == d->batch);
        CHECK(i64[k]->offset == offs[k] && i64[k]->nbytes == 8 * (uint64_t)d->batch);
    }
    /* labels, indices, images in that order with nothing between them, up to the end;
     * each tensor's bytes are those written for it */
    CHECK(lb->offset + lb->nbytes == ix->offset && ix->offset + ix->nbytes == im->offset &&
          im->offset + im->nbytes == size && full.data_offset == lb->offset);
    CHECK(memcmp(file + lb->offset, labels, 8 * b) == 0);
    CHECK(memcmp(file + ix->offset, indices, 8 * b) == 0);
    CHECK(memcmp(file + im->offset, images, ib) == 0);
    const char *fmt = bfs_st_meta_get(&full, "format"), *lay = bfs_st_meta_get(&full, "layout");
    CHECK(fmt && !strcmp(fmt, "batchfs/2") && lay && !strcmp(lay, d->nchw ? "nchw" : "nhwc"));
    bfs_st_batch_desc back;
    char err[128];
    CHECK(bfs_st_batch_from_file(&full, &back, err, sizeof err) == 0);
    CHECK(back.dtype == d->dtype && back.nchw == d->nchw && back.batch == d->batch &&
          back.height == d->height && back.width == d->width && back.epoch == d->epoch &&
          back.batch_index == d->batch_index && back.fingerprint == d->fingerprint);
    /* one byte short, or one more: not this file any more */
    CHECK(bfs_st_parse(file, size - 1, &full) == -EBADMSG);
    free(file);
    free(labels);
    free(indices);
    free(images);
}

/* Encode d, parse the header back, and check that everything survived. */
static void encode_and_check(const bfs_st_batch_desc *d)
{
    bfs_st_layout l;
    int rc = bfs_st_batch_layout(d, &l);
    if (rc) {
        CHECK(rc == -EINVAL || rc == -EOVERFLOW);
        CHECK(bfs_st_batch_size(d) == 0);
        return;
    }
    CHECK(bfs_st_batch_size(d) == l.file_size);
    uint64_t b = d->batch;
    CHECK(l.images_off % BFS_ST_IMAGES_ALIGN == 0 && l.labels_off % 8 == 0);
    CHECK(b % 8 || (l.labels_off % 64 == 0 && l.indices_off % 64 == 0));
    CHECK(l.header_size == l.labels_off && l.labels_bytes == 8 * b && l.indices_bytes == 8 * b);
    CHECK(l.indices_off == l.labels_off + 8 * b && l.images_off == l.indices_off + 8 * b);
    CHECK(l.file_size == l.images_off + l.images_bytes);
    size_t extras_json = 0;
    for (uint32_t i = 0; i < d->n_extra; i++) {
        const char *s[2] = {d->extra[i].key, d->extra[i].value};
        extras_json += 6;
        for (int k = 0; k < 2; k++)
            for (const unsigned char *p = (const unsigned char *)s[k]; *p; p++)
                extras_json += *p == '"' || *p == '\\' ? 2 : *p < 0x20 ? 6 : 1;
    }
    const uint64_t page = BFS_ST_IMAGES_ALIGN;
    if (extras_json <= BFS_ST_EXTRA_BUDGET) /* at most one page more than labels, indices */
        CHECK(l.images_off <= page + (16 * b + page - 1) / page * page && l.header_size < 2 * page);
    uint8_t *hdr = malloc(l.header_size);
    CHECK(hdr != NULL);
    CHECK(bfs_st_write_header(d, hdr, l.header_size - 1) == -ENOSPC);
    CHECK(bfs_st_write_header(d, hdr, l.header_size) == 0);
    CHECK(hdr[l.header_size - 1] == ' ');
    rc = bfs_st_parse_header(hdr, l.header_size, l.file_size, &again);
    CHECK(rc == 0);
    CHECK(again.data_offset == l.header_size && again.n_tensors == 3);
    CHECK(again.tensors[0].offset == l.images_off && again.tensors[0].nbytes == l.images_bytes);
    CHECK(again.tensors[1].offset == l.labels_off && again.tensors[2].offset == l.indices_off);
    CHECK(again.n_meta == 5 + d->n_extra);
    for (uint32_t i = 0; i < d->n_extra; i++) {
        CHECK(!strcmp(again.meta[5 + i].key, d->extra[i].key));
        CHECK(!strcmp(again.meta[5 + i].value, d->extra[i].value));
    }
    bfs_st_batch_desc back;
    char err[128];
    CHECK(bfs_st_batch_from_file(&again, &back, err, sizeof err) == 0);
    CHECK(back.dtype == d->dtype && back.nchw == d->nchw && back.batch == d->batch &&
          back.height == d->height && back.width == d->width && back.epoch == d->epoch &&
          back.batch_index == d->batch_index && back.fingerprint == d->fingerprint);
    if (l.file_size <= FULL_FILE_MAX)
        full_file_check(d, &l, hdr);
    free(hdr);
}

static uint64_t rd(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* Use 5: field tensors from bytes p[0, 24) beside d. */
static void fields_check(bfs_st_batch_desc d, const uint8_t *p)
{
    static const bfs_dtype fdts[8] = {BFS_DT_U8,  BFS_DT_U16, BFS_DT_I32, BFS_DT_U32,
                                      BFS_DT_F32, BFS_DT_I64, BFS_DT_F16, BFS_DT_U8};
    static const char *const names[6] = {"caption", "caption_lengths", "tok",
                                         "boxes",   "depth",           "emb"};
    bfs_st_field_tensor ft[6];
    memset(ft, 0, sizeof ft);
    uint32_t n = 1 + p[0] % 6;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *q = p + 4 * i;
        ft[i].name = names[i];
        ft[i].dtype = fdts[q[0] & 7];
        ft[i].image = (q[0] & 0x38) == 0x38;
        ft[i].ndim = q[1] % 4;
        for (uint32_t k = 0; k < ft[i].ndim; k++)
            ft[i].shape[k] = 1 + (uint64_t)(q[2 + k % 2] >> (k == 2 ? 2 : 0)) % 64;
    }
    d.fields = ft;
    d.n_fields = n;
    bfs_st_layout l;
    int rc = bfs_st_batch_layout(&d, &l);
    if (rc) {
        CHECK(rc == -EINVAL || rc == -EOVERFLOW);
        return;
    }
    uint64_t b = d.batch;
    CHECK(l.images_off % BFS_ST_IMAGES_ALIGN == 0 && l.labels_off % 8 == 0);
    CHECK(l.indices_off == l.labels_off + 8 * b && l.images_off == l.indices_off + 8 * b);
    uint8_t *hdr = malloc(l.header_size);
    CHECK(hdr != NULL);
    CHECK(bfs_st_write_header(&d, hdr, l.header_size) == 0);
    CHECK(bfs_st_parse_header(hdr, l.header_size, l.file_size, &again) == 0);
    CHECK(again.n_tensors == 3 + n && again.data_offset == l.header_size);
    uint64_t at = l.header_size, after = l.images_off + l.images_bytes;
    size_t last_es = 1;
    for (size_t es = 1; es <= 8; es *= 2)
        for (uint32_t i = 0; i < n; i++)
            if (!ft[i].image && bfs_dtype_size(ft[i].dtype) == es) {
                CHECK(l.field_off[i] == at && at % es == 0 && es >= last_es);
                at += l.field_bytes[i], last_es = es;
            }
    CHECK(at == l.labels_off);
    for (uint32_t i = 0; i < n; i++) {
        const bfs_st_tensor *t = bfs_st_find(&again, names[i]);
        CHECK(t && t == &again.tensors[3 + i]);
        CHECK(t->offset == l.field_off[i] && t->nbytes == l.field_bytes[i] && t->shape[0] == b);
        if (ft[i].image) {
            CHECK(t->dtype == d.dtype && t->nbytes == l.images_bytes && t->offset == after);
            after += t->nbytes;
            continue;
        }
        CHECK(t->dtype == ft[i].dtype && t->ndim == 1 + ft[i].ndim);
        for (uint32_t k = 0; k < ft[i].ndim; k++)
            CHECK(t->shape[1 + k] == ft[i].shape[k]);
    }
    CHECK(after == l.file_size);
    bfs_st_batch_desc back;
    char err[128];
    CHECK(bfs_st_batch_from_file(&again, &back, err, sizeof err) == 0 && back.n_fields == n);
    free(hdr);
}

/* Use 3: a descriptor and extras from the input bytes. */
static void fuzz_encoder(const uint8_t *data, size_t size)
{
    if (size < 32)
        return;
    static const bfs_dtype dts[4] = {BFS_DT_U8, BFS_DT_F16, BFS_DT_BF16, BFS_DT_F32};
    bfs_st_batch_desc d = {
        .dtype = dts[data[0] & 3],
        .nchw = (data[0] >> 2) & 1,
        .batch = (uint32_t)(data[0] & 0x80 ? rd(data + 1, 4) : 1 + rd(data + 1, 2) % 512),
        .height = (uint32_t)(data[0] & 0x40 ? rd(data + 3, 4) : 1 + data[5]),
        .width = (uint32_t)(data[0] & 0x20 ? rd(data + 5, 3) : 1 + data[7]),
        .epoch = rd(data + 8, 8),
        .batch_index = rd(data + 16, 8),
        .fingerprint = rd(data + 24, 8),
    };
    /* the rest: NUL-separated "key\0value\0" strings, at most 8 pairs */
    size_t rest = size - 32;
    char *strs = malloc(rest + 2);
    CHECK(strs != NULL);
    memcpy(strs, data + 32, rest);
    strs[rest] = strs[rest + 1] = 0;
    bfs_st_kv kv[BFS_ST_MAX_EXTRA];
    uint32_t n = 0;
    size_t pos = 0;
    while (n < BFS_ST_MAX_EXTRA && pos < rest) {
        kv[n].key = strs + pos;
        pos += strlen(strs + pos) + 1;
        kv[n].value = strs + pos;
        pos += strlen(strs + pos) + 1;
        n++;
    }
    d.extra = kv;
    d.n_extra = n;
    encode_and_check(&d);
    /* the same description shrunk, so the whole file is written and parsed back too */
    d.batch = 1 + d.batch % 8;
    d.height = 1 + d.height % 16;
    d.width = 1 + d.width % 16;
    encode_and_check(&d);
    fields_check(d, data + 8);
    free(strs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* 1. the whole input as a file */
    int rc = bfs_st_parse(data, size, &whole);
    if (rc)
        check_failure(rc, &whole);
    else
        check_parsed(&whole, data, size);

    /* 2. the header alone, then one byte short of it */
    uint64_t n;
    if (size >= 8 && bfs_st_header_len(data, &n) == 0 && n <= size - 8) {
        size_t k = (size_t)(8 + n);
        uint8_t *copy = malloc(k);
        CHECK(copy != NULL);
        memcpy(copy, data, k);
        int prc = bfs_st_parse_header(copy, k, size, &prefix);
        CHECK(prc == rc);
        if (!prc)
            check_same(&whole, &prefix);
        CHECK(bfs_st_parse_header(copy, k - 1, size, &prefix) == -ENOBUFS);
        free(copy);
    }

    /* 3a. batches recognised in the input are re-encoded */
    bfs_st_batch_desc d;
    char err[128];
    if (!rc && bfs_st_batch_from_file(&whole, &d, err, sizeof err) == 0) {
        d.n_fields = 0; /* counted, not recovered: the classic part */
        encode_and_check(&d);
    }
    /* 3b. the input as an encoder description */
    fuzz_encoder(data, size);
    return 0;
}
