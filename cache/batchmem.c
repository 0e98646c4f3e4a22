/*
 * batchmem.c — the in-memory batch cache's memory: buffers and their pool, read-only batch
 * files, the reaper (see batchcache.h).
 *
 * Why a reaper: evictions happen on the paths readers wait on (an open that moves a reader
 * on, a worker finishing a batch) and under the executor's lock. Releasing there made the
 * first read of each batch after an eviction ~2 ms slower (`make bench` step 2a fell from
 * 0.95 to 0.65 of tmpfs once the passed-batch bound was reached) and held up every other
 * thread.
 */
#include "cache/batchcache.h"
#include "base/check.h"
#include "base/io.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define REAP_COUNT  16          /* the reaper is woken at this many remains, */
#define REAP_BYTES  (64u << 20) /* or this many bytes of them, */
#define REAP_WAIT_S 0.02        /* else it looks this long after the first */

/* A window of the pool file. */
typedef struct span {
    uint64_t off, len;
} span;

/* Memory let go of, for the reaper to release. */
typedef struct remains {
    struct remains *next;
    void *data;
    uint64_t size;
    int fd; /* >= 0: data maps this file; -1: data is a buffer */
} remains;

struct bfs_bc_mem {
    pthread_mutex_t lock; /* guards everything below but hugefs's first setting */
    struct {
        uint8_t *data;
        uint64_t size;
    } pool[BFS_BC_POOL_MAX];
    int npool;
    int out;            /* buffers given out and not back */
    uint64_t out_bytes; /* their bytes (the executor's jobs in buffers hold exactly these) */
    int peak;           /* the most ever out at once */
    uint64_t allocs;
    int hugefs;     /* huge-page tmpfs for batch files; -1: not decided; -2: memfds */
    int huge_tried; /* open_hugefs was called (refused when hugefs is still < 0) */
    remains *dead;
    int ndead;         /* entries in dead */
    uint64_t deadsize; /* their bytes */
    int fds_out;       /* batch files handed to the reaper and not yet closed (in dead, or
                        * taken by the reaper): at most REAP_COUNT */
    pthread_cond_t reap;
    pthread_t reaper;
    int reaper_on, reaper_stop;
    /* the pool file (bfs_bc_use_pool): buffers are windows of one shared mapping */
    int pool_fd;        /* -1: none */
    uint8_t *pool_map;  /* pool_size bytes, read-write */
    uint64_t pool_size; /* a multiple of the page size */
    span *holes;        /* its free windows, by offset, none adjacent */
    int nholes, capholes;
    uint64_t pool_used, pool_misses;
};

/* Unmap and close a batch file, or free a buffer. */
static void release_now(void *data, uint64_t size, int fd)
{
    if (fd >= 0) {
        munmap(data, size);
        close(fd);
    } else {
        free(data);
    }
}

/* Hand memory to the reaper, or release it here when there is none (or no memory for the
 * note). Called with m->lock held. */
static void bury(bfs_bc_mem *m, void *data, uint64_t size, int fd)
{
    /* a batch file is closed here when REAP_COUNT are already on their way: the executor's
     * descriptor budget reserves that many for the reaper (engine/exec.c, fd_budget), and a
     * reaper starved of CPU (a loaded host) let more stay open, so that a new batch file
     * found the descriptor limit reached (check_engine batch_files_within_descriptor_budget
     * failed once so under load) */
    int inline_close = fd >= 0 && m->fds_out >= REAP_COUNT;
    remains *r = m->reaper_on && !m->reaper_stop && !inline_close ? malloc(sizeof *r) : NULL;
    if (!r) {
        release_now(data, size, fd);
        return;
    }
    m->fds_out += fd >= 0;
    r->data = data, r->size = size, r->fd = fd;
    r->next = m->dead;
    m->dead = r;
    m->ndead++;
    m->deadsize += size;
    /* woken for the first and for a handful, not for each: a wake-up per batch file of
     * 512 KiB was one of the ~10 context switches per batch of a token mount. Once awake
     * with remains it waits up to REAP_WAIT_S for more, unless a handful comes sooner. */
    if (m->ndead == 1 || m->ndead >= REAP_COUNT || m->deadsize >= REAP_BYTES)
        pthread_cond_signal(&m->reap);
}

/* The reaper: releases what bury handed it, outside the lock. Until told to stop, and then
 * until nothing is left. */
