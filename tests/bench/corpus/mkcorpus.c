/*
 * mkcorpus — generate an ImageNet-like JPEG benchmark corpus from real photographs.
 *
 *   mkcorpus [options] SRC_IMAGES_DIR OUT_DIR        (mkcorpus --help lists the options)
 *
 * Writes OUT_DIR/<class>/<class>_<n>.jpg (an ImageFolder). Each output is made from one
 * source photograph (the JPEG files found recursively under SRC_IMAGES_DIR, symlinks
 * followed, duplicates by inode dropped):
 *
 *   1. an ImageNet-like output size: sides 250..500, long side mostly 500, aspect ratios
 *      4:3, 3:2, 1:1 ..., landscape three times as often as portrait;
 *   2. a random crop box with that aspect ratio, downscale factor 1..5 — the most detailed
 *      of --crop-tries candidates (wallpaper photographs have large smooth, out-of-focus
 *      areas; ImageNet photographs are mostly of textured things);
 *   3. resize with a separable, antialiasing triangle filter, random horizontal mirror;
 *   4. unsharp mask (--sharpen), as cameras and photo sites do;
 *   5. gaussian-like sensor noise, mostly luminance, sigma per image in
 *      [--noise-min, --noise-max];
 *   6. TurboJPEG encode, 4:2:0, quality per image in [--quality-min, --quality-max],
 *      baseline, or progressive for every K-th image with --progressive-every K.
 *
 * Why steps 2, 4 and 5 and the defaults: decode time grows with the number of non-zero
 * DCT coefficients, so smooth images make a decoder look much faster than it is on
 * ImageNet (mean ~110 KB per image). The Debian wallpaper photographs are soft (shallow
 * focus, skies, ~1 bit/pixel sources): at quality 85-95 with sigma 2-4 noise they give a
 * mean of only ~41 KB. The defaults (quality 92-98, sigma 4-8, sharpen 1.5, best of 4
 * crops) give ~93 KB while the images still look like slightly noisy photographs; heavier
 * noise at quality 85-95 gets there too but looks like high-ISO grain.
 *
 * Determinism: every output's parameters come from PRNG streams derived from (seed, output
 * index) only, so the corpus is a pure function of the seed, the options and the source
 * files (and, byte for byte, of the libjpeg-turbo build that encodes it). Outputs are
 * produced grouped by source so that only one decoded source is in memory at a time.
 *
 * Progress goes to stderr, summary statistics to stdout. Exit status: 0 success, 2 bad
 * usage, 1 any other error.
 *
 * Build: cc -std=c11 -O2 -D_GNU_SOURCE mkcorpus.c $(pkg-config --cflags --libs libturbojpeg) -lm
 * (Debian: libturbojpeg0-dev, pkg-config.)
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

#define OUT_MIN_SIDE     250 /* ImageNet-like output sides: 250..500 px */
#define OUT_MAX_SIDE     500
#define LARGE_MIN        1000 /* --large-every: long sides 1000..2400 (ImageNet has some) */
#define LARGE_MAX        2400
#define MAX_DOWNSCALE    5.0 /* largest source-to-output scale of a crop */
#define MAX_SCAN_DEPTH   16  /* guards the directory walk against symlink loops */
#define DETAIL_GRID      32  /* crop detail is sampled on a DETAIL_GRID^2 grid */
#define LUMA_NOISE_SHARE 0.8 /* noise = sigma * (0.8 * shared + 0.6 * per-channel) */

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

/* splitmix64: tiny, fast, good enough for crops and noise, and specified here so the
 * corpus does not depend on the C library's rand(). */
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

/* An independent stream per (seed, output index, purpose). */
enum { STREAM_PLAN = 1, STREAM_CROP = 2 };
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

/* uniform integer in [lo, hi]; the modulo bias is irrelevant at these ranges */
static int rng_range(rng_t *r, int lo, int hi)
{
    return lo + (int)(rng_next(r) % (uint64_t)(hi - lo + 1));
}

/* Approximately N(0,1): Irwin-Hall sum of four 16-bit uniforms (variance 4/12), rescaled.
 * One 64-bit draw per sample keeps the noise stage cheap. */
static float rng_gauss(rng_t *r)
{
    uint64_t v = rng_next(r);
    double sum = (double)(v & 0xffff) + (double)((v >> 16) & 0xffff) +
                 (double)((v >> 32) & 0xffff) + (double)(v >> 48);
    return (float)((sum / 65536.0 - 2.0) * 1.7320508075688772);
}

