/*
 * dataset_api.c — the .bfs dataset files as engine/api.h offers them (mkbatchfs): packing
 * and tokenizing through engine/dataset/'s packer, and the inspector (--info, --cat,
 * --verify) over its reader and image probes.
 *
 * The dataset layer sits below the engine's top folder and cannot include api.h, so this
 * file is the seam: it converts api.h's bfs_dataset_pack_opts, _tokenize_opts and _report
 * to and from pack.h's structs, passes the engine's resampler (bfs_engine_pack_resize,
 * engine.c) to the packer, and checks at compile time that api.h's BFS_DATASET_*
 * constants equal the dataset layer's. Nothing here changes what is packed: the options
 * reach the packer as they are, so files are byte-identical to a direct call's.
 */
#include "engine/api.h"
#include "engine/engine.h"
#include "engine/dataset/bfs.h"
#include "engine/dataset/image.h"
#include "engine/dataset/jpeg.h"
#include "engine/dataset/pack.h"
#include "engine/dataset/record.h"
#include "engine/dataset/shard.h"
#include "base/err.h"

#include <errno.h>
#include <lz4.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

_Static_assert(BFS_DATASET_VERSION_MIN == BFS_VERSION_MIN && BFS_DATASET_VERSION == BFS_VERSION,
               "api.h's .bfs versions are bfs.h's");
_Static_assert(BFS_DATASET_PAGE_SIZE_MIN == BFS_PAGE_SIZE_MIN &&
                   BFS_DATASET_PAGE_SIZE_MAX == BFS_PAGE_SIZE_MAX,
               "api.h's page sizes are bfs.h's");
_Static_assert(BFS_DATASET_FIELDS_MAX == BFS_FIELD_MAX &&
                   BFS_DATASET_FIELD_NAME_MAX == BFS_FIELD_NAME_MAX,
               "api.h's field limits are bfs.h's");
_Static_assert((int)BFS_DATASET_TOKENS_FLAT == BFS_TOKENS_FLAT &&
                   (int)BFS_DATASET_TOKENS_NPY == BFS_TOKENS_NPY &&
                   (int)BFS_DATASET_TOKENS_MEGATRON == BFS_TOKENS_MEGATRON,
               "api.h's token formats are pack.h's");
_Static_assert((int)BFS_DATASET_FORMAT_AUTO == BFS_FORMAT_AUTO &&
                   (int)BFS_DATASET_FORMAT_WEBDATASET == BFS_FORMAT_WEBDATASET &&
                   (int)BFS_DATASET_FORMAT_TFRECORD == BFS_FORMAT_TFRECORD &&
                   (int)BFS_DATASET_FORMAT_MANIFEST == BFS_FORMAT_MANIFEST,
               "api.h's source formats are shard.h's");

/* ---- packing -------------------------------------------------------------------------- */

int bfs_dataset_field_parse(const char *arg, char *name, size_t namelen, char *err, size_t errlen)
{
    bfs_field_spec s;
    int rc = bfs_field_spec_parse(arg, &s, err, errlen);
    if (rc)
        return rc;
    snprintf(name, namelen, "%s", s.name);
    return 0;
}

/* api.h's options as the packer's; the --field arguments parsed into specs (the caller's,
 * o->nfields of them, at most BFS_FIELD_MAX + 1). Returns 0 or -EINVAL (too many fields,
 * or bfs_field_spec_parse's). */
static int to_pack_opts(const bfs_dataset_pack_opts *o, bfs_pack_opts *p, bfs_field_spec *specs,
                        char *err, size_t errlen)
{
    if (o->nfields > BFS_FIELD_MAX + 1)
        return bfs_errf(-EINVAL, err, errlen, "at most %u fields and a label", BFS_FIELD_MAX);
    *p = (bfs_pack_opts){
        .jobs = o->jobs,
        .max_side = o->max_side,
        .resize = bfs_engine_pack_resize, /* the packer has no resampler of its own */
        .quality = o->quality,
        .raw = o->raw,
        .restart = o->restart,
        .strict = o->strict,
        .fsync = o->fsync,
        .page_size = o->page_size,
        .progress = o->progress,
        .progress_out = o->progress_out,
        .tokens = o->tokens,
        .doc_sep = o->doc_sep,
        .token_format = o->token_format,
        .offsets = o->offsets,
        .format = o->format,
        .image_key = o->image_key,
        .label_key = o->label_key,
        .image_only = o->image_only,
    };
    for (size_t k = 0; k < o->nfields; k++) {
        int rc = bfs_field_spec_parse(o->fields[k], &specs[k], err, errlen);
        if (rc)
            return rc;
    }
    p->fields = o->nfields ? specs : NULL;
    p->nfields = o->nfields;
    return 0;
}

