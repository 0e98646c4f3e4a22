/*
 * bfs.h — the .bfs dataset file: reader and writer.
 *
 * Neighbours: mkbatchfs (engine/dataset/pack.c) writes it; the engine's sources read it for
 * planning (sample table only) and decoding (payloads). docs/format.md specifies every
 * byte; the constants below are that specification.
 *
 * Invariants of the reader: bfs_open validates the header and the placement of every
 * region against the file size, and nothing per sample, so it costs the same for ten
 * samples as for ten million. Each sample entry is range-checked when it is read
 * (bfs_sample), so a corrupt table can give an error but never an out-of-bounds access.
 * Payload checksums (per page and per sample) are verified on demand.
 *
 * A file reader copies the header and tables into memory at open (32 bytes per sample)
 * and reads payloads with pread, so a dataset overwritten or truncated while open gives
 * BFS_E_CHANGED (or a checksum error), never SIGBUS; a file replaced by a rename keeps
 * serving the old inode's bytes, which are still the dataset opened. Pointers the reader
 * returns stay valid until bfs_close. A reader is safe to use from many threads at once.
 */
#ifndef BATCHFS_ENGINE_DATASET_BFS_H
#define BATCHFS_ENGINE_DATASET_BFS_H

#include <stddef.h>
#include <stdint.h>

#define BFS_MAGIC                                                                                  \
    "\x89"                                                                                         \
    "BFS\r\n\x1a\n"              /* PNG-style: catches text-mode mangling */
#define BFS_VERSION           2u /* the newest version read and written */
#define BFS_VERSION_MIN       1u /* image datasets are written as version 1, as before */
#define BFS_HEADER_SIZE       128u
#define BFS_SAMPLE_RECORD     32u
#define BFS_HEAP_ALIGN        4096u      /* heap starts here: O_DIRECT / page aligned */
#define BFS_PAGE_SIZE_DEFAULT (8u << 20) /* 8 MiB: large sequential reads, ~0.6% padding */
#define BFS_PAGE_SIZE_MIN     4096u
#define BFS_PAGE_SIZE_MAX     (1u << 30)
#define BFS_MAX_CLASSES       (1u << 24)
#define BFS_MAX_CLASS_NAME    4096u

/* Sample flags (bfs_sample.flags). */
#define BFS_KIND_MASK      0x0003u
#define BFS_KIND_JPEG      0x0000u /* payload: JPEG bytes */
#define BFS_KIND_RAW       0x0001u /* payload: lz4 block of width*height*3 RGB bytes */
#define BFS_KIND_TOKENS    0x0002u /* payload: raw_size token ids, little-endian (version 2) */
#define BFS_F_PROGRESSIVE  0x0004u
#define BFS_COLOR_MASK     0x0018u
#define BFS_COLOR_YCC      0x0000u /* 3 components (YCbCr, or RGB when Adobe says so) */
#define BFS_COLOR_GRAY     0x0008u
#define BFS_COLOR_CMYK     0x0010u /* CMYK or YCCK */
#define BFS_F_ODD_SAMPLING 0x0020u /* not 4:4:4/4:2:2/4:2:0/4:4:0: full-decode fallback */
#define BFS_F_ARITHMETIC   0x0040u
#define BFS_SAMP_H_SHIFT   8       /* bits 8-9: luma horizontal sampling factor - 1 */
#define BFS_SAMP_V_SHIFT   10      /* bits 10-11: luma vertical sampling factor - 1 */
#define BFS_F_TOKENS_U32   0x1000u /* tokens: 4 bytes each (else 2) */
#define BFS_FLAGS_KNOWN    0x1fffu

/* Dataset flags (bfs_info.flags). */
#define BFS_DS_HAS_JPEG   0x1u
#define BFS_DS_HAS_RAW    0x2u
#define BFS_DS_HAS_TOKENS 0x4u /* token sequences (version 2); never with images */

/* Verification requests for bfs_sample_data. */
#define BFS_VERIFY_NONE   0u
#define BFS_VERIFY_SAMPLE 1u /* hash the sample's payload (cheap: ~10 GB/s) */
#define BFS_VERIFY_PAGES  2u /* verify the page(s) holding it, once per page per reader */

/* Header fields, decoded. */
typedef struct bfs_info {
    uint32_t version;
    uint64_t sample_count;
    uint32_t class_count;
    uint32_t page_size;
    uint64_t page_count;
    uint64_t heap_offset, heap_size;
    uint64_t sample_table_offset;
    uint64_t class_table_offset, class_table_size;
    uint64_t page_table_offset;
    uint64_t file_size;
    uint64_t tables_checksum;
    uint32_t flags;
    uint64_t header_checksum; /* identity of the dataset content (used by fingerprints) */
} bfs_info;