static void *reaper_main(void *arg)
{
    bfs_bc_mem *m = arg;
    pthread_setname_np(pthread_self(), "bfs-reaper");
    pthread_mutex_lock(&m->lock);
    for (;;) {
        while (!m->dead && !m->reaper_stop)
            pthread_cond_wait(&m->reap, &m->lock);
        if (m->dead && !m->reaper_stop && m->ndead < REAP_COUNT && m->deadsize < REAP_BYTES) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            long ns = ts.tv_nsec + (long)(REAP_WAIT_S * 1e9);
            ts.tv_sec += ns / 1000000000L, ts.tv_nsec = ns % 1000000000L;
            while (!m->reaper_stop && m->ndead < REAP_COUNT && m->deadsize < REAP_BYTES &&
                   pthread_cond_timedwait(&m->reap, &m->lock, &ts) == 0) {
            }
        }
        remains *d = m->dead;
        int ndead = m->ndead;
        uint64_t deadsize = m->deadsize;
        m->dead = NULL;
        m->ndead = 0;
        m->deadsize = 0;
        if (!d)
            break; /* stopping, nothing left */
        pthread_mutex_unlock(&m->lock);
        int fds = 0; /* (counted in fds_out until all of them are closed) */
        while (d) {  /* (the counts held are those of the list: checked on the way) */
            remains *next = d->next;
            BFS_ASSERT(ndead > 0 && deadsize >= d->size);
            ndead--, deadsize -= d->size;
            fds += d->fd >= 0;
            release_now(d->data, d->size, d->fd);
            free(d);
            d = next;
        }
        BFS_ASSERT(ndead == 0 && deadsize == 0);
        pthread_mutex_lock(&m->lock);
        BFS_ASSERT(m->fds_out >= fds);
        m->fds_out -= fds;
    }
    pthread_mutex_unlock(&m->lock);
    return NULL;
}

int bfs_bc_mem_create(bfs_bc_mem **out)
{
    *out = NULL;
    bfs_bc_mem *m = calloc(1, sizeof *m);
    if (!m)
        return -ENOMEM;
    m->hugefs = -1;
    m->pool_fd = -1;
    pthread_mutex_init(&m->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->reap, &ca);
    pthread_condattr_destroy(&ca);
    m->reaper_on = pthread_create(&m->reaper, NULL, reaper_main, m) == 0;
    *out = m;
    return 0;
}

void bfs_bc_mem_destroy(bfs_bc_mem *m)
{
    if (!m)
        return;
    if (m->reaper_on) { /* it releases what it holds, then ends */
        pthread_mutex_lock(&m->lock);
        m->reaper_stop = 1;
        pthread_cond_signal(&m->reap);
        pthread_mutex_unlock(&m->lock);
        pthread_join(m->reaper, NULL);
        BFS_ASSERT(!m->dead && m->ndead == 0 && m->deadsize == 0);
    }
    BFS_ASSERT(m->out == 0 && m->out_bytes == 0); /* every buffer came back */
    for (int i = 0; i < m->npool; i++)
        free(m->pool[i].data);
    if (m->hugefs >= 0)
        close(m->hugefs);
    if (m->pool_fd >= 0) {
        munmap(m->pool_map, m->pool_size);
        close(m->pool_fd);
    }
    free(m->holes);
    pthread_mutex_destroy(&m->lock);
    pthread_cond_destroy(&m->reap);
    free(m);
}

/* ---- the pool file ----------------------------------------------------------------------
 * With bfs_bc_use_pool, batch buffers are windows of one memfd mapped once: a GPU loader
 * maps the file and registers it with the driver once, then copies each batch from its
 * window while its open file holds the batch (docs/gpu.md, "copy=pool"). First fit over
 * the free windows; a batch that finds no room gets a buffer of its own, as without a
 * pool. Windows are page-aligned and never given back to the system. */

#define POOL_PAGE 4096u

/* A window of size bytes (rounded up to pages) off the pool, or NULL. Lock held. */
static uint8_t *pool_take(bfs_bc_mem *m, uint64_t size)
{
    uint64_t len = (size + POOL_PAGE - 1) / POOL_PAGE * POOL_PAGE;
    for (int i = 0; i < m->nholes; i++)
        if (m->holes[i].len >= len) {
            uint64_t off = m->holes[i].off;
            m->holes[i].off += len, m->holes[i].len -= len;
            if (!m->holes[i].len) {
                memmove(m->holes + i, m->holes + i + 1,
                        (size_t)(m->nholes - i - 1) * sizeof *m->holes);
                m->nholes--;
            }
            m->pool_used += len;
            return m->pool_map + off;
        }
    m->pool_misses++;
    return NULL;
}

