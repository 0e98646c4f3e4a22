/*
 * check_format.c — the .bfs format, its reader and writer, the JPEG header walker and
 * the ImageFolder packer: round trips, random access, determinism across job counts,
 * and every corruption we could think of, each with its own error code.
 */
#include "engine/dataset/bfs.h"
#include "engine/dataset/guard.h"
#include "base/err.h"
#include "base/utf8.h"
#include "base/hash.h"
#include "engine/dataset/jpeg.h"
#include "engine/dataset/pack.h"
#include "engine/engine.h"
#include "tests/testutil.h"

#include <check.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <lz4.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <turbojpeg.h>
#include <unistd.h>

static char *tmp;      /* per-test scratch directory */
static char src[4096]; /* ImageFolder */
static char out[4096]; /* packed file */

static void setup(void)
{
    tmp = tu_mkdtemp("check_format");
    ck_assert_ptr_nonnull(tmp);
    snprintf(src, sizeof src, "%s/src", tmp);
    snprintf(out, sizeof out, "%s/data.bfs", tmp);
}

static void teardown(void)
{
    tu_rmtree(tmp);
    free(tmp);
}

static int pack_with(const char *from, const char *to, int jobs, uint32_t page_size,
                     bfs_pack_report *rep)
{
    bfs_pack_opts o = {.jobs = jobs, .page_size = page_size};
    char err[1024];
    int rc = bfs_pack(from, to, &o, rep, NULL, err, sizeof err);
    if (rc)
        fprintf(stderr, "pack: %s\n", err);
    return rc;
}

/* src packed to out on 4 KiB pages */
static void pack_src(void)
{
    bfs_pack_report rep;
    ck_assert_int_eq(pack_with(src, out, 1, 4096, &rep), 0);
    bfs_pack_report_free(&rep);
}

/* src made: an ImageFolder of 2 classes of `per` images (sides lo..hi), then packed */
static void pack_folder(int per, int lo, int hi, unsigned seed)
{
    ck_assert_int_eq(tu_make_imagefolder(src, 2, per, lo, hi, seed), 0);
    pack_src();
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

/* ---- hash ------------------------------------------------------------------------ */

/* Sample i of a file reader as bfs_sample_data gives it for memory images (pages, then
 * the sample's checksum, as verify asks); *d points into a buffer valid until the next
 * call. */
static int read_sample(bfs_reader *r, uint64_t i, unsigned verify, bfs_sample *s, const uint8_t **d,
                       size_t *len)
{
    static uint8_t buf[4 << 20];
    int rc = bfs_get_sample(r, i, s);
    if (rc)
        return rc;
    uint64_t ps = bfs_get_info(r)->page_size;
    for (uint64_t pg = s->offset / ps;
         (verify & BFS_VERIFY_PAGES) && pg <= (s->offset + s->length - 1) / ps; pg++)
        if ((rc = bfs_verify_page(r, pg)))
            return rc;
    rc = bfs_read_sample(r, i, verify & BFS_VERIFY_SAMPLE, s, buf, sizeof buf);
    *d = buf;
    *len = s->length;
    return rc;
}

START_TEST(xxh64_vectors)
{
    /* reference values of XXH64 with seed 0 (the xxhash package) */
    ck_assert_uint_eq(bfs_xxh64("", 0, 0), 0xef46db3751d8e999ULL);
    ck_assert_uint_eq(bfs_xxh64("a", 1, 0), 0xd24ec4f1a98c6e5bULL);
    ck_assert_uint_eq(bfs_xxh64("abc", 3, 0), 0x44bc2cf5ad770999ULL);
    const char *fox = "The quick brown fox jumps over the lazy dog";
    ck_assert_uint_eq(bfs_xxh64(fox, strlen(fox), 0), 0x0b242d361fda71bcULL);
    /* streaming in odd pieces equals one-shot */
    uint8_t buf[1000];
    uint64_t s = 7;
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (uint8_t)tu_rand(&s);
    bfs_xxh64_state st;
    bfs_xxh64_init(&st, 42);
    for (size_t i = 0, step = 1; i < sizeof buf; i += step, step = step * 3 % 37 + 1)
        bfs_xxh64_update(&st, buf + i, i + step > sizeof buf ? sizeof buf - i : step);
    ck_assert_uint_eq(bfs_xxh64_digest(&st), bfs_xxh64(buf, sizeof buf, 42));
}
END_TEST

/* ---- round trip ------------------------------------------------------------------- */

START_TEST(round_trip)
{
    ck_assert_int_eq(tu_make_imagefolder(src, 3, 9, 40, 120, 5), 0);
    bfs_pack_report rep;
    ck_assert_int_eq(pack_with(src, out, 2, 0, &rep), 0);
    ck_assert_uint_eq(rep.packed, 27);
    ck_assert_uint_eq(rep.nskipped, 0);
    bfs_pack_report_free(&rep);

    bfs_reader *r;
    char err[512];
    ck_assert_int_eq(bfs_open(out, &r, err, sizeof err), 0);
    const bfs_info *in = bfs_get_info(r);
    ck_assert_uint_eq(in->sample_count, 27);
    ck_assert_uint_eq(in->class_count, 3);
    ck_assert_uint_eq(in->page_size, BFS_PAGE_SIZE_DEFAULT);
    ck_assert_uint_eq(in->flags, BFS_DS_HAS_JPEG);
    ck_assert_int_eq(bfs_verify_tables(r), 0);
    for (uint32_t c = 0; c < 3; c++) {
        const char *name;
        char want[32];
        snprintf(want, sizeof want, "class_%03u", c);
        ck_assert_int_eq(bfs_class_name(r, c, &name, NULL), 0);
        ck_assert_str_eq(name, want);
    }
    int progressive = 0, gray = 0;
    for (uint64_t i = 0; i < 27; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/class_%03u/img_%05u.jpg", src, (unsigned)(i / 9),
                 (unsigned)(i % 9));
        uint8_t *want;
        size_t wlen;
        ck_assert_int_eq(tu_read_file(path, &want, &wlen), 0);
        bfs_sample s;
        const uint8_t *got;
        size_t glen;
        ck_assert_int_eq(read_sample(r, i, BFS_VERIFY_SAMPLE | BFS_VERIFY_PAGES, &s, &got, &glen),
                         0);
        ck_assert_uint_eq(s.label, i / 9);
        ck_assert_uint_eq(glen, wlen);
        ck_assert_mem_eq(got, want, wlen);
        bfs_jpeg_header h;
        ck_assert_int_eq(bfs_jpeg_parse_header(want, wlen, &h), 0);
        ck_assert_int_eq(s.width, h.width);
        ck_assert_int_eq(s.height, h.height);
        progressive += !!(s.flags & BFS_F_PROGRESSIVE);
        gray += (s.flags & BFS_COLOR_MASK) == BFS_COLOR_GRAY;
        free(want);
    }
    /* the generator makes every 7th progressive and every 11th gray */
    ck_assert_int_eq(progressive, 3);
    ck_assert_int_eq(gray, 2);
    bfs_close(r);
    /* nothing but the output is left behind */
    ck_assert_int_eq(count_entries(tmp), 2);
}
END_TEST

START_TEST(random_access_and_pages)
{
    /* 4 KiB pages and 2..24 KB payloads: some payloads span pages */
    pack_folder(20, 40, 160, 9);
    bfs_reader *r;
    ck_assert_int_eq(bfs_open(out, &r, NULL, 0), 0);
    const bfs_info *in = bfs_get_info(r);
    ck_assert_uint_eq(in->page_size, 4096);
    ck_assert_uint_gt(in->page_count, 10);
    int spanning = 0;
    uint64_t state = 3;
    for (int k = 0; k < 200; k++) {
        uint64_t i = tu_rand(&state) % in->sample_count;
        bfs_sample s;
        const uint8_t *d;
        size_t len;
        ck_assert_int_eq(read_sample(r, i, BFS_VERIFY_PAGES | BFS_VERIFY_SAMPLE, &s, &d, &len), 0);
        ck_assert_uint_eq(d[0], 0xFF);
        ck_assert_uint_eq(d[1], 0xD8);
        uint64_t first = s.offset / 4096, last = (s.offset + s.length - 1) / 4096;
        if (s.length <= 4096)
            ck_assert_uint_eq(first, last); /* fits: never straddles */
        else {
            ck_assert_uint_eq(s.offset % 4096, 0); /* larger: starts on a boundary */
            spanning++;
        }
    }
    ck_assert_int_gt(spanning, 0);
    ck_assert_int_eq(bfs_get_sample(r, in->sample_count, &(bfs_sample){0}), BFS_E_SAMPLE_INDEX);
    ck_assert_int_eq(bfs_verify_page(r, in->page_count), BFS_E_SAMPLE_INDEX);
    bfs_close(r);
}
END_TEST

START_TEST(deterministic_across_jobs)
{
    ck_assert_int_eq(tu_make_imagefolder(src, 4, 12, 30, 90, 11), 0);
    char out2[4200];
    snprintf(out2, sizeof out2, "%s/b.bfs", tmp);
    bfs_pack_report rep;
    ck_assert_int_eq(pack_with(src, out, 1, 0, &rep), 0);
    bfs_pack_report_free(&rep);
    ck_assert_int_eq(pack_with(src, out2, 5, 0, &rep), 0);
    bfs_pack_report_free(&rep);
    uint8_t *a, *b;
    size_t alen, blen;
    ck_assert_int_eq(tu_read_file(out, &a, &alen), 0);
    ck_assert_int_eq(tu_read_file(out2, &b, &blen), 0);
    ck_assert_uint_eq(alen, blen);
    ck_assert_mem_eq(a, b, alen);
    free(a);
    free(b);
}
END_TEST

/* ---- corruptions ------------------------------------------------------------------ */

static uint8_t *packed;
static size_t packed_len;

static void corrupt_setup(void)
{
    setup();
    pack_folder(6, 30, 80, 21);
    ck_assert_int_eq(tu_read_file(out, &packed, &packed_len), 0);
}

