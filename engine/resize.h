/*
 * resize.h — antialiased RGB resampling with Pillow's BILINEAR (triangle filter) semantics.
 *
 * Neighbours: the engine's augment stage (engine/augment.c) calls this once per sample,
 * on the pixels the decoder produced, and writes each finished output row straight into
 * the sample's slot of the batch buffer through a store callback (flip, normalize, cast
 * and layout happen there). mkbatchfs --max-side uses it to shrink images before
 * re-encoding.
 *
 * Semantics (see ../shared/REFERENCES.md, "Pillow's antialiased resize"): separable,
 * horizontal pass then vertical pass, except that, as in Pillow >= 13, the vertical pass
 * goes first when (in_h - out_h) > 0 and > 2 * (in_w - out_w) (the order moves some
 * pixels by one level; Pillow <= 12 always went horizontal first, so it differs from us
 * there); for scale f = box_size / out_size the triangle
 * filter's support is max(f, 1); output pixel x samples input centre box0 + (x + 0.5) * f;
 * taps are clamped to the *image* bounds [0, in_w) (not the box), weights computed in
 * double, normalised, quantised to 22-bit fixed point, and each pass rounds and clamps to
 * 8 bits — exactly what Pillow's ImagingResample does, so results match
 * PIL.Image.resize((w, h), Image.BILINEAR, box=(x0, y0, x1, y1)) bit for bit.
 *
 * A window of the output can be produced alone (win_*): the pixels are those of the full
 * resize, so "resize then centre-crop" costs only the window. The source buffer needs to
 * cover only the input extent that window reads (resize_source_extent), which lets a
 * crop-aware JPEG decoder decode just that region; resize_plan_extent finds it with the
 * coefficients the resize itself needs, and keeps them in the scratch for it.
 *
 * Thread safety: none needed; all state is in the caller's resize_spec and scratch.
 */
#ifndef BATCHFS_ENGINE_RESIZE_H
#define BATCHFS_ENGINE_RESIZE_H

#include <stddef.h>
#include <stdint.h>

/* Largest image, box or output side accepted (keeps every fixed-point sum in int32). */
#define RESIZE_MAX_SIDE (1 << 20)

/* What to resample. Coordinates are in the image's pixel coordinate system. The box
 * edges are used at C float precision, as Pillow parses them into float box[4]. */
typedef struct resize_spec {
    int in_w, in_h;   /* full image size (taps are clamped to it, as Pillow does) */
    double box[4];    /* x0, y0, x1, y1: region of the image resized (Pillow's box) */
    int out_w, out_h; /* size the box is resized to */
    int win_x, win_y; /* top-left of the produced window inside out_w x out_h */
    int win_w, win_h; /* produced window; win_x + win_w <= out_w, same for y */
} resize_spec;

/* The pixels given: an RGB u8 buffer covering image columns [x0, x0 + w), rows [y0, y0 + h). */
typedef struct resize_src {
    const uint8_t *pixels; /* row-major, 3 bytes per pixel */
    size_t stride;         /* bytes between rows, >= 3 * w */
    int x0, y0, w, h;
} resize_src;

/* Called once per produced row, in order, row = 0 .. win_h - 1 (relative to the window),
 * with win_w RGB pixels (3 * win_w bytes). The row buffer is owned by the scratch (or,
 * when neither axis needs resampling, is the source row itself) and valid only during
 * the call. */
typedef void (*resize_store_cb)(void *ctx, int row, const uint8_t *rgb, int width);

/* Per-thread reusable scratch memory (coefficients, intermediate rows). Zero-initialise
 * (resize_scratch s = {0};), reuse across calls, free with resize_scratch_free. */
typedef struct resize_scratch {
    void *mem;
    size_t cap;
    int planned; /* private: mem holds coefficients resize_plan_extent kept */
} resize_scratch;

/*
 * resize_source_extent - the input pixels a spec's window reads.
 * Stores the half-open integer extent [*x0, *x1) x [*y0, *y1), inside the image: the
 * smallest rectangle holding every pixel with a non-zero fixed-point weight in some
 * window pixel (taps weighted 0 are never read, so a shrunk rectangle is refused).
 * Returns 0, or -EINVAL if the spec is invalid (see resize_check_spec).
 */
int resize_source_extent(const resize_spec *spec, int *x0, int *y0, int *x1, int *y1);

/*
 * resize_plan_extent - resize_source_extent, keeping in scratch the coefficients computed
 * for it (both axes, window outputs), so that the next resize_rgb8 on this scratch, if its
 * spec is equal (every field; the box bit for bit), uses them instead of computing them
 * again. Results are the same either way; any other call, and any later one, computes
 * its own. If scratch cannot grow, the extent is still stored and nothing is kept.
 * Returns 0, or -EINVAL for an invalid spec (see resize_check_spec) or a NULL scratch.
 */
int resize_plan_extent(const resize_spec *spec, resize_scratch *scratch, int *x0, int *y0, int *x1,
                       int *y1);

/*
 * resize_check_spec - validate a spec: sizes in 1..RESIZE_MAX_SIDE, box inside the image
 * with x0 < x1 and y0 < y1 (fractional allowed, NaN rejected), window inside the output.
 * Returns 0 or -EINVAL.
 */
int resize_check_spec(const resize_spec *spec);

/*
 * resize_rgb8 - resample src according to spec, calling store for each window row.
 * src must cover resize_source_extent(spec). scratch grows as needed; coefficients a
 * resize_plan_extent of the same spec left in it are used (once).
 * Returns 0; -EINVAL for an invalid spec or a src that does not cover the extent;
 * -ENOMEM if scratch cannot grow (nothing was stored then).
 */
int resize_rgb8(const resize_spec *spec, const resize_src *src, resize_store_cb store, void *ctx,
                resize_scratch *scratch);

/* resize_scratch_free - release scratch memory; accepts a zeroed or NULL scratch. */
void resize_scratch_free(resize_scratch *scratch);

#endif
