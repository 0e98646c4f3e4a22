/*
 * check_batchcache.c — the in-memory batch cache's eviction policy (cache/batchcache.h):
 * when the nearest reader will read a batch (same epoch, strides, the next epoch for a
 * reader that crossed before, nothing behind), and which batch a choice gives up (over
 * the budget: farthest next read, LRU among equals; under it: the oldest passed batch
 * beyond passed_max; else none); and that the walk prefetch follows (bfs_bc_walk_next)
 * is the one eviction measures (bfs_bc_next_read). The executor's own tests (check_engine:
 * the window, evictions in /stats) cover the policy in place.
 *
 * And the cache's memory (bfs_bc_mem): buffers come back from the pool, the pool keeps two
 * always and more only within the room and the peak, shrinks on trim; batch files hold
 * exactly the bytes, cannot be written, and are closed by the reaper once released.
 */
#include "cache/batchcache.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    /* stride 1 (its own path, without divisions): ahead, behind, across the epoch's end */
    bfs_bc_reader one = {.epoch = 2, .k = 7, .stride = 1, .crossed = 0};
    ck_assert_uint_eq(bfs_bc_next_read(&one, 1, 10, 2, 9), 2);
    ck_assert_uint_eq(bfs_bc_next_read(&one, 1, 10, 2, 7), UINT64_MAX);
    ck_assert_uint_eq(bfs_bc_next_read(&one, 1, 10, 2, 0), UINT64_MAX);
    ck_assert_uint_eq(bfs_bc_next_read(&one, 1, 10, 3, 0), UINT64_MAX); /* not crossed yet */
    one.crossed = 1;
    ck_assert_uint_eq(bfs_bc_next_read(&one, 1, 10, 3, 0), 3); /* 8, 9, then 3:0 */
    ck_assert_uint_eq(bfs_bc_next_read(&one, 1, 10, 3, 5), 8);
    ck_assert_uint_eq(bfs_bc_next_read(&one, 1, 10, 4, 0), UINT64_MAX);
    ck_assert_uint_eq(bfs_bc_next_read(&one, 1, 10, 1, 9), UINT64_MAX);
    ck_assert_int_eq(bfs_bc_walk_len(10, 1, 3), 3); /* 1, 4, 7 */
    ck_assert_int_eq(bfs_bc_walk_len(10, 0, 1), 10);
}
END_TEST

static char names[20001][16]; /* "batch_%u" for every k up to the largest epoch tested */

static int cmp_names(const void *a, const void *b)
{
    return strcmp(names[*(const uint32_t *)a], names[*(const uint32_t *)b]);
}

/* The names' string order (a shell's glob): bfs_bc_lex_next and bfs_bc_lex_rank against
 * qsort of the names themselves, for every batch of every epoch size up to 1,200 and a few
 * larger ones. A name's place among fewer names is its place among all of them with the
 * larger ones left out, so each family is sorted once (this test ran out of its time under
 * TSan when it sorted 1,205 times, formatting names in every comparison). */
START_TEST(lex_order_of_names)
{
    static uint32_t all[20001], order[20001];
    static const uint64_t big[] = {9999, 10000, 10001, 12345, 20001};
    for (uint32_t k = 0; k < 20001; k++)
        snprintf(names[k], sizeof names[k], "batch_%u", k), all[k] = k;
    for (int fam = 0; fam < 2; fam++) {
        uint64_t top = fam == 0 ? 1200 : 20001;
        qsort(all, top, sizeof all[0], cmp_names);
        for (uint64_t nb = 1; nb <= top; nb++) {
            if (fam == 1) {
                int want = 0;
                for (size_t i = 0; i < sizeof big / sizeof *big; i++)
                    want |= big[i] == nb;
                if (!want)
                    continue;
            }
            uint64_t n = 0;
            for (uint64_t i = 0; i < top; i++)
                if (all[i] < nb)
                    order[n++] = all[i];
            ck_assert_uint_eq(n, nb);
            for (uint64_t r = 0; r < nb; r++) {
                uint64_t k = order[r];
                ck_assert_msg(bfs_bc_lex_rank(k, nb) == r, "rank of %llu in %llu: %llu, not %llu",
                              (unsigned long long)k, (unsigned long long)nb,
                              (unsigned long long)bfs_bc_lex_rank(k, nb), (unsigned long long)r);
                int64_t want = r + 1 < nb ? (int64_t)order[r + 1] : -1;
                ck_assert_msg(bfs_bc_lex_next(k, nb) == want, "after %llu in %llu: %lld, not %lld",
                              (unsigned long long)k, (unsigned long long)nb,
                              (long long)bfs_bc_lex_next(k, nb), (long long)want);
            }
            ck_assert_int_eq(bfs_bc_lex_next(nb, nb), -1);
        }
        for (uint32_t k = 0; k < 20001; k++)
            all[k] = k;
    }
    /* a reader in that order: its next reads are the ranks ahead, and on into the next
     * epoch once it crossed an epoch end before; 1144 batches: 0, 1, 10, 100, 1000, ... */
    bfs_bc_reader r = {.epoch = 1, .k = 10, .stride = 9, .lex = 1};
    ck_assert_uint_eq(bfs_bc_next_read(&r, 1, 1144, 1, 100), 1);
    ck_assert_uint_eq(bfs_bc_next_read(&r, 1, 1144, 1, 1000), 2);
    ck_assert_uint_eq(bfs_bc_next_read(&r, 1, 1144, 1, 101), 12); /* after 1000..1009 */
    ck_assert_uint_eq(bfs_bc_next_read(&r, 1, 1144, 1, 19), 243); /* (stride 9: 1 step) */
    ck_assert_uint_eq(bfs_bc_next_read(&r, 1, 1144, 1, 1), UINT64_MAX);
    ck_assert_uint_eq(bfs_bc_next_read(&r, 1, 1144, 2, 0), UINT64_MAX); /* not crossed yet */
    r.crossed = 1;
    ck_assert_uint_eq(bfs_bc_next_read(&r, 1, 1144, 2, 0), 1144 - 2);
    ck_assert_uint_eq(bfs_bc_next_read(&r, 1, 1144, 2, 1), 1144 - 1);
}
END_TEST

