/*
 * remote.h — the Redis transport between trainer mounts and `batchfs worker`s
 * (docs/scale-out.md). batchfs adds no protocol of its own: batch jobs are entries of a
 * Redis stream read through a consumer group, results are plain string keys with a TTL,
 * claim counters are INCR, liveness is a sorted set of heartbeats.
 *
 * Keys, all of one pipeline in one hash slot ({FP}: the fingerprint, 16 hex digits):
 *   bfs:{FP}:jobs          stream of batch jobs (fields e, k, w: the asker's wait in ms);
 *                          consumer group "workers"
 *   bfs:{FP}:q:E:K         "requested" marker (SET NX PX ttl): one job per batch per TTL
 *   bfs:{FP}:b:E:K         the batch: a header (magic, fingerprint, epoch, batch, size, and
 *                          XXH64 of the bytes, or with remote_key= the key's id, a nonce and
 *                          a Poly1305 tag: auth.c) and the batch file's bytes; PX ttl. Or a
 *                          worker's decline of the batch (bfs_remote_decline)
 *   bfs:{FP}:done          pub/sub channel: "E K" published when a batch is stored
 *   bfs:{FP}:workers       sorted set: worker name -> last heartbeat (ms since the epoch)
 *   bfs:{FP}:g:NAME:E      claim counter of group NAME in epoch E (dynamic sharding)
 *   bfs:{FP}:g:NAME:E:back claims of group NAME in epoch E given back (a list)
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

#include "base/hash.h"

#include <stddef.h>
#include <stdint.h>

/* ---- addresses and keys ---------------------------------------------------------------- */

/* A shared secret of the pipeline's workers and mounts (remote_key=FILE): values are
 * authenticated with it (auth.c). Never logged; its id (a hash of it) may be. */
#define BFS_REMOTE_KEY_MIN 16 /* bytes of secret in a key file, at least */
typedef struct bfs_remote_auth {
    int on;          /* a key is loaded */
    uint8_t key[32]; /* HMAC-SHA256 of the file's bytes: the MAC key */
    uint8_t id[8];   /* names the key in values (mismatches are told apart from forgeries) */
} bfs_remote_auth;

typedef struct bfs_remote_url {
    char user[128];       /* ACL user ("" = default) */
    char pass[256];       /* "" = no AUTH */
    char host[256];       /* name or address; IPv6 given in brackets */
    int port;             /* 6379 by default */
    int db;               /* SELECT db, 0 by default */
    bfs_remote_auth auth; /* values authenticated with it (bfs_remote_load_key), or off */
} bfs_remote_url;

/*
 * bfs_remote_parse_url - redis://[[USER]:PASS@]HOST[:PORT][/DB]. USER and PASS may hold
 * %XX escapes (for ':', '@', '/'); HOST is a name, an IPv4 address or [IPv6]; PORT
 * 1..65535; DB 0..2^31-1. Returns 0, or -EINVAL with a message naming what is wrong.
 * u->auth is off. Fuzzed (tests/fuzz/fuzz_remote.c).
 */
int bfs_remote_parse_url(const char *s, bfs_remote_url *u, char *err, size_t errlen);

/* bfs_remote_url_text - the URL without its password (for logs and /stats). */
void bfs_remote_url_text(const bfs_remote_url *u, char *buf, size_t cap);

/*
 * bfs_remote_load_key - the key in file path (remote_key=): a regular file of the caller's
 * (or root's), readable and writable by its owner only (mode 600 or 400), of 16..4096
 * bytes (trailing whitespace ignored: `openssl rand -hex 32 > FILE` works on every host).
 * Returns 0 with *a on, or a negative errno / BFS_E_NOT_REGULAR with a message that names
 * the file and what to do (chmod 600, a longer key); the key's bytes appear in no message.
 */
int bfs_remote_load_key(const char *path, bfs_remote_auth *a, char *err, size_t errlen);

/* bfs_remote_key_id_text - the key's id in hex ("none" when off): for logs and /stats. */
void bfs_remote_key_id_text(const bfs_remote_auth *a, char *buf, size_t cap);

/* ---- values ----------------------------------------------------------------------------
 * A value is a header and the batch file's bytes. Without a key the header carries XXH64
 * of the bytes seeded with the fingerprint (catches accidents: the fingerprint is public);
 * with one, a Poly1305 tag under a one-time key derived from the key and the header
 * (auth.c), so that only holders of the key can make a value a mount accepts. */

#define BFS_REMOTE_HDR      48 /* bytes of a value's header without a key */
#define BFS_REMOTE_HDR_AUTH 80 /* with one */
#define BFS_REMOTE_HDR_MAX  80

/* bfs_remote_hdr_len - the header length of values made with a (NULL or off: plain). */
size_t bfs_remote_hdr_len(const bfs_remote_auth *a);

