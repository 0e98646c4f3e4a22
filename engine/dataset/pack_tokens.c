/*
 * pack_tokens.c — token sequences into a token .bfs (see pack.h): a flat file of token ids
 * split into documents at o->doc_sep (bfs_pack_tokens_flat), or ids with document
 * offsets, an .npy of offsets or a Megatron .bin/.idx pair (bfs_pack_tokens_files).
 * bfs_pack_sources calls them. See pack_internal.h.
 */
#include "engine/dataset/pack_internal.h"
#include "engine/dataset/tokfile.h"
#include "base/err.h"
#include "base/clock.h"
#include "base/endian.h"
#include "base/io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

size_t bfs_tokens_doc_end(const uint8_t *p, size_t n, int size, uint32_t sep)
{
    if (size == 2) {
        for (size_t i = 0; i < n; i++)
            if (bfs_ld16(p + 2 * i) == sep)
                return i + 1;
    } else {
        for (size_t i = 0; i < n; i++)
            if (bfs_ld32(p + 4 * i) == sep)
                return i + 1;
    }
    return 0;
}

/* Room for need bytes in the growing document *doc (capacity *cap). 0 or -ENOMEM. */
static int doc_reserve(uint8_t **doc, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 1 << 16;
    while (c < need)
        c *= 2;
    uint8_t *d = realloc(*doc, c);
    if (!d)
        return -ENOMEM;
    *doc = d, *cap = c;
    return 0;
}

/* Append n bytes to the growing document doc (len, cap). 0 or -ENOMEM. */
static int doc_append(uint8_t **doc, size_t *len, size_t *cap, const uint8_t *p, size_t n)
{
    if (doc_reserve(doc, cap, *len + n))
        return -ENOMEM;
    memcpy(*doc + *len, p, n);
    *len += n;
    return 0;
}

static void token_progress(const bfs_pack_opts *o, const bfs_pack_report *rep, uint64_t total,
                           double t0, int final)
{
    char count[64];
    snprintf(count, sizeof count, "%llu documents", (unsigned long long)rep->packed);
    bfs_pack_progress_line(o, total ? (double)rep->bytes_in / total : 1, count, rep->bytes_in, t0,
                           final);
}

static int emit_doc(bfs_writer *w, const bfs_pack_opts *o, int ts, bfs_pack_report *rep,
                    const uint8_t *doc, size_t len, char *err, size_t errlen)
{
    if (len > UINT32_MAX)
        return o->token_format == BFS_TOKENS_FLAT
                   ? bfs_errf(-EINVAL, err, errlen,
                              "document %llu has %zu tokens (over 4 GiB): is %u the "
                              "separator token (--doc-sep)?",
                              (unsigned long long)rep->packed, len / (size_t)ts, o->doc_sep)
                   : bfs_errf(-EINVAL, err, errlen,
                              "document %llu has %zu tokens: over the 4 GiB a sample may hold",
                              (unsigned long long)rep->packed, len / (size_t)ts);
    uint64_t n = len / (size_t)ts;
    bfs_sample_in in = {.flags = (uint16_t)(BFS_KIND_TOKENS | (ts == 4 ? BFS_F_TOKENS_U32 : 0)),
                        .raw_size = (uint32_t)n};
    int rc = bfs_writer_add(w, &in, doc, len);
    if (rc)
        return bfs_errf(rc, err, errlen, "writing %s: %s", bfs_writer_temp_path(w),
                        bfs_strerror(rc));
    rep->packed++, rep->tokens += n, rep->bytes_out += len;
    rep->longest = n > rep->longest ? n : rep->longest;
    rep->token_size = ts;
    return 0;
}

