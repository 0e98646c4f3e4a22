/*
 * auth.c — batch values in Redis, checked and (with remote_key=FILE) authenticated (see
 * remote.h, docs/scale-out.md "Security").
 *
 * A plain value's header carries XXH64 of the bytes seeded with the fingerprint: it
 * catches accidents (a truncated write, a bug, someone else's key), not an attacker, as
 * the fingerprint is in every key's name. With a key shared by the workers and mounts of
 * a pipeline, a value carries a Poly1305 tag instead, under a one-time key derived from
 * the shared key and the value's own header (magic, fingerprint, epoch, batch, size, the
 * key's id and 16 random bytes): HMAC-SHA256(key, header[0..64)). That is the
 * construction of ChaCha20-Poly1305 (a fresh Poly1305 key per message, from a PRF of a
 * nonce) with HMAC-SHA256 as the PRF. Poly1305 because a value is a whole batch, tens of
 * MB hashed by the worker and by every mount: OpenSSL's Poly1305 runs at ~9 GB/s here,
 * HMAC-SHA256 at ~1.5 GB/s (measured on this VM, SHA-NI), XXH64 at ~10 GB/s. A value
 * replayed under its own key is the same batch (batches are deterministic), so replays
 * need no defence; one moved to another key fails, as its header is in its key.
 *
 * Layout (little-endian):
 *   plain          [0,8) "BFSRMT01" [8) fp [16) epoch [24) batch [32) size [40) XXH64
 *   authenticated  [0,8) "BFSRMA01" [8) fp [16) epoch [24) batch [32) size [40) key id
 *                  [48,64) nonce [64,80) Poly1305 tag
 */
#include "engine/remote/remote.h"
#include "engine/remote/remote_internal.h"
#include "base/endian.h"
#include "base/err.h"
#include "base/hash.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const uint8_t PLAIN_MAGIC[8] = {'B', 'F', 'S', 'R', 'M', 'T', '0', '1'};
static const uint8_t AUTH_MAGIC[8] = {'B', 'F', 'S', 'R', 'M', 'A', '0', '1'};

#define KEY_FILE_MAX 4096 /* bytes of a key file: a secret, not a document */

/* ---- the key ------------------------------------------------------------------------- */

static int hmac256(const uint8_t *key, size_t klen, const void *data, size_t n, uint8_t out[32])
{
    unsigned len = 32;
    return HMAC(EVP_sha256(), key, (int)klen, data, n, out, &len) && len == 32 ? 0 : -EIO;
}

