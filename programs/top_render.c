/*
 * top_render.c — bfs_top_render (see top.h), the half of `batchfs top` that draws: a pure
 * function of two parsed /stats documents (no I/O but the FILE it writes, no clock): what
 * is shown and how, fuzzed with any document. The loop that reads MNT/stats and keeps the
 * terminal is top.c.
 *
 * Terminal output is deliberately small (no curses): cursor home + clear to end of
 * line/screen per frame, reverse video for the title, green for the bars' '#'.
 */
#include "programs/top.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- values from the documents --------------------------------------------------------- */

static int num_at(const sj_doc *d, int base, const char *path, double *x)
{
    return d && sj_num(d, sj_lookup(d, base, path), x) == 0;
}

static int num(const sj_doc *d, const char *path, double *x)
{
    return num_at(d, SJ_ROOT, path, x);
}

/* Two samples and the seconds between them; prev NULL when there is no usable one. */
typedef struct span {
    const sj_doc *prev, *cur;
    double dt;
} span;

/* The increase of counter `path` at base (cur) / pbase (prev) over the span: 0 when
 * unknown (no previous sample, a key missing, or the counter went down). */
static int delta_at(const span *s, int base, int pbase, const char *path, double *out)
{
    double a, b;
    if (!s->prev || pbase < 0 || !num_at(s->prev, pbase, path, &a) ||
        !num_at(s->cur, base, path, &b) || b < a)
        return 0;
    *out = b - a;
    return 1;
}

static int rate_at(const span *s, int base, int pbase, const char *path, double *out)
{
    double d;
    if (!(s->dt > 0) || !delta_at(s, base, pbase, path, &d))
        return 0;
    *out = d / s->dt;
    return 1;
}

static int rate(const span *s, const char *path, double *out)
{
    return rate_at(s, SJ_ROOT, SJ_ROOT, path, out);
}

/*
 * Hit rate of the cache section `sect` in percent, of lookups over the span (now = 1) or
 * since start: hits / (hits + misses [+ joins: they neither hit nor compute, and count
 * as lookups that did not find the batch]).
 */
static int hit_pct(const span *s, const char *sect, int joins, int now, double *out)
{
    char ph[64], pm[64], pj[64];
    snprintf(ph, sizeof ph, "%s.hits", sect);
    snprintf(pm, sizeof pm, "%s.misses", sect);
    snprintf(pj, sizeof pj, "%s.joins", sect);
    double h, m, j = 0;
    if (now) {
        if (!delta_at(s, SJ_ROOT, SJ_ROOT, ph, &h) || !delta_at(s, SJ_ROOT, SJ_ROOT, pm, &m))
            return 0;
        if (joins && !delta_at(s, SJ_ROOT, SJ_ROOT, pj, &j))
            j = 0;
    } else {
        if (!num(s->cur, ph, &h) || !num(s->cur, pm, &m))
            return 0;
        if (joins && !num(s->cur, pj, &j))
            j = 0;
    }
    double total = h + m + j;
    if (!(total > 0) || h < 0 || h > total)
        return 0;
    *out = 100.0 * h / total;
    return 1;
}

/* The element of array `arr` whose "id" equals id, or -1. */
static int find_id(const sj_doc *d, int arr, double id)
{
    if (!d || sj_type(d, arr) != SJ_ARRAY)
        return -1;
    for (int e = sj_child(d, arr, 0); e >= 0; e = sj_next(d, e)) {
        double x;
        if (num_at(d, e, "id", &x) && x == id)
            return e;
    }
    return -1;
}

/* ---- formatting -------------------------------------------------------------------------- */

#define FMT 48 /* a formatted value; "%.3g" keeps any double short */

/* x with prec decimals, or "-" when !ok or not finite (a rate over a tiny step). */
static const char *f_num(char *b, int ok, double x, int prec)
{
    if (!ok || !isfinite(x))
        return "-";
    if (fabs(x) >= 1e12)
        snprintf(b, FMT, "%.3g", x);
    else
        snprintf(b, FMT, "%.*f", prec, x);
    return b;
}

static const char *f_bytes(char *b, int ok, double x)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (!ok || !isfinite(x))
        return "-";
    int u = 0;
    double a = fabs(x);
    while (a >= 1024 && u < 6)
        a /= 1024, x /= 1024, u++;
    if (a >= 1e12) /* beyond EiB */
        snprintf(b, FMT, "%.3g %s", x, unit[u]);
    else if (u == 0)
        snprintf(b, FMT, "%.0f B", x);
    else
        snprintf(b, FMT, a < 10 ? "%.2f %s" : a < 100 ? "%.1f %s" : "%.0f %s", x, unit[u]);
    return b;
}

