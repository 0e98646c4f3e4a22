/*
 * pipeline_internal.h — what the files of the pipeline options share (engine/ only;
 * engine/api.h is the engine's door):
 *
 *   pipeline_table.c   the option table, one row per option: name, class, syntax,
 *                      default, help, its field and the setter and formatter of its value
 *   pipeline_values.c  the values: parsing and formatting numbers in the "C" locale,
 *                      and the setter and formatter of each kind of value
 *   pipeline_mix.c     source= and mix_schedule=, and a mixture's description
 *   pipeline.c         what is generated from the table: parsing `-o` text and spec
 *                      files, messages, defaults, validation, the canonical text and
 *                      fingerprint, --help
 *
 * Calls go one way: pipeline.c uses the table, the values and the mixture options; the
 * table names setters of the values and of the mixture options, and those use the values.
 * Nothing calls back into pipeline.c. The public functions that mountopts/ and gpu/ call
 * (bfs_pipeline_set, _option_at, _mix, ...) are in pipeline.c.
 */
#ifndef BATCHFS_ENGINE_PIPELINE_INTERNAL_H
#define BATCHFS_ENGINE_PIPELINE_INTERNAL_H

#include "engine/pipeline.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Row indices, in documented order (DESIGN.md's table); bit i of opts.given is row i. */
enum {
    OPT_SEED,
    OPT_BATCH,
    OPT_EPOCHS,
    OPT_SHUFFLE,
    OPT_DROP_LAST,
    OPT_SHARD,
    OPT_PAD,
    OPT_SIZE,
    OPT_SIZE_SCHEDULE,
    OPT_AUGMENT,
    OPT_SCALE,
    OPT_RATIO,
    OPT_FLIP,
    OPT_COLOR_JITTER,
    OPT_GRAYSCALE_P,
    OPT_RANDAUGMENT,
    OPT_TRIVIALAUGMENT,
    OPT_AUTOAUGMENT,
    OPT_ERASING,
    OPT_ERASING_MODE,
    OPT_MIXUP,
    OPT_CUTMIX,
    OPT_MIX_PROB,
    OPT_SWITCH_PROB,
    OPT_LABEL_SMOOTHING,
    OPT_CLASSES,
    OPT_DTYPE,
    OPT_NORMALIZE,
    OPT_LAYOUT,
    OPT_BAD_SAMPLE,
    OPT_PACK,
    OPT_SEQ_LEN,
    OPT_BUCKETS,
    OPT_BATCH_TOKENS,
    OPT_PAD_ID,
    OPT_POSITIONS,
    OPT_FIELDS,
    OPT_TEXT_LEN,
    OPT_TOKEN_LEN,
    OPT_MIN_BOX_AREA,
    OPT_SOURCE,
    OPT_MIX_LABELS,
    OPT_EPOCH_SAMPLES,
    OPT_MIX_SCHEDULE,
    OPT_THREADS,
    OPT_PREFETCH,
    OPT_CACHE_MB,
    OPT_CACHE_DIR,
    OPT_CACHE_DIR_MB,
    OPT_SAMPLE_CACHE_MB,
    OPT_CPU_BUDGET,
    OPT_RAM_MB,
    OPT_HUGE_PAGES,
    OPT_GPU_POOL_MB,
    OPT_REMOTE,
    OPT_REMOTE_TTL,
    OPT_REMOTE_WAIT_MS,
    OPT_REMOTE_FALLBACK,
    OPT_REMOTE_CLAIM_MS,
    OPT_REMOTE_KEY,
    OPT_GROUP,
    OPT_S3_REGION,
    OPT_S3_ENDPOINT,
    OPT_CA,
    OPT_FETCH_RETRIES,
    OPT_FETCH_TIMEOUT_MS,
    OPT_FETCH_PARALLEL,
    OPT_SOURCE_CACHE,
    OPT_SOURCE_CACHE_MB,
    OPT_COUNT
};
_Static_assert(OPT_COUNT <= 64 * BFS_OPT_GIVEN_WORDS,
               "bfs_pipeline_opts.given has one bit per option");

/* bit i of o->given: option i was set explicitly */
static inline bool bfs_opt_given(const bfs_pipeline_opts *o, size_t i)
{
    return (o->given[i / 64] >> (i % 64)) & 1;
}

static inline void bfs_opt_mark_given(bfs_pipeline_opts *o, size_t i)
{
    o->given[i / 64] |= 1ull << (i % 64);
}

typedef struct opt opt;

/* Parse v into o's field(s). 0, or -EINVAL with o untouched; *why may then name a
 * specific reason (otherwise the message is "must be <allowed>"). */
