/* tokens.c — the pipelines of token datasets: pack=concat|pad|bucket (see tokens.h). */
#include "engine/tokens_internal.h"
#include "engine/mix.h"
#include "base/endian.h"
#include "base/err.h"
#include "engine/dataset/guard.h"
#include "engine/plan.h"
#include "engine/rng.h"
#include "engine/safetensors.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

static const char *const pack_names[] = {"concat", "pad", "bucket"};

/* ---- shapes and sizes ----------------------------------------------------------------- */

static void describe(const bfs_tokens *t, uint32_t rows, uint32_t width, uint64_t epoch, uint64_t k,
                     bfs_st_tok_desc *d)
{
    memset(d, 0, sizeof *d);
    d->pack = pack_names[t->o.pack];
    d->epoch = epoch;
    d->batch_index = k;
    d->fingerprint = t->fingerprint;
    bfs_st_tok_tensor mat = {"tokens", BFS_DT_I32, 2, {rows, width}};
    if (t->o.pack == BFS_PACK_CONCAT) {
        d->t[d->n++] = mat;
        if (t->o.positions)
            d->t[d->n++] = (bfs_st_tok_tensor){"positions", BFS_DT_I32, 2, {rows, width}};
        d->aligned = 0;
        return;
    }
    d->t[d->n++] = (bfs_st_tok_tensor){"lengths", BFS_DT_I64, 1, {rows, 0}};
    d->t[d->n++] = (bfs_st_tok_tensor){"indices", BFS_DT_I64, 1, {rows, 0}};
    d->aligned = d->n;
    d->t[d->n++] = mat;
    d->t[d->n++] = (bfs_st_tok_tensor){"mask", BFS_DT_U8, 2, {rows, width}};
}

/* pack=bucket: which chunk batch k of epoch is. The order is keyed by (seed, epoch) only,
 * never by the shard, so that every replica reads the same bucket at the same step. */
static uint64_t chunk_of(const bfs_tokens *t, uint64_t epoch, uint64_t k)
{
    uint64_t g = t->cstart[t->o.nbuckets];
    if (t->o.shuffle == BFS_SHUFFLE_NONE)
        return k;
    bfs_rng r;
    bfs_rng_init(&r, t->o.seed, epoch, 0, BFS_RNG_STREAM_BUCKETS);
    bfs_perm p;
    bfs_perm_init(&p, g, bfs_rng_u64(&r));
    return bfs_perm_apply(&p, k);
}

/* shuffle=rows: the epoch's permutation of the W windows, keyed by (seed, epoch) only, so
 * that the shards' rows stay disjoint (window g -> shard g mod N, as without it). */
static void rows_perm(const bfs_tokens *t, uint64_t epoch, bfs_perm *p)
{
    bfs_rng r;
    bfs_rng_init(&r, t->o.seed, epoch, 0, BFS_RNG_STREAM_ROWS);
    bfs_perm_init(p, t->windows, bfs_rng_u64(&r));
}

int bfs_tokens_window(const bfs_tokens *t, uint64_t epoch, uint64_t g, uint64_t *window)
{
    if (t->o.pack != BFS_PACK_CONCAT || g >= t->windows)
        return -ERANGE;
    bfs_perm p;
    if (t->o.shuffle == BFS_SHUFFLE_ROWS)
        rows_perm(t, epoch, &p);
    *window = t->o.shuffle == BFS_SHUFFLE_ROWS ? bfs_perm_apply(&p, g) : g;
    return 0;
}

static uint32_t bucket_of_chunk(const bfs_tokens *t, uint64_t c)
{
    uint32_t b = 0;
    while (b + 1 < t->o.nbuckets && c >= t->cstart[b + 1])
        b++;
    return b;
}

/* rows and width of batch k of epoch; rows 0 past the end. *chunk, *bucket for bucket. */
static uint32_t shape(const bfs_tokens *t, uint64_t epoch, uint64_t k, uint32_t *width,
                      uint64_t *chunk, uint32_t *bucket)
{
    switch (t->o.pack) {
    case BFS_PACK_CONCAT:
        *width = t->o.seq_len;
        if (k >= t->batches)
            return 0;
        return (uint32_t)(t->per - k * t->o.batch < t->o.batch ? t->per - k * t->o.batch
                                                               : t->o.batch);
    case BFS_PACK_PAD:
        *width = t->o.seq_len;
        return bfs_plan_batch_len(t->plan, k);
    default: {
        *width = 0;
        if (k >= t->cstart[t->o.nbuckets])
            return 0;
        uint64_t c = chunk_of(t, epoch, k);
        uint32_t b = bucket_of_chunk(t, c);
        if (chunk)
            *chunk = c;
        if (bucket)
            *bucket = b;
        *width = t->o.buckets[b];
        return (uint32_t)(c - t->cstart[b] < t->full[b] ? t->rows[b] : t->part[b]);
    }
    }
}

