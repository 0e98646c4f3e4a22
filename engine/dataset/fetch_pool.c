/*
 * fetch_pool.c — the process-wide side of the object-storage layer (fetch.h): its
 * configuration (bfs_fetch_configure), the counters of /stats and each thread's reason,
 * libcurl's one-time initialisation and fork handling, and the pool of curl easy handles
 * (keep-alive connections) that fetch.c's requests take and give back.
 *
 * Threads: the configuration is guarded by conf_lock, the pool by pool.lock, the counters
 * are atomics, the reason is thread-local. fork(): pthread_atfork keeps the locks
 * consistent, and handles made by another process (compared by pid) are dropped unused,
 * never cleaned up (that would shut down a TLS session the parent still uses).
 */
#include "engine/dataset/fetch.h"
#include "engine/dataset/fetch_internal.h"
#include "base/err.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_RETRIES    5
#define DEFAULT_TIMEOUT_MS 10000
/* handles kept for reuse: more threads than this at once make (and then free) their own */
#define POOL_MAX 64
/* the system's CA bundle (Debian's ca-certificates), which ca= adds to */
#define SYSTEM_CA_FILE "/etc/ssl/certs/ca-certificates.crt"
/* ca= files larger than this are refused (a bundle of every public CA is ~220 KiB) */
#define CA_FILE_MAX (16u << 20)

/* ---- configuration -------------------------------------------------------------------- */

static pthread_mutex_t conf_lock = PTHREAD_MUTEX_INITIALIZER;
static bfs_fetch_cfg *conf_now; /* guarded by conf_lock; NULL: the defaults */

void bfs_fetch_cfg_unref(bfs_fetch_cfg *c)
{
    if (!c || atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    free(c->s3_region);
    free(c->s3_endpoint);
    free(c->ca_name);
    free(c->ca_blob);
    free(c);
}

static bfs_fetch_cfg *conf_default(void)
{
    bfs_fetch_cfg *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    atomic_init(&c->refs, 1);
    c->retries = DEFAULT_RETRIES;
    c->timeout_ms = DEFAULT_TIMEOUT_MS;
    return c;
}

/* The configuration now, one more reference (NULL: no memory). */
bfs_fetch_cfg *bfs_fetch_cfg_get(void)
{
    pthread_mutex_lock(&conf_lock);
    if (!conf_now)
        conf_now = conf_default();
    bfs_fetch_cfg *c = conf_now;
    if (c)
        atomic_fetch_add(&c->refs, 1);
    pthread_mutex_unlock(&conf_lock);
    return c;
}

/* Append the file at path (at most CA_FILE_MAX bytes) to *buf. 0 or -errno. */
static int append_file(const char *path, char **buf, size_t *len)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -errno;
    int rc = 0;
    struct stat st;
    if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode) || st.st_size > (off_t)CA_FILE_MAX) {
        rc = -EINVAL;
        goto out;
    }
    size_t n = (size_t)st.st_size;
    char *b = realloc(*buf, *len + n + 2);
    if (!b) {
        rc = -ENOMEM;
        goto out;
    }
    *buf = b;
    size_t got = fread(b + *len, 1, n, f);
    if (got != n && ferror(f)) {
        rc = -EIO;
        goto out;
    }
    *len += got;
    b[(*len)++] = '\n';
    b[*len] = '\0';
out:
    fclose(f);
    return rc;
}

int bfs_fetch_configure(const bfs_fetch_conf *c, char *err, size_t errlen)
{
    bfs_fetch_cfg *n = conf_default();
    if (!n)
        return -ENOMEM;
    int rc = -ENOMEM;
    if (c) {
        n->retries = c->retries;
        n->timeout_ms = c->timeout_ms ? c->timeout_ms : DEFAULT_TIMEOUT_MS;
        if (c->s3_region && *c->s3_region) {
            char region[64];
            if ((rc = bfs_s3_region_find(c->s3_region, region, sizeof region, err, errlen)))
                goto fail;
            rc = -ENOMEM;
            if (!(n->s3_region = strdup(region)))
                goto fail;
        }
        if (c->s3_endpoint && *c->s3_endpoint) {
            if ((rc = bfs_s3_check_endpoint(c->s3_endpoint, err, errlen)))
                goto fail;
            rc = -ENOMEM;
            if (!(n->s3_endpoint = strdup(c->s3_endpoint)))
                goto fail;
        }
        if (c->ca && *c->ca) {
            size_t len = 0;
            char *user = NULL;
            rc = append_file(c->ca, &user, &len);
            if (rc == 0 && !strstr(user, "-----BEGIN CERTIFICATE-----"))
                rc = -EINVAL;
            if (rc) {
                free(user);
                if (rc == -ENOMEM)
                    goto fail;
                char ca[600];
                bfs_fetch_clean_text(ca, sizeof ca, c->ca);
                rc = bfs_errf(-EINVAL, err, errlen,
                              "ca=%s: %s (give a PEM file of CA certificates, "
                              "\"-----BEGIN CERTIFICATE-----\" blocks)",
                              ca, rc == -EINVAL ? "holds no PEM certificate" : bfs_strerror(rc));
                goto fail;
            }
            /* the system's CAs first (missing: only ca=), then the user's */
            int sys = append_file(SYSTEM_CA_FILE, &n->ca_blob, &n->ca_len);
            if (sys == -ENOMEM) {
                free(user);
                goto fail;
            }
            char *b = realloc(n->ca_blob, n->ca_len + len + 1);
            if (!b) {
                free(user);
                goto fail;
            }
            memcpy(b + n->ca_len, user, len + 1);
            n->ca_blob = b, n->ca_len += len;
            free(user);
            if (!(n->ca_name = strdup(c->ca)))
                goto fail;
        }
    }
    pthread_mutex_lock(&conf_lock);
    bfs_fetch_cfg *old = conf_now;
    conf_now = n;
    pthread_mutex_unlock(&conf_lock);
    bfs_fetch_cfg_unref(old);
    return 0;
fail:
    bfs_fetch_cfg_unref(n);
    return rc;
}

