/*
 * resize_kernels.c — the row kernels of resize.c's passes (resize_kernels_internal.h):
 * the horizontal pass of one row or two, and the vertical pass of one row, portable (plain
 * C that gcc -O2 vectorises), AVX2 and AVX-512 (chosen at run time). resize.c plans the
 * taps and calls them through the tables at the end; every kernel gives the same bytes
 * (resize.c's invariants: exact int32 sums, reads inside the row or its zero-padded tail).
 */
#include "engine/resize_kernels_internal.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* ---- kernels ---------------------------------------------------------------------------- */

static inline uint8_t clip8(int32_t v)
{
    v >>= PRECISION_BITS; /* arithmetic shift, as Pillow's clip8 */
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* Horizontal pass of one row with a fixed number of taps per output. */
static inline __attribute__((always_inline)) void
hrow_fixed(const uint8_t *restrict in, uint8_t *restrict out, const hpass *h, int taps)
{
    const int32_t *k = h->k;
    for (int x = 0; x < h->n; x++, k += h->kstride) {
        const uint8_t *px = in + 3 * (size_t)h->first[x];
        int32_t r = ROUND_HALF, g = ROUND_HALF, b = ROUND_HALF;
#pragma GCC unroll 4 /* -O2 does not unroll the constant trip counts by itself */
        for (int t = 0; t < taps; t++) {
            r += px[3 * t + 0] * k[t];
            g += px[3 * t + 1] * k[t];
            b += px[3 * t + 2] * k[t];
        }
        out[3 * x + 0] = clip8(r);
        out[3 * x + 1] = clip8(g);
        out[3 * x + 2] = clip8(b);
    }
}

/* Vertical pass of one row: nbytes outputs from count rows starting at in (stride
 * apart). The fixed-size blocks let gcc -O2 vectorise without a cost model. */
#define VBLOCK 16
static inline __attribute__((always_inline)) void vrow_generic(const uint8_t *restrict in,
                                                               size_t stride, int count,
                                                               const int32_t *restrict k,
                                                               uint8_t *restrict out, int nbytes)
{
    int i = 0;
    for (; i + VBLOCK <= nbytes; i += VBLOCK) {
        int32_t acc[VBLOCK];
        for (int j = 0; j < VBLOCK; j++)
            acc[j] = ROUND_HALF;
        for (int t = 0; t < count; t++) {
            const uint8_t *row = in + (size_t)t * stride + i;
            int32_t kt = k[t];
            for (int j = 0; j < VBLOCK; j++)
                acc[j] += row[j] * kt;
        }
        for (int j = 0; j < VBLOCK; j++)
            out[i + j] = clip8(acc[j]);
    }
    for (; i < nbytes; i++) {
        int32_t acc = ROUND_HALF;
        for (int t = 0; t < count; t++)
            acc += in[(size_t)t * stride + i] * k[t];
        out[i] = clip8(acc);
    }
}

static void hrow_portable(const uint8_t *in, uint8_t *out, const hpass *h)
{
    switch (h->taps) { /* constant trip counts unroll: the common cases */
    case 1:
        hrow_fixed(in, out, h, 1);
        break;
    case 2:
        hrow_fixed(in, out, h, 2);
        break;
    case 3:
        hrow_fixed(in, out, h, 3);
        break;
    case 4:
        hrow_fixed(in, out, h, 4);
        break;
    default:
        hrow_fixed(in, out, h, h->taps);
        break;
    }
}

static void hrow2_portable(const uint8_t *in0, const uint8_t *in1, uint8_t *out0, uint8_t *out1,
                           const hpass *h)
{
    hrow_portable(in0, out0, h);
    hrow_portable(in1, out1, h);
}

static void vrow_portable(const uint8_t *in, size_t stride, int count, const int32_t *k,
                          uint8_t *out, int nbytes)
{
    vrow_generic(in, stride, count, k, out, nbytes);
}

#if RESIZE_HAVE_AVX2
/*
 * AVX2 horizontal kernel. Outputs go in pairs, A in the low 128-bit lane and B in the
 * high one. For each pair of taps (2c, 2c+1) the table holds two vectors of int16: the
 * high and low 11-bit halves of the coefficients, laid out per lane as
 * [k0 k1 k0 k1 k0 k1 0 0] to match pixels shuffled into [r0 r1 g0 g1 b0 b1 0 0], so one
 * pmaddwd gives the r, g, b partial sums of two taps in three int32 lanes. Exact:
 * sum = (sum_hi << 11) + sum_lo. One 16-byte load serves four taps.
 */
/* Sum of one output pair, rounded and shifted: int32 [rA gA bA 0 | rB gB bB 0]. */
static inline __attribute__((always_inline, target("avx2"))) __m256i
avx2_pair(const uint8_t *pa, const uint8_t *pb, const avx_table_entry *e, int chunks)
{
    const __m256i sh01 = _mm256_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1,
                                          0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
    const __m256i sh23 =
        _mm256_setr_epi8(6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1, 6, -1, 9, -1,
                         7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1);
    __m256i acch = _mm256_setzero_si256(), accl = _mm256_set1_epi32(ROUND_HALF);
    for (int c = 0; c < chunks; c += 2, pa += 12, pb += 12, e += 2) {
        __m256i v =
            _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)pa)),
                                    _mm_loadu_si128((const __m128i *)pb), 1);
        __m256i x = _mm256_shuffle_epi8(v, sh01);
        acch = _mm256_add_epi32(acch, _mm256_madd_epi16(x, _mm256_load_si256((const void *)e->hi)));
        accl = _mm256_add_epi32(accl, _mm256_madd_epi16(x, _mm256_load_si256((const void *)e->lo)));
        if (c + 1 < chunks) {
            x = _mm256_shuffle_epi8(v, sh23);
            acch = _mm256_add_epi32(acch,
                                    _mm256_madd_epi16(x, _mm256_load_si256((const void *)e[1].hi)));
            accl = _mm256_add_epi32(accl,
                                    _mm256_madd_epi16(x, _mm256_load_si256((const void *)e[1].lo)));
        }
    }
    __m256i s = _mm256_add_epi32(_mm256_slli_epi32(acch, AVX_HALF_BITS), accl);
    return _mm256_srai_epi32(s, PRECISION_BITS);
}