uint64_t bfs_tokens_batches(const bfs_tokens *t)
{
    if (t->o.pack == BFS_PACK_CONCAT)
        return t->batches;
    if (t->o.pack == BFS_PACK_PAD)
        return bfs_plan_batches(t->plan);
    return t->cstart[t->o.nbuckets];
}

uint32_t bfs_tokens_batch_len(const bfs_tokens *t, uint64_t epoch, uint64_t k)
{
    uint32_t w;
    return shape(t, epoch, k, &w, NULL, NULL);
}

/* The layout of a batch of rows x width (bfs_st_tok_layout: its epoch and index do not
 * change it): one made by bfs_tokens_create when it is one of theirs, else made now. */
static int layout_of(const bfs_tokens *t, uint32_t rows, uint32_t width, bfs_st_tok_place *l)
{
    for (uint32_t i = 0; i < t->nlays; i++)
        if (t->lays[i].rows == rows && t->lays[i].width == width) {
            *l = t->lays[i].place;
            return 0;
        }
    bfs_st_tok_desc d;
    describe(t, rows, width, 0, 0, &d);
    return bfs_st_tok_layout(&d, l);
}

/* Made once, before any other thread sees t: the full batches' layouts (layout_of). */
static void layouts_make(bfs_tokens *t)
{
    uint32_t nb = t->o.pack == BFS_PACK_BUCKET ? t->o.nbuckets : 1;
    for (uint32_t b = 0; b < nb && t->nlays < BFS_MAX_BUCKETS; b++) {
        uint32_t rows = t->o.pack == BFS_PACK_BUCKET ? t->rows[b] : t->o.batch;
        uint32_t width = t->o.pack == BFS_PACK_BUCKET ? t->o.buckets[b] : t->o.seq_len;
        bfs_st_tok_place l;
        if (!rows || layout_of(t, rows, width, &l))
            continue;
        t->lays[t->nlays].rows = rows, t->lays[t->nlays].width = width;
        t->lays[t->nlays++].place = l;
    }
}

static uint64_t bytes_of(const bfs_tokens *t, uint32_t rows, uint32_t width)
{
    bfs_st_tok_place l;
    return rows && !layout_of(t, rows, width, &l) ? l.file_size : 0;
}

double bfs_tokens_mean_rows(const bfs_tokens *t)
{
    if (t->o.pack != BFS_PACK_BUCKET)
        return bfs_tokens_batch_len(t, 0, 0); /* every batch but maybe the last */
    double rows = 0;
    for (uint32_t b = 0; b < t->o.nbuckets; b++)
        rows += (double)t->full[b] * t->rows[b] + (double)t->part[b];
    return rows / (double)t->cstart[t->o.nbuckets];
}

uint32_t bfs_tokens_batch_width(const bfs_tokens *t, uint64_t epoch, uint64_t k)
{
    uint32_t w;
    return shape(t, epoch, k, &w, NULL, NULL) ? w : 0;
}

uint64_t bfs_tokens_batch_bytes(const bfs_tokens *t, uint64_t epoch, uint64_t k)
{
    uint32_t w, rows = shape(t, epoch, k, &w, NULL, NULL);
    return bytes_of(t, rows, w);
}

uint64_t bfs_tokens_max_batch_bytes(const bfs_tokens *t)
{
    if (t->o.pack != BFS_PACK_BUCKET)
        return bfs_tokens_batch_bytes(t, 0, 0); /* batch 0 is a full one */
    uint64_t m = 0;
    for (uint32_t b = 0; b < t->o.nbuckets; b++) {
        uint64_t rows = t->full[b] ? t->rows[b] : t->part[b];
        uint64_t x = bytes_of(t, (uint32_t)rows, t->o.buckets[b]);
        m = x > m ? x : m;
    }
    return m;
}

