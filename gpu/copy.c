/*
 * copy.c — libbatchfs-gpu's copy paths (loader_internal.h): how a batch file's bytes reach
 * the caller. On the host a read into the slot's buffer (and the host conversion); on a
 * device one of: pinned staging (the file read by up to `readers` threads into a pinned
 * buffer, then copied), a read-only registration of the file's mapping per batch, or the
 * window of the mount's pool file registered once (pool.c; the open batch file is the
 * lease on its window until the copy's event). Which one: bfsgi_choose_copy at open,
 * and for copy=auto the first batch's timings (bfsgi_calibrate).
 *
 * Split from loader.c, which keeps the batch sequence, the ring of slots and its thread:
 * that file had grown past 1,100 lines with the pool path.
 */
#include "gpu/loader_internal.h"
#include "base/clock.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* release what copy=register left pinned: after the copies from it finished */
void bfsgi_slot_unmap(slot *s)
{
    if (s->lease_fd >= 0) { /* copy=pool: the lease ends once the copies from the window did */
        if (s->core->cuda && s->ready_recorded)
            s->core->cu.EventSynchronize(s->ready);
        close(s->lease_fd);
        s->lease_fd = -1;
    }
    if (!s->map)
        return;
    if (s->core->cuda) {
        bfsg_cuda *cu = &s->core->cu;
        if (s->ready_recorded)
            cu->EventSynchronize(s->ready);
        cu->MemHostUnregister(s->map);
    }
    munmap(s->map, s->map_len);
    s->map = NULL;
}

int bfsgi_choose_copy(bfsg_loader *l)
{
    core *c = l->core;
    if (!c->cuda) { /* pread: mapping a 9.6 MB batch cost more than copying it (docs/gpu.md) */
        l->copy = COPY_READ;
        return 0;
    }
    int ro = 0;
    c->cu.DeviceGetAttribute(&ro, BFSG_CU_ATTR_READ_ONLY_REGISTER, c->dev);
    int can_register = ro && l->immutable;
    /* the mount's pool file, registered once: no host copy and no registration per batch
     * (auto takes it whenever the mount offers one and it can be registered read-only;
     * when not, auto stages and bfsg_get_stats says why in `fallback`) */
    if (l->copy_req == COPY_POOL || (l->copy_req == COPY_AUTO && bfsgi_pool_offered(l->root))) {
        char why[600] = "";
        int rc = -EINVAL;
        if (!ro)
            snprintf(why, sizeof why,
                     "the device does not support read-only host "
                     "registration (attribute 113)");
        else if (!l->immutable)
            snprintf(why, sizeof why, "only for a batchfs mount (its /.pool)");
        else {
            ctx_push(c);
            rc = bfsgi_pool_open(&c->pool, l->root, &c->cu, why, sizeof why);
            ctx_pop(c);
        }
        if (!rc) {
            l->copy = COPY_POOL;
            return 0;
        }
        if (l->copy_req == COPY_POOL)
            return seterr(l, rc, "copy=pool: %s", why);
        snprintf(l->st.fallback, sizeof l->st.fallback,
                 "copy=auto: the mount's pool file not used: %.200s", why);
    }
    if (l->copy_req == COPY_REGISTER && !can_register)
        return seterr(l, -EINVAL, "copy=register: %s",
                      !ro ? "the device does not support read-only host "
                            "registration (attribute 113)"
                          : "only for a batchfs mount, whose files cannot "
                            "shrink while mapped; use copy=staging");
    l->copy = l->copy_req == COPY_AUTO ? (can_register ? COPY_AUTO : COPY_STAGING) : l->copy_req;
    return 0;
}

/* One share of a staged batch read by a helper thread. */
typedef struct read_part {
    int fd;
    uint8_t *dst;
    size_t len;
    uint64_t off;
    int err; /* errno, or -1: the file ended early */
    size_t done;
} read_part;

