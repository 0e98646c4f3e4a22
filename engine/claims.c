/*
 * claims.c — the one-host claim counters of group= (see claims.h): a shared-memory file per
 * (user, group, fingerprint), epoch counters advanced with atomic fetch-add, a short list of
 * claims given back.
 *
 * Locks. Three one-byte OFD record locks on the file (released by the kernel when a process
 * dies, never left held): LOCK_ATTACH (exclusive, held for the few syscalls of an attach or
 * a detach), LOCK_MEMBERS (shared, held by every attached mount for its lifetime: whoever
 * can take it exclusively is alone), LOCK_RETURNS (exclusive, around the list of claims
 * given back). OFD locks do not exclude the threads of one process from each other (they
 * share the file description), so g->lock serializes those first. Counters need no lock:
 * C11 atomics on a MAP_SHARED mapping are atomic across processes (lock-free 64-bit words,
 * checked below).
 */
#include "engine/claims.h"
#include "base/err.h"
#include "engine/remote/remote.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "claim counters must be lock-free across processes");

#define SHM_DIR      "/dev/shm"
#define SHM_MAGIC    0x70756f7267736662ull /* "bfsgroup" */
#define SHM_VERSION  1u
#define LOCK_ATTACH  0
#define LOCK_MEMBERS 1
#define LOCK_RETURNS 2

typedef struct shm_return {
    uint64_t epoch, batch;
    uint32_t tries, pad;
} shm_return;

/* The file. Zero-filled by ftruncate: every counter starts at 0. */
typedef struct shm_file {
    uint64_t magic;
    uint32_t version, epochs; /* epochs: BFS_CLAIMS_EPOCHS */
    uint64_t fingerprint, batches;
    _Atomic uint64_t nret;                    /* entries of ret; written under LOCK_RETURNS */
    shm_return ret[BFS_CLAIMS_RETURNS];       /* guarded by LOCK_RETURNS */
    _Atomic uint64_t next[BFS_CLAIMS_EPOCHS]; /* epoch N's next unclaimed batch */
} shm_file;

struct bfs_claims {
    char name[BFS_CLAIMS_NAME_MAX + 1];
    char path[160];
    int fd;
    shm_file *f;
    pthread_mutex_t lock; /* guards this process's use of LOCK_RETURNS, and r */
    _Atomic uint64_t taken, given_back, lost, exhausted;
    /* across hosts (bfs_claims_open_remote): the counters are in Redis, f is NULL */
    bfs_remote *r;
    uint64_t batches;
    uint8_t *seen; /* a bit per epoch: this process has looked at its counter (under lock) */
};

/* Take (F_WRLCK, F_RDLCK) or drop (F_UNLCK) the OFD lock on one byte; wait or not. */
static int byte_lock(int fd, short type, off_t byte, int wait)
{
    struct flock l = {.l_type = type, .l_whence = SEEK_SET, .l_start = byte, .l_len = 1};
    int rc;
    do
        rc = fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &l);
    while (rc < 0 && errno == EINTR);
    return rc < 0 ? -errno : 0;
}

/* Attach to the file open as fd (LOCK_ATTACH held): map it, reset it if no mount is
 * attached, check it otherwise, join the members. */
