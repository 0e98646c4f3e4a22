/*
 * fuzz_bfs.c — libFuzzer target for the .bfs reader (engine/dataset/bfs_read.c).
 *
 * Each input is opened twice at most:
 *   1. as is, with bfs_open_mem: magic, version, header checksum, truncation paths;
 *   2. when it starts with the magic number, is at least a header long and its header
 *      checksum does not match, a copy with bytes 120..127 set to XXH64(bytes 0..119):
 *      almost every mutation of a header breaks its checksum, so without this repair the
 *      fuzzer would never get past that check to the layout validation behind it.
 * Valid seeds (tests/fuzz/seeds/bfs/) already carry a good checksum and take path 1 only.
 *
 * When a file opens, the target walks what a consumer would: every sample entry (up to
 * MAX_WALK), its payload with and without verification, every class name, every page,
 * the tables checksum and a few out-of-range indices. Returned bytes are read, so ASan
 * reports any pointer the reader hands out past the input, and the reader's documented
 * contracts (bfs.h, docs/format.md) are checked with CHECK: a violated contract aborts
 * like a memory error does.
 */
#include "engine/dataset/bfs.h"
#include "base/err.h"
#include "base/hash.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_WALK 4096u /* samples, classes, pages: bounds the time per input */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_bfs: %s:%d: contract violated: %s\n", __FILE__, __LINE__,        \
                    #cond);                                                                        \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static volatile uint8_t sink; /* keeps the reads below from being optimised away */

/* Read every byte of [p, p + n) so ASan sees an out-of-bounds pointer or length. */
static void touch(const uint8_t *p, size_t n)
{
    uint8_t x = 0;
    for (size_t i = 0; i < n; i++)
        x ^= p[i];
    sink = x;
}

static int is_project_or_errno(int rc)
{
    return rc < 0 && (rc > -4096 || (rc >= BFS_E_FIRST && rc < BFS_E_LAST));
}

static int same_sample(const bfs_sample *a, const bfs_sample *b)
{
    /* field by field: the struct has padding */
    return a->offset == b->offset && a->length == b->length && a->label == b->label &&
           a->width == b->width && a->height == b->height && a->flags == b->flags &&
           a->checksum == b->checksum && a->raw_size == b->raw_size;
}

/* Field declarations: what open promises (bfs_field_check holds for each). */
static void walk_fields(const bfs_reader *r)
{
    const bfs_info *in = bfs_get_info(r);
    CHECK(bfs_field_count(r) == in->field_count && in->field_count >= 1 &&
          in->field_count <= BFS_FIELD_MAX);
    CHECK(in->version >= 3 || in->field_count == 1);
    for (uint32_t f = 0; f < in->field_count; f++) {
        const bfs_field *fd = bfs_get_field(r, f);
        CHECK(fd != NULL && bfs_field_check(fd, f, in->field_count, NULL, 0) == 0);
        CHECK(fd->follows == BFS_FIELD_NONE ||
              bfs_get_field(r, fd->follows)->kind == BFS_FIELD_BOXES);
    }
    CHECK(bfs_get_field(r, in->field_count) == NULL);
}