/* ---------------------------------------------------------------- options */

typedef struct {
    uint64_t seed;
    int classes, per_class;
    int qmin, qmax;
    int progressive_every; /* 0: none; K: outputs with (index + 1) % K == 0 */
    int large_every;       /* 0: none; K: every K-th output large (LARGE_MIN..LARGE_MAX) */
    double noise_min, noise_max;
    double sharpen;
    int crop_tries;
    const char *src_dir, *out_dir;
} opts_t;

static void usage(FILE *f)
{
    fputs("usage: mkcorpus [options] SRC_IMAGES_DIR OUT_DIR\n"
          "\n"
          "Writes OUT_DIR/<class>/<class>_<n>.jpg: random crops of the JPEG photographs under\n"
          "SRC_IMAGES_DIR (searched recursively), resized to ImageNet-like sizes (sides\n"
          "250..500), sharpened, with noise, encoded 4:2:0 at a random quality.\n"
          "\n"
          "  --seed S               PRNG seed (default 1)\n"
          "  --classes C            number of class directories (default 20)\n"
          "  --per-class N          images per class (default 100)\n"
          "  --quality-min Q        lowest JPEG quality, 1..100 (default 92)\n"
          "  --quality-max Q        highest JPEG quality, 1..100 (default 98)\n"
          "  --progressive-every K  make every K-th image progressive (default 0: none)\n"
          "  --large-every K        make every K-th image large: long side 1000..2400 (as\n"
          "                         large as its photograph allows; default 0: none)\n"
          "  --noise-min SIGMA      lowest per-image noise sigma, in levels (default 4)\n"
          "  --noise-max SIGMA      highest per-image noise sigma, in levels (default 8)\n"
          "  --sharpen A            unsharp-mask amount, 0 disables (default 1.5)\n"
          "  --crop-tries K         keep the most detailed of K random crops (default 4)\n",
          f);
}

static void bad_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void bad_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("mkcorpus: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\n(mkcorpus --help for usage)\n", stderr);
    va_end(ap);
    exit(2);
}

static long long parse_int(const char *opt, const char *s, long long lo, long long hi)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        bad_usage("%s: invalid value '%s' (integer %lld..%lld expected)", opt, s, lo, hi);
    return v;
}

static uint64_t parse_u64(const char *opt, const char *s)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end || s[0] == '-')
        bad_usage("%s: invalid value '%s' (unsigned integer expected)", opt, s);
    return (uint64_t)v;
}

static double parse_double(const char *opt, const char *s, double lo, double hi)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        bad_usage("%s: invalid value '%s' (number %g..%g expected)", opt, s, lo, hi);
    return v;
}

/* Applies one "--name value" option; returns 0 if the name is unknown. */
static int set_option(opts_t *o, const char *name, const char *v)
{
    if (!strcmp(name, "--seed"))
        o->seed = parse_u64(name, v);
    else if (!strcmp(name, "--classes"))
        o->classes = (int)parse_int(name, v, 1, 100000);
    else if (!strcmp(name, "--per-class"))
        o->per_class = (int)parse_int(name, v, 1, 10000000);
    else if (!strcmp(name, "--quality-min"))
        o->qmin = (int)parse_int(name, v, 1, 100);
    else if (!strcmp(name, "--quality-max"))
        o->qmax = (int)parse_int(name, v, 1, 100);
    else if (!strcmp(name, "--progressive-every"))
        o->progressive_every = (int)parse_int(name, v, 0, INT_MAX);
    else if (!strcmp(name, "--large-every"))
        o->large_every = (int)parse_int(name, v, 0, INT_MAX);
    else if (!strcmp(name, "--noise-min"))
        o->noise_min = parse_double(name, v, 0.0, 64.0);
    else if (!strcmp(name, "--noise-max"))
        o->noise_max = parse_double(name, v, 0.0, 64.0);
    else if (!strcmp(name, "--sharpen"))
        o->sharpen = parse_double(name, v, 0.0, 8.0);
    else if (!strcmp(name, "--crop-tries"))
        o->crop_tries = (int)parse_int(name, v, 1, 64);
    else
        return 0;
    return 1;
}

static void check_options(const opts_t *o)
{
    if (o->qmin > o->qmax)
        bad_usage("--quality-min %d is above --quality-max %d", o->qmin, o->qmax);
    if (o->noise_min > o->noise_max)
        bad_usage("--noise-min %g is above --noise-max %g", o->noise_min, o->noise_max);
    if ((long long)o->classes * o->per_class > 100000000LL)
        bad_usage("%d classes x %d images is too many (limit 1e8)", o->classes, o->per_class);
}

