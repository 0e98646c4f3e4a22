/*
 * record.c — members of a sample into the values of named fields (see record.h).
 *
 * Numbers go through one collector (nums): whatever holds them (a JSON list of lists, an
 * int64_list, a .npy) gives a flat list of values with their shape, which is checked
 * against the field's declaration and then stored in its dtype. Integers stay int64 all
 * the way (no double round trip), so i64 values are exact.
 */
#include "engine/dataset/record.h"
#include "engine/dataset/image.h"
#include "engine/dataset/pack.h"
#include "engine/dataset/shard.h"
#include "engine/dataset/wds.h"
#include "base/endian.h"
#include "base/err.h"
#include "base/utf8.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define JSON_MEMBER_MAX ((size_t)16 << 20) /* a JSON member parsed for a key */

/* ---- members ----------------------------------------------------------------------------- */

int bfs_members_add(bfs_members *m, const char *name, size_t namelen, int type, void *data,
                    size_t len, void *json)
{
    if (m->n == m->cap) {
        size_t c = m->cap ? m->cap * 2 : 8;
        bfs_member *v = realloc(m->v, c * sizeof *v);
        if (!v)
            goto fail;
        m->v = v, m->cap = c;
    }
    char *nm = malloc(namelen + 1);
    if (!nm)
        goto fail;
    memcpy(nm, name, namelen);
    nm[namelen] = 0;
    m->v[m->n++] = (bfs_member){.name = nm, .type = type, .data = data, .len = len, .json = json};
    return 0;
fail:
    free(data);
    json_decref(json);
    return -ENOMEM;
}

void bfs_members_clear(bfs_members *m)
{
    for (size_t i = 0; m && i < m->n; i++) {
        free(m->v[i].name);
        free(m->v[i].data);
        json_decref(m->v[i].json);
    }
    if (m)
        m->n = 0;
}

void bfs_members_free(bfs_members *m)
{
    if (!m)
        return;
    bfs_members_clear(m);
    free(m->v);
    m->v = NULL;
    m->cap = 0;
}

const bfs_member *bfs_members_find(const bfs_members *m, const char *name, int nocase)
{
    for (size_t i = 0; i < m->n; i++)
        if (nocase ? !strcasecmp(m->v[i].name, name) : !strcmp(m->v[i].name, name))
            return &m->v[i];
    return NULL;
}

/* ---- --field ----------------------------------------------------------------------------- */

static const char *const kind_words[] = {NULL,    "image", "text",  "tokens",
                                         "array", "boxes", "bytes", "label"};
static const char *const dtype_words[] = {"u8", "u16", "u32", "i32", "i64", "f32"};

static int word(const char *const *words, int n, const char *s, size_t len)
{
    for (int i = 0; i < n; i++)
        if (words[i] && strlen(words[i]) == len && !memcmp(words[i], s, len))
            return i;
    return -1;
}

