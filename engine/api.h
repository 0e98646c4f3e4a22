/*
 * api.h — the engine's one public header: all that fs/, mountopts/, gpu/ and the programs
 * may use of engine/, declared here itself (`make check-layering`, rule 4: outside
 * engine/, only this header may be included and only the functions it declares called;
 * tests/ excepted: unit tests reach the parts they test). It includes no other header of
 * ours: the engine's own headers include it for what it makes public.
 *
 * What it declares:
 *   - the release version (BATCHFS_VERSION);
 *   - the pipeline options (bfs_pipeline_opts, filled by mountopts/ and --bench), their
 *     table, parsing, checks and --help text, a mixture's description (engine/pipeline.c;
 *     their canonical text and fingerprint stay engine/pipeline.h's);
 *   - the output's values per u8 level (bfs_pipeline_out_levels: libbatchfs-gpu's
 *     conversion table; engine/augment.c);
 *   - the batch handles the executor hands out (bfs_batch: data, size, file, release) and
 *     a wait another thread may cancel (bfs_exec_cancel);
 *   - the batch files' reader (engine/safetensors.c): the dtypes, a batch's descriptor,
 *     the allocation-free safetensors parser that libbatchfs-gpu reads batches with (the
 *     encoder stays engine/safetensors.h's);
 *   - one claimed batch of group= (bfs_group_claim);
 *   - the service (engine/service.c): the composition root that the mount, `batchfs
 *     worker`, --bench and the fault tests build the pipeline with, with its /stats writer,
 *     and what --bench reads of it (counters, the decoders' reference: reference.c);
 *   - mkbatchfs's .bfs dataset files (engine/dataset_api.c over engine/dataset/): packing
 *     and tokenizing, with option and report structs of this header's own, and the
 *     inspector (--info, --cat, --verify);
 *   - `batchfs group-reset` (bfs_group_reset) and `batchfs worker` (bfs_worker_run, whose
 *     serving loop is engine/batch_worker.c).
 */
#ifndef BATCHFS_ENGINE_API_H
#define BATCHFS_ENGINE_API_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- the version --------------------------------------------------------------------- */

/* the batchfs release version, shared by every program */
#define BATCHFS_VERSION "0.1.0"

/* ---- pipeline options (engine/pipeline.h parses, checks and prints them) --------------- */

enum { BFS_SHUFFLE_FULL, BFS_SHUFFLE_PAGES, BFS_SHUFFLE_NONE, BFS_SHUFFLE_ROWS }; /* ROWS: concat */
enum { BFS_AUG_TRAIN, BFS_AUG_EVAL, BFS_AUG_NONE };
enum { BFS_ERASE_PIXEL, BFS_ERASE_RAND, BFS_ERASE_CONST }; /* erasing_mode= (timm's modes) */
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
#define BFS_STAGE_OPS                                                                              \
    21 /* recipe ops counted in bfs_stage_stats: 17 per-sample ops, erasing, mixup, cutmix,        \
          targets */
#define BFS_SCHEDULE_SIZES  16       /* size_schedule= points */
#define BFS_OPT_GIVEN_WORDS 2        /* bfs_pipeline_opts.given: bits for up to 128 options */
#define BFS_MAX_SEQ_LEN     1048576u /* seq_len= and bucket bounds: tokens per row */
/* source=: a mixture of at most BFS_MIX_SOURCES sources, its text at most BFS_MIX_TEXT
 * bytes; mix_schedule=: at most BFS_SCHEDULE_POINTS points in BFS_SCHEDULE_TEXT bytes */
#define BFS_MIX_SOURCES     64u
#define BFS_MIX_TEXT        8192u
#define BFS_SCHEDULE_POINTS 32u
#define BFS_SCHEDULE_TEXT   4096u
enum { BFS_MIX_LABELS_SHARED, BFS_MIX_LABELS_OFFSET }; /* mix_labels= */

