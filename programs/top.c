/*
 * top.c — `batchfs top MNT`: see top.h. The loop; what it draws is top_render.c's
 * bfs_top_render.
 *
 * bfs_top_run reads MNT/stats (open, read to EOF, close: the daemon makes a fresh
 * snapshot at each open), sleeps until the next tick in poll() on the keyboard and a
 * self-pipe that the signal handlers write to (so a signal never waits out a tick, and the
 * handlers only set flags), draws, and puts the terminal back on every way out.
 *
 * Terminal handling is deliberately small (no curses): the alternate screen
 * (\033[?1049h/l), a hidden cursor (\033[?25l/h). Input is the termios of the keyboard
 * without ICANON and ECHO; ISIG stays on, so Ctrl-C and Ctrl-Z arrive as signals.
 */
#include "programs/top.h"
#include "base/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

/* ---- reading MNT/stats ----------------------------------------------------------------- */

/* The whole file at path (malloc'ed, *len bytes); 0 or a negative errno (-EFBIG). */
static int read_all(const char *path, char **out, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t cap = 16384, n = 0;
    char *buf = malloc(cap);
    int rc = buf ? 0 : -ENOMEM;
    while (!rc) {
        if (n == cap) {
            if (cap > SJ_MAX_TEXT) {
                rc = -EFBIG;
                break;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                rc = -ENOMEM;
                break;
            }
            buf = nb, cap *= 2;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            rc = -errno;
        else if (r == 0)
            break;
        else
            n += (size_t)r;
    }
    close(fd);
    if (rc) {
        free(buf);
        return rc;
    }
    *out = buf, *len = n;
    return 0;
}

/*
 * Read and parse mnt/stats into *doc. On failure, msg gets the whole message for the
 * user (without "batchfs top: "); `first`: at start (what is wrong with MNT) or later
 * (the mount went away).
 */
static int load(const char *mnt, const char *path, int first, sj_doc **doc, char *msg,
                size_t msglen)
{
    char *text = NULL;
    size_t len = 0;
    int rc = read_all(path, &text, &len);
    if (rc) {
        struct stat st;
        if (first && stat(mnt, &st) < 0)
            snprintf(msg, msglen, "%s: %s", mnt, strerror(errno));
        else if (first && !S_ISDIR(st.st_mode))
            snprintf(msg, msglen, "%s: not a directory (give the mount point of a batchfs mount)",
                     mnt);
        else if (first && (rc == -ENOENT || rc == -ENOTDIR))
            snprintf(msg, msglen, "%s is not a batchfs mount (no %s: %s)", mnt, path,
                     strerror(-rc));
        else if (rc == -EFBIG)
            snprintf(msg, msglen, "%s: larger than %d bytes: not batchfs statistics", path,
                     SJ_MAX_TEXT);
        else if (first)
            snprintf(msg, msglen, "%s: %s%s", path, strerror(-rc),
                     rc == -ENOTCONN ? " (the daemon of this mount is gone: unmount it with "
                                       "fusermount3 -u)"
                                     : "");
        else
            snprintf(msg, msglen, "%s: %s: the mount went away", path, strerror(-rc));
        return rc;
    }
    char perr[256];
    rc = sj_parse(text, len, doc, perr, sizeof perr);
    free(text);
    if (!rc && (sj_type(*doc, SJ_ROOT) != SJ_OBJECT || !sj_get_str(*doc, "version"))) {
        snprintf(perr, sizeof perr, "no \"version\" string in a top-level object");
        sj_free(*doc);
        *doc = NULL;
        rc = -EINVAL;
    }
    if (rc) {
        if (first)
            snprintf(msg, msglen, "%s is not a batchfs mount: %s is not batchfs statistics (%s)",
                     mnt, path, perr);
        else
            snprintf(msg, msglen, "%s: no longer batchfs statistics (%s)", path, perr);
        return rc == -E2BIG || rc == -ENOMEM ? rc : -EINVAL;
    }
    return 0;
}

/* ---- terminal, signals, the loop --------------------------------------------------------- */

static volatile sig_atomic_t sig_quit, sig_winch, sig_tstp, sig_cont;
static int wake_w = -1; /* write end of the self-pipe */

static void on_signal(int sig)
{
    int e = errno;
    if (sig == SIGWINCH)
        sig_winch = 1;
    else if (sig == SIGTSTP)
        sig_tstp = 1;
    else if (sig == SIGCONT)
        sig_cont = 1;
    else
        sig_quit = 1;
    if (wake_w >= 0) {
        ssize_t r = write(wake_w, "", 1); /* full pipe: a wake-up is pending anyway */
        (void)r;
    }
    errno = e;
}

static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGWINCH, SIGTSTP, SIGCONT};
#define NSIGS ((int)(sizeof sigs / sizeof sigs[0]))

