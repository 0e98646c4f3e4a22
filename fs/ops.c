/*
 * ops.c — the FUSE operations of the mount (fs.c's header comment tells how they serve
 * the engine's batches; fs_internal.h the files of fs/).
 */
#include "fs/fs_internal.h"
#include "fs/names.h"
#include "base/check.h"
#include "base/err.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/fuse.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static fsstate *state(fuse_req_t req)
{
    return fuse_req_userdata(req);
}

/* ---- names and inodes ------------------------------------------------------------- */

/* The tree's shape, for the name and inode functions of fs/names.h. */
static fsn_tree tree_of(const fsstate *fs)
{
    fsn_tree t = {.epochs = fs->epochs,
                  .batches = fs->batches,
                  .next = fs->group,
                  .pool = atomic_load(&fs->pool_on)};
    /* every inode number fits: epochs= is at most 1e6, and no dataset has the ~1.8e13
     * batches per epoch that would overflow them then */
    BFS_ASSERT(fsn_tree_valid(&t));
    return t;
}

static int classify(const fsstate *fs, fuse_ino_t ino, uint64_t *epoch, uint64_t *k)
{
    fsn_tree t = tree_of(fs);
    return fsn_classify(&t, ino, epoch, k);
}

static int fill_attr(fsstate *fs, fuse_ino_t ino, struct stat *st)
{
    uint64_t epoch = 0, k = 0;
    int kind = classify(fs, ino, &epoch, &k);
    memset(st, 0, sizeof *st);
    st->st_ino = ino;
    st->st_uid = fs->uid;
    st->st_gid = fs->gid;
    st->st_atim = st->st_mtim = st->st_ctim = fs->mtime;
    /* the I/O size tools like cat and cp pick: 1 MiB reads mean fewer FUSE round trips in
     * copying mode; with passthrough the kernel reads the batch file itself, and 128 KiB
     * buffers stay in L2 (1 MiB ones made `cat` ~6% slower than from tmpfs); with a pool
     * file (gpu_pool_mb=) batches are copied: 128 KiB reads cost a token mount 1.5 s of
     * daemon CPU per GB against 0.9 */
    st->st_blksize =
        atomic_load(&fs->pt_active) && !atomic_load(&fs->pool_on) ? 128 << 10 : 1 << 20;
    switch (kind) {
    case FSN_ROOT:
    case FSN_EPOCHS:
    case FSN_EPOCH:
        st->st_mode = S_IFDIR | 0555;
        st->st_nlink = 2;
        break;
    case FSN_PIPELINE:
        st->st_mode = S_IFREG | 0444;
        st->st_nlink = 1;
        st->st_size = (off_t)fs->pipeline_len;
        break;
    case FSN_STATS:
    case FSN_NEXT:
        /* size 0: read with direct I/O, content is live (next: another batch per open) */
        st->st_mode = S_IFREG | 0444;
        st->st_nlink = 1;
        break;
    case FSN_BATCH:
        st->st_mode = S_IFREG | 0444;
        st->st_nlink = 1;
        st->st_size = (off_t)bfs_service_batch_bytes(fs->svc, epoch, k);
        break;
    case FSN_POOL: {
        uint64_t size;
        bfs_service_pool(fs->svc, &size);
        st->st_mode = S_IFREG | 0444;
        st->st_nlink = 1;
        st->st_size = (off_t)size;
        break;
    }
    default:
        return -ENOENT;
    }
    st->st_blocks = (st->st_size + 511) / 512;
    return 0;
}

