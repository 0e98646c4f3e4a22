/*
 * pipeline_table.c — the pipeline option table (pipeline_internal.h): one row per option
 * of pipeline.h, in documented order. pipeline.c generates parsing, messages, defaults,
 * validation, the canonical text and --help from it.
 *
 * Adding an option: one OPT_* index (pipeline_internal.h), one row here, a field in
 * bfs_pipeline_opts, a line in docs/options.md (and tests/check_pipeline.c's list).
 * Nothing else.
 */
#include "engine/pipeline_internal.h"
#include "engine/dataset/bfs.h"
#include "engine/remote/remote.h"

#include <stdint.h>

#define PUB(name_, cls_, syntax_, def_, help_)                                                     \
    .pub = {.name = name_, .syntax = syntax_, .def = def_, .help = help_, .cls = cls_}
#define FIELD(f) .off = offsetof(bfs_pipeline_opts, f)
#define INT(f, w, lo_, hi_, fl)                                                                    \
    FIELD(f), .set = bfs_opt_set_uint, .show = bfs_opt_show_uint, .width = w, .lo = lo_,           \
              .hi = hi_, .flags = fl
#define ENUMF(f, fl)                                                                               \
    FIELD(f), .set = bfs_opt_set_enum, .show = bfs_opt_show_enum, .flags = F_ENUM | (fl)
#define ENUM(f) ENUMF(f, 0)
#define D       BFS_OPT_DATA
#define K       BFS_OPT_KNOB
#define MIB_MAX (1ull << 40) /* MiB budgets: 2^40 MiB = 1 EiB, so MiB * 2^20 fits int64 */

