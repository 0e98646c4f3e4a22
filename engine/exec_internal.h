/*
 * exec_internal.h — the executor's seam for a job source: a part that serves some of the
 * executor's jobs from elsewhere (the remote side, engine/exec_remote.c: `batchfs
 * worker`s through Redis). Private to engine/ (only exec.c and exec_remote.c include it).
 *
 * One direction of calls, no circle: exec.c calls the remote side's functions (below);
 * the remote side calls the executor only through the job-table operations exec.c hands
 * it (bfs_exec_src_ops, callbacks: no symbol of exec.c is linked from exec_remote.c). The
 * source never sees a job's struct, only its bfs_exec_rjob; exec.c knows nothing of
 * Redis.
 *
 * A job the source serves is REMOTE (exec.c's state machine): it goes there from
 * PREPARING when the source takes new jobs (bfs_exec_remote_takes), and leaves it by the
 * ops' done (READY) or give_up (RUNNING: computed by the local workers). While a job is REMOTE
 * only the source's thread touches its bytes and the source's fields of its rjob.
 *
 * Locks: the executor's lock (x->lock) guards the job table and the source's fields
 * marked "guarded by x->lock" (the ops' lock, unlock). Each operation takes it itself;
 * the remote side's functions marked "Locked." are called holding it. The source never
 * holds it during its own I/O.
 */
#ifndef BATCHFS_ENGINE_EXEC_INTERNAL_H
#define BATCHFS_ENGINE_EXEC_INTERNAL_H

#include "engine/exec.h"

/* A job as its source sees it (embedded in the job, which exec.c owns and frees). */
typedef struct bfs_exec_rjob {
    uint64_t epoch, k, size; /* the batch (fixed) */
    uint8_t *buf;            /* the job's size-byte buffer while it is REMOTE (outside memfd
                              * mode the value goes here; never written in memfd mode) */
    /* the source's fields (its thread's while the job is REMOTE) */
    double t0, deadline; /* when it was asked for; when to give up waiting (set by added) */
    int asked;           /* a job is queued in Redis for it */
    char id[64];         /* the job's entry, when this mount queued it, or "" */
    int announced;       /* a worker said it is stored: fetch now (written under x->lock) */
    double polled;       /* when it was last looked for */
    int fd;              /* memfd mode: the batch file the value goes to, or -1 (exec.c
                          * closes it when the job is freed with one open) */
    int sealable;        /* (its kind: the ops' open_file) */
} bfs_exec_rjob;

/* The job-table operations exec.c offers its source, passed to it at its creation
 * (bfs_exec_remote_open): the source calls the executor only through these. Each takes
 * x->lock itself. */
typedef struct bfs_exec_src_ops {
    /* x->lock, for the source's fields it guards */
    void (*lock)(bfs_exec *x);
    void (*unlock)(bfs_exec *x);

    /* 1 once bfs_exec_destroy began: the source's thread ends. */
    int (*stopping)(bfs_exec *x);

    /* The REMOTE jobs the source handles this round, in the order it handles them, at
     * most max (<= BFS_EXEC_SRC_MAX), each referenced (release them); returns how many.
     * By need: the batches readers wait for first (the oldest first), then prefetches
     * nearest their reader first; when more than max are REMOTE, the last `fair` places
     * go to the jobs that waited longest since their last turn, so none starves.
     * *memfd: whether finished batches go to batch files (memfd mode) now. */
    int (*choose)(bfs_exec *x, bfs_exec_rjob **list, int max, int fair, int *memfd);

    /* Drop the references of a round (choose), then keep the cache within its budget. */
    void (*release)(bfs_exec *x, bfs_exec_rjob **list, int n);

    /* A worker said batch (epoch, k) is stored: its job, if REMOTE, is fetched at its next
     * turn (announced = 1). */
    void (*announced)(bfs_exec *x, uint64_t epoch, uint64_t k);

    /* memfd mode: a new batch file for rj's value (rj->fd, rj->sealable), to be written
     * with pwrite; rj->fd < 0 (a negative errno) when none. */
    void (*open_file)(bfs_exec *x, bfs_exec_rjob *rj);

    /* rj's value is in rj->fd (memfd mode) or rj->buf: the job becomes READY as a computed
     * one would (its readers wake, its cache_dir claim is settled). 0, or -1 when its file
     * could not be sealed (rj->fd is closed then; the caller gives it up). rj is
     * referenced by the caller (a round). */
    int (*done)(bfs_exec *x, bfs_exec_rjob *rj, int memfd);

    /* rj goes to the local workers (RUNNING); its batch file, if any, is closed. */
    void (*give_up)(bfs_exec *x, bfs_exec_rjob *rj);

    /* Count one of the source's failures (BFS_EXEC_SRC_*: bfs_exec_stats' remote_declined,
     * remote_corrupt, remote_errors). */
    void (*count)(bfs_exec *x, int which);
} bfs_exec_src_ops;

#define BFS_EXEC_SRC_MAX 64 /* the most jobs one round may take */
enum { BFS_EXEC_SRC_DECLINED, BFS_EXEC_SRC_CORRUPT, BFS_EXEC_SRC_ERROR };

/* ---- the remote side (exec_remote.c), called by exec.c ---------------------------------- */
typedef struct bfs_exec_remote bfs_exec_remote;

/* bfs_exec_remote_open - the remote side of executor x, whose engine is e, from o->remote,
 * remote_key, remote_wait_ms, remote_fallback (as bfs_exec_set_remote says), connected to
 * Redis when it answers (else *conn_rc and conn_err say why: it connects again later),
 * its thread not started yet. 0, or -ENOMEM, -EINVAL (URL, key), an eventfd's error, with
 * a message in err. */
int bfs_exec_remote_open(bfs_exec *x, bfs_engine *e, const bfs_exec_src_ops *ops,
                         const bfs_pipeline_opts *o, bfs_exec_remote **out, int *conn_rc,
                         char *conn_err, size_t conn_errlen, char *err, size_t errlen);

/* bfs_exec_remote_start - start its thread: 0, or -EAGAIN (then bfs_exec_remote_stop it). */
int bfs_exec_remote_start(bfs_exec_remote *rs);

/* bfs_exec_remote_takes - whether a new job goes REMOTE (workers alive, or not counted
 * yet, or remote_fallback=wait), else to the local workers. Locked (x->lock). */
int bfs_exec_remote_takes(const bfs_exec_remote *rs);

/* bfs_exec_remote_added - job rj became REMOTE: set its t0 and deadline, wake the remote
 * thread. Locked. */
void bfs_exec_remote_added(bfs_exec_remote *rs, bfs_exec_rjob *rj);

/* bfs_exec_remote_stats - fill remote, remote_workers and remote_key_id of st. Locked. */
void bfs_exec_remote_stats(const bfs_exec_remote *rs, bfs_exec_stats *st);

/* bfs_exec_remote_stop - stop its thread (the ops' stopping says 1 by then), close its
 * connections, free it. Not holding x->lock. NULL ok. */
void bfs_exec_remote_stop(bfs_exec_remote *rs);

#endif
