/*
 * pack.c — ImageFolder -> .bfs (see pack.h).
 *
 * Three phases: scan (sorted class directories, sorted recursive file lists), a parallel
 * transform (workers read each file, parse its JPEG header, optionally re-encode or
 * decode to raw pixels), and an ordered append by the calling thread into a bfs_writer.
 * Workers run at most WINDOW items ahead of the writer, which bounds memory to about
 * WINDOW payloads whatever the dataset size.
 *
 * Sharded sources (WebDataset, TFRecord) have no list to scan: the calling thread reads
 * the shards as streams (produce) and hands each sample's image bytes to the workers in
 * the window's input slots, between appends; p->n grows as it reads, p->eof ends it.
 *
 * The workers' transform is pack_transform.c, token sequences pack_tokens.c, the progress
 * bar's line and the temporary file's path pack_progress.c (pack_internal.h).
 */
#include "engine/dataset/pack_internal.h"
#include "engine/dataset/bfs.h"
#include "engine/dataset/tfrecord.h"
#include "engine/dataset/wds.h"
#include "engine/dataset/manifest.h"
#include "engine/dataset/record.h"
#include "base/err.h"
#include "engine/dataset/folder.h"
#include "base/io.h"
#include "base/clock.h"
#include "base/endian.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *bfs_pack_temp_path(void)
{
    return bfs_pack_temp_file[0] ? bfs_pack_temp_file : NULL;
}

/* ---- progress --------------------------------------------------------------------- */

static void progress(const pack *p, const bfs_pack_report *rep, uint64_t done, double t0, int final)
{
    const bfs_pack_opts *o = p->o;
    char count[64];
    if (p->items) { /* sharded: the bytes of the shards read tell how far */
        uint64_t at = p->done_bytes + (!p->reading                                 ? 0
                                       : p->shards.format == BFS_FORMAT_WEBDATASET ? p->wds.tar.off
                                       : p->shards.format == BFS_FORMAT_MANIFEST   ? p->man.off
                                                                                   : p->tfr.in_off);
        snprintf(count, sizeof count, "%llu samples", (unsigned long long)done);
        bfs_pack_progress_line(o, p->shards.total ? (double)at / p->shards.total : 1, count, at, t0,
                               final);
        return;
    }
    snprintf(count, sizeof count, "%llu/%llu files", (unsigned long long)done,
             (unsigned long long)rep->files);
    bfs_pack_progress_line(o, rep->files ? (double)done / rep->files : 1, count, rep->bytes_in, t0,
                           final);
}

/* ---- driver ----------------------------------------------------------------------- */

#define ITEM_NAME_MAX 4200

/* What messages call item i: its file, or "SRC[i]" for a .bfs source (written to buf,
 * ITEM_NAME_MAX bytes). */
static const char *item_name(const pack *p, size_t i, char *buf)
{
    if (p->items)
        return p->items[i % p->window].name;
    if (!p->in)
        return p->f.paths[i];
    snprintf(buf, ITEM_NAME_MAX, "%s[%zu]", p->src, i);
    return buf;
}

/* Why r's sample is skipped: its reason, with libjpeg-turbo's message when there is one
 * ("corrupt JPEG data (Premature end of JPEG file)"), into buf. */
static const char *skip_reason(const result *r, char *buf, size_t len)
{
    if (!r->why[0])
        return r->reason;
    snprintf(buf, len, "%s (%s)", r->reason, r->why);
    return buf;
}

static int add_skip(bfs_pack_report *rep, const char *path, const char *reason)
{
    bfs_pack_skip *v = realloc(rep->skipped, (rep->nskipped + 1) * sizeof *v);
    if (!v)
        return -ENOMEM;
    rep->skipped = v;
    v[rep->nskipped].path = strdup(path);
    v[rep->nskipped].reason = strdup(reason);
    if (!v[rep->nskipped].path || !v[rep->nskipped].reason) {
        free(v[rep->nskipped].path);
        free(v[rep->nskipped].reason);
        return -ENOMEM;
    }
    rep->nskipped++;
    return 0;
}

void bfs_pack_report_free(bfs_pack_report *rep)
{
    if (!rep)
        return;
    for (uint64_t i = 0; i < rep->nskipped; i++) {
        free(rep->skipped[i].path);
        free(rep->skipped[i].reason);
    }
    free(rep->skipped);
    rep->skipped = NULL;
    rep->nskipped = 0;
}

