/*
 * schema.c — what a batch file holds, for libbatchfs-gpu's loader (loader_internal.h): the
 * file checked by the engine's strict safetensors parser and the batch schema (images,
 * labels, indices and a multi-field dataset's fields; or a token batch's tensors, in data
 * order), planned as the tensors to copy; the views handed to the caller; the device
 * layout of a slot.
 */
#include "gpu/loader_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int bfsgi_parse_u64(const char *s, uint64_t *v)
{
    if (!s || *s < '0' || *s > '9')
        return -EINVAL;
    errno = 0;
    char *end;
    unsigned long long x = strtoull(s, &end, 10);
    if (errno || *end)
        return -EINVAL;
    *v = x;
    return 0;
}

static void set_view(bfsg_tensor *t, const char *name, bfsg_dtype dt, uint32_t ndim,
                     const uint64_t *shape, void *data, uint64_t nbytes)
{
    t->name = name;
    t->dtype = dt;
    t->ndim = ndim;
    int64_t stride = 1;
    for (int i = (int)ndim - 1; i >= 0; i--) {
        t->shape[i] = (int64_t)shape[i];
        t->strides[i] = stride;
        stride *= (int64_t)shape[i];
    }
    t->data = data;
    t->nbytes = nbytes;
}

/* the dtypes a batch may hold: the image dtypes, token batches' U8, I32, I64, and
 * fields' U16, U32 */
static bfsg_dtype to_bfsg(bfs_dtype d)
{
    switch (d) {
    case BFS_DT_U16:
        return BFSG_U16;
    case BFS_DT_U32:
        return BFSG_U32;
    case BFS_DT_U8:
        return BFSG_U8;
    case BFS_DT_F16:
        return BFSG_F16;
    case BFS_DT_BF16:
        return BFSG_BF16;
    case BFS_DT_I64:
        return BFSG_I64;
    case BFS_DT_I32:
        return BFSG_I32;
    default:
        return BFSG_F32;
    }
}

/* metadata key of f in plain decimal (no sign, no leading zero) */
static int meta_u64(const bfs_st_file *f, const char *key, uint64_t *v)
{
    const char *t = bfs_st_meta_get(f, key);
    return !t || bfsgi_parse_u64(t, v) || (t[0] == '0' && t[1]) ? -1 : 0;
}

/*
 * A token batch (docs/sequences.md): metadata format batchfs/2, kind tokens, a pack, epoch
 * and batch in decimal, a 16-hex-digit fingerprint; 1..BFSG_MAX_TENSORS tensors of U8,
 * I32 or I64 with 1..BFSG_MAX_DIMS dimensions, each at a file offset aligned to its
 * element size (so host views are aligned, as the writer places them). Any tensor names
 * and shapes: the loader delivers what the file holds, in data order.
 */
static int plan_tokens(bfsg_loader *l, slot *s, const bfs_st_file *f, const char *kind,
                       file_plan *fp)
{
    const char *fmt = bfs_st_meta_get(f, "format"), *pack = bfs_st_meta_get(f, "pack");
    const char *fpr = bfs_st_meta_get(f, "fingerprint");
    if (strcmp(kind, "tokens"))
        return slot_errf(s, -EBADMSG,
                         "%s: not a batchfs batch: metadata kind \"%s\" (known: \"tokens\", or "
                         "none for images)",
                         s->path, kind);
    if (!fmt || strcmp(fmt, BFS_ST_FORMAT))
        return slot_errf(s, -EBADMSG, "%s: not a batchfs batch: metadata format \"%s\", not \"%s\"",
                         s->path, fmt ? fmt : "(none)", BFS_ST_FORMAT);
    if (!pack || !*pack)
        return slot_errf(s, -EBADMSG, "%s: not a batchfs token batch: no metadata pack", s->path);
    if (meta_u64(f, "epoch", &fp->d.epoch) || meta_u64(f, "batch", &fp->d.batch_index))
        return slot_errf(s, -EBADMSG,
                         "%s: not a batchfs token batch: metadata epoch and batch must be "
                         "decimal numbers",
                         s->path);
    int hex = fpr && strlen(fpr) == 16;
    for (int i = 0; hex && i < 16; i++)
        hex = (fpr[i] >= '0' && fpr[i] <= '9') || (fpr[i] >= 'a' && fpr[i] <= 'f');
    if (!hex)
        return slot_errf(s, -EBADMSG,
                         "%s: not a batchfs token batch: metadata fingerprint is not 16 "
                         "lowercase hex digits",
                         s->path);
    if (f->n_tensors < 1 || f->n_tensors > BFSG_MAX_TENSORS)
        return slot_errf(s, -EBADMSG, "%s: a token batch of %u tensors; the loader takes 1 to %d",
                         s->path, f->n_tensors, BFSG_MAX_TENSORS);
    fp->tokens = 1, fp->n = 0;
    for (uint32_t i = 0; i < f->n_tensors; i++) {
        const bfs_st_tensor *t = &f->tensors[i];
        if (t->dtype != BFS_DT_U8 && t->dtype != BFS_DT_I32 && t->dtype != BFS_DT_I64)
            return slot_errf(s, -EBADMSG, "%s: tensor '%s' is %s; token batches hold U8, I32, I64",
                             s->path, t->name, bfs_dtype_name(t->dtype));
        if (t->ndim < 1 || t->ndim > BFSG_MAX_DIMS)
            return slot_errf(s, -EBADMSG,
                             "%s: tensor '%s' has %u dimensions; the loader takes 1 to %d", s->path,
                             t->name, t->ndim, BFSG_MAX_DIMS);
        if (t->name_len >= NAME_CAP || strlen(t->name) != t->name_len)
            return slot_errf(s, -EBADMSG,
                             "%s: a tensor name of %zu bytes (at most %d, no NUL) in a token batch",
                             s->path, t->name_len, NAME_CAP - 1);
        if (t->offset % bfs_dtype_size(t->dtype))
            return slot_errf(s, -EBADMSG,
                             "%s: tensor '%s' starts at byte %" PRIu64 ", not a multiple of its "
                             "element size",
                             s->path, t->name, t->offset);
        uint32_t j = fp->n++; /* insertion by file offset: data order */
        for (; j > 0 && fp->t[j - 1]->offset > t->offset; j--)
            fp->t[j] = fp->t[j - 1];
        fp->t[j] = t;
    }
    if (l->dtype[0] || l->normalize[0] || l->layout[0])
        return slot_errf(s, -EINVAL,
                         "%s: a token batch (pack=%s): dtype=, normalize= and layout= convert "
                         "images only; leave them unset for token datasets",
                         s->path, pack);
    return 0;
}