int bfs_tokens_chunk(const bfs_tokens *t, uint64_t epoch, uint64_t k, uint64_t *chunk)
{
    if (t->o.pack != BFS_PACK_BUCKET || k >= t->cstart[t->o.nbuckets])
        return -ERANGE;
    *chunk = chunk_of(t, epoch, k);
    return 0;
}

/* ---- create --------------------------------------------------------------------------- */

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* The fewest tokens e documents of a mixture can hold: source k gives at least
 * floor(w_k e) - 2 of them, whole passes first, then its shortest ones. */
static uint64_t least_tokens(uint32_t n, const double *w, const uint64_t *count,
                             uint64_t *const *kpre, uint64_t e)
{
    uint64_t sum = 0;
    for (uint32_t k = 0; k < n; k++) {
        double c = floor(w[k] * (double)e) - 2;
        uint64_t ck = c > 0 ? (uint64_t)c : 0;
        sum += ck / count[k] * kpre[k][count[k]] + kpre[k][ck % count[k]];
    }
    return sum;
}

/* pack=concat over a mixture (source=, docs/mixing.md): the epoch's documents are drawn
 * from the sources in strata of about one batch of documents (batch * seq_len tokens at
 * the mean document length). An epoch has the rows of the tokens its E documents hold on
 * average (E: epoch_samples, or the sources' sum); which documents are drawn changes the
 * tokens from epoch to epoch, so the order runs on to E' >= E documents, the fewest whose
 * least possible tokens (whole passes over a source hold all its tokens, a partial pass
 * at least its shortest documents; each count at most 2 under its share) still fill
 * those rows: every epoch has every row, and reads past E only when it drew short
 * documents. Fixed weights only: with a schedule the rows would change with the epoch. */
static int mix_create(bfs_tokens *t, const bfs_pipeline_opts *o, char *err, size_t errlen)
{
    if (o->pack != BFS_PACK_CONCAT || o->mix_schedule[0])
        return bfs_errf(-EINVAL, err, errlen,
                        "source=: a mixture of token datasets is served with pack=concat and "
                        "fixed weights (no mix_schedule=) for now");
    bfs_mix_desc *d = malloc(sizeof *d);
    uint32_t *sorted = malloc(t->n * sizeof *sorted);
    uint64_t *pre = malloc((t->n + BFS_MIX_SOURCES) * sizeof *pre);
    int rc = d && sorted && pre ? bfs_pipeline_mix(o, d, err, errlen)
                                : bfs_errf(-ENOMEM, err, errlen, "out of memory");
    uint64_t count[BFS_MIX_SOURCES], first[BFS_MIX_SOURCES + 1], E = 0;
    uint64_t *kpre[BFS_MIX_SOURCES]; /* source k's sorted lengths' prefix sums, count+1 */
    double w[BFS_MIX_SOURCES], expect = 0;
    for (uint32_t k = 0; !rc && k <= d->n; k++)
        first[k] = bfs_source_mix_first(t->src, k);
    for (uint32_t k = 0; !rc && k < d->n; k++) {
        count[k] = first[k + 1] - first[k];
        E += count[k];
        uint32_t *l = sorted + first[k];
        memcpy(l, t->len + first[k], count[k] * sizeof *l);
        qsort(l, count[k], sizeof *l, cmp_u32);
        kpre[k] = pre + first[k] + k;
        kpre[k][0] = 0;
        for (uint64_t i = 0; i < count[k]; i++)
            kpre[k][i + 1] = kpre[k][i] + l[i];
    }
    if (!rc) {
        E = o->epoch_samples ? o->epoch_samples : E;
        bfs_pipeline_mix_weights(d, count, 0, w);
        for (uint32_t k = 0; k < d->n; k++)
            expect += w[k] * (double)E * (double)kpre[k][count[k]] / (double)count[k];
    }
    uint64_t want = (uint64_t)expect / o->seq_len * o->seq_len, lo = E, hi = E;
#define LEAST(e_) least_tokens(d->n, w, count, kpre, (e_))
    while (!rc && LEAST(hi) < want && hi < (1ull << 48))
        lo = hi + 1, hi *= 2;
    while (!rc && lo < hi) { /* the fewest documents whose least tokens fill the rows */
        uint64_t mid = lo + (hi - lo) / 2;
        if (LEAST(mid) >= want)
            hi = mid;
        else
            lo = mid + 1;
    }
#undef LEAST
    bfs_pipeline_opts mo = *o;
    double per_batch =
        (double)o->batch * o->seq_len * (double)t->n / (double)(t->total ? t->total : 1);
    mo.batch = per_batch < 1 ? 1 : per_batch > 65536 ? 65536 : (uint32_t)ceil(per_batch);
    mo.drop_last = 0, mo.shard_index = 0, mo.shard_count = 1, mo.epoch_samples = hi;
    char why[512];
    if (!rc && (rc = bfs_mix_create(d, count, first, &mo, &t->mix, why, sizeof why)))
        bfs_errf(rc, err, errlen, "source=: %s", why);
    if (!rc) {
        t->npos = bfs_mix_samples(t->mix);
        t->total = want;
    }
    free(pre);
    free(sorted);
    free(d);
    return rc;
}

