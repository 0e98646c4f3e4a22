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
 *
 * Files: fs.c (this: bfs_fs_run, FUSE set-up only: the service opened and started, the
 * session, mount, daemon, loop, unmount), ops.c (the operations), passthrough.c,
 * daemon.c; fs_internal.h is what they share. The engine's side (engine, executor, store,
 * claims, autotuner, /stats) is the service, engine/api.h.
 */
#include "fs/fs_internal.h"
#include "fs/fs.h"
#include "fs/device.h"
#include "fs/log.h"
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
    pthread_setname_np(pthread_self(), "bfs-watch");
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
    return fsd_check_mountpoint(((const bfs_mount_args *)arg)->mountpoint);
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
    else /* a remote source (s3://, https://) or a mixture: the time of the mount */
        clock_gettime(CLOCK_REALTIME, &fs.mtime);
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
    fs.se = fuse_session_new(&fargs, &fso_ops, sizeof fso_ops, &fs);
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
    static const struct fuse_custom_io io = {.read = fsp_io_read, .writev = fsp_io_writev};
    if (fuse_session_custom_io(fs.se, &io, fuse_session_fd(fs.se))) {
        fprintf(stderr, "batchfs: cannot set up the FUSE channel\n");
        goto out;
    }
    /* log=, then the background (unless -f) */
    if (fsb_daemonize(a))
        goto out;
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
    fsb_started(0);                 /* (if still starting: the parent exits 1) */
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
        fso_forget_file(&fs, fs.open_files);
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
