/*
 * guard.h — reading a file mapping that may shrink under the reader.
 *
 * A MAP_SHARED mapping of a file that is then truncated in place raises SIGBUS on the pages
 * past the new end; a pread would have returned short. Code that reads a mapped dataset
 * (bfs_map_payloads: the token pipelines' gather) reads inside a guard: a SIGBUS there
 * returns to the guard's start, which reports the file changed (BFS_E_CHANGED), as the
 * pread path does, instead of killing the daemon. A SIGBUS anywhere else, or one that is
 * not a mapping's missing page, is handled as before the guard was installed (by default:
 * the process dies).
 *
 *     bfs_guard g;
 *     bfs_guard_enter(&g);
 *     if (sigsetjmp(g.jb, 0) == 0) {
 *         ... reads of the mapping ...
 *     } else {
 *         rc = BFS_E_CHANGED; // a page of the mapping was gone
 *     }
 *     bfs_guard_leave(&g);
 *
 * Between enter and leave a fault jumps out of whatever runs, so nothing there may take a
 * lock, allocate or leave anything half done at a read of the mapping; locals assigned
 * there and read after a fault must be volatile. Guards nest (per thread). After a fault
 * the thread's signal mask is the one it read with, even where a runtime (ThreadSanitizer)
 * runs the handler with every signal blocked.
 */
#ifndef BATCHFS_ENGINE_DATASET_GUARD_H
#define BATCHFS_ENGINE_DATASET_GUARD_H

#include <setjmp.h>

typedef struct bfs_guard {
    sigjmp_buf jb;
    struct bfs_guard *outer;
} bfs_guard;

/* bfs_guard_init - install the SIGBUS handler (once per process; later calls return the
 * first one's result). Returns 0 or a negative errno of sigaction. */
int bfs_guard_init(void);

/* bfs_guard_thread - let SIGBUS reach the calling thread: a fault inside a guard in a
 * thread that blocks it kills the process (the kernel forces the default action), and
 * threads started from one that blocks every signal, as libfuse's workers do, inherit
 * that. Call once in each thread that enters guards. 0 or a negative errno. */
int bfs_guard_thread(void);

/* bfs_guard_enter - make g the calling thread's innermost guard (then sigsetjmp(g->jb, 0)). */
void bfs_guard_enter(bfs_guard *g);

/* bfs_guard_leave - end g (the innermost guard), after a fault or not. */
void bfs_guard_leave(bfs_guard *g);

#endif
