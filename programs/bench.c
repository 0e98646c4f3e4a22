/* bench.c — in-process pipeline benchmark (see bench.h). */
#include "programs/bench.h"
#include "base/clock.h"
#include "base/err.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* CPU seconds of the whole process (every thread), user + system */
static double process_cpu(void)
{
    return bfs_clock_s(CLOCK_PROCESS_CPUTIME_ID);
}

/* One epoch of the timed part. */
typedef struct epoch_row {
    uint64_t epoch, images;
    double secs;
    uint64_t hits, misses, inserts; /* sample cache, during this epoch */
} epoch_row;

int bfs_bench_run(const char *source, const bfs_pipeline_opts *o, const bfs_bench_opts *b,
                  FILE *out)
{
    char err[1024];
    int prefetch = o->prefetch == BFS_AUTO ? BFS_PREFETCH_AUTO : o->prefetch;
    /* the engine, the RAM budget (batches past the memory the mount would have are
     * refused as the mount refuses them), cache_dir='s store; workers whose cache holds
     * the prefetch window */
    bfs_service_cfg cfg = {.source = source,
                           .pipe = o,
                           .role = BFS_SERVICE_COMPUTE,
                           .notes = stderr,
                           .tag = "batchfs",
                           .threads = o->threads == BFS_AUTO ? 0 : o->threads,
                           .cache_batches = prefetch + 1};
    bfs_service *svc;
    int rc = bfs_service_open(&cfg, &svc, NULL, err, sizeof err);
    if (!rc && (rc = bfs_service_start(svc, err, sizeof err)))
        bfs_service_close(svc);
    if (rc) {
        fprintf(stderr, "batchfs: %s\n", err);
        return rc;
    }
    uint64_t nb = bfs_service_batches(svc);
    /* batches are read in order, continuing into the next epochs when one epoch has
     * fewer than asked for: a short epoch must not turn the run into a warm-up */
    uint64_t want = b->batches ? b->batches : 20;
    uint64_t avail = (uint64_t)(o->epochs - b->epoch) * nb;
    if (want > avail)
        want = avail;
    uint64_t bytes = bfs_service_max_batch_bytes(svc);
    /* token datasets: rows instead of images, and no decode to compare with */
    int seq = bfs_service_sequences(svc);
    const char *unit = seq ? "rows" : "images";
    size_t ref_n = seq ? 0 : (size_t)(b->reference > 0 ? b->reference : 400);
    uint64_t *ref_idx = calloc(ref_n, sizeof *ref_idx);
    size_t ref_have = 0;
    /* Warm-up, untimed: the first batches pay for fresh buffers (page faults), cold
     * decoder state and page-cache misses; a daemon runs in the steady state after. */
    /* warm-up batches come from another epoch, so the timed ones are computed fresh */
    /* warm-up from an epoch the timed part does not read (the last one), if any; with
     * sample_cache_mb it also fills the cache for its samples (entries are per sample,
     * not per epoch), which makes the timed first epoch look a little better, never worse */
    uint64_t last_read = b->epoch + (want - 1) / nb;
    uint64_t warm_epoch = o->epochs - 1;
    uint64_t warm = warm_epoch > last_read ? (nb < 2 ? nb : 2) : 0;
    for (uint64_t k = 0; k < warm && !rc; k++) {
        bfs_batch *bt;
        if ((rc = bfs_service_get(svc, warm_epoch, k, &bt, err, sizeof err)))
            fprintf(stderr, "batchfs: %s\n", err);
        bfs_batch_release(bt);
    }
    bfs_service_counters warm_st;
    bfs_service_get_counters(svc, &warm_st);
    uint64_t images = 0, batches_bytes = 0;
    /* the reference decodes the same files the run reads: every stride-th of them, taken
     * from the plan; it is timed in two halves, before and after the run, so a change of
     * load on a shared machine during the run shifts both sides alike */
    uint64_t stride = ref_n ? want * bfs_service_batch_len(svc, b->epoch, 0) / ref_n + 1 : 1,
             pos = 0;
    uint64_t *bidx = malloc(bfs_service_batch_len(svc, b->epoch, 0) * sizeof *bidx);
    for (uint64_t i = 0; i < want && ref_idx && bidx && ref_have < ref_n; i++) {
        int n = bfs_service_batch_indices(svc, b->epoch + i / nb, i % nb, bidx);
        for (int j = 0; j < n && ref_have < ref_n; j++, pos++)
            if (pos % stride == 0)
                ref_idx[ref_have++] = bidx[j];
    }
    free(bidx);
    size_t half = ref_have / 2, used_a = 0, used_b = 0;
    double cpu_a = 0, cpu_b = 0;
    double ref_a = bfs_reference_rate(source, ref_idx, half, &used_a, &cpu_a);
    /* per-epoch rows when the run spans epochs (the sample cache's epoch 1 vs epoch 0);
     * prefetch stops at each epoch's end so an epoch's time holds only its batches */
    uint64_t nep = (want + nb - 1) / nb;
    epoch_row *rows = calloc(nep ? nep : 1, sizeof *rows);
    if (!rows)
        rc = -ENOMEM;
    double t0 = bfs_mono_s(), cpu0 = process_cpu(), ep_t0 = t0;
    bfs_sample_cache_counts sc0, sc1;
    bfs_service_sample_cache(svc, &sc0);
    for (uint64_t i = 0; i < want && !rc; i++) {
        uint64_t ep = b->epoch + i / nb, k = i % nb;
        for (int p = 1; p <= prefetch && i + (uint64_t)p < want && (i + (uint64_t)p) / nb == i / nb;
             p++)
            bfs_service_prefetch(svc, b->epoch + (i + (uint64_t)p) / nb, (i + (uint64_t)p) % nb);
        bfs_batch *bt;
        if ((rc = bfs_service_get(svc, ep, k, &bt, err, sizeof err))) {
            fprintf(stderr, "batchfs: %s\n", err);
            break;
        }
        uint32_t len = bfs_service_batch_len(svc, ep, k);
        images += len;
        rows[i / nb].images += len;
        batches_bytes += bfs_batch_size(bt);
        bfs_batch_release(bt);
        if (k == nb - 1 || i + 1 == want) { /* the end of an epoch (or of the run) */
            double t = bfs_mono_s();
            bfs_service_sample_cache(svc, &sc1);
            epoch_row *r = &rows[i / nb];
            r->epoch = ep;
            r->secs = t - ep_t0;
            r->hits = sc1.hits - sc0.hits;
            r->misses = sc1.misses - sc0.misses;
            r->inserts = sc1.inserts - sc0.inserts;
            ep_t0 = t, sc0 = sc1;
        }
    }
    double secs = bfs_mono_s() - t0, cpu_secs = process_cpu() - cpu0;
    bfs_sample_cache_counts sc;
    bfs_service_sample_cache(svc, &sc);
    bfs_service_counters st;
    bfs_service_get_counters(svc, &st);
    bfs_service_stop(svc); /* (no worker left to compete with the reference) */
    /* stage times of the timed part only */
    st.stages.samples -= warm_st.stages.samples;
    st.stages.read_ns -= warm_st.stages.read_ns;
    st.stages.decode_ns -= warm_st.stages.decode_ns;
    st.stages.resize_ns -= warm_st.stages.resize_ns;
    st.stages.augment_ns -= warm_st.stages.augment_ns;
    for (int i = 0; i < BFS_STAGE_OPS; i++) {
        st.stages.op_ns[i] -= warm_st.stages.op_ns[i];
        st.stages.op_n[i] -= warm_st.stages.op_n[i];
    }
    st.stages.encode_ns -= warm_st.stages.encode_ns;
    st.stages.decode_cropped -= warm_st.stages.decode_cropped;
    st.stages.decode_full -= warm_st.stages.decode_full;
    st.stages.decode_scaled -= warm_st.stages.decode_scaled;
    st.stages.decode_raw -= warm_st.stages.decode_raw;
    st.stages.decode_windowed -= warm_st.stages.decode_windowed;
    st.stages.bad_samples -= warm_st.stages.bad_samples;
    st.buffer_allocs -= warm_st.buffer_allocs;
    double ref_b =
        rc ? 0 : bfs_reference_rate(source, ref_idx + half, ref_have - half, &used_b, &cpu_b);
    size_t ref_used = used_a + used_b;
    /* images per second over both halves together */
    double ref = ref_a > 0 && ref_b > 0 ? ref_used / (used_a / ref_a + used_b / ref_b) : 0;
    double ref_cpu = cpu_a > 0 && cpu_b > 0 ? ref_used / (used_a / cpu_a + used_b / cpu_b) : 0;
    free(ref_idx);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double rss_mb = ru.ru_maxrss / 1024.0;
    if (rc) {
        free(rows);
        bfs_service_close(svc);
        return rc;
    }
    double ips = secs > 0 ? images / secs : 0;
    double per_core = ips / st.threads;
    double ratio = ref > 0 ? per_core / ref : 0;
    /* the same comparison in CPU time: robust when other processes share the cores */
    double cpu_per_image = images ? cpu_secs / images : 0;
    double ratio_cpu = cpu_per_image > 0 && ref_cpu > 0 ? (1.0 / cpu_per_image) / ref_cpu : 0;
    double n = st.stages.samples ? (double)st.stages.samples : 1;
    if (b->json) {
        fprintf(
            out,
            "{\"images\": %llu, \"batches\": %llu, \"seconds\": %.4f, \"images_per_s\": %.1f, "
            "\"threads\": %d, \"images_per_s_core\": %.1f, "
            "\"decode_limit_images_per_s_core\": %.1f, \"ratio_per_core\": %.3f, "
            "\"images_per_cpu_s\": %.1f, \"decode_limit_images_per_cpu_s\": %.1f, "
            "\"ratio_cpu\": %.3f, "
            "\"reference_images\": %zu, \"peak_rss_mb\": %.1f, \"batch_bytes\": %llu, "
            "\"stage_us_per_image\": {\"read\": %.1f, \"decode\": %.1f, \"resize\": %.1f, "
            "\"augment\": %.1f, \"encode\": %.1f}, \"decodes\": {\"cropped\": %llu, \"full\": "
            "%llu, "
            "\"scaled\": %llu, \"raw\": %llu, \"windowed\": %llu}, \"bad_samples\": %llu, "
            "\"buffer_allocs\": %llu, \"fingerprint\": \"%016llx\", ",
            (unsigned long long)images, (unsigned long long)want, secs, ips, st.threads, per_core,
            ref, ratio, cpu_per_image > 0 ? 1.0 / cpu_per_image : 0.0, ref_cpu, ratio_cpu, ref_used,
            rss_mb, (unsigned long long)bytes, st.stages.read_ns / n / 1e3,
            st.stages.decode_ns / n / 1e3, st.stages.resize_ns / n / 1e3,
            st.stages.augment_ns / n / 1e3, st.stages.encode_ns / n / 1e3,
            (unsigned long long)st.stages.decode_cropped, (unsigned long long)st.stages.decode_full,
            (unsigned long long)st.stages.decode_scaled, (unsigned long long)st.stages.decode_raw,
            (unsigned long long)st.stages.decode_windowed,
            (unsigned long long)st.stages.bad_samples, (unsigned long long)st.buffer_allocs,
            (unsigned long long)bfs_service_fingerprint(svc));
        char scj[512];
        bfs_sample_cache_json(&sc, scj, sizeof scj);
        char ops[BFS_STAGE_OPS * 64 + 4];
        bfs_augment_ops_json(&st.stages, ops, sizeof ops);
        fprintf(out, "\"augment_ops\": %s, \"sample_cache\": %s, \"epochs\": [", ops, scj);
        for (uint64_t i = 0; i < nep; i++)
            fprintf(out,
                    "%s{\"epoch\": %llu, \"images\": %llu, \"seconds\": %.4f, "
                    "\"images_per_s\": %.1f, \"sample_cache_hits\": %llu, "
                    "\"sample_cache_misses\": %llu, \"sample_cache_inserts\": %llu}",
                    i ? ", " : "", (unsigned long long)rows[i].epoch,
                    (unsigned long long)rows[i].images, rows[i].secs,
                    rows[i].secs > 0 ? rows[i].images / rows[i].secs : 0.0,
                    (unsigned long long)rows[i].hits, (unsigned long long)rows[i].misses,
                    (unsigned long long)rows[i].inserts);
        fprintf(out, "]}\n");
    } else {
        fprintf(out, "source:       %s (%llu samples)\n", source,
                (unsigned long long)bfs_service_samples(svc));
        fprintf(out, "pipeline:     %016llx\n%s", (unsigned long long)bfs_service_fingerprint(svc),
                bfs_service_canonical(svc));
        fprintf(out, "read:         %llu batches from epoch %llu on, %llu %s, %.1f MB in %.3f s\n",
                (unsigned long long)want, (unsigned long long)b->epoch, (unsigned long long)images,
                unit, batches_bytes / 1e6, secs);
        fprintf(out, "throughput:   %.1f %s/s with %d threads (%.1f %s/s per core)\n", ips, unit,
                st.threads, per_core, unit);
        if (seq) {
            fprintf(out,
                    "stages:       per row: read and gather %.1f us, encode %.1f us (worker "
                    "time); %llu bad documents\n",
                    st.stages.read_ns / n / 1e3, st.stages.encode_ns / n / 1e3,
                    (unsigned long long)st.stages.bad_samples);
            fprintf(out, "CPU time:     %.1f rows per CPU second (all threads)\n",
                    cpu_per_image > 0 ? 1.0 / cpu_per_image : 0.0);
        } else {
            fprintf(out,
                    "stages:       per image: read %.1f us, decode %.1f us, resize (crop, "
                    "flip, cast) %.1f us, augment %.1f us, encode %.1f us (worker time)\n",
                    st.stages.read_ns / n / 1e3, st.stages.decode_ns / n / 1e3,
                    st.stages.resize_ns / n / 1e3, st.stages.augment_ns / n / 1e3,
                    st.stages.encode_ns / n / 1e3);
            int printed = 0; /* the recipe ops: time per use, uses */
            for (int i = 0; i < BFS_STAGE_OPS; i++)
                if (st.stages.op_n[i])
                    fprintf(out, "%s%s %.1f us x %llu",
                            printed++ ? ", " : "ops:          ", bfs_stage_op_name(i),
                            st.stages.op_ns[i] / (double)st.stages.op_n[i] / 1e3,
                            (unsigned long long)st.stages.op_n[i]);
            if (printed)
                fprintf(out, "\n");
            fprintf(out,
                    "decodes:      %llu cropped (%llu from restart-segment windows), %llu full, "
                    "%llu with scaled IDCT, %llu raw; %llu bad samples\n",
                    (unsigned long long)st.stages.decode_cropped,
                    (unsigned long long)st.stages.decode_windowed,
                    (unsigned long long)st.stages.decode_full,
                    (unsigned long long)st.stages.decode_scaled,
                    (unsigned long long)st.stages.decode_raw,
                    (unsigned long long)st.stages.bad_samples);
            fprintf(out,
                    "reference:    full decode (JPEG: tjDecompress2 to RGB; PNG, WebP: libspng, "
                    "libwebp), 1 core, same files (%zu images): %.1f images/s\n",
                    ref_used, ref);
            fprintf(out,
                    "ratio:        %.2f per core (batchfs images/s per core / full-decode "
                    "images/s on one core)\n",
                    ratio);
            fprintf(out,
                    "CPU time:     %.1f images per CPU second (all threads) vs %.1f for the "
                    "full decode: ratio %.2f (robust to other load on the machine)\n",
                    cpu_per_image > 0 ? 1.0 / cpu_per_image : 0.0, ref_cpu, ratio_cpu);
        }
        fprintf(out, "peak RSS:     %.1f MB\n", rss_mb);
        if (sc.budget_bytes)
            fprintf(out,
                    "sample cache: %llu hits, %llu misses, %llu inserted, %llu refused (budget), "
                    "%.1f of %.1f MB (whole run, warm-up included)\n",
                    (unsigned long long)sc.hits, (unsigned long long)sc.misses,
                    (unsigned long long)sc.inserts, (unsigned long long)sc.refused_budget,
                    sc.bytes / 1e6, sc.budget_bytes / 1e6);
        for (uint64_t i = 0; nep > 1 && i < nep; i++)
            fprintf(out,
                    "epoch %-6llu  %llu images in %.3f s: %.1f images/s; sample cache %llu hits, "
                    "%llu misses\n",
                    (unsigned long long)rows[i].epoch, (unsigned long long)rows[i].images,
                    rows[i].secs, rows[i].secs > 0 ? rows[i].images / rows[i].secs : 0.0,
                    (unsigned long long)rows[i].hits, (unsigned long long)rows[i].misses);
    }
    free(rows);
    bfs_service_close(svc);
    return 0;
}
