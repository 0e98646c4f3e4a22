/*
 * loader.c — libbatchfs-gpu's loader (batchfs_gpu.h): the batch sequence of a rank and a
 * ring of slots filled ahead by one background thread.
 *
 * Neighbours: copy.c holds the copy paths (host read, pinned staging, registered mapping,
 * the mount's registered pool file) with the device conversion; schema.c checks and plans
 * each batch file (with the engine's strict parser and batch schema, engine/api.h) and
 * makes the tensor views (loader_internal.h holds what the three share); pool.c maps and registers
 * a mount's pool file (copy=pool); cuda.c loads the driver; convert.c builds the conversion table
 * and converts on the host; convert.ptx is the device kernel. Nothing here includes FUSE or CUDA
 * headers.
 *
 * Design:
 * - Position p of the sequence is (epoch_begin + p / per_rank, rank + world * (p %
 *   per_rank)). Slot ring[p % depth] holds position p; the producer fills positions
 *   [next_pos, next_pos + depth) as their slots come free, the consumer (bfsg_next)
 *   takes them in order. A seek bumps `gen`: work of an older generation is dropped.
 * - A slot goes FREE -> FILLING (producer, without the lock) -> READY -> OUT (handed to
 *   the caller) -> FREE at the next bfsg_next. A slot the caller retained is detached
 *   instead: a new slot takes its place in the ring and the last release frees it.
 * - Device memory of a slot is overwritten only after the consumer stream passed the
 *   slot's `done` event (recorded when the slot came back), and its pinned staging
 *   buffer only after its previous copies finished (its `ready` event).
 * - A detached slot's last release puts it on the core's spare list (its `done` event
 *   recorded on the consumer stream, as for a slot back in the ring), and the next
 *   detach takes it from there; once the loader is destroyed, it is freed instead.
 * - The shared part (driver table, context, stream, kernel) is the refcounted `core`:
 *   retained batches keep it alive after bfsg_destroy.
 * - A slot's buffers (host, pinned staging, device) are sized by each batch it is filled
 *   with and grow when a larger one comes (token batches of pack=bucket differ in size
 *   and shape); they never shrink. A device buffer is freed for a larger one only after
 *   the consumer stream passed the slot's `done` event.
 * - Image batches (images, labels, indices; dtype=/layout= conversion of images; then
 *   the field tensors of a multi-field dataset, delivered as they are) and token batches
 *   (metadata kind "tokens": 1..BFSG_MAX_TENSORS integer tensors, delivered as they are,
 *   in data order) share the copy paths: a file_plan lists the tensors to copy.
 */
#include "gpu/loader_internal.h"
#include "gpu/dlpack.h"
#include "base/err.h"
#include "engine/api.h"
#include "base/clock.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

/* ---- core ------------------------------------------------------------------------ */

/* give back everything cuda_open took: the stream, kernel, table, context, library */
static void core_cuda_close(core *c)
{
    if (!c->cuda)
        return;
    bfsg_cuda *cu = &c->cu;
    CUcontext prev;
    cu->CtxPushCurrent(c->ctx);
    bfsgi_pool_close(&c->pool, cu); /* (every slot is gone: no copy reads it) */
    if (c->copy)
        cu->StreamDestroy(c->copy);
    if (c->lut)
        cu->MemFree(c->lut);
    if (c->mod)
        cu->ModuleUnload(c->mod);
    cu->CtxPopCurrent(&prev);
    cu->DevicePrimaryCtxRelease(c->dev);
    bfsgi_cuda_unload(cu);
    c->cuda = 0, c->copy = NULL, c->lut = 0, c->mod = NULL, c->fn = NULL;
}

