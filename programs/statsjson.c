/*
 * statsjson.c — see statsjson.h.
 *
 * A recursive-descent parser over a private, NUL-terminated copy of the text. Values live
 * in one growing array (ids are indices; 0 is the root); a container links its children
 * through `next` in document order. Strings and keys are decoded in place in the copy:
 * an escape never decodes to more bytes than it takes ("\uXXXX": 6 bytes to at most 3,
 * a surrogate pair: 12 to 4), so the write position never passes the read position, and
 * the closing quote's byte is free for the terminating NUL.
 */
#include "programs/statsjson.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
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
    char *buf;  /* the text's copy, strings decoded in place */
    sj_val *v;  /* values; v[0] the root */
    uint32_t n; /* values used */
    uint32_t cap;
};

typedef struct parser {
    sj_doc *d;
    const char *s; /* == d->buf */
    size_t len, pos;
    char *err;
    size_t errlen;
    int rc; /* first error */
} parser;

static void fail(parser *p, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void fail(parser *p, int rc, const char *fmt, ...)
{
    if (p->rc)
        return;
    p->rc = rc;
    if (!p->err || !p->errlen)
        return;
    int n = snprintf(p->err, p->errlen, "byte %zu: ", p->pos);
    if (n < 0 || (size_t)n >= p->errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
    va_end(ap);
}

static void skip_ws(parser *p)
{
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        p->pos++;
    }
}

/* A printable description of the byte at pos, for messages. */
static const char *what_here(parser *p, char *tmp, size_t n)
{
    if (p->pos >= p->len)
        return "end of text";
    unsigned char c = (unsigned char)p->s[p->pos];
    if (c > 0x20 && c < 0x7f)
        snprintf(tmp, n, "'%c'", c);
    else
        snprintf(tmp, n, "byte 0x%02x", c);
    return tmp;
}

static void unexpected(parser *p, const char *expected)
{
    char tmp[16];
    fail(p, -EINVAL, "expected %s, found %s", expected, what_here(p, tmp, sizeof tmp));
}

/* A new value of type t; its id, or -1 (error set). */
static int new_val(parser *p, int t)
{
    sj_doc *d = p->d;
    if (d->n == d->cap) {
        if (d->cap >= SJ_MAX_VALUES) {
            fail(p, -E2BIG, "more than %d values", SJ_MAX_VALUES);
            return -1;
        }
        uint32_t cap = d->cap ? d->cap * 2 : 64;
        if (cap > SJ_MAX_VALUES)
            cap = SJ_MAX_VALUES;
        sj_val *nv = realloc(d->v, cap * sizeof *nv);
        if (!nv) {
            fail(p, -ENOMEM, "out of memory");
            return -1;
        }
        d->v = nv, d->cap = cap;
    }
    sj_val *v = &d->v[d->n];
    memset(v, 0, sizeof *v);
    v->type = (uint8_t)t;
    v->key = NOKEY;
    return (int)d->n++;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Four hex digits at pos (after "\u"); the code unit, or -1 (error set). */
static long hex4(parser *p)
{
    long u = 0;
    for (int i = 0; i < 4; i++) {
        int h = p->pos < p->len ? hexval(p->s[p->pos]) : -1;
        if (h < 0) {
            unexpected(p, "4 hex digits after \\u");
            return -1;
        }
        u = u * 16 + h;
        p->pos++;
    }
    return u;
}

/* Length of the valid UTF-8 sequence at pos (lead byte >= 0x80), or 0 (RFC 3629 table). */
static size_t utf8_len(parser *p)
{
    const unsigned char *s = (const unsigned char *)p->s + p->pos;
    size_t left = p->len - p->pos;
    unsigned char c = s[0];
    size_t n;
    unsigned char lo = 0x80, hi = 0xbf; /* range of the second byte */
    if (c >= 0xc2 && c <= 0xdf)
        n = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        if (c == 0xe0)
            lo = 0xa0; /* overlong */
        if (c == 0xed)
            hi = 0x9f; /* surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        if (c == 0xf0)
            lo = 0x90; /* overlong */
        if (c == 0xf4)
            hi = 0x8f; /* above U+10FFFF */
    } else
        return 0;
    if (left < n || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    return n;
}

static char *put_utf8(char *w, unsigned long u)
{
    if (u < 0x80) {
        *w++ = (char)u;
    } else if (u < 0x800) {
        *w++ = (char)(0xc0 | u >> 6);
        *w++ = (char)(0x80 | (u & 0x3f));
    } else if (u < 0x10000) {
        *w++ = (char)(0xe0 | u >> 12);
        *w++ = (char)(0x80 | (u >> 6 & 0x3f));
        *w++ = (char)(0x80 | (u & 0x3f));
    } else {
        *w++ = (char)(0xf0 | u >> 18);
        *w++ = (char)(0x80 | (u >> 12 & 0x3f));
        *w++ = (char)(0x80 | (u >> 6 & 0x3f));
        *w++ = (char)(0x80 | (u & 0x3f));
    }
    return w;
}

/* A string at pos (on its opening quote), decoded in place; its offset and length. */
static int parse_string(parser *p, uint32_t *off, uint32_t *len)
{
    char *buf = p->d->buf;
    p->pos++; /* the quote */
    size_t start = p->pos;
    char *w = buf + start;
    for (;;) {
        if (p->pos >= p->len) {
            fail(p, -EINVAL, "unterminated string (opened at byte %zu)", start - 1);
            return -1;
        }
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"') {
            *len = (uint32_t)(w - (buf + start));
            *off = (uint32_t)start;
            *w = 0; /* at or before the closing quote */
            p->pos++;
            return 0;
        }
        if (c < 0x20) {
            fail(p, -EINVAL, "control character 0x%02x in a string (escape it)", c);
            return -1;
        }
        if (c >= 0x80) {
            size_t n = utf8_len(p);
            if (!n) {
                fail(p, -EINVAL, "invalid UTF-8 in a string");
                return -1;
            }
            memmove(w, p->s + p->pos, n);
            w += n, p->pos += n;
            continue;
        }
        if (c != '\\') {
            *w++ = (char)c;
            p->pos++;
            continue;
        }
        p->pos++;
        char e = p->pos < p->len ? p->s[p->pos] : 0;
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        const char *hit = e ? strchr(from, e) : NULL;
        if (hit) {
            *w++ = to[hit - from];
            p->pos++;
            continue;
        }
        if (e != 'u') {
            unexpected(p, "an escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
            return -1;
        }
        p->pos++;
        long u = hex4(p);
        if (u < 0)
            return -1;
        if (u >= 0xdc00 && u <= 0xdfff) {
            fail(p, -EINVAL, "\\u%04lx: a low surrogate without a high one", u);
            return -1;
        }
        if (u >= 0xd800 && u <= 0xdbff) {
            if (p->pos + 1 >= p->len || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u') {
                fail(p, -EINVAL, "\\u%04lx: a high surrogate not followed by \\uDC00..\\uDFFF", u);
                return -1;
            }
            p->pos += 2;
            long lo = hex4(p);
            if (lo < 0)
                return -1;
            if (lo < 0xdc00 || lo > 0xdfff) {
                fail(p, -EINVAL, "\\u%04lx\\u%04lx: not a surrogate pair", u, lo);
                return -1;
            }
            u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
        }
        w = put_utf8(w, (unsigned long)u);
    }
}

static int is_digit(parser *p)
{
    return p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9';
}

/* A number at pos (on '-' or a digit), by RFC 8259's grammar, then strtod. */
static int parse_number(parser *p, double *out)
{
    size_t start = p->pos;
    if (p->s[p->pos] == '-')
        p->pos++;
    if (!is_digit(p)) {
        unexpected(p, "a digit");
        return -1;
    }
    if (p->s[p->pos] == '0') {
        p->pos++;
        if (is_digit(p)) {
            fail(p, -EINVAL, "leading zero in a number");
            return -1;
        }
    } else {
        while (is_digit(p))
            p->pos++;
    }
    if (p->pos < p->len && p->s[p->pos] == '.') {
        p->pos++;
        if (!is_digit(p)) {
            unexpected(p, "a digit after '.'");
            return -1;
        }
        while (is_digit(p))
            p->pos++;
    }
    if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        p->pos++;
        if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-'))
            p->pos++;
        if (!is_digit(p)) {
            unexpected(p, "a digit in the exponent");
            return -1;
        }
        while (is_digit(p))
            p->pos++;
    }
    /* the copy is NUL-terminated, and strtod reads every number of the grammar above up
     * to pos; it reads further only where the text goes on in a way JSON forbids ("0x1f")
     * (the NULs parse_string writes sit inside strings, never right after a number) */
    char *end;
    double v = strtod(p->s + start, &end);
    if (end != p->s + p->pos) { /* "0x1": strtod reads hex, the grammar stops at 'x' */
        unexpected(p, "',', ']', '}' or the end after a number");
        return -1;
    }
    if (isinf(v)) {
        p->pos = start;
        fail(p, -EINVAL, "number out of the range of a double");
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_value(parser *p, int depth);

/* An array or object at pos (on '[' or '{'). */
static int parse_container(parser *p, int id, int depth)
{
    int object = p->d->v[id].type == SJ_OBJECT;
    char close = object ? '}' : ']';
    p->pos++;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == close) {
        p->pos++;
        return 0;
    }
    int last = 0;
    for (;;) {
        uint32_t koff = NOKEY, klen = 0;
        if (object) {
            if (p->pos >= p->len || p->s[p->pos] != '"') {
                unexpected(p, "a key (a string)");
                return -1;
            }
            if (parse_string(p, &koff, &klen))
                return -1;
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') {
                unexpected(p, "':' after a key");
                return -1;
            }
            p->pos++;
            skip_ws(p);
        }
        int c = parse_value(p, depth + 1);
        if (c < 0)
            return -1;
        sj_val *v = p->d->v; /* after parse_value: it may have moved */
        v[c].key = koff, v[c].keylen = klen;
        if (last)
            v[last].next = (uint32_t)c;
        else
            v[id].first = (uint32_t)c;
        v[id].count++;
        last = c;
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') {
            p->pos++;
            skip_ws(p);
            continue;
        }
        if (p->pos < p->len && p->s[p->pos] == close) {
            p->pos++;
            return 0;
        }
        unexpected(p, object ? "',' or '}'" : "',' or ']'");
        return -1;
    }
}

