/*
 * resize.c — Pillow-exact antialiased RGB resampling (triangle filter, "BILINEAR").
 *
 * Neighbours: engine/engine.c asks resize_plan_extent which pixels to decode, then calls
 * resize_rgb8 once per sample with the pixels the decoder produced and a store callback
 * that writes into the batch buffer; mkbatchfs --max-side shrinks images with it. It calls only
 * libc. Tested by tests/check_resize.c and, bit for bit against Pillow, by
 * tests/cli/resize_pillow.sh through tests/resize_tool_main.c.
 *
 * How: per axis, the coefficients of the window's output indices are computed once per
 * call exactly as Pillow's precompute_coeffs + normalize_coeffs_8bpc do (box edges as
 * C floats, weights in double, normalised, rounded to 22-bit fixed point); once per
 * image when resize_plan_extent computed them for the source extent (they stay in the
 * scratch, tagged with their spec, for the resize_rgb8 that follows). Taps whose
 * fixed-point coefficient is 0 are then trimmed from both ends of each output's tap
 * list: they add nothing to any sum, so results do not change, but the source extent
 * becomes exactly the pixels that matter and an unchanged axis reads one pixel per
 * output. An axis whose outputs each copy one input pixel at weight 1.0 (Pillow's
 * skipped passes: same size without box, or an integral box of the output's size) is
 * not computed at all; skipping an identity pass is exact, so this matches Pillow
 * whichever way it decides. The passes run in Pillow's order (pillow_vertical_first):
 *  - horizontal first: each needed source row becomes a row of win_w pixels, lazily,
 *    just before the vertical pass first needs it (still in cache); the vertical pass
 *    then produces each window row and hands it to the store callback;
 *  - vertical first: for each window row, the vertical pass over the window's source
 *    columns gives one row, the horizontal pass turns it into the window row.
 * The horizontal kernels give every output the same number of taps (zero-weighted
 * padding), so their loops have fixed trip counts. The kernels are resize_kernels.c
 * (resize_kernels_internal.h), called through the table of the path in use.
 *
 * Invariants:
 *  - Every pass accumulates u8 * int32 products in int32, starting at 1 << 21, then
 *    shifts right by 22 and clamps to 0..255, like Pillow. All sums are exact integers
 *    far from overflow (|sum| < 255 * (2^22 + taps / 2) + 2^21 < 2^31 for sides
 *    <= RESIZE_MAX_SIDE), so the order of accumulation is free: the AVX2 kernels regroup
 *    the products (22-bit coefficients split into two 11-bit halves for pmaddwd) and
 *    still give the same bytes as the portable kernels.
 *  - Reads stay inside the source rows' 3 * src->w bytes. Zero-weighted padding taps
 *    stay inside the row (uniform_taps); the AVX2 kernel's 16-byte loads run past an
 *    output's last tap, so outputs near the row end load from a zero-padded copy of it.
 *  - No allocation once the scratch is large enough; the scratch is per thread, and
 *    the only process-wide state is the test hooks of resize_internal.h.
 */
#include "engine/resize.h"
#include "engine/resize_internal.h"
#include "engine/resize_kernels_internal.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Intermediate and output rows get this much slack: the AVX2 kernel stores 16 bytes
 * where 12 are due. */
#define ROW_PAD   32
#define MEM_ALIGN 64

/* ---- process-wide test hooks ------------------------------------------------------- */

static _Atomic int forced_path = RESIZE_PATH_AUTO;
static _Atomic size_t scratch_limit = 0;

static bool cpu_has_avx2(void)
{
#if RESIZE_HAVE_AVX2
    return __builtin_cpu_supports("avx2");
#else
    return false;
#endif
}

/* (libgcc's check includes the kernel saving the 512-bit state: XCR0's opmask and ZMM
 * bits) */
static bool cpu_has_avx512(void)
{
#if RESIZE_HAVE_AVX2
    return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi");
#else
    return false;
#endif
}

int resize_force_path(resize_path path)
{
    switch (path) {
    case RESIZE_PATH_AUTO:
    case RESIZE_PATH_PORTABLE:
        break;
    case RESIZE_PATH_AVX2:
        if (!cpu_has_avx2())
            return -ENOTSUP;
        break;
    case RESIZE_PATH_AVX512:
        if (!cpu_has_avx512())
            return -ENOTSUP;
        break;
    default:
        return -EINVAL;
    }
    atomic_store_explicit(&forced_path, (int)path, memory_order_relaxed);
    return 0;
}

