/*
 * check_resize.c — engine/resize: Pillow-exact antialiased RGB resampling.
 *
 * A plain transcription of Pillow's algorithm (whole passes over the whole image, no
 * windows, no trimmed taps, one kernel) is the reference; engine/resize must equal it
 * on every window of random specs, on both kernel paths, with the source buffer cut to
 * exactly the extent it asks for. Bit-exactness against Pillow itself is checked by
 * tests/cli/resize_pillow.sh. Also: identity, constant images, invalid specs, scratch
 * reuse, the -ENOMEM path (through resize_test_limit_scratch), and the coefficients
 * resize_plan_extent keeps for resize_rgb8 (used only for the spec they were made for).
 */
#include "engine/resize.h"
#include "engine/resize_internal.h"
#include "tests/testutil.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- reference: Pillow's ImagingResample, BILINEAR, 8-bit RGB, written plainly ---- */

typedef struct ref_axis {
    int ksize;
    int *xmin, *xcnt;
    int32_t *k; /* ksize per output */
} ref_axis;

static void ref_axis_make(ref_axis *a, int in_size, float in0, float in1, int out_size)
{
    double scale = (double)(in1 - in0) / out_size;
    double fs = scale < 1.0 ? 1.0 : scale;
    double support = fs;
    a->ksize = (int)ceil(support) * 2 + 1;
    a->xmin = calloc((size_t)out_size, sizeof(int));
    a->xcnt = calloc((size_t)out_size, sizeof(int));
    a->k = calloc((size_t)out_size * a->ksize, sizeof(int32_t));
    double *w = calloc((size_t)a->ksize, sizeof(double));
    for (int xx = 0; xx < out_size; xx++) {
        double center = in0 + (xx + 0.5) * scale, ww = 0.0;
        int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
        if (xmin < 0)
            xmin = 0;
        if (xmax > in_size)
            xmax = in_size;
        xmax -= xmin;
        for (int x = 0; x < xmax; x++) {
            double v = fabs((x + xmin - center + 0.5) * (1.0 / fs));
            w[x] = v < 1.0 ? 1.0 - v : 0.0;
            ww += w[x];
        }
        for (int x = 0; x < xmax; x++) {
            double v = ww != 0.0 ? w[x] / ww : w[x];
            a->k[(size_t)xx * a->ksize + x] =
                v < 0 ? (int32_t)(-0.5 + v * (1 << 22)) : (int32_t)(0.5 + v * (1 << 22));
        }
        a->xmin[xx] = xmin;
        a->xcnt[xx] = xmax;
    }
    free(w);
}

static void ref_axis_free(ref_axis *a)
{
    free(a->xmin);
    free(a->xcnt);
    free(a->k);
}

