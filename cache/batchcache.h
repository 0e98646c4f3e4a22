/*
 * batchcache.h — a mount's in-memory cache of finished batches: its eviction policy, the
 * cache itself (entries, regrets, the budgets), and its memory.
 *
 * The executor (engine/exec.c) computes the batches and keeps the table of active
 * readers; this module decides which finished batch to let go of. The rules
 * (docs/engine.md, "Readers and the window"):
 *   - a batch's worth is when the nearest active reader will read it (bfs_bc_next_read:
 *     readers walk k, k+s, k+2s, ... of an epoch, or its batches in the order of their
 *     names sorted as strings (a shell's glob, `ls`), and, once seen to, on into the next);
 *   - over the budget, the batch read farthest in the future goes first (least recently
 *     used among equals): a reader behind the window recomputes it, identically;
 *   - batches no reader will read ("passed") are kept to passed_max bytes even under the
 *     budget, oldest first out, so that memory is recycled while warm instead of the cache
 *     growing to the whole budget with fresh pages;
 *   - batches held in files (one descriptor each) are bounded by a count as well, the
 *     descriptors the process may spend on them: beyond it, the file read farthest in the
 *     future goes first, as over the byte budget.
 * The policy is pure functions over plain values (bfs_bc_begin, _offer, _victim: no
 * allocation, no locks, no knowledge of jobs, files or FUSE).
 *
 * The cache (bfs_bc, below) applies it: one stateful object per executor holding the
 * entries, the byte budget, the adaptive passed-batch bound and its table of regrets, the
 * budget of batch files, the buffers taken from passed batches, and the counters. Its
 * entries are the executor's jobs: single-flight makes the batch being computed and the
 * batch cached one object, so each job embeds a bfs_bc_entry and the cache's list is the
 * executor's job table. The executor feeds it the reader table and frees what it evicts
 * through callbacks (bfs_bc_ops); the cache has no lock and is called under the
 * executor's.
 *
 * And the cache's memory (bfs_bc_mem, below): batch buffers, with a pool of freed ones for
 * reuse; read-only batch files (sealed memfds, or files on a private huge-page tmpfs) that
 * the mount hands to the kernel under FUSE passthrough; and a reaper thread that releases
 * what the cache lets go of away from the paths readers wait on.
 */
#ifndef BATCHFS_CACHE_BATCHCACHE_H
#define BATCHFS_CACHE_BATCHCACHE_H

#include <stdint.h>
#include <stddef.h>

/* An active reader as the executor's reader table has it. */
typedef struct bfs_bc_reader {
    uint64_t epoch, k; /* the batch it read last */
    int64_t stride;    /* its step (0 counts as 1) */
    int crossed;       /* it went on from one epoch into the next before */
    int lex;           /* it reads in the names' string order (bfs_bc_lex_next), not by stride */
} bfs_bc_reader;

/* bfs_bc_walk_len - batches a walk r0, r0 + s, ... (0 <= r0 < s, s > 0) takes in an epoch
 * of nb batches (walk.c). */
int64_t bfs_bc_walk_len(int64_t nb, int64_t r0, int64_t s);

/*
 * The order of a shell's glob or of `ls`: batch_0, batch_1, batch_10, batch_100, ...,
 * batch_101, ..., batch_11, ... (the names sorted as strings; the same in the C locale and
 * in glibc's others, where names that differ only in digits after one prefix compare
 * digit by digit). A fixed order over 0..nb-1, so a reader walking it can be followed.
 * bfs_bc_lex_next - the batch after k in that order, or -1 when k is its last (or k >= nb).
 * bfs_bc_lex_rank - k's place in it, 0 .. nb-1 (k < nb). Both O(digits).
 */
int64_t bfs_bc_lex_next(uint64_t k, uint64_t nb);
uint64_t bfs_bc_lex_rank(uint64_t k, uint64_t nb);

/* ---- the readers' walks (walk.c): one model for prefetch and eviction ------------------ */

