/*
 * fuzz_tokfile.c — libFuzzer target for the token-corpus parsers of mkbatchfs --tokens
 * (engine/dataset/tokfile.c): .npy headers, Megatron .idx files, id conversion.
 *
 * Input: [0] bits 0-1: which (0 .npy header, 1 Megatron index, 2 id conversion, 3 .npy
 *        with its file size given); [1..8] a .bin size (Megatron) or dtype and out size
 *        (conversion); the rest: the file's bytes, or the ids.
 * Checked (tokfile.h):
 *  - no crash, no read outside the input; failures are -EINVAL with a one-line message;
 *  - a parsed .npy has an integer dtype of 1, 2, 4 or 8 bytes, its data starting inside
 *    the header bytes read, and, with a file size, exactly count x size bytes after it;
 *  - a parsed Megatron index: every sequence inside the .bin, document entries from 0 to
 *    the sequence count without going back (checked again through the accessors);
 *  - conversion: 0 and every id stored as its value, or -ERANGE at the first id that is
 *    negative or does not fit, every id before it stored.
 */
#include "engine/dataset/tokfile.h"
#include "base/endian.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "fuzz_tokfile: check failed at line %d: %s\n", __LINE__, #c);          \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void check_err(int rc, const char *err, size_t cap)
{
    CHECK(rc == -EINVAL);
    CHECK(memchr(err, 0, cap) && err[0] && !strchr(err, '\n'));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 9)
        return 0;
    int which = data[0] & 3;
    const uint8_t *p = data + 9;
    size_t n = size - 9;
    char err[256];
    memset(err, 'x', sizeof err);
    if (which == 0 || which == 3) {
        /* copy: the parser must not read past n */
        uint8_t *buf = malloc(n ? n : 1);
        CHECK(buf);
        memcpy(buf, p, n);
        uint64_t fsize = which == 3 ? bfs_ld64(data + 1) : 0;
        bfs_tok_dtype t;
        uint64_t count, off;
        int rc = bfs_npy_parse(buf, n, fsize, &t, &count, &off, err, sizeof err);
        if (rc)
            check_err(rc, err, sizeof err);
        else {
            CHECK((t.kind == 'u' || t.kind == 'i') &&
                  (t.size == 1 || t.size == 2 || t.size == 4 || t.size == 8));
            CHECK(off >= 10 && off <= n);
            if (fsize)
                CHECK(fsize == off + count * (uint64_t)t.size);
        }
        free(buf);
    } else if (which == 1) {
        uint8_t *buf = malloc(n ? n : 1);
        CHECK(buf);
        memcpy(buf, p, n);
        uint64_t bin = bfs_ld64(data + 1) % ((uint64_t)1 << 40);
        bfs_megatron_idx x;
        int rc = bfs_megatron_parse(buf, n, bin, &x, err, sizeof err);
        if (rc)
            check_err(rc, err, sizeof err);
        else {
            CHECK(34 + x.nseq * 12 + (x.ndoc + 1) * 8 == n);
            for (uint64_t i = 0; i < x.nseq; i++) {
                uint64_t sz = bfs_megatron_size(&x, i), off = bfs_megatron_offset(&x, i);
                CHECK((int32_t)sz >= 0 && off <= bin && sz * (uint64_t)x.dtype.size <= bin - off);
            }
            CHECK(bfs_megatron_doc(&x, 0) == 0 && bfs_megatron_doc(&x, x.ndoc) == x.nseq);
            for (uint64_t d = 0; d < x.ndoc; d++)
                CHECK(bfs_megatron_doc(&x, d) <= bfs_megatron_doc(&x, d + 1));
        }
        free(buf);
    } else {
        static const int sizes[4] = {1, 2, 4, 8};
        bfs_tok_dtype t = {data[1] & 1 ? 'i' : 'u', sizes[(data[1] >> 1) & 3]};
        int out_size = data[2] & 1 ? 4 : 2;
        size_t cnt = n / (size_t)t.size, bad = (size_t)-1;
        int64_t v = 0;
        uint8_t *out = calloc(cnt ? cnt : 1, 4);
        CHECK(out);
        int rc = bfs_tok_convert(p, cnt, t, out_size, out, &bad, &v);
        CHECK(rc == 0 || rc == -ERANGE);
        size_t good = rc ? bad : cnt;
        CHECK(good <= cnt);
        if (rc)
            CHECK(v < 0 || (uint64_t)v > (out_size == 2 ? 0xffffu : 0xffffffffu));
        for (size_t i = 0; i < good; i++) {
            const uint8_t *q = p + i * (size_t)t.size;
            int64_t want = t.size == 1   ? (t.kind == 'i' ? (int8_t)q[0] : q[0])
                           : t.size == 2 ? (t.kind == 'i' ? (int16_t)bfs_ld16(q) : bfs_ld16(q))
                           : t.size == 4 ? (t.kind == 'i' ? (int32_t)bfs_ld32(q) : bfs_ld32(q))
                                         : (int64_t)bfs_ld64(q);
            uint64_t got = out_size == 2 ? bfs_ld16(out + 2 * i) : bfs_ld32(out + 4 * i);
            CHECK(want >= 0 && (uint64_t)want == got);
        }
        free(out);
    }
    return 0;
}
