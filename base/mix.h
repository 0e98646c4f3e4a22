/*
 * mix.h — the 64-bit mixer that batchfs's determinism rests on.
 *
 * bfs_mix64 is splitmix64's finalizer (Steele, Lea, Flood 2014): a bijective,
 * well-avalanching 64-bit mixer. The epoch plan (engine/plan.c: permutation keys, Feistel
 * rounds) and the sample RNG's keys (engine/rng.c) are built on it, so changing a constant
 * here changes every batch ever served: tests/check_plan.c and check_engine.c pin its
 * output through their golden values.
 */
#ifndef BATCHFS_BASE_MIX_H
#define BATCHFS_BASE_MIX_H

#include <stdint.h>

static inline uint64_t bfs_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

#endif