/*
 * bfs_bc_walk_next - one step of r's walk (its stride, or lex; on into the next epoch when
 * r crossed one before: after the last batch of its residue comes the next epoch's first of
 * that residue, lex: batch 0) from batch *k of *epoch (nb batches per epoch, ne epochs: never
 * at or beyond ne): 0 with *epoch, *k moved, or -1 where the walk ends (its epoch's end
 * without crossing, a negative stride past 0, the last epoch). r's own position is not
 * read: the walk steps from (*epoch, *k). Prefetch follows a reader with it, and a request
 * that is r's next step continues r's walk.
 */
int bfs_bc_walk_next(const bfs_bc_reader *r, uint64_t nb, uint64_t ne, uint64_t *epoch,
                     uint64_t *k);

/*
 * bfs_bc_next_read - in how many of its steps the nearest of readers r[0..n) will read
 * batch k of epoch (nb batches per epoch), or UINT64_MAX when none will (behind every
 * reader, off their strides, or epochs away): the inverse of bfs_bc_walk_next, counting
 * the steps from each reader's own position (the eviction's measure of a batch's worth).
 */
uint64_t bfs_bc_next_read(const bfs_bc_reader *r, int n, uint64_t nb, uint64_t epoch, uint64_t k);

/* A choice in the making: bfs_bc_begin, bfs_bc_offer each finished, unreferenced batch,
 * then bfs_bc_victim. */
typedef struct bfs_bc_choice {
    uint64_t held;   /* bytes offered */
    uint64_t passed; /* of which no reader will read */
    uint64_t files;  /* items offered that hold a file */
    const void *oldest_passed, *far, *far_file;
    uint64_t oldest_passed_used, far_used, far_next, far_file_used, far_file_next;
} bfs_bc_choice;

void bfs_bc_begin(bfs_bc_choice *c);

/* bfs_bc_offer - batch `item` (opaque to the policy) of size bytes, last used at tick
 * `used`, next read in next_read steps (bfs_bc_next_read; UINT64_MAX: passed); file != 0
 * when it holds a file (a descriptor). */
void bfs_bc_offer(bfs_bc_choice *c, const void *item, uint64_t size, uint64_t used,
                  uint64_t next_read, int file);

/*
 * bfs_bc_victim - the item to evict under budget bytes (what may be held), files_max
 * (how many of the items offered may hold a file) and passed_max (what may be held of
 * passed batches), in that order, or NULL when everything offered may stay. Over budget
 * or files_max, the farthest next read goes (least recently used among equals; over
 * files_max, among the items holding a file); over passed_max the oldest passed batch.
 * *passed (may be NULL) says whether the victim is a passed batch (else one read ahead).
 */
const void *bfs_bc_victim(const bfs_bc_choice *c, uint64_t budget, uint64_t files_max,
                          uint64_t passed_max, int *passed);

/* ---- memory ------------------------------------------------------------------------------
 * Thread-safe: a lock of its own, a leaf (the executor calls in holding its lock; nothing here
 * calls out), held only to update the pool and the reaper's list: never while allocating,
 * writing, mapping or releasing memory. */
typedef struct bfs_bc_mem bfs_bc_mem;

#define BFS_BC_POOL_MAX 16 /* freed buffers kept at most (see bfs_bc_free) */

/* bfs_bc_mem_create - empty memory, its reaper thread started (when it cannot start, memory
 * is released where it is let go of, on the caller's thread). 0 or -ENOMEM. */
int bfs_bc_mem_create(bfs_bc_mem **out);

/* bfs_bc_mem_destroy - stop the reaper once it released all it was handed, free the pool.
 * Every buffer and file given out must have come back (bfs_bc_free, bfs_bc_release). NULL ok. */
void bfs_bc_mem_destroy(bfs_bc_mem *m);

/* bfs_bc_alloc - a batch buffer of size bytes: a pooled one of that size, or a new one,
 * 4096-aligned (2 MiB-aligned and advised for huge pages from 2 MiB up). NULL: no memory. */
uint8_t *bfs_bc_alloc(bfs_bc_mem *m, uint64_t size);

/*
 * bfs_bc_free - give back a buffer of bfs_bc_alloc (NULL ok). It is kept in the pool for the
 * next batches when fewer than two are pooled, or when (at most BFS_BC_POOL_MAX kept) fewer
 * buffers are out and pooled than were ever out at once and the pool, with it, fits in room:
 * the bytes the cache budget has left (budget less the finished batches held). Otherwise it
 * goes to the reaper. A fresh 38 MB buffer costs ~10k page faults and zeroing (docs/engine.md,
 * "Batch memory"); batches come in bursts, and one no larger than the last finds every buffer
 * it needs.
 */
