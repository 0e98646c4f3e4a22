/*
 * check_prefetch.c — a remote file's payloads fetched ahead (engine/dataset/prefetch.h),
 * over an object in memory whose reads are counted, slowed or failed: every range taken
 * has its bytes; neighbours share one request, far ranges do not; requests go out in the
 * order the ranges were asked for, not their offsets; a range is taken once; a range
 * never asked for, not fetched for want of room or failed is the reader's own to read;
 * the room holds, the ranges held are kept (needed sooner) and only stale ones dropped for
 * new ones; threads started as requests queue; many readers at once; destroy with
 * requests queued and in flight.
 */
#include "engine/dataset/prefetch.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { OBJ = 1 << 20 };

typedef struct {
    uint8_t bytes[OBJ];
    _Atomic int reads;
    _Atomic uint64_t read_bytes;
    int fail;           /* every read fails with -EIO */
    useconds_t delay;   /* per read */
    uint64_t order[64]; /* offsets of the first reads */
    _Atomic int n_order;
    _Atomic int inflight, max_inflight; /* reads at once */
} object;

static int mem_read(void *ctx, void *buf, size_t len, uint64_t off)
{
    object *o = ctx;
    int now = atomic_fetch_add(&o->inflight, 1) + 1;
    for (int m = atomic_load(&o->max_inflight); now > m;)
        if (atomic_compare_exchange_weak(&o->max_inflight, &m, now))
            break;
    if (o->delay)
        usleep(o->delay);
    atomic_fetch_sub(&o->inflight, 1);
    int i = atomic_fetch_add(&o->reads, 1);
    if (i < 64) {
        o->order[i] = off;
        atomic_fetch_add(&o->n_order, 1);
    }
    atomic_fetch_add(&o->read_bytes, len);
    if (o->fail)
        return -EIO;
    ck_assert_uint_le(off + len, OBJ);
    memcpy(buf, o->bytes + off, len);
    return 0;
}

static object *new_object(void)
{
    object *o = calloc(1, sizeof *o);
    ck_assert_ptr_nonnull(o);
    for (size_t i = 0; i < OBJ; i++)
        o->bytes[i] = (uint8_t)(i * 2654435761u >> 13);
    return o;
}

/* take [off, off+len) and compare it with the object's bytes: take's result */
static int take_check(bfs_prefetch *p, object *o, uint64_t off, uint32_t len)
{
    uint8_t *buf = malloc(len);
    int rc = bfs_prefetch_take(p, off, buf, len);
    if (rc == 1)
        ck_assert_msg(memcmp(buf, o->bytes + off, len) == 0, "bytes of [%llu, +%u) differ",
                      (unsigned long long)off, len);
    free(buf);
    return rc;
}

START_TEST(ranges_have_their_bytes_and_neighbours_share_requests)
{
    bfs_prefetch_configure(4, 64u << 20);
    object *o = new_object();
    bfs_prefetch *p;
    ck_assert_int_eq(bfs_prefetch_create(mem_read, o, &p), 0);
    /* 10 neighbours (a page of shuffle=pages: gaps of 0..100 bytes), then 5 far apart */
    uint64_t off[15];
    uint32_t len[15];
    uint64_t at = 1000;
    for (int i = 0; i < 10; i++)
        off[i] = at, len[i] = 3000 + 17 * i, at += len[i] + (i % 3) * 50;
    for (int i = 10; i < 15; i++)
        off[i] = 100000 + (uint64_t)(i - 10) * 150000, len[i] = 5000;
    bfs_prefetch_want(p, off, len, 15);
    for (int i = 14; i >= 0; i--) /* any order */
        ck_assert_int_eq(take_check(p, o, off[i], len[i]), 1);
    ck_assert_int_eq(atomic_load(&o->reads), 6); /* one for the 10, one each for the 5 */
    /* taken: each range once */
    ck_assert_int_eq(take_check(p, o, off[3], len[3]), 0);
    /* never asked for; asked for with another length */
    ck_assert_int_eq(take_check(p, o, 7, 100), 0);
    bfs_prefetch_want(p, off, len, 1);
    ck_assert_int_eq(take_check(p, o, off[0], len[0] - 1), 0);
    bfs_prefetch_stats st;
    bfs_prefetch_get_stats(&st);
    ck_assert_uint_ge(st.hits, 15);
    bfs_prefetch_destroy(p);
    free(o);
}
END_TEST

