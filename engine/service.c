/* service.c — the composition root and the /stats writer (see service.h). */
#include "engine/service.h"
#include "engine/dataset/fetch.h"
#include "engine/dataset/prefetch.h"
#include "cache/srccache.h"
#include "engine/claims.h"
#include "engine/engine.h"
#include "engine/exec.h"
#include "engine/ram.h"
#include "engine/tuner.h"
#include "engine/remote/remote.h"
#include "cache/store.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/jsonstr.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Claims of epoch/N/next a mount took ahead of its opens, for one epoch. */
typedef struct ahead {
    struct ahead *next;
    uint64_t epoch;
    int n;                                    /* claims held, oldest first */
    int exhausted;                            /* the group had none left at the last take */
    bfs_group_claim c[BFS_SERVICE_AHEAD_MAX]; /* each prefetched when taken */
} ahead;

struct bfs_service {
    bfs_service_cfg cfg;
    const bfs_pipeline_opts *o;
    bfs_engine *e;
    bfs_exec *x;
    bfs_store *store;   /* cache_dir=, or NULL */
    bfs_tuner *tuner;   /* a mount's autotuner (always runs: fixed values are kept) */
    bfs_claims *claims; /* group=: the group's claim counters, or NULL */
    int cpu_budget;
    int prefetch;
    int pool; /* gpu_pool_mb=: batches in the pool file's windows */
    uint64_t ram_bytes, batch_bytes, cache_bytes;
    char *pipeline; /* MNT/pipeline */
    size_t pipeline_len;
    double start;                    /* when START finished (uptime) */
    pthread_mutex_t ahead_lock;      /* guards aheads */
    ahead *aheads;                   /* claims taken ahead, per epoch */
    _Atomic uint64_t claims_refused; /* opens of epoch/N/next refused with ENODATA */
};

/* ---- open ---------------------------------------------------------------------------- */

/* The store's noteworthy events (corrupt entries removed, saves that failed, a full file
 * system) go to the daemon's log like every other message. */
static void store_log_cb(void *arg, const char *msg)
{
    (void)arg;
    fprintf(stderr, "batchfs: %s\n", msg);
}

/* The store o->cache_dir names ("": none, *out = NULL; "auto": the per-user default
 * directory under /dev/shm, created if needed) with the budget cache_dir_mb. 0 or an
 * error with a message naming the directory in err. */
static int open_store(const bfs_pipeline_opts *o, int sync, bfs_store **out, char *err,
                      size_t errlen)
{
    *out = NULL;
    if (!o->cache_dir[0])
        return 0;
    char dir[1024], why[512] = "";
    const char *path = o->cache_dir;
    int rc;
    if (!strcmp(path, "auto")) {
        if ((rc = bfs_store_default_dir(dir, sizeof dir, why, sizeof why)))
            return bfs_errf(rc, err, errlen, "cache_dir=auto: %s", why);
        path = dir;
    }
    bfs_store_opts so = {.budget_bytes = (uint64_t)o->cache_dir_mb << 20,
                         .sync = (bfs_store_sync)sync,
                         .log_cb = store_log_cb};
    if ((rc = bfs_store_open(path, &so, out, why, sizeof why))) {
        if (!strncmp(why, "cache_dir ", 10)) /* names the directory already */
            return bfs_errf(rc, err, errlen, "%s", why);
        return bfs_errf(rc, err, errlen, "cache_dir=%s: %s", path, why);
    }
    return 0;
}

static int make_pipeline_text(bfs_service *s)
{
    const char *canon = bfs_engine_canonical(s->e);
    size_t cap = strlen(canon) + strlen(bfs_engine_source_path(s->e)) + 4096;
    s->pipeline = malloc(cap);
    if (!s->pipeline)
        return -ENOMEM;
    int n = snprintf(s->pipeline, cap,
                     "# batchfs %s pipeline; data-changing options in canonical form\n%s"
                     "# listing\nepochs = %u\n# identity\nsource = %s\nfingerprint = %016llx\n",
                     BATCHFS_VERSION, canon, s->o->epochs, bfs_engine_source_path(s->e),
                     (unsigned long long)bfs_engine_fingerprint(s->e));
    s->pipeline_len = n > 0 && (size_t)n < cap ? (size_t)n : 0;
    return 0;
}