static void walk_samples(bfs_reader *r, const uint8_t *base, size_t size)
{
    const bfs_info *in = bfs_get_info(r);
    uint64_t n = in->sample_count < MAX_WALK ? in->sample_count : MAX_WALK;
    const uint8_t *heap = base + in->heap_offset;
    for (uint64_t i = 0; i < n; i++)
        for (uint32_t f = 0; f < in->field_count && f * n < 4 * MAX_WALK; f++) {
            const bfs_field *fd = bfs_get_field(r, f);
            bfs_sample s;
            int rc = bfs_get_value(r, i, f, &s);
            if (rc) {
                CHECK(rc == BFS_E_SAMPLE_RANGE || rc == BFS_E_LABEL);
                continue;
            }
            CHECK(s.offset <= in->heap_size && s.length <= in->heap_size - s.offset);
            CHECK(f == 0 ? s.label < in->class_count : s.label == 0);
            CHECK((s.flags & ~BFS_FLAGS_KNOWN) == 0);
            if (f == 0)
                CHECK(s.length > 0);
            if (fd->kind == BFS_FIELD_IMAGE && s.length) {
                CHECK(s.width > 0 && s.height > 0);
                CHECK((s.flags & BFS_KIND_MASK) != BFS_KIND_TOKENS);
                CHECK(in->version >= 3 || (s.flags & BFS_KIND_MASK) != BFS_KIND_CODEC);
                if ((s.flags & BFS_KIND_MASK) == BFS_KIND_RAW) /* raw_size = w*h*3 */
                    CHECK((uint64_t)s.raw_size == (uint64_t)s.width * s.height * 3u);
            } else if (fd->kind == BFS_FIELD_TOKENS && in->version == 2) {
                CHECK(s.raw_size * (s.flags & BFS_F_TOKENS_U32 ? 4ull : 2ull) == s.length);
            } else if (fd->kind != BFS_FIELD_IMAGE) {
                CHECK((uint64_t)s.raw_size * bfs_fdt_size(fd->dtype) == s.length);
                CHECK(s.raw_size <= fd->max_count);
            }

            /* unverified: the pointer must lie inside the heap, whatever the checksums say */
            const uint8_t *p = NULL;
            size_t len = 0;
            bfs_sample s2;
            rc = bfs_value_data(r, i, f, BFS_VERIFY_NONE, &s2, &p, &len);
            CHECK(rc == 0);
            CHECK(len == s.length && same_sample(&s, &s2));
            CHECK(len ? p == heap + s.offset : p == NULL);
            if (len) {
                CHECK(p >= base && len <= size && p - base <= (ptrdiff_t)(size - len));
                touch(p, len);
            }

            /* verified: either it matches or it says which checksum failed */
            p = NULL;
            rc = bfs_value_data(r, i, f, BFS_VERIFY_SAMPLE | BFS_VERIFY_PAGES, NULL, &p, &len);
            CHECK(rc == 0 || rc == BFS_E_SAMPLE_CHECKSUM || rc == BFS_E_PAGE_CHECKSUM);
            if (rc == 0 && len) {
                CHECK(p == heap + s.offset);
                CHECK((uint32_t)bfs_xxh64(p, len, 0) == s.checksum);
                touch(p, len);
            }
        }
    bfs_sample s;
    CHECK(bfs_get_sample(r, in->sample_count, &s) == BFS_E_SAMPLE_INDEX);
    CHECK(bfs_get_sample(r, UINT64_MAX, &s) == BFS_E_SAMPLE_INDEX);
    CHECK(bfs_get_value(r, 0, in->field_count, &s) == BFS_E_SAMPLE_INDEX);
    const uint8_t *p;
    size_t len;
    CHECK(bfs_sample_data(r, in->sample_count, BFS_VERIFY_PAGES, NULL, &p, &len) ==
          BFS_E_SAMPLE_INDEX);
}

static void walk_classes(const bfs_reader *r)
{
    const bfs_info *in = bfs_get_info(r);
    uint32_t n = in->class_count < MAX_WALK ? in->class_count : MAX_WALK;
    for (uint32_t c = 0; c < n; c++) {
        const char *name = NULL;
        size_t len = 0;
        int rc = bfs_class_name(r, c, &name, &len);
        if (rc) {
            CHECK(rc == BFS_E_CLASS_NAME);
            continue;
        }
        CHECK(len >= 1 && len <= BFS_MAX_CLASS_NAME);
        touch((const uint8_t *)name, len + 1); /* the name and its NUL */
        CHECK(strlen(name) == len);
        CHECK(bfs_class_name(r, c, &name, NULL) == 0); /* len may be NULL */
    }
    const char *name;
    CHECK(bfs_class_name(r, in->class_count, &name, NULL) == BFS_E_SAMPLE_INDEX);
    CHECK(bfs_class_name(r, UINT32_MAX, &name, NULL) == BFS_E_SAMPLE_INDEX);
}

