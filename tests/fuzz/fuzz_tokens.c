/*
 * fuzz_tokens.c — libFuzzer target for the token-file reader of mkbatchfs --tokens
 * (engine/dataset/pack.c: bfs_tokens_doc_end and the streaming packer) and the reader's
 * checks of token-sequence records (engine/dataset/bfs_read.c).
 *
 * Input: [0] bit 0: u32 tokens (else u16); bits 1-2: separator from [1..4] (0), the first
 *        token of the data (1), a token absent from small alphabets (2), or 0 (3);
 *        [1..4] separator; [5] chunk size for the split check (1..256 tokens); the rest:
 *        the token file, its bytes as they are (a size that is not a whole number of
 *        tokens is a case too).
 * Checked (pack.h, bfs.h, docs/format.md):
 *  - splitting chunk by chunk with bfs_tokens_doc_end gives documents that each end with
 *    the separator and hold it nowhere else, all but the last; joined, they are the data;
 *  - bfs_pack of the file: refused with -EINVAL when the separator does not fit (checked
 *    first), BFS_E_EMPTY when the file is empty, -EINVAL when its size is not a whole
 *    number of tokens, each with a message;
 *    otherwise a version 2 file whose samples are those documents, in order, each a
 *    valid token record (count x size = length, no image fields) with a matching checksum.
 */
#include "engine/dataset/bfs.h"
#include "engine/dataset/pack.h"
#include "base/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "fuzz_tokens: check failed at line %d: %s\n", __LINE__, #c);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static uint32_t ld(const uint8_t *p, int size)
{
    return size == 2
               ? (uint32_t)p[0] | (uint32_t)p[1] << 8
               : (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The documents by a chunked split: their token counts into counts (n at most). */
static size_t split(const uint8_t *d, size_t ntok, int size, uint32_t sep, size_t chunk,
                    size_t *counts)
{
    size_t ndocs = 0, cur = 0;
    for (size_t at = 0; at < ntok;) {
        size_t n = ntok - at < chunk ? ntok - at : chunk, pos = 0;
        while (pos < n) {
            size_t k = bfs_tokens_doc_end(d + (at + pos) * size, n - pos, size, sep);
            size_t take = k ? k : n - pos;
            for (size_t i = 0; i < take; i++) /* the separator only at a document's end */
                CHECK((ld(d + (at + pos + i) * size, size) == sep) == (k && i == take - 1));
            cur += take;
            if (k)
                counts[ndocs++] = cur, cur = 0;
            pos += take;
        }
        at += n;
    }
    if (cur)
        counts[ndocs++] = cur;
    return ndocs;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 6 || size > (1 << 16))
        return 0;
    int ts = data[0] & 1 ? 4 : 2;
    const uint8_t *d = data + 6;
    size_t len = size - 6, ntok = len / (size_t)ts;
    uint32_t sep = ld(data + 1, 4);
    switch ((data[0] >> 1) & 3) {
    case 1:
        sep = ntok ? ld(d, ts) : 0;
        break;
    case 2:
        sep = ts == 2 ? 0xfffe : 0xfffffffeu;
        break;
    case 3:
        sep = 0;
        break;
    }
    if (ts == 2 && ((data[0] >> 1) & 3) == 0)
        sep &= data[0] & 0x80 ? 0xffffffffu : 0xffffu; /* now and then one that does not fit */
    size_t chunk = (size_t)data[5] % 256 + 1;
    size_t *counts = malloc((ntok + 1) * sizeof *counts);
    CHECK(counts);
    size_t ndocs = len % (size_t)ts ? 0 : split(d, ntok, ts, sep, chunk, counts);

    char dir[] = "/dev/shm/fuzz_tokens.XXXXXX", bin[64], out[64];
    if (!mkdtemp(dir)) {
        free(counts);
        return 0;
    }
    snprintf(bin, sizeof bin, "%s/t.bin", dir);
    snprintf(out, sizeof out, "%s/t.bfs", dir);
    FILE *f = fopen(bin, "wb");
    CHECK(f && fwrite(d, 1, len, f) == len && fclose(f) == 0);
    bfs_pack_opts o = {.tokens = ts, .doc_sep = sep};
    bfs_pack_report rep;
    char err[512] = "";
    int rc = bfs_pack(bin, out, &o, &rep, NULL, err, sizeof err);
    if (ts == 2 && sep > 0xffff) /* options are checked before the file */
        CHECK(rc == -EINVAL && err[0]);
    else if (len == 0)
        CHECK(rc == BFS_E_EMPTY && err[0]);
    else if (len % (size_t)ts)
        CHECK(rc == -EINVAL && err[0]);
    else {
        CHECK(rc == 0);
        CHECK(rep.packed == ndocs && rep.tokens == ntok);
        bfs_reader *r;
        CHECK(bfs_open(out, &r, err, sizeof err) == 0);
        CHECK(bfs_get_info(r)->version == 2 && bfs_get_info(r)->flags == BFS_DS_HAS_TOKENS);
        CHECK(bfs_get_info(r)->sample_count == ndocs);
        CHECK(bfs_verify_tables(r) == 0);
        uint8_t *buf = malloc(len);
        CHECK(buf);
        size_t at = 0;
        for (uint64_t i = 0; i < ndocs; i++) {
            bfs_sample s;
            CHECK(bfs_read_sample(r, i, BFS_VERIFY_SAMPLE, &s, buf, len) == 0);
            CHECK((s.flags & BFS_KIND_MASK) == BFS_KIND_TOKENS && !s.width && !s.height);
            CHECK(s.raw_size == counts[i] && s.length == counts[i] * (size_t)ts);
            CHECK(memcmp(buf, d + at, s.length) == 0);
            at += s.length;
        }
        CHECK(at == len);
        free(buf);
        bfs_close(r);
    }
    bfs_pack_report_free(&rep);
    unlink(bin);
    unlink(out);
    rmdir(dir);
    free(counts);
    return 0;
}
