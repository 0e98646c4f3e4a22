/*
 * record_schema.c — a sample's members into the values of named fields (see record.h):
 * the schema made from the first sample and the --field specs (bfs_schema_make), and
 * each sample converted with it (bfs_schema_convert). Finding a field's member and
 * collecting its numbers is record.c's (record_internal.h).
 */
#include "engine/dataset/record.h"
#include "engine/dataset/record_internal.h"
#include "engine/dataset/image.h"
#include "engine/dataset/pack.h"
#include "engine/dataset/shard.h"
#include "engine/dataset/wds.h"
#include "base/endian.h"
#include "base/err.h"
#include "base/utf8.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- conversion ------------------------------------------------------------------------------ */

static int fail(char *whybuf, size_t whycap, const char **why, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *whybuf, size_t whycap, const char **why, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(whybuf, whycap, fmt, ap);
    va_end(ap);
    *why = whybuf;
    return 1;
}

/* A label from a found value: 0 with *label, 1 with why. */
static int label_of(const found *f, int64_t *label, const char **why)
{
    if (f->type == BFS_MEMBER_BYTES) {
        if (bfs_wds_cls_label((const char *)f->bytes, f->len, label))
            return *why = "not a decimal integer", 1;
    } else if (f->type == BFS_MEMBER_INTS) {
        if (f->m->len != 1)
            return *why = "not one int64 value", 1;
        *label = ((int64_t *)f->m->data)[0];
    } else if (f->type == BFS_MEMBER_JSON) {
        json_t *j = f->json;
        if (json_is_array(j) && json_array_size(j) == 1)
            j = json_array_get(j, 0);
        if (!json_is_integer(j))
            return *why = "not an integer", 1;
        *label = json_integer_value(j);
    } else
        return *why = "not an integer", 1;
    if (*label < 0 || *label > BFS_SHARD_LABEL_MAX)
        return *why = "label out of range (0..16777215)", 1;
    return 0;
}

/* The value of field k from f into v. 0, -ENOMEM, 1 with why (the reason only). */
static int value_of(const bfs_field *d, const found *f, bfs_value *v, char *whybuf, size_t whycap,
                    const char **why)
{
    switch (d->kind) {
    case BFS_FIELD_IMAGE:
        if (f->type != BFS_MEMBER_BYTES)
            return *why = "not image bytes", 1;
        if (!f->len)
            return *why = "empty, not an image", 1;
        v->data = f->m->data, v->len = f->m->len; /* taken */
        f->m->data = NULL, f->m->len = 0;
        return 0;
    case BFS_FIELD_TEXT:
    case BFS_FIELD_BYTES: {
        const uint8_t *p = f->bytes;
        size_t n = f->len;
        char *dump = NULL;
        if (f->type == BFS_MEMBER_JSON && f->bytes)
            ; /* a CSV cell: its text as written, whatever it looks like */
        else if (f->type == BFS_MEMBER_JSON && json_is_string(f->json))
            p = (const uint8_t *)json_string_value(f->json), n = json_string_length(f->json);
        else if (f->type == BFS_MEMBER_JSON && d->kind == BFS_FIELD_BYTES) {
            if (!(dump = json_dumps(f->json, JSON_COMPACT | JSON_ENCODE_ANY)))
                return -ENOMEM;
            p = (const uint8_t *)dump, n = strlen(dump);
        } else if (f->type != BFS_MEMBER_BYTES)
            return *why = d->kind == BFS_FIELD_TEXT ? "not text (a string)" : "numbers, not bytes",
                   1;
        if (d->kind == BFS_FIELD_TEXT && !bfs_utf8_valid(p, n))
            return *why = "text that is not UTF-8", 1;
        if (n > UINT32_MAX) {
            free(dump);
            return *why = "over 4 GiB", 1;
        }
        v->data = malloc(n ? n : 1);
        if (!v->data) {
            free(dump);
            return -ENOMEM;
        }
        if (n)
            memcpy(v->data, p, n);
        v->len = n, v->count = (uint32_t)n;
        free(dump);
        return 0;
    }
    default: { /* array, tokens, boxes */
        nums x;
        int rc = bfs_rec_collect(f, &x, whybuf, whycap, why);
        if (!rc && !bfs_rec_shape_ok(&x, d, why))
            rc = bfs_nums_store(&x, d->dtype, v, why);
        else if (!rc)
            rc = 1;
        bfs_nums_free(&x);
        return rc;
    }
    }
}

