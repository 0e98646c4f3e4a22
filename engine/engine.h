/*
 * engine.h — the batch pipeline: source -> plan -> decode -> augment -> safetensors.
 *
 * Neighbours: engine/exec.h drives it with a worker pool (one sample = one unit of work);
 * fs/ and `batchfs --bench` use the executor. The bytes of a batch are a pure function
 * of the dataset, the data-changing options, the epoch and the batch index (the
 * determinism contract): nothing here depends on thread, order or timing.
 *
 * Thread safety: an engine is shared read-only by all workers after creation (except its
 * decoded-sample cache and bad-sample log, which synchronize themselves); each worker
 * owns a bfs_engine_worker (decoder, scratch buffers, stage timers).
 */
#ifndef BATCHFS_ENGINE_ENGINE_H
#define BATCHFS_ENGINE_ENGINE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/pipeline.h"
#include "cache/samplecache.h"

typedef struct bfs_engine bfs_engine;
typedef struct bfs_engine_worker bfs_engine_worker;

/* Per-stage time and counters (nanoseconds of worker time, summed over samples). */
/* bfs_stage_stats, the time and counts of the pipeline's stages: engine/api.h */

/*
 * bfs_engine_create - open source_path (.bfs or ImageFolder) and plan the pipeline o
 * (already through bfs_pipeline_finish). Returns 0 or the source's / plan's errors with
 * a message in err. The caller owns *out.
 */
int bfs_engine_create(const char *source_path, const bfs_pipeline_opts *o, bfs_engine **out,
                      char *err, size_t errlen);

/* bfs_engine_destroy - free; accepts NULL. Workers must be destroyed first. */
void bfs_engine_destroy(bfs_engine *e);

const bfs_pipeline_opts *bfs_engine_opts(const bfs_engine *e);
uint64_t bfs_engine_batches(const bfs_engine *e); /* batches per epoch */
/* samples (image datasets) or rows (token datasets) in batch k of epoch; 0 past the end.
 * Known from the tables alone, before the batch is computed. Only pack=bucket makes it
 * depend on the epoch (each epoch orders its buckets' batches anew). */
uint32_t bfs_engine_batch_len(const bfs_engine *e, uint64_t epoch, uint64_t k);
/* the file size of batch k of epoch (the same conditions as bfs_engine_batch_len) */
uint64_t bfs_engine_batch_bytes(const bfs_engine *e, uint64_t epoch, uint64_t k);
/* the largest file size of any batch of any epoch: what budgets are sized for */
uint64_t bfs_engine_max_batch_bytes(const bfs_engine *e);
uint64_t bfs_engine_samples(const bfs_engine *e); /* dataset samples */
uint64_t bfs_engine_fingerprint(const bfs_engine *e);
const char *bfs_engine_canonical(const bfs_engine *e); /* canonical pipeline text */
const char *bfs_engine_source_path(const bfs_engine *e);

/* bfs_engine_mix_count - a mixture's source count (source=), 0 for one SOURCE.
 * bfs_engine_mix_source - source k's path (NULL past the count), its sample count
 * (*samples) and how many of its samples the batches computed so far hold (*drawn; a
 * batch served from cache_dir is not computed here). Thread-safe. */
uint32_t bfs_engine_mix_count(const bfs_engine *e);
const char *bfs_engine_mix_source(const bfs_engine *e, uint32_t k, uint64_t *samples,
                                  uint64_t *drawn);
/* bfs_engine_mean_batch_len - samples (rows) per batch over an epoch, rounded: batch 0's
 * but for pack=bucket, whose batches differ (the autotuner's B) */
uint32_t bfs_engine_mean_batch_len(const bfs_engine *e);
/* bfs_engine_claim_slots - slots a worker computes per claim of batch k of epoch: 1 for
 * images (a slot is a decode: ~1 ms), and for token rows as many of that batch's rows as
 * hold ~64K tokens (a row is a gather of microseconds, less than what a claim costs the
 * executor; pack=bucket's batches have rows of different widths). */
uint32_t bfs_engine_claim_slots(const bfs_engine *e, uint64_t epoch, uint64_t k);
/* bfs_engine_print_notes - print bfs_source_notes to f, each line as "PROG: note: ..." */
void bfs_engine_print_notes(const bfs_engine *e, FILE *f, const char *prog);

/*
 * bfs_engine_batch_begin - start batch k of epoch: write the safetensors header, the
 * labels and indices tensors into dst (bfs_engine_batch_bytes(e, k) bytes), and the
 * dataset index of each slot into idx (bfs_engine_batch_len values). Images are then
 * filled slot by slot with bfs_engine_sample, in any order, by any workers.
 * Returns the batch length, -ERANGE (epoch >= epochs or k >= batches) or -ENOMEM.
 */
int bfs_engine_batch_begin(bfs_engine *e, uint64_t epoch, uint64_t k, uint8_t *dst, uint64_t *idx);

/*
 * bfs_engine_batch_end - after every slot of batch k is filled, before the batch is
 * served: the batch-level steps (mixup=, cutmix=: the images mixed in pairs; the
 * `targets` tensor). w: the worker doing it (its counters). Cannot fail: it allocates
 * nothing, and every label is below the targets' width (the engine refused a classes=
 * below the dataset's class count).
 */
void bfs_engine_batch_end(bfs_engine *e, bfs_engine_worker *w, uint64_t epoch, uint64_t k,
                          uint8_t *dst);

/* bfs_engine_batch_end_needed - 1 when bfs_engine_batch_end has work for every batch. */
int bfs_engine_batch_end_needed(const bfs_engine *e);

/* bfs_engine_sample's answer when the slot holds a substitute for a bad sample. */
#define BFS_ENGINE_SUBSTITUTED 1

