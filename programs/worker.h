/*
 * worker.h — `batchfs worker SOURCE -o remote=redis://...`: compute batches for trainer
 * mounts on other hosts (docs/scale-out.md).
 *
 * A worker opens SOURCE with the pipeline options like a mount would, so its fingerprint
 * is the one of every mount with the same dataset and data-changing options, and serves
 * that pipeline's job stream only: it takes a job (a dead worker's first, after
 * remote_claim_ms), computes the batch with the engine's executor unless it is stored
 * already, stores it in Redis for remote_ttl seconds (authenticated with remote_key=, if
 * given), acknowledges, announces. A batch it cannot compute from its own copy or with its
 * own resources, or that holds a substitute for a sample bad here, is declined instead:
 * mounts compute it themselves. Jobs whose askers no longer wait are skipped. Jobs of
 * pipelines that no worker serves are named in the log with the options that differ.
 * Heartbeats (every second, a thread of their own) let mounts count the live workers; a
 * stopping worker leaves their set at once.
 *
 * Neighbours: programs/batchfs_main.c calls bfs_worker_run for BFS_MODE_WORKER
 * (mountopts/); engine/remote/remote.h is the transport, engine/exec.h computes.
 * tests/mount/remote.sh runs workers against trainer mounts and a redis-server.
 */
#ifndef BATCHFS_PROGRAMS_WORKER_H
#define BATCHFS_PROGRAMS_WORKER_H

#include <stdio.h>

#include "engine/api.h"

/*
 * bfs_worker_run - serve until SIGINT or SIGTERM (the jobs in hand, at most two, are
 * finished first, after leaving the set of live workers), or until `batches` jobs are done
 * (0: no limit). name: the consumer name in Redis (NULL: HOST:PID). Logs to log, one
 * timestamped line per event. Returns 0, or an error after logging it (no source, a bad
 * remote_key, a refused pipeline, Redis unreachable at start or refusing the password;
 * BFS_E_CHANGED when its dataset changed in place under it, after declining the job).
 */
int bfs_worker_run(const char *source, const bfs_pipeline_opts *o, const char *name,
                   unsigned long batches, FILE *log);

#endif
