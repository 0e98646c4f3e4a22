/* srccache.c — remote files' bytes kept on disk for the host's mounts (see srccache.h). */
#include "cache/srccache.h"
#include "base/err.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define RECOUNT_EVERY (64ull << 20) /* bytes written here between counts of the directory */

struct bfs_srcfile {
    int fd;
    uint64_t identity, size;
    bfs_srcfile *next; /* the open files (guarded by lock) */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int dirfd_ = -1; /* guarded by lock, as open_files */
static bfs_srcfile *open_files;
static _Atomic uint64_t budget;
static _Atomic uint64_t usage;       /* bytes on disk, as last counted plus written since */
static _Atomic uint64_t since_count; /* bytes written since the last count */
static _Atomic uint64_t st_hits, st_hit_bytes, st_stored, st_stored_bytes, st_full, st_evicted;

void bfs_srccache_get_stats(bfs_srccache_stats *st)
{
    st->hits = atomic_load(&st_hits);
    st->hit_bytes = atomic_load(&st_hit_bytes);
    st->stored = atomic_load(&st_stored);
    st->stored_bytes = atomic_load(&st_stored_bytes);
    st->full = atomic_load(&st_full);
    st->evicted = atomic_load(&st_evicted);
    st->usage_bytes = atomic_load(&usage);
    pthread_mutex_lock(&lock);
    st->budget_bytes = dirfd_ >= 0 ? atomic_load(&budget) : 0;
    pthread_mutex_unlock(&lock);
}

/* An object file's name: 16 hex digits and ".obj"; 1 and its identity when name is one. */
static int obj_name(const char *name, uint64_t *id)
{
    if (strlen(name) != 20 || strcmp(name + 16, ".obj"))
        return 0;
    char *end;
    unsigned long long v = strtoull(name, &end, 16);
    if (end != name + 16)
        return 0;
    *id = v;
    return 1;
}

typedef struct {
    char name[24];
    uint64_t id, bytes;
    struct timespec used; /* mtime: set when a process opens it */
} entry;

static int older(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    if (x->used.tv_sec != y->used.tv_sec)
        return x->used.tv_sec < y->used.tv_sec ? -1 : 1;
    return (x->used.tv_nsec > y->used.tv_nsec) - (x->used.tv_nsec < y->used.tv_nsec);
}

static int in_use(uint64_t id)
{
    for (bfs_srcfile *f = open_files; f; f = f->next)
        if (f->identity == id)
            return 1;
    return 0;
}

/* Count the directory's object files on disk and, when need > 0, delete the least
 * recently opened ones not in use here until need more bytes fit in the budget. Locked.
 * Returns 1 when they fit. */
static int count_and_trim(uint64_t need)
{
    int dfd = dup(dirfd_);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        if (dfd >= 0)
            close(dfd);
        return 0;
    }
    rewinddir(d);
    entry *e = NULL;
    size_t n = 0, cap = 0;
    uint64_t total = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        uint64_t id;
        struct stat st;
        if (!obj_name(de->d_name, &id) ||
            fstatat(dirfd_, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
            continue;
        total += (uint64_t)st.st_blocks * 512;
        if (n == cap) {
            entry *g = realloc(e, (cap = cap ? 2 * cap : 64) * sizeof *e);
            if (!g)
                break;
            e = g;
        }
        snprintf(e[n].name, sizeof e[n].name, "%s", de->d_name);
        e[n].id = id;
        e[n].bytes = (uint64_t)st.st_blocks * 512;
        e[n].used = st.st_mtim;
        n++;
    }
    closedir(d);
    uint64_t room = atomic_load(&budget);
    if (need && total + need > room && n) {
        qsort(e, n, sizeof *e, older);
        for (size_t i = 0; i < n && total + need > room; i++) {
            if (in_use(e[i].id) || unlinkat(dirfd_, e[i].name, 0) < 0)
                continue;
            total -= e[i].bytes < total ? e[i].bytes : total;
            atomic_fetch_add(&st_evicted, 1);
        }
    }
    free(e);
    atomic_store(&usage, total);
    atomic_store(&since_count, 0);
    return total + need <= room;
}

int bfs_srccache_configure(const char *dir, uint64_t budget_bytes, char *err, size_t errlen)
{
    char path[1024];
    if (!dir || !*dir) {
        pthread_mutex_lock(&lock);
        if (dirfd_ >= 0 && !open_files) {
            close(dirfd_);
            dirfd_ = -1;
        }
        pthread_mutex_unlock(&lock);
        return 0;
    }
    if (!strcmp(dir, "auto"))
        snprintf(path, sizeof path, "/var/tmp/batchfs-sources-%u", (unsigned)geteuid());
    else
        snprintf(path, sizeof path, "%s", dir);
    if (mkdir(path, 0700) < 0 && errno != EEXIST)
        return bfs_errf(-errno, err, errlen, "source_cache=%s: cannot make the directory: %s", path,
                        strerror(errno));
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return bfs_errf(-e, err, errlen, "source_cache=%s: %s", path,
                        e == ELOOP || e == ENOTDIR
                            ? "not a directory (a symbolic link is not followed): give the "
                              "real path of a directory of your own"
                            : strerror(e));
    }
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) < 0)
        rc = bfs_errf(-errno, err, errlen, "source_cache=%s: %s", path, strerror(errno));
    else if (st.st_uid != geteuid() && st.st_uid != 0)
        rc = bfs_errf(-EPERM, err, errlen,
                      "source_cache=%s: owned by uid %u, not this user (uid %u): another user "
                      "could change the bytes mounts read from it; give a directory of your own",
                      path, (unsigned)st.st_uid, (unsigned)geteuid());
    else if (st.st_mode & (S_IWGRP | S_IWOTH))
        rc = bfs_errf(-EPERM, err, errlen,
                      "source_cache=%s: writable by other users (mode %04o): make it 0700 or "
                      "give a directory only you can write to",
                      path, (unsigned)(st.st_mode & 07777));
    if (rc) {
        close(fd);
        return rc;
    }
    pthread_mutex_lock(&lock);
    if (dirfd_ >= 0 && !open_files)
        close(dirfd_), dirfd_ = -1;
    if (dirfd_ < 0) /* (with files open, the directory they are in stays) */
        dirfd_ = fd;
    else
        close(fd);
    atomic_store(&budget, budget_bytes);
    count_and_trim(0);
    pthread_mutex_unlock(&lock);
    return 0;
}

