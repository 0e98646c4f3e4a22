/*
 * check_device.c — the FUSE device check (fs/device.h) told per reason, on files in a
 * temporary directory, never on /dev/fuse: a missing device and a device node without a
 * driver say to load the fuse module; a device this user may not open (checked as user
 * nobody in a child when run as root) names its mode, owner and group and says to run as
 * a user who may or to join the group that may, never to load the module.
 */
#include "fs/device.h"
#include "tests/testutil.h"

#include <check.h>
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#define HAS(s, sub)   ck_assert_msg(strstr((s), (sub)) != NULL, "'%s' not in: %s", (sub), (s))
#define LACKS(s, sub) ck_assert_msg(strstr((s), (sub)) == NULL, "'%s' in: %s", (sub), (s))

#define NOBODY 65534

static char *root;
static char path[4096];

static void setup(void)
{
    root = tu_mkdtemp("check_device");
    ck_assert_ptr_nonnull(root);
    ck_assert_int_eq(chmod(root, 0755), 0); /* user nobody looks inside */
    snprintf(path, sizeof path, "%s/fuse", root);
}

static void teardown(void)
{
    tu_rmtree(root);
}

/* fsd_check(path) as user nobody (no supplementary groups) in a child: its return value,
 * and its message in err. Only root can become nobody: 0 without running otherwise. */
static int as_nobody(int *rc, char *err, size_t errlen)
{
    if (geteuid() != 0)
        return 0;
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(p[0]);
        char msg[1024] = "";
        int r = -1000;
        if (setgroups(0, NULL) == 0 && setgid(NOBODY) == 0 && setuid(NOBODY) == 0)
            r = fsd_check(path, msg, sizeof msg);
        if (write(p[1], &r, sizeof r) != sizeof r || write(p[1], msg, sizeof msg) != sizeof msg)
            _exit(1);
        _exit(0);
    }
    close(p[1]);
    char msg[1024];
    ck_assert_int_eq(read(p[0], rc, sizeof *rc), sizeof *rc);
    ck_assert_int_eq(read(p[0], msg, sizeof msg), sizeof msg);
    close(p[0]);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    ck_assert_int_ne(*rc, -1000); /* could not become nobody */
    snprintf(err, errlen, "%s", msg);
    return 1;
}

START_TEST(opens_what_it_may)
{
    char err[1024] = "";
    ck_assert_int_eq(tu_write_file(path, "", 0), 0);
    ck_assert_int_eq(fsd_check(path, err, sizeof err), 0);
    ck_assert_str_eq(err, "");
}
END_TEST

START_TEST(missing_device_means_no_module)
{
    char err[1024];
    ck_assert_int_eq(fsd_check(path, err, sizeof err), -ENOENT);
    HAS(err, path);
    HAS(err, "does not exist: the fuse module is not loaded ('modprobe fuse' as root)");
    HAS(err, "--device /dev/fuse");
}
END_TEST

START_TEST(device_without_driver_means_no_module)
{
    /* char major 42 is Linux's "demo/sample use" number: no driver registers it */
    FILE *f = fopen("/proc/devices", "r");
    char line[256];
    int registered = 0;
    while (f && fgets(line, sizeof line, f) && strncmp(line, "Block", 5))
        registered |= atoi(line) == 42;
    if (f)
        fclose(f);
    if (registered || mknod(path, S_IFCHR | 0666, makedev(42, 0)) < 0) {
        tu_skip("check_device", "the driverless device", "%s",
                registered ? "major 42 is registered here" : strerror(errno));
        return;
    }
    char err[1024];
    int rc = fsd_check(path, err, sizeof err);
    ck_assert_msg(rc == -ENXIO || rc == -ENODEV, "rc %d: %s", rc, err);
    HAS(err, "the device has no driver: the fuse module is not loaded ('modprobe fuse' as root)");
}
END_TEST

START_TEST(no_permission_is_not_a_missing_module)
{
    /* mode 0600, owned by root: user nobody may not open it, nor may a group */
    ck_assert_int_eq(tu_write_file(path, "", 0), 0);
    ck_assert_int_eq(chmod(path, 0600), 0);
    int rc;
    char err[1024];
    if (!as_nobody(&rc, err, sizeof err)) {
        tu_skip("check_device", "the permission cases", "not root: cannot become nobody");
        return;
    }
    ck_assert_int_eq(rc, -EACCES);
    HAS(err, ": Permission denied (-rw------- root:");
    HAS(err, "user nobody (uid 65534) may not open it: run batchfs as a user who may, or ask "
             "an administrator for access");
    LACKS(err, "modprobe");
    LACKS(err, "module");

    /* mode 0660 with a group that nobody is not in: join that group */
    struct group *gr = getgrnam("users");
    gid_t gid = gr ? gr->gr_gid : 100;
    ck_assert_int_eq(chown(path, 0, gid), 0);
    ck_assert_int_eq(chmod(path, 0660), 0);
    ck_assert(as_nobody(&rc, err, sizeof err));
    ck_assert_int_eq(rc, -EACCES);
    char want[256];
    snprintf(want, sizeof want, "user nobody (uid 65534) is not in group %s, which may open it",
             gr ? gr->gr_name : "100");
    HAS(err, "(-rw-rw---- root:");
    HAS(err, want);
    HAS(err, "'usermod -aG");
    LACKS(err, "module");
}
END_TEST

static Suite *device_suite(void)
{
    Suite *s = suite_create("device");
    TCase *tc = tcase_create("check");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, opens_what_it_may);
    tcase_add_test(tc, missing_device_means_no_module);
    tcase_add_test(tc, device_without_driver_means_no_module);
    tcase_add_test(tc, no_permission_is_not_a_missing_module);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(device_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