static ssize_t fd_read_cb(void *ctx, void *buf, size_t n)
{
    ssize_t k = read(*(int *)ctx, buf, n);
    return k < 0 ? -errno : k;
}

/* Open shard path and start its format's reader (WebDataset, TFRecord or manifest) on it,
 * read as a stream. Returns 0 or the open's error, naming the file. */
static int open_shard(pack *p, const char *path, char *err, size_t errlen)
{
    const bfs_pack_opts *o = p->o;
    struct stat st;
    int fd = bfs_open_regular(path, &st);
    if (fd < 0)
        return bfs_errf(fd, err, errlen, "%s: %s", path, bfs_strerror(fd));
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    p->fd = fd;
    bfs_shard_in in = {fd_read_cb, &p->fd};
    if (p->shards.format == BFS_FORMAT_WEBDATASET)
        bfs_wds_init(&p->wds, in, o->image_key, o->label_key);
    else if (p->shards.format == BFS_FORMAT_TFRECORD)
        bfs_tfr_init(&p->tfr, in, o->image_key, o->label_key);
    else
        bfs_manifest_init(&p->man, in, bfs_manifest_is_name(path) == 2);
    p->reading = 1;
    return 0;
}

/* The next sample of the sharded source into *s, opening the next shard when one ends.
 * 1, 0 (all read) or a negative error with err naming the shard. */
static int next_shard_sample(pack *p, bfs_shard_sample *s, char *err, size_t errlen)
{
    char why[1024];
    while (p->shard < p->shards.n) {
        const char *path = p->shards.paths[p->shard];
        int wds = p->shards.format == BFS_FORMAT_WEBDATASET;
        int rc;
        if (!p->reading && (rc = open_shard(p, path, err, errlen)))
            return rc;
        rc = wds ? bfs_wds_next(&p->wds, s, why, sizeof why)
                 : bfs_tfr_next_sample(&p->tfr, s, why, sizeof why);
        if (rc < 0)
            return bfs_errf(rc, err, errlen, "%s: %s", path, why);
        if (rc > 0)
            return 1;
        p->done_bytes += p->shards.sizes[p->shard]; /* with what follows a tar's end */
        p->ignored += wds ? p->wds.ignored : 0;
        bfs_tfr_close(&p->tfr);
        close(p->fd);
        p->fd = -1, p->reading = 0;
        p->shard++;
    }
    return 0;
}

/* Manifests: the image column's path (relative to the manifest's directory) read into its
 * member, as bytes. 0, 1 with *skip (in whybuf), or a resource error. */
static int manifest_image(pack *p, const char *manifest, const char **skip, char *whybuf,
                          size_t whycap)
{
    if (!p->image_col[0]) { /* the first sample tells which column */
        const char *names[] = {"image", "path", "file_name", "filepath", "filename"};
        if (p->o->image_key)
            snprintf(p->image_col, sizeof p->image_col, "%s", p->o->image_key);
        for (size_t i = 0; !p->image_col[0] && i < sizeof names / sizeof *names; i++)
            if (bfs_members_find(&p->mem, names[i], 0))
                snprintf(p->image_col, sizeof p->image_col, "%s", names[i]);
        if (!p->image_col[0])
            return 2; /* no image column: the caller fails the pack */
    }
    bfs_member *mb = (bfs_member *)bfs_members_find(&p->mem, p->image_col, 0);
    json_t *j = mb ? mb->json : NULL;
    if (!mb || json_is_null(j) || (json_is_string(j) && !json_string_length(j))) {
        snprintf(whybuf, whycap, "no image (column '%s' is missing or empty)", p->image_col);
        *skip = whybuf;
        return 1;
    }
    if (!json_is_string(j) || memchr(json_string_value(j), 0, json_string_length(j))) {
        snprintf(whybuf, whycap, "column '%s' is not a path (a string)", p->image_col);
        *skip = whybuf;
        return 1;
    }
    const char *rel = json_string_value(j), *slash = strrchr(manifest, '/');
    char path[8192];
    if (rel[0] == '/' || !slash)
        snprintf(path, sizeof path, "%s", rel);
    else
        snprintf(path, sizeof path, "%.*s/%s", (int)(slash - manifest), manifest, rel);
    uint8_t *data = NULL;
    size_t cap = 0, len = 0;
    int rc = bfs_read_file(path, &data, &cap, &len);
    if (rc) {
        free(data);
        if (bfs_err_is_resource(rc))
            return rc;
        snprintf(whybuf, whycap, "image '%.400s': %s", rel,
                 rc == BFS_E_NOT_REGULAR ? "not a regular file" : bfs_strerror(rc));
        *skip = whybuf;
        return 1;
    }
    json_decref(j);
    mb->json = NULL;
    free(mb->data); /* a CSV cell's text */
    mb->type = BFS_MEMBER_BYTES, mb->data = data, mb->len = len;
    return 0;
}

