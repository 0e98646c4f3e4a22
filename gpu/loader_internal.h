/*
 * loader_internal.h — libbatchfs-gpu's loader as its three files share it: loader.c (the
 * batch sequence, the ring of slots and its thread), copy.c (the copy paths) and schema.c
 * (what a batch file holds: its checked plan, the tensor views, the device layout). The
 * structures (core, slot, the loader), the limits and the helpers they call across.
 * Internal to gpu/.
 */
#ifndef BATCHFS_GPU_LOADER_INTERNAL_H
#define BATCHFS_GPU_LOADER_INTERNAL_H

#include "gpu/batchfs_gpu.h"
#include "gpu/convert.h"
#include "gpu/cuda_api.h"
#include "gpu/pool.h"
#include "base/err.h"
#include "engine/api.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define MAX_DEPTH  8
#define DEPTH_CUDA 3 /* copies overlap the consumer's kernels and each other */
/* host: 2, measured (tests/bench/bench_gpu.sh, 9.6 MB batches): 0.91-0.96 of a read()
 * loop's bytes/s, 1.20-1.31 with a consumer reading every byte; depth 3 rotates more
 * buffers than the cache holds (0.71-0.81 bare) */
#define DEPTH_HOST       2
#define MAX_READERS      16
#define READERS_DEFAULT  4          /* staging readers: at most this, at most half the CPUs */
#define READ_SHARE       (2u << 20) /* a staging reader's least share of a batch */
#define DEV_ALIGN        256u       /* device tensor alignment (cuMemAlloc's own is 256) */
#define HOST_ALIGN       4096u      /* host buffers: file offsets keep their alignment mod 4096 */
#define ERRLEN           1024
#define FUSE_SUPER_MAGIC 0x65735546 /* linux/magic.h */
#define NAME_CAP         64         /* bytes of a token batch's tensor name, with its NUL */

enum { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_OUT };
enum { COPY_READ, COPY_STAGING, COPY_REGISTER, COPY_AUTO, COPY_POOL };

typedef struct core {
    atomic_int refs; /* the loader's, plus one per detached slot */
    int cuda;        /* 0: host memory */
    bfsg_cuda cu;
    CUdevice dev;
    int dev_id;
    CUcontext ctx; /* the device's primary context (shared with the runtime, PyTorch) */
    CUstream copy; /* the loader's non-blocking copy stream */
    CUmodule mod;
    CUfunction fn;
    CUdeviceptr lut;
    CUstream consumer; /* the loader's consumer stream (NULL: the legacy stream) */
    bfsgi_pool pool;   /* copy=pool: the mount's pool file, registered once */
    /* slots that were retained and came back: reused for the next detach, so a caller
     * that holds each batch a little longer (DLPack) costs no allocation per batch */
    pthread_mutex_t spare_lock;
    struct slot *spare[MAX_DEPTH]; /* guarded by spare_lock */
    int n_spare;                   /* guarded by spare_lock */
    int closed;                    /* guarded by spare_lock: the loader is gone */
} core;

typedef struct slot {
    bfsg_batch pub; /* first: a bfsg_batch * is a slot * */
    core *core;
    atomic_int refs;     /* the loader's hold while OUT, plus the caller's retains */
    atomic_int detached; /* 1: out of the ring; the last release frees it */
    int state;           /* SLOT_*, guarded by the loader's lock */
    uint64_t pos, gen;   /* guarded by the loader's lock */
    int rc;              /* the fill's result; err says why */
    char err[ERRLEN];
    char path[PATH_MAX];
    char names[BFSG_MAX_TENSORS][NAME_CAP]; /* token batches and fields: the views' names */
    uint8_t *host;                          /* CPU: the file's data region; CUDA: pinned staging */
    size_t host_cap;
    uint8_t *conv; /* CPU conversion output */
    size_t conv_cap;
    CUdeviceptr dptr;
    size_t dcap;
    CUevent ready, done;
    int ready_recorded, done_recorded;
    void *map; /* copy=register: the mapping still registered */
    size_t map_len;
    int lease_fd; /* copy=pool: the batch file held open until its copy completed, or -1 */
} slot;

struct bfsg_loader {
    core *core;
    char err[ERRLEN];
    /* parameters (before bfsg_open) */
    char device[32], cuda_library[PATH_MAX], dtype[16], normalize[128], layout[16];
    int copy_req;
    uint64_t epoch_begin, epoch_end, rank, world;
    int epoch_end_set, depth; /* depth 0: DEPTH_CUDA or DEPTH_HOST */
    int readers;              /* readers=N: threads that pread a staged batch (0: default) */
    CUstream consumer;
    /* after bfsg_open */
    int open;
    char root[PATH_MAX];
    uint64_t n_epochs, n_batches, per_rank, total;
    int immutable; /* a batchfs mount: files never shrink, mapping them is safe */
    int copy;      /* COPY_*: the path in use (COPY_AUTO while calibrating) */
    bfsgi_convert conv;
    bfs_st_file *stf; /* the producer's parse buffer */
    pthread_t thread;
    int thread_started;
    /* pipeline, guarded by lock */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int stop;
    slot *ring[MAX_DEPTH];
    uint64_t next_pos, produce_pos, gen;
    slot *out;
    bfsg_stats st;
};

