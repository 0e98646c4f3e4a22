/*
 * store_internal.h — the entry file format of cache/store (docs/cache.md), as pure
 * functions over bytes: used by store.c and by tests/fuzz/fuzz_store_entry.c. Not part of
 * the module's interface (cache/store.h is).
 *
 * An entry file is the payload followed by a 64-byte little-endian trailer:
 *   0  magic "BFSCENT\0"   8  version (u32, 1)   12 flags (u32, 0)
 *   16 fingerprint         24 epoch              32 batch
 *   40 payload length      48 XXH64(payload, 0)  56 XXH64(trailer bytes 0..55, 0)
 */
#ifndef BATCHFS_CACHE_STORE_INTERNAL_H
#define BATCHFS_CACHE_STORE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "cache/store.h"

#define BFS_STORE_MAGIC   "BFSCENT"
#define BFS_STORE_VERSION 1u

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
 * XXH64 (seed 0) is payload_hash into out. */
void bfs_store_entry_trailer(const bfs_store_key *key, uint64_t payload_len, uint64_t payload_hash,
                             uint8_t out[BFS_STORE_TRAILER]);

/* bfs_store_entry_parse_trailer - check the last 64 bytes of a file of file_size bytes
 * (trailer, exactly BFS_STORE_TRAILER bytes): magic, version, flags, trailer checksum and
 * length. On success fills *key, *payload_len and *payload_hash. Returns a reason. */
int bfs_store_entry_parse_trailer(const uint8_t *trailer, uint64_t file_size, bfs_store_key *key,
                                  uint64_t *payload_len, uint64_t *payload_hash);

/* bfs_store_entry_check - verify a whole entry file (size bytes at file): trailer, key
 * (when key is not NULL) and the payload checksum. On success *payload_len (may be NULL)
 * gets the payload length. Returns a reason (BFS_STORE_ENTRY_OK when valid). */
int bfs_store_entry_check(const uint8_t *file, uint64_t size, const bfs_store_key *key,
                          uint64_t *payload_len);

/* bfs_store_entry_reason - a static English phrase for a reason. */
const char *bfs_store_entry_reason(int reason);

#endif
