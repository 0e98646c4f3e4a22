/* io.c — whole-buffer file I/O (see io.h). */
#include "base/io.h"
#include "base/err.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* write (off < 0) or pwrite at off, until len bytes are out */
static int write_loop(int fd, const uint8_t *p, size_t len, int64_t off)
{
    while (len) {
        ssize_t n = off < 0 ? write(fd, p, len) : pwrite(fd, p, len, (off_t)off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            return -EIO;
        p += n, len -= (size_t)n;
        off = off < 0 ? off : off + n;
    }
    return 0;
}

int bfs_write_all(int fd, const void *data, size_t len)
{
    return write_loop(fd, data, len, -1);
}

int bfs_pwrite_all(int fd, const void *data, size_t len, uint64_t off)
{
    return write_loop(fd, data, len, (int64_t)off);
}

int bfs_open_regular(const char *path, struct stat *st)
{
    struct stat pre;
    /* a stat first, so that devices are never opened at all (opening some has effects) */
    if (stat(path, &pre) < 0)
        return -errno;
    if (!S_ISREG(pre.st_mode))
        return BFS_E_NOT_REGULAR;
    /* O_NONBLOCK: the file may have become a FIFO since the stat; opening a FIFO without
     * a writer would block for good, in D state for a FUSE reader */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return -errno;
    int rc = 0;
    if (fstat(fd, st) < 0)
        rc = -errno;
    else if (!S_ISREG(st->st_mode))
        rc = BFS_E_NOT_REGULAR;
    else if (fcntl(fd, F_SETFL, 0) < 0) /* blocking reads again, as for any regular file */
        rc = -errno;
    if (rc) {
        close(fd);
        return rc;
    }
    return fd;
}

int bfs_read_file(const char *path, uint8_t **buf, size_t *cap, size_t *len)
{
    struct stat st;
    int fd = bfs_open_regular(path, &st);
    if (fd < 0)
        return fd;
    int rc = 0;
    if ((uint64_t)st.st_size > UINT32_MAX)
        rc = -EFBIG;
    size_t size = rc ? 0 : (size_t)st.st_size;
    if (!rc && *cap < size + 1) { /* +1: never a zero-sized allocation */
        size_t want = size + 1 > 2 * *cap ? size + 1 : 2 * *cap;
        uint8_t *b = realloc(*buf, want);
        if (!b)
            rc = -ENOMEM;
        else
            *buf = b, *cap = want;
    }
    for (size_t got = 0; !rc && got < size;) {
        ssize_t n = pread(fd, *buf + got, size - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            rc = n < 0 ? -errno : -EIO; /* shrank while read */
        else
            got += (size_t)n;
    }
    close(fd);
    if (!rc)
        *len = size;
    return rc;
}

uint64_t bfs_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl))
        return 1024; /* (cannot fail for RLIMIT_NOFILE) */
    return rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
}

uint64_t bfs_fd_limit_raise(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        /* a hard limit above fs.nr_open is refused: then as high as it allows */
        for (rlim_t lim = rl.rlim_max; lim > rl.rlim_cur; lim /= 2) {
            struct rlimit want = {lim, rl.rlim_max};
            if (setrlimit(RLIMIT_NOFILE, &want) == 0)
                break;
        }
    }
    return bfs_fd_limit();
}

int bfs_fd_count(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        n += de->d_name[0] != '.';
    closedir(d);
    return n > 0 ? n - 1 : 0; /* (not the directory's own descriptor) */
}