/* One walk model (cache/walk.c): for every kind of reader (strides forward and back,
 * 0 taken as 1, the names' order; crossed or not) and start, the batches that
 * bfs_bc_walk_next (prefetch's walk) reaches after d steps are exactly those that
 * bfs_bc_next_read (eviction's) says the reader reads in d steps, over its epoch and the
 * next; every other batch of those two epochs it says no reader reads. And a walk ends at
 * the last epoch (ne). */
START_TEST(walk_next_inverts_next_read)
{
    static const uint64_t nbs[] = {1, 2, 7, 10, 23, 120};
    static const int64_t strides[] = {-3, -1, 0, 1, 2, 3, 7, 130};
    enum { E = 5 };
    for (size_t a = 0; a < sizeof nbs / sizeof *nbs; a++) {
        uint64_t nb = nbs[a];
        uint64_t *seen = malloc(2 * nb * sizeof *seen); /* steps + 1 per (epoch - E, k); 0: not */
        ck_assert_ptr_nonnull(seen);
        for (size_t b = 0; b < sizeof strides / sizeof *strides; b++)
            for (int kind = 0; kind < 4; kind++)
                for (uint64_t k0 = 0; k0 < nb; k0++) {
                    bfs_bc_reader r = {.epoch = E,
                                       .k = k0,
                                       .stride = strides[b],
                                       .crossed = kind & 1,
                                       .lex = kind >> 1};
                    memset(seen, 0, 2 * nb * sizeof *seen);
                    uint64_t ep = E, k = k0;
                    for (uint64_t d = 1; bfs_bc_walk_next(&r, nb, E + 2, &ep, &k) == 0; d++) {
                        ck_assert_uint_lt(k, nb);
                        ck_assert(ep == E || (ep == E + 1 && r.crossed));
                        ck_assert_uint_eq(seen[(ep - E) * nb + k], 0); /* visited once */
                        seen[(ep - E) * nb + k] = d;
                    }
                    for (uint64_t e = 0; e < 2; e++)
                        for (uint64_t q = 0; q < nb; q++) {
                            uint64_t want = seen[e * nb + q] ? seen[e * nb + q] : UINT64_MAX;
                            ck_assert_msg(bfs_bc_next_read(&r, 1, nb, E + e, q) == want,
                                          "nb %llu stride %lld kind %d from %llu: epoch +%llu "
                                          "batch %llu: %llu steps, walk says %llu",
                                          (unsigned long long)nb, (long long)strides[b], kind,
                                          (unsigned long long)k0, (unsigned long long)e,
                                          (unsigned long long)q,
                                          (unsigned long long)bfs_bc_next_read(&r, 1, nb, E + e, q),
                                          (unsigned long long)want);
                        }
                }
        free(seen);
    }
}
END_TEST

