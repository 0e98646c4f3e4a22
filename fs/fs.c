/*
 * fs.c — low-level FUSE operations over the engine (see fs.h).
 *
 * Inodes are computed, never stored: 1 root, 2 /pipeline, 3 /stats, 4 /epoch,
 * FSN_EPOCH_BASE + N for epoch/N, FSN_BATCH_BASE + N * batches + K for epoch/N/batch_K,
 * FSN_NEXT_BASE + N for epoch/N/next (with group=);
 * names, inodes, directory entries and read spans are pure functions in fs/names.c. Sizes
 * come from the plan (bfs_engine_batch_bytes), so lookup/getattr/readdir never compute a
 * batch. Batch files never change: long entry/attribute timeouts, keep_cache, no
 * invalidation; a second reader of a batch is served by the kernel's page cache.
 *
 * A read of batch K asks the executor (single-flight: concurrent readers share one
 * computation) and holds a reference for the open file. Prefetch follows each reader
 * (the executor's reader table, bfs_exec_follow): readers are told apart by the
 * requesting thread's pid, and a new pid that continues a dead pid's stream (a shell loop
 * of `cat`) takes it over; after a reader starts batch K, the stride s from its previous
 * batch makes batches K+s .. K+d*s computed ahead, d its prefetch depth, from its second
 * batch on (a reader in a shell's glob order is followed in that order: exec.h).
 *
 * FUSE passthrough (Linux >= 6.9, CONFIG_FUSE_PASSTHROUGH, CAP_SYS_ADMIN; passthrough=auto):
 * libfuse 3.14 predates it, so batchfs talks to /dev/fuse through libfuse's custom I/O
 * hooks: io_read notes whether the kernel's INIT offers FUSE_PASSTHROUGH, io_writev sets
 * it (and max_stack_depth 1) in libfuse's INIT reply and the backing id in open replies.
 * The executor then keeps every finished batch in a read-only memory file (a sealed memfd,
 * or with huge_pages=1 a file on 2 MiB pages: bfs_exec_set_memfd) or, for a batch found in
 * cache_dir, in the store's own entry file, and opening a batch file computes the batch
 * (instead of its first read) and registers that file as the batch file's backing file
 * (FUSE_DEV_IOC_BACKING_OPEN): reads and mmap go
 * from the kernel straight to the batch's pages, never through the daemon — as fast as
 * tmpfs, zero-copy for mmap. The kernel allows one backing file per inode at a time, so
 * one backing id per batch is shared by its open files (fsstate.backings) and closed with
 * the last of them. Without passthrough (not root, older kernel, passthrough=off) the
 * first read computes the batch and every read is copied by the daemon, as before.
 *
 * epoch/N/next (group=, engine/claims.h): each open claims the next batch of epoch N that no
 * mount of the group has claimed, computes it (bfs_exec_get_cancel: interruptible, no reader
 * followed) and serves its bytes with direct I/O (one inode, a different batch per open:
 * nothing may be cached); a claim whose batch fails is given back, an interrupted one
 * returned untried. Prefetch claims ahead: up to the prefetch depth of claims per epoch are
 * taken when next is opened and their batches computed (next_claim), returned at unmount. Its
 * xattrs (user.batchfs.batch, ...) are those of the newest `next` file of that epoch open by the
 * asking thread: FUSE's GETXATTR carries no file handle, only the caller's pid.
 *
 * Request threads may be cancelled by libfuse's loop at exit; handlers that wait on the
 * executor disable cancellation so no lock is left held.
 */
#define FUSE_USE_VERSION 312
#include "fs/fs.h"
#include "fs/device.h"
#include "fs/names.h"
#include "fs/log.h"
#include "base/check.h"
#include "base/err.h"
#include "engine/api.h"
#include "base/clock.h"
#include "base/jsonstr.h"

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