/* The packer's report as api.h's; the skip list's strings change owner, rep keeps none. */
static int from_pack_report(bfs_pack_report *r, bfs_dataset_report *out)
{
    *out = (bfs_dataset_report){
        .files = r->files,
        .packed = r->packed,
        .reencoded = r->reencoded,
        .restarted = r->restarted,
        .classes = r->classes,
        .bytes_in = r->bytes_in,
        .bytes_out = r->bytes_out,
        .seconds = r->seconds,
        .ignored = r->ignored,
        .tokens = r->tokens,
        .longest = r->longest,
        .token_size = r->token_size,
        .format = r->format,
        .shards = r->shards,
        .extra = r->extra,
        .nfields = r->nfields,
    };
    memcpy(out->notes, r->notes, sizeof out->notes);
    memcpy(out->fields, r->fields, sizeof out->fields);
    _Static_assert(sizeof out->notes == sizeof r->notes && sizeof out->fields == sizeof r->fields,
                   "the reports' texts have one size");
    if (!r->nskipped)
        return 0;
    if (!(out->skipped = calloc(r->nskipped, sizeof *out->skipped)))
        return -ENOMEM;
    for (uint64_t i = 0; i < r->nskipped; i++) {
        out->skipped[i] =
            (bfs_dataset_skip){.path = r->skipped[i].path, .reason = r->skipped[i].reason};
        r->skipped[i].path = r->skipped[i].reason = NULL;
    }
    out->nskipped = r->nskipped;
    return 0;
}

int bfs_dataset_pack(const char *const *srcs, size_t nsrcs, const char *out,
                     const bfs_dataset_pack_opts *o, bfs_dataset_report *rep, _Atomic int *cancel,
                     char *err, size_t errlen)
{
    bfs_field_spec specs[BFS_FIELD_MAX + 1];
    bfs_pack_opts p;
    bfs_pack_report r;
    memset(rep, 0, sizeof *rep);
    memset(&r, 0, sizeof r);
    int rc = to_pack_opts(o, &p, specs, err, errlen);
    if (rc)
        return rc;
    rc = bfs_pack_sources(srcs, nsrcs, out, &p, &r, cancel, err, errlen);
    int crc = from_pack_report(&r, rep);
    bfs_pack_report_free(&r);
    return rc ? rc : crc;
}

int bfs_dataset_tokenize(const char *src, const char *out, const bfs_dataset_tokenize_opts *t,
                         const bfs_dataset_pack_opts *o, bfs_dataset_report *rep,
                         _Atomic int *cancel, char *err, size_t errlen)
{
    bfs_field_spec specs[BFS_FIELD_MAX + 1];
    bfs_pack_opts p;
    bfs_pack_report r;
    memset(rep, 0, sizeof *rep);
    memset(&r, 0, sizeof r);
    int rc = to_pack_opts(o, &p, specs, err, errlen);
    if (rc)
        return rc;
    bfs_tokenize_opts to = {.field = t->field,
                            .out_field = t->out_field,
                            .vocab = t->vocab,
                            .fn = t->fn,
                            .ctx = t->ctx};
    rc = bfs_pack_tokenize(src, out, &to, &p, &r, cancel, err, errlen);
    int crc = from_pack_report(&r, rep);
    bfs_pack_report_free(&r);
    return rc ? rc : crc;
}

const char *bfs_dataset_temp_path(void)
{
    return bfs_pack_temp_path();
}

