/*
 * decode.h — per-thread sample decoder: crop-aware JPEG decoding with libjpeg-turbo's
 * libjpeg API, lz4 raw pixels, and PNG / WebP (BFS_KIND_CODEC) through
 * engine/dataset/image.h, always decoded whole at scale 1 (their pixels and what happens
 * to alpha and 16-bit samples: image.h), so every crop and resize after it is as for JPEG.
 *
 * Neighbours: engine.c asks for the pixels a resize window reads (resize_plan_extent)
 * and hands the result to resize_rgb8. See ../shared/REFERENCES.md "libjpeg-turbo 2.1.5
 * partial decoding" for the measurements behind the choices:
 *  - only the rows and iMCU columns of the region are decoded: jpeg_crop_scanline
 *    (columns snap left to the iMCU), jpeg_skip_scanlines (skipped rows are only
 *    entropy-decoded), jpeg_abort_decompress after the last needed row;
 *  - a margin of MARGIN pixels around the region, because fancy upsampling treats crop
 *    edges as image edges: inside the region the pixels equal a full decode's;
 *  - scaled IDCT at 1/2, 1/4, 1/8 only (3/8..7/8 are scalar and slower than 1/1), and
 *    only where the antialiased resize afterwards still shrinks by 2x or more: a 1/s
 *    IDCT is close to an s x s box filter, and with that slack the output stays within
 *    0.5/255 mean absolute error of Pillow's (measured by tests/cli/engine_pillow.sh);
 *    without scaling the output equals Pillow's up to the resampler's rounding;
 *  - a file with restart markers (mkbatchfs --restart) is cropped further: only the
 *    restart segments covering the region are entropy-decoded, from a smaller JPEG the
 *    decoder builds of them (decode.c, build_window; counted as `windowed`);
 *  - progressive, CMYK/YCCK, grayscale and odd chroma sampling decode the whole image.
 * The libjpeg decompressor is reused only between files that define every table they
 * use (bfs_jpeg_self_contained); libjpeg would lend tables from one file to the next.
 * Pixels are those Pillow gets from the same file: ISLOW IDCT, fancy upsampling, RGB;
 * grayscale replicated; CMYK converted with Pillow's formula.
 *
 * Corrupt data: libjpeg errors and warnings (a truncated file is only a warning to
 * libjpeg) both fail the decode with BFS_E_JPEG_DATA, and the decoder stays usable. A
 * crop reads only the part of the file it needs, so damage elsewhere goes unnoticed by
 * it; bfs_decoder_decode_checked and bfs_decoder_decode_image read all of it.
 */
#ifndef BATCHFS_ENGINE_DECODE_H
#define BATCHFS_ENGINE_DECODE_H

#include <stddef.h>
#include <stdint.h>

typedef struct bfs_decoder bfs_decoder;

/* Decoded pixels covering at least the requested region, in scaled image coordinates. */
typedef struct bfs_pixels {
    const uint8_t *rgb; /* owned by the decoder; valid until its next call */
    size_t stride;
    int x0, y0, w, h; /* region covered */
    int img_w, img_h; /* the (scaled) image's size */
    int scale;        /* IDCT scale denominator used: 1, 2, 4 or 8 */
} bfs_pixels;

/* Image facts a decode needs, from the .bfs table or bfs_decoder_probe. */
typedef struct bfs_image_info {
    int width, height;
    uint16_t flags; /* BFS_KIND_*, BFS_F_*, BFS_COLOR_* */
    uint32_t raw_size;
} bfs_image_info;

/* Decode statistics of one decoder (per-thread; summed by the engine). */
typedef struct bfs_decode_stats {
    uint64_t cropped, full, scaled, raw; /* decodes by path */
    uint64_t windowed;    /* of the cropped: only the crop's restart segments decoded */
    uint64_t own_entropy; /* of the windowed: entropy-decoded by huff.h's decoder */
} bfs_decode_stats;

/* bfs_decoder_create - a decoder for one thread. Returns 0 or -ENOMEM. */
int bfs_decoder_create(bfs_decoder **out);

/* bfs_decoder_set_own_entropy - on: windows are entropy-decoded by engine/huff.h's
 * decoder (the default, unless BATCHFS_ENTROPY=libjpeg); off: by libjpeg-turbo's. For
 * tests and benchmarks. Returns 0 or -ENOMEM. */