int resize_parse_path(const char *v)
{
    static const char *const names[] = {"auto", "portable", "avx2", "avx512"};
    for (int p = 0; p < (int)(sizeof names / sizeof *names); p++)
        if (v && strcmp(v, names[p]) == 0)
            return p;
    return -1;
}

/* The most BATCHFS_RESIZE allows (read once; resizes run on several threads at once,
 * hence the atomic): AUTO where it is unset. An unknown value is said once on stderr
 * and ignored. */
static resize_path env_cap(void)
{
    static _Atomic int cap = -1;
    int c = atomic_load_explicit(&cap, memory_order_relaxed);
    if (c < 0) {
        const char *v = getenv("BATCHFS_RESIZE");
        c = v ? resize_parse_path(v) : RESIZE_PATH_AUTO;
        if (c < 0) {
            fprintf(stderr,
                    "batchfs: BATCHFS_RESIZE=%s is not auto, portable, avx2 or avx512: "
                    "ignored\n",
                    v);
            c = RESIZE_PATH_AUTO;
        }
        int unset = -1;
        if (!atomic_compare_exchange_strong(&cap, &unset, c))
            c = unset; /* another thread read it first: the same value */
    }
    return (resize_path)c;
}

resize_path resize_active_path(void)
{
    int f = atomic_load_explicit(&forced_path, memory_order_relaxed);
    if (f != RESIZE_PATH_AUTO)
        return (resize_path)f;
    resize_path cap = env_cap();
    bool any = cap == RESIZE_PATH_AUTO;
    if ((any || cap == RESIZE_PATH_AVX512) && cpu_has_avx512())
        return RESIZE_PATH_AVX512;
    if ((any || cap >= RESIZE_PATH_AVX2) && cpu_has_avx2())
        return RESIZE_PATH_AVX2;
    return RESIZE_PATH_PORTABLE;
}

void resize_test_limit_scratch(size_t max_bytes)
{
    atomic_store_explicit(&scratch_limit, max_bytes, memory_order_relaxed);
}

/* ---- spec validation ---------------------------------------------------------------- */

int resize_check_spec(const resize_spec *s)
{
    if (!s)
        return -EINVAL;
    if (s->in_w <= 0 || s->in_h <= 0 || s->in_w > RESIZE_MAX_SIDE || s->in_h > RESIZE_MAX_SIDE)
        return -EINVAL;
    if (s->out_w <= 0 || s->out_h <= 0 || s->out_w > RESIZE_MAX_SIDE || s->out_h > RESIZE_MAX_SIDE)
        return -EINVAL;
    /* written so that NaN fails every test */
    if (!(s->box[0] >= 0.0) || !(s->box[1] >= 0.0) || !(s->box[2] <= (double)s->in_w) ||
        !(s->box[3] <= (double)s->in_h) || !(s->box[0] < s->box[2]) || !(s->box[1] < s->box[3]))
        return -EINVAL;
    if (s->win_w <= 0 || s->win_h <= 0 || s->win_x < 0 || s->win_y < 0 ||
        s->win_x > s->out_w - s->win_w || s->win_y > s->out_h - s->win_h)
        return -EINVAL;
    return 0;
}

/* ---- coefficients (Pillow's precompute_coeffs + normalize_coeffs_8bpc) ------------- */

/* One axis as Pillow sees it. */
typedef struct pil_axis {
    int in_size;
    double in0;     /* box start, rounded to float like Pillow's float box[4] */
    double scale;   /* box size / out size, the box size subtracted in float */
    double support; /* filter support 1.0 * max(scale, 1) */
    double ss;      /* 1 / max(scale, 1) */
} pil_axis;

static void pil_axis_init(pil_axis *a, int in_size, double b0, double b1, int out_size)
{
    /* Pillow's _resize parses the box into float[4] and precompute_coeffs takes float
     * in0, in1; (in1 - in0) is a float subtraction. The assignment rounds to float. */
    float f0 = (float)b0, f1 = (float)b1;
    float fsize = f1 - f0;
    double filterscale = (double)fsize / out_size;

    a->in_size = in_size;
    a->in0 = f0;
    a->scale = filterscale;
    if (filterscale < 1.0)
        filterscale = 1.0;
    a->support = 1.0 * filterscale;
    a->ss = 1.0 / filterscale;
}

