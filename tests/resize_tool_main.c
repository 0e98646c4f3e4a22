/*
 * resize_tool_main.c — test tool around engine/resize: resample a binary P6 PPM with
 * Pillow's BILINEAR semantics, so tests/cli/resize_pillow.sh can compare it with
 * PIL.Image.resize byte for byte; also times the kernels (-n) for the report.
 *
 *   resize_tool [options] IN.ppm OUT.ppm OUT_W OUT_H [X0 Y0 X1 Y1]
 *     -w X,Y,W,H   produce only this window of the OUT_W x OUT_H result
 *     -e           hand resize_rgb8 only the source extent (a cropped copy)
 *     -p PATH      kernel path: auto (default), portable, avx2, avx512
 *     -n N         run N more times, print min and median thread CPU time per image
 *
 * Exit status: 0 done, 1 bad usage or file, 2 resize error.
 */
#include "engine/resize.h"
#include "engine/resize_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct image {
    int w, h;
    uint8_t *rgb;
} image;

/* Next header token of a PPM (skips whitespace and # comments). */
static int ppm_token(FILE *f, char *buf, size_t cap)
{
    int c;
    size_t n = 0;
    for (;;) {
        c = fgetc(f);
        if (c == '#') {
            while (c != '\n' && c != EOF)
                c = fgetc(f);
        } else if (!isspace(c)) {
            break;
        }
    }
    while (c != EOF && !isspace(c) && n + 1 < cap) {
        buf[n++] = (char)c;
        c = fgetc(f);
    }
    buf[n] = 0;
    return n ? 0 : -1; /* the single whitespace after the token was consumed */
}

static int ppm_read(const char *path, image *im)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "resize_tool: %s: %s\n", path, strerror(errno));
        return -1;
    }
    char t[4][32];
    int ok = 1;
    for (int i = 0; i < 4 && ok; i++)
        ok = ppm_token(f, t[i], sizeof t[i]) == 0;
    im->w = ok ? atoi(t[1]) : 0;
    im->h = ok ? atoi(t[2]) : 0;
    if (!ok || strcmp(t[0], "P6") || strcmp(t[3], "255") || im->w <= 0 || im->h <= 0 ||
        im->w > RESIZE_MAX_SIDE || im->h > RESIZE_MAX_SIDE) {
        fprintf(stderr, "resize_tool: %s: not a binary 8-bit PPM (P6, maxval 255)\n", path);
        fclose(f);
        return -1;
    }
    size_t n = (size_t)im->w * im->h * 3;
    im->rgb = malloc(n);
    if (!im->rgb || fread(im->rgb, 1, n, f) != n) {
        fprintf(stderr, "resize_tool: %s: truncated pixel data\n", path);
        free(im->rgb);
        fclose(f);
        return -1;
    }
    fclose(f);
    return 0;
}

static int ppm_write(const char *path, const image *im)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "resize_tool: %s: %s\n", path, strerror(errno));
        return -1;
    }
    fprintf(f, "P6\n%d %d\n255\n", im->w, im->h);
    size_t n = (size_t)im->w * im->h * 3;
    int bad = fwrite(im->rgb, 1, n, f) != n;
    if (fclose(f) || bad) {
        fprintf(stderr, "resize_tool: %s: write failed\n", path);
        return -1;
    }
    return 0;
}

static void store_row_cb(void *ctx, int row, const uint8_t *rgb, int width)
{
    image *out = ctx;
    memcpy(out->rgb + (size_t)row * out->w * 3, rgb, (size_t)width * 3);
}

static const char *const path_names[] = {"auto", "portable", "avx2", "avx512"};

static void usage(void)
{
    fprintf(stderr, "usage: resize_tool [-w X,Y,W,H] [-e] [-p auto|portable|avx2|avx512] [-n N] "
                    "IN.ppm OUT.ppm OUT_W OUT_H [X0 Y0 X1 Y1]\n");
}

