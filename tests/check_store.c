/*
 * check_store.c — cache/store, the host-wide batch store: publish/claim round trips (whole
 * and streamed payloads, empty ones), the on-disk layout, fingerprint isolation, torn and
 * corrupt entries (bit flips anywhere, truncation, garbage, misplaced files) detected,
 * removed and recomputed; cross-process single flight (fork: one computes, the others wait
 * and hit), threads of one process, kill -9 of a writer mid-publish (no torn entry, the
 * key is taken over, its leftovers cleaned), LRU eviction under a budget (order, bound,
 * readers keep evicted bytes, concurrent daemons), concurrent publishers of one key, the
 * default directory's permissions and refusal of another user's directory. Every test runs
 * twice where it matters: O_TMPFILE publication and the named-temporary fallback.
 *
 * Scratch directories come from tu_mkdtemp ($TMPDIR or /tmp), one store directory per test
 * from its test case's fixture; run with TMPDIR=/dev/shm to cover tmpfs as well. Helper processes
 * report through exit codes, never ck_assert.
 */
#include "cache/store.h"
#include "cache/store_internal.h"
#include "base/io.h"
#include "tests/testutil.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------------------- */

static bfs_store_key key3(uint64_t fp, uint64_t epoch, uint64_t batch)
{
    bfs_store_key k = {.fingerprint = fp, .epoch = epoch, .batch = batch};
    return k;
}

/* Deterministic payload bytes for a seed (malloc'ed, at least 1 byte allocated). */
static uint8_t *payload(uint64_t seed, size_t len)
{
    uint8_t *p = malloc(len ? len : 1);
    ck_assert_ptr_nonnull(p);
    uint64_t s = seed;
    for (size_t i = 0; i < len; i += 8) {
        uint64_t v = tu_rand(&s);
        memcpy(p + i, &v, len - i < 8 ? len - i : 8);
    }
    return p;
}

/* The loop tests run in 4 modes (_i): bit 0, named temporaries instead of O_TMPFILE; bit 1,
 * the trailer appended to each entry file instead of being its xattr (both fallbacks for
 * file systems that lack the feature). */
static int g_in_file;
static void set_mode(int i)
{
    g_in_file = (i >> 1) & 1;
}

/* Does the test directory's file system take user xattrs? (else trailers go in files) */
static int xattr_ok(void)
{
    static int ok = -1;
    if (ok < 0) {
        char *d = tu_mkdtemp("bfs-xattr");
        char p[600];
        snprintf(p, sizeof p, "%s/f", d);
        ck_assert_int_eq(tu_write_file(p, "x", 1), 0);
        ok = setxattr(p, "user.batchfs.probe", "1", 1, 0) == 0;
        tu_rmtree(d);
        free(d);
    }
    return ok;
}

/* The bytes an entry's trailer adds to its file in the current mode. */
static uint64_t trl(void)
{
    return g_in_file || !xattr_ok() ? BFS_STORE_TRAILER : 0;
}

/* The test's store directory: made by the fixture of each test case that uses a store,
 * removed after the test (tu_mkdtemp, so under $TMPDIR). */
static char *g_root;

static void root_setup(void)
{
    g_root = tu_mkdtemp("bfs-store");
    ck_assert_ptr_nonnull(g_root);
}

static void root_teardown(void)
{
    tu_rmtree(g_root);
    free(g_root);
    g_root = NULL;
}

/* Open a handle on the test's store directory. */
static bfs_store *open_store(uint64_t budget, int named)
{
    bfs_store_opts o = {.budget_bytes = budget, .named_temps = named, .trailer_in_file = g_in_file};
    bfs_store *s = NULL;
    char err[256] = "";
    int rc = bfs_store_open(g_root, &o, &s, err, sizeof err);
    ck_assert_msg(rc == 0, "bfs_store_open(%s): %d %s", g_root, rc, err);
    return s;
}

/* A forked helper process's own handle on the test's store in the current mode (named
 * temporaries if named, budget, log_cb); the process exits with code 1 if it cannot be
 * opened (helpers report through exit codes, never ck_assert). */
static bfs_store *child_store(int named, uint64_t budget, void (*log_cb)(void *, const char *))
{
    bfs_store_opts o = {.budget_bytes = budget,
                        .named_temps = named,
                        .trailer_in_file = g_in_file,
                        .log_cb = log_cb};
    bfs_store *s;
    if (bfs_store_open(g_root, &o, &s, NULL, 0))
        _exit(1);
    return s;
}

/* Claim key (must be MINE) and publish data. */
static void put(bfs_store *s, bfs_store_key k, const uint8_t *data, size_t len)
{
    bfs_claim c;
    ck_assert_int_eq(bfs_store_claim(s, k, &c), 0);
    ck_assert_int_eq(c.state, BFS_STORE_MINE);
    ck_assert_int_eq(bfs_store_publish(&c, data, len), 0);
    ck_assert_int_eq(c.state, BFS_STORE_NONE);
}

/* Claim key: must be a HIT with exactly these bytes. */
static void expect_hit(bfs_store *s, bfs_store_key k, const uint8_t *data, size_t len)
{
    bfs_claim c;
    ck_assert_int_eq(bfs_store_claim(s, k, &c), 0);
    ck_assert_int_eq(c.state, BFS_STORE_HIT);
    ck_assert_uint_eq(c.size, len);
    ck_assert(len == 0 || memcmp(c.data, data, len) == 0);
    struct stat st;
    ck_assert_int_eq(fstat(c.fd, &st), 0);
    ck_assert_uint_eq((uint64_t)st.st_size, len + trl());
    ck_assert_int_eq(c.exact, trl() == 0);
    bfs_store_claim_close(&c);
    ck_assert_int_eq(c.state, BFS_STORE_NONE);
    bfs_store_claim_close(&c); /* idempotent */
}

/* Claim key: must be MINE (a miss); the claim is abandoned. */
static void expect_miss(bfs_store *s, bfs_store_key k)
{
    bfs_claim c;
    ck_assert_int_eq(bfs_store_claim(s, k, &c), 0);
    ck_assert_int_eq(c.state, BFS_STORE_MINE);
    ck_assert_int_eq(bfs_store_abandon(&c), 0);
}

/* The path of key's file with suffix (".st", ".lock", ...) in the test's store. */
static void entry_path(bfs_store_key k, const char *suffix, char *buf, size_t len)
{
    snprintf(buf, len, "%s/v2/%016" PRIx64 "/%" PRIu64 "/%" PRIu64 "%s", g_root, k.fingerprint,
             k.epoch, k.batch, suffix);
}

static int exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* What a scan of the tree finds (nftw callbacks have no user pointer: a static). */
static struct tree_count {
    uint64_t entry_bytes;
    int entries, locks, temps, others;
} tree;

static int tree_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)ftw;
    if (flag != FTW_F)
        return 0;
    const char *name = strrchr(p, '/') + 1;
    size_t n = strlen(name);
    if (strstr(name, ".st.tmp-"))
        tree.temps++;
    else if (n > 3 && !strcmp(name + n - 3, ".st"))
        tree.entries++, tree.entry_bytes += (uint64_t)sb->st_size;
    else if (n > 5 && !strcmp(name + n - 5, ".lock") && name[0] != '.')
        tree.locks++;
    else if (name[0] != '.')
        tree.others++;
    return 0;
}

static struct tree_count count_tree(void)
{
    memset(&tree, 0, sizeof tree);
    nftw(g_root, tree_cb, 16, FTW_PHYS);
    return tree;
}

static void log_stderr(void *arg, const char *msg)
{
    (void)arg;
    fprintf(stderr, "check_store[%ld]: %s\n", (long)getpid(), msg);
}

/* Log lines kept for the test to look at (one test process: no locking needed beyond the
 * store's own calls, which may come from several threads: guarded by a mutex). */
static struct {
    pthread_mutex_t lock;
    char text[16384];
    size_t len;
} g_log = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void log_keep(void *arg, const char *msg)
{
    (void)arg;
    pthread_mutex_lock(&g_log.lock);
    int n = snprintf(g_log.text + g_log.len, sizeof g_log.text - g_log.len, "%s\n", msg);
    if (n > 0 && g_log.len + (size_t)n < sizeof g_log.text)
        g_log.len += (size_t)n;
    pthread_mutex_unlock(&g_log.lock);
}

