/* prefetch.c — a remote file's payloads fetched ahead (see prefetch.h). */
#include "engine/dataset/prefetch.h"
#include "base/err.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BUCKETS     4096u      /* hash of ranges by offset */
#define RUN_MAX     (4u << 20) /* a run (one request) spans at most 4 MiB */
#define GAP_MAX     4096u      /* neighbours this close share a run; the gap is fetched too */
#define WANT_MAX    65536u     /* ranges sorted per call at most (a batch has <= 65536) */
#define THREADS_MAX 256u
#define STALE_MS    10000u /* a range held this long unread may be dropped for a new one */

enum { PENDING, INFLIGHT, READY, FAILED };

/* One request's bytes, shared by the slots of its run: freed by the last one taken or
 * dropped, so a range is never copied out of the request's buffer but into the reader's */
typedef struct rbuf {
    _Atomic unsigned refs;
    uint8_t data[];
} rbuf;

typedef struct slot slot;
struct slot {
    uint64_t off;
    uint32_t len;
    int state, rc;
    uint64_t settled_ms; /* READY or FAILED since (CLOCK_MONOTONIC) */
    rbuf *rb;            /* READY: the run's bytes, */
    const uint8_t *buf;  /* of which these len */
    slot *hnext;         /* hash chain */
    slot *prev, *next;   /* age list: oldest first */
};

typedef struct run {
    uint64_t off, end; /* file bytes [off, end) */
    uint32_t n;        /* slots, in offset order */
    uint32_t pos;      /* the first place among bfs_prefetch_want's ranges of its slots */
    slot **slots;
    struct run *next; /* queue */
} run;

struct bfs_prefetch {
    bfs_prefetch_read_fn read;
    void *ctx;
    pthread_mutex_t lock;
    pthread_cond_t work, done; /* work: a run was queued or stop; done: a slot settled */
    slot *hash[BUCKETS];       /* guarded by lock, as every field below */
    slot *oldest, *newest;
    run *qhead, *qtail;
    uint64_t held, budget;           /* bytes of slots (every state) */
    unsigned nthreads, want_threads; /* started; at most (fetch_parallel) */
    unsigned idle, queued;           /* threads waiting for work; runs in the queue */
    unsigned starting;               /* threads started that have not looked for work */
    int started, stop;
    pthread_t tid[THREADS_MAX];
};

static _Atomic unsigned conf_threads = 64;
static _Atomic uint64_t conf_budget = 256ull << 20;
static _Atomic unsigned conf_stale_ms = STALE_MS;
static _Atomic uint64_t st_runs, st_ranges, st_hits, st_waits, st_dropped, st_threads;

void bfs_prefetch_configure(unsigned threads, uint64_t budget_bytes)
{
    if (threads < 1)
        threads = 1;
    if (threads > THREADS_MAX)
        threads = THREADS_MAX;
    atomic_store(&conf_threads, threads);
    atomic_store(&conf_budget, budget_bytes);
}

void bfs_prefetch_set_stale_ms(unsigned ms)
{
    atomic_store(&conf_stale_ms, ms);
}

static uint64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

void bfs_prefetch_get_stats(bfs_prefetch_stats *st)
{
    st->runs = atomic_load(&st_runs);
    st->ranges = atomic_load(&st_ranges);
    st->hits = atomic_load(&st_hits);
    st->waits = atomic_load(&st_waits);
    st->dropped = atomic_load(&st_dropped);
    st->threads = atomic_load(&st_threads);
}

static unsigned bucket(uint64_t off)
{
    return (unsigned)((off * 0x9E3779B97F4A7C15ull) >> 52) % BUCKETS;
}

static slot *find(bfs_prefetch *p, uint64_t off)
{
    for (slot *s = p->hash[bucket(off)]; s; s = s->hnext)
        if (s->off == off)
            return s;
    return NULL;
}

static void release(rbuf *rb)
{
    if (rb && atomic_fetch_sub(&rb->refs, 1) == 1)
        free(rb);
}

/* Unlink s from the hash and the age list (locked); then it is the caller's alone. s not
 * in a queued run (the caller cleared its place there) and not being written by a
 * fetcher. */
static void unlink_slot(bfs_prefetch *p, slot *s)
{
    slot **pp = &p->hash[bucket(s->off)];
    while (*pp != s)
        pp = &(*pp)->hnext;
    *pp = s->hnext;
    if (s->prev)
        s->prev->next = s->next;
    else
        p->oldest = s->next;
    if (s->next)
        s->next->prev = s->prev;
    else
        p->newest = s->prev;
    p->held -= s->len;
}

static void drop(bfs_prefetch *p, slot *s)
{
    unlink_slot(p, s);
    release(s->rb);
    free(s);
}

