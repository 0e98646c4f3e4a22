/*
 * bench_open — what opening a .bfs costs as the sample count grows.
 *
 * Writes two .bfs files with tiny payloads (10,000 and 1,000,000 samples), then times
 * bfs_open + bfs_get_info + one random sample read on each (best of 20 opens, page cache
 * warm). bfs_open copies the tables into memory (32 bytes per sample, one sequential read:
 * a file overwritten under a reader must give an error, not SIGBUS), so it grows with the
 * sample count. The engine checks the same tables against their checksum when it opens a
 * .bfs source (the mount, --bench: bfs_verify_tables; labels are covered by nothing
 * else), so the reference is that check: target, open of 1M samples <= 3x the check.
 *
 *   bench_open [DIR]        (default $TMPDIR or /tmp)
 */
#include "engine/dataset/bfs.h"
#include "base/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int make(const char *path, uint64_t n)
{
    bfs_writer *w;
    char err[512];
    if (bfs_writer_create(path, 0, &w, err, sizeof err)) {
        fprintf(stderr, "bench_open: %s\n", err);
        return -1;
    }
    for (int c = 0; c < 1000; c++) {
        char name[32];
        snprintf(name, sizeof name, "n%08d", c);
        bfs_writer_add_class(w, name);
    }
    uint8_t payload[16];
    for (uint64_t i = 0; i < n; i++) {
        memcpy(payload, &i, sizeof i);
        memset(payload + 8, 0xA5, 8);
        bfs_sample_in s = {.label = (uint32_t)(i % 1000), .width = 500, .height = 375};
        if (bfs_writer_add(w, &s, payload, sizeof payload)) {
            bfs_writer_abort(w);
            return -1;
        }
    }
    if (bfs_writer_finish(w, 0, err, sizeof err)) {
        fprintf(stderr, "bench_open: %s\n", err);
        return -1;
    }
    return 0;
}

/* Best of 5 bfs_verify_tables on an open reader (page cache warm), seconds; -1 on error. */
static double time_verify(const char *path)
{
    bfs_reader *r;
    if (bfs_open(path, &r, NULL, 0))
        return -1;
    double best = 1e9;
    for (int k = 0; k < 5; k++) {
        double t0 = now();
        if (bfs_verify_tables(r)) {
            bfs_close(r);
            return -1;
        }
        double t = now() - t0;
        best = t < best ? t : best;
    }
    bfs_close(r);
    return best;
}

static double time_open(const char *path, uint64_t n)
{
    double best = 1e9;
    uint64_t x = 12345;
    for (int k = 0; k < 20; k++) {
        double t0 = now();
        bfs_reader *r;
        if (bfs_open(path, &r, NULL, 0))
            return -1;
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        bfs_sample s;
        uint8_t d[64];
        if (bfs_get_info(r)->sample_count != n ||
            bfs_read_sample(r, (x >> 11) % n, BFS_VERIFY_SAMPLE, &s, d, sizeof d)) {
            bfs_close(r);
            return -1;
        }
        bfs_close(r);
        double t = now() - t0;
        best = t < best ? t : best;
    }
    return best;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char small[4096], large[4096];
    snprintf(small, sizeof small, "%s/bench_open_10k.bfs", dir);
    snprintf(large, sizeof large, "%s/bench_open_1m.bfs", dir);
    if (make(small, 10000) || make(large, 1000000)) {
        fprintf(stderr, "bench_open: cannot write the test files in %s\n", dir);
        return 1;
    }
    double ts = time_open(small, 10000), tl = time_open(large, 1000000);
    double vl = time_verify(large);
    unlink(small);
    unlink(large);
    if (ts < 0 || tl < 0 || vl < 0) {
        fprintf(stderr, "bench_open: open failed\n");
        return 1;
    }
    printf("open+first access, 10,000 samples:    %8.1f us\n", ts * 1e6);
    printf("open+first access, 1,000,000 samples: %8.1f us\n", tl * 1e6);
    printf("engine's table check (bfs_verify_tables), 1,000,000 samples: %.1f ms (32 MB hashed: "
           "%.1f GB/s)\n",
           vl * 1e3, 32e6 / vl / 1e9);
    printf("open of 1M samples / the engine's table check: %.2f (target <= 3)\n", tl / vl);
    return 0;
}
