/*
 * statsjson.c — see statsjson.h.
 *
 * Parsing is jansson's (libjansson, Debian's; strict RFC 8259 with JSON_DECODE_ANY for
 * any top value, JSON_REJECT_DUPLICATES, every number read as a double). Its tree is then
 * flattened into one array of values in document order (ids are indices; 0 is the root),
 * a container linking its children through `next`, with strings and keys copied into one
 * buffer, so that lookups and walks need no allocation and ids stay small integers.
 */
#include "programs/statsjson.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOKEY UINT32_MAX

typedef struct sj_val {
    double num;      /* SJ_NUMBER */
    uint32_t key;    /* member of an object: offset of its key in buf; else NOKEY */
    uint32_t keylen; /* bytes */
    uint32_t next;   /* next element/member of the parent, 0 = last */
    uint32_t first;  /* container: first child (0 = empty); string: offset in buf */
    uint32_t count;  /* container: children; string: length in bytes */
    uint8_t type;    /* SJ_* */
} sj_val;

struct sj_doc {
    char *buf; /* strings and keys, each NUL-terminated */
    size_t used, size;
    sj_val *v;  /* values; v[0] the root */
    uint32_t n; /* values used */
    uint32_t cap;
};

/* Copy n bytes of s into d->buf; its offset, or -1 (out of memory). */
static int64_t put_text(sj_doc *d, const char *s, size_t n)
{
    if (d->used + n + 1 > d->size) {
        size_t size = d->size ? d->size : 4096;
        while (d->used + n + 1 > size)
            size *= 2;
        char *b = realloc(d->buf, size);
        if (!b)
            return -1;
        d->buf = b, d->size = size;
    }
    memcpy(d->buf + d->used, s, n);
    d->buf[d->used + n] = 0;
    int64_t at = (int64_t)d->used;
    d->used += n + 1;
    return at;
}

/* A new value of json value j (key: its member name, or NULL) at depth, its children
 * after it; its id, or -E2BIG / -ENOMEM. */
static int64_t flatten(sj_doc *d, json_t *j, const char *key, int depth, const char **why)
{
    if (d->n == SJ_MAX_VALUES)
        return *why = "more than 262144 values", -E2BIG;
    if (depth > SJ_MAX_DEPTH)
        return *why = "arrays and objects nested more than 64 deep", -E2BIG;
    if (d->n == d->cap) {
        uint32_t cap = d->cap ? d->cap * 2 : 64;
        sj_val *v = realloc(d->v, cap * sizeof *v);
        if (!v)
            return -ENOMEM;
        d->v = v, d->cap = cap;
    }
    uint32_t id = d->n++;
    sj_val x = {.key = NOKEY};
    if (key) {
        int64_t at = put_text(d, key, strlen(key));
        if (at < 0)
            return -ENOMEM;
        x.key = (uint32_t)at, x.keylen = (uint32_t)strlen(key);
    }
    switch (json_typeof(j)) {
    case JSON_NULL:
        x.type = SJ_NULL;
        break;
    case JSON_FALSE:
        x.type = SJ_FALSE;
        break;
    case JSON_TRUE:
        x.type = SJ_TRUE;
        break;
    case JSON_INTEGER: /* (not made: JSON_DECODE_INT_AS_REAL) */
    case JSON_REAL:
        x.type = SJ_NUMBER;
        x.num = json_number_value(j);
        break;
    case JSON_STRING: {
        x.type = SJ_STRING;
        int64_t at = put_text(d, json_string_value(j), json_string_length(j));
        if (at < 0)
            return -ENOMEM;
        x.first = (uint32_t)at, x.count = (uint32_t)json_string_length(j);
        break;
    }
    case JSON_ARRAY:
    case JSON_OBJECT:
        x.type = json_is_array(j) ? SJ_ARRAY : SJ_OBJECT;
        break;
    }
    d->v[id] = x;
    /* children in document order: an array's elements, an object's members (jansson
     * keeps insertion order) */
    int obj = json_is_object(j);
    size_t n = json_is_array(j) ? json_array_size(j) : 0;
    void *it = obj ? json_object_iter(j) : NULL;
    uint32_t prev = 0;
    for (size_t i = 0; obj ? it != NULL : i < n; i++) {
        json_t *e = obj ? json_object_iter_value(it) : json_array_get(j, i);
        int64_t c = flatten(d, e, obj ? json_object_iter_key(it) : NULL, depth + 1, why);
        if (c < 0)
            return c;
        if (prev)
            d->v[prev].next = (uint32_t)c;
        else
            d->v[id].first = (uint32_t)c;
        prev = (uint32_t)c;
        d->v[id].count++;
        if (obj)
            it = json_object_iter_next(j, it);
    }
    return id;
}

void sj_free(sj_doc *d)
{
    if (!d)
        return;
    free(d->buf);
    free(d->v);
    free(d);
}

