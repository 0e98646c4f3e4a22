/*
 * log.c — the daemon's stderr to syslog or a file (see log.h).
 */
#include "fs/log.h"
#include "base/err.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_BYTES 4096

static struct {
    int on;
    int out;       /* the file, or -1: syslog */
    int rd;        /* the pipe's read end */
    char tag[512]; /* the mount point */
    pthread_t th;
} lg = {.out = -1, .rd = -1};

int bfs_log_open(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0644);
    if (fd < 0)
        return bfs_errf(-errno, err, errlen, "log=%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return bfs_errf(-EINVAL, err, errlen, "log=%s: not a regular file", path);
    }
    return fd;
}

int bfs_log_syslog_ready(char *why, size_t cap)
{
    const char *path = getenv("BATCHFS_SYSLOG_SOCKET");
    if (!path || !*path)
        path = BFS_LOG_SYSLOG_SOCKET;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) {
        snprintf(why, cap, "no syslog socket (%s: name too long)", path);
        return 0;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    /* datagrams, as syslog(3) tries first; then a stream socket, as it does next */
    static const int types[] = {SOCK_DGRAM, SOCK_STREAM};
    int e = 0;
    for (int i = 0; i < 2; i++) {
        int fd = socket(AF_UNIX, types[i] | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            e = errno;
            continue;
        }
        int rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
        e = errno;
        close(fd);
        if (rc == 0)
            return 1;
        if (e != EPROTOTYPE)
            break;
    }
    snprintf(why, cap, "no syslog socket (%s: %s)", path, strerror(e));
    return 0;
}

