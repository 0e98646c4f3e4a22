/*
 * engine_recipe.c — the training recipes' part of the engine (docs/augment.md): a sample's
 * recipe ops between the resize and the output writer (bfs_engine_render_augmented), the
 * batch-level Mixup/CutMix and `targets` (bfs_engine_batch_end), and the names of the
 * stage counters they add. The draws and the output-side pieces are engine/augment.c's,
 * the ops engine/imgops.c's; engine.c calls in here.
 */
#include "engine/engine_internal.h"
#include "engine/augment.h"
#include "engine/imgops.h"
#include "base/clock.h"
#include "base/err.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A resize_store_cb writing the sample's rows into w->aug (packed RGB), mirrored when
 * the sample is flipped: the recipe ops come after the flip, as in torchvision. */
typedef struct aug_sink {
    uint8_t *img;
    int w, flip;
} aug_sink;

static void aug_store_row(void *ctx, int row, const uint8_t *rgb, int width)
{
    const aug_sink *a = ctx;
    uint8_t *d = a->img + (size_t)row * (size_t)a->w * 3;
    if (!a->flip) {
        memcpy(d, rgb, (size_t)width * 3);
        return;
    }
    for (int x = 0; x < width; x++)
        memcpy(d + 3 * (size_t)x, rgb + 3 * (size_t)(width - 1 - x), 3);
}

/* The primary image with recipe ops: resize (and flip) into w->aug, apply the sample's
 * ops (bfs_augment_ops) there, then store it through the output writer. t0: when the
 * resize began. */
int bfs_engine_render_augmented(bfs_engine *e, bfs_engine_worker *w, uint64_t epoch, uint64_t key,
                                const resize_spec *sp, const resize_src *src,
                                const bfs_out_slot *slot, uint64_t t0)
{
    int ow = slot->w, oh = slot->h;
    size_t n = (size_t)ow * (size_t)oh * 3;
    if (w->aug_cap < 2 * n) {
        uint8_t *p = realloc(w->aug, 2 * n);
        if (!p)
            return -ENOMEM;
        w->aug = p, w->aug_cap = 2 * n;
    }
    aug_sink sink = {w->aug, ow, slot->flip};
    int rc = resize_rgb8(sp, src, aug_store_row, &sink, &w->rs);
    uint64_t t1 = bfs_mono_ns();
    bfs_engine_add(&w->resize_ns, t1 - t0);
    if (rc)
        return rc == -EINVAL ? BFS_E_SAMPLE_RANGE : rc;
    uint64_t ops0 = t1;
    bfs_aug_op ops[BFS_AUG_MAX_OPS];
    int nops = bfs_augment_ops(&e->o, epoch, key, ow, oh, ops);
    bfs_img im = {w->aug, ow, oh, (size_t)ow * 3};
    for (int i = 0; i < nops; i++) {
        if ((rc = bfs_imgop_apply(&im, ops[i].op, ops[i].mag, w->aug + n)))
            return BFS_E_SAMPLE_RANGE; /* (bfs_augment_ops draws only valid magnitudes) */
        uint64_t t = bfs_mono_ns();
        bfs_engine_add(&w->op_ns[ops[i].op], t - t1);
        bfs_engine_add(&w->op_n[ops[i].op], 1);
        t1 = t;
    }
    bfs_engine_add(&w->augment_ns, t1 - ops0);
    bfs_out_slot out = *slot;
    out.flip = 0;
    for (int y = 0; y < oh; y++)
        bfs_out_store_row(&out, y, w->aug + (size_t)y * im.stride, ow);
    bfs_engine_add(&w->resize_ns, bfs_mono_ns() - t1); /* the output writer's part */
    return 0;
}

int bfs_engine_batch_end_needed(const bfs_engine *e)
{
    return !e->tok && e->classes;
}

void bfs_engine_batch_end(bfs_engine *e, bfs_engine_worker *w, uint64_t epoch, uint64_t k,
                          uint8_t *dst)
{
    if (e->tok || !e->classes)
        return;
    uint64_t t0 = bfs_mono_ns();
    bfs_st_batch_desc d;
    bfs_st_layout lay;
    if (bfs_engine_image_layout(e, epoch, k, &d, &lay)) /* (batch_begin laid it out already) */
        return;
    uint32_t len = (uint32_t)d.batch;
    /* the batch's number in the unsharded epoch: shards draw independently */
    uint64_t key = k * e->o.shard_count + e->o.shard_index;
    bfs_mix_draw md;
    int iw = (int)d.width, ih = (int)d.height;
    if (bfs_augment_mix_draw(&e->o, epoch, key, iw, ih, &md))
        bfs_out_mix(&e->fmt, iw, ih, dst + lay.images_off, lay.sample_bytes, len, &md);
    bfs_out_targets((float *)(void *)(dst + lay.field_off[e->t_targets]), dst + lay.labels_off, len,
                    e->classes, e->o.label_smoothing, md.lam);
    uint64_t dt = bfs_mono_ns() - t0;
    int op = md.lam == 1 && !md.cutmix ? BFS_STAGE_TARGETS
             : md.cutmix               ? BFS_STAGE_CUTMIX
                                       : BFS_STAGE_MIXUP;
    bfs_engine_add(&w->op_ns[op], dt);
    bfs_engine_add(&w->op_n[op], 1);
    bfs_engine_add(&w->augment_ns, dt);
}

_Static_assert(BFS_STAGE_OPS == BFS_STAGE_END && (int)BFS_STAGE_ERASING == (int)BFS_OP_COUNT,
               "a stage counter per recipe op, and the rest");

const char *bfs_stage_op_name(int i)
{
    static const char *const more[] = {"Erasing", "Mixup", "CutMix", "Targets"};
    if (i >= BFS_OP_COUNT && i < BFS_STAGE_END)
        return more[i - BFS_OP_COUNT];
    return bfs_imgop_name(i);
}
