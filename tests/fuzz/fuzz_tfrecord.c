/*
 * fuzz_tfrecord.c — libFuzzer target for the TFRecord reader of mkbatchfs
 * (engine/dataset/tfrecord.c): record framing with its CRC-32C checks, and the strict
 * protobuf reader of tf.train.Example.
 *
 * Input: [0] bits 0-1: which (0: a TFRecord stream as is; 1: records framed here with
 *        correct CRCs from the input's chunks, [u16 length][bytes]..., then, with bit 2,
 *        one bit flipped at an offset from [1..2]; 2, 3: an Example's bytes), bits 3-5: how
 *        many bytes the read callback hands out at a time, bits 6-7 (which 1): the framed
 *        records compressed here (1: GZIP, 2: ZLIB, 3: two GZIP members), and then bit 2
 *        cuts the compressed file short instead of flipping a bit; the rest: the bytes.
 * Checked (tfrecord.h):
 *  - no crash, no read outside the input, no leak; stream errors are -EINVAL with a
 *    one-line message; the stream is never read past its end;
 *  - CRC-32C: the check value of "123456789" (0xe3069283), and continuing a CRC over a
 *    split gives the CRC of the whole;
 *  - framed records come back exactly as framed, in order, then the end; with one bit
 *    flipped anywhere, the records before it come back and then the read fails (CRC-32C
 *    sees every 1-bit error, in the data, the length or a stored CRC);
 *  - compressed, they come back the same (the compression told by the bytes); a
 *    compressed file cut short anywhere fails (-EINVAL) after a prefix of the records;
 *  - the reader has read exactly the bytes it says (in_off), and, plain, consumed them;
 *  - an Example's features point inside it; a sample not skipped has one image (its
 *    bytes those of the Example's first value) and a label in 0..BFS_SHARD_LABEL_MAX;
 *  - every feature (bfs_tfr_example_members, mkbatchfs keeping every field): a record
 *    that bfs_tfr_example reads is read, one it refuses is refused; the image and label
 *    features agree with it; fields are made of the members and converted
 *    (record_check.h), the same Example as the first sample and as a later one.
 */
#include "engine/dataset/tfrecord.h"
#include "base/endian.h"
#include "tests/fuzz/record_check.h"
#include "tests/fuzz/shard_mem.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "fuzz_tfrecord: check failed at line %d: %s\n", __LINE__, #c);         \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void check_example(const uint8_t *p, size_t n)
{
    bfs_tfr_feature img, lab;
    int rc = bfs_tfr_example(p, n, "image/encoded", "image/class/label", &img, &lab);
    CHECK(rc == 0 || rc == -EINVAL);
    if (rc) { /* every feature refused alike */
        bfs_members m = {0};
        CHECK(bfs_tfr_example_members(p, n, &m) == -EINVAL && m.n == 0);
        bfs_members_free(&m);
        return;
    }
    CHECK(img.kind >= 0 && img.kind <= 3 && lab.kind >= 0 && lab.kind <= 3);
    if (img.kind == 1 && img.count)
        CHECK(img.bytes >= p && img.bytes_len <= n && img.bytes + img.bytes_len <= p + n);
    if (lab.kind == 1 && lab.count)
        CHECK(lab.bytes >= p && lab.bytes + lab.bytes_len <= p + n);
    CHECK(img.count <= n && lab.count <= n);
    bfs_members m = {0};
    int mrc = bfs_tfr_example_members(p, n, &m);
    CHECK(mrc == 0 || mrc == -EINVAL);
    CHECK(mrc == rc); /* the same Examples read, the same refused */
    if (mrc == 0) {
        const bfs_member *mi = bfs_members_find(&m, "image/encoded", 0);
        if (img.kind == 1 && img.count == 1)
            CHECK(mi && mi->type == BFS_MEMBER_BYTES && mi->len == img.bytes_len &&
                  (!mi->len || !memcmp(mi->data, img.bytes, mi->len)));
        const bfs_member *ml = bfs_members_find(&m, "image/class/label", 0);
        if (lab.kind == 3)
            CHECK(ml && ml->type == BFS_MEMBER_INTS && ml->len == lab.count &&
                  (!ml->len || ((int64_t *)ml->data)[0] == lab.int64));
        for (size_t k = 0; k < m.n; k++)
            CHECK(m.v[k].len <= n);
        record_fuzz rf = {.src = BFS_SRC_TFRECORD};
        record_fuzz_sample(&rf, &m); /* the first sample */
        record_fuzz_sample(&rf, &m); /* and a later one */
    }
    bfs_members_free(&m);
}

/* Read a stream to its end as samples; the records read into *count. 0 or the error. */
static int read_all(const uint8_t *p, size_t n, size_t step, const uint8_t *const *recs,
                    const size_t *lens, size_t nrecs, size_t *count)
{
    shard_mem m;
    bfs_tfr r;
    bfs_tfr_init(&r, shard_mem_in(&m, p, n, step), NULL, NULL);
    char err[512];
    int rc;
    *count = 0;
    for (;;) {
        bfs_shard_sample s;
        memset(err, 'x', sizeof err);
        rc = bfs_tfr_next_sample(&r, &s, err, sizeof err);
        CHECK(m.pos <= n && r.in_off == m.pos);
        CHECK(r.compression != BFS_TFR_PLAIN || rc < 0 || r.off == m.pos);
        if (rc < 0) {
            CHECK(rc == -EINVAL);
            CHECK(memchr(err, 0, sizeof err) && err[0] && !strchr(err, '\n'));
            CHECK(!s.image);
            break;
        }
        if (rc == 0)
            break;
        CHECK(s.key && !strncmp(s.key, "record ", 7));
        if (recs) {
            CHECK(*count < nrecs && r.len == lens[*count]);
            CHECK(!r.len || !memcmp(r.buf, recs[*count], r.len));
        }
        check_example(r.buf, r.len);
        if (!s.skip) {
            bfs_tfr_feature img, lab;
            CHECK(!bfs_tfr_example(r.buf, r.len, "image/encoded", "image/class/label", &img, &lab));
            CHECK(img.kind == 1 && img.count == 1 && s.image_len == img.bytes_len);
            CHECK(!memcmp(s.image, img.bytes, s.image_len));
            CHECK(lab.kind == 3 && lab.count == 1 && s.label == lab.int64);
            CHECK(s.label >= 0 && s.label <= BFS_SHARD_LABEL_MAX);
        } else
            CHECK(!s.image);
        free(s.image);
        (*count)++;
    }
    bfs_tfr_close(&r);
    return rc < 0 ? rc : 0;
}