void bfs_bc_free(bfs_bc_mem *m, uint8_t *buf, uint64_t size, uint64_t room);

/* bfs_bc_trim - give pooled buffers beyond two to the reaper until the pool fits in room
 * (the cache budget shrank). */
void bfs_bc_trim(bfs_bc_mem *m, uint64_t room);

/* bfs_bc_release - let go of a batch file from bfs_bc_to_file (or any read-only mapping of
 * size bytes of fd, which is closed): unmapped and closed by the reaper. Closing a 38 MB
 * memfd frees its pages there and then, 1.8-3.3 ms. */
void bfs_bc_release(bfs_bc_mem *m, const uint8_t *map, uint64_t size, int fd);

/*
 * bfs_bc_use_files - decide where batch files go: with huge != 0 a private tmpfs with
 * huge=within_size (a detached mount holding O_TMPFILE files; needs CAP_SYS_ADMIN), else, or
 * when refused, sealed memfds. Later calls change nothing, but for bfs_bc_use_huge.
 * Returns 1 when files go to huge pages.
 */
int bfs_bc_use_files(bfs_bc_mem *m, int huge);

/* bfs_bc_use_huge - from now on, new batch files go to the huge-page tmpfs (made now, once;
 * files made before stay where they are). Returns 1 when they do, 0 when it was refused
 * (memfds go on). */
int bfs_bc_use_huge(bfs_bc_mem *m);

/*
 * bfs_bc_to_file - a new read-only file holding the size bytes at src, mapped read-only:
 * *map and *fd, to be given back with bfs_bc_release. The file never changes: a memfd sealed
 * against writes, shrinking and growing, or a tmpfs file reopened read-only (the daemon keeps
 * no descriptor that can write it). 0, or a negative errno with nothing to give back.
 */
int bfs_bc_to_file(bfs_bc_mem *m, const uint8_t *src, uint64_t size, const uint8_t **map, int *fd);

/* The same in two steps, for bytes that arrive in pieces (a batch read from Redis):
 * bfs_bc_file_open - a new, empty batch file for size bytes, to be written with pwrite;
 * *sealable says which kind it is (pass it on). The descriptor, or a negative errno.
 * bfs_bc_file_seal - make the written file fd read-only (as bfs_bc_to_file does) and map it:
 * *map, *fd_out, to be given back with bfs_bc_release. 0, or a negative errno (fd closed). */
int bfs_bc_file_open(bfs_bc_mem *m, uint64_t size, int *sealable);
int bfs_bc_file_seal(bfs_bc_mem *m, int fd, int sealable, uint64_t size, const uint8_t **map,
                     int *fd_out);

/*
 * bfs_bc_use_pool - from now on batch buffers are windows of one memfd of bytes (rounded
 * up to pages), mapped once (read-write, shared): a GPU loader maps the same file and
 * registers it with its driver once (docs/gpu.md, copy=pool). A batch that finds no window
 * free gets a buffer of its own (counted in pool_misses). Call once, before the first
 * bfs_bc_alloc. 0 or a negative errno (no pool: buffers as before).
 * bfs_bc_pool_fd - the pool's descriptor (read-write; the caller must not close it) and
 * *size, or -1.
 * bfs_bc_window - 1 with *off when p (a buffer of bfs_bc_alloc) is a window of the pool, at
 * offset *off of its file; 0 when not. A window is handed out again only after its buffer
 * came back with bfs_bc_free.
 */
int bfs_bc_use_pool(bfs_bc_mem *m, uint64_t bytes);
int bfs_bc_pool_fd(bfs_bc_mem *m, uint64_t *size);
int bfs_bc_window(const bfs_bc_mem *m, const uint8_t *p, uint64_t *off);

typedef struct bfs_bc_mem_stats {
    int buffers;               /* allocated now: given out and pooled */
    uint64_t buffer_bytes_out; /* bytes of the buffers given out now (not pooled) */
    uint64_t buffer_allocs;    /* allocated fresh, not taken from the pool */
    int huge_files;            /* batch files go to huge pages */
    uint64_t pool_bytes;       /* the pool file's size (bfs_bc_use_pool), 0: none */
    uint64_t pool_used;        /* bytes of its windows given out now */
    uint64_t pool_misses;      /* buffers that found no window free */
} bfs_bc_mem_stats;

