/*
 * batchfs_gpu.h — libbatchfs-gpu: batches of a batchfs mount (or of a directory of batch
 * files) delivered into GPU memory, in order, with copies running ahead of the consumer.
 *
 * A loader reads MNT/epoch/N/batch_K files (safetensors; checked with the engine's strict
 * parser), copies each batch's tensors to the device on its own non-blocking stream
 * while the consumer computes, optionally converts u8 images to normalized f16/bf16/f32
 * on the device, and hands out tensor views (name, dtype, shape, strides, pointer) with
 * a CUDA event per batch. Batches of token datasets (metadata kind "tokens",
 * docs/sequences.md) are delivered too: their integer tensors as they are, in the file's
 * order; their shapes may differ from batch to batch (pack=bucket). CUDA's driver API is loaded at
 * run time (dlopen "libcuda.so.1"): the library has no link-time CUDA dependency, and without a
 * driver or a device the same calls hand out host memory (device type BFSG_DEVICE_CPU).
 *
 * Use (errors omitted):
 *
 *     bfsg_loader *l;
 *     bfsg_create(BFSG_API_VERSION, &l);
 *     bfsg_set(l, "rank", "0");  bfsg_set(l, "world", "8");  bfsg_set(l, "dtype", "f16");
 *     bfsg_set_stream(l, my_stream);         // kernels on my_stream wait for each batch
 *     bfsg_open(l, "/mnt/train");
 *     bfsg_batch *b;
 *     while (bfsg_next(l, &b) == 0 && b)     // b valid until the next bfsg_next
 *         train_step(b->tensors[0].data, b->tensors[1].data, my_stream);
 *     bfsg_destroy(l);
 *
 * Threads: one loader is used by one thread at a time (the caller's); the loader runs
 * one background thread of its own. bfsg_batch_retain/bfsg_batch_release and the
 * DLPack deleter may be called from any thread, also after bfsg_destroy.
 *
 * Errors: every int function returns 0 or a negative errno; bfsg_error(l) says what
 * failed, naming the file, the parameter or the CUDA call. Never a signal: files are
 * read with pread, and mapped (copy=register) only where they cannot shrink.
 */
#ifndef BATCHFS_GPU_H
#define BATCHFS_GPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The API version this header describes; bfsg_create refuses another. It changes when a
 * struct's layout or a function's meaning does; new bfsg_dtype values are appended
 * without a change (BFSG_I32 came with token batches, which a version-1 loader refused:
 * a program that never opens token datasets never sees it). */
#define BFSG_API_VERSION                                                                           \
    3 /* 2: batches of multi-field datasets (64 tensors of 8 dims); 3: copy=pool */

#define BFSG_MAX_TENSORS 64 /* a safetensors batch's most (engine/api.h) */
#define BFSG_MAX_DIMS    8

typedef enum bfsg_dtype {
    BFSG_U8 = 0,
    BFSG_F16 = 1,
    BFSG_BF16 = 2,
    BFSG_F32 = 3,
    BFSG_I64 = 4,
    BFSG_I32 = 5, /* token batches' tokens and positions; fields' lengths */
    BFSG_U16 = 6, /* fields of multi-field datasets (u16 tokens) */
    BFSG_U32 = 7
} bfsg_dtype;

typedef enum bfsg_device_type {
    BFSG_DEVICE_CPU = 1, /* host memory (DLPack kDLCPU) */
    BFSG_DEVICE_CUDA = 2 /* device memory (DLPack kDLCUDA) */
} bfsg_device_type;

/* A tensor view. data is a device pointer (CUdeviceptr) on BFSG_DEVICE_CUDA, a host
 * pointer on BFSG_DEVICE_CPU; 256-byte aligned on a device, at least the element size
 * on the host. Strides are in elements (C-contiguous). */
typedef struct bfsg_tensor {
    const char *name; /* "images", "labels", "indices", then the fields' tensors of a
                       * multi-field dataset ("caption", "caption_lengths", ...); token
                       * batches: the file's names ("tokens", "positions", "lengths", ...) */
    bfsg_dtype dtype;
    uint32_t ndim;
    int64_t shape[BFSG_MAX_DIMS];
    int64_t strides[BFSG_MAX_DIMS];
    void *data;
    uint64_t nbytes;
} bfsg_tensor;

/* One delivered batch. Read-only for the caller; valid until the next bfsg_next,
 * bfsg_seek or bfsg_destroy on its loader, or, after bfsg_batch_retain, until the
 * matching bfsg_batch_release. */