static void corrupt_teardown(void)
{
    free(packed);
    teardown();
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static void put64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

static void fix_header_checksum(uint8_t *f)
{
    put64(f + 120, bfs_xxh64(f, 120, 0));
}

/* Open a modified copy (both from memory and through a file) and return the error. */
static int open_copy(const uint8_t *data, size_t len, char *err, size_t errlen)
{
    bfs_reader *r;
    int rc_mem = bfs_open_mem(data, len, &r, NULL, 0);
    bfs_close(r);
    char path[4200];
    snprintf(path, sizeof path, "%s/corrupt.bfs", tmp);
    ck_assert_int_eq(tu_write_file(path, data, len), 0);
    int rc = bfs_open(path, &r, err, errlen);
    bfs_close(r);
    ck_assert_int_eq(rc_mem, rc);
    if (rc)
        ck_assert_ptr_nonnull(strstr(err, "corrupt.bfs")); /* messages name the file */
    return rc;
}

START_TEST(corrupt_header_cases)
{
    char err[512];
    uint8_t *f = malloc(packed_len + 64);
    ck_assert_int_eq(open_copy(packed, packed_len, err, sizeof err), 0);

    ck_assert_int_eq(open_copy(packed, 0, err, sizeof err), BFS_E_TRUNCATED);
    ck_assert_int_eq(open_copy(packed, 60, err, sizeof err), BFS_E_TRUNCATED);
    ck_assert_int_eq(open_copy(packed, packed_len - 100, err, sizeof err), BFS_E_TRUNCATED);
    ck_assert_ptr_nonnull(strstr(err, "truncated"));

    memcpy(f, packed, packed_len);
    f[1] = 'X';
    ck_assert_int_eq(open_copy(f, packed_len, err, sizeof err), BFS_E_MAGIC);

    memcpy(f, packed, packed_len);
    memset(f, 0, 128); /* what an interrupted mkbatchfs leaves */
    ck_assert_int_eq(open_copy(f, packed_len, err, sizeof err), BFS_E_MAGIC);
    ck_assert_ptr_nonnull(strstr(err, "interrupted"));

    for (uint32_t v = 0; v <= 4; v += 4) { /* versions 1 to 3 are read; 0 and 4 not */
        memcpy(f, packed, packed_len);
        put32(f + 8, v);
        fix_header_checksum(f);
        ck_assert_int_eq(open_copy(f, packed_len, err, sizeof err), BFS_E_VERSION);
        ck_assert_ptr_nonnull(strstr(err, "versions 1..3"));
    }

    memcpy(f, packed, packed_len);
    f[20] ^= 1; /* sample count bit, checksum not fixed */
    ck_assert_int_eq(open_copy(f, packed_len, err, sizeof err), BFS_E_HEADER_CHECKSUM);

    memcpy(f, packed, packed_len);
    put64(f + 56, packed_len + 4096); /* sample table beyond the end */
    fix_header_checksum(f);
    ck_assert_int_eq(open_copy(f, packed_len, err, sizeof err), BFS_E_LAYOUT);
    ck_assert_ptr_nonnull(strstr(err, "sample table"));

    memcpy(f, packed, packed_len);
    put64(f + 80, get64(f + 56)); /* page table overlapping the sample table */
    fix_header_checksum(f);
    ck_assert_int_eq(open_copy(f, packed_len, err, sizeof err), BFS_E_LAYOUT);

    memcpy(f, packed, packed_len);
    put64(f + 40, UINT64_MAX - 100); /* heap size overflowing */
    fix_header_checksum(f);
    int rc = open_copy(f, packed_len, err, sizeof err);
    ck_assert(rc == BFS_E_COUNT || rc == BFS_E_LAYOUT);

    memcpy(f, packed, packed_len);
    put64(f + 16, 1ULL << 60); /* absurd sample count */
    fix_header_checksum(f);
    ck_assert_int_eq(open_copy(f, packed_len, err, sizeof err), BFS_E_COUNT);

    memcpy(f, packed, packed_len);
    put64(f + 16, 0);
    fix_header_checksum(f);
    ck_assert_int_eq(open_copy(f, packed_len, err, sizeof err), BFS_E_COUNT);

    memcpy(f, packed, packed_len);
    put32(f + 24, 0xFFFFFFFFu); /* absurd class count */
    fix_header_checksum(f);
    ck_assert_int_eq(open_copy(f, packed_len, err, sizeof err), BFS_E_COUNT);

    memcpy(f, packed, packed_len);
    put32(f + 28, 5000); /* page size not a power of two */
    fix_header_checksum(f);
    ck_assert_int_eq(open_copy(f, packed_len, err, sizeof err), BFS_E_COUNT);

    memcpy(f, packed, packed_len);
    put64(f + 48, get64(f + 48) + 1); /* page count disagrees with heap size */
    fix_header_checksum(f);
    ck_assert_int_eq(open_copy(f, packed_len, err, sizeof err), BFS_E_COUNT);

    memcpy(f, packed, packed_len);
    memset(f + packed_len, 0xAB, 64); /* trailing garbage */
    ck_assert_int_eq(open_copy(f, packed_len + 64, err, sizeof err), BFS_E_LAYOUT);

    memcpy(f, packed, packed_len);
    memset(f + packed_len, 0, 64); /* slack after the page table, declared in the header */
    put64(f + 88, packed_len + 64);
    fix_header_checksum(f);
    ck_assert_int_eq(open_copy(f, packed_len + 64, err, sizeof err), BFS_E_LAYOUT);
    free(f);

    /* every error has its own message; the codes count up from BFS_E_FIRST (-4200) */
    ck_assert_int_eq(BFS_E_MAGIC, -4200);
    ck_assert_int_eq(BFS_E_FETCH, BFS_E_LAST - 1);
    for (int e = BFS_E_FIRST; e < BFS_E_LAST; e++) {
        ck_assert_str_ne(bfs_strerror(e), "unknown error");
        for (int e2 = e + 1; e2 < BFS_E_LAST; e2++)
            ck_assert_str_ne(bfs_strerror(e), bfs_strerror(e2));
    }
    /* what a reader of a failed batch gets */
    ck_assert_int_eq(bfs_err_to_errno(-EINTR), EINTR);
    ck_assert_int_eq(bfs_err_to_errno(-ENOMEM), ENOMEM);
    ck_assert_int_eq(bfs_err_to_errno(-EMFILE), ENOMEM);
    ck_assert_int_eq(bfs_err_to_errno(-ENOENT), EIO); /* a source file's, not the batch's */
    ck_assert_int_eq(bfs_err_to_errno(BFS_E_JPEG_DATA), EIO);
    ck_assert_int_eq(bfs_err_to_errno(BFS_E_CHANGED), EIO);
    /* an object store that failed: EIO, not the sample's (no substitute), tried again */
    ck_assert_int_eq(bfs_err_to_errno(BFS_E_FETCH), EIO);
    ck_assert(bfs_err_is_transient(BFS_E_FETCH) && bfs_err_is_transient(-ENOMEM));
    ck_assert(!bfs_err_is_transient(BFS_E_JPEG_DATA) && !bfs_err_is_transient(-EIO));
    ck_assert(!bfs_err_is_resource(BFS_E_FETCH));
}
END_TEST

START_TEST(corrupt_payload_and_tables)
{
    uint8_t *f = malloc(packed_len);
    bfs_reader *r;
    bfs_sample s;
    const uint8_t *d;
    size_t len;

    /* a flipped payload byte: open succeeds (O(1)), verification catches it */
    memcpy(f, packed, packed_len);
    ck_assert_int_eq(bfs_open_mem(f, packed_len, &r, NULL, 0), 0);
    ck_assert_int_eq(bfs_get_sample(r, 3, &s), 0);
    const bfs_info *in = bfs_get_info(r);
    f[in->heap_offset + s.offset + s.length / 2] ^= 0x40;
    ck_assert_int_eq(bfs_sample_data(r, 3, BFS_VERIFY_NONE, NULL, &d, &len), 0);
    ck_assert_int_eq(bfs_sample_data(r, 3, BFS_VERIFY_SAMPLE, NULL, &d, &len),
                     BFS_E_SAMPLE_CHECKSUM);
    ck_assert_int_eq(bfs_sample_data(r, 3, BFS_VERIFY_PAGES, NULL, &d, &len), BFS_E_PAGE_CHECKSUM);
    ck_assert_int_eq(bfs_verify_page(r, s.offset / in->page_size), BFS_E_PAGE_CHECKSUM);
    ck_assert_int_eq(bfs_sample_data(r, 0, BFS_VERIFY_PAGES | BFS_VERIFY_SAMPLE, NULL, &d, &len),
                     0);
    ck_assert_int_eq(bfs_verify_tables(r), 0);
    uint64_t sto = in->sample_table_offset, cto = in->class_table_offset;
    bfs_close(r);

    /* a sample entry pointing outside the heap */
    memcpy(f, packed, packed_len);
    put64(f + sto + 2 * 32, 1ULL << 40);
    ck_assert_int_eq(bfs_open_mem(f, packed_len, &r, NULL, 0), 0);
    ck_assert_int_eq(bfs_get_sample(r, 2, &s), BFS_E_SAMPLE_RANGE);
    ck_assert_int_eq(bfs_sample_data(r, 2, 0, NULL, &d, &len), BFS_E_SAMPLE_RANGE);
    /* the prefetch hint checks bounds only: an entry outside the heap, a sample or field
     * out of range, are no-ops (no pointer is made past the image: sanitizer builds) */
    bfs_value_prefetch(r, 2, 0, 1 << 20);
    bfs_value_prefetch(r, 2, 0, 0);
    bfs_value_prefetch(r, bfs_get_info(r)->sample_count, 0, 64);
    bfs_value_prefetch(r, 1, 1, 64);
    bfs_value_prefetch(r, 1, 0, SIZE_MAX);
    ck_assert_int_eq(bfs_get_sample(r, 1, &s), 0);
    ck_assert_int_eq(bfs_verify_tables(r), BFS_E_TABLE_CHECKSUM);
    bfs_close(r);

    /* a length running past the heap end */
    memcpy(f, packed, packed_len);
    put32(f + sto + 2 * 32 + 8, 0xFFFFFFF0u);
    ck_assert_int_eq(bfs_open_mem(f, packed_len, &r, NULL, 0), 0);
    ck_assert_int_eq(bfs_get_sample(r, 2, &s), BFS_E_SAMPLE_RANGE);
    bfs_close(r);

    /* a label beyond the class count */
    memcpy(f, packed, packed_len);
    put32(f + sto + 4 * 32 + 12, 77);
    ck_assert_int_eq(bfs_open_mem(f, packed_len, &r, NULL, 0), 0);
    ck_assert_int_eq(bfs_get_sample(r, 4, &s), BFS_E_LABEL);
    bfs_close(r);

    /* a raw entry whose raw_size equals width*height*3 only modulo 2^32 */
    memcpy(f, packed, packed_len);
    uint8_t *e6 = f + sto + 6 * 32;
    e6[16] = e6[17] = e6[18] = e6[19] = 0xFF; /* 65535 x 65535 */
    e6[20] = BFS_KIND_RAW, e6[21] = 0;
    put32(e6 + 28, (uint32_t)(65535ull * 65535ull * 3ull));
    ck_assert_int_eq(bfs_open_mem(f, packed_len, &r, NULL, 0), 0);
    ck_assert_int_eq(bfs_get_sample(r, 6, &s), BFS_E_SAMPLE_RANGE);
    bfs_close(r);

    /* unknown flag bits */
    memcpy(f, packed, packed_len);
    f[sto + 5 * 32 + 21] = 0xF0;
    ck_assert_int_eq(bfs_open_mem(f, packed_len, &r, NULL, 0), 0);
    ck_assert_int_eq(bfs_get_sample(r, 5, &s), BFS_E_SAMPLE_RANGE);
    bfs_close(r);

    /* a class name whose terminating NUL is gone, and one pointing outside the table */
    memcpy(f, packed, packed_len);
    uint32_t off, n;
    memcpy(&off, f + cto, 4);
    memcpy(&n, f + cto + 4, 4);
    f[cto + off + n] = 'x';
    put32(f + cto + 8, 1u << 30);
    ck_assert_int_eq(bfs_open_mem(f, packed_len, &r, NULL, 0), 0);
    const char *name;
    ck_assert_int_eq(bfs_class_name(r, 0, &name, NULL), BFS_E_CLASS_NAME);
    ck_assert_int_eq(bfs_class_name(r, 1, &name, NULL), BFS_E_CLASS_NAME);
    ck_assert_int_eq(bfs_class_name(r, 2, &name, NULL), BFS_E_SAMPLE_INDEX);
    bfs_close(r);
    free(f);
}
END_TEST

START_TEST(open_errors)
{
    bfs_reader *r;
    char err[512];
    char path[4200];
    snprintf(path, sizeof path, "%s/missing.bfs", tmp);
    ck_assert_int_eq(bfs_open(path, &r, err, sizeof err), -ENOENT);
    ck_assert_ptr_null(r);
    ck_assert_ptr_nonnull(strstr(err, "missing.bfs"));
    ck_assert_int_eq(bfs_open(tmp, &r, err, sizeof err), BFS_E_NOT_REGULAR); /* a directory */
    ck_assert_ptr_nonnull(strstr(err, "not a regular file"));
    /* a FIFO is refused without blocking (no writer would ever come) */
    snprintf(path, sizeof path, "%s/fifo.bfs", tmp);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    ck_assert_int_eq(bfs_open(path, &r, err, sizeof err), BFS_E_NOT_REGULAR);
    ck_assert_ptr_null(r);
    snprintf(path, sizeof path, "%s/text.bfs", tmp);
    ck_assert_int_eq(tu_write_file(path, "hello, world\n", 13), 0);
    ck_assert_int_eq(bfs_open(path, &r, err, sizeof err), BFS_E_MAGIC);
    bfs_close(NULL); /* accepted */
}
END_TEST

/* A dataset overwritten or truncated in place while open: errors, never SIGBUS. Replaced
 * by a rename: the old inode's bytes, still right. */
START_TEST(changed_underneath)
{
    pack_folder(6, 40, 120, 5);
    bfs_reader *r;
    bfs_sample s;
    const uint8_t *d;
    size_t len;
    ck_assert_int_eq(bfs_open(out, &r, NULL, 0), 0);
    uint64_t n = bfs_get_info(r)->sample_count;
    ck_assert_int_eq(bfs_sample_data(r, 0, BFS_VERIFY_NONE, &s, &d, &len), -ENOTSUP);
    bfs_value_prefetch(r, 0, 0, 4096); /* not mapped: a no-op */
    ck_assert_int_eq(read_sample(r, n - 1, BFS_VERIFY_SAMPLE, &s, &d, &len), 0);
    ck_assert_int_eq(truncate(out, 200), 0); /* in place: the tables are gone too */
    ck_assert_int_eq(read_sample(r, n - 1, BFS_VERIFY_SAMPLE, &s, &d, &len), BFS_E_CHANGED);
    ck_assert_int_eq(read_sample(r, 0, BFS_VERIFY_SAMPLE, &s, &d, &len), BFS_E_CHANGED);
    ck_assert_int_eq(bfs_verify_page(r, 0), BFS_E_CHANGED);
    ck_assert_int_eq(bfs_verify_tables(r), 0); /* the copy taken at open */
    bfs_close(r);

    /* overwritten in place, same size: a newer mtime */
    pack_src();
    ck_assert_int_eq(bfs_open(out, &r, NULL, 0), 0);
    ck_assert_int_eq(read_sample(r, 1, BFS_VERIFY_SAMPLE, &s, &d, &len), 0);
    struct timespec later[2] = {{0, UTIME_OMIT}, {time(NULL) + 10, 0}};
    ck_assert_int_eq(utimensat(AT_FDCWD, out, later, 0), 0);
    ck_assert_int_eq(read_sample(r, 1, BFS_VERIFY_SAMPLE, &s, &d, &len), BFS_E_CHANGED);
    bfs_close(r);

    /* overwritten in place with its size and mtime put back (rsync --inplace, touch -r):
     * only the ctime tells */
    ck_assert_int_eq(bfs_open(out, &r, NULL, 0), 0);
    ck_assert_int_eq(read_sample(r, 1, BFS_VERIFY_SAMPLE, &s, &d, &len), 0);
    ck_assert_int_eq(tu_flip_keeping_times(out, (off_t)(bfs_get_info(r)->heap_offset + s.offset)),
                     0);
    ck_assert_int_eq(read_sample(r, 1, BFS_VERIFY_SAMPLE, &s, &d, &len), BFS_E_CHANGED);
    ck_assert_int_eq(read_sample(r, 0, BFS_VERIFY_SAMPLE, &s, &d, &len), BFS_E_CHANGED);
    bfs_close(r);
    pack_src();

    /* replaced by a rename: the reader keeps serving the file it opened */
    ck_assert_int_eq(bfs_open(out, &r, NULL, 0), 0);
    ck_assert_int_eq(read_sample(r, 2, BFS_VERIFY_SAMPLE, &s, &d, &len), 0);
    uint8_t *before = malloc(len);
    memcpy(before, d, len);
    char other[4200];
    snprintf(other, sizeof other, "%s/other.bfs", tmp);
    ck_assert_int_eq(tu_write_file(other, "replacement", 11), 0);
    ck_assert_int_eq(rename(other, out), 0);
    ck_assert_int_eq(read_sample(r, 2, BFS_VERIFY_SAMPLE, &s, &d, &len), 0);
    ck_assert_mem_eq(d, before, len);
    free(before);
    bfs_close(r);
}
END_TEST

/* Guarded: every byte of sample i (its checksum, then a sum of its bytes) into *sum.
 * Returns 0, bfs_sample_data's error, or BFS_E_CHANGED when a page of it was gone. */
static int mapped_sum(bfs_reader *r, uint64_t i, unsigned *sum)
{
    const uint8_t *d;
    size_t len;
    int rc;
    bfs_guard g;
    bfs_guard_enter(&g);
    if (sigsetjmp(g.jb, 0) == 0) {
        rc = bfs_sample_data(r, i, BFS_VERIFY_SAMPLE, NULL, &d, &len);
        unsigned acc = 0;
        for (size_t j = 0; !rc && j < len; j++)
            acc += d[j];
        *sum = acc;
    } else {
        rc = BFS_E_CHANGED;
    }
    bfs_guard_leave(&g);
    return rc;
}

/* A thread started with every signal blocked (as libfuse starts its workers), which lets
 * SIGBUS through with bfs_guard_thread, then reads sample i of a truncated mapping. */
typedef struct {
    bfs_reader *r;
    uint64_t i;
    int rc;
} blocked_arg;

static void *blocked_main(void *arg)
{
    blocked_arg *b = arg;
    unsigned sum;
    b->rc = bfs_guard_thread();
    if (!b->rc)
        b->rc = mapped_sum(b->r, b->i, &sum);
    return NULL;
}

static int read_in_blocked_thread(bfs_reader *r, uint64_t i)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    blocked_arg b = {r, i, 1};
    pthread_t t;
    int rc = pthread_create(&t, NULL, blocked_main, &b);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc)
        return -rc;
    pthread_join(t, NULL);
    return b.rc;
}

