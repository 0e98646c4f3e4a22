/* source.c — .bfs and ImageFolder sample sources (see source.h). */
#include "engine/dataset/source.h"
#include "base/err.h"
#include "engine/dataset/folder.h"
#include "engine/dataset/guard.h"
#include "base/hash.h"
#include "base/io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct bfs_source {
    char *path;
    bfs_reader *bfs;   /* .bfs source, or NULL */
    int mapped;        /* bfs_source_map_payloads succeeded */
    bfs_folder folder; /* folder source */
    uint64_t identity;
    uint64_t *facts; /* folder: per file, XXH64 of its size, mtime and ctime at the scan */
    _Atomic uint8_t *verdicts; /* folder: per file, BFS_VERDICT_* (bfs_source_verdict) */
    char notes[2048];          /* bfs_source_notes */
};

/* What a folder file's change check hashes: its size, mtime and ctime, or the error that
 * stands in for them (a file that cannot be stat'ed). facts3, when given, gets the first
 * three, which the identity (and so the fingerprint) hashes: the ctime stays out of it,
 * as no copy keeps it (a worker's rsync'ed copy of the folder must have the mount's
 * fingerprint), but in the check, as no writer can keep it: `touch -r` or
 * `cp --preserve=timestamps` over a file restores its size and mtime, not its ctime. */
static uint64_t file_facts(const char *path, uint64_t *facts3)
{
    struct stat sb;
    if (stat(path, &sb) < 0) {
        memset(&sb, 0, sizeof sb);
        sb.st_size = -(off_t)errno;
    }
    uint64_t f[5] = {(uint64_t)sb.st_size, (uint64_t)sb.st_mtim.tv_sec,
                     (uint64_t)sb.st_mtim.tv_nsec, (uint64_t)sb.st_ctim.tv_sec,
                     (uint64_t)sb.st_ctim.tv_nsec};
    if (facts3)
        memcpy(facts3, f, 3 * sizeof *f);
    return bfs_xxh64(f, sizeof f, 0);
}

static int folder_identity(bfs_source *s, char *err, size_t errlen)
{
    bfs_xxh64_state st;
    bfs_xxh64_init(&st, 0);
    for (uint32_t c = 0; c < s->folder.nclasses; c++)
        bfs_xxh64_update(&st, s->folder.classes[c], strlen(s->folder.classes[c]) + 1);
    size_t root = strlen(s->path);
    if (!(s->facts = malloc((s->folder.n ? s->folder.n : 1) * sizeof *s->facts)))
        return bfs_errf(-ENOMEM, err, errlen, "out of memory");
    for (uint64_t i = 0; i < s->folder.n; i++) {
        const char *p = s->folder.paths[i];
        /* a file that cannot be stat'ed (a dangling symlink) is a bad sample when read,
         * substituted per bad_sample: its error stands in for its size */
        uint64_t facts[4];
        s->facts[i] = file_facts(p, facts);
        facts[3] = s->folder.labels[i];
        /* relative paths: moving the whole folder keeps its identity */
        const char *rel = strlen(p) > root ? p + root : p;
        bfs_xxh64_update(&st, rel, strlen(rel) + 1);
        bfs_xxh64_update(&st, facts, sizeof facts);
    }
    s->identity = bfs_xxh64_digest(&st);
    return 0;
}

int bfs_source_open(const char *path, bfs_source **out, char *err, size_t errlen)
{
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) < 0) {
        int e = errno;
        snprintf(err, errlen, "%s: %s", path, strerror(e));
        return -e;
    }
    bfs_source *s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) {
        free(s);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    /* strip trailing slashes so relative folder paths are stable */
    for (size_t n = strlen(s->path); n > 1 && s->path[n - 1] == '/'; n--)
        s->path[n - 1] = 0;
    int rc;
    if (S_ISDIR(sb.st_mode)) {
        rc = bfs_folder_scan(s->path, &s->folder, err, errlen);
        if (!rc)
            rc = folder_identity(s, err, errlen);
        if (!rc && !(s->verdicts = calloc(s->folder.n ? s->folder.n : 1, sizeof *s->verdicts)))
            rc = bfs_errf(-ENOMEM, err, errlen, "out of memory");
        if (!rc)
            bfs_folder_notes(&s->folder, s->notes, sizeof s->notes);
    } else {
        rc = bfs_open(s->path, &s->bfs, err, errlen);
        /* the tables hold every sample's label, and no per-sample checksum covers them:
         * checked once here, ~32 bytes per sample (bench_open prints the cost) */
        if (!rc && (rc = bfs_verify_tables(s->bfs)))
            bfs_errf(rc, err, errlen, "%s: %s", s->path, bfs_strerror(rc));
        if (!rc)
            s->identity = bfs_get_info(s->bfs)->header_checksum;
    }
    if (rc) {
        bfs_source_close(s);
        return rc;
    }
    *out = s;
    return 0;
}