static int attach(bfs_claims *g, int fd, const struct stat *st, uint64_t fingerprint,
                  uint64_t batches, char *err, size_t errlen)
{
    int first = byte_lock(fd, F_WRLCK, LOCK_MEMBERS, 0) == 0;
    if (first) { /* alone: a new file, or one left by mounts that all died */
        if (ftruncate(fd, 0) < 0 || ftruncate(fd, (off_t)sizeof(shm_file)) < 0)
            return bfs_errf(-errno, err, errlen, "group=%s: %s: cannot size it: %s", g->name,
                            g->path, strerror(errno));
    } else if (st->st_size != (off_t)sizeof(shm_file)) {
        return bfs_errf(-EEXIST, err, errlen,
                        "group=%s: %s is not a group file of this batchfs version (size %lld): "
                        "unmount the group's other mounts or remove the file",
                        g->name, g->path, (long long)st->st_size);
    }
    void *p = mmap(NULL, sizeof(shm_file), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return bfs_errf(-errno, err, errlen, "group=%s: %s: mmap: %s", g->name, g->path,
                        strerror(errno));
    shm_file *f = p;
    if (first) {
        f->magic = SHM_MAGIC, f->version = SHM_VERSION, f->epochs = BFS_CLAIMS_EPOCHS;
        f->fingerprint = fingerprint, f->batches = batches;
    } else if (f->magic != SHM_MAGIC || f->version != SHM_VERSION ||
               f->epochs != BFS_CLAIMS_EPOCHS || f->fingerprint != fingerprint ||
               f->batches != batches) {
        int rc = bfs_errf(-EEXIST, err, errlen,
                          "group=%s: %s holds another pipeline (fingerprint %016llx, %llu batches "
                          "per epoch; this one: %016llx, %llu): a damaged or foreign file; "
                          "unmount the group's other mounts or remove it",
                          g->name, g->path, (unsigned long long)f->fingerprint,
                          (unsigned long long)f->batches, (unsigned long long)fingerprint,
                          (unsigned long long)batches);
        munmap(p, sizeof(shm_file)); /* (after the message: it reads the file) */
        return rc;
    }
    /* (first: turns our exclusive lock into a shared one, atomically) */
    int rc = byte_lock(fd, F_RDLCK, LOCK_MEMBERS, 0);
    if (rc) {
        munmap(p, sizeof(shm_file));
        return bfs_errf(rc, err, errlen, "group=%s: %s: lock: %s", g->name, g->path, strerror(-rc));
    }
    g->f = f;
    return 0;
}

int bfs_claims_open(const char *name, uint64_t fingerprint, uint64_t batches, bfs_claims **out,
                    char *err, size_t errlen)
{
    *out = NULL;
    if (!bfs_claims_name_valid(name))
        return bfs_errf(-EINVAL, err, errlen,
                        "group=%.80s: must be 1..%d of the characters A-Z a-z 0-9 . _ -", name,
                        BFS_CLAIMS_NAME_MAX);
    bfs_claims *g = calloc(1, sizeof *g);
    if (!g)
        return bfs_errf(-ENOMEM, err, errlen, "group=%s: out of memory", name);
    snprintf(g->name, sizeof g->name, "%s", name);
    snprintf(g->path, sizeof g->path, SHM_DIR "/batchfs-group-%u-%s-%016llx", (unsigned)geteuid(),
             name, (unsigned long long)fingerprint);
    pthread_mutex_init(&g->lock, NULL);
    int rc = 0;
    /* a detaching last member may unlink the file between our open and our lock: retry */
    for (int attempt = 0; attempt < 100; attempt++) {
        int fd = open(g->path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) {
            rc = bfs_errf(-errno, err, errlen, "group=%s: %s: %s%s", name, g->path, strerror(errno),
                          errno == ELOOP ? " (a symbolic link: remove it)"
                          : errno == EACCES
                              ? " (another user's file? the name is per user: remove it)"
                              : "");
            break;
        }
        struct stat st;
        rc = byte_lock(fd, F_WRLCK, LOCK_ATTACH, 1);
        if (rc) {
            bfs_errf(rc, err, errlen, "group=%s: %s: lock: %s", name, g->path, strerror(-rc));
        } else if (fstat(fd, &st) < 0) {
            rc = bfs_errf(-errno, err, errlen, "group=%s: %s: %s", name, g->path, strerror(errno));
        } else if (st.st_nlink == 0) { /* removed by the last member: a new one */
            close(fd);
            rc = -EAGAIN;
            continue;
        } else if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077)) {
            rc = bfs_errf(-EPERM, err, errlen,
                          "group=%s: %s is %s (owner uid %u, mode %03o), not a private file of "
                          "this user (uid %u): remove it",
                          name, g->path, S_ISREG(st.st_mode) ? "a file" : "not a regular file",
                          (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777), (unsigned)geteuid());
        } else {
            rc = attach(g, fd, &st, fingerprint, batches, err, errlen);
        }
        if (rc) {
            close(fd);
            break;
        }
        byte_lock(fd, F_UNLCK, LOCK_ATTACH, 0);
        g->fd = fd;
        *out = g;
        return 0;
    }
    if (rc == -EAGAIN)
        bfs_errf(rc, err, errlen, "group=%s: %s keeps being removed while attaching", name,
                 g->path);
    pthread_mutex_destroy(&g->lock);
    free(g);
    return rc;
}

