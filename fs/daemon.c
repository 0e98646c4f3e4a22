/*
 * daemon.c — going to the background (fsb_daemonize) and where the daemon's stderr goes
 * then (log=, syslog, a file of the mount's in the runtime directory, /dev/null).
 */
#include "fs/fs_internal.h"
#include "fs/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/fuse.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* The write end of the pipe to the waiting parent (daemon_start), or -1. */
static int start_pipe = -1;

/* Where stderr goes once the daemon is in the background (daemon_started): LOG_NONE
 * /dev/null, LOG_SYSLOG syslog, LOG_PROBE syslog if a syslog daemon listens, else a file
 * (syslog_or_fallback, decided once the mount works), else a log= file's descriptor. */
enum { LOG_PROBE = -3, LOG_NONE = -2, LOG_SYSLOG = -1 };
static int bg_log = LOG_NONE;
static const char *bg_log_tag = "";
static const bfs_mount_args *bg_args; /* (for LOG_PROBE) */

/*
 * Go to the background (not -f): like fuse_daemonize (fork, setsid, chdir /, stdin and
 * stdout to /dev/null), except that the parent exits only once the kernel's INIT has been
 * answered (daemon_started): with 0 when it was accepted, 1 when the daemon fails first
 * (an option libfuse or the kernel refuses at INIT, no memory for the workers). Until then
 * the daemon's stderr is still the terminal, so such a failure is reported there and the
 * command's exit status says whether the mount works. -1 if fork or pipe fail.
 */
static int daemon_start(int foreground)
{
    if (chdir("/")) { /* (as libfuse does; the paths given were made absolute) */
    }
    if (foreground)
        return 0;
    int p[2];
    if (pipe2(p, O_CLOEXEC))
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid > 0) { /* (Ctrl-C while waiting ends the wait, not the daemon) */
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        close(p[1]);
        char c = 1;
        ssize_t n;
        do
            n = read(p[0], &c, 1);
        while (n < 0 && errno == EINTR);
        _exit(n == 1 && c == 0 ? 0 : 1); /* (EOF: the daemon died; it said why) */
    }
    close(p[0]);
    setsid();
    int nul = open("/dev/null", O_RDWR);
    if (nul >= 0) {
        dup2(nul, 0);
        dup2(nul, 1);
        if (nul > 2)
            close(nul);
    }
    start_pipe = p[1];
    return 0;
}

/*
 * Where syslog would go nowhere (no daemon on its socket: containers, most images, where
 * syslog(3) silently drops every line, the one explaining an EIO included): with -f
 * stderr, in the background a file of this mount in the runtime directory. Says which on
 * stderr, still the terminal. Returns LOG_SYSLOG, LOG_NONE (stderr) or the file's fd.
 */
static int syslog_or_fallback(const bfs_mount_args *a)
{
    char why[600], path[PATH_MAX], err[PATH_MAX + 256];
    if (bfs_log_syslog_ready(why, sizeof why))
        return LOG_SYSLOG;
    if (a->foreground) {
        fprintf(stderr, "batchfs: log=syslog: %s: messages stay on stderr\n", why);
        return LOG_NONE;
    }
    int fd = bfs_log_fallback_open(a->mountpoint, path, sizeof path, err, sizeof err);
    if (fd >= 0) {
        fprintf(stderr, "batchfs: %s: logging to %s instead\n", why, path);
        return fd;
    }
    fprintf(stderr,
            "batchfs: warning: %s, and %s: the daemon's messages are lost (give -o "
            "log=FILE)\n",
            why, err);
    return LOG_SYSLOG;
}

/* The INIT reply is written (ok), or the daemon gives up: release the waiting parent,
 * then stderr goes to /dev/null (the terminal may be gone soon). Any thread, once. */
void fsb_started(int ok)
{
    int fd = __atomic_exchange_n(&start_pipe, -1, __ATOMIC_ACQ_REL);
    if (fd < 0)
        return;
    /* (before the parent exits: its terminal shows the line before the prompt; a mount
     * that failed gets no log file) */
    if (bg_log == LOG_PROBE)
        bg_log = ok ? syslog_or_fallback(bg_args) : LOG_NONE;
    char c = ok ? 0 : 1;
    if (write(fd, &c, 1) < 0) { /* (the parent is gone: nothing to tell) */
    }
    close(fd);
    if (bg_log != LOG_NONE && bfs_log_start(bg_log, bg_log_tag) == 0)
        return; /* stderr goes to syslog or the log= file now */
    int nul = open("/dev/null", O_WRONLY);
    if (nul >= 0) {
        dup2(nul, 2);
        close(nul);
    }
}

int fsb_daemonize(const bfs_mount_args *a)
{
    /* log=: opened here, so a bad path is reported on the terminal; syslog by default in
     * the background; with -f only log=FILE or log=syslog take stderr's lines */
    int log_fd = LOG_NONE;
    if (a->log && strcmp(a->log, "syslog")) {
        char lerr[1024];
        if ((log_fd = bfs_log_open(a->log, lerr, sizeof lerr)) < 0) {
            fprintf(stderr, "batchfs: %s\n", lerr);
            return -1;
        }
    } else if (a->log || !a->foreground) {
        /* (in the background: once the mount works, so a refused mount makes no file) */
        log_fd = a->foreground ? syslog_or_fallback(a) : LOG_PROBE;
    }
    bg_log_tag = a->mountpoint;
    bg_args = a;
    if (daemon_start(a->foreground)) {
        fprintf(stderr, "batchfs: cannot go to the background: %s\n", strerror(errno));
        return -1;
    }
    if (!a->foreground)
        bg_log = log_fd; /* fsb_started hands stderr over */
    else if (log_fd != LOG_NONE && bfs_log_start(log_fd, a->mountpoint))
        fprintf(stderr, "batchfs: log=%s: cannot start the log; messages stay on stderr\n", a->log);
    return 0;
}
