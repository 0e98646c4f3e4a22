/*
 * utf8.h — UTF-8 validation (RFC 3629), for every layer that checks text it did not
 * write: safetensors headers, captions from shards and manifests, text tokenized at pack
 * time.
 */
#ifndef BATCHFS_BASE_UTF8_H
#define BATCHFS_BASE_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* bfs_utf8_seq - the length of the valid UTF-8 sequence at p (p < end), or 0 when it is
 * invalid: overlong forms, surrogates, code points above U+10FFFF and sequences cut short
 * by end are invalid. */
size_t bfs_utf8_seq(const uint8_t *p, const uint8_t *end);

/* bfs_utf8_valid - 1 when s[0..n) is well-formed UTF-8, else 0. */
int bfs_utf8_valid(const uint8_t *s, size_t n);

#endif
