/*
 * pool.h — copy=pool: a batchfs mount's pool file (gpu_pool_mb=, docs/gpu.md "The pool
 * file"), mapped and registered with the driver once, and each batch's window in it.
 * Internal to gpu/ (loader.c).
 *
 * The daemon computes every batch into a window of /.pool (served under FUSE passthrough:
 * the mapping is of the daemon's own pages) and names it with the batch file's xattr
 * user.batchfs.window ("OFFSET SIZE") for a caller that holds the file open. The open file
 * is the lease: the window is not computed into again until that file is closed, so the
 * loader keeps it open until the copy's event has completed.
 */
#ifndef BATCHFS_GPU_POOL_H
#define BATCHFS_GPU_POOL_H

#include "gpu/cuda_api.h"

#include <stddef.h>
#include <stdint.h>

typedef struct bfsgi_pool {
    void *map;  /* the whole of /.pool, read-only; NULL: none */
    size_t len; /* its size */
} bfsgi_pool;

/* bfsgi_pool_offered - the mount at root offers a pool file (its root's user.batchfs.pool
 * xattr): its size, or 0. */
uint64_t bfsgi_pool_offered(const char *root);

/* bfsgi_pool_open - map root/.pool read-only and register the mapping with cu
 * (read-only; the caller's context current). 0, or a negative errno with why. */
int bfsgi_pool_open(bfsgi_pool *p, const char *root, bfsg_cuda *cu, char *why, size_t cap);

/* bfsgi_pool_close - unregister (after the copies from it finished: the driver waits) and
 * unmap. Nothing when p holds none. */
void bfsgi_pool_close(bfsgi_pool *p, bfsg_cuda *cu);

/* bfsgi_pool_window - where batch file fd (held open, size bytes) lies in the pool: 1 with
 * *at, 0 when the daemon names no window (it found none free: the batch is staged), or a
 * window that does not fit the pool or the file (never from a batchfs daemon). */
int bfsgi_pool_window(const bfsgi_pool *p, int fd, uint64_t size, const uint8_t **at);

#endif