typedef struct bfsg_batch {
    uint64_t epoch, index; /* the file epoch/<epoch>/batch_<index> */
    const char *path;      /* that file's path */
    uint32_t n_tensors;    /* images: 3, images, labels, indices (in this order), then
                            * a multi-field dataset's field tensors as delivered, in the
                            * file's header order (bfsg_batch_find by name);
                            * tokens: 1..BFSG_MAX_TENSORS, in the file's data order
                            * (concat: tokens[, positions]; pad, bucket: lengths,
                            * indices, tokens, mask) */
    bfsg_tensor tensors[BFSG_MAX_TENSORS];
    bfsg_device_type device_type;
    int device_id;     /* CUDA ordinal; 0 on the CPU */
    void *ready_event; /* CUevent recorded after the batch's copies and conversion; NULL
                        * on the CPU. The consumer stream already waits on it. */
} bfsg_batch;

typedef struct bfsg_loader bfsg_loader;

/*
 * bfsg_create - a new loader with default parameters. api_version must be
 * BFSG_API_VERSION (the header the caller was compiled with). Returns 0, -EINVAL (out
 * NULL), -EPROTO (another API version: rebuild against this header), -ENOMEM.
 */
int bfsg_create(int api_version, bfsg_loader **out);

/* bfsg_destroy - stop the background thread, free everything not retained; NULL is a
 * no-op. Retained batches stay valid (and their CUDA context alive) until released. */
void bfsg_destroy(bfsg_loader *l);

/* bfsg_error - the last failure's message ("" when none); valid until the next call on
 * l. Never NULL for a non-NULL l. */
const char *bfsg_error(const bfsg_loader *l);

/*
 * bfsg_set - set a named parameter before bfsg_open (values are text):
 *   device        auto (default: CUDA device 0 if a driver and a device exist, else
 *                 the CPU) | cpu | cuda | cuda:N
 *   cuda_library  the driver library to dlopen (default: $BATCHFS_GPU_LIBCUDA, else
 *                 "libcuda.so.1")
 *   epoch_begin   first epoch (default 0)
 *   epoch_end     one past the last epoch (default: the number of epochs listed)
 *   rank, world   deliver batches rank, rank+world, ... of each epoch (default 0, 1),
 *                 the same count on every rank: floor(batches/world); with a mount's own
 *                 shard= option, leave world at 1
 *   depth         batches in flight ahead of the consumer, 1..8 (default: 3 on a CUDA
 *                 device, 2 on the host, as measured in docs/gpu.md)
 *   readers       threads that read a staged batch into its pinned buffer, 1..16, each
 *                 a share of at least 2 MiB (default: half the online CPUs, at most 4):
 *                 one thread's pread ran at 4-6 GB/s on the H200 hosts measured, a tenth
 *                 of the DMA engine's rate
 *   copy          auto | pool | staging | register (CUDA only; default auto): pool maps
 *                 the mount's pool file (gpu_pool_mb=) and registers it once, then copies
 *                 each batch from its window, holding the batch file open until the copy's
 *                 event completed (no host copy, no registration per batch); staging
 *                 preads into pinned buffers; register pins a read-only mapping of the file
 *                 and copies from it (batchfs mounts only: their files cannot shrink):
 *                 cheaper per MB when nothing else runs, but its per-batch registration
 *                 kept copies from overlapping the consumer's kernels on an H200; auto
 *                 takes pool where the mount offers one, else stages (and times both
 *                 paths on the first batch, for bfsg_get_stats). On the CPU files are read
 *                 with pread
 *   dtype         u8 (default: the file's) | f16 | bf16 | f32: convert u8 images
 *   normalize     imagenet | none | m0,m1,m2/s0,s1,s2 (default: imagenet for float)
 *   layout        nhwc | nchw (default: the file's)
 * The conversion gives the values the daemon's own dtype=, normalize= and layout= give.
 * Token batches are never converted: with any of the three set, bfsg_next refuses each
 * of them (-EINVAL, naming the file).
 * Returns 0, -EINVAL (unknown name or bad value; bfsg_error says which), -EBUSY (after
 * bfsg_open).
 */
int bfsg_set(bfsg_loader *l, const char *name, const char *value);

/* bfsg_set_stream - the consumer's CUstream (NULL: the legacy default stream). Each
 * batch's ready event is waited on by this stream in bfsg_next, and released batches are
 * overwritten only after the work this stream had queued at release time. Before
 * bfsg_open; -EBUSY after. */
int bfsg_set_stream(bfsg_loader *l, void *cuda_stream);

/*
 * bfsg_open - open a mount or a directory laid out like one (path/epoch/N/batch_K),
 * count epochs and batches, start the background thread at (epoch_begin, rank).
 * Returns 0; -ENOENT/-ENOTDIR/-EACCES (path or its epoch/ directory), -EBADMSG (a
 * listing that is not epoch/N/batch_K: names the entry), -ENODEV (device=cuda but no
 * usable driver or device: bfsg_error says why), -EPROTO (device=cuda and a CUDA call
 * of the set-up failed, e.g. the kernel's JIT; device=auto falls back to the host
 * instead), -EINVAL (parameters inconsistent with
 * the files, e.g. rank >= world, epoch_begin beyond the listing), -EBUSY (already open).
 */
