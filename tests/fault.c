/*
 * fault.c — the --wrap shims of fault.h: count each wrapped call by class and fail the
 * armed one. Every __wrap_X calls __real_X (the linker's name for the real X) unless it
 * injects a fault. Nothing here allocates or calls a wrapped function, so the shims can
 * run on any thread at any time, armed or not.
 */
#include "tests/fault.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

static atomic_int g_active; /* counting on */
static atomic_uint_fast64_t g_count[FAULT_NCLASSES];
static atomic_int g_class = -1;  /* armed class, -1: none */
static atomic_uint_fast64_t g_n; /* armed call number, 1-based */
static atomic_int g_mode, g_persist;
static atomic_uint_fast64_t g_fired;

static const char *const names[FAULT_NCLASSES] = {
    [FAULT_ALLOC] = "alloc", [FAULT_OPEN] = "open", [FAULT_READ] = "read",
    [FAULT_WRITE] = "write", [FAULT_SYNC] = "sync", [FAULT_DIR] = "dir",
    [FAULT_MAP] = "map",     [FAULT_NAME] = "name", [FAULT_THREAD] = "thread",
};

static void reset(void)
{
    atomic_store(&g_active, 0);
    for (int c = 0; c < FAULT_NCLASSES; c++)
        atomic_store(&g_count[c], 0);
    atomic_store(&g_fired, 0);
    atomic_store(&g_class, -1);
}

void fault_count_start(void)
{
    reset();
    atomic_store(&g_active, 1);
}

void fault_arm(fault_class c, uint64_t n, fault_mode mode, int persist)
{
    reset();
    atomic_store(&g_n, n);
    atomic_store(&g_mode, (int)mode);
    atomic_store(&g_persist, persist);
    atomic_store(&g_class, (int)c);
    atomic_store(&g_active, 1);
}

void fault_stop(void)
{
    atomic_store(&g_active, 0);
    atomic_store(&g_class, -1);
}

uint64_t fault_count(fault_class c)
{
    return atomic_load(&g_count[c]);
}

uint64_t fault_fired(void)
{
    return atomic_load(&g_fired);
}

const char *fault_class_name(fault_class c)
{
    return (unsigned)c < FAULT_NCLASSES ? names[c] : "?";
}

enum { PASS, FAIL, SHORT };

/* Count one call of class c; what to do with it. shortable: the call can transfer less. */
static int hit(fault_class c, int shortable)
{
    if (!atomic_load(&g_active))
        return PASS;
    uint64_t k = atomic_fetch_add(&g_count[c], 1) + 1;
    if (atomic_load(&g_class) != (int)c)
        return PASS;
    uint64_t n = atomic_load(&g_n);
    if (k != n && !(atomic_load(&g_persist) && k > n))
        return PASS;
    atomic_fetch_add(&g_fired, 1);
    return shortable && atomic_load(&g_mode) == FAULT_SHORT ? SHORT : FAIL;
}

/* Half of count, at least 1 (a transfer of 0 bytes would mean end of file). */
static size_t half(size_t count)
{
    return count > 1 ? count / 2 : count;
}

/* ---- the wrapped functions (prototypes for -Wmissing-prototypes) ------------------------- */

#define WRAP(ret, name, params)                                                                    \
    ret __real_##name params;                                                                      \
    ret __wrap_##name params;

WRAP(void *, malloc, (size_t size))
WRAP(void *, calloc, (size_t n, size_t size))
WRAP(void *, realloc, (void *p, size_t size))
WRAP(int, posix_memalign, (void **p, size_t align, size_t size))
WRAP(void *, aligned_alloc, (size_t align, size_t size))
WRAP(char *, strdup, (const char *s))
WRAP(char *, strndup, (const char *s, size_t n))
WRAP(int, open64, (const char *path, int flags, ...))
WRAP(int, openat64, (int dirfd, const char *path, int flags, ...))
WRAP(int, mkostemp64, (char *tmpl, int flags))
WRAP(DIR *, opendir, (const char *path))
WRAP(DIR *, fdopendir, (int fd))
WRAP(int, memfd_create, (const char *name, unsigned int flags))
WRAP(ssize_t, read, (int fd, void *buf, size_t count))
WRAP(ssize_t, pread64, (int fd, void *buf, size_t count, off64_t off))
WRAP(ssize_t, write, (int fd, const void *buf, size_t count))
WRAP(ssize_t, pwrite64, (int fd, const void *buf, size_t count, off64_t off))
WRAP(ssize_t, sendmsg, (int fd, const struct msghdr *m, int flags))
WRAP(int, ftruncate64, (int fd, off64_t len))
WRAP(int, fsetxattr, (int fd, const char *name, const void *value, size_t size, int flags))
WRAP(int, fsync, (int fd))
WRAP(int, fdatasync, (int fd))
WRAP(struct dirent64 *, readdir64, (DIR * d))
WRAP(void *, mmap64, (void *addr, size_t len, int prot, int flags, int fd, off64_t off))
WRAP(int, rename, (const char *from, const char *to))
WRAP(int, renameat, (int fromfd, const char *from, int tofd, const char *to))
WRAP(int, linkat, (int fromfd, const char *from, int tofd, const char *to, int flags))
WRAP(int, mkdir, (const char *path, mode_t mode))
WRAP(int, mkdirat, (int dirfd, const char *path, mode_t mode))
WRAP(int, pthread_create,
     (pthread_t * t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg))
