/*
 * fetch_internal.h — shared by the C files of the object-storage layer (fetch.c,
 * fetch_http.c, fetch_s3.c) and their tests (tests/check_fetch.c, tests/fuzz/fuzz_fetch.c)
 * only: the pure parts, which need no network. fetch.h is the layer's public face.
 *
 * fetch_http.c parses what a server answers (a header block) and decides whether a body
 * may be copied out; fetch_s3.c turns an s3:// URL into a request URL and finds the
 * credentials and region as the AWS tools do. Nothing here logs; every message is
 * written into the caller's err and never holds a secret.
 */
#ifndef BATCHFS_ENGINE_DATASET_FETCH_INTERNAL_H
#define BATCHFS_ENGINE_DATASET_FETCH_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* The headers of one response that the layer uses (the last response of a block: a
 * 100 Continue or a redirect before it is skipped). */
typedef struct bfs_http_head {
    int status;             /* 100..599 */
    int has_length;         /* Content-Length was sent */
    uint64_t length;        /* its value */
    int has_range;          /* Content-Range "bytes FIRST-LAST/TOTAL" (or "/ *") */
    uint64_t first, last;   /* inclusive */
    int total_known;        /* TOTAL is a number, not "*" */
    uint64_t total;         /* its value */
    int unsatisfied;        /* Content-Range "bytes * /TOTAL" (a 416's) */
    char etag[256];         /* as sent, quotes and W/ included; "" when none */
    char last_modified[64]; /* as sent; "" when none */
    char bucket_region[64]; /* S3's x-amz-bucket-region (wrong-region hints); "" */
} bfs_http_head;

/*
 * bfs_http_parse_head - parse the header block of a response (n bytes at block: lines
 * ending in CRLF or LF, starting with a status line "HTTP/1.1 206 Partial Content" or
 * "HTTP/2 206"; header names case-insensitive; obsolete line folding joined; a block
 * holding several responses, as curl hands a 100 Continue or a redirect before the
 * final one, parses its last). Returns 0 and *h, or -EPROTO with the reason in err: no
 * status line, a malformed one, a header line without a colon, a Content-Length or
 * Content-Range that is not a number / not "bytes A-B/T" with A <= B < T, given twice
 * with different values, an ETag or Last-Modified too long or with control bytes.
 */
int bfs_http_parse_head(const char *block, size_t n, bfs_http_head *h, char *err, size_t errlen);

/*
 * bfs_http_check_body - whether the body of a successful response h to a request for
 * bytes off .. off+len-1 of an object of size bytes is exactly those bytes: a 206 whose
 * Content-Range is that range (its total, when given, the size) and whose
 * Content-Length, when given, is len; or a 200 when the request covered the whole object
 * (off 0, len size) and its Content-Length, when given, is len. Returns 0, or -EIO with
 * the reason in err ("HTTP 200 to a range request: the server ignores Range", "Content-
 * Range bytes 0-99/1000, asked for bytes 0-4095").
 */
int bfs_http_check_body(const bfs_http_head *h, uint64_t off, uint64_t len, uint64_t size,
                        char *err, size_t errlen);

/*
 * bfs_s3_parse_url - split "s3://BUCKET/KEY" into *bucket and *key (malloc'ed, the
 * caller frees both). The bucket is 1..255 of [A-Za-z0-9._-]; the key is every byte
 * after the first '/' (raw: S3 keys are not URL-encoded in s3:// URLs, as in the AWS
 * CLI), non-empty, without control bytes, at most 1024 bytes. Returns 0, -EINVAL with a
 * message in err naming the URL, or -ENOMEM.
 */
int bfs_s3_parse_url(const char *url, char **bucket, char **key, char *err, size_t errlen);

/*
 * bfs_url_encode_path - key percent-encoded for a URL path: every byte but the
 * unreserved ones (A-Z a-z 0-9 - . _ ~) and '/' as %XX (upper-case hex), which is also
 * SigV4's canonical URI of S3. Returns a malloc'ed string or NULL (no memory).
 */
char *bfs_url_encode_path(const char *key);

/*
 * bfs_s3_check_endpoint - whether s3_endpoint= is an http:// or https:// URL with a host
 * and nothing after its path (no user, query or fragment). 0, or -EINVAL with a message
 * naming the option.
 */
int bfs_s3_check_endpoint(const char *endpoint, char *err, size_t errlen);

/*
 * bfs_s3_request_url - the URL of object key of bucket: with endpoint NULL or "" on AWS,
 * virtual-hosted "https://BUCKET.s3.REGION.amazonaws.com/KEY" (path style on
 * "https://s3.REGION.amazonaws.com/BUCKET/KEY" for a bucket name that cannot be a host
 * label: dots, capitals, underscores); with an endpoint (checked by
 * bfs_s3_check_endpoint), path style "ENDPOINT/BUCKET/KEY" (a '/' at the endpoint's end
 * not doubled). The key is percent-encoded. Returns a malloc'ed string or NULL.
 */
char *bfs_s3_request_url(const char *bucket, const char *key, const char *endpoint,
                         const char *region);

