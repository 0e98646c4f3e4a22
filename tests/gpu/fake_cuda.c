/*
 * fake_cuda.c — a fake libcuda.so.1 for the test suite: the driver API subset of
 * gpu/cuda_api.h implemented on host memory, so that every CUDA branch of
 * libbatchfs-gpu runs in `make test` on machines without a GPU. Selected through the
 * library's search path (parameter cuda_library= or $BATCHFS_GPU_LIBCUDA).
 *
 * What it checks, like the real driver (or stricter):
 * - a current context for every call that needs one (thread-local, push/pop/set), so a
 *   thread that forgot to make the context current fails as on a GPU;
 * - device pointers are host addresses moved out of the canonical address range: host
 *   code that dereferences one crashes, as it would on a device; copies and kernels must
 *   stay inside an allocation;
 * - cuMemHostRegister touches every page (pinning), honours READ_ONLY only where the
 *   attribute says so; unregister of an unknown pointer fails;
 * - PTX handed to cuModuleLoadData must declare .version/.target and the entry asked for.
 * Stream work runs at enqueue time (in order, so ordering is trivially kept); events
 * remember whether they were recorded.
 *
 * Knobs (environment): FAKE_CUDA_DEVICES=N (default 1), FAKE_CUDA_INIT_FAIL=1 (cuInit
 * returns CUDA_ERROR_NO_DEVICE), FAKE_CUDA_RO_REGISTER=0 (attribute 113 is 0),
 * FAKE_CUDA_FAIL=SYMBOL:N (the Nth call of SYMBOL returns CUDA_ERROR_OUT_OF_MEMORY),
 * FAKE_CUDA_DEFER=1 (copies from registered host memory run late, as a busy device's do:
 * queued until an event recorded after them is synchronized, or a stream synchronization,
 * kernel launch, free or unregister, so that a loader that lets the memory change before
 * its copy's event completed gets other bytes; counted in `deferred`).
 * Counters: fake_cuda_counter("name") (dlsym it), names in the table below.
 *
 * Thread-safe like the real driver: the loader's producer thread allocates, registers and
 * copies while its consumer copies back and reads counters, so the shared state below is
 * guarded by mu (the counters a lock-free path bumps are read and written atomically).
 */
#include "gpu/cuda_api.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEV_OFFSET (1ull << 46) /* host address + this: non-canonical on x86-64 */
#define MAX_ALLOCS 4096

enum {
    E_INVALID_VALUE = 1,
    E_OUT_OF_MEMORY = 2,
    E_NOT_INITIALIZED = 3,
    E_NO_DEVICE = 100,
    E_INVALID_DEVICE = 101,
    E_INVALID_IMAGE = 200,
    E_INVALID_CONTEXT = 201,
    E_HOST_MEMORY_NOT_REGISTERED = 713,
    E_NOT_FOUND = 500,
    E_NOT_SUPPORTED = 801,
};

/* counters, by name: guarded by mu; streams_live, events_live, modules_live, launches,
 * wait_event and wait_unrecorded are changed with __atomic instead, read under mu */
/* clang-format 14 reflows this list differently on every pass: left as written */
/* clang-format off */
#define COUNTERS(X)                                                                     \
    X(dev_allocs) X(dev_live) X(host_live) X(registered_live) X(register_calls)         \
    X(streams_live) X(events_live) X(ctx_refs) X(modules_live) X(htod_pinned)           \
    X(htod_pageable) X(htod_bytes) X(launches) X(wait_event) X(wait_unrecorded) X(deferred)
/* clang-format on */
static struct {
#define X(n) unsigned long long n;
    COUNTERS(X)
#undef X
} cnt;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

