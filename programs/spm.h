/*
 * spm.h — SentencePiece for mkbatchfs --tokenize (programs/spm.cc, the project's one C++
 * file: SentencePiece has only a C++ API). Linked into mkbatchfs alone: the daemon and
 * the library never tokenize (engine/dataset/tokenize.c says why).
 */
#ifndef BATCHFS_PROGRAMS_SPM_H
#define BATCHFS_PROGRAMS_SPM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bfs_spm bfs_spm;

#define BFS_SPM_BOS 1 /* put the model's begin-of-sentence id first */
#define BFS_SPM_EOS 2 /* put its end-of-sentence id last */

/*
 * bfs_spm_load - load a SentencePiece model file (PATH.model). flags: BFS_SPM_*. Returns
 * 0 or -EINVAL (not a model, or BOS/EOS asked of a model without them: err says which),
 * -ENOENT, -ENOMEM. The caller owns *out (bfs_spm_free).
 */
int bfs_spm_load(const char *path, unsigned flags, bfs_spm **out, char *err, size_t errlen);

/* bfs_spm_vocab - the model's vocabulary size (ids are below it). */
uint32_t bfs_spm_vocab(const bfs_spm *m);

/* bfs_spm_encode - a bfs_dataset_tokenize_fn (engine/api.h) with ctx = the model. */
long bfs_spm_encode(void *ctx, const char *text, size_t len, uint32_t *ids, size_t cap, char *err,
                    size_t errlen);

/* bfs_spm_free - accepts NULL. */
void bfs_spm_free(bfs_spm *m);

#ifdef __cplusplus
}
#endif
#endif