int bfs_schema_convert(const bfs_schema *s, bfs_members *m, bfs_record *rec, char *whybuf,
                       size_t whycap, const char **why)
{
    memset(rec, 0, sizeof *rec);
    *why = NULL;
    char wb[600], inner[400];
    json_t *parsed = NULL;
    found f;
    int rc = 0;
    const char *r = NULL;
    /* the label */
    if (s->has_label) {
        const bfs_member *cls = s->label_json_fallback ? bfs_members_find(m, "cls", 1) : NULL;
        int64_t label = 0;
        if (s->label_json_fallback && !cls) { /* WebDataset: the .json's key */
            const bfs_member *js = bfs_members_find(m, "json", 1);
            if (!js)
                return fail(whybuf, whycap, why, "no label (no .cls member, no .json member)");
            int jr =
                js->bad ? -EINVAL : bfs_wds_json_label(js->data, js->len, s->label_key, &label);
            if (jr == 1)
                return fail(whybuf, whycap, why,
                            "no label (no .cls member; the .json has no label key)");
            if (jr < 0)
                return fail(whybuf, whycap, why,
                            "bad .json (not one JSON object, or the label key twice)");
            if (jr == 2)
                return fail(whybuf, whycap, why, "the .json's label is not an integer");
            if (label < 0 || label > BFS_SHARD_LABEL_MAX)
                return fail(whybuf, whycap, why, "label out of range (0..16777215)");
        } else {
            if ((rc = bfs_rec_find(s, &s->label, m, &f, &parsed, whybuf, whycap, why)))
                goto out;
            if (!f.type) {
                rc = fail(whybuf, whycap, why, "no label (no %s)",
                          bfs_rec_where(&s->label, wb, sizeof wb));
                goto out;
            }
            if (label_of(&f, &label, &r)) {
                rc = s->label_json_fallback && !strcmp(r, "not a decimal integer")
                         ? fail(whybuf, whycap, why, "bad .cls (not a decimal integer)")
                         : fail(whybuf, whycap, why, "%s: %s (the label)",
                                bfs_rec_where(&s->label, wb, sizeof wb), r);
                goto out;
            }
            json_decref(parsed);
            parsed = NULL;
        }
        rec->label = (uint32_t)label;
    }
    for (uint32_t k = 0; k < s->n && !rc; k++) {
        const bfs_field_spec *sp = &s->from[k];
        const bfs_field *d = &s->f[k];
        if ((rc = bfs_rec_find(s, sp, m, &f, &parsed, whybuf, whycap, why)))
            break;
        if (!f.type) {
            if (!(d->flags & BFS_FIELDF_OPTIONAL))
                rc = k == 0 && s->src == BFS_SRC_WDS && !s->explicit_fields
                         ? fail(whybuf, whycap, why, "no image (no .%s member)", sp->member)
                         : fail(whybuf, whycap, why, "no %s (field %s is required)",
                                bfs_rec_where(sp, wb, sizeof wb), d->name);
        } else if ((rc = value_of(d, &f, &rec->v[k], inner, sizeof inner, &r)) == 1)
            fail(whybuf, whycap, why, "%s: %s (field %s, %s)", bfs_rec_where(sp, wb, sizeof wb), r,
                 d->name, bfs_field_kind_name(d->kind));
        json_decref(parsed);
        parsed = NULL;
    }
    for (uint32_t k = 0; k < s->n && !rc; k++) /* per-box values pair with their boxes */
        if (s->f[k].follows != BFS_FIELD_NONE &&
            (uint64_t)rec->v[k].count * 4 != rec->v[s->f[k].follows].count)
            rc = fail(whybuf, whycap, why, "field %s has %u values, and its boxes %s %u boxes",
                      s->f[k].name, rec->v[k].count, s->f[s->f[k].follows].name,
                      rec->v[s->f[k].follows].count / 4);
    if (!rc && !s->explicit_fields) /* members in no field */
        for (size_t i = 0; i < m->n; i++) {
            int used = s->has_label &&
                       (!strcasecmp(m->v[i].name, s->label.member) ||
                        (s->label_json_fallback &&
                         (!strcasecmp(m->v[i].name, "cls") || !strcasecmp(m->v[i].name, "json"))));
            for (uint32_t k = 0; k < s->n && !used; k++)
                used = s->src == BFS_SRC_WDS ? !strcasecmp(m->v[i].name, s->from[k].member)
                                             : !strcmp(m->v[i].name, s->from[k].member);
            rec->extra += !used;
        }
out:
    json_decref(parsed);
    if (rc)
        bfs_record_free(rec);
    if (rc == 1 && *why == whybuf)
        bfs_rec_one_line(whybuf);
    return rc;
}