int bfs_tokens_create(bfs_source *src, const bfs_pipeline_opts *o, uint64_t fingerprint,
                      bfs_tokens **out, char *err, size_t errlen)
{
    *out = NULL;
    bfs_tokens *t = calloc(1, sizeof *t);
    if (!t)
        return bfs_errf(-ENOMEM, err, errlen, "out of memory");
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->built, NULL);
    t->src = src;
    t->o = *o;
    t->fingerprint = fingerprint;
    t->n = t->npos = bfs_source_count(src);
    const char *path = bfs_source_path(src);
    /* rows read slices of several documents each: from a mapping, not a pread and an
     * fstat per document (~1/3 of a concat mount's CPU); pread when it cannot be mapped */
    int rc = bfs_source_map_payloads(src);
    if (rc && rc != -ENOTSUP) /* -ENOTSUP: a remote file, never mapped */
        fprintf(stderr, "batchfs: %s: cannot map its payloads (%s): reading them with pread\n",
                path, bfs_strerror(rc));
    rc = 0;
    if (!t->n) {
        rc = bfs_errf(-EINVAL, err, errlen, "%s: no documents", path);
        goto fail;
    }
    if (!(t->len = malloc(t->n * sizeof *t->len)) ||
        (o->pack == BFS_PACK_BUCKET && !(t->bk = malloc(t->n)))) {
        rc = bfs_errf(-ENOMEM, err, errlen, "out of memory for the tables of %llu documents",
                      (unsigned long long)t->n);
        goto fail;
    }
    for (uint64_t i = 0; i < t->n; i++) {
        t->len[i] = bfs_source_token_count(src, i);
        t->total += t->len[i];
    }
    if (o->mix[0] && (rc = mix_create(t, o, err, errlen)))
        goto fail;
    /* the plan: pad's batches, or the order of every document for concat and bucket */
    bfs_plan_opts po;
    bfs_plan_opts_default(&po);
    po.seed = o->seed;
    /* shuffle=rows: the documents in dataset order, so that the windows are the same cuts
     * every epoch and only their order changes (row_indices) */
    po.shuffle = o->shuffle == BFS_SHUFFLE_ROWS ? BFS_SHUFFLE_NONE : o->shuffle;
    if (o->pack == BFS_PACK_PAD) {
        po.shard_index = o->shard_index;
        po.shard_count = o->shard_count;
        po.batch = o->batch;
        po.drop_last = o->drop_last;
    } else {
        po.batch = 1;
        po.drop_last = 0;
    }
    uint64_t *first = NULL, npages = 0;
    if (o->shuffle == BFS_SHUFFLE_PAGES && bfs_source_page_first(src, &first, &npages)) {
        rc = bfs_errf(-ENOMEM, err, errlen, "out of memory");
        goto fail;
    }
    char why[512] = "";
    rc = bfs_plan_create(&po, t->n, first, npages, &t->plan, why, sizeof why);
    free(first);
    if (rc) {
        bfs_errf(rc, err, errlen, "%s: %s", path, why);
        goto fail;
    }
    uint64_t nsh = o->shard_count;
    if (o->pack == BFS_PACK_CONCAT) {
        uint64_t windows = t->windows = t->total / o->seq_len;
        t->per = windows / nsh;
        t->batches = o->drop_last ? t->per / o->batch : (t->per + o->batch - 1) / o->batch;
        if (!t->batches) {
            rc = bfs_errf(-EINVAL, err, errlen,
                          "%s: its %llu tokens make %llu rows of seq_len=%u, %llu per shard "
                          "(shard=%u/%u): fewer than one batch of %u; lower seq_len or batch%s",
                          path, (unsigned long long)t->total, (unsigned long long)windows,
                          o->seq_len, (unsigned long long)t->per, o->shard_index, o->shard_count,
                          o->batch, o->drop_last && t->per ? ", or set drop_last=0" : "");
            goto fail;
        }
        /* Fewer documents than rows: the shuffle of documents moves few cuts, and with one
         * document (nanoGPT's character-level sets) batch K is the same every epoch.
         * shuffle=none asked for that; shuffle=full|pages did not. */
        if (t->npos < windows && o->shuffle != BFS_SHUFFLE_ROWS && o->shuffle != BFS_SHUFFLE_NONE)
            fprintf(stderr,
                    "batchfs: warning: %s: %llu document%s for %llu rows of seq_len=%u per "
                    "epoch: pack=concat shuffles documents, not rows, so rows repeat from "
                    "epoch to epoch%s; use shuffle=rows to permute the rows "
                    "(docs/sequences.md)\n",
                    path, (unsigned long long)t->npos, t->npos == 1 ? "" : "s",
                    (unsigned long long)windows, o->seq_len,
                    t->npos == 1 ? " (with one document, batch K of every epoch is the same)" : "");
    } else if (o->pack == BFS_PACK_BUCKET) {
        uint32_t nb = o->nbuckets;
        for (uint64_t i = 0; i < t->n; i++) {
            uint32_t b = 0;
            while (b + 1 < nb && t->len[i] > o->buckets[b])
                b++;
            t->bk[i] = (uint8_t)b;
            t->count[b]++;
        }
        for (uint32_t b = 0; b < nb; b++) {
            uint64_t r = o->batch;
            if (o->batch_tokens)
                r = o->batch_tokens / o->buckets[b] ? o->batch_tokens / o->buckets[b] : 1;
            t->rows[b] = (uint32_t)(r < MAX_ROWS ? r : MAX_ROWS);
            uint64_t used = t->count[b] / nsh * nsh, chunk = nsh * t->rows[b];
            t->full[b] = used / chunk;
            t->part[b] = o->drop_last ? 0 : used % chunk / nsh;
            t->bstart[b + 1] = t->bstart[b] + t->count[b];
            t->cstart[b + 1] = t->cstart[b] + t->full[b] + (t->part[b] != 0);
        }
        if (!t->cstart[nb]) {
            rc = bfs_errf(-EINVAL, err, errlen,
                          "%s: no bucket holds enough of its %llu documents for one batch of "
                          "%u shard(s) (buckets=...: %llu documents in the fullest); use fewer "
                          "or wider buckets, a smaller batch%s",
                          path, (unsigned long long)t->n, o->shard_count,
                          (unsigned long long)t->count[0], o->drop_last ? " or drop_last=0" : "");
            goto fail;
        }
    }
    layouts_make(t);
    *out = t;
    return 0;
