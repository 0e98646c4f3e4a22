/*
 * batchcache.c — the in-memory batch cache (see batchcache.h): its eviction policy (pure
 * functions over plain values), and the cache itself: the entries, the eviction loop, the
 * regrets that grow the passed-batch bound, the buffers taken from passed batches, the
 * budget of batch files. Its memory is batchmem.c's.
 *
 * Locks: none of its own. The cache (bfs_bc) is its owner's, engine/exec.c, and every
 * call but create, destroy and bfs_bc_memory comes under the owner's lock (x->lock),
 * asserted through bfs_bc_ops.held in debug and sanitizer builds; bfs_bc_mem's leaf lock
 * is taken inside it (batchmem.c). Calls out: ops.readers and ops.drop, under that lock.
 */
#include "cache/batchcache.h"
#include "base/check.h"
#include "base/io.h"
#include "base/mix.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

void bfs_bc_begin(bfs_bc_choice *c)
{
    *c = (bfs_bc_choice){0};
}

void bfs_bc_offer(bfs_bc_choice *c, const void *item, uint64_t size, uint64_t used,
                  uint64_t next_read, int file)
{
    c->held += size;
    if (next_read == UINT64_MAX) {
        c->passed += size;
        if (!c->oldest_passed || used < c->oldest_passed_used)
            c->oldest_passed = item, c->oldest_passed_used = used;
    }
    /* the over-budget victim: farthest next read, least recently used among equals */
    if (!c->far || next_read > c->far_next || (next_read == c->far_next && used < c->far_used))
        c->far = item, c->far_next = next_read, c->far_used = used;
    if (!file)
        return;
    c->files++;
    if (!c->far_file || next_read > c->far_file_next ||
        (next_read == c->far_file_next && used < c->far_file_used))
        c->far_file = item, c->far_file_next = next_read, c->far_file_used = used;
}

const void *bfs_bc_victim(const bfs_bc_choice *c, uint64_t budget, uint64_t files_max,
                          uint64_t passed_max, int *passed)
{
    const void *v = NULL;
    int p = 0;
    if (c->held > budget)
        v = c->far, p = c->far_next == UINT64_MAX;
    else if (c->files > files_max)
        v = c->far_file, p = c->far_file_next == UINT64_MAX;
    else if (c->passed > passed_max)
        v = c->oldest_passed, p = 1;
    if (passed)
        *passed = p;
    return v;
}

/* ---- the cache: entries, eviction, regrets, the file budget ---------------------------- */

#define PASSED_FIRST ((uint64_t)256 << 20) /* the adaptive passed-batch bound's start */
#define GHOSTS       1024u /* batches evicted as passed, remembered (a direct-mapped table) */
#define BUCKETS                                                                                    \
    4096u /* the index by (epoch, k): a power of two; a few entries a bucket                       \
           * at 10,000 batches held (bfs_bc_find was 4% of a token daemon's                        \
           * CPU as a walk of the list, two per batch read) */
/* Evicting for the passed bound goes on down to an eighth below it (hysteresis), so that
 * the entries' bytes stay below the bound for a while and the evictions that follow need
 * no pass over the entries (quiet_files): with a bound of 256 MiB, 512 KiB token batches
 * made three passes over ~520 entries per batch read, ~10% of the daemon's CPU. */
#define PASSED_SLACK 8
#define SWEEP        64 /* passed victims one pass may choose (in the order of their age) */

struct bfs_bc {
    bfs_bc_ops ops;
    bfs_bc_entry *entries;           /* every entry, any state, newest first */
    bfs_bc_entry *index[BUCKETS];    /* the entries again, by bucket_of(epoch, k) (->hnext) */
    uint64_t list_bytes, list_count; /* of all the entries, any state */
    uint64_t unsettled;              /* entries not READY at the last pass of bfs_bc_evict */
    uint64_t inserted;               /* entries inserted since */
    bfs_bc_mem *mem;                 /* batch buffers, batch files, the reaper */
    uint64_t budget;                 /* for finished unreferenced entries */
    uint64_t passed_max;             /* of which at most this no active reader will read */
    int passed_fixed;                /* no doubling on regrets (bfs_bc_set_passed_max) */
    int huge_later;                  /* huge-page batch files from the first passed eviction on */
    struct {
        uint64_t epoch1, k; /* epoch + 1 (0: empty), batch */
    } ghosts[GHOSTS];       /* recently evicted as passed, for regrets */
    int files_on;           /* finished batches go to batch files (bfs_bc_set_files) */
    uint64_t file_budget;   /* batch files (a descriptor each) that may be held; UINT64_MAX:
                             * no limit */
    uint64_t files_making;  /* batch files being made now, counted against it (file_slot) */
    uint64_t files_fresh;   /* files granted since the last count (st.files, by evict) */
    int said_files;         /* the log said the budget was reached */
    bfs_bc_stats st;        /* counters (budget, passed_max, file_budget: see get_stats) */
};

