/*
 * safetensors.c — dtypes and the strict safetensors parser (see safetensors.h); the
 * batch-file encoder is safetensors_write.c (safetensors_internal.h: what they share).
 *
 * Neighbours: called by the GPU library and tests (parser), by the encoder (dtypes); uses
 * nothing but libc.
 *
 * Parser. Schema-directed recursive descent with the recursion unrolled into three
 * fixed levels (root object, tensor entry or __metadata__ object, integer array): no
 * recursion, no allocation, every read bounds-checked against the end of the header.
 * Strings are decoded (escapes, surrogate pairs, UTF-8 validation) into the caller's
 * bfs_st_file pool. After the JSON, the tensors are sorted by offsets and checked to tile
 * the data buffer exactly, as the reference reader does.
 */
#include "engine/safetensors.h"
#include "engine/safetensors_internal.h"
#include "base/err.h"
#include "base/utf8.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- dtypes ----------------------------------------------------------------------- */

static const struct {
    const char *name;
    unsigned bits;
} dtypes[BFS_DT_COUNT] = {
    [BFS_DT_U8] = {"U8", 8},
    [BFS_DT_F16] = {"F16", 16},
    [BFS_DT_BF16] = {"BF16", 16},
    [BFS_DT_F32] = {"F32", 32},
    [BFS_DT_I64] = {"I64", 64},
    [BFS_DT_BOOL] = {"BOOL", 8},
    [BFS_DT_I8] = {"I8", 8},
    [BFS_DT_U16] = {"U16", 16},
    [BFS_DT_I16] = {"I16", 16},
    [BFS_DT_U32] = {"U32", 32},
    [BFS_DT_I32] = {"I32", 32},
    [BFS_DT_U64] = {"U64", 64},
    [BFS_DT_F64] = {"F64", 64},
    [BFS_DT_C64] = {"C64", 64},
    [BFS_DT_F8_E4M3] = {"F8_E4M3", 8},
    [BFS_DT_F8_E5M2] = {"F8_E5M2", 8},
    [BFS_DT_F8_E8M0] = {"F8_E8M0", 8},
    [BFS_DT_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8},
    [BFS_DT_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8},
    [BFS_DT_F4] = {"F4", 4},
    [BFS_DT_F6_E2M3] = {"F6_E2M3", 6},
    [BFS_DT_F6_E3M2] = {"F6_E3M2", 6},
};

int bfs_st_dtype_valid(bfs_dtype dt)
{
    return (unsigned)dt < BFS_DT_COUNT;
}

unsigned bfs_dtype_bits(bfs_dtype dt)
{
    return bfs_st_dtype_valid(dt) ? dtypes[dt].bits : 0;
}

size_t bfs_dtype_size(bfs_dtype dt)
{
    unsigned bits = bfs_dtype_bits(dt);
    return bits % 8 ? 0 : bits / 8;
}

const char *bfs_dtype_name(bfs_dtype dt)
{
    return bfs_st_dtype_valid(dt) ? dtypes[dt].name : NULL;
}

int bfs_dtype_from_name(const char *name, size_t len, bfs_dtype *out)
{
    if (!name)
        return -EINVAL;
    for (unsigned i = 0; i < BFS_DT_COUNT; i++) {
        if (strlen(dtypes[i].name) == len && memcmp(dtypes[i].name, name, len) == 0) {
            if (out)
                *out = (bfs_dtype)i;
            return 0;
        }
    }
    return -EINVAL;
}

int bfs_st_image_dtype(bfs_dtype dt)
{
    return dt == BFS_DT_U8 || dt == BFS_DT_F16 || dt == BFS_DT_BF16 || dt == BFS_DT_F32;
}

/* ---- parser ------------------------------------------------------------------------- */

typedef struct cursor {
    const uint8_t *base;    /* start of the file: offsets in messages are file offsets */
    const uint8_t *p, *end; /* the unread JSON */
    bfs_st_file *f;
    uint64_t begin[BFS_ST_MAX_TENSORS], stop[BFS_ST_MAX_TENSORS]; /* data_offsets */
} cursor;

