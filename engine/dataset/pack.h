/*
 * pack.h — pack an ImageFolder (or WebDataset / TFRecord shards, bfs_pack_sources) into a
 * .bfs file (the engine of the mkbatchfs program).
 *
 * ImageFolder semantics follow torchvision.datasets.ImageFolder: class = each
 * sub-directory of SRC, labels 0..C-1 in sorted (byte-wise) name order; samples = every
 * file below a class directory, in the order of a sorted recursive walk (directory path,
 * then file name). Files are recognised by content (a JPEG SOI and a decodable header),
 * not by extension. Files that are not JPEG, cannot be read, or do not decode whole
 * (bfs_jpeg_check: every image is decoded once, whatever the options, so the samples
 * packed never depend on them) are skipped and listed with the reason (or, with strict,
 * fail the pack); running out of memory or file descriptors while reading or decoding one
 * (bfs_err_is_resource) fails the pack.
 *
 * Workers (jobs) read, inspect and optionally re-encode files in parallel; one writer
 * appends them in dataset order, so the output is byte-identical whatever jobs is.
 */
#ifndef BATCHFS_ENGINE_DATASET_PACK_H
#define BATCHFS_ENGINE_DATASET_PACK_H

#include "engine/dataset/record.h"
#include "engine/dataset/shard.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

/*
 * bfs_pack_resize_fn - the resampler the packer shrinks images with (max_side): rgb, w x h
 * pixels of 3 bytes in packed rows, resampled whole into out, nw x nh pixels in packed
 * rows. *scratch is the calling thread's memory for it: NULL at first, the resampler's to
 * allocate and keep between calls; a call with rgb NULL frees it (and sets it NULL).
 * Returns 0 or a negative errno (-ENOMEM). The packer is below the engine and calls no
 * resampler of its own: its caller passes the engine's, bfs_engine_pack_resize
 * (engine.h: Pillow's bilinear filter, antialiased).
 */
typedef int (*bfs_pack_resize_fn)(void **scratch, const uint8_t *rgb, int w, int h, uint8_t *out,
                                  int nw, int nh);

typedef struct bfs_pack_opts {
    int jobs;     /* worker threads; <= 0: online CPUs */
    int max_side; /* 0: keep JPEG bytes; else re-encode images whose longer side is larger */
    bfs_pack_resize_fn resize; /* how (required with max_side > 0; thread-safe) */
    int quality;               /* re-encode quality, 1..100 (0: 90) */
    int raw;                   /* store lz4-compressed RGB pixels instead of JPEG bytes */
    int restart; /* losslessly add a restart marker after every MCU (bfs_jpeg_add_restarts) */
    int strict;  /* fail on the first file that would be skipped */
    int fsync;   /* fsync the output before renaming it into place */
    uint32_t page_size; /* 0: BFS_PAGE_SIZE_DEFAULT */
    int progress;       /* draw a progress bar on progress_out */
    FILE *progress_out; /* usually stderr */
    /* token sequences (bfs_pack_tokens) instead of images: */
    int tokens;          /* 0: src holds images; 2 or 4: src is a flat file of token ids */
    uint32_t doc_sep;    /* the token that ends each document (kept as its last token) */
    int token_format;    /* BFS_TOKENS_FLAT (with tokens), _NPY or _MEGATRON */
    const char *offsets; /* BFS_TOKENS_NPY: the .npy of document offsets */
    /* sharded sources (bfs_pack_sources): */
    int format;            /* BFS_FORMAT_* (shard.h); AUTO: told by the source's names */
    const char *image_key; /* WebDataset: the image's extension (NULL: jpg or jpeg);
                              TFRecord: its feature (NULL: image/encoded) */
    const char *label_key; /* WebDataset: the label's key in the .json (NULL: label);
                              TFRecord: its int64 feature (NULL: image/class/label);
                              manifest: its column (NULL: label or cls) */
    /* fields (record.h): sharded and manifest sources keep every member of a sample as a
       field (.bfs version 3) unless image_only; fields[0..nfields) (--field) choose them */
    int image_only; /* shards: the image and the label only, as before (version 1) */
    const bfs_field_spec *fields;
    size_t nfields;
} bfs_pack_opts;

enum { BFS_TOKENS_FLAT, BFS_TOKENS_NPY, BFS_TOKENS_MEGATRON };

typedef struct bfs_pack_skip {
    char *path;
    char *reason; /* "corrupt JPEG data (Premature end of JPEG file)", "not a JPEG", ... */
} bfs_pack_skip;