/* /stats and epoch/N/next: content that changes, attributes never cached. */
static int is_live(const fsstate *fs, fuse_ino_t ino)
{
    uint64_t epoch = 0, k = 0;
    int kind = classify(fs, ino, &epoch, &k);
    return kind == FSN_STATS || kind == FSN_NEXT;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    fsstate *fs = state(req);
    fsn_tree t = tree_of(fs);
    uint64_t ino;
    if (fsn_lookup(&t, parent, name, &ino)) {
        fuse_reply_err(req, ENOTDIR);
        return;
    }
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    if (!ino) { /* a negative entry, cached as long: the tree never changes */
        e.entry_timeout = TIMEOUT;
        fuse_reply_entry(req, &e);
        return;
    }
    fill_attr(fs, ino, &e.attr);
    e.ino = ino;
    e.attr_timeout = e.entry_timeout = is_live(fs, ino) ? 0 : TIMEOUT;
    fuse_reply_entry(req, &e);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)fi;
    struct stat st;
    if (fill_attr(state(req), ino, &st))
        fuse_reply_err(req, ENOENT);
    else
        fuse_reply_attr(req, &st, is_live(state(req), ino) ? 0 : TIMEOUT);
}

/* Directories never change (the plan fixes every name): the kernel may keep what readdir
 * returned in its page cache and answer later listings itself (`ls`, shell globs: ~120 us
 * of round trips per listing without it). */
static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    uint64_t epoch = 0, k = 0;
    int kind = classify(state(req), ino, &epoch, &k);
    if (kind == FSN_NONE) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    if (kind != FSN_ROOT && kind != FSN_EPOCHS && kind != FSN_EPOCH) {
        fuse_reply_err(req, ENOTDIR);
        return;
    }
    if ((fi->flags & O_ACCMODE) != O_RDONLY) {
        fuse_reply_err(req, EISDIR);
        return;
    }
    fi->cache_readdir = 1;
    fi->keep_cache = 1;
    fuse_reply_open(req, fi);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
    (void)fi;
    fsstate *fs = state(req);
    fsn_tree t = tree_of(fs);
    uint64_t count = fsn_dir_count(&t, ino);
    if (!count) {
        fuse_reply_err(req, ENOTDIR);
        return;
    }
    char *buf = malloc(size);
    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    size_t used = 0;
    fsn_entry de;
    for (uint64_t i = (uint64_t)off; i < count && !fsn_dirent(&t, ino, i, &de); i++) {
        struct stat st = {0};
        st.st_ino = de.ino;
        st.st_mode = de.is_dir ? S_IFDIR : S_IFREG;
        size_t n = fuse_add_direntry(req, buf + used, size - used, de.name, &st, (off_t)(i + 1));
        if (n > size - used)
            break;
        used += n;
    }
    fuse_reply_buf(req, buf, used);
    free(buf);
}

/* ---- /stats ------------------------------------------------------------------------ */

/* The /stats document now (the service's writer, with this mount's counters), into of. */
static void stats_text(fsstate *fs, openfile *of)
{
    bfs_service_front f = {.served = atomic_load(&fs->served),
                           .opened = atomic_load(&fs->opened),
                           .opened_bytes = atomic_load(&fs->opened_bytes),
                           .reads = atomic_load(&fs->reads),
                           .bytes = atomic_load(&fs->bytes_served),
                           .read_errors = atomic_load(&fs->read_errors),
                           .interrupted = atomic_load(&fs->interrupted),
                           .claims_served = atomic_load(&fs->claims_served),
                           .pt_active = atomic_load(&fs->pt_active),
                           .pt_opens = atomic_load(&fs->pt_opens),
                           .pool_on = atomic_load(&fs->pool_on),
                           .windows = atomic_load(&fs->windows)};
    pthread_mutex_lock(&fs->lock);
    for (backing *b = fs->backings; b; b = b->next) /* batches: not /.pool's (no batch's key) */
        f.backing_files += b->id > 0 && !(b->epoch == UINT64_MAX && b->k == UINT64_MAX);
    pthread_mutex_unlock(&fs->lock);
    bfs_service_stats(fs->svc, &f, &of->text, &of->text_len);
}

/* ---- open, read, release ------------------------------------------------------------ */

