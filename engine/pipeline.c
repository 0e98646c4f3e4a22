/*
 * pipeline.c — the pipeline option table (see pipeline.h) and everything generated from
 * it: parsing of one option, of `-o` text and of spec files; the error messages (the
 * unknown-key message lists the table's names); defaults (each row's default text is run
 * through the row's own setter, so the documented default is the real one); validation in
 * bfs_pipeline_finish (each field is formatted and parsed back by its setter, so ranges
 * live in one place); the canonical text and fingerprint; --help.
 *
 * The table is pipeline_table.c, the values of its rows pipeline_values.c, the mixture
 * options pipeline_mix.c (pipeline_internal.h says what they share). Adding an option:
 * one OPT_* index, one row in the table, a field in bfs_pipeline_opts, a line in
 * docs/options.md (and tests/check_pipeline.c's list). Nothing else.
 */
#include "engine/pipeline_internal.h"
#include "engine/dataset/bfs.h"
#include "base/err.h"
#include "base/hash.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int differs(const bfs_pipeline_opts *o, size_t i);

const bfs_pipeline_option *bfs_pipeline_option_at(size_t i)
{
    return i < OPT_COUNT ? &bfs_opt_table[i].pub : NULL;
}

static const opt *lookup(const char *key)
{
    for (size_t i = 0; i < OPT_COUNT; i++)
        if (strcmp(bfs_opt_table[i].pub.name, key) == 0)
            return &bfs_opt_table[i];
    return NULL;
}

/* ---- messages -------------------------------------------------------------------------- */

/* "must be ..." text of a row: its own, or generated from its range or names. */
static void allowed_text(const opt *d, char *buf, size_t cap)
{
    if (d->allowed)
        snprintf(buf, cap, "%s", d->allowed);
    else if (d->flags & F_ENUM)
        snprintf(buf, cap, "one of %s", d->pub.syntax);
    else
        snprintf(buf, cap, "%san integer in %llu..%llu", (d->flags & F_AUTO) ? "auto or " : "",
                 (unsigned long long)d->lo, (unsigned long long)d->hi);
}

static int bad_value(const opt *d, const char *v, const char *why, char *err, size_t errlen)
{
    char q[QUOTE_MAX * 4 + 8], allowed[256];
    allowed_text(d, allowed, sizeof allowed);
    if (why)
        return bfs_errf(-EINVAL, err, errlen, "%s=%s: %s", d->pub.name, bfs_opt_quote(q, v), why);
    return bfs_errf(-EINVAL, err, errlen, "%s=%s: must be %s", d->pub.name, bfs_opt_quote(q, v),
                    allowed);
}

/* Case-insensitive edit distance, for "did you mean"; keys longer than 31 never match. */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), row[32];
    if (la > 31 || lb > 31)
        return SIZE_MAX;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            size_t best = diag + cost;
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

static int unknown_key(const char *key, char *err, size_t errlen)
{
    char q[QUOTE_MAX * 4 + 8], hint[64] = "", known[768];
    size_t best = 3, n = 0; /* suggest only within 2 edits */
    for (size_t i = 0; i < OPT_COUNT; i++) {
        size_t dist = edit_distance(key, bfs_opt_table[i].pub.name);
        if (dist < best && dist * 2 < strlen(bfs_opt_table[i].pub.name)) {
            best = dist;
            snprintf(hint, sizeof hint, " (did you mean '%s'?)", bfs_opt_table[i].pub.name);
        }
        if (n < sizeof known)
            n += (size_t)snprintf(known + n, sizeof known - n, "%s%s", i ? ", " : "",
                                  bfs_opt_table[i].pub.name);
    }
    return bfs_errf(-ENOENT, err, errlen, "unknown option '%s'%s; known options: %s",
                    bfs_opt_quote(q, key), hint, known);
}

/* ---- public API -------------------------------------------------------------------------- */

