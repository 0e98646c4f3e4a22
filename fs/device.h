/*
 * device.h — the FUSE device check before mounting: can this process open /dev/fuse, and
 * if not, what to do about it, told per reason (libc only, no FUSE).
 *
 * Neighbours: fsd_check_mountpoint calls it (for fs.c, before mounting), before libfuse
 * opens the device itself (whose own message, "fuse: device not found, try 'modprobe
 * fuse' first", names the module whatever the reason); tests/check_device.c drives each
 * reason.
 */
#ifndef BATCHFS_FS_DEVICE_H
#define BATCHFS_FS_DEVICE_H

#include <stddef.h>

/*
 * fsd_check - open path (the FUSE device, "/dev/fuse") for reading and writing as the
 * mount will, and close it. Returns 0, or -errno with one line in err (errlen bytes) that
 * names path, the reason and what to do:
 *  - ENOENT (no such file), ENODEV, ENXIO (a device node without its driver): the fuse
 *    module is not loaded ('modprobe fuse' as root; in a container, --device /dev/fuse);
 *  - EACCES, EPERM: this user may not open it: the file's mode, owner and group, then
 *    "add this user to group G" when G may open it and the user is not in G, "a device
 *    rule or security policy refuses it" when the mode allows it (a container without
 *    --device /dev/fuse), else "run batchfs as a user who may, or ask an administrator";
 *  - anything else: the system's message.
 * Never loads a module, changes a file or asks for privileges.
 */
int fsd_check(const char *path, char *err, size_t errlen);

/*
 * fsd_check_mountpoint - can the mount go on directory mp: it exists (a dead FUSE mount
 * there: "run 'fusermount3 -u'"), is a directory, has nothing mounted on it, is empty
 * (mounting would hide its files), and the FUSE device opens (fsd_check). Returns 0, or
 * -1 after one line on stderr ("batchfs: ...") that says what to do.
 */
int fsd_check_mountpoint(const char *mp);

#endif