fail:
    bfs_tokens_destroy(t);
    return rc;
}

void bfs_tokens_destroy(bfs_tokens *t)
{
    if (!t)
        return;
    for (unsigned i = 0; i < EPOCH_TABS; i++)
        bfs_tokens_tab_free(&t->tabs[i]);
    bfs_plan_destroy(t->plan);
    bfs_mix_destroy(t->mix);
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->built);
    free(t->len);
    free(t->bk);
    free(t);
}

/* ---- batches and rows ----------------------------------------------------------------- */

/* The rows' windows (concat) or documents of batch k into idx; *width its row width.
 * Returns the row count, -ERANGE or -ENOMEM. */
static int row_indices(bfs_tokens *t, uint64_t epoch, uint64_t k, uint64_t *idx, uint32_t *width)
{
    uint32_t bucket = 0;
    uint64_t chunk = 0;
    uint32_t rows = shape(t, epoch, k, width, &chunk, &bucket);
    if (!rows)
        return -ERANGE;
    uint64_t nsh = t->o.shard_count, r = t->o.shard_index;
    int rc = 0;
    if (t->o.pack == BFS_PACK_CONCAT) {
        bfs_perm p;
        if (t->o.shuffle == BFS_SHUFFLE_ROWS)
            rows_perm(t, epoch, &p); /* once per batch: O(1), no table of the rows */
        for (uint32_t j = 0; j < rows; j++) {
            uint64_t g = (k * t->o.batch + j) * nsh + r;
            idx[j] = t->o.shuffle == BFS_SHUFFLE_ROWS ? bfs_perm_apply(&p, g) : g;
        }
    } else if (t->o.pack == BFS_PACK_PAD) {
        if ((rc = bfs_plan_batch_indices(t->plan, epoch, k, idx)) < 0)
            return rc;
    } else {
        epoch_tab *e = bfs_tokens_tab_get(t, epoch, &rc);
        if (!e)
            return rc;
        uint64_t i = chunk - t->cstart[bucket];
        uint64_t base = t->bstart[bucket] + i * nsh * t->rows[bucket] + r * rows;
        memcpy(idx, e->order + base, rows * sizeof *idx);
        bfs_tokens_tab_put(t, e);
    }
    return (int)rows;
}

