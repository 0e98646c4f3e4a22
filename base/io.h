/*
 * io.h — whole-buffer file I/O shared by the writer, the packer, the sources and the
 * cache store: retried on EINTR and short transfers, errors as negative errno.
 */
#ifndef BATCHFS_BASE_IO_H
#define BATCHFS_BASE_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

/* bfs_write_all - write len bytes to fd. Returns 0 or a negative errno (-EIO when the
 * kernel accepts nothing). */
int bfs_write_all(int fd, const void *data, size_t len);

/* bfs_pwrite_all - the same at file offset off (pwrite: the file position is unchanged). */
int bfs_pwrite_all(int fd, const void *data, size_t len, uint64_t off);

/*
 * bfs_open_regular - open path read-only if it is a regular file, without ever blocking
 * (a FIFO named like a sample would otherwise wedge its reader until someone writes to
 * it) and without opening devices. *st gets the open file's fstat. Returns the fd (with
 * O_CLOEXEC; blocking reads) or BFS_E_NOT_REGULAR (a FIFO, socket, device or directory)
 * or the negative errno of stat/open/fstat.
 */
int bfs_open_regular(const char *path, struct stat *st);

/*
 * bfs_read_file - read the whole regular file path into *buf, growing it (realloc) when
 * *cap is too small; *buf may start NULL with *cap 0. *len gets the file size.
 * Returns 0; BFS_E_NOT_REGULAR (bfs_open_regular); -EFBIG (over 4 GiB: no sample is that large);
 * -EIO (the file shrank while read); -ENOMEM; or the errno of open/read. On failure *buf
 * stays valid (possibly grown) and the caller still owns it.
 */
int bfs_read_file(const char *path, uint8_t **buf, size_t *cap, size_t *len);

/*
 * Descriptors. bfs_fd_limit_raise - raise this process's soft limit of open descriptors
 * (RLIMIT_NOFILE) to its hard limit: the usual soft limit, 1,024, is systemd's default
 * for programs that use select(), which batchfs does not, and every batch file the mount
 * keeps is a descriptor. Returns the soft limit now in effect (UINT64_MAX: unlimited).
 * bfs_fd_limit - the soft limit now. bfs_fd_count - descriptors open now (from
 * /proc/self/fd), or -1 when that cannot be read.
 */
uint64_t bfs_fd_limit_raise(void);
uint64_t bfs_fd_limit(void);
int bfs_fd_count(void);

#endif
