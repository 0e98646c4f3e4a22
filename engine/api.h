/*
 * api.h — the engine's one public header: all that fs/, mountopts/, gpu/ and the programs
 * may use of engine/. `make check-layering` refuses any other engine header outside
 * engine/ (tests/ excepted: unit tests reach the parts they test).
 *
 * Declared here itself: the service (engine/service.c, below), the composition root that
 * the mount, `batchfs worker`, --bench and the fault tests build the pipeline with.
 *
 * What it opens, by caller:
 *   - every caller: the version (version.h), pipeline options and their fingerprint
 *     (pipeline.h);
 *   - the mount (fs/): the dataset and one batch from its samples (engine.h), the executor
 *     that computes, caches and prefetches batches (exec.h), the autotuner (tuner.h), the
 *     RAM budget (ram.h), the claim counters of group= (claims.h);
 *   - libbatchfs-gpu (gpu/): the batch file format (safetensors.h) and the output formats
 *     it converts to on the host (augment.h);
 *   - the programs: the .bfs format and the packer (dataset/bfs.h, dataset/pack.h), JPEG
 *     headers (dataset/jpeg.h) and the image probes (dataset/image.h) for mkbatchfs and
 *     --bench; the sources (dataset/source.h) for --bench; the Redis transport
 *     (remote/remote.h) for `batchfs worker`.
 *
 * Not a sealed facade yet: those headers bring their own includes along, so the resampler's
 * types (resize.h, through augment.h), the packer's records and shards (dataset/record.h,
 * dataset/shard.h, through pack.h) and the cache's headers (cache/store.h through exec.h,
 * cache/samplecache.h through engine.h) reach every includer too.
 *
 * Not included at all: the epoch plan (plan.h), the per-sample RNG (rng.h), the decoder
 * (decode.h), the resampler's internals (resize_internal.h) and ImageFolder scanning
 * (dataset/folder.h): the mount reaches them only through bfs_engine and the executor.
 */
#ifndef BATCHFS_ENGINE_API_H
#define BATCHFS_ENGINE_API_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/version.h"
#include "engine/pipeline.h"
#include "engine/engine.h"
#include "engine/exec.h"
#include "engine/tuner.h"
#include "engine/ram.h"
#include "engine/claims.h"
#include "engine/safetensors.h"
#include "engine/augment.h"
#include "engine/dataset/bfs.h"
#include "engine/dataset/pack.h"
#include "engine/dataset/jpeg.h"
#include "engine/dataset/image.h"
#include "engine/dataset/source.h"
#include "engine/remote/remote.h"

/* ---- the service (engine/service.c): the composition root ------------------------------
 * One object builds the whole pipeline service from the parsed options (the engine, the
 * RAM budget, the host-wide store of cache_dir=, the claims of group=, the executor, its
 * remote side and the autotuner), owns every one of their lifetimes, and writes the one
 * /stats document. FUSE-free: the mount (fs/fs.c), `batchfs worker` (programs/worker.c),
 * `batchfs --bench` (programs/bench.c) and the fault tests use it, each adding only its
 * own front.
 *
 * Two phases, because a mount goes to the background in between (fork keeps no thread):
 *   OPEN  (bfs_service_open): everything a user can get wrong, checked while stderr is
 *         still the terminal: the engine (the dataset and the options), the RAM budget,
 *         the caller's own checks (cfg.check: the mountpoint), the store, the cache size,
 *         the group's claims, the /pipeline text. No thread is started.
 *   START (bfs_service_start): the executor's workers, the store attached, the remote
 *         side (remote=), the default prefetch depth and the autotuner (a mount).
 * bfs_service_close undoes both, in reverse (claims taken ahead go back to the group).
 */
typedef struct bfs_service bfs_service;

/* What a service serves: a mount (all of it: claims with group=, the remote side with
 * remote=, prefetch, the autotuner, the cache sized from the RAM budget), or compute only
 * (the engine, the store and the executor: `batchfs worker`, --bench, tests). */
enum { BFS_SERVICE_MOUNT = 0, BFS_SERVICE_COMPUTE = 1 };

typedef struct bfs_service_cfg {
    const char *source;            /* the dataset (a .bfs, a folder, a mixture's list) */
    const bfs_pipeline_opts *pipe; /* parsed and finished; must outlive the service */
    int role;                      /* BFS_SERVICE_MOUNT or BFS_SERVICE_COMPUTE */
    /* where the engine's notes and the service's warnings go ("TAG: ..."; NULL: nowhere) */
    FILE *notes;
    const char *tag;
    /* optional: run after the pipeline's checks, before anything outside the process is
     * made (the store's directory, the group's file); nonzero fails the open (it has said
     * why: err stays empty) */
    int (*check)(void *arg);
    void *check_arg;
    /* BFS_SERVICE_COMPUTE: the workers (<= 0: online CPUs) and the finished-batch cache,
     * in batches of the largest size (0: none kept) */
    int threads;
    int cache_batches;
    /* tests: the store's durability (a bfs_store_sync; 0: none, as cache_dir= has), and
     * a store that cannot be opened is left out (batches are computed) instead of failing */
    int store_sync;
    int store_optional;
} bfs_service_cfg;

/* Where bfs_service_open failed (*failed_at). */
enum { BFS_SERVICE_AT_ENGINE = 1, BFS_SERVICE_AT_CHECK, BFS_SERVICE_AT_OTHER };

/*
 * bfs_service_open - the OPEN phase (above). Returns 0 with *out set, or an error with one
 * line in err naming the option, file or limit at fault and what to do (no "batchfs: "
 * prefix; empty when cfg.check failed), and *failed_at (may be NULL) set.
 */
