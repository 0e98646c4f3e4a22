/*
 * reference.c — the decoders' reference of `batchfs --bench` (bfs_reference_rate, api.h):
 * what one core of libjpeg-turbo (and libspng, libwebp) does decoding the same files in
 * full, the yardstick of the pipeline's images per second per core.
 */
#include "engine/api.h"
#include "base/clock.h"
#include "engine/dataset/image.h"
#include "engine/dataset/source.h"

#include <stdlib.h>
#include <time.h>
#include <turbojpeg.h>

/* (single-core full decodes: bfs_image_decode is libspng, libwebp) */
double bfs_reference_rate(const char *source, const uint64_t *idx, size_t n, size_t *used,
                          double *cpu_rate)
{
    char err[512];
    bfs_source *src;
    *used = 0;
    if (n == 0 || bfs_source_open(source, &src, err, sizeof err))
        return 0; /* (token datasets take no reference: no open, no decoder) */
    tjhandle tj = tjInitDecompress();
    bfs_source_scratch sc = {0};
    uint8_t *rgb = NULL;
    size_t cap = 0;
    double busy = 0, cpu = 0;
    for (size_t i = 0; i < n && tj; i++) {
        bfs_item it;
        if (bfs_source_get(src, idx[i], &it, &sc))
            continue;
        int fmt = bfs_image_sniff(it.data, it.len);
        if (fmt == BFS_IMAGE_PNG || fmt == BFS_IMAGE_WEBP) { /* a folder's too: no table */
            double t0 = bfs_mono_s(), c0 = bfs_clock_s(CLOCK_THREAD_CPUTIME_ID);
            bfs_image_facts f;
            if (bfs_image_probe(it.data, it.len, &f))
                continue;
            size_t need = (size_t)f.width * f.height * 3;
            if (need > cap) {
                uint8_t *b = realloc(rgb, need);
                if (!b)
                    break;
                rgb = b, cap = need;
            }
            int rc = bfs_image_decode(it.data, it.len, &f, rgb, need, NULL, 0);
            busy += bfs_mono_s() - t0;
            cpu += bfs_clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
            if (rc == 0)
                (*used)++;
            continue;
        }
        if ((it.flags & BFS_KIND_MASK) != BFS_KIND_JPEG)
            continue;
        int w, h, ss, cs;
        double t0 = bfs_mono_s(), c0 = bfs_clock_s(CLOCK_THREAD_CPUTIME_ID); /* header + decode */
        if (tjDecompressHeader3(tj, it.data, it.len, &w, &h, &ss, &cs))
            continue;
        size_t need = (size_t)w * h * 3;
        if (need > cap) {
            uint8_t *b = realloc(rgb, need);
            if (!b)
                break;
            rgb = b, cap = need;
        }
        int rc = tjDecompress2(tj, it.data, it.len, rgb, w, 0, h, TJPF_RGB, 0);
        busy += bfs_mono_s() - t0;
        cpu += bfs_clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
        if (rc == 0)
            (*used)++;
    }
    free(rgb);
    bfs_source_scratch_free(&sc);
    if (tj)
        tjDestroy(tj);
    bfs_source_close(src);
    *cpu_rate = cpu > 0 ? *used / cpu : 0;
    return busy > 0 ? *used / busy : 0;
}
