/*
 * store.h — the host-wide batch store behind `cache_dir=`: a content-addressed directory
 * of finished batch files keyed by (pipeline fingerprint, epoch, batch), shared by every
 * batchfs daemon on the host. Two mounts of the same pipeline compute each batch once.
 *
 * Neighbours: the executor (engine/exec.c) consults it on a miss of its in-memory cache:
 * bfs_store_claim -> HIT (serve the verified bytes) | MINE (compute, bfs_store_publish) |
 * BUSY (another process computes it: bfs_store_wait, or compute anyway). fs/ reports
 * bfs_store_get_stats in /stats. docs/cache.md specifies the directory layout and entry
 * format byte by byte.
 *
 * Guarantees:
 *  - An entry is served only after its size, key and XXH64 checksum have been verified, on
 *    every claim; a torn or corrupt entry is removed and answered as a miss (MINE).
 *  - Publication is atomic: an entry appears complete or not at all, whatever process
 *    dies at whatever moment (O_TMPFILE + linkat, or temp file + rename).
 *  - Single flight across processes: per key, at most one claimant holds MINE at a time
 *    (an OFD lock, released by the kernel when its holder dies: no stale markers).
 *  - The total size of entries stays under the budget (LRU by last use) and eviction
 *    only unlinks: a reader that holds a claim keeps reading its bytes.
 *
 * Every function is thread-safe on one bfs_store; a bfs_claim is used by one thread
 * at a time. Errors are 0 or a negative errno (base/err.h). Store errors are never fatal
 * for a daemon: the batch can always be computed and served without the store.
 */
#ifndef BATCHFS_CACHE_STORE_H
#define BATCHFS_CACHE_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "base/hash.h"

typedef struct bfs_store bfs_store;

/* The identity of one entry. fingerprint: bfs_pipeline_fingerprint of the pipeline. */
typedef struct bfs_store_key {
    uint64_t fingerprint;
    uint64_t epoch;
    uint64_t batch;
} bfs_store_key;

/* What bfs_store_publish makes durable (a mount option cache_dir_sync= is yet to be added). */
typedef enum bfs_store_sync {
    BFS_STORE_SYNC_NONE = 0, /* nothing: the checksum catches what a power loss tears */
    BFS_STORE_SYNC_DATA,     /* fdatasync the entry's bytes before it gets its name */
    BFS_STORE_SYNC_FULL,     /* fsync it, and its directories after: the name survives too */
} bfs_store_sync;

typedef struct bfs_store_opts {
    uint64_t budget_bytes; /* cache_dir_mb << 20; 0: unlimited */
    bfs_store_sync sync;
    /* 1: publish through a named temporary file + rename even where O_TMPFILE works (the
     * fallback for file systems without it; tests use it to cover that path) */
    int named_temps;
    /* 1: append the trailer to the entry file even where the file system takes user
     * xattrs (the fallback for file systems without them; tests use it) */
    int trailer_in_file;
    /* optional: one line, no newline, per noteworthy event (a corrupt entry removed with
     * its path and reason, stale files of dead writers removed; a save or lookup that
     * failed and a full file system: those the first time, then at most once a minute
     * with a count); called from the thread that saw it */
    void (*log_cb)(void *arg, const char *msg);
    void *log_arg;
} bfs_store_opts;

typedef enum bfs_store_state {
    BFS_STORE_NONE = 0, /* closed or never claimed */
    BFS_STORE_HIT,      /* entry verified: read data/size (or fd) */
    BFS_STORE_MINE,     /* the caller computes, then bfs_store_publish or _abandon */
    BFS_STORE_BUSY,     /* another claimant (any process) computes it right now */
} bfs_store_state;

/*
 * One claim on one key; caller-allocated, filled by bfs_store_claim / bfs_store_wait,
 * finished by bfs_store_claim_close (any state), bfs_store_publish or bfs_store_abandon
 * (MINE). The public fields are read-only for the caller.
 */
typedef struct bfs_claim {
    bfs_store_state state;
    bfs_store_key key;
    /* HIT only (else -1 / NULL / 0): a read-only descriptor of the entry file and a
     * read-only shared mapping of its payload, both valid until bfs_store_claim_close,
     * even if the entry is evicted meanwhile (unlink keeps an open inode readable). */
    int fd;
    const uint8_t *data;
    uint64_t size; /* payload bytes */
    /* HIT: 1 when the file is exactly the payload (its trailer is an xattr), so fd can
     * stand for the batch file itself (FUSE passthrough); 0 when the 64-byte trailer
     * follows the payload in the file */
    int exact;
    struct { /* private */
        bfs_store *store;
        void *map;
        size_t map_len;
        int lock_fd;          /* MINE: the key's lock file, OFD write-locked */
        uint64_t lock_ino;    /* its inode, to unlink only our own lock file */
        int tmp_fd;           /* MINE: the entry being written, -1 before the first write */
        int error;            /* MINE: first write error, reported by commit */
        uint64_t written;     /* MINE: payload bytes written */
        bfs_xxh64_state hash; /* MINE: XXH64 of the payload so far */
        char tmp_name[128];   /* MINE, named temps: path relative to the store's v2/ */
    } priv;
} bfs_claim;

