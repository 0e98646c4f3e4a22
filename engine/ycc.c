/* ycc.c — YCbCr to RGB with AVX-512 (see ycc.h). */
#include "engine/ycc.h"

#include <jpegint.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define YCC_TARGET __attribute__((target("avx512f,avx512bw,avx512vbmi")))

/*
 * The C code's terms, with x = sample - 128 (-128..127), and mulhrs(x, k) = vpmulhrsw's
 * ((x k >> 14) + 1) >> 1:
 *   R: (91881 x + 32768) >> 16  = x + mulhrs(x, 13175)
 *   B: (116130 x + 32768) >> 16 = 2x + mulhrs(x, -7471)
 *   G: (-22554 x_cb - 46802 x_cr + 32768) >> 16
 *                               = -x_cr - 4683 + ((-22554 x_cb + 18734 (x_cr + 16384)) >> 16)
 * R and B: equal for each of the 256 x (found and checked by search: no rounding argument
 * holds them, the test does). G: exact, -46802 = -65536 + 18734 and 18734 * 16384 = 4683 *
 * 2^16 + 32768, so whole multiples of 2^16 move out of the shift and the 1/2 into the
 * product; vpmaddwd makes the bracket from 16-bit pairs (x_cb, x_cr + 16384), and its high
 * 16 bits are the shift.
 */
#define K_R 13175
#define K_B (-7471)
#define K_G ((int)((uint16_t)-22554 | (uint32_t)18734 << 16))

/* The output bytes' sources: for output vector k (bytes 64k..64k+63 of 64 pixels' RGB), byte
 * b is channel (64k + b) % 3 of pixel (64k + b) / 3. two[k]: R's byte (index) or G's (64 +
 * index), B's anything; b_idx[k]: B's index; b_mask[k]: the bytes that are B's. hi_words:
 * the high 16 bits of each 32-bit lane of two vectors (vpmaddwd's of the unpacked low and
 * high words), in the words' order before the unpack. */
static uint8_t two[3][64], b_idx[3][64];
static uint64_t b_mask[3];
static uint16_t hi_words[32];

static void make_tables(void)
{
    for (int k = 0; k < 3; k++) {
        b_mask[k] = 0;
        for (int b = 0; b < 64; b++) {
            int g = 64 * k + b, p = g / 3, ch = g % 3;
            two[k][b] = (uint8_t)(p + (ch == 1 ? 64 : 0));
            b_idx[k][b] = (uint8_t)p;
            if (ch == 2)
                b_mask[k] |= 1ull << b;
        }
    }
    /* word j of a 128-bit lane L: j < 4 from the first vector's lane (unpacklo), j >= 4
     * from the second's (unpackhi, + 32), each the high word of 32-bit lane 4L + j % 4 */
    for (int w = 0; w < 32; w++) {
        int lane = w / 8, j = w % 8;
        hi_words[w] = (uint16_t)((j >= 4 ? 32 : 0) + 2 * (4 * lane + j % 4) + 1);
    }
}

/* 32 pixels' channels as 16-bit words (any order, the same in each) to R, G, B (16-bit,
 * before clamping) */
YCC_TARGET static inline void half(__m512i y, __m512i cb, __m512i cr, __m512i hw, __m512i *r,
                                   __m512i *g, __m512i *b)
{
    const __m512i c128 = _mm512_set1_epi16(128), c16256 = _mm512_set1_epi16(16384 - 128),
                  c4683 = _mm512_set1_epi16(4683), kg = _mm512_set1_epi32(K_G);
    __m512i xcb = _mm512_sub_epi16(cb, c128), xcr = _mm512_sub_epi16(cr, c128);
    __m512i crb = _mm512_add_epi16(cr, c16256); /* x_cr + 16384 */
    *r = _mm512_add_epi16(_mm512_add_epi16(y, xcr),
                          _mm512_mulhrs_epi16(xcr, _mm512_set1_epi16(K_R)));
    *b = _mm512_add_epi16(_mm512_add_epi16(y, _mm512_add_epi16(xcb, xcb)),
                          _mm512_mulhrs_epi16(xcb, _mm512_set1_epi16(K_B)));
    __m512i m0 = _mm512_madd_epi16(_mm512_unpacklo_epi16(xcb, crb), kg);
    __m512i m1 = _mm512_madd_epi16(_mm512_unpackhi_epi16(xcb, crb), kg);
    *g = _mm512_add_epi16(_mm512_sub_epi16(_mm512_sub_epi16(y, c4683), xcr),
                          _mm512_permutex2var_epi16(m0, hw, m1));
}

