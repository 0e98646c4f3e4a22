/* claims_name.c — group names (see claims.h). A file of its own: option parsing
 * (engine/pipeline_values.c) needs only this, and programs and libraries that parse options then
 * link none of the claim backends (libbatchfs-gpu links no hiredis). */
#include "engine/claims.h"

int bfs_claims_name_valid(const char *name)
{
    size_t n = 0;
    for (; name[n]; n++) {
        char c = name[n];
        if (n == BFS_CLAIMS_NAME_MAX ||
            !((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return n > 0;
}
