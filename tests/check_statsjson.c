/*
 * check_statsjson.c — programs/statsjson (the strict JSON parser of /stats) and
 * programs/top_render.c (bfs_top_render): valid texts and their values, a long
 * list of texts RFC 8259 refuses, each with its error, the bounds (depth, values, size),
 * path lookups, and the plain line and full-screen frame of `batchfs top` for known pairs
 * of samples (rates from differences, hit rates, missing keys as "-", a restarted daemon,
 * strings that try to move the cursor). Inputs are copied into buffers of exactly their
 * size, so an ASan build catches a read past the end.
 */
#include "programs/statsjson.h"
#include "programs/top.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* parse text[0..len) from a buffer of exactly len bytes */
static int parse_n(const char *text, size_t len, sj_doc **d, char *err, size_t errlen)
{
    char *copy = malloc(len ? len : 1);
    ck_assert_ptr_nonnull(copy);
    memcpy(copy, text, len);
    int rc = sj_parse(copy, len, d, err, errlen);
    free(copy);
    return rc;
}

static sj_doc *parse_ok(const char *text)
{
    sj_doc *d = NULL;
    char err[256];
    int rc = parse_n(text, strlen(text), &d, err, sizeof err);
    ck_assert_msg(rc == 0, "refused %s: %d %s", text, rc, err);
    ck_assert_ptr_nonnull(d);
    return d;
}

static double get(const sj_doc *d, const char *path)
{
    double x = -12345;
    ck_assert_msg(sj_get_num(d, path, &x) == 0, "no number at %s", path);
    return x;
}

START_TEST(parse_values)
{
    sj_doc *d = parse_ok(" \t\r\n{\"a\": {\"b\": [10, {\"c\": -2.5e3}, true, false, null]},"
                         " \"s\": \"x\", \"e\": [], \"o\": {}, \"n\": -0, \"z\": 0.125,"
                         " \"big\": 1.5E+300, \"tiny\": 1e-400 } \n");
    ck_assert_int_eq(sj_type(d, SJ_ROOT), SJ_OBJECT);
    ck_assert_int_eq(sj_count(d, SJ_ROOT), 8);
    ck_assert(get(d, "a.b[0]") == 10);
    ck_assert(get(d, "a.b.0") == 10);
    ck_assert(get(d, "a.b[1].c") == -2500);
    ck_assert(get(d, "a.b.1.c") == -2500);
    ck_assert_int_eq(sj_type(d, sj_lookup(d, SJ_ROOT, "a.b[2]")), SJ_TRUE);
    ck_assert_int_eq(sj_type(d, sj_lookup(d, SJ_ROOT, "a.b[3]")), SJ_FALSE);
    ck_assert_int_eq(sj_type(d, sj_lookup(d, SJ_ROOT, "a.b[4]")), SJ_NULL);
    ck_assert_int_eq(sj_lookup(d, SJ_ROOT, "a.b[5]"), -1);
    ck_assert_str_eq(sj_get_str(d, "s"), "x");
    ck_assert_int_eq(sj_count(d, sj_lookup(d, SJ_ROOT, "e")), 0);
    ck_assert_int_eq(sj_count(d, sj_lookup(d, SJ_ROOT, "o")), 0);
    ck_assert_int_eq(sj_child(d, sj_lookup(d, SJ_ROOT, "e"), 0), -1);
    ck_assert(get(d, "z") == 0.125);
    ck_assert(get(d, "big") == 1.5e300);
    ck_assert(get(d, "tiny") == 0); /* underflow is not an error: the nearest double */
    /* the wrong type: -EINVAL; missing: -ENOENT; *out untouched */
    double x = 7;
    ck_assert_int_eq(sj_get_num(d, "s", &x), -EINVAL);
    ck_assert_int_eq(sj_get_num(d, "nope", &x), -ENOENT);
    ck_assert(x == 7);
    ck_assert_ptr_null(sj_get_str(d, "z"));
    /* keys in document order, through sj_child/sj_next */
    const char *want[] = {"a", "s", "e", "o", "n", "z", "big", "tiny"};
    int m = sj_child(d, SJ_ROOT, 0);
    for (int i = 0; i < 8; i++, m = sj_next(d, m)) {
        size_t n;
        ck_assert_str_eq(sj_key(d, m, &n), want[i]);
        ck_assert_uint_eq(n, strlen(want[i]));
    }
    ck_assert_int_eq(m, -1);
    sj_free(d);

    /* scalars at the top */
    d = parse_ok("42");
    ck_assert(get(d, "") == 42);
    sj_free(d);
    d = parse_ok("\"top\"");
    ck_assert_str_eq(sj_get_str(d, ""), "top");
    sj_free(d);
    sj_free(NULL);
}
END_TEST