START_TEST(requests_in_the_order_asked)
{
    bfs_prefetch_configure(1, 64u << 20); /* one thread: the order is the queue's */
    object *o = new_object();
    o->delay = 20000; /* the first read is under way while the rest are queued */
    bfs_prefetch *p;
    ck_assert_int_eq(bfs_prefetch_create(mem_read, o, &p), 0);
    uint64_t off[5] = {500000, 100000, 900000, 300000, 700000};
    uint32_t len[5] = {1000, 1000, 1000, 1000, 1000};
    bfs_prefetch_want(p, off, len, 5);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(take_check(p, o, off[i], len[i]), 1);
    ck_assert_int_eq(atomic_load(&o->n_order), 5);
    for (int i = 0; i < 5; i++)
        ck_assert_uint_eq(o->order[i], off[i]);
    bfs_prefetch_destroy(p);
    free(o);
}
END_TEST

START_TEST(failed_and_duplicate_ranges)
{
    bfs_prefetch_configure(2, 64u << 20);
    object *o = new_object();
    o->fail = 1;
    bfs_prefetch *p;
    ck_assert_int_eq(bfs_prefetch_create(mem_read, o, &p), 0);
    uint64_t off[3] = {0, 0, 50000};
    uint32_t len[3] = {4096, 4096, 0}; /* the same range twice; an empty one */
    bfs_prefetch_want(p, off, len, 3);
    ck_assert_int_eq(take_check(p, o, 0, 4096), -EIO); /* its error: read it yourself */
    ck_assert_int_eq(take_check(p, o, 0, 4096), 0);    /* and then it is gone */
    ck_assert_int_eq(take_check(p, o, 50000, 0), 0);
    ck_assert_int_eq(atomic_load(&o->reads), 1);
    /* asked for again, while held: not fetched twice */
    o->fail = 0;
    bfs_prefetch_want(p, off, len, 1);
    bfs_prefetch_want(p, off, len, 1);
    ck_assert_int_eq(take_check(p, o, 0, 4096), 1);
    ck_assert_int_eq(atomic_load(&o->reads), 2);
    bfs_prefetch_destroy(p);
    free(o);
}
END_TEST

START_TEST(room_holds)
{
    bfs_prefetch_configure(1, 10000); /* room for two ranges of 4000; one thread: in order */
    object *o = new_object();
    bfs_prefetch *p;
    ck_assert_int_eq(bfs_prefetch_create(mem_read, o, &p), 0);
    uint64_t off[3] = {0, 100000, 200000};
    uint32_t len[3] = {4000, 4000, 4000};
    bfs_prefetch_want(p, off, len, 3); /* the third does not fit: not prefetched */
    ck_assert_int_eq(take_check(p, o, 200000, 4000), 0);
    ck_assert_int_eq(take_check(p, o, 100000, 4000), 1);
    /* room for one more: a new range that finds none is not prefetched; the unread one
     * held (needed sooner) is kept */
    uint64_t off2[2] = {300000, 400000};
    uint32_t len2[2] = {4000, 4000};
    bfs_prefetch_want(p, off2, len2, 2);
    ck_assert_int_eq(take_check(p, o, 400000, 4000), 0);
    ck_assert_int_eq(take_check(p, o, 300000, 4000), 1);
    ck_assert_int_eq(take_check(p, o, 0, 4000), 1);
    bfs_prefetch_stats st0, st;
    bfs_prefetch_get_stats(&st0);
    /* a range unread past the stale age is dropped for a new one */
    bfs_prefetch_set_stale_ms(0);
    uint64_t off3[2] = {500000, 600000};
    bfs_prefetch_want(p, off3, len2, 2);
    ck_assert_int_eq(take_check(p, o, 500000, 4000), 1);
    for (int i = 0; i < 5000; i++) { /* 600000 arrived (settled before it is counted) */
        bfs_prefetch_get_stats(&st);
        if (st.ranges >= st0.ranges + 2)
            break;
        usleep(1000);
    }
    uint64_t off4[2] = {700000, 800000};
    bfs_prefetch_want(p, off4, len2, 2); /* 600000 was unread: dropped for room */
    ck_assert_int_eq(take_check(p, o, 800000, 4000), 1);
    ck_assert_int_eq(take_check(p, o, 700000, 4000), 1);
    ck_assert_int_eq(take_check(p, o, 600000, 4000), 0);
    bfs_prefetch_get_stats(&st);
    ck_assert_uint_ge(st.dropped, st0.dropped + 1);
    bfs_prefetch_set_stale_ms(10000);
    /* a range larger than the room is never prefetched */
    uint64_t big_off = 900000;
    uint32_t big_len = 20000;
    bfs_prefetch_want(p, &big_off, &big_len, 1);
    ck_assert_int_eq(take_check(p, o, big_off, big_len), 0);
    bfs_prefetch_destroy(p);
    free(o);
}
END_TEST

