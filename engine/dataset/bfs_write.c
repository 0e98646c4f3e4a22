/*
 * bfs_write.c — .bfs writer (see bfs.h, docs/format.md).
 *
 * Streams payloads into a temporary file through a 4 MiB buffer, hashing each heap page
 * as it goes; keeps the sample and class tables in memory (32 bytes per sample); at
 * finish appends the tables, writes the header last (so a torn file has no magic),
 * fsyncs and renames. Single-threaded: mkbatchfs's workers hand it payloads in order.
 */
#include "engine/dataset/bfs.h"
#include "base/err.h"
#include "base/hash.h"
#include "base/io.h"
#include "base/endian.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define WBUF_SIZE  (4u << 20)
#define DIRECT_MIN (32u << 10) /* payload chunks this large are written without copying */

struct bfs_writer {
    int fd;
    int created; /* tmp exists on disk (until renamed) */
    char *path, *tmp;
    uint32_t page_size;
    uint8_t *buf; /* write buffer */
    size_t buffered;
    uint64_t heap_size;        /* bytes of heap written (incl. buffered) */
    bfs_xxh64_state page_hash; /* hash of the current, unfinished page */
    uint64_t *page_sums;
    size_t page_cap;
    uint64_t pages_done;
    uint8_t *samples; /* sample table, rec bytes each */
    uint64_t count, sample_cap;
    char **classes;
    uint32_t nclasses, class_cap;
    uint32_t flags;
    bfs_field *fields; /* version 3: nfields declarations (max_count kept up to date) */
    uint32_t nfields;
    int records;  /* samples come through bfs_writer_add_record */
    uint32_t rec; /* bytes per sample in the table: 32 per field */
};

static int flush(bfs_writer *w)
{
    int rc = bfs_write_all(w->fd, w->buf, w->buffered);
    w->buffered = 0;
    return rc;
}

static int push_page_sum(bfs_writer *w)
{
    if (w->pages_done == w->page_cap) {
        size_t cap = w->page_cap ? w->page_cap * 2 : 256;
        uint64_t *p = realloc(w->page_sums, cap * sizeof *p);
        if (!p)
            return -ENOMEM;
        w->page_sums = p, w->page_cap = cap;
    }
    w->page_sums[w->pages_done++] = bfs_xxh64_digest(&w->page_hash);
    bfs_xxh64_init(&w->page_hash, 0);
    return 0;
}

/* Append heap bytes (data NULL = zeros), splitting the page hash at page boundaries. */
static int heap_append(bfs_writer *w, const uint8_t *data, size_t len)
{
    static const uint8_t zeros[4096];
    while (len) {
        uint64_t in_page = w->heap_size % w->page_size;
        size_t n = len;
        if (n > w->page_size - in_page)
            n = (size_t)(w->page_size - in_page);
        if (data && n >= DIRECT_MIN) {
            /* large chunk: hash and write it from the caller's memory, no staging copy */
            int rc = flush(w);
            if (rc || (rc = bfs_write_all(w->fd, data, n)))
                return rc;
            bfs_xxh64_update(&w->page_hash, data, n);
            w->heap_size += n;
            data += n;
            len -= n;
            if (w->heap_size % w->page_size == 0 && (rc = push_page_sum(w)))
                return rc;
            continue;
        }
        if (n > WBUF_SIZE - w->buffered)
            n = WBUF_SIZE - w->buffered;
        if (!data && n > sizeof zeros)
            n = sizeof zeros;
        const uint8_t *src = data ? data : zeros;
        memcpy(w->buf + w->buffered, src, n);
        bfs_xxh64_update(&w->page_hash, src, n);
        w->buffered += n;
        w->heap_size += n;
        if (data)
            data += n;
        len -= n;
        if (w->buffered == WBUF_SIZE) {
            int rc = flush(w);
            if (rc)
                return rc;
        }
        if (w->heap_size % w->page_size == 0) {
            int rc = push_page_sum(w);
            if (rc)
                return rc;
        }
    }
    return 0;
}

