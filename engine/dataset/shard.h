/*
 * shard.h — what the streaming readers of sharded datasets share: WebDataset tar shards
 * (wds.h) and TFRecord files of tf.train.Example (tfrecord.h), the sources mkbatchfs
 * packs besides ImageFolders (pack.c).
 *
 * A reader pulls the bytes of one shard in order through a bfs_shard_in (pack.c reads a
 * file descriptor; the fuzz targets read memory) and never holds more than the sample it
 * returns: shards are never loaded whole.
 */
#ifndef BATCHFS_ENGINE_DATASET_SHARD_H
#define BATCHFS_ENGINE_DATASET_SHARD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The bytes of a shard, in order: read up to n bytes into buf and return how many (0 at
 * the end of the shard, fewer than n only there or when interrupted: the readers call
 * again) or a negative errno. */
typedef struct bfs_shard_in {
    ssize_t (*read_cb)(void *ctx, void *buf, size_t n);
    void *ctx;
} bfs_shard_in;

/* One sample of a shard, as a reader returns it. */
typedef struct bfs_shard_sample {
    const char *key;  /* its name in the shard (WebDataset key, "record N"): the reader's
                         storage, valid until its next call */
    uint64_t offset;  /* where it starts in the shard (bytes) */
    uint8_t *image;   /* the image's bytes (malloc'ed, the caller's to free), or NULL */
    size_t image_len; /* their count */
    int64_t label;    /* the label, when skip is NULL */
    const char *skip; /* NULL, or why the sample cannot be packed (static text: no image,
                         no label, a label that is not one integer...); image may still be
                         set and must be freed */
} bfs_shard_sample;

/* Labels of sharded sources are the integers the shards hold, used as they are: 0 up to
 * BFS_SHARD_LABEL_MAX (the .bfs class table's limit, BFS_MAX_CLASSES - 1). */
#define BFS_SHARD_LABEL_MAX ((1 << 24) - 1)

/* The largest image the WebDataset reader takes into memory (bytes); a larger member is
 * skipped. TFRecord images are bounded by their record (BFS_TFR_RECORD_MAX). */
#define BFS_SHARD_IMAGE_MAX ((size_t)256 << 20)

/* The formats of sharded sources; BFS_FORMAT_AUTO: told by the names (bfs_shard_list).
 * BFS_FORMAT_MANIFEST: JSON Lines or CSV manifests (manifest.h), listed by pack.c. */
enum { BFS_FORMAT_AUTO, BFS_FORMAT_WEBDATASET, BFS_FORMAT_TFRECORD, BFS_FORMAT_MANIFEST };

/* The shard files of a source, sorted by path (strcmp), and their sizes. */
typedef struct bfs_shard_list {
    int format; /* BFS_FORMAT_WEBDATASET or BFS_FORMAT_TFRECORD */
    char **paths;
    uint64_t *sizes;
    size_t n;
    uint64_t total; /* sum of sizes */
} bfs_shard_list;

/* bfs_shard_is_tar_name - does name end in ".tar"? bfs_shard_is_tfrecord_name - does it
 * end in ".tfrecord" or ".tfrecords", or hold ".tfrecord-" (tensorflow_datasets' shards,
 * NAME.tfrecord-00000-of-00016)? Both compare case-sensitively, as the tools writing them
 * name them. */
int bfs_shard_is_tar_name(const char *name);
int bfs_shard_is_tfrecord_name(const char *name);

/*
 * bfs_shard_list_make - the shards that srcs[0..nsrcs) name, for format (BFS_FORMAT_*).
 * Each source is a shard file, a directory (its non-hidden regular files at the top level
 * with a shard name of the format: .tar; or a TFRecord name), or a glob(3) pattern (when
 * no file has that name) of shard files. With BFS_FORMAT_AUTO the format is the one the
 * names show: every file named .tar, or every file a TFRecord name; a directory holding
 * such files and no sub-directory counts as shards. With the format given, a file is
 * taken whatever its name, named explicitly or by a pattern, and so is every regular
 * file at a directory's top unless some carry the format's names: then only those (a
 * tensorflow_datasets directory keeps its .json files beside the shards).
 * Returns 0 (l filled; sorted by path, each path once), 1 when the sources are not shards
 * (AUTO, one source: a directory that is not of shards, taken as an ImageFolder, or a
 * file of another name, taken as a .bfs), or -EINVAL (several sources that are not all
 * shards of one format, a directory or pattern without shards, a path given twice, a
 * format given with a source that is none of its), -ENOENT, -ENOMEM, with err naming the
 * source. bfs_shard_list_free releases l (accepts a zeroed one).
 */
int bfs_shard_list_make(const char *const *srcs, size_t nsrcs, int format, bfs_shard_list *l,
                        char *err, size_t errlen);
void bfs_shard_list_free(bfs_shard_list *l);

#endif
