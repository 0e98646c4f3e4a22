/*
 * remote_tool — forge Redis values of the remote transport (engine/remote/remote.h) as an
 * attacker who can write to Redis would, for tests/mount/remote.sh. The fingerprint is
 * public (it is in every key's name), so a value with the right XXH64 is easy to make;
 * with remote_key= no value without the key passes.
 *
 *   remote_tool batch FP EPOCH K SIZE BYTE   a plain value of batch (FP, EPOCH, K): SIZE
 *                                            bytes of BYTE under a right header, to stdout
 *   remote_tool decline FP EPOCH K CODE MSG  a decline ("failure") with errno CODE (EINTR
 *                                            is 4) and message MSG, to stdout
 *
 * FP in hex, the rest decimal. Exit status: 0, 1 (out of memory, a write failed), 2 usage.
 */
#include "engine/remote/remote.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void)
{
    fprintf(stderr, "usage: remote_tool batch FP EPOCH K SIZE BYTE\n"
                    "       remote_tool decline FP EPOCH K CODE MSG\n");
    return 2;
}

static int num(const char *s, int base, uint64_t *v)
{
    char *end;
    *v = strtoull(s, &end, base);
    return !*s || *end;
}

int main(int argc, char **argv)
{
    uint64_t fp, epoch, k, a;
    if (argc != 7 || num(argv[2], 16, &fp) || num(argv[3], 10, &epoch) || num(argv[4], 10, &k))
        return usage();
    if (!strcmp(argv[1], "batch")) {
        uint64_t byte;
        if (num(argv[5], 10, &a) || num(argv[6], 10, &byte) || byte > 255 || a > (1u << 30))
            return usage();
        uint8_t *v = malloc(BFS_REMOTE_HDR + a);
        if (!v)
            return 1;
        memset(v + BFS_REMOTE_HDR, (int)byte, a);
        if (bfs_remote_value_header(v, NULL, fp, epoch, k, v + BFS_REMOTE_HDR, a) != BFS_REMOTE_HDR)
            return 1;
        int bad = fwrite(v, 1, BFS_REMOTE_HDR + a, stdout) != BFS_REMOTE_HDR + a;
        free(v);
        return bad || fflush(stdout) ? 1 : 0;
    }
    if (!strcmp(argv[1], "decline")) {
        if (num(argv[5], 10, &a) || a == 0 || a > 4095)
            return usage();
        uint8_t v[BFS_REMOTE_HDR + BFS_REMOTE_ERR_MAX];
        size_t n = bfs_remote_error_value(v, fp, epoch, k, -(int)a, argv[6]);
        return fwrite(v, 1, n, stdout) != n || fflush(stdout) ? 1 : 0;
    }
    return usage();
}