/* The byte at offset `at` of fd XORed with 0x5a in place (twice: as it was); the new byte. */
static uint8_t xor_byte(int fd, uint64_t at)
{
    uint8_t c;
    ck_assert_int_eq(pread(fd, &c, 1, (off_t)at), 1);
    c ^= 0x5a;
    ck_assert_int_eq(pwrite(fd, &c, 1, (off_t)at), 1);
    return c;
}

/* libxxhash's one-shot XXH64, counted for pread_verifies_once: this definition is what the
 * library's calls bind to, and it calls the real one */
static _Atomic long xxh64_calls;
static void *_Atomic xxh64_real;
uint64_t XXH64(const void *p, size_t n, uint64_t seed);
uint64_t XXH64(const void *p, size_t n, uint64_t seed)
{
    void *f = xxh64_real;
    if (!f)
        xxh64_real = f = dlsym(RTLD_NEXT, "XXH64");
    xxh64_calls++;
    return ((uint64_t(*)(const void *, size_t, uint64_t))f)(p, n, seed);
}

/* Payloads read with pread are verified once too: a sample that passed is not hashed
 * again (the file's identity, checked after every read, is what guards it then); one
 * that failed is hashed and fails at every read. */
START_TEST(pread_verifies_once)
{
    pack_folder(40, 40, 120, 5);
    bfs_reader *r;
    bfs_sample s0, s1;
    uint8_t buf[1 << 16];
    ck_assert_int_eq(bfs_open(out, &r, NULL, 0), 0);
    const bfs_info *in = bfs_get_info(r);
    ck_assert_int_eq(bfs_get_sample(r, 1, &s1), 0);
    int fd = open(out, O_RDWR);
    ck_assert_int_ge(fd, 0);
    xor_byte(fd, in->heap_offset + s1.offset + 1);
    close(fd);
    bfs_close(r);
    ck_assert_int_eq(bfs_open(out, &r, NULL, 0), 0);
    long h0 = xxh64_calls;
    ck_assert_int_eq(bfs_read_sample(r, 0, BFS_VERIFY_SAMPLE, &s0, buf, sizeof buf), 0);
    ck_assert_int_eq(xxh64_calls, h0 + 1);
    uint8_t first[1 << 16];
    memcpy(first, buf, s0.length);
    for (int k = 0; k < 3; k++) {
        memset(buf, 0, sizeof buf);
        ck_assert_int_eq(bfs_read_sample(r, 0, BFS_VERIFY_SAMPLE, &s0, buf, sizeof buf), 0);
        ck_assert_mem_eq(buf, first, s0.length);
        ck_assert_int_eq(bfs_read_sample(r, 1, BFS_VERIFY_SAMPLE, &s1, buf, sizeof buf),
                         BFS_E_SAMPLE_CHECKSUM);
    }
    ck_assert_int_eq(xxh64_calls, h0 + 4); /* sample 0 once, sample 1 at each read */
    bfs_close(r);
}
END_TEST

/* Payloads read through a mapping (bfs_map_payloads): the bytes pread gives; a file
 * truncated in place faults inside the guard, which turns it into BFS_E_CHANGED (the
 * process lives on, and guards work again after it); bfs_unchanged sees the new size. */