int bfs_writer_create(const char *path, uint32_t page_size, bfs_writer **out, char *err,
                      size_t errlen)
{
    *out = NULL;
    if (page_size == 0)
        page_size = BFS_PAGE_SIZE_DEFAULT;
    if (page_size < BFS_PAGE_SIZE_MIN || page_size > BFS_PAGE_SIZE_MAX ||
        (page_size & (page_size - 1)))
        return bfs_errf(-EINVAL, err, errlen, "page size %u is not a power of two in [%u, %u]",
                        page_size, BFS_PAGE_SIZE_MIN, BFS_PAGE_SIZE_MAX);
    bfs_writer *w = calloc(1, sizeof *w);
    if (!w)
        return bfs_errf(-ENOMEM, err, errlen, "out of memory");
    w->fd = -1;
    w->page_size = page_size;
    w->rec = BFS_SAMPLE_RECORD;
    bfs_xxh64_init(&w->page_hash, 0);
    char *tmp;
    if (asprintf(&tmp, "%s.tmp-XXXXXX", path) < 0)
        tmp = NULL;
    w->tmp = tmp;
    if (!tmp || !(w->path = strdup(path)) || !(w->buf = malloc(WBUF_SIZE))) {
        bfs_writer_abort(w);
        return bfs_errf(-ENOMEM, err, errlen, "out of memory");
    }
    w->fd = mkostemp(w->tmp, O_CLOEXEC);
    if (w->fd < 0) {
        int e = errno;
        char *dir = strdup(path);
        int rc = bfs_errf(-e, err, errlen, "cannot create a temporary file in %s: %s",
                          dir ? dirname(dir) : path, strerror(e));
        free(dir);
        free(w->tmp);
        w->tmp = NULL;
        bfs_writer_abort(w);
        return rc;
    }
    w->created = 1;
    /* Header and padding stay zero until finish: heap starts at BFS_HEAP_ALIGN. */
    if (lseek(w->fd, BFS_HEAP_ALIGN, SEEK_SET) < 0) {
        int e = errno;
        bfs_writer_abort(w);
        return bfs_errf(-e, err, errlen, "seek: %s", strerror(e));
    }
    *out = w;
    return 0;
}

const char *bfs_writer_temp_path(const bfs_writer *w)
{
    return w->tmp;
}

int bfs_writer_add_class(bfs_writer *w, const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > BFS_MAX_CLASS_NAME || w->nclasses >= BFS_MAX_CLASSES)
        return -EINVAL;
    if (w->nclasses == w->class_cap) {
        uint32_t cap = w->class_cap ? w->class_cap * 2 : 64;
        char **c = realloc(w->classes, cap * sizeof *c);
        if (!c)
            return -ENOMEM;
        w->classes = c, w->class_cap = cap;
    }
    if (!(w->classes[w->nclasses] = strdup(name)))
        return -ENOMEM;
    w->nclasses++;
    return 0;
}

int bfs_writer_set_fields(bfs_writer *w, const bfs_field *fields, uint32_t n, char *err,
                          size_t errlen)
{
    if (w->count || w->records || w->nfields)
        return bfs_errf(-EINVAL, err, errlen, "fields are declared once, before any sample");
    if (n == 0 || n > BFS_FIELD_MAX)
        return bfs_errf(-EINVAL, err, errlen, "%u fields: a sample has 1..%u", n, BFS_FIELD_MAX);
    for (uint32_t k = 0; k < n; k++) {
        int rc = bfs_field_check(&fields[k], k, n, err, errlen);
        if (rc)
            return rc;
        if (fields[k].follows != BFS_FIELD_NONE &&
            fields[fields[k].follows].kind != BFS_FIELD_BOXES)
            return bfs_errf(-EINVAL, err, errlen, "field %u (%s) follows field %u, not boxes", k,
                            fields[k].name, fields[k].follows);
        for (uint32_t j = 0; j < k; j++)
            if (!strncmp(fields[j].name, fields[k].name, sizeof fields[k].name))
                return bfs_errf(-EINVAL, err, errlen, "fields %u and %u are both named %s", j, k,
                                fields[k].name);
    }
    if (!(w->fields = calloc(n, sizeof *w->fields)))
        return bfs_errf(-ENOMEM, err, errlen, "out of memory");
    memcpy(w->fields, fields, n * sizeof *fields);
    for (uint32_t k = 0; k < n; k++) {
        w->fields[k].name[BFS_FIELD_NAME_MAX] = '\0';
        w->fields[k].max_count = 0;
    }
    w->nfields = n;
    w->records = 1;
    w->rec = BFS_SAMPLE_RECORD * n;
    return 0;
}