/* Make room for need bytes by dropping failed slots and those unread for conf_stale_ms
 * (their reader went elsewhere), oldest first. Not the others: the oldest unread are the
 * soonest needed, and a range that finds no room is the reader's to read, later. Locked.
 * 1 when the room is there. */
static int make_room(bfs_prefetch *p, uint64_t need)
{
    if (p->held + need <= p->budget)
        return 1;
    uint64_t stale = now_ms() - atomic_load(&conf_stale_ms);
    for (slot *s = p->oldest; s && p->held + need > p->budget;) {
        slot *next = s->next;
        if (s->state == FAILED || (s->state == READY && s->settled_ms <= stale)) {
            atomic_fetch_add(&st_dropped, s->state == READY);
            drop(p, s);
        }
        s = next;
    }
    return p->held + need <= p->budget;
}

static void *fetcher(void *arg)
{
    bfs_prefetch *p = arg;
    pthread_setname_np(pthread_self(), "bfs-fetch");
    pthread_mutex_lock(&p->lock);
    p->starting--;
    for (;;) {
        p->idle++;
        while (!p->stop && !p->qhead)
            pthread_cond_wait(&p->work, &p->lock);
        p->idle--;
        if (p->stop)
            break;
        run *r = p->qhead;
        p->queued--;
        p->qhead = r->next;
        if (!p->qhead)
            p->qtail = NULL;
        for (uint32_t i = 0; i < r->n; i++)
            r->slots[i]->state = INFLIGHT;
        pthread_mutex_unlock(&p->lock);
        size_t len = (size_t)(r->end - r->off);
        rbuf *rb = malloc(sizeof *rb + len);
        int rc = rb ? p->read(p->ctx, rb->data, len, r->off) : -ENOMEM;
        atomic_fetch_add(&st_runs, 1);
        if (rc) {
            free(rb);
            rb = NULL;
        } else {
            atomic_init(&rb->refs, r->n);
        }
        uint64_t t = now_ms();
        pthread_mutex_lock(&p->lock);
        for (uint32_t i = 0; i < r->n; i++) {
            slot *s = r->slots[i];
            s->rc = rc;
            s->settled_ms = t;
            if (!rc) {
                s->rb = rb;
                s->buf = rb->data + (s->off - r->off);
                s->state = READY;
                atomic_fetch_add(&st_ranges, 1);
            } else {
                s->state = FAILED;
            }
        }
        free(r->slots);
        free(r);
        pthread_cond_broadcast(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

int bfs_prefetch_create(bfs_prefetch_read_fn read, void *ctx, bfs_prefetch **out)
{
    bfs_prefetch *p = calloc(1, sizeof *p);
    if (!p)
        return *out = NULL, -ENOMEM;
    p->read = read;
    p->ctx = ctx;
    p->budget = atomic_load(&conf_budget);
    p->want_threads = atomic_load(&conf_threads);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    *out = p;
    return 0;
}

void bfs_prefetch_destroy(bfs_prefetch *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < p->nthreads; i++)
        pthread_join(p->tid[i], NULL);
    atomic_fetch_sub(&st_threads, p->nthreads);
    for (run *r = p->qhead, *next; r; r = next) {
        next = r->next;
        free(r->slots);
        free(r);
    }
    for (slot *s = p->oldest, *next; s; s = next) {
        next = s->next;
        release(s->rb);
        free(s);
    }
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

typedef struct {
    uint64_t off;
    uint32_t len, pos; /* pos: its place in the caller's list (the order reads come in) */
} want;

static int by_off(const void *a, const void *b)
{
    const want *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Threads for the runs queued that no idle thread will take, up to want_threads (locked):
 * as many requests in flight as the store's latency keeps waiting, so a near store is
 * served by a few threads and a far one by many. Those that fail to start are not there;
 * with none, wants are ignored. */
static void grow(bfs_prefetch *p)
{
    unsigned ready = p->idle + p->starting;
    unsigned need = p->queued > ready ? p->queued - ready : 0;
    while (need-- && p->nthreads < p->want_threads &&
           pthread_create(&p->tid[p->nthreads], NULL, fetcher, p) == 0)
        p->nthreads++, p->starting++, atomic_fetch_add(&st_threads, 1);
}

/* The first thread (locked), so that wants are taken. */
static void start(bfs_prefetch *p)
{
    p->started = 1;
    if (p->want_threads && pthread_create(&p->tid[0], NULL, fetcher, p) == 0)
        p->nthreads = 1, p->starting = 1, atomic_fetch_add(&st_threads, 1);
}

/* A run of slots s[0..n) (offset order), first read at place pos, or NULL (its slots
 * settled as failed: readers read themselves). Locked. Its slots are already in the hash
 * and the age list. */
static run *make_run(slot **s, uint32_t n, uint32_t pos)
{
    run *r = malloc(sizeof *r);
    slot **copy = r ? malloc(n * sizeof *copy) : NULL;
    if (!copy) { /* cannot fetch them: settle them failed, so readers read themselves */
        free(r);
        for (uint32_t i = 0; i < n; i++)
            s[i]->state = FAILED, s[i]->rc = -ENOMEM;
        return NULL;
    }
    memcpy(copy, s, n * sizeof *copy);
    r->slots = copy;
    r->n = n;
    r->pos = pos;
    r->off = s[0]->off;
    r->end = s[n - 1]->off + s[n - 1]->len;
    r->next = NULL;
    return r;
}

static int by_pos(const void *a, const void *b)
{
    const run *x = *(run *const *)a, *y = *(run *const *)b;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

void bfs_prefetch_want(bfs_prefetch *p, const uint64_t *off, const uint32_t *len, uint32_t n)
{
    if (n > WANT_MAX)
        n = WANT_MAX;
    want *w = malloc((size_t)n * sizeof *w);
    slot **run_slots = malloc((size_t)n * sizeof *run_slots);
    run **runs = malloc((size_t)n * sizeof *runs);
    uint32_t nruns = 0;
    if (!w || !run_slots || !runs)
        goto out;
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++)
        if (len[i])
            w[m].off = off[i], w[m].len = len[i], w[m].pos = i, m++;
    qsort(w, m, sizeof *w, by_off);
    pthread_mutex_lock(&p->lock);
    if (!p->started)
        start(p);
    uint32_t nr = 0, run_pos = 0;
    uint64_t run_off = 0, run_end = 0;
    for (uint32_t i = 0; p->nthreads && i < m; i++) {
        if (find(p, w[i].off) || (i && w[i].off == w[i - 1].off))
            continue;
        if (!make_room(p, w[i].len))
            continue;
        slot *s = calloc(1, sizeof *s);
        if (!s)
            break;
        s->off = w[i].off;
        s->len = w[i].len;
        s->state = PENDING;
        unsigned b = bucket(s->off);
        s->hnext = p->hash[b];
        p->hash[b] = s;
        s->prev = p->newest;
        if (p->newest)
            p->newest->next = s;
        else
            p->oldest = s;
        p->newest = s;
        p->held += s->len;
        /* joins the current run when it starts within GAP_MAX of its end, after it, and
         * the run stays within RUN_MAX */
        uint64_t end = s->off + s->len;
        if (nr && s->off >= run_end && s->off - run_end <= GAP_MAX && end - run_off <= RUN_MAX) {
            run_slots[nr++] = s;
            run_end = end;
            run_pos = w[i].pos < run_pos ? w[i].pos : run_pos;
            continue;
        }
        if (nr && (runs[nruns] = make_run(run_slots, nr, run_pos)))
            nruns++;
        run_slots[0] = s, nr = 1;
        run_off = s->off, run_end = end, run_pos = w[i].pos;
    }
    if (nr && (runs[nruns] = make_run(run_slots, nr, run_pos)))
        nruns++;
    /* queued in the order the reads will come: the batch's first samples first */
    qsort(runs, nruns, sizeof *runs, by_pos);
    for (uint32_t i = 0; i < nruns; i++) {
        if (p->qtail)
            p->qtail->next = runs[i];
        else
            p->qhead = runs[i];
        p->qtail = runs[i];
    }
    p->queued += nruns;
    if (nruns) {
        grow(p);
        pthread_cond_broadcast(&p->work);
    }
    pthread_mutex_unlock(&p->lock);
out:
    free(w);
    free(run_slots);
    free(runs);
}

int bfs_prefetch_take(bfs_prefetch *p, uint64_t off, void *buf, size_t len)
{
    pthread_mutex_lock(&p->lock);
    int waited = 0;
    slot *s;
    /* found again after each wait: another reader of the same range may have taken it */
    while ((s = find(p, off)) && s->len == len && (s->state == PENDING || s->state == INFLIGHT)) {
        waited = 1;
        pthread_cond_wait(&p->done, &p->lock);
    }
    if (!s || s->len != len) {
        pthread_mutex_unlock(&p->lock);
        return 0;
    }
    int rc = s->state == READY ? 1 : s->rc;
    /* taken out under the lock, copied outside it: readers and fetchers do not queue
     * behind a copy */
    unlink_slot(p, s);
    pthread_mutex_unlock(&p->lock);
    if (rc == 1) {
        memcpy(buf, s->buf, len);
        atomic_fetch_add(&st_hits, 1);
        atomic_fetch_add(&st_waits, (uint64_t)waited);
    }
    release(s->rb);
    free(s);
    return rc;
}
