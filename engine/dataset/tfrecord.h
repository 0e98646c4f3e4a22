/*
 * tfrecord.h — TFRecord files of tf.train.Example, read as a stream: the record framing
 * (bfs_tfr_next), a strict protobuf reader of Example (bfs_tfr_example) and the sample
 * reader mkbatchfs packs from (bfs_tfr_next_sample; pack.c). Fuzzed by
 * tests/fuzz/fuzz_tfrecord.c.
 *
 * A record is: u64 length, u32 masked CRC-32C of those 8 bytes, the data, u32 masked
 * CRC-32C of the data (all little-endian; mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8,
 * TensorFlow's tensorflow/core/lib/hash/crc32c.h). Both checksums are verified: a
 * mismatch, a record over BFS_TFR_RECORD_MAX or a file ending inside a record fails the
 * read (the rest of the file cannot be trusted).
 *
 * GZIP- and ZLIB-compressed files (TFRecordOptions' compression_type "GZIP", "ZLIB") are
 * read as well, decompressed as a stream (zlib; a 64 KiB input buffer, never the whole
 * file). The first bytes tell: a file whose first record's length checksum holds is plain;
 * else gzip's magic 1f 8b, or a zlib header (RFC 1950: deflate, a window of at most 32 KiB,
 * the header's check bits, no preset dictionary). Streams may follow one another
 * (concatenated gzip members, as gzip -d reads them). The compressed data's own checks
 * (CRC-32 or Adler-32, the length) are verified at each stream's end; a file that ends
 * inside a compressed stream, corrupt deflate data, or data that is not a stream after a
 * stream's end fail the read naming the file's byte.
 *
 * The Example (tensorflow/core/example/{example,feature}.proto):
 *   Example  { Features features = 1; }
 *   Features { map<string, Feature> feature = 1; }     entries: key = 1, value = 2
 *   Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
 *                           Int64List int64_list = 3; } }
 *   BytesList { repeated bytes value = 1; }  Int64List { repeated int64 value = 1; }
 * read with protobuf's rules: fields in any order, unknown fields skipped by wire type,
 * a message field given twice merged (map entries: the last for a key wins; oneof: the
 * last kind wins), int64 values packed or not. Anything malformed (a varint over 10
 * bytes, a length past its message, a group or an unknown wire type, a map key that is
 * not a string) makes the record not an Example.
 */
#ifndef BATCHFS_ENGINE_DATASET_TFRECORD_H
#define BATCHFS_ENGINE_DATASET_TFRECORD_H

#include "engine/dataset/record.h"
#include "engine/dataset/shard.h"

#include <stddef.h>
#include <stdint.h>

#define BFS_TFR_RECORD_MAX ((uint64_t)1 << 30) /* longest record taken: 1 GiB */

/* bfs_crc32c - CRC-32C (Castagnoli) of p[0..n), continuing from crc (0 to start). */
uint32_t bfs_crc32c(uint32_t crc, const void *p, size_t n);

/* bfs_tfr_mask - TFRecord's masked form of a CRC-32C. */
uint32_t bfs_tfr_mask(uint32_t crc);

enum { BFS_TFR_PLAIN, BFS_TFR_GZIP, BFS_TFR_ZLIB };

typedef struct bfs_tfr_z bfs_tfr_z; /* decompression state (tfrecord.c) */

typedef struct bfs_tfr {
    bfs_shard_in in;
    uint64_t off;     /* bytes of the record stream consumed (decompressed, if compressed) */
    uint64_t in_off;  /* bytes read from the shard (its progress: the file's size at the end) */
    int compression;  /* BFS_TFR_*, told by the first bytes (at the first bfs_tfr_next) */
    int started;      /* the first bytes were read */
    uint8_t head[12]; /* the first bytes, read to tell the compression: handed out first */
    size_t head_len, head_pos;
    bfs_tfr_z *z;                      /* compressed files */
    uint64_t index;                    /* records read */
    uint8_t *buf;                      /* the last record's data (owned; bfs_tfr_close frees it) */
    size_t cap, len;                   /* its capacity and length */
    const char *image_key, *label_key; /* features (NULL: image/encoded, image/class/label) */
    char key[32];                      /* "record N" of the last sample */
} bfs_tfr;