typedef struct top {
    FILE *out;
    int screen;
    int in_fd, own_in; /* the terminal's input (screen only), and whether we opened it */
    int key_fd;        /* in_fd while it gives keys; -1 after EOF or an error */
    struct termios saved;
    int saved_ok, entered;
    int wake_r;
    struct sigaction old[NSIGS];
    bfs_top_view view;
    const sj_doc *prev, *cur; /* what the screen shows, for redraws */
    double dt;
} top;

static void term_size(top *t)
{
    struct winsize ws;
    t->view.cols = 80, t->view.rows = 24;
    if (ioctl(fileno(t->out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0)
        t->view.cols = ws.ws_col, t->view.rows = ws.ws_row;
}

static void term_enter(top *t)
{
    if (t->in_fd >= 0) {
        if (!t->saved_ok)
            t->saved_ok = tcgetattr(t->in_fd, &t->saved) == 0;
        if (t->saved_ok) {
            struct termios raw = t->saved;
            raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
            raw.c_cc[VMIN] = 1, raw.c_cc[VTIME] = 0;
            tcsetattr(t->in_fd, TCSANOW, &raw);
        }
    }
    fputs("\033[?1049h\033[?25l\033[H\033[2J", t->out);
    fflush(t->out);
    t->entered = 1;
}

/* Put the terminal back: cursor shown, main screen, the keyboard's modes. */
static void term_leave(top *t)
{
    if (!t->entered)
        return;
    fputs("\033[0m\033[?25h\033[?1049l", t->out);
    fflush(t->out);
    if (t->saved_ok)
        tcsetattr(t->in_fd, TCSANOW, &t->saved);
    t->entered = 0;
}

static void draw(top *t)
{
    t->view.when = time(NULL);
    bfs_top_render(&t->view, t->prev, t->cur, t->dt, t->out);
    fflush(t->out);
}

/* Ctrl-Z: put the terminal back, stop (SIGTSTP's default action), and take the terminal
 * again when continued. */
static void suspend(top *t)
{
    int screen = t->entered;
    term_leave(t);
    struct sigaction dfl = {.sa_handler = SIG_DFL}, mine;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGTSTP, &dfl, &mine);
    raise(SIGTSTP); /* stops here until SIGCONT */
    sigaction(SIGTSTP, &mine, NULL);
    if (screen) {
        term_enter(t);
        term_size(t);
        draw(t);
    }
}

enum { WAIT_TICK, WAIT_QUIT };

/* Until the monotonic time `deadline`: keys, redraws, suspension; WAIT_QUIT to stop. */
static int wait_until(top *t, double deadline)
{
    for (;;) {
        if (sig_quit)
            return WAIT_QUIT;
        if (sig_tstp) {
            sig_tstp = 0;
            suspend(t);
            sig_cont = 0;
        }
        if (sig_cont) { /* continued after SIGSTOP: the shell may have reset the tty */
            sig_cont = 0;
            if (t->screen) {
                term_enter(t);
                sig_winch = 1;
            }
        }
        if (sig_winch) {
            sig_winch = 0;
            if (t->screen) {
                term_size(t);
                draw(t);
            }
        }
        double left = deadline - bfs_mono_s();
        if (left <= 0)
            return WAIT_TICK;
        struct pollfd pf[2] = {{.fd = t->wake_r, .events = POLLIN},
                               {.fd = t->key_fd, .events = POLLIN}};
        int nfds = t->key_fd >= 0 ? 2 : 1;
        int ms = (int)ceil(left * 1e3);
        int r = poll(pf, (nfds_t)nfds, ms);
        if (r < 0 && errno != EINTR)
            return WAIT_QUIT;
        if (r <= 0)
            continue;
        if (pf[0].revents & POLLIN) {
            char drain[64];
            while (read(t->wake_r, drain, sizeof drain) > 0)
                ;
        }
        if (nfds == 2 && pf[1].revents) {
            char keys[64];
            ssize_t n = (pf[1].revents & POLLIN) ? read(t->key_fd, keys, sizeof keys) : 0;
            if (n < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            if (n <= 0) { /* hang-up, EOF or error: no more keys (signals still work) */
                t->key_fd = -1;
                continue;
            }
            for (ssize_t i = 0; i < n; i++) {
                if (keys[i] == 'q' || keys[i] == 'Q' || keys[i] == 3 /* ^C without ISIG */)
                    return WAIT_QUIT;
                if (keys[i] == 12) /* ^L: redraw */
                    sig_winch = 1;
            }
        }
    }
}

int bfs_top_run(const char *mnt, double interval_s, int iterations, FILE *out)
{
    if (!(interval_s >= BFS_TOP_INTERVAL_MIN && interval_s <= BFS_TOP_INTERVAL_MAX)) {
        fprintf(stderr, "batchfs top: --interval %g: must be from %g to %d seconds\n", interval_s,
                BFS_TOP_INTERVAL_MIN, BFS_TOP_INTERVAL_MAX);
        return -EINVAL;
    }
    char path[PATH_MAX], msg[PATH_MAX + 512];
    size_t ml = strlen(mnt);
    while (ml > 1 && mnt[ml - 1] == '/')
        ml--;
    if (snprintf(path, sizeof path, "%.*s/stats", (int)ml, mnt) >= (int)sizeof path) {
        fprintf(stderr, "batchfs top: %s: path too long\n", mnt);
        return -ENAMETOOLONG;
    }
    sj_doc *cur = NULL, *prev = NULL;
    int rc = load(mnt, path, 1, &cur, msg, sizeof msg);
    if (rc) {
        fprintf(stderr, "batchfs top: %s\n", msg);
        return rc;
    }
    double t_cur = bfs_mono_s(), t_prev = 0;

    top t = {.out = out, .in_fd = -1, .key_fd = -1, .wake_r = -1};
    t.screen = fileno(out) >= 0 && isatty(fileno(out));
    t.view = (bfs_top_view){.mnt = mnt, .screen = t.screen, .interval_s = interval_s};
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC | O_NONBLOCK) < 0) {
        rc = -errno;
        fprintf(stderr, "batchfs top: pipe: %s\n", strerror(-rc));
        sj_free(cur);
        return rc;
    }
    t.wake_r = pfd[0], wake_w = pfd[1];
    sig_quit = sig_winch = sig_tstp = sig_cont = 0;
    struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART: poll returns EINTR */
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < NSIGS; i++)
        sigaction(sigs[i], &sa, &t.old[i]);
    if (t.screen) {
        if (isatty(STDIN_FILENO)) {
            t.in_fd = STDIN_FILENO;
        } else {
            t.in_fd = open("/dev/tty", O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
            t.own_in = t.in_fd >= 0;
        }
        t.key_fd = t.in_fd;
        term_enter(&t);
        term_size(&t);
        t.cur = cur;
        draw(&t);
    }

    double next = t_cur + interval_s;
    for (int done = 0; !iterations || done < iterations; done++) {
        if (wait_until(&t, next) == WAIT_QUIT)
            break;
        sj_free(prev);
        prev = cur, t_prev = t_cur, cur = NULL;
        rc = load(mnt, path, 0, &cur, msg, sizeof msg);
        if (rc)
            break;
        t_cur = bfs_mono_s();
        /* the next tick one interval after the previous one; after a slow read (a busy
         * daemon), one interval from now rather than a burst of catching up */
        next = next + interval_s > t_cur ? next + interval_s : t_cur + interval_s;
        t.prev = prev, t.cur = cur, t.dt = t_cur - t_prev;
        if (t.screen) {
            draw(&t);
        } else {
            t.view.when = time(NULL);
            bfs_top_render(&t.view, prev, cur, t.dt, out);
            if (fflush(out) || ferror(out)) {
                rc = -EIO;
                snprintf(msg, sizeof msg, "writing the view: %s", strerror(errno));
                break;
            }
        }
    }

    term_leave(&t);
    if (t.own_in)
        close(t.in_fd);
    for (int i = 0; i < NSIGS; i++)
        sigaction(sigs[i], &t.old[i], NULL);
    wake_w = -1;
    close(pfd[0]);
    close(pfd[1]);
    sj_free(prev);
    sj_free(cur);
    if (rc)
        fprintf(stderr, "batchfs top: %s\n", msg);
    return rc;
}
