/*
 * resize_internal.h — test hooks of engine/resize.c. Only tests/check_resize.c and
 * benchmarks include this; the product never calls these functions.
 *
 * The hooks change process-wide state: set them before starting resizes, never while
 * another thread may be inside resize_rgb8.
 */
#ifndef BATCHFS_ENGINE_RESIZE_INTERNAL_H
#define BATCHFS_ENGINE_RESIZE_INTERNAL_H

#include <stddef.h>

/* Kernel implementations of resize_rgb8. All give identical bytes. */
typedef enum resize_path {
    RESIZE_PATH_AUTO = 0,     /* the fastest the CPU supports (the default) */
    RESIZE_PATH_PORTABLE = 1, /* plain C, auto-vectorised for the build's baseline ISA */
    RESIZE_PATH_AVX2 = 2,     /* x86-64 AVX2 kernels, chosen at run time */
    RESIZE_PATH_AVX512 = 3, /* x86-64 AVX-512 (F, BW, VL, VNNI, VBMI) kernels, chosen at run time */
} resize_path;

/*
 * resize_force_path - make later resize_rgb8 calls use one kernel path.
 * Returns 0, or -ENOTSUP if the path is not built in or the CPU lacks it (the setting
 * is then unchanged), or -EINVAL for an unknown value.
 */
int resize_force_path(resize_path path);

/* resize_active_path - the path (never AUTO) resize_rgb8 uses with the current setting:
 * a forced one, else the fastest the CPU has up to what BATCHFS_RESIZE (auto, portable,
 * avx2, avx512; read once) allows. */
resize_path resize_active_path(void);

/* resize_parse_path - the path BATCHFS_RESIZE's value v names, or -1. */
int resize_parse_path(const char *v);

/*
 * resize_test_limit_scratch - refuse to grow any scratch beyond max_bytes (0: no
 * limit), so tests can reach resize_rgb8's -ENOMEM path deterministically.
 */
void resize_test_limit_scratch(size_t max_bytes);

#endif
