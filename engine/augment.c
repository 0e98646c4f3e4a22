/* augment.c — sample geometry and the fused output writer (see augment.h). */
#include "engine/augment.h"
#include "engine/imgops.h"
#include "engine/rng.h"
#include "base/endian.h"

#include <errno.h>
#include <math.h>
#include <string.h>

/* torchvision RandomResizedCrop.get_params; Python round() is half-to-even = rint(). */
static void random_resized_crop(const bfs_pipeline_opts *o, bfs_rng *r, int W, int H, double box[4])
{
    double area = (double)W * H;
    double lr0 = log(o->ratio[0]), lr1 = log(o->ratio[1]);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * bfs_rng_uniform_range(r, o->scale[0], o->scale[1]);
        double aspect = exp(bfs_rng_uniform_range(r, lr0, lr1));
        int w = (int)rint(sqrt(target * aspect));
        int h = (int)rint(sqrt(target / aspect));
        if (0 < w && w <= W && 0 < h && h <= H) {
            int top = (int)bfs_rng_int(r, 0, H - h);
            int left = (int)bfs_rng_int(r, 0, W - w);
            box[0] = left, box[1] = top, box[2] = left + w, box[3] = top + h;
            return;
        }
    }
    double in_ratio = (double)W / H;
    int w, h;
    if (in_ratio < o->ratio[0]) {
        w = W;
        h = (int)rint(w / o->ratio[0]);
    } else if (in_ratio > o->ratio[1]) {
        h = H;
        w = (int)rint(h * o->ratio[1]);
    } else {
        w = W, h = H;
    }
    w = w < 1 ? 1 : w > W ? W : w;
    h = h < 1 ? 1 : h > H ? H : h;
    int top = (H - h) / 2, left = (W - w) / 2;
    box[0] = left, box[1] = top, box[2] = left + w, box[3] = top + h;
}

int bfs_augment_geometry(const bfs_pipeline_opts *o, uint64_t epoch, uint64_t index, int W, int H,
                         bfs_geometry *g)
{
    if (W <= 0 || H <= 0)
        return -EINVAL;
    memset(g, 0, sizeof *g);
    resize_spec *s = &g->spec;
    uint32_t sh, sw;
    bfs_pipeline_size_at(o, epoch, &sh, &sw);
    int ow = (int)sw, oh = (int)sh;
    s->in_w = W, s->in_h = H;
    s->box[2] = W, s->box[3] = H;
    s->out_w = s->win_w = ow;
    s->out_h = s->win_h = oh;
    if (o->augment == BFS_AUG_TRAIN) {
        bfs_rng r;
        bfs_rng_init(&r, o->seed, epoch, index, BFS_RNG_STREAM_CROP);
        random_resized_crop(o, &r, W, H, s->box);
        /* crop, then resize the crop as an image of its own (torchvision's
         * F.resized_crop): the spec's image is the crop */
        g->origin_x = (int)s->box[0], g->origin_y = (int)s->box[1];
        s->in_w = (int)(s->box[2] - s->box[0]);
        s->in_h = (int)(s->box[3] - s->box[1]);
        s->box[0] = s->box[1] = 0;
        s->box[2] = s->in_w, s->box[3] = s->in_h;
        bfs_rng_init(&r, o->seed, epoch, index, BFS_RNG_STREAM_FLIP);
        g->flip = bfs_rng_uniform(&r) < o->flip;
    } else if (o->augment == BFS_AUG_EVAL) {
        /* Resize(short side S) as torchvision computes it, then CenterCrop(oh, ow). */
        int S = (int)floor((ow < oh ? ow : oh) / 0.875);
        int shorter = W <= H ? W : H, longer = W <= H ? H : W;
        int ns = S, nl = (int)((double)S * longer / shorter);
        int nw = W <= H ? ns : nl, nh = W <= H ? nl : ns;
        if (nw < ow || nh < oh) { /* non-square output wider than the resize: cover it */
            double f = fmax((double)ow / W, (double)oh / H);
            nw = (int)ceil(W * f), nh = (int)ceil(H * f);
            nw = nw < ow ? ow : nw, nh = nh < oh ? oh : nh;
        }
        s->out_w = nw, s->out_h = nh;
        s->win_x = (int)rint((nw - ow) / 2.0);
        s->win_y = (int)rint((nh - oh) / 2.0);
    }
    return 0;
}