void bfs_dataset_report_free(bfs_dataset_report *rep)
{
    if (!rep)
        return;
    for (uint64_t i = 0; i < rep->nskipped; i++) {
        free(rep->skipped[i].path);
        free(rep->skipped[i].reason);
    }
    free(rep->skipped);
    rep->skipped = NULL;
    rep->nskipped = 0;
}

/* ---- the inspector -------------------------------------------------------------------- */

int bfs_dataset_open_check(const char *path, char *err, size_t errlen)
{
    bfs_reader *r;
    int rc = bfs_open(path, &r, err, errlen);
    if (!rc)
        bfs_close(r);
    return rc;
}

/* bfs_open, its message on msg. */
static int open_or_say(const char *prog, const char *path, bfs_reader **r, FILE *msg)
{
    char err[512];
    int rc = bfs_open(path, r, err, sizeof err);
    if (rc)
        fprintf(msg, "%s: %s\n", prog, err);
    return rc;
}

int bfs_dataset_describe(const char *prog, const char *path, FILE *out, FILE *msg)
{
    bfs_reader *r;
    int rc = open_or_say(prog, path, &r, msg);
    if (rc)
        return rc;
    const bfs_info *in = bfs_get_info(r);
    uint64_t kinds[3] = {0}, progressive = 0, gray = 0, cmyk = 0, odd = 0, bad = 0;
    uint64_t tokens = 0, tmin = UINT64_MAX, tmax = 0, u32 = 0, png = 0, webp = 0;
    uint64_t wsum = 0, hsum = 0, bytes = 0;
    int first_bad = 0;
    unsigned wmin = 65535, wmax = 0, hmin = 65535, hmax = 0;
    uint64_t *per_class = calloc(in->class_count, sizeof *per_class);
    if (!per_class) {
        bfs_close(r);
        fprintf(msg, "%s: out of memory\n", prog);
        return -ENOMEM;
    }
    for (uint64_t i = 0; i < in->sample_count; i++) {
        bfs_sample s;
        int src = bfs_get_sample(r, i, &s);
        if (src) {
            first_bad = first_bad ? first_bad : src;
            bad++;
            continue;
        }
        if ((s.flags & BFS_KIND_MASK) == BFS_KIND_TOKENS) {
            kinds[2]++, tokens += s.raw_size, u32 += !!(s.flags & BFS_F_TOKENS_U32);
            tmin = s.raw_size < tmin ? s.raw_size : tmin,
            tmax = s.raw_size > tmax ? s.raw_size : tmax;
            bytes += s.length;
            per_class[s.label]++;
            continue;
        }
        if ((s.flags & BFS_KIND_MASK) == BFS_KIND_CODEC)
            *(s.flags & BFS_F_WEBP ? &webp : &png) += 1;
        else
            kinds[(s.flags & BFS_KIND_MASK) == BFS_KIND_RAW]++;
        progressive += !!(s.flags & BFS_F_PROGRESSIVE);
        gray += (s.flags & BFS_COLOR_MASK) == BFS_COLOR_GRAY;
        cmyk += (s.flags & BFS_COLOR_MASK) == BFS_COLOR_CMYK;
        odd += !!(s.flags & BFS_F_ODD_SAMPLING);
        wsum += s.width, hsum += s.height, bytes += s.length;
        wmin = s.width < wmin ? s.width : wmin, wmax = s.width > wmax ? s.width : wmax;
        hmin = s.height < hmin ? s.height : hmin, hmax = s.height > hmax ? s.height : hmax;
        per_class[s.label]++;
    }
    uint64_t good = in->sample_count - bad;
    fprintf(out, "file:          %s\n", path);
    fprintf(out, "format:        batchfs dataset, version %u\n", in->version);
    if (kinds[2])
        fprintf(out, "samples:       %llu (%llu token sequences)\n",
                (unsigned long long)in->sample_count, (unsigned long long)kinds[2]);
    else if (png || webp)
        fprintf(out, "samples:       %llu (%llu jpeg, %llu raw, %llu png, %llu webp)\n",
                (unsigned long long)in->sample_count, (unsigned long long)kinds[0],
                (unsigned long long)kinds[1], (unsigned long long)png, (unsigned long long)webp);
    else
        fprintf(out, "samples:       %llu (%llu jpeg, %llu raw)\n",
                (unsigned long long)in->sample_count, (unsigned long long)kinds[0],
                (unsigned long long)kinds[1]);
    fprintf(out, "classes:       %u\n", in->class_count);
    if (kinds[2])
        fprintf(out, "tokens:        %llu (%s), %llu..%llu per sequence (mean %.1f)\n",
                (unsigned long long)tokens,
                u32 == kinds[2] ? "u32"
                : u32           ? "u16 and u32"
                                : "u16",
                (unsigned long long)tmin, (unsigned long long)tmax, (double)tokens / kinds[2]);
    else
        fprintf(out,
                "jpeg kinds:    %llu progressive, %llu grayscale, %llu cmyk, %llu odd sampling\n",
                (unsigned long long)progressive, (unsigned long long)gray, (unsigned long long)cmyk,
                (unsigned long long)odd);
    if (good && !kinds[2])
        fprintf(out, "image size:    width %u..%u (mean %.0f), height %u..%u (mean %.0f)\n", wmin,
                wmax, (double)wsum / good, hmin, hmax, (double)hsum / good);
    fprintf(out, "payload:       %.1f MB (mean %.1f KB per sample) in %llu page%s of %u KiB\n",
            bytes / 1e6, good ? bytes / 1e3 / good : 0.0, (unsigned long long)in->page_count,
            in->page_count == 1 ? "" : "s", in->page_size >> 10);
    fprintf(out, "file size:     %llu bytes\n", (unsigned long long)in->file_size);
    fprintf(out, "checksum:      %016llx (header)\n", (unsigned long long)in->header_checksum);
    if (bad)
        fprintf(out, "WARNING:       %llu sample entries are invalid (run --verify)\n",
                (unsigned long long)bad);
    /* fewer documents than rows of the default seq_len=1024 (the mount warns by its own
     * seq_len): pack=concat's shuffle of documents barely changes the rows */
    if (kinds[2] && kinds[2] < tokens / 1024)
        fprintf(out,
                "WARNING:       %llu document%s for %llu rows of 1024 tokens: pack=concat cuts "
                "each epoch's rows from at most %llu document%s and shuffles only their order, "
                "so rows repeat from epoch to epoch; mount with shuffle=rows to permute the "
                "rows (docs/sequences.md)\n",
                (unsigned long long)kinds[2], kinds[2] == 1 ? "" : "s",
                (unsigned long long)(tokens / 1024), (unsigned long long)kinds[2],
                kinds[2] == 1 ? "" : "s");
    uint32_t nf = bfs_field_count(r);
    if (in->version >= 3) { /* the fields: declaration, and what the samples hold */
        fprintf(out, "field  name                 kind    dtype  shape        optional  present  "
                     "bytes        max count\n");
        for (uint32_t f = 0; f < nf; f++) {
            const bfs_field *d = bfs_get_field(r, f);
            uint64_t present = 0, fbytes = 0;
            for (uint64_t i = 0; i < in->sample_count; i++) {
                bfs_sample s;
                if (bfs_get_value(r, i, f, &s) == 0 && s.length)
                    present++, fbytes += s.length;
            }
            char shape[48] = "";
            size_t k = 0;
            if (d->kind == BFS_FIELD_IMAGE)
                snprintf(shape, sizeof shape, "-");
            else {
                k += (size_t)snprintf(shape, sizeof shape, "%s",
                                      d->flags & BFS_FIELDF_VARIABLE ? "[*" : "[");
                for (unsigned j = 0; j < d->rank && k < sizeof shape; j++)
                    k += (size_t)snprintf(shape + k, sizeof shape - k, "%s%u",
                                          j || (d->flags & BFS_FIELDF_VARIABLE) ? "," : "",
                                          d->shape[j]);
                if (k < sizeof shape)
                    snprintf(shape + k, sizeof shape - k, "]");
            }
            char follows[48] = "";
            if (d->follows != BFS_FIELD_NONE && bfs_get_field(r, d->follows))
                snprintf(follows, sizeof follows, " (follows %s)",
                         bfs_get_field(r, d->follows)->name);
            fprintf(out, "%5u  %-20s %-7s %-6s %-12s %-9s %7llu  %-12llu %llu%s\n", f, d->name,
                    bfs_field_kind_name(d->kind), bfs_fdt_name(d->dtype), shape,
                    d->flags & BFS_FIELDF_OPTIONAL ? "yes" : "no", (unsigned long long)present,
                    (unsigned long long)fbytes, (unsigned long long)d->max_count, follows);
        }
    }
    fprintf(out, "class  samples  name\n");
    for (uint32_t c = 0; c < in->class_count; c++) {
        const char *name;
        if (bfs_class_name(r, c, &name, NULL))
            name = "<invalid class-name entry>";
        fprintf(out, "%5u  %7llu  %s\n", c, (unsigned long long)per_class[c], name);
    }
    free(per_class);
    bfs_close(r);
    return first_bad;
}