void bfs_pipeline_defaults(bfs_pipeline_opts *o)
{
    memset(o, 0, sizeof *o);
    for (size_t i = 0; i < OPT_COUNT; i++) {
        const opt *d = &bfs_opt_table[i];
        const char *why = NULL;
        if (!(d->flags & F_LATER))
            (void)d->set(d, o, d->init ? d->init : d->pub.def, &why); /* tested to succeed */
    }
    memset(o->given, 0, sizeof o->given);
}

int bfs_pipeline_set(bfs_pipeline_opts *o, const char *key, const char *value, char *err,
                     size_t errlen)
{
    const opt *d = lookup(key);
    if (!d)
        return unknown_key(key, err, errlen);
    if (!value) {
        char allowed[256];
        allowed_text(d, allowed, sizeof allowed);
        return bfs_errf(-EINVAL, err, errlen, "%s: missing value (%s=%s); must be %s", d->pub.name,
                        d->pub.name, d->pub.syntax, allowed);
    }
    const char *why = NULL;
    if (d->set(d, o, value, &why))
        return bad_value(d, value, why, err, errlen);
    bfs_opt_mark_given(o, (size_t)(d - bfs_opt_table));
    return 0;
}

static bool starts_number(char c)
{
    return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.';
}

static int set_item(bfs_pipeline_opts *o, char *item, char *err, size_t errlen)
{
    char *eq = strchr(item, '=');
    if (eq)
        *eq = '\0';
    return bfs_pipeline_set(o, item, eq ? eq + 1 : NULL, err, errlen);
}

int bfs_pipeline_parse(bfs_pipeline_opts *o, const char *text, char *err, size_t errlen)
{
    if (!text)
        return 0;
    char *buf = strdup(text);
    if (!buf)
        return bfs_errf(-ENOMEM, err, errlen, "out of memory parsing pipeline options");
    int rc = 0;
    for (char *item = buf;;) {
        char *end = item + strcspn(item, ",");
        if (strncmp(item, "normalize=", 10) == 0) /* m0,m1,m2/s0,s1,s2 */
            while (*end == ',' && starts_number(end[1]))
                end += 1 + strcspn(end + 1, ",");
        if (strncmp(item, "fields=", 7) == 0) /* a,b,c: an item without '=' is a name */
            while (*end == ',' && end[1] && end[1 + strcspn(end + 1, ",=")] != '=')
                end += 1 + strcspn(end + 1, ",");
        bool last = *end == '\0';
        *end = '\0';
        if (*item && (rc = set_item(o, item, err, errlen)))
            break;
        if (last)
            break;
        item = end + 1;
    }
    free(buf);
    return rc;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\v' || *s == '\f')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\v' ||
                 s[n - 1] == '\f'))
        s[--n] = '\0';
    return s;
}

int bfs_pipeline_parse_spec(bfs_pipeline_opts *o, const char *text, const char *file_name,
                            char *err, size_t errlen)
{
    const char *file = file_name ? file_name : "spec";
    if (!text)
        return 0;
    char *buf = strdup(text);
    if (!buf)
        return bfs_errf(-ENOMEM, err, errlen, "%s: out of memory", file);
    char *line = buf;
    if (strncmp(line, "\xEF\xBB\xBF", 3) == 0) /* UTF-8 byte order mark */
        line += 3;
    int rc = 0;
    for (unsigned long no = 1;; no++) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        for (char *h = line; (h = strchr(h, '#')); h++)
            if (h == line || h[-1] == ' ' || h[-1] == '\t') {
                *h = '\0';
                break;
            }
        char *s = trim(line);
        if (*s) {
            char msg[BFS_PIPELINE_ERRLEN], q[QUOTE_MAX * 4 + 8];
            char *eq = strchr(s, '=');
            if (!eq || eq == s) {
                rc = bfs_errf(-EINVAL, err, errlen, "%s:%lu: expected 'key = value', got '%s'",
                              file, no, bfs_opt_quote(q, s));
                break;
            }
            *eq = '\0';
            char *key = trim(s), *val = trim(eq + 1), *end = NULL;
            if (!strcmp(key, "source") && !strpbrk(val, "+,") && !bfs_opt_weighted(val))
                rc = 0; /* MNT/pipeline's identity line of a mount of one SOURCE */
            else if (!strcmp(key, "source"))
                rc = bfs_pipeline_set(o, key, val, msg, sizeof msg); /* a mixture */
            else if (!strcmp(key, "fingerprint")) {
                errno = 0;
                o->want_fingerprint = strtoull(val, &end, 16);
                o->want_fingerprint_set = 1;
                rc = strlen(val) != 16 || *end || errno || !isxdigit((unsigned char)val[0])
                         ? bfs_errf(-EINVAL, msg, sizeof msg,
                                    "fingerprint=%s: must be 16 hex digits, as in MNT/pipeline",
                                    bfs_opt_quote(q, val))
                         : 0;
            } else
                rc = bfs_pipeline_set(o, key, val, msg, sizeof msg);
            if (rc) {
                bfs_errf(rc, err, errlen, "%s:%lu: %s", file, no, msg);
                break;
            }
        }
        if (!nl)
            break;
        line = nl + 1;
    }
    free(buf);
    return rc;
}