/* Lines of the kept log that contain needle. */
static int log_count(const char *needle)
{
    int n = 0;
    for (const char *p = g_log.text; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* ---- round trips and layout ---------------------------------------------------------- */

START_TEST(round_trip)
{
    set_mode(_i);
    bfs_store *s = open_store(0, (_i & 1));
    size_t lens[] = {0, 1, 63, 64, 65, 4096, 100000, 1 << 20};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        bfs_store_key k = key3(0x0123456789abcdefULL, 7, i);
        uint8_t *d = payload(i, lens[i]);
        expect_miss(s, k); /* abandon leaves nothing */
        put(s, k, d, lens[i]);
        expect_hit(s, k, d, lens[i]);
        /* the layout of docs/cache.md */
        char p[512];
        entry_path(k, ".st", p, sizeof p);
        uint8_t *file;
        size_t flen;
        ck_assert_int_eq(tu_read_file(p, &file, &flen), 0);
        ck_assert_uint_eq(flen, lens[i] + trl());
        ck_assert(lens[i] == 0 || memcmp(file, d, lens[i]) == 0);
        if (trl()) {
            ck_assert_int_eq(memcmp(file + lens[i], "BFSCENT\0", 8), 0);
            ck_assert_int_eq(bfs_store_entry_check(file, flen, &k, NULL), BFS_STORE_ENTRY_OK);
            ck_assert_int_lt(getxattr(p, BFS_STORE_XATTR, NULL, 0), 0);
        } else {
            uint8_t t[100];
            ck_assert_int_eq(getxattr(p, BFS_STORE_XATTR, t, sizeof t), BFS_STORE_TRAILER);
            ck_assert_int_eq(memcmp(t, "BFSCENT\0", 8), 0);
            ck_assert_int_eq(
                bfs_store_entry_check_xattr(t, BFS_STORE_TRAILER, file, flen, &k, NULL),
                BFS_STORE_ENTRY_OK);
        }
        free(file);
        free(d);
    }
    struct tree_count t = count_tree();
    ck_assert_int_eq(t.entries, 8);
    ck_assert_int_eq(t.locks, 0); /* released and removed */
    ck_assert_int_eq(t.temps, 0);
    ck_assert_int_eq(t.others, 0);
    bfs_store_stats st;
    bfs_store_get_stats(s, &st);
    ck_assert_uint_eq(st.hits, 8);
    ck_assert_uint_eq(st.misses, 16);
    ck_assert_uint_eq(st.publishes, 8);
    ck_assert_uint_eq(st.abandons, 8);
    ck_assert_uint_eq(st.usage_bytes, t.entry_bytes);
    ck_assert_uint_eq(st.corrupt, 0);
    bfs_store_close(s);
    /* a new handle sees the same entries and recounts the same usage */
    s = open_store(0, (_i & 1));
    bfs_store_get_stats(s, &st);
    ck_assert_uint_eq(st.usage_bytes, t.entry_bytes);
    uint8_t *d = payload(6, 100000);
    expect_hit(s, key3(0x0123456789abcdefULL, 7, 6), d, 100000);
    /* an exact entry's file and mapping can be taken over, and outlive the entry */
    bfs_claim c;
    int fd = -1;
    const uint8_t *m = NULL;
    ck_assert_int_eq(bfs_store_claim(s, key3(0x0123456789abcdefULL, 7, 6), &c), 0);
    ck_assert_int_eq(c.state, BFS_STORE_HIT);
    if (trl()) {
        ck_assert_int_eq(bfs_store_claim_take(&c, &fd, &m), -EINVAL);
        ck_assert_int_eq(c.state, BFS_STORE_HIT);
        bfs_store_claim_close(&c);
    } else {
        ck_assert_int_eq(bfs_store_claim_take(&c, &fd, &m), 0);
        ck_assert_int_eq(c.state, BFS_STORE_NONE);
        ck_assert_int_eq(c.fd, -1);
        bfs_store_claim_close(&c); /* owns nothing now */
        char p[512];
        entry_path(key3(0x0123456789abcdefULL, 7, 6), ".st", p, sizeof p);
        ck_assert_int_eq(unlink(p), 0);
        ck_assert_int_eq(memcmp(m, d, 100000), 0);
        uint8_t b[100];
        ck_assert_int_eq(pread(fd, b, sizeof b, 500), (ssize_t)sizeof b);
        ck_assert_int_eq(memcmp(b, d + 500, sizeof b), 0);
        struct stat fst;
        ck_assert_int_eq(fstat(fd, &fst), 0);
        ck_assert_uint_eq((uint64_t)fst.st_size, 100000);
        munmap((void *)m, 100000);
        close(fd);
        bfs_store_get_stats(s, &st);
        ck_assert_uint_eq(st.taken, 1);
    }
    /* an empty payload has no mapping to take */
    ck_assert_int_eq(bfs_store_claim(s, key3(0x0123456789abcdefULL, 7, 0), &c), 0);
    ck_assert_int_eq(c.state, BFS_STORE_HIT);
    ck_assert_int_eq(bfs_store_claim_take(&c, &fd, &m), -EINVAL);
    bfs_store_claim_close(&c);
    ck_assert_int_eq(bfs_store_claim_take(NULL, &fd, &m), -EINVAL);
    free(d);
    bfs_store_close(s);
    bfs_store_close(NULL);
}
END_TEST

START_TEST(streamed_write)
{
    set_mode(_i);
    bfs_store *s = open_store(0, (_i & 1));
    size_t len = 300001;
    uint8_t *d = payload(42, len);
    bfs_claim c;
    bfs_store_key k = key3(1, 2, 3);
    ck_assert_int_eq(bfs_store_claim(s, k, &c), 0);
    ck_assert_int_eq(c.state, BFS_STORE_MINE);
    for (size_t off = 0; off < len; off += 7777)
        ck_assert_int_eq(bfs_store_write(&c, d + off, len - off < 7777 ? len - off : 7777), 0);
    /* invisible until commit */
    char p[512];
    entry_path(k, ".st", p, sizeof p);
    ck_assert(!exists(p));
    ck_assert_int_eq(bfs_store_commit(&c), 0);
    ck_assert(exists(p));
    expect_hit(s, k, d, len);
    free(d);
    bfs_store_close(s);
}
END_TEST

START_TEST(api_misuse)
{
    bfs_store *s = open_store(0, 0);
    bfs_claim c;
    bfs_store_key k = key3(1, 0, 0);
    ck_assert_int_eq(bfs_store_claim(s, k, &c), 0);
    ck_assert_int_eq(c.state, BFS_STORE_MINE);
    bfs_store_claim_close(&c); /* abandons: the key is free again */
    ck_assert_int_eq(c.state, BFS_STORE_NONE);
    ck_assert_int_eq(bfs_store_write(&c, "x", 1), -EINVAL);
    ck_assert_int_eq(bfs_store_commit(&c), -EINVAL);
    ck_assert_int_eq(bfs_store_abandon(&c), -EINVAL);
    ck_assert_int_eq(bfs_store_write(NULL, "x", 1), -EINVAL);
    bfs_store_claim_close(NULL);
    put(s, k, (const uint8_t *)"abc", 3);
    ck_assert_int_eq(bfs_store_claim(s, k, &c), 0);
    ck_assert_int_eq(c.state, BFS_STORE_HIT);
    ck_assert_int_eq(bfs_store_publish(&c, "abc", 3), -EINVAL); /* not MINE */
    bfs_store_claim_close(&c);
    /* sync policy names */
    bfs_store_sync y;
    ck_assert_int_eq(bfs_store_sync_parse("none", &y), 0);
    ck_assert_int_eq(y, BFS_STORE_SYNC_NONE);
    ck_assert_int_eq(bfs_store_sync_parse("data", &y), 0);
    ck_assert_int_eq(y, BFS_STORE_SYNC_DATA);
    ck_assert_int_eq(bfs_store_sync_parse("full", &y), 0);
    ck_assert_int_eq(y, BFS_STORE_SYNC_FULL);
    ck_assert_int_eq(bfs_store_sync_parse("fsync", &y), -EINVAL);
    ck_assert_int_eq(bfs_store_sync_parse(NULL, &y), -EINVAL);
    ck_assert_str_eq(bfs_store_sync_name(BFS_STORE_SYNC_FULL), "full");
    /* bad options */
    bfs_store_opts o = {.sync = (bfs_store_sync)7};
    bfs_store *s2 = (bfs_store *)1;
    char err[256] = "";
    ck_assert_int_eq(bfs_store_open(g_root, &o, &s2, err, sizeof err), -EINVAL);
    ck_assert_ptr_null(s2);
    ck_assert(err[0] != 0);
    bfs_store_close(s);
}
END_TEST

START_TEST(sync_policies)
{
    set_mode(_i);
    for (int p = BFS_STORE_SYNC_NONE; p <= BFS_STORE_SYNC_FULL; p++) {
        bfs_store_opts o = {
            .sync = (bfs_store_sync)p, .named_temps = _i & 1, .trailer_in_file = g_in_file};
        bfs_store *s;
        ck_assert_int_eq(bfs_store_open(g_root, &o, &s, NULL, 0), 0);
        uint8_t *d = payload((uint64_t)p, 5000);
        put(s, key3(9, (uint64_t)p, 1), d, 5000);
        expect_hit(s, key3(9, (uint64_t)p, 1), d, 5000);
        free(d);
        bfs_store_close(s);
    }
}
END_TEST

START_TEST(fingerprints_never_share)
{
    bfs_store *s = open_store(0, 0);
    uint8_t *a = payload(1, 10000), *b = payload(2, 10000);
    put(s, key3(0xaaaa, 0, 0), a, 10000);
    /* same epoch and batch, another pipeline: a miss, then its own bytes */
    expect_miss(s, key3(0xbbbb, 0, 0));
    put(s, key3(0xbbbb, 0, 0), b, 10000);
    expect_hit(s, key3(0xaaaa, 0, 0), a, 10000);
    expect_hit(s, key3(0xbbbb, 0, 0), b, 10000);
    /* neighbours in epoch and batch do not alias either */
    expect_miss(s, key3(0xaaaa, 1, 0));
    expect_miss(s, key3(0xaaaa, 0, 1));
    /* a file copied to another key's path is refused (its trailer names its key) */
    char from[512], to[512], dir[512];
    entry_path(key3(0xaaaa, 0, 0), ".st", from, sizeof from);
    snprintf(dir, sizeof dir, "%s/v2/%016x", g_root, 0xccccu);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    snprintf(dir, sizeof dir, "%s/v2/%016x/0", g_root, 0xccccu);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    entry_path(key3(0xcccc, 0, 0), ".st", to, sizeof to);
    uint8_t *f;
    size_t flen;
    ck_assert_int_eq(tu_read_file(from, &f, &flen), 0);
    ck_assert_int_eq(tu_write_file(to, f, flen), 0);
    free(f);
    expect_miss(s, key3(0xcccc, 0, 0));
    ck_assert(!exists(to));
    bfs_store_stats st;
    bfs_store_get_stats(s, &st);
    ck_assert_uint_eq(st.corrupt, 1);
    free(a);
    free(b);
    bfs_store_close(s);
}
END_TEST

/* ---- corruption ---------------------------------------------------------------------- */

/* Flip bit b of the byte at pos of the entry's trailer in its xattr. */
static void flip_xattr(const char *p, size_t pos, int bit)
{
    uint8_t t[BFS_STORE_TRAILER];
    ck_assert_int_eq(getxattr(p, BFS_STORE_XATTR, t, sizeof t), BFS_STORE_TRAILER);
    t[pos] ^= (uint8_t)(1u << bit);
    ck_assert_int_eq(setxattr(p, BFS_STORE_XATTR, t, sizeof t, 0), 0);
}

START_TEST(corrupt_byte_flips)
{
    g_in_file = _i; /* 0: the trailer is the xattr (where it can be), 1: in the file */
    bfs_store *s = open_store(0, 0);
    size_t len = 50000;
    uint8_t *d = payload(5, len);
    bfs_store_key k = key3(77, 1, 2);
    char p[512];
    entry_path(k, ".st", p, sizeof p);
    /* every trailer byte, and payload bytes at the start, middle and end */
    size_t pos[BFS_STORE_TRAILER + 3];
    int n = 0;
    pos[n++] = 0, pos[n++] = len / 2, pos[n++] = len - 1;
    for (int i = 0; i < BFS_STORE_TRAILER; i++)
        pos[n++] = len + (size_t)i;
    for (int i = 0; i < n; i++) {
        put(s, k, d, len);
        if (pos[i] >= len && !trl()) {
            flip_xattr(p, pos[i] - len, i % 8);
        } else {
            int fd = open(p, O_RDWR);
            ck_assert_int_ge(fd, 0);
            uint8_t b;
            ck_assert_int_eq(pread(fd, &b, 1, (off_t)pos[i]), 1);
            b ^= (uint8_t)(1u << (i % 8));
            ck_assert_int_eq(pwrite(fd, &b, 1, (off_t)pos[i]), 1);
            close(fd);
        }
        /* detected, removed, answered as a miss */
        bfs_claim c;
        ck_assert_int_eq(bfs_store_claim(s, k, &c), 0);
        ck_assert_msg(c.state == BFS_STORE_MINE, "flip at %zu served", pos[i]);
        ck_assert_msg(!exists(p), "corrupt entry not removed (flip at %zu)", pos[i]);
        /* recomputed */
        ck_assert_int_eq(bfs_store_publish(&c, d, len), 0);
        expect_hit(s, k, d, len);
        ck_assert_int_eq(unlink(p), 0);
    }
    bfs_store_stats st;
    bfs_store_get_stats(s, &st);
    ck_assert_uint_eq(st.corrupt, (uint64_t)n);
    free(d);
    bfs_store_close(s);
}
END_TEST

START_TEST(corrupt_truncated_and_garbage)
{
    g_in_file = _i;
    bfs_store *s = open_store(0, 0);
    size_t len = 20000;
    uint8_t *d = payload(6, len);
    bfs_store_key k = key3(78, 0, 0);
    char p[512];
    entry_path(k, ".st", p, sizeof p);
    /* truncations (torn tails), one byte appended, a file of the right size but zeros; with
     * the trailer in an xattr also: the xattr removed, too long, too short */
    long sizes[] = {0,  1,  63, 64, (long)len / 2, (long)len - 1, (long)len, (long)len + 63, -1,
                    -2, -3, -4, -5};
    int n = (int)(sizeof sizes / sizeof sizes[0]);
    int done = 0;
    for (int i = 0; i < n; i++) {
        if (trl() && (sizes[i] <= -3 || sizes[i] == (long)len - 1))
            continue; /* xattr cases; len - 1 is covered by len + 63 */
        if (!trl() && sizes[i] >= (long)len)
            continue; /* len is the valid size; len + 63 is "one byte appended" again */
        put(s, k, d, len);
        if (sizes[i] >= 0) {
            ck_assert_int_eq(truncate(p, sizes[i]), 0);
        } else if (sizes[i] == -1) {
            int fd = open(p, O_WRONLY | O_APPEND);
            ck_assert_int_eq(write(fd, "x", 1), 1);
            close(fd);
        } else if (sizes[i] == -2) {
            uint8_t *z = calloc(1, len + trl());
            ck_assert_int_eq(tu_write_file(p, z, len + trl()), 0);
            free(z);
        } else if (sizes[i] == -3) {
            ck_assert_int_eq(removexattr(p, BFS_STORE_XATTR), 0);
        } else {
            uint8_t t[BFS_STORE_TRAILER + 1];
            ck_assert_int_eq(getxattr(p, BFS_STORE_XATTR, t, BFS_STORE_TRAILER), BFS_STORE_TRAILER);
            t[BFS_STORE_TRAILER] = 0;
            size_t tl = sizes[i] == -4 ? BFS_STORE_TRAILER + 1 : BFS_STORE_TRAILER - 1;
            ck_assert_int_eq(setxattr(p, BFS_STORE_XATTR, t, tl, 0), 0);
        }
        expect_miss(s, k);
        ck_assert_msg(!exists(p), "bad entry %d not removed", i);
        done++;
    }
    /* a symlink under the entry's name (even to a valid entry) is not an entry */
    put(s, k, d, len);
    char real[600];
    snprintf(real, sizeof real, "%s.real", p);
    ck_assert_int_eq(rename(p, real), 0);
    ck_assert_int_eq(symlink(real, p), 0);
    expect_miss(s, k);
    ck_assert(!exists(p));
    bfs_store_stats st;
    bfs_store_get_stats(s, &st);
    ck_assert_uint_eq(st.corrupt, (uint64_t)done + 1);
    ck_assert_uint_eq(st.hits, 0);
    free(d);
    bfs_store_close(s);
}
END_TEST

START_TEST(entry_format_functions)
{
    /* the trailer round trip and each rejection reason, on memory */
    bfs_store_key k = key3(1, 2, 3);
    size_t len = 1000;
    uint8_t *f = payload(8, len + BFS_STORE_TRAILER);
    bfs_store_entry_trailer(&k, len, bfs_xxh64(f, len, 0), 0, f + len);
    uint64_t got = 0;
    ck_assert_int_eq(bfs_store_entry_check(f, len + BFS_STORE_TRAILER, &k, &got), 0);
    ck_assert_uint_eq(got, len);
    ck_assert_int_eq(bfs_store_entry_check(f, len + BFS_STORE_TRAILER, NULL, NULL), 0);
    bfs_store_key other = key3(1, 2, 4);
    ck_assert_int_eq(bfs_store_entry_check(f, len + BFS_STORE_TRAILER, &other, NULL),
                     BFS_STORE_ENTRY_KEY);
    ck_assert_int_eq(bfs_store_entry_check(f, 63, &k, NULL), BFS_STORE_ENTRY_SHORT);
    ck_assert_int_eq(bfs_store_entry_check(f + 1, len + BFS_STORE_TRAILER - 1, &k, NULL),
                     BFS_STORE_ENTRY_LENGTH);
    f[0] ^= 1;
    ck_assert_int_eq(bfs_store_entry_check(f, len + BFS_STORE_TRAILER, &k, NULL),
                     BFS_STORE_ENTRY_CHECKSUM);
    f[0] ^= 1;
    f[len + 20] ^= 1;
    ck_assert_int_eq(bfs_store_entry_check(f, len + BFS_STORE_TRAILER, &k, NULL),
                     BFS_STORE_ENTRY_TRAILER);
    f[len + 20] ^= 1;
    f[len + 12] = 1; /* flags */
    ck_assert_int_eq(bfs_store_entry_check(f, len + BFS_STORE_TRAILER, &k, NULL),
                     BFS_STORE_ENTRY_MAGIC);
    f[len + 12] = 0;
    /* the xattr form: the same trailer with flags 1, the file is the payload only */
    uint8_t t[BFS_STORE_TRAILER];
    bfs_store_entry_trailer(&k, len, bfs_xxh64(f, len, 0), BFS_STORE_FLAG_XATTR, t);
    got = 0;
    ck_assert_int_eq(bfs_store_entry_check_xattr(t, sizeof t, f, len, &k, &got), 0);
    ck_assert_uint_eq(got, len);
    ck_assert_int_eq(bfs_store_entry_check_xattr(t, sizeof t, f, len, &other, NULL),
                     BFS_STORE_ENTRY_KEY);
    ck_assert_int_eq(bfs_store_entry_check_xattr(t, sizeof t - 1, f, len, &k, NULL),
                     BFS_STORE_ENTRY_MAGIC);
    ck_assert_int_eq(bfs_store_entry_check_xattr(t, sizeof t, f, len - 1, &k, NULL),
                     BFS_STORE_ENTRY_LENGTH);
    ck_assert_int_eq(bfs_store_entry_check_xattr(t, sizeof t, f, len + BFS_STORE_TRAILER, &k, NULL),
                     BFS_STORE_ENTRY_LENGTH);
    /* neither form passes for the other */
    ck_assert_int_eq(bfs_store_entry_check_xattr(f + len, BFS_STORE_TRAILER, f, len, &k, NULL),
                     BFS_STORE_ENTRY_MAGIC);
    memcpy(f + len, t, sizeof t);
    ck_assert_int_eq(bfs_store_entry_check(f, len + BFS_STORE_TRAILER, &k, NULL),
                     BFS_STORE_ENTRY_MAGIC);
    f[3] ^= 4;
    ck_assert_int_eq(bfs_store_entry_check_xattr(t, sizeof t, f, len, &k, NULL),
                     BFS_STORE_ENTRY_CHECKSUM);
    for (int r = 0; r <= BFS_STORE_ENTRY_CHECKSUM; r++)
        ck_assert(strlen(bfs_store_entry_reason(r)) > 0);
    free(f);
}
END_TEST

/* ---- single flight ------------------------------------------------------------------- */

/* A child of the fork tests: open its own handle, claim or wait, compute (sleep) when MINE,
 * check the bytes. Reports 'M' (computed), 'W' (waited, then hit) or 'H' (hit at once)
 * on report_fd; exits 0 if every check passed. */
static void single_flight_child(int named, int go_fd, int report_fd, const uint8_t *d, size_t len)
{
    char c0;
    if (read(go_fd, &c0, 1) != 1)
        _exit(10);
    bfs_store_opts o = {.named_temps = named};
    bfs_store *s;
    if (bfs_store_open(g_root, &o, &s, NULL, 0))
        _exit(11);
    bfs_store_key k = key3(0x5151, 3, 9);
    bfs_claim c;
    if (bfs_store_claim(s, k, &c))
        _exit(12);
    char what = 'H';
    if (c.state == BFS_STORE_BUSY) {
        what = 'W';
        if (bfs_store_wait(s, k, 20000, &c))
            _exit(13);
    }
    if (c.state == BFS_STORE_MINE) {
        what = 'M';
        usleep(300 * 1000); /* "compute" */
        if (bfs_store_publish(&c, d, len))
            _exit(14);
        if (bfs_store_claim(s, k, &c) || c.state != BFS_STORE_HIT)
            _exit(15);
    }
    if (c.state != BFS_STORE_HIT || c.size != len || memcmp(c.data, d, len))
        _exit(16);
    bfs_store_claim_close(&c);
    bfs_store_stats st;
    bfs_store_get_stats(s, &st);
    if (what == 'W' && st.busy_waits > 1)
        _exit(17);
    bfs_store_close(s);
    if (write(report_fd, &what, 1) != 1)
        _exit(18);
    _exit(0);
}

START_TEST(fork_single_flight)
{
    set_mode(_i);
    bfs_store *s = open_store(0, (_i & 1)); /* creates the tree */
    bfs_store_close(s);
    size_t len = 200000;
    uint8_t *d = payload(11, len);
    enum { N = 4 };
    int go[2], rep[2];
    ck_assert_int_eq(pipe(go), 0);
    ck_assert_int_eq(pipe(rep), 0);
    pid_t pids[N];
    for (int i = 0; i < N; i++) {
        pids[i] = fork();
        ck_assert_int_ge(pids[i], 0);
        if (pids[i] == 0) {
            close(go[1]);
            close(rep[0]);
            single_flight_child((_i & 1), go[0], rep[1], d, len);
        }
    }
    close(go[0]);
    close(rep[1]);
    ck_assert_int_eq(write(go[1], "GGGG", N), N); /* all start together */
    close(go[1]);
    for (int i = 0; i < N; i++) {
        int status;
        ck_assert_int_eq(waitpid(pids[i], &status, 0), pids[i]);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d: status %#x", i,
                      status);
    }
    char r[N + 1];
    int got = 0, n;
    while ((n = (int)read(rep[0], r + got, (size_t)(N + 1 - got))) > 0)
        got += n;
    close(rep[0]);
    ck_assert_int_eq(got, N);
    int mine = 0, waited = 0;
    for (int i = 0; i < N; i++)
        mine += r[i] == 'M', waited += r[i] == 'W';
    ck_assert_int_eq(mine, 1);   /* exactly one computed */
    ck_assert_int_ge(waited, 1); /* the others waited for it (300 ms) and hit */
    struct tree_count t = count_tree();
    ck_assert_int_eq(t.entries, 1);
    ck_assert_int_eq(t.temps, 0);
    ck_assert_int_eq(t.locks, 0);
    free(d);
}
END_TEST