int bfs_service_open(const bfs_service_cfg *cfg, bfs_service **out, int *failed_at, char *err,
                     size_t errlen);

/*
 * bfs_service_start - the START phase (above), in the process that serves. Returns 0, or
 * an error with one line in err ("cannot start workers: ...", a remote= error). Warnings
 * (remote_fallback=local while Redis is down, an autotuner that did not start) go to
 * cfg.notes.
 */
int bfs_service_start(bfs_service *s, char *err, size_t errlen);

/* bfs_service_shutdown - wake every waiter on a batch with -ESHUTDOWN and refuse new work
 * (unmount); any thread, any time after start. */
void bfs_service_shutdown(bfs_service *s);

/* bfs_service_stop - stop the autotuner and the executor and close the store (START's
 * undo and the store: --bench, before timing its reference); the engine stays. All
 * batches must have been released. */
void bfs_service_stop(bfs_service *s);

/* bfs_service_close - stop what runs, give back the claims taken ahead, close the store
 * and the claims, free the engine and s. Accepts NULL. */
void bfs_service_close(bfs_service *s);

/* The parts, for the fronts' own calls. */
bfs_engine *bfs_service_engine(bfs_service *s);
bfs_exec *bfs_service_exec(bfs_service *s); /* NULL before start */

/* bfs_service_pipeline - the text of MNT/pipeline (made at open). */
const char *bfs_service_pipeline(const bfs_service *s, size_t *len);

/* bfs_service_pid_alive - is reader key (a pid) alive: its process exists (EPERM: another
 * user's)? The alive function of the executor's reader table. */
int bfs_service_pid_alive(uint64_t key);

/*
 * bfs_service_next_claim - the claim for an open of epoch/N/next (group=): the oldest one
 * taken ahead for epoch N, else the group's next; then, while the prefetch depth d (the
 * executor's, from prefetch= or the autotuner; at most BFS_SERVICE_AHEAD_MAX) allows,
 * more are taken ahead and their batches prefetched, so that a reader opening next one
 * file after another finds each computed instead of waiting a whole batch per open. Taking
 * ahead takes batches from the group's other mounts: only a mount whose next is being
 * opened does so, at most d per epoch, and what it holds goes back untried at close (an
 * epoch's end is uneven by at most d batches per mount). 0, -ENODATA (counted: /stats
 * group.exhausted) or an error of bfs_claims_take.
 */
#define BFS_SERVICE_AHEAD_MAX 16
int bfs_service_next_claim(bfs_service *s, uint64_t epoch, bfs_group_claim *c);

/* The plan, for names and sizes (never computing a batch): bfs_engine_batches,
 * bfs_engine_batch_bytes, bfs_engine_batch_len, bfs_engine_fingerprint of the engine. */
uint64_t bfs_service_batches(const bfs_service *s);
uint64_t bfs_service_batch_bytes(const bfs_service *s, uint64_t epoch, uint64_t k);
uint32_t bfs_service_batch_len(const bfs_service *s, uint64_t epoch, uint64_t k);
uint64_t bfs_service_fingerprint(const bfs_service *s);

/* Batches, for a front: bfs_exec_get_as for reader pid (alive: bfs_service_pid_alive),
 * bfs_exec_get_cancel, bfs_exec_cancel_wait, bfs_exec_consumed and bfs_exec_set_memfd of
 * the executor (exec.h; after start). */
int bfs_service_get_as(bfs_service *s, uint64_t pid, uint64_t epoch, uint64_t k,
                       bfs_exec_cancel *cancel, bfs_batch **out, char *err, size_t errlen);
int bfs_service_get_cancel(bfs_service *s, uint64_t epoch, uint64_t k, bfs_exec_cancel *cancel,
                           bfs_batch **out, char *err, size_t errlen);
void bfs_service_cancel_wait(bfs_service *s, bfs_exec_cancel *c);
void bfs_service_consumed(bfs_service *s, uint64_t epoch, uint64_t k);
void bfs_service_set_memfd(bfs_service *s, int on, int huge);
/* bfs_service_huge_files - batch files live on the private huge-page tmpfs (stats). */
int bfs_service_huge_files(bfs_service *s);

/* bfs_service_has_group - group= is set (epoch/N/next exists). bfs_service_claim_return,
 * bfs_service_claim_give_back - bfs_claims_return / bfs_claims_give_back of the group. */
int bfs_service_has_group(const bfs_service *s);
void bfs_service_claim_return(bfs_service *s, const bfs_group_claim *c);
void bfs_service_claim_give_back(bfs_service *s, const bfs_group_claim *c);

/* What the front counts, for /stats (the mount's requests, passthrough, group opens). */
typedef struct bfs_service_front {
    uint64_t served;       /* batches handed to readers */
    uint64_t opened;       /* batch files opened */
    uint64_t opened_bytes; /* and their sizes */
    uint64_t reads, bytes, read_errors, interrupted;
    uint64_t claims_served; /* opens of epoch/N/next that served a batch */
    int pt_active;          /* passthrough in use */
    uint64_t pt_opens;      /* batch files opened in passthrough mode */
    unsigned backing_files; /* backing files registered now */
} bfs_service_front;

/*
 * bfs_service_stats - the /stats document (docs/stats.md: JSON, fields in a fixed order,
 * read by tests/mount/ scripts and `batchfs top`) of the service now with the front's
 * counters f, in *out (malloc'd, the caller frees; NULL when out of memory) of *len bytes.
 */
void bfs_service_stats(bfs_service *s, const bfs_service_front *f, char **out, size_t *len);

#endif
