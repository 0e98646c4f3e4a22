/*
 * resize_kernels_internal.h — what resize.c (the planner and driver) and resize_kernels.c
 * (the row kernels) share: the fixed-point constants, the horizontal pass's description
 * and the kernels of each path. engine/ only; the resampler's header is resize.h.
 */
#ifndef BATCHFS_ENGINE_RESIZE_KERNELS_INTERNAL_H
#define BATCHFS_ENGINE_RESIZE_KERNELS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define RESIZE_HAVE_AVX2 1
#include <immintrin.h>
#else
#define RESIZE_HAVE_AVX2 0
#endif

/* Pillow: 32 bits minus 8 for the result minus 2 for overflow and sign. */
#define PRECISION_BITS 22
#define ROUND_HALF     (1 << (PRECISION_BITS - 1))

#if RESIZE_HAVE_AVX2
/* The AVX2 kernels split each 22-bit coefficient into two halves of this many bits (see
 * resize_kernels.c). */
#define AVX_HALF_BITS 11
#endif

/* One tap pair of one output pair in the AVX2 table (see avx2_group). */
typedef struct avx_table_entry {
    int16_t hi[16], lo[16];
} avx_table_entry;

/*
 * Everything a horizontal row kernel needs. Every output has exactly `taps` taps
 * (zero-padded by uniform_taps), so the loops have a fixed trip count.
 */
typedef struct hpass {
    int n;                /* outputs */
    int taps;             /* taps per output */
    int kstride;          /* int32 per output in k */
    const int32_t *first; /* per output: first tap, in pixels from the start of the row */
    const int32_t *k;     /* per output: its coefficients, then zeros */
    /* AVX2 kernel only */
    const avx_table_entry *tab; /* per output pair: `chunks` entries */
    int chunks;                 /* tap pairs per output */
    int groups;                 /* groups of 8 outputs, the last one padded */
    int safe_groups;            /* leading groups whose loads all stay inside the row */
    const int32_t *boff;        /* per output: byte offset of its loads in the row, or in
                                 * tail for groups past safe_groups */
    uint8_t *tail, *tail2;      /* row bytes [tail_from, tail_from + tail_len), zero padding */
    size_t tail_from, tail_len;
} hpass;

/* The kernels of one path: the horizontal pass of one row (in -> out, h's outputs), of
 * two rows with the same plan, and the vertical pass of nbytes outputs from count rows
 * starting at in (stride apart) with coefficients k. */
typedef void (*hrow_fn)(const uint8_t *in, uint8_t *out, const hpass *h);
typedef void (*hrow2_fn)(const uint8_t *in0, const uint8_t *in1, uint8_t *out0, uint8_t *out1,
                         const hpass *h);
typedef void (*vrow_fn)(const uint8_t *in, size_t stride, int count, const int32_t *k, uint8_t *out,
                        int nbytes);
typedef struct resize_kernels {
    hrow_fn hrow;
    hrow2_fn hrow2;
    vrow_fn vrow;
} resize_kernels;

/* Plain C that gcc -O2 vectorises for the build's baseline ISA. */
extern const resize_kernels resize_kernels_portable;
#if RESIZE_HAVE_AVX2
/* AVX2: only where the CPU has it (resize.c checks). */
extern const resize_kernels resize_kernels_avx2;
/* AVX-512 F, BW, VL, VNNI, VBMI (resize_kernels.c: the AVX2 arithmetic and table, wider): only
 * where the CPU and the kernel's saved state have it (resize.c checks). */
extern const resize_kernels resize_kernels_avx512;
#endif

#endif
