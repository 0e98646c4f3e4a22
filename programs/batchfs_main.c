/*
 * batchfs — the daemon's entry point: parse the command line (mountopts/), then mount
 * (fs/fs.c), run the in-process benchmark (programs/bench.c), watch a mount
 * (programs/top.c), serve mounts on other hosts (programs/worker.c) or reset a group's
 * claims in Redis (programs/group_reset.c).
 *
 * Exit status: 0 success, 1 failure, 2 usage or option error.
 */
#include "programs/bench.h"
#include "fs/fs.h"
#include "programs/group_reset.h"
#include "programs/top.h"
#include "mountopts/mountopts.h"
#include "base/io.h"

#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    bfs_mount_args a;
    char err[2048];
    /* every batch file a mount keeps is a descriptor (the executor budgets them from
     * this limit) */
    bfs_fd_limit_raise();
    /* libfuse's multi-threaded loop ends with pthread_cancel of its threads, and glibc
     * loads libgcc_s at the first cancel: with every descriptor in use that dlopen fails
     * and glibc aborts ("libgcc_s.so.1 must be installed for pthread_cancel to work"),
     * turning an unmount into SIGABRT. Loaded now, that dlopen finds it loaded and needs
     * no descriptor. (Not found: the cancel would need it anyway; nothing to do here.) */
    dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_NODELETE);
    if (bfs_mountopts_parse(argc, argv, &a, err, sizeof err)) {
        fprintf(stderr, "batchfs: %s\n", err);
        return 2;
    }
    int status;
    switch (a.mode) {
    case BFS_MODE_HELP:
        bfs_mountopts_help(stdout);
        return 0;
    case BFS_MODE_VERSION:
        printf("batchfs %s\n", BATCHFS_VERSION);
        return 0;
    case BFS_MODE_BENCH: {
        bfs_bench_opts b = {.batches = a.bench_batches,
                            .epoch = a.bench_epoch,
                            .reference = a.bench_reference,
                            .json = a.bench_json};
        status = bfs_bench_run(a.source, &a.pipe, &b, stdout) ? 1 : 0;
        break;
    }
    case BFS_MODE_TOP:
        status = bfs_top_run(a.mountpoint, a.top_interval, a.top_iterations, stdout) ? 1 : 0;
        break;
    case BFS_MODE_GROUP_RESET:
        status = bfs_group_reset_run(a.source, &a.pipe, stdout) ? 1 : 0;
        break;
    case BFS_MODE_WORKER:
        status = bfs_worker_run(a.source, &a.pipe, a.worker_name, a.bench_batches, stderr) ? 1 : 0;
        break;
    default:
        status = bfs_fs_run(&a);
    }
    bfs_mountopts_free(&a);
    return status;
}