void bfs_source_close(bfs_source *s)
{
    if (!s)
        return;
    bfs_close(s->bfs);
    bfs_folder_free(&s->folder);
    free(s->facts);
    free((void *)s->verdicts);
    free(s->path);
    free(s);
}

uint64_t bfs_source_count(const bfs_source *s)
{
    return s->bfs ? bfs_get_info(s->bfs)->sample_count : s->folder.n;
}

uint32_t bfs_source_class_count(const bfs_source *s)
{
    return s->bfs ? bfs_get_info(s->bfs)->class_count : s->folder.nclasses;
}

int bfs_source_is_tokens(const bfs_source *s)
{
    return s->bfs && (bfs_get_info(s->bfs)->flags & BFS_DS_HAS_TOKENS);
}

uint32_t bfs_source_token_count(const bfs_source *s, uint64_t i)
{
    bfs_sample smp;
    if (!s->bfs || bfs_get_sample(s->bfs, i, &smp) ||
        (smp.flags & BFS_KIND_MASK) != BFS_KIND_TOKENS)
        return 0;
    return smp.raw_size;
}

uint64_t bfs_source_identity(const bfs_source *s)
{
    return s->identity;
}

const char *bfs_source_notes(const bfs_source *s)
{
    return s->notes;
}

const char *bfs_source_path(const bfs_source *s)
{
    return s->path;
}

/* A .bfs sample's payload in one of two places: the mapping or the scratch buffer. */
static int bfs_item_of(const bfs_sample *smp, const uint8_t *data, bfs_item *it)
{
    *it = (bfs_item){.data = data,
                     .len = smp->length,
                     .label = smp->label,
                     .width = smp->width,
                     .height = smp->height,
                     .flags = smp->flags,
                     .raw_size = smp->raw_size};
    return 0;
}

uint32_t bfs_source_field_count(const bfs_source *s)
{
    return s->bfs ? bfs_field_count(s->bfs) : 1;
}

const bfs_field *bfs_source_field(const bfs_source *s, uint32_t f)
{
    static const bfs_field folder_images = {
        .name = "images", .kind = BFS_FIELD_IMAGE, .follows = BFS_FIELD_NONE};
    if (s->bfs)
        return bfs_get_field(s->bfs, f);
    return f == 0 ? &folder_images : NULL;
}

uint32_t bfs_source_value_count(const bfs_source *s, uint64_t i, uint32_t f)
{
    bfs_sample smp;
    if (!s->bfs || bfs_get_value(s->bfs, i, f, &smp))
        return 0;
    return smp.raw_size;
}

int bfs_source_get(bfs_source *s, uint64_t i, bfs_item *it, bfs_source_scratch *scratch)
{
    return bfs_source_get_value(s, i, 0, it, scratch);
}

