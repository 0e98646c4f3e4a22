/*
 * wds.c — the tar reader and WebDataset sample grouping (see wds.h).
 *
 * Everything is read in order through the shard's read callback; data that is not kept
 * (other members, padding) is read into a small buffer and dropped, so any stream works
 * (a pipe as well as a file) and memory is one sample's image.
 */
#include "engine/dataset/wds.h"
#include "base/err.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define BLOCK          512
#define EXT_HEADER_MAX ((uint64_t)1 << 20) /* a long name or pax header we take in */
#define JSON_MAX       ((uint64_t)1 << 20) /* a .json we parse for the label */
#define CLS_MAX        64

void bfs_tar_init(bfs_tar *t, bfs_shard_in in)
{
    memset(t, 0, sizeof *t);
    t->in = in;
}

/* Up to n bytes into buf; how many were read (fewer only at the end) or a negative errno. */
static ssize_t read_some(bfs_tar *t, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = t->in.read_cb(t->in.ctx, (uint8_t *)buf + got, n - got);
        if (r == -EINTR)
            continue;
        if (r < 0)
            return r;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    t->off += got;
    return (ssize_t)got;
}

/* Read and drop n bytes. 0, 1 when the stream ended first, or a negative errno. */
static int skip_bytes(bfs_tar *t, uint64_t n)
{
    uint8_t buf[16384];
    while (n) {
        size_t want = n < sizeof buf ? (size_t)n : sizeof buf;
        ssize_t r = read_some(t, buf, want);
        if (r < 0)
            return (int)r;
        if ((size_t)r < want)
            return 1;
        n -= want;
    }
    return 0;
}

/* name for a message: at most 200 bytes, control bytes as '?' (a name may hold any). */
static const char *printable(const char *name, char *buf, size_t cap)
{
    size_t i = 0;
    for (; name[i] && i + 1 < cap && i < 200; i++)
        buf[i] = (unsigned char)name[i] < 0x20 || name[i] == 0x7f ? '?' : name[i];
    buf[i] = 0;
    return buf;
}

static uint64_t padding(uint64_t size)
{
    return (BLOCK - size % BLOCK) % BLOCK;
}

/* A numeric header field: octal digits, spaces before, spaces or NULs after (empty: 0),
 * or GNU base-256 (first byte 0x80, then a big-endian number). */
static int parse_number(const uint8_t *f, size_t n, uint64_t *v)
{
    if (f[0] == 0x80) {
        uint64_t x = 0;
        for (size_t i = 1; i < n; i++) {
            if (x >> 55)
                return -1;
            x = x << 8 | f[i];
        }
        if (x > (uint64_t)INT64_MAX)
            return -1;
        *v = x;
        return 0;
    }
    size_t i = 0;
    uint64_t x = 0;
    while (i < n && f[i] == ' ')
        i++;
    for (; i < n && f[i] >= '0' && f[i] <= '7'; i++) {
        if (x >> 60)
            return -1;
        x = x * 8 + (uint64_t)(f[i] - '0');
    }
    for (; i < n; i++)
        if (f[i] != ' ' && f[i] != 0)
            return -1;
    *v = x;
    return 0;
}

static int checksum_ok(const uint8_t *h)
{
    uint64_t want;
    if (parse_number(h + 148, 8, &want))
        return 0;
    int64_t u = 0, s = 0;
    for (int i = 0; i < BLOCK; i++) {
        int b = i >= 148 && i < 156 ? ' ' : h[i];
        u += b;
        s += (signed char)(i >= 148 && i < 156 ? ' ' : h[i]);
    }
    return (int64_t)want == u || (int64_t)want == s;
}

/* A NUL-terminated or full-width name field appended to out (capacity BFS_TAR_NAME_MAX+1). */
static void field_str(char *out, const uint8_t *f, size_t n)
{
    size_t len = strnlen((const char *)f, n), have = strlen(out);
    memcpy(out + have, f, len);
    out[have + len] = 0;
}

/* Pax records "LEN key=value\n" in p[0..n): path= into name (when not NULL), size=
 * into *size (*has_size). 0 or -1 (malformed). */
