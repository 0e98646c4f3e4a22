/*
 * record_check.h — what the shard and manifest fuzz targets check of the fields mkbatchfs
 * keeps (engine/dataset/record.h): a schema made from the first sample (every member, and
 * a fixed --field set), then every sample converted by both. Checked: bfs_schema_make
 * returns 0 or -EINVAL with a one-line message, and a schema it makes passes
 * bfs_field_check field by field; bfs_schema_convert returns 0, or 1 with a one-line
 * reason; a converted record fits its declarations as the writer checks them (image
 * values hold bytes, others count × dtype size bytes, whole rows of a variable shape,
 * a fixed shape's count, required fields present, per-box values one per box, text
 * UTF-8) and its label is in 0..BFS_SHARD_LABEL_MAX.
 */
#ifndef BATCHFS_TESTS_FUZZ_RECORD_CHECK_H
#define BATCHFS_TESTS_FUZZ_RECORD_CHECK_H

#include "engine/dataset/pack.h"
#include "engine/dataset/record.h"
#include "engine/dataset/shard.h"
#include "base/utf8.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RCHECK(c)                                                                                  \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "record_check: check failed at line %d: %s\n", __LINE__, #c);          \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

typedef struct record_fuzz {
    int src;         /* BFS_SRC_* */
    int made;        /* schemas tried */
    int ok[2];       /* schema k made */
    bfs_schema s[2]; /* 0: every member; 1: the --field set */
} record_fuzz;

static void record_one_line(const char *m, size_t cap)
{
    RCHECK(memchr(m, 0, cap) && m[0] && !strchr(m, '\n'));
}

/* A deep copy of m (JSON values shared: conversion only reads them). */
static void record_copy(const bfs_members *m, bfs_members *out)
{
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < m->n; i++) {
        const bfs_member *v = &m->v[i];
        size_t bytes = v->type == BFS_MEMBER_INTS     ? v->len * 8
                       : v->type == BFS_MEMBER_FLOATS ? v->len * 4
                                                      : v->len;
        void *d = NULL;
        if (v->data) {
            RCHECK(d = malloc(bytes ? bytes : 1));
            memcpy(d, v->data, bytes);
        }
        RCHECK(!bfs_members_add(out, v->name, strlen(v->name), v->type, d, v->len,
                                v->json ? json_incref((json_t *)v->json) : NULL));
        out->v[out->n - 1].bad = v->bad, out->v[out->n - 1].why = v->why;
    }
}

static void record_check_one(const bfs_schema *s, const bfs_record *r)
{
    RCHECK(r->label <= BFS_SHARD_LABEL_MAX);
    for (uint32_t k = 0; k < s->n; k++) {
        const bfs_field *d = &s->f[k];
        const bfs_value *v = &r->v[k];
        if (!v->len)
            RCHECK(k > 0 && ((d->flags & BFS_FIELDF_OPTIONAL) || d->kind != BFS_FIELD_IMAGE));
        if (k == 0)
            RCHECK(v->data && v->len);
        if (d->kind == BFS_FIELD_IMAGE || !v->len)
            continue;
        RCHECK((uint64_t)v->count * bfs_fdt_size(d->dtype) == v->len);
        uint64_t per = 1;
        for (unsigned j = 0; j < d->rank; j++)
            per *= d->shape[j];
        RCHECK(d->flags & BFS_FIELDF_VARIABLE ? v->count % per == 0 : v->count == per);
        if (d->kind == BFS_FIELD_TEXT)
            RCHECK(bfs_utf8_valid(v->data, v->len));
        if (d->follows != BFS_FIELD_NONE)
            RCHECK((uint64_t)v->count * 4 == r->v[d->follows].count);
        for (size_t b = 0; b < v->len; b += 61)
            (void)*(volatile uint8_t *)(v->data + b);
    }
}

/* One sample's members: the schemas from the first, then converted by each. */
static void record_fuzz_sample(record_fuzz *rf, const bfs_members *m)
{
    static const char *const specs_txt[] = {"image=image",
                                            "image2=png:image:optional",
                                            "caption=txt:text:optional",
                                            "caption2=caption:text:optional",
                                            "boxes=json:boxes:boxes:optional",
                                            "classes=json:classes:array:i64:follows=boxes:optional",
                                            "meta=json:bytes:optional",
                                            "arr=npy:array:optional",
                                            "label=cls:label"};
    char err[512];
    if (!rf->made) {
        rf->made = 1;
        for (int k = 0; k < 2; k++) {
            bfs_field_spec specs[16];
            size_t ns = 0;
            if (k == 1)
                for (size_t i = 0; i < sizeof specs_txt / sizeof *specs_txt; i++) {
                    int rc = bfs_field_spec_parse(specs_txt[i], &specs[ns], err, sizeof err);
                    RCHECK(rc == 0);
                    if (rf->src != BFS_SRC_WDS && !strcmp(specs[ns].member, "cls"))
                        strcpy(specs[ns].member, "label");
                    if (rf->src == BFS_SRC_WDS && !strcmp(specs[ns].member, "image"))
                        strcpy(specs[ns].member, "jpg");
                    ns++;
                }
            memset(err, 'x', sizeof err);
            int rc = bfs_schema_make(&rf->s[k], rf->src, specs, ns, m, NULL, NULL, err, sizeof err);
            RCHECK(rc == 0 || rc == -EINVAL);
            if (rc) {
                record_one_line(err, sizeof err);
                continue;
            }
            rf->ok[k] = 1;
            RCHECK(rf->s[k].n >= 1 && rf->s[k].n <= BFS_FIELD_MAX);
            for (uint32_t f = 0; f < rf->s[k].n; f++)
                RCHECK(bfs_field_check(&rf->s[k].f[f], f, rf->s[k].n, err, sizeof err) == 0);
        }
    }
    for (int k = 0; k < 2; k++) {
        if (!rf->ok[k])
            continue;
        bfs_members c;
        record_copy(m, &c);
        bfs_record r;
        char why[700];
        const char *w = NULL;
        int rc = bfs_schema_convert(&rf->s[k], &c, &r, why, sizeof why, &w);
        RCHECK(rc == 0 || rc == 1);
        if (rc == 1) {
            RCHECK(w);
            record_one_line(w, strlen(w) + 1);
        } else {
            record_check_one(&rf->s[k], &r);
            bfs_record_free(&r);
        }
        bfs_members_free(&c);
    }
}

#endif