int bfs_tokens_batch_indices(bfs_tokens *t, uint64_t epoch, uint64_t k, uint64_t *idx)
{
    uint32_t width;
    return row_indices(t, epoch, k, idx, &width);
}

/* The last position p of epoch table e with prefix[p] <= start: the place in the epoch's
 * document order of the document holding token `start` (concat). */
static uint64_t doc_at(const bfs_tokens *t, const epoch_tab *e, uint64_t start)
{
    uint64_t lo = 0, hi = t->npos;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo + 1) / 2;
        if (e->prefix[mid] <= start)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

int bfs_tokens_docs(bfs_tokens *t, uint64_t epoch, const uint64_t *idx, uint32_t n, uint64_t *docs,
                    uint32_t cap)
{
    uint32_t m = 0;
    if (t->o.pack != BFS_PACK_CONCAT) { /* a row is a document */
        for (uint32_t j = 0; j < n && m < cap; j++)
            docs[m++] = idx[j];
        return (int)m;
    }
    int rc = 0;
    epoch_tab *e = bfs_tokens_tab_get(t, epoch, &rc);
    if (!e)
        return rc;
    uint64_t T = t->o.seq_len;
    for (uint32_t j = 0; j < n && m < cap; j++) {
        uint64_t start = idx[j] * T, lo = doc_at(t, e, start);
        uint64_t off = start - e->prefix[lo];
        for (uint64_t p = lo, filled = 0; filled < T && p < t->npos && m < cap; p++, off = 0) {
            uint64_t d = e->order[p];
            filled += t->len[d] - off;
            if (!m || docs[m - 1] != d)
                docs[m++] = d;
        }
    }
    bfs_tokens_tab_put(t, e);
    return (int)m;
}

int bfs_tokens_batch_begin(bfs_tokens *t, uint64_t epoch, uint64_t k, uint8_t *dst, uint64_t *idx)
{
    uint32_t width;
    int n = row_indices(t, epoch, k, idx, &width);
    if (n < 0)
        return n;
    uint32_t rows = (uint32_t)n;
    bfs_st_tok_desc d;
    bfs_st_tok_place l;
    describe(t, rows, width, epoch, k, &d);
    int rc = layout_of(t, rows, width, &l);
    if (!rc)
        rc = bfs_st_tok_write_header(&d, dst, l.header_size);
    if (rc)
        return rc;
    if (t->o.pack == BFS_PACK_CONCAT)
        return n;
    for (uint32_t j = 0; j < rows; j++) {
        bfs_st64(dst + l.off[0] + 8ull * j, t->len[idx[j]] < width ? t->len[idx[j]] : width);
        bfs_st64(dst + l.off[1] + 8ull * j, idx[j]);
    }
    return (int)rows;
}

/* Document d into s (kept for the next row). */
static int get_doc(bfs_tokens *t, bfs_tokens_scratch *s, uint64_t d)
{
    if (s->doc == d + 1)
        return 0;
    s->doc = 0;
    bfs_item it;
    int rc = bfs_source_get(t->src, d, &it, &s->src);
    if (rc)
        return rc;
    if ((it.flags & BFS_KIND_MASK) != BFS_KIND_TOKENS || it.raw_size != t->len[d])
        return BFS_E_SAMPLE_RANGE; /* cannot pass the table checks: defence in depth */
    s->data = it.data;
    s->count = it.raw_size;
    s->u32 = (it.flags & BFS_F_TOKENS_U32) != 0;
    s->doc = d + 1;
    return 0;
}

static inline uint32_t tok(const bfs_tokens_scratch *s, uint64_t i)
{
    return s->u32 ? bfs_ld32(s->data + 4 * i) : bfs_ld16(s->data + 2 * i);
}

