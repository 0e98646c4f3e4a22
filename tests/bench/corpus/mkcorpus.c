/*
 * mkcorpus — generate an ImageNet-like JPEG benchmark corpus from real photographs.
 *
 *   mkcorpus [--seed S] [--classes C] [--per-class N] [--quality-min Q] [--quality-max Q]
 *            [--progressive-every K] [--noise-min S] [--noise-max S]
 *            SRC_IMAGES_DIR OUT_DIR
 *
 * Writes OUT_DIR/<class>/<class>_<n>.jpg (an ImageFolder). Every output is a random crop
 * of a source photograph (JPEG files found recursively under SRC_IMAGES_DIR, symlinks
 * followed, duplicates by inode dropped), resized with an antialiasing triangle filter to
 * an ImageNet-like size (long side mostly 500, sides 250..500, aspect 4:3, 3:2, 1:1 ...),
 * randomly mirrored, with small gaussian-like noise added, and encoded with TurboJPEG at a
 * random quality in [quality-min, quality-max], 4:2:0, baseline (every K-th image
 * progressive with --progressive-every K). Why real photographs and noise: decode time
 * depends on the number of non-zero DCT coefficients, so smooth synthetic images make a
 * decoder look several times faster than on ImageNet.
 *
 * Determinism: every output's parameters come from its own PRNG stream derived from
 * (seed, output index) only, so the corpus is a pure function of the seed, the options and
 * the source set (and, byte for byte, of the libjpeg-turbo build that encodes it). Outputs
 * are produced grouped by source photograph so that only one decoded source is in memory.
 *
 * Prints progress to stderr and summary statistics to stdout. Exit status 0 on success,
 * 2 on bad usage, 1 on any other error.
 *
 * Build: cc -std=c11 -O2 -D_GNU_SOURCE mkcorpus.c $(pkg-config --cflags --libs libturbojpeg) -lm
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <turbojpeg.h>

#define OUT_MIN_SIDE 250  /* ImageNet-like output sides: 250..500 px */
#define OUT_MAX_SIDE 500
#define MAX_SCAN_DEPTH 16 /* guards the directory walk against symlink loops */

/* ---------------------------------------------------------------- errors */

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("mkcorpus: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("mkcorpus: warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        die("out of memory (%zu bytes)", n);
    return p;
}

static void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p)
        die("out of memory (%zu bytes)", n);
    return p;
}

static char *xstrdup(const char *s)
{
    char *d = strdup(s);
    if (!d)
        die("out of memory");
    return d;
}

/* ---------------------------------------------------------------- PRNG */

/* splitmix64: tiny, fast, good enough for picking crops and noise, and fully specified
 * here so the corpus does not depend on the C library's rand(). */
typedef struct {
    uint64_t s;
} rng_t;

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rng_next(rng_t *r)
{
    r->s += 0x9e3779b97f4a7c15ULL;
    return mix64(r->s);
}

/* Independent stream per (seed, index, purpose): the mixing avoids overlapping sequences
 * for neighbouring indices. */
static rng_t rng_for(uint64_t seed, uint64_t index, uint64_t purpose)
{
    rng_t r = {mix64(seed ^ mix64(index * 0x9e3779b97f4a7c15ULL + purpose))};
    return r;
}

