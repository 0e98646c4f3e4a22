/*
 * srccache.h — the host's cache of remote files' bytes on disk (source_cache=): what one
 * mount fetched from an s3:// or https:// object, another mount of the same object (or a
 * later epoch of the same mount) reads from the disk instead.
 *
 * Neighbours: the .bfs reader (engine/dataset/bfs_read.c) asks here before it fetches a
 * sample's payload and puts here what it fetched; the engine configures it from
 * source_cache= and source_cache_mb=. docs/sources.md is the user's view.
 *
 * Layout: one sparse file per object, DIR/<identity, 16 hex digits>.obj, as large as the
 * object, holding the byte ranges fetched so far at their own offsets; the identity
 * (fetch.h's: bucket and key, size, ETag, Last-Modified) names the object's version, so a
 * replaced object gets another file and never meets the old bytes. No index: a range is
 * present when the file has data (no hole: SEEK_HOLE) over all of it, and the caller
 * verifies every range it takes with the sample's checksum, treating a mismatch as a miss
 * (a write cut by kill -9, two mounts writing the same bytes at once, a file damaged on
 * disk: all give a checksum error, never wrong bytes served). So any number of mounts of
 * any users' processes share a directory of their own user without locks.
 *
 * Safety (as cache_dir's store): DIR is made 0700 if missing, must be a directory of this
 * user (or root) writable by no one else, never a symbolic link; files are opened with
 * O_NOFOLLOW, made 0600. Budget: source_cache_mb, the bytes the directory's files hold on
 * disk; past it the least recently opened objects' files are deleted (never one in use by
 * this process), and when the objects in use alone fill it, nothing more is written.
 */
#ifndef BATCHFS_CACHE_SRCCACHE_H
#define BATCHFS_CACHE_SRCCACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct bfs_srcfile bfs_srcfile;

/* Counters of the process (every object), for /stats' `source` section. */
typedef struct bfs_srccache_stats {
    uint64_t hits;         /* ranges read from the disk */
    uint64_t hit_bytes;    /* their bytes */
    uint64_t stored;       /* ranges written */
    uint64_t stored_bytes; /* their bytes */
    uint64_t full;         /* ranges not written: the budget is held by objects in use */
    uint64_t evicted;      /* object files deleted for room */
    uint64_t usage_bytes;  /* the directory's files on disk, as last counted */
    uint64_t budget_bytes; /* source_cache_mb */
} bfs_srccache_stats;

/*
 * bfs_srccache_configure - process-wide: dir (absolute; "" or NULL: no cache, "auto":
 * /var/tmp/batchfs-sources-UID) and its budget in bytes. Makes and checks the directory.
 * Returns 0, or a negative errno with a message in err naming source_cache= and the
 * directory (not a directory, a symbolic link, another user's, writable by others,
 * cannot be made).
 */
int bfs_srccache_configure(const char *dir, uint64_t budget_bytes, char *err, size_t errlen);

/*
 * bfs_srcfile_open - the cache file of object identity (size bytes), opened (made when
 * missing), or NULL when no cache is configured or it cannot be opened (the reader then
 * fetches everything: a cache never fails a read). Close with bfs_srcfile_close.
 */
bfs_srcfile *bfs_srcfile_open(uint64_t identity, uint64_t size);

/*
 * bfs_srcfile_read - [off, off + len) from the disk into buf when all of it is there:
 * 1; 0 when a part of it is missing (a hole) or cannot be read. The caller must verify
 * the bytes (a sample's checksum) and treat a mismatch as a miss. f NULL: 0.
 */
int bfs_srcfile_read(bfs_srcfile *f, void *buf, size_t len, uint64_t off);

/* bfs_srcfile_present - 1 when [off, off + len) has data on disk (bfs_srcfile_read would
 * read it), else 0; f NULL: 0. One lseek. */
int bfs_srcfile_present(bfs_srcfile *f, uint64_t off, size_t len);

/*
 * bfs_srcfile_write - keep [off, off + len) (bytes the caller verified) for later reads,
 * within the budget (making room by deleting the least recently opened files of objects
 * not in use here). Best effort: no error; f NULL: nothing.
 */
void bfs_srcfile_write(bfs_srcfile *f, const void *buf, size_t len, uint64_t off);

/* bfs_srcfile_close - release f. NULL is a no-op. */
void bfs_srcfile_close(bfs_srcfile *f);

/* bfs_srccache_get_stats - the process's counters so far. */
void bfs_srccache_get_stats(bfs_srccache_stats *st);

#endif
