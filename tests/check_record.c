/*
 * check_record.c — what mkbatchfs keeps of a sample beyond its image (record.h): --field
 * parsing and its ambiguities, schemas made from a first sample, every kind of value
 * converted (and every bad one refused with its reason), the manifest reader (JSON Lines,
 * RFC 4180 CSV) and every feature of a tf.train.Example.
 */
#include "engine/dataset/manifest.h"
#include "engine/dataset/record.h"
#include "engine/dataset/tfrecord.h"
#include "base/endian.h"

#include <check.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bfs_field_spec spec(const char *arg)
{
    bfs_field_spec s;
    char err[256];
    int rc = bfs_field_spec_parse(arg, &s, err, sizeof err);
    ck_assert_msg(rc == 0, "%s: %s", arg, err);
    return s;
}

static void add_bytes(bfs_members *m, const char *name, const char *data, size_t n)
{
    char *d = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(d);
    memcpy(d, data, n);
    ck_assert_int_eq(bfs_members_add(m, name, strlen(name), BFS_MEMBER_BYTES, d, n, NULL), 0);
}

static void add_str(bfs_members *m, const char *name, const char *s)
{
    add_bytes(m, name, s, strlen(s));
}

static void add_json(bfs_members *m, const char *name, const char *text)
{
    json_t *j = json_loads(text, JSON_DECODE_ANY, NULL);
    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(bfs_members_add(m, name, strlen(name), BFS_MEMBER_JSON, NULL, 0, j), 0);
}

START_TEST(spec_syntax)
{
    bfs_field_spec s = spec("caption=txt:text");
    ck_assert_str_eq(s.name, "caption");
    ck_assert_str_eq(s.member, "txt");
    ck_assert_str_eq(s.key, "");
    ck_assert_int_eq(s.kind, BFS_FIELD_TEXT);
    s = spec("box_classes=json:classes:array:i64:follows=boxes:optional");
    ck_assert_str_eq(s.member, "json");
    ck_assert_str_eq(s.key, "classes");
    ck_assert_int_eq(s.kind, BFS_FIELD_ARRAY);
    ck_assert_int_eq(s.dtype, BFS_FDT_I64);
    ck_assert_str_eq(s.follows, "boxes");
    ck_assert_int_eq(s.optional, 1);
    s = spec("label=json:label:label"); /* key label, kind label */
    ck_assert_str_eq(s.key, "label");
    ck_assert_int_eq(s.kind, BFS_SPEC_LABEL);
    s = spec("label=json:label"); /* the member itself as the label */
    ck_assert_str_eq(s.key, "");
    ck_assert_int_eq(s.kind, BFS_SPEC_LABEL);
    s = spec("x=json:boxes"); /* boxes is a kind: the member itself as boxes */
    ck_assert_str_eq(s.key, "");
    ck_assert_int_eq(s.kind, BFS_FIELD_BOXES);
    s = spec("x=json:coords"); /* a key, no kind */
    ck_assert_str_eq(s.key, "coords");
    ck_assert_int_eq(s.kind, 0);
    ck_assert_int_eq(s.dtype, -1);
    s = spec("img=image/encoded");
    ck_assert_str_eq(s.member, "image/encoded");
    s = spec("t=caption:tokens:u16");
    ck_assert_int_eq(s.kind, BFS_FIELD_TOKENS);
    ck_assert_int_eq(s.dtype, BFS_FDT_U16);
    const char *bad[] = {"caption",
                         "1x=txt",
                         "a-b=txt",
                         "x=",
                         "x=a::text",
                         "x=a:b:c:text",
                         "x=txt:tokens:i64",
                         "x=txt:text:follows=boxes",
                         "l=cls:label:optional",
                         "abcdefghijklmnopqrstuvwxyz0123456=txt"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        bfs_field_spec t;
        char err[256] = "";
        ck_assert_msg(bfs_field_spec_parse(bad[i], &t, err, sizeof err) == -EINVAL, "%s", bad[i]);
        ck_assert_msg(err[0] && !strchr(err, '\n'), "%s: no message", bad[i]);
    }
}
END_TEST