typedef struct thread_arg {
    bfs_store *s;
    const uint8_t *d;
    size_t len;
    pthread_barrier_t *start;
    int mine, ok;
} thread_arg;

static void *thread_main(void *p)
{
    thread_arg *a = p;
    pthread_barrier_wait(a->start);
    bfs_store_key k = key3(0x7777, 0, 1);
    bfs_claim c;
    if (bfs_store_claim(a->s, k, &c))
        return NULL;
    if (c.state == BFS_STORE_BUSY && bfs_store_wait(a->s, k, 20000, &c))
        return NULL;
    if (c.state == BFS_STORE_MINE) {
        a->mine = 1;
        usleep(100 * 1000);
        if (bfs_store_publish(&c, a->d, a->len))
            return NULL;
        if (bfs_store_claim(a->s, k, &c))
            return NULL;
    }
    a->ok = c.state == BFS_STORE_HIT && c.size == a->len && !memcmp(c.data, a->d, a->len);
    bfs_store_claim_close(&c);
    return NULL;
}

START_TEST(thread_single_flight)
{
    set_mode(_i);
    /* OFD locks belong to open file descriptions, not processes: threads of one daemon
     * sharing one handle are single-flighted too */
    bfs_store *s = open_store(0, (_i & 1));
    enum { T = 6 };
    size_t len = 100000;
    uint8_t *d = payload(12, len);
    pthread_barrier_t b;
    pthread_barrier_init(&b, NULL, T);
    pthread_t th[T];
    thread_arg a[T];
    for (int i = 0; i < T; i++) {
        a[i] = (thread_arg){.s = s, .d = d, .len = len, .start = &b};
        ck_assert_int_eq(pthread_create(&th[i], NULL, thread_main, &a[i]), 0);
    }
    int mine = 0;
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        ck_assert_msg(a[i].ok, "thread %d did not get the bytes", i);
        mine += a[i].mine;
    }
    ck_assert_int_eq(mine, 1);
    bfs_store_stats st;
    bfs_store_get_stats(s, &st);
    ck_assert_uint_eq(st.publishes, 1);
    ck_assert_uint_ge(st.busy_waits, 1);
    pthread_barrier_destroy(&b);
    free(d);
    bfs_store_close(s);
}
END_TEST

