/*
 * check_gpu.c — libbatchfs-gpu (gpu/batchfs_gpu.h), linked as the built shared library:
 * the CPU fallback (bytes equal the files, order, rank/world, epochs, seek, bad files
 * named), the CUDA path against the suite's fake driver (build/tests/fakecuda/libcuda.so.1:
 * device bytes equal the files, pinned staging, contexts, no leaks, injected failures),
 * the conversion against the daemon's own dtype=/normalize=/layout= batches on both
 * paths, retained batches and DLPack deleters that outlive the loader; token batches
 * (pack=concat with positions, pad, bucket of varying shapes) delivered tensor for tensor
 * as the files hold them, slots growing for larger batches, conversions refused; batches
 * of a multi-field dataset with every field tensor, by name and through DLPack.
 *
 * Batch files are written in-process by the engine into DIR/epoch/N/batch_K (the mount's
 * layout); tests/mount/gpu.sh runs the same library over a real mount.
 */
#include "gpu/batchfs_gpu.h"
#include "gpu/dlpack.h"
#include "gpu/cuda_api.h"
#include "engine/dataset/bfs.h"
#include "engine/dataset/jpeg.h"
#include "engine/dataset/pack.h"
#include "base/hash.h"
#include "engine/engine.h"
#include "engine/exec.h"
#include "engine/pipeline.h"
#include "engine/safetensors.h"
#include "tests/testutil.h"

#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define OPTS   "batch=4,size=16x12,seed=7"
#define EPOCHS 3
#define NB     5 /* 3 classes x 7 images = 21 samples, batch 4, drop_last: 5 batches */

static char *tmp;
static char root[4096], src[4096], fake[4096];

/* write epochs 0..epochs-1 of pipeline opts over dataset from into dir/epoch/N/batch_K;
 * returns the batches per epoch */
