/*
 * pipeline.h — pipeline options: the engine's option table, parsing and validation of
 * `key=value` text, the canonical pipeline text and its fingerprint.
 *
 * Neighbours: mountopts/ composes this table with libfuse's options for `-o` and
 * `-o spec=FILE` (it can walk the table with bfs_pipeline_option_at); `batchfs --bench
 * -o ...` parses with it directly; the engine reads the struct. No FUSE headers here.
 * docs/options.md is the user's reference; engine/pipeline_table.c holds the one table
 * that parsing, error messages, the canonical text and --help are generated from
 * (engine/pipeline.c; the values of its rows in pipeline_values.c, the mixture options
 * in pipeline_mix.c).
 *
 * fields=, text_len=, token_len= and min_box_area= apply to multi-field datasets
 * (bfs_pipeline_check_fields) and enter their canonical text only; datasets of one field
 * fingerprint as before. pad= enters the canonical text only when 1, so that mounts
 * made before it existed keep their fingerprints.
 *
 * Three classes of option (bfs_pipeline_option.cls):
 *   BFS_OPT_DATA    seed, batch, shuffle, drop_last, shard, pad, size, augment, scale, ratio,
 *                   flip, dtype, normalize, layout, bad_sample: they change the bytes of
 *                   batches, so they enter the canonical text and the fingerprint;
 *   BFS_OPT_LISTING epochs: how many epoch directories are listed. Epoch N's batches are
 *                   the same whatever `epochs` is (the plan is keyed by (seed, epoch)), so
 *                   it stays out of the fingerprint and mounts that differ only in it share
 *                   the cache directory; /pipeline may show it on a line of its own;
 *   BFS_OPT_KNOB    threads .. remote_claim_ms: performance knobs, transports (remote*)
 *                   and group (dynamic sharding, claims.h). They never change a byte,
 *                   never enter the fingerprint: mounts that differ only in knobs serve
 *                   identical bytes and share caches (the determinism contract).
 *
 * Usage: bfs_pipeline_defaults, then any number of bfs_pipeline_set / _parse /
 * _parse_spec calls (a key given twice: the last value wins, like mount options), then
 * bfs_pipeline_finish once, then canonical / fingerprint. The caller never frees
 * anything; every function is thread-safe on distinct structs. Numbers are read and
 * written in the "C" locale whatever the process's LC_NUMERIC is.
 */
#ifndef BATCHFS_ENGINE_PIPELINE_H
#define BATCHFS_ENGINE_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

/* the options themselves (bfs_pipeline_opts, BFS_AUTO, the enums of their values), the
 * option table (bfs_pipeline_option_at), a mixture (bfs_pipeline_mix) and the parsing
 * (defaults, set, parse, parse_spec, finish, help) are public: engine/api.h */
#include "engine/api.h"

/* Version of the algorithms that produce batch bytes (plan order, RNG streams, crop
 * geometry, decode and scaled-IDCT policy, resampler, output conversion, batch header and
 * layout). It is hashed into every fingerprint: bump it with any change that alters a
 * served byte, or host-wide caches would serve batches computed by the old code.
 * batchfs/2: labels and indices moved ahead of the images (engine/safetensors.h). */
#define BFS_OUTPUT_VERSION "batchfs/2"

/* Size of an err buffer that holds every message of this module whole (values quoted in
 * messages are cut at 64 bytes); only a spec file name longer than ~500 bytes truncates. */
#define BFS_PIPELINE_ERRLEN 1024
/* Bytes that always hold the canonical text (fields= may take 2 KiB, mix_schedule= 4). */
#define BFS_CANONICAL_MAX 8192

/*
 * bfs_pipeline_check_kind - after bfs_pipeline_finish, once the dataset is known: refuse
 * options given for the other kind of dataset (size= on token sequences, pack= on
 * images) and token options given other values than their defaults that contradict
 * pack= (buckets= without pack=bucket, ...; at their defaults they are accepted, as a
 * spec file made from MNT/pipeline lists them),
 * then set o->sequences, which selects the options the canonical text shows. Returns 0 or
 * -EINVAL with a message naming the option and what to do instead.
 */
