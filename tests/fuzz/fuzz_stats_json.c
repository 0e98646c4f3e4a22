/*
 * fuzz_stats_json.c — libFuzzer target for the /stats JSON parser (programs/statsjson.c)
 * and for what `batchfs top` draws from any parsed document (programs/top_render.c,
 * bfs_top_render).
 *
 * For each input:
 *   1. sj_parse returns 0 with a document, or -EINVAL / -E2BIG / -ENOMEM with none and a
 *      message;
 *   2. an accepted document is walked in full: types in range, sj_count equal to the
 *      children reached through sj_child/sj_next, depth within SJ_MAX_DEPTH, every
 *      string and key readable to its length and NUL-terminated, numbers finite; every
 *      member is found again by sj_lookup of its key (when the key can be written as a
 *      path step) and every element by "[i]";
 *   3. round trip: the document written back as JSON parses, to a document that writes
 *      back to the same bytes;
 *   4. a path made of the input's first bytes is looked up without harm;
 *   5. the document is rendered as the full-screen view (width and height taken from
 *      the input) and as a plain line, against no previous sample, itself, and a real
 *      /stats of a mount (both ways round). The frame must hold at most `rows` lines of
 *      at most `cols - 1` visible characters, with no control byte but its own CSI
 *      escapes and CR LF; the plain line must be one line of 14 space-separated fields.
 * Seeds: tests/fuzz/seeds/stats_json/ (real /stats of a mount, with and without the
 * sample_cache, cache_dir and autotune sections, and odd but valid JSON).
 */
#include "programs/statsjson.h"
#include "programs/top.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_stats_json: %s:%d: contract violated: %s\n", __FILE__, __LINE__, \
                    #cond);                                                                        \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* A /stats of a mount with every optional section (the "previous sample" of use 5). */
static const char real_stats[] =
    "{\"version\": \"0.1.0\", \"fingerprint\": \"8fd3f094d935f900\", \"uptime_s\": 1.0, "
    "\"threads\": 2, \"images\": 28, \"images_per_s\": 27.7, \"stage_us_per_image\": "
    "{\"read\": 9.1, \"decode\": 101.9, \"resize\": 5.0, \"encode\": 0.9}, \"bad_samples\": 0, "
    "\"batches\": {\"served\": 4, \"computed\": 7, \"failed\": 0, \"in_flight\": 0, "
    "\"prefetched\": 6}, \"cache\": {\"hits\": 3, \"joins\": 0, \"misses\": 1, \"bytes\": "
    "50624, \"budget_bytes\": 5911537664}, \"cache_dir\": {\"hits\": 1, \"misses\": 2, "
    "\"usage_bytes\": 10, \"budget_bytes\": 100}, \"sample_cache\": {\"hits\": 0, \"misses\": "
    "28, \"bytes\": 379777, \"budget_bytes\": 16777216}, \"autotune\": {\"threads\": "
    "{\"value\": 2, \"why\": \"two\"}, \"prefetch\": {\"value\": 3, \"why\": \"three\"}, "
    "\"cache_bytes\": {\"value\": 5911537664, \"why\": \"\"}, \"period_ms\": 640, \"readers\": "
    "[{\"id\": 1, \"epoch\": 0, \"batch\": 3, \"stride\": 1, \"think_ms\": 2.0, \"depth\": 3, "
    "\"predicted_wait_ms\": 0.5}]}, \"reads\": {\"requests\": 0, \"bytes\": 0, \"errors\": 0}, "
    "\"prefetch\": {\"depth\": 3, \"streams\": [{\"id\": 1, \"pid\": 30989, \"epoch\": 0, "
    "\"batch\": 3, \"stride\": 1, \"depth\": 3, \"batches\": 4, \"step_ms\": 2.4, \"wait_ms\": "
    "0.0, \"idle_s\": 0.0}]}}";

