/*
 * pipeline.h — pipeline options: the engine's option table, parsing and validation of
 * `key=value` text, the canonical pipeline text and its fingerprint.
 *
 * Neighbours: mountopts/ composes this table with libfuse's options for `-o` and
 * `-o spec=FILE`; `batchfs --bench -o ...` parses with it directly; the engine reads the
 * struct. No FUSE headers here.
 *
 * Data-changing options (seed .. bad_sample) enter the canonical text and the
 * fingerprint; performance knobs (threads .. ram_mb) never do, so two mounts that differ
 * only in knobs serve identical bytes and share caches (the determinism contract).
 */
#ifndef BATCHFS_ENGINE_PIPELINE_H
#define BATCHFS_ENGINE_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

enum { BFS_SHUFFLE_FULL, BFS_SHUFFLE_PAGES, BFS_SHUFFLE_NONE };
enum { BFS_AUG_TRAIN, BFS_AUG_EVAL, BFS_AUG_NONE };
enum { BFS_OUT_U8, BFS_OUT_F16, BFS_OUT_BF16, BFS_OUT_F32 };
enum { BFS_LAYOUT_NHWC, BFS_LAYOUT_NCHW };
enum { BFS_BAD_SUBSTITUTE, BFS_BAD_FAIL };

#define BFS_AUTO (-1) /* value of threads/prefetch/cache_mb when "auto" */

typedef struct bfs_pipeline_opts {
    /* data-changing */
    uint64_t seed;            /* seed=N (0) */
    uint32_t batch;           /* batch=N (256), 1..65536 */
    uint32_t epochs;          /* epochs=N (100), 1..1e6 */
    int shuffle;              /* shuffle=full|pages|none */
    int drop_last;            /* drop_last=1|0 (1) */
    uint32_t shard_index;     /* shard=I/N (0/1) */
    uint32_t shard_count;
    uint32_t out_h, out_w;    /* size=H or HxW (224), 1..8192 */
    int augment;              /* augment=train|eval|none */
    double scale[2];          /* scale=A:B (0.08:1), 0 < A <= B <= 1 */
    double ratio[2];          /* ratio=A:B (3/4:4/3), 0 < A <= B */
    double flip;              /* flip=P (0.5), 0..1 */
    int dtype;                /* dtype=u8|f16|bf16|f32 (u8) */
    int normalize;            /* 1 when mean/std apply (imagenet default for float dtypes) */
    float mean[3], std[3];    /* normalize=imagenet|none|m0,m1,m2/s0,s1,s2 (x/255 - mean)/std */
    int layout;               /* layout=nhwc|nchw */
    int bad_sample;           /* bad_sample=substitute|fail */
    /* performance knobs: never change bytes */
    int threads;              /* threads=auto|N (BFS_AUTO) */
    int prefetch;             /* prefetch=auto|N (BFS_AUTO) */
    int64_t cache_mb;         /* cache_mb=auto|N (BFS_AUTO) */
    char cache_dir[1024];     /* cache_dir=PATH|none ("" = none) */
    int64_t cache_dir_mb;     /* cache_dir_mb=N (4096) */
    int64_t sample_cache_mb;  /* sample_cache_mb=N (0) */
    int cpu_budget;           /* cpu_budget=N (online CPUs; 0 = default) */
    int64_t ram_mb;           /* ram_mb=N (half of available RAM; 0 = default) */
    /* bookkeeping for validation: which keys were given explicitly */
    uint32_t given;           /* bit per option, see pipeline.c */
} bfs_pipeline_opts;

/* bfs_pipeline_defaults - fill o with every default (normalize decided at finish). */
void bfs_pipeline_defaults(bfs_pipeline_opts *o);

/*
 * bfs_pipeline_set - parse one option. key is the option name, value its text (NULL for
 * a bare key). Returns 0; -ENOENT for an unknown key (err names it and lists the known
 * ones); -EINVAL for a bad value (err names the option, the value and what is allowed).
 */
int bfs_pipeline_set(bfs_pipeline_opts *o, const char *key, const char *value, char *err,
                     size_t errlen);

/*
 * bfs_pipeline_parse - parse "k=v,k=v" (as after -o). Commas inside values are not
 * supported except in normalize=, whose value is m0,m1,m2/s0,s1,s2 (parsed greedily).
 * Returns bfs_pipeline_set's errors.
 */
int bfs_pipeline_parse(bfs_pipeline_opts *o, const char *text, char *err, size_t errlen);

/*
 * bfs_pipeline_parse_spec - parse a spec file's text: one `key = value` per line, `#`
 * comments, blank lines. Errors name the line number. Returns as bfs_pipeline_set, or
 * -EINVAL for a malformed line.
 */
int bfs_pipeline_parse_spec(bfs_pipeline_opts *o, const char *text, const char *file_name,
                            char *err, size_t errlen);

/*
 * bfs_pipeline_finish - apply cross-option rules after all options are set: normalize
 * defaults to imagenet for float dtypes and none for u8; normalize with dtype=u8 is an
 * error; shard index < count. Returns 0 or -EINVAL (err explains).
 */
int bfs_pipeline_finish(bfs_pipeline_opts *o, char *err, size_t errlen);

/*
 * bfs_pipeline_canonical - the data-changing options as canonical text, one `key = value`
 * per line in a fixed order with fixed number formatting (what /pipeline shows).
 * Returns the length written (excluding NUL), or -ENOSPC if cap is too small.
 */
int bfs_pipeline_canonical(const bfs_pipeline_opts *o, char *buf, size_t cap);

/*
 * bfs_pipeline_fingerprint - XXH64 of "batchfs/1\n" + dataset_identity (16 hex digits)
 * + "\n" + canonical text. dataset_identity: the .bfs header checksum, or a hash of an
 * ImageFolder's sorted file list with sizes and mtimes.
 */
uint64_t bfs_pipeline_fingerprint(const bfs_pipeline_opts *o, uint64_t dataset_identity);

/* bfs_pipeline_help - the options with defaults and meaning, aligned columns, for
 * --help. Returns a static string. */
const char *bfs_pipeline_help(void);

#endif
