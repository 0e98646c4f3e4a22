/* source.c — .bfs and ImageFolder sample sources (see source.h). */
#include "engine/dataset/source.h"
#include "base/err.h"
#include "engine/dataset/fetch.h"
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
    /* a mixture (bfs_source_open_mix): its sources, the first global index of each
     * (off[nsub] = the count) and what each adds to its labels */
    bfs_source **sub;
    uint32_t nsub;
    uint64_t *off;
    uint32_t *lab_off;
    uint32_t classes;
    bfs_field *fields; /* the sources' field table, max_count the largest of any */
};

/* A mixture's source of global index i, and i's index in it. i past the end: the last
 * source and an index past its end (its functions report that as they do for any). */
static const bfs_source *part(const bfs_source *s, uint64_t *i, uint32_t *which)
{
    uint32_t lo = 0, hi = s->nsub - 1;
    while (lo < hi) { /* the last source whose first index is <= i */
        uint32_t mid = (lo + hi + 1) / 2;
        if (s->off[mid] <= *i)
            lo = mid;
        else
            hi = mid - 1;
    }
    *i -= s->off[lo];
    if (which)
        *which = lo;
    return s->sub[lo];
}

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
    memset(&sb, 0, sizeof sb); /* a remote .bfs file (fetch.h): not a directory */
    if (!bfs_fetch_is_remote(path) && stat(path, &sb) < 0) {
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
    for (size_t n = strlen(s->path); S_ISDIR(sb.st_mode) && n > 1 && s->path[n - 1] == '/'; n--)
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

/* Do the samples of sources a and b (numbers ia, ib) make the same tensors? 0, or -EINVAL
 * with what differs. */
static int same_kind(const bfs_source *a, const bfs_source *b, uint32_t ib, char *err,
                     size_t errlen)
{
    if (bfs_source_is_tokens(a) != bfs_source_is_tokens(b))
        return bfs_errf(-EINVAL, err, errlen,
                        "source %u (%s) holds %s, source 1 (%s) %s: a mixture's sources are of "
                        "one kind",
                        ib + 1, b->path, bfs_source_is_tokens(b) ? "token sequences" : "images",
                        a->path, bfs_source_is_tokens(a) ? "token sequences" : "images");
    uint32_t na = bfs_source_field_count(a), nb = bfs_source_field_count(b);
    if (na != nb)
        return bfs_errf(-EINVAL, err, errlen,
                        "source %u (%s) has %u field%s per sample, source 1 (%s) %u: a "
                        "mixture's sources must serve the same tensors",
                        ib + 1, b->path, nb, nb == 1 ? "" : "s", a->path, na);
    for (uint32_t f = 0; f < na; f++) {
        const bfs_field *x = bfs_source_field(a, f), *y = bfs_source_field(b, f);
        if (strcmp(x->name, y->name) || x->kind != y->kind || x->dtype != y->dtype ||
            x->rank != y->rank || memcmp(x->shape, y->shape, sizeof x->shape) ||
            x->follows != y->follows || (x->flags ^ y->flags) & BFS_FIELDF_VARIABLE)
            return bfs_errf(-EINVAL, err, errlen,
                            "source %u (%s): field %u is '%s' (%s %s), in source 1 (%s) '%s' "
                            "(%s %s): a mixture's sources must serve the same tensors "
                            "(mkbatchfs --info shows a file's fields)",
                            ib + 1, b->path, f, y->name, bfs_field_kind_name(y->kind),
                            bfs_fdt_name(y->dtype), a->path, x->name, bfs_field_kind_name(x->kind),
                            bfs_fdt_name(x->dtype));
    }
    return 0;
}

int bfs_source_open_mix(const char *const *paths, uint32_t n, int label_offsets, bfs_source **out,
                        char *err, size_t errlen)
{
    *out = NULL;
    if (n < 1 || n > BFS_MIX_MAX)
        return bfs_errf(-EINVAL, err, errlen, "a mixture has 1..%u sources, not %u", BFS_MIX_MAX,
                        n);
    bfs_source *s = calloc(1, sizeof *s);
    int rc = -ENOMEM;
    if (!s || !(s->path = strdup(paths[0])) || !(s->sub = calloc(n, sizeof *s->sub)) ||
        !(s->off = calloc(n + 1, sizeof *s->off)) ||
        !(s->lab_off = calloc(n, sizeof *s->lab_off))) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    s->nsub = n;
    uint64_t h[2 * BFS_MIX_MAX];
    for (uint32_t k = 0; k < n; k++) {
        char why[1024];
        if ((rc = bfs_source_open(paths[k], &s->sub[k], why, sizeof why))) {
            bfs_errf(rc, err, errlen, "source %u: %s", k + 1, why);
            goto fail;
        }
        if (k && (rc = same_kind(s->sub[0], s->sub[k], k, err, errlen)))
            goto fail;
        uint64_t c = bfs_source_count(s->sub[k]);
        if (!c) {
            rc = bfs_errf(-EINVAL, err, errlen, "source %u (%s) has no samples", k + 1, paths[k]);
            goto fail;
        }
        s->off[k + 1] = s->off[k] + c;
        uint32_t classes = bfs_source_class_count(s->sub[k]);
        s->lab_off[k] = label_offsets ? s->classes : 0;
        if (label_offsets)
            s->classes += classes;
        else if (classes > s->classes)
            s->classes = classes;
        h[2 * k] = bfs_source_identity(s->sub[k]);
        h[2 * k + 1] = c;
    }
    uint32_t nf = bfs_source_field_count(s->sub[0]);
    if (!(s->fields = calloc(nf, sizeof *s->fields))) {
        rc = -ENOMEM;
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    for (uint32_t f = 0; f < nf; f++) {
        s->fields[f] = *bfs_source_field(s->sub[0], f);
        for (uint32_t k = 1; k < n; k++) {
            uint64_t m = bfs_source_field(s->sub[k], f)->max_count;
            if (m > s->fields[f].max_count)
                s->fields[f].max_count = m;
        }
    }
    s->identity = bfs_xxh64(h, 2 * n * sizeof *h, 0x6d6978ull); /* "mix" */
    *out = s;
    return 0;
fail:
    bfs_source_close(s);
    return rc;
}

uint32_t bfs_source_mix_count(const bfs_source *s)
{
    return s->nsub;
}

uint32_t bfs_source_mix_locate(const bfs_source *s, uint64_t i, uint64_t *local)
{
    uint32_t k = 0;
    if (s->sub)
        part(s, &i, &k);
    if (local)
        *local = i;
    return k;
}

uint64_t bfs_source_mix_first(const bfs_source *s, uint32_t k)
{
    return s->sub && k <= s->nsub ? s->off[k] : 0;
}

const bfs_source *bfs_source_mix_part(const bfs_source *s, uint32_t k)
{
    return s->sub && k < s->nsub ? s->sub[k] : s;
}

void bfs_source_close(bfs_source *s)
{
    if (!s)
        return;
    for (uint32_t k = 0; k < s->nsub; k++)
        bfs_source_close(s->sub[k]);
    free(s->sub);
    free(s->off);
    free(s->lab_off);
    free(s->fields);
    bfs_close(s->bfs);
    bfs_folder_free(&s->folder);
    free(s->facts);
    free((void *)s->verdicts);
    free(s->path);
    free(s);
}

uint64_t bfs_source_count(const bfs_source *s)
{
    if (s->sub)
        return s->off[s->nsub];
    return s->bfs ? bfs_get_info(s->bfs)->sample_count : s->folder.n;
}

uint32_t bfs_source_class_count(const bfs_source *s)
{
    if (s->sub)
        return s->classes;
    return s->bfs ? bfs_get_info(s->bfs)->class_count : s->folder.nclasses;
}

int bfs_source_is_tokens(const bfs_source *s)
{
    if (s->sub)
        return bfs_source_is_tokens(s->sub[0]);
    return s->bfs && (bfs_get_info(s->bfs)->flags & BFS_DS_HAS_TOKENS);
}

uint32_t bfs_source_token_count(const bfs_source *s, uint64_t i)
{
    if (s->sub) {
        const bfs_source *t = part(s, &i, NULL);
        return bfs_source_token_count(t, i);
    }
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
    if (s->sub)
        return bfs_source_field_count(s->sub[0]);
    return s->bfs ? bfs_field_count(s->bfs) : 1;
}

const bfs_field *bfs_source_field(const bfs_source *s, uint32_t f)
{
    static const bfs_field folder_images = {
        .name = "images", .kind = BFS_FIELD_IMAGE, .follows = BFS_FIELD_NONE};
    if (s->sub)
        return f < bfs_source_field_count(s->sub[0]) ? &s->fields[f] : NULL;
    if (s->bfs)
        return bfs_get_field(s->bfs, f);
    return f == 0 ? &folder_images : NULL;
}

uint32_t bfs_source_value_count(const bfs_source *s, uint64_t i, uint32_t f)
{
    if (s->sub) {
        const bfs_source *t = part(s, &i, NULL);
        return bfs_source_value_count(t, i, f);
    }
    bfs_sample smp;
    if (!s->bfs || bfs_get_value(s->bfs, i, f, &smp))
        return 0;
    return smp.raw_size;
}

void bfs_source_prefetch(const bfs_source *s, uint64_t i, size_t bytes)
{
    if (s->sub)
        s = part(s, &i, NULL);
    if (s->mapped)
        bfs_value_prefetch(s->bfs, i, 0, bytes);
}

int bfs_source_get(bfs_source *s, uint64_t i, bfs_item *it, bfs_source_scratch *scratch)
{
    return bfs_source_get_value(s, i, 0, it, scratch);
}

int bfs_source_get_value(bfs_source *s, uint64_t i, uint32_t f, bfs_item *it,
                         bfs_source_scratch *scratch)
{
    if (s->sub) {
        uint32_t k;
        bfs_source *t = (bfs_source *)part(s, &i, &k);
        int rc = bfs_source_get_value(t, i, f, it, scratch);
        if (!rc)
            it->label += s->lab_off[k];
        return rc;
    }
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
    for (uint32_t k = 0; k < s->nsub; k++) {
        int rc = bfs_source_map_payloads(s->sub[k]);
        if (rc)
            return rc;
    }
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
    for (uint32_t k = 0; k < s->nsub; k++) {
        int rc = bfs_source_unchanged(s->sub[k]);
        if (rc)
            return rc;
    }
    return s->bfs ? bfs_unchanged(s->bfs) : 0;
}

int bfs_source_remote(const bfs_source *s)
{
    for (uint32_t k = 0; k < s->nsub; k++)
        if (bfs_source_remote(s->sub[k]))
            return 1;
    return s->bfs && bfs_reader_remote(s->bfs);
}

void bfs_source_advise(const bfs_source *s, const uint64_t *idx, uint32_t n)
{
    for (uint32_t j = 0; j < n && s->sub; j++) {
        uint64_t i = idx[j];
        const bfs_source *t = part(s, &i, NULL);
        bfs_source_advise(t, &i, 1);
    }
    if (s->bfs)
        bfs_advise_samples(s->bfs, idx, n);
}

int bfs_source_verdict(const bfs_source *s, uint64_t i)
{
    if (s->sub) {
        const bfs_source *t = part(s, &i, NULL);
        return bfs_source_verdict(t, i);
    }
    if (!s->verdicts || i >= s->folder.n)
        return BFS_VERDICT_GOOD;
    return atomic_load_explicit(&s->verdicts[i], memory_order_relaxed);
}

void bfs_source_set_verdict(bfs_source *s, uint64_t i, int verdict)
{
    if (s->sub) {
        bfs_source *t = (bfs_source *)part(s, &i, NULL);
        bfs_source_set_verdict(t, i, verdict);
        return;
    }
    if (s->verdicts && i < s->folder.n)
        atomic_store_explicit(&s->verdicts[i], (uint8_t)verdict, memory_order_relaxed);
}

uint32_t bfs_source_label(const bfs_source *s, uint64_t i)
{
    if (s->sub) {
        uint32_t k;
        const bfs_source *t = part(s, &i, &k);
        return bfs_source_label(t, i) + s->lab_off[k];
    }
    if (s->bfs) {
        bfs_sample smp;
        return bfs_get_sample(s->bfs, i, &smp) ? 0 : smp.label;
    }
    return i < s->folder.n ? s->folder.labels[i] : 0;
}

void bfs_source_describe(const bfs_source *s, uint64_t i, char *buf, size_t len)
{
    if (s->sub) {
        const bfs_source *t = part(s, &i, NULL);
        bfs_source_describe(t, i, buf, len);
        return;
    }
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
    if (!s->bfs || s->sub)
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
