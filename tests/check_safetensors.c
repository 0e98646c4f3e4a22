/*
 * check_safetensors.c — engine/safetensors: the batch encoder (size formula, layout:
 * labels and indices 8-byte aligned right before 4096-aligned images, exact JSON),
 * encode -> parse round trips for every image dtype, both layouts and batch sizes
 * 1..512, the refusal of the old (images first) layout, the parser on standard files
 * (every dtype, escapes, metadata, zero-size and sub-byte tensors, prefixes), and a long
 * list of malformed headers, each rejected with the documented error. Every input is
 * copied into a buffer of exactly its size, so an ASan build (make SANITIZER=address)
 * catches any read past the end.
 */
#include "engine/safetensors.h"
#include "tests/testutil.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const bfs_dtype image_dtypes[] = {BFS_DT_U8, BFS_DT_F16, BFS_DT_BF16, BFS_DT_F32};

/* A file of 8 + strlen(json) + data_len bytes, in a malloc'ed block of exactly that size
 * (data bytes are 0xA5). Free with free(). */
static uint8_t *mkfile(const char *json, size_t json_len, size_t data_len, size_t *len)
{
    *len = 8 + json_len + data_len;
    uint8_t *f = malloc(*len ? *len : 1);
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 8; i++)
        f[i] = (uint8_t)((uint64_t)json_len >> (8 * i));
    memcpy(f + 8, json, json_len);
    memset(f + 8 + json_len, 0xa5, data_len);
    return f;
}

/* Parse json + data_len bytes of data as a whole file; returns the parser's code. */
static int parse_json(const char *json, size_t data_len, bfs_st_file *out)
{
    size_t len;
    uint8_t *f = mkfile(json, strlen(json), data_len, &len);
    int rc = bfs_st_parse(f, len, out);
    if (rc)
        ck_assert_msg(out->err[0] != 0, "no message for rc %d: %s", rc, json);
    else
        ck_assert_msg(out->err[0] == 0, "message on success: %s", out->err);
    free(f);
    return rc;
}

static bfs_st_file *new_file(void)
{
    bfs_st_file *f = malloc(sizeof *f);
    ck_assert_ptr_nonnull(f);
    return f;
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* ---- dtypes ------------------------------------------------------------------------- */

START_TEST(dtype_table)
{
    ck_assert_uint_eq(bfs_dtype_size(BFS_DT_U8), 1);
    ck_assert_uint_eq(bfs_dtype_size(BFS_DT_F16), 2);
    ck_assert_uint_eq(bfs_dtype_size(BFS_DT_BF16), 2);
    ck_assert_uint_eq(bfs_dtype_size(BFS_DT_F32), 4);
    ck_assert_uint_eq(bfs_dtype_size(BFS_DT_I64), 8);
    ck_assert_uint_eq(bfs_dtype_size(BFS_DT_C64), 8);
    ck_assert_uint_eq(bfs_dtype_size(BFS_DT_F4), 0);
    ck_assert_uint_eq(bfs_dtype_bits(BFS_DT_F4), 4);
    ck_assert_uint_eq(bfs_dtype_bits(BFS_DT_F6_E3M2), 6);
    ck_assert_str_eq(bfs_dtype_name(BFS_DT_U8), "U8");
    ck_assert_str_eq(bfs_dtype_name(BFS_DT_F16), "F16");
    ck_assert_str_eq(bfs_dtype_name(BFS_DT_BF16), "BF16");
    ck_assert_str_eq(bfs_dtype_name(BFS_DT_F32), "F32");
    ck_assert_str_eq(bfs_dtype_name(BFS_DT_I64), "I64");
    ck_assert_str_eq(bfs_dtype_name(BFS_DT_F8_E4M3), "F8_E4M3");
    ck_assert_ptr_null(bfs_dtype_name(BFS_DT_COUNT));
    ck_assert_ptr_null(bfs_dtype_name((bfs_dtype)-1));
    ck_assert_uint_eq(bfs_dtype_size(BFS_DT_COUNT), 0);
    ck_assert_uint_eq(bfs_dtype_bits((bfs_dtype)1000), 0);
    for (int i = 0; i < BFS_DT_COUNT; i++) {
        const char *n = bfs_dtype_name((bfs_dtype)i);
        bfs_dtype back = BFS_DT_COUNT;
        ck_assert_ptr_nonnull(n);
        ck_assert_int_eq(bfs_dtype_from_name(n, strlen(n), &back), 0);
        ck_assert_int_eq(back, i);
        ck_assert_uint_gt(bfs_dtype_bits((bfs_dtype)i), 0);
    }
    bfs_dtype dt;
    ck_assert_int_eq(bfs_dtype_from_name("u8", 2, &dt), -EINVAL);
    ck_assert_int_eq(bfs_dtype_from_name("U8 ", 3, &dt), -EINVAL);
    ck_assert_int_eq(bfs_dtype_from_name("U", 1, &dt), -EINVAL);
    ck_assert_int_eq(bfs_dtype_from_name("F8", 2, &dt), -EINVAL);
    ck_assert_int_eq(bfs_dtype_from_name("", 0, &dt), -EINVAL);
    ck_assert_int_eq(bfs_dtype_from_name(NULL, 0, &dt), -EINVAL);
}
END_TEST

/* ---- encoder ------------------------------------------------------------------------ */

/* The widest possible JSON of a batch header without extras: the documented 491 bytes
 * (safetensors.h, BFS_ST_EXTRA_BUDGET). */
#define WIDEST_JSON 491u

/* Where the images of a batch of b samples with extra JSON bytes start: the smallest
 * multiple of 4096 that holds 8 bytes, the widest JSON and 16 * b bytes of labels and
 * indices (safetensors.h), computed here independently of the encoder. */
static uint64_t want_images_off(uint64_t b, uint64_t extra_json)
{
    return (8 + WIDEST_JSON + extra_json + 16 * b + 4095) / 4096 * 4096;
}

static bfs_st_batch_desc desc(bfs_dtype dt, int nchw, uint32_t b, uint32_t h, uint32_t w)
{
    bfs_st_batch_desc d = {.dtype = dt,
                           .nchw = nchw,
                           .batch = b,
                           .height = h,
                           .width = w,
                           .epoch = 3,
                           .batch_index = 17,
                           .fingerprint = 0x0123456789abcdefull};
    return d;
}

START_TEST(golden_header)
{
    /* B = 2: labels at 4096 - 32, indices at 4096 - 16, images at 4096 */
    bfs_st_batch_desc d = desc(BFS_DT_U8, 0, 2, 3, 5);
    uint8_t hdr[4096];
    memset(hdr, 0, sizeof hdr);
    ck_assert_int_eq(bfs_st_write_header(&d, hdr, sizeof hdr), 0);
    const char *want =
        "{\"__metadata__\":{\"format\":\"batchfs/2\",\"layout\":\"nhwc\",\"epoch\":\"3\","
        "\"batch\":\"17\",\"fingerprint\":\"0123456789abcdef\"},"
        "\"images\":{\"dtype\":\"U8\",\"shape\":[2,3,5,3],\"data_offsets\":[32,122]},"
        "\"labels\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]},"
        "\"indices\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[16,32]}}";
    ck_assert_uint_eq(le64(hdr), 4096 - 32 - 8);
    ck_assert_mem_eq(hdr + 8, want, strlen(want));
    for (size_t i = 8 + strlen(want); i < 4096 - 32; i++)
        ck_assert_uint_eq(hdr[i], ' ');
    for (size_t i = 4096 - 32; i < sizeof hdr; i++) /* the header ends at labels_off */
        ck_assert_uint_eq(hdr[i], 0);
    ck_assert_uint_eq(bfs_st_batch_size(&d), 4096 + 90);

    d = desc(BFS_DT_BF16, 1, 4, 7, 9);
    d.epoch = 0, d.batch_index = 0, d.fingerprint = 0xfedcba9876543210ull;
    ck_assert_int_eq(bfs_st_write_header(&d, hdr, sizeof hdr), 0);
    want = "{\"__metadata__\":{\"format\":\"batchfs/2\",\"layout\":\"nchw\",\"epoch\":\"0\","
           "\"batch\":\"0\",\"fingerprint\":\"fedcba9876543210\"},"
           "\"images\":{\"dtype\":\"BF16\",\"shape\":[4,3,7,9],\"data_offsets\":[64,1576]},"
           "\"labels\":{\"dtype\":\"I64\",\"shape\":[4],\"data_offsets\":[0,32]},"
           "\"indices\":{\"dtype\":\"I64\",\"shape\":[4],\"data_offsets\":[32,64]}}";
    ck_assert_uint_eq(le64(hdr), 4096 - 64 - 8);
    ck_assert_mem_eq(hdr + 8, want, strlen(want));
    ck_assert_uint_eq(hdr[8 + strlen(want)], ' ');
    ck_assert_uint_eq(hdr[4096 - 64 - 1], ' ');
    ck_assert_uint_eq(bfs_st_batch_size(&d), 4096 + 1512);

    /* B = 256 (the default): 4096 bytes of labels and indices push the images to 8192 */
    d = desc(BFS_DT_U8, 0, 256, 1, 1);
    bfs_st_layout l;
    ck_assert_int_eq(bfs_st_batch_layout(&d, &l), 0);
    ck_assert_uint_eq(l.header_size, 4096);
    ck_assert_uint_eq(l.labels_off, 4096);
    ck_assert_uint_eq(l.indices_off, 6144);
    ck_assert_uint_eq(l.images_off, 8192);
    ck_assert_uint_eq(l.file_size, 8192 + 768);
}
END_TEST

/* Check one descriptor end to end: size formula, layout, header bytes, prefix parse and
 * (when full) a parse of the whole file with recovery of the descriptor. */
static void round_trip_one(const bfs_st_batch_desc *d, int full, bfs_st_file *pf)
{
    uint64_t es = bfs_dtype_size(d->dtype), b = d->batch, h = d->height, w = d->width;
    uint64_t images = b * h * w * 3 * es;
    uint64_t images_off = want_images_off(b, 0), data_off = images_off - 16 * b;
    uint64_t want_size = images_off + images;
    bfs_st_layout l;
    ck_assert_int_eq(bfs_st_batch_layout(d, &l), 0);
    ck_assert_uint_eq(bfs_st_batch_size(d), want_size);
    ck_assert_uint_eq(l.file_size, want_size);
    ck_assert_uint_eq(l.header_size, data_off);
    ck_assert_uint_eq(l.labels_off, data_off);
    ck_assert_uint_eq(l.labels_bytes, 8 * b);
    ck_assert_uint_eq(l.indices_off, data_off + 8 * b);
    ck_assert_uint_eq(l.indices_bytes, 8 * b);
    ck_assert_uint_eq(l.images_off, images_off);
    ck_assert_uint_eq(l.images_bytes, images);
    ck_assert_uint_eq(l.sample_bytes, h * w * 3 * es);
    ck_assert_uint_eq(l.images_off % 4096, 0);
    ck_assert_uint_eq(l.labels_off % 8, 0);
    ck_assert_uint_eq(l.indices_off % 8, 0);

    uint8_t *file = malloc(full ? want_size : data_off);
    ck_assert_ptr_nonnull(file);
    ck_assert_int_eq(bfs_st_write_header(d, file, data_off - 1), -ENOSPC);
    ck_assert_int_eq(bfs_st_write_header(d, file, data_off), 0);
    ck_assert_uint_eq(le64(file), data_off - 8);
    ck_assert_uint_eq(file[data_off - 1], ' ');
    if (full)
        memset(file + data_off, 0x5a, want_size - data_off);

    int rc = full ? bfs_st_parse(file, want_size, pf)
                  : bfs_st_parse_header(file, data_off, want_size, pf);
    ck_assert_msg(rc == 0, "parse: %d %s", rc, pf->err);
    ck_assert_uint_eq(pf->header_len, data_off - 8);
    ck_assert_uint_eq(pf->data_offset, data_off);
    ck_assert_uint_eq(pf->file_size, want_size);
    ck_assert_uint_eq(pf->data_size, want_size - data_off);
    ck_assert_uint_eq(pf->n_tensors, 3);
    const bfs_st_tensor *im = bfs_st_find(pf, "images"), *lb = bfs_st_find(pf, "labels"),
                        *ix = bfs_st_find(pf, "indices");
    ck_assert_ptr_eq(im, &pf->tensors[0]);
    ck_assert_ptr_eq(lb, &pf->tensors[1]);
    ck_assert_ptr_eq(ix, &pf->tensors[2]);
    ck_assert_int_eq(im->dtype, d->dtype);
    ck_assert_uint_eq(im->ndim, 4);
    ck_assert_uint_eq(im->shape[0], b);
    if (d->nchw) {
        ck_assert_uint_eq(im->shape[1], 3);
        ck_assert_uint_eq(im->shape[2], h);
        ck_assert_uint_eq(im->shape[3], w);
    } else {
        ck_assert_uint_eq(im->shape[1], h);
        ck_assert_uint_eq(im->shape[2], w);
        ck_assert_uint_eq(im->shape[3], 3);
    }
    ck_assert_uint_eq(im->offset, l.images_off);
    ck_assert_uint_eq(im->nbytes, l.images_bytes);
    ck_assert_uint_eq(lb->offset, l.labels_off);
    ck_assert_uint_eq(ix->offset, l.indices_off);
    ck_assert_int_eq(lb->dtype, BFS_DT_I64);
    ck_assert_uint_eq(lb->ndim, 1);
    ck_assert_uint_eq(ix->shape[0], b);
    ck_assert_str_eq(bfs_st_meta_get(pf, "format"), "batchfs/2");
    ck_assert_str_eq(bfs_st_meta_get(pf, "layout"), d->nchw ? "nchw" : "nhwc");

    bfs_st_batch_desc back;
    char err[128];
    ck_assert_int_eq(bfs_st_batch_from_file(pf, &back, err, sizeof err), 0);
    ck_assert_int_eq(back.dtype, d->dtype);
    ck_assert_int_eq(back.nchw, d->nchw);
    ck_assert_uint_eq(back.batch, d->batch);
    ck_assert_uint_eq(back.height, d->height);
    ck_assert_uint_eq(back.width, d->width);
    ck_assert_uint_eq(back.epoch, d->epoch);
    ck_assert_uint_eq(back.batch_index, d->batch_index);
    ck_assert_uint_eq(back.fingerprint, d->fingerprint);
    free(file);
}

START_TEST(round_trip_all_batch_sizes)
{
    bfs_st_file *pf = new_file();
    for (size_t t = 0; t < 4; t++)
        for (int nchw = 0; nchw <= 1; nchw++)
            for (uint32_t b = 1; b <= 512; b++) {
                bfs_st_batch_desc d = desc(image_dtypes[t], nchw, b, 3 + b % 5, 1 + b % 7);
                d.epoch = b * 1000003ull;
                d.batch_index = b;
                d.fingerprint = b * 0x9e3779b97f4a7c15ull;
                round_trip_one(&d, 0, pf);
            }
    free(pf);
}
END_TEST

START_TEST(round_trip_full_files)
{
    static const uint32_t sizes[][3] = {{1, 1, 1},     {1, 3, 3},  {2, 7, 5},    {3, 31, 17},
                                        {7, 224, 224}, {8, 13, 1}, {64, 33, 29}, {512, 5, 3}};
    bfs_st_file *pf = new_file();
    for (size_t t = 0; t < 4; t++)
        for (int nchw = 0; nchw <= 1; nchw++)
            for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
                bfs_st_batch_desc d =
                    desc(image_dtypes[t], nchw, sizes[i][0], sizes[i][1], sizes[i][2]);
                round_trip_one(&d, 1, pf);
            }
    free(pf);
}
END_TEST