START_TEST(victim_rules)
{
    int items[4], passed = -1;
    bfs_bc_choice c;
    bfs_bc_begin(&c);
    ck_assert_ptr_null(bfs_bc_victim(&c, 0, UINT64_MAX, 0, &passed)); /* nothing offered */
    /* two read ahead (next read in 2 and 5 steps), two passed (used at ticks 7 and 3) */
    bfs_bc_offer(&c, &items[0], 100, 10, 2, 0);
    bfs_bc_offer(&c, &items[1], 100, 11, 5, 0);
    bfs_bc_offer(&c, &items[2], 100, 7, UINT64_MAX, 0);
    bfs_bc_offer(&c, &items[3], 100, 3, UINT64_MAX, 0);
    ck_assert_uint_eq(c.held, 400);
    ck_assert_uint_eq(c.passed, 200);
    /* over the budget: farthest next read first (a passed one), LRU among equals */
    ck_assert_ptr_eq(bfs_bc_victim(&c, 399, UINT64_MAX, 1000, &passed), &items[3]);
    ck_assert_int_eq(passed, 1);
    /* under the budget, passed batches beyond passed_max: the oldest passed */
    ck_assert_ptr_eq(bfs_bc_victim(&c, 1000, UINT64_MAX, 199, &passed), &items[3]);
    ck_assert_int_eq(passed, 1);
    /* within both: none */
    ck_assert_ptr_null(bfs_bc_victim(&c, 400, UINT64_MAX, 200, &passed));
    /* only batches read ahead: over budget, the one read last goes */
    bfs_bc_begin(&c);
    bfs_bc_offer(&c, &items[0], 100, 10, 2, 0);
    bfs_bc_offer(&c, &items[1], 100, 1, 5, 0);
    bfs_bc_offer(&c, &items[2], 100, 0, 5, 0);
    ck_assert_ptr_eq(bfs_bc_victim(&c, 250, UINT64_MAX, 0, &passed), &items[2]); /* 5 steps, LRU */
    ck_assert_int_eq(passed, 0);
    ck_assert_ptr_null(bfs_bc_victim(&c, 300, UINT64_MAX, 0, NULL)); /* passed_max: none passed */
}
END_TEST

/* Batches in files (a descriptor each) are bounded by a count too: beyond files_max, the
 * file read farthest in the future goes, even far under the byte budget, never a batch
 * held in a buffer; the byte budget comes first, the passed bound after. */
START_TEST(victim_rules_files)
{
    int items[5], passed = -1;
    bfs_bc_choice c;
    bfs_bc_begin(&c);
    bfs_bc_offer(&c, &items[0], 100, 10, 2, 1);         /* file, read next */
    bfs_bc_offer(&c, &items[1], 100, 11, 7, 1);         /* file, read in 7 steps */
    bfs_bc_offer(&c, &items[2], 100, 5, 9, 0);          /* buffer, read in 9 steps */
    bfs_bc_offer(&c, &items[3], 100, 6, UINT64_MAX, 1); /* file, passed */
    bfs_bc_offer(&c, &items[4], 100, 4, UINT64_MAX, 0); /* buffer, passed (older) */
    ck_assert_uint_eq(c.files, 3);
    ck_assert_ptr_null(bfs_bc_victim(&c, 1000, 3, 1000, &passed)); /* all fit */
    /* over files_max: the passed file (not the older passed buffer) */
    ck_assert_ptr_eq(bfs_bc_victim(&c, 1000, 2, 1000, &passed), &items[3]);
    ck_assert_int_eq(passed, 1);
    /* over the byte budget first: the farthest of all (a buffer) */
    ck_assert_ptr_eq(bfs_bc_victim(&c, 400, 2, 1000, &passed), &items[4]);
    /* without the passed file: the file read last (7 steps, not the buffer's 9) */
    bfs_bc_begin(&c);
    bfs_bc_offer(&c, &items[0], 100, 10, 2, 1);
    bfs_bc_offer(&c, &items[1], 100, 11, 7, 1);
    bfs_bc_offer(&c, &items[2], 100, 5, 9, 0);
    ck_assert_ptr_eq(bfs_bc_victim(&c, 1000, 1, 1000, &passed), &items[1]);
    ck_assert_int_eq(passed, 0);
    ck_assert_ptr_eq(bfs_bc_victim(&c, 1000, 0, 1000, &passed), &items[1]);
    ck_assert_ptr_null(bfs_bc_victim(&c, 1000, 2, 1000, &passed));
}
END_TEST

static bfs_bc_mem_stats mem_stats(bfs_bc_mem *m)
{
    bfs_bc_mem_stats st;
    bfs_bc_mem_get_stats(m, &st);
    return st;
}

static int no_readers(void *arg, bfs_bc_reader *out, uint64_t *nb)
{
    (void)arg, (void)out;
    *nb = 100;
    return 0;
}

static int dropped;
static void count_drop(void *arg, bfs_bc_entry *e)
{
    (void)arg, (void)e;
    dropped++;
}

/* An eviction that brings the cache within its bounds ends there: one pass over the
 * entries per victim, none after the last (it made one more, which chose nothing: two
 * passes over every entry for each batch a full cache took in). */