/*
 * The kernel caps a FUSE mount's readahead at its bdi's read_ahead_kb (128 KiB), so batch
 * reads reach the daemon as 128 KiB requests: ~300 round trips per 38 MB batch, the main
 * cost of serving cached batches. Raising it to 1 MiB (only root may) makes them 1 MiB
 * requests (measured: dd from the daemon cache 1.0-1.9 -> 1.5-2.7 GB/s). The device
 * number comes from /proc/self/mountinfo: stat() of our own mountpoint from a request
 * handler would deadlock a single-threaded loop. Best effort, once, after INIT.
 */
static void raise_readahead(fsstate *fs)
{
    if (atomic_exchange(&fs->readahead_done, 1))
        return;
    FILE *f = fopen("/proc/self/mountinfo", "r");
    char line[8192];
    unsigned maj = 0, min = 0;
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f)) {
        char mnt[4096];
        unsigned a, b;
        if (sscanf(line, "%*s %*s %u:%u %*s %4095s", &a, &b, mnt) == 3 &&
            !strcmp(mnt, fs->args->mountpoint))
            maj = a, min = b, found = 1;
    }
    if (f)
        fclose(f);
    char path[128];
    snprintf(path, sizeof path, "/sys/class/bdi/%u:%u/read_ahead_kb", maj, min);
    FILE *ra = found ? fopen(path, "w") : NULL;
    if (ra) {
        fprintf(ra, "1024\n");
        fclose(ra);
    }
}

/* Unlink an open file from the list, drop its batch reference, free it. */
void fso_forget_file(fsstate *fs, openfile *of)
{
    pthread_mutex_lock(&fs->lock);
    if (of->prev)
        of->prev->next = of->next;
    else
        fs->open_files = of->next;
    if (of->next)
        of->next->prev = of->prev;
    pthread_mutex_unlock(&fs->lock);
    if (of->backed)
        fsp_backing_release(fs, of->epoch, of->k);
    bfs_batch_release(of->b);
    free(of->text);
    free(of);
}

/* FUSE INTERRUPT of a request waiting in take_batch (the reader got a signal, kill -9
 * included): libfuse calls this from the thread that read the INTERRUPT. */
typedef struct interrupt_ctx {
    fsstate *fs;
    bfs_exec_cancel cancel;
} interrupt_ctx;

static void on_interrupt(fuse_req_t req, void *data)
{
    (void)req;
    interrupt_ctx *c = data;
    bfs_service_cancel_wait(c->fs->svc, &c->cancel);
}

/* Make of hold its batch (computed now if needed; single-flight) and tell prefetch that
 * reader pid started it. Returns 0 or the errno to reply (EIO, ENOMEM, EINTR when the
 * kernel interrupted req: the reader was signalled, and a killed reader would otherwise
 * wait in D state until the batch is done, forever on a hung source). Blocks: the caller
 * disables cancellation. */
static int take_batch(fsstate *fs, openfile *of, fuse_req_t req)
{
    char err[600];
    bfs_batch *b;
    interrupt_ctx ic = {.fs = fs};
    /* runs on_interrupt at once when the INTERRUPT came first */
    fuse_req_interrupt_func(req, on_interrupt, &ic);
    /* as reader pid: its next batches are queued while this one is computed */
    int rc = bfs_service_get_as(fs->svc, (uint64_t)fuse_req_ctx(req)->pid, of->epoch, of->k,
                                &ic.cancel, &b, err, sizeof err);
    /* after this no on_interrupt runs or is running (libfuse serializes both on the
     * request's lock), so ic may go */
    fuse_req_interrupt_func(req, NULL, NULL);
    if (rc == -EINTR) {
        atomic_fetch_add(&fs->interrupted, 1);
        return bfs_err_to_errno(rc);
    }
    if (rc) {
        if (rc != -ESHUTDOWN && rc > BFS_E_LAST) /* engine logs bad samples once */
            fprintf(stderr, "batchfs: epoch %llu batch %llu: %s\n", (unsigned long long)of->epoch,
                    (unsigned long long)of->k, err);
        atomic_fetch_add(&fs->read_errors, 1);
        return bfs_err_to_errno(rc);
    }
    /* two reads of one open file may race here: keep one reference */
    if (__atomic_exchange_n(&of->b, b, __ATOMIC_ACQ_REL))
        bfs_batch_release(b);
    else
        atomic_fetch_add(&fs->served, 1);
    return 0;
}

