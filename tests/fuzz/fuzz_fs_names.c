/*
 * fuzz_fs_names.c — libFuzzer target for the mount's name space (fs/names.c): the
 * names, inode numbers, directory entries and read spans fs/fs.c serves from.
 *
 * Input: 8 bytes of tree shape (epochs, batches: small values, or values near the
 * limits of fs/names.h's domain when a flag bit says so), 32 bytes of numbers (an
 * inode, an epoch, a readdir offset, a file length, a read offset and size), then
 * NUL-separated names.
 *
 * Checked against an independent model of names.h:
 *  - every name is looked up in /, in /epoch, in an epoch directory and in a file (which
 *    is -ENOTDIR); it resolves exactly when it is canonical ("pipeline", "stats",
 *    "epoch"; strict decimal below the limit; "batch_" + strict decimal; "next" in a tree
 *    with next, i.e. a mount with group=), computed here in 128 bits whatever its length;
 *  - round trip: a name that resolves is the name fsn_dirent gives that inode; entries
 *    listed by fsn_dirent (from a fuzzed offset, near 0 and near the end) resolve back
 *    to their inode, classify as what they are and carry offsets index + 1;
 *  - inodes: a fuzzed inode classifies to FSN_EPOCH / FSN_NEXT / FSN_BATCH only when
 *    fsn_epoch_ino / fsn_next_ino / fsn_batch_ino map the result back to it; epoch, next
 *    and batch inode ranges are disjoint, and next inodes exist only in trees with next;
 *  - fsn_parse_index with a fuzzed limit agrees with the model;
 *  - fsn_read_span never exceeds the size asked for nor the bytes left, never
 *    underflows (negative offsets and offsets past the end give 0).
 */
#include "fs/names.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_fs_names: %s:%d: contract violated: %s\n", __FILE__, __LINE__,   \
                    #cond);                                                                        \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static uint64_t rd(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* The model: is s a strict decimal below limit? Value computed in 128 bits, so any
 * length is judged by its value, not by a digit count. */
static int model_index(const char *s, uint64_t limit, uint64_t *out)
{
    size_t n = strlen(s);
    if (n == 0 || (s[0] == '0' && n > 1))
        return 0;
    unsigned __int128 v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        if (v < ((unsigned __int128)1 << 100)) /* beyond that it is above any limit */
            v = v * 10 + (unsigned)(s[i] - '0');
    }
    if (v >= limit)
        return 0;
    *out = (uint64_t)v;
    return 1;
}

static const int root_kinds[4] = {FSN_PIPELINE, FSN_STATS, FSN_EPOCHS, FSN_POOL};

/* Entry i of dir must resolve back to itself and classify as what it is. */
static void check_entry(const fsn_tree *t, uint64_t dir, int dir_kind, uint64_t dir_epoch,
                        uint64_t i)
{
    fsn_entry e;
    memset(&e, 0xAA, sizeof e);
    CHECK(fsn_dirent(t, dir, i, &e) == 0);
    CHECK(memchr(e.name, 0, sizeof e.name) != NULL && e.name[0]);
    if (i == 0) {
        CHECK(!strcmp(e.name, ".") && e.ino == dir && e.is_dir);
        return;
    }
    if (i == 1) {
        CHECK(!strcmp(e.name, "..") && e.is_dir);
        CHECK(e.ino == (dir_kind == FSN_EPOCH ? FSN_INO_EPOCHS : FSN_INO_ROOT));
        return;
    }
    uint64_t ino = 0, epoch = UINT64_MAX, k = UINT64_MAX;
    CHECK(fsn_lookup(t, dir, e.name, &ino) == 0);
    CHECK(ino == e.ino && ino != 0);
    int kind = fsn_classify(t, ino, &epoch, &k);
    switch (dir_kind) {
    case FSN_ROOT:
        CHECK(kind == root_kinds[i - 2]);
        CHECK(e.is_dir == (kind == FSN_EPOCHS));
        break;
    case FSN_EPOCHS:
        CHECK(kind == FSN_EPOCH && epoch == i - 2 && e.is_dir);
        break;
    default:
        if (i - 2 == t->batches) { /* after the batches: next */
            CHECK(t->next && !strcmp(e.name, "next"));
            CHECK(kind == FSN_NEXT && epoch == dir_epoch && !e.is_dir);
            break;
        }
        CHECK(kind == FSN_BATCH && epoch == dir_epoch && k == i - 2 && !e.is_dir);
        break;
    }
}

