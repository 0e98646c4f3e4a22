/* utf8.c — UTF-8 validation (see utf8.h). */
#include "base/utf8.h"

size_t bfs_utf8_seq(const uint8_t *p, const uint8_t *end)
{
    uint8_t c = p[0];
    size_t n;
    uint8_t lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    if (c < 0x80)
        return 1;
    if (c < 0xc2)
        return 0;
    if (c < 0xe0)
        n = 2;
    else if (c < 0xf0) {
        n = 3;
        if (c == 0xe0)
            lo = 0xa0;
        else if (c == 0xed)
            hi = 0x9f;
    } else if (c < 0xf5) {
        n = 4;
        if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f;
    } else
        return 0;
    if ((size_t)(end - p) < n)
        return 0;
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    return n;
}

int bfs_utf8_valid(const uint8_t *s, size_t n)
{
    const uint8_t *end = s + n;
    while (s < end) {
        size_t k = bfs_utf8_seq(s, end);
        if (!k)
            return 0;
        s += k;
    }
    return 1;
}