/* Outputs x .. x+7, loads relative to base; writes 28 bytes at out + 3x (4 of slack). */
static inline __attribute__((always_inline, target("avx2"))) void
avx2_group(const uint8_t *base, uint8_t *out, const hpass *h, int x, int chunks)
{
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i squeeze =
        _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1, 0, 1, 2, 4, 5, 6,
                         8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
    const int32_t *boff = h->boff + x;
    const avx_table_entry *e = h->tab + (size_t)(x / 2) * chunks;
    __m256i s0 = avx2_pair(base + boff[0], base + boff[1], e, chunks);
    __m256i s1 = avx2_pair(base + boff[2], base + boff[3], e + chunks, chunks);
    __m256i s2 = avx2_pair(base + boff[4], base + boff[5], e + 2 * chunks, chunks);
    __m256i s3 = avx2_pair(base + boff[6], base + boff[7], e + 3 * chunks, chunks);
    /* [A|B] [C|D] [E|F] [G|H] -> bytes A..H; saturation clamps to 0..255 like clip8 */
    __m256i u = _mm256_packus_epi16(_mm256_packs_epi32(s0, s1), _mm256_packs_epi32(s2, s3));
    u = _mm256_permutevar8x32_epi32(u, order); /* dwords A C E G | B D F H -> A..H */
    u = _mm256_shuffle_epi8(u, squeeze);       /* 12 bytes per lane */
    _mm_storeu_si128((__m128i *)(out + 3 * (size_t)x), _mm256_castsi256_si128(u));
    _mm_storeu_si128((__m128i *)(out + 3 * (size_t)x + 12), _mm256_extracti128_si256(u, 1));
}

