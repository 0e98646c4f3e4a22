/*
 * safetensors.h — batch files in the safetensors format: a fixed-size encoder for the
 * batches batchfs serves, and a strict, allocation-free parser for any safetensors file.
 *
 * Neighbours: the engine's batch assembly sizes and fills batch files with the encoder
 * (the FUSE layer reports bfs_st_batch_size() as st_size before a batch is computed);
 * the GPU library, the tests and anything that reads untrusted files use the parser.
 * /work/shared/DESIGN.md "Batch file format" and REFERENCES.md "safetensors" describe the
 * format; the parser follows the reference reader (the `safetensors` Rust crate, 0.8).
 *
 * File layout (little-endian):
 *   [0, 8)        N, the JSON header length (u64)
 *   [8, 8 + N)    UTF-8 JSON: {"__metadata__": {string: string}, name: {"dtype": D,
 *                 "shape": [d0, ...], "data_offsets": [begin, end]}, ...}, which may end
 *                 in spaces
 *   [8 + N, end)  the data buffer; begin/end are relative to its start; the tensors cover
 *                 it exactly, without holes or overlaps.
 *
 * Batch files (the encoder) are one such file with, in this order in the JSON:
 *   "__metadata__": {"format": "batchfs/2", "layout": "nhwc" | "nchw", "epoch": "E",
 *                    "batch": "K", "fingerprint": "<16 lowercase hex digits>", then the
 *                    extra pairs}   ("layout" disambiguates [B,3,3,3]-like shapes)
 *   "images":  U8 | F16 | BF16 | F32, [B,H,W,3] (NHWC) or [B,3,H,W] (NCHW)
 *   "labels":  I64 [B]
 *   "indices": I64 [B], the dataset index of each sample
 * and the tensor data in the order labels, indices, images, contiguous (safetensors
 * allows no holes in the data buffer):
 *   images_off  = the smallest multiple of BFS_ST_IMAGES_ALIGN (4096) that is at least
 *                 8 + the widest possible JSON + 16 * B
 *   labels_off  = images_off - 16 * B = 8 + N (the JSON is padded with spaces to end here)
 *   indices_off = images_off - 8 * B
 * so the images start on a page (mmap, O_DIRECT, DMA) and labels and indices, the I64
 * tensors, are 8-byte aligned (their natural alignment: numpy/torch.frombuffer views and
 * device copies need it) for every B, and 64-byte aligned when B is a multiple of 8 (the
 * default 256 included). 64-byte alignment of all three for every B is impossible
 * without a visible padding tensor: labels and indices are 8 * B bytes each and
 * contiguous, so one of them starts 8 * B bytes after the other. Batch files before
 * "batchfs/2" put the images first, which left labels and indices at any offset.
 * Batches of multi-field datasets carry more tensors (bfs_st_field_tensor), named after
 * the fields and listed after indices in the JSON: their data lies between the header
 * and labels, by element size, smallest first, so each is naturally aligned (labels_off
 * = images_off - 16 * B as above, and 8 + N = labels_off - their bytes), and further
 * image tensors follow the images.
 * The widest JSON is the header written with the widest possible numbers, so the layout
 * is known from the descriptor without building the header and depends only on B and the
 * extras, never on the shape, dtype, epoch, batch index or fingerprint.
 *
 * Invariants of the parser: it never reads outside [data, data + len), never allocates,
 * has no recursion (the schema bounds nesting at three levels: deeper input is rejected
 * at the first unexpected '{' or '['), and runs in O(N + T^2) for T <= 64 tensors. The
 * whole header must be valid UTF-8 JSON; it is stricter than the reference reader in
 * rejecting duplicate keys (which the reference reader resolves silently) and unknown
 * keys in a tensor entry (which it ignores); no writer we know emits either.
 * It stays hand-written while the rest of batchfs reads JSON with jansson (batchfs top,
 * WebDataset labels): jansson cannot hold a key containing "\u0000", which the reference
 * reader accepts as a tensor name; it reads -0 as 0 and caps integers at INT64_MAX, so
 * the schema checks could not see what the file says; and it allocates per value, while
 * this parser runs once per batch inside libbatchfs-gpu without allocating.
 */
