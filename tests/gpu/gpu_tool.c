/*
 * gpu_tool — libbatchfs-gpu from the command line, for tests/mount/gpu.sh, the device
 * check tests/gpu/run.sh and the benchmark tests/bench/bench_gpu.sh.
 *
 *   gpu_tool read PATH [KEY=VALUE]...   run a loader over PATH with those parameters;
 *       per batch one line "E K NAME:DTYPE:[shape]:XXH64 ..." of the delivered bytes
 *       (read back from the device through the driver where the batch is on one), then
 *       "stats device=... copy=... batches=N host_copies=N registered=N staged=N ...".
 *       lag=N (the tool's, not the loader's): each batch is retained and read back only
 *       after N more were delivered (a consumer that keeps batches: copies still queued
 *       on a slow device must not see their source change).
 *   gpu_tool files PATH E0 E1 [RANK WORLD]   the same lines computed from the files
 *       themselves (no loader), for epochs [E0, E1): images, labels, indices; a token
 *       batch's tensors (no "images") in data order
 *   gpu_tool bench PATH ROUNDS [consume=sum] [KEY=VALUE]...   seconds (wall and CPU) to
 *       deliver every batch of PATH ROUNDS times with one loader (seeking back to the
 *       start, each batch synchronized), against a plain loop that read()s each whole
 *       file into one reused buffer; with consume=sum both sides then read every byte of
 *       each batch, as a consumer does; prints "ratio_wall=R ratio_cpu=R" (loader bytes/s
 *       over the loop's)
 *   gpu_tool device PATH ROUNDS [KEY=VALUE]...   on a CUDA device: the loader's delivery
 *       rate (each batch synchronized) against pinned cuMemcpyHtoDAsync of the same sizes
 *       from one pinned buffer (the DMA bound), and the same delivery while a spin
 *       kernel keeps the consumer stream busy (copies must overlap it); ratio lines
 *
 * Exit 0, 1 on a loader error (message on stderr), 2 usage.
 */
#include "gpu/batchfs_gpu.h"
#include "gpu/cuda_api.h"
#include "base/hash.h"
#include "engine/safetensors.h"
#include "tests/testutil.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static const char *dtype_name[] = {"u8", "f16", "bf16", "f32", "i64", "i32"}; /* bfsg_dtype */

static void *driver(const char *lib)
{
    void *h = dlopen(lib && *lib                     ? lib
                     : getenv("BATCHFS_GPU_LIBCUDA") ? getenv("BATCHFS_GPU_LIBCUDA")
                                                     : "libcuda.so.1",
                     RTLD_NOW);
    if (!h) {
        fprintf(stderr, "gpu_tool: %s\n", dlerror());
        exit(1);
    }
    return h;
}

/* the bytes of t, on the host */
static uint8_t *to_host(const bfsg_batch *b, const bfsg_tensor *t, const char *lib)
{
    uint8_t *out = malloc(t->nbytes ? t->nbytes : 1);
    if (b->device_type == BFSG_DEVICE_CPU) {
        memcpy(out, t->data, t->nbytes);
        return out;
    }
    static CUresult (*retain)(CUcontext *, CUdevice), (*push)(CUcontext), (*pop)(CUcontext *),
        (*dtoh)(void *, CUdeviceptr, size_t), (*evsync)(CUevent);
    static CUcontext ctx;
    if (!dtoh) {
        void *h = driver(lib);
        *(void **)&retain = dlsym(h, "cuDevicePrimaryCtxRetain");
        *(void **)&push = dlsym(h, "cuCtxPushCurrent_v2");
        *(void **)&pop = dlsym(h, "cuCtxPopCurrent_v2");
        *(void **)&dtoh = dlsym(h, "cuMemcpyDtoH_v2");
        *(void **)&evsync = dlsym(h, "cuEventSynchronize");
        if (retain(&ctx, b->device_id)) {
            fprintf(stderr, "gpu_tool: cuDevicePrimaryCtxRetain failed\n");
            exit(1);
        }
    }
    CUcontext prev;
    push(ctx);
    evsync(b->ready_event);
    if (dtoh(out, (CUdeviceptr)(uintptr_t)t->data, t->nbytes)) {
        fprintf(stderr, "gpu_tool: cuMemcpyDtoH failed\n");
        exit(1);
    }
    pop(&prev);
    return out;
}

