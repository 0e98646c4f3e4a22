/*
 * fields.c — the fields of a multi-field dataset (.bfs version 3) in a batch: which are
 * served and their tensors (bfs_fields_plan, bfs_fields_add_tensor, which engine.c also
 * uses for `padded` and a mixture's `sources`), each sample's values stored in their
 * slots (bfs_fields_store) with the transforms that make boxes, and the values that pair
 * with them, follow the crop of their image. engine.c renders the images and calls these.
 */
#include "engine/engine_internal.h"
#include "base/endian.h"
#include "base/err.h"
#include "base/clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bfs_dtype field_dtype(unsigned fdt)
{
    static const bfs_dtype map[BFS_FDT_END] = {
        [BFS_FDT_U8] = BFS_DT_U8,   [BFS_FDT_U16] = BFS_DT_U16, [BFS_FDT_U32] = BFS_DT_U32,
        [BFS_FDT_I32] = BFS_DT_I32, [BFS_FDT_I64] = BFS_DT_I64, [BFS_FDT_F32] = BFS_DT_F32};
    return fdt < BFS_FDT_END ? map[fdt] : BFS_DT_U8;
}

/* Add a field tensor called name+suffix; -EINVAL (message in err) when the name is taken
 * or there are too many. */
int bfs_fields_add_tensor(bfs_engine *e, const char *name, const char *suffix, bfs_dtype dt,
                          uint32_t ndim, const uint64_t *shape, int image, uint32_t *idx, char *err,
                          size_t errlen)
{
    if (e->n_tensors == BFS_ST_MAX_FIELD_TENSORS)
        return bfs_errf(-EINVAL, err, errlen,
                        "%s: the fields served need more than %u tensors; serve fewer (fields=)",
                        bfs_source_path(e->src), BFS_ST_MAX_FIELD_TENSORS);
    char *nm = e->tensor_names[e->n_tensors];
    snprintf(nm, BFS_ST_NAME_MAX + 1, "%s%s", name, suffix);
    static const char *const fixed[] = {"images", "labels", "indices"};
    for (size_t i = 0; i < 3; i++)
        if (!strcmp(nm, fixed[i]))
            return bfs_errf(-EINVAL, err, errlen,
                            "%s: field \"%s\" would be served as a tensor called \"%s\", which "
                            "every batch has already; leave it out (fields=)",
                            bfs_source_path(e->src), name, nm);
    for (uint32_t i = 0; i < e->n_tensors; i++)
        if (!strcmp(nm, e->tensor_names[i]))
            return bfs_errf(-EINVAL, err, errlen,
                            "%s: two fields would be served as tensors called \"%s\" (a field "
                            "NAME's lengths are NAME_lengths); leave one out (fields=)",
                            bfs_source_path(e->src), nm);
    bfs_st_field_tensor *t = &e->tensors[e->n_tensors];
    memset(t, 0, sizeof *t);
    t->name = nm;
    t->dtype = dt;
    t->ndim = ndim;
    if (ndim) /* shape may be NULL then */
        memcpy(t->shape, shape, ndim * sizeof *shape);
    t->image = image;
    *idx = e->n_tensors++;
    return 0;
}

/* Boxes through the primary image's geometry (bfs_augment_boxes): the rows kept are
 * recorded for the per-box fields that follow. */
static uint32_t boxes_transform(const served_field *sf, sample_state *st, const uint8_t *in,
                                uint32_t rows, uint8_t *out, uint32_t cap)
{
    uint32_t *keep = st->keep_mem + sf->keep_off;
    float box[4 * 64], got[4 * 64];
    uint32_t kept = 0, k[64];
    /* in and out may not be float-aligned (a heap offset): copied through in chunks */
    for (uint32_t i = 0; i < rows; i += 64) {
        uint32_t n = rows - i < 64 ? rows - i : 64;
        memcpy(box, in + 16ull * i, 16ull * n);
        uint32_t m = bfs_augment_boxes(st->g, box, n, st->min_area, got, k);
        for (uint32_t j = 0; j < m && kept < cap; j++, kept++) {
            memcpy(out + 16ull * kept, got + 4 * j, 16);
            keep[kept] = i + k[j];
        }
    }
    st->keep[sf->f] = keep;
    st->kept[sf->f] = kept;
    return kept;
}

/* A per-box value: the rows its boxes field kept, in their order. Its boxes field is
 * earlier in the dataset, so it was stored first; rows past its boxes' count (a record
 * the reader checked cannot have them) are dropped. */