/* FUSE passthrough ABI (Linux 6.9 uapi; Debian 12's <linux/fuse.h> predates it) */
#define PT_INIT_EXT       (1u << 30) /* FUSE_INIT_EXT: flags2 is valid */
#define PT_FLAGS2_BIT     (1u << 5)  /* FUSE_PASSTHROUGH = 1ULL << 37, in flags2 */
#define PT_FOPEN          (1u << 7)  /* FOPEN_PASSTHROUGH */
#define PT_INIT_FLAGS     12         /* offsetof(struct fuse_init_out, flags) */
#define PT_INIT_FLAGS2    32         /* offsetof(struct fuse_init_out, flags2) */
#define PT_INIT_DEPTH     36         /* offsetof(struct fuse_init_out, max_stack_depth) */
#define PT_INIT_IN_FLAGS2 16         /* offsetof(struct fuse_init_in, flags2) */
struct pt_backing_map {
    int32_t fd;
    uint32_t flags;
    uint64_t padding;
};
#define PT_IOC_BACKING_OPEN  _IOW(229, 1, struct pt_backing_map)
#define PT_IOC_BACKING_CLOSE _IOW(229, 2, uint32_t)
struct pt_open_out { /* struct fuse_open_out with the 6.9 field names */
    uint64_t fh;
    uint32_t open_flags;
    int32_t backing_id;
};

#define TIMEOUT 86400.0 /* batch files never change */

/* The backing file registered for an open batch (passthrough). */
typedef struct backing {
    struct backing *next;
    uint64_t epoch, k;
    int id;    /* backing id, or 0: this batch's files are open in copying mode */
    int opens; /* open files of this batch */
} backing;

typedef struct fsstate {
    const bfs_mount_args *args;
    bfs_service *svc; /* the engine, executor, store, claims and autotuner behind the mount */
    struct fuse_session *se;
    uint64_t batches;
    uint32_t epochs;
    int group; /* group=: epoch/N/next exists */
    struct timespec mtime;
    uid_t uid;
    gid_t gid;
    const char *pipeline; /* /pipeline text (the service's) */
    size_t pipeline_len;
    pthread_mutex_t lock;        /* guards open_files and backings */
    struct openfile *open_files; /* released at exit if the kernel never sends RELEASE */
    backing *backings;           /* passthrough: batches open now, with their backing id */
    uint64_t init_unique;        /* the INIT request being answered (request threads) */
    int init_seen;               /* init_unique is set */
    atomic_int pt_offered;       /* the kernel's INIT offered FUSE_PASSTHROUGH */
    atomic_int pt_active;        /* passthrough in use (cleared if BACKING_OPEN is refused) */
    _Atomic uint64_t pt_opens;   /* batch files opened in passthrough mode */
    _Atomic uint64_t reads, bytes_served, read_errors, interrupted;
    _Atomic uint64_t served;        /* batches handed to readers (first read of an open file) */
    _Atomic uint64_t claims_served; /* opens of epoch/N/next that served a batch */
    _Atomic uint64_t opened, opened_bytes; /* batch files opened, and their sizes */
    atomic_int readahead_done;             /* raise_readahead ran */
    pthread_t loop_thread;                 /* the thread in the FUSE session loop */
    atomic_int loop_done;                  /* it has left the loop (exit_watch stops waking it) */
} fsstate;

typedef struct openfile {
    struct openfile *prev, *next; /* in fsstate.open_files, guarded by fsstate.lock */
    uint64_t epoch, k;
    bfs_batch *b;          /* referenced after the first read (or at open); released at close */
    int backed;            /* counted in fsstate.backings (opened in passthrough mode) */
    int is_next;           /* an open epoch/N/next: batch k claimed for its opener */
    uint64_t pid;          /* is_next: the opener (the thread whose getxattr names k) */
    bfs_group_claim claim; /* is_next: the claim, given back if the open is not delivered */
    uint64_t served;
    char *text; /* /stats snapshot */
    size_t text_len;
} openfile;

static fsstate *state(fuse_req_t req)
{
    return fuse_req_userdata(req);
}

/* ---- names and inodes ------------------------------------------------------------- */

/* The tree's shape, for the name and inode functions of fs/names.h. */
static fsn_tree tree_of(const fsstate *fs)
{
    fsn_tree t = {.epochs = fs->epochs, .batches = fs->batches, .next = fs->group};
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
     * buffers stay in L2 (1 MiB ones made `cat` ~6% slower than from tmpfs) */
    st->st_blksize = atomic_load(&fs->pt_active) ? 128 << 10 : 1 << 20;
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
                           .pt_opens = atomic_load(&fs->pt_opens)};
    pthread_mutex_lock(&fs->lock);
    for (backing *b = fs->backings; b; b = b->next)
        f.backing_files += b->id > 0;
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

/* ---- passthrough --------------------------------------------------------------------- */

