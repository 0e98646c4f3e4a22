/*
 * mountopts.c — see mountopts.h.
 *
 * `-o` items are classified in this order: batchfs mount options (spec=, fuse_threads=,
 * passthrough=),
 * pipeline options (engine/pipeline_table.c's table), libfuse/kernel options that pass through
 * to the mount, mount(8)/fstab options that mean nothing here and are dropped. Anything
 * else is an error. The value of normalize= may contain commas (m0,m1,m2/s0,s1,s2): as in
 * bfs_pipeline_parse, after normalize= an item starting with a digit, sign or '.'
 * continues it; after fields=, an item without '=' that is not a mount flag continues it
 * (field names: a field called like a flag, ro, dev, ..., goes in a spec file).
 */
#include "mountopts/mountopts.h"
#include "base/err.h"
#include "base/io.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FUSE_THREADS_DEFAULT 32
#define SPEC_MAX             (1 << 20)

/* libfuse / kernel mount options passed through ("name" or "name=") */
static const char *const fuse_pass[] = {
    "allow_other", "allow_root", "auto_unmount", "default_permissions",
    "fsname=",     "subtype=",   "max_read=",    "dev",
    "nodev",       "suid",       "nosuid",       "exec",
    "noexec",      "atime",      "noatime",      "relatime",
    "sync",        "async",      "dirsync",      "ro",
    "context=",    "fscontext=", "defcontext=",  "rootcontext=",
    NULL};

/* mount(8) / fstab options with no meaning for a read-only FUSE daemon: dropped */
static const char *const dropped[] = {"defaults", "auto",    "noauto", "user", "users", "nouser",
                                      "owner",    "_netdev", "nofail", "rw",   NULL};

static int in_list(const char *const *list, const char *item)
{
    for (size_t i = 0; list[i]; i++) {
        size_t n = strlen(list[i]);
        if (list[i][n - 1] == '=' ? !strncmp(item, list[i], n) : !strcmp(item, list[i]))
            return 1;
    }
    return 0;
}

static int is_pipeline_key(const char *key, size_t n)
{
    for (size_t i = 0;; i++) {
        const bfs_pipeline_option *o = bfs_pipeline_option_at(i);
        if (!o)
            return 0;
        if (strlen(o->name) == n && !strncmp(o->name, key, n))
            return 1;
    }
}

static int append(char **list, const char *item)
{
    size_t old = *list ? strlen(*list) : 0;
    char *n = realloc(*list, old + strlen(item) + 2);
    if (!n)
        return -ENOMEM;
    if (old)
        n[old++] = ',';
    strcpy(n + old, item);
    *list = n;
    return 0;
}

/* What a file that is not a regular file is, for messages. */
static const char *file_kind(mode_t m)
{
    return S_ISDIR(m)    ? "a directory"
           : S_ISFIFO(m) ? "a FIFO (named pipe)"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
                         : "not a regular file";
}

/*
 * Read spec file path (at most SPEC_MAX bytes) and parse it. A spec file is text: a NUL
 * byte would end the parser's C string there and silently drop the rest of the file, so
 * it is refused with its line and column. The buffer starts at the file's size (spec
 * files are small) and grows, up to SPEC_MAX + 1 bytes, for a file that grows or whose
 * size says nothing (/proc).
 */