static opts_t parse_args(int argc, char **argv)
{
    opts_t o = {.seed = 1,
                .classes = 20,
                .per_class = 100,
                .qmin = 92,
                .qmax = 98,
                .progressive_every = 0,
                .noise_min = 4.0,
                .noise_max = 8.0,
                .sharpen = 1.5,
                .crop_tries = 4};
    const char *pos[2];
    int npos = 0, options_done = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!options_done && a[0] == '-' && a[1] != '\0') {
            if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
                usage(stdout);
                exit(0);
            }
            if (!strcmp(a, "--")) {
                options_done = 1;
                continue;
            }
            if (i + 1 >= argc)
                bad_usage("%s needs a value", a);
            if (!set_option(&o, a, argv[i + 1]))
                bad_usage("unknown option '%s'", a);
            i++;
            continue;
        }
        if (npos == 2)
            bad_usage("too many arguments ('%s')", a);
        pos[npos++] = a;
    }
    if (npos != 2)
        bad_usage("expected SRC_IMAGES_DIR and OUT_DIR");
    check_options(&o);
    o.src_dir = pos[0];
    o.out_dir = pos[1];
    return o;
}

/* ---------------------------------------------------------------- files */

/* Whole file into memory; NULL with errno set on failure. */
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
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            die("cannot create directory %s: %s", p, strerror(errno));
        *s = '/';
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

/* Reads the header; 0 (and w, h filled) when the file is a decodable colour or grey JPEG
 * large enough to crop a 500x500 output without upscaling. */
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

/* Finds, sorts (readdir order depends on the filesystem; sorting keeps the corpus
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
        die("no usable source images in %s (need JPEG files of at least %dx%d px; searched "
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
    /* accurate IDCT: the source's pixels, not the fastest approximation of them */
    if (tjDecompress2(dec, buf, (unsigned long)len, im.px, im.w, 0, im.h, TJPF_RGB,
                      TJFLAG_ACCURATEDCT) != 0) {
        if (tjGetErrorCode(dec) == TJERR_FATAL)
            die("%s: decode failed: %s", src->path, tjGetErrorStr2(dec));
        warn("%s: %s (decoded anyway)", src->path, tjGetErrorStr2(dec));
    }
    free(buf);
    return im;
}

/* ---------------------------------------------------------------- per-image plan */

/* Everything random about one output except the crop box, which is chosen once the source
 * is decoded (it depends on the source's detail). */
typedef struct {
    int src;            /* source index */
    int ow, oh;         /* output size */
    int cx, cy, cw, ch; /* crop box in the source */
    int mirror;
    int quality;
    int progressive;
    float noise_sigma;
    uint64_t noise_seed;
} plan_t;

/* Output size like ImageNet's: mostly 500 on the long side, landscape three times as often
 * as portrait, common camera aspect ratios. */
static void pick_size(rng_t *r, int *ow, int *oh)
{
    static const struct {
        double ar;
        int weight;
    } aspects[] = {{4.0 / 3, 50}, {3.0 / 2, 22}, {1.0, 10}, {5.0 / 4, 8}, {16.0 / 9, 6}, {1.6, 4}};
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
    int landscape = rng_unit(r) < 0.75;
    *ow = landscape ? lng : shrt;
    *oh = landscape ? shrt : lng;
}

static plan_t make_plan(const opts_t *o, const sources_t *s, uint64_t index)
{
    rng_t r = rng_for(o->seed, index, STREAM_PLAN);
    plan_t p = {0};
    p.src = (int)(rng_next(&r) % s->n);
    pick_size(&r, &p.ow, &p.oh);
    if (o->large_every > 0 && (index + 1) % (uint64_t)o->large_every == 0) {
        int lng = rng_range(&r, LARGE_MIN, LARGE_MAX), was = p.ow > p.oh ? p.ow : p.oh;
        p.ow = (int)lround((double)p.ow * lng / was);
        p.oh = (int)lround((double)p.oh * lng / was);
    }
    p.mirror = (int)(rng_next(&r) & 1);
    p.quality = rng_range(&r, o->qmin, o->qmax);
    p.noise_sigma = (float)(o->noise_min + (o->noise_max - o->noise_min) * rng_unit(&r));
    p.noise_seed = rng_next(&r);
    p.progressive = o->progressive_every > 0 && (index + 1) % (uint64_t)o->progressive_every == 0;
    return p;
}

