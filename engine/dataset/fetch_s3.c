/*
 * fetch_s3.c — s3:// URLs to request URLs, and the credentials and region of S3 requests
 * found where the AWS CLI and SDKs find them (environment, ~/.aws/credentials and
 * ~/.aws/config profiles). Pure but for reading the environment and those two files;
 * fetch.c signs with what it finds (CURLOPT_AWS_SIGV4). Tested by tests/check_fetch.c,
 * the URL part fuzzed by tests/fuzz/fuzz_fetch.c.
 *
 * Secrets: a secret key or session token is copied only into bfs_s3_creds (wiped by
 * bfs_s3_creds_wipe) and never into a message; messages name the variable, the file and
 * the profile.
 */
#include "engine/dataset/fetch_internal.h"
#include "engine/dataset/fetch.h"
#include "base/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* S3's limit on a key's length (bytes of UTF-8). */
#define S3_KEY_MAX 1024

/* At most cap - 1 bytes of s for a message, control bytes as '?' (one line). */
static const char *shown(const char *s, char *buf, size_t cap)
{
    size_t i = 0;
    for (; s[i] && i + 1 < cap; i++)
        buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
    buf[i] = '\0';
    return buf;
}

int bfs_s3_parse_url(const char *url, char **bucket, char **key, char *err, size_t errlen)
{
    *bucket = *key = NULL;
    char sb[201];
    const char *u = shown(url, sb, sizeof sb);
    if (strncmp(url, "s3://", 5))
        return bfs_errf(-EINVAL, err, errlen, "%s: not an s3://BUCKET/KEY URL", u);
    const char *b = url + 5, *slash = strchr(b, '/');
    size_t bn = slash ? (size_t)(slash - b) : strlen(b);
    if (bn == 0 || bn > 255)
        return bfs_errf(-EINVAL, err, errlen,
                        "%s: no bucket name (write s3://BUCKET/KEY, e.g. "
                        "s3://my-bucket/data/train.bfs)",
                        u);
    for (size_t i = 0; i < bn; i++) {
        char c = b[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == '_'))
            return bfs_errf(-EINVAL, err, errlen,
                            "%s: the bucket name may hold only letters, digits, '.', '-' "
                            "and '_'",
                            u);
    }
    if (!slash || !slash[1])
        return bfs_errf(-EINVAL, err, errlen,
                        "%s: no object key after the bucket (write s3://BUCKET/KEY)", u);
    const char *k = slash + 1;
    size_t kn = strlen(k);
    if (kn > S3_KEY_MAX)
        return bfs_errf(-EINVAL, err, errlen, "%s...: the key is over %d bytes, S3's limit", u,
                        S3_KEY_MAX);
    for (size_t i = 0; i < kn; i++)
        if ((unsigned char)k[i] < 0x20 || k[i] == 0x7f)
            return bfs_errf(-EINVAL, err, errlen, "s3://%.*s/...: the key holds a control byte",
                            (int)bn, b);
    *bucket = strndup(b, bn);
    *key = strdup(k);
    if (!*bucket || !*key) {
        free(*bucket), free(*key);
        *bucket = *key = NULL;
        return -ENOMEM;
    }
    return 0;
}

char *bfs_url_encode_path(const char *key)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(key);
    char *out = malloc(n * 3 + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)key[i];
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '.' || c == '_' || c == '~' || c == '/') {
            *o++ = (char)c;
        } else {
            *o++ = '%', *o++ = hex[c >> 4], *o++ = hex[c & 15];
        }
    }
    *o = '\0';
    return out;
}

int bfs_fetch_check_endpoint(const char *e, const char **why)
{
    static const char form[] = "must be http://HOST[:PORT][/PATH] or https://HOST[:PORT][/PATH] "
                               "(e.g. http://127.0.0.1:9000), without spaces, a query or a "
                               "fragment";
    const char *h = !strncmp(e, "http://", 7) ? e + 7 : !strncmp(e, "https://", 8) ? e + 8 : NULL;
    size_t hn = h ? strcspn(h, "/") : 0;
    if (!h || hn == 0 || h[0] == ':')
        return *why = form, -EINVAL;
    for (const char *p = e; *p; p++)
        if ((unsigned char)*p <= 0x20 || *p == 0x7f || *p == '?' || *p == '#')
            return *why = form, -EINVAL;
    if (memchr(h, '@', hn))
        return *why = "a URL without user:password@ (credentials come from AWS_ACCESS_KEY_ID "
                      "and AWS_SECRET_ACCESS_KEY or ~/.aws/credentials)",
               -EINVAL;
    return 0;
}

