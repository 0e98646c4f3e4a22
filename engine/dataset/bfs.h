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
#define BFS_VERSION           3u /* the newest version read and written */
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
#define BFS_KIND_CODEC     0x0003u /* payload: PNG or WebP bytes (BFS_F_WEBP) (version 3) */
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
#define BFS_F_WEBP         0x2000u /* BFS_KIND_CODEC: WebP (else PNG) */
#define BFS_FLAGS_KNOWN    0x3fffu

/* Dataset flags (bfs_info.flags). */
#define BFS_DS_HAS_JPEG   0x1u
#define BFS_DS_HAS_RAW    0x2u
#define BFS_DS_HAS_TOKENS 0x4u /* token sequences (version 2); never with images */
#define BFS_DS_HAS_CODEC  0x8u /* some image is PNG or WebP (version 3) */

/*
 * Fields (version 3): a sample is a record of named fields, declared once in the field
 * table. Field 0 is the sample's primary image, stored in the 32-byte record of version 1
 * (its label slot holds the sample's label); every other field f has a record of the same
 * 32 bytes at sample_table_offset + i * sample_record_size + 32 * f, its label slot 0.
 * Image fields' records are image records; the others' have width, height and flags 0,
 * raw_size = the value's element count and length = raw_size * the dtype's size (0 and 0:
 * the sample has no value, or an empty one). Versions 1 and 2 read as one field: "images"
 * (BFS_FIELD_IMAGE) or "tokens" (BFS_FIELD_TOKENS).
 */
#define BFS_FIELD_MAX      64u /* fields per sample */
#define BFS_FIELD_NAME_MAX 31u /* bytes of a field name: [A-Za-z_][A-Za-z0-9_]* */
#define BFS_FIELD_DESC     64u /* bytes of one field descriptor in the field table */
#define BFS_FIELD_NONE     0xffffffffu
enum {                      /* bfs_field.kind */
       BFS_FIELD_IMAGE = 1, /* JPEG, raw, PNG or WebP: an image record */
       BFS_FIELD_TEXT,      /* UTF-8 bytes (dtype u8, variable) */
       BFS_FIELD_TOKENS,    /* token ids (u16 or u32, variable) */
       BFS_FIELD_ARRAY,     /* numbers: fixed shape, or variable rows of shape[0..rank) */
       BFS_FIELD_BOXES,     /* f32 rows of 4: x0, y0, x1, y1 in source pixels (variable) */
       BFS_FIELD_BYTES,     /* anything else (a JSON document): u8, variable */
       BFS_FIELD_KIND_END
};
enum { /* bfs_field.dtype: element types */
       BFS_FDT_U8,
       BFS_FDT_U16,
       BFS_FDT_U32,
       BFS_FDT_I32,
       BFS_FDT_I64,
       BFS_FDT_F32,
       BFS_FDT_END
};
#define BFS_FIELDF_VARIABLE 0x1u /* values differ in length: rows of shape[0..rank) */
#define BFS_FIELDF_OPTIONAL 0x2u /* a sample may lack it (its record is then all zero) */

/* One field descriptor (64 bytes in the field table; docs/format.md). */
typedef struct bfs_field {
    char name[BFS_FIELD_NAME_MAX + 1]; /* NUL-terminated */
    uint8_t kind;                      /* BFS_FIELD_* */
    uint8_t dtype;                     /* BFS_FDT_* (images: u8) */
    uint8_t flags;                     /* BFS_FIELDF_* */
    uint8_t rank;                      /* dimensions in shape: 0..3 */
    uint32_t shape[3];  /* fixed: the value's shape; variable: one row's (none: scalars) */
    uint32_t follows;   /* a per-box value (class ids): the index of the BFS_FIELD_BOXES
                           field whose rows it pairs with (equal row counts); else
                           BFS_FIELD_NONE */
    uint64_t max_count; /* the largest raw_size of any sample (images: of length): written
                           by bfs_writer_finish, so padded batch sizes are known up front */
} bfs_field;

/* bfs_fdt_size - bytes of one element of dtype (0 for an unknown one); bfs_fdt_name - its
 * name ("u8", "u16", "u32", "i32", "i64", "f32"; "?"); bfs_field_kind_name - "image",
 * "text", "tokens", "array", "boxes", "bytes" ("?"). */
unsigned bfs_fdt_size(unsigned dtype);
const char *bfs_fdt_name(unsigned dtype);
const char *bfs_field_kind_name(unsigned kind);
/* bfs_field_check - 0 when f is a valid declaration as field index idx of n (its name,
 * kind, dtype, rank and shape agree; field 0 is an image; follows names an earlier
 * boxes field), else -EINVAL with the reason in err. Names are checked unique by the
 * writer and reader. */
