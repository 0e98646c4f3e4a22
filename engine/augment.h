/*
 * augment.h — per-sample geometry (RandomResizedCrop, eval resize + centre crop, plain
 * resize) and the fused output writer (flip, normalize, cast, layout) that resize_rgb8
 * calls once per output row, writing straight into the sample's slot of the batch.
 *
 * Geometry follows torchvision (../shared/REFERENCES.md): RandomResizedCrop.get_params
 * with 10 tries, log-uniform aspect ratio, Python's round-half-even, centre-crop
 * fallback; eval = Resize(floor(size / 0.875)) then CenterCrop(size), computed as one
 * windowed resize. Randomness comes only from (seed, epoch, sample index) (engine/rng.h),
 * so a sample gets the same crop and flip whichever batch, thread or host computes it.
 */
#ifndef BATCHFS_ENGINE_AUGMENT_H
#define BATCHFS_ENGINE_AUGMENT_H

#include <stdint.h>

#include "engine/pipeline.h"
#include "engine/resize.h"
#include "engine/rng.h"

/*
 * What to do with one sample. spec is in the coordinates of a region of the image whose
 * top-left is (origin_x, origin_y): for train, the crop itself (torchvision crops, then
 * resizes the cropped image, so filter taps stop at the crop's edges); for eval and
 * none, the whole image (origin 0, 0).
 */
typedef struct bfs_geometry {
    resize_spec spec;       /* box, resized size, window (= the output) */
    int origin_x, origin_y; /* where spec's (0, 0) lies in the image */
    int flip;               /* mirror horizontally */
} bfs_geometry;

/*
 * bfs_augment_geometry - the geometry of dataset sample `index` (width x height) in
 * `epoch`. Deterministic. Returns 0 or -EINVAL for a zero-sized image.
 */
int bfs_augment_geometry(const bfs_pipeline_opts *o, uint64_t epoch, uint64_t index, int width,
                         int height, bfs_geometry *g);

/*
 * bfs_augment_boxes - what g does to boxes drawn on the image: n rows of x0, y0, x1, y1
 * in the source image's pixels (in) become rows in the output's pixels (out, [0, win_w]
 * x [0, win_h] of the produced window): moved into the crop, scaled as the resize scales
 * (out_w / box width, out_h / box height, in double), shifted by the window, clipped to
 * it, mirrored when g->flip (x -> win_w - x, so x0 and x1 swap), then stored as f32. A
 * box left with an area below min_area output pixels², or none (x1 <= x0 or y1 <= y0
 * after clipping: outside the crop, inverted, or not finite), is dropped. keep[k] is the
 * source row of out row k (per-box values follow it). Returns the number of rows kept
 * (<= n); out and keep hold n rows. docs/engine.md ("Boxes follow the crop") gives the
 * formula step by step (tests/boxes_ref.py follows it). Deterministic: a pure function of its
 * arguments.
 */
uint32_t bfs_augment_boxes(const bfs_geometry *g, const float *in, uint32_t n, double min_area,
                           float *out, uint32_t *keep);

/*
 * The recipe ops of o (color_jitter=, grayscale_p=, randaugment=, trivialaugment=,
 * autoaugment=) act on the cropped, resized and flipped sample, before dtype and
 * normalize, as torchvision's presets order them; only with augment=train.
 */
#define BFS_AUG_MAX_OPS 24 /* 4 jitter + 1 grayscale + at most 16 (randaugment) */

typedef struct bfs_aug_op {
    int op;     /* BFS_OP_* (engine/imgops.h) */
    double mag; /* bfs_imgop_apply's magnitude: a factor, bits, a threshold, ... */
} bfs_aug_op;

/* bfs_augment_has_ops - 1 when o gives any recipe op (and augment=train). */
int bfs_augment_has_ops(const bfs_pipeline_opts *o);

/*
 * bfs_augment_ops - the ops sample `index` gets in `epoch`, on an image of w x h (the
 * output size), in order, into ops (BFS_AUG_MAX_OPS): ColorJitter's (a random order of
 * the four, each factor uniform in torchvision's range), RandomGrayscale's, then the
 * policy's. The draws are torchvision's (docs/augment.md lists them) from the sample's
 * own streams (engine/rng.h), the same number whatever they pick. Returns the count.
 */
int bfs_augment_ops(const bfs_pipeline_opts *o, uint64_t epoch, uint64_t index, int w, int h,
                    bfs_aug_op *ops);

/* An erased box: rows top..top+h-1, columns left..left+w-1 of the output. */
typedef struct bfs_erase_box {
    int top, left, h, w;
} bfs_erase_box;

/*
 * bfs_augment_erase_box - timm's RandomErasing draws for sample `index` in `epoch` on a
 * w x h output (erasing=P, augment=train): erased with probability P, then up to 10 tries
 * of an area uniform in [0.02, 1/3] of the image and a log-uniform aspect in [0.3, 1/0.3],
 * h = round(sqrt(area * aspect)), w = round(sqrt(area / aspect)) (half to even), kept
 * when w < width and h < height, placed uniformly. Returns 1 with *b set, else 0. The
 * generator r is left where the box's values are drawn from.
 */
