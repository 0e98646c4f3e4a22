/*
 * imgops.c — torchvision's per-sample image ops on packed RGB (see imgops.h).
 *
 * Each op follows torchvision.transforms.v2.functional's tensor kernel step by step in
 * float32: a uint8 tensor times a Python float is (float)v * (float)f; Tensor.add_(x,
 * alpha=a) is ATen's vector fmadd(x, a, self), so fmaf here; .to(torch.uint8) truncates;
 * round_() is half-to-even (rintf). C11 (-std=c11) does not contract float expressions,
 * so every other step rounds where torch's does.
 */
#include "engine/imgops.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

static const char *const op_names[BFS_OP_COUNT] = {
    [BFS_OP_IDENTITY] = "Identity",
    [BFS_OP_SHEAR_X] = "ShearX",
    [BFS_OP_SHEAR_Y] = "ShearY",
    [BFS_OP_TRANSLATE_X] = "TranslateX",
    [BFS_OP_TRANSLATE_Y] = "TranslateY",
    [BFS_OP_ROTATE] = "Rotate",
    [BFS_OP_BRIGHTNESS] = "Brightness",
    [BFS_OP_COLOR] = "Color",
    [BFS_OP_CONTRAST] = "Contrast",
    [BFS_OP_SHARPNESS] = "Sharpness",
    [BFS_OP_POSTERIZE] = "Posterize",
    [BFS_OP_SOLARIZE] = "Solarize",
    [BFS_OP_AUTOCONTRAST] = "AutoContrast",
    [BFS_OP_EQUALIZE] = "Equalize",
    [BFS_OP_INVERT] = "Invert",
    [BFS_OP_HUE] = "Hue",
    [BFS_OP_GRAYSCALE] = "Grayscale",
};

const char *bfs_imgop_name(int op)
{
    return op >= 0 && op < BFS_OP_COUNT ? op_names[op] : NULL;
}

int bfs_imgop_lookup(const char *name)
{
    for (int i = 0; i < BFS_OP_COUNT; i++)
        if (!strcmp(op_names[i], name))
            return i;
    return -1;
}

float bfs_imgop_linspace(double start, double end, int steps, int i)
{
    float s = (float)start, e = (float)end;
    float step = (e - s) / (float)(steps - 1);
    /* torch's build contracts start + step * idx into one fused multiply-add */
    return i < steps / 2 ? fmaf(step, (float)i, s) : fmaf(-step, (float)(steps - 1 - i), e);
}

/* The float loops, cloned for CPUs with FMA (fmaf then one instruction instead of a call
 * into libm); both clones compute the same bits, fmaf being exact either way. Not under
 * ThreadSanitizer: the clones' ifunc resolvers run before its runtime is up and crash
 * every program at load. */
#ifdef __SANITIZE_THREAD__
#define FLOAT_LOOP
#else
#define FLOAT_LOOP __attribute__((target_clones("fma", "default")))
#endif

#if defined(__x86_64__)
#include <immintrin.h>

static _Atomic int have = -1; /* have_avx2_fma's answer; every thread computes the same */

void bfs_imgop_set_portable(int portable)
{
    atomic_store_explicit(&have, portable ? 0 : -1, memory_order_relaxed);
}

static int have_avx2_fma(void)
{
    int h = atomic_load_explicit(&have, memory_order_relaxed);
    if (h < 0) {
        h = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        atomic_store_explicit(&have, h, memory_order_relaxed);
    }
    return h;
}
#else
void bfs_imgop_set_portable(int portable)
{
    (void)portable;
}
#endif

#define PX(im, x, y) ((im)->rgb + (size_t)(y) * (im)->stride + 3 * (size_t)(x))

/* A float in [0, 255] (after clamping) to u8 as .to(torch.uint8) does: truncation. */
static inline uint8_t to_u8(float v)
{
    v = v < 0.f ? 0.f : v > 255.f ? 255.f : v;
    return (uint8_t)v;
}

/* every value v of the image becomes lut[v] */
static void apply_lut(bfs_img *im, const uint8_t lut[256])
{
    for (int y = 0; y < im->h; y++) {
        uint8_t *p = PX(im, 0, y);
        for (int x = 0; x < 3 * im->w; x++)
            p[x] = lut[p[x]];
    }
}