/* Hand out a claim of epoch that was given back, if any: 1 with *c set, else 0. */
static int pop_return(bfs_claims *g, uint64_t epoch, bfs_group_claim *c)
{
    int found = 0;
    shm_file *f = g->f;
    pthread_mutex_lock(&g->lock);
    if (byte_lock(g->fd, F_WRLCK, LOCK_RETURNS, 1) == 0) {
        uint64_t n = atomic_load(&f->nret);
        for (uint64_t i = 0; i < n && i < BFS_CLAIMS_RETURNS; i++) {
            if (f->ret[i].epoch != epoch)
                continue;
            *c = (bfs_group_claim){
                .epoch = epoch, .batch = f->ret[i].batch, .tries = f->ret[i].tries};
            f->ret[i] = f->ret[n - 1];
            atomic_store(&f->nret, n - 1);
            found = 1;
            break;
        }
        byte_lock(g->fd, F_UNLCK, LOCK_RETURNS, 0);
    }
    pthread_mutex_unlock(&g->lock);
    return found;
}

/* Seconds as "40 s", "12 min", "3 h", "2 days". */
static void age_text(char *buf, size_t cap, long long s)
{
    if (s < 120)
        snprintf(buf, cap, "%lld s", s);
    else if (s < 7200)
        snprintf(buf, cap, "%lld min", s / 60);
    else if (s < 172800)
        snprintf(buf, cap, "%lld h", s / 3600);
    else
        snprintf(buf, cap, "%lld days", s / 86400);
}

/*
 * Before this process's first claim of an epoch (g->lock held): a counter that is already
 * past 0 was set by the group's other mounts, or by an earlier run under the same name
 * (Redis keeps it a week, so a reused name sees a used-up epoch at once). Either way one
 * line says how far the epoch is claimed and how to start clean.
 */
static void look_at_epoch(bfs_claims *g, uint64_t epoch)
{
    uint8_t bit = (uint8_t)(1u << (epoch % 8));
    uint64_t count = 0;
    long long age = -1;
    if ((g->seen[epoch / 8] & bit) || bfs_remote_claim_info(g->r, g->name, epoch, &count, &age))
        return; /* (seen already; or Redis failed: the take says why) */
    g->seen[epoch / 8] |= bit;
    if (!count)
        return;
    char when[64] = "";
    if (age >= 0) {
        char a[32];
        age_text(a, sizeof a, age);
        snprintf(when, sizeof when, ", the first %s ago", a);
    }
    uint64_t n = count < g->batches ? count : g->batches;
    fprintf(stderr,
            "batchfs: group=%s epoch %llu: %llu of %llu batches were claimed before this mount's "
            "first claim%s%s: by the group's other mounts, or by an earlier run with this group "
            "name (Redis keeps its counters a week). For a clean start, unmount the group's "
            "mounts and run 'batchfs group-reset SOURCE -o remote=URL,group=%s' with the "
            "mounts' data options, or use a new group name per run (the job id)\n",
            g->name, (unsigned long long)epoch, (unsigned long long)n,
            (unsigned long long)g->batches, when,
            n >= g->batches ? " (the epoch is used up: opens of next fail with ENODATA)" : "",
            g->name);
}

