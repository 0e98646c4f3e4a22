/*
 * source.h — where samples come from: a .bfs file (tables read at open) or an ImageFolder
 * directory read in place (scanned at open: O(files) directory reads and stats), or a
 * mixture of them (bfs_source_open_mix: one index space over several sources).
 *
 * Neighbours: the engine (engine/engine.c) fetches sample payloads through it; the plan
 * needs only the sample count (and page boundaries for shuffle=pages).
 *
 * Thread safety: a source is shared by all workers; bfs_source_get is safe from any
 * number of threads, each passing its own scratch buffer.
 */
#ifndef BATCHFS_ENGINE_DATASET_SOURCE_H
#define BATCHFS_ENGINE_DATASET_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/dataset/bfs.h"

typedef struct bfs_source bfs_source;

/* One sample as the engine sees it. */
typedef struct bfs_item {
    const uint8_t *data; /* payload: JPEG bytes or an lz4 block (raw) */
    size_t len;
    uint32_t label;
    uint16_t width, height; /* from the table (.bfs); 0 for a folder until decoded */
    uint16_t flags;         /* BFS_KIND_*, BFS_F_*, BFS_COLOR_* (folder: 0 until parsed) */
    uint32_t raw_size;
} bfs_item;

/* A per-thread buffer for payloads that must be read (folder sources). */
typedef struct bfs_source_scratch {
    uint8_t *buf;
    size_t cap;
} bfs_source_scratch;

/*
 * bfs_source_open - open path: a regular file is read as .bfs (its tables checked against
 * their checksum: O(samples), 32 bytes each), a directory as an ImageFolder. Returns 0 or
 * the errors of bfs_open / bfs_verify_tables / bfs_folder_scan, with a message naming the
 * file in err. The caller owns *out (bfs_source_close).
 */
int bfs_source_open(const char *path, bfs_source **out, char *err, size_t errlen);

/*
 * bfs_source_open_mix - a mixture's sources paths[0..n) (1..BFS_MIX_MAX) as one source:
 * global index i is sample i - first(k) of source k, where first(k) is the sum of the
 * earlier sources' counts (bfs_source_mix_first). Every function below works on it as on
 * one source, dispatching by index; labels of source k are its own plus, with
 * label_offsets, the class counts of the sources before it (class_count is then their
 * sum, else their largest). The sources must serve the same tensors: one kind (images or
 * token sequences) and the same field table (names, kinds, dtypes, shapes; max_count is
 * the largest); each must have samples. The identity hashes the sources' identities and
 * counts in order. Returns 0, bfs_source_open's errors with "source K: " before the
 * message, or -EINVAL naming the source (1-based) that differs from source 1.
 */
#define BFS_MIX_MAX 64u
int bfs_source_open_mix(const char *const *paths, uint32_t n, int label_offsets, bfs_source **out,
                        char *err, size_t errlen);

/* bfs_source_mix_count - a mixture's source count; 0 for a plain source.
 * bfs_source_mix_locate - the source k of global index i (return value) and i's index in
 * it (*local, may be NULL); a plain source: 0 and i. bfs_source_mix_first - the first
 * global index of source k (k = count: the total); 0 for a plain source.
 * bfs_source_mix_part - source k itself (a plain source: s). */
uint32_t bfs_source_mix_count(const bfs_source *s);
uint32_t bfs_source_mix_locate(const bfs_source *s, uint64_t i, uint64_t *local);
uint64_t bfs_source_mix_first(const bfs_source *s, uint32_t k);
const bfs_source *bfs_source_mix_part(const bfs_source *s, uint32_t k);

/* bfs_source_close - release; accepts NULL. */
void bfs_source_close(bfs_source *s);

uint64_t bfs_source_count(const bfs_source *s);
uint32_t bfs_source_class_count(const bfs_source *s);

/* bfs_source_is_tokens - 1 when the samples are token sequences (a version 2 .bfs of
 * mkbatchfs --tokens: one document per sample), 0 for images. */
int bfs_source_is_tokens(const bfs_source *s);

/* bfs_source_token_count - document i's token count from the table (O(1), no payload);
 * 0 when i is out of range, its entry is invalid or it is not a token sequence. */
uint32_t bfs_source_token_count(const bfs_source *s, uint64_t i);

/* bfs_source_identity - the dataset content identity for fingerprints: the .bfs header
 * checksum, or XXH64 over the folder's sorted paths, sizes and mtimes. */
uint64_t bfs_source_identity(const bfs_source *s);

/* bfs_source_notes - what the user should know about a folder's scan (bfs_folder_notes:
 * lines ending in '\n'), or "". Valid while s is open. */
const char *bfs_source_notes(const bfs_source *s);

/* bfs_source_path - the path given to open. */
const char *bfs_source_path(const bfs_source *s);

/* bfs_source_advise - start reading the payloads of samples idx[0..n) in the background
 * (.bfs sources: posix_fadvise WILLNEED; folders: nothing). Best effort. */
void bfs_source_advise(const bfs_source *s, const uint64_t *idx, uint32_t n);

/* bfs_source_remote - 1 when s (or a source of a mixture) is a remote .bfs file (an s3://
 * or https:// URL: bfs_reader_remote), else 0. */
