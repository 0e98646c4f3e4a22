/* group_reset.c — `batchfs group-reset` (see group_reset.h). */
#include "programs/group_reset.h"

#include <inttypes.h>
#include <stdio.h>

int bfs_group_reset_run(const char *source, const bfs_pipeline_opts *o, FILE *out)
{
    char err[2048], url[700];
    uint64_t fp = 0;
    long long deleted = 0;
    /* (the pipeline's fingerprint, as a mount computes it; then the deletion) */
    int rc = bfs_group_reset(source, o, &fp, &deleted, err, sizeof err);
    if (rc) {
        fprintf(stderr, "batchfs group-reset: %s\n", err);
        return rc;
    }
    bfs_remote_display(o->remote, url, sizeof url);
    fprintf(out,
            "batchfs group-reset: group=%s of pipeline %016" PRIx64 " at %s: deleted %lld "
            "key(s) (claim counters and given-back lists); its epochs start over\n",
            o->group, fp, url, deleted);
    return 0;
}