/* Counters of one bfs_store handle (this process), plus the store-wide usage. */
typedef struct bfs_store_stats {
    uint64_t hits;            /* claims answered HIT (verified entries served) */
    uint64_t misses;          /* claims answered MINE (the caller computes) */
    uint64_t busy;            /* claims answered BUSY */
    uint64_t busy_waits;      /* bfs_store_wait calls that had to wait for another claimant */
    uint64_t publishes;       /* entries published */
    uint64_t abandons;        /* MINE claims given up (abandon, close, failed publish) */
    uint64_t bytes_published; /* payload bytes published */
    uint64_t bytes_served;    /* payload bytes of HIT claims */
    uint64_t taken;           /* HIT claims whose file the caller took (bfs_store_claim_take) */
    uint64_t evictions;       /* entries evicted by this handle */
    uint64_t bytes_evicted;   /* file bytes they held */
    uint64_t corrupt;         /* torn or corrupt entries removed (each one recomputed) */
    uint64_t stale_removed;   /* lock and temporary files of dead claimants removed */
    uint64_t save_errors;     /* batches not stored: a claim, write, commit or publish failed */
    uint64_t no_space;        /* publishes that met ENOSPC/EDQUOT, evicted and retried once */
    uint64_t usage_bytes;     /* store-wide entry bytes now (exact after each scan) */
    uint64_t budget_bytes;    /* this handle's budget (0: unlimited) */
} bfs_store_stats;

/* Size of each entry's trailer, in its xattr or after its payload (docs/cache.md). */
#define BFS_STORE_TRAILER 64

/*
 * bfs_store_open - open (creating it 0700 if missing) the store under directory root:
 * entries live in root/v2/. root must be absolute, owned by the effective user and not
 * writable by all users (the store trusts its files). It is opened by a walk from / with
 * openat(O_NOFOLLOW) per component that another user cannot redirect: every directory on
 * the way must be owned by root or the effective user and be writable by no one else
 * unless sticky, and a symlink is followed only if root or the effective user owns it
 * (docs/cache.md, "Location"). From then on the store works relative to that descriptor. The first
 * open on a host, and every open, scans the store: removes lock and temporary files of dead
 * claimants, counts the usage and evicts down to opts->budget_bytes. opts may be NULL (defaults: no
 * budget, SYNC_NONE). *out is owned by the caller: bfs_store_close. Returns 0; -EPERM (owner,
 * permissions, a directory or symlink on the path that another user controls), -ENOTDIR, -EACCES,
 * -ELOOP, -ENOSPC, -EINVAL (bad opts, a relative root), -ENOMEM, other -errno of mkdir/open;
 * err (may be NULL) gets a message naming the directory and what to do.
 */
int bfs_store_open(const char *root, const bfs_store_opts *opts, bfs_store **out, char *err,
                   size_t errlen);

/* bfs_store_close - free the handle. Every MINE claim must be finished before; HIT claims
 * may outlive it (they hold only their fd and mapping). Accepts NULL. */
void bfs_store_close(bfs_store *s);

/*
 * bfs_store_claim - look key up and, on a miss, try to become its computer. Sets c:
 *  HIT:  the entry exists and verified (size, key, XXH64 of every byte); c->data/c->size/
 *        c->fd are valid until bfs_store_claim_close. Its last-use time is refreshed (LRU).
 *  MINE: no valid entry; the caller must compute the bytes and bfs_store_publish (or
 *        bfs_store_abandon, or bfs_store_claim_close). A torn or corrupt entry found on
 *        the way is removed and counted in stats.corrupt.
 *  BUSY: a live claimant holds MINE for key: bfs_store_wait, or compute without the store.
 * Returns 0 (c->state set) or a negative errno (c->state NONE): -EMFILE, -ENOSPC, -EACCES,
 * -ENOMEM, -EIO... (counted in stats.save_errors, logged rate-limited). The caller then
 * computes without the store. c needs no initialisation.
 */
int bfs_store_claim(bfs_store *s, bfs_store_key key, bfs_claim *c);

/*
 * bfs_store_wait - bfs_store_claim until the answer is not BUSY: HIT once the other
 * claimant publishes, MINE if it abandons or dies (its lock dies with it). Polls with a
 * backoff of 1 ms doubling to 8 ms. timeout_ms < 0: no limit. Returns 0 with c HIT or
 * MINE; -ETIMEDOUT (c->state NONE) when still BUSY after timeout_ms; errors of
 * bfs_store_claim.
 */