static int read_spec(bfs_mount_args *a, const char *path, char *err, size_t errlen)
{
    struct stat st;
    int fd = bfs_open_regular(path, &st); /* never blocks on a FIFO, never opens a device */
    if (fd == BFS_E_NOT_REGULAR)
        return bfs_errf(-EINVAL, err, errlen,
                        "spec=%s: is %s: a spec file must be a regular file of `key = value` "
                        "lines",
                        path, stat(path, &st) ? "not a regular file" : file_kind(st.st_mode));
    if (fd < 0)
        return bfs_errf(fd, err, errlen, "spec=%s: %s", path, strerror(-fd));
    size_t n = 0, cap = st.st_size < SPEC_MAX ? (size_t)st.st_size + 2 : SPEC_MAX + 2;
    char *buf = malloc(cap); /* n < cap - 1 always: room for the NUL */
    int rc = buf ? 0 : bfs_errf(-ENOMEM, err, errlen, "out of memory");
    while (!rc && n <= SPEC_MAX) { /* a byte more than allowed tells "too large" */
        if (n + 1 == cap) {
            size_t want = cap * 2 < SPEC_MAX + 2 ? cap * 2 : SPEC_MAX + 2;
            char *more = realloc(buf, want);
            if (!more) {
                rc = bfs_errf(-ENOMEM, err, errlen, "out of memory");
                break;
            }
            buf = more, cap = want;
        }
        ssize_t got = read(fd, buf + n, cap - 1 - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            rc = bfs_errf(-errno, err, errlen, "spec=%s: %s", path, strerror(errno));
        else if (got == 0)
            break;
        else
            n += (size_t)got;
    }
    close(fd);
    if (!rc && n > SPEC_MAX)
        rc = bfs_errf(-EFBIG, err, errlen, "spec=%s: larger than %d bytes", path, SPEC_MAX);
    const char *nul = rc ? NULL : memchr(buf, '\0', n);
    if (nul) {
        unsigned long line = 1, col = 1;
        for (const char *p = buf; p < nul; p++)
            if (*p == '\n')
                line++, col = 1;
            else
                col++;
        rc = bfs_errf(-EINVAL, err, errlen,
                      "%s:%lu:%lu: a NUL byte: a spec file is text (`key = value` lines); is "
                      "this the right file?",
                      path, line, col);
    }
    if (!rc) {
        buf[n] = 0;
        rc = bfs_pipeline_parse_spec(&a->pipe, buf, path, err, errlen);
    }
    free(buf);
    return rc;
}

static int parse_uint(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* One -o item (key or key=value). */
static int take_item(bfs_mount_args *a, const char *item, char *err, size_t errlen)
{
    const char *eq = strchr(item, '=');
    size_t klen = eq ? (size_t)(eq - item) : strlen(item);
    const char *val = eq ? eq + 1 : NULL;
    if (klen == 4 && !strncmp(item, "spec", 4)) {
        if (!val || !*val)
            return bfs_errf(-EINVAL, err, errlen, "spec=FILE: a file name is required");
        return read_spec(a, val, err, errlen);
    }
    if (klen == 12 && !strncmp(item, "fuse_threads", 12)) {
        long v;
        if (!val || parse_uint(val, 1, 1024, &v))
            return bfs_errf(-EINVAL, err, errlen, "fuse_threads=%s: must be an integer in 1..1024",
                            val ? val : "");
        a->fuse_threads = (int)v;
        return 0;
    }
    if (klen == 3 && !strncmp(item, "log", 3)) {
        if (!val || !*val)
            return bfs_errf(-EINVAL, err, errlen,
                            "log=FILE|syslog: a file name or syslog is "
                            "required");
        free(a->log);
        return (a->log = strdup(val)) ? 0 : bfs_errf(-ENOMEM, err, errlen, "out of memory");
    }
    if (klen == 11 && !strncmp(item, "passthrough", 11)) {
        if (!val || (strcmp(val, "auto") && strcmp(val, "off")))
            return bfs_errf(-EINVAL, err, errlen, "passthrough=%s: must be auto or off",
                            val ? val : "");
        a->passthrough = !strcmp(val, "auto");
        return 0;
    }
    if (is_pipeline_key(item, klen)) {
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)klen, item);
        return bfs_pipeline_set(&a->pipe, key, val, err, errlen);
    }
    if (in_list(fuse_pass, item)) {
        if (!strcmp(item, "allow_other"))
            a->allow_other = 1;
        return append(&a->fuse_opts, item) ? bfs_errf(-ENOMEM, err, errlen, "out of memory") : 0;
    }
    if (in_list(dropped, item) || !strncmp(item, "x-", 2) || !strncmp(item, "comment=", 8))
        return 0;
    /* let the pipeline table produce its "unknown option, did you mean" message */
    char key[64];
    snprintf(key, sizeof key, "%.*s", (int)(klen < 63 ? klen : 63), item);
    int rc = bfs_pipeline_set(&a->pipe, key, val ? val : "", err, errlen);
    if (rc == -ENOENT) {
        size_t n = strlen(err);
        snprintf(err + n, errlen > n ? errlen - n : 0,
                 "; batchfs also takes spec=FILE, fuse_threads=N, passthrough=auto|off, "
                 "log=FILE|syslog and the "
                 "FUSE mount options "
                 "allow_other, allow_root, auto_unmount, default_permissions, fsname=, "
                 "subtype=, max_read=");
    }
    return rc ? rc : -EINVAL;
}