uint32_t bfs_augment_boxes(const bfs_geometry *g, const float *in, uint32_t n, double min_area,
                           float *out, uint32_t *keep)
{
    const resize_spec *s = &g->spec;
    double sx = s->out_w / (s->box[2] - s->box[0]), sy = s->out_h / (s->box[3] - s->box[1]);
    double ww = s->win_w, wh = s->win_h;
    uint32_t kept = 0;
    for (uint32_t i = 0; i < n; i++) {
        const float *b = in + 4 * (size_t)i;
        double x0 = ((b[0] - g->origin_x) - s->box[0]) * sx - s->win_x;
        double y0 = ((b[1] - g->origin_y) - s->box[1]) * sy - s->win_y;
        double x1 = ((b[2] - g->origin_x) - s->box[0]) * sx - s->win_x;
        double y1 = ((b[3] - g->origin_y) - s->box[1]) * sy - s->win_y;
        x0 = fmin(fmax(x0, 0), ww), x1 = fmin(fmax(x1, 0), ww); /* NaN: fmax gives 0 */
        y0 = fmin(fmax(y0, 0), wh), y1 = fmin(fmax(y1, 0), wh);
        if (!(x1 > x0 && y1 > y0 && (x1 - x0) * (y1 - y0) >= min_area) || !isfinite(b[0]) ||
            !isfinite(b[1]) || !isfinite(b[2]) || !isfinite(b[3]))
            continue;
        if (g->flip) {
            double t = x0;
            x0 = ww - x1, x1 = ww - t;
        }
        float *o = out + 4 * (size_t)kept;
        o[0] = (float)x0, o[1] = (float)y0, o[2] = (float)x1, o[3] = (float)y1;
        keep[kept++] = i;
    }
    return kept;
}

/* ---- recipe ops: ColorJitter, RandomGrayscale, RandAugment, TrivialAugmentWide,
 * AutoAugment (torchvision.transforms.v2, docs/augment.md) -------------------------- */

int bfs_augment_has_ops(const bfs_pipeline_opts *o)
{
    return o->augment == BFS_AUG_TRAIN &&
           (o->jitter[0] > 0 || o->jitter[1] > 0 || o->jitter[2] > 0 || o->jitter[3] > 0 ||
            o->grayscale_p > 0 || o->randaug[0] || o->trivialaug || o->autoaug);
}

enum { SPACE_RAND, SPACE_WIDE }; /* RandAugment's and AutoAugment's space; TrivialAugmentWide's */

/* The policies draw from the first fourteen ops, in _AUGMENTATION_SPACE's order. */
#define POLICY_OPS 14
_Static_assert(BFS_OP_IDENTITY == 0 && BFS_OP_EQUALIZE == POLICY_OPS - 1,
               "RandAugment's ops are BFS_OP_IDENTITY..BFS_OP_EQUALIZE in order");

/*
 * Op `op` at magnitude bin `bin` of `bins` in `space` for a w x h image, as
 * _apply_image_or_video_transform receives it: the table's float32 value (torch.linspace
 * or the posterize formula), negated when the op is signed and `negate`; then made into
 * bfs_imgop_apply's argument (1 + m for the factor ops, 255 * m for Solarize, int(m) bits
 * for Posterize).
 */
