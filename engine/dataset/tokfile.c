/*
 * tokfile.c — .npy headers and Megatron indexes for mkbatchfs --tokens (see tokfile.h).
 */
#include "engine/dataset/tokfile.h"
#include "base/endian.h"
#include "base/err.h"

#include <errno.h>
#include <string.h>

/* A byte of the input as a message may show it. */
#define PRINTABLE(c) ((c) >= ' ' && (c) <= '~' ? (c) : '?')

static const char *skip_ws(const char *s, const char *end)
{
    while (s < end && (*s == ' ' || *s == '\t'))
        s++;
    return s;
}

/* The value of key 'name' in the header dict text [s, end): *v points at it. */
static int dict_value(const char *s, const char *end, const char *name, const char **v)
{
    size_t k = strlen(name);
    for (const char *p = s; p + k + 2 <= end; p++)
        if ((*p == '\'' || *p == '"') && p[k + 1] == *p && !memcmp(p + 1, name, k)) {
            p = skip_ws(p + k + 2, end);
            if (p >= end || *p != ':')
                return -1;
            *v = skip_ws(p + 1, end);
            return 0;
        }
    return -1;
}

int bfs_npy_parse(const uint8_t *p, size_t n, uint64_t file_size, bfs_tok_dtype *dtype,
                  uint64_t *count, uint64_t *data_offset, char *err, size_t errlen)
{
    if (n < 10 || memcmp(p, "\x93NUMPY", 6))
        return bfs_errf(-EINVAL, err, errlen, "not a .npy file (no \\x93NUMPY magic)");
    int major = p[6];
    size_t hlen, start;
    if (major == 1)
        hlen = bfs_ld16(p + 8), start = 10;
    else if (major == 2 || major == 3) {
        if (n < 12)
            return bfs_errf(-EINVAL, err, errlen, ".npy header cut short");
        hlen = bfs_ld32(p + 8), start = 12;
    } else
        return bfs_errf(-EINVAL, err, errlen, ".npy format version %d.%d is not 1, 2 or 3", major,
                        p[7]);
    if (hlen > n - start)
        return bfs_errf(-EINVAL, err, errlen, ".npy header of %zu bytes cut short (%zu read)", hlen,
                        n - start);
    const char *s = (const char *)p + start, *end = s + hlen, *v;
    const char *brace = skip_ws(s, end);
    if (brace == end || *brace != '{')
        return bfs_errf(-EINVAL, err, errlen, ".npy header is not a dict");
    /* descr: '<u2', '|u1', ... (no structured or other types) */
    if (dict_value(s, end, "descr", &v) || end - v < 5 || (*v != '\'' && *v != '"') || v[4] != *v)
        return bfs_errf(-EINVAL, err, errlen, ".npy header: no plain 'descr' string");
    char order = v[1], kind = v[2], sz = v[3];
    if ((order != '<' && order != '|') || (kind != 'u' && kind != 'i') ||
        (sz != '1' && sz != '2' && sz != '4' && sz != '8') || (order == '|' && sz != '1'))
        return bfs_errf(-EINVAL, err, errlen,
                        ".npy dtype '%c%c%c': token ids must be little-endian integers "
                        "(<u2, <u4, <i4, <i8, ...)",
                        PRINTABLE(order), PRINTABLE(kind), PRINTABLE(sz));
    if (dict_value(s, end, "fortran_order", &v) ||
        (end - v < 5 || (memcmp(v, "False", 5) && (end - v < 4 || memcmp(v, "True", 4)))))
        return bfs_errf(-EINVAL, err, errlen, ".npy header: no fortran_order True|False");
    if (dict_value(s, end, "shape", &v) || v >= end || *v != '(')
        return bfs_errf(-EINVAL, err, errlen, ".npy header: no shape tuple");
    v = skip_ws(v + 1, end);
    uint64_t nel = 0;
    int digits = 0;
    while (v < end && *v >= '0' && *v <= '9') {
        if (nel > (UINT64_MAX - 9) / 10)
            return bfs_errf(-EINVAL, err, errlen, ".npy shape too large");
        nel = nel * 10 + (uint64_t)(*v++ - '0'), digits++;
    }
    v = skip_ws(v, end);
    if (!digits || v >= end || *v != ',')
        return bfs_errf(-EINVAL, err, errlen, ".npy shape is not (N,): one dimension expected");
    v = skip_ws(v + 1, end);
    if (v >= end || *v != ')')
        return bfs_errf(-EINVAL, err, errlen, ".npy shape is not (N,): one dimension expected");
    dtype->kind = kind, dtype->size = sz - '0';
    *count = nel, *data_offset = start + hlen;
    if (nel > (UINT64_MAX - *data_offset) / (uint64_t)dtype->size)
        return bfs_errf(-EINVAL, err, errlen, ".npy shape too large");
    if (file_size && file_size != *data_offset + nel * (uint64_t)dtype->size)
        return bfs_errf(-EINVAL, err, errlen,
                        ".npy file is %llu bytes; its header says %llu (%llu elements of %d "
                        "bytes after a %llu-byte header)",
                        (unsigned long long)file_size,
                        (unsigned long long)(*data_offset + nel * (uint64_t)dtype->size),
                        (unsigned long long)nel, dtype->size, (unsigned long long)*data_offset);
    return 0;
}