static uint8_t ref_clip(int32_t v)
{
    v >>= 22;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* in: w x h, out: ow x h */
static void ref_hpass(const uint8_t *in, int w, int h, const ref_axis *a, int ow, uint8_t *out)
{
    for (int y = 0; y < h; y++)
        for (int x = 0; x < ow; x++)
            for (int c = 0; c < 3; c++) {
                int32_t s = 1 << 21;
                for (int t = 0; t < a->xcnt[x]; t++)
                    s += in[((size_t)y * w + a->xmin[x] + t) * 3 + c] *
                         a->k[(size_t)x * a->ksize + t];
                out[((size_t)y * ow + x) * 3 + c] = ref_clip(s);
            }
}

/* in: w x h, out: w x oh */
static void ref_vpass(const uint8_t *in, int w, const ref_axis *a, int oh, uint8_t *out)
{
    for (int y = 0; y < oh; y++)
        for (int x = 0; x < 3 * w; x++) {
            int32_t s = 1 << 21;
            for (int t = 0; t < a->xcnt[y]; t++)
                s += in[(size_t)(a->xmin[y] + t) * 3 * w + x] * a->k[(size_t)y * a->ksize + t];
            out[(size_t)y * 3 * w + x] = ref_clip(s);
        }
}

/* PIL.Image.resize((ow, oh), BILINEAR, box) of a w x h RGB image, Pillow >= 13. */
static uint8_t *ref_resize(const uint8_t *img, int w, int h, const double box[4], int ow, int oh)
{
    float fb[4] = {(float)box[0], (float)box[1], (float)box[2], (float)box[3]};
    int need_h = ow != w || fb[0] != 0 || fb[2] != (float)ow;
    int need_v = oh != h || fb[1] != 0 || fb[3] != (float)oh;
    int vfirst = (h - oh) > 0 && (h - oh) > 2 * (w - ow);
    ref_axis ax, ay;
    ref_axis_make(&ax, w, fb[0], fb[2], ow);
    ref_axis_make(&ay, h, fb[1], fb[3], oh);
    uint8_t *cur = malloc((size_t)w * h * 3);
    memcpy(cur, img, (size_t)w * h * 3);
    int cw = w, ch = h;
    for (int pass = 0; pass < 2; pass++) {
        int horizontal = vfirst ? pass == 1 : pass == 0;
        if (horizontal && need_h) {
            uint8_t *n = malloc((size_t)ow * ch * 3);
            ref_hpass(cur, cw, ch, &ax, ow, n);
            free(cur);
            cur = n;
            cw = ow;
        } else if (!horizontal && need_v) {
            uint8_t *n = malloc((size_t)cw * oh * 3);
            ref_vpass(cur, cw, &ay, oh, n);
            free(cur);
            cur = n;
            ch = oh;
        }
    }
    ref_axis_free(&ax);
    ref_axis_free(&ay);
    return cur;
}

/* ---- harness ------------------------------------------------------------------------- */

typedef struct sink {
    uint8_t *px; /* win_w x win_h RGB */
    int w, h, next_row, bad;
} sink;

static void sink_cb(void *ctx, int row, const uint8_t *rgb, int width)
{
    sink *s = ctx;
    if (row != s->next_row || width != s->w || row >= s->h) {
        s->bad = 1;
        return;
    }
    memcpy(s->px + (size_t)row * s->w * 3, rgb, (size_t)width * 3);
    s->next_row++;
}

/* Resize into a new buffer (win_w x win_h); NULL and *rc set on failure. */
static uint8_t *run(const resize_spec *sp, const resize_src *src, resize_scratch *scr, int *rc)
{
    sink s = {.w = sp->win_w, .h = sp->win_h};
    s.px = calloc((size_t)sp->win_w * sp->win_h * 3 + 1, 1);
    resize_scratch local = {0};
    *rc = resize_rgb8(sp, src, sink_cb, &s, scr ? scr : &local);
    resize_scratch_free(&local);
    if (*rc == 0) {
        ck_assert_msg(!s.bad, "store callback got rows out of order or of the wrong width");
        ck_assert_int_eq(s.next_row, sp->win_h);
        return s.px;
    }
    ck_assert_int_eq(s.next_row, 0); /* nothing stored on failure */
    free(s.px);
    return NULL;
}

/* Resize into a new buffer, which must succeed. */
static uint8_t *run_ok(const resize_spec *sp, const resize_src *src, resize_scratch *scr)
{
    int rc;
    uint8_t *out = run(sp, src, scr, &rc);
    ck_assert_int_eq(rc, 0);
    return out;
}

/* Resize, which must fail with want (and store nothing: see run). */
static void run_fails(const resize_spec *sp, const resize_src *src, resize_scratch *scr, int want)
{
    int rc;
    ck_assert_ptr_null(run(sp, src, scr, &rc));
    ck_assert_int_eq(rc, want);
}

static resize_src whole(const uint8_t *img, int w, int h)
{
    return (resize_src){.pixels = img, .stride = (size_t)w * 3, .w = w, .h = h};
}

/* A copy of img's region [x0,x1)x[y0,y1) (not empty) in a buffer of exactly that size,
 * so that ASan catches any read outside it. */
static uint8_t *crop(const uint8_t *img, int w, int x0, int y0, int x1, int y1, size_t *stride)
{
    size_t cw = (size_t)(x1 - x0) * 3;
    *stride = cw;
    uint8_t *c = malloc(cw * (size_t)(y1 - y0));
    for (int y = y0; y < y1; y++)
        memcpy(c + (size_t)(y - y0) * cw, img + ((size_t)y * w + x0) * 3, cw);
    return c;
}

static uint64_t rng_state = 12345;

static int rnd(int lo, int hi) /* inclusive */
{
    return lo + (int)(tu_rand(&rng_state) % (uint64_t)(hi - lo + 1));
}

static double rndf(double lo, double hi)
{
    return lo + (hi - lo) * (double)(tu_rand(&rng_state) >> 11) * (1.0 / 9007199254740992.0);
}

/* A new w x h RGB image: textured (tu_fill_rgb) from seed. */
static uint8_t *textured(int w, int h, uint64_t seed)
{
    uint8_t *img = malloc((size_t)w * h * 3);
    tu_fill_rgb(img, w, h, seed);
    return img;
}

/* A new w x h RGB image of random bytes (noise: every tap matters). */
static uint8_t *noise(int w, int h)
{
    uint8_t *img = malloc((size_t)w * h * 3);
    for (size_t b = 0; b < (size_t)w * h * 3; b++)
        img[b] = (uint8_t)tu_rand(&rng_state);
    return img;
}

/* The spec that resizes box (x0, y0, x1, y1) of a w x h image to ow x oh, windowed to the
 * whole output. */
static resize_spec whole_spec(int w, int h, double x0, double y0, double x1, double y1, int ow,
                              int oh)
{
    return (resize_spec){.in_w = w,
                         .in_h = h,
                         .box = {x0, y0, x1, y1},
                         .out_w = ow,
                         .out_h = oh,
                         .win_w = ow,
                         .win_h = oh};
}

/* A random window (not empty) of sp's output. */
static void random_window(resize_spec *sp)
{
    sp->win_x = rnd(0, sp->out_w - 1), sp->win_y = rnd(0, sp->out_h - 1);
    sp->win_w = rnd(1, sp->out_w - sp->win_x), sp->win_h = rnd(1, sp->out_h - sp->win_y);
}

/* A random valid spec for a w x h image: fractional or integral box or none, any
 * scale from 10x down to 8x up, a random window half of the time. */
static resize_spec random_spec(int w, int h)
{
    resize_spec sp = {.in_w = w, .in_h = h};
    int kind = rnd(0, 2);
    if (kind == 0) {
        sp.box[2] = w, sp.box[3] = h;
    } else if (kind == 1) {
        sp.box[0] = rnd(0, w - 1), sp.box[1] = rnd(0, h - 1);
        sp.box[2] = rnd((int)sp.box[0] + 1, w), sp.box[3] = rnd((int)sp.box[1] + 1, h);
    } else {
        do {
            sp.box[0] = rndf(0, w), sp.box[2] = rndf(0, w);
        } while (fabs(sp.box[0] - sp.box[2]) < 0.01);
        do {
            sp.box[1] = rndf(0, h), sp.box[3] = rndf(0, h);
        } while (fabs(sp.box[1] - sp.box[3]) < 0.01);
        if (sp.box[0] > sp.box[2]) {
            double t = sp.box[0];
            sp.box[0] = sp.box[2], sp.box[2] = t;
        }
        if (sp.box[1] > sp.box[3]) {
            double t = sp.box[1];
            sp.box[1] = sp.box[3], sp.box[3] = t;
        }
    }
    double f = exp(rndf(log(0.1), log(8.0)));
    sp.out_w = (int)fmax(1, fmin(160, round((sp.box[2] - sp.box[0]) * f)));
    sp.out_h = (int)fmax(1, fmin(160, round((sp.box[3] - sp.box[1]) * f * rndf(0.5, 2.0))));
    if (rnd(0, 1)) {
        random_window(&sp);
    } else {
        sp.win_w = sp.out_w, sp.win_h = sp.out_h;
    }
    return sp;
}

static const char *const path_name[] = {"auto", "portable", "avx2", "avx512"};

static int have_path(resize_path path)
{
    int ok = resize_force_path(path) == 0;
    resize_force_path(RESIZE_PATH_AUTO);
    if (!ok)
        fprintf(stderr, "check_resize: no %s on this CPU, that path is not tested\n",
                path_name[path]);
    return ok;
}

static int have_avx2(void)
{
    return have_path(RESIZE_PATH_AVX2);
}

/* The kernel paths this CPU has, portable first; returns how many. */
static int kernel_paths(resize_path paths[3])
{
    int n = 0;
    paths[n++] = RESIZE_PATH_PORTABLE;
    if (have_avx2())
        paths[n++] = RESIZE_PATH_AVX2;
    if (have_path(RESIZE_PATH_AVX512))
        paths[n++] = RESIZE_PATH_AVX512;
    return n;
}

static void assert_window_eq(const uint8_t *got, const uint8_t *full, const resize_spec *sp,
                             const char *what)
{
    for (int y = 0; y < sp->win_h; y++) {
        const uint8_t *a = got + (size_t)y * sp->win_w * 3;
        const uint8_t *b = full + ((size_t)(sp->win_y + y) * sp->out_w + sp->win_x) * 3;
        if (memcmp(a, b, (size_t)sp->win_w * 3) != 0) {
            int x = 0;
            while (a[x] == b[x])
                x++;
            ck_abort_msg("%s: %dx%d box (%.4f %.4f %.4f %.4f) -> %dx%d window %d,%d %dx%d: "
                         "row %d byte %d is %d, want %d",
                         what, sp->in_w, sp->in_h, sp->box[0], sp->box[1], sp->box[2], sp->box[3],
                         sp->out_w, sp->out_h, sp->win_x, sp->win_y, sp->win_w, sp->win_h, y, x,
                         a[x], b[x]);
        }
    }
}

/* Resize sp's window of src, which must succeed and equal that window of full (the whole
 * sp.out_w x sp.out_h output); what names the case in a failure. */
static void expect_window(const resize_spec *sp, const resize_src *src, resize_scratch *scr,
                          const uint8_t *full, const char *what)
{
    uint8_t *out = run_ok(sp, src, scr);
    assert_window_eq(out, full, sp, what);
    free(out);
}

/* ---- tests ----------------------------------------------------------------------------- */

START_TEST(identity_returns_input)
{
    int w = 37, h = 23;
    uint8_t *img = textured(w, h, 7);
    resize_spec sp = whole_spec(w, h, 0, 0, w, h, w, h);
    resize_src src = whole(img, w, h);
    for (int p = RESIZE_PATH_PORTABLE; p <= RESIZE_PATH_AVX2; p++) {
        if (resize_force_path((resize_path)p))
            continue;
        uint8_t *out = run_ok(&sp, &src, NULL);
        ck_assert_mem_eq(out, img, (size_t)w * h * 3);
        free(out);
        /* an integral box of the output's size is a crop (Pillow's crop path) */
        resize_spec c = whole_spec(w, h, 3, 4, 23, 14, 20, 10);
        out = run_ok(&c, &src, NULL);
        for (int y = 0; y < 10; y++)
            ck_assert_mem_eq(out + (size_t)y * 60, img + ((size_t)(y + 4) * w + 3) * 3, 60);
        free(out);
        int x0, y0, x1, y1;
        ck_assert_int_eq(resize_source_extent(&c, &x0, &y0, &x1, &y1), 0);
        ck_assert_int_eq(x0, 3);
        ck_assert_int_eq(y0, 4);
        ck_assert_int_eq(x1, 23);
        ck_assert_int_eq(y1, 14);
    }
    resize_force_path(RESIZE_PATH_AUTO);
    free(img);
}
END_TEST

START_TEST(constant_image_stays_constant)
{
    int w = 61, h = 47;
    uint8_t *img = malloc((size_t)w * h * 3);
    for (int i = 0; i < 40; i++) {
        uint8_t rgb[3] = {(uint8_t)rnd(0, 255), (uint8_t)rnd(0, 255), (uint8_t)rnd(0, 255)};
        if (i == 0)
            rgb[0] = rgb[1] = rgb[2] = 255; /* clipping must not creep in */
        for (int p = 0; p < w * h; p++)
            memcpy(img + 3 * (size_t)p, rgb, 3);
        resize_spec sp = random_spec(w, h);
        resize_src src = whole(img, w, h);
        uint8_t *out = run_ok(&sp, &src, NULL);
        for (int p = 0; p < sp.win_w * sp.win_h; p++)
            ck_assert_mem_eq(out + 3 * (size_t)p, rgb, 3);
        free(out);
    }
    free(img);
}
END_TEST

/* Every window of random specs equals the window of the reference, with the source cut
 * to exactly resize_source_extent, on every kernel path. */
START_TEST(matches_reference_windows_and_extents)
{
    resize_path paths[3];
    int npaths = kernel_paths(paths);
    resize_scratch scr = {0};
    for (int i = 0; i < 300; i++) {
        int w = rnd(1, 90), h = rnd(1, 90);
        if (i % 20 == 0) /* tall and wide images exercise Pillow's pass order */
            h = rnd(100, 300);
        else if (i % 20 == 10)
            w = rnd(100, 300);
        uint8_t *img = textured(w, h, (uint64_t)i);
        for (int p = 0; p < w * h / 50; p++) /* saturated specks */
            img[3 * (size_t)rnd(0, w * h - 1) + (size_t)rnd(0, 2)] = rnd(0, 1) ? 255 : 0;
        resize_spec sp = random_spec(w, h);
        if (i == 1 || i == 2) { /* extreme downscales: hundreds of taps */
            w = i == 1 ? 5 : 1000, h = i == 1 ? 1000 : 5;
            free(img);
            img = textured(w, h, (uint64_t)i);
            sp = whole_spec(w, h, 0.5, 1.5, w - 0.25, h - 1, i == 1 ? 3 : 2, i == 1 ? 2 : 3);
        }
        uint8_t *full = ref_resize(img, w, h, sp.box, sp.out_w, sp.out_h);
        int x0, y0, x1, y1;
        ck_assert_int_eq(resize_source_extent(&sp, &x0, &y0, &x1, &y1), 0);
        ck_assert(0 <= x0 && x0 < x1 && x1 <= w && 0 <= y0 && y0 < y1 && y1 <= h);
        size_t cstride;
        uint8_t *c = crop(img, w, x0, y0, x1, y1, &cstride);
        resize_src src = {
            .pixels = c, .stride = cstride, .x0 = x0, .y0 = y0, .w = x1 - x0, .h = y1 - y0};
        for (int p = 0; p < npaths; p++) {
            ck_assert_int_eq(resize_force_path(paths[p]), 0);
            expect_window(&sp, &src, &scr, full, path_name[paths[p]]);
        }
        free(c);
        free(full);
        free(img);
    }
    resize_force_path(RESIZE_PATH_AUTO);
    resize_scratch_free(&scr);
}
END_TEST

/* Pillow takes the box as C floats: far from the origin the rounding moves the sample
 * points enough to change pixels. */
START_TEST(box_has_float_precision)
{
    int w = 30011, h = 3;
    uint8_t *img = noise(w, h);
    resize_src src = whole(img, w, h);
    for (int i = 0; i < 40; i++) {
        double x0 = rndf(10000, 29000);
        resize_spec sp = {.in_w = w,
                          .in_h = h,
                          .box = {x0, 0, x0 + rndf(20, 900), h},
                          .out_w = rnd(20, 200),
                          .out_h = h};
        sp.win_w = sp.out_w, sp.win_h = sp.out_h;
        uint8_t *full = ref_resize(img, w, h, sp.box, sp.out_w, sp.out_h);
        expect_window(&sp, &src, NULL, full, "float box");
        free(full);
    }
    free(img);
}
END_TEST

START_TEST(window_equals_part_of_full_output)
{
    int w = 500, h = 375;
    uint8_t *img = textured(w, h, 99);
    resize_src src = whole(img, w, h);
    /* eval: shorter side to 256, centre 224; train: a crop box to 224 */
    resize_spec specs[] = {
        whole_spec(w, h, 0, 0, w, h, 341, 256),
        whole_spec(w, h, 100.25, 37.5, 400.75, 337, 224, 224),
        whole_spec(w, h, 10, 300, 60, 350, 224, 224),
        whole_spec(w, h, 0, 0, w, h, 62, 47),
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        resize_spec full = specs[i];
        uint8_t *all = run_ok(&full, &src, NULL);
        for (int j = 0; j < 20; j++) {
            resize_spec sp = full;
            random_window(&sp);
            if (j == 0) /* the centre crop */
                sp.win_w = sp.win_h = 30, sp.win_x = (sp.out_w - 30) / 2,
                sp.win_y = (sp.out_h - 30) / 2;
            expect_window(&sp, &src, NULL, all, "window");
        }
        free(all);
    }
    free(img);
}
END_TEST

/* The extent is exact: a source one pixel short on any side is refused. */
START_TEST(extent_is_exact)
{
    int w = 120, h = 90;
    uint8_t *img = textured(w, h, 5);
    for (int i = 0; i < 100; i++) {
        resize_spec sp = random_spec(w, h);
        int x0, y0, x1, y1;
        ck_assert_int_eq(resize_source_extent(&sp, &x0, &y0, &x1, &y1), 0);
        resize_src src = {.pixels = img + ((size_t)y0 * w + x0) * 3,
                          .stride = (size_t)w * 3,
                          .x0 = x0,
                          .y0 = y0,
                          .w = x1 - x0,
                          .h = y1 - y0};
        free(run_ok(&sp, &src, NULL));
        for (int side = 0; side < 4; side++) {
            resize_src s = src;
            if (side == 0)
                s.x0++, s.w--, s.pixels += 3;
            else if (side == 1)
                s.y0++, s.h--, s.pixels += s.stride;
            else if (side == 2)
                s.w--;
            else
                s.h--;
            run_fails(&sp, &s, NULL, -EINVAL);
        }
    }
    free(img);
}
END_TEST

START_TEST(invalid_specs_rejected)
{
    uint8_t img[4 * 4 * 3] = {0};
    resize_src src = whole(img, 4, 4);
    resize_spec ok = whole_spec(4, 4, 0, 0, 4, 4, 2, 2);
    ck_assert_int_eq(resize_check_spec(&ok), 0);
    resize_spec bad[24];
    int n = 0;
    for (int i = 0; i < 24; i++)
        bad[i] = ok;
    bad[n++].in_w = 0;
    bad[n++].in_h = -1;
    bad[n++].out_w = 0;
    bad[n++].out_h = -3;
    bad[n++].in_w = RESIZE_MAX_SIDE + 1;
    bad[n++].out_h = RESIZE_MAX_SIDE + 1;
    bad[n++].box[0] = -0.5;
    bad[n++].box[1] = -1;
    bad[n++].box[2] = 4.01;
    bad[n++].box[3] = 5;
    bad[n].box[0] = 2, bad[n++].box[2] = 2; /* empty */
    bad[n].box[1] = 3, bad[n++].box[3] = 1; /* inverted */
    bad[n++].box[0] = NAN;
    bad[n++].box[3] = NAN;
    bad[n++].box[2] = INFINITY;
    bad[n++].win_w = 0;
    bad[n++].win_h = 3; /* window taller than the output */
    bad[n++].win_x = -1;
    bad[n].win_x = 1, bad[n++].win_w = 2;
    bad[n++].win_y = 2;
    for (int i = 0; i < n; i++) {
        int x0, y0, x1, y1;
        ck_assert_msg(resize_check_spec(&bad[i]) == -EINVAL, "bad spec %d accepted", i);
        ck_assert_int_eq(resize_source_extent(&bad[i], &x0, &y0, &x1, &y1), -EINVAL);
        run_fails(&bad[i], &src, NULL, -EINVAL);
    }
    ck_assert_int_eq(resize_check_spec(NULL), -EINVAL);

    /* bad sources and arguments */
    resize_src s = src;
    s.pixels = NULL;
    run_fails(&ok, &s, NULL, -EINVAL);
    s = src, s.stride = 11;
    run_fails(&ok, &s, NULL, -EINVAL);
    s = src, s.x0 = 1;
    run_fails(&ok, &s, NULL, -EINVAL);
    s = src, s.h = -1;
    run_fails(&ok, &s, NULL, -EINVAL);
    resize_scratch scr = {0};
    sink sk = {.w = 2, .h = 2, .px = img};
    ck_assert_int_eq(resize_rgb8(&ok, &src, NULL, &sk, &scr), -EINVAL);
    ck_assert_int_eq(resize_rgb8(&ok, NULL, sink_cb, &sk, &scr), -EINVAL);
    ck_assert_int_eq(resize_rgb8(&ok, &src, sink_cb, &sk, NULL), -EINVAL);
    ck_assert_int_eq(resize_rgb8(NULL, &src, sink_cb, &sk, &scr), -EINVAL);
    resize_scratch_free(&scr);
    resize_scratch_free(NULL);
    ck_assert_int_eq(resize_force_path((resize_path)7), -EINVAL);
}
END_TEST

/* Each SIMD path (AVX2, AVX-512) gives the portable path's bytes on noise, up to 700 px
 * wide: every tap count and every tail of the 8-output groups and 32-/64-byte steps. */
START_TEST(simd_equals_portable)
{
    resize_path paths[3];
    int npaths = kernel_paths(paths);
    resize_scratch scr = {0};
    for (int i = 0; i < 120; i++) {
        int w = rnd(1, 700), h = rnd(1, 500);
        uint8_t *img = noise(w, h);
        resize_spec sp = random_spec(w, h);
        if (i % 4 == 0) /* larger outputs too */
            sp.out_w = sp.win_w = rnd(1, 400), sp.out_h = sp.win_h = rnd(1, 400),
            sp.win_x = sp.win_y = 0;
        resize_src src = whole(img, w, h);
        ck_assert_int_eq(resize_force_path(RESIZE_PATH_PORTABLE), 0);
        uint8_t *a = run_ok(&sp, &src, &scr);
        resize_spec win = sp;
        win.win_x = win.win_y = 0, win.out_w = win.win_w, win.out_h = win.win_h;
        for (int p = 1; p < npaths; p++) {
            ck_assert_int_eq(resize_force_path(paths[p]), 0);
            ck_assert_int_eq(resize_active_path(), paths[p]);
            uint8_t *b = run_ok(&sp, &src, &scr);
            assert_window_eq(b, a, &win, path_name[paths[p]]);
            free(b);
        }
        free(a);
        free(img);
    }
    resize_force_path(RESIZE_PATH_AUTO);
    resize_scratch_free(&scr);
}
END_TEST

/* The path resize_rgb8 takes with BATCHFS_RESIZE=v set before its first resize (in a
 * child: the variable is read once per process); what it printed on stderr goes to err. */
static resize_path path_with_env(const char *v, char *err, size_t errlen)
{
    char tmpl[] = "/tmp/check_resize_err.XXXXXX";
    int fd = mkstemp(tmpl);
    ck_assert_int_ge(fd, 0);
    unlink(tmpl);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(fd, 2);
        setenv("BATCHFS_RESIZE", v, 1);
        _exit((int)resize_active_path());
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st));
    ssize_t n = pread(fd, err, errlen - 1, 0);
    err[n > 0 ? n : 0] = '\0';
    close(fd);
    return (resize_path)WEXITSTATUS(st);
}