#ifndef BATCHFS_ENGINE_SAFETENSORS_H
#define BATCHFS_ENGINE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define BFS_ST_IMAGES_ALIGN  4096u /* images start at a multiple: mmap / O_DIRECT / DMA */
#define BFS_ST_FORMAT        "batchfs/2"
#define BFS_ST_MAX_HEADER    100000000ull /* the reference reader's limit on N */
#define BFS_ST_MAX_TENSORS   64u
#define BFS_ST_MAX_DIMS      8u
#define BFS_ST_MAX_META      32u    /* metadata pairs the parser returns */
#define BFS_ST_POOL_SIZE     16384u /* bytes for decoded names, keys and values */
#define BFS_ST_MAX_EXTRA     8u     /* extra metadata pairs the encoder writes */
#define BFS_ST_MAX_EXTRA_LEN 1024u  /* bytes per extra key or value (UTF-8) */
/* Extras whose JSON (per pair: escaped key + escaped value + 6) totals at most this many
 * bytes cost at most one page ahead of the tensor data: the rest of the widest possible
 * JSON is 491 bytes (checked by the tests), so 8 + 491 + the budget < 4096 and images_off
 * <= 4096 + 16 * B rounded up to a multiple of 4096 (4096 for B <= 224 without extras),
 * and the header (8 + N) is under 8192 bytes. */
#define BFS_ST_EXTRA_BUDGET 3584u

/*
 * Element types: every dtype of safetensors 0.8. The first four are the image dtypes a
 * batch may use; BFS_DT_F4, F6_E2M3 and F6_E3M2 are packed sub-byte types.
 */
typedef enum bfs_dtype {
    BFS_DT_U8,
    BFS_DT_F16,
    BFS_DT_BF16,
    BFS_DT_F32,
    BFS_DT_I64,
    BFS_DT_BOOL,
    BFS_DT_I8,
    BFS_DT_U16,
    BFS_DT_I16,
    BFS_DT_U32,
    BFS_DT_I32,
    BFS_DT_U64,
    BFS_DT_F64,
    BFS_DT_C64,
    BFS_DT_F8_E4M3,
    BFS_DT_F8_E5M2,
    BFS_DT_F8_E8M0,
    BFS_DT_F8_E4M3FNUZ,
    BFS_DT_F8_E5M2FNUZ,
    BFS_DT_F4,
    BFS_DT_F6_E2M3,
    BFS_DT_F6_E3M2,
    BFS_DT_COUNT
} bfs_dtype;

/* bfs_dtype_size - bytes per element; 0 for the sub-byte types and for invalid values. */
size_t bfs_dtype_size(bfs_dtype dt);

/* bfs_dtype_bits - bits per element (4 for F4, 6 for F6_*); 0 for invalid values. */
unsigned bfs_dtype_bits(bfs_dtype dt);

/* bfs_dtype_name - the safetensors name ("U8", "BF16", "F8_E4M3", ...), a static
 * string; NULL for invalid values. */
const char *bfs_dtype_name(bfs_dtype dt);

/* bfs_dtype_from_name - the dtype called name[0, len) (exact, case-sensitive, as in
 * files). Returns 0, or -EINVAL when no dtype has that name. */
int bfs_dtype_from_name(const char *name, size_t len, bfs_dtype *out);

/* ---- encoder: batch files ---------------------------------------------------------- */

/* One extra metadata pair (both NUL-terminated UTF-8; the caller keeps ownership). */
typedef struct bfs_st_kv {
    const char *key;
    const char *value;
} bfs_st_kv;

/*
 * One more tensor of a batch (a field of a multi-field dataset, engine/engine.c): its
 * shape is [B, shape[0..ndim)). Not an image (image = 0): placed ahead of labels in the
 * data, the tensors ordered by element size, smallest first (a stable sort: equal sizes
 * keep the descriptor's order), so that, ending where the 8-byte-aligned labels begin,
 * every one of them starts at a multiple of its element size whatever B and the shapes
 * are. An image (image = 1): a second image tensor of the `images` dtype, shape and
 * layout (dtype, ndim and shape ignored), placed after `images` in descriptor order:
 * naturally aligned, but on a page boundary only when the images' bytes are a multiple
 * of 4096. In the JSON they follow indices in descriptor order.
 */
#define BFS_ST_MAX_FIELD_TENSORS (BFS_ST_MAX_TENSORS - 3u)
#define BFS_ST_NAME_MAX          63u /* bytes of a field tensor's name */
typedef struct bfs_st_field_tensor {
    const char *name; /* [A-Za-z_][A-Za-z0-9_]*, <= BFS_ST_NAME_MAX bytes, not images,
                         labels or indices, unique */
    bfs_dtype dtype;  /* a whole-byte dtype (image = 0) */
    uint32_t ndim;    /* dimensions after B: 0..BFS_ST_MAX_DIMS-1 */
    uint64_t shape[BFS_ST_MAX_DIMS - 1]; /* each >= 1 */
    int image;                           /* 1: an image tensor like `images` */
} bfs_st_field_tensor;

