/*
 * check_log.c — where the mount's messages go without a syslog daemon (fs/log.h): the
 * syslog socket probe (missing, stale, listening by datagram or stream), the runtime
 * directory ($XDG_RUNTIME_DIR/batchfs, /run/batchfs for root, /tmp/batchfs-UID), and the
 * fallback log file: its name from the mount point, its modes, and the refusals of a
 * directory or file that is a symbolic link, not a directory, or not private to this user
 * (another owner is checked when run as root).
 */
#include "fs/log.h"
#include "tests/testutil.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define HAS(s, sub) ck_assert_msg(strstr((s), (sub)) != NULL, "'%s' not in: %s", (sub), (s))

static char *root;
static char buf[1024], err[4096], path[4096];

static void setup(void)
{
    root = tu_mkdtemp("check_log");
    ck_assert_ptr_nonnull(root);
    snprintf(buf, sizeof buf, "%s/xdg", root);
    ck_assert_int_eq(mkdir(buf, 0700), 0);
    setenv("XDG_RUNTIME_DIR", buf, 1);
}

static void teardown(void)
{
    unsetenv("XDG_RUNTIME_DIR");
    unsetenv("BATCHFS_SYSLOG_SOCKET");
    tu_rmtree(root);
}

/* A unix socket of type `type` bound at root/name; listening (stream) unless `stale`, in
 * which case it is closed again and only its file is left. The fd, or -1 when closed. */
static int bound_socket(const char *name, int type, int stale)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s/%s", root, name);
    int fd = socket(AF_UNIX, type, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    if (type == SOCK_STREAM)
        ck_assert_int_eq(listen(fd, 4), 0);
    setenv("BATCHFS_SYSLOG_SOCKET", sa.sun_path, 1);
    if (stale) {
        close(fd);
        return -1;
    }
    return fd;
}

START_TEST(syslog_probe)
{
    char why[512] = "";
    snprintf(buf, sizeof buf, "%s/none", root);
    setenv("BATCHFS_SYSLOG_SOCKET", buf, 1);
    ck_assert_int_eq(bfs_log_syslog_ready(why, sizeof why), 0);
    snprintf(path, sizeof path, "no syslog socket (%s: No such file or directory)", buf);
    ck_assert_str_eq(why, path);

    /* a socket file nobody listens on (a dead syslog daemon's) */
    bound_socket("stale", SOCK_DGRAM, 1);
    ck_assert_int_eq(bfs_log_syslog_ready(why, sizeof why), 0);
    HAS(why, "Connection refused");

    /* journald and rsyslog: datagrams; some daemons: a stream socket */
    int fd = bound_socket("dgram", SOCK_DGRAM, 0);
    ck_assert_int_eq(bfs_log_syslog_ready(why, sizeof why), 1);
    close(fd);
    fd = bound_socket("stream", SOCK_STREAM, 0);
    ck_assert_int_eq(bfs_log_syslog_ready(why, sizeof why), 1);
    close(fd);

    /* a plain file there: not a syslog */
    snprintf(buf, sizeof buf, "%s/plain", root);
    ck_assert_int_eq(tu_write_file(buf, "x", 1), 0);
    setenv("BATCHFS_SYSLOG_SOCKET", buf, 1);
    ck_assert_int_eq(bfs_log_syslog_ready(why, sizeof why), 0);
}
END_TEST

START_TEST(runtime_dir)
{
    char dir[1024];
    ck_assert_int_eq(bfs_log_runtime_dir(dir, sizeof dir), 0);
    snprintf(buf, sizeof buf, "%s/xdg/batchfs", root);
    ck_assert_str_eq(dir, buf);
    /* not an absolute path (XDG Base Directory: ignored), or unset */
    setenv("XDG_RUNTIME_DIR", "relative", 1);
    ck_assert_int_eq(bfs_log_runtime_dir(dir, sizeof dir), 0);
    snprintf(buf, sizeof buf, "/tmp/batchfs-%u", (unsigned)geteuid());
    ck_assert_str_eq(dir, geteuid() == 0 ? "/run/batchfs" : buf);
    unsetenv("XDG_RUNTIME_DIR");
    ck_assert_int_eq(bfs_log_runtime_dir(dir, sizeof dir), 0);
    ck_assert_str_eq(dir, geteuid() == 0 ? "/run/batchfs" : buf);
    ck_assert_int_eq(bfs_log_runtime_dir(dir, 8), -ENAMETOOLONG);
}
END_TEST