/*
 * bfs_engine_sample - compute slot j (dataset index idx) of a batch started with
 * bfs_engine_batch_begin into dst. A bad sample is substituted (bad_sample=substitute:
 * another sample chosen deterministically from (seed, epoch, index), its label and index
 * written into the batch's tensors, or a gray image; logged once per sample) or fails
 * (bad_sample=fail: returns the error; err names the sample). Running out of memory or
 * descriptors (bfs_err_is_resource) is not the sample's fault: it fails in either mode,
 * and so does BFS_E_CHANGED (the .bfs file was overwritten or truncated in place;
 * logged once). Returns 0; BFS_ENGINE_SUBSTITUTED (the slot is filled, with a
 * substitute: the batch is servable but is not the dataset's, so it must not be shared
 * as if it were: a sample may be unreadable only for a while); BFS_E_* data errors or a
 * read's -errno (fail mode); -ENOMEM, -EMFILE, -ENFILE (err names the sample); or
 * BFS_E_CHANGED.
 */
int bfs_engine_sample(bfs_engine *e, bfs_engine_worker *w, uint64_t epoch, uint64_t k, uint32_t j,
                      uint64_t idx, uint8_t *dst, char *err, size_t errlen);

/*
 * bfs_engine_claim_end - after a worker's run of bfs_engine_sample calls on batch k (one
 * claim of the executor), before the batch can be ready: 0, or BFS_E_CHANGED (logged once,
 * err set) when the dataset changed in place since it was opened. Token documents are read
 * from a mapping and each checksum is verified once per mount (bfs_map_payloads), so bytes
 * overwritten in place after that are caught here, by the file's identity, after the reads
 * (one fstat per claim); images are checked at each read and need nothing.
 */
int bfs_engine_claim_end(bfs_engine *e, uint64_t epoch, uint64_t k, char *err, size_t errlen);

/* bfs_engine_advise - start reading the payloads of batch idx[0..n) of epoch (idx as
 * bfs_engine_batch_begin gives it) in the background (bfs_source_advise: read-ahead for a
 * cold .bfs file, a remote file's prefetch; token rows: the documents they read, for a
 * remote file only); best effort. */
void bfs_engine_advise(bfs_engine *e, uint64_t epoch, const uint64_t *idx, uint32_t n);

/* bfs_engine_advise_early - 1 when samples are best announced as soon as a batch is
 * planned, prefetched batches too (a remote source: its prefetcher fetches them ahead,
 * many requests at once, and a round trip is long), 0 when at the batch's start (a local
 * file: read-ahead of prefetched batches would queue on the disk ahead of the demanded
 * batch's reads). */
int bfs_engine_advise_early(const bfs_engine *e);

/* bfs_engine_fetch_latency - mean seconds of one request to the object store so far (the
 * process's requests: prefetches and reads, retries included), 0 for a local source or
 * before the first request: the executor fetches as many batches ahead as that spans. */
double bfs_engine_fetch_latency(const bfs_engine *e);

/* bfs_engine_batch_indices - the dataset indices of batch k of epoch (plan only, no
 * payload is read); out holds bfs_engine_batch_len values. Returns the count or -ERANGE. */
int bfs_engine_batch_indices(bfs_engine *e, uint64_t epoch, uint64_t k, uint64_t *out);

/* bfs_engine_worker_create - per-thread state. Returns 0 or -ENOMEM. */
int bfs_engine_worker_create(bfs_engine *e, bfs_engine_worker **out);
void bfs_engine_worker_destroy(bfs_engine_worker *w);

/* bfs_engine_worker_stats - this worker's counters (read racily by monitors: fine). */
void bfs_engine_worker_stats(const bfs_engine_worker *w, bfs_stage_stats *st);

/*
 * bfs_engine_sample_cache_stats - the decoded-sample cache's counters (hits, misses,
 * inserts, bytes, budget_bytes, refused_budget, index_bytes; cache/samplecache.h): all
 * zero when sample_cache_mb=0. Safe to call while workers run (racy reads).
 */
void bfs_engine_sample_cache_stats(const bfs_engine *e, bfs_samplecache_stats *st);

/* The most recent distinct bad samples (each as first logged), for /stats. */
#define BFS_ENGINE_RECENT_BAD 8
typedef struct bfs_bad_sample {
    uint64_t index;   /* dataset sample index */
    char name[256];   /* "sample I of FILE" or the image's path (cut to fit) */
    char reason[128]; /* bfs_strerror of what went wrong */
} bfs_bad_sample;

/* bfs_engine_recent_bad - up to n of the most recent distinct bad samples, newest first,
 * into out; returns how many. Thread-safe. */
int bfs_engine_recent_bad(bfs_engine *e, bfs_bad_sample *out, int n);

/* bfs_engine_encode_ns - add time spent in batch_begin (called by one thread per batch). */
uint64_t bfs_engine_encode_ns(const bfs_engine *e);

/*
 * bfs_engine_pack_resize - the engine's resampler for the packer (a bfs_pack_resize_fn,
 * engine/dataset/pack.h; engine/dataset_api.c passes it in bfs_pack_opts.resize, for
 * mkbatchfs --max-side): rgb, w x h pixels of 3 bytes in packed rows, resized whole into
 * out, nw x nh in packed rows, Pillow's bilinear filter antialiased (resize.h). *scratch:
 * the calling thread's, NULL at first, allocated here and kept between calls; a call with
 * rgb NULL frees it. Returns 0, -ENOMEM or -EINVAL (a size the resampler refuses).
 * Thread-safe.
 */
int bfs_engine_pack_resize(void **scratch, const uint8_t *rgb, int w, int h, uint8_t *out, int nw,
                           int nh);

#endif
