/*
 * check_fetch.c — the object-storage layer (engine/dataset/fetch.h): offline, s3:// URLs
 * (bucket and key, percent-encoding of spaces and UTF-8, bad URLs refused), request URLs
 * (virtual-hosted on AWS, path style on an endpoint), s3_endpoint= checks, credentials
 * from the environment and from credentials/config files (profiles), the region, the
 * response parser (status lines, folding, case, good and bad Content-Range, the body
 * check), the backoff; then real requests against tests/fetch_server.py, an HTTP server
 * of the suite's own on 127.0.0.1 that serves ranges and ETags and injects faults on
 * request: exact bytes from many threads, retries on 503/500/429, a hang (timeout) and a
 * body cut short, errors mapped (404, 403, 412, a replaced object), wrong Content-Range,
 * a server ignoring Range or sending more bytes (nothing copied beyond the range), S3
 * path style signed with SigV4 and a session token (the server checks the signature as S3
 * does), and no secret in any message or reason; a child after fork() reading through its own
 * connections.
 */
#include "engine/dataset/fetch.h"
#include "engine/dataset/fetch_internal.h"
#include "base/err.h"
#include "tests/testutil.h"

#include <check.h>
#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SECRET "SECRETMARKERxyz0123456789"
#define TOKEN  "TOKENMARKERabc9876543210"

/* ---- offline ------------------------------------------------------------------------- */

START_TEST(s3_urls)
{
    char *b, *k, err[512];
    ck_assert_int_eq(bfs_s3_parse_url("s3://my-bucket/data/train.bfs", &b, &k, err, sizeof err), 0);
    ck_assert_str_eq(b, "my-bucket");
    ck_assert_str_eq(k, "data/train.bfs");
    free(b), free(k);
    ck_assert_int_eq(bfs_s3_parse_url("s3://b/dir/a b/é%.bfs", &b, &k, err, sizeof err), 0);
    ck_assert_str_eq(k, "dir/a b/é%.bfs");
    char *e = bfs_url_encode_path(k);
    ck_assert_str_eq(e, "dir/a%20b/%C3%A9%25.bfs");
    free(e), free(b), free(k);

    const char *bad[] = {"s3://",        "s3:///key",         "s3://bucket",
                         "s3://bucket/", "s3://bad bucket/k", "s3://b/k\nx",
                         "https://b/k",  "s3://b?x/k"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = '\0';
        ck_assert_msg(bfs_s3_parse_url(bad[i], &b, &k, err, sizeof err) == -EINVAL, "%s", bad[i]);
        ck_assert_msg(err[0] && !strchr(err, '\n'), "%s: %s", bad[i], err);
        ck_assert_ptr_null(b);
    }

    /* request URLs */
    char *u = bfs_s3_request_url("my-bucket", "dir/a b.bfs", NULL, "eu-west-1");
    ck_assert_str_eq(u, "https://my-bucket.s3.eu-west-1.amazonaws.com/dir/a%20b.bfs");
    free(u);
    u = bfs_s3_request_url("my.bucket", "k", "", "us-east-1");
    ck_assert_str_eq(u, "https://s3.us-east-1.amazonaws.com/my.bucket/k");
    free(u);
    u = bfs_s3_request_url("b", "x/ü", "http://127.0.0.1:9000/", "us-east-1");
    ck_assert_str_eq(u, "http://127.0.0.1:9000/b/x/%C3%BC");
    free(u);
    u = bfs_s3_request_url("b", "k", "https://minio.example:9443/s3", "x");
    ck_assert_str_eq(u, "https://minio.example:9443/s3/b/k");
    free(u);

    ck_assert_int_eq(bfs_s3_check_endpoint("http://127.0.0.1:9000", err, sizeof err), 0);
    ck_assert_int_eq(bfs_s3_check_endpoint("https://s3.example/base/", err, sizeof err), 0);
    const char *badep[] = {"127.0.0.1:9000", "ftp://x",     "http://",
                           "http://u:p@h/",  "http://h/?a", "http://h /"};
    for (size_t i = 0; i < sizeof badep / sizeof *badep; i++) {
        err[0] = '\0';
        ck_assert_msg(bfs_s3_check_endpoint(badep[i], err, sizeof err) == -EINVAL, "%s", badep[i]);
        ck_assert_msg(strstr(err, "s3_endpoint="), "%s", err);
    }
    ck_assert(bfs_fetch_is_remote("s3://b/k") && bfs_fetch_is_remote("https://h/x") &&
              bfs_fetch_is_remote("http://h/x"));
    ck_assert(!bfs_fetch_is_remote("/data/x.bfs") && !bfs_fetch_is_remote("S3://b/k") &&
              !bfs_fetch_is_remote(NULL));
}
END_TEST

static void clear_aws_env(void)
{
    const char *v[] = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",       "AWS_SESSION_TOKEN",
                       "AWS_PROFILE",       "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
                       "AWS_REGION",        "AWS_DEFAULT_REGION"};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++)
        unsetenv(v[i]);
}