/* Request threads answering an open in passthrough mode: the open reply to patch. */
static __thread struct {
    uint64_t fh;
    int id;
} tl_open;

/* libfuse's read of a request: note what the kernel's INIT offers. */
static ssize_t io_read(int fd, void *buf, size_t len, void *userdata)
{
    fsstate *fs = userdata;
    ssize_t n = read(fd, buf, len);
    if (n < 0 && errno == ECONNABORTED) {
        /* The kernel ended the connection: an unmount (lazy or not: this kernel marks the
         * connection aborted when the last open file of a lazily unmounted mount closes)
         * or an abort through /sys/fs/fuse/connections. libfuse 3.14 takes only ENODEV as
         * that end and would print "reading device" and exit 1 on ECONNABORTED. */
        errno = ENODEV;
        return -1;
    }
    const struct fuse_in_header *h = buf;
    if (n >= (ssize_t)sizeof *h && h->opcode == FUSE_INIT) {
        __atomic_store_n(&fs->init_unique, h->unique, __ATOMIC_RELAXED);
        __atomic_store_n(&fs->init_seen, 1, __ATOMIC_RELEASE);
        if (n >= (ssize_t)(sizeof *h + PT_INIT_IN_FLAGS2 + 4)) {
            const uint8_t *in = (const uint8_t *)(h + 1);
            uint32_t flags, flags2;
            memcpy(&flags, in + 12, 4); /* offsetof(struct fuse_init_in, flags) */
            memcpy(&flags2, in + PT_INIT_IN_FLAGS2, 4);
            atomic_store(&fs->pt_offered, (flags & PT_INIT_EXT) && (flags2 & PT_FLAGS2_BIT));
        }
    }
    return n;
}

/* ---- start-up ------------------------------------------------------------------------- */

/* The write end of the pipe to the waiting parent (daemon_start), or -1. */
static int start_pipe = -1;

/* Where stderr goes once the daemon is in the background (daemon_started): LOG_NONE
 * /dev/null, LOG_SYSLOG syslog, LOG_PROBE syslog if a syslog daemon listens, else a file
 * (syslog_or_fallback, decided once the mount works), else a log= file's descriptor. */
enum { LOG_PROBE = -3, LOG_NONE = -2, LOG_SYSLOG = -1 };
static int bg_log = LOG_NONE;
static const char *bg_log_tag = "";
static const bfs_mount_args *bg_args; /* (for LOG_PROBE) */

/*
 * Go to the background (not -f): like fuse_daemonize (fork, setsid, chdir /, stdin and
 * stdout to /dev/null), except that the parent exits only once the kernel's INIT has been
 * answered (daemon_started): with 0 when it was accepted, 1 when the daemon fails first
 * (an option libfuse or the kernel refuses at INIT, no memory for the workers). Until then
 * the daemon's stderr is still the terminal, so such a failure is reported there and the
 * command's exit status says whether the mount works. -1 if fork or pipe fail.
 */
static int daemon_start(int foreground)
{
    if (chdir("/")) { /* (as libfuse does; the paths given were made absolute) */
    }
    if (foreground)
        return 0;
    int p[2];
    if (pipe2(p, O_CLOEXEC))
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid > 0) { /* (Ctrl-C while waiting ends the wait, not the daemon) */
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        close(p[1]);
        char c = 1;
        ssize_t n;
        do
            n = read(p[0], &c, 1);
        while (n < 0 && errno == EINTR);
        _exit(n == 1 && c == 0 ? 0 : 1); /* (EOF: the daemon died; it said why) */
    }
    close(p[0]);
    setsid();
    int nul = open("/dev/null", O_RDWR);
    if (nul >= 0) {
        dup2(nul, 0);
        dup2(nul, 1);
        if (nul > 2)
            close(nul);
    }
    start_pipe = p[1];
    return 0;
}

/*
 * Where syslog would go nowhere (no daemon on its socket: containers, most images, where
 * syslog(3) silently drops every line, the one explaining an EIO included): with -f
 * stderr, in the background a file of this mount in the runtime directory. Says which on
 * stderr, still the terminal. Returns LOG_SYSLOG, LOG_NONE (stderr) or the file's fd.
 */
