/*
 * fetch.h — byte ranges of objects in object storage: https:// and http:// (Range GETs)
 * and s3://BUCKET/KEY (the S3 REST API, signed with SigV4 by libcurl's
 * CURLOPT_AWS_SIGV4). docs/sources.md is the user's view.
 *
 * Neighbours: the .bfs reader (bfs_read.c) reads a remote dataset's header, tables and
 * payloads through bfs_object_read, as it preads a local file; the engine configures the
 * layer once from the pipeline options (s3_region=, s3_endpoint=, ca=, fetch_retries=,
 * fetch_timeout_ms=) before it opens a source; /stats reads bfs_fetch_stats.
 *
 * Invariants: an object is pinned at open to its identity (size, ETag, Last-Modified):
 * every later range is requested with If-Match on that ETag, so an object replaced under
 * a reader gives BFS_E_CHANGED, never bytes of another object. A read returns exactly
 * the bytes asked for or an error: a response whose Content-Range, length or status is
 * not the one asked for is never copied out. Retries (exponential backoff with jitter)
 * cover timeouts, resets, 5xx and 429; 403, 404 and 412 are final. TLS is verified
 * always (ca= adds a CA to the system's). No credential, signature or token is ever
 * written to a message, a log or /stats. Thread-safe: many threads read one object at
 * once, each on a connection of a pool (keep-alive connections, reused); handles made
 * before a fork are not used in the child.
 */
#ifndef BATCHFS_ENGINE_DATASET_FETCH_H
#define BATCHFS_ENGINE_DATASET_FETCH_H

#include <stddef.h>
#include <stdint.h>

/* How the layer reaches objects; process-wide (bfs_fetch_configure). Strings are copied. */
typedef struct bfs_fetch_conf {
    const char *s3_region;   /* s3_region= (NULL or "": AWS_REGION, AWS_DEFAULT_REGION,
                              * the profile's region in ~/.aws/config, else us-east-1) */
    const char *s3_endpoint; /* s3_endpoint= (NULL or "": AWS, virtual-hosted style
                              * https://BUCKET.s3.REGION.amazonaws.com/KEY); an
                              * S3-compatible store's URL, http:// or https://: path style
                              * ENDPOINT/BUCKET/KEY */
    const char *ca;          /* ca= PEM file of CA certificates trusted besides the
                              * system's (NULL or "": the system's only) */
    unsigned retries;        /* fetch_retries= (5): attempts after the first, per request */
    unsigned timeout_ms;     /* fetch_timeout_ms= (10000): per attempt, connect included
                              * (0: 10000) */
} bfs_fetch_conf;

/* Counters since the process started (all objects), for /stats' `source` section. */
typedef struct bfs_fetch_stats {
    uint64_t requests; /* HTTP requests sent (attempts, retries included) */
    uint64_t bytes;    /* body bytes received */
    uint64_t retries;  /* attempts after a failed one */
    uint64_t failures; /* reads that failed after their retries (or at once: 403, 404...) */
    uint64_t wait_ns;  /* time readers spent in bfs_object_read */
} bfs_fetch_stats;

typedef struct bfs_object bfs_object;

/*
 * bfs_fetch_is_remote - 1 when path names an object (starts with "http://", "https://"
 * or "s3://"), else 0 (a local path). Never fails.
 */
int bfs_fetch_is_remote(const char *path);

/*
 * bfs_fetch_configure - set the process-wide configuration (c NULL: the defaults). Call
 * before opening objects; objects already open keep theirs. Returns 0, -EINVAL with a
 * message in err (an s3_endpoint that is not an http(s) URL, a ca= file that cannot be
 * read or holds no certificate: naming the option and the file), or -ENOMEM.
 */
int bfs_fetch_configure(const bfs_fetch_conf *c, char *err, size_t errlen);

/*
 * bfs_fetch_check_endpoint - whether url may be an S3 endpoint (s3_endpoint=,
 * AWS_ENDPOINT_URL): http:// or https://, a host (not starting with ':'), then [:PORT]
 * [/PATH]; no user:password@ (credentials come from the environment, and the URL is shown
 * in logs), no spaces, controls, query or fragment. 0, or -EINVAL with *why saying what
 * an endpoint must be (static text). The one rule of the option and of the fetcher.
 */
int bfs_fetch_check_endpoint(const char *url, const char **why);

/*
 * bfs_object_open - open the object at url: one request that learns its size, ETag and
 * Last-Modified (credentials for s3:// from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
 * AWS_SESSION_TOKEN, else the profile AWS_PROFILE (default "default") of
 * AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials; none: unsigned requests, for public
 * buckets). Returns 0 and *out, or an error with a message in err naming the URL (never
 * a secret) and what to do: -ENOENT (404: no such object or bucket), -EACCES (401/403:
 * refused; the message says which credentials were used: their source and access key
 * id, never the secret), -EINVAL (a URL that does not parse: "s3://" without a bucket or
 * key, a scheme or port that is not allowed), -EHOSTUNREACH / -ECONNREFUSED / -ETIMEDOUT
 * (after the retries), -EIO (5xx or 429 still after the retries), -EPROTO (a response
 * that breaks HTTP or S3: no size, a body shorter than its length; a TLS certificate that
 * is not trusted: the message says to give its CA with ca=), -ENOMEM. An s3:// bucket of
 * another region (S3's x-amz-bucket-region) is -EINVAL, the message naming s3_region=.
 */
int bfs_object_open(const char *url, bfs_object **out, char *err, size_t errlen);

/* bfs_object_size - the object's size in bytes, as opened. */
uint64_t bfs_object_size(const bfs_object *o);

/*
 * bfs_object_identity - the object's identity as opened: a hash of its URL's bucket and
 * key (not the endpoint: the same object through another endpoint is the same), size,
 * ETag and Last-Modified. What a local file's inode and mtime are to the file.
 */
uint64_t bfs_object_identity(const bfs_object *o);

/*
 * bfs_object_read - exactly len bytes at off into buf (len 0: 0, no request). Ranges past
 * the size are -EINVAL. Retries per bfs_fetch_conf. Returns 0, BFS_E_CHANGED (412: the
 * object is no longer the one opened), -EIO (a read that cannot be served after its
 * retries, or a response that is not the range asked for), -EACCES, -ENOENT, -ENOMEM.
 * On an error, bfs_fetch_reason gives the reason in words for the log.
 */
int bfs_object_read(bfs_object *o, void *buf, size_t len, uint64_t off);

/*
 * bfs_fetch_reason - the reason of this thread's last failed bfs_object_read or
 * bfs_object_open, in words ("GET s3://b/k bytes 0-4095: HTTP 503 after 5 retries"),
 * "" when none. Thread-local storage, valid until the thread's next call of either.
 */
const char *bfs_fetch_reason(void);

/*
 * bfs_object_url - the object's URL for messages and logs, without what may be secret: no
 * user or password, a query (a presigned URL's signature) shown as "?...". Owned by o.
 */
const char *bfs_object_url(const bfs_object *o);

/* bfs_object_close - release o. Connections belong to the process's pool (reused by every
 * object on the same server), not to o, and stay open for the next request. NULL is a
 * no-op. */
void bfs_object_close(bfs_object *o);

/* bfs_fetch_get_stats - the process's counters so far. */
void bfs_fetch_get_stats(bfs_fetch_stats *st);

#endif