/* Every tensor naturally aligned (batchfs/2): for B = 1..17, 255, 256 and 4096, several
 * H x W, every image dtype and both layouts, labels and indices start 8-byte aligned (64
 * when B % 8 == 0) and the images on a 4096-byte boundary, in the order labels, indices,
 * images; the whole file parses, its tensors tile the data buffer, and it is a batch.
 * The batchfs/1 layout (images first, at 4096) fails this for any odd-sized images. */
/* Token batches (docs/sequences.md): the tokens start on a page, the file parses, the
 * tensors are where the layout says, and the size does not depend on the numbers. */
START_TEST(token_batches)
{
    for (uint32_t rows = 1; rows <= 300; rows += 37) {
        bfs_st_tok_desc d = {.pack = "bucket", .epoch = 7, .batch_index = 12345, .fingerprint = 1};
        d.t[d.n++] = (bfs_st_tok_tensor){"lengths", BFS_DT_I64, 1, {rows, 0}};
        d.t[d.n++] = (bfs_st_tok_tensor){"indices", BFS_DT_I64, 1, {rows, 0}};
        d.aligned = d.n;
        d.t[d.n++] = (bfs_st_tok_tensor){"tokens", BFS_DT_I32, 2, {rows, 129}};
        d.t[d.n++] = (bfs_st_tok_tensor){"mask", BFS_DT_U8, 2, {rows, 129}};
        bfs_st_tok_place l;
        ck_assert_int_eq(bfs_st_tok_layout(&d, &l), 0);
        ck_assert_uint_eq(l.off[2] % BFS_ST_IMAGES_ALIGN, 0);
        ck_assert_uint_eq(l.off[0] % 8, 0);
        ck_assert_uint_eq(l.file_size, l.off[3] + (uint64_t)rows * 129);
        uint8_t *f = calloc(1, l.file_size);
        ck_assert_int_eq(bfs_st_tok_write_header(&d, f, l.header_size - 1), -ENOSPC);
        ck_assert_int_eq(bfs_st_tok_write_header(&d, f, l.header_size), 0);
        bfs_st_file *pf = malloc(sizeof *pf);
        ck_assert_msg(bfs_st_parse(f, l.file_size, pf) == 0, "%s", pf->err);
        ck_assert_uint_eq(pf->n_tensors, 4);
        const char *names[] = {"lengths", "indices", "tokens", "mask"};
        for (int i = 0; i < 4; i++) {
            const bfs_st_tensor *t = bfs_st_find(pf, names[i]);
            ck_assert_ptr_nonnull(t);
            ck_assert_uint_eq(t->offset, l.off[i]);
            ck_assert_uint_eq(t->nbytes, l.bytes[i]);
        }
        ck_assert_str_eq(bfs_st_meta_get(pf, "kind"), "tokens");
        ck_assert_str_eq(bfs_st_meta_get(pf, "pack"), "bucket");
        ck_assert_str_eq(bfs_st_meta_get(pf, "batch"), "12345");
        /* the widest numbers give the same layout */
        bfs_st_tok_place l2;
        d.epoch = d.batch_index = d.fingerprint = UINT64_MAX;
        ck_assert_int_eq(bfs_st_tok_layout(&d, &l2), 0);
        ck_assert_mem_eq(&l, &l2, sizeof l);
        free(pf);
        free(f);
    }
    bfs_st_tok_desc bad = {.pack = "concat", .n = 1};
    bad.t[0] = (bfs_st_tok_tensor){"to\"kens", BFS_DT_I32, 2, {1, 1}};
    ck_assert_int_eq(bfs_st_tok_layout(&bad, NULL), -EINVAL); /* a quote in a name */
    bad.t[0].name = "tokens";
    bad.t[0].ndim = 3;
    ck_assert_int_eq(bfs_st_tok_layout(&bad, NULL), -EINVAL);
    bad.t[0].ndim = 2;
    bad.t[0].shape[0] = bad.t[0].shape[1] = UINT64_MAX / 2;
    ck_assert_int_eq(bfs_st_tok_layout(&bad, NULL), -EOVERFLOW);
    bad.n = 0;
    ck_assert_int_eq(bfs_st_tok_layout(&bad, NULL), -EINVAL);
}
END_TEST

