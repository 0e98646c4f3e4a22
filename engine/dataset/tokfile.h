/*
 * tokfile.h — the token-corpus files mkbatchfs --tokens reads besides a flat file of ids:
 * NumPy's .npy (a 1-D array of token ids, and one of document offsets) and
 * Megatron-LM's indexed dataset (PREFIX.idx describing the sequences of PREFIX.bin).
 *
 * Pure parsers over bytes already read (no I/O, no allocation beyond what they return):
 * the packer (pack_tokens.c) reads the files, these say where the ids are. Fuzzed by
 * tests/fuzz/fuzz_tokfile.c. Every malformed input gives -EINVAL with a one-line reason.
 */
#ifndef BATCHFS_ENGINE_DATASET_TOKFILE_H
#define BATCHFS_ENGINE_DATASET_TOKFILE_H

#include <stddef.h>
#include <stdint.h>

/* An element type of token ids: 'u' or 'i' (unsigned, signed), size 1, 2, 4 or 8 bytes,
 * little-endian. */
typedef struct bfs_tok_dtype {
    char kind;
    int size;
} bfs_tok_dtype;

/*
 * bfs_npy_parse - the header of a .npy file (versions 1.0, 2.0, 3.0) in p[0..n) (the
 * first bytes of the file: 64 KiB hold any header this accepts): a C-order or 1-D array
 * of shape (N,) of a little-endian (or byte-order-free) integer dtype (|u1 |i1 <u2 <i2
 * <u4 <i4 <u8 <i8). *dtype, *count = N, *data_offset = where the elements start.
 * file_size, when not 0, must be exactly data_offset + N * size.
 * Returns 0 or -EINVAL (not .npy, another dtype or shape, a header cut short, a size that
 * disagrees), with the reason in err.
 */
int bfs_npy_parse(const uint8_t *p, size_t n, uint64_t file_size, bfs_tok_dtype *dtype,
                  uint64_t *count, uint64_t *data_offset, char *err, size_t errlen);

/* A Megatron indexed dataset's index, parsed in place (pointers into the .idx bytes). */
typedef struct bfs_megatron_idx {
    bfs_tok_dtype dtype;    /* of the ids in the .bin */
    uint64_t nseq;          /* sequences */
    uint64_t ndoc;          /* documents: doc_idx holds ndoc + 1 entries */
    const uint8_t *sizes;   /* nseq int32: ids per sequence */
    const uint8_t *offsets; /* nseq int64: byte offset of each sequence in the .bin */
    const uint8_t *doc_idx; /* ndoc + 1 int64: first sequence of each document, then nseq */
} bfs_megatron_idx;

/*
 * bfs_megatron_parse - an .idx file's bytes p[0..n) (MMIDIDX, version 1; dtype codes
 * 1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 8 u16): sizes, offsets and document index checked
 * against each other and against bin_size, the .bin's size (every sequence inside it,
 * sizes >= 0, doc_idx from 0 to nseq without going back). Returns 0 or -EINVAL with the
 * reason in err.
 */
int bfs_megatron_parse(const uint8_t *p, size_t n, uint64_t bin_size, bfs_megatron_idx *out,
                       char *err, size_t errlen);

/* Entry i of the parsed arrays (little-endian loads). */
uint32_t bfs_megatron_size(const bfs_megatron_idx *x, uint64_t i);
uint64_t bfs_megatron_offset(const bfs_megatron_idx *x, uint64_t i);
uint64_t bfs_megatron_doc(const bfs_megatron_idx *x, uint64_t d);

/* bfs_tok_get - element i of an integer array of type t at p, as int64: negative for a
 * negative one, and for a u64 over INT64_MAX. */
int64_t bfs_tok_get(const uint8_t *p, bfs_tok_dtype t, uint64_t i);

/*
 * bfs_tok_convert - n ids of type src at in to ids of out_size (2 or 4) bytes at out,
 * little-endian. Returns 0, or -ERANGE when one is negative or does not fit, with its
 * index in *bad and its value in *value (bfs_tok_get's).
 */
int bfs_tok_convert(const uint8_t *in, size_t n, bfs_tok_dtype src, int out_size, uint8_t *out,
                    size_t *bad, int64_t *value);

/* bfs_tok_out_size - the id size a .bfs stores ids of type t in: 2 for 1- and 2-byte
 * types, 4 for the others (whose values must then fit in u32). */
int bfs_tok_out_size(bfs_tok_dtype t);

#endif
