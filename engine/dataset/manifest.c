/*
 * manifest.c — JSON Lines and CSV manifests (see manifest.h).
 *
 * The stream is read 64 KiB at a time; a record (a line, or a CSV record whose quoted
 * cells span lines) is gathered whole, then parsed: jansson for JSON, a small RFC 4180
 * state machine for CSV.
 */
#include "engine/dataset/manifest.h"
#include "engine/dataset/pack.h"
#include "base/err.h"
#include "base/utf8.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define READ_CHUNK (64u << 10)

void bfs_manifest_init(bfs_manifest *m, bfs_shard_in in, int csv)
{
    memset(m, 0, sizeof *m);
    m->in = in;
    m->csv = csv;
}

void bfs_manifest_close(bfs_manifest *m)
{
    if (!m)
        return;
    free(m->buf);
    free(m->rec);
    for (size_t i = 0; i < m->ncols; i++)
        free(m->cols[i]);
    free(m->cols);
    memset(m, 0, sizeof *m);
}

int bfs_manifest_is_name(const char *path)
{
    size_t n = strlen(path);
    if (n > 6 && !strcmp(path + n - 6, ".jsonl"))
        return 1;
    if (n > 4 && !strcmp(path + n - 4, ".csv"))
        return 2;
    return 0;
}

/* The next byte, or -1 at the end, or a negative errno - 1 (< -1). */
static int next_byte(bfs_manifest *m)
{
    if (m->pos == m->len) {
        if (m->eof)
            return -1;
        if (!m->buf && !(m->buf = malloc(READ_CHUNK)))
            return -ENOMEM - 1;
        for (;;) {
            ssize_t k = m->in.read_cb(m->in.ctx, m->buf, READ_CHUNK);
            if (k == -EINTR)
                continue;
            if (k < 0)
                return (int)k - 1;
            if (k == 0) {
                m->eof = 1;
                return -1;
            }
            m->len = (size_t)k, m->pos = 0;
            break;
        }
    }
    m->off++;
    return m->buf[m->pos++];
}

static int rec_push(bfs_manifest *m, char c)
{
    if (m->rec_len + 1 >= m->rec_cap) {
        size_t nc = m->rec_cap ? m->rec_cap * 2 : 4096;
        char *r = realloc(m->rec, nc);
        if (!r)
            return -ENOMEM;
        m->rec = r, m->rec_cap = nc;
    }
    m->rec[m->rec_len++] = c;
    m->rec[m->rec_len] = 0;
    return 0;
}

/* The next record into m->rec (without its line break): 1, 0 at the end, or an error. */
static int read_record(bfs_manifest *m, char *err, size_t errlen)
{
    int quoted = 0, any = 0;
    m->rec_len = 0;
    if (m->rec)
        m->rec[0] = 0;
    m->sample_line = m->line + 1;
    for (;;) {
        int c = next_byte(m);
        if (c < -1)
            return bfs_errf(c + 1, err, errlen, "reading: %s", bfs_strerror(c + 1));
        if (c == -1) {
            if (quoted)
                return bfs_errf(-EINVAL, err, errlen,
                                "line %llu: a quoted cell is still open at the end of the file",
                                (unsigned long long)m->sample_line);
            if (any)
                m->line++;
            return any;
        }
        any = 1;
        if (c == '\n') {
            m->line++;
            if (!quoted) {
                if (m->rec_len && m->rec[m->rec_len - 1] == '\r')
                    m->rec[--m->rec_len] = 0;
                return 1;
            }
        }
        if (m->csv && c == '"')
            quoted = !quoted; /* a doubled quote flips twice */
        if (m->rec_len >= BFS_MANIFEST_LINE_MAX)
            return bfs_errf(-EINVAL, err, errlen, "line %llu: a record over 16 MiB",
                            (unsigned long long)m->sample_line);
        if (rec_push(m, (char)c))
            return bfs_errf(-ENOMEM, err, errlen, "out of memory");
    }
}

/* One CSV record's cells: NUL-separated copies in *out (owned), quoted[i] set for quoted
 * cells. Returns the cell count, -1 for a malformed record (why set), -ENOMEM. */