bfs_srcfile *bfs_srcfile_open(uint64_t identity, uint64_t size)
{
    bfs_srcfile *f = NULL;
    pthread_mutex_lock(&lock);
    if (dirfd_ < 0)
        goto out;
    char name[24];
    snprintf(name, sizeof name, "%016llx.obj", (unsigned long long)identity);
    int fd = openat(dirfd_, name, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
        ((uint64_t)st.st_size != size && ftruncate(fd, (off_t)size) < 0) ||
        !(f = calloc(1, sizeof *f))) {
        if (fd >= 0)
            close(fd);
        goto out;
    }
    futimens(fd, NULL); /* recently used: the last to be evicted */
    f->fd = fd;
    f->identity = identity;
    f->size = size;
    f->next = open_files;
    open_files = f;
out:
    pthread_mutex_unlock(&lock);
    return f;
}

void bfs_srcfile_close(bfs_srcfile *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&lock);
    bfs_srcfile **pp = &open_files;
    while (*pp && *pp != f)
        pp = &(*pp)->next;
    if (*pp)
        *pp = f->next;
    pthread_mutex_unlock(&lock);
    close(f->fd);
    free(f);
}

int bfs_srcfile_present(bfs_srcfile *f, uint64_t off, size_t len)
{
    if (!f || !len || off > f->size || len > f->size - off)
        return 0;
    off_t hole = lseek(f->fd, (off_t)off, SEEK_HOLE);
    return hole >= 0 && (uint64_t)hole >= off + len;
}

int bfs_srcfile_read(bfs_srcfile *f, void *buf, size_t len, uint64_t off)
{
    if (!bfs_srcfile_present(f, off, len))
        return 0;
    for (size_t got = 0; got < len;) {
        ssize_t n = pread(f->fd, (char *)buf + got, len - got, (off_t)(off + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return 0;
        got += (size_t)n;
    }
    atomic_fetch_add(&st_hits, 1);
    atomic_fetch_add(&st_hit_bytes, len);
    return 1;
}

void bfs_srcfile_write(bfs_srcfile *f, const void *buf, size_t len, uint64_t off)
{
    if (!f || !len || off > f->size || len > f->size - off)
        return;
    uint64_t u = atomic_load(&usage);
    if (u + len > atomic_load(&budget) || atomic_load(&since_count) > RECOUNT_EVERY) {
        pthread_mutex_lock(&lock);
        int fits = count_and_trim(len);
        pthread_mutex_unlock(&lock);
        if (!fits) {
            atomic_fetch_add(&st_full, 1);
            return;
        }
    }
    for (size_t put = 0; put < len;) {
        ssize_t n = pwrite(f->fd, (const char *)buf + put, len - put, (off_t)(off + put));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return; /* a disk full: the range stays a hole or fails its checksum later */
        put += (size_t)n;
    }
    atomic_fetch_add(&usage, len);
    atomic_fetch_add(&since_count, len);
    atomic_fetch_add(&st_stored, 1);
    atomic_fetch_add(&st_stored_bytes, len);
}
