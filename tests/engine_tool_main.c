/*
 * engine_tool — expose the engine to test scripts.
 *
 *   engine_tool batch SOURCE OPTIONS EPOCH K OUT      write batch K of EPOCH to OUT
 *   engine_tool geometry SOURCE OPTIONS EPOCH INDEX   print sample INDEX's geometry:
 *       "W H  x0 y0 x1 y1  out_w out_h  win_x win_y win_w win_h  flip  ox oy iw ih"
 *       (image size; Pillow box inside the region iw x ih at (ox, oy) that is resized —
 *       the crop for train, the image otherwise; resize size; window; flip 0/1)
 *   engine_tool epoch SOURCE OPTIONS EPOCH OUTDIR    write every batch of EPOCH to
 *       OUTDIR/batch_K
 *   engine_tool boxes - OPTIONS 0 0                   for each stdin line "W H EPOCH INDEX
 *       MIN_AREA N x0 y0 x1 y1 ..." (an image W x H, N boxes): one line "F  x0 y0 x1 y1
 *       ow oh  win_x win_y win_w win_h  ox oy" (the flip, the crop box in the image, the
 *       resize size, the window), then a line "K  k x0 y0 x1 y1 ..." of the K boxes
 *       bfs_augment_boxes keeps (k: the source row; %.9g, exact for f32): for
 *       tests/boxes_ref.py
 *   engine_tool order SOURCE OPTIONS EPOCH -          token datasets: print the epoch's
 *       document order (one index per line) and, for pack=bucket, a line "chunks" and
 *       the chunk of each batch, for shuffle=rows a line "rows" and the window at each
 *       position of the epoch's rows (tests/tokens_ref.py builds batches from these)
 *   engine_tool decode FILE OUT                       decode image FILE (JPEG, PNG, WebP)
 *       whole with the engine's decoder (probe, then bfs_decoder_decode_image at scale 1);
 *       print "W H" and write the packed RGB rows to OUT; on failure print the error's
 *       message and exit 1
 *   engine_tool recipe - OPTIONS EPOCH INDEX          print the recipe ops sample INDEX
 *       gets in EPOCH (bfs_augment_ops on the output size): one line "OP MAGNITUDE"
 *       (%.17g) per op, in order
 *   engine_tool erase - OPTIONS EPOCH INDEX           print the box erasing= erases in
 *       sample INDEX in EPOCH ("top left h w", bfs_augment_erase_box), or "none"
 *   engine_tool mixdraw - OPTIONS EPOCH BATCH         print the mixing draws of batch
 *       number BATCH (in the unsharded epoch) on the output size: "LAM CUTMIX YL YH XL
 *       XH" (bfs_augment_mix_draw; LAM as %.17g; 1 0 0 0 0 0 when not mixed)
 *   engine_tool ops                                   for each stdin line "IN OUT W H OP
 *       MAGNITUDE" (IN: W x H packed RGB; OP as bfs_imgop_name spells it): apply the op
 *       (bfs_imgop_apply) and write the result to OUT; a line "linspace START END STEPS"
 *       prints bfs_imgop_linspace's STEPS values (%.9g); for tests/cli/augment_torch.sh;
 *       BFS_IMGOPS_PORTABLE=1 in the environment: the portable C paths (no AVX2)
 */
#include "engine/augment.h"
#include "engine/decode.h"
#include "engine/imgops.h"
#include "engine/engine.h"
#include "engine/exec.h"
#include "engine/pipeline.h"
#include "engine/dataset/source.h"
#include "engine/tokens.h"
#include "tests/testutil.h"
#include "base/err.h"

#include <errno.h>
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

/* engine_tool decode FILE OUT */
static int decode_file(const char *path, const char *out)
{
    uint8_t *data = NULL, *rgb = NULL;
    size_t len = 0;
    bfs_decoder *d = NULL;
    bfs_image_info info;
    int rc = tu_read_file(path, &data, &len);
    if (!rc)
        rc = bfs_decoder_probe(data, len, &info);
    if (!rc)
        rc = bfs_decoder_create(&d);
    size_t n = rc ? 0 : (size_t)info.width * (size_t)info.height * 3;
    if (!rc && !(rgb = malloc(n)))
        rc = -ENOMEM;
    if (!rc)
        rc = bfs_decoder_decode_image(d, data, len, &info, 1, rgb, n);
    if (rc) {
        fprintf(stderr, "engine_tool: %s: %s\n", path, bfs_strerror(rc));
    } else {
        FILE *f = fopen(out, "wb");
        if (!f || fwrite(rgb, 1, n, f) != n || fclose(f)) {
            perror(out);
            rc = -EIO;
        } else {
            printf("%d %d\n", info.width, info.height);
        }
    }
    bfs_decoder_destroy(d);
    free(rgb);
    free(data);
    return rc ? 1 : 0;
}

