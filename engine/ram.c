/*
 * ram.c — the RAM budget and the memory floor of a pipeline's options (see ram.h).
 *
 * cgroup files are small text files read whole with stdio; a file that is missing or
 * does not parse counts as "no limit there", so a host without cgroups (or with an
 * unexpected layout) gets the MemAvailable-based budget it always had.
 */
#include "engine/ram.h"
#include "base/err.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NO_LIMIT (1ull << 60) /* v1 says "unlimited" as PAGE_COUNTER_MAX pages (~2^63) */

/* "Key: N kB" of a meminfo file, bytes; 0 when absent. */
static uint64_t meminfo_kb(const char *path, const char *key)
{
    FILE *f = fopen(path, "re");
    char line[256];
    size_t n = strlen(key);
    uint64_t kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ':' &&
            sscanf(line + n + 1, " %" SCNu64 " kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb * 1024;
}

/* The number in file dir/name: 0 when missing, unreadable or not a number; "max" and
 * v1's huge "unlimited" are UINT64_MAX. */
static uint64_t read_u64(const char *dir, const char *name)
{
    char path[PATH_MAX], text[64];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return 0;
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    char *got = fgets(text, sizeof text, f);
    fclose(f);
    if (!got)
        return 0;
    if (!strncmp(text, "max", 3))
        return UINT64_MAX;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || end == text || (*end && *end != '\n'))
        return 0;
    return v >= NO_LIMIT ? UINT64_MAX : (uint64_t)v;
}

/* The value of `key N` in memory.stat of dir; 0 when absent. */
static uint64_t stat_key(const char *dir, const char *key)
{
    char path[PATH_MAX], line[256];
    if (snprintf(path, sizeof path, "%s/memory.stat", dir) >= (int)sizeof path)
        return 0;
    FILE *f = fopen(path, "re");
    size_t n = strlen(key);
    uint64_t v = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ' ' && sscanf(line + n + 1, "%" SCNu64, &v) == 1)
            break;
    if (f)
        fclose(f);
    return v;
}

/* Walk ROOT/PATH, its parents, ..., ROOT: the tightest limit and the least room. */
static void walk(bfs_ram_host *h, const char *root, const char *path, int v2)
{
    const char *max_name = v2 ? "memory.max" : "memory.limit_in_bytes";
    const char *use_name = v2 ? "memory.current" : "memory.usage_in_bytes";
    const char *inactive = v2 ? "inactive_file" : "total_inactive_file";
    char dir[PATH_MAX];
    while (*path == '/')
        path++;
    if (snprintf(dir, sizeof dir, "%s%s%s", root, *path ? "/" : "", path) >= (int)sizeof dir)
        return;
    size_t rootlen = strlen(root);
    for (;;) {
        uint64_t max = read_u64(dir, max_name);
        if (max && max != UINT64_MAX) {
            uint64_t used = read_u64(dir, use_name), idle = stat_key(dir, inactive);
            if (used == UINT64_MAX)
                used = 0;
            used = idle < used ? used - idle : 0;
            uint64_t room = used < max ? max - used : 0;
            int first = !h->cg_max;
            if (first || max < h->cg_max) {
                h->cg_max = max;
                snprintf(h->cg_file, sizeof h->cg_file, "%s", max_name);
            }
            if (first || room < h->cg_room)
                h->cg_room = room;
        }
        char *slash = strrchr(dir + rootlen, '/');
        if (!slash)
            break;
        *slash = '\0';
    }
}

void bfs_ram_probe(const char *meminfo, const char *self_cgroup, const char *cgroup_root,
                   bfs_ram_host *h)
{
    memset(h, 0, sizeof *h);
    if (!meminfo)
        meminfo = "/proc/meminfo";
    if (!self_cgroup)
        self_cgroup = "/proc/self/cgroup";
    if (!cgroup_root) {
        const char *env = getenv(BFS_RAM_CGROUP_ROOT_ENV);
        cgroup_root = env && *env ? env : "/sys/fs/cgroup";
    }
    h->total = meminfo_kb(meminfo, "MemTotal");
    h->available = meminfo_kb(meminfo, "MemAvailable");
    if (!h->total) {
        long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
        if (pages > 0 && psize > 0)
            h->total = (uint64_t)pages * (uint64_t)psize;
    }
    /* lines "ID:CONTROLLERS:PATH": "0::PATH" is cgroup v2, "N:...memory...:PATH" v1 */
    FILE *f = fopen(self_cgroup, "re");
    char line[PATH_MAX + 64];
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c1 = *c2 = '\0';
        const char *ctrls = c1 + 1, *path = c2 + 1;
        if (!strcmp(line, "0") && !*ctrls) {
            walk(h, cgroup_root, path, 1);
        } else {
            for (const char *p = ctrls; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
                if (!strncmp(p, "memory", 6) && (p[6] == ',' || !p[6])) {
                    char v1root[PATH_MAX];
                    if (snprintf(v1root, sizeof v1root, "%s/memory", cgroup_root) <
                        (int)sizeof v1root)
                        walk(h, v1root, path, 0);
                    break;
                }
        }
    }
    if (f)
        fclose(f);
}

