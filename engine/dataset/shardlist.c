/*
 * shardlist.c — which files a sharded source is made of (see shard.h): the command line's
 * sources (files, directories, glob patterns) into one sorted list of shard files.
 */
#include "engine/dataset/shard.h"
#include "base/err.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n > k && !strcmp(s + n - k, suffix);
}

static const char *base_name(const char *path)
{
    const char *b = strrchr(path, '/');
    return b ? b + 1 : path;
}

int bfs_shard_is_tar_name(const char *name)
{
    return ends_with(base_name(name), ".tar");
}

int bfs_shard_is_tfrecord_name(const char *name)
{
    const char *b = base_name(name);
    return ends_with(b, ".tfrecord") || ends_with(b, ".tfrecords") ||
           (strstr(b, ".tfrecord-") && strstr(b, ".tfrecord-") > b);
}

/* The format a file's name shows, or BFS_FORMAT_AUTO when none. */
static int name_format(const char *path)
{
    return bfs_shard_is_tar_name(path)        ? BFS_FORMAT_WEBDATASET
           : bfs_shard_is_tfrecord_name(path) ? BFS_FORMAT_TFRECORD
                                              : BFS_FORMAT_AUTO;
}

static const char *format_name(int f)
{
    return f == BFS_FORMAT_WEBDATASET ? "WebDataset (.tar)" : "TFRecord";
}

static int add_path(bfs_shard_list *l, size_t *cap, const char *path)
{
    if (l->n == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        char **p = realloc(l->paths, c * sizeof *p);
        if (!p)
            return -ENOMEM;
        l->paths = p, *cap = c;
    }
    if (!(l->paths[l->n] = strdup(path)))
        return -ENOMEM;
    l->n++;
    return 0;
}

/* A file of format f (its name's, or the one given) joins l, whose format it must share. */
static int add_file(bfs_shard_list *l, size_t *cap, const char *path, int f, char *err,
                    size_t errlen)
{
    if (l->format != BFS_FORMAT_AUTO && l->format != f)
        return bfs_errf(-EINVAL, err, errlen,
                        "%s: a %s shard among %s shards: give one format (or --format)", path,
                        format_name(f), format_name(l->format));
    l->format = f;
    if (add_path(l, cap, path))
        return bfs_errf(-ENOMEM, err, errlen, "out of memory");
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The shard files at the top of directory dir. *shards_only (AUTO): 1 when it holds shard
 * files and no non-hidden sub-directory. With format AUTO nothing is added when it does
 * not (the caller decides); the formats seen must agree. With a format given, the files
 * named as its shards, or when none is, every regular file (TensorFlow names its own
 * train-00000-of-00008). */
static int scan_dir(bfs_shard_list *l, size_t *cap, const char *dir, int format, int *shards_only,
                    char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    if (!d)
        return bfs_errf(-errno, err, errlen, "%s: %s", dir, strerror(errno));
    char **names = NULL;
    int *fmts = NULL;
    size_t n = 0, ncap = 0;
    int subdirs = 0, seen[3] = {0}, rc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[8192];
        struct stat st;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path ||
            stat(path, &st))
            continue; /* a dangling link, a name too long: not a shard */
        if (S_ISDIR(st.st_mode)) {
            subdirs = 1;
            continue;
        }
        int f = name_format(e->d_name);
        if (!S_ISREG(st.st_mode) || (format == BFS_FORMAT_AUTO && f == BFS_FORMAT_AUTO))
            continue;
        if (n == ncap) {
            ncap = ncap ? ncap * 2 : 16;
            char **nn = realloc(names, ncap * sizeof *nn);
            int *nf = nn ? realloc(fmts, ncap * sizeof *nf) : NULL;
            if (nn)
                names = nn;
            if (nf)
                fmts = nf;
            if (!nn || !nf) {
                rc = bfs_errf(-ENOMEM, err, errlen, "out of memory");
                break;
            }
        }
        if (!(names[n] = strdup(path))) {
            rc = bfs_errf(-ENOMEM, err, errlen, "out of memory");
            break;
        }
        fmts[n++] = f;
        seen[f] = 1;
    }
    closedir(d);
    *shards_only = n && !subdirs;
    if (!rc && format == BFS_FORMAT_AUTO && seen[1] && seen[2] && *shards_only)
        rc =
            bfs_errf(-EINVAL, err, errlen,
                     "%s holds both .tar and TFRecord files: say which to pack with --format", dir);
    if (!rc && format == BFS_FORMAT_AUTO && *shards_only)
        for (size_t i = 0; i < n && !rc; i++)
            rc = add_file(l, cap, names[i], fmts[i], err, errlen);
    for (size_t i = 0; i < n && !rc && format != BFS_FORMAT_AUTO; i++)
        if (!seen[format] || fmts[i] == format) /* its names, or any name when none has one */
            rc = add_file(l, cap, names[i], format, err, errlen);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    free(fmts);
    return rc;
}