static int syslog_or_fallback(const bfs_mount_args *a)
{
    char why[600], path[PATH_MAX], err[PATH_MAX + 256];
    if (bfs_log_syslog_ready(why, sizeof why))
        return LOG_SYSLOG;
    if (a->foreground) {
        fprintf(stderr, "batchfs: log=syslog: %s: messages stay on stderr\n", why);
        return LOG_NONE;
    }
    int fd = bfs_log_fallback_open(a->mountpoint, path, sizeof path, err, sizeof err);
    if (fd >= 0) {
        fprintf(stderr, "batchfs: %s: logging to %s instead\n", why, path);
        return fd;
    }
    fprintf(stderr,
            "batchfs: warning: %s, and %s: the daemon's messages are lost (give -o "
            "log=FILE)\n",
            why, err);
    return LOG_SYSLOG;
}

/* The INIT reply is written (ok), or the daemon gives up: release the waiting parent,
 * then stderr goes to /dev/null (the terminal may be gone soon). Any thread, once. */
static void daemon_started(int ok)
{
    int fd = __atomic_exchange_n(&start_pipe, -1, __ATOMIC_ACQ_REL);
    if (fd < 0)
        return;
    /* (before the parent exits: its terminal shows the line before the prompt; a mount
     * that failed gets no log file) */
    if (bg_log == LOG_PROBE)
        bg_log = ok ? syslog_or_fallback(bg_args) : LOG_NONE;
    char c = ok ? 0 : 1;
    if (write(fd, &c, 1) < 0) { /* (the parent is gone: nothing to tell) */
    }
    close(fd);
    if (bg_log != LOG_NONE && bfs_log_start(bg_log, bg_log_tag) == 0)
        return; /* stderr goes to syslog or the log= file now */
    int nul = open("/dev/null", O_WRONLY);
    if (nul >= 0) {
        dup2(nul, 2);
        close(nul);
    }
}

/* libfuse's write of a reply: enable passthrough in the INIT reply, set the backing id
 * of an open reply (tl_open, set by op_open on this thread). */
static ssize_t io_writev(int fd, struct iovec *iov, int count, void *userdata)
{
    fsstate *fs = userdata;
    const struct fuse_out_header *init_reply =
        count >= 1 && iov[0].iov_len >= sizeof(struct fuse_out_header) &&
                __atomic_load_n(&fs->init_seen, __ATOMIC_ACQUIRE) &&
                ((const struct fuse_out_header *)iov[0].iov_base)->unique ==
                    __atomic_load_n(&fs->init_unique, __ATOMIC_RELAXED)
            ? iov[0].iov_base
            : NULL;
    if (count >= 2 && iov[0].iov_len >= sizeof(struct fuse_out_header)) {
        const struct fuse_out_header *oh = iov[0].iov_base;
        uint8_t *out = iov[1].iov_base;
        if (init_reply && oh->error == 0 && atomic_load(&fs->pt_active) &&
            iov[1].iov_len >= PT_INIT_DEPTH + 4) {
            uint32_t flags, flags2, depth = 1; /* backing files on a plain fs: depth 1 */
            memcpy(&flags, out + PT_INIT_FLAGS, 4);
            memcpy(&flags2, out + PT_INIT_FLAGS2, 4);
            flags |= PT_INIT_EXT, flags2 |= PT_FLAGS2_BIT;
            memcpy(out + PT_INIT_FLAGS, &flags, 4);
            memcpy(out + PT_INIT_FLAGS2, &flags2, 4);
            memcpy(out + PT_INIT_DEPTH, &depth, 4);
        } else if (tl_open.id > 0 && oh->error == 0 &&
                   iov[1].iov_len == sizeof(struct pt_open_out)) {
            struct pt_open_out o;
            memcpy(&o, out, sizeof o);
            if (o.fh == tl_open.fh) {
                o.open_flags |= PT_FOPEN;
                o.backing_id = tl_open.id;
                memcpy(out, &o, sizeof o);
            }
        }
    }
    ssize_t n = writev(fd, iov, count);
    if (init_reply)
        daemon_started(n >= 0 && init_reply->error == 0);
    return n;
}

/* The backing id for an open of batch (epoch, k) whose file is fd: the one its open
 * files share, or a new one (0: open it in copying mode). Counts the open. */