int bfs_service_open(const bfs_service_cfg *cfg, bfs_service **out, int *failed_at, char *err,
                     size_t errlen)
{
    const bfs_pipeline_opts *o = cfg->pipe;
    int at = BFS_SERVICE_AT_OTHER, rc;
    char note[512] = "";
    bfs_ram_host host;
    *out = NULL;
    if (err && errlen)
        err[0] = '\0';
    bfs_service *s = calloc(1, sizeof *s);
    if (!s) {
        rc = bfs_errf(-ENOMEM, err, errlen, "out of memory");
        goto fail;
    }
    s->cfg = *cfg;
    s->o = o;
    pthread_mutex_init(&s->ahead_lock, NULL);
    if ((rc = bfs_engine_create(cfg->source, o, &s->e, err, errlen))) {
        at = BFS_SERVICE_AT_ENGINE;
        goto fail;
    }
    if (cfg->notes)
        bfs_engine_print_notes(s->e, cfg->notes, cfg->tag);
    s->batch_bytes = bfs_engine_max_batch_bytes(s->e);
    /* the budget: ram_mb, or half of what MemAvailable and the cgroup limit leave; batches
     * that cannot fit in it are refused here, not by the OOM killer at the first read */
    bfs_ram_probe(NULL, NULL, NULL, &host);
    if ((rc = bfs_ram_budget(o, s->batch_bytes, &host, &s->ram_bytes, note, sizeof note, err,
                             errlen)))
        goto fail;
    if (note[0] && cfg->notes && cfg->role == BFS_SERVICE_MOUNT)
        fprintf(cfg->notes, "%s: warning: %s\n", cfg->tag, note);
    if (cfg->check && (rc = cfg->check(cfg->check_arg))) {
        at = BFS_SERVICE_AT_CHECK;
        goto fail;
    }
    if ((rc = open_store(o, cfg->store_sync, &s->store, err, errlen))) {
        if (!cfg->store_optional)
            goto fail;
        s->store = NULL, rc = 0; /* served without the store */
        if (err && errlen)
            err[0] = '\0';
    }
    if (cfg->role == BFS_SERVICE_COMPUTE) {
        s->cache_bytes =
            s->batch_bytes * (uint64_t)(cfg->cache_batches > 0 ? cfg->cache_batches : 0);
        *out = s;
        return 0;
    }
    s->prefetch = o->prefetch == BFS_AUTO ? BFS_PREFETCH_AUTO : o->prefetch;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    s->cpu_budget = o->cpu_budget > 0 ? o->cpu_budget : cpus > 0 ? (int)cpus : 1;
    if (o->cache_mb == BFS_AUTO) {
        /* auto: a quarter of usable memory within the RAM budget, at least room for the
         * prefetch window of one reader; the autotuner sets it from then on */
        uint64_t want = bfs_ram_default_budget(&host) / 2,
                 floor_ = s->batch_bytes * (uint64_t)(s->prefetch + 2);
        if (want > s->ram_bytes / 2)
            want = s->ram_bytes / 2;
        s->cache_bytes = want > floor_ ? want : floor_;
    } else {
        s->cache_bytes = (uint64_t)o->cache_mb << 20;
    }
    if (o->gpu_pool_mb > 0) {
        /* the pool holds the cached batches and those being computed: the cache's budget
         * is what the computing ones leave */
        if (o->cache_mb != BFS_AUTO) {
            rc = bfs_errf(-EINVAL, err, errlen,
                          "gpu_pool_mb= sets the cache's memory (its pool file): give "
                          "cache_mb= or gpu_pool_mb=, not both");
            goto fail;
        }
        int th = o->threads == BFS_AUTO ? s->cpu_budget : o->threads;
        uint64_t pool = (uint64_t)o->gpu_pool_mb << 20, busy = s->batch_bytes * (uint64_t)(th + 2);
        if (pool < 2 * s->batch_bytes + busy) {
            rc = bfs_errf(-EINVAL, err, errlen,
                          "gpu_pool_mb=%lld is too small: batches of %.1f MB need at least %llu "
                          "MiB (two cached and %d being computed)",
                          (long long)o->gpu_pool_mb, s->batch_bytes / 1e6,
                          (unsigned long long)((2 * s->batch_bytes + busy + (1u << 20) - 1) >> 20),
                          th + 2);
            goto fail;
        }
        s->cache_bytes = pool - busy;
    }
    /* group=: after the checks above (a refused mount leaves no group file behind) */
    uint64_t batches = bfs_engine_batches(s->e);
    if (o->group[0] &&
        (rc = o->remote[0] ? bfs_claims_open_remote(o->group, bfs_engine_fingerprint(s->e), batches,
                                                    o->remote, &s->claims, err, errlen)
                           : bfs_claims_open(o->group, bfs_engine_fingerprint(s->e), batches,
                                             &s->claims, err, errlen)))
        goto fail;
    if ((rc = make_pipeline_text(s))) {
        bfs_errf(rc, err, errlen, "out of memory");
        goto fail;
    }
    *out = s;
    return 0;
fail:
    if (failed_at)
        *failed_at = at;
    bfs_service_close(s);
    return rc;
}