/* avx2_pair for the same outputs of two rows at once: the table is read once. */
static inline __attribute__((always_inline, target("avx2"))) void
avx2_pair2(const uint8_t *r0, const uint8_t *r1, int32_t oa, int32_t ob, const avx_table_entry *e,
           int chunks, __m256i *s0, __m256i *s1)
{
    const __m256i sh01 = _mm256_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1,
                                          0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
    const __m256i sh23 =
        _mm256_setr_epi8(6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1, 6, -1, 9, -1,
                         7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1);
    __m256i h0 = _mm256_setzero_si256(), l0 = _mm256_set1_epi32(ROUND_HALF);
    __m256i h1 = h0, l1 = l0;
    for (int c = 0; c < chunks; c += 2, oa += 12, ob += 12, e += 2) {
        __m256i v0 = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const void *)(r0 + oa))),
            _mm_loadu_si128((const void *)(r0 + ob)), 1);
        __m256i v1 = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const void *)(r1 + oa))),
            _mm_loadu_si128((const void *)(r1 + ob)), 1);
        __m256i kh = _mm256_load_si256((const void *)e->hi);
        __m256i kl = _mm256_load_si256((const void *)e->lo);
        __m256i x0 = _mm256_shuffle_epi8(v0, sh01), x1 = _mm256_shuffle_epi8(v1, sh01);
        h0 = _mm256_add_epi32(h0, _mm256_madd_epi16(x0, kh));
        l0 = _mm256_add_epi32(l0, _mm256_madd_epi16(x0, kl));
        h1 = _mm256_add_epi32(h1, _mm256_madd_epi16(x1, kh));
        l1 = _mm256_add_epi32(l1, _mm256_madd_epi16(x1, kl));
        if (c + 1 < chunks) {
            kh = _mm256_load_si256((const void *)e[1].hi);
            kl = _mm256_load_si256((const void *)e[1].lo);
            x0 = _mm256_shuffle_epi8(v0, sh23), x1 = _mm256_shuffle_epi8(v1, sh23);
            h0 = _mm256_add_epi32(h0, _mm256_madd_epi16(x0, kh));
            l0 = _mm256_add_epi32(l0, _mm256_madd_epi16(x0, kl));
            h1 = _mm256_add_epi32(h1, _mm256_madd_epi16(x1, kh));
            l1 = _mm256_add_epi32(l1, _mm256_madd_epi16(x1, kl));
        }
    }
    *s0 = _mm256_srai_epi32(_mm256_add_epi32(_mm256_slli_epi32(h0, AVX_HALF_BITS), l0),
                            PRECISION_BITS);
    *s1 = _mm256_srai_epi32(_mm256_add_epi32(_mm256_slli_epi32(h1, AVX_HALF_BITS), l1),
                            PRECISION_BITS);
}

static inline __attribute__((always_inline, target("avx2"))) void
avx2_store8(uint8_t *out, __m256i ab, __m256i cd, __m256i ef, __m256i gh)
{
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i squeeze =
        _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1, 0, 1, 2, 4, 5, 6,
                         8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
    __m256i u = _mm256_packus_epi16(_mm256_packs_epi32(ab, cd), _mm256_packs_epi32(ef, gh));
    u = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(u, order), squeeze);
    _mm_storeu_si128((__m128i *)out, _mm256_castsi256_si128(u));
    _mm_storeu_si128((__m128i *)(out + 12), _mm256_extracti128_si256(u, 1));
}

static inline __attribute__((always_inline, target("avx2"))) void
avx2_group2(const uint8_t *r0, const uint8_t *r1, uint8_t *o0, uint8_t *o1, const hpass *h, int x,
            int chunks)
{
    const int32_t *boff = h->boff + x;
    const avx_table_entry *e = h->tab + (size_t)(x / 2) * chunks;
    __m256i a0, a1, b0, b1, c0, c1, d0, d1;
    avx2_pair2(r0, r1, boff[0], boff[1], e, chunks, &a0, &a1);
    avx2_pair2(r0, r1, boff[2], boff[3], e + chunks, chunks, &b0, &b1);
    avx2_pair2(r0, r1, boff[4], boff[5], e + 2 * chunks, chunks, &c0, &c1);
    avx2_pair2(r0, r1, boff[6], boff[7], e + 3 * chunks, chunks, &d0, &d1);
    avx2_store8(o0 + 3 * (size_t)x, a0, b0, c0, d0);
    avx2_store8(o1 + 3 * (size_t)x, a1, b1, c1, d1);
}