/* uniform in [0, 1) with 53 bits */
static double rng_unit(rng_t *r)
{
    return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* uniform integer in [lo, hi] (inclusive); the modulo bias is irrelevant at these ranges */
static int rng_range(rng_t *r, int lo, int hi)
{
    return lo + (int)(rng_next(r) % (uint64_t)(hi - lo + 1));
}

/* ---------------------------------------------------------------- options */

typedef struct {
    uint64_t seed;
    int classes, per_class;
    int qmin, qmax;
    int progressive_every; /* 0: all baseline; K: images with (index+1) % K == 0 progressive */
    double noise_min, noise_max;
    const char *src_dir, *out_dir;
} opts_t;

static void usage(FILE *f)
{
    fputs("usage: mkcorpus [--seed S] [--classes C] [--per-class N] [--quality-min Q]\n"
          "                [--quality-max Q] [--progressive-every K] [--noise-min SIGMA]\n"
          "                [--noise-max SIGMA] SRC_IMAGES_DIR OUT_DIR\n"
          "\n"
          "Generates OUT_DIR/<class>/<class>_<n>.jpg: random crops of the JPEG photographs\n"
          "under SRC_IMAGES_DIR, resized to ImageNet-like sizes (sides 250..500), with noise,\n"
          "encoded 4:2:0 at a random quality in [Q_min, Q_max].\n"
          "\n"
          "  --seed S               PRNG seed (default 1)\n"
          "  --classes C            number of class directories (default 20)\n"
          "  --per-class N          images per class (default 100)\n"
          "  --quality-min Q        lowest JPEG quality, 1..100 (default 85)\n"
          "  --quality-max Q        highest JPEG quality, 1..100 (default 95)\n"
          "  --progressive-every K  make every K-th image progressive (default 0: none)\n"
          "  --noise-min SIGMA      lowest per-image noise sigma in levels (default 2)\n"
          "  --noise-max SIGMA      highest per-image noise sigma in levels (default 4)\n",
          f);
}

static long long parse_int(const char *opt, const char *s, long long lo, long long hi)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "mkcorpus: %s: invalid value '%s' (integer %lld..%lld expected)\n", opt, s,
                lo, hi);
        exit(2);
    }
    return v;
}

static uint64_t parse_u64(const char *opt, const char *s)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end || s[0] == '-') {
        fprintf(stderr, "mkcorpus: %s: invalid value '%s' (unsigned integer expected)\n", opt, s);
        exit(2);
    }
    return (uint64_t)v;
}

static double parse_double(const char *opt, const char *s, double lo, double hi)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "mkcorpus: %s: invalid value '%s' (number %g..%g expected)\n", opt, s, lo,
                hi);
        exit(2);
    }
    return v;
}

static opts_t parse_args(int argc, char **argv)
{
    opts_t o = {.seed = 1, .classes = 20, .per_class = 100, .qmin = 85, .qmax = 95,
                .progressive_every = 0, .noise_min = 2.0, .noise_max = 4.0};
    const char *pos[2];
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        }
        if (a[0] == '-' && a[1] == '-' && a[2] == '\0') { /* "--": rest are positional */
            for (i++; i < argc; i++) {
                if (npos == 2) {
                    fprintf(stderr, "mkcorpus: too many arguments\n");
                    usage(stderr);
                    exit(2);
                }
                pos[npos++] = argv[i];
            }
            break;
        }
        if (a[0] != '-' || a[1] == '\0') {
            if (npos == 2) {
                fprintf(stderr, "mkcorpus: too many arguments ('%s')\n", a);
                usage(stderr);
                exit(2);
            }
            pos[npos++] = a;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "mkcorpus: %s needs a value\n", a);
            exit(2);
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--seed"))
            o.seed = parse_u64(a, v);
        else if (!strcmp(a, "--classes"))
            o.classes = (int)parse_int(a, v, 1, 100000);
        else if (!strcmp(a, "--per-class"))
            o.per_class = (int)parse_int(a, v, 1, 10000000);
        else if (!strcmp(a, "--quality-min"))
            o.qmin = (int)parse_int(a, v, 1, 100);
        else if (!strcmp(a, "--quality-max"))
            o.qmax = (int)parse_int(a, v, 1, 100);
        else if (!strcmp(a, "--progressive-every"))
            o.progressive_every = (int)parse_int(a, v, 0, INT_MAX);
        else if (!strcmp(a, "--noise-min"))
            o.noise_min = parse_double(a, v, 0.0, 64.0);
        else if (!strcmp(a, "--noise-max"))
            o.noise_max = parse_double(a, v, 0.0, 64.0);
        else {
            fprintf(stderr, "mkcorpus: unknown option '%s'\n", a);
            usage(stderr);
            exit(2);
        }
    }
    if (npos != 2) {
        fprintf(stderr, "mkcorpus: expected SRC_IMAGES_DIR and OUT_DIR\n");
        usage(stderr);
        exit(2);
    }
    if (o.qmin > o.qmax) {
        fprintf(stderr, "mkcorpus: --quality-min %d is above --quality-max %d\n", o.qmin, o.qmax);
        exit(2);
    }
    if (o.noise_min > o.noise_max) {
        fprintf(stderr, "mkcorpus: --noise-min %g is above --noise-max %g\n", o.noise_min,
                o.noise_max);
        exit(2);
    }
    if ((long long)o.classes * o.per_class > 100000000LL) {
        fprintf(stderr, "mkcorpus: %d classes x %d images is too many (limit 1e8)\n", o.classes,
                o.per_class);
        exit(2);
    }
    o.src_dir = pos[0];
    o.out_dir = pos[1];
    return o;
}