static int fail(cursor *c, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Record a message naming the file offset the cursor is at; returns rc. */
static int fail(cursor *c, int rc, const char *fmt, ...)
{
    int n = snprintf(c->f->err, sizeof c->f->err,
                     "header byte %llu: ", (unsigned long long)(c->p - c->base));
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof c->f->err)
        vsnprintf(c->f->err + n, sizeof c->f->err - (size_t)n, fmt, ap);
    va_end(ap);
    return rc;
}

static int is_ws(uint8_t ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

static void skip_ws(cursor *c)
{
    while (c->p < c->end && is_ws(*c->p))
        c->p++;
}

/* The next byte after whitespace, or -1 at the end of the header. */
static int peek(cursor *c)
{
    skip_ws(c);
    return c->p < c->end ? *c->p : -1;
}

static int expect(cursor *c, char ch, const char *what)
{
    if (peek(c) != (uint8_t)ch)
        return fail(c, -EBADMSG,
                    c->p < c->end ? "expected %s" : "expected %s, found the end of the header",
                    what);
    c->p++;
    return 0;
}

static int hex4(const uint8_t *p, unsigned *v)
{
    unsigned x = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t ch = p[i];
        x <<= 4;
        if (ch >= '0' && ch <= '9')
            x |= ch - '0';
        else if (ch >= 'a' && ch <= 'f')
            x |= ch - 'a' + 10u;
        else if (ch >= 'A' && ch <= 'F')
            x |= ch - 'A' + 10u;
        else
            return -1;
    }
    *v = x;
    return 0;
}

/* Append byte b to dst[0, cap) at *n, counting past cap. */
static void out_byte(char *dst, size_t cap, size_t *n, uint8_t b)
{
    if (*n < cap)
        dst[*n] = (char)b;
    (*n)++;
}

/*
 * Parse a JSON string at the cursor (after whitespace), decoding it into dst[0, cap)
 * and setting *len to its full decoded length (which may exceed cap: the caller decides
 * whether that is an error; bytes past cap are dropped). No NUL is added.
 */
