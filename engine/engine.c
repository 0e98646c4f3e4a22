/*
 * engine.c — one sample from payload to its slot in the batch (see engine.h).
 *
 * Per sample: read (a pointer into the mapped .bfs, or a file read for folders), plan
 * the geometry at full resolution, pick the IDCT scale, ask resize_plan_extent which
 * pixels the output window reads (it keeps the resize coefficients in the worker's
 * scratch), decode only those, resample them straight into the batch through the fused
 * writer. Time per stage is accumulated per worker.
 * With sample_cache_mb > 0 the decode step first asks the decoded-sample cache
 * (samplecache.h) for the whole image at that scale; the resize reads the same pixels.
 */
#include "engine/engine_internal.h"
#include "engine/augment.h"
#include "engine/imgops.h"
#include "engine/dataset/bfs.h"
#include "engine/dataset/fetch.h"
#include "engine/dataset/prefetch.h"
#include "engine/decode.h"
#include "base/err.h"
#include "engine/plan.h"
#include "engine/resize.h"
#include "engine/rng.h"
#include "engine/safetensors.h"
#include "engine/tokens.h"
#include "engine/mix.h"
#include "cache/samplecache.h"
#include "cache/srccache.h"
#include "engine/dataset/source.h"
#include "base/clock.h"
#include "base/endian.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ImageNet mean as u8: the colour of a substitute when no other sample decodes */
#define GRAY_R 124
#define GRAY_G 116
#define GRAY_B 104

static void describe(const bfs_engine *e, uint32_t len, uint64_t epoch, uint64_t k,
                     bfs_st_batch_desc *d);

