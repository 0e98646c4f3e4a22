/* remote_internal.h — shared by the C files of engine/remote/ only. */
#ifndef BATCHFS_ENGINE_REMOTE_REMOTE_INTERNAL_H
#define BATCHFS_ENGINE_REMOTE_REMOTE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* Decimal digits [s, s + n) into *v (<= max). -1 when empty, not digits or too large. */
int bfs_remote_decimal(const char *s, size_t n, uint64_t max, uint64_t *v);

#endif