/* ---- counters and the reason -------------------------------------------------------------- */

struct bfs_fetch_counters bfs_fetch_counter;

static _Thread_local char reason[BFS_FETCH_REASON_MAX];

const char *bfs_fetch_reason(void)
{
    return reason;
}

char *bfs_fetch_reason_buf(void)
{
    return reason;
}

void bfs_fetch_get_stats(bfs_fetch_stats *st)
{
    st->requests = atomic_load(&bfs_fetch_counter.requests);
    st->bytes = atomic_load(&bfs_fetch_counter.bytes);
    st->retries = atomic_load(&bfs_fetch_counter.retries);
    st->failures = atomic_load(&bfs_fetch_counter.failures);
    st->wait_ns = atomic_load(&bfs_fetch_counter.wait_ns);
}

uint64_t bfs_fetch_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- the handle pool ------------------------------------------------------------------- */

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_rc; /* written once under init_once */

static struct {
    pthread_mutex_t lock;
    pid_t pid;            /* the process the handles below belong to */
    CURL *free[POOL_MAX]; /* guarded by lock */
    int n;                /* guarded by lock */
    CURLSH *share;        /* DNS cache and TLS sessions of every handle; guarded by lock */
    pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void share_lock_cb(CURL *h, curl_lock_data data, curl_lock_access a, void *u)
{
    pthread_mutex_lock(&pool.share_locks[data]);
}

static void share_unlock_cb(CURL *h, curl_lock_data data, void *u)
{
    pthread_mutex_unlock(&pool.share_locks[data]);
}

static void fork_prepare(void)
{
    pthread_mutex_lock(&conf_lock);
    pthread_mutex_lock(&pool.lock);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_lock(&pool.share_locks[i]);
}

static void fork_parent(void)
{
    for (int i = CURL_LOCK_DATA_LAST - 1; i >= 0; i--)
        pthread_mutex_unlock(&pool.share_locks[i]);
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&conf_lock);
}

/* The child drops (leaks) the parent's handles and share: cleaning them up would close
 * or shut down connections the parent still uses. */
static void fork_child(void)
{
    pool.n = 0;
    pool.share = NULL;
    pool.pid = getpid();
    fork_parent();
}

static void init(void)
{
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&pool.share_locks[i], NULL);
    pool.pid = getpid();
    if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
        init_rc = -ENOMEM;
        return;
    }
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

int bfs_fetch_init(void)
{
    pthread_once(&init_once, init);
    return init_rc;
}

/* A share for this process's handles (made on first use); NULL when none can be made.
 * Called under pool.lock. */
static CURLSH *share_get(void)
{
    if (!pool.share && (pool.share = curl_share_init())) {
        curl_share_setopt(pool.share, CURLSHOPT_LOCKFUNC, share_lock_cb);
        curl_share_setopt(pool.share, CURLSHOPT_UNLOCKFUNC, share_unlock_cb);
        curl_share_setopt(pool.share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
        curl_share_setopt(pool.share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    }
    return pool.share;
}

/* A handle of this process, reset (its connection kept); NULL: no memory. */
CURL *bfs_fetch_handle_get(void)
{
    CURL *h = NULL;
    pthread_mutex_lock(&pool.lock);
    if (pool.pid != getpid()) { /* forked without the atfork handler (clone): drop all */
        pool.n = 0, pool.share = NULL, pool.pid = getpid();
    }
    if (pool.n > 0)
        h = pool.free[--pool.n];
    CURLSH *sh = share_get();
    pthread_mutex_unlock(&pool.lock);
    if (h)
        curl_easy_reset(h);
    else if (!(h = curl_easy_init()))
        return NULL;
    if (sh)
        curl_easy_setopt(h, CURLOPT_SHARE, sh);
    return h;
}

void bfs_fetch_handle_put(CURL *h)
{
    pthread_mutex_lock(&pool.lock);
    if (pool.pid == getpid() && pool.n < POOL_MAX) {
        pool.free[pool.n++] = h;
        h = NULL;
    }
    pthread_mutex_unlock(&pool.lock);
    if (h)
        curl_easy_cleanup(h);
}

/* Copy curl's error text, control bytes replaced. */
void bfs_fetch_clean_text(char *dst, size_t cap, const char *src)
{
    size_t i = 0;
    for (; src[i] && i + 1 < cap; i++)
        dst[i] = (unsigned char)src[i] < 0x20 || src[i] == 0x7f ? ' ' : src[i];
    dst[i] = '\0';
    while (i > 0 && dst[i - 1] == ' ')
        dst[--i] = '\0';
}
