/*
 * image.h — which image format a payload is (JPEG, PNG, WebP), PNG and WebP decoding, and
 * one check for any image the packer and the shard importers store.
 *
 * Neighbours: the engine's decoder (engine/decode.c) sends JPEG to its crop-aware libjpeg
 * path and PNG/WebP (BFS_KIND_CODEC) here; mkbatchfs (pack.c) and the shard importers call
 * bfs_image_check for every image they pack, and bfs_image_decode_rgb for --raw and
 * --max-side. JPEG itself lives in jpeg.h.
 *
 * PNG goes through libspng, WebP through libwebp, always the whole image (no crop
 * decode: neither format can skip what a crop leaves out cheaply), to 8-bit RGB equal to
 * what Pillow's Image.open(f).convert("RGB") gives for the same file (Pillow 13, checked
 * by tests/cli/codec_pillow.sh):
 *  - gray replicated; 1, 2 and 4-bit gray scaled to 0..255 (x255, x85, x17);
 *  - palette looked up, indexes past the palette's end black (Pillow pads with zeros);
 *  - 16-bit RGB, RGBA and gray+alpha: the high byte of each sample;
 *  - 16-bit gray (Pillow's mode I;16): clipped to 255, not scaled (a value of 256 or
 *    more is white), as Pillow's I;16 -> L conversion does;
 *  - alpha and tRNS dropped, never composited over a background, as convert("RGB")
 *    drops them: the stored colour of a transparent pixel is what comes out;
 *  - no gamma, ICC or sBIT correction (Pillow applies none);
 *  - WebP lossy (with or without alpha) and lossless: libwebp's RGB; animated WebP is
 *    refused (BFS_E_WEBP_UNSUPPORTED).
 * Chunk CRCs are checked, except the last IDAT's, which libspng (like Pillow) does not
 * read once it has every row; so are the deflate stream's bytes up to the last row's:
 * damage after them (the stream's end, its Adler-32) goes unnoticed, as by Pillow.
 *
 * Limits: a side over 65535 pixels (the .bfs table's width and height are 16-bit) or
 * more than BFS_JPEG_MAX_PIXELS pixels (a 1 KB PNG may claim 2^31 x 2^31) is refused
 * with BFS_E_IMAGE_TOO_LARGE before anything is allocated for it.
 *
 * Memory: libspng allocates through the process's malloc/calloc/realloc/free taken here
 * (so tests/fault.h reaches it); libwebp's own allocations are out of reach of the fault
 * shims, but it reports running out (-ENOMEM) apart from corrupt data.
 *
 * Every function reads only [data, data + len) and is fuzzed (tests/fuzz/fuzz_image.c).
 */
#ifndef BATCHFS_ENGINE_DATASET_IMAGE_H
#define BATCHFS_ENGINE_DATASET_IMAGE_H

#include <stddef.h>
#include <stdint.h>

enum { BFS_IMAGE_UNKNOWN, BFS_IMAGE_JPEG, BFS_IMAGE_PNG, BFS_IMAGE_WEBP };

/* What a sample's table entry records about an image (bfs_sample_in's fields). */
typedef struct bfs_image_facts {
    int width, height;
    uint16_t flags; /* BFS_KIND_JPEG with its BFS_F_* / BFS_COLOR_*, or BFS_KIND_CODEC with
                       BFS_F_WEBP for WebP */
} bfs_image_facts;

/*
 * bfs_image_sniff - the format of data by its signature: BFS_IMAGE_PNG (the 8-byte PNG
 * signature), BFS_IMAGE_WEBP ("RIFF", 4 bytes, "WEBP"), BFS_IMAGE_JPEG (SOI, 0xFF 0xD8),
 * else BFS_IMAGE_UNKNOWN. Reads at most 12 bytes.
 */
int bfs_image_sniff(const uint8_t *data, size_t len);

/*
 * bfs_image_probe - a PNG's or WebP's size and .bfs flags from its header (PNG: the IHDR
 * chunk; WebP: libwebp's WebPGetFeatures), without decoding pixels. Returns 0;
 * BFS_E_NOT_JPEG when data is neither (the callers' "not an image" code); BFS_E_PNG_DATA
 * / BFS_E_WEBP_DATA (truncated or malformed header, zero size, bad bit depth or colour
 * type); BFS_E_WEBP_UNSUPPORTED (animated); BFS_E_IMAGE_TOO_LARGE.
 */
int bfs_image_probe(const uint8_t *data, size_t len, bfs_image_facts *f);

/*
 * bfs_image_decode - decode a whole PNG or WebP of f's size (from bfs_image_probe or a
 * table entry) into dst: f->height packed rows of 3 * f->width bytes (dst_size must hold
 * them), pixels as the file comment says. why (whylen bytes; may be NULL) receives the
 * library's message for a corrupt file, or "". Returns 0; BFS_E_PNG_DATA / BFS_E_WEBP_DATA
 * (corrupt or truncated data, or a size other than f's); the errors of bfs_image_probe;
 * -EINVAL (dst_size too small); -ENOMEM.
 */
int bfs_image_decode(const uint8_t *data, size_t len, const bfs_image_facts *f, uint8_t *dst,
                     size_t dst_size, char *why, size_t whylen);

/*
 * bfs_image_decode_rgb - decode a whole JPEG, PNG or WebP to packed RGB (*rgb malloc'ed:
 * the caller frees it; *w x *h pixels), as bfs_jpeg_decode_rgb does for JPEG (whose path
 * it takes). Returns 0 or the errors of bfs_jpeg_decode_rgb / bfs_image_decode.
 */
int bfs_image_decode_rgb(const uint8_t *data, size_t len, uint8_t **rgb, int *w, int *h, char *why,
                         size_t whylen);

/*
 * bfs_image_check - what the packer and the shard importers call for any image bytes
 * before storing them as they are: recognises JPEG, PNG or WebP by content, checks that
 * the whole image decodes (JPEG: bfs_jpeg_check; PNG/WebP: bfs_image_decode into a
 * scratch buffer) and fills f with the sample entry's width, height and flags
 * (BFS_KIND_JPEG with bfs_jpeg_sample_flags, or BFS_KIND_CODEC [| BFS_F_WEBP]). why as
 * bfs_image_decode's. Returns 0; BFS_E_NOT_JPEG (no known signature); the JPEG header
 * errors (jpeg.h) and BFS_E_JPEG_DATA; the errors of bfs_image_decode; -ENOMEM.
 */
int bfs_image_check(const uint8_t *data, size_t len, bfs_image_facts *f, char *why, size_t whylen);

#endif