/*
 * An open of epoch/N/next: claim the group's next batch of epoch N, compute it (blocks: the
 * caller disables cancellation) and make `of` hold it. Returns 0, ENODATA when the group
 * has claimed every batch of the epoch, EINTR when the kernel interrupted req while the
 * batch was computed (the opener got a signal: as for batch_K, a killed opener would
 * otherwise wait in D state, forever on a hung source; the claim is returned untried, so
 * the batch is handed out again and never lost for it), or the errno of the failed batch
 * (its claim is given back, to be served by a later open: engine/claims.h).
 */
static int claim_batch(fsstate *fs, openfile *of, fuse_req_t req, uint64_t epoch)
{
    bfs_group_claim c;
    char err[600];
    /* (the service takes claims ahead to the prefetch depth: bfs_service_next_claim) */
    int rc = bfs_service_next_claim(fs->svc, epoch, &c);
    if (rc)
        return rc == -ENODATA ? ENODATA : bfs_err_to_errno(rc);
    bfs_batch *b;
    interrupt_ctx ic = {.fs = fs};
    fuse_req_interrupt_func(req, on_interrupt, &ic); /* (see take_batch) */
    rc = bfs_service_get_cancel(fs->svc, c.epoch, c.batch, &ic.cancel, &b, err, sizeof err);
    fuse_req_interrupt_func(req, NULL, NULL);
    if (rc == -EINTR) {
        bfs_service_claim_return(fs->svc, &c);
        atomic_fetch_add(&fs->interrupted, 1);
        return EINTR;
    }
    if (rc) {
        bfs_service_claim_give_back(fs->svc, &c);
        if (rc != -ESHUTDOWN && rc > BFS_E_LAST) /* engine logs bad samples once */
            fprintf(stderr, "batchfs: epoch %llu batch %llu (next): %s\n",
                    (unsigned long long)c.epoch, (unsigned long long)c.batch, err);
        atomic_fetch_add(&fs->read_errors, 1);
        return bfs_err_to_errno(rc);
    }
    of->b = b, of->epoch = c.epoch, of->k = c.batch;
    of->is_next = 1, of->pid = (uint64_t)fuse_req_ctx(req)->pid, of->claim = c;
    atomic_fetch_add(&fs->served, 1);
    atomic_fetch_add(&fs->claims_served, 1);
    return 0;
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    fsstate *fs = state(req);
    uint64_t epoch = 0, k = 0;
    int kind = classify(fs, ino, &epoch, &k);
    if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
        fuse_reply_err(req, EROFS);
        return;
    }
    if (kind == FSN_ROOT || kind == FSN_EPOCHS || kind == FSN_EPOCH) {
        fuse_reply_err(req, EISDIR);
        return;
    }
    if (kind == FSN_NONE) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    raise_readahead(fs);
    openfile *of = calloc(1, sizeof *of);
    if (!of) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    of->epoch = epoch, of->k = k;
    of->pid = (uint64_t)fuse_req_ctx(req)->pid; /* (names its window: user.batchfs.window) */
    fi->keep_cache = 1;                         /* batches and /pipeline never change */
    if (kind == FSN_POOL) {
        /* the pool file as its backing file: a loader's mmap maps the daemon's own pages
         * (served only under passthrough: a copy would share nothing) */
        uint64_t size;
        int pfd = bfs_service_pool(fs->svc, &size);
        of->epoch = of->k = UINT64_MAX; /* (its backing's key: no batch has it) */
        int id = pfd >= 0 ? fsp_backing_acquire(fs, UINT64_MAX, UINT64_MAX, pfd) : -1;
        if (id <= 0) {
            if (id == 0)
                fsp_backing_release(fs, UINT64_MAX, UINT64_MAX);
            free(of);
            fuse_reply_err(req, id < 0 ? ENOMEM : EOPNOTSUPP);
            return;
        }
        of->backed = 1;
        fi->keep_cache = 0;
        fsp_open_reply((uint64_t)(uintptr_t)of, id);
    } else if (kind == FSN_STATS) {
        stats_text(fs, of);
        fi->keep_cache = 0;
        fi->direct_io = 1; /* live content: size unknown in advance, never cached */
    } else if (kind == FSN_NEXT) {
        /* copying mode even under passthrough: the kernel allows one backing file per
         * inode, and each open of next is another batch */
        int old;
        pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
        int rc = claim_batch(fs, of, req, epoch);
        pthread_setcancelstate(old, NULL);
        if (rc) {
            free(of);
            fuse_reply_err(req, rc);
            return;
        }
        fi->keep_cache = 0;
        fi->direct_io = 1; /* another batch per open: no page cache, size 0 (fill_attr) */
    } else if (kind == FSN_BATCH && atomic_load(&fs->pt_active)) {
        /* passthrough: the batch now, and its file as the batch file's backing file */
        int old, rc;
        pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
        rc = take_batch(fs, of, req);
        pthread_setcancelstate(old, NULL);
        int id = rc ? -1 : fsp_backing_acquire(fs, epoch, k, bfs_batch_fd(of->b));
        if (rc || id < 0) {
            bfs_batch_release(of->b);
            free(of);
            fuse_reply_err(req, rc ? rc : ENOMEM);
            return;
        }
        of->backed = 1;
        if (id > 0) { /* FOPEN_PASSTHROUGH allows no keep_cache: there is no page cache */
            fi->keep_cache = 0;
            fsp_open_reply((uint64_t)(uintptr_t)of, id);
            atomic_fetch_add(&fs->pt_opens, 1);
        }
    }
    fi->fh = (uint64_t)(uintptr_t)of;
    pthread_mutex_lock(&fs->lock);
    of->next = fs->open_files;
    if (of->next)
        of->next->prev = of;
    fs->open_files = of;
    pthread_mutex_unlock(&fs->lock);
    /* (the size before the reply: once it is out, a RELEASE may free `of`) */
    uint64_t size = kind == FSN_NEXT    ? bfs_batch_size(of->b)
                    : kind == FSN_BATCH ? bfs_service_batch_bytes(fs->svc, epoch, k)
                                        : 0;
    int rc = fuse_reply_open(req, fi);
    fsp_open_reply(0, 0);
    if (rc == -ENOENT) { /* interrupted: the kernel won't release */
        if (of->is_next) /* (nobody got the batch) */
            bfs_service_claim_return(fs->svc, &of->claim);
        fso_forget_file(fs, of);
    } else if (kind == FSN_NEXT || kind == FSN_BATCH) {
        /* what readers are handed, however its bytes then go (passthrough, page cache) */
        atomic_fetch_add(&fs->opened, 1);
        atomic_fetch_add(&fs->opened_bytes, size);
    }
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    fsstate *fs = state(req);
    openfile *of = (openfile *)(uintptr_t)fi->fh;
    atomic_fetch_add(&fs->reads, 1);
    const uint8_t *data;
    uint64_t len;
    bfs_batch *held = NULL; /* the batch this read holds until its reply is out */
    if (ino == FSN_INO_PIPELINE) {
        data = (const uint8_t *)fs->pipeline, len = fs->pipeline_len;
    } else if (ino == FSN_INO_STATS) {
        data = (const uint8_t *)of->text, len = of->text_len;
    } else if (ino == FSN_INO_POOL) { /* (passthrough reads it: never here) */
        fuse_reply_err(req, EIO);
        return;
    } else {
        int old;
        pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
        /* (another read of this open file may be setting of->b: take_batch) */
        int rc = __atomic_load_n(&of->b, __ATOMIC_ACQUIRE) ? 0 : take_batch(fs, of, req);
        if (rc) {
            fuse_reply_err(req, rc);
            pthread_setcancelstate(old, NULL);
            return;
        }
        bfs_batch *b = __atomic_load_n(&of->b, __ATOMIC_ACQUIRE);
        data = bfs_batch_data(b), len = bfs_batch_size(b);
        /* a buffer (copying mode; a gpu_pool_mb= window) is reused once its batch is
         * evicted, and the open file's reference may go (RELEASE, on another thread) while
         * the reply below is still being written from it: this read holds the batch
         * itself until the reply is out */
        if (bfs_batch_fd(b) < 0)
            bfs_batch_retain(held = b);
        pthread_setcancelstate(old, NULL);
    }
    if (off < 0 || (uint64_t)off >= len) {
        fuse_reply_buf(req, NULL, 0);
        bfs_batch_release(held);
        return;
    }
    size_t n = fsn_read_span(len, off, size);
    atomic_fetch_add(&fs->bytes_served, n);
    /* decide before replying: once the reply is out, the file may be released (and `of`
     * freed) by another thread; the batch itself stays referenced until then */
    int consumed = of && __atomic_load_n(&of->b, __ATOMIC_ACQUIRE) &&
                   __atomic_add_fetch(&of->served, n, __ATOMIC_RELAXED) >= len;
    uint64_t epoch = of ? of->epoch : 0, k = of ? of->k : 0;
    if (consumed)
        bfs_service_consumed(fs->svc, epoch, k);
    if (ino == FSN_INO_STATS) {
        /* the snapshot belongs to the open file, which a RELEASE may free the moment the
         * reply is out (ASan's writev interceptor reads the iovec after the call, so it
         * saw a use-after-free): reply from a copy this thread owns */
        char *copy = malloc(n ? n : 1);
        if (!copy) {
            fuse_reply_err(req, ENOMEM);
            return;
        }
        memcpy(copy, data + off, n);
        fuse_reply_buf(req, copy, n);
        free(copy);
        return;
    }
    fuse_reply_buf(req, (const char *)data + off, n);
    bfs_batch_release(held);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    openfile *of = (openfile *)(uintptr_t)fi->fh;
    if (of)
        fso_forget_file(state(req), of);
    fuse_reply_err(req, 0);
}