void bfs_record_free(bfs_record *rec)
{
    for (uint32_t k = 0; rec && k < BFS_FIELD_MAX; k++) {
        free(rec->v[k].data);
        rec->v[k] = (bfs_value){0};
    }
}

/* ---- the schema ------------------------------------------------------------------------------ */

static int is_image_ext(const char *e)
{
    return !strcasecmp(e, "jpg") || !strcasecmp(e, "jpeg") || !strcasecmp(e, "png") ||
           !strcasecmp(e, "webp");
}

/* The declaration a found value suggests (kind 0: by the member). 0, or 1 with why. */
static int infer(const bfs_schema *s, bfs_field_spec *sp, const found *f, bfs_field *d,
                 const char *image_key, char *whybuf, size_t whycap, const char **why)
{
    int kind = sp->kind;
    nums x = {0};
    int have_nums = 0, rc = 0;
    if (!kind) {
        if (!f->type)
            return fail(whybuf, whycap, why,
                        "--field %s: the first sample has no %s, so its kind is not known: give "
                        "it (e.g. :text)",
                        sp->name, sp->member);
        if (f->type == BFS_MEMBER_BYTES && !sp->key[0]) {
            const char *mn = f->m->name, *dot = strrchr(mn, '.');
            const char *ext = dot ? dot + 1 : mn; /* "seg.png": a png */
            int img_named = image_key && (s->src == BFS_SRC_WDS ? !strcasecmp(mn, image_key)
                                                                : !strcmp(mn, image_key));
            if (s->src == BFS_SRC_WDS)
                kind = img_named || is_image_ext(ext) ? BFS_FIELD_IMAGE
                       : !strcasecmp(ext, "txt")      ? BFS_FIELD_TEXT
                       : !strcasecmp(mn, "cls")       ? BFS_SPEC_LABEL
                       : !strcasecmp(ext, "npy")      ? BFS_FIELD_ARRAY
                                                      : BFS_FIELD_BYTES;
            else
                kind = img_named || bfs_image_sniff(f->bytes, f->len) ? BFS_FIELD_IMAGE
                                                                      : BFS_FIELD_BYTES;
        } else if (f->type == BFS_MEMBER_INTS || f->type == BFS_MEMBER_FLOATS)
            kind = BFS_FIELD_ARRAY;
        else if (f->type == BFS_MEMBER_JSON)
            kind = json_is_string(f->json)                             ? BFS_FIELD_TEXT
                   : json_is_number(f->json) || json_is_array(f->json) ? BFS_FIELD_ARRAY
                                                                       : BFS_FIELD_BYTES;
        if (kind == BFS_FIELD_ARRAY && f->type == BFS_MEMBER_JSON && json_is_array(f->json)) {
            nums y;
            const char *r;
            if (bfs_rec_collect(f, &y, whybuf, whycap, &r) == 1)
                kind = BFS_FIELD_BYTES; /* a list of other things: kept as JSON text */
            bfs_nums_free(&y);
        }
        sp->kind = kind;
    }
    memset(d, 0, sizeof *d);
    memcpy(d->name, sp->name, sizeof d->name);
    d->kind = (uint8_t)kind;
    d->follows = BFS_FIELD_NONE;
    d->flags = kind == BFS_FIELD_IMAGE ? 0 : BFS_FIELDF_VARIABLE;
    switch (kind) {
    case BFS_FIELD_IMAGE:
    case BFS_FIELD_TEXT:
    case BFS_FIELD_BYTES:
        d->dtype = BFS_FDT_U8;
        break;
    case BFS_FIELD_TOKENS:
        d->dtype = sp->dtype >= 0 ? (uint8_t)sp->dtype : BFS_FDT_U32;
        break;
    case BFS_FIELD_BOXES:
        d->dtype = BFS_FDT_F32, d->rank = 1, d->shape[0] = 4;
        break;
    case BFS_FIELD_ARRAY: {
        /* dtype and row shape from the first sample's value when there is one */
        if (f->type) {
            const char *r = NULL;
            rc = bfs_rec_collect(f, &x, whybuf, whycap, &r);
            have_nums = 1;
            if (rc < 0)
                goto done;
            if (rc) {
                rc = r == whybuf ? fail(whybuf, whycap, why, "--field %s: %s", sp->name, r)
                                 : fail(whybuf, whycap, why,
                                        "%s of the first sample: %s, not an array", sp->member, r);
                goto done;
            }
        }
        /* an int64_list i64, a float_list f32, a .npy its own dtype; JSON numbers i64
         * when all are integers, else (or none: an empty list) f32 */
        d->dtype = sp->dtype >= 0                 ? (uint8_t)sp->dtype
                   : f->type == BFS_MEMBER_INTS   ? BFS_FDT_I64
                   : f->type == BFS_MEMBER_FLOATS ? BFS_FDT_F32
                   : have_nums && x.hint >= 0     ? (uint8_t)x.hint
                   : have_nums && x.n             ? (uint8_t)bfs_nums_dtype(&x)
                   : have_nums                    ? BFS_FDT_F32
                                                  : BFS_FDT_I64;
        if (have_nums && x.rank > 1 && !sp->follows[0]) { /* rows of the trailing dims */
            if (x.rank > 4) {
                rc = fail(whybuf, whycap, why, "%s: over 4 dimensions", sp->member);
                goto done;
            }
            d->rank = (uint8_t)(x.rank - 1);
            for (int k = 1; k < x.rank; k++) {
                if (!x.dims[k] || x.dims[k] > UINT32_MAX) {
                    rc = fail(whybuf, whycap, why, "%s: a dimension of 0", sp->member);
                    goto done;
                }
                d->shape[k - 1] = (uint32_t)x.dims[k];
            }
        }
        break;
    }
    }
    if (sp->optional)
        d->flags |= BFS_FIELDF_OPTIONAL;
done:
    if (have_nums)
        bfs_nums_free(&x);
    return rc;
}