static inline __attribute__((always_inline, target("avx2"))) void
hrow2_avx2_chunks(const uint8_t *in0, const uint8_t *in1, uint8_t *out0, uint8_t *out1,
                  const hpass *h, int chunks)
{
    int g = 0;
    for (; g < h->safe_groups; g++)
        avx2_group2(in0, in1, out0, out1, h, 8 * g, chunks);
    if (g < h->groups) {
        memcpy(h->tail, in0 + h->tail_from, h->tail_len);
        memcpy(h->tail2, in1 + h->tail_from, h->tail_len);
        for (; g < h->groups; g++)
            avx2_group2(h->tail, h->tail2, out0, out1, h, 8 * g, chunks);
    }
}

__attribute__((target("avx2"))) static void hrow2_avx2(const uint8_t *in0, const uint8_t *in1,
                                                       uint8_t *out0, uint8_t *out1, const hpass *h)
{
    switch (h->chunks) {
    case 1:
        hrow2_avx2_chunks(in0, in1, out0, out1, h, 1);
        break;
    case 2:
        hrow2_avx2_chunks(in0, in1, out0, out1, h, 2);
        break;
    default:
        hrow2_avx2_chunks(in0, in1, out0, out1, h, h->chunks);
        break;
    }
}

static inline __attribute__((always_inline, target("avx2"))) void
hrow_avx2_chunks(const uint8_t *restrict in, uint8_t *restrict out, const hpass *h, int chunks)
{
    int g = 0;
    for (; g < h->safe_groups; g++)
        avx2_group(in, out, h, 8 * g, chunks);
    if (g < h->groups) {
        /* the last outputs would load past the row: use a copy with zero padding */
        memcpy(h->tail, in + h->tail_from, h->tail_len);
        for (; g < h->groups; g++)
            avx2_group(h->tail, out, h, 8 * g, chunks);
    }
}

__attribute__((target("avx2"))) static void hrow_avx2(const uint8_t *in, uint8_t *out,
                                                      const hpass *h)
{
    switch (h->chunks) {
    case 1:
        hrow_avx2_chunks(in, out, h, 1);
        break;
    case 2:
        hrow_avx2_chunks(in, out, h, 2);
        break;
    default:
        hrow_avx2_chunks(in, out, h, h->chunks);
        break;
    }
}

/*
 * AVX2 vertical kernel: 32 outputs per step, accumulators in registers. Rows go in
 * pairs (t, t+1): their bytes interleave into int16 pairs [a_i b_i] that one pmaddwd
 * multiplies by [k_t k_t+1], with the coefficients split into 11-bit halves as in the
 * horizontal kernel (exact). An odd last row is multiplied in full with pmulld.
 */
#define VPAIRS_MAX 32

/* Taps k0, k1 of a row pair as the int16 pairs [k0 k1] pmaddwd / vpdpwssd multiply by:
 * the high 11-bit halves (*hi) and the low ones (*lo), as one int32 each to broadcast. */
