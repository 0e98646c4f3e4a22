/*
 * store.c — the host-wide batch store (see store.h; layout and format in docs/cache.md).
 *
 * Design, briefly:
 *  - Single flight: one lock file per key (`<batch>.lock`) carrying an OFD write lock
 *    (F_OFD_SETLK). The kernel drops the lock when its holder's descriptor is closed —
 *    by exit, crash or kill -9 — so there are no stale markers to detect, no pid reuse to
 *    fear and no clock to trust. OFD rather than classic POSIX locks because those belong
 *    to the process (two threads of one daemon would both "win", and closing any fd of the
 *    file drops them); OFD locks belong to the open file description. A lock file is
 *    unlinked by its holder when done; a claimant that locked a file just unlinked by its
 *    previous holder notices (inode of the path != inode of its fd) and retries.
 *  - Publication: the payload goes into an O_TMPFILE (an unnamed inode in the entry's
 *    directory), then the trailer (as the xattr user.batchfs.entry, so the file holds
 *    exactly the batch and can back the batch file; appended to the file where the file
 *    system takes no user xattrs), then linkat() gives it its final name: an entry is
 *    complete or absent, and a writer killed at any moment leaves nothing behind. Where
 *    O_TMPFILE or /proc are missing, a named temporary file + rename() (temporaries of
 *    dead writers are removed by the scans: a writer holds a lock on its temporary, taken
 *    atomically with its creation under a guard lock, so an unlocked one is stale).
 *  - Verification: every claim maps the entry and checks size, key and XXH64 of every
 *    byte before answering HIT; a bad entry is removed under the key's lock.
 *  - Budget: a store-wide usage counter (a u64 in a shared mapping of `v2/.usage`,
 *    updated atomically by every process) tells when a scan is due; the scan (one process
 *    at a time: OFD lock on `v2/.evict.lock`) recounts exactly, removes stale files and
 *    evicts by last use: the mtime, set explicitly to the current time at publish and at
 *    every hit (atime is unreliable under noatime/relatime). Eviction only unlinks.
 *
 * Concurrency: a bfs_store is shared by threads; its fields are immutable after open
 * except `st`, `tmp_seq` and `mine` (atomics) and `*usage` (atomics, shared between
 * processes).
 *
 * A claim's states (bfs_claim.state), and the only moves between them, asserted in debug
 * and sanitizer builds (base/check.h):
 *   NONE -> HIT   (claim: a verified entry; holds fd and its mapping, no lock)
 *        -> MINE  (claim: holds the key's lock file, and a temporary once written)
 *        -> BUSY  (claim: holds nothing)
 *   HIT  -> NONE  (claim_close; claim_take hands fd and mapping to the caller)
 *   MINE -> NONE  (commit, publish, abandon, claim_close: finish_mine releases the key)
 *   BUSY -> NONE  (claim_close, or wait claims again)
 */
#include "cache/store.h"
#include "cache/store_internal.h"
#include "base/check.h"
#include "base/err.h"
#include "base/io.h"
#include "base/clock.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#define ADD(field, v) __atomic_fetch_add(&(field), (v), __ATOMIC_RELAXED)

/* How many entries' worth of slack a scan leaves under the budget: evicting down to
 * 15/16 of it means one scan per ~6% of the budget published, not one per publish. */
#define EVICT_LOW_WATER(b) ((b) - (b) / 16)

/* Retries when a directory is removed under a claimant by a concurrent eviction. */
#define DIR_RETRIES 16

/* Stale probe files (a crash inside the O_TMPFILE probe at open) older than this go. */
#define PROBE_STALE_S 60

/* A problem that can repeat at every batch (a full file system, a failing disk) is logged
 * the first time, then at most once per this many seconds, with the count of the ones not
 * logged: visible, without a line per batch for as long as it lasts. */
#define NOTE_INTERVAL_S 60

/* Rate limit of one kind of log line (see NOTE_INTERVAL_S). */
typedef struct note_limit {
    pthread_mutex_t lock;
    int logged;     /* a line of this kind was logged */
    double last;    /* when (CLOCK_MONOTONIC, s) */
    uint64_t quiet; /* events since, not logged */
} note_limit;

typedef struct counters {
    uint64_t hits, misses, busy, busy_waits, publishes, abandons, bytes_published, bytes_served,
        evictions, bytes_evicted, corrupt, stale_removed, taken, save_errors, no_space;
} counters;

struct bfs_store {
    char *root;             /* as given, for messages */
    int vfd;                /* root/v2/ */
    bfs_store_opts o;       /* immutable after open */
    int tmpfile_ok;         /* O_TMPFILE + linkat(/proc/self/fd/N) work here (probed at open) */
    int no_xattr;           /* fsetxattr said EOPNOTSUPP: trailers go in the files (atomic) */
    uint64_t *usage;        /* shared usage counter (atomics; int64 semantics, clamped at 0) */
    int usage_shared;       /* usage points into the mapping of v2/.usage (else malloc'ed) */
    uint32_t tmp_seq;       /* atomic: named temporaries */
    int mine;               /* atomic: MINE claims not finished (counted with BFS_CHECKS) */
    counters st;            /* atomic */
    note_limit note_full;   /* "file system full, made room" lines */
    note_limit note_failed; /* "could not save" lines */
};

/* ---- small helpers ------------------------------------------------------------------- */

__attribute__((format(printf, 2, 3))) static void store_log(bfs_store *s, const char *fmt, ...)
{
    if (!s->o.log_cb)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    s->o.log_cb(s->o.log_arg, msg);
}

/* Log msg under rate limit n: the first event, then one per NOTE_INTERVAL_S, each line
 * saying how many were not logged since the previous one. */
__attribute__((format(printf, 3, 4))) static void store_note(bfs_store *s, note_limit *n,
                                                             const char *fmt, ...)
{
    if (!s->o.log_cb)
        return;
    double now = bfs_mono_s();
    pthread_mutex_lock(&n->lock);
    int first = !n->logged, due = first || now - n->last >= NOTE_INTERVAL_S;
    uint64_t quiet = n->quiet;
    if (due) {
        n->logged = 1;
        n->last = now;
        n->quiet = 0;
    } else {
        n->quiet++;
    }
    pthread_mutex_unlock(&n->lock);
    if (!due)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (first)
        store_log(s, "%s (logged once a minute at most while it lasts)", msg);
    else
        store_log(s, "%s (%" PRIu64 " more since the last such line)", msg, quiet);
}

static int64_t usage_get(const bfs_store *s)
{
    int64_t v = (int64_t)__atomic_load_n(s->usage, __ATOMIC_RELAXED);
    return v < 0 ? 0 : v;
}

static void usage_add(bfs_store *s, int64_t delta)
{
    __atomic_fetch_add(s->usage, (uint64_t)delta, __ATOMIC_RELAXED);
}

static struct timespec now_realtime(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts;
}

/* mtime := now (explicitly: ns resolution, unlike the kernel's coarse file times). */
static void touch_mtime(int fd)
{
    struct timespec ts[2] = {{.tv_sec = 0, .tv_nsec = UTIME_OMIT}, now_realtime()};
    (void)futimens(fd, ts);
}

