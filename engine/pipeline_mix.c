/*
 * pipeline_mix.c — the options of mixtures (pipeline_internal.h): source=PATH[:W]+...
 * and mix_schedule=, their setters and formatters, and a mixture's weights, identity and
 * display text for the engine (pipeline.h; bfs_pipeline_mix, which mountopts calls too,
 * is in pipeline.c).
 */
#include "engine/pipeline_internal.h"
#include "base/err.h"
#include "base/hash.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- mixtures: source= and mix_schedule= -------------------------------------------------- */

/* One source item s[0..n) ("PATH[:W]", spaces trimmed): *plen the path's length; *w its
 * weight, 0 when none is given (no ':', or a '/' after the last one: part of the path).
 * false for an empty path or a weight that is not a positive decimal. */
static bool mix_item(const char *s, size_t n, size_t *plen, double *w)
{
    const char *colon = NULL;
    for (size_t i = 0; i < n; i++)
        if (s[i] == ':')
            colon = s + i;
    *plen = n;
    *w = 0;
    if (colon && !memchr(colon, '/', n - (size_t)(colon - s))) {
        *plen = (size_t)(colon - s);
        if (!bfs_opt_parse_decimal(colon + 1, n - *plen - 1, false, w) || !(*w > 0) ||
            !isfinite(*w))
            return false;
    }
    return *plen > 0;
}

/* A spec file's `source = X` names a mixture of one source when X has a weight. */
bool bfs_opt_weighted(const char *v)
{
    size_t plen;
    double w;
    return mix_item(v, strlen(v), &plen, &w) && w > 0;
}

/* Walk source= text: calls back each item (trimmed). Returns the item count, or -1 for a
 * bad item (*why set), or a callback's refusal. */
int bfs_opt_mix_walk(const char *v, bfs_mix_desc *d, const char **why)
{
    int n = 0, weighted_n = 0;
    for (const char *p = v;;) {
        const char *e = p + strcspn(p, "+,");
        const char *a = p, *b = e;
        while (a < b && isspace((unsigned char)*a))
            a++;
        while (b > a && isspace((unsigned char)b[-1]))
            b--;
        size_t plen;
        double w;
        if (!mix_item(a, (size_t)(b - a), &plen, &w))
            return *why = a == b ? "an empty source" : "a weight that is not a positive decimal",
                   -1;
        if (n == (int)BFS_MIX_SOURCES)
            return *why = "more than 64 sources", -1;
        weighted_n += w > 0;
        if (d) {
            size_t at = 0;
            for (int k = 0; k < n; k++)
                at += strlen(d->path[k]) + 1;
            memcpy(d->buf + at, a, plen);
            d->buf[at + plen] = '\0';
            d->path[n] = d->buf + at;
            d->weight[n] = w;
        }
        n++;
        if (!*e)
            break;
        p = e + 1;
    }
    if (weighted_n && weighted_n != n)
        return *why = "weights on some sources only: give every source a weight, or none", -1;
    return n;
}

int bfs_opt_set_source(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)d;
    if (!strcmp(v, "SOURCE") || !*v) {
        o->mix[0] = '\0';
        return 0;
    }
    if (strlen(v) >= sizeof o->mix)
        return *why = "too long", -EINVAL;
    for (const char *c = v; *c; c++) /* it must read back from MNT/pipeline's line */
        if ((unsigned char)*c < 0x20 || *c == 0x7f ||
            (*c == '#' && (c == v || isspace((unsigned char)c[-1]))))
            return *why = "a control character, or a '#' first or after a space (which a spec file "
                          "reads as a comment)",
                   -EINVAL;
    int n = bfs_opt_mix_walk(v, NULL, why);
    if (n < 0)
        return -EINVAL;
    if (n == 1 && !bfs_opt_weighted(v)) /* as MNT/pipeline's `source =` line of one SOURCE says */
        return *why = "one dataset without a weight is the SOURCE argument; a mixture has two "
                      "or more, or a weight (PATH:1)",
               -EINVAL;
    /* as given, with '+' between the sources (a spec file may use ',') */
    size_t i = 0;
    for (; v[i]; i++)
        o->mix[i] = v[i] == ',' ? '+' : v[i];
    o->mix[i] = '\0';
    return 0;
}

int bfs_opt_show_source(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    (void)d;
    return snprintf(buf, cap, "%s", o->mix[0] ? o->mix : "SOURCE");
}

/* Parse schedule text into d (d->n = weights per point, set from the first point when 0).
 * 0, or -1 with *why. */
