/* testutil.c — see testutil.h. */
#include "tests/testutil.h"
#include "engine/dataset/jpeg.h"
#include "engine/dataset/pack.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <turbojpeg.h>
#include <unistd.h>
#include <webp/encode.h>
#include <zlib.h>

uint64_t tu_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void tu_fill_rgb(uint8_t *rgb, int w, int h, uint64_t seed)
{
    uint64_t s = seed * 2654435761u + 1;
    int r0 = (int)(tu_rand(&s) % 256), g0 = (int)(tu_rand(&s) % 256), b0 = (int)(tu_rand(&s) % 256);
    int bs = 4 + (int)(tu_rand(&s) % 12); /* texture block size */
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) {
            /* gradients + a per-block value + per-pixel noise */
            uint64_t bseed = seed ^ ((uint64_t)(y / bs) << 32) ^ (uint64_t)(x / bs);
            uint64_t bv = tu_rand(&bseed);
            uint64_t pv = tu_rand(&s);
            int blk = (int)(bv % 64) - 32, noise = (int)(pv % 17) - 8;
            int v[3] = {r0 + x * 128 / (w ? w : 1) + blk + noise,
                        g0 + y * 128 / (h ? h : 1) - blk + noise, b0 + ((x + y) & 63) + noise};
            for (int c = 0; c < 3; c++)
                rgb[((size_t)y * w + x) * 3 + c] = (uint8_t)(v[c] < 0     ? 0
                                                             : v[c] > 255 ? 255
                                                                          : v[c]);
        }
    }
}

int tu_encode_jpeg(const uint8_t *rgb, int w, int h, int quality, int subsamp, int progressive,
                   uint8_t **out, size_t *len)
{
    tjhandle tj = tjInitCompress();
    if (!tj)
        return -ENOMEM;
    unsigned char *buf = NULL;
    unsigned long size = 0;
    int flags = progressive ? TJFLAG_PROGRESSIVE : 0;
    int rc = tjCompress2(tj, rgb, w, 0, h, TJPF_RGB, &buf, &size, subsamp, quality, flags);
    tjDestroy(tj);
    if (rc != 0) {
        tjFree(buf);
        return -EINVAL;
    }
    *out = malloc(size);
    if (!*out) {
        tjFree(buf);
        return -ENOMEM;
    }
    memcpy(*out, buf, size);
    *len = size;
    tjFree(buf);
    return 0;
}

int tu_make_jpeg(const tu_jpeg_opts *o, uint8_t **out, size_t *len)
{
    uint8_t *rgb = malloc((size_t)o->width * o->height * 3);
    if (!rgb)
        return -ENOMEM;
    tu_fill_rgb(rgb, o->width, o->height, o->seed);
    int rc =
        tu_encode_jpeg(rgb, o->width, o->height, o->quality, o->subsamp, o->progressive, out, len);
    free(rgb);
    return rc;
}

char *tu_mkdtemp(const char *prefix)
{
    const char *tmp = getenv("TMPDIR");
    char *path;
    if (asprintf(&path, "%s/%s.XXXXXX", tmp && *tmp ? tmp : "/tmp", prefix) < 0)
        return NULL;
    if (!mkdtemp(path)) {
        free(path);
        return NULL;
    }
    return path;
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    remove(p);
    return 0;
}

