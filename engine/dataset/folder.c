/*
 * folder.c — scanning an ImageFolder (see folder.h): sorted class directories, sorted
 * recursive file lists, torchvision's order.
 */
#include "engine/dataset/folder.h"
#include "engine/dataset/bfs.h"
#include "base/err.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

int bfs_folder_is_image_name(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot && (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg") ||
                   !strcasecmp(dot, ".png") || !strcasecmp(dot, ".webp"));
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted names of the entries of dir (no "." / ".." / hidden), each malloc'ed. Hidden
 * directories are counted in *hidden (when not NULL), the first one's name kept. */
static int list_dir(const char *dir, char ***names, size_t *count, bfs_folder *hidden)
{
    DIR *d = opendir(dir);
    if (!d)
        return -errno;
    char **v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    int rc = 0;
    /* errno is reset before every readdir: only its errors count, not those of the stat
     * of a hidden entry (a dangling .link beside the classes failed the scan) */
    while ((errno = 0, e = readdir(d))) {
        if (e->d_name[0] == '.') { /* hidden files and dirs are never data */
            struct stat st;
            char *sub = NULL;
            if (hidden && strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
                asprintf(&sub, "%s/%s", dir, e->d_name) >= 0 && stat(sub, &st) == 0 &&
                S_ISDIR(st.st_mode) && hidden->hidden_dirs++ == 0)
                hidden->hidden_example = strdup(e->d_name);
            free(sub);
            continue;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nv = realloc(v, cap * sizeof *nv);
            if (!nv) {
                rc = -ENOMEM;
                break;
            }
            v = nv;
        }
        if (!(v[n] = strdup(e->d_name))) {
            rc = -ENOMEM;
            break;
        }
        n++;
    }
    if (!rc && errno)
        rc = -errno;
    closedir(d);
    if (rc) {
        for (size_t i = 0; i < n; i++)
            free(v[i]);
        free(v);
        return rc;
    }
    if (n > 1) /* v is NULL when the directory is empty: qsort(NULL, 0) is undefined */
        qsort(v, n, sizeof *v, cmp_str);
    *names = v;
    *count = n;
    return 0;
}

static void free_names(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static int add_item(bfs_folder *p, char *path, uint32_t label)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 1024;
        char **np = realloc(p->paths, cap * sizeof *np);
        uint32_t *nl = np ? realloc(p->labels, cap * sizeof *nl) : NULL;
        if (np)
            p->paths = np;
        if (!nl)
            return -ENOMEM;
        p->labels = nl, p->cap = cap;
    }
    p->paths[p->n] = path;
    p->labels[p->n++] = label;
    return 0;
}

/* Sorted recursive walk like sorted(os.walk(dir)): all files of a directory, then its
 * sub-directories; directories ordered by full path. Breadth of recursion is bounded
 * by the directory depth. */
typedef struct dirlist {
    char **v;
    size_t n, cap;
} dirlist;

/* The directories on the walk's current path, to tell a link back to one of them (a
 * loop: following it never ends, and two such links made the walk exponential). */
typedef struct ancestor {
    dev_t dev;
    ino_t ino;
    const char *path;
} ancestor;

#define WALK_MAX_DEPTH 64

