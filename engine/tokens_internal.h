/*
 * tokens_internal.h — what tokens.c and tokens_tab.c share: the token pipeline's state
 * (struct bfs_tokens) and its per-epoch tables of documents (tokens_tab.c). Private to
 * engine/tokens*.c.
 */
#ifndef BATCHFS_ENGINE_TOKENS_INTERNAL_H
#define BATCHFS_ENGINE_TOKENS_INTERNAL_H

#include "engine/tokens.h"
#include "engine/mix.h"
#include "engine/plan.h"

#include <pthread.h>
#include <stdint.h>

#define EPOCH_TABS 4u     /* per-epoch tables kept (as the plan keeps page tables) */
#define MAX_ROWS   65536u /* rows per batch, as batch= allows */
#define TAB_PIECE  65536u /* positions per piece of an epoch table's build */

/* One epoch's table: concat: the documents in epoch order and the prefix sums of their
 * lengths; bucket: each bucket's documents in epoch order, one list after another. Built
 * in pieces of TAB_PIECE positions by every thread that needs it meanwhile (tab_get). */
typedef struct epoch_tab {
    uint64_t epoch, used;
    int valid, refs, owned; /* owned: built outside the cache (all entries were in use) */
    int building;           /* being built: threads that need it take pieces */
    int rc;                 /* the build's first error */
    uint64_t next, done;    /* pieces handed out, finished */
    uint64_t *order;
    uint64_t *prefix; /* concat: n + 1 values */
    uint64_t *sums;   /* concat, while building: each piece's tokens */
    uint64_t *by;     /* bucket, while building: the order sorted into buckets */
} epoch_tab;

struct bfs_tokens {
    bfs_source *src;
    bfs_pipeline_opts o;
    uint64_t fingerprint;
    uint64_t n;     /* documents */
    uint64_t npos;  /* positions of an epoch's document order: n, or a mixture's E */
    bfs_mix *mix;   /* concat over a mixture (source=): the epoch's documents, else NULL */
    uint32_t *len;  /* tokens per document, from the table */
    uint8_t *bk;    /* bucket: each document's bucket */
    bfs_plan *plan; /* pad: the batches; concat, bucket: the epoch order of all documents */
    uint64_t total; /* tokens */
    /* concat */
    uint64_t windows, per, batches; /* W rows in all, per shard, batches per shard */
    /* bucket */
    uint32_t rows[BFS_MAX_BUCKETS];
    uint64_t count[BFS_MAX_BUCKETS];      /* documents per bucket */
    uint64_t bstart[BFS_MAX_BUCKETS + 1]; /* bucket lists' starts in an epoch table */
    uint64_t full[BFS_MAX_BUCKETS];       /* full chunks per bucket */
    uint64_t part[BFS_MAX_BUCKETS];       /* rows of its partial chunk (0: none) */
    uint64_t cstart[BFS_MAX_BUCKETS + 1]; /* first chunk number of each bucket */
    /* the layouts of the full batches' shapes (every batch of concat and pad but maybe the
     * last; each bucket's full chunks), made once by bfs_tokens_create and read-only then:
     * a layout depends on rows and width only, and each is a dry run of the header's JSON,
     * asked for several times per batch read (its size) and per batch computed (~5% of a
     * concat mount's CPU, in snprintf) */
    uint32_t nlays;
    struct {
        uint32_t rows, width;
        bfs_st_tok_place place;
    } lays[BFS_MAX_BUCKETS];
    pthread_mutex_t lock;
    pthread_cond_t built; /* an epoch table's build ended */
    uint64_t tick;
    epoch_tab tabs[EPOCH_TABS];
};

/* tokens_tab.c. bfs_tokens_tab_get - epoch's table, built (by this thread and every
 * other that needs it meanwhile, in pieces) when not cached; NULL with *rc on failure.
 * bfs_tokens_tab_put - done with it. bfs_tokens_tab_free - an entry's memory (destroy). */
epoch_tab *bfs_tokens_tab_get(bfs_tokens *t, uint64_t epoch, int *rc);
void bfs_tokens_tab_put(bfs_tokens *t, epoch_tab *e);
void bfs_tokens_tab_free(epoch_tab *e);

#endif