START_TEST(wait_timeout)
{
    bfs_store *s1 = open_store(0, 0), *s2 = open_store(0, 0);
    bfs_store_key k = key3(3, 3, 3);
    bfs_claim mine, other;
    ck_assert_int_eq(bfs_store_claim(s1, k, &mine), 0);
    ck_assert_int_eq(mine.state, BFS_STORE_MINE);
    ck_assert_int_eq(bfs_store_claim(s2, k, &other), 0);
    ck_assert_int_eq(other.state, BFS_STORE_BUSY);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_assert_int_eq(bfs_store_wait(s2, k, 50, &other), -ETIMEDOUT);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    ck_assert_msg(ms >= 49 && ms < 2000, "waited %.1f ms", ms);
    ck_assert_int_eq(other.state, BFS_STORE_NONE);
    ck_assert_int_eq(bfs_store_wait(s2, k, 0, &other), -ETIMEDOUT);
    /* the holder abandons: a waiter becomes the computer */
    ck_assert_int_eq(bfs_store_abandon(&mine), 0);
    ck_assert_int_eq(bfs_store_wait(s2, k, 1000, &other), 0);
    ck_assert_int_eq(other.state, BFS_STORE_MINE);
    bfs_store_claim_close(&other);
    bfs_store_stats st;
    bfs_store_get_stats(s2, &st);
    ck_assert_uint_eq(st.busy, 1);
    ck_assert_uint_eq(st.busy_waits, 2);
    bfs_store_close(s1);
    bfs_store_close(s2);
}
END_TEST

