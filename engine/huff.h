/*
 * huff.h — a baseline Huffman decoder of our own, swapped into libjpeg-turbo's
 * entropy-decoder slot for restart windows (decode.c, build_window).
 *
 * Why: on photos the entropy decoding was half of a worker's time, and libjpeg-turbo
 * decodes any file with restart markers on its slow path (jdhuff.c decode_mcu_slow: an
 * 8-bit lookahead, then one code length at a time, the bit buffer refilled byte by byte).
 * This one looks 10 bits ahead into a table that holds most symbols' coefficients
 * themselves, and 11 bits into one that holds two AC symbols where both fit, takes 7 bytes
 * at a time into its bit buffer where none is 0xFF, and uses BMI2's shifts where the CPU
 * has them. Measured: decodes of RandomResizedCrop windows 1.40-1.46x libjpeg-turbo's
 * (`build/bench/bench_huff /var/tmp/batchfs-corpus-l24 300 8`, 5 runs alternated; 1.32x
 * one symbol a lookup, 1.09-1.11x before the coefficients were in the table); with one
 * symbol a lookup the entropy decoding alone was ~1.5x (perf samples of that bench, 150
 * files, in huff.c against jdhuff.c's, less those of the restart markers' insertion). IDCT
 * and upsampling stay libjpeg-turbo's (colour conversion is ycc.h's where the CPU has
 * AVX-512): the coefficients are the same, so the pixels are.
 *
 * Where it differs from libjpeg-turbo's decoder: only on data libjpeg-turbo warns about
 * (and a warning makes the sample bad: decode.c). A bad Huffman code, a segment that ends
 * before its MCUs, a restart marker out of order or missing, data without a marker at its
 * end: this one stops the decode with a libjpeg error (the same BFS_E_JPEG_DATA to the
 * caller). Bytes left over in a segment before its marker it skips (huff.c, restart):
 * libjpeg-turbo warns of them when its bit reader has not reached the marker (about four
 * bytes or more), so a crop of such a corrupt file is bad to libjpeg-turbo and decoded by
 * this one, with the same coefficients. That is the one difference in verdict; a file
 * decoded whole and clean once (mkbatchfs, bfs_decoder_decode_checked) has no such bytes
 * anywhere libjpeg-turbo would have warned. Windows always have restart markers, where
 * libjpeg-turbo only takes its slow path, whose reading of the data this one follows (its
 * fast path reads an illegal FF FF 00 differently).
 *
 * BATCHFS_ENTROPY=libjpeg in the environment keeps libjpeg-turbo's own decoder (an
 * escape hatch, and the reference of tests/check_restart.c and `make bench`).
 */
#ifndef BATCHFS_ENGINE_HUFF_H
#define BATCHFS_ENGINE_HUFF_H

#include <stdio.h> /* (jpeglib.h needs FILE) */

#include <jpeglib.h>

typedef struct bfs_huff bfs_huff;

/* bfs_huff_create - a decoder's state (~100 KiB: the lookup tables); NULL without memory. */
bfs_huff *bfs_huff_create(void);
void bfs_huff_destroy(bfs_huff *h);

/* bfs_huff_install - after jpeg_start_decompress of c, before its first row: take over
 * the entropy decoding of c's scan when it is one baseline Huffman scan of 8-bit samples
 * (else leave libjpeg-turbo's and return 0). Returns 1 when installed. h serves that one
 * decompression: c->entropy points into it until the next jpeg_start_decompress. */
int bfs_huff_install(bfs_huff *h, struct jpeg_decompress_struct *c);

/* bfs_huff_wanted - 0 when BATCHFS_ENTROPY=libjpeg is set (read once). */
int bfs_huff_wanted(void);

#endif
