/*
 * clock.h — the monotonic clock every timing in batchfs reads (stage times, the
 * autotuner's measurements, reader paces, rate limits, progress bars). CLOCK_MONOTONIC:
 * never steps back with the wall clock.
 */
#ifndef BATCHFS_BASE_CLOCK_H
#define BATCHFS_BASE_CLOCK_H

#include <stdint.h>
#include <time.h>

/* bfs_clock_s - seconds on clock c (CLOCK_MONOTONIC; a CPU-time clock for benchmarks). */
static inline double bfs_clock_s(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* bfs_mono_s - seconds on CLOCK_MONOTONIC. */
static inline double bfs_mono_s(void)
{
    return bfs_clock_s(CLOCK_MONOTONIC);
}

/* bfs_mono_ns - nanoseconds on CLOCK_MONOTONIC. */
static inline uint64_t bfs_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif
