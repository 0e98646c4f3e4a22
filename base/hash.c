/* hash.c — XXH64 through libxxhash (Debian's libxxhash-dev), the reference
 * implementation of the algorithm .bfs files and cache entries were written with (see
 * hash.h). The state lives in the caller's bfs_xxh64_state: no allocation. */
#include "base/hash.h"

#define XXH_STATIC_LINKING_ONLY /* XXH64_state_t's layout, for state on the stack */
#include <xxhash.h>

#include <assert.h>
#include <string.h>

static_assert(sizeof(XXH64_state_t) <= sizeof(bfs_xxh64_state),
              "bfs_xxh64_state too small for libxxhash's XXH64_state_t");
static_assert(_Alignof(XXH64_state_t) <= _Alignof(bfs_xxh64_state),
              "bfs_xxh64_state not aligned enough for libxxhash's XXH64_state_t");

uint64_t bfs_xxh64(const void *data, size_t len, uint64_t seed)
{
    return XXH64(len ? data : "", len, seed);
}

void bfs_xxh64_init(bfs_xxh64_state *s, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    XXH64_reset((XXH64_state_t *)(void *)s->opaque, seed);
}

void bfs_xxh64_update(bfs_xxh64_state *s, const void *data, size_t len)
{
    if (len)
        XXH64_update((XXH64_state_t *)(void *)s->opaque, data, len);
}

uint64_t bfs_xxh64_digest(const bfs_xxh64_state *s)
{
    return XXH64_digest((const XXH64_state_t *)(const void *)s->opaque);
}