START_TEST(schema_wds_first_sample)
{
    bfs_members m = {0};
    add_str(&m, "cls", "3");
    add_str(&m, "jpg", "\xff\xd8\xff jpeg");
    add_str(&m, "json", "{\"boxes\": [[1, 2, 3, 4]]}");
    add_str(&m, "seg.png", "\x89PNG\r\n\x1a\n...");
    add_str(&m, "txt", "caf\xc3\xa9");
    add_str(&m, "xyz", "other");
    bfs_schema s;
    char err[512];
    ck_assert_int_eq(bfs_schema_make(&s, BFS_SRC_WDS, NULL, 0, &m, NULL, NULL, err, sizeof err), 0);
    ck_assert_int_eq(s.n, 5);
    const char *names[] = {"jpg", "json", "seg_png", "txt", "xyz"};
    const int kinds[] = {BFS_FIELD_IMAGE, BFS_FIELD_BYTES, BFS_FIELD_IMAGE, BFS_FIELD_TEXT,
                         BFS_FIELD_BYTES};
    for (uint32_t k = 0; k < s.n; k++) {
        ck_assert_str_eq(s.f[k].name, names[k]);
        ck_assert_int_eq(s.f[k].kind, kinds[k]);
        ck_assert_int_eq(!!(s.f[k].flags & BFS_FIELDF_OPTIONAL), k > 0);
    }
    ck_assert(s.has_label);
    bfs_record r;
    char why[512];
    const char *w;
    ck_assert_int_eq(bfs_schema_convert(&s, &m, &r, why, sizeof why, &w), 0);
    ck_assert_int_eq(r.label, 3);
    ck_assert_int_eq(r.v[3].len, 5);
    ck_assert(!memcmp(r.v[3].data, "caf\xc3\xa9", 5));
    ck_assert_int_eq(r.extra, 0);
    bfs_record_free(&r);
    /* a later sample: no txt (optional), an extra member, a bad caption elsewhere */
    bfs_members_clear(&m);
    add_str(&m, "jpg", "\xff\xd8\xff jpeg");
    add_str(&m, "cls", "1");
    add_str(&m, "extra", "x");
    ck_assert_int_eq(bfs_schema_convert(&s, &m, &r, why, sizeof why, &w), 0);
    ck_assert_int_eq(r.extra, 1);
    ck_assert_int_eq(r.v[3].len, 0);
    bfs_record_free(&r);
    bfs_members_clear(&m);
    add_str(&m, "jpg", "\xff\xd8\xff jpeg");
    add_str(&m, "cls", "1");
    add_str(&m, "txt", "caf\xe9");
    ck_assert_int_eq(bfs_schema_convert(&s, &m, &r, why, sizeof why, &w), 1);
    ck_assert_str_eq(w, "member 'txt': text that is not UTF-8 (field txt, text)");
    bfs_members_clear(&m);
    add_str(&m, "jpg", "\xff\xd8\xff jpeg"); /* no label: the .json has none either */
    ck_assert_int_eq(bfs_schema_convert(&s, &m, &r, why, sizeof why, &w), 1);
    ck_assert_str_eq(w, "no label (no .cls member, no .json member)");
    bfs_members_free(&m);
}
END_TEST

/* Convert one value of a JSON document under --field arg; returns 0 or 1 (why). */
static int convert_one(const char *arg, const char *json, bfs_value *out, char *why, size_t cap)
{
    bfs_field_spec sp[2] = {spec("image=jpg"), spec(arg)};
    bfs_members m = {0};
    add_str(&m, "jpg", "\xff\xd8\xff jpeg");
    add_str(&m, "json", json);
    bfs_schema s;
    char err[512];
    int rc = bfs_schema_make(&s, BFS_SRC_WDS, sp, 2, &m, NULL, NULL, err, sizeof err);
    ck_assert_msg(rc == 0, "%s: %s", arg, err);
    bfs_record r;
    const char *w = NULL;
    rc = bfs_schema_convert(&s, &m, &r, why, cap, &w);
    if (rc == 1 && w != why)
        snprintf(why, cap, "%s", w);
    if (rc == 0) {
        *out = r.v[1];
        r.v[1].data = NULL;
        bfs_record_free(&r);
    }
    bfs_members_free(&m);
    return rc;
}

