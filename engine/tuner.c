/*
 * tuner.c — the autotuner's model, chooser and background thread (see tuner.h).
 *
 * The thread reads the executor's public counters and reader table only (exec.h) and
 * applies its choice through the executor's setters; it owns no batch state. Its last
 * inputs and choice are kept under t->lock for bfs_tuner_json.
 */
#include "engine/tuner.h"
#include "base/clock.h"
#include "base/jsonstr.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PERIOD_MIN 0.02 /* tf.data: every 10 ms at first, doubling (we start at 20 ms) */
#define PERIOD_MAX 2.0  /* tf.data doubles to 60 s; readers change pace within seconds */
#define NEAR       1.01 /* "as good": within 1% of the best predicted rate */
#define SWITCH     1.05 /* hysteresis: change threads only for a >= 5% predicted gain */
#define SHIFT      0.25 /* a reader's pace or the per-sample time moving 25% resets the period */
#define HALF_LIFE  1.0  /* seconds: smoothing of the per-sample service time */

/* P(empty) for a real-valued buffer size (the variability-scaled depth). */
static double p_empty(double n, double x, double y)
{
    if (n < 0)
        n = 0;
    if (!(x > 0))
        return 1.0;
    if (isinf(y))
        return 1.0; /* a consumer that never pauses finds the buffer empty */
    double rho = x / y;
    if (fabs(rho - 1.0) < 1e-9)
        return 1.0 / (n + 1);
    double p = pow(rho, n + 1);
    if (isinf(p))
        return 0.0;
    return (1.0 - rho) / (1.0 - p);
}

double bfs_tune_p_empty(int n, double x, double y)
{
    return p_empty(n, x, y);
}

double bfs_tune_reader_time(double c, double x, double latency, int n, double *wait)
{
    double y = c > 0 ? 1.0 / c : INFINITY;
    /* n > 0 buffers act as n / V exponential ones (Kingman: waits scale with the
     * variability (ca^2 + cs^2) / 2); with n = 0 the reader always waits */
    double w = p_empty(n > 0 ? n / BFS_TUNE_VARIABILITY : 0, x, y) * latency;
    if (wait)
        *wait = w;
    double t = c + w, floor_ = x > 0 ? 1.0 / x : INFINITY;
    return t > floor_ ? t : floor_;
}

/* Producer share of each reader with w workers: water-filling of x_total over the
 * readers' demands y_i; a reader demanding less than its fair share may use, while its
 * buffer is not full, whatever the others leave. */
static void shares(const bfs_tune_input *in, double x_total, double *x)
{
    int n = in->nreaders;
    double y[BFS_EXEC_MAX_READERS], used[BFS_EXEC_MAX_READERS];
    int heavy[BFS_EXEC_MAX_READERS];
    for (int i = 0; i < n; i++) {
        y[i] = in->readers[i].own_s > 0 ? 1.0 / in->readers[i].own_s : INFINITY;
        heavy[i] = 1;
    }
    double left = x_total, level = 0;
    int nheavy = n;
    for (int changed = 1; changed && nheavy;) {
        changed = 0;
        level = left / nheavy;
        for (int i = 0; i < n; i++)
            if (heavy[i] && y[i] < level) {
                heavy[i] = 0, nheavy--, left -= y[i], changed = 1;
            }
    }
    double total_used = 0;
    for (int i = 0; i < n; i++)
        total_used += used[i] = heavy[i] ? level : y[i];
    for (int i = 0; i < n; i++)
        x[i] = heavy[i] ? level : x_total - (total_used - used[i]);
}

static double batch_cost(const bfs_tune_input *in)
{
    double c = in->samples * in->sample_s + in->batch_s;
    return c > 1e-9 ? c : 1e-9;
}

double bfs_tune_rate(const bfs_tune_input *in, int w, const int *depth, double *wait)
{
    double c = batch_cost(in), x[BFS_EXEC_MAX_READERS], sum = 0;
    shares(in, w / c, x);
    for (int i = 0; i < in->nreaders; i++) {
        double t = bfs_tune_reader_time(in->readers[i].own_s, x[i], c / w, depth[i],
                                        wait ? &wait[i] : NULL);
        sum += 1.0 / t;
    }
    return sum;
}