/* What a batch file holds. The encoder only reads it; pointers stay the caller's. */
typedef struct bfs_st_batch_desc {
    bfs_dtype dtype;        /* images: BFS_DT_U8, F16, BF16 or F32 */
    int nchw;               /* 0: [B,H,W,3]; 1: [B,3,H,W] */
    uint32_t batch;         /* B >= 1 */
    uint32_t height;        /* H >= 1 */
    uint32_t width;         /* W >= 1 */
    uint64_t epoch;         /* written as metadata "epoch" (decimal) */
    uint64_t batch_index;   /* written as metadata "batch" (decimal) */
    uint64_t fingerprint;   /* written as metadata "fingerprint" (16 lowercase hex digits) */
    const bfs_st_kv *extra; /* n_extra extra pairs, written after the four above */
    uint32_t n_extra;       /* <= BFS_ST_MAX_EXTRA */
    const bfs_st_field_tensor *fields; /* n_fields more tensors (NULL, 0: a classic batch,
                                          whose layout is exactly the three tensors') */
    uint32_t n_fields;                 /* <= BFS_ST_MAX_FIELD_TENSORS */
} bfs_st_batch_desc;

/* Where everything lies in a batch file (absolute file offsets, bytes), in file order. */
typedef struct bfs_st_layout {
    uint64_t header_size;                /* 8 + N == labels_off */
    uint64_t labels_off, labels_bytes;   /* 8-byte aligned; 64 when B % 8 == 0 */
    uint64_t indices_off, indices_bytes; /* labels_off + 8 * B */
    uint64_t images_off, images_bytes;   /* a multiple of BFS_ST_IMAGES_ALIGN */
    uint64_t sample_bytes;               /* images bytes of one sample (H*W*3*element size) */
    uint64_t file_size;                  /* the end of the last tensor */
    /* the field tensors (desc->fields[i]): absolute offset and bytes of each */
    uint64_t field_off[BFS_ST_MAX_FIELD_TENSORS], field_bytes[BFS_ST_MAX_FIELD_TENSORS];
} bfs_st_layout;

/*
 * bfs_st_batch_layout - check d and compute the layout of its batch file, without
 * building the header: O(extras), no allocation. images_off is the smallest multiple of
 * BFS_ST_IMAGES_ALIGN that holds 8 bytes, the JSON written with the widest possible
 * numbers (20-digit epoch, batch index and offsets, 10-digit dimensions, dtype "BF16")
 * and 16 * B bytes of labels and indices, which end where the images start (see the
 * file comment), and the bytes of the non-image field tensors ahead of labels
 * (bfs_st_field_tensor: widest numbers in their JSON too). Without fields it depends
 * only on B and the extras, never on H, W, the dtype, epoch, batch_index or
 * fingerprint, so batches of one size have the same header size; field tensors add
 * their names and shapes.
 * Returns 0, or -EINVAL: dtype not an image dtype, nchw not 0/1, B, H or W zero, more
 * than BFS_ST_MAX_EXTRA extras, an extra key or value NULL, over BFS_ST_MAX_EXTRA_LEN
 * bytes or not valid UTF-8, an extra key empty, equal to a reserved key (format,
 * layout, epoch, batch, fingerprint) or to another extra key; a field tensor with a bad
 * name (or one taken), dtype, ndim or a zero dimension, more than
 * BFS_ST_MAX_FIELD_TENSORS of them; -EOVERFLOW: the file size overflows 64 bits. out is
 * written only on success.
 */
int bfs_st_batch_layout(const bfs_st_batch_desc *d, bfs_st_layout *out);

/* bfs_st_batch_size - the total file size of d's batch file (the layout's file_size),
 * or 0 when bfs_st_batch_layout would fail. */
uint64_t bfs_st_batch_size(const bfs_st_batch_desc *d);

/*
 * bfs_st_write_header - write d's header (exactly layout.header_size bytes: the 8-byte
 * length, the JSON, then spaces up to labels_off) to dst. Keys in a fixed order
 * (__metadata__ with format, layout, epoch, batch, fingerprint and the extras in order,
 * as the reference writer puts __metadata__ first; then images, labels, indices, though
 * their data lies in the order labels, indices, images), numbers in plain decimal, no
 * whitespace inside the JSON; control characters, quotes and backslashes in extras are
 * escaped, other UTF-8 is written as is.
 * Returns 0, bfs_st_batch_layout's errors, or -ENOSPC when cap < header_size (nothing
 * is written then).
 */