START_TEST(aligned_layouts)
{
    static const uint32_t hws[][2] = {{1, 1}, {15, 15}, {7, 31}, {224, 224}};
    uint32_t bs[20];
    size_t n_bs = 0;
    for (uint32_t b = 1; b <= 17; b++)
        bs[n_bs++] = b;
    bs[n_bs++] = 255;
    bs[n_bs++] = 256;
    bs[n_bs++] = 4096;
    bfs_st_file *pf = new_file();
    for (size_t t = 0; t < 4; t++)
        for (int nchw = 0; nchw <= 1; nchw++)
            for (size_t hi = 0; hi < sizeof hws / sizeof *hws; hi++)
                for (size_t bi = 0; bi < n_bs; bi++) {
                    uint32_t b = bs[bi], h = hws[hi][0], w = hws[hi][1];
                    if (h == 224 && b > 17)
                        continue; /* up to 2.4 GB: the small shapes cover these B */
                    bfs_st_batch_desc d = desc(image_dtypes[t], nchw, b, h, w);
                    bfs_st_layout l;
                    ck_assert_int_eq(bfs_st_batch_layout(&d, &l), 0);
                    ck_assert_msg(l.labels_off % 8 == 0 && l.indices_off % 8 == 0,
                                  "B %u: labels at %llu, indices at %llu", b,
                                  (unsigned long long)l.labels_off,
                                  (unsigned long long)l.indices_off);
                    ck_assert_uint_eq(l.images_off % 4096, 0);
                    if (b % 8 == 0) {
                        ck_assert_uint_eq(l.labels_off % 64, 0);
                        ck_assert_uint_eq(l.indices_off % 64, 0);
                    }
                    ck_assert_uint_eq(l.header_size, l.labels_off);
                    ck_assert_uint_eq(l.indices_off, l.labels_off + 8ull * b);
                    ck_assert_uint_eq(l.images_off, l.indices_off + 8ull * b);
                    ck_assert_uint_eq(l.file_size, l.images_off + l.images_bytes);

                    uint8_t *file = malloc(l.file_size);
                    ck_assert_ptr_nonnull(file);
                    ck_assert_int_eq(bfs_st_write_header(&d, file, l.file_size), 0);
                    memset(file + l.header_size, 0x5a, l.file_size - l.header_size);
                    int rc = bfs_st_parse(file, l.file_size, pf);
                    ck_assert_msg(rc == 0, "B %u: %d %s", b, rc, pf->err);
                    /* sorted by offset: labels, indices, images, end to end */
                    const bfs_st_tensor *im = bfs_st_find(pf, "images"),
                                        *lb = bfs_st_find(pf, "labels"),
                                        *ix = bfs_st_find(pf, "indices");
                    ck_assert_uint_eq(lb->offset, pf->data_offset);
                    ck_assert_uint_eq(lb->offset, l.labels_off);
                    ck_assert_uint_eq(ix->offset, lb->offset + lb->nbytes);
                    ck_assert_uint_eq(ix->offset, l.indices_off);
                    ck_assert_uint_eq(im->offset, ix->offset + ix->nbytes);
                    ck_assert_uint_eq(im->offset, l.images_off);
                    ck_assert_uint_eq(im->offset + im->nbytes, l.file_size);
                    ck_assert_uint_eq(lb->nbytes + ix->nbytes + im->nbytes, pf->data_size);
                    bfs_st_batch_desc back;
                    char err[128];
                    rc = bfs_st_batch_from_file(pf, &back, err, sizeof err);
                    ck_assert_msg(rc == 0, "B %u: %s", b, err);
                    ck_assert_uint_eq(back.batch, b);
                    ck_assert_uint_eq(back.height, h);
                    ck_assert_uint_eq(back.width, w);
                    ck_assert_int_eq(back.dtype, d.dtype);
                    ck_assert_int_eq(back.nchw, nchw);
                    free(file);
                }
    free(pf);
}
END_TEST

/* A file in the batchfs/1 layout (images at 4096, then labels at the odd offset 6121,
 * indices), byte for byte as the old encoder wrote it for U8 [3,15,15,3], is a valid
 * safetensors file but no longer a batch: refused for its format, and, relabelled
 * batchfs/2, for its order. */
START_TEST(old_layout_rejected)
{
    static const char old[] =
        "{\"__metadata__\":{\"format\":\"batchfs/1\",\"layout\":\"nhwc\",\"epoch\":\"3\","
        "\"batch\":\"17\",\"fingerprint\":\"0123456789abcdef\"},"
        "\"images\":{\"dtype\":\"U8\",\"shape\":[3,15,15,3],\"data_offsets\":[0,2025]},"
        "\"labels\":{\"dtype\":\"I64\",\"shape\":[3],\"data_offsets\":[2025,2049]},"
        "\"indices\":{\"dtype\":\"I64\",\"shape\":[3],\"data_offsets\":[2049,2073]}}";
    char json[4088];
    memset(json, ' ', sizeof json);
    memcpy(json, old, strlen(old));
    size_t len;
    uint8_t *file = mkfile(json, sizeof json, 2073, &len);
    bfs_st_file *pf = new_file();
    ck_assert_int_eq(bfs_st_parse(file, len, pf), 0);
    ck_assert_uint_eq(bfs_st_find(pf, "labels")->offset, 6121);
    bfs_st_batch_desc d;
    char err[128] = "";
    ck_assert_int_eq(bfs_st_batch_from_file(pf, &d, err, sizeof err), -EBADMSG);
    ck_assert_str_eq(err, "metadata format is not \"batchfs/2\"");

    memcpy(strstr((char *)file + 8, "batchfs/1"), "batchfs/2", 9);
    ck_assert_int_eq(bfs_st_parse(file, len, pf), 0);
    ck_assert_int_eq(bfs_st_batch_from_file(pf, &d, err, sizeof err), -EBADMSG);
    ck_assert_str_eq(err, "tensor data is not in the batchfs/2 order labels, indices, images");

    /* today's encoder, same description: labels 8-byte aligned, images at 4096 */
    d = desc(BFS_DT_U8, 0, 3, 15, 15);
    bfs_st_layout l;
    ck_assert_int_eq(bfs_st_batch_layout(&d, &l), 0);
    ck_assert_uint_eq(l.labels_off, 4096 - 48);
    ck_assert_uint_eq(l.indices_off, 4096 - 24);
    ck_assert_uint_eq(l.images_off, 4096);
    ck_assert_uint_eq(l.file_size, 4096 + 2025); /* labels, indices in the old padding */
    free(pf);
    free(file);
}
END_TEST

START_TEST(size_independent_of_numbers)
{
    bfs_st_batch_desc d = desc(BFS_DT_F32, 0, 256, 224, 224);
    uint64_t s0 = bfs_st_batch_size(&d);
    ck_assert_uint_eq(s0, 8192ull + 256ull * 224 * 224 * 3 * 4); /* header 4096, labels 4096 */
    uint64_t vals[] = {0, 1, 9, 10, 99999, UINT32_MAX, UINT64_MAX / 3, UINT64_MAX};
    bfs_st_file *pf = new_file();
    uint8_t hdr[4096];
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
        d.epoch = vals[i];
        d.batch_index = vals[(i + 3) % 8];
        d.fingerprint = vals[(i + 5) % 8];
        ck_assert_uint_eq(bfs_st_batch_size(&d), s0);
        ck_assert_int_eq(bfs_st_write_header(&d, hdr, sizeof hdr), 0);
        ck_assert_int_eq(bfs_st_parse_header(hdr, sizeof hdr, s0, pf), 0);
        bfs_st_batch_desc back;
        ck_assert_int_eq(bfs_st_batch_from_file(pf, &back, NULL, 0), 0);
        ck_assert_uint_eq(back.epoch, d.epoch);
        ck_assert_uint_eq(back.batch_index, d.batch_index);
        ck_assert_uint_eq(back.fingerprint, d.fingerprint);
    }
    /* the widest shape, with the widest numbers, still fits its header: 16 * B is a
     * multiple of 4096 here, so the header is 4096 bytes */
    d = desc(BFS_DT_U8, 1, 4000000000u, 1000000000u, 1);
    d.epoch = d.batch_index = d.fingerprint = UINT64_MAX;
    bfs_st_layout l;
    ck_assert_int_eq(bfs_st_batch_layout(&d, &l), 0);
    ck_assert_uint_eq(l.header_size, 4096);
    ck_assert_uint_eq(l.images_off, 4096 + 16ull * 4000000000u);
    ck_assert_int_eq(bfs_st_write_header(&d, hdr, sizeof hdr), 0);
    int rc = bfs_st_parse_header(hdr, sizeof hdr, l.file_size, pf);
    ck_assert_msg(rc == 0, "%d: %s", rc, pf->err);
    ck_assert_uint_eq(pf->tensors[0].shape[0], 4000000000u);
    free(pf);
}
END_TEST