/* What this process could still use: MemAvailable and the cgroup room, the smaller. */
static uint64_t usable(const bfs_ram_host *h)
{
    uint64_t u = h->available ? h->available : h->total;
    if (h->cg_max && (!u || h->cg_room < u))
        u = h->cg_room;
    return u;
}

uint64_t bfs_ram_default_budget(const bfs_ram_host *h)
{
    return usable(h) / 2;
}

static const char *dtype_name(int dtype)
{
    return dtype == BFS_OUT_U8     ? "u8"
           : dtype == BFS_OUT_F16  ? "f16"
           : dtype == BFS_OUT_BF16 ? "bf16"
                                   : "f32";
}

/* bytes in binary units with 3 significant digits: "8 GiB", "7.81 GiB", "512 MiB" */
static const char *bin(char *buf, size_t cap, uint64_t bytes)
{
    static const char *const unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 6)
        v /= 1024, u++;
    snprintf(buf, cap, "%.3g %s", v, unit[u]);
    return buf;
}

int bfs_ram_budget(const bfs_pipeline_opts *o, uint64_t batch_bytes, const bfs_ram_host *h,
                   uint64_t *budget, char *note, size_t notelen, char *err, size_t errlen)
{
    if (note && notelen)
        note[0] = '\0';
    uint64_t b = o->ram_mb > 0 ? (uint64_t)o->ram_mb << 20 : bfs_ram_default_budget(h);
    *budget = b;
    uint64_t need = BFS_RAM_MIN_BATCHES * batch_bytes;
    char what[256], size[32], a[32], c[32];
    if (o->out_h == o->out_w)
        snprintf(size, sizeof size, "%u", o->out_h);
    else
        snprintf(size, sizeof size, "%ux%u", o->out_h, o->out_w);
    char files[160];
    snprintf(files, sizeof files, "batch=%u,size=%s,dtype=%s makes %.1f %s batch files", o->batch,
             size, dtype_name(o->dtype),
             batch_bytes >= 1000000000 ? batch_bytes / 1e9 : batch_bytes / 1e6,
             batch_bytes >= 1000000000 ? "GB" : "MB");
    snprintf(what, sizeof what,
             "%s; a mount holds %d at least (the one being read and the next: %s)", files,
             BFS_RAM_MIN_BATCHES, bin(c, sizeof c, need));
    /* hard limits first: raising ram_mb cannot help past them */
    if (h->cg_max && need > h->cg_max)
        return bfs_errf(-ENOMEM, err, errlen,
                        "%s, but this process's cgroup limits it to %s (cgroup %s): lower "
                        "batch or size, or use a smaller dtype",
                        what, bin(a, sizeof a, h->cg_max), h->cg_file);
    if (h->total && need > h->total)
        return bfs_errf(-ENOMEM, err, errlen,
                        "%s, but this machine has %s of memory: lower batch or size, or use a "
                        "smaller dtype",
                        what, bin(a, sizeof a, h->total));
    if (need > b) {
        char why[256];
        if (o->ram_mb > 0)
            snprintf(why, sizeof why, "ram_mb=%lld MiB", (long long)o->ram_mb);
        else if (h->cg_max && usable(h) == h->cg_room)
            snprintf(why, sizeof why,
                     "%llu MiB (ram_mb's default: half of the %s that cgroup %s %s leaves)",
                     (unsigned long long)(b >> 20), bin(c, sizeof c, h->cg_room), h->cg_file,
                     bin(a, sizeof a, h->cg_max));
        else
            snprintf(why, sizeof why, "%llu MiB (ram_mb's default: half of the %s available)",
                     (unsigned long long)(b >> 20), bin(a, sizeof a, usable(h)));
        uint64_t cap = h->cg_max && h->cg_max < h->total ? h->cg_max : h->total;
        return bfs_errf(-ENOMEM, err, errlen,
                        "%s: this mount may use at most %s: lower batch or size, use a smaller "
                        "dtype, or raise ram_mb (to %llu at least; this host allows %s)",
                        what, why, (unsigned long long)((need + (1 << 20) - 1) >> 20),
                        cap ? bin(c, sizeof c, cap) : "an unknown amount");
    }
    /* a fixed batch cache too small for one batch would keep nothing, silently */
    if (o->cache_mb > 0 && ((uint64_t)o->cache_mb << 20) < batch_bytes)
        return bfs_errf(-EINVAL, err, errlen,
                        "%s, but cache_mb=%lld MiB cannot hold one: raise cache_mb (to %llu at "
                        "least), leave it auto, or set cache_mb=0 (no batch cache)",
                        files, (long long)o->cache_mb,
                        (unsigned long long)((batch_bytes + (1 << 20) - 1) >> 20));
    if (o->ram_mb > 0 && note && notelen) {
        if (h->cg_max && b > h->cg_max)
            snprintf(note, notelen,
                     "ram_mb=%lld is more than this process's cgroup allows (%s %s): "
                     "the cache may grow until the cgroup's OOM killer stops the daemon",
                     (long long)o->ram_mb, h->cg_file, bin(a, sizeof a, h->cg_max));
        else if (h->total && b > h->total)
            snprintf(note, notelen,
                     "ram_mb=%lld is more than this machine's memory (%s): the cache may grow "
                     "until memory runs out",
                     (long long)o->ram_mb, bin(a, sizeof a, h->total));
    }
    return 0;
}