#define BFS_AUTO      (-1) /* value of threads/prefetch/cache_mb when "auto" */
#define BFS_HUGE_AUTO 2    /* huge_pages=auto (the enum's third name) */
/* prefetch=auto until the autotuner chooses: batches computed ahead of each reader */
#define BFS_PREFETCH_AUTO 3

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
    /* size_schedule=[linear:]E:S:E:S...: the size by epoch (train; docs/augment.md) */
    uint32_t sched_n;                         /* points (0 = none: size= throughout) */
    uint32_t sched_epoch[BFS_SCHEDULE_SIZES]; /* ascending */
    uint32_t sched_h[BFS_SCHEDULE_SIZES], sched_w[BFS_SCHEDULE_SIZES];
    int sched_linear; /* 1: interpolated, rounded to a multiple of 32 (FFCV) */
    int augment;      /* augment=train|eval|none */
    double scale[2];  /* scale=A:B (0.08:1), 0 < A <= B <= 1 */
    double ratio[2];  /* ratio=A:B (3/4:4/3), 0 < A <= B <= 100 */
    double flip;      /* flip=P (0.5), 0..1 */
    /* torchvision's recipe ops after the crop and flip (docs/augment.md), train only */
    double jitter[4];    /* color_jitter=B:C:S:H (0:0:0:0): ColorJitter's brightness,
                          * contrast, saturation (each >= 0) and hue (0..0.5) */
    double grayscale_p;  /* grayscale_p=P (0), 0..1: RandomGrayscale */
    uint32_t randaug[2]; /* randaugment=N:M|none: N ops (1..16; 0 = none) of magnitude
                          * M (0..30) */
    int trivialaug;      /* trivialaugment=0|1: TrivialAugmentWide */
    int autoaug;         /* autoaugment=none|imagenet: AutoAugment's ImageNet policy */
    double erasing;      /* erasing=P (0), 0..1: timm's RandomErasing after normalize */
    int erasing_mode;    /* erasing_mode=pixel|rand|const (BFS_ERASE_*) */
    /* batch-level mixing, timm's Mixup in batch mode (docs/augment.md), train only */
    double mixup;           /* mixup=ALPHA (0 = off), 0..100: Beta(ALPHA, ALPHA) */
    double cutmix;          /* cutmix=ALPHA (0 = off), 0..100 */
    double mix_prob;        /* mix_prob=P (1): a batch is mixed with probability P */
    double switch_prob;     /* switch_prob=P (0.5): CutMix rather than Mixup, both given */
    double label_smoothing; /* label_smoothing=E (0), 0..1: of the `targets` tensor */
    uint32_t classes;       /* classes=N (0 = the dataset's class count): targets' width */
    int dtype;              /* dtype=u8|f16|bf16|f32 (u8) */
    int normalize;          /* 1 when mean/std were set (imagenet default for float dtypes) */
    float mean[3], std[3];  /* normalize=imagenet|none|m0,m1,m2/s0,s1,s2: float outputs are
                             * always (x/255 - mean)/std; none stores mean 0, std 1, so
                             * float values are x/255 (torchvision ToTensor); u8 outputs
                             * are raw pixels and ignore mean/std */
    int layout;             /* layout=nhwc|nchw */
    int bad_sample;         /* bad_sample=substitute|fail */
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
    int64_t gpu_pool_mb;     /* gpu_pool_mb=N (0 = none), 0..2^40: batches in one pool
                              * file a GPU loader maps and registers once (docs/gpu.md) */
    char remote[512];        /* remote=redis://...|none ("" = none): docs/scale-out.md */
    int remote_ttl;          /* remote_ttl=S (600), 1..30 days */
    int remote_wait_ms;      /* remote_wait_ms=N (10000), 1..86400000 */
    int remote_fallback;     /* remote_fallback=local|wait (BFS_REMOTE_*) */
    int remote_claim_ms;     /* remote_claim_ms=N (30000), 1..86400000: workers */
    char remote_key[512];    /* remote_key=FILE|none ("" = none): values authenticated with
                              * the secret in FILE (engine/remote/remote.h) */
    char group[65];          /* group=NAME|none ("" = none): dynamic sharding (claims.h) */
    /* a dataset in object storage (docs/sources.md; engine/dataset/fetch.h) */
    char s3_region[64];      /* s3_region=NAME|auto ("" = auto: the environment's) */
    char s3_endpoint[512];   /* s3_endpoint=URL|none ("" = none: AWS) */
    char ca[512];            /* ca=FILE|none ("" = none): CAs trusted besides the system's */
    int fetch_retries;       /* fetch_retries=N (5), 0..100 */
    int fetch_timeout_ms;    /* fetch_timeout_ms=N (10000), 1..3600000 */
    int fetch_parallel;      /* fetch_parallel=N (256), 1..256: requests in flight ahead, at most */
    char source_cache[1024]; /* source_cache=PATH|auto|none ("" = none): remote files'
                              * bytes kept on disk for the host's mounts (cache/srccache.h) */
    int64_t source_cache_mb; /* source_cache_mb=N (10240), 1..2^40 */
    /* a spec file's `fingerprint = X` line (MNT/pipeline's): the pipeline must have it */
    uint64_t want_fingerprint;
    int want_fingerprint_set;
    /* bookkeeping for validation: which keys were given explicitly */
    uint64_t given[BFS_OPT_GIVEN_WORDS]; /* bit i % 64 of word i / 64: option i
                                          * (bfs_pipeline_option_at(i)) was set */
} bfs_pipeline_opts;

/* ---- parsing the options (engine/pipeline.c; the rest of its interface: pipeline.h) ---- */

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

/* bfs_pipeline_help - the options with defaults and meaning in aligned columns
 * ("option", "default", "meaning"), grouped by class, for --help; starts with the column
 * headings (the caller prints its own title line), lines of at most 100 columns, ends
 * with a newline. Returns a static string, built once (thread-safe). */
const char *bfs_pipeline_help(void);

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

/* ---- the output's values (engine/augment.c) ------------------------------------------- */

#define BFS_OUT_LEVELS_BYTES (3u * 256u * 4u) /* 3 channels x 256 levels x at most 4 bytes */

/*
 * bfs_pipeline_out_levels - what a mount with options o (after bfs_pipeline_finish)
 * writes for each u8 level v of channel c: its dtype= element, normalized as normalize=
 * says, in the batch file's bytes (little-endian), at lut + (c * 256 + v) * elem, for the
 * returned elem (1 for u8, 2 for f16 and bf16, 4 for f32). lut holds BFS_OUT_LEVELS_BYTES
 * bytes. libbatchfs-gpu converts u8 images with this table, so its values equal the
 * daemon's bit for bit. Deterministic: a pure function of o.
 */
size_t bfs_pipeline_out_levels(const bfs_pipeline_opts *o, uint8_t *lut);

/* ---- batches ------------------------------------------------------------------------ */

typedef struct bfs_batch bfs_batch;

/* A wait that another thread may end: zero it, pass it to bfs_exec_get_as, and call
 * bfs_exec_cancel_wait from anywhere (the mount: when the kernel sends FUSE INTERRUPT). */
typedef struct bfs_exec_cancel {
    _Atomic int requested;
} bfs_exec_cancel;

/* bfs_batch_data / bfs_batch_size - the batch file's bytes; valid until release. */
const uint8_t *bfs_batch_data(const bfs_batch *b);
uint64_t bfs_batch_size(const bfs_batch *b);

/* bfs_batch_substitutes - how many of the batch's slots hold a substitute for a bad sample
 * (bad_sample=substitute): such a batch is served here but shared with no one (not through
 * cache_dir, not through Redis), as the sample may be bad only on this host, or for a while. */
uint32_t bfs_batch_substitutes(const bfs_batch *b);

/* bfs_batch_fd - the read-only file holding exactly the batch's bytes in memfd mode (a
 * sealed memfd, or the cache_dir entry it was read from), or -1; owned by the executor,
 * open until the batch is freed (after the last release). */
int bfs_batch_fd(const bfs_batch *b);

/* bfs_batch_retain - one more reference on b (held: the caller has one). */
void bfs_batch_retain(bfs_batch *b);

/* bfs_batch_release - drop a reference; accepts NULL. */
void bfs_batch_release(bfs_batch *b);