static double policy_magnitude(int space, int op, int bins, int bin, int w, int h, int negate)
{
    int wide = space == SPACE_WIDE;
    double hi = 0, m;
    switch (op) {
    case BFS_OP_SHEAR_X:
    case BFS_OP_SHEAR_Y:
        hi = wide ? 0.99 : 0.3;
        break;
    case BFS_OP_TRANSLATE_X:
        hi = wide ? 32.0 : 150.0 / 331.0 * w;
        break;
    case BFS_OP_TRANSLATE_Y:
        hi = wide ? 32.0 : 150.0 / 331.0 * h;
        break;
    case BFS_OP_ROTATE:
        hi = wide ? 135.0 : 30.0;
        break;
    case BFS_OP_BRIGHTNESS:
    case BFS_OP_COLOR:
    case BFS_OP_CONTRAST:
    case BFS_OP_SHARPNESS:
        hi = wide ? 0.99 : 0.9;
        break;
    case BFS_OP_POSTERIZE: {
        /* (8 - (torch.arange(bins) / ((bins - 1) / k))).round().int() */
        float q = (float)bin / (float)((bins - 1) / (wide ? 6.0 : 4.0));
        return (double)(int)rintf(8.0f - q);
    }
    case BFS_OP_SOLARIZE:
        return 255.0 * (double)bfs_imgop_linspace(1.0, 0.0, bins, bin);
    default:
        return 0; /* Identity, AutoContrast, Equalize, Invert: no magnitude */
    }
    m = (double)bfs_imgop_linspace(0.0, hi, bins, bin);
    if (negate)
        m = -m;
    if (op >= BFS_OP_BRIGHTNESS && op <= BFS_OP_SHARPNESS)
        return 1.0 + m;
    return m;
}

/* AutoAugmentPolicy.IMAGENET: 25 sub-policies of two (op, probability, magnitude bin of
 * 10; -1: none) */
static const struct {
    signed char op;
    double p;
    signed char bin;
} aa_imagenet[25][2] = {
    {{BFS_OP_POSTERIZE, 0.4, 8}, {BFS_OP_ROTATE, 0.6, 9}},
    {{BFS_OP_SOLARIZE, 0.6, 5}, {BFS_OP_AUTOCONTRAST, 0.6, -1}},
    {{BFS_OP_EQUALIZE, 0.8, -1}, {BFS_OP_EQUALIZE, 0.6, -1}},
    {{BFS_OP_POSTERIZE, 0.6, 7}, {BFS_OP_POSTERIZE, 0.6, 6}},
    {{BFS_OP_EQUALIZE, 0.4, -1}, {BFS_OP_SOLARIZE, 0.2, 4}},
    {{BFS_OP_EQUALIZE, 0.4, -1}, {BFS_OP_ROTATE, 0.8, 8}},
    {{BFS_OP_SOLARIZE, 0.6, 3}, {BFS_OP_EQUALIZE, 0.6, -1}},
    {{BFS_OP_POSTERIZE, 0.8, 5}, {BFS_OP_EQUALIZE, 1.0, -1}},
    {{BFS_OP_ROTATE, 0.2, 3}, {BFS_OP_SOLARIZE, 0.6, 8}},
    {{BFS_OP_EQUALIZE, 0.6, -1}, {BFS_OP_POSTERIZE, 0.4, 6}},
    {{BFS_OP_ROTATE, 0.8, 8}, {BFS_OP_COLOR, 0.4, 0}},
    {{BFS_OP_ROTATE, 0.4, 9}, {BFS_OP_EQUALIZE, 0.6, -1}},
    {{BFS_OP_EQUALIZE, 0.0, -1}, {BFS_OP_EQUALIZE, 0.8, -1}},
    {{BFS_OP_INVERT, 0.6, -1}, {BFS_OP_EQUALIZE, 1.0, -1}},
    {{BFS_OP_COLOR, 0.6, 4}, {BFS_OP_CONTRAST, 1.0, 8}},
    {{BFS_OP_ROTATE, 0.8, 8}, {BFS_OP_COLOR, 1.0, 2}},
    {{BFS_OP_COLOR, 0.8, 8}, {BFS_OP_SOLARIZE, 0.8, 7}},
    {{BFS_OP_SHARPNESS, 0.4, 7}, {BFS_OP_INVERT, 0.6, -1}},
    {{BFS_OP_SHEAR_X, 0.6, 5}, {BFS_OP_EQUALIZE, 1.0, -1}},
    {{BFS_OP_COLOR, 0.4, 0}, {BFS_OP_EQUALIZE, 0.6, -1}},
    {{BFS_OP_EQUALIZE, 0.4, -1}, {BFS_OP_SOLARIZE, 0.2, 4}},
    {{BFS_OP_SOLARIZE, 0.6, 5}, {BFS_OP_AUTOCONTRAST, 0.6, -1}},
    {{BFS_OP_INVERT, 0.6, -1}, {BFS_OP_EQUALIZE, 1.0, -1}},
    {{BFS_OP_COLOR, 0.6, 4}, {BFS_OP_CONTRAST, 1.0, 8}},
    {{BFS_OP_EQUALIZE, 0.8, -1}, {BFS_OP_EQUALIZE, 0.6, -1}},
};