/* A readdir from offset off: entries off, off + 1, ... until the end. */
static void check_listing(const fsn_tree *t, uint64_t dir, int dir_kind, uint64_t dir_epoch,
                          uint64_t off)
{
    uint64_t count = fsn_dir_count(t, dir);
    uint64_t want = dir_kind == FSN_ROOT     ? 5 + (t->pool ? 1 : 0)
                    : dir_kind == FSN_EPOCHS ? 2 + (uint64_t)t->epochs
                                             : 2 + t->batches + (t->next ? 1 : 0);
    CHECK(count == want);
    fsn_entry e;
    CHECK(fsn_dirent(t, dir, count, &e) == -1);
    CHECK(fsn_dirent(t, dir, UINT64_MAX, &e) == -1);
    uint64_t starts[3] = {off, off % count, count - 1 - off % count};
    for (int s = 0; s < 3; s++) {
        for (uint64_t i = starts[s], n = 0; n < 8; i++, n++) {
            if (i >= count) {
                CHECK(fsn_dirent(t, dir, i, &e) == -1);
                break;
            }
            check_entry(t, dir, dir_kind, dir_epoch, i);
        }
    }
}

/* Look name up everywhere and compare with the model. */
static void check_name(const fsn_tree *t, uint64_t epoch, const char *name)
{
    uint64_t ino = 1, v = 0;
    /* the root */
    CHECK(fsn_lookup(t, FSN_INO_ROOT, name, &ino) == 0);
    uint64_t want = !strcmp(name, "pipeline")           ? FSN_INO_PIPELINE
                    : !strcmp(name, "stats")            ? FSN_INO_STATS
                    : !strcmp(name, "epoch")            ? FSN_INO_EPOCHS
                    : t->pool && !strcmp(name, ".pool") ? FSN_INO_POOL
                                                        : 0;
    CHECK(ino == want);
    /* /epoch: canonical decimals below epochs */
    CHECK(fsn_lookup(t, FSN_INO_EPOCHS, name, &ino) == 0);
    if (model_index(name, t->epochs, &v)) {
        CHECK(ino == fsn_epoch_ino(v));
        char back[FSN_NAME_MAX];
        snprintf(back, sizeof back, "%" PRIu64, v);
        CHECK(!strcmp(back, name)); /* canonical: one name per entry */
        fsn_entry e;
        CHECK(fsn_dirent(t, FSN_INO_EPOCHS, v + 2, &e) == 0 && !strcmp(e.name, name));
    } else {
        CHECK(ino == 0);
    }
    /* /epoch/N: batch_ + canonical decimal below batches */
    uint64_t dir = fsn_epoch_ino(epoch);
    CHECK(fsn_lookup(t, dir, name, &ino) == 0);
    if (!strncmp(name, "batch_", 6) && model_index(name + 6, t->batches, &v)) {
        CHECK(ino == fsn_batch_ino(t, epoch, v));
        fsn_entry e;
        CHECK(fsn_dirent(t, dir, v + 2, &e) == 0 && !strcmp(e.name, name) && e.ino == ino);
        uint64_t ep = 0, k = 0;
        CHECK(fsn_classify(t, ino, &ep, &k) == FSN_BATCH && ep == epoch && k == v);
    } else if (t->next && !strcmp(name, "next")) {
        CHECK(ino == fsn_next_ino(epoch));
        fsn_entry e;
        CHECK(fsn_dirent(t, dir, t->batches + 2, &e) == 0 && !strcmp(e.name, name) && e.ino == ino);
        uint64_t ep = 0, k = 0;
        CHECK(fsn_classify(t, ino, &ep, &k) == FSN_NEXT && ep == epoch);
    } else {
        CHECK(ino == 0);
    }
    /* files and unknown inodes are not directories */
    CHECK(fsn_lookup(t, FSN_INO_PIPELINE, name, &ino) == -ENOTDIR && ino == 0);
    CHECK(fsn_lookup(t, FSN_INO_STATS, name, &ino) == -ENOTDIR && ino == 0);
    CHECK(fsn_lookup(t, FSN_INO_POOL, name, &ino) == -ENOTDIR && ino == 0);
    CHECK(fsn_lookup(t, 0, name, &ino) == -ENOTDIR && ino == 0);
    if (t->next)
        CHECK(fsn_lookup(t, fsn_next_ino(epoch), name, &ino) == -ENOTDIR && ino == 0);
    if (t->batches)
        CHECK(fsn_lookup(t, fsn_batch_ino(t, epoch, 0), name, &ino) == -ENOTDIR && ino == 0);
}

