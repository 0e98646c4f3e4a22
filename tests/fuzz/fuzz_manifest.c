/*
 * fuzz_manifest.c — libFuzzer target for the manifest reader of mkbatchfs
 * (engine/dataset/manifest.c: JSON Lines and RFC 4180 CSV) and the fields made of its
 * columns (engine/dataset/record.c, through tests/fuzz/record_check.h).
 *
 * Input: [0] bit 0: CSV (else JSON Lines), bits 1-3: how many bytes the read callback
 *        hands out at a time (0: all asked, else k x 7); the rest: the manifest.
 * Each record's image column (image, path or file_name), when a string, becomes the
 * bytes of that string, as pack.c puts the file's bytes there, so the schema and the
 * conversion see what a pack sees. Checked (manifest.h, record.h):
 *  - no crash, no read outside the input, no leak; errors are -EINVAL with a one-line
 *    message; the stream is never read past its end; lines rise;
 *  - a record comes back with columns, or skipped with a one-line reason and none;
 *    CSV records have as many columns as the header, each a JSON value;
 *  - record_check.h's checks of the schemas and the converted records.
 */
#include "engine/dataset/manifest.h"
#include "tests/fuzz/record_check.h"
#include "tests/fuzz/shard_mem.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "fuzz_manifest: check failed at line %d: %s\n", __LINE__, #c);         \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* The image column's string into bytes, as pack.c's manifest_image does with the file. */
static void image_bytes(bfs_members *m)
{
    static const char *const names[] = {"image", "path", "file_name"};
    for (size_t i = 0; i < 3; i++) {
        bfs_member *v = (bfs_member *)bfs_members_find(m, names[i], 0);
        if (!v || !json_is_string((json_t *)v->json))
            continue;
        size_t n = json_string_length(v->json);
        uint8_t *d = malloc(n ? n : 1);
        CHECK(d);
        memcpy(d, json_string_value(v->json), n);
        json_decref(v->json);
        v->json = NULL;
        free(v->data); /* a CSV cell's text */
        v->type = BFS_MEMBER_BYTES, v->data = d, v->len = n;
        return;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int csv = data[0] & 1;
    size_t step = (size_t)(data[0] >> 1 & 7) * 7;
    shard_mem sm;
    bfs_manifest m;
    bfs_manifest_init(&m, shard_mem_in(&sm, data + 1, size - 1, step), csv);
    bfs_members mem = {0};
    record_fuzz rf = {.src = BFS_SRC_MANIFEST};
    uint64_t last_line = 0;
    for (int i = 0; i < 10000; i++) {
        char err[512], whybuf[600];
        const char *skip = NULL;
        memset(err, 'x', sizeof err);
        int rc = bfs_manifest_next(&m, &mem, &skip, whybuf, sizeof whybuf, err, sizeof err);
        CHECK(sm.pos <= sm.n);
        if (rc < 0) {
            CHECK(rc == -EINVAL);
            CHECK(memchr(err, 0, sizeof err) && err[0] && !strchr(err, '\n'));
            CHECK(mem.n == 0);
            break;
        }
        if (rc == 0) {
            CHECK(mem.n == 0);
            break;
        }
        CHECK(m.sample_line > last_line);
        last_line = m.sample_line;
        CHECK(!strncmp(m.key, "line ", 5));
        if (skip) {
            CHECK(mem.n == 0 && skip[0] && !strchr(skip, '\n'));
            continue;
        }
        if (csv)
            CHECK(mem.n == m.ncols);
        for (size_t k = 0; k < mem.n; k++)
            CHECK(mem.v[k].type == BFS_MEMBER_JSON && mem.v[k].json);
        image_bytes(&mem);
        record_fuzz_sample(&rf, &mem);
    }
    bfs_members_free(&mem);
    bfs_manifest_close(&m);
    return 0;
}