/* ---- batch files: the safetensors reader (engine/safetensors.c) -----------------------
 * The format, the parser's invariants and the encoder of the batches batchfs serves:
 * engine/safetensors.h. What a reader of batch files needs (libbatchfs-gpu, tests) is
 * here: the dtypes, a batch's descriptor, the allocation-free parser. */

#define BFS_ST_FORMAT      "batchfs/2"
#define BFS_ST_MAX_HEADER  100000000ull /* the reference reader's limit on N */
#define BFS_ST_MAX_TENSORS 64u
#define BFS_ST_MAX_DIMS    8u
#define BFS_ST_MAX_META    32u    /* metadata pairs the parser returns */
#define BFS_ST_POOL_SIZE   16384u /* bytes for decoded names, keys and values */

/*
 * Element types: every dtype of safetensors 0.8. The first four are the image dtypes a
 * batch may use; BFS_DT_F4, F6_E2M3 and F6_E3M2 are packed sub-byte types.
 */
typedef enum bfs_dtype {
    BFS_DT_U8,
    BFS_DT_F16,
    BFS_DT_BF16,
    BFS_DT_F32,
    BFS_DT_I64,
    BFS_DT_BOOL,
    BFS_DT_I8,
    BFS_DT_U16,
    BFS_DT_I16,
    BFS_DT_U32,
    BFS_DT_I32,
    BFS_DT_U64,
    BFS_DT_F64,
    BFS_DT_C64,
    BFS_DT_F8_E4M3,
    BFS_DT_F8_E5M2,
    BFS_DT_F8_E8M0,
    BFS_DT_F8_E4M3FNUZ,
    BFS_DT_F8_E5M2FNUZ,
    BFS_DT_F4,
    BFS_DT_F6_E2M3,
    BFS_DT_F6_E3M2,
    BFS_DT_COUNT
} bfs_dtype;

/* bfs_dtype_size - bytes per element; 0 for the sub-byte types and for invalid values. */
size_t bfs_dtype_size(bfs_dtype dt);

/* bfs_dtype_bits - bits per element (4 for F4, 6 for F6_*); 0 for invalid values. */
unsigned bfs_dtype_bits(bfs_dtype dt);

/* bfs_dtype_name - the safetensors name ("U8", "BF16", "F8_E4M3", ...), a static
 * string; NULL for invalid values. */
const char *bfs_dtype_name(bfs_dtype dt);

/* bfs_dtype_from_name - the dtype called name[0, len) (exact, case-sensitive, as in
 * files). Returns 0, or -EINVAL when no dtype has that name. */
int bfs_dtype_from_name(const char *name, size_t len, bfs_dtype *out);

/* One extra metadata pair (both NUL-terminated UTF-8; the caller keeps ownership). */
typedef struct bfs_st_kv {
    const char *key;
    const char *value;
} bfs_st_kv;

/*
 * One more tensor of a batch (a field of a multi-field dataset, engine/engine.c): its
 * shape is [B, shape[0..ndim)). Not an image (image = 0): placed ahead of labels in the
 * data, the tensors ordered by element size, smallest first (a stable sort: equal sizes
 * keep the descriptor's order), so that, ending where the 8-byte-aligned labels begin,
 * every one of them starts at a multiple of its element size whatever B and the shapes
 * are. An image (image = 1): a second image tensor of the `images` dtype, shape and
 * layout (dtype, ndim and shape ignored), placed after `images` in descriptor order:
 * naturally aligned, but on a page boundary only when the images' bytes are a multiple
 * of 4096. In the JSON they follow indices in descriptor order.
 */
#define BFS_ST_MAX_FIELD_TENSORS (BFS_ST_MAX_TENSORS - 3u)
#define BFS_ST_NAME_MAX          63u /* bytes of a field tensor's name */
typedef struct bfs_st_field_tensor {
    const char *name; /* [A-Za-z_][A-Za-z0-9_]*, <= BFS_ST_NAME_MAX bytes, not images,
                         labels or indices, unique */
    bfs_dtype dtype;  /* a whole-byte dtype (image = 0) */
    uint32_t ndim;    /* dimensions after B: 0..BFS_ST_MAX_DIMS-1 */
    uint64_t shape[BFS_ST_MAX_DIMS - 1]; /* each >= 1 */
    int image;                           /* 1: an image tensor like `images` */
} bfs_st_field_tensor;

/* What a batch file holds. The encoder only reads it; pointers stay the caller's. */
typedef struct bfs_st_batch_desc {
    bfs_dtype dtype;        /* images: BFS_DT_U8, F16, BF16 or F32 */
    int nchw;               /* 0: [B,H,W,3]; 1: [B,3,H,W] */
    uint32_t batch;         /* B >= 1 */
    uint32_t height;        /* H >= 1 */
    uint32_t width;         /* W >= 1 */
    uint64_t epoch;         /* written as metadata "epoch" (decimal) */
    uint64_t batch_index;   /* written as metadata "batch" (decimal) */
    uint64_t fingerprint;   /* written as metadata "fingerprint" (16 lowercase hex digits) */
    const bfs_st_kv *extra; /* n_extra extra pairs, written after the four above */
    uint32_t n_extra;       /* <= BFS_ST_MAX_EXTRA */
    const bfs_st_field_tensor *fields; /* n_fields more tensors (NULL, 0: a classic batch,
                                          whose layout is exactly the three tensors') */
    uint32_t n_fields;                 /* <= BFS_ST_MAX_FIELD_TENSORS */
} bfs_st_batch_desc;

/* One tensor entry. name points into the bfs_st_file that holds it. */
typedef struct bfs_st_tensor {
    const char *name; /* decoded UTF-8, NUL-terminated (may contain NUL: use name_len) */
    size_t name_len;
    bfs_dtype dtype;
    uint32_t ndim; /* <= BFS_ST_MAX_DIMS; 0 is a scalar */
    uint64_t shape[BFS_ST_MAX_DIMS];
    uint64_t offset; /* absolute file offset of the first byte: data_offset + begin */
    uint64_t nbytes; /* end - begin == product(shape) * bits / 8 */
} bfs_st_tensor;

/* One metadata pair; both strings point into the bfs_st_file that holds them. */
typedef struct bfs_st_meta {
    const char *key, *value; /* decoded UTF-8, NUL-terminated */
    size_t key_len, value_len;
} bfs_st_meta;

