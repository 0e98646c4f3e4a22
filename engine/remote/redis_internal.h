/*
 * redis_internal.h — the connection remote.c keeps to Redis and its commands, for the
 * other hiredis files of engine/remote/ (trainer.c) only. format.c and auth.c, which
 * link no hiredis, do not include it.
 */
#ifndef BATCHFS_ENGINE_REMOTE_REDIS_INTERNAL_H
#define BATCHFS_ENGINE_REMOTE_REDIS_INTERNAL_H

#include "engine/remote/remote.h"

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

struct bfs_remote {
    bfs_remote_url url;
    uint64_t fp;
    int timeout_ms;
    redisContext *c; /* NULL: to be (re)connected */
    int subscribed;  /* announcements only (bfs_remote_subscribe) */
    int opening;     /* in open_conn: no second try of a failed command */
    int refused;     /* the last command's reply was an error (Redis answered, refusing) */
    uint8_t *bounce; /* BOUNCE bytes: a value on its way to a file (bfs_remote_fetch_fd) */
    char tag[24];    /* "{FP}" */
    char error[BFS_REMOTE_ERR_MAX + 256];
};

/* bfs_rconn_open - connect r (its URL, AUTH, SELECT): 0, or -ENOMEM or BFS_E_REMOTE with
 * r->error. */
int bfs_rconn_open(bfs_remote *r);

/* bfs_rconn_drop - close r's connection; the next command reconnects. */
void bfs_rconn_drop(bfs_remote *r);

/* bfs_rconn_run - a command's reply, or NULL with r->error set (an ERROR reply is freed
 * and NULL too). An I/O error drops the connection: the next command reconnects. */
redisReply *bfs_rconn_run(bfs_remote *r, int argc, const char **argv, const size_t *lens);

/* bfs_rconn_failure - the code of a command that got no reply from bfs_rconn_run: Redis
 * refused it (BFS_E_REMOTE_REFUSED) or the connection failed (BFS_E_REMOTE). */
int bfs_rconn_failure(const bfs_remote *r);

/* bfs_rconn_key - "bfs:{FP}:" + suffix (formatted) into buf. */
void bfs_rconn_key(const bfs_remote *r, char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* bfs_rconn_simple - run a command whose reply only matters as success. 0 or BFS_E_REMOTE. */
int bfs_rconn_simple(bfs_remote *r, int argc, const char **argv, const size_t *lens);

/* bfs_rconn_ms - Redis's clock in ms (TIME), so that heartbeats of hosts with other
 * clocks compare. 0 or BFS_E_REMOTE. */
int bfs_rconn_ms(bfs_remote *r, uint64_t *ms);

#endif