START_TEST(encoder_rejects)
{
    bfs_st_batch_desc d = desc(BFS_DT_U8, 0, 1, 1, 1);
    uint8_t hdr[4096];
    bfs_st_layout l;
    ck_assert_int_eq(bfs_st_write_header(&d, hdr, 4096 - 16 - 1), -ENOSPC); /* B = 1 */
    ck_assert_int_eq(bfs_st_write_header(&d, NULL, 4096), -ENOSPC);
    ck_assert_int_eq(bfs_st_batch_layout(NULL, &l), -EINVAL);
    ck_assert_uint_eq(bfs_st_batch_size(NULL), 0);
    bfs_st_batch_desc bad[] = {desc(BFS_DT_I64, 0, 1, 1, 1),   desc(BFS_DT_BOOL, 0, 1, 1, 1),
                               desc(BFS_DT_COUNT, 0, 1, 1, 1), desc(BFS_DT_U8, 2, 1, 1, 1),
                               desc(BFS_DT_U8, -1, 1, 1, 1),   desc(BFS_DT_U8, 0, 0, 1, 1),
                               desc(BFS_DT_U8, 0, 1, 0, 1),    desc(BFS_DT_U8, 0, 1, 1, 0)};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert_int_eq(bfs_st_batch_layout(&bad[i], &l), -EINVAL);
        ck_assert_uint_eq(bfs_st_batch_size(&bad[i]), 0);
        ck_assert_int_eq(bfs_st_write_header(&bad[i], hdr, sizeof hdr), -EINVAL);
    }
    d = desc(BFS_DT_F32, 0, UINT32_MAX, UINT32_MAX, UINT32_MAX);
    ck_assert_int_eq(bfs_st_batch_layout(&d, &l), -EOVERFLOW);
    ck_assert_uint_eq(bfs_st_batch_size(&d), 0);
    d = desc(BFS_DT_F32, 0, UINT32_MAX, UINT32_MAX, 400000000u);
    ck_assert_int_eq(bfs_st_batch_layout(&d, &l), -EOVERFLOW);
    /* images of exactly 2^64 - 1 bytes (3 * 5 * 17 * 257 * 641 * 65537 * 6700417): only
     * the file size overflows */
    d = desc(BFS_DT_U8, 0, 5u * 17 * 257 * 641, 65537, 6700417);
    ck_assert_int_eq(bfs_st_batch_layout(&d, &l), -EOVERFLOW);
    ck_assert_uint_eq(bfs_st_batch_size(&d), 0);

    /* extras */
    d = desc(BFS_DT_U8, 0, 1, 1, 1);
    static char longv[BFS_ST_MAX_EXTRA_LEN + 2];
    memset(longv, 'v', BFS_ST_MAX_EXTRA_LEN + 1);
    bfs_st_kv bad_kv[][2] = {
        {{"format", "x"}, {"a", "b"}},
        {{"a", "b"}, {"epoch", "x"}},
        {{"layout", "x"}, {"a", "b"}},
        {{"batch", "x"}, {"a", "b"}},
        {{"fingerprint", "x"}, {"a", "b"}},
        {{"a", "b"}, {"a", "c"}},
        {{"", "x"}, {"a", "b"}},
        {{"a", NULL}, {"b", "c"}},
        {{NULL, "x"}, {"b", "c"}},
        {{"a", "\xff"}, {"b", "c"}},
        {{"a\xc0\x80", "x"}, {"b", "c"}},
        {{"a", "\xed\xa0\x80"}, {"b", "c"}},
        {{"a", longv}, {"b", "c"}},
    };
    for (size_t i = 0; i < sizeof bad_kv / sizeof *bad_kv; i++) {
        d.extra = bad_kv[i];
        d.n_extra = 2;
        ck_assert_msg(bfs_st_batch_layout(&d, &l) == -EINVAL, "extras case %zu", i);
    }
    d.extra = NULL;
    d.n_extra = 1;
    ck_assert_int_eq(bfs_st_batch_layout(&d, &l), -EINVAL);
    bfs_st_kv many[BFS_ST_MAX_EXTRA + 1];
    char keys[BFS_ST_MAX_EXTRA + 1][8];
    for (unsigned i = 0; i <= BFS_ST_MAX_EXTRA; i++) {
        snprintf(keys[i], sizeof keys[i], "k%u", i);
        many[i].key = keys[i];
        many[i].value = "v";
    }
    d.extra = many;
    d.n_extra = BFS_ST_MAX_EXTRA;
    ck_assert_int_eq(bfs_st_batch_layout(&d, &l), 0);
    d.n_extra = BFS_ST_MAX_EXTRA + 1;
    ck_assert_int_eq(bfs_st_batch_layout(&d, &l), -EINVAL);
}
END_TEST

