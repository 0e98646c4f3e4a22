/*
 * fuzz_store_entry.c — libFuzzer target for the entry format of cache/store (the trailer
 * parser and the entry verifier, cache/store_entry.c) and for the store's read path
 * (cache/store.c: open, trailer pread, mmap, verify, removal of a bad entry).
 *
 * Each input is used three ways:
 *   1. as a whole entry file in memory: bfs_store_entry_check must accept it only if it is
 *      exactly payload + a trailer whose magic, version, flags, checksum, length and payload
 *      XXH64 all hold (recomputed here independently); an accepted file must be refused
 *      under any other key.
 *   2. as a payload: the trailer built for it must verify, and flipping any trailer byte
 *      or a payload byte must be refused (an XXH64 collision would be reported as a bug).
 *   3. as an entry file on disk, at the path of a fixed key in a scratch store (under
 *      $TMPDIR or /tmp, removed at exit): bfs_store_claim must answer HIT with exactly the
 *      payload if (1) accepted it for that key, else MINE with the file removed; and, where
 *      the file system takes user xattrs, as an entry whose first 64 bytes are its xattr
 *      trailer and the rest its file (HIT only if that trailer holds for that file).
 * Seeds: tests/fuzz/seeds/store_entry/ (valid entries, empty and not, and a torn one).
 */
#include "cache/store.h"
#include "cache/store_internal.h"
#include "base/hash.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_store_entry: %s:%d: contract violated: %s\n", __FILE__,          \
                    __LINE__, #cond);                                                              \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* Independent statement of validity (docs/cache.md), for use 1. */
static int valid_entry(const uint8_t *f, size_t size, bfs_store_key *key)
{
    if (size < BFS_STORE_TRAILER)
        return 0;
    const uint8_t *t = f + size - BFS_STORE_TRAILER;
    if (memcmp(t, "BFSCENT\0", 8) || rd64(t + 8) != 2 /* version 2, flags 0 */ ||
        rd64(t + 56) != bfs_xxh64(t, 56, 0) || rd64(t + 40) != size - BFS_STORE_TRAILER ||
        rd64(t + 48) != bfs_xxh64(f, size - 64, 0))
        return 0;
    key->fingerprint = rd64(t + 16);
    key->epoch = rd64(t + 24);
    key->batch = rd64(t + 32);
    return 1;
}

/* The same for an entry whose trailer t (tlen bytes) is its xattr: flags 1, the file is
 * exactly the payload. */
static int valid_xattr_entry(const uint8_t *t, size_t tlen, const uint8_t *f, size_t size,
                             bfs_store_key *key)
{
    if (tlen != BFS_STORE_TRAILER || memcmp(t, "BFSCENT\0", 8) ||
        rd64(t + 8) != (2 | (uint64_t)1 << 32) || rd64(t + 56) != bfs_xxh64(t, 56, 0) ||
        rd64(t + 40) != size || rd64(t + 48) != bfs_xxh64(f, size, 0))
        return 0;
    key->fingerprint = rd64(t + 16);
    key->epoch = rd64(t + 24);
    key->batch = rd64(t + 32);
    return 1;
}

/* fuzz targets link the library only (no tests/testutil.o): small helpers of their own */
static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    remove(p);
    return 0;
}

static void write_file(const char *path, const uint8_t *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CHECK(fd >= 0);
    while (len) {
        ssize_t n = write(fd, data, len);
        CHECK(n > 0);
        data += n, len -= (size_t)n;
    }
    CHECK(close(fd) == 0);
}

static char root[256];
static bfs_store *store;
static const bfs_store_key disk_key = {0x00f0f0f0f0f0f0f0ULL, 3, 7};
static char disk_path[512];