/*
 * A parsed file. Caller-allocated (about 24 KiB: prefer the heap in threads with small
 * stacks); nothing to release. Names and metadata point into its own pool, so it must
 * not be copied by value or moved (re-parse instead).
 */
typedef struct bfs_st_file {
    uint64_t header_len;  /* N */
    uint64_t data_offset; /* 8 + N */
    uint64_t data_size;   /* bytes of the data buffer: the end of the last tensor */
    uint64_t file_size;   /* data_offset + data_size */
    uint32_t n_tensors;   /* in header order */
    uint32_t n_meta;      /* in header order; 0 when there is no __metadata__ */
    bfs_st_tensor tensors[BFS_ST_MAX_TENSORS];
    bfs_st_meta meta[BFS_ST_MAX_META];
    char err[192]; /* after a failure: what and at which header byte; else "" */
    size_t pool_used;
    char pool[BFS_ST_POOL_SIZE];
} bfs_st_file;

/*
 * bfs_st_header_len - decode N from the first 8 bytes of a file and check it against
 * the 100 MB limit. Returns 0, or -EBADMSG (N > BFS_ST_MAX_HEADER, or N < 2, which
 * cannot hold "{}"). Callers that read files piecewise read 8 + *n bytes next.
 */
int bfs_st_header_len(const uint8_t *first8, uint64_t *n);

/*
 * bfs_st_parse - parse and validate a whole safetensors file held in data[0, len):
 * every check bfs_st_parse_header makes, with file_size = len. Tensor bytes are never
 * read (the format has no checksums); only their extent is checked.
 * Returns 0 or bfs_st_parse_header's errors except -ENOBUFS: a file shorter than its
 * header says is -EBADMSG here.
 */
int bfs_st_parse(const uint8_t *data, size_t len, bfs_st_file *out);

/*
 * bfs_st_parse_header - parse and validate a file of file_size bytes of which data[0,
 * len) is a prefix holding at least the 8 + N header bytes (a pread of the first 8192
 * bytes is enough for a batch file whose extras fit BFS_ST_EXTRA_BUDGET). Checks: N <=
 * 100 MB and 8 + N <= file_size; the header is one UTF-8 JSON object with only JSON
 * whitespace (space, tab, CR, LF) before or after it; strings have valid escapes (\uXXXX
 * surrogate pairs decoded to UTF-8, no lone surrogates) and no raw control characters;
 * numbers are non-negative integers in plain decimal that fit 64 bits (fractions,
 * exponents, signs and leading zeros rejected); no duplicate keys anywhere;
 * "__metadata__" is an object of string values (or null, which the reference reader also
 * accepts: no metadata); every other key is a tensor: an object with exactly "dtype" (a
 * known name), "shape" (integers) and "data_offsets" ([begin, end], begin <= end);
 * product(shape) * bits overflows nothing, is a whole number of bytes and equals (end -
 * begin) * 8; sorted by offsets the tensors cover [0, data_size) without holes or
 * overlaps; and 8 + N + data_size == file_size exactly. Only the first 8 + N bytes are
 * read.
 * Returns 0; -EBADMSG: not a valid safetensors file (out->err says what, with the byte
 * offset in the file); -E2BIG: valid as far as checked but beyond this parser's limits
 * (more than BFS_ST_MAX_TENSORS tensors, BFS_ST_MAX_DIMS dimensions, BFS_ST_MAX_META
 * metadata pairs, or BFS_ST_POOL_SIZE bytes of names and metadata); -ENOBUFS: len <
 * 8 + N <= file_size, read more and retry; -EINVAL: NULL data or out, or len >
 * file_size. On failure out's other fields are unspecified.
 */
int bfs_st_parse_header(const uint8_t *data, size_t len, uint64_t file_size, bfs_st_file *out);

/* bfs_st_find - the tensor called name (NUL-terminated) in f, or NULL. Valid as long as
 * f is. */
const bfs_st_tensor *bfs_st_find(const bfs_st_file *f, const char *name);

/* bfs_st_meta_get - the metadata value of key (NUL-terminated) in f, or NULL. Valid as
 * long as f is. */
const char *bfs_st_meta_get(const bfs_st_file *f, const char *key);

/*
 * bfs_st_batch_from_file - check that a parsed file is a batchfs batch and recover its
 * descriptor: metadata format == "batchfs/2", layout "nhwc" or "nchw", epoch and batch
 * in plain decimal, a 16-digit lowercase hex fingerprint; exactly the tensors images,
 * labels, indices, the first three in the header, with the dtypes and shapes of a batch
 * in that layout (B, H, W in [1, 2^32)), and their data in the order labels, indices,
 * images, contiguous (a "batchfs/1" file, images first, is refused by its format; one
 * that claims "batchfs/2" in the old order by its order). Any further tensors are field
 * tensors (bfs_st_field_tensor) whose first dimension must be B; they are counted in
 * d->n_fields, not recovered (d->fields = NULL: read them from f). The header may be any
 * size, so the alignment of the file comment is not required. The extras are not
 * recovered (d->extra = NULL, d->n_extra = 0).
 * Returns 0, -EBADMSG with a one-line reason in err (errlen bytes; err may be NULL when
 * errlen is 0), or -EINVAL (f or d NULL). d is written only on success.
 */
int bfs_st_batch_from_file(const bfs_st_file *f, bfs_st_batch_desc *d, char *err, size_t errlen);
/* ---- group= ------------------------------------------------------------------------- */

/* One claimed batch, as bfs_claims_take gives it and bfs_claims_give_back takes it. */
typedef struct bfs_group_claim {
    uint64_t epoch, batch;
    uint32_t tries; /* failed tries before this one (0: a new claim) */
} bfs_group_claim;

