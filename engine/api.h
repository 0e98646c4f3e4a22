/*
 * api.h — the engine's one public header: all that fs/, mountopts/, gpu/ and the programs
 * may use of engine/. `make check-layering` refuses any other engine header outside
 * engine/ (tests/ excepted: unit tests reach the parts they test).
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

#endif