/* every value v of channel c becomes lut[c][v] */
static void apply_lut3(bfs_img *im, const uint8_t lut[3][256])
{
    for (int y = 0; y < im->h; y++) {
        uint8_t *p = PX(im, 0, y);
        for (int x = 0; x < im->w; x++, p += 3)
            p[0] = lut[0][p[0]], p[1] = lut[1][p[1]], p[2] = lut[2][p[2]];
    }
}

/* r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114) */
static inline float luma(const uint8_t *p)
{
    return fmaf((float)p[2], 0.114f, fmaf((float)p[1], 0.587f, (float)p[0] * 0.2989f));
}

/* _blend(image1, image2, ratio) for one value: image1.mul(r).add_(image2, alpha=1-r) */
static inline uint8_t blend(uint8_t v, float other, float r, float one_minus_r)
{
    return to_u8(fmaf(other, one_minus_r, (float)v * r));
}

/* adjust_brightness: a function of each value alone, so a table of its 256 results */
static void brightness(bfs_img *im, double f)
{
    float ff = (float)f;
    uint8_t lut[256];
    for (int v = 0; v < 256; v++)
        lut[v] = to_u8((float)v * ff);
    apply_lut(im, lut);
}

/* adjust_saturation: blend with the floored grayscale, pixel by pixel */
FLOAT_LOOP static void saturation(bfs_img *im, double f)
{
    float r = (float)f, omr = (float)(1.0 - f);
    for (int y = 0; y < im->h; y++) {
        uint8_t *p = PX(im, 0, y);
        for (int x = 0; x < im->w; x++, p += 3) {
            float g = floorf(luma(p));
            p[0] = blend(p[0], g, r, omr);
            p[1] = blend(p[1], g, r, omr);
            p[2] = blend(p[2], g, r, omr);
        }
    }
}

/* adjust_contrast: blend with the mean of the floored grayscale. The floored values are
 * integers, so their float32 sum is exact (whatever torch's summation order) while it
 * stays below 2^24: images up to 256 x 256 always, larger ones unless very bright. */
FLOAT_LOOP static void contrast(bfs_img *im, double f)
{
    double sum = 0;
    for (int y = 0; y < im->h; y++) {
        const uint8_t *p = PX(im, 0, y);
        for (int x = 0; x < im->w; x++, p += 3)
            sum += floorf(luma(p));
    }
    float mean = (float)sum / (float)((double)im->w * im->h);
    float r = (float)f, omr = (float)(1.0 - f);
    uint8_t lut[256];
    for (int v = 0; v < 256; v++)
        lut[v] = blend((uint8_t)v, mean, r, omr);
    apply_lut(im, lut);
}

FLOAT_LOOP static void grayscale(bfs_img *im)
{
    for (int y = 0; y < im->h; y++) {
        uint8_t *p = PX(im, 0, y);
        for (int x = 0; x < im->w; x++, p += 3)
            p[0] = p[1] = p[2] = to_u8(luma(p));
    }
}

/* Values x0..x1-1 of a row of adjust_sharpness: the 3x3 blur summed in row order, each
 * product rounded before its sum (torch's convolution, here), rounded half to even, then
 * blended with the value as view.add_(blur - view, alpha=1-f), clamped and truncated. */
FLOAT_LOOP static void sharp_row(const uint8_t *up, const uint8_t *mid, const uint8_t *dn,
                                 uint8_t *o, int x0, int x1, float omr)
{
    const float a = 1.0f / 13.0f, b = 5.0f / 13.0f;
    for (int x = x0; x < x1; x++) {
        float s = (float)up[x - 3] * a;
        s += (float)up[x] * a;
        s += (float)up[x + 3] * a;
        s += (float)mid[x - 3] * a;
        s += (float)mid[x] * b;
        s += (float)mid[x + 3] * a;
        s += (float)dn[x - 3] * a;
        s += (float)dn[x] * a;
        s += (float)dn[x + 3] * a;
        float v = (float)mid[x];
        o[x] = to_u8(fmaf(rintf(s) - v, omr, v));
    }
}

#if defined(__x86_64__)
/* eight values of p as floats */
__attribute__((target("avx2,fma"))) static inline __m256 load8(const uint8_t *p)
{
    return _mm256_cvtepi32_ps(
        _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p)));
}

