/*
 * jsonstr.h — a C string as the body of a JSON string, for the JSON batchfs writes
 * (/stats, the autotuner's reasons): quotes and backslashes escaped, control characters
 * as \uXXXX, other bytes as they are (the strings written are UTF-8 already).
 */
#ifndef BATCHFS_BASE_JSONSTR_H
#define BATCHFS_BASE_JSONSTR_H

#include <stddef.h>

/* bfs_json_escape - s escaped into dst (cap >= 1 bytes, NUL-terminated), cut before an
 * escape that would not fit whole. */
void bfs_json_escape(char *dst, size_t cap, const char *s);

#endif
