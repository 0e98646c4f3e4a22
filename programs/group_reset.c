/* group_reset.c — `batchfs group-reset` (see group_reset.h). */
#include "programs/group_reset.h"
#include "engine/engine.h"
#include "engine/claims.h"
#include "engine/remote/remote.h"

#include <inttypes.h>
#include <stdio.h>

int bfs_group_reset_run(const char *source, const bfs_pipeline_opts *o, FILE *out)
{
    char err[2048], url[700];
    bfs_engine *e;
    int rc = bfs_engine_create(source, o, &e, err, sizeof err);
    if (rc) {
        fprintf(stderr, "batchfs group-reset: %s\n", err);
        return rc;
    }
    uint64_t fp = bfs_engine_fingerprint(e);
    bfs_engine_destroy(e);
    bfs_remote_url u;
    bfs_remote_parse_url(o->remote, &u, NULL, 0); /* (checked when the options were parsed) */
    bfs_remote_url_text(&u, url, sizeof url);
    long long deleted = 0;
    if ((rc = bfs_claims_reset_remote(o->group, fp, o->remote, &deleted, err, sizeof err))) {
        fprintf(stderr, "batchfs group-reset: %s\n", err);
        return rc;
    }
    fprintf(out,
            "batchfs group-reset: group=%s of pipeline %016" PRIx64 " at %s: deleted %lld "
            "key(s) (claim counters and given-back lists); its epochs start over\n",
            o->group, fp, url, deleted);
    return 0;
}
