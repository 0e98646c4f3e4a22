/*
 * fuzz_folder.c — libFuzzer target for ImageFolder scanning (engine/dataset/folder.c,
 * bfs_folder_scan) and the folder source built on it (engine/dataset/source.c).
 *
 * Each input describes a small tree (at most MAX_OPS entries) that the target creates
 * under a per-process directory ($TMPDIR or /tmp, fuzz_folder.<pid>/root, removed and
 * made again for every input, removed at exit). Input: 3-byte records plus a name:
 *   [0] kind (bits 0-2): 0 directory, 1 .jpg/.jpeg file (any case), 2 file with another
 *       name (.gif, .txt, none, .jpg.bak, .jpgx), 3 FIFO named .jpg, 4 dangling symlink
 *       named .jpg (to a missing file or to itself), 5 symlink to a file made earlier,
 *       6 symlink to a directory made earlier (an ancestor makes a loop), 7 empty file
 *       with an odd name; bit 3 hidden (a leading '.'); bits 4-5 pick the extension;
 *       bit 6 a relative link target
 *   [1] parent: a directory made earlier (0 is the root)
 *   [2] name length (0..7), then that many name bytes ('/' and NUL replaced), then for
 *       regular files up to 7 content bytes (length in bits 5-7 of [2]).
 * Names that already exist are skipped. At most MAX_DIR_LINKS directory links, so
 * that a few links cannot multiply the walk beyond a fuzzing iteration.
 *
 * Checked, for every tree:
 *  - no crash and no hang (libFuzzer's -timeout: a walk must end whatever the links);
 *  - on failure, a known code (BFS_E_EMPTY, -ELOOP, -ENOENT, ...) and a message in err
 *    (one line unless a name holds a newline: names are written as they are), and an
 *    empty folder;
 *  - on success (folder.h): classes sorted byte-wise, not hidden, directories; labels
 *    non-decreasing; each path is ROOT/class/... of its label's class, its entry exists
 *    (lstat), it is no directory, no component below the root is hidden, and its name ends
 *    in .jpg/.jpeg; within a class the paths follow sorted(os.walk): directories by full
 *    path, then file names sorted; no path twice unless reached through a directory link;
 *  - without directory links the result is computed independently from what was
 *    created (a model of the tree) and must match exactly: return code, classes, paths,
 *    labels, ignored, hidden_dirs, unreadable_dirs (0: nothing is made unlistable);
 *  - bfs_source_open on the same tree agrees with the scan, and bfs_source_get of every
 *    sample neither blocks nor crashes: FIFOs give BFS_E_NOT_REGULAR, dangling links
 *    -ENOENT (-ELOOP for a link to itself), files their exact bytes.
 */
#include "base/err.h"
#include "engine/dataset/folder.h"
#include "engine/dataset/source.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_folder: %s:%d: contract violated: %s\n", __FILE__, __LINE__,     \
                    #cond);                                                                        \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define MAX_OPS       24
#define MAX_DIR_LINKS 4

enum { K_DIR, K_JPEG, K_OTHER, K_FIFO, K_DANGLING, K_FILE_LINK, K_DIR_LINK, K_ODD };

/* One entry made: the model the exact checks are computed from. */
typedef struct node {
    int parent; /* index into nodes; -1 for the root */
    int kind;
    char name[64];
    char path[PATH_MAX]; /* full path */
    int is_dir;          /* a real directory (K_DIR or the root) */
    int stat_dir;        /* stat() says directory (K_DIR, K_DIR_LINK) */
    int target;          /* links: the node linked to, -1 if none */
    uint8_t content[8];
    size_t content_len;
} node;

static char base[PATH_MAX], root[PATH_MAX];
static node nodes[MAX_OPS + 1];
static int nnodes;

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)ftw;
    return flag == FTW_DP ? rmdir(p) : unlink(p);
}

