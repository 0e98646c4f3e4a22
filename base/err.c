/* err.c — messages for batchfs error codes (see err.h). */
#include "base/err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const messages[BFS_E_LAST - BFS_E_FIRST] = {
    [BFS_E_MAGIC - BFS_E_FIRST] = "not a batchfs dataset file (bad magic)",
    [BFS_E_VERSION - BFS_E_FIRST] = "unsupported batchfs dataset version",
    [BFS_E_HEADER_CHECKSUM - BFS_E_FIRST] = "dataset header checksum mismatch (file corrupt)",
    [BFS_E_TRUNCATED - BFS_E_FIRST] = "dataset file is truncated",
    [BFS_E_LAYOUT - BFS_E_FIRST] = "dataset header offsets point outside the file",
    [BFS_E_COUNT - BFS_E_FIRST] = "dataset header has impossible counts",
    [BFS_E_TABLE_CHECKSUM - BFS_E_FIRST] = "dataset table checksum mismatch (file corrupt)",
    [BFS_E_PAGE_CHECKSUM - BFS_E_FIRST] = "payload page checksum mismatch (file corrupt)",
    [BFS_E_SAMPLE_CHECKSUM - BFS_E_FIRST] = "sample checksum mismatch (file corrupt)",
    [BFS_E_SAMPLE_RANGE - BFS_E_FIRST] = "sample entry points outside the payload heap",
    [BFS_E_SAMPLE_INDEX - BFS_E_FIRST] = "sample index out of range",
    [BFS_E_LABEL - BFS_E_FIRST] = "sample label out of range",
    [BFS_E_CLASS_NAME - BFS_E_FIRST] = "class-name table entry invalid",
    [BFS_E_NOT_JPEG - BFS_E_FIRST] = "not a JPEG file",
    [BFS_E_JPEG_HEADER - BFS_E_FIRST] = "JPEG header truncated or malformed",
    [BFS_E_JPEG_UNSUPPORTED - BFS_E_FIRST] = "unsupported JPEG (lossless or 12-bit)",
    [BFS_E_JPEG_DATA - BFS_E_FIRST] = "corrupt JPEG data",
    [BFS_E_RAW_DATA - BFS_E_FIRST] = "corrupt raw (lz4) sample",
    [BFS_E_EMPTY - BFS_E_FIRST] = "nothing to pack",
    [BFS_E_JPEG_TOO_LARGE - BFS_E_FIRST] =
        "JPEG too large to decode (over 268 million pixels: refused as a decompression bomb)",
    [BFS_E_NOT_REGULAR - BFS_E_FIRST] = "not a regular file (a FIFO, socket, device or directory)",
    [BFS_E_CHANGED - BFS_E_FIRST] =
        "dataset file changed since it was opened (overwritten or truncated in place)",
};

const char *bfs_strerror(int err)
{
    if (err >= BFS_E_FIRST && err < BFS_E_LAST && messages[err - BFS_E_FIRST])
        return messages[err - BFS_E_FIRST];
    if (err < 0 && err > -4096)
        return strerror(-err);
    return err == 0 ? "success" : "unknown error";
}

int bfs_err_is_resource(int err)
{
    return err == -ENOMEM || err == -EMFILE || err == -ENFILE;
}

int bfs_err_to_errno(int err)
{
    if (err < 0 && err > -4096)
        return -err;
    return EIO;
}

int bfs_errf(int rc, char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return rc;
}