int bfs_pack_tokens_flat(const char *src, const char *out, const bfs_pack_opts *o,
                         bfs_pack_report *rep, atomic_int *cancel, char *err, size_t errlen)
{
    int ts = o->tokens;
    if (ts != 2 && ts != 4)
        return bfs_errf(-EINVAL, err, errlen, "token size %d: must be 2 (u16) or 4 (u32)", ts);
    if (o->raw || o->max_side || o->restart)
        return bfs_errf(-EINVAL, err, errlen,
                        "token sequences take no image options (raw, max-side, restart)");
    if (ts == 2 && o->doc_sep > 0xffff)
        return bfs_errf(-EINVAL, err, errlen,
                        "separator token %u does not fit in u16 tokens (0..65535)", o->doc_sep);
    double t0 = bfs_mono_s();
    struct stat st;
    int fd = bfs_open_regular(src, &st);
    if (fd < 0)
        return bfs_errf(fd, err, errlen, "%s: %s", src,
                        fd == BFS_E_NOT_REGULAR ? "not a regular file" : bfs_strerror(fd));
    if (st.st_size == 0) {
        close(fd);
        return bfs_errf(BFS_E_EMPTY, err, errlen, "%s is empty: no tokens to pack", src);
    }
    if (st.st_size % ts) {
        close(fd);
        return bfs_errf(-EINVAL, err, errlen,
                        "%s: %lld bytes is not a whole number of %d-byte tokens (u%d)", src,
                        (long long)st.st_size, ts, ts * 8);
    }
    rep->files = 1;
    rep->classes = 1;
    bfs_writer *w = NULL;
    size_t chunk_cap = (size_t)8 << 20, doc_len = 0, doc_cap = 0;
    uint8_t *chunk = malloc(chunk_cap), *doc = NULL;
    int rc = chunk ? bfs_writer_create(out, o->page_size, &w, err, errlen) : -ENOMEM;
    if (!rc) {
        snprintf(bfs_pack_temp_file, sizeof bfs_pack_temp_file, "%s", bfs_writer_temp_path(w));
        rc = bfs_writer_add_class(w, "documents");
    }
    uint64_t off = 0;
    while (!rc && off < (uint64_t)st.st_size) {
        if (cancel && *cancel) {
            rc = -ECANCELED;
            break;
        }
        size_t want =
            (uint64_t)st.st_size - off < chunk_cap ? (size_t)(st.st_size - off) : chunk_cap;
        ssize_t got = pread(fd, chunk, want, (off_t)off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0 || got % ts) { /* a short read mid-token: read the rest next time */
            if (got > 0 && (size_t)got > (size_t)ts)
                got -= got % ts;
            else {
                rc = got < 0 ? -errno : BFS_E_CHANGED;
                bfs_errf(rc, err, errlen, "reading %s: %s", src,
                         got < 0 ? strerror(-rc) : "the file shrank while packing");
                break;
            }
        }
        size_t n = (size_t)got / (size_t)ts, pos = 0;
        while (!rc && pos < n) {
            size_t k = bfs_tokens_doc_end(chunk + pos * ts, n - pos, ts, o->doc_sep);
            size_t take = k ? k : n - pos;
            if (doc_len + take * ts > UINT32_MAX) { /* refused before it takes 4 GiB */
                rc = emit_doc(w, o, ts, rep, doc, doc_len + take * ts, err, errlen);
                break;
            }
            rc = doc_append(&doc, &doc_len, &doc_cap, chunk + pos * ts, take * ts);
            if (rc)
                bfs_errf(rc, err, errlen, "out of memory (a document of %zu MB so far)",
                         doc_len >> 20);
            else if (k) {
                rc = emit_doc(w, o, ts, rep, doc, doc_len, err, errlen);
                doc_len = 0;
            }
            pos += take;
        }
        off += (uint64_t)got;
        rep->bytes_in = off;
        token_progress(o, rep, (uint64_t)st.st_size, t0, 0);
    }
    if (!rc && doc_len) /* the last document, without a separator */
        rc = emit_doc(w, o, ts, rep, doc, doc_len, err, errlen);
    close(fd);
    free(chunk);
    free(doc);
    if (!rc) {
        token_progress(o, rep, (uint64_t)st.st_size, t0, 1);
        rc = bfs_writer_finish(w, o->fsync, err, errlen);
        w = NULL;
    }
    bfs_writer_abort(w);
    bfs_pack_temp_file[0] = 0;
    rep->seconds = bfs_mono_s() - t0;
    return rc;
}