START_TEST(mapped_payloads)
{
    pack_folder(40, 40, 120, 5);
    bfs_reader *r;
    bfs_sample s;
    const uint8_t *d;
    size_t len;
    ck_assert_int_eq(bfs_guard_init(), 0);
    ck_assert_int_eq(bfs_open(out, &r, NULL, 0), 0);
    uint64_t n = bfs_get_info(r)->sample_count;
    ck_assert_int_eq(bfs_map_payloads(r), 0);
    ck_assert_int_eq(bfs_map_payloads(r), 0); /* once is enough */
    for (uint64_t i = 0; i < n; i++) {
        uint8_t buf[1 << 16];
        ck_assert_int_eq(bfs_read_sample(r, i, BFS_VERIFY_SAMPLE, &s, buf, sizeof buf), 0);
        ck_assert_int_eq(bfs_sample_data(r, i, BFS_VERIFY_SAMPLE, NULL, &d, &len), 0);
        ck_assert_uint_eq(len, s.length);
        ck_assert_mem_eq(d, buf, len);
    }
    ck_assert_int_eq(bfs_unchanged(r), 0);
    /* a mapped sample's checksum is verified once: sample 0 (read above) is remembered,
     * sample 1 (never read from the mapping) is verified. Bytes overwritten in place with
     * the file's mtime put back: the remembered sample gives the new bytes, which only
     * bfs_unchanged can tell (by the file's ctime: callers check it after their reads) */
    bfs_reader *r2;
    ck_assert_int_eq(bfs_open(out, &r2, NULL, 0), 0);
    ck_assert_int_eq(bfs_map_payloads(r2), 0);
    ck_assert_int_eq(bfs_sample_data(r2, 0, BFS_VERIFY_SAMPLE, NULL, &d, &len), 0);
    struct stat st0;
    ck_assert_int_eq(stat(out, &st0), 0);
    const bfs_info *in = bfs_get_info(r2);
    bfs_sample s0, s1;
    ck_assert_int_eq(bfs_get_sample(r2, 0, &s0), 0);
    ck_assert_int_eq(bfs_get_sample(r2, 1, &s1), 0);
    int fd = open(out, O_RDWR);
    ck_assert_int_ge(fd, 0);
    uint64_t at[2] = {in->heap_offset + s0.offset + 1, in->heap_offset + s1.offset + 1};
    uint8_t flip[2] = {xor_byte(fd, at[0]), xor_byte(fd, at[1])};
    struct timespec times[2] = {st0.st_atim, st0.st_mtim};
    ck_assert_int_eq(futimens(fd, times), 0);
    struct stat st1;
    ck_assert_int_eq(fstat(fd, &st1), 0);
    if (st1.st_ctim.tv_sec != st0.st_ctim.tv_sec || st1.st_ctim.tv_nsec != st0.st_ctim.tv_nsec)
        ck_assert_int_eq(bfs_unchanged(r2), BFS_E_CHANGED);
    /* (else the change fell in the tick of the pack's own ctime: tested with one that does
     * not, changed_underneath) */
    ck_assert_int_eq(bfs_sample_data(r2, 0, BFS_VERIFY_SAMPLE, NULL, &d, &len), 0);
    ck_assert_uint_eq(d[1], flip[0]); /* the new bytes, not verified again */
    ck_assert_int_eq(bfs_sample_data(r2, 1, BFS_VERIFY_SAMPLE, NULL, &d, &len),
                     BFS_E_SAMPLE_CHECKSUM);
    ck_assert_int_eq(bfs_sample_data(r2, 1, BFS_VERIFY_SAMPLE, NULL, &d, &len),
                     BFS_E_SAMPLE_CHECKSUM); /* a failure is not remembered as a pass */
    xor_byte(fd, at[0]);                     /* the bytes put back */
    xor_byte(fd, at[1]);
    ck_assert_int_eq(futimens(fd, times), 0);
    close(fd);
    ck_assert_int_eq(bfs_sample_data(r2, 1, BFS_VERIFY_SAMPLE, NULL, &d, &len), 0);
    bfs_close(r2);

    unsigned sum = 0;
    ck_assert_int_eq(mapped_sum(r, n - 1, &sum), 0);
    ck_assert_int_eq(truncate(out, 4096), 0); /* in place: the last samples' pages are gone */
    ck_assert_int_eq(bfs_unchanged(r), BFS_E_CHANGED);
    ck_assert_int_eq(mapped_sum(r, n - 1, &sum), BFS_E_CHANGED);
    ck_assert_int_eq(mapped_sum(r, n - 2, &sum), BFS_E_CHANGED); /* and again */
    ck_assert_int_eq(read_in_blocked_thread(r, n - 1), BFS_E_CHANGED);
    bfs_close(r);
}
END_TEST

/* Guarded: the byte at p into *v; BFS_E_CHANGED when its page was gone. */
static int guarded_byte(const volatile uint8_t *p, int *v)
{
    volatile int rc = 0;
    bfs_guard g;
    bfs_guard_enter(&g);
    if (sigsetjmp(g.jb, 0) == 0)
        *v = *p;
    else
        rc = BFS_E_CHANGED;
    bfs_guard_leave(&g);
    return rc;
}

/* The guard's handler run with every signal blocked, as a runtime that wraps signal
 * handlers runs it (ThreadSanitizer does, whatever sa_mask says): after a fault the
 * thread's signal mask is the one it read with, so SIGBUS is not left blocked and the
 * next fault in a guard is caught too, not fatal. */
START_TEST(guard_handler_run_with_signals_blocked)
{
    long page = sysconf(_SC_PAGESIZE);
    int fd = open(out, O_RDWR | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, 3 * page), 0);
    const uint8_t *m = mmap(NULL, (size_t)(3 * page), PROT_READ, MAP_SHARED, fd, 0);
    ck_assert_ptr_ne(m, MAP_FAILED);
    ck_assert_int_eq(ftruncate(fd, page), 0); /* pages 1 and 2 are gone */
    close(fd);

    ck_assert_int_eq(bfs_guard_init(), 0);
    struct sigaction sa;
    ck_assert_int_eq(sigaction(SIGBUS, NULL, &sa), 0);
    sigfillset(&sa.sa_mask);
    ck_assert_int_eq(sigaction(SIGBUS, &sa, NULL), 0);

    sigset_t before, after;
    ck_assert_int_eq(pthread_sigmask(SIG_SETMASK, NULL, &before), 0);
    int v = -1;
    ck_assert_int_eq(guarded_byte(m, &v), 0);
    ck_assert_int_eq(v, 0);
    for (int i = 1; i <= 3; i++) {
        ck_assert_int_eq(guarded_byte(m + (i % 2 + 1) * page, &v), BFS_E_CHANGED);
        ck_assert_int_eq(pthread_sigmask(SIG_SETMASK, NULL, &after), 0);
        for (int sig = 1; sig < SIGRTMIN; sig++)
            ck_assert_msg(sigismember(&after, sig) == sigismember(&before, sig),
                          "after fault %d: signal %d (%s) %s", i, sig, strsignal(sig),
                          sigismember(&after, sig) ? "left blocked" : "unblocked");
    }
    munmap((void *)m, (size_t)(3 * page));
}
END_TEST

/* ---- writer ----------------------------------------------------------------------- */

START_TEST(writer_contract)
{
    bfs_writer *w;
    char err[512];
    ck_assert_int_eq(bfs_writer_create(out, 1000, &w, err, sizeof err), -EINVAL);
    ck_assert_int_eq(bfs_writer_create(out, 0, &w, err, sizeof err), 0);
    ck_assert_int_eq(bfs_writer_add_class(w, ""), -EINVAL);
    ck_assert_int_eq(bfs_writer_add_class(w, "only"), 0);
    bfs_sample_in s = {.label = 1, .width = 2, .height = 2};
    ck_assert_int_eq(bfs_writer_add(w, &s, "xyz", 0), -EINVAL);
    ck_assert_int_eq(bfs_writer_add(w, &s, "xyz", 3), 0);
    ck_assert_int_eq(count_entries(tmp), 1); /* only the temporary file */
    ck_assert_int_eq(bfs_writer_finish(w, 0, err, sizeof err), BFS_E_LABEL);
    ck_assert_int_eq(count_entries(tmp), 0); /* removed on failure */

    ck_assert_int_eq(bfs_writer_create(out, 0, &w, err, sizeof err), 0);
    ck_assert_int_eq(bfs_writer_finish(w, 0, err, sizeof err), BFS_E_EMPTY);
    ck_assert_int_eq(count_entries(tmp), 0);

    ck_assert_int_eq(bfs_writer_create(out, 0, &w, err, sizeof err), 0);
    bfs_writer_abort(w);
    bfs_writer_abort(NULL);
    ck_assert_int_eq(count_entries(tmp), 0);

    char bad[4200];
    snprintf(bad, sizeof bad, "%s/no/such/dir/x.bfs", tmp);
    ck_assert_int_eq(bfs_writer_create(bad, 0, &w, err, sizeof err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "no/such/dir"));
}
END_TEST

/* Version 3: records of named fields. A file of an image, a caption, boxes with a class
 * per box, a fixed 3-vector and an optional blob reads back value by value; the tables
 * checksum covers the field table; the writer refuses values that break their
 * declaration and the reader refuses records and tables that do. */
static bfs_field fld(const char *name, int kind, int dtype, int flags, int rank, uint32_t d0)
{
    bfs_field f = {.kind = (uint8_t)kind,
                   .dtype = (uint8_t)dtype,
                   .flags = (uint8_t)flags,
                   .rank = (uint8_t)rank,
                   .follows = BFS_FIELD_NONE};
    snprintf(f.name, sizeof f.name, "%s", name);
    f.shape[0] = d0;
    return f;
}

static bfs_value_in val(const void *d, size_t len, uint32_t count)
{
    return (bfs_value_in){
        .data = len ? d : NULL, .len = len, .checksum = bfs_xxh64(d, len, 0), .raw_size = count};
}