int bfs_store_wait(bfs_store *s, bfs_store_key key, int timeout_ms, bfs_claim *c);

/*
 * bfs_store_write - append len bytes of the payload to a MINE claim (any number of calls;
 * the bytes are copied into the entry's file at once). The entry is invisible until
 * bfs_store_commit; a process that dies before leaves no entry. Returns 0; -EINVAL (not
 * MINE); -ENOSPC, -EIO (the claim stays MINE: abandon or close it; commit fails too).
 */
int bfs_store_write(bfs_claim *c, const void *data, size_t len);

/*
 * bfs_store_commit - finish a MINE claim: append the trailer, sync per the store's policy,
 * give the entry its name atomically, release the key, and evict if the store is over
 * budget. c->state becomes NONE whatever the outcome; a failure is counted in
 * stats.save_errors and logged (rate-limited, see bfs_store_opts.log_cb). If an entry appeared
 * meanwhile (only possible when a lock file was removed under a claimant), a valid one is kept and
 * ours dropped (with named temporaries the last rename wins): both hold the same bytes. Returns 0;
 * -EINVAL (not MINE); -EFBIG (the entry alone exceeds the budget: not stored); a write error;
 * -ENOSPC, -EIO, -errno of link/rename.
 */
int bfs_store_commit(bfs_claim *c);

/*
 * bfs_store_publish - bfs_store_write(c, data, len) then bfs_store_commit(c): data is only
 * read. When the file system is full (-ENOSPC, -EDQUOT) before the budget is, it evicts
 * least recently used entries to free len bytes plus 1/16 of the store, budget or not, and
 * tries once more (stats.no_space; logged, rate-limited). On failure the claim is
 * abandoned (state NONE) and counted in stats.save_errors. Returns as those; -EINVAL when
 * c is not MINE (c unchanged).
 */
int bfs_store_publish(bfs_claim *c, const void *data, size_t len);

/* bfs_store_abandon - give a MINE claim up: nothing is stored, the key is free to claim
 * (a waiter gets MINE). Returns 0, or -EINVAL if c is not MINE. */
int bfs_store_abandon(bfs_claim *c);

/* bfs_store_claim_close - finish c in any state: unmap and close a HIT, abandon an
 * unfinished MINE, nothing for BUSY/NONE. Idempotent; accepts NULL. */
void bfs_store_claim_close(bfs_claim *c);

/*
 * bfs_store_claim_take - take over an exact HIT claim's descriptor and mapping: *fd and
 * *data (c->size bytes) become the caller's (close, munmap), valid for as long as it keeps
 * them, whatever happens to the entry; c is then NONE. Returns 0, or -EINVAL when c is not
 * an exact HIT of a non-empty payload (c is unchanged).
 */
int bfs_store_claim_take(bfs_claim *c, int *fd, const uint8_t **data);

/*
 * bfs_store_evict - scan the whole store now: remove stale lock/temporary files, recount
 * the usage and evict least recently used entries until it is under the budget (down to
 * 15/16 of it, so that scans are not run at every publish). Runs after a publish that
 * takes the usage over budget and at open; skipped (returns 0, *evicted 0) while another
 * process or thread is scanning. *evicted (may be NULL) gets the number of entries
 * removed. Returns 0, or -errno of opening the store's directories.
 */
int bfs_store_evict(bfs_store *s, uint64_t *evicted);

/* bfs_store_get_stats - this handle's counters and the store-wide usage. */
void bfs_store_get_stats(bfs_store *s, bfs_store_stats *st);

/*
 * bfs_store_default_dir - the default cache_dir: /dev/shm/batchfs-<euid> (memory-backed,
 * private to the user, gone at reboot), prepared by bfs_store_prepare_dir. Writes the
 * path into buf (len bytes, 64 is enough). Returns 0, -ENAMETOOLONG, or the errors of
 * bfs_store_prepare_dir (err gets the message).
 */
int bfs_store_default_dir(char *buf, size_t len, char *err, size_t errlen);

/*
 * bfs_store_prepare_dir - make path a private directory of the effective user: created
 * 0700 if missing; an existing one must be a real directory (not a symlink) owned by the
 * user, and loses any group/other permission bits. Refusing a directory that another user
 * owns matters under world-writable /dev/shm, where anyone can create the name first.
 * Returns 0; -EPERM (owned by another user), -ENOTDIR (not a directory, or a symlink),
 * -errno of mkdir/open/chmod; err gets a message naming path and what to do.
 */
int bfs_store_prepare_dir(const char *path, char *err, size_t errlen);

/* bfs_store_sync_parse - "none" | "data" | "full" -> *out. Returns 0 or -EINVAL. */
int bfs_store_sync_parse(const char *name, bfs_store_sync *out);

/* bfs_store_sync_name - the name of a policy ("none", "data", "full"; "?" if invalid). */
const char *bfs_store_sync_name(bfs_store_sync sync);

#endif
