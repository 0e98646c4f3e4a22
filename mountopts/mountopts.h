/*
 * mountopts.h — the batchfs command line: mount and bench modes, `-o` options split
 * between the pipeline (the option table of engine/api.h), batchfs's own mount options, and
 * libfuse/kernel mount options; `-o spec=FILE`; validation before anything is mounted;
 * --help with defaults. Also `batchfs top MNT` (programs/top.h), which mounts nothing.
 *
 * Neighbours: programs/batchfs_main.c calls bfs_mountopts_parse first and mounts only if
 * it succeeds. Unknown options are errors: a typo never silently changes a pipeline.
 */
#ifndef BATCHFS_MOUNTOPTS_MOUNTOPTS_H
#define BATCHFS_MOUNTOPTS_MOUNTOPTS_H

#include <stdint.h>
#include <stdio.h>

#include "engine/api.h"

enum {
    BFS_MODE_MOUNT,
    BFS_MODE_BENCH,
    BFS_MODE_HELP,
    BFS_MODE_VERSION,
    BFS_MODE_TOP,
    BFS_MODE_WORKER,
    BFS_MODE_GROUP_RESET /* `batchfs group-reset SOURCE -o remote=...,group=...` */
};

#define BFS_TOP_INTERVAL_DEFAULT 1.0   /* seconds between two samples of `batchfs top` */
#define BFS_TOP_INTERVAL_MIN     0.01  /* seconds; below this the view would only burn CPU */
#define BFS_TOP_INTERVAL_MAX     86400 /* seconds */

typedef struct bfs_mount_args {
    int mode;
    char *source;     /* as given */
    char *mountpoint; /* absolute when it exists; top mode: MNT as given */
    bfs_pipeline_opts pipe;
    char *fuse_opts;   /* comma list for libfuse (-o), malloc'ed; never NULL after parse */
    int foreground;    /* -f */
    int debug;         /* -d (implies -f) */
    int single_thread; /* -s */
    int fuse_threads;  /* fuse_threads=N: FUSE request threads (default 32) */
    int passthrough;   /* passthrough=auto (1, default) | off (0) */
    char *log;         /* log=FILE|syslog, malloc'ed; NULL: syslog in the background */
    int allow_other;   /* allow_other given (the zero-copy socket checks it later) */
    /* bench mode */
    uint64_t bench_batches, bench_epoch;
    int bench_reference, bench_json;
    /* top mode: `batchfs top MNT` or `batchfs --top MNT` */
    double top_interval; /* --interval S (default BFS_TOP_INTERVAL_DEFAULT) */
    int top_iterations;  /* -n N; 0: until stopped */
    /* worker mode: `batchfs worker SOURCE -o remote=...` (bench_batches: --batches N) */
    char *worker_name; /* --name NAME, or NULL */
} bfs_mount_args;

/*
 * bfs_mountopts_parse - parse argv. Returns 0; -EINVAL for a usage error or a bad option
 * (err: one line naming the option, the bad value and the allowed values); -ENOENT for
 * an unknown option; an errno for an unreadable spec file; -EINVAL for a spec file that is
 * not a regular file (FIFO, device, directory: refused by kind, never blocked on) or holds
 * a NUL byte (err: FILE:LINE:COLUMN); -EFBIG for one over 1 MiB. On failure a is freed.
 */
int bfs_mountopts_parse(int argc, char **argv, bfs_mount_args *a, char *err, size_t errlen);

/* bfs_mountopts_free - release a's strings; accepts a zeroed struct. */
void bfs_mountopts_free(bfs_mount_args *a);

/* bfs_mountopts_help - the full --help text. */
void bfs_mountopts_help(FILE *f);

#endif