int bfs_augment_ops(const bfs_pipeline_opts *o, uint64_t epoch, uint64_t index, int w, int h,
                    bfs_aug_op *ops)
{
    int n = 0;
    if (!bfs_augment_has_ops(o))
        return 0;
    bfs_rng r;
    const double *j = o->jitter;
    if (j[0] > 0 || j[1] > 0 || j[2] > 0 || j[3] > 0) {
        /* ColorJitter: torch.randperm(4), then a factor for each of the four */
        static const int jop[4] = {BFS_OP_BRIGHTNESS, BFS_OP_CONTRAST, BFS_OP_COLOR, BFS_OP_HUE};
        int order[4] = {0, 1, 2, 3};
        double f[4];
        bfs_rng_init(&r, o->seed, epoch, index, BFS_RNG_STREAM_JITTER);
        for (int i = 3; i > 0; i--) {
            int k = (int)bfs_rng_int(&r, 0, i), t = order[i];
            order[i] = order[k], order[k] = t;
        }
        for (int i = 0; i < 3; i++)
            f[i] = bfs_rng_uniform_range(&r, fmax(0, 1 - j[i]), 1 + j[i]);
        f[3] = bfs_rng_uniform_range(&r, -j[3], j[3]);
        for (int i = 0; i < 4; i++)
            if (j[order[i]] > 0)
                ops[n++] = (bfs_aug_op){jop[order[i]], f[order[i]]};
    }
    if (o->grayscale_p > 0) {
        bfs_rng_init(&r, o->seed, epoch, index, BFS_RNG_STREAM_GRAYSCALE);
        if (bfs_rng_uniform(&r) < o->grayscale_p)
            ops[n++] = (bfs_aug_op){BFS_OP_GRAYSCALE, 0};
    }
    bfs_rng_init(&r, o->seed, epoch, index, BFS_RNG_STREAM_POLICY);
    if (o->randaug[0]) { /* RandAugment: N ops, each (op, sign) */
        for (uint32_t i = 0; i < o->randaug[0]; i++) {
            int op = (int)bfs_rng_int(&r, 0, POLICY_OPS - 1);
            int neg = bfs_rng_uniform(&r) <= 0.5;
            ops[n++] = (bfs_aug_op){
                op, policy_magnitude(SPACE_RAND, op, 31, (int)o->randaug[1], w, h, neg)};
        }
    } else if (o->trivialaug) { /* TrivialAugmentWide: (op, bin, sign) */
        int op = (int)bfs_rng_int(&r, 0, POLICY_OPS - 1);
        int bin = (int)bfs_rng_int(&r, 0, 30);
        int neg = bfs_rng_uniform(&r) <= 0.5;
        ops[n++] = (bfs_aug_op){op, policy_magnitude(SPACE_WIDE, op, 31, bin, w, h, neg)};
    } else if (o->autoaug) { /* AutoAugment: a sub-policy, then (apply?, sign) per op */
        int k = (int)bfs_rng_int(&r, 0, 24);
        for (int i = 0; i < 2; i++) {
            double u = bfs_rng_uniform(&r);
            int neg = bfs_rng_uniform(&r) <= 0.5;
            if (u <= aa_imagenet[k][i].p) {
                int op = aa_imagenet[k][i].op, bin = aa_imagenet[k][i].bin;
                ops[n++] = (bfs_aug_op){
                    op, bin < 0 ? 0 : policy_magnitude(SPACE_RAND, op, 10, bin, w, h, neg)};
            }
        }
    }
    return n;
}

/* ---- erasing: timm's RandomErasing (random_erasing.py), one box --------------------- */

/* splitmix64: the erased values' generator, seeded from the sample's stream (a Philox
 * draw per value would cost more than the box) */
static inline uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void bfs_augment_normal2(uint64_t *state, float z[2])
{
    uint64_t u = splitmix64(state);
    float u1 = ((float)(u >> 40) + 1.0f) * 0x1p-24f;     /* (0, 1] */
    float u2 = (float)((u >> 8) & 0xffffffu) * 0x1p-24f; /* [0, 1) */
    float m = sqrtf(-2.0f * logf(u1)), a = 6.2831853f * u2;
    z[0] = m * cosf(a), z[1] = m * sinf(a);
}