void bfs_bc_mem_get_stats(bfs_bc_mem *m, bfs_bc_mem_stats *st);

/* ---- the cache: its entries, eviction, regrets, the file budget --------------------------
 * One stateful object per executor: the entries (every job of the executor, finished or
 * not: single-flight makes the batch being computed and the batch cached one object, so
 * the executor embeds a bfs_bc_entry in each job), the byte budget, the adaptive
 * passed-batch bound and its table of regrets, the budget of batch files, the memory
 * (bfs_bc_mem) and the counters. It holds no lock: every function below but
 * bfs_bc_create, bfs_bc_destroy and bfs_bc_memory is called under the owner's lock
 * (engine/exec.c: x->lock), which bfs_bc_ops.held checks in debug and sanitizer builds.
 * Its only call out is bfs_bc_ops.drop, for an entry it evicted (under that lock). */
typedef struct bfs_bc bfs_bc;

/* An entry's state as the cache sees it: in the making (computed, looked up), being
 * fetched (a remote job: in batch-file mode its file is counted as held), finished
 * (evictable when unreferenced), failed (only its error: at most BFS_BC_MAX_FAILED kept). */
enum { BFS_BC_MAKING, BFS_BC_FETCHING, BFS_BC_READY, BFS_BC_FAILED };

#define BFS_BC_MAX_READERS 64   /* readers the policy is fed at most */
#define BFS_BC_MAX_FAILED  1024 /* failed batches remembered (their error only) */

typedef struct bfs_bc_entry {
    struct bfs_bc_entry *next;  /* the cache's list, newest first */
    struct bfs_bc_entry *prev;  /* (the cache's: the list backwards, for an unlink in O(1)) */
    struct bfs_bc_entry *hnext; /* (the cache's: its bucket of the index by (epoch, k)) */
    uint64_t epoch, k, size;
    uint8_t *data; /* a buffer of the cache's memory (fd < 0), a read-only mapping of fd, or
                    * NULL (failed, or taken) */
    int fd;        /* the batch file holding a READY batch's bytes, or -1 */
    int refs;      /* the owner's references: an entry with any is never evicted */
    int state;     /* BFS_BC_*, set by the owner */
    uint64_t used; /* LRU tick (the owner's clock; 0: consumed, the first to go) */
} bfs_bc_entry;

typedef struct bfs_bc_ops {
    void *arg;
    /* The active readers now (at most BFS_BC_MAX_READERS) into out, and *nb, the batches
     * per epoch; returns how many. */
    int (*readers)(void *arg, bfs_bc_reader *out, uint64_t *nb);
    /* Entry e left the cache (evicted; its memory given back already): free the rest. */
    void (*drop)(void *arg, bfs_bc_entry *e);
    /* Debug and sanitizer builds: whether the calling thread holds the owner's lock (NULL:
     * not checked). */
    int (*held)(const void *arg);
} bfs_bc_ops;

typedef struct bfs_bc_stats {
    uint64_t cached_bytes;   /* finished unreferenced batches held now */
    uint64_t files;          /* batch files held now (and being made) */
    uint64_t files_refused;  /* batches kept without a file: no room in the file budget */
    uint64_t evictions;      /* finished batches evicted */
    uint64_t evicted_passed; /* of which no active reader would read */
    uint64_t evicted_ahead;  /* of which a reader would still read */
    uint64_t passed_regrets; /* new entries for batches evicted as passed */
    uint64_t budget;         /* the byte budget */
    uint64_t passed_max;     /* the passed-batch bound (may exceed budget) */
    uint64_t file_budget;    /* batch files that may be held (UINT64_MAX: no limit) */
    uint64_t evict_passes;   /* passes of bfs_bc_evict over the entries (its cost) */
} bfs_bc_stats;

/* bfs_bc_create - an empty cache of budget bytes, its memory made (bfs_bc_mem_create); ops
 * copied. 0 or -ENOMEM. bfs_bc_destroy - free it (NULL ok): no entry may be left; its
 * memory's reaper releases what it was given, then ends. */