/* p[0..n) compressed as TensorFlow's TFRecordWriter would: zmode 1 GZIP, 2 ZLIB, 3 GZIP
 * in two members (split at the middle). malloc'ed, its length in *zn (always > 2), the
 * first member's in *first. */
static uint8_t *compress_stream(const uint8_t *p, size_t n, int zmode, size_t *zn, size_t *first)
{
    size_t cap = 2 * (compressBound(n) + 64), len = 0;
    uint8_t *z = malloc(cap);
    CHECK(z);
    size_t part[2] = {zmode == 3 ? n / 2 : n, zmode == 3 ? n - n / 2 : 0};
    for (int i = 0; i < 2 && (i == 0 || part[1]); i++) {
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        CHECK(deflateInit2(&zs, 6, Z_DEFLATED, zmode == 2 ? 15 : 15 + 16, 8, Z_DEFAULT_STRATEGY) ==
              Z_OK);
        zs.next_in = (Bytef *)(uintptr_t)(p + (i ? part[0] : 0));
        zs.avail_in = (uInt)part[i];
        zs.next_out = z + len;
        zs.avail_out = (uInt)(cap - len);
        CHECK(deflate(&zs, Z_FINISH) == Z_STREAM_END);
        len = cap - zs.avail_out;
        deflateEnd(&zs);
        if (i == 0)
            *first = len;
    }
    *zn = len;
    return z;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char nine[] = "123456789";
    CHECK(bfs_crc32c(0, nine, 9) == 0xe3069283u);
    if (size < 3)
        return 0;
    int which = data[0] & 3;
    size_t step = (data[0] >> 3 & 7) * 13;
    const uint8_t *in = data + 3;
    size_t n = size - 3;
    if (n) {
        size_t cut = bfs_ld16(data + 1) % n;
        CHECK(bfs_crc32c(bfs_crc32c(0, in, cut), in + cut, n - cut) == bfs_crc32c(0, in, n));
    }
    if (which == 0) {
        uint8_t *p = malloc(n ? n : 1);
        CHECK(p);
        memcpy(p, in, n);
        size_t count;
        read_all(p, n, step, NULL, NULL, 0, &count);
        free(p);
    } else if (which == 1) {
        /* chunks [u16 len][bytes] into correctly framed records */
        const uint8_t *recs[256];
        size_t lens[256], nrecs = 0, total = 0, pos = 0;
        while (pos + 2 <= n && nrecs < 256) {
            size_t len = bfs_ld16(in + pos);
            pos += 2;
            len = len < n - pos ? len : n - pos;
            recs[nrecs] = in + pos, lens[nrecs++] = len;
            total += len + 16, pos += len;
        }
        uint8_t *p = malloc(total ? total : 1), *q = p;
        CHECK(p);
        for (size_t i = 0; i < nrecs; i++) {
            uint8_t h[8];
            bfs_st64(h, lens[i]);
            memcpy(q, h, 8);
            bfs_st32(q + 8, bfs_tfr_mask(bfs_crc32c(0, h, 8)));
            memcpy(q + 12, recs[i], lens[i]);
            bfs_st32(q + 12 + lens[i], bfs_tfr_mask(bfs_crc32c(0, recs[i], lens[i])));
            q += lens[i] + 16;
        }
        int zmode = data[0] >> 6;
        if (zmode) {
            size_t zn, first;
            uint8_t *z = compress_stream(p, total, zmode, &zn, &first);
            size_t count, cut = zn;
            if (data[0] & 4) /* cut short: past the magic, before the end */
                cut = 2 + bfs_ld16(data + 1) % (zn - 2);
            int rc = read_all(z, cut, step, recs, lens, nrecs, &count);
            if (cut == first && cut < zn) /* a whole member: the records it holds, then -EINVAL
                                             unless it ends between two */
                CHECK((rc == 0 || rc == -EINVAL) && count <= nrecs);
            else
                CHECK(cut < zn ? rc == -EINVAL && count <= nrecs : rc == 0 && count == nrecs);
            free(z);
            free(p);
            return 0;
        }
        int flip = (data[0] & 4) && total;
        if (flip) {
            size_t at = bfs_ld16(data + 1) * 8u % (total * 8);
            p[at / 8] ^= (uint8_t)(1u << (at % 8));
        }
        size_t count;
        int rc = read_all(p, total, step, recs, lens, nrecs, &count);
        CHECK(flip ? rc == -EINVAL && count < nrecs : rc == 0 && count == nrecs);
        free(p);
    } else {
        uint8_t *p = malloc(n ? n : 1);
        CHECK(p);
        memcpy(p, in, n);
        check_example(p, n);
        free(p);
    }
    return 0;
}