static int parse_string(cursor *c, char *dst, size_t cap, size_t *len)
{
    if (peek(c) != '"')
        return fail(c, -EBADMSG,
                    c->p < c->end ? "expected a string"
                                  : "expected a string, found the end of the header");
    c->p++;
    size_t n = 0;
    for (;;) {
        if (c->p >= c->end)
            return fail(c, -EBADMSG, "unterminated string");
        uint8_t ch = *c->p;
        if (ch == '"') {
            c->p++;
            break;
        }
        if (ch < 0x20)
            return fail(c, -EBADMSG, "control character 0x%02x in a string", ch);
        if (ch >= 0x80) {
            size_t k = bfs_utf8_seq(c->p, c->end);
            if (!k)
                return fail(c, -EBADMSG, "invalid UTF-8 in a string");
            for (size_t i = 0; i < k; i++)
                out_byte(dst, cap, &n, c->p[i]);
            c->p += k;
            continue;
        }
        if (ch != '\\') {
            out_byte(dst, cap, &n, ch);
            c->p++;
            continue;
        }
        if (c->end - c->p < 2)
            return fail(c, -EBADMSG, "unterminated escape");
        static const char esc_from[] = "\"\\/bfnrt", esc_to[] = "\"\\/\b\f\n\r\t";
        uint8_t esc = c->p[1];
        const char *hit = esc ? strchr(esc_from, esc) : NULL;
        if (hit) {
            out_byte(dst, cap, &n, (uint8_t)esc_to[hit - esc_from]);
            c->p += 2;
            continue;
        }
        if (esc != 'u')
            return fail(c, -EBADMSG, "invalid escape '\\%c'",
                        esc >= 0x20 && esc < 0x7f ? esc : '?');
        unsigned cp, lo;
        if (c->end - c->p < 6 || hex4(c->p + 2, &cp))
            return fail(c, -EBADMSG, "invalid \\u escape (want 4 hex digits)");
        if (cp >= 0xdc00 && cp <= 0xdfff)
            return fail(c, -EBADMSG, "lone low surrogate \\u%04x", cp);
        if (cp >= 0xd800 && cp <= 0xdbff) {
            if (c->end - c->p < 12 || c->p[6] != '\\' || c->p[7] != 'u' || hex4(c->p + 8, &lo) ||
                lo < 0xdc00 || lo > 0xdfff)
                return fail(c, -EBADMSG, "high surrogate \\u%04x without a low surrogate", cp);
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            c->p += 6;
        }
        c->p += 6;
        if (cp < 0x80)
            out_byte(dst, cap, &n, (uint8_t)cp);
        else if (cp < 0x800) {
            out_byte(dst, cap, &n, (uint8_t)(0xc0 | cp >> 6));
            out_byte(dst, cap, &n, (uint8_t)(0x80 | (cp & 0x3f)));
        } else if (cp < 0x10000) {
            out_byte(dst, cap, &n, (uint8_t)(0xe0 | cp >> 12));
            out_byte(dst, cap, &n, (uint8_t)(0x80 | ((cp >> 6) & 0x3f)));
            out_byte(dst, cap, &n, (uint8_t)(0x80 | (cp & 0x3f)));
        } else {
            out_byte(dst, cap, &n, (uint8_t)(0xf0 | cp >> 18));
            out_byte(dst, cap, &n, (uint8_t)(0x80 | ((cp >> 12) & 0x3f)));
            out_byte(dst, cap, &n, (uint8_t)(0x80 | ((cp >> 6) & 0x3f)));
            out_byte(dst, cap, &n, (uint8_t)(0x80 | (cp & 0x3f)));
        }
    }
    *len = n;
    return 0;
}

/* Parse a string into the file's pool, NUL-terminated. -E2BIG when the pool is full. */
static int parse_pooled(cursor *c, const char **s, size_t *len)
{
    bfs_st_file *f = c->f;
    size_t room = sizeof f->pool - f->pool_used - 1; /* keep one byte for the NUL */
    char *dst = f->pool + f->pool_used;
    int rc = parse_string(c, dst, room, len);
    if (rc)
        return rc;
    if (*len > room)
        return fail(c, -E2BIG, "names and metadata exceed this parser's %u-byte limit",
                    BFS_ST_POOL_SIZE);
    dst[*len] = 0;
    f->pool_used += *len + 1;
    *s = dst;
    return 0;
}

/* A non-negative integer in plain decimal that fits 64 bits. */
static int parse_uint(cursor *c, uint64_t *v)
{
    int ch = peek(c);
    if (ch == '-')
        return fail(c, -EBADMSG, "negative numbers are not allowed here");
    if (ch < '0' || ch > '9')
        return fail(c, -EBADMSG,
                    ch < 0 ? "expected an integer, found the end of the header"
                           : "expected an integer");
    const uint8_t *start = c->p;
    uint64_t x = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        if (__builtin_mul_overflow(x, 10u, &x) ||
            __builtin_add_overflow(x, (uint64_t)(*c->p - '0'), &x)) {
            c->p = start;
            return fail(c, -EBADMSG, "integer does not fit 64 bits");
        }
        c->p++;
    }
    if (*start == '0' && c->p - start > 1) {
        c->p = start;
        return fail(c, -EBADMSG, "integer with a leading zero");
    }
    if (c->p < c->end && (*c->p == '.' || *c->p == 'e' || *c->p == 'E'))
        return fail(c, -EBADMSG, "floating-point numbers are not allowed (integers only)");
    *v = x;
    return 0;
}

