/*
 * pipeline.c — the pipeline option table (see pipeline.h) and everything generated from
 * it: parsing of one option, of `-o` text and of spec files; the error messages (the
 * unknown-key message lists the table's names); defaults (each row's default text is run
 * through the row's own setter, so the documented default is the real one); validation in
 * bfs_pipeline_finish (each field is formatted and parsed back by its setter, so ranges
 * live in one place); the canonical text and fingerprint; --help.
 *
 * Adding an option: one OPT_* index, one row in `table`, a field in bfs_pipeline_opts,
 * a line in docs/options.md (and tests/check_pipeline.c's list). Nothing else.
 *
 * Numbers are read and written in the "C" locale whatever the process's locale is: the
 * canonical text, hence the fingerprint, must not depend on LC_NUMERIC.
 */
#include "engine/pipeline.h"
#include "engine/dataset/bfs.h"
#include "engine/remote/remote.h"
#include "engine/claims.h"
#include "base/err.h"
#include "base/hash.h"

#include <ctype.h>
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the table ----------------------------------------------------------------------- */

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
    OPT_AUGMENT,
    OPT_SCALE,
    OPT_RATIO,
    OPT_FLIP,
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
    OPT_REMOTE,
    OPT_REMOTE_TTL,
    OPT_REMOTE_WAIT_MS,
    OPT_REMOTE_FALLBACK,
    OPT_REMOTE_CLAIM_MS,
    OPT_REMOTE_KEY,
    OPT_GROUP,
    OPT_COUNT
};
_Static_assert(OPT_COUNT <= 64, "bfs_pipeline_opts.given has one bit per option");

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