/* An image record (field 0 or another image field) is one the reader takes. */
static int image_ok(const bfs_value_in *v)
{
    uint16_t kind = v->flags & BFS_KIND_MASK;
    if (v->len == 0 || v->width == 0 || v->height == 0 || (v->flags & ~BFS_FLAGS_KNOWN) ||
        kind == BFS_KIND_TOKENS || (v->flags & BFS_F_TOKENS_U32))
        return 0;
    if (kind == BFS_KIND_CODEC)
        return !(v->flags & ~(BFS_KIND_MASK | BFS_F_WEBP)) && !v->raw_size;
    if (v->flags & BFS_F_WEBP)
        return 0;
    return kind != BFS_KIND_RAW || (uint64_t)v->raw_size == (uint64_t)v->width * v->height * 3u;
}

/* A non-image value fits its declaration (as the reader checks it). */
static int value_ok(const bfs_field *fd, const bfs_value_in *v, const bfs_value_in *all)
{
    if (v->width || v->height || v->flags)
        return 0;
    if (v->len == 0)
        return v->raw_size == 0;
    uint64_t per = 1;
    for (unsigned k = 0; k < fd->rank; k++)
        per *= fd->shape[k];
    if ((uint64_t)v->raw_size * bfs_fdt_size(fd->dtype) != v->len ||
        ((fd->flags & BFS_FIELDF_VARIABLE) ? v->raw_size % per != 0 : v->raw_size != per))
        return 0;
    return fd->follows == BFS_FIELD_NONE || (uint64_t)v->raw_size * 4 == all[fd->follows].raw_size;
}

/* Place one payload in the heap (never straddling a page it fits in) and fill its
 * 32-byte record at e. */
static int place(bfs_writer *w, uint8_t *e, uint32_t label, const bfs_value_in *v)
{
    memset(e, 0, BFS_SAMPLE_RECORD);
    if (v->len == 0)
        return 0; /* no value: an all-zero record */
    uint64_t in_page = w->heap_size % w->page_size;
    /* A payload never straddles a page boundary when it fits in one page; a larger one
     * starts on a boundary. So a sample's bytes live in as few pages as possible. */
    if (in_page && (v->len > w->page_size - in_page)) {
        int rc = heap_append(w, NULL, (size_t)(w->page_size - in_page));
        if (rc)
            return rc;
    }
    bfs_st64(e, w->heap_size);
    bfs_st32(e + 8, (uint32_t)v->len);
    bfs_st32(e + 12, label);
    bfs_st16(e + 16, v->width);
    bfs_st16(e + 18, v->height);
    bfs_st16(e + 20, v->flags);
    bfs_st32(e + 24, (uint32_t)v->checksum);
    bfs_st32(e + 28, v->raw_size);
    return heap_append(w, v->data, v->len);
}

static int grow_samples(bfs_writer *w)
{
    if (w->count < w->sample_cap)
        return 0;
    uint64_t cap = w->sample_cap ? w->sample_cap * 2 : 1024;
    uint8_t *t = realloc(w->samples, cap * w->rec);
    if (!t)
        return -ENOMEM;
    w->samples = t, w->sample_cap = cap;
    return 0;
}

