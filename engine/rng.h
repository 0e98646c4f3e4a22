/*
 * rng.h — counter-based random numbers for per-sample randomness (crop box, flip, ...).
 *
 * The generator is Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers:
 * as easy as 1, 2, 3", SC'11; the same function as Random123, cuRAND, numpy's Philox and
 * JAX), implemented from the paper and checked against Random123's known-answer vectors
 * (tests/check_plan.c). A block is a pure function of a 128-bit counter and a 64-bit key,
 * so a sample's random stream needs no shared state and is derived from
 * (seed, epoch, sample index, stream) only — the determinism contract of DESIGN.md.
 *
 * Neighbours: the augment kernels draw from it (one bfs_rng per sample and use); the
 * epoch plan (engine/plan.c) uses its own keyed Feistel bijection, not this generator.
 *
 * Invariants: no global state; the same inputs give the same outputs on every machine,
 * thread and build: integer arithmetic, then for doubles an exact scaling by 2^-53 and,
 * in bfs_rng_uniform_range, two correctly rounded IEEE-754 operations (never fused).
 * A bfs_rng is a small caller-owned value: make one per thread/use, never share one
 * between threads without a lock.
 *
 * Layout of the Philox input (stable; changing it changes every augmentation):
 *   key     = 64-bit hash of (seed, epoch), split into key[0] (low), key[1] (high);
 *   counter = { block, stream, sample_index low 32, sample_index high 32 },
 * where block counts the 4-word blocks drawn so far. One (seed, epoch, sample, stream)
 * yields 2^32 blocks (2^34 words) before its stream repeats.
 */
#ifndef BATCHFS_ENGINE_RNG_H
#define BATCHFS_ENGINE_RNG_H

#include <stdint.h>

/* Random stream identifiers: each independent use of a sample's randomness takes one, so
 * adding a draw to one use never shifts the values another use sees. */
enum {
    BFS_RNG_STREAM_CROP = 0,       /* RandomResizedCrop box */
    BFS_RNG_STREAM_FLIP = 1,       /* horizontal flip */
    BFS_RNG_STREAM_SUBSTITUTE = 7, /* choice of a substitute for a bad sample */
    BFS_RNG_STREAM_BUCKETS = 8,    /* pack=bucket: the epoch's order of bucket batches
                                    * (sample index 0: one stream per epoch) */
    BFS_RNG_STREAM_ROWS = 9,       /* shuffle=rows: the epoch's order of concat rows
                                    * (sample index 0: one stream per epoch) */
    BFS_RNG_STREAM_MIX_SLOTS = 12, /* mixtures: a stratum's positions over its slots
                                    * (sample index: the stratum) */
    BFS_RNG_STREAM_MIX_DRAWS = 13, /* mixtures: a source's order in one pass (sample
                                    * index: source << 40 | pass) */
    BFS_RNG_STREAM_JITTER = 14,    /* color_jitter=: the order of its four ops, factors */
    BFS_RNG_STREAM_GRAYSCALE = 15, /* grayscale_p= */
    BFS_RNG_STREAM_POLICY = 16,    /* randaugment=, trivialaugment=, autoaugment= */
    BFS_RNG_STREAM_ERASE = 17,     /* erasing=: whether, the box, its values */
    BFS_RNG_STREAM_MIXUP = 18,     /* mixup=, cutmix=: a batch's draws (sample index: the
                                    * batch's number in the unsharded epoch) */
    /* new uses append here; never renumber (it would change every served batch) */
};

/* Generator state: plain data, caller-owned, copyable. Fields are private. */
typedef struct bfs_rng {
    uint32_t key[2];
    uint32_t ctr[4]; /* ctr[0] = next block number */
    uint32_t buf[4]; /* the current block's output */
    uint32_t avail;  /* unread words left in buf (read from buf[4 - avail]) */
} bfs_rng;

/*
 * bfs_philox4x32_10 - the raw Philox4x32-10 block function: out = Philox(ctr, key).
 * Word order as in Random123 (ctr[0] and key[0] first). out may alias ctr.
 */
void bfs_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/*
 * bfs_rng_init - start the random stream of one use of one sample.
 * seed: the pipeline seed (0 is a fine seed: it is mixed with a constant before use);
 * epoch: the epoch number; sample_index: the dataset index of the sample;
 * stream: separates independent uses of the same sample (BFS_RNG_STREAM_*).
 * Cannot fail. Two generators with equal arguments produce equal sequences.
 */
void bfs_rng_init(bfs_rng *r, uint64_t seed, uint64_t epoch, uint64_t sample_index,
                  uint32_t stream);

/* bfs_rng_u32 - the next 32 uniformly distributed bits. */
uint32_t bfs_rng_u32(bfs_rng *r);

/* bfs_rng_u64 - the next 64 bits: two words, the first drawn is the high half. */
uint64_t bfs_rng_u64(bfs_rng *r);

/*
 * bfs_rng_uniform - a double uniformly distributed in [0, 1) on the grid k * 2^-53
 * (the top 53 bits of bfs_rng_u64). Never returns 1.0.
 */
double bfs_rng_uniform(bfs_rng *r);

/*
 * bfs_rng_uniform_range - a double uniform in [a, b): a + (b - a) * bfs_rng_uniform(r),
 * clamped to the largest double below b when rounding would reach b. Returns a when
 * a >= b (and still consumes one draw, so later draws do not depend on a and b).
 * a and b must be finite.
 */
double bfs_rng_uniform_range(bfs_rng *r, double a, double b);

/*
 * bfs_rng_int - an integer uniform in [lo, hi], both inclusive, without modulo bias
 * (rejection sampling: 32-bit draws when the range fits in 32 bits, else 64-bit draws;
 * the expected number of draws is below 2). Returns lo when lo >= hi (one draw consumed).
 * Any lo <= hi is valid, including INT64_MIN..INT64_MAX.
 */
int64_t bfs_rng_int(bfs_rng *r, int64_t lo, int64_t hi);

#define BFS_SUBSTITUTE_TRIES 8

/*
 * bfs_substitutes - the samples that may stand in for bad sample `bad` of n in epoch, in
 * the order to try them: drawn from bad's own stream (BFS_RNG_STREAM_SUBSTITUTE), so the
 * choice is the same whoever computes the batch, and never bad itself. Fills out[] and
 * returns how many: BFS_SUBSTITUTE_TRIES, or 0 when n < 2. Images and token documents
 * both take their substitutes from here (a change changes served batches).
 */
int bfs_substitutes(uint64_t seed, uint64_t epoch, uint64_t bad, uint64_t n,
                    uint64_t out[BFS_SUBSTITUTE_TRIES]);

#endif
