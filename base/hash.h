/*
 * hash.h — XXH64 (Yann Collet's xxHash, 64-bit), the checksum of the .bfs format and of
 * cache entries, computed by libxxhash (Debian's libxxhash-dev: the reference code, so
 * files written by the earlier hand-written version stay valid). Chosen over CRC32C for
 * speed without CPU dispatch (~20 GB/s here) and a 64-bit result.
 */
#ifndef BATCHFS_BASE_HASH_H
#define BATCHFS_BASE_HASH_H

#include <stddef.h>
#include <stdint.h>

/* One-shot XXH64 of len bytes at data. */
uint64_t bfs_xxh64(const void *data, size_t len, uint64_t seed);

/* Streaming form: init, update any number of times, digest (state is caller-owned; its
 * bytes are libxxhash's XXH64_state_t, 88 bytes in 0.8, kept out of this header). */
typedef struct bfs_xxh64_state {
    _Alignas(16) unsigned char opaque[128];
} bfs_xxh64_state;

void bfs_xxh64_init(bfs_xxh64_state *s, uint64_t seed);
void bfs_xxh64_update(bfs_xxh64_state *s, const void *data, size_t len);
uint64_t bfs_xxh64_digest(const bfs_xxh64_state *s);

#endif