/* Per-reader depths for w workers: each reader's smallest depth within NEAR of its best
 * time (depths do not change the shares in this model, so readers are independent). */
static void depths_for(const bfs_tune_input *in, int w, int *depth)
{
    double c = batch_cost(in), x[BFS_EXEC_MAX_READERS];
    shares(in, w / c, x);
    for (int i = 0; i < in->nreaders; i++) {
        if (in->fixed_depth >= 0) {
            depth[i] = in->fixed_depth;
            continue;
        }
        double t[BFS_TUNE_MAX_DEPTH + 1], best = INFINITY;
        for (int n = 0; n <= BFS_TUNE_MAX_DEPTH; n++) {
            t[n] = bfs_tune_reader_time(in->readers[i].own_s, x[i], c / w, n, NULL);
            best = t[n] < best ? t[n] : best;
        }
        int n = 0;
        while (t[n] > best * NEAR)
            n++;
        depth[i] = n;
    }
}

/* Memory the batches need besides the cache budget: 2 pooled buffers, and per reader one
 * batch open and one in flight. */
static uint64_t fixed_bytes(const bfs_tune_input *in)
{
    return (uint64_t)(2 + 2 * in->nreaders) * in->batch_bytes;
}

/* Cut depths until the prefetched batches fit the cache the RAM budget allows: each step
 * lowers the depth whose loss of predicted rate is smallest. */
static void fit_ram(const bfs_tune_input *in, int w, int *depth, uint64_t cache)
{
    uint64_t bb = in->batch_bytes ? in->batch_bytes : 1;
    for (;;) {
        uint64_t need = 0;
        for (int i = 0; i < in->nreaders; i++)
            need += (uint64_t)(depth[i] + 1) * bb;
        if (need <= cache)
            return;
        int cut = -1;
        double best = -1;
        for (int i = 0; i < in->nreaders; i++) {
            if (!depth[i])
                continue;
            depth[i]--;
            double r = bfs_tune_rate(in, w, depth, NULL);
            depth[i]++;
            if (r > best)
                best = r, cut = i;
        }
        if (cut < 0)
            return; /* all at 0: the budget holds no prefetch at all */
        depth[cut]--;
    }
}

/* bytes in a few characters: "4.3 kB", "10.5 MB", "1.2 GB" (reasons of small batches
 * said "0.0 MB: 0 MiB") */
static const char *size_text(char *buf, size_t len, double bytes)
{
    const char *unit = bytes >= 1e9 ? "GB" : bytes >= 1e6 ? "MB" : "kB";
    double v = bytes >= 1e9 ? bytes / 1e9 : bytes >= 1e6 ? bytes / 1e6 : bytes / 1e3;
    snprintf(buf, len, "%.1f %s", v, unit);
    return buf;
}