/* ---------------------------------------------------------------- files */

static unsigned char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
        fclose(f);
        errno = EINVAL;
        return NULL;
    }
    size_t n = (size_t)st.st_size;
    unsigned char *buf = xmalloc(n);
    if (fread(buf, 1, n, f) != n) {
        free(buf);
        fclose(f);
        errno = EIO;
        return NULL;
    }
    fclose(f);
    *len = n;
    return buf;
}

static void write_file(const char *path, const unsigned char *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        die("cannot create %s: %s", path, strerror(errno));
    if (fwrite(buf, 1, len, f) != len) {
        int e = errno;
        fclose(f);
        die("cannot write %s: %s", path, strerror(e));
    }
    if (fclose(f) != 0)
        die("cannot write %s: %s", path, strerror(errno));
}

static void make_dir(const char *path)
{
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        die("cannot create directory %s: %s", path, strerror(errno));
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        die("%s exists and is not a directory", path);
}

/* mkdir -p */
static void make_dirs(const char *path)
{
    char *p = xstrdup(path);
    for (char *s = p + 1; *s; s++) {
        if (*s == '/') {
            *s = '\0';
            if (mkdir(p, 0755) != 0 && errno != EEXIST)
                die("cannot create directory %s: %s", p, strerror(errno));
            *s = '/';
        }
    }
    make_dir(p);
    free(p);
}

/* ---------------------------------------------------------------- sources */

typedef struct {
    char *path;
    int w, h;
    dev_t dev;
    ino_t ino;
} source_t;

typedef struct {
    source_t *v;
    size_t n, cap;
} sources_t;

static int has_jpeg_ext(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot && (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg"));
}

static void sources_add(sources_t *s, const char *path, const struct stat *st)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->v = xrealloc(s->v, s->cap * sizeof *s->v);
    }
    s->v[s->n++] = (source_t){.path = xstrdup(path), .dev = st->st_dev, .ino = st->st_ino};
}

/* Recursive walk; stat() follows symlinks (the wallpaper packages link many names to one
 * file, and make_corpus.sh links the chosen photographs into one directory). */
static void scan_dir(sources_t *s, const char *dir, int depth)
{
    if (depth > MAX_SCAN_DEPTH) {
        warn("%s: directory nesting too deep, not descending", dir);
        return;
    }
    DIR *d = opendir(dir);
    if (!d) {
        if (depth == 0)
            die("cannot open source directory %s: %s", dir, strerror(errno));
        warn("cannot open %s: %s", dir, strerror(errno));
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        char *path = xmalloc(len);
        snprintf(path, len, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) != 0)
            warn("%s: %s (skipped)", path, strerror(errno));
        else if (S_ISDIR(st.st_mode))
            scan_dir(s, path, depth + 1);
        else if (S_ISREG(st.st_mode) && has_jpeg_ext(e->d_name))
            sources_add(s, path, &st);
        free(path);
    }
    closedir(d);
}

static int cmp_source_path(const void *a, const void *b)
{
    return strcmp(((const source_t *)a)->path, ((const source_t *)b)->path);
}

/* Reads the header; returns 0 and fills w/h when the file is a decodable colour or grey
 * JPEG large enough to crop a 500 px output without upscaling. */
