/*
 * check_claims.c — engine/claims, the one-host claim counters of group=: two handles of one
 * group hand out every batch of an epoch exactly once, then -ENODATA; epochs are counted
 * apart; forked processes racing on one group never get a batch twice and together get
 * them all; claims given back are handed out again, at most BFS_CLAIMS_TRIES times, and
 * claims returned untried keep their tries; another
 * fingerprint or group shares nothing; the last handle removes the file, a new group starts
 * at 0, and a file left by dead members (no close) is reset; bad names, another pipeline's
 * file and a file that is not private are refused.
 *
 * Group names carry the pid, so parallel runs and other users' groups never meet.
 */
#include "engine/claims.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define FP 0x0123456789abcdefull

static char err[512];

/* A group name unique to this process and test. */
static const char *gname(const char *tag)
{
    static char buf[64];
    snprintf(buf, sizeof buf, "check-%d-%s", (int)getpid(), tag);
    return buf;
}

static void gpath(char *buf, size_t cap, const char *name, uint64_t fp)
{
    snprintf(buf, cap, "/dev/shm/batchfs-group-%u-%s-%016llx", (unsigned)geteuid(), name,
             (unsigned long long)fp);
}

static bfs_claims *open_ok(const char *name, uint64_t fp, uint64_t batches)
{
    bfs_claims *g = NULL;
    int rc = bfs_claims_open(name, fp, batches, &g, err, sizeof err);
    ck_assert_msg(rc == 0, "bfs_claims_open(%s): %d %s", name, rc, err);
    return g;
}

START_TEST(two_handles_share_each_batch_once)
{
    const char *name = gname("two");
    bfs_claims *a = open_ok(name, FP, 10), *b = open_ok(name, FP, 10);
    int seen[10] = {0};
    bfs_group_claim c;
    for (int i = 0; i < 10; i++) {
        ck_assert_int_eq(bfs_claims_take(i % 2 ? a : b, 3, &c), 0);
        ck_assert_uint_eq(c.epoch, 3);
        ck_assert_uint_lt(c.batch, 10);
        ck_assert_int_eq(seen[c.batch]++, 0);
    }
    ck_assert_int_eq(bfs_claims_take(a, 3, &c), -ENODATA);
    ck_assert_int_eq(bfs_claims_take(b, 3, &c), -ENODATA);
    /* another epoch has its own counter; one out of range is refused */
    ck_assert_int_eq(bfs_claims_take(a, 4, &c), 0);
    ck_assert_uint_eq(c.batch, 0);
    ck_assert_int_eq(bfs_claims_take(a, BFS_CLAIMS_EPOCHS, &c), -ERANGE);
    ck_assert_int_eq(bfs_claims_take(a, BFS_CLAIMS_EPOCHS - 1, &c), 0);
    bfs_claims_stats st;
    bfs_claims_get_stats(a, &st);
    ck_assert_uint_eq(st.taken, 5 + 2);
    ck_assert_uint_eq(st.exhausted, 1);
    ck_assert_str_eq(bfs_claims_name(a), name);
    bfs_claims_close(a);
    bfs_claims_close(b);
}
END_TEST

START_TEST(processes_race_without_duplicates)
{
    enum { PROCS = 4, BATCHES = 2000 };
    const char *name = gname("race");
    bfs_claims *keep = open_ok(name, FP, BATCHES); /* the group lives for the whole test */
    int pipes[PROCS][2];
    for (int p = 0; p < PROCS; p++) {
        ck_assert_int_eq(pipe(pipes[p]), 0);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            close(pipes[p][0]);
            bfs_claims *g = NULL;
            if (bfs_claims_open(name, FP, BATCHES, &g, NULL, 0))
                _exit(2);
            bfs_group_claim c;
            int rc;
            while ((rc = bfs_claims_take(g, 0, &c)) == 0) {
                uint32_t k = (uint32_t)c.batch;
                if (write(pipes[p][1], &k, sizeof k) != sizeof k)
                    _exit(3);
            }
            bfs_claims_close(g);
            _exit(rc == -ENODATA ? 0 : 4);
        }
        close(pipes[p][1]);
    }
    static int seen[BATCHES];
    memset(seen, 0, sizeof seen);
    int total = 0;
    for (int p = 0; p < PROCS; p++) {
        uint32_t k;
        while (read(pipes[p][0], &k, sizeof k) == sizeof k) {
            ck_assert_uint_lt(k, BATCHES);
            ck_assert_msg(seen[k]++ == 0, "batch %u claimed twice", k);
            total++;
        }
        close(pipes[p][0]);
    }
    for (int p = 0; p < PROCS; p++) {
        int status;
        ck_assert_int_gt(wait(&status), 0);
        ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    ck_assert_int_eq(total, BATCHES);
    bfs_claims_close(keep);
}
END_TEST