START_TEST(evict_one_pass_per_victim)
{
    enum { N = 12, SZ = 4096 };
    bfs_bc_ops ops = {.readers = no_readers, .drop = count_drop};
    bfs_bc *c;
    ck_assert_int_eq(bfs_bc_create(&ops, 10 * SZ, &c), 0);
    bfs_bc_set_passed_max(c, 10 * SZ, 0);
    bfs_bc_entry e[N];
    for (int i = 0; i < N; i++) {
        e[i] = (bfs_bc_entry){
            .k = (uint64_t)i, .size = SZ, .fd = -1, .state = BFS_BC_READY, .used = (uint64_t)i + 1};
        bfs_bc_insert(c, &e[i]);
    }
    bfs_bc_stats st;
    bfs_bc_get_stats(c, &st);
    uint64_t passes = st.evict_passes; /* (set_passed_max's) */
    dropped = 0;
    bfs_bc_evict(c, 0); /* 12 over a budget of 10: the two least recently used go */
    bfs_bc_get_stats(c, &st);
    ck_assert_int_eq(dropped, 2);
    ck_assert_uint_eq(st.evictions, 2);
    ck_assert_uint_eq(st.cached_bytes, 10 * SZ);
    ck_assert_uint_eq(st.evict_passes - passes, 2);
    bfs_bc_evict(c, 0); /* the entries' bytes within every bound: no pass, nothing goes */
    bfs_bc_get_stats(c, &st);
    ck_assert_int_eq(dropped, 2);
    ck_assert_uint_eq(st.evict_passes - passes, 2);
    for (int i = 2; i < N; i++) /* the survivors: the 10 most recently used */
        bfs_bc_unlink(c, &e[i]);
    bfs_bc_destroy(c);
}
END_TEST

/* The passed bound, once it chooses a victim, evicts the oldest passed batches down to an
 * eighth below it in one more pass; then, while all the entries' bytes are within every
 * bound, an eviction makes no pass over them (three passes over ~520 entries per 512 KiB
 * token batch read were ~10% of the daemon's CPU). */
START_TEST(evict_passed_hysteresis)
{
    enum { N = 80, SZ = 4096, BOUND = 64 };
    bfs_bc_ops ops = {.readers = no_readers, .drop = count_drop};
    bfs_bc *c;
    ck_assert_int_eq(bfs_bc_create(&ops, 1000 * SZ, &c), 0);
    bfs_bc_set_passed_max(c, BOUND * SZ, 0);
    static bfs_bc_entry e[N];
    bfs_bc_stats st;
    bfs_bc_get_stats(c, &st);
    uint64_t passes = st.evict_passes;
    dropped = 0;
    for (int i = 0; i < N; i++) {
        /* (no reader: every finished batch is passed) */
        e[i] = (bfs_bc_entry){
            .k = (uint64_t)i, .size = SZ, .fd = -1, .state = BFS_BC_READY, .used = (uint64_t)i + 1};
        bfs_bc_insert(c, &e[i]);
        bfs_bc_evict(c, 0);
        bfs_bc_get_stats(c, &st);
        if (i < BOUND) { /* within the bound: no pass */
            ck_assert_uint_eq(st.evict_passes, passes);
            ck_assert_int_eq(dropped, 0);
        } else if (i == BOUND) { /* over: the oldest, then 8 more, in two passes */
            ck_assert_uint_eq(st.evict_passes - passes, 2);
            ck_assert_int_eq(dropped, 9);
            ck_assert_uint_eq(st.evicted_passed, 9);
            ck_assert_uint_eq(st.cached_bytes, (BOUND - BOUND / 8) * SZ);
        } else if (i < BOUND + 9) { /* below it again: no pass */
            ck_assert_uint_eq(st.evict_passes - passes, 2);
            ck_assert_int_eq(dropped, 9);
        } else { /* over again: 9 more go */
            ck_assert_uint_eq(i, BOUND + 9);
            ck_assert_uint_eq(st.evict_passes - passes, 4);
            ck_assert_int_eq(dropped, 18);
            break;
        }
    }
    for (int i = 0; i < N; i++) { /* the least recently used went */
        bfs_bc_entry *f = bfs_bc_find(c, 0, (uint64_t)i);
        ck_assert_ptr_eq(f, i < 18 || i > BOUND + 9 ? NULL : &e[i]);
        if (f)
            bfs_bc_unlink(c, f);
    }
    ck_assert_ptr_null(bfs_bc_entries(c));
    bfs_bc_destroy(c);
}
END_TEST

/* The room for pooled buffers counts the entries as they come, not as of the last pass:
 * entries that finish while nothing needs to go make no pass (quiet_files), and with the
 * pass's count the pool kept buffers beyond the budget (room: the whole budget, stale). */
