/*
 * exec.c — the executor (see exec.h): its public functions (create and destroy, get and
 * prefetch: acquire, single-flight and the wait; the host-wide store's glue, cache_dir=;
 * stats; settings), over four parts it calls, none of which calls it back:
 *   - exec_jobs.c (exec_jobs_internal.h, shared with this file only): the job table's
 *     core — the state machine below, references, the worker threads, the batch cache's
 *     callbacks, the job-table operations of the remote side;
 *   - exec_readers.c (exec_readers_internal.h): the table of active readers (x->rt);
 *   - exec_remote.c (exec_internal.h): the remote side (remote=), a job source this file
 *     starts (bfs_exec_set_remote) and asks whether a new job is its; it calls the job
 *     table back only through the operations handed to it (bfs_job_src_ops: callbacks);
 *   - the batch cache, cache/batchcache.h (x->bc), and its walk model, cache/walk.c.
 *
 * All job state is guarded by x->lock. A job's states, and the only moves between them
 * (bfs_job_set_state asserts them in debug and sanitizer builds, base/check.h):
 *
 *   PREPARING -> READY      found in the host-wide store (store_lookup)
 *             -> FAILED     its indices could not be planned
 *             -> REMOTE     asked of the remote workers (remote=)
 *             -> RUNNING    computed here
 *   REMOTE    -> READY      fetched from Redis (src_done, exec_jobs.c)
 *             -> RUNNING    handed to the local workers (src_give_up)
 *   RUNNING   -> READY      its last slot finished (finish_slot)
 *             -> SEALING    the same in memfd mode: its bytes go into a sealed file first
 *             -> FAILED     a slot failed (bad_sample=fail, a resource)
 *   SEALING   -> READY      (to_memfd done, by the worker that finished it)
 *   READY, FAILED: final; the job leaves the table only by eviction (or acquire drops a
 *   FAILED one whose error was a resource's, to compute it again).
 *
 * PREPARING is written by its creator outside the lock (the header, the indices, the
 * store), REMOTE by the remote thread, RUNNING by the workers, each claiming a few slots
 * at a time (bfs_engine_claim_slots). Workers pick the oldest demanded job first, then the
 * oldest prefetched one, so a reader's request is never stuck behind prefetches. A job is
 * freed only with no reference left (refs: callers' batches, a worker or the remote thread
 * working on it unlocked).
 *
 * Readers (x->rt, guarded by x->lock) are a fixed table of BFS_EXEC_MAX_READERS
 * (exec_readers.c, called from here and, for their walks, from exec_jobs.c).
 * The jobs are the in-memory batch cache's entries: each job embeds its bfs_bc_entry, and
 * the cache (x->bc, cache/batchcache.h) keeps the list of them (the job table), the byte
 * and file budgets, the regrets that grow the passed-batch bound, and evicts (over the
 * budget the batch read farthest ahead goes, least recently used among equals; batches no
 * reader will read are kept to the passed bound), fed the reader table (readers_cb, exec_jobs.c)
 * and calling back drop_job_cb for what it evicted. It has no lock: every call to it but for
 * its memory (bfs_bc_memory: buffers and their pool, batch files, the reaper, under a
 * leaf lock of their own) is made under x->lock, asserted through its ops.held.
 *
 * Locks taken here: x->lock (guards the jobs, the cache, the readers, the counters; "Locked."
 * functions are called holding it); never held while a batch is planned, looked up in the
 * store or waited for in it, nor while prefetching along a reader's walk.
 */
#include "engine/exec_jobs_internal.h"
#include "base/check.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int bfs_exec_set_remote(bfs_exec *x, const bfs_pipeline_opts *o, char *err, size_t errlen)
{
    bfs_exec_remote *rs;
    char why[1024] = "";
    int conn;
    int rc = bfs_exec_remote_open(x, x->e, &bfs_job_src_ops, o, &rs, &conn, why, sizeof why, err,
                                  errlen);
    if (rc)
        return rc;
    xlock(x);
    x->remote = rs;
    xunlock(x);
    if (bfs_exec_remote_start(rs)) {
        xlock(x);
        x->remote = NULL;
        xunlock(x);
        bfs_exec_remote_stop(rs);
        return bfs_errf(-EAGAIN, err, errlen, "remote: cannot start its thread");
    }
    if (conn)
        return bfs_errf(conn, err, errlen, "%s", why);
    return 0;
}

