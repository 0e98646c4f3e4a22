/*
 * cuda.c — load CUDA's driver API at run time (see cuda_api.h). The only file of gpu/
 * that calls dlopen; the loader (loader.c) uses the table it fills.
 */
#include "gpu/cuda_api.h"
#include "base/err.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

int bfsgi_cuda_load(bfsg_cuda *cu, const char *path, char *err, size_t errlen)
{
    memset(cu, 0, sizeof *cu);
    if (!path || !*path)
        path = getenv("BATCHFS_GPU_LIBCUDA");
    if (!path || !*path)
        path = "libcuda.so.1";
    cu->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!cu->dl) {
        const char *why = dlerror();
        return bfs_errf(-ENOENT, err, errlen, "cannot load the CUDA driver %s: %s", path,
                        why ? why : "dlopen failed");
    }
#define BFSG_CUDA_RESOLVE(name, sym, params)                                                       \
    *(void **)&cu->name = dlsym(cu->dl, sym);                                                      \
    if (!cu->name && !strcmp(sym, "cuDevicePrimaryCtxRelease_v2")) /* drivers before 11.0 */       \
        *(void **)&cu->name = dlsym(cu->dl, "cuDevicePrimaryCtxRelease");                          \
    if (!cu->name) {                                                                               \
        dlclose(cu->dl);                                                                           \
        cu->dl = NULL;                                                                             \
        return bfs_errf(-ENOSYS, err, errlen, "CUDA driver %s has no %s (too old a driver)", path, \
                        sym);                                                                      \
    }
    BFSG_CUDA_FUNCS(BFSG_CUDA_RESOLVE)
#undef BFSG_CUDA_RESOLVE
    CUresult rc = cu->Init(0);
    if (rc != BFSG_CUDA_SUCCESS) {
        int r = bfsgi_cuda_errf(cu, rc, err, errlen, "cuInit");
        (void)r;
        dlclose(cu->dl);
        cu->dl = NULL;
        return -ENODEV;
    }
    return 0;
}

void bfsgi_cuda_unload(bfsg_cuda *cu)
{
    if (cu && cu->dl) {
        dlclose(cu->dl);
        cu->dl = NULL;
    }
}

int bfsgi_cuda_errf(const bfsg_cuda *cu, CUresult rc, char *err, size_t errlen, const char *what)
{
    const char *name = NULL;
    if (!cu->GetErrorName || cu->GetErrorName(rc, &name) != BFSG_CUDA_SUCCESS || !name)
        name = "CUDA error";
    return bfs_errf(-EPROTO, err, errlen, "%s failed: %s (%d)", what, name, rc);
}
