/*
 * tokenize.c — version 3 .bfs files copied value by value (see pack.h): a re-pack of a
 * multi-field dataset (bfs_pack_copy_fields: every value verified and kept, a sample with
 * a corrupt one left out), and captions tokenized at pack time (bfs_pack_tokenize: a
 * tokens field added, computed from one of its text fields by a tokenizer callback;
 * mkbatchfs passes SentencePiece's).
 *
 * Why at pack time and not in the daemon: a caption's ids are a pure function of its text
 * and the model, so computing them once here costs what one epoch of a daemon tokenizer
 * would, and every epoch, mount and worker after that reads them like any field; the
 * model's identity becomes part of the dataset's (its header checksum covers the ids),
 * so a changed model can never mix with batches cached under the old one; and the
 * tokenizer library (C++) stays out of the daemon.
 */
#include "engine/dataset/pack.h"
#include "engine/dataset/bfs.h"
#include "base/err.h"
#include "base/utf8.h"
#include "base/hash.h"
#include "base/clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q)
        return -ENOMEM;
    *p = q, *cap = c;
    return 0;
}

static void tok_progress(const bfs_pack_opts *o, uint64_t done, uint64_t total, uint64_t tokens,
                         double t0, int final)
{
    static double last;
    double t = bfs_mono_ns() / 1e9;
    if (!o->progress || !o->progress_out || (!final && t - last < 0.1))
        return;
    last = t;
    double el = t - t0, frac = total ? (double)done / total : 1;
    fprintf(o->progress_out,
            "\r%3.0f%% %llu/%llu samples  %llu tokens  %.0f samples/s  ETA %.0fs   %s", 100 * frac,
            (unsigned long long)done, (unsigned long long)total, (unsigned long long)tokens,
            el > 0 ? done / el : 0, frac > 0 && frac < 1 ? el / frac - el : 0, final ? "\n" : "");
    fflush(o->progress_out);
}

/* Sample i's nf values read (checksums verified) into bufs (grown as needed) and described
 * in v for bfs_writer_add_record; its label. Returns 0 or the error of value *bad. */
static int read_record(bfs_reader *r, uint64_t i, uint32_t nf, uint8_t **bufs, size_t *caps,
                       bfs_value_in *v, uint32_t *label, uint32_t *bad)
{
    for (uint32_t f = 0; f < nf; f++) {
        bfs_sample s;
        int rc = bfs_get_value(r, i, f, &s);
        if (!rc && !(rc = grow((void **)&bufs[f], &caps[f], s.length + 1, 1)))
            rc = bfs_read_value(r, i, f, BFS_VERIFY_SAMPLE, &s, bufs[f], caps[f]);
        if (rc) {
            *bad = f;
            return rc;
        }
        if (f == 0)
            *label = s.label;
        v[f] = (bfs_value_in){.data = s.length ? bufs[f] : NULL,
                              .len = s.length,
                              .checksum = s.length ? bfs_xxh64(bufs[f], s.length, 0) : 0,
                              .width = s.width,
                              .height = s.height,
                              .flags = s.flags,
                              .raw_size = s.raw_size};
    }
    return 0;
}

/* A writer for out with r's page size (or o's), fields (nf of fs) and classes. */
static int start_copy(bfs_reader *r, const char *src, const char *out, const bfs_pack_opts *o,
                      const bfs_field *fs, uint32_t nf, bfs_writer **w, char *err, size_t errlen)
{
    const bfs_info *in = bfs_get_info(r);
    int rc = bfs_writer_create(out, o->page_size ? o->page_size : in->page_size, w, err, errlen);
    if (rc || (rc = bfs_writer_set_fields(*w, fs, nf, err, errlen)))
        return rc;
    for (uint32_t c = 0; c < in->class_count; c++) {
        const char *cn;
        if ((rc = bfs_class_name(r, c, &cn, NULL)) || (rc = bfs_writer_add_class(*w, cn)))
            return bfs_errf(rc, err, errlen, "%s: class %u: %s", src, c, bfs_strerror(rc));
    }
    return 0;
}