void bfs_tune_choose(const bfs_tune_input *in, bfs_tune_choice *out)
{
    char s1[32], s2[32]; /* (sizes in the reasons) */
    memset(out, 0, sizeof *out);
    int lo = 1, hi = in->cpu_budget > 0 ? in->cpu_budget : 1;
    if (in->fixed_threads > 0)
        lo = hi = in->fixed_threads;
    uint64_t bb = in->batch_bytes ? in->batch_bytes : 1;
    uint64_t fixed = fixed_bytes(in);
    uint64_t cache = in->cache_fixed         ? in->fixed_cache
                     : in->ram_bytes > fixed ? in->ram_bytes - fixed
                                             : bb;
    /* batch files take a descriptor each: what the descriptors hold bounds what prefetch
     * may fill, and (unless cache_mb= is fixed) the cache budget (the executor evicts by
     * the count as well) */
    uint64_t by_files = in->file_budget ? in->file_budget * bb : UINT64_MAX;
    uint64_t ram_cache = cache;
    if (by_files < cache)
        cache = in->cache_fixed ? cache : by_files;
    uint64_t fill = cache < by_files ? cache : by_files;
    double c = batch_cost(in);
    /* a reader not seen yet is taken to be fast: its depth is a fast reader's */
    bfs_tune_reader fast = {.own_s = BFS_TUNE_MIN_STEP};
    bfs_tune_input probe = *in;
    probe.nreaders = 1, probe.readers = &fast;

    if (!in->nreaders) { /* nobody reads: all workers ready for the first request */
        out->threads = in->fixed_threads > 0 ? in->fixed_threads
                       : in->cur_threads > 0 ? in->cur_threads
                                             : hi;
        int d;
        depths_for(&probe, out->threads, &d);
        out->new_depth = d;
        out->cache_bytes = cache;
        snprintf(out->why_threads, sizeof out->why_threads,
                 "no reader consuming now: %d worker(s) ready for the next request", out->threads);
        snprintf(out->why_depth, sizeof out->why_depth,
                 "no reader consuming now: a new reader starts at depth %d", d);
        goto cache_why;
    }

    double rate[1025] = {0}, best = 0;
    int depth[BFS_EXEC_MAX_READERS];
    if (hi > 1024)
        hi = 1024;
    for (int w = lo; w <= hi; w++) {
        depths_for(in, w, depth);
        if (!in->cache_fixed || in->fixed_depth < 0)
            fit_ram(in, w, depth, fill);
        rate[w] = bfs_tune_rate(in, w, depth, NULL);
        best = rate[w] > best ? rate[w] : best;
    }
    int w = lo;
    while (w < hi && rate[w] * NEAR < best)
        w++; /* the fewest workers within 1% of the best */
    /* hysteresis: more workers only for a >= 5% gain; fewer when they lose < 0.5% (the
     * 1% rule above picks them, so a rate hovering near its edge does not flip them) */
    int cur = in->cur_threads;
    if (cur >= lo && cur <= hi && cur < w && rate[cur] * SWITCH >= rate[w])
        w = cur;
    else if (cur >= lo && cur <= hi && cur > w && rate[w] * 1.005 < rate[cur])
        w = cur;
    out->threads = w;
    depths_for(in, w, out->depth);
    fit_ram(in, w, out->depth, fill);
    out->rate = bfs_tune_rate(in, w, out->depth, out->wait_s);
    int d;
    depths_for(&probe, w, &d);
    out->new_depth = in->fixed_depth >= 0 ? in->fixed_depth : d;
    out->cache_bytes = cache;
    out->why_reader = -1;

    /* why: the value applied, what the model predicts for it and its neighbours */
    double x_total = w / c;
    int len = snprintf(out->why_threads, sizeof out->why_threads,
                       "%d worker(s)%s: %.1f batch/s predicted for %d reader(s) (producer "
                       "%.1f batch/s, %.1f ms of work per batch)",
                       w, in->fixed_threads > 0 ? " (threads= fixed)" : "", out->rate, in->nreaders,
                       x_total, c * 1e3);
    if (w > lo && len > 0 && (size_t)len < sizeof out->why_threads)
        len += snprintf(out->why_threads + len, sizeof out->why_threads - (size_t)len, "; %d: %.1f",
                        w - 1, rate[w - 1]);
    if (w < hi && len > 0 && (size_t)len < sizeof out->why_threads)
        snprintf(out->why_threads + len, sizeof out->why_threads - (size_t)len, "; %d: %.1f", w + 1,
                 rate[w + 1]);
    int deep = 0;
    for (int i = 1; i < in->nreaders; i++)
        if (out->depth[i] > out->depth[deep])
            deep = i;
    out->why_reader = deep;
    double xs[BFS_EXEC_MAX_READERS];
    shares(in, x_total, xs);
    const bfs_tune_reader *r = &in->readers[deep];
    if (r->own_s > BFS_TUNE_MIN_STEP)
        snprintf(out->why_depth, sizeof out->why_depth,
                 "reader %u consumes up to %.1f batch/s, its producer share %.1f batch/s: "
                 "depth %d%s gives P(empty)=%.2f, %.1f ms wait per batch",
                 r->id, 1.0 / r->own_s, xs[deep], out->depth[deep],
                 in->fixed_depth >= 0 ? " (prefetch= fixed)" : "",
                 p_empty(out->depth[deep] / BFS_TUNE_VARIABILITY, xs[deep], 1.0 / r->own_s),
                 out->wait_s[deep] * 1e3);
    else if (out->depth[deep] > 0)
        snprintf(out->why_depth, sizeof out->why_depth,
                 "reader %u reads as fast as batches come (producer share %.1f batch/s): "
                 "depth %d%s keeps the workers busy while it reads",
                 r->id, xs[deep], out->depth[deep],
                 in->fixed_depth >= 0 ? " (prefetch= fixed)" : "");
    else
        snprintf(out->why_depth, sizeof out->why_depth,
                 "reader %u reads as fast as batches come (producer share %.1f batch/s): "
                 "depth 0%s, its next batch starts when it asks%s",
                 r->id, xs[deep], in->fixed_depth >= 0 ? " (prefetch= fixed)" : "",
                 in->fixed_depth >= 0 ? "" : " (computing ahead would gain under 1%)");
cache_why:
    if (in->cache_fixed && by_files < cache)
        snprintf(out->why_cache, sizeof out->why_cache,
                 "cache_mb= fixed: %.0f MiB, of which descriptors hold %llu batch files "
                 "(ulimit -n; one a finished batch) of %s: %s",
                 out->cache_bytes / 1048576.0, (unsigned long long)in->file_budget,
                 size_text(s1, sizeof s1, (double)bb), size_text(s2, sizeof s2, (double)by_files));
    else if (in->cache_fixed)
        snprintf(out->why_cache, sizeof out->why_cache, "cache_mb= fixed: %.0f MiB",
                 out->cache_bytes / 1048576.0);
    else if (by_files < ram_cache)
        snprintf(out->why_cache, sizeof out->why_cache,
                 "descriptors hold %llu batch files (ulimit -n; one a finished batch) of %s: "
                 "%s for finished batches, under the %.0f MiB the RAM budget leaves",
                 (unsigned long long)in->file_budget, size_text(s1, sizeof s1, (double)bb),
                 size_text(s2, sizeof s2, (double)out->cache_bytes), ram_cache / 1048576.0);
    else if (in->ram_bytes > fixed)
        snprintf(out->why_cache, sizeof out->why_cache,
                 "RAM budget %.0f MiB less %.0f MiB for %d pooled, open and in-flight "
                 "batches of %.1f MB: %.0f MiB for finished batches",
                 in->ram_bytes / 1048576.0, fixed / 1048576.0, 2 + 2 * in->nreaders, bb / 1e6,
                 out->cache_bytes / 1048576.0);
    else /* nothing left: the cache keeps one batch anyway, past the budget */
        snprintf(out->why_cache, sizeof out->why_cache,
                 "RAM budget %.0f MiB leaves nothing after the %.0f MiB that %d pooled, "
                 "open and in-flight batches of %.1f MB take: the cache keeps one finished "
                 "batch (%.0f MiB), over the budget",
                 in->ram_bytes / 1048576.0, fixed / 1048576.0, 2 + 2 * in->nreaders, bb / 1e6,
                 out->cache_bytes / 1048576.0);
}