START_TEST(extras_round_trip)
{
    bfs_st_kv kv[] = {
        {"seed", "42"},
        {"quote\"back\\slash", "tab\tnl\ncr\rbell\x07 del\x7f"},
        {"unicode", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"},
        {"empty", ""},
        {"slash/key", "</script>"},
    };
    bfs_st_batch_desc d = desc(BFS_DT_F16, 1, 3, 5, 7);
    d.extra = kv;
    d.n_extra = sizeof kv / sizeof *kv;
    bfs_st_layout l;
    ck_assert_int_eq(bfs_st_batch_layout(&d, &l), 0);
    ck_assert_uint_eq(l.images_off, 4096);
    ck_assert_uint_eq(l.header_size, 4096 - 48);
    uint8_t *file = calloc(1, l.file_size);
    ck_assert_ptr_nonnull(file);
    ck_assert_int_eq(bfs_st_write_header(&d, file, l.file_size), 0);
    bfs_st_file *pf = new_file();
    ck_assert_int_eq(bfs_st_parse(file, l.file_size, pf), 0);
    ck_assert_uint_eq(pf->n_meta, 5 + d.n_extra);
    for (size_t i = 0; i < d.n_extra; i++) {
        const bfs_st_meta *m = &pf->meta[5 + i];
        ck_assert_str_eq(m->key, kv[i].key);
        ck_assert_str_eq(m->value, kv[i].value);
        ck_assert_uint_eq(m->value_len, strlen(kv[i].value));
        ck_assert_str_eq(bfs_st_meta_get(pf, kv[i].key), kv[i].value);
    }
    ck_assert_ptr_null(bfs_st_meta_get(pf, "nope"));
    ck_assert_ptr_null(bfs_st_find(pf, "nope"));
    /* the raw JSON escaped the control characters */
    static const char esc1[] = "tab\\u0009nl\\u000acr\\u000dbell\\u0007 del\x7f";
    static const char esc2[] = "\"quote\\\"back\\\\slash\"";
    ck_assert_ptr_nonnull(memmem(file, 4096, esc1, sizeof esc1 - 1));
    ck_assert_ptr_nonnull(memmem(file, 4096, esc2, sizeof esc2 - 1));
    bfs_st_batch_desc back;
    ck_assert_int_eq(bfs_st_batch_from_file(pf, &back, NULL, 0), 0);
    ck_assert_uint_eq(back.n_extra, 0);
    free(pf);
    free(file);
}
END_TEST

/* Field tensors (multi-field datasets): for batch sizes 1..40 and odd shapes, every
 * tensor parses back with its shape and dtype, starts at a multiple of its element size,
 * the non-image ones lie ahead of labels smallest element first, images stay on a page,
 * a second image follows the first, and bfs_st_batch_from_file counts the extras. A
 * classic batch's layout does not change. Bad field tensors are refused. */
START_TEST(field_tensors)
{
    bfs_st_field_tensor ft[] = {
        {.name = "caption", .dtype = BFS_DT_U8, .ndim = 1, .shape = {13}},
        {.name = "caption_lengths", .dtype = BFS_DT_I32, .ndim = 0},
        {.name = "depth", .image = 1},
        {.name = "ids", .dtype = BFS_DT_I64, .ndim = 1, .shape = {3}},
        {.name = "tok", .dtype = BFS_DT_U16, .ndim = 1, .shape = {5}},
        {.name = "boxes", .dtype = BFS_DT_F32, .ndim = 2, .shape = {7, 4}},
        {.name = "json", .dtype = BFS_DT_U8, .ndim = 1, .shape = {1}},
    };
    uint32_t nf = sizeof ft / sizeof *ft;
    for (uint32_t b = 1; b <= 40; b++) {
        bfs_st_batch_desc d = desc(BFS_DT_F16, (int)(b & 1), b, 5, 7);
        bfs_st_layout plain, l;
        ck_assert_int_eq(bfs_st_batch_layout(&d, &plain), 0);
        d.fields = ft;
        d.n_fields = nf;
        ck_assert_int_eq(bfs_st_batch_layout(&d, &l), 0);
        ck_assert_uint_eq(l.images_off % BFS_ST_IMAGES_ALIGN, 0);
        ck_assert_uint_eq(l.labels_off % 8, 0);
        ck_assert_uint_eq(l.labels_off + 16ull * b, l.images_off);
        uint8_t *file = calloc(1, l.file_size);
        ck_assert_ptr_nonnull(file);
        ck_assert_int_eq(bfs_st_write_header(&d, file, l.file_size), 0);
        bfs_st_file *pf = new_file();
        ck_assert_int_eq(bfs_st_parse(file, l.file_size, pf), 0);
        ck_assert_uint_eq(pf->n_tensors, 3 + nf);
        uint64_t prev_es = 1;
        for (uint32_t i = 0; i < nf; i++) {
            const bfs_st_tensor *t = bfs_st_find(pf, ft[i].name);
            ck_assert_ptr_nonnull(t);
            ck_assert_ptr_eq(t, &pf->tensors[3 + i]); /* descriptor order in the JSON */
            ck_assert_uint_eq(t->offset, l.field_off[i]);
            ck_assert_uint_eq(t->nbytes, l.field_bytes[i]);
            ck_assert_uint_eq(t->shape[0], b);
            if (ft[i].image) {
                ck_assert_int_eq(t->dtype, BFS_DT_F16);
                ck_assert_uint_eq(t->offset, l.images_off + l.images_bytes);
                continue;
            }
            ck_assert_int_eq(t->dtype, ft[i].dtype);
            ck_assert_uint_eq(t->ndim, 1 + ft[i].ndim);
            for (uint32_t k = 0; k < ft[i].ndim; k++)
                ck_assert_uint_eq(t->shape[1 + k], ft[i].shape[k]);
            ck_assert_uint_eq(t->offset % bfs_dtype_size(t->dtype), 0);
            ck_assert_uint_lt(t->offset, l.labels_off);
            (void)prev_es;
        }
        /* smallest element first: caption, json (U8), tok (U16), lengths, boxes, ids */
        ck_assert_uint_eq(l.field_off[0], l.header_size);
        ck_assert_uint_eq(l.field_off[6], l.field_off[0] + l.field_bytes[0]);
        ck_assert_uint_eq(l.field_off[4], l.field_off[6] + l.field_bytes[6]);
        ck_assert_uint_eq(l.field_off[1], l.field_off[4] + l.field_bytes[4]);
        ck_assert_uint_eq(l.field_off[5], l.field_off[1] + l.field_bytes[1]);
        ck_assert_uint_eq(l.field_off[3], l.field_off[5] + l.field_bytes[5]);
        ck_assert_uint_eq(l.field_off[3] + l.field_bytes[3], l.labels_off);
        ck_assert_uint_eq(l.file_size, l.images_off + 2 * l.images_bytes);
        bfs_st_batch_desc back;
        char err[128];
        ck_assert_int_eq(bfs_st_batch_from_file(pf, &back, err, sizeof err), 0);
        ck_assert_uint_eq(back.n_fields, nf);
        ck_assert_uint_eq(back.batch, b);
        free(pf);
        free(file);
    }
    bfs_st_batch_desc d = desc(BFS_DT_U8, 0, 4, 5, 7);
    bfs_st_field_tensor bad[] = {
        {.name = "labels", .dtype = BFS_DT_U8},
        {.name = "", .dtype = BFS_DT_U8},
        {.name = "9lives", .dtype = BFS_DT_U8},
        {.name = "a b", .dtype = BFS_DT_U8},
        {.name = "q\"", .dtype = BFS_DT_U8},
        {.name = "sub", .dtype = BFS_DT_F4},
        {.name = "zero", .dtype = BFS_DT_U8, .ndim = 1, .shape = {0}},
        {.name = "deep", .dtype = BFS_DT_U8, .ndim = BFS_ST_MAX_DIMS},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        d.fields = &bad[i];
        d.n_fields = 1;
        ck_assert_msg(bfs_st_batch_layout(&d, NULL) == -EINVAL, "case %zu", i);
    }
    bfs_st_field_tensor twice[2] = {{.name = "a", .dtype = BFS_DT_U8},
                                    {.name = "a", .dtype = BFS_DT_I32}};
    d.fields = twice;
    d.n_fields = 2;
    ck_assert_int_eq(bfs_st_batch_layout(&d, NULL), -EINVAL);
    d.fields = NULL;
    d.n_fields = 1;
    ck_assert_int_eq(bfs_st_batch_layout(&d, NULL), -EINVAL);
    bfs_st_field_tensor huge = {
        .name = "huge", .dtype = BFS_DT_I64, .ndim = 2, .shape = {UINT64_MAX / 2, 3}};
    d.fields = &huge;
    ck_assert_int_eq(bfs_st_batch_layout(&d, NULL), -EOVERFLOW);
}
END_TEST

/* Extras of json bytes put the images at want_images_off(B, json) exactly (which pins the
 * documented 491-byte figure: the range crosses a page boundary for B = 1, 2, 7, 8, 225,
 * 256 and lies beyond one for B = 224), and within BFS_ST_EXTRA_BUDGET they cost at most
 * one page: images_off <= 4096 + 16 * B rounded up, a header under 8192 bytes. */
START_TEST(extras_budget)
{
    static char vals[4][BFS_ST_MAX_EXTRA_LEN + 1];
    bfs_st_kv kv[4] = {{"k0", vals[0]}, {"k1", vals[1]}, {"k2", vals[2]}, {"k3", vals[3]}};
    static const uint32_t bs[] = {1, 2, 7, 8, 224, 225, 256};
    bfs_st_file *pf = new_file();
    for (int dt = 0; dt < 4; dt++) {
        for (size_t bi = 0; bi < sizeof bs / sizeof *bs; bi++) {
            uint64_t b = bs[bi];
            unsigned crossed = 0;
            /* the images move to the next page at json = 4096k - 499 - 16b for some k */
            size_t cross = (size_t)(want_images_off(b, 0) - 8 - WIDEST_JSON - 16 * b) + 1;
            size_t lo = (cross > BFS_ST_EXTRA_BUDGET ? BFS_ST_EXTRA_BUDGET : cross) - 8;
            size_t hi = cross > BFS_ST_EXTRA_BUDGET ? cross + 4 : BFS_ST_EXTRA_BUDGET + 20;
            if (cross < 8 + 4 * (2 + 6)) /* four pairs with 2-byte keys, empty values */
                lo = 4 * (2 + 6);
            for (size_t json = lo; json <= hi; json++) {
                size_t rest = json - 4 * (2 + 6); /* value bytes over four pairs */
                for (int i = 0; i < 4; i++) {
                    size_t n = rest / (size_t)(4 - i);
                    memset(vals[i], 'x', n);
                    vals[i][n] = 0;
                    rest -= n;
                }
                bfs_st_batch_desc d = desc(image_dtypes[dt], dt & 1, (uint32_t)b, 1, 1);
                d.extra = kv;
                d.n_extra = 4;
                bfs_st_layout l;
                ck_assert_int_eq(bfs_st_batch_layout(&d, &l), 0);
                ck_assert_uint_eq(l.images_off, want_images_off(b, json));
                crossed += l.images_off != want_images_off(b, 0);
                ck_assert_uint_eq(l.header_size, l.images_off - 16 * b);
                if (json <= BFS_ST_EXTRA_BUDGET) {
                    ck_assert_uint_le(l.images_off, 4096 + (16 * b + 4095) / 4096 * 4096);
                    ck_assert_uint_lt(l.header_size, 8192);
                }
                uint8_t *file = malloc(l.file_size);
                ck_assert_ptr_nonnull(file);
                memset(file, 0, l.file_size);
                ck_assert_int_eq(bfs_st_write_header(&d, file, l.file_size), 0);
                ck_assert_uint_eq(le64(file), l.header_size - 8);
                ck_assert_uint_eq(file[l.header_size - 1], ' ');
                ck_assert_int_eq(bfs_st_parse(file, l.file_size, pf), 0);
                ck_assert_uint_eq(pf->data_offset, l.header_size);
                ck_assert_uint_eq(pf->tensors[0].offset, l.images_off);
                ck_assert_uint_eq(pf->tensors[1].offset, l.labels_off);
                free(file);
            }
            ck_assert_msg(crossed > 0, "B %llu: the images never moved", (unsigned long long)b);
        }
    }
    free(pf);
}
END_TEST

/* ---- parser: valid files ------------------------------------------------------------ */

START_TEST(parse_standard_files)
{
    bfs_st_file *pf = new_file();
    /* the reference writer's layout: metadata first, spaces to 8-byte alignment */
    const char *j = "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2,"
                    "3],\"data_offsets\":[0,24]},\"b\":{\"dtype\":\"I64\",\"shape\":[3],\"data_"
                    "offsets\":[24,48]}}    ";
    ck_assert_int_eq(parse_json(j, 48, pf), 0);
    ck_assert_uint_eq(pf->n_tensors, 2);
    ck_assert_uint_eq(pf->n_meta, 1);
    ck_assert_str_eq(pf->meta[0].key, "format");
    ck_assert_str_eq(pf->meta[0].value, "pt");
    ck_assert_str_eq(pf->tensors[0].name, "a");
    ck_assert_uint_eq(pf->tensors[0].ndim, 2);
    ck_assert_uint_eq(pf->tensors[0].shape[1], 3);
    ck_assert_uint_eq(pf->tensors[0].offset, 8 + strlen(j));
    ck_assert_uint_eq(pf->tensors[1].offset, 8 + strlen(j) + 24);
    ck_assert_uint_eq(pf->tensors[1].nbytes, 24);

    /* tensors listed out of data order; whitespace everywhere JSON allows it */
    j = " \t\r\n{ \"z\" : { \"data_offsets\" : [ 4 , 6 ] , \"shape\" : [ 1 ] , \"dtype\" : "
        "\"U16\" } ,\n\"y\":{\"shape\":[],\"dtype\":\"F32\",\"data_offsets\":[0,4]}}\n\t ";
    ck_assert_int_eq(parse_json(j, 6, pf), 0);
    ck_assert_str_eq(pf->tensors[0].name, "z");
    ck_assert_uint_eq(pf->tensors[1].ndim, 0); /* a scalar */
    ck_assert_uint_eq(pf->tensors[1].nbytes, 4);

    /* empty header, metadata only, null metadata */
    ck_assert_int_eq(parse_json("{}", 0, pf), 0);
    ck_assert_uint_eq(pf->n_tensors + pf->n_meta, 0);
    ck_assert_int_eq(parse_json("{\"__metadata__\":{}}", 0, pf), 0);
    ck_assert_int_eq(parse_json("{\"__metadata__\":{\"a\":\"b\",\"c\":\"\"}}", 0, pf), 0);
    ck_assert_uint_eq(pf->n_meta, 2);
    ck_assert_int_eq(parse_json("{\"__metadata__\":null,\"t\":{\"dtype\":\"U8\",\"shape\":[1],"
                                "\"data_offsets\":[0,1]}}",
                                1, pf),
                     0);
    ck_assert_uint_eq(pf->n_meta, 0);

    /* zero-size tensors, also sharing an offset with a real one */
    ck_assert_int_eq(parse_json("{\"e\":{\"dtype\":\"F64\",\"shape\":[0,5],\"data_offsets\":"
                                "[3,3]},\"f\":{\"dtype\":\"U8\",\"shape\":[3],\"data_"
                                "offsets\":[0,3]},\"g\":{\"dtype\":\"I8\",\"shape\":[0],"
                                "\"data_offsets\":[3,3]}}",
                                3, pf),
                     0);
    ck_assert_uint_eq(pf->data_size, 3);
    ck_assert_int_eq(
        parse_json("{\"e\":{\"dtype\":\"BOOL\",\"shape\":[0],\"data_offsets\":[0,0]}}", 0, pf), 0);

    /* sub-byte types: whole bytes only */
    ck_assert_int_eq(
        parse_json("{\"q\":{\"dtype\":\"F4\",\"shape\":[2,3],\"data_offsets\":[0,3]}}", 3, pf), 0);
    ck_assert_int_eq(parse_json("{\"q\":{\"dtype\":\"F6_E2M3\",\"shape\":[4],\"data_offsets\":"
                                "[0,3]}}",
                                3, pf),
                     0);

    /* every dtype */
    for (int i = 0; i < BFS_DT_COUNT; i++) {
        char buf[256];
        unsigned bits = bfs_dtype_bits((bfs_dtype)i);
        snprintf(buf, sizeof buf,
                 "{\"t\":{\"dtype\":\"%s\",\"shape\":[2,4],\"data_offsets\":[0,%u]}}",
                 bfs_dtype_name((bfs_dtype)i), bits);
        ck_assert_int_eq(parse_json(buf, bits, pf), 0);
        ck_assert_int_eq(pf->tensors[0].dtype, i);
        ck_assert_uint_eq(pf->tensors[0].nbytes, bits);
    }

    /* eight dimensions; 64 tensors; 32 metadata pairs */
    ck_assert_int_eq(parse_json("{\"t\":{\"dtype\":\"U8\",\"shape\":[1,2,1,2,1,2,1,2],"
                                "\"data_offsets\":[0,16]}}",
                                16, pf),
                     0);
    ck_assert_uint_eq(pf->tensors[0].ndim, 8);
    free(pf);
}
END_TEST

START_TEST(parse_string_escapes)
{
    bfs_st_file *pf = new_file();
    const char *j = "{\"a\\\"b\\\\c\\/d\\be\\ff\\ng\\rh\\ti\\u0041\\u00e9\\u20AC\\ud83d\\ude00"
                    "\\u0000z\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                    "\"raw \xc3\xa9 \xf0\x9f\x98\x80\":{\"dtype\":\"U8\",\"shape\":[1],"
                    "\"data_offsets\":[1,2]},"
                    "\"\\u0064type\":{\"\\u0064type\":\"U\\u0038\",\"sh\\u0061pe\":[1],"
                    "\"data_offsets\":[2,3]}}";
    ck_assert_int_eq(parse_json(j, 3, pf), 0);
    const char want[] = "a\"b\\c/d\be\ff\ng\rh\tiA\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\0z";
    ck_assert_uint_eq(pf->tensors[0].name_len, sizeof want - 1);
    ck_assert_mem_eq(pf->tensors[0].name, want, sizeof want);
    ck_assert_str_eq(pf->tensors[1].name, "raw \xc3\xa9 \xf0\x9f\x98\x80");
    ck_assert_str_eq(pf->tensors[2].name, "dtype");
    ck_assert_int_eq(pf->tensors[2].dtype, BFS_DT_U8);
    free(pf);
}
END_TEST

START_TEST(parse_prefix_and_lengths)
{
    bfs_st_batch_desc d = desc(BFS_DT_U8, 0, 4, 6, 6);
    uint64_t size = bfs_st_batch_size(&d), hsize = 4096 - 4 * 16; /* 8 + N */
    uint8_t *file = calloc(1, size);
    ck_assert_ptr_nonnull(file);
    ck_assert_int_eq(bfs_st_write_header(&d, file, size), 0);
    bfs_st_file *pf = new_file();
    /* every prefix: with the true size it wants more bytes, as a whole file it is bad */
    for (size_t k = 0; k < size; k++) {
        uint8_t *p = malloc(k ? k : 1);
        memcpy(p, file, k);
        int want = k < hsize ? -ENOBUFS : 0;
        ck_assert_int_eq(bfs_st_parse_header(p, k, size, pf), want);
        ck_assert_int_eq(bfs_st_parse(p, k, pf), -EBADMSG);
        ck_assert_msg(pf->err[0], "no message for prefix %zu", k);
        free(p);
    }
    ck_assert_int_eq(bfs_st_parse(file, size, pf), 0);
    /* the header says a different size than the file has */
    ck_assert_int_eq(bfs_st_parse_header(file, 4096, size + 1, pf), -EBADMSG);
    ck_assert_ptr_nonnull(strstr(pf->err, "cover"));
    ck_assert_int_eq(bfs_st_parse_header(file, 4096, size - 1, pf), -EBADMSG);
    ck_assert_int_eq(bfs_st_parse_header(file, 4096, 4096, pf), -EBADMSG);
    ck_assert_int_eq(bfs_st_parse_header(file, 8, hsize - 1, pf), -EBADMSG);
    ck_assert_int_eq(bfs_st_parse_header(file, 4096, 4000, pf), -EINVAL); /* len > size */
    ck_assert_int_eq(bfs_st_parse_header(NULL, 0, 10, pf), -EINVAL);
    ck_assert_int_eq(bfs_st_parse_header(file, 10, 10, NULL), -EINVAL);
    ck_assert_int_eq(bfs_st_parse(file, 4, pf), -EBADMSG);

    uint64_t n;
    ck_assert_int_eq(bfs_st_header_len(file, &n), 0);
    ck_assert_uint_eq(n, hsize - 8);
    uint8_t len8[8] = {0};
    ck_assert_int_eq(bfs_st_header_len(len8, &n), -EBADMSG);
    len8[0] = 1;
    ck_assert_int_eq(bfs_st_header_len(len8, &n), -EBADMSG);
    len8[0] = 2;
    ck_assert_int_eq(bfs_st_header_len(len8, &n), 0);
    uint64_t big = BFS_ST_MAX_HEADER;
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)(big >> (8 * i));
    ck_assert_int_eq(bfs_st_header_len(len8, &n), 0);
    ck_assert_uint_eq(n, BFS_ST_MAX_HEADER);
    big++;
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)(big >> (8 * i));
    ck_assert_int_eq(bfs_st_header_len(len8, &n), -EBADMSG);
    memset(len8, 0xff, 8);
    ck_assert_int_eq(bfs_st_header_len(len8, &n), -EBADMSG);
    ck_assert_int_eq(bfs_st_header_len(NULL, &n), -EINVAL);
    /* a header length above 100 MB is refused before anything else */
    memcpy(file, len8, 8);
    ck_assert_int_eq(bfs_st_parse_header(file, 4096, UINT64_MAX, pf), -EBADMSG);
    ck_assert_ptr_nonnull(strstr(pf->err, "header length"));
    free(pf);
    free(file);
}
END_TEST