/* ---- start, stop, close ---------------------------------------------------------------- */

/* A reader key (pid) is alive while its process exists (EPERM: another user's): the alive
 * function of the executor's reader table, for the mount's readers and the autotuner. */
static int pid_alive(uint64_t key)
{
    return key <= INT32_MAX && (kill((pid_t)key, 0) == 0 || errno == EPERM);
}

int bfs_service_start(bfs_service *s, char *err, size_t errlen)
{
    const bfs_pipeline_opts *o = s->o;
    const char *tag = s->cfg.tag;
    int mount = s->cfg.role == BFS_SERVICE_MOUNT, rc;
    /* threads=auto: a mount starts cpu_budget workers, the autotuner lets 1..all of them
     * run; compute only: the online CPUs */
    int threads = mount ? (o->threads == BFS_AUTO ? s->cpu_budget : o->threads) : s->cfg.threads;
    if ((rc = bfs_exec_create(s->e, threads, s->cache_bytes, &s->x)))
        return bfs_errf(rc, err, errlen, "cannot start workers: %s", bfs_strerror(rc));
    if (s->store)
        bfs_exec_set_store(s->x, s->store);
    if (!mount)
        return 0;
    if (o->gpu_pool_mb > 0) {
        if ((rc = bfs_exec_use_pool(s->x, (uint64_t)o->gpu_pool_mb << 20)))
            return bfs_errf(rc, err, errlen, "gpu_pool_mb=%lld: cannot make the pool file: %s",
                            (long long)o->gpu_pool_mb, bfs_strerror(rc));
        s->pool = 1;
    }
    if (o->remote[0]) {
        char rerr[1024];
        if ((rc = bfs_exec_set_remote(s->x, o, rerr, sizeof rerr))) {
            if (rc != BFS_E_REMOTE || o->remote_fallback == BFS_REMOTE_WAIT)
                return bfs_errf(rc, err, errlen, "%s%s", rerr,
                                rc == BFS_E_REMOTE
                                    ? " (remote_fallback=wait: readers would only wait; "
                                      "remote_fallback=local computes here meanwhile)"
                                    : "");
            if (s->cfg.notes)
                fprintf(s->cfg.notes,
                        "%s: %s; computing batches here until Redis answers "
                        "(remote_fallback=local)\n",
                        tag, rerr);
        }
    }
    bfs_exec_set_prefetch(s->x, s->prefetch);
    bfs_tuner_opts to = {.cpu_budget = o->threads == BFS_AUTO ? s->cpu_budget : o->threads,
                         .ram_bytes = s->ram_bytes,
                         .fixed_threads = o->threads == BFS_AUTO ? 0 : o->threads,
                         .fixed_depth = o->prefetch == BFS_AUTO ? -1 : o->prefetch,
                         .cache_fixed = o->cache_mb != BFS_AUTO || s->pool,
                         .fixed_cache = s->cache_bytes,
                         .batch_samples = bfs_engine_mean_batch_len(s->e),
                         .batch_bytes = s->batch_bytes,
                         .alive = pid_alive};
    if ((rc = bfs_tuner_start(s->x, &to, &s->tuner)) && s->cfg.notes)
        fprintf(s->cfg.notes, "%s: note: autotuner not started (%s): settings stay as given\n", tag,
                bfs_strerror(rc));
    s->start = bfs_mono_s();
    return 0;
}

void bfs_service_shutdown(bfs_service *s)
{
    if (s && s->x)
        bfs_exec_shutdown(s->x);
}

void bfs_service_stop(bfs_service *s)
{
    if (!s)
        return;
    bfs_tuner_stop(s->tuner);
    s->tuner = NULL;
    bfs_exec_destroy(s->x);
    s->x = NULL;
    bfs_store_close(s->store);
    s->store = NULL;
}

/* At close: every claim taken ahead and not opened goes back to the group untried. */
static void return_ahead(bfs_service *s)
{
    while (s->aheads) {
        ahead *a = s->aheads;
        for (int i = 0; i < a->n; i++)
            bfs_claims_return(s->claims, &a->c[i]);
        s->aheads = a->next;
        free(a);
    }
}

void bfs_service_close(bfs_service *s)
{
    if (!s)
        return;
    bfs_service_stop(s);
    if (s->claims)
        return_ahead(s);
    bfs_claims_close(s->claims);
    bfs_engine_destroy(s->e);
    free(s->pipeline);
    pthread_mutex_destroy(&s->ahead_lock);
    free(s);
}