int bfs_engine_create(const char *source_path, const bfs_pipeline_opts *o, bfs_engine **out,
                      char *err, size_t errlen)
{
    *out = NULL;
    bfs_engine *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    e->o = *o;
    pthread_mutex_init(&e->log_lock, NULL);
    bfs_mix_desc *md = NULL;
    /* how s3:// and https:// sources are reached (the process's only configuration:
     * a mount, a worker, --bench each make one engine) */
    bfs_fetch_conf fc = {.s3_region = o->s3_region,
                         .s3_endpoint = o->s3_endpoint,
                         .ca = o->ca,
                         .retries = (unsigned)o->fetch_retries,
                         .timeout_ms = (unsigned)o->fetch_timeout_ms};
    int rc = bfs_fetch_configure(&fc, err, errlen);
    if (rc) {
        if (rc == -ENOMEM)
            bfs_errf(rc, err, errlen, "out of memory");
        goto fail;
    }
    /* 256 MiB held ahead per remote file: ten ImageNet batches of 256 photos */
    bfs_prefetch_configure((unsigned)o->fetch_parallel, 256ull << 20);
    if ((rc = bfs_srccache_configure(o->source_cache, (uint64_t)o->source_cache_mb << 20, err,
                                     errlen)))
        goto fail;
    if (o->mix[0]) { /* a mixture: source_path only names it in messages */
        if (!(md = malloc(sizeof *md))) {
            rc = bfs_errf(-ENOMEM, err, errlen, "out of memory");
            goto fail;
        }
        if ((rc = bfs_pipeline_mix(&e->o, md, err, errlen)) ||
            (rc = bfs_source_open_mix(md->path, md->n, o->mix_labels == BFS_MIX_LABELS_OFFSET,
                                      &e->src, err, errlen)))
            goto fail;
        e->nmix = md->n;
        if (!(e->mix_text = malloc(BFS_MIX_TEXT + BFS_MIX_SOURCES * 2))) {
            rc = bfs_errf(-ENOMEM, err, errlen, "out of memory");
            goto fail;
        }
        bfs_pipeline_mix_display(md, e->mix_text, BFS_MIX_TEXT + BFS_MIX_SOURCES * 2);
        for (uint32_t k = 0; k <= md->n; k++)
            e->mix_first[k] = bfs_source_mix_first(e->src, k);
    } else if ((rc = bfs_source_open(source_path, &e->src, err, errlen)))
        goto fail;
    uint64_t identity = md ? bfs_pipeline_mix_identity(md, bfs_source_identity(e->src))
                           : bfs_source_identity(e->src);
    char why[512] = "";
    if ((rc = bfs_pipeline_check_kind(&e->o, bfs_source_is_tokens(e->src), why, sizeof why))) {
        bfs_errf(rc, err, errlen, "%s: %s", source_path, why);
        goto fail;
    }
    if (e->o.sequences) {
        e->fingerprint = bfs_pipeline_fingerprint(&e->o, identity);
        if ((rc = bfs_tokens_create(e->src, &e->o, e->fingerprint, &e->tok, err, errlen)))
            goto fail;
        goto named;
    }
    if ((rc = bfs_fields_plan(e, err, errlen)))
        goto fail;
    /* pad=1 only, so that other batches keep their bytes (docs/options.md, pad=) */
    if (o->pad && (rc = bfs_fields_add_tensor(e, "padded", "", BFS_DT_U8, 0, NULL, 0, &e->t_padded,
                                              err, errlen)))
        goto fail;
    if (bfs_augment_targets(&e->o)) { /* mixup=, cutmix=, label_smoothing=: soft targets */
        uint32_t have = bfs_source_class_count(e->src);
        uint64_t classes = e->o.classes ? e->o.classes : have;
        if (!classes) {
            rc = bfs_errf(-EINVAL, err, errlen,
                          "%s: mixup=, cutmix= and label_smoothing= make targets over the "
                          "classes, and this dataset has no class count; give classes=N",
                          source_path);
            goto fail;
        }
        if (classes < have) {
            rc = bfs_errf(-EINVAL, err, errlen,
                          "classes=%u is fewer than the %u classes of %s: the targets need a "
                          "column for every label",
                          (unsigned)e->o.classes, (unsigned)have, source_path);
            goto fail;
        }
        e->classes = (uint32_t)classes;
        if ((rc = bfs_fields_add_tensor(e, "targets", "", BFS_DT_F32, 1, &classes, 0, &e->t_targets,
                                        err, errlen)))
            goto fail;
    }
    uint64_t n = bfs_source_count(e->src);
    bfs_plan_opts po;
    bfs_plan_opts_default(&po);
    po.seed = o->seed;
    po.shuffle = o->shuffle;
    po.shard_index = o->shard_index;
    po.shard_count = o->shard_count;
    po.batch = o->batch;
    po.drop_last = o->drop_last;
    po.pad = o->pad;
    uint64_t *first = NULL, npages = 0;
    if (md) {
        uint64_t count[BFS_MIX_SOURCES];
        for (uint32_t k = 0; k < md->n; k++)
            count[k] = e->mix_first[k + 1] - e->mix_first[k];
        if ((rc = bfs_fields_add_tensor(e, "sources", "", BFS_DT_I64, 0, NULL, 0, &e->t_sources,
                                        err, errlen)))
            goto fail;
        if ((rc = bfs_mix_create(md, count, e->mix_first, &e->o, &e->mix, why, sizeof why))) {
            bfs_errf(rc, err, errlen, "source=: %s", why);
            goto fail;
        }
    } else {
        if (o->shuffle == BFS_SHUFFLE_PAGES &&
            (rc = bfs_source_page_first(e->src, &first, &npages))) {
            snprintf(err, errlen, "out of memory");
            goto fail;
        }
        rc = bfs_plan_create(&po, n, first, npages, &e->plan, why, sizeof why);
        free(first);
        if (rc) {
            snprintf(err, errlen, "%s: %s", source_path, why);
            goto fail;
        }
    }
    if (o->sample_cache_mb > 0 &&
        (rc = bfs_samplecache_create(n, (uint64_t)o->sample_cache_mb << 20, &e->scache))) {
        snprintf(err, errlen,
                 "sample_cache_mb=%lld: out of memory for the cache's index of %llu samples "
                 "(8 bytes each)",
                 (long long)o->sample_cache_mb, (unsigned long long)n);
        goto fail;
    }
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    if (e->scache && pages > 0 && psize > 0 &&
        (uint64_t)o->sample_cache_mb > ((uint64_t)pages * (uint64_t)psize) >> 20)
        /* never evicted: a budget past RAM ends with the OOM killer, not with the budget */
        fprintf(stderr,
                "batchfs: warning: sample_cache_mb=%lld is more than this machine's memory "
                "(%llu MiB): the cache fills until memory runs out\n",
                (long long)o->sample_cache_mb,
                (unsigned long long)(((uint64_t)pages * (uint64_t)psize) >> 20));
    bfs_out_format_init(&e->fmt, o);
    e->has_ops = bfs_augment_has_ops(o);
    e->erasing = o->augment == BFS_AUG_TRAIN && o->erasing > 0;
    e->fingerprint = bfs_pipeline_fingerprint(&e->o, identity);
    bfs_st_batch_desc fd;
    describe(e, e->o.batch, 0, 0, &fd);
    /* every batch but a final partial one is full; the largest epoch's (a schedule may
     * grow it: size_schedule=), found once: the executor asks at every read */
    uint64_t last = e->o.sched_n ? e->o.sched_epoch[e->o.sched_n - 1] : 0; /* then constant */
    for (uint64_t ep = 0; ep < e->o.epochs && ep <= last; ep++) {
        uint64_t b = bfs_engine_batch_bytes(e, ep, 0);
        e->max_bytes = b > e->max_bytes ? b : e->max_bytes;
    }
    /* the layout of a full batch, kept: unless the size changes by epoch (size_schedule=) */
    e->full_ok =
        bfs_st_batch_layout(&fd, &e->full) == 0 && !(e->o.sched_n && e->o.augment == BFS_AUG_TRAIN);
named:
    if (o->want_fingerprint_set && o->want_fingerprint != e->fingerprint) {
        rc = bfs_errf(-EINVAL, err, errlen,
                      "the spec file says fingerprint = %016llx, but this dataset with these "
                      "options has %016llx: another dataset (or a changed one), or other "
                      "data-changing options (remove the fingerprint line to use the spec "
                      "anyway)",
                      (unsigned long long)o->want_fingerprint, (unsigned long long)e->fingerprint);
        goto fail;
    }
    if (bfs_pipeline_canonical(&e->o, e->canonical, sizeof e->canonical) < 0)
        e->canonical[0] = 0;
    free(md);
    *out = e;
    return 0;
fail:
    free(md);
    bfs_engine_destroy(e);
    return rc;
}

void bfs_engine_destroy(bfs_engine *e)
{
    if (!e)
        return;
    bfs_samplecache_destroy(e->scache);
    bfs_tokens_destroy(e->tok);
    bfs_plan_destroy(e->plan);
    bfs_mix_destroy(e->mix);
    free(e->mix_text);
    bfs_source_close(e->src);
    pthread_mutex_destroy(&e->log_lock);
    free(e->logged);
    free(e);
}

const bfs_pipeline_opts *bfs_engine_opts(const bfs_engine *e)
{
    return &e->o;
}

/* An image pipeline's batch count and batch k's length: the plan's or the mixture's. */
static uint64_t img_batches(const bfs_engine *e)
{
    return e->mix ? bfs_mix_batches(e->mix) : bfs_plan_batches(e->plan);
}