/* Every function below runs under the owner's lock: checked where ops.held is given. */
#define HELD(c) BFS_ASSERT(!(c)->ops.held || (c)->ops.held((c)->ops.arg))

int bfs_bc_create(const bfs_bc_ops *ops, uint64_t budget, bfs_bc **out)
{
    *out = NULL;
    bfs_bc *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    if (bfs_bc_mem_create(&c->mem)) {
        free(c);
        return -ENOMEM;
    }
    c->ops = *ops;
    c->budget = budget;
    c->passed_max = PASSED_FIRST;
    c->file_budget = UINT64_MAX;
    *out = c;
    return 0;
}

void bfs_bc_destroy(bfs_bc *c)
{
    if (!c)
        return;
    BFS_ASSERT(!c->entries);
    bfs_bc_mem_destroy(c->mem); /* its reaper releases what it was given, then ends */
    free(c);
}

bfs_bc_mem *bfs_bc_memory(bfs_bc *c)
{
    return c->mem;
}

bfs_bc_entry *bfs_bc_entries(bfs_bc *c)
{
    HELD(c);
    return c->entries;
}

static uint32_t bucket_of(uint64_t epoch, uint64_t k)
{
    return (uint32_t)(bfs_mix64(epoch * 0x9E3779B97F4A7C15ull ^ k) & (BUCKETS - 1));
}

bfs_bc_entry *bfs_bc_find(bfs_bc *c, uint64_t epoch, uint64_t k)
{
    HELD(c);
    for (bfs_bc_entry *e = c->index[bucket_of(epoch, k)]; e; e = e->hnext)
        if (e->epoch == epoch && e->k == k)
            return e;
    return NULL;
}

void bfs_bc_unlink(bfs_bc *c, bfs_bc_entry *e)
{
    HELD(c);
    bfs_bc_entry **p = &c->index[bucket_of(e->epoch, e->k)];
    while (*p && *p != e)
        p = &(*p)->hnext;
    if (!*p)
        return; /* (not in the cache) */
    *p = e->hnext;
    c->list_bytes -= e->size;
    c->list_count--;
    if (e->prev)
        e->prev->next = e->next;
    else
        c->entries = e->next;
    if (e->next)
        e->next->prev = e->prev;
    e->next = e->prev = e->hnext = NULL;
}

uint64_t bfs_bc_room(const bfs_bc *c)
{
    HELD(c);
    /* the entries' bytes, kept as they come and go: the finished batches counted by the
     * last pass (cached_bytes) went stale once passes were skipped while nothing needs to
     * go (quiet_files), and a pool grew past the budget by the batches finished since */
    return c->list_bytes < c->budget ? c->budget - c->list_bytes : 0;
}

void bfs_bc_give_back(bfs_bc *c, uint8_t *buf, uint64_t size)
{
    HELD(c);
    bfs_bc_free(c->mem, buf, size, bfs_bc_room(c));
}

void bfs_bc_entry_release(bfs_bc *c, bfs_bc_entry *e)
{
    HELD(c);
    if (e->fd >= 0)
        bfs_bc_release(c->mem, e->data, e->size, e->fd);
    else
        bfs_bc_give_back(c, e->data, e->size);
}

/* The passed-batch bound adapts. Keeping finished batches no reader will read costs
 * memory that, on VMs that hand free memory back to the host, is fresh for every batch
 * (docs/engine.md, "Batch memory"); it pays only when a reader comes back for one (an
 * epoch read again, a job that starts later). So the bound starts at PASSED_FIRST, and
 * each regret — a new entry for a batch evicted as passed, remembered here — doubles it,
 * up to the cache's budget. */
static uint32_t ghost_slot(uint64_t epoch, uint64_t k)
{
    return (uint32_t)(bfs_mix64(epoch * 0x9E3779B97F4A7C15ull ^ k) % GHOSTS);
}

/* Batch (epoch, k) was evicted as passed: remembered for regrets; and from now on memory
 * is recycled, so huge_later's huge pages start (bfs_bc_set_files). */