static void print_tensor(const char *name, const char *dt, const int64_t *shape, uint32_t nd,
                         const uint8_t *p, uint64_t n)
{
    printf(" %s:%s:[", name, dt);
    for (uint32_t i = 0; i < nd; i++)
        printf("%s%" PRId64, i ? "," : "", shape[i]);
    printf("]:%016" PRIx64, bfs_xxh64(p, (size_t)n, 0));
}

static bfsg_loader *make_loader(const char *path, int argc, char **argv, const char **lib)
{
    bfsg_loader *l;
    if (bfsg_create(BFSG_API_VERSION, &l))
        exit(1);
    for (int i = 0; i < argc; i++) {
        const char *eq = strchr(argv[i], '=');
        char key[64];
        if (!eq || eq - argv[i] >= (long)sizeof key) {
            fprintf(stderr, "gpu_tool: expected KEY=VALUE, not '%s'\n", argv[i]);
            exit(2);
        }
        memcpy(key, argv[i], (size_t)(eq - argv[i]));
        key[eq - argv[i]] = 0;
        if (!strcmp(key, "cuda_library"))
            *lib = eq + 1;
        if (bfsg_set(l, key, eq + 1)) {
            fprintf(stderr, "gpu_tool: %s\n", bfsg_error(l));
            exit(1);
        }
    }
    if (bfsg_open(l, path)) {
        fprintf(stderr, "gpu_tool: %s\n", bfsg_error(l));
        exit(1);
    }
    return l;
}

static void print_batch(bfsg_batch *b, const char *lib)
{
    printf("%" PRIu64 " %" PRIu64, b->epoch, b->index);
    for (uint32_t i = 0; i < b->n_tensors; i++) {
        const bfsg_tensor *t = &b->tensors[i];
        uint8_t *h = to_host(b, t, lib);
        print_tensor(t->name, dtype_name[t->dtype], t->shape, t->ndim, h, t->nbytes);
        free(h);
    }
    printf("\n");
}

static int cmd_read(const char *path, int argc, char **argv)
{
    const char *lib = NULL;
    int lag = 0;
    if (argc && !strncmp(argv[0], "lag=", 4)) {
        lag = atoi(argv[0] + 4);
        argc--, argv++;
        if (lag < 0 || lag > 64) {
            fprintf(stderr, "gpu_tool: lag=%d: 0..64\n", lag);
            return 2;
        }
    }
    bfsg_loader *l = make_loader(path, argc, argv, &lib);
    bfsg_batch *b, *kept[65];
    int rc, n = 0;
    while ((rc = bfsg_next(l, &b)) == 0 && b) {
        if (!lag) {
            print_batch(b, lib);
            continue;
        }
        if (bfsg_batch_retain(b)) {
            fprintf(stderr, "gpu_tool: bfsg_batch_retain failed\n");
            return 1;
        }
        kept[n++] = b;
        if (n > lag) { /* the oldest, lag batches later */
            print_batch(kept[0], lib);
            bfsg_batch_release(kept[0]);
            memmove(kept, kept + 1, (size_t)--n * sizeof *kept);
        }
    }
    for (int i = 0; i < n; i++) {
        if (!rc)
            print_batch(kept[i], lib);
        bfsg_batch_release(kept[i]);
    }
    if (rc) {
        fprintf(stderr, "gpu_tool: %s\n", bfsg_error(l));
        bfsg_destroy(l);
        return 1;
    }
    bfsg_stats st;
    bfsg_get_stats(l, &st);
    printf("stats device=%s copy=%s batches=%" PRIu64 " host_copies=%" PRIu64 " registered=%" PRIu64
           " staged=%" PRIu64 " converted=%" PRIu64 " staging_ns_per_mb=%" PRIu64
           " register_ns_per_mb=%" PRIu64 " pooled=%" PRIu64 " pool_staged=%" PRIu64,
           st.device, st.copy, st.batches, st.host_copies, st.registered, st.staged, st.converted,
           st.staging_ns_per_mb, st.register_ns_per_mb, st.pooled, st.pool_staged);
    if (st.fallback[0]) /* (stderr: the stats line's fields stay as they are) */
        fprintf(stderr, "gpu_tool: fallback: %s\n", st.fallback);
    bfsg_destroy(l);
    /* the fake driver's counters, after the loader gave everything back */
    unsigned long long (*counter)(const char *) = NULL;
    if (lib && *lib)
        *(void **)&counter = dlsym(driver(lib), "fake_cuda_counter");
    if (counter)
        printf(" register_calls=%llu registered_live=%llu deferred=%llu", counter("register_calls"),
               counter("registered_live"), counter("deferred"));
    printf("\n");
    return 0;
}

