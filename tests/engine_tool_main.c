/*
 * engine_tool — expose the engine to test scripts.
 *
 *   engine_tool batch SOURCE OPTIONS EPOCH K OUT      write batch K of EPOCH to OUT
 *   engine_tool geometry SOURCE OPTIONS EPOCH INDEX   print sample INDEX's geometry:
 *       "W H  x0 y0 x1 y1  out_w out_h  win_x win_y win_w win_h  flip  ox oy iw ih"
 *       (image size; Pillow box inside the region iw x ih at (ox, oy) that is resized —
 *       the crop for train, the image otherwise; resize size; window; flip 0/1)
 */
#include "engine/augment.h"
#include "engine/decode.h"
#include "engine/engine.h"
#include "engine/exec.h"
#include "engine/pipeline.h"
#include "engine/dataset/source.h"
#include "tests/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int opts(const char *text, bfs_pipeline_opts *o)
{
    char err[1024];
    bfs_pipeline_defaults(o);
    if (bfs_pipeline_parse(o, text, err, sizeof err) || bfs_pipeline_finish(o, err, sizeof err)) {
        fprintf(stderr, "engine_tool: %s\n", err);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: engine_tool batch SOURCE OPTIONS EPOCH K OUT\n"
                        "       engine_tool geometry SOURCE OPTIONS EPOCH INDEX\n");
        return 2;
    }
    bfs_pipeline_opts o;
    if (opts(argv[3], &o))
        return 2;
    uint64_t epoch = strtoull(argv[4], NULL, 10), k = strtoull(argv[5], NULL, 10);
    char err[1024];
    if (!strcmp(argv[1], "batch") && argc == 7) {
        bfs_engine *e;
        bfs_exec *x;
        bfs_batch *b;
        if (bfs_engine_create(argv[2], &o, &e, err, sizeof err)) {
            fprintf(stderr, "engine_tool: %s\n", err);
            return 1;
        }
        if (bfs_exec_create(e, 0, 0, &x) || bfs_exec_get(x, epoch, k, &b, err, sizeof err)) {
            fprintf(stderr, "engine_tool: %s\n", err);
            return 1;
        }
        int rc = tu_write_file(argv[6], bfs_batch_data(b), bfs_batch_size(b));
        bfs_batch_release(b);
        bfs_exec_destroy(x);
        bfs_engine_destroy(e);
        return rc ? 1 : 0;
    }
    if (!strcmp(argv[1], "geometry") && argc == 6) {
        bfs_source *s;
        if (bfs_source_open(argv[2], &s, err, sizeof err)) {
            fprintf(stderr, "engine_tool: %s\n", err);
            return 1;
        }
        bfs_source_scratch sc = {0};
        bfs_item it;
        bfs_image_info info;
        bfs_geometry g;
        if (bfs_source_get(s, k, &it, &sc) || bfs_decoder_probe(it.data, it.len, &info) ||
            bfs_augment_geometry(&o, epoch, k, info.width, info.height, &g)) {
            fprintf(stderr, "engine_tool: sample %llu unreadable\n", (unsigned long long)k);
            return 1;
        }
        const resize_spec *p = &g.spec;
        printf("%d %d  %.17g %.17g %.17g %.17g  %d %d  %d %d %d %d  %d %d %d %d %d\n", info.width,
               info.height, p->box[0], p->box[1], p->box[2], p->box[3], p->out_w, p->out_h,
               p->win_x, p->win_y, p->win_w, p->win_h, g.flip, g.origin_x, g.origin_y, p->in_w,
               p->in_h);
        bfs_source_scratch_free(&sc);
        bfs_source_close(s);
        return 0;
    }
    fprintf(stderr, "engine_tool: bad arguments\n");
    return 2;
}