/* Is the -o item at p (up to the next ',') a libfuse/kernel or mount(8) flag? */
static int is_mount_flag(const char *p)
{
    size_t n = strcspn(p, ",");
    for (const char *const *t = fuse_pass; *t; t++)
        if (strlen(*t) == n && !strncmp(p, *t, n))
            return 1;
    for (const char *const *t = dropped; *t; t++)
        if (strlen(*t) == n && !strncmp(p, *t, n))
            return 1;
    return 0;
}

/* Split one -o argument into items, keeping normalize=m0,m1,m2/s0,s1,s2 and
 * fields=a,b,c whole: after fields=, an item without '=' that is not a mount flag (ro,
 * allow_other, ...) is a field name. */
static int take_list(bfs_mount_args *a, const char *text, char *err, size_t errlen)
{
    char *copy = strdup(text);
    if (!copy)
        return bfs_errf(-ENOMEM, err, errlen, "out of memory");
    int rc = 0;
    char *p = copy;
    while (*p && !rc) {
        char *end = strchr(p, ',');
        if (!strncmp(p, "normalize=", 10))
            while (end && (isdigit((unsigned char)end[1]) || end[1] == '-' || end[1] == '+' ||
                           end[1] == '.'))
                end = strchr(end + 1, ',');
        if (!strncmp(p, "fields=", 7))
            while (end && end[1] && end[1 + strcspn(end + 1, ",=")] != '=' &&
                   !is_mount_flag(end + 1))
                end = strchr(end + 1, ',');
        if (end)
            *end = 0;
        if (*p)
            rc = take_item(a, p, err, errlen);
        p = end ? end + 1 : p + strlen(p);
    }
    free(copy);
    return rc;
}

void bfs_mountopts_free(bfs_mount_args *a)
{
    if (!a)
        return;
    free(a->source);
    free(a->mountpoint);
    free(a->fuse_opts);
    free(a->worker_name);
    free(a->log);
    a->source = a->mountpoint = a->fuse_opts = a->worker_name = a->log = NULL;
}

/* Is arg the flag name, alone or as name=VALUE? */
static int is_flag(const char *arg, const char *name)
{
    size_t n = strlen(name);
    return !strncmp(arg, name, n) && (arg[n] == '\0' || arg[n] == '=');
}

static int want_value(int argc, char **argv, int *i, const char *name, char *err, size_t errlen,
                      const char **out)
{
    const char *arg = argv[*i];
    size_t n = strlen(name);
    if (!strncmp(arg, name, n) && arg[n] == '=') {
        *out = arg + n + 1;
        return 0;
    }
    if (*i + 1 >= argc)
        return bfs_errf(-EINVAL, err, errlen, "%s needs a value", name);
    *out = argv[++*i];
    return 0;
}

#define TOP_USAGE "usage: batchfs top MNT [--interval S] [-n N]"
#define GROUP_RESET_USAGE                                                                          \
    "usage: batchfs group-reset SOURCE -o remote=redis://HOST[:PORT],group=NAME,DATA_OPTIONS"
#define WORKER_USAGE                                                                               \
    "usage: batchfs worker SOURCE -o remote=redis://HOST[:PORT],OPTIONS [--name NAME] "            \
    "[--batches N]"

/* `batchfs top ...` or `batchfs ... --top ...`? (a SOURCE named top is written ./top) */
static int is_top(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "top"))
        return 1;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--top"))
            return 1;
    return 0;
}