int bfs_source_get_value(bfs_source *s, uint64_t i, uint32_t f, bfs_item *it,
                         bfs_source_scratch *scratch)
{
    memset(it, 0, sizeof *it);
    bfs_sample smp;
    if (s->mapped) {
        const uint8_t *data;
        size_t len;
        int rc = bfs_value_data(s->bfs, i, f, BFS_VERIFY_SAMPLE, &smp, &data, &len);
        /* an overwritten file shows as checksum errors: say which it is */
        if (rc == BFS_E_SAMPLE_CHECKSUM && bfs_unchanged(s->bfs) == BFS_E_CHANGED)
            rc = BFS_E_CHANGED;
        return rc ? rc : bfs_item_of(&smp, data, it);
    }
    if (s->bfs) {
        int rc = bfs_read_value(s->bfs, i, f, BFS_VERIFY_SAMPLE, &smp, scratch->buf, scratch->cap);
        if (rc == -ENOSPC) {
            uint8_t *b = realloc(scratch->buf, smp.length);
            if (!b)
                return -ENOMEM;
            scratch->buf = b, scratch->cap = smp.length;
            rc = bfs_read_value(s->bfs, i, f, BFS_VERIFY_SAMPLE, &smp, scratch->buf, scratch->cap);
        }
        return rc ? rc : bfs_item_of(&smp, smp.length ? scratch->buf : NULL, it);
    }
    if (f != 0)
        return BFS_E_SAMPLE_INDEX;
    if (i >= s->folder.n)
        return BFS_E_SAMPLE_INDEX;
    int rc = bfs_read_file(s->folder.paths[i], &scratch->buf, &scratch->cap, &it->len);
    if (rc) /* unreadable now: since the scan (vanished, replaced) or already then */
        return file_facts(s->folder.paths[i], NULL) != s->facts[i] ? BFS_E_FILE_CHANGED : rc;
    /* the bytes are the scanned file's only if its size, mtime and ctime are still those
     * of the scan the identity (and so the fingerprint, and cache_dir's entries) was made
     * of: stat'ed after the read, so a change during it shows too. Costs a stat, ~1 us
     * against a decode. */
    uint64_t facts[3];
    if (file_facts(s->folder.paths[i], facts) != s->facts[i] || facts[0] != it->len)
        return BFS_E_FILE_CHANGED;
    it->data = scratch->buf;
    it->label = s->folder.labels[i];
    return 0;
}

int bfs_source_map_payloads(bfs_source *s)
{
    if (!s->bfs || s->mapped)
        return 0;
    int rc = bfs_guard_init();
    if (!rc)
        rc = bfs_map_payloads(s->bfs);
    s->mapped = rc == 0;
    return rc;
}

int bfs_source_unchanged(const bfs_source *s)
{
    return s->bfs ? bfs_unchanged(s->bfs) : 0;
}

void bfs_source_advise(const bfs_source *s, const uint64_t *idx, uint32_t n)
{
    if (s->bfs)
        bfs_advise_samples(s->bfs, idx, n);
}

int bfs_source_verdict(const bfs_source *s, uint64_t i)
{
    if (!s->verdicts || i >= s->folder.n)
        return BFS_VERDICT_GOOD;
    return atomic_load_explicit(&s->verdicts[i], memory_order_relaxed);
}

void bfs_source_set_verdict(bfs_source *s, uint64_t i, int verdict)
{
    if (s->verdicts && i < s->folder.n)
        atomic_store_explicit(&s->verdicts[i], (uint8_t)verdict, memory_order_relaxed);
}

uint32_t bfs_source_label(const bfs_source *s, uint64_t i)
{
    if (s->bfs) {
        bfs_sample smp;
        return bfs_get_sample(s->bfs, i, &smp) ? 0 : smp.label;
    }
    return i < s->folder.n ? s->folder.labels[i] : 0;
}

void bfs_source_describe(const bfs_source *s, uint64_t i, char *buf, size_t len)
{
    if (!s->bfs && i < s->folder.n)
        snprintf(buf, len, "%s", s->folder.paths[i]);
    else
        snprintf(buf, len, "sample %llu of %s", (unsigned long long)i, s->path);
}

void bfs_source_scratch_free(bfs_source_scratch *scratch)
{
    if (scratch) {
        free(scratch->buf);
        scratch->buf = NULL;
        scratch->cap = 0;
    }
}

int bfs_source_page_first(const bfs_source *s, uint64_t **first, uint64_t *npages)
{
    *first = NULL;
    *npages = 0;
    if (!s->bfs)
        return 0;
    const bfs_info *in = bfs_get_info(s->bfs);
    uint64_t *f = malloc((in->page_count + 1) * sizeof *f);
    if (!f)
        return -ENOMEM;
    /* samples are stored in order, so page starts are where the page index changes */
    uint64_t p = 0;
    f[0] = 0;
    for (uint64_t i = 0; i < in->sample_count; i++) {
        bfs_sample smp;
        uint64_t pg = bfs_get_sample(s->bfs, i, &smp) ? p : smp.offset / in->page_size;
        while (p < pg && p < in->page_count)
            f[++p] = i;
    }
    while (p < in->page_count)
        f[++p] = in->sample_count;
    *first = f;
    *npages = in->page_count;
    return 0;
}