typedef struct bfs_pack_report {
    uint64_t files;     /* files found */
    uint64_t packed;    /* samples written */
    uint64_t reencoded; /* JPEGs re-encoded below max_side */
    uint64_t restarted; /* JPEGs with a restart marker after every MCU (restart) */
    uint32_t classes;
    uint64_t bytes_in, bytes_out; /* payload bytes read / stored */
    double seconds;
    bfs_pack_skip *skipped; /* in dataset order */
    uint64_t nskipped;
    uint64_t ignored;  /* files not named .jpg/.jpeg/.png/.webp below the class directories */
    uint64_t tokens;   /* token ids packed (tokens) */
    uint64_t longest;  /* tokens of the longest document (tokens) */
    int token_size;    /* bytes per token id stored: 2 or 4 (tokens) */
    char notes[2048];  /* about the folder scan (bfs_folder_notes), or "" */
    int format;        /* the source's BFS_FORMAT_* when it was shards, else 0 */
    uint64_t shards;   /* shard files read (sharded sources) */
    uint64_t extra;    /* members of samples kept in no field (not in the first sample's set) */
    uint32_t nfields;  /* fields per sample written (1: the image alone, a version 1 file) */
    char fields[2048]; /* "jpg image, txt text, ..." for the summary, or "" */
} bfs_pack_report;

/*
 * bfs_pack - pack src (an ImageFolder directory) into out. src may also be a .bfs file
 * (any regular file is opened as one): its samples are re-packed in order with their
 * labels and class names, JPEGs transformed as the options say and raw samples copied;
 * a sample whose entry or checksum is bad is skipped like an unreadable file (named
 * "SRC[i]"). Without options the output is byte-identical to src.
 * Returns 0, BFS_E_EMPTY (no class directories, an empty class, or a class whose files
 * were all skipped), -EINVAL (bad options), a negative errno (I/O), bfs_open's errors for
 * a file src that is not a valid .bfs, -ENOMEM/-EMFILE/-ENFILE while reading a file, or
 * in strict mode the skip reason's code; err
 * receives a message naming the directory or file.
 * rep is filled either way; free it with bfs_pack_report_free.
 * If *cancel becomes non-zero (a signal handler may set it; atomic, as the pack's
 * threads read it while the handler writes) the pack stops, the
 * temporary file is removed and -ECANCELED returned. cancel may be NULL.
 */
int bfs_pack(const char *src, const char *out, const bfs_pack_opts *o, bfs_pack_report *rep,
             atomic_int *cancel, char *err, size_t errlen);

/*
 * bfs_pack_sources - bfs_pack for nsrcs sources: one as bfs_pack takes, or WebDataset tar
 * shards or TFRecord files of tf.train.Example (wds.h, tfrecord.h), named as files,
 * directories or glob patterns (bfs_shard_list_make says which are shards; o->format
 * forces a format). Shards are read one after the other in path order (strcmp), each as a
 * stream, samples in their order in it; their images go through the same transform as an
 * ImageFolder's files. A sample without image or label, with a label outside
 * 0..BFS_SHARD_LABEL_MAX, or whose image is not a JPEG that decodes whole is skipped and listed as
 * "SHARD:KEY" (WebDataset) or "SHARD:record N" (TFRecord), or with strict fails the pack.
 * Labels are the shards' integers as they are; the class table holds C = the largest
 * label packed + 1 classes named by their decimal label ("0", "1", ...), labels that no
 * sample has included (the notes count them). A malformed shard (a bad tar header or
 * checksum, a bad TFRecord CRC, a file ending early) fails the pack: -EINVAL, err naming
 * the file and the byte. BFS_E_EMPTY when no sample could be packed. Other returns as
 * bfs_pack's.
 */
int bfs_pack_sources(const char *const *srcs, size_t nsrcs, const char *out, const bfs_pack_opts *o,
                     bfs_pack_report *rep, atomic_int *cancel, char *err, size_t errlen);

