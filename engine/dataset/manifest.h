/*
 * manifest.h — a manifest of samples, read as a stream: JSON Lines (one JSON object per
 * line) or CSV (RFC 4180: a header line of column names, then one record per line;
 * quoted cells may hold commas, quotes doubled, and line breaks). The way COCO-, LAION-
 * and most in-house metadata comes: one column is the image's path, the others are
 * fields (record.h). Used by mkbatchfs (pack.c), fuzzed by tests/fuzz/fuzz_manifest.c.
 *
 * Every column becomes a BFS_MEMBER_JSON member named by it: JSONL values as they are;
 * CSV cells typed by their look: a cell starting with '[' that parses as JSON is that
 * list (quoted or not: CSV writers quote its commas); an unquoted integer or number is
 * one, an unquoted empty cell null; anything else is a string. A CSV member also holds
 * the cell's text (bfs_member.data): a text or bytes field takes it as written.
 * The image column's value must be a string: the path, relative to the manifest's
 * directory unless absolute; pack.c reads the file. Blank lines are no samples.
 */
#ifndef BATCHFS_ENGINE_DATASET_MANIFEST_H
#define BATCHFS_ENGINE_DATASET_MANIFEST_H

#include "engine/dataset/record.h"
#include "engine/dataset/shard.h"

#include <stddef.h>
#include <stdint.h>

#define BFS_MANIFEST_LINE_MAX ((size_t)16 << 20) /* longest line (record) taken */

typedef struct bfs_manifest {
    bfs_shard_in in;
    int csv;              /* CSV, else JSON Lines */
    uint64_t off;         /* bytes consumed */
    uint64_t line;        /* lines read (the next record starts at line + 1) */
    uint64_t sample_line; /* the line the last record started on */
    uint8_t *buf;         /* read buffer */
    size_t len, pos, cap;
    int eof;
    char *rec; /* the record being read (owned) */
    size_t rec_len, rec_cap;
    char **cols; /* CSV: the header's names */
    size_t ncols;
    char key[32]; /* "line N" */
} bfs_manifest;

/* bfs_manifest_init - a reader of the manifest stream in (csv: CSV, else JSON Lines);
 * bfs_manifest_close frees it (accepts a zeroed one). */
void bfs_manifest_init(bfs_manifest *m, bfs_shard_in in, int csv);
void bfs_manifest_close(bfs_manifest *m);

/*
 * bfs_manifest_next - the next record's columns into out (cleared first); its key "line
 * N" in m->key. A record that cannot be a sample (a JSONL line that is not one JSON
 * object, a CSV record with another number of cells than the header) comes back with
 * *skip set to why (in whybuf, naming the line) and out empty. Returns 1, 0 (the end),
 * -EINVAL (a CSV header that is empty, names a column twice or is cut; a quote left open
 * at the end; a record over BFS_MANIFEST_LINE_MAX: err names the line), -ENOMEM, or the
 * read callback's error.
 */
int bfs_manifest_next(bfs_manifest *m, bfs_members *out, const char **skip, char *whybuf,
                      size_t whycap, char *err, size_t errlen);

/* bfs_manifest_is_name - 1 when path's name ends in .jsonl or .csv (2 for .csv). */
int bfs_manifest_is_name(const char *path);

#endif
