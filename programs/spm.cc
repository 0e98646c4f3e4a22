// spm.cc — SentencePiece behind a C interface for mkbatchfs --tokenize (see spm.h).
#include "programs/spm.h"

#include <cerrno>
#include <cstdio>
#include <new>
#include <string>
#include <vector>

#include <sentencepiece_processor.h>

struct bfs_spm {
    sentencepiece::SentencePieceProcessor sp;
    unsigned flags;
    std::vector<int> ids; // scratch of bfs_spm_encode
};

extern "C" int bfs_spm_load(const char *path, unsigned flags, bfs_spm **out, char *err,
                            size_t errlen)
{
    *out = nullptr;
    bfs_spm *m = new (std::nothrow) bfs_spm;
    if (!m) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    m->flags = flags;
    try {
        auto st = m->sp.Load(path);
        if (!st.ok()) {
            int rc = st.code() == sentencepiece::util::StatusCode::kNotFound ? -ENOENT : -EINVAL;
            if (rc == -ENOENT)
                snprintf(err, errlen, "%s: cannot read the model (%s)", path,
                         st.ToString().c_str());
            else
                snprintf(err, errlen, "%s: not a SentencePiece model (%s)", path,
                         st.ToString().c_str());
            delete m;
            return rc;
        }
        if (((flags & BFS_SPM_BOS) && m->sp.bos_id() < 0) ||
            ((flags & BFS_SPM_EOS) && m->sp.eos_id() < 0)) {
            snprintf(err, errlen, "%s: the model has no %s id", path,
                     (flags & BFS_SPM_BOS) && m->sp.bos_id() < 0 ? "begin-of-sentence (bos)"
                                                                : "end-of-sentence (eos)");
            delete m;
            return -EINVAL;
        }
    } catch (const std::bad_alloc &) {
        snprintf(err, errlen, "%s: out of memory", path);
        delete m;
        return -ENOMEM;
    }
    *out = m;
    return 0;
}

extern "C" uint32_t bfs_spm_vocab(const bfs_spm *m)
{
    return (uint32_t)m->sp.GetPieceSize();
}

extern "C" long bfs_spm_encode(void *ctx, const char *text, size_t len, uint32_t *ids, size_t cap,
                               char *err, size_t errlen)
{
    bfs_spm *m = static_cast<bfs_spm *>(ctx);
    try {
        // encoded again when the caller comes back with more room: rare (its buffer
        // only grows), and nothing is kept between calls
        m->ids.clear();
        auto st = m->sp.Encode(std::string(text, len), &m->ids);
        if (!st.ok()) {
            snprintf(err, errlen, "%s", st.ToString().c_str());
            return -EINVAL;
        }
        if (m->flags & BFS_SPM_BOS)
            m->ids.insert(m->ids.begin(), m->sp.bos_id());
        if (m->flags & BFS_SPM_EOS)
            m->ids.push_back(m->sp.eos_id());
    } catch (const std::bad_alloc &) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    size_t n = m->ids.size();
    if (n > cap)
        return (long)n; // the caller grows ids and calls again
    for (size_t k = 0; k < n; k++)
        ids[k] = (uint32_t)m->ids[k];
    return (long)n;
}

extern "C" void bfs_spm_free(bfs_spm *m)
{
    delete m;
}
