/*
 * ram.h — how much memory a mount may use for batches, and whether its options fit in it.
 *
 * The RAM budget (ram_mb=, by default half of what this process could still use) bounds
 * what the autotuner gives to prefetch and the batch cache (tuner.h). "What this process
 * could still use" is the smaller of the host's MemAvailable and the room left under its
 * cgroup's memory limit: inside a container MemAvailable speaks of the whole host, and a
 * budget past the cgroup limit ends with the OOM killer. The options themselves set a
 * floor: a mount holds BFS_RAM_MIN_BATCHES batches at least whatever the budget says, so
 * batch sizes that cannot fit are refused before mounting, with a message that names the
 * options at fault (a 12.9 GB batch would otherwise OOM-kill the daemon on its first
 * read).
 *
 * Neighbours: the service (engine/service.c: the mount, --bench, `batchfs worker`) calls
 * bfs_ram_probe once, then bfs_ram_budget. Nothing here allocates or keeps state.
 */
#ifndef BATCHFS_ENGINE_RAM_H
#define BATCHFS_ENGINE_RAM_H

#include <stddef.h>
#include <stdint.h>

#include "engine/pipeline.h"

/* Batches a mount holds at least, whatever its prefetch and cache: the batch a reader has
 * open, and the buffer the next one is computed into (exec.c keeps two freed buffers
 * whatever the budget; under FUSE passthrough the open batch lives in its sealed file while
 * its buffer goes back to the pool). More readers, prefetch and the cache take more; the
 * autotuner cuts those to the budget (tuner.c, fit_ram), these two it cannot. */
#define BFS_RAM_MIN_BATCHES 2

/* Test hook: when set, bfs_ram_probe(NULL, ...) reads cgroup files under this directory
 * instead of /sys/fs/cgroup (tests/mount/options.sh fakes an 8 GiB memory.max with it). */
#define BFS_RAM_CGROUP_ROOT_ENV "BATCHFS_CGROUP_ROOT"

/* What the host and this process's cgroup allow. Sizes in bytes; 0: unknown / no limit. */
typedef struct bfs_ram_host {
    uint64_t total;     /* physical memory (MemTotal) */
    uint64_t available; /* MemAvailable */
    uint64_t cg_max;    /* the tightest memory limit of this process's cgroup and its
                         * ancestors: cgroup v2 memory.max, or v1 memory.limit_in_bytes */
    uint64_t cg_room;   /* the least, over the cgroups with a limit, of limit minus usage
                         * (usage less inactive file pages, which the kernel reclaims
                         * before it OOM-kills: docker's and kubelet's "working set") */
    char cg_file[32];   /* "memory.max" or "memory.limit_in_bytes" (for messages) */
} bfs_ram_host;

/*
 * bfs_ram_probe - read the host's memory (meminfo, e.g. "/proc/meminfo") and this
 * process's cgroup limit: self_cgroup (e.g. "/proc/self/cgroup") names the process's
 * cgroup path, looked up under cgroup_root (cgroup v2: ROOT/PATH/memory.max; v1:
 * ROOT/memory/PATH/memory.limit_in_bytes), then under each parent up to ROOT itself (limits
 * of ancestors apply too, and in a container without a cgroup namespace ROOT is the
 * container's own cgroup). "max" (v2) and values >= 2^60 (v1's "no limit") mean none.
 * NULL arguments: the real files, with cgroup_root from $BATCHFS_CGROUP_ROOT if set, else
 * "/sys/fs/cgroup". Files that cannot be read leave their fields 0; never fails.
 */
void bfs_ram_probe(const char *meminfo, const char *self_cgroup, const char *cgroup_root,
                   bfs_ram_host *h);

/* bfs_ram_default_budget - ram_mb's default, bytes: half of the smaller of MemAvailable
 * and the cgroup room (of physical memory when neither is known; 0 when nothing is). */
uint64_t bfs_ram_default_budget(const bfs_ram_host *h);

/*
 * bfs_ram_budget - the RAM budget of a pipeline whose largest batch is batch_bytes: o's
 * ram_mb, or the default. Refuses, with -ENOMEM and one line in err naming the options
 * (batch, size, dtype), the batch size, the limit that binds (ram_mb, its default, the
 * physical memory or the cgroup limit) and what to change, when BFS_RAM_MIN_BATCHES
 * batches exceed the budget, the physical memory or the cgroup limit; with -EINVAL and
 * one line naming the batch size when a fixed cache_mb (> 0) is smaller than one batch
 * (the cache would keep nothing; 0, no batch cache, is allowed). Returns 0 with
 * *budget set; a non-empty note (at most notelen bytes; note may be NULL) when ram_mb
 * exceeds the physical memory or the cgroup limit (the budget is kept as given).
 */
int bfs_ram_budget(const bfs_pipeline_opts *o, uint64_t batch_bytes, const bfs_ram_host *h,
                   uint64_t *budget, char *note, size_t notelen, char *err, size_t errlen);

#endif