static inline void vpair_halves(int32_t k0, int32_t k1, int32_t *hi, int32_t *lo)
{
    const int32_t m = (1 << AVX_HALF_BITS) - 1;
    *hi = (int32_t)(((uint32_t)(k1 >> AVX_HALF_BITS) << 16) | (uint16_t)(k0 >> AVX_HALF_BITS));
    *lo = (int32_t)(((uint32_t)(k1 & m) << 16) | (uint32_t)(k0 & m));
}
__attribute__((target("avx2"))) static void vrow_avx2(const uint8_t *in, size_t stride, int count,
                                                      const int32_t *k, uint8_t *out, int nbytes)
{
    if (count > 2 * VPAIRS_MAX + 1) { /* beyond 64x downscaling: not worth a kernel */
        vrow_portable(in, stride, count, k, out, nbytes);
        return;
    }
    const __m256i zero = _mm256_setzero_si256();
    __m256i kh[VPAIRS_MAX], kl[VPAIRS_MAX];
    int npairs = count / 2;
    for (int p = 0; p < npairs; p++) {
        int32_t hi, lo;
        vpair_halves(k[2 * p], k[2 * p + 1], &hi, &lo);
        kh[p] = _mm256_set1_epi32(hi);
        kl[p] = _mm256_set1_epi32(lo);
    }
    __m256i klast = _mm256_set1_epi32(count & 1 ? k[count - 1] : 0);
    const uint8_t *last = in + (size_t)(count - 1) * stride;
    int i = 0;
    for (; i + 32 <= nbytes; i += 32) {
        __m256i h0 = zero, h1 = zero, h2 = zero, h3 = zero;
        __m256i l0 = _mm256_set1_epi32(ROUND_HALF), l1 = l0, l2 = l0, l3 = l0;
        const uint8_t *row = in + i;
        for (int p = 0; p < npairs; p++, row += 2 * stride) {
            __m256i a = _mm256_loadu_si256((const __m256i *)row);
            __m256i b = _mm256_loadu_si256((const __m256i *)(row + stride));
            __m256i ablo = _mm256_unpacklo_epi8(a, b), abhi = _mm256_unpackhi_epi8(a, b);
            __m256i x0 = _mm256_unpacklo_epi8(ablo, zero), x1 = _mm256_unpackhi_epi8(ablo, zero);
            __m256i x2 = _mm256_unpacklo_epi8(abhi, zero), x3 = _mm256_unpackhi_epi8(abhi, zero);
            h0 = _mm256_add_epi32(h0, _mm256_madd_epi16(x0, kh[p]));
            h1 = _mm256_add_epi32(h1, _mm256_madd_epi16(x1, kh[p]));
            h2 = _mm256_add_epi32(h2, _mm256_madd_epi16(x2, kh[p]));
            h3 = _mm256_add_epi32(h3, _mm256_madd_epi16(x3, kh[p]));
            l0 = _mm256_add_epi32(l0, _mm256_madd_epi16(x0, kl[p]));
            l1 = _mm256_add_epi32(l1, _mm256_madd_epi16(x1, kl[p]));
            l2 = _mm256_add_epi32(l2, _mm256_madd_epi16(x2, kl[p]));
            l3 = _mm256_add_epi32(l3, _mm256_madd_epi16(x3, kl[p]));
        }
        if (count & 1) { /* zero-extend to int32 in the same lane order as above */
            __m256i a = _mm256_loadu_si256((const __m256i *)(last + i));
            __m256i alo = _mm256_unpacklo_epi8(a, zero), ahi = _mm256_unpackhi_epi8(a, zero);
            l0 = _mm256_add_epi32(l0, _mm256_mullo_epi32(_mm256_unpacklo_epi16(alo, zero), klast));
            l1 = _mm256_add_epi32(l1, _mm256_mullo_epi32(_mm256_unpackhi_epi16(alo, zero), klast));
            l2 = _mm256_add_epi32(l2, _mm256_mullo_epi32(_mm256_unpacklo_epi16(ahi, zero), klast));
            l3 = _mm256_add_epi32(l3, _mm256_mullo_epi32(_mm256_unpackhi_epi16(ahi, zero), klast));
        }
#define VCOMBINE(hv, lv)                                                                           \
    _mm256_srai_epi32(_mm256_add_epi32(_mm256_slli_epi32(hv, AVX_HALF_BITS), lv), PRECISION_BITS)
        /* lanes hold outputs [0-3 16-19] [4-7 20-23] [8-11 24-27] [12-15 28-31]: the
         * lane-wise packs put them back in order; saturation clamps like clip8 */
        __m256i p01 = _mm256_packs_epi32(VCOMBINE(h0, l0), VCOMBINE(h1, l1));
        __m256i p23 = _mm256_packs_epi32(VCOMBINE(h2, l2), VCOMBINE(h3, l3));
#undef VCOMBINE
        _mm256_storeu_si256((__m256i *)(out + i), _mm256_packus_epi16(p01, p23));
    }
    if (i < nbytes)
        vrow_generic(in + i, stride, count, k, out + i, nbytes - i);
}