/* ---- extended attributes ------------------------------------------------------------ */

static void reply_xattr(fuse_req_t req, const char *value, size_t len, size_t size)
{
    if (size == 0)
        fuse_reply_xattr(req, len);
    else if (size < len)
        fuse_reply_err(req, ERANGE);
    else
        fuse_reply_buf(req, value, len);
}

/*
 * user.batchfs.window of batch (epoch, k): "OFFSET SIZE", where its bytes lie in /.pool,
 * for a caller that has the batch file (next: an epoch/N/next that served it) open (the
 * newest of its opens of it): the open file holds the batch (taken at open: the pool is
 * served only under passthrough; a next file's at its claim), so the window is not reused
 * until that file is closed (the loader's lease, docs/gpu.md).
 * ENODATA: no pool, no open file of the caller's, or the batch found no window free.
 */
static void window_xattr(fuse_req_t req, fsstate *fs, uint64_t epoch, uint64_t k, int next,
                         size_t size)
{
    uint64_t pid = (uint64_t)fuse_req_ctx(req)->pid, off = 0, len = 0;
    int found = 0;
    pthread_mutex_lock(&fs->lock); /* (no RELEASE frees a file meanwhile) */
    for (openfile *o = fs->open_files; o && atomic_load(&fs->pool_on); o = o->next) {
        const bfs_batch *b = __atomic_load_n(&o->b, __ATOMIC_ACQUIRE);
        if (o->is_next == next && o->pid == pid && o->epoch == epoch && o->k == k && b) {
            found = bfs_service_batch_window(fs->svc, b, &off);
            len = bfs_batch_size(b);
            break;
        }
    }
    pthread_mutex_unlock(&fs->lock);
    if (!found) {
        fuse_reply_err(req, ENODATA);
        return;
    }
    char v[64];
    int n = snprintf(v, sizeof v, "%llu %llu", (unsigned long long)off, (unsigned long long)len);
    atomic_fetch_add(&fs->windows, 1);
    reply_xattr(req, v, (size_t)n, size);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
    fsstate *fs = state(req);
    uint64_t epoch = 0, k = 0;
    int kind = classify(fs, ino, &epoch, &k);
    char v[64];
    int n = -1, next = kind == FSN_NEXT;
    if (next) {
        /* the batch of the newest next file of this epoch the caller has open (the list
         * starts with the newest), as if the file were that batch_K */
        uint64_t pid = (uint64_t)fuse_req_ctx(req)->pid;
        kind = FSN_NONE;
        pthread_mutex_lock(&fs->lock);
        for (openfile *of = fs->open_files; of; of = of->next)
            if (of->is_next && of->pid == pid && of->epoch == epoch) {
                kind = FSN_BATCH, k = of->k;
                break;
            }
        pthread_mutex_unlock(&fs->lock);
    }
    if (kind == FSN_BATCH && !strcmp(name, "user.batchfs.window")) {
        window_xattr(req, fs, epoch, k, next, size);
        return;
    }
    if (kind == FSN_ROOT && !strcmp(name, "user.batchfs.fingerprint"))
        n = snprintf(v, sizeof v, "%016llx", (unsigned long long)bfs_service_fingerprint(fs->svc));
    else if (kind == FSN_ROOT && !strcmp(name, "user.batchfs.pool") && atomic_load(&fs->pool_on)) {
        uint64_t psize;
        bfs_service_pool(fs->svc, &psize);
        n = snprintf(v, sizeof v, "%llu", (unsigned long long)psize);
    } else if (kind == FSN_BATCH && !strcmp(name, "user.batchfs.epoch"))
        n = snprintf(v, sizeof v, "%llu", (unsigned long long)epoch);
    else if (kind == FSN_BATCH && !strcmp(name, "user.batchfs.batch"))
        n = snprintf(v, sizeof v, "%llu", (unsigned long long)k);
    else if (kind == FSN_BATCH && !strcmp(name, "user.batchfs.samples"))
        n = snprintf(v, sizeof v, "%u", bfs_service_batch_len(fs->svc, epoch, k));
    if (n < 0)
        fuse_reply_err(req, ENODATA);
    else
        reply_xattr(req, v, (size_t)n, size);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
    fsstate *fs = state(req);
    uint64_t epoch = 0, k = 0;
    int kind = classify(fs, ino, &epoch, &k);
    static const char root[] = "user.batchfs.fingerprint";
    static const char root_pool[] = "user.batchfs.fingerprint\0user.batchfs.pool";
    static const char batch[] = "user.batchfs.epoch\0user.batchfs.batch\0user.batchfs.samples";
    /* (the window is listed while a pool is served; its value needs the caller's open
     * file, ENODATA without one, as getxattr says) */
    static const char batch_pool[] = "user.batchfs.epoch\0user.batchfs.batch\0"
                                     "user.batchfs.samples\0user.batchfs.window";
    int pool = atomic_load(&fs->pool_on);
    if (kind == FSN_ROOT && pool)
        reply_xattr(req, root_pool, sizeof root_pool, size);
    else if (kind == FSN_ROOT)
        reply_xattr(req, root, sizeof root, size);
    else if ((kind == FSN_BATCH || kind == FSN_NEXT) && pool)
        reply_xattr(req, batch_pool, sizeof batch_pool, size);
    else if (kind == FSN_BATCH || kind == FSN_NEXT)
        reply_xattr(req, batch, sizeof batch, size);
    else
        reply_xattr(req, "", 0, size);
}

