/*
 * store_entry.c — build and verify the trailer of a store entry (see store_internal.h,
 * docs/cache.md). Pure functions over bytes: no I/O, so the fuzz target reaches all of it.
 */
#include "cache/store_internal.h"

#include <string.h>

#include "engine/hash.h"

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void bfs_store_entry_trailer(const bfs_store_key *key, uint64_t payload_len, uint64_t payload_hash,
                             uint32_t flags, uint8_t out[BFS_STORE_TRAILER])
{
    memcpy(out, BFS_STORE_MAGIC, 8); /* 7 letters and their NUL */
    put32(out + 8, BFS_STORE_VERSION);
    put32(out + 12, flags);
    put64(out + 16, key->fingerprint);
    put64(out + 24, key->epoch);
    put64(out + 32, key->batch);
    put64(out + 40, payload_len);
    put64(out + 48, payload_hash);
    put64(out + 56, bfs_xxh64(out, 56, 0));
}

int bfs_store_entry_parse_trailer(const uint8_t *t, uint64_t file_size, int xattr,
                                  bfs_store_key *key, uint64_t *payload_len,
                                  uint64_t *payload_hash)
{
    if (!xattr && file_size < BFS_STORE_TRAILER)
        return BFS_STORE_ENTRY_SHORT;
    if (memcmp(t, BFS_STORE_MAGIC, 8) != 0 || get32(t + 8) != BFS_STORE_VERSION ||
        get32(t + 12) != (xattr ? BFS_STORE_FLAG_XATTR : 0))
        return BFS_STORE_ENTRY_MAGIC;
    if (get64(t + 56) != bfs_xxh64(t, 56, 0))
        return BFS_STORE_ENTRY_TRAILER;
    uint64_t len = get64(t + 40);
    if (len != file_size - (xattr ? 0 : BFS_STORE_TRAILER))
        return BFS_STORE_ENTRY_LENGTH;
    key->fingerprint = get64(t + 16);
    key->epoch = get64(t + 24);
    key->batch = get64(t + 32);
    *payload_len = len;
    *payload_hash = get64(t + 48);
    return BFS_STORE_ENTRY_OK;
}

/* Verify file (size bytes) against trailer t, read from the xattr or from the file. */
static int check(const uint8_t *t, int xattr, const uint8_t *file, uint64_t size,
                 const bfs_store_key *key, uint64_t *payload_len)
{
    bfs_store_key k;
    uint64_t len, hash;
    int r = bfs_store_entry_parse_trailer(t, size, xattr, &k, &len, &hash);
    if (r)
        return r;
    if (key &&
        (k.fingerprint != key->fingerprint || k.epoch != key->epoch || k.batch != key->batch))
        return BFS_STORE_ENTRY_KEY;
    if (bfs_xxh64(file, (size_t)len, 0) != hash)
        return BFS_STORE_ENTRY_CHECKSUM;
    if (payload_len)
        *payload_len = len;
    return BFS_STORE_ENTRY_OK;
}

int bfs_store_entry_check(const uint8_t *file, uint64_t size, const bfs_store_key *key,
                          uint64_t *payload_len)
{
    if (size < BFS_STORE_TRAILER)
        return BFS_STORE_ENTRY_SHORT;
    return check(file + size - BFS_STORE_TRAILER, 0, file, size, key, payload_len);
}

int bfs_store_entry_check_xattr(const uint8_t *xattr, size_t xattr_len, const uint8_t *file,
                                uint64_t size, const bfs_store_key *key, uint64_t *payload_len)
{
    if (xattr_len != BFS_STORE_TRAILER)
        return BFS_STORE_ENTRY_MAGIC;
    return check(xattr, 1, file, size, key, payload_len);
}

const char *bfs_store_entry_reason(int reason)
{
    switch (reason) {
    case BFS_STORE_ENTRY_OK:
        return "valid";
    case BFS_STORE_ENTRY_SHORT:
        return "shorter than its trailer (torn)";
    case BFS_STORE_ENTRY_MAGIC:
        return "no entry trailer (torn or not an entry)";
    case BFS_STORE_ENTRY_TRAILER:
        return "trailer checksum mismatch";
    case BFS_STORE_ENTRY_LENGTH:
        return "size does not match its trailer (torn)";
    case BFS_STORE_ENTRY_KEY:
        return "trailer names another key (misplaced file)";
    case BFS_STORE_ENTRY_CHECKSUM:
        return "payload checksum mismatch (corrupt)";
    }
    return "unknown";
}
