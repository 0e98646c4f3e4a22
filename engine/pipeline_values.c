/*
 * pipeline_values.c — the values of pipeline options (pipeline_internal.h): numbers read
 * and written in the "C" locale whatever the process's locale is (the canonical text,
 * hence the fingerprint, must not depend on LC_NUMERIC), and the setter and formatter of
 * each kind of value the table's rows name. A setter parses its text into the options'
 * field(s) or leaves them untouched; a formatter writes text the setter reads back.
 */
#include "engine/pipeline_internal.h"
#include "engine/dataset/bfs.h"
#include "engine/dataset/fetch.h"
#include "engine/remote/remote.h"
#include "engine/claims.h"

#include <ctype.h>
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- small helpers --------------------------------------------------------------------- */

const float bfs_opt_imagenet_mean[3] = {0.485f, 0.456f, 0.406f};
const float bfs_opt_imagenet_std[3] = {0.229f, 0.224f, 0.225f};

/* A user's text as it may appear in a message: at most 64 bytes, control characters as
 * \xNN (a value may come from a spec file with anything in it). */
const char *bfs_opt_quote(char dst[QUOTE_MAX * 4 + 8], const char *s)
{
    size_t n = 0;
    for (size_t i = 0; s[i]; i++) {
        if (i == QUOTE_MAX) {
            memcpy(dst + n, "...", 3);
            n += 3;
            break;
        }
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) {
            static const char hex[] = "0123456789abcdef";
            dst[n++] = '\\';
            dst[n++] = 'x';
            dst[n++] = hex[c >> 4];
            dst[n++] = hex[c & 15];
        } else {
            dst[n++] = (char)c;
        }
    }
    dst[n] = '\0';
    return dst;
}

/* The "C" locale, for locale-independent number text; (locale_t)0 if it cannot be made
 * (then the process locale is used, which is "C" unless the program called setlocale). */
static locale_t c_loc;
static pthread_once_t c_loc_once = PTHREAD_ONCE_INIT;

static void c_loc_init(void)
{
    c_loc = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
}

static locale_t c_locale(void)
{
    pthread_once(&c_loc_once, c_loc_init);
    return c_loc;
}

static double c_strtod(const char *s, char **end)
{
    locale_t l = c_locale();
    return l ? strtod_l(s, end, l) : strtod(s, end);
}

static float c_strtof(const char *s, char **end)
{
    locale_t l = c_locale();
    return l ? strtof_l(s, end, l) : strtof(s, end);
}

/* "%.*g" in the C locale. */
static void c_fmt_g(char *buf, size_t cap, int prec, double v)
{
    locale_t l = c_locale();
    locale_t old = l ? uselocale(l) : (locale_t)0;
    snprintf(buf, cap, "%.*g", prec, v);
    if (l)
        uselocale(old);
}

/* Shortest "%.Ng" text that reads back as exactly v (as a double, or as a float when
 * as_float): stable, round-trips, and 0.08 prints as 0.08. -0 prints as 0. */
void bfs_opt_fmt_real(char buf[40], double v, bool as_float)
{
    if (v == 0)
        v = 0;
    int max = as_float ? 9 : 17; /* digits that always round-trip (FLT/DBL_DECIMAL_DIG) */
    for (int p = 1; p <= max; p++) {
        c_fmt_g(buf, 40, p, v);
        if (p == max)
            break;
        if (as_float ? c_strtof(buf, NULL) == (float)v : c_strtod(buf, NULL) == v)
            break;
    }
}

/* A decimal integer: digits only (no sign, no space, no base prefix), no overflow, the
 * whole span [s, s + n) consumed. */
static bool parse_u64(const char *s, size_t n, uint64_t *out)
{
    if (n == 0)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        unsigned dgt = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - dgt) / 10)
            return false;
        v = v * 10 + dgt;
    }
    *out = v;
    return true;
}

/* A finite decimal number (strtod syntax without hex, inf, nan or leading space) filling
 * [s, s + n); as a float when as_float. */
bool bfs_opt_parse_decimal(const char *s, size_t n, bool as_float, double *out)
{
    char tmp[64];
    if (n == 0 || n >= sizeof tmp)
        return false;
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    if (!tmp[0] || !strchr("0123456789+-.", tmp[0]) || strpbrk(tmp, "xXpP"))
        return false;
    char *end;
    double v = as_float ? (double)c_strtof(tmp, &end) : c_strtod(tmp, &end);
    if (*end || !isfinite(v))
        return false;
    *out = v == 0 ? 0 : v; /* -0 reads as 0: one canonical zero */
    return true;
}