/* Use 2: walk value v at depth; returns the number of values below and including v. */
static long walk(const sj_doc *d, int v, int depth, int *checks)
{
    int t = sj_type(d, v);
    CHECK(t >= SJ_NULL && t <= SJ_OBJECT);
    CHECK(depth <= SJ_MAX_DEPTH);
    double x = 12345;
    int nr = sj_num(d, v, &x);
    CHECK(t == SJ_NUMBER ? nr == 0 && isfinite(x) : nr == -EINVAL && x == 12345);
    size_t len = 7;
    const char *s = sj_str(d, v, &len);
    CHECK((s != NULL) == (t == SJ_STRING));
    if (s) {
        volatile char sink = 0;
        for (size_t i = 0; i < len; i++)
            sink ^= s[i];
        CHECK(s[len] == 0);
        (void)sink;
    }
    int n = sj_count(d, v);
    if (t != SJ_ARRAY && t != SJ_OBJECT) {
        CHECK(n == -1 && sj_child(d, v, 0) == -1);
        return 1;
    }
    CHECK(n >= 0);
    long total = 1;
    int i = 0;
    for (int c = sj_child(d, v, 0); c >= 0; c = sj_next(d, c), i++) {
        CHECK(i < n);
        size_t kn = 99;
        const char *k = sj_key(d, c, &kn);
        CHECK((k != NULL) == (t == SJ_OBJECT));
        if (k) {
            CHECK(k[kn] == 0);
            /* a key without '.', '[', ']' or NUL is a path step; the first member of that
             * name is found (duplicates are allowed) */
            if (kn && strlen(k) == kn && !strpbrk(k, ".[]") && (*checks)-- > 0) {
                int f = sj_lookup(d, v, k);
                size_t fn;
                CHECK(f >= 0);
                const char *fk = sj_key(d, f, &fn);
                CHECK(fk && fn == kn && !memcmp(fk, k, kn) && f <= c);
            }
        } else if ((*checks)-- > 0) {
            char p[32];
            snprintf(p, sizeof p, "[%d]", i);
            CHECK(sj_lookup(d, v, p) == c);
            snprintf(p, sizeof p, "%d", i);
            CHECK(sj_lookup(d, v, p) == c);
            CHECK(sj_child(d, v, i) == c);
        }
        total += walk(d, c, depth + 1, checks);
    }
    CHECK(i == n);
    CHECK(sj_child(d, v, n) == -1 && sj_child(d, v, -1) == -1);
    return total;
}

/* Use 3: write value v back as JSON. */
static void dump(const sj_doc *d, int v, FILE *f)
{
    size_t n;
    const char *s;
    double x;
    switch (sj_type(d, v)) {
    case SJ_NULL:
        fputs("null", f);
        return;
    case SJ_FALSE:
        fputs("false", f);
        return;
    case SJ_TRUE:
        fputs("true", f);
        return;
    case SJ_NUMBER:
        CHECK(sj_num(d, v, &x) == 0);
        fprintf(f, "%.17g", x);
        return;
    case SJ_STRING:
        s = sj_str(d, v, &n);
        break;
    default: {
        int obj = sj_type(d, v) == SJ_OBJECT;
        fputc(obj ? '{' : '[', f);
        for (int c = sj_child(d, v, 0); c >= 0; c = sj_next(d, c)) {
            if (c != sj_child(d, v, 0))
                fputc(',', f);
            if (obj) {
                const char *k = sj_key(d, c, &n);
                fputc('"', f);
                for (size_t i = 0; i < n; i++) {
                    unsigned char ch = (unsigned char)k[i];
                    if (ch == '"' || ch == '\\')
                        fprintf(f, "\\%c", ch);
                    else if (ch < 0x20)
                        fprintf(f, "\\u%04x", ch);
                    else
                        fputc(ch, f);
                }
                fputs("\":", f);
            }
            dump(d, c, f);
        }
        fputc(obj ? '}' : ']', f);
        return;
    }
    }
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static char *dump_doc(const sj_doc *d, size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    CHECK(f != NULL);
    dump(d, SJ_ROOT, f);
    CHECK(fclose(f) == 0);
    return buf;
}

/* Use 5, the frame: line count, visible width, no foreign control bytes. */
static void check_frame(const char *out, size_t n, int cols, int rows)
{
    CHECK(n >= 3 && !memcmp(out, "\033[H", 3));
    int lines = 1, width = 0, maxw = cols > 1 ? cols - 1 : 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)out[i];
        if (c == 0x1b) { /* CSI: ESC [ parameters final byte */
            CHECK(i + 1 < n && out[i + 1] == '[');
            i += 2;
            while (i < n && ((out[i] >= '0' && out[i] <= '9') || out[i] == ';' || out[i] == '?'))
                i++;
            CHECK(i < n && out[i] >= '@' && out[i] <= '~');
            continue;
        }
        if (c == '\r') {
            CHECK(i + 1 < n && out[i + 1] == '\n');
            i++;
            lines++;
            width = 0;
            continue;
        }
        CHECK(c >= 0x20 && c != 0x7f);
        CHECK(!(c == 0xc2 && i + 1 < n && (unsigned char)out[i + 1] < 0xa0));
        if ((c & 0xc0) != 0x80)
            width++;
        CHECK(width <= maxw);
    }
    CHECK(lines <= rows);
}