bfs_engine *bfs_service_engine(bfs_service *s)
{
    return s->e;
}

bfs_exec *bfs_service_exec(bfs_service *s)
{
    return s->x;
}

const char *bfs_service_pipeline(const bfs_service *s, size_t *len)
{
    *len = s->pipeline_len;
    return s->pipeline;
}

uint64_t bfs_service_batches(const bfs_service *s)
{
    return bfs_engine_batches(s->e);
}

uint64_t bfs_service_batch_bytes(const bfs_service *s, uint64_t epoch, uint64_t k)
{
    return bfs_engine_batch_bytes(s->e, epoch, k);
}

uint32_t bfs_service_batch_len(const bfs_service *s, uint64_t epoch, uint64_t k)
{
    return bfs_engine_batch_len(s->e, epoch, k);
}

uint64_t bfs_service_fingerprint(const bfs_service *s)
{
    return bfs_engine_fingerprint(s->e);
}

int bfs_service_get_as(bfs_service *s, uint64_t pid, uint64_t epoch, uint64_t k,
                       bfs_exec_cancel *cancel, bfs_batch **out, char *err, size_t errlen)
{
    return bfs_exec_get_as(s->x, pid, pid_alive, epoch, k, cancel, out, err, errlen);
}

int bfs_service_get_cancel(bfs_service *s, uint64_t epoch, uint64_t k, bfs_exec_cancel *cancel,
                           bfs_batch **out, char *err, size_t errlen)
{
    return bfs_exec_get_cancel(s->x, epoch, k, cancel, out, err, errlen);
}

void bfs_service_cancel_wait(bfs_service *s, bfs_exec_cancel *c)
{
    bfs_exec_cancel_wait(s->x, c);
}

void bfs_service_consumed(bfs_service *s, uint64_t epoch, uint64_t k)
{
    bfs_exec_consumed(s->x, epoch, k);
}

void bfs_service_batch_files(bfs_service *s, int on)
{
    /* auto: on the huge-page tmpfs a warm daemon serves ~8% more images (38 MB batches
     * on 2 MiB pages) and ~15% more token bytes (512 KiB batches on 512 KiB folios);
     * but fresh huge pages are dear, so they start once the daemon recycles memory
     * (docs/engine.md, "Batch memory") */
    int huge = s->o->huge_pages;
    if (huge == BFS_HUGE_AUTO)
        huge = BFS_EXEC_HUGE_LATER;
    if (s->pool) /* batches stay in the pool's windows: read by copying */
        on = 0;
    bfs_exec_set_memfd(s->x, on, on ? huge : 0);
}

int bfs_service_pool(bfs_service *s, uint64_t *size)
{
    *size = 0;
    return s->pool ? bfs_exec_pool_fd(s->x, size) : -1;
}

int bfs_service_batch_window(bfs_service *s, const bfs_batch *b, uint64_t *off)
{
    return s->pool && bfs_exec_window(s->x, b, off);
}

int bfs_service_huge_files(bfs_service *s)
{
    bfs_exec_stats st;
    bfs_exec_get_stats(s->x, &st);
    return st.huge_files;
}

int bfs_service_has_group(const bfs_service *s)
{
    return s->claims != NULL;
}

void bfs_service_claim_return(bfs_service *s, const bfs_group_claim *c)
{
    bfs_claims_return(s->claims, c);
}

void bfs_service_claim_give_back(bfs_service *s, const bfs_group_claim *c)
{
    bfs_claims_give_back(s->claims, c);
}

uint64_t bfs_service_max_batch_bytes(const bfs_service *s)
{
    return s->batch_bytes;
}

uint64_t bfs_service_samples(const bfs_service *s)
{
    return bfs_engine_samples(s->e);
}

int bfs_service_sequences(const bfs_service *s)
{
    return bfs_engine_opts(s->e)->sequences;
}

const char *bfs_service_canonical(const bfs_service *s)
{
    return bfs_engine_canonical(s->e);
}

const char *bfs_service_source_path(const bfs_service *s)
{
    return bfs_engine_source_path(s->e);
}

int bfs_service_batch_indices(bfs_service *s, uint64_t epoch, uint64_t k, uint64_t *idx)
{
    return bfs_engine_batch_indices(s->e, epoch, k, idx);
}

int bfs_service_get(bfs_service *s, uint64_t epoch, uint64_t k, bfs_batch **out, char *err,
                    size_t errlen)
{
    return bfs_exec_get(s->x, epoch, k, out, err, errlen);
}

