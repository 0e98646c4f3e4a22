/*
 * fuzz_mountopts.c — libFuzzer target for the batchfs command line (mountopts/): argv
 * splitting of `-o` lists (normalize= continuation, fuse pass-through and dropped fstab
 * options, batchfs's own spec=, fuse_threads=, passthrough=), flags, bench and top modes,
 * and spec files read from disk.
 *
 * Input layout: argv[1..] separated by NUL bytes, up to a double NUL; the bytes after the
 * double NUL are the content of the spec file "s" (NULs included). A private directory
 * holds it, a FIFO "fifo", a directory "dir" and a file "big" of 1 MiB + 1 byte; every
 * spec= value is rewritten to name a file in that directory ('/' becoming '_'), so
 * spec=s, spec=fifo, spec=dir, spec=big and spec=missing reach every path of read_spec
 * and the fuzzer never reads host files (a FIFO or /proc file outside would be a test of
 * the host, not of the parser). The working directory is left alone: libFuzzer's corpus
 * paths are relative to it.
 *
 * Contract checked (CHECK aborts): bfs_mountopts_parse returns 0 or a documented error
 * (-EINVAL, -ENOENT, -ENOMEM, -EFBIG, or an errno of opening the spec file); a failure
 * leaves a non-empty, NUL-terminated message and a freed struct; a success has the fields
 * its mode promises (mount: source, mountpoint and fuse_opts; bench: source and an epoch
 * inside the pipeline; top: a mountpoint and an interval in range), fuse_threads in
 * 1..1024, finished pipeline options; and round trips: the canonical text, as a spec file,
 * gives the same canonical text and fingerprint; fuse_opts with fuse_threads= and
 * passthrough=, given back as -o, give the same values. Seeds: tests/fuzz/seeds/mountopts/.
 */
#include "programs/top.h"
#include "mountopts/mountopts.h"
#include "engine/pipeline.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_mountopts: %s:%d: contract violated: %s\n", __FILE__, __LINE__,  \
                    #cond);                                                                        \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define MAX_ARGS 32

static char dir[4096]; /* the private directory */

static void write_file(const char *name, const void *p, size_t n)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CHECK(fd >= 0);
    CHECK(write(fd, p, n) == (ssize_t)n);
    close(fd);
}

/* at exit: the private directory and what it holds (it holds nothing else) */
static void cleanup(void)
{
    static const char *const names[] = {"s", "canon", "big", "fifo"};
    char path[4200];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/dir", dir);
    rmdir(path);
    rmdir(dir);
}

