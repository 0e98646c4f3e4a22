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
#include <sys/stat.h>
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