static int backing_acquire(fsstate *fs, uint64_t epoch, uint64_t k, int fd)
{
    pthread_mutex_lock(&fs->lock);
    backing *b = fs->backings;
    while (b && !(b->epoch == epoch && b->k == k))
        b = b->next;
    if (!b && (b = calloc(1, sizeof *b))) {
        b->epoch = epoch, b->k = k;
        if (fd >= 0 && atomic_load(&fs->pt_active)) {
            struct pt_backing_map map = {.fd = fd};
            b->id = ioctl(fuse_session_fd(fs->se), PT_IOC_BACKING_OPEN, &map);
            if (b->id < 0) {
                int e = errno;
                b->id = 0;
                if (e == EPERM || e == EINVAL || e == ENOTTY || e == EOPNOTSUPP) {
                    /* not allowed here (no CAP_SYS_ADMIN in the initial user namespace):
                     * stop trying; batches are copied from now on */
                    atomic_store(&fs->pt_active, 0);
                    bfs_service_batch_files(fs->svc, 0);
                    fprintf(stderr,
                            "batchfs: FUSE passthrough refused by the kernel (%s): batch "
                            "files are served by copying (run as root for passthrough)\n",
                            strerror(e));
                }
            }
        }
        b->next = fs->backings;
        fs->backings = b;
    }
    int id = -1;
    if (b) {
        b->opens++;
        id = b->id;
    }
    pthread_mutex_unlock(&fs->lock);
    return id;
}

static void backing_release(fsstate *fs, uint64_t epoch, uint64_t k)
{
    pthread_mutex_lock(&fs->lock);
    for (backing **p = &fs->backings; *p; p = &(*p)->next) {
        backing *b = *p;
        if (b->epoch != epoch || b->k != k)
            continue;
        if (--b->opens == 0) {
            if (b->id > 0) {
                uint32_t id = (uint32_t)b->id;
                ioctl(fuse_session_fd(fs->se), PT_IOC_BACKING_CLOSE, &id);
            }
            *p = b->next;
            free(b);
        }
        break;
    }
    pthread_mutex_unlock(&fs->lock);
}