static int parse_pax(const char *p, size_t n, char *name, int *has_name, uint64_t *size,
                     int *has_size)
{
    size_t i = 0;
    while (i < n) {
        size_t j = i, len = 0;
        while (j < n && p[j] >= '0' && p[j] <= '9' && j - i < 10)
            len = len * 10 + (size_t)(p[j++] - '0');
        if (j == i || j >= n || p[j] != ' ' || len < j - i + 3 || len > n - i ||
            p[i + len - 1] != '\n')
            return -1;
        const char *kv = p + j + 1, *end = p + i + len - 1;
        const char *eq = memchr(kv, '=', (size_t)(end - kv));
        if (!eq || eq == kv)
            return -1;
        size_t klen = (size_t)(eq - kv), vlen = (size_t)(end - eq - 1);
        if (klen == 4 && !memcmp(kv, "path", 4)) {
            if (vlen > BFS_TAR_NAME_MAX || memchr(eq + 1, 0, vlen))
                return -1;
            memcpy(name, eq + 1, vlen);
            name[vlen] = 0;
            *has_name = 1;
        } else if (klen == 4 && !memcmp(kv, "size", 4)) {
            uint64_t v = 0;
            if (vlen == 0 || vlen > 18)
                return -1;
            for (size_t k = 0; k < vlen; k++) {
                if (eq[1 + k] < '0' || eq[1 + k] > '9')
                    return -1;
                v = v * 10 + (uint64_t)(eq[1 + k] - '0');
            }
            *size = v, *has_size = 1;
        }
        i += len;
    }
    return 0;
}

/* The data of an extended header (a GNU long name or pax records), size bytes then its
 * padding, into a malloc'ed NUL-terminated buffer. */
static int read_ext(bfs_tar *t, uint64_t size, char **out, char *err, size_t errlen)
{
    if (size > EXT_HEADER_MAX)
        return bfs_errf(-EINVAL, err, errlen,
                        "byte %llu: an extended header of %llu bytes (over 1 MiB): not a tar "
                        "this reads",
                        (unsigned long long)(t->off - BLOCK), (unsigned long long)size);
    char *b = malloc((size_t)size + 1);
    if (!b)
        return bfs_errf(-ENOMEM, err, errlen, "out of memory");
    ssize_t r = read_some(t, b, (size_t)size);
    int rc = r < 0 ? (int)r : (uint64_t)r < size ? 1 : skip_bytes(t, padding(size));
    if (rc) {
        free(b);
        return rc < 0 ? bfs_errf(rc, err, errlen, "%s", bfs_strerror(rc))
                      : bfs_errf(-EINVAL, err, errlen,
                                 "truncated: the stream ends at byte %llu, inside an extended "
                                 "header",
                                 (unsigned long long)t->off);
    }
    b[size] = 0;
    *out = b;
    return 0;
}

