/*
 * convert.h — u8 images to normalized f16/bf16/f32 in NHWC or NCHW, on the host and on a
 * CUDA device, with the daemon's own values. Internal to gpu/.
 *
 * The conversion is a table lookup: out[c] = lut[c][v], where the 3 x 256 table is built
 * by the engine's bfs_pipeline_out_levels (engine/api.h) from the same dtype=/normalize=
 * options the daemon parses, so converted tensors equal a mount's dtype=/normalize=/layout=
 * output bit for bit on every device. The device kernel (convert_ptx.c) only gathers and scatters.
 */
#ifndef BATCHFS_GPU_CONVERT_H
#define BATCHFS_GPU_CONVERT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/api.h"

typedef struct bfsgi_convert {
    int active; /* 0: deliver the file's images as they are */
    int dtype;  /* BFSG_* of the output: F16, BF16 or F32 (U8 with a layout change) */
    int elem;   /* bytes per output element: 1, 2 or 4 */
    int nchw;   /* output layout; -1: the file's */
    uint8_t
        lut[BFS_OUT_LEVELS_BYTES]; /* lut[(c * 256 + v) * elem ...]: element bytes, little-endian */
} bfsgi_convert;

/*
 * bfsgi_convert_setup - parse dtype (NULL or "": the file's), normalize (NULL: the
 * default for the dtype) and layout (NULL: the file's) exactly as the daemon's options
 * are parsed, and build the table. Returns 0 or -EINVAL with err naming the value.
 */
int bfsgi_convert_setup(bfsgi_convert *c, const char *dtype, const char *normalize,
                        const char *layout, char *err, size_t errlen);

/* bfsgi_convert_host - convert n images of h x w pixels from src (u8, NCHW if src_nchw
 * else NHWC) to dst (c->dtype, c's layout). */
void bfsgi_convert_host(const bfsgi_convert *c, const uint8_t *src, int src_nchw, void *dst,
                        uint64_t n, uint32_t h, uint32_t w);

/* The device kernel: PTX text (NUL-terminated) and its entry point, with parameters
 * (u64 src, u64 dst, u64 lut, u64 pixels, u32 plane, u32 elem, u32 src_nchw, u32
 * dst_nchw) — one thread per pixel in a grid-stride loop; the lut in device memory. */
extern const char bfsgi_convert_ptx[];
#define BFSG_CONVERT_KERNEL "bfsg_convert_u8"

#endif
