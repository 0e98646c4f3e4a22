/*
 * bench.h — `batchfs --bench`: run a pipeline in-process (no mount) and measure it
 * against libjpeg-turbo's single-core full decode of the same files (PNG and WebP:
 * libspng's and libwebp's, through engine/dataset/image.h), in the same run.
 *
 * Neighbours: programs/batchfs_main.c calls bfs_bench_run for BFS_MODE_BENCH
 * (mountopts/); it drives the engine from outside, as the mount does (engine/engine.h,
 * engine/exec.h, engine/ram.h). tests/cli/bench.sh runs it as a user would.
 */
#ifndef BATCHFS_PROGRAMS_BENCH_H
#define BATCHFS_PROGRAMS_BENCH_H

#include <stdint.h>
#include <stdio.h>

#include "engine/api.h"

typedef struct bfs_bench_opts {
    uint64_t batches; /* batches to read (0: 20, capped at the epoch) */
    uint64_t epoch;   /* epoch to read */
    int reference;    /* images decoded for the reference rate (0: 400) */
    int json;         /* one JSON object instead of text */
} bfs_bench_opts;

/*
 * bfs_bench_run - read `batches` batches of `epoch` in order through the executor
 * (prefetching ahead like a reader would, never past the end of an epoch), then time
 * full decodes of the same samples on one core (tjDecompress2; PNG and WebP through
 * bfs_image_decode), and print both to out.
 * A run longer than one epoch continues into the next epochs and also prints images/s
 * per epoch, with the decoded-sample cache's hits and misses in each (sample_cache_mb:
 * epoch 1 against epoch 0 is the cache's gain). Returns 0 or an error (message on
 * stderr).
 */
int bfs_bench_run(const char *source, const bfs_pipeline_opts *o, const bfs_bench_opts *b,
                  FILE *out);

#endif