int bfs_s3_check_endpoint(const char *e, char *err, size_t errlen)
{
    const char *why;
    if (!bfs_fetch_check_endpoint(e, &why))
        return 0;
    char sb[201];
    return bfs_errf(-EINVAL, err, errlen, "s3_endpoint=%s: %s", shown(e, sb, sizeof sb), why);
}

/* A bucket name that is a valid DNS label under the virtual-hosted style (and matches
 * the *.s3 wildcard certificate: no dots). */
static int host_label(const char *b)
{
    size_t n = strlen(b);
    if (n < 3 || n > 63 || b[0] == '-' || b[n - 1] == '-')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((b[i] >= 'a' && b[i] <= 'z') || (b[i] >= '0' && b[i] <= '9') || b[i] == '-'))
            return 0;
    return 1;
}

char *bfs_s3_request_url(const char *bucket, const char *key, const char *endpoint,
                         const char *region)
{
    char *ek = bfs_url_encode_path(key), *eb = bfs_url_encode_path(bucket), *out = NULL;
    if (!ek || !eb)
        goto out;
    int n;
    if (endpoint && *endpoint) {
        size_t en = strlen(endpoint);
        while (en > 0 && endpoint[en - 1] == '/')
            en--;
        n = asprintf(&out, "%.*s/%s/%s", (int)en, endpoint, eb, ek);
    } else if (host_label(bucket)) {
        n = asprintf(&out, "https://%s.s3.%s.amazonaws.com/%s", bucket, region, ek);
    } else {
        n = asprintf(&out, "https://s3.%s.amazonaws.com/%s/%s", region, eb, ek);
    }
    if (n < 0)
        out = NULL;
out:
    free(ek);
    free(eb);
    return out;
}

/* Trim blanks (and a CR) at both ends of [*s, *s + *n). */
static void trim(const char **s, size_t *n)
{
    while (*n && (**s == ' ' || **s == '\t'))
        (*s)++, (*n)--;
    while (*n && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t' || (*s)[*n - 1] == '\r'))
        (*n)--;
}

int bfs_ini_get(const char *path, const char *section, const char *name, char *out, size_t outlen)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
    char line[8192];
    int in = 0, found = 0, rc = 0;
    size_t secn = strlen(section), namen = strlen(name);
    while (fgets(line, sizeof line, f)) {
        const char *s = line;
        size_t n = strcspn(line, "\n");
        trim(&s, &n);
        if (n == 0 || s[0] == '#' || s[0] == ';')
            continue;
        if (s[0] == '[') {
            const char *e = memchr(s, ']', n);
            if (!e)
                continue;
            const char *t = s + 1;
            size_t tn = (size_t)(e - t);
            trim(&t, &tn);
            in = tn == secn && !memcmp(t, section, secn);
            continue;
        }
        const char *eq = memchr(s, '=', n);
        if (!in || !eq)
            continue;
        const char *k = s, *v = eq + 1;
        size_t kn = (size_t)(eq - s), vn = n - kn - 1;
        trim(&k, &kn);
        trim(&v, &vn);
        if (kn != namen || memcmp(k, name, kn))
            continue;
        if (vn >= outlen) {
            rc = -E2BIG;
            continue;
        }
        memcpy(out, v, vn);
        out[vn] = '\0';
        found = 1, rc = 0;
    }
    if (ferror(f) && !rc)
        rc = -EIO;
    fclose(f);
    explicit_bzero(line, sizeof line);
    return rc ? rc : found;
}

/* The file of variable var, else ~/NAME (HOME), into out. 0, or -1 without HOME. */
static int aws_file(const char *var, const char *name, char *out, size_t outlen)
{
    const char *v = getenv(var);
    if (v && *v) {
        snprintf(out, outlen, "%s", v);
        return 0;
    }
    const char *home = getenv("HOME");
    if (!home || !*home)
        return -1;
    snprintf(out, outlen, "%s/.aws/%s", home, name);
    return 0;
}

void bfs_s3_creds_wipe(bfs_s3_creds *c)
{
    explicit_bzero(c, sizeof *c);
}