/* ---- the service (engine/service.c): the composition root ------------------------------
 * One object builds the whole pipeline service from the parsed options (the engine, the
 * RAM budget, the host-wide store of cache_dir=, the claims of group=, the executor, its
 * remote side and the autotuner), owns every one of their lifetimes, and writes the one
 * /stats document. FUSE-free: the mount (fs/fs.c), `batchfs worker` (batch_worker.c),
 * `batchfs --bench` (programs/bench.c) and the fault tests use it, each adding only its
 * own front.
 *
 * Two phases, because a mount goes to the background in between (fork keeps no thread):
 *   OPEN  (bfs_service_open): everything a user can get wrong, checked while stderr is
 *         still the terminal: the engine (the dataset and the options), the RAM budget,
 *         the caller's own checks (cfg.check: the mountpoint), the store, the cache size,
 *         the group's claims, the /pipeline text. No thread is started.
 *   START (bfs_service_start): the executor's workers, the store attached, the remote
 *         side (remote=), the default prefetch depth and the autotuner (a mount).
 * bfs_service_close undoes both, in reverse (claims taken ahead go back to the group).
 */
typedef struct bfs_service bfs_service;

/* What a service serves: a mount (all of it: claims with group=, the remote side with
 * remote=, prefetch, the autotuner, the cache sized from the RAM budget), or compute only
 * (the engine, the store and the executor: `batchfs worker`, --bench, tests). */
enum { BFS_SERVICE_MOUNT = 0, BFS_SERVICE_COMPUTE = 1 };

typedef struct bfs_service_cfg {
    const char *source;            /* the dataset (a .bfs, a folder, a mixture's list) */
    const bfs_pipeline_opts *pipe; /* parsed and finished; must outlive the service */
    int role;                      /* BFS_SERVICE_MOUNT or BFS_SERVICE_COMPUTE */
    /* where the engine's notes and the service's warnings go ("TAG: ..."; NULL: nowhere) */
    FILE *notes;
    const char *tag;
    /* optional: run after the pipeline's checks, before anything outside the process is
     * made (the store's directory, the group's file); nonzero fails the open (it has said
     * why: err stays empty) */
    int (*check)(void *arg);
    void *check_arg;
    /* BFS_SERVICE_COMPUTE: the workers (<= 0: online CPUs) and the finished-batch cache,
     * in batches of the largest size (0: none kept) */
    int threads;
    int cache_batches;
    /* tests: the store's durability (a bfs_store_sync; 0: none, as cache_dir= has), and
     * a store that cannot be opened is left out (batches are computed) instead of failing */
    int store_sync;
    int store_optional;
} bfs_service_cfg;

/* Where bfs_service_open failed (*failed_at). */
enum { BFS_SERVICE_AT_ENGINE = 1, BFS_SERVICE_AT_CHECK, BFS_SERVICE_AT_OTHER };

/*
 * bfs_service_open - the OPEN phase (above). Returns 0 with *out set, or an error with one
 * line in err naming the option, file or limit at fault and what to do (no "batchfs: "
 * prefix; empty when cfg.check failed), and *failed_at (may be NULL) set.
 */
int bfs_service_open(const bfs_service_cfg *cfg, bfs_service **out, int *failed_at, char *err,
                     size_t errlen);

/*
 * bfs_service_start - the START phase (above), in the process that serves. Returns 0, or
 * an error with one line in err ("cannot start workers: ...", a remote= error). Warnings
 * (remote_fallback=local while Redis is down, an autotuner that did not start) go to
 * cfg.notes.
 */
int bfs_service_start(bfs_service *s, char *err, size_t errlen);

/* bfs_service_shutdown - wake every waiter on a batch with -ESHUTDOWN and refuse new work
 * (unmount); any thread, any time after start. */
void bfs_service_shutdown(bfs_service *s);

/* bfs_service_stop - stop the autotuner and the executor and close the store (START's
 * undo and the store: --bench, before timing its reference); the engine stays. All
 * batches must have been released. */
void bfs_service_stop(bfs_service *s);

/* bfs_service_close - stop what runs, give back the claims taken ahead, close the store
 * and the claims, free the engine and s. Accepts NULL. */
void bfs_service_close(bfs_service *s);

/* bfs_service_pipeline - the text of MNT/pipeline (made at open). */
const char *bfs_service_pipeline(const bfs_service *s, size_t *len);

/*
 * bfs_service_next_claim - the claim for an open of epoch/N/next (group=): the oldest one
 * taken ahead for epoch N, else the group's next; then, while the prefetch depth d (the
 * executor's, from prefetch= or the autotuner; at most BFS_SERVICE_AHEAD_MAX) allows,
 * more are taken ahead and their batches prefetched, so that a reader opening next one
 * file after another finds each computed instead of waiting a whole batch per open. Taking
 * ahead takes batches from the group's other mounts: only a mount whose next is being
 * opened does so, at most d per epoch, and what it holds goes back untried at close (an
 * epoch's end is uneven by at most d batches per mount). 0, -ENODATA (counted: /stats
 * group.exhausted) or an error of bfs_claims_take.
 */
#define BFS_SERVICE_AHEAD_MAX 16
int bfs_service_next_claim(bfs_service *s, uint64_t epoch, bfs_group_claim *c);

/* The plan, for names and sizes (never computing a batch): bfs_engine_batches,
 * bfs_engine_batch_bytes, bfs_engine_batch_len, bfs_engine_fingerprint of the engine. */
uint64_t bfs_service_batches(const bfs_service *s);
uint64_t bfs_service_batch_bytes(const bfs_service *s, uint64_t epoch, uint64_t k);
uint32_t bfs_service_batch_len(const bfs_service *s, uint64_t epoch, uint64_t k);
uint64_t bfs_service_fingerprint(const bfs_service *s);

/* Batches, for a front: bfs_exec_get_as for reader pid (alive while its process exists),
 * bfs_exec_get_cancel, bfs_exec_cancel_wait and bfs_exec_consumed of the executor
 * (engine/exec.h; after start). */
int bfs_service_get_as(bfs_service *s, uint64_t pid, uint64_t epoch, uint64_t k,
                       bfs_exec_cancel *cancel, bfs_batch **out, char *err, size_t errlen);
int bfs_service_get_cancel(bfs_service *s, uint64_t epoch, uint64_t k, bfs_exec_cancel *cancel,
                           bfs_batch **out, char *err, size_t errlen);