/* A decimal, or a fraction p/q of two decimals (q != 0), filling [s, s + n). */
static bool parse_real(const char *s, size_t n, double *out)
{
    const char *slash = memchr(s, '/', n);
    if (!slash)
        return bfs_opt_parse_decimal(s, n, false, out);
    double p, q;
    if (!bfs_opt_parse_decimal(s, (size_t)(slash - s), false, &p) ||
        !bfs_opt_parse_decimal(slash + 1, n - (size_t)(slash - s) - 1, false, &q) || q == 0)
        return false;
    double v = p / q;
    if (!isfinite(v))
        return false;
    *out = v == 0 ? 0 : v;
    return true;
}

/* Token i of a '|'-separated list, or NULL. */
static const char *enum_name(const char *list, int i, size_t *len)
{
    for (int k = 0;; k++) {
        size_t n = strcspn(list, "|");
        if (k == i) {
            *len = n;
            return list;
        }
        if (!list[n])
            return NULL;
        list += n + 1;
    }
}

/* ---- setters and formatters ------------------------------------------------------------ */

static void store_int(const opt *d, bfs_pipeline_opts *o, uint64_t v, bool is_auto)
{
    char *f = (char *)o + d->off;
    switch (d->width) {
    case W_U64: {
        uint64_t x = v;
        memcpy(f, &x, sizeof x);
        break;
    }
    case W_U32: {
        uint32_t x = (uint32_t)v;
        memcpy(f, &x, sizeof x);
        break;
    }
    case W_INT: {
        int x = is_auto ? BFS_AUTO : (int)v;
        memcpy(f, &x, sizeof x);
        break;
    }
    default: {
        int64_t x = is_auto ? BFS_AUTO : (int64_t)v;
        memcpy(f, &x, sizeof x);
        break;
    }
    }
}

int bfs_opt_set_uint(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)why;
    uint64_t x;
    if ((d->flags & F_AUTO) && strcmp(v, "auto") == 0) {
        store_int(d, o, 0, true);
        return 0;
    }
    if (!parse_u64(v, strlen(v), &x) || x < d->lo || x > d->hi)
        return -EINVAL;
    store_int(d, o, x, false);
    return 0;
}

int bfs_opt_show_uint(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    const char *f = (const char *)o + d->off;
    long long s;
    switch (d->width) {
    case W_U64: {
        uint64_t x;
        memcpy(&x, f, sizeof x);
        return snprintf(buf, cap, "%llu", (unsigned long long)x);
    }
    case W_U32: {
        uint32_t x;
        memcpy(&x, f, sizeof x);
        return snprintf(buf, cap, "%lu", (unsigned long)x);
    }
    case W_INT: {
        int x;
        memcpy(&x, f, sizeof x);
        s = x;
        break;
    }
    default: {
        int64_t x;
        memcpy(&x, f, sizeof x);
        s = x;
        break;
    }
    }
    if (s == BFS_AUTO && (d->flags & F_AUTO))
        return snprintf(buf, cap, "auto");
    return snprintf(buf, cap, "%lld", s);
}

int bfs_opt_set_enum(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)why;
    size_t n, vlen = strlen(v);
    const char *t;
    for (int i = 0; (t = enum_name(d->pub.syntax, i, &n)); i++)
        if (n == vlen && memcmp(t, v, n) == 0) {
            memcpy((char *)o + d->off, &i, sizeof i);
            return 0;
        }
    return -EINVAL;
}

int bfs_opt_show_enum(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    int i;
    size_t n;
    memcpy(&i, (const char *)o + d->off, sizeof i);
    const char *t = i >= 0 ? enum_name(d->pub.syntax, i, &n) : NULL;
    if (!t)
        return snprintf(buf, cap, "#%d", i); /* not a name: the setter rejects it */
    return snprintf(buf, cap, "%.*s", (int)n, t);
}

int bfs_opt_set_shard(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)why;
    const char *slash = strchr(v, '/');
    uint64_t i, n;
    if (!slash || !parse_u64(v, (size_t)(slash - v), &i) ||
        !parse_u64(slash + 1, strlen(slash + 1), &n) || n < 1 || n > d->hi || i >= n)
        return -EINVAL;
    o->shard_index = (uint32_t)i;
    o->shard_count = (uint32_t)n;
    return 0;
}

