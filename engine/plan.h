/*
 * plan.h — the epoch plan: which dataset samples make batch K of epoch E of this shard.
 *
 * Three steps, each a pure function of (options, n, page table, epoch, position):
 *   1. order: a bijection from epoch positions [0, n) to dataset indices, per `shuffle`:
 *      none  — the identity;
 *      full  — a keyed Feistel permutation of [0, n) (key from seed and epoch), cycle
 *              walked: O(1) memory, O(1) per index, no table and no epoch start-up cost
 *              (REFERENCES.md, "Keyed permutation");
 *      pages — quasi-random and page-local, for datasets larger than RAM (REFERENCES.md,
 *              "FFCV quasi-random order"): the order of pages is permuted, consecutive
 *              permuted pages are grouped into windows of `window_pages` pages, and the
 *              samples inside each window are permuted. Reading a window touches only
 *              its pages, so reads stay sequential within pages and the working set is
 *              a window, not the dataset.
 *   2. shard: each of N shards gets floor(n/N) positions (the last n mod N positions of
 *      the epoch order are left out), or with pad=1 ceil(n/N): shard positions whose
 *      epoch position g is past n take position g - n (the start of the epoch order
 *      again), so the N shards together hold every sample once plus N*ceil(n/N) - n
 *      repeats, which bfs_plan_padded marks (evaluation drops them and sees each sample
 *      exactly once). full/none: shard I takes positions I, I+N, I+2N, ...
 *      (DESIGN.md "Engine"). pages: shard I takes the contiguous block [I*per, (I+1)*per):
 *      with strided positions every shard would touch every window and so read every
 *      page, defeating the page locality; with blocks each host reads about 1/N of the
 *      pages (plus at most two windows shared with its neighbours). Each epoch permutes
 *      the pages again, so a host still sees different pages every epoch.
 *   3. batch: batch K takes shard positions [K*B, min((K+1)*B, per)).
 *
 * Neighbours: mountopts/ fills bfs_plan_opts from `seed`, `shuffle`, `shard`, `batch`,
 * `drop_last`; the executor calls bfs_plan_batch_indices for every batch it computes,
 * from many threads at once; fs/ sizes directories with bfs_plan_batches and
 * bfs_plan_batch_len. Per-sample augmentation randomness is engine/rng.h, not this.
 *
 * Invariants: results never depend on threads, call order or cache state. The plan is
 * immutable after bfs_plan_create except for a small cache of per-epoch page tables
 * (shuffle=pages with an explicit page table only), guarded by a mutex inside the plan;
 * every function below is safe to call from many threads at once on one plan.
 *
 * Changing any constant or mixing step in plan.c changes every served batch (the
 * pipeline fingerprint would not notice): treat the order as a file format.
 */
#ifndef BATCHFS_ENGINE_PLAN_H
#define BATCHFS_ENGINE_PLAN_H

#include <stddef.h>
#include <stdint.h>

/* shuffle= modes (bfs_plan_opts.shuffle): BFS_SHUFFLE_FULL, _PAGES, _NONE, defined with
 * the other pipeline options in engine/pipeline.h (BFS_SHUFFLE_ROWS is engine/tokens.c's:
 * a plan never gets it). */
#include "engine/pipeline.h"

#define BFS_PLAN_BATCH_DEFAULT 256u

/* shuffle=pages: pages per window. FFCV keeps ~2 batches of pages active; 8 pages of ~75
 * JPEGs (8 MiB .bfs pages) hold 2-3 batches of 256. */
#define BFS_PLAN_WINDOW_PAGES_DEFAULT 8u

/* shuffle=pages without a page table: samples per (virtual) page. */
#define BFS_PLAN_PAGE_SAMPLES_DEFAULT 256u

/* shuffle=pages with a page table: per-epoch tables kept (readers work on one or two
 * epochs at a time; a sweep of jobs on one mount may spread over a few more). */
#define BFS_PLAN_EPOCH_CACHE 4u