/* ---- read-only ---------------------------------------------------------------------- */

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *a, int set,
                       struct fuse_file_info *fi)
{
    (void)ino, (void)a, (void)set, (void)fi;
    fuse_reply_err(req, EROFS);
}
static void op_mknod(fuse_req_t req, fuse_ino_t p, const char *n, mode_t m, dev_t d)
{
    (void)p, (void)n, (void)m, (void)d;
    fuse_reply_err(req, EROFS);
}
static void op_mkdir(fuse_req_t req, fuse_ino_t p, const char *n, mode_t m)
{
    (void)p, (void)n, (void)m;
    fuse_reply_err(req, EROFS);
}
static void op_unlink(fuse_req_t req, fuse_ino_t p, const char *n)
{
    (void)p, (void)n;
    fuse_reply_err(req, EROFS);
}
static void op_rename(fuse_req_t req, fuse_ino_t p, const char *n, fuse_ino_t np, const char *nn,
                      unsigned int f)
{
    (void)p, (void)n, (void)np, (void)nn, (void)f;
    fuse_reply_err(req, EROFS);
}
static void op_create(fuse_req_t req, fuse_ino_t p, const char *n, mode_t m,
                      struct fuse_file_info *fi)
{
    (void)p, (void)n, (void)m, (void)fi;
    fuse_reply_err(req, EROFS);
}
static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *n, const char *v, size_t s,
                        int f)
{
    (void)ino, (void)n, (void)v, (void)s, (void)f;
    fuse_reply_err(req, EROFS);
}
static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *n)
{
    (void)ino, (void)n;
    fuse_reply_err(req, EROFS);
}