START_TEST(mine_is_exclusive_under_churn)
{
    /* Processes claim and abandon one key as fast as they can: every abandon unlinks the
     * lock file, so claimants keep opening a lock file that is being unlinked (the race
     * the inode check in lock_file closes). At no moment may two hold MINE. */
    bfs_store *s = open_store(0, 0);
    int *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(shared, MAP_FAILED);
    enum { P = 4, ITER = 3000 };
    pid_t pid[P];
    for (int p = 0; p < P; p++) {
        pid[p] = fork();
        ck_assert_int_ge(pid[p], 0);
        if (pid[p] == 0) {
            bfs_store *cs;
            if (bfs_store_open(g_root, NULL, &cs, NULL, 0))
                _exit(1);
            for (int i = 0; i < ITER; i++) {
                bfs_claim c;
                if (bfs_store_claim(cs, key3(0xc4, 0, 0), &c))
                    _exit(2);
                if (c.state == BFS_STORE_MINE) {
                    if (__atomic_add_fetch(&shared[0], 1, __ATOMIC_SEQ_CST) > 1)
                        __atomic_add_fetch(&shared[1], 1, __ATOMIC_SEQ_CST);
                    __atomic_add_fetch(&shared[2], 1, __ATOMIC_SEQ_CST);
                    sched_yield();
                    __atomic_sub_fetch(&shared[0], 1, __ATOMIC_SEQ_CST);
                    if (bfs_store_abandon(&c))
                        _exit(3);
                } else if (c.state != BFS_STORE_BUSY) {
                    _exit(4);
                }
            }
            bfs_store_close(cs);
            _exit(0);
        }
    }
    for (int p = 0; p < P; p++) {
        int status;
        ck_assert_int_eq(waitpid(pid[p], &status, 0), pid[p]);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d: %#x", p, status);
    }
    ck_assert_int_gt(shared[2], 0);
    ck_assert_msg(shared[1] == 0, "two holders of MINE at once, %d times (of %d MINE)", shared[1],
                  shared[2]);
    munmap(shared, 4096);
    bfs_store_close(s);
}
END_TEST

/* ---- crashes ------------------------------------------------------------------------- */

START_TEST(kill9_mid_publish)
{
    set_mode(_i);
    bfs_store *s = open_store(0, (_i & 1));
    size_t len = 1 << 20;
    uint8_t *d = payload(13, len);
    bfs_store_key k = key3(0xdead, 0, 5);
    char p[512];
    entry_path(k, ".st", p, sizeof p);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        bfs_store *cs = child_store(_i & 1, 0, NULL);
        bfs_claim c;
        if (bfs_store_claim(cs, k, &c) || c.state != BFS_STORE_MINE ||
            bfs_store_write(&c, d, len / 2))
            _exit(1);
        raise(SIGKILL); /* half the payload written, no trailer, no name */
        _exit(2);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "status %#x", status);
    /* nothing is served: the entry does not exist */
    ck_assert(!exists(p));
    struct tree_count t = count_tree();
    ck_assert_int_eq(t.entries, 0);
    ck_assert_int_eq(t.temps, (_i & 1) ? 1 : 0); /* O_TMPFILE leaves no file at all */
    ck_assert_int_eq(t.locks, 1);                /* unlocked by the kernel at death */
    /* a new daemon cleans up after the dead one at open */
    bfs_store *s2 = open_store(0, (_i & 1));
    bfs_store_stats st;
    bfs_store_get_stats(s2, &st);
    ck_assert_uint_eq(st.stale_removed, (_i & 1) ? 2 : 1);
    t = count_tree();
    ck_assert_int_eq(t.temps + t.locks + t.entries, 0);
    bfs_store_close(s2);
    /* the key is claimable (stale takeover), and publishing it works */
    bfs_claim c;
    ck_assert_int_eq(bfs_store_claim(s, k, &c), 0);
    ck_assert_int_eq(c.state, BFS_STORE_MINE);
    ck_assert_int_eq(bfs_store_publish(&c, d, len), 0);
    expect_hit(s, k, d, len);
    free(d);
    bfs_store_close(s);
}
END_TEST

START_TEST(kill9_while_others_wait)
{
    set_mode(_i);
    /* the computer dies with waiters queued: one waiter takes the key over (MINE) without
     * any cleanup having run, publishes, and the rest hit */
    bfs_store *s = open_store(0, (_i & 1));
    size_t len = 300000;
    uint8_t *d = payload(14, len);
    bfs_store_key k = key3(0xbeef, 1, 1);
    int ready[2];
    ck_assert_int_eq(pipe(ready), 0);
    pid_t victim = fork();
    ck_assert_int_ge(victim, 0);
    if (victim == 0) {
        bfs_store *cs = child_store(_i & 1, 0, NULL);
        bfs_claim c;
        if (bfs_store_claim(cs, k, &c) || c.state != BFS_STORE_MINE ||
            bfs_store_write(&c, d, len / 3))
            _exit(1);
        if (write(ready[1], "r", 1) != 1)
            _exit(2);
        for (;;)
            pause();
    }
    char r;
    ck_assert_int_eq(read(ready[0], &r, 1), 1);
    enum { W = 3 };
    pid_t w[W];
    for (int i = 0; i < W; i++) {
        w[i] = fork();
        ck_assert_int_ge(w[i], 0);
        if (w[i] == 0) {
            bfs_store *cs = child_store(_i & 1, 0, NULL);
            bfs_claim c;
            if (bfs_store_claim(cs, k, &c))
                _exit(1);
            if (c.state != BFS_STORE_BUSY)
                _exit(2);
            if (bfs_store_wait(cs, k, 20000, &c))
                _exit(3);
            int code = 0;
            if (c.state == BFS_STORE_MINE) {
                if (bfs_store_publish(&c, d, len))
                    _exit(4);
                code = 100; /* took over */
            } else if (c.state != BFS_STORE_HIT || c.size != len || memcmp(c.data, d, len)) {
                _exit(5);
            }
            bfs_store_claim_close(&c);
            bfs_store_close(cs);
            _exit(code);
        }
    }
    usleep(200 * 1000); /* the waiters are polling */
    ck_assert_int_eq(kill(victim, SIGKILL), 0);
    int status;
    ck_assert_int_eq(waitpid(victim, &status, 0), victim);
    int took_over = 0;
    for (int i = 0; i < W; i++) {
        ck_assert_int_eq(waitpid(w[i], &status, 0), w[i]);
        ck_assert_msg(WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 100),
                      "waiter %d: status %#x", i, status);
        took_over += WEXITSTATUS(status) == 100;
    }
    ck_assert_int_eq(took_over, 1);
    expect_hit(s, k, d, len);
    free(d);
    bfs_store_close(s);
}
END_TEST

/* ---- concurrent publishers of one key ------------------------------------------------ */

START_TEST(two_mine_in_process)
{
    set_mode(_i);
    /* Both MINE: the first claimant's lock file is removed under it (what a stale-marker
     * race would do), so a second claimant creates a new one. Commits in either order end
     * with one valid entry holding one publisher's bytes, and no leftovers. */
    bfs_store *s1 = open_store(0, (_i & 1)), *s2 = open_store(0, (_i & 1));
    size_t len = 70000;
    uint8_t *a = payload(21, len), *b = payload(22, len);
    int fds = bfs_fd_count();
    for (int order = 0; order < 2; order++) {
        bfs_store_key k = key3(0xab, 0, (uint64_t)order);
        char lock[512], p[512];
        entry_path(k, ".lock", lock, sizeof lock);
        entry_path(k, ".st", p, sizeof p);
        bfs_claim c1, c2;
        ck_assert_int_eq(bfs_store_claim(s1, k, &c1), 0);
        ck_assert_int_eq(c1.state, BFS_STORE_MINE);
        ck_assert_int_eq(unlink(lock), 0);
        ck_assert_int_eq(bfs_store_claim(s2, k, &c2), 0);
        ck_assert_int_eq(c2.state, BFS_STORE_MINE);
        ck_assert_int_eq(bfs_store_write(&c1, a, len), 0);
        ck_assert_int_eq(bfs_store_write(&c2, b, len), 0);
        ck_assert_int_eq(bfs_store_commit(order ? &c2 : &c1), 0);
        ck_assert_int_eq(bfs_store_commit(order ? &c1 : &c2), 0);
        bfs_claim h;
        ck_assert_int_eq(bfs_store_claim(s1, k, &h), 0);
        ck_assert_int_eq(h.state, BFS_STORE_HIT);
        ck_assert_uint_eq(h.size, len);
        ck_assert(!memcmp(h.data, a, len) || !memcmp(h.data, b, len));
        bfs_store_claim_close(&h);
        ck_assert(!exists(lock));
        /* the second commit, finding the first one's entry, keeps it and leaks nothing */
        ck_assert_int_eq(bfs_fd_count(), fds);
    }
    struct tree_count t = count_tree();
    ck_assert_int_eq(t.entries, 2);
    ck_assert_int_eq(t.temps + t.locks + t.others, 0);
    free(a);
    free(b);
    bfs_store_close(s1);
    bfs_store_close(s2);
}
END_TEST