/* Fields mode: the next sample of the source as members (p->mem) into it: its name, and
 * its record (or image and label when the schema is the image alone), or why it is
 * skipped. The first sample that is not skipped makes the schema (and declares the
 * fields to the writer). 1, 0 (all read) or an error naming the shard. */
static int next_fields_item(pack *p, item *it, bfs_pack_report *rep, char *err, size_t errlen)
{
    const bfs_pack_opts *o = p->o;
    char why[1024], whybuf[1200];
    for (;;) {
        if (p->shard >= p->shards.n)
            return 0;
        const char *path = p->shards.paths[p->shard];
        int fmt = p->shards.format, notex = 0, rc;
        if (!p->reading && (rc = open_shard(p, path, err, errlen)))
            return rc;
        const char *skip = NULL, *key;
        uint64_t off = 0;
        if (fmt == BFS_FORMAT_WEBDATASET)
            rc = bfs_wds_next_members(&p->wds, &p->mem, &off, why, sizeof why), key = p->wds.key;
        else if (fmt == BFS_FORMAT_TFRECORD)
            rc = bfs_tfr_next_members(&p->tfr, &p->mem, &off, &notex, why, sizeof why),
            key = p->tfr.key;
        else
            rc = bfs_manifest_next(&p->man, &p->mem, &skip, whybuf, sizeof whybuf, why, sizeof why),
            key = p->man.key;
        if (rc < 0)
            return bfs_errf(rc, err, errlen, "%s: %s", path, why);
        if (rc == 0) {
            p->done_bytes += p->shards.sizes[p->shard];
            p->ignored += fmt == BFS_FORMAT_WEBDATASET ? p->wds.ignored : 0;
            bfs_tfr_close(&p->tfr);
            bfs_manifest_close(&p->man);
            close(p->fd);
            p->fd = -1, p->reading = 0;
            p->shard++;
            continue;
        }
        size_t need = strlen(path) + strlen(key) + 2;
        if (!(it->name = malloc(need)))
            return bfs_errf(-ENOMEM, err, errlen, "out of memory");
        snprintf(it->name, need, "%s:%s", path, key);
        if (notex)
            skip = "not a tf.train.Example";
        if (!skip && fmt == BFS_FORMAT_MANIFEST) {
            rc = manifest_image(p, path, &skip, whybuf, sizeof whybuf);
            if (rc == 2)
                return bfs_errf(-EINVAL, err, errlen,
                                "%s: no image column (image, path, file_name, filepath or "
                                "filename) in the first sample: name it with --image-key",
                                it->name);
            if (rc < 0)
                return bfs_errf(rc, err, errlen, "%s: %s", it->name, bfs_strerror(rc));
        }
        if (!skip && !p->schema_ready) {
            int src = fmt == BFS_FORMAT_WEBDATASET ? BFS_SRC_WDS
                      : fmt == BFS_FORMAT_TFRECORD ? BFS_SRC_TFRECORD
                                                   : BFS_SRC_MANIFEST;
            const char *ik = fmt == BFS_FORMAT_MANIFEST ? p->image_col : o->image_key;
            if ((rc = bfs_schema_make(&p->schema, src, o->fields, o->nfields, &p->mem, ik,
                                      o->label_key, why, sizeof why)))
                return bfs_errf(rc, err, errlen, "%s (the first sample): %s", it->name, why);
            p->schema_ready = 1;
            rep->nfields = p->schema.n;
            size_t k = 0;
            for (uint32_t f = 0; f < p->schema.n && k < sizeof rep->fields; f++)
                k += (size_t)snprintf(
                    rep->fields + k, sizeof rep->fields - k, "%s%s %s%s%s%s", f ? ", " : "",
                    p->schema.f[f].name, bfs_field_kind_name(p->schema.f[f].kind),
                    p->schema.f[f].kind == BFS_FIELD_ARRAY ? " " : "",
                    p->schema.f[f].kind == BFS_FIELD_ARRAY ? bfs_fdt_name(p->schema.f[f].dtype)
                                                           : "",
                    p->schema.f[f].flags & BFS_FIELDF_OPTIONAL ? " (optional)" : "");
            if (p->schema.has_label && k < sizeof rep->fields)
                snprintf(rep->fields + k, sizeof rep->fields - k, "; label from %s%s%s",
                         p->schema.label.member, p->schema.label.key[0] ? ":" : "",
                         p->schema.label.key);
            if (p->schema.n > 1 &&
                (rc = bfs_writer_set_fields(p->w, p->schema.f, p->schema.n, why, sizeof why)))
                return bfs_errf(rc, err, errlen, "%s", why);
        }
        if (!skip) {
            rc = bfs_schema_convert(&p->schema, &p->mem, &it->rec, whybuf, sizeof whybuf, &skip);
            if (rc < 0)
                return bfs_errf(rc, err, errlen, "%s: out of memory", it->name);
            if (!rc && it->rec.extra) {
                p->extra += it->rec.extra;
                if (!p->extra_name[0])
                    for (size_t i = 0; i < p->mem.n && !p->extra_name[0]; i++) {
                        int used = 0;
                        for (uint32_t f = 0; f < p->schema.n && !used; f++)
                            used = !strcasecmp(p->mem.v[i].name, p->schema.from[f].member);
                        if (!used && !(p->schema.has_label &&
                                       !strcasecmp(p->mem.v[i].name, p->schema.label.member)))
                            snprintf(p->extra_name, sizeof p->extra_name, "%s", p->mem.v[i].name);
                    }
            }
        }
        if (skip) {
            if (skip == whybuf && !(skip = it->skip_owned = strdup(whybuf)))
                return bfs_errf(-ENOMEM, err, errlen, "out of memory");
            it->skip = skip;
        } else if (p->schema.n > 1)
            it->has_rec = 1;
        else { /* the image alone: written as before (version 1) */
            it->data = it->rec.v[0].data, it->len = it->rec.v[0].len;
            it->label = it->rec.label;
            it->rec.v[0].data = NULL;
            bfs_record_free(&it->rec);
        }
        (void)off;
        bfs_members_clear(&p->mem);
        return 1;
    }
}

