/*
 * names.h — the mount's name space as pure functions: names <-> inode numbers, the
 * entries of each directory, and the byte range a read at (offset, size) returns.
 *
 * Neighbours: fs/ops.c (the FUSE adapter) calls these from lookup, getattr, opendir,
 * readdir and read; tests/fuzz/fuzz_fs_names.c fuzzes them. No FUSE, no engine: libc
 * only, so the parts of ops.c that handle untrusted names and offsets can be fuzzed.
 *
 * The tree (docs/usage.md): /pipeline, /stats, /epoch/N/batch_K for N < epochs and
 * K < batches, /epoch/N/next (after the batches) when the mount is in a group
 * (group=, tree.next), and /.pool when the mount has a pool file (gpu_pool_mb=,
 * tree.pool). Inode numbers: FSN_INO_ROOT..FSN_INO_EPOCHS for the fixed
 * entries, FSN_EPOCH_BASE + N for epoch N, FSN_NEXT_BASE + N for epoch N's next,
 * FSN_BATCH_BASE + N * batches + K for batch K of N.
 * Names are canonical: strict decimal, no sign, no leading zero ("batch_01" and "007"
 * are not entries), so every entry has exactly one name.
 *
 * Domain: epochs <= FSN_MAX_EPOCHS (the epochs= option allows at most 1e6) and
 * batches <= fsn_max_batches(epochs), so that every inode number fits 64 bits, epoch
 * inodes stay below FSN_NEXT_BASE and next inodes below FSN_BATCH_BASE (fsn_tree_valid
 * says whether a tree is in it).
 */
#ifndef BATCHFS_FS_NAMES_H
#define BATCHFS_FS_NAMES_H

#include <stddef.h>
#include <stdint.h>

#define FSN_INO_ROOT     1
#define FSN_INO_PIPELINE 2
#define FSN_INO_STATS    3
#define FSN_INO_EPOCHS   4
#define FSN_INO_POOL     5 /* /.pool (gpu_pool_mb= under passthrough) */
#define FSN_EPOCH_BASE   16ull
#define FSN_NEXT_BASE    (1ull << 31)
#define FSN_BATCH_BASE   (1ull << 32)
#define FSN_MAX_EPOCHS   (FSN_NEXT_BASE - FSN_EPOCH_BASE) /* epoch inodes below next ones */
#define FSN_NAME_MAX     32                               /* "batch_" + 20 digits + NUL fits */

/* What an inode number is. */
enum {
    FSN_NONE,
    FSN_ROOT,
    FSN_PIPELINE,
    FSN_STATS,
    FSN_EPOCHS,
    FSN_EPOCH,
    FSN_BATCH,
    FSN_NEXT,
    FSN_POOL
};

/* The shape of a mount's tree. */
typedef struct fsn_tree {
    uint32_t epochs;  /* epoch directories: 0..epochs-1 */
    uint64_t batches; /* batch files per epoch */
    int next;         /* 1: each epoch directory has `next` (group=) */
    int pool;         /* 1: the root has `.pool`, after `epoch` (gpu_pool_mb=) */
} fsn_tree;

/* One directory entry (fsn_dirent). */
typedef struct fsn_entry {
    char name[FSN_NAME_MAX];
    uint64_t ino;
    int is_dir;
} fsn_entry;

/* fsn_max_batches - the largest batch count whose inode numbers fit 64 bits with
 * `epochs` epochs (epochs >= 1). */
uint64_t fsn_max_batches(uint32_t epochs);

/* fsn_tree_valid - is t inside the domain above (1 <= epochs <= FSN_MAX_EPOCHS,
 * batches <= fsn_max_batches(epochs))? Public for its two users: ops.c asserts it of the
 * mount's tree in debug and sanitizer builds (base/check.h; the release build never calls
 * it), and the fuzzer checks the domain's edges with it. */
int fsn_tree_valid(const fsn_tree *t);

/*
 * fsn_parse_index - parse s as a strict decimal index below limit: digits only, no
 * sign, no leading zero ("0" itself is fine), any value below limit (so every name
 * fsn_dirent gives parses back, 20 digits included). Returns 0 with *out set, or -1
 * (out untouched).
 */
int fsn_parse_index(const char *s, uint64_t limit, uint64_t *out);

/* fsn_classify - what ino is in t (FSN_*); *epoch for FSN_EPOCH and FSN_NEXT, *epoch and
 * *k for FSN_BATCH (untouched otherwise). */
int fsn_classify(const fsn_tree *t, uint64_t ino, uint64_t *epoch, uint64_t *k);

/* fsn_epoch_ino, fsn_batch_ino - the inode number of epoch N, of batch K of epoch N
 * (N < epochs, K < batches). */
uint64_t fsn_epoch_ino(uint64_t epoch);
uint64_t fsn_batch_ino(const fsn_tree *t, uint64_t epoch, uint64_t k);

/* fsn_next_ino - the inode number of epoch N's `next` (N < epochs; t->next set). */
uint64_t fsn_next_ino(uint64_t epoch);

/*
 * fsn_lookup - the inode number of name in directory parent: *ino is 0 when there is no
 * such entry. Returns 0, or -ENOTDIR when parent is not a directory of t (then *ino is
 * 0 too). "." and ".." are not looked up (the kernel resolves them).
 */
int fsn_lookup(const fsn_tree *t, uint64_t parent, const char *name, uint64_t *ino);

/* fsn_dir_count - the entries of directory dir ("." and ".." included), or 0 when dir
 * is not a directory of t. */
uint64_t fsn_dir_count(const fsn_tree *t, uint64_t dir);

/*
 * fsn_dirent - entry i (0-based: ".", "..", then the rest in order: an epoch directory
 * lists batch_0 .. batch_{batches-1}, then next when t->next) of directory dir.
 * A readdir at offset off lists entries off, off + 1, ...; each entry's offset is its
 * index + 1. Returns 0, or -1 when i >= fsn_dir_count(t, dir).
 */
int fsn_dirent(const fsn_tree *t, uint64_t dir, uint64_t i, fsn_entry *e);

/*
 * fsn_read_span - how many bytes a read of size bytes at offset off returns from a file
 * of len bytes, starting at off: min(size, len - off), and 0 at or past the end or for
 * a negative off.
 */
size_t fsn_read_span(uint64_t len, int64_t off, size_t size);

#endif