/* n ids from token `from` of s into dst as little-endian 32-bit values: the hot loop of
 * every row. u16 ids are widened 8 at a time with SSE2 (every x86-64 has it): gcc -O2
 * left the plain loop scalar, one id per iteration, and it was 27% of the daemon's CPU
 * serving pack=concat rows (perf); the plain loop does the rest, and all of it elsewhere. */
static void put_ids(const bfs_tokens_scratch *s, uint64_t from, uint64_t n, uint8_t *dst)
{
    /* (little-endian only, as base/endian.h makes every build) */
    if (!s->u32) {
        const uint8_t *src = s->data + 2 * from;
        uint64_t i = 0;
#ifdef __SSE2__
        const __m128i zero = _mm_setzero_si128();
        for (; i + 8 <= n; i += 8) {
            __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(src + 2 * i));
            _mm_storeu_si128((__m128i *)(void *)(dst + 4 * i), _mm_unpacklo_epi16(v, zero));
            _mm_storeu_si128((__m128i *)(void *)(dst + 4 * i + 16), _mm_unpackhi_epi16(v, zero));
        }
#endif
        for (; i < n; i++) {
            uint16_t v;
            uint32_t w;
            memcpy(&v, src + 2 * i, 2);
            w = v;
            memcpy(dst + 4 * i, &w, 4);
        }
    } else
        memcpy(dst, s->data + 4 * from, 4 * n);
}

static int fatal(int rc)
{
    return bfs_err_is_transient(rc) || rc == BFS_E_CHANGED;
}

/* A substitute for bad document d, read into s: drawn from d's own random stream, so
 * whoever computes the row picks the same. Returns 0 with *alt, 1 when none reads, or a
 * fatal error. */
static int substitute(bfs_tokens *t, bfs_tokens_scratch *s, uint64_t epoch, uint64_t d,
                      uint64_t *alt)
{
    uint64_t cand[BFS_SUBSTITUTE_TRIES];
    int nc = bfs_substitutes(t->o.seed, epoch, d, t->n, cand);
    for (int i = 0; i < nc; i++) {
        int rc = get_doc(t, s, cand[i]);
        if (!rc) {
            *alt = cand[i];
            return 0;
        }
        if (fatal(rc))
            return rc;
    }
    return 1;
}

/* Concat row g from epoch table e. Reads documents: inside the caller's guard. */
static int concat_row(bfs_tokens *t, bfs_tokens_scratch *s, const epoch_tab *e, uint64_t epoch,
                      uint64_t g, uint8_t *toks, uint8_t *pos, int subst, bfs_tokens_bad *bad)
{
    int rc;
    uint64_t T = t->o.seq_len, start = g * T;
    uint64_t p = doc_at(t, e, start), off = start - e->prefix[p], filled = 0;
    rc = 0;
    while (filled < T && p < t->npos) {
        uint64_t d = e->order[p], n = t->len[d];
        /* the documents come in the epoch's shuffled order, ~2 KB each: the hardware
         * prefetcher cannot guess the next one, so its record (two steps ahead) and then
         * its first 4 KiB (one step ahead) are asked for while this one is copied */
        if (p + 2 < t->npos)
            bfs_source_prefetch(t->src, e->order[p + 2], 0);
        if (p + 1 < t->npos)
            bfs_source_prefetch(t->src, e->order[p + 1], 4096);
        uint64_t take = n - off < T - filled ? n - off : T - filled;
        int drc = get_doc(t, s, d);
        uint64_t a = UINT64_MAX;
        if (drc) {
            if (fatal(drc) || !subst) {
                bad->rc = drc, bad->doc = d, bad->alt = UINT64_MAX;
                rc = drc;
                break;
            }
            int src = substitute(t, s, epoch, d, &a);
            if (src < 0) {
                rc = src;
                break;
            }
            if (!bad->rc)
                bad->rc = drc, bad->doc = d, bad->alt = src ? UINT64_MAX : a;
            bad->count++;
        }
        if (!drc)
            put_ids(s, off, take, toks + 4 * filled);
        for (uint64_t i = 0; drc && i < take; i++)
            bfs_st32(toks + 4 * (filled + i), a != UINT64_MAX ? tok(s, (off + i) % s->count) : 0);
        for (uint64_t i = 0; pos && i < take; i++) {
            bfs_st32(pos + 4 * (filled + i), (uint32_t)(off + i));
        }
        filled += take;
        off = 0;
        p++;
    }
    return rc;
}