static inline size_t round_up(size_t v, size_t a)
{
    return (v + a - 1) / a * a;
}

/* cuda calls from a thread that may have another context current (the caller's) */
static inline void ctx_push(core *c)
{
    if (c->cuda)
        c->cu.CtxPushCurrent(c->ctx);
}
static inline void ctx_pop(core *c)
{
    CUcontext prev;
    if (c->cuda)
        c->cu.CtxPopCurrent(&prev);
}

/* the engine's formatter: message into the loader's or the slot's err, rc returned */
#define seterr(l, rc, ...)    bfs_errf(rc, (l)->err, sizeof(l)->err, __VA_ARGS__)
#define slot_errf(s, rc, ...) bfs_errf(rc, (s)->err, sizeof(s)->err, __VA_ARGS__)

/* What one batch file holds: the checked header and where each tensor lies. The
 * tensors point into the producer's parse buffer: used before the next file is parsed. */
typedef struct file_plan {
    int tokens;          /* a token batch: t[0, n) delivered as they are, no conversion */
    uint32_t n;          /* tensors in t: images: 3 + the field tensors */
    bfs_st_batch_desc d; /* images: the descriptor; tokens: epoch and batch_index only */
    uint64_t size, lo;   /* file size; the 4096-aligned start of the region read */
    const bfs_st_tensor *t[BFSG_MAX_TENSORS]; /* images, labels, indices, fields (header
                                                 order); tokens: data order */
    uint64_t out_shape[4];
    uint64_t out_bytes; /* images bytes as delivered */
    int out_nchw;
} file_plan;

/* bfsgi_parse_u64 - s in plain decimal (digits only). 0 with *v, or -EINVAL. */
int bfsgi_parse_u64(const char *s, uint64_t *v);

/* bfsgi_pread_full - len bytes at off of fd into dst, or an error in s->err (copy.c). */
int bfsgi_pread_full(slot *s, int fd, void *dst, size_t len, uint64_t off);

/* bfsgi_choose_copy - the copy path for the loader's device (l->copy), at bfsg_open; for
 * copy=auto over a pool it cannot use, why in l->st.fallback. 0, or an error in l->err
 * (copy.c). */
int bfsgi_choose_copy(bfsg_loader *l);

/* bfsgi_fill_host - slot s from batch file fd, planned as fp, on the host (copy.c). */
int bfsgi_fill_host(bfsg_loader *l, slot *s, int fd, const file_plan *fp);

/* bfsgi_fill_cuda - slot s from batch file fd to the device: from `window` (copy=pool),
 * a registered mapping (use_register) or pinned staging; the host time taken in
 * *host_ns. The caller's context current. 0, or an error in s->err (copy.c). */
int bfsgi_fill_cuda(bfsg_loader *l, slot *s, int fd, const file_plan *fp, int use_register,
                    const uint8_t *window, uint64_t *host_ns);

/* bfsgi_calibrate - copy=auto after the first batch: both paths timed, staging kept
 * (copy.c). */
void bfsgi_calibrate(bfsg_loader *l, slot *s, int fd, const file_plan *fp);

/* bfsgi_slot_unmap - what a slot's last copy held: the pool lease closed and a registered
 * mapping unregistered and unmapped, after that copy finished (copy.c). */
void bfsgi_slot_unmap(slot *s);

/* bfsgi_plan_file - check batch file fd (of slot s, which names its path) as batch k of
 * epoch and plan its tensors into *fp: 0, or -EBADMSG, -EINVAL, -ENOMEM or the read's
 * errno with s->err (schema.c). */
int bfsgi_plan_file(bfsg_loader *l, slot *s, int fd, uint64_t epoch, uint64_t k, file_plan *fp);

/* bfsgi_fill_views - the views of the batch in s: tensor i of fp at at[i] (schema.c). */
void bfsgi_fill_views(bfsg_loader *l, slot *s, const file_plan *fp, uint8_t *const at[]);

/* bfsgi_dev_layout - where each tensor of fp goes in a slot's device buffer, and its size
 * (schema.c). */
void bfsgi_dev_layout(const bfsg_loader *l, const file_plan *fp, size_t off[BFSG_MAX_TENSORS + 1],
                      size_t *total);

#endif
