/*
 * pipeline.h — pipeline options: the engine's option table, parsing and validation of
 * `key=value` text, the canonical pipeline text and its fingerprint.
 *
 * Neighbours: mountopts/ composes this table with libfuse's options for `-o` and
 * `-o spec=FILE` (it can walk the table with bfs_pipeline_option_at); `batchfs --bench
 * -o ...` parses with it directly; the engine reads the struct. No FUSE headers here.
 * docs/options.md is the user's reference; engine/pipeline_table.c holds the one table
 * that parsing, error messages, the canonical text and --help are generated from
 * (engine/pipeline.c; the values of its rows in pipeline_values.c, the mixture options
 * in pipeline_mix.c).
 *
 * fields=, text_len=, token_len= and min_box_area= apply to multi-field datasets
 * (bfs_pipeline_check_fields) and enter their canonical text only; datasets of one field
 * fingerprint as before. pad= enters the canonical text only when 1, so that mounts
 * made before it existed keep their fingerprints.
 *
 * Three classes of option (bfs_pipeline_option.cls):
 *   BFS_OPT_DATA    seed, batch, shuffle, drop_last, shard, pad, size, augment, scale, ratio,
 *                   flip, dtype, normalize, layout, bad_sample: they change the bytes of
 *                   batches, so they enter the canonical text and the fingerprint;
 *   BFS_OPT_LISTING epochs: how many epoch directories are listed. Epoch N's batches are
 *                   the same whatever `epochs` is (the plan is keyed by (seed, epoch)), so
 *                   it stays out of the fingerprint and mounts that differ only in it share
 *                   the cache directory; /pipeline may show it on a line of its own;
 *   BFS_OPT_KNOB    threads .. remote_claim_ms: performance knobs, transports (remote*)
 *                   and group (dynamic sharding, claims.h). They never change a byte,
 *                   never enter the fingerprint: mounts that differ only in knobs serve
 *                   identical bytes and share caches (the determinism contract).
 *
 * Usage: bfs_pipeline_defaults, then any number of bfs_pipeline_set / _parse /
 * _parse_spec calls (a key given twice: the last value wins, like mount options), then
 * bfs_pipeline_finish once, then canonical / fingerprint. The caller never frees
 * anything; every function is thread-safe on distinct structs. Numbers are read and
 * written in the "C" locale whatever the process's LC_NUMERIC is.
 */
#ifndef BATCHFS_ENGINE_PIPELINE_H
#define BATCHFS_ENGINE_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

enum { BFS_SHUFFLE_FULL, BFS_SHUFFLE_PAGES, BFS_SHUFFLE_NONE, BFS_SHUFFLE_ROWS }; /* ROWS: concat */
enum { BFS_AUG_TRAIN, BFS_AUG_EVAL, BFS_AUG_NONE };
enum { BFS_OUT_U8, BFS_OUT_F16, BFS_OUT_BF16, BFS_OUT_F32 };
enum { BFS_LAYOUT_NHWC, BFS_LAYOUT_NCHW };
enum { BFS_BAD_SUBSTITUTE, BFS_BAD_FAIL };
enum { BFS_REMOTE_LOCAL, BFS_REMOTE_WAIT };              /* remote_fallback= */
enum { BFS_PACK_CONCAT, BFS_PACK_PAD, BFS_PACK_BUCKET }; /* pack= (token datasets) */

#define BFS_MAX_BUCKETS  32u      /* buckets=B1:...: at most this many bounds */
#define BFS_MAX_TEXT_LEN 1048576u /* text_len=N: bytes per text row */
/* fields=NAME,...: room for 64 names (BFS_FIELD_MAX) of 31 bytes (BFS_FIELD_NAME_MAX) and
 * their commas */
#define BFS_FIELDS_TEXT 2048u
#define BFS_MAX_SEQ_LEN 1048576u /* seq_len= and bucket bounds: tokens per row */
/* source=: a mixture of at most BFS_MIX_SOURCES sources, its text at most BFS_MIX_TEXT
 * bytes; mix_schedule=: at most BFS_SCHEDULE_POINTS points in BFS_SCHEDULE_TEXT bytes */