/* A pad or bucket row: one document, cut or padded. Reads it: inside the caller's guard. */
static int other_row(bfs_tokens *t, bfs_tokens_scratch *s, uint64_t epoch, uint32_t j, uint64_t idx,
                     uint8_t *dst, const bfs_st_tok_place *l, uint32_t width, uint64_t rowb,
                     int subst, bfs_tokens_bad *bad)
{
    uint8_t *toks = dst + l->off[2] + rowb * j, *mask = dst + l->off[3] + (uint64_t)width * j;
    uint64_t doc = idx;
    int rc = get_doc(t, s, doc);
    if (rc) {
        bad->rc = rc, bad->doc = doc, bad->alt = UINT64_MAX, bad->count = 1;
        if (fatal(rc) || !subst)
            return rc;
        int src = substitute(t, s, epoch, doc, &doc);
        if (src < 0)
            return src;
        if (src == 0)
            bad->alt = doc;
    }
    uint64_t n = bad->rc && bad->alt == UINT64_MAX ? 0 : s->count < width ? s->count : width;
    put_ids(s, 0, n, toks);
    for (uint64_t i = n; i < width; i++)
        bfs_st32(toks + 4 * i, t->o.pad_id);
    memset(mask, 1, n);
    memset(mask + n, 0, width - n);
    if (bad->rc) { /* the row holds the substitute (or nothing): say so in its tensors */
        bfs_st64(dst + l->off[0] + 8ull * j, n);
        bfs_st64(dst + l->off[1] + 8ull * j, doc);
    }
    return 0;
}

int bfs_tokens_row(bfs_tokens *t, bfs_tokens_scratch *s, uint64_t epoch, uint64_t k, uint32_t j,
                   uint64_t idx, uint8_t *dst, int subst, bfs_tokens_bad *bad)
{
    memset(bad, 0, sizeof *bad);
    /* the batch's shape and layout, kept for the worker's next rows of the same batch
     * (a bucket batch's shape costs a keyed permutation, its layout a header dry run) */
    if (!s->lay_rows || s->lay_epoch != epoch || s->lay_k != k) {
        s->lay_rows = shape(t, epoch, k, &s->lay_width, NULL, NULL);
        if (!s->lay_rows || layout_of(t, s->lay_rows, s->lay_width, &s->lay)) {
            s->lay_rows = 0;
            return -ERANGE;
        }
        s->lay_epoch = epoch, s->lay_k = k;
    }
    uint32_t width = s->lay_width, rows = s->lay_rows;
    const bfs_st_tok_place *l = &s->lay;
    if (j >= rows)
        return -ERANGE;
    uint64_t rowb = 4ull * width;
    /* mapped documents, whose checksums are verified once per mount: a file changed in
     * place is caught by its identity (bfs_unchanged), here before a batch's first row
     * reads, and by the executor after every claim's reads (bfs_engine_claim_end) */
    int rc = j == 0 ? bfs_source_unchanged(t->src) : 0;
    if (rc)
        return rc;
    epoch_tab *e = NULL;
    /* shuffle=rows: the documents' order is the same every epoch: one table for all */
    uint64_t te = t->o.shuffle == BFS_SHUFFLE_ROWS ? 0 : epoch;
    if (t->o.pack == BFS_PACK_CONCAT && !(e = bfs_tokens_tab_get(t, te, &rc)))
        return rc;
    /* every read of a document between here and bfs_guard_leave (guard.h) */
    bfs_guard g;
    bfs_guard_enter(&g);
    if (sigsetjmp(g.jb, 0) == 0) {
        rc = e ? concat_row(t, s, e, epoch, idx, dst + l->off[0] + rowb * j,
                            t->o.positions ? dst + l->off[1] + rowb * j : NULL, subst, bad)
               : other_row(t, s, epoch, j, idx, dst, l, width, rowb, subst, bad);
    } else { /* a page of the mapping was gone: the file was truncated in place */
        s->doc = 0;
        rc = BFS_E_CHANGED;
    }
    bfs_guard_leave(&g);
    if (e)
        bfs_tokens_tab_put(t, e);
    return rc;
}

void bfs_tokens_scratch_free(bfs_tokens_scratch *s)
{
    bfs_source_scratch_free(&s->src);
    memset(s, 0, sizeof *s);
}