/* Sharded sources: read samples into the free input slots, up to a window ahead of the
 * writer (which is this thread: p->written is stable here), or to the end. */
static int produce(pack *p, bfs_pack_report *rep, char *err, size_t errlen)
{
    while (!p->eof && p->n < p->written + p->window) {
        bfs_shard_sample s;
        item *it = &p->items[p->n % p->window];
        int rc;
        if (p->fields_mode) {
            it->skip = NULL, it->data = NULL, it->len = 0, it->label = 0;
            rc = next_fields_item(p, it, rep, err, errlen);
        } else
            rc = next_shard_sample(p, &s, err, errlen);
        if (rc < 0)
            return rc;
        if (rc > 0 && !p->fields_mode) {
            const char *path = p->shards.paths[p->shard];
            size_t need = strlen(path) + strlen(s.key) + 2;
            it->name = malloc(need);
            if (!it->name) {
                free(s.image);
                return bfs_errf(-ENOMEM, err, errlen, "out of memory");
            }
            snprintf(it->name, need, "%s:%s", path, s.key);
            it->data = s.image, it->len = s.image_len;
            it->label = (uint32_t)s.label;
            it->skip = s.skip;
        }
        pthread_mutex_lock(&p->lock);
        if (rc > 0)
            p->n++;
        else
            p->eof = 1;
        pthread_cond_broadcast(&p->space);
        pthread_mutex_unlock(&p->lock);
    }
    return 0;
}

/* Count a sample of label l (growing per_class for sharded sources). */
static int count_label(pack *p, uint32_t l)
{
    if (l >= p->nper) {
        uint32_t n = p->nper ? p->nper : 64;
        while (n <= l)
            n *= 2;
        uint64_t *v = realloc(p->per_class, n * sizeof *v);
        if (!v)
            return -ENOMEM;
        memset(v + p->nper, 0, (n - p->nper) * sizeof *v);
        p->per_class = v, p->nper = n;
    }
    p->per_class[l]++;
    return 0;
}