void tu_skip(const char *suite, const char *what, const char *why_fmt, ...)
{
    va_list ap;
    va_start(ap, why_fmt);
    printf("SKIP: %s: %s: ", suite, what);
    vprintf(why_fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
}

void tu_rmtree(const char *path)
{
    if (path)
        nftw(path, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

int tu_write_file(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    const uint8_t *p = data;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            int e = errno;
            close(fd);
            return -e;
        }
        p += n, len -= (size_t)n;
    }
    return close(fd) ? -errno : 0;
}

int tu_flip_keeping_times(const char *path, off_t off)
{
    struct stat before, now;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    uint8_t c;
    int rc = 0;
    if (fstat(fd, &before) < 0 || pread(fd, &c, 1, off) != 1)
        goto fail;
    c ^= 0x5a;
    if (pwrite(fd, &c, 1, off) != 1)
        goto fail;
    /* the ctime comes from the kernel's coarse clock (a tick): stamp it again until it
     * has moved on from the file's old one (at most a few ticks) */
    for (int i = 0; i < 1000; i++) {
        struct timespec keep[2] = {before.st_atim, before.st_mtim};
        if (futimens(fd, keep) < 0 || fstat(fd, &now) < 0)
            goto fail;
        if (now.st_ctim.tv_sec != before.st_ctim.tv_sec ||
            now.st_ctim.tv_nsec != before.st_ctim.tv_nsec)
            return close(fd) ? -errno : 0;
        nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
    }
    errno = ETIME;
fail:
    rc = -errno;
    close(fd);
    return rc;
}

int tu_read_file(const char *path, uint8_t **data, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    uint8_t *buf = malloc(st.st_size ? (size_t)st.st_size : 1);
    size_t got = 0;
    while (buf && got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    if (!buf)
        return -ENOMEM;
    *data = buf;
    *len = got;
    return 0;
}

int tu_damage_scan(uint8_t *jpg, size_t len, double at, size_t n)
{
    bfs_jpeg_header h;
    if (bfs_jpeg_parse_header(jpg, len, &h) || h.scan_offset + 4 > len)
        return -EINVAL;
    size_t lo = h.scan_offset + 1, hi = len - 2; /* the first scan's data, to EOI */
    for (size_t p = lo + (size_t)(at * (double)(hi - lo)); n && p < hi; p++) {
        uint8_t b = jpg[p] ^ 0x55;
        if (jpg[p] == 0xFF || jpg[p - 1] == 0xFF || b == 0xFF)
            continue;
        jpg[p] = b;
        n--;
    }
    return 0;
}

int tu_make_imagefolder(const char *dir, int classes, int per_class, int min_side, int max_side,
                        uint64_t seed)
{
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return -errno;
    uint64_t s = seed;
    int k = 0;
    for (int c = 0; c < classes; c++) {
        char cdir[4096];
        snprintf(cdir, sizeof cdir, "%s/class_%03d", dir, c);
        if (mkdir(cdir, 0755) < 0 && errno != EEXIST)
            return -errno;
        for (int i = 0; i < per_class; i++, k++) {
            int span = max_side - min_side + 1;
            tu_jpeg_opts o = {
                .width = min_side + (int)(tu_rand(&s) % (uint64_t)span),
                .height = min_side + (int)(tu_rand(&s) % (uint64_t)span),
                .quality = 85 + (int)(tu_rand(&s) % 11),
                .subsamp = k % 11 == 10   ? TJSAMP_GRAY
                           : k % 13 == 12 ? TJSAMP_444
                                          : TJSAMP_420,
                .progressive = k % 7 == 6,
                .seed = seed * 1000003u + (uint64_t)k,
            };
            uint8_t *jpg;
            size_t len;
            int rc = tu_make_jpeg(&o, &jpg, &len);
            if (rc)
                return rc;
            char path[4200];
            snprintf(path, sizeof path, "%s/img_%05d.jpg", cdir, i);
            rc = tu_write_file(path, jpg, len);
            free(jpg);
            if (rc)
                return rc;
        }
    }
    return 0;
}

int tu_dataset_make(tu_dataset *d, const char *name, int classes, int per_class, int min_side,
                    int max_side, uint64_t seed, int jobs, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    if (!(d->dir = tu_mkdtemp(name))) {
        snprintf(err, errlen, "tu_mkdtemp(%s) failed", name);
        return -errno;
    }
    snprintf(d->folder, sizeof d->folder, "%s/src", d->dir);
    snprintf(d->packed, sizeof d->packed, "%s/data.bfs", d->dir);
    int rc = tu_make_imagefolder(d->folder, classes, per_class, min_side, max_side, seed);
    if (rc) {
        snprintf(err, errlen, "tu_make_imagefolder: %s", strerror(-rc));
        return rc;
    }
    bfs_pack_opts po = {.jobs = jobs};
    bfs_pack_report rep;
    if ((rc = bfs_pack(d->folder, d->packed, &po, &rep, NULL, err, errlen)) == 0)
        bfs_pack_report_free(&rep);
    return rc;
}

void tu_dataset_free(tu_dataset *d)
{
    if (d->dir) {
        tu_rmtree(d->dir);
        free(d->dir);
    }
    d->dir = NULL;
}

/* A TCP port on 127.0.0.1 that was free a moment ago, or 0. */
static int free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = 0;
    if (s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(s, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (s >= 0)
        close(s);
    return port;
}

static int port_open(int port)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                            .sin_port = htons((uint16_t)port)};
    int ok = s >= 0 && connect(s, (struct sockaddr *)&a, sizeof a) == 0;
    if (s >= 0)
        close(s);
    return ok;
}

int tu_redis_start(tu_redis *r, int port, const char *const *extra)
{
    if (!r->dir && !(r->dir = tu_mkdtemp("redis")))
        return -1;
    r->port = port ? port : free_port();
    if (!r->port)
        return -1;
    char portbuf[16];
    snprintf(portbuf, sizeof portbuf, "%d", r->port);
    const char *argv[64] = {"redis-server", "--port",     portbuf,  "--bind",
                            "127.0.0.1",    "--save",     "",       "--appendonly",
                            "no",           "--dir",      r->dir,   "--daemonize",
                            "no",           "--loglevel", "warning"};
    int n = 15;
    for (int i = 0; extra && extra[i] && n < 63; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) {
            dup2(devnull, 1);
            dup2(devnull, 2);
        }
        execvp("redis-server", (char *const *)argv);
        _exit(127);
    }
    r->pid = pid;
    for (int i = 0; i < 500; i++) { /* up to 5 s */
        if (port_open(r->port))
            return 0;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            r->pid = 0;
            return -1; /* missing, or refused its arguments */
        }
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    tu_redis_stop(r);
    return -1;
}