/* ---- parser: malformed files -------------------------------------------------------- */

#define T1 "\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}"

typedef struct bad_case {
    const char *json;
    size_t data;
    int rc;
} bad_case;

static const bad_case bad_cases[] = {
    /* JSON syntax */
    {"", 4, -EBADMSG}, /* N = 0 */
    {"{", 4, -EBADMSG},
    {"}", 4, -EBADMSG},
    {"[]", 0, -EBADMSG},
    {"\"t\"", 0, -EBADMSG},
    {"null", 0, -EBADMSG},
    {"{" T1, 4, -EBADMSG},
    {"{" T1 ",}", 4, -EBADMSG},
    {"{," T1 "}", 4, -EBADMSG},
    {"{" T1 "}x", 4, -EBADMSG},
    {"{" T1 "}}", 4, -EBADMSG},
    {"{" T1 "}{}", 4, -EBADMSG},
    {"{t:{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{'t':{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\" {\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\":}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4],}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\" \"shape\":[4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4,],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[,4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4 4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8", 4, -EBADMSG},
    {"{\"t", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":4,\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[\"4\"],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[true],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":U8,\"shape\":[4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\":[1]}", 4, -EBADMSG},
    {"{\"t\":\"x\"}", 4, -EBADMSG},
    {"{\"t\":null}", 4, -EBADMSG},
    {"{\"t\":true}", 4, -EBADMSG},
    /* strings */
    {"{\"t\x01\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\n\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\\x\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\\'\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\\u12\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\\u12G4\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\\ud800\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\\udc00\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\\ud800\\u0041\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\\ud800\\ud800\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\xc0\x80\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\xed\xa0\x80\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\xf5\x80\x80\x80\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4,
     -EBADMSG},
    {"{\"t\xe2\x82\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\x80\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}\xc2\xa0", 4, -EBADMSG},
    {"{\"t\\", 4, -EBADMSG},
    {"{\"t\\u00", 4, -EBADMSG},
    {"{\"t\\ud83d\\ude0", 4, -EBADMSG},
    /* numbers */
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4.0],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4e0],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4E0],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4.5]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[-4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[+4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[04],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[00,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[-0,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[0x4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[18446744073709551616],\"data_offsets\":[0,4]}}", 4,
     -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,99999999999999999999999999]}}", 4,
     -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,18446744073709551615]}}", 4,
     -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}", 0,
     -EBADMSG},
    {"{\"t\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],\"data_offsets\":[0,0]}}", 0,
     -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[Infinity],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[NaN],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    /* dtypes */
    {"{\"t\":{\"dtype\":\"U9\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"u8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"F8_E4M3_AND_A_VERY_LONG_SUFFIX\",\"shape\":[4],\"data_offsets\":"
     "[0,4]}}",
     4, -EBADMSG},
    {"{\"t\":{\"dtype\":8,\"shape\":[4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":[\"U8\"],\"shape\":[4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    /* entry structure */
    {"{\"t\":{\"shape\":[4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4]}}", 4, -EBADMSG},
    {"{\"t\":{}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4],\"extra\":1}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4,
     -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"shape\":[4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4],\"data_offsets\":[0,4]}}", 4,
     -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,0]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":{\"a\":0}}}", 4, -EBADMSG},
    /* shape vs bytes */
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[5],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[2,3],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2, -EBADMSG},
    {"{\"t\":{\"dtype\":\"F6_E3M2\",\"shape\":[5],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    /* placement */
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 3, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 5, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 0, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[1,5]}}", 5, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[100,104]}}", 4, -EBADMSG},
    {"{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"U8\","
     "\"shape\":[4],\"data_offsets\":[2,6]}}",
     6, -EBADMSG}, /* overlap */
    {"{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"U8\","
     "\"shape\":[4],\"data_offsets\":[0,4]}}",
     4, -EBADMSG}, /* same range twice */
    {"{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"U8\","
     "\"shape\":[4],\"data_offsets\":[5,9]}}",
     9, -EBADMSG}, /* hole */
    {"{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"U8\","
     "\"shape\":[4],\"data_offsets\":[4,8]}}",
     7, -EBADMSG}, /* past the end */
    {"{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[2,2]}}", 0, -EBADMSG},
    {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[18446744073709551614,"
     "18446744073709551615]}}",
     1, -EBADMSG},
    /* duplicates */
    {"{" T1 "," T1 "}", 4, -EBADMSG},
    {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, -EBADMSG},
    {"{\"__metadata__\":{\"a\":\"1\",\"a\":\"2\"}}", 0, -EBADMSG},
    {"{\"__metadata__\":{\"a\":\"1\",\"\\u0061\":\"2\"}}", 0, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},\"\\u0074\":{\"dtype\":\"U8\","
     "\"shape\":[0],\"data_offsets\":[4,4]}}",
     4, -EBADMSG},
    /* metadata */
    {"{\"__metadata__\":{\"a\":1}}", 0, -EBADMSG},
    {"{\"__metadata__\":{\"a\":null}}", 0, -EBADMSG},
    {"{\"__metadata__\":{\"a\":{\"b\":\"c\"}}}", 0, -EBADMSG},
    {"{\"__metadata__\":{\"a\":[\"b\"]}}", 0, -EBADMSG},
    {"{\"__metadata__\":[]}", 0, -EBADMSG},
    {"{\"__metadata__\":\"x\"}", 0, -EBADMSG},
    {"{\"__metadata__\":nul}", 0, -EBADMSG},
    {"{\"__metadata__\":nullnull}", 0, -EBADMSG},
    {"{\"__metadata__\":{\"a\":\"b\",}}", 0, -EBADMSG},
    {"{\"__metadata__\":{\"a\"}}", 0, -EBADMSG},
    /* nesting where none is allowed */
    {"{\"t\":{\"dtype\":{\"dtype\":{\"dtype\":\"U8\"}},\"shape\":[4],\"data_offsets\":[0,4]}}", 4,
     -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[[4]],\"data_offsets\":[0,4]}}", 4, -EBADMSG},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[[0,4]]}}", 4, -EBADMSG},
    {"{{}}", 0, -EBADMSG},
    {"{\"a\":{\"b\":{\"c\":{\"d\":{}}}}}", 0, -EBADMSG},
    /* beyond this parser's limits */
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, -E2BIG},
};