static void check_ino(const fsn_tree *t, uint64_t ino)
{
    uint64_t epoch = UINT64_MAX, k = UINT64_MAX;
    int kind = fsn_classify(t, ino, &epoch, &k);
    switch (kind) {
    case FSN_ROOT:
    case FSN_PIPELINE:
    case FSN_STATS:
    case FSN_EPOCHS:
        CHECK(ino == (uint64_t)kind); /* FSN_INO_* equal their kinds */
        break;
    case FSN_POOL:
        CHECK(t->pool && ino == FSN_INO_POOL && fsn_dir_count(t, ino) == 0);
        break;
    case FSN_EPOCH:
        CHECK(epoch < t->epochs && fsn_epoch_ino(epoch) == ino);
        CHECK(fsn_epoch_ino(epoch) < FSN_NEXT_BASE);
        break;
    case FSN_NEXT:
        CHECK(t->next && epoch < t->epochs && fsn_next_ino(epoch) == ino);
        CHECK(ino >= FSN_NEXT_BASE && ino < FSN_BATCH_BASE);
        CHECK(fsn_dir_count(t, ino) == 0);
        break;
    case FSN_BATCH:
        CHECK(epoch < t->epochs && k < t->batches && fsn_batch_ino(t, epoch, k) == ino);
        break;
    default:
        CHECK(kind == FSN_NONE);
        CHECK(fsn_dir_count(t, ino) == 0);
        /* nothing maps here: not the pool, not an epoch, not a batch */
        CHECK(!t->pool || ino != FSN_INO_POOL);
        CHECK(ino < FSN_EPOCH_BASE || ino - FSN_EPOCH_BASE >= t->epochs);
        if (t->next)
            CHECK(ino < FSN_NEXT_BASE || ino - FSN_NEXT_BASE >= t->epochs);
        if (t->batches && ino >= FSN_BATCH_BASE)
            CHECK((ino - FSN_BATCH_BASE) / t->batches >= t->epochs);
        break;
    }
}

