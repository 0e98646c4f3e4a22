/*
 * record.h — samples of many fields from sharded and manifest sources: what mkbatchfs
 * keeps of a WebDataset sample, a tf.train.Example or a manifest line besides the image.
 *
 * Neighbours: the readers (wds.c, tfrecord.c, manifest.c) hand a sample over as a set of
 * named members (bfs_members: a tar member by its extension, a feature by its name, a
 * manifest column); pack.c makes a schema from the first sample and the --field options
 * (bfs_schema_make), turns every sample into the values of the schema's fields
 * (bfs_schema_convert) and writes them with bfs_writer_add_record. docs/multimodal.md
 * says what each member becomes.
 *
 * Pure functions over bytes already read: no I/O. Every failure a sample's bytes can
 * cause is a reason string naming the member (and the JSON key), never a crash; fuzzed by
 * tests/fuzz/fuzz_wds.c, fuzz_tfrecord.c and fuzz_manifest.c.
 */
#ifndef BATCHFS_ENGINE_DATASET_RECORD_H
#define BATCHFS_ENGINE_DATASET_RECORD_H

#include "engine/dataset/bfs.h"

#include <stddef.h>
#include <stdint.h>

/* The kinds of member values. */
enum {
    BFS_MEMBER_BYTES = 1, /* bytes: a tar member, a bytes_list's one value, an image file */
    BFS_MEMBER_INTS,      /* int64_t values: an int64_list */
    BFS_MEMBER_FLOATS,    /* float values: a float_list */
    BFS_MEMBER_JSON       /* a JSON value (jansson json_t *): a manifest column */
};

/* One member of a sample. */
typedef struct bfs_member {
    char *name;      /* extension, feature or column name (owned) */
    int type;        /* BFS_MEMBER_* */
    void *data;      /* BYTES: the bytes; INTS: int64_t[]; FLOATS: float[]; owned (NULL: none) */
    size_t len;      /* BYTES: bytes; INTS, FLOATS: values */
    void *json;      /* JSON: a json_t * (a reference owned by the member); a CSV
                        cell's member also holds the cell's text in data, len, which text
                        and bytes fields take as written */
    int bad;         /* BYTES: not taken (over the size a reader takes, or a bytes_list of
                        several values): why names it */
    const char *why; /* static text, when bad */
} bfs_member;

/* A sample's members, in the order read. */
typedef struct bfs_members {
    bfs_member *v;
    size_t n, cap;
} bfs_members;

/* bfs_members_add - append a member named name[0..namelen) of type, taking ownership of
 * data (len as in bfs_member) or of a json reference (JSON); on failure frees them.
 * Returns 0 or -ENOMEM. */
int bfs_members_add(bfs_members *m, const char *name, size_t namelen, int type, void *data,
                    size_t len, void *json);
/* bfs_members_clear - free every member (m stays usable); bfs_members_free also its array.
 * Both accept a zeroed m. */
void bfs_members_clear(bfs_members *m);
void bfs_members_free(bfs_members *m);
/* bfs_members_find - the first member named name (nocase: ASCII case ignored), or NULL. */
const bfs_member *bfs_members_find(const bfs_members *m, const char *name, int nocase);

/* A --field option: NAME=MEMBER[:KEY][:KIND[:DTYPE]][:follows=F][:optional]. */
#define BFS_SPEC_LABEL   BFS_FIELD_KIND_END /* kind "label": the sample's label, not a field */
#define BFS_SPEC_SRC_MAX 255
typedef struct bfs_field_spec {
    char name[BFS_FIELD_NAME_MAX + 1];
    char member[BFS_SPEC_SRC_MAX + 1];
    char key[BFS_SPEC_SRC_MAX + 1];       /* a key of the member's JSON object, or "" */
    int kind;                             /* 0: told by the member; BFS_FIELD_*; BFS_SPEC_LABEL */
    int dtype;                            /* BFS_FDT_*, or -1: told by the values */
    char follows[BFS_FIELD_NAME_MAX + 1]; /* the boxes field a per-box array pairs with */
    int optional;                         /* a sample may lack it */
} bfs_field_spec;

/*
 * bfs_field_spec_parse - one --field argument into *s. From the end: the flags
 * "optional" and "follows=F", then a dtype (u8 u16 u32 i32 i64 f32) after "array" or
 * "tokens", then a kind (image text tokens array boxes bytes label); what is left is
 * MEMBER or MEMBER:KEY. So "json:label:label" is the key label of the json member as
 * the label, and "json:label" the json member itself as the label. Returns 0 or -EINVAL
 * with the reason in err.
 */
int bfs_field_spec_parse(const char *arg, bfs_field_spec *s, char *err, size_t errlen);

