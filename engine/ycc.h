/*
 * ycc.h — YCbCr to RGB colour conversion of our own, swapped into libjpeg-turbo's colour
 * deconverter slot (decode.c, after jpeg_start_decompress) where the CPU has AVX-512
 * (F, BW, VBMI).
 *
 * Why: with fancy upsampling, libjpeg-turbo converts every decoded row with its AVX2
 * kernel: ~5.4% of a mount's daemon CPU (perf of a `cat` of 6 epochs, batch=256, size=224,
 * on /var/tmp/l24.bfs). This one converts 64 pixels a step and interleaves them with two
 * byte permutes per 64 output bytes.
 *
 * The same bytes: libjpeg-turbo's C conversion (jdcolor.c) adds to Y, per pixel,
 * (FIX(1.402) x_cr + 1/2) >> 16 for R, (FIX(1.772) x_cb + 1/2) >> 16 for B and
 * (-FIX(0.34414) x_cb - FIX(0.71414) x_cr + 1/2) >> 16 for G (x = sample - 128, 16
 * fraction bits, arithmetic shifts), then clamps to 0..255; its SIMD kernels give the same
 * bytes. Here R's and B's terms are each one vpmulhrsw by a constant found by search that
 * gives the C code's term for each of the 256 values; G's is the C code's sum, made by
 * vpmaddwd in 32 bits (ycc.c). tests/check_restart.c compares this with the kernel
 * libjpeg-turbo installs, on all 2^24 (Y, Cb, Cr).
 *
 * BATCHFS_YCC=libjpeg in the environment keeps libjpeg-turbo's (read once; an escape
 * hatch, for A/B runs; `auto`, the default, is ours where the CPU has it; any other value
 * is reported on stderr and ignored).
 */
#ifndef BATCHFS_ENGINE_YCC_H
#define BATCHFS_ENGINE_YCC_H

#include <stdio.h> /* (jpeglib.h needs FILE) */

#include <jpeglib.h>

/* Swap the conversion of c (after jpeg_start_decompress) for ours when it is YCbCr to
 * 8-bit RGB (3 bytes a pixel), without colour quantization, on a CPU with the
 * instructions and without BATCHFS_YCC=libjpeg. 1 when swapped, else 0 (c unchanged). */
int bfs_ycc_install(struct jpeg_decompress_struct *c);

/* 1 where this CPU runs ours (and the environment does not refuse it). */
int bfs_ycc_available(void);

#endif