START_TEST(given_back_claims_come_back)
{
    bfs_claims *g = open_ok(gname("back"), FP, 3);
    bfs_group_claim c, d;
    ck_assert_int_eq(bfs_claims_take(g, 0, &c), 0);
    ck_assert_uint_eq(c.batch, 0);
    bfs_claims_give_back(g, &c);
    /* handed out again before new batches, its failures counted */
    ck_assert_int_eq(bfs_claims_take(g, 0, &d), 0);
    ck_assert_uint_eq(d.batch, 0);
    ck_assert_uint_eq(d.tries, 1);
    ck_assert_int_eq(bfs_claims_take(g, 0, &c), 0);
    ck_assert_uint_eq(c.batch, 1);
    ck_assert_int_eq(bfs_claims_take(g, 0, &c), 0);
    ck_assert_uint_eq(c.batch, 2);
    ck_assert_int_eq(bfs_claims_take(g, 0, &c), -ENODATA);
    /* given back after the counter ran out: found again */
    bfs_claims_give_back(g, &d);
    ck_assert_int_eq(bfs_claims_take(g, 1, &c), 0); /* (not another epoch's) */
    ck_assert_uint_eq(c.batch, 0);
    ck_assert_int_eq(bfs_claims_take(g, 0, &c), 0);
    ck_assert_uint_eq(c.batch, 0);
    ck_assert_uint_eq(c.tries, BFS_CLAIMS_TRIES - 1);
    /* the last try failed too: lost */
    bfs_claims_give_back(g, &c);
    ck_assert_int_eq(bfs_claims_take(g, 0, &c), -ENODATA);
    bfs_claims_stats st;
    bfs_claims_get_stats(g, &st);
    ck_assert_uint_eq(st.given_back, 2);
    ck_assert_uint_eq(st.lost, 1);
    bfs_claims_close(g);
}
END_TEST

/* A claim returned untried (an interrupted reader, a claim taken ahead and not opened)
 * keeps its tries: returned any number of times, it is never lost. */
START_TEST(returned_claims_keep_their_tries)
{
    bfs_claims *g = open_ok(gname("ret"), FP, 2);
    bfs_group_claim c;
    ck_assert_int_eq(bfs_claims_take(g, 0, &c), 0);
    ck_assert_uint_eq(c.batch, 0);
    for (int i = 0; i < 2 * BFS_CLAIMS_TRIES; i++) {
        bfs_claims_return(g, &c);
        ck_assert_int_eq(bfs_claims_take(g, 0, &c), 0);
        ck_assert_uint_eq(c.batch, 0);
        ck_assert_uint_eq(c.tries, 0);
    }
    /* a failed try still counts after returns */
    bfs_claims_give_back(g, &c);
    ck_assert_int_eq(bfs_claims_take(g, 0, &c), 0);
    ck_assert_uint_eq(c.batch, 0);
    ck_assert_uint_eq(c.tries, 1);
    bfs_claims_return(g, &c);
    ck_assert_int_eq(bfs_claims_take(g, 0, &c), 0);
    ck_assert_uint_eq(c.tries, 1);
    bfs_claims_stats st;
    bfs_claims_get_stats(g, &st);
    ck_assert_uint_eq(st.given_back, 2 * BFS_CLAIMS_TRIES + 2);
    ck_assert_uint_eq(st.lost, 0);
    bfs_claims_close(g);
}
END_TEST

START_TEST(groups_and_pipelines_are_apart)
{
    bfs_claims *a = open_ok(gname("apart"), FP, 2);
    bfs_claims *other_fp = open_ok(gname("apart"), FP + 1, 2);
    bfs_claims *other_name = open_ok(gname("apart2"), FP, 2);
    bfs_group_claim c;
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(bfs_claims_take(a, 0, &c), 0);
    ck_assert_int_eq(bfs_claims_take(a, 0, &c), -ENODATA);
    ck_assert_int_eq(bfs_claims_take(other_fp, 0, &c), 0);
    ck_assert_uint_eq(c.batch, 0);
    ck_assert_int_eq(bfs_claims_take(other_name, 0, &c), 0);
    ck_assert_uint_eq(c.batch, 0);
    bfs_claims_close(a);
    bfs_claims_close(other_fp);
    bfs_claims_close(other_name);
}
END_TEST