static uint64_t write_batches_of(const char *from, const char *dir, const char *opts, int epochs)
{
    bfs_pipeline_opts o;
    bfs_pipeline_defaults(&o);
    char err[1024], path[4200];
    ck_assert_msg(bfs_pipeline_parse(&o, opts, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(bfs_pipeline_finish(&o, err, sizeof err) == 0, "%s", err);
    bfs_engine *e;
    bfs_exec *x;
    ck_assert_msg(bfs_engine_create(from, &o, &e, err, sizeof err) == 0, "%s", err);
    uint64_t nb = bfs_engine_batches(e);
    ck_assert_int_eq(bfs_exec_create(e, 1, 0, &x), 0);
    snprintf(path, sizeof path, "%s/epoch", dir);
    mkdir(dir, 0755);
    mkdir(path, 0755);
    for (int ep = 0; ep < epochs; ep++) {
        snprintf(path, sizeof path, "%s/epoch/%d", dir, ep);
        mkdir(path, 0755);
        for (uint64_t k = 0; k < nb; k++) {
            bfs_batch *b;
            ck_assert_msg(bfs_exec_get(x, (uint64_t)ep, (uint64_t)k, &b, err, sizeof err) == 0,
                          "%s", err);
            snprintf(path, sizeof path, "%s/epoch/%d/batch_%" PRIu64, dir, ep, k);
            ck_assert_int_eq(tu_write_file(path, bfs_batch_data(b), bfs_batch_size(b)), 0);
            bfs_batch_release(b);
        }
    }
    bfs_exec_destroy(x);
    bfs_engine_destroy(e);
    return nb;
}

static void write_batches(const char *dir, const char *opts, int epochs)
{
    ck_assert_uint_eq(write_batches_of(src, dir, opts, epochs), NB);
}

static void setup(void)
{
    tmp = tu_mkdtemp("check_gpu");
    ck_assert_ptr_nonnull(tmp);
    snprintf(src, sizeof src, "%s/src", tmp);
    snprintf(root, sizeof root, "%s/mnt", tmp);
    ck_assert_int_eq(tu_make_imagefolder(src, 3, 7, 20, 60, 5), 0);
    write_batches(root, OPTS, EPOCHS);
    const char *b = getenv("BFS_BUILD");
    snprintf(fake, sizeof fake, "%s/tests/fakecuda/libcuda.so.1", b ? b : "build");
    ck_assert_msg(access(fake, R_OK) == 0, "fake driver %s not built", fake);
    /* held for the whole test: the fake's counters survive the loader's dlclose, so a
     * leak counted before bfsg_destroy is still seen after it */
    ck_assert_ptr_nonnull(dlopen(fake, RTLD_NOW));
}

static void teardown(void)
{
    tu_rmtree(tmp);
    free(tmp);
}

/* the file's bytes of tensor name */
static uint8_t *file_tensor(const char *path, const char *name, uint64_t *n)
{
    uint8_t *data;
    size_t len;
    ck_assert_int_eq(tu_read_file(path, &data, &len), 0);
    bfs_st_file *f = malloc(sizeof *f);
    ck_assert_int_eq(bfs_st_parse(data, len, f), 0);
    const bfs_st_tensor *t = bfs_st_find(f, name);
    ck_assert_ptr_nonnull(t);
    uint8_t *out = malloc(t->nbytes);
    memcpy(out, data + t->offset, t->nbytes);
    *n = t->nbytes;
    free(f);
    free(data);
    return out;
}

static bfsg_loader *loader(const char *kv[])
{
    bfsg_loader *l;
    ck_assert_int_eq(bfsg_create(BFSG_API_VERSION, &l), 0);
    for (int i = 0; kv && kv[i]; i += 2)
        ck_assert_msg(bfsg_set(l, kv[i], kv[i + 1]) == 0, "%s", bfsg_error(l));
    return l;
}

/* the fake driver, to read device memory back (same handle the library holds) */
static void *fake_sym(const char *name)
{
    void *h = dlopen(fake, RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        h = dlopen(fake, RTLD_NOW);
    ck_assert_ptr_nonnull(h);
    void *s = dlsym(h, name);
    ck_assert_ptr_nonnull(s);
    return s;
}
static unsigned long long counter(const char *name)
{
    unsigned long long (*f)(const char *) =
        (unsigned long long (*)(const char *))fake_sym("fake_cuda_counter");
    return f(name);
}
/* copy n bytes of tensor t to the host, whatever its device */
static uint8_t *host_bytes(const bfsg_batch *b, const bfsg_tensor *t)
{
    uint8_t *out = malloc(t->nbytes ? t->nbytes : 1);
    if (b->device_type == BFSG_DEVICE_CPU) {
        memcpy(out, t->data, t->nbytes);
        return out;
    }
    CUresult (*retain)(CUcontext *, CUdevice) =
        (CUresult(*)(CUcontext *, CUdevice))fake_sym("cuDevicePrimaryCtxRetain");
    CUresult (*push)(CUcontext) = (CUresult(*)(CUcontext))fake_sym("cuCtxPushCurrent_v2");
    CUresult (*pop)(CUcontext *) = (CUresult(*)(CUcontext *))fake_sym("cuCtxPopCurrent_v2");
    CUresult (*release)(CUdevice) = (CUresult(*)(CUdevice))fake_sym("cuDevicePrimaryCtxRelease_v2");
    CUresult (*dtoh)(void *, CUdeviceptr, size_t) =
        (CUresult(*)(void *, CUdeviceptr, size_t))fake_sym("cuMemcpyDtoH_v2");
    CUcontext c, prev;
    ck_assert_int_eq(retain(&c, 0), 0);
    ck_assert_int_eq(push(c), 0);
    ck_assert_int_eq(dtoh(out, (CUdeviceptr)(uintptr_t)t->data, t->nbytes), 0);
    pop(&prev);
    release(0);
    return out;
}

/* every batch's tensors equal the files' */
static void check_equal_files(const bfsg_batch *b)
{
    ck_assert_uint_eq(b->n_tensors, 3);
    for (uint32_t i = 0; i < 3; i++) {
        const bfsg_tensor *t = &b->tensors[i];
        uint64_t n;
        uint8_t *want = file_tensor(b->path, t->name, &n);
        ck_assert_uint_eq(t->nbytes, n);
        uint8_t *got = host_bytes(b, t);
        ck_assert_msg(memcmp(got, want, n) == 0, "%s: %s differs", b->path, t->name);
        if (b->device_type == BFSG_DEVICE_CUDA)
            ck_assert_uint_eq((uintptr_t)t->data % 256, 0);
        else
            ck_assert_uint_eq((uintptr_t)t->data % (t->dtype == BFSG_I64 ? 8 : 1), 0);
        free(got);
        free(want);
    }
    ck_assert_str_eq(b->tensors[0].name, "images");
    ck_assert_int_eq(b->tensors[0].ndim, 4);
    ck_assert_int_eq(b->tensors[0].shape[0], 4);
    ck_assert_int_eq(b->tensors[0].shape[1], 16); /* size=HxW */
    ck_assert_int_eq(b->tensors[0].shape[2], 12);
    ck_assert_int_eq(b->tensors[0].strides[0], 12 * 16 * 3);
    ck_assert_int_eq(b->tensors[1].dtype, BFSG_I64);
}

/* iterate to the end; check order against (rank, world, epochs) and bytes */
static void run_all(bfsg_loader *l, uint64_t e0, uint64_t e1, uint64_t rank, uint64_t world)
{
    uint64_t per = NB / world, n = 0;
    bfsg_batch *b;
    for (;;) {
        ck_assert_msg(bfsg_next(l, &b) == 0, "%s", bfsg_error(l));
        if (!b)
            break;
        ck_assert_uint_eq(b->epoch, e0 + n / per);
        ck_assert_uint_eq(b->index, rank + world * (n % per));
        check_equal_files(b);
        n++;
    }
    ck_assert_uint_eq(n, (e1 - e0) * per);
    ck_assert_int_eq(bfsg_next(l, &b), 0); /* stays at the end */
    ck_assert_ptr_null(b);
}

START_TEST(api_version_and_parameters)
{
    bfsg_loader *l;
    ck_assert_int_eq(bfsg_create(BFSG_API_VERSION + 1, &l), -EPROTO);
    ck_assert_int_eq(bfsg_create(BFSG_API_VERSION, NULL), -EINVAL);
    bfsg_destroy(NULL);
    ck_assert_int_eq(bfsg_create(BFSG_API_VERSION, &l), 0);
    ck_assert_str_eq(bfsg_error(l), "");
    ck_assert_int_eq(bfsg_set(l, "colour", "red"), -EINVAL);
    ck_assert_ptr_nonnull(strstr(bfsg_error(l), "unknown parameter 'colour'"));
    ck_assert_int_eq(bfsg_set(l, "rank", "-1"), -EINVAL);
    ck_assert_ptr_nonnull(strstr(bfsg_error(l), "rank=-1"));
    ck_assert_int_eq(bfsg_set(l, "world", "0"), -EINVAL);
    ck_assert_int_eq(bfsg_set(l, "depth", "9"), -EINVAL);
    ck_assert_int_eq(bfsg_set(l, "device", "tpu"), -EINVAL);
    ck_assert_ptr_nonnull(strstr(bfsg_error(l), "device=tpu"));
    ck_assert_int_eq(bfsg_set(l, "copy", "dma"), -EINVAL);
    ck_assert_int_eq(bfsg_set(l, "device", "cuda:1"), 0);
    ck_assert_int_eq(bfsg_set(l, "device", "cpu"), 0);
    ck_assert_int_eq(bfsg_set(l, "dtype", "f64"), 0); /* checked at open, by the daemon's parser */
    ck_assert_int_eq(bfsg_open(l, root), -EINVAL);
    ck_assert_ptr_nonnull(strstr(bfsg_error(l), "dtype"));
    ck_assert_int_eq(bfsg_set(l, "dtype", "f32"), 0);
    ck_assert_int_eq(bfsg_open(l, root), 0);
    ck_assert_int_eq(bfsg_set(l, "rank", "1"), -EBUSY);
    ck_assert_int_eq(bfsg_open(l, root), -EBUSY);
    bfsg_destroy(l);
}
END_TEST

START_TEST(cpu_bytes_equal_files)
{
    const char *kv[] = {"device", "cpu", NULL};
    bfsg_loader *l = loader(kv);
    ck_assert_msg(bfsg_open(l, root) == 0, "%s", bfsg_error(l));
    run_all(l, 0, EPOCHS, 0, 1);
    bfsg_stats st;
    ck_assert_int_eq(bfsg_get_stats(l, &st), 0);
    ck_assert_str_eq(st.device, "cpu");
    ck_assert_str_eq(st.copy, "read");
    ck_assert_uint_eq(st.batches, EPOCHS * NB);
    ck_assert_uint_eq(st.host_copies, EPOCHS * NB);
    bfsg_destroy(l);
}
END_TEST

START_TEST(rank_world_and_epochs)
{
    for (int depth = 1; depth <= 8; depth += 7) {
        char d[4];
        snprintf(d, sizeof d, "%d", depth);
        const char *kv[] = {"device", "cpu",       "rank", "1",     "world", "2", "epoch_begin",
                            "1",      "epoch_end", "3",    "depth", d,       NULL};
        bfsg_loader *l = loader(kv);
        ck_assert_msg(bfsg_open(l, root) == 0, "%s", bfsg_error(l));
        run_all(l, 1, 3, 1, 2); /* batches 1, 3 of epochs 1, 2 (5 / 2 = 2 per rank) */
        bfsg_destroy(l);
    }
    const char *bad[][4] = {{"rank", "2", "world", "2"},
                            {"world", "6", "rank", "0"},
                            {"epoch_begin", "3", "rank", "0"},
                            {"epoch_end", "4", "rank", "0"}};
    for (int i = 0; i < 4; i++) {
        const char *kv[] = {"device", "cpu", bad[i][0], bad[i][1], bad[i][2], bad[i][3], NULL};
        bfsg_loader *l = loader(kv);
        ck_assert_int_eq(bfsg_open(l, root), -EINVAL);
        ck_assert_msg(strlen(bfsg_error(l)) > 10, "no message for %s", bad[i][0]);
        bfsg_destroy(l);
    }
}
END_TEST

START_TEST(seek_resumes)
{
    const char *kv[] = {"device", "cpu", NULL};
    bfsg_loader *l = loader(kv);
    ck_assert_int_eq(bfsg_open(l, root), 0);
    bfsg_batch *b;
    ck_assert_int_eq(bfsg_next(l, &b), 0);
    ck_assert_int_eq(bfsg_seek(l, 2, 3), 0);
    ck_assert_int_eq(bfsg_next(l, &b), 0);
    ck_assert_uint_eq(b->epoch, 2);
    ck_assert_uint_eq(b->index, 3);
    check_equal_files(b);
    ck_assert_int_eq(bfsg_next(l, &b), 0);
    ck_assert_uint_eq(b->index, 4);
    ck_assert_int_eq(bfsg_next(l, &b), 0);
    ck_assert_ptr_null(b);
    ck_assert_int_eq(bfsg_seek(l, 0, 0), 0); /* back after the end */
    ck_assert_int_eq(bfsg_next(l, &b), 0);
    ck_assert_uint_eq(b->epoch, 0);
    ck_assert_uint_eq(b->index, 0);
    ck_assert_int_eq(bfsg_seek(l, 3, 0), -EINVAL);
    ck_assert_int_eq(bfsg_seek(l, 0, 5), -EINVAL);
    ck_assert_ptr_nonnull(strstr(bfsg_error(l), "batch 5"));
    bfsg_destroy(l);

    const char *kv2[] = {"device", "cpu", "rank", "1", "world", "2", NULL};
    l = loader(kv2);
    ck_assert_int_eq(bfsg_open(l, root), 0);
    ck_assert_int_eq(bfsg_seek(l, 1, 2), -EINVAL); /* rank 0's */
    ck_assert_int_eq(bfsg_seek(l, 1, 3), 0);
    ck_assert_int_eq(bfsg_next(l, &b), 0);
    ck_assert_uint_eq(b->index, 3);
    ck_assert_int_eq(bfsg_next(l, &b), 0);
    ck_assert_uint_eq(b->epoch, 2);
    ck_assert_uint_eq(b->index, 1);
    bfsg_destroy(l);
}
END_TEST

START_TEST(bad_paths_named)
{
    const char *kv[] = {"device", "cpu", NULL};
    bfsg_loader *l = loader(kv);
    char p[4200];
    snprintf(p, sizeof p, "%s/nope", tmp);
    ck_assert_int_eq(bfsg_open(l, p), -ENOENT);
    ck_assert_ptr_nonnull(strstr(bfsg_error(l), p));
    ck_assert_int_eq(bfsg_open(l, src), -ENOENT); /* a directory without epoch/ */
    ck_assert_ptr_nonnull(strstr(bfsg_error(l), "no epoch/ directory"));
    snprintf(p, sizeof p, "%s/epoch/0/batch_0", root);
    ck_assert_int_eq(bfsg_open(l, p), -ENOTDIR);
    snprintf(p, sizeof p, "%s/epoch/1/stray", root);
    ck_assert_int_eq(tu_write_file(p, "x", 1), 0);
    bfsg_destroy(l);
    const char *kv1[] = {"device", "cpu", "epoch_begin", "1", NULL};
    l = loader(kv1);
    ck_assert_int_eq(bfsg_open(l, root), -EBADMSG);
    ck_assert_ptr_nonnull(strstr(bfsg_error(l), "stray"));
    bfsg_destroy(l);
}
END_TEST

/* a truncated file, a non-batch file and a batch under another name: each named, the
 * loader goes on with the next batch */
START_TEST(bad_files_named_never_fatal)
{
    char p[4200], q[4200];
    snprintf(p, sizeof p, "%s/epoch/0/batch_1", root);
    ck_assert_int_eq(truncate(p, 5000), 0);
    snprintf(p, sizeof p, "%s/epoch/0/batch_2", root);
    ck_assert_int_eq(tu_write_file(p, "not a batch at all, just text\n", 30), 0);
    snprintf(p, sizeof p, "%s/epoch/0/batch_3", root);
    snprintf(q, sizeof q, "%s/epoch/0/batch_4", root);
    ck_assert_int_eq(rename(q, p), 0); /* batch_3 now holds batch 4 */
    ck_assert_int_eq(tu_write_file(q, "", 0), 0);
    const char *devices[] = {"cpu", "cuda"};
    for (int d = 0; d < 2; d++) {
        const char *kv[] = {"device", devices[d], "cuda_library", fake, "epoch_end", "1", NULL};
        bfsg_loader *l = loader(kv);
        ck_assert_msg(bfsg_open(l, root) == 0, "%s", bfsg_error(l));
        bfsg_batch *b;
        ck_assert_int_eq(bfsg_next(l, &b), 0);
        check_equal_files(b);
        const char *want[] = {"batch_1: not a safetensors file", "batch_2: not a safetensors file",
                              "holds epoch 0 batch 4", "batch_4: not a safetensors file"};
        for (int i = 0; i < 4; i++) {
            ck_assert_int_eq(bfsg_next(l, &b), -EBADMSG);
            ck_assert_ptr_null(b);
            ck_assert_msg(strstr(bfsg_error(l), want[i]), "%s: got '%s'", want[i], bfsg_error(l));
        }
        ck_assert_int_eq(bfsg_next(l, &b), 0);
        ck_assert_ptr_null(b);
        bfsg_destroy(l);
    }
}
END_TEST

START_TEST(cuda_bytes_equal_files_pinned_no_leaks)
{
    const char *kv[] = {"device", "cuda", "cuda_library", fake, NULL};
    bfsg_loader *l = loader(kv);
    ck_assert_msg(bfsg_open(l, root) == 0, "%s", bfsg_error(l));
    run_all(l, 0, EPOCHS, 0, 1);
    bfsg_stats st;
    ck_assert_int_eq(bfsg_get_stats(l, &st), 0);
    ck_assert_str_eq(st.device, "cuda:0 Fake CUDA Device 0");
    ck_assert_str_eq(st.copy, "staging"); /* not a batchfs mount: no mapping */
    ck_assert_uint_eq(st.staged, EPOCHS * NB);
    ck_assert_uint_eq(counter("htod_pageable"), 0);
    ck_assert_uint_eq(counter("htod_pinned"), 3 * EPOCHS * NB);
    ck_assert_uint_eq(counter("wait_unrecorded"), 0);
    ck_assert_uint_ge(counter("wait_event"), EPOCHS * NB);
    ck_assert_uint_le(counter("dev_allocs"), 3); /* a ring of 3, reused */
    bfsg_destroy(l);
    ck_assert_uint_eq(counter("dev_live"), 0);
    ck_assert_uint_eq(counter("host_live"), 0);
    ck_assert_uint_eq(counter("streams_live"), 0);
    ck_assert_uint_eq(counter("events_live"), 0);
    ck_assert_uint_eq(counter("ctx_refs"), 0);
}
END_TEST

START_TEST(cuda_rank_world_seek)
{
    const char *kv[] = {"device", "cuda:0", "cuda_library", fake, "rank", "0",
                        "world",  "2",      "depth",        "2",  NULL};
    bfsg_loader *l = loader(kv);
    ck_assert_msg(bfsg_open(l, root) == 0, "%s", bfsg_error(l));
    run_all(l, 0, EPOCHS, 0, 2);
    ck_assert_int_eq(bfsg_seek(l, 1, 2), 0);
    bfsg_batch *b;
    ck_assert_int_eq(bfsg_next(l, &b), 0);
    ck_assert_uint_eq(b->epoch, 1);
    ck_assert_uint_eq(b->index, 2);
    check_equal_files(b);
    bfsg_destroy(l);
    ck_assert_uint_eq(counter("dev_live"), 0);
}
END_TEST

START_TEST(cuda_absent_falls_back_or_fails)
{
    /* no library */
    const char *kv[] = {"cuda_library", "/nonexistent/libcuda.so.1", NULL};
    bfsg_loader *l = loader(kv);
    ck_assert_int_eq(bfsg_open(l, root), 0);
    bfsg_stats st;
    bfsg_get_stats(l, &st);
    ck_assert_str_eq(st.device, "cpu");
    ck_assert_ptr_nonnull(strstr(st.fallback, "cannot load the CUDA driver"));
    bfsg_batch *b;
    ck_assert_int_eq(bfsg_next(l, &b), 0);
    ck_assert_int_eq(b->device_type, BFSG_DEVICE_CPU);
    bfsg_destroy(l);
    const char *kv2[] = {"cuda_library", "/nonexistent/libcuda.so.1", "device", "cuda", NULL};
    l = loader(kv2);
    ck_assert_int_eq(bfsg_open(l, root), -ENODEV);
    ck_assert_ptr_nonnull(strstr(bfsg_error(l), "/nonexistent/libcuda.so.1"));
    bfsg_destroy(l);
    /* a driver without devices, via the environment's search path */
    setenv("BATCHFS_GPU_LIBCUDA", fake, 1);
    setenv("FAKE_CUDA_INIT_FAIL", "1", 1);
    l = loader(NULL);
    ck_assert_int_eq(bfsg_open(l, root), 0);
    bfsg_get_stats(l, &st);
    ck_assert_str_eq(st.device, "cpu");
    ck_assert_ptr_nonnull(strstr(st.fallback, "CUDA_ERROR_NO_DEVICE"));
    bfsg_destroy(l);
    unsetenv("FAKE_CUDA_INIT_FAIL");
    setenv("FAKE_CUDA_DEVICES", "1", 1);
    const char *kv3[] = {"device", "cuda:1", NULL};
    l = loader(kv3);
    ck_assert_int_eq(bfsg_open(l, root), -ENODEV);
    ck_assert_ptr_nonnull(strstr(bfsg_error(l), "no CUDA device 1"));
    bfsg_destroy(l);
    l = loader(NULL); /* auto with the environment's driver: the device */
    ck_assert_int_eq(bfsg_open(l, root), 0);
    ck_assert_int_eq(bfsg_next(l, &b), 0);
    ck_assert_int_eq(b->device_type, BFSG_DEVICE_CUDA);
    check_equal_files(b);
    bfsg_destroy(l);
}
END_TEST

START_TEST(cuda_failures_named)
{
    setenv("FAKE_CUDA_FAIL", "cuMemHostAlloc:2", 1);
    const char *kv2[] = {"device", "cuda", "cuda_library", fake, "depth", "2", NULL};
    bfsg_loader *l = loader(kv2);
    bfsg_batch *b;
    ck_assert_msg(bfsg_open(l, root) == 0, "%s", bfsg_error(l));
    ck_assert_int_eq(bfsg_next(l, &b), 0);
    ck_assert_int_eq(bfsg_next(l, &b), -EPROTO);
    ck_assert_ptr_nonnull(strstr(bfsg_error(l), "cuMemHostAlloc (pinned staging) failed: "
                                                "CUDA_ERROR_OUT_OF_MEMORY"));
    ck_assert_int_eq(bfsg_next(l, &b), 0); /* goes on */
    ck_assert_uint_eq(b->index, 2);
    check_equal_files(b);
    bfsg_destroy(l);
    ck_assert_uint_eq(counter("dev_live"), 0);
    ck_assert_uint_eq(counter("host_live"), 0);
    unsetenv("FAKE_CUDA_FAIL");
    setenv("FAKE_CUDA_FAIL", "cuMemAlloc_v2:1", 1);
    const char *kv[] = {"device", "cuda", "cuda_library", fake, "depth", "1", NULL};
    l = loader(kv);
    ck_assert_int_eq(bfsg_open(l, root), 0);
    ck_assert_int_eq(bfsg_next(l, &b), -EPROTO);
    ck_assert_ptr_nonnull(strstr(bfsg_error(l), "cuMemAlloc (batch buffer)"));
    bfsg_destroy(l);
}
END_TEST

/* converted tensors equal the daemon's own dtype=/normalize=/layout= batches */
static void check_convert(const char *device, const char *dtype, const char *normalize,
                          const char *layout)
{
    char opts[256], dir[4200];
    snprintf(opts, sizeof opts, "%s,dtype=%s%s%s,layout=%s", OPTS, dtype,
             normalize ? ",normalize=" : "", normalize ? normalize : "", layout);
    snprintf(dir, sizeof dir, "%s/ref-%s-%s", tmp, dtype, layout);
    write_batches(dir, opts, 1);
    const char *kv[] = {"device",
                        device,
                        "cuda_library",
                        fake,
                        "dtype",
                        dtype,
                        "layout",
                        layout,
                        "epoch_end",
                        "1",
                        normalize ? "normalize" : NULL,
                        normalize,
                        NULL};
    bfsg_loader *l = loader(kv);
    ck_assert_msg(bfsg_open(l, root) == 0, "%s", bfsg_error(l));
    bfsg_batch *b;
    int n = 0;
    while (bfsg_next(l, &b) == 0 && b) {
        char ref[4300];
        snprintf(ref, sizeof ref, "%s/epoch/0/batch_%d", dir, (int)b->index);
        uint64_t len;
        uint8_t *want = file_tensor(ref, "images", &len);
        const bfsg_tensor *t = &b->tensors[0];
        ck_assert_uint_eq(t->nbytes, len);
        int nchw = !strcmp(layout, "nchw");
        ck_assert_int_eq(t->shape[1], nchw ? 3 : 16);
        ck_assert_int_eq(t->shape[3], nchw ? 12 : 3);
        uint8_t *got = host_bytes(b, t);
        ck_assert_msg(memcmp(got, want, len) == 0, "%s %s %s: batch %d differs", device, dtype,
                      layout, (int)b->index);
        free(got);
        free(want);
        n++;
    }
    ck_assert_int_eq(n, NB);
    bfsg_stats st;
    bfsg_get_stats(l, &st);
    ck_assert_uint_eq(st.converted, NB);
    bfsg_destroy(l);
}

START_TEST(convert_matches_daemon_cpu)
{
    check_convert("cpu", "f32", NULL, "nchw");
    check_convert("cpu", "f16", "imagenet", "nhwc");
    check_convert("cpu", "bf16", "0.5,0.5,0.5/0.25,0.5,1", "nchw");
    check_convert("cpu", "u8", NULL, "nchw");
}
END_TEST

START_TEST(convert_matches_daemon_cuda)
{
    check_convert("cuda", "f32", NULL, "nchw");
    check_convert("cuda", "f16", "imagenet", "nhwc");
    check_convert("cuda", "bf16", "0.5,0.5,0.5/0.25,0.5,1", "nchw");
    check_convert("cuda", "u8", NULL, "nchw");
    ck_assert_uint_eq(counter("launches"), 4 * NB);
    ck_assert_uint_eq(counter("modules_live"), 0);
}
END_TEST

/* a set-up failure after the device was opened (here the kernel's JIT): device=auto
 * gives back everything CUDA and converts on the host; device=cuda fails naming it */
START_TEST(cuda_setup_failure_falls_back_whole)
{
    setenv("FAKE_CUDA_FAIL", "cuModuleLoadData:1", 1);
    const char *kv[] = {"cuda_library", fake, "dtype", "f32", "layout", "nchw", NULL};
    bfsg_loader *l = loader(kv);
    ck_assert_msg(bfsg_open(l, root) == 0, "%s", bfsg_error(l));
    bfsg_stats st;
    bfsg_get_stats(l, &st);
    ck_assert_str_eq(st.device, "cpu");
    ck_assert_ptr_nonnull(strstr(st.fallback, "cuModuleLoadData (the conversion kernel) failed"));
    ck_assert_uint_eq(counter("ctx_refs"), 0);
    ck_assert_uint_eq(counter("streams_live"), 0);
    bfsg_batch *b;
    ck_assert_int_eq(bfsg_next(l, &b), 0);
    ck_assert_int_eq(b->device_type, BFSG_DEVICE_CPU);
    ck_assert_int_eq(b->tensors[0].dtype, BFSG_F32);
    ck_assert_int_eq(b->tensors[0].shape[1], 3);
    bfsg_destroy(l);
    setenv("FAKE_CUDA_FAIL", "cuModuleLoadData:2", 1); /* the fake counts per process */
    const char *kv2[] = {"device", "cuda", "cuda_library", fake, "dtype", "f32", NULL};
    l = loader(kv2);
    ck_assert_int_eq(bfsg_open(l, root), -EPROTO);
    ck_assert_ptr_nonnull(strstr(bfsg_error(l), "CUDA_ERROR_INVALID_IMAGE"));
    ck_assert_uint_eq(counter("ctx_refs"), 0);
    bfsg_destroy(l);
}
END_TEST

START_TEST(convert_refuses_float_files)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/f32", tmp);
    write_batches(dir, OPTS ",dtype=f32", 1);
    const char *kv[] = {"device", "cpu", "dtype", "f16", NULL};
    bfsg_loader *l = loader(kv);
    ck_assert_int_eq(bfsg_open(l, dir), 0);
    bfsg_batch *b;
    ck_assert_int_eq(bfsg_next(l, &b), -EINVAL);
    ck_assert_ptr_nonnull(strstr(bfsg_error(l), "images are F32"));
    bfsg_destroy(l);
    l = loader((const char *[]){"normalize", "imagenet", NULL});
    ck_assert_int_eq(bfsg_open(l, root), -EINVAL);
    ck_assert_ptr_nonnull(strstr(bfsg_error(l), "normalize=imagenet needs dtype"));
    bfsg_destroy(l);
}
END_TEST

/* retained batches and DLPack tensors keep their bytes across bfsg_next and outlive the
 * loader; their memory is freed by the last release */
static void retained(const char *device)
{
    const char *kv[] = {"device", device, "cuda_library", fake, "depth", "2", NULL};
    bfsg_loader *l = loader(kv);
    ck_assert_msg(bfsg_open(l, root) == 0, "%s", bfsg_error(l));
    bfsg_batch *b, *keep[3];
    void *dl[3];
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(bfsg_next(l, &b), 0);
        keep[i] = b;
        ck_assert_int_eq(bfsg_batch_retain(b), 0);
        ck_assert_int_eq(bfsg_batch_dlpack(b, 1, &dl[i]), 0);
        bfsg_DLManagedTensor *m = dl[i];
        ck_assert_int_eq(m->dl_tensor.ndim, 1);
        ck_assert_int_eq(m->dl_tensor.shape[0], 4);
        ck_assert_int_eq(m->dl_tensor.dtype.code, BFSG_kDLInt);
        ck_assert_int_eq(m->dl_tensor.dtype.bits, 64);
        ck_assert_int_eq(m->dl_tensor.device.device_type,
                         b->device_type == BFSG_DEVICE_CUDA ? BFSG_kDLCUDA : BFSG_kDLCPU);
        ck_assert_ptr_eq(m->dl_tensor.data, b->tensors[1].data);
    }
    ck_assert_int_eq(bfsg_batch_dlpack(keep[0], 3, &dl[0]), -EINVAL);
    for (int i = 0; i < 6; i++) /* cycle the ring a few times */
        ck_assert_int_eq(bfsg_next(l, &b), 0);
    for (int i = 0; i < 3; i++)
        check_equal_files(keep[i]);
    bfsg_batch_release(keep[0]);
    bfsg_destroy(l); /* keep[1], keep[2] and three DLPack tensors still out */
    check_equal_files(keep[1]);
    bfsg_batch_release(keep[1]);
    bfsg_batch_release(keep[2]);
    for (int i = 0; i < 3; i++) {
        bfsg_DLManagedTensor *m = dl[i];
        if (i == 2)
            check_equal_files(keep[2]); /* the deleter's hold keeps it */
        m->deleter(m);
    }
    if (!strcmp(device, "cuda")) {
        ck_assert_uint_eq(counter("dev_live"), 0);
        ck_assert_uint_eq(counter("host_live"), 0);
        ck_assert_uint_eq(counter("ctx_refs"), 0);
    }
}

/* the usual Python loop: each batch held until the next one is taken (retained, released
 * after bfsg_next) reuses the slots that come back instead of allocating per batch */
START_TEST(held_batches_reuse_slots)
{
    const char *devices[] = {"cpu", "cuda"};
    for (int d = 0; d < 2; d++) {
        const char *kv[] = {"device", devices[d], "cuda_library", fake, "depth", "3", NULL};
        bfsg_loader *l = loader(kv);
        ck_assert_msg(bfsg_open(l, root) == 0, "%s", bfsg_error(l));
        bfsg_batch *b, *prev = NULL;
        int n = 0;
        while (bfsg_next(l, &b) == 0 && b) {
            bfsg_batch_retain(b);
            bfsg_batch_release(prev);
            check_equal_files(b);
            prev = b, n++;
        }
        ck_assert_int_eq(n, EPOCHS * NB);
        bfsg_batch_release(prev);
        bfsg_destroy(l);
    }
    /* 3 ring slots and 1 circulating through the spare list, not one per batch */
    ck_assert_uint_le(counter("dev_allocs"), 4);
    ck_assert_uint_eq(counter("dev_live"), 0);
    ck_assert_uint_eq(counter("host_live"), 0);
}
END_TEST

START_TEST(retained_batches_outlive_loader)
{
    retained("cpu");
    retained("cuda");
}
END_TEST

/* ---- token batches ----------------------------------------------------------------- */

/* tmp/tok.bfs: docs documents of u16 tokens, each ending with 50256: most short, some of
 * 17..64 tokens, a few of 65..299, so that pack=bucket batches come in several shapes */
static void make_token_dataset(char *out, size_t cap, int docs)
{
    char bin[4200], err[1024];
    snprintf(bin, sizeof bin, "%s/train.bin", tmp);
    snprintf(out, cap, "%s/tok.bfs", tmp);
    FILE *f = fopen(bin, "wb");
    ck_assert_ptr_nonnull(f);
    uint32_t x = 12345;
#define NEXT() (x = x * 1103515245u + 12345u, x >> 8)
    for (int d = 0; d < docs; d++) {
        uint32_t r = NEXT() % 10;
        uint32_t n = r < 6 ? 1 + NEXT() % 16 : r < 9 ? 17 + NEXT() % 48 : 65 + NEXT() % 235;
        for (uint32_t i = 0; i + 1 < n; i++) {
            uint16_t t = (uint16_t)(NEXT() % 50000);
            ck_assert_uint_eq(fwrite(&t, 2, 1, f), 1);
        }
        uint16_t sep = 50256;
        ck_assert_uint_eq(fwrite(&sep, 2, 1, f), 1);
    }
#undef NEXT
    fclose(f);
    bfs_pack_opts o = {.tokens = 2, .doc_sep = 50256};
    bfs_pack_report rep;
    ck_assert_msg(bfs_pack(bin, out, &o, &rep, NULL, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(rep.packed, (uint64_t)docs);
    bfs_pack_report_free(&rep);
}

static const char *const CONCAT_NAMES[] = {"tokens", "positions", NULL};
static const char *const PAD_NAMES[] = {"lengths", "indices", "tokens", "mask", NULL};

/* b holds its file's tensors as they are, in data order, named names: dtype, shape,
 * element strides, bytes, alignment. Returns the device bytes they take (each tensor
 * rounded up to 256) and the tokens tensor's shape in *rows, *width. */
static uint64_t check_tokens_equal_file(const bfsg_batch *b, const char *const *names,
                                        int64_t *rows, int64_t *width)
{
    uint8_t *data;
    size_t len;
    ck_assert_int_eq(tu_read_file(b->path, &data, &len), 0);
    bfs_st_file *f = malloc(sizeof *f);
    ck_assert_int_eq(bfs_st_parse(data, len, f), 0);
    ck_assert_str_eq(bfs_st_meta_get(f, "kind"), "tokens");
    ck_assert_uint_eq(b->n_tensors, f->n_tensors);
    uint64_t prev = 0, dev = 0;
    for (uint32_t i = 0; i < b->n_tensors; i++) {
        const bfsg_tensor *t = &b->tensors[i];
        ck_assert_ptr_nonnull(names[i]);
        ck_assert_str_eq(t->name, names[i]);
        const bfs_st_tensor *ft = bfs_st_find(f, t->name);
        ck_assert_ptr_nonnull(ft);
        ck_assert_uint_ge(ft->offset, prev); /* data order */
        prev = ft->offset;
        size_t el = ft->dtype == BFS_DT_I32 ? 4 : ft->dtype == BFS_DT_I64 ? 8 : 1;
        ck_assert_int_eq(t->dtype, ft->dtype == BFS_DT_I32   ? BFSG_I32
                                   : ft->dtype == BFS_DT_I64 ? BFSG_I64
                                                             : BFSG_U8);
        ck_assert_int_eq(
            ft->dtype == BFS_DT_I32 || ft->dtype == BFS_DT_I64 || ft->dtype == BFS_DT_U8, 1);
        ck_assert_uint_eq(t->ndim, ft->ndim);
        int64_t stride = 1;
        for (int d = (int)ft->ndim - 1; d >= 0; d--) {
            ck_assert_int_eq(t->shape[d], (int64_t)ft->shape[d]);
            ck_assert_int_eq(t->strides[d], stride);
            stride *= (int64_t)ft->shape[d];
        }
        ck_assert_uint_eq(t->nbytes, ft->nbytes);
        ck_assert_uint_eq(t->nbytes, (uint64_t)stride * el);
        uint8_t *got = host_bytes(b, t);
        ck_assert_msg(memcmp(got, data + ft->offset, ft->nbytes) == 0, "%s: %s differs", b->path,
                      t->name);
        free(got);
        ck_assert_uint_eq((uintptr_t)t->data % (b->device_type == BFSG_DEVICE_CUDA ? 256 : el), 0);
        dev += (t->nbytes + 255) / 256 * 256;
        if (!strcmp(t->name, "tokens"))
            *rows = t->shape[0], *width = t->shape[1];
    }
    ck_assert_ptr_null(names[b->n_tensors]);
    free(f);
    free(data);
    return dev;
}

/* Every batch of every pack through the loader, on the host and on the fake device, at
 * depth 1 and 3: the files' tensors, byte for byte. pack=bucket batches differ in rows
 * and width; at depth 1 (one slot) the device buffer is allocated once per batch larger
 * than all before it (grown, never overflowed: the fake fails copies outside an
 * allocation), and never for a smaller one. */
START_TEST(tokens_delivered_as_files)
{
    char bfs[4200], dir[4300];
    make_token_dataset(bfs, sizeof bfs, 120);
    struct {
        const char *name, *opts;
        const char *const *names;
        int min_shapes;
    } cases[] = {
        {"concat", "batch=3,seq_len=50,positions=1", CONCAT_NAMES, 1},
        {"pad", "pack=pad,batch=4,seq_len=100,pad_id=7", PAD_NAMES, 1},
        {"bucket", "pack=bucket,buckets=16:64:300,batch_tokens=600,drop_last=0,seed=2", PAD_NAMES,
         3},
    };
    for (int c = 0; c < 3; c++) {
        snprintf(dir, sizeof dir, "%s/tok_%s", tmp, cases[c].name);
        uint64_t nb = write_batches_of(bfs, dir, cases[c].opts, 2);
        for (int v = 0; v < 4; v++) {
            const char *dev = v < 2 ? "cpu" : "cuda", *depth = v % 2 ? "3" : "1";
            const char *kv[] = {"device", dev, "cuda_library", fake, "depth", depth, NULL};
            bfsg_loader *l = loader(kv);
            /* before the open: its producer thread may copy (and allocate) the first
             * batch before this thread reads the counter (seen under ThreadSanitizer) */
            unsigned long long allocs0 = counter("dev_allocs");
            ck_assert_msg(bfsg_open(l, dir) == 0, "%s", bfsg_error(l));
            uint64_t n = 0, biggest = 0, grows = 0;
            int64_t shapes[64][2];
            int n_shapes = 0;
            bfsg_batch *b;
            for (;;) {
                ck_assert_msg(bfsg_next(l, &b) == 0, "%s %s: %s", cases[c].name, dev,
                              bfsg_error(l));
                if (!b)
                    break;
                ck_assert_uint_eq(b->epoch, n / nb);
                ck_assert_uint_eq(b->index, n % nb);
                ck_assert_int_eq(b->device_type, v < 2 ? BFSG_DEVICE_CPU : BFSG_DEVICE_CUDA);
                int64_t r = 0, w = 0;
                uint64_t bytes = check_tokens_equal_file(b, cases[c].names, &r, &w);
                ck_assert_int_gt(r, 0);
                if (bytes > biggest)
                    biggest = bytes, grows++;
                int k = 0;
                while (k < n_shapes && (shapes[k][0] != r || shapes[k][1] != w))
                    k++;
                if (k == n_shapes && n_shapes < 64)
                    shapes[n_shapes][0] = r, shapes[n_shapes][1] = w, n_shapes++;
                n++;
            }
            ck_assert_uint_eq(n, 2 * nb);
            ck_assert_int_ge(n_shapes, cases[c].min_shapes);
            bfsg_stats st;
            ck_assert_int_eq(bfsg_get_stats(l, &st), 0);
            ck_assert_uint_eq(st.batches, 2 * nb);
            ck_assert_uint_eq(st.converted, 0);
            if (v == 2) { /* cuda, depth 1 */
                ck_assert_uint_eq(counter("dev_allocs") - allocs0, grows);
                if (c == 2) /* seed=2 begins with a [2,16] batch, then larger ones */
                    ck_assert_uint_ge(grows, 3);
                ck_assert_uint_eq(counter("wait_unrecorded"), 0);
            }
            bfsg_destroy(l);
            ck_assert_uint_eq(counter("dev_live"), 0);
            ck_assert_uint_eq(counter("host_live"), 0);
        }
    }
}
END_TEST

/* dtype= (u8 too) and layout= refused on token batches, naming the file (normalize=
 * alone is refused at bfsg_open, as for images); DLPack hands
 * tokens out as kDLInt 32 (host and device); a token batch under another name refused */
START_TEST(tokens_refuse_conversion_dlpack_int32)
{
    char bfs[4200], dir[4300], p[4400], q[4400];
    make_token_dataset(bfs, sizeof bfs, 120);
    snprintf(dir, sizeof dir, "%s/tok", tmp);
    uint64_t nb = write_batches_of(bfs, dir, "batch=2,seq_len=40", 1);
    ck_assert_uint_ge(nb, 3);
    const char *conv[][2] = {{"dtype", "f16"}, {"dtype", "u8"}, {"layout", "nchw"}};
    for (int i = 0; i < 3; i++) {
        const char *kv[] = {"device", "cpu", conv[i][0], conv[i][1], NULL};
        bfsg_loader *l = loader(kv);
        ck_assert_msg(bfsg_open(l, dir) == 0, "%s", bfsg_error(l));
        bfsg_batch *b;
        ck_assert_int_eq(bfsg_next(l, &b), -EINVAL);
        ck_assert_ptr_null(b);
        ck_assert_msg(strstr(bfsg_error(l), "batch_0: a token batch (pack=concat)") &&
                          strstr(bfsg_error(l), "dtype=, normalize= and layout="),
                      "%s", bfsg_error(l));
        ck_assert_int_eq(bfsg_next(l, &b), -EINVAL); /* each batch, and goes on */
        ck_assert_ptr_nonnull(strstr(bfsg_error(l), "batch_1:"));
        bfsg_destroy(l);
    }
    const char *devices[] = {"cpu", "cuda"};
    for (int d = 0; d < 2; d++) {
        const char *kv[] = {"device", devices[d], "cuda_library", fake, NULL};
        bfsg_loader *l = loader(kv);
        ck_assert_msg(bfsg_open(l, dir) == 0, "%s", bfsg_error(l));
        bfsg_batch *b;
        ck_assert_int_eq(bfsg_next(l, &b), 0);
        ck_assert_uint_eq(b->n_tensors, 1);
        void *mv;
        ck_assert_int_eq(bfsg_batch_dlpack(b, 0, &mv), 0);
        bfsg_DLManagedTensor *m = mv;
        ck_assert_int_eq(m->dl_tensor.dtype.code, BFSG_kDLInt);
        ck_assert_int_eq(m->dl_tensor.dtype.bits, 32);
        ck_assert_int_eq(m->dl_tensor.dtype.lanes, 1);
        ck_assert_int_eq(m->dl_tensor.ndim, 2);
        ck_assert_int_eq(m->dl_tensor.shape[0], 2);
        ck_assert_int_eq(m->dl_tensor.shape[1], 40);
        ck_assert_int_eq(m->dl_tensor.device.device_type, d ? BFSG_kDLCUDA : BFSG_kDLCPU);
        ck_assert_ptr_eq(m->dl_tensor.data, b->tensors[0].data);
        bfsg_destroy(l); /* the capsule outlives the loader */
        m->deleter(m);
        ck_assert_uint_eq(counter("dev_live"), 0);
    }
    /* batch_1 now holds batch 2: refused by its metadata, the loader goes on */
    snprintf(p, sizeof p, "%s/epoch/0/batch_1", dir);
    snprintf(q, sizeof q, "%s/epoch/0/batch_2", dir);
    ck_assert_int_eq(rename(q, p), 0);
    ck_assert_int_eq(tu_write_file(q, "", 0), 0);
    const char *kv[] = {"device", "cpu", NULL};
    bfsg_loader *l = loader(kv);
    ck_assert_msg(bfsg_open(l, dir) == 0, "%s", bfsg_error(l));
    bfsg_batch *b;
    ck_assert_int_eq(bfsg_next(l, &b), 0);
    int64_t r, w;
    check_tokens_equal_file(b, (const char *const[]){"tokens", NULL}, &r, &w);
    ck_assert_int_eq(bfsg_next(l, &b), -EBADMSG);
    ck_assert_ptr_nonnull(strstr(bfsg_error(l), "holds epoch 0 batch 2"));
    ck_assert_int_eq(bfsg_next(l, &b), -EBADMSG);
    ck_assert_ptr_nonnull(strstr(bfsg_error(l), "batch_2: not a safetensors file"));
    if (nb > 3) {
        ck_assert_int_eq(bfsg_next(l, &b), 0);
        ck_assert_uint_eq(b->index, 3);
    }
    bfsg_destroy(l);
}
END_TEST

/* ---- multi-field batches ----------------------------------------------------------- */

/* tmp/fields.bfs: n samples of fields jpg (JPEG), caption (text), tok (u16 tokens,
 * variable) and emb (f32 [3], fixed) */
static void make_fields_dataset(char *out, size_t cap, int n)
{
    snprintf(out, cap, "%s/fields.bfs", tmp);
    bfs_field fs[4] = {{.name = "jpg", .kind = BFS_FIELD_IMAGE, .follows = BFS_FIELD_NONE},
                       {.name = "caption",
                        .kind = BFS_FIELD_TEXT,
                        .flags = BFS_FIELDF_VARIABLE,
                        .follows = BFS_FIELD_NONE},
                       {.name = "tok",
                        .kind = BFS_FIELD_TOKENS,
                        .dtype = BFS_FDT_U16,
                        .flags = BFS_FIELDF_VARIABLE,
                        .follows = BFS_FIELD_NONE},
                       {.name = "emb",
                        .kind = BFS_FIELD_ARRAY,
                        .dtype = BFS_FDT_F32,
                        .rank = 1,
                        .shape = {3},
                        .follows = BFS_FIELD_NONE}};
    char err[512];
    bfs_writer *w;
    ck_assert_int_eq(bfs_writer_create(out, 0, &w, err, sizeof err), 0);
    ck_assert_msg(bfs_writer_set_fields(w, fs, 4, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(bfs_writer_add_class(w, "a"), 0);
    for (int i = 0; i < n; i++) {
        tu_jpeg_opts o = {
            .width = 30 + i, .height = 20 + 2 * i, .quality = 90, .seed = (uint64_t)i};
        uint8_t *jpg;
        size_t len;
        bfs_jpeg_header h;
        ck_assert_int_eq(tu_make_jpeg(&o, &jpg, &len), 0);
        ck_assert_int_eq(bfs_jpeg_parse_header(jpg, len, &h), 0);
        char cap_[32];
        int cl = snprintf(cap_, sizeof cap_, "caption %d%s", i, i % 2 ? " caf\xc3\xa9" : "");
        uint16_t tok[8];
        uint32_t nt = 1 + (uint32_t)i % 8;
        for (uint32_t t = 0; t < nt; t++)
            tok[t] = (uint16_t)(1000 * i + t);
        float emb[3] = {(float)i, 0.5f, -1};
        bfs_value_in v[4] = {
            {.data = jpg,
             .len = len,
             .checksum = bfs_xxh64(jpg, len, 0),
             .width = (uint16_t)o.width,
             .height = (uint16_t)o.height,
             .flags = bfs_jpeg_sample_flags(&h)},
            {.data = cap_,
             .len = (size_t)cl,
             .checksum = bfs_xxh64(cap_, (size_t)cl, 0),
             .raw_size = (uint32_t)cl},
            {.data = tok, .len = nt * 2, .checksum = bfs_xxh64(tok, nt * 2, 0), .raw_size = nt},
            {.data = emb, .len = 12, .checksum = bfs_xxh64(emb, 12, 0), .raw_size = 3},
        };
        ck_assert_int_eq(bfs_writer_add_record(w, 0, v), 0);
        free(jpg);
    }
    ck_assert_msg(bfs_writer_finish(w, 0, err, sizeof err) == 0, "%s", err);
}

/* A multi-field dataset's batches: every tensor delivered (images, labels, indices, then
 * the fields in the file's header order), each equal to the file, found by name, and
 * handed out through DLPack with its dtype (u16 tokens as kDLUInt 16), on the host and
 * the fake device, with dtype= conversion of the images too. */
START_TEST(fields_delivered_by_name)
{
    char bfs[4200], dir[4300];
    make_fields_dataset(bfs, sizeof bfs, 12);
    snprintf(dir, sizeof dir, "%s/fields", tmp);
    ck_assert_uint_eq(write_batches_of(bfs, dir, "batch=4,size=16", 1), 3);
    static const char *const names[] = {"images",      "labels",          "indices",
                                        "caption",     "caption_lengths", "tok",
                                        "tok_lengths", "tok_mask",        "emb"};
    const char *devices[] = {"cpu", "cuda"};
    for (int d = 0; d < 4; d++) {
        const char *kv[] = {
            "device", devices[d % 2], "cuda_library", fake, d >= 2 ? "dtype" : NULL, "f32", NULL};
        bfsg_loader *l = loader(kv);
        ck_assert_msg(bfsg_open(l, dir) == 0, "%s", bfsg_error(l));
        for (int k = 0; k < 3; k++) {
            bfsg_batch *b;
            ck_assert_msg(bfsg_next(l, &b) == 0 && b, "%s", bfsg_error(l));
            ck_assert_uint_eq(b->n_tensors, 9);
            for (uint32_t i = 0; i < 9; i++) {
                const bfsg_tensor *t = &b->tensors[i];
                ck_assert_str_eq(t->name, names[i]);
                ck_assert_int_eq(bfsg_batch_find(b, names[i]), (int)i);
                if (i == 0 && d >= 2)
                    continue; /* converted: checked against the daemon elsewhere */
                uint64_t n;
                uint8_t *want = file_tensor(b->path, t->name, &n);
                uint8_t *got = host_bytes(b, t);
                ck_assert_uint_eq(t->nbytes, n);
                ck_assert_msg(memcmp(got, want, n) == 0, "%s: %s differs", b->path, t->name);
                free(got);
                free(want);
            }
            ck_assert_int_eq(b->tensors[0].dtype, d >= 2 ? BFSG_F32 : BFSG_U8);
            ck_assert_int_eq(b->tensors[3].dtype, BFSG_U8);
            ck_assert_int_eq(b->tensors[3].ndim, 2);
            ck_assert_int_eq(b->tensors[4].dtype, BFSG_I32);
            ck_assert_int_eq(b->tensors[5].dtype, BFSG_U16);
            ck_assert_int_eq(b->tensors[5].shape[1], 8);
            ck_assert_int_eq(b->tensors[7].dtype, BFSG_U8); /* tok_mask */
            ck_assert_int_eq(b->tensors[8].dtype, BFSG_F32);
            ck_assert_int_eq(bfsg_batch_find(b, "nope"), -1);
            void *mv;
            ck_assert_int_eq(bfsg_batch_dlpack(b, (uint32_t)bfsg_batch_find(b, "tok"), &mv), 0);
            bfsg_DLManagedTensor *m = mv;
            ck_assert_int_eq(m->dl_tensor.dtype.code, BFSG_kDLUInt);
            ck_assert_int_eq(m->dl_tensor.dtype.bits, 16);
            ck_assert_int_eq(m->dl_tensor.ndim, 2);
            ck_assert_int_eq(m->dl_tensor.shape[0], 4);
            ck_assert_ptr_eq(m->dl_tensor.data, b->tensors[5].data);
            m->deleter(m);
        }
        bfsg_destroy(l);
        ck_assert_uint_eq(counter("dev_live"), 0);
    }
    ck_assert_int_eq(bfsg_batch_find(NULL, "images"), -1);
}
END_TEST

/* the 8 + N header bytes of a batch file */
static uint64_t header_bytes(const char *path)
{
    uint8_t *data;
    size_t len;
    uint64_t n;
    ck_assert_int_eq(tu_read_file(path, &data, &len), 0);
    ck_assert_int_eq(bfs_st_header_len(data, &n), 0);
    free(data);
    return 8 + n;
}

/* Headers over 4 KiB (the loader's first read) are read whole: 240 images per batch,
 * whose labels and indices (16 * 240 bytes) end just past a page, and 224 token rows
 * (pack=pad) likewise; before, the loader took the header size from a parse that had
 * not filled it. Host and fake device, every tensor equal to the file. */
START_TEST(headers_over_4k)
{
    char big[4200], dir[4300], bfs[4200];
    snprintf(big, sizeof big, "%s/big", tmp);
    ck_assert_int_eq(tu_make_imagefolder(big, 3, 80, 8, 16, 3), 0);
    snprintf(dir, sizeof dir, "%s/img240", tmp);
    ck_assert_uint_eq(write_batches_of(big, dir, "batch=240,size=8", 1), 1);
    make_token_dataset(bfs, sizeof bfs, 240);
    char tdir[4300];
    snprintf(tdir, sizeof tdir, "%s/pad224", tmp);
    ck_assert_uint_eq(write_batches_of(bfs, tdir, "pack=pad,batch=224,seq_len=8", 1), 1);
    const char *dirs[] = {dir, tdir};
    for (int k = 0; k < 2; k++) {
        char p[4400];
        snprintf(p, sizeof p, "%s/epoch/0/batch_0", dirs[k]);
        ck_assert_uint_gt(header_bytes(p), 4096);
        for (int d = 0; d < 2; d++) {
            const char *kv[] = {"device", d ? "cuda" : "cpu", "cuda_library", fake, NULL};
            bfsg_loader *l = loader(kv);
            ck_assert_msg(bfsg_open(l, dirs[k]) == 0, "%s", bfsg_error(l));
            bfsg_batch *b;
            ck_assert_msg(bfsg_next(l, &b) == 0, "%s", bfsg_error(l));
            ck_assert_ptr_nonnull(b);
            ck_assert_uint_eq(b->n_tensors, k ? 4 : 3);
            for (uint32_t i = 0; i < b->n_tensors; i++) {
                uint64_t n;
                uint8_t *want = file_tensor(p, b->tensors[i].name, &n);
                uint8_t *got = host_bytes(b, &b->tensors[i]);
                ck_assert_uint_eq(b->tensors[i].nbytes, n);
                ck_assert_msg(memcmp(got, want, n) == 0, "%s differs", b->tensors[i].name);
                free(got);
                free(want);
            }
            ck_assert_int_eq(b->tensors[0].shape[0], k ? 224 : 240);
            bfsg_destroy(l);
        }
    }
}
END_TEST

static Suite *gpu_suite(void)
{
    Suite *s = suite_create("gpu");
    TCase *tc = tcase_create("loader");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, api_version_and_parameters);
    tcase_add_test(tc, cpu_bytes_equal_files);
    tcase_add_test(tc, rank_world_and_epochs);
    tcase_add_test(tc, seek_resumes);
    tcase_add_test(tc, bad_paths_named);
    tcase_add_test(tc, bad_files_named_never_fatal);
    tcase_add_test(tc, cuda_bytes_equal_files_pinned_no_leaks);
    tcase_add_test(tc, cuda_rank_world_seek);
    tcase_add_test(tc, cuda_absent_falls_back_or_fails);
    tcase_add_test(tc, cuda_failures_named);
    tcase_add_test(tc, convert_matches_daemon_cpu);
    tcase_add_test(tc, convert_matches_daemon_cuda);
    tcase_add_test(tc, convert_refuses_float_files);
    tcase_add_test(tc, cuda_setup_failure_falls_back_whole);
    tcase_add_test(tc, retained_batches_outlive_loader);
    tcase_add_test(tc, held_batches_reuse_slots);
    tcase_add_test(tc, tokens_delivered_as_files);
    tcase_add_test(tc, tokens_refuse_conversion_dlpack_int32);
    tcase_add_test(tc, headers_over_4k);
    tcase_add_test(tc, fields_delivered_by_name);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(gpu_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