START_TEST(parse_rejects)
{
    bfs_st_file *pf = new_file();
    for (size_t i = 0; i < sizeof bad_cases / sizeof *bad_cases; i++) {
        const bad_case *c = &bad_cases[i];
        size_t len;
        uint8_t *f = mkfile(c->json, strlen(c->json), c->data, &len);
        int rc = bfs_st_parse(f, len, pf);
        ck_assert_msg(rc == c->rc, "case %zu: want %d, got %d (%s) for %s", i, c->rc, rc, pf->err,
                      c->json);
        ck_assert_msg(pf->err[0] != 0, "case %zu: no message", i);
        free(f);
    }
    /* a tensor name with control characters still gives a one-line message */
    ck_assert_int_eq(parse_json("{\"a\\nb\\u0000c\":{\"dtype\":\"U8\",\"shape\":[1],"
                                "\"data_offsets\":[1,2]}}",
                                2, pf),
                     -EBADMSG);
    ck_assert_ptr_nonnull(strstr(pf->err, "hole in the data buffer before tensor \"a?b?c\""));
    ck_assert_ptr_null(strchr(pf->err, '\n'));
    /* an embedded NUL after the object is trailing garbage too */
    size_t len;
    const char nul[] = "{" T1 "}\0";
    uint8_t *f = mkfile(nul, sizeof nul - 1, 4, &len);
    ck_assert_int_eq(bfs_st_parse(f, len, pf), -EBADMSG);
    ck_assert_ptr_nonnull(strstr(pf->err, "trailing"));
    free(f);
    free(pf);
}
END_TEST

START_TEST(parse_deep_nesting)
{
    bfs_st_file *pf = new_file();
    size_t depth = 100000;
    char *j = malloc(2 * depth + 64);
    ck_assert_ptr_nonnull(j);
    /* {"t":{"dtype":"U8","shape":[[[[...]]]] */
    strcpy(j, "{\"t\":{\"dtype\":\"U8\",\"shape\":");
    size_t n = strlen(j);
    memset(j + n, '[', depth);
    memset(j + n + depth, ']', depth);
    strcpy(j + n + 2 * depth, ",\"data_offsets\":[0,1]}}");
    ck_assert_int_eq(parse_json(j, 1, pf), -EBADMSG);
    /* {"a":{"a":{"a": ... }}} */
    size_t k = 0;
    for (size_t i = 0; i < depth / 8; i++) {
        memcpy(j + k, "{\"a\":", 5);
        k += 5;
    }
    j[k] = 0;
    ck_assert_int_eq(parse_json(j, 0, pf), -EBADMSG);
    free(j);
    free(pf);
}
END_TEST

START_TEST(parse_limits)
{
    bfs_st_file *pf = new_file();
    char *j = malloc(64 * 1024);
    ck_assert_ptr_nonnull(j);
    for (unsigned count = BFS_ST_MAX_TENSORS; count <= BFS_ST_MAX_TENSORS + 1; count++) {
        size_t n = 0;
        j[n++] = '{';
        for (unsigned i = 0; i < count; i++)
            n += (size_t)sprintf(j + n,
                                 "%s\"t%u\":{\"dtype\":\"I16\",\"shape\":[1],"
                                 "\"data_offsets\":[%u,%u]}",
                                 i ? "," : "", i, 2 * i, 2 * i + 2);
        strcpy(j + n, "}");
        ck_assert_int_eq(parse_json(j, 2 * count, pf), count <= BFS_ST_MAX_TENSORS ? 0 : -E2BIG);
        if (count == BFS_ST_MAX_TENSORS) {
            ck_assert_uint_eq(pf->n_tensors, count);
            ck_assert_str_eq(pf->tensors[63].name, "t63");
            ck_assert_uint_eq(pf->tensors[63].offset, pf->data_offset + 126);
        }
    }
    for (unsigned count = BFS_ST_MAX_META; count <= BFS_ST_MAX_META + 1; count++) {
        size_t n = (size_t)sprintf(j, "{\"__metadata__\":{");
        for (unsigned i = 0; i < count; i++)
            n += (size_t)sprintf(j + n, "%s\"k%u\":\"v%u\"", i ? "," : "", i, i);
        strcpy(j + n, "}}");
        ck_assert_int_eq(parse_json(j, 0, pf), count <= BFS_ST_MAX_META ? 0 : -E2BIG);
    }
    /* the string pool: one value that just fits, one that does not */
    for (size_t vlen = BFS_ST_POOL_SIZE - 6; vlen <= BFS_ST_POOL_SIZE - 3; vlen++) {
        size_t n = (size_t)sprintf(j, "{\"__metadata__\":{\"ab\":\"");
        memset(j + n, 'v', vlen);
        strcpy(j + n + vlen, "\"}}");
        /* key "ab" + NUL + value + NUL = vlen + 4 bytes */
        ck_assert_int_eq(parse_json(j, 0, pf), vlen + 4 <= BFS_ST_POOL_SIZE ? 0 : -E2BIG);
    }
    free(j);
    free(pf);
}
END_TEST