static uint32_t img_batch_len(const bfs_engine *e, uint64_t k)
{
    return e->mix ? bfs_mix_batch_len(e->mix, k) : bfs_plan_batch_len(e->plan, k);
}

uint64_t bfs_engine_batches(const bfs_engine *e)
{
    if (e->tok)
        return bfs_tokens_batches(e->tok);
    return img_batches(e);
}

uint32_t bfs_engine_batch_len(const bfs_engine *e, uint64_t epoch, uint64_t k)
{
    if (e->tok)
        return bfs_tokens_batch_len(e->tok, epoch, k);
    return img_batch_len(e, k);
}

uint32_t bfs_engine_mean_batch_len(const bfs_engine *e)
{
    if (!e->tok)
        return img_batch_len(e, 0);
    double m = bfs_tokens_mean_rows(e->tok);
    return m < 1 ? 1 : (uint32_t)(m + 0.5);
}

uint32_t bfs_engine_claim_slots(const bfs_engine *e, uint64_t epoch, uint64_t k)
{
    if (!e->tok)
        return 1;
    uint32_t w = bfs_tokens_batch_width(e->tok, epoch, k);
    return w >= 65536 || !w ? 1 : 65536 / w;
}

uint64_t bfs_engine_samples(const bfs_engine *e)
{
    return bfs_source_count(e->src);
}

uint64_t bfs_engine_fingerprint(const bfs_engine *e)
{
    return e->fingerprint;
}

const char *bfs_engine_canonical(const bfs_engine *e)
{
    return e->canonical;
}

const char *bfs_engine_source_path(const bfs_engine *e)
{
    if (e->mix_text)
        return e->mix_text;
    return bfs_source_path(e->src);
}

uint32_t bfs_engine_mix_count(const bfs_engine *e)
{
    return e->nmix;
}

const char *bfs_engine_mix_source(const bfs_engine *e, uint32_t k, uint64_t *samples,
                                  uint64_t *drawn)
{
    if (k >= e->nmix)
        return NULL;
    *samples = e->mix_first[k + 1] - e->mix_first[k];
    *drawn = atomic_load_explicit(&e->mix_served[k], memory_order_relaxed);
    return bfs_source_path(bfs_source_mix_part(e->src, k));
}

void bfs_engine_print_notes(const bfs_engine *e, FILE *f, const char *prog)
{
    for (const char *p = bfs_source_notes(e->src); *p;) {
        const char *nl = strchr(p, '\n');
        int n = nl ? (int)(nl - p) : (int)strlen(p);
        fprintf(f, "%s: %.*s\n", prog, n, p);
        p += n + (nl != NULL);
    }
}

void bfs_engine_sample_cache_stats(const bfs_engine *e, bfs_samplecache_stats *st)
{
    bfs_samplecache_get_stats(e->scache, st);
}

uint64_t bfs_engine_encode_ns(const bfs_engine *e)
{
    return atomic_load_explicit(&e->encode_ns, memory_order_relaxed);
}

static bfs_dtype st_dtype(int out)
{
    return out == BFS_OUT_U8     ? BFS_DT_U8
           : out == BFS_OUT_F16  ? BFS_DT_F16
           : out == BFS_OUT_BF16 ? BFS_DT_BF16
                                 : BFS_DT_F32;
}

static void describe(const bfs_engine *e, uint32_t len, uint64_t epoch, uint64_t k,
                     bfs_st_batch_desc *d)
{
    memset(d, 0, sizeof *d);
    d->dtype = st_dtype(e->o.dtype);
    d->nchw = e->o.layout == BFS_LAYOUT_NCHW;
    d->batch = len;
    bfs_pipeline_size_at(&e->o, epoch, &d->height, &d->width);
    d->epoch = epoch;
    d->batch_index = k;
    d->fingerprint = e->fingerprint;
    d->fields = e->n_tensors ? e->tensors : NULL;
    d->n_fields = e->n_tensors;
}

/* Slot j's labels and indices (a mixture: the index in its source, and `sources`) for
 * dataset sample idx. */
static void store_ids(const bfs_engine *e, uint8_t *dst, const bfs_st_layout *lay, uint32_t j,
                      uint64_t idx)
{
    bfs_st64(dst + lay->labels_off + 8ull * j, (uint64_t)bfs_source_label(e->src, idx));
    uint64_t local = idx;
    uint32_t k = bfs_source_mix_locate(e->src, idx, &local);
    bfs_st64(dst + lay->indices_off + 8ull * j, local);
    if (e->nmix)
        bfs_st64(dst + lay->field_off[e->t_sources] + 8ull * j, k);
}

uint64_t bfs_engine_batch_bytes(const bfs_engine *e, uint64_t epoch, uint64_t k)
{
    if (e->tok)
        return bfs_tokens_batch_bytes(e->tok, epoch, k);
    uint32_t len = img_batch_len(e, k);
    if (!len)
        return 0;
    bfs_st_batch_desc d;
    describe(e, len, epoch, k, &d);
    return bfs_st_batch_size(&d);
}

uint64_t bfs_engine_max_batch_bytes(const bfs_engine *e)
{
    if (e->tok)
        return bfs_tokens_max_batch_bytes(e->tok);
    return e->max_bytes;
}