int bfs_pipeline_finish(bfs_pipeline_opts *o, char *err, size_t errlen)
{
    if (!bfs_opt_given(o, OPT_NORMALIZE)) {
        const char *why = NULL;
        const opt *d = &bfs_opt_table[OPT_NORMALIZE];
        (void)d->set(d, o, o->dtype == BFS_OUT_U8 ? "none" : "imagenet", &why);
    } else if (o->dtype == BFS_OUT_U8 && o->normalize) {
        char v[256];
        if (memcmp(o->mean, bfs_opt_imagenet_mean, sizeof o->mean) == 0 &&
            memcmp(o->std, bfs_opt_imagenet_std, sizeof o->std) == 0)
            snprintf(v, sizeof v, "imagenet");
        else
            bfs_opt_fmt_norm_numbers(o, v, sizeof v);
        return bfs_errf(-EINVAL, err, errlen,
                        "normalize=%s: dtype=u8 outputs raw pixels, so normalize must be none; "
                        "use dtype=f16|bf16|f32 to normalize",
                        v);
    }
    /* Every field, formatted and read back by its own setter: one place for each range. */
    for (size_t i = 0; i < OPT_COUNT; i++) {
        const opt *d = &bfs_opt_table[i];
        char text[SHOW_MAX];
        if (d->flags & F_LATER) {
            char zero[8];
            d->show(d, o, zero, sizeof zero);
            if (strcmp(zero, "0") == 0)
                continue; /* default, resolved by the engine */
        }
        d->show(d, o, text, sizeof text);
        bfs_pipeline_opts scratch = *o;
        const char *why = NULL;
        if (d->set(d, &scratch, text, &why))
            return bad_value(d, text, why, err, errlen);
    }
    if (o->erasing > 0 && o->dtype == BFS_OUT_U8)
        return bfs_errf(-EINVAL, err, errlen,
                        "erasing= erases after normalize, as timm's RandomErasing: it needs "
                        "dtype=f16|bf16|f32");
    if ((o->randaug[0] != 0) + (o->trivialaug != 0) + (o->autoaug != 0) > 1)
        return bfs_errf(-EINVAL, err, errlen,
                        "randaugment=, trivialaugment= and autoaugment= are alternatives "
                        "(each a whole policy, as in torchvision's recipes): give one");
    if (!o->mix[0]) {
        for (size_t i = 0; i < OPT_COUNT; i++)
            if ((bfs_opt_table[i].flags & F_MIX) && bfs_opt_given(o, i) && differs(o, i))
                return bfs_errf(-EINVAL, err, errlen,
                                "%s= is an option of mixtures: give the sources as "
                                "source=PATH:W+PATH:W (docs/mixing.md)",
                                bfs_opt_table[i].pub.name);
        return 0;
    }
    bfs_mix_desc *m = malloc(sizeof *m);
    if (!m)
        return bfs_errf(-ENOMEM, err, errlen, "out of memory");
    int rc = bfs_pipeline_mix(o, m, err, errlen);
    free(m);
    return rc;
}