static void check_span(uint64_t len, int64_t off, size_t size)
{
    size_t n = fsn_read_span(len, off, size);
    CHECK(n <= size);
    if (off < 0 || (uint64_t)off >= len) {
        CHECK(n == 0);
        return;
    }
    uint64_t left = len - (uint64_t)off;
    CHECK(n <= left && (n == size || n == left));
    CHECK((uint64_t)off + n <= len); /* no wrap: off < len, n <= len - off */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 40)
        return 0;
    /* the tree: small shapes mostly, the edges of the domain when asked */
    uint8_t flags = data[0];
    fsn_tree t;
    t.epochs = (uint32_t)(flags & 1 ? rd(data + 1, 4) % FSN_MAX_EPOCHS + 1 : 1 + data[1] % 16);
    if (flags & 2) { /* up to the largest batch count the domain allows */
        uint64_t max = fsn_max_batches(t.epochs);
        uint64_t down = rd(data + 4, 4);
        t.batches = flags & 4 ? max - (down % (max + 1)) : down % (max + 1);
    } else {
        t.batches = rd(data + 4, 2) % 300;
    }
    t.next = (flags & 8) != 0;
    t.pool = (flags & 16) != 0;
    CHECK(fsn_tree_valid(&t));
    CHECK(t.batches <= fsn_max_batches(t.epochs));
    /* the last batch inode fits 64 bits and lies above every epoch inode */
    if (t.batches)
        CHECK(fsn_batch_ino(&t, t.epochs - 1, t.batches - 1) >= FSN_BATCH_BASE &&
              (t.batches == 1 || fsn_batch_ino(&t, t.epochs - 1, t.batches - 1) >
                                     fsn_batch_ino(&t, t.epochs - 1, 0)));
    CHECK(fsn_epoch_ino(t.epochs - 1) < FSN_NEXT_BASE);
    CHECK(fsn_next_ino(t.epochs - 1) < FSN_BATCH_BASE);
    fsn_tree bad = {0, 1, 0, 0};
    CHECK(!fsn_tree_valid(&bad));
    bad = (fsn_tree){t.epochs, fsn_max_batches(t.epochs) + 1, t.next, t.pool};
    CHECK(fsn_max_batches(t.epochs) == UINT64_MAX || !fsn_tree_valid(&bad));

    const uint8_t *num = data + 8;
    uint64_t epoch = rd(num, 4) % t.epochs;
    uint64_t ino = rd(num + 4, 8);
    uint64_t off = rd(num + 12, 4);
    uint64_t len = rd(num + 16, 8);
    int64_t roff = (int64_t)rd(num + 24, 8);
    size_t rsize = (size_t)rd(num + 16, 4) ^ (size_t)rd(num + 26, 4);

    check_ino(&t, ino);
    check_ino(&t, ino & 0xFFFFFFFFu);
    check_ino(&t, ino % 16);
    check_ino(&t, FSN_BATCH_BASE + (ino % (16 * (t.batches + 1))));
    check_ino(&t, fsn_epoch_ino(epoch));
    check_ino(&t, fsn_next_ino(epoch));
    check_ino(&t, FSN_NEXT_BASE + (ino % (t.epochs + 16)));
    if (t.batches)
        check_ino(&t, fsn_batch_ino(&t, epoch, off % t.batches));

    check_listing(&t, FSN_INO_ROOT, FSN_ROOT, 0, off);
    check_listing(&t, FSN_INO_EPOCHS, FSN_EPOCHS, 0, off);
    check_listing(&t, fsn_epoch_ino(epoch), FSN_EPOCH, epoch, off);
    check_listing(&t, fsn_epoch_ino(epoch), FSN_EPOCH, epoch, t.batches + 2 - off % 64);
    check_listing(&t, fsn_epoch_ino(epoch), FSN_EPOCH, epoch, t.batches + 3 - off % 4);

    check_span(len, roff, rsize);
    check_span(len, (int64_t)(len >> 1), rsize);
    check_span(len % 4096, roff % 8192, rsize % 8192);
    check_span(len, roff, SIZE_MAX);

    /* the names: NUL-separated after the fixed part */
    size_t rest = size - 40;
    char *names = malloc(rest + 1);
    CHECK(names != NULL);
    memcpy(names, data + 40, rest);
    names[rest] = 0;
    for (size_t pos = 0; pos <= rest;) {
        const char *name = names + pos;
        pos += strlen(name) + 1;
        check_name(&t, epoch, name);
        uint64_t v = 0, w = 0, limit = len ? len : UINT64_MAX;
        int got = fsn_parse_index(name, limit, &v) == 0;
        CHECK(got == model_index(name, limit, &w));
        CHECK(!got || v == w);
    }
    free(names);
    return 0;
}
