/*
 * batch_worker.c — `batchfs worker` (bfs_worker_run, declared in api.h): the serving side
 * of remote= that the executor's remote side asks (exec.c). A worker opens the pipeline's
 * service like a mount would, so its fingerprint is the one of every mount with the same
 * dataset and data-changing options, and serves that pipeline's job stream only: it takes
 * a job (a dead worker's first, after remote_claim_ms), computes the batch with the
 * executor unless it is stored already, stores it in Redis for remote_ttl seconds
 * (authenticated with remote_key=, if given), acknowledges, announces. A batch it cannot
 * compute from its own copy or with its own resources, or that holds a substitute for a
 * sample bad here, is declined instead: mounts compute it themselves. Jobs whose askers no
 * longer wait are skipped. Jobs of pipelines that no worker serves are named in the log
 * with the options that differ. Heartbeats (every second, a thread of their own) let
 * mounts count the live workers; a stopping worker leaves their set at once.
 *
 * Neighbours: programs/batchfs_main.c calls bfs_worker_run for BFS_MODE_WORKER
 * (mountopts/); engine/remote/remote.h is the transport, the service (service.c) computes.
 * tests/mount/remote.sh runs workers against trainer mounts and a redis-server.
 */
#include "engine/service.h"
#include "engine/remote/remote.h"
#include "base/clock.h"
#include "base/err.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TAKE_BLOCK_MS  1000 /* how long a take waits for a job (and a stop request) */
#define HEARTBEAT_MS   1000 /* heartbeats; mounts count workers seen in 10 s */
#define ORPHAN_CHECK_S 10.0 /* how often other pipelines' stranded jobs are looked for */
#define PROGRESS_S     30.0 /* a progress line this often while serving */
#define ALIVE_MS       10000
#define MAX_HELD       2 /* jobs taken at once: the next is computed while one is stored */

static atomic_int stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    atomic_store(&stop_requested, 1);
}

typedef struct worker {
    FILE *log;
    const char *name;
    bfs_service *svc; /* the engine, the store and the executor */
    bfs_engine *e;
    bfs_exec *x;
    bfs_remote *r;
    bfs_remote_url url;
    const bfs_pipeline_opts *o;
    uint64_t fp;
    /* the heartbeat thread */
    pthread_t hb;
    int hb_on;
    atomic_int hb_stop;
    /* counters */
    unsigned long computed, stored_already, reclaimed, errors, declined, skipped;
    int changed;          /* its dataset changed in place: it stops */
    uint64_t refused[16]; /* pipelines already named in the log */
    int nrefused;
} worker;

