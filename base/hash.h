/*
 * hash.h — XXH64 (Yann Collet's xxHash, 64-bit), the checksum of the .bfs format and of
 * cache entries, implemented from its public specification. Chosen over CRC32C for
 * speed without CPU dispatch (~10 GB/s portable) and a 64-bit result.
 */
#ifndef BATCHFS_BASE_HASH_H
#define BATCHFS_BASE_HASH_H

#include <stddef.h>
#include <stdint.h>

/* One-shot XXH64 of len bytes at data. */
uint64_t bfs_xxh64(const void *data, size_t len, uint64_t seed);

/* Streaming form: init, update any number of times, digest (state is caller-owned). */
typedef struct bfs_xxh64_state {
    uint64_t v[4];
    uint64_t total;
    uint8_t buf[32];
    uint32_t buffered;
    uint64_t seed;
} bfs_xxh64_state;

void bfs_xxh64_init(bfs_xxh64_state *s, uint64_t seed);
void bfs_xxh64_update(bfs_xxh64_state *s, const void *data, size_t len);
uint64_t bfs_xxh64_digest(const bfs_xxh64_state *s);

#endif