int bfs_exec_create(bfs_engine *e, int threads, uint64_t cache_bytes, bfs_exec **out)
{
    *out = NULL;
    if (threads <= 0)
        threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    threads = threads < 1 ? 1 : threads > 1024 ? 1024 : threads;
    bfs_exec *x = calloc(1, sizeof *x);
    if (!x)
        return -ENOMEM;
    x->e = e;
    pthread_mutex_init(&x->lock, NULL);
    pthread_cond_init(&x->work, NULL);
    pthread_cond_init(&x->parked, NULL);
    pthread_cond_init(&x->ready, NULL);
    bfs_exec_rt_init(&x->rt, bfs_job_held, x);
    bfs_bc_ops ops = bfs_job_cache_ops(x);
    if (bfs_bc_create(&ops, cache_bytes, &x->bc)) {
        bfs_exec_destroy(x);
        return -ENOMEM;
    }
    x->threads = calloc((size_t)threads, sizeof *x->threads);
    x->workers = calloc((size_t)threads, sizeof *x->workers);
    if (!x->threads || !x->workers) {
        bfs_exec_destroy(x);
        return -ENOMEM;
    }
    x->nworkers = threads;
    x->active = threads; /* before any worker reads it */
    for (int i = 0; i < threads; i++) {
        bfs_job_worker_arg *a = malloc(sizeof *a);
        if (!a || bfs_engine_worker_create(e, &x->workers[i])) {
            free(a);
            bfs_exec_destroy(x);
            return -ENOMEM;
        }
        a->x = x, a->id = i;
        int rc = pthread_create(&x->threads[i], NULL, bfs_job_worker_main, a);
        if (rc) {
            free(a);
            bfs_engine_worker_destroy(x->workers[i]);
            x->workers[i] = NULL;
            bfs_exec_destroy(x);
            return -rc;
        }
        x->nthreads++;
    }
    *out = x;
    return 0;
}

void bfs_exec_destroy(bfs_exec *x)
{
    if (!x)
        return;
    xlock(x);
    x->stop = x->shutdown = 1;
    pthread_cond_broadcast(&x->work);
    pthread_cond_broadcast(&x->parked);
    pthread_cond_broadcast(&x->ready);
    xunlock(x);
    for (int i = 0; i < x->nthreads; i++)
        pthread_join(x->threads[i], NULL);
    for (int i = 0; i < x->nworkers; i++)
        bfs_engine_worker_destroy(x->workers[i]);
    bfs_exec_remote_stop(x->remote); /* (its thread ends: x->stop is set) */
    x->remote = NULL;
    xlock(x);
    if (BFS_CHECKS && x->bc)
        bfs_job_check_all(x);
    for (bfs_bc_entry *e; x->bc && (e = bfs_bc_entries(x->bc));) {
        bfs_bc_unlink(x->bc, e);
        bfs_job_free(x, job_of(e));
    }
    xunlock(x);
    bfs_bc_destroy(x->bc); /* its memory's reaper releases what it was given, then ends */
    free(x->threads);
    free(x->workers);
    pthread_mutex_destroy(&x->lock);
    pthread_cond_destroy(&x->work);
    pthread_cond_destroy(&x->parked);
    pthread_cond_destroy(&x->ready);
    free(x);
}

void bfs_exec_consumed(bfs_exec *x, uint64_t epoch, uint64_t k)
{
    xlock(x);
    bfs_batch *j = bfs_job_find(x, epoch, k);
    if (j)
        j->ce.used = 0; /* oldest possible: LRU evicts it first */
    xunlock(x);
}

void bfs_exec_shutdown(bfs_exec *x)
{
    xlock(x);
    x->shutdown = 1;
    pthread_cond_broadcast(&x->ready);
    xunlock(x);
}

/* Ask the host-wide store for j's bytes (unlocked; j is PREPARING, so only this thread
 * touches it). Returns 1 when j->ce.data now holds the published batch; otherwise 0, with
 * j->claim set when this process should compute and publish it. A batch another daemon
 * is computing is waited for only when a reader demands it (up to STORE_WAIT_MS). */