static void passed_evicted(bfs_bc *c, uint64_t epoch, uint64_t k)
{
    HELD(c);
    if (c->huge_later) {
        c->huge_later = 0;
        bfs_bc_use_huge(c->mem);
    }
    uint32_t i = ghost_slot(epoch, k);
    c->ghosts[i].epoch1 = epoch + 1, c->ghosts[i].k = k;
}

void bfs_bc_insert(bfs_bc *c, bfs_bc_entry *e)
{
    HELD(c);
    e->next = c->entries;
    e->prev = NULL;
    if (e->next)
        e->next->prev = e;
    c->entries = e;
    uint32_t b = bucket_of(e->epoch, e->k); /* (the newest first here too: the one found) */
    e->hnext = c->index[b];
    c->index[b] = e;
    c->list_bytes += e->size;
    c->list_count++;
    c->inserted++;
    uint32_t i = ghost_slot(e->epoch, e->k); /* a regret when it was evicted as passed */
    if (c->ghosts[i].epoch1 != e->epoch + 1 || c->ghosts[i].k != e->k)
        return;
    c->ghosts[i].epoch1 = 0;
    c->st.passed_regrets++;
    if (!c->passed_fixed && c->passed_max < c->budget)
        c->passed_max = c->passed_max > c->budget / 2 ? c->budget : 2 * c->passed_max;
}

/* The entry's memory given back, then the owner's rest (ops.drop). */
static void drop(bfs_bc *c, bfs_bc_entry *e)
{
    bfs_bc_entry_release(c, e);
    c->ops.drop(c->ops.arg, e);
}

/* Whether no eviction can be needed now, known without a pass over the entries: each sum
 * a pass compares with its bound is at most what the cache counts as entries come and go.
 * What is held, and of it what no reader will read, is at most the bytes of all the entries
 * (list_bytes). Each entry holds at most one batch file, but for one not finished (an
 * entry fetched whose file is sealed, or found in the store: two for a moment), and a
 * finished (READY) entry stays finished: so the files are at most the entries, plus those
 * unfinished at the last pass and those inserted since, plus files_making. The failed
 * entries are at most the latter two as well (a finished entry never fails). Returns the
 * files held at most, or UINT64_MAX when a pass is needed. */
static uint64_t quiet_files(const bfs_bc *c, uint64_t need)
{
    uint64_t unsettled = c->unsettled + c->inserted;
    uint64_t files = c->list_count + unsettled + c->files_making;
    if (c->list_bytes > c->budget || c->list_bytes > c->passed_max ||
        unsettled > BFS_BC_MAX_FAILED ||
        (c->file_budget != UINT64_MAX && files + need > c->file_budget))
        return UINT64_MAX;
    return files;
}

/* By entry age (used), the oldest first: the order the passed bound evicts in. */
static int by_used(const void *a, const void *b)
{
    const bfs_bc_entry *x = *(bfs_bc_entry *const *)a, *y = *(bfs_bc_entry *const *)b;
    return x->used < y->used ? -1 : x->used > y->used;
}

/* Keep in heap (a max-heap by used of at most SWEEP entries, *n now) the SWEEP least
 * recently used of the entries offered. */
static void sweep_offer(bfs_bc_entry **heap, int *n, bfs_bc_entry *e)
{
    int i;
    if (*n < SWEEP) {
        for (i = (*n)++; i > 0 && heap[(i - 1) / 2]->used < e->used; i = (i - 1) / 2)
            heap[i] = heap[(i - 1) / 2];
        heap[i] = e;
        return;
    }
    if (e->used >= heap[0]->used)
        return;
    for (i = 0;;) { /* the root (the most recent kept) goes: sift e down from there */
        int l = 2 * i + 1, m = l + 1 < *n && heap[l + 1]->used > heap[l]->used ? l + 1 : l;
        if (l >= *n || heap[m]->used <= e->used)
            break;
        heap[i] = heap[m];
        i = m;
    }
    heap[i] = e;
}

/* Victim v is out of the list: counted (passed: no active reader will read it), its
 * memory given back and the owner's rest dropped. */
static void evicted(bfs_bc *c, bfs_bc_entry *v, int passed)
{
    if (v->state == BFS_BC_READY) {
        c->st.evictions++;
        if (passed) {
            c->st.evicted_passed++;
            passed_evicted(c, v->epoch, v->k);
        } else
            c->st.evicted_ahead++;
        BFS_ASSERT(c->st.cached_bytes >= v->size); /* (held: the sum offered) */
        c->st.cached_bytes -= v->size;
    }
    drop(c, v);
}