/* An array of integers: the first max go to v, *n counts them all. */
static int parse_uint_array(cursor *c, uint64_t *v, unsigned max, unsigned *n)
{
    int rc = expect(c, '[', "'['");
    if (rc)
        return rc;
    *n = 0;
    if (peek(c) == ']') {
        c->p++;
        return 0;
    }
    for (;;) {
        uint64_t x = 0;
        if ((rc = parse_uint(c, &x)))
            return rc;
        if (*n < max)
            v[*n] = x;
        if (*n < UINT32_MAX)
            (*n)++;
        int ch = peek(c);
        if (ch != ',' && ch != ']')
            return fail(c, -EBADMSG, "expected ',' or ']' in an array");
        c->p++;
        if (ch == ']')
            return 0;
    }
}

/* Decode a key or short value into a small buffer; *len > cap means "longer than any
 * word we look for", which callers treat as unknown. */
static int parse_word(cursor *c, char *buf, size_t cap, size_t *len)
{
    int rc = parse_string(c, buf, cap - 1, len);
    if (!rc)
        buf[*len < cap - 1 ? *len : cap - 1] = 0;
    return rc;
}

static int word_is(const char *buf, size_t len, const char *w)
{
    return len == strlen(w) && memcmp(buf, w, len) == 0;
}

/* The value of a tensor entry: {"dtype": ..., "shape": [...], "data_offsets": [b, e]}. */
static int parse_tensor(cursor *c, bfs_st_tensor *t, uint64_t *begin, uint64_t *stop)
{
    enum { HAVE_DTYPE = 1, HAVE_SHAPE = 2, HAVE_OFFSETS = 4 };
    unsigned have = 0;
    uint64_t offs[2] = {0, 0};
    const uint8_t *entry = c->p;
    int rc = expect(c, '{', "'{' (a tensor entry)");
    if (rc)
        return rc;
    if (peek(c) != '}') {
        for (;;) {
            char key[16];
            size_t klen;
            const uint8_t *at = c->p;
            if ((rc = parse_word(c, key, sizeof key, &klen)))
                return rc;
            if ((rc = expect(c, ':', "':'")))
                return rc;
            unsigned bit = word_is(key, klen, "dtype")          ? HAVE_DTYPE
                           : word_is(key, klen, "shape")        ? HAVE_SHAPE
                           : word_is(key, klen, "data_offsets") ? HAVE_OFFSETS
                                                                : 0;
            if (!bit) {
                c->p = at;
                return fail(c, -EBADMSG,
                            "unknown key in a tensor entry (want dtype, shape, "
                            "data_offsets)");
            }
            if (have & bit) {
                c->p = at;
                return fail(c, -EBADMSG, "duplicate key \"%s\" in a tensor entry", key);
            }
            have |= bit;
            if (bit == HAVE_DTYPE) {
                char name[16];
                size_t nlen;
                skip_ws(c);
                at = c->p;
                if ((rc = parse_word(c, name, sizeof name, &nlen)))
                    return rc;
                if (nlen >= sizeof name || bfs_dtype_from_name(name, nlen, &t->dtype)) {
                    c->p = at;
                    return fail(c, -EBADMSG, "unknown dtype");
                }
            } else if (bit == HAVE_SHAPE) {
                unsigned n;
                skip_ws(c);
                at = c->p;
                if ((rc = parse_uint_array(c, t->shape, BFS_ST_MAX_DIMS, &n)))
                    return rc;
                if (n > BFS_ST_MAX_DIMS) {
                    c->p = at;
                    return fail(c, -E2BIG, "more than %u dimensions", BFS_ST_MAX_DIMS);
                }
                t->ndim = n;
            } else {
                unsigned n;
                skip_ws(c);
                at = c->p;
                if ((rc = parse_uint_array(c, offs, 2, &n)))
                    return rc;
                if (n != 2) {
                    c->p = at;
                    return fail(c, -EBADMSG, "data_offsets must be [begin, end]");
                }
            }
            int ch = peek(c);
            if (ch == '}')
                break;
            if (ch != ',')
                return fail(c, -EBADMSG, "expected ',' or '}' in a tensor entry");
            c->p++;
        }
    }
    c->p++; /* the '}' */
    if (have != (HAVE_DTYPE | HAVE_SHAPE | HAVE_OFFSETS)) {
        c->p = entry;
        return fail(c, -EBADMSG, "tensor entry lacks %s",
                    !(have & HAVE_DTYPE)   ? "dtype"
                    : !(have & HAVE_SHAPE) ? "shape"
                                           : "data_offsets");
    }
    uint64_t nel = 1, nbytes;
    for (uint32_t i = 0; i < t->ndim; i++)
        if (__builtin_mul_overflow(nel, t->shape[i], &nel)) {
            c->p = entry;
            return fail(c, -EBADMSG, "shape's element count overflows 64 bits");
        }
    /* nel * bits / 8 without overflowing in the intermediate bit count */
    uint64_t bits = bfs_dtype_bits(t->dtype);
    if (((nel % 8) * bits) % 8) {
        c->p = entry;
        return fail(c, -EBADMSG, "sub-byte tensor does not end on a byte boundary");
    }
    if (__builtin_mul_overflow(nel / 8, bits, &nbytes) ||
        __builtin_add_overflow(nbytes, (nel % 8) * bits / 8, &nbytes)) {
        c->p = entry;
        return fail(c, -EBADMSG, "tensor byte size overflows 64 bits");
    }
    if (offs[1] < offs[0]) {
        c->p = entry;
        return fail(c, -EBADMSG, "data_offsets end %llu before begin %llu",
                    (unsigned long long)offs[1], (unsigned long long)offs[0]);
    }
    if (offs[1] - offs[0] != nbytes) {
        c->p = entry;
        return fail(c, -EBADMSG, "data_offsets span %llu bytes but dtype and shape need %llu",
                    (unsigned long long)(offs[1] - offs[0]), (unsigned long long)nbytes);
    }
    t->nbytes = nbytes;
    *begin = offs[0];
    *stop = offs[1];
    return 0;
}