/* entries of DIR whose names start with prefix */
static int count_entries(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        n += de->d_name[0] != '.' && !strncmp(de->d_name, prefix, strlen(prefix));
    if (d)
        closedir(d);
    return n;
}

static int count_batches(const char *path)
{
    char d[4200];
    snprintf(d, sizeof d, "%s/epoch/0", path);
    return count_entries(d, "batch_");
}

static int cmd_files(const char *path, int e0, int e1, int rank, int world)
{
    int nb = count_batches(path), per = nb / world;
    bfs_st_file *f = malloc(sizeof *f);
    for (int e = e0; e < e1; e++)
        for (int i = 0; i < per; i++) {
            int k = rank + world * i;
            char p[4300];
            snprintf(p, sizeof p, "%s/epoch/%d/batch_%d", path, e, k);
            uint8_t *data;
            size_t len;
            if (tu_read_file(p, &data, &len) || bfs_st_parse(data, len, f)) {
                fprintf(stderr, "gpu_tool: %s: cannot read\n", p);
                return 1;
            }
            printf("%d %d", e, k);
            const bfs_st_tensor *ts[BFS_ST_MAX_TENSORS];
            uint32_t n = 0;
            if (bfs_st_find(f, "images")) {
                static const char *order[] = {"images", "labels", "indices"};
                for (int j = 0; j < 3; j++)
                    ts[n++] = bfs_st_find(f, order[j]);
            } else { /* a token batch: data order */
                for (uint32_t j = 0; j < f->n_tensors; j++) {
                    uint32_t at = n++;
                    for (; at > 0 && ts[at - 1]->offset > f->tensors[j].offset; at--)
                        ts[at] = ts[at - 1];
                    ts[at] = &f->tensors[j];
                }
            }
            for (uint32_t j = 0; j < n; j++) {
                const bfs_st_tensor *t = ts[j];
                int64_t shape[8];
                for (uint32_t d = 0; d < t->ndim; d++)
                    shape[d] = (int64_t)t->shape[d];
                const char *dt = t->dtype == BFS_DT_U8     ? "u8"
                                 : t->dtype == BFS_DT_F16  ? "f16"
                                 : t->dtype == BFS_DT_BF16 ? "bf16"
                                 : t->dtype == BFS_DT_F32  ? "f32"
                                 : t->dtype == BFS_DT_I32  ? "i32"
                                                           : "i64";
                print_tensor(t->name, dt, shape, t->ndim, data + t->offset, t->nbytes);
            }
            printf("\n");
            free(data);
        }
    free(f);
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
           ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) * 1e-6;
}