static uint32_t image_flag(uint16_t flags)
{
    uint16_t kind = flags & BFS_KIND_MASK;
    return kind == BFS_KIND_RAW     ? BFS_DS_HAS_RAW
           : kind == BFS_KIND_CODEC ? BFS_DS_HAS_CODEC
                                    : BFS_DS_HAS_JPEG;
}

int bfs_writer_add_record(bfs_writer *w, uint32_t label, const bfs_value_in *v)
{
    if (!w->records)
        return -EINVAL;
    for (uint32_t f = 0; f < w->nfields; f++) {
        const bfs_field *fd = &w->fields[f];
        if (v[f].len > UINT32_MAX || (v[f].len && !v[f].data))
            return -EINVAL;
        if (v[f].len == 0 &&
            (f == 0 || (fd->kind == BFS_FIELD_IMAGE && !(fd->flags & BFS_FIELDF_OPTIONAL))))
            return -EINVAL; /* a required image is missing */
        if (fd->kind == BFS_FIELD_IMAGE ? v[f].len && !image_ok(&v[f]) : !value_ok(fd, &v[f], v))
            return -EINVAL;
    }
    int rc = grow_samples(w);
    if (rc)
        return rc;
    uint8_t *rec = w->samples + w->count * w->rec;
    for (uint32_t f = 0; f < w->nfields; f++) {
        bfs_field *fd = &w->fields[f];
        if ((rc = place(w, rec + (size_t)BFS_SAMPLE_RECORD * f, f ? 0 : label, &v[f])))
            return rc;
        uint64_t count = fd->kind == BFS_FIELD_IMAGE ? v[f].len : v[f].raw_size;
        if (count > fd->max_count)
            fd->max_count = count;
        if (fd->kind == BFS_FIELD_IMAGE && v[f].len)
            w->flags |= image_flag(v[f].flags);
    }
    w->count++;
    return 0;
}

int bfs_writer_add(bfs_writer *w, const bfs_sample_in *s, const void *payload, size_t len)
{
    return bfs_writer_add_hashed(w, s, payload, len, bfs_xxh64(payload, len, 0));
}

int bfs_writer_add_hashed(bfs_writer *w, const bfs_sample_in *s, const void *payload, size_t len,
                          uint64_t checksum)
{
    if (len == 0 || len > UINT32_MAX || (s->flags & ~BFS_FLAGS_KNOWN))
        return -EINVAL;
    int tokens = (s->flags & BFS_KIND_MASK) == BFS_KIND_TOKENS;
    bfs_value_in v = {payload, len, checksum, s->width, s->height, s->flags, s->raw_size};
    if (tokens ? s->width || s->height || !s->raw_size ||
                     (s->flags & ~(BFS_KIND_MASK | BFS_F_TOKENS_U32)) ||
                     (uint64_t)s->raw_size * (s->flags & BFS_F_TOKENS_U32 ? 4 : 2) != len ||
                     (w->flags & (BFS_DS_HAS_JPEG | BFS_DS_HAS_RAW | BFS_DS_HAS_CODEC))
               : !image_ok(&v) || (w->flags & BFS_DS_HAS_TOKENS))
        return -EINVAL;
    if (w->records && w->nfields != 1)
        return -EINVAL; /* records of several fields: bfs_writer_add_record */
    if ((s->flags & BFS_KIND_MASK) == BFS_KIND_CODEC && !w->nfields) {
        /* PNG or WebP: version 3, one field, "images" (the same 32-byte records) */
        bfs_field f = {.name = "images", .kind = BFS_FIELD_IMAGE, .follows = BFS_FIELD_NONE};
        if (!(w->fields = calloc(1, sizeof *w->fields)))
            return -ENOMEM;
        *w->fields = f;
        w->nfields = 1;
    }
    int rc = grow_samples(w);
    if (rc)
        return rc;
    if ((rc = place(w, w->samples + w->count * w->rec, s->label, &v)))
        return rc;
    if (w->nfields && len > w->fields[0].max_count)
        w->fields[0].max_count = len;
    w->flags |= tokens ? BFS_DS_HAS_TOKENS : image_flag(s->flags);
    w->count++;
    return 0;
}