/* The value of "__metadata__": an object of string values, or null (as the reference
 * reader allows). */
static int parse_metadata(cursor *c)
{
    bfs_st_file *f = c->f;
    int rc;
    skip_ws(c);
    if (c->end - c->p >= 4 && memcmp(c->p, "null", 4) == 0) {
        c->p += 4;
        return 0;
    }
    if ((rc = expect(c, '{', "'{' (the __metadata__ object)")))
        return rc;
    if (peek(c) == '}') {
        c->p++;
        return 0;
    }
    for (;;) {
        bfs_st_meta m;
        skip_ws(c);
        const uint8_t *at = c->p;
        if (f->n_meta == BFS_ST_MAX_META)
            return fail(c, -E2BIG, "more than %u metadata pairs", BFS_ST_MAX_META);
        if ((rc = parse_pooled(c, &m.key, &m.key_len)))
            return rc;
        for (uint32_t i = 0; i < f->n_meta; i++)
            if (f->meta[i].key_len == m.key_len && !memcmp(f->meta[i].key, m.key, m.key_len)) {
                c->p = at;
                return fail(c, -EBADMSG, "duplicate metadata key");
            }
        if ((rc = expect(c, ':', "':'")))
            return rc;
        if (peek(c) != '"')
            return fail(c, -EBADMSG, "metadata values must be strings");
        if ((rc = parse_pooled(c, &m.value, &m.value_len)))
            return rc;
        f->meta[f->n_meta++] = m;
        int ch = peek(c);
        if (ch == '}') {
            c->p++;
            return 0;
        }
        if (ch != ',')
            return fail(c, -EBADMSG, "expected ',' or '}' in __metadata__");
        c->p++;
    }
}