/*
 * Evict finished, unreferenced entries until within budget, as the policy above says:
 * first what no active reader will read (LRU first), then what the nearest reader will
 * read last. What no active reader will read is also kept to passed_max bytes even under
 * budget, so that a daemon reading an epoch larger than that recycles memory it touched
 * moments ago instead of growing to the whole budget: fresh memory costs a page fault per
 * page, and on VMs that hand freed memory back to the host (virtio free page reporting)
 * ~2 ms per MiB more (measured: a 38 MB batch file 80-96 ms on cold pages, 2 ms on
 * recycled huge pages), as much as half of computing that batch (see docs/engine.md,
 * "Batch memory", for the measurements: a sequential reader fell from 2,500 to 1,400
 * images/s after 1.4 GB without this bound). A re-read of a batch evicted this way is
 * computed again, identically (a regret, which raises passed_max: see above). Once that
 * bound chooses a victim, the oldest passed batches go until an eighth below it
 * (PASSED_SLACK), in one more pass. Batch files
 * are bounded by file_budget as well (one descriptor each: a daemon of small batches at
 * the usual limit of 1,024 descriptors ran out after ~1,000 batches, and every open of its
 * sources failed), with room left for `need` more; returns the batch files held then (at
 * most: counted as quiet_files does when it shows that nothing needs to go, without a
 * pass, and so without updating the counts of bytes and files held).
 * Failed entries keep only their error (failures are deterministic: a retry would fail
 * again), at most BFS_BC_MAX_FAILED of them; the owner drops those that failed for lack
 * of a resource, which are not.
 */
uint64_t bfs_bc_evict(bfs_bc *c, uint64_t need)
{
    HELD(c);
    uint64_t quiet = quiet_files(c, need);
    if (quiet != UINT64_MAX)
        return quiet;
    bfs_bc_reader rd[BFS_BC_MAX_READERS];
    uint64_t nb = 0;
    int nrd = c->ops.readers(c->ops.arg, rd, &nb);
    /* the passed bound, lowered by a slack once it chose a victim (see PASSED_SLACK) */
    uint64_t passed_max = c->passed_max;
    for (;;) {
        unsigned failed = 0;
        uint64_t unsettled = 0;
        bfs_bc_entry *old_failed = NULL;
        bfs_bc_entry *sweep[SWEEP];
        int nsweep = 0, sweeping = passed_max < c->passed_max;
        bfs_bc_choice ch;
        bfs_bc_begin(&ch);
        c->st.evict_passes++;
        uint64_t kept_files = c->files_making; /* files that cannot go now */
        for (bfs_bc_entry *b = c->entries; b; b = b->next) {
            /* a fetched entry's file is its fetcher's (not read here: that thread sets it
             * unlocked): counted as held in batch-file mode */
            kept_files += (b->state == BFS_BC_FETCHING && c->files_on) +
                          (b->fd >= 0 && (b->refs || b->state != BFS_BC_READY));
            unsettled += b->state != BFS_BC_READY;
            if (b->refs)
                continue;
            if (b->state == BFS_BC_FAILED) {
                failed++;
                if (!old_failed || b->used < old_failed->used)
                    old_failed = b;
            }
            if (b->state != BFS_BC_READY)
                continue;
            uint64_t next = bfs_bc_next_read(rd, nrd, nb, b->epoch, b->k);
            bfs_bc_offer(&ch, b, b->size, b->used, next, b->fd >= 0);
            if (sweeping && next == UINT64_MAX)
                sweep_offer(sweep, &nsweep, b);
        }
        c->st.cached_bytes = ch.held;
        c->st.files = ch.files + kept_files;
        c->files_fresh = 0; /* (counted now: as files_making, or held) */
        c->unsettled = unsettled, c->inserted = 0;
        uint64_t files_max =
            c->file_budget > kept_files + need ? c->file_budget - kept_files - need : 0;
        int passed = 0;
        bfs_bc_entry *victim =
            failed > BFS_BC_MAX_FAILED
                ? old_failed
                : (bfs_bc_entry *)bfs_bc_victim(&ch, c->budget, files_max, passed_max, &passed);
        if (!victim)
            return c->st.files;
        int by_passed = failed <= BFS_BC_MAX_FAILED && ch.held <= c->budget &&
                        ch.files <= files_max; /* (the passed bound chose it) */
        if (by_passed && nsweep) {
            /* the least recently used passed batches, in that order, as passes one per
             * victim would choose them (nothing changes in between: the readers were
             * asked once, every entry is under the lock) */
            qsort(sweep, (size_t)nsweep, sizeof *sweep, by_used);
            for (int i = 0; i < nsweep && ch.passed > passed_max; i++) {
                bfs_bc_unlink(c, sweep[i]);
                ch.held -= sweep[i]->size;
                ch.files -= sweep[i]->fd >= 0;
                ch.passed -= sweep[i]->size;
                evicted(c, sweep[i], 1);
            }
        } else {
            bfs_bc_unlink(c, victim);
            int ready = victim->state == BFS_BC_READY;
            uint64_t size = victim->size; /* (victim is dropped below) */
            c->unsettled -= !ready;
            if (ready) {
                /* what the next pass would offer: this pass's sums less the victim's */
                ch.held -= victim->size;
                ch.files -= victim->fd >= 0;
                ch.passed -= passed ? victim->size : 0;
            }
            evicted(c, victim, passed);
            if (!ready)
                continue;
            if (by_passed && passed_max == c->passed_max && passed_max / PASSED_SLACK >= size) {
                passed_max -= passed_max / PASSED_SLACK;
                continue; /* (a pass that collects the sweep) */
            }
        }
        /* a READY victim that brought every sum within its bound ends the loop without
         * another pass over the entries, which would choose nothing: one pass per victim
         * and none after the last (a cache of 500 small batches made two passes for each
         * finished one, 5% of a token daemon's CPU) */
        if (failed <= BFS_BC_MAX_FAILED && ch.held <= c->budget && ch.files <= files_max &&
            ch.passed <= passed_max) {
            c->st.files = ch.files + kept_files;
            return c->st.files;
        }
    }
}