const opt bfs_opt_table[OPT_COUNT] = {
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
                   FIELD(shard_index), .set = bfs_opt_set_shard, .show = bfs_opt_show_shard,
                   .hi = 65536, .allowed = "I/N with integers N in 1..65536 and I < N"},
    [OPT_PAD] = {PUB("pad", D, "0|1", "0",
                     "1: every shard gets ceil(n/N) samples, repeating the epoch's first ones, "
                     "marked in a `padded` tensor; 0: floor(n/N), the rest left out"),
                 ENUMF(pad, F_NEW)},
    [OPT_SIZE] = {PUB("size", D, "H|HxW", "224", "output image size in pixels; H means HxH"),
                  FIELD(out_h), .set = bfs_opt_set_size, .show = bfs_opt_show_size, .lo = 1,
                  .hi = 8192, .flags = F_IMG, .allowed = "H or HxW, integers in 1..8192"},
    [OPT_SIZE_SCHEDULE] = {PUB("size_schedule", D, "[linear:]E:S:E:S...", "none",
                               "train: the output size by epoch (progressive resizing): from "
                               "epoch E on, size S (H or HxW); linear: interpolated between "
                               "the points, rounded to a multiple of 32 as FFCV's recipes do"),
                           FIELD(sched_n), .set = bfs_opt_set_sizes, .show = bfs_opt_show_sizes,
                           .flags = F_IMG | F_NEW,
                           .allowed = "none, or [linear:] then 1 to 16 pairs E:S, epochs "
                                      "ascending, sizes H or HxW in 1..8192 (linear: 32..8192)"},
    [OPT_AUGMENT] = {PUB("augment", D, "train|eval|none", "train",
                         "train: RandomResizedCrop(scale, ratio) + horizontal flip (torchvision "
                         "semantics); eval: resize the shorter side to size/0.875, center "
                         "crop; none: resize to size"),
                     ENUMF(augment, F_IMG)},
    [OPT_SCALE] = {PUB("scale", D, "A:B", "0.08:1",
                       "train: range of the crop's area as a fraction of the image's"),
                   FIELD(scale), .set = bfs_opt_set_range, .show = bfs_opt_show_range, .dhi = 1,
                   .flags = F_IMG,
                   .allowed = "A:B with 0 < A <= B <= 1 (decimals or fractions p/q)"},
    [OPT_RATIO] = {PUB("ratio", D, "A:B", "3/4:4/3",
                       "train: range of the crop's aspect ratio (width/height)"),
                   FIELD(ratio), .set = bfs_opt_set_range, .show = bfs_opt_show_range, .dhi = 100,
                   .flags = F_IMG,
                   .allowed = "A:B with 0 < A <= B <= 100 (decimals or fractions p/q)"},
    [OPT_FLIP] = {PUB("flip", D, "P", "0.5", "train: probability of a horizontal flip"),
                  FIELD(flip), .set = bfs_opt_set_real, .show = bfs_opt_show_real, .dhi = 1,
                  .flags = F_IMG, .allowed = "a number in 0..1 (decimal or fraction p/q)"},
    [OPT_COLOR_JITTER] = {PUB("color_jitter", D, "B:C:S:H", "0:0:0:0",
                              "train: ColorJitter(brightness=B, contrast=C, saturation=S, "
                              "hue=H) after the crop and flip; 0 leaves one out"),
                          FIELD(jitter), .set = bfs_opt_set_jitter, .show = bfs_opt_show_jitter,
                          .flags = F_IMG | F_NEW,
                          .allowed = "B:C:S:H, decimals: B, C, S in 0..100, H in 0..0.5"},
    [OPT_GRAYSCALE_P] = {PUB("grayscale_p", D, "P", "0",
                             "train: RandomGrayscale(P), after color_jitter"),
                         FIELD(grayscale_p), .set = bfs_opt_set_real, .show = bfs_opt_show_real,
                         .dhi = 1, .flags = F_IMG | F_NEW,
                         .allowed = "a number in 0..1 (decimal or fraction p/q)"},
    [OPT_RANDAUGMENT] = {PUB("randaugment", D, "N:M|none", "none",
                             "train: RandAugment(num_ops=N, magnitude=M), torchvision's op set "
                             "and magnitudes (31 bins)"),
                         FIELD(randaug), .set = bfs_opt_set_randaug, .show = bfs_opt_show_randaug,
                         .flags = F_IMG | F_NEW,
                         .allowed = "none, or N:M with integers N in 1..16 and M in 0..30"},
    [OPT_TRIVIALAUGMENT] = {PUB("trivialaugment", D, "0|1", "0",
                                "train: 1 applies TrivialAugmentWide"),
                            ENUMF(trivialaug, F_IMG | F_NEW)},
    [OPT_AUTOAUGMENT] = {PUB("autoaugment", D, "none|imagenet", "none",
                             "train: AutoAugment with its ImageNet policy"),
                         ENUMF(autoaug, F_IMG | F_NEW)},
    [OPT_ERASING] = {PUB("erasing", D, "P", "0",
                         "train: timm's RandomErasing(P) after normalize (float dtypes): one "
                         "box of 2%..1/3 of the image, aspect 0.3..3.3, filled per "
                         "erasing_mode"),
                     FIELD(erasing), .set = bfs_opt_set_real, .show = bfs_opt_show_real, .dhi = 1,
                     .flags = F_IMG | F_NEW,
                     .allowed = "a number in 0..1 (decimal or fraction p/q)"},
    [OPT_ERASING_MODE] = {PUB("erasing_mode", D, "pixel|rand|const", "pixel",
                              "train: the erased box's values (normalized): pixel: each one "
                              "N(0,1); rand: one N(0,1) per channel; const: 0"),
                          ENUMF(erasing_mode, F_IMG | F_NEW)},
    [OPT_MIXUP] = {PUB("mixup", D, "ALPHA", "0",
                       "train: timm's Mixup in batch mode: sample i blended with sample B-1-i "
                       "by lam ~ Beta(ALPHA, ALPHA); adds the soft `targets` tensor"),
                   FIELD(mixup), .set = bfs_opt_set_real, .show = bfs_opt_show_real, .dhi = 100,
                   .flags = F_IMG | F_NEW, .allowed = "a number in 0..100 (0: off)"},
    [OPT_CUTMIX] = {PUB("cutmix", D, "ALPHA", "0",
                        "train: timm's CutMix in batch mode: a box of sample B-1-i pasted "
                        "into sample i, lam ~ Beta(ALPHA, ALPHA) corrected to the box's area"),
                    FIELD(cutmix), .set = bfs_opt_set_real, .show = bfs_opt_show_real, .dhi = 100,
                    .flags = F_IMG | F_NEW, .allowed = "a number in 0..100 (0: off)"},
    [OPT_MIX_PROB] = {PUB("mix_prob", D, "P", "1",
                          "train: probability that a batch is mixed (mixup=, cutmix=)"),
                      FIELD(mix_prob), .set = bfs_opt_set_real, .show = bfs_opt_show_real, .dhi = 1,
                      .flags = F_IMG | F_NEW,
                      .allowed = "a number in 0..1 (decimal or fraction p/q)"},
    [OPT_SWITCH_PROB] = {PUB("switch_prob", D, "P", "0.5",
                             "train: with both mixup= and cutmix=, probability of CutMix"),
                         FIELD(switch_prob), .set = bfs_opt_set_real, .show = bfs_opt_show_real,
                         .dhi = 1, .flags = F_IMG | F_NEW,
                         .allowed = "a number in 0..1 (decimal or fraction p/q)"},
    [OPT_LABEL_SMOOTHING] = {PUB("label_smoothing", D, "E", "0",
                                 "train: the `targets` are (1 - E) one-hot + E / classes "
                                 "before mixing (timm's mixup_target)"),
                             FIELD(label_smoothing), .set = bfs_opt_set_real,
                             .show = bfs_opt_show_real, .dhi = 1, .flags = F_IMG | F_NEW,
                             .allowed = "a number in 0..1 (decimal or fraction p/q)"},
    [OPT_CLASSES] = {PUB("classes", D, "N", "0",
                         "train: the width of `targets`; 0: the dataset's class count"),
                     INT(classes, W_U32, 0, 1u << 20, F_IMG | F_NEW)},
    [OPT_DTYPE] = {PUB("dtype", D, "u8|f16|bf16|f32", "u8", "output element type"),
                   ENUMF(dtype, F_IMG)},
    [OPT_NORMALIZE] = {PUB("normalize", D, "imagenet|none|M/S", "by dtype",
                           "float outputs are (x/255 - mean)/std per channel: imagenet is "
                           "0.485,0.456,0.406/0.229,0.224,0.225, none is x/255; default imagenet "
                           "for float dtypes, none for u8 (which allows only none)"),
                       FIELD(mean), .set = bfs_opt_set_normalize, .show = bfs_opt_show_normalize,
                       .init = "none", .flags = F_IMG,
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
                     FIELD(buckets), .set = bfs_opt_set_buckets, .show = bfs_opt_show_buckets,
                     .flags = F_SEQ, .hi = BFS_MAX_SEQ_LEN,
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
                    FIELD(fields), .set = bfs_opt_set_fields, .show = bfs_opt_show_fields,
                    .flags = F_FLD,
                    .allowed = "all, or field names ([A-Za-z_][A-Za-z0-9_]*, at most 31 "
                               "bytes) separated by commas"},
    [OPT_TEXT_LEN] = {PUB("text_len", D, "max|N", "max",
                          "multi-field datasets: bytes per row of text fields; longer texts "
                          "are cut (at a character boundary, counted in /stats); max: the "
                          "dataset's longest"),
                      FIELD(text_len), .set = bfs_opt_set_text_len, .show = bfs_opt_show_text_len,
                      .lo = 1, .hi = BFS_MAX_TEXT_LEN, .flags = F_FLD,
                      .allowed = "max or an integer in 1..1048576"},
    [OPT_TOKEN_LEN] = {PUB("token_len", D, "max|N", "max",
                           "multi-field datasets: token ids per row of tokens fields (captions "
                           "tokenized at pack time); longer rows are cut (counted in /stats); "
                           "max: the dataset's longest"),
                       FIELD(token_len), .set = bfs_opt_set_text_len, .show = bfs_opt_show_text_len,
                       .lo = 1, .hi = BFS_MAX_TEXT_LEN, .flags = F_FLD,
                       .allowed = "max or an integer in 1..1048576"},
    [OPT_MIN_BOX_AREA] = {PUB("min_box_area", D, "N", "1",
                              "multi-field datasets with boxes: a box the crop leaves with less "
                              "than N output pixels² is dropped (and its per-box values)"),
                          INT(min_box_area, W_U32, 0, 1u << 30, F_FLD)},
    [OPT_SOURCE] = {PUB("source", D, "PATH[:W]+PATH[:W]+...", "SOURCE",
                        "a mixture: samples drawn from several datasets of one kind, each with "
                        "weight W (default: in proportion to their sizes), stratified per "
                        "batch; replaces the SOURCE argument (docs/mixing.md)"),
                    FIELD(mix), .set = bfs_opt_set_source, .show = bfs_opt_show_source,
                    .flags = F_MIX | F_NOCANON,
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
                          FIELD(mix_schedule), .set = bfs_opt_set_schedule,
                          .show = bfs_opt_show_schedule, .flags = F_MIX,
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
                       FIELD(cache_dir), .set = bfs_opt_set_path, .show = bfs_opt_show_path,
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
                            "which needs root; not with gpu_pool_mb=): faster to read and to "
                            "recycle, slower while the daemon first grows on VMs that return "
                            "free memory to the host; auto: once the daemon recycles memory"),
                        ENUM(huge_pages)},
    [OPT_GPU_POOL_MB] = {PUB("gpu_pool_mb", K, "N", "0",
                             "batches in one pool file of N MiB that libbatchfs-gpu maps and "
                             "registers once, then copies each batch from with no host copy "
                             "(under FUSE passthrough, which needs root; other readers' reads "
                             "are then copied): docs/gpu.md"),
                         INT(gpu_pool_mb, W_I64, 0, MIB_MAX, 0)},
    [OPT_REMOTE] = {PUB("remote", K, "redis://[[USER]:PASS@]HOST[:PORT][/DB]|none", "none",
                        "Redis shared with `batchfs worker`s: batches are asked of the workers "
                        "and served from Redis, computed here when none come in time "
                        "(docs/scale-out.md)"),
                    FIELD(remote), .set = bfs_opt_set_remote, .show = bfs_opt_show_remote,
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
                        FIELD(remote_key), .set = bfs_opt_set_remote_key,
                        .show = bfs_opt_show_remote_key, .allowed = "an absolute path or none"},
    [OPT_GROUP] = {PUB("group", K, "NAME|none", "none",
                       "dynamic sharding: mounts of the same pipeline with the same group "
                       "share a claim counter per epoch; each open of epoch/N/next serves the "
                       "next batch no mount of the group has served"),
                   FIELD(group), .set = bfs_opt_set_group, .show = bfs_opt_show_group,
                   .allowed = "none or 1..64 of the characters A-Z a-z 0-9 . _ -"},
    [OPT_S3_REGION] = {PUB("s3_region", K, "NAME|auto", "auto",
                           "region of an s3:// source; auto: AWS_REGION, AWS_DEFAULT_REGION, "
                           "the profile's in ~/.aws/config, else us-east-1"),
                       FIELD(s3_region), .set = bfs_opt_set_s3_region,
                       .show = bfs_opt_show_s3_region,
                       .allowed = "auto or 1..63 of the characters a-z 0-9 -"},
    [OPT_S3_ENDPOINT] = {PUB("s3_endpoint", K, "URL|none", "none",
                             "an S3-compatible store (MinIO, Ceph, R2, GCS) for s3:// sources, "
                             "addressed path-style: URL/BUCKET/KEY; none: AWS"),
                         FIELD(s3_endpoint), .set = bfs_opt_set_s3_endpoint,
                         .show = bfs_opt_show_s3_endpoint,
                         .allowed = "http://HOST[:PORT][/PATH], https://HOST[:PORT][/PATH] or "
                                    "none"},
    [OPT_CA] = {PUB("ca", K, "FILE|none", "none",
                    "PEM file of CA certificates trusted, besides the system's, by https:// "
                    "and s3:// sources (TLS is always verified)"),
                FIELD(ca), .set = bfs_opt_set_ca, .show = bfs_opt_show_ca,
                .allowed = "an absolute path or none"},
    [OPT_FETCH_RETRIES] = {PUB("fetch_retries", K, "N", "5",
                               "a remote source's request is retried this often (timeouts, "
                               "resets, 5xx, 429), with exponential backoff and jitter"),
                           INT(fetch_retries, W_INT, 0, 100, 0)},
    [OPT_FETCH_TIMEOUT_MS] = {PUB("fetch_timeout_ms", K, "N", "10000",
                                  "a remote source's request (one attempt, connecting "
                                  "included) fails after this long"),
                              INT(fetch_timeout_ms, W_INT, 1, 3600000, 0)},
    [OPT_FETCH_PARALLEL] = {PUB("fetch_parallel", K, "N", "256",
                                "a remote source's payloads fetched ahead of the workers by "
                                "up to this many requests at once (threads started as "
                                "requests queue)"),
                            INT(fetch_parallel, W_INT, 1, 256, 0)},
    [OPT_SOURCE_CACHE] = {PUB("source_cache", K, "PATH|auto|none", "none",
                              "a remote source's bytes kept on disk for every mount of this "
                              "host: a second mount, or a later epoch, fetches nothing it holds; "
                              "auto: /var/tmp/batchfs-sources-UID"),
                          FIELD(source_cache), .set = bfs_opt_set_source_cache,
                          .show = bfs_opt_show_source_cache,
                          .allowed = "an absolute path, auto or none"},
    [OPT_SOURCE_CACHE_MB] = {PUB("source_cache_mb", K, "N", "10240",
                                 "size budget of source_cache (least recently used objects "
                                 "go first), MiB"),
                             INT(source_cache_mb, W_I64, 1, MIB_MAX, 0)},
};

#undef PUB
#undef FIELD
#undef INT
#undef ENUM
#undef ENUMF
#undef D
#undef K