/* The value of -o max_read=N among the FUSE options (comma-separated), or 0. */
static unsigned max_read_opt(const char *opts)
{
    unsigned v = 0;
    for (const char *p = opts; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (!strncmp(p, "max_read=", 9))
            v = (unsigned)strtoul(p + 9, NULL, 10); /* the last one counts, as for libfuse */
    return v;
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
    fsstate *fs = userdata;
    /* libfuse 3.14 ends the session unless init() repeats the max_read mount option */
    conn->max_read = max_read_opt(fs->args->fuse_opts);
    conn->max_readahead = 1 << 20;           /* 1 MiB requests, as batches are read whole */
    conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA; /* files never change: no invalidation */
    /* passthrough excludes the writeback cache (never wanted: the mount is read-only) */
    if (fs->args->passthrough && atomic_load(&fs->pt_offered) && fsp_has_sys_admin() &&
        !(conn->want & FUSE_CAP_WRITEBACK_CACHE)) {
        atomic_store(&fs->pt_active, 1);     /* io_writev patches this INIT's reply */
        bfs_service_batch_files(fs->svc, 1); /* (on huge pages per huge_pages=; not with a pool) */
    }
    uint64_t psize;
    int pooled = bfs_service_pool(fs->svc, &psize) >= 0;
    if (pooled) {
        if (atomic_load(&fs->pt_active))
            atomic_store(&fs->pool_on, 1);
        else
            fprintf(stderr, "batchfs: note: gpu_pool_mb= has no /.pool to offer: the pool file "
                            "is shared only under FUSE passthrough (root, Linux >= 6.9, "
                            "passthrough=auto); libbatchfs-gpu stages batches instead\n");
    }
    if (fs->args->pipe.huge_pages == 1) {
        if (!bfs_service_huge_files(fs->svc))
            fprintf(stderr, "batchfs: note: huge_pages=1 has no effect: %s\n",
                    pooled ? "with gpu_pool_mb= batches are kept in the pool file, not in batch "
                             "files of their own"
                    : atomic_load(&fs->pt_active)
                        ? "this kernel refused a private tmpfs with huge pages (fsopen)"
                        : "batch files are files only under FUSE passthrough (root, Linux >= "
                          "6.9, passthrough=auto)");
    }
}

const struct fuse_lowlevel_ops fso_ops = {
    .init = op_init,
    .lookup = op_lookup,
    .getattr = op_getattr,
    .opendir = op_opendir,
    .readdir = op_readdir,
    .open = op_open,
    .read = op_read,
    .release = op_release,
    .getxattr = op_getxattr,
    .listxattr = op_listxattr,
    .setattr = op_setattr,
    .mknod = op_mknod,
    .mkdir = op_mkdir,
    .unlink = op_unlink,
    .rmdir = op_unlink,
    .rename = op_rename,
    .create = op_create,
    .setxattr = op_setxattr,
    .removexattr = op_removexattr,
};