int bfs_dataset_cat(const char *prog, const char *path, uint64_t i, const char *field, int fd,
                    FILE *msg)
{
    bfs_reader *r;
    int rc = open_or_say(prog, path, &r, msg);
    if (rc)
        return rc;
    uint32_t f = 0, nf = bfs_field_count(r);
    if (field) {
        while (f < nf && strcmp(bfs_get_field(r, f)->name, field))
            f++;
        if (f == nf) {
            fprintf(msg, "%s: %s: no field '%s'; its fields:", prog, path, field);
            for (uint32_t k = 0; k < nf; k++)
                fprintf(msg, " %s", bfs_get_field(r, k)->name);
            fprintf(msg, "\n");
            bfs_close(r);
            return -ENOENT;
        }
    }
    uint8_t *buf = NULL;
    bfs_sample s;
    rc = bfs_read_value(r, i, f, BFS_VERIFY_SAMPLE, &s, NULL, 0);
    if (rc == -ENOSPC)
        rc = (buf = malloc(s.length))
                 ? bfs_read_value(r, i, f, BFS_VERIFY_SAMPLE, &s, buf, s.length)
                 : -ENOMEM;
    const uint8_t *data = buf;
    size_t len = rc ? 0 : s.length;
    if (rc == BFS_E_SAMPLE_INDEX)
        fprintf(msg, "%s: %s: sample %llu out of range (the file has %llu samples)\n", prog, path,
                (unsigned long long)i, (unsigned long long)bfs_get_info(r)->sample_count);
    else if (rc)
        fprintf(msg, "%s: %s: sample %llu: %s\n", prog, path, (unsigned long long)i,
                bfs_strerror(rc));
    while (!rc && len) {
        ssize_t n = write(fd, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (fd == STDOUT_FILENO)
                fprintf(msg, "%s: writing to stdout: %s\n", prog, strerror(errno));
            else
                fprintf(msg, "%s: writing to descriptor %d: %s\n", prog, fd, strerror(errno));
            rc = -EIO;
            break;
        }
        data += n, len -= (size_t)n;
    }
    free(buf);
    bfs_close(r);
    return rc;
}