void tu_redis_stop(tu_redis *r)
{
    if (r->pid > 0) {
        kill(r->pid, SIGKILL);
        waitpid(r->pid, NULL, 0);
        r->pid = 0;
    }
}

void tu_redis_free(tu_redis *r)
{
    tu_redis_stop(r);
    if (r->dir) {
        tu_rmtree(r->dir);
        free(r->dir);
        r->dir = NULL;
    }
}

/* ---- PNG and WebP ------------------------------------------------------------------- */

static uint8_t *put_chunk(uint8_t *o, const char *type, const uint8_t *d, uint32_t n)
{
    o[0] = (uint8_t)(n >> 24), o[1] = (uint8_t)(n >> 16), o[2] = (uint8_t)(n >> 8),
    o[3] = (uint8_t)n;
    memcpy(o + 4, type, 4);
    if (n)
        memcpy(o + 8, d, n);
    uint32_t c = (uint32_t)crc32(0, o + 4, n + 4);
    o += 8 + n;
    o[0] = (uint8_t)(c >> 24), o[1] = (uint8_t)(c >> 16), o[2] = (uint8_t)(c >> 8),
    o[3] = (uint8_t)c;
    return o + 4;
}

static int paeth(int a, int b, int c)
{
    int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

int tu_make_png(const uint8_t *rows, int w, int h, int ct, int depth, const uint8_t *plte,
                int nplte, const uint8_t *trns, int ntrns, uint8_t **out, size_t *len)
{
    int ch = ct == 2 ? 3 : ct == 4 ? 2 : ct == 6 ? 4 : 1;
    size_t rb = ((size_t)w * ch * depth + 7) / 8, bpp = (size_t)(ch * depth + 7) / 8;
    size_t fl = (rb + 1) * (size_t)h;
    uint8_t *f = malloc(fl);
    uLongf zl = compressBound(fl);
    uint8_t *z = malloc(zl), *o = malloc(zl + 3 * 256 + 256 + 128);
    if (!f || !z || !o) {
        free(f), free(z), free(o);
        return -ENOMEM;
    }
    for (int y = 0; y < h; y++) {
        const uint8_t *r = rows + (size_t)y * rb, *u = y ? rows + (size_t)(y - 1) * rb : NULL;
        uint8_t *d = f + (size_t)y * (rb + 1);
        int t = y % 5;
        d[0] = (uint8_t)t;
        for (size_t i = 0; i < rb; i++) {
            int a = i >= bpp ? r[i - bpp] : 0, b = u ? u[i] : 0, c = u && i >= bpp ? u[i - bpp] : 0;
            int pred = t == 0 ? 0 : t == 1 ? a : t == 2 ? b : t == 3 ? (a + b) / 2 : paeth(a, b, c);
            d[1 + i] = (uint8_t)(r[i] - pred);
        }
    }
    if (compress2(z, &zl, f, fl, 6) != Z_OK) {
        free(f), free(z), free(o);
        return -ENOMEM;
    }
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    uint8_t ih[13] = {(uint8_t)(w >> 24),
                      (uint8_t)(w >> 16),
                      (uint8_t)(w >> 8),
                      (uint8_t)w,
                      (uint8_t)(h >> 24),
                      (uint8_t)(h >> 16),
                      (uint8_t)(h >> 8),
                      (uint8_t)h,
                      (uint8_t)depth,
                      (uint8_t)ct,
                      0,
                      0,
                      0};
    uint8_t *p = o;
    memcpy(p, sig, 8);
    p = put_chunk(p + 8, "IHDR", ih, 13);
    if (plte)
        p = put_chunk(p, "PLTE", plte, (uint32_t)nplte * 3);
    if (trns)
        p = put_chunk(p, "tRNS", trns, (uint32_t)ntrns);
    p = put_chunk(p, "IDAT", z, (uint32_t)zl);
    p = put_chunk(p, "IEND", NULL, 0);
    free(f), free(z);
    *out = o, *len = (size_t)(p - o);
    return 0;
}

int tu_make_webp(const uint8_t *rgb, int w, int h, int lossless, uint8_t **out, size_t *len)
{
    uint8_t *enc = NULL;
    size_t n = lossless ? WebPEncodeLosslessRGB(rgb, w, h, w * 3, &enc)
                        : WebPEncodeRGB(rgb, w, h, w * 3, 80, &enc);
    if (!n)
        return -ENOMEM;
    uint8_t *o = malloc(n); /* ours, so the caller frees it with free() */
    if (o)
        memcpy(o, enc, n);
    WebPFree(enc);
    if (!o)
        return -ENOMEM;
    *out = o, *len = n;
    return 0;
}