double bfs_tune_smooth(double est, double work_s, uint64_t fresh, uint64_t total, double dt)
{
    if (!fresh)
        return est;
    double s = work_s / (double)fresh;
    if (est <= 0 || fresh >= total)
        return s;
    /* the new look weighs at least its share of all samples measured: early on the
     * estimate is the mean of every sample so far, not the first look's few (a token
     * mount's first row builds its epoch's table, ~40 ms against ~9 us for a row later:
     * the first look's 228 us a row kept prefetching off) */
    double a = 1.0 - pow(0.5, dt / HALF_LIFE), share = (double)fresh / (double)total;
    a = share > a ? share : a;
    return est + a * (s - est);
}

/* ---- the background tuner ------------------------------------------------------------ */

struct bfs_tuner {
    bfs_exec *x;
    bfs_tuner_opts o;
    pthread_t thread;
    pthread_mutex_t lock; /* guards everything below */
    pthread_cond_t wake;
    int stop;
    int poked; /* reader news since the last look (bfs_exec_on_reader_news) */
    double period;
    double sample_s, batch_s;                       /* smoothed */
    uint64_t samples, work_ns, encode_ns, computed; /* counters at the last look */
    double last;
    int nreaders;
    bfs_exec_reader readers[BFS_EXEC_MAX_READERS];
    bfs_tune_choice choice;
    uint64_t decisions;    /* changes applied */
    uint64_t logged_cache; /* the cache budget the log last named (0: none yet) */
};