/* Unlink an open file from the list, drop its batch reference, free it. */
static void forget_file(fsstate *fs, openfile *of)
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
        backing_release(fs, of->epoch, of->k);
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
    fi->keep_cache = 1; /* batches and /pipeline never change */
    if (kind == FSN_STATS) {
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
        int id = rc ? -1 : backing_acquire(fs, epoch, k, bfs_batch_fd(of->b));
        if (rc || id < 0) {
            bfs_batch_release(of->b);
            free(of);
            fuse_reply_err(req, rc ? rc : ENOMEM);
            return;
        }
        of->backed = 1;
        if (id > 0) { /* FOPEN_PASSTHROUGH allows no keep_cache: there is no page cache */
            fi->keep_cache = 0;
            tl_open.fh = (uint64_t)(uintptr_t)of, tl_open.id = id;
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
    tl_open.id = 0;
    if (rc == -ENOENT) { /* interrupted: the kernel won't release */
        if (of->is_next) /* (nobody got the batch) */
            bfs_service_claim_return(fs->svc, &of->claim);
        forget_file(fs, of);
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
    if (ino == FSN_INO_PIPELINE) {
        data = (const uint8_t *)fs->pipeline, len = fs->pipeline_len;
    } else if (ino == FSN_INO_STATS) {
        data = (const uint8_t *)of->text, len = of->text_len;
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
        const bfs_batch *b = __atomic_load_n(&of->b, __ATOMIC_ACQUIRE);
        data = bfs_batch_data(b), len = bfs_batch_size(b);
        pthread_setcancelstate(old, NULL);
    }
    if (off < 0 || (uint64_t)off >= len) {
        fuse_reply_buf(req, NULL, 0);
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
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    openfile *of = (openfile *)(uintptr_t)fi->fh;
    if (of)
        forget_file(state(req), of);
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

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
    fsstate *fs = state(req);
    uint64_t epoch = 0, k = 0;
    int kind = classify(fs, ino, &epoch, &k);
    char v[64];
    int n = -1;
    if (kind == FSN_NEXT) {
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
    if (kind == FSN_ROOT && !strcmp(name, "user.batchfs.fingerprint"))
        n = snprintf(v, sizeof v, "%016llx", (unsigned long long)bfs_service_fingerprint(fs->svc));
    else if (kind == FSN_BATCH && !strcmp(name, "user.batchfs.epoch"))
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
    static const char batch[] = "user.batchfs.epoch\0user.batchfs.batch\0user.batchfs.samples";
    if (kind == FSN_ROOT)
        reply_xattr(req, root, sizeof root, size);
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

/* Does this process have CAP_SYS_ADMIN (which FUSE_DEV_IOC_BACKING_OPEN requires)? */
static int has_sys_admin(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long caps = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "CapEff: %llx", &caps) == 1)
            break;
    if (f)
        fclose(f);
    return (caps >> 21) & 1; /* CAP_SYS_ADMIN */
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
    if (fs->args->passthrough && atomic_load(&fs->pt_offered) && has_sys_admin() &&
        !(conn->want & FUSE_CAP_WRITEBACK_CACHE)) {
        atomic_store(&fs->pt_active, 1);     /* io_writev patches this INIT's reply */
        bfs_service_batch_files(fs->svc, 1); /* (on huge pages per huge_pages=) */
    }
    if (fs->args->pipe.huge_pages == 1) {
        if (!bfs_service_huge_files(fs->svc))
            fprintf(stderr, "batchfs: note: huge_pages=1 has no effect: %s\n",
                    atomic_load(&fs->pt_active)
                        ? "this kernel refused a private tmpfs with huge pages (fsopen)"
                        : "batch files are files only under FUSE passthrough (root, Linux >= "
                          "6.9, passthrough=auto)");
    }
}

static const struct fuse_lowlevel_ops ops = {
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

/* ---- lifecycle ---------------------------------------------------------------------- */

/* Is path a mount point already (its device differs from its parent's, or it is
 * listed in /proc/self/mountinfo)? */
static int is_mounted(const char *path)
{
    char real[PATH_MAX];
    if (!realpath(path, real))
        return 0;
    FILE *f = fopen("/proc/self/mountinfo", "r");
    if (!f)
        return 0;
    char line[8192];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        char mnt[4096];
        if (sscanf(line, "%*s %*s %*s %*s %4095s", mnt) == 1 && !strcmp(mnt, real))
            found = 1;
    }
    fclose(f);
    return found;
}

static int check_mountpoint(const char *mp)
{
    struct stat st;
    if (stat(mp, &st) < 0) {
        if (errno == ENOTCONN || errno == ECONNREFUSED)
            fprintf(stderr,
                    "batchfs: mountpoint %s: transport endpoint is not connected (a "
                    "dead FUSE mount: run 'fusermount3 -u %s')\n",
                    mp, mp);
        else
            fprintf(stderr, "batchfs: mountpoint %s: %s (create it with mkdir)\n", mp,
                    strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "batchfs: mountpoint %s is not a directory\n", mp);
        return -1;
    }
    if (is_mounted(mp)) {
        fprintf(stderr,
                "batchfs: mountpoint %s is busy: something is already mounted there "
                "(unmount it with 'fusermount3 -u %s')\n",
                mp, mp);
        return -1;
    }
    /* not empty? (mounting over files hides them; libfuse 3 refuses nothing) */
    int nonempty = 0;
    DIR *dir = opendir(mp);
    if (dir) {
        struct dirent *de;
        while ((de = readdir(dir)))
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
                nonempty = 1;
                break;
            }
        closedir(dir);
    }
    if (nonempty) {
        fprintf(stderr,
                "batchfs: mountpoint %s is not empty: mounting would hide its files "
                "(use an empty directory)\n",
                mp);
        return -1;
    }
    /* the device, with a hint per reason (libfuse's own says "modprobe fuse" for all) */
    char err[512];
    if (fsd_check("/dev/fuse", err, sizeof err)) {
        fprintf(stderr, "batchfs: %s\n", err);
        return -1;
    }
    return 0;
}

/* Sent by exit_watch to the session loop's thread; its handler does nothing, the point is
 * the interrupted wait. A real-time signal: nothing else sends it. */
#define WAKE_SIGNAL (SIGRTMIN + 3)

static void wake_handler(int sig)
{
    (void)sig;
}

/*
 * Once the session is told to exit (a signal's handler calls fuse_session_exit): wakes
 * readers blocked on the executor, then the session loop. libfuse before 3.18 only sets a
 * flag there, and the loop checks it when its wait ends: the multi-threaded loop's thread
 * waits on a semaphore that request threads post when they end, and they end only after
 * the next request from the kernel. A signal handled by any other thread (the kernel
 * gives a process's signal to any thread not blocking it: the engine's workers, this one)
 * or landing just before that wait, on an idle mount, left the daemon running until
 * something touched the mount (a SIGTERM sent to a worker thread did so every time:
 * tests/mount/unmount_under_load.sh, "worker thread"). So the loop's thread is interrupted
 * until it has left the loop (sem_wait and read fail with EINTR; wake_handler is installed
 * without SA_RESTART).
 */
static void *exit_watch(void *arg)
{
    fsstate *fs = arg;
    struct timespec ts = {0, 50 * 1000 * 1000};
    while (!fuse_session_exited(fs->se))
        nanosleep(&ts, NULL);
    bfs_service_shutdown(fs->svc);
    while (!atomic_load(&fs->loop_done)) {
        pthread_kill(fs->loop_thread, WAKE_SIGNAL);
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* The mount's own check of bfs_service_open (after the pipeline's, before the store and
 * the group's file are made): the mountpoint. */
static int check_mountpoint_cb(void *arg)
{
    return check_mountpoint(((const bfs_mount_args *)arg)->mountpoint);
}

int bfs_fs_run(const bfs_mount_args *a)
{
    fsstate fs = {.args = a};
    char err[1024];
    int status = 1;
    struct fuse_args fargs = FUSE_ARGS_INIT(0, NULL);
    struct fuse_loop_config *cfg = NULL;
    pthread_t watch;
    int watching = 0, mounted = 0, handlers = 0;
    pthread_mutex_init(&fs.lock, NULL);

    /* everything a user can get wrong is checked before mounting */
    bfs_service_cfg sc = {.source = a->source,
                          .pipe = &a->pipe,
                          .role = BFS_SERVICE_MOUNT,
                          .notes = stderr,
                          .tag = "batchfs",
                          .check = check_mountpoint_cb,
                          .check_arg = (void *)a};
    int at = 0, erc = bfs_service_open(&sc, &fs.svc, &at, err, sizeof err);
    if (erc) {
        struct stat sst;
        if (err[0])
            fprintf(stderr, "batchfs: %s\n", err);
        /* (a dataset file: a folder's errors name the directory at fault already) */
        if (at == BFS_SERVICE_AT_ENGINE && erc >= BFS_E_FIRST && erc < BFS_E_LAST &&
            stat(a->source, &sst) == 0 && S_ISREG(sst.st_mode))
            fprintf(stderr,
                    "batchfs: the dataset file is damaged or not a dataset: check it "
                    "with 'mkbatchfs --verify %s' and re-pack it with mkbatchfs\n",
                    a->source);
        goto out;
    }
    struct stat st;
    if (stat(a->source, &st) == 0)
        fs.mtime = st.st_mtim;
    fs.uid = getuid();
    fs.gid = getgid();
    fs.batches = bfs_service_batches(fs.svc);
    fs.epochs = a->pipe.epochs;
    fs.group = bfs_service_has_group(fs.svc);
    fs.pipeline = bfs_service_pipeline(fs.svc, &fs.pipeline_len);
    /* the kernel takes a page of mount options: a long source (a mixture's list) is cut,
     * MNT/pipeline has it whole */
    char fsname[320];
    size_t srclen = strlen(a->source);
    snprintf(fsname, sizeof fsname, "fsname=batchfs:%.*s%s", srclen > 256 ? 250 : (int)srclen,
             a->source, srclen > 256 ? "..." : "");
    for (char *p = fsname; *p; p++)
        if (*p == ',')
            *p = '_'; /* commas would split the option list */
    if (fuse_opt_add_arg(&fargs, "batchfs") || fuse_opt_add_arg(&fargs, "-o") ||
        fuse_opt_add_arg(&fargs, "ro,subtype=batchfs,default_permissions") ||
        fuse_opt_add_arg(&fargs, "-o") || fuse_opt_add_arg(&fargs, fsname) ||
        (a->fuse_opts[0] &&
         (fuse_opt_add_arg(&fargs, "-o") || fuse_opt_add_arg(&fargs, a->fuse_opts))) ||
        (a->debug && fuse_opt_add_arg(&fargs, "-d"))) {
        fprintf(stderr, "batchfs: out of memory\n");
        goto out;
    }
    fs.se = fuse_session_new(&fargs, &ops, sizeof ops, &fs);
    if (!fs.se) {
        fprintf(stderr, "batchfs: cannot create the FUSE session (bad FUSE option in '%s'?)\n",
                a->fuse_opts);
        goto out;
    }
    if (fuse_set_signal_handlers(fs.se)) {
        fprintf(stderr, "batchfs: cannot install signal handlers\n");
        goto out;
    }
    handlers = 1;
    if (fuse_session_mount(fs.se, a->mountpoint)) {
        fprintf(stderr,
                "batchfs: cannot mount on %s (see the message above; is fusermount3 "
                "installed and /dev/fuse usable?)\n",
                a->mountpoint);
        goto out;
    }
    mounted = 1;
    static const struct fuse_custom_io io = {.read = io_read, .writev = io_writev};
    if (fuse_session_custom_io(fs.se, &io, fuse_session_fd(fs.se))) {
        fprintf(stderr, "batchfs: cannot set up the FUSE channel\n");
        goto out;
    }
    /* log=: opened here, so a bad path is reported on the terminal; syslog by default in
     * the background; with -f only log=FILE or log=syslog take stderr's lines */
    int log_fd = LOG_NONE;
    if (a->log && strcmp(a->log, "syslog")) {
        char lerr[1024];
        if ((log_fd = bfs_log_open(a->log, lerr, sizeof lerr)) < 0) {
            fprintf(stderr, "batchfs: %s\n", lerr);
            goto out;
        }
    } else if (a->log || !a->foreground) {
        /* (in the background: once the mount works, so a refused mount makes no file) */
        log_fd = a->foreground ? syslog_or_fallback(a) : LOG_PROBE;
    }
    bg_log_tag = a->mountpoint;
    bg_args = a;
    if (daemon_start(a->foreground)) {
        fprintf(stderr, "batchfs: cannot go to the background: %s\n", strerror(errno));
        goto out;
    }
    if (!a->foreground)
        bg_log = log_fd; /* daemon_started hands stderr over */
    else if (log_fd != LOG_NONE && bfs_log_start(log_fd, a->mountpoint))
        fprintf(stderr, "batchfs: log=%s: cannot start the log; messages stay on stderr\n", a->log);
    /* threads only after daemonizing: fork keeps none */
    int rc = bfs_service_start(fs.svc, err, sizeof err);
    if (rc) {
        fprintf(stderr, "batchfs: %s\n", err);
        goto out;
    }
    fs.loop_thread = pthread_self();
    struct sigaction wake = {.sa_handler = wake_handler}; /* (no SA_RESTART) */
    sigemptyset(&wake.sa_mask);
    if (sigaction(WAKE_SIGNAL, &wake, NULL))
        atomic_store(&fs.loop_done, 1); /* no handler: the signal would kill, send none */
    if (pthread_create(&watch, NULL, exit_watch, &fs) == 0)
        watching = 1;
    if (a->single_thread) {
        rc = fuse_session_loop(fs.se);
    } else {
        cfg = fuse_loop_cfg_create();
        if (!cfg) {
            fprintf(stderr, "batchfs: out of memory\n");
            goto out;
        }
        fuse_loop_cfg_set_max_threads(cfg, (unsigned)a->fuse_threads);
        fuse_loop_cfg_set_idle_threads(cfg, (unsigned)(a->fuse_threads / 2 + 1));
        rc = fuse_session_loop_mt(fs.se, cfg);
    }
    status = rc < 0 ? 1 : 0;
out:
    atomic_store(&fs.loop_done, 1); /* (before the join: exit_watch stops waking us) */
    daemon_started(0);              /* (if still starting: the parent exits 1) */
    if (fs.se)
        fuse_session_exit(fs.se);
    bfs_service_shutdown(fs.svc);
    if (watching)
        pthread_join(watch, NULL);
    if (mounted)
        fuse_session_unmount(fs.se);
    if (handlers)
        fuse_remove_signal_handlers(fs.se);
    /* files still open when the session ended (signal, abort): before the session goes,
     * as their backing ids are closed on its device */
    while (fs.open_files)
        forget_file(&fs, fs.open_files);
    if (fs.se)
        fuse_session_destroy(fs.se);
    if (cfg)
        fuse_loop_cfg_destroy(cfg);
    fuse_opt_free_args(&fargs);
    bfs_service_close(fs.svc); /* (claims taken ahead go back to the group) */
    pthread_mutex_destroy(&fs.lock);
    bfs_log_stop(); /* the last lines out before the process ends */
    return status;
}