int bfs_augment_erase_box(const bfs_pipeline_opts *o, uint64_t epoch, uint64_t index, int w, int h,
                          bfs_erase_box *b, bfs_rng *r)
{
    if (o->augment != BFS_AUG_TRAIN || !(o->erasing > 0))
        return 0;
    bfs_rng_init(r, o->seed, epoch, index, BFS_RNG_STREAM_ERASE);
    if (bfs_rng_uniform(r) >= o->erasing) /* timm: random.random() > p skips */
        return 0;
    double area = (double)w * h, la = log(0.3), lb = log(1 / 0.3);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = bfs_rng_uniform_range(r, 0.02, 1 / 3.0) * area;
        double aspect = exp(bfs_rng_uniform_range(r, la, lb));
        int eh = (int)rint(sqrt(target * aspect)), ew = (int)rint(sqrt(target / aspect));
        if (ew < w && eh < h) {
            b->top = (int)bfs_rng_int(r, 0, h - eh);
            b->left = (int)bfs_rng_int(r, 0, w - ew);
            b->h = eh, b->w = ew;
            return 1;
        }
    }
    return 0;
}

/* ---- batch-level mixing (timm's mixup.py, mode="batch") ---------------------------- */

int bfs_augment_targets(const bfs_pipeline_opts *o)
{
    return o->augment == BFS_AUG_TRAIN && (o->mixup > 0 || o->cutmix > 0 || o->label_smoothing > 0);
}

/* a standard normal draw (Box-Muller, the cosine branch) */
static double normal(bfs_rng *r)
{
    double u1 = 1.0 - bfs_rng_uniform(r), u2 = bfs_rng_uniform(r); /* u1 in (0, 1] */
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* Gamma(a, 1) by Marsaglia and Tsang (2000); a < 1 through Gamma(a + 1) * U^(1/a) */
static double gamma_draw(bfs_rng *r, double a)
{
    if (a < 1) {
        double u = 1.0 - bfs_rng_uniform(r); /* (0, 1] */
        return gamma_draw(r, a + 1) * pow(u, 1.0 / a);
    }
    double d = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = normal(r), v = 1.0 + c * x;
        if (v <= 0)
            continue;
        v = v * v * v;
        double u = 1.0 - bfs_rng_uniform(r);
        if (log(u) < 0.5 * x * x + d - d * v + d * log(v))
            return d * v;
    }
}

double bfs_augment_beta(bfs_rng *r, double a)
{
    double x = gamma_draw(r, a), y = gamma_draw(r, a);
    return x + y > 0 ? x / (x + y) : 0.5;
}

int bfs_augment_mix_draw(const bfs_pipeline_opts *o, uint64_t epoch, uint64_t batch, int w, int h,
                         bfs_mix_draw *d)
{
    memset(d, 0, sizeof *d);
    d->lam = 1;
    if (o->augment != BFS_AUG_TRAIN || !(o->mixup > 0 || o->cutmix > 0))
        return 0;
    bfs_rng r;
    bfs_rng_init(&r, o->seed, epoch, batch, BFS_RNG_STREAM_MIXUP);
    if (!(bfs_rng_uniform(&r) < o->mix_prob))
        return 0;
    int cut = o->cutmix > 0 && (!(o->mixup > 0) || bfs_rng_uniform(&r) < o->switch_prob);
    double lam = bfs_augment_beta(&r, cut ? o->cutmix : o->mixup);
    if (cut) { /* rand_bbox, then correct_lam */
        double ratio = sqrt(1 - lam);
        int ch = (int)(h * ratio), cw = (int)(w * ratio);
        int cy = (int)bfs_rng_int(&r, 0, h - 1), cx = (int)bfs_rng_int(&r, 0, w - 1);
        d->yl = cy - ch / 2 < 0 ? 0 : cy - ch / 2;
        d->yh = cy + (ch + 1) / 2 > h ? h : cy + (ch + 1) / 2; /* timm 1.0: (cut + 1) // 2 */
        d->xl = cx - cw / 2 < 0 ? 0 : cx - cw / 2;
        d->xh = cx + (cw + 1) / 2 > w ? w : cx + (cw + 1) / 2;
        lam = 1.0 - (double)(d->yh - d->yl) * (d->xh - d->xl) / ((double)h * w);
        d->cutmix = 1;
    }
    d->lam = lam;
    return lam != 1.0 || cut;
}