#define BFS_MIX_SOURCES     64u
#define BFS_MIX_TEXT        8192u
#define BFS_SCHEDULE_POINTS 32u
#define BFS_SCHEDULE_TEXT   4096u
enum { BFS_MIX_LABELS_SHARED, BFS_MIX_LABELS_OFFSET }; /* mix_labels= */

/* Version of the algorithms that produce batch bytes (plan order, RNG streams, crop
 * geometry, decode and scaled-IDCT policy, resampler, output conversion, batch header and
 * layout). It is hashed into every fingerprint: bump it with any change that alters a
 * served byte, or host-wide caches would serve batches computed by the old code.
 * batchfs/2: labels and indices moved ahead of the images (engine/safetensors.h). */
#define BFS_OUTPUT_VERSION "batchfs/2"

#define BFS_AUTO      (-1) /* value of threads/prefetch/cache_mb when "auto" */
#define BFS_HUGE_AUTO 2    /* huge_pages=auto (the enum's third name) */

/* Size of an err buffer that holds every message of this module whole (values quoted in
 * messages are cut at 64 bytes); only a spec file name longer than ~500 bytes truncates. */
#define BFS_PIPELINE_ERRLEN 1024
/* Bytes that always hold the canonical text (fields= may take 2 KiB, mix_schedule= 4). */
#define BFS_CANONICAL_MAX 8192