typedef struct {
    bfs_prefetch *p;
    object *o;
    int first, step, n, hits;
} reader;

static void *read_some(void *arg)
{
    reader *r = arg;
    for (int i = r->first; i < r->n; i += r->step)
        r->hits += take_check(r->p, r->o, (uint64_t)i * 1000, 900) == 1;
    return NULL;
}

/* the fetch threads running (not the process's: a sanitizer has threads of its own) */
static int threads_now(void)
{
    bfs_prefetch_stats st;
    bfs_prefetch_get_stats(&st);
    return (int)st.threads;
}

START_TEST(threads_as_requests_queue)
{
    bfs_prefetch_configure(8, 64u << 20);
    object *o = new_object();
    bfs_prefetch *p;
    ck_assert_int_eq(bfs_prefetch_create(mem_read, o, &p), 0);
    int before = threads_now();
    /* a near store: one range at a time, each taken before the next is asked for: one
     * thread does */
    for (int i = 0; i < 6; i++) {
        uint64_t off = (uint64_t)i * 100000;
        uint32_t len = 1000;
        bfs_prefetch_want(p, &off, &len, 1);
        ck_assert_int_eq(take_check(p, o, off, len), 1);
    }
    ck_assert_int_eq(threads_now() - before, 1);
    ck_assert_int_eq(atomic_load(&o->max_inflight), 1);
    /* a far one: 8 ranges queued behind a slow request: more threads, requests at once */
    o->delay = 50000;
    uint64_t off[8];
    uint32_t len[8];
    for (int i = 0; i < 8; i++)
        off[i] = 700000 + (uint64_t)i * 20000, len[i] = 1000;
    bfs_prefetch_want(p, off, len, 8);
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(take_check(p, o, off[i], len[i]), 1);
    ck_assert_int_gt(threads_now() - before, 1);
    ck_assert_int_le(threads_now() - before, 8);
    ck_assert_int_gt(atomic_load(&o->max_inflight), 1);
    bfs_prefetch_destroy(p);
    ck_assert_int_eq(threads_now(), before);
    free(o);
}
END_TEST

START_TEST(many_readers_at_once)
{
    bfs_prefetch_configure(8, 64u << 20);
    object *o = new_object();
    o->delay = 200;
    bfs_prefetch *p;
    ck_assert_int_eq(bfs_prefetch_create(mem_read, o, &p), 0);
    enum { N = 1000, R = 6 };
    uint64_t off[N];
    uint32_t len[N];
    for (int i = 0; i < N; i++)
        off[i] = (uint64_t)i * 1000, len[i] = 900; /* gaps of 100: one run per 4 MiB */
    bfs_prefetch_want(p, off, len, N);
    pthread_t t[R];
    reader rd[R];
    for (int k = 0; k < R; k++) {
        rd[k] = (reader){.p = p, .o = o, .first = k, .step = R, .n = N};
        ck_assert_int_eq(pthread_create(&t[k], NULL, read_some, &rd[k]), 0);
    }
    int hits = 0;
    for (int k = 0; k < R; k++) {
        pthread_join(t[k], NULL);
        hits += rd[k].hits;
    }
    ck_assert_int_eq(hits, N);
    ck_assert_int_le(atomic_load(&o->reads), 2); /* 1 MB of neighbours: one or two runs */
    bfs_prefetch_destroy(p);
    free(o);
}
END_TEST

START_TEST(destroy_with_requests_pending)
{
    bfs_prefetch_configure(2, 64u << 20);
    object *o = new_object();
    o->delay = 5000;
    bfs_prefetch *p;
    ck_assert_int_eq(bfs_prefetch_create(mem_read, o, &p), 0);
    uint64_t off[50];
    uint32_t len[50];
    for (int i = 0; i < 50; i++)
        off[i] = (uint64_t)i * 20000, len[i] = 1000;
    bfs_prefetch_want(p, off, len, 50);
    bfs_prefetch_destroy(p); /* waits for the two in flight, frees the rest (ASan) */
    ck_assert_int_lt(atomic_load(&o->reads), 50);
    bfs_prefetch_destroy(NULL);
    free(o);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("prefetch");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, ranges_have_their_bytes_and_neighbours_share_requests);
    tcase_add_test(tc, requests_in_the_order_asked);
    tcase_add_test(tc, failed_and_duplicate_ranges);
    tcase_add_test(tc, room_holds);
    tcase_add_test(tc, threads_as_requests_queue);
    tcase_add_test(tc, many_readers_at_once);
    tcase_add_test(tc, destroy_with_requests_pending);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