/* sharp_row eight values at a time: the same operations in the same order */
__attribute__((target("avx2,fma"))) static void sharp_row_avx2(const uint8_t *up,
                                                               const uint8_t *mid,
                                                               const uint8_t *dn, uint8_t *o,
                                                               int x0, int x1, float omr)
{
    const __m256 a = _mm256_set1_ps(1.0f / 13.0f), b = _mm256_set1_ps(5.0f / 13.0f);
    const __m256 om = _mm256_set1_ps(omr), lo = _mm256_setzero_ps(), hi = _mm256_set1_ps(255.f);
    int x = x0;
    for (; x + 8 <= x1; x += 8) {
        __m256 s = _mm256_mul_ps(load8(up + x - 3), a);
        s = _mm256_add_ps(s, _mm256_mul_ps(load8(up + x), a));
        s = _mm256_add_ps(s, _mm256_mul_ps(load8(up + x + 3), a));
        s = _mm256_add_ps(s, _mm256_mul_ps(load8(mid + x - 3), a));
        __m256 v = load8(mid + x);
        s = _mm256_add_ps(s, _mm256_mul_ps(v, b));
        s = _mm256_add_ps(s, _mm256_mul_ps(load8(mid + x + 3), a));
        s = _mm256_add_ps(s, _mm256_mul_ps(load8(dn + x - 3), a));
        s = _mm256_add_ps(s, _mm256_mul_ps(load8(dn + x), a));
        s = _mm256_add_ps(s, _mm256_mul_ps(load8(dn + x + 3), a));
        s = _mm256_round_ps(s, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256 r = _mm256_fmadd_ps(_mm256_sub_ps(s, v), om, v);
        r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);
        __m256i i32 = _mm256_cvttps_epi32(r); /* truncation, as (uint8_t) of a float */
        __m128i i16 =
            _mm_packus_epi32(_mm256_castsi256_si128(i32), _mm256_extracti128_si256(i32, 1));
        _mm_storel_epi64((__m128i *)(void *)(o + x), _mm_packus_epi16(i16, i16));
    }
    if (x < x1)
        sharp_row(up, mid, dn, o, x, x1, omr);
}
#endif

/* adjust_sharpness: interior pixels blend with the rounded 3x3 blur [1 1 1; 1 5 1; 1 1 1]
 * / 13; the border keeps its values. tmp holds the original. */
static void sharpness(bfs_img *im, double f, uint8_t *tmp)
{
    int w = im->w, h = im->h;
    if (w <= 2 || h <= 2)
        return;
    size_t row = (size_t)w * 3;
    for (int y = 0; y < h; y++)
        memcpy(tmp + (size_t)y * row, PX(im, 0, y), row);
    float omr = (float)(1.0 - f);
    for (int y = 1; y < h - 1; y++) {
        const uint8_t *up = tmp + (size_t)(y - 1) * row, *mid = up + row, *dn = mid + row;
        uint8_t *o = PX(im, 0, y);
#if defined(__x86_64__)
        if (have_avx2_fma()) {
            sharp_row_avx2(up, mid, dn, o, 3, 3 * (w - 1), omr);
            continue;
        }
#endif
        sharp_row(up, mid, dn, o, 3, 3 * (w - 1), omr);
    }
}

static void posterize(bfs_img *im, int bits)
{
    if (bits >= 8)
        return;
    uint8_t mask = (uint8_t)(((1u << bits) - 1) << (8 - bits)), lut[256];
    for (int v = 0; v < 256; v++)
        lut[v] = (uint8_t)(v & mask);
    apply_lut(im, lut);
}

/* torch.where(image >= threshold, 255 - image, image), compared in float32 */
static void solarize(bfs_img *im, double threshold)
{
    float t = (float)threshold;
    uint8_t lut[256];
    for (int v = 0; v < 256; v++)
        lut[v] = (uint8_t)((float)v >= t ? 255 - v : v);
    apply_lut(im, lut);
}

static void invert(bfs_img *im)
{
    uint8_t lut[256];
    for (int v = 0; v < 256; v++)
        lut[v] = (uint8_t)(255 - v);
    apply_lut(im, lut);
}