/*
 * AVX-512 (F, BW, VL, VNNI, VBMI) kernels: the AVX2 kernels' arithmetic in 512-bit
 * registers, so the same int32 sums and the same bytes. VNNI's vpdpwssd is pmaddwd and
 * the add into the accumulator in one instruction, with the same wrapping sum (the
 * products here are far from overflowing). The two-row horizontal pass holds both rows'
 * output pairs in one register (row 0's A|B in the low half, row 1's in the high half)
 * and reads each table entry once, broadcast to both halves: the same table as AVX2
 * (avx_layout), half the shuffles, a quarter of the multiply-add instructions; one vpermb
 * packs both rows' outputs (avx512_group2). The vertical pass makes 64 outputs a step.
 * The one-row horizontal pass, used for at most one row of a window, stays AVX2.
 * Measured on a 474x316 photo, box (50, 40, 400, 300) to 224x224 (`resize_tool -p PATH
 * -n 1000`, medians, alternated): AVX2 115.7-118.6 us, 512-bit pmaddwd and adds 103.3-
 * 107.2, with vpdpwssd 89.6-92.9. The shuffles and inserts share one port; the
 * multiply-adds are what there was to cut. The vpermb epilogue: hrow2 / decode_mcu perf
 * samples 0.166-0.171 -> 0.157-0.159 (`batchfs --bench`, 3 runs each, alternated).
 */
#define T512 "avx2,avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi"

static inline __attribute__((always_inline, target(T512))) __m512i
avx512_pair2(const uint8_t *r0, const uint8_t *r1, int32_t oa, int32_t ob, const avx_table_entry *e,
             int chunks)
{
    const __m512i sh01 = _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1));
    const __m512i sh23 = _mm512_broadcast_i32x4(
        _mm_setr_epi8(6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1));
    __m512i h = _mm512_setzero_si512(), l = _mm512_set1_epi32(ROUND_HALF);
    for (int c = 0; c < chunks; c += 2, oa += 12, ob += 12, e += 2) {
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const void *)(r0 + oa)));
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const void *)(r0 + ob)), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const void *)(r1 + oa)), 2);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const void *)(r1 + ob)), 3);
        __m512i x = _mm512_shuffle_epi8(v, sh01);
        h = _mm512_dpwssd_epi32(h, x,
                                _mm512_broadcast_i64x4(_mm256_load_si256((const void *)e->hi)));
        l = _mm512_dpwssd_epi32(l, x,
                                _mm512_broadcast_i64x4(_mm256_load_si256((const void *)e->lo)));
        if (c + 1 < chunks) {
            x = _mm512_shuffle_epi8(v, sh23);
            h = _mm512_dpwssd_epi32(
                h, x, _mm512_broadcast_i64x4(_mm256_load_si256((const void *)e[1].hi)));
            l = _mm512_dpwssd_epi32(
                l, x, _mm512_broadcast_i64x4(_mm256_load_si256((const void *)e[1].lo)));
        }
    }
    return _mm512_srai_epi32(_mm512_add_epi32(_mm512_slli_epi32(h, AVX_HALF_BITS), l),
                             PRECISION_BITS);
}

/* Outputs x .. x+7 of both rows. The four sums hold, per 128-bit lane, one output's
 * [r g b 0] in int32: lanes row 0 A, row 0 B, row 1 A, row 1 B for the pairs AB, CD, EF,
 * GH. Packed (saturating: clip8) they are bytes, lane by lane [A C E G] [B D F H] and
 * the same of row 1; one vpermb puts row 0's 24 bytes first and row 1's at 32, and each
 * row is stored by a 24-byte masked store (AVX2's epilogue took 9 instructions a row). */
