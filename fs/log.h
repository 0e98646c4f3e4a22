/*
 * log.h — where the mount daemon's messages go once it runs in the background.
 *
 * Every module reports to stderr (one line per event: "batchfs: bad sample ...",
 * "batchfs: autotune ...", failures). A daemon in the background has no terminal, so it
 * sends those lines on: to syslog (LOG_DAEMON, ident "batchfs" with its pid, each line
 * tagged with the mount point and given a level from its words), or with log=FILE
 * appended to FILE, each line prefixed with an ISO 8601 UTC time stamp, the pid and the
 * mount point. In the foreground (-f) stderr stays as it is unless log= names a file.
 * Where no syslog daemon listens (containers), the mount logs to a file of its own in a
 * runtime directory instead (bfs_log_fallback_open) and says so on the terminal.
 * Implementation: stderr becomes a pipe, and a thread of its own reads it line by line,
 * so no module needs to know; a line longer than 4 KiB is cut, never lost whole.
 */
#ifndef BATCHFS_FS_LOG_H
#define BATCHFS_FS_LOG_H

#include <stddef.h>

/* bfs_log_open - open path to append log lines to (created 0644 if missing), before the
 * daemon goes to the background so that a failure is reported on the terminal.
 * Returns the descriptor or a negative errno, with a message naming the file in err. */
int bfs_log_open(const char *path, char *err, size_t errlen);

/* bfs_log_start - from now on what the process writes to stderr goes to fd (from
 * bfs_log_open; the log takes it over), or with fd -1 to syslog; tag: the mount point.
 * Returns 0 or a negative errno (stderr then stays as it was). Once per process. */
int bfs_log_start(int fd, const char *tag);

/* The syslog socket syslog(3) writes to; the environment variable BATCHFS_SYSLOG_SOCKET (read
 * only by bfs_log_syslog_ready, for tests) names another path to check instead. */
#define BFS_LOG_SYSLOG_SOCKET "/dev/log"

/* bfs_log_syslog_ready - 1 when a syslog daemon listens on the syslog socket (a test
 * connect), else 0 with why naming the socket and the reason ("no syslog socket
 * (/dev/log: No such file or directory)"): containers and most images have none, and
 * syslog(3) then drops every line. */
int bfs_log_syslog_ready(char *why, size_t cap);

/*
 * bfs_log_runtime_dir - the directory for log files when there is no syslog:
 * $XDG_RUNTIME_DIR/batchfs when that variable holds an absolute path, else /run/batchfs
 * for root and /tmp/batchfs-UID for others. 0, or -ENAMETOOLONG.
 */
int bfs_log_runtime_dir(char *dir, size_t cap);

/*
 * bfs_log_fallback_open - open (append, created 0600) the log file of the mount at
 * mountpoint (absolute) in the runtime directory, created 0700 if missing: the mount
 * point with '/' as '-' and other characters than [A-Za-z0-9._-] as '_', plus ".log"
 * (/mnt/train: mnt-train.log; a long one is cut and given a hash). The directory must be
 * this user's, private (no group or other permissions) and not a symbolic link, and so
 * must the file: else it is refused (someone else could read or replace the log). Returns
 * the descriptor with the file's path in path, or a negative errno with a message in err.
 */
int bfs_log_fallback_open(const char *mountpoint, char *path, size_t cap, char *err, size_t errlen);

/* bfs_log_level - the syslog level of a line: LOG_ERR for failures ("cannot", "failed",
 * "error"), LOG_WARNING for bad samples and warnings, LOG_INFO otherwise. */
int bfs_log_level(const char *line);

/* bfs_log_stop - write out every line still in the pipe, then stop the thread; stderr
 * goes to /dev/null. A no-op when bfs_log_start was not called. */
void bfs_log_stop(void);

#endif