int bfs_engine_batch_begin(bfs_engine *e, uint64_t epoch, uint64_t k, uint8_t *dst, uint64_t *idx)
{
    uint64_t t0 = bfs_mono_ns();
    if (epoch >= e->o.epochs)
        return -ERANGE;
    if (e->tok) {
        int rc = bfs_tokens_batch_begin(e->tok, epoch, k, dst, idx);
        bfs_engine_add(&e->encode_ns, bfs_mono_ns() - t0);
        return rc;
    }
    uint32_t len = img_batch_len(e, k);
    if (!len)
        return -ERANGE;
    bfs_st_batch_desc d;
    describe(e, len, epoch, k, &d);
    bfs_st_layout lay;
    int rc = bfs_st_batch_layout(&d, &lay);
    if (!rc)
        rc = bfs_st_write_header(&d, dst, lay.header_size);
    if (rc)
        return rc;
    rc = bfs_engine_batch_indices(e, epoch, k, idx);
    if (rc < 0)
        return rc;
    for (uint32_t j = 0; j < len; j++) {
        store_ids(e, dst, &lay, j, idx[j]);
        if (e->nmix)
            bfs_engine_add(&e->mix_served[bfs_source_mix_locate(e->src, idx[j], NULL)], 1);
    }
    if (e->o.pad)
        for (uint32_t j = 0; j < len; j++)
            dst[lay.field_off[e->t_padded] + j] =
                (uint8_t)(e->mix ? bfs_mix_padded(e->mix, k)
                                 : bfs_plan_padded(e->plan, k * e->o.batch + j));
    bfs_engine_add(&e->encode_ns, bfs_mono_ns() - t0);
    return (int)len;
}

int bfs_engine_image_layout(const bfs_engine *e, uint64_t epoch, uint64_t k, bfs_st_batch_desc *d,
                            bfs_st_layout *lay)
{
    describe(e, img_batch_len(e, k), epoch, k, d);
    return bfs_st_batch_layout(d, lay);
}

int bfs_engine_batch_indices(bfs_engine *e, uint64_t epoch, uint64_t k, uint64_t *out)
{
    if (epoch >= e->o.epochs)
        return -ERANGE;
    if (e->tok) /* the rows' windows (concat) or documents (pad, bucket) */
        return bfs_tokens_batch_indices(e->tok, epoch, k, out);
    if (e->mix)
        return bfs_mix_batch_indices(e->mix, epoch, k, out, NULL);
    return bfs_plan_batch_indices(e->plan, epoch, k, out);
}

int bfs_engine_worker_create(bfs_engine *e, bfs_engine_worker **out)
{
    bfs_engine_worker *w = calloc(1, sizeof *w);
    if (!w)
        return -ENOMEM;
    w->e = e;
    if ((e->keep_rows && !(w->keep_mem = calloc(e->keep_rows, sizeof *w->keep_mem))) ||
        bfs_decoder_create(&w->dec)) {
        free(w->keep_mem);
        free(w);
        return -ENOMEM;
    }
    *out = w;
    return 0;
}

void bfs_engine_worker_destroy(bfs_engine_worker *w)
{
    if (!w)
        return;
    bfs_decoder_destroy(w->dec);
    free(w->keep_mem);
    bfs_source_scratch_free(&w->scratch);
    bfs_tokens_scratch_free(&w->ts);
    resize_scratch_free(&w->rs);
    free(w->aug);
    free(w->rows);
    free(w);
}

void bfs_engine_worker_stats(const bfs_engine_worker *w, bfs_stage_stats *st)
{
    memset(st, 0, sizeof *st);
    st->samples = atomic_load_explicit(&w->samples, memory_order_relaxed);
    st->read_ns = atomic_load_explicit(&w->read_ns, memory_order_relaxed);
    st->decode_ns = atomic_load_explicit(&w->decode_ns, memory_order_relaxed);
    st->resize_ns = atomic_load_explicit(&w->resize_ns, memory_order_relaxed);
    st->augment_ns = atomic_load_explicit(&w->augment_ns, memory_order_relaxed);
    for (int i = 0; i < BFS_STAGE_OPS; i++) {
        st->op_ns[i] = atomic_load_explicit(&w->op_ns[i], memory_order_relaxed);
        st->op_n[i] = atomic_load_explicit(&w->op_n[i], memory_order_relaxed);
    }
    st->bad_samples = atomic_load_explicit(&w->bad, memory_order_relaxed);
    st->texts_cut = atomic_load_explicit(&w->texts_cut, memory_order_relaxed);
    bfs_decode_stats ds;
    bfs_decoder_get_stats(w->dec, &ds);
    st->decode_cropped = ds.cropped;
    st->decode_full = ds.full;
    st->decode_scaled = ds.scaled;
    st->decode_raw = ds.raw;
    st->decode_windowed = ds.windowed;
}

/*
 * The whole image of sample idx at IDCT scale s from the decoded-sample cache, decoded
 * and inserted on a miss while the budget allows. Returns 0 with *px describing it (the
 * cache's memory, valid for the engine's lifetime), or 1: not cached and not cachable
 * now (no room, or the whole image does not decode though the region might: a file
 * truncated below the crop) — the caller then decodes the region as without a cache, so
 * the outcome, bad sample or not, is the uncached one.
 */
static int cached_image(bfs_engine *e, bfs_engine_worker *w, const bfs_item *it,
                        const bfs_image_info *info, uint64_t idx, int s, bfs_pixels *px)
{
    bfs_samplecache_image im;
    if (bfs_samplecache_lookup(e->scache, idx, s, &im) != 0) {
        int sw = (info->width + s - 1) / s, sh = (info->height + s - 1) / s;
        bfs_samplecache_entry *en;
        uint8_t *dst;
        if (bfs_samplecache_reserve(e->scache, idx, s, sw, sh, &en, &dst))
            return 1;
        if (bfs_decoder_decode_image(w->dec, it->data, it->len, info, s, dst,
                                     (size_t)sw * (size_t)sh * 3)) {
            bfs_samplecache_abandon(e->scache, en);
            return 1;
        }
        bfs_samplecache_publish(e->scache, en, &im);
    }
    *px = (bfs_pixels){.rgb = im.rgb,
                       .stride = im.stride,
                       .w = im.w,
                       .h = im.h,
                       .img_w = im.w,
                       .img_h = im.h,
                       .scale = im.scale};
    return 0;
}

