/*
 * imgops.h — the per-sample image operations of torchvision's training recipes, on a
 * packed RGB image (u8, 3 bytes a pixel): the colour ops of ColorJitter and
 * RandomGrayscale, and the fourteen ops of AutoAugment, RandAugment and
 * TrivialAugmentWide (geometric ones with nearest sampling and fill 0, as those
 * transforms default to).
 *
 * Each op computes what torchvision.transforms.v2.functional computes on a uint8 tensor
 * with the same argument, in the same float32 steps (fused multiply-adds where ATen's
 * vector kernels fuse). Integer-exact ops (posterize, solarize, invert, equalize) are
 * bit-exact; ops that round through float32 are bit-exact except where torch's
 * summation order or grid arithmetic differs from ours, which tests/cli/augment_torch.sh
 * bounds per op (docs/augment.md gives the numbers). Pure functions of their arguments:
 * no randomness here (engine/augment.c draws the ops and their magnitudes).
 *
 * Neighbours: engine/augment.c (the recipes: which op, which magnitude) calls these on
 * the resized sample before the output writer; tests/engine_tool_main.c exposes them to
 * the comparison test.
 */
#ifndef BATCHFS_ENGINE_IMGOPS_H
#define BATCHFS_ENGINE_IMGOPS_H

#include <stddef.h>
#include <stdint.h>

/* An image: h rows of w RGB pixels, rows `stride` bytes apart. */
typedef struct bfs_img {
    uint8_t *rgb;
    int w, h;
    size_t stride;
} bfs_img;

/* The ops, named as torchvision's auto-augment code names them (Color = saturation). */
enum {
    BFS_OP_IDENTITY,
    BFS_OP_SHEAR_X,     /* magnitude: shear factor (tan of the angle) */
    BFS_OP_SHEAR_Y,     /* magnitude: shear factor */
    BFS_OP_TRANSLATE_X, /* magnitude: pixels (truncated to an integer, as torchvision) */
    BFS_OP_TRANSLATE_Y,
    BFS_OP_ROTATE,     /* magnitude: degrees, counter-clockwise */
    BFS_OP_BRIGHTNESS, /* magnitude: factor (adjust_brightness) */
    BFS_OP_COLOR,      /* magnitude: factor (adjust_saturation) */
    BFS_OP_CONTRAST,   /* magnitude: factor (adjust_contrast) */
    BFS_OP_SHARPNESS,  /* magnitude: factor (adjust_sharpness) */
    BFS_OP_POSTERIZE,  /* magnitude: bits kept, 0..8 */
    BFS_OP_SOLARIZE,   /* magnitude: threshold in levels, 0..255 */
    BFS_OP_AUTOCONTRAST,
    BFS_OP_EQUALIZE,
    BFS_OP_INVERT,
    BFS_OP_HUE,       /* magnitude: hue shift, -0.5..0.5 (adjust_hue) */
    BFS_OP_GRAYSCALE, /* rgb_to_grayscale, three equal channels */
    BFS_OP_COUNT
};

/* bfs_imgop_name - the op's name ("ShearX", "Color", ...); NULL for an unknown op. */
const char *bfs_imgop_name(int op);

/* bfs_imgop_lookup - the op named `name` (as bfs_imgop_name spells it), or -1. */
int bfs_imgop_lookup(const char *name);

/*
 * bfs_imgop_apply - apply op with `magnitude` to im in place. tmp is scratch of at least
 * im->w * im->h * 3 bytes (geometric ops and sharpness read the original from it).
 * Returns 0, or -EINVAL for an unknown op or a magnitude out of its range (a negative
 * factor, posterize bits outside 0..8, solarize above 255, hue outside -0.5..0.5).
 */
int bfs_imgop_apply(bfs_img *im, int op, double magnitude, uint8_t *tmp);

/* bfs_imgop_set_portable - a test hook: 1 makes every op take its portable C path, 0
 * goes back to the CPU's (AVX2 + FMA where present). The bytes are the same. */
void bfs_imgop_set_portable(int portable);

/*
 * bfs_imgop_linspace - element i of torch.linspace(start, end, steps) in float32, by
 * the scalar formula of ATen's kernel (start + step * i in the first half, end - step *
 * (steps - 1 - i) in the second, each one fused multiply-add; step = (end - start) /
 * (steps - 1) in float): the magnitude tables of the auto-augment recipes. steps >= 2.
 */
float bfs_imgop_linspace(double start, double end, int steps, int i);

#endif