unsigned long long fake_cuda_counter(const char *name);
unsigned long long fake_cuda_counter(const char *name)
{
    unsigned long long v = ~0ull;
    pthread_mutex_lock(&mu);
#define X(n)                                                                                       \
    if (!strcmp(name, #n))                                                                         \
        v = __atomic_load_n(&cnt.n, __ATOMIC_SEQ_CST);
    COUNTERS(X)
#undef X
    pthread_mutex_unlock(&mu);
    return v;
}

typedef struct range {
    uintptr_t base;
    size_t len;
    int kind; /* 1 device, 2 pinned host, 3 registered host */
} range;
static range allocs[MAX_ALLOCS]; /* guarded by mu */
static int initialized;          /* set by cuInit, before any thread uses the driver */
static int ctx_primary_refs;     /* guarded by mu */
static struct CUctx_st {
    int dev; /* guarded by mu */
} the_ctx;
static __thread CUcontext cur_stack[16];
static __thread int cur_depth;

static int fail_now(const char *sym)
{
    const char *f = getenv("FAKE_CUDA_FAIL");
    static int calls[64];         /* guarded by mu */
    static const char *names[64]; /* guarded by mu */
    if (!f)
        return 0;
    size_t n = strcspn(f, ":");
    if (strlen(sym) != n || strncmp(sym, f, n))
        return 0;
    pthread_mutex_lock(&mu);
    int i = 0;
    while (i < 63 && names[i] && strcmp(names[i], sym))
        i++;
    names[i] = sym;
    int now = ++calls[i] == atoi(f + n + 1);
    pthread_mutex_unlock(&mu);
    return now;
}

static int have_ctx(void)
{
    return cur_depth > 0 && cur_stack[cur_depth - 1] != NULL;
}

/* the allocation of that kind holding [p, p+len), or NULL; the caller holds mu */
static range *find(uintptr_t p, size_t len, int kind)
{
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].len && allocs[i].kind == kind && p >= allocs[i].base &&
            p + len <= allocs[i].base + allocs[i].len)
            return &allocs[i];
    return NULL;
}

/* the caller holds mu */
static int add(uintptr_t base, size_t len, int kind)
{
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (!allocs[i].len) {
            allocs[i] = (range){base, len, kind};
            return 0;
        }
    return E_OUT_OF_MEMORY;
}

/* the host address behind a device pointer range, or NULL */
static void *dev_host(CUdeviceptr d, size_t len)
{
    if (d < DEV_OFFSET)
        return NULL;
    uintptr_t h = (uintptr_t)(d - DEV_OFFSET);
    pthread_mutex_lock(&mu);
    int ok = find(h, len, 1) != NULL;
    pthread_mutex_unlock(&mu);
    return ok ? (void *)h : NULL;
}

/* FAKE_CUDA_DEFER: copies from registered memory waiting to run, in the order they were
 * queued, guarded by mu; queued counts every copy ever queued, so that an event recorded
 * after copy n completes copies up to n */
#define MAX_DEFERRED 4096
static struct {
    void *dst;
    const void *src;
    size_t len;
} deferred[MAX_DEFERRED];
static int n_deferred;
static unsigned long long queued; /* copies ever queued; deferred[0] is number queued - n */

/* run the deferred copies queued up to (and including) number upto, in order (a device
 * completes a stream's work in order) */
static void flush_deferred_to(unsigned long long upto)
{
    pthread_mutex_lock(&mu);
    unsigned long long first = queued - (unsigned long long)n_deferred;
    int n = upto >= queued ? n_deferred : upto < first ? 0 : (int)(upto - first + 1);
    for (int i = 0; i < n; i++)
        memcpy(deferred[i].dst, deferred[i].src, deferred[i].len);
    memmove(deferred, deferred + n, (size_t)(n_deferred - n) * sizeof deferred[0]);
    n_deferred -= n;
    pthread_mutex_unlock(&mu);
}

static void flush_deferred(void)
{
    flush_deferred_to(~0ull);
}

CUresult cuInit(unsigned flags)
{
    const char *f = getenv("FAKE_CUDA_INIT_FAIL");
    if (flags || (f && *f == '1'))
        return E_NO_DEVICE;
    initialized = 1;
    return 0;
}
CUresult cuDriverGetVersion(int *v)
{
    *v = 12040;
    return 0;
}
static int ndev(void)
{
    const char *d = getenv("FAKE_CUDA_DEVICES");
    return d ? atoi(d) : 1;
}
CUresult cuDeviceGetCount(int *count)
{
    if (!initialized)
        return E_NOT_INITIALIZED;
    *count = ndev();
    return 0;
}
CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
    if (!initialized)
        return E_NOT_INITIALIZED;
    if (ordinal < 0 || ordinal >= ndev())
        return E_INVALID_DEVICE;
    *dev = ordinal;
    return 0;
}
CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    snprintf(name, (size_t)len, "Fake CUDA Device %d", dev);
    return 0;
}
CUresult cuDeviceGetAttribute(int *value, int attrib, CUdevice dev)
{
    const char *ro = getenv("FAKE_CUDA_RO_REGISTER");
    switch (attrib) {
    case BFSG_CU_ATTR_READ_ONLY_REGISTER:
        *value = !(ro && *ro == '0');
        return 0;
    case BFSG_CU_ATTR_HOST_REGISTER:
        *value = 1;
        return 0;
    case BFSG_CU_ATTR_CC_MAJOR:
        *value = 9;
        return 0;
    case BFSG_CU_ATTR_CC_MINOR:
        *value = 0;
        return 0;
    default:
        *value = 0;
        return 0;
    }
}
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev)
{
    if (!initialized)
        return E_NOT_INITIALIZED;
    pthread_mutex_lock(&mu);
    ctx_primary_refs++;
    cnt.ctx_refs = (unsigned long long)ctx_primary_refs;
    the_ctx.dev = dev;
    pthread_mutex_unlock(&mu);
    *ctx = &the_ctx;
    return 0;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    pthread_mutex_lock(&mu);
    int rc = ctx_primary_refs > 0 ? (ctx_primary_refs--, 0) : E_INVALID_CONTEXT;
    cnt.ctx_refs = (unsigned long long)ctx_primary_refs;
    pthread_mutex_unlock(&mu);
    return rc;
}
CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    if (cur_depth == 16)
        return E_INVALID_VALUE;
    cur_stack[cur_depth++] = ctx;
    return 0;
}
CUresult cuCtxPopCurrent_v2(CUcontext *ctx)
{
    if (!cur_depth)
        return E_INVALID_CONTEXT;
    CUcontext c = cur_stack[--cur_depth];
    if (ctx)
        *ctx = c;
    return 0;
}
CUresult cuCtxSetCurrent(CUcontext ctx)
{
    if (!cur_depth)
        cur_depth = 1;
    cur_stack[cur_depth - 1] = ctx;
    return 0;
}

