/*
 * cuda_api.h — the subset of CUDA's driver API that libbatchfs-gpu uses, resolved at
 * run time from libcuda.so.1 (dlopen), so that nothing links against CUDA and the
 * library builds without the toolkit. Internal to gpu/ (and to the test suite's fake
 * driver, tests/gpu/fake_cuda.c, which implements the same table).
 *
 * Types and constants are the ABI of cuda.h (CUDA 11.0 and later): handles are opaque
 * pointers, CUdeviceptr is 64 bits, CUresult is an int (0 = CUDA_SUCCESS). The symbol
 * names are the versioned ones cuda.h's macros select (cuMemAlloc -> cuMemAlloc_v2 ...).
 * tests/gpu/cuda_abi.c checks every prototype below against the toolkit's cuda.h where
 * one is installed.
 */
#ifndef BATCHFS_GPU_CUDA_API_H
#define BATCHFS_GPU_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;

#define BFSG_CUDA_SUCCESS                 0
#define BFSG_CUDA_ERROR_NOT_READY         600
#define BFSG_CU_STREAM_NON_BLOCKING       0x1
#define BFSG_CU_EVENT_DISABLE_TIMING      0x2
#define BFSG_CU_MEMHOSTALLOC_PORTABLE     0x01
#define BFSG_CU_MEMHOSTREGISTER_PORTABLE  0x01
#define BFSG_CU_MEMHOSTREGISTER_READ_ONLY 0x08
#define BFSG_CU_ATTR_CC_MAJOR             75
#define BFSG_CU_ATTR_CC_MINOR             76
#define BFSG_CU_ATTR_HOST_REGISTER        99
#define BFSG_CU_ATTR_READ_ONLY_REGISTER   113

/* X(return-name, symbol, parameter list): one row per driver function. */
#define BFSG_CUDA_FUNCS(X)                                                                         \
    X(Init, "cuInit", (unsigned flags))                                                            \
    X(DriverGetVersion, "cuDriverGetVersion", (int *version))                                      \
    X(DeviceGetCount, "cuDeviceGetCount", (int *count))                                            \
    X(DeviceGet, "cuDeviceGet", (CUdevice * dev, int ordinal))                                     \
    X(DeviceGetName, "cuDeviceGetName", (char *name, int len, CUdevice dev))                       \
    X(DeviceGetAttribute, "cuDeviceGetAttribute", (int *value, int attrib, CUdevice dev))          \
    X(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", (CUcontext * ctx, CUdevice dev))         \
    X(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", (CUdevice dev))                     \
    X(CtxPushCurrent, "cuCtxPushCurrent_v2", (CUcontext ctx))                                      \
    X(CtxPopCurrent, "cuCtxPopCurrent_v2", (CUcontext * ctx))                                      \
    X(CtxSetCurrent, "cuCtxSetCurrent", (CUcontext ctx))                                           \
    X(MemAlloc, "cuMemAlloc_v2", (CUdeviceptr * dptr, size_t bytes))                               \
    X(MemFree, "cuMemFree_v2", (CUdeviceptr dptr))                                                 \
    X(MemHostAlloc, "cuMemHostAlloc", (void **p, size_t bytes, unsigned flags))                    \
    X(MemFreeHost, "cuMemFreeHost", (void *p))                                                     \
    X(MemHostRegister, "cuMemHostRegister_v2", (void *p, size_t bytes, unsigned flags))            \
    X(MemHostUnregister, "cuMemHostUnregister", (void *p))                                         \
    X(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2",                                                     \
      (CUdeviceptr dst, const void *src, size_t bytes, CUstream stream))                           \
    X(MemcpyDtoH, "cuMemcpyDtoH_v2", (void *dst, CUdeviceptr src, size_t bytes))                   \
    X(StreamCreate, "cuStreamCreate", (CUstream * stream, unsigned flags))                         \
    X(StreamDestroy, "cuStreamDestroy_v2", (CUstream stream))                                      \
    X(StreamWaitEvent, "cuStreamWaitEvent", (CUstream stream, CUevent ev, unsigned flags))         \
    X(StreamSynchronize, "cuStreamSynchronize", (CUstream stream))                                 \
    X(EventCreate, "cuEventCreate", (CUevent * ev, unsigned flags))                                \
    X(EventRecord, "cuEventRecord", (CUevent ev, CUstream stream))                                 \
    X(EventSynchronize, "cuEventSynchronize", (CUevent ev))                                        \
    X(EventDestroy, "cuEventDestroy_v2", (CUevent ev))                                             \
    X(ModuleLoadData, "cuModuleLoadData", (CUmodule * mod, const void *image))                     \
    X(ModuleGetFunction, "cuModuleGetFunction", (CUfunction * fn, CUmodule mod, const char *name)) \
    X(ModuleUnload, "cuModuleUnload", (CUmodule mod))                                              \
    X(LaunchKernel, "cuLaunchKernel",                                                              \
      (CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,             \
       unsigned bz, unsigned shared_bytes, CUstream stream, void **params, void **extra))          \
    X(GetErrorName, "cuGetErrorName", (CUresult rc, const char **name))

/* The resolved table; every member is non-NULL after bfsgi_cuda_load succeeds. */
typedef struct bfsg_cuda {
    void *dl; /* dlopen handle */
#define BFSG_CUDA_MEMBER(name, sym, params) CUresult(*name) params;
    BFSG_CUDA_FUNCS(BFSG_CUDA_MEMBER)
#undef BFSG_CUDA_MEMBER
} bfsg_cuda;

/*
 * bfsgi_cuda_load - dlopen path (NULL: $BATCHFS_GPU_LIBCUDA, else "libcuda.so.1"),
 * resolve every function of the table and call cuInit(0). Returns 0, -ENOENT (the
 * library cannot be loaded), -ENOSYS (a function is missing: too old a driver), or
 * -ENODEV (cuInit failed: no device or driver unusable); err says which, with dlerror's
 * text or the CUresult's name. On failure the library is closed again.
 */
int bfsgi_cuda_load(bfsg_cuda *cu, const char *path, char *err, size_t errlen);

/* bfsgi_cuda_unload - dlclose (the table must not be used after). NULL-safe. */
void bfsgi_cuda_unload(bfsg_cuda *cu);

/* bfsgi_cuda_errf - format "what: CUDA_ERROR_NAME (rc)" into err and return -EPROTO. */
int bfsgi_cuda_errf(const bfsg_cuda *cu, CUresult rc, char *err, size_t errlen, const char *what);

#endif
