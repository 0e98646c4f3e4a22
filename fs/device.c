/*
 * device.c — the FUSE device check (device.h): opens the device once, and on failure
 * tells the user what is wrong by errno, not always "load the fuse module"; and the
 * mountpoint's checks before mounting (fsd_check_mountpoint).
 */
#include "fs/device.h"
#include "base/err.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
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

/* Is path a mount point already (its device differs from its parent's, or it is
 * listed in /proc/self/mountinfo)? */
static int is_mounted(const char *path)
{
    char real[PATH_MAX];
    if (!realpath(path, real))
        return 0;
    FILE *f = fopen("/proc/self/mountinfo", "r");
    if (!f)
        return 0;
    char line[8192];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        char mnt[4096];
        if (sscanf(line, "%*s %*s %*s %*s %4095s", mnt) == 1 && !strcmp(mnt, real))
            found = 1;
    }
    fclose(f);
    return found;
}

int fsd_check_mountpoint(const char *mp)
{
    struct stat st;
    if (stat(mp, &st) < 0) {
        if (errno == ENOTCONN || errno == ECONNREFUSED)
            fprintf(stderr,
                    "batchfs: mountpoint %s: transport endpoint is not connected (a "
                    "dead FUSE mount: run 'fusermount3 -u %s')\n",
                    mp, mp);
        else
            fprintf(stderr, "batchfs: mountpoint %s: %s (create it with mkdir)\n", mp,
                    strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "batchfs: mountpoint %s is not a directory\n", mp);
        return -1;
    }
    if (is_mounted(mp)) {
        fprintf(stderr,
                "batchfs: mountpoint %s is busy: something is already mounted there "
                "(unmount it with 'fusermount3 -u %s')\n",
                mp, mp);
        return -1;
    }
    /* not empty? (mounting over files hides them; libfuse 3 refuses nothing) */
    int nonempty = 0;
    DIR *dir = opendir(mp);
    if (dir) {
        struct dirent *de;
        while ((de = readdir(dir)))
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
                nonempty = 1;
                break;
            }
        closedir(dir);
    }
    if (nonempty) {
        fprintf(stderr,
                "batchfs: mountpoint %s is not empty: mounting would hide its files "
                "(use an empty directory)\n",
                mp);
        return -1;
    }
    /* the device, with a hint per reason (libfuse's own says "modprobe fuse" for all) */
    char err[512];
    if (fsd_check("/dev/fuse", err, sizeof err)) {
        fprintf(stderr, "batchfs: %s\n", err);
        return -1;
    }
    return 0;
}