/* ---------------------------------------------------------------- crop choice */

/* Mean absolute green difference between points one output pixel apart, on a grid over
 * the crop: a cheap estimate of the detail the crop will have at output resolution. */
static double crop_detail(const image_t *im, int cx, int cy, int cw, int ch, double scale)
{
    int d = scale > 1.0 ? (int)lround(scale) : 1;
    double sum = 0;
    for (int gy = 0; gy < DETAIL_GRID; gy++) {
        int y = cy + (int)((gy + 0.5) * ch / DETAIL_GRID);
        int y2 = y + d < im->h ? y + d : im->h - 1;
        for (int gx = 0; gx < DETAIL_GRID; gx++) {
            int x = cx + (int)((gx + 0.5) * cw / DETAIL_GRID);
            int x2 = x + d < im->w ? x + d : im->w - 1;
            int g = im->px[((size_t)y * im->w + x) * 3 + 1];
            sum += abs(im->px[((size_t)y * im->w + x2) * 3 + 1] - g) +
                   abs(im->px[((size_t)y2 * im->w + x) * 3 + 1] - g);
        }
    }
    return sum;
}

/* Crop boxes have the output's aspect ratio and a downscale factor log-uniform in
 * [1, min(MAX_DOWNSCALE, what fits)]; the most detailed of `tries` candidates wins. */
static void pick_crop(const opts_t *o, uint64_t index, const image_t *im, plan_t *p)
{
    rng_t r = rng_for(o->seed, index, STREAM_CROP);
    double fit = fmin((double)im->w / p->ow, (double)im->h / p->oh);
    if (fit < 1) { /* a large output (--large-every) bigger than its photograph: never upscale */
        p->ow = (int)floor(p->ow * fit);
        p->oh = (int)floor(p->oh * fit);
        fit = fmin((double)im->w / p->ow, (double)im->h / p->oh);
    }
    double hi = fmin(MAX_DOWNSCALE, fit);
    double best = -1;
    for (int t = 0; t < o->crop_tries; t++) {
        double scale = exp(rng_unit(&r) * log(hi));
        int cw = (int)fmin(floor(p->ow * scale), im->w);
        int ch = (int)fmin(floor(p->oh * scale), im->h);
        int cx = rng_range(&r, 0, im->w - cw);
        int cy = rng_range(&r, 0, im->h - ch);
        double detail = o->crop_tries > 1 ? crop_detail(im, cx, cy, cw, ch, scale) : 0;
        if (detail > best) {
            best = detail;
            p->cx = cx;
            p->cy = cy;
            p->cw = cw;
            p->ch = ch;
        }
    }
}

/* ---------------------------------------------------------------- resize */

/* Separable triangle (tent) filter. For downscaling by s the tent is widened to radius s,
 * which averages over each output pixel's footprint (antialiasing); for s <= 1 it is plain
 * bilinear interpolation. Taps past the source edge are clamped to it. */