static void logf_(worker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(worker *w, const char *fmt, ...)
{
    char when[32];
    time_t t = time(NULL);
    struct tm tm;
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", gmtime_r(&t, &tm));
    va_list ap;
    va_start(ap, fmt);
    fprintf(w->log, "%sZ batchfs worker %s: ", when, w->name);
    vfprintf(w->log, fmt, ap);
    fputc('\n', w->log);
    fflush(w->log);
    va_end(ap);
}

static void *heartbeat_main(void *arg)
{
    worker *w = arg;
    bfs_remote *r = NULL;
    char err[512];
    int failing = 0;
    while (!atomic_load(&w->hb_stop)) {
        if (!r && bfs_remote_connect(&w->url, w->fp, 2000, &r, err, sizeof err))
            r = NULL;
        int rc = r ? bfs_remote_heartbeat(r, w->name) : BFS_E_REMOTE;
        if (rc && !failing)
            logf_(w, "heartbeat failed: %s (mounts may not count this worker)",
                  r ? bfs_remote_error(r) : err);
        failing = rc != 0;
        for (int i = 0; i < HEARTBEAT_MS / 50 && !atomic_load(&w->hb_stop); i++)
            nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
    }
    bfs_remote_close(r);
    return NULL;
}

/* The lines of a canonical text that differ from b's, as "key = a (here: key = b)". */
static void differing(const char *a, const char *b, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
    for (const char *p = a; *p && n + 1 < cap;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        size_t keylen = eq ? (size_t)(eq - p) : len;
        /* the same key's line in b */
        const char *q = b, *mine = NULL;
        size_t mlen = 0;
        while (*q) {
            const char *qe = strchr(q, '\n');
            size_t ql = qe ? (size_t)(qe - q) : strlen(q);
            if (ql >= keylen && !memcmp(q, p, keylen)) {
                mine = q, mlen = ql;
                break;
            }
            q = qe ? qe + 1 : q + ql;
        }
        if (!mine || mlen != len || memcmp(mine, p, len)) {
            int w = snprintf(out + n, cap - n, "%s%.*s (here: %.*s)", n ? "; " : "", (int)len, p,
                             mine ? (int)mlen : 4, mine ? mine : "none");
            if (w > 0)
                n = n + (size_t)w < cap ? n + (size_t)w : cap - 1;
        }
        p = eol ? eol + 1 : p + len;
    }
}

static void on_orphan(void *arg, uint64_t fp, long long queued)
{
    worker *w = arg;
    for (int i = 0; i < w->nrefused; i++)
        if (w->refused[i] == fp)
            return; /* said already */
    if (w->nrefused < (int)(sizeof w->refused / sizeof *w->refused))
        w->refused[w->nrefused++] = fp;
    char text[2048] = "", diff[1024];
    bfs_remote_pipeline_text(w->r, fp, text, sizeof text);
    differing(text, bfs_engine_canonical(w->e), diff, sizeof diff);
    logf_(w,
          "refusing %lld queued job(s) of pipeline %016" PRIx64 ": this worker serves %016" PRIx64
          " only (a worker must run the same dataset and data-changing options); %s",
          queued, fp, w->fp,
          diff[0] ? diff : "the same options, so another dataset (its files or their content)");
}

/* How long a decline of job j stays: as long as its asker waits (the mounts that wait for
 * it compute it at once; a later ask queues a new job, which another worker may compute). */
static int decline_ttl_ms(const worker *w, const bfs_remote_job *j)
{
    uint64_t ms = j->wait_ms ? j->wait_ms : 10000;
    uint64_t ttl = (uint64_t)w->o->remote_ttl * 1000;
    return (int)(ms < ttl ? ms : ttl);
}

/* One job, done: computed (or found stored), stored or declined, acknowledged. 0, or an
 * error of Redis (the job stays pending and is reclaimed by anyone after remote_claim_ms).
 *
 * Nothing that depends on this worker's copy of the data or its resources is shared: a
 * batch that fails here (a sample bad or changed on this host, out of memory, the dataset
 * changed in place) or that holds a substitute for a sample bad here is declined, and the
 * mounts compute it themselves; they fail it, or substitute, only if their own data says
 * so. */
static int serve(worker *w, const bfs_remote_job *j)
{
    char err[1024];
    if (j->reclaimed) {
        w->reclaimed++;
        logf_(w, "took over epoch %" PRIu64 " batch %" PRIu64 " from a silent worker", j->epoch,
              j->k);
    }
    int st = bfs_remote_stored(w->r, j->epoch, j->k);
    if (st < 0)
        return st;
    if (st == 0) {
        bfs_batch *b;
        int rc = bfs_exec_get(w->x, j->epoch, j->k, &b, err, sizeof err);
        uint32_t subs = rc ? 0 : bfs_batch_substitutes(b);
        if (rc || subs) {
            if (!rc)
                snprintf(err, sizeof err,
                         "%u sample(s) bad on worker %s, substituted there: its batch is not "
                         "shared",
                         subs, w->name);
            w->declined++;
            if (rc == BFS_E_CHANGED)
                w->changed = 1;
            logf_(w, "epoch %" PRIu64 " batch %" PRIu64 ": %s (declined: mounts compute it)",
                  j->epoch, j->k, err);
            bfs_batch_release(rc ? NULL : b);
            int e = bfs_remote_decline(w->r, j->epoch, j->k, rc ? rc : BFS_E_REMOTE_DECLINED, err,
                                       decline_ttl_ms(w, j));
            return e ? e : bfs_remote_ack(w->r, j);
        }
        rc = bfs_remote_put(w->r, j->epoch, j->k, bfs_batch_data(b), bfs_batch_size(b),
                            w->o->remote_ttl * 1000);
        bfs_batch_release(b);
        if (rc == -EIO) { /* this worker's trouble (OpenSSL), not the batch's */
            w->declined++;
            snprintf(err, sizeof err, "%s", bfs_remote_error(w->r));
            logf_(w, "epoch %" PRIu64 " batch %" PRIu64 ": %s (declined: mounts compute it)",
                  j->epoch, j->k, err);
            rc = bfs_remote_decline(w->r, j->epoch, j->k, rc, err, decline_ttl_ms(w, j));
            return rc ? rc : bfs_remote_ack(w->r, j);
        }
        if (rc)
            return rc;
        w->computed++;
    } else {
        w->stored_already++;
    }
    return bfs_remote_ack(w->r, j);
}

int bfs_worker_run(const char *source, const bfs_pipeline_opts *o_in, const char *name,
                   unsigned long batches, FILE *log)
{
    worker w = {.log = log};
    signal(SIGPIPE, SIG_IGN); /* a closed Redis connection is an error, not a death */
    char host[128] = "host", namebuf[192], err[1024];
    gethostname(host, sizeof host - 1);
    snprintf(namebuf, sizeof namebuf, "%s:%d", host, (int)getpid());
    w.name = name ? name : namebuf;
    /* a worker serves any epoch a mount may list: epochs= only sets the listing */
    bfs_pipeline_opts o = *o_in;
    o.epochs = 1000000;
    w.o = &o;
    int rc = bfs_remote_parse_url(o.remote, &w.url, err, sizeof err);
    if (!rc && o.remote_key[0])
        rc = bfs_remote_load_key(o.remote_key, &w.url.auth, err, sizeof err);
    if (rc) {
        logf_(&w, "%s", err);
        return rc;
    }
    /* the engine, the RAM budget, cache_dir='s store; workers that keep the batches in
     * hand (MAX_HELD) */
    bfs_service_cfg sc = {.source = source,
                          .pipe = &o,
                          .role = BFS_SERVICE_COMPUTE,
                          .notes = log,
                          .tag = "batchfs worker",
                          .threads = o.threads == BFS_AUTO ? 0 : o.threads,
                          .cache_batches = MAX_HELD};
    if ((rc = bfs_service_open(&sc, &w.svc, NULL, err, sizeof err))) {
        logf_(&w, "%s", err);
        return rc;
    }
    if ((rc = bfs_service_start(w.svc, err, sizeof err))) {
        logf_(&w, "%s", err);
        bfs_service_close(w.svc);
        return rc;
    }
    w.e = bfs_service_engine(w.svc);
    w.x = bfs_service_exec(w.svc);
    w.fp = bfs_engine_fingerprint(w.e);
    uint64_t bytes = bfs_engine_max_batch_bytes(w.e);
    if ((rc = bfs_remote_connect(&w.url, w.fp, 5000, &w.r, err, sizeof err)) ||
        (rc = bfs_remote_describe(w.r, bfs_engine_canonical(w.e)))) {
        logf_(&w, "%s", w.r ? bfs_remote_error(w.r) : err);
        goto out;
    }
    /* counted by the mounts from the moment it says it serves: a mount that counts no
     * worker computes its batches itself (a first heartbeat here, not only from the
     * heartbeat thread a moment later) */
    if ((rc = bfs_remote_heartbeat(w.r, w.name))) {
        logf_(&w, "%s", bfs_remote_error(w.r));
        goto out;
    }
    char url[700], keyid[20];
    bfs_remote_url_text(&w.url, url, sizeof url);
    bfs_remote_key_id_text(&w.url.auth, keyid, sizeof keyid);
    logf_(&w,
          "serving pipeline %016" PRIx64 " of %s (%" PRIu64
          " batches of %.1f MB an epoch) from %s; values %s %s",
          w.fp, bfs_engine_source_path(w.e), bfs_engine_batches(w.e), bytes / 1e6, url,
          w.url.auth.on ? "authenticated with remote_key id" : "not authenticated:",
          w.url.auth.on ? keyid : "no remote_key= (docs/scale-out.md, \"Security\")");
    atomic_store(&stop_requested, 0);
    struct sigaction sa = {.sa_handler = on_signal}, old_int, old_term;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    atomic_store(&w.hb_stop, 0);
    w.hb_on = pthread_create(&w.hb, NULL, heartbeat_main, &w) == 0;

    bfs_remote_job held[MAX_HELD];
    int nheld = 0, down = 0;
    double next_orphans = 0, next_progress = bfs_mono_s() + PROGRESS_S, t0 = bfs_mono_s();
    unsigned long done = 0;
    while (!atomic_load(&stop_requested) && (!batches || done < batches)) {
        double now = bfs_mono_s();
        if (now >= next_orphans) {
            next_orphans = now + ORPHAN_CHECK_S;
            bfs_remote_orphans(w.r, ALIVE_MS, on_orphan, &w);
        }
        if (now >= next_progress) {
            next_progress = now + PROGRESS_S;
            logf_(&w,
                  "%lu batches computed, %lu found stored, %lu taken over, %lu declined, %lu "
                  "skipped (their askers no longer waited); %.2f batches/s",
                  w.computed, w.stored_already, w.reclaimed, w.declined, w.skipped,
                  (double)w.computed / (now - t0));
        }
        /* hold a second job while the first is computed: the workers start it at once */
        if (nheld < MAX_HELD && (!batches || done + (unsigned long)nheld < batches)) {
            int got = bfs_remote_take(w.r, w.name, o.remote_claim_ms, nheld ? 1 : TAKE_BLOCK_MS,
                                      &held[nheld]);
            w.skipped += held[nheld].skipped;
            if (got < 0) {
                if (!down)
                    logf_(&w, "Redis: %s; retrying every second", bfs_remote_error(w.r));
                down = 1;
                w.errors++;
                sleep(1);
                continue;
            }
            if (down)
                logf_(&w, "Redis is back");
            down = 0;
            if (got == 1) {
                bfs_exec_prefetch(w.x, held[nheld].epoch, held[nheld].k);
                nheld++;
                if (nheld < MAX_HELD)
                    continue; /* maybe one more before waiting on the first */
            }
        }
        if (!nheld)
            continue;
        int s = serve(&w, &held[0]);
        if (s < 0) { /* Redis failed mid-job: others reclaim it; we start over */
            logf_(&w,
                  "epoch %" PRIu64 " batch %" PRIu64 ": Redis: %s (left for others to take over)",
                  held[0].epoch, held[0].k, bfs_remote_error(w.r));
            w.errors++;
        } else {
            done++;
        }
        memmove(held, held + 1, (size_t)(--nheld) * sizeof *held);
        if (w.changed) {
            logf_(&w,
                  "the dataset %s changed in place under this worker: stopping (every batch "
                  "would be declined; start it again on the new file)",
                  bfs_engine_source_path(w.e));
            break;
        }
    }
    /* out of the live set before anything else, so that mounts stop waiting for this
     * worker at once (not when its heartbeat ages out, ~10 s later): the heartbeat thread
     * first, or it would put the worker back */
    if (w.hb_on) {
        atomic_store(&w.hb_stop, 1);
        pthread_join(w.hb, NULL);
        w.hb_on = 0;
    }
    if (bfs_remote_leave(w.r, w.name))
        logf_(&w, "leaving the set of live workers: %s (mounts count this worker for 10 s more)",
              bfs_remote_error(w.r));
    while (nheld) { /* jobs in hand (started: prefetched) are finished, not left to time out */
        if (serve(&w, &held[0]) < 0)
            logf_(&w, "epoch %" PRIu64 " batch %" PRIu64 ": Redis: %s (left for others)",
                  held[0].epoch, held[0].k, bfs_remote_error(w.r));
        memmove(held, held + 1, (size_t)(--nheld) * sizeof *held);
    }
    logf_(&w,
          "stopping: %lu batches computed, %lu found stored, %lu taken over, %lu declined, %lu "
          "skipped",
          w.computed, w.stored_already, w.reclaimed, w.declined, w.skipped);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    rc = w.changed ? BFS_E_CHANGED : 0;
out:
    bfs_remote_close(w.r);
    bfs_service_close(w.svc);
    return rc;
}
