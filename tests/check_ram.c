/*
 * check_ram.c — the RAM budget (engine/ram.h) on fake /proc and /sys/fs/cgroup trees in a
 * temporary directory: cgroup v2 and v1 limits, limits of ancestors, "max" and v1's
 * "unlimited", inactive file pages not counted as used, the default budget lowered by the
 * cgroup; and the refusals of options whose batches cannot fit, with their messages.
 */
#include "engine/ram.h"
#include "tests/testutil.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define GIB (1ull << 30)
#define MIB (1ull << 20)

static char *root;

static void setup(void)
{
    root = tu_mkdtemp("check_ram");
    ck_assert_ptr_nonnull(root);
}

static void teardown(void)
{
    tu_rmtree(root);
    free(root);
}

/* root/rel (directories created on the way) holds text */
static void put(const char *rel, const char *text)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')); p++) {
        *p = '\0';
        mkdir(path, 0755);
        *p = '/';
    }
    ck_assert_int_eq(tu_write_file(path, text, strlen(text)), 0);
}

static void probe(bfs_ram_host *h)
{
    char meminfo[4096], self[4096], cg[4096];
    snprintf(meminfo, sizeof meminfo, "%s/meminfo", root);
    snprintf(self, sizeof self, "%s/self_cgroup", root);
    snprintf(cg, sizeof cg, "%s/cg", root);
    bfs_ram_probe(meminfo, self, cg, h);
}

/* 64 GiB host, 48 GiB available */
static const char *meminfo = "MemTotal:       67108864 kB\nMemFree:         1000 kB\n"
                             "MemAvailable:   50331648 kB\n";

START_TEST(no_cgroup_limit_half_of_available)
{
    put("meminfo", meminfo);
    put("self_cgroup", "0::/user.slice/session-1.scope\n");
    put("cg/user.slice/session-1.scope/memory.max", "max\n");
    put("cg/user.slice/memory.max", "max\n");
    bfs_ram_host h;
    probe(&h);
    ck_assert_uint_eq(h.total, 64 * GIB);
    ck_assert_uint_eq(h.available, 48 * GIB);
    ck_assert_uint_eq(h.cg_max, 0);
    ck_assert_uint_eq(bfs_ram_default_budget(&h), 24 * GIB);
}
END_TEST

START_TEST(cgroup_v2_limit_lowers_default)
{
    /* an 8 GiB container on a 64 GiB host: 1 GiB used, of which 256 MiB inactive files */
    put("meminfo", meminfo);
    put("self_cgroup", "0::/docker/abc\n");
    put("cg/docker/abc/memory.max", "8589934592\n");
    put("cg/docker/abc/memory.current", "1073741824\n");
    put("cg/docker/abc/memory.stat", "anon 805306368\nfile 268435456\nactive_file 0\n"
                                     "inactive_file 268435456\nslab 0\n");
    bfs_ram_host h;
    probe(&h);
    ck_assert_uint_eq(h.cg_max, 8 * GIB);
    ck_assert_str_eq(h.cg_file, "memory.max");
    ck_assert_uint_eq(h.cg_room, 8 * GIB - 768 * MIB);
    ck_assert_uint_eq(bfs_ram_default_budget(&h), (8 * GIB - 768 * MIB) / 2);
}
END_TEST

START_TEST(cgroup_v2_ancestor_and_namespace_root)
{
    /* the parent's limit is tighter than the child's */
    put("meminfo", meminfo);
    put("self_cgroup", "0::/a/b\n");
    put("cg/a/b/memory.max", "17179869184\n");
    put("cg/a/memory.max", "4294967296\n");
    put("cg/a/memory.current", "0\n");
    bfs_ram_host h;
    probe(&h);
    ck_assert_uint_eq(h.cg_max, 4 * GIB);
    ck_assert_uint_eq(bfs_ram_default_budget(&h), 2 * GIB);

    /* the path of /proc/self/cgroup is not under this root (a container without a cgroup
     * namespace sees the host's path, but its own cgroup mounted at the root): the root's
     * limit applies */
    put("self_cgroup", "0::/system.slice/docker-1234.scope\n");
    put("cg/memory.max", "2147483648\n");
    put("cg/memory.current", "1073741824\n");
    probe(&h);
    ck_assert_uint_eq(h.cg_max, 2 * GIB);
    ck_assert_uint_eq(h.cg_room, 1 * GIB);
    ck_assert_uint_eq(bfs_ram_default_budget(&h), 512 * MIB);
}
END_TEST