START_TEST(two_mine_concurrent)
{
    set_mode(_i);
    /* The same with two processes committing at the same moment, many rounds; meanwhile a
     * third process reads the key in a loop (it only ever sees a miss/busy or a valid,
     * whole entry) and a fourth scans the store in a loop (it must not take a live
     * writer's temporary file for a dead one's). */
    bfs_store *s = open_store(0, (_i & 1));
    size_t len = 256 * 1024;
    uint8_t *a = payload(31, len), *b = payload(32, len);
    pid_t reader = fork();
    ck_assert_int_ge(reader, 0);
    if (reader == 0) {
        bfs_store *rs = child_store(_i & 1, 0, NULL);
        for (;;) {
            for (uint64_t r = 0; r < 20; r++) {
                bfs_claim c;
                if (bfs_store_claim(rs, key3(0xcd, 0, r), &c))
                    _exit(2);
                if (c.state == BFS_STORE_HIT &&
                    (c.size != len || (memcmp(c.data, a, len) && memcmp(c.data, b, len))))
                    _exit(3);
                bfs_store_claim_close(&c); /* a MINE is abandoned at once */
            }
        }
    }
    pid_t scanner = fork();
    ck_assert_int_ge(scanner, 0);
    if (scanner == 0) {
        bfs_store *ss = child_store(_i & 1, 0, log_stderr);
        for (;;)
            if (bfs_store_evict(ss, NULL))
                _exit(2);
    }
    for (uint64_t r = 0; r < 20; r++) {
        bfs_store_key k = key3(0xcd, 0, r);
        char lock[512];
        entry_path(k, ".lock", lock, sizeof lock);
        int go[2], mine[2];
        ck_assert_int_eq(pipe(go), 0);
        ck_assert_int_eq(pipe(mine), 0);
        pid_t pid[2];
        for (int i = 0; i < 2; i++) {
            pid[i] = fork();
            ck_assert_int_ge(pid[i], 0);
            if (pid[i] == 0) {
                bfs_store *cs = child_store(_i & 1, 0, NULL);
                bfs_claim c;
                /* get MINE (the reader may hold the key for an instant), then free the
                 * lock file's name so that the other one gets MINE too */
                for (int t = 0;; t++) {
                    if (bfs_store_claim(cs, k, &c))
                        _exit(2);
                    if (c.state == BFS_STORE_MINE)
                        break;
                    bfs_store_claim_close(&c);
                    if (t > 10000)
                        _exit(3);
                    usleep(100);
                }
                if (unlink(lock) < 0)
                    _exit(4);
                if (write(mine[1], "m", 1) != 1)
                    _exit(5);
                char g;
                if (read(go[0], &g, 1) != 1)
                    _exit(6);
                int rc = bfs_store_write(&c, i ? b : a, len / 2);
                if (!rc)
                    rc = bfs_store_write(&c, (i ? b : a) + len / 2, len - len / 2);
                if (!rc)
                    rc = bfs_store_commit(&c);
                if (rc) {
                    fprintf(stderr, "two_mine_concurrent: publisher %d: %s\n", i, strerror(-rc));
                    _exit(7);
                }
                bfs_store_close(cs);
                _exit(0);
            }
            char m;
            ck_assert_int_eq(read(mine[0], &m, 1), 1); /* child i holds MINE */
        }
        ck_assert_int_eq(write(go[1], "gg", 2), 2);
        for (int i = 0; i < 2; i++) {
            int status;
            ck_assert_int_eq(waitpid(pid[i], &status, 0), pid[i]);
            ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "round %d child %d: %#x",
                          (int)r, i, status);
        }
        close(go[0]), close(go[1]), close(mine[0]), close(mine[1]);
        bfs_claim h;
        ck_assert_int_eq(bfs_store_claim(s, k, &h), 0);
        ck_assert_int_eq(h.state, BFS_STORE_HIT);
        ck_assert(!memcmp(h.data, a, len) || !memcmp(h.data, b, len));
        bfs_store_claim_close(&h);
    }
    kill(reader, SIGKILL);
    kill(scanner, SIGKILL);
    int status;
    ck_assert_int_eq(waitpid(reader, &status, 0), reader);
    ck_assert_msg(WIFSIGNALED(status), "reader saw a bad entry: status %#x", status);
    ck_assert_int_eq(waitpid(scanner, &status, 0), scanner);
    ck_assert_msg(WIFSIGNALED(status), "scanner failed: status %#x", status);
    struct tree_count t = count_tree();
    ck_assert_int_eq(t.entries, 20);
    ck_assert_int_eq(t.temps, 0);
    free(a);
    free(b);
    bfs_store_close(s);
}
END_TEST

/* ---- eviction ------------------------------------------------------------------------ */

START_TEST(lru_eviction)
{
    set_mode(_i);
    size_t len = 10000;
    uint64_t file = len + trl();
    uint64_t budget = file * 11 / 2; /* 5.5 entries: after a scan, 5 stay */
    bfs_store *s = open_store(budget, (_i & 1));
    uint8_t *d[40];
    for (int i = 0; i < 40; i++)
        d[i] = payload(100 + (uint64_t)i, len);
    for (int i = 0; i < 5; i++)
        put(s, key3(1, 0, (uint64_t)i), d[i], len);
    ck_assert_int_eq(count_tree().entries, 5);
    for (int i = 5; i < 40; i++) {
        expect_hit(s, key3(1, 0, 0), d[0], len); /* entry 0 stays the most recently used */
        put(s, key3(1, 0, (uint64_t)i), d[i], len);
        struct tree_count t = count_tree();
        ck_assert_msg(t.entry_bytes <= budget, "%" PRIu64 " bytes > budget %" PRIu64, t.entry_bytes,
                      budget);
        ck_assert_int_eq(t.entries, 5);
        /* exactly entry 0 and the 4 newest are left: least recently used went first */
        for (int j = 1; j <= i; j++) {
            char p[512];
            entry_path(key3(1, 0, (uint64_t)j), ".st", p, sizeof p);
            ck_assert_msg(exists(p) == (j > i - 4), "after %d: entry %d %s", i, j,
                          exists(p) ? "kept" : "evicted");
        }
    }
    bfs_store_stats st;
    bfs_store_get_stats(s, &st);
    ck_assert_uint_eq(st.evictions, 35);
    ck_assert_uint_eq(st.bytes_evicted, 35 * file);
    ck_assert_uint_eq(st.usage_bytes, 5 * file);
    ck_assert_uint_eq(st.budget_bytes, budget);
    for (int i = 36; i < 40; i++)
        expect_hit(s, key3(1, 0, (uint64_t)i), d[i], len);
    expect_hit(s, key3(1, 0, 0), d[0], len);
    bfs_store_close(s);
    /* a handle with a smaller budget trims the store at open */
    s = open_store(file * 2, (_i & 1));
    ck_assert_uint_le(count_tree().entry_bytes, file * 2);
    /* an entry larger than the whole budget is refused, and the key stays free */
    uint8_t *big = payload(7, 3 * len);
    bfs_claim c;
    ck_assert_int_eq(bfs_store_claim(s, key3(2, 0, 0), &c), 0);
    ck_assert_int_eq(bfs_store_publish(&c, big, 3 * len), -EFBIG);
    expect_miss(s, key3(2, 0, 0));
    free(big);
    bfs_store_close(s);
    for (int i = 0; i < 40; i++)
        free(d[i]);
}
END_TEST

/*
 * A store on a file system smaller than its budget (a tmpfs of 256 KiB, mounted in a
 * private mount namespace of this test process: root only). Publishes that meet ENOSPC
 * evict least recently used entries and succeed on their retry; the first such event is
 * logged, the next ones within a minute are not. A payload larger than the file system
 * fails (-ENOSPC), is counted in save_errors and logged once; a second failure is counted
 * but not logged again (rate limit), and the keys stay free.
 */