static void *read_part_main(void *arg)
{
    read_part *p = arg;
    while (p->done < p->len) {
        ssize_t n = pread(p->fd, p->dst + p->done, p->len - p->done, (off_t)(p->off + p->done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            p->err = n < 0 ? errno : -1;
            break;
        }
        p->done += (size_t)n;
    }
    return NULL;
}

/* p's outcome: 0, or its error with the message naming the file and byte; end is where
 * the whole read should have ended. */
static int part_error(slot *s, const read_part *p, uint64_t end)
{
    if (p->err > 0)
        return slot_errf(s, -p->err, "%s: read at byte %" PRIu64 ": %s", s->path, p->off + p->done,
                         strerror(p->err));
    if (p->err < 0)
        return slot_errf(s, -EIO,
                         "%s: file ends at byte %" PRIu64 ", its header says %" PRIu64
                         " (truncated while read?)",
                         s->path, p->off + p->done, end);
    return 0;
}

int bfsgi_pread_full(slot *s, int fd, void *dst, size_t len, uint64_t off)
{
    read_part p = {fd, dst, len, off, 0, 0};
    read_part_main(&p);
    return part_error(s, &p, off + len);
}

/* ---- filling a slot ------------------------------------------------------------------ */

static int slot_cuda(slot *s, CUresult r, const char *what)
{
    if (r == BFSG_CUDA_SUCCESS)
        return 0;
    return bfsgi_cuda_errf(&s->core->cu, r, s->err, sizeof s->err, what);
}

/* a host buffer of at least need bytes, HOST_ALIGN-aligned (its contents are not kept) */
static int grow(slot *s, uint8_t **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    free(*buf);
    *cap = 0;
    if (!(*buf = aligned_alloc(HOST_ALIGN, round_up(need, HOST_ALIGN))))
        return slot_errf(s, -ENOMEM, "%s: no memory for %zu bytes", s->path, need);
    *cap = round_up(need, HOST_ALIGN);
    return 0;
}

int bfsgi_fill_host(bfsg_loader *l, slot *s, int fd, const file_plan *fp)
{
    size_t need = (size_t)(fp->size - fp->lo);
    int rc = grow(s, &s->host, &s->host_cap, need);
    if (rc || (rc = bfsgi_pread_full(s, fd, s->host, need, fp->lo)))
        return rc;
    const uint8_t *base = s->host; /* where file offset fp->lo is */
    uint8_t *at[BFSG_MAX_TENSORS];
    for (uint32_t i = 0; i < fp->n; i++)
        at[i] = (uint8_t *)base + (fp->t[i]->offset - fp->lo);
    if (l->conv.active && !fp->tokens) {
        if ((rc = grow(s, &s->conv, &s->conv_cap, (size_t)fp->out_bytes)))
            return rc;
        bfsgi_convert_host(&l->conv, at[0], fp->d.nchw, s->conv, fp->d.batch, fp->d.height,
                           fp->d.width);
        at[0] = s->conv;
    }
    bfsgi_fill_views(l, s, fp, at);
    return 0;
}

/*
 * len bytes at off into the pinned staging buffer dst, by up to l->readers threads at
 * once, each a contiguous share of at least READ_SHARE bytes (one thread's pread from
 * the page cache runs at ~4-6 GB/s on the H200 hosts measured, a tenth of what the DMA
 * engine takes: docs/gpu.md). Helpers are created per batch (tens of microseconds against
 * milliseconds of copying); the calling thread reads the first share.
 */
static int pread_staged(bfsg_loader *l, slot *s, int fd, uint8_t *dst, size_t len, uint64_t off)
{
    int k = l->readers > 0 ? l->readers : 1;
    if ((size_t)k > len / READ_SHARE)
        k = (int)(len / READ_SHARE);
    if (k <= 1)
        return bfsgi_pread_full(s, fd, dst, len, off);
    read_part part[MAX_READERS];
    pthread_t tid[MAX_READERS];
    int started[MAX_READERS] = {0};
    size_t share = round_up((len + (size_t)k - 1) / (size_t)k, 4096);
    int n = 0;
    for (size_t at = 0; at < len; at += share, n++)
        part[n] = (read_part){fd, dst + at, len - at < share ? len - at : share, off + at, 0, 0};
    for (int i = 1; i < n; i++)
        started[i] = !pthread_create(&tid[i], NULL, read_part_main, &part[i]);
    read_part_main(&part[0]);
    for (int i = 1; i < n; i++) {
        if (started[i])
            pthread_join(tid[i], NULL);
        else
            read_part_main(&part[i]); /* no thread: read it here */
    }
    for (int i = 0; i < n; i++)
        if (part[i].err)
            return part_error(s, &part[i], off + len);
    return 0;
}

int bfsgi_fill_cuda(bfsg_loader *l, slot *s, int fd, const file_plan *fp, int use_register,
                    const uint8_t *window, uint64_t *host_ns)
{
    core *c = s->core;
    bfsg_cuda *cu = &c->cu;
    int rc;
    if (!s->ready && (rc = slot_cuda(s, cu->EventCreate(&s->ready, BFSG_CU_EVENT_DISABLE_TIMING),
                                     "cuEventCreate")))
        return rc;
    if (!s->done && (rc = slot_cuda(s, cu->EventCreate(&s->done, BFSG_CU_EVENT_DISABLE_TIMING),
                                    "cuEventCreate")))
        return rc;
    /* the previous copies of this slot are done with its staging buffer and mapping */
    bfsgi_slot_unmap(s);
    if (s->ready_recorded &&
        (rc = slot_cuda(s, cu->EventSynchronize(s->ready), "cuEventSynchronize")))
        return rc;
    size_t off[BFSG_MAX_TENSORS + 1], total;
    bfsgi_dev_layout(l, fp, off, &total);
    if (total > s->dcap) { /* a larger batch than this slot held (pack=bucket): grow */
        /* the consumer may still read the old buffer: wait for the work queued on its
         * stream before the slot came back */
        if (s->done_recorded &&
            (rc = slot_cuda(s, cu->EventSynchronize(s->done), "cuEventSynchronize")))
            return rc;
        if (s->dptr)
            cu->MemFree(s->dptr);
        s->dptr = 0, s->dcap = 0;
        if ((rc = slot_cuda(s, cu->MemAlloc(&s->dptr, total), "cuMemAlloc (batch buffer)")))
            return rc;
        s->dcap = total;
    }
    uint64_t t0 = bfs_mono_ns();
    const uint8_t *src; /* where file offset fp->lo is on the host */
    if (window) {       /* copy=pool: the batch's window of the registered pool file */
        src = window + fp->lo;
    } else if (use_register) {
        size_t len = round_up((size_t)fp->size, (size_t)sysconf(_SC_PAGESIZE));
        void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED)
            return slot_errf(s, -errno, "%s: mmap: %s", s->path, strerror(errno));
        rc = slot_cuda(s, cu->MemHostRegister(m, len, BFSG_CU_MEMHOSTREGISTER_READ_ONLY),
                       "cuMemHostRegister (read-only mapping of the batch file)");
        if (rc) {
            munmap(m, len);
            return rc;
        }
        s->map = m, s->map_len = len;
        src = (const uint8_t *)m + fp->lo;
    } else {
        size_t need = (size_t)(fp->size - fp->lo);
        if (need > s->host_cap) {
            if (s->host)
                cu->MemFreeHost(s->host);
            s->host = NULL, s->host_cap = 0;
            void *p;
            size_t cap = round_up(need, HOST_ALIGN);
            if ((rc = slot_cuda(s, cu->MemHostAlloc(&p, cap, BFSG_CU_MEMHOSTALLOC_PORTABLE),
                                "cuMemHostAlloc (pinned staging)")))
                return rc;
            s->host = p, s->host_cap = cap;
        }
        if ((rc = pread_staged(l, s, fd, s->host, need, fp->lo)))
            return rc;
        src = s->host;
    }
    /* device memory: only after the consumer passed this slot's last use */
    if (s->done_recorded &&
        (rc = slot_cuda(s, cu->StreamWaitEvent(c->copy, s->done, 0), "cuStreamWaitEvent")))
        return rc;
    /* token batches: every tensor as it is; images: labels, indices, the fields, then the
     * images */
    for (uint32_t i = fp->tokens ? 0 : 1; i < fp->n; i++)
        if (fp->t[i]->nbytes &&
            (rc = slot_cuda(s,
                            cu->MemcpyHtoDAsync(s->dptr + off[i], src + (fp->t[i]->offset - fp->lo),
                                                fp->t[i]->nbytes, c->copy),
                            "cuMemcpyHtoDAsync")))
            return rc;
    int kernel =
        !fp->tokens && l->conv.active && !(l->conv.elem == 1 && fp->out_nchw == fp->d.nchw);
    if (!fp->tokens) {
        const uint8_t *img = src + (fp->t[0]->offset - fp->lo);
        rc = slot_cuda(
            s,
            cu->MemcpyHtoDAsync(s->dptr + off[kernel ? fp->n : 0], img, fp->t[0]->nbytes, c->copy),
            "cuMemcpyHtoDAsync");
    }
    if (!rc && kernel) {
        CUdeviceptr from = s->dptr + off[fp->n], to = s->dptr + off[0], lut = c->lut;
        unsigned long long pixels = (unsigned long long)fp->d.batch * fp->d.height * fp->d.width;
        unsigned plane = fp->d.height * fp->d.width, elem = (unsigned)l->conv.elem;
        unsigned src_nchw = (unsigned)fp->d.nchw, dst_nchw = (unsigned)fp->out_nchw;
        void *params[] = {&from, &to, &lut, &pixels, &plane, &elem, &src_nchw, &dst_nchw};
        unsigned long long blocks = (pixels + 255) / 256;
        if (blocks > 4096) /* grid-stride loop: enough blocks to fill any current GPU */
            blocks = 4096;
        rc = slot_cuda(
            s, cu->LaunchKernel(c->fn, (unsigned)blocks, 1, 1, 256, 1, 1, 0, c->copy, params, NULL),
            "cuLaunchKernel " BFSG_CONVERT_KERNEL);
    }
    if (!rc)
        rc = slot_cuda(s, cu->EventRecord(s->ready, c->copy), "cuEventRecord");
    if (rc)
        return rc;
    s->ready_recorded = 1;
    *host_ns = bfs_mono_ns() - t0;
    uint8_t *d = (uint8_t *)(uintptr_t)s->dptr, *at[BFSG_MAX_TENSORS];
    for (uint32_t i = 0; i < fp->n; i++)
        at[i] = d + off[i];
    bfsgi_fill_views(l, s, fp, at);
    return 0;
}

