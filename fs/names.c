/*
 * names.c — the mount's name space (see names.h): inode numbers, strict decimal names,
 * directory entries and read spans. Pure functions of their arguments.
 */
#include "fs/names.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

uint64_t fsn_max_batches(uint32_t epochs)
{
    return epochs ? (UINT64_MAX - FSN_BATCH_BASE + 1) / epochs : 0;
}

int fsn_tree_valid(const fsn_tree *t)
{
    return t->epochs >= 1 && t->epochs <= FSN_MAX_EPOCHS &&
           t->batches <= fsn_max_batches(t->epochs);
}

/* Strict decimal: digits only, no leading zero (so "batch_01" is not batch 1). Any
 * 64-bit value, 20 digits included: readdir names batches up to 2^64 - 2^32 - 1. */
int fsn_parse_index(const char *s, uint64_t limit, uint64_t *out)
{
    if (!*s || (s[0] == '0' && s[1]))
        return -1;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1; /* past 64 bits: above every limit */
        v = v * 10 + d;
    }
    if (v >= limit)
        return -1;
    *out = v;
    return 0;
}

int fsn_classify(const fsn_tree *t, uint64_t ino, uint64_t *epoch, uint64_t *k)
{
    if (ino == FSN_INO_ROOT)
        return FSN_ROOT;
    if (ino == FSN_INO_PIPELINE)
        return FSN_PIPELINE;
    if (ino == FSN_INO_STATS)
        return FSN_STATS;
    if (ino == FSN_INO_EPOCHS)
        return FSN_EPOCHS;
    if (ino == FSN_INO_POOL)
        return t->pool ? FSN_POOL : FSN_NONE;
    if (ino >= FSN_EPOCH_BASE && ino < FSN_EPOCH_BASE + t->epochs) {
        *epoch = ino - FSN_EPOCH_BASE;
        return FSN_EPOCH;
    }
    if (t->next && ino >= FSN_NEXT_BASE && ino < FSN_NEXT_BASE + t->epochs) {
        *epoch = ino - FSN_NEXT_BASE;
        return FSN_NEXT;
    }
    if (ino >= FSN_BATCH_BASE && ino - FSN_BATCH_BASE < (uint64_t)t->epochs * t->batches) {
        *epoch = (ino - FSN_BATCH_BASE) / t->batches;
        *k = (ino - FSN_BATCH_BASE) % t->batches;
        return FSN_BATCH;
    }
    return FSN_NONE;
}

uint64_t fsn_epoch_ino(uint64_t epoch)
{
    return FSN_EPOCH_BASE + epoch;
}

uint64_t fsn_batch_ino(const fsn_tree *t, uint64_t epoch, uint64_t k)
{
    return FSN_BATCH_BASE + epoch * t->batches + k;
}

uint64_t fsn_next_ino(uint64_t epoch)
{
    return FSN_NEXT_BASE + epoch;
}

int fsn_lookup(const fsn_tree *t, uint64_t parent, const char *name, uint64_t *ino)
{
    uint64_t epoch = 0, k = 0, v;
    *ino = 0;
    switch (fsn_classify(t, parent, &epoch, &k)) {
    case FSN_ROOT:
        *ino = !strcmp(name, "pipeline")           ? FSN_INO_PIPELINE
               : !strcmp(name, "stats")            ? FSN_INO_STATS
               : !strcmp(name, "epoch")            ? FSN_INO_EPOCHS
               : t->pool && !strcmp(name, ".pool") ? FSN_INO_POOL
                                                   : 0;
        return 0;
    case FSN_EPOCHS:
        if (!fsn_parse_index(name, t->epochs, &v))
            *ino = fsn_epoch_ino(v);
        return 0;
    case FSN_EPOCH:
        if (!strncmp(name, "batch_", 6) && !fsn_parse_index(name + 6, t->batches, &v))
            *ino = fsn_batch_ino(t, epoch, v);
        else if (t->next && !strcmp(name, "next"))
            *ino = fsn_next_ino(epoch);
        return 0;
    default:
        return -ENOTDIR;
    }
}

uint64_t fsn_dir_count(const fsn_tree *t, uint64_t dir)
{
    uint64_t epoch = 0, k = 0;
    switch (fsn_classify(t, dir, &epoch, &k)) {
    case FSN_ROOT:
        return 5 + (t->pool ? 1 : 0);
    case FSN_EPOCHS:
        return 2 + (uint64_t)t->epochs;
    case FSN_EPOCH:
        return 2 + t->batches + (t->next ? 1 : 0);
    default:
        return 0;
    }
}

int fsn_dirent(const fsn_tree *t, uint64_t dir, uint64_t i, fsn_entry *e)
{
    static const char *const root_names[] = {".", "..", "pipeline", "stats", "epoch", ".pool"};
    static const uint64_t root_inos[] = {FSN_INO_ROOT,  FSN_INO_ROOT,   FSN_INO_PIPELINE,
                                         FSN_INO_STATS, FSN_INO_EPOCHS, FSN_INO_POOL};
    uint64_t epoch = 0, k = 0;
    int kind = fsn_classify(t, dir, &epoch, &k);
    if (i >= fsn_dir_count(t, dir))
        return -1;
    if (kind == FSN_ROOT) {
        snprintf(e->name, sizeof e->name, "%s", root_names[i]);
        e->ino = root_inos[i];
    } else if (i < 2) {
        snprintf(e->name, sizeof e->name, "%s", i ? ".." : ".");
        e->ino = i ? (kind == FSN_EPOCHS ? FSN_INO_ROOT : FSN_INO_EPOCHS) : dir;
    } else if (kind == FSN_EPOCHS) {
        snprintf(e->name, sizeof e->name, "%" PRIu64, i - 2);
        e->ino = fsn_epoch_ino(i - 2);
    } else if (i - 2 < t->batches) {
        snprintf(e->name, sizeof e->name, "batch_%" PRIu64, i - 2);
        e->ino = fsn_batch_ino(t, epoch, i - 2);
    } else {
        snprintf(e->name, sizeof e->name, "next");
        e->ino = fsn_next_ino(epoch);
    }
    e->is_dir = !((kind == FSN_ROOT && i >= 2 && i != 4) || (kind == FSN_EPOCH && i >= 2));
    return 0;
}

size_t fsn_read_span(uint64_t len, int64_t off, size_t size)
{
    if (off < 0 || (uint64_t)off >= len)
        return 0;
    uint64_t left = len - (uint64_t)off;
    return size > left ? (size_t)left : size;
}
