/* jsonstr.c — see jsonstr.h. */
#include "base/jsonstr.h"

#include <stdio.h>

void bfs_json_escape(char *dst, size_t cap, const char *s)
{
    size_t o = 0;
    for (; *s && o + 7 < cap; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            dst[o++] = '\\', dst[o++] = (char)ch;
        else if (ch < 0x20)
            o += (size_t)snprintf(dst + o, cap - o, "\\u%04x", ch);
        else
            dst[o++] = (char)ch;
    }
    dst[o] = 0;
}