/* How a source's members are named (the defaults differ). */
enum { BFS_SRC_WDS = 1, BFS_SRC_TFRECORD, BFS_SRC_MANIFEST };

/* The fields of a pack, and where each comes from. */
typedef struct bfs_schema {
    int src;                            /* BFS_SRC_* */
    uint32_t n;                         /* fields */
    bfs_field f[BFS_FIELD_MAX];         /* their declarations (field 0: the primary image) */
    bfs_field_spec from[BFS_FIELD_MAX]; /* the member (and key) of each, its kind */
    int has_label;                      /* the label comes from label (else 0) */
    bfs_field_spec label;               /* member and key of the label */
    int label_json_fallback;            /* WebDataset: no .cls: the .json's key (label) */
    char label_key[BFS_SPEC_SRC_MAX + 1];
    int explicit_fields; /* made from --field: members not mapped are not
                            counted as extra */
} bfs_schema;

/*
 * bfs_schema_make - the fields of a pack from its first sample (first) or the --field
 * options (specs[0..nspecs)), for a source of kind src. image_key: the primary image's
 * member (NULL: WebDataset the first of jpg/jpeg/png/webp, TFRecord image/encoded or
 * the first bytes feature that holds an image, manifest the first of image, path,
 * file_name present); label_key: the label's key (WebDataset: in the .json when there is
 * no .cls, NULL: label; TFRecord: the int64 feature, NULL: image/class/label; manifest:
 * the column, NULL: label or cls).
 * Without specs every member of the first sample is a field (named by it, unsafe bytes as
 * _), optional except the primary image; with specs only those, required unless
 * :optional. Returns 0 or -EINVAL (no image in the first sample, a --field whose member
 * the first sample lacks and whose kind is not given, names twice, follows not naming an
 * earlier boxes field, over BFS_FIELD_MAX fields) with err saying what to do.
 */
int bfs_schema_make(bfs_schema *s, int src, const bfs_field_spec *specs, size_t nspecs,
                    const bfs_members *first, const char *image_key, const char *label_key,
                    char *err, size_t errlen);

/* One field's value of a sample, as bfs_schema_convert makes it. */
typedef struct bfs_value {
    uint8_t *data; /* owned: the image's bytes (images), or the value in its dtype (LE) */
    size_t len;
    uint32_t count; /* elements (non-image fields) */
} bfs_value;

/* A sample converted: one value per field of the schema, and its label. */
typedef struct bfs_record {
    bfs_value v[BFS_FIELD_MAX];
    uint32_t label;
    uint32_t extra; /* members of the sample that are in no field (ignored) */
} bfs_record;

/*
 * bfs_schema_convert - the members m of a sample into rec's values (rec zeroed first;
 * image members' bytes are taken from m, so m's image members are left without data).
 * Returns 0; 1 when the sample cannot be packed, *why then says why naming the member
 * and key (written into whybuf, whycap bytes); or -ENOMEM. Reasons: a required member
 * missing, a label missing or not an integer in 0..BFS_SHARD_LABEL_MAX, text that is not
 * UTF-8, JSON that does not parse, a key missing from a required field's JSON, a value of
 * the wrong type for its field (a string for an array, a float for an integer dtype, an
 * integer out of the dtype's range, rows of another shape), a bad .npy header, a per-box
 * array whose row count is not its boxes'. bfs_record_free releases the values.
 */
int bfs_schema_convert(const bfs_schema *s, bfs_members *m, bfs_record *rec, char *whybuf,
                       size_t whycap, const char **why);
void bfs_record_free(bfs_record *rec);

/*
 * bfs_npy_array - a .npy member's header (p[0..n), the whole file): a C-order array of
 * a little-endian (or byte-order-free) dtype |u1 <u2 <u4 <i4 <i8 <f4 (also |i1 <i2 <f8,
 * converted) of rank 0..4. *dtype the dtype's BFS_FDT_* (or -1 for those converted: i1,
 * i2 as i32, f8 as f32), descr its numpy code, shape[0..*rank), *data_off where the
 * elements start, *count their number (= product of shape; the file must hold exactly
 * them). Returns 0 or -EINVAL with the reason in err.
 */
int bfs_npy_array(const uint8_t *p, size_t n, char descr[4], int *rank, uint64_t shape[4],
                  uint64_t *count, size_t *data_off, char *err, size_t errlen);

/* bfs_field_name_from - a field name made of src: bytes other than letters, digits and _
 * become _, a leading digit gets a _ before it, cut to BFS_FIELD_NAME_MAX bytes. */
void bfs_field_name_from(const char *src, char out[BFS_FIELD_NAME_MAX + 1]);

#endif