static uint32_t follow_transform(const served_field *sf, sample_state *st, const uint8_t *in,
                                 uint32_t rows, uint8_t *out, uint32_t cap)
{
    const uint32_t *keep = st->keep[sf->keep_field];
    uint32_t kept = 0;
    for (uint32_t j = 0; keep && j < st->kept[sf->keep_field] && kept < cap; j++)
        if (keep[j] < rows)
            memcpy(out + sf->row_bytes * kept++, in + sf->row_bytes * keep[j], sf->row_bytes);
    return kept;
}

/* Choose the fields served (fields=, text_len=) and plan their tensors. */
int bfs_fields_plan(bfs_engine *e, char *err, size_t errlen)
{
    uint32_t n = bfs_source_field_count(e->src);
    const char *names[BFS_FIELD_MAX];
    unsigned char kind[BFS_FIELD_MAX];
    for (uint32_t f = 0; f < n && f < BFS_FIELD_MAX; f++) {
        const bfs_field *d = bfs_source_field(e->src, f);
        names[f] = d->name;
        kind[f] = d->kind;
    }
    uint64_t pick;
    char why[BFS_PIPELINE_ERRLEN];
    int rc = bfs_pipeline_check_fields(&e->o, names, kind, n, &pick, why, sizeof why);
    if (rc)
        return bfs_errf(rc, err, errlen, "%s: %s", bfs_source_path(e->src), why);
    int have_primary = 0;
    for (uint32_t f = 0; f < n && f < BFS_FIELD_MAX; f++) {
        if (!(pick >> f & 1))
            continue;
        const bfs_field *d = bfs_source_field(e->src, f);
        if (d->kind == BFS_FIELD_IMAGE && !have_primary) {
            e->primary = f, have_primary = 1;
            continue;
        }
        served_field *sf = &e->served[e->n_served];
        memset(sf, 0, sizeof *sf);
        sf->f = f;
        sf->decl = d;
        if (d->kind == BFS_FIELD_IMAGE) {
            if ((rc = bfs_fields_add_tensor(e, d->name, "", BFS_DT_U8, 0, NULL, 1, &sf->t_data, err,
                                            errlen)))
                return rc;
            e->n_served++;
            continue;
        }
        bfs_dtype dt = field_dtype(d->dtype);
        uint64_t elems = 1, shape[BFS_ST_MAX_DIMS - 1];
        uint32_t ndim = 0;
        sf->variable = (d->flags & BFS_FIELDF_VARIABLE) != 0;
        if (sf->variable) {
            for (uint32_t k = 0; k < d->rank; k++)
                elems *= d->shape[k];
            uint64_t rows = elems ? d->max_count / elems : 0;
            if (d->kind == BFS_FIELD_TEXT && e->o.text_len)
                rows = e->o.text_len, sf->text_cut = 1;
            if (d->kind == BFS_FIELD_TOKENS && e->o.token_len)
                rows = e->o.token_len;
            if (rows > INT32_MAX) /* NAME_lengths is I32 */
                return bfs_errf(-EINVAL, err, errlen,
                                "%s: field \"%s\" has values of %llu rows, more than a batch "
                                "can count; leave it out (fields=)",
                                bfs_source_path(e->src), d->name, (unsigned long long)rows);
            sf->rows = (uint32_t)rows;
            shape[ndim++] = rows ? rows : 1; /* an empty tensor would hide the field's shape */
        }
        for (uint32_t k = 0; k < d->rank; k++)
            shape[ndim++] = d->shape[k];
        if (!sf->variable)
            for (uint32_t k = 0; k < d->rank; k++)
                elems *= d->shape[k];
        sf->row_elems = (uint32_t)elems;
        sf->row_bytes = elems * bfs_dtype_size(dt);
        sf->slot_bytes = sf->variable ? shape[0] * sf->row_bytes : sf->row_bytes;
        if ((rc = bfs_fields_add_tensor(e, d->name, "", dt, ndim, shape, 0, &sf->t_data, err,
                                        errlen)))
            return rc;
        if (sf->variable && (rc = bfs_fields_add_tensor(
                                 e, d->name, d->kind == BFS_FIELD_BOXES ? "_counts" : "_lengths",
                                 BFS_DT_I32, 0, NULL, 0, &sf->t_len, err, errlen)))
            return rc;
        if (d->kind == BFS_FIELD_TOKENS && /* NAME_mask: 1 where a token is, 0 in the padding */
            (rc = bfs_fields_add_tensor(e, d->name, "_mask", BFS_DT_U8, 1, shape, 0, &sf->t_mask,
                                        err, errlen)))
            return rc;
        sf->t_mask_set = d->kind == BFS_FIELD_TOKENS;
        /* Boxes follow field 0's image (its source pixels), and per-box values the rows
         * their boxes keep: docs/engine.md, "Boxes follow the crop". */
        if (d->kind == BFS_FIELD_BOXES || d->follows != BFS_FIELD_NONE) {
            uint32_t bf = d->kind == BFS_FIELD_BOXES ? f : d->follows;
            if (!have_primary || e->primary != 0)
                return bfs_errf(-EINVAL, err, errlen,
                                "%s: field \"%s\" follows the crop of image field \"%s\": "
                                "serve that field too (fields=)",
                                bfs_source_path(e->src), d->name,
                                bfs_source_field(e->src, 0)->name);
            if (d->kind != BFS_FIELD_BOXES && !(pick >> bf & 1))
                return bfs_errf(-EINVAL, err, errlen,
                                "%s: field \"%s\" holds a value per box of field \"%s\": serve "
                                "that field too (fields=), so that the boxes the crop drops drop "
                                "their values",
                                bfs_source_path(e->src), d->name,
                                bfs_source_field(e->src, bf)->name);
            sf->transform = d->kind == BFS_FIELD_BOXES ? boxes_transform : follow_transform;
            sf->keep_field = bf;
            if (d->kind == BFS_FIELD_BOXES) {
                sf->keep_off = e->keep_rows;
                e->keep_rows += sf->rows;
            }
        }
        e->n_served++;
    }
    return 0;
}