#define STORE_WAIT_MS 60000
static int store_lookup(bfs_exec *x, bfs_batch *j, int demand, int memfd)
{
    bfs_store_key key = {bfs_engine_fingerprint(x->e), j->ce.epoch, j->ce.k};
    bfs_claim c;
    int rc = bfs_store_claim(x->store, key, &c);
    if (rc == 0 && c.state == BFS_STORE_BUSY) {
        bfs_store_claim_close(&c);
        if (!demand)
            return 0; /* a prefetch computes rather than block its caller */
        rc = bfs_store_wait(x->store, key, STORE_WAIT_MS, &c);
    }
    if (rc)
        return 0;
    if (c.state == BFS_STORE_HIT && c.size == j->ce.size) {
        int fd;
        const uint8_t *map;
        xlock(x);
        int slot = memfd && bfs_bc_file_slot(x->bc);
        xunlock(x);
        if (slot && bfs_store_claim_take(&c, &fd, &map) == 0) {
            /* the entry file is exactly the batch: it backs the batch file itself, no
             * copy (it is never written in place: publication makes a new inode) */
            xlock(x);
            bfs_bc_file_made(x->bc, 0);
            bfs_bc_give_back(x->bc, j->ce.data, j->ce.size);
            j->ce.data = (uint8_t *)map;
            j->ce.fd = fd;
            xunlock(x);
            return 1;
        }
        if (slot) {
            xlock(x);
            bfs_bc_file_made(x->bc, 0);
            xunlock(x);
        }
        if (slot)
            bfs_job_to_memfd(x, j, c.data); /* straight from the entry's mapping */
        else /* (memfd mode without a descriptor: served by copying) */
            memcpy(j->ce.data, c.data, j->ce.size);
        bfs_store_claim_close(&c);
        return 1;
    }
    if (c.state == BFS_STORE_MINE) {
        bfs_claim *mine = malloc(sizeof *mine);
        if (mine) {
            *mine = c;
            j->claim = mine;
            return 0;
        }
        bfs_store_abandon(&c);
        return 0;
    }
    bfs_store_claim_close(&c); /* a hit of the wrong size (cannot happen for one
                                * fingerprint): compute instead */
    return 0;
}

void bfs_exec_set_passed_max(bfs_exec *x, uint64_t bytes, int grow)
{
    xlock(x);
    bfs_bc_set_passed_max(x->bc, bytes, grow);
    xunlock(x);
}

void bfs_exec_set_store(bfs_exec *x, bfs_store *s)
{
    x->store = s;
}

/* Batch files the process may hold: its descriptor limit less those open now (the FUSE
 * session, Redis, the store, the dataset, stdio, the log) and a reserve for what opens and
 * closes as batches are computed: a source file and a file being sealed per worker, the
 * reaper's closes not yet done (it is woken at 16: cache/batchmem.c), store claims and
 * publications, and a sixteenth of the limit. At the usual 1,024: ~920; at 64: ~25. */
#define FD_RESERVE 24
static uint64_t fd_budget(int threads)
{
    uint64_t limit = bfs_fd_limit();
    if (limit == UINT64_MAX)
        return UINT64_MAX;
    int open_now = bfs_fd_count();
    uint64_t used =
        (uint64_t)(open_now >= 0 ? open_now : 64) + FD_RESERVE + 2 * (uint64_t)threads + limit / 16;
    return limit > used ? limit - used : 0;
}

void bfs_exec_set_memfd(bfs_exec *x, int on, int huge)
{
    if (on) /* where batch files go is decided before the first (LATER: memfds first) */
        bfs_bc_use_files(bfs_bc_memory(x->bc), huge == 1);
    uint64_t budget = on ? fd_budget(x->nthreads) : UINT64_MAX;
    xlock(x);
    bfs_bc_set_files(x->bc, on, budget, huge == BFS_EXEC_HUGE_LATER);
    xunlock(x);
    if (on && budget < 64)
        fprintf(stderr,
                "batchfs: note: the descriptor limit (ulimit -n %llu) leaves room for %llu "
                "batch files: fewer finished batches are kept, and batches beyond it are "
                "served by copying (raise ulimit -n)\n",
                (unsigned long long)bfs_fd_limit(), (unsigned long long)budget);
}

