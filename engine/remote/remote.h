/*
 * remote.h — the Redis transport between trainer mounts and `batchfs worker`s
 * (docs/scale-out.md). batchfs adds no protocol of its own: batch jobs are entries of a
 * Redis stream read through a consumer group, results are plain string keys with a TTL,
 * claim counters are INCR, liveness is a sorted set of heartbeats.
 *
 * Keys, all of one pipeline in one hash slot ({FP}: the fingerprint, 16 hex digits):
 *   bfs:{FP}:jobs          stream of batch jobs (fields e, k); consumer group "workers"
 *   bfs:{FP}:q:E:K         "requested" marker (SET NX PX ttl): one job per batch per TTL
 *   bfs:{FP}:b:E:K         the batch: a 48-byte header (magic, fingerprint, epoch, batch,
 *                          size, XXH64 of the bytes) and the batch file's bytes; PX ttl
 *   bfs:{FP}:done          pub/sub channel: "E K" published when a batch is stored
 *   bfs:{FP}:workers       sorted set: worker name -> last heartbeat (ms since the epoch)
 *   bfs:{FP}:g:NAME:E      claim counter of group NAME in epoch E (dynamic sharding)
 *   bfs:pipelines          hash: FP -> the pipeline's canonical text (what workers serve
 *                          and trainers ask for; for messages only)
 *
 * A batch is a pure function of (fingerprint, epoch, batch): any worker may compute any
 * batch, twice, and a value is checked against its header before it is served.
 *
 * A connection (bfs_remote) is used by one thread at a time. A command on a connection the
 * server closed since its last use (a Redis restart) connects again and runs once more;
 * after other I/O errors the next call reconnects. So a Redis restart costs the calls made
 * while it is down, not the connection. The process must ignore SIGPIPE (libfuse's signal
 * handlers do; `batchfs worker` does): hiredis writes with write(2).
 */
#ifndef BATCHFS_ENGINE_REMOTE_REMOTE_H
#define BATCHFS_ENGINE_REMOTE_REMOTE_H

#include <stddef.h>
#include <stdint.h>

/* ---- addresses ------------------------------------------------------------------------- */

typedef struct bfs_remote_url {
    char user[128]; /* ACL user ("" = default) */
    char pass[256]; /* "" = no AUTH */
    char host[256]; /* name or address; IPv6 given in brackets */
    int port;       /* 6379 by default */
    int db;         /* SELECT db, 0 by default */
} bfs_remote_url;

/*
 * bfs_remote_parse_url - redis://[[USER]:PASS@]HOST[:PORT][/DB]. USER and PASS may hold
 * %XX escapes (for ':', '@', '/'); HOST is a name, an IPv4 address or [IPv6]; PORT
 * 1..65535; DB 0..2^31-1. Returns 0, or -EINVAL with a message naming what is wrong.
 * Fuzzed (tests/fuzz/fuzz_remote.c).
 */
int bfs_remote_parse_url(const char *s, bfs_remote_url *u, char *err, size_t errlen);

/* bfs_remote_url_text - the URL without its password (for logs and /stats). */
void bfs_remote_url_text(const bfs_remote_url *u, char *buf, size_t cap);

/* ---- values ---------------------------------------------------------------------------- */

#define BFS_REMOTE_HDR 48 /* bytes of a value's header */

/* bfs_remote_value_header - the header of the value of batch (fp, epoch, k) holding the
 * size bytes at data. */
void bfs_remote_value_header(uint8_t hdr[BFS_REMOTE_HDR], uint64_t fp, uint64_t epoch, uint64_t k,
                             const uint8_t *data, uint64_t size);

/*
 * bfs_remote_value_check - whether the len bytes of v are the value of batch (fp, epoch, k)
 * of size bytes: magic, fingerprint, epoch, batch and size as expected, the bytes all
 * there and their XXH64 right. 0 (*payload: the batch's bytes, inside v) or
 * BFS_E_REMOTE_VALUE. Fuzzed.
 */
int bfs_remote_value_check(const uint8_t *v, size_t len, uint64_t fp, uint64_t epoch, uint64_t k,
                           uint64_t size, const uint8_t **payload);

