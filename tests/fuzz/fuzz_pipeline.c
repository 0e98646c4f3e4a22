/*
 * fuzz_pipeline.c — libFuzzer target for the pipeline option parsers (engine/pipeline.c).
 *
 * Each input, NUL-terminated (text after an embedded NUL is ignored, as the parsers see
 * C strings), is fed to:
 *   1. bfs_pipeline_parse, as `-o` text;
 *   2. bfs_pipeline_parse_spec, as a spec file;
 *   3. bfs_pipeline_set, split at its first '=' (first line only), with a tiny err buffer.
 * Whenever parsing succeeds, bfs_pipeline_finish runs, and when that succeeds, the
 * canonical text and fingerprint. The documented contracts are checked with CHECK (a
 * violation aborts like a memory error): return codes are 0 or documented errors; every
 * failure leaves a NUL-terminated, non-empty message; a failed set leaves the options
 * unchanged; the canonical text is a spec that reproduces itself and the fingerprint;
 * knobs never change the fingerprint. Seeds: tests/fuzz/seeds/pipeline/.
 */
#include "engine/pipeline.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_pipeline: %s:%d: contract violated: %s\n", __FILE__, __LINE__,   \
                    #cond);                                                                        \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void check_message(int rc, const char *err, size_t errlen)
{
    CHECK(rc == 0 || rc == -EINVAL || rc == -ENOENT || rc == -ENOMEM);
    if (rc) {
        size_t n = strnlen(err, errlen);
        CHECK(n < errlen);
        CHECK(n > 0);
    }
}

/* finish, canonical, fingerprint, round trip of the canonical text */
static void finish_and_check(bfs_pipeline_opts *o)
{
    char err[BFS_PIPELINE_ERRLEN];
    int rc = bfs_pipeline_finish(o, err, sizeof err);
    CHECK(rc == 0 || rc == -EINVAL);
    check_message(rc, err, sizeof err);
    if (rc)
        return;
    CHECK(bfs_pipeline_finish(o, err, sizeof err) == 0); /* idempotent */

    char canon[BFS_CANONICAL_MAX];
    int n = bfs_pipeline_canonical(o, canon, sizeof canon);
    CHECK(n > 0 && (size_t)n == strlen(canon));
    uint64_t fp = bfs_pipeline_fingerprint(o, 0x5eed);

    /* a mixture's spec is its canonical text and its `source =` line (MNT/pipeline) */
    bfs_pipeline_opts back;
    bfs_pipeline_defaults(&back);
    if (o->mix[0]) {
        rc = bfs_pipeline_set(&back, "source", o->mix, err, sizeof err);
        check_message(rc, err, sizeof err);
        CHECK(rc == 0);
    }
    rc = bfs_pipeline_parse_spec(&back, canon, "canonical", err, sizeof err);
    if (rc) {
        fprintf(stderr, "canonical text does not parse: %s\n%s", err, canon);
        CHECK(rc == 0);
    }
    CHECK(bfs_pipeline_finish(&back, err, sizeof err) == 0);
    char again[BFS_CANONICAL_MAX];
    CHECK(bfs_pipeline_canonical(&back, again, sizeof again) == n);
    CHECK(strcmp(canon, again) == 0);
    CHECK(bfs_pipeline_fingerprint(&back, 0x5eed) == fp);

    /* knobs (and epochs) never change the fingerprint */
    bfs_pipeline_opts k = *o;
    k.threads = k.threads == 3 ? 4 : 3;
    k.prefetch = BFS_AUTO;
    k.cache_mb = 0;
    k.epochs = k.epochs == 1 ? 2 : 1;
    snprintf(k.cache_dir, sizeof k.cache_dir, "/elsewhere");
    CHECK(bfs_pipeline_fingerprint(&k, 0x5eed) == fp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char err[BFS_PIPELINE_ERRLEN];
    bfs_pipeline_opts o;

    /* 1. -o text */
    bfs_pipeline_defaults(&o);
    int rc = bfs_pipeline_parse(&o, text, err, sizeof err);
    check_message(rc, err, sizeof err);
    if (rc == 0)
        finish_and_check(&o);

    /* 2. spec file */
    bfs_pipeline_defaults(&o);
    rc = bfs_pipeline_parse_spec(&o, text, "fuzz.spec", err, sizeof err);
    check_message(rc, err, sizeof err);
    if (rc)
        CHECK(strncmp(err, "fuzz.spec:", 10) == 0);
    else
        finish_and_check(&o);

    /* 3. one key=value on its own, with a truncating err buffer */
    char *nl = strchr(text, '\n');
    if (nl)
        *nl = '\0';
    char *eq = strchr(text, '=');
    if (eq)
        *eq = '\0';
    bfs_pipeline_defaults(&o);
    bfs_pipeline_opts before = o;
    char small[8];
    rc = bfs_pipeline_set(&o, text, eq ? eq + 1 : NULL, small, sizeof small);
    check_message(rc, small, sizeof small);
    if (rc)
        CHECK(memcmp(&o, &before, sizeof o) == 0);
    else
        finish_and_check(&o);

    CHECK(bfs_pipeline_help()[0] != '\0');
    free(text);
    return 0;
}