START_TEST(cgroup_v1_limit_and_unlimited)
{
    put("meminfo", meminfo);
    put("self_cgroup", "9:name=systemd:/\n5:cpu,cpuacct:/\n4:memory:/job/7\n0::/\n");
    put("cg/memory/job/7/memory.limit_in_bytes", "6442450944\n");
    put("cg/memory/job/7/memory.usage_in_bytes", "2147483648\n");
    put("cg/memory/job/7/memory.stat", "cache 1\ninactive_file 5\ntotal_inactive_file "
                                       "1073741824\n");
    put("cg/memory/memory.limit_in_bytes", "9223372036854771712\n"); /* v1's unlimited */
    bfs_ram_host h;
    probe(&h);
    ck_assert_uint_eq(h.cg_max, 6 * GIB);
    ck_assert_str_eq(h.cg_file, "memory.limit_in_bytes");
    ck_assert_uint_eq(h.cg_room, 5 * GIB);
    ck_assert_uint_eq(bfs_ram_default_budget(&h), 5 * GIB / 2);

    put("cg/memory/job/7/memory.limit_in_bytes", "9223372036854771712\n");
    probe(&h);
    ck_assert_uint_eq(h.cg_max, 0);
    ck_assert_uint_eq(bfs_ram_default_budget(&h), 24 * GIB);
}
END_TEST

START_TEST(unreadable_files_mean_no_limit)
{
    put("meminfo", "garbage\n");
    put("self_cgroup", "no colons here\n0::/x\n");
    put("cg/x/memory.max", "eight gigabytes\n");
    bfs_ram_host h;
    probe(&h);
    ck_assert_uint_eq(h.cg_max, 0);
    ck_assert_uint_eq(h.available, 0);
    ck_assert_uint_gt(h.total, 0); /* sysconf's physical memory */
    ck_assert_uint_eq(bfs_ram_default_budget(&h), h.total / 2);
}
END_TEST

static bfs_pipeline_opts opts(const char *text)
{
    bfs_pipeline_opts o;
    char err[BFS_PIPELINE_ERRLEN];
    bfs_pipeline_defaults(&o);
    ck_assert_int_eq(bfs_pipeline_parse(&o, text, err, sizeof err), 0);
    ck_assert_int_eq(bfs_pipeline_finish(&o, err, sizeof err), 0);
    return o;
}

#define HAS(s, sub) ck_assert_msg(strstr((s), (sub)) != NULL, "'%s' lacks '%s'", (s), (sub))

