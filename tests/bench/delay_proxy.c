/*
 * tests/bench/delay_proxy.c LISTEN_PORT TARGET_PORT DELAY_MS — a TCP proxy on 127.0.0.1
 * that holds every chunk it forwards for DELAY_MS / 2 in each direction, so a request and
 * its answer take DELAY_MS longer: a far object store where `tc netem` is not available
 * (this machine's kernel has no sch_netem). One thread, epoll; order within a connection
 * is kept; bandwidth is not limited. It shares the cores with the daemon it measures, so
 * it is written to cost little: about a tenth of the CPU of the asyncio proxy it replaced
 * (tests/bench/bench_sources.sh). Runs until killed; prints "ready" when it listens.
 * Built by bench_sources.sh (cc -O2); a bench tool, not part of batchfs.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (256 * 1024)

typedef struct chunk {
    struct chunk *next;
    uint64_t due_us;
    size_t len, sent;
    char data[];
} chunk;

typedef struct side side;
struct side {
    int fd;
    side *peer;         /* what it reads goes to peer->fd */
    chunk *head, *tail; /* read from this side, waiting to be written to the peer */
    int eof;            /* its read end is done */
    int blocked;        /* the peer's socket is full: wait for EPOLLOUT on it */
    int shut;           /* the peer's write end was shut down */
};

typedef struct pair {
    side a, b;
    int dead;
} pair;

static uint64_t delay_us;
static int ep;

static uint64_t now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

/* What s's fd waits for: input unless it ended, output while its peer's chunks wait. */
static void watch(side *s)
{
    struct epoll_event ev = {.events = (s->eof ? 0 : EPOLLIN) | (s->peer->blocked ? EPOLLOUT : 0),
                             .data.ptr = s};
    epoll_ctl(ep, EPOLL_CTL_MOD, s->fd, &ev);
}

static void kill_pair(pair *p)
{
    if (p->dead)
        return;
    p->dead = 1;
    for (side *s = &p->a; s; s = s == &p->a ? &p->b : NULL) {
        epoll_ctl(ep, EPOLL_CTL_DEL, s->fd, NULL);
        close(s->fd);
        while (s->head) {
            chunk *c = s->head;
            s->head = c->next;
            free(c);
        }
    }
}

/* Write what is due of s's chunks to its peer. -1: the pair died. */
static int flush(pair *p, side *s, uint64_t now)
{
    while (s->head && s->head->due_us <= now) {
        chunk *c = s->head;
        ssize_t n = send(s->peer->fd, c->data + c->sent, c->len - c->sent, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno != EAGAIN)
                return kill_pair(p), -1;
            if (!s->blocked) {
                s->blocked = 1;
                watch(s->peer);
            }
            return 0;
        }
        c->sent += (size_t)n;
        if (c->sent < c->len)
            continue;
        s->head = c->next;
        if (!s->head)
            s->tail = NULL;
        free(c);
    }
    if (s->blocked) {
        s->blocked = 0;
        watch(s->peer);
    }
    if (!s->head && s->eof && !s->shut) {
        shutdown(s->peer->fd, SHUT_WR);
        s->shut = 1;
    }
    if (s->shut && s->peer->shut)
        return kill_pair(p), -1;
    return 0;
}

static void readable(side *s)
{
    for (;;) {
        chunk *c = malloc(sizeof *c + CHUNK);
        if (!c)
            return;
        ssize_t n = recv(s->fd, c->data, CHUNK, 0);
        if (n <= 0) {
            free(c);
            if (n == 0 || errno != EAGAIN) {
                s->eof = 1;
                watch(s);
            }
            return;
        }
        c->next = NULL;
        c->len = (size_t)n;
        c->sent = 0;
        c->due_us = now_us() + delay_us;
        if (s->tail)
            s->tail->next = c;
        else
            s->head = c;
        s->tail = c;
        if ((size_t)n < CHUNK)
            return;
    }
}

static int add_fd(side *s)
{
    int one = 1;
    fcntl(s->fd, F_SETFL, fcntl(s->fd, F_GETFL) | O_NONBLOCK);
    setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = s};
    return epoll_ctl(ep, EPOLL_CTL_ADD, s->fd, &ev);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: delay_proxy LISTEN_PORT TARGET_PORT DELAY_MS\n");
        return 2;
    }
    int lport = atoi(argv[1]), tport = atoi(argv[2]);
    delay_us = (uint64_t)(atof(argv[3]) * 500.0); /* half each way */
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)lport)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 512)) {
        perror("delay_proxy: listen");
        return 1;
    }
    ep = epoll_create1(0);
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &lev);
    printf("ready\n");
    fflush(stdout);
    enum { MAXP = 2048 };
    static pair *pairs[MAXP];
    int np = 0;
    for (;;) {
        /* the next due chunk bounds the wait (not for sides waiting for room) */
        uint64_t now = now_us(), next = UINT64_MAX;
        for (int i = 0; i < np; i++)
            for (side *s = &pairs[i]->a; s; s = s == &pairs[i]->a ? &pairs[i]->b : NULL)
                if (s->head && !s->blocked && s->head->due_us < next)
                    next = s->head->due_us;
        int timeout = next == UINT64_MAX ? 1000
                      : next <= now      ? 0
                                         : (int)((next - now + 999) / 1000);
        struct epoll_event ev[64];
        int n = epoll_wait(ep, ev, 64, timeout);
        for (int i = 0; i < n; i++) {
            side *s = ev[i].data.ptr;
            if (!s) { /* a new client: a connection to the target for it */
                int c = accept(ls, NULL, NULL);
                if (c < 0)
                    continue;
                int t = socket(AF_INET, SOCK_STREAM, 0);
                struct sockaddr_in b = a;
                b.sin_port = htons((uint16_t)tport);
                pair *p = np < MAXP ? calloc(1, sizeof *p) : NULL;
                if (!p || connect(t, (struct sockaddr *)&b, sizeof b)) {
                    free(p);
                    close(c);
                    close(t);
                    continue;
                }
                p->a.fd = c, p->b.fd = t, p->a.peer = &p->b, p->b.peer = &p->a;
                add_fd(&p->a);
                add_fd(&p->b);
                pairs[np++] = p;
                continue;
            }
            /* EPOLLOUT: s's peer may write again, flushed below (which stops watching) */
            if (ev[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                readable(s);
        }
        now = now_us();
        for (int i = 0; i < np;) {
            pair *p = pairs[i];
            if (!p->dead && flush(p, &p->a, now) == 0)
                flush(p, &p->b, now);
            if (p->dead) {
                free(p);
                pairs[i] = pairs[--np];
                continue;
            }
            i++;
        }
    }
}