static int write_all_items(pack *p, bfs_writer *w, bfs_pack_report *rep, atomic_int *cancel,
                           double t0, char *err, size_t errlen)
{
    const bfs_pack_opts *o = p->o;
    int rc = 0;
    char name[ITEM_NAME_MAX];
    for (size_t i = 0;; i++) {
        if (p->items && (rc = produce(p, rep, err, errlen)))
            return rc;
        if (i >= p->n) /* eof: produce read to the end */
            break;
        pthread_mutex_lock(&p->lock);
        while (!p->slots[i % p->window].ready && !(cancel && *cancel))
            pthread_cond_wait(&p->ready, &p->lock);
        result r = p->slots[i % p->window];
        pthread_mutex_unlock(&p->lock);
        if (cancel && *cancel)
            return bfs_errf(-ECANCELED, err, errlen, "interrupted");
        if (r.err) {
            char why[256];
            const char *reason = skip_reason(&r, why, sizeof why);
            if (bfs_err_is_transient(r.err)) /* not the file's fault: skipping would lose it */
                rc = bfs_errf(r.err, err, errlen, "%s: %s", item_name(p, i, name), reason);
            else if (o->strict)
                rc = bfs_errf(r.err, err, errlen, "%s: %s (--strict)", item_name(p, i, name),
                              reason);
            else
                rc = add_skip(rep, item_name(p, i, name), reason);
        } else {
            if (r.vin) {
                rc = bfs_writer_add_record(w, r.rec.label, r.vin);
                for (uint32_t k = 0; k < p->schema.n; k++)
                    r.len += r.rec.v[k].len;
            } else
                rc = bfs_writer_add_hashed(w, &r.s, r.data, r.len, r.hash);
            if (rc)
                bfs_errf(rc, err, errlen, "writing %s: %s", bfs_writer_temp_path(w),
                         bfs_strerror(rc));
            rep->packed++;
            rep->reencoded += (uint64_t)r.reencoded;
            rep->restarted += (uint64_t)r.restarted;
            if ((r.s.flags & BFS_KIND_MASK) == BFS_KIND_TOKENS) { /* a token .bfs re-packed */
                rep->tokens += r.s.raw_size;
                rep->longest = r.s.raw_size > rep->longest ? r.s.raw_size : rep->longest;
            }
            rep->bytes_out += r.len;
            if (!rc && count_label(p, r.s.label))
                rc = bfs_errf(-ENOMEM, err, errlen, "out of memory");
        }
        rep->bytes_in += r.in_bytes;
        free(r.data);
        bfs_record_free(&r.rec);
        free(r.vin);
        pthread_mutex_lock(&p->lock);
        p->slots[i % p->window].ready = 0;
        p->written = i + 1;
        pthread_cond_broadcast(&p->space);
        pthread_mutex_unlock(&p->lock);
        if (p->items) {
            item *it = &p->items[i % p->window];
            free(it->name);
            free(it->skip_owned);
            it->name = it->skip_owned = NULL;
        }
        if (rc)
            return rc;
        progress(p, rep, i + 1, t0, 0);
    }
    return 0;
}

/* A signal may set *cancel while the writer waits on a condition variable; this thread
 * wakes it up periodically so the cancel is seen. */
typedef struct waker {
    pack *p;
    atomic_int *cancel;
    int done; /* guarded by p->lock */
} waker;

static void *waker_main(void *arg)
{
    waker *k = arg;
    for (;;) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&k->p->lock);
        int done = k->done;
        if (*k->cancel) {
            k->p->stop = 1;
            pthread_cond_broadcast(&k->p->ready);
            pthread_cond_broadcast(&k->p->space);
        }
        pthread_mutex_unlock(&k->p->lock);
        if (done)
            return NULL;
    }
}

/* A .bfs file as the source: its classes; its samples, in order, are read by the
 * workers (transform_sample) and named "SRC[i]" in messages (item_name). */
static int open_bfs_source(const char *src, pack *p, char *err, size_t errlen)
{
    char why[512] = "";
    int rc = bfs_open(src, &p->in, why, sizeof why);
    if (rc)
        return bfs_errf(rc, err, errlen,
                        "SRC is a file, so it must be a .bfs dataset to re-pack, and: %s", why);
    if ((rc = bfs_verify_tables(p->in))) /* labels are in the tables: never re-pack bad ones */
        return bfs_errf(rc, err, errlen, "%s: %s", src, bfs_strerror(rc));
    const bfs_info *info = bfs_get_info(p->in);
    bfs_folder *f = &p->f;
    uint32_t nc = info->class_count;
    if (!(f->classes = calloc(nc ? nc : 1, sizeof *f->classes)))
        return bfs_errf(-ENOMEM, err, errlen, "out of memory");
    f->class_cap = nc;
    for (uint32_t c = 0; c < nc; c++) {
        const char *name;
        size_t len;
        if ((rc = bfs_class_name(p->in, c, &name, &len)))
            return bfs_errf(rc, err, errlen, "%s: class %u: %s", src, c, bfs_strerror(rc));
        if (!(f->classes[c] = strndup(name, len)))
            return bfs_errf(-ENOMEM, err, errlen, "out of memory");
        f->nclasses = c + 1;
    }
    p->n = info->sample_count;
    if (p->n == 0)
        return bfs_errf(BFS_E_EMPTY, err, errlen, "%s: no samples", src);
    return 0;
}