/* bfs_remote_value_header - the header (bfs_remote_hdr_len(a) bytes) of the value of batch
 * (fp, epoch, k) holding the size bytes at data, into hdr (BFS_REMOTE_HDR_MAX bytes).
 * Returns the header's length, or -EIO (OpenSSL failed: no random bytes, no Poly1305). */
int bfs_remote_value_header(uint8_t *hdr, const bfs_remote_auth *a, uint64_t fp, uint64_t epoch,
                            uint64_t k, const uint8_t *data, uint64_t size);

/* A value checked as it streams in: bfs_remote_check_begin on its header (hdrlen bytes),
 * bfs_remote_check_update on its bytes in order, bfs_remote_check_end (which frees it)
 * or bfs_remote_check_abort. begin returns 0, BFS_E_REMOTE_VALUE (not a value of batch
 * (fp, epoch, k) of size bytes), BFS_E_REMOTE_AUTH (made with another key, with a key
 * where a has none, or without one where a has one) or -ENOMEM; end returns 0,
 * BFS_E_REMOTE_VALUE (checksum), BFS_E_REMOTE_AUTH (tag: forged or corrupt) or -EIO. */
typedef struct bfs_remote_check {
    int keyed, broken;
    uint64_t sum;      /* plain: the XXH64 the bytes must have */
    bfs_xxh64_state h; /* plain */
    void *mac;         /* keyed: OpenSSL's EVP_MAC_CTX (Poly1305) */
    uint8_t tag[16];   /* keyed: the tag the bytes must have */
} bfs_remote_check;
int bfs_remote_check_begin(bfs_remote_check *c, const bfs_remote_auth *a, const uint8_t *hdr,
                           size_t hdrlen, uint64_t fp, uint64_t epoch, uint64_t k, uint64_t size);
void bfs_remote_check_update(bfs_remote_check *c, const uint8_t *p, size_t n);
int bfs_remote_check_end(bfs_remote_check *c);
void bfs_remote_check_abort(bfs_remote_check *c); /* NULL ok */

/*
 * bfs_remote_value_check - whether the len bytes of v are the value of batch (fp, epoch, k)
 * of size bytes, checked with a as above. 0 (*payload: the batch's bytes, inside v),
 * BFS_E_REMOTE_VALUE, BFS_E_REMOTE_AUTH or -ENOMEM/-EIO. Fuzzed.
 */
int bfs_remote_value_check(const uint8_t *v, size_t len, const bfs_remote_auth *a, uint64_t fp,
                           uint64_t epoch, uint64_t k, uint64_t size, const uint8_t **payload);

/* Declined batches: a worker that cannot compute a batch from its own copy of the data or
 * with its own resources (a sample bad or changed only there, a substitute, out of memory
 * or descriptors, its dataset changed in place) says so in the batch's key, so that the
 * mounts waiting for it compute it themselves at once (with remote_fallback=wait too)
 * instead of failing it: nothing that depends on one worker's copy is shared. A decline
 * is not authenticated: forging one only makes mounts compute a batch themselves, which
 * deleting keys does too. */
#define BFS_REMOTE_ERR_MAX 1024 /* bytes of a decline's message, at most */

/* bfs_remote_error_value - the value saying the worker declined batch (fp, epoch, k) with
 * code rc (negative, what it got) and message msg (cut at BFS_REMOTE_ERR_MAX), into out
 * (BFS_REMOTE_HDR + BFS_REMOTE_ERR_MAX bytes); returns its length. */
size_t bfs_remote_error_value(uint8_t *out, uint64_t fp, uint64_t epoch, uint64_t k, int rc,
                              const char *msg);

/* bfs_remote_error_check - if the len bytes at v are a decline of batch (fp, epoch, k):
 * the worker's code (negative) with its message in msg; else 0. Fuzzed. */
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
 * per ttl_ms across every trainer of the pipeline (the q: marker, which expires after
 * ttl_ms; the entry says the asker waits ttl_ms, after which workers skip it). Returns 1
 * when this call queued the job (id: its entry, for bfs_remote_cancel), 0 when it was
 * queued already (by anyone) or is stored, BFS_E_REMOTE_REFUSED when Redis refused (the
 * jobs stream is a key of another type, maxmemory) or the marker's key held something
 * else (then deleted), or BFS_E_REMOTE; the message in bfs_remote_error(r).
 */
int bfs_remote_request(bfs_remote *r, uint64_t epoch, uint64_t k, int ttl_ms, char id[64]);

/* bfs_remote_cancel - delete job entry id (from bfs_remote_request; "" does nothing): the
 * asker computed the batch itself, so no worker should. 0 or BFS_E_REMOTE. */
int bfs_remote_cancel(bfs_remote *r, const char *id);