static void core_unref(core *c)
{
    if (!c || atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    core_cuda_close(c);
    pthread_mutex_destroy(&c->spare_lock);
    free(c);
}

/* ---- slots ------------------------------------------------------------------------- */

static slot *slot_new(core *c)
{
    pthread_mutex_lock(&c->spare_lock);
    slot *s = c->n_spare ? c->spare[--c->n_spare] : NULL;
    pthread_mutex_unlock(&c->spare_lock);
    if (s)
        return s; /* already counted in c->refs */
    s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->core = c;
    s->lease_fd = -1;
    atomic_fetch_add(&c->refs, 1);
    return s;
}

static void slot_destroy(slot *s)
{
    if (!s)
        return;
    core *c = s->core;
    ctx_push(c); /* no-op on the host */
    bfsgi_slot_unmap(s);
    if (c->cuda) {
        bfsg_cuda *cu = &c->cu;
        if (s->ready_recorded)
            cu->EventSynchronize(s->ready);
        if (s->host)
            cu->MemFreeHost(s->host);
        if (s->dptr)
            cu->MemFree(s->dptr); /* synchronizes with work still reading it */
        if (s->ready)
            cu->EventDestroy(s->ready);
        if (s->done)
            cu->EventDestroy(s->done);
    } else {
        free(s->host);
    }
    ctx_pop(c);
    free(s->conv);
    free(s);
    core_unref(c);
}

/* a slot that came back from the caller: its device memory may be overwritten once the
 * consumer stream passed what was queued on it until now */
static void slot_mark_done(slot *s)
{
    core *c = s->core;
    if (c->cuda && s->ready_recorded) {
        ctx_push(c);
        c->cu.EventRecord(s->done, c->consumer);
        ctx_pop(c);
        s->done_recorded = 1;
    }
}

/* the last release of a detached slot: to the spare list while the loader lives */
static void slot_recycle(slot *s)
{
    core *c = s->core;
    pthread_mutex_lock(&c->spare_lock);
    if (!c->closed && c->n_spare < MAX_DEPTH) {
        slot_mark_done(s);
        atomic_store(&s->detached, 0);
        s->state = SLOT_FREE;
        c->spare[c->n_spare++] = s;
        s = NULL;
    }
    pthread_mutex_unlock(&c->spare_lock);
    slot_destroy(s);
}

/* ---- parameters -------------------------------------------------------------------- */

int bfsg_create(int api_version, bfsg_loader **out)
{
    if (!out)
        return -EINVAL;
    *out = NULL;
    if (api_version != BFSG_API_VERSION)
        return -EPROTO;
    bfsg_loader *l = calloc(1, sizeof *l);
    core *c = calloc(1, sizeof *c);
    if (!l || !c) {
        free(l);
        free(c);
        return -ENOMEM;
    }
    atomic_init(&c->refs, 1);
    pthread_mutex_init(&c->spare_lock, NULL);
    l->core = c;
    snprintf(l->device, sizeof l->device, "auto");
    l->copy_req = COPY_AUTO;
    l->world = 1;
    l->depth = 0; /* the device's default, chosen at bfsg_open */
    pthread_mutex_init(&l->lock, NULL);
    pthread_cond_init(&l->cond, NULL);
    *out = l;
    return 0;
}

const char *bfsg_error(const bfsg_loader *l)
{
    return l ? l->err : "no loader";
}

static int copy_text(bfsg_loader *l, char *dst, size_t cap, const char *name, const char *value)
{
    if (strlen(value) >= cap)
        return seterr(l, -EINVAL, "%s=%s: too long (at most %zu bytes)", name, value, cap - 1);
    memcpy(dst, value, strlen(value) + 1);
    return 0;
}

int bfsg_set(bfsg_loader *l, const char *name, const char *value)
{
    if (!l || !name || !value)
        return l ? seterr(l, -EINVAL, "bfsg_set: NULL name or value") : -EINVAL;
    if (l->open)
        return seterr(l, -EBUSY, "%s: parameters are set before bfsg_open", name);
    l->err[0] = 0;
    uint64_t v;
    if (!strcmp(name, "device")) {
        uint64_t n;
        if (strcmp(value, "auto") && strcmp(value, "cpu") && strcmp(value, "cuda") &&
            (strncmp(value, "cuda:", 5) || bfsgi_parse_u64(value + 5, &n) || n > 1024))
            return seterr(l, -EINVAL, "device=%s: expected auto, cpu, cuda or cuda:N", value);
        return copy_text(l, l->device, sizeof l->device, name, value);
    }
    if (!strcmp(name, "cuda_library"))
        return copy_text(l, l->cuda_library, sizeof l->cuda_library, name, value);
    if (!strcmp(name, "epoch_begin") || !strcmp(name, "epoch_end") || !strcmp(name, "rank") ||
        !strcmp(name, "world") || !strcmp(name, "depth") || !strcmp(name, "readers")) {
        if (bfsgi_parse_u64(value, &v))
            return seterr(l, -EINVAL, "%s=%s: expected a non-negative integer", name, value);
        if (!strcmp(name, "epoch_begin"))
            l->epoch_begin = v;
        else if (!strcmp(name, "epoch_end"))
            l->epoch_end = v, l->epoch_end_set = 1;
        else if (!strcmp(name, "rank"))
            l->rank = v;
        else if (!strcmp(name, "world")) {
            if (v == 0)
                return seterr(l, -EINVAL, "world=0: expected at least 1");
            l->world = v;
        } else if (!strcmp(name, "readers")) {
            if (v < 1 || v > MAX_READERS)
                return seterr(l, -EINVAL, "readers=%s: expected 1..%d", value, MAX_READERS);
            l->readers = (int)v;
        } else {
            if (v < 1 || v > MAX_DEPTH)
                return seterr(l, -EINVAL, "depth=%s: expected 1..%d", value, MAX_DEPTH);
            l->depth = (int)v;
        }
        return 0;
    }
    if (!strcmp(name, "copy")) {
        if (!strcmp(value, "auto"))
            l->copy_req = COPY_AUTO;
        else if (!strcmp(value, "staging"))
            l->copy_req = COPY_STAGING;
        else if (!strcmp(value, "register"))
            l->copy_req = COPY_REGISTER;
        else if (!strcmp(value, "pool"))
            l->copy_req = COPY_POOL;
        else
            return seterr(l, -EINVAL, "copy=%s: expected auto, pool, staging or register", value);
        return 0;
    }
    if (!strcmp(name, "dtype"))
        return copy_text(l, l->dtype, sizeof l->dtype, name, value);
    if (!strcmp(name, "normalize"))
        return copy_text(l, l->normalize, sizeof l->normalize, name, value);
    if (!strcmp(name, "layout"))
        return copy_text(l, l->layout, sizeof l->layout, name, value);
    return seterr(l, -EINVAL,
                  "unknown parameter '%s' (known: device, cuda_library, epoch_begin, epoch_end, "
                  "rank, world, depth, readers, copy, dtype, normalize, layout)",
                  name);
}

int bfsg_set_stream(bfsg_loader *l, void *cuda_stream)
{
    if (!l)
        return -EINVAL;
    if (l->open)
        return seterr(l, -EBUSY, "the consumer stream is set before bfsg_open");
    l->consumer = cuda_stream;
    return 0;
}

/* ---- listing ----------------------------------------------------------------------- */

/* count the entries of dir named prefix<decimal>, which must be 0..n-1 */
static int count_entries(bfsg_loader *l, const char *dir, const char *prefix, uint64_t *n)
{
    DIR *d = opendir(dir);
    if (!d) {
        int e = errno;
        return seterr(l, -e, "%s: %s", dir, strerror(e));
    }
    size_t plen = strlen(prefix);
    uint64_t count = 0, max = 0;
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d))) {
        const char *nm = de->d_name;
        if (nm[0] == '.')
            continue;
        uint64_t v;
        if (strncmp(nm, prefix, plen) || bfsgi_parse_u64(nm + plen, &v) ||
            (nm[plen] == '0' && nm[plen + 1])) {
            rc = seterr(l, -EBADMSG, "%s/%s: not a %sN entry of a batchfs mount", dir, nm, prefix);
            break;
        }
        count++;
        if (v > max)
            max = v;
    }
    closedir(d);
    if (rc)
        return rc;
    if (count && max + 1 != count)
        return seterr(l, -EBADMSG,
                      "%s: %" PRIu64 " entries but the highest is %s%" PRIu64 " (some are missing)",
                      dir, count, prefix, max);
    *n = count;
    return 0;
}