void bfs_service_cancel_wait(bfs_service *s, bfs_exec_cancel *c);
void bfs_service_consumed(bfs_service *s, uint64_t epoch, uint64_t k);
/* bfs_service_batch_files - keep every finished batch in a read-only file (on: FUSE
 * passthrough serves them; huge_pages= decides where: auto once memory is recycled,
 * bfs_exec_set_memfd) or not (off: batches are served by copying). */
void bfs_service_batch_files(bfs_service *s, int on);
/* bfs_service_huge_files - batch files live on the private huge-page tmpfs (stats). */
int bfs_service_huge_files(bfs_service *s);
/* bfs_service_pool - the pool file of gpu_pool_mb= (the service keeps it; read-write) and
 * *size, or -1 without one. Batches are then computed into its windows and stay there
 * (no batch files: bfs_service_batch_files is off). bfs_service_batch_window - 1 with *off
 * when batch b (held: its window is not reused until it is released) lies in the pool at
 * offset *off, 0 when not (no pool, or no window was free for it). */
int bfs_service_pool(bfs_service *s, uint64_t *size);
int bfs_service_batch_window(bfs_service *s, const bfs_batch *b, uint64_t *off);

/* bfs_service_has_group - group= is set (epoch/N/next exists). bfs_service_claim_return,
 * bfs_service_claim_give_back - bfs_claims_return / bfs_claims_give_back of the group. */
int bfs_service_has_group(const bfs_service *s);
void bfs_service_claim_return(bfs_service *s, const bfs_group_claim *c);
void bfs_service_claim_give_back(bfs_service *s, const bfs_group_claim *c);

/* What the front counts, for /stats (the mount's requests, passthrough, group opens). */
typedef struct bfs_service_front {
    uint64_t served;       /* batches handed to readers */
    uint64_t opened;       /* batch files opened */
    uint64_t opened_bytes; /* and their sizes */
    uint64_t reads, bytes, read_errors, interrupted;
    uint64_t claims_served; /* opens of epoch/N/next that served a batch */
    int pt_active;          /* passthrough in use */
    uint64_t pt_opens;      /* batch files opened in passthrough mode */
    unsigned backing_files; /* backing files registered now */
    int pool_on;            /* /.pool is served (gpu_pool_mb= under passthrough) */
    uint64_t windows;       /* user.batchfs.window answers */
} bfs_service_front;

/*
 * bfs_service_stats - the /stats document (docs/stats.md: JSON, fields in a fixed order,
 * read by tests/mount/ scripts and `batchfs top`) of the service now with the front's
 * counters f, in *out (malloc'd, the caller frees; NULL when out of memory) of *len bytes.
 */
void bfs_service_stats(bfs_service *s, const bfs_service_front *f, char **out, size_t *len);

/* ---- what --bench reads of a service ---------------------------------------------------- */

/* The dataset and the plan: bfs_engine_max_batch_bytes, _samples, _canonical,
 * _source_path, _batch_indices of the engine (engine/engine.h); sequences: a dataset of
 * token sequences (rows, not images). */
uint64_t bfs_service_max_batch_bytes(const bfs_service *s);
uint64_t bfs_service_samples(const bfs_service *s);
int bfs_service_sequences(const bfs_service *s);
const char *bfs_service_canonical(const bfs_service *s);
const char *bfs_service_source_path(const bfs_service *s);
int bfs_service_batch_indices(bfs_service *s, uint64_t epoch, uint64_t k, uint64_t *idx);

/* bfs_service_get / bfs_service_prefetch - bfs_exec_get / bfs_exec_prefetch of the
 * executor (no reader followed; after start). */
int bfs_service_get(bfs_service *s, uint64_t epoch, uint64_t k, bfs_batch **out, char *err,
                    size_t errlen);
int bfs_service_prefetch(bfs_service *s, uint64_t epoch, uint64_t k);

/* Time and counts of the pipeline's stages, summed over the workers. */
typedef struct bfs_stage_stats {
    uint64_t samples;
    uint64_t read_ns, decode_ns, resize_ns; /* resize includes flip/normalize/cast/store */
    uint64_t augment_ns;                    /* the recipe ops (docs/augment.md) */
    uint64_t op_ns[BFS_STAGE_OPS];          /* of augment_ns: op i's (bfs_stage_op_name) */
    uint64_t op_n[BFS_STAGE_OPS];           /* times op i was applied */
    uint64_t encode_ns;                     /* batch headers, labels, indices */
    uint64_t bad_samples;                   /* substituted (or failed) samples */
    uint64_t texts_cut; /* text values longer than text_len= (multi-field datasets) */
    uint64_t decode_cropped, decode_full, decode_scaled, decode_raw;
    uint64_t decode_windowed; /* of decode_cropped: restart-segment windows (decode.c) */
} bfs_stage_stats;

/* bfs_stage_op_name - the name of recipe op i (torchvision's: "Rotate", "Color", ...), or
 * NULL past the last. */
const char *bfs_stage_op_name(int i);

/* The executor's counters a benchmark reports (bfs_exec_stats' of the same names). */
typedef struct bfs_service_counters {
    int threads;            /* workers allowed to compute now */
    uint64_t buffer_allocs; /* batch buffers ever allocated (not taken from the pool) */
    bfs_stage_stats stages;
} bfs_service_counters;
void bfs_service_get_counters(bfs_service *s, bfs_service_counters *c);

/* The decoded-sample cache's counters (sample_cache_mb=; all 0 without one). */
typedef struct bfs_sample_cache_counts {
    uint64_t hits, misses, inserts, refused_budget, bytes, budget_bytes;
} bfs_sample_cache_counts;
void bfs_service_sample_cache(bfs_service *s, bfs_sample_cache_counts *c);
/* bfs_sample_cache_json - c as the JSON object /stats and --bench --json print
 * ({"hits": N, "misses": N, "inserts": N, "refused_budget": N, "bytes": N,
 * "budget_bytes": N}) into buf (len bytes, NUL-terminated, truncated if too small). */
void bfs_sample_cache_json(const bfs_sample_cache_counts *c, char *buf, size_t len);

/* bfs_augment_ops_json - the recipe ops of st as /stats' and --bench --json's
 * "augment_ops" object ({"Rotate": {"applied": N, "us_each": X}, ...}: the ops applied at
 * least once) into buf (len bytes, NUL-terminated; BFS_STAGE_OPS * 64 + 4 holds any). */