int bfs_tar_next(bfs_tar *t, char *err, size_t errlen)
{
    uint8_t h[BLOCK];
    char long_name[BFS_TAR_NAME_MAX + 1];
    int has_long = 0, has_size = 0;
    uint64_t pax_size = 0, first_hdr = UINT64_MAX;
    char pn[256];
    t->bad_checksum = 0;
    if (t->done)
        return 0;
    if (t->left || t->size % BLOCK) {
        uint64_t at = t->off + t->left;
        int rc = skip_bytes(t, t->left + padding(t->size));
        t->left = 0, t->size = 0;
        if (rc < 0)
            return bfs_errf(rc, err, errlen, "reading: %s", bfs_strerror(rc));
        if (rc)
            return bfs_errf(-EINVAL, err, errlen,
                            "truncated: the stream ends at byte %llu, inside member '%s' (or "
                            "its padding, from byte %llu)",
                            (unsigned long long)t->off, printable(t->name, pn, sizeof pn),
                            (unsigned long long)at);
    }
    t->size = 0;
    for (;;) {
        uint64_t at = t->off;
        ssize_t r = read_some(t, h, BLOCK);
        if (r < 0)
            return bfs_errf((int)r, err, errlen, "reading: %s", bfs_strerror((int)r));
        if (r == 0 && at == 0)
            return bfs_errf(-EINVAL, err, errlen, "empty file: not a tar");
        if (at == 0 && r >= 2 && h[0] == 0x1f && h[1] == 0x8b)
            return bfs_errf(-EINVAL, err, errlen,
                            "gzip-compressed: decompress it first (a plain .tar is read)");
        if (r == 0)
            return bfs_errf(-EINVAL, err, errlen,
                            "truncated: the stream ends at byte %llu without the end-of-archive "
                            "block",
                            (unsigned long long)at);
        if (r < BLOCK)
            return bfs_errf(-EINVAL, err, errlen,
                            "truncated: the stream ends at byte %llu, inside a header (from byte "
                            "%llu)",
                            (unsigned long long)t->off, (unsigned long long)at);
        int zero = 1;
        for (int i = 0; i < BLOCK && zero; i++)
            zero = !h[i];
        if (zero) {
            if (has_long || has_size || first_hdr != UINT64_MAX)
                return bfs_errf(-EINVAL, err, errlen,
                                "byte %llu: the archive ends after an extended header",
                                (unsigned long long)at);
            t->done = 1;
            return 0;
        }
        if (!checksum_ok(h)) {
            t->bad_checksum = 1;
            if (at == 0)
                return bfs_errf(-EINVAL, err, errlen,
                                "not a tar file (bad header checksum at byte 0)");
            return bfs_errf(-EINVAL, err, errlen, "byte %llu: bad header checksum (corrupt tar)",
                            (unsigned long long)at);
        }
        if (first_hdr == UINT64_MAX)
            first_hdr = at;
        uint64_t size;
        if (parse_number(h + 124, 12, &size))
            return bfs_errf(-EINVAL, err, errlen, "byte %llu: bad size field",
                            (unsigned long long)at);
        char type = (char)h[156];
        if (type == 'L' || type == 'x') {
            char *ext = NULL;
            int rc = read_ext(t, size, &ext, err, errlen);
            if (rc)
                return rc;
            if (type == 'L') {
                size_t n = strlen(ext);
                if (n > BFS_TAR_NAME_MAX) {
                    free(ext);
                    return bfs_errf(-EINVAL, err, errlen,
                                    "byte %llu: a long name of %zu bytes (over %d)",
                                    (unsigned long long)at, n, BFS_TAR_NAME_MAX);
                }
                memcpy(long_name, ext, n + 1);
                has_long = 1;
            } else if (parse_pax(ext, (size_t)size, long_name, &has_long, &pax_size, &has_size)) {
                free(ext);
                return bfs_errf(-EINVAL, err, errlen, "byte %llu: malformed pax header",
                                (unsigned long long)at);
            }
            free(ext);
            continue;
        }
        if (has_size)
            size = pax_size;
        if (type != '0' && type != 0 && type != '7') { /* not a regular file: skip */
            int rc = type == '1' || type == '2' || type == '3' || type == '4' || type == '5' ||
                             type == '6'
                         ? 0 /* links, devices, directories, FIFOs: no data */
                         : skip_bytes(t, size + padding(size));
            if (rc < 0)
                return bfs_errf(rc, err, errlen, "reading: %s", bfs_strerror(rc));
            if (rc)
                return bfs_errf(-EINVAL, err, errlen,
                                "truncated: the stream ends at byte %llu, inside the data of "
                                "the member at byte %llu",
                                (unsigned long long)t->off, (unsigned long long)at);
            has_long = has_size = 0, first_hdr = UINT64_MAX;
            continue;
        }
        t->name[0] = 0;
        if (has_long)
            memcpy(t->name, long_name, strlen(long_name) + 1);
        else {
            if (!memcmp(h + 257, "ustar", 6) && h[345]) { /* POSIX: prefix "/" name */
                field_str(t->name, h + 345, 155);
                strcat(t->name, "/");
            }
            field_str(t->name, h, 100);
        }
        t->hdr_off = first_hdr;
        t->size = t->left = size;
        return 1;
    }
}

int bfs_tar_read(bfs_tar *t, void *buf, size_t n, char *err, size_t errlen)
{
    char pn[256];
    if (n > t->left)
        return bfs_errf(-EINVAL, err, errlen, "read past the member");
    ssize_t r = read_some(t, buf, n);
    if (r < 0)
        return bfs_errf((int)r, err, errlen, "reading: %s", bfs_strerror((int)r));
    t->left -= (uint64_t)r;
    if ((size_t)r < n)
        return bfs_errf(-EINVAL, err, errlen,
                        "truncated: the stream ends at byte %llu, inside member '%s' (header at "
                        "byte %llu, %llu bytes)",
                        (unsigned long long)t->off, printable(t->name, pn, sizeof pn),
                        (unsigned long long)t->hdr_off, (unsigned long long)t->size);
    return 0;
}

/* ---- labels ---------------------------------------------------------------------------- */

static int is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

int bfs_wds_cls_label(const char *p, size_t n, int64_t *v)
{
    size_t i = 0;
    while (i < n && is_blank(p[i]))
        i++;
    while (n > i && is_blank(p[n - 1]))
        n--;
    int neg = i < n && p[i] == '-';
    i += (size_t)neg;
    if (i == n)
        return -EINVAL;
    uint64_t x = 0;
    for (; i < n; i++) {
        if (p[i] < '0' || p[i] > '9' || x > ((uint64_t)INT64_MAX - 9) / 10)
            return -EINVAL;
        x = x * 10 + (uint64_t)(p[i] - '0');
    }
    *v = neg ? -(int64_t)x : (int64_t)x;
    return 0;
}

int bfs_wds_json_label(const char *p, size_t n, const char *key, int64_t *v)
{
    if (memchr(p, 0, n)) /* jansson would end the text there */
        return -EINVAL;
    json_error_t je;
    json_t *root = json_loadb(p, n, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return -EINVAL;
    int result = -EINVAL;
    if (json_is_object(root)) {
        json_t *x = json_object_get(root, key);
        result = !x ? 1 : !json_is_integer(x) ? 2 : 0;
        if (!result)
            *v = (int64_t)json_integer_value(x);
    }
    json_decref(root);
    return result;
}

/* ---- WebDataset samples ---------------------------------------------------------------- */

void bfs_wds_init(bfs_wds *w, bfs_shard_in in, const char *image_ext, const char *label_key)
{
    memset(w, 0, sizeof *w);
    bfs_tar_init(&w->tar, in);
    w->image_ext = image_ext;
    w->label_key = label_key ? label_key : "label";
}

/* Where the key of name ends (its last component's first '.'), or NULL when it has none
 * after at least one other byte. */
static const char *key_end(const char *name)
{
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    const char *dot = strchr(base, '.');
    return dot && dot > base ? dot : NULL;
}

/* The whole current member (at most max bytes, else *too_big) into a malloc'ed buffer. */
static int take_member(bfs_tar *t, uint64_t max, uint8_t **out, size_t *len, int *too_big,
                       char *err, size_t errlen)
{
    *out = NULL, *len = 0, *too_big = 0;
    if (t->size > max) {
        *too_big = 1;
        return 0;
    }
    /* grown as it is read, so a size field that lies costs no more than the bytes there */
    size_t cap = t->size < ((uint64_t)1 << 20) ? (size_t)t->size : (size_t)1 << 20, got = 0;
    uint8_t *b = malloc(cap ? cap : 1);
    while (b && got < t->size) {
        if (got == cap) {
            size_t nc = cap * 2 < t->size ? cap * 2 : (size_t)t->size;
            uint8_t *nb = realloc(b, nc);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb, cap = nc;
        }
        int rc = bfs_tar_read(t, b + got, cap - got, err, errlen);
        if (rc) {
            free(b);
            return rc;
        }
        got = cap;
    }
    if (!b)
        return bfs_errf(-ENOMEM, err, errlen, "out of memory (a member of %llu bytes)",
                        (unsigned long long)t->size);
    *out = b, *len = (size_t)t->size;
    return 0;
}

/* The next member of the sample being read (*open: its first member was seen): 1 with the
 * member's extension in *ext, its data next in the stream (the first member sets w->key and
 * *offset); 0 when the sample ends (at the shard's end, or at the next sample's first
 * member, which stays pending); or bfs_tar_next's error. Members without a key are
 * counted in w->ignored and read past. */
static int next_member(bfs_wds *w, int *open, uint64_t *offset, const char **ext, char *err,
                       size_t errlen)
{
    bfs_tar *t = &w->tar;
    for (;;) {
        if (!w->pending) {
            int rc = bfs_tar_next(t, err, errlen);
            if (rc <= 0)
                return rc;
            w->pending = 1;
        }
        const char *ke = key_end(t->name);
        if (!ke) {
            w->ignored++;
            w->pending = 0;
            continue;
        }
        size_t klen = (size_t)(ke - t->name);
        if (*open && (strlen(w->key) != klen || memcmp(w->key, t->name, klen)))
            return 0; /* the next sample's first member: stays pending */
        if (!*open) {
            *open = 1;
            memcpy(w->key, t->name, klen);
            w->key[klen] = 0;
            *offset = t->hdr_off;
        }
        w->pending = 0;
        *ext = ke + 1;
        return 1;
    }
}

int bfs_wds_next(bfs_wds *w, bfs_shard_sample *s, char *err, size_t errlen)
{
    bfs_tar *t = &w->tar;
    int open = 0, have_cls = 0, cls_bad = 0, json_state = 1, image_big = 0;
    int64_t cls = 0, json_v = 0;
    memset(s, 0, sizeof *s);
    for (;;) {
        const char *ext;
        int mrc = next_member(w, &open, &s->offset, &ext, err, errlen);
        if (mrc < 0) {
            free(s->image);
            memset(s, 0, sizeof *s);
            return mrc;
        }
        if (mrc == 0)
            break;
        int is_image = w->image_ext ? !strcasecmp(ext, w->image_ext)
                                    : !strcasecmp(ext, "jpg") || !strcasecmp(ext, "jpeg");
        uint8_t *data = NULL;
        size_t len = 0;
        int big, rc = 0;
        if (is_image && !s->image && !image_big) {
            rc = take_member(t, BFS_SHARD_IMAGE_MAX, &s->image, &s->image_len, &image_big, err,
                             errlen);
        } else if (!strcasecmp(ext, "cls") && !have_cls) {
            have_cls = 1;
            rc = take_member(t, CLS_MAX, &data, &len, &big, err, errlen);
            cls_bad = big || (!rc && bfs_wds_cls_label((const char *)data, len, &cls));
        } else if (!strcasecmp(ext, "json") && json_state == 1) {
            rc = take_member(t, JSON_MAX, &data, &len, &big, err, errlen);
            json_state = big  ? -EINVAL
                         : rc ? 1
                              : bfs_wds_json_label((const char *)data, len, w->label_key, &json_v);
            if (json_state == 1)
                json_state = 3; /* read: no such key */
        }
        free(data);
        if (rc) {
            free(s->image);
            memset(s, 0, sizeof *s);
            return rc;
        }
    }
    if (!open)
        return 0;
    s->key = w->key;
    int64_t label = have_cls ? cls : json_v;
    if (image_big)
        s->skip = "image over 256 MiB";
    else if (!s->image)
        s->skip = w->image_ext ? "no image (no member of the --image-key extension)"
                               : "no image (no .jpg or .jpeg member)";
    else if (have_cls && cls_bad)
        s->skip = "bad .cls (not a decimal integer)";
    else if (!have_cls && json_state == 1)
        s->skip = "no label (no .cls member, no .json member)";
    else if (!have_cls && json_state == 3)
        s->skip = "no label (no .cls member; the .json has no label key)";
    else if (!have_cls && json_state < 0)
        s->skip = "bad .json (not one JSON object, or the label key twice)";
    else if (!have_cls && json_state == 2)
        s->skip = "the .json's label is not an integer";
    else if (label < 0 || label > BFS_SHARD_LABEL_MAX)
        s->skip = "label out of range (0..16777215)";
    s->label = label;
    return 1;
}

int bfs_wds_next_members(bfs_wds *w, bfs_members *m, uint64_t *offset, char *err, size_t errlen)
{
    bfs_tar *t = &w->tar;
    int open = 0;
    bfs_members_clear(m);
    for (;;) {
        const char *ext;
        int rc = next_member(w, &open, offset, &ext, err, errlen);
        if (rc < 0) {
            bfs_members_clear(m);
            return rc;
        }
        if (rc == 0)
            break;
        uint8_t *data = NULL;
        size_t len = 0;
        int big;
        rc = take_member(t, BFS_SHARD_IMAGE_MAX, &data, &len, &big, err, errlen);
        if (!rc)
            rc = bfs_members_add(m, ext, strlen(ext), BFS_MEMBER_BYTES, data, len, NULL);
        if (!rc && big)
            m->v[m->n - 1].bad = 1, m->v[m->n - 1].why = "over 256 MiB";
        if (rc) {
            bfs_members_clear(m);
            return rc == -ENOMEM ? bfs_errf(rc, err, errlen, "out of memory") : rc;
        }
    }
    return open;
}
