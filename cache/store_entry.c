/*
 * store_entry.c — build and verify the trailer of a store entry (see store_internal.h,
 * docs/cache.md). Pure functions over bytes: no I/O, so the fuzz target reaches all of it.
 */
#include "cache/store_internal.h"

#include <string.h>

#include "base/hash.h"
#include "base/endian.h"

void bfs_store_entry_trailer(const bfs_store_key *key, uint64_t payload_len, uint64_t payload_hash,
                             uint32_t flags, uint8_t out[BFS_STORE_TRAILER])
{
    memcpy(out, BFS_STORE_MAGIC, 8); /* 7 letters and their NUL */
    bfs_st32(out + 8, BFS_STORE_VERSION);
    bfs_st32(out + 12, flags);
    bfs_st64(out + 16, key->fingerprint);
    bfs_st64(out + 24, key->epoch);
    bfs_st64(out + 32, key->batch);
    bfs_st64(out + 40, payload_len);
    bfs_st64(out + 48, payload_hash);
    bfs_st64(out + 56, bfs_xxh64(out, 56, 0));
}

int bfs_store_entry_parse_trailer(const uint8_t *t, uint64_t file_size, int xattr,
                                  bfs_store_key *key, uint64_t *payload_len, uint64_t *payload_hash)
{
    if (!xattr && file_size < BFS_STORE_TRAILER)
        return BFS_STORE_ENTRY_SHORT;
    if (memcmp(t, BFS_STORE_MAGIC, 8) != 0 || bfs_ld32(t + 8) != BFS_STORE_VERSION ||
        bfs_ld32(t + 12) != (xattr ? BFS_STORE_FLAG_XATTR : 0))
        return BFS_STORE_ENTRY_MAGIC;
    if (bfs_ld64(t + 56) != bfs_xxh64(t, 56, 0))
        return BFS_STORE_ENTRY_TRAILER;
    uint64_t len = bfs_ld64(t + 40);
    if (len != file_size - (xattr ? 0 : BFS_STORE_TRAILER))
        return BFS_STORE_ENTRY_LENGTH;
    key->fingerprint = bfs_ld64(t + 16);
    key->epoch = bfs_ld64(t + 24);
    key->batch = bfs_ld64(t + 32);
    *payload_len = len;
    *payload_hash = bfs_ld64(t + 48);
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
