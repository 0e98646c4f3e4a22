/*
 * endian.h — little-endian loads and stores for batchfs's on-disk formats (.bfs, the
 * cache_dir entry trailer, safetensors headers and tensors).
 *
 * Every format batchfs writes is little-endian and the project targets little-endian
 * hosts only (checked at compile time below), so a load or store is one memcpy, which
 * compilers turn into a single unaligned move. Pointers may have any alignment.
 */
#ifndef BATCHFS_BASE_ENDIAN_H
#define BATCHFS_BASE_ENDIAN_H

#include <stdint.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error                                                                                             \
    "batchfs reads and writes its little-endian formats with plain moves: big-endian hosts unsupported"
#endif

static inline uint16_t bfs_ld16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

static inline uint32_t bfs_ld32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline uint64_t bfs_ld64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline void bfs_st16(uint8_t *p, uint16_t v)
{
    memcpy(p, &v, 2);
}

static inline void bfs_st32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

static inline void bfs_st64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

#endif