int bfs_exec_use_pool(bfs_exec *x, uint64_t bytes)
{
    return bfs_bc_use_pool(bfs_bc_memory(x->bc), bytes);
}

int bfs_exec_pool_fd(bfs_exec *x, uint64_t *size)
{
    return bfs_bc_pool_fd(bfs_bc_memory(x->bc), size);
}

int bfs_exec_window(bfs_exec *x, const bfs_batch *b, uint64_t *off)
{
    /* (a batch's bytes never move while it is referenced: b is) */
    return b->ce.fd < 0 && bfs_bc_window(bfs_bc_memory(x->bc), b->ce.data, off);
}

/* Find or create the job for (epoch, k). Locked on entry and exit; may unlock while
 * preparing a new job. Returns the job with one reference taken, or NULL and *rc. */
static bfs_batch *acquire(bfs_exec *x, uint64_t epoch, uint64_t k, int demand, int *rc)
{
    LOCKED(x);
    bfs_batch *j = bfs_job_find(x, epoch, k);
    if (j && j->state == JOB_FAILED && bfs_err_is_transient(j->rc)) {
        /* the process ran out of memory or descriptors, or the object store of a remote
         * source failed: that may be over now, and unlike
         * a bad sample it says nothing about the batch, so compute it again. A worker may
         * still hold it (settling its claim after waking the readers): then it is only
         * detached, and freed by the last unref. */
        bfs_bc_unlink(x->bc, &j->ce);
        if (j->ce.refs)
            j->detached = 1;
        else
            bfs_job_free(x, j);
        j = NULL;
    }
    if (j) {
        j->ce.refs++;
        if (demand) {
            if (j->state == JOB_READY)
                x->st.hits++;
            else
                x->st.joins++;
            /* a higher priority for a RUNNING job, taken at the workers' next claims (pick):
             * no wake-up, as a worker waits only while no job has a slot left to claim */
            j->demand = 1;
        }
        return j;
    }
    const bfs_pipeline_opts *o = bfs_engine_opts(x->e);
    uint32_t len = epoch < o->epochs ? bfs_engine_batch_len(x->e, epoch, k) : 0;
    if (!len) {
        *rc = -ERANGE;
        return NULL;
    }
    j = calloc(1, sizeof *j);
    uint64_t size = bfs_engine_batch_bytes(x->e, epoch, k);
    if (j && !(j->ce.data = bfs_bc_take_passed(x->bc, size)))
        j->ce.data = bfs_bc_alloc(bfs_bc_memory(x->bc), size);
    if (!j || !(j->idx = malloc(len * sizeof *j->idx)) || !j->ce.data) {
        if (j) {
            free(j->idx);
            bfs_bc_give_back(x->bc, j->ce.data, size);
        }
        free(j);
        *rc = -ENOMEM;
        return NULL;
    }
    j->x = x;
    j->ce.fd = -1;
    j->remote.fd = -1;
    j->remote.epoch = epoch, j->remote.k = k, j->remote.size = size;
    j->ce.epoch = epoch, j->ce.k = k, j->len = len, j->ce.size = size;
    j->claim_slots = bfs_engine_claim_slots(x->e, epoch, k);
    j->state = JOB_PREPARING;
    j->ce.state = BFS_BC_MAKING; /* (PREPARING: exec_jobs.c's CACHE_STATE) */
    j->demand = demand;
    j->ce.refs = 1;
    j->seq = x->seq++;
    bfs_bc_insert(x->bc, &j->ce); /* (a regret when it was evicted as passed) */
    if (demand)
        x->st.misses++;
    else
        x->st.prefetched++;
    int memfd = bfs_bc_files(x->bc);
    xunlock(x);
    int n = bfs_engine_batch_begin(x->e, epoch, k, j->ce.data, j->idx);
    int hit = n >= 0 && x->store && store_lookup(x, j, demand, memfd);
    /* a remote source: its payloads fetched from now on, while earlier batches compute
     * (not when the remote workers may take it: they fetch their own) */
    if (n >= 0 && !hit && !x->remote && bfs_engine_advise_early(x->e)) {
        bfs_engine_advise(x->e, epoch, j->idx, j->len);
        j->advised = 1;
    }
    xlock(x);
    if (hit) {
        bfs_job_set_state(x, j, JOB_READY);
        x->st.store_hits++;
        pthread_cond_broadcast(&x->ready);
    } else if (n < 0) {
        bfs_bc_give_back(x->bc, j->ce.data, j->ce.size); /* a failed batch keeps only its error */
        j->ce.data = NULL;
        j->rc = n;
        snprintf(j->err, sizeof j->err, "planning epoch %llu batch %llu: %s",
                 (unsigned long long)epoch, (unsigned long long)k, bfs_strerror(n));
        bfs_job_set_state(x, j, JOB_FAILED);
        pthread_cond_broadcast(&x->ready);
    } else if (x->remote && bfs_exec_remote_takes(x->remote)) {
        /* asked of the remote workers first (no worker alive: computed here at once) */
        bfs_job_set_state(x, j, JOB_REMOTE);
        j->remote.buf = j->ce.data;
        bfs_exec_remote_added(x->remote, &j->remote);
        x->st.remote_requested++;
    } else {
        bfs_job_set_state(x, j, JOB_RUNNING);
        pthread_cond_broadcast(&x->work);
    }
    return j;
}