typedef struct bfs_pipeline_opts {
    /* data-changing (BFS_OPT_DATA), except epochs (BFS_OPT_LISTING) */
    uint64_t seed;        /* seed=N (0), 0..2^64-1 */
    uint32_t batch;       /* batch=N (256), 1..65536 */
    uint32_t epochs;      /* epochs=N (100), 1..1e6; not in the fingerprint */
    int shuffle;          /* shuffle=full|pages|none|rows */
    int drop_last;        /* drop_last=1|0 (1) */
    uint32_t shard_index; /* shard=I/N (0/1), I < N <= 65536 */
    uint32_t shard_count;
    int pad;               /* pad=0|1 (0): shards of ceil(n/N), repeats marked (plan.h) */
    uint32_t out_h, out_w; /* size=H or HxW (224), 1..8192 */
    int augment;           /* augment=train|eval|none */
    double scale[2];       /* scale=A:B (0.08:1), 0 < A <= B <= 1 */
    double ratio[2];       /* ratio=A:B (3/4:4/3), 0 < A <= B <= 100 */
    double flip;           /* flip=P (0.5), 0..1 */
    int dtype;             /* dtype=u8|f16|bf16|f32 (u8) */
    int normalize;         /* 1 when mean/std were set (imagenet default for float dtypes) */
    float mean[3], std[3]; /* normalize=imagenet|none|m0,m1,m2/s0,s1,s2: float outputs are
                            * always (x/255 - mean)/std; none stores mean 0, std 1, so
                            * float values are x/255 (torchvision ToTensor); u8 outputs
                            * are raw pixels and ignore mean/std */
    int layout;            /* layout=nhwc|nchw */
    int bad_sample;        /* bad_sample=substitute|fail */
    /* data-changing, token datasets only (docs/sequences.md); image datasets refuse them
     * and their canonical text leaves them out, as token datasets' leaves out the image
     * options from size to layout */
    int pack;                          /* pack=concat|pad|bucket */
    uint32_t seq_len;                  /* seq_len=T (1024), 1..BFS_MAX_SEQ_LEN */
    uint32_t buckets[BFS_MAX_BUCKETS]; /* buckets=B1:B2:... ascending (pack=bucket) */
    uint32_t nbuckets;                 /* 0: none given */
    uint32_t batch_tokens;             /* batch_tokens=N (0: rows = batch), pack=bucket */
    uint32_t pad_id;                   /* pad_id=N (0): the padding token, pad|bucket */
    int positions;                     /* positions=0|1 (0): concat adds `positions` */
    int sequences; /* not an option: the engine sets it when the dataset holds tokens */
    /* data-changing, multi-field datasets only (.bfs version 3 with more than one field:
     * docs/multimodal.md); the canonical text of other datasets leaves them out */
    char fields[BFS_FIELDS_TEXT]; /* fields=all|NAME,NAME,... ("" = all): served fields;
                                   * bfs_pipeline_check_fields rewrites it to the chosen
                                   * names in the dataset's order */
    uint32_t text_len;            /* text_len=max|N (0 = max), 1..BFS_MAX_TEXT_LEN */
    uint32_t token_len;           /* token_len=max|N (0 = max), 1..BFS_MAX_TEXT_LEN: ids per
                                   * row of tokens fields */
    uint32_t min_box_area;        /* min_box_area=N (1): boxes left smaller (output px²)
                                   * are dropped */
    int fielded; /* not an option: set by bfs_pipeline_check_fields (more than one field) */
    /* data-changing, mixtures only (docs/mixing.md): the canonical text shows mix_labels,
     * epoch_samples and mix_schedule only when source= is set; the sources and weights
     * enter the fingerprint through the dataset identity (bfs_pipeline_mix_identity) */
    char mix[BFS_MIX_TEXT];               /* source=PATH[:W]+PATH[:W]+... ("" = the SOURCE
                                           * argument): as given, '+' between sources */
    int mix_labels;                       /* mix_labels=shared|offset */
    uint64_t epoch_samples;               /* epoch_samples=N (0 = the sources' sum) */
    char mix_schedule[BFS_SCHEDULE_TEXT]; /* mix_schedule=[step:|linear:]E@W/W/..+.. ("" =
                                           * none), normalized by its setter */
    /* performance knobs (BFS_OPT_KNOB): never change bytes */
    int threads;             /* threads=auto|N (BFS_AUTO), 1..1024 */
    int prefetch;            /* prefetch=auto|N (BFS_AUTO), 0..1024 */
    int64_t cache_mb;        /* cache_mb=auto|N (BFS_AUTO), 0..2^40 MiB */
    char cache_dir[1024];    /* cache_dir=PATH|none ("" = none), absolute */
    int64_t cache_dir_mb;    /* cache_dir_mb=N (4096), 1..2^40 */
    int64_t sample_cache_mb; /* sample_cache_mb=N (0), 0..2^40 */
    int cpu_budget;          /* cpu_budget=N (online CPUs; 0 = default), 1..1024 */
    int64_t ram_mb;          /* ram_mb=N (half of free RAM; 0 = default), 16..2^40 */
    int huge_pages;          /* huge_pages=0|1|auto (BFS_HUGE_AUTO): batch files on huge
                              * pages (exec.h); auto: once memory is recycled */
    char remote[512];        /* remote=redis://...|none ("" = none): docs/scale-out.md */
    int remote_ttl;          /* remote_ttl=S (600), 1..30 days */
    int remote_wait_ms;      /* remote_wait_ms=N (10000), 1..86400000 */
    int remote_fallback;     /* remote_fallback=local|wait (BFS_REMOTE_*) */
    int remote_claim_ms;     /* remote_claim_ms=N (30000), 1..86400000: workers */
    char remote_key[512];    /* remote_key=FILE|none ("" = none): values authenticated with
                              * the secret in FILE (engine/remote/remote.h) */
    char group[65];          /* group=NAME|none ("" = none): dynamic sharding (claims.h) */
    /* a spec file's `fingerprint = X` line (MNT/pipeline's): the pipeline must have it */
    uint64_t want_fingerprint;
    int want_fingerprint_set;
    /* bookkeeping for validation: which keys were given explicitly */
    uint64_t given; /* bit i: option i (bfs_pipeline_option_at(i)) was set */
} bfs_pipeline_opts;

enum { BFS_OPT_DATA, BFS_OPT_LISTING, BFS_OPT_KNOB };

/* One row of the option table, as mountopts/ and tools see it (static storage). */
typedef struct bfs_pipeline_option {
    const char *name;   /* "batch" */
    const char *syntax; /* value syntax: "N", "full|pages|none", "I/N" */
    const char *def;    /* the default as --help shows it: "256", "online CPUs" */
    const char *help;   /* one-sentence meaning */
    int cls;            /* BFS_OPT_DATA, BFS_OPT_LISTING or BFS_OPT_KNOB */
} bfs_pipeline_option;

/* bfs_pipeline_option_at - row i of the option table (0-based, in the documented order),
 * or NULL when i is past the end. Bit i of bfs_pipeline_opts.given refers to it. */
