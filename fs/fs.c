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

/* Claims of epoch/N/next a mount takes ahead of its opens, per epoch (claim_batch). */
#define AHEAD_MAX 16

typedef struct ahead {
    struct ahead *next;
    uint64_t epoch;
    int n;                        /* claims held, oldest first */
    int exhausted;                /* the group had none left at the last take: take no more */
    bfs_group_claim c[AHEAD_MAX]; /* each prefetched when taken */
} ahead;

/* The backing file registered for an open batch (passthrough). */
typedef struct backing {
    struct backing *next;
    uint64_t epoch, k;
    int id;    /* backing id, or 0: this batch's files are open in copying mode */
    int opens; /* open files of this batch */
} backing;

typedef struct fsstate {
    const bfs_mount_args *args;
    bfs_engine *e;
    bfs_exec *x;
    bfs_store *store;   /* cache_dir=, or NULL */
    bfs_tuner *tuner;   /* the autotuner (always runs: fixed values are kept) */
    bfs_claims *claims; /* group=: the group's claim counters, or NULL (no epoch/N/next) */
    int cpu_budget;
    uint64_t ram_bytes;
    struct fuse_session *se;
    uint64_t batches, batch_bytes;
    uint32_t epochs;
    struct timespec mtime;
    uid_t uid;
    gid_t gid;
    char *pipeline; /* /pipeline text */
    size_t pipeline_len;
    double start;
    int prefetch;
    uint64_t cache_bytes;
    pthread_mutex_t lock;        /* guards open_files and backings */
    struct openfile *open_files; /* released at exit if the kernel never sends RELEASE */
    backing *backings;           /* passthrough: batches open now, with their backing id */
    uint64_t init_unique;        /* the INIT request being answered (request threads) */
    int init_seen;               /* init_unique is set */
    atomic_int pt_offered;       /* the kernel's INIT offered FUSE_PASSTHROUGH */
    atomic_int pt_active;        /* passthrough in use (cleared if BACKING_OPEN is refused) */
    _Atomic uint64_t pt_opens;   /* batch files opened in passthrough mode */
    _Atomic uint64_t reads, bytes_served, read_errors, interrupted;
    _Atomic uint64_t served;         /* batches handed to readers (first read of an open file) */
    _Atomic uint64_t claims_served;  /* opens of epoch/N/next that served a batch */
    _Atomic uint64_t claims_refused; /* opens of epoch/N/next refused with ENODATA */
    pthread_mutex_t ahead_lock;      /* guards aheads */
    ahead *aheads;                   /* claims taken ahead, per epoch */
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
    fsn_tree t = {.epochs = fs->epochs, .batches = fs->batches, .next = fs->claims != NULL};
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
        st->st_size = (off_t)bfs_engine_batch_bytes(fs->e, epoch, k);
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

/* ---- /pipeline and /stats ---------------------------------------------------------- */

static int make_pipeline_text(fsstate *fs)
{
    const char *canon = bfs_engine_canonical(fs->e);
    size_t cap = strlen(canon) + strlen(bfs_engine_source_path(fs->e)) + 4096;
    fs->pipeline = malloc(cap);
    if (!fs->pipeline)
        return -ENOMEM;
    int n = snprintf(fs->pipeline, cap,
                     "# batchfs %s pipeline; data-changing options in canonical form\n%s"
                     "# listing\nepochs = %u\n# identity\nsource = %s\nfingerprint = %016llx\n",
                     BATCHFS_VERSION, canon, fs->epochs, bfs_engine_source_path(fs->e),
                     (unsigned long long)bfs_engine_fingerprint(fs->e));
    fs->pipeline_len = n > 0 && (size_t)n < cap ? (size_t)n : 0;
    return 0;
}

/* A growing text buffer for /stats. */
typedef struct text {
    char *s;
    size_t len, cap;
} text;

static void tprintf(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tprintf(text *t, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = t->s ? vsnprintf(t->s + t->len, t->cap - t->len, fmt, ap) : -1;
        va_end(ap);
        if (n >= 0 && t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap ? t->cap * 2 : 4096;
        char *s = realloc(t->s, cap);
        if (!s)
            return;
        t->s = s, t->cap = cap;
    }
}

/* A reader key (pid) is alive while its process exists (EPERM: another user's). */
static int pid_alive(uint64_t key)
{
    return key <= INT32_MAX && (kill((pid_t)key, 0) == 0 || errno == EPERM);
}

static void make_stats(fsstate *fs, text *t)
{
    bfs_exec_stats st;
    bfs_exec_get_stats(fs->x, &st);
    double up = bfs_mono_s() - fs->start;
    double n = st.stages.samples ? (double)st.stages.samples : 1;
    tprintf(t, "{\n  \"version\": \"%s\",\n  \"fingerprint\": \"%016llx\",\n", BATCHFS_VERSION,
            (unsigned long long)bfs_engine_fingerprint(fs->e));
    tprintf(t, "  \"uptime_s\": %.1f,\n  \"threads\": %d,\n", up, st.threads);
    tprintf(t, "  \"images\": %llu,\n  \"images_per_s\": %.1f,\n",
            (unsigned long long)st.stages.samples, up > 0 ? st.stages.samples / up : 0.0);
    tprintf(t,
            "  \"stage_us_per_image\": {\"read\": %.1f, \"decode\": %.1f, \"resize\": %.1f, "
            "\"encode\": %.1f},\n",
            st.stages.read_ns / n / 1e3, st.stages.decode_ns / n / 1e3,
            st.stages.resize_ns / n / 1e3, st.stages.encode_ns / n / 1e3);
    tprintf(t,
            "  \"decodes\": {\"cropped\": %llu, \"full\": %llu, \"scaled\": %llu, \"raw\": "
            "%llu, \"windowed\": %llu},\n  \"bad_samples\": %llu,\n  \"texts_cut\": %llu,\n",
            (unsigned long long)st.stages.decode_cropped, (unsigned long long)st.stages.decode_full,
            (unsigned long long)st.stages.decode_scaled, (unsigned long long)st.stages.decode_raw,
            (unsigned long long)st.stages.decode_windowed,
            (unsigned long long)st.stages.bad_samples, (unsigned long long)st.stages.texts_cut);
    bfs_bad_sample bad[BFS_ENGINE_RECENT_BAD];
    int nbad = bfs_engine_recent_bad(fs->e, bad, BFS_ENGINE_RECENT_BAD);
    tprintf(t, "  \"recent_bad_samples\": [");
    for (int i = 0; i < nbad; i++) {
        char name[sizeof bad[i].name * 6], reason[sizeof bad[i].reason * 6];
        bfs_json_escape(name, sizeof name, bad[i].name);
        bfs_json_escape(reason, sizeof reason, bad[i].reason);
        tprintf(t, "%s{\"index\": %llu, \"name\": \"%s\", \"reason\": \"%s\"}", i ? ", " : "",
                (unsigned long long)bad[i].index, name, reason);
    }
    tprintf(t, "],\n");
    if (bfs_engine_mix_count(fs->e)) { /* a mixture: samples drawn per source */
        tprintf(t, "  \"sources\": [");
        uint64_t count, drawn;
        const char *path;
        for (uint32_t k = 0; (path = bfs_engine_mix_source(fs->e, k, &count, &drawn)); k++) {
            char esc[PATH_MAX * 6 + 1];
            bfs_json_escape(esc, sizeof esc, path);
            tprintf(t, "%s{\"path\": \"%s\", \"samples\": %llu, \"drawn\": %llu}", k ? ", " : "",
                    esc, (unsigned long long)count, (unsigned long long)drawn);
        }
        tprintf(t, "],\n");
    }
    tprintf(t,
            "  \"batches\": {\"served\": %llu, \"computed\": %llu, \"failed\": %llu, "
            "\"in_flight\": %u, \"prefetched\": %llu, \"opened\": %llu, \"opened_bytes\": %llu},\n",
            (unsigned long long)atomic_load(&fs->served), (unsigned long long)st.computed,
            (unsigned long long)st.failed, st.in_flight, (unsigned long long)st.prefetched,
            (unsigned long long)atomic_load(&fs->opened),
            (unsigned long long)atomic_load(&fs->opened_bytes));
    tprintf(t,
            "  \"cache\": {\"hits\": %llu, \"joins\": %llu, \"misses\": %llu, \"evictions\": "
            "%llu, \"evicted_passed\": %llu, \"evicted_ahead\": %llu, \"bytes\": %llu, "
            "\"budget_bytes\": %llu, \"passed_budget_bytes\": %llu, \"passed_regrets\": %llu, "
            "\"buffers\": %d, \"buffer_allocs\": %llu, \"files\": %llu, \"file_budget\": %llu, "
            "\"files_refused\": %llu, \"fd_limit\": %llu},\n",
            (unsigned long long)st.hits, (unsigned long long)st.joins,
            (unsigned long long)st.misses, (unsigned long long)st.evictions,
            (unsigned long long)st.evicted_passed, (unsigned long long)st.evicted_ahead,
            (unsigned long long)st.cached_bytes, (unsigned long long)st.cache_budget,
            (unsigned long long)st.passed_budget, (unsigned long long)st.passed_regrets, st.buffers,
            (unsigned long long)st.buffer_allocs, (unsigned long long)st.files,
            (unsigned long long)st.file_budget, (unsigned long long)st.files_refused,
            (unsigned long long)st.fd_limit);
    bfs_samplecache_stats sc;
    bfs_engine_sample_cache_stats(fs->e, &sc);
    if (sc.budget_bytes) {
        char scj[512];
        bfs_samplecache_stats_json(&sc, scj, sizeof scj);
        tprintf(t, "  \"sample_cache\": %s,\n", scj);
    }
    if (fs->tuner) {
        char tj[16384];
        bfs_tuner_json(fs->tuner, tj, sizeof tj);
        tprintf(t, "  \"autotune\": %s,\n", tj);
    }
    if (fs->store) {
        bfs_store_stats ss;
        bfs_store_get_stats(fs->store, &ss);
        tprintf(t,
                "  \"cache_dir\": {\"served\": %llu, \"published\": %llu, \"hits\": %llu, "
                "\"misses\": %llu, \"busy\": %llu, \"corrupt\": %llu, \"evictions\": %llu, "
                "\"zero_copy\": %llu, \"unpublished_substituted\": %llu, \"save_errors\": %llu, "
                "\"no_space\": %llu, \"usage_bytes\": %llu, \"budget_bytes\": %llu},\n",
                (unsigned long long)st.store_hits, (unsigned long long)st.store_publishes,
                (unsigned long long)ss.hits, (unsigned long long)ss.misses,
                (unsigned long long)ss.busy, (unsigned long long)ss.corrupt,
                (unsigned long long)ss.evictions, (unsigned long long)ss.taken,
                (unsigned long long)st.store_withheld, (unsigned long long)ss.save_errors,
                (unsigned long long)ss.no_space, (unsigned long long)ss.usage_bytes,
                (unsigned long long)ss.budget_bytes);
    }
    if (st.remote) {
        char url[700];
        bfs_remote_url u;
        bfs_remote_parse_url(fs->args->pipe.remote, &u, NULL, 0);
        bfs_remote_url_text(&u, url, sizeof url);
        tprintf(t,
                "  \"remote\": {\"url\": \"%s\", \"workers\": %d, \"requested\": %llu, "
                "\"hits\": %llu, \"fallbacks\": %llu, \"errors\": %llu, \"corrupt\": %llu, "
                "\"declined\": %llu, \"key\": \"%s\", \"wait_s\": %.6f},\n",
                url, st.remote_workers, (unsigned long long)st.remote_requested,
                (unsigned long long)st.remote_hits, (unsigned long long)st.remote_fallbacks,
                (unsigned long long)st.remote_errors, (unsigned long long)st.remote_corrupt,
                (unsigned long long)st.remote_declined, st.remote_key_id, st.remote_wait_ns / 1e9);
    }
    if (fs->claims) {
        bfs_claims_stats cs;
        bfs_claims_get_stats(fs->claims, &cs);
        unsigned held = 0;
        pthread_mutex_lock(&fs->ahead_lock);
        for (ahead *a = fs->aheads; a; a = a->next)
            held += (unsigned)a->n;
        pthread_mutex_unlock(&fs->ahead_lock);
        tprintf(t,
                "  \"group\": {\"name\": \"%s\", \"claims\": %llu, \"given_back\": %llu, "
                "\"lost\": %llu, \"exhausted\": %llu, \"ahead\": %u},\n",
                bfs_claims_name(fs->claims), (unsigned long long)atomic_load(&fs->claims_served),
                (unsigned long long)cs.given_back, (unsigned long long)cs.lost,
                (unsigned long long)atomic_load(&fs->claims_refused), held);
    }
    tprintf(t,
            "  \"reads\": {\"requests\": %llu, \"bytes\": %llu, \"errors\": %llu, "
            "\"interrupted\": %llu},\n",
            (unsigned long long)atomic_load(&fs->reads),
            (unsigned long long)atomic_load(&fs->bytes_served),
            (unsigned long long)atomic_load(&fs->read_errors),
            (unsigned long long)atomic_load(&fs->interrupted));
    pthread_mutex_lock(&fs->lock);
    unsigned nback = 0;
    for (backing *b = fs->backings; b; b = b->next)
        nback += b->id > 0;
    pthread_mutex_unlock(&fs->lock);
    tprintf(t,
            "  \"passthrough\": {\"active\": %s, \"opens\": %llu, \"backing_files\": %u, "
            "\"huge_pages\": %s},\n",
            atomic_load(&fs->pt_active) ? "true" : "false",
            (unsigned long long)atomic_load(&fs->pt_opens), nback,
            st.huge_files ? "true" : "false");
    bfs_exec_reader rd[BFS_EXEC_MAX_READERS];
    int nr = bfs_exec_readers(fs->x, bfs_mono_s(), pid_alive, rd, BFS_EXEC_MAX_READERS);
    tprintf(t, "  \"prefetch\": {\"depth\": %d, \"streams\": [", st.prefetch);
    for (int i = 0; i < nr; i++)
        tprintf(t,
                "%s\n    {\"id\": %u, \"pid\": %llu, \"epoch\": %llu, \"batch\": %llu, "
                "\"stride\": %lld, \"walk\": \"%s\", \"depth\": %d, \"batches\": %llu, "
                "\"step_ms\": %.1f, \"wait_ms\": %.1f, \"idle_s\": %.1f}",
                i ? "," : "", rd[i].id, (unsigned long long)rd[i].key,
                (unsigned long long)rd[i].epoch, (unsigned long long)rd[i].k,
                (long long)rd[i].stride,
                rd[i].walk == BFS_EXEC_WALK_NAMES    ? "names"
                : rd[i].walk == BFS_EXEC_WALK_STRIDE ? "stride"
                                                     : "unknown",
                rd[i].depth, (unsigned long long)rd[i].batches, rd[i].own_s * 1e3,
                rd[i].wait_s * 1e3, rd[i].idle_s);
    tprintf(t, "%s]}\n}\n", nr ? "\n  " : "");
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
                    bfs_exec_set_memfd(fs->x, 0, 0);
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
    bfs_exec_cancel_wait(c->fs->x, &c->cancel);
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
    int rc = bfs_exec_get_as(fs->x, (uint64_t)fuse_req_ctx(req)->pid, pid_alive, of->epoch, of->k,
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
 * The claim for an open of epoch/N/next: the oldest one this mount took ahead for epoch N,
 * else the group's next; then, while the prefetch depth d (the executor's, from prefetch=
 * or the autotuner; at most AHEAD_MAX) allows, more are taken ahead and their batches
 * prefetched, so that a reader opening next one file after another finds each computed
 * (as batch_K readers do) instead of waiting a whole batch per open. Taking ahead takes
 * batches from the group's other mounts (across hosts with remote=): only a mount whose
 * next is being opened does so, at most d per epoch, and what it holds is returned untried
 * at unmount (an epoch's end is uneven by at most d batches per mount). 0, -ENODATA or an
 * error of bfs_claims_take.
 */
static int next_claim(fsstate *fs, uint64_t epoch, bfs_group_claim *c)
{
    bfs_exec_stats st;
    bfs_exec_get_stats(fs->x, &st);
    int depth = st.prefetch < 0 ? 0 : st.prefetch > AHEAD_MAX ? AHEAD_MAX : st.prefetch;
    pthread_mutex_lock(&fs->ahead_lock);
    ahead **pa = &fs->aheads;
    while (*pa && (*pa)->epoch != epoch)
        pa = &(*pa)->next;
    if (!*pa && depth > 0 && (*pa = calloc(1, sizeof **pa))) /* (no memory: none ahead) */
        (*pa)->epoch = epoch;
    ahead *a = *pa;
    int rc = 0;
    if (a && a->n) {
        *c = a->c[0];
        memmove(a->c, a->c + 1, (size_t)--a->n * sizeof a->c[0]);
    } else {
        rc = bfs_claims_take(fs->claims, epoch, c);
    }
    while (!rc && a && !a->exhausted && a->n < depth) {
        int r = bfs_claims_take(fs->claims, epoch, &a->c[a->n]);
        if (r == -ENODATA)
            a->exhausted = 1;
        if (r)
            break; /* (a Redis error: this open's claim is served all the same) */
        bfs_exec_prefetch(fs->x, epoch, a->c[a->n++].batch);
    }
    if (a && !a->n && (a->exhausted || rc)) { /* (nothing held: forget the epoch) */
        *pa = a->next;
        free(a);
    }
    pthread_mutex_unlock(&fs->ahead_lock);
    return rc;
}

/* At unmount: every claim taken ahead and not opened goes back to the group untried. */
static void return_ahead(fsstate *fs)
{
    while (fs->aheads) {
        ahead *a = fs->aheads;
        for (int i = 0; i < a->n; i++)
            bfs_claims_return(fs->claims, &a->c[i]);
        fs->aheads = a->next;
        free(a);
    }
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
    int rc = next_claim(fs, epoch, &c);
    if (rc == -ENODATA)
        atomic_fetch_add(&fs->claims_refused, 1);
    if (rc)
        return rc == -ENODATA ? ENODATA : bfs_err_to_errno(rc);
    bfs_batch *b;
    interrupt_ctx ic = {.fs = fs};
    fuse_req_interrupt_func(req, on_interrupt, &ic); /* (see take_batch) */
    rc = bfs_exec_get_cancel(fs->x, c.epoch, c.batch, &ic.cancel, &b, err, sizeof err);
    fuse_req_interrupt_func(req, NULL, NULL);
    if (rc == -EINTR) {
        bfs_claims_return(fs->claims, &c);
        atomic_fetch_add(&fs->interrupted, 1);
        return EINTR;
    }
    if (rc) {
        bfs_claims_give_back(fs->claims, &c);
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
        text t = {0};
        make_stats(fs, &t);
        of->text = t.s, of->text_len = t.len;
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
                    : kind == FSN_BATCH ? bfs_engine_batch_bytes(fs->e, epoch, k)
                                        : 0;
    int rc = fuse_reply_open(req, fi);
    tl_open.id = 0;
    if (rc == -ENOENT) { /* interrupted: the kernel won't release */
        if (of->is_next) /* (nobody got the batch) */
            bfs_claims_return(fs->claims, &of->claim);
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
        bfs_exec_consumed(fs->x, epoch, k);
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
        n = snprintf(v, sizeof v, "%016llx", (unsigned long long)bfs_engine_fingerprint(fs->e));
    else if (kind == FSN_BATCH && !strcmp(name, "user.batchfs.epoch"))
        n = snprintf(v, sizeof v, "%llu", (unsigned long long)epoch);
    else if (kind == FSN_BATCH && !strcmp(name, "user.batchfs.batch"))
        n = snprintf(v, sizeof v, "%llu", (unsigned long long)k);
    else if (kind == FSN_BATCH && !strcmp(name, "user.batchfs.samples"))
        n = snprintf(v, sizeof v, "%u", bfs_engine_batch_len(fs->e, epoch, k));
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
        atomic_store(&fs->pt_active, 1); /* io_writev patches this INIT's reply */
        /* auto: on the huge-page tmpfs a warm daemon serves ~8% more images (38 MB batches
         * on 2 MiB pages) and ~15% more token bytes (512 KiB batches on 512 KiB folios);
         * but fresh huge pages are dear, so they start once the daemon recycles memory
         * (docs/engine.md, "Batch memory") */
        int huge = fs->args->pipe.huge_pages;
        if (huge == BFS_HUGE_AUTO)
            huge = BFS_EXEC_HUGE_LATER;
        bfs_exec_set_memfd(fs->x, 1, huge);
    }
    if (fs->args->pipe.huge_pages == 1) {
        bfs_exec_stats st;
        bfs_exec_get_stats(fs->x, &st);
        if (!st.huge_files)
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
    bfs_exec_shutdown(fs->x);
    while (!atomic_load(&fs->loop_done)) {
        pthread_kill(fs->loop_thread, WAKE_SIGNAL);
        nanosleep(&ts, NULL);
    }
    return NULL;
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
    bfs_ram_host host;
    char note[512];
    pthread_mutex_init(&fs.lock, NULL);
    pthread_mutex_init(&fs.ahead_lock, NULL);

    /* everything a user can get wrong is checked before mounting */
    int erc = bfs_engine_create(a->source, &a->pipe, &fs.e, err, sizeof err);
    if (erc) {
        struct stat sst;
        fprintf(stderr, "batchfs: %s\n", err);
        /* (a dataset file: a folder's errors name the directory at fault already) */
        if (erc >= BFS_E_FIRST && erc < BFS_E_LAST && stat(a->source, &sst) == 0 &&
            S_ISREG(sst.st_mode))
            fprintf(stderr,
                    "batchfs: the dataset file is damaged or not a dataset: check it "
                    "with 'mkbatchfs --verify %s' and re-pack it with mkbatchfs\n",
                    a->source);
        goto out;
    }
    bfs_engine_print_notes(fs.e, stderr, "batchfs");
    fs.batch_bytes = bfs_engine_max_batch_bytes(fs.e);
    /* the budget: ram_mb, or half of what MemAvailable and the cgroup limit leave; batches
     * that cannot fit in it are refused here, not by the OOM killer at the first read */
    bfs_ram_probe(NULL, NULL, NULL, &host);
    if (bfs_ram_budget(&a->pipe, fs.batch_bytes, &host, &fs.ram_bytes, note, sizeof note, err,
                       sizeof err)) {
        fprintf(stderr, "batchfs: %s\n", err);
        goto out;
    }
    if (note[0])
        fprintf(stderr, "batchfs: warning: %s\n", note);
    if (check_mountpoint(a->mountpoint))
        goto out;
    if (bfs_exec_open_store(&a->pipe, &fs.store, err, sizeof err)) {
        fprintf(stderr, "batchfs: %s\n", err);
        goto out;
    }
    struct stat st;
    if (stat(a->source, &st) == 0)
        fs.mtime = st.st_mtim;
    fs.uid = getuid();
    fs.gid = getgid();
    fs.batches = bfs_engine_batches(fs.e);
    fs.epochs = a->pipe.epochs;
    fs.prefetch = a->pipe.prefetch == BFS_AUTO ? BFS_PREFETCH_AUTO : a->pipe.prefetch;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    fs.cpu_budget = a->pipe.cpu_budget > 0 ? a->pipe.cpu_budget : cpus > 0 ? (int)cpus : 1;
    if (a->pipe.cache_mb == BFS_AUTO) {
        /* auto: a quarter of usable memory within the RAM budget, at least room for the
         * prefetch window of one reader; the autotuner sets it from then on */
        uint64_t want = bfs_ram_default_budget(&host) / 2,
                 floor_ = fs.batch_bytes * (uint64_t)(fs.prefetch + 2);
        if (want > fs.ram_bytes / 2)
            want = fs.ram_bytes / 2;
        fs.cache_bytes = want > floor_ ? want : floor_;
    } else {
        fs.cache_bytes = (uint64_t)a->pipe.cache_mb << 20;
    }
    /* group=: after the checks above (a refused mount leaves no group file behind) */
    if (a->pipe.group[0] &&
        (a->pipe.remote[0]
             ? bfs_claims_open_remote(a->pipe.group, bfs_engine_fingerprint(fs.e), fs.batches,
                                      a->pipe.remote, &fs.claims, err, sizeof err)
             : bfs_claims_open(a->pipe.group, bfs_engine_fingerprint(fs.e), fs.batches, &fs.claims,
                               err, sizeof err))) {
        fprintf(stderr, "batchfs: %s\n", err);
        goto out;
    }
    if (make_pipeline_text(&fs)) {
        fprintf(stderr, "batchfs: out of memory\n");
        goto out;
    }
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
    /* threads=auto: cpu_budget workers started, the autotuner lets 1..all of them run */
    int rc = bfs_exec_create(fs.e, a->pipe.threads == BFS_AUTO ? fs.cpu_budget : a->pipe.threads,
                             fs.cache_bytes, &fs.x);
    if (rc) {
        fprintf(stderr, "batchfs: cannot start workers: %s\n", bfs_strerror(rc));
        goto out;
    }
    if (fs.store)
        bfs_exec_set_store(fs.x, fs.store);
    if (a->pipe.remote[0]) {
        char rerr[1024];
        if ((rc = bfs_exec_set_remote(fs.x, &a->pipe, rerr, sizeof rerr))) {
            if (rc != BFS_E_REMOTE || a->pipe.remote_fallback == BFS_REMOTE_WAIT) {
                fprintf(stderr, "batchfs: %s%s\n", rerr,
                        rc == BFS_E_REMOTE ? " (remote_fallback=wait: readers would only wait; "
                                             "remote_fallback=local computes here meanwhile)"
                                           : "");
                goto out;
            }
            fprintf(stderr,
                    "batchfs: %s; computing batches here until Redis answers "
                    "(remote_fallback=local)\n",
                    rerr);
        }
    }
    bfs_exec_set_prefetch(fs.x, fs.prefetch);
    bfs_tuner_opts to = {.cpu_budget =
                             a->pipe.threads == BFS_AUTO ? fs.cpu_budget : a->pipe.threads,
                         .ram_bytes = fs.ram_bytes,
                         .fixed_threads = a->pipe.threads == BFS_AUTO ? 0 : a->pipe.threads,
                         .fixed_depth = a->pipe.prefetch == BFS_AUTO ? -1 : a->pipe.prefetch,
                         .cache_fixed = a->pipe.cache_mb != BFS_AUTO,
                         .fixed_cache = fs.cache_bytes,
                         .batch_samples = bfs_engine_mean_batch_len(fs.e),
                         .batch_bytes = fs.batch_bytes,
                         .alive = pid_alive};
    if ((rc = bfs_tuner_start(fs.x, &to, &fs.tuner)))
        fprintf(stderr, "batchfs: note: autotuner not started (%s): settings stay as given\n",
                bfs_strerror(rc));
    fs.start = bfs_mono_s();
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
    if (fs.x)
        bfs_exec_shutdown(fs.x);
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
    bfs_tuner_stop(fs.tuner);
    bfs_exec_destroy(fs.x);
    bfs_store_close(fs.store);
    if (fs.claims)
        return_ahead(&fs);
    bfs_claims_close(fs.claims);
    bfs_engine_destroy(fs.e);
    free(fs.pipeline);
    pthread_mutex_destroy(&fs.lock);
    pthread_mutex_destroy(&fs.ahead_lock);
    bfs_log_stop(); /* the last lines out before the process ends */
    return status;
}
