/*
 * fs_internal.h — what the files of the FUSE adapter share (fs/ only): the mount's state,
 * its open files and backing files, and the functions one file offers the others.
 *
 *   fs.c           bfs_fs_run: the checks, the FUSE session, mount, daemon, loop, unmount
 *   ops.c          the FUSE operations (lookup .. release, xattrs, read-only refusals, init)
 *   passthrough.c  FUSE passthrough: libfuse's custom I/O hooks and the backing files
 *   daemon.c       going to the background, and where stderr goes then (log=)
 */
#ifndef BATCHFS_FS_FS_INTERNAL_H
#define BATCHFS_FS_FS_INTERNAL_H

#define FUSE_USE_VERSION 312

#include "engine/api.h"
#include "mountopts/mountopts.h"

#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

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
    atomic_int pool_on;          /* /.pool is served (gpu_pool_mb= under passthrough) */
    _Atomic uint64_t windows;    /* user.batchfs.window answers (batches in the pool) */
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

/* ops.c: the operations, and an open file's end (also for files still open at exit) */
extern const struct fuse_lowlevel_ops fso_ops;
void fso_forget_file(fsstate *fs, openfile *of);

/* passthrough.c: libfuse's read and write of /dev/fuse (userdata: the fsstate), the
 * backing id of an open batch (0: copying mode, -1: no memory) and its release, the open
 * reply this thread is about to write (fh, backing id; id 0: none), CAP_SYS_ADMIN */
ssize_t fsp_io_read(int fd, void *buf, size_t len, void *userdata);
ssize_t fsp_io_writev(int fd, struct iovec *iov, int count, void *userdata);
int fsp_backing_acquire(fsstate *fs, uint64_t epoch, uint64_t k, int fd);
void fsp_backing_release(fsstate *fs, uint64_t epoch, uint64_t k);
void fsp_open_reply(uint64_t fh, int id);
int fsp_has_sys_admin(void);

/* daemon.c: open log=, go to the background unless -f (the parent waits for INIT's
 * answer); 0, or -1 after a message on stderr. fsb_started: INIT is answered (ok) or the
 * daemon gives up: release the waiting parent, hand stderr over (any thread, once). */
int fsb_daemonize(const bfs_mount_args *a);
void fsb_started(int ok);

#endif
