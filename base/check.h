/*
 * check.h — invariants asserted in debug and sanitizer builds only (SQLite's assert()
 * style: the checks document the invariants and catch their breach in testing, and cost
 * nothing in the release build).
 *
 * Which builds: those with BFS_DEBUG_CHECKS defined, which the Makefile sets for
 * `make SANITIZER=address|undefined|thread` and `make DEBUG=1` (the same builds that
 * check the executor's lock owner). There BFS_CHECKS is 1 and a false BFS_ASSERT aborts
 * with the condition, the file, the line and the function; elsewhere BFS_CHECKS is 0 and
 * BFS_ASSERT compiles to nothing (its condition is type-checked, never evaluated: no side
 * effects inside one). `if (BFS_CHECKS) ...` guards a check that needs more than an
 * expression (an O(n) walk, allowed only where it is not on a hot path: at destroy time).
 */
#ifndef BATCHFS_BASE_CHECK_H
#define BATCHFS_BASE_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#ifdef BFS_DEBUG_CHECKS
#define BFS_CHECKS 1
#else
#define BFS_CHECKS 0
#endif

/* bfs_assert_fail - say which invariant broke where, and abort (BFS_ASSERT's slow path). */
__attribute__((noreturn, cold)) static inline void
bfs_assert_fail(const char *cond, const char *file, int line, const char *fn)
{
    fprintf(stderr, "batchfs: invariant broken: %s (%s:%d, %s)\n", cond, file, line, fn);
    abort();
}

#define BFS_ASSERT(cond)                                                                           \
    ((void)(!BFS_CHECKS || (cond) || (bfs_assert_fail(#cond, __FILE__, __LINE__, __func__), 0)))

#endif