/* Room for one more batch file (a descriptor) within the budget, after evicting for it
 * as for memory: then it is counted as being made (the caller makes it and reports it
 * with bfs_bc_file_made), and 1 is returned. Else 0: the batch stays in its buffer and is
 * served by copying (bfs_batch_fd -1), counted in files_refused, and said once in the
 * log. Below the budget by the last count (each finished batch makes one) no pass over
 * the entries is made for it: the executor keeps to one pass per finished batch. */
int bfs_bc_file_slot(bfs_bc *c)
{
    HELD(c);
    if (c->file_budget == UINT64_MAX || c->st.files + c->files_fresh < c->file_budget ||
        bfs_bc_evict(c, 1) < c->file_budget) {
        c->files_making++;
        c->files_fresh++;
        return 1;
    }
    c->st.files_refused++;
    if (!c->said_files) {
        c->said_files = 1;
        fprintf(stderr,
                "batchfs: the descriptor limit (ulimit -n %llu) holds %llu batch files, all "
                "in use by open batches: further batches are served by copying until some "
                "close (raise ulimit -n for more)\n",
                (unsigned long long)bfs_fd_limit(), (unsigned long long)c->file_budget);
    }
    return 0;
}

void bfs_bc_file_made(bfs_bc *c, int rc)
{
    HELD(c);
    BFS_ASSERT(c->files_making > 0);
    c->files_making--;
    if (rc)
        c->st.files_refused++;
}

/*
 * A buffer for a new entry of size bytes taken from a finished batch that no active
 * reader will read (the least recently used of them), when the batches in buffers,
 * finished and in the making, leave the cache's budget no room for the new one: evicted
 * now rather than once the new one finishes, so its memory, touched moments ago, is reused
 * instead of fresh memory (a page fault and zeroing per page; ~2 ms per MiB on VMs that
 * give freed memory back to the host). Without this, a cache full at its budget (a small
 * cache_mb, or --bench) allocated a fresh buffer for most batches: the pool keeps more
 * than two only within the budget's room. Only batches held in buffers (not batch files:
 * readers may map those). NULL when there is room or no such batch.
 */