int bfs_opt_show_shard(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    (void)d;
    return snprintf(buf, cap, "%lu/%lu", (unsigned long)o->shard_index,
                    (unsigned long)o->shard_count);
}

int bfs_opt_set_size(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)why;
    const char *x = strchr(v, 'x');
    uint64_t h, w;
    if (!x) {
        if (!parse_u64(v, strlen(v), &h))
            return -EINVAL;
        w = h;
    } else if (!parse_u64(v, (size_t)(x - v), &h) || !parse_u64(x + 1, strlen(x + 1), &w)) {
        return -EINVAL;
    }
    if (h < d->lo || h > d->hi || w < d->lo || w > d->hi)
        return -EINVAL;
    o->out_h = (uint32_t)h;
    o->out_w = (uint32_t)w;
    return 0;
}

int bfs_opt_show_size(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    (void)d;
    return snprintf(buf, cap, "%lux%lu", (unsigned long)o->out_h, (unsigned long)o->out_w);
}

int bfs_opt_set_sizes(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)d, (void)why;
    uint32_t n = 0, ep[BFS_SCHEDULE_SIZES], hh[BFS_SCHEDULE_SIZES], ww[BFS_SCHEDULE_SIZES];
    int linear = 0;
    if (!strcmp(v, "none")) {
        o->sched_n = 0, o->sched_linear = 0;
        return 0;
    }
    if (!strncmp(v, "linear:", 7))
        linear = 1, v += 7;
    const char *p = v;
    while (*p) {
        const char *c1 = strchr(p, ':');
        if (!c1 || n == BFS_SCHEDULE_SIZES)
            return -EINVAL;
        const char *c2 = strchr(c1 + 1, ':');
        size_t slen = c2 ? (size_t)(c2 - c1 - 1) : strlen(c1 + 1);
        uint64_t e, h, w;
        const char *x = memchr(c1 + 1, 'x', slen);
        if (!parse_u64(p, (size_t)(c1 - p), &e) || e > 1000000)
            return -EINVAL;
        if (x ? !parse_u64(c1 + 1, (size_t)(x - c1 - 1), &h) ||
                    !parse_u64(x + 1, slen - (size_t)(x - c1), &w)
              : !parse_u64(c1 + 1, slen, &h))
            return -EINVAL;
        if (!x)
            w = h;
        uint64_t lo = linear ? 32 : 1;
        if (h < lo || h > 8192 || w < lo || w > 8192 || (n && e <= ep[n - 1]))
            return -EINVAL;
        ep[n] = (uint32_t)e, hh[n] = (uint32_t)h, ww[n] = (uint32_t)w;
        n++;
        p = c2 ? c2 + 1 : c1 + 1 + slen;
        if (c2 && !*p)
            return -EINVAL; /* a trailing ':' */
    }
    if (!n)
        return -EINVAL;
    o->sched_n = n, o->sched_linear = linear;
    memcpy(o->sched_epoch, ep, n * sizeof *ep);
    memcpy(o->sched_h, hh, n * sizeof *hh);
    memcpy(o->sched_w, ww, n * sizeof *ww);
    return 0;
}

int bfs_opt_show_sizes(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    (void)d;
    if (!o->sched_n)
        return snprintf(buf, cap, "none");
    int len = snprintf(buf, cap, "%s", o->sched_linear ? "linear:" : "");
    for (uint32_t i = 0; i < o->sched_n && i < BFS_SCHEDULE_SIZES; i++) {
        size_t at = (size_t)len < cap ? (size_t)len : cap;
        if (o->sched_h[i] == o->sched_w[i])
            len += snprintf(buf + at, cap - at, "%s%u:%u", i ? ":" : "", o->sched_epoch[i],
                            o->sched_h[i]);
        else
            len += snprintf(buf + at, cap - at, "%s%u:%ux%u", i ? ":" : "", o->sched_epoch[i],
                            o->sched_h[i], o->sched_w[i]);
    }
    return len;
}

int bfs_opt_set_jitter(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)d, (void)why;
    double x[4];
    const char *p = v;
    for (int i = 0; i < 4; i++) {
        const char *end = strchr(p, ':');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if ((i < 3) != (end != NULL) || !parse_real(p, n, &x[i]) || !(x[i] >= 0) ||
            x[i] > (i < 3 ? 100 : 0.5))
            return -EINVAL;
        p = end ? end + 1 : p + n;
    }
    memcpy(o->jitter, x, sizeof x);
    return 0;
}