/* `batchfs top MNT [--interval S] [-n N]`, `--top` anywhere in place of `top`. */
static int parse_top(int argc, char **argv, bfs_mount_args *a, char *err, size_t errlen)
{
    a->mode = BFS_MODE_TOP;
    a->top_interval = BFS_TOP_INTERVAL_DEFAULT;
    const char *mnt = NULL, *v;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if ((i == 1 && !strcmp(arg, "top")) || !strcmp(arg, "--top"))
            continue;
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
            a->mode = BFS_MODE_HELP;
            return 0;
        }
        if (!strncmp(arg, "--interval", 10) && (!arg[10] || arg[10] == '=')) {
            if (want_value(argc, argv, &i, "--interval", err, errlen, &v))
                return -EINVAL;
            char *end;
            errno = 0;
            double s = strtod(v, &end);
            if (errno || end == v || *end || !(s >= BFS_TOP_INTERVAL_MIN) ||
                !(s <= BFS_TOP_INTERVAL_MAX))
                return bfs_errf(-EINVAL, err, errlen,
                                "--interval %s: must be a number of seconds from %g to %d", v,
                                BFS_TOP_INTERVAL_MIN, BFS_TOP_INTERVAL_MAX);
            a->top_interval = s;
        } else if (!strncmp(arg, "-n", 2)) {
            long n;
            if (arg[2])
                v = arg + 2 + (arg[2] == '=');
            else if (want_value(argc, argv, &i, "-n", err, errlen, &v))
                return -EINVAL;
            if (parse_uint(v, 0, 1000000000L, &n))
                return bfs_errf(-EINVAL, err, errlen,
                                "-n %s: must be a number of updates in 0..1000000000 (0: until "
                                "stopped)",
                                v);
            a->top_iterations = (int)n;
        } else if (arg[0] == '-' && arg[1]) {
            return bfs_errf(-EINVAL, err, errlen, "top: unknown argument '%s' (" TOP_USAGE ")",
                            arg);
        } else if (mnt) {
            return bfs_errf(-EINVAL, err, errlen,
                            "top: one MNT only, '%s' is one too many (" TOP_USAGE ")", arg);
        } else {
            mnt = arg;
        }
    }
    if (!mnt)
        return bfs_errf(-EINVAL, err, errlen,
                        "top: which mount? give its mount point (" TOP_USAGE ")");
    a->mountpoint = strdup(mnt);
    a->fuse_opts = strdup("");
    if (!a->mountpoint || !a->fuse_opts)
        return bfs_errf(-ENOMEM, err, errlen, "out of memory");
    return 0;
}

/* source=: each path made absolute (the daemon's working directory becomes /), the
 * weights kept as written. 0, or -EINVAL / -ENOMEM. */
static int absolute_mix(bfs_mount_args *a, char *err, size_t errlen)
{
    bfs_mix_desc *d = malloc(sizeof *d);
    char *out = malloc(BFS_MIX_TEXT);
    int rc = d && out ? bfs_pipeline_mix(&a->pipe, d, err, errlen)
                      : bfs_errf(-ENOMEM, err, errlen, "out of memory");
    size_t at = 0;
    const char *item = a->pipe.mix;
    for (uint32_t k = 0; !rc && k < d->n; k++) {
        while (*item == ' ' || *item == '\t')
            item++;
        size_t ilen = strcspn(item, "+"), plen = strlen(d->path[k]);
        while (ilen > plen && (item[ilen - 1] == ' ' || item[ilen - 1] == '\t'))
            ilen--;
        char *abs = realpath(d->path[k], NULL);
        const char *p = abs ? abs : d->path[k];
        int w = snprintf(out + at, BFS_MIX_TEXT - at, "%s%s%.*s", k ? "+" : "", p,
                         (int)(ilen - plen), item + plen);
        free(abs);
        if (w < 0 || (size_t)w >= BFS_MIX_TEXT - at)
            rc = bfs_errf(-EINVAL, err, errlen, "source=: the absolute paths are too long");
        else
            at += (size_t)w;
        item += strcspn(item, "+");
        item += *item == '+';
    }
    if (!rc)
        memcpy(a->pipe.mix, out, at + 1);
    free(out);
    free(d);
    return rc;
}

/* MNT/pipeline's `source =` text of a mixture: "PATH:W, PATH:W" (a spec file reads it). */
static char *display_mix(const bfs_pipeline_opts *o)
{
    size_t n = strlen(o->mix);
    char *s = malloc(2 * n + 1);
    if (!s)
        return NULL;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        if (o->mix[i] == '+')
            s[at++] = ',', s[at++] = ' ';
        else
            s[at++] = o->mix[i];
    }
    s[at] = '\0';
    return s;
}