START_TEST(fields_v3)
{
    char err[512];
    bfs_field fs[6] = {
        fld("jpg", BFS_FIELD_IMAGE, BFS_FDT_U8, 0, 0, 0),
        fld("caption", BFS_FIELD_TEXT, BFS_FDT_U8, BFS_FIELDF_VARIABLE, 0, 0),
        fld("boxes", BFS_FIELD_BOXES, BFS_FDT_F32, BFS_FIELDF_VARIABLE, 1, 4),
        fld("box_classes", BFS_FIELD_ARRAY, BFS_FDT_I64, BFS_FIELDF_VARIABLE, 0, 0),
        fld("emb", BFS_FIELD_ARRAY, BFS_FDT_F32, 0, 1, 3),
        fld("meta", BFS_FIELD_BYTES, BFS_FDT_U8, BFS_FIELDF_VARIABLE | BFS_FIELDF_OPTIONAL, 0, 0),
    };
    fs[3].follows = 2;
    bfs_writer *w;
    /* declarations the writer refuses */
    ck_assert_int_eq(bfs_writer_create(out, 4096, &w, err, sizeof err), 0);
    bfs_field bad[2] = {fs[1], fs[0]};
    ck_assert_int_eq(bfs_writer_set_fields(w, bad, 2, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "field 0"));
    bad[0] = fs[0], bad[1] = fs[0];
    ck_assert_int_eq(bfs_writer_set_fields(w, bad, 2, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "both named jpg"));
    bad[1] = fs[1];
    snprintf(bad[1].name, sizeof bad[1].name, "9x");
    ck_assert_int_eq(bfs_writer_set_fields(w, bad, 2, err, sizeof err), -EINVAL);
    bad[1] = fs[2];
    bad[1].shape[0] = 5;
    ck_assert_int_eq(bfs_writer_set_fields(w, bad, 2, err, sizeof err), -EINVAL);
    bad[1] = fs[3]; /* follows a field that is not before it */
    ck_assert_int_eq(bfs_writer_set_fields(w, bad, 2, err, sizeof err), -EINVAL);
    ck_assert_int_eq(bfs_writer_set_fields(w, fs, 6, err, sizeof err), 0);
    ck_assert_int_eq(bfs_writer_set_fields(w, fs, 6, err, sizeof err), -EINVAL); /* twice */
    ck_assert_int_eq(bfs_writer_add_class(w, "a"), 0);
    ck_assert_int_eq(bfs_writer_add_class(w, "b"), 0);

    const char *caps[3] = {"a red fox", "", "caf\xc3\xa9 \xe2\x98\x95"};
    float boxes[3][8] = {{1, 2, 30, 40, 5, 6, 7, 8}, {0}, {10, 10, 20, 20}};
    uint32_t nbox[3] = {2, 0, 1};
    int64_t cls[3][2] = {{3, 4}, {0}, {7}};
    float emb[3][3] = {{1, 2, 3}, {4, 5, 6}, {7, 8, 9}};
    const char *img = "\xff\xd8 not really a jpeg";
    for (int i = 0; i < 3; i++) {
        bfs_value_in v[6] = {
            val(img, strlen(img) - (size_t)i, 0),
            val(caps[i], strlen(caps[i]), (uint32_t)strlen(caps[i])),
            val(boxes[i], nbox[i] * 16, nbox[i] * 4),
            val(cls[i], nbox[i] * 8, nbox[i]),
            val(emb[i], 12, 3),
            val("{\"k\":1}", i == 1 ? 0 : 7, i == 1 ? 0 : 7),
        };
        v[0].width = 10, v[0].height = 20;
        if (i == 0) { /* values that break their declarations */
            bfs_value_in b2[6];
            memcpy(b2, v, sizeof v);
            b2[3].raw_size = 1, b2[3].len = 8; /* one class for two boxes */
            ck_assert_int_eq(bfs_writer_add_record(w, 0, b2), -EINVAL);
            memcpy(b2, v, sizeof v);
            b2[4].raw_size = 2, b2[4].len = 8; /* a fixed shape of 3 */
            ck_assert_int_eq(bfs_writer_add_record(w, 0, b2), -EINVAL);
            memcpy(b2, v, sizeof v);
            b2[2].raw_size = 6, b2[2].len = 24; /* rows of 4 */
            ck_assert_int_eq(bfs_writer_add_record(w, 0, b2), -EINVAL);
            memcpy(b2, v, sizeof v);
            b2[0].len = 0; /* no primary image */
            ck_assert_int_eq(bfs_writer_add_record(w, 0, b2), -EINVAL);
            bfs_sample_in one = {.width = 1, .height = 1};
            ck_assert_int_eq(bfs_writer_add(w, &one, "x", 1), -EINVAL); /* records only */
        }
        ck_assert_int_eq(bfs_writer_add_record(w, (uint32_t)i % 2, v), 0);
    }
    ck_assert_int_eq(bfs_writer_finish(w, 0, err, sizeof err), 0);
    if (getenv("BFS_WRITE_SEED")) { /* how tests/fuzz/seeds/bfs/fields_v3.bfs was made */
        uint8_t *d;
        size_t dn;
        ck_assert_int_eq(tu_read_file(out, &d, &dn), 0);
        ck_assert_int_eq(tu_write_file(getenv("BFS_WRITE_SEED"), d, dn), 0);
        free(d);
    }

    bfs_reader *r;
    ck_assert_int_eq(bfs_open(out, &r, err, sizeof err), 0);
    const bfs_info *in = bfs_get_info(r);
    ck_assert_uint_eq(in->version, 3);
    ck_assert_uint_eq(in->sample_record_size, 6 * 32);
    ck_assert_uint_eq(bfs_field_count(r), 6);
    ck_assert_int_eq(bfs_verify_tables(r), 0);
    ck_assert_str_eq(bfs_get_field(r, 1)->name, "caption");
    ck_assert_uint_eq(bfs_get_field(r, 1)->max_count, strlen(caps[2]));
    ck_assert_uint_eq(bfs_get_field(r, 2)->max_count, 8);
    ck_assert_uint_eq(bfs_get_field(r, 3)->follows, 2);
    ck_assert_uint_eq(bfs_get_field(r, 0)->max_count, strlen(img));
    ck_assert_ptr_null(bfs_get_field(r, 6));
    for (uint64_t i = 0; i < 3; i++) {
        bfs_sample smp;
        uint8_t buf[256];
        ck_assert_int_eq(bfs_read_value(r, i, 0, BFS_VERIFY_SAMPLE, &smp, buf, sizeof buf), 0);
        ck_assert_uint_eq(smp.label, i % 2);
        ck_assert_uint_eq(smp.length, strlen(img) - i);
        ck_assert_int_eq(bfs_read_value(r, i, 1, BFS_VERIFY_SAMPLE, &smp, buf, sizeof buf), 0);
        ck_assert_uint_eq(smp.length, strlen(caps[i]));
        ck_assert_int_eq(memcmp(buf, caps[i], smp.length), 0);
        ck_assert_int_eq(bfs_read_value(r, i, 2, BFS_VERIFY_SAMPLE, &smp, buf, sizeof buf), 0);
        ck_assert_uint_eq(smp.raw_size, nbox[i] * 4);
        ck_assert_int_eq(memcmp(buf, boxes[i], smp.length), 0);
        ck_assert_int_eq(bfs_read_value(r, i, 4, BFS_VERIFY_SAMPLE, &smp, buf, sizeof buf), 0);
        ck_assert_int_eq(memcmp(buf, emb[i], 12), 0);
        ck_assert_int_eq(bfs_read_value(r, i, 5, BFS_VERIFY_SAMPLE, &smp, buf, sizeof buf), 0);
        ck_assert_uint_eq(smp.length, i == 1 ? 0 : 7);
        ck_assert_int_eq(bfs_read_value(r, i, 6, 0, &smp, buf, sizeof buf), BFS_E_SAMPLE_INDEX);
    }
    bfs_close(r);

    /* records and tables the reader refuses: copies with one thing changed */
    uint8_t *f;
    size_t n;
    ck_assert_int_eq(tu_read_file(out, &f, &n), 0);
    uint64_t st = get64(f + 56), ft = get64(f + 112);
    uint8_t *c = malloc(n);
    struct {
        uint64_t at;  /* byte changed */
        uint32_t v;   /* its new 32-bit value */
        int open_rc;  /* what bfs_open_mem says */
        int value_rc; /* then bfs_get_value(1, field) */
        uint32_t field;
    } cases[] = {
        {st + 192 + 3 * 32 + 28, 1, 0, BFS_E_SAMPLE_RANGE, 3},  /* classes != boxes */
        {st + 192 + 1 * 32 + 12, 1, 0, BFS_E_SAMPLE_RANGE, 1},  /* a label slot not 0 */
        {st + 192 + 4 * 32 + 28, 2, 0, BFS_E_SAMPLE_RANGE, 4},  /* a fixed count */
        {st + 192 + 1 * 32 + 8, 100, 0, BFS_E_SAMPLE_RANGE, 1}, /* past max_count */
        {ft + 8 + 64 + 32, 9, BFS_E_LAYOUT, 0, 0},              /* unknown kind */
        {ft + 8 + 3 * 64 + 48, 1, BFS_E_LAYOUT, 0, 0},          /* follows a non-boxes */
        {ft + 8 + 64, 0x6a, BFS_E_LAYOUT, 0, 0},                /* two fields "jpg" */
        {ft, 5, BFS_E_LAYOUT, 0, 0},                            /* a count not the record's */
        {112, 0, BFS_E_LAYOUT, 0, 0},                           /* no field table */
        {108, 33, BFS_E_COUNT, 0, 0},                           /* record size */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        memcpy(c, f, n);
        if (cases[k].at == 112)
            put64(c + 112, 0);
        else if (cases[k].at == ft + 8 + 64) /* "caption" -> "jpg" */
            memcpy(c + cases[k].at, "jpg\0\0\0\0", 8);
        else
            put32(c + cases[k].at, cases[k].v);
        fix_header_checksum(c);
        int rc = bfs_open_mem(c, n, &r, err, sizeof err);
        ck_assert_msg(rc == cases[k].open_rc, "case %zu: open %d (%s)", k, rc, err);
        if (!rc) {
            bfs_sample smp;
            ck_assert_int_eq(bfs_verify_tables(r), BFS_E_TABLE_CHECKSUM);
            ck_assert_msg(bfs_get_value(r, 1, cases[k].field, &smp) == cases[k].value_rc ||
                              bfs_get_value(r, 0, cases[k].field, &smp) == cases[k].value_rc,
                          "case %zu", k);
            bfs_close(r);
        }
    }
    /* a name from the file reaches the message only as letters, digits, _ and '?' (the
     * fuzzer found a newline in one) */
    memcpy(c, f, n);
    memcpy(c + ft + 8 + 64, "cap\ntion", 8);
    fix_header_checksum(c);
    ck_assert_int_eq(bfs_open_mem(c, n, &r, err, sizeof err), BFS_E_LAYOUT);
    ck_assert_ptr_nonnull(strstr(err, "name \"cap?tion\""));
    ck_assert_ptr_null(strchr(err, '\n'));
    /* a field table byte changed is caught by the tables checksum */
    memcpy(c, f, n);
    c[ft + 8 + 64 + 56] ^= 1; /* caption's max_count */
    ck_assert_int_eq(bfs_open_mem(c, n, &r, err, sizeof err), 0);
    ck_assert_int_eq(bfs_verify_tables(r), BFS_E_TABLE_CHECKSUM);
    bfs_close(r);
    free(c);
    free(f);

    /* a PNG or WebP image makes a one-field version 3 file; JPEGs alone stay version 1 */
    ck_assert_int_eq(bfs_writer_create(out, 0, &w, err, sizeof err), 0);
    ck_assert_int_eq(bfs_writer_add_class(w, "a"), 0);
    bfs_sample_in jp = {.width = 3, .height = 4};
    bfs_sample_in png = {.width = 5, .height = 6, .flags = BFS_KIND_CODEC};
    bfs_sample_in webp = {.width = 5, .height = 6, .flags = BFS_KIND_CODEC | BFS_F_WEBP};
    bfs_sample_in badw = {.width = 5, .height = 6, .flags = BFS_KIND_JPEG | BFS_F_WEBP};
    ck_assert_int_eq(bfs_writer_add(w, &jp, "jpeg", 4), 0);
    ck_assert_int_eq(bfs_writer_add(w, &badw, "jpeg", 4), -EINVAL);
    ck_assert_int_eq(bfs_writer_add(w, &png, "\x89PNG", 4), 0);
    ck_assert_int_eq(bfs_writer_add(w, &webp, "RIFF", 4), 0);
    ck_assert_int_eq(bfs_writer_finish(w, 0, err, sizeof err), 0);
    ck_assert_int_eq(bfs_open(out, &r, err, sizeof err), 0);
    ck_assert_uint_eq(bfs_get_info(r)->version, 3);
    ck_assert_uint_eq(bfs_get_info(r)->flags, BFS_DS_HAS_JPEG | BFS_DS_HAS_CODEC);
    ck_assert_uint_eq(bfs_field_count(r), 1);
    ck_assert_str_eq(bfs_get_field(r, 0)->name, "images");
    bfs_sample smp;
    ck_assert_int_eq(bfs_get_sample(r, 2, &smp), 0);
    ck_assert_uint_eq(smp.flags, BFS_KIND_CODEC | BFS_F_WEBP);
    ck_assert_int_eq(bfs_verify_tables(r), 0);
    bfs_close(r);
}
END_TEST

/* A fake tokenizer: one id per byte (vocab 256), or failing on a text holding "FAIL",
 * or giving an id over the vocabulary for "BIG". */
static long byte_tokens(void *ctx, const char *text, size_t len, uint32_t *ids, size_t cap,
                        char *err, size_t errlen)
{
    (void)ctx;
    if (memmem(text, len, "FAIL", 4)) {
        snprintf(err, errlen, "the fake tokenizer fails");
        return -EINVAL;
    }
    if (len > cap)
        return (long)len;
    for (size_t k = 0; k < len; k++)
        ids[k] = (uint8_t)text[k] + (memmem(text, len, "BIG", 3) ? 1000u : 0u);
    return (long)len;
}

/* n samples: a fake image and a caption each (captions[i]) */
static void write_captions(const char *path, const char *const *caps, int n)
{
    char err[512];
    bfs_field fs[2] = {fld("jpg", BFS_FIELD_IMAGE, BFS_FDT_U8, 0, 0, 0),
                       fld("caption", BFS_FIELD_TEXT, BFS_FDT_U8, BFS_FIELDF_VARIABLE, 0, 0)};
    bfs_writer *w;
    ck_assert_int_eq(bfs_writer_create(path, 4096, &w, err, sizeof err), 0);
    ck_assert_int_eq(bfs_writer_set_fields(w, fs, 2, err, sizeof err), 0);
    ck_assert_int_eq(bfs_writer_add_class(w, "a"), 0);
    for (int i = 0; i < n; i++) {
        bfs_value_in v[2] = {val("\xff\xd8 image", 8, 0),
                             val(caps[i], strlen(caps[i]), (uint32_t)strlen(caps[i]))};
        v[0].width = v[0].height = 4;
        ck_assert_int_eq(bfs_writer_add_record(w, 0, v), 0);
    }
    ck_assert_int_eq(bfs_writer_finish(w, 0, err, sizeof err), 0);
}