int bfs_pipeline_check_kind(bfs_pipeline_opts *o, int sequences, char *err, size_t errlen);

/*
 * bfs_pipeline_check_fields - after bfs_pipeline_check_kind, for an image dataset whose
 * samples have n fields called names[0..n) (a classic dataset: one, "images"), of kinds
 * kind[0..n) (BFS_FIELD_*, engine/dataset/bfs.h). Resolves fields= against them: every
 * name must be one of them (-EINVAL naming the unknown one and listing the dataset's
 * fields), and at least one chosen field must be an image; o->fields becomes the chosen
 * names, comma separated in the dataset's order (the same text whatever order or
 * repetition the user wrote, so the same choice has one fingerprint), *chosen bit i the
 * choice. text_len= (token_len=) other than max where no chosen field is text (tokens),
 * and min_box_area= other than 1 where none is boxes, are refused. Sets o->fielded = n >
 * 1: only then do the multi-field options enter the canonical text. Returns 0 or
 * -EINVAL.
 */
int bfs_pipeline_check_fields(bfs_pipeline_opts *o, const char *const *names,
                              const unsigned char *kind, uint32_t n, uint64_t *chosen, char *err,
                              size_t errlen);

/* bfs_pipeline_mix_weights - the normalized weights (summing to 1) of epoch `epoch`:
 * the schedule's (step: the last point at or before epoch, the first before it; linear:
 * interpolated between the points around it), else the sources' given weights, else
 * their counts' shares (count[k] samples in source k). */
void bfs_pipeline_mix_weights(const bfs_mix_desc *d, const uint64_t *count, uint64_t epoch,
                              double *w);

/* bfs_pipeline_mix_identity - the dataset identity of a mixture: the sources' identity
 * (bfs_source_open_mix's) and the given weights, so that another weight is another
 * fingerprint. */
uint64_t bfs_pipeline_mix_identity(const bfs_mix_desc *d, uint64_t sources_identity);

/* bfs_pipeline_mix_display - "PATH:W, PATH:W" (the weights as given) for MNT/pipeline's
 * `source =` line, which a spec file reads back. Returns snprintf's convention. */
int bfs_pipeline_mix_display(const bfs_mix_desc *d, char *buf, size_t cap);

/*
 * bfs_pipeline_canonical - the data-changing options (BFS_OPT_DATA) as canonical text,
 * one `key = value` line each in table order, with fixed formatting: integers in decimal,
 * size as HxW, reals in the shortest form that reads back to the same double (0.08, not
 * 0.08000000000000000166), normalize as numbers for float dtypes ("none" for u8). The text
 * is a valid spec file that reproduces the same canonical text. Call after finish.
 * Returns the length written (excluding NUL), or -ENOSPC if cap is too small
 * (BFS_CANONICAL_MAX is always enough).
 */
int bfs_pipeline_canonical(const bfs_pipeline_opts *o, char *buf, size_t cap);

/*
 * bfs_pipeline_fingerprint - XXH64 (seed 0) of "batchfs/2\n" + dataset_identity as 16
 * lower-case hex digits + "\n" + canonical text. dataset_identity: the .bfs header
 * checksum, or a hash of an ImageFolder's sorted file list with sizes and mtimes.
 */
uint64_t bfs_pipeline_fingerprint(const bfs_pipeline_opts *o, uint64_t dataset_identity);

/*
 * bfs_pipeline_size_at - the output size (*h x *w) of epoch: size= unless size_schedule=
 * is set and augment=train; then the point at or before the epoch (the first before it),
 * or with linear: FFCV's get_resolution between the points around it (np.interp, then
 * rounded half to even to a multiple of 32; a point's own epoch, and epochs outside the
 * points, take the point's size unrounded).
 */
void bfs_pipeline_size_at(const bfs_pipeline_opts *o, uint64_t epoch, uint32_t *h, uint32_t *w);

#endif