/* pread len bytes at off: 0, a negative errno, or BFS_E_CHANGED (the file ended early). */
static int pread_full(int fd, uint8_t *buf, size_t len, uint64_t off)
{
    while (len) {
        ssize_t n = pread(fd, buf, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            return BFS_E_CHANGED;
        buf += n, len -= (size_t)n, off += (uint64_t)n;
    }
    return 0;
}

/* State shared by the .npy and Megatron packers. */
typedef struct tokpack {
    const bfs_pack_opts *o;
    bfs_pack_report *rep;
    bfs_writer *w;
    int fd;             /* the file of ids */
    const char *path;   /* its name, for messages */
    bfs_tok_dtype dt;   /* their type in it */
    int ts;             /* their size in the .bfs */
    uint8_t *raw, *doc; /* read buffer; the document being built */
    size_t raw_cap, doc_len, doc_cap;
} tokpack;

/* Append the n ids at byte off of the ids file to the document. */
static int tok_append(tokpack *t, uint64_t off, uint64_t n, char *err, size_t errlen)
{
    while (n) {
        size_t chunk = n > (1u << 20) ? (1u << 20) : (size_t)n;
        size_t bytes = chunk * (size_t)t->dt.size;
        if (bytes > t->raw_cap) {
            uint8_t *r = realloc(t->raw, bytes);
            if (!r)
                return bfs_errf(-ENOMEM, err, errlen, "out of memory");
            t->raw = r, t->raw_cap = bytes;
        }
        int rc = pread_full(t->fd, t->raw, bytes, off);
        if (rc)
            return bfs_errf(rc, err, errlen, "reading %s: %s", t->path,
                            rc == BFS_E_CHANGED ? "the file ended early" : bfs_strerror(rc));
        size_t need = t->doc_len + chunk * (size_t)t->ts;
        if (doc_reserve(&t->doc, &t->doc_cap, need))
            return bfs_errf(-ENOMEM, err, errlen, "out of memory");
        size_t bad;
        int64_t v;
        if (bfs_tok_convert(t->raw, chunk, t->dt, t->ts, t->doc + t->doc_len, &bad, &v))
            return bfs_errf(-ERANGE, err, errlen,
                            "%s: the id at byte %llu is %lld: token ids must be 0..%u", t->path,
                            (unsigned long long)(off + bad * (uint64_t)t->dt.size), (long long)v,
                            t->ts == 2 ? 65535u : 4294967295u);
        t->doc_len = need;
        off += bytes, n -= chunk;
    }
    return 0;
}

/* The document built so far into the .bfs (an empty one is counted and left out). */
static int tok_flush(tokpack *t, char *err, size_t errlen)
{
    if (!t->doc_len) {
        t->rep->ignored++;
        return 0;
    }
    int rc = emit_doc(t->w, t->o, t->ts, t->rep, t->doc, t->doc_len, err, errlen);
    t->doc_len = 0;
    return rc;
}

/* Megatron: PREFIX, PREFIX.bin or PREFIX.idx into the two paths. */
static int megatron_paths(const char *src, char *bin, char *idx, size_t cap)
{
    size_t n = strlen(src);
    if (n >= 4 && (!strcmp(src + n - 4, ".bin") || !strcmp(src + n - 4, ".idx")))
        n -= 4;
    if (n + 5 > cap)
        return -ENAMETOOLONG;
    snprintf(bin, cap, "%.*s.bin", (int)n, src);
    snprintf(idx, cap, "%.*s.idx", (int)n, src);
    return 0;
}

int bfs_pack_tokens_files(const char *src, const char *out, const bfs_pack_opts *o,
                          bfs_pack_report *rep, atomic_int *cancel, char *err, size_t errlen)
{
    if (o->raw || o->max_side || o->restart)
        return bfs_errf(-EINVAL, err, errlen,
                        "token sequences take no image options (raw, max-side, restart)");
    int npy = o->token_format == BFS_TOKENS_NPY;
    if (npy && !o->offsets)
        return bfs_errf(-EINVAL, err, errlen, ".npy token ids need a .npy of document offsets");
    double t0 = bfs_mono_s();
    char bin[4200], idxp[4200], why[512] = "";
    const char *ids = src, *meta_path = npy ? o->offsets : idxp;
    if (!npy) {
        if (megatron_paths(src, bin, idxp, sizeof bin))
            return bfs_errf(-ENAMETOOLONG, err, errlen, "%s: name too long", src);
        ids = bin;
    }
    uint8_t *meta = NULL, head[65536];
    size_t meta_cap = 0, meta_len = 0;
    tokpack t = {.o = o, .rep = rep, .fd = -1, .path = ids};
    struct stat st;
    bfs_megatron_idx mx = {0};
    bfs_tok_dtype odt = {0, 0};
    uint64_t nel = 0, data_off = 0, onel = 0, ooff = 0;
    int rc = bfs_open_regular(ids, &st);
    if (rc < 0)
        bfs_errf(rc, err, errlen, "%s: %s", ids,
                 rc == BFS_E_NOT_REGULAR ? "not a regular file" : bfs_strerror(rc));
    else
        t.fd = rc, rc = 0;
    if (!rc && (rc = bfs_read_file(meta_path, &meta, &meta_cap, &meta_len)))
        bfs_errf(rc, err, errlen, "%s: %s", meta_path,
                 rc == BFS_E_NOT_REGULAR ? "not a regular file" : bfs_strerror(rc));
    if (!rc && npy) {
        size_t hn = st.st_size < (off_t)sizeof head ? (size_t)st.st_size : sizeof head;
        if ((rc = pread_full(t.fd, head, hn, 0)))
            bfs_errf(rc, err, errlen, "reading %s: %s", ids, bfs_strerror(rc));
        else if ((rc = bfs_npy_parse(head, hn, (uint64_t)st.st_size, &t.dt, &nel, &data_off, why,
                                     sizeof why)))
            bfs_errf(rc, err, errlen, "%s: %s", ids, why);
        else if ((rc =
                      bfs_npy_parse(meta, meta_len, meta_len, &odt, &onel, &ooff, why, sizeof why)))
            bfs_errf(rc, err, errlen, "%s: %s", o->offsets, why);
    } else if (!rc) {
        if ((rc = bfs_megatron_parse(meta, meta_len, (uint64_t)st.st_size, &mx, why, sizeof why)))
            bfs_errf(rc, err, errlen, "%s: %s", idxp, why);
        t.dt = mx.dtype;
    }
    if (!rc) {
        t.ts = bfs_tok_out_size(t.dt);
        rep->files = 1, rep->classes = 1;
        if (!(rc = bfs_writer_create(out, o->page_size, &t.w, err, errlen))) {
            snprintf(bfs_pack_temp_file, sizeof bfs_pack_temp_file, "%s",
                     bfs_writer_temp_path(t.w));
            rc = bfs_writer_add_class(t.w, "documents");
        }
    }
    uint64_t total = npy ? nel * (uint64_t)t.dt.size : (uint64_t)st.st_size;
    if (!rc && npy) {
        /* offsets o[0..onel): 0 first, rising, at most nel. Ending with nel they are the
         * boundaries of onel - 1 documents; otherwise the starts of onel documents. */
        const uint8_t *ov = meta + ooff;
        uint64_t ndocs =
            onel && bfs_tok_get(ov, odt, onel - 1) == (int64_t)nel && onel > 1 ? onel - 1 : onel;
        int64_t prev = 0;
        for (uint64_t i = 0; !rc && i < onel; i++) {
            int64_t b = bfs_tok_get(ov, odt, i);
            if ((i == 0 && b != 0) || b < prev || b > (int64_t)nel)
                rc = bfs_errf(-EINVAL, err, errlen,
                              "%s: offset %llu is %lld: offsets must start at 0 and rise to at "
                              "most %llu, the ids in %s",
                              o->offsets, (unsigned long long)i, (long long)b,
                              (unsigned long long)nel, ids);
            prev = b;
        }
        for (uint64_t d = 0; !rc && d < ndocs; d++) {
            uint64_t b0 = (uint64_t)bfs_tok_get(ov, odt, d);
            uint64_t b1 = d + 1 < onel ? (uint64_t)bfs_tok_get(ov, odt, d + 1) : nel;
            rc = tok_append(&t, data_off + b0 * (uint64_t)t.dt.size, b1 - b0, err, errlen);
            if (!rc)
                rc = tok_flush(&t, err, errlen);
            rep->bytes_in = b1 * (uint64_t)t.dt.size;
            token_progress(o, rep, total, t0, 0);
            if (!rc && cancel && *cancel)
                rc = -ECANCELED;
        }
    } else if (!rc) {
        for (uint64_t d = 0; !rc && d < mx.ndoc; d++) {
            for (uint64_t q = bfs_megatron_doc(&mx, d); !rc && q < bfs_megatron_doc(&mx, d + 1);
                 q++) {
                rc = tok_append(&t, bfs_megatron_offset(&mx, q), bfs_megatron_size(&mx, q), err,
                                errlen);
                rep->bytes_in += (uint64_t)bfs_megatron_size(&mx, q) * (uint64_t)t.dt.size;
            }
            if (!rc)
                rc = tok_flush(&t, err, errlen);
            token_progress(o, rep, total, t0, 0);
            if (!rc && cancel && *cancel)
                rc = -ECANCELED;
        }
    }
    if (!rc && !rep->packed)
        rc = bfs_errf(BFS_E_EMPTY, err, errlen, "%s: no document holds a token", ids);
    if (t.fd >= 0)
        close(t.fd);
    free(meta);
    free(t.raw);
    free(t.doc);
    if (!rc) {
        token_progress(o, rep, total, t0, 1);
        rc = bfs_writer_finish(t.w, o->fsync, err, errlen);
        t.w = NULL;
    }
    bfs_writer_abort(t.w);
    bfs_pack_temp_file[0] = 0;
    rep->seconds = bfs_mono_s() - t0;
    return rc;
}
