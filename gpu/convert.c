/*
 * convert.c — the host side of the image conversion (convert.h): the table built by the
 * engine's own code (bfs_pipeline_out_levels, engine/api.h), and the host loop the CPU
 * path runs. The device runs the same gather (convert_ptx.c).
 */
#include "gpu/convert.h"
#include "gpu/batchfs_gpu.h"
#include "engine/api.h"
#include "base/err.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int bfsgi_convert_setup(bfsgi_convert *c, const char *dtype, const char *normalize,
                        const char *layout, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->nchw = -1;
    if ((!dtype || !*dtype) && (!layout || !*layout)) {
        if (normalize && *normalize)
            return bfs_errf(-EINVAL, err, errlen, "normalize=%s needs dtype=f16, bf16 or f32",
                            normalize);
        return 0;
    }
    /* the daemon's own parser and tables: same names, same values */
    bfs_pipeline_opts o;
    bfs_pipeline_defaults(&o);
    char text[512];
    int n = snprintf(text, sizeof text, "dtype=%s", dtype && *dtype ? dtype : "u8");
    if (normalize && *normalize)
        n += snprintf(text + n, sizeof text - (size_t)n, ",normalize=%s", normalize);
    if (layout && *layout)
        n += snprintf(text + n, sizeof text - (size_t)n, ",layout=%s", layout);
    if (n >= (int)sizeof text)
        return bfs_errf(-EINVAL, err, errlen, "conversion parameters too long");
    char why[512];
    if (bfs_pipeline_parse(&o, text, why, sizeof why) || bfs_pipeline_finish(&o, why, sizeof why))
        return bfs_errf(-EINVAL, err, errlen, "%s", why);
    c->active = 1;
    c->nchw = layout && *layout ? o.layout == BFS_LAYOUT_NCHW : -1;
    c->dtype = o.dtype == BFS_OUT_U8     ? BFSG_U8
               : o.dtype == BFS_OUT_F16  ? BFSG_F16
               : o.dtype == BFS_OUT_BF16 ? BFSG_BF16
                                         : BFSG_F32;
    c->elem = (int)bfs_pipeline_out_levels(&o, c->lut);
    return 0;
}

void bfsgi_convert_host(const bfsgi_convert *c, const uint8_t *src, int src_nchw, void *dst,
                        uint64_t n, uint32_t h, uint32_t w)
{
    const uint64_t plane = (uint64_t)h * w;
    const int dst_nchw = c->nchw < 0 ? src_nchw : c->nchw;
    const size_t e = (size_t)c->elem;
    uint8_t *d = dst;
    for (uint64_t b = 0; b < n; b++)
        for (uint64_t i = 0; i < plane; i++)
            for (uint64_t ch = 0; ch < 3; ch++) {
                uint64_t s = src_nchw ? (b * 3 + ch) * plane + i : (b * plane + i) * 3 + ch;
                uint64_t o = dst_nchw ? (b * 3 + ch) * plane + i : (b * plane + i) * 3 + ch;
                memcpy(d + o * e, c->lut + (ch * 256 + src[s]) * e, e);
            }
}