/* Feistel rounds. 4 is the Luby-Rackoff minimum for a pseudo-random permutation; 8 gives
 * position and pair statistics indistinguishable from a random permutation (chi-square
 * over 10^5 keys) for every n above BFS_PERM_SMALL. */
#define BFS_PERM_ROUNDS 8u

/* n up to this are permuted by a keyed Fisher-Yates table instead: a Feistel network on
 * a 16-element domain reaches only even permutations of it, and the permutations it
 * induces on n = 5..16 by cycle walking are far from uniform whatever the round count
 * (measured: chi-square z > 100 over the 120 permutations of 5 elements). */
#define BFS_PERM_SMALL 64u

/* Pipeline options the plan depends on. Start from bfs_plan_opts_default. */
typedef struct bfs_plan_opts {
    uint64_t seed;         /* seed=N */
    int shuffle;           /* BFS_SHUFFLE_* */
    uint32_t shard_index;  /* shard=I/N: I < N */
    uint32_t shard_count;  /* N >= 1 */
    uint32_t batch;        /* samples per batch, 1..INT32_MAX */
    int drop_last;         /* 1: drop the final partial batch; 0: keep it */
    int pad;               /* 1: ceil(n/N) positions per shard, repeats marked; 0: floor */
    uint32_t window_pages; /* shuffle=pages: pages per window; 0 means the default */
    uint32_t page_samples; /* shuffle=pages without a page table: samples per page;
                            * 0 means the default */
} bfs_plan_opts;

typedef struct bfs_plan bfs_plan;

/*
 * bfs_plan_opts_default - the defaults of DESIGN.md: seed 0, shuffle=full, shard 0/1,
 * batch 256, drop_last 1, pad 0, 8 pages per window, 256 samples per page.
 */
void bfs_plan_opts_default(bfs_plan_opts *o);

/*
 * bfs_plan_create - validate the options against a dataset of n samples and build a plan.
 *
 * page_first: for shuffle=pages, the page table: page p holds dataset indices
 * [page_first[p], page_first[p+1]), an array of npages+1 non-decreasing values from 0 to
 * n (empty pages are allowed). The plan copies it (O(npages) time and memory, only in
 * this mode). NULL means pages of o->page_samples consecutive samples, and npages is then
 * ignored. Other modes ignore both.
 *
 * A plan with no batches is an error, reported here rather than as an empty directory:
 * n < shard_count, or drop_last=1 with fewer samples per shard than one batch.
 *
 * Returns 0, -EINVAL (bad option, bad page table, or no batches; a one-line message
 * naming the option and what to change is written to err, errlen bytes, may be 0) or
 * -ENOMEM. The caller owns *out; release it with bfs_plan_destroy.
 */
int bfs_plan_create(const bfs_plan_opts *o, uint64_t n, const uint64_t *page_first, uint64_t npages,
                    bfs_plan **out, char *err, size_t errlen);

/* bfs_plan_destroy - free the plan and its cached tables; accepts NULL. */
void bfs_plan_destroy(bfs_plan *p);

/* bfs_plan_samples - n, the dataset size the plan was made for. */
uint64_t bfs_plan_samples(const bfs_plan *p);

/* bfs_plan_shard_size - positions per shard per epoch: floor(n / shard_count), or
 * ceil(n / shard_count) with pad=1. */
uint64_t bfs_plan_shard_size(const bfs_plan *p);

/* bfs_plan_batches - batches per epoch of this shard: floor(per/B) with drop_last=1,
 * ceil(per/B) with drop_last=0. Never 0 (bfs_plan_create refuses such plans). */
uint64_t bfs_plan_batches(const bfs_plan *p);

/* bfs_plan_batch_len - samples in batch k: B, less for a final partial batch
 * (drop_last=0), 0 when k >= bfs_plan_batches. The same for every epoch. */
uint32_t bfs_plan_batch_len(const bfs_plan *p, uint64_t k);

/*
 * bfs_plan_padded - 1 when position shard_position of this shard repeats a sample (pad=1:
 * its epoch position is past n and wrapped to the start of the epoch order), else 0 (and
 * always 0 with pad=0 or past the shard's end). The same for every epoch. Batch k holds
 * shard positions [k*B, k*B + bfs_plan_batch_len(p, k)).
 */
