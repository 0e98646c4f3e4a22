/*
 * gpu_tool — libbatchfs-gpu from the command line, for tests/mount/gpu.sh, the device
 * check tests/gpu/run.sh and the benchmark tests/bench/bench_gpu.sh.
 *
 *   gpu_tool read PATH [KEY=VALUE]...   run a loader over PATH with those parameters;
 *       per batch one line "E K NAME:DTYPE:[shape]:XXH64 ..." of the delivered bytes
 *       (read back from the device through the driver where the batch is on one), then
 *       "stats device=... copy=... batches=N host_copies=N registered=N staged=N".
 *   gpu_tool files PATH E0 E1 [RANK WORLD]   the same lines computed from the files
 *       themselves (no loader), for epochs [E0, E1)
 *   gpu_tool bench PATH ROUNDS [KEY=VALUE]...   seconds (wall and CPU) to deliver every
 *       batch of PATH ROUNDS times (synchronized per batch), against a plain read() loop
 *       over the same files, and on a device against pinned cuMemcpyHtoDAsync of the
 *       same sizes; prints "ratio_wall=R ratio_cpu=R" lines
 *
 * Exit 0, 1 on a loader error (message on stderr), 2 usage.
 */
#include "gpu/batchfs_gpu.h"
#include "gpu/cuda_api.h"
#include "engine/hash.h"
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

static const char *dtype_name[] = {"u8", "f16", "bf16", "f32", "i64"};

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
        char *eq = strchr(argv[i], '=');
        if (!eq) {
            fprintf(stderr, "gpu_tool: expected KEY=VALUE, not '%s'\n", argv[i]);
            exit(2);
        }
        *eq = 0;
        if (!strcmp(argv[i], "cuda_library"))
            *lib = eq + 1;
        if (bfsg_set(l, argv[i], eq + 1)) {
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

static int cmd_read(const char *path, int argc, char **argv)
{
    const char *lib = NULL;
    bfsg_loader *l = make_loader(path, argc, argv, &lib);
    bfsg_batch *b;
    int rc;
    while ((rc = bfsg_next(l, &b)) == 0 && b) {
        printf("%" PRIu64 " %" PRIu64, b->epoch, b->index);
        for (uint32_t i = 0; i < b->n_tensors; i++) {
            const bfsg_tensor *t = &b->tensors[i];
            uint8_t *h = to_host(b, t, lib);
            print_tensor(t->name, dtype_name[t->dtype], t->shape, t->ndim, h, t->nbytes);
            free(h);
        }
        printf("\n");
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
           " register_ns_per_mb=%" PRIu64 "\n",
           st.device, st.copy, st.batches, st.host_copies, st.registered, st.staged, st.converted,
           st.staging_ns_per_mb, st.register_ns_per_mb);
    bfsg_destroy(l);
    return 0;
}

static int count_batches(const char *path)
{
    char d[4200];
    snprintf(d, sizeof d, "%s/epoch/0", path);
    DIR *dir = opendir(d);
    int n = 0;
    struct dirent *de;
    while (dir && (de = readdir(dir)))
        n += !strncmp(de->d_name, "batch_", 6);
    if (dir)
        closedir(dir);
    return n;
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
            static const char *order[] = {"images", "labels", "indices"};
            for (int j = 0; j < 3; j++) {
                const bfs_st_tensor *t = bfs_st_find(f, order[j]);
                int64_t shape[8];
                for (uint32_t d = 0; d < t->ndim; d++)
                    shape[d] = (int64_t)t->shape[d];
                const char *dt = t->dtype == BFS_DT_U8     ? "u8"
                                 : t->dtype == BFS_DT_F16  ? "f16"
                                 : t->dtype == BFS_DT_BF16 ? "bf16"
                                 : t->dtype == BFS_DT_F32  ? "f32"
                                                           : "i64";
                print_tensor(order[j], dt, shape, t->ndim, data + t->offset, t->nbytes);
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

static int cmd_bench(const char *path, int rounds, int argc, char **argv)
{
    const char *lib = NULL;
    /* the loader: every batch of every epoch, ROUNDS times, synchronized per batch */
    double w0 = now_s(), c0 = cpu_s();
    uint64_t bytes = 0, batches = 0;
    char dev[160] = "";
    for (int r = 0; r < rounds; r++) {
        bfsg_loader *l = make_loader(path, argc, argv, &lib);
        bfsg_batch *b;
        while (bfsg_next(l, &b) == 0 && b) {
            if (bfsg_batch_sync(b))
                return 1;
            for (uint32_t i = 0; i < b->n_tensors; i++)
                bytes += b->tensors[i].nbytes;
            batches++;
        }
        bfsg_stats st;
        bfsg_get_stats(l, &st);
        snprintf(dev, sizeof dev, "%.96s copy=%.16s", st.device, st.copy);
        bfsg_destroy(l);
    }
    double lw = now_s() - w0, lc = cpu_s() - c0;
    /* the reference: read() of the same files into one buffer */
    size_t cap = 1 << 20;
    uint8_t *buf = malloc(cap);
    int nb = count_batches(path);
    char d[4200];
    snprintf(d, sizeof d, "%s/epoch", path);
    DIR *ed = opendir(d);
    int ne = 0;
    struct dirent *de;
    while (ed && (de = readdir(ed)))
        ne += de->d_name[0] != '.';
    if (ed)
        closedir(ed);
    w0 = now_s(), c0 = cpu_s();
    uint64_t rbytes = 0;
    for (int r = 0; r < rounds; r++)
        for (int e = 0; e < ne; e++)
            for (int k = 0; k < nb; k++) {
                char p[4300];
                snprintf(p, sizeof p, "%s/epoch/%d/batch_%d", path, e, k);
                int fd = open(p, O_RDONLY);
                ssize_t n;
                while (fd >= 0 && (n = read(fd, buf, cap)) > 0)
                    rbytes += (uint64_t)n;
                if (fd >= 0)
                    close(fd);
            }
    double rw = now_s() - w0, rcpu = cpu_s() - c0;
    printf("loader: %" PRIu64 " batches, %.1f MB, %.3f s wall, %.3f s CPU (%s)\n", batches,
           (double)bytes / 1e6, lw, lc, dev);
    printf("read(): %.1f MB, %.3f s wall, %.3f s CPU\n", (double)rbytes / 1e6, rw, rcpu);
    printf("ratio_wall=%.2f (loader MB/s over read() MB/s)\n",
           ((double)bytes / lw) / ((double)rbytes / rw));
    printf("ratio_cpu=%.2f (loader MB per CPU s over read()'s)\n",
           ((double)bytes / lc) / ((double)rbytes / rcpu));
    free(buf);
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
    fprintf(stderr, "usage: gpu_tool read PATH [KEY=VALUE]...\n"
                    "       gpu_tool files PATH E0 E1 [RANK WORLD]\n"
                    "       gpu_tool bench PATH ROUNDS [KEY=VALUE]...\n");
    return 2;
}