/* Option i of o differs from its default (a spec file lists every option, defaults too). */
static int differs(const bfs_pipeline_opts *o, size_t i)
{
    bfs_pipeline_opts def;
    bfs_pipeline_defaults(&def);
    char a[SHOW_MAX], b[SHOW_MAX];
    bfs_opt_table[i].show(&bfs_opt_table[i], o, a, sizeof a);
    bfs_opt_table[i].show(&bfs_opt_table[i], &def, b, sizeof b);
    return strcmp(a, b) != 0;
}

int bfs_pipeline_check_kind(bfs_pipeline_opts *o, int sequences, char *err, size_t errlen)
{
    for (size_t i = 0; i < OPT_COUNT; i++) {
        const opt *d = &bfs_opt_table[i];
        if (!bfs_opt_given(o, i))
            continue;
        if (sequences && (d->flags & F_IMG))
            return bfs_errf(-EINVAL, err, errlen,
                            "%s= is an image option, and this dataset holds token sequences "
                            "(mkbatchfs --tokens): their options are pack, seq_len, buckets, "
                            "batch_tokens, pad_id and positions (docs/sequences.md)",
                            d->pub.name);
        if (sequences && i == OPT_PAD && differs(o, i))
            return bfs_errf(-EINVAL, err, errlen,
                            "pad=1 is not available for token datasets yet: pad the shards of "
                            "an image dataset, or use shard=I/N without pad= (docs/options.md)");
        if (sequences && (d->flags & F_FLD) && differs(o, i))
            return bfs_errf(-EINVAL, err, errlen,
                            "%s= is an option of datasets with several fields per sample, and "
                            "this dataset holds token sequences",
                            d->pub.name);
        if (!sequences && (d->flags & F_SEQ))
            return bfs_errf(-EINVAL, err, errlen,
                            "%s= is an option of token datasets (mkbatchfs --tokens), and this "
                            "dataset holds images",
                            d->pub.name);
    }
    if (o->shuffle == BFS_SHUFFLE_ROWS && (!sequences || o->pack != BFS_PACK_CONCAT))
        return bfs_errf(-EINVAL, err, errlen,
                        "shuffle=rows permutes the rows cut from token documents (pack=concat), "
                        "and %s; use shuffle=full, pages or none",
                        !sequences                ? "this dataset holds images"
                        : o->pack == BFS_PACK_PAD ? "pack=pad serves one document per row"
                                                  : "pack=bucket serves one document per row");
    if (sequences) {
        static const struct {
            int opt, pack; /* option opt may be given only with pack= pack (-1: pad|bucket) */
        } only[] = {{OPT_BUCKETS, BFS_PACK_BUCKET},
                    {OPT_BATCH_TOKENS, BFS_PACK_BUCKET},
                    {OPT_POSITIONS, BFS_PACK_CONCAT},
                    {OPT_PAD_ID, -1}};
        static const char *const packs[] = {"concat", "pad", "bucket"};
        /* given with another value than the default: a spec file (MNT/pipeline) lists
         * every token option, those of other pack= modes at their defaults */
        for (size_t i = 0; i < sizeof only / sizeof *only; i++) {
            if (!bfs_opt_given(o, (size_t)only[i].opt) || !differs(o, (size_t)only[i].opt))
                continue;
            if (only[i].pack < 0 ? o->pack == BFS_PACK_CONCAT : o->pack != only[i].pack)
                return bfs_errf(-EINVAL, err, errlen, "%s= applies to pack=%s only, not pack=%s",
                                bfs_opt_table[only[i].opt].pub.name,
                                only[i].pack < 0 ? "pad|bucket" : packs[only[i].pack],
                                packs[o->pack]);
        }
        if (o->pack == BFS_PACK_BUCKET && bfs_opt_given(o, OPT_SEQ_LEN) && differs(o, OPT_SEQ_LEN))
            return bfs_errf(-EINVAL, err, errlen,
                            "seq_len= does not apply to pack=bucket: each bucket's bound is the "
                            "length of its rows (buckets=B1:B2:...)");
        if (o->pack == BFS_PACK_BUCKET && !o->nbuckets)
            return bfs_errf(-EINVAL, err, errlen,
                            "pack=bucket needs buckets=B1:B2:... (ascending length bounds, e.g. "
                            "buckets=128:256:512:1024)");
    }
    o->sequences = sequences != 0;
    return 0;
}