static int in_pool(const bfs_bc_mem *m, const uint8_t *p)
{
    return m->pool_map && p >= m->pool_map && p < m->pool_map + m->pool_size;
}

/* Give window p of size bytes back, merged with its neighbours. Lock held. 0, or -ENOMEM
 * (no room to note the hole: the window is lost to the pool, not to correctness). */
static int pool_put(bfs_bc_mem *m, const uint8_t *p, uint64_t size)
{
    uint64_t off = (uint64_t)(p - m->pool_map),
             len = (size + POOL_PAGE - 1) / POOL_PAGE * POOL_PAGE;
    BFS_ASSERT(off % POOL_PAGE == 0 && off + len <= m->pool_size && m->pool_used >= len);
    m->pool_used -= len;
    int i = 0;
    while (i < m->nholes && m->holes[i].off < off)
        i++;
    int left = i > 0 && m->holes[i - 1].off + m->holes[i - 1].len == off;
    int right = i < m->nholes && off + len == m->holes[i].off;
    if (left && right) {
        m->holes[i - 1].len += len + m->holes[i].len;
        memmove(m->holes + i, m->holes + i + 1, (size_t)(m->nholes - i - 1) * sizeof *m->holes);
        m->nholes--;
    } else if (left) {
        m->holes[i - 1].len += len;
    } else if (right) {
        m->holes[i].off = off, m->holes[i].len += len;
    } else {
        if (m->nholes == m->capholes) {
            int cap = m->capholes ? 2 * m->capholes : 16;
            span *h = realloc(m->holes, (size_t)cap * sizeof *h);
            if (!h)
                return -ENOMEM;
            m->holes = h, m->capholes = cap;
        }
        memmove(m->holes + i + 1, m->holes + i, (size_t)(m->nholes - i) * sizeof *m->holes);
        m->holes[i].off = off, m->holes[i].len = len;
        m->nholes++;
    }
    return 0;
}