/* The label's source, and whether it is found in the first sample (for the defaults). */
static int label_default(bfs_schema *s, const bfs_members *first, const char *label_key)
{
    s->label.kind = BFS_SPEC_LABEL;
    if (s->src == BFS_SRC_WDS) {
        snprintf(s->label_key, sizeof s->label_key, "%s", label_key ? label_key : "label");
        snprintf(s->label.member, sizeof s->label.member, "cls");
        s->label_json_fallback = 1;
        const bfs_member *j = bfs_members_find(first, "json", 1);
        int64_t v;
        return bfs_members_find(first, "cls", 1) ||
               (j && j->type == BFS_MEMBER_BYTES && !j->bad &&
                bfs_wds_json_label(j->data, j->len, s->label_key, &v) != 1);
    }
    if (s->src == BFS_SRC_TFRECORD) {
        snprintf(s->label.member, sizeof s->label.member, "%s",
                 label_key ? label_key : "image/class/label");
        return bfs_members_find(first, s->label.member, 0) != NULL;
    }
    const char *names[] = {label_key, "label", "cls"};
    for (int i = label_key ? 0 : 1; i < 3; i++) {
        const bfs_member *mb = bfs_members_find(first, names[i], 0);
        if (mb && mb->type == BFS_MEMBER_JSON && json_is_integer((json_t *)mb->json)) {
            snprintf(s->label.member, sizeof s->label.member, "%s", names[i]);
            return 1;
        }
        if (label_key)
            break;
    }
    return 0;
}