/* autocontrast: each channel stretched from its [min, max] to [0, 255] */
static void autocontrast(bfs_img *im)
{
    uint8_t lo[3] = {255, 255, 255}, hi[3] = {0, 0, 0};
    for (int y = 0; y < im->h; y++) {
        const uint8_t *p = PX(im, 0, y);
        for (int x = 0; x < im->w; x++, p += 3)
            for (int c = 0; c < 3; c++) {
                lo[c] = p[c] < lo[c] ? p[c] : lo[c];
                hi[c] = p[c] > hi[c] ? p[c] : hi[c];
            }
    }
    float mn[3], inv[3];
    for (int c = 0; c < 3; c++) {
        mn[c] = lo[c] == hi[c] ? 0.f : (float)lo[c];
        inv[c] = lo[c] == hi[c] ? 1.f : ((float)hi[c] - (float)lo[c]) * (float)(1.0 / 255.0);
    }
    uint8_t lut[3][256];
    for (int c = 0; c < 3; c++)
        for (int v = 0; v < 256; v++)
            lut[c][v] = to_u8(((float)v - mn[c]) / inv[c]);
    apply_lut3(im, lut);
}

/* equalize: PIL's lookup table per channel, as torchvision's equalize_image builds it */
static void equalize(bfs_img *im)
{
    uint32_t hist[3][256] = {{0}};
    for (int y = 0; y < im->h; y++) {
        const uint8_t *p = PX(im, 0, y);
        for (int x = 0; x < im->w; x++, p += 3)
            hist[0][p[0]]++, hist[1][p[1]]++, hist[2][p[2]]++;
    }
    uint8_t lut[3][256];
    int active[3];
    uint64_t n = (uint64_t)im->w * (uint64_t)im->h;
    for (int c = 0; c < 3; c++) {
        int last = 0; /* the last non-empty bin */
        for (int v = 0; v < 256; v++)
            if (hist[c][v])
                last = v;
        uint64_t step = (n - hist[c][last]) / 255;
        active[c] = step != 0;
        uint64_t cum = 0;
        lut[c][0] = 0;
        for (int v = 1; v < 256 && step; v++) {
            cum += hist[c][v - 1];
            uint64_t q = (cum + step / 2) / step;
            lut[c][v] = (uint8_t)(q > 255 ? 255 : q);
        }
    }
    for (int c = 0; c < 3; c++)
        if (!active[c])
            for (int v = 0; v < 256; v++)
                lut[c][v] = (uint8_t)v;
    apply_lut3(im, lut);
}

/* ---- hue: _rgb_to_hsv, shift, _hsv_to_rgb, all in float32 -------------------------- */

FLOAT_LOOP static void hue(bfs_img *im, double shift)
{
    const float k = (float)(1.0 / 255.0), sixth = (float)(1.0 / 6.0), hf = (float)shift;
    const float out_scale = (float)(255.0 + 1.0 - 1e-3); /* to_dtype_image(scale=True) */
    for (int y = 0; y < im->h; y++) {
        uint8_t *p = PX(im, 0, y);
        for (int x = 0; x < im->w; x++, p += 3) {
            float r = (float)p[0] * k, g = (float)p[1] * k, b = (float)p[2] * k;
            float maxc = fmaxf(r, fmaxf(g, b)), minc = fminf(r, fminf(g, b));
            int eqc = maxc == minc;
            float range = maxc - minc;
            float s = range / (eqc ? 1.f : maxc);
            float div = eqc ? 1.f : range;
            float rc = (maxc - r) / div, gc = (maxc - g) / div, bc = (maxc - b) / div;
            int neq_r = maxc != r, eq_g = maxc == g;
            float hg = ((rc + 2.0f) - bc) * (float)(eq_g && neq_r);
            float hr = (bc - gc) * (float)!neq_r;
            float hb = ((gc + 4.0f) - rc) * (float)(neq_r && !eq_g);
            float h = (hr + hg) + hb;
            h = fmodf(h * sixth + 1.0f, 1.0f);
            h = h + hf; /* remainder_(1.0): Python's modulo */
            float m = fmodf(h, 1.0f);
            h = m != 0.f && m < 0.f ? m + 1.0f : m;
            /* _hsv_to_rgb */
            float h6 = h * 6.0f, fi = floorf(h6), f = h6 - fi;
            int i = (int)fi;
            float v = maxc, sxf = s * f, oms = 1.0f - s;
            float q = fminf(fmaxf((1.0f - sxf) * v, 0.f), 1.f);
            float t = fminf(fmaxf((sxf + oms) * v, 0.f), 1.f);
            float pp = fminf(fmaxf(oms * v, 0.f), 1.f);
            i %= 6;
            i += i < 0 ? 6 : 0;
            float rgb[3];
            switch (i) {
            case 0:
                rgb[0] = v, rgb[1] = t, rgb[2] = pp;
                break;
            case 1:
                rgb[0] = q, rgb[1] = v, rgb[2] = pp;
                break;
            case 2:
                rgb[0] = pp, rgb[1] = v, rgb[2] = t;
                break;
            case 3:
                rgb[0] = pp, rgb[1] = q, rgb[2] = v;
                break;
            case 4:
                rgb[0] = t, rgb[1] = pp, rgb[2] = v;
                break;
            default:
                rgb[0] = v, rgb[1] = pp, rgb[2] = q;
                break;
            }
            for (int c = 0; c < 3; c++)
                p[c] = to_u8(rgb[c] * out_scale);
        }
    }
}