int bfs_st_write_header(const bfs_st_batch_desc *d, uint8_t *dst, size_t cap);

/* ---- parser ------------------------------------------------------------------------- */

/* One tensor entry. name points into the bfs_st_file that holds it. */
typedef struct bfs_st_tensor {
    const char *name; /* decoded UTF-8, NUL-terminated (may contain NUL: use name_len) */
    size_t name_len;
    bfs_dtype dtype;
    uint32_t ndim; /* <= BFS_ST_MAX_DIMS; 0 is a scalar */
    uint64_t shape[BFS_ST_MAX_DIMS];
    uint64_t offset; /* absolute file offset of the first byte: data_offset + begin */
    uint64_t nbytes; /* end - begin == product(shape) * bits / 8 */
} bfs_st_tensor;

/* One metadata pair; both strings point into the bfs_st_file that holds them. */
typedef struct bfs_st_meta {
    const char *key, *value; /* decoded UTF-8, NUL-terminated */
    size_t key_len, value_len;
} bfs_st_meta;

/* ---- encoder: token batches (docs/sequences.md) -------------------------------------- */

/*
 * Batches of token datasets hold 1- and 2-dimensional integer tensors instead of images,
 * under the metadata {"format": "batchfs/2", "kind": "tokens", "pack": P, "epoch": "E",
 * "batch": "K", "fingerprint": "<16 hex digits>"}, the tensors in the JSON in data order.
 * As for images, the header is padded with spaces to the size the widest numbers would
 * need, so the layout depends only on the tensors' names, dtypes and shapes, and one
 * tensor (`aligned`: the tokens) starts at a multiple of BFS_ST_IMAGES_ALIGN; the
 * tensors before it must have sizes that keep it at its natural alignment (the caller
 * puts the I64 ones first).
 */
#define BFS_ST_TOK_MAX 4u

typedef struct bfs_st_tok_tensor {
    const char *name; /* a plain ASCII name, no quotes or backslashes */
    bfs_dtype dtype;
    uint32_t ndim; /* 1 or 2 */
    uint64_t shape[2];
} bfs_st_tok_tensor;

typedef struct bfs_st_tok_desc {
    const char *pack; /* metadata "pack" (plain ASCII) */
    uint64_t epoch, batch_index, fingerprint;
    uint32_t n; /* tensors, 1..BFS_ST_TOK_MAX, in data order */
    bfs_st_tok_tensor t[BFS_ST_TOK_MAX];
    uint32_t aligned; /* index of the tensor that starts on a BFS_ST_IMAGES_ALIGN boundary */
} bfs_st_tok_desc;

typedef struct bfs_st_tok_place {
    uint64_t header_size;                                /* 8 + N: where the first tensor starts */
    uint64_t off[BFS_ST_TOK_MAX], bytes[BFS_ST_TOK_MAX]; /* absolute file offsets */
    uint64_t file_size;
} bfs_st_tok_place;

/* bfs_st_tok_layout - check d and place its tensors. Returns 0, -EINVAL (bad desc) or
 * -EOVERFLOW. */
int bfs_st_tok_layout(const bfs_st_tok_desc *d, bfs_st_tok_place *out);

/* bfs_st_tok_write_header - write the 8 + N header bytes of d's file to dst (cap bytes).
 * Returns 0, bfs_st_tok_layout's errors, or -ENOSPC. */
int bfs_st_tok_write_header(const bfs_st_tok_desc *d, uint8_t *dst, size_t cap);

/*
 * A parsed file. Caller-allocated (about 24 KiB: prefer the heap in threads with small
 * stacks); nothing to release. Names and metadata point into its own pool, so it must
 * not be copied by value or moved (re-parse instead).
 */
typedef struct bfs_st_file {
    uint64_t header_len;  /* N */
    uint64_t data_offset; /* 8 + N */
    uint64_t data_size;   /* bytes of the data buffer: the end of the last tensor */
    uint64_t file_size;   /* data_offset + data_size */
    uint32_t n_tensors;   /* in header order */
    uint32_t n_meta;      /* in header order; 0 when there is no __metadata__ */
    bfs_st_tensor tensors[BFS_ST_MAX_TENSORS];
    bfs_st_meta meta[BFS_ST_MAX_META];
    char err[192]; /* after a failure: what and at which header byte; else "" */
    size_t pool_used;
    char pool[BFS_ST_POOL_SIZE];
} bfs_st_file;

