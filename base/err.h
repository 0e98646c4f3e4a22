/*
 * err.h — batchfs error codes.
 *
 * Every function returns int: 0 on success, a negative errno (-ENOMEM, -EIO, ...) or a
 * project code below -4096 (BFS_E_*) on failure — the libuv/LMDB convention. fs/ turns
 * the error of a batch into the positive errno a reader gets with bfs_err_to_errno.
 */
#ifndef BATCHFS_BASE_ERR_H
#define BATCHFS_BASE_ERR_H

#include <stddef.h>

/*
 * The codes and their messages, one list (X(NAME, message)): BFS_E_NAME counts up from
 * BFS_E_FIRST in this order. Append new codes at the end: the values are not stored
 * anywhere, but keeping them stable keeps logs comparable.
 */
#define BFS_ERRORS(X)                                                                              \
    X(MAGIC, "not a batchfs dataset file (bad magic)")                                             \
    X(VERSION, "unsupported batchfs dataset version")                                              \
    X(HEADER_CHECKSUM, "dataset header checksum mismatch (file corrupt)")                          \
    X(TRUNCATED, "dataset file is truncated")                                                      \
    X(LAYOUT, "dataset header offsets point outside the file")                                     \
    X(COUNT, "dataset header has impossible counts")                                               \
    X(TABLE_CHECKSUM, "dataset table checksum mismatch (file corrupt)")                            \
    X(PAGE_CHECKSUM, "payload page checksum mismatch (file corrupt)")                              \
    X(SAMPLE_CHECKSUM, "sample checksum mismatch (file corrupt)")                                  \
    X(SAMPLE_RANGE, "sample entry points outside the payload heap")                                \
    X(SAMPLE_INDEX, "sample index out of range")                                                   \
    X(LABEL, "sample label out of range")                                                          \
    X(CLASS_NAME, "class-name table entry invalid")                                                \
    X(NOT_JPEG, "not a JPEG file")                                                                 \
    X(JPEG_HEADER, "JPEG header truncated or malformed")                                           \
    X(JPEG_UNSUPPORTED, "unsupported JPEG (lossless or 12-bit)")                                   \
    X(JPEG_DATA, "corrupt JPEG data")                                                              \
    X(RAW_DATA, "corrupt raw (lz4) sample")                                                        \
    X(EMPTY, "nothing to pack")                                                                    \
    X(JPEG_TOO_LARGE,                                                                              \
      "JPEG too large to decode (over 268 million pixels: refused as a decompression bomb)")       \
    X(NOT_REGULAR, "not a regular file (a FIFO, socket, device or directory)")                     \
    X(CHANGED, "dataset file changed since it was opened (overwritten or truncated in place)")     \
    X(REMOTE, "Redis request failed")                                                              \
    X(REMOTE_VALUE, "remote batch value corrupt, truncated or for another batch (checksum)")       \
    X(FILE_CHANGED, "file changed or vanished since the folder was scanned at mount")              \
    X(REMOTE_AUTH, "remote batch value fails authentication (remote_key): forged, or stored by a " \
                   "worker with another remote_key or none")                                       \
    X(REMOTE_DECLINED, "a worker could not compute the batch from its own copy or resources")      \
    X(REMOTE_REFUSED, "Redis refused a command on a key of the pipeline (wrong type, maxmemory, "  \
                      "permissions)")                                                              \
    X(PNG_DATA, "corrupt or truncated PNG")                                                        \
    X(WEBP_DATA, "corrupt or truncated WebP")                                                      \
    X(WEBP_UNSUPPORTED, "unsupported WebP (animated)")                                             \
    X(IMAGE_TOO_LARGE, "PNG or WebP too large to decode (a side over 65535 pixels, or over 268 "   \
                       "million pixels: refused as a decompression bomb)")                         \
    X(FETCH, "the dataset's object store did not serve a read (after its retries: "                \
             "unreachable, timing out, or failing)")

enum {
    BFS_E_BEFORE_FIRST = -4201,
#define BFS_E_ENUM(name, msg) BFS_E_##name,
    BFS_ERRORS(BFS_E_ENUM)
#undef BFS_E_ENUM
        BFS_E_LAST,
    BFS_E_FIRST = BFS_E_BEFORE_FIRST + 1
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

/* bfs_err_is_transient - 1 when err says nothing about the sample or batch, so that a
 * later try may succeed: bfs_err_is_resource, or BFS_E_FETCH (the object store of an
 * s3:// or https:// source failed). Never a reason to substitute a sample; a batch failed
 * so is computed again when asked again. */
int bfs_err_is_transient(int err);

/* bfs_err_to_errno - the positive errno a reader of a batch gets for err (negative):
 * EINTR when its wait was interrupted, ENOMEM when the process ran out of memory or
 * descriptors (bfs_err_is_resource: a retry may succeed), EIO for everything else. The
 * errno of a source file (ENOENT, EACCES) is not passed on: it would say the batch file
 * itself is missing or forbidden. */
int bfs_err_to_errno(int err);

#endif