int bfs_pipeline_check_fields(bfs_pipeline_opts *o, const char *const *names,
                              const unsigned char *kind, uint32_t n, uint64_t *chosen, char *err,
                              size_t errlen)
{
    uint64_t pick = 0;
    if (!o->fields[0])
        pick = n >= 64 ? UINT64_MAX : (1ull << n) - 1;
    for (const char *p = o->fields; *p;) {
        size_t len = strcspn(p, ",");
        uint32_t f = 0;
        while (f < n && (strlen(names[f]) != len || memcmp(names[f], p, len)))
            f++;
        if (f == n) {
            char list[BFS_FIELDS_TEXT + 64];
            size_t at = 0;
            for (uint32_t i = 0; i < n && at < sizeof list; i++)
                at +=
                    (size_t)snprintf(list + at, sizeof list - at, "%s%s", i ? ", " : "", names[i]);
            return bfs_errf(-EINVAL, err, errlen,
                            "fields=%s: this dataset has no field \"%.*s\"; its fields are: %s",
                            o->fields, (int)len, p, list);
        }
        pick |= 1ull << f;
        p += len + (p[len] == ',');
    }
    int image = 0, text = 0, tokens = 0, boxes = 0;
    for (uint32_t f = 0; f < n && f < 64; f++)
        if (pick >> f & 1) {
            image |= kind[f] == BFS_FIELD_IMAGE, text |= kind[f] == BFS_FIELD_TEXT;
            tokens |= kind[f] == BFS_FIELD_TOKENS, boxes |= kind[f] == BFS_FIELD_BOXES;
        }
    if (!image)
        return bfs_errf(-EINVAL, err, errlen,
                        "fields=%s: choose at least one image field (the first becomes the "
                        "`images` tensor)",
                        o->fields);
    if (o->text_len && !text)
        return bfs_errf(-EINVAL, err, errlen,
                        "text_len=%u: none of the fields served is text (remove text_len=)",
                        o->text_len);
    if (o->token_len && !tokens)
        return bfs_errf(-EINVAL, err, errlen,
                        "token_len=%u: none of the fields served is tokens (mkbatchfs "
                        "--tokenize adds one; or remove token_len=)",
                        o->token_len);
    if (bfs_opt_given(o, OPT_MIN_BOX_AREA) && o->min_box_area != 1 && !boxes)
        return bfs_errf(-EINVAL, err, errlen,
                        "min_box_area=%u: none of the fields served is boxes (remove "
                        "min_box_area=)",
                        o->min_box_area);
    char list[BFS_FIELDS_TEXT];
    size_t at = 0;
    for (uint32_t f = 0; f < n && f < 64; f++)
        if (pick >> f & 1)
            at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", at ? "," : "", names[f]);
    if (n > 1)
        snprintf(o->fields, sizeof o->fields, "%s", list);
    o->fielded = n > 1;
    *chosen = pick;
    return 0;
}

