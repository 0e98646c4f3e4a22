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
    uint8_t *samples; /* sample table, BFS_SAMPLE_RECORD each */
    uint64_t count, sample_cap;
    char **classes;
    uint32_t nclasses, class_cap;
    uint32_t flags;
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
    if (tokens ? s->width || s->height || !s->raw_size ||
                     (s->flags & ~(BFS_KIND_MASK | BFS_F_TOKENS_U32)) ||
                     (uint64_t)s->raw_size * (s->flags & BFS_F_TOKENS_U32 ? 4 : 2) != len ||
                     (w->flags & (BFS_DS_HAS_JPEG | BFS_DS_HAS_RAW))
               : s->width == 0 || s->height == 0 || (s->flags & BFS_KIND_MASK) > BFS_KIND_RAW ||
                     (s->flags & BFS_F_TOKENS_U32) || (w->flags & BFS_DS_HAS_TOKENS))
        return -EINVAL;
    uint64_t in_page = w->heap_size % w->page_size;
    /* A payload never straddles a page boundary when it fits in one page; a larger one
     * starts on a boundary. So a sample's bytes live in as few pages as possible. */
    if (in_page && (len > w->page_size - in_page)) {
        int rc = heap_append(w, NULL, (size_t)(w->page_size - in_page));
        if (rc)
            return rc;
    }
    if (w->count == w->sample_cap) {
        uint64_t cap = w->sample_cap ? w->sample_cap * 2 : 1024;
        uint8_t *t = realloc(w->samples, cap * BFS_SAMPLE_RECORD);
        if (!t)
            return -ENOMEM;
        w->samples = t, w->sample_cap = cap;
    }
    uint8_t *e = w->samples + w->count * BFS_SAMPLE_RECORD;
    memset(e, 0, BFS_SAMPLE_RECORD);
    bfs_st64(e, w->heap_size);
    bfs_st32(e + 8, (uint32_t)len);
    bfs_st32(e + 12, s->label);
    bfs_st16(e + 16, s->width);
    bfs_st16(e + 18, s->height);
    bfs_st16(e + 20, s->flags);
    bfs_st32(e + 24, (uint32_t)checksum);
    bfs_st32(e + 28, s->raw_size);
    int rc = heap_append(w, payload, len);
    if (rc)
        return rc;
    w->flags |= tokens                                       ? BFS_DS_HAS_TOKENS
                : (s->flags & BFS_KIND_MASK) == BFS_KIND_RAW ? BFS_DS_HAS_RAW
                                                             : BFS_DS_HAS_JPEG;
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

int bfs_writer_finish(bfs_writer *w, int do_fsync, char *err, size_t errlen)
{
    int rc = 0;
    uint8_t *ct = NULL;
    if (w->count == 0 || w->nclasses == 0) {
        rc = bfs_errf(BFS_E_EMPTY, err, errlen, "no samples or no classes to write");
        goto out;
    }
    for (uint64_t i = 0; i < w->count; i++) {
        uint32_t label;
        memcpy(&label, w->samples + i * BFS_SAMPLE_RECORD + 12, 4);
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
    uint64_t st_size = w->count * BFS_SAMPLE_RECORD;
    uint64_t ct_off = st_off + st_size;
    uint64_t pt_off = (ct_off + ct_size + 7) & ~7ULL;
    uint64_t pt_size = w->pages_done * 8;
    uint64_t file_size = pt_off + pt_size;

    if ((rc = flush(w)) || (rc = bfs_write_all(w->fd, zeros, st_off - heap_end)) ||
        (rc = bfs_write_all(w->fd, w->samples, st_size)) ||
        (rc = bfs_write_all(w->fd, ct, ct_size)) ||
        (rc = bfs_write_all(w->fd, zeros, pt_off - ct_off - ct_size)) ||
        (rc = bfs_write_all(w->fd, w->page_sums, pt_size)))
        goto write_failed;

    bfs_xxh64_state ts;
    bfs_xxh64_init(&ts, 0);
    bfs_xxh64_update(&ts, w->samples, st_size);
    bfs_xxh64_update(&ts, ct, ct_size);
    bfs_xxh64_update(&ts, w->page_sums, pt_size);

    uint8_t h[BFS_HEADER_SIZE] = {0};
    memcpy(h, BFS_MAGIC, 8);
    /* version 2 only where needed: image datasets stay byte-identical to before */
    bfs_st32(h + 8, w->flags & BFS_DS_HAS_TOKENS ? 2u : BFS_VERSION_MIN);
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
    bfs_st32(h + 108, BFS_SAMPLE_RECORD);
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
    bfs_writer_abort(w);
    return rc;
}
