/*
 * testutil.h — helpers shared by the test suites and test tools (never by the product):
 * temporary directories, whole-file I/O, and synthetic JPEG / ImageFolder generation
 * with libturbojpeg. Images are textured (blocks of noise over gradients), not flat, so
 * they exercise the decoder like small photographs do.
 */
#ifndef BATCHFS_TESTS_TESTUTIL_H
#define BATCHFS_TESTS_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Options for one synthetic JPEG. */
typedef struct tu_jpeg_opts {
    int width, height;
    int quality;     /* 1..100 */
    int subsamp;     /* TJSAMP_* (444, 422, 420, GRAY) */
    int progressive; /* 0/1 */
    uint64_t seed;   /* content seed */
} tu_jpeg_opts;

/* Fill rgb (w*h*3) with deterministic textured content for seed. */
void tu_fill_rgb(uint8_t *rgb, int w, int h, uint64_t seed);

/* Encode a synthetic image; *out is malloc'ed (free it), *len its size. 0 or -errno. */
int tu_make_jpeg(const tu_jpeg_opts *o, uint8_t **out, size_t *len);

/* Encode given RGB pixels as JPEG (same conventions). */
int tu_encode_jpeg(const uint8_t *rgb, int w, int h, int quality, int subsamp, int progressive,
                   uint8_t **out, size_t *len);

/* A PNG of w x h pixels from rows of samples as the file stores them (big-endian 16-bit,
 * sub-byte depths packed; rows of ceil(w * channels * depth / 8) bytes, no filter byte),
 * colour type ct, bit depth depth; plte (nplte entries of 3 bytes) and trns (ntrns bytes)
 * written when given. Each row gets filter type (row % 5) so every filter is used.
 * zlib-compressed, CRCs right. *out malloc'ed. 0 or -ENOMEM. */
int tu_make_png(const uint8_t *rows, int w, int h, int ct, int depth, const uint8_t *plte,
                int nplte, const uint8_t *trns, int ntrns, uint8_t **out, size_t *len);

/* A WebP of rgb (w x h, packed): lossless, or lossy at quality 80. *out malloc'ed (free
 * it). 0 or -ENOMEM. */
int tu_make_webp(const uint8_t *rgb, int w, int h, int lossless, uint8_t **out, size_t *len);

/* Damage a JPEG's entropy-coded data in place: n bytes from fraction at (0..1) of the way
 * from its first SOS to its end are changed (XOR 0x55), except 0xFF bytes and those after
 * one, and any change that would make a 0xFF: markers stay where they are, only the
 * coded data goes wrong (libjpeg-turbo then warns of bad Huffman codes, extraneous
 * bytes or a premature end, at the place of the damage). Returns 0 or -EINVAL (no scan). */
int tu_damage_scan(uint8_t *jpg, size_t len, double at, size_t n);

/* mkdtemp under $TMPDIR (or /tmp) with the given prefix; returns malloc'ed path or NULL. */
char *tu_mkdtemp(const char *prefix);

/* rm -rf path (best effort). */
void tu_rmtree(const char *path);

/* Whole-file helpers: 0 or -errno. tu_read_file mallocs *data. */
int tu_write_file(const char *path, const void *data, size_t len);
int tu_read_file(const char *path, uint8_t **data, size_t *len);

/* Flip the byte at off of path in place and put its size, atime and mtime back, as
 * `rsync --inplace` or `cp --preserve=timestamps` leave a changed file: only its ctime
 * tells (made to differ from before the change: the coarse clock that stamps it is waited
 * for). 0 or -errno. */
int tu_flip_keeping_times(const char *path, off_t off);

/* Generate an ImageFolder: classes "class_000".. with per_class JPEGs each, sizes varying
 * between min_side and max_side, every 7th progressive, every 11th grayscale, every
 * 13th 4:4:4. Returns 0 or -errno. */
int tu_make_imagefolder(const char *dir, int classes, int per_class, int min_side, int max_side,
                        uint64_t seed);

/* A test's dataset: a fresh directory (named after the test) holding an ImageFolder made
 * by tu_make_imagefolder in DIR/src and its pack in DIR/data.bfs (jobs packing threads).
 * tu_dataset_make returns 0, or -errno / a pack error with a message in err;
 * tu_dataset_free removes the directory. The fixture of check_engine and check_fault. */
typedef struct tu_dataset {
    char *dir;
    char folder[4096], packed[4096];
} tu_dataset;
int tu_dataset_make(tu_dataset *d, const char *name, int classes, int per_class, int min_side,
                    int max_side, uint64_t seed, int jobs, char *err, size_t errlen);
void tu_dataset_free(tu_dataset *d);

/* A redis-server of the test's own on 127.0.0.1 (a free port, no persistence, its files in
 * a temporary directory). tu_redis_start starts it with the extra arguments (NULL or a
 * NULL-terminated list, e.g. {"--requirepass", "pw", NULL}) on port (0: a free one) and
 * waits until it accepts connections: 0, or -1 when redis-server is missing or did not
 * come up (make deps installs it). tu_redis_stop kills it (SIGKILL: no shutdown save) and
 * keeps r->port and the directory for a restart on the same port; tu_redis_free stops it
 * and removes the directory. Start from a zeroed tu_redis. */
typedef struct tu_redis {
    int pid;
    int port;
    char *dir;
} tu_redis;
int tu_redis_start(tu_redis *r, int port, const char *const *extra);
void tu_redis_stop(tu_redis *r);
void tu_redis_free(tu_redis *r);

/* Say that a test case left part of what it tests untested, and why (not root, no such
 * device): prints one line "SKIP: SUITE: WHAT: WHY" to stdout and flushes it (forked
 * cases write to the same log). tests/run.sh counts a suite that printed one as skipped,
 * not passed, in its closing line, however many of its other cases passed. */
void tu_skip(const char *suite, const char *what, const char *why_fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* splitmix64 step, for deterministic test data */
uint64_t tu_rand(uint64_t *state);

#endif