static int walk_collect(const char *dir, dirlist *dirs, int depth, ancestor *anc, char *err,
                        size_t errlen)
{
    if (depth > WALK_MAX_DEPTH)
        return bfs_errf(-ELOOP, err, errlen, "%s: more than %d directory levels", dir,
                        WALK_MAX_DEPTH);
    struct stat st;
    if (stat(dir, &st) == 0) {
        for (int a = 0; a < depth; a++)
            if (anc[a].dev == st.st_dev && anc[a].ino == st.st_ino)
                return bfs_errf(-ELOOP, err, errlen,
                                "%s leads back to %s: a directory link loop (remove the link)", dir,
                                anc[a].path);
        anc[depth] = (ancestor){st.st_dev, st.st_ino, dir};
    } else {
        anc[depth] = (ancestor){0, 0, dir}; /* list_dir fails below: counted as unreadable */
    }
    if (dirs->n == dirs->cap) {
        size_t cap = dirs->cap ? dirs->cap * 2 : 16;
        char **nv = realloc(dirs->v, cap * sizeof *nv);
        if (!nv)
            return -ENOMEM;
        dirs->v = nv, dirs->cap = cap;
    }
    if (!(dirs->v[dirs->n] = strdup(dir)))
        return -ENOMEM;
    dirs->n++;
    char **names;
    size_t n;
    int rc = list_dir(dir, &names, &n, NULL);
    if (rc)
        return rc == -ENOMEM ? rc : 0; /* scan_class lists it again and counts it */
    for (size_t i = 0; i < n && !rc; i++) {
        char *sub;
        if (asprintf(&sub, "%s/%s", dir, names[i]) < 0) {
            rc = -ENOMEM;
            break;
        }
        if (stat(sub, &st) == 0 && S_ISDIR(st.st_mode))
            rc = walk_collect(sub, dirs, depth + 1, anc, err, errlen);
        free(sub);
    }
    free_names(names, n);
    return rc;
}

/* A directory that could not be listed: counted, the first kept for the notes. */
static int unreadable(bfs_folder *p, const char *dir, int rc)
{
    if (p->unreadable_dirs++ == 0) {
        if (!(p->unreadable_example = strdup(dir)))
            return -ENOMEM;
        p->unreadable_err = rc;
    }
    return 0;
}

static int scan_class(bfs_folder *p, const char *cdir, uint32_t label, uint64_t *found, int *listed,
                      char *err, size_t errlen)
{
    dirlist dirs = {0};
    ancestor anc[WALK_MAX_DEPTH + 1];
    int rc = walk_collect(cdir, &dirs, 0, anc, err, errlen); /* -ELOOP: err says where */
    if (rc)
        goto out;
    qsort(dirs.v, dirs.n, sizeof *dirs.v, cmp_str);
    *found = 0;
    *listed = 1;
    for (size_t d = 0; d < dirs.n && !rc; d++) {
        char **names;
        size_t n;
        if ((rc = list_dir(dirs.v[d], &names, &n, NULL))) {
            if (rc == -ENOMEM)
                break;
            if (!strcmp(dirs.v[d], cdir))
                *listed = 0;
            rc = unreadable(p, dirs.v[d], rc);
            continue;
        }
        for (size_t i = 0; i < n && !rc; i++) {
            char *path;
            struct stat st;
            if (asprintf(&path, "%s/%s", dirs.v[d], names[i]) < 0) {
                rc = -ENOMEM;
                break;
            }
            if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
                free(path);
                continue;
            }
            if (!bfs_folder_is_image_name(names[i])) {
                if (p->ignored++ == 0)
                    p->ignored_example = path;
                else
                    free(path);
                continue;
            }
            /* unreadable entries are kept: the worker reports them as skipped */
            if ((rc = add_item(p, path, label)))
                free(path);
            else
                (*found)++;
        }
        free_names(names, n);
    }
out:
    free_names(dirs.v, dirs.n);
    return rc;
}