/* once: a private directory with the files spec= may name */
static void setup(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    const char *tmp = getenv("TMPDIR");
    char path[4200];
    snprintf(dir, sizeof dir, "%s/fuzz_mountopts.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    CHECK(mkdtemp(dir) != NULL);
    atexit(cleanup);
    snprintf(path, sizeof path, "%s/fifo", dir);
    CHECK(mkfifo(path, 0600) == 0);
    snprintf(path, sizeof path, "%s/dir", dir);
    CHECK(mkdir(path, 0700) == 0);
    size_t n = (1u << 20) + 1;
    char *big = malloc(n);
    CHECK(big != NULL);
    memset(big, '#', n);
    write_file("big", big, n);
    free(big);
}

static int allowed_rc(int rc)
{
    return rc == 0 || rc == -EINVAL || rc == -ENOENT || rc == -ENOMEM || rc == -EFBIG ||
           rc == -ENAMETOOLONG || rc == -ENOTDIR || rc == -EACCES || rc == -ELOOP;
}

static int parse(int argc, char **argv, bfs_mount_args *a, char *err, size_t errlen)
{
    memset(err, 'x', errlen); /* a message must be written, not left over */
    err[errlen - 1] = '\0';
    err[0] = '\0';
    int rc = bfs_mountopts_parse(argc, argv, a, err, errlen);
    CHECK(allowed_rc(rc));
    if (rc) {
        size_t n = strnlen(err, errlen);
        CHECK(n > 0 && n < errlen);
        CHECK(!a->source && !a->mountpoint && !a->fuse_opts); /* "a is freed" */
    }
    return rc;
}

/* the canonical text of a's pipeline as spec file "canon", read back by a mount parse */
static void round_trip_spec(const bfs_mount_args *a)
{
    char canon[BFS_CANONICAL_MAX], again[BFS_CANONICAL_MAX], err[BFS_PIPELINE_ERRLEN];
    int n = bfs_pipeline_canonical(&a->pipe, canon, sizeof canon);
    CHECK(n > 0);
    /* a mixture's spec is its canonical text and its `source =` line (MNT/pipeline),
     * and its command line has no SOURCE */
    int mixed = a->pipe.mix[0] != '\0';
    char *text = malloc(sizeof a->pipe.mix + (size_t)n + 16);
    CHECK(text != NULL);
    int tn = snprintf(text, sizeof a->pipe.mix + (size_t)n + 16, "%s%s%s%s",
                      mixed ? "source = " : "", mixed ? a->pipe.mix : "", mixed ? "\n" : "", canon);
    write_file("canon", text, (size_t)tn);
    free(text);
    char spec[4200];
    snprintf(spec, sizeof spec, "spec=%s/canon", dir);
    char *argv[] = {"batchfs", "x", "y", "-o", spec, NULL};
    char *argv_mixed[] = {"batchfs", "y", "-o", spec, NULL};
    bfs_mount_args b;
    int rc =
        mixed ? parse(4, argv_mixed, &b, err, sizeof err) : parse(5, argv, &b, err, sizeof err);
    if (rc)
        fprintf(stderr, "canonical text as a spec file: %s\n%s", err, canon);
    CHECK(rc == 0);
    CHECK(bfs_pipeline_canonical(&b.pipe, again, sizeof again) == n);
    CHECK(strcmp(canon, again) == 0);
    CHECK(bfs_pipeline_fingerprint(&b.pipe, 7) == bfs_pipeline_fingerprint(&a->pipe, 7));
    bfs_mountopts_free(&b);
}

/* arg with every spec=VALUE (up to the next comma) as spec=DIR/VALUE, '/' as '_' in VALUE;
 * malloc'ed */
static char *confine(const char *arg)
{
    size_t n = 0, extra = strlen(dir) + 1;
    for (const char *s = arg; (s = strstr(s, "spec=")); s += 5)
        n++;
    char *out = malloc(strlen(arg) + n * extra + 1), *o = out;
    CHECK(out != NULL);
    for (const char *s = arg; *s;) {
        if (strncmp(s, "spec=", 5) == 0) {
            o += sprintf(o, "spec=%s/", dir);
            for (s += 5; *s && *s != ','; s++)
                *o++ = *s == '/' ? '_' : *s;
        } else {
            *o++ = *s++;
        }
    }
    *o = '\0';
    return out;
}

/* batchfs's own mount options and the pass-through ones, given back as one -o list */
static void round_trip_mount_opts(const bfs_mount_args *a)
{
    size_t cap = strlen(a->fuse_opts) + 64;
    char *list = malloc(cap), err[BFS_PIPELINE_ERRLEN];
    CHECK(list != NULL);
    snprintf(list, cap, "%s%sfuse_threads=%d,passthrough=%s", a->fuse_opts,
             a->fuse_opts[0] ? "," : "", a->fuse_threads, a->passthrough ? "auto" : "off");
    char *argv[] = {"batchfs", "x", "y", "-o", list, NULL};
    bfs_mount_args b;
    CHECK(parse(5, argv, &b, err, sizeof err) == 0);
    CHECK(strcmp(b.fuse_opts, a->fuse_opts) == 0);
    CHECK(b.fuse_threads == a->fuse_threads);
    CHECK(b.passthrough == a->passthrough);
    CHECK(b.allow_other == a->allow_other);
    bfs_mountopts_free(&b);
    free(list);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    /* argv part and spec part */
    size_t split = size;
    for (size_t i = 0; i + 1 < size; i++)
        if (!data[i] && !data[i + 1]) {
            split = i;
            break;
        }
    write_file("s", split < size ? data + split + 2 : data, split < size ? size - split - 2 : 0);
    char *text = malloc(split + 1);
    if (!text)
        return 0;
    memcpy(text, data, split);
    text[split] = '\0';
    char *argv[MAX_ARGS + 2] = {"batchfs"};
    int argc = 1;
    for (char *p = text; argc <= MAX_ARGS && p <= text + split; p += strlen(p) + 1)
        argv[argc++] = confine(p);
    argv[argc] = NULL;

    bfs_mount_args a;
    char err[2048];
    int rc = parse(argc, argv, &a, err, sizeof err);
    if (rc == 0) {
        char e2[BFS_PIPELINE_ERRLEN];
        switch (a.mode) {
        case BFS_MODE_MOUNT:
        case BFS_MODE_BENCH:
            CHECK(a.source != NULL && a.fuse_opts != NULL);
            CHECK((a.mountpoint != NULL) == (a.mode == BFS_MODE_MOUNT));
            CHECK(a.fuse_threads >= 1 && a.fuse_threads <= 1024);
            CHECK(a.passthrough == 0 || a.passthrough == 1);
            CHECK(bfs_pipeline_finish(&a.pipe, e2, sizeof e2) == 0);
            CHECK(a.mode != BFS_MODE_BENCH || a.bench_epoch < a.pipe.epochs);
            round_trip_spec(&a);
            round_trip_mount_opts(&a);
            break;
        case BFS_MODE_TOP:
            CHECK(a.mountpoint != NULL && a.fuse_opts != NULL);
            CHECK(a.top_interval >= BFS_TOP_INTERVAL_MIN && a.top_interval <= BFS_TOP_INTERVAL_MAX);
            CHECK(a.top_iterations >= 0);
            break;
        default:
            CHECK(a.mode == BFS_MODE_HELP || a.mode == BFS_MODE_VERSION);
        }
    }
    bfs_mountopts_free(&a);
    for (int i = 1; i < argc; i++)
        free(argv[i]);
    free(text);
    return 0;
}