/* BATCHFS_RESIZE caps the path the CPU would get; an unknown value is said and ignored. */
START_TEST(env_caps_the_path)
{
    ck_assert_int_eq(resize_parse_path("portable"), RESIZE_PATH_PORTABLE);
    ck_assert_int_eq(resize_parse_path("avx2"), RESIZE_PATH_AVX2);
    ck_assert_int_eq(resize_parse_path("avx512"), RESIZE_PATH_AVX512);
    ck_assert_int_eq(resize_parse_path("auto"), RESIZE_PATH_AUTO);
    ck_assert_int_eq(resize_parse_path("AVX2"), -1);
    ck_assert_int_eq(resize_parse_path(""), -1);
    ck_assert_int_eq(resize_parse_path(NULL), -1);
    resize_path paths[3];
    resize_path best = paths[kernel_paths(paths) - 1];
    char err[512];
    ck_assert_int_eq(path_with_env("portable", err, sizeof err), RESIZE_PATH_PORTABLE);
    ck_assert_str_eq(err, "");
    ck_assert_int_eq(path_with_env("avx2", err, sizeof err),
                     have_avx2() ? RESIZE_PATH_AVX2 : RESIZE_PATH_PORTABLE);
    ck_assert_int_eq(path_with_env("avx512", err, sizeof err), best);
    ck_assert_int_eq(path_with_env("auto", err, sizeof err), best);
    ck_assert_int_eq(path_with_env("sse9", err, sizeof err), best);
    ck_assert_msg(strstr(err, "BATCHFS_RESIZE=sse9 is not auto, portable, avx2 or avx512"),
                  "stderr: %s", err);
}
END_TEST