int bfs_opt_show_jitter(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    (void)d;
    char t[4][40];
    for (int i = 0; i < 4; i++)
        bfs_opt_fmt_real(t[i], o->jitter[i], false);
    return snprintf(buf, cap, "%s:%s:%s:%s", t[0], t[1], t[2], t[3]);
}

int bfs_opt_set_randaug(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)d, (void)why;
    if (!strcmp(v, "none")) {
        o->randaug[0] = o->randaug[1] = 0;
        return 0;
    }
    const char *colon = strchr(v, ':');
    uint64_t n, m;
    if (!colon || !parse_u64(v, (size_t)(colon - v), &n) ||
        !parse_u64(colon + 1, strlen(colon + 1), &m) || n < 1 || n > 16 || m > 30)
        return -EINVAL;
    o->randaug[0] = (uint32_t)n;
    o->randaug[1] = (uint32_t)m;
    return 0;
}

int bfs_opt_show_randaug(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    (void)d;
    if (!o->randaug[0])
        return snprintf(buf, cap, "none");
    return snprintf(buf, cap, "%u:%u", (unsigned)o->randaug[0], (unsigned)o->randaug[1]);
}

int bfs_opt_set_range(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)why;
    const char *colon = strchr(v, ':');
    double a, b;
    if (!colon || !parse_real(v, (size_t)(colon - v), &a) ||
        !parse_real(colon + 1, strlen(colon + 1), &b))
        return -EINVAL;
    if (!(a > 0 && a <= b && b <= d->dhi))
        return -EINVAL;
    double *f = (double *)(void *)((char *)o + d->off);
    f[0] = a;
    f[1] = b;
    return 0;
}

int bfs_opt_show_range(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    const double *f = (const double *)(const void *)((const char *)o + d->off);
    char a[40], b[40];
    bfs_opt_fmt_real(a, f[0], false);
    bfs_opt_fmt_real(b, f[1], false);
    return snprintf(buf, cap, "%s:%s", a, b);
}

int bfs_opt_set_real(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)why;
    double x;
    if (!parse_real(v, strlen(v), &x) || !(x >= 0 && x <= d->dhi))
        return -EINVAL;
    memcpy((char *)o + d->off, &x, sizeof x);
    return 0;
}

int bfs_opt_show_real(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    double x;
    char t[40];
    memcpy(&x, (const char *)o + d->off, sizeof x);
    bfs_opt_fmt_real(t, x, false);
    return snprintf(buf, cap, "%s", t);
}

/* Three comma-separated decimals filling [s, s + n), read as floats. */
static bool parse_triple(const char *s, size_t n, float out[3])
{
    for (int k = 0; k < 3; k++) {
        const char *comma = memchr(s, ',', n);
        size_t len = k < 2 ? (comma ? (size_t)(comma - s) : n + 1) : n;
        double x;
        if (len > n || (k == 2 && comma) || !bfs_opt_parse_decimal(s, len, true, &x))
            return false;
        out[k] = (float)x;
        if (k < 2) {
            s += len + 1;
            n -= len + 1;
        }
    }
    return true;
}

int bfs_opt_set_normalize(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)d;
    float mean[3], std[3];
    int on = 1;
    if (strcmp(v, "imagenet") == 0) {
        memcpy(mean, bfs_opt_imagenet_mean, sizeof mean);
        memcpy(std, bfs_opt_imagenet_std, sizeof std);
    } else if (strcmp(v, "none") == 0) {
        on = 0;
        for (int k = 0; k < 3; k++) {
            mean[k] = 0;
            std[k] = 1;
        }
    } else {
        const char *slash = strchr(v, '/');
        if (!slash || !parse_triple(v, (size_t)(slash - v), mean) ||
            !parse_triple(slash + 1, strlen(slash + 1), std))
            return -EINVAL;
        for (int k = 0; k < 3; k++)
            if (!(std[k] > 0)) {
                *why = "every std must be > 0 (m0,m1,m2/s0,s1,s2)";
                return -EINVAL;
            }
    }
    o->normalize = on;
    memcpy(o->mean, mean, sizeof mean);
    memcpy(o->std, std, sizeof std);
    return 0;
}

/* u8: "none" (mean/std do not apply); float dtypes: the numbers, whatever name set them,
 * so that pipelines producing identical bytes have one canonical text. */