START_TEST(values_numbers)
{
    bfs_value v;
    char why[512];
    ck_assert_int_eq(convert_one("b=json:b:boxes", "{\"b\": [[1.5, 2, 3, 4], [5, 6, 7, 8.25]]}", &v,
                                 why, sizeof why),
                     0);
    ck_assert_int_eq(v.count, 8);
    ck_assert_int_eq(v.len, 32);
    float f;
    uint32_t u = bfs_ld32(v.data + 28);
    memcpy(&f, &u, 4);
    ck_assert(f == 8.25f);
    free(v.data);
    ck_assert_int_eq(
        convert_one("b=json:b:boxes", "{\"b\": [1, 2, 3, 4, 5, 6, 7, 8]}", &v, why, sizeof why),
        0); /* flat, 4k values */
    ck_assert_int_eq(v.count, 8);
    free(v.data);
    ck_assert_int_eq(convert_one("b=json:b:boxes", "{\"b\": []}", &v, why, sizeof why), 0);
    ck_assert_int_eq(v.count, 0);
    free(v.data);
    ck_assert_int_eq(
        convert_one("c=json:c:array:i64", "{\"c\": [9007199254740993, -1]}", &v, why, sizeof why),
        0); /* exact beyond 2^53 */
    ck_assert_int_eq((int64_t)bfs_ld64(v.data), 9007199254740993LL);
    ck_assert_int_eq((int64_t)bfs_ld64(v.data + 8), -1);
    free(v.data);
    ck_assert_int_eq(convert_one("c=json:c:array:u8", "{\"c\": [0, 255]}", &v, why, sizeof why), 0);
    ck_assert_int_eq(v.len, 2);
    free(v.data);
    struct {
        const char *arg, *json, *why;
    } bad[] = {
        {"c=json:c:array:u8", "{\"c\": [256]}", "an integer out of the dtype's range"},
        {"c=json:c:array:i32", "{\"c\": [1.5]}", "a fraction where the dtype holds integers"},
        {"b=json:b:boxes", "{\"b\": [[1, 2, 3]]}", "rows of another shape than the field's"},
        {"b=json:b:boxes", "{\"b\": [1, 2, 3]}", "not whole rows"},
        {"b=json:b:boxes", "{\"b\": [[1, 2, 3, 4], [1, 2]]}", "lists of different lengths"},
        {"b=json:b:boxes", "{\"b\": [[1, 2, 3, 4], 5]}", "a list mixes numbers and lists"},
        {"b=json:b:boxes", "{\"b\": \"x\"}", "a string, not numbers"},
        {"t=json:t:text", "{\"t\": 5}", "not text (a string)"},
        {"b=json:b:boxes", "{\"b\": [[1,2,3,4]],}", "member 'json': not JSON"},
        {"b=json:b:boxes", "[1]", "not a JSON object (for key 'b')"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = convert_one(bad[i].arg, bad[i].json, &v, why, sizeof why);
        ck_assert_msg(rc == 1, "%s %s: converted", bad[i].arg, bad[i].json);
        ck_assert_msg(strstr(why, bad[i].why), "%s: '%s' lacks '%s'", bad[i].json, why, bad[i].why);
    }
}
END_TEST

START_TEST(values_npy_label_follows)
{
    /* a .npy of (2, 3) f32 as a variable array of rows of 3 */
    char npy[128] = "\x93NUMPY\x01\x00";
    const char *h = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    size_t hl = 118 - 10;
    memset(npy + 10, ' ', hl);
    memcpy(npy + 10, h, strlen(h));
    npy[10 + hl - 1] = '\n';
    npy[8] = (char)hl, npy[9] = 0;
    char data[128 + 24];
    memcpy(data, npy, 118);
    for (int i = 0; i < 6; i++) {
        float f = (float)i;
        memcpy(data + 118 + 4 * i, &f, 4);
    }
    bfs_members m = {0};
    add_str(&m, "jpg", "\xff\xd8\xff jpeg");
    add_bytes(&m, "npy", data, 118 + 24);
    add_str(&m, "cls", " 7\n");
    bfs_schema s;
    char err[512], why[512];
    const char *w;
    ck_assert_int_eq(bfs_schema_make(&s, BFS_SRC_WDS, NULL, 0, &m, NULL, NULL, err, sizeof err), 0);
    ck_assert_int_eq(s.n, 2);
    ck_assert_int_eq(s.f[1].kind, BFS_FIELD_ARRAY);
    ck_assert_int_eq(s.f[1].dtype, BFS_FDT_F32);
    ck_assert_int_eq(s.f[1].rank, 1);
    ck_assert_int_eq(s.f[1].shape[0], 3);
    bfs_record r;
    ck_assert_int_eq(bfs_schema_convert(&s, &m, &r, why, sizeof why, &w), 0);
    ck_assert_int_eq(r.label, 7);
    ck_assert_int_eq(r.v[1].count, 6);
    bfs_record_free(&r);
    *strchr(data + 10, '<') = '>'; /* big-endian: refused with the header named */
    bfs_members_clear(&m);
    add_str(&m, "jpg", "\xff\xd8\xff jpeg");
    add_bytes(&m, "npy", data, 118 + 24);
    add_str(&m, "cls", "7");
    ck_assert_int_eq(bfs_schema_convert(&s, &m, &r, why, sizeof why, &w), 1);
    ck_assert_msg(strstr(w, "member 'npy': bad .npy: .npy dtype '>f4'"), "%s", w);
    bfs_members_free(&m);

    /* manifests: labels from integers; follows pairs counts */
    bfs_field_spec sp[4] = {spec("image=image"), spec("boxes=b:boxes"),
                            spec("cls=c:array:i64:follows=boxes"), spec("label=label:label")};
    add_str(&m, "image", "\xff\xd8\xff jpeg");
    add_json(&m, "b", "[[0, 0, 1, 1], [1, 1, 2, 2]]");
    add_json(&m, "c", "[4, 5]");
    add_json(&m, "label", "[2]");
    ck_assert_int_eq(bfs_schema_make(&s, BFS_SRC_MANIFEST, sp, 4, &m, NULL, NULL, err, sizeof err),
                     0);
    ck_assert_int_eq(s.f[2].follows, 1);
    ck_assert_int_eq(bfs_schema_convert(&s, &m, &r, why, sizeof why, &w), 0);
    ck_assert_int_eq(r.label, 2);
    bfs_record_free(&r);
    bfs_members_clear(&m);
    add_str(&m, "image", "\xff\xd8\xff jpeg");
    add_json(&m, "b", "[[0, 0, 1, 1]]");
    add_json(&m, "c", "[4, 5]");
    add_json(&m, "label", "16777216");
    ck_assert_int_eq(bfs_schema_convert(&s, &m, &r, why, sizeof why, &w), 1);
    ck_assert_msg(strstr(w, "label out of range"), "%s", w);
    bfs_members_clear(&m);
    add_str(&m, "image", "\xff\xd8\xff jpeg");
    add_json(&m, "b", "[[0, 0, 1, 1]]");
    add_json(&m, "c", "[4, 5]");
    add_json(&m, "label", "1");
    ck_assert_int_eq(bfs_schema_convert(&s, &m, &r, why, sizeof why, &w), 1);
    ck_assert_str_eq(w, "field cls has 2 values, and its boxes boxes 1 boxes");
    bfs_members_clear(&m);
    add_str(&m, "image", "\xff\xd8\xff jpeg");
    add_json(&m, "label", "1");
    ck_assert_int_eq(bfs_schema_convert(&s, &m, &r, why, sizeof why, &w), 1);
    ck_assert_str_eq(w, "no member 'b' (field boxes is required)");
    bfs_members_free(&m);
}
END_TEST

typedef struct memsrc {
    const char *p;
    size_t n, pos, step;
} memsrc;

static ssize_t mem_read(void *ctx, void *buf, size_t n)
{
    memsrc *m = ctx;
    size_t k = m->n - m->pos < n ? m->n - m->pos : n;
    k = k > m->step ? m->step : k;
    memcpy(buf, m->p + m->pos, k);
    m->pos += k;
    return (ssize_t)k;
}

START_TEST(manifest_csv_rfc4180)
{
    static const char csv[] = "\xef\xbb\xbfimage,caption,boxes,label\r\n"
                              "a.jpg,\"a, \"\"quoted\"\" caption\",\"[[1,2,3,4]]\",3\r\n"
                              "b.jpg,\"two\r\nlines\",[],\r\n"
                              "\r\n"
                              "c.jpg,short\r\n"
                              "d.jpg,plain,\"[1.5]\",-2\r\n"
                              "e.jpg,1e999,,4\r\n"
                              "f.jpg,x,,x\0y";
    for (size_t step = 1; step <= 64; step += 21) {
        memsrc ms = {csv, sizeof csv - 1, 0, step};
        bfs_manifest m;
        bfs_manifest_init(&m, (bfs_shard_in){mem_read, &ms}, 1);
        bfs_members out = {0};
        const char *skip;
        char why[256], err[256];
        ck_assert_int_eq(bfs_manifest_next(&m, &out, &skip, why, sizeof why, err, sizeof err), 1);
        ck_assert_ptr_null(skip);
        ck_assert_str_eq(m.key, "line 2");
        ck_assert_int_eq(out.n, 4);
        ck_assert_str_eq(out.v[0].name, "image"); /* the byte order mark is not in the name */
        ck_assert_str_eq(json_string_value(out.v[1].json), "a, \"quoted\" caption");
        ck_assert(json_is_array((json_t *)out.v[2].json));
        ck_assert_int_eq(json_integer_value(out.v[3].json), 3);
        ck_assert_int_eq(bfs_manifest_next(&m, &out, &skip, why, sizeof why, err, sizeof err), 1);
        ck_assert_str_eq(m.key, "line 3");
        ck_assert_str_eq(json_string_value(out.v[1].json), "two\r\nlines");
        ck_assert(json_is_null((json_t *)out.v[3].json));
        ck_assert_int_eq(bfs_manifest_next(&m, &out, &skip, why, sizeof why, err, sizeof err), 1);
        ck_assert_str_eq(m.key, "line 6"); /* the record spanned lines 3-4; line 5 is blank */
        ck_assert_str_eq(skip, "2 cells, and the header has 4 columns");
        ck_assert_int_eq(bfs_manifest_next(&m, &out, &skip, why, sizeof why, err, sizeof err), 1);
        ck_assert_ptr_null(skip);
        ck_assert_str_eq(m.key, "line 7");
        ck_assert_int_eq(json_integer_value(out.v[3].json), -2);
        ck_assert_int_eq(bfs_manifest_next(&m, &out, &skip, why, sizeof why, err, sizeof err), 1);
        ck_assert_ptr_null(skip); /* 1e999: no JSON number (infinite), so text */
        ck_assert_str_eq(json_string_value(out.v[1].json), "1e999");
        ck_assert_int_eq(bfs_manifest_next(&m, &out, &skip, why, sizeof why, err, sizeof err), 1);
        ck_assert_str_eq(skip, "a NUL byte in the record");
        ck_assert_int_eq(bfs_manifest_next(&m, &out, &skip, why, sizeof why, err, sizeof err), 0);
        bfs_members_free(&out);
        bfs_manifest_close(&m);
    }
    static const char dup[] = "a,b,a\n1,2,3\n", open_quote[] = "a\n\"x\n";
    const char *srcs[] = {dup, open_quote},
               *msgs[] = {"names column 'a' twice", "line 2: a quoted cell is still open"};
    for (int i = 0; i < 2; i++) {
        memsrc ms = {srcs[i], strlen(srcs[i]), 0, 1000};
        bfs_manifest m;
        bfs_manifest_init(&m, (bfs_shard_in){mem_read, &ms}, 1);
        bfs_members out = {0};
        const char *skip;
        char why[256], err[256];
        ck_assert_int_eq(bfs_manifest_next(&m, &out, &skip, why, sizeof why, err, sizeof err),
                         -EINVAL);
        ck_assert_msg(strstr(err, msgs[i]), "%s", err);
        bfs_members_free(&out);
        bfs_manifest_close(&m);
    }
}
END_TEST

START_TEST(manifest_jsonl)
{
    static const char jl[] = "{\"image\": \"a.jpg\", \"caption\": \"x\"}\n"
                             "\n"
                             "[1, 2]\n"
                             "{\"image\": \"b.jpg\", \"image\": \"c.jpg\"}\n"
                             "{\"image\": \"d.jpg\"}";
    memsrc ms = {jl, sizeof jl - 1, 0, 7};
    bfs_manifest m;
    bfs_manifest_init(&m, (bfs_shard_in){mem_read, &ms}, 0);
    bfs_members out = {0};
    const char *skip;
    char why[256], err[256];
    ck_assert_int_eq(bfs_manifest_next(&m, &out, &skip, why, sizeof why, err, sizeof err), 1);
    ck_assert_int_eq(out.n, 2);
    ck_assert_int_eq(bfs_manifest_next(&m, &out, &skip, why, sizeof why, err, sizeof err), 1);
    ck_assert_str_eq(m.key, "line 3");
    ck_assert_str_eq(skip, "not one JSON object (another JSON value)");
    ck_assert_int_eq(bfs_manifest_next(&m, &out, &skip, why, sizeof why, err, sizeof err), 1);
    ck_assert_msg(skip && strstr(skip, "duplicate"), "a key twice: %s", skip ? skip : "kept");
    ck_assert_int_eq(bfs_manifest_next(&m, &out, &skip, why, sizeof why, err, sizeof err), 1);
    ck_assert_str_eq(m.key, "line 5");
    ck_assert_ptr_null(skip);
    ck_assert_int_eq(bfs_manifest_next(&m, &out, &skip, why, sizeof why, err, sizeof err), 0);
    bfs_members_free(&out);
    bfs_manifest_close(&m);
}
END_TEST

/* protobuf bits for an Example */
static size_t pb_len(uint8_t *o, int num, const uint8_t *p, size_t n)
{
    o[0] = (uint8_t)(num << 3 | 2), o[1] = (uint8_t)n; /* n < 128 */
    memcpy(o + 2, p, n);
    return n + 2;
}

static size_t entry(uint8_t *o, const char *key, const uint8_t *feat, size_t fn)
{
    uint8_t e[128];
    size_t k = pb_len(e, 1, (const uint8_t *)key, strlen(key));
    k += pb_len(e + k, 2, feat, fn);
    return pb_len(o, 1, e, k);
}

START_TEST(tfrecord_every_feature)
{
    uint8_t feats[512], ex[600], f[64], l[64];
    size_t n = 0, k;
    /* int64_list unpacked 5, 6 and packed 7 */
    k = 0;
    l[k++] = 0x08, l[k++] = 5, l[k++] = 0x08, l[k++] = 6, l[k++] = 0x0a, l[k++] = 1, l[k++] = 7;
    n += entry(feats + n, "ints", f, pb_len(f, 3, l, k));
    /* float_list packed 1.5, 2.5 */
    float fl[2] = {1.5f, 2.5f};
    n += entry(feats + n, "floats", f, pb_len(f, 2, l, pb_len(l, 1, (uint8_t *)fl, 8)));
    /* a bytes_list of one value, then the same key again with another: the last wins */
    n += entry(feats + n, "b", f, pb_len(f, 1, l, pb_len(l, 1, (const uint8_t *)"one", 3)));
    n += entry(feats + n, "b", f, pb_len(f, 1, l, pb_len(l, 1, (const uint8_t *)"two", 3)));
    /* a bytes_list of two values: bad */
    k = pb_len(l, 1, (const uint8_t *)"x", 1);
    k += pb_len(l + k, 1, (const uint8_t *)"y", 1);
    n += entry(feats + n, "two", f, pb_len(f, 1, l, k));
    /* an empty float_list: present, no values */
    n += entry(feats + n, "empty", f, pb_len(f, 2, l, 0));
    ck_assert_uint_lt(n, 127);
    size_t en = pb_len(ex, 1, feats, n);
    bfs_members m = {0};
    ck_assert_int_eq(bfs_tfr_example_members(ex, en, &m), 0);
    ck_assert_int_eq(m.n, 5);
    const bfs_member *v = bfs_members_find(&m, "ints", 0);
    ck_assert(v && v->type == BFS_MEMBER_INTS && v->len == 3);
    ck_assert_int_eq(((int64_t *)v->data)[2], 7);
    v = bfs_members_find(&m, "floats", 0);
    ck_assert(v && v->type == BFS_MEMBER_FLOATS && v->len == 2 && ((float *)v->data)[1] == 2.5f);
    v = bfs_members_find(&m, "b", 0);
    ck_assert(v && v->len == 3 && !memcmp(v->data, "two", 3));
    v = bfs_members_find(&m, "two", 0);
    ck_assert(v && v->bad);
    v = bfs_members_find(&m, "empty", 0);
    ck_assert(v && v->type == BFS_MEMBER_FLOATS && v->len == 0);
    ex[1] = (uint8_t)(n + 1); /* a length past its message */
    ck_assert_int_eq(bfs_tfr_example_members(ex, en, &m), -EINVAL);
    ck_assert_int_eq(m.n, 0);
    bfs_members_free(&m);
}
END_TEST

static Suite *record_suite(void)
{
    Suite *s = suite_create("record");
    TCase *t = tcase_create("core");
    tcase_add_test(t, spec_syntax);
    tcase_add_test(t, schema_wds_first_sample);
    tcase_add_test(t, values_numbers);
    tcase_add_test(t, values_npy_label_follows);
    tcase_add_test(t, manifest_csv_rfc4180);
    tcase_add_test(t, manifest_jsonl);
    tcase_add_test(t, tfrecord_every_feature);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(record_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