typedef int (*opt_set_fn)(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
/* Format o's field(s) as text the setter accepts; snprintf's return convention. */
typedef int (*opt_show_fn)(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);

enum { W_U64, W_U32, W_INT, W_I64 }; /* C type of an integer field */

#define F_AUTO  1u /* integer option also accepts "auto" (stored as BFS_AUTO) */
#define F_LATER 2u /* default resolved by the engine: field left 0 by bfs_pipeline_defaults */
/* F_ENUM: the value is an index into the '|'-separated names of pub.syntax, which are in
 * the order of pipeline.h's BFS_* enums (check_pipeline tests it). */
#define F_ENUM 4u
#define F_IMG  8u  /* data option of image datasets only */
#define F_SEQ  16u /* data option of token datasets only */
#define F_FLD  32u /* data option of multi-field datasets only (bfs_pipeline_check_fields) */
/* F_NEW: in the canonical text only when not at its default, so that mounts made before
 * the option existed keep their fingerprints */
#define F_NEW     64u
#define F_MIX     128u /* data option of mixtures only (source= set) */
#define F_NOCANON 256u /* never in the canonical text (source=: the identity holds it) */
#define SHOW_MAX  (BFS_MIX_TEXT + 64) /* a buffer that holds any option's value */
_Static_assert(BFS_MIX_TEXT >= BFS_FIELDS_TEXT && BFS_MIX_TEXT >= BFS_SCHEDULE_TEXT,
               "SHOW_MAX holds every option's text");

struct opt {
    bfs_pipeline_option pub;
    const char *init;    /* text bfs_pipeline_defaults parses (NULL: pub.def) */
    const char *allowed; /* "must be ..." text; NULL: generated (integers, enums) */
    opt_set_fn set;
    opt_show_fn show;
    size_t off; /* offsetof the field */
    int width;  /* W_* of an integer field */
    unsigned flags;
    uint64_t lo, hi; /* integer range, inclusive */
    double dhi;      /* upper bound of a real or range option */
};

/* The table: row i is option i (OPT_*), pipeline_table.c. */
extern const opt bfs_opt_table[OPT_COUNT];

/* ---- values (pipeline_values.c) ------------------------------------------------------- */

/* ImageNet's mean and standard deviation, normalize=imagenet. */
extern const float bfs_opt_imagenet_mean[3];
extern const float bfs_opt_imagenet_std[3];

/* A user's text as it may appear in a message: at most 64 bytes, control characters as
 * \xNN (a value may come from a spec file with anything in it). Returns dst. */
#define QUOTE_MAX 64
const char *bfs_opt_quote(char dst[QUOTE_MAX * 4 + 8], const char *s);

/* Shortest "%.Ng" text that reads back as exactly v (as a double, or as a float when
 * as_float), in the "C" locale. */
void bfs_opt_fmt_real(char buf[40], double v, bool as_float);

/* A finite decimal number (strtod syntax without hex, inf, nan or leading space) filling
 * [s, s + n), in the "C" locale; false when it is not one. */
bool bfs_opt_parse_decimal(const char *s, size_t n, bool as_float, double *out);

/* normalize='s numbers as the setter reads them: "m,m,m/s,s,s"; snprintf's convention. */
int bfs_opt_fmt_norm_numbers(const bfs_pipeline_opts *o, char *buf, size_t cap);

/* The setters and formatters of the table's rows (opt_set_fn, opt_show_fn), by kind of
 * value: integers (F_AUTO, the row's range), enums (F_ENUM), shard=I/N, size=HxW or H,
 * scale/ratio ranges A:B, reals, normalize=, absolute paths, remote=, remote_key=,
 * group=, buckets=, fields=, text_len= and token_len=. */
int bfs_opt_set_uint(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
int bfs_opt_show_uint(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
int bfs_opt_set_enum(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
int bfs_opt_show_enum(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
int bfs_opt_set_shard(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
int bfs_opt_show_shard(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
int bfs_opt_set_size(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
int bfs_opt_show_size(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
int bfs_opt_set_sizes(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
int bfs_opt_show_sizes(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
int bfs_opt_set_jitter(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
int bfs_opt_show_jitter(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
int bfs_opt_set_randaug(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
int bfs_opt_show_randaug(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
int bfs_opt_set_range(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
int bfs_opt_show_range(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
int bfs_opt_set_real(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
int bfs_opt_show_real(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
int bfs_opt_set_normalize(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
int bfs_opt_show_normalize(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
int bfs_opt_set_path(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
int bfs_opt_show_path(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
int bfs_opt_set_remote_key(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
int bfs_opt_show_remote_key(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
int bfs_opt_set_remote(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
int bfs_opt_show_remote(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
int bfs_opt_set_group(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
int bfs_opt_set_s3_region(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
int bfs_opt_show_s3_region(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
int bfs_opt_set_s3_endpoint(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
int bfs_opt_show_s3_endpoint(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
int bfs_opt_set_ca(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
int bfs_opt_set_source_cache(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
int bfs_opt_show_source_cache(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
int bfs_opt_show_ca(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
int bfs_opt_show_group(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
int bfs_opt_set_buckets(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
int bfs_opt_show_buckets(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
int bfs_opt_set_fields(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
int bfs_opt_show_fields(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
int bfs_opt_set_text_len(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
int bfs_opt_show_text_len(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);

/* ---- mixtures (pipeline_mix.c) ------------------------------------------------------- */

/* source= and mix_schedule=: setters and formatters of their rows. */
int bfs_opt_set_source(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
int bfs_opt_show_source(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
int bfs_opt_set_schedule(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
int bfs_opt_show_schedule(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);

/* A spec file's `source = X` names a mixture of one source when X has a weight. */
bool bfs_opt_weighted(const char *v);

/* Walk source= text v: each item (PATH[:W], trimmed) into d (NULL: only count). Returns
 * the item count, or -1 for a bad item (*why set). */
int bfs_opt_mix_walk(const char *v, bfs_mix_desc *d, const char **why);

/* Parse mix_schedule= text v into d's points (d->n: weights per point, set from the
 * first point when 0). 0, or -1 with *why set. */
int bfs_opt_schedule_parse(const char *v, bfs_mix_desc *d, const char **why);

#endif
