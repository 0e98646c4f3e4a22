/*
 * tokens.h — the pipelines of token datasets (docs/sequences.md): which documents make
 * each row of batch K of epoch E, and the rows themselves.
 *
 *   pack=concat  The epoch's documents (the plan's order over all documents: shuffle and
 *                seed as for images) laid end to end make one stream of L tokens, cut
 *                into W = floor(L / seq_len) windows; window g goes to shard g mod N as its
 *                row g div N; batch K of a shard is its rows [K*B, K*B + B). A row is
 *                found by binary search in the epoch's prefix sums: random access, no
 *                scan from the start. tokens I32 [B, T] (+ positions I32 [B, T]).
 *                shuffle=rows: the documents in dataset order (the same W windows every
 *                epoch), and epoch position g is window perm(g), perm the keyed
 *                permutation of [0, W) of (seed, epoch) (BFS_RNG_STREAM_ROWS).
 *   pack=pad     One document per row, the plan's batches exactly as for images (shard,
 *                batch, drop_last): lengths I64 [B], indices I64 [B], tokens I32 [B, T]
 *                (cut to T, the rest pad_id), mask U8 [B, T].
 *   pack=bucket  Documents go to the first bucket whose bound holds them (longer ones to
 *                the last, cut). Per epoch each bucket's documents keep the epoch's order;
 *                floor(n_b / N) * N of them are used, in chunks of N * R_b (R_b = batch,
 *                or batch_tokens / bound); chunk c gives shard r its rows
 *                [r * R, r * R + R). The epoch's batches are all buckets' chunks in an
 *                order keyed by (seed, epoch) — the same for every shard, so batch K of
 *                every replica comes from the same bucket (coordinated reads). Tensors as
 *                for pad, T = the bucket's bound.
 *
 * Neighbours: engine/engine.c routes its batch functions here when the source holds
 * token sequences, and keeps bad-sample policy and logging; engine/plan.h gives the
 * orders. Thread safety: like the engine, shared by all workers; per-epoch tables are
 * built once per epoch (O(documents)) and cached, reference-counted, under a mutex.
 */
#ifndef BATCHFS_ENGINE_TOKENS_H
#define BATCHFS_ENGINE_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/dataset/source.h"
#include "engine/pipeline.h"
#include "engine/safetensors.h"

typedef struct bfs_tokens bfs_tokens;

/* A worker's document buffer: the last document it read stays for the next row. */
typedef struct bfs_tokens_scratch {
    bfs_source_scratch src;
    uint64_t doc; /* doc + 1 of what data holds, 0: nothing */
    const uint8_t *data;
    uint32_t count; /* tokens */
    int u32;        /* 4 bytes per token (else 2) */
    /* the layout of the batch this worker's last row was in (lay_rows 0: none) */
    uint64_t lay_epoch, lay_k;
    uint32_t lay_rows, lay_width;
    bfs_st_tok_place lay;
} bfs_tokens_scratch;

/* What a row's bad documents became (for the engine's log and counters). */
typedef struct bfs_tokens_bad {
    int rc;       /* the first bad document's error, 0 when none */
    uint64_t doc; /* it */
    uint64_t alt; /* its substitute, UINT64_MAX when padding stood in */
    uint32_t count;
} bfs_tokens_bad;

/*
 * bfs_tokens_create - plan the token pipeline o over src (o->sequences set). Returns 0,
 * -EINVAL with a message (no batches: too few tokens or documents for the options),
 * or -ENOMEM. src stays the caller's and must outlive t.
 */
int bfs_tokens_create(bfs_source *src, const bfs_pipeline_opts *o, uint64_t fingerprint,
                      bfs_tokens **out, char *err, size_t errlen);
void bfs_tokens_destroy(bfs_tokens *t);

uint64_t bfs_tokens_batches(const bfs_tokens *t);
uint32_t bfs_tokens_batch_len(const bfs_tokens *t, uint64_t epoch, uint64_t k); /* rows */
uint64_t bfs_tokens_batch_bytes(const bfs_tokens *t, uint64_t epoch, uint64_t k);
/* bfs_tokens_mean_rows - rows per batch over an epoch (pack=bucket: its buckets' batches
 * differ, by batch_tokens=; else batch 0's) */
double bfs_tokens_mean_rows(const bfs_tokens *t);
/* bfs_tokens_batch_width - tokens per row of batch k (0 past the end) */
uint32_t bfs_tokens_batch_width(const bfs_tokens *t, uint64_t epoch, uint64_t k);
uint64_t bfs_tokens_max_batch_bytes(const bfs_tokens *t);

/* bfs_tokens_batch_begin - header (and lengths, indices) of batch k into dst; idx[j]:
 * row j's window (concat) or document (pad, bucket). Returns the row count, -ERANGE or
 * -ENOMEM. */
int bfs_tokens_batch_begin(bfs_tokens *t, uint64_t epoch, uint64_t k, uint8_t *dst, uint64_t *idx);

/* bfs_tokens_batch_indices - idx as bfs_tokens_batch_begin gives it, without the header.
 * Returns the row count, -ERANGE or -ENOMEM. */
int bfs_tokens_batch_indices(bfs_tokens *t, uint64_t epoch, uint64_t k, uint64_t *idx);

/*
 * bfs_tokens_docs - the documents that rows idx[0..n) of epoch (idx as batch_begin gives
 * it) read, in the order they read them, into docs (at most cap; a document read by
 * consecutive rows once): for fetching them ahead (a remote source). Returns the count,
 * or -ENOMEM / -ERANGE (the epoch's table).
 */
int bfs_tokens_docs(bfs_tokens *t, uint64_t epoch, const uint64_t *idx, uint32_t n, uint64_t *docs,
                    uint32_t cap);

/*
 * bfs_tokens_row - fill row j (idx from batch_begin) of batch k. A document that cannot
 * be read with a data error is, with substitute set, replaced by another (drawn from
 * its own random stream; concat repeats its tokens over the bad document's span, pad and
 * bucket put it in the row) and reported in *bad; without substitute the error is
 * returned with *bad naming the document. Resource errors and BFS_E_CHANGED are
 * returned at once. Returns 0 or an error.
 */
int bfs_tokens_row(bfs_tokens *t, bfs_tokens_scratch *s, uint64_t epoch, uint64_t k, uint32_t j,
                   uint64_t idx, uint8_t *dst, int substitute, bfs_tokens_bad *bad);

/* bfs_tokens_doc_order - document at position p of epoch's order (tests: the reference
 * implementation takes the order from here). Returns 0 or -ERANGE / -ENOMEM. */
int bfs_tokens_doc_order(bfs_tokens *t, uint64_t epoch, uint64_t p, uint64_t *doc);

/* bfs_tokens_window - pack=concat: the window (row of the stream cut by seq_len) at
 * position g of epoch's order of rows: g itself, or its keyed image with shuffle=rows.
 * Returns 0, or -ERANGE when g >= W or pack is not concat. */
int bfs_tokens_window(const bfs_tokens *t, uint64_t epoch, uint64_t g, uint64_t *window);

/* bfs_tokens_chunk - pack=bucket: the chunk (bucket-major number) batch k of epoch is.
 * Returns 0 or -ERANGE. */
int bfs_tokens_chunk(const bfs_tokens *t, uint64_t epoch, uint64_t k, uint64_t *chunk);

void bfs_tokens_scratch_free(bfs_tokens_scratch *s);

#endif