static int probe_source(tjhandle dec, source_t *src)
{
    size_t len;
    unsigned char *buf = read_file(src->path, &len);
    if (!buf) {
        warn("%s: cannot read: %s (skipped)", src->path, strerror(errno));
        return -1;
    }
    int w, h, subsamp, cs;
    int rc = tjDecompressHeader3(dec, buf, (unsigned long)len, &w, &h, &subsamp, &cs);
    free(buf);
    if (rc != 0) {
        warn("%s: not a readable JPEG: %s (skipped)", src->path, tjGetErrorStr2(dec));
        return -1;
    }
    if (cs == TJCS_CMYK || cs == TJCS_YCCK) {
        warn("%s: CMYK JPEG (skipped)", src->path);
        return -1;
    }
    if (w < OUT_MAX_SIDE || h < OUT_MAX_SIDE) {
        warn("%s: %dx%d is smaller than %dx%d (skipped)", src->path, w, h, OUT_MAX_SIDE,
             OUT_MAX_SIDE);
        return -1;
    }
    src->w = w;
    src->h = h;
    return 0;
}

/* Finds, sorts (readdir order is filesystem-dependent; sorting keeps the corpus
 * deterministic), de-duplicates and probes the source photographs. */
static sources_t load_sources(tjhandle dec, const char *dir)
{
    sources_t s = {0};
    scan_dir(&s, dir, 0);
    if (s.n)
        qsort(s.v, s.n, sizeof *s.v, cmp_source_path);
    size_t kept = 0;
    for (size_t i = 0; i < s.n; i++) {
        int dup = 0;
        for (size_t j = 0; j < kept && !dup; j++)
            dup = s.v[j].dev == s.v[i].dev && s.v[j].ino == s.v[i].ino;
        if (dup || probe_source(dec, &s.v[i]) != 0) {
            free(s.v[i].path);
            continue;
        }
        s.v[kept++] = s.v[i];
    }
    s.n = kept;
    if (s.n == 0)
        die("no usable source images in %s (need JPEG files, at least %dx%d px, searched "
            "recursively)",
            dir, OUT_MAX_SIDE, OUT_MAX_SIDE);
    return s;
}

typedef struct {
    unsigned char *px; /* RGB, row-major */
    int w, h;
} image_t;

static image_t decode_source(tjhandle dec, const source_t *src)
{
    size_t len;
    unsigned char *buf = read_file(src->path, &len);
    if (!buf)
        die("%s: cannot read: %s", src->path, strerror(errno));
    image_t im = {xmalloc((size_t)src->w * src->h * 3), src->w, src->h};
    /* TJFLAG_ACCURATEDCT: the source's pixels, not the fastest approximation of them */
    if (tjDecompress2(dec, buf, (unsigned long)len, im.px, im.w, 0, im.h, TJPF_RGB,
                      TJFLAG_ACCURATEDCT) != 0 &&
        tjGetErrorCode(dec) == TJERR_FATAL)
        die("%s: decode failed: %s", src->path, tjGetErrorStr2(dec));
    free(buf);
    return im;
}

/* ---------------------------------------------------------------- per-image plan */

/* Everything random about one output, drawn from its own stream. */
typedef struct {
    int src;            /* source index */
    int ow, oh;         /* output size */
    int cx, cy, cw, ch; /* crop box in the source */
    int mirror;
    int quality;
    int progressive;
    double noise_sigma;
    uint64_t noise_seed;
} plan_t;

/* Output size like ImageNet's: mostly 500 on the long side (sometimes less), landscape
 * three times as often as portrait, common camera aspect ratios. */
static void pick_size(rng_t *r, int *ow, int *oh)
{
    static const struct {
        double ar;
        int weight;
    } aspects[] = {{4.0 / 3, 50}, {3.0 / 2, 22}, {1.0, 10}, {5.0 / 4, 8}, {16.0 / 9, 6},
                   {1.6, 4}};
    int total = 0, n = (int)(sizeof aspects / sizeof aspects[0]);
    for (int i = 0; i < n; i++)
        total += aspects[i].weight;
    int pick = rng_range(r, 0, total - 1), k = 0;
    while (pick >= aspects[k].weight)
        pick -= aspects[k++].weight;
    double ar = aspects[k].ar;

    int min_long = (int)ceil(OUT_MIN_SIDE * ar); /* keeps the short side >= 250 */
    int lng = rng_unit(r) < 0.7 ? OUT_MAX_SIDE : rng_range(r, min_long, OUT_MAX_SIDE);
    int shrt = (int)lround(lng / ar);
    if (shrt < OUT_MIN_SIDE)
        shrt = OUT_MIN_SIDE;
    if (rng_unit(r) < 0.75) {
        *ow = lng;
        *oh = shrt;
    } else {
        *ow = shrt;
        *oh = lng;
    }
}