/* Seconds as 3d04h, 1h02m, 12m03s or 4.5s. */
static const char *f_dur(char *b, int ok, double s)
{
    if (!ok || !(s >= 0))
        return "-";
    if (s >= 1e9)
        snprintf(b, FMT, "%.3gs", s);
    else if (s >= 86400)
        snprintf(b, FMT, "%dd%02dh", (int)(s / 86400), (int)fmod(s / 3600, 24));
    else if (s >= 3600)
        snprintf(b, FMT, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
    else if (s >= 60)
        snprintf(b, FMT, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else
        snprintf(b, FMT, "%.1fs", s);
    return b;
}

/* Lookups formatted: the value (or rate, or hit rate) or "-". The value is fetched before
 * it is formatted: never `f_num(b, num(d, p, &x), x, ...)`, whose arguments are unsequenced. */
static const char *s_num(char *b, const sj_doc *d, const char *path, int prec)
{
    double x = 0;
    int ok = num(d, path, &x);
    return f_num(b, ok, x, prec);
}

/* The prefetch depth readers get: the autotuner's choice (autotune.prefetch.value) when
 * the daemon tunes, else the executor's default depth (prefetch.depth). */
static const char *s_depth(char *b, const sj_doc *d)
{
    double x = 0;
    int ok = num(d, "autotune.prefetch.value", &x) || num(d, "prefetch.depth", &x);
    return f_num(b, ok, x, 0);
}

static const char *s_bytes(char *b, const sj_doc *d, const char *path)
{
    double x = 0;
    int ok = num(d, path, &x);
    return f_bytes(b, ok, x);
}

static const char *s_rate(char *b, const span *s, const char *path, int prec)
{
    double x = 0;
    int ok = rate(s, path, &x);
    return f_num(b, ok, x, prec);
}

static const char *s_rate_bytes(char *b, const span *s, const char *path)
{
    double x = 0;
    int ok = rate(s, path, &x);
    return f_bytes(b, ok, x);
}

static const char *s_hit(char *b, const span *s, const char *sect, int joins, int now)
{
    double x = 0;
    int ok = hit_pct(s, sect, joins, now, &x);
    return f_num(b, ok, x, 1);
}

/* ---- lines and frames -------------------------------------------------------------------- */

#define LINE_BYTES 8192 /* 1000 columns of 4-byte characters, plus escapes */

typedef struct line {
    char b[LINE_BYTES];
    size_t n;
    int col, cols; /* visible columns written, allowed */
    int screen;    /* escapes allowed */
} line;

typedef struct frame {
    FILE *out;
    int screen, cols, rows, used;
    int limit;   /* lines that may be used now (rows, less a reserve for what follows) */
    int compact; /* a short screen: no blank lines, reasons on one line */
    line l;
} frame;

static void l_raw(line *l, const char *s, size_t n)
{
    if (l->n + n <= sizeof l->b) /* else dropped: f_end resets the attributes anyway */
        memcpy(l->b + l->n, s, n), l->n += n;
}

static void l_esc(line *l, const char *esc)
{
    if (l->screen)
        l_raw(l, esc, strlen(esc));
}

/*
 * Visible text, cut at the line's width: a character is a byte below 0x80 or a whole
 * UTF-8 sequence (counted as one column); control characters (C0, DEL, C1 — U+0080..
 * U+009F, which some terminals take as CSI) and broken sequences become '?'.
 */
static void l_text(line *l, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n && l->col < l->cols) {
        unsigned char c = p[i];
        size_t k = c < 0x80                 ? 1
                   : c >= 0xc2 && c <= 0xdf ? 2
                   : c >= 0xe0 && c <= 0xef ? 3
                   : c >= 0xf0 && c <= 0xf4 ? 4
                                            : 0;
        for (size_t j = 1; k && j < k; j++)
            if (i + j >= n || (p[i + j] & 0xc0) != 0x80)
                k = 0;
        if (!k || c < 0x20 || c == 0x7f || (c == 0xc2 && p[i + 1] < 0xa0)) {
            l_raw(l, "?", 1);
            i += k ? k : 1;
        } else {
            l_raw(l, s + i, k);
            i += k;
        }
        l->col++;
    }
}

static void l_printf(line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void l_printf(line *l, const char *fmt, ...)
{
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        l_text(l, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void l_str(line *l, const char *s)
{
    l_text(l, s, strlen(s));
}

/* Spaces up to column c. */
static void l_pad(line *l, int c)
{
    while (l->col < c && l->col < l->cols)
        l_raw(l, " ", 1), l->col++;
}

static void f_begin(frame *f)
{
    line *l = &f->l;
    l->n = 0, l->col = 0, l->screen = f->screen;
    /* one column short of the width: writing the last column makes some terminals wrap */
    l->cols = f->screen ? (f->cols > 1 ? f->cols - 1 : 1) : (int)(sizeof l->b) / 4;
}

static int f_full(const frame *f)
{
    return f->screen && f->used >= f->limit;
}

/* End the current line: write it unless the screen is full. */
static void f_end(frame *f)
{
    line *l = &f->l;
    if (!f_full(f)) {
        if (f->screen)
            fputs(f->used ? "\r\n" : "\033[H", f->out);
        fwrite(l->b, 1, l->n, f->out);
        if (f->screen)
            fputs("\033[0m\033[K", f->out);
        f->used++;
    }
    f_begin(f);
}

/* A blank line between sections, when the screen has room for them. */
static void f_blank(frame *f)
{
    if (!f->compact)
        f_end(f);
}

/* A horizontal bar of `width` cells, share in [0, 1] of it filled with '#' (green). */
static void l_bar(line *l, double share, int width)
{
    if (width < 1)
        return;
    if (!(share >= 0))
        share = 0;
    if (share > 1)
        share = 1;
    int fill = (int)lround(share * width);
    l_str(l, "|");
    l_esc(l, "\033[32m");
    for (int i = 0; i < width; i++) {
        if (i == fill)
            l_esc(l, "\033[0m");
        l_str(l, i < fill ? "#" : " ");
    }
    l_esc(l, "\033[0m");
    l_str(l, "|");
}

/* Up to `maxlines` lines of string s (word-wrapped), starting at the current column and
 * continuing at column `indent`. */
static void f_wrap(frame *f, const char *s, size_t n, int indent, int maxlines)
{
    line *l = &f->l;
    for (int k = 0; k < maxlines && n && !f_full(f); k++) {
        int width = l->cols - l->col;
        if (width < 8) {
            f_end(f);
            l_pad(l, indent);
            continue;
        }
        /* bytes for `width` characters, then back to the last space when there is more */
        size_t take = 0;
        int chars = 0;
        while (take < n && chars < width) {
            take++;
            while (take < n && ((unsigned char)s[take] & 0xc0) == 0x80)
                take++;
            chars++;
        }
        if (take < n && k + 1 < maxlines) {
            size_t sp = take;
            while (sp > 0 && s[sp] != ' ')
                sp--;
            if (sp > 0)
                take = sp;
        }
        l_text(l, s, take);
        s += take, n -= take;
        while (n && *s == ' ')
            s++, n--;
        if (n && k + 1 < maxlines) {
            f_end(f);
            l_pad(l, indent);
        }
    }
}

/* ---- the full-screen view ---------------------------------------------------------------- */

static void v_title(frame *f, const bfs_top_view *v, const span *s)
{
    line *l = &f->l;
    char b1[FMT], b2[FMT], clock[32] = "-";
    double up = 0;
    int upok = num(s->cur, "uptime_s", &up);
    struct tm tm;
    if (localtime_r(&v->when, &tm))
        strftime(clock, sizeof clock, "%H:%M:%S", &tm);
    const char *ver = sj_get_str(s->cur, "version");
    l_esc(l, "\033[7m");
    l_printf(l, " batchfs top  %s   %s   up %s   every %ss   q quits   batchfs %s",
             v->mnt ? v->mnt : "-", clock, f_dur(b1, upok, up), f_num(b2, 1, v->interval_s, 1),
             ver ? ver : "-");
    l_pad(l, l->cols);
    l_esc(l, "\033[0m");
    f_end(f);
}

/* A mixture's sources (/stats "sources"): "NAME DRAWN (P%)" each, three spaces between
 * them, or plain: "NAME:DRAWN" with commas; "" when the mount serves one source. */
static const char *f_sources(char *b, size_t cap, const sj_doc *d, int plain)
{
    int arr = sj_lookup(d, SJ_ROOT, "sources");
    size_t at = 0;
    b[0] = '\0';
    if (sj_type(d, arr) != SJ_ARRAY)
        return b;
    double total = 0, x;
    for (int m = sj_child(d, arr, 0); m >= 0; m = sj_next(d, m))
        if (sj_num(d, sj_lookup(d, m, "drawn"), &x) == 0)
            total += x;
    for (int m = sj_child(d, arr, 0); m >= 0 && at < cap; m = sj_next(d, m)) {
        const char *path = sj_str(d, sj_lookup(d, m, "path"), NULL);
        const char *base = path ? strrchr(path, '/') : NULL;
        double drawn = 0;
        (void)sj_num(d, sj_lookup(d, m, "drawn"), &drawn);
        const char *name = base ? base + 1 : path ? path : "?";
        int w = plain ? snprintf(b + at, cap - at, "%s%s:%.0f", at ? "," : "", name, drawn)
                      : snprintf(b + at, cap - at, "%s%s %.0f (%.1f%%)", at ? "   " : "", name,
                                 drawn, total > 0 ? 100 * drawn / total : 0.0);
        if (w < 0)
            break;
        at += (size_t)w;
    }
    return b;
}

static void v_throughput(frame *f, const span *s)
{
    line *l = &f->l;
    char a[FMT], b[FMT], c[FMT], d[FMT], e[FMT];
    const sj_doc *cur = s->cur;
    l_esc(l, "\033[1m");
    l_str(l, "throughput");
    l_esc(l, "\033[0m");
    l_pad(l, 14);
    /* served: the batch files opened (their sizes), which under passthrough never reach
     * the daemon's reads; daemon reads: what was copied through it */
    l_printf(l, "%s images/s now   %s avg   %s batches/s   %s/s served   %s/s daemon reads",
             s_rate(a, s, "images", 1), s_num(b, cur, "images_per_s", 1),
             s_rate(c, s, "batches.served", 2), s_rate_bytes(d, s, "batches.opened_bytes"),
             s_rate_bytes(e, s, "reads.bytes"));
    f_end(f);
    l_pad(l, 2);
    l_str(l, "batches");
    l_pad(l, 14);
    l_printf(l, "served %s   computed %s   prefetched %s   failed %s   in flight %s",
             s_num(a, cur, "batches.served", 0), s_num(b, cur, "batches.computed", 0),
             s_num(c, cur, "batches.prefetched", 0), s_num(d, cur, "batches.failed", 0),
             s_num(e, cur, "batches.in_flight", 0));
    f_end(f);
    l_pad(l, 2);
    l_str(l, "workers");
    l_pad(l, 14);
    l_printf(l, "threads %s   prefetch depth %s   images %s   bad samples %s   read errors %s",
             s_num(a, cur, "threads", 0), s_depth(b, cur), s_num(c, cur, "images", 0),
             s_num(d, cur, "bad_samples", 0), s_num(e, cur, "reads.errors", 0));
    f_end(f);
    char src[512];
    if (*f_sources(src, sizeof src, cur, 0)) {
        l_pad(l, 2);
        l_str(l, "sources");
        l_pad(l, 14);
        l_str(l, src);
        f_end(f);
    }
}

static void v_stages(frame *f, const span *s)
{
    static const char *const known[] = {"read", "decode", "resize", "encode"};
    line *l = &f->l;
    char a[FMT], b[FMT];
    int st = sj_lookup(s->cur, SJ_ROOT, "stage_us_per_image");
    int have = sj_type(s->cur, st) == SJ_OBJECT;
    double total = 0, x = 0;
    int ntotal = 0;
    for (int m = have ? sj_child(s->cur, st, 0) : -1; m >= 0; m = sj_next(s->cur, m))
        if (sj_num(s->cur, m, &x) == 0 && x >= 0)
            total += x, ntotal++;
    l_esc(l, "\033[1m");
    l_str(l, "time per image");
    l_esc(l, "\033[0m");
    l_pad(l, 16);
    l_printf(l, "%s us of worker time, average since start", f_num(a, ntotal > 0, total, 1));
    f_end(f);
    int barw = l->cols - 36;
    if (barw > 60)
        barw = 60;
    if (!have) { /* the stages batchfs reports, unknown */
        for (size_t i = 0; i < sizeof known / sizeof known[0] && !f_full(f); i++) {
            l_pad(l, 2);
            l_printf(l, "%-10s %10s", known[i], "- us");
            f_end(f);
        }
        return;
    }
    for (int m = sj_child(s->cur, st, 0); m >= 0 && !f_full(f); m = sj_next(s->cur, m)) {
        size_t kn;
        const char *k = sj_key(s->cur, m, &kn);
        x = 0;
        int ok = sj_num(s->cur, m, &x) == 0;
        l_pad(l, 2);
        l_text(l, k, kn < 10 ? kn : 10);
        l_pad(l, 13);
        l_printf(l, "%8s us  %6s%%  ", f_num(a, ok, x, 1),
                 f_num(b, ok && total > 0 && x >= 0, 100 * x / total, 1));
        if (ok && total > 0 && x >= 0)
            l_bar(l, x / total, barw);
        f_end(f);
    }
    /* the recipe ops (docs/augment.md): us per use, as many as the line holds */
    int ops = sj_lookup(s->cur, SJ_ROOT, "augment_ops");
    if (sj_type(s->cur, ops) != SJ_OBJECT || sj_child(s->cur, ops, 0) < 0 || f_full(f))
        return;
    l_pad(l, 2);
    l_str(l, "ops, us each");
    l_pad(l, 16);
    int n = 0;
    for (int m = sj_child(s->cur, ops, 0); m >= 0; m = sj_next(s->cur, m)) {
        size_t kn;
        const char *k = sj_key(s->cur, m, &kn);
        double us = 0;
        int each = sj_lookup(s->cur, m, "us_each");
        if (sj_num(s->cur, each, &us) != 0)
            continue;
        if (n++)
            l_str(l, ", ");
        l_text(l, k, kn < 16 ? kn : 16);
        l_printf(l, " %s", f_num(a, 1, us, 0));
    }
    f_end(f);
}

static void v_caches(frame *f, const span *s)
{
    static const struct {
        const char *label, *sect, *used, *budget;
        int joins;
    } c[] = {
        {"memory", "cache", "cache.bytes", "cache.budget_bytes", 1},
        {"cache_dir", "cache_dir", "cache_dir.usage_bytes", "cache_dir.budget_bytes", 0},
        {"samples", "sample_cache", "sample_cache.bytes", "sample_cache.budget_bytes", 0},
    };
    static const struct {
        const char *label, *path;
    } warn[] = {
        {"unpublished (substitutes)", "cache_dir.unpublished_substituted"},
        {"save errors", "cache_dir.save_errors"},
        {"disk full", "cache_dir.no_space"},
    };
    line *l = &f->l;
    char a[FMT], b[FMT], d[FMT], e[FMT], g[FMT], h[FMT];
    l_esc(l, "\033[1m");
    l_str(l, "cache");
    l_esc(l, "\033[0m");
    l_pad(l, 16);
    l_printf(l, "%9s %9s %11s %11s %21s", "hit% now", "hit% all", "hits", "misses",
             "held / budget");
    f_end(f);
    for (size_t i = 0; i < sizeof c / sizeof c[0] && !f_full(f); i++) {
        char held[2 * FMT + 4], ph[64], pm[64];
        snprintf(ph, sizeof ph, "%s.hits", c[i].sect);
        snprintf(pm, sizeof pm, "%s.misses", c[i].sect);
        l_pad(l, 2);
        l_str(l, c[i].label);
        l_pad(l, 16);
        snprintf(held, sizeof held, "%s / %s", s_bytes(g, s->cur, c[i].used),
                 s_bytes(h, s->cur, c[i].budget));
        l_printf(l, "%9s %9s %11s %11s %21s", s_hit(a, s, c[i].sect, c[i].joins, 1),
                 s_hit(b, s, c[i].sect, c[i].joins, 0), s_num(d, s->cur, ph, 0),
                 s_num(e, s->cur, pm, 0), held);
        if (c[i].joins && sj_lookup(s->cur, SJ_ROOT, "cache.joins") >= 0)
            l_printf(l, "   joins %s", s_num(a, s->cur, "cache.joins", 0));
        /* what the store did not get, only when it happened: it needs a look */
        for (size_t w = 0; w < sizeof warn / sizeof warn[0]; w++) {
            double x = 0;
            if (!strcmp(c[i].sect, "cache_dir") && num(s->cur, warn[w].path, &x) && x > 0)
                l_printf(l, "   %s %s", warn[w].label, s_num(a, s->cur, warn[w].path, 0));
        }
        f_end(f);
    }
    /* remote workers (remote=): batches from Redis against those computed here after all */
    double hits = 0, fb = 0, wait = 0, workers = 0, x = 0;
    if (sj_lookup(s->cur, SJ_ROOT, "remote") >= 0 && !f_full(f)) {
        int ok = num(s->cur, "remote.hits", &hits) && num(s->cur, "remote.fallbacks", &fb);
        num(s->cur, "remote.wait_s", &wait);
        int have_w = num(s->cur, "remote.workers", &workers);
        l_pad(l, 2);
        l_str(l, "remote");
        l_pad(l, 16);
        l_printf(l, "%9s %9s %11s %11s %21s", "",
                 f_num(a, ok && hits + fb > 0, 100 * hits / (hits + fb), 1),
                 s_num(d, s->cur, "remote.hits", 0), s_num(e, s->cur, "remote.fallbacks", 0), "");
        l_printf(l, "   workers %s", f_num(g, have_w && workers >= 0, workers, 0));
        if (hits > 0)
            l_printf(l, "   wait %s ms", f_num(h, 1, 1e3 * wait / hits, 1));
        if (num(s->cur, "remote.errors", &x) && x > 0)
            l_printf(l, "   errors %s", s_num(b, s->cur, "remote.errors", 0));
        if (num(s->cur, "remote.corrupt", &x) && x > 0)
            l_printf(l, "   corrupt %s", s_num(b, s->cur, "remote.corrupt", 0));
        if (num(s->cur, "remote.declined", &x) && x > 0)
            l_printf(l, "   declined %s", s_num(b, s->cur, "remote.declined", 0));
        f_end(f);
    }
    /* a remote source (s3://, https://): samples from source_cache against requests sent,
     * the bytes fetched, how many batches past those computed are fetched, and what went
     * wrong when it did */
    if (sj_lookup(s->cur, SJ_ROOT, "source") >= 0 && !f_full(f)) {
        char held[2 * FMT + 4] = "";
        if (num(s->cur, "source.cache.budget_bytes", &x) && x > 0)
            snprintf(held, sizeof held, "%s / %s", s_bytes(g, s->cur, "source.cache.usage_bytes"),
                     s_bytes(h, s->cur, "source.cache.budget_bytes"));
        l_pad(l, 2);
        l_str(l, "source");
        l_pad(l, 16);
        l_printf(l, "%9s %9s %11s %11s %21s", "", "", s_num(d, s->cur, "source.cache.hits", 0),
                 s_num(e, s->cur, "source.requests", 0), held);
        l_printf(l, "   fetched %s", s_bytes(a, s->cur, "source.bytes"));
        if (num(s->cur, "source.prefetch.ahead", &x) && x > 0)
            l_printf(l, "   %s batches ahead", s_num(b, s->cur, "source.prefetch.ahead", 0));
        if (num(s->cur, "source.retries", &x) && x > 0)
            l_printf(l, "   retries %s", s_num(b, s->cur, "source.retries", 0));
        if (num(s->cur, "source.failures", &x) && x > 0)
            l_printf(l, "   failures %s", s_num(b, s->cur, "source.failures", 0));
        f_end(f);
    }
    /* dynamic sharding (group=): this mount's claims of epoch/N/next */
    if (sj_lookup(s->cur, SJ_ROOT, "group") >= 0 && !f_full(f)) {
        size_t nn = 0;
        const char *name = sj_str(s->cur, sj_lookup(s->cur, SJ_ROOT, "group.name"), &nn);
        l_pad(l, 2);
        l_str(l, "group");
        l_pad(l, 16);
        l_printf(l, "%9s %9s %11s %11s %21s", "", "", s_num(a, s->cur, "group.claims", 0), "", "");
        l_str(l, "   ");
        l_text(l, name ? name : "?", name ? (nn < 32 ? nn : 32) : 1);
        if (num(s->cur, "group.given_back", &x) && x > 0)
            l_printf(l, "   given back %s", s_num(b, s->cur, "group.given_back", 0));
        if (num(s->cur, "group.lost", &x) && x > 0)
            l_printf(l, "   lost %s", s_num(b, s->cur, "group.lost", 0));
        if (num(s->cur, "group.exhausted", &x) && x > 0)
            l_printf(l, "   epoch ends %s", s_num(b, s->cur, "group.exhausted", 0));
        if (num(s->cur, "group.ahead", &x) && x > 0)
            l_printf(l, "   ahead %s", s_num(b, s->cur, "group.ahead", 0));
        f_end(f);
    }
}

/* One autotune decision: label, value, why. */
static void v_decision(frame *f, const sj_doc *d, const char *label, const char *key, int bytes)
{
    line *l = &f->l;
    char a[FMT], p[64];
    snprintf(p, sizeof p, "autotune.%s.value", key);
    const char *value = bytes ? s_bytes(a, d, p) : s_num(a, d, p, 0);
    snprintf(p, sizeof p, "autotune.%s.why", key);
    size_t wn = 0;
    const char *why = sj_str(d, sj_lookup(d, SJ_ROOT, p), &wn);
    l_pad(l, 2);
    l_str(l, label);
    l_pad(l, 16);
    l_str(l, value);
    l_pad(l, 28);
    if (why && wn)
        f_wrap(f, why, wn, 28, f->compact ? 1 : 3);
    else
        l_str(l, "-");
    f_end(f);
}

static void v_autotune(frame *f, const span *s)
{
    line *l = &f->l;
    const sj_doc *d = s->cur;
    char a[FMT], b[FMT], c[FMT], e[FMT], g[FMT];
    double x = 0;
    int at = sj_lookup(d, SJ_ROOT, "autotune");
    l_esc(l, "\033[1m");
    l_str(l, "autotune");
    l_esc(l, "\033[0m");
    l_pad(l, 16);
    if (sj_type(d, at) != SJ_OBJECT) {
        l_str(l, "-");
        f_end(f);
        return;
    }
    l_printf(l,
             "every %s ms   %s decisions   cpu budget %s   ram budget %s   predicted %s batches/s",
             s_num(a, d, "autotune.period_ms", 0), s_num(b, d, "autotune.decisions", 0),
             s_num(c, d, "autotune.cpu_budget", 0), s_bytes(e, d, "autotune.ram_budget_bytes"),
             s_num(g, d, "autotune.model.predicted_batches_per_s", 2));
    f_end(f);
    v_decision(f, d, "threads", "threads", 0);
    v_decision(f, d, "prefetch", "prefetch", 0);
    v_decision(f, d, "cache", "cache_bytes", 1);
    if (f_full(f))
        return;
    /* the model's costs (autotune.model) */
    l_pad(l, 2);
    l_str(l, "model");
    l_pad(l, 16);
    int any = 0;
    if (num(d, "autotune.model.sample_us", &x))
        l_printf(l, "sample %s us   ", f_num(a, 1, x, 1)), any = 1;
    if (num(d, "autotune.model.batch_header_us", &x))
        l_printf(l, "batch header %s us   ", f_num(a, 1, x, 1)), any = 1;
    if (!any)
        l_str(l, "-");
    f_end(f);
}

/* One row of the readers table: stream e of prefetch.streams (or -1), autotune reader t
 * (or -1); rate from the same stream in the previous sample. */
static void v_reader(frame *f, const span *s, int e, int t)
{
    line *l = &f->l;
    const sj_doc *d = s->cur;
    char c[11][FMT];
    double x[11] = {0};
    int ok[11];
    int src = e >= 0 ? e : t;
    ok[0] = num_at(d, src, "id", &x[0]);
    ok[1] = num_at(d, e, "pid", &x[1]);
    ok[2] = num_at(d, src, "epoch", &x[2]);
    ok[3] = num_at(d, src, "batch", &x[3]);
    ok[4] = num_at(d, src, "stride", &x[4]);
    ok[5] = num_at(d, e, "depth", &x[5]) || num_at(d, t, "depth", &x[5]);
    int pe = ok[0] && e >= 0
                 ? find_id(s->prev, sj_lookup(s->prev, SJ_ROOT, "prefetch.streams"), x[0])
                 : -1;
    ok[6] = e >= 0 && rate_at(s, e, pe, "batches", &x[6]);
    ok[7] = num_at(d, e, "step_ms", &x[7]) || num_at(d, t, "think_ms", &x[7]);
    ok[8] = num_at(d, e, "wait_ms", &x[8]);
    ok[9] = num_at(d, t, "predicted_wait_ms", &x[9]);
    ok[10] = num_at(d, e, "idle_s", &x[10]);
    static const int prec[11] = {0, 0, 0, 0, 0, 0, 2, 1, 1, 1, 1};
    for (int i = 0; i < 11; i++)
        f_num(c[i], ok[i], x[i], prec[i]);
    l_printf(l, "  %6s %8s %6s %8s %6s %5s %8s %8s %8s %8s %7s", ok[0] ? c[0] : "-",
             ok[1] ? c[1] : "-", ok[2] ? c[2] : "-", ok[3] ? c[3] : "-", ok[4] ? c[4] : "-",
             ok[5] ? c[5] : "-", ok[6] ? c[6] : "-", ok[7] ? c[7] : "-", ok[8] ? c[8] : "-",
             ok[9] ? c[9] : "-", ok[10] ? c[10] : "-");
    f_end(f);
}

/* The readers table, leaving `reserve` lines of the screen for what follows it. */
static void v_readers(frame *f, const span *s, int reserve)
{
    line *l = &f->l;
    const sj_doc *d = s->cur;
    int streams = sj_lookup(d, SJ_ROOT, "prefetch.streams");
    int tuned = sj_lookup(d, SJ_ROOT, "autotune.readers");
    if (sj_type(d, streams) != SJ_ARRAY)
        streams = -1;
    if (sj_type(d, tuned) != SJ_ARRAY)
        tuned = -1;
    /* readers: every stream, then autotune readers no stream has */
    int n = streams >= 0 ? sj_count(d, streams) : 0, extra = 0, seen = 0;
    /* batchfs has at most BFS_EXEC_MAX_READERS (64); matching ids is quadratic, so a
     * stranger file is looked at no further than a screen can show */
    for (int t = tuned >= 0 ? sj_child(d, tuned, 0) : -1; t >= 0 && seen < 1000;
         t = sj_next(d, t), seen++) {
        double id;
        if (!num_at(d, t, "id", &id) || find_id(d, streams, id) < 0)
            extra++;
    }
    l_esc(l, "\033[1m");
    l_str(l, "readers");
    l_esc(l, "\033[0m");
    l_pad(l, 16);
    if (streams < 0 && tuned < 0) {
        l_str(l, "-");
        f_end(f);
        return;
    }
    l_printf(l, "%d", n + extra);
    f_end(f);
    int total = n + extra, shown = 0;
    if (f->rows - reserve > f->used + 1) /* the heading and at least one row */
        f->limit = f->rows - reserve;
    if (f_full(f)) {
        f->limit = f->rows;
        return;
    }
    l_printf(l, "  %6s %8s %6s %8s %6s %5s %8s %8s %8s %8s %7s", "id", "pid", "epoch", "batch",
             "stride", "depth", "batch/s", "step ms", "wait ms", "pred ms", "idle s");
    f_end(f);
    for (int e = streams >= 0 ? sj_child(d, streams, 0) : -1; e >= 0; e = sj_next(d, e)) {
        /* the last line left says how many more there are */
        if (f_full(f) || (f->screen && f->used == f->limit - 1 && shown + 1 < total))
            break;
        double id;
        int t = num_at(d, e, "id", &id) ? find_id(d, tuned, id) : -1;
        v_reader(f, s, e, t);
        shown++;
    }
    for (int t = tuned >= 0 ? sj_child(d, tuned, 0) : -1; t >= 0 && shown < total;
         t = sj_next(d, t)) {
        double id;
        if (num_at(d, t, "id", &id) && find_id(d, streams, id) >= 0)
            continue;
        if (f_full(f) || (f->screen && f->used == f->limit - 1 && shown + 1 < total))
            break;
        v_reader(f, s, -1, t);
        shown++;
    }
    if (shown < total && !f_full(f)) {
        l_printf(l, "  ... %d more", total - shown);
        f_end(f);
    }
    f->limit = f->rows;
}

/* ---- the plain line ------------------------------------------------------------------------ */

static void plain_line(frame *f, const bfs_top_view *v, const span *s)
{
    line *l = &f->l;
    const sj_doc *cur = s->cur;
    char ts[32] = "-", a[FMT], b[FMT], c[FMT], d[FMT], e[FMT], g[FMT], h[FMT], i[FMT], j[FMT],
         k[FMT], m[FMT], n[FMT], o[FMT];
    double mib = 0;
    int mibok = rate(s, "batches.opened_bytes", &mib);
    struct tm tm;
    if (localtime_r(&v->when, &tm))
        strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    int nread = sj_count(s->cur, sj_lookup(s->cur, SJ_ROOT, "prefetch.streams"));
    if (nread < 0)
        nread = sj_count(s->cur, sj_lookup(s->cur, SJ_ROOT, "autotune.readers"));
    l_printf(l,
             "%s images/s=%s avg_images/s=%s batches/s=%s served=%s computed=%s in_flight=%s "
             "hit%%=%s dir_hit%%=%s sample_hit%%=%s threads=%s prefetch=%s readers=%s "
             "served_MiB/s=%s",
             ts, s_rate(a, s, "images", 1), s_num(b, cur, "images_per_s", 1),
             s_rate(c, s, "batches.served", 2), s_num(d, cur, "batches.served", 0),
             s_num(e, cur, "batches.computed", 0), s_num(g, cur, "batches.in_flight", 0),
             s_hit(h, s, "cache", 1, 1), s_hit(i, s, "cache_dir", 0, 1),
             s_hit(j, s, "sample_cache", 0, 1), s_num(k, cur, "threads", 0), s_depth(m, cur),
             f_num(n, nread >= 0, nread, 0), f_num(o, mibok, mib / (1 << 20), 1));
    char src[512];
    if (*f_sources(src, sizeof src, cur, 1))
        l_printf(l, " sources=%s", src);
    fwrite(l->b, 1, l->n, f->out);
    fputc('\n', f->out);
    f_begin(f);
}

/* prev is not comparable with cur: a new daemon (uptime went back, other fingerprint). */
static int restarted(const sj_doc *prev, const sj_doc *cur)
{
    double a, b;
    if (num(prev, "uptime_s", &a) && num(cur, "uptime_s", &b) && b < a)
        return 1;
    const char *fa = sj_get_str(prev, "fingerprint"), *fb = sj_get_str(cur, "fingerprint");
    return fa && fb && strcmp(fa, fb);
}

void bfs_top_render(const bfs_top_view *v, const sj_doc *prev, const sj_doc *cur, double dt,
                    FILE *out)
{
    frame f;
    f.out = out, f.screen = v->screen, f.used = 0;
    f.cols = v->cols < 1 ? 1 : v->cols > 1000 ? 1000 : v->cols;
    f.rows = v->rows < 1 ? 1 : v->rows > 1000 ? 1000 : v->rows;
    f.limit = f.rows;
    f.compact = f.rows < 40; /* the whole view, blank lines and 3-line reasons: ~36 + readers */
    f_begin(&f);
    span s = {prev && !restarted(prev, cur) ? prev : NULL, cur, dt};
    if (!v->screen) {
        plain_line(&f, v, &s);
        return;
    }
    v_title(&f, v, &s);
    f_blank(&f);
    v_throughput(&f, &s);
    f_blank(&f);
    v_caches(&f, &s);
    f_blank(&f);
    v_stages(&f, &s);
    f_blank(&f);
    /* readers before autotune, but leaving autotune its lines: heading, 3 decisions of 1
     * or 3 lines, model, and the blank line before it */
    v_readers(&f, &s, f.compact ? 5 : 12);
    f_blank(&f);
    v_autotune(&f, &s);
    fputs("\033[0m\033[J", out);
}