START_TEST(scratch_reuse_across_sizes)
{
    int w = 300, h = 200;
    uint8_t *img = textured(w, h, 11);
    resize_src src = whole(img, w, h);
    resize_spec specs[] = {
        whole_spec(w, h, 0, 0, w, h, 17, 9),           whole_spec(w, h, 0, 0, w, h, 600, 400),
        whole_spec(w, h, 5.5, 7.25, 250, 190, 3, 200), whole_spec(w, h, 0, 0, w, h, 1, 1),
        whole_spec(w, h, 1, 2, 101, 102, 224, 224),
    };
    int ns = (int)(sizeof specs / sizeof specs[0]);
    uint8_t *expect[5];
    for (int i = 0; i < ns; i++)
        expect[i] = run_ok(&specs[i], &src, NULL); /* fresh scratch each */
    resize_scratch scr = {0};
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < ns; i++) {
            int j = round == 1 ? ns - 1 - i : i;
            uint8_t *got = run_ok(&specs[j], &src, &scr);
            ck_assert_mem_eq(got, expect[j], (size_t)specs[j].win_w * specs[j].win_h * 3);
            free(got);
        }
    size_t cap = scr.cap;
    int rc;
    free(run(&specs[0], &src, &scr, &rc)); /* a warm scratch does not grow or move */
    ck_assert_uint_eq(scr.cap, cap);
    resize_scratch_free(&scr);
    ck_assert_ptr_null(scr.mem);
    for (int i = 0; i < ns; i++)
        free(expect[i]);
    free(img);
}
END_TEST