static long csv_cells(const char *r, size_t n, char **out, uint8_t **quoted, const char **why)
{
    char *o = malloc(n + 1);
    size_t cap = 16, nc = 0, k = 0;
    uint8_t *q = malloc(cap);
    if (!o || !q) {
        free(o);
        free(q);
        return -ENOMEM;
    }
    size_t i = 0;
    for (;;) {
        if (nc == cap) {
            uint8_t *nq = realloc(q, cap *= 2);
            if (!nq) {
                free(o);
                free(q);
                return -ENOMEM;
            }
            q = nq;
        }
        q[nc] = 0;
        if (i < n && r[i] == '"') {
            q[nc] = 1;
            i++;
            for (;;) {
                if (i >= n) {
                    *why = "a quoted cell is not closed";
                    goto bad;
                }
                if (r[i] == '"') {
                    if (i + 1 < n && r[i + 1] == '"') {
                        o[k++] = '"', i += 2;
                        continue;
                    }
                    i++;
                    break;
                }
                o[k++] = r[i++];
            }
            if (i < n && r[i] != ',') {
                *why = "text after a quoted cell's closing quote";
                goto bad;
            }
        } else
            while (i < n && r[i] != ',') {
                if (r[i] == '"') {
                    *why = "a quote inside an unquoted cell (RFC 4180: quote the cell, double "
                           "the quote)";
                    goto bad;
                }
                o[k++] = r[i++];
            }
        o[k++] = 0;
        nc++;
        if (i >= n)
            break;
        i++; /* the comma */
    }
    *out = o, *quoted = q;
    return (long)nc;
bad:
    free(o);
    free(q);
    return -1;
}

/* A CSV cell's JSON value (manifest.h: typed by its look unless quoted). */
static json_t *csv_value(const char *c, int quoted)
{
    if (c[0] == '[') { /* a list, quoted or not (a CSV writer quotes its commas) */
        json_t *j = json_loads(c, JSON_REJECT_DUPLICATES, NULL);
        if (j)
            return j;
    }
    if (quoted)
        return json_string(c);
    if (!c[0])
        return json_null();
    char *end;
    errno = 0;
    long long v = strtoll(c, &end, 10);
    if (!*end && !errno && end != c && c[0] != ' ' && c[0] != '+')
        return json_integer(v);
    double d = strtod(c, &end);
    if (!*end && end != c && c[0] != ' ' && c[0] != '+' && isfinite(d) &&
        (c[0] == '-' || c[0] == '.' || (c[0] >= '0' && c[0] <= '9')))
        return json_real(d); /* 1e999 (inf) stays text: JSON has no infinity */
    return json_string(c);
}

static int manifest_next(bfs_manifest *m, bfs_members *out, const char **skip, char *whybuf,
                         size_t whycap, char *err, size_t errlen);

int bfs_manifest_next(bfs_manifest *m, bfs_members *out, const char **skip, char *whybuf,
                      size_t whycap, char *err, size_t errlen)
{
    int rc = manifest_next(m, out, skip, whybuf, whycap, err, errlen);
    if (rc == 1 && *skip == whybuf) /* names and JSON come from the data: one line */
        for (char *c = whybuf; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f)
                *c = '?';
    return rc;
}

