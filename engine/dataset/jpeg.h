/*
 * jpeg.h — JPEG header inspection and a whole-image decode.
 *
 * Neighbours: mkbatchfs (engine/dataset/pack.c) records what bfs_jpeg_parse_header finds
 * in the sample table so the engine plans decodes without touching payloads, and leaves
 * out the files bfs_jpeg_check finds corrupt; --raw and --max-side use
 * bfs_jpeg_decode_rgb. The engine's crop-aware decoder (issue: engine) uses the libjpeg
 * API directly and falls back to full decodes for what the header flags say it cannot
 * crop.
 *
 * bfs_jpeg_parse_header is a marker walker over untrusted bytes: it never reads outside
 * [data, data + len) and is fuzzed (tests/fuzz/fuzz_jpeg_header.c).
 */
#ifndef BATCHFS_ENGINE_DATASET_JPEG_H
#define BATCHFS_ENGINE_DATASET_JPEG_H

#include <stddef.h>
#include <stdint.h>

/* Images of more pixels are refused (decompression bombs: a 1 KB file may claim
 * 65535 x 65535, 12 GB of RGB); 2^28 = 16384 x 16384. */
#define BFS_JPEG_MAX_PIXELS (1ULL << 28)

typedef struct bfs_jpeg_header {
    int width, height;
    int components;      /* 1, 3 or 4 */
    int progressive;     /* SOF2 / SOF10 */
    int arithmetic;      /* SOF9 / SOF10 */
    int hs[4], vs[4];    /* sampling factors per component */
    int adobe_transform; /* APP14 Adobe transform byte, -1 when absent */
    /* Where the first scan is, for restart-segment cropping (decode.c): */
    int restart_interval; /* DRI in force at the first SOS, in MCUs; 0: no restart markers */
    int scan_components;  /* components in the first scan (== components: interleaved) */
    size_t sof_offset;    /* offset of the SOF segment's P byte (Y and X follow it) */
    size_t scan_offset;   /* offset of the first entropy-coded byte after the first SOS */
    /* Tables (before the first SOS): defined by the file, and used by its frame (quant)
     * and its first scan (Huffman). Bits: DQT id i -> 1 << i; DHT DC id i -> 1 << i, AC id
     * i -> 1 << (4 + i). See bfs_jpeg_self_contained. */
    unsigned dqt_defined, dqt_used, dht_defined, dht_used;
} bfs_jpeg_header;

/*
 * bfs_jpeg_self_contained - does the file define every table it decodes with, before its
 * one interleaved sequential scan? libjpeg keeps tables from one image to the next in a
 * reused decompressor (abbreviated datastreams), so a file missing one would borrow it from
 * whatever file the decompressor saw before; a fresh one takes the standard Huffman tables
 * for ids 0 and 1 and fails on any other missing table. The engine's decoder reuses its
 * decompressor only for self-contained files.
 */
int bfs_jpeg_self_contained(const bfs_jpeg_header *h);

/*
 * bfs_jpeg_parse_header - walk the markers from SOI to SOS and describe the image.
 * Returns 0; BFS_E_NOT_JPEG (no SOI); BFS_E_JPEG_HEADER (truncated or malformed before
 * SOS, zero size, bad component count or sampling factors, a scan of no or more than 4
 * components); BFS_E_JPEG_UNSUPPORTED
 * (lossless, hierarchical, or not 8-bit: libjpeg-turbo 2.1 cannot decode them);
 * BFS_E_JPEG_TOO_LARGE (more than BFS_JPEG_MAX_PIXELS).
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
 * bfs_jpeg_check - is the JPEG intact? Decodes it whole once with libjpeg-turbo, set up
 * as the engine's full-scale decode, every entropy-coded segment of every scan read to
 * EOI (the rows skipped but the last: about the cost of the file's entropy decoding),
 * and fails on the first error or warning: a file cut short ("Premature end of JPEG file") or a bad
 * Huffman code ("Corrupt JPEG data: bad Huffman code") is only a warning to libjpeg-turbo, which
 * fills in gray, and so it is to the engine's decoder (decode.h), which fails such a sample
 * whenever it decodes the damaged part. mkbatchfs checks every image this way (or by the whole
 * decode its transform makes), so the samples of a pack never depend on its options, and
 * a mounted ImageFolder checks each file once (engine.c). The same scan limit as the
 * engine's applies (500: a progressive CPU bomb is corrupt).
 * why (may be NULL) receives libjpeg-turbo's first message on BFS_E_JPEG_DATA, else "".
 * Returns 0; the errors of bfs_jpeg_parse_header; BFS_E_JPEG_DATA; -ENOMEM (libjpeg-turbo
 * ran out of memory: not the file's fault).
 */
int bfs_jpeg_check(const uint8_t *data, size_t len, char *why, size_t whylen);

/*
 * bfs_jpeg_encode_rgb - encode packed RGB (gray output when gray != 0) at quality,
 * 4:2:0, baseline. *out is malloc'ed. Returns 0, -EINVAL or -ENOMEM.
 */
int bfs_jpeg_encode_rgb(const uint8_t *rgb, int w, int h, int quality, int gray, uint8_t **out,
                        size_t *len);

/*
 * bfs_jpeg_add_restarts - losslessly re-encode a 3-component YCbCr JPEG (baseline or
 * progressive; 4:2:0, 4:2:2, 4:4:0 or 4:4:4, the samplings the crop decoder crops) as a
 * baseline JPEG with a restart marker after every `interval` MCUs (1..65535; mkbatchfs
 * --restart uses 1: the finest windows) and optimized Huffman tables. The DCT coefficients,
 * quantization tables and sampling are copied untouched, so every decoder produces the same pixels
 * as from the original; the engine then decodes a crop from only the segments it covers (decode.c,
 * build_window). Markers other than those (APPn, COM: EXIF, ICC) are not copied; torchvision
 * and Pillow ignore them when decoding. *out is malloc'ed.
 * Re-encoding reads every coefficient of the file, so a 0 return means it decoded whole
 * (as bfs_jpeg_check would say).
 * Returns 0; 1 when the file is not eligible: other colour spaces or samplings,
 * arithmetic coding, over 2^26 pixels (re-encoding holds every coefficient in memory), or
 * already a baseline file with that interval: keep it as it is (it was not decoded: check
 * it with bfs_jpeg_check); the errors of bfs_jpeg_parse_header; BFS_E_JPEG_DATA when
 * libjpeg-turbo reports an error or a warning; -EINVAL (interval); -ENOMEM (here or
 * inside libjpeg-turbo).
 */
int bfs_jpeg_add_restarts(const uint8_t *data, size_t len, int interval, uint8_t **out,
                          size_t *outlen);

#endif