/* Crop box with the output's aspect ratio. The downscale factor is log-uniform between 1
 * and min(MAX_DOWNSCALE, what fits): more downscaling packs more of the photograph's
 * detail into each output pixel (wallpaper photographs are soft at full resolution),
 * less keeps some out-of-focus, smooth outputs in the mix, as in ImageNet. */
#define MAX_DOWNSCALE 5.0
static void pick_crop(rng_t *r, const source_t *src, plan_t *p)
{
    double fit = fmin((double)src->w / p->ow, (double)src->h / p->oh);
    double hi = fmin(MAX_DOWNSCALE, fit);
    double scale = exp(rng_unit(r) * log(hi)); /* in [1, hi] */
    p->cw = (int)floor(p->ow * scale);
    p->ch = (int)floor(p->oh * scale);
    if (p->cw > src->w)
        p->cw = src->w;
    if (p->ch > src->h)
        p->ch = src->h;
    p->cx = rng_range(r, 0, src->w - p->cw);
    p->cy = rng_range(r, 0, src->h - p->ch);
}

static plan_t make_plan(const opts_t *o, const sources_t *s, uint64_t index)
{
    rng_t r = rng_for(o->seed, index, 1);
    plan_t p;
    p.src = (int)(rng_next(&r) % s->n);
    pick_size(&r, &p.ow, &p.oh);
    pick_crop(&r, &s->v[p.src], &p);
    p.mirror = (int)(rng_next(&r) & 1);
    p.quality = rng_range(&r, o->qmin, o->qmax);
    p.noise_sigma = o->noise_min + (o->noise_max - o->noise_min) * rng_unit(&r);
    p.noise_seed = rng_next(&r);
    p.progressive = o->progressive_every > 0 && (index + 1) % (uint64_t)o->progressive_every == 0;
    return p;
}

/* ---------------------------------------------------------------- resize */

/* Separable triangle (tent) filter. For downscaling by s the tent is widened to radius s,
 * which averages over each output pixel's footprint (antialiasing); for s <= 1 it is plain
 * bilinear interpolation. Taps past the source edge are clamped to it. */
typedef struct {
    int taps;     /* taps per output sample */
    int *first;   /* first source index per output sample */
    float *w;     /* taps weights per output sample, normalised to sum 1 */
} filter_t;

static filter_t make_filter(int out_len, int crop_off, int crop_len)
{
    double scale = (double)crop_len / out_len;
    double radius = scale > 1.0 ? scale : 1.0;
    filter_t f;
    f.taps = (int)ceil(2 * radius) + 1;
    f.first = xmalloc((size_t)out_len * sizeof *f.first);
    f.w = xmalloc((size_t)out_len * f.taps * sizeof *f.w);
    for (int x = 0; x < out_len; x++) {
        double center = crop_off + (x + 0.5) * scale - 0.5; /* pixel centres line up */
        int first = (int)floor(center - radius) + 1;
        double sum = 0;
        float *w = f.w + (size_t)x * f.taps;
        for (int t = 0; t < f.taps; t++) {
            double d = fabs(first + t - center) / radius;
            w[t] = d < 1.0 ? (float)(1.0 - d) : 0.0f;
            sum += w[t];
        }
        for (int t = 0; t < f.taps; t++)
            w[t] = (float)(w[t] / sum);
        f.first[x] = first;
    }
    return f;
}

static void free_filter(filter_t *f)
{
    free(f->first);
    free(f->w);
}