int bfs_folder_scan(const char *src, bfs_folder *p, char *err, size_t errlen)
{
    struct stat st;
    memset(p, 0, sizeof *p);
    if (stat(src, &st) < 0)
        return bfs_errf(-errno, err, errlen, "%s: %s", src, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return bfs_errf(-ENOTDIR, err, errlen,
                        "%s: not a directory (expected an ImageFolder: one "
                        "sub-directory per class)",
                        src);
    char **names;
    size_t n;
    int rc = list_dir(src, &names, &n, p);
    if (rc)
        return bfs_errf(rc, err, errlen, "%s: %s", src, bfs_strerror(rc));
    for (size_t i = 0; i < n && !rc; i++) {
        char *cdir;
        if (asprintf(&cdir, "%s/%s", src, names[i]) < 0) {
            rc = -ENOMEM;
            break;
        }
        if (stat(cdir, &st) < 0 || !S_ISDIR(st.st_mode)) {
            /* files beside the class directories are not samples (torchvision ignores them) */
            free(cdir);
            continue;
        }
        if (p->nclasses == p->class_cap) {
            uint32_t cap = p->class_cap ? p->class_cap * 2 : 64;
            char **nc = realloc(p->classes, cap * sizeof *nc);
            if (!nc) {
                free(cdir);
                rc = -ENOMEM;
                break;
            }
            p->classes = nc, p->class_cap = cap;
        }
        if (p->nclasses >= BFS_MAX_CLASSES) {
            free(cdir);
            rc = bfs_errf(-E2BIG, err, errlen, "%s: more than %u classes", src, BFS_MAX_CLASSES);
            break;
        }
        if (!(p->classes[p->nclasses] = strdup(names[i]))) {
            free(cdir);
            rc = -ENOMEM;
            break;
        }
        uint64_t found = 0;
        int listed = 1;
        rc = scan_class(p, cdir, p->nclasses, &found, &listed, err, errlen);
        if (!rc && found == 0 && listed)
            rc = bfs_errf(BFS_E_EMPTY, err, errlen,
                          "class directory %s holds no .jpg, .jpeg, .png or .webp file: every "
                          "class needs at least one image (remove the directory or add images)",
                          cdir);
        p->nclasses++;
        free(cdir);
    }
    free_names(names, n);
    if (!rc && p->nclasses == 0)
        rc = bfs_errf(BFS_E_EMPTY, err, errlen,
                      "%s has no class sub-directories (expected SRC/<class>/<image>.jpg)", src);
    if (!rc && p->n == 0)
        rc = bfs_errf(BFS_E_EMPTY, err, errlen, "%s: no sample: %s could not be listed (%s)", src,
                      p->unreadable_example ? p->unreadable_example : "?",
                      bfs_strerror(p->unreadable_err));
    if (rc == -ENOMEM)
        bfs_errf(rc, err, errlen, "out of memory while scanning %s", src);
    if (rc)
        bfs_folder_free(p);
    return rc;
}

void bfs_folder_free(bfs_folder *f)
{
    if (!f)
        return;
    for (uint64_t i = 0; i < f->n; i++)
        free(f->paths[i]);
    free(f->paths);
    free(f->labels);
    for (uint32_t c = 0; c < f->nclasses; c++)
        free(f->classes[c]);
    free(f->classes);
    free(f->ignored_example);
    free(f->hidden_example);
    free(f->unreadable_example);
    memset(f, 0, sizeof *f);
}

void bfs_folder_notes(const bfs_folder *f, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = 0;
    if (f->ignored && n < len)
        n += (size_t)snprintf(buf + n, len - n,
                              "note: %llu file%s below the class directories %s not named .jpg, "
                              ".jpeg, .png or .webp, so not %s (batchfs reads JPEG, PNG and WebP "
                              "only), e.g. %s\n",
                              (unsigned long long)f->ignored, f->ignored == 1 ? "" : "s",
                              f->ignored == 1 ? "is" : "are",
                              f->ignored == 1 ? "a sample" : "samples",
                              f->ignored_example ? f->ignored_example : "?");
    if (f->unreadable_dirs && n < len)
        n += (size_t)snprintf(buf + n, len - n,
                              "note: %u director%s could not be listed and %s skipped (e.g. %s: "
                              "%s): the images in %s are not samples\n",
                              f->unreadable_dirs, f->unreadable_dirs == 1 ? "y" : "ies",
                              f->unreadable_dirs == 1 ? "is" : "are",
                              f->unreadable_example ? f->unreadable_example : "?",
                              bfs_strerror(f->unreadable_err),
                              f->unreadable_dirs == 1 ? "it" : "them");
    if (f->hidden_dirs && n < len)
        snprintf(buf + n, len - n,
                 "note: %u hidden director%s beside the class directories (e.g. %s) %s skipped: "
                 "torchvision's ImageFolder would count %s as a class, so its labels would "
                 "differ from these\n",
                 f->hidden_dirs, f->hidden_dirs == 1 ? "y" : "ies",
                 f->hidden_example ? f->hidden_example : "?", f->hidden_dirs == 1 ? "is" : "are",
                 f->hidden_dirs == 1 ? "it" : "them");
}