/* The Redis backend's take: a claim given back first, then the counter (INCR). */
static int take_remote(bfs_claims *g, uint64_t epoch, bfs_group_claim *c)
{
    uint64_t k = 0;
    uint32_t tries = 0;
    pthread_mutex_lock(&g->lock);
    look_at_epoch(g, epoch);
    int rc = bfs_remote_claim_returned(g->r, g->name, epoch, &k, &tries);
    if (rc == 0) {
        rc = bfs_remote_claim(g->r, g->name, epoch, &k);
        if (rc == 0 && k >= g->batches) /* (one may have been given back since) */
            rc = bfs_remote_claim_returned(g->r, g->name, epoch, &k, &tries);
        else if (rc == 0)
            rc = 1;
    }
    if (rc < 0)
        fprintf(stderr, "batchfs: group=%s: Redis: %s\n", g->name, bfs_remote_error(g->r));
    pthread_mutex_unlock(&g->lock);
    if (rc < 0)
        return rc;
    if (rc == 0) {
        atomic_fetch_add(&g->exhausted, 1);
        return -ENODATA;
    }
    *c = (bfs_group_claim){.epoch = epoch, .batch = k, .tries = tries};
    atomic_fetch_add(&g->taken, 1);
    return 0;
}

int bfs_claims_open_remote(const char *name, uint64_t fingerprint, uint64_t batches,
                           const char *url, bfs_claims **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!bfs_claims_name_valid(name))
        return bfs_errf(-EINVAL, err, errlen,
                        "group=%.80s: must be 1..%d of the characters A-Z a-z 0-9 . _ -", name,
                        BFS_CLAIMS_NAME_MAX);
    bfs_remote_url u;
    int rc = bfs_remote_parse_url(url, &u, err, errlen);
    if (rc)
        return rc;
    bfs_claims *g = calloc(1, sizeof *g);
    if (!g)
        return bfs_errf(-ENOMEM, err, errlen, "group=%s: out of memory", name);
    snprintf(g->name, sizeof g->name, "%s", name);
    g->fd = -1;
    g->batches = batches;
    if (!(g->seen = calloc(BFS_CLAIMS_EPOCHS / 8 + 1, 1))) {
        free(g);
        return bfs_errf(-ENOMEM, err, errlen, "group=%s: out of memory", name);
    }
    pthread_mutex_init(&g->lock, NULL);
    char why[1024];
    if ((rc = bfs_remote_connect(&u, fingerprint, 2000, &g->r, why, sizeof why))) {
        bfs_errf(rc, err, errlen, "group=%s across hosts: %s", name, why);
        pthread_mutex_destroy(&g->lock);
        free(g->seen);
        free(g);
        return rc;
    }
    *out = g;
    return 0;
}

int bfs_claims_reset_remote(const char *name, uint64_t fingerprint, const char *url,
                            long long *deleted, char *err, size_t errlen)
{
    if (!bfs_claims_name_valid(name))
        return bfs_errf(-EINVAL, err, errlen,
                        "group=%.80s: must be 1..%d of the characters A-Z a-z 0-9 . _ -", name,
                        BFS_CLAIMS_NAME_MAX);
    bfs_remote_url u;
    int rc = bfs_remote_parse_url(url, &u, err, errlen);
    if (rc)
        return rc;
    bfs_remote *r;
    char why[1024];
    if ((rc = bfs_remote_connect(&u, fingerprint, 2000, &r, why, sizeof why)))
        return bfs_errf(rc, err, errlen, "group=%s: %s", name, why);
    if ((rc = bfs_remote_claims_reset(r, name, deleted)))
        bfs_errf(rc, err, errlen, "group=%s: Redis: %s", name, bfs_remote_error(r));
    bfs_remote_close(r);
    return rc;
}