static void remove_tree(const char *p)
{
    struct stat st;
    if (lstat(p, &st) == 0)
        nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static void cleanup(void)
{
    remove_tree(base);
}

static int is_jpeg(const char *name)
{
    size_t n = strlen(name);
    return (n >= 4 && !strcasecmp(name + n - 4, ".jpg")) ||
           (n >= 5 && !strcasecmp(name + n - 5, ".jpeg"));
}

static int hidden_below_root(const char *path)
{
    const char *p = path + strlen(root);
    for (; *p; p++)
        if (p[0] == '/' && p[1] == '.')
            return 1;
    return 0;
}

/* Build the tree from the input; returns the number of directory links made. */
static int build(const uint8_t *data, size_t size)
{
    static const char *const jpeg_ext[4] = {".jpg", ".JPEG", ".jpeg", ".JpG"};
    static const char *const other_ext[4] = {".gif", ".txt", ".jpg.bak", ".jpgx"};
    nnodes = 1;
    nodes[0] = (node){.parent = -1, .kind = K_DIR, .is_dir = 1, .stat_dir = 1, .target = -1};
    snprintf(nodes[0].path, sizeof nodes[0].path, "%s", root);
    CHECK(mkdir(root, 0755) == 0);
    int dir_links = 0;
    size_t pos = 0;
    while (pos + 3 <= size && nnodes <= MAX_OPS) {
        uint8_t op = data[pos], par = data[pos + 1], ln = data[pos + 2];
        pos += 3;
        int kind = op & 7, hidden = op & 8, ext = (op >> 4) & 3, rel = op & 0x40;
        size_t nlen = ln & 7, clen = ln >> 5;
        char raw[16] = {0};
        for (size_t i = 0; i < nlen && pos < size; i++, pos++)
            raw[i] = data[pos] == '/' || data[pos] == 0 ? '_' : (char)data[pos];
        uint8_t content[8];
        size_t cl = 0;
        for (; cl < clen && pos < size; cl++, pos++)
            content[cl] = data[pos];
        /* the parent: a real directory made earlier */
        int dirs[MAX_OPS + 1], nd = 0;
        for (int i = 0; i < nnodes; i++)
            if (nodes[i].is_dir)
                dirs[nd++] = i;
        int p = dirs[par % nd];
        node *n = &nodes[nnodes];
        memset(n, 0, sizeof *n);
        n->parent = p, n->kind = kind, n->target = -1;
        const char *sfx = kind == K_DIR || kind == K_DIR_LINK ? ""
                          : kind == K_OTHER                   ? other_ext[ext]
                          : kind == K_ODD && ext == 3         ? ""
                          : kind == K_FILE_LINK && ext == 3   ? ".gif"
                                                              : jpeg_ext[ext];
        if (kind == K_ODD && !raw[0])
            raw[0] = (char)0xff, raw[1] = '\n';
        snprintf(n->name, sizeof n->name, "%s%s%s", hidden ? "." : "", raw, sfx);
        if (!n->name[0] || !strcmp(n->name, ".") || !strcmp(n->name, ".."))
            snprintf(n->name, sizeof n->name, "%sn%s%s", hidden ? "." : "", raw, sfx);
        if ((size_t)snprintf(n->path, sizeof n->path, "%s/%s", nodes[p].path, n->name) >=
            sizeof n->path)
            continue;
        struct stat st;
        if (lstat(n->path, &st) == 0 || errno != ENOENT)
            continue; /* taken (or a parent that is not what the model says) */
        int rc = -1;
        switch (kind) {
        case K_DIR:
            rc = mkdir(n->path, 0755);
            n->is_dir = n->stat_dir = 1;
            break;
        case K_JPEG:
        case K_OTHER:
        case K_ODD: {
            int fd = open(n->path, O_WRONLY | O_CREAT | O_EXCL, 0644);
            if (fd >= 0) {
                rc = (write(fd, content, cl) == (ssize_t)cl) - 1;
                close(fd);
            }
            memcpy(n->content, content, cl);
            n->content_len = cl;
            break;
        }
        case K_FIFO:
            rc = mkfifo(n->path, 0644);
            break;
        case K_DANGLING:
            rc = symlink(ext & 1 ? n->name : "missing-target", n->path); /* itself: ELOOP */
            break;
        case K_FILE_LINK:
        case K_DIR_LINK: {
            int cand[MAX_OPS + 1], nc = 0;
            for (int i = 0; i < nnodes; i++)
                if (kind == K_DIR_LINK ? nodes[i].is_dir
                                       : nodes[i].kind == K_JPEG || nodes[i].kind == K_OTHER ||
                                             nodes[i].kind == K_ODD)
                    cand[nc++] = i;
            if (!nc || (kind == K_DIR_LINK && dir_links >= MAX_DIR_LINKS))
                continue;
            int t = cand[(op >> 4 | ln) % nc];
            n->target = t;
            char tgt[PATH_MAX];
            if (rel && t == p) {
                snprintf(tgt, sizeof tgt, ".");
            } else if (rel && p != 0 && t == nodes[p].parent) {
                snprintf(tgt, sizeof tgt, "..");
            } else {
                snprintf(tgt, sizeof tgt, "%s", nodes[t].path);
            }
            rc = symlink(tgt, n->path);
            if (kind == K_DIR_LINK) {
                n->stat_dir = 1;
                dir_links += rc == 0;
            } else {
                memcpy(n->content, nodes[t].content, nodes[t].content_len);
                n->content_len = nodes[t].content_len;
            }
            break;
        }
        }
        if (rc == 0)
            nnodes++;
    }
    return dir_links;
}

/* ---- the model (no directory links) --------------------------------------------------- */

typedef struct expect {
    int rc;
    char *classes[MAX_OPS];
    int nclasses;
    const char *paths[MAX_OPS];
    uint32_t labels[MAX_OPS];
    int n;
    uint64_t ignored;
    uint32_t hidden_dirs;
} expect;

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Directories of a class, as sorted(os.walk): every non-hidden directory below it. */
static int class_dirs(int c, int *out)
{
    int n = 0;
    out[n++] = c;
    for (int i = 0; i < n; i++)
        for (int j = 1; j < nnodes; j++)
            if (nodes[j].parent == out[i] && nodes[j].kind == K_DIR && nodes[j].name[0] != '.')
                out[n++] = j;
    return n;
}

static int cmp_node_path(const void *a, const void *b)
{
    return strcmp(nodes[*(const int *)a].path, nodes[*(const int *)b].path);
}

static int cmp_node_name(const void *a, const void *b)
{
    return strcmp(nodes[*(const int *)a].name, nodes[*(const int *)b].name);
}

static void model(expect *e)
{
    memset(e, 0, sizeof *e);
    int cls[MAX_OPS], nc = 0;
    for (int i = 1; i < nnodes; i++) {
        if (nodes[i].parent != 0 || !nodes[i].stat_dir)
            continue;
        if (nodes[i].name[0] == '.')
            e->hidden_dirs++;
        else
            cls[nc++] = i;
    }
    qsort(cls, (size_t)nc, sizeof *cls, cmp_node_name);
    for (int c = 0; c < nc && !e->rc; c++) {
        e->classes[e->nclasses++] = nodes[cls[c]].name;
        int dirs[MAX_OPS + 1];
        int nd = class_dirs(cls[c], dirs);
        qsort(dirs, (size_t)nd, sizeof *dirs, cmp_node_path);
        int found = 0;
        for (int d = 0; d < nd; d++) {
            int files[MAX_OPS], nf = 0;
            for (int j = 1; j < nnodes; j++)
                if (nodes[j].parent == dirs[d] && !nodes[j].stat_dir && nodes[j].name[0] != '.')
                    files[nf++] = j;
            qsort(files, (size_t)nf, sizeof *files, cmp_node_name);
            for (int f = 0; f < nf; f++) {
                if (!is_jpeg(nodes[files[f]].name)) {
                    e->ignored++;
                    continue;
                }
                e->paths[e->n] = nodes[files[f]].path;
                e->labels[e->n++] = (uint32_t)c;
                found++;
            }
        }
        if (!found)
            e->rc = BFS_E_EMPTY;
    }
    if (!e->rc && (nc == 0 || e->n == 0))
        e->rc = BFS_E_EMPTY;
}

/* ---- checks --------------------------------------------------------------------------- */

/* A message, NUL-terminated in the buffer. Not necessarily one line: messages name
 * directories as they are, and a name may hold a newline (nothing escapes names). */
static void check_message(const char *err, size_t len)
{
    CHECK(memchr(err, 0, len) != NULL && err[0] != 0);
}

static void check_scan(const bfs_folder *f, int dir_links)
{
    size_t rl = strlen(root);
    for (uint32_t c = 0; c < f->nclasses; c++) {
        CHECK(f->classes[c][0] && f->classes[c][0] != '.' && !strchr(f->classes[c], '/'));
        if (c)
            CHECK(strcmp(f->classes[c - 1], f->classes[c]) < 0);
    }
    CHECK(f->n >= 1 && f->nclasses >= 1 && f->n <= f->cap);
    CHECK(f->unreadable_dirs == 0); /* nothing was made unlistable */
    CHECK(!f->ignored == !f->ignored_example && !f->hidden_dirs == !f->hidden_example);
    for (uint64_t i = 0; i < f->n; i++) {
        const char *p = f->paths[i];
        uint32_t l = f->labels[i];
        CHECK(l < f->nclasses);
        if (i)
            CHECK(f->labels[i - 1] <= l);
        size_t cl = strlen(f->classes[l]);
        CHECK(!strncmp(p, root, rl) && p[rl] == '/' && !strncmp(p + rl + 1, f->classes[l], cl) &&
              p[rl + 1 + cl] == '/');
        const char *slash = strrchr(p, '/');
        CHECK(is_jpeg(slash + 1) && bfs_folder_is_image_name(slash + 1));
        CHECK(!hidden_below_root(p));
        struct stat st;
        CHECK(lstat(p, &st) == 0);
        CHECK(stat(p, &st) != 0 || !S_ISDIR(st.st_mode));
        /* sorted(os.walk) within a class: by directory, then by name */
        if (i && f->labels[i - 1] == l) {
            const char *q = f->paths[i - 1], *qs = strrchr(q, '/');
            size_t dq = (size_t)(qs - q), dp = (size_t)(slash - p);
            char *a = strndup(q, dq), *b = strndup(p, dp);
            CHECK(a && b);
            int dc = strcmp(a, b);
            CHECK(dc < 0 || (dc == 0 && strcmp(qs + 1, slash + 1) < 0));
            free(a);
            free(b);
        }
        if (!dir_links)
            for (uint64_t j = 0; j < i; j++)
                CHECK(strcmp(f->paths[j], p) != 0);
    }
}

static void check_against_model(int rc, const bfs_folder *f)
{
    expect e;
    model(&e);
    if (getenv("FUZZ_FOLDER_DEBUG")) { /* what differs, for a reproducer */
        fprintf(stderr, "scan rc %d, model rc %d\n", rc, e.rc);
        for (int i = 0; i < nnodes; i++)
            fprintf(stderr, "node %d kind %d parent %d: %s\n", i, nodes[i].kind, nodes[i].parent,
                    nodes[i].path);
        for (uint64_t i = 0; i < f->n; i++)
            fprintf(stderr, "scan: %u %s\n", f->labels[i], f->paths[i]);
        for (int i = 0; i < e.n; i++)
            fprintf(stderr, "model: %u %s\n", e.labels[i], e.paths[i]);
    }
    CHECK(rc == e.rc);
    if (rc)
        return;
    CHECK(f->nclasses == (uint32_t)e.nclasses && f->n == (uint64_t)e.n);
    for (int c = 0; c < e.nclasses; c++)
        CHECK(!strcmp(f->classes[c], e.classes[c]));
    for (int i = 0; i < e.n; i++)
        CHECK(!strcmp(f->paths[i], e.paths[i]) && f->labels[i] == e.labels[i]);
    CHECK(f->ignored == e.ignored && f->hidden_dirs == e.hidden_dirs);
}

/* What bfs_source_get must return for path, from the file system itself. */
static void check_get(bfs_source *s, uint64_t i, const char *path, bfs_source_scratch *scr)
{
    bfs_item it;
    int rc = bfs_source_get(s, i, &it, scr);
    struct stat st;
    if (stat(path, &st) < 0) {
        CHECK(rc == -errno);
        CHECK(errno == ENOENT || errno == ELOOP || errno == ENAMETOOLONG);
        return;
    }
    if (!S_ISREG(st.st_mode)) {
        CHECK(rc == BFS_E_NOT_REGULAR);
        return;
    }
    CHECK(rc == 0 && it.len == (size_t)st.st_size && it.width == 0 && it.flags == 0);
    uint8_t want[64];
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    CHECK(fd >= 0);
    ssize_t n = read(fd, want, sizeof want);
    close(fd);
    CHECK(n == (ssize_t)it.len && (!n || memcmp(want, it.data, (size_t)n) == 0));
}

static void check_source(int scan_rc, const bfs_folder *f)
{
    bfs_source *s = NULL;
    char err[512];
    int rc = bfs_source_open(root, &s, err, sizeof err);
    CHECK(rc == scan_rc);
    if (rc) {
        CHECK(s == NULL);
        check_message(err, sizeof err);
        return;
    }
    CHECK(bfs_source_count(s) == f->n && bfs_source_class_count(s) == f->nclasses);
    bfs_source_scratch scr = {0};
    for (uint64_t i = 0; i < f->n; i++) {
        CHECK(bfs_source_label(s, i) == f->labels[i]);
        check_get(s, i, f->paths[i], &scr);
    }
    bfs_item it;
    CHECK(bfs_source_get(s, f->n, &it, &scr) == BFS_E_SAMPLE_INDEX);
    const char *notes = bfs_source_notes(s);
    CHECK(!!strstr(notes, "not named .jpg") == !!f->ignored);
    CHECK(!!strstr(notes, "hidden director") == !!f->hidden_dirs);
    bfs_source_scratch_free(&scr);
    bfs_source_close(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!base[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(base, sizeof base, "%s/fuzz_folder.%d", tmp && *tmp ? tmp : "/tmp", (int)getpid());
        remove_tree(base);
        CHECK(mkdir(base, 0700) == 0);
        snprintf(root, sizeof root, "%s/root", base);
        atexit(cleanup);
    }
    remove_tree(root);
    int dir_links = build(data, size);

    bfs_folder f;
    char err[512];
    memset(err, 'x', sizeof err);
    int rc = bfs_folder_scan(root, &f, err, sizeof err);
    if (rc) {
        CHECK(rc == BFS_E_EMPTY || rc == -ELOOP || rc == -ENAMETOOLONG);
        check_message(err, sizeof err);
        CHECK(f.n == 0 && f.paths == NULL && f.nclasses == 0 && f.classes == NULL);
    } else {
        check_scan(&f, dir_links);
        char notes[2048];
        bfs_folder_notes(&f, notes, sizeof notes);
    }
    if (!dir_links)
        check_against_model(rc, &f);
    check_source(rc, &f);
    bfs_folder_free(&f);
    bfs_folder_free(&f); /* zeroed: freeing again is a no-op */
    return 0;
}