/* value v of an output element of type f->dtype at p, as a float */
static float load_value(const bfs_out_format *f, const uint8_t *p)
{
    if (f->dtype == BFS_OUT_U8)
        return (float)p[0];
    if (f->dtype == BFS_OUT_F32) {
        float v;
        memcpy(&v, p, 4);
        return v;
    }
    uint16_t hbits;
    memcpy(&hbits, p, 2);
    uint32_t x;
    if (f->dtype == BFS_OUT_BF16) {
        x = (uint32_t)hbits << 16;
    } else { /* IEEE half to float, exactly */
        uint32_t sign = (uint32_t)(hbits & 0x8000u) << 16, e = (hbits >> 10) & 31, m = hbits & 1023;
        if (e == 31)
            x = sign | 0x7f800000u | (m << 13);
        else if (e)
            x = sign | ((e + 112) << 23) | (m << 13);
        else if (!m)
            x = sign;
        else { /* subnormal: m * 2^-24 */
            float v = (float)m * 0x1p-24f;
            memcpy(&x, &v, 4);
            x |= sign;
        }
    }
    float v;
    memcpy(&v, &x, 4);
    return v;
}

static void store_value(const bfs_out_format *f, uint8_t *p, float v)
{
    if (f->dtype == BFS_OUT_U8) {
        float r = rintf(v);
        p[0] = (uint8_t)(r < 0 ? 0 : r > 255 ? 255 : r);
    } else if (f->dtype == BFS_OUT_F32) {
        memcpy(p, &v, 4);
    } else {
        uint16_t h = f->dtype == BFS_OUT_BF16 ? bfs_f32_to_bf16(v) : bfs_f32_to_f16(v);
        memcpy(p, &h, 2);
    }
}

void bfs_out_mix(const bfs_out_format *f, int w, int h, uint8_t *images, size_t sample_stride,
                 uint32_t n, const bfs_mix_draw *d)
{
    size_t e = f->elem, plane = (size_t)w * h, values = plane * 3;
    float lam = (float)d->lam, oml = (float)(1.0 - d->lam);
    for (uint32_t i = 0; i <= (n - 1) / 2 && n; i++) {
        uint32_t j = n - 1 - i;
        uint8_t *a = images + sample_stride * i, *b = images + sample_stride * j;
        if (d->cutmix) { /* the box's values trade places (i == j: nothing) */
            for (int c = 0; c < 3 && i != j; c++)
                for (int y = d->yl; y < d->yh; y++)
                    for (int x = d->xl; x < d->xh; x++) {
                        size_t at = (size_t)y * w + x;
                        at = (f->nchw ? c * plane + at : at * 3 + c) * e;
                        uint8_t t[4];
                        memcpy(t, a + at, e), memcpy(a + at, b + at, e), memcpy(b + at, t, e);
                    }
            continue;
        }
        for (size_t v = 0; v < values; v++) {
            float x = load_value(f, a + v * e), y = load_value(f, b + v * e);
            float mi = x * lam + y * oml, mj = y * lam + x * oml;
            store_value(f, a + v * e, mi);
            if (i != j)
                store_value(f, b + v * e, mj);
        }
    }
}

void bfs_out_targets(float *targets, const uint8_t *labels, uint32_t n, uint32_t classes,
                     double smoothing, double lam)
{
    float off = (float)(smoothing / classes), on = (float)(1.0 - smoothing + smoothing / classes);
    float l = (float)lam, oml = (float)(1.0 - lam);
    for (uint32_t i = 0; i < n; i++) {
        float *t = targets + (size_t)i * classes;
        uint64_t y1 = bfs_ld64(labels + 8ull * i), y2 = bfs_ld64(labels + 8ull * (n - 1 - i));
        for (uint32_t c = 0; c < classes; c++) {
            float a = c == y1 ? on : off, b = c == y2 ? on : off;
            t[c] = a * l + b * oml;
        }
    }
}

