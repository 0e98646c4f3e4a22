/* safetensors_internal.h — shared by safetensors.c (dtypes, parser) and
 * safetensors_write.c (encoder) only. */
#ifndef BATCHFS_ENGINE_SAFETENSORS_INTERNAL_H
#define BATCHFS_ENGINE_SAFETENSORS_INTERNAL_H

#include "engine/safetensors.h"

/* 1 when dt is a dtype of the table (below BFS_DT_COUNT), else 0. */
int bfs_st_dtype_valid(bfs_dtype dt);

/* 1 when dt is a dtype batch images may have (U8, F16, BF16, F32), else 0. */
int bfs_st_image_dtype(bfs_dtype dt);

#endif
