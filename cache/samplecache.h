/*
 * samplecache.h — the decoded-sample cache (`sample_cache_mb=N`, tf.data's `cache`):
 * whole decoded images kept in memory so later epochs skip JPEG decoding.
 *
 * Neighbours: engine.c owns one per engine (when sample_cache_mb > 0) and its workers
 * look samples up before decoding; a miss decodes the whole image with
 * bfs_decoder_decode_image straight into a new entry. engine.h exposes the counters
 * (bfs_engine_sample_cache_stats) for /stats and `batchfs --bench`.
 *
 * An entry is the whole image as packed RGB8 at one IDCT scale (1, 2, 4 or 8), keyed by
 * (dataset sample index, scale): the crop of every epoch is cut from it, and its pixels
 * are those the crop-aware decoder returns for any region of the same image at the same
 * scale, so cached and uncached runs give the same bytes (the determinism contract;
 * tests/check_samplecache.c). A smaller scale is not derived from a larger one: libjpeg's
 * scaled IDCT is not a box filter of the 1/1 pixels, so that would change bytes.
 *
 * Entries are inserted while the byte budget allows and never evicted: epochs visit every
 * sample once in a fresh random order, so recency predicts nothing (an LRU would only
 * churn: with a cache smaller than the dataset it would evict each entry before its next
 * use). What fits stays; the rest is decoded every epoch as without a cache.
 *
 * No compression: lz4 on the decoded pixels of real photographs measured 1.02x (500 of the
 * bench corpus's images; docs/engine.md), so it would cost decompression time for no room.
 *
 * Thread safety: every function may be called concurrently. The index is one atomic
 * pointer per sample heading a short list (one node per scale seen), published by
 * compare-and-swap; entries are immutable once published and live until destroy, so
 * lookups take no lock. The budget is a compare-and-swap counter that never exceeds it.
 */
#ifndef BATCHFS_CACHE_SAMPLECACHE_H
#define BATCHFS_CACHE_SAMPLECACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct bfs_samplecache bfs_samplecache;
typedef struct bfs_samplecache_entry bfs_samplecache_entry;

/* One cached image: packed RGB8 of the whole image scaled by 1/scale. */
typedef struct bfs_samplecache_image {
    const uint8_t *rgb; /* owned by the cache; valid until bfs_samplecache_destroy */
    size_t stride;      /* 3 * w */
    int w, h;           /* ceil(width / scale) x ceil(height / scale) */
    int scale;          /* 1, 2, 4 or 8 */
} bfs_samplecache_image;

/* Counters (read racily while workers run: each is exact, their sum may lag). */
typedef struct bfs_samplecache_stats {
    uint64_t hits;           /* lookups that found the (sample, scale) */
    uint64_t misses;         /* lookups that did not */
    uint64_t inserts;        /* entries published (= entries held) */
    uint64_t refused_budget; /* misses not inserted: the entry would exceed the budget */
    uint64_t bytes;          /* held or reserved by entries (pixels + entry headers) */
    uint64_t budget_bytes;   /* sample_cache_mb in bytes; bytes <= budget_bytes always */
    uint64_t index_bytes;    /* the per-sample index (8 bytes a sample), outside the budget */
} bfs_samplecache_stats;

/* bfs_samplecache_stats_json - s as the JSON object `/stats` and `--bench --json` print
 * ({"hits": N, "misses": N, "inserts": N, "refused_budget": N, "bytes": N,
 * "budget_bytes": N}) into buf (len bytes, NUL-terminated, truncated if too small). */
void bfs_samplecache_stats_json(const bfs_samplecache_stats *s, char *buf, size_t len);

/*
 * bfs_samplecache_create - an empty cache for samples 0..nsamples-1 holding at most
 * budget_bytes of entries. The index (8 bytes a sample) is allocated now, outside the
 * budget. Returns 0, -EINVAL (budget_bytes 0) or -ENOMEM. The caller owns *out.
 */
int bfs_samplecache_create(uint64_t nsamples, uint64_t budget_bytes, bfs_samplecache **out);

/* bfs_samplecache_destroy - free every entry and the cache; accepts NULL. No call may be
 * in flight, and every image handed out becomes invalid. */
void bfs_samplecache_destroy(bfs_samplecache *c);

/*
 * bfs_samplecache_lookup - find sample idx at scale. Counts a hit or a miss.
 * Returns 0 with *out filled (valid until destroy), -ENOENT (not cached) or -ERANGE
 * (idx >= nsamples: not counted).
 */
int bfs_samplecache_lookup(bfs_samplecache *c, uint64_t idx, int scale, bfs_samplecache_image *out);

/*
 * bfs_samplecache_reserve - reserve room for a w x h entry of sample idx at scale and
 * allocate it; fill *pixels (3 * w bytes per row, h rows) then call
 * bfs_samplecache_publish, or bfs_samplecache_abandon to give the room back.
 * Returns 0; -ENOSPC (it would exceed the budget: counted in refused_budget, nothing
 * allocated); -ERANGE (idx >= nsamples); -EINVAL (w, h or scale out of range); -ENOMEM.
 */
int bfs_samplecache_reserve(bfs_samplecache *c, uint64_t idx, int scale, int w, int h,
                            bfs_samplecache_entry **out, uint8_t **pixels);

/*
 * bfs_samplecache_publish - make a filled entry visible to lookups. If another thread
 * published the same (sample, scale) first, en is freed (its room given back) and the
 * earlier entry is described instead: both hold the same pixels. Either way *out is valid
 * until destroy. Never fails.
 */
void bfs_samplecache_publish(bfs_samplecache *c, bfs_samplecache_entry *en,
                             bfs_samplecache_image *out);

/* bfs_samplecache_abandon - free an unpublished entry (its fill failed: corrupt data) and
 * give its room back; accepts NULL. */
void bfs_samplecache_abandon(bfs_samplecache *c, bfs_samplecache_entry *en);

/* bfs_samplecache_get_stats - the counters now; a NULL cache gives all zeros. */
void bfs_samplecache_get_stats(const bfs_samplecache *c, bfs_samplecache_stats *st);

#endif
