/*
 * group_reset.h — `batchfs group-reset SOURCE -o remote=URL,group=NAME,DATA_OPTIONS`: a clean
 * start for a group of mounts across hosts (docs/scale-out.md, "Dynamic sharding across
 * hosts"). Its claim counters live in Redis for a week, so a run that reuses a group name
 * would find its epochs claimed (opens of next: ENODATA); this deletes them.
 *
 * Neighbours: programs/batchfs_main.c calls it for BFS_MODE_GROUP_RESET (mountopts/); the
 * pipeline's fingerprint comes from the engine (SOURCE and the data options, as a mount
 * computes it), the deletion from engine/claims.h (bfs_claims_reset_remote).
 * tests/mount/remote.sh runs it against a redis-server.
 */
#ifndef BATCHFS_PROGRAMS_GROUP_RESET_H
#define BATCHFS_PROGRAMS_GROUP_RESET_H

#include <stdio.h>

#include "engine/api.h"

/*
 * bfs_group_reset_run - delete the claim counters and given-back lists of group o->group
 * of the pipeline (source, o) in the Redis of o->remote, and say on out which group, which
 * pipeline, which Redis (no password) and how many keys were deleted. Returns 0, or an
 * error after a message on stderr (a source that cannot be opened, Redis unreachable or
 * refusing).
 */
int bfs_group_reset_run(const char *source, const bfs_pipeline_opts *o, FILE *out);

#endif