int bfs_pack_copy_fields(const char *src, const char *out, const bfs_pack_opts *o,
                         bfs_pack_report *rep, atomic_int *cancel, char *err, size_t errlen)
{
    memset(rep, 0, sizeof *rep);
    double t0 = bfs_mono_ns() / 1e9;
    bfs_reader *r = NULL;
    bfs_writer *w = NULL;
    uint8_t *bufs[BFS_FIELD_MAX] = {0};
    size_t caps[BFS_FIELD_MAX] = {0};
    bfs_field fs[BFS_FIELD_MAX];
    size_t skip_cap = 0;
    int rc = bfs_open(src, &r, err, errlen);
    if (rc)
        return rc;
    const bfs_info *in = bfs_get_info(r);
    uint32_t nf = bfs_field_count(r);
    if (o->max_side || o->raw) {
        rc = bfs_errf(-EINVAL, err, errlen,
                      "%s: a dataset of %u fields is re-packed value by value, as it is: "
                      "--max-side and --raw apply to ImageFolders, shards and one-image .bfs "
                      "files",
                      src, nf);
        goto out;
    }
    if ((rc = bfs_verify_tables(r))) {
        bfs_errf(rc, err, errlen, "%s: %s", src, bfs_strerror(rc));
        goto out;
    }
    for (uint32_t f = 0; f < nf; f++)
        fs[f] = *bfs_get_field(r, f);
    if ((rc = start_copy(r, src, out, o, fs, nf, &w, err, errlen)))
        goto out;
    rep->files = in->sample_count;
    rep->classes = in->class_count;
    for (uint64_t i = 0; i < in->sample_count; i++) {
        if (cancel && atomic_load(cancel)) {
            rc = bfs_errf(-ECANCELED, err, errlen, "interrupted");
            goto out;
        }
        bfs_value_in v[BFS_FIELD_MAX];
        uint32_t label = 0, bad;
        if ((rc = read_record(r, i, nf, bufs, caps, v, &label, &bad))) {
            if (bfs_err_is_transient(rc) || rc == BFS_E_CHANGED || rc > -4096) {
                bfs_errf(rc, err, errlen, "%s: sample %llu, field %s: %s", src,
                         (unsigned long long)i, fs[bad].name, bfs_strerror(rc));
                goto out;
            }
            /* a corrupt value: the sample is left out and listed, as a bad file is */
            bfs_pack_skip *sk = rep->skipped;
            if (rep->nskipped == skip_cap) {
                skip_cap = skip_cap ? 2 * skip_cap : 16;
                if (!(sk = realloc(rep->skipped, skip_cap * sizeof *sk))) {
                    rc = bfs_errf(-ENOMEM, err, errlen, "out of memory");
                    goto out;
                }
                rep->skipped = sk;
            }
            if (asprintf(&sk[rep->nskipped].path, "%s[%llu]", src, (unsigned long long)i) < 0)
                sk[rep->nskipped].path = NULL;
            if (asprintf(&sk[rep->nskipped].reason, "field %s: %s", fs[bad].name,
                         bfs_strerror(rc)) < 0)
                sk[rep->nskipped].reason = NULL;
            if (!sk[rep->nskipped].path || !sk[rep->nskipped].reason) {
                free(sk[rep->nskipped].path);
                free(sk[rep->nskipped].reason);
                rc = bfs_errf(-ENOMEM, err, errlen, "out of memory");
                goto out;
            }
            rep->nskipped++;
            if (o->strict) {
                bfs_errf(rc, err, errlen, "%s[%llu]: field %s: %s (--strict)", src,
                         (unsigned long long)i, fs[bad].name, bfs_strerror(rc));
                goto out;
            }
            continue;
        }
        if ((rc = bfs_writer_add_record(w, label, v))) {
            bfs_errf(rc, err, errlen, "%s: sample %llu: %s", out, (unsigned long long)i,
                     bfs_strerror(rc));
            goto out;
        }
        rep->packed++;
        for (uint32_t f = 0; f < nf; f++)
            rep->bytes_in += v[f].len;
        tok_progress(o, i + 1, in->sample_count, 0, t0, 0);
    }
    rep->bytes_out = rep->bytes_in;
    if (!rep->packed) {
        rc = bfs_errf(BFS_E_EMPTY, err, errlen, "%s: every sample has a corrupt value", src);
        goto out;
    }
    rc = bfs_writer_finish(w, o->fsync, err, errlen);
    w = NULL;
    if (!rc)
        tok_progress(o, in->sample_count, in->sample_count, 0, t0, 1);
out:
    bfs_writer_abort(w);
    for (uint32_t f = 0; f < BFS_FIELD_MAX; f++)
        free(bufs[f]);
    bfs_close(r);
    rep->seconds = bfs_mono_ns() / 1e9 - t0;
    return rc;
}