/*
 * copy=auto: the host cost per MB of each path on the batch just staged, whose pages are
 * now warm (timing the first delivery of each would include the daemon computing it): a
 * pread of its bytes into the pinned buffer again, against mapping the file, registering
 * the mapping read-only, unregistering and unmapping it. Both timings go to the stats,
 * and staging is kept whatever they say: on an H200 registration was 2-2.5x cheaper per
 * MB alone, but registering and unregistering every batch kept its copies from
 * overlapping the consumer's kernels (docs/gpu.md, "On a GPU"), and a training loop
 * always has kernels running.
 */
void bfsgi_calibrate(bfsg_loader *l, slot *s, int fd, const file_plan *fp)
{
    bfsg_cuda *cu = &s->core->cu;
    size_t need = (size_t)(fp->size - fp->lo);
    uint64_t mb = (need + (1u << 20) - 1) >> 20, stage = 0, reg = 0;
    if (cu->EventSynchronize(s->ready) == BFSG_CUDA_SUCCESS) { /* the staging buffer is free */
        uint64_t t0 = bfs_mono_ns();
        if (!pread_staged(l, s, fd, s->host, need, fp->lo))
            stage = (bfs_mono_ns() - t0) / (mb ? mb : 1) + 1;
    }
    size_t len = round_up((size_t)fp->size, (size_t)sysconf(_SC_PAGESIZE));
    uint64_t t0 = bfs_mono_ns();
    void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    if (m != MAP_FAILED) {
        if (cu->MemHostRegister(m, len, BFSG_CU_MEMHOSTREGISTER_READ_ONLY) == BFSG_CUDA_SUCCESS &&
            cu->MemHostUnregister(m) == BFSG_CUDA_SUCCESS)
            reg = (bfs_mono_ns() - t0) / (mb ? mb : 1) + 1;
        munmap(m, len);
    }
    s->err[0] = 0;
    pthread_mutex_lock(&l->lock);
    l->st.staging_ns_per_mb = stage, l->st.register_ns_per_mb = reg;
    l->copy = COPY_STAGING;
    pthread_mutex_unlock(&l->lock);
}
