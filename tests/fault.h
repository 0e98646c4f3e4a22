/*
 * fault.h — fault injection for tests (SQLite's "Nth malloc fails", libuv's error shims):
 * make the Nth allocation, open, read, write, sync... of an operation fail, and walk N over
 * every call the operation makes (check_fault.c).
 *
 * How it reaches the code under test: the test binary is linked with
 * -Wl,--wrap=SYMBOL for each call below (FAULT_WRAP in the Makefile), so every call of
 * SYMBOL from the statically linked objects (engine/, cache/, the test itself) goes to
 * __wrap_SYMBOL here, which counts it and either fails it or calls __real_SYMBOL. The
 * product needs no hook and no build flag. Out of reach: calls made inside shared libraries
 * (libjpeg-turbo's and lz4's allocations, glibc's own, e.g. the buffer inside opendir),
 * and anything called through a pointer taken outside the wrapped objects.
 *
 * Classes and what a fault does (errno as a real failure would set it):
 *   FAULT_ALLOC   malloc calloc realloc posix_memalign aligned_alloc strdup strndup
 *                 asprintf                                  -> NULL / ENOMEM / -1
 *   FAULT_OPEN    open64 openat64 mkostemp64 opendir memfd_create -> EMFILE;
 *                 fdopendir -> ENOMEM (it opens nothing)
 *   FAULT_READ    read pread64                -> -1 EIO; FAULT_SHORT: half the bytes
 *   FAULT_WRITE   write pwrite64 ftruncate64 fsetxattr -> -1 ENOSPC; sendmsg -> -1
 *                 ECONNRESET; FAULT_SHORT: half the bytes (write, pwrite64, sendmsg only;
 *                 the others are not short-able)
 *   FAULT_SYNC    fsync fdatasync             -> -1 EIO
 *   FAULT_DIR     readdir64                   -> NULL with errno EIO (a failed listing)
 *   FAULT_MAP     mmap64                      -> MAP_FAILED ENOMEM
 *   FAULT_NAME    rename renameat linkat -> -1 EIO; mkdir mkdirat -> -1 ENOSPC
 *   FAULT_THREAD  pthread_create              -> EAGAIN
 * (the *64 names are what glibc's headers call under _FILE_OFFSET_BITS=64.)
 *
 * Counters are atomic: worker threads of the engine count and fail like the caller. With
 * several threads the order of calls, so which call is "the Nth", may vary between runs;
 * the walk still fails each N once.
 *
 * Only count or arm around the operation under test: libcheck's own calls (ck_assert in
 * a forked test writes to a pipe) would be counted and failed too.
 */
#ifndef BATCHFS_TESTS_FAULT_H
#define BATCHFS_TESTS_FAULT_H

#include <stdint.h>

typedef enum fault_class {
    FAULT_ALLOC,
    FAULT_OPEN,
    FAULT_READ,
    FAULT_WRITE,
    FAULT_SYNC,
    FAULT_DIR,
    FAULT_MAP,
    FAULT_NAME,
    FAULT_THREAD,
    FAULT_NCLASSES
} fault_class;

typedef enum fault_mode {
    FAULT_FAIL,  /* the call fails with the class's errno */
    FAULT_SHORT, /* reads and writes transfer half the bytes (at least 1); others fail */
} fault_mode;

/* fault_count_start - zero the counters and count every wrapped call; nothing fails. */
void fault_count_start(void);

/*
 * fault_arm - zero the counters, count, and make call n (1-based) of class c misbehave as
 * mode says. persist: every call of c from the nth on misbehaves (a full disk, memory
 * that stays exhausted), not only the nth.
 */
void fault_arm(fault_class c, uint64_t n, fault_mode mode, int persist);

/* fault_stop - stop counting and failing; the counters keep their values. */
void fault_stop(void);

/* fault_count - calls of class c since the last fault_count_start / fault_arm. */
uint64_t fault_count(fault_class c);

/* fault_fired - faults injected since the last fault_arm. */
uint64_t fault_fired(void);

/* fault_class_name - "alloc", "open", "read", ... */
const char *fault_class_name(fault_class c);

#endif