int bfs_megatron_parse(const uint8_t *p, size_t n, uint64_t bin_size, bfs_megatron_idx *out,
                       char *err, size_t errlen)
{
    static const struct {
        char kind;
        int size;
    } codes[9] = {{0, 0},   {'u', 1}, {'i', 1}, {'i', 2}, {'i', 4},
                  {'i', 8}, {0, 0},   {0, 0},   {'u', 2}};
    if (n < 34 || memcmp(p, "MMIDIDX\0\0", 9))
        return bfs_errf(-EINVAL, err, errlen, "not a Megatron index (no MMIDIDX magic)");
    uint64_t version = bfs_ld64(p + 9);
    if (version != 1)
        return bfs_errf(-EINVAL, err, errlen, "Megatron index version %llu is not 1",
                        (unsigned long long)version);
    int code = p[17];
    if (code < 1 || code > 8 || !codes[code].kind)
        return bfs_errf(-EINVAL, err, errlen,
                        "Megatron dtype code %d: token ids must be integers (1 u8, 2 i8, 3 i16, "
                        "4 i32, 5 i64, 8 u16)",
                        code);
    out->dtype = (bfs_tok_dtype){codes[code].kind, codes[code].size};
    out->nseq = bfs_ld64(p + 18);
    uint64_t ndoc_idx = bfs_ld64(p + 26);
    uint64_t body = n - 34;
    if (out->nseq > body / 12 || ndoc_idx == 0 || ndoc_idx > body / 8 ||
        body != out->nseq * 12 + ndoc_idx * 8)
        return bfs_errf(-EINVAL, err, errlen,
                        "Megatron index of %zu bytes cannot hold %llu sequences and %llu "
                        "document entries",
                        n, (unsigned long long)out->nseq, (unsigned long long)ndoc_idx);
    out->ndoc = ndoc_idx - 1;
    out->sizes = p + 34;
    out->offsets = out->sizes + out->nseq * 4;
    out->doc_idx = out->offsets + out->nseq * 8;
    for (uint64_t i = 0; i < out->nseq; i++) {
        int32_t sz = (int32_t)bfs_ld32(out->sizes + 4 * i);
        uint64_t off = bfs_ld64(out->offsets + 8 * i);
        uint64_t bytes = sz < 0 ? 0 : (uint64_t)sz * (uint64_t)out->dtype.size;
        if (sz < 0 || off > bin_size || bytes > bin_size - off)
            return bfs_errf(-EINVAL, err, errlen,
                            "Megatron sequence %llu (%d ids at byte %llu) is not inside the "
                            "%llu-byte .bin",
                            (unsigned long long)i, sz, (unsigned long long)off,
                            (unsigned long long)bin_size);
    }
    uint64_t prev = 0;
    for (uint64_t d = 0; d < ndoc_idx; d++) {
        uint64_t v = bfs_ld64(out->doc_idx + 8 * d);
        if ((d == 0 && v != 0) || v < prev || v > out->nseq ||
            (d == ndoc_idx - 1 && v != out->nseq))
            return bfs_errf(-EINVAL, err, errlen,
                            "Megatron document index entry %llu is %llu: entries must go from 0 "
                            "to the sequence count (%llu) without going back",
                            (unsigned long long)d, (unsigned long long)v,
                            (unsigned long long)out->nseq);
        prev = v;
    }
    return 0;
}

uint32_t bfs_megatron_size(const bfs_megatron_idx *x, uint64_t i)
{
    return bfs_ld32(x->sizes + 4 * i);
}

uint64_t bfs_megatron_offset(const bfs_megatron_idx *x, uint64_t i)
{
    return bfs_ld64(x->offsets + 8 * i);
}

uint64_t bfs_megatron_doc(const bfs_megatron_idx *x, uint64_t d)
{
    return bfs_ld64(x->doc_idx + 8 * d);
}

int bfs_tok_out_size(bfs_tok_dtype t)
{
    return t.size <= 2 ? 2 : 4;
}

int64_t bfs_tok_get(const uint8_t *p, bfs_tok_dtype t, uint64_t i)
{
    const uint8_t *q = p + i * (uint64_t)t.size;
    int64_t v;
    switch (t.size) {
    case 1:
        v = t.kind == 'i' ? (int8_t)q[0] : q[0];
        break;
    case 2:
        v = t.kind == 'i' ? (int16_t)bfs_ld16(q) : (int64_t)bfs_ld16(q);
        break;
    case 4:
        v = t.kind == 'i' ? (int32_t)bfs_ld32(q) : (int64_t)bfs_ld32(q);
        break;
    default: /* (a u64 over INT64_MAX reads as negative: no id or offset is that large) */
        v = (int64_t)bfs_ld64(q);
    }
    return v;
}

int bfs_tok_convert(const uint8_t *in, size_t n, bfs_tok_dtype src, int out_size, uint8_t *out,
                    size_t *bad, int64_t *value)
{
    for (size_t i = 0; i < n; i++) {
        int64_t v = bfs_tok_get(in, src, i);
        if (v < 0 || (uint64_t)v > (out_size == 2 ? 0xffffu : 0xffffffffu)) {
            *bad = i, *value = v;
            return -ERANGE;
        }
        if (out_size == 2)
            bfs_st16(out + 2 * i, (uint16_t)v);
        else
            bfs_st32(out + 4 * i, (uint32_t)v);
    }
    return 0;
}