/*
 * bfs_remote_fetch - the stored batch (epoch, k) of size bytes, checked (and with a key
 * in the URL, authenticated), into dst. Returns
 *   1                      dst holds it;
 *   0                      no value is stored (not yet computed, expired, evicted);
 *   BFS_E_REMOTE_VALUE     the value is wrong (checksum, size, header): deleted with its
 *                          request marker, so that a worker stores it again;
 *   BFS_E_REMOTE_AUTH      the value fails authentication: deleted when forged (its tag),
 *                          kept when made with another key or none (the message says so);
 *   BFS_E_REMOTE_REFUSED   the key is of another type (WRONGTYPE): deleted;
 *   BFS_E_REMOTE_DECLINED  a worker declined the batch (bfs_remote_decline): compute it;
 *   BFS_E_REMOTE           the request failed (the connection is dropped).
 * The message, for all but 1 and 0, in bfs_remote_error(r).
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
    int reclaimed;      /* taken over from a worker that held it for claim_ms */
    uint64_t queued_ms; /* when it was queued, on Redis's clock (from the ID) */
    uint64_t wait_ms;   /* how long its asker waits for it (0: not said) */
    unsigned skipped;   /* stale jobs skipped by the bfs_remote_take that gave this one */
} bfs_remote_job;

/*
 * bfs_remote_take - the next job for consumer `name`: first one that another consumer has
 * held unacknowledged for claim_ms or longer (XAUTOCLAIM), else a new one, waiting up to
 * block_ms (XREADGROUP BLOCK). Creates the stream and group when missing (also after a
 * Redis restart). Returns 1 with *job, 0 when none came, BFS_E_REMOTE. A malformed entry
 * is acknowledged, deleted and skipped; so is a stale one, whose asker's wait (its wait_ms
 * from queued_ms, on Redis's clock) is over: the asker has computed the batch itself or
 * queued it again (counted in job->skipped, also when 0 is returned).
 */
int bfs_remote_take(bfs_remote *r, const char *name, int claim_ms, int block_ms,
                    bfs_remote_job *job);

/* bfs_remote_stored - 1 when a value of batch (epoch, k) is stored (a string at its key;
 * not checked), 0 when not, BFS_E_REMOTE. */
int bfs_remote_stored(bfs_remote *r, uint64_t epoch, uint64_t k);

/* bfs_remote_put - store batch (epoch, k) (size bytes at data; authenticated with the URL's
 * key, if any) for ttl_ms, drop its request marker (a request after the value is evicted
 * queues a job at once) and announce it on the done channel. 0, -EIO (OpenSSL) or
 * BFS_E_REMOTE (r's error says why: the connection, or Redis refused the value). A batch holding a
 * substitute for a bad sample must not be stored (bfs_remote_decline it): the sample may be bad on
 * this host only. */
int bfs_remote_put(bfs_remote *r, uint64_t epoch, uint64_t k, const uint8_t *data, uint64_t size,
                   int ttl_ms);

/* bfs_remote_decline - store that this worker could not compute batch (epoch, k) (code rc,
 * message msg) for ttl_ms, drop its request marker and announce it: the mounts waiting for
 * it compute it themselves (see "Declined batches" above). 0 or BFS_E_REMOTE. */
int bfs_remote_decline(bfs_remote *r, uint64_t epoch, uint64_t k, int rc, const char *msg,
                       int ttl_ms);

/* bfs_remote_ack - the job is done: acknowledge and delete its entry. */
int bfs_remote_ack(bfs_remote *r, const bfs_remote_job *job);

/* bfs_remote_leave - worker `name` stops: out of the set of live workers at once, so that
 * mounts stop waiting for it (instead of its heartbeat ageing out). 0 or BFS_E_REMOTE. */
int bfs_remote_leave(bfs_remote *r, const char *name);

/* bfs_remote_heartbeat - say that worker `name` is alive now. */
int bfs_remote_heartbeat(bfs_remote *r, const char *name);

/*
 * bfs_remote_orphans - pipelines other than r's that have jobs queued and no worker alive
 * in the last alive_ms: fn(arg, fp, queued) for each (a worker of another pipeline logs
 * why it does not take them). The number of such pipelines, or BFS_E_REMOTE.
 */
int bfs_remote_orphans(bfs_remote *r, int alive_ms,
                       void (*fn)(void *arg, uint64_t fp, long long queued), void *arg);

/* bfs_remote_claim_info - the claim counter of group in epoch as it is: *count claims made
 * (0: none; it may exceed the epoch's batches, each take past the end adds one) and
 * *age_s, the seconds since its first claim (from its TTL; -1 when unknown). 0 or
 * BFS_E_REMOTE. */
int bfs_remote_claim_info(bfs_remote *r, const char *group, uint64_t epoch, uint64_t *count,
                          long long *age_s);

/* bfs_remote_claims_reset - delete every claim counter and given-back list of group (the
 * keys bfs:{FP}:g:NAME:*, found with SCAN), *deleted how many: its epochs start over.
 * 0 or BFS_E_REMOTE. */
int bfs_remote_claims_reset(bfs_remote *r, const char *group, long long *deleted);

/* bfs_remote_key - the key of batch (epoch, k) of fingerprint fp (tests, logs). */
void bfs_remote_key(char *buf, size_t cap, uint64_t fp, uint64_t epoch, uint64_t k);

#endif