static int parse_root(cursor *c)
{
    bfs_st_file *f = c->f;
    int rc, have_meta = 0;
    if ((rc = expect(c, '{', "'{' (the header must be a JSON object)")))
        return rc;
    if (peek(c) == '}')
        c->p++;
    else
        for (;;) {
            const char *name;
            size_t len;
            size_t pool_mark = f->pool_used;
            skip_ws(c);
            const uint8_t *at = c->p;
            if ((rc = parse_pooled(c, &name, &len)))
                return rc;
            if ((rc = expect(c, ':', "':'")))
                return rc;
            if (word_is(name, len, "__metadata__")) {
                if (have_meta) {
                    c->p = at;
                    return fail(c, -EBADMSG, "duplicate key __metadata__");
                }
                have_meta = 1;
                f->pool_used = pool_mark; /* the key itself is not kept */
                if ((rc = parse_metadata(c)))
                    return rc;
            } else {
                for (uint32_t i = 0; i < f->n_tensors; i++)
                    if (f->tensors[i].name_len == len && !memcmp(f->tensors[i].name, name, len)) {
                        c->p = at;
                        return fail(c, -EBADMSG, "duplicate tensor name");
                    }
                if (f->n_tensors == BFS_ST_MAX_TENSORS) {
                    c->p = at;
                    return fail(c, -E2BIG, "more than %u tensors", BFS_ST_MAX_TENSORS);
                }
                uint32_t i = f->n_tensors;
                bfs_st_tensor *t = &f->tensors[i];
                memset(t, 0, sizeof *t);
                t->name = name;
                t->name_len = len;
                if ((rc = parse_tensor(c, t, &c->begin[i], &c->stop[i])))
                    return rc;
                f->n_tensors++;
            }
            int ch = peek(c);
            if (ch == '}') {
                c->p++;
                break;
            }
            if (ch != ',')
                return fail(c, -EBADMSG, "expected ',' or '}' after a top-level entry");
            c->p++;
        }
    skip_ws(c);
    if (c->p != c->end)
        return fail(c, -EBADMSG,
                    "trailing characters after the JSON object (only whitespace "
                    "may pad it)");
    return 0;
}

/* Sorted by (begin, end), the tensors must tile [0, data_size) exactly. */
static int check_coverage(cursor *c, uint64_t *data_size)
{
    bfs_st_file *f = c->f;
    uint8_t order[BFS_ST_MAX_TENSORS];
    uint32_t n = f->n_tensors;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t j = i;
        while (j > 0 &&
               (c->begin[order[j - 1]] > c->begin[i] ||
                (c->begin[order[j - 1]] == c->begin[i] && c->stop[order[j - 1]] > c->stop[i]))) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = (uint8_t)i;
    }
    uint64_t pos = 0;
    c->p = c->end; /* messages point after the header */
    for (uint32_t k = 0; k < n; k++) {
        uint32_t i = order[k];
        if (c->begin[i] != pos) {
            /* the name, cut short and with control characters (even NUL) made visible,
             * so the message stays one printable line */
            char name[41];
            size_t len = f->tensors[i].name_len < 40 ? f->tensors[i].name_len : 40;
            for (size_t j = 0; j < len; j++) {
                unsigned char ch = (unsigned char)f->tensors[i].name[j];
                name[j] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
            }
            name[len] = 0;
            return fail(c, -EBADMSG,
                        c->begin[i] < pos ? "tensor \"%s\" overlaps the one before it"
                                          : "hole in the data buffer before tensor \"%s\"",
                        name);
        }
        pos = c->stop[i];
    }
    *data_size = pos;
    return 0;
}

int bfs_st_header_len(const uint8_t *first8, uint64_t *n)
{
    if (!first8 || !n)
        return -EINVAL;
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | first8[i];
    if (v < 2 || v > BFS_ST_MAX_HEADER)
        return -EBADMSG;
    *n = v;
    return 0;
}

