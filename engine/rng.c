/*
 * rng.c — Philox4x32-10 and the per-sample generator built on it (see rng.h).
 *
 * Philox round (Salmon et al. 2011, Random123 philox.h): with M0 = 0xD2511F53,
 * M1 = 0xCD9E8D57,
 *     (hi0, lo0) = M0 * c0,  (hi1, lo1) = M1 * c2      (32x32 -> 64-bit products)
 *     c' = { hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0 }
 * and the key is bumped by the Weyl constants (0x9E3779B9, 0xBB67AE85) between rounds.
 * Ten rounds: the variant Random123 recommends and cuRAND/numpy/JAX use (passes BigCrush
 * with margin; 7 rounds already do).
 */
#include "engine/rng.h"
#include "base/mix.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

/* Salt mixed into the seed so that seed 0 does not give a degenerate key (the splitmix64
 * finalizer maps 0 to 0), and so the generator's keys differ from the plan's (which uses
 * other salts). frac(sqrt(2)) in 64 bits, SHA-512's first IV word: a nothing-up-my-sleeve
 * number. Changing it changes every augmentation ever served. */
#define RNG_KEY_SALT 0x6a09e667f3bcc908ull

void bfs_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

void bfs_rng_init(bfs_rng *r, uint64_t seed, uint64_t epoch, uint64_t sample_index, uint32_t stream)
{
    /* mix64 is a bijection, so for a fixed seed distinct epochs give distinct keys and
     * for a fixed epoch distinct seeds do. */
    uint64_t k = bfs_mix64(bfs_mix64(seed ^ RNG_KEY_SALT) ^ epoch);
    r->key[0] = (uint32_t)k;
    r->key[1] = (uint32_t)(k >> 32);
    r->ctr[0] = 0;
    r->ctr[1] = stream;
    r->ctr[2] = (uint32_t)sample_index;
    r->ctr[3] = (uint32_t)(sample_index >> 32);
    r->buf[0] = r->buf[1] = r->buf[2] = r->buf[3] = 0;
    r->avail = 0;
}

uint32_t bfs_rng_u32(bfs_rng *r)
{
    if (r->avail == 0) {
        bfs_philox4x32_10(r->ctr, r->key, r->buf);
        r->ctr[0]++; /* wraps after 2^32 blocks: documented stream length */
        r->avail = 4;
    }
    return r->buf[4 - r->avail--];
}

uint64_t bfs_rng_u64(bfs_rng *r)
{
    uint64_t hi = bfs_rng_u32(r);
    return hi << 32 | bfs_rng_u32(r);
}

double bfs_rng_uniform(bfs_rng *r)
{
    return (double)(bfs_rng_u64(r) >> 11) * 0x1.0p-53;
}

double bfs_rng_uniform_range(bfs_rng *r, double a, double b)
{
    double u = bfs_rng_uniform(r);
    if (!(a < b))
        return a;
    /* Two statements, so that no compiler default fuses them into one FMA (a different
     * rounding on machines that have FMA): GCC does not contract in ISO C mode (-std=c11)
     * and Clang contracts only within one expression. */
    double scaled = (b - a) * u;
    double x = a + scaled;
    if (x >= b)
        x = nextafter(b, a); /* rounding reached b; still >= a because a < b */
    return x;
}

int64_t bfs_rng_int(bfs_rng *r, int64_t lo, int64_t hi)
{
    if (lo >= hi) {
        (void)bfs_rng_u32(r);
        return lo;
    }
    uint64_t span = (uint64_t)hi - (uint64_t)lo; /* range size - 1, no overflow */
    uint64_t x;
    if (span < UINT32_MAX) {
        uint32_t range = (uint32_t)span + 1;
        uint32_t reject_below = (uint32_t)-range % range; /* 2^32 mod range */
        uint32_t v;
        do
            v = bfs_rng_u32(r);
        while (v < reject_below);
        x = v % range;
    } else if (span == UINT32_MAX) {
        x = bfs_rng_u32(r); /* range is exactly 2^32 */
    } else if (span == UINT64_MAX) {
        x = bfs_rng_u64(r); /* the whole int64 range */
    } else {
        uint64_t range = span + 1;
        uint64_t reject_below = -range % range; /* 2^64 mod range */
        uint64_t v;
        do
            v = bfs_rng_u64(r);
        while (v < reject_below);
        x = v % range;
    }
    /* lo + x fits in [lo, hi]; go through uint64_t to avoid signed overflow, and convert
     * back by the two's-complement rule GCC and Clang define. */
    uint64_t u = (uint64_t)lo + x;
    return u <= (uint64_t)INT64_MAX ? (int64_t)u : -(int64_t)(UINT64_MAX - u) - 1;
}

int bfs_substitutes(uint64_t seed, uint64_t epoch, uint64_t bad, uint64_t n,
                    uint64_t out[BFS_SUBSTITUTE_TRIES])
{
    if (n < 2)
        return 0;
    bfs_rng r;
    bfs_rng_init(&r, seed, epoch, bad, BFS_RNG_STREAM_SUBSTITUTE);
    for (int i = 0; i < BFS_SUBSTITUTE_TRIES; i++) {
        out[i] = (uint64_t)bfs_rng_int(&r, 0, (int64_t)n - 2);
        out[i] += out[i] >= bad; /* never itself */
    }
    return BFS_SUBSTITUTE_TRIES;
}