/* Check one sample beyond its checksum: a JPEG, PNG or WebP header that agrees with the
 * table, or a raw payload that decompresses to exactly width*height*3 bytes. */
static int check_payload(const bfs_sample *s, const uint8_t *data, size_t len, uint8_t **raw_buf,
                         size_t *raw_cap)
{
    if ((s->flags & BFS_KIND_MASK) == BFS_KIND_TOKENS)
        return 0; /* ids of any value; the count against the length is the table's check */
    if ((s->flags & BFS_KIND_MASK) == BFS_KIND_RAW) {
        if (*raw_cap < s->raw_size) {
            free(*raw_buf);
            *raw_cap = 0;
            if (!(*raw_buf = malloc(s->raw_size)))
                return -ENOMEM;
            *raw_cap = s->raw_size;
        }
        int n =
            LZ4_decompress_safe((const char *)data, (char *)*raw_buf, (int)len, (int)s->raw_size);
        return n == (int)s->raw_size ? 0 : BFS_E_RAW_DATA;
    }
    if ((s->flags & BFS_KIND_MASK) == BFS_KIND_CODEC) {
        bfs_image_facts f;
        int rc = bfs_image_probe(data, len, &f);
        if (rc)
            return rc;
        if (f.width != s->width || f.height != s->height || f.flags != s->flags)
            return BFS_E_SAMPLE_RANGE;
        return 0;
    }
    bfs_jpeg_header h;
    int rc = bfs_jpeg_parse_header(data, len, &h);
    if (rc)
        return rc;
    if (h.width != s->width || h.height != s->height)
        return BFS_E_SAMPLE_RANGE;
    return 0;
}

