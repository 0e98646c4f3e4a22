/* record_internal.h — shared by record.c (members, --field, numbers, a value's source)
 * and record_schema.c (the schema, conversion) only. */
#ifndef BATCHFS_ENGINE_DATASET_RECORD_INTERNAL_H
#define BATCHFS_ENGINE_DATASET_RECORD_INTERNAL_H

#include "engine/dataset/record.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* Numbers as collected: a flat list of values (integers kept int64) and their shape. */
typedef struct nums {
    int64_t *i;
    double *d;
    uint8_t *isint;
    size_t n, cap;
    int rank; /* -1: flat (no shape known) */
    uint64_t dims[4];
    int hint; /* a .npy's dtype as stored (BFS_FDT_*), or -1 */
} nums;

/* A value as found: a member, or a key of its JSON object. */
typedef struct found {
    int type; /* BFS_MEMBER_*, 0: absent */
    bfs_member *m;
    const uint8_t *bytes;
    size_t len;
    json_t *json; /* JSON (borrowed) */
} found;

/* bfs_nums_free - free x's lists (x itself is the caller's). */
void bfs_nums_free(nums *x);

/* bfs_nums_dtype - the dtype values suggest: i64 when every one is an integer, else f32. */
int bfs_nums_dtype(const nums *x);

/* bfs_nums_store - x stored in dtype into v. 0, -ENOMEM, or 1 with why. */
int bfs_nums_store(const nums *x, int dtype, bfs_value *v, const char **why);

/* bfs_rec_find - the member (and key) spec names, from m; *parsed holds a parse of a bytes
 * member as JSON (to be freed by the caller). 0, or 1 with why (not JSON, not an object). */
int bfs_rec_find(const bfs_schema *s, const bfs_field_spec *sp, bfs_members *m, found *f,
                 json_t **parsed, char *whybuf, size_t whycap, const char **why);

/* bfs_rec_where - "member 'json' key 'boxes'" for messages, in buf; returns buf. */
const char *bfs_rec_where(const bfs_field_spec *sp, char *buf, size_t cap);

/* bfs_rec_collect - the numbers of a found value into x. 0, -ENOMEM, 1 with why. */
int bfs_rec_collect(const found *f, nums *x, char *whybuf, size_t whycap, const char **why);

/* bfs_rec_shape_ok - x's shape against field d: a fixed shape (or its element count, for a
 * flat x), or whole rows of the row shape. 1 with why when not. */
int bfs_rec_shape_ok(const nums *x, const bfs_field *d, const char **why);

/* bfs_rec_one_line - control bytes of s (member names and JSON come from the data) as
 * '?': one line. */
void bfs_rec_one_line(char *s);

#endif
