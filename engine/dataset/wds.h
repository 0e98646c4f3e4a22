/*
 * wds.h — WebDataset tar shards, read as a stream: a tar reader (bfs_tar_*) and the
 * WebDataset sample grouping over it (bfs_wds_*), used by mkbatchfs (pack.c) and fuzzed
 * by tests/fuzz/fuzz_wds.c.
 *
 * Tar: 512-byte headers read in order (POSIX ustar with its name prefix, old v7 and GNU
 * headers), each header's checksum verified (unsigned sum, or the signed sum old tars
 * wrote); sizes in octal or GNU base-256; GNU long names ('L') and pax extended headers
 * ('x': path= and size= apply to the next member; other keys and global 'g' headers are
 * skipped); members other than regular files (directories, links, devices) are skipped.
 * The archive ends at its first all-zero block; ending anywhere else (inside a header or a
 * member, or without that block) is an error, as is a bad checksum: the rest of such a
 * shard cannot be trusted.
 *
 * WebDataset (github.com/webdataset/webdataset): a sample is a run of consecutive members
 * whose names share a key, the name up to the first '.' of its last component ("a/b.c.jpg":
 * key "a/b", extension "c.jpg"). Names without such a '.' are not part of any sample. Of a
 * sample, the image is its first member whose extension is jpg or jpeg (any case), or the
 * extension image_ext; the label is its .cls member (a decimal integer, blanks around it
 * allowed) or, without one, the integer at label_key in its .json member (a JSON object).
 * Other members are read past.
 */
#ifndef BATCHFS_ENGINE_DATASET_WDS_H
#define BATCHFS_ENGINE_DATASET_WDS_H

#include "engine/dataset/record.h"
#include "engine/dataset/shard.h"

#include <stddef.h>
#include <stdint.h>

#define BFS_TAR_NAME_MAX 4096 /* longest member name taken (PATH_MAX) */

typedef struct bfs_tar {
    bfs_shard_in in;
    uint64_t off;     /* bytes of the stream consumed */
    uint64_t hdr_off; /* the current member's header (its first extended header, if any) */
    uint64_t size;    /* the current member's data bytes */
    uint64_t left;    /* of them, not read yet */
    char name[BFS_TAR_NAME_MAX + 1]; /* the current member's name */
    int done;                        /* the end-of-archive block was read */
    int bad_checksum;                /* set when bfs_tar_next failed on a header's checksum (for the
                                        fuzz target, which repairs it at off - 512 and tries again) */
} bfs_tar;

/* bfs_tar_init - a reader of the tar stream in. */
void bfs_tar_init(bfs_tar *t, bfs_shard_in in);

/*
 * bfs_tar_next - read past the rest of the current member and on to the next regular
 * file: its name, size and hdr_off are set and its data is next in the stream.
 * Returns 1 (a member), 0 (the end-of-archive block), -EINVAL (not a tar, a bad header
 * checksum, a bad number field, a bad pax record, a name over BFS_TAR_NAME_MAX, the
 * stream ending early: err says what, at which byte), or the read callback's error.
 */
int bfs_tar_next(bfs_tar *t, char *err, size_t errlen);

/*
 * bfs_tar_read - the next n bytes of the current member's data (n <= t->left) into buf.
 * Returns 0, -EINVAL (the stream ended inside the member: err names it and the byte) or
 * the read callback's error.
 */
int bfs_tar_read(bfs_tar *t, void *buf, size_t n, char *err, size_t errlen);

typedef struct bfs_wds {
    bfs_tar tar;
    const char *image_ext; /* NULL: jpg or jpeg */
    const char *label_key; /* NULL: "label" */
    int pending;           /* tar holds a member read but not yet taken into a sample */
    uint64_t ignored;      /* members with no key (no '.' in their last component) */
    char key[BFS_TAR_NAME_MAX + 1];
} bfs_wds;

/* bfs_wds_init - a WebDataset reader of the tar stream in; image_ext and label_key as in
 * bfs_wds (the strings must outlive the reader). */
void bfs_wds_init(bfs_wds *w, bfs_shard_in in, const char *image_ext, const char *label_key);

/*
 * bfs_wds_next - the next sample into *s (its key, the offset of its first member's
 * header, the image bytes, the label, or why it cannot be packed; see bfs_shard_sample).
 * A sample without an image member, without a label, with a .cls that is not a decimal
 * integer, a .json that is not an object or whose label_key is not one integer, a label
 * outside 0..BFS_SHARD_LABEL_MAX or an image over BFS_SHARD_IMAGE_MAX comes back with
 * s->skip set. Returns 1 (a sample), 0 (the end of the shard), or bfs_tar_next's and
 * bfs_tar_read's errors (-ENOMEM when an image cannot be held); then s holds nothing.
 */
int bfs_wds_next(bfs_wds *w, bfs_shard_sample *s, char *err, size_t errlen);

/*
 * bfs_wds_next_members - the next sample as all its members (mkbatchfs keeping every
 * field): m is cleared, then holds each member in the shard's order, named by its
 * extension ("jpg", "seg.png"), its bytes read whole (one over BFS_SHARD_IMAGE_MAX is
 * read past and comes back bad, "over 256 MiB"); the sample's key is w->key and *offset
 * its first member's header. Returns 1, 0 (the end: m empty), or bfs_tar_next's and
 * bfs_tar_read's errors, -ENOMEM (m empty then).
 */
int bfs_wds_next_members(bfs_wds *w, bfs_members *m, uint64_t *offset, char *err, size_t errlen);

/*
 * bfs_wds_json_label - the integer at key of the JSON object in p[0..n), parsed by
 * jansson (RFC 8259; the key compared after unescaping). Returns 0 with *v set, 1 when
 * the object has no such key, 2 when its value is not an integer (a fraction, an
 * exponent, another type), -EINVAL when the text is not one JSON object, holds a key
 * twice (anywhere), an integer beyond int64 or a NUL byte.
 */
int bfs_wds_json_label(const char *p, size_t n, const char *key, int64_t *v);

/* bfs_wds_cls_label - a .cls member's text: a decimal integer, ASCII blanks around it
 * allowed. Returns 0 with *v set, or -EINVAL. */
int bfs_wds_cls_label(const char *p, size_t n, int64_t *v);

#endif