int bfs_field_check(const bfs_field *f, uint32_t idx, uint32_t n, char *err, size_t errlen);

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
    uint32_t sample_record_size;                   /* 32 per stored field (versions 1, 2: 32) */
    uint64_t field_table_offset, field_table_size; /* version 3; else 0 */
    uint32_t field_count;                          /* 1 in versions 1 and 2 */
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
 * path may name a remote file, an s3://, https:// or http:// URL (fetch.h): then
 * bfs_object_open's errors too, and BFS_E_FETCH for a header or tables the object store
 * did not serve. The caller owns *out; release it with bfs_close.
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

/* bfs_reader_remote - 1 when r reads a remote file (fetch.h), 0 for a local file or memory. */
int bfs_reader_remote(const bfs_reader *r);

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
 * Fields. bfs_field_count - fields per sample (1 in versions 1 and 2). bfs_get_field -
 * field f's declaration (NULL when f >= the count), valid until bfs_close.
 * bfs_get_value, bfs_read_value, bfs_value_data - bfs_get_sample, bfs_read_sample and
 * bfs_sample_data for field f of sample i (f = 0: the very same). A non-image field's
 * record is checked against its declaration (length = raw_size * dtype size, a fixed
 * shape's count, a variable one's whole rows, at most the field's max_count, a per-box
 * value's row count equal to its boxes'); a value of length 0 (no value) reads as 0
 * bytes, its data pointer NULL. Returns their errors, and BFS_E_SAMPLE_INDEX for f out of
 * range.
 */
uint32_t bfs_field_count(const bfs_reader *r);
const bfs_field *bfs_get_field(const bfs_reader *r, uint32_t f);
int bfs_get_value(const bfs_reader *r, uint64_t i, uint32_t f, bfs_sample *s);
int bfs_read_value(const bfs_reader *r, uint64_t i, uint32_t f, unsigned verify, bfs_sample *s,
                   uint8_t *buf, size_t cap);
int bfs_value_data(bfs_reader *r, uint64_t i, uint32_t f, unsigned verify, bfs_sample *s,
                   const uint8_t **data, size_t *len);

/*
 * bfs_value_prefetch - a hint for a mapped reader (bfs_value_data's), for loops that visit
 * values in an order the hardware cannot guess (a shuffled epoch's documents): bytes = 0
 * asks the CPU to bring sample i's record into its cache; bytes > 0 reads that record (ask
 * for it a step earlier) and asks for the first `bytes` of field f's value. Checks nothing
 * but bounds, reads nothing else, never faults; a no-op for an unmapped reader.
 */
void bfs_value_prefetch(const bfs_reader *r, uint64_t i, uint32_t f, size_t bytes);

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

/*
 * bfs_writer_set_fields - declare the fields of every sample (n of them, field 0 an
 * image: bfs_field_check), before the first sample; the file is then version 3 and its
 * samples are added with bfs_writer_add_record. max_count is ignored (computed). Without
 * this call a file is version 1 (JPEG and raw images), 2 (tokens), or 3 with one field
 * "images" when some image is PNG or WebP (BFS_KIND_CODEC). Returns 0 or -EINVAL (a bad
 * declaration, a name twice, samples already added: err says which) or -ENOMEM.
 */
int bfs_writer_set_fields(bfs_writer *w, const bfs_field *fields, uint32_t n, char *err,
                          size_t errlen);

/* One value of a record for bfs_writer_add_record. */
typedef struct bfs_value_in {
    const void *data; /* NULL with len 0: no value (an optional field, or an empty one) */
    size_t len;
    uint64_t checksum; /* bfs_xxh64(data, len, 0), computed by the caller (in parallel) */
    uint16_t width, height, flags; /* image fields: as bfs_sample_in; else 0 */
    uint32_t raw_size;             /* image fields: as bfs_sample_in; else the element count */
} bfs_value_in;

/*
 * bfs_writer_add_record - append a sample of the declared fields: label and v[0..n) (n =
 * the field count), each value placed in the heap as bfs_writer_add places a payload
 * (field 0 first). Returns 0, -EINVAL (no fields declared, an image value that is not a
 * valid image record, a value that does not fit its declaration, a missing required or
 * primary image value, over 4 GiB) or a negative errno from write.
 */
int bfs_writer_add_record(bfs_writer *w, uint32_t label, const bfs_value_in *v);

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