int sj_parse(const char *text, size_t len, sj_doc **out, char *err, size_t errlen)
{
    *out = NULL;
    if (err && errlen)
        err[0] = 0;
    if (len > SJ_MAX_TEXT) {
        if (err && errlen)
            snprintf(err, errlen, "byte 0: text of %zu bytes, more than %d", len, SJ_MAX_TEXT);
        return -E2BIG;
    }
    const char *nul = memchr(text, 0, len); /* jansson would end the text there */
    if (nul) {
        if (err && errlen)
            snprintf(err, errlen, "byte %zu: a NUL byte (0x00) in the text", (size_t)(nul - text));
        return -EINVAL;
    }
    json_error_t je;
    json_t *root = json_loadb(
        text, len,
        JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL, &je);
    if (!root) {
        if (err && errlen)
            snprintf(err, errlen, "byte %d: %s", je.position, je.text);
        enum json_error_code c = json_error_code(&je);
        return c == json_error_out_of_memory    ? -ENOMEM
               : c == json_error_stack_overflow ? -E2BIG
                                                : -EINVAL;
    }
    sj_doc *d = calloc(1, sizeof *d);
    const char *why = "out of memory";
    int64_t rc = d ? flatten(d, root, NULL, 0, &why) : -ENOMEM;
    json_decref(root);
    if (rc < 0) {
        if (err && errlen)
            snprintf(err, errlen, "%s", why);
        sj_free(d);
        return (int)rc;
    }
    *out = d;
    return 0;
}

static const sj_val *val(const sj_doc *d, int v)
{
    return d && v >= 0 && (uint32_t)v < d->n ? &d->v[v] : NULL;
}

int sj_type(const sj_doc *d, int v)
{
    const sj_val *x = val(d, v);
    return x ? x->type : -1;
}

int sj_count(const sj_doc *d, int v)
{
    const sj_val *x = val(d, v);
    return x && (x->type == SJ_ARRAY || x->type == SJ_OBJECT) ? (int)x->count : -1;
}

int sj_child(const sj_doc *d, int v, int i)
{
    const sj_val *x = val(d, v);
    if (!x || (x->type != SJ_ARRAY && x->type != SJ_OBJECT) || i < 0 || (uint32_t)i >= x->count)
        return -1;
    uint32_t c = x->first;
    while (i-- > 0)
        c = d->v[c].next;
    return (int)c;
}

int sj_next(const sj_doc *d, int v)
{
    const sj_val *x = val(d, v);
    return x && x->next ? (int)x->next : -1;
}

const char *sj_key(const sj_doc *d, int v, size_t *len)
{
    const sj_val *x = val(d, v);
    if (!x || x->key == NOKEY)
        return NULL;
    if (len)
        *len = x->keylen;
    return d->buf + x->key;
}

int sj_num(const sj_doc *d, int v, double *out)
{
    const sj_val *x = val(d, v);
    if (!x)
        return -ENOENT;
    if (x->type != SJ_NUMBER)
        return -EINVAL;
    *out = x->num;
    return 0;
}

const char *sj_str(const sj_doc *d, int v, size_t *len)
{
    const sj_val *x = val(d, v);
    if (!x || x->type != SJ_STRING)
        return NULL;
    if (len)
        *len = x->count;
    return d->buf + x->first;
}

/* Member `key` (n bytes) of object v, or -1. */
static int member(const sj_doc *d, const sj_val *x, const char *key, size_t n)
{
    uint32_t c = x->first;
    for (uint32_t i = 0; i < x->count; i++, c = d->v[c].next)
        if (d->v[c].keylen == n && !memcmp(d->buf + d->v[c].key, key, n))
            return (int)c;
    return -1;
}

/* A decimal index of n bytes at s, or -1 (not all digits, empty, or above INT_MAX). */
static int parse_index(const char *s, size_t n)
{
    if (!n || n > 9) /* 9 digits: no overflow of int */
        return -1;
    int i = 0;
    for (size_t k = 0; k < n; k++) {
        if (s[k] < '0' || s[k] > '9')
            return -1;
        i = i * 10 + (s[k] - '0');
    }
    return i;
}

int sj_lookup(const sj_doc *d, int base, const char *path)
{
    if (!val(d, base) || !path)
        return -1;
    int v = base;
    const char *p = path;
    while (*p) {
        const sj_val *x = &d->v[v];
        if (*p == '[') {
            const char *close = strchr(p, ']');
            int i = close ? parse_index(p + 1, (size_t)(close - p - 1)) : -1;
            if (i < 0 || x->type != SJ_ARRAY)
                return -1;
            v = sj_child(d, v, i);
            if (v < 0)
                return -1;
            p = close + 1;
        } else {
            size_t n = strcspn(p, ".[]");
            if (!n)
                return -1; /* "a..b", ".a", "a]" */
            if (x->type == SJ_OBJECT)
                v = member(d, x, p, n);
            else if (x->type == SJ_ARRAY)
                v = sj_child(d, v, parse_index(p, n));
            else
                return -1;
            if (v < 0)
                return -1;
            p += n;
        }
        if (*p == '.') {
            p++;
            if (!*p)
                return -1; /* "a." */
        } else if (*p && *p != '[') {
            return -1; /* "]" out of place */
        }
    }
    return v;
}

int sj_get_num(const sj_doc *d, const char *path, double *out)
{
    return sj_num(d, sj_lookup(d, SJ_ROOT, path), out);
}

const char *sj_get_str(const sj_doc *d, const char *path)
{
    return sj_str(d, sj_lookup(d, SJ_ROOT, path), NULL);
}