/* Manifest sources: each a regular file, sorted by path as shards are. */
static int manifest_list(const char *const *srcs, size_t nsrcs, bfs_shard_list *l, char *err,
                         size_t errlen)
{
    memset(l, 0, sizeof *l);
    l->format = BFS_FORMAT_MANIFEST;
    if (!(l->paths = calloc(nsrcs, sizeof *l->paths)) ||
        !(l->sizes = calloc(nsrcs, sizeof *l->sizes)))
        return bfs_errf(-ENOMEM, err, errlen, "out of memory");
    for (size_t i = 0; i < nsrcs; i++) {
        struct stat st;
        if (stat(srcs[i], &st)) {
            int e = -errno;
            return bfs_errf(e, err, errlen, "%s: %s", srcs[i], bfs_strerror(e));
        }
        if (!S_ISREG(st.st_mode))
            return bfs_errf(-EINVAL, err, errlen, "%s: a manifest is a regular file", srcs[i]);
        if (!(l->paths[i] = strdup(srcs[i])))
            return bfs_errf(-ENOMEM, err, errlen, "out of memory");
        l->n = i + 1;
        l->sizes[i] = (uint64_t)st.st_size;
        l->total += (uint64_t)st.st_size;
    }
    for (size_t i = 1; i < l->n; i++)
        for (size_t j = i; j > 0 && strcmp(l->paths[j - 1], l->paths[j]) > 0; j--) {
            char *t = l->paths[j];
            uint64_t z = l->sizes[j];
            l->paths[j] = l->paths[j - 1], l->sizes[j] = l->sizes[j - 1];
            l->paths[j - 1] = t, l->sizes[j - 1] = z;
        }
    return 0;
}

/* Sharded sources, once packed: the class table ("0".."max label"), notes on labels that
 * no sample has and on tar members outside any sample. */
static int finish_shards(pack *p, bfs_writer *w, bfs_pack_report *rep, char *err, size_t errlen)
{
    uint32_t classes = 0, empty = 0;
    for (uint32_t l = 0; l < p->nper; l++)
        if (p->per_class[l])
            classes = l + 1;
    for (uint32_t l = 0; l < classes; l++) {
        char name[16];
        snprintf(name, sizeof name, "%u", l);
        empty += !p->per_class[l];
        int rc = bfs_writer_add_class(w, name);
        if (rc)
            return bfs_errf(rc, err, errlen, "class '%s': %s", name, bfs_strerror(rc));
    }
    rep->classes = classes;
    rep->ignored = p->ignored;
    rep->extra = p->extra;
    size_t k = strlen(rep->notes);
    if (empty)
        k += (size_t)snprintf(rep->notes + k, sizeof rep->notes - k,
                              "note: labels run 0..%u, and %u of them have no sample: their "
                              "classes are empty\n",
                              classes - 1, empty);
    if (p->extra && k < sizeof rep->notes)
        k += (size_t)snprintf(rep->notes + k, sizeof rep->notes - k,
                              "note: %llu members (the first: '%s') are not among the fields the "
                              "first sample set, and were not kept (--field keeps them)\n",
                              (unsigned long long)p->extra, p->extra_name);
    if (p->ignored && k < sizeof rep->notes)
        snprintf(rep->notes + k, sizeof rep->notes - k,
                 "note: %llu tar members have no WebDataset key (no '.' in their name's last "
                 "part) and are in no sample\n",
                 (unsigned long long)p->ignored);
    return 0;
}

int bfs_pack(const char *src, const char *out, const bfs_pack_opts *o, bfs_pack_report *rep,
             atomic_int *cancel, char *err, size_t errlen)
{
    return bfs_pack_sources(&src, 1, out, o, rep, cancel, err, errlen);
}

int bfs_pack_sources(const char *const *srcs, size_t nsrcs, const char *out, const bfs_pack_opts *o,
                     bfs_pack_report *rep, atomic_int *cancel, char *err, size_t errlen)
{
    memset(rep, 0, sizeof *rep);
    if (nsrcs == 0)
        return bfs_errf(-EINVAL, err, errlen, "no source");
    const char *src = srcs[0];
    int tokens =
        o->tokens || o->token_format == BFS_TOKENS_NPY || o->token_format == BFS_TOKENS_MEGATRON;
    if (tokens && (nsrcs > 1 || o->format != BFS_FORMAT_AUTO))
        return bfs_errf(-EINVAL, err, errlen,
                        "token ids are packed from one source (not shards, not several)");
    if (o->token_format == BFS_TOKENS_NPY || o->token_format == BFS_TOKENS_MEGATRON)
        return bfs_pack_tokens_files(src, out, o, rep, cancel, err, errlen);
    if (o->tokens)
        return bfs_pack_tokens_flat(src, out, o, rep, cancel, err, errlen);
    if (nsrcs == 1 && o->format == BFS_FORMAT_AUTO) { /* a .bfs of several fields */
        bfs_reader *r;
        struct stat sb;
        int many = stat(src, &sb) == 0 && S_ISREG(sb.st_mode) && bfs_open(src, &r, NULL, 0) == 0;
        if (many) {
            many = bfs_field_count(r) > 1;
            bfs_close(r);
        }
        if (many)
            return bfs_pack_copy_fields(src, out, o, rep, cancel, err, errlen);
    }
    if (o->max_side < 0 || o->max_side > 65535 || o->quality < 0 || o->quality > 100)
        return bfs_errf(-EINVAL, err, errlen,
                        "bad options: max-side %d (0..65535), quality %d (1..100)", o->max_side,
                        o->quality);
    if (o->max_side > 0 && !o->resize)
        return bfs_errf(-EINVAL, err, errlen,
                        "bad options: max-side %d without a resampler (bfs_pack_opts.resize: the "
                        "engine's bfs_engine_pack_resize)",
                        o->max_side);
    double t0 = bfs_mono_s();
    pack p = {.o = o, .src = src, .fd = -1};
    pthread_mutex_init(&p.lock, NULL);
    pthread_cond_init(&p.space, NULL);
    pthread_cond_init(&p.ready, NULL);
    bfs_writer *w = NULL;
    pthread_t *th = NULL;
    int nth = 0, rc;
    waker wk = {&p, cancel, 0};
    pthread_t waker_th;
    int have_waker = 0;
    int jobs = o->jobs > 0 ? o->jobs : (int)sysconf(_SC_NPROCESSORS_ONLN);
    jobs = jobs < 1 ? 1 : jobs > 256 ? 256 : jobs;
    p.window = (size_t)jobs * 4 + 16;

    struct stat st;
    int manifests = o->format == BFS_FORMAT_MANIFEST;
    if (o->format == BFS_FORMAT_AUTO) { /* every source named .jsonl or .csv */
        manifests = 1;
        for (size_t i = 0; i < nsrcs; i++)
            manifests &= bfs_manifest_is_name(srcs[i]) != 0;
    }
    rc = manifests ? manifest_list(srcs, nsrcs, &p.shards, err, errlen)
                   : bfs_shard_list_make(srcs, nsrcs, o->format, &p.shards, err, errlen);
    if (rc == 0) {
        p.fields_mode = manifests || !o->image_only;
        if (manifests && o->image_only)
            rc = bfs_errf(-EINVAL, err, errlen,
                          "--image-only applies to WebDataset and TFRecord shards (a manifest "
                          "names its fields)");
        else if (!p.fields_mode && o->nfields)
            rc = bfs_errf(-EINVAL, err, errlen, "--field and --image-only exclude each other");
    }
    if (rc == 0) {
        rep->format = p.shards.format;
        rep->shards = p.shards.n;
        if (!(p.items = calloc(p.window, sizeof *p.items)))
            rc = bfs_errf(-ENOMEM, err, errlen, "out of memory");
    } else if (rc == 1) {
        p.eof = 1;
        if (o->nfields)
            rc = bfs_errf(-EINVAL, err, errlen,
                          "%s: not WebDataset or TFRecord shards or a manifest, so --field does "
                          "not apply",
                          src);
        else if (o->image_key || o->label_key)
            rc = bfs_errf(-EINVAL, err, errlen,
                          "%s: not WebDataset or TFRecord shards, so the image and label keys "
                          "do not apply",
                          src);
        else if (stat(src, &st) == 0 && S_ISREG(st.st_mode))
            rc = open_bfs_source(src, &p, err, errlen);
        else if (!(rc = bfs_folder_scan(src, &p.f, err, errlen))) {
            p.n = p.f.n;
            rep->ignored = p.f.ignored;
            bfs_folder_notes(&p.f, rep->notes, sizeof rep->notes);
        }
    }
    if (rc)
        goto out;
    rep->files = p.n;
    rep->classes = p.f.nclasses;
    if ((rc = bfs_writer_create(out, o->page_size, &w, err, errlen)))
        goto out;
    snprintf(bfs_pack_temp_file, sizeof bfs_pack_temp_file, "%s", bfs_writer_temp_path(w));
    p.w = w;
    for (uint32_t c = 0; c < p.f.nclasses; c++)
        if ((rc = bfs_writer_add_class(w, p.f.classes[c]))) {
            bfs_errf(rc, err, errlen, "class name '%s': %s", p.f.classes[c], bfs_strerror(rc));
            goto out;
        }
    p.slots = calloc(p.window, sizeof *p.slots);
    p.nper = p.f.nclasses;
    p.per_class = calloc(p.nper ? p.nper : 1, sizeof *p.per_class);
    th = calloc((size_t)jobs, sizeof *th);
    if (!p.slots || !p.per_class || !th) {
        rc = bfs_errf(-ENOMEM, err, errlen, "out of memory");
        goto out;
    }
    worker_arg wa = {&p, cancel};
    for (; nth < jobs; nth++)
        if ((rc = -pthread_create(&th[nth], NULL, bfs_pack_worker, &wa))) {
            bfs_errf(rc, err, errlen, "cannot start worker threads: %s", strerror(-rc));
            goto out;
        }
    if (cancel && pthread_create(&waker_th, NULL, waker_main, &wk) == 0)
        have_waker = 1;
    rc = write_all_items(&p, w, rep, cancel, t0, err, errlen);
    rep->files = p.n;
    progress(&p, rep, rep->packed + rep->nskipped, t0, 1);
    if (!rc && p.items) {
        if (!rep->packed)
            rc = bfs_errf(BFS_E_EMPTY, err, errlen,
                          "no sample could be packed (%llu samples in %zu %s%s, all skipped)",
                          (unsigned long long)p.n, p.shards.n,
                          p.shards.format == BFS_FORMAT_MANIFEST ? "manifest" : "shard",
                          p.shards.n == 1 ? "" : "s");
        else
            rc = finish_shards(&p, w, rep, err, errlen);
    } else if (!rc)
        for (uint32_t c = 0; c < p.f.nclasses; c++)
            if (p.per_class[c] == 0) {
                rc = bfs_errf(BFS_E_EMPTY, err, errlen,
                              "class '%s' has no usable images (all its files were skipped)",
                              p.f.classes[c]);
                break;
            }
out:
    pthread_mutex_lock(&p.lock);
    p.stop = 1;
    wk.done = 1;
    pthread_cond_broadcast(&p.space);
    pthread_mutex_unlock(&p.lock);
    for (int i = 0; i < nth; i++)
        pthread_join(th[i], NULL);
    if (have_waker)
        pthread_join(waker_th, NULL);
    if (p.slots)
        for (size_t i = 0; i < p.window; i++)
            if (p.slots[i].ready) {
                free(p.slots[i].data);
                bfs_record_free(&p.slots[i].rec);
                free(p.slots[i].vin);
            }
    if (p.items)
        for (size_t i = 0; i < p.window; i++) {
            free(p.items[i].data);
            free(p.items[i].name);
            free(p.items[i].skip_owned);
            bfs_record_free(&p.items[i].rec);
        }
    if (!rc && w) {
        rc = bfs_writer_finish(w, o->fsync, err, errlen);
        w = NULL;
    }
    bfs_writer_abort(w); /* after a failure: removes the temporary file */
    bfs_pack_temp_file[0] = 0;
    rep->seconds = bfs_mono_s() - t0;
    if (p.fd >= 0)
        close(p.fd);
    bfs_tfr_close(&p.tfr);
    bfs_manifest_close(&p.man);
    bfs_members_free(&p.mem);
    bfs_shard_list_free(&p.shards);
    free(p.items);
    bfs_folder_free(&p.f);
    bfs_close(p.in);
    free(p.slots);
    free(p.per_class);
    free(th);
    pthread_mutex_destroy(&p.lock);
    pthread_cond_destroy(&p.space);
    pthread_cond_destroy(&p.ready);
    return rc;
}