int bfs_remote_load_key(const char *path, bfs_remote_auth *a, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    /* O_NONBLOCK: a FIFO named as the key must not block the mount (it is refused below) */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        return bfs_errf(-e, err, errlen, "remote_key=%s: %s", path, strerror(e));
    }
    struct stat st;
    uint8_t buf[KEY_FILE_MAX + 1];
    size_t n = 0;
    int rc = 0;
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        bfs_errf(rc, err, errlen, "remote_key=%s: %s", path, strerror(-rc));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = bfs_errf(BFS_E_NOT_REGULAR, err, errlen, "remote_key=%s: not a regular file", path);
        goto out;
    }
    if (st.st_uid != geteuid() && st.st_uid != 0) {
        rc = bfs_errf(-EPERM, err, errlen,
                      "remote_key=%s: owned by uid %u, neither you (uid %u) nor root: another "
                      "user could change the key",
                      path, (unsigned)st.st_uid, (unsigned)geteuid());
        goto out;
    }
    if (st.st_mode & 077) {
        rc = bfs_errf(-EPERM, err, errlen,
                      "remote_key=%s: mode %04o lets other users read or write it (whoever "
                      "holds the key can serve batches to every mount): chmod 600 %s",
                      path, (unsigned)(st.st_mode & 07777), path);
        goto out;
    }
    for (;;) {
        ssize_t got = read(fd, buf + n, sizeof buf - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            rc = -errno;
            bfs_errf(rc, err, errlen, "remote_key=%s: %s", path, strerror(-rc));
            goto out;
        }
        if (got == 0)
            break;
        n += (size_t)got;
        if (n == sizeof buf) {
            rc = bfs_errf(-EINVAL, err, errlen,
                          "remote_key=%s: over %d bytes: a key file holds a secret of 16 to "
                          "%d bytes (e.g. `openssl rand -hex 32`)",
                          path, KEY_FILE_MAX, KEY_FILE_MAX);
            goto out;
        }
    }
    /* a trailing newline (or none) must not make two hosts' keys differ */
    while (n &&
           (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t'))
        n--;
    if (n < BFS_REMOTE_KEY_MIN) {
        rc = bfs_errf(-EINVAL, err, errlen,
                      "remote_key=%s: %zu bytes: a key needs at least %d (make one with "
                      "`openssl rand -hex 32 > %s; chmod 600 %s`)",
                      path, n, BFS_REMOTE_KEY_MIN, path, path);
        goto out;
    }
    static const char label[] = "batchfs remote_key 1";
    static const char id_label[] = "batchfs remote_key id";
    uint8_t id[32];
    if (hmac256(buf, n, label, sizeof label - 1, a->key) ||
        hmac256(a->key, sizeof a->key, id_label, sizeof id_label - 1, id)) {
        rc = bfs_errf(-EIO, err, errlen, "remote_key=%s: HMAC-SHA256 failed (OpenSSL)", path);
        goto out;
    }
    memcpy(a->id, id, sizeof a->id);
    a->on = 1;
out:
    OPENSSL_cleanse(buf, sizeof buf);
    close(fd);
    if (rc)
        OPENSSL_cleanse(a, sizeof *a);
    return rc;
}

void bfs_remote_key_id_text(const bfs_remote_auth *a, char *buf, size_t cap)
{
    if (!a || !a->on) {
        snprintf(buf, cap, "none");
        return;
    }
    size_t o = 0;
    for (size_t i = 0; i < sizeof a->id && o + 3 <= cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%02x", a->id[i]);
}

/* ---- Poly1305 through OpenSSL's EVP_MAC, fetched once ---------------------------------- */

static EVP_MAC *poly1305;
static pthread_once_t poly_once = PTHREAD_ONCE_INIT;

static void poly_fetch(void)
{
    poly1305 = EVP_MAC_fetch(NULL, "POLY1305", NULL);
}

/* A Poly1305 context keyed for the value whose 64 header bytes are hdr, or NULL. */
static EVP_MAC_CTX *poly_for(const bfs_remote_auth *a, const uint8_t hdr[64])
{
    pthread_once(&poly_once, poly_fetch);
    uint8_t otk[32];
    if (!poly1305 || hmac256(a->key, sizeof a->key, hdr, 64, otk))
        return NULL;
    EVP_MAC_CTX *c = EVP_MAC_CTX_new(poly1305);
    if (c && !EVP_MAC_init(c, otk, sizeof otk, NULL)) {
        EVP_MAC_CTX_free(c);
        c = NULL;
    }
    OPENSSL_cleanse(otk, sizeof otk);
    return c;
}

static int poly_final(EVP_MAC_CTX *c, uint8_t tag[16])
{
    size_t len = 0;
    int ok = EVP_MAC_final(c, tag, &len, 16) && len == 16;
    EVP_MAC_CTX_free(c);
    return ok ? 0 : -EIO;
}

/* ---- values ---------------------------------------------------------------------------- */

size_t bfs_remote_hdr_len(const bfs_remote_auth *a)
{
    return a && a->on ? BFS_REMOTE_HDR_AUTH : BFS_REMOTE_HDR;
}

int bfs_remote_value_header(uint8_t *hdr, const bfs_remote_auth *a, uint64_t fp, uint64_t epoch,
                            uint64_t k, const uint8_t *data, uint64_t size)
{
    int keyed = a && a->on;
    memcpy(hdr, keyed ? AUTH_MAGIC : PLAIN_MAGIC, 8);
    bfs_st64(hdr + 8, fp);
    bfs_st64(hdr + 16, epoch);
    bfs_st64(hdr + 24, k);
    bfs_st64(hdr + 32, size);
    if (!keyed) {
        bfs_st64(hdr + 40, bfs_xxh64(data, size, fp));
        return BFS_REMOTE_HDR;
    }
    memcpy(hdr + 40, a->id, 8);
    if (RAND_bytes(hdr + 48, 16) != 1)
        return -EIO;
    EVP_MAC_CTX *c = poly_for(a, hdr);
    if (!c || !EVP_MAC_update(c, data, size)) {
        EVP_MAC_CTX_free(c);
        return -EIO;
    }
    return poly_final(c, hdr + 64) ? -EIO : BFS_REMOTE_HDR_AUTH;
}

int bfs_remote_check_begin(bfs_remote_check *c, const bfs_remote_auth *a, const uint8_t *hdr,
                           size_t hdrlen, uint64_t fp, uint64_t epoch, uint64_t k, uint64_t size)
{
    memset(c, 0, sizeof *c);
    int keyed = a && a->on;
    if (hdrlen >= 8 && !memcmp(hdr, keyed ? PLAIN_MAGIC : AUTH_MAGIC, 8))
        return BFS_E_REMOTE_AUTH; /* the other kind: a key on one side only */
    if (hdrlen != bfs_remote_hdr_len(a) || memcmp(hdr, keyed ? AUTH_MAGIC : PLAIN_MAGIC, 8) ||
        bfs_ld64(hdr + 8) != fp || bfs_ld64(hdr + 16) != epoch || bfs_ld64(hdr + 24) != k ||
        bfs_ld64(hdr + 32) != size)
        return BFS_E_REMOTE_VALUE;
    if (!keyed) {
        c->sum = bfs_ld64(hdr + 40);
        bfs_xxh64_init(&c->h, fp);
        return 0;
    }
    if (memcmp(hdr + 40, a->id, 8))
        return BFS_E_REMOTE_AUTH; /* another key's */
    memcpy(c->tag, hdr + 64, 16);
    if (!(c->mac = poly_for(a, hdr)))
        return -ENOMEM;
    c->keyed = 1;
    return 0;
}

void bfs_remote_check_update(bfs_remote_check *c, const uint8_t *p, size_t n)
{
    if (c->keyed) {
        if (c->mac && !EVP_MAC_update(c->mac, p, n)) {
            EVP_MAC_CTX_free(c->mac);
            c->mac = NULL; /* (then it fails at the end) */
            c->broken = 1;
        }
    } else {
        bfs_xxh64_update(&c->h, p, n);
    }
}

int bfs_remote_check_end(bfs_remote_check *c)
{
    if (!c->keyed)
        return bfs_xxh64_digest(&c->h) == c->sum ? 0 : BFS_E_REMOTE_VALUE;
    uint8_t tag[16];
    int rc = c->broken || !c->mac ? -EIO : poly_final(c->mac, tag);
    c->mac = NULL;
    if (rc)
        return rc;
    return CRYPTO_memcmp(tag, c->tag, 16) ? BFS_E_REMOTE_AUTH : 0;
}

void bfs_remote_check_abort(bfs_remote_check *c)
{
    if (c && c->mac)
        EVP_MAC_CTX_free(c->mac);
    if (c)
        c->mac = NULL;
}

int bfs_remote_value_check(const uint8_t *v, size_t len, const bfs_remote_auth *a, uint64_t fp,
                           uint64_t epoch, uint64_t k, uint64_t size, const uint8_t **payload)
{
    size_t hl = len >= size ? len - size : 0;
    if (len < size || (hl != BFS_REMOTE_HDR && hl != BFS_REMOTE_HDR_AUTH))
        return BFS_E_REMOTE_VALUE;
    bfs_remote_check c;
    int rc = bfs_remote_check_begin(&c, a, v, hl, fp, epoch, k, size);
    if (rc)
        return rc;
    bfs_remote_check_update(&c, v + hl, size);
    if ((rc = bfs_remote_check_end(&c)))
        return rc;
    *payload = v + hl;
    return 0;
}