START_TEST(room_counts_entries_between_passes)
{
    enum { N = 7, SZ = 4096, BUDGET = 10 * SZ };
    bfs_bc_ops ops = {.readers = no_readers, .drop = count_drop};
    bfs_bc *c;
    ck_assert_int_eq(bfs_bc_create(&ops, BUDGET, &c), 0);
    bfs_bc_set_passed_max(c, BUDGET, 0);
    bfs_bc_mem *m = bfs_bc_memory(c);
    bfs_bc_stats st;
    bfs_bc_get_stats(c, &st);
    uint64_t passes = st.evict_passes;
    static bfs_bc_entry e[N];
    for (int i = 0; i < N; i++) {
        e[i] = (bfs_bc_entry){
            .k = (uint64_t)i, .size = SZ, .fd = -1, .state = BFS_BC_READY, .used = (uint64_t)i + 1};
        bfs_bc_insert(c, &e[i]);
        bfs_bc_evict(c, 0);
        ck_assert_uint_eq(bfs_bc_room(c), BUDGET - (uint64_t)(i + 1) * SZ);
    }
    bfs_bc_get_stats(c, &st);
    ck_assert_uint_eq(st.evict_passes, passes); /* (within every bound: no pass) */
    /* five buffers out at once (peak 5), then back: two are kept always, more only within
     * the room (3 * SZ left: a third fits, a fourth does not; with the stale room all five
     * were kept) */
    uint8_t *b[5];
    for (int i = 0; i < 5; i++)
        ck_assert_ptr_nonnull(b[i] = bfs_bc_alloc(m, SZ));
    for (int i = 0; i < 5; i++)
        bfs_bc_give_back(c, b[i], SZ);
    bfs_bc_mem_stats ms;
    bfs_bc_mem_get_stats(m, &ms);
    ck_assert_int_eq(ms.buffers, 3);
    /* the entries go: the whole budget is room again */
    for (int i = 0; i < N; i++)
        bfs_bc_unlink(c, &e[i]);
    ck_assert_uint_eq(bfs_bc_room(c), BUDGET);
    bfs_bc_destroy(c);
}
END_TEST

/* Entries are found by (epoch, k) (the newest of equals first), and an unlink anywhere
 * keeps the list in order and the rest found. */
START_TEST(find_and_unlink)
{
    enum { N = 9000 };
    bfs_bc_ops ops = {.readers = no_readers, .drop = count_drop};
    bfs_bc *c;
    ck_assert_int_eq(bfs_bc_create(&ops, UINT64_MAX, &c), 0);
    bfs_bc_entry *e = calloc(N + 1, sizeof *e);
    ck_assert_ptr_nonnull(e);
    for (int i = 0; i < N; i++) {
        e[i] = (bfs_bc_entry){.epoch = (uint64_t)i % 3, .k = (uint64_t)i / 3, .fd = -1};
        bfs_bc_insert(c, &e[i]);
    }
    e[N] = (bfs_bc_entry){.epoch = 1, .k = 5, .fd = -1}; /* a second (1, 5): found first */
    bfs_bc_insert(c, &e[N]);
    ck_assert_ptr_eq(bfs_bc_find(c, 1, 5), &e[N]);
    bfs_bc_unlink(c, &e[N]);
    ck_assert_ptr_eq(bfs_bc_find(c, 1, 5), &e[16]);
    ck_assert_ptr_null(bfs_bc_find(c, 3, 0));
    for (int i = 0; i < N; i += 2) /* every other, from the oldest (the list's tail) up */
        bfs_bc_unlink(c, &e[i]);
    for (int i = 0; i < N; i++)
        ck_assert_ptr_eq(bfs_bc_find(c, (uint64_t)i % 3, (uint64_t)i / 3), i % 2 ? &e[i] : NULL);
    int n = 0, last = N;
    for (bfs_bc_entry *b = bfs_bc_entries(c); b; b = b->next, n++) {
        int i = (int)(b - e);
        ck_assert_int_lt(i, last); /* newest first */
        ck_assert_int_eq(i % 2, 1);
        last = i;
    }
    ck_assert_int_eq(n, N / 2);
    while (bfs_bc_entries(c))
        bfs_bc_unlink(c, bfs_bc_entries(c));
    free(e);
    bfs_bc_destroy(c);
}
END_TEST

START_TEST(pool_reuses_buffers)
{
    bfs_bc_mem *m;
    ck_assert_int_eq(bfs_bc_mem_create(&m), 0);
    uint8_t *a = bfs_bc_alloc(m, 8192);
    ck_assert_ptr_nonnull(a);
    ck_assert_uint_eq((uintptr_t)a % 4096, 0);
    memset(a, 7, 8192);
    bfs_bc_free(m, a, 8192, 0); /* two are always kept, room or not */
    ck_assert_int_eq(mem_stats(m).buffers, 1);
    ck_assert_ptr_eq(bfs_bc_alloc(m, 8192), a); /* the same size: from the pool */
    uint8_t *b = bfs_bc_alloc(m, 4096);         /* another size: fresh */
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_ne(b, a);
    ck_assert_uint_eq(mem_stats(m).buffer_allocs, 2);
    ck_assert_int_eq(mem_stats(m).buffers, 2);
    bfs_bc_free(m, a, 8192, 0);
    bfs_bc_free(m, b, 4096, 0);
    bfs_bc_free(m, NULL, 4096, 0); /* nothing */
    bfs_bc_mem_destroy(m);
    bfs_bc_mem_destroy(NULL);
}
END_TEST