START_TEST(credentials)
{
    clear_aws_env();
    char *dir = tu_mkdtemp("fetch-creds");
    ck_assert_ptr_nonnull(dir);
    setenv("HOME", dir, 1); /* no ~/.aws here */
    bfs_s3_creds c;
    char err[1024] = "";
    ck_assert_int_eq(bfs_s3_creds_load(&c, err, sizeof err), 0);
    ck_assert_int_eq(c.have, 0);
    ck_assert_str_eq(c.source, "none (unsigned requests)");

    setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
    ck_assert_int_eq(bfs_s3_creds_load(&c, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "AWS_SECRET_ACCESS_KEY"));
    setenv("AWS_SECRET_ACCESS_KEY", SECRET, 1);
    setenv("AWS_SESSION_TOKEN", TOKEN, 1);
    ck_assert_int_eq(bfs_s3_creds_load(&c, err, sizeof err), 0);
    ck_assert_int_eq(c.have, 1);
    ck_assert_str_eq(c.key_id, "AKIDENV");
    ck_assert_str_eq(c.secret, SECRET);
    ck_assert_str_eq(c.token, TOKEN);
    ck_assert_ptr_nonnull(strstr(c.source, "environment"));
    bfs_s3_creds_wipe(&c);
    ck_assert_int_eq(c.secret[0], 0);
    clear_aws_env();

    /* profiles of a credentials file */
    char path[4096];
    snprintf(path, sizeof path, "%s/creds", dir);
    const char *ini = "# comment\n[default]\naws_access_key_id = AKIDDEF\n"
                      "aws_secret_access_key=" SECRET "\n\n[dev]\r\n"
                      "  aws_access_key_id =AKIDDEV  \r\n; x\naws_secret_access_key = " SECRET
                      "\naws_session_token = " TOKEN "\n[half]\naws_access_key_id = AKIDHALF\n";
    ck_assert_int_eq(tu_write_file(path, ini, strlen(ini)), 0);
    setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
    ck_assert_int_eq(bfs_s3_creds_load(&c, err, sizeof err), 0);
    ck_assert_str_eq(c.key_id, "AKIDDEF");
    ck_assert_str_eq(c.token, "");
    ck_assert_ptr_nonnull(strstr(c.source, "profile default of "));
    setenv("AWS_PROFILE", "dev", 1);
    ck_assert_int_eq(bfs_s3_creds_load(&c, err, sizeof err), 0);
    ck_assert_str_eq(c.key_id, "AKIDDEV");
    ck_assert_str_eq(c.secret, SECRET);
    ck_assert_str_eq(c.token, TOKEN);
    setenv("AWS_PROFILE", "half", 1);
    ck_assert_int_eq(bfs_s3_creds_load(&c, err, sizeof err), -EINVAL);
    ck_assert_ptr_null(strstr(err, SECRET));
    setenv("AWS_PROFILE", "nosuch", 1);
    ck_assert_int_eq(bfs_s3_creds_load(&c, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "AWS_PROFILE=nosuch"));

    /* ~/.aws/credentials when the variable is unset */
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");
    unsetenv("AWS_PROFILE");
    char aws[4096], home_creds[4200];
    snprintf(aws, sizeof aws, "%s/.aws", dir);
    ck_assert_int_eq(mkdir(aws, 0700), 0);
    snprintf(home_creds, sizeof home_creds, "%s/credentials", aws);
    ck_assert_int_eq(tu_write_file(home_creds, ini, strlen(ini)), 0);
    ck_assert_int_eq(bfs_s3_creds_load(&c, err, sizeof err), 0);
    ck_assert_str_eq(c.key_id, "AKIDDEF");

    /* bfs_ini_get: the last value wins, a value too long */
    char v[8];
    const char *ini2 = "[s]\na = 1\na = 22\nlong = 123456789\n";
    ck_assert_int_eq(tu_write_file(path, ini2, strlen(ini2)), 0);
    ck_assert_int_eq(bfs_ini_get(path, "s", "a", v, sizeof v), 1);
    ck_assert_str_eq(v, "22");
    ck_assert_int_eq(bfs_ini_get(path, "s", "long", v, sizeof v), -E2BIG);
    ck_assert_int_eq(bfs_ini_get(path, "t", "a", v, sizeof v), 0);
    ck_assert_int_eq(bfs_ini_get("/nonexistent/x", "s", "a", v, sizeof v), 0);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(regions)
{
    clear_aws_env();
    char *dir = tu_mkdtemp("fetch-region");
    setenv("HOME", dir, 1);
    char r[64], err[512];
    ck_assert_int_eq(bfs_s3_region_find(NULL, r, sizeof r, err, sizeof err), 0);
    ck_assert_str_eq(r, "us-east-1");
    char path[4096];
    snprintf(path, sizeof path, "%s/config", dir);
    const char *ini = "[default]\nregion = eu-west-3\n[profile dev]\nregion=ap-south-1\n";
    ck_assert_int_eq(tu_write_file(path, ini, strlen(ini)), 0);
    setenv("AWS_CONFIG_FILE", path, 1);
    ck_assert_int_eq(bfs_s3_region_find("", r, sizeof r, err, sizeof err), 0);
    ck_assert_str_eq(r, "eu-west-3");
    setenv("AWS_PROFILE", "dev", 1);
    ck_assert_int_eq(bfs_s3_region_find(NULL, r, sizeof r, err, sizeof err), 0);
    ck_assert_str_eq(r, "ap-south-1");
    setenv("AWS_DEFAULT_REGION", "us-west-1", 1);
    ck_assert_int_eq(bfs_s3_region_find(NULL, r, sizeof r, err, sizeof err), 0);
    ck_assert_str_eq(r, "us-west-1");
    setenv("AWS_REGION", "us-west-2", 1);
    ck_assert_int_eq(bfs_s3_region_find(NULL, r, sizeof r, err, sizeof err), 0);
    ck_assert_str_eq(r, "us-west-2");
    ck_assert_int_eq(bfs_s3_region_find("eu-central-1", r, sizeof r, err, sizeof err), 0);
    ck_assert_str_eq(r, "eu-central-1");
    ck_assert_int_eq(bfs_s3_region_find("EU West", r, sizeof r, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "s3_region="));
    clear_aws_env();
    tu_rmtree(dir);
    free(dir);
}
END_TEST

static int parse(const char *block, bfs_http_head *h)
{
    char err[256] = "";
    int rc = bfs_http_parse_head(block, strlen(block), h, err, sizeof err);
    if (rc)
        ck_assert_msg(err[0], "no reason");
    return rc;
}

START_TEST(http_parser)
{
    bfs_http_head h;
    ck_assert_int_eq(parse("HTTP/1.1 206 Partial Content\r\ncontent-RANGE: bytes 10-19/100\r\n"
                           "Content-Length: 10\r\nETag: \"abc\"\r\n"
                           "Last-Modified: Wed, 21 Oct 2015 07:28:00 GMT\r\n\r\n",
                           &h),
                     0);
    ck_assert_int_eq(h.status, 206);
    ck_assert(h.has_range && h.first == 10 && h.last == 19 && h.total_known && h.total == 100);
    ck_assert(h.has_length && h.length == 10);
    ck_assert_str_eq(h.etag, "\"abc\"");
    ck_assert_str_eq(h.last_modified, "Wed, 21 Oct 2015 07:28:00 GMT");
    char err[256];
    ck_assert_int_eq(bfs_http_check_body(&h, 10, 10, 100, err, sizeof err), 0);
    ck_assert_int_eq(bfs_http_check_body(&h, 10, 11, 100, err, sizeof err), -EIO);
    ck_assert_int_eq(bfs_http_check_body(&h, 11, 9, 100, err, sizeof err), -EIO);
    ck_assert_int_eq(bfs_http_check_body(&h, 10, 10, 101, err, sizeof err), -EIO);
    ck_assert_ptr_nonnull(strstr(err, "total"));

    /* HTTP/2, LF only, a 100 Continue and a redirect before the final answer, folding */
    ck_assert_int_eq(parse("HTTP/1.1 100 Continue\n\nHTTP/1.1 301 Moved\nLocation: /x\n"
                           "Content-Range: bytes 0-0/5\n\nHTTP/2 206\nx-amz-bucket-region: "
                           "eu-west-1\nETag:\n  \"a\n\t b\"\ncontent-range: bytes 0-0/*\n",
                           &h),
                     0);
    ck_assert_int_eq(h.status, 206);
    ck_assert_str_eq(h.etag, "\"a b\"");
    ck_assert_str_eq(h.bucket_region, "eu-west-1");
    ck_assert(h.has_range && !h.total_known && h.first == 0 && h.last == 0);
    ck_assert_int_eq(bfs_http_check_body(&h, 0, 1, 5, err, sizeof err), 0);
    ck_assert(!h.has_length);

    /* a 416's unsatisfied range */
    ck_assert_int_eq(parse("HTTP/1.1 416 R\r\nContent-Range: bytes */0\r\n", &h), 0);
    ck_assert(h.unsatisfied && h.total_known && h.total == 0);
    ck_assert_int_eq(bfs_http_check_body(&h, 0, 1, 1, err, sizeof err), -EIO);

    /* 200 to a range request: only for the whole object */
    ck_assert_int_eq(parse("HTTP/1.0 200 OK\r\nContent-Length: 100\r\n", &h), 0);
    ck_assert_int_eq(bfs_http_check_body(&h, 0, 100, 100, err, sizeof err), 0);
    ck_assert_int_eq(bfs_http_check_body(&h, 0, 99, 100, err, sizeof err), -EIO);
    ck_assert_ptr_nonnull(strstr(err, "ignores Range"));
    ck_assert_int_eq(bfs_http_check_body(&h, 0, 50, 50, err, sizeof err), -EIO);

    const char *bad[] = {
        "",
        "Content-Length: 5\r\n",
        "HTTP/1.1 2000 OK\r\n",
        "HTTP/1.1 099 X\r\n",
        "HTTP/ 200\r\n",
        "HTTP/1.1 200OK\r\n",
        "HTTP/1.1 206 P\r\nContent-Range: bytes 5-4/10\r\n",
        "HTTP/1.1 206 P\r\nContent-Range: bytes 0-10/10\r\n",
        "HTTP/1.1 206 P\r\nContent-Range: bytes 0-1\r\n",
        "HTTP/1.1 206 P\r\nContent-Range: items 0-1/5\r\n",
        "HTTP/1.1 206 P\r\nContent-Range: bytes -1-5/10\r\n",
        "HTTP/1.1 206 P\r\nContent-Range: bytes 0-99999999999999999999/*\r\n",
        "HTTP/1.1 206 P\r\nContent-Range: bytes */*\r\n",
        "HTTP/1.1 206 P\r\nContent-Range: bytes 0-1/5\r\nContent-Range: bytes 0-2/5\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: -5\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 5 5\r\n",
        "HTTP/1.1 200 OK\r\nno colon here\r\n",
        "HTTP/1.1 200 OK\r\n continuation first\r\n",
        "HTTP/1.1 200 OK\r\nETag: \"a\x01\"\r\n",
        "HTTP/1.1 200 OK\r\nBad Name: x\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(parse(bad[i], &h) == -EPROTO, "accepted: %s", bad[i]);
    /* same header twice with the same value is fine */
    ck_assert_int_eq(parse("HTTP/1.1 200 OK\r\nContent-Length: 5\r\ncontent-length: 5\r\n", &h), 0);
    /* 206 without Content-Range, and other statuses, never pass the body check */
    ck_assert_int_eq(parse("HTTP/1.1 206 P\r\nContent-Length: 1\r\n", &h), 0);
    ck_assert_int_eq(bfs_http_check_body(&h, 0, 1, 5, err, sizeof err), -EIO);
    ck_assert_int_eq(parse("HTTP/1.1 204 No\r\n", &h), 0);
    ck_assert_int_eq(bfs_http_check_body(&h, 0, 1, 5, err, sizeof err), -EIO);
}
END_TEST

START_TEST(backoff)
{
    uint64_t s = 7;
    for (int i = 0; i < 1000; i++) {
        unsigned a = bfs_fetch_backoff_ms(1, tu_rand(&s));
        ck_assert(a >= 50 && a <= 100);
        unsigned b = bfs_fetch_backoff_ms(3, tu_rand(&s));
        ck_assert(b >= 200 && b <= 400);
        unsigned c = bfs_fetch_backoff_ms(40, tu_rand(&s));
        ck_assert(c >= 2500 && c <= 5000);
    }
}
END_TEST

START_TEST(configure)
{
    char err[1024] = "";
    bfs_fetch_conf c = {.s3_endpoint = "ftp://x", .retries = 1, .timeout_ms = 100};
    ck_assert_int_eq(bfs_fetch_configure(&c, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "s3_endpoint=ftp://x"));
    c.s3_endpoint = NULL;
    c.ca = "/nonexistent/ca.pem";
    ck_assert_int_eq(bfs_fetch_configure(&c, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "ca=/nonexistent/ca.pem"));
    char *dir = tu_mkdtemp("fetch-ca");
    char path[4096];
    snprintf(path, sizeof path, "%s/ca.pem", dir);
    ck_assert_int_eq(tu_write_file(path, "not a certificate\n", 18), 0);
    c.ca = path;
    ck_assert_int_eq(bfs_fetch_configure(&c, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "no PEM certificate"));
    const char *pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    ck_assert_int_eq(tu_write_file(path, pem, strlen(pem)), 0);
    ck_assert_int_eq(bfs_fetch_configure(&c, err, sizeof err), 0);
    c.ca = dir; /* a directory */
    ck_assert_int_eq(bfs_fetch_configure(&c, err, sizeof err), -EINVAL);
    c.ca = NULL;
    c.s3_region = "Not A Region";
    ck_assert_int_eq(bfs_fetch_configure(&c, err, sizeof err), -EINVAL);
    ck_assert_int_eq(bfs_fetch_configure(NULL, err, sizeof err), 0);
    tu_rmtree(dir);
    free(dir);

    /* URLs refused at open, before any request */
    bfs_object *o = (bfs_object *)1;
    const char *bad[] = {"https://",    "http://h:99999/x", "ftp://h/x",
                         "/local/file", "s3://b",           "http://h/a b"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = '\0';
        ck_assert_msg(bfs_object_open(bad[i], &o, err, sizeof err) == -EINVAL, "%s: %s", bad[i],
                      err);
        ck_assert_ptr_null(o);
        ck_assert(err[0]);
        ck_assert_str_eq(bfs_fetch_reason(), err);
    }
}
END_TEST

/* ---- against tests/fetch_server.py --------------------------------------------------- */

static pid_t srv_pid;
static int srv_port;
static char *srv_root;

/* tests/fetch_server.py from the source tree (the suite runs from the repository root, or
 * from its build directory's tests/). */
static const char *server_script(void)
{
    static char path[PATH_MAX + 64];
    const char *tries[] = {"tests/fetch_server.py", "../../tests/fetch_server.py",
                           "../../../tests/fetch_server.py"};
    for (size_t i = 0; i < sizeof tries / sizeof *tries; i++)
        if (access(tries[i], R_OK) == 0)
            return tries[i];
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return tries[0];
    exe[n] = '\0';
    for (int up = 0; up < 4; up++) {
        char *s = strrchr(exe, '/');
        if (!s)
            break;
        *s = '\0';
        snprintf(path, sizeof path, "%s/tests/fetch_server.py", exe);
        if (access(path, R_OK) == 0)
            return path;
    }
    return tries[0];
}

/* Start tests/fetch_server.py on root (HTTPS with cert and key when not NULL): its port,
 * its pid in *pid. */
static int start_server(const char *root, const char *cert, const char *key, pid_t *pid)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    const char *script = server_script();
    *pid = fork();
    ck_assert_int_ge(*pid, 0);
    if (*pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        setenv("FETCH_SERVER_SECRET", SECRET, 1); /* it checks SigV4 signatures with it */
        execlp("python3", "python3", script, root, cert, key, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    char line[32] = "";
    ssize_t got = 0, n;
    while (got < (ssize_t)sizeof line - 1 && (n = read(p[0], line + got, 1)) == 1 &&
           line[got] != '\n')
        got++;
    close(p[0]);
    int port = atoi(line);
    ck_assert_msg(port > 0, "tests/fetch_server.py did not start (python3 needed)");
    return port;
}

static void server_up(void)
{
    signal(SIGPIPE, SIG_IGN);
    clear_aws_env();
    srv_root = tu_mkdtemp("fetch-srv");
    ck_assert_ptr_nonnull(srv_root);
    srv_port = start_server(srv_root, NULL, NULL, &srv_pid);
    bfs_fetch_conf c = {.retries = 3, .timeout_ms = 5000};
    char err[512];
    ck_assert_int_eq(bfs_fetch_configure(&c, err, sizeof err), 0);
}

static void server_down(void)
{
    if (srv_pid > 0) {
        kill(srv_pid, SIGKILL);
        waitpid(srv_pid, NULL, 0);
    }
    tu_rmtree(srv_root);
    free(srv_root);
}

static size_t sink_cb(char *p, size_t sz, size_t nm, void *u)
{
    char *buf = u;
    size_t have = strlen(buf), n = sz * nm;
    size_t k = n < 4095 - have ? n : 4095 - have;
    memcpy(buf + have, p, k);
    buf[have + k] = '\0';
    return n;
}

/* GET http://127.0.0.1:PORT/PATH of the server's control interface into out (4096). */
static void ctl(const char *path, char *out)
{
    char url[512], tmp[4096] = "";
    snprintf(url, sizeof url, "http://127.0.0.1:%d/%s", srv_port, path);
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, out ? out : tmp);
    if (out)
        out[0] = '\0';
    ck_assert_int_eq(curl_easy_perform(h), CURLE_OK);
    curl_easy_cleanup(h);
}

static void fault(const char *f, int count)
{
    char q[128];
    snprintf(q, sizeof q, "__ctl?fault=%s&count=%d", f, count);
    ctl(q, NULL);
}

static uint8_t *put_object(const char *name, size_t len, uint64_t seed)
{
    uint8_t *d = malloc(len ? len : 1);
    for (size_t i = 0; i < len; i++)
        d[i] = (uint8_t)(tu_rand(&seed) >> 56);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", srv_root, name);
    for (char *s = path + strlen(srv_root) + 1; (s = strchr(s, '/')); s++) {
        *s = '\0';
        mkdir(path, 0755);
        *s = '/';
    }
    ck_assert_int_eq(tu_write_file(path, d, len), 0);
    return d;
}

static bfs_object *open_ok(const char *name)
{
    char url[1024], err[1024] = "";
    snprintf(url, sizeof url, "http://127.0.0.1:%d/%s", srv_port, name);
    bfs_object *o = NULL;
    int rc = bfs_object_open(url, &o, err, sizeof err);
    ck_assert_msg(rc == 0, "%s: %d %s", url, rc, err);
    return o;
}

static void set_conf(unsigned retries, unsigned timeout_ms)
{
    bfs_fetch_conf c = {.retries = retries, .timeout_ms = timeout_ms};
    char err[256];
    ck_assert_int_eq(bfs_fetch_configure(&c, err, sizeof err), 0);
}

#define OBJ_SIZE 300000

typedef struct reader_arg {
    bfs_object *o;
    const uint8_t *want;
    uint64_t seed;
    int bad;
} reader_arg;

static void *reader(void *p)
{
    reader_arg *a = p;
    uint8_t *buf = malloc(OBJ_SIZE);
    for (int i = 0; i < 40; i++) {
        uint64_t off = tu_rand(&a->seed) % OBJ_SIZE;
        size_t len = 1 + tu_rand(&a->seed) % (OBJ_SIZE - off);
        if (len > 70000)
            len = 70000;
        if (bfs_object_read(a->o, buf, len, off) || memcmp(buf, a->want + off, len))
            a->bad++;
    }
    free(buf);
    return NULL;
}

START_TEST(exact_bytes)
{
    uint8_t *want = put_object("data/x.bfs", OBJ_SIZE, 1);
    bfs_fetch_stats s0, s1;
    bfs_fetch_get_stats(&s0);
    bfs_object *o = open_ok("data/x.bfs");
    ck_assert_uint_eq(bfs_object_size(o), OBJ_SIZE);
    ck_assert_uint_ne(bfs_object_identity(o), 0);
    uint8_t *buf = malloc(OBJ_SIZE + 16);
    uint64_t offs[] = {0, 1, 4095, 4096, OBJ_SIZE - 1};
    for (size_t i = 0; i < sizeof offs / sizeof *offs; i++) {
        size_t len = OBJ_SIZE - offs[i] < 5000 ? OBJ_SIZE - offs[i] : 5000;
        ck_assert_int_eq(bfs_object_read(o, buf, len, offs[i]), 0);
        ck_assert_int_eq(memcmp(buf, want + offs[i], len), 0);
    }
    ck_assert_int_eq(bfs_object_read(o, buf, OBJ_SIZE, 0), 0); /* the whole object */
    ck_assert_int_eq(memcmp(buf, want, OBJ_SIZE), 0);
    ck_assert_int_eq(bfs_object_read(o, buf, 0, OBJ_SIZE + 5), 0);
    ck_assert_int_eq(bfs_object_read(o, buf, 2, OBJ_SIZE - 1), -EINVAL);
    ck_assert_int_eq(bfs_object_read(o, buf, 1, UINT64_MAX), -EINVAL);
    ck_assert(bfs_fetch_reason()[0]);
    bfs_fetch_get_stats(&s1);
    ck_assert_uint_eq(s1.requests - s0.requests, 7); /* open + 6 reads */
    ck_assert_uint_ge(s1.bytes - s0.bytes, OBJ_SIZE + 4 * 5000 + 1);
    ck_assert_uint_eq(s1.retries, s0.retries);

    /* the same object opened again: the same identity; another one: another */
    bfs_object *o2 = open_ok("data/x.bfs");
    ck_assert_uint_eq(bfs_object_identity(o2), bfs_object_identity(o));
    bfs_object_close(o2);
    free(put_object("data/y.bfs", OBJ_SIZE, 1));
    o2 = open_ok("data/y.bfs");
    ck_assert_uint_ne(bfs_object_identity(o2), bfs_object_identity(o));
    bfs_object_close(o2);

    /* keep-alive: one thread's open and reads reuse one connection (the /__conns requests
     * open their own) */
    char n0[4096], n1[4096];
    ctl("__conns", n0);
    bfs_object_close(open_ok("data/x.bfs"));
    for (int i = 0; i < 20; i++)
        ck_assert_int_eq(bfs_object_read(o, buf, 100, (uint64_t)i * 1000), 0);
    ctl("__conns", n1);
    ck_assert_msg(atoi(n1) - atoi(n0) <= 2, "an open and 20 reads took %d connections",
                  atoi(n1) - atoi(n0) - 1);

    /* many threads on one object */
    pthread_t t[8];
    reader_arg a[8];
    for (int i = 0; i < 8; i++) {
        a[i] = (reader_arg){.o = o, .want = want, .seed = 100 + (uint64_t)i};
        ck_assert_int_eq(pthread_create(&t[i], NULL, reader, &a[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        ck_assert_int_eq(a[i].bad, 0);
    }

    /* an empty object */
    free(put_object("empty", 0, 1));
    o2 = open_ok("empty");
    ck_assert_uint_eq(bfs_object_size(o2), 0);
    bfs_object_close(o2);
    bfs_object_close(o);
    bfs_object_close(NULL);
    free(buf);
    free(want);
}
END_TEST

START_TEST(retries)
{
    uint8_t *want = put_object("r.bin", 10000, 2);
    set_conf(3, 5000);
    bfs_object *o = open_ok("r.bin");
    uint8_t buf[10000];
    bfs_fetch_stats s0, s1;
    const char *codes[] = {"503", "500", "429"};
    for (int i = 0; i < 3; i++) {
        bfs_fetch_get_stats(&s0);
        fault(codes[i], 2);
        ck_assert_int_eq(bfs_object_read(o, buf, 1000, 500), 0);
        ck_assert_int_eq(memcmp(buf, want + 500, 1000), 0);
        bfs_fetch_get_stats(&s1);
        ck_assert_uint_eq(s1.retries - s0.retries, 2);
        ck_assert_uint_eq(s1.requests - s0.requests, 3);
        ck_assert_uint_eq(s1.failures, s0.failures);
    }
    /* more failures than retries: -EIO after exactly 3 retries, with the reason */
    fault("503", 10);
    bfs_fetch_get_stats(&s0);
    ck_assert_int_eq(bfs_object_read(o, buf, 100, 0), -EIO);
    bfs_fetch_get_stats(&s1);
    ck_assert_uint_eq(s1.requests - s0.requests, 4);
    ck_assert_uint_eq(s1.failures - s0.failures, 1);
    ck_assert_msg(strstr(bfs_fetch_reason(), "HTTP 503") &&
                      strstr(bfs_fetch_reason(), "after 3 retries") &&
                      strstr(bfs_fetch_reason(), "bytes 0-99"),
                  "%s", bfs_fetch_reason());
    ctl("__reset", NULL);

    /* a body cut short is retried; the next attempt's bytes are exact */
    fault("cut", 1);
    bfs_fetch_get_stats(&s0);
    ck_assert_int_eq(bfs_object_read(o, buf, 10000, 0), 0);
    ck_assert_int_eq(memcmp(buf, want, 10000), 0);
    bfs_fetch_get_stats(&s1);
    ck_assert_uint_eq(s1.retries - s0.retries, 1);
    fault("short", 1); /* no Content-Length, the connection closed 10 bytes early */
    ck_assert_int_eq(bfs_object_read(o, buf, 5000, 10), 0);
    ck_assert_int_eq(memcmp(buf, want + 10, 5000), 0);
    fault("cut", 10);
    ck_assert_int_eq(bfs_object_read(o, buf, 10000, 0), -EIO);
    ctl("__reset", NULL);

    /* a hang: the attempt times out, the retry works */
    bfs_object_close(o);
    set_conf(1, 400);
    o = open_ok("r.bin");
    fault("hang", 1);
    ck_assert_int_eq(bfs_object_read(o, buf, 100, 100), 0);
    ck_assert_int_eq(memcmp(buf, want + 100, 100), 0);
    fault("hang", 2);
    ck_assert_int_eq(bfs_object_read(o, buf, 100, 100), -EIO);
    ck_assert_msg(strstr(bfs_fetch_reason(), "imed out") &&
                      strstr(bfs_fetch_reason(), "after 1 retries"),
                  "%s", bfs_fetch_reason());
    /* open of a hanging server: -ETIMEDOUT */
    char url[256], err[1024];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/r.bin", srv_port);
    fault("hang", 2);
    bfs_object *o2 = NULL;
    ck_assert_int_eq(bfs_object_open(url, &o2, err, sizeof err), -ETIMEDOUT);
    ck_assert_ptr_nonnull(strstr(err, "fetch_timeout_ms=400"));
    bfs_object_close(o);
    free(want);
}
END_TEST

START_TEST(errors)
{
    uint8_t *want = put_object("e.bin", 20000, 3);
    set_conf(2, 5000);
    char url[256], err[1024];
    bfs_object *o = NULL;
    snprintf(url, sizeof url, "http://127.0.0.1:%d/nosuch.bin", srv_port);
    ck_assert_int_eq(bfs_object_open(url, &o, err, sizeof err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "nosuch.bin"));
    ck_assert_ptr_nonnull(strstr(err, "404"));
    ck_assert_str_eq(bfs_fetch_reason(), err);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/e.bin", srv_port);
    fault("403", 1);
    ck_assert_int_eq(bfs_object_open(url, &o, err, sizeof err), -EACCES);
    ck_assert_ptr_nonnull(strstr(err, "AccessDenied"));
    fault("500", 5);
    ck_assert_int_eq(bfs_object_open(url, &o, err, sizeof err), -EIO);
    ck_assert_ptr_nonnull(strstr(err, "after 2 retries"));
    ctl("__reset", NULL);
    /* a user and a query never reach a message */
    snprintf(url, sizeof url, "http://user:pw" SECRET "@127.0.0.1:%d/nosuch?sig=" SECRET, srv_port);
    ck_assert_int_eq(bfs_object_open(url, &o, err, sizeof err), -ENOENT);
    ck_assert_msg(!strstr(err, SECRET) && strstr(err, "/nosuch?..."), "%s", err);

    o = open_ok("e.bin");
    uint8_t buf[20100];
    fault("404", 1);
    ck_assert_int_eq(bfs_object_read(o, buf, 10, 0), -ENOENT);
    fault("403", 1);
    ck_assert_int_eq(bfs_object_read(o, buf, 10, 0), -EACCES);
    fault("412", 1);
    ck_assert_int_eq(bfs_object_read(o, buf, 10, 0), BFS_E_CHANGED);
    ck_assert_ptr_nonnull(strstr(bfs_fetch_reason(), "412"));

    /* a wrong Content-Range: -EIO at once, not a byte copied */
    bfs_fetch_stats s0, s1;
    memset(buf, 0xAA, sizeof buf);
    fault("badrange", 1);
    bfs_fetch_get_stats(&s0);
    ck_assert_int_eq(bfs_object_read(o, buf, 1000, 100), -EIO);
    bfs_fetch_get_stats(&s1);
    ck_assert_uint_eq(s1.requests - s0.requests, 1);
    ck_assert_msg(strstr(bfs_fetch_reason(), "Content-Range bytes 101-1100"), "%s",
                  bfs_fetch_reason());
    for (size_t i = 0; i < sizeof buf; i++)
        ck_assert_uint_eq(buf[i], 0xAA);
    /* a server ignoring Range: refused for a part, accepted for the whole object */
    fault("norange", 1);
    ck_assert_int_eq(bfs_object_read(o, buf, 1000, 0), -EIO);
    ck_assert_ptr_nonnull(strstr(bfs_fetch_reason(), "ignores Range"));
    for (size_t i = 0; i < sizeof buf; i++)
        ck_assert_uint_eq(buf[i], 0xAA);
    fault("norange", 1);
    ck_assert_int_eq(bfs_object_read(o, buf, 20000, 0), 0);
    ck_assert_int_eq(memcmp(buf, want, 20000), 0);
    /* more bytes than the range: nothing written past it */
    memset(buf, 0xAA, sizeof buf);
    fault("more", 1);
    ck_assert_int_eq(bfs_object_read(o, buf, 1000, 0), -EIO);
    ck_assert_ptr_nonnull(strstr(bfs_fetch_reason(), "more than"));
    for (size_t i = 1000; i < sizeof buf; i++)
        ck_assert_uint_eq(buf[i], 0xAA);

    /* the object replaced under the reader: If-Match fails, BFS_E_CHANGED */
    sleep(0); /* the ETag holds the mtime in ns and the size: a new size suffices */
    free(put_object("e.bin", 20001, 4));
    ck_assert_int_eq(bfs_object_read(o, buf, 10, 0), BFS_E_CHANGED);
    ck_assert_ptr_nonnull(strstr(bfs_fetch_reason(), "replaced"));
    char last[4096];
    ctl("__last", last);
    ck_assert_msg(strstr(last, "if-match: \""), "%s", last);
    bfs_object_close(o);

    /* nobody listening: -ECONNREFUSED after the retries */
    set_conf(1, 2000);
    ck_assert_int_eq(bfs_object_open("http://127.0.0.1:1/x", &o, err, sizeof err), -ECONNREFUSED);
    ck_assert_ptr_nonnull(strstr(err, "after 1 retries"));
    free(want);
}
END_TEST

START_TEST(s3_signed)
{
    uint8_t *want = put_object("bkt/dir/a b é.bfs", 50000, 5);
    char ep[128], err[2048];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", srv_port);
    bfs_fetch_conf c = {
        .s3_endpoint = ep, .s3_region = "eu-west-1", .retries = 2, .timeout_ms = 5000};
    ck_assert_int_eq(bfs_fetch_configure(&c, err, sizeof err), 0);
    setenv("AWS_ACCESS_KEY_ID", "AKIDTEST", 1);
    setenv("AWS_SECRET_ACCESS_KEY", SECRET, 1);
    setenv("AWS_SESSION_TOKEN", TOKEN, 1);
    bfs_object *o = NULL;
    ck_assert_int_eq(bfs_object_open("s3://bkt/dir/a b é.bfs", &o, err, sizeof err), 0);
    ck_assert_uint_eq(bfs_object_size(o), 50000);
    ck_assert_str_eq(bfs_object_url(o), "s3://bkt/dir/a b é.bfs");
    uint8_t buf[50000];
    ck_assert_int_eq(bfs_object_read(o, buf, 30000, 20000), 0);
    ck_assert_int_eq(memcmp(buf, want + 20000, 30000), 0);
    char last[4096];
    ctl("__last", last);
    ck_assert_msg(strstr(last, "authorization: AWS4-HMAC-SHA256 Credential=AKIDTEST/") &&
                      strstr(last, "/eu-west-1/s3/aws4_request") &&
                      strstr(last, "x-amz-security-token: " TOKEN) &&
                      strstr(last, "x-amz-content-sha256: ") && strstr(last, "if-match: "),
                  "%s", last);
    ck_assert_ptr_null(strstr(last, SECRET));

    /* a key with '?' and '%': encoded, signed, shown whole */
    uint8_t *want2 = put_object("bkt/q?x%41.bin", 100, 8);
    bfs_object *oq = NULL;
    ck_assert_int_eq(bfs_object_open("s3://bkt/q?x%41.bin", &oq, err, sizeof err), 0);
    ck_assert_str_eq(bfs_object_url(oq), "s3://bkt/q?x%41.bin");
    ck_assert_int_eq(bfs_object_read(oq, buf, 100, 0), 0);
    ck_assert_int_eq(memcmp(buf, want2, 100), 0);
    bfs_object_close(oq);
    free(want2);

    /* a bucket of another region: the message says which s3_region= to set */
    fault("301", 1);
    bfs_object *o2 = NULL;
    ck_assert_int_eq(bfs_object_open("s3://bkt/dir/a b é.bfs", &o2, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "s3_region=eu-north-1"), "%s", err);
    ck_assert_ptr_null(o2);

    /* refusals name the credentials' source and key id, never the secret or token */
    const char *reasons[8];
    char saved[8][2100];
    int nr = 0;
    fault("403", 1);
    ck_assert_int_eq(bfs_object_read(o, buf, 10, 0), -EACCES);
    snprintf(saved[nr], sizeof saved[nr], "%s", bfs_fetch_reason()), reasons[nr] = saved[nr], nr++;
    fault("503", 5);
    ck_assert_int_eq(bfs_object_read(o, buf, 10, 0), -EIO);
    snprintf(saved[nr], sizeof saved[nr], "%s", bfs_fetch_reason()), reasons[nr] = saved[nr], nr++;
    bfs_object_close(o);
    fault("403", 1);
    o = NULL;
    ck_assert_int_eq(bfs_object_open("s3://bkt/dir/a b é.bfs", &o, err, sizeof err), -EACCES);
    ck_assert_msg(strstr(err, "environment") && strstr(err, "AKIDTEST") &&
                      strstr(err, "AccessDenied"),
                  "%s", err);
    snprintf(saved[nr], sizeof saved[nr], "%s", err), reasons[nr] = saved[nr], nr++;
    ck_assert_int_eq(bfs_object_open("s3://bkt/nosuch", &o, err, sizeof err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "NoSuchKey"));
    snprintf(saved[nr], sizeof saved[nr], "%s", err), reasons[nr] = saved[nr], nr++;
    /* a wrong secret: the server's signature check refuses it */
    setenv("AWS_SECRET_ACCESS_KEY", "WRONG" SECRET, 1);
    ck_assert_int_eq(bfs_object_open("s3://bkt/dir/a b é.bfs", &o, err, sizeof err), -EACCES);
    ck_assert_msg(strstr(err, "SignatureDoesNotMatch"), "%s", err);
    snprintf(saved[nr], sizeof saved[nr], "%s", err), reasons[nr] = saved[nr], nr++;
    for (int i = 0; i < nr; i++)
        ck_assert_msg(!strstr(reasons[i], SECRET) && !strstr(reasons[i], TOKEN), "%s", reasons[i]);

    /* unsigned without credentials: no Authorization header */
    clear_aws_env();
    char *home = tu_mkdtemp("fetch-home");
    setenv("HOME", home, 1);
    ck_assert_int_eq(bfs_object_open("s3://bkt/dir/a b é.bfs", &o, err, sizeof err), 0);
    ctl("__last", last);
    ck_assert_msg(!strstr(last, "authorization:"), "%s", last);
    bfs_object_close(o);
    fault("403", 1);
    ck_assert_int_eq(bfs_object_open("s3://bkt/dir/a b é.bfs", &o, err, sizeof err), -EACCES);
    ck_assert_ptr_nonnull(strstr(err, "unsigned"));
    tu_rmtree(home);
    free(home);
    free(want);
}
END_TEST

START_TEST(after_fork)
{
    uint8_t *want = put_object("f.bin", 8000, 6);
    bfs_object *o = open_ok("f.bin");
    uint8_t buf[8000];
    ck_assert_int_eq(bfs_object_read(o, buf, 8000, 0), 0);
    char n0[4096], n1[4096];
    ctl("__conns", n0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        uint8_t b2[8000];
        int ok = bfs_object_read(o, b2, 4000, 4000) == 0 && !memcmp(b2, want + 4000, 4000);
        _exit(ok ? 0 : 1);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* the child made a connection of its own (besides the one of /__conns), never used the
     * parent's */
    ctl("__conns", n1);
    ck_assert_int_ge(atoi(n1) - atoi(n0), 2);
    /* the parent's connection still works */
    ck_assert_int_eq(bfs_object_read(o, buf, 8000, 0), 0);
    ck_assert_int_eq(memcmp(buf, want, 8000), 0);
    bfs_object_close(o);
    free(want);
}
END_TEST

START_TEST(tls_verified)
{
    /* a CA and a certificate for 127.0.0.1 signed by it (openssl, as the nginx tests do) */
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "(cd '%s' && printf 'subjectAltName=IP:127.0.0.1\\n' >ext && "
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
             "-keyout ca.key -out ca.pem -days 2 -subj /CN=batchfs-test-ca && "
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout srv.key "
             "-out srv.csr -subj /CN=127.0.0.1 && openssl x509 -req -in srv.csr -CA ca.pem "
             "-CAkey ca.key -CAcreateserial -out srv.pem -days 2 -extfile ext) >/dev/null 2>&1",
             srv_root);
    if (system(cmd) != 0) {
        tu_skip("fetch", "tls_verified", "openssl could not make a CA (make deps installs it)");
        return;
    }
    uint8_t *want = put_object("t.bin", 9000, 7);
    char cert[4200], key[4200], ca[4200], url[256], err[2048];
    snprintf(cert, sizeof cert, "%s/srv.pem", srv_root);
    snprintf(key, sizeof key, "%s/srv.key", srv_root);
    snprintf(ca, sizeof ca, "%s/ca.pem", srv_root);
    pid_t pid;
    int port = start_server(srv_root, cert, key, &pid);
    snprintf(url, sizeof url, "https://127.0.0.1:%d/t.bin", port);
    /* not trusted without ca=: refused, never read insecurely */
    set_conf(1, 5000);
    bfs_object *o = NULL;
    ck_assert_int_eq(bfs_object_open(url, &o, err, sizeof err), -EPROTO);
    ck_assert_msg(strstr(err, "ca=") && strstr(err, "TLS"), "%s", err);
    /* with ca=: the system's CAs and this one */
    bfs_fetch_conf c = {.ca = ca, .retries = 1, .timeout_ms = 5000};
    ck_assert_int_eq(bfs_fetch_configure(&c, err, sizeof err), 0);
    ck_assert_msg(bfs_object_open(url, &o, err, sizeof err) == 0, "%s", err);
    uint8_t buf[9000];
    ck_assert_int_eq(bfs_object_read(o, buf, 9000, 0), 0);
    ck_assert_int_eq(memcmp(buf, want, 9000), 0);
    ck_assert_int_eq(bfs_object_read(o, buf, 100, 8900), 0);
    ck_assert_int_eq(memcmp(buf, want + 8900, 100), 0);
    bfs_object_close(o);
    /* a certificate for another name is refused even with its CA */
    snprintf(url, sizeof url, "https://localhost:%d/t.bin", port);
    ck_assert_int_eq(bfs_object_open(url, &o, err, sizeof err), -EPROTO);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    free(want);
}
END_TEST

static Suite *fetch_suite(void)
{
    Suite *s = suite_create("fetch");
    TCase *tc = tcase_create("offline");
    tcase_add_test(tc, s3_urls);
    tcase_add_test(tc, credentials);
    tcase_add_test(tc, regions);
    tcase_add_test(tc, http_parser);
    tcase_add_test(tc, backoff);
    tcase_add_test(tc, configure);
    suite_add_tcase(s, tc);
    tc = tcase_create("server");
    tcase_add_checked_fixture(tc, server_up, server_down);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, exact_bytes);
    tcase_add_test(tc, retries);
    tcase_add_test(tc, errors);
    tcase_add_test(tc, s3_signed);
    tcase_add_test(tc, after_fork);
    tcase_add_test(tc, tls_verified);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    SRunner *sr = srunner_create(fetch_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
