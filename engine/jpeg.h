/*
 * jpeg.h — JPEG header inspection and a whole-image decode.
 *
 * Neighbours: mkbatchfs (engine/pack.c) records what bfs_jpeg_parse_header finds in the
 * sample table so the engine plans decodes without touching payloads; --raw and
 * --max-side use bfs_jpeg_decode_rgb. The engine's crop-aware decoder (issue: engine)
 * uses the libjpeg API directly and falls back to full decodes for what the header
 * flags say it cannot crop.
 *
 * bfs_jpeg_parse_header is a marker walker over untrusted bytes: it never reads outside
 * [data, data + len) and is fuzzed (tests/fuzz/fuzz_jpeg_header.c).
 */
#ifndef BATCHFS_ENGINE_JPEG_H
#define BATCHFS_ENGINE_JPEG_H

#include <stddef.h>
#include <stdint.h>

typedef struct bfs_jpeg_header {
    int width, height;
    int components;      /* 1, 3 or 4 */
    int progressive;     /* SOF2 / SOF10 */
    int arithmetic;      /* SOF9 / SOF10 */
    int hs[4], vs[4];    /* sampling factors per component */
    int adobe_transform; /* APP14 Adobe transform byte, -1 when absent */
} bfs_jpeg_header;

/*
 * bfs_jpeg_parse_header - walk the markers from SOI to SOS and describe the image.
 * Returns 0; BFS_E_NOT_JPEG (no SOI); BFS_E_JPEG_HEADER (truncated or malformed before
 * SOS, zero size, bad component count or sampling factors); BFS_E_JPEG_UNSUPPORTED
 * (lossless, hierarchical, or not 8-bit: libjpeg-turbo 2.1 cannot decode them).
 */
int bfs_jpeg_parse_header(const uint8_t *data, size_t len, bfs_jpeg_header *h);

/* bfs_jpeg_sample_flags - the .bfs sample flags (BFS_F_*, BFS_COLOR_*, sampling) for h. */
uint16_t bfs_jpeg_sample_flags(const bfs_jpeg_header *h);

/*
 * bfs_jpeg_decode_rgb - decode a whole JPEG to packed RGB (CMYK/YCCK converted, gray
 * replicated). *rgb is malloc'ed (caller frees). Returns 0, BFS_E_JPEG_DATA (corrupt or
 * truncated data: libjpeg-turbo reported an error, not only a warning), header errors,
 * or -ENOMEM.
 */
int bfs_jpeg_decode_rgb(const uint8_t *data, size_t len, uint8_t **rgb, int *w, int *h);

/*
 * bfs_jpeg_encode_rgb - encode packed RGB (gray output when gray != 0) at quality,
 * 4:2:0, baseline. *out is malloc'ed. Returns 0, -EINVAL or -ENOMEM.
 */
int bfs_jpeg_encode_rgb(const uint8_t *rgb, int w, int h, int quality, int gray, uint8_t **out,
                        size_t *len);

#endif