int bfs_service_prefetch(bfs_service *s, uint64_t epoch, uint64_t k)
{
    return bfs_exec_prefetch(s->x, epoch, k);
}

void bfs_service_get_counters(bfs_service *s, bfs_service_counters *c)
{
    bfs_exec_stats st;
    bfs_exec_get_stats(s->x, &st);
    c->threads = st.threads;
    c->buffer_allocs = st.buffer_allocs;
    c->stages = st.stages;
}

void bfs_service_sample_cache(bfs_service *s, bfs_sample_cache_counts *c)
{
    bfs_samplecache_stats sc;
    bfs_engine_sample_cache_stats(s->e, &sc);
    *c = (bfs_sample_cache_counts){.hits = sc.hits,
                                   .misses = sc.misses,
                                   .inserts = sc.inserts,
                                   .refused_budget = sc.refused_budget,
                                   .bytes = sc.bytes,
                                   .budget_bytes = sc.budget_bytes};
}

void bfs_augment_ops_json(const bfs_stage_stats *st, char *buf, size_t len)
{
    size_t at = 0;
    for (int i = -1; i <= BFS_STAGE_OPS && at < len; i++) {
        int n;
        if (i < 0 || i == BFS_STAGE_OPS) /* the braces */
            n = snprintf(buf + at, len - at, i < 0 ? "{" : "}");
        else if (st->op_n[i])
            n = snprintf(buf + at, len - at, "%s\"%s\": {\"applied\": %llu, \"us_each\": %.1f}",
                         at > 1 ? ", " : "", bfs_stage_op_name(i), (unsigned long long)st->op_n[i],
                         st->op_ns[i] / (double)st->op_n[i] / 1e3);
        else
            n = 0;
        at += n > 0 ? (size_t)n : 0;
    }
}

void bfs_sample_cache_json(const bfs_sample_cache_counts *c, char *buf, size_t len)
{
    bfs_samplecache_stats sc = {.hits = c->hits,
                                .misses = c->misses,
                                .inserts = c->inserts,
                                .refused_budget = c->refused_budget,
                                .bytes = c->bytes,
                                .budget_bytes = c->budget_bytes};
    bfs_samplecache_stats_json(&sc, buf, len);
}

void bfs_remote_display(const char *remote, char *buf, size_t len)
{
    bfs_remote_url u;
    bfs_remote_parse_url(remote, &u, NULL, 0); /* (checked when the options were parsed) */
    bfs_remote_url_text(&u, buf, len);
}

int bfs_group_reset(const char *source, const bfs_pipeline_opts *o, uint64_t *fingerprint,
                    long long *deleted, char *err, size_t errlen)
{
    bfs_engine *e;
    int rc = bfs_engine_create(source, o, &e, err, errlen);
    if (rc)
        return rc;
    *fingerprint = bfs_engine_fingerprint(e);
    bfs_engine_destroy(e);
    *deleted = 0;
    return bfs_claims_reset_remote(o->group, *fingerprint, o->remote, deleted, err, errlen);
}

/* ---- group=: claims taken ahead ------------------------------------------------------- */

int bfs_service_next_claim(bfs_service *s, uint64_t epoch, bfs_group_claim *c)
{
    int pf = bfs_exec_prefetch_depth(s->x); /* (per batch: not the stats, a walk) */
    int depth = pf < 0 ? 0 : pf > BFS_SERVICE_AHEAD_MAX ? BFS_SERVICE_AHEAD_MAX : pf;
    pthread_mutex_lock(&s->ahead_lock);
    ahead **pa = &s->aheads;
    while (*pa && (*pa)->epoch != epoch)
        pa = &(*pa)->next;
    if (!*pa && depth > 0 && (*pa = calloc(1, sizeof **pa))) /* (no memory: none ahead) */
        (*pa)->epoch = epoch;
    ahead *a = *pa;
    int rc = 0;
    if (a && a->n) {
        *c = a->c[0];
        memmove(a->c, a->c + 1, (size_t)--a->n * sizeof a->c[0]);
    } else {
        rc = bfs_claims_take(s->claims, epoch, c);
    }
    while (!rc && a && !a->exhausted && a->n < depth) {
        int r = bfs_claims_take(s->claims, epoch, &a->c[a->n]);
        if (r == -ENODATA)
            a->exhausted = 1;
        if (r)
            break; /* (a Redis error: this open's claim is served all the same) */
        bfs_exec_prefetch(s->x, epoch, a->c[a->n++].batch);
    }
    if (a && !a->n && (a->exhausted || rc)) { /* (nothing held: forget the epoch) */
        *pa = a->next;
        free(a);
    }
    pthread_mutex_unlock(&s->ahead_lock);
    if (rc == -ENODATA)
        atomic_fetch_add(&s->claims_refused, 1);
    return rc;
}

