/*
 * fuzz_wds.c — libFuzzer target for the WebDataset tar reader of mkbatchfs
 * (engine/dataset/wds.c): tar headers (ustar prefix, GNU long names, pax records,
 * base-256 sizes, checksums), the sample grouping by key, and the label parsers.
 *
 * Input: [0] bits 0-1: which (0, 1: a tar stream; 2: a .json label; 3: a .cls label),
 *        bits 2-4: how many bytes the read callback hands out at a time (1..8 x 97, or
 *        all), bit 5: an --image-key of "png"; the rest: the bytes.
 * Tar streams are read to their end as samples, and again with each header checksum the
 * reader refuses recomputed (up to 16), so mutations reach what lies behind the checksum.
 * Checked (wds.h):
 *  - no crash, no read outside the input, no leak; errors are -EINVAL with a one-line
 *    message; the stream is never read past its end;
 *  - every sample has a non-empty key, starts at a 512-byte boundary before where the
 *    reader is, an image no larger than the input, and a label in 0..BFS_SHARD_LABEL_MAX
 *    when it is not skipped;
 *  - a .json label parsed to v names an integer: printing v and parsing {"label":v} again
 *    gives v; .cls: the decimal text of v parses back to v;
 *  - the same stream read as whole samples (bfs_wds_next_members, mkbatchfs keeping every
 *    field): the same keys and offsets as bfs_wds_next, members with an extension and no
 *    more bytes than the input, and record_check.h's checks of the fields made of them.
 */
#include "engine/dataset/wds.h"
#include "tests/fuzz/record_check.h"
#include "tests/fuzz/shard_mem.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "fuzz_wds: check failed at line %d: %s\n", __LINE__, #c);              \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void check_err(int rc, const char *err, size_t cap)
{
    CHECK(rc == -EINVAL);
    CHECK(memchr(err, 0, cap) && err[0] && !strchr(err, '\n'));
}

/* The stream again as whole samples (every member): the keys and offsets of the samples
 * bfs_wds_next gave (keys[0..nkeys)), fields made and converted (record_check.h). */
static void read_members(const uint8_t *p, size_t n, size_t step, char **keys, uint64_t *offs,
                         size_t nkeys)
{
    shard_mem m;
    bfs_wds w;
    bfs_wds_init(&w, shard_mem_in(&m, p, n, step), NULL, NULL);
    bfs_members mem = {0};
    record_fuzz rf = {.src = BFS_SRC_WDS};
    char err[512];
    for (size_t i = 0;; i++) {
        uint64_t off = 0;
        int rc = bfs_wds_next_members(&w, &mem, &off, err, sizeof err);
        CHECK(m.pos <= n);
        if (rc <= 0) {
            CHECK(mem.n == 0 && i >= nkeys);
            if (rc < 0)
                check_err(rc, err, sizeof err);
            break;
        }
        CHECK(i < nkeys && !strcmp(keys[i], w.key) && off == offs[i]);
        for (size_t k = 0; k < mem.n; k++)
            CHECK(mem.v[k].type == BFS_MEMBER_BYTES && mem.v[k].len <= n &&
                  (mem.v[k].bad || mem.v[k].data));
        record_fuzz_sample(&rf, &mem);
    }
    bfs_members_free(&mem);
}

/* Read the whole stream as samples. Returns the offset of a header whose checksum failed
 * (to repair), or -1. */
static long read_all(const uint8_t *p, size_t n, size_t step, const char *ext)
{
    shard_mem m;
    bfs_wds w;
    bfs_wds_init(&w, shard_mem_in(&m, p, n, step), ext, NULL);
    char err[512];
    char *keys[256];
    uint64_t offs[256];
    size_t nkeys = 0;
    long result = -1;
    for (int i = 0; i < 100000; i++) {
        bfs_shard_sample s;
        memset(err, 'x', sizeof err);
        int rc = bfs_wds_next(&w, &s, err, sizeof err);
        CHECK(m.pos <= n && w.tar.off == m.pos);
        if (rc < 0) {
            check_err(rc, err, sizeof err);
            CHECK(!s.image);
            result = w.tar.bad_checksum ? (long)(w.tar.off - 512) : -1;
            break;
        }
        if (rc == 0)
            break;
        if (nkeys < 256 && !ext) {
            CHECK(keys[nkeys] = strdup(s.key));
            offs[nkeys++] = s.offset;
        }
        CHECK(s.key && s.key[0] && strlen(s.key) <= BFS_TAR_NAME_MAX);
        CHECK(s.offset % 512 == 0 && s.offset < w.tar.off);
        CHECK(s.image_len <= n);
        if (s.image)
            for (size_t k = 0; k < s.image_len; k += 64)
                (void)*(volatile uint8_t *)(s.image + k);
        if (!s.skip)
            CHECK(s.image && s.label >= 0 && s.label <= BFS_SHARD_LABEL_MAX);
        free(s.image);
    }
    if (!ext && nkeys < 256)
        read_members(p, n, step, keys, offs, nkeys);
    for (size_t i = 0; i < nkeys; i++)
        free(keys[i]);
    return result;
}

static void repair(uint8_t *h)
{
    unsigned sum = 0;
    memset(h + 148, ' ', 8);
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum & 0777777);
    h[155] = ' ';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int which = data[0] & 3;
    size_t step = (data[0] >> 2 & 7) * 97;
    const char *ext = data[0] & 0x20 ? "png" : NULL;
    size_t n = size - 1;
    uint8_t *p = malloc(n ? n : 1); /* a copy: ASan sees reads past n */
    CHECK(p);
    memcpy(p, data + 1, n);
    if (which < 2) {
        for (int tries = 0; tries < 16; tries++) {
            long at = read_all(p, n, step, ext);
            if (at < 0 || (size_t)at + 512 > n)
                break;
            repair(p + at);
        }
    } else if (which == 2) {
        int64_t v;
        int rc = bfs_wds_json_label((const char *)p, n, "label", &v);
        CHECK(rc == 0 || rc == 1 || rc == 2 || rc == -EINVAL);
        if (rc == 0) {
            char again[64];
            int64_t w;
            int k = snprintf(again, sizeof again, "{\"label\":%" PRId64 "}", v);
            CHECK(bfs_wds_json_label(again, (size_t)k, "label", &w) == 0 && w == v);
        }
    } else {
        int64_t v;
        int rc = bfs_wds_cls_label((const char *)p, n, &v);
        CHECK(rc == 0 || rc == -EINVAL);
        if (rc == 0) {
            char again[32];
            int64_t w;
            int k = snprintf(again, sizeof again, "%" PRId64, v);
            CHECK(bfs_wds_cls_label(again, (size_t)k, &w) == 0 && w == v);
        }
    }
    free(p);
    return 0;
}