/* One sample table entry, decoded and range-checked. */
typedef struct bfs_sample {
    uint64_t offset; /* payload offset inside the heap */
    uint32_t length; /* payload bytes */
    uint32_t label;  /* class index, < class_count */
    uint16_t width, height;
    uint16_t flags;    /* BFS_KIND_*, BFS_F_*, BFS_COLOR_* */
    uint32_t checksum; /* low 32 bits of XXH64(payload, seed 0) */
    uint32_t raw_size; /* RAW: decoded bytes (width*height*3); JPEG: 0; TOKENS: token count */
} bfs_sample;

typedef struct bfs_reader bfs_reader;

/*
 * bfs_open - open a .bfs file (a regular file only, opened without blocking: see
 * bfs_open_regular), validating its header and layout, and copy its tables into memory
 * (O(tables): one sequential read). On failure returns BFS_E_MAGIC, BFS_E_VERSION,
 * BFS_E_HEADER_CHECKSUM, BFS_E_TRUNCATED, BFS_E_LAYOUT, BFS_E_COUNT, BFS_E_NOT_REGULAR
 * or a negative errno, and writes a one-line explanation
 * naming the file and the bad field into err (errlen bytes, may be 0).
 * The caller owns *out; release it with bfs_close.
 */
int bfs_open(const char *path, bfs_reader **out, char *err, size_t errlen);

/*
 * bfs_open_mem - the same validation over a caller-owned memory image (tests, fuzzing).
 * The memory must outlive the reader.
 */
int bfs_open_mem(const void *data, size_t len, bfs_reader **out, char *err, size_t errlen);

/* bfs_close - close and free; accepts NULL. */
void bfs_close(bfs_reader *r);

/* bfs_get_info - the decoded header; valid until bfs_close. */
const bfs_info *bfs_get_info(const bfs_reader *r);

/*
 * bfs_get_sample - decode and check sample i's table entry (O(1), no payload access).
 * Returns 0, BFS_E_SAMPLE_INDEX (i out of range), BFS_E_SAMPLE_RANGE (payload outside
 * the heap, unknown flags, bad raw size; a token sequence whose length is not its count
 * times the token size, or that has a width, height or image flags, or in a version 1
 * file) or BFS_E_LABEL (label >= class count).
 */
int bfs_get_sample(const bfs_reader *r, uint64_t i, bfs_sample *s);

/*
 * bfs_sample_data - pointer to sample i's payload inside a memory image (bfs_open_mem)
 * or a file reader's mapping (bfs_map_payloads; the checksum is read there too, so call
 * it inside a guard). verify: BFS_VERIFY_* bits; through a mapping BFS_VERIFY_SAMPLE
 * hashes a sample the first time only (bfs_map_payloads). Returns bfs_get_sample's errors,
 * BFS_E_SAMPLE_CHECKSUM, BFS_E_PAGE_CHECKSUM, or -ENOTSUP for a file reader that is not
 * mapped (use bfs_read_sample). *data stays valid until bfs_close. s may be NULL.
 */
int bfs_sample_data(bfs_reader *r, uint64_t i, unsigned verify, bfs_sample *s, const uint8_t **data,
                    size_t *len);

/*
 * bfs_read_sample - copy sample i's payload into buf (cap bytes) with pread (from memory
 * for bfs_open_mem readers), verifying its checksum when verify has BFS_VERIFY_SAMPLE.
 * Payload pages never count in the process's resident memory. After the read the file's
 * identity (inode, size, mtime, ctime) is compared with the one opened: a file overwritten or
 * truncated in place gives BFS_E_CHANGED. Returns 0, bfs_get_sample's errors, -ENOSPC
 * (cap < length; s->length says how much), BFS_E_SAMPLE_CHECKSUM, BFS_E_CHANGED, or a
 * negative errno from pread/fstat. s must not be NULL.
 */
int bfs_read_sample(const bfs_reader *r, uint64_t i, unsigned verify, bfs_sample *s, uint8_t *buf,
                    size_t cap);

/*
 * bfs_map_payloads - map a file reader's whole file read-only (MAP_SHARED) so that
 * bfs_sample_data works on it as on a memory image: no copy and no system call per sample.
 * For readers that take slices of many small samples (a token row: a pread and an fstat
 * per document were a third of a concat mount's CPU). Every read of the mapping must be
 * inside a guard (guard.h): past the end of a file truncated in place it raises SIGBUS.
 * The pages read count in the process's resident memory (page cache: shared, clean,
 * reclaimable). From then on bfs_sample_data verifies each sample's checksum once and
 * remembers it for the reader's life (a bit per sample; never forgotten): the mapping's
 * bytes change only with the file, in place, which bfs_unchanged tells, so callers call it
 * after their reads (a token batch: after each worker's rows) and fail what they read
 * once it reports a change. Returns
 * 0 (also for memory images, empty files, or when already mapped) or mmap's negative
 * errno. Not thread-safe: call before the reader is shared.
 */
int bfs_map_payloads(bfs_reader *r);

