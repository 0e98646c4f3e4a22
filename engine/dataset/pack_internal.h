/*
 * pack_internal.h — what the files of the packer share (engine/dataset/ only; pack.h is
 * its header):
 *
 *   pack.c            the driver: the sources (folders, a .bfs, shards, manifests) read
 *                     in order, the window of work, the ordered append, the report
 *   pack_transform.c  the workers: each file or sample through the transform
 *   pack_tokens.c     token sequences (o->tokens, o->token_format: flat, .npy, Megatron)
 *   pack_progress.c   the progress bar's line and the temporary file's path, which
 *                     every packer shares with its command line
 *
 * Calls go one way: pack.c -> pack_transform.c, pack_tokens.c -> pack_progress.c.
 */
#ifndef BATCHFS_ENGINE_DATASET_PACK_INTERNAL_H
#define BATCHFS_ENGINE_DATASET_PACK_INTERNAL_H

#include "engine/dataset/pack.h"
#include "engine/dataset/bfs.h"
#include "engine/dataset/folder.h"
#include "engine/dataset/manifest.h"
#include "engine/dataset/record.h"
#include "engine/dataset/tfrecord.h"
#include "engine/dataset/wds.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

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

typedef struct worker_arg {
    pack *p;
    atomic_int *cancel;
} worker_arg;

/* bfs_pack_worker - a transform thread (pthread start routine; arg: a worker_arg): claims
 * items in order, at most p->window ahead of the writer, transforms each into its slot
 * of p->slots, until the items end, p->stop or *cancel. */
void *bfs_pack_worker(void *arg);

/* The pack's temporary output file while one is being written, "" otherwise: for
 * signal handlers (bfs_pack_temp_path). */
extern char bfs_pack_temp_file[4096];

/* bfs_pack_progress_line - the progress bar's line: frac done, what is counted (e.g.
 * "12/40 files"), the bytes read so far; at most ten redraws a second, and always the
 * final one. Nothing unless o->progress. */
void bfs_pack_progress_line(const bfs_pack_opts *o, double frac, const char *count,
                            uint64_t bytes_in, double t0, int final);

/* bfs_pack_tokens_flat - a flat file of token ids (o->tokens 2 or 4 bytes each) into a
 * token .bfs at out (pack_tokens.c); bfs_pack_sources' returns. */
int bfs_pack_tokens_flat(const char *src, const char *out, const bfs_pack_opts *o,
                         bfs_pack_report *rep, atomic_int *cancel, char *err, size_t errlen);

/* bfs_pack_tokens_files - token ids with document offsets (o->token_format: an .npy of
 * offsets, or a Megatron .bin/.idx pair) into a token .bfs at out (pack_tokens.c);
 * bfs_pack_sources' returns. */
int bfs_pack_tokens_files(const char *src, const char *out, const bfs_pack_opts *o,
                          bfs_pack_report *rep, atomic_int *cancel, char *err, size_t errlen);

#endif