/* Failed batches: a worker whose batch fails (bad_sample=fail, no such batch) stores the
 * failure in the batch's key instead, so that mounts fail it at once with the same code
 * and message (a mount with remote_fallback=wait would otherwise wait for it forever). */
#define BFS_REMOTE_ERR_MAX 1024 /* bytes of a failure's message, at most */

/* bfs_remote_error_value - the value saying batch (fp, epoch, k) failed with code rc
 * (negative) and message msg (cut at BFS_REMOTE_ERR_MAX), into out (BFS_REMOTE_HDR +
 * BFS_REMOTE_ERR_MAX bytes); returns its length. */
size_t bfs_remote_error_value(uint8_t *out, uint64_t fp, uint64_t epoch, uint64_t k, int rc,
                              const char *msg);

/* bfs_remote_error_check - if the len bytes at v are a failure of batch (fp, epoch, k):
 * its code (negative) with its message in msg; else 0. Fuzzed. */
int bfs_remote_error_check(const uint8_t *v, size_t len, uint64_t fp, uint64_t epoch, uint64_t k,
                           char *msg, size_t cap);

/* ---- connections ----------------------------------------------------------------------- */

typedef struct bfs_remote bfs_remote;

/*
 * bfs_remote_connect - connect to u for pipeline fp (timeout_ms for connecting and for each
 * reply, except blocking reads), AUTH, SELECT, PING. Returns 0, or BFS_E_REMOTE / -ENOMEM
 * with a message that says which step failed and Redis's own words (an unreachable
 * server, a wrong password, a missing ACL permission).
 */
int bfs_remote_connect(const bfs_remote_url *u, uint64_t fp, int timeout_ms, bfs_remote **out,
                       char *err, size_t errlen);
void bfs_remote_close(bfs_remote *r); /* NULL ok */

/* bfs_remote_error - the message of the last failure on r (never NULL). */
const char *bfs_remote_error(const bfs_remote *r);

/* bfs_remote_describe - record this pipeline's canonical text in bfs:pipelines. */
int bfs_remote_describe(bfs_remote *r, const char *pipeline_text);

/* bfs_remote_pipeline_text - the text recorded for fingerprint fp, into buf ("" when
 * none). 0 or BFS_E_REMOTE. */
int bfs_remote_pipeline_text(bfs_remote *r, uint64_t fp, char *buf, size_t cap);

/* ---- the trainer's side ---------------------------------------------------------------- */

/*
 * bfs_remote_request - ask the workers for batch (epoch, k): one stream entry per batch
 * per ttl_ms across every trainer of the pipeline (the q: marker). Returns 1 when this
 * call queued the job, 0 when it was queued already (by anyone) or is stored, or
 * BFS_E_REMOTE.
 */
int bfs_remote_request(bfs_remote *r, uint64_t epoch, uint64_t k, int ttl_ms);

/*
 * bfs_remote_fetch - the stored batch (epoch, k) of size bytes, checked, into dst.
 * Returns 1 when dst holds it; 0 when no value is stored (not yet computed, expired,
 * evicted by maxmemory); BFS_E_REMOTE_VALUE when the stored value is wrong (it is then
 * deleted with its request marker, so that the next request queues a job and a worker
 * stores it again); BFS_E_REMOTE on a failed request; any other negative code: the batch
 * failed on a worker with that code (bfs_remote_put_error), its message in
 * bfs_remote_error(r).
 */
int bfs_remote_fetch(bfs_remote *r, uint64_t epoch, uint64_t k, uint8_t *dst, uint64_t size);

/* bfs_remote_fetch_fd - the same into file fd (written with pwrite from offset 0, through a
 * 1 MiB buffer: no batch-sized buffer is touched). A failed write of the file reads the
 * rest of the value and returns BFS_E_REMOTE (the message says so). */
int bfs_remote_fetch_fd(bfs_remote *r, uint64_t epoch, uint64_t k, int fd, uint64_t size);

/* bfs_remote_workers - workers of this pipeline with a heartbeat in the last alive_ms,
 * or BFS_E_REMOTE. */
int bfs_remote_workers(bfs_remote *r, int alive_ms);

/* bfs_remote_claim - the next unclaimed batch of epoch for group: *k = the counter's value
 * before this claim (0, 1, ...; the caller compares it with the epoch's batch count).
 * 0 or BFS_E_REMOTE. */
