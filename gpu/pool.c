/*
 * pool.c — copy=pool (pool.h): the mount's pool file mapped and registered once, windows.
 */
#include "gpu/pool.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

/* a strict decimal (digits only, no overflow) of s[0..n): 0 with *v, or -1 */
static int decimal(const char *s, size_t n, uint64_t *v)
{
    uint64_t x = 0;
    if (!n)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9' || x > (UINT64_MAX - 9) / 10)
            return -1;
        x = x * 10 + (uint64_t)(s[i] - '0');
    }
    *v = x;
    return 0;
}

uint64_t bfsgi_pool_offered(const char *root)
{
    char v[32];
    ssize_t n = getxattr(root, "user.batchfs.pool", v, sizeof v);
    uint64_t size;
    return n > 0 && decimal(v, (size_t)n, &size) == 0 ? size : 0;
}

int bfsgi_pool_open(bfsgi_pool *p, const char *root, bfsg_cuda *cu, char *why, size_t cap)
{
    p->map = NULL, p->len = 0;
    uint64_t size = bfsgi_pool_offered(root);
    if (!size) {
        snprintf(why, cap,
                 "%s offers no pool file (mount it with -o gpu_pool_mb=N, as root: "
                 "the pool is shared under FUSE passthrough only)",
                 root);
        return -ENOENT;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/.pool", root);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    int rc = 0;
    if (fd < 0 || fstat(fd, &st))
        rc = -errno;
    else if ((uint64_t)st.st_size != size)
        rc = -EBADMSG;
    void *m = MAP_FAILED;
    if (!rc && (m = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0)) == MAP_FAILED)
        rc = -errno;
    if (fd >= 0)
        close(fd); /* (the mapping keeps the file) */
    if (rc) {
        snprintf(why, cap, "%s: %s", path,
                 rc == -EBADMSG ? "its size is not the one the mount names" : strerror(-rc));
        return rc;
    }
    CUresult r = cu->MemHostRegister(m, size, BFSG_CU_MEMHOSTREGISTER_READ_ONLY);
    if (r != BFSG_CUDA_SUCCESS) {
        munmap(m, size);
        snprintf(why, cap,
                 "cuMemHostRegister of %s (%" PRIu64 " MiB, read-only) failed: CUDA "
                 "error %d",
                 path, size >> 20, r);
        return -EIO;
    }
    p->map = m, p->len = size;
    return 0;
}

void bfsgi_pool_close(bfsgi_pool *p, bfsg_cuda *cu)
{
    if (!p->map)
        return;
    cu->MemHostUnregister(p->map);
    munmap(p->map, p->len);
    p->map = NULL, p->len = 0;
}

int bfsgi_pool_window(const bfsgi_pool *p, int fd, uint64_t size, const uint8_t **at)
{
    char v[64];
    ssize_t n = p->map ? fgetxattr(fd, "user.batchfs.window", v, sizeof v - 1) : -1;
    if (n <= 0)
        return 0;
    v[n] = 0;
    const char *sp = memchr(v, ' ', (size_t)n);
    uint64_t off, len;
    if (!sp || decimal(v, (size_t)(sp - v), &off) ||
        decimal(sp + 1, (size_t)(v + n - sp - 1), &len) || len != size || off > p->len ||
        len > p->len - off)
        return 0;
    *at = (const uint8_t *)p->map + off;
    return 1;
}