START_TEST(enomem_stores_nothing)
{
    int w = 64, h = 64;
    uint8_t *img = textured(w, h, 3);
    resize_src src = whole(img, w, h);
    resize_spec sp = whole_spec(w, h, 0, 0, w, h, 50, 40);
    resize_scratch scr = {0};
    resize_test_limit_scratch(64); /* too small for the plans */
    run_fails(&sp, &src, &scr, -ENOMEM);
    resize_test_limit_scratch(4096); /* the plans fit, the intermediate rows do not */
    run_fails(&sp, &src, &scr, -ENOMEM);
    resize_test_limit_scratch(0);
    free(run_ok(&sp, &src, &scr));
    resize_scratch_free(&scr);
    free(img);
}
END_TEST

/* spec with field f (0..11, see below) changed, still valid for an image of at least
 * (in_w + 20) x (in_h + 20); may stay equal when the field has no room to move. */
static resize_spec spec_changed(resize_spec sp, int f)
{
    double bw = sp.box[2] - sp.box[0], bh = sp.box[3] - sp.box[1];
    switch (f) {
    case 0:
        sp.in_w += rnd(1, 20);
        break; /* taps clamp to the image */
    case 1:
        sp.in_h += rnd(1, 20);
        break;
    case 2:
        sp.box[0] += bw / 4;
        break;
    case 3:
        sp.box[1] += bh / 4;
        break;
    case 4:
        sp.box[2] -= bw / 4;
        break;
    case 5:
        sp.box[3] -= bh / 4;
        break;
    case 6:
        sp.out_w += rnd(1, 5);
        break; /* the window still fits */
    case 7:
        sp.out_h += rnd(1, 5);
        break;
    case 8:
        if (sp.win_x > 0)
            sp.win_x--;
        else if (sp.win_x + sp.win_w < sp.out_w)
            sp.win_x++;
        break;
    case 9:
        if (sp.win_y > 0)
            sp.win_y--;
        else if (sp.win_y + sp.win_h < sp.out_h)
            sp.win_y++;
        break;
    case 10:
        sp.win_w += sp.win_w > 1 ? -1 : sp.win_x + sp.win_w < sp.out_w;
        break;
    default:
        sp.win_h += sp.win_h > 1 ? -1 : sp.win_y + sp.win_h < sp.out_h;
        break;
    }
    ck_assert_int_eq(resize_check_spec(&sp), 0);
    return sp;
}

