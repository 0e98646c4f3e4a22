/*
 * bench_batchfile — what making one batch file costs, by the way its bytes get there
 * (issue 36: "rows computed straight into the batch file's mapping"). For N batches of
 * SIZE bytes (default 2000 of 512 KiB: a pack=concat,seq_len=2048,batch=64 token batch),
 * each batch's bytes are produced by a memset standing in for the compute, and the last
 * 32 files are kept open (a cache), in four ways:
 *   write     into a reused buffer, then write() into a new memfd, sealed and mapped
 *             read-only (what the executor does: cache/batchmem.c bfs_bc_to_file);
 *   mapping   a new memfd, ftruncate, a writable shared mapping filled in place (a page
 *             fault per page), unmapped, sealed and mapped read-only;
 *   populate  the same with MAP_POPULATE (the pages made in one call, zeroed);
 *   reused    pwrite() over one file's existing pages, mapped read-only (no page made;
 *             the executor never does this: a reader may still hold a served batch's
 *             pages, docs/engine.md "Batch memory").
 * Prints CPU seconds per GB of batches for each, and each against `write`. Asserts
 * nothing; ratios within one run are what to compare.
 *
 *   bench_batchfile [N [SIZE]]
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define KEEP 32

static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void die(const char *what)
{
    perror(what);
    exit(1);
}

/* One batch file of size bytes, made the way `mode` says; returns its descriptor. */
static int make(int mode, unsigned char *buf, size_t size, int reused, int i)
{
    if (mode == 3) {
        memset(buf, i, size);
        if (pwrite(reused, buf, size, 0) != (ssize_t)size)
            die("pwrite");
        return -1;
    }
    int fd = memfd_create("bench-batch", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        die("memfd_create");
    if (mode == 0) {
        memset(buf, i, size);
        if (write(fd, buf, size) != (ssize_t)size)
            die("write");
    } else {
        if (ftruncate(fd, (off_t)size))
            die("ftruncate");
        int flags = MAP_SHARED | (mode == 2 ? MAP_POPULATE : 0);
        unsigned char *m = mmap(NULL, size, PROT_READ | PROT_WRITE, flags, fd, 0);
        if (m == MAP_FAILED)
            die("mmap");
        memset(m, i, size);
        munmap(m, size);
    }
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE))
        die("F_ADD_SEALS");
    return fd;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 2000;
    size_t size = argc > 2 ? strtoul(argv[2], NULL, 0) : 512 * 1024;
    if (n < 1 || size < 4096) {
        fprintf(stderr, "usage: bench_batchfile [N >= 1 [SIZE >= 4096]]\n");
        return 2;
    }
    unsigned char *buf = aligned_alloc(4096, (size + 4095) / 4096 * 4096);
    int reused = memfd_create("bench-reused", MFD_CLOEXEC);
    if (!buf || reused < 0 || ftruncate(reused, (off_t)size))
        die("set-up");
    static const char *name[] = {"write", "mapping", "populate", "reused"};
    double per_gb[4];
    printf("%d batch files of %zu bytes, the last %d kept open:\n", n, size, KEEP);
    for (int mode = 0; mode < 4; mode++) {
        int keep[KEEP], nk = 0;
        double t0 = cpu_s();
        for (int i = 0; i < n; i++) {
            int fd = make(mode, buf, size, reused, i);
            void *ro = mmap(NULL, size, PROT_READ, MAP_SHARED, fd >= 0 ? fd : reused, 0);
            if (ro == MAP_FAILED)
                die("mmap read-only");
            munmap(ro, size);
            if (fd < 0)
                continue;
            if (nk == KEEP) {
                close(keep[0]);
                memmove(keep, keep + 1, (KEEP - 1) * sizeof *keep);
                nk--;
            }
            keep[nk++] = fd;
        }
        while (nk)
            close(keep[--nk]);
        per_gb[mode] = (cpu_s() - t0) / ((double)size * n / 1e9);
        printf("  %-9s %.3f CPU-s per GB, %.2fx write's\n", name[mode], per_gb[mode],
               per_gb[mode] / per_gb[0]);
    }
    free(buf);
    close(reused);
    return 0;
}