/* One source into l. 1: not shards (AUTO, and only as the one source). */
static int add_source(bfs_shard_list *l, size_t *cap, const char *src, int format, int alone,
                      char *err, size_t errlen)
{
    struct stat st;
    if (stat(src, &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            size_t before = l->n;
            int shards_only = 0;
            int rc = scan_dir(l, cap, src, format, &shards_only, err, errlen);
            if (rc)
                return rc;
            if (format == BFS_FORMAT_AUTO && !shards_only) {
                if (alone)
                    return 1; /* an ImageFolder */
                return bfs_errf(-EINVAL, err, errlen,
                                "%s: a directory without .tar or TFRecord files at its top (or "
                                "with sub-directories: an ImageFolder, packed on its own)",
                                src);
            }
            if (l->n == before)
                return bfs_errf(-EINVAL, err, errlen,
                                "%s holds no %s shards at its top (no regular file); name the "
                                "files instead",
                                src, format_name(format));
            return 0;
        }
        if (!S_ISREG(st.st_mode))
            return bfs_errf(BFS_E_NOT_REGULAR, err, errlen, "%s: %s", src,
                            bfs_strerror(BFS_E_NOT_REGULAR));
        int f = format != BFS_FORMAT_AUTO ? format : name_format(src);
        if (f == BFS_FORMAT_AUTO) {
            if (alone)
                return 1; /* a .bfs file */
            return bfs_errf(-EINVAL, err, errlen,
                            "%s: not named as a shard (.tar, .tfrecord, .tfrecords): give "
                            "--format webdataset|tfrecord",
                            src);
        }
        return add_file(l, cap, src, f, err, errlen);
    }
    int e = errno;
    if (e != ENOENT || !strpbrk(src, "*?["))
        return bfs_errf(-e, err, errlen, "%s: %s", src, strerror(e));
    glob_t g;
    int grc = glob(src, GLOB_ERR, NULL, &g);
    if (grc == GLOB_NOMATCH)
        return bfs_errf(-ENOENT, err, errlen, "%s: no file matches", src);
    if (grc)
        return bfs_errf(grc == GLOB_NOSPACE ? -ENOMEM : -EIO, err, errlen, "%s: glob failed", src);
    int rc = 0;
    for (size_t i = 0; i < g.gl_pathc && !rc; i++) {
        const char *path = g.gl_pathv[i];
        int f = format != BFS_FORMAT_AUTO ? format : name_format(path);
        if (stat(path, &st) || !S_ISREG(st.st_mode))
            rc = bfs_errf(BFS_E_NOT_REGULAR, err, errlen, "%s (from %s): not a regular file", path,
                          src);
        else if (f == BFS_FORMAT_AUTO)
            rc = bfs_errf(-EINVAL, err, errlen,
                          "%s (from %s): not named as a shard (.tar, .tfrecord, .tfrecords): "
                          "give --format webdataset|tfrecord",
                          path, src);
        else
            rc = add_file(l, cap, path, f, err, errlen);
    }
    globfree(&g);
    return rc;
}

int bfs_shard_list_make(const char *const *srcs, size_t nsrcs, int format, bfs_shard_list *l,
                        char *err, size_t errlen)
{
    memset(l, 0, sizeof *l);
    l->format = format;
    size_t cap = 0;
    int rc = 0;
    for (size_t i = 0; i < nsrcs && !rc; i++)
        rc = add_source(l, &cap, srcs[i], format, nsrcs == 1, err, errlen);
    if (!rc && l->n) {
        qsort(l->paths, l->n, sizeof *l->paths, cmp_str);
        for (size_t i = 1; i < l->n && !rc; i++)
            if (!strcmp(l->paths[i - 1], l->paths[i]))
                rc = bfs_errf(-EINVAL, err, errlen, "%s: given twice", l->paths[i]);
    }
    if (!rc && !(l->sizes = calloc(l->n ? l->n : 1, sizeof *l->sizes)))
        rc = bfs_errf(-ENOMEM, err, errlen, "out of memory");
    for (size_t i = 0; !rc && i < l->n; i++) {
        struct stat st;
        if (stat(l->paths[i], &st))
            rc = bfs_errf(-errno, err, errlen, "%s: %s", l->paths[i], strerror(errno));
        else
            l->sizes[i] = (uint64_t)st.st_size, l->total += (uint64_t)st.st_size;
    }
    if (rc)
        bfs_shard_list_free(l);
    return rc;
}

void bfs_shard_list_free(bfs_shard_list *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++)
        free(l->paths[i]);
    free(l->paths);
    free(l->sizes);
    memset(l, 0, sizeof *l);
}