/* resize sp of src with scr must equal a fresh scratch's resize */
static void expect_fresh(const resize_spec *sp, const resize_src *src, resize_scratch *scr,
                         const char *what)
{
    uint8_t *want = run_ok(sp, src, NULL), *got = run_ok(sp, src, scr);
    char msg[160];
    snprintf(msg, sizeof msg, "%s (window %d,%d %dx%d of %dx%d)", what, sp->win_x, sp->win_y,
             sp->win_w, sp->win_h, sp->out_w, sp->out_h);
    resize_spec w = *sp; /* got and want hold the window only */
    w.win_x = w.win_y = 0, w.out_w = w.win_w, w.out_h = w.win_h;
    assert_window_eq(got, want, &w, msg);
    free(want);
    free(got);
}

/* resize_plan_extent gives resize_source_extent's extent, and the coefficients it keeps
 * in the scratch serve only the next resize_rgb8 of an equal spec: a spec differing in
 * any one field, a second resize, or a plan replaced by another all resize as a fresh
 * scratch does. */
START_TEST(planned_coefficients_serve_only_their_spec)
{
    resize_path paths[3];
    int npaths = kernel_paths(paths);
    resize_scratch scr = {0};
    for (int i = 0; i < 480; i++) {
        int w = rnd(1, 90), h = rnd(1, 90);
        if (i % 20 == 0) /* both pass orders */
            h = rnd(100, 300);
        else if (i % 20 == 10)
            w = rnd(100, 300);
        int iw = w + 20, ih = h + 20; /* room for specs with a larger image */
        uint8_t *img = noise(iw, ih);
        resize_src all = whole(img, iw, ih);
        resize_spec a = random_spec(w, h), b = spec_changed(a, i % 12);
        int x0, y0, x1, y1, e[4];
        ck_assert_int_eq(resize_source_extent(&a, &e[0], &e[1], &e[2], &e[3]), 0);
        size_t cstride;
        uint8_t *c = crop(img, iw, e[0], e[1], e[2], e[3], &cstride);
        resize_src cut = {.pixels = c,
                          .stride = cstride,
                          .x0 = e[0],
                          .y0 = e[1],
                          .w = e[2] - e[0],
                          .h = e[3] - e[1]};
        for (int p = 0; p < npaths; p++) {
            ck_assert_int_eq(resize_force_path(paths[p]), 0);
            ck_assert_int_eq(resize_plan_extent(&a, &scr, &x0, &y0, &x1, &y1), 0);
            ck_assert(x0 == e[0] && y0 == e[1] && x1 == e[2] && y1 == e[3]);
            expect_fresh(&b, &all, &scr, "planned a, resized b");

            ck_assert_int_eq(resize_plan_extent(&a, &scr, &x0, &y0, &x1, &y1), 0);
            expect_fresh(&a, &cut, &scr, "planned a, resized a");
            expect_fresh(&a, &cut, &scr, "planned a, resized a twice");

            ck_assert_int_eq(resize_plan_extent(&a, &scr, &x0, &y0, &x1, &y1), 0);
            ck_assert_int_eq(resize_plan_extent(&b, &scr, &x0, &y0, &x1, &y1), 0);
            expect_fresh(&a, &all, &scr, "planned a then b, resized a");
        }
        free(c);
        free(img);
    }
    resize_force_path(RESIZE_PATH_AUTO);

    /* a scratch that cannot grow still gives the extent, and keeps nothing (not even
     * the plan of an earlier spec) */
    int w = 64, h = 48, x0, y0, x1, y1, e[4];
    uint8_t *img = textured(w, h, 8);
    resize_src src = whole(img, w, h);
    resize_spec sp = whole_spec(w, h, 3.5, 2, 60, 47.25, 20, 30);
    resize_spec big = whole_spec(w, h, 0, 0, w, h, 5000, 4000);
    ck_assert_int_eq(resize_source_extent(&big, &e[0], &e[1], &e[2], &e[3]), 0);
    resize_scratch_free(&scr);
    ck_assert_int_eq(resize_plan_extent(&sp, &scr, &x0, &y0, &x1, &y1), 0);
    ck_assert_int_eq(scr.planned, 1);
    resize_test_limit_scratch(scr.cap); /* big's plans do not fit */
    ck_assert_int_eq(resize_plan_extent(&big, &scr, &x0, &y0, &x1, &y1), 0);
    ck_assert(x0 == e[0] && y0 == e[1] && x1 == e[2] && y1 == e[3]);
    ck_assert_int_eq(scr.planned, 0);
    resize_test_limit_scratch(0);
    expect_fresh(&sp, &src, &scr, "planned without memory");
    ck_assert_int_eq(resize_plan_extent(NULL, &scr, &x0, &y0, &x1, &y1), -EINVAL);
    ck_assert_int_eq(resize_plan_extent(&sp, NULL, &x0, &y0, &x1, &y1), -EINVAL);
    resize_scratch_free(&scr);
    free(img);
}
END_TEST

static Suite *resize_suite(void)
{
    Suite *s = suite_create("resize");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120); /* the reference is slow under sanitizers */
    tcase_add_test(tc, identity_returns_input);
    tcase_add_test(tc, constant_image_stays_constant);
    tcase_add_test(tc, matches_reference_windows_and_extents);
    tcase_add_test(tc, box_has_float_precision);
    tcase_add_test(tc, window_equals_part_of_full_output);
    tcase_add_test(tc, extent_is_exact);
    tcase_add_test(tc, invalid_specs_rejected);
    tcase_add_test(tc, simd_equals_portable);
    tcase_add_test(tc, env_caps_the_path);
    tcase_add_test(tc, scratch_reuse_across_sizes);
    tcase_add_test(tc, enomem_stores_nothing);
    tcase_add_test(tc, planned_coefficients_serve_only_their_spec);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(resize_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed != 0;
}