int bfs_opt_fmt_norm_numbers(const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    char t[6][40];
    for (int k = 0; k < 3; k++) {
        bfs_opt_fmt_real(t[k], o->mean[k], true);
        bfs_opt_fmt_real(t[3 + k], o->std[k], true);
    }
    return snprintf(buf, cap, "%s,%s,%s/%s,%s,%s", t[0], t[1], t[2], t[3], t[4], t[5]);
}

int bfs_opt_show_normalize(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    (void)d;
    if (o->dtype == BFS_OUT_U8)
        return snprintf(buf, cap, "none");
    return bfs_opt_fmt_norm_numbers(o, buf, cap);
}

/* A path option (`none` clears it): absolute (the daemon changes to / when it starts), or
 * `auto` where allow_auto; into dst (cap bytes). */
static int set_abs_path(char *dst, size_t cap, const char *v, int allow_auto, const char **why)
{
    size_t n = strlen(v);
    if (strcmp(v, "none") == 0) {
        dst[0] = '\0';
        return 0;
    }
    if (v[0] != '/' && !(allow_auto && strcmp(v, "auto") == 0)) {
        if (!allow_auto)
            *why = "an absolute path (the daemon changes to / when it starts)";
        return -EINVAL;
    }
    if (n >= cap) {
        *why =
            cap > 1000 ? "path too long (at most 1023 bytes)" : "path too long (at most 511 bytes)";
        return -EINVAL;
    }
    memcpy(dst, v, n + 1);
    return 0;
}

/* A text option's text (a field of cap bytes): the text, or `empty` when it is "". */
static int show_text(const char *text, size_t cap, const char *empty, char *buf, size_t bufcap)
{
    size_t n = strnlen(text, cap);
    return n ? snprintf(buf, bufcap, "%.*s", (int)n, text) : snprintf(buf, bufcap, "%s", empty);
}

/* A path option's text: the path, or `none`. */
static int show_abs_path(const char *path, size_t cap, char *buf, size_t bufcap)
{
    return show_text(path, cap, "none", buf, bufcap);
}

int bfs_opt_set_path(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)d;
    return set_abs_path(o->cache_dir, sizeof o->cache_dir, v, 1, why);
}

int bfs_opt_show_path(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    (void)d;
    return show_abs_path(o->cache_dir, sizeof o->cache_dir, buf, cap);
}

int bfs_opt_set_remote_key(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)d;
    return set_abs_path(o->remote_key, sizeof o->remote_key, v, 0, why);
}

int bfs_opt_show_remote_key(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    (void)d;
    return show_abs_path(o->remote_key, sizeof o->remote_key, buf, cap);
}

int bfs_opt_set_remote(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)d;
    static _Thread_local char reason[256]; /* the message bad_value shows */
    if (strcmp(v, "none") == 0) {
        o->remote[0] = '\0';
        return 0;
    }
    bfs_remote_url u;
    if (bfs_remote_parse_url(v, &u, reason, sizeof reason)) {
        const char *colon = strstr(reason, ": ");
        *why = colon ? colon + 2 : reason;
        return -EINVAL;
    }
    size_t n = strlen(v);
    if (n >= sizeof o->remote) {
        *why = "URL too long (at most 511 bytes)";
        return -EINVAL;
    }
    memcpy(o->remote, v, n + 1);
    return 0;
}

int bfs_opt_show_remote(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    (void)d;
    return show_text(o->remote, sizeof o->remote, "none", buf, cap);
}

int bfs_opt_set_group(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)d, (void)why;
    if (strcmp(v, "none") == 0) {
        o->group[0] = '\0';
        return 0;
    }
    if (!bfs_claims_name_valid(v))
        return -EINVAL;
    snprintf(o->group, sizeof o->group, "%s", v);
    return 0;
}

int bfs_opt_set_s3_region(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)d, (void)why;
    if (strcmp(v, "auto") == 0) {
        o->s3_region[0] = '\0';
        return 0;
    }
    size_t n = strlen(v);
    if (n == 0 || n >= sizeof o->s3_region)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!islower((unsigned char)v[i]) && !isdigit((unsigned char)v[i]) && v[i] != '-')
            return -EINVAL;
    memcpy(o->s3_region, v, n + 1);
    return 0;
}

int bfs_opt_show_s3_region(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    (void)d;
    return show_text(o->s3_region, sizeof o->s3_region, "auto", buf, cap);
}