int bfs_source_remote(const bfs_source *s);

/*
 * bfs_source_map_payloads - from now on bfs_source_get points into a read-only mapping of
 * the .bfs (bfs_map_payloads) instead of reading into the scratch, and every call of it,
 * and every read of what it returns, must be inside a guard (guard.h). For token rows,
 * which take slices of many small documents. Returns 0 (folders: nothing to do) or a
 * negative errno (mmap, sigaction); on failure the source goes on reading with pread.
 * Not thread-safe: call before the source is shared.
 */
int bfs_source_map_payloads(bfs_source *s);

/* bfs_source_unchanged - bfs_unchanged of a .bfs source (0 for folders, whose files are
 * checked at each read). */
int bfs_source_unchanged(const bfs_source *s);

/* bfs_source_prefetch - bfs_value_prefetch of sample i's first field, for a mapped .bfs
 * source (or such a source of a mixture); a no-op for every other. */
void bfs_source_prefetch(const bfs_source *s, uint64_t i, size_t bytes);

/*
 * bfs_source_get - sample i's payload and table facts. The payload is read (pread) into
 * scratch, valid until the next call with the same scratch (or, mapped, points into the
 * mapping); for .bfs sources its checksum is verified (~10 GB/s, cheap against decoding):
 * a mapped one that fails it is BFS_E_CHANGED when the file was overwritten in place.
 * Returns 0, BFS_E_SAMPLE_INDEX, a bfs
 * table/checksum error, or for a folder: BFS_E_FILE_CHANGED (the file vanished, or its
 * size, mtime or ctime is not what the scan at open saw: its bytes are not the dataset the
 * fingerprint names) or a negative errno for a file that cannot be read.
 */
int bfs_source_get(bfs_source *s, uint64_t i, bfs_item *it, bfs_source_scratch *scratch);

/*
 * Verdicts: has sample i's file decoded whole? A crop decodes only part of a JPEG, so a
 * file damaged outside this epoch's crop would decode fine, and whether the sample is bad
 * would depend on the crop. The engine decodes a folder sample whole (checked) the first
 * time it uses it in this mount and records the verdict here, one byte per sample; from
 * then on a bad one is bad in every epoch. A .bfs has no unknown verdicts: mkbatchfs
 * decodes every JPEG whole when packing and leaves out the corrupt ones (a .bfs packed
 * by an older mkbatchfs may still hold some: re-pack it).
 * bfs_source_verdict - BFS_VERDICT_UNKNOWN (not decoded whole yet), _GOOD or _BAD; .bfs
 * sources and indices out of range: _GOOD. bfs_source_set_verdict - record one (a
 * folder's sample in range; anything else is ignored). Both are safe from any thread
 * (relaxed atomics: two threads that check the same sample at once find the same).
 */
enum { BFS_VERDICT_UNKNOWN, BFS_VERDICT_GOOD, BFS_VERDICT_BAD };
int bfs_source_verdict(const bfs_source *s, uint64_t i);
void bfs_source_set_verdict(bfs_source *s, uint64_t i, int verdict);

/*
 * Fields (bfs.h, version 3). bfs_source_field_count - fields per sample (1 for folders
 * and version 1/2 files); bfs_source_field - field f's declaration (NULL past the
 * count); bfs_source_value_count - the element count (raw_size) of field f of sample i
 * from the table, no payload read (0: no value, index out of range or a bad entry);
 * bfs_source_get_value - bfs_source_get for field f (f = 0: the same call; a value of
 * length 0 gives it->len 0), with the same errors, and BFS_E_SAMPLE_INDEX for f out of
 * range. Safe from any thread, each with its own scratch.
 */
uint32_t bfs_source_field_count(const bfs_source *s);
const bfs_field *bfs_source_field(const bfs_source *s, uint32_t f);
uint32_t bfs_source_value_count(const bfs_source *s, uint64_t i, uint32_t f);
int bfs_source_get_value(bfs_source *s, uint64_t i, uint32_t f, bfs_item *it,
                         bfs_source_scratch *scratch);

/* bfs_source_label - sample i's label without touching its payload (O(1)); 0 when i is
 * out of range or its table entry is invalid (bfs_source_get then reports the error). */
uint32_t bfs_source_label(const bfs_source *s, uint64_t i);

/* bfs_source_describe - "sample I of FILE" or the image's path, for messages. */
void bfs_source_describe(const bfs_source *s, uint64_t i, char *buf, size_t len);

/* bfs_source_scratch_free - free a scratch buffer; accepts a zeroed one. */
void bfs_source_scratch_free(bfs_source_scratch *scratch);

/*
 * bfs_source_page_first - page boundaries for shuffle=pages: fills *first with a
 * malloc'ed array of npages+1 sample indices (page p holds samples
 * [first[p], first[p+1])). For a .bfs file these are its payload pages (O(samples) scan
 * of the table, done once by the caller); folders get NULL (callers use fixed windows).
 * Returns 0 or -ENOMEM.
 */
int bfs_source_page_first(const bfs_source *s, uint64_t **first, uint64_t *npages);

#endif
