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
} bfs_out_slot;

/* A resize_store_cb: writes row `row` (width pixels) of the sample into its slot. */
void bfs_out_store_row(void *slot, int row, const uint8_t *rgb, int width);

/* bfs_out_fill - fill a sample's slot with one colour (substitute for a bad sample). */
void bfs_out_fill(const bfs_out_slot *slot, uint8_t r, uint8_t g, uint8_t b);

/* IEEE 754 binary16 and bfloat16 bits of a float, round to nearest even. */
uint16_t bfs_f32_to_f16(float v);
uint16_t bfs_f32_to_bf16(float v);

#endif