/* The end of a get: wait for job j (acquired, referenced; NULL when acquire failed with
 * rc), then hand it out or drop it with the error. Locked. */
static int get_wait(bfs_exec *x, bfs_batch *j, int rc, uint64_t epoch, uint64_t k, bfs_batch **out,
                    bfs_exec_cancel *cancel, char *err, size_t errlen)
{
    LOCKED(x);
    while (j && j->state < JOB_READY && !x->shutdown &&
           !(cancel && atomic_load_explicit(&cancel->requested, memory_order_relaxed)))
        xwait(x, &x->ready);
    if (j && j->state == JOB_READY) {
        j->ce.used = ++x->tick;
        *out = j;
    } else if (j) {
        /* interrupted: the batch goes on being computed (for the next reader, or this
         * one's retry); only this wait ends */
        rc = j->state == JOB_FAILED ? j->rc : x->shutdown ? -ESHUTDOWN : -EINTR;
        if (err && errlen)
            snprintf(err, errlen, "%s",
                     j->state == JOB_FAILED ? j->err
                     : rc == -EINTR         ? "interrupted"
                                            : "shutting down");
        bfs_job_unref(x, j);
        bfs_job_evict(x);
    } else if (err && errlen) {
        snprintf(err, errlen, "epoch %llu batch %llu: %s", (unsigned long long)epoch,
                 (unsigned long long)k, rc == -ERANGE ? "no such batch" : bfs_strerror(rc));
    }
    return rc;
}

int bfs_exec_get(bfs_exec *x, uint64_t epoch, uint64_t k, bfs_batch **out, char *err, size_t errlen)
{
    return bfs_exec_get_cancel(x, epoch, k, NULL, out, err, errlen);
}

int bfs_exec_get_cancel(bfs_exec *x, uint64_t epoch, uint64_t k, bfs_exec_cancel *cancel,
                        bfs_batch **out, char *err, size_t errlen)
{
    *out = NULL;
    int rc = 0;
    xlock(x);
    if (x->shutdown) {
        xunlock(x);
        return -ESHUTDOWN;
    }
    bfs_batch *j = acquire(x, epoch, k, 1, &rc);
    rc = get_wait(x, j, rc, epoch, k, out, cancel, err, errlen);
    xunlock(x);
    return rc;
}

void bfs_exec_cancel_wait(bfs_exec *x, bfs_exec_cancel *c)
{
    atomic_store(&c->requested, 1);
    xlock(x); /* a waiter between its test and its wait sees the flag */
    pthread_cond_broadcast(&x->ready);
    xunlock(x);
}

int bfs_exec_get_as(bfs_exec *x, uint64_t key, bfs_exec_alive_fn alive, uint64_t epoch, uint64_t k,
                    bfs_exec_cancel *cancel, bfs_batch **out, char *err, size_t errlen)
{
    *out = NULL;
    int rc = 0;
    double t0 = bfs_mono_s();
    xlock(x);
    if (x->shutdown) {
        xunlock(x);
        return -ESHUTDOWN;
    }
    /* k first, demanded and referenced: the workers start it before the prefetches below,
     * and while the reader's position moves to k (so that k counts as read) it cannot be
     * evicted */
    bfs_batch *j = acquire(x, epoch, k, 1, &rc);
    uint32_t id = 0;
    if (j) { /* (no such batch, no memory: no reader moves there) */
        xunlock(x);
        id = bfs_exec_follow(x, key, epoch, k, t0, -1, alive);
        xlock(x);
    }
    rc = get_wait(x, j, rc, epoch, k, out, cancel, err, errlen);
    xunlock(x);
    if (id)
        bfs_exec_reader_waited(x, id, epoch, k, bfs_mono_s() - t0);
    return rc;
}

