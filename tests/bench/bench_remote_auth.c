/*
 * bench_remote_auth — what remote_key= costs: the CPU of fetching a batch value from Redis
 * into a batch file (what a mount does per remote batch) and of storing one (a worker),
 * plain (XXH64) against authenticated (Poly1305 under a key derived with HMAC-SHA256),
 * measured in one run against a redis-server of its own on 127.0.0.1. Prints CPU ms per
 * batch and the ratio keyed / plain; asserts nothing.
 *
 *   bench_remote_auth [MiB]    value size (default 19: a u8 batch of 128 x 224^2 x 3)
 */
#include "engine/remote/remote.h"
#include "tests/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    size_t n = (size_t)(argc > 1 ? atoi(argv[1]) : 19) << 20;
    tu_redis srv = {0};
    if (!n || tu_redis_start(&srv, 0, NULL)) {
        fprintf(stderr, "bench_remote_auth: no redis-server (make deps installs it)\n");
        return 1;
    }
    uint8_t *b = malloc(n);
    uint64_t seed = 1;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = tu_rand(&seed);
        memcpy(b + i, &v, n - i < 8 ? n - i : 8);
    }
    bfs_remote_url u = {.port = srv.port};
    snprintf(u.host, sizeof u.host, "127.0.0.1");
    bfs_remote_url ku = u; /* a key as remote_key= derives one: any 32 bytes will do here */
    ku.auth.on = 1;
    memset(ku.auth.key, 0x5c, sizeof ku.auth.key);
    memset(ku.auth.id, 0x36, sizeof ku.auth.id);
    bfs_remote *p, *k;
    char err[512];
    int fd = memfd_create("bench_remote_auth", MFD_CLOEXEC);
    if (!b || fd < 0 || ftruncate(fd, (off_t)n) ||
        bfs_remote_connect(&u, 1, 10000, &p, err, sizeof err) ||
        bfs_remote_connect(&ku, 1, 10000, &k, err, sizeof err)) {
        fprintf(stderr, "bench_remote_auth: set-up failed: %s\n", err);
        tu_redis_free(&srv);
        return 1;
    }
    enum { FETCHES = 20, PUTS = 5 };
    double fetch[2] = {1e9, 1e9}, put[2] = {1e9, 1e9};
    for (int round = 0; round < 3; round++) /* best of 3 rounds, each side in turn */
        for (int keyed = 0; keyed < 2; keyed++) {
            bfs_remote *r = keyed ? k : p;
            double t = cpu_s();
            for (int i = 0; i < PUTS; i++)
                if (bfs_remote_put(r, 0, (uint64_t)keyed, b, n, 600000))
                    return 1;
            double dt = (cpu_s() - t) / PUTS;
            put[keyed] = dt < put[keyed] ? dt : put[keyed];
            t = cpu_s();
            for (int i = 0; i < FETCHES; i++)
                if (bfs_remote_fetch_fd(r, 0, (uint64_t)keyed, fd, n) != 1)
                    return 1;
            dt = (cpu_s() - t) / FETCHES;
            fetch[keyed] = dt < fetch[keyed] ? dt : fetch[keyed];
        }
    printf("value of %.1f MiB; CPU ms per batch (best of 3 rounds)\n", n / 1048576.0);
    printf("mount, fetch into a batch file: plain %.2f, remote_key %.2f: ratio %.2f\n",
           fetch[0] * 1e3, fetch[1] * 1e3, fetch[1] / fetch[0]);
    printf("worker, store:                  plain %.2f, remote_key %.2f: ratio %.2f\n",
           put[0] * 1e3, put[1] * 1e3, put[1] / put[0]);
    bfs_remote_close(p);
    bfs_remote_close(k);
    close(fd);
    free(b);
    tu_redis_free(&srv);
    return 0;
}