/* ---- device set-up ----------------------------------------------------------------- */

static int cuda_check(bfsg_loader *l, CUresult rc, const char *what)
{
    if (rc == BFSG_CUDA_SUCCESS)
        return 0;
    return bfsgi_cuda_errf(&l->core->cu, rc, l->err, sizeof l->err, what);
}

/* open the driver and device; -ENODEV (with the reason in l->err) when there is none */
static int cuda_open(bfsg_loader *l, int ordinal)
{
    core *c = l->core;
    bfsg_cuda *cu = &c->cu;
    int rc = bfsgi_cuda_load(cu, l->cuda_library, l->err, sizeof l->err);
    if (rc)
        return -ENODEV;
    int count = 0;
    if (cu->DeviceGetCount(&count) != BFSG_CUDA_SUCCESS || count <= ordinal) {
        seterr(l, -ENODEV, "no CUDA device %d (the driver reports %d)", ordinal, count);
        bfsgi_cuda_unload(cu);
        return -ENODEV;
    }
    if ((rc = cuda_check(l, cu->DeviceGet(&c->dev, ordinal), "cuDeviceGet")) ||
        (rc = cuda_check(l, cu->DevicePrimaryCtxRetain(&c->ctx, c->dev),
                         "cuDevicePrimaryCtxRetain"))) {
        bfsgi_cuda_unload(cu);
        return rc;
    }
    c->cuda = 1; /* from here core_unref releases the context and the library */
    c->dev_id = ordinal;
    char name[64] = "";
    cu->DeviceGetName(name, sizeof name, c->dev);
    snprintf(l->st.device, sizeof l->st.device, "cuda:%d %s", ordinal, name);
    ctx_push(c);
    rc = cuda_check(l, cu->StreamCreate(&c->copy, BFSG_CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    if (!rc && l->conv.active) {
        /* the kernel and its table: JIT of PTX 6.0 by the driver */
        size_t lut_bytes = 3 * 256 * (size_t)l->conv.elem;
        rc = cuda_check(l, cu->ModuleLoadData(&c->mod, bfsgi_convert_ptx),
                        "cuModuleLoadData (the conversion kernel)");
        if (!rc)
            rc = cuda_check(l, cu->ModuleGetFunction(&c->fn, c->mod, BFSG_CONVERT_KERNEL),
                            "cuModuleGetFunction " BFSG_CONVERT_KERNEL);
        if (!rc)
            rc = cuda_check(l, cu->MemAlloc(&c->lut, lut_bytes), "cuMemAlloc (conversion table)");
        if (!rc)
            rc = cuda_check(l, cu->MemcpyHtoDAsync(c->lut, l->conv.lut, lut_bytes, c->copy),
                            "cuMemcpyHtoDAsync (conversion table)");
        if (!rc)
            rc = cuda_check(l, cu->StreamSynchronize(c->copy), "cuStreamSynchronize");
    }
    ctx_pop(c);
    if (rc) /* device=auto then falls back to the host: nothing of CUDA may stay */
        core_cuda_close(c);
    return rc;
}

static int choose_device(bfsg_loader *l)
{
    int want_cuda = strcmp(l->device, "cpu") != 0;
    int required = !strncmp(l->device, "cuda", 4);
    int ordinal = !strncmp(l->device, "cuda:", 5) ? atoi(l->device + 5) : 0;
    if (l->core->cuda) /* a bfsg_open that failed after this step, retried */
        return 0;
    snprintf(l->st.device, sizeof l->st.device, "cpu");
    if (want_cuda) {
        int rc = cuda_open(l, ordinal);
        if (rc == 0)
            return 0;
        if (required)
            return rc; /* l->err says why */
        /* auto: the host path, and the reason kept for bfsg_get_stats */
        snprintf(l->st.fallback, sizeof l->st.fallback, "%.255s", l->err);
        snprintf(l->st.device, sizeof l->st.device, "cpu");
        l->err[0] = 0;
    }
    return 0;
}

/* fill slot s with (epoch, k); the result in s->rc and s->err */
static void fill(bfsg_loader *l, slot *s, uint64_t epoch, uint64_t k)
{
    s->err[0] = 0;
    /* the root is shorter than PATH_MAX - 64 (bfsg_open): this fits */
    if (snprintf(s->path, sizeof s->path, "%s/epoch/%" PRIu64 "/batch_%" PRIu64, l->root, epoch,
                 k) >= (int)sizeof s->path)
        s->path[0] = 0;
    bfsg_batch *b = &s->pub;
    b->epoch = epoch, b->index = k, b->path = s->path, b->n_tensors = 0;
    b->device_type = s->core->cuda ? BFSG_DEVICE_CUDA : BFSG_DEVICE_CPU;
    b->device_id = s->core->cuda ? s->core->dev_id : 0;
    b->ready_event = NULL;
    int fd = open(s->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        s->rc = slot_errf(s, -e, "%s: %s", s->path, strerror(e));
        return;
    }
    file_plan fp;
    int mode = l->copy; /* what this batch took */
    int rc = bfsgi_plan_file(l, s, fd, epoch, k, &fp);
    if (!rc && s->core->cuda) {
        ctx_push(s->core);
        if (mode == COPY_AUTO) /* the first batch is staged, then timed both ways */
            mode = COPY_STAGING;
        uint64_t host_ns = 0;
        const uint8_t *window = NULL;
        if (mode == COPY_POOL && !bfsgi_pool_window(&s->core->pool, fd, fp.size, &window))
            mode = COPY_STAGING; /* the daemon found no window free for it */
        rc = bfsgi_fill_cuda(l, s, fd, &fp, mode == COPY_REGISTER, window, &host_ns);
        /* a failure after copies from the window were queued: the lease (fd, closed below)
         * holds until they ran, or the daemon may compute another batch into the window
         * while the device still reads it (no event was recorded for slot_unmap to wait on) */
        if (rc && window)
            s->core->cu.StreamSynchronize(s->core->copy);
        if (!rc && l->copy == COPY_AUTO)
            bfsgi_calibrate(l, s, fd, &fp);
        b->ready_event = s->ready;
        ctx_pop(s->core);
    } else if (!rc) {
        rc = bfsgi_fill_host(l, s, fd, &fp);
    }
    if (!rc) {
        pthread_mutex_lock(&l->lock);
        l->st.bytes_read += fp.size - fp.lo;
        l->st.host_copies += mode == COPY_READ || mode == COPY_STAGING;
        l->st.staged += mode == COPY_STAGING;
        l->st.registered += mode == COPY_REGISTER;
        l->st.pooled += mode == COPY_POOL;
        l->st.pool_staged += l->copy == COPY_POOL && mode == COPY_STAGING;
        l->st.converted += l->conv.active && !fp.tokens;
        pthread_mutex_unlock(&l->lock);
    }
    if (!rc && mode == COPY_POOL) /* the lease: open until the copy's event (slot_unmap) */
        s->lease_fd = fd, fd = -1;
    if (fd >= 0)
        close(fd);
    s->rc = rc;
}

static void *producer(void *arg)
{
    bfsg_loader *l = arg;
    pthread_mutex_lock(&l->lock); /* fill() makes the context current around its calls */
    while (!l->stop) {
        uint64_t p = l->produce_pos;
        slot *s = l->ring[p % (uint64_t)l->depth];
        if (p >= l->total || p >= l->next_pos + (uint64_t)l->depth || s->state != SLOT_FREE) {
            pthread_cond_wait(&l->cond, &l->lock);
            continue;
        }
        s->state = SLOT_FILLING, s->pos = p, s->gen = l->gen;
        l->produce_pos = p + 1;
        uint64_t epoch = l->epoch_begin + p / l->per_rank;
        uint64_t k = l->rank + l->world * (p % l->per_rank);
        pthread_mutex_unlock(&l->lock);
        fill(l, s, epoch, k);
        pthread_mutex_lock(&l->lock);
        s->state = s->gen == l->gen ? SLOT_READY : SLOT_FREE;
        pthread_cond_broadcast(&l->cond);
    }
    pthread_mutex_unlock(&l->lock);
    return NULL;
}

/* ---- open, next, seek, destroy --------------------------------------------------------- */

int bfsg_open(bfsg_loader *l, const char *path)
{
    if (!l || !path)
        return l ? seterr(l, -EINVAL, "bfsg_open: NULL path") : -EINVAL;
    if (l->open)
        return seterr(l, -EBUSY, "already open on %s", l->root);
    l->err[0] = 0;
    if (strlen(path) >= sizeof l->root - 64)
        return seterr(l, -ENAMETOOLONG, "%s: path too long", path);
    snprintf(l->root, sizeof l->root, "%s", path);
    struct stat st;
    if (stat(path, &st)) {
        int e = errno;
        return seterr(l, -e, "%s: %s", path, strerror(e));
    }
    if (!S_ISDIR(st.st_mode))
        return seterr(l, -ENOTDIR,
                      "%s: not a directory (a batchfs mount point, or a directory "
                      "laid out like one: epoch/N/batch_K)",
                      path);
    char dir[PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/epoch", path);
    if (stat(dir, &st) || !S_ISDIR(st.st_mode))
        return seterr(l, -ENOENT,
                      "%s has no epoch/ directory: not a batchfs mount (is it "
                      "mounted?) nor a copy of one",
                      path);
    int rc = count_entries(l, dir, "", &l->n_epochs);
    if (rc)
        return rc;
    if (l->n_epochs == 0)
        return seterr(l, -EBADMSG, "%s: no epochs listed", dir);
    uint64_t end = l->epoch_end_set ? l->epoch_end : l->n_epochs;
    if (l->epoch_begin >= end || end > l->n_epochs)
        return seterr(l, -EINVAL,
                      "epoch_begin=%" PRIu64 ", epoch_end=%" PRIu64 ": %s lists epochs 0..%" PRIu64,
                      l->epoch_begin, end, path, l->n_epochs - 1);
    if (l->rank >= l->world)
        return seterr(l, -EINVAL, "rank=%" PRIu64 " must be below world=%" PRIu64, l->rank,
                      l->world);
    snprintf(dir, sizeof dir, "%s/epoch/%" PRIu64, path, l->epoch_begin);
    if ((rc = count_entries(l, dir, "batch_", &l->n_batches)))
        return rc;
    l->per_rank = l->n_batches / l->world;
    if (l->per_rank == 0)
        return seterr(l, -EINVAL,
                      "world=%" PRIu64 " is more than the %" PRIu64 " batches of an epoch",
                      l->world, l->n_batches);
    l->total = (end - l->epoch_begin) * l->per_rank;
    l->epoch_end = end;
    /* a batchfs mount: a FUSE file system whose root has the fingerprint xattr (a copy of
     * the tree that kept the xattr is not one: its files could shrink under a mapping) */
    struct statfs sfs;
    char x[8];
    l->immutable = statfs(path, &sfs) == 0 && sfs.f_type == FUSE_SUPER_MAGIC &&
                   getxattr(path, "user.batchfs.fingerprint", x, 0) >= 0;
    if ((rc = bfsgi_convert_setup(&l->conv, l->dtype, l->normalize, l->layout, l->err,
                                  sizeof l->err)))
        return rc;
    if ((rc = choose_device(l)) || (rc = bfsgi_choose_copy(l)))
        goto fail;
    if (!l->depth)
        l->depth = l->core->cuda ? DEPTH_CUDA : DEPTH_HOST;
    if (!l->readers) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        l->readers =
            cpus / 2 < READERS_DEFAULT ? (cpus / 2 > 1 ? (int)(cpus / 2) : 1) : READERS_DEFAULT;
    }
    l->core->consumer = l->consumer;
    l->stf = malloc(sizeof *l->stf);
    if (!l->stf) {
        rc = seterr(l, -ENOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < l->depth; i++)
        if (!(l->ring[i] = slot_new(l->core))) {
            rc = seterr(l, -ENOMEM, "out of memory");
            goto fail;
        }
    if ((rc = pthread_create(&l->thread, NULL, producer, l))) {
        rc = seterr(l, -rc, "cannot start the loader thread: %s", strerror(rc));
        goto fail;
    }
    l->thread_started = 1;
    l->open = 1;
    return 0;
fail:
    for (int i = 0; i < MAX_DEPTH; i++) {
        slot_destroy(l->ring[i]);
        l->ring[i] = NULL;
    }
    free(l->stf);
    l->stf = NULL;
    return rc;
}

/* the slot the caller had comes back: to the ring, or detached when still retained.
 * Called with l->lock held. */
static int give_back(bfsg_loader *l, slot *s)
{
    int idx = (int)(s->pos % (uint64_t)l->depth);
    slot *fresh = NULL;
    if (atomic_load(&s->refs) > 1 && !(fresh = slot_new(l->core)))
        return seterr(l, -ENOMEM, "out of memory");
    atomic_store(&s->detached, 1);
    if (atomic_fetch_sub(&s->refs, 1) == 1) { /* nobody else holds it: back to the ring */
        atomic_store(&s->detached, 0);
        if (fresh)
            slot_destroy(fresh);
        s->state = SLOT_FREE;
        slot_mark_done(s);
    } else {
        if (!fresh) /* a retain came in between: cannot happen from one thread */
            fresh = slot_new(l->core);
        l->ring[idx] = fresh; /* s is freed by its last release */
    }
    l->out = NULL;
    pthread_cond_broadcast(&l->cond);
    return 0;
}

int bfsg_next(bfsg_loader *l, bfsg_batch **out)
{
    if (!l || !out)
        return l ? seterr(l, -EINVAL, "bfsg_next: NULL argument") : -EINVAL;
    *out = NULL;
    if (!l->open)
        return seterr(l, -EINVAL, "bfsg_next before bfsg_open");
    l->err[0] = 0;
    pthread_mutex_lock(&l->lock);
    int rc = 0;
    if (l->out && (rc = give_back(l, l->out)))
        goto done;
    if (l->next_pos >= l->total)
        goto done;
    uint64_t t0 = bfs_mono_ns(), p = l->next_pos;
    slot *s;
    while (s = l->ring[p % (uint64_t)l->depth],
           !(s->state == SLOT_READY && s->pos == p && s->gen == l->gen))
        pthread_cond_wait(&l->cond, &l->lock);
    l->st.wait_ns += bfs_mono_ns() - t0;
    l->next_pos = p + 1; /* after an error too: the next call goes on with the next batch */
    pthread_cond_broadcast(&l->cond);
    if (s->rc) {
        rc = s->rc;
        snprintf(l->err, sizeof l->err, "%s", s->err);
        s->state = SLOT_FREE;
        goto done;
    }
    s->state = SLOT_OUT;
    atomic_store(&s->refs, 1);
    atomic_store(&s->detached, 0);
    l->out = s;
    l->st.batches++;
    if (s->core->cuda) {
        ctx_push(s->core);
        CUresult r = s->core->cu.StreamWaitEvent(l->consumer, s->ready, 0);
        ctx_pop(s->core);
        if (r != BFSG_CUDA_SUCCESS) {
            rc = cuda_check(l, r, "cuStreamWaitEvent (consumer stream)");
            goto done;
        }
    }
    *out = &s->pub;
done:
    pthread_mutex_unlock(&l->lock);
    return rc;
}

int bfsg_seek(bfsg_loader *l, uint64_t epoch, uint64_t batch)
{
    if (!l)
        return -EINVAL;
    if (!l->open)
        return seterr(l, -EINVAL, "bfsg_seek before bfsg_open");
    if (epoch < l->epoch_begin || epoch >= l->epoch_end)
        return seterr(l, -EINVAL,
                      "seek to epoch %" PRIu64 ": outside epoch_begin=%" PRIu64
                      ", epoch_end=%" PRIu64,
                      epoch, l->epoch_begin, l->epoch_end);
    if (batch % l->world != l->rank || batch / l->world >= l->per_rank)
        return seterr(l, -EINVAL,
                      "seek to batch %" PRIu64 ": not one of rank %" PRIu64 "'s (rank + world * i, "
                      "i < %" PRIu64 ")",
                      batch, l->rank, l->per_rank);
    pthread_mutex_lock(&l->lock);
    int rc = l->out ? give_back(l, l->out) : 0;
    if (!rc) {
        l->gen++;
        l->next_pos = l->produce_pos = (epoch - l->epoch_begin) * l->per_rank + batch / l->world;
        for (int i = 0; i < l->depth; i++)
            if (l->ring[i]->state == SLOT_READY)
                l->ring[i]->state = SLOT_FREE;
        pthread_cond_broadcast(&l->cond);
    }
    pthread_mutex_unlock(&l->lock);
    return rc;
}

void bfsg_destroy(bfsg_loader *l)
{
    if (!l)
        return;
    if (l->thread_started) {
        pthread_mutex_lock(&l->lock);
        l->stop = 1;
        pthread_cond_broadcast(&l->cond);
        pthread_mutex_unlock(&l->lock);
        pthread_join(l->thread, NULL);
    }
    pthread_mutex_lock(&l->lock);
    if (l->out)
        give_back(l, l->out);
    pthread_mutex_unlock(&l->lock);
    for (int i = 0; i < MAX_DEPTH; i++)
        slot_destroy(l->ring[i]);
    core *c = l->core;
    pthread_mutex_lock(&c->spare_lock);
    c->closed = 1; /* retained slots released from now on are freed */
    int n = c->n_spare;
    c->n_spare = 0;
    pthread_mutex_unlock(&c->spare_lock);
    while (n)
        slot_destroy(c->spare[--n]);
    free(l->stf);
    core_unref(c);
    pthread_mutex_destroy(&l->lock);
    pthread_cond_destroy(&l->cond);
    free(l);
}

/* ---- batches ------------------------------------------------------------------------- */

int bfsg_batch_retain(bfsg_batch *b)
{
    if (!b)
        return -EINVAL;
    atomic_fetch_add(&((slot *)b)->refs, 1);
    return 0;
}

void bfsg_batch_release(bfsg_batch *b)
{
    slot *s = (slot *)b;
    if (s && atomic_fetch_sub(&s->refs, 1) == 1 && atomic_load(&s->detached))
        slot_recycle(s);
}

/* stream NULL: block the host on b's ready event; else make stream wait on it */
static int batch_wait(bfsg_batch *b, int host, CUstream stream)
{
    slot *s = (slot *)b;
    if (!s)
        return -EINVAL;
    if (!s->core->cuda)
        return 0;
    bfsg_cuda *cu = &s->core->cu;
    ctx_push(s->core);
    CUresult r = host ? cu->EventSynchronize(s->ready) : cu->StreamWaitEvent(stream, s->ready, 0);
    ctx_pop(s->core);
    return r == BFSG_CUDA_SUCCESS ? 0 : -EPROTO;
}

int bfsg_batch_sync(bfsg_batch *b)
{
    return batch_wait(b, 1, NULL);
}

int bfsg_batch_wait_stream(bfsg_batch *b, void *stream)
{
    return batch_wait(b, 0, (CUstream)stream);
}

typedef struct dl_holder {
    bfsg_DLManagedTensor m;
    int64_t shape[BFSG_MAX_DIMS], strides[BFSG_MAX_DIMS];
} dl_holder;

static void dl_deleter(bfsg_DLManagedTensor *m)
{
    if (!m)
        return;
    bfsg_batch_release(m->manager_ctx);
    free(m);
}

int bfsg_batch_dlpack(bfsg_batch *b, uint32_t i, void **out)
{
    if (!b || !out || i >= b->n_tensors)
        return -EINVAL;
    dl_holder *h = calloc(1, sizeof *h);
    if (!h)
        return -ENOMEM;
    const bfsg_tensor *t = &b->tensors[i];
    static const bfsg_DLDataType types[] = {
        [BFSG_U8] = {BFSG_kDLUInt, 8, 1},      [BFSG_F16] = {BFSG_kDLFloat, 16, 1},
        [BFSG_BF16] = {BFSG_kDLBfloat, 16, 1}, [BFSG_F32] = {BFSG_kDLFloat, 32, 1},
        [BFSG_I64] = {BFSG_kDLInt, 64, 1},     [BFSG_I32] = {BFSG_kDLInt, 32, 1},
        [BFSG_U16] = {BFSG_kDLUInt, 16, 1},    [BFSG_U32] = {BFSG_kDLUInt, 32, 1},
    };
    memcpy(h->shape, t->shape, sizeof h->shape);
    memcpy(h->strides, t->strides, sizeof h->strides);
    h->m.dl_tensor.data = t->data;
    h->m.dl_tensor.device.device_type =
        b->device_type == BFSG_DEVICE_CUDA ? BFSG_kDLCUDA : BFSG_kDLCPU;
    h->m.dl_tensor.device.device_id = b->device_id;
    h->m.dl_tensor.ndim = (int32_t)t->ndim;
    h->m.dl_tensor.dtype = types[t->dtype];
    h->m.dl_tensor.shape = h->shape;
    h->m.dl_tensor.strides = h->strides;
    h->m.manager_ctx = b;
    h->m.deleter = dl_deleter;
    bfsg_batch_retain(b);
    *out = &h->m;
    return 0;
}

int bfsg_batch_find(const bfsg_batch *b, const char *name)
{
    if (!b || !name)
        return -1;
    for (uint32_t i = 0; i < b->n_tensors && i < BFSG_MAX_TENSORS; i++)
        if (b->tensors[i].name && !strcmp(b->tensors[i].name, name))
            return (int)i;
    return -1;
}

int bfsg_get_stats(const bfsg_loader *l, bfsg_stats *s)
{
    if (!l || !s)
        return -EINVAL;
    bfsg_loader *m = (bfsg_loader *)l; /* the lock only */
    pthread_mutex_lock(&m->lock);
    *s = l->st;
    if (l->open) {
        static const char *names[] = {[COPY_READ] = "read",
                                      [COPY_STAGING] = "staging",
                                      [COPY_REGISTER] = "register",
                                      [COPY_AUTO] = "auto",
                                      [COPY_POOL] = "pool"};
        snprintf(s->copy, sizeof s->copy, "%s", names[l->copy]);
    }
    pthread_mutex_unlock(&m->lock);
    return 0;
}