int bfs_pipeline_mix(const bfs_pipeline_opts *o, bfs_mix_desc *d, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    const char *why = NULL;
    int n = bfs_opt_mix_walk(o->mix, d, &why);
    if (n < 1)
        return bfs_errf(-EINVAL, err, errlen, "source=%s: %s", o->mix, why ? why : "empty");
    d->n = (uint32_t)n;
    if (o->mix_schedule[0] && bfs_opt_schedule_parse(o->mix_schedule, d, &why))
        return bfs_errf(-EINVAL, err, errlen, "mix_schedule=%s: %s", o->mix_schedule, why);
    if (d->npoints) { /* schedule_parse kept d->n: count the first point's weights */
        bfs_mix_desc t;
        memset(&t, 0, sizeof t);
        (void)bfs_opt_schedule_parse(o->mix_schedule, &t, &why);
        if (t.n != d->n)
            return bfs_errf(-EINVAL, err, errlen,
                            "mix_schedule=%s: %u weight%s per point, but source= has %u "
                            "source%s: give one weight per source, in source= order",
                            o->mix_schedule, t.n, t.n == 1 ? "" : "s", d->n, d->n == 1 ? "" : "s");
    }
    return 0;
}

int bfs_pipeline_canonical(const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < OPT_COUNT; i++) {
        const opt *d = &bfs_opt_table[i];
        if (d->pub.cls != BFS_OPT_DATA || (d->flags & (o->sequences ? F_IMG : F_SEQ)) ||
            ((d->flags & F_FLD) && !o->fielded) || ((d->flags & F_NEW) && !differs(o, i)) ||
            ((d->flags & F_MIX) && !o->mix[0]) || (d->flags & F_NOCANON))
            continue;
        char v[SHOW_MAX];
        d->show(d, o, v, sizeof v);
        int w = n < cap ? snprintf(buf + n, cap - n, "%s = %s\n", d->pub.name, v)
                        : snprintf(NULL, 0, "%s = %s\n", d->pub.name, v);
        if (w < 0)
            return -EINVAL;
        n += (size_t)w;
    }
    if (n >= cap) {
        if (cap)
            buf[0] = '\0';
        return -ENOSPC;
    }
    return (int)n;
}

void bfs_pipeline_size_at(const bfs_pipeline_opts *o, uint64_t epoch, uint32_t *h, uint32_t *w)
{
    *h = o->out_h, *w = o->out_w;
    uint32_t n = o->sched_n < BFS_SCHEDULE_SIZES ? o->sched_n : BFS_SCHEDULE_SIZES;
    if (o->augment != BFS_AUG_TRAIN || !n)
        return;
    uint32_t i = 0;
    while (i + 1 < n && o->sched_epoch[i + 1] <= epoch)
        i++;
    *h = o->sched_h[i], *w = o->sched_w[i];
    if (!o->sched_linear || epoch <= o->sched_epoch[0] || i + 1 >= n || epoch == o->sched_epoch[i])
        return;
    /* np.interp: slope * (x - xp[i]) + fp[i], then int(np.round(v / 32)) * 32 */
    double dx = (double)o->sched_epoch[i + 1] - o->sched_epoch[i],
           x = (double)epoch - o->sched_epoch[i];
    double vh = ((double)o->sched_h[i + 1] - o->sched_h[i]) / dx * x + o->sched_h[i];
    double vw = ((double)o->sched_w[i + 1] - o->sched_w[i]) / dx * x + o->sched_w[i];
    *h = (uint32_t)rint(vh / 32) * 32, *w = (uint32_t)rint(vw / 32) * 32;
}

uint64_t bfs_pipeline_fingerprint(const bfs_pipeline_opts *o, uint64_t dataset_identity)
{
    char canon[BFS_CANONICAL_MAX], id[32];
    int n = bfs_pipeline_canonical(o, canon, sizeof canon);
    bfs_xxh64_state st;
    bfs_xxh64_init(&st, 0);
    bfs_xxh64_update(&st, BFS_OUTPUT_VERSION "\n", sizeof BFS_OUTPUT_VERSION);
    snprintf(id, sizeof id, "%016llx\n", (unsigned long long)dataset_identity);
    bfs_xxh64_update(&st, id, 17);
    if (n > 0)
        bfs_xxh64_update(&st, canon, (size_t)n);
    return bfs_xxh64_digest(&st);
}

