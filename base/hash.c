/* hash.c — XXH64 from the xxHash specification (see hash.h). Little-endian loads via
 * memcpy, so unaligned input is fine. */
#include "base/hash.h"
#include "base/endian.h"

#include <string.h>

#define P1 0x9E3779B185EBCA87ULL
#define P2 0xC2B2AE3D27D4EB4FULL
#define P3 0x165667B19E3779F9ULL
#define P4 0x85EBCA77C2B2AE63ULL
#define P5 0x27D4EB2F165667C5ULL

static inline uint64_t rotl(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

static inline uint64_t round64(uint64_t acc, uint64_t in)
{
    acc += in * P2;
    acc = rotl(acc, 31);
    return acc * P1;
}

static inline uint64_t merge(uint64_t acc, uint64_t v)
{
    acc ^= round64(0, v);
    return acc * P1 + P4;
}

static uint64_t finish(uint64_t h, const uint8_t *p, size_t len)
{
    while (len >= 8) {
        h ^= round64(0, bfs_ld64(p));
        h = rotl(h, 27) * P1 + P4;
        p += 8, len -= 8;
    }
    if (len >= 4) {
        h ^= (uint64_t)bfs_ld32(p) * P1;
        h = rotl(h, 23) * P2 + P3;
        p += 4, len -= 4;
    }
    while (len--) {
        h ^= (*p++) * P5;
        h = rotl(h, 11) * P1;
    }
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    h ^= h >> 32;
    return h;
}

static const uint8_t *stripes(uint64_t v[4], const uint8_t *p, const uint8_t *limit)
{
    do {
        v[0] = round64(v[0], bfs_ld64(p));
        v[1] = round64(v[1], bfs_ld64(p + 8));
        v[2] = round64(v[2], bfs_ld64(p + 16));
        v[3] = round64(v[3], bfs_ld64(p + 24));
        p += 32;
    } while (p <= limit);
    return p;
}

static uint64_t converge(const uint64_t v[4])
{
    uint64_t h = rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18);
    for (int i = 0; i < 4; i++)
        h = merge(h, v[i]);
    return h;
}

void bfs_xxh64_init(bfs_xxh64_state *s, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    s->seed = seed;
    s->v[0] = seed + P1 + P2;
    s->v[1] = seed + P2;
    s->v[2] = seed;
    s->v[3] = seed - P1;
}

uint64_t bfs_xxh64(const void *data, size_t len, uint64_t seed)
{
    const uint8_t *p = data;
    uint64_t h;
    if (len >= 32) {
        bfs_xxh64_state s;
        bfs_xxh64_init(&s, seed);
        const uint8_t *end = stripes(s.v, p, p + len - 32);
        h = converge(s.v) + len;
        return finish(h, end, len - (size_t)(end - p));
    }
    h = seed + P5 + len;
    return finish(h, p, len);
}

void bfs_xxh64_update(bfs_xxh64_state *s, const void *data, size_t len)
{
    const uint8_t *p = data;
    s->total += len;
    if (s->buffered + len < 32) {
        memcpy(s->buf + s->buffered, p, len);
        s->buffered += (uint32_t)len;
        return;
    }
    if (s->buffered) {
        size_t take = 32 - s->buffered;
        memcpy(s->buf + s->buffered, p, take);
        stripes(s->v, s->buf, s->buf);
        p += take, len -= take;
        s->buffered = 0;
    }
    if (len >= 32) {
        const uint8_t *end = stripes(s->v, p, p + len - 32);
        len -= (size_t)(end - p);
        p = end;
    }
    memcpy(s->buf, p, len);
    s->buffered = (uint32_t)len;
}

uint64_t bfs_xxh64_digest(const bfs_xxh64_state *s)
{
    uint64_t h;
    if (s->total >= 32)
        h = converge(s->v);
    else
        h = s->seed + P5;
    h += s->total;
    return finish(h, s->buf, s->buffered);
}