/* what a consumer does with a delivered buffer: nothing, or read every byte (a sum of
 * 64-bit words: about what a training step's first touch of the input costs) */
static uint64_t consume(const void *p, uint64_t n, int sum)
{
    uint64_t acc = 0;
    if (sum)
        for (uint64_t i = 0; i + 8 <= n; i += 8) {
            uint64_t w;
            memcpy(&w, (const uint8_t *)p + i, 8);
            acc += w;
        }
    return acc;
}

static int cmd_bench(const char *path, int rounds, int argc, char **argv)
{
    const char *lib = NULL;
    int sum = argc > 0 && !strcmp(argv[0], "consume=sum"); /* gpu_tool's own, first */
    if (sum)
        argc--, argv++;
    /* the loader: every batch of every epoch, ROUNDS times, synchronized per batch */
    double w0 = now_s(), c0 = cpu_s();
    uint64_t bytes = 0, batches = 0, acc = 0;
    char dev[160] = "";
    bfsg_loader *l = make_loader(path, argc, argv, &lib);
    for (int r = 0; r < rounds; r++) { /* one loader, as a training job has: seek back */
        bfsg_batch *b;
        if (r && bfsg_seek(l, 0, 0))
            return 1;
        while (bfsg_next(l, &b) == 0 && b) {
            if (bfsg_batch_sync(b))
                return 1;
            for (uint32_t i = 0; i < b->n_tensors; i++) {
                const bfsg_tensor *t = &b->tensors[i];
                if (b->device_type == BFSG_DEVICE_CPU)
                    acc += consume(t->data, t->nbytes, sum);
                bytes += t->nbytes;
            }
            batches++;
        }
    }
    bfsg_stats st;
    bfsg_get_stats(l, &st);
    snprintf(dev, sizeof dev, "%.96s copy=%.16s", st.device, st.copy);
    bfsg_destroy(l);
    double lw = now_s() - w0, lc = cpu_s() - c0;
    /* the reference: read() of each whole file into one reused buffer (a new buffer per
     * file, as f.read() makes, measured the same: glibc reuses a freed large block) */
    size_t cap = 1ull << 30;
    uint8_t *buf = malloc(cap);
    int nb = count_batches(path);
    char d[4200];
    snprintf(d, sizeof d, "%s/epoch", path);
    int ne = count_entries(d, "");
    w0 = now_s(), c0 = cpu_s();
    uint64_t rbytes = 0;
    for (int r = 0; r < rounds; r++)
        for (int e = 0; e < ne; e++)
            for (int k = 0; k < nb; k++) {
                char p[4300];
                snprintf(p, sizeof p, "%s/epoch/%d/batch_%d", path, e, k);
                int fd = open(p, O_RDONLY);
                ssize_t n;
                size_t got = 0;
                while (fd >= 0 && (n = read(fd, buf + got, cap - got)) > 0)
                    got += (size_t)n;
                acc += consume(buf, got, sum);
                rbytes += got;
                if (fd >= 0)
                    close(fd);
            }
    double rw = now_s() - w0, rcpu = cpu_s() - c0;
    printf("consumer: %s (%" PRIx64 ")\n", sum ? "reads every byte" : "nothing", acc & 0xf);
    printf("loader: %" PRIu64 " batches, %.1f MB, %.3f s wall, %.3f s CPU (%s)\n", batches,
           (double)bytes / 1e6, lw, lc, dev);
    printf("read() loop: %.1f MB, %.3f s wall, %.3f s CPU\n", (double)rbytes / 1e6, rw, rcpu);
    printf("ratio_wall=%.2f ratio_cpu=%.2f (loader bytes per second over the read() loop's)\n",
           ((double)bytes / lw) / ((double)rbytes / rw),
           ((double)bytes / lc) / ((double)rbytes / rcpu));
    free(buf);
    return 0;
}