const bfs_pipeline_option *bfs_pipeline_option_at(size_t i);

/*
 * bfs_pipeline_check_kind - after bfs_pipeline_finish, once the dataset is known: refuse
 * options given for the other kind of dataset (size= on token sequences, pack= on
 * images) and token options given other values than their defaults that contradict
 * pack= (buckets= without pack=bucket, ...; at their defaults they are accepted, as a
 * spec file made from MNT/pipeline lists them),
 * then set o->sequences, which selects the options the canonical text shows. Returns 0 or
 * -EINVAL with a message naming the option and what to do instead.
 */
int bfs_pipeline_check_kind(bfs_pipeline_opts *o, int sequences, char *err, size_t errlen);

/*
 * bfs_pipeline_check_fields - after bfs_pipeline_check_kind, for an image dataset whose
 * samples have n fields called names[0..n) (a classic dataset: one, "images"), of kinds
 * kind[0..n) (BFS_FIELD_*, engine/dataset/bfs.h). Resolves fields= against them: every
 * name must be one of them (-EINVAL naming the unknown one and listing the dataset's
 * fields), and at least one chosen field must be an image; o->fields becomes the chosen
 * names, comma separated in the dataset's order (the same text whatever order or
 * repetition the user wrote, so the same choice has one fingerprint), *chosen bit i the
 * choice. text_len= (token_len=) other than max where no chosen field is text (tokens),
 * and min_box_area= other than 1 where none is boxes, are refused. Sets o->fielded = n >
 * 1: only then do the multi-field options enter the canonical text. Returns 0 or
 * -EINVAL.
 */
int bfs_pipeline_check_fields(bfs_pipeline_opts *o, const char *const *names,
                              const unsigned char *kind, uint32_t n, uint64_t *chosen, char *err,
                              size_t errlen);

/* A mixture as source= and mix_schedule= give it (bfs_pipeline_mix). */
typedef struct bfs_mix_desc {
    uint32_t n;                        /* sources, 1..BFS_MIX_SOURCES */
    const char *path[BFS_MIX_SOURCES]; /* into buf */
    double weight[BFS_MIX_SOURCES];    /* > 0; all 0 when none was given (sizes decide) */
    uint32_t npoints;                  /* mix_schedule= points, 0 = none */
    int linear;                        /* 1: linear between points; 0: step */
    uint64_t at[BFS_SCHEDULE_POINTS];  /* epochs, ascending */
    double w[BFS_SCHEDULE_POINTS][BFS_MIX_SOURCES]; /* >= 0, one > 0 per point */
    char buf[BFS_MIX_TEXT];
} bfs_mix_desc;

/*
 * bfs_pipeline_mix - o's mixture (o->mix set) into *d. Returns 0 or -EINVAL (a schedule
 * whose points have another number of weights than there are sources; err says which).
 */
int bfs_pipeline_mix(const bfs_pipeline_opts *o, bfs_mix_desc *d, char *err, size_t errlen);

/* bfs_pipeline_mix_weights - the normalized weights (summing to 1) of epoch `epoch`:
 * the schedule's (step: the last point at or before epoch, the first before it; linear:
 * interpolated between the points around it), else the sources' given weights, else
 * their counts' shares (count[k] samples in source k). */
void bfs_pipeline_mix_weights(const bfs_mix_desc *d, const uint64_t *count, uint64_t epoch,
                              double *w);

/* bfs_pipeline_mix_identity - the dataset identity of a mixture: the sources' identity
 * (bfs_source_open_mix's) and the given weights, so that another weight is another
 * fingerprint. */
uint64_t bfs_pipeline_mix_identity(const bfs_mix_desc *d, uint64_t sources_identity);

/* bfs_pipeline_mix_display - "PATH:W, PATH:W" (the weights as given) for MNT/pipeline's
 * `source =` line, which a spec file reads back. Returns snprintf's convention. */
int bfs_pipeline_mix_display(const bfs_mix_desc *d, char *buf, size_t cap);

/* bfs_pipeline_defaults - fill o with every default (normalize decided at finish;
 * cpu_budget and ram_mb left 0, resolved by the engine from the host). */
