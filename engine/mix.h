/*
 * mix.h — the epoch order of a mixture (source=, docs/mixing.md): which sample of which
 * source is at each position of epoch E, and which positions make batch K of a shard.
 *
 *   epoch     E positions (epoch_samples=, default the sources' sum), cut into strata of
 *             B positions (the batch size; the last may be shorter). The epoch's weights
 *             w_k (mix_schedule= or the given ones) are fixed point, q_k / 2^32.
 *   strata    stratum c of L positions holds floor(w_k L) or floor(w_k L) + 1 samples of
 *             source k: the extra ones (L minus the sum of floors) go to the sources that
 *             are furthest behind their exact share of the epoch so far, ties to the
 *             lower number. So every batch is within one sample of its proportions, and
 *             the running counts stay within about one sample of w_k times the position.
 *             The counts at stratum starts are a per-epoch table (built once, O(strata *
 *             sources); a checkpoint every G strata when there are very many).
 *   draws     within a stratum, its L slots are source 0's, then 1's, ...; shuffle=full
 *             permutes positions over the slots (keyed by seed, epoch, stratum). Source
 *             k's t-th draw of the epoch is pass t div n_k, item t mod n_k of a keyed
 *             permutation of its n_k samples for (seed, epoch, k, pass): a source smaller
 *             than its share repeats with a fresh order per pass, a larger one is
 *             subsampled without repetition. shuffle=none: sources in turn within the
 *             stratum, each read in order.
 *   shards    shard I of N serves strata I, I + N, I + 2N, ...: batch K of shard I is
 *             stratum K*N + I, so the epoch's order is the same whatever N is (elastic:
 *             shard I of N at batch K is the one mount's batch K*N + I). Every shard
 *             has floor(C/N) batches of the C strata (drop_last=1: whole strata only);
 *             pad=1: ceil(C/N), the last ones repeating strata from the epoch's start.
 *
 * Each batch costs O(its samples) plus, the first time an epoch is seen, its table.
 * Thread safety: shared by all workers; the epoch tables are built under a mutex and
 * reference counted. Like plan.h, the order is a file format: changing it changes served
 * bytes (bump BFS_OUTPUT_VERSION).
 */
#ifndef BATCHFS_ENGINE_MIX_H
#define BATCHFS_ENGINE_MIX_H

#include <stddef.h>
#include <stdint.h>

#include "engine/pipeline.h"

typedef struct bfs_mix bfs_mix;

/*
 * bfs_mix_create - the order of mixture d over sources of count[0..d->n) samples whose
 * global indices start at first[k], with o's seed, shuffle (full|none), shard, batch,
 * drop_last and epoch_samples. Returns 0, -EINVAL (shuffle=pages, or no batches: err
 * says what to change) or -ENOMEM.
 */
int bfs_mix_create(const bfs_mix_desc *d, const uint64_t *count, const uint64_t *first,
                   const bfs_pipeline_opts *o, bfs_mix **out, char *err, size_t errlen);
void bfs_mix_destroy(bfs_mix *m);

uint64_t bfs_mix_samples(const bfs_mix *m); /* E, positions per epoch (all shards) */
uint64_t bfs_mix_batches(const bfs_mix *m); /* per shard per epoch */
uint32_t bfs_mix_batch_len(const bfs_mix *m, uint64_t k);
/* bfs_mix_padded - 1 when batch k of this shard repeats a stratum (pad=1: every shard has
 * ceil(C/N) batches, those past the epoch's C strata taking strata from its start). */
int bfs_mix_padded(const bfs_mix *m, uint64_t k);

/*
 * bfs_mix_batch_indices - batch k of epoch: out[j] the global index of its j-th sample,
 * pass[j] (may be NULL) which pass over its source the draw is (0 for the first time a
 * sample is drawn in the epoch; augmentation randomness tells repeats apart by it).
 * Returns the count, -ERANGE (k past the end) or -ENOMEM.
 */
int bfs_mix_batch_indices(bfs_mix *m, uint64_t epoch, uint64_t k, uint64_t *out, uint32_t *pass);

/* bfs_mix_positions - global indices of epoch positions [first, first + n) (all shards,
 * in the epoch's order; for token pipelines, which order documents). 0, -ERANGE,
 * -ENOMEM. */
int bfs_mix_positions(bfs_mix *m, uint64_t epoch, uint64_t first, uint64_t n, uint64_t *out);

/* bfs_mix_counts - how many samples each source gives epoch `epoch` (all shards) into
 * out[0..n). 0 or -ENOMEM. */
int bfs_mix_counts(bfs_mix *m, uint64_t epoch, uint64_t *out);

/* bfs_mix_weights - the normalized weights of epoch into w[0..n) */
void bfs_mix_weights(const bfs_mix *m, uint64_t epoch, double *w);

#endif