int bfs_opt_schedule_parse(const char *v, bfs_mix_desc *d, const char **why)
{
    d->npoints = 0;
    d->linear = 0;
    if (!strncmp(v, "linear:", 7))
        d->linear = 1, v += 7;
    else if (!strncmp(v, "step:", 5))
        v += 5;
    uint32_t per = 0;
    for (const char *p = v;;) {
        const char *e = p + strcspn(p, "+,");
        if (d->npoints == BFS_SCHEDULE_POINTS)
            return *why = "more than 32 points", -1;
        const char *at = memchr(p, '@', (size_t)(e - p));
        char *end;
        errno = 0;
        unsigned long long ep = at && isdigit((unsigned char)*p) ? strtoull(p, &end, 10) : 0;
        if (!at || !isdigit((unsigned char)*p) || end != at || errno || ep > UINT32_MAX)
            return *why = "a point that is not EPOCH@W/W/...", -1;
        if (d->npoints && ep <= d->at[d->npoints - 1])
            return *why = "epochs not in ascending order", -1;
        uint32_t k = 0;
        double sum = 0;
        for (const char *q = at + 1;;) {
            const char *qe = q;
            while (qe < e && *qe != '/')
                qe++;
            double w;
            if (k == BFS_MIX_SOURCES || !bfs_opt_parse_decimal(q, (size_t)(qe - q), false, &w) ||
                !(w >= 0) || !isfinite(w))
                return *why = "a weight that is not a decimal >= 0", -1;
            d->w[d->npoints][k++] = w;
            sum += w;
            if (qe == e)
                break;
            q = qe + 1;
        }
        if (!(sum > 0))
            return *why = "a point whose weights are all 0", -1;
        if (per && k != per)
            return *why = "points with different numbers of weights", -1;
        per = k;
        d->at[d->npoints++] = ep;
        if (!*e)
            break;
        p = e + 1;
    }
    if (!d->n)
        d->n = per;
    return 0;
}

int bfs_opt_set_schedule(const opt *d, bfs_pipeline_opts *o, const char *v, const char **why)
{
    (void)d;
    if (!strcmp(v, "none")) {
        o->mix_schedule[0] = '\0';
        return 0;
    }
    bfs_mix_desc *m = calloc(1, sizeof *m);
    if (!m)
        return *why = "out of memory", -EINVAL;
    int rc = bfs_opt_schedule_parse(v, m, why);
    /* normalized: the same schedule has one text (and one fingerprint) */
    size_t at = 0;
    char t[40];
    if (!rc)
        at += (size_t)snprintf(o->mix_schedule, sizeof o->mix_schedule, "%s",
                               m->linear ? "linear:" : "");
    for (uint32_t i = 0; !rc && i < m->npoints && at < sizeof o->mix_schedule; i++) {
        at += (size_t)snprintf(o->mix_schedule + at, sizeof o->mix_schedule - at, "%s%llu@",
                               i ? "+" : "", (unsigned long long)m->at[i]);
        for (uint32_t k = 0; k < m->n && at < sizeof o->mix_schedule; k++) {
            bfs_opt_fmt_real(t, m->w[i][k], false);
            at += (size_t)snprintf(o->mix_schedule + at, sizeof o->mix_schedule - at, "%s%s",
                                   k ? "/" : "", t);
        }
    }
    if (!rc && at >= sizeof o->mix_schedule)
        *why = "too long", rc = -1;
    if (rc)
        o->mix_schedule[0] = '\0'; /* (the caller keeps its own copy on error) */
    free(m);
    return rc ? -EINVAL : 0;
}

int bfs_opt_show_schedule(const opt *d, const bfs_pipeline_opts *o, char *buf, size_t cap)
{
    (void)d;
    return snprintf(buf, cap, "%s", o->mix_schedule[0] ? o->mix_schedule : "none");
}

void bfs_pipeline_mix_weights(const bfs_mix_desc *d, const uint64_t *count, uint64_t epoch,
                              double *w)
{
    double sum = 0;
    for (uint32_t k = 0; k < d->n; k++) {
        if (d->npoints) {
            uint32_t i = 0;
            while (i + 1 < d->npoints && d->at[i + 1] <= epoch)
                i++;
            w[k] = d->w[i][k];
            if (d->linear && i + 1 < d->npoints && epoch > d->at[i]) {
                double f = (double)(epoch - d->at[i]) / (double)(d->at[i + 1] - d->at[i]);
                w[k] = d->w[i][k] + f * (d->w[i + 1][k] - d->w[i][k]);
            }
        } else
            w[k] = d->weight[k] > 0 ? d->weight[k] : (double)count[k];
        sum += w[k];
    }
    for (uint32_t k = 0; k < d->n; k++)
        w[k] /= sum;
}

uint64_t bfs_pipeline_mix_identity(const bfs_mix_desc *d, uint64_t sources_identity)
{
    char t[64];
    double sum = 0;
    for (uint32_t k = 0; k < d->n; k++)
        sum += d->weight[k];
    bfs_xxh64_state st;
    bfs_xxh64_init(&st, sources_identity);
    for (uint32_t k = 0; k < d->n; k++) { /* normalized: 7:3 is 0.7:0.3 */
        bfs_opt_fmt_real(t, sum > 0 ? d->weight[k] / sum : 0, false);
        bfs_xxh64_update(&st, t, strlen(t) + 1);
    }
    return bfs_xxh64_digest(&st);
}

int bfs_pipeline_mix_display(const bfs_mix_desc *d, char *buf, size_t cap)
{
    size_t at = 0;
    char t[40];
    for (uint32_t k = 0; k < d->n; k++) {
        bfs_opt_fmt_real(t, d->weight[k], false);
        int w =
            snprintf(at < cap ? buf + at : NULL, at < cap ? cap - at : 0, "%s%s%s%s", k ? ", " : "",
                     d->path[k], d->weight[k] > 0 ? ":" : "", d->weight[k] > 0 ? t : "");
        if (w < 0)
            return w;
        at += (size_t)w;
    }
    return (int)at;
}