int bfs_remote_claim(bfs_remote *r, const char *group, uint64_t epoch, uint64_t *k);

/*
 * bfs_remote_subscribe - make r a listener of the pipeline's announcements (the done
 * channel); it runs no other command from then on (and subscribes again when it
 * reconnects). bfs_remote_announced - the next announcement: 1 with *epoch, *k; 0 when
 * none came in timeout_ms or wake_fd (>= 0; not read) became readable first;
 * BFS_E_REMOTE (the next call reconnects).
 */
int bfs_remote_subscribe(bfs_remote *r);
int bfs_remote_announced(bfs_remote *r, int timeout_ms, int wake_fd, uint64_t *epoch, uint64_t *k);

/* bfs_remote_claim_return - give claim (epoch, batch) of group back, tried `tries` times:
 * the next bfs_remote_claim_returned of the group and epoch hands it out first. 0 or
 * BFS_E_REMOTE. bfs_remote_claim_returned - 1 with *batch, *tries of a claim given back,
 * 0 when none, BFS_E_REMOTE. */
int bfs_remote_claim_return(bfs_remote *r, const char *group, uint64_t epoch, uint64_t batch,
                            uint32_t tries);
int bfs_remote_claim_returned(bfs_remote *r, const char *group, uint64_t epoch, uint64_t *batch,
                              uint32_t *tries);

/* ---- the worker's side ----------------------------------------------------------------- */

typedef struct bfs_remote_job {
    char id[64]; /* the stream entry's ID */
    uint64_t epoch, k;
    int reclaimed; /* taken over from a worker that held it for claim_ms */
} bfs_remote_job;

/*
 * bfs_remote_take - the next job for consumer `name`: first one that another consumer has
 * held unacknowledged for claim_ms or longer (XAUTOCLAIM), else a new one, waiting up to
 * block_ms (XREADGROUP BLOCK). Creates the stream and group when missing (also after a
 * Redis restart). Returns 1 with *job, 0 when none came, BFS_E_REMOTE. A malformed entry
 * is acknowledged, deleted and skipped.
 */
int bfs_remote_take(bfs_remote *r, const char *name, int claim_ms, int block_ms,
                    bfs_remote_job *job);

/* bfs_remote_stored - 1 when batch (epoch, k) is stored, 0 when not, BFS_E_REMOTE. */
int bfs_remote_stored(bfs_remote *r, uint64_t epoch, uint64_t k);

/* bfs_remote_put - store batch (epoch, k) (size bytes at data) for ttl_ms, drop its request
 * marker (a request after the value is evicted queues a job at once) and announce it on the
 * done channel. 0, -ENOMEM or BFS_E_REMOTE. */
int bfs_remote_put(bfs_remote *r, uint64_t epoch, uint64_t k, const uint8_t *data, uint64_t size,
                   int ttl_ms);

/* bfs_remote_put_error - store that batch (epoch, k) failed with code rc and message msg
 * (for ttl_ms), drop its request marker and announce it. 0 or BFS_E_REMOTE. */
int bfs_remote_put_error(bfs_remote *r, uint64_t epoch, uint64_t k, int rc, const char *msg,
                         int ttl_ms);

/* bfs_remote_ack - the job is done: acknowledge and delete its entry. */
int bfs_remote_ack(bfs_remote *r, const bfs_remote_job *job);

/* bfs_remote_heartbeat - say that worker `name` is alive now. */
int bfs_remote_heartbeat(bfs_remote *r, const char *name);

/*
 * bfs_remote_orphans - pipelines other than r's that have jobs queued and no worker alive
 * in the last alive_ms: fn(arg, fp, queued) for each (a worker of another pipeline logs
 * why it does not take them). The number of such pipelines, or BFS_E_REMOTE.
 */
int bfs_remote_orphans(bfs_remote *r, int alive_ms,
                       void (*fn)(void *arg, uint64_t fp, long long queued), void *arg);

/* bfs_remote_key - the key of batch (epoch, k) of fingerprint fp (tests, logs). */
void bfs_remote_key(char *buf, size_t cap, uint64_t fp, uint64_t epoch, uint64_t k);

#endif
