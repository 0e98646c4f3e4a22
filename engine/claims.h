/*
 * claims.h — dynamic sharding: a claim counter per epoch shared by the mounts of one group
 * (group=NAME), so that each batch of an epoch is handed to exactly one reader of the
 * group, first come first served (tf.data service's dynamic sharding).
 *
 * Neighbours: fs/ claims a batch at each open of MNT/epoch/N/next and computes it with the
 * executor (exec.h); the option group= lives in pipeline.h. The counter is behind this
 * interface so that a backend across hosts (Redis) can take the one-host one's place.
 *
 * One-host backend: a shared-memory file /dev/shm/batchfs-group-<uid>-<NAME>-<fingerprint>
 * (mode 0600, owned by this user), mapped MAP_SHARED by every mount of the group with the
 * same pipeline fingerprint; epoch N's counter is a 64-bit word updated with an atomic
 * fetch-add, so claims never take a lock. The file has a word for every epoch the epochs=
 * option allows (BFS_CLAIMS_EPOCHS: 8 MB of address space, of which tmpfs allocates only
 * the pages of epochs used). Mounts attach under a record lock on the file: the first mount
 * to attach when no other one is (a fresh file, or one left by mounts that all died) resets
 * every counter, and the last one to detach removes the file. So the counters live as long
 * as at least one mount of the group is up.
 *
 * Claims given back: a claim whose batch could not be served (the computation failed, the
 * mount is shutting down) is put back on a shared list of BFS_CLAIMS_RETURNS entries and
 * handed out again before new batches; after BFS_CLAIMS_TRIES failed tries (a batch that
 * fails every time), or when the list is full, it is dropped and counted as lost. A claim
 * that was not tried (an interrupted reader, a claim taken ahead and not used) is returned
 * with its tries unchanged (bfs_claims_return). A claim whose reader dies after the open succeeded
 * is not given back: that batch is lost for this epoch (at most once, as in tf.data service).
 *
 * Across hosts (bfs_claims_open_remote, with remote=): the counter of epoch N is the Redis
 * key bfs:{FP}:g:NAME:N (INCR), the claims given back the list bfs:{FP}:g:NAME:N:back
 * (RPUSH, LPOP); both expire a week after their first use. They are not reset when a
 * group's mounts start: across hosts a group name is one run's (a job id, say). Before its
 * first claim of an epoch a mount looks at the counter, and if it is past 0 logs how far
 * the epoch is claimed and how to start clean (bfs_claims_reset_remote: `batchfs
 * group-reset`).
 */
#ifndef BATCHFS_ENGINE_CLAIMS_H
#define BATCHFS_ENGINE_CLAIMS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/api.h"

#define BFS_CLAIMS_NAME_MAX 64      /* group=NAME: [A-Za-z0-9._-]{1,64} */
#define BFS_CLAIMS_EPOCHS   1000000 /* one counter per epoch the epochs= option allows */
#define BFS_CLAIMS_RETURNS  256     /* claims given back and not yet handed out again */
#define BFS_CLAIMS_TRIES    3       /* a batch is handed out at most this often */

typedef struct bfs_claims bfs_claims;

/* bfs_group_claim, one claimed batch (engine/api.h). */

typedef struct bfs_claims_stats {
    uint64_t taken;      /* claims this process took */
    uint64_t given_back; /* of them, given back (to be handed out again) */
    uint64_t lost;       /* of them, dropped after BFS_CLAIMS_TRIES or with the list full */
    uint64_t exhausted;  /* takes refused with -ENODATA (the epoch was used up) */
} bfs_claims_stats;

/* bfs_claims_name_valid - is name a valid group name ([A-Za-z0-9._-], 1..64 bytes)? */
int bfs_claims_name_valid(const char *name);

/*
 * bfs_claims_open - attach to group `name` (valid: bfs_claims_name_valid) of the pipeline
 * with this fingerprint and `batches` batches per epoch, creating its shared file if needed
 * (see above). Returns 0 with *out set; -EINVAL for a bad name; -EEXIST when the group's
 * file holds another pipeline (a damaged or foreign file); -EPERM when the file is not this
 * user's or not private to it; -ENOMEM, or the errno of open, mmap or fcntl. err names the
 * file and what to do.
 */
int bfs_claims_open(const char *name, uint64_t fingerprint, uint64_t batches, bfs_claims **out,
                    char *err, size_t errlen);

/*
 * bfs_claims_open_remote - the same group, its counters in the Redis of url (remote=): for
 * mounts of one pipeline on several hosts. Returns 0, -EINVAL (name, URL), -ENOMEM, or
 * BFS_E_REMOTE when Redis cannot be reached or refuses the password (err says why).
 * Takes then fail with BFS_E_REMOTE while Redis is down (logged).
 */
int bfs_claims_open_remote(const char *name, uint64_t fingerprint, uint64_t batches,
                           const char *url, bfs_claims **out, char *err, size_t errlen);

/*
 * bfs_claims_reset_remote - a clean start for group `name` of the pipeline with this
 * fingerprint in the Redis of url: delete its claim counters and given-back lists of every
 * epoch (*deleted: how many keys). Meant for when none of the group's mounts is up (a
 * mount's claims made before stay made). 0, -EINVAL (name, URL), BFS_E_REMOTE (err says
 * why) or -ENOMEM.
 */
int bfs_claims_reset_remote(const char *name, uint64_t fingerprint, const char *url,
                            long long *deleted, char *err, size_t errlen);

/*
 * bfs_claims_take - claim the next batch of epoch (< BFS_CLAIMS_EPOCHS) no mount of the group
 * has claimed: a claim given back first, else the next one of the counter. Returns 0 with *c
 * set; -ENODATA when every batch of the epoch has been claimed; -ERANGE for an epoch out of
 * range. Thread-safe; never blocks except for a give-back's short lock.
 */
int bfs_claims_take(bfs_claims *g, uint64_t epoch, bfs_group_claim *c);

/* bfs_claims_give_back - claim c (bfs_claims_take's) was not served: hand it out again
 * unless it failed BFS_CLAIMS_TRIES times or the list is full (then it is lost). */
void bfs_claims_give_back(bfs_claims *g, const bfs_group_claim *c);

/* bfs_claims_return - claim c was not tried (its reader was interrupted while the batch was
 * computed, or it was taken ahead and never opened): hand it out again with the tries it
 * had, so that it is never lost for it; only a full list drops it (counted as lost).
 * Counted as given back. */
void bfs_claims_return(bfs_claims *g, const bfs_group_claim *c);

/* bfs_claims_get_stats - this process's counters. */
void bfs_claims_get_stats(bfs_claims *g, bfs_claims_stats *st);

/* bfs_claims_name - the group's name (owned by g). */
const char *bfs_claims_name(const bfs_claims *g);

/* bfs_claims_close - detach (the last mount of the group removes the file); NULL is fine. */
void bfs_claims_close(bfs_claims *g);

#endif