/* One look: smooth the stage times, read the readers, choose, apply. Returns 1 when the
 * inputs moved (the period starts over). */
static int tune_once(bfs_tuner *t)
{
    bfs_exec_stats st;
    bfs_exec_get_stats(t->x, &st);
    double now = bfs_mono_s();
    uint64_t work =
        st.stages.read_ns + st.stages.decode_ns + st.stages.resize_ns + st.stages.augment_ns;
    bfs_exec_reader rd[BFS_EXEC_MAX_READERS];
    int n = bfs_exec_readers(t->x, now, t->o.alive, rd, BFS_EXEC_MAX_READERS);

    pthread_mutex_lock(&t->lock);
    int moved = 0;
    double dt = t->last > 0 ? now - t->last : 0;
    if (st.stages.samples > t->samples) {
        uint64_t fresh = st.stages.samples - t->samples;
        double work_s = (double)(work - t->work_ns) * 1e-9, raw = work_s / (double)fresh;
        /* the look's own time per sample against the estimate: a smoothed step is at most
         * 1.4% at a 20 ms period and would never say the pipeline changed pace */
        if (t->sample_s > 0 && fabs(raw - t->sample_s) > SHIFT * t->sample_s)
            moved = 1;
        t->sample_s = bfs_tune_smooth(t->sample_s, work_s, fresh, st.stages.samples, dt);
    }
    if (st.computed > t->computed && st.stages.encode_ns >= t->encode_ns) {
        double e = (double)(st.stages.encode_ns - t->encode_ns) * 1e-9 /
                   (double)(st.computed - t->computed);
        t->batch_s = t->batch_s > 0 ? 0.5 * (t->batch_s + e) : e;
    }
    t->samples = st.stages.samples, t->work_ns = work, t->encode_ns = st.stages.encode_ns;
    t->computed = st.computed, t->last = now;
    /* a reader came or went, or changed pace */
    if (n != t->nreaders)
        moved = 1;
    for (int i = 0; i < n && !moved; i++) {
        const bfs_exec_reader *old = NULL;
        for (int j = 0; j < t->nreaders; j++)
            if (t->readers[j].id == rd[i].id)
                old = &t->readers[j];
        if (!old || fabs(rd[i].own_s - old->own_s) > SHIFT * (old->own_s > 0 ? old->own_s : 1e-3))
            moved = 1;
    }

    /* readers consuming now: one idle far longer than its step (finished, or its process
     * gone and not yet forgotten) demands nothing; it keeps its depth */
    bfs_tune_reader tr[BFS_EXEC_MAX_READERS];
    int live[BFS_EXEC_MAX_READERS], nlive = 0;
    for (int i = 0; i < n; i++) {
        double pace = rd[i].own_s + rd[i].wait_s;
        if (rd[i].idle_s <= 1.0 || rd[i].idle_s <= 4 * pace)
            live[nlive++] = i;
    }
    for (int l = 0; l < nlive; l++) { /* a step under 1 ms: as fast as batches come */
        int i = live[l];
        tr[l] = (bfs_tune_reader){.id = rd[i].id,
                                  .own_s = rd[i].batches >= 2 && rd[i].own_s > BFS_TUNE_MIN_STEP
                                               ? rd[i].own_s
                                               : BFS_TUNE_MIN_STEP};
    }
    bfs_tune_input in = {.sample_s = t->sample_s,
                         .batch_s = t->batch_s,
                         .samples = t->o.batch_samples,
                         .batch_bytes = t->o.batch_bytes,
                         .cpu_budget = t->o.cpu_budget,
                         .ram_bytes = t->o.ram_bytes,
                         .fixed_threads = t->o.fixed_threads,
                         .fixed_depth = t->o.fixed_depth,
                         .cache_fixed = t->o.cache_fixed,
                         .fixed_cache = t->o.fixed_cache,
                         .file_budget = st.file_budget,
                         .cur_threads = st.threads,
                         .nreaders = nlive,
                         .readers = tr};
    bfs_tune_choice c;
    if (t->sample_s > 0) {
        bfs_tune_choose(&in, &c);
    } else { /* nothing measured yet: keep the start-up setting */
        c = t->choice;
        c.threads = st.threads;
        c.new_depth = st.prefetch;
        c.cache_bytes = st.cache_budget;
    }
    for (int l = 0; l < nlive; l++) /* /stats shows the readers the choice speaks of */
        t->readers[l] = rd[live[l]];
    t->nreaders = nlive;
    int changed = c.threads != t->choice.threads || c.cache_bytes != t->choice.cache_bytes ||
                  c.new_depth != t->choice.new_depth;
    t->choice = c;
    pthread_mutex_unlock(&t->lock);

    if (t->sample_s > 0) {
        /* an info line for the daemon's log per change of workers or cache budget (reader
         * depths change with every reader: /stats and top show those) */
        int log_threads = t->o.fixed_threads <= 0 && c.threads != st.threads;
        int log_cache = !t->o.cache_fixed && t->logged_cache &&
                        (c.cache_bytes > t->logged_cache / 4 * 5 ||
                         c.cache_bytes < t->logged_cache / 5 * 4); /* moves of 25% or more */
        if (!t->logged_cache)
            t->logged_cache = c.cache_bytes;
        if (log_threads || log_cache) {
            fprintf(stderr, "batchfs: autotune: %d worker%s (%s); cache %llu MiB (%s)\n", c.threads,
                    c.threads == 1 ? "" : "s", c.why_threads,
                    (unsigned long long)(c.cache_bytes >> 20), c.why_cache);
            t->logged_cache = c.cache_bytes;
        }
        if (t->o.fixed_threads <= 0 && c.threads != st.threads)
            bfs_exec_set_threads(t->x, c.threads);
        if (t->o.fixed_depth < 0) {
            bfs_exec_set_prefetch(t->x, c.new_depth);
            for (int l = 0; l < nlive; l++)
                if (rd[live[l]].depth != c.depth[l])
                    bfs_exec_set_reader_depth(t->x, rd[live[l]].id, c.depth[l]), changed = 1;
        }
        if (!t->o.cache_fixed && c.cache_bytes != st.cache_budget)
            bfs_exec_set_cache_bytes(t->x, c.cache_bytes);
    }
    if (changed) {
        pthread_mutex_lock(&t->lock);
        t->decisions++;
        pthread_mutex_unlock(&t->lock);
    }
    return moved;
}