int bfs_s3_creds_load(bfs_s3_creds *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    const char *id = getenv("AWS_ACCESS_KEY_ID"), *sec = getenv("AWS_SECRET_ACCESS_KEY");
    const char *tok = getenv("AWS_SESSION_TOKEN");
    if (id && *id) {
        if (!sec || !*sec)
            return bfs_errf(-EINVAL, err, errlen,
                            "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not: set "
                            "both, or neither to use a profile of ~/.aws/credentials");
        if (strlen(id) >= sizeof c->key_id || strlen(sec) >= sizeof c->secret ||
            (tok && strlen(tok) >= sizeof c->token))
            return bfs_errf(-EINVAL, err, errlen,
                            "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY or AWS_SESSION_TOKEN is "
                            "longer than any AWS credential");
        snprintf(c->key_id, sizeof c->key_id, "%s", id);
        snprintf(c->secret, sizeof c->secret, "%s", sec);
        snprintf(c->token, sizeof c->token, "%s", tok ? tok : "");
        snprintf(c->source, sizeof c->source, "environment (AWS_ACCESS_KEY_ID)");
        c->have = 1;
        return 0;
    }
    const char *prof = getenv("AWS_PROFILE");
    int named = prof && *prof;
    if (!named)
        prof = "default";
    char path[4096], sp[400], sf[400];
    if (aws_file("AWS_SHARED_CREDENTIALS_FILE", "credentials", path, sizeof path) == 0) {
        int r1 = bfs_ini_get(path, prof, "aws_access_key_id", c->key_id, sizeof c->key_id);
        int r2 = bfs_ini_get(path, prof, "aws_secret_access_key", c->secret, sizeof c->secret);
        int r3 = bfs_ini_get(path, prof, "aws_session_token", c->token, sizeof c->token);
        if (r1 < 0 || r2 < 0 || r3 < 0) {
            int rc = r1 < 0 ? r1 : r2 < 0 ? r2 : r3;
            bfs_s3_creds_wipe(c);
            return bfs_errf(rc == -E2BIG ? -EINVAL : rc, err, errlen,
                            "%s: cannot read the credentials of profile %.100s (%s)",
                            shown(path, sf, sizeof sf), shown(prof, sp, sizeof sp),
                            rc == -E2BIG ? "a value too long" : bfs_strerror(rc));
        }
        if (r1 == 1 || r2 == 1) {
            if (r1 != 1 || r2 != 1) {
                bfs_s3_creds_wipe(c);
                return bfs_errf(-EINVAL, err, errlen,
                                "%s: profile [%.100s] needs both aws_access_key_id and "
                                "aws_secret_access_key",
                                shown(path, sf, sizeof sf), shown(prof, sp, sizeof sp));
            }
            snprintf(c->source, sizeof c->source, "profile %.100s of %.380s",
                     shown(prof, sp, sizeof sp), shown(path, sf, sizeof sf));
            c->have = 1;
            return 0;
        }
    }
    bfs_s3_creds_wipe(c);
    if (named)
        return bfs_errf(-EINVAL, err, errlen,
                        "AWS_PROFILE=%.100s: no such profile with credentials in %.3000s "
                        "(AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials)",
                        shown(prof, sp, sizeof sp), shown(path, sf, sizeof sf));
    snprintf(c->source, sizeof c->source, "none (unsigned requests)");
    return 0;
}

static int region_ok(const char *r)
{
    size_t n = strlen(r);
    if (n == 0 || n > 63)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((r[i] >= 'a' && r[i] <= 'z') || (r[i] >= '0' && r[i] <= '9') || r[i] == '-'))
            return 0;
    return 1;
}

int bfs_s3_region_find(const char *opt, char *out, size_t outlen, char *err, size_t errlen)
{
    const char *what = "s3_region=", *v = opt;
    char buf[128], path[4096] = "";
    if (!v || !*v)
        what = "AWS_REGION", v = getenv("AWS_REGION");
    if (!v || !*v)
        what = "AWS_DEFAULT_REGION", v = getenv("AWS_DEFAULT_REGION");
    if ((!v || !*v) && aws_file("AWS_CONFIG_FILE", "config", path, sizeof path) == 0) {
        const char *prof = getenv("AWS_PROFILE");
        char sec[200];
        if (!prof || !*prof || !strcmp(prof, "default"))
            snprintf(sec, sizeof sec, "default");
        else
            snprintf(sec, sizeof sec, "profile %.100s", prof);
        if (bfs_ini_get(path, sec, "region", buf, sizeof buf) == 1)
            what = path, v = buf;
    }
    if (!v || !*v)
        v = "us-east-1", what = "default";
    if (!region_ok(v) || strlen(v) >= outlen) {
        char sw[400], sv[80];
        return bfs_errf(-EINVAL, err, errlen,
                        "the S3 region %s from %s is not a region name like eu-west-1",
                        shown(v, sv, sizeof sv), shown(what, sw, sizeof sw));
    }
    snprintf(out, outlen, "%s", v);
    return 0;
}

unsigned bfs_fetch_backoff_ms(unsigned attempt, uint64_t rnd)
{
    unsigned d = 100;
    for (unsigned i = 1; i < attempt && d < 5000; i++)
        d *= 2;
    if (d > 5000)
        d = 5000;
    return d / 2 + (unsigned)(rnd % (d / 2 + 1));
}