/* ---- geometry: F.affine / F.rotate with nearest sampling, fill 0 ------------------- */

/* Python's math.radians and math.degrees */
static double radians(double d)
{
    return d * (M_PI / 180.0);
}

static double degrees(double r)
{
    return r * (180.0 / M_PI);
}

/* torchvision's _get_inverse_affine_matrix with scale 1, in double as Python computes */
static void inverse_affine(double cx, double cy, double angle, double tx, double ty, double shear_x,
                           double shear_y, double m[6])
{
    double rot = radians(angle), sx = radians(shear_x), sy = radians(shear_y);
    double cos_sy = cos(sy), tan_sx = tan(sx), rot_minus_sy = rot - sy;
    double cxt = cx + tx, cyt = cy + ty;
    double a = cos(rot_minus_sy) / cos_sy;
    double b = -(a * tan_sx + sin(rot));
    double c = sin(rot_minus_sy) / cos_sy;
    double d = cos(rot) - c * tan_sx;
    m[0] = d / 1.0, m[1] = -b / 1.0, m[2] = 0.0;
    m[3] = -c / 1.0, m[4] = a / 1.0, m[5] = 0.0;
    m[2] += (cx - m[0] * cxt) - m[1] * cyt;
    m[5] += (cy - m[3] * cxt) - m[4] * cyt;
}

/* The sampling grid of a warp: the float32 constants of torch's grid and grid_sample. */
typedef struct grid {
    float r00, r10, r20, r01, r11, r21; /* theta^T / (size / 2) */
    float hw, hh;                       /* width / 2, height / 2 */
    float x0;                           /* linspace's first x: (1 - w) / 2 */
    int w, h;
} grid;

#define GRID_CHUNK 256 /* output pixels whose sources are found at once */

/* The source pixel (y * w + x) of outputs ox..ox+n-1 of the row at gy0, -1 outside. The
 * grid point is (x * R00 fused+ y * R10) + R20 (as torch's bmm rounds it here), its
 * source position (g + 1) * (size / 2) - 0.5, rounded half to even. */
static void grid_row(const grid *g, float gy0, int ox, int n, int32_t *src)
{
    for (int i = 0; i < n; i++) {
        float gx0 = (float)(ox + i) + g->x0;
        float gx = fmaf(gy0, g->r10, gx0 * g->r00) + g->r20;
        float gy = fmaf(gy0, g->r11, gx0 * g->r01) + g->r21;
        float ix = rintf((gx + 1.0f) * g->hw - 0.5f), iy = rintf((gy + 1.0f) * g->hh - 0.5f);
        src[i] = ix >= 0.f && ix < (float)g->w && iy >= 0.f && iy < (float)g->h
                     ? (int32_t)iy * g->w + (int32_t)ix
                     : -1;
    }
}

#if defined(__x86_64__)
/* grid_row eight outputs at a time, the same operations in the same order (vfmadd is the
 * fused multiply-add fmaf is; the rounding is the current mode's, nearest-even, as rintf) */