void bfs_writer_abort(bfs_writer *w)
{
    if (!w)
        return;
    if (w->fd >= 0)
        close(w->fd);
    if (w->created && w->tmp)
        unlink(w->tmp);
    for (uint32_t i = 0; i < w->nclasses; i++)
        free(w->classes[i]);
    free(w->classes);
    free(w->samples);
    free(w->fields);
    free(w->page_sums);
    free(w->buf);
    free(w->tmp);
    free(w->path);
    free(w);
}

/* Build the class table: entries (offset, length) then NUL-terminated names. */
static uint8_t *class_table(const bfs_writer *w, uint64_t *size)
{
    uint64_t n = (uint64_t)w->nclasses * 8;
    for (uint32_t i = 0; i < w->nclasses; i++)
        n += strlen(w->classes[i]) + 1;
    uint8_t *t = calloc(1, n);
    if (!t)
        return NULL;
    uint64_t pos = (uint64_t)w->nclasses * 8;
    for (uint32_t i = 0; i < w->nclasses; i++) {
        size_t len = strlen(w->classes[i]);
        bfs_st32(t + i * 8ULL, (uint32_t)pos);
        bfs_st32(t + i * 8ULL + 4, (uint32_t)len);
        memcpy(t + pos, w->classes[i], len + 1);
        pos += len + 1;
    }
    *size = n;
    return t;
}

/* Build the field table (version 3): count, descriptor size, then one 64-byte descriptor
 * per field. */
static uint8_t *field_table(const bfs_writer *w)
{
    uint8_t *t = calloc(1, 8 + (size_t)BFS_FIELD_DESC * w->nfields);
    if (!t)
        return NULL;
    bfs_st32(t, w->nfields);
    bfs_st32(t + 4, BFS_FIELD_DESC);
    for (uint32_t k = 0; k < w->nfields; k++) {
        const bfs_field *f = &w->fields[k];
        uint8_t *d = t + 8 + (size_t)BFS_FIELD_DESC * k;
        memcpy(d, f->name, strnlen(f->name, BFS_FIELD_NAME_MAX));
        d[32] = f->kind;
        d[33] = f->dtype;
        d[34] = f->flags;
        d[35] = f->rank;
        for (int j = 0; j < 3; j++)
            bfs_st32(d + 36 + 4 * j, f->shape[j]);
        bfs_st32(d + 48, f->follows);
        bfs_st64(d + 56, f->max_count);
    }
    return t;
}