typedef struct {
    int taps;   /* taps per output sample */
    int *first; /* first source index per output sample */
    float *w;   /* taps weights per output sample, normalised to sum 1 */
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
        float *w = f.w + (size_t)x * f.taps;
        double sum = 0;
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

/* Horizontal pass over source rows y_lo..y_lo+rows-1: rows x ow x 3 floats. */
static float *resize_rows(const image_t *im, const filter_t *fx, int ow, int y_lo, int rows,
                          int mirror)
{
    float *out = xmalloc((size_t)rows * ow * 3 * sizeof *out);
    for (int y = 0; y < rows; y++) {
        const unsigned char *src = im->px + (size_t)(y_lo + y) * im->w * 3;
        float *dst = out + (size_t)y * ow * 3;
        for (int x = 0; x < ow; x++) {
            const float *w = fx->w + (size_t)x * fx->taps;
            float r = 0, g = 0, b = 0;
            for (int t = 0; t < fx->taps; t++) {
                const unsigned char *s = src + 3 * clampi(fx->first[x] + t, 0, im->w - 1);
                r += w[t] * s[0];
                g += w[t] * s[1];
                b += w[t] * s[2];
            }
            float *d = dst + 3 * (mirror ? ow - 1 - x : x);
            d[0] = r;
            d[1] = g;
            d[2] = b;
        }
    }
    return out;
}

/* Resizes the plan's crop of `im` to ow x oh x 3 floats, mirrored if asked. */
static float *resize_crop(const image_t *im, const plan_t *p)
{
    filter_t fx = make_filter(p->ow, p->cx, p->cw);
    filter_t fy = make_filter(p->oh, p->cy, p->ch);
    int y_lo = clampi(fy.first[0], 0, im->h - 1); /* source rows the vertical pass reads */
    int y_hi = clampi(fy.first[p->oh - 1] + fy.taps - 1, 0, im->h - 1);
    float *tmp = resize_rows(im, &fx, p->ow, y_lo, y_hi - y_lo + 1, p->mirror);

    size_t row_len = (size_t)p->ow * 3;
    float *out = xmalloc((size_t)p->oh * row_len * sizeof *out);
    for (int y = 0; y < p->oh; y++) {
        float *dst = out + (size_t)y * row_len;
        const float *w = fy.w + (size_t)y * fy.taps;
        for (size_t i = 0; i < row_len; i++)
            dst[i] = 0;
        for (int t = 0; t < fy.taps; t++) {
            const float *src =
                tmp + (size_t)(clampi(fy.first[y] + t, 0, im->h - 1) - y_lo) * row_len;
            for (size_t i = 0; i < row_len; i++)
                dst[i] += w[t] * src[i];
        }
    }
    free(tmp);
    free_filter(&fx);
    free_filter(&fy);
    return out;
}

/* ---------------------------------------------------------------- sharpen, noise, encode */

/* [1 2 1]/4 along one axis of a w x h x 3 float image; `step` is the distance between
 * neighbours in floats, `len` the axis length, `lines`/`line_step` walk the other axis. */
static void blur121_axis(const float *in, float *out, int len, size_t step, int lines,
                         size_t line_step)
{
    for (int l = 0; l < lines; l++) {
        for (int c = 0; c < 3; c++) {
            const float *a = in + (size_t)l * line_step + c;
            float *o = out + (size_t)l * line_step + c;
            for (int i = 0; i < len; i++) {
                float prev = a[(size_t)(i > 0 ? i - 1 : 0) * step];
                float next = a[(size_t)(i < len - 1 ? i + 1 : len - 1) * step];
                o[(size_t)i * step] = 0.25f * prev + 0.5f * a[(size_t)i * step] + 0.25f * next;
            }
        }
    }
}

/* Unsharp mask: px += amount * (px - blur(px)). Restores some of the crispness that the
 * wallpapers' soft focus and the antialiasing filter take away. */
static void sharpen(float *px, int w, int h, float amount)
{
    if (amount <= 0)
        return;
    size_t n = (size_t)w * h * 3;
    float *tmp = xmalloc(n * sizeof *tmp), *blur = xmalloc(n * sizeof *blur);
    blur121_axis(px, tmp, w, 3, h, (size_t)w * 3);   /* along rows */
    blur121_axis(tmp, blur, h, (size_t)w * 3, w, 3); /* along columns */
    for (size_t i = 0; i < n; i++)
        px[i] += amount * (px[i] - blur[i]);
    free(tmp);
    free(blur);
}

/* Adds sensor-like noise and rounds to bytes. Most of the noise is shared by R, G and B
 * (luminance noise, which 4:2:0 keeps), the rest is per channel. */
static unsigned char *add_noise_quantise(const float *px, const plan_t *p)
{
    size_t n = (size_t)p->ow * p->oh;
    unsigned char *out = xmalloc(n * 3);
    rng_t r = {p->noise_seed};
    const float shared = (float)LUMA_NOISE_SHARE;
    const float own = sqrtf(1.0f - shared * shared);
    for (size_t i = 0; i < n; i++) {
        float luma = shared * rng_gauss(&r);
        for (int c = 0; c < 3; c++) {
            float v = px[3 * i + c] + p->noise_sigma * (luma + own * rng_gauss(&r));
            out[3 * i + c] = (unsigned char)(v <= 0.0f ? 0 : v >= 255.0f ? 255 : (int)(v + 0.5f));
        }
    }
    return out;
}

/* Encodes and writes one output; returns its size in bytes. `enc` must be used for
 * progressive or for baseline outputs only, never both: libjpeg-turbo 2.1's TurboJPEG
 * keeps the progressive scan script in the handle, and later baseline images come out as
 * multi-scan streams behind a baseline header, which decoders reject as corrupt. */
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
    double bytes, pixels, quality;
    size_t min_bytes, max_bytes;
    int min_side, max_side;
} stats_t;