CUresult cuMemAlloc_v2(CUdeviceptr *d, size_t bytes)
{
    if (!have_ctx())
        return E_INVALID_CONTEXT;
    if (!bytes)
        return E_INVALID_VALUE;
    if (fail_now("cuMemAlloc_v2"))
        return E_OUT_OF_MEMORY;
    void *p = aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (!p)
        return E_OUT_OF_MEMORY;
    memset(p, 0xa5, bytes); /* device memory is not zeroed */
    pthread_mutex_lock(&mu);
    int rc = add((uintptr_t)p, bytes, 1);
    if (!rc)
        cnt.dev_allocs++, cnt.dev_live++;
    pthread_mutex_unlock(&mu);
    if (rc) {
        free(p);
        return rc;
    }
    *d = (CUdeviceptr)(uintptr_t)p + DEV_OFFSET;
    return 0;
}
CUresult cuMemFree_v2(CUdeviceptr d)
{
    if (!have_ctx())
        return E_INVALID_CONTEXT;
    flush_deferred(); /* (cuMemFree synchronizes with work still using the memory) */
    pthread_mutex_lock(&mu);
    range *r = d >= DEV_OFFSET ? find((uintptr_t)(d - DEV_OFFSET), 1, 1) : NULL;
    int ok = r && r->base == (uintptr_t)(d - DEV_OFFSET);
    if (ok)
        r->len = 0, cnt.dev_live--;
    pthread_mutex_unlock(&mu);
    if (!ok)
        return E_INVALID_VALUE;
    free((void *)(uintptr_t)(d - DEV_OFFSET));
    return 0;
}
CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned flags)
{
    if (!have_ctx())
        return E_INVALID_CONTEXT;
    if (fail_now("cuMemHostAlloc"))
        return E_OUT_OF_MEMORY;
    void *m = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (!m)
        return E_OUT_OF_MEMORY;
    pthread_mutex_lock(&mu);
    int rc = add((uintptr_t)m, bytes, 2);
    if (!rc)
        cnt.host_live++;
    pthread_mutex_unlock(&mu);
    if (rc) {
        free(m);
        return rc;
    }
    *p = m;
    return 0;
}
CUresult cuMemFreeHost(void *p)
{
    pthread_mutex_lock(&mu);
    range *r = find((uintptr_t)p, 1, 2);
    int ok = r && r->base == (uintptr_t)p;
    if (ok)
        r->len = 0, cnt.host_live--;
    pthread_mutex_unlock(&mu);
    if (!ok)
        return E_INVALID_VALUE;
    free(p);
    return 0;
}
CUresult cuMemHostRegister_v2(void *p, size_t bytes, unsigned flags)
{
    if (!have_ctx())
        return E_INVALID_CONTEXT;
    const char *ro = getenv("FAKE_CUDA_RO_REGISTER");
    if ((flags & BFSG_CU_MEMHOSTREGISTER_READ_ONLY) && ro && *ro == '0')
        return E_NOT_SUPPORTED;
    if (fail_now("cuMemHostRegister_v2"))
        return E_OUT_OF_MEMORY;
    /* pinning faults every page in (a mapping beyond its file's end raises SIGBUS here,
     * as the real driver's page pinning would fail) */
    volatile const uint8_t *b = p;
    long page = sysconf(_SC_PAGESIZE);
    unsigned sum = 0;
    for (size_t o = 0; o < bytes; o += (size_t)page)
        sum += b[o];
    (void)sum;
    pthread_mutex_lock(&mu);
    int rc = add((uintptr_t)p, bytes, 3);
    if (!rc)
        cnt.registered_live++, cnt.register_calls++;
    pthread_mutex_unlock(&mu);
    return rc;
}
CUresult cuMemHostUnregister(void *p)
{
    flush_deferred(); /* (the real driver waits for the device too) */
    pthread_mutex_lock(&mu);
    range *r = find((uintptr_t)p, 1, 3);
    int ok = r && r->base == (uintptr_t)p;
    if (ok)
        r->len = 0, cnt.registered_live--;
    pthread_mutex_unlock(&mu);
    return ok ? 0 : E_HOST_MEMORY_NOT_REGISTERED;
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes, CUstream stream)
{
    if (!have_ctx())
        return E_INVALID_CONTEXT;
    void *h = dev_host(dst, bytes);
    if (!h)
        return E_INVALID_VALUE;
    const char *defer = getenv("FAKE_CUDA_DEFER");
    pthread_mutex_lock(&mu);
    int registered = find((uintptr_t)src, bytes, 3) != NULL;
    int pinned = find((uintptr_t)src, bytes, 2) || registered;
    if (pinned)
        cnt.htod_pinned++;
    else
        cnt.htod_pageable++;
    cnt.htod_bytes += bytes;
    if (registered && defer && *defer == '1' && n_deferred < MAX_DEFERRED) {
        deferred[n_deferred].dst = h, deferred[n_deferred].src = src;
        deferred[n_deferred++].len = bytes;
        queued++;
        cnt.deferred++;
        pthread_mutex_unlock(&mu);
        return 0;
    }
    pthread_mutex_unlock(&mu);
    memcpy(h, src, bytes);
    return 0;
}
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes)
{
    if (!have_ctx())
        return E_INVALID_CONTEXT;
    void *h = dev_host(src, bytes);
    if (!h)
        return E_INVALID_VALUE;
    /* (no flush: the legacy stream does not wait for non-blocking ones; the caller waits
     * for the copy's event first) */
    memcpy(dst, h, bytes);
    return 0;
}