int bfs_writer_finish(bfs_writer *w, int do_fsync, char *err, size_t errlen)
{
    int rc = 0;
    uint8_t *ct = NULL, *ft = NULL;
    if (w->count == 0 || w->nclasses == 0) {
        rc = bfs_errf(BFS_E_EMPTY, err, errlen, "no samples or no classes to write");
        goto out;
    }
    for (uint64_t i = 0; i < w->count; i++) {
        uint32_t label = bfs_ld32(w->samples + i * w->rec + 12);
        if (label >= w->nclasses) {
            rc = bfs_errf(BFS_E_LABEL, err, errlen,
                          "sample %llu has label %u but there are %u classes",
                          (unsigned long long)i, label, w->nclasses);
            goto out;
        }
    }
    if (w->heap_size % w->page_size && (rc = push_page_sum(w)))
        goto write_failed;
    uint64_t ct_size;
    if (!(ct = class_table(w, &ct_size))) {
        rc = -ENOMEM;
        goto write_failed;
    }
    /* Tables follow the heap, each 8-byte aligned. */
    static const uint8_t zeros[8];
    uint64_t heap_end = BFS_HEAP_ALIGN + w->heap_size;
    uint64_t st_off = (heap_end + 7) & ~7ULL;
    uint64_t st_size = w->count * w->rec;
    uint64_t ct_off = st_off + st_size;
    uint64_t ft_off = (ct_off + ct_size + 7) & ~7ULL; /* version 3: the field table */
    uint64_t ft_size = w->nfields ? 8 + (uint64_t)BFS_FIELD_DESC * w->nfields : 0;
    uint64_t pt_off = ft_off + ft_size;
    if (ft_size && !(ft = field_table(w))) {
        rc = -ENOMEM;
        goto write_failed;
    }
    uint64_t pt_size = w->pages_done * 8;
    uint64_t file_size = pt_off + pt_size;

    if ((rc = flush(w)) || (rc = bfs_write_all(w->fd, zeros, st_off - heap_end)) ||
        (rc = bfs_write_all(w->fd, w->samples, st_size)) ||
        (rc = bfs_write_all(w->fd, ct, ct_size)) ||
        (rc = bfs_write_all(w->fd, zeros, ft_off - ct_off - ct_size)) ||
        (ft_size && (rc = bfs_write_all(w->fd, ft, ft_size))) ||
        (rc = bfs_write_all(w->fd, w->page_sums, pt_size)))
        goto write_failed;

    bfs_xxh64_state ts;
    bfs_xxh64_init(&ts, 0);
    bfs_xxh64_update(&ts, w->samples, st_size);
    bfs_xxh64_update(&ts, ct, ct_size);
    if (ft_size)
        bfs_xxh64_update(&ts, ft, ft_size);
    bfs_xxh64_update(&ts, w->page_sums, pt_size);

    uint8_t h[BFS_HEADER_SIZE] = {0};
    memcpy(h, BFS_MAGIC, 8);
    /* version 2 or 3 only where needed: JPEG and raw image datasets stay byte-identical
     * to before */
    bfs_st32(h + 8, w->nfields ? 3u : w->flags & BFS_DS_HAS_TOKENS ? 2u : BFS_VERSION_MIN);
    bfs_st32(h + 12, BFS_HEADER_SIZE);
    bfs_st64(h + 16, w->count);
    bfs_st32(h + 24, w->nclasses);
    bfs_st32(h + 28, w->page_size);
    bfs_st64(h + 32, BFS_HEAP_ALIGN);
    bfs_st64(h + 40, w->heap_size);
    bfs_st64(h + 48, w->pages_done);
    bfs_st64(h + 56, st_off);
    bfs_st64(h + 64, ct_off);
    bfs_st64(h + 72, ct_size);
    bfs_st64(h + 80, pt_off);
    bfs_st64(h + 88, file_size);
    bfs_st64(h + 96, bfs_xxh64_digest(&ts));
    bfs_st32(h + 104, w->flags);
    bfs_st32(h + 108, w->rec);
    bfs_st64(h + 112, ft_size ? ft_off : 0);
    bfs_st64(h + 120, bfs_xxh64(h, 120, 0));
    if ((rc = bfs_pwrite_all(w->fd, h, sizeof h, 0)))
        goto write_failed;
    /* Readable by everyone the umask allows, like a file made with open(0666). */
    mode_t um = umask(0);
    umask(um);
    if (fchmod(w->fd, 0666 & ~um) < 0 || (do_fsync && fsync(w->fd) < 0)) {
        rc = -errno;
        goto write_failed;
    }
    if (close(w->fd) < 0) {
        w->fd = -1;
        rc = -errno;
        goto write_failed;
    }
    w->fd = -1;
    if (rename(w->tmp, w->path) < 0) {
        rc = -errno;
        goto write_failed;
    }
    free(w->tmp);
    w->tmp = NULL;  /* renamed: nothing to unlink */
    if (do_fsync) { /* make the rename durable too */
        char *d = strdup(w->path);
        int dfd = d ? open(dirname(d), O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
        free(d);
    }
    goto out;
write_failed:
    bfs_errf(rc, err, errlen, "writing %s: %s", w->tmp ? w->tmp : w->path, bfs_strerror(rc));
out:
    free(ct);
    free(ft);
    bfs_writer_abort(w);
    return rc;
}