/* ---- /stats --------------------------------------------------------------------------- */

/* A growing text buffer. */
typedef struct text {
    char *s;
    size_t len, cap;
} text;

static void tprintf(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tprintf(text *t, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = t->s ? vsnprintf(t->s + t->len, t->cap - t->len, fmt, ap) : -1;
        va_end(ap);
        if (n >= 0 && t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap ? t->cap * 2 : 4096;
        char *s = realloc(t->s, cap);
        if (!s)
            return;
        t->s = s, t->cap = cap;
    }
}

void bfs_service_stats(bfs_service *s, const bfs_service_front *f, char **out, size_t *len)
{
    text tt = {0}, *t = &tt;
    bfs_exec_stats st;
    bfs_exec_get_stats(s->x, &st);
    double up = bfs_mono_s() - s->start;
    double n = st.stages.samples ? (double)st.stages.samples : 1;
    tprintf(t, "{\n  \"version\": \"%s\",\n  \"fingerprint\": \"%016llx\",\n", BATCHFS_VERSION,
            (unsigned long long)bfs_engine_fingerprint(s->e));
    tprintf(t, "  \"uptime_s\": %.1f,\n  \"threads\": %d,\n", up, st.threads);
    tprintf(t, "  \"images\": %llu,\n  \"images_per_s\": %.1f,\n",
            (unsigned long long)st.stages.samples, up > 0 ? st.stages.samples / up : 0.0);
    tprintf(t,
            "  \"stage_us_per_image\": {\"read\": %.1f, \"decode\": %.1f, \"resize\": %.1f, "
            "\"augment\": %.1f, \"encode\": %.1f},\n",
            st.stages.read_ns / n / 1e3, st.stages.decode_ns / n / 1e3,
            st.stages.resize_ns / n / 1e3, st.stages.augment_ns / n / 1e3,
            st.stages.encode_ns / n / 1e3);
    char ops[BFS_STAGE_OPS * 64 + 4];
    bfs_augment_ops_json(&st.stages, ops, sizeof ops);
    tprintf(t, "  \"augment_ops\": %s,\n", ops);
    tprintf(t,
            "  \"decodes\": {\"cropped\": %llu, \"full\": %llu, \"scaled\": %llu, \"raw\": "
            "%llu, \"windowed\": %llu},\n  \"bad_samples\": %llu,\n  \"texts_cut\": %llu,\n",
            (unsigned long long)st.stages.decode_cropped, (unsigned long long)st.stages.decode_full,
            (unsigned long long)st.stages.decode_scaled, (unsigned long long)st.stages.decode_raw,
            (unsigned long long)st.stages.decode_windowed,
            (unsigned long long)st.stages.bad_samples, (unsigned long long)st.stages.texts_cut);
    bfs_bad_sample bad[BFS_ENGINE_RECENT_BAD];
    int nbad = bfs_engine_recent_bad(s->e, bad, BFS_ENGINE_RECENT_BAD);
    tprintf(t, "  \"recent_bad_samples\": [");
    for (int i = 0; i < nbad; i++) {
        char name[sizeof bad[i].name * 6], reason[sizeof bad[i].reason * 6];
        bfs_json_escape(name, sizeof name, bad[i].name);
        bfs_json_escape(reason, sizeof reason, bad[i].reason);
        tprintf(t, "%s{\"index\": %llu, \"name\": \"%s\", \"reason\": \"%s\"}", i ? ", " : "",
                (unsigned long long)bad[i].index, name, reason);
    }
    tprintf(t, "],\n");
    if (bfs_engine_mix_count(s->e)) { /* a mixture: samples drawn per source */
        tprintf(t, "  \"sources\": [");
        uint64_t count, drawn;
        const char *path;
        for (uint32_t k = 0; (path = bfs_engine_mix_source(s->e, k, &count, &drawn)); k++) {
            char esc[PATH_MAX * 6 + 1];
            bfs_json_escape(esc, sizeof esc, path);
            tprintf(t, "%s{\"path\": \"%s\", \"samples\": %llu, \"drawn\": %llu}", k ? ", " : "",
                    esc, (unsigned long long)count, (unsigned long long)drawn);
        }
        tprintf(t, "],\n");
    }
    tprintf(t,
            "  \"batches\": {\"served\": %llu, \"computed\": %llu, \"failed\": %llu, "
            "\"in_flight\": %u, \"prefetched\": %llu, \"opened\": %llu, \"opened_bytes\": %llu},\n",
            (unsigned long long)f->served, (unsigned long long)st.computed,
            (unsigned long long)st.failed, st.in_flight, (unsigned long long)st.prefetched,
            (unsigned long long)f->opened, (unsigned long long)f->opened_bytes);
    tprintf(t,
            "  \"cache\": {\"hits\": %llu, \"joins\": %llu, \"misses\": %llu, \"evictions\": "
            "%llu, \"evicted_passed\": %llu, \"evicted_ahead\": %llu, \"bytes\": %llu, "
            "\"budget_bytes\": %llu, \"passed_budget_bytes\": %llu, \"passed_regrets\": %llu, "
            "\"buffers\": %d, \"buffer_allocs\": %llu, \"files\": %llu, \"file_budget\": %llu, "
            "\"files_refused\": %llu, \"fd_limit\": %llu},\n",
            (unsigned long long)st.hits, (unsigned long long)st.joins,
            (unsigned long long)st.misses, (unsigned long long)st.evictions,
            (unsigned long long)st.evicted_passed, (unsigned long long)st.evicted_ahead,
            (unsigned long long)st.cached_bytes, (unsigned long long)st.cache_budget,
            (unsigned long long)st.passed_budget, (unsigned long long)st.passed_regrets, st.buffers,
            (unsigned long long)st.buffer_allocs, (unsigned long long)st.files,
            (unsigned long long)st.file_budget, (unsigned long long)st.files_refused,
            (unsigned long long)st.fd_limit);
    bfs_samplecache_stats sc;
    bfs_engine_sample_cache_stats(s->e, &sc);
    if (sc.budget_bytes) {
        char scj[512];
        bfs_samplecache_stats_json(&sc, scj, sizeof scj);
        tprintf(t, "  \"sample_cache\": %s,\n", scj);
    }
    if (s->tuner) {
        char tj[16384];
        bfs_tuner_json(s->tuner, tj, sizeof tj);
        tprintf(t, "  \"autotune\": %s,\n", tj);
    }
    if (s->store) {
        bfs_store_stats ss;
        bfs_store_get_stats(s->store, &ss);
        tprintf(t,
                "  \"cache_dir\": {\"served\": %llu, \"published\": %llu, \"hits\": %llu, "
                "\"misses\": %llu, \"busy\": %llu, \"corrupt\": %llu, \"evictions\": %llu, "
                "\"zero_copy\": %llu, \"unpublished_substituted\": %llu, \"save_errors\": %llu, "
                "\"no_space\": %llu, \"usage_bytes\": %llu, \"budget_bytes\": %llu},\n",
                (unsigned long long)st.store_hits, (unsigned long long)st.store_publishes,
                (unsigned long long)ss.hits, (unsigned long long)ss.misses,
                (unsigned long long)ss.busy, (unsigned long long)ss.corrupt,
                (unsigned long long)ss.evictions, (unsigned long long)ss.taken,
                (unsigned long long)st.store_withheld, (unsigned long long)ss.save_errors,
                (unsigned long long)ss.no_space, (unsigned long long)ss.usage_bytes,
                (unsigned long long)ss.budget_bytes);
    }
    if (st.remote) {
        char url[700];
        bfs_remote_display(s->o->remote, url, sizeof url);
        tprintf(t,
                "  \"remote\": {\"url\": \"%s\", \"workers\": %d, \"requested\": %llu, "
                "\"hits\": %llu, \"fallbacks\": %llu, \"errors\": %llu, \"corrupt\": %llu, "
                "\"declined\": %llu, \"key\": \"%s\", \"wait_s\": %.6f},\n",
                url, st.remote_workers, (unsigned long long)st.remote_requested,
                (unsigned long long)st.remote_hits, (unsigned long long)st.remote_fallbacks,
                (unsigned long long)st.remote_errors, (unsigned long long)st.remote_corrupt,
                (unsigned long long)st.remote_declined, st.remote_key_id, st.remote_wait_ns / 1e9);
    }
    bfs_fetch_stats fst;
    bfs_fetch_get_stats(&fst);
    if (fst.requests) { /* an s3:// or https:// source (fetch.h): its object store */
        bfs_prefetch_stats pst;
        bfs_prefetch_get_stats(&pst);
        bfs_srccache_stats cst;
        bfs_srccache_get_stats(&cst);
        tprintf(t,
                "  \"source\": {\"requests\": %llu, \"bytes\": %llu, \"retries\": %llu, "
                "\"failures\": %llu, \"wait_s\": %.6f, \"prefetch\": {\"requests\": %llu, "
                "\"samples\": %llu, \"hits\": %llu, \"waits\": %llu, \"dropped\": %llu, "
                "\"ahead\": %d, \"fetched_batches\": %llu}, "
                "\"cache\": {\"hits\": %llu, \"hit_bytes\": %llu, \"stored\": %llu, "
                "\"stored_bytes\": %llu, \"full\": %llu, \"evicted\": %llu, "
                "\"usage_bytes\": %llu, \"budget_bytes\": %llu}},\n",
                (unsigned long long)fst.requests, (unsigned long long)fst.bytes,
                (unsigned long long)fst.retries, (unsigned long long)fst.failures,
                fst.wait_ns / 1e9, (unsigned long long)pst.runs, (unsigned long long)pst.ranges,
                (unsigned long long)pst.hits, (unsigned long long)pst.waits,
                (unsigned long long)pst.dropped, st.fetch_ahead,
                (unsigned long long)st.fetched_batches, (unsigned long long)cst.hits,
                (unsigned long long)cst.hit_bytes, (unsigned long long)cst.stored,
                (unsigned long long)cst.stored_bytes, (unsigned long long)cst.full,
                (unsigned long long)cst.evicted, (unsigned long long)cst.usage_bytes,
                (unsigned long long)cst.budget_bytes);
    }
    if (s->claims) {
        bfs_claims_stats cs;
        bfs_claims_get_stats(s->claims, &cs);
        unsigned held = 0;
        pthread_mutex_lock(&s->ahead_lock);
        for (ahead *a = s->aheads; a; a = a->next)
            held += (unsigned)a->n;
        pthread_mutex_unlock(&s->ahead_lock);
        tprintf(t,
                "  \"group\": {\"name\": \"%s\", \"claims\": %llu, \"given_back\": %llu, "
                "\"lost\": %llu, \"exhausted\": %llu, \"ahead\": %u},\n",
                bfs_claims_name(s->claims), (unsigned long long)f->claims_served,
                (unsigned long long)cs.given_back, (unsigned long long)cs.lost,
                (unsigned long long)atomic_load(&s->claims_refused), held);
    }
    tprintf(t,
            "  \"reads\": {\"requests\": %llu, \"bytes\": %llu, \"errors\": %llu, "
            "\"interrupted\": %llu},\n",
            (unsigned long long)f->reads, (unsigned long long)f->bytes,
            (unsigned long long)f->read_errors, (unsigned long long)f->interrupted);
    tprintf(t,
            "  \"passthrough\": {\"active\": %s, \"opens\": %llu, \"backing_files\": %u, "
            "\"huge_pages\": %s},\n",
            f->pt_active ? "true" : "false", (unsigned long long)f->pt_opens, f->backing_files,
            st.huge_files ? "true" : "false");
    tprintf(t,
            "  \"pool\": {\"bytes\": %llu, \"used\": %llu, \"misses\": %llu, \"served\": %s, "
            "\"windows\": %llu},\n",
            (unsigned long long)st.pool_bytes, (unsigned long long)st.pool_used,
            (unsigned long long)st.pool_misses, f->pool_on ? "true" : "false",
            (unsigned long long)f->windows);
    bfs_exec_reader rd[BFS_EXEC_MAX_READERS];
    int nr = bfs_exec_readers(s->x, bfs_mono_s(), pid_alive, rd, BFS_EXEC_MAX_READERS);
    tprintf(t, "  \"prefetch\": {\"depth\": %d, \"streams\": [", st.prefetch);
    for (int i = 0; i < nr; i++)
        tprintf(t,
                "%s\n    {\"id\": %u, \"pid\": %llu, \"epoch\": %llu, \"batch\": %llu, "
                "\"stride\": %lld, \"walk\": \"%s\", \"depth\": %d, \"batches\": %llu, "
                "\"step_ms\": %.1f, \"wait_ms\": %.1f, \"idle_s\": %.1f}",
                i ? "," : "", rd[i].id, (unsigned long long)rd[i].key,
                (unsigned long long)rd[i].epoch, (unsigned long long)rd[i].k,
                (long long)rd[i].stride,
                rd[i].walk == BFS_EXEC_WALK_NAMES    ? "names"
                : rd[i].walk == BFS_EXEC_WALK_STRIDE ? "stride"
                                                     : "unknown",
                rd[i].depth, (unsigned long long)rd[i].batches, rd[i].own_s * 1e3,
                rd[i].wait_s * 1e3, rd[i].idle_s);
    tprintf(t, "%s]}\n}\n", nr ? "\n  " : "");
    *out = tt.s;
    *len = tt.len;
}