int bfs_exec_prefetch(bfs_exec *x, uint64_t epoch, uint64_t k)
{
    int rc = 0;
    xlock(x);
    if (x->shutdown) {
        xunlock(x);
        return -ESHUTDOWN;
    }
    bfs_batch *j = acquire(x, epoch, k, 0, &rc);
    if (j) {
        j->ce.used = ++x->tick;
        bfs_job_unref(x, j);
        bfs_job_evict(x);
    }
    xunlock(x);
    return rc;
}

/* Every worker's stage counters, summed (encode_ns left 0: the engine's, not a worker's). */
static void sum_stages(bfs_exec *x, bfs_stage_stats *s)
{
    memset(s, 0, sizeof *s);
    for (int i = 0; i < x->nthreads; i++) {
        bfs_stage_stats w;
        bfs_engine_worker_stats(x->workers[i], &w);
        s->samples += w.samples;
        s->read_ns += w.read_ns;
        s->decode_ns += w.decode_ns;
        s->resize_ns += w.resize_ns;
        s->augment_ns += w.augment_ns;
        for (int k = 0; k < BFS_STAGE_OPS; k++)
            s->op_ns[k] += w.op_ns[k], s->op_n[k] += w.op_n[k];
        s->bad_samples += w.bad_samples;
        s->texts_cut += w.texts_cut;
        s->decode_cropped += w.decode_cropped;
        s->decode_full += w.decode_full;
        s->decode_scaled += w.decode_scaled;
        s->decode_raw += w.decode_raw;
        s->decode_windowed += w.decode_windowed;
    }
}

void bfs_exec_get_stats(bfs_exec *x, bfs_exec_stats *st)
{
    xlock(x);
    *st = x->st;
    bfs_bc_stats cs;
    bfs_bc_get_stats(x->bc, &cs);
    st->cached_bytes = cs.cached_bytes;
    st->files = cs.files;
    st->files_refused = cs.files_refused;
    st->evictions = cs.evictions;
    st->evicted_passed = cs.evicted_passed;
    st->evicted_ahead = cs.evicted_ahead;
    st->passed_regrets = cs.passed_regrets;
    st->threads = x->active;
    st->max_threads = x->nthreads;
    st->prefetch = bfs_exec_rt_prefetch(&x->rt);
    st->fetch_ahead = x->fetch_ahead;
    st->cache_budget = cs.budget;
    st->file_budget = cs.file_budget == UINT64_MAX ? 0 : cs.file_budget;
    st->fd_limit = bfs_fd_limit() == UINT64_MAX ? 0 : bfs_fd_limit();
    st->passed_budget = cs.passed_max < cs.budget ? cs.passed_max : cs.budget;
    st->in_flight = 0;
    for (JOBS(x, b))
        st->in_flight += b->state < JOB_READY;
    xunlock(x);
    bfs_bc_mem_stats ms;
    bfs_bc_mem_get_stats(bfs_bc_memory(x->bc), &ms);
    st->buffers = ms.buffers;
    st->buffer_allocs = ms.buffer_allocs;
    st->pool_bytes = ms.pool_bytes;
    st->pool_used = ms.pool_used;
    st->pool_misses = ms.pool_misses;
    st->huge_files = ms.huge_files;
    xlock(x);
    st->remote = 0;
    st->remote_workers = 0;
    snprintf(st->remote_key_id, sizeof st->remote_key_id, "none");
    if (x->remote)
        bfs_exec_remote_stats(x->remote, st);
    xunlock(x);
    sum_stages(x, &st->stages);
    st->stages.encode_ns = bfs_engine_encode_ns(x->e);
}

const uint8_t *bfs_batch_data(const bfs_batch *b)
{
    return b->ce.data;
}

uint64_t bfs_batch_size(const bfs_batch *b)
{
    return b->ce.size;
}