__attribute__((target("avx2,fma"))) static void grid_row_avx2(const grid *g, float gy0, int ox,
                                                              int n, int32_t *src)
{
    const __m256 lane = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7), y = _mm256_set1_ps(gy0);
    const __m256 r00 = _mm256_set1_ps(g->r00), r10 = _mm256_set1_ps(g->r10);
    const __m256 r20 = _mm256_set1_ps(g->r20), r01 = _mm256_set1_ps(g->r01);
    const __m256 r11 = _mm256_set1_ps(g->r11), r21 = _mm256_set1_ps(g->r21);
    const __m256 hw = _mm256_set1_ps(g->hw), hh = _mm256_set1_ps(g->hh);
    const __m256 one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f),
                 zero = _mm256_setzero_ps();
    const __m256 wf = _mm256_set1_ps((float)g->w), hf = _mm256_set1_ps((float)g->h);
    const __m256 x0 = _mm256_set1_ps(g->x0);
    const __m256i wi = _mm256_set1_epi32(g->w), none = _mm256_set1_epi32(-1);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 gx0 = _mm256_add_ps(_mm256_add_ps(_mm256_set1_ps((float)(ox + i)), lane), x0);
        __m256 gx = _mm256_add_ps(_mm256_fmadd_ps(y, r10, _mm256_mul_ps(gx0, r00)), r20);
        __m256 gy = _mm256_add_ps(_mm256_fmadd_ps(y, r11, _mm256_mul_ps(gx0, r01)), r21);
        __m256 ix = _mm256_round_ps(_mm256_sub_ps(_mm256_mul_ps(_mm256_add_ps(gx, one), hw), half),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256 iy = _mm256_round_ps(_mm256_sub_ps(_mm256_mul_ps(_mm256_add_ps(gy, one), hh), half),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256 in = _mm256_and_ps(
            _mm256_and_ps(_mm256_cmp_ps(ix, zero, _CMP_GE_OQ), _mm256_cmp_ps(ix, wf, _CMP_LT_OQ)),
            _mm256_and_ps(_mm256_cmp_ps(iy, zero, _CMP_GE_OQ), _mm256_cmp_ps(iy, hf, _CMP_LT_OQ)));
        /* out-of-range lanes are replaced below, so their conversions do not matter */
        __m256i at = _mm256_add_epi32(_mm256_mullo_epi32(_mm256_cvttps_epi32(iy), wi),
                                      _mm256_cvttps_epi32(ix));
        at = _mm256_blendv_epi8(none, at, _mm256_castps_si256(in));
        _mm256_storeu_si256((__m256i *)(void *)(src + i), at);
    }
    if (i < n)
        grid_row(g, gy0, ox + i, n - i, src + i);
}

#endif

/* _affine_grid + grid_sample(nearest, zeros, align_corners=False) in float32 (grid_row).
 * tmp holds the original. */
static void warp(bfs_img *im, const double m[6], uint8_t *tmp)
{
    int w = im->w, h = im->h;
    size_t row = (size_t)w * 3;
    for (int y = 0; y < h; y++)
        memcpy(tmp + (size_t)y * row, PX(im, 0, y), row);
    grid g = {.hw = (float)(0.5 * w), .hh = (float)(0.5 * h), .w = w, .h = h};
    g.r00 = (float)m[0] / g.hw, g.r10 = (float)m[1] / g.hw, g.r20 = (float)m[2] / g.hw;
    g.r01 = (float)m[3] / g.hh, g.r11 = (float)m[4] / g.hh, g.r21 = (float)m[5] / g.hh;
    g.x0 = (float)((1.0 - w) * 0.5);
    float y0 = (float)((1.0 - h) * 0.5);
    int32_t src[GRID_CHUNK];
    for (int oy = 0; oy < h; oy++) {
        float gy0 = (float)oy + y0; /* linspace with step 1: exact */
        uint8_t *o = PX(im, 0, oy);
        for (int ox = 0; ox < w; ox += GRID_CHUNK) {
            int n = w - ox < GRID_CHUNK ? w - ox : GRID_CHUNK;
#if defined(__x86_64__)
            if (have_avx2_fma())
                grid_row_avx2(&g, gy0, ox, n, src);
            else
#endif
                grid_row(&g, gy0, ox, n, src);
            for (int i = 0; i < n; i++, o += 3) {
                if (src[i] >= 0) {
                    const uint8_t *p = tmp + 3 * (size_t)src[i];
                    o[0] = p[0], o[1] = p[1], o[2] = p[2];
                } else {
                    o[0] = o[1] = o[2] = 0;
                }
            }
        }
    }
}