int bfs_dataset_verify(const char *prog, const char *path, FILE *out, FILE *msg)
{
    bfs_reader *r;
    int rc = open_or_say(prog, path, &r, msg);
    if (rc)
        return rc;
    const bfs_info *in = bfs_get_info(r);
    uint64_t bad_pages = 0, bad_samples = 0;
    int first = rc = bfs_verify_tables(r); /* the first problem's code: the return */
    if (rc)
        fprintf(msg, "%s: %s: %s\n", prog, path, bfs_strerror(rc));
    for (uint64_t p = 0; p < in->page_count; p++) {
        int prc = bfs_verify_page(r, p);
        if (prc == 0)
            continue;
        uint64_t b, e;
        bfs_page_range(r, p, &b, &e);
        fprintf(msg, "%s: %s: page %llu (file bytes %llu..%llu): %s\n", prog, path,
                (unsigned long long)p, (unsigned long long)(in->heap_offset + b),
                (unsigned long long)(in->heap_offset + e - 1),
                prc == BFS_E_PAGE_CHECKSUM ? "checksum mismatch" : bfs_strerror(prc));
        first = first ? first : prc;
        bad_pages++;
    }
    uint8_t *raw_buf = NULL, *buf = NULL;
    size_t raw_cap = 0, cap = 0;
    for (uint64_t i = 0; i < in->sample_count; i++) {
        bfs_sample s;
        int src = bfs_read_sample(r, i, BFS_VERIFY_SAMPLE, &s, buf, cap);
        if (src == -ENOSPC) {
            uint8_t *nb = realloc(buf, s.length);
            src = nb ? bfs_read_sample(r, i, BFS_VERIFY_SAMPLE, &s, buf = nb, cap = s.length)
                     : -ENOMEM;
        }
        if (!src)
            src = check_payload(&s, buf, s.length, &raw_buf, &raw_cap);
        if (src) {
            if (bad_samples < 20)
                fprintf(msg, "%s: %s: sample %llu: %s\n", prog, path, (unsigned long long)i,
                        bfs_strerror(src));
            first = first ? first : src;
            bad_samples++;
        }
    }
    free(raw_buf);
    free(buf);
    for (uint32_t c = 0; c < in->class_count; c++) {
        const char *name;
        if (bfs_class_name(r, c, &name, NULL)) {
            fprintf(msg, "%s: %s: class %u: %s\n", prog, path, c, bfs_strerror(BFS_E_CLASS_NAME));
            rc = BFS_E_CLASS_NAME;
            first = first ? first : rc;
        }
    }
    if (bad_samples > 20)
        fprintf(msg, "%s: %s: ... %llu bad samples in all\n", prog, path,
                (unsigned long long)bad_samples);
    int ok = !rc && !bad_pages && !bad_samples;
    if (ok)
        fprintf(out, "%s: OK (%llu samples, %llu page%s, all checksums match)\n", path,
                (unsigned long long)in->sample_count, (unsigned long long)in->page_count,
                in->page_count == 1 ? "" : "s");
    else
        fprintf(msg, "%s: CORRUPT (%llu bad pages, %llu bad samples%s)\n", path,
                (unsigned long long)bad_pages, (unsigned long long)bad_samples,
                rc ? ", bad tables" : "");
    bfs_close(r);
    return ok ? 0 : first;
}