/* mkbatchfs --tokenize's engine half: every field copied, the tokens field added. */
START_TEST(tokenize_captions)
{
    static const struct {
        const char *s;
        int ok;
    } utf8[] = {{"", 1},
                {"abc", 1},
                {"caf\xc3\xa9", 1},
                {"\xe2\x98\x95", 1},
                {"\xf0\x9f\x98\x80", 1},
                {"\xc3", 0},
                {"\xc0\xaf", 0},
                {"\xe0\x80\xaf", 0},
                {"\xed\xa0\x80", 0},
                {"\xf4\x90\x80\x80", 0},
                {"\xff", 0},
                {"a\x80", 0},
                {"\xe2\x98", 0}};
    for (size_t k = 0; k < sizeof utf8 / sizeof utf8[0]; k++)
        ck_assert_msg(bfs_utf8_valid((const uint8_t *)utf8[k].s, strlen(utf8[k].s)) == utf8[k].ok,
                      "utf8 case %zu", k);

    const char *caps[4] = {"a red fox", "", "caf\xc3\xa9",
                           "a long caption that is longer than "
                           "the first buffer of ids may be, so "
                           "the tokenizer is asked again with "
                           "more room: 256 bytes or more. "
                           "0123456789012345678901234567890123"
                           "4567890123456789012345678901234567"
                           "8901234567890123456789012345678901"};
    char in_path[4200], err[512];
    snprintf(in_path, sizeof in_path, "%s/caps.bfs", tmp);
    write_captions(in_path, caps, 4);
    bfs_tokenize_opts t = {.field = "caption", .vocab = 256, .fn = byte_tokens};
    bfs_pack_opts o = {0};
    bfs_pack_report rep;
    ck_assert_int_eq(bfs_pack_tokenize(in_path, out, &t, &o, &rep, NULL, err, sizeof err), 0);
    ck_assert_uint_eq(rep.packed, 4);
    ck_assert_uint_eq(rep.longest, strlen(caps[3]));
    bfs_reader *r;
    ck_assert_int_eq(bfs_open(out, &r, err, sizeof err), 0);
    ck_assert_int_eq(bfs_verify_tables(r), 0);
    ck_assert_uint_eq(bfs_field_count(r), 3);
    const bfs_field *tf = bfs_get_field(r, 2);
    ck_assert_str_eq(tf->name, "caption_tokens");
    ck_assert_uint_eq(tf->kind, BFS_FIELD_TOKENS);
    ck_assert_uint_eq(tf->dtype, BFS_FDT_U16);
    for (uint64_t i = 0; i < 4; i++) {
        bfs_sample smp;
        uint8_t buf[1024];
        ck_assert_int_eq(bfs_read_value(r, i, 1, BFS_VERIFY_SAMPLE, &smp, buf, sizeof buf), 0);
        ck_assert_uint_eq(smp.length, strlen(caps[i]));
        ck_assert_int_eq(memcmp(buf, caps[i], smp.length), 0);
        ck_assert_int_eq(bfs_read_value(r, i, 2, BFS_VERIFY_SAMPLE, &smp, buf, sizeof buf), 0);
        ck_assert_uint_eq(smp.raw_size, strlen(caps[i]));
        for (uint32_t k = 0; k < smp.raw_size; k++)
            ck_assert_uint_eq(buf[2 * k] | buf[2 * k + 1] << 8, (uint8_t)caps[i][k]);
        ck_assert_int_eq(bfs_read_value(r, i, 0, BFS_VERIFY_SAMPLE, &smp, buf, sizeof buf), 0);
        ck_assert_int_eq(memcmp(buf, "\xff\xd8 image", 8), 0);
    }
    bfs_close(r);

    /* what it refuses, each naming the problem; no output left behind */
    unlink(out);
    t.field = "title";
    ck_assert_int_eq(bfs_pack_tokenize(in_path, out, &t, &o, &rep, NULL, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "its text fields: caption"));
    t.field = "caption";
    t.out_field = "jpg";
    ck_assert_int_eq(bfs_pack_tokenize(in_path, out, &t, &o, &rep, NULL, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "both named jpg"));
    t.out_field = NULL;
    const char *bad[3][2] = {{"fine", "caf\xc3"}, {"fine", "please FAIL"}, {"BIG", "x"}};
    const char *why[3] = {"sample 1: field caption is not UTF-8",
                          "sample 1: tokenizing field caption: the fake tokenizer fails",
                          "sample 0: the tokenizer gave id 1066"};
    for (int k = 0; k < 3; k++) {
        write_captions(in_path, bad[k], 2);
        ck_assert_int_eq(bfs_pack_tokenize(in_path, out, &t, &o, &rep, NULL, err, sizeof err),
                         -EINVAL);
        ck_assert_msg(strstr(err, why[k]) != NULL, "case %d: %s", k, err);
    }
    ck_assert_int_eq(count_entries(tmp), 1); /* caps.bfs only */
    pack_folder(2, 20, 30, 5);               /* a version 1 file */
    ck_assert_int_eq(bfs_pack_tokenize(out, in_path, &t, &o, &rep, NULL, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "version 1 has no text fields"));
}
END_TEST

/* Token sequences (version 2): the writer checks their records, a flat token file packs
 * into one sample per document that joined give the file back, the reader refuses records
 * that break the rules, and a version 1 file cannot hold them. */
START_TEST(token_sequences)
{
    uint16_t sep2[] = {5, 9, 5, 5, 1};
    ck_assert_uint_eq(bfs_tokens_doc_end((const uint8_t *)sep2, 5, 2, 9), 2);
    ck_assert_uint_eq(bfs_tokens_doc_end((const uint8_t *)sep2, 5, 2, 7), 0);
    uint32_t sep4[] = {70000, 3, 70000};
    ck_assert_uint_eq(bfs_tokens_doc_end((const uint8_t *)sep4, 3, 4, 70000), 1);
    ck_assert_uint_eq(bfs_tokens_doc_end((const uint8_t *)sep4, 0, 4, 70000), 0);

    /* writer: a token record has no width or height and exactly its count of tokens; a file
     * holds tokens or images, never both */
    bfs_writer *w;
    char err[512];
    ck_assert_int_eq(bfs_writer_create(out, 0, &w, err, sizeof err), 0);
    ck_assert_int_eq(bfs_writer_add_class(w, "documents"), 0);
    bfs_sample_in t = {.flags = BFS_KIND_TOKENS, .raw_size = 2};
    ck_assert_int_eq(bfs_writer_add(w, &t, "abc", 3), -EINVAL); /* 1.5 u16 tokens */
    t.width = 1;
    ck_assert_int_eq(bfs_writer_add(w, &t, "abcd", 4), -EINVAL);
    t.width = 0;
    ck_assert_int_eq(bfs_writer_add(w, &t, "abcd", 4), 0);
    bfs_sample_in img = {.width = 2, .height = 2};
    ck_assert_int_eq(bfs_writer_add(w, &img, "xyz", 3), -EINVAL);
    bfs_sample_in t4 = {.flags = BFS_KIND_TOKENS | BFS_F_TOKENS_U32, .raw_size = 1};
    ck_assert_int_eq(bfs_writer_add(w, &t4, "abcd", 4), 0);
    ck_assert_int_eq(bfs_writer_finish(w, 0, err, sizeof err), 0);
    bfs_reader *r;
    ck_assert_int_eq(bfs_open(out, &r, err, sizeof err), 0);
    ck_assert_uint_eq(bfs_get_info(r)->version, 2);
    ck_assert_uint_eq(bfs_get_info(r)->flags, BFS_DS_HAS_TOKENS);
    bfs_sample sm;
    ck_assert_int_eq(bfs_get_sample(r, 1, &sm), 0);
    ck_assert_uint_eq(sm.raw_size, 1);
    ck_assert_uint_eq(sm.length, 4);
    bfs_close(r);

    /* the packer: 3 documents ending with 50256, a last one without it */
    char bin[4200];
    snprintf(bin, sizeof bin, "%s/train.bin", tmp);
    uint16_t toks[] = {1, 2, 50256, 50256, 7, 8, 9, 50256, 4, 4};
    FILE *f = fopen(bin, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(toks, 1, sizeof toks, f), sizeof toks);
    fclose(f);
    bfs_pack_opts o = {.tokens = 2, .doc_sep = 50256};
    bfs_pack_report rep;
    ck_assert_int_eq(bfs_pack(bin, out, &o, &rep, NULL, err, sizeof err), 0);
    ck_assert_uint_eq(rep.packed, 4);
    ck_assert_uint_eq(rep.tokens, 10);
    ck_assert_uint_eq(rep.longest, 4);
    bfs_pack_report_free(&rep);
    uint8_t *img_bytes;
    size_t n;
    ck_assert_int_eq(tu_read_file(out, &img_bytes, &n), 0);
    ck_assert_int_eq(bfs_open_mem(img_bytes, n, &r, err, sizeof err), 0);
    uint32_t want_count[] = {3, 1, 4, 2};
    size_t at = 0;
    for (uint64_t i = 0; i < 4; i++) {
        const uint8_t *d;
        size_t len;
        ck_assert_int_eq(bfs_sample_data(r, i, BFS_VERIFY_SAMPLE, &sm, &d, &len), 0);
        ck_assert_uint_eq(sm.raw_size, want_count[i]);
        ck_assert_mem_eq(d, (const uint8_t *)toks + at, len);
        at += len;
    }
    ck_assert_uint_eq(at, sizeof toks);
    const bfs_info in = *bfs_get_info(r);
    bfs_close(r);
    /* a record with a width, or a count that disagrees with its length: refused */
    uint8_t *e = img_bytes + in.sample_table_offset;
    e[16] = 1;
    ck_assert_int_eq(bfs_open_mem(img_bytes, n, &r, err, sizeof err), 0);
    ck_assert_int_eq(bfs_get_sample(r, 0, &sm), BFS_E_SAMPLE_RANGE);
    bfs_close(r);
    e[16] = 0, e[28] = 2; /* 2 tokens in 6 bytes */
    ck_assert_int_eq(bfs_open_mem(img_bytes, n, &r, err, sizeof err), 0);
    ck_assert_int_eq(bfs_get_sample(r, 0, &sm), BFS_E_SAMPLE_RANGE);
    ck_assert_int_eq(bfs_get_sample(r, 1, &sm), 0);
    bfs_close(r);
    /* the same file labelled version 1 (header checksum made right): not a v1 file */
    img_bytes[8] = 1;
    uint64_t hc = bfs_xxh64(img_bytes, 120, 0);
    memcpy(img_bytes + 120, &hc, 8);
    ck_assert_int_eq(bfs_open_mem(img_bytes, n, &r, err, sizeof err), BFS_E_VERSION);
    ck_assert_ptr_nonnull(strstr(err, "dataset flags"));
    free(img_bytes);

    /* the packer's refusals */
    ck_assert_int_eq(unlink(out), 0);
    ck_assert_int_eq(truncate(bin, 3), 0);
    ck_assert_int_eq(bfs_pack(bin, out, &o, &rep, NULL, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "not a whole number of 2-byte tokens"));
    bfs_pack_report_free(&rep);
    ck_assert_int_eq(truncate(bin, 0), 0);
    ck_assert_int_eq(bfs_pack(bin, out, &o, &rep, NULL, err, sizeof err), BFS_E_EMPTY);
    bfs_pack_report_free(&rep);
    o.doc_sep = 70000;
    ck_assert_int_eq(bfs_pack(bin, out, &o, &rep, NULL, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "does not fit in u16"));
    bfs_pack_report_free(&rep);
    o.doc_sep = 1, o.raw = 1;
    ck_assert_int_eq(bfs_pack(bin, out, &o, &rep, NULL, err, sizeof err), -EINVAL);
    bfs_pack_report_free(&rep);
    ck_assert_int_eq(access(out, F_OK), -1); /* nothing written by a refused pack */
}
END_TEST