/* bfs_bc_use_pool: buffers are windows of one memfd, first fit, merged when they come
 * back; the file shows each window's bytes at its offset; a batch that finds no room gets
 * a buffer of its own. */
START_TEST(pool_file_windows)
{
    bfs_bc_mem *m;
    ck_assert_int_eq(bfs_bc_mem_create(&m), 0);
    ck_assert_int_eq(bfs_bc_use_pool(m, 0), -EINVAL);
    ck_assert_int_eq(bfs_bc_use_pool(m, 10 * 4096 - 100), 0); /* 10 pages */
    uint64_t size = 0, off = 0;
    int fd = bfs_bc_pool_fd(m, &size);
    ck_assert_int_ge(fd, 0);
    ck_assert_uint_eq(size, 10 * 4096);
    uint8_t *a = bfs_bc_alloc(m, 3 * 4096), *b = bfs_bc_alloc(m, 4096 + 1),
            *c = bfs_bc_alloc(m, 3 * 4096);
    ck_assert(a && b && c);
    ck_assert_int_eq(bfs_bc_window(m, a, &off), 1);
    ck_assert_uint_eq(off, 0);
    ck_assert_int_eq(bfs_bc_window(m, b, &off), 1);
    ck_assert_uint_eq(off, 3 * 4096);
    ck_assert_int_eq(bfs_bc_window(m, c, &off), 1);
    ck_assert_uint_eq(off, 5 * 4096); /* b took two pages */
    ck_assert_uint_eq(mem_stats(m).pool_used, 8 * 4096);
    /* the file holds what the buffers hold */
    memset(b, 0x5a, 4096 + 1);
    uint8_t got[4097];
    ck_assert_int_eq(pread(fd, got, sizeof got, 3 * 4096), (ssize_t)sizeof got);
    for (size_t i = 0; i < sizeof got; i++)
        ck_assert_uint_eq(got[i], 0x5a);
    /* full: a buffer of its own, not a window */
    uint8_t *d = bfs_bc_alloc(m, 3 * 4096);
    ck_assert_ptr_nonnull(d);
    ck_assert_int_eq(bfs_bc_window(m, d, &off), 0);
    ck_assert_uint_eq(mem_stats(m).pool_misses, 1);
    /* a and c back: two holes around b; b back: one hole of all 10 pages again */
    bfs_bc_free(m, a, 3 * 4096, 0);
    bfs_bc_free(m, c, 3 * 4096, 0);
    uint8_t *e = bfs_bc_alloc(m, 4 * 4096); /* fits only after c (pages 8..9 + c's 3: 5) */
    ck_assert_int_eq(bfs_bc_window(m, e, &off), 1);
    ck_assert_uint_eq(off, 5 * 4096);
    bfs_bc_free(m, e, 4 * 4096, 0);
    bfs_bc_free(m, b, 4096 + 1, 0);
    ck_assert_uint_eq(mem_stats(m).pool_used, 0);
    uint8_t *f = bfs_bc_alloc(m, 10 * 4096); /* the holes merged into one */
    ck_assert_int_eq(bfs_bc_window(m, f, &off), 1);
    ck_assert_uint_eq(off, 0);
    bfs_bc_free(m, f, 10 * 4096, 0);
    bfs_bc_free(m, d, 3 * 4096, 0);
    ck_assert_int_eq(bfs_bc_window(m, got, &off), 0);
    bfs_bc_mem_destroy(m);
}
END_TEST

/* With a pool file, a new batch takes a passed batch's window before an older passed
 * batch's buffer of its own (one it got when the pool was full): else that buffer would
 * be handed on for ever and every batch in it staged by the GPU loader. A passed batch
 * in a buffer of its own alone is evicted and its buffer freed: the new batch looks for a
 * window (NULL). */
