/*
 * bfs_read.c — .bfs reader (see bfs.h, docs/format.md).
 *
 * Open validates the 128-byte header and the placement of the regions (heap, sample
 * table, class table, field table of version 3, page table) against the real file size,
 * and the field declarations; nothing per sample, so open is O(fields). Entries are checked when
 * read. A file's header and tables are copied into memory at open and its payloads read with pread:
 * a dataset truncated or overwritten while open gives BFS_E_CHANGED or a checksum error, never
 * SIGBUS. Only bfs_map_payloads maps them, for callers that read through guard.h and check
 * bfs_unchanged after their reads (a mapped sample's checksum is verified once). The page-verified
 * and sample-verified bitmaps are the only mutable state; they are updated with atomic OR, so a
 * reader is shared freely between threads.
 *
 * A remote file (an s3://, https:// or http:// URL: fetch.h) is read the same way, its
 * preads made Range GETs of the object pinned at open (an object replaced under the reader
 * gives BFS_E_CHANGED); it is never mapped. bfs_advise_samples hands a batch's payloads to
 * its prefetcher (prefetch.h), which fetches them ahead, several at once; reads take them
 * from there, or from the host's source_cache (cache/srccache.h) when it holds them. A read
 * the object store does not serve after its retries is BFS_E_FETCH (bfs_err_is_transient:
 * nothing said of the sample), its reason in bfs_fetch_reason; a sample whose checksum
 * fails is read once more before it counts as bad (a proxy or a flaky link, not the
 * data).
 */
#include "engine/dataset/bfs.h"
#include "engine/dataset/fetch.h"
#include "engine/dataset/prefetch.h"
#include "cache/srccache.h"
#include "base/err.h"
#include "base/hash.h"
#include "base/io.h"
#include "base/endian.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct bfs_reader {
    const uint8_t *base; /* memory images: the whole image; NULL for files */
    size_t len;          /* bytes of the image or the file */
    const uint8_t *hdr;  /* the 128-byte header (zero-padded when the file is shorter) */
    const uint8_t *tail; /* the tables: file bytes [tail_off, file_size) */
    uint64_t tail_off;
    uint8_t *own;       /* files: header and tables copied into memory (freed on close) */
    int fd;             /* the file, for pread of payloads; -1 for memory images and remote
                           files */
    bfs_object *obj;    /* a remote file (fetch.h), or NULL */
    bfs_prefetch *pf;   /* a remote file's payloads fetched ahead (prefetch.h), or NULL */
    bfs_srcfile *sc;    /* a remote file's bytes on disk (source_cache=), or NULL */
    int tables_ok;      /* the tables (copied into memory, so they stay so) passed
                           bfs_verify_tables at open: not hashed again */
    const uint8_t *map; /* bfs_map_payloads: the whole file, read-only; else NULL */
    struct stat id;     /* the file as opened: device, inode, size, mtime, ctime, links */
    bfs_info info;
    _Atomic uint64_t *verified;  /* bit per page: checksum already verified OK */
    _Atomic uint64_t *sample_ok; /* local files: bit per value (sample i, field f at
                                    i * field_count + f), checksum verified OK; NULL
                                    without the memory: every read is verified */
    bfs_field *fields;           /* field_count declarations (versions 1, 2: synthesized) */
};

/* bit i of an atomic bitmap */
static int bit_test(_Atomic uint64_t *map, uint64_t i)
{
    return (atomic_load_explicit(&map[i / 64], memory_order_acquire) >> (i % 64)) & 1;
}

static void bit_set(_Atomic uint64_t *map, uint64_t i)
{
    atomic_fetch_or_explicit(&map[i / 64], 1ULL << (i % 64), memory_order_release);
}

/* A bit per value, all clear (NULL without the memory) */
static _Atomic uint64_t *alloc_sample_ok(const bfs_reader *r)
{
    return calloc((size_t)((r->info.sample_count * r->info.field_count + 63) / 64) + 1,
                  sizeof(_Atomic uint64_t));
}

/* [off, off+size) inside [0, limit) without overflow */
static int region_ok(uint64_t off, uint64_t size, uint64_t limit)
{
    return off <= limit && size <= limit - off;
}