static void check_plain(const char *out, size_t n)
{
    CHECK(n > 0 && out[n - 1] == '\n');
    int fields = 1;
    for (size_t i = 0; i + 1 < n; i++) {
        unsigned char c = (unsigned char)out[i];
        CHECK(c >= 0x20 && c < 0x7f);
        fields += c == ' ';
    }
    CHECK(fields == 14);
    CHECK(strstr(out, " images/s=") && strstr(out, " readers=") && strstr(out, " served_MiB/s="));
}

static void render(const sj_doc *prev, const sj_doc *cur, double dt, int cols, int rows)
{
    for (int screen = 0; screen <= 1; screen++) {
        bfs_top_view v = {.mnt = "/mnt/\033[2Jx\n",
                          .screen = screen,
                          .cols = cols,
                          .rows = rows,
                          .when = 0,
                          .interval_s = 1};
        char *buf = NULL;
        size_t n = 0;
        FILE *f = open_memstream(&buf, &n);
        CHECK(f != NULL);
        bfs_top_render(&v, prev, cur, dt, f);
        CHECK(fclose(f) == 0);
        if (screen)
            check_frame(buf, n,
                        cols < 1      ? 1
                        : cols > 1000 ? 1000
                                      : cols,
                        rows < 1      ? 1
                        : rows > 1000 ? 1000
                                      : rows);
        else
            check_plain(buf, n);
        free(buf);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static sj_doc *real;
    if (!real)
        CHECK(sj_parse(real_stats, sizeof real_stats - 1, &real, NULL, 0) == 0);

    /* use 1 */
    sj_doc *d = (sj_doc *)1;
    char err[128];
    memset(err, 'x', sizeof err);
    int rc = sj_parse((const char *)data, size, &d, err, sizeof err);
    CHECK(rc == 0 || rc == -EINVAL || rc == -E2BIG || rc == -ENOMEM);
    CHECK((rc == 0) == (d != NULL));
    CHECK(memchr(err, 0, sizeof err) != NULL);
    if (rc) {
        CHECK(err[0] != 0);
        return 0;
    }
    CHECK(err[0] == 0);

    /* use 2 */
    int checks = 4000;
    long values = walk(d, SJ_ROOT, 0, &checks);
    CHECK(values >= 1 && values <= SJ_MAX_VALUES);
    CHECK(sj_type(d, (int)values) == -1 && sj_type(d, -1) == -1);
    CHECK(sj_lookup(d, SJ_ROOT, "") == SJ_ROOT);
    CHECK(sj_key(d, SJ_ROOT, NULL) == NULL && sj_next(d, SJ_ROOT) == -1);

    /* use 3 */
    size_t n1, n2;
    char *j1 = dump_doc(d, &n1);
    sj_doc *d2;
    char perr[128];
    rc = sj_parse(j1, n1, &d2, perr, sizeof perr);
    if (rc != 0)
        fprintf(stderr, "re-parse of %.*s: %s\n", (int)(n1 < 200 ? n1 : 200), j1, perr);
    CHECK(rc == 0 || (rc == -E2BIG && n1 > SJ_MAX_TEXT));
    if (!rc) {
        char *j2 = dump_doc(d2, &n2);
        CHECK(n1 == n2 && !memcmp(j1, j2, n1));
        free(j2);
        sj_free(d2);
    }
    free(j1);

    /* use 4 */
    char path[65];
    size_t pn = size < 64 ? size : 64;
    memcpy(path, data, pn);
    path[pn] = 0;
    int v = sj_lookup(d, SJ_ROOT, path);
    CHECK(v == -1 || sj_type(d, v) >= 0);
    double x;
    rc = sj_get_num(d, path, &x);
    CHECK(rc == 0 || rc == -ENOENT || rc == -EINVAL);
    (void)sj_get_str(d, path);

    /* use 5 */
    int cols = size > 0 ? data[0] % 160 : 80, rows = size > 1 ? data[1] % 50 : 24;
    double dt = size > 2 ? (data[2] % 8) * 0.25 : 1;
    render(NULL, d, dt, cols, rows);
    render(d, d, dt, cols, rows);
    render(real, d, dt, cols, rows);
    render(d, real, dt, cols, rows);
    sj_free(d);
    return 0;
}