START_TEST(take_passed_prefers_windows)
{
    enum { SZ = 4096 };
    bfs_bc_ops ops = {.readers = no_readers, .drop = count_drop};
    bfs_bc *c;
    ck_assert_int_eq(bfs_bc_create(&ops, 0, &c), 0); /* budget 0: always over it */
    bfs_bc_mem *m = bfs_bc_memory(c);
    ck_assert_int_eq(bfs_bc_use_pool(m, 2 * SZ), 0);
    uint8_t *w0 = bfs_bc_alloc(m, SZ), *w1 = bfs_bc_alloc(m, SZ), *own = bfs_bc_alloc(m, SZ);
    uint64_t off;
    ck_assert(bfs_bc_window(m, w0, &off) && bfs_bc_window(m, w1, &off));
    ck_assert(!bfs_bc_window(m, own, &off));
    bfs_bc_entry a = {.k = 0, .size = SZ, .data = own, .fd = -1, .state = BFS_BC_READY, .used = 1};
    bfs_bc_entry b = {.k = 1, .size = SZ, .data = w0, .fd = -1, .state = BFS_BC_READY, .used = 2};
    bfs_bc_insert(c, &a);
    bfs_bc_insert(c, &b);
    dropped = 0;
    ck_assert_ptr_eq(bfs_bc_take_passed(c, SZ), w0); /* the window, though a is older */
    ck_assert_int_eq(dropped, 1);
    int out = mem_stats(m).buffers;
    ck_assert_ptr_null(bfs_bc_take_passed(c, SZ)); /* a alone: evicted, its buffer freed */
    ck_assert_int_eq(dropped, 2);
    ck_assert_int_le(mem_stats(m).buffers, out);
    ck_assert_uint_eq(mem_stats(m).buffer_bytes_out, 2 * SZ); /* the two windows */
    bfs_bc_free(m, w0, SZ, 0);
    bfs_bc_free(m, w1, SZ, 0);
    bfs_bc_destroy(c);
}
END_TEST

START_TEST(pool_bounds)
{
    bfs_bc_mem *m;
    ck_assert_int_eq(bfs_bc_mem_create(&m), 0);
    enum { N = 6, SZ = 4096 };
    uint8_t *b[N];
    for (int i = 0; i < N; i++)
        ck_assert_ptr_nonnull(b[i] = bfs_bc_alloc(m, SZ));
    ck_assert_int_eq(mem_stats(m).buffers, N);
    /* no room: two kept, the rest released */
    for (int i = 0; i < 3; i++)
        bfs_bc_free(m, b[i], SZ, 0);
    ck_assert_int_eq(mem_stats(m).buffers, N - 1); /* 3 out + 2 pooled */
    /* room for three in the pool: a third is kept, the fourth is not */
    bfs_bc_free(m, b[3], SZ, 3 * SZ);
    ck_assert_int_eq(mem_stats(m).buffers, N - 1); /* 2 out + 3 pooled */
    bfs_bc_free(m, b[4], SZ, 3 * SZ);
    ck_assert_int_eq(mem_stats(m).buffers, N - 2); /* 1 out + 3 pooled */
    /* plenty of room: kept (0 out + 3 pooled < the peak of 6) */
    bfs_bc_free(m, b[5], SZ, UINT64_MAX);
    ck_assert_int_eq(mem_stats(m).buffers, 4);
    /* the budget shrank: trim down to what fits, never below two */
    bfs_bc_trim(m, SZ);
    ck_assert_int_eq(mem_stats(m).buffers, 2);
    /* taking all pooled buffers allocates nothing new */
    uint64_t allocs = mem_stats(m).buffer_allocs;
    uint8_t *c = bfs_bc_alloc(m, SZ), *d = bfs_bc_alloc(m, SZ);
    ck_assert_uint_eq(mem_stats(m).buffer_allocs, allocs);
    bfs_bc_free(m, c, SZ, 0);
    bfs_bc_free(m, d, SZ, 0);
    bfs_bc_mem_destroy(m);

    /* never more buffers than were ever out at once: A, B, C out (peak 3), A and B pooled,
     * then D of another size out: C comes back to 1 out + 2 pooled = the peak, released */
    ck_assert_int_eq(bfs_bc_mem_create(&m), 0);
    uint8_t *x = bfs_bc_alloc(m, SZ), *y = bfs_bc_alloc(m, SZ), *z = bfs_bc_alloc(m, SZ);
    bfs_bc_free(m, x, SZ, UINT64_MAX);
    bfs_bc_free(m, y, SZ, UINT64_MAX);
    uint8_t *w = bfs_bc_alloc(m, 2 * SZ);
    ck_assert_int_eq(mem_stats(m).buffers, 4);
    bfs_bc_free(m, z, SZ, UINT64_MAX);
    ck_assert_int_eq(mem_stats(m).buffers, 3); /* 1 out + 2 pooled */
    bfs_bc_free(m, w, 2 * SZ, UINT64_MAX);
    bfs_bc_mem_destroy(m);
}
END_TEST

/* A batch file holds exactly the bytes, refuses writes, and is closed by the reaper. */
static void check_file(int huge)
{
    bfs_bc_mem *m;
    ck_assert_int_eq(bfs_bc_mem_create(&m), 0);
    int on = bfs_bc_use_files(m, huge);
    ck_assert_int_eq(bfs_bc_use_files(m, 0), on); /* never back from huge pages */
    ck_assert_int_eq(mem_stats(m).huge_files, on);
    if (!huge)
        ck_assert_int_eq(on, 0);
    uint8_t src[10000];
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (uint8_t)(i * 31 + 7);
    const uint8_t *map = NULL;
    int fd = -1;
    ck_assert_int_eq(bfs_bc_to_file(m, src, sizeof src, &map, &fd), 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_mem_eq(map, src, sizeof src);
    ck_assert_int_eq(lseek(fd, 0, SEEK_END), (off_t)sizeof src);
    uint8_t back[16];
    ck_assert_int_eq(pread(fd, back, sizeof back, 0), (ssize_t)sizeof back);
    ck_assert_mem_eq(back, src, sizeof back);
    /* read-only for good: a sealed memfd refuses writes; a tmpfs file is held read-only */
    errno = 0;
    ck_assert_int_eq(pwrite(fd, "x", 1, 0), -1);
    ck_assert(errno == EPERM || errno == EBADF);
    if (on)
        ck_assert_int_eq(fcntl(fd, F_GETFL) & O_ACCMODE, O_RDONLY);
    else
        ck_assert_int_ne(fcntl(fd, F_GET_SEALS) & F_SEAL_WRITE, 0);
    bfs_bc_release(m, map, sizeof src, fd);
    bfs_bc_mem_destroy(m); /* joins the reaper: the file is closed by now */
    errno = 0;
    ck_assert_int_eq(fcntl(fd, F_GETFD), -1);
    ck_assert_int_eq(errno, EBADF);
}

START_TEST(batch_files_memfd)
{
    check_file(0);
}
END_TEST

/* huge_pages=auto's switch (bfs_bc_use_huge): memfds first, then files on the huge-page
 * tmpfs where it can be made (root); a file made before stays a sealed memfd. */
START_TEST(batch_files_switch_to_huge)
{
    bfs_bc_mem *m;
    ck_assert_int_eq(bfs_bc_mem_create(&m), 0);
    ck_assert_int_eq(bfs_bc_use_files(m, 0), 0);
    uint8_t src[5000];
    memset(src, 7, sizeof src);
    const uint8_t *map1 = NULL, *map2 = NULL;
    int fd1 = -1, fd2 = -1;
    ck_assert_int_eq(bfs_bc_to_file(m, src, sizeof src, &map1, &fd1), 0);
    int on = bfs_bc_use_huge(m);
    ck_assert_int_eq(bfs_bc_use_huge(m), on); /* tried once */
    ck_assert_int_eq(mem_stats(m).huge_files, on);
    ck_assert_int_eq(bfs_bc_to_file(m, src, sizeof src, &map2, &fd2), 0);
    ck_assert_mem_eq(map2, src, sizeof src);
    ck_assert_int_ne(fcntl(fd1, F_GET_SEALS) & F_SEAL_WRITE, 0);
    if (on) /* on the tmpfs: held read-only, no seals */
        ck_assert_int_eq(fcntl(fd2, F_GETFL) & O_ACCMODE, O_RDONLY);
    else
        ck_assert_int_ne(fcntl(fd2, F_GET_SEALS) & F_SEAL_WRITE, 0);
    bfs_bc_release(m, map1, sizeof src, fd1);
    bfs_bc_release(m, map2, sizeof src, fd2);
    bfs_bc_mem_destroy(m);
}
END_TEST

START_TEST(batch_files_huge)
{
    check_file(1); /* huge pages where allowed (root: a private tmpfs), else memfds */
}
END_TEST

static Suite *batchcache_suite(void)
{
    Suite *s = suite_create("batchcache");
    TCase *tc = tcase_create("policy");
    /* exhaustive loops: about 2 s each under TSan on this machine, so four times check's 4 s
     * default leaves room for a loaded CI host */
    tcase_set_timeout(tc, 16);
    tcase_add_test(tc, next_read_walks);
    tcase_add_test(tc, evict_one_pass_per_victim);
    tcase_add_test(tc, evict_passed_hysteresis);
    tcase_add_test(tc, find_and_unlink);
    tcase_add_test(tc, room_counts_entries_between_passes);
    tcase_add_test(tc, lex_order_of_names);
    tcase_add_test(tc, walk_next_inverts_next_read);
    tcase_add_test(tc, victim_rules);
    tcase_add_test(tc, victim_rules_files);
    suite_add_tcase(s, tc);
    tc = tcase_create("memory");
    tcase_add_test(tc, pool_reuses_buffers);
    tcase_add_test(tc, pool_bounds);
    tcase_add_test(tc, pool_file_windows);
    tcase_add_test(tc, take_passed_prefers_windows);
    tcase_add_test(tc, batch_files_memfd);
    tcase_add_test(tc, batch_files_switch_to_huge);
    tcase_add_test(tc, batch_files_huge);
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