/* A value at pos (whitespace before it skipped); its id or -1. */
static int parse_value(parser *p, int depth)
{
    if (p->pos >= p->len) {
        unexpected(p, "a value");
        return -1;
    }
    char c = p->s[p->pos];
    static const struct {
        const char *word;
        int type;
    } lit[] = {{"null", SJ_NULL}, {"false", SJ_FALSE}, {"true", SJ_TRUE}};
    for (size_t i = 0; i < sizeof lit / sizeof lit[0]; i++) {
        size_t n = strlen(lit[i].word);
        if (c == lit[i].word[0]) {
            if (p->len - p->pos < n || memcmp(p->s + p->pos, lit[i].word, n)) {
                unexpected(p, lit[i].word);
                return -1;
            }
            p->pos += n;
            return new_val(p, lit[i].type);
        }
    }
    if (c == '"') {
        uint32_t off, len;
        if (parse_string(p, &off, &len))
            return -1;
        int id = new_val(p, SJ_STRING);
        if (id >= 0)
            p->d->v[id].first = off, p->d->v[id].count = len;
        return id;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        double x;
        if (parse_number(p, &x))
            return -1;
        int id = new_val(p, SJ_NUMBER);
        if (id >= 0)
            p->d->v[id].num = x;
        return id;
    }
    if (c == '[' || c == '{') {
        if (depth >= SJ_MAX_DEPTH) {
            fail(p, -E2BIG, "more than %d nested arrays and objects", SJ_MAX_DEPTH);
            return -1;
        }
        int id = new_val(p, c == '[' ? SJ_ARRAY : SJ_OBJECT);
        if (id < 0 || parse_container(p, id, depth))
            return -1;
        return id;
    }
    unexpected(p, "a value");
    return -1;
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
    parser p = {.len = len, .err = err, .errlen = errlen};
    if (len > SJ_MAX_TEXT) {
        fail(&p, -E2BIG, "text of %zu bytes, more than %d", len, SJ_MAX_TEXT);
        return p.rc;
    }
    sj_doc *d = calloc(1, sizeof *d);
    if (!d || !(d->buf = malloc(len + 1))) {
        free(d);
        fail(&p, -ENOMEM, "out of memory");
        return p.rc;
    }
    if (len)
        memcpy(d->buf, text, len);
    d->buf[len] = 0;
    p.d = d, p.s = d->buf;
    skip_ws(&p);
    int root = parse_value(&p, 0);
    if (root == 0) {
        skip_ws(&p);
        if (p.pos < p.len)
            unexpected(&p, "end of text after the value");
    }
    if (root != 0 && !p.rc) /* the first value made is always the root */
        fail(&p, -EINVAL, "internal error: root is value %d", root);
    if (p.rc) {
        sj_free(d);
        return p.rc;
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