int bfs_bc_create(const bfs_bc_ops *ops, uint64_t budget, bfs_bc **out);
void bfs_bc_destroy(bfs_bc *c);

/* bfs_bc_memory - the cache's memory, for what is thread-safe there (allocation, batch
 * files): called without the owner's lock. */
bfs_bc_mem *bfs_bc_memory(bfs_bc *c);

/* The entries: bfs_bc_entries - the newest (follow ->next), or NULL; bfs_bc_find - the
 * entry of (epoch, k), or NULL (an index by (epoch, k): no pass over the entries);
 * bfs_bc_insert - a new entry, at the head (a regret when
 * (epoch, k) was evicted as passed: see bfs_bc_set_passed_max); bfs_bc_unlink - out of the
 * list and the index (the caller frees it; e must be in the cache). */
bfs_bc_entry *bfs_bc_entries(bfs_bc *c);
bfs_bc_entry *bfs_bc_find(bfs_bc *c, uint64_t epoch, uint64_t k);
void bfs_bc_insert(bfs_bc *c, bfs_bc_entry *e);
void bfs_bc_unlink(bfs_bc *c, bfs_bc_entry *e);

/* bfs_bc_room - what the budget has left for pooled buffers: the budget less the bytes of
 * the entries (finished, in the making, or held by readers), counted as they come and go. */
uint64_t bfs_bc_room(const bfs_bc *c);

/* bfs_bc_give_back - a buffer of the cache's memory (NULL ok) goes back to its pool or
 * the reaper (bfs_bc_free, within bfs_bc_room). bfs_bc_entry_release - e's memory goes:
 * its batch file (bfs_bc_release) or its buffer (bfs_bc_give_back). */
void bfs_bc_give_back(bfs_bc *c, uint8_t *buf, uint64_t size);
void bfs_bc_entry_release(bfs_bc *c, bfs_bc_entry *e);

/* bfs_bc_evict - evict finished, unreferenced entries until within budget, as the policy
 * above says, with room in the file budget for `need` more files; failed entries beyond
 * BFS_BC_MAX_FAILED go too (the oldest). Returns the batch files held then. */
uint64_t bfs_bc_evict(bfs_bc *c, uint64_t need);

/* bfs_bc_file_slot - room for one more batch file: 1, counted as being made until
 * bfs_bc_file_made; or 0 (the batch is served by copying; counted in files_refused and
 * said once in the log). bfs_bc_file_made - a file of a slot was made (rc 0) or not. */
int bfs_bc_file_slot(bfs_bc *c);
void bfs_bc_file_made(bfs_bc *c, int rc);

/* bfs_bc_take_passed - a buffer of size bytes taken from a finished batch no active
 * reader will read (the least recently used), when the batches in buffers leave the
 * budget no room for a new one; NULL when there is room or no such batch. */
uint8_t *bfs_bc_take_passed(bfs_bc *c, uint64_t size);

/* Settings: bfs_bc_set_budget - the byte budget (evicts, trims the pool);
 * bfs_bc_set_passed_max - the passed-batch bound, fixed (grow 0) or doubled by each
 * regret up to the budget (evicts); bfs_bc_set_files - batch files on or off, at most
 * file_budget of them (UINT64_MAX: no limit), huge pages from the first passed eviction
 * on when huge_later (evicts); bfs_bc_files - whether batches go to batch files. */
void bfs_bc_set_budget(bfs_bc *c, uint64_t bytes);
void bfs_bc_set_passed_max(bfs_bc *c, uint64_t bytes, int grow);
void bfs_bc_set_files(bfs_bc *c, int on, uint64_t file_budget, int huge_later);
int bfs_bc_files(const bfs_bc *c);

/* bfs_bc_get_stats - the counters, and what is held now (a walk of the entries);
 * bfs_bc_budget - the byte budget alone (no walk). */
void bfs_bc_get_stats(const bfs_bc *c, bfs_bc_stats *st);
uint64_t bfs_bc_budget(const bfs_bc *c);

/* bfs_bc_check - debug and sanitizer builds: the buffers the entries hold, byte for byte,
 * are those the memory counts as given out (at the owner's destroy). */
void bfs_bc_check(bfs_bc *c);

#endif