START_TEST(batch_from_file_rejects)
{
    bfs_st_file *pf = new_file();
    bfs_st_batch_desc d;
    char err[128];
    static const struct {
        const char *json;
        size_t data;
        const char *why; /* in the message */
    } bad[] = {
        /* not a batch at all */
        {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, "format"},
        /* the old format, even in the new order */
        {"{\"__metadata__\":{\"format\":\"batchfs/1\",\"layout\":\"nhwc\",\"epoch\":\"1\","
         "\"batch\":\"2\",\"fingerprint\":\"0123456789abcdef\"},"
         "\"images\":{\"dtype\":\"U8\",\"shape\":[1,1,1,3],\"data_offsets\":[16,19]},"
         "\"labels\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]},"
         "\"indices\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[8,16]}}",
         19, "batchfs/2"},
        /* a newer format */
        {"{\"__metadata__\":{\"format\":\"batchfs/3\",\"layout\":\"nhwc\",\"epoch\":\"1\","
         "\"batch\":\"2\",\"fingerprint\":\"0123456789abcdef\"},"
         "\"images\":{\"dtype\":\"U8\",\"shape\":[1,1,1,3],\"data_offsets\":[16,19]},"
         "\"labels\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]},"
         "\"indices\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[8,16]}}",
         19, "batchfs/2"},
        /* bad epoch */
        {"{\"__metadata__\":{\"format\":\"batchfs/2\",\"layout\":\"nhwc\",\"epoch\":\"01\","
         "\"batch\":\"2\",\"fingerprint\":\"0123456789abcdef\"},"
         "\"images\":{\"dtype\":\"U8\",\"shape\":[1,1,1,3],\"data_offsets\":[16,19]},"
         "\"labels\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]},"
         "\"indices\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[8,16]}}",
         19, "epoch"},
        /* uppercase fingerprint */
        {"{\"__metadata__\":{\"format\":\"batchfs/2\",\"layout\":\"nhwc\",\"epoch\":\"1\","
         "\"batch\":\"2\",\"fingerprint\":\"0123456789ABCDEF\"},"
         "\"images\":{\"dtype\":\"U8\",\"shape\":[1,1,1,3],\"data_offsets\":[16,19]},"
         "\"labels\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]},"
         "\"indices\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[8,16]}}",
         19, "fingerprint"},
        /* layout disagrees with the shape */
        {"{\"__metadata__\":{\"format\":\"batchfs/2\",\"layout\":\"nchw\",\"epoch\":\"1\","
         "\"batch\":\"2\",\"fingerprint\":\"0123456789abcdef\"},"
         "\"images\":{\"dtype\":\"U8\",\"shape\":[1,1,1,3],\"data_offsets\":[16,19]},"
         "\"labels\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]},"
         "\"indices\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[8,16]}}",
         19, "images"},
        /* labels not I64 */
        {"{\"__metadata__\":{\"format\":\"batchfs/2\",\"layout\":\"nhwc\",\"epoch\":\"1\","
         "\"batch\":\"2\",\"fingerprint\":\"0123456789abcdef\"},"
         "\"images\":{\"dtype\":\"U8\",\"shape\":[1,1,1,3],\"data_offsets\":[16,19]},"
         "\"labels\":{\"dtype\":\"U64\",\"shape\":[1],\"data_offsets\":[0,8]},"
         "\"indices\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[8,16]}}",
         19, "labels"},
        /* data in the batchfs/1 order: images, labels, indices */
        {"{\"__metadata__\":{\"format\":\"batchfs/2\",\"layout\":\"nhwc\",\"epoch\":\"1\","
         "\"batch\":\"2\",\"fingerprint\":\"0123456789abcdef\"},"
         "\"images\":{\"dtype\":\"U8\",\"shape\":[1,1,1,3],\"data_offsets\":[0,3]},"
         "\"labels\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[3,11]},"
         "\"indices\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[11,19]}}",
         19, "order labels, indices, images"},
        /* data in the order indices, labels, images */
        {"{\"__metadata__\":{\"format\":\"batchfs/2\",\"layout\":\"nhwc\",\"epoch\":\"1\","
         "\"batch\":\"2\",\"fingerprint\":\"0123456789abcdef\"},"
         "\"images\":{\"dtype\":\"U8\",\"shape\":[1,1,1,3],\"data_offsets\":[16,19]},"
         "\"labels\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[8,16]},"
         "\"indices\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}",
         19, "order labels, indices, images"},
        /* data in the order labels, images, indices */
        {"{\"__metadata__\":{\"format\":\"batchfs/2\",\"layout\":\"nhwc\",\"epoch\":\"1\","
         "\"batch\":\"2\",\"fingerprint\":\"0123456789abcdef\"},"
         "\"images\":{\"dtype\":\"U8\",\"shape\":[1,1,1,3],\"data_offsets\":[8,11]},"
         "\"labels\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]},"
         "\"indices\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[11,19]}}",
         19, "order labels, indices, images"},
        /* tensors in another header order */
        {"{\"__metadata__\":{\"format\":\"batchfs/2\",\"layout\":\"nhwc\",\"epoch\":\"1\","
         "\"batch\":\"2\",\"fingerprint\":\"0123456789abcdef\"},"
         "\"labels\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]},"
         "\"images\":{\"dtype\":\"U8\",\"shape\":[1,1,1,3],\"data_offsets\":[16,19]},"
         "\"indices\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[8,16]}}",
         19, "tensor 0"},
        /* I64 images */
        {"{\"__metadata__\":{\"format\":\"batchfs/2\",\"layout\":\"nhwc\",\"epoch\":\"1\","
         "\"batch\":\"2\",\"fingerprint\":\"0123456789abcdef\"},"
         "\"images\":{\"dtype\":\"I64\",\"shape\":[1,1,1,3],\"data_offsets\":[16,40]},"
         "\"labels\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]},"
         "\"indices\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[8,16]}}",
         40, "images"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert_msg(parse_json(bad[i].json, bad[i].data, pf) == 0, "case %zu: %s", i, pf->err);
        err[0] = 0;
        ck_assert_msg(bfs_st_batch_from_file(pf, &d, err, sizeof err) == -EBADMSG, "case %zu", i);
        ck_assert_msg(strstr(err, bad[i].why) != NULL, "case %zu: '%s' lacks '%s'", i, err,
                      bad[i].why);
    }
    /* the same file with good metadata is a batch, with any header padding */
    const char *good =
        "{\"__metadata__\":{\"format\":\"batchfs/2\",\"layout\":\"nhwc\",\"epoch\":\"1\","
        "\"batch\":\"2\",\"fingerprint\":\"0123456789abcdef\",\"x\":\"y\"},"
        "\"images\":{\"dtype\":\"U8\",\"shape\":[1,1,1,3],\"data_offsets\":[16,19]},"
        "\"labels\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]},"
        "\"indices\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[8,16]}}";
    ck_assert_int_eq(parse_json(good, 19, pf), 0);
    ck_assert_int_eq(bfs_st_batch_from_file(pf, &d, err, sizeof err), 0);
    ck_assert_uint_eq(d.epoch, 1);
    ck_assert_uint_eq(d.batch_index, 2);
    ck_assert_int_eq(bfs_st_batch_from_file(NULL, &d, NULL, 0), -EINVAL);
    free(pf);
}
END_TEST

/* Every single-byte change of a valid batch header (at a sample of positions, to every
 * interesting value) and every truncation of a standard file parse without a crash and
 * return a documented code; those that still parse must describe a tiling. */
START_TEST(parse_mutations)
{
    bfs_st_batch_desc d = desc(BFS_DT_F16, 0, 2, 3, 3);
    bfs_st_layout l;
    ck_assert_int_eq(bfs_st_batch_layout(&d, &l), 0);
    uint8_t *file = calloc(1, l.file_size);
    ck_assert_ptr_nonnull(file);
    ck_assert_int_eq(bfs_st_write_header(&d, file, l.file_size), 0);
    size_t json_end = 8;
    while (file[json_end] != ' ')
        json_end++;
    static const uint8_t vals[] = {0,   1,   ' ', '"', ',', ':',  '[', ']',  '{',  '}',  '-',
                                   '.', '0', '1', '9', 'e', '\\', 'u', 0x7f, 0x80, 0xc3, 0xff};
    bfs_st_file *pf = new_file();
    uint8_t *copy = malloc(l.file_size);
    ck_assert_ptr_nonnull(copy);
    unsigned ok = 0, bad = 0;
    for (size_t pos = 0; pos < json_end + 2; pos++)
        for (size_t v = 0; v < sizeof vals; v++) {
            memcpy(copy, file, l.file_size);
            copy[pos] = vals[v];
            int rc = bfs_st_parse(copy, l.file_size, pf);
            ck_assert_msg(rc == 0 || rc == -EBADMSG || rc == -E2BIG, "pos %zu: rc %d", pos, rc);
            if (rc == 0) {
                uint64_t sum = 0;
                for (uint32_t i = 0; i < pf->n_tensors; i++) {
                    ck_assert_uint_le(pf->tensors[i].offset + pf->tensors[i].nbytes, l.file_size);
                    sum += pf->tensors[i].nbytes;
                }
                ck_assert_uint_eq(sum, pf->data_size);
                ck_assert_uint_eq(pf->file_size, l.file_size);
                ok++;
            } else
                bad++;
        }
    ck_assert_uint_gt(ok, 0);
    ck_assert_uint_gt(bad, ok);
    free(copy);
    free(pf);
    free(file);
}
END_TEST

static Suite *safetensors_suite(void)
{
    Suite *s = suite_create("safetensors");
    TCase *enc = tcase_create("encoder");
    tcase_set_timeout(enc, 120);
    tcase_add_test(enc, dtype_table);
    tcase_add_test(enc, golden_header);
    tcase_add_test(enc, token_batches);
    tcase_add_test(enc, round_trip_all_batch_sizes);
    tcase_add_test(enc, round_trip_full_files);
    tcase_add_test(enc, size_independent_of_numbers);
    tcase_add_test(enc, encoder_rejects);
    tcase_add_test(enc, extras_round_trip);
    tcase_add_test(enc, extras_budget);
    tcase_add_test(enc, field_tensors);
    tcase_add_test(enc, aligned_layouts);
    tcase_add_test(enc, old_layout_rejected);
    suite_add_tcase(s, enc);
    TCase *par = tcase_create("parser");
    tcase_set_timeout(par, 120);
    tcase_add_test(par, parse_standard_files);
    tcase_add_test(par, parse_string_escapes);
    tcase_add_test(par, parse_prefix_and_lengths);
    tcase_add_test(par, parse_rejects);
    tcase_add_test(par, parse_deep_nesting);
    tcase_add_test(par, parse_limits);
    tcase_add_test(par, batch_from_file_rejects);
    tcase_add_test(par, parse_mutations);
    suite_add_tcase(s, par);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(safetensors_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