static int set_uint(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
static int show_uint(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
static int set_enum(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
static int show_enum(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
static int set_shard(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
static int show_shard(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
static int set_size(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
static int show_size(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
static int set_range(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
static int show_range(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
static int set_real(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
static int show_real(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
static int set_normalize(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
static int show_normalize(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
static int set_path(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
static int show_path(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
static int set_remote_key(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
static int show_remote_key(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
static int set_remote(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
static int show_remote(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
static int set_group(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
static int show_group(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
static int set_buckets(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
static int show_buckets(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
static int set_fields(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
static int show_fields(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
static int set_text_len(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
static int show_text_len(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
static int set_source(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
static int show_source(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
static int set_schedule(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why);
static int show_schedule(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap);
static bool weighted(const char *v);
static int differs(const bfs_pipeline_opts *o, size_t i);

#define PUB(name_, cls_, syntax_, def_, help_)                                                     \
    .pub = {.name = name_, .syntax = syntax_, .def = def_, .help = help_, .cls = cls_}
#define FIELD(f) .off = offsetof(bfs_pipeline_opts, f)
#define INT(f, w, lo_, hi_, fl)                                                                    \
    FIELD(f), .set = set_uint, .show = show_uint, .width = w, .lo = lo_, .hi = hi_, .flags = fl
#define ENUMF(f, fl) FIELD(f), .set = set_enum, .show = show_enum, .flags = F_ENUM | (fl)
#define ENUM(f)      ENUMF(f, 0)
#define D            BFS_OPT_DATA
#define K            BFS_OPT_KNOB
#define MIB_MAX      (1ull << 40) /* MiB budgets: 2^40 MiB = 1 EiB, so MiB * 2^20 fits int64 */

static const opt table[OPT_COUNT] = {
    [OPT_SEED] = {PUB("seed", D, "N", "0", "seed of the shuffle and of every augmentation"),
                  INT(seed, W_U64, 0, UINT64_MAX, 0)},
    [OPT_BATCH] = {PUB("batch", D, "N", "256", "samples per batch (per shard)"),
                   INT(batch, W_U32, 1, 65536, 0)},
    [OPT_EPOCHS] = {PUB("epochs", BFS_OPT_LISTING, "N", "100",
                        "epoch directories listed; any epoch below it can be read"),
                    INT(epochs, W_U32, 1, 1000000, 0)},
    [OPT_SHUFFLE] = {PUB("shuffle", D, "full|pages|none|rows", "full",
                         "full: a full-dataset permutation per epoch; pages: quasi-random, "
                         "page-local order for datasets larger than RAM on slow disks; "
                         "none: dataset order; rows (token datasets, pack=concat): the "
                         "documents in dataset order cut into rows, the rows permuted per "
                         "epoch"),
                     ENUM(shuffle)},
    [OPT_DROP_LAST] = {PUB("drop_last", D, "0|1", "1",
                           "1: drop the final partial batch of each epoch; 0: serve it short"),
                       ENUM(drop_last)},
    [OPT_SHARD] = {PUB("shard", D, "I/N", "0/1",
                       "serve shard I of N disjoint, equal shards of each epoch"),
                   FIELD(shard_index), .set = set_shard, .show = show_shard, .hi = 65536,
                   .allowed = "I/N with integers N in 1..65536 and I < N"},
    [OPT_PAD] = {PUB("pad", D, "0|1", "0",
                     "1: every shard gets ceil(n/N) samples, repeating the epoch's first ones, "
                     "marked in a `padded` tensor; 0: floor(n/N), the rest left out"),
                 ENUMF(pad, F_NEW)},
    [OPT_SIZE] = {PUB("size", D, "H|HxW", "224", "output image size in pixels; H means HxH"),
                  FIELD(out_h), .set = set_size, .show = show_size, .lo = 1, .hi = 8192,
                  .flags = F_IMG, .allowed = "H or HxW, integers in 1..8192"},
    [OPT_AUGMENT] = {PUB("augment", D, "train|eval|none", "train",
                         "train: RandomResizedCrop(scale, ratio) + horizontal flip (torchvision "
                         "semantics); eval: resize the shorter side to size/0.875, center "
                         "crop; none: resize to size"),
                     ENUMF(augment, F_IMG)},
    [OPT_SCALE] = {PUB("scale", D, "A:B", "0.08:1",
                       "train: range of the crop's area as a fraction of the image's"),
                   FIELD(scale), .set = set_range, .show = show_range, .dhi = 1, .flags = F_IMG,
                   .allowed = "A:B with 0 < A <= B <= 1 (decimals or fractions p/q)"},
    [OPT_RATIO] = {PUB("ratio", D, "A:B", "3/4:4/3",
                       "train: range of the crop's aspect ratio (width/height)"),
                   FIELD(ratio), .set = set_range, .show = show_range, .dhi = 100, .flags = F_IMG,
                   .allowed = "A:B with 0 < A <= B <= 100 (decimals or fractions p/q)"},
    [OPT_FLIP] = {PUB("flip", D, "P", "0.5", "train: probability of a horizontal flip"),
                  FIELD(flip), .set = set_real, .show = show_real, .dhi = 1, .flags = F_IMG,
                  .allowed = "a number in 0..1 (decimal or fraction p/q)"},
    [OPT_DTYPE] = {PUB("dtype", D, "u8|f16|bf16|f32", "u8", "output element type"),
                   ENUMF(dtype, F_IMG)},
    [OPT_NORMALIZE] = {PUB("normalize", D, "imagenet|none|M/S", "by dtype",
                           "float outputs are (x/255 - mean)/std per channel: imagenet is "
                           "0.485,0.456,0.406/0.229,0.224,0.225, none is x/255; default imagenet "
                           "for float dtypes, none for u8 (which allows only none)"),
                       FIELD(mean), .set = set_normalize, .show = show_normalize, .init = "none",
                       .flags = F_IMG,
                       .allowed = "imagenet, none or m0,m1,m2/s0,s1,s2 (decimals, std > 0)"},
    [OPT_LAYOUT] = {PUB("layout", D, "nhwc|nchw", "nhwc",
                        "images tensor [B,H,W,3] (nhwc) or [B,3,H,W] (nchw)"),
                    ENUMF(layout, F_IMG)},
    [OPT_BAD_SAMPLE] = {PUB("bad_sample", D, "substitute|fail", "substitute",
                            "corrupt sample: replace it deterministically and count it in "
                            "/stats, or fail its batch with EIO"),
                        ENUM(bad_sample)},
    [OPT_PACK] = {PUB("pack", D, "concat|pad|bucket", "concat",
                      "token datasets: concat: rows of seq_len tokens cut from the epoch's "
                      "shuffled documents laid end to end; pad: one document per row, cut or "
                      "padded to seq_len; bucket: one document per row, each batch from one "
                      "length bucket, padded to its bound"),
                  ENUMF(pack, F_SEQ)},
    [OPT_SEQ_LEN] = {PUB("seq_len", D, "T", "1024",
                         "token datasets, pack=concat|pad: tokens per row"),
                     INT(seq_len, W_U32, 1, BFS_MAX_SEQ_LEN, F_SEQ)},
    [OPT_BUCKETS] = {PUB("buckets", D, "B1:B2:...", "none",
                         "token datasets, pack=bucket: ascending length bounds; a document "
                         "goes to the first bucket it fits, longer ones are cut to the last"),
                     FIELD(buckets), .set = set_buckets, .show = show_buckets, .flags = F_SEQ,
                     .hi = BFS_MAX_SEQ_LEN,
                     .allowed = "1 to 32 ascending integers in 1..1048576, separated by ':'"},
    [OPT_BATCH_TOKENS] = {PUB("batch_tokens", D, "N", "0",
                              "token datasets, pack=bucket: rows per batch are N / the bucket's "
                              "bound (at least 1) instead of batch; 0: batch rows"),
                          INT(batch_tokens, W_U32, 0, UINT32_MAX, F_SEQ)},
    [OPT_PAD_ID] = {PUB("pad_id", D, "N", "0",
                        "token datasets, pack=pad|bucket: the token id padding fills rows with"),
                    INT(pad_id, W_U32, 0, UINT32_MAX, F_SEQ)},
    [OPT_POSITIONS] = {PUB("positions", D, "0|1", "0",
                           "token datasets, pack=concat: 1 adds a `positions` tensor, each "
                           "token's position in its document (0 where a document starts)"),
                       ENUMF(positions, F_SEQ)},
    [OPT_FIELDS] = {PUB("fields", D, "all|NAME,NAME,...", "all",
                        "multi-field datasets: the fields served, each as tensors named after "
                        "it (the first image field is `images`; docs/multimodal.md)"),
                    FIELD(fields), .set = set_fields, .show = show_fields, .flags = F_FLD,
                    .allowed = "all, or field names ([A-Za-z_][A-Za-z0-9_]*, at most 31 "
                               "bytes) separated by commas"},
    [OPT_TEXT_LEN] = {PUB("text_len", D, "max|N", "max",
                          "multi-field datasets: bytes per row of text fields; longer texts "
                          "are cut (at a character boundary, counted in /stats); max: the "
                          "dataset's longest"),
                      FIELD(text_len), .set = set_text_len, .show = show_text_len, .lo = 1,
                      .hi = BFS_MAX_TEXT_LEN, .flags = F_FLD,
                      .allowed = "max or an integer in 1..1048576"},
    [OPT_TOKEN_LEN] = {PUB("token_len", D, "max|N", "max",
                           "multi-field datasets: token ids per row of tokens fields (captions "
                           "tokenized at pack time); longer rows are cut (counted in /stats); "
                           "max: the dataset's longest"),
                       FIELD(token_len), .set = set_text_len, .show = show_text_len, .lo = 1,
                       .hi = BFS_MAX_TEXT_LEN, .flags = F_FLD,
                       .allowed = "max or an integer in 1..1048576"},
    [OPT_MIN_BOX_AREA] = {PUB("min_box_area", D, "N", "1",
                              "multi-field datasets with boxes: a box the crop leaves with less "
                              "than N output pixels² is dropped (and its per-box values)"),
                          INT(min_box_area, W_U32, 0, 1u << 30, F_FLD)},
    [OPT_SOURCE] = {PUB("source", D, "PATH[:W]+PATH[:W]+...", "SOURCE",
                        "a mixture: samples drawn from several datasets of one kind, each with "
                        "weight W (default: in proportion to their sizes), stratified per "
                        "batch; replaces the SOURCE argument (docs/mixing.md)"),
                    FIELD(mix), .set = set_source, .show = show_source, .flags = F_MIX | F_NOCANON,
                    .allowed = "1 to 64 paths, each with an optional :WEIGHT (a positive "
                               "decimal; all or none), separated by '+' (or ',' in a spec "
                               "file)"},
    [OPT_MIX_LABELS] = {PUB("mix_labels", D, "shared|offset", "shared",
                            "mixtures: shared: every source's labels as stored; offset: each "
                            "source's labels follow the classes of the sources before it"),
                        ENUMF(mix_labels, F_MIX)},
    [OPT_EPOCH_SAMPLES] = {PUB("epoch_samples", D, "N", "0",
                               "mixtures: samples per epoch (all shards); 0: the sources' sum"),
                           INT(epoch_samples, W_U64, 0, 1ull << 48, F_MIX)},
    [OPT_MIX_SCHEDULE] = {PUB("mix_schedule", D, "[step:|linear:]E@W/W/...+...", "none",
                              "mixtures: the weights by epoch, one point per epoch E that "
                              "changes them (curricula); linear: interpolated between points"),
                          FIELD(mix_schedule), .set = set_schedule, .show = show_schedule,
                          .flags = F_MIX,
                          .allowed = "none, or [step:|linear:] then up to 32 points E@W/W/... "
                                     "separated by '+' (or ','), epochs ascending, one weight "
                                     "(a decimal >= 0, one > 0) per source"},
    [OPT_THREADS] = {PUB("threads", K, "auto|N", "auto", "worker threads"),
                     INT(threads, W_INT, 1, 1024, F_AUTO)},
    [OPT_PREFETCH] = {PUB("prefetch", K, "auto|N", "auto", "batches computed ahead per reader"),
                      INT(prefetch, W_INT, 0, 1024, F_AUTO)},
    [OPT_CACHE_MB] = {PUB("cache_mb", K, "auto|N", "auto", "in-memory batch cache budget, MiB"),
                      INT(cache_mb, W_I64, 0, MIB_MAX, F_AUTO)},
    [OPT_CACHE_DIR] = {PUB("cache_dir", K, "PATH|auto|none", "none",
                           "host-wide content-addressed batch cache, shared by every mount of "
                           "the same pipeline; auto: a per-user directory under /dev/shm"),
                       FIELD(cache_dir), .set = set_path, .show = show_path,
                       .allowed = "an absolute path, auto or none"},
    [OPT_CACHE_DIR_MB] = {PUB("cache_dir_mb", K, "N", "4096",
                              "size budget of the cache directory (LRU), MiB"),
                          INT(cache_dir_mb, W_I64, 1, MIB_MAX, 0)},
    [OPT_SAMPLE_CACHE_MB] = {PUB("sample_cache_mb", K, "N", "0",
                                 "decoded-sample cache, MiB: later epochs skip JPEG decoding"),
                             INT(sample_cache_mb, W_I64, 0, MIB_MAX, 0)},
    [OPT_CPU_BUDGET] = {PUB("cpu_budget", K, "N", "online CPUs", "CPUs the autotuner may use"),
                        INT(cpu_budget, W_INT, 1, 1024, F_LATER)},
    [OPT_RAM_MB] = {PUB("ram_mb", K, "N", "half of free RAM", "memory the autotuner may use, MiB"),
                    INT(ram_mb, W_I64, 16, MIB_MAX, F_LATER)},
    [OPT_HUGE_PAGES] = {PUB("huge_pages", K, "0|1|auto", "auto",
                            "1: finished batch files on 2 MiB pages (under FUSE passthrough, "
                            "which needs root): faster to read and to recycle, slower while "
                            "the daemon first grows on VMs that return free memory to the "
                            "host; auto: once the daemon recycles memory"),
                        ENUM(huge_pages)},
    [OPT_REMOTE] = {PUB("remote", K, "redis://[[USER]:PASS@]HOST[:PORT][/DB]|none", "none",
                        "Redis shared with `batchfs worker`s: batches are asked of the workers "
                        "and served from Redis, computed here when none come in time "
                        "(docs/scale-out.md)"),
                    FIELD(remote), .set = set_remote, .show = show_remote,
                    .allowed = "redis://[[USER]:PASS@]HOST[:PORT][/DB] or none"},
    [OPT_REMOTE_TTL] = {PUB("remote_ttl", K, "S", "600",
                            "seconds a batch stays in Redis after a worker (or a mount) stored it"),
                        INT(remote_ttl, W_INT, 1, 30 * 86400, 0)},
    [OPT_REMOTE_WAIT_MS] = {PUB("remote_wait_ms", K, "N", "10000",
                                "how long a mount waits for a batch from the workers before "
                                "remote_fallback applies (at once when no worker is alive)"),
                            INT(remote_wait_ms, W_INT, 1, 86400000, 0)},
    [OPT_REMOTE_FALLBACK] = {PUB("remote_fallback", K, "local|wait", "local",
                                 "local: compute a batch here when no worker delivered it in "
                                 "remote_wait_ms or Redis fails; wait: ask again and keep waiting"),
                             ENUM(remote_fallback)},
    [OPT_REMOTE_CLAIM_MS] = {PUB("remote_claim_ms", K, "N", "30000",
                                 "worker: a batch job another worker took and has not finished "
                                 "for this long is taken over (that worker is presumed dead)"),
                             INT(remote_claim_ms, W_INT, 1, 86400000, 0)},
    [OPT_REMOTE_KEY] = {PUB("remote_key", K, "FILE|none", "none",
                            "a secret shared by the pipeline's workers and mounts (a file of "
                            "16+ bytes, mode 600): batches in Redis are authenticated with it, "
                            "so that no one without it can make a mount serve other bytes"),
                        FIELD(remote_key), .set = set_remote_key, .show = show_remote_key,
                        .allowed = "an absolute path or none"},
    [OPT_GROUP] = {PUB("group", K, "NAME|none", "none",
                       "dynamic sharding: mounts of the same pipeline with the same group "
                       "share a claim counter per epoch; each open of epoch/N/next serves the "
                       "next batch no mount of the group has served"),
                   FIELD(group), .set = set_group, .show = show_group,
                   .allowed = "none or 1..64 of the characters A-Z a-z 0-9 . _ -"},
};

#undef PUB
#undef FIELD
#undef INT
#undef ENUM
#undef ENUMF
#undef D
#undef K

const bfs_pipeline_option *bfs_pipeline_option_at(size_t i)
{
    return i < OPT_COUNT ? &table[i].pub : NULL;
}

static const opt *lookup(const char *key)
{
    for (size_t i = 0; i < OPT_COUNT; i++)
        if (strcmp(table[i].pub.name, key) == 0)
            return &table[i];
    return NULL;
}

/* ---- small helpers --------------------------------------------------------------------- */

static const float imagenet_mean[3] = {0.485f, 0.456f, 0.406f};
static const float imagenet_std[3] = {0.229f, 0.224f, 0.225f};

/* A user's text as it may appear in a message: at most 64 bytes, control characters as
 * \xNN (a value may come from a spec file with anything in it). */
#define QUOTE_MAX 64
static const char *quote(char dst[QUOTE_MAX * 4 + 8], const char *s)
{
    size_t n = 0;
    for (size_t i = 0; s[i]; i++) {
        if (i == QUOTE_MAX) {
            memcpy(dst + n, "...", 3);
            n += 3;
            break;
        }
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) {
            static const char hex[] = "0123456789abcdef";
            dst[n++] = '\\';
            dst[n++] = 'x';
            dst[n++] = hex[c >> 4];
            dst[n++] = hex[c & 15];
        } else {
            dst[n++] = (char)c;
        }
    }
    dst[n] = '\0';
    return dst;
}

/* The "C" locale, for locale-independent number text; (locale_t)0 if it cannot be made
 * (then the process locale is used, which is "C" unless the program called setlocale). */
static locale_t c_loc;
static pthread_once_t c_loc_once = PTHREAD_ONCE_INIT;

static void c_loc_init(void)
{
    c_loc = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
}

static locale_t c_locale(void)
{
    pthread_once(&c_loc_once, c_loc_init);
    return c_loc;
}

static double c_strtod(const char *s, char **end)
{
    locale_t l = c_locale();
    return l ? strtod_l(s, end, l) : strtod(s, end);
}

static float c_strtof(const char *s, char **end)
{
    locale_t l = c_locale();
    return l ? strtof_l(s, end, l) : strtof(s, end);
}

/* "%.*g" in the C locale. */
static void c_fmt_g(char *buf, size_t cap, int prec, double v)
{
    locale_t l = c_locale();
    locale_t old = l ? uselocale(l) : (locale_t)0;
    snprintf(buf, cap, "%.*g", prec, v);
    if (l)
        uselocale(old);
}

/* Shortest "%.Ng" text that reads back as exactly v (as a double, or as a float when
 * as_float): stable, round-trips, and 0.08 prints as 0.08. -0 prints as 0. */
static void fmt_real(char buf[40], double v, bool as_float)
{
    if (v == 0)
        v = 0;
    int max = as_float ? 9 : 17; /* digits that always round-trip (FLT/DBL_DECIMAL_DIG) */
    for (int p = 1; p <= max; p++) {
        c_fmt_g(buf, 40, p, v);
        if (p == max)
            break;
        if (as_float ? c_strtof(buf, NULL) == (float)v : c_strtod(buf, NULL) == v)
            break;
    }
}

/* A decimal integer: digits only (no sign, no space, no base prefix), no overflow, the
 * whole span [s, s + n) consumed. */
static bool parse_u64(const char *s, size_t n, uint64_t *out)
{
    if (n == 0)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        unsigned dgt = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - dgt) / 10)
            return false;
        v = v * 10 + dgt;
    }
    *out = v;
    return true;
}

/* A finite decimal number (strtod syntax without hex, inf, nan or leading space) filling
 * [s, s + n); as a float when as_float. */
static bool parse_decimal(const char *s, size_t n, bool as_float, double *out)
{
    char tmp[64];
    if (n == 0 || n >= sizeof tmp)
        return false;
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    if (!tmp[0] || !strchr("0123456789+-.", tmp[0]) || strpbrk(tmp, "xXpP"))
        return false;
    char *end;
    double v = as_float ? (double)c_strtof(tmp, &end) : c_strtod(tmp, &end);
    if (*end || !isfinite(v))
        return false;
    *out = v == 0 ? 0 : v; /* -0 reads as 0: one canonical zero */
    return true;
}

/* A decimal, or a fraction p/q of two decimals (q != 0), filling [s, s + n). */
static bool parse_real(const char *s, size_t n, double *out)
{
    const char *slash = memchr(s, '/', n);
    if (!slash)
        return parse_decimal(s, n, false, out);
    double p, q;
    if (!parse_decimal(s, (size_t)(slash - s), false, &p) ||
        !parse_decimal(slash + 1, n - (size_t)(slash - s) - 1, false, &q) || q == 0)
        return false;
    double v = p / q;
    if (!isfinite(v))
        return false;
    *out = v == 0 ? 0 : v;
    return true;
}

/* Token i of a '|'-separated list, or NULL. */
static const char *enum_name(const char *list, int i, size_t *len)
{
    for (int k = 0;; k++) {
        size_t n = strcspn(list, "|");
        if (k == i) {
            *len = n;
            return list;
        }
        if (!list[n])
            return NULL;
        list += n + 1;
    }
}

/* ---- setters and formatters ------------------------------------------------------------ */

static void store_int(const opt *d, bfs_pipeline_opts *o, uint64_t v, bool is_auto)
{
    char *f = (char *)o + d->off;
    switch (d->width) {
    case W_U64: {
        uint64_t x = v;
        memcpy(f, &x, sizeof x);
        break;
    }
    case W_U32: {
        uint32_t x = (uint32_t)v;
        memcpy(f, &x, sizeof x);
        break;
    }
    case W_INT: {
        int x = is_auto ? BFS_AUTO : (int)v;
        memcpy(f, &x, sizeof x);
        break;
    }
    default: {
        int64_t x = is_auto ? BFS_AUTO : (int64_t)v;
        memcpy(f, &x, sizeof x);
        break;
    }
    }
}

static int set_uint(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)why;
    uint64_t x;
    if ((d->flags & F_AUTO) && strcmp(v, "auto") == 0) {
        store_int(d, o, 0, true);
        return 0;
    }
    if (!parse_u64(v, strlen(v), &x) || x < d->lo || x > d->hi)
        return -EINVAL;
    store_int(d, o, x, false);
    return 0;
}

static int show_uint(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    const char *f = (const char *)o + d->off;
    long long s;
    switch (d->width) {
    case W_U64: {
        uint64_t x;
        memcpy(&x, f, sizeof x);
        return snprintf(buf, cap, "%llu", (unsigned long long)x);
    }
    case W_U32: {
        uint32_t x;
        memcpy(&x, f, sizeof x);
        return snprintf(buf, cap, "%lu", (unsigned long)x);
    }
    case W_INT: {
        int x;
        memcpy(&x, f, sizeof x);
        s = x;
        break;
    }
    default: {
        int64_t x;
        memcpy(&x, f, sizeof x);
        s = x;
        break;
    }
    }
    if (s == BFS_AUTO && (d->flags & F_AUTO))
        return snprintf(buf, cap, "auto");
    return snprintf(buf, cap, "%lld", s);
}

static int set_enum(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)why;
    size_t n, vlen = strlen(v);
    const char *t;
    for (int i = 0; (t = enum_name(d->pub.syntax, i, &n)); i++)
        if (n == vlen && memcmp(t, v, n) == 0) {
            memcpy((char *)o + d->off, &i, sizeof i);
            return 0;
        }
    return -EINVAL;
}

static int show_enum(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    int i;
    size_t n;
    memcpy(&i, (const char *)o + d->off, sizeof i);
    const char *t = i >= 0 ? enum_name(d->pub.syntax, i, &n) : NULL;
    if (!t)
        return snprintf(buf, cap, "#%d", i); /* not a name: the setter rejects it */
    return snprintf(buf, cap, "%.*s", (int)n, t);
}

static int set_shard(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)why;
    const char *slash = strchr(v, '/');
    uint64_t i, n;
    if (!slash || !parse_u64(v, (size_t)(slash - v), &i) ||
        !parse_u64(slash + 1, strlen(slash + 1), &n) || n < 1 || n > d->hi || i >= n)
        return -EINVAL;
    o->shard_index = (uint32_t)i;
    o->shard_count = (uint32_t)n;
    return 0;
}

static int show_shard(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    (void)d;
    return snprintf(buf, cap, "%lu/%lu", (unsigned long)o->shard_index,
                    (unsigned long)o->shard_count);
}

static int set_size(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)why;
    const char *x = strchr(v, 'x');
    uint64_t h, w;
    if (!x) {
        if (!parse_u64(v, strlen(v), &h))
            return -EINVAL;
        w = h;
    } else if (!parse_u64(v, (size_t)(x - v), &h) || !parse_u64(x + 1, strlen(x + 1), &w)) {
        return -EINVAL;
    }
    if (h < d->lo || h > d->hi || w < d->lo || w > d->hi)
        return -EINVAL;
    o->out_h = (uint32_t)h;
    o->out_w = (uint32_t)w;
    return 0;
}

static int show_size(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    (void)d;
    return snprintf(buf, cap, "%lux%lu", (unsigned long)o->out_h, (unsigned long)o->out_w);
}

static int set_range(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)why;
    const char *colon = strchr(v, ':');
    double a, b;
    if (!colon || !parse_real(v, (size_t)(colon - v), &a) ||
        !parse_real(colon + 1, strlen(colon + 1), &b))
        return -EINVAL;
    if (!(a > 0 && a <= b && b <= d->dhi))
        return -EINVAL;
    double *f = (double *)(void *)((char *)o + d->off);
    f[0] = a;
    f[1] = b;
    return 0;
}

static int show_range(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    const double *f = (const double *)(const void *)((const char *)o + d->off);
    char a[40], b[40];
    fmt_real(a, f[0], false);
    fmt_real(b, f[1], false);
    return snprintf(buf, cap, "%s:%s", a, b);
}

static int set_real(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)why;
    double x;
    if (!parse_real(v, strlen(v), &x) || !(x >= 0 && x <= d->dhi))
        return -EINVAL;
    memcpy((char *)o + d->off, &x, sizeof x);
    return 0;
}

static int show_real(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    double x;
    char t[40];
    memcpy(&x, (const char *)o + d->off, sizeof x);
    fmt_real(t, x, false);
    return snprintf(buf, cap, "%s", t);
}

/* Three comma-separated decimals filling [s, s + n), read as floats. */
static bool parse_triple(const char *s, size_t n, float out[3])
{
    for (int k = 0; k < 3; k++) {
        const char *comma = memchr(s, ',', n);
        size_t len = k < 2 ? (comma ? (size_t)(comma - s) : n + 1) : n;
        double x;
        if (len > n || (k == 2 && comma) || !parse_decimal(s, len, true, &x))
            return false;
        out[k] = (float)x;
        if (k < 2) {
            s += len + 1;
            n -= len + 1;
        }
    }
    return true;
}

static int set_normalize(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)d;
    float mean[3], std[3];
    int on = 1;
    if (strcmp(v, "imagenet") == 0) {
        memcpy(mean, imagenet_mean, sizeof mean);
        memcpy(std, imagenet_std, sizeof std);
    } else if (strcmp(v, "none") == 0) {
        on = 0;
        for (int k = 0; k < 3; k++) {
            mean[k] = 0;
            std[k] = 1;
        }
    } else {
        const char *slash = strchr(v, '/');
        if (!slash || !parse_triple(v, (size_t)(slash - v), mean) ||
            !parse_triple(slash + 1, strlen(slash + 1), std))
            return -EINVAL;
        for (int k = 0; k < 3; k++)
            if (!(std[k] > 0)) {
                *why = "every std must be > 0 (m0,m1,m2/s0,s1,s2)";
                return -EINVAL;
            }
    }
    o->normalize = on;
    memcpy(o->mean, mean, sizeof mean);
    memcpy(o->std, std, sizeof std);
    return 0;
}

/* u8: "none" (mean/std do not apply); float dtypes: the numbers, whatever name set them,
 * so that pipelines producing identical bytes have one canonical text. */
static int fmt_norm_numbers(const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    char t[6][40];
    for (int k = 0; k < 3; k++) {
        fmt_real(t[k], o->mean[k], true);
        fmt_real(t[3 + k], o->std[k], true);
    }
    return snprintf(buf, cap, "%s,%s,%s/%s,%s,%s", t[0], t[1], t[2], t[3], t[4], t[5]);
}

static int show_normalize(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    (void)d;
    if (o->dtype == BFS_OUT_U8)
        return snprintf(buf, cap, "none");
    return fmt_norm_numbers(o, buf, cap);
}

/* A path option (`none` clears it): absolute (the daemon changes to / when it starts), or
 * `auto` where allow_auto; into dst (cap bytes). */
static int set_abs_path(char *dst, size_t cap, const char *v, int allow_auto, const char **why)
{
    size_t n = strlen(v);
    if (strcmp(v, "none") == 0) {
        dst[0] = '\0';
        return 0;
    }
    if (v[0] != '/' && !(allow_auto && strcmp(v, "auto") == 0)) {
        if (!allow_auto)
            *why = "an absolute path (the daemon changes to / when it starts)";
        return -EINVAL;
    }
    if (n >= cap) {
        *why =
            cap > 1000 ? "path too long (at most 1023 bytes)" : "path too long (at most 511 bytes)";
        return -EINVAL;
    }
    memcpy(dst, v, n + 1);
    return 0;
}

/* A path option's text: the path, or `none`. */
static int show_abs_path(const char *path, size_t cap, char *buf, size_t bufcap)
{
    size_t n = strnlen(path, cap);
    return n ? snprintf(buf, bufcap, "%.*s", (int)n, path) : snprintf(buf, bufcap, "none");
}

static int set_path(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)d;
    return set_abs_path(o->cache_dir, sizeof o->cache_dir, v, 1, why);
}

static int show_path(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    (void)d;
    return show_abs_path(o->cache_dir, sizeof o->cache_dir, buf, cap);
}

static int set_remote_key(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)d;
    return set_abs_path(o->remote_key, sizeof o->remote_key, v, 0, why);
}

static int show_remote_key(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    (void)d;
    return show_abs_path(o->remote_key, sizeof o->remote_key, buf, cap);
}

static int set_remote(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)d;
    static _Thread_local char reason[256]; /* the message bad_value shows */
    if (strcmp(v, "none") == 0) {
        o->remote[0] = '\0';
        return 0;
    }
    bfs_remote_url u;
    if (bfs_remote_parse_url(v, &u, reason, sizeof reason)) {
        const char *colon = strstr(reason, ": ");
        *why = colon ? colon + 2 : reason;
        return -EINVAL;
    }
    size_t n = strlen(v);
    if (n >= sizeof o->remote) {
        *why = "URL too long (at most 511 bytes)";
        return -EINVAL;
    }
    memcpy(o->remote, v, n + 1);
    return 0;
}

static int show_remote(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    (void)d;
    size_t n = strnlen(o->remote, sizeof o->remote);
    return n ? snprintf(buf, cap, "%.*s", (int)n, o->remote) : snprintf(buf, cap, "none");
}

static int set_group(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)d, (void)why;
    if (strcmp(v, "none") == 0) {
        o->group[0] = '\0';
        return 0;
    }
    if (!bfs_claims_name_valid(v))
        return -EINVAL;
    snprintf(o->group, sizeof o->group, "%s", v);
    return 0;
}

static int field_name_valid(const char *p, size_t len)
{
    if (!len || len > 31 || (p[0] >= '0' && p[0] <= '9'))
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!isalnum((unsigned char)p[i]) && p[i] != '_')
            return 0;
    return 1;
}

static int set_fields(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)d;
    if (!strcmp(v, "all")) {
        o->fields[0] = '\0';
        return 0;
    }
    if (strlen(v) >= sizeof o->fields)
        return *why = "too long", -EINVAL;
    for (const char *p = v;; p++) {
        size_t len = strcspn(p, ",");
        if (!field_name_valid(p, len))
            return -EINVAL;
        p += len;
        if (!*p)
            break;
    }
    snprintf(o->fields, sizeof o->fields, "%s", v);
    return 0;
}

static int show_fields(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    (void)d;
    return snprintf(buf, cap, "%s", o->fields[0] ? o->fields : "all");
}

/* text_len= and token_len=: max (0) or N, a uint32_t at d->off */
static int set_text_len(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)why;
    uint64_t x;
    uint32_t *f = (uint32_t *)((char *)o + d->off);
    if (!strcmp(v, "max")) {
        *f = 0;
        return 0;
    }
    if (!parse_u64(v, strlen(v), &x) || x < d->lo || x > d->hi)
        return -EINVAL;
    *f = (uint32_t)x;
    return 0;
}

static int show_text_len(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    uint32_t f = *(const uint32_t *)((const char *)o + d->off);
    return f ? snprintf(buf, cap, "%u", f) : snprintf(buf, cap, "max");
}

static int set_buckets(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    uint32_t b[BFS_MAX_BUCKETS], n = 0;
    if (!strcmp(v, "none")) {
        o->nbuckets = 0;
        return 0;
    }
    for (const char *p = v;; p++) {
        size_t len = strcspn(p, ":");
        uint64_t x;
        if (n == BFS_MAX_BUCKETS)
            return *why = "more than 32 bounds", -EINVAL;
        if (!parse_u64(p, len, &x) || x < 1 || x > d->hi)
            return -EINVAL;
        if (n && x <= b[n - 1])
            return *why = "bounds must be strictly ascending", -EINVAL;
        b[n++] = (uint32_t)x;
        p += len;
        if (!*p)
            break;
    }
    memcpy(o->buckets, b, n * sizeof *b);
    o->nbuckets = n;
    return 0;
}

static int show_buckets(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    (void)d;
    char t[BFS_MAX_BUCKETS * 9 + 8] = "none"; /* bounds have at most 7 digits */
    size_t n = 0;
    for (uint32_t i = 0; i < o->nbuckets && i < BFS_MAX_BUCKETS; i++)
        n += (size_t)snprintf(t + n, sizeof t - n, "%s%lu", i ? ":" : "",
                              (unsigned long)o->buckets[i]);
    return snprintf(buf, cap, "%s", t);
}

static int show_group(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    (void)d;
    return snprintf(buf, cap, "%s", o->group[0] ? o->group : "none");
}

/* ---- messages -------------------------------------------------------------------------- */

/* "must be ..." text of a row: its own, or generated from its range or names. */
static void allowed_text(const opt *d, char *buf, size_t cap)
{
    if (d->allowed)
        snprintf(buf, cap, "%s", d->allowed);
    else if (d->flags & F_ENUM)
        snprintf(buf, cap, "one of %s", d->pub.syntax);
    else
        snprintf(buf, cap, "%san integer in %llu..%llu", (d->flags & F_AUTO) ? "auto or " : "",
                 (unsigned long long)d->lo, (unsigned long long)d->hi);
}

static int bad_value(const opt *d, const char *v, const char *why, char *err, size_t errlen)
{
    char q[QUOTE_MAX * 4 + 8], allowed[256];
    allowed_text(d, allowed, sizeof allowed);
    if (why)
        return bfs_errf(-EINVAL, err, errlen, "%s=%s: %s", d->pub.name, quote(q, v), why);
    return bfs_errf(-EINVAL, err, errlen, "%s=%s: must be %s", d->pub.name, quote(q, v), allowed);
}

/* Case-insensitive edit distance, for "did you mean"; keys longer than 31 never match. */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), row[32];
    if (la > 31 || lb > 31)
        return SIZE_MAX;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            size_t best = diag + cost;
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

static int unknown_key(const char *key, char *err, size_t errlen)
{
    char q[QUOTE_MAX * 4 + 8], hint[64] = "", known[512];
    size_t best = 3, n = 0; /* suggest only within 2 edits */
    for (size_t i = 0; i < OPT_COUNT; i++) {
        size_t dist = edit_distance(key, table[i].pub.name);
        if (dist < best && dist * 2 < strlen(table[i].pub.name)) {
            best = dist;
            snprintf(hint, sizeof hint, " (did you mean '%s'?)", table[i].pub.name);
        }
        if (n < sizeof known)
            n += (size_t)snprintf(known + n, sizeof known - n, "%s%s", i ? ", " : "",
                                  table[i].pub.name);
    }
    return bfs_errf(-ENOENT, err, errlen, "unknown option '%s'%s; known options: %s", quote(q, key),
                    hint, known);
}

/* ---- public API -------------------------------------------------------------------------- */

void bfs_pipeline_defaults(bfs_pipeline_opts *o)
{
    memset(o, 0, sizeof *o);
    for (size_t i = 0; i < OPT_COUNT; i++) {
        const opt *d = &table[i];
        const char *why = NULL;
        if (!(d->flags & F_LATER))
            (void)d->set(d, o, d->init ? d->init : d->pub.def, &why); /* tested to succeed */
    }
    o->given = 0;
}

int bfs_pipeline_set(bfs_pipeline_opts *o, const char *key, const char *value, char *err,
                     size_t errlen)
{
    const opt *d = lookup(key);
    if (!d)
        return unknown_key(key, err, errlen);
    if (!value) {
        char allowed[256];
        allowed_text(d, allowed, sizeof allowed);
        return bfs_errf(-EINVAL, err, errlen, "%s: missing value (%s=%s); must be %s", d->pub.name,
                        d->pub.name, d->pub.syntax, allowed);
    }
    const char *why = NULL;
    if (d->set(d, o, value, &why))
        return bad_value(d, value, why, err, errlen);
    o->given |= 1ull << (d - table);
    return 0;
}

static bool starts_number(char c)
{
    return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.';
}

static int set_item(bfs_pipeline_opts *o, char *item, char *err, size_t errlen)
{
    char *eq = strchr(item, '=');
    if (eq)
        *eq = '\0';
    return bfs_pipeline_set(o, item, eq ? eq + 1 : NULL, err, errlen);
}

int bfs_pipeline_parse(bfs_pipeline_opts *o, const char *text, char *err, size_t errlen)
{
    if (!text)
        return 0;
    char *buf = strdup(text);
    if (!buf)
        return bfs_errf(-ENOMEM, err, errlen, "out of memory parsing pipeline options");
    int rc = 0;
    for (char *item = buf;;) {
        char *end = item + strcspn(item, ",");
        if (strncmp(item, "normalize=", 10) == 0) /* m0,m1,m2/s0,s1,s2 */
            while (*end == ',' && starts_number(end[1]))
                end += 1 + strcspn(end + 1, ",");
        if (strncmp(item, "fields=", 7) == 0) /* a,b,c: an item without '=' is a name */
            while (*end == ',' && end[1] && end[1 + strcspn(end + 1, ",=")] != '=')
                end += 1 + strcspn(end + 1, ",");
        bool last = *end == '\0';
        *end = '\0';
        if (*item && (rc = set_item(o, item, err, errlen)))
            break;
        if (last)
            break;
        item = end + 1;
    }
    free(buf);
    return rc;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\v' || *s == '\f')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\v' ||
                 s[n - 1] == '\f'))
        s[--n] = '\0';
    return s;
}

int bfs_pipeline_parse_spec(bfs_pipeline_opts *o, const char *text, const char *file_name,
                            char *err, size_t errlen)
{
    const char *file = file_name ? file_name : "spec";
    if (!text)
        return 0;
    char *buf = strdup(text);
    if (!buf)
        return bfs_errf(-ENOMEM, err, errlen, "%s: out of memory", file);
    char *line = buf;
    if (strncmp(line, "\xEF\xBB\xBF", 3) == 0) /* UTF-8 byte order mark */
        line += 3;
    int rc = 0;
    for (unsigned long no = 1;; no++) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        for (char *h = line; (h = strchr(h, '#')); h++)
            if (h == line || h[-1] == ' ' || h[-1] == '\t') {
                *h = '\0';
                break;
            }
        char *s = trim(line);
        if (*s) {
            char msg[BFS_PIPELINE_ERRLEN], q[QUOTE_MAX * 4 + 8];
            char *eq = strchr(s, '=');
            if (!eq || eq == s) {
                rc = bfs_errf(-EINVAL, err, errlen, "%s:%lu: expected 'key = value', got '%s'",
                              file, no, quote(q, s));
                break;
            }
            *eq = '\0';
            char *key = trim(s), *val = trim(eq + 1), *end = NULL;
            if (!strcmp(key, "source") && !strpbrk(val, "+,") && !weighted(val))
                rc = 0; /* MNT/pipeline's identity line of a mount of one SOURCE */
            else if (!strcmp(key, "source"))
                rc = bfs_pipeline_set(o, key, val, msg, sizeof msg); /* a mixture */
            else if (!strcmp(key, "fingerprint")) {
                errno = 0;
                o->want_fingerprint = strtoull(val, &end, 16);
                o->want_fingerprint_set = 1;
                rc = strlen(val) != 16 || *end || errno || !isxdigit((unsigned char)val[0])
                         ? bfs_errf(-EINVAL, msg, sizeof msg,
                                    "fingerprint=%s: must be 16 hex digits, as in MNT/pipeline",
                                    quote(q, val))
                         : 0;
            } else
                rc = bfs_pipeline_set(o, key, val, msg, sizeof msg);
            if (rc) {
                bfs_errf(rc, err, errlen, "%s:%lu: %s", file, no, msg);
                break;
            }
        }
        if (!nl)
            break;
        line = nl + 1;
    }
    free(buf);
    return rc;
}

int bfs_pipeline_finish(bfs_pipeline_opts *o, char *err, size_t errlen)
{
    if (!(o->given & (1ull << OPT_NORMALIZE))) {
        const char *why = NULL;
        const opt *d = &table[OPT_NORMALIZE];
        (void)d->set(d, o, o->dtype == BFS_OUT_U8 ? "none" : "imagenet", &why);
    } else if (o->dtype == BFS_OUT_U8 && o->normalize) {
        char v[256];
        if (memcmp(o->mean, imagenet_mean, sizeof o->mean) == 0 &&
            memcmp(o->std, imagenet_std, sizeof o->std) == 0)
            snprintf(v, sizeof v, "imagenet");
        else
            fmt_norm_numbers(o, v, sizeof v);
        return bfs_errf(-EINVAL, err, errlen,
                        "normalize=%s: dtype=u8 outputs raw pixels, so normalize must be none; "
                        "use dtype=f16|bf16|f32 to normalize",
                        v);
    }
    /* Every field, formatted and read back by its own setter: one place for each range. */
    for (size_t i = 0; i < OPT_COUNT; i++) {
        const opt *d = &table[i];
        char text[SHOW_MAX];
        if (d->flags & F_LATER) {
            char zero[8];
            d->show(d, o, zero, sizeof zero);
            if (strcmp(zero, "0") == 0)
                continue; /* default, resolved by the engine */
        }
        d->show(d, o, text, sizeof text);
        bfs_pipeline_opts scratch = *o;
        const char *why = NULL;
        if (d->set(d, &scratch, text, &why))
            return bad_value(d, text, why, err, errlen);
    }
    if (!o->mix[0]) {
        for (size_t i = 0; i < OPT_COUNT; i++)
            if ((table[i].flags & F_MIX) && (o->given & (1ull << i)) && differs(o, i))
                return bfs_errf(-EINVAL, err, errlen,
                                "%s= is an option of mixtures: give the sources as "
                                "source=PATH:W+PATH:W (docs/mixing.md)",
                                table[i].pub.name);
        return 0;
    }
    bfs_mix_desc *m = malloc(sizeof *m);
    if (!m)
        return bfs_errf(-ENOMEM, err, errlen, "out of memory");
    int rc = bfs_pipeline_mix(o, m, err, errlen);
    free(m);
    return rc;
}

/* Option i of o differs from its default (a spec file lists every option, defaults too). */
static int differs(const bfs_pipeline_opts *o, size_t i)
{
    bfs_pipeline_opts def;
    bfs_pipeline_defaults(&def);
    char a[SHOW_MAX], b[SHOW_MAX];
    table[i].show(&table[i], o, a, sizeof a);
    table[i].show(&table[i], &def, b, sizeof b);
    return strcmp(a, b) != 0;
}

int bfs_pipeline_check_kind(bfs_pipeline_opts *o, int sequences, char *err, size_t errlen)
{
    for (size_t i = 0; i < OPT_COUNT; i++) {
        const opt *d = &table[i];
        if (!(o->given & (1ull << i)))
            continue;
        if (sequences && (d->flags & F_IMG))
            return bfs_errf(-EINVAL, err, errlen,
                            "%s= is an image option, and this dataset holds token sequences "
                            "(mkbatchfs --tokens): their options are pack, seq_len, buckets, "
                            "batch_tokens, pad_id and positions (docs/sequences.md)",
                            d->pub.name);
        if (sequences && i == OPT_PAD && differs(o, i))
            return bfs_errf(-EINVAL, err, errlen,
                            "pad=1 is not available for token datasets yet: pad the shards of "
                            "an image dataset, or use shard=I/N without pad= (docs/options.md)");
        if (sequences && (d->flags & F_FLD) && differs(o, i))
            return bfs_errf(-EINVAL, err, errlen,
                            "%s= is an option of datasets with several fields per sample, and "
                            "this dataset holds token sequences",
                            d->pub.name);
        if (!sequences && (d->flags & F_SEQ))
            return bfs_errf(-EINVAL, err, errlen,
                            "%s= is an option of token datasets (mkbatchfs --tokens), and this "
                            "dataset holds images",
                            d->pub.name);
    }
    if (o->shuffle == BFS_SHUFFLE_ROWS && (!sequences || o->pack != BFS_PACK_CONCAT))
        return bfs_errf(-EINVAL, err, errlen,
                        "shuffle=rows permutes the rows cut from token documents (pack=concat), "
                        "and %s; use shuffle=full, pages or none",
                        !sequences                ? "this dataset holds images"
                        : o->pack == BFS_PACK_PAD ? "pack=pad serves one document per row"
                                                  : "pack=bucket serves one document per row");
    if (sequences) {
        static const struct {
            int opt, pack; /* option opt may be given only with pack= pack (-1: pad|bucket) */
        } only[] = {{OPT_BUCKETS, BFS_PACK_BUCKET},
                    {OPT_BATCH_TOKENS, BFS_PACK_BUCKET},
                    {OPT_POSITIONS, BFS_PACK_CONCAT},
                    {OPT_PAD_ID, -1}};
        static const char *const packs[] = {"concat", "pad", "bucket"};
        /* given with another value than the default: a spec file (MNT/pipeline) lists
         * every token option, those of other pack= modes at their defaults */
        for (size_t i = 0; i < sizeof only / sizeof *only; i++) {
            if (!(o->given & (1ull << only[i].opt)) || !differs(o, (size_t)only[i].opt))
                continue;
            if (only[i].pack < 0 ? o->pack == BFS_PACK_CONCAT : o->pack != only[i].pack)
                return bfs_errf(-EINVAL, err, errlen, "%s= applies to pack=%s only, not pack=%s",
                                table[only[i].opt].pub.name,
                                only[i].pack < 0 ? "pad|bucket" : packs[only[i].pack],
                                packs[o->pack]);
        }
        if (o->pack == BFS_PACK_BUCKET && (o->given & (1ull << OPT_SEQ_LEN)) &&
            differs(o, OPT_SEQ_LEN))
            return bfs_errf(-EINVAL, err, errlen,
                            "seq_len= does not apply to pack=bucket: each bucket's bound is the "
                            "length of its rows (buckets=B1:B2:...)");
        if (o->pack == BFS_PACK_BUCKET && !o->nbuckets)
            return bfs_errf(-EINVAL, err, errlen,
                            "pack=bucket needs buckets=B1:B2:... (ascending length bounds, e.g. "
                            "buckets=128:256:512:1024)");
    }
    o->sequences = sequences != 0;
    return 0;
}

int bfs_pipeline_check_fields(bfs_pipeline_opts *o, const char *const *names,
                              const unsigned char *kind, uint32_t n, uint64_t *chosen, char *err,
                              size_t errlen)
{
    uint64_t pick = 0;
    if (!o->fields[0])
        pick = n >= 64 ? UINT64_MAX : (1ull << n) - 1;
    for (const char *p = o->fields; *p;) {
        size_t len = strcspn(p, ",");
        uint32_t f = 0;
        while (f < n && (strlen(names[f]) != len || memcmp(names[f], p, len)))
            f++;
        if (f == n) {
            char list[BFS_FIELDS_TEXT + 64];
            size_t at = 0;
            for (uint32_t i = 0; i < n && at < sizeof list; i++)
                at +=
                    (size_t)snprintf(list + at, sizeof list - at, "%s%s", i ? ", " : "", names[i]);
            return bfs_errf(-EINVAL, err, errlen,
                            "fields=%s: this dataset has no field \"%.*s\"; its fields are: %s",
                            o->fields, (int)len, p, list);
        }
        pick |= 1ull << f;
        p += len + (p[len] == ',');
    }
    int image = 0, text = 0, tokens = 0, boxes = 0;
    for (uint32_t f = 0; f < n && f < 64; f++)
        if (pick >> f & 1) {
            image |= kind[f] == BFS_FIELD_IMAGE, text |= kind[f] == BFS_FIELD_TEXT;
            tokens |= kind[f] == BFS_FIELD_TOKENS, boxes |= kind[f] == BFS_FIELD_BOXES;
        }
    if (!image)
        return bfs_errf(-EINVAL, err, errlen,
                        "fields=%s: choose at least one image field (the first becomes the "
                        "`images` tensor)",
                        o->fields);
    if (o->text_len && !text)
        return bfs_errf(-EINVAL, err, errlen,
                        "text_len=%u: none of the fields served is text (remove text_len=)",
                        o->text_len);
    if (o->token_len && !tokens)
        return bfs_errf(-EINVAL, err, errlen,
                        "token_len=%u: none of the fields served is tokens (mkbatchfs "
                        "--tokenize adds one; or remove token_len=)",
                        o->token_len);
    if ((o->given & (1ull << OPT_MIN_BOX_AREA)) && o->min_box_area != 1 && !boxes)
        return bfs_errf(-EINVAL, err, errlen,
                        "min_box_area=%u: none of the fields served is boxes (remove "
                        "min_box_area=)",
                        o->min_box_area);
    char list[BFS_FIELDS_TEXT];
    size_t at = 0;
    for (uint32_t f = 0; f < n && f < 64; f++)
        if (pick >> f & 1)
            at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", at ? "," : "", names[f]);
    if (n > 1)
        snprintf(o->fields, sizeof o->fields, "%s", list);
    o->fielded = n > 1;
    *chosen = pick;
    return 0;
}

/* ---- mixtures: source= and mix_schedule= -------------------------------------------------- */

/* One source item s[0..n) ("PATH[:W]", spaces trimmed): *plen the path's length; *w its
 * weight, 0 when none is given (no ':', or a '/' after the last one: part of the path).
 * false for an empty path or a weight that is not a positive decimal. */
static bool mix_item(const char *s, size_t n, size_t *plen, double *w)
{
    const char *colon = NULL;
    for (size_t i = 0; i < n; i++)
        if (s[i] == ':')
            colon = s + i;
    *plen = n;
    *w = 0;
    if (colon && !memchr(colon, '/', n - (size_t)(colon - s))) {
        *plen = (size_t)(colon - s);
        if (!parse_decimal(colon + 1, n - *plen - 1, false, w) || !(*w > 0) || !isfinite(*w))
            return false;
    }
    return *plen > 0;
}

/* A spec file's `source = X` names a mixture of one source when X has a weight. */
static bool weighted(const char *v)
{
    size_t plen;
    double w;
    return mix_item(v, strlen(v), &plen, &w) && w > 0;
}

/* Walk source= text: calls back each item (trimmed). Returns the item count, or -1 for a
 * bad item (*why set), or a callback's refusal. */
static int mix_walk(const char *v, bfs_mix_desc *d, const char **why)
{
    int n = 0, weighted_n = 0;
    for (const char *p = v;;) {
        const char *e = p + strcspn(p, "+,");
        const char *a = p, *b = e;
        while (a < b && isspace((unsigned char)*a))
            a++;
        while (b > a && isspace((unsigned char)b[-1]))
            b--;
        size_t plen;
        double w;
        if (!mix_item(a, (size_t)(b - a), &plen, &w))
            return *why = a == b ? "an empty source" : "a weight that is not a positive decimal",
                   -1;
        if (n == (int)BFS_MIX_SOURCES)
            return *why = "more than 64 sources", -1;
        weighted_n += w > 0;
        if (d) {
            size_t at = 0;
            for (int k = 0; k < n; k++)
                at += strlen(d->path[k]) + 1;
            memcpy(d->buf + at, a, plen);
            d->buf[at + plen] = '\0';
            d->path[n] = d->buf + at;
            d->weight[n] = w;
        }
        n++;
        if (!*e)
            break;
        p = e + 1;
    }
    if (weighted_n && weighted_n != n)
        return *why = "weights on some sources only: give every source a weight, or none", -1;
    return n;
}

static int set_source(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)d;
    if (!strcmp(v, "SOURCE") || !*v) {
        o->mix[0] = '\0';
        return 0;
    }
    if (strlen(v) >= sizeof o->mix)
        return *why = "too long", -EINVAL;
    for (const char *c = v; *c; c++) /* it must read back from MNT/pipeline's line */
        if ((unsigned char)*c < 0x20 || *c == 0x7f ||
            (*c == '#' && (c == v || isspace((unsigned char)c[-1]))))
            return *why = "a control character, or a '#' first or after a space (which a spec file "
                          "reads as a comment)",
                   -EINVAL;
    int n = mix_walk(v, NULL, why);
    if (n < 0)
        return -EINVAL;
    if (n == 1 && !weighted(v)) /* as MNT/pipeline's `source =` line of one SOURCE says */
        return *why = "one dataset without a weight is the SOURCE argument; a mixture has two "
                      "or more, or a weight (PATH:1)",
               -EINVAL;
    /* as given, with '+' between the sources (a spec file may use ',') */
    size_t i = 0;
    for (; v[i]; i++)
        o->mix[i] = v[i] == ',' ? '+' : v[i];
    o->mix[i] = '\0';
    return 0;
}

static int show_source(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    (void)d;
    return snprintf(buf, cap, "%s", o->mix[0] ? o->mix : "SOURCE");
}

/* Parse schedule text into d (d->n = weights per point, set from the first point when 0).
 * 0, or -1 with *why. */
static int schedule_parse(const char *v, bfs_mix_desc *d, const char **why)
{
    d->npoints = 0;
    d->linear = 0;
    if (!strncmp(v, "linear:", 7))
        d->linear = 1, v += 7;
    else if (!strncmp(v, "step:", 5))
        v += 5;
    uint32_t per = 0;
    for (const char *p = v;;) {
        const char *e = p + strcspn(p, "+,");
        if (d->npoints == BFS_SCHEDULE_POINTS)
            return *why = "more than 32 points", -1;
        const char *at = memchr(p, '@', (size_t)(e - p));
        char *end;
        errno = 0;
        unsigned long long ep = at && isdigit((unsigned char)*p) ? strtoull(p, &end, 10) : 0;
        if (!at || !isdigit((unsigned char)*p) || end != at || errno || ep > UINT32_MAX)
            return *why = "a point that is not EPOCH@W/W/...", -1;
        if (d->npoints && ep <= d->at[d->npoints - 1])
            return *why = "epochs not in ascending order", -1;
        uint32_t k = 0;
        double sum = 0;
        for (const char *q = at + 1;;) {
            const char *qe = q;
            while (qe < e && *qe != '/')
                qe++;
            double w;
            if (k == BFS_MIX_SOURCES || !parse_decimal(q, (size_t)(qe - q), false, &w) ||
                !(w >= 0) || !isfinite(w))
                return *why = "a weight that is not a decimal >= 0", -1;
            d->w[d->npoints][k++] = w;
            sum += w;
            if (qe == e)
                break;
            q = qe + 1;
        }
        if (!(sum > 0))
            return *why = "a point whose weights are all 0", -1;
        if (per && k != per)
            return *why = "points with different numbers of weights", -1;
        per = k;
        d->at[d->npoints++] = ep;
        if (!*e)
            break;
        p = e + 1;
    }
    if (!d->n)
        d->n = per;
    return 0;
}

static int set_schedule(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)d;
    if (!strcmp(v, "none")) {
        o->mix_schedule[0] = '\0';
        return 0;
    }
    bfs_mix_desc *m = calloc(1, sizeof *m);
    if (!m)
        return *why = "out of memory", -EINVAL;
    int rc = schedule_parse(v, m, why);
    /* normalized: the same schedule has one text (and one fingerprint) */
    size_t at = 0;
    char t[40];
    if (!rc)
        at += (size_t)snprintf(o->mix_schedule, sizeof o->mix_schedule, "%s",
                               m->linear ? "linear:" : "");
    for (uint32_t i = 0; !rc && i < m->npoints && at < sizeof o->mix_schedule; i++) {
        at += (size_t)snprintf(o->mix_schedule + at, sizeof o->mix_schedule - at, "%s%llu@",
                               i ? "+" : "", (unsigned long long)m->at[i]);
        for (uint32_t k = 0; k < m->n && at < sizeof o->mix_schedule; k++) {
            fmt_real(t, m->w[i][k], false);
            at += (size_t)snprintf(o->mix_schedule + at, sizeof o->mix_schedule - at, "%s%s",
                                   k ? "/" : "", t);
        }
    }
    if (!rc && at >= sizeof o->mix_schedule)
        *why = "too long", rc = -1;
    if (rc)
        o->mix_schedule[0] = '\0'; /* (the caller keeps its own copy on error) */
    free(m);
    return rc ? -EINVAL : 0;
}

static int show_schedule(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    (void)d;
    return snprintf(buf, cap, "%s", o->mix_schedule[0] ? o->mix_schedule : "none");
}

int bfs_pipeline_mix(const bfs_pipeline_opts *o, bfs_mix_desc *d, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    const char *why = NULL;
    int n = mix_walk(o->mix, d, &why);
    if (n < 1)
        return bfs_errf(-EINVAL, err, errlen, "source=%s: %s", o->mix, why ? why : "empty");
    d->n = (uint32_t)n;
    if (o->mix_schedule[0] && schedule_parse(o->mix_schedule, d, &why))
        return bfs_errf(-EINVAL, err, errlen, "mix_schedule=%s: %s", o->mix_schedule, why);
    if (d->npoints) { /* schedule_parse kept d->n: count the first point's weights */
        bfs_mix_desc t;
        memset(&t, 0, sizeof t);
        (void)schedule_parse(o->mix_schedule, &t, &why);
        if (t.n != d->n)
            return bfs_errf(-EINVAL, err, errlen,
                            "mix_schedule=%s: %u weight%s per point, but source= has %u "
                            "source%s: give one weight per source, in source= order",
                            o->mix_schedule, t.n, t.n == 1 ? "" : "s", d->n, d->n == 1 ? "" : "s");
    }
    return 0;
}

void bfs_pipeline_mix_weights(const bfs_mix_desc *d, const uint64_t *count, uint64_t epoch,
                              double *w)
{
    double sum = 0;
    for (uint32_t k = 0; k < d->n; k++) {
        if (d->npoints) {
            uint32_t i = 0;
            while (i + 1 < d->npoints && d->at[i + 1] <= epoch)
                i++;
            w[k] = d->w[i][k];
            if (d->linear && i + 1 < d->npoints && epoch > d->at[i]) {
                double f = (double)(epoch - d->at[i]) / (double)(d->at[i + 1] - d->at[i]);
                w[k] = d->w[i][k] + f * (d->w[i + 1][k] - d->w[i][k]);
            }
        } else
            w[k] = d->weight[k] > 0 ? d->weight[k] : (double)count[k];
        sum += w[k];
    }
    for (uint32_t k = 0; k < d->n; k++)
        w[k] /= sum;
}

uint64_t bfs_pipeline_mix_identity(const bfs_mix_desc *d, uint64_t sources_identity)
{
    char t[64];
    double sum = 0;
    for (uint32_t k = 0; k < d->n; k++)
        sum += d->weight[k];
    bfs_xxh64_state st;
    bfs_xxh64_init(&st, sources_identity);
    for (uint32_t k = 0; k < d->n; k++) { /* normalized: 7:3 is 0.7:0.3 */
        fmt_real(t, sum > 0 ? d->weight[k] / sum : 0, false);
        bfs_xxh64_update(&st, t, strlen(t) + 1);
    }
    return bfs_xxh64_digest(&st);
}

int bfs_pipeline_mix_display(const bfs_mix_desc *d, char *buf, size_t cap)
{
    size_t at = 0;
    char t[40];
    for (uint32_t k = 0; k < d->n; k++) {
        fmt_real(t, d->weight[k], false);
        int w =
            snprintf(at < cap ? buf + at : NULL, at < cap ? cap - at : 0, "%s%s%s%s", k ? ", " : "",
                     d->path[k], d->weight[k] > 0 ? ":" : "", d->weight[k] > 0 ? t : "");
        if (w < 0)
            return w;
        at += (size_t)w;
    }
    return (int)at;
}

int bfs_pipeline_canonical(const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < OPT_COUNT; i++) {
        const opt *d = &table[i];
        if (d->pub.cls != BFS_OPT_DATA || (d->flags & (o->sequences ? F_IMG : F_SEQ)) ||
            ((d->flags & F_FLD) && !o->fielded) || ((d->flags & F_NEW) && !differs(o, i)) ||
            ((d->flags & F_MIX) && !o->mix[0]) || (d->flags & F_NOCANON))
            continue;
        char v[SHOW_MAX];
        d->show(d, o, v, sizeof v);
        int w = n < cap ? snprintf(buf + n, cap - n, "%s = %s\n", d->pub.name, v)
                        : snprintf(NULL, 0, "%s = %s\n", d->pub.name, v);
        if (w < 0)
            return -EINVAL;
        n += (size_t)w;
    }
    if (n >= cap) {
        if (cap)
            buf[0] = '\0';
        return -ENOSPC;
    }
    return (int)n;
}

uint64_t bfs_pipeline_fingerprint(const bfs_pipeline_opts *o, uint64_t dataset_identity)
{
    char canon[BFS_CANONICAL_MAX], id[32];
    int n = bfs_pipeline_canonical(o, canon, sizeof canon);
    bfs_xxh64_state st;
    bfs_xxh64_init(&st, 0);
    bfs_xxh64_update(&st, BFS_OUTPUT_VERSION "\n", sizeof BFS_OUTPUT_VERSION);
    snprintf(id, sizeof id, "%016llx\n", (unsigned long long)dataset_identity);
    bfs_xxh64_update(&st, id, 17);
    if (n > 0)
        bfs_xxh64_update(&st, canon, (size_t)n);
    return bfs_xxh64_digest(&st);
}

/* ---- --help ------------------------------------------------------------------------------ */

#define HELP_WIDTH   100 /* the house column limit */
#define HELP_OPT_MAX 28  /* a longer "name=syntax" gets a line of its own */

static char help_text[16384];
static pthread_once_t help_once = PTHREAD_ONCE_INIT;

typedef struct sbuf {
    char *p;
    size_t cap, len;
} sbuf;

__attribute__((format(printf, 2, 3))) static void sb_add(sbuf *b, const char *fmt, ...)
{
    if (b->len >= b->cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (w > 0)
        b->len = b->len + (size_t)w < b->cap ? b->len + (size_t)w : b->cap;
}

/* text word-wrapped into lines of at most width columns, continuation lines indented by
 * indent spaces; the first line continues the current one. */
static void sb_wrap(sbuf *b, const char *text, size_t indent, size_t width)
{
    size_t col = 0;
    while (*text) {
        size_t w = strcspn(text, " ");
        if (col && col + 1 + w > width) {
            sb_add(b, "\n%*s", (int)indent, "");
            col = 0;
        }
        sb_add(b, "%s%.*s", col ? " " : "", (int)w, text);
        col += (col ? 1 : 0) + w;
        text += w;
        while (*text == ' ')
            text++;
    }
    sb_add(b, "\n");
}

static void help_build(void)
{
    static const char *const heading[] = {
        [BFS_OPT_DATA] = "Data-changing options (shown in /pipeline, hashed into the fingerprint):",
        [BFS_OPT_LISTING] =
            "Listing option (which epoch directories exist; never changes a batch):",
        [BFS_OPT_KNOB] = "Performance knobs (never change a byte; not in the fingerprint):",
    };
    sbuf b = {help_text, sizeof help_text, 0};
    size_t ow = strlen("option"), dw = strlen("default");
    for (size_t i = 0; i < OPT_COUNT; i++) {
        size_t n = strlen(table[i].pub.name) + 1 + strlen(table[i].pub.syntax);
        if (n > ow && n <= HELP_OPT_MAX)
            ow = n;
        if (strlen(table[i].pub.def) > dw)
            dw = strlen(table[i].pub.def);
    }
    size_t mcol = 2 + ow + 2 + dw + 2; /* where the meaning column starts */
    sb_add(&b, "  %-*s  %-*s  %s\n", (int)ow, "option", (int)dw, "default", "meaning");
    for (int cls = BFS_OPT_DATA; cls <= BFS_OPT_KNOB; cls++) {
        sb_add(&b, "%s\n", heading[cls]);
        for (size_t i = 0; i < OPT_COUNT; i++) {
            const opt *d = &table[i];
            if (d->pub.cls != cls)
                continue;
            char os[128], meaning[1024], allowed[256];
            snprintf(os, sizeof os, "%s=%s", d->pub.name, d->pub.syntax);
            if (strlen(os) > ow)
                sb_add(&b, "  %s\n  %-*s", os, (int)ow, "");
            else
                sb_add(&b, "  %-*s", (int)ow, os);
            sb_add(&b, "  %-*s  ", (int)dw, d->pub.def);
            if (d->flags & F_ENUM) {
                snprintf(meaning, sizeof meaning, "%s", d->pub.help);
            } else {
                allowed_text(d, allowed, sizeof allowed);
                snprintf(meaning, sizeof meaning, "%s; %s", d->pub.help, allowed);
            }
            sb_wrap(&b, meaning, mcol, HELP_WIDTH - mcol);
        }
    }
    sb_add(&b, "Unknown options are errors. A key given twice: the last value wins.\n");
}

const char *bfs_pipeline_help(void)
{
    pthread_once(&help_once, help_build);
    return help_text;
}