/* Upper bound of the taps of one output before trimming: Pillow's ksize
 * (ceil(support) * 2 + 1), plus one against rounding in center +- support. */
static int pil_axis_ksize(const pil_axis *a)
{
    int s = (int)a->support;
    if ((double)s < a->support)
        s++;
    return 2 * s + 2;
}

static double bilinear_filter(double x)
{
    if (x < 0.0)
        x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

static int32_t quantize(double w)
{
    /* normalize_coeffs_8bpc: round half away from zero */
    if (w < 0)
        return (int32_t)(-0.5 + w * (1 << PRECISION_BITS));
    return (int32_t)(0.5 + w * (1 << PRECISION_BITS));
}

/*
 * Taps of output index xx: stores the first tap with a non-zero fixed-point coefficient
 * in *first and returns how many taps run from there to the last non-zero one; k (if
 * not NULL) receives their coefficients. An output with no non-zero tap gets count 0.
 */
static int pil_axis_taps(const pil_axis *a, int xx, int *first, int32_t *k)
{
    double center = a->in0 + (xx + 0.5) * a->scale;
    int xmin = (int)(center - a->support + 0.5);
    if (xmin < 0)
        xmin = 0;
    int xmax = (int)(center + a->support + 0.5);
    if (xmax > a->in_size)
        xmax = a->in_size;
    xmax -= xmin;

    /* Pillow keeps the weights to divide them by their sum; so do we, up to 64 of them
     * (strong downscales recompute the rest, which gives the same doubles) */
    double wcache[64], ww = 0.0;
    for (int x = 0; x < xmax; x++) {
        double w = bilinear_filter((x + xmin - center + 0.5) * a->ss);
        if (x < 64)
            wcache[x] = w;
        ww += w;
    }

    int lo = -1, hi = -1;
    for (int x = 0; x < xmax; x++) {
        double w = x < 64 ? wcache[x] : bilinear_filter((x + xmin - center + 0.5) * a->ss);
        if (ww != 0.0)
            w /= ww;
        int32_t q = quantize(w);
        if (q != 0) {
            if (lo < 0)
                lo = x;
            hi = x;
        }
        if (k && lo >= 0) /* k has room for xmax <= ksize values */
            k[x - lo] = q;
    }
    if (lo < 0) {
        *first = xmin;
        return 0;
    }
    *first = xmin + lo;
    return hi - lo + 1;
}

/* The coefficients of one axis of the window. */
typedef struct axis_plan {
    int n;          /* outputs (window size along the axis) */
    int kstride;    /* int32 per output in k */
    int kmax;       /* most taps of any output */
    int32_t *first; /* per output: first tap (image coordinates, later buffer-relative) */
    int32_t *count; /* per output: taps */
    int32_t *k;     /* per output: kstride coefficients, zero-padded */
    int lo, hi;     /* taps of all outputs lie in [lo, hi) */
    bool identity;  /* output i is input lo + i at weight 1.0 */
} axis_plan;

static void axis_extent(const pil_axis *a, int win0, int n, int *lo, int *hi)
{
    int l = a->in_size, h = 0;
    for (int i = 0; i < n; i++) {
        int f, c = pil_axis_taps(a, win0 + i, &f, NULL);
        if (c == 0)
            continue;
        if (f < l)
            l = f;
        if (f + c > h)
            h = f + c;
    }
    if (h == 0)
        l = 0;
    *lo = l;
    *hi = h;
}

static void axis_plan_build(axis_plan *p, const pil_axis *a, int win0)
{
    int l = a->in_size, h = 0;
    p->kmax = 0;
    p->identity = true;
    for (int i = 0; i < p->n; i++) {
        int32_t *k = p->k + (size_t)i * p->kstride;
        int f, c = pil_axis_taps(a, win0 + i, &f, k);
        for (int t = c; t < p->kstride; t++)
            k[t] = 0;
        p->first[i] = f;
        p->count[i] = c;
        if (c > p->kmax)
            p->kmax = c;
        if (c == 0) {
            p->identity = false;
            continue;
        }
        if (f < l)
            l = f;
        if (f + c > h)
            h = f + c;
        if (c != 1 || k[0] != (1 << PRECISION_BITS) || f != p->first[0] + i)
            p->identity = false;
    }
    if (h == 0)
        l = 0;
    p->lo = l;
    p->hi = h;
    /* outputs without taps read nothing; point them at the extent start */
    for (int i = 0; i < p->n; i++)
        if (p->count[i] == 0)
            p->first[i] = l;
}

static void spec_axes(const resize_spec *spec, pil_axis *ax, pil_axis *ay)
{
    pil_axis_init(ax, spec->in_w, spec->box[0], spec->box[2], spec->out_w);
    pil_axis_init(ay, spec->in_h, spec->box[1], spec->box[3], spec->out_h);
}

int resize_source_extent(const resize_spec *spec, int *x0, int *y0, int *x1, int *y1)
{
    int rc = resize_check_spec(spec);
    if (rc)
        return rc;
    pil_axis ax, ay;
    spec_axes(spec, &ax, &ay);
    axis_extent(&ax, spec->win_x, spec->win_w, x0, x1);
    axis_extent(&ay, spec->win_y, spec->win_h, y0, y1);
    return 0;
}

/* ---- scratch -------------------------------------------------------------------------- */

static size_t align_up(size_t v)
{
    return (v + MEM_ALIGN - 1) & ~(size_t)(MEM_ALIGN - 1);
}

/* Make s->cap >= need, keeping the first `keep` bytes. 0 or -ENOMEM. */
static int scratch_reserve(resize_scratch *s, size_t need, size_t keep)
{
    if (s->mem && s->cap >= need)
        return 0;
    size_t limit = atomic_load_explicit(&scratch_limit, memory_order_relaxed);
    if (limit && need > limit)
        return -ENOMEM;
    /* headroom so that slightly larger later calls do not reallocate */
    size_t cap = need + need / 4;
    if (cap < need)
        return -ENOMEM;
    if (limit && cap > limit)
        cap = limit;
    cap = (cap + 4095) & ~(size_t)4095;
    void *m = aligned_alloc(MEM_ALIGN, cap);
    if (!m)
        return -ENOMEM;
    if (keep && s->mem)
        memcpy(m, s->mem, keep);
    free(s->mem);
    s->mem = m;
    s->cap = cap;
    return 0;
}

void resize_scratch_free(resize_scratch *scratch)
{
    if (!scratch)
        return;
    free(scratch->mem);
    scratch->mem = NULL;
    scratch->cap = 0;
    scratch->planned = 0;
}

/* ---- plans in the scratch -------------------------------------------------------------- */

/* Bytes of a plan's arrays in the scratch. */
static size_t plan_bytes(int n, int kstride)
{
    return 2 * align_up((size_t)n * sizeof(int32_t)) +
           align_up((size_t)n * (size_t)kstride * sizeof(int32_t));
}

static void plan_place(axis_plan *p, char *base, int n, int kstride)
{
    p->n = n;
    p->kstride = kstride;
    p->first = (int32_t *)base;
    base += align_up((size_t)n * sizeof(int32_t));
    p->count = (int32_t *)base;
    base += align_up((size_t)n * sizeof(int32_t));
    p->k = (int32_t *)base;
}

/*
 * Region A of the scratch: this head, then the horizontal and the vertical plan's arrays.
 * resize_plan_extent fills the head and sets scratch->planned; resize_rgb8 clears
 * scratch->planned before anything else, as it changes the horizontal plan in place, and
 * reuses the plans only if the spec is the one they were computed for. The plans are a
 * function of the spec alone (the source and the kernel path come later), so an equal
 * spec gives equal plans.
 */
typedef struct plan_head {
    resize_spec spec; /* what the plans were computed for */
    axis_plan px, py; /* their scalars (the array pointers are placed again) */
} plan_head;

/* Places the plans' arrays in region A at mem (unless NULL); returns its size. */
static size_t plans_place(char *mem, axis_plan *px, int nx, int ksx, axis_plan *py, int ny, int ksy)
{
    size_t bytes_head = align_up(sizeof(plan_head)), bytes_x = plan_bytes(nx, ksx);
    if (mem) {
        plan_place(px, mem + bytes_head, nx, ksx);
        plan_place(py, mem + bytes_head + bytes_x, ny, ksy);
    }
    return bytes_head + bytes_x + plan_bytes(ny, ksy);
}

/* Equal specs: same plans. The box is compared bit for bit. */
static bool spec_equal(const resize_spec *a, const resize_spec *b)
{
    return a->in_w == b->in_w && a->in_h == b->in_h && a->out_w == b->out_w &&
           a->out_h == b->out_h && a->win_x == b->win_x && a->win_y == b->win_y &&
           a->win_w == b->win_w && a->win_h == b->win_h &&
           memcmp(a->box, b->box, sizeof a->box) == 0;
}

/*
 * Both plans of a valid spec at the start of the scratch (region A, *bytes_a bytes). With
 * reuse, they are those resize_plan_extent left for this spec; otherwise they are
 * computed. Returns 0 or -ENOMEM.
 */
static int plans_get(const resize_spec *spec, resize_scratch *s, bool reuse, axis_plan *px,
                     axis_plan *py, size_t *bytes_a)
{
    pil_axis ax, ay;
    spec_axes(spec, &ax, &ay);
    int ksx = pil_axis_ksize(&ax), ksy = pil_axis_ksize(&ay);
    *bytes_a = plans_place(NULL, px, spec->win_w, ksx, py, spec->win_h, ksy);
    int rc = scratch_reserve(s, *bytes_a, reuse ? *bytes_a : 0);
    if (rc)
        return rc;
    if (reuse) {
        const plan_head *head = s->mem;
        *px = head->px;
        *py = head->py;
    }
    plans_place(s->mem, px, spec->win_w, ksx, py, spec->win_h, ksy);
    if (!reuse) {
        axis_plan_build(px, &ax, spec->win_x);
        axis_plan_build(py, &ay, spec->win_y);
    }
    return 0;
}

int resize_plan_extent(const resize_spec *spec, resize_scratch *scratch, int *x0, int *y0, int *x1,
                       int *y1)
{
    int rc = resize_check_spec(spec);
    if (rc)
        return rc;
    if (!scratch)
        return -EINVAL;
    scratch->planned = 0;
    axis_plan px, py;
    size_t bytes_a;
    if (plans_get(spec, scratch, false, &px, &py, &bytes_a))
        return resize_source_extent(spec, x0, y0, x1, y1); /* no memory: keep nothing */
    plan_head *head = scratch->mem;
    head->spec = *spec;
    head->px = px;
    head->py = py;
    scratch->planned = 1;
    /* the plans' extents are axis_extent's: the same taps, the same min and max */
    *x0 = px.lo;
    *x1 = px.hi;
    *y0 = py.lo;
    *y1 = py.hi;
    return 0;
}

/* ---- driver ---------------------------------------------------------------------------- */

static int check_src(const resize_src *src, const axis_plan *px, const axis_plan *py)
{
    if (!src->pixels || src->w < 0 || src->h < 0 || src->stride < 3 * (size_t)src->w)
        return -EINVAL;
    if (px->hi > px->lo && (px->lo < src->x0 || px->hi > (long long)src->x0 + src->w))
        return -EINVAL;
    if (py->hi > py->lo && (py->lo < src->y0 || py->hi > (long long)src->y0 + src->h))
        return -EINVAL;
    return 0;
}

/*
 * Give every output of a horizontal plan exactly kmax taps, the extra ones weighted 0.
 * first[] counts pixels from the start of rows of row_len pixels; an output whose
 * padded taps would run past the row end starts earlier instead, its coefficients
 * shifted right, so reads stay in the row (kmax <= the extent's width <= row_len).
 */
static void uniform_taps(axis_plan *p, int row_len)
{
    int taps = p->kmax;
    for (int i = 0; i < p->n; i++) {
        int c = p->count[i], f = p->first[i];
        if (c == taps)
            continue;
        int shift = f + taps - row_len;
        if (shift > 0) {
            int32_t *k = p->k + (size_t)i * p->kstride;
            memmove(k + shift, k, (size_t)c * sizeof *k);
            memset(k, 0, (size_t)shift * sizeof *k);
            p->first[i] = f - shift;
        }
        p->count[i] = taps;
    }
}

/*
 * Pillow >= 13 (python-pillow/Pillow#9549) runs the vertical pass first when the height
 * shrinks by more than twice as many pixels as the width does, counted on the whole
 * image: (in_h - out_h) > 0 && (in_h - out_h) > 2 * (in_w - out_w). The order changes
 * results by one level in some pixels, so it is followed exactly.
 */
static bool pillow_vertical_first(const resize_spec *s)
{
    long long dy = (long long)s->in_h - s->out_h, dx = (long long)s->in_w - s->out_w;
    return dy > 0 && dy > 2 * dx;
}

/* AVX2 layout of a horizontal pass over rows of row_bytes readable bytes. */
typedef struct avx_layout {
    int chunks, groups, safe_groups;
    size_t span;                /* bytes one output's loads cover from its offset */
    size_t tail_from, tail_len; /* row bytes copied for the unsafe groups */
    size_t bytes_tab, bytes_boff, bytes_tail;
} avx_layout;

/* Byte offset in the row of output x's first tap; outputs past n (padding of the last
 * group) repeat the last output. */
static size_t avx_offset(const int32_t *first, int n, int x)
{
    return 3 * (size_t)first[x < n ? x : n - 1];
}

static void avx_layout_plan(avx_layout *l, const axis_plan *px, size_t row_bytes)
{
    l->chunks = px->kmax > 0 ? (px->kmax + 1) / 2 : 1;
    l->span = 12 * (size_t)((l->chunks + 1) / 2 - 1) + 16;
    l->groups = (px->n + 7) / 8;
    l->safe_groups = 0;
    for (bool safe = true; safe && l->safe_groups < l->groups; l->safe_groups += safe) {
        for (int x = 8 * l->safe_groups; x < 8 * l->safe_groups + 8; x++)
            if (avx_offset(px->first, px->n, x) + l->span > row_bytes)
                safe = false;
    }
    l->tail_from = l->tail_len = 0;
    if (l->safe_groups < l->groups) {
        size_t lo = SIZE_MAX;
        for (int x = 8 * l->safe_groups; x < 8 * l->groups; x++) {
            size_t off = avx_offset(px->first, px->n, x);
            if (off < lo)
                lo = off;
        }
        l->tail_from = lo;
        l->tail_len = row_bytes - lo;
    }
    l->bytes_tab = align_up((size_t)l->groups * 4 * (size_t)l->chunks * sizeof(avx_table_entry));
    l->bytes_boff = align_up((size_t)l->groups * 8 * sizeof(int32_t));
    l->bytes_tail = l->tail_len ? 2 * align_up(l->tail_len + l->span) : 0; /* two rows */
}

#if RESIZE_HAVE_AVX2
static void avx_layout_fill(hpass *h, const avx_layout *l, char *mem)
{
    avx_table_entry *tab = (avx_table_entry *)mem;
    int32_t *boff = (int32_t *)(mem + l->bytes_tab);
    uint8_t *tail = (uint8_t *)mem + l->bytes_tab + l->bytes_boff;
    for (int x = 0; x < 8 * l->groups; x++) {
        size_t off = avx_offset(h->first, h->n, x);
        boff[x] = (int32_t)(x < 8 * l->safe_groups ? off : off - l->tail_from);
    }
    for (int o = 0; o < 8 * l->groups; o++) {
        const int32_t *k = h->k + (size_t)o * h->kstride;
        for (int c = 0; c < l->chunks; c++) {
            avx_table_entry *e = &tab[(size_t)(o / 2) * l->chunks + c];
            int32_t k0 = o < h->n && 2 * c < h->taps ? k[2 * c] : 0;
            int32_t k1 = o < h->n && 2 * c + 1 < h->taps ? k[2 * c + 1] : 0;
            int16_t h0 = (int16_t)(k0 >> AVX_HALF_BITS), h1 = (int16_t)(k1 >> AVX_HALF_BITS);
            int16_t l0 = (int16_t)(k0 & ((1 << AVX_HALF_BITS) - 1));
            int16_t l1 = (int16_t)(k1 & ((1 << AVX_HALF_BITS) - 1));
            int16_t hv[8] = {h0, h1, h0, h1, h0, h1, 0, 0}, lv[8] = {l0, l1, l0, l1, l0, l1, 0, 0};
            memcpy(&e->hi[(o & 1) * 8], hv, sizeof hv);
            memcpy(&e->lo[(o & 1) * 8], lv, sizeof lv);
        }
    }
    uint8_t *tail2 = tail + l->bytes_tail / 2;
    if (l->tail_len) {
        memset(tail + l->tail_len, 0, l->span);
        memset(tail2 + l->tail_len, 0, l->span);
    }
    h->tab = tab;
    h->chunks = l->chunks;
    h->groups = l->groups;
    h->safe_groups = l->safe_groups;
    h->boff = boff;
    h->tail = tail;
    h->tail2 = tail2;
    h->tail_from = l->tail_from;
    h->tail_len = l->tail_len;
}
#endif

int resize_rgb8(const resize_spec *spec, const resize_src *src, resize_store_cb store, void *ctx,
                resize_scratch *scratch)
{
    int rc = resize_check_spec(spec);
    if (rc)
        return rc;
    if (!src || !store || !scratch)
        return -EINVAL;

    /* region A of the scratch: the two plans, those resize_plan_extent just computed
     * for this spec if it did; they are changed in place below, so never reused again */
    bool reuse = scratch->planned && spec_equal(&((const plan_head *)scratch->mem)->spec, spec);
    scratch->planned = 0;
    axis_plan px, py;
    size_t bytes_a;
    rc = plans_get(spec, scratch, reuse, &px, &py, &bytes_a);
    if (rc)
        return rc;
    rc = check_src(src, &px, &py);
    if (rc)
        return rc;

    resize_path path = resize_active_path();
    hrow_fn hrow = resize_kernels_portable.hrow;
    hrow2_fn hrow2 = resize_kernels_portable.hrow2;
    vrow_fn vrow = resize_kernels_portable.vrow;
#if RESIZE_HAVE_AVX2
    if (path == RESIZE_PATH_AVX2 || path == RESIZE_PATH_AVX512) {
        const resize_kernels *kn =
            path == RESIZE_PATH_AVX512 ? &resize_kernels_avx512 : &resize_kernels_avx2;
        hrow = kn->hrow;
        hrow2 = kn->hrow2;
        vrow = kn->vrow;
    }
#endif

    bool need_h = !px.identity, need_v = !py.identity;
    bool vfirst = need_h && need_v && pillow_vertical_first(spec);
    size_t row_bytes = (size_t)spec->win_w * 3;
    size_t istride = align_up(row_bytes + ROW_PAD);
    size_t cols_bytes = 3 * (size_t)(px.hi - px.lo); /* source columns the window reads */

    /* horizontal taps relative to the first column of the rows hrow gets: the source
     * buffer's, or (vertical first) the window's source columns */
    int hbase = vfirst ? px.lo : src->x0;
    size_t hrow_bytes = vfirst ? cols_bytes : 3 * (size_t)src->w;
    for (int i = 0; i < px.n; i++)
        px.first[i] -= hbase;
    /* vertical first: hrow reads our own row, with zero padding that the AVX2 kernel's
     * loads may cover (weight 0): at least any span */
    size_t mid_pad = 16 + 12 * (size_t)px.kmax + ROW_PAD;
    avx_layout lay = {0};
    if (need_h) {
        uniform_taps(&px, (int)(hrow_bytes / 3));
        if (path != RESIZE_PATH_PORTABLE) /* the AVX2 and AVX-512 kernels' table */
            avx_layout_plan(&lay, &px, vfirst ? cols_bytes + mid_pad : hrow_bytes);
    }

    /* region B: AVX2 tables; intermediate rows [py.lo, py.hi) (horizontal first) or one
     * vertically resampled row of the source columns (vertical first); one output row */
    size_t bytes_avx = lay.bytes_tab + lay.bytes_boff + lay.bytes_tail;
    size_t bytes_mid = 0;
    if (vfirst)
        bytes_mid = 2 * align_up(cols_bytes + mid_pad); /* two rows */
    else if (need_h && need_v)
        bytes_mid = (size_t)(py.hi - py.lo) * istride;
    size_t off_avx = bytes_a, off_mid = off_avx + bytes_avx, off_row = off_mid + bytes_mid;
    rc = scratch_reserve(scratch, off_row + 2 * istride, bytes_a); /* two output rows */
    if (rc)
        return rc;
    char *mem = scratch->mem;
    /* the reserve may have moved the plans */
    plans_place(mem, &px, px.n, px.kstride, &py, py.n, py.kstride);
    uint8_t *mid = (uint8_t *)mem + off_mid, *outrow = (uint8_t *)mem + off_row;
    uint8_t *mid2 = mid + bytes_mid / 2, *outrow2 = outrow + istride; /* second rows */

    hpass hp = {.n = px.n, .taps = px.kmax, .kstride = px.kstride, .first = px.first, .k = px.k};
#if RESIZE_HAVE_AVX2
    if (bytes_avx)
        avx_layout_fill(&hp, &lay, mem + off_avx);
#endif
    if (vfirst) {
        memset(mid + cols_bytes, 0, mid_pad);
        memset(mid2 + cols_bytes, 0, mid_pad);
    }

    const uint8_t *pix = src->pixels;
    size_t sstride = src->stride;
#define SRC_ROW(y) (pix + (size_t)((y)-src->y0) * sstride)
    if (!need_v) {
        /* output row j is input row py.lo + j, resampled horizontally if needed */
        for (int j = 0; j < spec->win_h; j++) {
            const uint8_t *in = SRC_ROW(py.lo + j);
            if (!need_h) {
                store(ctx, j, in + 3 * (size_t)px.first[0], spec->win_w);
            } else if (j + 1 < spec->win_h) {
                hrow2(in, SRC_ROW(py.lo + j + 1), outrow, outrow2, &hp);
                store(ctx, j, outrow, spec->win_w);
                store(ctx, ++j, outrow2, spec->win_w);
            } else {
                hrow(in, outrow, &hp);
                store(ctx, j, outrow, spec->win_w);
            }
        }
        return 0;
    }
    if (vfirst) {
        const uint8_t *cols = pix + 3 * (size_t)(px.lo - src->x0);
        for (int j = 0; j < spec->win_h; j++) {
            const int32_t *k = py.k + (size_t)j * py.kstride;
            vrow(cols + (size_t)(py.first[j] - src->y0) * sstride, sstride, py.count[j], k, mid,
                 (int)cols_bytes);
            if (j + 1 < spec->win_h) {
                vrow(cols + (size_t)(py.first[j + 1] - src->y0) * sstride, sstride, py.count[j + 1],
                     k + py.kstride, mid2, (int)cols_bytes);
                hrow2(mid, mid2, outrow, outrow2, &hp);
                store(ctx, j, outrow, spec->win_w);
                store(ctx, ++j, outrow2, spec->win_w);
            } else {
                hrow(mid, outrow, &hp);
                store(ctx, j, outrow, spec->win_w);
            }
        }
        return 0;
    }

    /* horizontal first: the rows of the vertical pass are the intermediate (filled
     * lazily, so each row is still in cache when first used) or the source itself */
    const uint8_t *vin;
    size_t vstride;
    if (need_h) {
        vin = mid;
        vstride = istride;
    } else {
        vin = SRC_ROW(py.lo) + 3 * (size_t)px.first[0];
        vstride = sstride;
    }
    int done = 0; /* intermediate rows computed */
    for (int j = 0; j < spec->win_h; j++) {
        int f = py.first[j] - py.lo, c = py.count[j];
        while (need_h && done < f + c) {
            if (done + 1 < py.hi - py.lo) { /* two rows share the coefficient loads */
                hrow2(SRC_ROW(py.lo + done), SRC_ROW(py.lo + done + 1),
                      mid + (size_t)done * istride, mid + (size_t)(done + 1) * istride, &hp);
                done += 2;
            } else {
                hrow(SRC_ROW(py.lo + done), mid + (size_t)done * istride, &hp);
                done++;
            }
        }
        vrow(vin + (size_t)f * vstride, vstride, c, py.k + (size_t)j * py.kstride, outrow,
             (int)row_bytes);
        store(ctx, j, outrow, spec->win_w);
    }
#undef SRC_ROW
    return 0;
}