START_TEST(budget_refuses_batches_that_cannot_fit)
{
    /* the 8 GiB container: 12.9 GB batches cannot fit whatever ram_mb says */
    bfs_ram_host h = {.total = 64 * GIB,
                      .available = 48 * GIB,
                      .cg_max = 8 * GIB,
                      .cg_room = 8 * GIB,
                      .cg_file = "memory.max"};
    bfs_pipeline_opts o = opts("batch=16,size=8192,dtype=f32");
    uint64_t bytes = 16ull * 8192 * 8192 * 3 * 4 + 4096, budget = 1;
    char err[1024], note[256];
    ck_assert_int_eq(bfs_ram_budget(&o, bytes, &h, &budget, note, sizeof note, err, sizeof err),
                     -ENOMEM);
    HAS(err, "batch=16,size=8192,dtype=f32 makes 12.9 GB batch files");
    HAS(err, "8 GiB (cgroup memory.max)");
    HAS(err, "lower batch or size");
    o.ram_mb = 1 << 20; /* a 1 TiB ram_mb does not help */
    ck_assert_int_eq(bfs_ram_budget(&o, bytes, &h, &budget, note, sizeof note, err, sizeof err),
                     -ENOMEM);
    HAS(err, "cgroup memory.max");

    /* 3.2 GB batches: 2 fit under the limit, not in the default budget (half the room) */
    o = opts("batch=16,size=4096,dtype=f32");
    bytes = 16ull * 4096 * 4096 * 3 * 4 + 4096;
    ck_assert_int_eq(bfs_ram_budget(&o, bytes, &h, &budget, note, sizeof note, err, sizeof err),
                     -ENOMEM);
    HAS(err, "batch=16,size=4096,dtype=f32 makes 3.2 GB batch files");
    HAS(err, "at most 4096 MiB (ram_mb's default: half of the 8 GiB that cgroup memory.max 8 GiB");
    HAS(err, "raise ram_mb (to 6145 at least");
    o.ram_mb = 7000; /* raising it as told works */
    ck_assert_int_eq(bfs_ram_budget(&o, bytes, &h, &budget, note, sizeof note, err, sizeof err), 0);
    ck_assert_uint_eq(budget, 7000 * MIB);
    ck_assert_str_eq(note, "");

    /* ram_mb smaller than one batch */
    o = opts("batch=8,size=1024,dtype=f32,ram_mb=64");
    bytes = 8ull * 1024 * 1024 * 3 * 4 + 4096;
    ck_assert_int_eq(bfs_ram_budget(&o, bytes, &h, &budget, note, sizeof note, err, sizeof err),
                     -ENOMEM);
    HAS(err, "batch=8,size=1024,dtype=f32 makes 100.7 MB batch files");
    HAS(err, "at most ram_mb=64 MiB");

    /* cache_mb smaller than one batch: refused with the batch size and the least value */
    o = opts("batch=8,size=1024,dtype=f32,ram_mb=1024,cache_mb=16");
    ck_assert_int_eq(bfs_ram_budget(&o, bytes, &h, &budget, note, sizeof note, err, sizeof err),
                     -EINVAL);
    HAS(err, "batch=8,size=1024,dtype=f32 makes 100.7 MB batch files");
    HAS(err, "cache_mb=16 MiB cannot hold one");
    HAS(err, "raise cache_mb (to 97 at least)");
    o.cache_mb = 96; /* one MiB short */
    ck_assert_int_eq(bfs_ram_budget(&o, bytes, &h, &budget, note, sizeof note, err, sizeof err),
                     -EINVAL);
    o.cache_mb = 97; /* as told */
    ck_assert_int_eq(bfs_ram_budget(&o, bytes, &h, &budget, note, sizeof note, err, sizeof err), 0);
    o.cache_mb = 0; /* no batch cache */
    ck_assert_int_eq(bfs_ram_budget(&o, bytes, &h, &budget, note, sizeof note, err, sizeof err), 0);

    /* no cgroup: physical memory is the hard limit */
    h = (bfs_ram_host){.total = 16 * GIB, .available = 15 * GIB};
    o = opts("batch=16,size=8192,dtype=f32,ram_mb=100000");
    bytes = 16ull * 8192 * 8192 * 3 * 4 + 4096;
    ck_assert_int_eq(bfs_ram_budget(&o, bytes, &h, &budget, note, sizeof note, err, sizeof err),
                     -ENOMEM);
    HAS(err, "this machine has 16 GiB of memory");
}
END_TEST

START_TEST(budget_defaults_and_notes)
{
    bfs_ram_host h = {.total = 64 * GIB,
                      .available = 48 * GIB,
                      .cg_max = 8 * GIB,
                      .cg_room = 6 * GIB,
                      .cg_file = "memory.max"};
    bfs_pipeline_opts o = opts("batch=256,size=224"); /* the defaults: 38.5 MB batches */
    uint64_t budget = 0, bytes = 256ull * 224 * 224 * 3 + 8192;
    char err[1024] = "", note[256];
    ck_assert_int_eq(bfs_ram_budget(&o, bytes, &h, &budget, note, sizeof note, err, sizeof err), 0);
    ck_assert_uint_eq(budget, 3 * GIB); /* half the cgroup's room, not of MemAvailable */
    ck_assert_str_eq(note, "");
    o.ram_mb = 16384; /* past the cgroup limit: kept as given, with a warning */
    ck_assert_int_eq(bfs_ram_budget(&o, bytes, &h, &budget, note, sizeof note, err, sizeof err), 0);
    ck_assert_uint_eq(budget, 16 * GIB);
    HAS(note, "ram_mb=16384 is more than this process's cgroup allows (memory.max 8 GiB)");
    ck_assert_int_eq(bfs_ram_budget(&o, bytes, &h, &budget, NULL, 0, err, sizeof err), 0);
}
END_TEST

static Suite *ram_suite(void)
{
    Suite *s = suite_create("ram");
    TCase *tc = tcase_create("probe");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, no_cgroup_limit_half_of_available);
    tcase_add_test(tc, cgroup_v2_limit_lowers_default);
    tcase_add_test(tc, cgroup_v2_ancestor_and_namespace_root);
    tcase_add_test(tc, cgroup_v1_limit_and_unlimited);
    tcase_add_test(tc, unreadable_files_mean_no_limit);
    suite_add_tcase(s, tc);
    tc = tcase_create("budget");
    tcase_add_test(tc, budget_refuses_batches_that_cannot_fit);
    tcase_add_test(tc, budget_defaults_and_notes);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(ram_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
