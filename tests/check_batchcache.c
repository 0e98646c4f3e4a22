/*
 * check_batchcache.c — the in-memory batch cache's eviction policy (cache/batchcache.h):
 * when the nearest reader will read a batch (same epoch, strides, the next epoch for a
 * reader that crossed before, nothing behind), and which batch a choice gives up (over
 * the budget: farthest next read, LRU among equals; under it: the oldest passed batch
 * beyond passed_max; else none). The executor's own tests (check_engine: the window,
 * evictions in /stats) cover the policy in place.
 */
#include "cache/batchcache.h"

#include <check.h>
#include <stdint.h>

START_TEST(next_read_walks)
{
    /* one reader at epoch 2 batch 4, stride 3, 10 batches an epoch */
    bfs_bc_reader r = {.epoch = 2, .k = 4, .stride = 3, .crossed = 0};
    ck_assert_uint_eq(bfs_bc_next_read(&r, 1, 10, 2, 7), 1);
    ck_assert_uint_eq(bfs_bc_next_read(&r, 1, 10, 2, 10), 2);
    ck_assert_uint_eq(bfs_bc_next_read(&r, 1, 10, 2, 4), UINT64_MAX); /* its own: read */
    ck_assert_uint_eq(bfs_bc_next_read(&r, 1, 10, 2, 1), UINT64_MAX); /* behind it */
    ck_assert_uint_eq(bfs_bc_next_read(&r, 1, 10, 2, 8), UINT64_MAX); /* off its stride */
    ck_assert_uint_eq(bfs_bc_next_read(&r, 1, 10, 3, 1), UINT64_MAX); /* not crossed yet */
    /* once it has crossed an epoch end, it goes on at the same residue (4 % 3 = 1):
     * 7 (1 step), then epoch 3's 1 (2 steps), 4 (3 steps) */
    r.crossed = 1;
    ck_assert_uint_eq(bfs_bc_next_read(&r, 1, 10, 3, 1), 2);
    ck_assert_uint_eq(bfs_bc_next_read(&r, 1, 10, 3, 4), 3);
    ck_assert_uint_eq(bfs_bc_next_read(&r, 1, 10, 3, 2), UINT64_MAX);
    ck_assert_uint_eq(bfs_bc_next_read(&r, 1, 10, 4, 1), UINT64_MAX); /* two epochs away */
    /* stride 0 counts as 1; the nearest of two readers wins */
    bfs_bc_reader two[2] = {{.epoch = 0, .k = 0, .stride = 0}, {.epoch = 0, .k = 5, .stride = 1}};
    ck_assert_uint_eq(bfs_bc_next_read(two, 2, 10, 0, 6), 1);
    ck_assert_uint_eq(bfs_bc_next_read(two, 2, 10, 0, 3), 3);
    ck_assert_uint_eq(bfs_bc_next_read(two, 0, 10, 0, 3), UINT64_MAX); /* no reader */
    ck_assert_int_eq(bfs_bc_walk_len(10, 1, 3), 3);                    /* 1, 4, 7 */
    ck_assert_int_eq(bfs_bc_walk_len(10, 0, 1), 10);
}
END_TEST

START_TEST(victim_rules)
{
    int items[4], passed = -1;
    bfs_bc_choice c;
    bfs_bc_begin(&c);
    ck_assert_ptr_null(bfs_bc_victim(&c, 0, 0, &passed)); /* nothing offered */
    /* two read ahead (next read in 2 and 5 steps), two passed (used at ticks 7 and 3) */
    bfs_bc_offer(&c, &items[0], 100, 10, 2);
    bfs_bc_offer(&c, &items[1], 100, 11, 5);
    bfs_bc_offer(&c, &items[2], 100, 7, UINT64_MAX);
    bfs_bc_offer(&c, &items[3], 100, 3, UINT64_MAX);
    ck_assert_uint_eq(c.held, 400);
    ck_assert_uint_eq(c.passed, 200);
    /* over the budget: farthest next read first (a passed one), LRU among equals */
    ck_assert_ptr_eq(bfs_bc_victim(&c, 399, 1000, &passed), &items[3]);
    ck_assert_int_eq(passed, 1);
    /* under the budget, passed batches beyond passed_max: the oldest passed */
    ck_assert_ptr_eq(bfs_bc_victim(&c, 1000, 199, &passed), &items[3]);
    ck_assert_int_eq(passed, 1);
    /* within both: none */
    ck_assert_ptr_null(bfs_bc_victim(&c, 400, 200, &passed));
    /* only batches read ahead: over budget, the one read last goes */
    bfs_bc_begin(&c);
    bfs_bc_offer(&c, &items[0], 100, 10, 2);
    bfs_bc_offer(&c, &items[1], 100, 1, 5);
    bfs_bc_offer(&c, &items[2], 100, 0, 5);
    ck_assert_ptr_eq(bfs_bc_victim(&c, 250, 0, &passed), &items[2]); /* 5 steps, LRU */
    ck_assert_int_eq(passed, 0);
    ck_assert_ptr_null(bfs_bc_victim(&c, 300, 0, NULL)); /* passed_max: none passed */
}
END_TEST

static Suite *batchcache_suite(void)
{
    Suite *s = suite_create("batchcache");
    TCase *tc = tcase_create("policy");
    tcase_add_test(tc, next_read_walks);
    tcase_add_test(tc, victim_rules);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(batchcache_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