/* n (1..64) pixels from y, cb, cr to 3n bytes at out */
YCC_TARGET static inline __attribute__((always_inline)) void
convert64(const uint8_t *yp, const uint8_t *cbp, const uint8_t *crp, uint8_t *out, int n,
          const __m512i *perm, __m512i hw)
{
    __mmask64 in = n == 64 ? ~0ull : (1ull << n) - 1;
    __m512i y8 = _mm512_maskz_loadu_epi8(in, yp), cb8 = _mm512_maskz_loadu_epi8(in, cbp),
            cr8 = _mm512_maskz_loadu_epi8(in, crp), z = _mm512_setzero_si512();
    /* bytes to words within each 128-bit lane: packus puts them back in order */
    __m512i r0, g0, b0, r1, g1, b1;
    half(_mm512_unpacklo_epi8(y8, z), _mm512_unpacklo_epi8(cb8, z), _mm512_unpacklo_epi8(cr8, z),
         hw, &r0, &g0, &b0);
    half(_mm512_unpackhi_epi8(y8, z), _mm512_unpackhi_epi8(cb8, z), _mm512_unpackhi_epi8(cr8, z),
         hw, &r1, &g1, &b1);
    /* clamped to 0..255 as the C code's range_limit does */
    __m512i r = _mm512_packus_epi16(r0, r1), g = _mm512_packus_epi16(g0, g1),
            b = _mm512_packus_epi16(b0, b1);
    int left = 3 * n; /* (a full mask where n is 64: no slower than a plain store) */
    for (int k = 0; k < 3 && left > 0; k++, left -= 64) {
        __m512i v = _mm512_permutex2var_epi8(r, perm[2 * k], g);
        v = _mm512_mask_permutexvar_epi8(v, b_mask[k], perm[2 * k + 1], b);
        __mmask64 m = left >= 64 ? ~0ull : (1ull << left) - 1;
        _mm512_mask_storeu_epi8(out + 64 * k, m, v);
    }
}

YCC_TARGET static void ycc_rgb_avx512(j_decompress_ptr c, JSAMPIMAGE input_buf,
                                      JDIMENSION input_row, JSAMPARRAY output_buf, int num_rows)
{
    int n = (int)c->output_width;
    __m512i perm[6];
    for (int k = 0; k < 3; k++) {
        perm[2 * k] = _mm512_loadu_si512(two[k]);
        perm[2 * k + 1] = _mm512_loadu_si512(b_idx[k]);
    }
    __m512i hw = _mm512_loadu_si512(hi_words);
    while (--num_rows >= 0) {
        const uint8_t *yp = input_buf[0][input_row], *cbp = input_buf[1][input_row],
                      *crp = input_buf[2][input_row];
        input_row++;
        uint8_t *out = *output_buf++;
        int x = 0;
        for (; x + 64 <= n; x += 64)
            convert64(yp + x, cbp + x, crp + x, out + 3 * x, 64, perm, hw);
        if (x < n)
            convert64(yp + x, cbp + x, crp + x, out + 3 * x, n - x, perm, hw);
    }
}

static int cpu_ok(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vbmi");
}
#endif

#if defined(__x86_64__) && defined(__GNUC__)
static int avail;
static pthread_once_t avail_once = PTHREAD_ONCE_INIT;

static void avail_init(void)
{
    const char *v = getenv("BATCHFS_YCC");
    if (v && strcmp(v, "libjpeg") != 0 && strcmp(v, "auto") != 0)
        fprintf(stderr, "batchfs: BATCHFS_YCC=%s is not auto or libjpeg: ignored\n", v);
    avail = !(v && strcmp(v, "libjpeg") == 0) && cpu_ok();
    if (avail)
        make_tables();
}
#endif

int bfs_ycc_available(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    /* read once (decoders are made on several threads at once) */
    pthread_once(&avail_once, avail_init);
    return avail;
#else
    return 0;
#endif
}

int bfs_ycc_install(struct jpeg_decompress_struct *c)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (!c->cconvert || c->jpeg_color_space != JCS_YCbCr || c->out_color_space != JCS_RGB ||
        c->num_components != 3 || c->out_color_components != 3 || c->quantize_colors ||
        BITS_IN_JSAMPLE != 8 || !bfs_ycc_available())
        return 0;
    c->cconvert->color_convert = ycc_rgb_avx512;
    return 1;
#else
    (void)c;
    return 0;
#endif
}