START_TEST(fallback_file)
{
    int fd = bfs_log_fallback_open("/mnt/train set/a", path, sizeof path, err, sizeof err);
    ck_assert_msg(fd >= 0, "%s", err);
    snprintf(buf, sizeof buf, "%s/xdg/batchfs/mnt-train_set-a.log", root);
    ck_assert_str_eq(path, buf);
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0600);
    ck_assert_int_eq(write(fd, "one\n", 4), 4);
    close(fd);
    snprintf(buf, sizeof buf, "%s/xdg/batchfs", root);
    ck_assert_int_eq(stat(buf, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0700);
    /* the same mount again: appended, not truncated */
    fd = bfs_log_fallback_open("/mnt/train set/a/", path, sizeof path, err, sizeof err);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "two\n", 4), 4);
    close(fd);
    char text[64] = "";
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fread(text, 1, sizeof text - 1, f), 8);
    fclose(f);
    ck_assert_str_eq(text, "one\ntwo\n");

    /* a long mount point: within NAME_MAX, its end kept, a hash for the rest */
    char mnt[1024] = "/";
    for (int i = 0; i < 60; i++)
        strcat(mnt, "deep/");
    strcat(mnt, "leaf");
    fd = bfs_log_fallback_open(mnt, path, sizeof path, err, sizeof err);
    ck_assert_msg(fd >= 0, "%s", err);
    close(fd);
    const char *name = strrchr(path, '/') + 1;
    ck_assert_uint_le(strlen(name), 255);
    ck_assert_str_eq(name + strlen(name) - 13, "deep-leaf.log");
    /* a dot first would hide it: "/.x" is "-.x.log" */
    fd = bfs_log_fallback_open("/.x", path, sizeof path, err, sizeof err);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_str_eq(strrchr(path, '/'), "/-.x.log");
}
END_TEST

START_TEST(refuses_what_others_could_use)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/xdg/batchfs", root);
    /* the directory a symbolic link (to a directory that would do) */
    snprintf(buf, sizeof buf, "%s/elsewhere", root);
    ck_assert_int_eq(mkdir(buf, 0700), 0);
    ck_assert_int_eq(symlink(buf, dir), 0);
    ck_assert_int_lt(bfs_log_fallback_open("/m", path, sizeof path, err, sizeof err), 0);
    HAS(err, "is a symbolic link: remove it");
    ck_assert_int_eq(unlink(dir), 0);
    /* not a directory */
    ck_assert_int_eq(tu_write_file(dir, "", 0), 0);
    ck_assert_int_lt(bfs_log_fallback_open("/m", path, sizeof path, err, sizeof err), 0);
    HAS(err, "is not a directory: remove it");
    ck_assert_int_eq(unlink(dir), 0);
    /* open to the group (another user could read or replace the log) */
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    ck_assert_int_eq(chmod(dir, 0770), 0);
    ck_assert_int_eq(bfs_log_fallback_open("/m", path, sizeof path, err, sizeof err), -EPERM);
    HAS(err, "is not private to this user");
    HAS(err, "mode 770");
    ck_assert_int_eq(chmod(dir, 0700), 0);
    /* the file a symbolic link, or readable by others */
    snprintf(buf, sizeof buf, "%s/m.log", dir);
    snprintf(path, sizeof path, "%s/elsewhere/target", root);
    ck_assert_int_eq(symlink(path, buf), 0);
    ck_assert_int_lt(bfs_log_fallback_open("/m", path, sizeof path, err, sizeof err), 0);
    HAS(err, "a symbolic link: remove it");
    ck_assert_int_eq(access(path, F_OK), -1); /* (nothing created through it) */
    ck_assert_int_eq(unlink(buf), 0);
    ck_assert_int_eq(tu_write_file(buf, "", 0), 0);
    ck_assert_int_eq(chmod(buf, 0644), 0);
    ck_assert_int_eq(bfs_log_fallback_open("/m", path, sizeof path, err, sizeof err), -EPERM);
    HAS(err, "log file");
    ck_assert_int_eq(chmod(buf, 0600), 0);
    int fd = bfs_log_fallback_open("/m", path, sizeof path, err, sizeof err);
    ck_assert_msg(fd >= 0, "%s", err);
    close(fd);
    /* another user's directory (root can make one) */
    if (geteuid() == 0) {
        ck_assert_int_eq(chown(dir, 65534, 65534), 0);
        ck_assert_int_eq(bfs_log_fallback_open("/m", path, sizeof path, err, sizeof err), -EPERM);
        HAS(err, "owner uid 65534");
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("log");
    TCase *t = tcase_create("log");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, syslog_probe);
    tcase_add_test(t, runtime_dir);
    tcase_add_test(t, fallback_file);
    tcase_add_test(t, refuses_what_others_could_use);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *r = srunner_create(suite());
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
