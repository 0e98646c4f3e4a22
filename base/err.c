/* err.c — messages for batchfs error codes (see err.h). */
#include "base/err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const messages[BFS_E_LAST - BFS_E_FIRST] = {
#define BFS_E_MESSAGE(name, msg) [BFS_E_##name - BFS_E_FIRST] = msg,
    BFS_ERRORS(BFS_E_MESSAGE)
#undef BFS_E_MESSAGE
};

const char *bfs_strerror(int err)
{
    if (err >= BFS_E_FIRST && err < BFS_E_LAST && messages[err - BFS_E_FIRST])
        return messages[err - BFS_E_FIRST];
    if (err < 0 && err > -4096)
        return strerror(-err);
    return err == 0 ? "success" : "unknown error";
}

int bfs_err_is_resource(int err)
{
    return err == -ENOMEM || err == -EMFILE || err == -ENFILE;
}

int bfs_err_is_transient(int err)
{
    return bfs_err_is_resource(err) || err == BFS_E_FETCH;
}

int bfs_err_to_errno(int err)
{
    if (err == -EINTR)
        return EINTR;
    return bfs_err_is_resource(err) ? ENOMEM : EIO;
}

int bfs_errf(int rc, char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return rc;
}