int bfs_st_parse_header(const uint8_t *data, size_t len, uint64_t file_size, bfs_st_file *out)
{
    if (!data || !out || len > file_size)
        return -EINVAL;
    out->header_len = out->data_offset = out->data_size = out->file_size = 0;
    out->n_tensors = out->n_meta = 0;
    out->pool_used = 0;
    out->err[0] = 0;
    cursor c = {.base = data, .p = data, .end = data + len, .f = out};
    if (file_size < 8)
        return fail(&c, -EBADMSG, "file of %llu bytes is shorter than the 8-byte length",
                    (unsigned long long)file_size);
    if (len < 8)
        return fail(&c, -ENOBUFS, "need the first 8 bytes");
    uint64_t n;
    if (bfs_st_header_len(data, &n)) {
        uint64_t v = 0;
        for (int i = 7; i >= 0; i--)
            v = v << 8 | data[i];
        return fail(&c, -EBADMSG, "header length %llu is not in [2, %llu]", (unsigned long long)v,
                    BFS_ST_MAX_HEADER);
    }
    if (n > file_size - 8)
        return fail(&c, -EBADMSG, "header length %llu exceeds the %llu bytes after it",
                    (unsigned long long)n, (unsigned long long)(file_size - 8));
    if (len - 8 < n)
        return fail(&c, -ENOBUFS, "need the first %llu bytes, have %zu",
                    (unsigned long long)(8 + n), len);
    out->header_len = n;
    out->data_offset = 8 + n;
    c.p = data + 8;
    c.end = data + 8 + n;
    int rc = parse_root(&c);
    if (rc)
        return rc;
    uint64_t size = 0;
    if ((rc = check_coverage(&c, &size)))
        return rc;
    uint64_t room = file_size - out->data_offset;
    if (size != room)
        return fail(&c, -EBADMSG,
                    size > room ? "tensors need %llu data bytes, the file has only %llu"
                                : "tensors cover %llu data bytes, the file has %llu",
                    (unsigned long long)size, (unsigned long long)room);
    out->data_size = size;
    out->file_size = file_size;
    for (uint32_t i = 0; i < out->n_tensors; i++)
        out->tensors[i].offset = out->data_offset + c.begin[i];
    return 0;
}

int bfs_st_parse(const uint8_t *data, size_t len, bfs_st_file *out)
{
    int rc = bfs_st_parse_header(data, len, len, out);
    return rc == -ENOBUFS ? -EBADMSG : rc; /* cannot happen with len == file_size */
}

const bfs_st_tensor *bfs_st_find(const bfs_st_file *f, const char *name)
{
    if (!f || !name)
        return NULL;
    size_t len = strlen(name);
    for (uint32_t i = 0; i < f->n_tensors; i++)
        if (f->tensors[i].name_len == len && !memcmp(f->tensors[i].name, name, len))
            return &f->tensors[i];
    return NULL;
}

const char *bfs_st_meta_get(const bfs_st_file *f, const char *key)
{
    if (!f || !key)
        return NULL;
    size_t len = strlen(key);
    for (uint32_t i = 0; i < f->n_meta; i++)
        if (f->meta[i].key_len == len && !memcmp(f->meta[i].key, key, len))
            return f->meta[i].value;
    return NULL;
}

/* ---- batch recognition --------------------------------------------------------------- */

/* Plain decimal (no sign, no leading zero) that fits 64 bits. */
static int decimal_u64(const char *s, uint64_t *v)
{
    uint64_t x = 0;
    if (!s || !*s || (s[0] == '0' && s[1]))
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || __builtin_mul_overflow(x, 10u, &x) ||
            __builtin_add_overflow(x, (uint64_t)(*s - '0'), &x))
            return -1;
    }
    *v = x;
    return 0;
}