static int parse_header(bfs_reader *r, char *err, size_t errlen)
{
    const uint8_t *h = r->hdr;
    bfs_info *in = &r->info;
    if (r->len == 0)
        return bfs_errf(BFS_E_TRUNCATED, err, errlen, "empty file");
    if (r->len < 8 && memcmp(h, BFS_MAGIC, r->len) == 0)
        return bfs_errf(BFS_E_TRUNCATED, err, errlen,
                        "file is %zu bytes, shorter than the %u-byte header", r->len,
                        BFS_HEADER_SIZE);
    if (r->len < 8 || memcmp(h, BFS_MAGIC, 8) != 0) {
        if (r->len >= 8 && bfs_ld64(h) == 0)
            return bfs_errf(BFS_E_MAGIC, err, errlen,
                            "no magic number: the file starts with zeros (an interrupted "
                            "mkbatchfs leaves its temporary file like this)");
        return bfs_errf(BFS_E_MAGIC, err, errlen, "not a batchfs dataset (bad magic number)");
    }
    if (r->len < BFS_HEADER_SIZE)
        return bfs_errf(BFS_E_TRUNCATED, err, errlen,
                        "file is %zu bytes, shorter than the %u-byte header", r->len,
                        BFS_HEADER_SIZE);
    in->version = bfs_ld32(h + 8);
    if (in->version < BFS_VERSION_MIN || in->version > BFS_VERSION)
        return bfs_errf(BFS_E_VERSION, err, errlen,
                        "format version %u; this build reads versions %u..%u (repack with "
                        "this mkbatchfs, or use a newer batchfs)",
                        in->version, BFS_VERSION_MIN, BFS_VERSION);
    uint64_t want = bfs_xxh64(h, 120, 0);
    in->header_checksum = bfs_ld64(h + 120);
    if (want != in->header_checksum)
        return bfs_errf(BFS_E_HEADER_CHECKSUM, err, errlen,
                        "header checksum mismatch (stored %016llx, computed %016llx)",
                        (unsigned long long)in->header_checksum, (unsigned long long)want);
    in->sample_record_size = bfs_ld32(h + 108);
    in->field_table_offset = bfs_ld64(h + 112);
    if (bfs_ld32(h + 12) != BFS_HEADER_SIZE ||
        (in->version < 3 && in->sample_record_size != BFS_SAMPLE_RECORD))
        return bfs_errf(BFS_E_VERSION, err, errlen,
                        "header size %u / sample record size %u not %u / %u", bfs_ld32(h + 12),
                        in->sample_record_size, BFS_HEADER_SIZE, BFS_SAMPLE_RECORD);
    if (in->version < 3 && in->field_table_offset != 0)
        return bfs_errf(BFS_E_VERSION, err, errlen,
                        "reserved header bytes 112..119 are not zero in a version %u file",
                        in->version);
    if (in->version >= 3 &&
        (in->sample_record_size % BFS_SAMPLE_RECORD || in->sample_record_size == 0 ||
         in->sample_record_size > BFS_SAMPLE_RECORD * BFS_FIELD_MAX))
        return bfs_errf(BFS_E_COUNT, err, errlen,
                        "sample record size %u is not 32 bytes times 1..%u fields",
                        in->sample_record_size, BFS_FIELD_MAX);
    in->field_count = in->sample_record_size / BFS_SAMPLE_RECORD;
    in->field_table_size = in->version >= 3 ? 8 + (uint64_t)BFS_FIELD_DESC * in->field_count : 0;
    in->sample_count = bfs_ld64(h + 16);
    in->class_count = bfs_ld32(h + 24);
    in->page_size = bfs_ld32(h + 28);
    in->heap_offset = bfs_ld64(h + 32);
    in->heap_size = bfs_ld64(h + 40);
    in->page_count = bfs_ld64(h + 48);
    in->sample_table_offset = bfs_ld64(h + 56);
    in->class_table_offset = bfs_ld64(h + 64);
    in->class_table_size = bfs_ld64(h + 72);
    in->page_table_offset = bfs_ld64(h + 80);
    in->file_size = bfs_ld64(h + 88);
    in->tables_checksum = bfs_ld64(h + 96);
    in->flags = bfs_ld32(h + 104);

    if (in->file_size > r->len)
        return bfs_errf(BFS_E_TRUNCATED, err, errlen,
                        "file is truncated: %zu bytes, header says %llu (%llu bytes missing: an "
                        "interrupted copy or download?)",
                        r->len, (unsigned long long)in->file_size,
                        (unsigned long long)(in->file_size - r->len));
    if (in->file_size < r->len)
        return bfs_errf(BFS_E_LAYOUT, err, errlen, "file has %llu unexpected trailing bytes",
                        (unsigned long long)(r->len - in->file_size));
    uint64_t ps = in->page_size;
    if (ps < BFS_PAGE_SIZE_MIN || ps > BFS_PAGE_SIZE_MAX || (ps & (ps - 1)))
        return bfs_errf(BFS_E_COUNT, err, errlen, "page size %u is not a power of two in [%u, %u]",
                        in->page_size, BFS_PAGE_SIZE_MIN, BFS_PAGE_SIZE_MAX);
    if (in->sample_count == 0 || in->class_count == 0)
        return bfs_errf(BFS_E_COUNT, err, errlen, "dataset has %llu samples in %u classes",
                        (unsigned long long)in->sample_count, in->class_count);
    if (in->class_count > BFS_MAX_CLASSES)
        return bfs_errf(BFS_E_COUNT, err, errlen, "class count %u above the limit %u",
                        in->class_count, BFS_MAX_CLASSES);
    if (in->sample_count > r->len / in->sample_record_size)
        return bfs_errf(BFS_E_COUNT, err, errlen, "sample count %llu cannot fit in a %zu-byte file",
                        (unsigned long long)in->sample_count, r->len);
    if (in->page_count != (in->heap_size + ps - 1) / ps)
        return bfs_errf(BFS_E_COUNT, err, errlen, "page count %llu does not match heap size %llu",
                        (unsigned long long)in->page_count, (unsigned long long)in->heap_size);
    uint32_t known = BFS_DS_HAS_JPEG | BFS_DS_HAS_RAW | (in->version == 2 ? BFS_DS_HAS_TOKENS : 0) |
                     (in->version >= 3 ? BFS_DS_HAS_CODEC : 0);
    if (in->flags & ~known)
        return bfs_errf(BFS_E_VERSION, err, errlen, "unknown dataset flags %#x", in->flags);
    if ((in->flags & BFS_DS_HAS_TOKENS) && (in->flags & (BFS_DS_HAS_JPEG | BFS_DS_HAS_RAW)))
        return bfs_errf(BFS_E_LAYOUT, err, errlen,
                        "dataset flags %#x: token sequences and images in one file", in->flags);

    /* Regions: in file order heap, sample table, class table, field table (version 3),
     * page table; none may leave the file or overlap the next. */
    uint64_t st_size = in->sample_count * in->sample_record_size;
    struct {
        const char *name;
        uint64_t off, size;
    } reg[] = {
        {"payload heap", in->heap_offset, in->heap_size},
        {"sample table", in->sample_table_offset, st_size},
        {"class table", in->class_table_offset, in->class_table_size},
        {"field table", in->field_table_offset, in->field_table_size},
        {"page table", in->page_table_offset, in->page_count * 8},
    };
    uint64_t prev_end = BFS_HEADER_SIZE;
    for (size_t k = 0; k < sizeof reg / sizeof reg[0]; k++) {
        if (k == 3 && in->version < 3)
            continue; /* no field table */
        if (!region_ok(reg[k].off, reg[k].size, in->file_size) || reg[k].off < prev_end)
            return bfs_errf(BFS_E_LAYOUT, err, errlen,
                            "%s at offset %llu, %llu bytes, lies outside the file (%llu bytes) or "
                            "overlaps the previous region",
                            reg[k].name, (unsigned long long)reg[k].off,
                            (unsigned long long)reg[k].size, (unsigned long long)in->file_size);
        prev_end = reg[k].off + reg[k].size;
    }
    /* Exactly the layout docs/format.md gives: no slack between or after regions except
     * the alignment padding, so every byte of the file is accounted for. */
    uint64_t st_want = (in->heap_offset + in->heap_size + 7) & ~7ULL;
    uint64_t ct_end = in->class_table_offset + in->class_table_size;
    uint64_t ft_want = (ct_end + 7) & ~7ULL;
    uint64_t pt_want = in->version >= 3 ? in->field_table_offset + in->field_table_size : ft_want;
    if (in->sample_table_offset != st_want ||
        in->class_table_offset != in->sample_table_offset + st_size ||
        (in->version >= 3 && in->field_table_offset != ft_want) ||
        in->page_table_offset != pt_want ||
        in->file_size != in->page_table_offset + in->page_count * 8)
        return bfs_errf(BFS_E_LAYOUT, err, errlen,
                        "regions are not packed as the format requires (unexpected gaps or "
                        "trailing bytes)");
    if (in->class_table_size < (uint64_t)in->class_count * 8)
        return bfs_errf(BFS_E_LAYOUT, err, errlen,
                        "class table of %llu bytes cannot hold %u entries",
                        (unsigned long long)in->class_table_size, in->class_count);
    return 0;
}