/* Paths relative to v2/. 96 bytes hold the longest: 16 + 1 + 20 + 1 + 20 + 19 + NUL. */
enum { REL_MAX = 96 };

static void key_dir(const bfs_store_key *k, char *buf)
{
    snprintf(buf, REL_MAX, "%016" PRIx64 "/%" PRIu64, k->fingerprint, k->epoch);
}

static void key_file(const bfs_store_key *k, const char *suffix, char *buf)
{
    snprintf(buf, REL_MAX, "%016" PRIx64 "/%" PRIu64 "/%" PRIu64 "%s", k->fingerprint, k->epoch,
             k->batch, suffix);
}

/* mkdir of fp/ and fp/epoch/ (an eviction may rmdir them concurrently: callers retry). */
static int ensure_key_dir(bfs_store *s, const bfs_store_key *k)
{
    char fp[REL_MAX], d[REL_MAX];
    snprintf(fp, sizeof fp, "%016" PRIx64, k->fingerprint);
    key_dir(k, d);
    for (int i = 0; i < DIR_RETRIES; i++) {
        if (mkdirat(s->vfd, fp, 0700) < 0 && errno != EEXIST)
            return -errno;
        if (mkdirat(s->vfd, d, 0700) == 0 || errno == EEXIST)
            return 0;
        if (errno != ENOENT)
            return -errno;
    }
    return -ENOENT;
}

/*
 * Take the OFD write lock of the lock file rel (relative to dirfd), creating it if
 * create. Returns 0 with *fd locked and *ino its inode; -EAGAIN if another open file
 * description holds it; -ENOENT if it (or its directory) does not exist; other -errno.
 */
static int lock_file(int dirfd, const char *rel, int create, int *fd_out, uint64_t *ino_out)
{
    for (int tries = 0; tries < 64; tries++) {
        int fd = openat(dirfd, rel, O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT : 0), 0600);
        if (fd < 0)
            return -errno;
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET}; /* whole file, l_pid 0 */
        if (fcntl(fd, F_OFD_SETLK, &fl) < 0) {
            int e = errno;
            close(fd);
            return e == EAGAIN || e == EACCES ? -EAGAIN : -e;
        }
        struct stat a, b;
        if (fstat(fd, &a) == 0 && fstatat(dirfd, rel, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
            a.st_ino == b.st_ino && a.st_dev == b.st_dev) {
            *fd_out = fd;
            *ino_out = (uint64_t)a.st_ino;
            return 0;
        }
        /* its previous holder unlinked it between our open and our lock: the current
         * lock file (if any) is another inode */
        close(fd);
    }
    return -EAGAIN;
}

/* Release a lock taken by lock_file, unlinking the lock file if it is still ours. */
static void unlock_remove(int dirfd, const char *rel, int fd, uint64_t ino)
{
    struct stat st;
    if (fstatat(dirfd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0 && (uint64_t)st.st_ino == ino)
        (void)unlinkat(dirfd, rel, 0);
    close(fd);
}

static void claim_reset(bfs_claim *c, bfs_store *s, bfs_store_key key)
{
    memset(c, 0, sizeof *c);
    c->state = BFS_STORE_NONE;
    c->key = key;
    c->fd = -1;
    c->priv.store = s;
    c->priv.lock_fd = -1;
    c->priv.tmp_fd = -1;
}

/* ---- reading ------------------------------------------------------------------------- */

/* pread len bytes at off, across short reads (a short read is not the end of the file).
 * Returns the bytes read: len, fewer at the end of the file, or -1 (errno set). */
static ssize_t pread_full(int fd, void *buf, size_t len, off_t off)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(fd, (uint8_t *)buf + got, len - got, off + (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        got += (size_t)n;
    }
    return (ssize_t)got;
}

/*
 * Open and verify the entry file rel of key into c (HIT fields). Returns 0; -ENOENT (no
 * entry, or no directory); a positive BFS_STORE_ENTRY_* reason (torn/corrupt: *ino is
 * its inode); other -errno (open, mmap).
 */
static int open_entry(bfs_store *s, const bfs_store_key *k, const char *rel, bfs_claim *c,
                      uint64_t *ino)
{
    int fd = openat(s->vfd, rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 && errno == ELOOP) { /* a symlink under an entry's name: not an entry */
        struct stat st;
        if (fstatat(s->vfd, rel, &st, AT_SYMLINK_NOFOLLOW) < 0)
            return -errno;
        *ino = (uint64_t)st.st_ino;
        return BFS_STORE_ENTRY_MAGIC;
    }
    if (fd < 0)
        return errno == ENOTDIR ? -ENOENT : -errno;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    *ino = (uint64_t)st.st_ino;
    int reason = BFS_STORE_ENTRY_OK;
    uint64_t size = (uint64_t)st.st_size;
    uint8_t t[BFS_STORE_TRAILER + 1];
    bfs_store_key tk;
    uint64_t len, hash;
    /* the trailer first, 64 bytes from the xattr or the file's end: a torn file is
     * refused without mapping it */
    ssize_t xl = S_ISREG(st.st_mode) ? fgetxattr(fd, BFS_STORE_XATTR, t, sizeof t) : -1;
    int xattr = xl >= 0 || errno == ERANGE; /* ERANGE: a value too long to be a trailer */
    if (!S_ISREG(st.st_mode) || (xattr && xl != BFS_STORE_TRAILER)) {
        reason = BFS_STORE_ENTRY_MAGIC;
    } else if (xattr) {
        reason = bfs_store_entry_parse_trailer(t, size, 1, &tk, &len, &hash);
    } else if (size < BFS_STORE_TRAILER) {
        reason = BFS_STORE_ENTRY_SHORT;
    } else if (pread_full(fd, t, BFS_STORE_TRAILER, (off_t)(size - BFS_STORE_TRAILER)) !=
               BFS_STORE_TRAILER) {
        reason = BFS_STORE_ENTRY_SHORT; /* shrunk under us, or unreadable */
    } else {
        reason = bfs_store_entry_parse_trailer(t, size, 0, &tk, &len, &hash);
    }
    if (reason) {
        close(fd);
        return reason;
    }
    static const uint8_t empty[1];
    void *map = size ? mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0)
                     : NULL; /* an empty payload under an xattr trailer: nothing to map */
    if (map == MAP_FAILED) {
        int e = errno;
        close(fd);
        return -e;
    }
    reason =
        xattr ? bfs_store_entry_check_xattr(t, BFS_STORE_TRAILER, map ? map : empty, size, k, &len)
              : bfs_store_entry_check(map, size, k, &len);
    if (reason) {
        if (map)
            munmap(map, (size_t)size);
        close(fd);
        return reason;
    }
    c->fd = fd;
    c->data = map ? map : empty;
    c->size = len;
    c->exact = xattr;
    c->priv.map = map;
    c->priv.map_len = (size_t)size;
    return 0;
}

int bfs_store_claim_take(bfs_claim *c, int *fd, const uint8_t **data)
{
    if (!c || c->state != BFS_STORE_HIT || !c->exact || !c->priv.map)
        return -EINVAL;
    *fd = c->fd;
    *data = c->data;
    ADD(c->priv.store->st.taken, 1);
    c->fd = -1;
    c->priv.map = NULL;
    c->data = NULL;
    c->state = BFS_STORE_NONE;
    return 0;
}