static void cleanup(void)
{
    bfs_store_close(store);
    nftw(root, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static void setup_store(void)
{
    if (store)
        return;
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/fuzz-store.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    CHECK(mkdtemp(root) != NULL);
    char err[256];
    CHECK(bfs_store_open(root, NULL, &store, err, sizeof err) == 0);
    atexit(cleanup);
    snprintf(disk_path, sizeof disk_path, "%s/v2/%016" PRIx64, root, disk_key.fingerprint);
    CHECK(mkdir(disk_path, 0700) == 0);
    snprintf(disk_path, sizeof disk_path, "%s/v2/%016" PRIx64 "/%" PRIu64, root,
             disk_key.fingerprint, disk_key.epoch);
    CHECK(mkdir(disk_path, 0700) == 0);
    snprintf(disk_path, sizeof disk_path, "%s/v2/%016" PRIx64 "/%" PRIu64 "/%" PRIu64 ".st", root,
             disk_key.fingerprint, disk_key.epoch, disk_key.batch);
}

/* Use 1. */
static void check_as_entry(const uint8_t *data, size_t size)
{
    bfs_store_key k;
    int valid = valid_entry(data, size, &k);
    uint64_t len = 12345;
    int r = bfs_store_entry_check(data, size, NULL, &len);
    CHECK((r == BFS_STORE_ENTRY_OK) == valid);
    CHECK(r >= BFS_STORE_ENTRY_OK && r <= BFS_STORE_ENTRY_CHECKSUM);
    CHECK(strlen(bfs_store_entry_reason(r)) > 0);
    if (!valid) {
        CHECK(len == 12345); /* untouched on failure */
        return;
    }
    CHECK(len == size - BFS_STORE_TRAILER);
    CHECK(bfs_store_entry_check(data, size, &k, NULL) == BFS_STORE_ENTRY_OK);
    bfs_store_key other = k;
    other.batch ^= 1;
    CHECK(bfs_store_entry_check(data, size, &other, NULL) == BFS_STORE_ENTRY_KEY);
    other = k;
    other.fingerprint += 1;
    CHECK(bfs_store_entry_check(data, size, &other, NULL) == BFS_STORE_ENTRY_KEY);
}

/* Use 2. */
static void check_as_payload(const uint8_t *data, size_t size)
{
    uint8_t *f = malloc(size + BFS_STORE_TRAILER);
    CHECK(f != NULL);
    memcpy(f, data, size);
    bfs_store_key k = {size >= 8 ? rd64(data) : 0, size, ~(uint64_t)size};
    bfs_store_entry_trailer(&k, size, bfs_xxh64(data, size, 0), 0, f + size);
    size_t n = size + BFS_STORE_TRAILER;
    uint64_t len = 0;
    CHECK(bfs_store_entry_check(f, n, &k, &len) == BFS_STORE_ENTRY_OK && len == size);
    bfs_store_key got;
    uint64_t plen, phash;
    CHECK(bfs_store_entry_parse_trailer(f + size, n, 0, &got, &plen, &phash) == BFS_STORE_ENTRY_OK);
    CHECK(got.fingerprint == k.fingerprint && got.epoch == k.epoch && got.batch == k.batch);
    CHECK(plen == size && phash == bfs_xxh64(data, size, 0));
    /* one bit of the trailer, and one of the payload, chosen by the input */
    size_t tb = size + (size ? data[0] : 0) % BFS_STORE_TRAILER;
    f[tb] ^= 0x10;
    CHECK(bfs_store_entry_check(f, n, &k, NULL) != BFS_STORE_ENTRY_OK);
    f[tb] ^= 0x10;
    if (size) {
        size_t pb = (size_t)(rd64(f + size + 48) % size);
        f[pb] ^= 0x01;
        CHECK(bfs_store_entry_check(f, n, &k, NULL) == BFS_STORE_ENTRY_CHECKSUM);
        f[pb] ^= 0x01;
    }
    /* one byte short or long is torn */
    CHECK(bfs_store_entry_check(f, n - 1, &k, NULL) != BFS_STORE_ENTRY_OK);
    /* the xattr form of the same payload, and a flipped bit of its trailer */
    uint8_t t[BFS_STORE_TRAILER];
    bfs_store_entry_trailer(&k, size, bfs_xxh64(data, size, 0), BFS_STORE_FLAG_XATTR, t);
    CHECK(valid_xattr_entry(t, sizeof t, data, size, &got));
    len = 0;
    CHECK(bfs_store_entry_check_xattr(t, sizeof t, data, size, &k, &len) == BFS_STORE_ENTRY_OK &&
          len == size);
    CHECK(bfs_store_entry_check_xattr(t, sizeof t, f, n, &k, NULL) == BFS_STORE_ENTRY_LENGTH);
    t[tb - size] ^= 0x10;
    CHECK(bfs_store_entry_check_xattr(t, sizeof t, data, size, &k, NULL) != BFS_STORE_ENTRY_OK);
    free(f);
}

/* Use 3: the file data (size bytes), with the xattr trailer xa (xlen bytes) if xa. */
static void check_on_disk(const uint8_t *data, size_t size, const uint8_t *xa, size_t xlen)
{
    static int no_xattr;
    setup_store();
    write_file(disk_path, data, size);
    if (xa && (no_xattr || setxattr(disk_path, BFS_STORE_XATTR, xa, xlen, 0) < 0)) {
        CHECK(no_xattr || errno == EOPNOTSUPP); /* this file system takes none: skip */
        no_xattr = 1;
        CHECK(unlink(disk_path) == 0);
        return;
    }
    bfs_store_key k;
    int valid = (xa ? valid_xattr_entry(xa, xlen, data, size, &k) : valid_entry(data, size, &k)) &&
                k.fingerprint == disk_key.fingerprint && k.epoch == disk_key.epoch &&
                k.batch == disk_key.batch;
    bfs_claim c;
    CHECK(bfs_store_claim(store, disk_key, &c) == 0);
    if (valid) {
        CHECK(c.state == BFS_STORE_HIT && c.size == size - (xa ? 0 : BFS_STORE_TRAILER));
        CHECK(c.exact == (xa != NULL));
        CHECK(c.size == 0 || memcmp(c.data, data, (size_t)c.size) == 0);
        bfs_store_claim_close(&c);
        CHECK(unlink(disk_path) == 0);
    } else {
        CHECK(c.state == BFS_STORE_MINE);
        struct stat st;
        CHECK(stat(disk_path, &st) < 0 && errno == ENOENT); /* removed */
        CHECK(bfs_store_abandon(&c) == 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_as_entry(data, size);
    check_as_payload(data, size);
    check_on_disk(data, size, NULL, 0);
    if (size >= BFS_STORE_TRAILER) /* the first 64 bytes as the xattr trailer */
        check_on_disk(data + BFS_STORE_TRAILER, size - BFS_STORE_TRAILER, data, BFS_STORE_TRAILER);
    /* inputs too short for a key of their own: also try them with a valid trailer for the
     * on-disk key appended, and as the xattr, so that use 3 reaches the HIT path */
    if (size <= 4096) {
        uint8_t *f = malloc(size + BFS_STORE_TRAILER);
        CHECK(f != NULL);
        memcpy(f, data, size);
        bfs_store_entry_trailer(&disk_key, size, bfs_xxh64(data, size, 0), 0, f + size);
        check_on_disk(f, size + BFS_STORE_TRAILER, NULL, 0);
        bfs_store_entry_trailer(&disk_key, size, bfs_xxh64(data, size, 0), BFS_STORE_FLAG_XATTR,
                                f + size);
        check_on_disk(data, size, f + size, BFS_STORE_TRAILER);
        free(f);
    }
    return 0;
}