/* engine_tool ops: one op per stdin line */
static int apply_ops(void)
{
    const char *portable = getenv("BFS_IMGOPS_PORTABLE");
    bfs_imgop_set_portable(portable && !strcmp(portable, "1"));
    char line[8192], in[4096], out[4096], name[64];
    int w, h, steps;
    double mag, a, b;
    while (fgets(line, sizeof line, stdin)) {
        if (sscanf(line, "linspace %lf %lf %d", &a, &b, &steps) == 3 && steps >= 2 &&
            steps <= 4096) {
            for (int i = 0; i < steps; i++)
                printf("%s%.9g", i ? " " : "", (double)bfs_imgop_linspace(a, b, steps, i));
            printf("\n");
            continue;
        }
        if (sscanf(line, "%4095s %4095s %d %d %63s %lf", in, out, &w, &h, name, &mag) != 6 ||
            w <= 0 || h <= 0 || w > 16384 || h > 16384) {
            fprintf(stderr, "engine_tool: ops: bad line: %s", line);
            return 2;
        }
        int op = bfs_imgop_lookup(name);
        size_t n = (size_t)w * (size_t)h * 3, len = 0;
        uint8_t *rgb = NULL, *tmp = malloc(n);
        int rc = op < 0 ? -EINVAL : tu_read_file(in, &rgb, &len);
        if (!rc && len != n)
            rc = -EINVAL;
        bfs_img im = {rgb, w, h, (size_t)w * 3};
        if (!rc)
            rc = tmp ? bfs_imgop_apply(&im, op, mag, tmp) : -ENOMEM;
        FILE *f = rc ? NULL : fopen(out, "wb");
        if (!rc && (!f || fwrite(rgb, 1, n, f) != n || fclose(f)))
            rc = -EIO;
        free(rgb);
        free(tmp);
        if (rc) {
            fprintf(stderr, "engine_tool: ops: %s %s %g: %s\n", in, name, mag, strerror(-rc));
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "decode"))
        return decode_file(argv[2], argv[3]);
    if (argc == 2 && !strcmp(argv[1], "ops"))
        return apply_ops();
    if (argc < 6) {
        fprintf(stderr, "usage: engine_tool batch SOURCE OPTIONS EPOCH K OUT\n"
                        "       engine_tool geometry SOURCE OPTIONS EPOCH INDEX\n"
                        "       engine_tool epoch SOURCE OPTIONS EPOCH OUTDIR\n"
                        "       engine_tool order SOURCE OPTIONS EPOCH -\n"
                        "       engine_tool boxes - OPTIONS 0 0 < cases\n"
                        "       engine_tool recipe - OPTIONS EPOCH INDEX\n"
                        "       engine_tool erase - OPTIONS EPOCH INDEX\n"
                        "       engine_tool mixdraw - OPTIONS EPOCH BATCH\n"
                        "       engine_tool decode FILE OUT\n"
                        "       engine_tool ops < lines\n");
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
    if (!strcmp(argv[1], "epoch") && argc == 6) {
        bfs_engine *e;
        bfs_exec *x;
        if (bfs_engine_create(argv[2], &o, &e, err, sizeof err) || bfs_exec_create(e, 0, 0, &x)) {
            fprintf(stderr, "engine_tool: %s\n", err);
            return 1;
        }
        int rc = 0;
        for (uint64_t i = 0; i < bfs_engine_batches(e) && !rc; i++) {
            bfs_batch *b;
            char path[4096];
            snprintf(path, sizeof path, "%s/batch_%llu", argv[5], (unsigned long long)i);
            if ((rc = bfs_exec_get(x, epoch, i, &b, err, sizeof err)))
                fprintf(stderr, "engine_tool: %s\n", err);
            else {
                rc = tu_write_file(path, bfs_batch_data(b), bfs_batch_size(b));
                bfs_batch_release(b);
            }
        }
        bfs_exec_destroy(x);
        bfs_engine_destroy(e);
        return rc ? 1 : 0;
    }
    if (!strcmp(argv[1], "order") && argc == 6) {
        bfs_source *s;
        bfs_tokens *t = NULL;
        if (bfs_source_open(argv[2], &s, err, sizeof err) ||
            bfs_pipeline_check_kind(&o, bfs_source_is_tokens(s), err, sizeof err) ||
            bfs_tokens_create(s, &o, 0, &t, err, sizeof err)) {
            fprintf(stderr, "engine_tool: %s\n", err);
            return 1;
        }
        uint64_t d, c;
        for (uint64_t p = 0; bfs_tokens_doc_order(t, epoch, p, &d) == 0; p++)
            printf("%llu\n", (unsigned long long)d);
        if (o.shuffle == BFS_SHUFFLE_ROWS) {
            printf("rows\n");
            for (uint64_t g = 0; bfs_tokens_window(t, epoch, g, &c) == 0; g++)
                printf("%llu\n", (unsigned long long)c);
        }
        if (o.pack == BFS_PACK_BUCKET) {
            printf("chunks\n");
            for (uint64_t i = 0; bfs_tokens_chunk(t, epoch, i, &c) == 0; i++)
                printf("%llu\n", (unsigned long long)c);
        }
        bfs_tokens_destroy(t);
        bfs_source_close(s);
        return 0;
    }
    if (!strcmp(argv[1], "boxes") && argc == 6) {
        int W, H, n;
        unsigned long long ep, idx;
        double min_area;
        while (scanf("%d %d %llu %llu %lf %d", &W, &H, &ep, &idx, &min_area, &n) == 6) {
            if (n < 0 || n > 100000)
                return 2;
            float *in = malloc(16 * (size_t)n + 16), *out = malloc(16 * (size_t)n + 16);
            uint32_t *keep = malloc(4 * (size_t)n + 4);
            for (int i = 0; i < 4 * n; i++)
                if (!in || scanf("%f", &in[i]) != 1)
                    return 2;
            bfs_geometry g;
            if (!out || !keep || bfs_augment_geometry(&o, ep, idx, W, H, &g))
                return 1;
            const resize_spec *p = &g.spec;
            printf("%d  %.17g %.17g %.17g %.17g  %d %d  %d %d %d %d  %d %d\n", g.flip, p->box[0],
                   p->box[1], p->box[2], p->box[3], p->out_w, p->out_h, p->win_x, p->win_y,
                   p->win_w, p->win_h, g.origin_x, g.origin_y);
            uint32_t kept = bfs_augment_boxes(&g, in, (uint32_t)n, min_area, out, keep);
            printf("%u ", kept);
            for (uint32_t j = 0; j < kept; j++)
                printf(" %u %.9g %.9g %.9g %.9g", keep[j], out[4 * j], out[4 * j + 1],
                       out[4 * j + 2], out[4 * j + 3]);
            printf("\n");
            free(in), free(out), free(keep);
        }
        return 0;
    }
    if (!strcmp(argv[1], "erase") && argc == 6) {
        bfs_erase_box b;
        bfs_rng r;
        uint32_t h, w;
        bfs_pipeline_size_at(&o, epoch, &h, &w);
        if (bfs_augment_erase_box(&o, epoch, k, (int)w, (int)h, &b, &r))
            printf("%d %d %d %d\n", b.top, b.left, b.h, b.w);
        else
            printf("none\n");
        return 0;
    }
    if (!strcmp(argv[1], "mixdraw") && argc == 6) {
        bfs_mix_draw d;
        uint32_t h, w;
        bfs_pipeline_size_at(&o, epoch, &h, &w);
        bfs_augment_mix_draw(&o, epoch, k, (int)w, (int)h, &d);
        printf("%.17g %d %d %d %d %d\n", d.lam, d.cutmix, d.yl, d.yh, d.xl, d.xh);
        return 0;
    }
    if (!strcmp(argv[1], "recipe") && argc == 6) {
        bfs_aug_op ops[BFS_AUG_MAX_OPS];
        uint32_t h, w;
        bfs_pipeline_size_at(&o, epoch, &h, &w);
        int n = bfs_augment_ops(&o, epoch, k, (int)w, (int)h, ops);
        for (int i = 0; i < n; i++)
            printf("%s %.17g\n", bfs_imgop_name(ops[i].op), ops[i].mag);
        return 0;
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
        /* as the engine's render(): the table's size, else (a folder) the file's header */
        int rc = bfs_source_get(s, k, &it, &sc);
        if (!rc)
            info = (bfs_image_info){it.width, it.height, it.flags, it.raw_size};
        if (rc || (info.width == 0 && bfs_decoder_probe(it.data, it.len, &info)) ||
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