/*
 * bfs_st_header_len - decode N from the first 8 bytes of a file and check it against
 * the 100 MB limit. Returns 0, or -EBADMSG (N > BFS_ST_MAX_HEADER, or N < 2, which
 * cannot hold "{}"). Callers that read files piecewise read 8 + *n bytes next.
 */
int bfs_st_header_len(const uint8_t *first8, uint64_t *n);

/*
 * bfs_st_parse - parse and validate a whole safetensors file held in data[0, len):
 * every check bfs_st_parse_header makes, with file_size = len. Tensor bytes are never
 * read (the format has no checksums); only their extent is checked.
 * Returns 0 or bfs_st_parse_header's errors except -ENOBUFS: a file shorter than its
 * header says is -EBADMSG here.
 */
int bfs_st_parse(const uint8_t *data, size_t len, bfs_st_file *out);

/*
 * bfs_st_parse_header - parse and validate a file of file_size bytes of which data[0,
 * len) is a prefix holding at least the 8 + N header bytes (a pread of the first 8192
 * bytes is enough for a batch file whose extras fit BFS_ST_EXTRA_BUDGET). Checks: N <=
 * 100 MB and 8 + N <= file_size; the header is one UTF-8 JSON object with only JSON
 * whitespace (space, tab, CR, LF) before or after it; strings have valid escapes (\uXXXX
 * surrogate pairs decoded to UTF-8, no lone surrogates) and no raw control characters;
 * numbers are non-negative integers in plain decimal that fit 64 bits (fractions,
 * exponents, signs and leading zeros rejected); no duplicate keys anywhere;
 * "__metadata__" is an object of string values (or null, which the reference reader also
 * accepts: no metadata); every other key is a tensor: an object with exactly "dtype" (a
 * known name), "shape" (integers) and "data_offsets" ([begin, end], begin <= end);
 * product(shape) * bits overflows nothing, is a whole number of bytes and equals (end -
 * begin) * 8; sorted by offsets the tensors cover [0, data_size) without holes or
 * overlaps; and 8 + N + data_size == file_size exactly. Only the first 8 + N bytes are
 * read.
 * Returns 0; -EBADMSG: not a valid safetensors file (out->err says what, with the byte
 * offset in the file); -E2BIG: valid as far as checked but beyond this parser's limits
 * (more than BFS_ST_MAX_TENSORS tensors, BFS_ST_MAX_DIMS dimensions, BFS_ST_MAX_META
 * metadata pairs, or BFS_ST_POOL_SIZE bytes of names and metadata); -ENOBUFS: len <
 * 8 + N <= file_size, read more and retry; -EINVAL: NULL data or out, or len >
 * file_size. On failure out's other fields are unspecified.
 */
int bfs_st_parse_header(const uint8_t *data, size_t len, uint64_t file_size, bfs_st_file *out);

/* bfs_st_find - the tensor called name (NUL-terminated) in f, or NULL. Valid as long as
 * f is. */
const bfs_st_tensor *bfs_st_find(const bfs_st_file *f, const char *name);

/* bfs_st_meta_get - the metadata value of key (NUL-terminated) in f, or NULL. Valid as
 * long as f is. */
const char *bfs_st_meta_get(const bfs_st_file *f, const char *key);

/*
 * bfs_st_batch_from_file - check that a parsed file is a batchfs batch and recover its
 * descriptor: metadata format == "batchfs/2", layout "nhwc" or "nchw", epoch and batch
 * in plain decimal, a 16-digit lowercase hex fingerprint; exactly the tensors images,
 * labels, indices, the first three in the header, with the dtypes and shapes of a batch
 * in that layout (B, H, W in [1, 2^32)), and their data in the order labels, indices,
 * images, contiguous (a "batchfs/1" file, images first, is refused by its format; one
 * that claims "batchfs/2" in the old order by its order). Any further tensors are field
 * tensors (bfs_st_field_tensor) whose first dimension must be B; they are counted in
 * d->n_fields, not recovered (d->fields = NULL: read them from f). The header may be any
 * size, so the alignment of the file comment is not required. The extras are not
 * recovered (d->extra = NULL, d->n_extra = 0).
 * Returns 0, -EBADMSG with a one-line reason in err (errlen bytes; err may be NULL when
 * errlen is 0), or -EINVAL (f or d NULL). d is written only on success.
 */
int bfs_st_batch_from_file(const bfs_st_file *f, bfs_st_batch_desc *d, char *err, size_t errlen);

#endif