/* Decode and resample dataset sample idx into the slot. Data errors are returned. */
static int render(bfs_engine *e, bfs_engine_worker *w, uint64_t epoch, uint64_t idx, uint64_t key,
                  uint32_t field, uint8_t *slot_dst, int flip_override, bfs_geometry *gout)
{
    uint64_t t0 = bfs_mono_ns();
    bfs_item it;
    int rc = bfs_source_get_value(e->src, idx, field, &it, &w->scratch);
    uint64_t t1 = bfs_mono_ns();
    bfs_engine_add(&w->read_ns, t1 - t0);
    if (rc)
        return rc;
    bfs_image_info info = {it.width, it.height, it.flags, it.raw_size};
    if (info.width == 0 && (rc = bfs_decoder_probe(it.data, it.len, &info)))
        return rc; /* folder sources carry no table: read the header */
    /* A folder's file is decoded whole the first time (checked): damage outside this
     * crop then makes the sample bad in every epoch, not only where a crop covers it. */
    int verdict = bfs_source_verdict(e->src, idx);
    if (verdict == BFS_VERDICT_BAD)
        return (info.flags & BFS_KIND_MASK) != BFS_KIND_CODEC ? BFS_E_JPEG_DATA
               : info.flags & BFS_F_WEBP                      ? BFS_E_WEBP_DATA
                                                              : BFS_E_PNG_DATA;
    int check = verdict == BFS_VERDICT_UNKNOWN;
    bfs_geometry g;
    if ((rc = bfs_augment_geometry(&e->o, epoch, key, info.width, info.height, &g)))
        return BFS_E_SAMPLE_RANGE;
    if (flip_override >= 0)
        g.flip = flip_override;
    if (gout)
        *gout = g;
    resize_spec *sp = &g.spec;
    int s = bfs_decoder_max_scale(&info, sp->box[2] - sp->box[0], sp->box[3] - sp->box[1],
                                  sp->out_w, sp->out_h);
    int ox = g.origin_x, oy = g.origin_y; /* spec's origin in decoded-image pixels */
    if (s > 1) {
        /* The same geometry on the image scaled by 1/s. A crop's origin is no longer on
         * the pixel grid there, so the spec becomes a box in the whole scaled image (taps
         * may reach past the crop edge: within the tolerance scaled decoding already has). */
        for (int i = 0; i < 4; i++)
            sp->box[i] = (sp->box[i] + (i % 2 ? oy : ox)) / s;
        sp->in_w = (info.width + s - 1) / s;
        sp->in_h = (info.height + s - 1) / s;
        sp->box[2] = fmin(sp->box[2], sp->in_w);
        sp->box[3] = fmin(sp->box[3], sp->in_h);
        ox = oy = 0;
    }
    int x0, y0, x1, y1;
    /* the coefficients found on the way stay in w->rs for resize_rgb8 below (same sp) */
    if (resize_plan_extent(sp, &w->rs, &x0, &y0, &x1, &y1))
        return BFS_E_SAMPLE_RANGE;
    bfs_pixels px;
    /* cached or not, the pixels inside the region are the same (samplecache.h); a cached
     * image was decoded whole */
    rc = e->scache && field == 0 ? cached_image(e, w, &it, &info, idx, s, &px) : 1;
    if (rc == 1)
        rc = (check ? bfs_decoder_decode_checked : bfs_decoder_decode)(
            w->dec, it.data, it.len, &info, s, x0 + ox, y0 + oy, x1 + ox, y1 + oy, &px);
    if (check && (rc == 0 || rc == BFS_E_JPEG_DATA || rc == BFS_E_PNG_DATA ||
                  rc == BFS_E_WEBP_DATA)) /* a verdict on the file, not memory */
        bfs_source_set_verdict(e->src, idx, rc ? BFS_VERDICT_BAD : BFS_VERDICT_GOOD);
    uint64_t t2 = bfs_mono_ns();
    bfs_engine_add(&w->decode_ns, t2 - t1);
    if (rc)
        return rc;
    /* hand over only the part inside the spec's image (decoding may start left of a crop
     * or above it: iMCU alignment and margins) */
    const uint8_t *pix = px.rgb;
    int bx = px.x0 - ox, by = px.y0 - oy, bw = px.w, bh = px.h;
    if (bx < 0) {
        pix += (size_t)(-bx) * 3, bw += bx, bx = 0;
    }
    if (by < 0) {
        pix += (size_t)(-by) * px.stride, bh += by, by = 0;
    }
    bw = bx + bw > sp->in_w ? sp->in_w - bx : bw;
    bh = by + bh > sp->in_h ? sp->in_h - by : bh;
    resize_src src = {pix, px.stride, bx, by, bw, bh};
    bfs_out_slot slot = {&e->fmt, slot_dst, g.flip, g.spec.win_w, g.spec.win_h};
    if (field == e->primary && e->has_ops) {
        rc = bfs_engine_render_augmented(e, w, epoch, key, sp, &src, &slot, t2);
    } else {
        rc = resize_rgb8(sp, &src, bfs_out_store_row, &slot, &w->rs);
        bfs_engine_add(&w->resize_ns, bfs_mono_ns() - t2);
        rc = rc == -EINVAL ? BFS_E_SAMPLE_RANGE : rc;
    }
    if (!rc && field == e->primary && e->erasing) { /* after normalize, as timm */
        uint64_t t3 = bfs_mono_ns();
        if (bfs_out_erase(&slot, &e->o, epoch, key)) {
            uint64_t dt = bfs_mono_ns() - t3;
            bfs_engine_add(&w->op_ns[BFS_STAGE_ERASING], dt);
            bfs_engine_add(&w->op_n[BFS_STAGE_ERASING], 1);
            bfs_engine_add(&w->augment_ns, dt);
        }
    }
    return rc;
}