struct CUstream_st {
    unsigned flags;
};
struct CUevent_st {
    int recorded;              /* __atomic: one thread records, another may wait on it */
    unsigned long long before; /* guarded by mu: deferred copies queued before its record */
};
CUresult cuStreamCreate(CUstream *s, unsigned flags)
{
    if (!have_ctx())
        return E_INVALID_CONTEXT;
    *s = calloc(1, sizeof **s);
    if (!*s)
        return E_OUT_OF_MEMORY;
    (*s)->flags = flags;
    __atomic_add_fetch(&cnt.streams_live, 1, __ATOMIC_SEQ_CST);
    return 0;
}
CUresult cuStreamDestroy_v2(CUstream s)
{
    if (!s)
        return E_INVALID_VALUE;
    free(s);
    __atomic_sub_fetch(&cnt.streams_live, 1, __ATOMIC_SEQ_CST);
    return 0;
}
CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags)
{
    if (!have_ctx())
        return E_INVALID_CONTEXT;
    if (!e)
        return E_INVALID_VALUE;
    __atomic_add_fetch(&cnt.wait_event, 1, __ATOMIC_SEQ_CST);
    if (!__atomic_load_n(&e->recorded, __ATOMIC_SEQ_CST))
        __atomic_add_fetch(&cnt.wait_unrecorded, 1, __ATOMIC_SEQ_CST);
    return 0;
}
CUresult cuStreamSynchronize(CUstream s)
{
    if (!have_ctx())
        return E_INVALID_CONTEXT;
    flush_deferred();
    return 0;
}
CUresult cuEventCreate(CUevent *e, unsigned flags)
{
    if (!have_ctx())
        return E_INVALID_CONTEXT;
    *e = calloc(1, sizeof **e);
    if (!*e)
        return E_OUT_OF_MEMORY;
    __atomic_add_fetch(&cnt.events_live, 1, __ATOMIC_SEQ_CST);
    return 0;
}
CUresult cuEventRecord(CUevent e, CUstream s)
{
    if (!have_ctx())
        return E_INVALID_CONTEXT;
    if (!e)
        return E_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    e->before = queued;
    pthread_mutex_unlock(&mu);
    __atomic_store_n(&e->recorded, 1, __ATOMIC_SEQ_CST);
    return 0;
}
CUresult cuEventSynchronize(CUevent e)
{
    if (!e)
        return E_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    unsigned long long before = e->before;
    pthread_mutex_unlock(&mu);
    if (before) /* the copies queued before it was recorded are done when it is */
        flush_deferred_to(before - 1);
    return 0;
}
CUresult cuEventDestroy_v2(CUevent e)
{
    if (!e)
        return E_INVALID_VALUE;
    free(e);
    __atomic_sub_fetch(&cnt.events_live, 1, __ATOMIC_SEQ_CST);
    return 0;
}