void bfs_augment_ops_json(const bfs_stage_stats *st, char *buf, size_t len);

/*
 * bfs_reference_rate - the decoders' reference of --bench: single-core full decodes
 * (tjDecompress2 to RGB; PNG and WebP through libspng, libwebp) of samples idx[0..n) of
 * source, in this thread: images per second of wall time, and (*cpu_rate) images per CPU
 * second of this thread; *used: the images decoded. 0 for a source that cannot be opened
 * or holds no images (token datasets).
 */
double bfs_reference_rate(const char *source, const uint64_t *idx, size_t n, size_t *used,
                          double *cpu_rate);

/* ---- .bfs dataset files: mkbatchfs (engine/dataset_api.c over engine/dataset/) ----------
 * What mkbatchfs packs and inspects, with types of this header's own: the dataset layer
 * (engine/dataset/: the .bfs format, the packer, the image probes) sits below the
 * engine's top folder and cannot include this header, so engine/dataset_api.c converts
 * these structs to and from its own (pack.h, record.h), checks at compile time that the
 * constants below equal its, and passes the engine's resampler to the packer. */

#define BFS_DATASET_VERSION_MIN    1u         /* .bfs versions read: 1 images, 2 tokens, */
#define BFS_DATASET_VERSION        3u         /* 3 fields (bfs.h's BFS_VERSION_MIN, _VERSION) */
#define BFS_DATASET_PAGE_SIZE_MIN  4096u      /* --page-size: a power of two in [MIN, MAX] */
#define BFS_DATASET_PAGE_SIZE_MAX  (1u << 30) /* (bfs.h's BFS_PAGE_SIZE_MIN, _MAX) */
#define BFS_DATASET_FIELDS_MAX     64u        /* fields per sample (BFS_FIELD_MAX) */
#define BFS_DATASET_FIELD_NAME_MAX 31u        /* bytes of a field name (BFS_FIELD_NAME_MAX) */

/* bfs_dataset_pack_opts.token_format (pack.h's BFS_TOKENS_*) */
enum { BFS_DATASET_TOKENS_FLAT, BFS_DATASET_TOKENS_NPY, BFS_DATASET_TOKENS_MEGATRON };
/* bfs_dataset_pack_opts.format and bfs_dataset_report.format (shard.h's BFS_FORMAT_*) */
enum {
    BFS_DATASET_FORMAT_AUTO,
    BFS_DATASET_FORMAT_WEBDATASET,
    BFS_DATASET_FORMAT_TFRECORD,
    BFS_DATASET_FORMAT_MANIFEST
};

/* How to pack (engine/dataset/pack.h's bfs_pack_opts says each field's meaning). */
typedef struct bfs_dataset_pack_opts {
    int jobs;           /* worker threads; <= 0: online CPUs */
    int max_side;       /* 0: keep the images' bytes; else shrink larger ones (the engine's
                           resampler, Pillow's antialiased bilinear) and re-encode them */
    int quality;        /* re-encode quality, 1..100 (0: 90) */
    int raw;            /* store lz4-compressed RGB pixels instead of the images' bytes */
    int restart;        /* losslessly add a restart marker after every MCU */
    int strict;         /* fail on the first file (or sample) that would be skipped */
    int fsync;          /* fsync the output before renaming it into place */
    uint32_t page_size; /* 0: the default (8 MiB) */
    int progress;       /* draw a progress bar on progress_out */
    FILE *progress_out; /* usually stderr */
    /* token sequences instead of images: */
    int tokens;          /* 0: images; 2 or 4: a flat file of token ids of that width */
    uint32_t doc_sep;    /* the token that ends each document (kept as its last token) */
    int token_format;    /* BFS_DATASET_TOKENS_FLAT (with tokens), _NPY or _MEGATRON */
    const char *offsets; /* BFS_DATASET_TOKENS_NPY: the .npy of document offsets */
    /* sharded and manifest sources: */
    int format;                /* BFS_DATASET_FORMAT_*; AUTO: told by the sources' names */
    const char *image_key;     /* the image's extension, feature or column (NULL: defaults) */
    const char *label_key;     /* the label's JSON key, feature or column (NULL: defaults) */
    int image_only;            /* the image and the label only (a version 1 file) */
    const char *const *fields; /* nfields --field arguments (bfs_dataset_field_parse
                                  accepted each), or NULL: every member a field */
    size_t nfields;            /* <= BFS_DATASET_FIELDS_MAX + 1 (fields and a label) */
} bfs_dataset_pack_opts;

/* A file or sample left out, and why ("corrupt JPEG data (...)", "not a JPEG", ...). */
typedef struct bfs_dataset_skip {
    char *path;
    char *reason;
} bfs_dataset_skip;

/* What a pack did (pack.h's bfs_pack_report); free with bfs_dataset_report_free. */
typedef struct bfs_dataset_report {
    uint64_t files;     /* files (or samples of shards) found */
    uint64_t packed;    /* samples written */
    uint64_t reencoded; /* images re-encoded below max_side */
    uint64_t restarted; /* JPEGs with a restart marker after every MCU */
    uint32_t classes;
    uint64_t bytes_in, bytes_out; /* payload bytes read / stored */
    double seconds;
    bfs_dataset_skip *skipped; /* nskipped, in dataset order */
    uint64_t nskipped;
    uint64_t ignored;  /* files that are no images (folders); empty documents (tokens) */
    uint64_t tokens;   /* token ids packed (tokens, --tokenize) */
    uint64_t longest;  /* tokens of the longest document */
    int token_size;    /* bytes per token id stored: 2 or 4 */
    char notes[2048];  /* about the folder scan, or "" */
    int format;        /* the sources' BFS_DATASET_FORMAT_* when they were shards, else 0 */
    uint64_t shards;   /* shard files read */
    uint64_t extra;    /* members of samples kept in no field */
    uint32_t nfields;  /* fields per sample written (1: the image alone, version 1) */
    char fields[2048]; /* "jpg image, txt text, ..." for the summary, or "" */
} bfs_dataset_report;

