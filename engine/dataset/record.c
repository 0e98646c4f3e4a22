/*
 * record.c — the members of a sample, --field, and a value's source (see record.h): the
 * members list, field specs, .npy headers, the number collector and finding the member
 * (or JSON key) a field names. record_schema.c makes the schema and converts members
 * into values with them (record_internal.h: what they share).
 *
 * Numbers go through one collector (nums): whatever holds them (a JSON list of lists, an
 * int64_list, a .npy) gives a flat list of values with their shape, which is checked
 * against the field's declaration and then stored in its dtype. Integers stay int64 all
 * the way (no double round trip), so i64 values are exact.
 */
#include "engine/dataset/record.h"
#include "engine/dataset/record_internal.h"
#include "engine/dataset/image.h"
#include "engine/dataset/pack.h"
#include "engine/dataset/shard.h"
#include "engine/dataset/wds.h"
#include "base/endian.h"
#include "base/err.h"

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

void bfs_nums_free(nums *x)
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
int bfs_nums_dtype(const nums *x)
{
    for (size_t k = 0; k < x->n; k++)
        if (!x->isint[k])
            return BFS_FDT_F32;
    return BFS_FDT_I64;
}

/* x stored in dtype into v. 0, -ENOMEM, or 1 with why. */
int bfs_nums_store(const nums *x, int dtype, bfs_value *v, const char **why)
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

/* The member (and key) spec names, from m; *parsed holds a parse of a bytes member as
 * JSON (to be freed by the caller). 0, or 1 with why (not JSON, not an object). */
int bfs_rec_find(const bfs_schema *s, const bfs_field_spec *sp, bfs_members *m, found *f,
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
const char *bfs_rec_where(const bfs_field_spec *sp, char *buf, size_t cap)
{
    if (sp->key[0])
        snprintf(buf, cap, "member '%s' key '%s'", sp->member, sp->key);
    else
        snprintf(buf, cap, "member '%s'", sp->member);
    return buf;
}

/* The numbers of a found value into x. 0, -ENOMEM, 1 with why. */
int bfs_rec_collect(const found *f, nums *x, char *whybuf, size_t whycap, const char **why)
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
int bfs_rec_shape_ok(const nums *x, const bfs_field *d, const char **why)
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
void bfs_rec_one_line(char *s)
{
    for (; s && *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = '?';
}