/* bfs_tfr_init - a reader of the TFRecord stream in; the keys as in bfs_tfr (the strings
 * must outlive the reader). bfs_tfr_close frees its buffer (accepts a zeroed reader). */
void bfs_tfr_init(bfs_tfr *r, bfs_shard_in in, const char *image_key, const char *label_key);
void bfs_tfr_close(bfs_tfr *r);

/*
 * bfs_tfr_next - the next record's data into r->buf[0..r->len) (valid until the next
 * call). Returns 1 (a record), 0 (the stream ended between records), -EINVAL (a checksum
 * mismatch, a record over BFS_TFR_RECORD_MAX, the stream ending inside a record, a
 * compressed file cut short or corrupt: err says which and at which byte; in a
 * compressed file, records are placed by the byte of the decompressed stream and
 * compression errors by the file's), -ENOMEM, or the read callback's error.
 */
int bfs_tfr_next(bfs_tfr *r, char *err, size_t errlen);

/* What bfs_tfr_example finds of one feature. */
typedef struct bfs_tfr_feature {
    int kind;             /* 0 absent; 1 bytes_list, 2 float_list, 3 int64_list */
    uint64_t count;       /* values in the list */
    const uint8_t *bytes; /* bytes_list: the first value (inside the record) */
    size_t bytes_len;     /* its length */
    int64_t int64;        /* int64_list: the first value */
} bfs_tfr_feature;

/*
 * bfs_tfr_example - read the Example in p[0..n): the features named image_key and
 * label_key into *image and *label (kind 0 when the Example has none).
 * Returns 0, or -EINVAL when p is not a well-formed Example.
 */
int bfs_tfr_example(const uint8_t *p, size_t n, const char *image_key, const char *label_key,
                    bfs_tfr_feature *image, bfs_tfr_feature *label);

/*
 * bfs_tfr_next_sample - the next record as a sample: key "record N" (from 0), offset of
 * its length field, the image feature's single bytes value copied out, the label
 * feature's single int64 value. A record that is not an Example, without the image
 * feature or whose image feature is not one bytes value, without the label or whose
 * label is not one int64 value, or a label outside 0..BFS_SHARD_LABEL_MAX comes back with
 * s->skip set. Returns 1, 0 (the end) or bfs_tfr_next's errors.
 */
int bfs_tfr_next_sample(bfs_tfr *r, bfs_shard_sample *s, char *err, size_t errlen);

/*
 * bfs_tfr_example_members - every feature of the Example in p[0..n) into m (cleared
 * first), named by its key: a bytes_list of one value as BFS_MEMBER_BYTES (of several:
 * a member that is bad, "a bytes_list of several values"), an int64_list as
 * BFS_MEMBER_INTS, a float_list as BFS_MEMBER_FLOATS (empty lists: members of no
 * values); a bytes_list of no value, a feature of no kind or a key holding a NUL is left
 * out, as absent. Returns 0, -EINVAL (not a
 * well-formed Example: m empty) or -ENOMEM.
 */
int bfs_tfr_example_members(const uint8_t *p, size_t n, bfs_members *m);

/*
 * bfs_tfr_next_members - the next record's features into m (bfs_tfr_example_members),
 * its key "record N" in r->key and *offset where it starts; *not_example set (m empty)
 * when the record is not an Example. Returns 1, 0 (the end), bfs_tfr_next's errors or
 * -ENOMEM.
 */
int bfs_tfr_next_members(bfs_tfr *r, bfs_members *m, uint64_t *offset, int *not_example, char *err,
                         size_t errlen);

#endif