START_TEST(full_file_system)
{
    set_mode(_i);
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
        mount("tmpfs", g_root, "tmpfs", 0, "size=256k,mode=0700") < 0) {
        tu_skip("check_store", "full file system", "cannot mount a tmpfs (%s; not root?)",
                strerror(errno));
        return;
    }
    bfs_store_opts o = {.named_temps = _i & 1, .trailer_in_file = g_in_file, .log_cb = log_keep};
    bfs_store *s = NULL;
    char err[256] = "";
    ck_assert_msg(bfs_store_open(g_root, &o, &s, err, sizeof err) == 0, "%s", err);
    size_t len = 40 << 10; /* about 6 fit */
    for (int i = 0; i < 30; i++) {
        uint8_t *d = payload(300 + (uint64_t)i, len);
        bfs_claim c;
        ck_assert_int_eq(bfs_store_claim(s, key3(1, 0, (uint64_t)i), &c), 0);
        ck_assert_int_eq(c.state, BFS_STORE_MINE);
        int rc = bfs_store_publish(&c, d, len);
        ck_assert_msg(rc == 0, "publish %d on a full file system: %s\nlog:\n%s", i, strerror(-rc),
                      g_log.text);
        expect_hit(s, key3(1, 0, (uint64_t)i), d, len);
        free(d);
    }
    bfs_store_stats st;
    bfs_store_get_stats(s, &st);
    ck_assert_uint_eq(st.publishes, 30);
    ck_assert_uint_eq(st.save_errors, 0);
    ck_assert_uint_ge(st.no_space, 2);
    ck_assert_uint_ge(st.evictions, 20);
    ck_assert_uint_le(st.usage_bytes, 256 << 10);
    expect_miss(s, key3(1, 0, 0)); /* the oldest went */
    ck_assert_msg(log_count("file system is full") == 1 && strstr(g_log.text, g_root),
                  "expected one 'file system is full' line naming the directory:\n%s", g_log.text);
    /* larger than the file system: fails even after evicting everything */
    size_t big = 300 << 10;
    uint8_t *d = payload(9, big);
    for (int i = 0; i < 2; i++) {
        bfs_claim c;
        ck_assert_int_eq(bfs_store_claim(s, key3(2, 0, 0), &c), 0);
        ck_assert_int_eq(c.state, BFS_STORE_MINE);
        ck_assert_int_eq(bfs_store_publish(&c, d, big), -ENOSPC);
        ck_assert_int_eq(c.state, BFS_STORE_NONE);
        bfs_store_get_stats(s, &st);
        ck_assert_uint_eq(st.save_errors, (uint64_t)i + 1);
        ck_assert_msg(log_count("could not save epoch 0 batch 0: No space left on device") == 1,
                      "expected one 'could not save' line after %d failures:\n%s", i + 1,
                      g_log.text);
    }
    free(d);
    expect_miss(s, key3(2, 0, 0)); /* the key is free */
    /* the store still works */
    d = payload(10, len);
    put(s, key3(3, 0, 0), d, len);
    expect_hit(s, key3(3, 0, 0), d, len);
    free(d);
    bfs_store_close(s);
    ck_assert_int_eq(umount2(g_root, MNT_DETACH), 0);
}
END_TEST

START_TEST(reader_survives_eviction)
{
    set_mode(_i);
    size_t len = 100000;
    uint64_t file = len + trl();
    bfs_store *s = open_store(file * 5 / 2, (_i & 1));
    uint8_t *d[6];
    for (int i = 0; i < 6; i++)
        d[i] = payload(200 + (uint64_t)i, len);
    put(s, key3(4, 0, 0), d[0], len);
    bfs_claim held;
    ck_assert_int_eq(bfs_store_claim(s, key3(4, 0, 0), &held), 0);
    ck_assert_int_eq(held.state, BFS_STORE_HIT);
    for (int i = 1; i < 6; i++)
        put(s, key3(4, 0, (uint64_t)i), d[i], len);
    char p[512];
    entry_path(key3(4, 0, 0), ".st", p, sizeof p);
    ck_assert_msg(!exists(p), "entry 0 should have been evicted");
    /* the holder still reads every byte, through the mapping and through the fd */
    ck_assert_int_eq(memcmp(held.data, d[0], len), 0);
    uint8_t *back = malloc(len);
    ck_assert_int_eq(pread(held.fd, back, len, 0), (ssize_t)len);
    ck_assert_int_eq(memcmp(back, d[0], len), 0);
    free(back);
    bfs_store_claim_close(&held);
    expect_miss(s, key3(4, 0, 0));
    for (int i = 0; i < 6; i++)
        free(d[i]);
    bfs_store_close(s);
}
END_TEST

START_TEST(concurrent_eviction)
{
    set_mode(_i);
    /* 3 daemons publish and read 40 keys each into one store with room for ~10 entries */
    size_t len = 50000;
    uint64_t file = len + trl();
    uint64_t budget = file * 10;
    bfs_store *s = open_store(budget, (_i & 1));
    enum { P = 3, K = 40 };
    pid_t pid[P];
    for (int p = 0; p < P; p++) {
        pid[p] = fork();
        ck_assert_int_ge(pid[p], 0);
        if (pid[p] == 0) {
            bfs_store *cs = child_store(_i & 1, budget, NULL);
            for (int round = 0; round < 2; round++) {
                for (int i = 0; i < K; i++) {
                    /* the processes share half of their keys */
                    uint64_t key = (uint64_t)(i % 2 ? p * 100 + i : i);
                    bfs_store_key k = key3(6, (uint64_t)round, key);
                    uint8_t *d = malloc(len);
                    uint64_t st = key * 7 + (uint64_t)round;
                    for (size_t j = 0; j < len; j++)
                        d[j] = (uint8_t)tu_rand(&st);
                    bfs_claim c;
                    if (bfs_store_wait(cs, k, 20000, &c))
                        _exit(2);
                    if (c.state == BFS_STORE_MINE && bfs_store_publish(&c, d, len))
                        _exit(3);
                    if (c.state == BFS_STORE_HIT && (c.size != len || memcmp(c.data, d, len)))
                        _exit(4);
                    bfs_store_claim_close(&c);
                    free(d);
                }
            }
            bfs_store_close(cs);
            _exit(0);
        }
    }
    for (int p = 0; p < P; p++) {
        int status;
        ck_assert_int_eq(waitpid(pid[p], &status, 0), pid[p]);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "daemon %d: %#x", p, status);
    }
    /* a scan now (no one else is scanning) leaves the store under its budget */
    uint64_t evicted;
    ck_assert_int_eq(bfs_store_evict(s, &evicted), 0);
    struct tree_count t = count_tree();
    ck_assert_uint_le(t.entry_bytes, budget);
    ck_assert_int_eq(t.temps + t.locks + t.others, 0);
    bfs_store_stats st;
    bfs_store_get_stats(s, &st);
    ck_assert_uint_eq(st.usage_bytes, t.entry_bytes);
    bfs_store_close(s);
}
END_TEST

START_TEST(stale_files_and_recount)
{
    bfs_store *s = open_store(0, 0);
    uint8_t *d = payload(1, 1000);
    put(s, key3(8, 0, 0), d, 1000);
    put(s, key3(8, 0, 1), d, 1000);
    bfs_store_close(s);
    /* a lock held by a live claimant is not stale */
    bfs_store *s1 = open_store(0, 0);
    bfs_claim c;
    ck_assert_int_eq(bfs_store_claim(s1, key3(8, 0, 4), &c), 0);
    ck_assert_int_eq(c.state, BFS_STORE_MINE);
    /* leftovers of dead claimants, and files that are not ours */
    char p[512];
    entry_path(key3(8, 0, 2), ".lock", p, sizeof p);
    ck_assert_int_eq(tu_write_file(p, "", 0), 0);
    entry_path(key3(8, 0, 3), ".st.tmp-999999-1", p, sizeof p);
    ck_assert_int_eq(tu_write_file(p, d, 500), 0);
    snprintf(p, sizeof p, "%s/v2/%016x/0/notes.txt", g_root, 8u);
    ck_assert_int_eq(tu_write_file(p, "x", 1), 0);
    s = open_store(0, 0);
    bfs_store_stats st;
    bfs_store_get_stats(s, &st);
    ck_assert_uint_eq(st.stale_removed, 2);
    ck_assert_uint_eq(st.usage_bytes, 2 * (1000 + trl()));
    struct tree_count t = count_tree();
    ck_assert_int_eq(t.temps, 0);
    ck_assert_int_eq(t.locks, 1); /* key 4's, held */
    ck_assert_int_eq(t.others, 1);
    ck_assert(exists(p)); /* not ours: left alone */
    bfs_claim b;
    ck_assert_int_eq(bfs_store_claim(s, key3(8, 0, 4), &b), 0);
    ck_assert_int_eq(b.state, BFS_STORE_BUSY);
    bfs_store_claim_close(&c);
    bfs_store_close(s1);
    bfs_store_close(s);
    free(d);
}
END_TEST

/* ---- directories and permissions ----------------------------------------------------- */

START_TEST(default_dir)
{
    char want[64];
    snprintf(want, sizeof want, "/dev/shm/batchfs-%u", (unsigned)geteuid());
    int existed = exists(want);
    char buf[64], err[256] = "";
    int rc = bfs_store_default_dir(buf, sizeof buf, err, sizeof err);
    ck_assert_msg(rc == 0, "%d %s", rc, err);
    ck_assert_str_eq(buf, want);
    struct stat st;
    ck_assert_int_eq(lstat(buf, &st), 0);
    ck_assert(S_ISDIR(st.st_mode));
    ck_assert_uint_eq(st.st_uid, geteuid());
    ck_assert_int_eq(st.st_mode & 0777, 0700);
    ck_assert_int_eq(bfs_store_default_dir(buf, 8, err, sizeof err), -ENAMETOOLONG);
    if (!existed)
        rmdir(want);
}
END_TEST