static double cpu_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int win[4] = {0, 0, 0, 0}, have_win = 0, extent_only = 0;
    long repeat = 0;
    resize_path path = RESIZE_PATH_AUTO;
    int a = 1;
    for (; a < argc && argv[a][0] == '-' && argv[a][1]; a++) {
        const char *o = argv[a];
        if (!strcmp(o, "-e")) {
            extent_only = 1;
        } else if (!strcmp(o, "-w") && a + 1 < argc) {
            if (sscanf(argv[++a], "%d,%d,%d,%d", &win[0], &win[1], &win[2], &win[3]) != 4) {
                usage();
                return 1;
            }
            have_win = 1;
        } else if (!strcmp(o, "-n") && a + 1 < argc) {
            repeat = strtol(argv[++a], NULL, 10);
        } else if (!strcmp(o, "-p") && a + 1 < argc) {
            const char *p = argv[++a];
            int named = resize_parse_path(p);
            path = named < 0 ? RESIZE_PATH_AUTO : (resize_path)named;
            if (named < 0) {
                usage();
                return 1;
            }
        } else {
            usage();
            return 1;
        }
    }
    if (argc - a != 4 && argc - a != 8) {
        usage();
        return 1;
    }
    if (resize_force_path(path)) {
        fprintf(stderr, "resize_tool: kernel path %d is not available on this CPU\n", path);
        return 1;
    }

    image in;
    if (ppm_read(argv[a], &in))
        return 1;
    resize_spec spec = {.in_w = in.w, .in_h = in.h};
    spec.out_w = atoi(argv[a + 2]);
    spec.out_h = atoi(argv[a + 3]);
    if (argc - a == 8) {
        for (int i = 0; i < 4; i++)
            spec.box[i] = strtod(argv[a + 4 + i], NULL);
    } else {
        spec.box[2] = in.w;
        spec.box[3] = in.h;
    }
    if (have_win) {
        spec.win_x = win[0], spec.win_y = win[1], spec.win_w = win[2], spec.win_h = win[3];
    } else {
        spec.win_w = spec.out_w, spec.win_h = spec.out_h;
    }

    int x0, y0, x1, y1, rc = resize_source_extent(&spec, &x0, &y0, &x1, &y1);
    if (rc) {
        fprintf(stderr, "resize_tool: invalid resize (%s): sizes, box or window out of range\n",
                strerror(-rc));
        free(in.rgb);
        return 2;
    }
    resize_src src = {.pixels = in.rgb, .stride = (size_t)in.w * 3, .w = in.w, .h = in.h};
    uint8_t *crop = NULL;
    if (extent_only) {
        /* an exact copy of the extent, so that any read outside it trips ASan */
        size_t cw = (size_t)(x1 - x0) * 3;
        crop = malloc(cw * (size_t)(y1 - y0));
        if (!crop) {
            fprintf(stderr, "resize_tool: out of memory\n");
            free(in.rgb);
            return 1;
        }
        for (int y = y0; y < y1; y++)
            memcpy(crop + (size_t)(y - y0) * cw, in.rgb + ((size_t)y * in.w + x0) * 3, cw);
        src = (resize_src){
            .pixels = crop, .stride = cw, .x0 = x0, .y0 = y0, .w = x1 - x0, .h = y1 - y0};
    }

    image out = {.w = spec.win_w, .h = spec.win_h};
    out.rgb = malloc((size_t)out.w * out.h * 3);
    if (!out.rgb) {
        fprintf(stderr, "resize_tool: out of memory\n");
        free(crop);
        free(in.rgb);
        return 1;
    }
    resize_scratch scratch = {0};
    rc = resize_rgb8(&spec, &src, store_row_cb, &out, &scratch);
    if (!rc && repeat > 0) {
        /* thread CPU time per call; min and median resist other load on the machine */
        double *t = calloc((size_t)repeat, sizeof *t);
        for (long i = 0; t && i < repeat && !rc; i++) {
            double t0 = cpu_now_s();
            rc = resize_rgb8(&spec, &src, store_row_cb, &out, &scratch);
            t[i] = cpu_now_s() - t0;
        }
        if (t && !rc) {
            qsort(t, (size_t)repeat, sizeof *t, cmp_double);
            fprintf(stderr,
                    "resize_tool: %s path: %.1f us/image min, %.1f median (%ld runs, %dx%d -> "
                    "%dx%d of %dx%d)\n",
                    path_names[resize_active_path()], t[0] * 1e6, t[repeat / 2] * 1e6, repeat, in.w,
                    in.h, spec.win_w, spec.win_h, spec.out_w, spec.out_h);
        }
        free(t);
    }
    resize_scratch_free(&scratch);
    if (rc) {
        fprintf(stderr, "resize_tool: resize failed: %s\n", strerror(-rc));
        free(out.rgb);
        free(crop);
        free(in.rgb);
        return 2;
    }
    rc = ppm_write(argv[a + 1], &out) ? 1 : 0;
    free(out.rgb);
    free(crop);
    free(in.rgb);
    return rc;
}