START_TEST(lifetime_last_removes_dead_reset)
{
    const char *name = gname("life");
    char path[200];
    gpath(path, sizeof path, name, FP);
    bfs_claims *a = open_ok(name, FP, 4), *b = open_ok(name, FP, 4);
    bfs_group_claim c;
    ck_assert_int_eq(bfs_claims_take(a, 0, &c), 0);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0600);
    bfs_claims_close(a);
    ck_assert_int_eq(stat(path, &st), 0); /* b is still a member */
    ck_assert_int_eq(bfs_claims_take(b, 0, &c), 0);
    ck_assert_uint_eq(c.batch, 1);
    bfs_claims_close(b);
    ck_assert_int_eq(stat(path, &st), -1); /* the last one removed it */
    /* a new group starts at 0 */
    a = open_ok(name, FP, 4);
    ck_assert_int_eq(bfs_claims_take(a, 0, &c), 0);
    ck_assert_uint_eq(c.batch, 0);
    bfs_claims_close(a);
    /* members that died (no close) leave the file: the next first member resets it */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        bfs_claims *g = NULL;
        bfs_group_claim x;
        if (bfs_claims_open(name, FP, 4, &g, NULL, 0) || bfs_claims_take(g, 0, &x) ||
            bfs_claims_take(g, 0, &x))
            _exit(1);
        _exit(0); /* (dies attached) */
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert_int_eq(stat(path, &st), 0);
    a = open_ok(name, FP, 4);
    ck_assert_int_eq(bfs_claims_take(a, 0, &c), 0);
    ck_assert_uint_eq(c.batch, 0);
    bfs_claims_close(a);
    bfs_claims_close(NULL);
}
END_TEST

START_TEST(refusals)
{
    bfs_claims *g = (bfs_claims *)1;
    const char *bad[] = {"", "a/b", "a b", "..\x01", "x,y"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert_int_eq(bfs_claims_open(bad[i], FP, 4, &g, err, sizeof err), -EINVAL);
        ck_assert_ptr_null(g);
        ck_assert_ptr_nonnull(strstr(err, "group="));
    }
    char longname[80];
    memset(longname, 'a', sizeof longname);
    longname[65] = '\0';
    ck_assert(!bfs_claims_name_valid(longname));
    longname[64] = '\0';
    ck_assert(bfs_claims_name_valid(longname));
    ck_assert(bfs_claims_name_valid("A-z_0.9"));

    /* a live member with another batch count under the same name: refused */
    const char *name = gname("refuse");
    bfs_claims *a = open_ok(name, FP, 4);
    ck_assert_int_eq(bfs_claims_open(name, FP, 5, &g, err, sizeof err), -EEXIST);
    ck_assert_ptr_nonnull(strstr(err, "another pipeline"));
    bfs_claims_close(a);

    /* a file readable by others: refused, named */
    char path[200];
    name = gname("mode");
    gpath(path, sizeof path, name, FP);
    int fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(fchmod(fd, 0644), 0);
    close(fd);
    ck_assert_int_eq(bfs_claims_open(name, FP, 4, &g, err, sizeof err), -EPERM);
    ck_assert_ptr_nonnull(strstr(err, path));
    unlink(path);
    /* a symbolic link: refused */
    ck_assert_int_eq(symlink("/dev/null", path), 0);
    ck_assert_int_eq(bfs_claims_open(name, FP, 4, &g, err, sizeof err), -ELOOP);
    ck_assert_ptr_nonnull(strstr(err, "symbolic link"));
    unlink(path);
}
END_TEST

static Suite *claims_suite(void)
{
    Suite *s = suite_create("claims");
    TCase *tc = tcase_create("claims");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, two_handles_share_each_batch_once);
    tcase_add_test(tc, processes_race_without_duplicates);
    tcase_add_test(tc, given_back_claims_come_back);
    tcase_add_test(tc, returned_claims_keep_their_tries);
    tcase_add_test(tc, groups_and_pipelines_are_apart);
    tcase_add_test(tc, lifetime_last_removes_dead_reset);
    tcase_add_test(tc, refusals);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(claims_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