static inline __attribute__((always_inline, target(T512))) void
avx512_group2(const uint8_t *r0, const uint8_t *r1, uint8_t *o0, uint8_t *o1, const hpass *h, int x,
              int chunks)
{
    static const uint8_t order[64] = {
        0,  1,  2,  16, 17, 18, 4,  5,  6,  20, 21, 22, 8,  9,  10, 24, 25, 26, 12, 13, 14, 28,
        29, 30, 0,  0,  0,  0,  0,  0,  0,  0,  32, 33, 34, 48, 49, 50, 36, 37, 38, 52, 53, 54,
        40, 41, 42, 56, 57, 58, 44, 45, 46, 60, 61, 62, 0,  0,  0,  0,  0,  0,  0,  0};
    const int32_t *boff = h->boff + x;
    const avx_table_entry *e = h->tab + (size_t)(x / 2) * chunks;
    __m512i ab = avx512_pair2(r0, r1, boff[0], boff[1], e, chunks);
    __m512i cd = avx512_pair2(r0, r1, boff[2], boff[3], e + chunks, chunks);
    __m512i ef = avx512_pair2(r0, r1, boff[4], boff[5], e + 2 * chunks, chunks);
    __m512i gh = avx512_pair2(r0, r1, boff[6], boff[7], e + 3 * chunks, chunks);
    __m512i u = _mm512_packus_epi16(_mm512_packs_epi32(ab, cd), _mm512_packs_epi32(ef, gh));
    u = _mm512_permutexvar_epi8(_mm512_loadu_si512((const void *)order), u);
    _mm256_mask_storeu_epi8(o0 + 3 * (size_t)x, 0xffffff, _mm512_castsi512_si256(u));
    _mm256_mask_storeu_epi8(o1 + 3 * (size_t)x, 0xffffff, _mm512_extracti64x4_epi64(u, 1));
}

static inline __attribute__((always_inline, target(T512))) void
hrow2_avx512_chunks(const uint8_t *in0, const uint8_t *in1, uint8_t *out0, uint8_t *out1,
                    const hpass *h, int chunks)
{
    int g = 0;
    for (; g < h->safe_groups; g++)
        avx512_group2(in0, in1, out0, out1, h, 8 * g, chunks);
    if (g < h->groups) {
        memcpy(h->tail, in0 + h->tail_from, h->tail_len);
        memcpy(h->tail2, in1 + h->tail_from, h->tail_len);
        for (; g < h->groups; g++)
            avx512_group2(h->tail, h->tail2, out0, out1, h, 8 * g, chunks);
    }
}

__attribute__((target(T512))) static void hrow2_avx512(const uint8_t *in0, const uint8_t *in1,
                                                       uint8_t *out0, uint8_t *out1, const hpass *h)
{
    switch (h->chunks) {
    case 1:
        hrow2_avx512_chunks(in0, in1, out0, out1, h, 1);
        break;
    case 2:
        hrow2_avx512_chunks(in0, in1, out0, out1, h, 2);
        break;
    default:
        hrow2_avx512_chunks(in0, in1, out0, out1, h, h->chunks);
        break;
    }
}

/* vrow_avx2's steps, 64 outputs at once; the last < 64 outputs go to vrow_avx2. The
 * unpacks and packs work within 128-bit lanes, as in AVX2, so the lanes' order is
 * restored the same way. */