/* s3_endpoint=: the fetcher's rule (bfs_fetch_check_endpoint), and its length. */
int bfs_opt_set_s3_endpoint(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)d;
    if (strcmp(v, "none") == 0) {
        o->s3_endpoint[0] = '\0';
        return 0;
    }
    if (bfs_fetch_check_endpoint(v, why))
        return -EINVAL;
    size_t n = strlen(v);
    if (n >= sizeof o->s3_endpoint) {
        *why = "URL too long (at most 511 bytes)";
        return -EINVAL;
    }
    memcpy(o->s3_endpoint, v, n + 1);
    return 0;
}

int bfs_opt_show_s3_endpoint(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    (void)d;
    return show_text(o->s3_endpoint, sizeof o->s3_endpoint, "none", buf, cap);
}

int bfs_opt_set_source_cache(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)d;
    return set_abs_path(o->source_cache, sizeof o->source_cache, v, 1, why);
}

int bfs_opt_show_source_cache(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    (void)d;
    return show_abs_path(o->source_cache, sizeof o->source_cache, buf, cap);
}

int bfs_opt_set_ca(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)d;
    return set_abs_path(o->ca, sizeof o->ca, v, 0, why);
}

int bfs_opt_show_ca(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    (void)d;
    return show_abs_path(o->ca, sizeof o->ca, buf, cap);
}

static int field_name_valid(const char *p, size_t len)
{
    if (!len || len > 31 || (p[0] >= '0' && p[0] <= '9'))
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!isalnum((unsigned char)p[i]) && p[i] != '_')
            return 0;
    return 1;
}

int bfs_opt_set_fields(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)d;
    if (!strcmp(v, "all")) {
        o->fields[0] = '\0';
        return 0;
    }
    if (strlen(v) >= sizeof o->fields)
        return *why = "too long", -EINVAL;
    for (const char *p = v;; p++) {
        size_t len = strcspn(p, ",");
        if (!field_name_valid(p, len))
            return -EINVAL;
        p += len;
        if (!*p)
            break;
    }
    snprintf(o->fields, sizeof o->fields, "%s", v);
    return 0;
}

int bfs_opt_show_fields(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    (void)d;
    return snprintf(buf, cap, "%s", o->fields[0] ? o->fields : "all");
}

/* text_len= and token_len=: max (0) or N, a uint32_t at d->off */
int bfs_opt_set_text_len(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)why;
    uint64_t x;
    uint32_t *f = (uint32_t *)((char *)o + d->off);
    if (!strcmp(v, "max")) {
        *f = 0;
        return 0;
    }
    if (!parse_u64(v, strlen(v), &x) || x < d->lo || x > d->hi)
        return -EINVAL;
    *f = (uint32_t)x;
    return 0;
}

int bfs_opt_show_text_len(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    uint32_t f = *(const uint32_t *)((const char *)o + d->off);
    return f ? snprintf(buf, cap, "%u", f) : snprintf(buf, cap, "max");
}

int bfs_opt_set_buckets(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    uint32_t b[BFS_MAX_BUCKETS], n = 0;
    if (!strcmp(v, "none")) {
        o->nbuckets = 0;
        return 0;
    }
    for (const char *p = v;; p++) {
        size_t len = strcspn(p, ":");
        uint64_t x;
        if (n == BFS_MAX_BUCKETS)
            return *why = "more than 32 bounds", -EINVAL;
        if (!parse_u64(p, len, &x) || x < 1 || x > d->hi)
            return -EINVAL;
        if (n && x <= b[n - 1])
            return *why = "bounds must be strictly ascending", -EINVAL;
        b[n++] = (uint32_t)x;
        p += len;
        if (!*p)
            break;
    }
    memcpy(o->buckets, b, n * sizeof *b);
    o->nbuckets = n;
    return 0;
}

int bfs_opt_show_buckets(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    (void)d;
    char t[BFS_MAX_BUCKETS * 9 + 8] = "none"; /* bounds have at most 7 digits */
    size_t n = 0;
    for (uint32_t i = 0; i < o->nbuckets && i < BFS_MAX_BUCKETS; i++)
        n += (size_t)snprintf(t + n, sizeof t - n, "%s%lu", i ? ":" : "",
                              (unsigned long)o->buckets[i]);
    return snprintf(buf, cap, "%s", t);
}

int bfs_opt_show_group(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    (void)d;
    return snprintf(buf, cap, "%s", o->group[0] ? o->group : "none");
}