static void walk_pages(bfs_reader *r)
{
    const bfs_info *in = bfs_get_info(r);
    uint64_t n = in->page_count < MAX_WALK ? in->page_count : MAX_WALK;
    for (uint64_t pg = 0; pg < n; pg++) {
        uint64_t b, e;
        bfs_page_range(r, pg, &b, &e);
        CHECK(b < e && e <= in->heap_size && e - b <= in->page_size);
        int rc = bfs_verify_page(r, pg);
        CHECK(rc == 0 || rc == BFS_E_PAGE_CHECKSUM);
        if (rc == 0) /* remembered: the second call must agree */
            CHECK(bfs_verify_page(r, pg) == 0);
    }
    CHECK(bfs_verify_page(r, in->page_count) == BFS_E_SAMPLE_INDEX);
    CHECK(bfs_verify_page(r, UINT64_MAX) == BFS_E_SAMPLE_INDEX);
}

static void open_and_walk(const uint8_t *base, size_t size)
{
    bfs_reader *r = NULL;
    char err[256];
    memset(err, 'x', sizeof err);
    int rc = bfs_open_mem(base, size, &r, err, sizeof err);
    if (rc) {
        /* bfs.h: a failed open returns a known code, no reader, and a one-line message */
        CHECK(is_project_or_errno(rc));
        CHECK(r == NULL);
        CHECK(memchr(err, 0, sizeof err) != NULL && err[0] != 0 && !strchr(err, '\n'));
        return;
    }
    CHECK(r != NULL);
    const bfs_info *in = bfs_get_info(r);
    /* what open promises to have validated */
    CHECK(in->version >= BFS_VERSION_MIN && in->version <= BFS_VERSION && in->file_size == size);
    CHECK(in->sample_count >= 1 && in->class_count >= 1 && in->class_count <= BFS_MAX_CLASSES);
    CHECK(in->page_size >= BFS_PAGE_SIZE_MIN && in->page_size <= BFS_PAGE_SIZE_MAX &&
          (in->page_size & (in->page_size - 1)) == 0);
    CHECK(in->heap_offset >= BFS_HEADER_SIZE && in->heap_offset <= size &&
          in->heap_size <= size - in->heap_offset);
    CHECK(in->page_count == in->heap_size / in->page_size + (in->heap_size % in->page_size != 0));
    CHECK(in->sample_table_offset >= in->heap_offset + in->heap_size &&
          in->sample_table_offset <= size &&
          in->sample_record_size == BFS_SAMPLE_RECORD * in->field_count &&
          in->sample_count <= (size - in->sample_table_offset) / in->sample_record_size);
    CHECK(in->class_table_offset >=
              in->sample_table_offset + in->sample_count * in->sample_record_size &&
          in->class_table_offset <= size && in->class_table_size <= size - in->class_table_offset &&
          in->class_table_size >= (uint64_t)in->class_count * 8);
    CHECK(in->version < 3 ||
          (in->field_table_offset >= in->class_table_offset + in->class_table_size &&
           in->field_table_size == 8 + BFS_FIELD_DESC * (uint64_t)in->field_count &&
           in->page_table_offset >= in->field_table_offset + in->field_table_size));
    CHECK(in->page_table_offset >= in->class_table_offset + in->class_table_size &&
          in->page_table_offset <= size && in->page_count <= (size - in->page_table_offset) / 8);
    CHECK(in->header_checksum == bfs_xxh64(base, 120, 0));

    walk_fields(r);
    walk_samples(r, base, size);
    walk_classes(r);
    walk_pages(r);
    int trc = bfs_verify_tables(r);
    CHECK(trc == 0 || trc == BFS_E_TABLE_CHECKSUM);
    bfs_close(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    open_and_walk(data, size);

    if (size >= BFS_HEADER_SIZE && memcmp(data, BFS_MAGIC, 8) == 0) {
        uint64_t want = bfs_xxh64(data, 120, 0), have;
        memcpy(&have, data + 120, 8);
        if (have != want) {
            /* exactly size bytes, so ASan still sees reads past the end */
            uint8_t *copy = malloc(size);
            if (!copy)
                return 0;
            memcpy(copy, data, size);
            memcpy(copy + 120, &want, 8);
            open_and_walk(copy, size);
            free(copy);
        }
    }
    bfs_close(NULL); /* destructors accept NULL */
    return 0;
}