int bfs_decoder_set_own_entropy(bfs_decoder *d, int on);

/* bfs_decoder_destroy - free; accepts NULL. */
void bfs_decoder_destroy(bfs_decoder *d);

/*
 * bfs_decoder_probe - read a JPEG's, PNG's or WebP's header (folder sources have no
 * table), told apart by their signatures (bfs_image_sniff). Returns 0 or the errors of
 * bfs_jpeg_parse_header (BFS_E_NOT_JPEG for bytes of no known format) or bfs_image_probe.
 */
int bfs_decoder_probe(const uint8_t *data, size_t len, bfs_image_info *info);

/*
 * bfs_decoder_max_scale - the largest IDCT scale denominator (1, 2, 4, 8) at which a
 * box of box_w x box_h image pixels still has at least need_w x need_h pixels, so
 * resampling stays a downscale. Raw samples always get 1.
 */
int bfs_decoder_max_scale(const bfs_image_info *info, double box_w, double box_h, int need_w,
                          int need_h);

/*
 * bfs_decoder_decode - decode the region [x0, x1) x [y0, y1) given in coordinates of the
 * image scaled by 1/scale (scaled size: ceil(width / scale) x ceil(height / scale)).
 * Raw, PNG and WebP samples decode at scale 1 only, and always to the whole image
 * (x0 = y0 = 0). Returns 0; BFS_E_JPEG_DATA (corrupt or truncated JPEG); BFS_E_PNG_DATA /
 * BFS_E_WEBP_DATA (corrupt or truncated PNG or WebP, bytes of the other format, or a size
 * other than info's); BFS_E_WEBP_UNSUPPORTED; BFS_E_IMAGE_TOO_LARGE; BFS_E_RAW_DATA (lz4 payload
 * does not decompress to raw_size, which must be width * height * 3 with both >= 1; a
 * payload shorter than raw_size / 255 is refused before any buffer is allocated);
 * BFS_E_JPEG_HEADER / BFS_E_NOT_JPEG; -EINVAL (bad region or scale); -ENOMEM.
 */
int bfs_decoder_decode(bfs_decoder *d, const uint8_t *data, size_t len, const bfs_image_info *info,
                       int scale, int x0, int y0, int x1, int y1, bfs_pixels *out);

/*
 * bfs_decoder_decode_checked - bfs_decoder_decode, and the whole file checked on the way:
 * no restart-segment window, and after the region the decode goes on to EOI (the rows
 * below it entropy-decoded and dropped), so corrupt data anywhere in the file fails it
 * with BFS_E_JPEG_DATA, as bfs_jpeg_check (engine/dataset/jpeg.h) would say, whatever the
 * region. The pixels are those bfs_decoder_decode returns. Costs the entropy decoding of
 * the rows below the region, and of the segments a window would leave out. The engine's
 * first decode of each sample of a folder source (engine.c). Returns as
 * bfs_decoder_decode.
 */
int bfs_decoder_decode_checked(bfs_decoder *d, const uint8_t *data, size_t len,
                               const bfs_image_info *info, int scale, int x0, int y0, int x1,
                               int y1, bfs_pixels *out);

/*
 * bfs_decoder_decode_image - decode the whole image at 1/scale into dst (the decoded-sample
 * cache's entries): ceil(height / scale) packed rows of 3 * ceil(width / scale) bytes;
 * dst_size must hold them. The pixels are those bfs_decoder_decode returns for the whole
 * image, and so, inside any region it is asked for, those it returns for that region
 * (tests/check_samplecache.c checks every sampling kind at every scale). Raw samples take
 * scale 1 only. Counted as a full (or raw) decode.
 * Returns 0; the errors of bfs_decoder_decode; -EINVAL (scale, or dst_size too small).
 */
int bfs_decoder_decode_image(bfs_decoder *d, const uint8_t *data, size_t len,
                             const bfs_image_info *info, int scale, uint8_t *dst, size_t dst_size);

/* bfs_decoder_get_stats - counters of decodes by path so far. */
void bfs_decoder_get_stats(const bfs_decoder *d, bfs_decode_stats *st);

#endif
