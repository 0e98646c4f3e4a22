/*
 * device.c — the FUSE device check (device.h): opens the device once, and on failure
 * tells the user what is wrong by errno, not always "load the fuse module".
 */
#include "fs/device.h"
#include "base/err.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* 1 when the process's effective or supplementary groups include gid */
static int in_group(gid_t gid)
{
    if (getegid() == gid)
        return 1;
    gid_t groups[256];
    int n = getgroups(256, groups);
    for (int i = 0; i < n; i++)
        if (groups[i] == gid)
            return 1;
    return 0;
}

/* "crw-rw----"-style text of a mode */
static void mode_text(mode_t m, char out[11])
{
    out[0] = S_ISCHR(m) ? 'c' : S_ISDIR(m) ? 'd' : S_ISREG(m) ? '-' : '?';
    const char *rwx = "rwxrwxrwx";
    for (int i = 0; i < 9; i++)
        out[1 + i] = m & (0400 >> i) ? rwx[i] : '-';
    out[10] = '\0';
}

static int denied(const char *path, int rc, char *err, size_t errlen)
{
    char who[64], owner[64], group[64], mode[11];
    uid_t uid = geteuid();
    struct passwd *pw = getpwuid(uid);
    snprintf(who, sizeof who, "%s (uid %u)", pw ? pw->pw_name : "this user", (unsigned)uid);
    struct stat st;
    if (stat(path, &st) < 0)
        return bfs_errf(rc, err, errlen,
                        "%s: %s: user %s may not open it: run batchfs as a user who may, or "
                        "ask an administrator for access",
                        path, strerror(-rc), who);
    mode_text(st.st_mode, mode);
    pw = getpwuid(st.st_uid);
    struct group *gr = getgrgid(st.st_gid);
    if (pw)
        snprintf(owner, sizeof owner, "%s", pw->pw_name);
    else
        snprintf(owner, sizeof owner, "%u", (unsigned)st.st_uid);
    if (gr)
        snprintf(group, sizeof group, "%s", gr->gr_name);
    else
        snprintf(group, sizeof group, "%u", (unsigned)st.st_gid);
    /* what the mode grants this process: owner, group or other bits, whichever apply */
    mode_t want = st.st_uid == uid ? 0600 : in_group(st.st_gid) ? 0060 : 0006;
    if ((st.st_mode & want) == want)
        return bfs_errf(rc, err, errlen,
                        "%s: %s (%s %s:%s): its mode lets user %s open it, so a device rule or "
                        "security policy refuses it: in a container, pass --device /dev/fuse "
                        "(docker, podman) or allow the device",
                        path, strerror(-rc), mode, owner, group, who);
    if ((st.st_mode & 0060) == 0060 && st.st_uid != uid && !in_group(st.st_gid))
        return bfs_errf(rc, err, errlen,
                        "%s: %s (%s %s:%s): user %s is not in group %s, which may open it: "
                        "add the user to it ('usermod -aG %s USER' as root, then log in "
                        "again), or run batchfs as a user who may",
                        path, strerror(-rc), mode, owner, group, who, group, group);
    return bfs_errf(rc, err, errlen,
                    "%s: %s (%s %s:%s): user %s may not open it: run batchfs as a user who "
                    "may, or ask an administrator for access (distributions make it mode "
                    "0666, or 0660 with a group of FUSE users)",
                    path, strerror(-rc), mode, owner, group, who);
}

int fsd_check(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY);
    if (fd >= 0) {
        close(fd);
        return 0;
    }
    int rc = -errno;
    switch (-rc) {
    case ENOENT:
        return bfs_errf(rc, err, errlen,
                        "%s does not exist: the fuse module is not loaded ('modprobe fuse' as "
                        "root); in a container, pass --device /dev/fuse",
                        path);
    case ENODEV:
    case ENXIO:
        return bfs_errf(rc, err, errlen,
                        "%s: %s: the device has no driver: the fuse module is not loaded "
                        "('modprobe fuse' as root)",
                        path, strerror(-rc));
    case EACCES:
    case EPERM:
        return denied(path, rc, err, errlen);
    default:
        return bfs_errf(rc, err, errlen, "%s: %s", path, strerror(-rc));
    }
}