int bfs_bc_use_pool(bfs_bc_mem *m, uint64_t bytes)
{
    bytes = (bytes + POOL_PAGE - 1) / POOL_PAGE * POOL_PAGE;
    if (!bytes)
        return -EINVAL;
    span *h = malloc(16 * sizeof *h);
    if (!h)
        return -ENOMEM;
    int fd = memfd_create("batchfs-pool", MFD_CLOEXEC);
    if (fd < 0) {
        int e = -errno;
        free(h);
        return e;
    }
    void *p = MAP_FAILED;
    int rc = ftruncate(fd, (off_t)bytes) ? -errno : 0;
    if (!rc && (p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
        rc = -errno;
    if (rc) {
        close(fd);
        free(h);
        return rc;
    }
    pthread_mutex_lock(&m->lock);
    BFS_ASSERT(m->pool_fd < 0 && m->out == 0); /* once, before the first buffer */
    m->pool_fd = fd, m->pool_map = p, m->pool_size = bytes;
    m->holes = h, m->capholes = 16, m->nholes = 1;
    h[0].off = 0, h[0].len = bytes;
    pthread_mutex_unlock(&m->lock);
    return 0;
}

int bfs_bc_pool_fd(bfs_bc_mem *m, uint64_t *size)
{
    pthread_mutex_lock(&m->lock);
    int fd = m->pool_fd;
    *size = m->pool_size;
    pthread_mutex_unlock(&m->lock);
    return fd;
}

int bfs_bc_window(const bfs_bc_mem *m, const uint8_t *p, uint64_t *off)
{
    if (!in_pool(m, p)) /* (pool_map never changes once set, before any buffer) */
        return 0;
    *off = (uint64_t)(p - m->pool_map);
    return 1;
}

uint8_t *bfs_bc_alloc(bfs_bc_mem *m, uint64_t size)
{
    pthread_mutex_lock(&m->lock);
    if (m->pool_map) {
        uint8_t *w = pool_take(m, size);
        if (w) {
            m->out++;
            m->out_bytes += size;
            if (m->out > m->peak)
                m->peak = m->out;
            pthread_mutex_unlock(&m->lock);
            return w;
        }
    }
    for (int i = 0; i < m->npool; i++)
        if (m->pool[i].size == size) {
            uint8_t *d = m->pool[i].data;
            m->pool[i] = m->pool[--m->npool];
            m->out++;
            m->out_bytes += size;
            pthread_mutex_unlock(&m->lock);
            return d;
        }
    pthread_mutex_unlock(&m->lock);
    void *d = NULL;
    size_t align = size >= (2u << 20) ? (2u << 20) : 4096;
    if (posix_memalign(&d, align, size))
        return NULL;
    if (align > 4096)
        madvise(d, size, MADV_HUGEPAGE);
    pthread_mutex_lock(&m->lock);
    m->allocs++;
    m->out_bytes += size;
    if (++m->out > m->peak)
        m->peak = m->out;
    pthread_mutex_unlock(&m->lock);
    return d;
}

void bfs_bc_free(bfs_bc_mem *m, uint8_t *buf, uint64_t size, uint64_t room)
{
    if (!buf)
        return;
    pthread_mutex_lock(&m->lock);
    BFS_ASSERT(m->out > 0 && m->out_bytes >= size); /* given out, at that size */
    m->out--;
    m->out_bytes -= size;
    if (in_pool(m, buf)) {
        pool_put(m, buf, size);
        pthread_mutex_unlock(&m->lock);
        return;
    }
    uint64_t pooled = 0;
    for (int i = 0; i < m->npool; i++)
        pooled += m->pool[i].size;
    int keep = m->npool < 2 ||
               (m->npool < BFS_BC_POOL_MAX && m->out + m->npool < m->peak && pooled + size <= room);
    if (keep) {
        m->pool[m->npool].data = buf;
        m->pool[m->npool++].size = size;
        BFS_ASSERT(m->npool <= BFS_BC_POOL_MAX);
    } else {
        bury(m, buf, size, -1);
    }
    pthread_mutex_unlock(&m->lock);
}

void bfs_bc_trim(bfs_bc_mem *m, uint64_t room)
{
    pthread_mutex_lock(&m->lock);
    uint64_t pooled = 0;
    for (int i = 0; i < m->npool; i++)
        pooled += m->pool[i].size;
    while (m->npool > 2 && pooled > room) {
        m->npool--;
        pooled -= m->pool[m->npool].size;
        bury(m, m->pool[m->npool].data, m->pool[m->npool].size, -1);
    }
    pthread_mutex_unlock(&m->lock);
}

void bfs_bc_release(bfs_bc_mem *m, const uint8_t *map, uint64_t size, int fd)
{
    pthread_mutex_lock(&m->lock);
    bury(m, (void *)map, size, fd);
    pthread_mutex_unlock(&m->lock);
}

/*
 * Batch files on huge pages. Reading a 38 MB batch from 4 KiB shmem pages costs ~9,000
 * page-cache lookups and as many TLB entries: `cat` of batch files on 2 MiB pages ran
 * 1.5-2.3x faster than of copies on /dev/shm, and a batch file on recycled huge pages is
 * written in 2 ms instead of 13 (docs/engine.md, "Batch memory"). memfds follow the host's
 * shmem_enabled policy, usually `never`, so this makes a tmpfs of its own with
 * huge=within_size: a detached mount (fsopen + fsmount: in no directory, gone with its last
 * file) holding anonymous O_TMPFILE files. Needs CAP_SYS_ADMIN, as FUSE passthrough does;
 * without it, memfds. Not the default: fresh huge pages are as dear as fresh small ones, but
 * small ones are often left over by other programs.
 */
static int open_hugefs(void)
{
    int fc = (int)syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC);
    if (fc < 0)
        return -1;
    int mnt = -1;
    /* size: the cache budget bounds the bytes; tmpfs's default cap (half of RAM) would
     * turn a large budget into ENOSPC, so the cap is all of RAM */
    if (syscall(SYS_fsconfig, fc, FSCONFIG_SET_STRING, "huge", "within_size", 0) == 0 &&
        syscall(SYS_fsconfig, fc, FSCONFIG_SET_STRING, "size", "100%", 0) == 0 &&
        syscall(SYS_fsconfig, fc, FSCONFIG_SET_STRING, "mode", "0700", 0) == 0 &&
        syscall(SYS_fsconfig, fc, FSCONFIG_CMD_CREATE, NULL, NULL, 0) == 0)
        mnt = (int)syscall(SYS_fsmount, fc, FSMOUNT_CLOEXEC,
                           MOUNT_ATTR_NOEXEC | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
    close(fc);
    return mnt;
}

int bfs_bc_use_files(bfs_bc_mem *m, int huge)
{
    if (huge)
        return bfs_bc_use_huge(m);
    pthread_mutex_lock(&m->lock);
    if (m->hugefs == -1)
        m->hugefs = -2; /* memfds */
    int on = m->hugefs >= 0;
    pthread_mutex_unlock(&m->lock);
    return on;
}

int bfs_bc_use_huge(bfs_bc_mem *m)
{
    pthread_mutex_lock(&m->lock);
    if (m->hugefs < 0 && !m->huge_tried) {
        m->huge_tried = 1;
        int fd = open_hugefs();
        m->hugefs = fd >= 0 ? fd : -2; /* refused: memfds */
    }
    int on = m->hugefs >= 0;
    pthread_mutex_unlock(&m->lock);
    return on;
}

/* A new, empty file for a batch of size bytes, open for writing: on the huge-page tmpfs
 * (sized first, so that within_size gives every whole 2 MiB of it a huge page), else a
 * memfd that can be sealed. -1 on failure. */
static int file_create(int hugefs, uint64_t size, int *sealable)
{
    if (hugefs >= 0) {
        int fd = openat(hugefs, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (fd >= 0 && ftruncate(fd, (off_t)size) == 0) {
            *sealable = 0;
            return fd;
        }
        if (fd >= 0)
            close(fd);
    }
    *sealable = 1;
    return memfd_create("batchfs-batch", MFD_CLOEXEC | MFD_ALLOW_SEALING);
}

/* Make the written file fd read-only: seal a memfd (no one can write it again); reopen a
 * tmpfs file read-only (through /proc/self/fd) so that the daemon keeps no descriptor that
 * can write it (unlike a seal, this does not stop a root process from reopening it for
 * writing through /proc/PID/fd). Returns the descriptor to keep (fd itself, or the
 * read-only one), or -1. */
static int file_freeze(int fd, int sealable)
{
    if (sealable)
        return fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL)
                   ? -1
                   : fd;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    int ro = open(path, O_RDONLY | O_CLOEXEC);
    if (ro < 0)
        return fd; /* no /proc: the daemon holds the only writable descriptor, unused */
    close(fd);
    return ro;
}

int bfs_bc_file_open(bfs_bc_mem *m, uint64_t size, int *sealable)
{
    pthread_mutex_lock(&m->lock);
    int hugefs = m->hugefs;
    pthread_mutex_unlock(&m->lock);
    int f = file_create(hugefs, size, sealable);
    return f < 0 ? -errno : f;
}

int bfs_bc_file_seal(bfs_bc_mem *m, int fd, int sealable, uint64_t size, const uint8_t **map,
                     int *fd_out)
{
    (void)m;
    int rc = 0;
    void *p = MAP_FAILED;
    int kept = file_freeze(fd, sealable);
    if (kept < 0) {
        rc = -errno;
    } else {
        fd = kept;
        p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED)
            rc = -errno;
    }
    if (p == MAP_FAILED) {
        close(fd);
        return rc ? rc : -EIO;
    }
    *map = p;
    *fd_out = fd;
    return 0;
}

int bfs_bc_to_file(bfs_bc_mem *m, const uint8_t *src, uint64_t size, const uint8_t **map, int *fd)
{
    int sealable = 1;
    int f = bfs_bc_file_open(m, size, &sealable);
    if (f < 0)
        return f;
    int rc = bfs_write_all(f, src, size);
    if (rc) {
        close(f);
        return rc;
    }
    return bfs_bc_file_seal(m, f, sealable, size, map, fd);
}

void bfs_bc_mem_get_stats(bfs_bc_mem *m, bfs_bc_mem_stats *st)
{
    pthread_mutex_lock(&m->lock);
    st->buffers = m->out + m->npool;
    st->buffer_bytes_out = m->out_bytes;
    st->buffer_allocs = m->allocs;
    st->huge_files = m->hugefs >= 0;
    st->pool_bytes = m->pool_size;
    st->pool_used = m->pool_used;
    st->pool_misses = m->pool_misses;
    pthread_mutex_unlock(&m->lock);
}
