/*
 * fs.h — the FUSE adapter: serves an engine's batches as MNT/epoch/N/batch_K, plus
 * MNT/pipeline and MNT/stats, on libfuse's low-level API.
 *
 * Neighbours: programs/batchfs_main.c parses the command line (mountopts/) and calls
 * bfs_fs_run; the service (engine/api.h: the engine, executor, store, claims, autotuner,
 * and the /stats writer) computes the bytes. The only
 * place where engine errors become positive errnos (bfs_err_to_errno).
 */
#ifndef BATCHFS_FS_FS_H
#define BATCHFS_FS_FS_H

#include "mountopts/mountopts.h"

/*
 * bfs_fs_run - validate the source and the mountpoint, mount, serve until unmounted or
 * signalled (SIGINT, SIGTERM, SIGHUP), unmount. Errors before mounting are printed to
 * stderr with what to do. Returns the process exit status (0, or 1 on failure).
 */
int bfs_fs_run(const bfs_mount_args *a);

#endif
