/*
 * passthrough.c — FUSE passthrough (Linux >= 6.9, CONFIG_FUSE_PASSTHROUGH, CAP_SYS_ADMIN;
 * passthrough=auto): libfuse 3.14 predates it, so batchfs talks to /dev/fuse through
 * libfuse's custom I/O hooks: fsp_io_read notes whether the kernel's INIT offers
 * FUSE_PASSTHROUGH, fsp_io_writev sets it (and max_stack_depth 1) in libfuse's INIT reply
 * and the backing id in open replies. The kernel allows one backing file per inode at a
 * time, so one backing id per batch is shared by its open files (fsstate.backings) and
 * closed with the last of them (fs.c's header comment has the whole story).
 */
#include "fs/fs_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/fuse.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* FUSE passthrough ABI (Linux 6.9 uapi; Debian 12's <linux/fuse.h> predates it) */
#define PT_INIT_EXT       (1u << 30) /* FUSE_INIT_EXT: flags2 is valid */
#define PT_FLAGS2_BIT     (1u << 5)  /* FUSE_PASSTHROUGH = 1ULL << 37, in flags2 */
#define PT_FOPEN          (1u << 7)  /* FOPEN_PASSTHROUGH */
#define PT_INIT_FLAGS     12         /* offsetof(struct fuse_init_out, flags) */
#define PT_INIT_FLAGS2    32         /* offsetof(struct fuse_init_out, flags2) */
#define PT_INIT_DEPTH     36         /* offsetof(struct fuse_init_out, max_stack_depth) */
#define PT_INIT_IN_FLAGS2 16         /* offsetof(struct fuse_init_in, flags2) */
struct pt_backing_map {
    int32_t fd;
    uint32_t flags;
    uint64_t padding;
};
#define PT_IOC_BACKING_OPEN  _IOW(229, 1, struct pt_backing_map)
#define PT_IOC_BACKING_CLOSE _IOW(229, 2, uint32_t)
struct pt_open_out { /* struct fuse_open_out with the 6.9 field names */
    uint64_t fh;
    uint32_t open_flags;
    int32_t backing_id;
};

/* ---- passthrough --------------------------------------------------------------------- */

/* Request threads answering an open in passthrough mode: the open reply to patch. */
static __thread struct {
    uint64_t fh;
    int id;
} tl_open;

/* libfuse's read of a request: note what the kernel's INIT offers. */
ssize_t fsp_io_read(int fd, void *buf, size_t len, void *userdata)
{
    fsstate *fs = userdata;
    ssize_t n = read(fd, buf, len);
    if (n < 0 && errno == ECONNABORTED) {
        /* The kernel ended the connection: an unmount (lazy or not: this kernel marks the
         * connection aborted when the last open file of a lazily unmounted mount closes)
         * or an abort through /sys/fs/fuse/connections. libfuse 3.14 takes only ENODEV as
         * that end and would print "reading device" and exit 1 on ECONNABORTED. */
        errno = ENODEV;
        return -1;
    }
    const struct fuse_in_header *h = buf;
    if (n >= (ssize_t)sizeof *h && h->opcode == FUSE_INIT) {
        __atomic_store_n(&fs->init_unique, h->unique, __ATOMIC_RELAXED);
        __atomic_store_n(&fs->init_seen, 1, __ATOMIC_RELEASE);
        if (n >= (ssize_t)(sizeof *h + PT_INIT_IN_FLAGS2 + 4)) {
            const uint8_t *in = (const uint8_t *)(h + 1);
            uint32_t flags, flags2;
            memcpy(&flags, in + 12, 4); /* offsetof(struct fuse_init_in, flags) */
            memcpy(&flags2, in + PT_INIT_IN_FLAGS2, 4);
            atomic_store(&fs->pt_offered, (flags & PT_INIT_EXT) && (flags2 & PT_FLAGS2_BIT));
        }
    }
    return n;
}

/* libfuse's write of a reply: enable passthrough in the INIT reply, set the backing id
 * of an open reply (tl_open, set by op_open on this thread: fsp_open_reply). */
