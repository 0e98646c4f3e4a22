/*
 * bench_huff — the decode of restart windows with engine/huff.h's entropy decoder against
 * libjpeg-turbo's own, on the same photos and crops, and their pixels compared.
 *
 * Each JPEG of DIR is given a restart marker after every MCU (bfs_jpeg_add_restarts, as
 * mkbatchfs --restart does), then CROPS RandomResizedCrop-like regions (area 8-100%,
 * aspect 3/4-4/3, the scaled IDCT where a 224-pixel output still shrinks 2x) are decoded
 * by two decoders, one with each entropy decoder, alternately, each timed in thread CPU
 * time. Prints microseconds per decode and the ratio; exits 1 if any pixel differs.
 *
 *   bench_huff DIR [FILES [CROPS]]      (defaults 300 files, 8 crops each)
 */
#include "engine/decode.h"
#include "base/err.h"
#include "engine/dataset/jpeg.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static double unit(uint64_t *s)
{
    return (double)(rnd(s) >> 11) / 9007199254740992.0;
}

static int walk(const char *dir, char ***paths, int *n, int max)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    struct dirent *e;
    while (*n < max && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        size_t l = strlen(e->d_name);
        if (l > 4 && strcmp(e->d_name + l - 4, ".jpg") == 0) {
            *paths = realloc(*paths, sizeof **paths * (size_t)(*n + 1));
            (*paths)[(*n)++] = strdup(p);
        } else if (e->d_type == DT_DIR) {
            walk(p, paths, n, max);
        }
    }
    closedir(d);
    return 0;
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = n > 0 ? malloc((size_t)n) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* The region's rows of two decodes equal. */
static int same(const bfs_pixels *a, const bfs_pixels *b, int x0, int y0, int x1, int y1)
{
    for (int y = y0; y < y1; y++) {
        const uint8_t *pa = a->rgb + (size_t)(y - a->y0) * a->stride + 3 * (size_t)(x0 - a->x0);
        const uint8_t *pb = b->rgb + (size_t)(y - b->y0) * b->stride + 3 * (size_t)(x0 - b->x0);
        if (memcmp(pa, pb, 3 * (size_t)(x1 - x0)) != 0)
            return 0;
    }
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_huff DIR [FILES [CROPS]]\n");
        return 2;
    }
    int max = argc > 2 ? atoi(argv[2]) : 300, crops = argc > 3 ? atoi(argv[3]) : 8;
    char **paths = NULL;
    int n = 0;
    if (walk(argv[1], &paths, &n, max) || n == 0) {
        fprintf(stderr, "bench_huff: no JPEGs under %s\n", argv[1]);
        return 2;
    }
    bfs_decoder *own, *lib;
    if (bfs_decoder_create(&own) || bfs_decoder_create(&lib) ||
        bfs_decoder_set_own_entropy(own, 1) || bfs_decoder_set_own_entropy(lib, 0))
        return 2;
    double t_own = 0, t_lib = 0;
    uint64_t decodes = 0, differ = 0, seed = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < n; i++) {
        size_t len, rlen;
        uint8_t *jpg = slurp(paths[i], &len), *rst = NULL;
        bfs_image_info info;
        if (!jpg || bfs_jpeg_add_restarts(jpg, len, 1, &rst, &rlen) != 0 ||
            bfs_decoder_probe(rst, rlen, &info)) {
            free(jpg), free(rst);
            continue;
        }
        for (int c = 0; c < crops; c++) {
            double area = (0.08 + 0.92 * unit(&seed)) * info.width * info.height;
            double ar = 0.75 + (4.0 / 3 - 0.75) * unit(&seed);
            int w = (int)(sqrt(area * ar) + 0.5), h = (int)(sqrt(area / ar) + 0.5);
            w = w < 1 ? 1 : w > info.width ? info.width : w;
            h = h < 1 ? 1 : h > info.height ? info.height : h;
            int x = (int)(rnd(&seed) % (uint64_t)(info.width - w + 1));
            int y = (int)(rnd(&seed) % (uint64_t)(info.height - h + 1));
            int s = 1;
            while (s < 8 && (w < h ? w : h) / (2 * s) >= 2 * 224)
                s *= 2;
            int x0 = x / s, y0 = y / s, x1 = (x + w + s - 1) / s, y1 = (y + h + s - 1) / s;
            int sw = (info.width + s - 1) / s, sh = (info.height + s - 1) / s;
            x1 = x1 > sw ? sw : x1, y1 = y1 > sh ? sh : y1;
            bfs_pixels a, b;
            int ra, rb;
            double t0 = cpu();
            if (c & 1) { /* alternately first: neither always gets the warmer caches */
                rb = bfs_decoder_decode(lib, rst, rlen, &info, s, x0, y0, x1, y1, &b);
                double t1 = cpu();
                ra = bfs_decoder_decode(own, rst, rlen, &info, s, x0, y0, x1, y1, &a);
                t_lib += t1 - t0, t_own += cpu() - t1;
            } else {
                ra = bfs_decoder_decode(own, rst, rlen, &info, s, x0, y0, x1, y1, &a);
                double t1 = cpu();
                rb = bfs_decoder_decode(lib, rst, rlen, &info, s, x0, y0, x1, y1, &b);
                t_own += t1 - t0, t_lib += cpu() - t1;
            }
            decodes++;
            if (ra != rb || (!ra && !same(&a, &b, x0, y0, x1, y1))) {
                fprintf(stderr, "bench_huff: %s: crop %d,%d-%d,%d at 1/%d differs (%d, %d)\n",
                        paths[i], x0, y0, x1, y1, s, ra, rb);
                differ++;
            }
        }
        free(jpg), free(rst);
    }
    bfs_decode_stats so, sl;
    bfs_decoder_get_stats(own, &so);
    bfs_decoder_get_stats(lib, &sl);
    printf("decodes: %llu crops of %d photos; windowed %llu, by our entropy decoder %llu "
           "(the reference: %llu windowed, %llu ours)\n",
           (unsigned long long)decodes, n, (unsigned long long)so.windowed,
           (unsigned long long)so.own_entropy, (unsigned long long)sl.windowed,
           (unsigned long long)sl.own_entropy);
    printf("decode, thread CPU per crop: ours %.1f us, libjpeg-turbo's %.1f us: %.2fx\n",
           1e6 * t_own / (double)decodes, 1e6 * t_lib / (double)decodes, t_lib / t_own);
    printf("pixels: %llu of %llu decodes differ\n", (unsigned long long)differ,
           (unsigned long long)decodes);
    bfs_decoder_destroy(own);
    bfs_decoder_destroy(lib);
    for (int i = 0; i < n; i++)
        free(paths[i]);
    free(paths);
    return differ ? 1 : 0;
}