static int schema_make(bfs_schema *s, int src, const bfs_field_spec *specs, size_t nspecs,
                       const bfs_members *first, const char *image_key, const char *label_key,
                       char *err, size_t errlen);

int bfs_schema_make(bfs_schema *s, int src, const bfs_field_spec *specs, size_t nspecs,
                    const bfs_members *first, const char *image_key, const char *label_key,
                    char *err, size_t errlen)
{
    int rc = schema_make(s, src, specs, nspecs, first, image_key, label_key, err, errlen);
    if (rc && err && errlen)
        bfs_rec_one_line(err);
    return rc;
}

static int schema_make(bfs_schema *s, int src, const bfs_field_spec *specs, size_t nspecs,
                       const bfs_members *first, const char *image_key, const char *label_key,
                       char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->src = src;
    bfs_field_spec want[BFS_FIELD_MAX + 1];
    size_t nw = 0;
    int primary = -1;
    if (nspecs) {
        s->explicit_fields = 1;
        for (size_t i = 0; i < nspecs; i++) {
            if (specs[i].kind == BFS_SPEC_LABEL) {
                if (s->has_label)
                    return bfs_errf(-EINVAL, err, errlen,
                                    "--field %s: a second label (--field %s is the label)",
                                    specs[i].name, s->label.name);
                s->has_label = 1, s->label = specs[i];
                continue;
            }
            if (nw == BFS_FIELD_MAX)
                return bfs_errf(-EINVAL, err, errlen, "over %u fields", BFS_FIELD_MAX);
            want[nw++] = specs[i];
        }
    } else {
        s->has_label = label_default(s, first, label_key);
        /* TFRecord features sorted by name: an Example's map has no order */
        size_t order[4096], nm = first->n < 4096 ? first->n : 4096;
        for (size_t i = 0; i < nm; i++)
            order[i] = i;
        if (src == BFS_SRC_TFRECORD)
            for (size_t i = 1; i < nm; i++)
                for (size_t j = i;
                     j > 0 && strcmp(first->v[order[j - 1]].name, first->v[order[j]].name) > 0;
                     j--) {
                    size_t t = order[j];
                    order[j] = order[j - 1], order[j - 1] = t;
                }
        for (size_t oi = 0; oi < nm; oi++) {
            const bfs_member *mb = &first->v[order[oi]];
            if (s->has_label && (src == BFS_SRC_WDS ? !strcasecmp(mb->name, "cls")
                                                    : !strcmp(mb->name, s->label.member)))
                continue;
            if (src == BFS_SRC_WDS && !strcasecmp(mb->name, "cls"))
                continue; /* a .cls that is no label (bad): not a field either */
            int dup = 0;
            for (size_t k = 0; k < nw && !dup; k++)
                dup = src == BFS_SRC_WDS ? !strcasecmp(want[k].member, mb->name)
                                         : !strcmp(want[k].member, mb->name);
            if (dup)
                continue;
            if (nw == BFS_FIELD_MAX)
                return bfs_errf(-EINVAL, err, errlen,
                                "the first sample has over %u members: choose fields with --field",
                                BFS_FIELD_MAX);
            bfs_field_spec *sp = &want[nw++];
            memset(sp, 0, sizeof *sp);
            sp->dtype = -1;
            snprintf(sp->member, sizeof sp->member, "%s", mb->name);
            bfs_field_name_from(mb->name, sp->name);
            sp->optional = 1;
        }
    }
    /* kinds and declarations, from the first sample */
    bfs_field decl[BFS_FIELD_MAX];
    int label_field[BFS_FIELD_MAX] = {0};
    for (size_t i = 0; i < nw; i++) {
        found f;
        json_t *parsed = NULL;
        const char *why = NULL;
        char wb[512];
        int rc = bfs_rec_find(s, &want[i], (bfs_members *)first, &f, &parsed, wb, sizeof wb, &why);
        if (rc == 1 && want[i].kind) { /* kind given: the sample is skipped, not the pack */
            rc = 0;
            memset(&f, 0, sizeof f);
        }
        if (!rc)
            rc = infer(s, &want[i], &f, &decl[i], image_key, wb, sizeof wb, &why);
        json_decref(parsed);
        if (rc < 0)
            return bfs_errf(rc, err, errlen, "out of memory");
        if (rc)
            return bfs_errf(-EINVAL, err, errlen, "%s", why);
        if (want[i].kind == BFS_SPEC_LABEL) { /* --field NAME=cls: the label */
            if (s->has_label)
                return bfs_errf(-EINVAL, err, errlen,
                                "--field %s: a second label (--field %s is the label)",
                                want[i].name, s->label.name);
            s->has_label = 1, s->label = want[i];
            label_field[i] = 1;
            continue;
        }
        if (want[i].kind == BFS_FIELD_IMAGE && primary < 0 &&
            (nspecs || !image_key ||
             (src == BFS_SRC_WDS ? !strcasecmp(want[i].member, image_key)
                                 : !strcmp(want[i].member, image_key))))
            primary = (int)i;
    }
    if (primary < 0 && !nspecs && src == BFS_SRC_MANIFEST)
        for (size_t i = 0; i < nw && primary < 0; i++)
            if (want[i].kind == BFS_FIELD_IMAGE)
                primary = (int)i;
    if (primary < 0)
        return bfs_errf(-EINVAL, err, errlen,
                        nspecs ? "no --field maps an image: field 0 is the sample's image (e.g. "
                                 "--field image=jpg)"
                        : image_key ? "the first sample has no image member '%s'"
                                    : "the first sample has no image (a .jpg, .jpeg, .png or "
                                      ".webp member, an image feature or column)",
                        image_key ? image_key : "");
    /* field 0 the primary image, the others in order */
    s->n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < nw; i++)
            if ((pass == 0) == ((int)i == primary) && !label_field[i]) {
                s->from[s->n] = want[i];
                s->f[s->n++] = decl[i];
            }
    s->f[0].flags &= (uint8_t)~BFS_FIELDF_OPTIONAL;
    s->from[0].optional = 0;
    for (uint32_t k = 0; k < s->n; k++) {
        for (uint32_t j = 0; j < k; j++)
            if (!strcmp(s->f[j].name, s->f[k].name))
                return bfs_errf(-EINVAL, err, errlen,
                                "two fields named %s (members '%s' and '%s'): name them with "
                                "--field",
                                s->f[k].name, s->from[j].member, s->from[k].member);
        if (s->from[k].follows[0]) {
            uint32_t j = 0;
            while (j < k && strcmp(s->f[j].name, s->from[k].follows))
                j++;
            if (j == k || s->f[j].kind != BFS_FIELD_BOXES)
                return bfs_errf(-EINVAL, err, errlen,
                                "--field %s: follows=%s must name a boxes field given before it",
                                s->f[k].name, s->from[k].follows);
            if (s->f[k].kind != BFS_FIELD_ARRAY)
                return bfs_errf(-EINVAL, err, errlen,
                                "--field %s: only an array follows boxes (one value per box)",
                                s->f[k].name);
            s->f[k].follows = j;
            s->f[k].rank = 0;
            memset(s->f[k].shape, 0, sizeof s->f[k].shape);
        }
        int rc = bfs_field_check(&s->f[k], k, s->n, err, errlen);
        if (rc)
            return rc;
    }
    return 0;
}