/* Where file offset off (inside the tables) is in memory. */
static inline const uint8_t *at(const bfs_reader *r, uint64_t off)
{
    return r->tail + (off - r->tail_off);
}

unsigned bfs_fdt_size(unsigned dtype)
{
    static const unsigned size[BFS_FDT_END] = {1, 2, 4, 4, 8, 4};
    return dtype < BFS_FDT_END ? size[dtype] : 0;
}

const char *bfs_fdt_name(unsigned dtype)
{
    static const char *name[BFS_FDT_END] = {"u8", "u16", "u32", "i32", "i64", "f32"};
    return dtype < BFS_FDT_END ? name[dtype] : "?";
}

const char *bfs_field_kind_name(unsigned kind)
{
    static const char *name[BFS_FIELD_KIND_END] = {"?",     "image", "text", "tokens",
                                                   "array", "boxes", "bytes"};
    return kind < BFS_FIELD_KIND_END ? name[kind] : "?";
}

int bfs_field_check(const bfs_field *f, uint32_t idx, uint32_t n, char *err, size_t errlen)
{
    size_t nl = strnlen(f->name, sizeof f->name);
    int name_ok = nl >= 1 && nl <= BFS_FIELD_NAME_MAX && !(f->name[0] >= '0' && f->name[0] <= '9');
    for (size_t k = 0; k < nl && name_ok; k++) {
        char c = f->name[k];
        name_ok =
            (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    }
    if (!name_ok) { /* shown with any other byte as '?': it came from a file */
        char shown[BFS_FIELD_NAME_MAX + 1];
        size_t k;
        for (k = 0; k < nl && k < BFS_FIELD_NAME_MAX; k++) {
            char c = f->name[k];
            int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                     c == '_';
            shown[k] = ok ? c : '?';
        }
        shown[k] = '\0';
        return bfs_errf(-EINVAL, err, errlen,
                        "field %u: name \"%s\" is not 1..%u letters, digits and _ (not starting "
                        "with a digit)",
                        idx, shown, BFS_FIELD_NAME_MAX);
    }
    const char *why = NULL;
    int var = f->flags & BFS_FIELDF_VARIABLE;
    uint8_t dt = f->dtype;
    if (idx >= n || n > BFS_FIELD_MAX)
        why = "field index past the field count";
    else if (f->kind < BFS_FIELD_IMAGE || f->kind >= BFS_FIELD_KIND_END)
        why = "unknown kind";
    else if (dt >= BFS_FDT_END)
        why = "unknown dtype";
    else if (f->flags & ~(BFS_FIELDF_VARIABLE | BFS_FIELDF_OPTIONAL))
        why = "unknown flags";
    else if (f->rank > 3)
        why = "rank over 3";
    else if (idx == 0 && (f->kind != BFS_FIELD_IMAGE || (f->flags & BFS_FIELDF_OPTIONAL)))
        why = "field 0 must be a required image (the sample's primary image)";
    else if (f->kind == BFS_FIELD_IMAGE && (dt != BFS_FDT_U8 || var || f->rank))
        why = "an image field is u8, not variable, rank 0";
    else if ((f->kind == BFS_FIELD_TEXT || f->kind == BFS_FIELD_BYTES) &&
             (dt != BFS_FDT_U8 || !var || f->rank))
        why = "a text or bytes field is u8, variable, rank 0";
    else if (f->kind == BFS_FIELD_TOKENS &&
             ((dt != BFS_FDT_U16 && dt != BFS_FDT_U32) || !var || f->rank))
        why = "a tokens field is u16 or u32, variable, rank 0";
    else if (f->kind == BFS_FIELD_BOXES &&
             (dt != BFS_FDT_F32 || !var || f->rank != 1 || f->shape[0] != 4))
        why = "a boxes field is f32, variable, rank 1 of shape [4]";
    else if (f->follows != BFS_FIELD_NONE &&
             (f->kind != BFS_FIELD_ARRAY || !var || f->rank || f->follows >= idx))
        why = "only a variable rank-0 array may follow an earlier boxes field";
    if (!why)
        for (unsigned k = 0; k < 3; k++)
            if (k < f->rank ? f->shape[k] == 0 : f->shape[k] != 0)
                why = "a dimension of its shape is 0, or one past its rank is not 0";
    if (why)
        return bfs_errf(-EINVAL, err, errlen, "field %u (%s): %s", idx, f->name, why);
    return 0;
}

/* The field table (version 3) into r->fields, each declaration checked, names unique,
 * followers pointing at boxes fields; versions 1 and 2 get one synthesized field. */
static int parse_fields(bfs_reader *r, char *err, size_t errlen)
{
    const bfs_info *in = &r->info;
    uint32_t n = in->field_count;
    r->fields = calloc(n, sizeof *r->fields);
    if (!r->fields)
        return bfs_errf(-ENOMEM, err, errlen, "out of memory");
    if (in->version < 3) {
        bfs_field *f = &r->fields[0];
        int tok = (in->flags & BFS_DS_HAS_TOKENS) != 0;
        strcpy(f->name, tok ? "tokens" : "images");
        f->kind = tok ? BFS_FIELD_TOKENS : BFS_FIELD_IMAGE;
        f->dtype = tok ? BFS_FDT_U16 : BFS_FDT_U8; /* (u16 or u32 per sample: flag bit 12) */
        f->flags = tok ? BFS_FIELDF_VARIABLE : 0;
        f->follows = BFS_FIELD_NONE;
        f->max_count = UINT32_MAX;
        return 0;
    }
    const uint8_t *t = at(r, in->field_table_offset);
    if (bfs_ld32(t) != n || bfs_ld32(t + 4) != BFS_FIELD_DESC)
        return bfs_errf(BFS_E_LAYOUT, err, errlen,
                        "field table says %u fields of %u bytes; the sample record size says %u "
                        "of %u",
                        bfs_ld32(t), bfs_ld32(t + 4), n, BFS_FIELD_DESC);
    for (uint32_t k = 0; k < n; k++) {
        const uint8_t *d = t + 8 + (uint64_t)BFS_FIELD_DESC * k;
        bfs_field *f = &r->fields[k];
        memcpy(f->name, d, 32);
        size_t nl = strnlen(f->name, 32);
        int pad_ok = nl < 32 && bfs_ld32(d + 52) == 0;
        for (size_t b = nl; b < 32 && pad_ok; b++)
            pad_ok = d[b] == 0;
        f->name[BFS_FIELD_NAME_MAX] = '\0';
        f->kind = d[32];
        f->dtype = d[33];
        f->flags = d[34];
        f->rank = d[35];
        for (int j = 0; j < 3; j++)
            f->shape[j] = bfs_ld32(d + 36 + 4 * j);
        f->follows = bfs_ld32(d + 48);
        f->max_count = bfs_ld64(d + 56);
        char why[160];
        if (!pad_ok)
            return bfs_errf(BFS_E_LAYOUT, err, errlen,
                            "field %u: name not NUL-padded, or reserved bytes not zero", k);
        if (bfs_field_check(f, k, n, why, sizeof why))
            return bfs_errf(BFS_E_LAYOUT, err, errlen, "field table: %s", why);
        if (f->follows != BFS_FIELD_NONE && r->fields[f->follows].kind != BFS_FIELD_BOXES)
            return bfs_errf(BFS_E_LAYOUT, err, errlen,
                            "field table: field %u (%s) follows field %u, which is not boxes", k,
                            f->name, f->follows);
        if (f->max_count > UINT32_MAX)
            return bfs_errf(BFS_E_LAYOUT, err, errlen,
                            "field table: field %u (%s) has a largest count over 2^32", k, f->name);
        for (uint32_t j = 0; j < k; j++)
            if (!strcmp(r->fields[j].name, f->name))
                return bfs_errf(BFS_E_LAYOUT, err, errlen,
                                "field table: fields %u and %u are both named %s", j, k, f->name);
    }
    return 0;
}

static int open_common(bfs_reader *r, bfs_reader **out, char *err, size_t errlen)
{
    int rc = parse_header(r, err, errlen);
    if (rc)
        return rc;
    size_t words = (size_t)((r->info.page_count + 63) / 64);
    r->verified = calloc(words ? words : 1, sizeof *r->verified);
    if (!r->verified)
        return bfs_errf(-ENOMEM, err, errlen, "out of memory");
    *out = r;
    return 0;
}

int bfs_open_mem(const void *data, size_t len, bfs_reader **out, char *err, size_t errlen)
{
    *out = NULL;
    bfs_reader *r = calloc(1, sizeof *r);
    uint8_t *hdr = r ? calloc(1, BFS_HEADER_SIZE) : NULL;
    if (!hdr) {
        free(r);
        return bfs_errf(-ENOMEM, err, errlen, "out of memory");
    }
    if (len)
        memcpy(hdr, data, len < BFS_HEADER_SIZE ? len : BFS_HEADER_SIZE);
    r->own = hdr;
    r->hdr = hdr;
    r->base = data;
    r->len = len;
    r->fd = -1;
    int rc = open_common(r, out, err, errlen);
    if (rc) {
        bfs_close(r);
        return rc;
    }
    r->tail_off = r->info.sample_table_offset;
    r->tail = r->base + r->tail_off;
    if ((rc = parse_fields(r, err, errlen))) {
        *out = NULL;
        bfs_close(r);
        return rc;
    }
    return 0;
}

/* pread exactly len bytes at off; a file that ends early gives BFS_E_CHANGED when it is
 * no longer the file opened, else -EIO. */
static int pread_all(const bfs_reader *r, void *buf, size_t len, uint64_t off);

/* The prefetcher's reads: an object's bytes (bfs_prefetch_read_fn). */
static int object_read(void *obj, void *buf, size_t len, uint64_t off)
{
    return bfs_object_read(obj, buf, len, off);
}

int bfs_open(const char *path, bfs_reader **out, char *err, size_t errlen)
{
    char why[384] = "";
    *out = NULL;
    struct stat st;
    memset(&st, 0, sizeof st);
    bfs_object *obj = NULL;
    int fd = -1;
    if (bfs_fetch_is_remote(path)) {
        int orc = bfs_object_open(path, &obj, err, errlen); /* its message names the URL */
        if (orc)
            return orc;
        st.st_size = (off_t)bfs_object_size(obj);
    } else if ((fd = bfs_open_regular(path, &st)) < 0)
        return bfs_errf(fd, err, errlen, "%s: %s", path, bfs_strerror(fd));
    bfs_reader *r = calloc(1, sizeof *r);
    uint8_t *hdr = r ? calloc(1, BFS_HEADER_SIZE) : NULL;
    if (!hdr) {
        free(r);
        if (fd >= 0)
            close(fd);
        bfs_object_close(obj);
        return bfs_errf(-ENOMEM, err, errlen, "out of memory");
    }
    r->fd = fd;
    r->obj = obj;
    if (obj) { /* none (out of memory, no source_cache): reads fetch themselves */
        bfs_prefetch_create(object_read, obj, &r->pf);
        r->sc = bfs_srcfile_open(bfs_object_identity(obj), bfs_object_size(obj));
    }
    r->id = st;
    r->len = (size_t)st.st_size;
    r->hdr = r->own = hdr;
    size_t hl = r->len < BFS_HEADER_SIZE ? r->len : BFS_HEADER_SIZE;
    /* a remote file's header and tables from source_cache when they pass their checksums
     * (a mount after the first costs one request at open, not three) */
    int cached = hl == BFS_HEADER_SIZE && bfs_srcfile_read(r->sc, hdr, hl, 0) == 1 &&
                 bfs_xxh64(hdr, 120, 0) == bfs_ld64(hdr + 120);
    int rc = cached ? 0 : pread_all(r, hdr, hl, 0);
    if (rc)
        snprintf(why, sizeof why, "reading the header: %s%s%s", bfs_strerror(rc), obj ? ": " : "",
                 obj ? bfs_fetch_reason() : "");
    else
        rc = open_common(r, out, why, sizeof why);
    if (!rc) {
        /* The tables are copied, not mapped: nothing the daemon reads can raise SIGBUS
         * when the file is truncated or overwritten underneath (32 bytes per sample of
         * memory, read once at open: bfs_verify_tables reads them all anyway). */
        r->tail_off = r->info.sample_table_offset;
        size_t n = (size_t)(r->info.file_size - r->tail_off);
        uint8_t *own = malloc(BFS_HEADER_SIZE + n);
        if (!own) {
            rc = -ENOMEM;
            snprintf(why, sizeof why, "out of memory for its %zu bytes of tables", n);
        } else {
            memcpy(own, hdr, BFS_HEADER_SIZE);
            free(hdr);
            r->own = own;
            r->hdr = own;
            r->tail = own + BFS_HEADER_SIZE;
            if (cached && bfs_srcfile_read(r->sc, own + BFS_HEADER_SIZE, n, r->tail_off) == 1 &&
                bfs_verify_tables(r) == 0) {
                r->tables_ok = 1;
            } else {
                cached = 0;
                if ((rc = pread_all(r, own + BFS_HEADER_SIZE, n, r->tail_off)))
                    snprintf(why, sizeof why, "reading the tables: %s%s%s", bfs_strerror(rc),
                             obj ? ": " : "", obj ? bfs_fetch_reason() : "");
            }
            if (!rc)
                rc = parse_fields(r, why, sizeof why);
            if (!rc && fd >= 0)
                r->sample_ok = alloc_sample_ok(r);
            if (!rc && r->sc && !cached && bfs_verify_tables(r) == 0) {
                r->tables_ok = 1;
                bfs_srcfile_write(r->sc, own, BFS_HEADER_SIZE, 0);
                bfs_srcfile_write(r->sc, own + BFS_HEADER_SIZE, n, r->tail_off);
            }
        }
    }
    if (rc) {
        *out = NULL;
        bfs_close(r);
        return bfs_errf(rc, err, errlen, "%s: %s", path, why);
    }
    return 0;
}

void bfs_close(bfs_reader *r)
{
    if (!r)
        return;
    free(r->own);
    if (r->map)
        munmap((void *)r->map, r->len);
    if (r->fd >= 0)
        close(r->fd);
    bfs_prefetch_destroy(r->pf); /* before its object */
    bfs_srcfile_close(r->sc);
    bfs_object_close(r->obj);
    free(r->verified);
    free(r->sample_ok);
    free(r->fields);
    free(r);
}

const bfs_info *bfs_get_info(const bfs_reader *r)
{
    return &r->info;
}

/* Sample i's image record at e (field 0, or an image field f > 0: label slot 0, and
 * all zero when the field is optional and the sample has none). */
static int check_image(const bfs_reader *r, const bfs_field *fd, uint32_t f, bfs_sample *s)
{
    if (f > 0 && s->length == 0 && (fd->flags & BFS_FIELDF_OPTIONAL) && !s->offset && !s->label &&
        !s->width && !s->height && !s->flags && !s->checksum && !s->raw_size)
        return 0; /* no image */
    uint16_t kind = s->flags & BFS_KIND_MASK;
    if (s->length == 0 || !region_ok(s->offset, s->length, r->info.heap_size) ||
        (r->info.version >= 3 && s->length > fd->max_count))
        return BFS_E_SAMPLE_RANGE;
    if (kind == BFS_KIND_TOKENS || s->width == 0 || s->height == 0 || (s->flags & BFS_F_TOKENS_U32))
        return BFS_E_SAMPLE_RANGE;
    if (kind == BFS_KIND_CODEC) { /* PNG or WebP: only its kind and which */
        if (r->info.version < 3 || (s->flags & ~(BFS_KIND_MASK | BFS_F_WEBP)) || s->raw_size)
            return BFS_E_SAMPLE_RANGE;
    } else if (s->flags & BFS_F_WEBP) {
        return BFS_E_SAMPLE_RANGE;
    }
    if (kind == BFS_KIND_RAW && (uint64_t)s->raw_size != (uint64_t)s->width * s->height * 3u)
        return BFS_E_SAMPLE_RANGE;
    if (f > 0)
        return s->label ? BFS_E_SAMPLE_RANGE : 0;
    return s->label >= r->info.class_count ? BFS_E_LABEL : 0;
}

/* A non-image value's record against its declaration. */
static int check_value(const bfs_reader *r, const bfs_field *fd, const uint8_t *rec, bfs_sample *s)
{
    if (s->label || s->width || s->height || s->flags)
        return BFS_E_SAMPLE_RANGE;
    if (s->length == 0) /* no value (or an empty one) */
        return s->offset || s->raw_size || s->checksum ? BFS_E_SAMPLE_RANGE : 0;
    uint64_t per = 1; /* elements of one row (variable) or of the value (fixed) */
    for (unsigned k = 0; k < fd->rank; k++)
        per *= fd->shape[k];
    if (!region_ok(s->offset, s->length, r->info.heap_size) ||
        (uint64_t)s->raw_size * bfs_fdt_size(fd->dtype) != s->length ||
        s->raw_size > fd->max_count ||
        ((fd->flags & BFS_FIELDF_VARIABLE) ? s->raw_size % per != 0 : s->raw_size != per))
        return BFS_E_SAMPLE_RANGE;
    if (fd->follows != BFS_FIELD_NONE) { /* one value per box */
        const uint8_t *b = rec + (size_t)BFS_SAMPLE_RECORD * fd->follows;
        if ((uint64_t)s->raw_size * 4 != bfs_ld32(b + 28))
            return BFS_E_SAMPLE_RANGE;
    }
    return 0;
}

int bfs_get_value(const bfs_reader *r, uint64_t i, uint32_t f, bfs_sample *s)
{
    if (i >= r->info.sample_count || f >= r->info.field_count)
        return BFS_E_SAMPLE_INDEX;
    const uint8_t *rec = at(r, r->info.sample_table_offset) + i * r->info.sample_record_size;
    const uint8_t *e = rec + (size_t)BFS_SAMPLE_RECORD * f;
    s->offset = bfs_ld64(e);
    s->length = bfs_ld32(e + 8);
    s->label = bfs_ld32(e + 12);
    s->width = bfs_ld16(e + 16);
    s->height = bfs_ld16(e + 18);
    s->flags = bfs_ld16(e + 20);
    s->checksum = bfs_ld32(e + 24);
    s->raw_size = bfs_ld32(e + 28);
    if ((s->flags & ~BFS_FLAGS_KNOWN) || bfs_ld16(e + 22) != 0)
        return BFS_E_SAMPLE_RANGE;
    const bfs_field *fd = &r->fields[f];
    if (fd->kind == BFS_FIELD_IMAGE)
        return check_image(r, fd, f, s);
    if (r->info.version >= 3)
        return check_value(r, fd, rec, s);
    /* version 2: token ids: no image fields, length = count x token size */
    uint64_t size = s->flags & BFS_F_TOKENS_U32 ? 4 : 2;
    if (s->length == 0 || !region_ok(s->offset, s->length, r->info.heap_size) ||
        (s->flags & BFS_KIND_MASK) != BFS_KIND_TOKENS ||
        (s->flags & ~(BFS_KIND_MASK | BFS_F_TOKENS_U32)) || s->width || s->height ||
        s->raw_size == 0 || (uint64_t)s->raw_size * size != s->length)
        return BFS_E_SAMPLE_RANGE;
    return s->label >= r->info.class_count ? BFS_E_LABEL : 0;
}

int bfs_get_sample(const bfs_reader *r, uint64_t i, bfs_sample *s)
{
    return bfs_get_value(r, i, 0, s);
}

uint32_t bfs_field_count(const bfs_reader *r)
{
    return r->info.field_count;
}

const bfs_field *bfs_get_field(const bfs_reader *r, uint32_t f)
{
    return f < r->info.field_count ? &r->fields[f] : NULL;
}

void bfs_page_range(const bfs_reader *r, uint64_t p, uint64_t *begin, uint64_t *end)
{
    uint64_t ps = r->info.page_size;
    *begin = p * ps;
    *end = *begin + ps < r->info.heap_size ? *begin + ps : r->info.heap_size;
}

int bfs_verify_page(bfs_reader *r, uint64_t p)
{
    if (p >= r->info.page_count)
        return BFS_E_SAMPLE_INDEX;
    if (bit_test(r->verified, p))
        return 0;
    uint64_t b, e, got;
    bfs_page_range(r, p, &b, &e);
    uint64_t want = bfs_ld64(at(r, r->info.page_table_offset) + p * 8);
    if (r->base) {
        got = bfs_xxh64(r->base + r->info.heap_offset + b, (size_t)(e - b), 0);
    } else {
        /* read in pieces: a page may be up to 1 GiB */
        size_t chunk = e - b < (1u << 20) ? (size_t)(e - b) : (1u << 20);
        uint8_t *buf = malloc(chunk);
        if (!buf)
            return -ENOMEM;
        bfs_xxh64_state st;
        bfs_xxh64_init(&st, 0);
        int rc = 0;
        for (uint64_t o = b; o < e && !rc; o += chunk) {
            size_t n = e - o < chunk ? (size_t)(e - o) : chunk;
            if (!(rc = pread_all(r, buf, n, r->info.heap_offset + o)))
                bfs_xxh64_update(&st, buf, n);
        }
        free(buf);
        if (rc)
            return rc;
        got = bfs_xxh64_digest(&st);
    }
    if (got != want)
        return BFS_E_PAGE_CHECKSUM;
    bit_set(r->verified, p);
    return 0;
}

int bfs_value_data(bfs_reader *r, uint64_t i, uint32_t f, unsigned verify, bfs_sample *s,
                   const uint8_t **data, size_t *len)
{
    bfs_sample tmp;
    if (!s)
        s = &tmp;
    const uint8_t *image = r->base ? r->base : r->map;
    if (!image)
        return -ENOTSUP;
    int rc = bfs_get_value(r, i, f, s);
    if (rc)
        return rc;
    if (s->length == 0) { /* no value */
        *data = NULL;
        *len = 0;
        return 0;
    }
    const uint8_t *p = image + r->info.heap_offset + s->offset;
    if (verify & BFS_VERIFY_PAGES) {
        uint64_t ps = r->info.page_size;
        for (uint64_t pg = s->offset / ps; pg <= (s->offset + s->length - 1) / ps; pg++)
            if ((rc = bfs_verify_page(r, pg)))
                return rc;
    }
    uint64_t bit = i * r->info.field_count + f;
    if ((verify & BFS_VERIFY_SAMPLE) && !(r->sample_ok && bit_test(r->sample_ok, bit))) {
        if ((uint32_t)bfs_xxh64(p, s->length, 0) != s->checksum)
            return BFS_E_SAMPLE_CHECKSUM;
        if (r->sample_ok)
            bit_set(r->sample_ok, bit);
    }
    *data = p;
    *len = s->length;
    return 0;
}

void bfs_value_prefetch(const bfs_reader *r, uint64_t i, uint32_t f, size_t bytes)
{
    const uint8_t *image = r->base ? r->base : r->map;
    if (!image || i >= r->info.sample_count || f >= r->info.field_count)
        return;
    const uint8_t *e = at(r, r->info.sample_table_offset) + i * r->info.sample_record_size +
                       (size_t)BFS_SAMPLE_RECORD * f;
    if (!bytes) {
        __builtin_prefetch(e);
        return;
    }
    uint64_t off = bfs_ld64(e), len = bfs_ld32(e + 8);
    if (!region_ok(off, len, r->info.heap_size))
        return;
    const uint8_t *p = image + r->info.heap_offset + off;
    if (len > bytes)
        len = bytes;
    for (uint64_t k = 0; k < len; k += 64)
        __builtin_prefetch(p + k);
}

int bfs_sample_data(bfs_reader *r, uint64_t i, unsigned verify, bfs_sample *s, const uint8_t **data,
                    size_t *len)
{
    return bfs_value_data(r, i, 0, verify, s, data, len);
}

/* 0 while the open file is the one opened (same inode, size, mtime and ctime),
 * BFS_E_CHANGED once it was overwritten or truncated in place. The ctime is what a writer
 * cannot keep: `rsync --inplace`, `cp --preserve=timestamps` and `touch -r` restore the
 * size and mtime of a file whose bytes they changed, but any write (and that very
 * restoring) sets the ctime to now. A link count that changed with it explains it without
 * a write: a file replaced by a rename (link count 0: the reader keeps the old inode,
 * whose bytes no path reaches any more) or given another hard link is not "changed". A
 * chmod or chown sets the ctime too: such a file counts as changed, which is safe (its
 * batches fail; nothing wrong is served). */
static int unchanged(const bfs_reader *r)
{
    if (r->fd < 0)
        return 0; /* a memory image */
    struct stat st;
    if (fstat(r->fd, &st) < 0)
        return -errno;
    if (st.st_ino != r->id.st_ino || st.st_dev != r->id.st_dev || st.st_size != r->id.st_size ||
        st.st_mtim.tv_sec != r->id.st_mtim.tv_sec || st.st_mtim.tv_nsec != r->id.st_mtim.tv_nsec)
        return BFS_E_CHANGED;
    if ((st.st_ctim.tv_sec != r->id.st_ctim.tv_sec ||
         st.st_ctim.tv_nsec != r->id.st_ctim.tv_nsec) &&
        st.st_nlink == r->id.st_nlink)
        return BFS_E_CHANGED;
    return 0;
}

static int pread_all(const bfs_reader *r, void *buf, size_t len, uint64_t off)
{
    if (r->obj) { /* a remote file: the object as opened, or an error */
        int rc = bfs_object_read(r->obj, buf, len, off);
        return rc == 0 || rc == BFS_E_CHANGED || bfs_err_is_resource(rc) ? rc : BFS_E_FETCH;
    }
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(r->fd, (uint8_t *)buf + got, len - got, (off_t)(off + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int rc = n < 0 ? -errno : -EIO;
            int ch = unchanged(r);
            return ch == BFS_E_CHANGED ? ch : rc;
        }
        got += (size_t)n;
    }
    return 0;
}

int bfs_read_value(const bfs_reader *r, uint64_t i, uint32_t f, unsigned verify, bfs_sample *s,
                   uint8_t *buf, size_t cap)
{
    int rc = bfs_get_value(r, i, f, s);
    if (rc)
        return rc;
    if (s->length == 0)
        return 0; /* no value */
    if (cap < s->length)
        return -ENOSPC;
    uint64_t off = r->info.heap_offset + s->offset;
    if (r->base) {
        memcpy(buf, r->base + off, s->length);
    } else if (r->obj) {
        int verified = verify & BFS_VERIFY_SAMPLE;
        /* the host's source_cache, when it holds the bytes and they pass the checksum
         * (a torn or missing write does not: then fetched) */
        if (verified && bfs_srcfile_read(r->sc, buf, s->length, off) == 1 &&
            (uint32_t)bfs_xxh64(buf, s->length, 0) == s->checksum)
            return 0;
        /* fetched ahead (bfs_advise_samples), or read here; a prefetch that failed is
         * read again here, whose error is the one reported */
        int got = r->pf ? bfs_prefetch_take(r->pf, off, buf, s->length) : 0;
        if (got != 1 && (rc = pread_all(r, buf, s->length, off)))
            return rc;
        if (!verified)
            return 0;
        /* a checksum that fails on the wire is read once more before the sample is bad */
        if ((uint32_t)bfs_xxh64(buf, s->length, 0) != s->checksum &&
            ((rc = pread_all(r, buf, s->length, off)) ||
             (uint32_t)bfs_xxh64(buf, s->length, 0) != s->checksum))
            return rc ? rc : BFS_E_SAMPLE_CHECKSUM;
        bfs_srcfile_write(r->sc, buf, s->length, off); /* only bytes that passed */
        return 0;
    } else {
        if ((rc = pread_all(r, buf, s->length, off)))
            return rc;
        /* after the read: bytes written in place before it are caught here (one fstat,
         * ~0.3 us, against ~1 ms to decode the sample) */
        if ((rc = unchanged(r)))
            return rc;
        /* verified once, as through a mapping (bfs_map_payloads): the file's bytes change
         * only with its identity, which was checked just now (the hash was ~1.4% of an
         * image worker's CPU, each epoch) */
        uint64_t bit = i * r->info.field_count + f;
        if (!(verify & BFS_VERIFY_SAMPLE) || (r->sample_ok && bit_test(r->sample_ok, bit)))
            return 0;
        if ((uint32_t)bfs_xxh64(buf, s->length, 0) != s->checksum)
            return BFS_E_SAMPLE_CHECKSUM;
        if (r->sample_ok)
            bit_set(r->sample_ok, bit);
        return 0;
    }
    if ((verify & BFS_VERIFY_SAMPLE) && (uint32_t)bfs_xxh64(buf, s->length, 0) != s->checksum)
        return BFS_E_SAMPLE_CHECKSUM;
    return 0;
}

int bfs_read_sample(const bfs_reader *r, uint64_t i, unsigned verify, bfs_sample *s, uint8_t *buf,
                    size_t cap)
{
    return bfs_read_value(r, i, 0, verify, s, buf, cap);
}

int bfs_unchanged(const bfs_reader *r)
{
    return unchanged(r);
}

int bfs_map_payloads(bfs_reader *r)
{
    if (r->base || r->map || r->len == 0)
        return 0;
    if (r->obj)
        return -ENOTSUP; /* a remote file: its callers read with pread (bfs_read_value) */
    /* the file as opened, validated against its size then: a later truncation shows as
     * SIGBUS in the caller's guard, an overwrite by bfs_unchanged (and as checksum errors
     * of samples not verified yet) */
    void *p = mmap(NULL, r->len, PROT_READ, MAP_SHARED, r->fd, 0);
    if (p == MAP_FAILED)
        return -errno;
    r->map = p;
    /* Each sample's checksum verified once: a token row takes slices of documents, and
     * hashing every document it touches, whole, was a third of a concat mount's CPU (a
     * document of 8 rows was hashed 8 times). The mapping's bytes change only when the
     * file changes in place, which bfs_unchanged catches. Without the memory for it (a
     * bit per sample), every read is verified. */
    if (!r->sample_ok)
        r->sample_ok = alloc_sample_ok(r);
    return 0;
}

int bfs_verify_tables(const bfs_reader *r)
{
    if (r->tables_ok)
        return 0;
    const bfs_info *in = &r->info;
    bfs_xxh64_state st;
    bfs_xxh64_init(&st, 0);
    bfs_xxh64_update(&st, at(r, in->sample_table_offset),
                     in->sample_count * in->sample_record_size);
    bfs_xxh64_update(&st, at(r, in->class_table_offset), in->class_table_size);
    if (in->field_table_size)
        bfs_xxh64_update(&st, at(r, in->field_table_offset), in->field_table_size);
    bfs_xxh64_update(&st, at(r, in->page_table_offset), in->page_count * 8);
    return bfs_xxh64_digest(&st) == in->tables_checksum ? 0 : BFS_E_TABLE_CHECKSUM;
}

int bfs_class_name(const bfs_reader *r, uint32_t c, const char **name, size_t *len)
{
    if (c >= r->info.class_count)
        return BFS_E_SAMPLE_INDEX;
    const uint8_t *t = at(r, r->info.class_table_offset);
    uint64_t size = r->info.class_table_size;
    uint32_t off = bfs_ld32(t + (uint64_t)c * 8), n = bfs_ld32(t + (uint64_t)c * 8 + 4);
    uint64_t names = (uint64_t)r->info.class_count * 8;
    /* the name and its NUL inside the blob after the entries; no NUL inside the name */
    if (off < names || n == 0 || n > BFS_MAX_CLASS_NAME || !region_ok(off, (uint64_t)n + 1, size) ||
        t[off + n] != 0 || memchr(t + off, 0, n))
        return BFS_E_CLASS_NAME;
    *name = (const char *)t + off;
    if (len)
        *len = n;
    return 0;
}

int bfs_reader_remote(const bfs_reader *r)
{
    return r->obj != NULL;
}

void bfs_advise_samples(const bfs_reader *r, const uint64_t *idx, uint32_t n)
{
    /* BATCHFS_NO_READAHEAD=1: off, for A/B measurements (tests/bench/bench_cold.sh);
     * workers call this concurrently, all storing the same value */
    static _Atomic int off = -1;
    int o = atomic_load_explicit(&off, memory_order_relaxed);
    if (o < 0)
        atomic_store_explicit(&off, o = getenv("BATCHFS_NO_READAHEAD") != NULL,
                              memory_order_relaxed);
    if (r->pf && !o) { /* a remote file: every field's value fetched by its prefetcher */
        uint32_t nf = r->info.field_count ? r->info.field_count : 1;
        size_t cap = (size_t)n * nf;
        uint64_t *at = malloc(cap * sizeof *at);
        uint32_t *len = malloc(cap * sizeof *len);
        uint32_t m = 0;
        for (uint32_t j = 0; at && len && j < n; j++)
            for (uint32_t f = 0; f < nf; f++) {
                bfs_sample s; /* (what source_cache holds is read from there, not fetched) */
                if (bfs_get_value(r, idx[j], f, &s) == 0 && s.length &&
                    !bfs_srcfile_present(r->sc, r->info.heap_offset + s.offset, s.length))
                    at[m] = r->info.heap_offset + s.offset, len[m++] = (uint32_t)s.length;
            }
        if (m)
            bfs_prefetch_want(r->pf, at, len, m);
        free(at);
        free(len);
        return;
    }
    if (r->fd < 0 || o)
        return;
    for (uint32_t j = 0; j < n; j++) {
        bfs_sample s;
        if (bfs_get_sample(r, idx[j], &s) == 0)
            posix_fadvise(r->fd, (off_t)(r->info.heap_offset + s.offset), s.length,
                          POSIX_FADV_WILLNEED);
    }
}