/* Fill slot j of every tensor of the batch from dataset sample idx: the primary image
 * (`images`), then each field served; key seeds its augmentation (the sample index, or
 * in a mixture the epoch position, so that a sample drawn twice is cropped twice).
 * Returns 0 or the first error; the caller substitutes the whole sample for a data
 * error, so a slot never mixes two samples. */
static int fill_sample(bfs_engine *e, bfs_engine_worker *w, uint64_t epoch, uint64_t idx,
                       uint64_t key, uint8_t *dst, const bfs_st_layout *lay, uint32_t j)
{
    bfs_geometry g;
    sample_state st = {.g = &g, .min_area = e->o.min_box_area, .keep_mem = w->keep_mem};
    int rc = render(e, w, epoch, idx, key, e->primary,
                    dst + lay->images_off + lay->sample_bytes * j, -1, &g);
    for (uint32_t i = 0; i < e->n_served && !rc; i++) {
        const served_field *sf = &e->served[i];
        if (sf->decl->kind == BFS_FIELD_IMAGE)
            rc = render(e, w, epoch, idx, key, sf->f,
                        dst + lay->field_off[sf->t_data] + lay->sample_bytes * j, -1, NULL);
        else
            rc = bfs_fields_store(e, w, sf, idx, &st, dst, lay, j);
    }
    return rc;
}

/* The substitute of last resort: gray images, every other field empty (zeros, length 0). */
static void fill_gray(bfs_engine *e, uint64_t epoch, uint8_t *dst, const bfs_st_layout *lay,
                      uint32_t j)
{
    uint32_t h, w;
    bfs_pipeline_size_at(&e->o, epoch, &h, &w);
    bfs_out_slot s = {&e->fmt, dst + lay->images_off + lay->sample_bytes * j, 0, (int)w, (int)h};
    bfs_out_fill(&s, GRAY_R, GRAY_G, GRAY_B);
    for (uint32_t i = 0; i < e->n_served; i++) {
        const served_field *sf = &e->served[i];
        if (sf->decl->kind == BFS_FIELD_IMAGE) {
            bfs_out_slot t = {&e->fmt, dst + lay->field_off[sf->t_data] + lay->sample_bytes * j, 0,
                              (int)w, (int)h};
            bfs_out_fill(&t, GRAY_R, GRAY_G, GRAY_B);
            continue;
        }
        bfs_fields_clear(sf, dst, lay, j);
    }
}

/* Log a bad sample once per daemon lifetime. */
static void log_bad(bfs_engine *e, uint64_t idx, int rc, const char *what)
{
    pthread_mutex_lock(&e->log_lock);
    int fresh = 1;
    if (e->logged_n * 2 >= e->logged_cap) {
        size_t cap = e->logged_cap ? e->logged_cap * 2 : 64;
        uint64_t *t = calloc(cap, sizeof *t);
        if (t) {
            for (size_t i = 0; i < e->logged_cap; i++)
                if (e->logged[i]) {
                    size_t h = (size_t)(e->logged[i] * 0x9e3779b97f4a7c15ull) & (cap - 1);
                    while (t[h])
                        h = (h + 1) & (cap - 1);
                    t[h] = e->logged[i];
                }
            free(e->logged);
            e->logged = t, e->logged_cap = cap;
        }
    }
    if (e->logged_cap && e->logged_n * 2 < e->logged_cap) {
        size_t h = (size_t)((idx + 1) * 0x9e3779b97f4a7c15ull) & (e->logged_cap - 1);
        while (e->logged[h] && e->logged[h] != idx + 1)
            h = (h + 1) & (e->logged_cap - 1);
        fresh = !e->logged[h];
        if (fresh) {
            e->logged[h] = idx + 1;
            e->logged_n++;
        }
    }
    pthread_mutex_unlock(&e->log_lock);
    if (fresh) {
        char name[4200];
        bfs_source_describe(e->src, idx, name, sizeof name);
        fprintf(stderr, "batchfs: bad sample %llu (%s): %s; %s\n", (unsigned long long)idx, name,
                bfs_strerror(rc), what);
        pthread_mutex_lock(&e->log_lock);
        bfs_bad_sample *b = &e->recent[e->recent_n++ % BFS_ENGINE_RECENT_BAD];
        b->index = idx;
        size_t nl = strlen(name) < sizeof b->name - 1 ? strlen(name) : sizeof b->name - 1;
        memcpy(b->name, name, nl); /* (cut: the log line has it whole) */
        b->name[nl] = '\0';
        snprintf(b->reason, sizeof b->reason, "%s", bfs_strerror(rc));
        pthread_mutex_unlock(&e->log_lock);
    }
}

/* The dataset file was overwritten or truncated in place: no sample of it can be trusted
 * now, so batches fail (EIO at the mount) rather than fill with substitutes. Logged once. */