void bfs_pipeline_defaults(bfs_pipeline_opts *o);

/*
 * bfs_pipeline_set - parse one option. key is the option name (case-sensitive), value its
 * text (NULL for a bare key, which is an error: every option needs a value). Returns 0;
 * -ENOENT for an unknown key (err names it, suggests a near miss and lists the known
 * ones); -EINVAL for a bad or missing value (err names the option, the value and what is
 * allowed, e.g. "batch=0: must be an integer in 1..65536"). On error o is unchanged.
 * err may be NULL; a message longer than errlen is truncated (see BFS_PIPELINE_ERRLEN).
 */
int bfs_pipeline_set(bfs_pipeline_opts *o, const char *key, const char *value, char *err,
                     size_t errlen);

/*
 * bfs_pipeline_parse - parse "k=v,k=v" (as after -o); empty items are skipped. Commas
 * inside values are not supported except in normalize=m0,m1,m2/s0,s1,s2: after
 * `normalize=`, an item that starts with a digit, a sign or '.' continues its value
 * (option names start with a letter, so this is unambiguous); after `fields=`, an item
 * without '=' continues its list (every option has a value). Stops at the first error:
 * options before it are applied. Returns bfs_pipeline_set's errors, or -ENOMEM.
 */
int bfs_pipeline_parse(bfs_pipeline_opts *o, const char *text, char *err, size_t errlen);

/*
 * bfs_pipeline_parse_spec - parse a spec file's text: one `key = value` per line,
 * whitespace around key and value ignored, blank lines ignored, `#` starts a comment at
 * the start of a line or after a space or tab (so a path may contain '#'), CRLF line ends
 * accepted. file_name (NULL: "spec") prefixes every message: "FILE:LINE: ...". The
 * identity lines of MNT/pipeline are accepted too, so that text is a spec file: `source`
 * is ignored (SOURCE on the command line is the dataset), `fingerprint` (16 hex digits)
 * sets want_fingerprint, which bfs_engine_create checks. Stops at the first error.
 * Returns as bfs_pipeline_set, -EINVAL for a line that is not `key = value` or a bad
 * fingerprint, or -ENOMEM.
 */
int bfs_pipeline_parse_spec(bfs_pipeline_opts *o, const char *text, const char *file_name,
                            char *err, size_t errlen);

/*
 * bfs_pipeline_finish - apply cross-option rules after all options are set: normalize
 * defaults to imagenet for float dtypes and none for u8; normalize other than none with
 * dtype=u8 is an error; shard index < count; every field in range (the struct may have
 * been edited directly). Idempotent. Returns 0 or -EINVAL (err explains).
 */
int bfs_pipeline_finish(bfs_pipeline_opts *o, char *err, size_t errlen);

/*
 * bfs_pipeline_canonical - the data-changing options (BFS_OPT_DATA) as canonical text,
 * one `key = value` line each in table order, with fixed formatting: integers in decimal,
 * size as HxW, reals in the shortest form that reads back to the same double (0.08, not
 * 0.08000000000000000166), normalize as numbers for float dtypes ("none" for u8). The text
 * is a valid spec file that reproduces the same canonical text. Call after finish.
 * Returns the length written (excluding NUL), or -ENOSPC if cap is too small
 * (BFS_CANONICAL_MAX is always enough).
 */
int bfs_pipeline_canonical(const bfs_pipeline_opts *o, char *buf, size_t cap);

/*
 * bfs_pipeline_fingerprint - XXH64 (seed 0) of "batchfs/2\n" + dataset_identity as 16
 * lower-case hex digits + "\n" + canonical text. dataset_identity: the .bfs header
 * checksum, or a hash of an ImageFolder's sorted file list with sizes and mtimes.
 */
uint64_t bfs_pipeline_fingerprint(const bfs_pipeline_opts *o, uint64_t dataset_identity);

/* bfs_pipeline_help - the options with defaults and meaning in aligned columns
 * ("option", "default", "meaning"), grouped by class, for --help; starts with the column
 * headings (the caller prints its own title line), lines of at most 100 columns, ends
 * with a newline. Returns a static string, built once (thread-safe). */
const char *bfs_pipeline_help(void);

#endif
