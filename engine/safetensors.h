/*
 * safetensors.h — batch files in the safetensors format: a fixed-size encoder for the
 * batches batchfs serves, and a strict, allocation-free parser for any safetensors file.
 *
 * Neighbours: the engine's batch assembly sizes and fills batch files with the encoder
 * (the FUSE layer reports bfs_st_batch_size() as st_size before a batch is computed);
 * the GPU library, the tests and anything that reads untrusted files use the parser,
 * which engine/api.h declares with the dtypes and a batch's descriptor (so gpu/ reads
 * batch files through the engine's one public header); this header adds the encoder.
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

#include "engine/api.h" /* the dtypes, the descriptor, the parser */

#define BFS_ST_IMAGES_ALIGN  4096u /* images start at a multiple: mmap / O_DIRECT / DMA */
#define BFS_ST_MAX_EXTRA     8u    /* extra metadata pairs the encoder writes */
#define BFS_ST_MAX_EXTRA_LEN 1024u /* bytes per extra key or value (UTF-8) */
/* Extras whose JSON (per pair: escaped key + escaped value + 6) totals at most this many
 * bytes cost at most one page ahead of the tensor data: the rest of the widest possible
 * JSON is 491 bytes (checked by the tests), so 8 + 491 + the budget < 4096 and images_off
 * <= 4096 + 16 * B rounded up to a multiple of 4096 (4096 for B <= 224 without extras),
 * and the header (8 + N) is under 8192 bytes. */
#define BFS_ST_EXTRA_BUDGET 3584u

/* ---- encoder: batch files (the descriptor, bfs_st_batch_desc, is api.h's) ---------- */

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

#endif