int bfs_plan_padded(const bfs_plan *p, uint64_t shard_position);

/*
 * bfs_plan_batch_indices - the dataset indices of batch k of epoch `epoch`, in batch
 * order, written to out (room for bfs_plan_batch_len(p, k) values).
 * Returns the count written (>= 1), -ERANGE when k >= bfs_plan_batches, or -ENOMEM
 * (shuffle=pages with a page table only, when an epoch's table cannot be allocated).
 * Cost: O(B) Feistel evaluations for full; pages adds O(log npages) per index and, the
 * first time an epoch is seen (and when its table was evicted), O(npages) to build it.
 */
int bfs_plan_batch_indices(bfs_plan *p, uint64_t epoch, uint64_t k, uint64_t *out);

/*
 * bfs_plan_position - the dataset index at position shard_position (< shard size) of
 * this shard's order for epoch `epoch`, in *sample.
 * Returns 0, -ERANGE (shard_position >= bfs_plan_shard_size) or -ENOMEM (as above).
 */
int bfs_plan_position(bfs_plan *p, uint64_t epoch, uint64_t shard_position, uint64_t *sample);

/*
 * bfs_plan_positions - bfs_plan_position for the n positions [first, first + n) into
 * out[0..n), with one look-up of the epoch's permutation (a whole epoch's order costs
 * ~n keyed permutation steps, not n set-ups too). Returns 0, -ERANGE (past the shard's
 * end) or -ENOMEM.
 */
int bfs_plan_positions(bfs_plan *p, uint64_t epoch, uint64_t first, uint64_t n, uint64_t *out);

/*
 * bfs_plan_locate - the inverse: where dataset index `sample` goes in epoch `epoch`,
 * for any shard: *shard (< shard_count) and *shard_position (< shard size); divide the
 * position by the batch size for the batch. Either pointer may be NULL. With pad=1 a
 * sample that is also repeated at a padded position is located at its one position
 * that is not padded.
 * Returns 0, -ENOENT when the sample falls in the n mod shard_count positions left out
 * this epoch, -ERANGE when sample >= n, or -ENOMEM (as above).
 */
int bfs_plan_locate(bfs_plan *p, uint64_t epoch, uint64_t sample, uint32_t *shard,
                    uint64_t *shard_position);

/* ---- the keyed bijection itself (exposed for tests, tools and other orders) ----------- */

/* A keyed permutation of [0, n). Plain data (~200 bytes); fields are private. */
typedef struct bfs_perm {
    uint64_t n;
    uint32_t half_bits; /* the Feistel domain is 2^(2*half_bits) >= n, < 4n */
    uint64_t half_mask;
    uint64_t round_key[BFS_PERM_ROUNDS];
    uint8_t fwd[BFS_PERM_SMALL], inv[BFS_PERM_SMALL]; /* n <= BFS_PERM_SMALL: the table */
} bfs_perm;

/*
 * bfs_perm_init - a permutation of [0, n) chosen by key. n <= BFS_PERM_SMALL: a table
 * shuffled by Fisher-Yates from a splitmix64 stream of key (O(n) here, exactly unbiased
 * draws). Larger n: a balanced Feistel network over the smallest even bit width covering
 * n, BFS_PERM_ROUNDS rounds with round keys from key by splitmix64, and cycle walking back
 * into [0, n) (the domain is < 4n, so fewer than 4 network passes per call are expected).
 * Any n and key are valid (n = 0 or 1 give the identity). Cannot fail.
 */
void bfs_perm_init(bfs_perm *p, uint64_t n, uint64_t key);

/* bfs_perm_apply - the image of i (< n). Values i >= n are returned unchanged. */
uint64_t bfs_perm_apply(const bfs_perm *p, uint64_t i);

/* bfs_perm_inverse - the j with bfs_perm_apply(p, j) == v (v < n); v >= n unchanged. */
uint64_t bfs_perm_inverse(const bfs_perm *p, uint64_t v);

#endif