/*
 * With o->tokens, bfs_pack packs a flat file of token ids (nanoGPT's train.bin: u16 or u32,
 * little-endian, documents joined by a separator token such as GPT-2's <|endoftext|> 50256)
 * into token-sequence samples (BFS_KIND_TOKENS), one per document, each ending with its
 * separator (the last one may lack it), so the samples joined in order are the file's
 * bytes. One class, "documents", label 0. Streams the file (8 MiB at a time), one thread.
 * Returns 0, BFS_E_EMPTY (an empty file), -EINVAL (a size that is not a whole number of
 * tokens, a separator that does not fit the token size, image options with tokens, a
 * document of 4 GiB or more), a negative errno (I/O) or -ECANCELED.
 *
 * With o->token_format BFS_TOKENS_NPY, src is a .npy of shape (N,) holding the ids
 * (|u1 |i1 <u2 <i2 <u4 <i4 <u8 <i8) and o->offsets a .npy of integers marking documents:
 * N+1 boundaries (0 first, N last), or starts (0 first); with BFS_TOKENS_MEGATRON src is
 * Megatron-LM's indexed dataset, PREFIX or PREFIX.bin or PREFIX.idx (one sample per
 * document of its document index, its sequences joined). Ids of 1 or 2 bytes are stored
 * as u16, wider ones as u32; a negative id or one over u32 is refused (-ERANGE), naming
 * where it is. Empty documents are left out and counted in rep->ignored. Other errors:
 * -EINVAL with the file and the reason (tokfile.h's parsers), BFS_E_EMPTY (no document
 * holds a token), I/O errors.
 *
 * bfs_tokens_doc_end - among the n tokens at p (size 2 or 4 bytes each, little-endian),
 * the count up to and including the first one equal to sep, or 0 when none is.
 */
size_t bfs_tokens_doc_end(const uint8_t *p, size_t n, int size, uint32_t sep);

/*
 * Captions tokenized at pack time (mkbatchfs --tokenize): a tokenizer is a callback, so
 * the engine stays C and free of the tokenizer library (mkbatchfs links SentencePiece).
 * bfs_tokenize_fn - the token ids of text[0..len) (UTF-8) into ids (cap of them): returns
 * the count (which may exceed cap: the caller grows ids and calls again) or a negative
 * errno with a message in err.
 */
typedef long (*bfs_tokenize_fn)(void *ctx, const char *text, size_t len, uint32_t *ids, size_t cap,
                                char *err, size_t errlen);

typedef struct bfs_tokenize_opts {
    const char *field;     /* the text field tokenized */
    const char *out_field; /* the tokens field added (NULL: FIELD_tokens) */
    uint32_t vocab;        /* ids are < vocab: u16 when vocab <= 65536, else u32 */
    bfs_tokenize_fn fn;
    void *ctx;
} bfs_tokenize_opts;

/*
 * bfs_pack_tokenize - copy the version 3 .bfs src to out with one field added: the token
 * ids of text field t->field in every sample (BFS_FIELD_TOKENS, variable, u16 or u32 as
 * t->vocab says; a sample without text gets no tokens), after the source's fields, which
 * are copied value by value (checksums verified) with the same classes and page size
 * (o->page_size 0: the source's). One thread; progress as bfs_pack's (o->progress).
 * Returns 0; -EINVAL with err naming the problem (src not version 3, no such text field,
 * the new name taken or not a field name, an id >= vocab, text that is not UTF-8 naming
 * the sample); the tokenizer's error naming the sample; bfs_open's errors; a checksum
 * error naming the sample; -ECANCELED (*cancel set); I/O errors. rep counts samples
 * (packed), tokens (tokens) and the longest (longest).
 */
int bfs_pack_tokenize(const char *src, const char *out, const bfs_tokenize_opts *t,
                      const bfs_pack_opts *o, bfs_pack_report *rep, atomic_int *cancel, char *err,
                      size_t errlen);

/*
 * bfs_pack_copy_fields - re-pack the .bfs src of several fields (version 3) into out value
 * by value: every value's checksum verified and kept as it is (images keep their bytes:
 * restart markers are not added), the classes and page size kept (o->page_size 0). A
 * sample with a corrupt value is left out and listed in rep as "SRC[i]" with the field
 * (o->strict: fails). bfs_pack calls it for such sources. Returns 0, -EINVAL (o->max_side
 * or o->raw: not applied to a multi-field dataset), BFS_E_EMPTY (every sample corrupt),
 * bfs_open's and bfs_verify_tables' errors, -ECANCELED, -ENOMEM, I/O errors.
 */
int bfs_pack_copy_fields(const char *src, const char *out, const bfs_pack_opts *o,
                         bfs_pack_report *rep, atomic_int *cancel, char *err, size_t errlen);

/* bfs_pack_temp_path - while bfs_pack runs, the temporary file it writes (or NULL);
 * for a signal handler that must unlink it. Points to static storage. */
const char *bfs_pack_temp_path(void);

/* bfs_pack_report_free - free the report's lists; accepts a zeroed report. */
void bfs_pack_report_free(bfs_pack_report *rep);

#endif