/* ---- packer ----------------------------------------------------------------------- */

START_TEST(pack_skips_and_strict)
{
    ck_assert_int_eq(tu_make_imagefolder(src, 2, 3, 30, 60, 2), 0);
    char p[4200];
    snprintf(p, sizeof p, "%s/class_000/notes.txt", src);
    ck_assert_int_eq(tu_write_file(p, "not an image", 12), 0);
    snprintf(p, sizeof p, "%s/class_001/broken.jpg", src);
    ck_assert_int_eq(tu_write_file(p, "\xff\xd8\xff\xe0\x00\x10JFIF", 10), 0); /* header cut */
    snprintf(p, sizeof p, "%s/class_001/.hidden.jpg", src);
    ck_assert_int_eq(tu_write_file(p, "ignored", 7), 0);
    snprintf(p, sizeof p, "%s/README", src); /* beside the classes: not a sample */
    ck_assert_int_eq(tu_write_file(p, "hi", 2), 0);
    snprintf(p, sizeof p, "%s/class_001/nested", src);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/class_001/nested/z.jpg", src);
    uint8_t *jpg;
    size_t jlen;
    ck_assert_int_eq(
        tu_make_jpeg(&(tu_jpeg_opts){.width = 33, .height = 17, .quality = 90, .seed = 4}, &jpg,
                     &jlen),
        0);
    ck_assert_int_eq(tu_write_file(p, jpg, jlen), 0);
    snprintf(p, sizeof p, "%s/class_000/upper.JPEG", src); /* any case, as ImageNet's */
    ck_assert_int_eq(tu_write_file(p, jpg, jlen), 0);
    snprintf(p, sizeof p, "%s/class_000/jpeg-named.gif", src); /* by name: not a sample */
    ck_assert_int_eq(tu_write_file(p, jpg, jlen), 0);
    free(jpg);

    bfs_pack_report rep;
    ck_assert_int_eq(pack_with(src, out, 2, 0, &rep), 0);
    ck_assert_uint_eq(rep.packed, 8);  /* 6 + upper.JPEG + nested */
    ck_assert_uint_eq(rep.ignored, 2); /* notes.txt, jpeg-named.gif: named otherwise */
    ck_assert_ptr_nonnull(strstr(rep.notes, "2 files below the class directories"));
    ck_assert_uint_eq(rep.nskipped, 1); /* named .jpg, not a JPEG */
    ck_assert_ptr_nonnull(strstr(rep.skipped[0].path, "broken.jpg"));
    bfs_pack_report_free(&rep);
    /* the nested file sorts after the class's own files (sorted os.walk order) */
    bfs_reader *r;
    ck_assert_int_eq(bfs_open(out, &r, NULL, 0), 0);
    bfs_sample s;
    ck_assert_int_eq(bfs_get_sample(r, 7, &s), 0);
    ck_assert_int_eq(s.width, 33);
    ck_assert_int_eq(s.label, 1);
    bfs_close(r);

    bfs_pack_opts o = {.jobs = 1, .strict = 1};
    char err[1024];
    unlink(out);
    int rc = bfs_pack(src, out, &o, &rep, NULL, err, sizeof err);
    ck_assert_msg(rc >= BFS_E_FIRST && rc < BFS_E_LAST, "rc %d", rc);
    ck_assert_ptr_nonnull(strstr(err, "broken.jpg"));
    bfs_pack_report_free(&rep);
    ck_assert_int_eq(access(out, F_OK), -1); /* nothing written */
    ck_assert_int_eq(count_entries(tmp), 1); /* and no temporary left */
}
END_TEST

START_TEST(pack_empty_inputs)
{
    bfs_pack_report rep;
    char err[1024];
    bfs_pack_opts o = {.jobs = 1};
    ck_assert_int_eq(bfs_pack(src, out, &o, &rep, NULL, err, sizeof err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "src"));
    ck_assert_int_eq(mkdir(src, 0755), 0);
    ck_assert_int_eq(bfs_pack(src, out, &o, &rep, NULL, err, sizeof err), BFS_E_EMPTY);
    ck_assert_ptr_nonnull(strstr(err, "no class sub-directories"));
    char p[4200];
    snprintf(p, sizeof p, "%s/cats", src);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    ck_assert_int_eq(bfs_pack(src, out, &o, &rep, NULL, err, sizeof err), BFS_E_EMPTY);
    ck_assert_ptr_nonnull(strstr(err, "cats"));
    ck_assert_ptr_nonnull(strstr(err, "holds no .jpg, .jpeg, .png or .webp file"));
    snprintf(p, sizeof p, "%s/cats/a.txt", src); /* not named as a JPEG: still none */
    ck_assert_int_eq(tu_write_file(p, "text", 4), 0);
    ck_assert_int_eq(bfs_pack(src, out, &o, &rep, NULL, err, sizeof err), BFS_E_EMPTY);
    ck_assert_ptr_nonnull(strstr(err, "holds no .jpg, .jpeg, .png or .webp file"));
    snprintf(p, sizeof p, "%s/cats/a.jpg", src); /* named as one, but text */
    ck_assert_int_eq(tu_write_file(p, "text", 4), 0);
    ck_assert_int_eq(bfs_pack(src, out, &o, &rep, NULL, err, sizeof err), BFS_E_EMPTY);
    ck_assert_ptr_nonnull(strstr(err, "no usable images"));
    bfs_pack_report_free(&rep);
    /* a file as the source is read as a .bfs to re-pack: this one is not */
    int rc = bfs_pack(p, out, &o, &rep, NULL, err, sizeof err);
    ck_assert_msg(rc >= BFS_E_FIRST && rc < BFS_E_FIRST + 100, "rc %d: %s", rc, err);
    ck_assert_ptr_nonnull(strstr(err, "must be a .bfs dataset"));
    bfs_pack_report_free(&rep);
    ck_assert_int_eq(access(out, F_OK), -1);
    o.quality = 101;
    ck_assert_int_eq(bfs_pack(src, out, &o, &rep, NULL, err, sizeof err), -EINVAL);
    ck_assert_int_eq(count_entries(tmp), 1);
}
END_TEST

START_TEST(pack_cancel)
{
    ck_assert_int_eq(tu_make_imagefolder(src, 2, 5, 30, 60, 2), 0);
    atomic_int cancel = 1;
    bfs_pack_opts o = {.jobs = 2};
    bfs_pack_report rep;
    char err[256];
    ck_assert_int_eq(bfs_pack(src, out, &o, &rep, &cancel, err, sizeof err), -ECANCELED);
    bfs_pack_report_free(&rep);
    ck_assert_int_eq(count_entries(tmp), 1); /* no output, no temporary */
    ck_assert_ptr_null(bfs_pack_temp_path());
}
END_TEST

START_TEST(pack_max_side_and_raw)
{
    ck_assert_int_eq(tu_make_imagefolder(src, 2, 4, 50, 200, 8), 0);
    bfs_pack_opts o = {.jobs = 2, .max_side = 100, .quality = 85};
    bfs_pack_report rep;
    char err[1024];
    /* the packer has no resampler of its own: max_side needs the caller's */
    ck_assert_int_eq(bfs_pack(src, out, &o, &rep, NULL, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "without a resampler"), "%s", err);
    bfs_pack_report_free(&rep);
    o.resize = bfs_engine_pack_resize;
    ck_assert_int_eq(bfs_pack(src, out, &o, &rep, NULL, err, sizeof err), 0);
    ck_assert_uint_gt(rep.reencoded, 0);
    bfs_pack_report_free(&rep);
    bfs_reader *r;
    ck_assert_int_eq(bfs_open(out, &r, NULL, 0), 0);
    for (uint64_t i = 0; i < 8; i++) {
        bfs_sample s;
        const uint8_t *d;
        size_t len;
        ck_assert_int_eq(read_sample(r, i, BFS_VERIFY_SAMPLE, &s, &d, &len), 0);
        ck_assert_int_le(s.width, 100);
        ck_assert_int_le(s.height, 100);
        bfs_jpeg_header h;
        ck_assert_int_eq(bfs_jpeg_parse_header(d, len, &h), 0);
        ck_assert_int_eq(h.width, s.width);
        ck_assert_int_eq(h.height, s.height);
    }
    bfs_close(r);

    /* raw: lz4 pixels equal to the JPEG's full decode */
    unlink(out);
    o = (bfs_pack_opts){.jobs = 2, .raw = 1};
    ck_assert_int_eq(bfs_pack(src, out, &o, &rep, NULL, err, sizeof err), 0);
    bfs_pack_report_free(&rep);
    ck_assert_int_eq(bfs_open(out, &r, NULL, 0), 0);
    ck_assert_uint_eq(bfs_get_info(r)->flags, BFS_DS_HAS_RAW);
    for (uint64_t i = 0; i < 8; i++) {
        bfs_sample s;
        const uint8_t *d;
        size_t len;
        ck_assert_int_eq(read_sample(r, i, BFS_VERIFY_SAMPLE, &s, &d, &len), 0);
        ck_assert_uint_eq(s.flags & BFS_KIND_MASK, BFS_KIND_RAW);
        ck_assert_uint_eq(s.raw_size, (uint32_t)s.width * s.height * 3);
        uint8_t *px = malloc(s.raw_size);
        ck_assert_int_eq(
            LZ4_decompress_safe((const char *)d, (char *)px, (int)len, (int)s.raw_size),
            (int)s.raw_size);
        char p[4200];
        snprintf(p, sizeof p, "%s/class_%03u/img_%05u.jpg", src, (unsigned)(i / 4),
                 (unsigned)(i % 4));
        uint8_t *jpg, *ref;
        size_t jlen;
        int w, h;
        ck_assert_int_eq(tu_read_file(p, &jpg, &jlen), 0);
        ck_assert_int_eq(bfs_jpeg_decode_rgb(jpg, jlen, &ref, &w, &h), 0);
        ck_assert_int_eq(w, s.width);
        ck_assert_int_eq(h, s.height);
        ck_assert_mem_eq(px, ref, s.raw_size);
        free(px);
        free(ref);
        free(jpg);
    }
    bfs_close(r);
}
END_TEST

/* Damaged copies of the folder's images beside them: cut short (4:2:0 baseline,
 * progressive, gray: the last two were stored untouched by restart packs before), and with
 * bytes of their scan data changed (4:4:4, 4:2:0). All the files' names sort after the
 * good ones': the damaged are listed in that order. */
static const char *const damaged[] = {"class_000/x1-cut-420.jpg", "class_000/x2-cut-prog.jpg",
                                      "class_000/x3-cut-gray.jpg", "class_000/x4-flip-444.jpg",
                                      "class_001/x5-flip-420.jpg"};