static void count_hit(bfs_store *s, bfs_claim *c)
{
    BFS_ASSERT(c->state == BFS_STORE_NONE && c->fd >= 0 && c->data);
    touch_mtime(c->fd); /* last use, for LRU */
    c->state = BFS_STORE_HIT;
    ADD(s->st.hits, 1);
    ADD(s->st.bytes_served, c->size);
}

/* Remove the bad entry rel (inode ino) found for key; the caller holds the key's lock. */
static void remove_corrupt(bfs_store *s, const bfs_store_key *k, const char *rel, uint64_t ino,
                           int reason)
{
    struct stat st;
    if (fstatat(s->vfd, rel, &st, AT_SYMLINK_NOFOLLOW) < 0 || (uint64_t)st.st_ino != ino)
        return; /* already replaced or removed */
    if (unlinkat(s->vfd, rel, 0) < 0)
        return;
    usage_add(s, -(int64_t)st.st_size);
    ADD(s->st.corrupt, 1);
    store_log(s,
              "cache_dir %s: entry " BFS_STORE_DIR "/%s (epoch %" PRIu64 ", batch %" PRIu64
              ") %s: removed, recomputing",
              s->root, rel, k->epoch, k->batch, bfs_store_entry_reason(reason));
}

static int claim_impl(bfs_store *s, bfs_store_key key, bfs_claim *c, int count_busy)
{
    claim_reset(c, s, key);
    char ent[REL_MAX], lck[REL_MAX];
    key_file(&key, ".st", ent);
    key_file(&key, ".lock", lck);
    int rc = -ENOENT;
    for (int attempt = 0; attempt < DIR_RETRIES; attempt++) {
        uint64_t ino;
        int r = open_entry(s, &key, ent, c, &ino);
        if (r == 0) {
            count_hit(s, c);
            return 0;
        }
        if (r < 0 && r != -ENOENT)
            return r;
        /* no entry, or a bad one: become its computer (removing the bad one) or learn
         * that someone else is */
        rc = ensure_key_dir(s, &key);
        if (rc)
            return rc;
        int lfd;
        uint64_t lino;
        rc = lock_file(s->vfd, lck, 1, &lfd, &lino);
        if (rc == -ENOENT)
            continue; /* the directory was removed by an eviction meanwhile */
        if (rc == -EAGAIN) {
            BFS_ASSERT(c->state == BFS_STORE_NONE && c->fd < 0);
            c->state = BFS_STORE_BUSY;
            if (count_busy)
                ADD(s->st.busy, 1);
            return 0;
        }
        if (rc)
            return rc;
        /* we hold the key: its previous holder may have published since our first look */
        r = open_entry(s, &key, ent, c, &ino);
        if (r == 0) {
            unlock_remove(s->vfd, lck, lfd, lino);
            count_hit(s, c);
            return 0;
        }
        if (r > 0) {
            remove_corrupt(s, &key, ent, ino, r);
        } else if (r != -ENOENT) {
            unlock_remove(s->vfd, lck, lfd, lino);
            return r;
        }
        BFS_ASSERT(c->state == BFS_STORE_NONE && c->fd < 0 && lfd >= 0);
        if (BFS_CHECKS)
            __atomic_fetch_add(&s->mine, 1, __ATOMIC_RELAXED);
        c->state = BFS_STORE_MINE;
        c->priv.lock_fd = lfd;
        c->priv.lock_ino = lino;
        bfs_xxh64_init(&c->priv.hash, 0);
        ADD(s->st.misses, 1);
        return 0;
    }
    return rc;
}

/* A claim failed with rc: the batch will be computed, and not stored. */
static int claim_failed(bfs_store *s, const bfs_store_key *k, int rc)
{
    ADD(s->st.save_errors, 1);
    store_note(s, &s->note_failed,
               "cache_dir %s: could not look up or lock epoch %" PRIu64 " batch %" PRIu64
               ": %s; the batch is computed and not stored",
               s->root, k->epoch, k->batch, strerror(-rc));
    return rc;
}

int bfs_store_claim(bfs_store *s, bfs_store_key key, bfs_claim *c)
{
    int rc = claim_impl(s, key, c, 1);
    return rc ? claim_failed(s, &key, rc) : 0;
}

static double elapsed_ms(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

int bfs_store_wait(bfs_store *s, bfs_store_key key, int timeout_ms, bfs_claim *c)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long delay_us = 1000;
    int waited = 0;
    for (;;) {
        int rc = claim_impl(s, key, c, 0);
        if (rc || c->state != BFS_STORE_BUSY) {
            if (waited)
                ADD(s->st.busy_waits, 1);
            return rc ? claim_failed(s, &key, rc) : 0;
        }
        waited = 1;
        double left = timeout_ms < 0 ? 1e18 : timeout_ms - elapsed_ms(&t0);
        if (left <= 0) {
            ADD(s->st.busy_waits, 1);
            c->state = BFS_STORE_NONE;
            return -ETIMEDOUT;
        }
        /* Polling: the holder's lock can vanish by death, which signals nothing; a batch
         * takes tens to hundreds of ms, so an 8 ms step costs little latency. */
        long us = delay_us < left * 1e3 ? delay_us : (long)(left * 1e3) + 1;
        struct timespec d = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
        while (nanosleep(&d, &d) < 0 && errno == EINTR)
            ;
        delay_us = delay_us * 2 > 8000 ? 8000 : delay_us * 2;
    }
}

/* ---- writing ------------------------------------------------------------------------- */

/* Take the creation guard of named temporaries (v2/.tmp.guard) in mode F_RDLCK (writers,
 * around create + lock of a temporary) or F_WRLCK (a scan, around its staleness check).
 * Every call opens its own descriptor: OFD locks of one descriptor never conflict, even
 * between threads. Returns the locked descriptor (close it to release) or -errno. */
static int guard_lock(bfs_store *s, short type)
{
    int fd = openat(s->vfd, ".tmp.guard", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -errno;
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET};
    while (fcntl(fd, F_OFD_SETLKW, &fl) < 0) {
        if (errno != EINTR) {
            int e = errno;
            close(fd);
            return -e;
        }
    }
    return fd;
}

/* Create the file the payload goes into: an O_TMPFILE in the key's directory, or a named
 * temporary there. The key's lock file keeps that directory from being removed. */