/* a kernel that spins for p_cycles clock cycles (PTX 6.0, like the library's) */
static const char spin_ptx[] = ".version 6.0\n.target sm_50\n.address_size 64\n"
                               ".visible .entry bfsg_spin(.param .u64 p_cycles)\n{\n"
                               "  .reg .pred %q;\n  .reg .b64 %n, %t0, %t;\n"
                               "  ld.param.u64 %n, [p_cycles];\n  mov.u64 %t0, %clock64;\n"
                               "LOOP:\n  mov.u64 %t, %clock64;\n  sub.u64 %t, %t, %t0;\n"
                               "  setp.lt.u64 %q, %t, %n;\n  @%q bra LOOP;\n  ret;\n}\n";

static int cmd_device(const char *path, int rounds, int argc, char **argv)
{
    const char *lib = NULL;
    for (int i = 0; i < argc; i++)
        if (!strncmp(argv[i], "cuda_library=", 13))
            lib = argv[i] + 13;
    void *h = driver(lib);
#define SYM(var, name) *(void **)&var = dlsym(h, name)
    CUresult (*init)(unsigned), (*retain)(CUcontext *, CUdevice), (*push)(CUcontext),
        (*halloc)(void **, size_t, unsigned), (*dalloc)(CUdeviceptr *, size_t),
        (*htod)(CUdeviceptr, const void *, size_t, CUstream), (*ssync)(CUstream),
        (*screate)(CUstream *, unsigned), (*modload)(CUmodule *, const void *),
        (*getfn)(CUfunction *, CUmodule, const char *),
        (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                  CUstream, void **, void **),
        (*attr)(int *, int, CUdevice);
    SYM(init, "cuInit"), SYM(retain, "cuDevicePrimaryCtxRetain"), SYM(push, "cuCtxPushCurrent_v2");
    SYM(halloc, "cuMemHostAlloc"), SYM(dalloc, "cuMemAlloc_v2"), SYM(htod, "cuMemcpyHtoDAsync_v2");
    SYM(ssync, "cuStreamSynchronize"), SYM(screate, "cuStreamCreate"),
        SYM(modload, "cuModuleLoadData");
    SYM(getfn, "cuModuleGetFunction"), SYM(launch, "cuLaunchKernel"),
        SYM(attr, "cuDeviceGetAttribute");
    CUcontext ctx;
    CUstream consumer;
    if (init(0) || retain(&ctx, 0) || push(ctx) ||
        screate(&consumer, BFSG_CU_STREAM_NON_BLOCKING)) {
        fprintf(stderr, "gpu_tool: no CUDA device\n");
        return 1;
    }
    /* 1. the loader, every batch synchronized */
    double w0 = now_s();
    uint64_t bytes = 0, batches = 0, largest = 0;
    bfsg_loader *l = make_loader(path, argc, argv, &lib);
    for (int r = 0; r < rounds; r++) {
        bfsg_batch *b;
        if (r && bfsg_seek(l, 0, 0))
            return 1;
        while (bfsg_next(l, &b) == 0 && b) {
            uint64_t n = 0;
            for (uint32_t i = 0; i < b->n_tensors; i++)
                n += b->tensors[i].nbytes;
            if (bfsg_batch_sync(b))
                return 1;
            bytes += n, batches++;
            if (n > largest)
                largest = n;
        }
    }
    double loader_s = now_s() - w0;
    bfsg_stats st;
    bfsg_get_stats(l, &st);
    bfsg_destroy(l);
    /* 2. the DMA bound: pinned buffer to device, the same sizes */
    void *pinned;
    CUdeviceptr dev;
    if (halloc(&pinned, largest, 0) || dalloc(&dev, largest))
        return 1;
    memset(pinned, 1, largest);
    w0 = now_s();
    for (uint64_t i = 0; i < batches; i++)
        if (htod(dev, pinned, bytes / batches, consumer) || ssync(consumer))
            return 1;
    double dma_s = now_s() - w0;
    printf("device: %s, copy=%s (staging %" PRIu64 " ns/MB, register %" PRIu64 " ns/MB), "
           "host copies %" PRIu64 " of %" PRIu64 " batches\n",
           st.device, st.copy, st.staging_ns_per_mb, st.register_ns_per_mb, st.host_copies,
           st.batches);
    printf("delivery: %.0f MB/s; pinned cuMemcpyHtoDAsync of the same sizes: %.0f MB/s; "
           "ratio=%.2f (bar: >= 0.9)\n",
           (double)bytes / 1e6 / loader_s, (double)bytes / 1e6 / dma_s, dma_s / loader_s);
    /* 3. overlap: copies while the consumer stream computes */
    CUmodule mod;
    CUfunction spin;
    int khz = 0;
    attr(&khz, 13 /* CU_DEVICE_ATTRIBUTE_CLOCK_RATE, kHz */, 0);
    if (modload(&mod, spin_ptx) || getfn(&spin, mod, "bfsg_spin") || khz <= 0) {
        printf("overlap: skipped (the spin kernel cannot run on this driver)\n");
        return 0;
    }
    /* A training loop's pattern: each batch handed over, then a kernel on the consumer
     * stream as long as one batch's copy took in (1); the loader copies the next batches
     * while it runs, and reuses a slot only once the consumer stream is past it. Timed
     * against the same kernels alone and the copies alone (1). */
    double per_s = batches ? loader_s / (double)batches : 0;
    unsigned long long cycles = (unsigned long long)(per_s * (double)khz * 1000.0);
    void *params[] = {&cycles};
    w0 = now_s();
    for (uint64_t i = 0; i < batches; i++)
        if (launch(spin, 1, 1, 1, 1, 1, 1, 0, consumer, params, NULL))
            return 1;
    ssync(consumer);
    double kernels_s = now_s() - w0;
    l = make_loader(path, argc, argv, &lib);
    w0 = now_s();
    uint64_t n = 0;
    for (int r = 0; r < rounds; r++) {
        bfsg_batch *b;
        if (r && bfsg_seek(l, 0, 0))
            return 1;
        while (bfsg_next(l, &b) == 0 && b) /* the consumer stream waits for the batch */
            if (launch(spin, 1, 1, 1, 1, 1, 1, 0, consumer, params, NULL))
                return 1;
            else
                n++;
    }
    ssync(consumer);
    double both_s = now_s() - w0;
    bfsg_destroy(l);
    printf("overlap: %" PRIu64 " kernels of %.2f ms, one after each batch: %.3f s; kernels alone "
           "%.3f s, copies alone %.3f s (serial %.3f s); overlapped=%s\n",
           n, per_s * 1e3, both_s, kernels_s, loader_s, kernels_s + loader_s,
           both_s < 0.75 * (kernels_s + loader_s) ? "yes" : "NO");
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 3 && !strcmp(argv[1], "read"))
        return cmd_read(argv[2], argc - 3, argv + 3);
    if ((argc == 5 || argc == 7) && !strcmp(argv[1], "files"))
        return cmd_files(argv[2], atoi(argv[3]), atoi(argv[4]), argc == 7 ? atoi(argv[5]) : 0,
                         argc == 7 ? atoi(argv[6]) : 1);
    if (argc >= 4 && !strcmp(argv[1], "bench"))
        return cmd_bench(argv[2], atoi(argv[3]), argc - 4, argv + 4);
    if (argc >= 4 && !strcmp(argv[1], "device"))
        return cmd_device(argv[2], atoi(argv[3]), argc - 4, argv + 4);
    fprintf(stderr, "usage: gpu_tool read PATH [KEY=VALUE]...\n"
                    "       gpu_tool files PATH E0 E1 [RANK WORLD]\n"
                    "       gpu_tool bench PATH ROUNDS [KEY=VALUE]...\n"
                    "       gpu_tool device PATH ROUNDS [KEY=VALUE]...\n");
    return 2;
}