static int dataset_changed(bfs_engine *e, uint64_t epoch, uint64_t k, char *err, size_t errlen)
{
    if (!atomic_exchange(&e->changed_logged, 1))
        fprintf(stderr,
                "batchfs: %s: %s; every batch computed from now on fails (remount to serve the "
                "new file; replace a mounted dataset with a rename, never in place)\n",
                bfs_source_path(e->src), bfs_strerror(BFS_E_CHANGED));
    return bfs_errf(BFS_E_CHANGED, err, errlen, "epoch %llu batch %llu: %s: %s",
                    (unsigned long long)epoch, (unsigned long long)k, bfs_source_path(e->src),
                    bfs_strerror(BFS_E_CHANGED));
}

/* A row of a token batch (tokens.h), with the bad-sample policy of images. */
static int token_row(bfs_engine *e, bfs_engine_worker *w, uint64_t epoch, uint64_t k, uint32_t j,
                     uint64_t idx, uint8_t *dst, char *err, size_t errlen)
{
    uint64_t t0 = bfs_mono_ns();
    bfs_tokens_bad bad;
    int rc = bfs_tokens_row(e->tok, &w->ts, epoch, k, j, idx, dst,
                            e->o.bad_sample == BFS_BAD_SUBSTITUTE, &bad);
    bfs_engine_add(&w->read_ns, bfs_mono_ns() - t0);
    bfs_engine_add(&w->samples, 1);
    if (!rc && !bad.rc)
        return 0;
    if (rc == BFS_E_CHANGED)
        return dataset_changed(e, epoch, k, err, errlen);
    char name[4200] = "";
    if (bad.rc)
        bfs_source_describe(e->src, bad.doc, name, sizeof name);
    if (rc && (bfs_err_is_transient(rc) || !bad.rc)) {
        snprintf(err, errlen, "epoch %llu batch %llu row %u%s%s: %s%s%s", (unsigned long long)epoch,
                 (unsigned long long)k, j, bad.rc ? ", document " : "", name, bfs_strerror(rc),
                 rc == BFS_E_FETCH ? ": " : "", rc == BFS_E_FETCH ? bfs_fetch_reason() : "");
        if (rc == BFS_E_FETCH)
            fprintf(stderr, "batchfs: %s\n", err);
        return rc;
    }
    bfs_engine_add(&w->bad, 1);
    if (rc) { /* bad_sample=fail */
        snprintf(err, errlen, "bad document %llu (%s) in epoch %llu batch %llu: %s",
                 (unsigned long long)bad.doc, name, (unsigned long long)epoch,
                 (unsigned long long)k, bfs_strerror(rc));
        char what[128];
        snprintf(what, sizeof what, "failing epoch %llu batch %llu (bad_sample=fail)",
                 (unsigned long long)epoch, (unsigned long long)k);
        log_bad(e, bad.doc, rc, what);
        return rc;
    }
    char what[128];
    if (bad.alt != UINT64_MAX)
        snprintf(what, sizeof what, "substituted by document %llu (bad_sample=substitute)",
                 (unsigned long long)bad.alt);
    else
        snprintf(what, sizeof what, "its tokens replaced by padding (no substitute read)");
    log_bad(e, bad.doc, bad.rc, what);
    return BFS_ENGINE_SUBSTITUTED;
}

int bfs_engine_claim_end(bfs_engine *e, uint64_t epoch, uint64_t k, char *err, size_t errlen)
{
    if (!e->tok)
        return 0;
    int rc = bfs_source_unchanged(e->src);
    if (rc == BFS_E_CHANGED)
        return dataset_changed(e, epoch, k, err, errlen);
    if (rc)
        return bfs_errf(rc, err, errlen, "epoch %llu batch %llu: %s: %s", (unsigned long long)epoch,
                        (unsigned long long)k, bfs_source_path(e->src), bfs_strerror(rc));
    return 0;
}

