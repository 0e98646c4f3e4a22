/*
 * dlpack.h — the DLPack 0.8 C ABI (dmlc/dlpack include/dlpack/dlpack.h, Apache-2.0
 * interface), restated: the structs bfsg_batch_dlpack hands out. Internal to gpu/; the
 * Python binding (gpu/python/batchfs_gpu.py) mirrors the same layout with ctypes.
 */
#ifndef BATCHFS_GPU_DLPACK_H
#define BATCHFS_GPU_DLPACK_H

#include <stdint.h>

enum { BFSG_kDLCPU = 1, BFSG_kDLCUDA = 2 };
enum { BFSG_kDLInt = 0, BFSG_kDLUInt = 1, BFSG_kDLFloat = 2, BFSG_kDLBfloat = 4 };

typedef struct bfsg_DLDevice {
    int32_t device_type;
    int32_t device_id;
} bfsg_DLDevice;

typedef struct bfsg_DLDataType {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
} bfsg_DLDataType;

typedef struct bfsg_DLTensor {
    void *data;
    bfsg_DLDevice device;
    int32_t ndim;
    bfsg_DLDataType dtype;
    int64_t *shape;
    int64_t *strides; /* in elements */
    uint64_t byte_offset;
} bfsg_DLTensor;

typedef struct bfsg_DLManagedTensor {
    bfsg_DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct bfsg_DLManagedTensor *self);
} bfsg_DLManagedTensor;

#endif