START_TEST(parse_strings)
{
    sj_doc *d = parse_ok("[\"\\\"\\\\\\/\\b\\f\\n\\r\\t\", \"\\u0041\\u00e9\\u20ac\\ud83d\\ude00\","
                         " \"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\", \"a\\u0000b\", \"\"]");
    size_t n;
    const char *s = sj_str(d, sj_lookup(d, SJ_ROOT, "[0]"), &n);
    ck_assert_uint_eq(n, 8);
    ck_assert_mem_eq(s, "\"\\/\b\f\n\r\t", 9);
    s = sj_str(d, sj_lookup(d, SJ_ROOT, "[1]"), &n);
    ck_assert_str_eq(s, "A\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
    ck_assert_uint_eq(n, strlen(s));
    ck_assert_str_eq(sj_get_str(d, "[2]"), "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    s = sj_str(d, sj_lookup(d, SJ_ROOT, "[3]"), &n);
    ck_assert_uint_eq(n, 3);
    ck_assert_mem_eq(s, "a\0b", 4);
    ck_assert_str_eq(sj_get_str(d, "[4]"), "");
    sj_free(d);

    /* escaped keys are looked up decoded; a duplicate key is refused (jansson's
     * JSON_REJECT_DUPLICATES: /stats never repeats one, and a reader must not guess) */
    d = parse_ok("{\"\\u0041b\": 1, \"k\": 2}");
    ck_assert(get(d, "Ab") == 1);
    ck_assert(get(d, "k") == 2);
    sj_free(d);
    char err[256];
    ck_assert_int_eq(parse_n("{\"k\": 2, \"k\": 3}", 16, &d, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "duplicate object key"), "%s", err);
}
END_TEST

static const struct {
    const char *text;
    size_t len; /* 0: strlen */
    int rc;
    const char *msg; /* a piece of the message */
} rejects[] = {
    {"", 0, -EINVAL, "byte 0: unexpected token near end of file"},
    {"   ", 0, -EINVAL, "byte 3"},
    {"{", 0, -EINVAL, "string or '}' expected"},
    {"[", 0, -EINVAL, "']' expected"},
    {"[1,]", 0, -EINVAL, "byte 4: unexpected token near ']'"},
    {"{\"a\":1,}", 0, -EINVAL, "string or '}' expected"},
    {"[1 2]", 0, -EINVAL, "']' expected near '2'"},
    {"{\"a\" 1}", 0, -EINVAL, "':' expected"},
    {"{1: 2}", 0, -EINVAL, "string or '}' expected near '1'"},
    {"{'a': 1}", 0, -EINVAL, "string or '}' expected near '''"},
    {"01", 0, -EINVAL, "invalid token near '0'"},
    {"-01", 0, -EINVAL, "invalid token near '-0'"},
    {"1.", 0, -EINVAL, "invalid token near '1.'"},
    {".5", 0, -EINVAL, "invalid token near '.'"},
    {"+1", 0, -EINVAL, "invalid token near '+'"},
    {"-", 0, -EINVAL, "invalid token near '-'"},
    {"1e", 0, -EINVAL, "invalid token near '1e'"},
    {"1e+", 0, -EINVAL, "invalid token near '1e+'"},
    {"0x10", 0, -EINVAL, "end of file expected near 'x'"},
    {"1e400", 0, -EINVAL, "real number overflow"},
    {"-1e400", 0, -EINVAL, "real number overflow"},
    {"NaN", 0, -EINVAL, "invalid token near 'NaN'"},
    {"Infinity", 0, -EINVAL, "invalid token near 'Infinity'"},
    {"tru", 0, -EINVAL, "invalid token near 'tru'"},
    {"nul", 0, -EINVAL, "invalid token near 'nul'"},
    {"truex", 0, -EINVAL, "invalid token near 'truex'"},
    {"[1] x", 0, -EINVAL, "byte 5: end of file expected"},
    {"{} {}", 0, -EINVAL, "end of file expected near '{'"},
    {"\"abc", 0, -EINVAL, "premature end of input"},
    {"\"a\nb\"", 0, -EINVAL, "unexpected newline"},
    {"\"a\tb\"", 0, -EINVAL, "control character 0x9"},
    {"\"\\x\"", 0, -EINVAL, "invalid escape"},
    {"\"\\u12\"", 0, -EINVAL, "invalid escape"},
    {"\"\\ud800\"", 0, -EINVAL, "invalid Unicode '\\uD800'"},
    {"\"\\ud800\\u0041\"", 0, -EINVAL, "invalid Unicode '\\uD800\\u0041'"},
    {"\"\\udc00\"", 0, -EINVAL, "invalid Unicode '\\uDC00'"},
    {"\"\xc0\xaf\"", 0, -EINVAL, "unable to decode byte 0xc0"},         /* overlong '/' */
    {"\"\xe0\x80\xaf\"", 0, -EINVAL, "unable to decode byte 0xe0"},     /* overlong, 3 bytes */
    {"\"\xed\xa0\x80\"", 0, -EINVAL, "unable to decode byte 0xed"},     /* a surrogate in UTF-8 */
    {"\"\xf4\x90\x80\x80\"", 0, -EINVAL, "unable to decode byte 0xf4"}, /* above U+10FFFF */
    {"\"\xc3\"", 0, -EINVAL, "unable to decode byte 0xc3"},             /* cut */
    {"\"\x80\"", 0, -EINVAL, "unable to decode byte 0x80"}, /* a lone continuation byte */
    {"\"\xff\"", 0, -EINVAL, "unable to decode byte 0xff"},
    {"[1,\0]", 5, -EINVAL, "byte 3: a NUL byte"},
    {"\"a\0\"", 4, -EINVAL, "byte 2: a NUL byte"},
    {"1\0", 2, -EINVAL, "byte 1: a NUL byte"},
    {"{\"a\\u0000b\": 1}", 0, -EINVAL, "NUL byte in object key"},
    {"{\"k\": 1, \"k\": 2}", 0, -EINVAL, "duplicate object key"},
    {"// c\n1", 0, -EINVAL, "invalid token near '/'"},
    {"[1]/**/", 0, -EINVAL, "end of file expected near '/'"},
};

START_TEST(parse_rejects)
{
    for (size_t i = 0; i < sizeof rejects / sizeof rejects[0]; i++) {
        sj_doc *d = (sj_doc *)&d;
        char err[256];
        size_t len = rejects[i].len ? rejects[i].len : strlen(rejects[i].text);
        int rc = parse_n(rejects[i].text, len, &d, err, sizeof err);
        ck_assert_msg(rc == rejects[i].rc, "#%zu %s: rc %d", i, rejects[i].text, rc);
        ck_assert_ptr_null(d);
        ck_assert_msg(strstr(err, rejects[i].msg), "#%zu %s: message '%s' lacks '%s'", i,
                      rejects[i].text, err, rejects[i].msg);
        /* no err buffer: same answer */
        ck_assert_int_eq(parse_n(rejects[i].text, len, &d, NULL, 0), rc);
    }
}
END_TEST

/* n nested arrays around 1 */
static char *nested(int n)
{
    char *s = malloc(2 * (size_t)n + 2);
    ck_assert_ptr_nonnull(s);
    memset(s, '[', (size_t)n);
    s[n] = '1';
    memset(s + n + 1, ']', (size_t)n);
    s[2 * n + 1] = 0;
    return s;
}

START_TEST(parse_bounds)
{
    sj_doc *d;
    char err[256];
    char *s = nested(SJ_MAX_DEPTH);
    d = parse_ok(s);
    free(s);
    char path[4 * SJ_MAX_DEPTH + 1] = "";
    for (int i = 0; i < SJ_MAX_DEPTH; i++)
        strcat(path, "[0]");
    ck_assert(get(d, path) == 1);
    sj_free(d);
    s = nested(SJ_MAX_DEPTH + 1);
    ck_assert_int_eq(parse_n(s, strlen(s), &d, err, sizeof err), -E2BIG);
    ck_assert_ptr_nonnull(strstr(err, "nested"));
    free(s);
    /* deep enough to overflow the stack without the bound */
    s = nested(1000000);
    ck_assert_int_eq(parse_n(s, strlen(s), &d, err, sizeof err), -E2BIG);
    free(s);

    /* values: SJ_MAX_VALUES in all (the array and its elements) is fine, one more is not */
    size_t cap = 2 * (size_t)SJ_MAX_VALUES + 8;
    s = malloc(cap);
    ck_assert_ptr_nonnull(s);
    size_t n = 0;
    s[n++] = '[';
    for (int i = 0; i < SJ_MAX_VALUES - 1; i++)
        s[n++] = '0', s[n++] = ',';
    s[n - 1] = ']';
    ck_assert_int_eq(parse_n(s, n, &d, err, sizeof err), 0);
    ck_assert_int_eq(sj_count(d, SJ_ROOT), SJ_MAX_VALUES - 1);
    sj_free(d);
    s[n - 1] = ',', s[n++] = '0', s[n++] = ']';
    ck_assert_int_eq(parse_n(s, n, &d, err, sizeof err), -E2BIG);
    ck_assert_ptr_nonnull(strstr(err, "values"));
    free(s);

    /* text size */
    s = malloc((size_t)SJ_MAX_TEXT + 1);
    ck_assert_ptr_nonnull(s);
    memset(s, ' ', (size_t)SJ_MAX_TEXT + 1);
    s[0] = '1';
    ck_assert_int_eq(sj_parse(s, (size_t)SJ_MAX_TEXT, &d, err, sizeof err), 0);
    sj_free(d);
    ck_assert_int_eq(sj_parse(s, (size_t)SJ_MAX_TEXT + 1, &d, err, sizeof err), -E2BIG);
    ck_assert_ptr_null(d);
    free(s);

    /* a message longer than the buffer is cut, NUL-terminated */
    char small[8];
    ck_assert_int_eq(parse_n("[1 2]", 5, &d, small, sizeof small), -EINVAL);
    ck_assert_uint_eq(strlen(small), sizeof small - 1);
}
END_TEST

START_TEST(lookup_paths)
{
    sj_doc *d = parse_ok("{\"a\": {\"b\": [{\"c\": 1}, {\"c\": 2}]}, \"0\": 5, \"x y\": 6,"
                         " \"arr\": [[7, 8], [9]]}");
    ck_assert(get(d, "a.b[1].c") == 2);
    ck_assert(get(d, "a.b.1.c") == 2);
    ck_assert(get(d, "a.b.[1].c") == 2);
    ck_assert(get(d, "0") == 5);   /* a key of digits on an object */
    ck_assert(get(d, "x y") == 6); /* any byte but . [ ] */
    ck_assert(get(d, "arr[0][1]") == 8);
    ck_assert(get(d, "arr[1].0") == 9);
    ck_assert(get(d, "arr.0.1") == 8);
    static const char *const bad[] = {
        "a..b",
        ".a",
        "a.",
        "a]",
        "a[",
        "a[x]",
        "a.b[]",
        "a.b[-1]",
        "a.b[2]",
        "a.b.2",
        "a.b.x",
        "a[0]",
        "a.c",
        "0.x",
        "arr[0]x",
        "arr[0]]",
        "arr[1234567890]",
        "arr[00000000000]",
        "a.b[0].c.d",
        "nope",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(sj_lookup(d, SJ_ROOT, bad[i]) == -1, "%s found", bad[i]);
    ck_assert_int_eq(sj_lookup(d, SJ_ROOT, ""), SJ_ROOT);
    ck_assert_int_eq(sj_lookup(d, 999, "a"), -1);
    ck_assert_int_eq(sj_lookup(d, -1, ""), -1);
    ck_assert_int_eq(sj_lookup(NULL, SJ_ROOT, "a"), -1);
    ck_assert_int_eq(sj_lookup(d, SJ_ROOT, NULL), -1);
    /* relative to a base */
    int b = sj_lookup(d, SJ_ROOT, "a.b");
    ck_assert(sj_num(d, sj_lookup(d, b, "[0].c"), &(double){0}) == 0);
    ck_assert_int_eq(sj_type(d, -1), -1);
    ck_assert_int_eq(sj_count(d, -1), -1);
    ck_assert_ptr_null(sj_key(d, SJ_ROOT, NULL));
    sj_free(d);
}
END_TEST

/* ---- bfs_top_render ---------------------------------------------------------------------- */

static const char prev_json[] =
    "{\"version\": \"0.2.0\", \"fingerprint\": \"00000000000000ff\", \"uptime_s\": 10.0,"
    " \"threads\": 4, \"images\": 100, \"images_per_s\": 10.0,"
    " \"batches\": {\"served\": 10, \"computed\": 12, \"in_flight\": 0, \"opened_bytes\": 0},"
    " \"cache\": {\"hits\": 10, \"joins\": 0, \"misses\": 5},"
    " \"sample_cache\": {\"hits\": 0, \"misses\": 0},"
    " \"reads\": {\"bytes\": 0},"
    " \"prefetch\": {\"depth\": 3, \"streams\": [{\"id\": 1, \"pid\": 4242, \"epoch\": 0,"
    " \"batch\": 10, \"stride\": 1, \"depth\": 3, \"batches\": 10}]}}";

static const char cur_json[] =
    "{\"version\": \"0.2.0\", \"fingerprint\": \"00000000000000ff\", \"uptime_s\": 12.0,"
    " \"threads\": 6, \"images\": 300, \"images_per_s\": 25.0,"
    " \"stage_us_per_image\": {\"read\": 10.0, \"decode\": 70.0, \"resize\": 15.0,"
    " \"encode\": 5.0},"
    " \"batches\": {\"served\": 20, \"computed\": 24, \"in_flight\": 2, \"failed\": 0,"
    " \"opened_bytes\": 419430400},"
    " \"cache\": {\"hits\": 19, \"joins\": 0, \"misses\": 6, \"bytes\": 1048576,"
    " \"budget_bytes\": 1073741824},"
    " \"sample_cache\": {\"hits\": 100, \"misses\": 300, \"bytes\": 0, \"budget_bytes\": 1},"
    " \"reads\": {\"bytes\": 2097152},"
    " \"autotune\": {\"threads\": {\"value\": 6, \"why\": \"six \\u001b[2J workers\"},"
    " \"prefetch\": {\"value\": 4, \"why\": \"depth four\"}, \"cache_bytes\": {\"value\":"
    " 536870912, \"why\": \"half\"}, \"period_ms\": 2000, \"model\": {\"sample_us\":"
    " 70.0, \"batch_header_us\": 9.5}, \"readers\": [{\"id\": 1, \"epoch\": 0, \"batch\": 20, "
    "\"stride\": 1,"
    " \"consume_batch_per_s\": 2.5, \"think_ms\": 400.0, \"depth\": 4, \"predicted_wait_ms\":"
    " 3.5}, {\"id\": 7, \"epoch\": 1, \"batch\": 3, \"stride\": 2, \"think_ms\": 9.0,"
    " \"depth\": 2, \"predicted_wait_ms\": 0.25}]},"
    " \"unknown\": {\"ignored\": [1, 2, 3]},"
    " \"prefetch\": {\"depth\": 4, \"streams\": [{\"id\": 1, \"pid\": 4242, \"epoch\": 0,"
    " \"batch\": 20, \"stride\": 1, \"depth\": 4, \"batches\": 20, \"step_ms\": 400.0,"
    " \"wait_ms\": 1.5, \"idle_s\": 0.1}]}}";

/* render into a malloc'ed string */
static char *render(const sj_doc *prev, const sj_doc *cur, double dt, int screen, int cols,
                    int rows)
{
    setenv("TZ", "UTC", 1);
    tzset();
    bfs_top_view v = {.mnt = "/mnt/t",
                      .screen = screen,
                      .cols = cols,
                      .rows = rows,
                      .when = 86400 + 3661,
                      .interval_s = 2};
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    ck_assert_ptr_nonnull(f);
    bfs_top_render(&v, prev, cur, dt, f);
    ck_assert_int_eq(fclose(f), 0);
    return buf;
}

START_TEST(plain_line)
{
    sj_doc *p = parse_ok(prev_json), *c = parse_ok(cur_json);
    /* images 100 -> 300 and 10 -> 20 batches in 2 s; memory hits 9 of 10 lookups; sample
     * cache 100 of 400; no cache_dir; 400 MiB of batch files opened (reads: 2 MiB) */
    char *s = render(p, c, 2.0, 0, 80, 24);
    ck_assert_str_eq(s, "1970-01-02T01:01:01 images/s=100.0 avg_images/s=25.0 batches/s=5.00 "
                        "served=20 computed=24 in_flight=2 hit%=90.0 dir_hit%=- "
                        "sample_hit%=25.0 threads=6 prefetch=4 readers=1 served_MiB/s=200.0\n");
    free(s);
    /* the first sample: no rates */
    s = render(NULL, c, 0, 0, 80, 24);
    ck_assert_str_eq(s, "1970-01-02T01:01:01 images/s=- avg_images/s=25.0 batches/s=- "
                        "served=20 computed=24 in_flight=2 hit%=- dir_hit%=- sample_hit%=- "
                        "threads=6 prefetch=4 readers=1 served_MiB/s=-\n");
    free(s);
    /* the same sample twice: rates 0, hit rates unknown (no lookups) */
    s = render(c, c, 1.0, 0, 80, 24);
    ck_assert_ptr_nonnull(strstr(s, " images/s=0.0 "));
    ck_assert_ptr_nonnull(strstr(s, " batches/s=0.00 "));
    ck_assert_ptr_nonnull(strstr(s, " hit%=- "));
    free(s);
    /* a new daemon (uptime went back): no rates against the old one */
    s = render(c, p, 2.0, 0, 80, 24);
    ck_assert_ptr_nonnull(strstr(s, " images/s=- "));
    free(s);
    sj_free(c);
    /* another fingerprint: the same */
    c = parse_ok("{\"version\": \"0.2.0\", \"fingerprint\": \"1\", \"uptime_s\": 99,"
                 " \"images\": 1000}");
    s = render(p, c, 2.0, 0, 80, 24);
    ck_assert_ptr_nonnull(strstr(s, " images/s=- "));
    free(s);
    sj_free(c);
    /* nothing but a version: every field "-" */
    c = parse_ok("{\"version\": \"x\"}");
    s = render(p, c, 2.0, 0, 80, 24);
    ck_assert_str_eq(s, "1970-01-02T01:01:01 images/s=- avg_images/s=- batches/s=- served=- "
                        "computed=- in_flight=- hit%=- dir_hit%=- sample_hit%=- threads=- "
                        "prefetch=- readers=- served_MiB/s=-\n");
    free(s);
    sj_free(c);
    /* wrong types are "-" too; readers from autotune when there are no streams */
    c = parse_ok("{\"version\": \"x\", \"images\": \"many\", \"threads\": [4],"
                 " \"autotune\": {\"readers\": [{}, {}]}}");
    s = render(p, c, 2.0, 0, 80, 24);
    ck_assert_ptr_nonnull(strstr(s, " images/s=- "));
    ck_assert_ptr_nonnull(strstr(s, " threads=- "));
    ck_assert_ptr_nonnull(strstr(s, " readers=2 "));
    free(s);
    sj_free(c);
    sj_free(p);
}
END_TEST

/* Visible characters of a frame's lines, escapes removed; *nlines lines. */
static char *visible(const char *frame, int *nlines)
{
    char *out = malloc(strlen(frame) + 1);
    ck_assert_ptr_nonnull(out);
    size_t o = 0;
    *nlines = 1;
    for (const char *p = frame; *p; p++) {
        if (*p == '\033') {
            p++;
            while (p[1] && !(p[1] >= '@' && p[1] <= '~' && p[1] != '['))
                p++;
            p++;
            continue;
        }
        if (*p == '\r')
            continue;
        if (*p == '\n')
            ++*nlines;
        out[o++] = *p;
    }
    out[o] = 0;
    return out;
}

START_TEST(screen_frame)
{
    sj_doc *p = parse_ok(prev_json), *c = parse_ok(cur_json);
    char *s = render(p, c, 2.0, 1, 120, 50);
    ck_assert_msg(!strncmp(s, "\033[H", 3), "frame does not start at home");
    ck_assert_msg(strstr(s, "\033[J") != NULL, "frame does not clear below");
    int lines;
    char *v = visible(s, &lines);
    ck_assert_int_le(lines, 50);
    static const char *const want[] = {
        "batchfs top  /mnt/t",
        "01:01:01",
        "up 12.0s",
        "batchfs 0.2.0",
        "100.0 images/s now   25.0 avg   5.00 batches/s   200 MiB/s served   1.00 MiB/s daemon "
        "reads",
        "served 20   computed 24",
        "threads 6   prefetch depth 4",
        "memory             90.0      76.0          19           6",
        "1.00 MiB / 1.00 GiB",
        "cache_dir             -         -           -           -                 - / -",
        "samples            25.0      25.0         100         300",
        "100.0 us of worker time",
        "decode         70.0 us    70.0%  |",
        "readers         2",
        /* stream 1 joined with autotune reader 1; 10 batches in 2 s */
        "       1     4242      0       20      1     4     5.00    400.0      1.5      3.5     "
        "0.1",
        /* autotune reader 7, no stream */
        "       7        -      1        3      2     2        -      9.0        -      0.2       "
        "-",
        "every 2000 ms",
        "threads       6           six ?[2J workers",
        "prefetch      4           depth four",
        "cache         512 MiB     half",
        "sample 70.0 us   batch header 9.5 us",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(v, want[i]), "frame lacks '%s':\n%s", want[i], v);
    ck_assert_msg(!strstr(s, "\033[2J"), "a string from /stats reached the terminal raw");
    ck_assert_msg(!strstr(v, "unknown") && !strstr(v, "ignored"), "unknown keys shown");
    free(v);
    free(s);

    /* a short, narrow screen: at most rows lines of at most cols-1 characters; readers are
     * cut with a count, autotune keeps its lines */
    s = render(p, c, 2.0, 1, 40, 20);
    v = visible(s, &lines);
    ck_assert_int_le(lines, 20);
    for (char *l = strtok(v, "\n"); l; l = strtok(NULL, "\n"))
        ck_assert_msg(strlen(l) <= 39, "line of %zu characters: '%s'", strlen(l), l);
    free(v);
    free(s);
    s = render(p, c, 2.0, 1, 120, 21);
    v = visible(s, &lines);
    ck_assert_int_le(lines, 21);
    ck_assert_msg(strstr(v, "... 2 more") && strstr(v, "every 2000 ms") &&
                      strstr(v, "cache         512 MiB"),
                  "short screen:\n%s", v);
    free(v);
    free(s);

    /* cache_dir's batches not published: shown after its counts, only when there are */
    sj_free(c);
    c = parse_ok("{\"version\": \"x\", \"cache_dir\": {\"hits\": 5, \"misses\": 2,"
                 " \"unpublished_substituted\": 3, \"save_errors\": 4, \"no_space\": 5}}");
    s = render(NULL, c, 0, 1, 200, 50);
    v = visible(s, &lines);
    ck_assert_msg(strstr(v, "cache_dir") && strstr(v, "   unpublished (substitutes) 3") &&
                      strstr(v, "   save errors 4") && strstr(v, "   disk full 5"),
                  "cache_dir counters:\n%s", v);
    free(v);
    free(s);
    sj_free(c);
    c = parse_ok("{\"version\": \"x\", \"cache_dir\": {\"hits\": 5, \"misses\": 2,"
                 " \"unpublished_substituted\": 0, \"save_errors\": 0, \"no_space\": 0}}");
    s = render(NULL, c, 0, 1, 200, 50);
    v = visible(s, &lines);
    ck_assert_msg(!strstr(v, "unpublished") && !strstr(v, "save errors") && !strstr(v, "disk full"),
                  "a zero counter shown:\n%s", v);
    free(v);
    free(s);

    /* missing sections: "-" */
    sj_free(c);
    c = parse_ok("{\"version\": \"x\"}");
    s = render(NULL, c, 0, 1, 100, 50);
    v = visible(s, &lines);
    ck_assert_msg(strstr(v, "autotune        -") && strstr(v, "readers         -") &&
                      strstr(v, "read             - us"),
                  "empty stats:\n%s", v);
    free(v);
    free(s);
    sj_free(c);
    sj_free(p);
}
END_TEST

static Suite *statsjson_suite(void)
{
    Suite *s = suite_create("statsjson");
    TCase *t = tcase_create("parser");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, parse_values);
    tcase_add_test(t, parse_strings);
    tcase_add_test(t, parse_rejects);
    tcase_add_test(t, parse_bounds);
    tcase_add_test(t, lookup_paths);
    suite_add_tcase(s, t);
    TCase *r = tcase_create("render");
    tcase_add_test(r, plain_line);
    tcase_add_test(r, screen_frame);
    suite_add_tcase(s, r);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(statsjson_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
