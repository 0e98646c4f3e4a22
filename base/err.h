/*
 * err.h — batchfs error codes.
 *
 * Every function returns int: 0 on success, a negative errno (-ENOMEM, -EIO, ...) or a
 * project code below -4096 (BFS_E_*) on failure — the libuv/LMDB convention. fs/ flips
 * them to the positive errno that FUSE replies want (bfs_err_to_errno) exactly once.
 */
#ifndef BATCHFS_BASE_ERR_H
#define BATCHFS_BASE_ERR_H

#include <stddef.h>

enum {
    BFS_E_FIRST = -4200,
    BFS_E_MAGIC = BFS_E_FIRST, /* not a .bfs file (bad magic) */
    BFS_E_VERSION,             /* .bfs version this build cannot read */
    BFS_E_HEADER_CHECKSUM,     /* header checksum mismatch */
    BFS_E_TRUNCATED,           /* file shorter than its header says */
    BFS_E_LAYOUT,              /* offsets/sizes point outside the file or overlap */
    BFS_E_COUNT,               /* absurd counts (samples, classes, pages, page size) */
    BFS_E_TABLE_CHECKSUM,      /* sample/class table checksum mismatch */
    BFS_E_PAGE_CHECKSUM,       /* payload page checksum mismatch */
    BFS_E_SAMPLE_CHECKSUM,     /* sample payload checksum mismatch */
    BFS_E_SAMPLE_RANGE,        /* sample entry points outside the payload heap */
    BFS_E_SAMPLE_INDEX,        /* sample index >= sample count */
    BFS_E_LABEL,               /* sample label >= class count */
    BFS_E_CLASS_NAME,          /* class-name entry invalid */
    BFS_E_NOT_JPEG,            /* payload is not a JPEG (no SOI marker) */
    BFS_E_JPEG_HEADER,         /* JPEG header truncated or malformed */
    BFS_E_JPEG_UNSUPPORTED,    /* JPEG kind libjpeg-turbo 2.1 cannot decode (lossless, 12-bit) */
    BFS_E_JPEG_DATA,           /* JPEG entropy data corrupt or truncated */
    BFS_E_RAW_DATA,            /* raw (lz4) payload corrupt */
    BFS_E_EMPTY,               /* empty source directory or class */
    BFS_E_JPEG_TOO_LARGE,      /* JPEG of more than BFS_JPEG_MAX_PIXELS (a decompression bomb) */
    BFS_E_NOT_REGULAR,         /* not a regular file (a FIFO, socket, device or directory) */
    BFS_E_CHANGED,             /* dataset file overwritten or truncated since it was opened */
    BFS_E_LAST
};

/*
 * bfs_errf - format a one-line message into err (errlen bytes; err may be NULL or errlen
 * 0) and return rc, so that a failure path reads `return bfs_errf(-ENOENT, err, errlen,
 * "%s: ...", path);`.
 */
int bfs_errf(int rc, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* bfs_strerror - a static English message for any code (project or errno). */
const char *bfs_strerror(int err);

/* bfs_err_is_resource - 1 when err says the process ran out of something (-ENOMEM,
 * -EMFILE, -ENFILE), not that a file or sample is bad: such a failure is the operation's
 * (a later try may succeed), never a reason to skip or substitute a sample. */
int bfs_err_is_resource(int err);

/* bfs_err_to_errno - the positive errno to report to the kernel for err (EIO for
 * data-integrity codes). err must be negative. */
int bfs_err_to_errno(int err);

#endif
