/*
 * bench_pages — what batch memory costs (docs/engine.md, "Batch memory"): writing and
 * reading batch-sized files on tmpfs with 4 KiB pages (as the executor's memfds) and with
 * 2 MiB pages (as its files with huge_pages=1: engine/exec.c, open_hugefs).
 *
 * For each kind of page, N files of SIZE MiB (default 7 of 38: an epoch of the bench
 * corpus at batch=256, size=224) are written with pwrite, in three rounds:
 *   first   new files on whatever memory the system hands out now (on VMs that give free
 *           memory back to the host, much of it fresh: the host backs it again on touch);
 *   freed   the files closed and new ones written at once (memory freed moments ago);
 *   reused  the same files written over (no page allocated; the executor never does
 *           this, as readers may still hold a served batch's pages: docs/engine.md).
 * Each round prints ms per file written and GB/s of reading the files back (pread of
 * 128 KiB, as `cat` does; best of 3). Ratios within one run are what to compare.
 *
 *   bench_pages [FILES [MIB]]     needs CAP_SYS_ADMIN (a private tmpfs, as huge_pages=1)
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A detached tmpfs, as engine/exec.c open_filefs makes; -1 if refused. */
static int private_tmpfs(const char *huge)
{
    int fc = (int)syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC), m = -1;
    if (fc < 0)
        return -1;
    if (syscall(SYS_fsconfig, fc, FSCONFIG_SET_STRING, "huge", huge, 0) == 0 &&
        syscall(SYS_fsconfig, fc, FSCONFIG_SET_STRING, "size", "100%", 0) == 0 &&
        syscall(SYS_fsconfig, fc, FSCONFIG_CMD_CREATE, NULL, NULL, 0) == 0)
        m = (int)syscall(SYS_fsmount, fc, FSMOUNT_CLOEXEC, 0);
    close(fc);
    return m;
}

static char rbuf[128 << 10];

static double read_gbs(const int *fd, int n, size_t size)
{
    double best = 1e9;
    for (int pass = 0; pass < 3; pass++) {
        double t0 = now();
        for (int i = 0; i < n; i++)
            for (size_t off = 0; off < size; off += sizeof rbuf)
                if (pread(fd[i], rbuf, sizeof rbuf, (off_t)off) < 0)
                    return 0;
        double t = now() - t0;
        best = t < best ? t : best;
    }
    return (double)n * (double)size / best / 1e9;
}

/* One round: write (new files unless reuse) and read back; -1 on error. */
static int round_(int fs, int *fd, int n, size_t size, const char *src, int reuse, const char *name)
{
    double t0 = now();
    for (int i = 0; i < n; i++) {
        if (!reuse) {
            if (fd[i] >= 0)
                close(fd[i]);
            fd[i] = openat(fs, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
            if (fd[i] < 0 || ftruncate(fd[i], (off_t)size))
                return -1;
        }
        if (pwrite(fd[i], src, size, 0) != (ssize_t)size)
            return -1;
    }
    double ms = (now() - t0) * 1e3 / n;
    printf("  %-7s write %6.1f ms per file   read %5.2f GB/s\n", name, ms, read_gbs(fd, n, size));
    return 0;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 7;
    size_t size = (size_t)(argc > 2 ? atoi(argv[2]) : 38) << 20;
    if (n < 1 || n > 256 || size == 0) {
        fprintf(stderr, "usage: bench_pages [FILES (1..256) [MIB]]\n");
        return 2;
    }
    char *src = malloc(size);
    int *fd = malloc((size_t)n * sizeof *fd);
    if (!src || !fd)
        return 1;
    for (size_t i = 0; i < size; i++)
        src[i] = (char)(i * 7 + i / 4096);
    printf("%d files of %zu MiB each, pwrite, then pread of 128 KiB (best of 3)\n", n, size >> 20);
    const char *kinds[][2] = {{"never", "4 KiB pages"}, {"within_size", "2 MiB pages"}};
    for (int k = 0; k < 2; k++) {
        int fs = private_tmpfs(kinds[k][0]);
        if (fs < 0) {
            fprintf(stderr, "bench_pages: private tmpfs (huge=%s): %s (needs CAP_SYS_ADMIN)\n",
                    kinds[k][0], strerror(errno));
            return 1;
        }
        for (int i = 0; i < n; i++)
            fd[i] = -1;
        printf("%s:\n", kinds[k][1]);
        if (round_(fs, fd, n, size, src, 0, "first") || round_(fs, fd, n, size, src, 0, "freed") ||
            round_(fs, fd, n, size, src, 1, "reused")) {
            fprintf(stderr, "bench_pages: %s\n", strerror(errno));
            return 1;
        }
        for (int i = 0; i < n; i++)
            close(fd[i]);
        close(fs);
    }
    free(src);
    free(fd);
    return 0;
}
