/*
 * tuner.h — the autotuner: a model of the pipeline (per-stage service times, each reader's
 * pace) and a controller that sets the worker count, each reader's prefetch depth and the
 * finished-batch cache budget under a CPU and a RAM budget (tf.data's approach: tf.data
 * paper §3.3.2, REFERENCES.md "tf.data autotuning").
 *
 * Two layers:
 *  - the model and the chooser are pure functions of bfs_tune_input (no clock, no
 *    threads), so tests drive them with simulated timings;
 *  - bfs_tuner runs them against an executor in a background thread: every period (20 ms
 *    at start, doubling to 2 s, back to 20 ms when a reader appears, leaves or changes
 *    pace) it reads the executor's counters and reader table, chooses, applies.
 *
 * The model. A batch costs C = B·S + E worker-seconds (B samples of S seconds for read +
 * decode + resize, E for the header); the unit of work is a sample, so w workers finish a
 * demanded batch in L = C/w and produce x = w/C batches/s, shared by the readers in
 * proportion to their demand. Reader i spends c_i seconds per batch itself (read + its
 * training step: the time between its batches not spent waiting), so it consumes at most
 * y_i = 1/c_i. Its prefetch buffer of depth n is an M/M/1/n' queue (n' = n/V, V the
 * variability below): P(empty) =
 * (1−ρ)/(1−ρ^(n+1)) with ρ = x_i/y_i (1/(n+1) when ρ = 1), the expected wait per batch
 * W_i = P(empty)·L, and its time per batch T_i = max(c_i + W_i, 1/x_i). The chooser
 * maximises Σ 1/T_i (batches/s delivered), then takes the cheapest setting within 1% of
 * the best (fewest workers, then least memory), and keeps the current one unless a new
 * one is predicted ≥ 5% better (hysteresis: no oscillation on noisy timings).
 */
#ifndef BATCHFS_ENGINE_TUNER_H
#define BATCHFS_ENGINE_TUNER_H

#include <stddef.h>
#include <stdint.h>

#include "engine/exec.h"

#define BFS_TUNE_MAX_DEPTH 16 /* prefetch depths considered, per reader */
/* A reader's step is never taken below 1 ms (even `cat` spends that reading a batch):
 * with a step of 0 the model sees no gain in prefetching for a reader that never pauses,
 * yet the workers would idle while it reads. */
#define BFS_TUNE_MIN_STEP 1e-3
/* Variability of batch and step times relative to exponential ones, (ca^2 + cs^2) / 2
 * (Kingman). tf.data's model takes exponential times (1); a batch time is the sum of B
 * sample times and training steps are regular, so a buffer of n behaves like one of n/V
 * in the M/M/1/n formula. With V = 1 the model asked a slow reader for depth 8 where
 * depth 1-2 kept it fed (bench_autotune.sh: 1.5x the CPU of the best grid point, all of
 * it speculative batches past the reader's end). */
#define BFS_TUNE_VARIABILITY 0.25

typedef struct bfs_tune_reader {
    uint32_t id;
    double own_s; /* c_i: its own time per batch; 0 = unknown or negligible (a fast reader) */
} bfs_tune_reader;

typedef struct bfs_tune_input {
    double sample_s;  /* S: worker seconds per sample (read + decode + resize) */
    double batch_s;   /* E: worker seconds per batch header */
    uint32_t samples; /* B: samples per batch */
    uint64_t batch_bytes;
    int cpu_budget;     /* workers allowed (1..) */
    uint64_t ram_bytes; /* memory the batches may use: cache + in flight + pool */
    int fixed_threads;  /* > 0: the user's threads=N */
    int fixed_depth;    /* >= 0: the user's prefetch=N */
    int cache_fixed;    /* the user's cache_mb: fixed_cache is the budget (0 included) */
    uint64_t fixed_cache;
    uint64_t file_budget; /* > 0: finished batches are files, at most this many (one
                           * descriptor each: bfs_exec_stats.file_budget); 0: no bound */
    int cur_threads;      /* setting in use (hysteresis); 0: none yet */
    int nreaders;
    const bfs_tune_reader *readers;
} bfs_tune_input;

