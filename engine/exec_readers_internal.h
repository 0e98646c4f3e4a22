/*
 * exec_readers_internal.h — the executor's table of active readers (engine/exec_readers.c):
 * who reads, where each is on its walk (its stride, or the names' string order; whether it
 * crossed into a next epoch), how far ahead it is prefetched, its pace. Private to engine/:
 * exec.c embeds one table and calls it; it calls nothing of the executor (the walk model is
 * cache/walk.c's: bfs_bc_walk_next, bfs_bc_lex_next).
 *
 * Locks: none of its own. The table is guarded by the executor's x->lock: every function
 * below but bfs_exec_rt_init, bfs_exec_rt_sort and bfs_exec_rt_fetch_from is called holding it,
 * asserted through `held` in debug and sanitizer builds. The news callback (bfs_exec_rt_on_news,
 * the autotuner's) runs under it.
 */
#ifndef BATCHFS_ENGINE_EXEC_READERS_INTERNAL_H
#define BATCHFS_ENGINE_EXEC_READERS_INTERNAL_H

#include "cache/batchcache.h"
#include "engine/exec.h"

/* A reader's fetch-ahead mark (bfs_exec_follow): the last batch of its walk whose payloads
 * were fetched ahead, the read it was set at, and the steps of the walk between the two. */
typedef struct bfs_exec_rt_mark {
    uint64_t epoch, k;       /* the window's last batch */
    uint64_t at_epoch, at_k; /* the batch read when it was set */
    uint64_t steps;          /* steps of the walk from that read to the window's last */
} bfs_exec_rt_mark;

typedef struct bfs_exec_rt_reader {
    uint64_t key; /* 0: free slot */
    uint32_t id;
    uint64_t epoch, k;
    int64_t stride;
    int depth;   /* own depth, or -1: the table's prefetch */
    int crossed; /* it went on from one epoch to the next (continues()) at least once */
    int lex;     /* it walks the names' string order (a shell's glob), not a stride */
    int lex_run; /* its last steps that followed that order, in a row */
    int known;   /* its walk is known: its next batches are prefetched (bfs_exec_follow) */
    uint64_t batches;
    double asked;  /* when it asked for its last batch */
    double waited; /* how long it waited for that batch */
    double own_s, wait_s;
    int fetched;           /* it has a fetch-ahead mark... */
    bfs_exec_rt_mark mark; /* ...this one (bfs_exec_rt_fetched) */
} bfs_exec_rt_reader;

typedef struct bfs_exec_rt {
    bfs_exec_rt_reader readers[BFS_EXEC_MAX_READERS];
    uint32_t next_reader_id;
    uint64_t news;              /* bfs_exec_readers_news */
    void (*news_fn)(void *arg); /* bfs_exec_on_reader_news */
    void *news_arg;
    int prefetch;                 /* default depth per reader */
    int (*held)(const void *arg); /* whether the caller holds x->lock (NULL: not checked) */
    const void *held_arg;
} bfs_exec_rt;

/* bfs_exec_rt_init - an empty table, prefetch BFS_PREFETCH_AUTO; held (may be NULL) checks
 * the owner's lock. */
void bfs_exec_rt_init(bfs_exec_rt *t, int (*held)(const void *arg), const void *held_arg);

/*
 * bfs_exec_rt_follow - reader `key` (not 0) asked for batch k of epoch at `now` (as
 * bfs_exec_follow says, which wraps it): recorded, its walk learnt. Returns its id, and in
 * *walk (its stride, lex, crossed; position unset) and *depth how many batches of its walk
 * after (epoch, k) to prefetch: 0 while its walk is not known, else its depth, bounded by
 * cache_batches (the batches the cache's budget holds) shared by the active readers, each
 * holding one being read; in *own_s its smoothed own time per batch (between getting a
 * batch and asking for the next), 0 while its walk is not known or it has read one
 * batch. nb: batches per epoch.
 * alive may be NULL.
 */
uint32_t bfs_exec_rt_follow(bfs_exec_rt *t, uint64_t key, uint64_t epoch, uint64_t k, double now,
                            double wait_s, bfs_exec_alive_fn alive, uint64_t nb,
                            uint64_t cache_batches, bfs_bc_reader *walk, int *depth, double *own_s);

/* bfs_exec_rt_fetched - reader id's fetch-ahead mark, as bfs_exec_follow last set it: 1 and
 * *m, or 0 (none yet, or the reader is gone); bfs_exec_rt_set_fetched records it. */
int bfs_exec_rt_fetched(bfs_exec_rt *t, uint32_t id, bfs_exec_rt_mark *m);
void bfs_exec_rt_set_fetched(bfs_exec_rt *t, uint32_t id, const bfs_exec_rt_mark *m);

/*
 * bfs_exec_rt_fetch_from - which of the fetch-ahead window win[0..nwin) (each {epoch, k},
 * the batches of `walk` after a read of batch k of epoch, nb batches per epoch, ne epochs)
 * to fetch, given the reader's mark m (NULL: none): the index of the first batch not
 * fetched ahead yet, 0..nwin. *keep says whether the mark stays as it is (1: the window
 * ends before it, as when a window shrinks) or moves to the window's last (0).
 * The mark counts only for a read at or after the one it was set at, and before the mark,
 * along the walk; a read further back (the same walk read again, a resume a few batches
 * back) or elsewhere (a jump, a new walk) fetches the whole window. Pure; no lock.
 */
int bfs_exec_rt_fetch_from(const bfs_bc_reader *walk, uint64_t nb, uint64_t ne, uint64_t epoch,
                           uint64_t k, const bfs_exec_rt_mark *m, const uint64_t (*win)[2],
                           int nwin, int *keep);

/* bfs_exec_rt_waited - bfs_exec_reader_waited. */
void bfs_exec_rt_waited(bfs_exec_rt *t, uint32_t id, uint64_t epoch, uint64_t k, double wait_s);

/* bfs_exec_rt_list - forget stale readers, then the active ones into out[0..max) in table
 * order (bfs_exec_rt_sort puts them in id order, without the lock). */
int bfs_exec_rt_list(bfs_exec_rt *t, double now, bfs_exec_alive_fn alive, bfs_exec_reader *out,
                     int max);
void bfs_exec_rt_sort(bfs_exec_reader *out, int n);

/* bfs_exec_rt_walks - the active readers as the batch cache's policy takes them. */
int bfs_exec_rt_walks(const bfs_exec_rt *t, bfs_bc_reader *out);

/* Settings: a reader's own depth (< 0: the default), the default depth (< 0: unchanged),
 * the news callback; bfs_exec_rt_news - readers that appeared or whose pace became known. */
void bfs_exec_rt_set_depth(bfs_exec_rt *t, uint32_t id, int depth);
void bfs_exec_rt_set_prefetch(bfs_exec_rt *t, int depth);
int bfs_exec_rt_prefetch(const bfs_exec_rt *t);
void bfs_exec_rt_on_news(bfs_exec_rt *t, void (*fn)(void *), void *arg);
uint64_t bfs_exec_rt_news(const bfs_exec_rt *t);

#endif