/* Store field sf of sample idx into slot j of its tensors: padded rows and a length
 * (variable values), or the value (fixed; zeros when an optional one is absent). */
int bfs_fields_store(bfs_engine *e, bfs_engine_worker *w, const served_field *sf, uint64_t idx,
                     sample_state *st, uint8_t *dst, const bfs_st_layout *lay, uint32_t j)
{
    uint64_t t0 = bfs_mono_ns();
    bfs_item it;
    int rc = bfs_source_get_value(e->src, idx, sf->f, &it, &w->scratch);
    bfs_engine_add(&w->read_ns, bfs_mono_ns() - t0);
    if (rc)
        return rc;
    uint8_t *out = dst + lay->field_off[sf->t_data] + sf->slot_bytes * j;
    if (!sf->variable) {
        if (it.len == sf->slot_bytes)
            memcpy(out, it.data, it.len);
        else /* an optional value absent (the reader checked the others' size) */
            memset(out, 0, sf->slot_bytes);
        return 0;
    }
    const uint8_t *in = it.data;
    uint64_t rows = sf->row_bytes ? it.len / sf->row_bytes : 0; /* whole rows: the reader */
    if (sf->transform && rows) {
        size_t need = (size_t)(sf->rows ? sf->rows : 1) * sf->row_bytes;
        if (w->rows_cap < need) {
            uint8_t *b = realloc(w->rows, need);
            if (!b)
                return -ENOMEM;
            w->rows = b, w->rows_cap = need;
        }
        rows = sf->transform(sf, st, in, (uint32_t)rows, w->rows, sf->rows);
        in = w->rows;
    }
    if (rows > sf->rows) { /* text_len=, token_len= (the dataset's max fits every value) */
        rows = sf->rows;
        if (sf->text_cut) /* not inside a character: back to the start of the one cut */
            while (rows && (in[rows] & 0xc0) == 0x80)
                rows--;
        bfs_engine_add(&w->texts_cut, 1);
    }
    uint64_t n = rows * sf->row_bytes;
    if (n)
        memcpy(out, in, n);
    memset(out + n, 0, sf->slot_bytes - n);
    bfs_st32(dst + lay->field_off[sf->t_len] + 4ull * j, (uint32_t)rows);
    if (sf->t_mask_set) {
        uint64_t L = sf->slot_bytes / sf->row_bytes;
        uint8_t *m = dst + lay->field_off[sf->t_mask] + L * j;
        memset(m, 1, rows);
        memset(m + rows, 0, L - rows);
    }
    return 0;
}

/* Slot j of a non-image field sf empty: zeros, length 0, mask 0 (fill_gray). */
void bfs_fields_clear(const served_field *sf, uint8_t *dst, const bfs_st_layout *lay, uint32_t j)
{
    memset(dst + lay->field_off[sf->t_data] + sf->slot_bytes * j, 0, sf->slot_bytes);
    if (sf->variable)
        bfs_st32(dst + lay->field_off[sf->t_len] + 4ull * j, 0);
    if (sf->t_mask_set) {
        uint64_t L = sf->slot_bytes / sf->row_bytes;
        memset(dst + lay->field_off[sf->t_mask] + L * j, 0, L);
    }
}
