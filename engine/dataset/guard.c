/* guard.c — SIGBUS on a truncated file mapping, turned into an error (see guard.h). */
#include "engine/dataset/guard.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <ucontext.h>

/* initial-exec: the handler reads it without a call that could allocate */
static __thread bfs_guard *innermost __attribute__((tls_model("initial-exec")));
static struct sigaction before; /* SIGBUS's disposition when the handler was installed */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int init_rc;

static void on_sigbus(int sig, siginfo_t *si, void *ctx)
{
    bfs_guard *g = innermost;
    /* BUS_ADRERR: a mapped page with nothing behind it (past the file's end) */
    if (g && si->si_code == BUS_ADRERR) {
        innermost = g->outer;
        /* the faulting code's signal mask back, as returning would put it: the jump
         * skips that return, and a runtime that wraps handlers runs them with more
         * blocked than sa_mask says (ThreadSanitizer blocks every signal), which would
         * leave SIGBUS blocked here, and the next fault in a guard kill the process */
        pthread_sigmask(SIG_SETMASK, &((ucontext_t *)ctx)->uc_sigmask, NULL);
        siglongjmp(g->jb, 1);
    }
    if ((before.sa_flags & SA_SIGINFO) && before.sa_sigaction) {
        before.sa_sigaction(sig, si, ctx);
    } else if (before.sa_handler != SIG_DFL && before.sa_handler != SIG_IGN) {
        before.sa_handler(sig);
    } else {
        /* not ours: back to the old disposition; returning retries the access, which
         * faults again and is handled (by default: the process dies, with its core); a
         * SIGBUS that no access raised (kill) is raised again */
        sigaction(SIGBUS, &before, NULL);
        if (si->si_code <= 0)
            raise(sig);
    }
}

static void install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    /* SA_NODEFER: the jump out skips the return that would unblock SIGBUS, and sigsetjmp
     * without the mask (a system call per guard) does not restore it (on_sigbus restores
     * the mask itself too, for runtimes that block more around the handler) */
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &before) < 0)
        init_rc = -errno;
}

int bfs_guard_init(void)
{
    pthread_once(&once, install);
    return init_rc;
}

int bfs_guard_thread(void)
{
    sigset_t bus;
    sigemptyset(&bus);
    sigaddset(&bus, SIGBUS);
    return -pthread_sigmask(SIG_UNBLOCK, &bus, NULL);
}

void bfs_guard_enter(bfs_guard *g)
{
    g->outer = innermost;
    innermost = g;
}

void bfs_guard_leave(bfs_guard *g)
{
    /* after a fault the handler has already made g's outer guard the innermost */
    if (innermost == g)
        innermost = g->outer;
}