int bfs_mountopts_parse(int argc, char **argv, bfs_mount_args *a, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    bfs_pipeline_defaults(&a->pipe);
    a->fuse_threads = FUSE_THREADS_DEFAULT;
    a->passthrough = 1;
    if (is_top(argc, argv)) {
        int rc = parse_top(argc, argv, a, err, errlen);
        if (rc)
            bfs_mountopts_free(a);
        return rc;
    }
    const char *pos[3];
    int npos = 0, rc = 0;
    const char *mount_only = NULL; /* a flag a worker refuses */
    for (int i = 1; i < argc && !rc; i++) {
        const char *arg = argv[i], *v = NULL;
        long n;
        if (i == 1 && !strcmp(arg, "worker")) { /* (a SOURCE named worker is ./worker) */
            a->mode = BFS_MODE_WORKER;
        } else if (i == 1 && !strcmp(arg, "group-reset")) {
            a->mode = BFS_MODE_GROUP_RESET;
        } else if (is_flag(arg, "--name")) {
            if ((rc = want_value(argc, argv, &i, "--name", err, errlen, &v)))
                break;
            if (!*v || strlen(v) > 128 || strpbrk(v, " \t\r\n")) {
                rc = bfs_errf(
                    -EINVAL, err, errlen,
                    "--name: 1..128 characters without spaces (the worker's name in Redis)");
                break;
            }
            free(a->worker_name);
            if (!(a->worker_name = strdup(v)))
                rc = bfs_errf(-ENOMEM, err, errlen, "out of memory");
        } else if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
            a->mode = BFS_MODE_HELP;
            return 0;
        } else if (!strcmp(arg, "-V") || !strcmp(arg, "--version")) {
            a->mode = BFS_MODE_VERSION;
            return 0;
        } else if (!strncmp(arg, "-o", 2)) {
            if (arg[2])
                v = arg + 2;
            else if (i + 1 < argc)
                v = argv[++i];
            else {
                rc = bfs_errf(-EINVAL, err, errlen, "-o needs a value");
                break;
            }
            rc = take_list(a, v, err, errlen);
        } else if (!strcmp(arg, "-f")) {
            a->foreground = 1;
        } else if (!strcmp(arg, "-d")) {
            a->debug = a->foreground = 1;
            mount_only = arg;
        } else if (!strcmp(arg, "-s")) {
            a->single_thread = 1;
            mount_only = arg;
        } else if (!strcmp(arg, "--bench")) {
            a->mode = BFS_MODE_BENCH;
            mount_only = arg;
        } else if (!strcmp(arg, "--json")) {
            a->bench_json = 1;
            mount_only = arg;
        } else if (is_flag(arg, "--batches") || is_flag(arg, "--epoch") ||
                   is_flag(arg, "--reference")) {
            const char *name = arg[2] == 'b'   ? "--batches"
                               : arg[2] == 'e' ? "--epoch"
                                               : "--reference";
            long lo = name[2] == 'e' ? 0 : 1; /* an epoch may be 0; counts may not */
            if ((rc = want_value(argc, argv, &i, name, err, errlen, &v)))
                break;
            if (parse_uint(v, lo, 1000000000L, &n)) {
                rc = bfs_errf(-EINVAL, err, errlen, "%s=%s: must be an integer in %ld..1000000000",
                              name, v, lo);
                break;
            }
            if (name[2] != 'b')
                mount_only = name;
            if (name[2] == 'b')
                a->bench_batches = (uint64_t)n;
            else if (name[2] == 'e')
                a->bench_epoch = (uint64_t)n;
            else
                a->bench_reference = (int)n;
        } else if (arg[0] == '-' && arg[1]) {
            rc = bfs_errf(-EINVAL, err, errlen, "unknown argument '%s' (see batchfs --help)", arg);
        } else if (npos < 3) {
            pos[npos++] = arg;
        } else {
            rc = bfs_errf(-EINVAL, err, errlen, "too many arguments: '%s'", arg);
        }
    }
    int want =
        a->mode == BFS_MODE_BENCH || a->mode == BFS_MODE_WORKER || a->mode == BFS_MODE_GROUP_RESET
            ? 1
            : 2;
    if (!rc && a->mode == BFS_MODE_GROUP_RESET) {
        if (mount_only || a->foreground || a->worker_name || a->bench_batches)
            rc = bfs_errf(-EINVAL, err, errlen,
                          "group-reset: %s is not its option (" GROUP_RESET_USAGE ")",
                          mount_only       ? mount_only
                          : a->foreground  ? "-f"
                          : a->worker_name ? "--name"
                                           : "--batches");
        else if (a->fuse_opts && a->fuse_opts[0])
            rc = bfs_errf(-EINVAL, err, errlen,
                          "group-reset: mount options (-o %s) mean nothing here (" GROUP_RESET_USAGE
                          ")",
                          a->fuse_opts);
        else if (npos != 1)
            rc = bfs_errf(-EINVAL, err, errlen,
                          "group-reset takes one SOURCE, the mounts' (" GROUP_RESET_USAGE ")");
        else if (!a->pipe.group[0])
            rc = bfs_errf(-EINVAL, err, errlen,
                          "group-reset: which group? give -o group=NAME (" GROUP_RESET_USAGE ")");
        else if (!a->pipe.remote[0])
            rc = bfs_errf(-EINVAL, err, errlen,
                          "group-reset: give -o remote=redis://HOST[:PORT], the Redis the "
                          "group's mounts use; a group without remote= starts over by itself "
                          "once all its mounts are gone (" GROUP_RESET_USAGE ")");
    }
    if (!rc && a->mode == BFS_MODE_WORKER && mount_only)
        rc = bfs_errf(-EINVAL, err, errlen,
                      "worker: %s is not a worker's option (" WORKER_USAGE ")", mount_only);
    if (!rc && a->mode == BFS_MODE_WORKER && a->fuse_opts && a->fuse_opts[0])
        rc = bfs_errf(-EINVAL, err, errlen,
                      "worker: mount options (-o %s) mean nothing to a worker (" WORKER_USAGE ")",
                      a->fuse_opts);
    if (!rc && a->mode != BFS_MODE_WORKER && a->worker_name)
        rc = bfs_errf(-EINVAL, err, errlen, "--name is a worker's option (" WORKER_USAGE ")");
    int mixed = a->pipe.mix[0] != '\0'; /* source=: the sources are an option */
    if (!rc && mixed && npos == want)
        rc = bfs_errf(-EINVAL, err, errlen,
                      "source=%.200s names the datasets, so there is no SOURCE argument: give "
                      "%s",
                      a->pipe.mix, a->mode == BFS_MODE_MOUNT ? "only MOUNTPOINT" : "no SOURCE");
    want -= mixed;
    if (!rc && npos != want)
        rc = bfs_errf(-EINVAL, err, errlen,
                      a->mode == BFS_MODE_BENCH ? "--bench takes one SOURCE"
                      : a->mode == BFS_MODE_WORKER
                          ? "worker takes one SOURCE (" WORKER_USAGE ")"
                          : "expected SOURCE and MOUNTPOINT (see batchfs --help)");
    if (!rc && a->mode == BFS_MODE_WORKER && !a->pipe.remote[0])
        rc = bfs_errf(-EINVAL, err, errlen,
                      "worker: which Redis? give -o remote=redis://HOST[:PORT], the one the mounts "
                      "use (" WORKER_USAGE ")");
    if (!rc)
        rc = bfs_pipeline_finish(&a->pipe, err, errlen);
    if (!rc && a->mode == BFS_MODE_BENCH && a->bench_epoch >= a->pipe.epochs)
        rc = bfs_errf(-EINVAL, err, errlen, "--epoch %llu: the pipeline has epochs 0..%u",
                      (unsigned long long)a->bench_epoch, a->pipe.epochs - 1);
    if (!rc && mixed)
        rc = absolute_mix(a, err, errlen);
    if (!rc) {
        /* absolute, so /pipeline and the fsname say where the data is, whatever the
         * daemon's working directory becomes */
        char *abs = mixed ? NULL : realpath(pos[0], NULL);
        a->source = abs ? abs : mixed ? display_mix(&a->pipe) : strdup(pos[0]);
        /* absolute too: the daemon's working directory becomes / (fuse_daemonize), and
         * the unmount at exit must find the mountpoint */
        int m = mixed ? 0 : 1; /* where MOUNTPOINT is among the arguments */
        char *mabs = npos > m ? realpath(pos[m], NULL) : NULL;
        a->mountpoint = mabs ? mabs : npos > m ? strdup(pos[m]) : NULL;
        if (!a->fuse_opts)
            a->fuse_opts = strdup("");
        if (!a->source || (npos > m && !a->mountpoint) || !a->fuse_opts)
            rc = bfs_errf(-ENOMEM, err, errlen, "out of memory");
    }
    if (rc)
        bfs_mountopts_free(a);
    return rc;
}