int bfs_claims_take(bfs_claims *g, uint64_t epoch, bfs_group_claim *c)
{
    shm_file *f = g->f;
    if (epoch >= BFS_CLAIMS_EPOCHS)
        return -ERANGE;
    if (g->r)
        return take_remote(g, epoch, c);
    /* claims given back first, so that an epoch is complete when its counter runs out */
    int got = atomic_load(&f->nret) && pop_return(g, epoch, c);
    if (!got) {
        uint64_t k = atomic_fetch_add(&f->next[epoch], 1);
        if (k < f->batches) {
            *c = (bfs_group_claim){.epoch = epoch, .batch = k};
            got = 1;
        } else {
            /* (a claim may have been given back since the first look) */
            got = atomic_load(&f->nret) && pop_return(g, epoch, c);
        }
    }
    if (!got) {
        atomic_fetch_add(&g->exhausted, 1);
        return -ENODATA;
    }
    atomic_fetch_add(&g->taken, 1);
    return 0;
}

/* Put claim c back on the list with `tries` failed tries; counted as given back or lost. */
static void put_back(bfs_claims *g, const bfs_group_claim *c, uint32_t tries)
{
    shm_file *f = g->f;
    int kept = 0;
    if (g->r) {
        if (tries < BFS_CLAIMS_TRIES) {
            pthread_mutex_lock(&g->lock);
            kept = bfs_remote_claim_return(g->r, g->name, c->epoch, c->batch, tries) == 0;
            pthread_mutex_unlock(&g->lock);
        }
    } else if (tries < BFS_CLAIMS_TRIES) {
        pthread_mutex_lock(&g->lock);
        if (byte_lock(g->fd, F_WRLCK, LOCK_RETURNS, 1) == 0) {
            uint64_t n = atomic_load(&f->nret);
            if (n < BFS_CLAIMS_RETURNS) {
                f->ret[n] = (shm_return){.epoch = c->epoch, .batch = c->batch, .tries = tries};
                atomic_store(&f->nret, n + 1);
                kept = 1;
            }
            byte_lock(g->fd, F_UNLCK, LOCK_RETURNS, 0);
        }
        pthread_mutex_unlock(&g->lock);
    }
    atomic_fetch_add(kept ? &g->given_back : &g->lost, 1);
}

void bfs_claims_give_back(bfs_claims *g, const bfs_group_claim *c)
{
    put_back(g, c, c->tries + 1);
}

void bfs_claims_return(bfs_claims *g, const bfs_group_claim *c)
{
    put_back(g, c, c->tries);
}

void bfs_claims_get_stats(bfs_claims *g, bfs_claims_stats *st)
{
    st->taken = atomic_load(&g->taken);
    st->given_back = atomic_load(&g->given_back);
    st->lost = atomic_load(&g->lost);
    st->exhausted = atomic_load(&g->exhausted);
}

const char *bfs_claims_name(const bfs_claims *g)
{
    return g->name;
}

void bfs_claims_close(bfs_claims *g)
{
    if (!g)
        return;
    if (g->r) {
        bfs_remote_close(g->r);
        pthread_mutex_destroy(&g->lock);
        free(g->seen);
        free(g);
        return;
    }
    munmap(g->f, sizeof(shm_file));
    if (byte_lock(g->fd, F_WRLCK, LOCK_ATTACH, 1) == 0) {
        byte_lock(g->fd, F_UNLCK, LOCK_MEMBERS, 0);
        struct stat mine, named;
        /* the last member removes the file (if the name is still this file) */
        if (byte_lock(g->fd, F_WRLCK, LOCK_MEMBERS, 0) == 0 && fstat(g->fd, &mine) == 0 &&
            lstat(g->path, &named) == 0 && mine.st_dev == named.st_dev &&
            mine.st_ino == named.st_ino)
            unlink(g->path);
    }
    close(g->fd); /* (drops every lock of this file description) */
    pthread_mutex_destroy(&g->lock);
    free(g);
}