uint32_t bfs_batch_substitutes(const bfs_batch *b)
{
    return b->substituted; /* (final once READY: no worker writes it any more) */
}

int bfs_batch_fd(const bfs_batch *b)
{
    return b->ce.fd;
}

void bfs_batch_retain(bfs_batch *b)
{
    bfs_exec *x = b->x;
    xlock(x);
    BFS_ASSERT(b->ce.refs > 0);
    b->ce.refs++;
    xunlock(x);
}

void bfs_batch_release(bfs_batch *b)
{
    if (!b)
        return;
    bfs_exec *x = b->x;
    xlock(x);
    bfs_job_unref(x, b);
    bfs_job_evict(x);
    xunlock(x);
}

/* ---- readers (the table: exec_readers.c, x->rt) ------------------------------------- */

void bfs_exec_reader_waited(bfs_exec *x, uint32_t id, uint64_t epoch, uint64_t k, double wait_s)
{
    xlock(x);
    bfs_exec_rt_waited(&x->rt, id, epoch, k, wait_s);
    xunlock(x);
}

/* How many batches past those prefetched a remote source's payloads are fetched: what a
 * request's latency spans at the pace batches are used, twice over (requests queue behind
 * those of the batches before; latency varies), at least 1 while the pace is not known, at
 * most FETCH_AHEAD_MAX. The pace (step_s) is the slower of the reader's own time per batch
 * and the workers' time to compute one, never the reader's waits: a reader that waits for
 * fetches would otherwise make its pace the latency and the depth stay at 2. The
 * prefetcher's room (256 MiB a file) bounds the bytes: what finds no room is fetched by
 * the workers. 0 for a local source. */
#define FETCH_AHEAD_MAX 16
static int fetch_ahead(double latency_s, double step_s)
{
    if (latency_s <= 0)
        return 0;
    if (step_s <= 0)
        return 1;
    double q = 2 * latency_s / step_s;
    if (q >= FETCH_AHEAD_MAX)
        return FETCH_AHEAD_MAX;
    int n = (int)q;
    return n < q ? n + 1 : n < 1 ? 1 : n;
}

/* The workers' seconds to compute a batch of n samples, all of them at once: their decode,
 * resize and augment time per sample so far (not their reads: those wait for fetches), 0 before
 * any sample. */
static double compute_step(bfs_exec *x, uint32_t n)
{
    bfs_stage_stats w;
    sum_stages(x, &w);
    int threads = x->nthreads > 0 ? x->nthreads : 1;
    double ns = (double)(w.decode_ns + w.resize_ns + w.augment_ns);
    return w.samples ? ns / 1e9 / (double)w.samples * n / threads : 0;
}

/* Batch k of epoch's payloads handed to the prefetcher, the batch not computed; best
 * effort (a batch that cannot be planned, or no memory, fetches nothing). */
static void fetch_batch(bfs_exec *x, uint64_t epoch, uint64_t k)
{
    uint32_t n = bfs_engine_batch_len(x->e, epoch, k);
    uint64_t *idx = n ? malloc((size_t)n * sizeof *idx) : NULL;
    int m = idx ? bfs_engine_batch_indices(x->e, epoch, k, idx) : -1;
    if (m > 0)
        bfs_engine_advise(x->e, epoch, idx, (uint32_t)m);
    free(idx);
}