int bfs_engine_sample(bfs_engine *e, bfs_engine_worker *w, uint64_t epoch, uint64_t k, uint32_t j,
                      uint64_t idx, uint8_t *dst, char *err, size_t errlen)
{
    if (e->tok)
        return token_row(e, w, epoch, k, j, idx, dst, err, errlen);
    uint32_t len = img_batch_len(e, k);
    if (j >= len)
        return -ERANGE;
    bfs_st_batch_desc d;
    bfs_st_layout lay;
    int rc = 0;
    if (len == e->o.batch && e->full_ok)
        lay = e->full;
    else {
        describe(e, len, epoch, k, &d);
        if ((rc = bfs_st_batch_layout(&d, &lay)))
            return rc;
    }
    bfs_engine_add(&w->samples, 1);
    /* a mixture's augmentation is keyed by the epoch position: a source repeated within
     * an epoch gets other crops each time it comes round */
    uint64_t key = e->mix ? (k * e->o.shard_count + e->o.shard_index) * e->o.batch + j : idx;
    rc = fill_sample(e, w, epoch, idx, key, dst, &lay, j);
    if (rc == 0)
        return 0;
    if (bfs_err_is_transient(rc)) { /* the process ran out, or the object store failed:
                                     * the sample is fine, no substitute */
        char name[4200];
        bfs_source_describe(e->src, idx, name, sizeof name);
        snprintf(err, errlen, "sample %llu (%s) in epoch %llu batch %llu: %s%s%s",
                 (unsigned long long)idx, name, (unsigned long long)epoch, (unsigned long long)k,
                 bfs_strerror(rc), rc == BFS_E_FETCH ? ": " : "",
                 rc == BFS_E_FETCH ? bfs_fetch_reason() : "");
        if (rc == BFS_E_FETCH) /* fs/ logs errno failures only; this one is said here */
            fprintf(stderr, "batchfs: %s\n", err);
        return rc;
    }
    if (rc == BFS_E_CHANGED)
        return dataset_changed(e, epoch, k, err, errlen);
    bfs_engine_add(&w->bad, 1);
    if (e->o.bad_sample == BFS_BAD_FAIL) {
        char name[4200];
        bfs_source_describe(e->src, idx, name, sizeof name);
        snprintf(err, errlen, "bad sample %llu (%s) in epoch %llu batch %llu: %s",
                 (unsigned long long)idx, name, (unsigned long long)epoch, (unsigned long long)k,
                 bfs_strerror(rc));
        char what[128];
        snprintf(what, sizeof what, "failing epoch %llu batch %llu (bad_sample=fail)",
                 (unsigned long long)epoch, (unsigned long long)k);
        log_bad(e, idx, rc, what);
        return rc;
    }
    /* substitute: another sample, drawn from this sample's own random stream, so the
     * choice is the same whoever computes it; its own crop and flip */
    uint64_t cand[BFS_SUBSTITUTE_TRIES];
    /* a mixture's substitutes come from the sample's own source (its share stays) */
    uint32_t part = bfs_source_mix_locate(e->src, idx, NULL);
    uint64_t base = e->nmix ? e->mix_first[part] : 0;
    uint64_t span = e->nmix ? e->mix_first[part + 1] - base : bfs_source_count(e->src);
    int nc = bfs_substitutes(e->o.seed, epoch, idx - base, span, cand);
    for (int t = 0; t < nc; t++) {
        uint64_t alt = base + cand[t];
        int arc = fill_sample(e, w, epoch, alt, key, dst, &lay, j);
        if (arc == BFS_E_CHANGED)
            return dataset_changed(e, epoch, k, err, errlen);
        if (bfs_err_is_transient(arc)) { /* as above: not a reason to try another */
            snprintf(err, errlen, "substitute sample %llu in epoch %llu batch %llu: %s%s%s",
                     (unsigned long long)alt, (unsigned long long)epoch, (unsigned long long)k,
                     bfs_strerror(arc), arc == BFS_E_FETCH ? ": " : "",
                     arc == BFS_E_FETCH ? bfs_fetch_reason() : "");
            if (arc == BFS_E_FETCH)
                fprintf(stderr, "batchfs: %s\n", err);
            return arc;
        }
        if (arc == 0) {
            store_ids(e, dst, &lay, j, alt);
            char what[96];
            snprintf(what, sizeof what, "substituted by sample %llu (bad_sample=substitute)",
                     (unsigned long long)alt);
            log_bad(e, idx, rc, what);
            return BFS_ENGINE_SUBSTITUTED;
        }
    }
    fill_gray(e, epoch, dst, &lay, j);
    log_bad(e, idx, rc, "substituted by a gray image (no substitute decoded)");
    return BFS_ENGINE_SUBSTITUTED;
}

int bfs_engine_advise_early(const bfs_engine *e)
{
    return bfs_source_remote(e->src);
}

double bfs_engine_fetch_latency(const bfs_engine *e)
{
    if (!bfs_source_remote(e->src))
        return 0;
    bfs_fetch_stats st;
    bfs_fetch_get_stats(&st);
    return st.requests ? st.wait_ns / 1e9 / (double)st.requests : 0;
}

void bfs_engine_advise(bfs_engine *e, uint64_t epoch, const uint64_t *idx, uint32_t n)
{
    if (!e->tok) {
        bfs_source_advise(e->src, idx, n);
        return;
    }
    /* token rows: a local file is mapped (no read-ahead needed); a remote one's documents
     * are fetched ahead, those the rows read */
    if (!bfs_source_remote(e->src))
        return;
    uint32_t cap = 65536;
    uint64_t *docs = malloc(cap * sizeof *docs);
    int m = docs ? bfs_tokens_docs(e->tok, epoch, idx, n, docs, cap) : -ENOMEM;
    if (m > 0)
        bfs_source_advise(e->src, docs, (uint32_t)m);
    free(docs);
}

int bfs_engine_recent_bad(bfs_engine *e, bfs_bad_sample *out, int n)
{
    pthread_mutex_lock(&e->log_lock);
    int got = 0;
    for (uint64_t i = e->recent_n; i > 0 && got < n && e->recent_n - i < BFS_ENGINE_RECENT_BAD; i--)
        out[got++] = e->recent[(i - 1) % BFS_ENGINE_RECENT_BAD];
    pthread_mutex_unlock(&e->log_lock);
    return got;
}

/* A resampler's rows into a packed image (bfs_engine_pack_resize). */
typedef struct pack_rows {
    uint8_t *dst;
    size_t stride;
} pack_rows;

static void pack_store_row(void *ctx, int row, const uint8_t *rgb, int width)
{
    pack_rows *s = ctx;
    memcpy(s->dst + (size_t)row * s->stride, rgb, (size_t)width * 3);
}

int bfs_engine_pack_resize(void **scratch, const uint8_t *rgb, int w, int h, uint8_t *out, int nw,
                           int nh)
{
    resize_scratch *rs = *scratch;
    if (!rgb) {
        if (rs)
            resize_scratch_free(rs);
        free(rs);
        *scratch = NULL;
        return 0;
    }
    if (!rs) {
        if (!(rs = calloc(1, sizeof *rs)))
            return -ENOMEM;
        *scratch = rs;
    }
    resize_spec spec = {.in_w = w,
                        .in_h = h,
                        .box = {0, 0, w, h},
                        .out_w = nw,
                        .out_h = nh,
                        .win_w = nw,
                        .win_h = nh};
    resize_src src = {.pixels = rgb, .stride = (size_t)w * 3, .w = w, .h = h};
    pack_rows sink = {out, (size_t)nw * 3};
    return resize_rgb8(&spec, &src, pack_store_row, &sink, rs);
}