int bfsgi_plan_file(bfsg_loader *l, slot *s, int fd, uint64_t epoch, uint64_t k, file_plan *fp)
{
    struct stat st;
    if (fstat(fd, &st))
        return slot_errf(s, -errno, "%s: %s", s->path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return slot_errf(s, -EBADMSG, "%s: not a regular file", s->path);
    fp->size = (uint64_t)st.st_size;
    uint8_t head[4096];
    size_t want = fp->size < sizeof head ? (size_t)fp->size : sizeof head;
    int rc = bfsgi_pread_full(s, fd, head, want, 0);
    if (rc)
        return rc;
    bfs_st_file *f = l->stf;
    rc = bfs_st_parse_header(head, want, fp->size, f);
    if (rc == -ENOBUFS) { /* headers above 4 KiB: large extras, batches of 225..255 (mod
                           * 256) images or token rows, whose I64 tensors end just past
                           * a page boundary */
        uint64_t n;       /* 8 + N from the length field: f is not filled on -ENOBUFS */
        if (bfs_st_header_len(head, &n))
            return slot_errf(s, -EBADMSG, "%s: not a safetensors file: bad header length", s->path);
        n += 8;
        uint8_t *big = malloc(n);
        if (!big)
            return slot_errf(s, -ENOMEM, "%s: no memory for a %" PRIu64 "-byte header", s->path, n);
        rc = bfsgi_pread_full(s, fd, big, n, 0);
        if (!rc)
            rc = bfs_st_parse_header(big, n, fp->size, f);
        free(big);
        if (rc == -ENOBUFS || rc > 0)
            rc = -EBADMSG;
    }
    if (rc == -EBADMSG || rc == -E2BIG)
        return slot_errf(s, -EBADMSG, "%s: not a safetensors file: %s", s->path, f->err);
    if (rc)
        return s->err[0] ? rc : slot_errf(s, rc, "%s: %s", s->path, strerror(-rc));
    fp->tokens = 0, fp->n = 3;
    fp->lo = f->data_offset / HOST_ALIGN * HOST_ALIGN;
    const char *kind = bfs_st_meta_get(f, "kind");
    char why[256];
    if (kind) {
        if ((rc = plan_tokens(l, s, f, kind, fp)))
            return rc;
    } else if (bfs_st_batch_from_file(f, &fp->d, why, sizeof why)) {
        return slot_errf(s, -EBADMSG, "%s: not a batchfs batch: %s", s->path, why);
    }
    if (fp->d.epoch != epoch || fp->d.batch_index != k)
        return slot_errf(s, -EBADMSG,
                         "%s: holds epoch %" PRIu64 " batch %" PRIu64 " (its metadata), not "
                         "epoch %" PRIu64 " batch %" PRIu64,
                         s->path, fp->d.epoch, fp->d.batch_index, epoch, k);
    if (fp->tokens)
        return 0;
    fp->t[0] = bfs_st_find(f, "images");
    fp->t[1] = bfs_st_find(f, "labels");
    fp->t[2] = bfs_st_find(f, "indices");
    for (uint32_t i = 3; i < f->n_tensors; i++) { /* a multi-field dataset's (header order) */
        const bfs_st_tensor *t = &f->tensors[i];
        bfs_dtype dt = t->dtype;
        if (dt != BFS_DT_U8 && dt != BFS_DT_U16 && dt != BFS_DT_U32 && dt != BFS_DT_I32 &&
            dt != BFS_DT_I64 && dt != BFS_DT_F32 && dt != BFS_DT_F16 && dt != BFS_DT_BF16)
            return slot_errf(s, -EBADMSG, "%s: field tensor '%s' is %s, which the loader lacks",
                             s->path, t->name, bfs_dtype_name(dt));
        if (t->name_len >= NAME_CAP || strlen(t->name) != t->name_len)
            return slot_errf(s, -EBADMSG,
                             "%s: a field tensor name of %zu bytes (at most %d, no NUL)", s->path,
                             t->name_len, NAME_CAP - 1);
        if (t->offset % bfs_dtype_size(dt))
            return slot_errf(s, -EBADMSG,
                             "%s: field tensor '%s' starts at byte %" PRIu64 ", not a multiple "
                             "of its element size",
                             s->path, t->name, t->offset);
        fp->t[fp->n++] = t; /* n_tensors <= BFS_ST_MAX_TENSORS == BFSG_MAX_TENSORS */
    }
    const bfsgi_convert *cv = &l->conv;
    if (cv->active && fp->d.dtype != BFS_DT_U8)
        return slot_errf(s, -EINVAL,
                         "%s: images are %s; dtype=/layout= conversion needs u8 batch files "
                         "(mount without dtype=)",
                         s->path, bfs_dtype_name(fp->d.dtype));
    fp->out_nchw = cv->active && cv->nchw >= 0 ? cv->nchw : fp->d.nchw;
    uint64_t B = fp->d.batch, H = fp->d.height, W = fp->d.width;
    uint64_t nhwc[4] = {B, H, W, 3}, nchw[4] = {B, 3, H, W};
    memcpy(fp->out_shape, fp->out_nchw ? nchw : nhwc, sizeof nhwc);
    fp->out_bytes = cv->active ? B * H * W * 3 * (uint64_t)cv->elem : fp->t[0]->nbytes;
    return 0;
}

/* the views of the batch in s: tensor i of fp at at[i] */
void bfsgi_fill_views(bfsg_loader *l, slot *s, const file_plan *fp, uint8_t *const at[])
{
    bfsg_batch *b = &s->pub;
    if (fp->tokens) {
        for (uint32_t i = 0; i < fp->n; i++) {
            const bfs_st_tensor *t = fp->t[i];
            memcpy(s->names[i], t->name, t->name_len + 1); /* < NAME_CAP (plan_tokens) */
            set_view(&b->tensors[i], s->names[i], to_bfsg(t->dtype), t->ndim, t->shape, at[i],
                     t->nbytes);
        }
        b->n_tensors = fp->n;
        return;
    }
    uint64_t one[1] = {fp->d.batch};
    bfsg_dtype dt = l->conv.active ? (bfsg_dtype)l->conv.dtype : to_bfsg(fp->d.dtype);
    set_view(&b->tensors[0], "images", dt, 4, fp->out_shape, at[0], fp->out_bytes);
    set_view(&b->tensors[1], "labels", BFSG_I64, 1, one, at[1], fp->t[1]->nbytes);
    set_view(&b->tensors[2], "indices", BFSG_I64, 1, one, at[2], fp->t[2]->nbytes);
    for (uint32_t i = 3; i < fp->n; i++) { /* fields: as the file holds them */
        const bfs_st_tensor *t = fp->t[i];
        memcpy(s->names[i], t->name, t->name_len + 1); /* < NAME_CAP (plan_file) */
        set_view(&b->tensors[i], s->names[i], to_bfsg(t->dtype), t->ndim, t->shape, at[i],
                 t->nbytes);
    }
    b->n_tensors = fp->n;
}

/* device layout of a slot: images as delivered, labels, indices, the field tensors, then
 * the u8 source of a conversion (at off[fp->n]); or a token batch's tensors in data order;
 * each DEV_ALIGN-aligned */
void bfsgi_dev_layout(const bfsg_loader *l, const file_plan *fp, size_t off[BFSG_MAX_TENSORS + 1],
                      size_t *total)
{
    size_t o = 0;
    if (fp->tokens) {
        for (uint32_t i = 0; i < fp->n; i++)
            off[i] = o, o = round_up(o + fp->t[i]->nbytes, DEV_ALIGN);
        *total = o ? o : DEV_ALIGN; /* empty tensors still get a (valid) pointer */
        return;
    }
    off[0] = o, o = round_up(o + fp->out_bytes, DEV_ALIGN);
    for (uint32_t i = 1; i < fp->n; i++)
        off[i] = o, o = round_up(o + fp->t[i]->nbytes, DEV_ALIGN);
    off[fp->n] = o;
    if (l->conv.active)
        o = round_up(o + fp->t[0]->nbytes, DEV_ALIGN);
    *total = o;
}