struct CUmod_st {
    char *text;
};
struct CUfunc_st {
    char name[64];
};
static struct CUfunc_st convert_fn = {"bfsg_convert_u8"};
CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
    if (!have_ctx())
        return E_INVALID_CONTEXT;
    if (fail_now("cuModuleLoadData"))
        return E_INVALID_IMAGE; /* as a driver too old for the PTX would */
    const char *t = image;
    if (!strstr(t, ".version ") || !strstr(t, ".target ") || !strstr(t, ".entry "))
        return E_INVALID_IMAGE;
    *m = calloc(1, sizeof **m);
    if (!*m || !((*m)->text = strdup(t)))
        return E_OUT_OF_MEMORY;
    __atomic_add_fetch(&cnt.modules_live, 1, __ATOMIC_SEQ_CST);
    return 0;
}
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
    char want[96];
    snprintf(want, sizeof want, ".entry %s(", name);
    if (!m || !strstr(m->text, want) || strcmp(name, convert_fn.name))
        return E_NOT_FOUND;
    *f = &convert_fn;
    return 0;
}
CUresult cuModuleUnload(CUmodule m)
{
    if (!m)
        return E_INVALID_VALUE;
    free(m->text);
    free(m);
    __atomic_sub_fetch(&cnt.modules_live, 1, __ATOMIC_SEQ_CST);
    return 0;
}

/* bfsg_convert_u8 as the PTX in gpu/convert.ptx does it, run for every thread of the grid */
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shared, CUstream s, void **params,
                        void **extra)
{
    if (!have_ctx())
        return E_INVALID_CONTEXT;
    if (f != &convert_fn || !params || extra || gy != 1 || gz != 1 || by != 1 || bz != 1 || !gx ||
        !bx || bx > 1024)
        return E_INVALID_VALUE;
    CUdeviceptr src = *(CUdeviceptr *)params[0], dst = *(CUdeviceptr *)params[1],
                lut = *(CUdeviceptr *)params[2];
    unsigned long long pixels = *(unsigned long long *)params[3];
    unsigned plane = *(unsigned *)params[4], elem = *(unsigned *)params[5];
    unsigned src_nchw = *(unsigned *)params[6], dst_nchw = *(unsigned *)params[7];
    if (!plane || (elem != 1 && elem != 2 && elem != 4) || pixels % plane)
        return E_INVALID_VALUE;
    flush_deferred(); /* (the kernel reads what the copies before it wrote) */
    const uint8_t *hs = dev_host(src, pixels * 3);
    uint8_t *hd = dev_host(dst, pixels * 3 * elem);
    const uint8_t *hl = dev_host(lut, 3 * 256 * elem);
    if (!hs || !hd || !hl)
        return E_INVALID_VALUE; /* an out-of-bounds access: a fault on a device */
    unsigned long long step = (unsigned long long)gx * bx;
    for (unsigned long long t = 0; t < step; t++)
        for (unsigned long long p = t; p < pixels; p += step) {
            unsigned long long b = p / plane, i = p % plane;
            for (unsigned c = 0; c < 3; c++) {
                unsigned long long si = src_nchw ? (b * 3 + c) * plane + i : p * 3 + c;
                unsigned long long oi = dst_nchw ? (b * 3 + c) * plane + i : p * 3 + c;
                memcpy(hd + oi * elem, hl + (c * 256 + hs[si]) * elem, elem);
            }
        }
    __atomic_add_fetch(&cnt.launches, 1, __ATOMIC_SEQ_CST);
    return 0;
}

CUresult cuGetErrorName(CUresult rc, const char **name)
{
    static const struct {
        int rc;
        const char *name;
    } names[] = {{0, "CUDA_SUCCESS"},
                 {E_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE"},
                 {E_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY"},
                 {E_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED"},
                 {E_NO_DEVICE, "CUDA_ERROR_NO_DEVICE"},
                 {E_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE"},
                 {E_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE"},
                 {E_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT"},
                 {E_NOT_FOUND, "CUDA_ERROR_NOT_FOUND"},
                 {E_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"},
                 {E_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].rc == rc) {
            *name = names[i].name;
            return 0;
        }
    *name = NULL;
    return E_INVALID_VALUE;
}