/*
 * bfs_dataset_field_parse - check one --field argument (NAME=MEMBER[:KEY][:KIND[:DTYPE]]
 * [:follows=F][:optional]) and copy its NAME to name (namelen bytes; NAME has at most
 * BFS_DATASET_FIELD_NAME_MAX). Returns 0, or -EINVAL with the reason in err.
 */
int bfs_dataset_field_parse(const char *arg, char *name, size_t namelen, char *err, size_t errlen);

/*
 * bfs_dataset_pack - pack srcs[0..nsrcs) into out: an ImageFolder directory or a .bfs to
 * re-pack (one source), WebDataset or TFRecord shards, manifests, or with o->tokens or
 * o->token_format a file of token ids (engine/dataset/pack.h: bfs_pack_sources, bfs_pack,
 * the token packers). Returns as bfs_pack_sources: 0, BFS_E_EMPTY, -EINVAL, -ECANCELED
 * (*cancel set: a signal handler may set it; the temporary file is removed), a negative
 * errno or a skip's code with strict, err naming the file; rep is filled either way.
 */
int bfs_dataset_pack(const char *const *srcs, size_t nsrcs, const char *out,
                     const bfs_dataset_pack_opts *o, bfs_dataset_report *rep, _Atomic int *cancel,
                     char *err, size_t errlen);

/* A tokenizer (a bfs_tokenize_fn, pack.h): the ids of text[0..len) (UTF-8) into ids (cap
 * of them); returns the count (which may exceed cap: called again with more room) or a
 * negative errno with a message in err. */
typedef long (*bfs_dataset_tokenize_fn)(void *ctx, const char *text, size_t len, uint32_t *ids,
                                        size_t cap, char *err, size_t errlen);

/* What --tokenize adds (pack.h's bfs_tokenize_opts). */
typedef struct bfs_dataset_tokenize_opts {
    const char *field;     /* the text field tokenized */
    const char *out_field; /* the tokens field added (NULL: FIELD_tokens) */
    uint32_t vocab;        /* ids are < vocab: u16 when vocab <= 65536, else u32 */
    bfs_dataset_tokenize_fn fn;
    void *ctx;
} bfs_dataset_tokenize_opts;

/*
 * bfs_dataset_tokenize - copy the version 3 .bfs src to out with one field added, the
 * ids of text field t->field (bfs_pack_tokenize, pack.h: its errors; o gives page_size,
 * fsync and progress). rep counts samples (packed), tokens and the longest.
 */
int bfs_dataset_tokenize(const char *src, const char *out, const bfs_dataset_tokenize_opts *t,
                         const bfs_dataset_pack_opts *o, bfs_dataset_report *rep,
                         _Atomic int *cancel, char *err, size_t errlen);

/* bfs_dataset_temp_path - while a pack runs, the temporary file it writes (or NULL); for a
 * signal handler that must unlink it. Points to static storage. */
const char *bfs_dataset_temp_path(void);

/* bfs_dataset_report_free - free the report's list; accepts a zeroed report. */
void bfs_dataset_report_free(bfs_dataset_report *rep);

/* bfs_dataset_open_check - 0 when path opens as a .bfs file, else bfs_open's error (err
 * may be NULL). */
int bfs_dataset_open_check(const char *path, char *err, size_t errlen);

/*
 * The inspector (mkbatchfs --info, --cat, --verify). Each reads the .bfs file at path,
 * writes what it finds to out and each problem as one line "PROG: PATH: ..." to msg
 * (prog: the program's name), and returns 0 when the file is sound, else a negative
 * code (the file does not open: bfs_open's; out of memory; a corrupt part: its BFS_E_*),
 * its message written.
 *
 * bfs_dataset_describe - the header, the samples by kind, sizes, the fields and the
 * classes; when some sample entries are invalid the description says how many (run
 * verify) and the first one's code is returned.
 * bfs_dataset_cat - write the stored bytes of sample index's value of field (NULL: field
 * 0) to fd, its checksum checked first.
 * bfs_dataset_verify - check the tables, every page's checksum, every sample (its checksum,
 * then its JPEG, PNG or WebP header against the table, or a raw payload's size) and the
 * class names; "PATH: OK (...)" on out, or "PATH: CORRUPT (...)" on msg.
 */
int bfs_dataset_describe(const char *prog, const char *path, FILE *out, FILE *msg);
int bfs_dataset_cat(const char *prog, const char *path, uint64_t index, const char *field, int fd,
                    FILE *msg);
int bfs_dataset_verify(const char *prog, const char *path, FILE *out, FILE *msg);

/* ---- group-reset, and remote= in messages ----------------------------------------------- */

/* bfs_remote_display - remote= (a redis:// URL) as messages show it: no password. */
void bfs_remote_display(const char *remote, char *buf, size_t len);

/*
 * bfs_group_reset - delete the claim counters and given-back lists of group o->group of the
 * pipeline (source, o) in the Redis of o->remote (bfs_claims_reset_remote): *fingerprint
 * the pipeline's, *deleted the keys deleted. Returns 0, or an error with one line in err
 * (a source that cannot be opened, Redis unreachable or refusing).
 */
int bfs_group_reset(const char *source, const bfs_pipeline_opts *o, uint64_t *fingerprint,
                    long long *deleted, char *err, size_t errlen);

/* ---- `batchfs worker` (engine/batch_worker.c) ---------------------------------------- */

/*
 * bfs_worker_run - `batchfs worker SOURCE -o remote=redis://...`: compute batches for
 * trainer mounts on other hosts (docs/scale-out.md), serving the job stream of the
 * pipeline (source, o) until SIGINT or SIGTERM (the jobs in hand, at most two, are
 * finished first, after leaving the set of live workers), or until `batches` jobs are done
 * (0: no limit). name: the consumer name in Redis (NULL: HOST:PID). Logs to log, one
 * timestamped line per event. Returns 0, or an error after logging it (no source, a bad
 * remote_key, a refused pipeline, Redis unreachable at start or refusing the password;
 * BFS_E_CHANGED when its dataset changed in place under it, after declining the job).
 */
int bfs_worker_run(const char *source, const bfs_pipeline_opts *o, const char *name,
                   unsigned long batches, FILE *log);

#endif