int bfsg_open(bfsg_loader *l, const char *path);

/*
 * bfsg_seek - the next batch delivered is (epoch, batch), to resume from a checkpoint;
 * batches in flight are dropped. batch must be one of this rank's (batch % world ==
 * rank, batch < the per-rank bound) and epoch in [epoch_begin, epoch_end). Returns 0,
 * -EINVAL.
 */
int bfsg_seek(bfsg_loader *l, uint64_t epoch, uint64_t batch);

/*
 * bfsg_next - the next batch, in order: *out is the batch, or NULL after the last batch
 * of epoch_end - 1. Releases the batch the previous call returned unless it was
 * retained. On the CPU the data is ready; on CUDA the consumer stream already waits on
 * the batch's ready event (host code that reads device memory must synchronize first).
 * Returns 0, or a negative errno: -EBADMSG (a file that is not a valid batch: the error
 * names it and says what is wrong), -EINVAL (a token batch with dtype=, normalize= or
 * layout= set), -EIO and other read errors (naming the file),
 * -EPROTO (a CUDA call failed: named with its CUresult). After an error the next call
 * goes on with the batch after the failed one; bfsg_seek goes back to it.
 */
int bfsg_next(bfsg_loader *l, bfsg_batch **out);

/* bfsg_batch_retain - keep b valid past the next bfsg_next (a fresh buffer replaces it
 * in the ring). Returns 0 or -EINVAL. */
int bfsg_batch_retain(bfsg_batch *b);

/* bfsg_batch_release - drop one retain of b; on the last, its memory returns to the
 * loader (or is freed, once the loader is destroyed). NULL is a no-op. */
void bfsg_batch_release(bfsg_batch *b);

/* bfsg_batch_sync - block the calling thread until b's data is on the device (CPU: a
 * no-op). Returns 0 or -EPROTO. */
int bfsg_batch_sync(bfsg_batch *b);

/* bfsg_batch_wait_stream - make CUstream stream (NULL: legacy default) wait for b's
 * data without blocking the host (DLPack's __dlpack__(stream=)). Returns 0 or -EPROTO. */
int bfsg_batch_wait_stream(bfsg_batch *b, void *stream);

/*
 * bfsg_batch_dlpack - tensor i of b as a DLPack DLManagedTensor (dlpack.h ABI 0.8:
 * DLTensor data/device/ndim/dtype/shape/strides/byte_offset, manager_ctx, deleter). The
 * managed tensor holds a retain of b; its deleter releases it, once, from any thread,
 * also after bfsg_destroy. *out is a DLManagedTensor *. Returns 0, -EINVAL, -ENOMEM.
 */
int bfsg_batch_dlpack(bfsg_batch *b, uint32_t i, void **out);

/* bfsg_batch_find - the index of the tensor called name in b (for bfsg_batch_dlpack), or
 * -1 when b has none (or b or name is NULL). */
int bfsg_batch_find(const bfsg_batch *b, const char *name);

/* What the loader did; counters since bfsg_open. */
typedef struct bfsg_stats {
    uint64_t batches;     /* delivered by bfsg_next */
    uint64_t bytes_read;  /* file bytes moved to the host or device */
    uint64_t host_copies; /* batches the loader copied on the host (pread into a
                           * buffer); 0 for batches copied from a registered mapping */
    uint64_t registered;  /* batches copied from a registered file mapping */
    uint64_t staged;      /* batches copied through pinned staging buffers */
    uint64_t converted;   /* batches whose images were converted */
    uint64_t wait_ns;     /* time bfsg_next waited for the background thread */
    uint64_t register_ns_per_mb, staging_ns_per_mb; /* copy=auto's timings (0: not run or
                                                     * failed) */
    char device[96];                                /* "cpu" or "cuda:N NAME" */
    char copy[16];        /* "read" on the CPU; CUDA: "pool", "staging" or "register"
                           * ("auto" until the first batch was timed) */
    char fallback[256];   /* device=auto on the CPU: why CUDA was not used; copy=auto on a
                           * mount that offers a pool: why it stages instead */
    uint64_t pooled;      /* batches copied from their window of the mount's registered pool
                           * file (copy=pool): no host copy, no registration */
    uint64_t pool_staged; /* copy=pool: batches the daemon found no window for, staged */
} bfsg_stats;

/* bfsg_get_stats - fill *s. Returns 0 or -EINVAL. */
int bfsg_get_stats(const bfsg_loader *l, bfsg_stats *s);

#ifdef __cplusplus
}
#endif
#endif