/* bfs_unchanged - 0 while the open file is the one opened (inode, size, mtime and ctime:
 * a write that restores size and mtime still sets the ctime; always for
 * memory images), BFS_E_CHANGED once it was overwritten or truncated in place, or fstat's
 * negative errno. One fstat: mapped readers call it where pread readers check each read. */
int bfs_unchanged(const bfs_reader *r);

/*
 * bfs_advise_samples - tell the kernel the payloads of samples idx[0..n) will be read soon
 * (posix_fadvise WILLNEED: asynchronous read-ahead, so a first epoch from a cold disk
 * overlaps I/O with decoding). Invalid indices are skipped; best effort, no errors.
 */
void bfs_advise_samples(const bfs_reader *r, const uint64_t *idx, uint32_t n);

/*
 * bfs_verify_page - check payload page p against the page table. Successful checks are
 * remembered, so each page is hashed at most once per reader (thread-safe).
 * File readers read the page with pread (1 MiB at a time). Returns 0,
 * BFS_E_PAGE_CHECKSUM, BFS_E_SAMPLE_INDEX if p >= page_count, or a read error
 * (BFS_E_CHANGED, -EIO, -ENOMEM).
 */
int bfs_verify_page(bfs_reader *r, uint64_t p);

/* bfs_verify_tables - check the sample, class and page tables against tables_checksum.
 * O(samples). Returns 0 or BFS_E_TABLE_CHECKSUM. */
int bfs_verify_tables(const bfs_reader *r);

/*
 * bfs_class_name - class c's name (NUL-terminated, inside the mapping).
 * Returns 0, BFS_E_SAMPLE_INDEX (c out of range) or BFS_E_CLASS_NAME (corrupt entry).
 */
int bfs_class_name(const bfs_reader *r, uint32_t c, const char **name, size_t *len);

/* bfs_page_range - the heap byte range [*begin, *end) of page p (for messages). */
void bfs_page_range(const bfs_reader *r, uint64_t p, uint64_t *begin, uint64_t *end);

/* ---- writer ---------------------------------------------------------------------- */

typedef struct bfs_writer bfs_writer;

/* What the writer needs to know of one sample besides its payload. */
typedef struct bfs_sample_in {
    uint32_t label;
    uint16_t width, height;
    uint16_t flags;
    uint32_t raw_size;
} bfs_sample_in;

/*
 * bfs_writer_create - start writing path. Data goes to a temporary file next to it
 * (path.tmp-XXXXXX, its header zeroed until bfs_writer_finish), so an interrupted write
 * never leaves a file that looks complete. page_size: a power of two in
 * [BFS_PAGE_SIZE_MIN, BFS_PAGE_SIZE_MAX], or 0 for the default.
 * Returns 0, -EINVAL (bad page size) or a negative errno (message in err).
 */
int bfs_writer_create(const char *path, uint32_t page_size, bfs_writer **out, char *err,
                      size_t errlen);

/* bfs_writer_temp_path - the temporary file's path (for signal-time cleanup). */
const char *bfs_writer_temp_path(const bfs_writer *w);

/* bfs_writer_add_class - append a class name (labels are indices in call order).
 * Returns 0, -EINVAL (empty, too long, or contains NUL) or -ENOMEM. */
int bfs_writer_add_class(bfs_writer *w, const char *name);

/*
 * bfs_writer_add - append a sample. Payloads that fit in a page never straddle a page
 * boundary (the writer pads to the next page); larger ones start on a boundary.
 * A file holds images (JPEG, raw) or token sequences (BFS_KIND_TOKENS: no width or
 * height, raw_size tokens), never both; with tokens it is written as version 2.
 * Returns 0, -EINVAL (empty payload, over 4 GiB, a record that is not valid as the
 * reader checks it, or images and tokens mixed) or a negative errno from write.
 */
int bfs_writer_add(bfs_writer *w, const bfs_sample_in *s, const void *payload, size_t len);

/*
 * bfs_writer_add_hashed - bfs_writer_add with the payload's XXH64 (seed 0) already
 * computed by the caller (mkbatchfs hashes in its parallel workers, keeping the single
 * writer thread to the work only it can do). checksum must be bfs_xxh64(payload, len, 0).
 */
int bfs_writer_add_hashed(bfs_writer *w, const bfs_sample_in *s, const void *payload, size_t len,
                          uint64_t checksum);

/*
 * bfs_writer_finish - write the tables and the header, fsync (if do_fsync), rename the
 * temporary file to its final path, and free w (also on failure, after removing the
 * temporary file). Labels must be < the number of classes added.
 * Returns 0, BFS_E_EMPTY (no samples or no classes), BFS_E_LABEL or a negative errno.
 */
int bfs_writer_finish(bfs_writer *w, int do_fsync, char *err, size_t errlen);

/* bfs_writer_abort - remove the temporary file and free w; accepts NULL. */
void bfs_writer_abort(bfs_writer *w);

#endif