uint32_t bfs_exec_follow(bfs_exec *x, uint64_t key, uint64_t epoch, uint64_t k, double now,
                         double wait_s, bfs_exec_alive_fn alive)
{
    if (!key)
        key = UINT64_MAX; /* 0 marks a free slot */
    xlock(x);
    uint64_t nb = bfs_engine_batches(x->e), ne = bfs_engine_opts(x->e)->epochs;
    uint64_t size = bfs_engine_max_batch_bytes(x->e);
    uint64_t budget = bfs_bc_budget(x->bc); /* (not its stats: a walk of the entries) */
    bfs_bc_reader walk;
    int depth;
    double own_s;
    uint32_t id = bfs_exec_rt_follow(&x->rt, key, epoch, k, now, wait_s, alive, nb,
                                     size ? budget / size : 0, &walk, &depth, &own_s);
    int ahead = 0;
    double latency = depth > 0 && !x->remote ? bfs_engine_fetch_latency(x->e) : 0;
    if (latency > 0) {
        double step = compute_step(x, bfs_engine_mean_batch_len(x->e));
        ahead = fetch_ahead(latency, own_s > step ? own_s : step);
    }
    if (ahead)
        x->fetch_ahead = ahead;
    bfs_exec_rt_mark mark;
    int fetched = ahead && bfs_exec_rt_fetched(&x->rt, id, &mark);
    xunlock(x);
    /* the next `depth` batches of its walk (bfs_bc_walk_next: the model eviction's
     * bfs_bc_next_read counts steps of); the walk of a reader that went on from one epoch
     * to the next before goes on into the next epoch at the same residue: at a training
     * loop's epoch end the workers keep computing, while a reader of one epoch (a
     * validation pass, a scan) costs nothing beyond it */
    uint64_t ep = epoch, next = k;
    uint64_t win[FETCH_AHEAD_MAX][2];
    int nwin = 0;
    for (int d = 1; d <= depth + ahead && bfs_bc_walk_next(&walk, nb, ne, &ep, &next) == 0; d++)
        if (d <= depth)
            bfs_exec_prefetch(x, ep, next);
        else
            win[nwin][0] = ep, win[nwin][1] = next, nwin++;
    /* of the batches to fetch ahead, those an earlier read of this walk fetched already are
     * not asked for again (each would be planned and looked up in the prefetcher: a window
     * of 16 batches asked for anew at every read); a new walk, a jump or a read further
     * back than the mark's asks for the whole window (bfs_exec_rt_fetch_from) */
    int keep;
    int from = bfs_exec_rt_fetch_from(&walk, nb, ne, epoch, k, fetched ? &mark : NULL,
                                      (const uint64_t(*)[2])win, nwin, &keep);
    for (int i = from; i < nwin; i++)
        fetch_batch(x, win[i][0], win[i][1]);
    if (nwin && !keep) {
        mark = (bfs_exec_rt_mark){win[nwin - 1][0], win[nwin - 1][1], epoch, k,
                                  (uint64_t)(depth + nwin)};
        xlock(x);
        bfs_exec_rt_set_fetched(&x->rt, id, &mark);
        x->st.fetched_batches += (uint64_t)(nwin - from);
        xunlock(x);
    }
    return id;
}

int bfs_exec_readers(bfs_exec *x, double now, bfs_exec_alive_fn alive, bfs_exec_reader *out,
                     int max)
{
    xlock(x);
    int n = bfs_exec_rt_list(&x->rt, now, alive, out, max);
    xunlock(x);
    bfs_exec_rt_sort(out, n);
    return n;
}

void bfs_exec_on_reader_news(bfs_exec *x, void (*fn)(void *), void *arg)
{
    xlock(x);
    bfs_exec_rt_on_news(&x->rt, fn, arg);
    xunlock(x);
}

uint64_t bfs_exec_readers_news(bfs_exec *x)
{
    xlock(x);
    uint64_t n = bfs_exec_rt_news(&x->rt);
    xunlock(x);
    return n;
}

void bfs_exec_set_prefetch(bfs_exec *x, int depth)
{
    xlock(x);
    bfs_exec_rt_set_prefetch(&x->rt, depth);
    xunlock(x);
}

int bfs_exec_prefetch_depth(bfs_exec *x)
{
    xlock(x);
    int depth = bfs_exec_rt_prefetch(&x->rt);
    xunlock(x);
    return depth;
}

void bfs_exec_set_reader_depth(bfs_exec *x, uint32_t id, int depth)
{
    xlock(x);
    bfs_exec_rt_set_depth(&x->rt, id, depth);
    xunlock(x);
}

void bfs_exec_set_cache_bytes(bfs_exec *x, uint64_t bytes)
{
    xlock(x);
    bfs_bc_set_budget(x->bc, bytes); /* (evicts, then trims the pool to the room left) */
    xunlock(x);
}

int bfs_exec_set_threads(bfs_exec *x, int n)
{
    xlock(x);
    x->active = n < 1 ? 1 : n > x->nthreads ? x->nthreads : n;
    n = x->active;
    pthread_cond_broadcast(&x->work);
    pthread_cond_broadcast(&x->parked);
    xunlock(x);
    return n;
}