int bfs_log_runtime_dir(char *dir, size_t cap)
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    int n = xdg && xdg[0] == '/' ? snprintf(dir, cap, "%s/batchfs", xdg)
            : geteuid() == 0     ? snprintf(dir, cap, "/run/batchfs")
                                 : snprintf(dir, cap, "/tmp/batchfs-%u", (unsigned)geteuid());
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/* The file name of the log of mountpoint (see bfs_log_fallback_open). */
static void log_name(const char *mountpoint, char *name, size_t cap)
{
    while (*mountpoint == '/')
        mountpoint++;
    size_t len = strlen(mountpoint);
    while (len && mountpoint[len - 1] == '/')
        len--;
    char esc[PATH_MAX];
    size_t n = 0;
    for (size_t i = 0; i < len && n + 1 < sizeof esc; i++) {
        char c = mountpoint[i];
        esc[n++] = c == '/' ? '-'
                   : (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                           c == '.' || c == '_' || c == '-'
                       ? c
                       : '_';
    }
    esc[n] = '\0';
    if (!n || esc[0] == '.') { /* (no hidden or empty names: "/" is "-.log") */
        memmove(esc + 1, esc, n + 1 < sizeof esc ? n + 1 : sizeof esc - 1);
        esc[0] = '-';
        esc[sizeof esc - 1] = '\0';
        n = strlen(esc);
    }
    if (n > 200) { /* NAME_MAX: the end of the path (the most telling part) and a hash */
        uint64_t h = 1469598103934665603ull;
        for (size_t i = 0; i < len; i++)
            h = (h ^ (unsigned char)mountpoint[i]) * 1099511628211ull;
        snprintf(name, cap, "%016llx-%s.log", (unsigned long long)h, esc + n - 180);
        return;
    }
    snprintf(name, cap, "%s.log", esc);
}

/* A file or directory that only this user may use: theirs, no group or other bits. */
static int private_to_us(const struct stat *st, const char *what, const char *path, char *err,
                         size_t errlen)
{
    if (st->st_uid != geteuid() || (st->st_mode & 077))
        return bfs_errf(-EPERM, err, errlen,
                        "%s %s is not private to this user (owner uid %u, mode %03o; want uid "
                        "%u, no group or other permissions): remove it or fix it",
                        what, path, (unsigned)st->st_uid, (unsigned)(st->st_mode & 0777),
                        (unsigned)geteuid());
    return 0;
}

int bfs_log_fallback_open(const char *mountpoint, char *path, size_t cap, char *err, size_t errlen)
{
    char dir[PATH_MAX], name[256];
    if (bfs_log_runtime_dir(dir, sizeof dir))
        return bfs_errf(-ENAMETOOLONG, err, errlen, "runtime directory: $XDG_RUNTIME_DIR too long");
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return bfs_errf(-errno, err, errlen, "cannot create the log directory %s: %s", dir,
                        strerror(errno));
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (dfd < 0 && (errno == ELOOP || errno == ENOTDIR))
        return bfs_errf(-errno, err, errlen, "log directory %s is %s: remove it", dir,
                        lstat(dir, &st) == 0 && S_ISLNK(st.st_mode) ? "a symbolic link"
                                                                    : "not a directory");
    if (dfd < 0)
        return bfs_errf(-errno, err, errlen, "log directory %s: %s", dir, strerror(errno));
    int rc = fstat(dfd, &st) < 0
                 ? bfs_errf(-errno, err, errlen, "log directory %s: %s", dir, strerror(errno))
                 : private_to_us(&st, "log directory", dir, err, errlen);
    log_name(mountpoint, name, sizeof name);
    if (snprintf(path, cap, "%s/%s", dir, name) >= (int)cap && !rc)
        rc = bfs_errf(-ENAMETOOLONG, err, errlen, "log file name too long");
    int fd = -1;
    if (!rc) {
        fd = openat(dfd, name, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY,
                    0600);
        if (fd < 0)
            rc = bfs_errf(-errno, err, errlen, "log file %s: %s%s", path, strerror(errno),
                          errno == ELOOP ? " (a symbolic link: remove it)" : "");
    }
    if (!rc && fstat(fd, &st) < 0)
        rc = bfs_errf(-errno, err, errlen, "log file %s: %s", path, strerror(errno));
    else if (!rc && !S_ISREG(st.st_mode))
        rc = bfs_errf(-EINVAL, err, errlen, "log file %s: not a regular file", path);
    else if (!rc)
        rc = private_to_us(&st, "log file", path, err, errlen);
    close(dfd);
    if (rc) {
        if (fd >= 0)
            close(fd);
        return rc;
    }
    return fd;
}

int bfs_log_level(const char *line)
{
    if (strstr(line, "cannot") || strstr(line, "failed") || strstr(line, "error") ||
        strstr(line, "failing"))
        return LOG_ERR;
    if (strstr(line, "bad sample") || strstr(line, "warning"))
        return LOG_WARNING;
    return LOG_INFO;
}

static void emit(const char *line)
{
    if (!strncmp(line, "batchfs: ", 9)) /* the log says who writes */
        line += 9;
    if (lg.out < 0) {
        syslog(bfs_log_level(line), "[%s] %s", lg.tag, line);
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char buf[LINE_MAX_BYTES + 700];
    int n = snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ batchfs[%ld] [%s] %s\n",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, (long)getpid(), lg.tag, line);
    if (n > (int)sizeof buf - 1)
        n = (int)sizeof buf - 1, buf[n - 1] = '\n';
    for (int off = 0; off < n;) { /* (a full disk loses lines; nothing to tell then) */
        ssize_t w = write(lg.out, buf + off, (size_t)(n - off));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (int)w;
    }
}

static void *reader(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "bfs-log");
    char line[LINE_MAX_BYTES + 1];
    size_t len = 0;
    char chunk[4096];
    for (;;) {
        ssize_t n = read(lg.rd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n; i++) {
            if (chunk[i] == '\n' || len == LINE_MAX_BYTES) {
                line[len] = '\0';
                emit(line);
                len = 0;
                if (chunk[i] == '\n')
                    continue;
            }
            line[len++] = chunk[i];
        }
    }
    if (len) {
        line[len] = '\0';
        emit(line);
    }
    return NULL;
}

int bfs_log_start(int fd, const char *tag)
{
    if (lg.on)
        return -EALREADY;
    int p[2];
    if (pipe2(p, O_CLOEXEC))
        return -errno;
    snprintf(lg.tag, sizeof lg.tag, "%s", tag ? tag : "");
    lg.out = fd, lg.rd = p[0];
    if (fd < 0)
        openlog("batchfs", LOG_PID | LOG_NDELAY, LOG_DAEMON);
    fflush(stderr);
    if (dup2(p[1], STDERR_FILENO) < 0) {
        int e = errno;
        close(p[0]);
        close(p[1]);
        return -e;
    }
    close(p[1]);
    if (pthread_create(&lg.th, NULL, reader, NULL)) {
        int nul = open("/dev/null", O_WRONLY);
        if (nul >= 0) {
            dup2(nul, STDERR_FILENO);
            close(nul);
        }
        close(p[0]);
        return -EAGAIN;
    }
    lg.on = 1;
    return 0;
}

void bfs_log_stop(void)
{
    if (!lg.on)
        return;
    fflush(stderr);
    int nul = open("/dev/null", O_WRONLY);
    if (nul >= 0) { /* the pipe's last write end closes: the reader sees EOF */
        dup2(nul, STDERR_FILENO);
        close(nul);
    } else {
        close(STDERR_FILENO);
    }
    pthread_join(lg.th, NULL);
    close(lg.rd);
    if (lg.out >= 0)
        close(lg.out);
    else
        closelog();
    lg.on = 0;
}