static int open_temp(bfs_claim *c)
{
    bfs_store *s = c->priv.store;
    char d[REL_MAX];
    key_dir(&c->key, d);
    if (s->tmpfile_ok) {
        int fd = openat(s->vfd, d, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (fd >= 0) {
            c->priv.tmp_fd = fd;
            return 0;
        }
        if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
            return -errno;
    }
    for (int i = 0; i < 1000; i++) {
        unsigned seq = __atomic_fetch_add(&s->tmp_seq, 1, __ATOMIC_RELAXED);
        snprintf(c->priv.tmp_name, sizeof c->priv.tmp_name, "%s/%" PRIu64 ".st.tmp-%ld-%u", d,
                 c->key.batch, (long)getpid(), seq);
        /* Create and lock under a shared lock of the creation guard, so that a scan (which
         * takes it exclusively) never sees our temporary created but not yet locked. */
        int gfd = guard_lock(s, F_RDLCK);
        if (gfd < 0) {
            c->priv.tmp_name[0] = 0;
            return gfd;
        }
        int fd = openat(s->vfd, c->priv.tmp_name, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
        int e = errno;
        if (fd >= 0) {
            struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
            if (fcntl(fd, F_OFD_SETLK, &fl) < 0) { /* a new file: only EINTR/ENOLCK */
                e = errno;
                close(fd);
                (void)unlinkat(s->vfd, c->priv.tmp_name, 0);
                fd = -1;
            }
        }
        close(gfd);
        if (fd >= 0) {
            c->priv.tmp_fd = fd;
            return 0;
        }
        if (e != EEXIST) {
            c->priv.tmp_name[0] = 0;
            return -e;
        }
    }
    c->priv.tmp_name[0] = 0;
    return -EEXIST;
}

int bfs_store_write(bfs_claim *c, const void *data, size_t len)
{
    if (!c || c->state != BFS_STORE_MINE)
        return -EINVAL;
    if (c->priv.error)
        return c->priv.error;
    int rc = c->priv.tmp_fd < 0 ? open_temp(c) : 0;
    if (!rc)
        rc = bfs_write_all(c->priv.tmp_fd, data, len);
    if (rc) {
        c->priv.error = rc;
        return rc;
    }
    bfs_xxh64_update(&c->priv.hash, data, len);
    c->priv.written += len;
    return 0;
}

/* Close what a MINE claim holds and release its key. */
static void finish_mine(bfs_claim *c, int published)
{
    bfs_store *s = c->priv.store;
    BFS_ASSERT(c->state == BFS_STORE_MINE && c->priv.lock_fd >= 0 && c->fd < 0);
    if (BFS_CHECKS) {
        int left = __atomic_sub_fetch(&s->mine, 1, __ATOMIC_RELAXED);
        BFS_ASSERT(left >= 0);
    }
    if (c->priv.tmp_fd >= 0)
        close(c->priv.tmp_fd);
    c->priv.tmp_fd = -1;
    if (c->priv.tmp_name[0])
        (void)unlinkat(s->vfd, c->priv.tmp_name, 0);
    c->priv.tmp_name[0] = 0;
    if (c->priv.lock_fd >= 0) {
        char lck[REL_MAX];
        key_file(&c->key, ".lock", lck);
        unlock_remove(s->vfd, lck, c->priv.lock_fd, c->priv.lock_ino);
    }
    c->priv.lock_fd = -1;
    c->state = BFS_STORE_NONE;
    ADD(*(published ? &s->st.publishes : &s->st.abandons), 1);
}

static int fsync_dir(int dirfd, const char *rel)
{
    int fd = openat(dirfd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

/*
 * Give the finished file its name ent. Returns 1 if it was linked (usage grows), 0 if a
 * valid entry was already there (ours is dropped), or -errno.
 */
static int link_entry(bfs_claim *c, const char *ent)
{
    bfs_store *s = c->priv.store;
    if (c->priv.tmp_name[0]) {
        if (renameat(s->vfd, c->priv.tmp_name, s->vfd, ent) < 0)
            return -errno;
        c->priv.tmp_name[0] = 0; /* renamed: nothing to clean up, and the name is free */
        return 1;
    }
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", c->priv.tmp_fd);
    for (int i = 0; i < 4; i++) {
        if (linkat(AT_FDCWD, proc, s->vfd, ent, AT_SYMLINK_FOLLOW) == 0)
            return 1;
        if (errno != EEXIST)
            return -errno;
        /* An entry appeared although we hold the key: another claimant's lock file was
         * removed under it (by hand). Keep a valid one; replace a bad one. */
        bfs_claim other;
        claim_reset(&other, s, c->key);
        uint64_t ino;
        int r = open_entry(s, &c->key, ent, &other, &ino);
        if (r == 0) {
            other.state = BFS_STORE_HIT; /* (open_entry filled it: closed as a HIT) */
            bfs_store_claim_close(&other);
            return 0;
        }
        if (r > 0)
            remove_corrupt(s, &c->key, ent, ino, r);
        else if (r != -ENOENT)
            return r;
    }
    return -EEXIST;
}

/* Append the trailer, sync, link: the work of bfs_store_commit, leaving c MINE whatever
 * the outcome (the caller finishes it, or retries). Returns 0 or -errno. */
static int commit_impl(bfs_claim *c)
{
    bfs_store *s = c->priv.store;
    BFS_ASSERT(c->state == BFS_STORE_MINE && c->priv.lock_fd >= 0);
    BFS_ASSERT(c->priv.tmp_fd >= 0 || c->priv.written == 0); /* written: in the temporary */
    uint64_t file_size = c->priv.written;
    int rc = c->priv.error;
    if (!rc && s->o.budget_bytes && file_size > s->o.budget_bytes)
        rc = -EFBIG;
    if (!rc && c->priv.tmp_fd < 0)
        rc = open_temp(c); /* an empty payload */
    if (!rc) {
        /* the trailer as the file's xattr, so the file is the batch file itself; after
         * the payload where the file system takes no user xattrs */
        uint8_t t[BFS_STORE_TRAILER];
        uint64_t hash = bfs_xxh64_digest(&c->priv.hash);
        int in_file = s->o.trailer_in_file || __atomic_load_n(&s->no_xattr, __ATOMIC_RELAXED);
        if (!in_file) {
            bfs_store_entry_trailer(&c->key, c->priv.written, hash, BFS_STORE_FLAG_XATTR, t);
            if (fsetxattr(c->priv.tmp_fd, BFS_STORE_XATTR, t, sizeof t, 0) < 0) {
                if (errno == EOPNOTSUPP || errno == ENOTSUP)
                    __atomic_store_n(&s->no_xattr, 1, __ATOMIC_RELAXED);
                in_file = 1; /* no xattrs here, or no room for one: the portable form */
            }
        }
        if (in_file) {
            bfs_store_entry_trailer(&c->key, c->priv.written, hash, 0, t);
            rc = bfs_write_all(c->priv.tmp_fd, t, sizeof t);
            file_size += BFS_STORE_TRAILER;
            if (!rc && s->o.budget_bytes && file_size > s->o.budget_bytes)
                rc = -EFBIG;
        }
    }
    if (!rc)
        touch_mtime(c->priv.tmp_fd);
    if (!rc && s->o.sync != BFS_STORE_SYNC_NONE &&
        (s->o.sync == BFS_STORE_SYNC_FULL ? fsync(c->priv.tmp_fd) : fdatasync(c->priv.tmp_fd)) < 0)
        rc = -errno;
    char ent[REL_MAX];
    key_file(&c->key, ".st", ent);
    int linked = 0;
    if (!rc) {
        linked = link_entry(c, ent);
        if (linked < 0)
            rc = linked;
    }
    if (!rc && s->o.sync == BFS_STORE_SYNC_FULL) {
        /* the entry's name, and the directories' names in case we created them */
        char d[REL_MAX], fp[REL_MAX];
        key_dir(&c->key, d);
        snprintf(fp, sizeof fp, "%016" PRIx64, c->key.fingerprint);
        rc = fsync_dir(s->vfd, d);
        if (!rc)
            rc = fsync_dir(s->vfd, fp);
        if (!rc)
            rc = fsync_dir(s->vfd, ".");
    }
    if (!rc) {
        if (linked == 1)
            usage_add(s, (int64_t)file_size);
        ADD(s->st.bytes_published, c->priv.written);
    }
    return rc;
}

/* Finish a MINE claim whose commit returned rc: release it, count and log a failure, and
 * evict if the store went over budget. Returns rc. */
static int commit_finish(bfs_claim *c, int rc)
{
    bfs_store *s = c->priv.store;
    bfs_store_key k = c->key;
    uint64_t written = c->priv.written;
    finish_mine(c, rc == 0);
    if (rc) {
        ADD(s->st.save_errors, 1);
        if (rc == -EFBIG)
            store_note(s, &s->note_failed,
                       "cache_dir %s: could not save epoch %" PRIu64 " batch %" PRIu64
                       ": its %" PRIu64 " bytes exceed the budget (cache_dir_mb=%" PRIu64
                       "); the batch is served but not stored",
                       s->root, k.epoch, k.batch, written, s->o.budget_bytes >> 20);
        else
            store_note(s, &s->note_failed,
                       "cache_dir %s: could not save epoch %" PRIu64 " batch %" PRIu64
                       ": %s; the batch is served but not stored",
                       s->root, k.epoch, k.batch, strerror(-rc));
    }
    if (!rc && s->o.budget_bytes && (uint64_t)usage_get(s) > s->o.budget_bytes)
        (void)bfs_store_evict(s, NULL);
    return rc;
}

int bfs_store_commit(bfs_claim *c)
{
    if (!c || c->state != BFS_STORE_MINE)
        return -EINVAL;
    return commit_finish(c, commit_impl(c));
}

static int no_space(int rc)
{
    return rc == -ENOSPC || rc == -EDQUOT;
}

/* Throw away what a MINE claim wrote so far (its temporary file), to write it again. */
static void discard_written(bfs_claim *c)
{
    if (c->priv.tmp_fd >= 0)
        close(c->priv.tmp_fd); /* an O_TMPFILE is freed here */
    c->priv.tmp_fd = -1;
    if (c->priv.tmp_name[0])
        (void)unlinkat(c->priv.store->vfd, c->priv.tmp_name, 0);
    c->priv.tmp_name[0] = 0;
    c->priv.error = 0;
    c->priv.written = 0;
    bfs_xxh64_init(&c->priv.hash, 0);
}

static int evict_impl(bfs_store *s, uint64_t room, uint64_t *evicted, uint64_t *bytes);

int bfs_store_publish(bfs_claim *c, const void *data, size_t len)
{
    if (!c || c->state != BFS_STORE_MINE)
        return -EINVAL;
    bfs_store *s = c->priv.store;
    int rc = bfs_store_write(c, data, len);
    if (!rc)
        rc = commit_impl(c);
    if (no_space(rc)) {
        /* The file system is full before the budget is (it is smaller, or shared with
         * other files): make room for this entry and a slack by evicting least recently
         * used entries, and try once more. */
        int first = rc;
        uint64_t n = 0, bytes = 0;
        ADD(s->st.no_space, 1);
        discard_written(c);
        (void)evict_impl(s, (uint64_t)len + BFS_STORE_TRAILER, &n, &bytes);
        rc = bfs_store_write(c, data, len);
        if (!rc)
            rc = commit_impl(c);
        if (!rc)
            store_note(s, &s->note_full,
                       "cache_dir %s: its file system is full (%s) before the budget "
                       "(cache_dir_mb=%" PRIu64 ", %" PRIu64 " bytes of entries): evicted %" PRIu64
                       " least recently used entries (%" PRIu64 " bytes) to save epoch %" PRIu64
                       " batch %" PRIu64,
                       s->root, strerror(-first), s->o.budget_bytes >> 20, (uint64_t)usage_get(s),
                       n, bytes, c->key.epoch, c->key.batch);
    }
    return commit_finish(c, rc);
}

int bfs_store_abandon(bfs_claim *c)
{
    if (!c || c->state != BFS_STORE_MINE)
        return -EINVAL;
    finish_mine(c, 0);
    return 0;
}

void bfs_store_claim_close(bfs_claim *c)
{
    if (!c)
        return;
    if (c->state == BFS_STORE_HIT) {
        BFS_ASSERT(c->fd >= 0 && c->priv.lock_fd < 0);
        if (c->priv.map)
            munmap(c->priv.map, c->priv.map_len);
        if (c->fd >= 0)
            close(c->fd);
    } else if (c->state == BFS_STORE_MINE) {
        finish_mine(c, 0);
    }
    c->priv.map = NULL;
    c->data = NULL;
    c->fd = -1;
    c->state = BFS_STORE_NONE;
}

/* ---- scan and eviction --------------------------------------------------------------- */

typedef struct scan_entry {
    char rel[REL_MAX];
    uint64_t size;
    uint64_t ino;
    struct timespec mtime;
} scan_entry;

typedef struct scan {
    scan_entry *v;
    size_t n, cap;
    uint64_t total;
} scan;

static int all_digits(const char *s, size_t n)
{
    if (n == 0 || n > 20)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return 1;
}

static int is_fp_dir(const char *s)
{
    if (strlen(s) != 16)
        return 0;
    for (int i = 0; i < 16; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

static DIR *open_dir_at(int dirfd, const char *rel)
{
    int fd = openat(dirfd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return NULL;
    DIR *d = fdopendir(fd);
    if (!d)
        close(fd);
    return d;
}

/* One file of an epoch directory: an entry is recorded; the lock or temporary file of a
 * claimant that is gone is removed. */
static int scan_file(bfs_store *s, scan *sc, const char *dir, const char *name)
{
    const char *dot = strchr(name, '.');
    if (!dot || !all_digits(name, (size_t)(dot - name)))
        return 0; /* not ours: left alone */
    char rel[REL_MAX];
    if (snprintf(rel, sizeof rel, "%s/%s", dir, name) >= (int)sizeof rel)
        return 0;
    int fd;
    uint64_t ino;
    if (!strcmp(dot, ".st")) {
        struct stat st;
        if (fstatat(s->vfd, rel, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
            return 0;
        if (sc->n == sc->cap) {
            size_t cap = sc->cap ? sc->cap * 2 : 256;
            scan_entry *v = realloc(sc->v, cap * sizeof *v);
            if (!v)
                return -ENOMEM;
            sc->v = v;
            sc->cap = cap;
        }
        scan_entry *e = &sc->v[sc->n++];
        memcpy(e->rel, rel, sizeof rel);
        e->size = (uint64_t)st.st_size;
        e->ino = (uint64_t)st.st_ino;
        e->mtime = st.st_mtim;
        sc->total += e->size;
    } else if (!strcmp(dot, ".lock")) {
        /* unlocked: nobody computes this key (a holder that died left it) */
        if (lock_file(s->vfd, rel, 0, &fd, &ino) == 0) {
            unlock_remove(s->vfd, rel, fd, ino);
            ADD(s->st.stale_removed, 1);
        }
    } else if (!strncmp(dot, ".st.tmp-", 8)) {
        /* A writer locks its named temporary from creation to rename (creating and locking
         * under the guard): unlocked, seen under the guard, means its writer is gone. */
        int gfd = guard_lock(s, F_WRLCK);
        if (gfd < 0)
            return 0;
        int tfd = openat(s->vfd, rel, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
        if (tfd >= 0 && fcntl(tfd, F_OFD_SETLK, &fl) == 0 && unlinkat(s->vfd, rel, 0) == 0) {
            ADD(s->st.stale_removed, 1);
            store_log(s, "cache_dir %s: removed " BFS_STORE_DIR "/%s left by a writer that died",
                      s->root, rel);
        }
        if (tfd >= 0)
            close(tfd);
        close(gfd);
    }
    return 0;
}

static int scan_store(bfs_store *s, scan *sc)
{
    DIR *top = open_dir_at(s->vfd, ".");
    if (!top)
        return -errno;
    int rc = 0;
    struct dirent *fe;
    while (!rc && (fe = readdir(top))) {
        if (!strncmp(fe->d_name, ".probe-", 7)) {
            struct stat st;
            if (fstatat(s->vfd, fe->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                st.st_mtim.tv_sec + PROBE_STALE_S < now_realtime().tv_sec)
                (void)unlinkat(s->vfd, fe->d_name, 0);
            continue;
        }
        if (!is_fp_dir(fe->d_name))
            continue;
        DIR *fpd = open_dir_at(s->vfd, fe->d_name);
        if (!fpd)
            continue; /* removed meanwhile */
        struct dirent *ee;
        while (!rc && (ee = readdir(fpd))) {
            if (!all_digits(ee->d_name, strlen(ee->d_name)))
                continue;
            char dir[REL_MAX];
            snprintf(dir, sizeof dir, "%s/%s", fe->d_name, ee->d_name);
            DIR *ed = open_dir_at(s->vfd, dir);
            if (!ed)
                continue;
            struct dirent *f;
            while (!rc && (f = readdir(ed)))
                if (f->d_name[0] != '.')
                    rc = scan_file(s, sc, dir, f->d_name);
            closedir(ed);
        }
        closedir(fpd);
    }
    closedir(top);
    return rc;
}

static int by_mtime(const void *a, const void *b)
{
    const scan_entry *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec)
        return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec)
        return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
    return strcmp(x->rel, y->rel);
}

/* rmdir the entry's epoch and fingerprint directories if they are now empty. */
static void remove_empty_dirs(bfs_store *s, const char *rel)
{
    char d[REL_MAX];
    memcpy(d, rel, REL_MAX);
    for (int i = 0; i < 2; i++) {
        char *slash = strrchr(d, '/');
        if (!slash)
            return;
        *slash = 0;
        if (unlinkat(s->vfd, d, AT_REMOVEDIR) < 0)
            return; /* not empty (ENOTEMPTY) or gone */
    }
}

/*
 * The scan of bfs_store_evict. room 0: evict down to the budget's low water, skipping the
 * scan when another one runs. room > 0 (the file system is full): wait for a running scan,
 * then evict until room bytes and 1/16 of the store are freed, budget or not (the slack
 * makes the next ENOSPC wait for another ~6% of the store to be published). *evicted and
 * *bytes (may be NULL) get what was removed.
 */
static int evict_impl(bfs_store *s, uint64_t room, uint64_t *evicted, uint64_t *bytes)
{
    if (evicted)
        *evicted = 0;
    if (bytes)
        *bytes = 0;
    int efd = openat(s->vfd, ".evict.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (efd < 0)
        return -errno;
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    while (fcntl(efd, room ? F_OFD_SETLKW : F_OFD_SETLK, &fl) < 0) {
        int e = errno;
        if (room && e == EINTR)
            continue;
        close(efd);
        return e == EAGAIN || e == EACCES ? 0 : -e; /* someone else scans right now */
    }
    int64_t before = (int64_t)__atomic_load_n(s->usage, __ATOMIC_RELAXED);
    scan sc = {0};
    int rc = scan_store(s, &sc);
    uint64_t budget = s->o.budget_bytes, target = UINT64_MAX;
    if (budget && sc.total > budget)
        target = EVICT_LOW_WATER(budget);
    if (room) {
        uint64_t want = room + sc.total / 16;
        uint64_t t = sc.total > want ? sc.total - want : 0;
        target = t < target ? t : target;
    }
    if (!rc && target != UINT64_MAX) {
        if (sc.n > 1) /* sc.v is NULL for an empty store: qsort(NULL, 0) is undefined */
            qsort(sc.v, sc.n, sizeof *sc.v, by_mtime);
        for (size_t i = 0; i < sc.n && sc.total > target; i++) {
            scan_entry *e = &sc.v[i];
            struct stat st;
            /* replaced, or used (mtime refreshed by a hit) since the scan: keep it */
            if (fstatat(s->vfd, e->rel, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
                (uint64_t)st.st_ino != e->ino || st.st_mtim.tv_sec != e->mtime.tv_sec ||
                st.st_mtim.tv_nsec != e->mtime.tv_nsec)
                continue;
            /* readers holding the file keep reading it: unlink frees it at their close */
            if (unlinkat(s->vfd, e->rel, 0) < 0)
                continue;
            sc.total -= e->size;
            ADD(s->st.evictions, 1);
            ADD(s->st.bytes_evicted, e->size);
            if (evicted)
                (*evicted)++;
            if (bytes)
                *bytes += e->size;
            remove_empty_dirs(s, e->rel);
        }
    }
    if (!rc) {
        /* usage := the exact total now + what others published while we scanned, in one
         * atomic step (no update of another process is lost) */
        usage_add(s, (int64_t)sc.total - before);
    }
    free(sc.v);
    close(efd); /* releases the scan lock */
    return rc;
}

int bfs_store_evict(bfs_store *s, uint64_t *evicted)
{
    return evict_impl(s, 0, evicted, NULL);
}

/* ---- open / close -------------------------------------------------------------------- */

/* Symbolic links followed in one walk at most (the kernel's MAXSYMLINKS). */
#define WALK_SYMLINKS 40

/*
 * May the directory fd (shown, for messages) be trusted to keep the names in it: owned by
 * root or by us, and writable by no one else unless sticky (in a sticky directory, only
 * the owner of a name can remove or rename it; anyone can add new names, whose owners
 * the walk checks). Returns 0 or -EPERM with a message.
 */
static int walk_trust_dir(int fd, const char *root, const char *shown, char *err, size_t errlen)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return bfs_errf(-errno, err, errlen, "cache_dir %s: %s: %s", root, shown, strerror(errno));
    if (st.st_uid != 0 && st.st_uid != geteuid())
        return bfs_errf(-EPERM, err, errlen,
                        "cache_dir %s: directory %s on its path is owned by uid %u, neither "
                        "root nor this user (uid %u): its owner could redirect the store; "
                        "choose a cache_dir below directories owned by you or root",
                        root, shown, (unsigned)st.st_uid, (unsigned)geteuid());
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
        return bfs_errf(-EPERM, err, errlen,
                        "cache_dir %s: directory %s on its path is writable by other users "
                        "and not sticky (mode %04o): they could replace the rest of the "
                        "path; choose a cache_dir below directories only you or root can "
                        "write to (or sticky ones, like /tmp)",
                        root, shown, (unsigned)(st.st_mode & 07777));
    return 0;
}

/*
 * Open the directory root (absolute) without letting another user redirect it: walk it
 * from / one component at a time with openat(O_NOFOLLOW), creating missing directories
 * 0700. Every directory a name is looked up in must pass walk_trust_dir; a symbolic link
 * is followed only if root or this user owns it (one planted by another user in a sticky
 * directory such as /tmp is refused, not followed). The last directory is checked by the
 * caller (check_owner). Returns 0 and *out, or -errno with a message naming the culprit.
 */
static int walk_open_root(const char *root, int *out, char *err, size_t errlen)
{
    *out = -1;
    if (root[0] != '/')
        return bfs_errf(-EINVAL, err, errlen, "cache_dir %s: not an absolute path", root);
    size_t cap = strlen(root) + 1 + PATH_MAX;
    char *rest = malloc(cap), *next = malloc(cap), *shown = malloc(PATH_MAX);
    int rc = 0, fd = -1, links = 0;
    if (!rest || !next || !shown) {
        rc = bfs_errf(-ENOMEM, err, errlen, "cache_dir %s: out of memory", root);
        goto out;
    }
    snprintf(rest, cap, "%s", root);
    shown[0] = 0; /* the real path walked so far; "" is / */
    fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        rc = bfs_errf(-errno, err, errlen, "cache_dir %s: /: %s", root, strerror(errno));
        goto out;
    }
    const char *p = rest;
    for (;;) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        size_t n = strcspn(p, "/");
        char comp[NAME_MAX + 1];
        if (n > NAME_MAX) {
            rc = bfs_errf(-ENAMETOOLONG, err, errlen, "cache_dir %s: a name is too long", root);
            goto out;
        }
        memcpy(comp, p, n);
        comp[n] = 0;
        p += n;
        if (!strcmp(comp, "."))
            continue;
        if ((rc = walk_trust_dir(fd, root, shown[0] ? shown : "/", err, errlen)))
            goto out;
        size_t slen = strlen(shown);
        int appended = 0;
        if (!strcmp(comp, "..")) {
            char *slash = strrchr(shown, '/');
            if (slash)
                *slash = 0;
        } else if (slen + 1 + n < PATH_MAX) {
            snprintf(shown + slen, PATH_MAX - slen, "/%s", comp);
            appended = 1;
        }
        struct stat st;
        int r = fstatat(fd, comp, &st, AT_SYMLINK_NOFOLLOW);
        if (r < 0 && errno == ENOENT) {
            if (mkdirat(fd, comp, 0700) < 0 && errno != EEXIST) {
                rc = bfs_errf(-errno, err, errlen, "cache_dir %s: cannot create %s: %s", root,
                              shown, strerror(errno));
                goto out;
            }
            r = fstatat(fd, comp, &st, AT_SYMLINK_NOFOLLOW);
        }
        if (r < 0) {
            rc =
                bfs_errf(-errno, err, errlen, "cache_dir %s: %s: %s", root, shown, strerror(errno));
            goto out;
        }
        if (S_ISLNK(st.st_mode)) {
            if (st.st_uid != 0 && st.st_uid != geteuid()) {
                rc = bfs_errf(-EPERM, err, errlen,
                              "cache_dir %s: %s is a symbolic link owned by uid %u, neither "
                              "root nor this user (uid %u): another user may have planted it "
                              "to redirect the store, so it is not followed; give the real "
                              "path of a directory of your own",
                              root, shown, (unsigned)st.st_uid, (unsigned)geteuid());
                goto out;
            }
            if (++links > WALK_SYMLINKS) {
                rc = bfs_errf(-ELOOP, err, errlen,
                              "cache_dir %s: too many symbolic links (a loop?) at %s", root, shown);
                goto out;
            }
            char target[PATH_MAX];
            ssize_t tl = readlinkat(fd, comp, target, sizeof target - 1);
            if (tl <= 0) {
                rc = bfs_errf(tl < 0 ? -errno : -ENOENT, err, errlen,
                              "cache_dir %s: symbolic link %s: %s", root, shown,
                              tl < 0 ? strerror(errno) : "empty");
                goto out;
            }
            target[tl] = 0;
            /* the link's directory is where a relative target starts */
            if (appended)
                *strrchr(shown, '/') = 0;
            if (target[0] == '/') {
                int rfd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (rfd < 0) {
                    rc =
                        bfs_errf(-errno, err, errlen, "cache_dir %s: /: %s", root, strerror(errno));
                    goto out;
                }
                close(fd);
                fd = rfd;
                shown[0] = 0;
            }
            if (strlen(target) + 1 + strlen(p) + 1 > cap) {
                rc = bfs_errf(-ENAMETOOLONG, err, errlen, "cache_dir %s: path too long", root);
                goto out;
            }
            snprintf(next, cap, "%s/%s", target, p);
            char *t = rest;
            rest = next, next = t;
            p = rest;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            rc =
                bfs_errf(-ENOTDIR, err, errlen, "cache_dir %s: %s is not a directory", root, shown);
            goto out;
        }
        int nfd = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (nfd < 0) {
            rc =
                bfs_errf(-errno, err, errlen, "cache_dir %s: %s: %s", root, shown, strerror(errno));
            goto out;
        }
        close(fd);
        fd = nfd;
    }
    *out = fd;
    fd = -1;
out:
    if (fd >= 0)
        close(fd);
    free(rest);
    free(next);
    free(shown);
    return rc;
}

/* The store trusts its files: its directories must be the user's and not world-writable. */
static int check_owner(int fd, const char *what, char *err, size_t errlen)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return bfs_errf(-errno, err, errlen, "cache_dir %s: %s", what, strerror(errno));
    if (st.st_uid != geteuid())
        return bfs_errf(-EPERM, err, errlen,
                        "cache_dir %s is owned by uid %u, not by this user (uid %u): the "
                        "store only trusts its own files; choose another cache_dir",
                        what, (unsigned)st.st_uid, (unsigned)geteuid());
    if (st.st_mode & S_IWOTH)
        return bfs_errf(-EPERM, err, errlen,
                        "cache_dir %s is writable by every user: the store only trusts its "
                        "own files; use a private directory (chmod o-w, or a sub-directory)",
                        what);
    return 0;
}

/* Does O_TMPFILE + linkat(/proc/self/fd/N) work in v2/? (not on NFS, nor without /proc) */
static int probe_tmpfile(bfs_store *s)
{
    int fd = openat(s->vfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        return 0;
    char proc[64], name[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    snprintf(name, sizeof name, ".probe-%ld-%p", (long)getpid(), (void *)s);
    int ok = linkat(AT_FDCWD, proc, s->vfd, name, AT_SYMLINK_FOLLOW) == 0;
    if (ok)
        (void)unlinkat(s->vfd, name, 0);
    close(fd);
    return ok;
}

/* Map v2/.usage (created on first use); falls back to a private counter if mmap fails. */
static int map_usage(bfs_store *s)
{
    int fd = openat(s->vfd, ".usage", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0) {
        struct stat st;
        /* growing to the same size is idempotent: concurrent first opens agree */
        if (fstat(fd, &st) == 0 && (st.st_size >= 4096 || ftruncate(fd, 4096) == 0)) {
            void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (m != MAP_FAILED) {
                close(fd);
                s->usage = m;
                s->usage_shared = 1;
                return 0;
            }
        }
        close(fd);
    }
    s->usage = calloc(1, sizeof *s->usage);
    return s->usage ? 0 : -ENOMEM;
}

int bfs_store_open(const char *root, const bfs_store_opts *opts, bfs_store **out, char *err,
                   size_t errlen)
{
    *out = NULL;
    bfs_store_opts o = {0};
    if (opts)
        o = *opts;
    if (o.sync != BFS_STORE_SYNC_NONE && o.sync != BFS_STORE_SYNC_DATA &&
        o.sync != BFS_STORE_SYNC_FULL)
        return bfs_errf(-EINVAL, err, errlen, "cache_dir: invalid sync policy %d", (int)o.sync);
    if (!root || !*root)
        return bfs_errf(-EINVAL, err, errlen, "cache_dir: empty path");
    int rc = 0, rootfd = -1;
    bfs_store *s = calloc(1, sizeof *s);
    if (!s || !(s->root = strdup(root))) {
        rc = bfs_errf(-ENOMEM, err, errlen, "cache_dir %s: out of memory", root);
        goto fail_alloc;
    }
    s->o = o;
    s->vfd = -1;
    pthread_mutex_init(&s->note_full.lock, NULL);
    pthread_mutex_init(&s->note_failed.lock, NULL);
    rc = walk_open_root(root, &rootfd, err, errlen);
    if (rc)
        goto fail_alloc;
    rc = check_owner(rootfd, root, err, errlen);
    if (rc)
        goto fail_root;
    if (mkdirat(rootfd, BFS_STORE_DIR, 0700) < 0 && errno != EEXIST) {
        rc = -errno;
        bfs_errf(rc, err, errlen, "cache_dir %s: cannot create " BFS_STORE_DIR "/: %s", root,
                 strerror(-rc));
        goto fail_root;
    }
    s->vfd = openat(rootfd, BFS_STORE_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (s->vfd < 0) {
        rc = -errno;
        bfs_errf(rc, err, errlen, "cache_dir %s/" BFS_STORE_DIR ": %s", root, strerror(-rc));
        goto fail_root;
    }
    rc = check_owner(s->vfd, root, err, errlen);
    if (rc)
        goto fail_vfd;
    rc = map_usage(s);
    if (rc) {
        bfs_errf(rc, err, errlen, "cache_dir %s: out of memory", root);
        goto fail_vfd;
    }
    s->tmpfile_ok = !o.named_temps && probe_tmpfile(s);
    /* clean up after dead daemons, recount, trim to our budget */
    rc = bfs_store_evict(s, NULL);
    if (rc) {
        bfs_errf(rc, err, errlen, "cache_dir %s: cannot scan it: %s", root, strerror(-rc));
        goto fail_usage;
    }
    close(rootfd);
    *out = s;
    return 0;

fail_usage:
    if (s->usage_shared)
        munmap(s->usage, 4096);
    else
        free(s->usage);
fail_vfd:
    close(s->vfd);
fail_root:
    close(rootfd);
fail_alloc:
    if (s)
        free(s->root);
    free(s);
    return rc;
}

void bfs_store_close(bfs_store *s)
{
    if (!s)
        return;
    BFS_ASSERT(__atomic_load_n(&s->mine, __ATOMIC_RELAXED) == 0); /* every MINE finished */
    if (s->usage_shared)
        munmap(s->usage, 4096);
    else
        free(s->usage);
    close(s->vfd);
    pthread_mutex_destroy(&s->note_full.lock);
    pthread_mutex_destroy(&s->note_failed.lock);
    free(s->root);
    free(s);
}

void bfs_store_get_stats(bfs_store *s, bfs_store_stats *st)
{
    memset(st, 0, sizeof *st);
#define LOAD(f) st->f = __atomic_load_n(&s->st.f, __ATOMIC_RELAXED)
    LOAD(hits);
    LOAD(misses);
    LOAD(busy);
    LOAD(busy_waits);
    LOAD(publishes);
    LOAD(abandons);
    LOAD(bytes_published);
    LOAD(bytes_served);
    LOAD(evictions);
    LOAD(bytes_evicted);
    LOAD(corrupt);
    LOAD(stale_removed);
    LOAD(taken);
    LOAD(save_errors);
    LOAD(no_space);
#undef LOAD
    st->usage_bytes = (uint64_t)usage_get(s);
    st->budget_bytes = s->o.budget_bytes;
}

/* ---- default directory --------------------------------------------------------------- */

int bfs_store_prepare_dir(const char *path, char *err, size_t errlen)
{
    if (mkdir(path, 0700) < 0 && errno != EEXIST)
        return bfs_errf(-errno, err, errlen, "cache directory %s: cannot create it: %s", path,
                        strerror(errno));
    /* O_NOFOLLOW: a symlink planted under that name is refused, not followed */
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (e == ELOOP || e == ENOTDIR)
            return bfs_errf(-ENOTDIR, err, errlen,
                            "cache directory %s exists but is not a directory (or is a "
                            "symlink): remove it, or set cache_dir=PATH",
                            path);
        return bfs_errf(-e, err, errlen, "cache directory %s: %s", path, strerror(e));
    }
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) < 0) {
        rc = bfs_errf(-errno, err, errlen, "cache directory %s: %s", path, strerror(errno));
    } else if (st.st_uid != geteuid()) {
        rc = bfs_errf(-EPERM, err, errlen,
                      "cache directory %s is owned by uid %u, not by this user (uid %u): "
                      "another user may have created it to feed us batches; remove it, or "
                      "set cache_dir=PATH",
                      path, (unsigned)st.st_uid, (unsigned)geteuid());
    } else if ((st.st_mode & 077) && fchmod(fd, 0700) < 0) {
        rc = bfs_errf(-errno, err, errlen, "cache directory %s: chmod 0700: %s", path,
                      strerror(errno));
    }
    close(fd);
    return rc;
}

int bfs_store_default_dir(char *buf, size_t len, char *err, size_t errlen)
{
    int n = snprintf(buf, len, "/dev/shm/batchfs-%u", (unsigned)geteuid());
    if (n < 0 || (size_t)n >= len)
        return bfs_errf(-ENAMETOOLONG, err, errlen, "cache directory: buffer too small");
    return bfs_store_prepare_dir(buf, err, errlen);
}

int bfs_store_sync_parse(const char *name, bfs_store_sync *out)
{
    static const char *const names[] = {"none", "data", "full"};
    for (int i = 0; i < 3; i++)
        if (name && !strcmp(name, names[i])) {
            *out = (bfs_store_sync)i;
            return 0;
        }
    return -EINVAL;
}

const char *bfs_store_sync_name(bfs_store_sync sync)
{
    switch (sync) {
    case BFS_STORE_SYNC_NONE:
        return "none";
    case BFS_STORE_SYNC_DATA:
        return "data";
    case BFS_STORE_SYNC_FULL:
        return "full";
    }
    return "?";
}