/* torch.rot90 by 180 degrees, and by 90 (k=1, counter-clockwise) or 270 on squares */
static void rot90(bfs_img *im, int k, uint8_t *tmp)
{
    int w = im->w, h = im->h;
    size_t row = (size_t)w * 3;
    for (int y = 0; y < h; y++)
        memcpy(tmp + (size_t)y * row, PX(im, 0, y), row);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            int sx, sy;
            if (k == 2)
                sx = w - 1 - x, sy = h - 1 - y;
            else if (k == 1) /* out[y][x] = in[x][w - 1 - y] */
                sx = w - 1 - y, sy = x;
            else /* k == 3: out[y][x] = in[h - 1 - x][y] */
                sx = y, sy = h - 1 - x;
            memcpy(PX(im, x, y), tmp + (size_t)sy * row + 3 * (size_t)sx, 3);
        }
}

static void rotate(bfs_img *im, double angle, uint8_t *tmp)
{
    double a = fmod(angle, 360.0); /* Python's angle % 360 */
    if (a != 0 && a < 0)
        a += 360.0;
    if (a == 0)
        return;
    if (a == 180) {
        rot90(im, 2, tmp);
        return;
    }
    if (im->w == im->h && (a == 90 || a == 270)) {
        rot90(im, a == 90 ? 1 : 3, tmp);
        return;
    }
    double m[6];
    inverse_affine(0, 0, -a, 0, 0, 0, 0, m);
    warp(im, m, tmp);
}

int bfs_imgop_apply(bfs_img *im, int op, double mag, uint8_t *tmp)
{
    double m[6];
    if (!(mag == mag)) /* NaN */
        return -EINVAL;
    switch (op) {
    case BFS_OP_IDENTITY:
        return 0;
    case BFS_OP_SHEAR_X:
    case BFS_OP_SHEAR_Y: {
        double s = degrees(atan(mag));
        inverse_affine(-im->w * 0.5, -im->h * 0.5, 0, 0, 0, op == BFS_OP_SHEAR_X ? s : 0,
                       op == BFS_OP_SHEAR_Y ? s : 0, m);
        warp(im, m, tmp);
        return 0;
    }
    case BFS_OP_TRANSLATE_X:
    case BFS_OP_TRANSLATE_Y: {
        if (!(fabs(mag) < 1e9))
            return -EINVAL;
        double t = trunc(mag); /* int(magnitude) */
        if (t == 0)
            t = 0; /* no -0 */
        inverse_affine(0, 0, 0, op == BFS_OP_TRANSLATE_X ? t : 0, op == BFS_OP_TRANSLATE_Y ? t : 0,
                       0, 0, m);
        warp(im, m, tmp);
        return 0;
    }
    case BFS_OP_ROTATE:
        if (!(fabs(mag) < 1e9))
            return -EINVAL;
        rotate(im, mag, tmp);
        return 0;
    case BFS_OP_BRIGHTNESS:
    case BFS_OP_COLOR:
    case BFS_OP_CONTRAST:
    case BFS_OP_SHARPNESS:
        if (!(mag >= 0 && mag < 1e9))
            return -EINVAL;
        if (op == BFS_OP_BRIGHTNESS)
            brightness(im, mag);
        else if (op == BFS_OP_COLOR)
            saturation(im, mag);
        else if (op == BFS_OP_CONTRAST)
            contrast(im, mag);
        else
            sharpness(im, mag, tmp);
        return 0;
    case BFS_OP_POSTERIZE:
        if (!(mag >= 0 && mag <= 8) || mag != floor(mag))
            return -EINVAL;
        posterize(im, (int)mag);
        return 0;
    case BFS_OP_SOLARIZE:
        if (!(mag <= 255))
            return -EINVAL;
        solarize(im, mag);
        return 0;
    case BFS_OP_AUTOCONTRAST:
        autocontrast(im);
        return 0;
    case BFS_OP_EQUALIZE:
        equalize(im);
        return 0;
    case BFS_OP_INVERT:
        invert(im);
        return 0;
    case BFS_OP_HUE:
        if (!(mag >= -0.5 && mag <= 0.5))
            return -EINVAL;
        hue(im, mag);
        return 0;
    case BFS_OP_GRAYSCALE:
        grayscale(im);
        return 0;
    default:
        return -EINVAL;
    }
}