/*
 * bfs_ini_get - the value of name in [section] of the INI file at path (the AWS
 * credentials and config files: "[section]" lines, "name = value" lines, '#' and ';'
 * comment lines, blanks trimmed; names compared exactly, the last one wins). Returns 1
 * and the value in out (outlen bytes), 0 when the file, section or name is absent,
 * -E2BIG when the value does not fit, or another -errno when the file cannot be read.
 */
int bfs_ini_get(const char *path, const char *section, const char *name, char *out, size_t outlen);

/* The credentials of s3:// requests. The secret and token never reach a message. */
typedef struct bfs_s3_creds {
    int have;         /* 0: none found, requests go unsigned */
    char source[512]; /* where they came from, for messages: "environment
                       * (AWS_ACCESS_KEY_ID)", "profile dev of /home/u/.aws/credentials",
                       * "none (unsigned requests)" */
    char key_id[128]; /* the access key id (not a secret: S3 logs it) */
    char secret[256]; /* the secret access key */
    char token[4096]; /* the session token, "" when none */
} bfs_s3_creds;

/*
 * bfs_s3_creds_load - the credentials as the AWS tools find them: AWS_ACCESS_KEY_ID with
 * AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) from the environment; else the profile
 * AWS_PROFILE (default "default") of AWS_SHARED_CREDENTIALS_FILE (default
 * ~/.aws/credentials: aws_access_key_id, aws_secret_access_key, aws_session_token);
 * else none (c->have 0). Returns 0, or -EINVAL with a message in err (a key id without
 * its secret, a profile named by AWS_PROFILE that none of the files holds, a value too
 * long) naming the variable or file, never the secret.
 */
int bfs_s3_creds_load(bfs_s3_creds *c, char *err, size_t errlen);

/* bfs_s3_creds_wipe - zero c (the secret and token) so no copy outlives its use. */
void bfs_s3_creds_wipe(bfs_s3_creds *c);

/*
 * bfs_s3_region_find - the region of s3:// requests into out (outlen bytes): opt (the
 * s3_region= option) when not NULL or ""; else AWS_REGION; else AWS_DEFAULT_REGION; else
 * the region of the profile AWS_PROFILE (default "default") in AWS_CONFIG_FILE (default
 * ~/.aws/config: "[default]" or "[profile NAME]"); else "us-east-1". Returns 0, or
 * -EINVAL with a message in err when the region found is not [a-z0-9-] (1..63).
 */
int bfs_s3_region_find(const char *opt, char *out, size_t outlen, char *err, size_t errlen);

/*
 * bfs_fetch_backoff_ms - the wait before retry attempt (1, 2, ...): 100 ms doubling per
 * attempt, capped at 5 s, with "equal jitter" (half fixed, half uniform from rnd), so
 * that many readers retrying at once spread out. Pure: rnd is any 64-bit random value.
 */
unsigned bfs_fetch_backoff_ms(unsigned attempt, uint64_t rnd);

/* ---- the process-wide side (fetch_pool.c), for fetch.c ---------------------------------- */

#include <curl/curl.h>
#include <stdatomic.h>

/* One configuration, shared by the objects opened under it (reference-counted). */
typedef struct bfs_fetch_cfg {
    atomic_uint refs;
    char *s3_region, *s3_endpoint; /* NULL when not given */
    char *ca_name;                 /* ca= as given, for messages; NULL when none */
    char *ca_blob;                 /* the system's bundle + ca=; NULL when no ca= */
    size_t ca_len;
    unsigned retries, timeout_ms;
} bfs_fetch_cfg;

/* bfs_fetch_cfg_get - the configuration now (bfs_fetch_configure's, or the defaults), one
 * more reference; NULL: no memory. bfs_fetch_cfg_unref drops one (NULL: nothing). */
bfs_fetch_cfg *bfs_fetch_cfg_get(void);
void bfs_fetch_cfg_unref(bfs_fetch_cfg *c);

/* The counters of bfs_fetch_get_stats, added to by fetch.c. */
struct bfs_fetch_counters {
    atomic_uint_fast64_t requests, bytes, retries, failures, wait_ns;
};
extern struct bfs_fetch_counters bfs_fetch_counter;

/* This thread's reason (bfs_fetch_reason), BFS_FETCH_REASON_MAX bytes, to write. */
#define BFS_FETCH_REASON_MAX 1024
char *bfs_fetch_reason_buf(void);

/* bfs_fetch_init - libcurl's global initialisation, once per process: 0 or -ENOMEM. */
int bfs_fetch_init(void);

/* bfs_fetch_handle_get - an easy handle of this process, reset (its live connection
 * kept), sharing DNS and TLS sessions; NULL: no memory. bfs_fetch_handle_put gives it
 * back to the pool (or frees it when the pool is full or it is another process's). */
CURL *bfs_fetch_handle_get(void);
void bfs_fetch_handle_put(CURL *h);

/* bfs_fetch_clean_text - src into dst (cap bytes), control bytes made spaces, trailing
 * spaces cut: text from a server or from curl, fit for one log line. */
void bfs_fetch_clean_text(char *dst, size_t cap, const char *src);

/* bfs_fetch_now_ns - CLOCK_MONOTONIC in nanoseconds. */
uint64_t bfs_fetch_now_ns(void);

#endif