void bfs_mountopts_help(FILE *f)
{
    fprintf(f,
            "usage: batchfs SOURCE MOUNTPOINT [-o OPTIONS] [-f] [-d] [-s]\n"
            "       batchfs --bench SOURCE [-o OPTIONS] [--batches N] [--epoch E] "
            "[--reference N] [--json]\n"
            "       batchfs top MNT [--interval S] [-n N]     (or batchfs --top MNT ...)\n"
            "       batchfs worker SOURCE -o remote=redis://HOST[:PORT],OPTIONS [--name NAME]\n"
            "                      [--batches N]\n"
            "       batchfs group-reset SOURCE -o remote=redis://HOST[:PORT],group=NAME,OPTIONS\n"
            "       batchfs --help | --version\n"
            "\n"
            "Mounts the input pipeline over SOURCE (a .bfs file made by mkbatchfs, local or in\n"
            "object storage as s3://BUCKET/KEY or https://HOST/PATH, or an ImageFolder\n"
            "directory) read-only at MOUNTPOINT:\n"
            "  MOUNTPOINT/pipeline            canonical pipeline options and fingerprint\n"
            "  MOUNTPOINT/stats               live JSON statistics\n"
            "  MOUNTPOINT/epoch/N/batch_K     batch K of epoch N (a safetensors file)\n"
            "\n"
            "  -f                 stay in the foreground\n"
            "  -d                 FUSE debug output (implies -f)\n"
            "  -s                 single-threaded FUSE loop\n"
            "  --bench            run the pipeline in-process, no mount: images/s, time per\n"
            "                     stage, and libjpeg-turbo's single-core full-decode rate on\n"
            "                     the same files (--batches N [20], --epoch E [0],\n"
            "                     --reference N images [400], --json)\n"
            "  top MNT, --top MNT watch a mount live, from MNT/stats: images/s, batches/s,\n"
            "                     time per stage, cache hit rates, readers, autotune\n"
            "                     decisions; q or Ctrl-C quits. Not on a terminal: one line\n"
            "                     per interval. --interval S seconds between updates [%g],\n"
            "                     -n N updates, then exit [0: until stopped]. (A SOURCE\n"
            "                     named top is written ./top.)\n"
            "  worker SOURCE      compute batches for mounts with -o remote= on other hosts:\n"
            "                     the same SOURCE data and data-changing options as those\n"
            "                     mounts, and remote=, the Redis they share; stays in the\n"
            "                     foreground, logs to stderr, stops on SIGINT or SIGTERM\n"
            "                     (--name NAME in Redis [HOST:PID], --batches N then exit\n"
            "                     [0: no limit]; docs/scale-out.md)\n"
            "  group-reset SOURCE a clean start for group=NAME across hosts: delete its claim\n"
            "                     counters and given-back lists in the Redis of remote=\n"
            "                     (kept a week, so a reused name finds its epochs used up),\n"
            "                     for the pipeline of SOURCE and the mounts' data options;\n"
            "                     says how many keys. Run it when none of its mounts is up\n"
            "\n"
            "mount options (-o):\n"
            "  spec=FILE          read pipeline options from FILE (`key = value` lines)\n"
            "  fuse_threads=N     FUSE request threads (default %d)\n"
            "  passthrough=auto|off  auto (default): when the kernel offers FUSE passthrough\n"
            "                     (Linux >= 6.9) and batchfs runs as root, batch files are\n"
            "                     backed by the batch's sealed memory file: reads and mmap\n"
            "                     go straight to it; off: every read is copied by the daemon\n"
            "  log=FILE|syslog    where the daemon's messages go in the background: syslog\n"
            "                     (default; LOG_DAEMON, tagged with the mount point) or\n"
            "                     appended to FILE with time stamps (also with -f, which\n"
            "                     otherwise keeps them on stderr); with no syslog daemon\n"
            "                     (no /dev/log), $XDG_RUNTIME_DIR/batchfs/MNT.log (else\n"
            "                     /run/batchfs or /tmp/batchfs-UID), said at mount\n"
            "  allow_other, allow_root, auto_unmount, default_permissions, fsname=,\n"
            "  subtype=, max_read=, and the kernel's generic options pass to the mount;\n"
            "  fstab's defaults, auto, noauto, user, users, nouser, owner, _netdev, nofail,\n"
            "  rw, x-* and comment= are ignored. Unknown options are errors.\n"
            "\n"
            "pipeline options (-o key=value,...; -o may repeat; last value wins):\n%s",
            BFS_TOP_INTERVAL_DEFAULT, FUSE_THREADS_DEFAULT, bfs_pipeline_help());
}