int bfs_st_batch_from_file(const bfs_st_file *f, bfs_st_batch_desc *d, char *err, size_t errlen)
{
    if (!f || !d)
        return -EINVAL;
    bfs_st_batch_desc r = {0};
    const char *fmt = bfs_st_meta_get(f, "format"), *layout = bfs_st_meta_get(f, "layout");
    const char *fp = bfs_st_meta_get(f, "fingerprint");
    if (!fmt || strcmp(fmt, BFS_ST_FORMAT))
        return bfs_errf(-EBADMSG, err, errlen, "metadata format is not \"" BFS_ST_FORMAT "\"");
    if (!layout || (strcmp(layout, "nhwc") && strcmp(layout, "nchw")))
        return bfs_errf(-EBADMSG, err, errlen, "metadata layout is not \"nhwc\" or \"nchw\"");
    if (decimal_u64(bfs_st_meta_get(f, "epoch"), &r.epoch) ||
        decimal_u64(bfs_st_meta_get(f, "batch"), &r.batch_index))
        return bfs_errf(-EBADMSG, err, errlen, "metadata epoch or batch is not a decimal number");
    if (!fp || strlen(fp) != 16 || strspn(fp, "0123456789abcdef") != 16)
        return bfs_errf(-EBADMSG, err, errlen,
                        "metadata fingerprint is not 16 lowercase hex digits");
    for (int i = 0; i < 16; i++)
        r.fingerprint =
            r.fingerprint << 4 | (uint64_t)(fp[i] <= '9' ? fp[i] - '0' : fp[i] - 'a' + 10);
    static const char *const names[3] = {"images", "labels", "indices"};
    if (f->n_tensors < 3)
        return bfs_errf(-EBADMSG, err, errlen, "a batch has at least 3 tensors, this file has %u",
                        f->n_tensors);
    for (int i = 0; i < 3; i++)
        if (strlen(names[i]) != f->tensors[i].name_len ||
            memcmp(names[i], f->tensors[i].name, f->tensors[i].name_len))
            return bfs_errf(-EBADMSG, err, errlen, "tensor %d is not \"%s\"", i, names[i]);
    const bfs_st_tensor *im = &f->tensors[0], *lb = &f->tensors[1], *ix = &f->tensors[2];
    r.nchw = !strcmp(layout, "nchw");
    r.dtype = im->dtype;
    if (!bfs_st_image_dtype(im->dtype) || im->ndim != 4 || im->shape[r.nchw ? 1 : 3] != 3)
        return bfs_errf(-EBADMSG, err, errlen, "images is not U8/F16/BF16/F32 [B,%s]",
                        r.nchw ? "3,H,W" : "H,W,3");
    uint64_t b = im->shape[0], h = im->shape[r.nchw ? 2 : 1], w = im->shape[r.nchw ? 3 : 2];
    if (!b || !h || !w || b > UINT32_MAX || h > UINT32_MAX || w > UINT32_MAX)
        return bfs_errf(-EBADMSG, err, errlen, "images has a zero or over-32-bit dimension");
    for (int i = 1; i < 3; i++) {
        const bfs_st_tensor *t = &f->tensors[i];
        if (t->dtype != BFS_DT_I64 || t->ndim != 1 || t->shape[0] != b)
            return bfs_errf(-EBADMSG, err, errlen, "%s is not I64 [%llu]", names[i],
                            (unsigned long long)b);
    }
    for (uint32_t i = 3; i < f->n_tensors; i++)
        if (f->tensors[i].ndim < 1 || f->tensors[i].shape[0] != b)
            return bfs_errf(-EBADMSG, err, errlen, "field tensor %u's first dimension is not %llu",
                            i, (unsigned long long)b);
    /* batchfs/2 puts the I64 tensors ahead of the images, so they are 8-byte aligned
     * (safetensors.h); a classic batch has them first */
    if ((f->n_tensors == 3 && lb->offset != f->data_offset) ||
        ix->offset != lb->offset + lb->nbytes || im->offset != ix->offset + ix->nbytes)
        return bfs_errf(-EBADMSG, err, errlen,
                        "tensor data is not in the " BFS_ST_FORMAT
                        " order labels, indices, images");
    r.batch = (uint32_t)b;
    r.height = (uint32_t)h;
    r.width = (uint32_t)w;
    r.n_fields = f->n_tensors - 3;
    *d = r;
    return 0;
}