/* bfs_exec_on_reader_news: a new reader, or one whose pace is now known (called under
 * the executor's lock; the tuner never calls the executor while holding its own lock) */
static void poke(void *arg)
{
    bfs_tuner *t = arg;
    pthread_mutex_lock(&t->lock);
    t->poked = 1;
    pthread_cond_signal(&t->wake);
    pthread_mutex_unlock(&t->lock);
}

/* Absolute CLOCK_REALTIME time `at` (seconds) as a timespec, for pthread_cond_timedwait. */
static struct timespec abs_time(double at)
{
    struct timespec ts;
    ts.tv_sec = (time_t)at;
    ts.tv_nsec = (long)((at - (double)ts.tv_sec) * 1e9);
    return ts;
}

static double realtime(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *tuner_main(void *arg)
{
    bfs_tuner *t = arg;
    pthread_setname_np(pthread_self(),
                       "bfs-tuner"); /* (top -H, ps -L, perf: docs/architecture.md) */
    pthread_mutex_lock(&t->lock);
    double last = realtime();
    while (!t->stop) {
        /* one period, or less when readers bring news, but PERIOD_MIN at least between
         * looks (many short-lived readers do not make it spin) */
        double end = last + t->period, soonest = last + PERIOD_MIN;
        for (;;) {
            double now = realtime();
            if (t->stop || now >= end || (t->poked && now >= soonest))
                break;
            struct timespec ts = abs_time(t->poked ? soonest : end);
            pthread_cond_timedwait(&t->wake, &t->lock, &ts);
        }
        if (t->stop)
            break;
        t->poked = 0;
        pthread_mutex_unlock(&t->lock);
        int moved = tune_once(t);
        pthread_mutex_lock(&t->lock);
        last = realtime();
        t->period = moved ? PERIOD_MIN : (t->period * 2 > PERIOD_MAX ? PERIOD_MAX : t->period * 2);
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

int bfs_tuner_start(bfs_exec *x, const bfs_tuner_opts *o, bfs_tuner **out)
{
    *out = NULL;
    bfs_tuner *t = calloc(1, sizeof *t);
    if (!t)
        return -ENOMEM;
    t->x = x;
    t->o = *o;
    t->period = PERIOD_MIN;
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->wake, NULL);
    int rc = pthread_create(&t->thread, NULL, tuner_main, t);
    if (rc) {
        pthread_mutex_destroy(&t->lock);
        pthread_cond_destroy(&t->wake);
        free(t);
        return -rc;
    }
    bfs_exec_on_reader_news(x, poke, t);
    *out = t;
    return 0;
}

void bfs_tuner_stop(bfs_tuner *t)
{
    if (!t)
        return;
    bfs_exec_on_reader_news(t->x, NULL, NULL); /* no poke runs or will run after this */
    pthread_mutex_lock(&t->lock);
    t->stop = 1;
    pthread_cond_signal(&t->wake);
    pthread_mutex_unlock(&t->lock);
    pthread_join(t->thread, NULL);
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->wake);
    free(t);
}

#define APPEND(...)                                                                                \
    do {                                                                                           \
        if (o < len) {                                                                             \
            int n_ = snprintf(buf + o, len - o, __VA_ARGS__);                                      \
            o += n_ > 0 ? (size_t)n_ : 0;                                                          \
        }                                                                                          \
    } while (0)

size_t bfs_tuner_json(bfs_tuner *t, char *buf, size_t len)
{
    size_t o = 0;
    if (!len)
        return 0;
    buf[0] = 0;
    pthread_mutex_lock(&t->lock);
    const bfs_tune_choice *c = &t->choice;
    char w1[600], w2[600], w3[600];
    bfs_json_escape(w1, sizeof w1, c->why_threads);
    bfs_json_escape(w2, sizeof w2, c->why_depth);
    bfs_json_escape(w3, sizeof w3, c->why_cache);
    APPEND("{\"threads\": {\"value\": %d, \"why\": \"%s\"},\n", c->threads, w1);
    /* the depth the why names (its reader's), and the one new readers start with */
    APPEND("    \"prefetch\": {\"value\": %d, \"why\": \"%s\", \"new_reader_depth\": %d},\n",
           c->why_reader >= 0 && c->why_reader < t->nreaders ? c->depth[c->why_reader]
                                                             : c->new_depth,
           w2, c->new_depth);
    APPEND("    \"cache_bytes\": {\"value\": %llu, \"why\": \"%s\"},\n",
           (unsigned long long)c->cache_bytes, w3);
    APPEND("    \"cpu_budget\": %d, \"ram_budget_bytes\": %llu, \"period_ms\": %.0f, "
           "\"decisions\": %llu,\n",
           t->o.cpu_budget, (unsigned long long)t->o.ram_bytes, t->period * 1e3,
           (unsigned long long)t->decisions);
    APPEND("    \"model\": {\"sample_us\": %.1f, \"batch_header_us\": %.1f, "
           "\"predicted_batches_per_s\": %.2f},\n",
           t->sample_s * 1e6, t->batch_s * 1e6, c->rate);
    APPEND("    \"readers\": [");
    for (int i = 0; i < t->nreaders; i++) {
        const bfs_exec_reader *r = &t->readers[i];
        APPEND("%s{\"id\": %u, \"epoch\": %llu, \"batch\": %llu, \"stride\": %lld, "
               "\"consume_batch_per_s\": %.2f, \"think_ms\": %.1f, \"depth\": %d, "
               "\"predicted_wait_ms\": %.1f, \"waited_ms\": %.1f}",
               i ? ", " : "", r->id, (unsigned long long)r->epoch, (unsigned long long)r->k,
               (long long)r->stride, r->own_s > 1e-3 ? 1.0 / r->own_s : 0.0, r->own_s * 1e3,
               c->depth[i], c->wait_s[i] * 1e3, r->wait_s * 1e3);
    }
    APPEND("]}");
    pthread_mutex_unlock(&t->lock);
    return o < len ? o : len - 1;
}