void bfs_field_name_from(const char *src, char out[BFS_FIELD_NAME_MAX + 1])
{
    size_t k = 0;
    if (src[0] >= '0' && src[0] <= '9')
        out[k++] = '_';
    for (size_t i = 0; src[i] && k < BFS_FIELD_NAME_MAX; i++) {
        char c = src[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        out[k++] = ok ? c : '_';
    }
    if (!k)
        out[k++] = '_';
    out[k] = 0;
}

static int name_valid(const char *s, size_t n)
{
    if (n < 1 || n > BFS_FIELD_NAME_MAX || (s[0] >= '0' && s[0] <= '9'))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
            return 0;
    return 1;
}

int bfs_field_spec_parse(const char *arg, bfs_field_spec *s, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->dtype = -1;
    const char *eq = strchr(arg, '=');
    if (!eq)
        return bfs_errf(-EINVAL, err, errlen,
                        "--field '%s': expected NAME=MEMBER[:KEY][:KIND[:DTYPE]] (e.g. "
                        "caption=txt:text)",
                        arg);
    if (!name_valid(arg, (size_t)(eq - arg)))
        return bfs_errf(-EINVAL, err, errlen,
                        "--field '%s': the name must be 1..%u letters, digits and _, not "
                        "starting with a digit",
                        arg, BFS_FIELD_NAME_MAX);
    memcpy(s->name, arg, (size_t)(eq - arg));
    /* split the rest on ':' */
    const char *tok[16];
    size_t tlen[16], nt = 0;
    const char *p = eq + 1;
    for (;;) {
        const char *c = strchr(p, ':');
        size_t l = c ? (size_t)(c - p) : strlen(p);
        if (nt == 16)
            return bfs_errf(-EINVAL, err, errlen, "--field '%s': too many ':' parts", arg);
        tok[nt] = p, tlen[nt++] = l;
        if (!c)
            break;
        p = c + 1;
    }
    for (size_t i = 0; i < nt; i++)
        if (!tlen[i])
            return bfs_errf(-EINVAL, err, errlen, "--field '%s': an empty part", arg);
    while (nt > 1) { /* flags at the end */
        if (tlen[nt - 1] == 8 && !memcmp(tok[nt - 1], "optional", 8))
            s->optional = 1;
        else if (tlen[nt - 1] > 8 && !memcmp(tok[nt - 1], "follows=", 8)) {
            if (!name_valid(tok[nt - 1] + 8, tlen[nt - 1] - 8))
                return bfs_errf(-EINVAL, err, errlen,
                                "--field '%s': follows= names a field (letters, digits, _)", arg);
            memcpy(s->follows, tok[nt - 1] + 8, tlen[nt - 1] - 8);
        } else
            break;
        nt--;
    }
    if (nt > 2) { /* a dtype after array or tokens */
        int d = word(dtype_words, BFS_FDT_END, tok[nt - 1], tlen[nt - 1]);
        int k = word(kind_words, 8, tok[nt - 2], tlen[nt - 2]);
        if (d >= 0 && (k == BFS_FIELD_ARRAY || k == BFS_FIELD_TOKENS))
            s->dtype = d, nt--;
    }
    if (nt > 1) {
        int k = word(kind_words, 8, tok[nt - 1], tlen[nt - 1]);
        if (k > 0)
            s->kind = k, nt--;
    }
    if (nt > 2)
        return bfs_errf(-EINVAL, err, errlen,
                        "--field '%s': '%.*s' is not a kind (image, text, tokens, array, boxes, "
                        "bytes, label), and a member has one key at most",
                        arg, (int)tlen[nt - 1], tok[nt - 1]);
    if (tlen[0] > BFS_SPEC_SRC_MAX || (nt == 2 && tlen[1] > BFS_SPEC_SRC_MAX))
        return bfs_errf(-EINVAL, err, errlen, "--field '%s': a member or key over %d bytes", arg,
                        BFS_SPEC_SRC_MAX);
    memcpy(s->member, tok[0], tlen[0]);
    if (nt == 2)
        memcpy(s->key, tok[1], tlen[1]);
    if (s->dtype >= 0 && s->kind == BFS_FIELD_TOKENS && s->dtype != BFS_FDT_U16 &&
        s->dtype != BFS_FDT_U32)
        return bfs_errf(-EINVAL, err, errlen, "--field '%s': tokens are u16 or u32", arg);
    if (s->follows[0] && s->kind && s->kind != BFS_FIELD_ARRAY)
        return bfs_errf(-EINVAL, err, errlen,
                        "--field '%s': only an array follows a boxes field (one value per box)",
                        arg);
    if (s->kind == BFS_SPEC_LABEL && s->optional)
        return bfs_errf(-EINVAL, err, errlen,
                        "--field '%s': the label is never optional (a sample without one is "
                        "skipped)",
                        arg);
    return 0;
}

/* ---- .npy and image sniffing --------------------------------------------------------------- */

static const char *skip_ws(const char *s, const char *end)
{
    while (s < end && (*s == ' ' || *s == '\t' || *s == '\n'))
        s++;
    return s;
}

/* The value after 'key': (quoted either way) in the header dict s[0..end). */
static const char *dict_value(const char *s, const char *end, const char *key)
{
    size_t k = strlen(key);
    for (const char *q = s; q + k + 2 < end; q++)
        if ((*q == '\'' || *q == '"') && !memcmp(q + 1, key, k) && q[k + 1] == *q) {
            const char *v = skip_ws(q + k + 2, end);
            if (v < end && *v == ':')
                return skip_ws(v + 1, end);
        }
    return NULL;
}

int bfs_npy_array(const uint8_t *p, size_t n, char descr[4], int *rank, uint64_t shape[4],
                  uint64_t *count, size_t *data_off, char *err, size_t errlen)
{
    if (n < 10 || memcmp(p, "\x93NUMPY", 6))
        return bfs_errf(-EINVAL, err, errlen, "not a .npy file (no \\x93NUMPY magic)");
    size_t hlen, start;
    if (p[6] == 1)
        hlen = bfs_ld16(p + 8), start = 10;
    else if ((p[6] == 2 || p[6] == 3) && n >= 12)
        hlen = bfs_ld32(p + 8), start = 12;
    else
        return bfs_errf(-EINVAL, err, errlen, ".npy format version %d is not 1, 2 or 3", p[6]);
    if (hlen > n - start)
        return bfs_errf(-EINVAL, err, errlen, ".npy header of %zu bytes cut short", hlen);
    const char *s = (const char *)p + start, *end = s + hlen, *v;
    if (!(v = dict_value(s, end, "descr")) || end - v < 5 || (*v != '\'' && *v != '"') ||
        v[4] != *v)
        return bfs_errf(-EINVAL, err, errlen, ".npy header: no plain 'descr' string");
    static const char *const ok[] = {"|u1", "<u2", "<u4", "<i4", "<i8",
                                     "<f4", "|i1", "<i2", "<f8", "|b1"};
    memcpy(descr, v + 1, 3);
    descr[3] = 0;
    if (descr[0] == '=' || (descr[0] == '>' && descr[2] == '1'))
        descr[0] = descr[2] == '1' ? '|' : '<'; /* native: little-endian here */
    if (descr[0] == '<' && descr[2] == '1')
        descr[0] = '|';
    int known = 0;
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        known |= !strcmp(descr, ok[i]);
    if (!known)
        return bfs_errf(-EINVAL, err, errlen,
                        ".npy dtype '%.3s' is not one of u1 <u2 <u4 <i4 <i8 <f4 (or i1 <i2 <f8, "
                        "converted; little-endian)",
                        v + 1);
    if (!(v = dict_value(s, end, "fortran_order")) || end - v < 5 || memcmp(v, "False", 5))
        return bfs_errf(-EINVAL, err, errlen, ".npy header: not C order (fortran_order False)");
    if (!(v = dict_value(s, end, "shape")) || *v != '(')
        return bfs_errf(-EINVAL, err, errlen, ".npy header: no shape tuple");
    v++;
    int r = 0;
    uint64_t total = 1;
    for (;;) {
        v = skip_ws(v, end);
        if (v < end && *v == ')')
            break;
        uint64_t d = 0;
        int digits = 0;
        while (v < end && *v >= '0' && *v <= '9' && digits < 12)
            d = d * 10 + (uint64_t)(*v++ - '0'), digits++;
        if (!digits || r == 4)
            return bfs_errf(-EINVAL, err, errlen, ".npy shape: not a tuple of up to 4 sizes");
        shape[r++] = d;
        total = d && total > UINT32_MAX / d ? UINT64_MAX : total * d;
        v = skip_ws(v, end);
        if (v < end && *v == ',')
            v++;
        else if (v >= end || *v != ')')
            return bfs_errf(-EINVAL, err, errlen, ".npy shape: not a tuple of up to 4 sizes");
    }
    size_t es = (size_t)(descr[2] - '0');
    if (total > UINT32_MAX)
        return bfs_errf(-EINVAL, err, errlen, ".npy shape: over 2^32 elements");
    if ((uint64_t)(n - start - hlen) != total * es)
        return bfs_errf(-EINVAL, err, errlen,
                        ".npy holds %zu bytes of data; its header says %llu (%llu elements of "
                        "%zu bytes)",
                        n - start - hlen, (unsigned long long)(total * es),
                        (unsigned long long)total, es);
    *rank = r, *count = total, *data_off = start + hlen;
    return 0;
}

/* ---- numbers ------------------------------------------------------------------------------- */

typedef struct nums {
    int64_t *i;
    double *d;
    uint8_t *isint;
    size_t n, cap;
    int rank; /* -1: flat (no shape known) */
    uint64_t dims[4];
    int hint; /* a .npy's dtype as stored (BFS_FDT_*), or -1 */
} nums;

static void nums_free(nums *x)
{
    free(x->i);
    free(x->d);
    free(x->isint);
}

static int nums_push(nums *x, int isint, int64_t i, double d)
{
    if (x->n == x->cap) {
        size_t c = x->cap ? x->cap * 2 : 64;
        int64_t *ni = realloc(x->i, c * sizeof *ni);
        if (ni)
            x->i = ni;
        double *nd = ni ? realloc(x->d, c * sizeof *nd) : NULL;
        if (nd)
            x->d = nd;
        uint8_t *nb = nd ? realloc(x->isint, c) : NULL;
        if (!nb)
            return -ENOMEM;
        x->isint = nb, x->cap = c;
    }
    x->i[x->n] = i, x->d[x->n] = d, x->isint[x->n] = (uint8_t)isint;
    x->n++;
    return 0;
}

/* A JSON number or (nested, rectangular) list of numbers at depth into x. 0, -ENOMEM, or
 * 1 with *why set. */
static int nums_json(nums *x, json_t *j, int depth, const char **why)
{
    if (json_is_number(j)) {
        if (x->rank >= 0 && x->rank != depth) {
            *why = "a list mixes numbers and lists";
            return 1;
        }
        x->rank = depth;
        return json_is_integer(j)
                   ? nums_push(x, 1, json_integer_value(j), (double)json_integer_value(j))
                   : nums_push(x, 0, 0, json_real_value(j));
    }
    const char *bad = NULL;
    size_t len = json_array_size(j);
    if (!json_is_array(j))
        bad = json_is_string(j) ? "a string, not numbers" : "not numbers";
    else if (depth == 4)
        bad = "lists nested over 4 deep";
    else if (x->rank >= 0 && x->rank <= depth)
        bad = "a list mixes numbers and lists";
    else if (x->dims[depth] != UINT64_MAX && x->dims[depth] != len)
        bad = "lists of different lengths (rows must have one shape)";
    if (bad) {
        *why = bad;
        return 1;
    }
    x->dims[depth] = len;
    if (len == 0) {
        if (x->rank < 0)
            x->rank = depth + 1;
        return 0;
    }
    for (size_t k = 0; k < len; k++) {
        int rc = nums_json(x, json_array_get(j, k), depth + 1, why);
        if (rc)
            return rc;
    }
    return 0;
}

/* A .npy's elements into x with its shape. */
static int nums_npy(nums *x, const uint8_t *p, size_t n, char *whybuf, size_t whycap,
                    const char **why)
{
    char descr[4];
    int rank;
    uint64_t shape[4], count;
    size_t off;
    char e[200];
    if (bfs_npy_array(p, n, descr, &rank, shape, &count, &off, e, sizeof e)) {
        snprintf(whybuf, whycap, "bad .npy: %s", e);
        *why = whybuf;
        return 1;
    }
    x->rank = rank;
    memcpy(x->dims, shape, sizeof x->dims);
    x->hint = descr[1] == 'f'                            ? BFS_FDT_F32
              : descr[1] == 'b' || !strcmp(descr, "|u1") ? BFS_FDT_U8
              : !strcmp(descr, "<u2")                    ? BFS_FDT_U16
              : !strcmp(descr, "<u4")                    ? BFS_FDT_U32
              : !strcmp(descr, "<i8")                    ? BFS_FDT_I64
                                                         : BFS_FDT_I32;
    const uint8_t *d = p + off;
    for (uint64_t k = 0; k < count; k++) {
        int rc;
        switch (descr[1] == 'f'   ? (descr[2] == '4' ? 10 : 11)
                : descr[1] == 'b' ? 1
                                  : descr[2] - '0') {
        case 1:
            rc = descr[1] == 'i' ? nums_push(x, 1, (int8_t)d[k], 0) : nums_push(x, 1, d[k], 0);
            break;
        case 2:
            rc = nums_push(x, 1,
                           descr[1] == 'i' ? (int16_t)bfs_ld16(d + 2 * k) : bfs_ld16(d + 2 * k), 0);
            break;
        case 4:
            rc = nums_push(x, 1,
                           descr[1] == 'i' ? (int64_t)(int32_t)bfs_ld32(d + 4 * k)
                                           : (int64_t)bfs_ld32(d + 4 * k),
                           0);
            break;
        case 8:
            rc = nums_push(x, 1, (int64_t)bfs_ld64(d + 8 * k), 0);
            break;
        case 10: {
            uint32_t u = bfs_ld32(d + 4 * k);
            float f;
            memcpy(&f, &u, 4);
            rc = nums_push(x, 0, 0, f);
            break;
        }
        default: {
            uint64_t u = bfs_ld64(d + 8 * k);
            double f;
            memcpy(&f, &u, 8);
            rc = nums_push(x, 0, 0, f);
            break;
        }
        }
        if (rc)
            return rc;
        if (x->isint[x->n - 1])
            x->d[x->n - 1] = (double)x->i[x->n - 1];
    }
    return 0;
}

/* The dtype values suggest: i64 when every one is an integer, else f32. */
static int nums_dtype(const nums *x)
{
    for (size_t k = 0; k < x->n; k++)
        if (!x->isint[k])
            return BFS_FDT_F32;
    return BFS_FDT_I64;
}

/* x stored in dtype into v. 0, -ENOMEM, or 1 with why. */
static int nums_store(const nums *x, int dtype, bfs_value *v, const char **why)
{
    size_t es = bfs_fdt_size((unsigned)dtype);
    uint8_t *b = malloc(x->n ? x->n * es : 1);
    if (!b)
        return -ENOMEM;
    static const int64_t lo[] = {0, 0, 0, INT32_MIN, INT64_MIN};
    static const int64_t hi[] = {255, 65535, 4294967295LL, INT32_MAX, INT64_MAX};
    for (size_t k = 0; k < x->n; k++) {
        if (dtype == BFS_FDT_F32) {
            float f = (float)x->d[k];
            if (x->isint[k])
                f = (float)x->i[k];
            uint32_t u;
            memcpy(&u, &f, 4);
            bfs_st32(b + 4 * k, u);
            continue;
        }
        if (!x->isint[k]) {
            free(b);
            *why = "a fraction where the dtype holds integers";
            return 1;
        }
        int64_t i = x->i[k];
        if (i < lo[dtype] || i > hi[dtype]) {
            free(b);
            *why = "an integer out of the dtype's range";
            return 1;
        }
        switch (es) {
        case 1:
            b[k] = (uint8_t)i;
            break;
        case 2:
            bfs_st16(b + 2 * k, (uint16_t)i);
            break;
        case 4:
            bfs_st32(b + 4 * k, (uint32_t)i);
            break;
        default:
            bfs_st64(b + 8 * k, (uint64_t)i);
        }
    }
    v->data = b, v->len = x->n * es, v->count = (uint32_t)x->n;
    return 0;
}

/* ---- the source of a value ------------------------------------------------------------------ */

/* A value as found: a member, or a key of its JSON object. */
typedef struct found {
    int type; /* BFS_MEMBER_*, 0: absent */
    bfs_member *m;
    const uint8_t *bytes;
    size_t len;
    json_t *json; /* JSON (borrowed) */
} found;

/* The member (and key) spec names, from m; *parsed holds a parse of a bytes member as
 * JSON (to be freed by the caller). 0, or 1 with why (not JSON, not an object). */
static int find(const bfs_schema *s, const bfs_field_spec *sp, bfs_members *m, found *f,
                json_t **parsed, char *whybuf, size_t whycap, const char **why)
{
    memset(f, 0, sizeof *f);
    bfs_member *mb = (bfs_member *)bfs_members_find(m, sp->member, s->src == BFS_SRC_WDS);
    if (!mb)
        return 0;
    if (mb->bad) {
        snprintf(whybuf, whycap, "member '%s': %s", mb->name, mb->why);
        *why = whybuf;
        return 1;
    }
    f->m = mb;
    if (!sp->key[0]) {
        f->type = mb->type, f->bytes = mb->data, f->len = mb->len, f->json = mb->json;
        if (mb->type == BFS_MEMBER_JSON && json_is_null((json_t *)mb->json))
            f->type = 0; /* a null column: no value */
        return 0;
    }
    json_t *obj = mb->json;
    if (mb->type == BFS_MEMBER_BYTES) {
        json_error_t je;
        if (mb->len > JSON_MEMBER_MAX || memchr(mb->data, 0, mb->len) ||
            !(*parsed = json_loadb(mb->data, mb->len, JSON_REJECT_DUPLICATES, &je))) {
            snprintf(whybuf, whycap, "member '%s': not JSON (%s)", mb->name,
                     mb->len > JSON_MEMBER_MAX ? "over 16 MiB" : je.text);
            *why = whybuf;
            return 1;
        }
        obj = *parsed;
    }
    if (mb->type != BFS_MEMBER_BYTES && mb->type != BFS_MEMBER_JSON) {
        snprintf(whybuf, whycap, "member '%s' holds numbers, not a JSON object with key '%s'",
                 mb->name, sp->key);
        *why = whybuf;
        return 1;
    }
    if (!json_is_object(obj)) {
        snprintf(whybuf, whycap, "member '%s': not a JSON object (for key '%s')", mb->name,
                 sp->key);
        *why = whybuf;
        return 1;
    }
    json_t *j = json_object_get(obj, sp->key);
    if (j && !json_is_null(j))
        f->type = BFS_MEMBER_JSON, f->json = j;
    return 0;
}

/* "member 'json' key 'boxes'" for messages. */
static const char *where(const bfs_field_spec *sp, char *buf, size_t cap)
{
    if (sp->key[0])
        snprintf(buf, cap, "member '%s' key '%s'", sp->member, sp->key);
    else
        snprintf(buf, cap, "member '%s'", sp->member);
    return buf;
}

/* The numbers of a found value into x. 0, -ENOMEM, 1 with why. */
static int collect(const found *f, nums *x, char *whybuf, size_t whycap, const char **why)
{
    memset(x, 0, sizeof *x);
    x->rank = -1;
    x->hint = -1;
    for (int k = 0; k < 4; k++)
        x->dims[k] = UINT64_MAX;
    switch (f->type) {
    case BFS_MEMBER_INTS:
        for (size_t k = 0; k < f->m->len; k++)
            if (nums_push(x, 1, ((int64_t *)f->m->data)[k], (double)((int64_t *)f->m->data)[k]))
                return -ENOMEM;
        x->rank = -1;
        return 0;
    case BFS_MEMBER_FLOATS:
        for (size_t k = 0; k < f->m->len; k++)
            if (nums_push(x, 0, 0, ((float *)f->m->data)[k]))
                return -ENOMEM;
        x->rank = -1;
        return 0;
    case BFS_MEMBER_JSON: {
        int rc = nums_json(x, f->json, 0, why);
        if (x->rank < 0)
            x->rank = 0;
        return rc;
    }
    default:
        if (f->len >= 6 && !memcmp(f->bytes, "\x93NUMPY", 6))
            return nums_npy(x, f->bytes, f->len, whybuf, whycap, why);
        *why = "bytes, not numbers (a .npy, a JSON list or a numeric feature)";
        return 1;
    }
}

/* x's shape against field d: a fixed shape (or its element count, for a flat x), or
 * whole rows of the row shape. 1 with why when not. */
static int shape_ok(const nums *x, const bfs_field *d, const char **why)
{
    uint64_t per = 1;
    for (unsigned k = 0; k < d->rank; k++)
        per *= d->shape[k];
    if ((d->flags & BFS_FIELDF_VARIABLE) && x->n == 0)
        return 0; /* no rows */
    if (x->rank < 0 || ((d->flags & BFS_FIELDF_VARIABLE) && (!d->rank || x->rank <= 1))) {
        /* flat: whole rows of values (boxes: 4k numbers) */
        if (d->flags & BFS_FIELDF_VARIABLE ? x->n % per : x->n != per)
            return *why = "a number of values that is not whole rows of the field's shape", 1;
        return 0;
    }
    if (d->flags & BFS_FIELDF_VARIABLE) {
        /* rows: [N, shape...], or one row [shape...] */
        int r = x->rank;
        if (r == (int)d->rank + 1) {
            for (unsigned k = 0; k < d->rank; k++)
                if (x->dims[k + 1] != d->shape[k] && x->n)
                    return *why = "rows of another shape than the field's", 1;
            return 0;
        }
        if (r == (int)d->rank && x->n == per) {
            for (unsigned k = 0; k < d->rank; k++)
                if (x->dims[k] != d->shape[k])
                    return *why = "rows of another shape than the field's", 1;
            return 0;
        }
        return *why = "rows of another shape than the field's", 1;
    }
    if (x->n != per)
        return *why = "another shape than the field's (fixed)", 1;
    return 0;
}

/* Control bytes of s (member names and JSON come from the data) as '?': one line. */
static void one_line(char *s)
{
    for (; s && *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = '?';
}

/* ---- conversion ------------------------------------------------------------------------------ */

static int fail(char *whybuf, size_t whycap, const char **why, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *whybuf, size_t whycap, const char **why, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(whybuf, whycap, fmt, ap);
    va_end(ap);
    *why = whybuf;
    return 1;
}

/* A label from a found value: 0 with *label, 1 with why. */
static int label_of(const found *f, int64_t *label, const char **why)
{
    if (f->type == BFS_MEMBER_BYTES) {
        if (bfs_wds_cls_label((const char *)f->bytes, f->len, label))
            return *why = "not a decimal integer", 1;
    } else if (f->type == BFS_MEMBER_INTS) {
        if (f->m->len != 1)
            return *why = "not one int64 value", 1;
        *label = ((int64_t *)f->m->data)[0];
    } else if (f->type == BFS_MEMBER_JSON) {
        json_t *j = f->json;
        if (json_is_array(j) && json_array_size(j) == 1)
            j = json_array_get(j, 0);
        if (!json_is_integer(j))
            return *why = "not an integer", 1;
        *label = json_integer_value(j);
    } else
        return *why = "not an integer", 1;
    if (*label < 0 || *label > BFS_SHARD_LABEL_MAX)
        return *why = "label out of range (0..16777215)", 1;
    return 0;
}

/* The value of field k from f into v. 0, -ENOMEM, 1 with why (the reason only). */
static int value_of(const bfs_field *d, const found *f, bfs_value *v, char *whybuf, size_t whycap,
                    const char **why)
{
    switch (d->kind) {
    case BFS_FIELD_IMAGE:
        if (f->type != BFS_MEMBER_BYTES)
            return *why = "not image bytes", 1;
        if (!f->len)
            return *why = "empty, not an image", 1;
        v->data = f->m->data, v->len = f->m->len; /* taken */
        f->m->data = NULL, f->m->len = 0;
        return 0;
    case BFS_FIELD_TEXT:
    case BFS_FIELD_BYTES: {
        const uint8_t *p = f->bytes;
        size_t n = f->len;
        char *dump = NULL;
        if (f->type == BFS_MEMBER_JSON && f->bytes)
            ; /* a CSV cell: its text as written, whatever it looks like */
        else if (f->type == BFS_MEMBER_JSON && json_is_string(f->json))
            p = (const uint8_t *)json_string_value(f->json), n = json_string_length(f->json);
        else if (f->type == BFS_MEMBER_JSON && d->kind == BFS_FIELD_BYTES) {
            if (!(dump = json_dumps(f->json, JSON_COMPACT | JSON_ENCODE_ANY)))
                return -ENOMEM;
            p = (const uint8_t *)dump, n = strlen(dump);
        } else if (f->type != BFS_MEMBER_BYTES)
            return *why = d->kind == BFS_FIELD_TEXT ? "not text (a string)" : "numbers, not bytes",
                   1;
        if (d->kind == BFS_FIELD_TEXT && !bfs_utf8_valid(p, n))
            return *why = "text that is not UTF-8", 1;
        if (n > UINT32_MAX) {
            free(dump);
            return *why = "over 4 GiB", 1;
        }
        v->data = malloc(n ? n : 1);
        if (!v->data) {
            free(dump);
            return -ENOMEM;
        }
        if (n)
            memcpy(v->data, p, n);
        v->len = n, v->count = (uint32_t)n;
        free(dump);
        return 0;
    }
    default: { /* array, tokens, boxes */
        nums x;
        int rc = collect(f, &x, whybuf, whycap, why);
        if (!rc && !shape_ok(&x, d, why))
            rc = nums_store(&x, d->dtype, v, why);
        else if (!rc)
            rc = 1;
        nums_free(&x);
        return rc;
    }
    }
}

int bfs_schema_convert(const bfs_schema *s, bfs_members *m, bfs_record *rec, char *whybuf,
                       size_t whycap, const char **why)
{
    memset(rec, 0, sizeof *rec);
    *why = NULL;
    char wb[600], inner[400];
    json_t *parsed = NULL;
    found f;
    int rc = 0;
    const char *r = NULL;
    /* the label */
    if (s->has_label) {
        const bfs_member *cls = s->label_json_fallback ? bfs_members_find(m, "cls", 1) : NULL;
        int64_t label = 0;
        if (s->label_json_fallback && !cls) { /* WebDataset: the .json's key */
            const bfs_member *js = bfs_members_find(m, "json", 1);
            if (!js)
                return fail(whybuf, whycap, why, "no label (no .cls member, no .json member)");
            int jr =
                js->bad ? -EINVAL : bfs_wds_json_label(js->data, js->len, s->label_key, &label);
            if (jr == 1)
                return fail(whybuf, whycap, why,
                            "no label (no .cls member; the .json has no label key)");
            if (jr < 0)
                return fail(whybuf, whycap, why,
                            "bad .json (not one JSON object, or the label key twice)");
            if (jr == 2)
                return fail(whybuf, whycap, why, "the .json's label is not an integer");
            if (label < 0 || label > BFS_SHARD_LABEL_MAX)
                return fail(whybuf, whycap, why, "label out of range (0..16777215)");
        } else {
            if ((rc = find(s, &s->label, m, &f, &parsed, whybuf, whycap, why)))
                goto out;
            if (!f.type) {
                rc = fail(whybuf, whycap, why, "no label (no %s)", where(&s->label, wb, sizeof wb));
                goto out;
            }
            if (label_of(&f, &label, &r)) {
                rc = s->label_json_fallback && !strcmp(r, "not a decimal integer")
                         ? fail(whybuf, whycap, why, "bad .cls (not a decimal integer)")
                         : fail(whybuf, whycap, why, "%s: %s (the label)",
                                where(&s->label, wb, sizeof wb), r);
                goto out;
            }
            json_decref(parsed);
            parsed = NULL;
        }
        rec->label = (uint32_t)label;
    }
    for (uint32_t k = 0; k < s->n && !rc; k++) {
        const bfs_field_spec *sp = &s->from[k];
        const bfs_field *d = &s->f[k];
        if ((rc = find(s, sp, m, &f, &parsed, whybuf, whycap, why)))
            break;
        if (!f.type) {
            if (!(d->flags & BFS_FIELDF_OPTIONAL))
                rc = k == 0 && s->src == BFS_SRC_WDS && !s->explicit_fields
                         ? fail(whybuf, whycap, why, "no image (no .%s member)", sp->member)
                         : fail(whybuf, whycap, why, "no %s (field %s is required)",
                                where(sp, wb, sizeof wb), d->name);
        } else if ((rc = value_of(d, &f, &rec->v[k], inner, sizeof inner, &r)) == 1)
            fail(whybuf, whycap, why, "%s: %s (field %s, %s)", where(sp, wb, sizeof wb), r, d->name,
                 bfs_field_kind_name(d->kind));
        json_decref(parsed);
        parsed = NULL;
    }
    for (uint32_t k = 0; k < s->n && !rc; k++) /* per-box values pair with their boxes */
        if (s->f[k].follows != BFS_FIELD_NONE &&
            (uint64_t)rec->v[k].count * 4 != rec->v[s->f[k].follows].count)
            rc = fail(whybuf, whycap, why, "field %s has %u values, and its boxes %s %u boxes",
                      s->f[k].name, rec->v[k].count, s->f[s->f[k].follows].name,
                      rec->v[s->f[k].follows].count / 4);
    if (!rc && !s->explicit_fields) /* members in no field */
        for (size_t i = 0; i < m->n; i++) {
            int used = s->has_label &&
                       (!strcasecmp(m->v[i].name, s->label.member) ||
                        (s->label_json_fallback &&
                         (!strcasecmp(m->v[i].name, "cls") || !strcasecmp(m->v[i].name, "json"))));
            for (uint32_t k = 0; k < s->n && !used; k++)
                used = s->src == BFS_SRC_WDS ? !strcasecmp(m->v[i].name, s->from[k].member)
                                             : !strcmp(m->v[i].name, s->from[k].member);
            rec->extra += !used;
        }
out:
    json_decref(parsed);
    if (rc)
        bfs_record_free(rec);
    if (rc == 1 && *why == whybuf)
        one_line(whybuf);
    return rc;
}

void bfs_record_free(bfs_record *rec)
{
    for (uint32_t k = 0; rec && k < BFS_FIELD_MAX; k++) {
        free(rec->v[k].data);
        rec->v[k] = (bfs_value){0};
    }
}

/* ---- the schema ------------------------------------------------------------------------------ */

static int is_image_ext(const char *e)
{
    return !strcasecmp(e, "jpg") || !strcasecmp(e, "jpeg") || !strcasecmp(e, "png") ||
           !strcasecmp(e, "webp");
}

/* The declaration a found value suggests (kind 0: by the member). 0, or 1 with why. */
static int infer(const bfs_schema *s, bfs_field_spec *sp, const found *f, bfs_field *d,
                 const char *image_key, char *whybuf, size_t whycap, const char **why)
{
    int kind = sp->kind;
    nums x = {0};
    int have_nums = 0, rc = 0;
    if (!kind) {
        if (!f->type)
            return fail(whybuf, whycap, why,
                        "--field %s: the first sample has no %s, so its kind is not known: give "
                        "it (e.g. :text)",
                        sp->name, sp->member);
        if (f->type == BFS_MEMBER_BYTES && !sp->key[0]) {
            const char *mn = f->m->name, *dot = strrchr(mn, '.');
            const char *ext = dot ? dot + 1 : mn; /* "seg.png": a png */
            int img_named = image_key && (s->src == BFS_SRC_WDS ? !strcasecmp(mn, image_key)
                                                                : !strcmp(mn, image_key));
            if (s->src == BFS_SRC_WDS)
                kind = img_named || is_image_ext(ext) ? BFS_FIELD_IMAGE
                       : !strcasecmp(ext, "txt")      ? BFS_FIELD_TEXT
                       : !strcasecmp(mn, "cls")       ? BFS_SPEC_LABEL
                       : !strcasecmp(ext, "npy")      ? BFS_FIELD_ARRAY
                                                      : BFS_FIELD_BYTES;
            else
                kind = img_named || bfs_image_sniff(f->bytes, f->len) ? BFS_FIELD_IMAGE
                                                                      : BFS_FIELD_BYTES;
        } else if (f->type == BFS_MEMBER_INTS || f->type == BFS_MEMBER_FLOATS)
            kind = BFS_FIELD_ARRAY;
        else if (f->type == BFS_MEMBER_JSON)
            kind = json_is_string(f->json)                             ? BFS_FIELD_TEXT
                   : json_is_number(f->json) || json_is_array(f->json) ? BFS_FIELD_ARRAY
                                                                       : BFS_FIELD_BYTES;
        if (kind == BFS_FIELD_ARRAY && f->type == BFS_MEMBER_JSON && json_is_array(f->json)) {
            nums y;
            const char *r;
            if (collect(f, &y, whybuf, whycap, &r) == 1)
                kind = BFS_FIELD_BYTES; /* a list of other things: kept as JSON text */
            nums_free(&y);
        }
        sp->kind = kind;
    }
    memset(d, 0, sizeof *d);
    memcpy(d->name, sp->name, sizeof d->name);
    d->kind = (uint8_t)kind;
    d->follows = BFS_FIELD_NONE;
    d->flags = kind == BFS_FIELD_IMAGE ? 0 : BFS_FIELDF_VARIABLE;
    switch (kind) {
    case BFS_FIELD_IMAGE:
    case BFS_FIELD_TEXT:
    case BFS_FIELD_BYTES:
        d->dtype = BFS_FDT_U8;
        break;
    case BFS_FIELD_TOKENS:
        d->dtype = sp->dtype >= 0 ? (uint8_t)sp->dtype : BFS_FDT_U32;
        break;
    case BFS_FIELD_BOXES:
        d->dtype = BFS_FDT_F32, d->rank = 1, d->shape[0] = 4;
        break;
    case BFS_FIELD_ARRAY: {
        /* dtype and row shape from the first sample's value when there is one */
        if (f->type) {
            const char *r = NULL;
            rc = collect(f, &x, whybuf, whycap, &r);
            have_nums = 1;
            if (rc < 0)
                goto done;
            if (rc) {
                rc = r == whybuf ? fail(whybuf, whycap, why, "--field %s: %s", sp->name, r)
                                 : fail(whybuf, whycap, why,
                                        "%s of the first sample: %s, not an array", sp->member, r);
                goto done;
            }
        }
        /* an int64_list i64, a float_list f32, a .npy its own dtype; JSON numbers i64
         * when all are integers, else (or none: an empty list) f32 */
        d->dtype = sp->dtype >= 0                 ? (uint8_t)sp->dtype
                   : f->type == BFS_MEMBER_INTS   ? BFS_FDT_I64
                   : f->type == BFS_MEMBER_FLOATS ? BFS_FDT_F32
                   : have_nums && x.hint >= 0     ? (uint8_t)x.hint
                   : have_nums && x.n             ? (uint8_t)nums_dtype(&x)
                   : have_nums                    ? BFS_FDT_F32
                                                  : BFS_FDT_I64;
        if (have_nums && x.rank > 1 && !sp->follows[0]) { /* rows of the trailing dims */
            if (x.rank > 4) {
                rc = fail(whybuf, whycap, why, "%s: over 4 dimensions", sp->member);
                goto done;
            }
            d->rank = (uint8_t)(x.rank - 1);
            for (int k = 1; k < x.rank; k++) {
                if (!x.dims[k] || x.dims[k] > UINT32_MAX) {
                    rc = fail(whybuf, whycap, why, "%s: a dimension of 0", sp->member);
                    goto done;
                }
                d->shape[k - 1] = (uint32_t)x.dims[k];
            }
        }
        break;
    }
    }
    if (sp->optional)
        d->flags |= BFS_FIELDF_OPTIONAL;
done:
    if (have_nums)
        nums_free(&x);
    return rc;
}

/* The label's source, and whether it is found in the first sample (for the defaults). */
static int label_default(bfs_schema *s, const bfs_members *first, const char *label_key)
{
    s->label.kind = BFS_SPEC_LABEL;
    if (s->src == BFS_SRC_WDS) {
        snprintf(s->label_key, sizeof s->label_key, "%s", label_key ? label_key : "label");
        snprintf(s->label.member, sizeof s->label.member, "cls");
        s->label_json_fallback = 1;
        const bfs_member *j = bfs_members_find(first, "json", 1);
        int64_t v;
        return bfs_members_find(first, "cls", 1) ||
               (j && j->type == BFS_MEMBER_BYTES && !j->bad &&
                bfs_wds_json_label(j->data, j->len, s->label_key, &v) != 1);
    }
    if (s->src == BFS_SRC_TFRECORD) {
        snprintf(s->label.member, sizeof s->label.member, "%s",
                 label_key ? label_key : "image/class/label");
        return bfs_members_find(first, s->label.member, 0) != NULL;
    }
    const char *names[] = {label_key, "label", "cls"};
    for (int i = label_key ? 0 : 1; i < 3; i++) {
        const bfs_member *mb = bfs_members_find(first, names[i], 0);
        if (mb && mb->type == BFS_MEMBER_JSON && json_is_integer((json_t *)mb->json)) {
            snprintf(s->label.member, sizeof s->label.member, "%s", names[i]);
            return 1;
        }
        if (label_key)
            break;
    }
    return 0;
}

static int schema_make(bfs_schema *s, int src, const bfs_field_spec *specs, size_t nspecs,
                       const bfs_members *first, const char *image_key, const char *label_key,
                       char *err, size_t errlen);

int bfs_schema_make(bfs_schema *s, int src, const bfs_field_spec *specs, size_t nspecs,
                    const bfs_members *first, const char *image_key, const char *label_key,
                    char *err, size_t errlen)
{
    int rc = schema_make(s, src, specs, nspecs, first, image_key, label_key, err, errlen);
    if (rc && err && errlen)
        one_line(err);
    return rc;
}

static int schema_make(bfs_schema *s, int src, const bfs_field_spec *specs, size_t nspecs,
                       const bfs_members *first, const char *image_key, const char *label_key,
                       char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->src = src;
    bfs_field_spec want[BFS_FIELD_MAX + 1];
    size_t nw = 0;
    int primary = -1;
    if (nspecs) {
        s->explicit_fields = 1;
        for (size_t i = 0; i < nspecs; i++) {
            if (specs[i].kind == BFS_SPEC_LABEL) {
                if (s->has_label)
                    return bfs_errf(-EINVAL, err, errlen,
                                    "--field %s: a second label (--field %s is the label)",
                                    specs[i].name, s->label.name);
                s->has_label = 1, s->label = specs[i];
                continue;
            }
            if (nw == BFS_FIELD_MAX)
                return bfs_errf(-EINVAL, err, errlen, "over %u fields", BFS_FIELD_MAX);
            want[nw++] = specs[i];
        }
    } else {
        s->has_label = label_default(s, first, label_key);
        /* TFRecord features sorted by name: an Example's map has no order */
        size_t order[4096], nm = first->n < 4096 ? first->n : 4096;
        for (size_t i = 0; i < nm; i++)
            order[i] = i;
        if (src == BFS_SRC_TFRECORD)
            for (size_t i = 1; i < nm; i++)
                for (size_t j = i;
                     j > 0 && strcmp(first->v[order[j - 1]].name, first->v[order[j]].name) > 0;
                     j--) {
                    size_t t = order[j];
                    order[j] = order[j - 1], order[j - 1] = t;
                }
        for (size_t oi = 0; oi < nm; oi++) {
            const bfs_member *mb = &first->v[order[oi]];
            if (s->has_label && (src == BFS_SRC_WDS ? !strcasecmp(mb->name, "cls")
                                                    : !strcmp(mb->name, s->label.member)))
                continue;
            if (src == BFS_SRC_WDS && !strcasecmp(mb->name, "cls"))
                continue; /* a .cls that is no label (bad): not a field either */
            int dup = 0;
            for (size_t k = 0; k < nw && !dup; k++)
                dup = src == BFS_SRC_WDS ? !strcasecmp(want[k].member, mb->name)
                                         : !strcmp(want[k].member, mb->name);
            if (dup)
                continue;
            if (nw == BFS_FIELD_MAX)
                return bfs_errf(-EINVAL, err, errlen,
                                "the first sample has over %u members: choose fields with --field",
                                BFS_FIELD_MAX);
            bfs_field_spec *sp = &want[nw++];
            memset(sp, 0, sizeof *sp);
            sp->dtype = -1;
            snprintf(sp->member, sizeof sp->member, "%s", mb->name);
            bfs_field_name_from(mb->name, sp->name);
            sp->optional = 1;
        }
    }
    /* kinds and declarations, from the first sample */
    bfs_field decl[BFS_FIELD_MAX];
    int label_field[BFS_FIELD_MAX] = {0};
    for (size_t i = 0; i < nw; i++) {
        found f;
        json_t *parsed = NULL;
        const char *why = NULL;
        char wb[512];
        int rc = find(s, &want[i], (bfs_members *)first, &f, &parsed, wb, sizeof wb, &why);
        if (rc == 1 && want[i].kind) { /* kind given: the sample is skipped, not the pack */
            rc = 0;
            memset(&f, 0, sizeof f);
        }
        if (!rc)
            rc = infer(s, &want[i], &f, &decl[i], image_key, wb, sizeof wb, &why);
        json_decref(parsed);
        if (rc < 0)
            return bfs_errf(rc, err, errlen, "out of memory");
        if (rc)
            return bfs_errf(-EINVAL, err, errlen, "%s", why);
        if (want[i].kind == BFS_SPEC_LABEL) { /* --field NAME=cls: the label */
            if (s->has_label)
                return bfs_errf(-EINVAL, err, errlen,
                                "--field %s: a second label (--field %s is the label)",
                                want[i].name, s->label.name);
            s->has_label = 1, s->label = want[i];
            label_field[i] = 1;
            continue;
        }
        if (want[i].kind == BFS_FIELD_IMAGE && primary < 0 &&
            (nspecs || !image_key ||
             (src == BFS_SRC_WDS ? !strcasecmp(want[i].member, image_key)
                                 : !strcmp(want[i].member, image_key))))
            primary = (int)i;
    }
    if (primary < 0 && !nspecs && src == BFS_SRC_MANIFEST)
        for (size_t i = 0; i < nw && primary < 0; i++)
            if (want[i].kind == BFS_FIELD_IMAGE)
                primary = (int)i;
    if (primary < 0)
        return bfs_errf(-EINVAL, err, errlen,
                        nspecs ? "no --field maps an image: field 0 is the sample's image (e.g. "
                                 "--field image=jpg)"
                        : image_key ? "the first sample has no image member '%s'"
                                    : "the first sample has no image (a .jpg, .jpeg, .png or "
                                      ".webp member, an image feature or column)",
                        image_key ? image_key : "");
    /* field 0 the primary image, the others in order */
    s->n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < nw; i++)
            if ((pass == 0) == ((int)i == primary) && !label_field[i]) {
                s->from[s->n] = want[i];
                s->f[s->n++] = decl[i];
            }
    s->f[0].flags &= (uint8_t)~BFS_FIELDF_OPTIONAL;
    s->from[0].optional = 0;
    for (uint32_t k = 0; k < s->n; k++) {
        for (uint32_t j = 0; j < k; j++)
            if (!strcmp(s->f[j].name, s->f[k].name))
                return bfs_errf(-EINVAL, err, errlen,
                                "two fields named %s (members '%s' and '%s'): name them with "
                                "--field",
                                s->f[k].name, s->from[j].member, s->from[k].member);
        if (s->from[k].follows[0]) {
            uint32_t j = 0;
            while (j < k && strcmp(s->f[j].name, s->from[k].follows))
                j++;
            if (j == k || s->f[j].kind != BFS_FIELD_BOXES)
                return bfs_errf(-EINVAL, err, errlen,
                                "--field %s: follows=%s must name a boxes field given before it",
                                s->f[k].name, s->from[k].follows);
            if (s->f[k].kind != BFS_FIELD_ARRAY)
                return bfs_errf(-EINVAL, err, errlen,
                                "--field %s: only an array follows boxes (one value per box)",
                                s->f[k].name);
            s->f[k].follows = j;
            s->f[k].rank = 0;
            memset(s->f[k].shape, 0, sizeof s->f[k].shape);
        }
        int rc = bfs_field_check(&s->f[k], k, s->n, err, errlen);
        if (rc)
            return rc;
    }
    return 0;
}
