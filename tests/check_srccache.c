/*
 * check_srccache.c — remote files' bytes kept on disk (cache/srccache.h): a range written
 * is read back, by a later open too (another mount); a range not (wholly) written is a
 * miss, never zeros; objects of other identities never meet; the budget evicts the least
 * recently opened objects not in use, and writes nothing when the objects in use fill it;
 * the directory is made 0700, and refused when it is a symbolic link, another user's or
 * writable by others; no cache configured: every call is a harmless miss.
 */
#include "cache/srccache.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];
static char err[1024];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/check_srccache.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void fill(uint8_t *b, size_t n, int seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)(i * 31 + seed);
}

START_TEST(ranges_round_trip_across_opens)
{
    char d[300];
    snprintf(d, sizeof d, "%s/cache", dir);
    ck_assert_msg(bfs_srccache_configure(d, 64u << 20, err, sizeof err) == 0, "%s", err);
    struct stat st;
    ck_assert_int_eq(stat(d, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0700);
    enum { SIZE = 1 << 20 };
    bfs_srcfile *f = bfs_srcfile_open(0x1234, SIZE);
    ck_assert_ptr_nonnull(f);
    uint8_t a[10000], b[10000];
    fill(a, sizeof a, 1);
    ck_assert_int_eq(bfs_srcfile_present(f, 100000, sizeof a), 0);
    ck_assert_int_eq(bfs_srcfile_read(f, b, sizeof b, 100000), 0); /* a miss, not zeros */
    bfs_srcfile_write(f, a, sizeof a, 100000);
    ck_assert_int_eq(bfs_srcfile_present(f, 100000, sizeof a), 1);
    memset(b, 0, sizeof b);
    ck_assert_int_eq(bfs_srcfile_read(f, b, sizeof b, 100000), 1);
    ck_assert_mem_eq(a, b, sizeof a);
    /* a range reaching past what was written (a page away: holes are 4 KiB) is a miss */
    ck_assert_int_eq(bfs_srcfile_read(f, b, sizeof b, 100000 + 8192 + 4096), 0);
    ck_assert_int_eq(bfs_srcfile_present(f, 500000, 10), 0);
    /* outside the object: never */
    ck_assert_int_eq(bfs_srcfile_present(f, SIZE - 5, 10), 0);
    bfs_srcfile_write(f, a, 10, SIZE - 5);
    bfs_srcfile_close(f);
    /* another open (another mount) of the same object reads it; another object does not */
    f = bfs_srcfile_open(0x1234, SIZE);
    ck_assert_int_eq(bfs_srcfile_read(f, b, sizeof b, 100000), 1);
    ck_assert_mem_eq(a, b, sizeof a);
    bfs_srcfile *g = bfs_srcfile_open(0x5678, SIZE);
    ck_assert_int_eq(bfs_srcfile_read(g, b, sizeof b, 100000), 0);
    bfs_srcfile_close(g);
    bfs_srcfile_close(f);
    char name[400];
    snprintf(name, sizeof name, "%s/0000000000001234.obj", d);
    ck_assert_int_eq(stat(name, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0600);
    bfs_srccache_stats s;
    bfs_srccache_get_stats(&s);
    ck_assert_uint_eq(s.hits, 2);
    ck_assert_uint_eq(s.stored, 1);
    ck_assert_uint_ge(s.usage_bytes, sizeof a);
}
END_TEST

START_TEST(budget_evicts_the_oldest_unused)
{
    /* a budget of 3 files of 64 KiB written (plus their blocks' rounding) */
    ck_assert_msg(bfs_srccache_configure(dir, 3 * 65536 + 16384, err, sizeof err) == 0, "%s", err);
    static uint8_t a[65536], b[65536];
    fill(a, sizeof a, 7);
    for (uint64_t id = 1; id <= 3; id++) {
        bfs_srcfile *f = bfs_srcfile_open(id, 1 << 20);
        bfs_srcfile_write(f, a, sizeof a, 0);
        bfs_srcfile_close(f);
        usleep(20000); /* distinct mtimes: the order they were last opened */
    }
    /* object 1 opened again: the most recent; object 4 needs room: object 2 goes */
    bfs_srcfile *one = bfs_srcfile_open(1, 1 << 20);
    usleep(20000);
    bfs_srcfile *four = bfs_srcfile_open(4, 1 << 20);
    bfs_srcfile_write(four, a, sizeof a, 0);
    ck_assert_int_eq(bfs_srcfile_read(four, b, sizeof b, 0), 1);
    ck_assert_int_eq(bfs_srcfile_read(one, b, sizeof b, 0), 1);
    bfs_srcfile *two = bfs_srcfile_open(2, 1 << 20);
    ck_assert_int_eq(bfs_srcfile_read(two, b, sizeof b, 0), 0); /* evicted */
    bfs_srccache_stats s;
    bfs_srccache_get_stats(&s);
    ck_assert_uint_ge(s.evicted, 1);
    /* objects in use fill the budget: nothing more is written, nothing in use evicted */
    bfs_srcfile_write(two, a, sizeof a, 0);
    bfs_srcfile_write(two, a, sizeof a, 65536);
    bfs_srcfile_write(two, a, sizeof a, 131072);
    bfs_srccache_get_stats(&s);
    ck_assert_uint_ge(s.full, 1);
    ck_assert_int_eq(bfs_srcfile_read(one, b, sizeof b, 0), 1);
    ck_assert_int_eq(bfs_srcfile_read(four, b, sizeof b, 0), 1);
    bfs_srcfile_close(one);
    bfs_srcfile_close(two);
    bfs_srcfile_close(four);
}
END_TEST

START_TEST(unsafe_directories_refused)
{
    char d[300], link[300];
    snprintf(d, sizeof d, "%s/open", dir);
    ck_assert_int_eq(mkdir(d, 0777), 0);
    ck_assert_int_eq(chmod(d, 0777), 0);
    ck_assert_int_eq(bfs_srccache_configure(d, 1 << 20, err, sizeof err), -EPERM);
    ck_assert_ptr_nonnull(strstr(err, "writable by other users"));
    ck_assert_ptr_nonnull(strstr(err, "source_cache="));
    snprintf(link, sizeof link, "%s/link", dir);
    ck_assert_int_eq(chmod(d, 0700), 0);
    ck_assert_int_eq(symlink(d, link), 0);
    ck_assert_int_lt(bfs_srccache_configure(link, 1 << 20, err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "symbolic link is not followed"));
    char file[300];
    snprintf(file, sizeof file, "%s/file", dir);
    int fd = open(file, O_CREAT | O_WRONLY, 0600);
    close(fd);
    ck_assert_int_lt(bfs_srccache_configure(file, 1 << 20, err, sizeof err), 0);
    if (geteuid() == 0) { /* another user's directory */
        char other[300];
        snprintf(other, sizeof other, "%s/other", dir);
        ck_assert_int_eq(mkdir(other, 0700), 0);
        ck_assert_int_eq(chown(other, 65534, 65534), 0);
        ck_assert_int_eq(bfs_srccache_configure(other, 1 << 20, err, sizeof err), -EPERM);
        ck_assert_ptr_nonnull(strstr(err, "not this user"));
    }
}
END_TEST

START_TEST(no_cache_is_a_miss)
{
    ck_assert_int_eq(bfs_srccache_configure(NULL, 0, err, sizeof err), 0);
    ck_assert_ptr_null(bfs_srcfile_open(1, 100));
    uint8_t b[10];
    ck_assert_int_eq(bfs_srcfile_read(NULL, b, sizeof b, 0), 0);
    ck_assert_int_eq(bfs_srcfile_present(NULL, 0, 10), 0);
    bfs_srcfile_write(NULL, b, sizeof b, 0);
    bfs_srcfile_close(NULL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("srccache");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, ranges_round_trip_across_opens);
    tcase_add_test(tc, budget_evicts_the_oldest_unused);
    tcase_add_test(tc, unsafe_directories_refused);
    tcase_add_test(tc, no_cache_is_a_miss);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