typedef struct bfs_tune_choice {
    int threads;
    int depth[BFS_EXEC_MAX_READERS];     /* per reader, in input order */
    double wait_s[BFS_EXEC_MAX_READERS]; /* predicted wait per batch */
    int new_depth;                       /* for readers not seen yet (a fast reader's choice) */
    uint64_t cache_bytes;                /* finished-batch budget */
    double rate;                         /* predicted batches/s delivered to all readers */
    int why_reader;                      /* the reader why_depth speaks of (index), or -1 */
    char why_threads[256], why_depth[256], why_cache[256];
} bfs_tune_choice;

/* bfs_tune_p_empty - M/M/1/n probability that a buffer of n is empty, producer rate x,
 * consumer rate y (x, y > 0; y = INFINITY allowed: 1). */
double bfs_tune_p_empty(int n, double x, double y);

/* bfs_tune_reader_time - T for one reader: own time c (0: negligible), producer share x
 * (batches/s), latency L of a demanded batch, depth n; *wait gets W. */
double bfs_tune_reader_time(double c, double x, double latency, int n, double *wait);

/* bfs_tune_rate - predicted batches/s delivered to all readers with w workers and depths
 * depth[] (waits in wait[] if not NULL). */
double bfs_tune_rate(const bfs_tune_input *in, int w, const int *depth, double *wait);

/* bfs_tune_choose - the controller's choice for `in` (see the file comment), respecting
 * fixed values and the budgets (CPU, RAM, and the descriptors batch files take: the cache
 * holds at most file_budget batches); `why` strings name the values chosen. */
void bfs_tune_choose(const bfs_tune_input *in, bfs_tune_choice *out);

/* bfs_tune_smooth - the per-sample time estimate after a look that measured `fresh` new
 * samples taking work_s worker-seconds, `total` samples measured in all (fresh
 * included), dt seconds after the previous look; est is the previous estimate (<= 0:
 * none). An exponential average with a half-life of 1 s, in which a look weighs at least
 * its share of all samples (so early on it is the mean of all of them). */
double bfs_tune_smooth(double est, double work_s, uint64_t fresh, uint64_t total, double dt);

/* ---- the background tuner ------------------------------------------------------------ */

typedef struct bfs_tuner bfs_tuner;

typedef struct bfs_tuner_opts {
    int cpu_budget;     /* workers the executor started; the tuner uses 1..this */
    uint64_t ram_bytes; /* RAM budget for batches */
    int fixed_threads;  /* > 0: never change the thread count */
    int fixed_depth;    /* >= 0: never change prefetch depths */
    int cache_fixed;    /* never change the cache budget: it is fixed_cache (0: none) */
    uint64_t fixed_cache;
    uint32_t batch_samples; /* B */
    uint64_t batch_bytes;
    bfs_exec_alive_fn alive;
} bfs_tuner_opts;

/* bfs_tuner_start - start tuning x (which must outlive the tuner). Returns 0, -ENOMEM or
 * -EAGAIN. */
int bfs_tuner_start(bfs_exec *x, const bfs_tuner_opts *o, bfs_tuner **out);

/* bfs_tuner_stop - stop the thread and free; accepts NULL. Before bfs_exec_destroy of its
 * executor (the tuner unhooks itself from it: bfs_exec_on_reader_news). */
void bfs_tuner_stop(bfs_tuner *t);

/* bfs_tuner_json - the model's inputs and choices with their reasons, as a JSON object
 * (no trailing newline) for /stats; returns the length written (truncated to len-1). */
size_t bfs_tuner_json(bfs_tuner *t, char *buf, size_t len);

#endif