int bfs_pack_tokenize(const char *src, const char *out, const bfs_tokenize_opts *t,
                      const bfs_pack_opts *o, bfs_pack_report *rep, atomic_int *cancel, char *err,
                      size_t errlen)
{
    memset(rep, 0, sizeof *rep);
    double t0 = bfs_mono_ns() / 1e9;
    bfs_reader *r = NULL;
    bfs_writer *w = NULL;
    uint8_t **bufs = NULL;
    size_t *caps = NULL;
    uint32_t *ids = NULL;
    size_t ids_cap = 0;
    uint8_t *packed = NULL;
    size_t packed_cap = 0;
    bfs_field *fs = NULL;
    char name[BFS_FIELD_NAME_MAX + 1];
    int rc = bfs_open(src, &r, err, errlen);
    if (rc)
        return rc;
    const bfs_info *in = bfs_get_info(r);
    uint32_t nf = bfs_field_count(r), tf = BFS_FIELD_NONE;
    if (in->version < 3) {
        rc = bfs_errf(-EINVAL, err, errlen,
                      "%s: version %u has no text fields to tokenize (a dataset with captions "
                      "is packed as version 3)",
                      src, in->version);
        goto out;
    }
    for (uint32_t f = 0; f < nf; f++)
        if (!strcmp(bfs_get_field(r, f)->name, t->field))
            tf = f;
    if (tf == BFS_FIELD_NONE || bfs_get_field(r, tf)->kind != BFS_FIELD_TEXT) {
        char names[1024] = "";
        for (uint32_t f = 0; f < nf; f++)
            if (bfs_get_field(r, f)->kind == BFS_FIELD_TEXT)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                         names[0] ? ", " : "", bfs_get_field(r, f)->name);
        rc = bfs_errf(-EINVAL, err, errlen, "%s: no text field \"%s\" (its text fields: %s)", src,
                      t->field, names[0] ? names : "none");
        goto out;
    }
    if (nf >= BFS_FIELD_MAX) {
        rc =
            bfs_errf(-EINVAL, err, errlen, "%s: already %u fields, the most a sample has", src, nf);
        goto out;
    }
    if (t->out_field)
        snprintf(name, sizeof name, "%s", t->out_field);
    else if ((size_t)snprintf(name, sizeof name, "%s_tokens", t->field) >= sizeof name) {
        rc = bfs_errf(-EINVAL, err, errlen,
                      "\"%s_tokens\" is longer than a field name may be (%u bytes): name the "
                      "tokens field",
                      t->field, BFS_FIELD_NAME_MAX);
        goto out;
    }
    if (t->vocab == 0 || !t->fn) {
        rc = bfs_errf(-EINVAL, err, errlen, "no tokenizer");
        goto out;
    }
    if (!(fs = calloc(nf + 1, sizeof *fs)) || !(bufs = calloc(nf + 1, sizeof *bufs)) ||
        !(caps = calloc(nf + 1, sizeof *caps))) {
        rc = bfs_errf(-ENOMEM, err, errlen, "out of memory");
        goto out;
    }
    for (uint32_t f = 0; f < nf; f++)
        fs[f] = *bfs_get_field(r, f);
    bfs_field *nt = &fs[nf];
    snprintf(nt->name, sizeof nt->name, "%s", name);
    nt->kind = BFS_FIELD_TOKENS;
    nt->dtype = t->vocab <= 65536 ? BFS_FDT_U16 : BFS_FDT_U32;
    nt->flags = BFS_FIELDF_VARIABLE | (fs[tf].flags & BFS_FIELDF_OPTIONAL);
    nt->follows = BFS_FIELD_NONE;
    if ((rc = start_copy(r, src, out, o, fs, nf + 1, &w, err, errlen)))
        goto out;
    unsigned isz = bfs_fdt_size(nt->dtype);
    for (uint64_t i = 0; i < in->sample_count; i++) {
        if (cancel && atomic_load(cancel)) {
            rc = bfs_errf(-ECANCELED, err, errlen, "interrupted");
            goto out;
        }
        bfs_value_in v[BFS_FIELD_MAX];
        uint32_t label = 0, bad;
        if ((rc = read_record(r, i, nf, bufs, caps, v, &label, &bad))) {
            bfs_errf(rc, err, errlen, "%s: sample %llu, field %s: %s", src, (unsigned long long)i,
                     fs[bad].name, bfs_strerror(rc));
            goto out;
        }
        const char *text = (const char *)bufs[tf];
        size_t tlen = v[tf].len;
        if (!bfs_utf8_valid((const uint8_t *)text, tlen)) {
            rc = bfs_errf(-EINVAL, err, errlen, "%s: sample %llu: field %s is not UTF-8", src,
                          (unsigned long long)i, t->field);
            goto out;
        }
        /* empty text too: a tokenizer may give it ids (begin and end of sentence) */
        long n;
        char why[256] = "";
        for (;;) {
            n = t->fn(t->ctx, text, tlen, ids, ids_cap, why, sizeof why);
            if (n < 0 || (size_t)n <= ids_cap)
                break;
            if ((rc = grow((void **)&ids, &ids_cap, (size_t)n, sizeof *ids))) {
                bfs_errf(rc, err, errlen, "out of memory");
                goto out;
            }
        }
        if (n < 0) {
            rc = bfs_errf((int)n, err, errlen, "%s: sample %llu: tokenizing field %s: %s", src,
                          (unsigned long long)i, t->field, why[0] ? why : bfs_strerror((int)n));
            goto out;
        }
        if ((rc = grow((void **)&packed, &packed_cap, (size_t)n * isz + 1, 1))) {
            bfs_errf(rc, err, errlen, "out of memory");
            goto out;
        }
        for (long k = 0; k < n; k++) {
            if (ids[k] >= t->vocab) {
                rc = bfs_errf(-EINVAL, err, errlen,
                              "%s: sample %llu: the tokenizer gave id %u, not below its vocabulary "
                              "size %u",
                              src, (unsigned long long)i, ids[k], t->vocab);
                goto out;
            }
            for (unsigned b = 0; b < isz; b++) /* little-endian */
                packed[(size_t)k * isz + b] = (uint8_t)(ids[k] >> (8 * b));
        }
        v[nf] = (bfs_value_in){.data = n ? packed : NULL,
                               .len = (size_t)n * isz,
                               .checksum = n ? bfs_xxh64(packed, (size_t)n * isz, 0) : 0,
                               .raw_size = (uint32_t)n};
        if ((rc = bfs_writer_add_record(w, label, v))) {
            bfs_errf(rc, err, errlen, "%s: sample %llu: %s", out, (unsigned long long)i,
                     bfs_strerror(rc));
            goto out;
        }
        rep->packed++;
        rep->tokens += (uint64_t)n;
        rep->longest = (uint64_t)n > rep->longest ? (uint64_t)n : rep->longest;
        rep->bytes_in += tlen;
        tok_progress(o, i + 1, in->sample_count, rep->tokens, t0, 0);
    }
    rep->classes = in->class_count;
    rep->token_size = (int)isz;
    rc = bfs_writer_finish(w, o->fsync, err, errlen);
    w = NULL;
    if (!rc)
        tok_progress(o, in->sample_count, in->sample_count, rep->tokens, t0, 1);
out:
    bfs_writer_abort(w);
    for (uint32_t f = 0; bufs && f <= nf; f++)
        free(bufs[f]);
    free(bufs);
    free(caps);
    free(ids);
    free(packed);
    free(fs);
    bfs_close(r);
    rep->seconds = bfs_mono_ns() / 1e9 - t0;
    return rc;
}