int bfs_augment_erase_box(const bfs_pipeline_opts *o, uint64_t epoch, uint64_t index, int w, int h,
                          bfs_erase_box *b, bfs_rng *r);

/* bfs_augment_normal2 - two independent standard normal draws (Box-Muller in float on
 * two 24-bit uniforms from one splitmix64 step of *state: |z| < 5.8). */
void bfs_augment_normal2(uint64_t *state, float z[2]);

/* ---- batch-level mixing: timm's Mixup (mixup=, cutmix=) in batch mode ---------------- */

/* bfs_augment_targets - 1 when batches carry `targets` (augment=train and mixup=,
 * cutmix= or label_smoothing= given). */
int bfs_augment_targets(const bfs_pipeline_opts *o);

/* One batch's mixing: lam, and for CutMix the box (rows yl..yh-1, columns xl..xh-1) that
 * sample i takes from sample B-1-i. */
typedef struct bfs_mix_draw {
    double lam; /* 1: not mixed */
    int cutmix; /* 1: CutMix (lam corrected to the box), 0: Mixup */
    int yl, yh, xl, xh;
} bfs_mix_draw;

/*
 * bfs_augment_mix_draw - timm's Mixup._params_per_batch and cutmix_bbox_and_lam for the
 * batch numbered `batch` (in the unsharded epoch) of `epoch`, on w x h images: mixed with
 * probability mix_prob; with both alphas, CutMix with probability switch_prob; lam from
 * Beta(alpha, alpha); CutMix's box of int(side * sqrt(1 - lam)) on each side, centred on a
 * uniform pixel (from c - cut // 2 to c + (cut + 1) // 2, as timm 1.0), cut at the edges,
 * lam = 1 - its area share. Returns 1 when the batch is mixed (d set), else 0
 * (d->lam = 1).
 */
int bfs_augment_mix_draw(const bfs_pipeline_opts *o, uint64_t epoch, uint64_t batch, int w, int h,
                         bfs_mix_draw *d);

/* bfs_augment_beta - a Beta(a, a) draw (two Marsaglia-Tsang gamma draws), a > 0. */
double bfs_augment_beta(bfs_rng *r, double a);

/* Conversion tables built once per pipeline (dtype, normalization). */
typedef struct bfs_out_format {
    int dtype; /* BFS_OUT_* */
    int nchw;
    int out_w, out_h;
    size_t elem;          /* bytes per element */
    float f32[3][256];    /* value of each u8 level per channel, for f32 */
    uint16_t f16[3][256]; /* same as IEEE half or bfloat16 bits, for f16/bf16 */
} bfs_out_format;

/* bfs_out_format_init - build the tables for o (after bfs_pipeline_finish). */
void bfs_out_format_init(bfs_out_format *f, const bfs_pipeline_opts *o);

/* Context of bfs_out_store_row: one sample's slot. */
typedef struct bfs_out_slot {
    const bfs_out_format *f;
    uint8_t *dst; /* start of the sample's image in the batch */
    int flip;
    int w, h; /* the sample's size: the epoch's (bfs_pipeline_size_at) */
} bfs_out_slot;

/* A resize_store_cb: writes row `row` (width pixels) of the sample into its slot. */
void bfs_out_store_row(void *slot, int row, const uint8_t *rgb, int width);

/*
 * bfs_out_erase - erase the box bfs_augment_erase_box draws for the sample in its slot
 * (float dtypes; after normalize): erasing_mode=pixel fills each value with a normal draw
 * (channel by channel, row by row), rand each channel with one, const with 0. Returns 1
 * when the sample was erased, else 0.
 */
int bfs_out_erase(const bfs_out_slot *slot, const bfs_pipeline_opts *o, uint64_t epoch,
                  uint64_t index);

/*
 * bfs_out_mix - mix a batch's images in place (n samples of w x h in `images`, laid out
 * as f says, each sample_stride bytes apart): slot i with slot n-1-i, both from their values
 * before mixing (the middle one of an odd batch with itself). Mixup: each value
 * (float)x_i * (float)lam + (float)x_j * (float)(1 - lam) in float32, rounded once to the
 * output type (u8: half to even, as timm's FastCollateMixup); CutMix: the box's values
 * of slot i are slot n-1-i's.
 */
void bfs_out_mix(const bfs_out_format *f, int w, int h, uint8_t *images, size_t sample_stride,
                 uint32_t n, const bfs_mix_draw *d);

/* bfs_out_targets - the `targets` F32 [n, classes] of a batch: timm's mixup_target, with
 * off = E / classes and on = 1 - E + off (float32), target_i = y_i * lam + y_(n-1-i) *
 * (1 - lam). labels: the batch's I64 little-endian labels, each below classes (a label
 * past it gets no on-value: its row is all off-values). */
void bfs_out_targets(float *targets, const uint8_t *labels, uint32_t n, uint32_t classes,
                     double smoothing, double lam);

/* bfs_out_fill - fill a sample's slot with one colour (substitute for a bad sample). */
void bfs_out_fill(const bfs_out_slot *slot, uint8_t r, uint8_t g, uint8_t b);

/* IEEE 754 binary16 and bfloat16 bits of a float, round to nearest even. */
uint16_t bfs_f32_to_f16(float v);
uint16_t bfs_f32_to_bf16(float v);

#endif