ssize_t fsp_io_writev(int fd, struct iovec *iov, int count, void *userdata)
{
    fsstate *fs = userdata;
    const struct fuse_out_header *init_reply =
        count >= 1 && iov[0].iov_len >= sizeof(struct fuse_out_header) &&
                __atomic_load_n(&fs->init_seen, __ATOMIC_ACQUIRE) &&
                ((const struct fuse_out_header *)iov[0].iov_base)->unique ==
                    __atomic_load_n(&fs->init_unique, __ATOMIC_RELAXED)
            ? iov[0].iov_base
            : NULL;
    if (count >= 2 && iov[0].iov_len >= sizeof(struct fuse_out_header)) {
        const struct fuse_out_header *oh = iov[0].iov_base;
        uint8_t *out = iov[1].iov_base;
        if (init_reply && oh->error == 0 && atomic_load(&fs->pt_active) &&
            iov[1].iov_len >= PT_INIT_DEPTH + 4) {
            uint32_t flags, flags2, depth = 1; /* backing files on a plain fs: depth 1 */
            memcpy(&flags, out + PT_INIT_FLAGS, 4);
            memcpy(&flags2, out + PT_INIT_FLAGS2, 4);
            flags |= PT_INIT_EXT, flags2 |= PT_FLAGS2_BIT;
            memcpy(out + PT_INIT_FLAGS, &flags, 4);
            memcpy(out + PT_INIT_FLAGS2, &flags2, 4);
            memcpy(out + PT_INIT_DEPTH, &depth, 4);
        } else if (tl_open.id > 0 && oh->error == 0 &&
                   iov[1].iov_len == sizeof(struct pt_open_out)) {
            struct pt_open_out o;
            memcpy(&o, out, sizeof o);
            if (o.fh == tl_open.fh) {
                o.open_flags |= PT_FOPEN;
                o.backing_id = tl_open.id;
                memcpy(out, &o, sizeof o);
            }
        }
    }
    ssize_t n = writev(fd, iov, count);
    if (init_reply)
        fsb_started(n >= 0 && init_reply->error == 0);
    return n;
}

/* The backing id for an open of batch (epoch, k) whose file is fd: the one its open
 * files share, or a new one (0: open it in copying mode). Counts the open. */
int fsp_backing_acquire(fsstate *fs, uint64_t epoch, uint64_t k, int fd)
{
    pthread_mutex_lock(&fs->lock);
    backing *b = fs->backings;
    while (b && !(b->epoch == epoch && b->k == k))
        b = b->next;
    if (!b && (b = calloc(1, sizeof *b))) {
        b->epoch = epoch, b->k = k;
        if (fd >= 0 && atomic_load(&fs->pt_active)) {
            struct pt_backing_map map = {.fd = fd};
            b->id = ioctl(fuse_session_fd(fs->se), PT_IOC_BACKING_OPEN, &map);
            if (b->id < 0) {
                int e = errno;
                b->id = 0;
                if (e == EPERM || e == EINVAL || e == ENOTTY || e == EOPNOTSUPP) {
                    /* not allowed here (no CAP_SYS_ADMIN in the initial user namespace):
                     * stop trying; batches are copied from now on */
                    atomic_store(&fs->pt_active, 0);
                    atomic_store(&fs->pool_on, 0); /* (its /.pool would fail the same way) */
                    bfs_service_batch_files(fs->svc, 0);
                    fprintf(stderr,
                            "batchfs: FUSE passthrough refused by the kernel (%s): batch "
                            "files are served by copying (run as root for passthrough)\n",
                            strerror(e));
                }
            }
        }
        b->next = fs->backings;
        fs->backings = b;
    }
    int id = -1;
    if (b) {
        b->opens++;
        id = b->id;
    }
    pthread_mutex_unlock(&fs->lock);
    return id;
}

void fsp_backing_release(fsstate *fs, uint64_t epoch, uint64_t k)
{
    pthread_mutex_lock(&fs->lock);
    for (backing **p = &fs->backings; *p; p = &(*p)->next) {
        backing *b = *p;
        if (b->epoch != epoch || b->k != k)
            continue;
        if (--b->opens == 0) {
            if (b->id > 0) {
                uint32_t id = (uint32_t)b->id;
                ioctl(fuse_session_fd(fs->se), PT_IOC_BACKING_CLOSE, &id);
            }
            *p = b->next;
            free(b);
        }
        break;
    }
    pthread_mutex_unlock(&fs->lock);
}

/* Does this process have CAP_SYS_ADMIN (which FUSE_DEV_IOC_BACKING_OPEN requires)? */
int fsp_has_sys_admin(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long caps = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "CapEff: %llx", &caps) == 1)
            break;
    if (f)
        fclose(f);
    return (caps >> 21) & 1; /* CAP_SYS_ADMIN */
}

void fsp_open_reply(uint64_t fh, int id)
{
    tl_open.fh = fh, tl_open.id = id;
}
