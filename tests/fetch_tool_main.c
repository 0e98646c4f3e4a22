/*
 * fetch_tool_main.c — build/tests/fetch_tool: read an object through the object-storage
 * layer (engine/dataset/fetch.h) from a shell, for the server tests (nginx, the S3
 * server) and for trying a store by hand. Not installed.
 *
 *   fetch_tool [--s3-endpoint URL] [--s3-region R] [--ca FILE] [--retries N]
 *              [--timeout-ms MS] [--stat] URL [OFFSET [LENGTH]]
 *
 * Writes bytes OFFSET .. OFFSET+LENGTH-1 (default: from 0, to the end) to stdout, or with
 * --stat one line "size=N identity=HEX" and the counters. Exit 0; 1 with the error's
 * message (open) or bfs_fetch_reason() (read) on stderr; 2 for a bad command line.
 */
#include "engine/dataset/fetch.h"
#include "base/err.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void)
{
    fprintf(stderr, "usage: fetch_tool [--s3-endpoint URL] [--s3-region R] [--ca FILE] "
                    "[--retries N] [--timeout-ms MS] [--stat] URL [OFFSET [LENGTH]]\n");
    return 2;
}

int main(int argc, char **argv)
{
    bfs_fetch_conf c = {.retries = 5, .timeout_ms = 10000};
    int stat = 0, i = 1;
    for (; i < argc && !strncmp(argv[i], "--", 2); i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--stat")) {
            stat = 1;
            continue;
        }
        if (!v)
            return usage();
        if (!strcmp(a, "--s3-endpoint"))
            c.s3_endpoint = v;
        else if (!strcmp(a, "--s3-region"))
            c.s3_region = v;
        else if (!strcmp(a, "--ca"))
            c.ca = v;
        else if (!strcmp(a, "--retries"))
            c.retries = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--timeout-ms"))
            c.timeout_ms = (unsigned)strtoul(v, NULL, 10);
        else
            return usage();
        i++;
    }
    if (i >= argc || argc - i > 3)
        return usage();
    char err[2048];
    if (bfs_fetch_configure(&c, err, sizeof err)) {
        fprintf(stderr, "fetch_tool: %s\n", err);
        return 2;
    }
    bfs_object *o;
    int rc = bfs_object_open(argv[i], &o, err, sizeof err);
    if (rc) {
        fprintf(stderr, "fetch_tool: %s (%s)\n", err, bfs_strerror(rc));
        return 1;
    }
    uint64_t size = bfs_object_size(o);
    uint64_t off = argc - i > 1 ? strtoull(argv[i + 1], NULL, 10) : 0;
    uint64_t len = argc - i > 2 ? strtoull(argv[i + 2], NULL, 10) : size > off ? size - off : 0;
    if (stat) {
        bfs_fetch_stats st;
        bfs_fetch_get_stats(&st);
        printf("size=%" PRIu64 " identity=%016" PRIx64 " requests=%" PRIu64 " retries=%" PRIu64
               "\n",
               size, bfs_object_identity(o), st.requests, st.retries);
        bfs_object_close(o);
        return 0;
    }
    /* in pieces of 8 MiB: one range request each */
    size_t piece = 8u << 20;
    char *buf = malloc(piece);
    if (!buf)
        return 1;
    for (uint64_t done = 0; done < len;) {
        size_t n = len - done < piece ? (size_t)(len - done) : piece;
        if ((rc = bfs_object_read(o, buf, n, off + done))) {
            fprintf(stderr, "fetch_tool: %s (%s)\n", bfs_fetch_reason(), bfs_strerror(rc));
            free(buf);
            bfs_object_close(o);
            return 1;
        }
        fwrite(buf, 1, n, stdout);
        done += n;
    }
    free(buf);
    bfs_object_close(o);
    return fflush(stdout) ? 1 : 0;
}