START_TEST(private_dir_rules)
{
    char *base = tu_mkdtemp("bfs-store");
    char p[512], err[256];
    /* created 0700 */
    snprintf(p, sizeof p, "%s/new", base);
    ck_assert_int_eq(bfs_store_prepare_dir(p, err, sizeof err), 0);
    struct stat st;
    ck_assert_int_eq(stat(p, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0700);
    /* an existing one of ours loses group/other bits */
    ck_assert_int_eq(chmod(p, 0755), 0);
    ck_assert_int_eq(bfs_store_prepare_dir(p, err, sizeof err), 0);
    ck_assert_int_eq(stat(p, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0700);
    /* a symlink planted under the name is refused, not followed */
    char l[512];
    snprintf(l, sizeof l, "%s/link", base);
    ck_assert_int_eq(symlink(p, l), 0);
    err[0] = 0;
    ck_assert_int_eq(bfs_store_prepare_dir(l, err, sizeof err), -ENOTDIR);
    ck_assert(strstr(err, l) != NULL);
    /* a plain file too */
    snprintf(l, sizeof l, "%s/file", base);
    ck_assert_int_eq(tu_write_file(l, "x", 1), 0);
    ck_assert_int_eq(bfs_store_prepare_dir(l, err, sizeof err), -ENOTDIR);
    if (geteuid() == 0) {
        /* another user's directory (simulated with chown: we are root) is refused, by the
         * default-dir check and by bfs_store_open */
        ck_assert_int_eq(chown(p, 12345, 12345), 0);
        err[0] = 0;
        ck_assert_int_eq(bfs_store_prepare_dir(p, err, sizeof err), -EPERM);
        ck_assert_msg(strstr(err, "uid 12345") && strstr(err, p), "message: %s", err);
        bfs_store *s = NULL;
        err[0] = 0;
        ck_assert_int_eq(bfs_store_open(p, NULL, &s, err, sizeof err), -EPERM);
        ck_assert_ptr_null(s);
        ck_assert_msg(strstr(err, "uid 12345") != NULL, "message: %s", err);
        ck_assert_int_eq(chown(p, 0, 0), 0);
    } else {
        tu_skip("check_store", "other-owner refusal", "not root: cannot chown");
    }
    /* a world-writable store root is refused */
    ck_assert_int_eq(chmod(p, 0777), 0);
    bfs_store *s = NULL;
    ck_assert_int_eq(bfs_store_open(p, NULL, &s, err, sizeof err), -EPERM);
    ck_assert_int_eq(chmod(p, 0700), 0);
    ck_assert_int_eq(bfs_store_open(p, NULL, &s, err, sizeof err), 0);
    bfs_store_close(s);
    /* a store root that is a file */
    ck_assert_int_eq(bfs_store_open(l, NULL, &s, err, sizeof err) < 0, 1);
    /* a missing root is created, with its parents */
    snprintf(p, sizeof p, "%s/a/b/c", base);
    ck_assert_int_eq(bfs_store_open(p, NULL, &s, err, sizeof err), 0);
    bfs_store_close(s);
    snprintf(p, sizeof p, "%s/a/b/c/v2", base);
    ck_assert(exists(p));
    tu_rmtree(base);
    free(base);
}
END_TEST

/* bfs_store_open(path) must fail with rc and a message holding each of the words. */
static void expect_refused(const char *path, int rc, const char *w1, const char *w2)
{
    bfs_store *s = NULL;
    char err[512] = "";
    int got = bfs_store_open(path, NULL, &s, err, sizeof err);
    ck_assert_msg(got == rc && !s, "bfs_store_open(%s): %d, expected %d (%s)", path, got, rc, err);
    ck_assert_msg(strstr(err, w1) && (!w2 || strstr(err, w2)), "message for %s: %s", path, err);
}

static void expect_opens(const char *path)
{
    bfs_store *s = NULL;
    char err[512] = "";
    ck_assert_msg(bfs_store_open(path, NULL, &s, err, sizeof err) == 0, "%s: %s", path, err);
    bfs_store_close(s);
}

/*
 * The path to the store is walked without following what another user could plant: a
 * symlink owned by another user in a sticky world-writable directory (/tmp-like) is
 * refused; this user's own symlink there, and root's, are followed (relative and absolute
 * targets, ".."); a directory on the way owned by another user, or writable by others
 * and not sticky, is refused; loops end with ELOOP. Root only (chown).
 */
START_TEST(path_walk_rules)
{
    if (geteuid() != 0) {
        tu_skip("check_store", "cache_dir path rules", "not root: cannot chown");
        return;
    }
    char *base = tu_mkdtemp("bfs-walk");
    char pub[512], target[512], link[600], p[700];
    snprintf(pub, sizeof pub, "%s/pub", base);
    snprintf(target, sizeof target, "%s/target", base);
    ck_assert_int_eq(mkdir(pub, 0700), 0);
    ck_assert_int_eq(chmod(pub, 01777), 0); /* like /tmp */
    ck_assert_int_eq(mkdir(target, 0700), 0);
    /* planted by uid 12345: refused, and nothing is created behind it */
    snprintf(link, sizeof link, "%s/planted", pub);
    ck_assert_int_eq(symlink(target, link), 0);
    ck_assert_int_eq(lchown(link, 12345, 12345), 0);
    expect_refused(link, -EPERM, "symbolic link owned by uid 12345", link);
    snprintf(p, sizeof p, "%s/sub/dir", link);
    expect_refused(p, -EPERM, "symbolic link owned by uid 12345", link);
    snprintf(p, sizeof p, "%s/v2", target);
    ck_assert(!exists(p));
    /* our own symlink there: followed (absolute target) */
    snprintf(link, sizeof link, "%s/mine", pub);
    ck_assert_int_eq(symlink(target, link), 0);
    expect_opens(link);
    ck_assert(exists(p));
    /* relative targets, "..", a missing tail created under the target */
    snprintf(link, sizeof link, "%s/rel", pub);
    ck_assert_int_eq(symlink("../target", link), 0);
    snprintf(p, sizeof p, "%s/./new/../new2", link);
    expect_opens(p);
    snprintf(p, sizeof p, "%s/new2/v2", target);
    ck_assert(exists(p));
    /* a directory of another user on the way */
    snprintf(p, sizeof p, "%s/other", base);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    ck_assert_int_eq(chown(p, 12345, 12345), 0);
    char below[800];
    snprintf(below, sizeof below, "%s/store", p);
    expect_refused(below, -EPERM, "owned by uid 12345", p);
    /* a directory writable by others and not sticky on the way; sticky is fine */
    snprintf(p, sizeof p, "%s/ww", base);
    ck_assert_int_eq(mkdir(p, 0700), 0);
    ck_assert_int_eq(chmod(p, 0777), 0);
    snprintf(below, sizeof below, "%s/store", p);
    expect_refused(below, -EPERM, "writable by other users", p);
    ck_assert_int_eq(chmod(p, 0775), 0);
    expect_refused(below, -EPERM, "writable by other users", p);
    ck_assert_int_eq(chmod(p, 01777), 0);
    expect_opens(below);
    /* a loop */
    snprintf(link, sizeof link, "%s/loop", base);
    ck_assert_int_eq(symlink(link, link), 0);
    expect_refused(link, -ELOOP, "too many symbolic links", NULL);
    /* a relative cache_dir */
    expect_refused("relative/store", -EINVAL, "not an absolute path", NULL);
    tu_rmtree(base);
    free(base);
}
END_TEST

/* ---- suite --------------------------------------------------------------------------- */

/* A test case of s whose tests each get a fresh store directory (g_root). */
static TCase *store_tcase(Suite *s, const char *name)
{
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, root_setup, root_teardown);
    suite_add_tcase(s, tc);
    return tc;
}

static Suite *store_suite(void)
{
    Suite *s = suite_create("store");
    TCase *basic = store_tcase(s, "basic");
    tcase_add_loop_test(basic, round_trip, 0, 4);
    tcase_add_loop_test(basic, streamed_write, 0, 4);
    tcase_add_test(basic, api_misuse);
    tcase_add_loop_test(basic, sync_policies, 0, 4);
    tcase_add_test(basic, fingerprints_never_share);
    TCase *bad = store_tcase(s, "corruption");
    tcase_add_loop_test(bad, corrupt_byte_flips, 0, 2);
    tcase_add_loop_test(bad, corrupt_truncated_and_garbage, 0, 2);
    tcase_add_test(bad, entry_format_functions);
    TCase *flight = store_tcase(s, "single_flight");
    tcase_add_loop_test(flight, fork_single_flight, 0, 4);
    tcase_add_loop_test(flight, thread_single_flight, 0, 4);
    tcase_add_test(flight, wait_timeout);
    tcase_add_test(flight, mine_is_exclusive_under_churn);
    tcase_add_loop_test(flight, kill9_mid_publish, 0, 4);
    tcase_add_loop_test(flight, kill9_while_others_wait, 0, 4);
    tcase_add_loop_test(flight, two_mine_in_process, 0, 4);
    tcase_add_loop_test(flight, two_mine_concurrent, 0, 4);
    TCase *ev = store_tcase(s, "eviction");
    tcase_add_loop_test(ev, lru_eviction, 0, 4);
    tcase_add_loop_test(ev, reader_survives_eviction, 0, 4);
    tcase_add_loop_test(ev, concurrent_eviction, 0, 4);
    tcase_add_loop_test(ev, full_file_system, 0, 4);
    tcase_add_test(ev, stale_files_and_recount);
    TCase *dirs = tcase_create("directories");
    tcase_add_test(dirs, default_dir);
    tcase_add_test(dirs, private_dir_rules);
    tcase_add_test(dirs, path_walk_rules);
    suite_add_tcase(s, dirs);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(store_suite());
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