/* ---- output ------------------------------------------------------------------------ */

uint16_t bfs_f32_to_f16(float v)
{
    uint32_t x;
    memcpy(&x, &v, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
    if (absx >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (absx < 0x38800000u) { /* subnormal half (or zero): scale and round */
        float f;
        memcpy(&f, &absx, 4);
        uint32_t m = (uint32_t)lrintf(f * 16777216.0f); /* f / 2^-24, rint = half-even */
        return (uint16_t)(sign | m);
    }
    uint32_t mant = absx & 0x7fffffu;
    uint32_t exp = (absx >> 23) - 112;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1)))
        h++;
    return (uint16_t)(sign | h);
}

uint16_t bfs_f32_to_bf16(float v)
{
    uint32_t x;
    memcpy(&x, &v, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u); /* quiet nan */
    x += 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

void bfs_out_format_init(bfs_out_format *f, const bfs_pipeline_opts *o)
{
    memset(f, 0, sizeof *f);
    f->dtype = o->dtype;
    f->nchw = o->layout == BFS_LAYOUT_NCHW;
    f->out_w = (int)o->out_w, f->out_h = (int)o->out_h;
    f->elem = o->dtype == BFS_OUT_U8 ? 1 : o->dtype == BFS_OUT_F32 ? 4 : 2;
    for (int c = 0; c < 3; c++)
        for (int v = 0; v < 256; v++) {
            /* (x / 255 - mean) / std in double, then one rounding to the output type */
            double x = v / 255.0;
            if (o->normalize)
                x = (x - o->mean[c]) / o->std[c];
            f->f32[c][v] = (float)x;
            f->f16[c][v] =
                o->dtype == BFS_OUT_BF16 ? bfs_f32_to_bf16((float)x) : bfs_f32_to_f16((float)x);
        }
}

size_t bfs_pipeline_out_levels(const bfs_pipeline_opts *o, uint8_t *lut)
{
    bfs_out_format f;
    bfs_out_format_init(&f, o);
    for (int ch = 0; ch < 3; ch++)
        for (int v = 0; v < 256; v++) {
            uint8_t *d = lut + ((size_t)ch * 256 + (size_t)v) * f.elem;
            if (f.elem == 1)
                d[0] = (uint8_t)v;
            else if (f.elem == 2)
                memcpy(d, &f.f16[ch][v], 2); /* little-endian host, as the batch file */
            else
                memcpy(d, &f.f32[ch][v], 4);
        }
    return f.elem;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define FLIP_VBMI 1
/* Pixels [0, n) of o: rgb's pixels from `last` down, 21 at a time (63 bytes, masked:
 * nothing read or written outside them) by one vpermb each; returns how many it did (a
 * multiple of 21). The byte permute of a flipped row was a memcpy of 3 bytes per pixel:
 * ~1.4% of a worker at size 224, half the rows flipped. */
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) static int
flip_u8_vbmi(uint8_t *o, const uint8_t *rgb, int last, int n)
{
    /* output byte j: input byte 3 * (20 - j / 3) + j % 3 */
    static const uint8_t idx[64] = {60, 61, 62, 57, 58, 59, 54, 55, 56, 51, 52, 53, 48, 49, 50, 45,
                                    46, 47, 42, 43, 44, 39, 40, 41, 36, 37, 38, 33, 34, 35, 30, 31,
                                    32, 27, 28, 29, 24, 25, 26, 21, 22, 23, 18, 19, 20, 15, 16, 17,
                                    12, 13, 14, 9,  10, 11, 6,  7,  8,  3,  4,  5,  0,  1,  2,  0};
    const __m512i perm = _mm512_loadu_si512((const void *)idx);
    const __mmask64 m = (1ULL << 63) - 1;
    int x = 0;
    for (; x + 21 <= n; x += 21) {
        __m512i v = _mm512_maskz_loadu_epi8(m, rgb + 3 * (size_t)(last - x - 20));
        _mm512_mask_storeu_epi8(o + 3 * (size_t)x, m, _mm512_permutexvar_epi8(perm, v));
    }
    return x;
}

/* (libgcc reads the CPU once, before main; each call is a load of its answer) */
static int have_vbmi(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vbmi");
}
#else
#define FLIP_VBMI 0
#endif

void bfs_out_store_row(void *ctx, int row, const uint8_t *rgb, int width)
{
    const bfs_out_slot *s = ctx;
    const bfs_out_format *f = s->f;
    size_t plane = (size_t)s->w * s->h; /* elements per channel plane */
    size_t base = (size_t)row * s->w;   /* first pixel of the row */
    int step = s->flip ? -1 : 1;
    int x0 = s->flip ? width - 1 : 0;
    if (f->dtype == BFS_OUT_U8) {
        uint8_t *d = s->dst;
        if (!f->nchw && !s->flip) {
            memcpy(d + base * 3, rgb, (size_t)width * 3);
        } else if (!f->nchw) {
            uint8_t *o = d + base * 3;
            int x = 0;
#if FLIP_VBMI
            if (have_vbmi())
                x = flip_u8_vbmi(o, rgb, x0, width);
#endif
            for (; x < width; x++)
                memcpy(o + 3 * x, rgb + 3 * (x0 + step * x), 3);
        } else {
            for (int c = 0; c < 3; c++) {
                uint8_t *o = d + c * plane + base;
                for (int x = 0; x < width; x++)
                    o[x] = rgb[3 * (x0 + step * x) + c];
            }
        }
    } else if (f->dtype == BFS_OUT_F32) {
        float *d = (float *)(void *)s->dst;
        for (int x = 0; x < width; x++) {
            const uint8_t *p = rgb + 3 * (x0 + step * x);
            for (int c = 0; c < 3; c++)
                d[f->nchw ? c * plane + base + x : (base + x) * 3 + c] = f->f32[c][p[c]];
        }
    } else {
        uint16_t *d = (uint16_t *)(void *)s->dst;
        for (int x = 0; x < width; x++) {
            const uint8_t *p = rgb + 3 * (x0 + step * x);
            for (int c = 0; c < 3; c++)
                d[f->nchw ? c * plane + base + x : (base + x) * 3 + c] = f->f16[c][p[c]];
        }
    }
}

int bfs_out_erase(const bfs_out_slot *slot, const bfs_pipeline_opts *o, uint64_t epoch,
                  uint64_t index)
{
    const bfs_out_format *f = slot->f;
    bfs_erase_box b;
    bfs_rng r;
    if (f->dtype == BFS_OUT_U8 || !bfs_augment_erase_box(o, epoch, index, slot->w, slot->h, &b, &r))
        return 0;
    size_t plane = (size_t)slot->w * slot->h;
    float per_channel[4] = {0, 0, 0, 0}, z[2];
    uint64_t state = bfs_rng_u64(&r);
    if (o->erasing_mode == BFS_ERASE_RAND)
        bfs_augment_normal2(&state, per_channel), bfs_augment_normal2(&state, per_channel + 2);
    int left = 0;               /* normals left in z */
    for (int c = 0; c < 3; c++) /* torch.empty((chan, h, w)).normal_(): channel-major */
        for (int y = b.top; y < b.top + b.h; y++)
            for (int x = b.left; x < b.left + b.w; x++) {
                float v = per_channel[c];
                if (o->erasing_mode == BFS_ERASE_PIXEL) {
                    if (!left)
                        bfs_augment_normal2(&state, z), left = 2;
                    v = z[--left];
                }
                size_t at = (size_t)y * slot->w + x;
                at = f->nchw ? c * plane + at : at * 3 + c;
                if (f->dtype == BFS_OUT_F32) {
                    memcpy(slot->dst + 4 * at, &v, 4);
                } else {
                    uint16_t h = f->dtype == BFS_OUT_BF16 ? bfs_f32_to_bf16(v) : bfs_f32_to_f16(v);
                    memcpy(slot->dst + 2 * at, &h, 2);
                }
            }
    return 1;
}

void bfs_out_fill(const bfs_out_slot *slot, uint8_t r, uint8_t g, uint8_t b)
{
    uint8_t row[3 * 8192];
    for (int x = 0; x < slot->w; x++)
        row[3 * x] = r, row[3 * x + 1] = g, row[3 * x + 2] = b;
    bfs_out_slot s = *slot;
    s.flip = 0;
    for (int y = 0; y < slot->h; y++)
        bfs_out_store_row(&s, y, row, slot->w);
}