/* ---- --help ------------------------------------------------------------------------------ */

#define HELP_WIDTH   100 /* the house column limit */
#define HELP_OPT_MAX 28  /* a longer "name=syntax" gets a line of its own */

static char help_text[24576];
static pthread_once_t help_once = PTHREAD_ONCE_INIT;

typedef struct sbuf {
    char *p;
    size_t cap, len;
} sbuf;

__attribute__((format(printf, 2, 3))) static void sb_add(sbuf *b, const char *fmt, ...)
{
    if (b->len >= b->cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (w > 0)
        b->len = b->len + (size_t)w < b->cap ? b->len + (size_t)w : b->cap;
}

/* text word-wrapped into lines of at most width columns, continuation lines indented by
 * indent spaces; the first line continues the current one. */
static void sb_wrap(sbuf *b, const char *text, size_t indent, size_t width)
{
    size_t col = 0;
    while (*text) {
        size_t w = strcspn(text, " ");
        if (col && col + 1 + w > width) {
            sb_add(b, "\n%*s", (int)indent, "");
            col = 0;
        }
        sb_add(b, "%s%.*s", col ? " " : "", (int)w, text);
        col += (col ? 1 : 0) + w;
        text += w;
        while (*text == ' ')
            text++;
    }
    sb_add(b, "\n");
}

static void help_build(void)
{
    static const char *const heading[] = {
        [BFS_OPT_DATA] = "Data-changing options (shown in /pipeline, hashed into the fingerprint):",
        [BFS_OPT_LISTING] =
            "Listing option (which epoch directories exist; never changes a batch):",
        [BFS_OPT_KNOB] = "Performance knobs (never change a byte; not in the fingerprint):",
    };
    sbuf b = {help_text, sizeof help_text, 0};
    size_t ow = strlen("option"), dw = strlen("default");
    for (size_t i = 0; i < OPT_COUNT; i++) {
        size_t n = strlen(bfs_opt_table[i].pub.name) + 1 + strlen(bfs_opt_table[i].pub.syntax);
        if (n > ow && n <= HELP_OPT_MAX)
            ow = n;
        if (strlen(bfs_opt_table[i].pub.def) > dw)
            dw = strlen(bfs_opt_table[i].pub.def);
    }
    size_t mcol = 2 + ow + 2 + dw + 2; /* where the meaning column starts */
    sb_add(&b, "  %-*s  %-*s  %s\n", (int)ow, "option", (int)dw, "default", "meaning");
    for (int cls = BFS_OPT_DATA; cls <= BFS_OPT_KNOB; cls++) {
        sb_add(&b, "%s\n", heading[cls]);
        for (size_t i = 0; i < OPT_COUNT; i++) {
            const opt *d = &bfs_opt_table[i];
            if (d->pub.cls != cls)
                continue;
            char os[128], meaning[1024], allowed[256];
            snprintf(os, sizeof os, "%s=%s", d->pub.name, d->pub.syntax);
            if (strlen(os) > ow)
                sb_add(&b, "  %s\n  %-*s", os, (int)ow, "");
            else
                sb_add(&b, "  %-*s", (int)ow, os);
            sb_add(&b, "  %-*s  ", (int)dw, d->pub.def);
            if (d->flags & F_ENUM) {
                snprintf(meaning, sizeof meaning, "%s", d->pub.help);
            } else {
                allowed_text(d, allowed, sizeof allowed);
                snprintf(meaning, sizeof meaning, "%s; %s", d->pub.help, allowed);
            }
            sb_wrap(&b, meaning, mcol, HELP_WIDTH - mcol);
        }
    }
    sb_add(&b, "Unknown options are errors. A key given twice: the last value wins.\n");
}

const char *bfs_pipeline_help(void)
{
    pthread_once(&help_once, help_build);
    return help_text;
}
