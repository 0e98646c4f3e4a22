/*
 * statsjson.h — a small strict JSON parser for reading a mount's /stats (used by
 * `batchfs top`, programs/top.c): the whole text becomes a read-only tree of values,
 * looked up by paths such as "cache.hits" or "prefetch.streams[2].pid".
 *
 * Neighbours: programs/top.c reads MNT/stats, programs/top_render.c renders it;
 * tests/fuzz/fuzz_stats_json.c and tests/check_statsjson.c exercise it. It includes no FUSE header
 * and calls nothing of the engine: it depends on libc and jansson.
 *
 * The parser is jansson's (Debian's libjansson, fuzzed upstream and by fuzz_stats_json here):
 * RFC 8259 exactly — one value of any type, surrounded by optional whitespace; no
 * comments, trailing commas, single quotes, NaN or Infinity, leading zeros, '+' signs or
 * bare control characters in strings; strings valid UTF-8, \u escapes decoded (a lone
 * surrogate is refused; "\u0000" is allowed in values, not in keys); a number whose
 * magnitude overflows a double is refused. A duplicate object key is refused (the
 * hand-written parser before it let the first win: /stats never repeats a key, and a
 * reader should not guess). Messages are jansson's, after "byte N: ".
 *
 * Bounds, so that no input can make it use unbounded time, memory or stack: at most
 * SJ_MAX_TEXT bytes, SJ_MAX_DEPTH nested arrays and objects, and SJ_MAX_VALUES values.
 * A raw NUL byte anywhere in the text is refused.
 *
 * Numbers are converted by jansson with strtod: the process must keep the "C" LC_NUMERIC
 * locale (batchfs never calls setlocale).
 */
#ifndef BATCHFS_PROGRAMS_STATSJSON_H
#define BATCHFS_PROGRAMS_STATSJSON_H

#include <stddef.h>

#define SJ_MAX_TEXT   (4 << 20) /* /stats is a few KiB; 64 readers stay far below this */
#define SJ_MAX_DEPTH  64
#define SJ_MAX_VALUES (1 << 18)

/* Value types. */
enum { SJ_NULL, SJ_FALSE, SJ_TRUE, SJ_NUMBER, SJ_STRING, SJ_ARRAY, SJ_OBJECT };

/* A parsed document; values in it are named by int ids, SJ_ROOT the top value. */
typedef struct sj_doc sj_doc;
#define SJ_ROOT 0

/*
 * sj_parse - parse text[0..len) (need not be NUL-terminated; a NUL byte is an error).
 * On success *out is a new document (free with sj_free) and 0 is returned. Errors:
 * -EINVAL not JSON (err: "byte N: what was expected"), -E2BIG beyond a bound above (err
 * names it), -ENOMEM. On failure *out is NULL. err may be NULL or errlen 0.
 */
int sj_parse(const char *text, size_t len, sj_doc **out, char *err, size_t errlen);

/* sj_free - release d; accepts NULL. Every pointer obtained from d becomes invalid. */
void sj_free(sj_doc *d);

/*
 * sj_lookup - the value at path below value `base` (SJ_ROOT for the whole document), or
 * -1 when a step is missing, has the wrong type, or the path is malformed (d may be NULL).
 * A path is steps separated by '.': a step is an object key (any bytes but '.', '[' and
 * ']'), or, on an array, a decimal index; "[N]" is also an array index, with or without
 * a '.' before it. "" is base itself. Examples: "cache.hits", "prefetch.streams[0].pid",
 * "prefetch.streams.0.pid".
 */
int sj_lookup(const sj_doc *d, int base, const char *path);

/* sj_type - the SJ_* type of value v, or -1 when v is not a value of d. */
int sj_type(const sj_doc *d, int v);

/* sj_count - the number of elements of array v or members of object v; -1 otherwise. */
int sj_count(const sj_doc *d, int v);

/* sj_child - element i of array v, or the value of member i of object v (document
 * order); -1 when out of range or v is not a container. O(i). */
int sj_child(const sj_doc *d, int v, int i);

/* sj_next - the element or member after v in its container, or -1 (v the last, or the
 * root, or not a value). With sj_child(d, v, 0) it walks a container in O(n). */
int sj_next(const sj_doc *d, int v);

/*
 * sj_key - the key of v when v is the value of an object member (*len its length in
 * bytes); NULL otherwise. NUL-terminated; owned by d.
 */
const char *sj_key(const sj_doc *d, int v, size_t *len);

/*
 * sj_num - 0 and *out = the number when v is a number; -ENOENT when v is not a value of
 * d (-1 from a failed lookup), -EINVAL when it is of another type (*out untouched).
 */
int sj_num(const sj_doc *d, int v, double *out);

/* sj_str - the decoded UTF-8 bytes of string v (NUL-terminated, *len their count when
 * len is not NULL; owned by d), or NULL when v is not a string. */
const char *sj_str(const sj_doc *d, int v, size_t *len);

/* sj_get_num - sj_num(d, sj_lookup(d, SJ_ROOT, path), out). */
int sj_get_num(const sj_doc *d, const char *path, double *out);

/* sj_get_str - sj_str(d, sj_lookup(d, SJ_ROOT, path), NULL). */
const char *sj_get_str(const sj_doc *d, const char *path);

#endif