__attribute__((target(T512))) static void vrow_avx512(const uint8_t *in, size_t stride, int count,
                                                      const int32_t *k, uint8_t *out, int nbytes)
{
    if (count > 2 * VPAIRS_MAX + 1 || nbytes < 64) {
        vrow_avx2(in, stride, count, k, out, nbytes);
        return;
    }
    const __m512i zero = _mm512_setzero_si512();
    int32_t kh[VPAIRS_MAX], kl[VPAIRS_MAX];
    int npairs = count / 2;
    for (int p = 0; p < npairs; p++)
        vpair_halves(k[2 * p], k[2 * p + 1], &kh[p], &kl[p]);
    __m512i klast = _mm512_set1_epi32(count & 1 ? k[count - 1] : 0);
    const uint8_t *last = in + (size_t)(count - 1) * stride;
    int i = 0;
    for (; i + 64 <= nbytes; i += 64) {
        __m512i h0 = zero, h1 = zero, h2 = zero, h3 = zero;
        __m512i l0 = _mm512_set1_epi32(ROUND_HALF), l1 = l0, l2 = l0, l3 = l0;
        const uint8_t *row = in + i;
        for (int p = 0; p < npairs; p++, row += 2 * stride) {
            __m512i a = _mm512_loadu_si512((const void *)row);
            __m512i b = _mm512_loadu_si512((const void *)(row + stride));
            __m512i ablo = _mm512_unpacklo_epi8(a, b), abhi = _mm512_unpackhi_epi8(a, b);
            __m512i x0 = _mm512_unpacklo_epi8(ablo, zero), x1 = _mm512_unpackhi_epi8(ablo, zero);
            __m512i x2 = _mm512_unpacklo_epi8(abhi, zero), x3 = _mm512_unpackhi_epi8(abhi, zero);
            __m512i khp = _mm512_set1_epi32(kh[p]), klp = _mm512_set1_epi32(kl[p]);
            h0 = _mm512_dpwssd_epi32(h0, x0, khp);
            h1 = _mm512_dpwssd_epi32(h1, x1, khp);
            h2 = _mm512_dpwssd_epi32(h2, x2, khp);
            h3 = _mm512_dpwssd_epi32(h3, x3, khp);
            l0 = _mm512_dpwssd_epi32(l0, x0, klp);
            l1 = _mm512_dpwssd_epi32(l1, x1, klp);
            l2 = _mm512_dpwssd_epi32(l2, x2, klp);
            l3 = _mm512_dpwssd_epi32(l3, x3, klp);
        }
        if (count & 1) {
            __m512i a = _mm512_loadu_si512((const void *)(last + i));
            __m512i alo = _mm512_unpacklo_epi8(a, zero), ahi = _mm512_unpackhi_epi8(a, zero);
            l0 = _mm512_add_epi32(l0, _mm512_mullo_epi32(_mm512_unpacklo_epi16(alo, zero), klast));
            l1 = _mm512_add_epi32(l1, _mm512_mullo_epi32(_mm512_unpackhi_epi16(alo, zero), klast));
            l2 = _mm512_add_epi32(l2, _mm512_mullo_epi32(_mm512_unpacklo_epi16(ahi, zero), klast));
            l3 = _mm512_add_epi32(l3, _mm512_mullo_epi32(_mm512_unpackhi_epi16(ahi, zero), klast));
        }
#define VCOMBINE(hv, lv)                                                                           \
    _mm512_srai_epi32(_mm512_add_epi32(_mm512_slli_epi32(hv, AVX_HALF_BITS), lv), PRECISION_BITS)
        __m512i p01 = _mm512_packs_epi32(VCOMBINE(h0, l0), VCOMBINE(h1, l1));
        __m512i p23 = _mm512_packs_epi32(VCOMBINE(h2, l2), VCOMBINE(h3, l3));
#undef VCOMBINE
        _mm512_storeu_si512((void *)(out + i), _mm512_packus_epi16(p01, p23));
    }
    if (i < nbytes)
        vrow_avx2(in + i, stride, count, k, out + i, nbytes - i);
}
#undef T512
#endif

const resize_kernels resize_kernels_portable = {hrow_portable, hrow2_portable, vrow_portable};
#if RESIZE_HAVE_AVX2
const resize_kernels resize_kernels_avx2 = {hrow_avx2, hrow2_avx2, vrow_avx2};
const resize_kernels resize_kernels_avx512 = {hrow_avx2, hrow2_avx512, vrow_avx512};
#endif