int __wrap_asprintf(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- FAULT_ALLOC ------------------------------------------------------------------------ */

void *__wrap_malloc(size_t size)
{
    if (hit(FAULT_ALLOC, 0))
        return errno = ENOMEM, NULL;
    return __real_malloc(size);
}

void *__wrap_calloc(size_t n, size_t size)
{
    if (hit(FAULT_ALLOC, 0))
        return errno = ENOMEM, NULL;
    return __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t size)
{
    if (hit(FAULT_ALLOC, 0))
        return errno = ENOMEM, NULL; /* p stays valid, as with a real failure */
    return __real_realloc(p, size);
}

int __wrap_posix_memalign(void **p, size_t align, size_t size)
{
    if (hit(FAULT_ALLOC, 0))
        return ENOMEM;
    return __real_posix_memalign(p, align, size);
}

void *__wrap_aligned_alloc(size_t align, size_t size)
{
    if (hit(FAULT_ALLOC, 0))
        return errno = ENOMEM, NULL;
    return __real_aligned_alloc(align, size);
}

char *__wrap_strdup(const char *s)
{
    if (hit(FAULT_ALLOC, 0))
        return errno = ENOMEM, NULL;
    return __real_strdup(s);
}

char *__wrap_strndup(const char *s, size_t n)
{
    if (hit(FAULT_ALLOC, 0))
        return errno = ENOMEM, NULL;
    return __real_strndup(s, n);
}

int __wrap_asprintf(char **out, const char *fmt, ...)
{
    if (hit(FAULT_ALLOC, 0))
        return errno = ENOMEM, -1; /* *out undefined, as glibc documents */
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(out, fmt, ap);
    va_end(ap);
    return n;
}

/* ---- FAULT_OPEN ------------------------------------------------------------------------- */

static int needs_mode(int flags)
{
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE;
}

int __wrap_open64(const char *path, int flags, ...)
{
    mode_t mode = 0;
    if (needs_mode(flags)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    if (hit(FAULT_OPEN, 0))
        return errno = EMFILE, -1;
    return __real_open64(path, flags, mode);
}

int __wrap_openat64(int dirfd, const char *path, int flags, ...)
{
    mode_t mode = 0;
    if (needs_mode(flags)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    if (hit(FAULT_OPEN, 0))
        return errno = EMFILE, -1;
    return __real_openat64(dirfd, path, flags, mode);
}

int __wrap_mkostemp64(char *tmpl, int flags)
{
    if (hit(FAULT_OPEN, 0))
        return errno = EMFILE, -1;
    return __real_mkostemp64(tmpl, flags);
}

DIR *__wrap_opendir(const char *path)
{
    if (hit(FAULT_OPEN, 0))
        return errno = EMFILE, NULL;
    return __real_opendir(path);
}

DIR *__wrap_fdopendir(int fd)
{
    if (hit(FAULT_OPEN, 0))
        return errno = ENOMEM, NULL; /* fd stays open, as with a real failure */
    return __real_fdopendir(fd);
}

int __wrap_memfd_create(const char *name, unsigned int flags)
{
    if (hit(FAULT_OPEN, 0))
        return errno = EMFILE, -1;
    return __real_memfd_create(name, flags);
}

/* ---- FAULT_READ ------------------------------------------------------------------------- */

ssize_t __wrap_read(int fd, void *buf, size_t count)
{
    switch (hit(FAULT_READ, 1)) {
    case FAIL:
        return errno = EIO, -1;
    case SHORT:
        count = half(count);
        break;
    }
    return __real_read(fd, buf, count);
}

ssize_t __wrap_pread64(int fd, void *buf, size_t count, off64_t off)
{
    switch (hit(FAULT_READ, 1)) {
    case FAIL:
        return errno = EIO, -1;
    case SHORT:
        count = half(count);
        break;
    }
    return __real_pread64(fd, buf, count, off);
}

/* ---- FAULT_WRITE ------------------------------------------------------------------------ */

ssize_t __wrap_write(int fd, const void *buf, size_t count)
{
    switch (hit(FAULT_WRITE, 1)) {
    case FAIL:
        return errno = ENOSPC, -1;
    case SHORT:
        count = half(count);
        break;
    }
    return __real_write(fd, buf, count);
}

ssize_t __wrap_pwrite64(int fd, const void *buf, size_t count, off64_t off)
{
    switch (hit(FAULT_WRITE, 1)) {
    case FAIL:
        return errno = ENOSPC, -1;
    case SHORT:
        count = half(count);
        break;
    }
    return __real_pwrite64(fd, buf, count, off);
}

/* a socket's send: a reset connection; short: the first half of the bytes */
ssize_t __wrap_sendmsg(int fd, const struct msghdr *m, int flags)
{
    switch (hit(FAULT_WRITE, 1)) {
    case FAIL:
        return errno = ECONNRESET, -1;
    case SHORT: {
        size_t total = 0;
        for (size_t i = 0; i < m->msg_iovlen; i++)
            total += m->msg_iov[i].iov_len;
        size_t want = half(total), n = 0;
        struct iovec iov[64];
        for (size_t i = 0; i < m->msg_iovlen && i < 64 && want; i++) {
            iov[n] = m->msg_iov[i];
            if (iov[n].iov_len > want)
                iov[n].iov_len = want;
            want -= iov[n++].iov_len;
        }
        struct msghdr h = *m;
        h.msg_iov = iov;
        h.msg_iovlen = n;
        return __real_sendmsg(fd, &h, flags);
    }
    }
    return __real_sendmsg(fd, m, flags);
}

int __wrap_ftruncate64(int fd, off64_t len)
{
    if (hit(FAULT_WRITE, 0))
        return errno = ENOSPC, -1;
    return __real_ftruncate64(fd, len);
}

int __wrap_fsetxattr(int fd, const char *name, const void *value, size_t size, int flags)
{
    if (hit(FAULT_WRITE, 0))
        return errno = ENOSPC, -1;
    return __real_fsetxattr(fd, name, value, size, flags);
}

/* ---- FAULT_SYNC, FAULT_DIR, FAULT_MAP, FAULT_NAME, FAULT_THREAD ------------------------- */

int __wrap_fsync(int fd)
{
    if (hit(FAULT_SYNC, 0))
        return errno = EIO, -1;
    return __real_fsync(fd);
}

int __wrap_fdatasync(int fd)
{
    if (hit(FAULT_SYNC, 0))
        return errno = EIO, -1;
    return __real_fdatasync(fd);
}

struct dirent64 *__wrap_readdir64(DIR *d)
{
    if (hit(FAULT_DIR, 0))
        return errno = EIO, NULL;
    return __real_readdir64(d);
}

void *__wrap_mmap64(void *addr, size_t len, int prot, int flags, int fd, off64_t off)
{
    if (hit(FAULT_MAP, 0))
        return errno = ENOMEM, MAP_FAILED;
    return __real_mmap64(addr, len, prot, flags, fd, off);
}

int __wrap_rename(const char *from, const char *to)
{
    if (hit(FAULT_NAME, 0))
        return errno = EIO, -1;
    return __real_rename(from, to);
}

int __wrap_renameat(int fromfd, const char *from, int tofd, const char *to)
{
    if (hit(FAULT_NAME, 0))
        return errno = EIO, -1;
    return __real_renameat(fromfd, from, tofd, to);
}

int __wrap_linkat(int fromfd, const char *from, int tofd, const char *to, int flags)
{
    if (hit(FAULT_NAME, 0))
        return errno = EIO, -1;
    return __real_linkat(fromfd, from, tofd, to, flags);
}

int __wrap_mkdir(const char *path, mode_t mode)
{
    if (hit(FAULT_NAME, 0))
        return errno = ENOSPC, -1;
    return __real_mkdir(path, mode);
}

int __wrap_mkdirat(int dirfd, const char *path, mode_t mode)
{
    if (hit(FAULT_NAME, 0))
        return errno = ENOSPC, -1;
    return __real_mkdirat(dirfd, path, mode);
}

int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    if (hit(FAULT_THREAD, 0))
        return EAGAIN;
    return __real_pthread_create(t, attr, fn, arg);
}