uint8_t *bfs_bc_take_passed(bfs_bc *c, uint64_t size)
{
    HELD(c);
    bfs_bc_mem_stats ms; /* the buffers given out: those of the entries and any on their way */
    bfs_bc_mem_get_stats(c->mem, &ms);
    if (ms.buffer_bytes_out + size <= c->budget)
        return NULL;   /* (room without a walk of the entries: in batch-file mode, always) */
    uint64_t held = 0; /* in buffers: finished, and in the making */
    for (bfs_bc_entry *b = c->entries; b; b = b->next)
        if (b->fd < 0 && b->data)
            held += b->size;
    if (held + size <= c->budget)
        return NULL;
    bfs_bc_reader rd[BFS_BC_MAX_READERS];
    uint64_t nb = 0;
    int nrd = c->ops.readers(c->ops.arg, rd, &nb);
    /* with a pool file (gpu_pool_mb=), windows first: a buffer of its own that a batch got
     * when the pool was full would otherwise be handed on for ever, and every batch in it
     * staged by the loader */
    uint64_t psize, off;
    int pool = bfs_bc_pool_fd(c->mem, &psize) >= 0, vwin = 0;
    bfs_bc_entry *victim = NULL;
    for (bfs_bc_entry *b = c->entries; b; b = b->next) {
        if (b->refs || b->state != BFS_BC_READY || b->fd >= 0 || b->size != size ||
            bfs_bc_next_read(rd, nrd, nb, b->epoch, b->k) != UINT64_MAX)
            continue;
        int win = pool && bfs_bc_window(c->mem, b->data, &off);
        if (!victim || win > vwin || (win == vwin && b->used < victim->used))
            victim = b, vwin = win;
    }
    if (!victim)
        return NULL;
    uint8_t *data = victim->data;
    bfs_bc_unlink(c, victim);
    c->st.evictions++;
    c->st.evicted_passed++;
    passed_evicted(c, victim->epoch, victim->k);
    /* (cached_bytes is as of the last eviction: the victim may have finished since) */
    c->st.cached_bytes -= c->st.cached_bytes >= victim->size ? victim->size : c->st.cached_bytes;
    victim->data = NULL; /* taken: drop frees the rest */
    drop(c, victim);
    if (pool && !vwin) { /* (its own buffer goes; the new batch looks for a window) */
        bfs_bc_give_back(c, data, size);
        return NULL;
    }
    return data;
}

void bfs_bc_set_budget(bfs_bc *c, uint64_t bytes)
{
    HELD(c);
    c->budget = bytes;
    bfs_bc_evict(c, 0);
    /* pooled buffers beyond two lived in the budget's room: give back what no longer fits */
    bfs_bc_trim(c->mem, bfs_bc_room(c));
}

void bfs_bc_set_passed_max(bfs_bc *c, uint64_t bytes, int grow)
{
    HELD(c);
    c->passed_max = bytes;
    c->passed_fixed = !grow;
    bfs_bc_evict(c, 0);
}

void bfs_bc_set_files(bfs_bc *c, int on, uint64_t file_budget, int huge_later)
{
    HELD(c);
    c->files_on = on;
    c->huge_later = on && huge_later;
    c->file_budget = file_budget;
    bfs_bc_evict(c, 0);
}

int bfs_bc_files(const bfs_bc *c)
{
    HELD(c);
    return c->files_on;
}

uint64_t bfs_bc_budget(const bfs_bc *c)
{
    HELD(c);
    return c->budget;
}

void bfs_bc_get_stats(const bfs_bc *c, bfs_bc_stats *st)
{
    HELD(c);
    *st = c->st;
    /* held now, counted as bfs_bc_evict's passes count (which quiet_files may skip) */
    st->cached_bytes = 0, st->files = c->files_making;
    for (const bfs_bc_entry *b = c->entries; b; b = b->next) {
        int offered = !b->refs && b->state == BFS_BC_READY;
        st->cached_bytes += offered ? b->size : 0;
        st->files += (b->state == BFS_BC_FETCHING && c->files_on) + (b->fd >= 0);
    }
    st->budget = c->budget;
    st->passed_max = c->passed_max;
    st->file_budget = c->file_budget;
}

void bfs_bc_check(bfs_bc *c)
{
    HELD(c);
    uint64_t in_buffers = 0;
    for (const bfs_bc_entry *e = c->entries; e; e = e->next) {
        BFS_ASSERT(e->fd < 0 || e->state == BFS_BC_READY);
        BFS_ASSERT(e->state != BFS_BC_FAILED || !e->data);
        if (e->fd < 0 && e->data)
            in_buffers += e->size;
    }
    bfs_bc_mem_stats ms;
    bfs_bc_mem_get_stats(c->mem, &ms);
    BFS_ASSERT(ms.buffer_bytes_out == in_buffers);
}