static void make_damaged(const char *dir)
{
    /* tu_make_imagefolder's kinds: k % 7 == 6 progressive, k % 11 == 10 gray,
     * k % 13 == 12 4:4:4 (k counts files over classes) */
    static const char *const from[] = {"class_000/img_00000.jpg", "class_000/img_00006.jpg",
                                       "class_000/img_00010.jpg", "class_000/img_00012.jpg",
                                       "class_001/img_00001.jpg"};
    for (int i = 0; i < 5; i++) {
        char p[4200];
        uint8_t *jpg;
        size_t len;
        snprintf(p, sizeof p, "%s/%s", dir, from[i]);
        ck_assert_int_eq(tu_read_file(p, &jpg, &len), 0);
        if (i < 3)
            len = len * 2 / 3;
        else
            ck_assert_int_eq(tu_damage_scan(jpg, len, 0.5, 24), 0);
        /* the header still parses: only a whole decode tells */
        bfs_jpeg_header h;
        ck_assert_int_eq(bfs_jpeg_parse_header(jpg, len, &h), 0);
        ck_assert_int_eq(bfs_jpeg_check(jpg, len, NULL, 0), BFS_E_JPEG_DATA);
        snprintf(p, sizeof p, "%s/%s", dir, damaged[i]);
        ck_assert_int_eq(tu_write_file(p, jpg, len), 0);
        free(jpg);
    }
}

/* Every mode leaves out the same corrupt files, listed with libjpeg-turbo's reason, and
 * --strict fails on the first, whatever the source (a folder, a .bfs holding them). */
START_TEST(pack_checks_every_jpeg)
{
    ck_assert_int_eq(tu_make_imagefolder(src, 2, 14, 40, 120, 5), 0);
    make_damaged(src);
    const bfs_pack_opts modes[] = {
        {.jobs = 2, .restart = 1}, /* mkbatchfs's default */
        {.jobs = 2},               /* --no-restart */
        {.jobs = 2, .max_side = 60, .restart = 1},
        {.jobs = 2, .max_side = 60},                 /* re-encoded, no restart markers */
        {.jobs = 2, .max_side = 1000, .restart = 1}, /* none shrunk: kept as they are */
        {.jobs = 2, .raw = 1},
        {.jobs = 2, .raw = 1, .max_side = 32},
    };
    char err[1024], bfs_src[4200], first[4200], again[4200];
    snprintf(bfs_src, sizeof bfs_src, "%s/with-damaged.bfs", tmp);
    snprintf(again, sizeof again, "%s/again.bfs", tmp);
    snprintf(first, sizeof first, "%s/%s", src, damaged[0]);
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
        bfs_pack_report rep;
        bfs_pack_opts o = modes[m];
        o.resize = bfs_engine_pack_resize; /* mkbatchfs's: the engine's resampler */
        unlink(out);
        ck_assert_msg(bfs_pack(src, out, &o, &rep, NULL, err, sizeof err) == 0, "mode %zu: %s", m,
                      err);
        ck_assert_msg(rep.packed == 28 && rep.nskipped == 5, "mode %zu: %llu packed, %llu skipped",
                      m, (unsigned long long)rep.packed, (unsigned long long)rep.nskipped);
        for (int i = 0; i < 5; i++) {
            ck_assert_ptr_nonnull(strstr(rep.skipped[i].path, damaged[i]));
            ck_assert_msg(!strncmp(rep.skipped[i].reason, "corrupt JPEG data (", 19),
                          "mode %zu: %s: %s", m, rep.skipped[i].path, rep.skipped[i].reason);
        }
        ck_assert_ptr_nonnull(strstr(rep.skipped[0].reason, "Premature end of JPEG file"));
        bfs_pack_report_free(&rep);
        o.strict = 1;
        ck_assert_int_eq(bfs_pack(src, again, &o, &rep, NULL, err, sizeof err), BFS_E_JPEG_DATA);
        ck_assert_msg(strstr(err, first) && strstr(err, "(--strict)"), "mode %zu: %s", m, err);
        bfs_pack_report_free(&rep);
        ck_assert_int_eq(access(again, F_OK), -1);
    }

    /* a .bfs that holds them (an older mkbatchfs stored them so): re-packed alike */
    bfs_writer *w;
    ck_assert_int_eq(bfs_writer_create(bfs_src, 0, &w, err, sizeof err), 0);
    ck_assert_int_eq(bfs_writer_add_class(w, "a"), 0);
    for (int i = 0; i < 9; i++) {
        char p[4200];
        uint8_t *jpg;
        size_t len;
        if (i < 5)
            snprintf(p, sizeof p, "%s/%s", src, damaged[i]);
        else
            snprintf(p, sizeof p, "%s/class_001/img_%05d.jpg", src, i);
        ck_assert_int_eq(tu_read_file(p, &jpg, &len), 0);
        bfs_jpeg_header h;
        ck_assert_int_eq(bfs_jpeg_parse_header(jpg, len, &h), 0);
        bfs_sample_in in = {.width = (uint16_t)h.width,
                            .height = (uint16_t)h.height,
                            .flags = bfs_jpeg_sample_flags(&h)};
        ck_assert_int_eq(bfs_writer_add(w, &in, jpg, len), 0);
        free(jpg);
    }
    ck_assert_int_eq(bfs_writer_finish(w, 0, err, sizeof err), 0);
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
        bfs_pack_report rep;
        bfs_pack_opts o = modes[m];
        o.resize = bfs_engine_pack_resize; /* mkbatchfs's: the engine's resampler */
        unlink(out);
        ck_assert_msg(bfs_pack(bfs_src, out, &o, &rep, NULL, err, sizeof err) == 0, "mode %zu: %s",
                      m, err);
        ck_assert_msg(rep.packed == 4 && rep.nskipped == 5, "re-pack, mode %zu", m);
        ck_assert_ptr_nonnull(strstr(rep.skipped[4].path, "with-damaged.bfs[4]"));
        ck_assert_ptr_nonnull(strstr(rep.skipped[4].reason, "corrupt JPEG data ("));
        bfs_pack_report_free(&rep);
        o.strict = 1;
        ck_assert_int_eq(bfs_pack(bfs_src, again, &o, &rep, NULL, err, sizeof err),
                         BFS_E_JPEG_DATA);
        ck_assert_ptr_nonnull(strstr(err, "with-damaged.bfs[0]"));
        bfs_pack_report_free(&rep);
    }
}
END_TEST

/* ---- JPEG header walker ------------------------------------------------------------ */

START_TEST(jpeg_header_cases)
{
    uint8_t *jpg;
    size_t len;
    bfs_jpeg_header h;
    ck_assert_int_eq(
        tu_make_jpeg(
            &(tu_jpeg_opts){
                .width = 77, .height = 41, .quality = 90, .subsamp = TJSAMP_420, .seed = 1},
            &jpg, &len),
        0);
    ck_assert_int_eq(bfs_jpeg_parse_header(jpg, len, &h), 0);
    ck_assert_int_eq(h.width, 77);
    ck_assert_int_eq(h.height, 41);
    ck_assert_int_eq(h.components, 3);
    ck_assert_int_eq(h.hs[0], 2);
    ck_assert_int_eq(h.vs[0], 2);
    ck_assert_int_eq(h.progressive, 0);
    uint16_t f = bfs_jpeg_sample_flags(&h);
    ck_assert_uint_eq(f & (BFS_F_ODD_SAMPLING | BFS_COLOR_MASK | BFS_F_PROGRESSIVE), 0);
    ck_assert_uint_eq((f >> BFS_SAMP_H_SHIFT) & 3, 1);
    /* every prefix shorter than the header fails cleanly */
    size_t sos = 0;
    for (size_t i = 2; i + 1 < len; i++)
        if (jpg[i] == 0xFF && jpg[i + 1] == 0xDA) {
            sos = i;
            break;
        }
    ck_assert_uint_gt(sos, 0);
    for (size_t cut = 0; cut < sos + 4; cut++) {
        int rc = bfs_jpeg_parse_header(jpg, cut, &h);
        ck_assert_msg(rc == BFS_E_NOT_JPEG || rc == BFS_E_JPEG_HEADER, "cut %zu: %d", cut, rc);
    }
    /* a truncated body parses (header complete) but fails to decode */
    uint8_t *rgb;
    int w, hh;
    ck_assert_int_eq(bfs_jpeg_decode_rgb(jpg, len * 2 / 3, &rgb, &w, &hh), BFS_E_JPEG_DATA);
    ck_assert_int_eq(bfs_jpeg_decode_rgb(jpg, len, &rgb, &w, &hh), 0);
    free(rgb);
    /* 12-bit and lossless are refused as unsupported */
    for (size_t i = 2; i + 4 < len; i++)
        if (jpg[i] == 0xFF && jpg[i + 1] == 0xC0) {
            jpg[i + 4] = 12;
            ck_assert_int_eq(bfs_jpeg_parse_header(jpg, len, &h), BFS_E_JPEG_UNSUPPORTED);
            jpg[i + 4] = 8;
            /* a size claim of 16385 x 16384 (a decompression bomb): refused before decoding */
            uint8_t y0 = jpg[i + 5], y1 = jpg[i + 6], x0 = jpg[i + 7], x1 = jpg[i + 8];
            jpg[i + 5] = 0x40, jpg[i + 6] = 0x00, jpg[i + 7] = 0x40, jpg[i + 8] = 0x01;
            ck_assert_int_eq(bfs_jpeg_parse_header(jpg, len, &h), BFS_E_JPEG_TOO_LARGE);
            jpg[i + 8] = 0x00; /* 16384 x 16384: allowed */
            ck_assert_int_eq(bfs_jpeg_parse_header(jpg, len, &h), 0);
            jpg[i + 5] = y0, jpg[i + 6] = y1, jpg[i + 7] = x0, jpg[i + 8] = x1;
            jpg[i + 1] = 0xC3;
            ck_assert_int_eq(bfs_jpeg_parse_header(jpg, len, &h), BFS_E_JPEG_UNSUPPORTED);
            break;
        }
    free(jpg);
    ck_assert_int_eq(bfs_jpeg_parse_header((const uint8_t *)"GIF89a", 6, &h), BFS_E_NOT_JPEG);
}
END_TEST

static Suite *format_suite(void)
{
    Suite *s = suite_create("format");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, xxh64_vectors);
    tcase_add_test(tc, round_trip);
    tcase_add_test(tc, random_access_and_pages);
    tcase_add_test(tc, deterministic_across_jobs);
    tcase_add_test(tc, open_errors);
    tcase_add_test(tc, changed_underneath);
    tcase_add_test(tc, mapped_payloads);
    tcase_add_test(tc, pread_verifies_once);
    tcase_add_test(tc, guard_handler_run_with_signals_blocked);
    tcase_add_test(tc, writer_contract);
    tcase_add_test(tc, pack_skips_and_strict);
    tcase_add_test(tc, pack_empty_inputs);
    tcase_add_test(tc, pack_cancel);
    tcase_add_test(tc, pack_max_side_and_raw);
    tcase_add_test(tc, pack_checks_every_jpeg);
    tcase_add_test(tc, jpeg_header_cases);
    tcase_add_test(tc, token_sequences);
    tcase_add_test(tc, fields_v3);
    tcase_add_test(tc, tokenize_captions);
    suite_add_tcase(s, tc);
    TCase *tcc = tcase_create("corruption");
    tcase_add_checked_fixture(tcc, corrupt_setup, corrupt_teardown);
    tcase_set_timeout(tcc, 60);
    tcase_add_test(tcc, corrupt_header_cases);
    tcase_add_test(tcc, corrupt_payload_and_tables);
    suite_add_tcase(s, tcc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(format_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