static int manifest_next(bfs_manifest *m, bfs_members *out, const char **skip, char *whybuf,
                         size_t whycap, char *err, size_t errlen)
{
    bfs_members_clear(out);
    *skip = NULL;
    int rc;
    if (m->csv && !m->cols) { /* the header */
        if ((rc = read_record(m, err, errlen)) <= 0)
            return rc < 0 ? rc : bfs_errf(-EINVAL, err, errlen, "empty: no CSV header line");
        char *cells;
        uint8_t *q;
        const char *why = NULL;
        const char *r = m->rec;
        size_t n = m->rec_len;
        if (n >= 3 && !memcmp(r, "\xef\xbb\xbf", 3))
            r += 3, n -= 3; /* a UTF-8 byte order mark */
        if (n && memchr(r, 0, n))
            return bfs_errf(-EINVAL, err, errlen, "line 1: the CSV header holds a NUL byte");
        long nc = csv_cells(r, n, &cells, &q, &why);
        if (nc == -ENOMEM)
            return bfs_errf(-ENOMEM, err, errlen, "out of memory");
        if (nc < 0)
            return bfs_errf(-EINVAL, err, errlen, "line 1: the CSV header: %s", why);
        free(q);
        if (!(m->cols = calloc((size_t)nc, sizeof *m->cols))) {
            free(cells);
            return bfs_errf(-ENOMEM, err, errlen, "out of memory");
        }
        const char *c = cells;
        for (long i = 0; i < nc; i++, c += strlen(c) + 1) {
            int empty = !c[0];
            if (empty || !(m->cols[i] = strdup(c))) {
                m->ncols = (size_t)i;
                free(cells);
                return !empty ? bfs_errf(-ENOMEM, err, errlen, "out of memory")
                              : bfs_errf(-EINVAL, err, errlen,
                                         "line 1: the CSV header's column %ld has no name", i + 1);
            }
            m->ncols = (size_t)i + 1;
            for (long j = 0; j < i; j++)
                if (!strcmp(m->cols[j], c)) {
                    char name[128];
                    size_t k = 0;
                    for (; c[k] && k + 1 < sizeof name; k++) /* one line: control bytes as ? */
                        name[k] = (unsigned char)c[k] < 0x20 || c[k] == 0x7f ? '?' : c[k];
                    name[k] = 0;
                    free(cells);
                    return bfs_errf(-EINVAL, err, errlen,
                                    "line 1: the CSV header names column '%s' twice", name);
                }
        }
        free(cells);
    }
    for (;;) {
        if ((rc = read_record(m, err, errlen)) <= 0)
            return rc;
        int blank = 1;
        for (size_t i = 0; i < m->rec_len && blank; i++)
            blank = m->rec[i] == ' ' || m->rec[i] == '\t' || m->rec[i] == '\r';
        if (!blank)
            break;
    }
    snprintf(m->key, sizeof m->key, "line %llu", (unsigned long long)m->sample_line);
    if (!m->csv) {
        json_error_t je;
        json_t *o = memchr(m->rec, 0, m->rec_len)
                        ? NULL
                        : json_loadb(m->rec, m->rec_len, JSON_REJECT_DUPLICATES, &je);
        if (!o || !json_is_object(o)) {
            snprintf(whybuf, whycap, "not one JSON object (%s)",
                     !o ? (memchr(m->rec, 0, m->rec_len) ? "a NUL byte" : je.text)
                        : "another JSON value");
            json_decref(o);
            *skip = whybuf;
            return 1;
        }
        const char *k;
        json_t *v;
        json_object_foreach(o, k, v)
        {
            if (bfs_members_add(out, k, strlen(k), BFS_MEMBER_JSON, NULL, 0, json_incref(v))) {
                json_decref(o);
                bfs_members_clear(out);
                return bfs_errf(-ENOMEM, err, errlen, "out of memory");
            }
        }
        json_decref(o);
        return 1;
    }
    char *cells;
    uint8_t *q;
    const char *why = NULL;
    if (m->rec_len && memchr(m->rec, 0, m->rec_len)) { /* cells: NUL-terminated copies */
        snprintf(whybuf, whycap, "a NUL byte in the record");
        *skip = whybuf;
        return 1;
    }
    long nc = csv_cells(m->rec, m->rec_len, &cells, &q, &why);
    if (nc == -ENOMEM)
        return bfs_errf(-ENOMEM, err, errlen, "out of memory");
    if (nc < 0 || (size_t)nc != m->ncols) {
        if (nc >= 0) {
            snprintf(whybuf, whycap, "%ld cells, and the header has %zu columns", nc, m->ncols);
            free(cells);
            free(q);
        } else
            snprintf(whybuf, whycap, "bad CSV: %s", why);
        *skip = whybuf;
        return 1;
    }
    const char *c = cells;
    for (long i = 0; i < nc; i++, c += strlen(c) + 1) {
        json_t *v = csv_value(c, q[i]);
        if (!v && !bfs_utf8_valid((const uint8_t *)c, strlen(c))) {
            snprintf(whybuf, whycap, "column '%s': text that is not UTF-8", m->cols[i]);
            free(cells);
            free(q);
            bfs_members_clear(out);
            *skip = whybuf;
            return 1;
        }
        /* the cell's text too: a text field takes it as written ("1984", "1.50") */
        char *raw = v ? strdup(c) : NULL;
        if (!v || !raw ||
            bfs_members_add(out, m->cols[i], strlen(m->cols[i]), BFS_MEMBER_JSON, raw, strlen(c),
                            v)) {
            if (v && !raw)
                json_decref(v);
            free(cells);
            free(q);
            bfs_members_clear(out);
            return bfs_errf(-ENOMEM, err, errlen, "out of memory");
        }
    }
    free(cells);
    free(q);
    return 1;
}
