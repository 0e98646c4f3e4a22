/*
 * store_internal.h — the entry file format of cache/store (docs/cache.md), as pure
 * functions over bytes: used by store.c and by tests/fuzz/fuzz_store_entry.c. Not part of
 * the module's interface (cache/store.h is).
 *
 * An entry has a 64-byte little-endian trailer:
 *   0  magic "BFSCENT\0"   8  version (u32, 2)   12 flags (u32)
 *   16 fingerprint         24 epoch              32 batch
 *   40 payload length      48 XXH64(payload, 0)  56 XXH64(trailer bytes 0..55, 0)
 * either in the file's extended attribute user.batchfs.entry (flags BFS_STORE_FLAG_XATTR;
 * the file is exactly the payload, so it can back the batch file) or, where the file
 * system takes no user xattrs, after the payload in the file (flags 0).
 */
#ifndef BATCHFS_CACHE_STORE_INTERNAL_H
#define BATCHFS_CACHE_STORE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "cache/store.h"

#define BFS_STORE_MAGIC   "BFSCENT"
#define BFS_STORE_VERSION 2u
#define BFS_STORE_DIR     "v2" /* the layout's directory under the store's root */
#define BFS_STORE_XATTR   "user.batchfs.entry"

/* Trailer flags. */
#define BFS_STORE_FLAG_XATTR 1u /* the trailer is the xattr; the file is the payload only */

/* Why an entry was refused (positive reasons; 0 = valid). */
enum {
    BFS_STORE_ENTRY_OK = 0,
    BFS_STORE_ENTRY_SHORT,    /* smaller than a trailer: torn */
    BFS_STORE_ENTRY_MAGIC,    /* no trailer magic/version/flags: torn or not an entry */
    BFS_STORE_ENTRY_TRAILER,  /* trailer checksum mismatch */
    BFS_STORE_ENTRY_LENGTH,   /* file size != payload length + trailer: torn */
    BFS_STORE_ENTRY_KEY,      /* trailer names another key: misplaced file */
    BFS_STORE_ENTRY_CHECKSUM, /* payload checksum mismatch: corrupt */
};

/* bfs_store_entry_trailer - write the trailer of a payload of payload_len bytes whose
 * XXH64 (seed 0) is payload_hash into out; flags 0 (in the file) or BFS_STORE_FLAG_XATTR. */
void bfs_store_entry_trailer(const bfs_store_key *key, uint64_t payload_len, uint64_t payload_hash,
                             uint32_t flags, uint8_t out[BFS_STORE_TRAILER]);

/* bfs_store_entry_parse_trailer - check a trailer (exactly BFS_STORE_TRAILER bytes) of a
 * file of file_size bytes: magic, version, flags (BFS_STORE_FLAG_XATTR when xattr is set,
 * i.e. it was read from the xattr, else 0), trailer checksum and length (the file size,
 * less the trailer when it is in the file). On success fills *key, *payload_len and
 * *payload_hash. Returns a reason. */
int bfs_store_entry_parse_trailer(const uint8_t *trailer, uint64_t file_size, int xattr,
                                  bfs_store_key *key, uint64_t *payload_len,
                                  uint64_t *payload_hash);

/* bfs_store_entry_check - verify a whole entry file (size bytes at file): trailer, key
 * (when key is not NULL) and the payload checksum. On success *payload_len (may be NULL)
 * gets the payload length. Returns a reason (BFS_STORE_ENTRY_OK when valid). */
int bfs_store_entry_check(const uint8_t *file, uint64_t size, const bfs_store_key *key,
                          uint64_t *payload_len);

/* bfs_store_entry_check_xattr - the same for an entry whose trailer is the xattr value
 * (xattr_len bytes; only BFS_STORE_TRAILER is valid) and whose file is size bytes. */
int bfs_store_entry_check_xattr(const uint8_t *xattr, size_t xattr_len, const uint8_t *file,
                                uint64_t size, const bfs_store_key *key, uint64_t *payload_len);

/* bfs_store_entry_reason - a static English phrase for a reason. */
const char *bfs_store_entry_reason(int reason);

#endif