static int clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* Resizes the plan's crop of `im` to ow x oh floats (RGB), mirrored if asked. */
static float *resize_crop(const image_t *im, const plan_t *p)
{
    filter_t fx = make_filter(p->ow, p->cx, p->cw);
    filter_t fy = make_filter(p->oh, p->cy, p->ch);
    /* rows of the source the vertical filter touches */
    int y_lo = clampi(fy.first[0], 0, im->h - 1);
    int y_hi = clampi(fy.first[p->oh - 1] + fy.taps - 1, 0, im->h - 1);
    int rows = y_hi - y_lo + 1;

    /* horizontal pass: rows x ow x 3 */
    float *tmp = xmalloc((size_t)rows * p->ow * 3 * sizeof *tmp);
    for (int y = 0; y < rows; y++) {
        const unsigned char *src = im->px + (size_t)(y_lo + y) * im->w * 3;
        float *dst = tmp + (size_t)y * p->ow * 3;
        for (int x = 0; x < p->ow; x++) {
            const float *w = fx.w + (size_t)x * fx.taps;
            float r = 0, g = 0, b = 0;
            for (int t = 0; t < fx.taps; t++) {
                const unsigned char *s = src + 3 * clampi(fx.first[x] + t, 0, im->w - 1);
                r += w[t] * s[0];
                g += w[t] * s[1];
                b += w[t] * s[2];
            }
            float *d = dst + 3 * (p->mirror ? p->ow - 1 - x : x);
            d[0] = r;
            d[1] = g;
            d[2] = b;
        }
    }

    /* vertical pass: oh x ow x 3 */
    size_t row_len = (size_t)p->ow * 3;
    float *out = xmalloc((size_t)p->oh * row_len * sizeof *out);
    for (int y = 0; y < p->oh; y++) {
        float *dst = out + (size_t)y * row_len;
        const float *w = fy.w + (size_t)y * fy.taps;
        for (size_t i = 0; i < row_len; i++)
            dst[i] = 0;
        for (int t = 0; t < fy.taps; t++) {
            int sy = clampi(fy.first[y] + t, 0, im->h - 1) - y_lo;
            const float *src = tmp + (size_t)sy * row_len;
            for (size_t i = 0; i < row_len; i++)
                dst[i] += w[t] * src[i];
        }
    }
    free(tmp);
    free_filter(&fx);
    free_filter(&fy);
    return out;
}

/* ---------------------------------------------------------------- noise + encode */

/* Approximately gaussian N(0,1): Irwin-Hall sum of four 16-bit uniforms, rescaled
 * (variance of the sum is 4/12). Sensor-like, independent per channel. */
static float gauss4(rng_t *r)
{
    uint64_t v = rng_next(r);
    double sum = (double)(v & 0xffff) + (double)((v >> 16) & 0xffff) +
                 (double)((v >> 32) & 0xffff) + (double)(v >> 48);
    return (float)((sum / 65536.0 - 2.0) * 1.7320508075688772);
}

static unsigned char *add_noise_quantise(const float *px, const plan_t *p)
{
    size_t n = (size_t)p->ow * p->oh * 3;
    unsigned char *out = xmalloc(n);
    rng_t r = {p->noise_seed};
    float sigma = (float)p->noise_sigma;
    for (size_t i = 0; i < n; i++) {
        float v = px[i] + sigma * gauss4(&r);
        out[i] = (unsigned char)(v <= 0.0f ? 0 : v >= 255.0f ? 255 : (int)(v + 0.5f));
    }
    return out;
}

/* Returns the encoded size; the JPEG goes to `path`. */
static size_t encode_write(tjhandle enc, const unsigned char *rgb, const plan_t *p,
                           const char *path)
{
    unsigned char *jpeg = NULL;
    unsigned long len = 0;
    int flags = p->progressive ? TJFLAG_PROGRESSIVE : 0;
    if (tjCompress2(enc, rgb, p->ow, 0, p->oh, TJPF_RGB, &jpeg, &len, TJSAMP_420, p->quality,
                    flags) != 0)
        die("%s: encode failed: %s", path, tjGetErrorStr2(enc));
    write_file(path, jpeg, len);
    tjFree(jpeg);
    return (size_t)len;
}

/* ---------------------------------------------------------------- stats */

typedef struct {
    size_t count, progressive;
    double bytes;
    size_t min_bytes, max_bytes;
    int min_side, max_side;
    double pixels;
} stats_t;

static void stats_add(stats_t *st, const plan_t *p, size_t bytes)
{
    int lo = p->ow < p->oh ? p->ow : p->oh, hi = p->ow < p->oh ? p->oh : p->ow;
    if (st->count == 0 || bytes < st->min_bytes)
        st->min_bytes = bytes;
    if (st->count == 0 || bytes > st->max_bytes)
        st->max_bytes = bytes;
    if (st->count == 0 || lo < st->min_side)
        st->min_side = lo;
    if (st->count == 0 || hi > st->max_side)
        st->max_side = hi;
    st->count++;
    st->progressive += (size_t)p->progressive;
    st->bytes += (double)bytes;
    st->pixels += (double)p->ow * p->oh;
}