static void stats_add(stats_t *st, const plan_t *p, size_t bytes)
{
    int lo = p->ow < p->oh ? p->ow : p->oh, hi = p->ow < p->oh ? p->oh : p->ow;
    int first = st->count == 0;
    if (first || bytes < st->min_bytes)
        st->min_bytes = bytes;
    if (first || bytes > st->max_bytes)
        st->max_bytes = bytes;
    if (first || lo < st->min_side)
        st->min_side = lo;
    if (first || hi > st->max_side)
        st->max_side = hi;
    st->count++;
    st->progressive += (size_t)p->progressive;
    st->bytes += (double)bytes;
    st->pixels += (double)p->ow * p->oh;
    st->quality += p->quality;
}

static void stats_print(const stats_t *st, size_t nsrc, const char *out_dir)
{
    double n = (double)st->count;
    printf("mkcorpus: wrote %zu images (%zu progressive) from %zu source photographs to %s\n",
           st->count, st->progressive, nsrc, out_dir);
    printf("mkcorpus: size mean %.1f KB, min %.1f KB, max %.1f KB, total %.1f MB\n",
           st->bytes / n / 1024.0, st->min_bytes / 1024.0, st->max_bytes / 1024.0,
           st->bytes / (1024.0 * 1024.0));
    printf("mkcorpus: sides %d..%d px, mean %.0f pixels, %.2f bits/pixel, mean quality %.1f\n",
           st->min_side, st->max_side, st->pixels / n, st->bytes * 8 / st->pixels, st->quality / n);
}

/* ---------------------------------------------------------------- main */

static void class_name(char *buf, size_t len, int c)
{
    snprintf(buf, len, "class%03d", c);
}

static void output_path(char *buf, size_t len, const opts_t *o, uint64_t index)
{
    char cls[32];
    class_name(cls, sizeof cls, (int)(index / (uint64_t)o->per_class));
    int n = snprintf(buf, len, "%s/%s/%s_%05d.jpg", o->out_dir, cls, cls,
                     (int)(index % (uint64_t)o->per_class));
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

/* Generates, encodes and writes output `index` from its decoded source; enc[0] encodes
 * baseline images, enc[1] progressive ones (see encode_write). */
static size_t make_output(const opts_t *o, tjhandle enc[2], const image_t *im, uint64_t index,
                          plan_t *p)
{
    pick_crop(o, index, im, p);
    float *fpx = resize_crop(im, p);
    sharpen(fpx, p->ow, p->oh, (float)o->sharpen);
    unsigned char *rgb = add_noise_quantise(fpx, p);
    char path[PATH_MAX];
    output_path(path, sizeof path, o, index);
    size_t bytes = encode_write(enc[p->progressive ? 1 : 0], rgb, p, path);
    free(fpx);
    free(rgb);
    return bytes;
}

int main(int argc, char **argv)
{
    opts_t o = parse_args(argc, argv);
    tjhandle dec = tjInitDecompress(), enc[2] = {tjInitCompress(), tjInitCompress()};
    if (!dec || !enc[0] || !enc[1])
        die("cannot initialise TurboJPEG: %s", tjGetErrorStr2(NULL));

    sources_t src = load_sources(dec, o.src_dir);
    fprintf(stderr, "mkcorpus: %zu source photographs under %s\n", src.n, o.src_dir);
    make_output_dirs(&o);

    uint64_t total = (uint64_t)o.classes * (uint64_t)o.per_class;
    plan_t *plans = xmalloc(total * sizeof *plans);
    for (uint64_t i = 0; i < total; i++)
        plans[i] = make_plan(&o, &src, i);

    /* grouped by source: each source is decoded once, one at a time */
    stats_t st = {0};
    uint64_t step = total / 20 ? total / 20 : 1;
    for (size_t s = 0; s < src.n; s++) {
        image_t im = {NULL, 0, 0};
        for (uint64_t i = 0; i < total; i++) {
            if (plans[i].src != (int)s)
                continue;
            if (!im.px)
                im = decode_source(dec, &src.v[s]);
            stats_add(&st, &plans[i], make_output(&o, enc, &im, i, &plans[i]));
            if (st.count % step == 0 || st.count == total)
                fprintf(stderr, "mkcorpus: %zu/%" PRIu64 " images\n", st.count, total);
        }
        free(im.px);
    }

    stats_print(&st, src.n, o.out_dir);
    free(plans);
    for (size_t s = 0; s < src.n; s++)
        free(src.v[s].path);
    free(src.v);
    tjDestroy(dec);
    tjDestroy(enc[0]);
    tjDestroy(enc[1]);
    return 0;
}