static void stats_print(const stats_t *st, size_t nsrc, const char *out_dir)
{
    printf("mkcorpus: wrote %zu images (%zu progressive) from %zu source photographs to %s\n",
           st->count, st->progressive, nsrc, out_dir);
    printf("mkcorpus: size mean %.1f KB, min %.1f KB, max %.1f KB, total %.1f MB\n",
           st->bytes / st->count / 1024.0, st->min_bytes / 1024.0, st->max_bytes / 1024.0,
           st->bytes / (1024.0 * 1024.0));
    printf("mkcorpus: sides %d..%d px, mean %.0f pixels/image, %.2f bits/pixel\n", st->min_side,
           st->max_side, st->pixels / st->count, st->bytes * 8 / st->pixels);
}

/* ---------------------------------------------------------------- main */

static void class_name(char *buf, size_t len, int c)
{
    snprintf(buf, len, "class%03d", c);
}

static void output_path(char *buf, size_t len, const opts_t *o, uint64_t index)
{
    char cls[32];
    int c = (int)(index / (uint64_t)o->per_class);
    int k = (int)(index % (uint64_t)o->per_class);
    class_name(cls, sizeof cls, c);
    int n = snprintf(buf, len, "%s/%s/%s_%05d.jpg", o->out_dir, cls, cls, k);
    if (n < 0 || (size_t)n >= len)
        die("output path too long under %s", o->out_dir);
}

static void make_output_dirs(const opts_t *o)
{
    make_dirs(o->out_dir);
    for (int c = 0; c < o->classes; c++) {
        char cls[32], path[PATH_MAX];
        class_name(cls, sizeof cls, c);
        int n = snprintf(path, sizeof path, "%s/%s", o->out_dir, cls);
        if (n < 0 || (size_t)n >= sizeof path)
            die("output path too long under %s", o->out_dir);
        make_dir(path);
    }
}

int main(int argc, char **argv)
{
    opts_t o = parse_args(argc, argv);
    tjhandle dec = tjInitDecompress(), enc = tjInitCompress();
    if (!dec || !enc)
        die("cannot initialise TurboJPEG: %s", tjGetErrorStr2(NULL));

    sources_t src = load_sources(dec, o.src_dir);
    fprintf(stderr, "mkcorpus: %zu source photographs under %s\n", src.n, o.src_dir);
    make_output_dirs(&o);

    uint64_t total = (uint64_t)o.classes * (uint64_t)o.per_class;
    /* Which source each output uses, so each source is decoded once. */
    int *src_of = xmalloc(total * sizeof *src_of);
    for (uint64_t i = 0; i < total; i++)
        src_of[i] = make_plan(&o, &src, i).src;

    stats_t st = {0};
    uint64_t step = total / 20 ? total / 20 : 1;
    for (size_t s = 0; s < src.n; s++) {
        image_t im = {NULL, 0, 0};
        for (uint64_t i = 0; i < total; i++) {
            if (src_of[i] != (int)s)
                continue;
            if (!im.px)
                im = decode_source(dec, &src.v[s]);
            plan_t p = make_plan(&o, &src, i);
            float *fpx = resize_crop(&im, &p);
            unsigned char *rgb = add_noise_quantise(fpx, &p);
            char path[PATH_MAX];
            output_path(path, sizeof path, &o, i);
            stats_add(&st, &p, encode_write(enc, rgb, &p, path));
            free(fpx);
            free(rgb);
            if (st.count % step == 0 || st.count == total)
                fprintf(stderr, "mkcorpus: %zu/%" PRIu64 " images\n", st.count, total);
        }
        free(im.px);
    }

    stats_print(&st, src.n, o.out_dir);
    free(src_of);
    for (size_t s = 0; s < src.n; s++)
        free(src.v[s].path);
    free(src.v);
    tjDestroy(dec);
    tjDestroy(enc);
    return 0;
}
