/*
 * check_fault.c — fault injection (tests/fault.h): every allocation, open, read, write,
 * sync, directory read, mapping, rename/link/mkdir and thread start of an operation fails
 * in turn, and the operation must either fail with a clear error or succeed with output
 * byte-identical to the unfaulted run; never crash, hang or (under ASan) leak.
 *
 * Operations walked: one batch computed by the engine and its executor from a .bfs and
 * from an ImageFolder (bad_sample=fail, so that a failed read cannot be hidden by a
 * substitute); the same with bad_sample=substitute (only a read error may substitute);
 * one batch through an executor that shares a store (a fault in the store must never fail
 * the batch nor leave an entry that serves other bytes); a pack of an ImageFolder and of
 * a .bfs (fsync on; on failure no output and no temporary may remain); a cache_dir store
 * save (open, claim, publish with full sync) and load (open, claim, read), in both
 * publication modes.
 *
 * For each operation: a counting run gives the number of calls of each class; then for
 * each class, call N = 1..count fails once, fails from N on (persist), and for reads and
 * writes transfers half the bytes once (short) and from N on (shorts). Each walk prints
 * its counts and a tally; FAULT_VERBOSE=1 prints every run. Run under ASan with CK_FORK=no
 * so that LeakSanitizer sees the whole process (tests/README.md).
 */
#include "cache/store.h"
#include "engine/engine.h"
#include "base/err.h"
#include "engine/exec.h"
#include "engine/dataset/image.h"
#include "engine/dataset/pack.h"
#include "engine/decode.h"
#include "engine/pipeline.h"
#include "engine/remote/remote.h"
#include "engine/service.h"
#include "tests/fault.h"
#include "tests/testutil.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- fixture: a small ImageFolder and its .bfs, shared by every test ------------------- */

static tu_dataset ds;
static const char *tmp, *folder, *packed; /* ds's directory, ImageFolder and its .bfs */

static void setup(void)
{
    /* 2 classes x 4 images: small enough that every call of every run is walked */
    char err[512];
    ck_assert_msg(tu_dataset_make(&ds, "check_fault", 2, 4, 32, 64, 23, 1, err, sizeof err) == 0,
                  "%s", err);
    tmp = ds.dir, folder = ds.folder, packed = ds.packed;
}

static void teardown(void)
{
    tu_dataset_free(&ds);
}

/* ---- the walk ----------------------------------------------------------------------- */

/* Output of a run: copied into a buffer allocated before the run (an allocation of the
 * test inside the run would be counted and failed as the operation's). */
#define OUT_CAP (4u << 20)

typedef struct scenario scenario;
struct scenario {
    const char *name;
    /* before every run, not armed (may assert) */
    void (*prepare)(scenario *s);
    /* the operation, armed: 0 with the output in out/out_len, or an error (err says what
     * failed, where the API gives messages) */
    int (*run)(scenario *s, char *err, size_t errlen);
    /* after every run, not armed: collect the output of a run that wrote files (rc 0), or
     * check what a failed run left behind (rc != 0) */
    void (*after)(scenario *s, int rc, const char *what);
    int messages; /* failures must leave a message in err */
    uint8_t *out;
    size_t out_len;
    const uint8_t *ref; /* the unfaulted run's output (NULL during that run) */
    size_t ref_len;
    uint64_t recomputed; /* runs that succeeded by recomputing (a store miss) */
    int recompute;       /* set by run: this run recomputed */
    uint64_t degraded;   /* runs that succeeded with a reported loss (files skipped) */
    int skipped;         /* set by run: it reports files it could not read and skipped */
};

#define SCENARIO(name_, prepare_, run_, after_, messages_)                                         \
    {                                                                                              \
        .name = (name_), .prepare = (prepare_), .run = (run_), .after = (after_),                  \
        .messages = (messages_)                                                                    \
    }

typedef struct tally {
    uint64_t runs, failed, ok, unfired;
} tally;

static void one_run(scenario *s, const uint8_t *ref, size_t ref_len, fault_class c, uint64_t n,
                    fault_mode mode, int persist, tally *t)
{
    char what[160];
    snprintf(what, sizeof what, "%s: %s call %" PRIu64 " %s%s", s->name, fault_class_name(c), n,
             mode == FAULT_SHORT ? "short" : "fails", persist ? " (and every later one)" : "");
    char err[2048] = "";
    s->prepare(s);
    s->out_len = 0;
    s->recompute = 0;
    s->skipped = 0;
    fault_arm(c, n, mode, persist);
    int rc = s->run(s, err, sizeof err);
    fault_stop();
    uint64_t fired = fault_fired();
    s->after(s, rc, what);
    if (getenv("FAULT_VERBOSE")) /* one line per run */
        printf("%s: fired %" PRIu64 ", rc %d%s%s%s %s\n", what, fired, rc,
               s->recompute ? ", recomputed" : "", s->skipped ? ", skipped" : "", err[0] ? ":" : "",
               err);
    t->runs++;
    t->unfired += !fired;
    if (rc == 0) {
        t->ok++;
        s->recomputed += s->recompute;
        /* a short read or write is no damage: it must not cost a stored entry */
        ck_assert_msg(!s->recompute || mode != FAULT_SHORT, "%s: recomputed", what);
        /* a file that cannot be read is skipped and listed (pack.h): allowed for a read
         * error, not for a failure of the process (memory, descriptors, threads) */
        if (s->skipped && c == FAULT_READ) {
            s->degraded++;
            return;
        }
        ck_assert_msg(!s->skipped, "%s: succeeded, skipping files", what);
        ck_assert_msg(s->out_len == ref_len && memcmp(s->out, ref, ref_len) == 0,
                      "%s: succeeded with other output (%zu bytes, expected %zu)", what, s->out_len,
                      ref_len);
        return;
    }
    t->failed++;
    ck_assert_msg(rc < 0, "%s: returned %d", what, rc);
    ck_assert_msg(fired, "%s: failed (%d %s) though no fault was injected", what, rc, err);
    ck_assert_msg(!s->messages || err[0], "%s: failed (%d %s) without a message", what, rc,
                  bfs_strerror(rc));
}

/*
 * Count the calls of an unfaulted run, then fail each one of each class in turn. expect
 * lists the classes that must have calls (the walk would prove nothing otherwise).
 */
static void walk(scenario *s, const fault_class *expect, int nexpect)
{
    s->out = malloc(OUT_CAP);
    ck_assert_ptr_nonnull(s->out);
    char err[2048] = "";
    s->prepare(s);
    fault_count_start();
    int rc = s->run(s, err, sizeof err);
    fault_stop();
    s->after(s, rc, "unfaulted run");
    ck_assert_msg(rc == 0, "%s: unfaulted run failed: %d %s", s->name, rc, err);
    ck_assert_uint_gt(s->out_len, 0);
    uint64_t counts[FAULT_NCLASSES];
    printf("%s: calls:", s->name);
    for (int c = 0; c < FAULT_NCLASSES; c++) {
        counts[c] = fault_count((fault_class)c);
        printf(" %s %" PRIu64, fault_class_name((fault_class)c), counts[c]);
    }
    printf("\n");
    for (int i = 0; i < nexpect; i++)
        ck_assert_msg(counts[expect[i]] > 0, "%s: no %s calls to fail", s->name,
                      fault_class_name(expect[i]));
    size_t ref_len = s->out_len;
    uint8_t *ref = malloc(ref_len);
    ck_assert_ptr_nonnull(ref);
    memcpy(ref, s->out, ref_len);
    s->ref = ref, s->ref_len = ref_len;

    tally all = {0};
    for (int c = 0; c < FAULT_NCLASSES; c++) {
        /* with worker threads a run's count varies a little: walk a few calls beyond */
        uint64_t last = counts[c] ? counts[c] + 2 : 0;
        for (int v = 0; v < 4; v++) { /* fail, fail persist, short, short persist */
            fault_mode mode = v >= 2 ? FAULT_SHORT : FAULT_FAIL;
            if (mode == FAULT_SHORT && c != FAULT_READ && c != FAULT_WRITE)
                continue;
            tally t = {0};
            for (uint64_t n = 1; n <= last; n++)
                one_run(s, ref, ref_len, (fault_class)c, n, mode, v % 2, &t);
            if (t.runs)
                printf("%s: %-6s %-7s %4" PRIu64 " runs: %4" PRIu64 " failed cleanly, %4" PRIu64
                       " ok, %3" PRIu64 " not reached\n",
                       s->name, fault_class_name((fault_class)c),
                       (const char *[]){"fail", "persist", "short", "shorts"}[v], t.runs, t.failed,
                       t.ok, t.unfired);
            all.runs += t.runs, all.failed += t.failed, all.ok += t.ok;
        }
    }
    printf("%s: %" PRIu64 " faulted runs, %" PRIu64 " clean failures, %" PRIu64
           " successes (%" PRIu64 " by recomputing, %" PRIu64 " skipping unreadable files)\n",
           s->name, all.runs, all.failed, all.ok, s->recomputed, s->degraded);
    ck_assert_uint_gt(all.failed, 0); /* the faults did reach the operation */
    s->ref = NULL;
    free(ref);
    free(s->out);
}

static void nothing(scenario *s)
{
    (void)s;
}

static void no_check(scenario *s, int rc, const char *what)
{
    (void)s, (void)rc, (void)what;
}

/* ---- one batch through the engine and its executor ----------------------------------- */

typedef struct batch_scenario {
    scenario s;
    const char *src;
    const char *store_root; /* NULL: no store */
    const char *opts;       /* NULL: BATCH_OPTS */
    uint64_t epoch;         /* of batch 1 */
} batch_scenario;

static const char *const BATCH_OPTS = "batch=4,size=24,bad_sample=fail";

static int opts(bfs_pipeline_opts *o, const char *text, char *err, size_t errlen)
{
    bfs_pipeline_defaults(o);
    int rc = bfs_pipeline_parse(o, text ? text : BATCH_OPTS, err, errlen);
    return rc ? rc : bfs_pipeline_finish(o, err, errlen);
}

/* Batch 1 of epoch b->epoch (4 samples; 2 worker threads) into s->out. */
static int run_batch(scenario *sc, char *err, size_t errlen)
{
    batch_scenario *b = (batch_scenario *)sc;
    bfs_pipeline_opts o;
    int rc = opts(&o, b->opts, err, errlen);
    if (rc)
        return rc;
    bfs_service *svc = NULL;
    bfs_exec *x;
    bfs_batch *bt = NULL;
    if (b->store_root)
        snprintf(o.cache_dir, sizeof o.cache_dir, "%s", b->store_root);
    /* the engine, the store (synced in full, so that FAULT_SYNC is reached; one that
     * cannot be opened is left out: the batch is computed) and 2 workers, no cache */
    bfs_service_cfg cfg = {.source = b->src,
                           .pipe = &o,
                           .role = BFS_SERVICE_COMPUTE,
                           .threads = 2,
                           .store_sync = BFS_STORE_SYNC_FULL,
                           .store_optional = 1};
    if ((rc = bfs_service_open(&cfg, &svc, NULL, err, errlen)) ||
        (rc = bfs_service_start(svc, err, errlen)))
        goto out;
    x = bfs_service_exec(svc);
    if ((rc = bfs_exec_get(x, b->epoch, 1, &bt, err, errlen)))
        goto out;
    bfs_exec_stats xs;
    bfs_exec_get_stats(x, &xs);
    sc->skipped = xs.stages.bad_samples > 0;
    sc->out_len = bfs_batch_size(bt);
    if (sc->out_len > OUT_CAP)
        rc = -EFBIG;
    else
        memcpy(sc->out, bfs_batch_data(bt), sc->out_len);
    bfs_batch_release(bt);
out:
    bfs_service_close(svc);
    return rc;
}

/* A batch that failed because the process ran out of descriptors is computed again on the
 * next read (the executor keeps a failed batch's error only for failures of the data). */
START_TEST(resource_failure_not_kept)
{
    bfs_pipeline_opts o;
    char err[512];
    ck_assert_msg(opts(&o, NULL, err, sizeof err) == 0, "%s", err);
    bfs_engine *e;
    bfs_exec *x, *ref;
    bfs_batch *bt, *rb;
    ck_assert_msg(bfs_engine_create(folder, &o, &e, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(bfs_exec_create(e, 2, 0, &x), 0);
    ck_assert_int_eq(bfs_exec_create(e, 1, 0, &ref), 0);
    fault_arm(FAULT_OPEN, 1, FAULT_FAIL, 1); /* every open fails: EMFILE */
    int rc = bfs_exec_get(x, 0, 1, &bt, err, sizeof err);
    fault_stop();
    ck_assert_msg(rc == -EMFILE, "faulted get: %d (%s)", rc, err);
    ck_assert_msg(bfs_exec_get(x, 0, 1, &bt, err, sizeof err) == 0, "retry: %s", err);
    ck_assert_msg(bfs_exec_get(ref, 0, 1, &rb, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(bfs_batch_size(bt), bfs_batch_size(rb));
    ck_assert_mem_eq(bfs_batch_data(bt), bfs_batch_data(rb), bfs_batch_size(rb));
    bfs_batch_release(bt);
    bfs_batch_release(rb);
    bfs_exec_destroy(x);
    bfs_exec_destroy(ref);
    bfs_engine_destroy(e);
}
END_TEST

static const fault_class batch_expect[] = {FAULT_ALLOC, FAULT_OPEN, FAULT_READ, FAULT_THREAD};

START_TEST(batch_from_bfs)
{
    batch_scenario b = {.s = SCENARIO("batch from .bfs", nothing, run_batch, no_check, 1),
                        .src = packed};
    walk(&b.s, batch_expect, 4);
}
END_TEST

START_TEST(batch_from_folder)
{
    batch_scenario b = {.s = SCENARIO("batch from folder", nothing, run_batch, no_check, 1),
                        .src = folder};
    walk(&b.s, batch_expect, 4);
}
END_TEST

/* tmp/tok.bfs: docs documents of 2..41 u16 tokens (a path in static memory) */
static const char *token_bfs(int docs)
{
    static char bin[4200], out[4200];
    snprintf(bin, sizeof bin, "%s/tok.bin", tmp);
    snprintf(out, sizeof out, "%s/tok.bfs", tmp);
    uint16_t *ids = malloc((size_t)docs * 42 * sizeof *ids);
    ck_assert_ptr_nonnull(ids);
    size_t n = 0;
    for (int d = 0; d < docs; d++) {
        for (int i = 0; i < d % 40 + 1; i++)
            ids[n++] = (uint16_t)(d * 7 + i);
        ids[n++] = 50256;
    }
    ck_assert_int_eq(tu_write_file(bin, ids, n * sizeof *ids), 0);
    free(ids);
    /* pages of 64 KiB: shuffle=pages has a page table to build per epoch */
    bfs_pack_opts po = {.tokens = 2, .doc_sep = 50256, .page_size = 65536};
    bfs_pack_report rep;
    char err[1024];
    ck_assert_msg(bfs_pack(bin, out, &po, &rep, NULL, err, sizeof err) == 0, "%s", err);
    bfs_pack_report_free(&rep);
    return out;
}

/* Token batches: the epoch's table (built in pieces, tokens.c), the mapping, the rows. */
static const fault_class token_expect[] = {FAULT_ALLOC, FAULT_OPEN, FAULT_MAP, FAULT_THREAD};

START_TEST(batch_tokens_concat)
{
    batch_scenario b = {.s = SCENARIO("tokens, pack=concat", nothing, run_batch, no_check, 1),
                        .src = token_bfs(300),
                        .opts = "seq_len=32,batch=4,bad_sample=fail"};
    walk(&b.s, token_expect, 4);
}
END_TEST

/* An epoch table of three pieces (tokens.c: 65,536 positions each) taken by two workers,
 * with shuffle=pages: each piece's look-up may build the epoch's page table, so a failure
 * can hit one piece while another is out. */
START_TEST(batch_tokens_pieces)
{
    batch_scenario b = {
        .s = SCENARIO("tokens, 3 pieces, shuffle=pages", nothing, run_batch, no_check, 1),
        .src = token_bfs(140000),
        .opts = "seq_len=32,batch=4,shuffle=pages,bad_sample=fail",
        .epoch = 3}; /* an epoch whose page table nothing built before the pieces */
    walk(&b.s, token_expect, 4);
}
END_TEST

START_TEST(batch_tokens_bucket)
{
    batch_scenario b = {.s = SCENARIO("tokens, pack=bucket", nothing, run_batch, no_check, 1),
                        .src = token_bfs(300),
                        .opts = "pack=bucket,buckets=8:16:48,batch=4,bad_sample=fail"};
    walk(&b.s, token_expect, 4);
}
END_TEST

/* bad_sample=substitute: a sample that cannot be read is replaced (docs/engine.md), but
 * a failure of the process (memory, descriptors, threads) is not the sample's: it must
 * fail the batch, not change its bytes. */
START_TEST(batch_substitute)
{
    batch_scenario b = {
        .s = SCENARIO("batch, bad_sample=substitute", nothing, run_batch, no_check, 1),
        .src = folder,
        .opts = "batch=4,size=24,bad_sample=substitute"};
    walk(&b.s, batch_expect, 4);
}
END_TEST

/* A training recipe (docs/augment.md): the per-worker image of the recipe ops, erasing,
 * and the batch-level Mixup/CutMix with its targets: a fault fails the batch or leaves
 * its bytes as the unfaulted run's. */
START_TEST(batch_recipe)
{
    batch_scenario b = {
        .s = SCENARIO("batch with a training recipe", nothing, run_batch, no_check, 1),
        .src = packed,
        .opts = "batch=4,size=24,bad_sample=fail,randaugment=2:9,color_jitter=0.4:0.4:0.4:0.1,"
                "erasing=0.5,dtype=f16,mixup=0.8,cutmix=1,label_smoothing=0.1"};
    walk(&b.s, batch_expect, 4);
}
END_TEST

/* The same batch through an executor that shares a store: a fresh store each run (the
 * batch is computed and published), checked afterwards by a second, unfaulted executor
 * on the same store: whatever the fault left there must serve the same bytes. */
static char store_root[4200];

static void fresh_store(scenario *s)
{
    (void)s;
    tu_rmtree(store_root);
}

static void no_leftovers(const char *dir, const char *what);

static void store_serves_same(scenario *sc, int rc, const char *what)
{
    (void)rc;
    if (!sc->ref)
        return; /* the reference run itself */
    char v2[4300];
    snprintf(v2, sizeof v2, "%s/v2", store_root);
    no_leftovers(v2, what);
    size_t keep_len = sc->out_len;
    uint8_t *keep = malloc(keep_len + 1);
    ck_assert_ptr_nonnull(keep);
    memcpy(keep, sc->out, keep_len);
    char err[2048] = "";
    sc->out_len = 0;
    int rc2 = run_batch(sc, err, sizeof err);
    ck_assert_msg(rc2 == 0, "%s: then unfaulted: %d %s", what, rc2, err);
    ck_assert_msg(sc->out_len == sc->ref_len && memcmp(sc->out, sc->ref, sc->ref_len) == 0,
                  "%s: then the store serves other bytes", what);
    memcpy(sc->out, keep, keep_len);
    sc->out_len = keep_len;
    free(keep);
}

START_TEST(batch_through_store)
{
    snprintf(store_root, sizeof store_root, "%s/store", tmp);
    batch_scenario b = {
        .s = SCENARIO("batch via store", fresh_store, run_batch, store_serves_same, 1),
        .src = packed,
        .store_root = store_root};
    static const fault_class expect[] = {FAULT_ALLOC, FAULT_OPEN, FAULT_READ,
                                         FAULT_WRITE, FAULT_SYNC, FAULT_NAME};
    walk(&b.s, expect, 6);
}
END_TEST

/* ---- a pack of an ImageFolder (and of a .bfs) into a .bfs ---------------------------- */

typedef struct pack_scenario {
    scenario s;
    const char *src;
    char dir[4200], out[4300];
} pack_scenario;

static int run_pack(scenario *sc, char *err, size_t errlen)
{
    pack_scenario *p = (pack_scenario *)sc;
    bfs_pack_opts po = {.jobs = 2, .fsync = 1};
    bfs_pack_report rep;
    int rc = bfs_pack(p->src, p->out, &po, &rep, NULL, err, errlen);
    sc->skipped = rep.nskipped > 0;
    bfs_pack_report_free(&rep);
    return rc;
}

/* Collect the packed file (rc 0); on failure the directory must be empty: no output, no
 * temporary. */
static void pack_after(scenario *sc, int rc, const char *what)
{
    pack_scenario *p = (pack_scenario *)sc;
    if (rc == 0) {
        uint8_t *data;
        size_t len;
        ck_assert_int_eq(tu_read_file(p->out, &data, &len), 0);
        ck_assert_uint_le(len, OUT_CAP);
        memcpy(sc->out, data, len);
        sc->out_len = len;
        free(data);
        ck_assert_int_eq(unlink(p->out), 0);
    }
    DIR *d = opendir(p->dir);
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    while ((e = readdir(d)))
        ck_assert_msg(!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."), "%s: left %s/%s behind",
                      what, p->dir, e->d_name);
    closedir(d);
}

static void pack_walk(const char *name, const char *src)
{
    pack_scenario p = {.s = SCENARIO(name, nothing, run_pack, pack_after, 1), .src = src};
    snprintf(p.dir, sizeof p.dir, "%s/packdir", tmp);
    snprintf(p.out, sizeof p.out, "%s/out.bfs", p.dir);
    ck_assert_int_eq(mkdir(p.dir, 0700), 0);
    static const fault_class expect[] = {FAULT_ALLOC, FAULT_OPEN, FAULT_READ,
                                         FAULT_WRITE, FAULT_SYNC, FAULT_NAME};
    walk(&p.s, expect, 6);
}

START_TEST(pack_folder)
{
    pack_walk("pack folder", folder);
}
END_TEST

START_TEST(pack_bfs)
{
    pack_walk("repack .bfs", packed);
}
END_TEST

/* The fixture's images, in ImageFolder order, to f(path, index, label). */
static void each_image(void (*f)(void *ctx, const char *path, int i, int label), void *ctx)
{
    struct dirent **cls, **files;
    int nc = scandir(folder, &cls, NULL, alphasort), i = 0;
    ck_assert_int_gt(nc, 0);
    for (int c = 0, label = 0; c < nc; c++) {
        char dir[4300];
        snprintf(dir, sizeof dir, "%s/%s", folder, cls[c]->d_name);
        if (cls[c]->d_name[0] != '.') {
            int nf = scandir(dir, &files, NULL, alphasort);
            ck_assert_int_gt(nf, 0);
            for (int k = 0; k < nf; k++) {
                char path[8700];
                snprintf(path, sizeof path, "%s/%s", dir, files[k]->d_name);
                if (files[k]->d_name[0] != '.')
                    f(ctx, path, i++, label);
                free(files[k]);
            }
            free(files);
            label++;
        }
        free(cls[c]);
    }
    free(cls);
}

static void manifest_line(void *ctx, const char *path, int i, int label)
{
    fprintf(ctx,
            "{\"image\": \"%s\", \"caption\": \"caf\\u00e9 %d\", \"boxes\": [[1, 2, 3, 4]], "
            "\"classes\": [%d], \"label\": %d}\n",
            path, i, i, label);
}

/* One ustar member (a header of the fields WebDataset writers fill, the data, padding). */
static void tar_add(FILE *f, const char *name, const void *data, size_t n)
{
    char h[512] = {0};
    snprintf(h, 100, "%s", name);
    snprintf(h + 100, 8, "%07o", 0644);
    snprintf(h + 108, 8, "%07o", 0);
    snprintf(h + 116, 8, "%07o", 0);
    snprintf(h + 124, 12, "%011o", (unsigned)n);
    snprintf(h + 136, 12, "%011o", 0);
    h[156] = '0';
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int k = 0; k < 512; k++)
        sum += (uint8_t)h[k];
    snprintf(h + 148, 8, "%06o", sum);
    h[155] = ' ';
    static const char zero[512];
    ck_assert_int_eq(fwrite(h, 1, 512, f), 512);
    ck_assert_int_eq(fwrite(data, 1, n, f), n);
    ck_assert_int_eq(fwrite(zero, 1, (512 - n % 512) % 512, f), (512 - n % 512) % 512);
}

static void tar_sample(void *ctx, const char *path, int i, int label)
{
    uint8_t *jpg;
    size_t len;
    char name[64], text[128];
    ck_assert_int_eq(tu_read_file(path, &jpg, &len), 0);
    snprintf(name, sizeof name, "s%03d.jpg", i);
    tar_add(ctx, name, jpg, len);
    free(jpg);
    snprintf(name, sizeof name, "s%03d.txt", i);
    snprintf(text, sizeof text, "caption \xc3\xa9 %d", i);
    tar_add(ctx, name, text, strlen(text));
    snprintf(name, sizeof name, "s%03d.json", i);
    snprintf(text, sizeof text, "{\"boxes\": [[1, 2, 3, 4], [5, 6, 7, 8]], \"classes\": [%d, 1]}",
             i);
    tar_add(ctx, name, text, strlen(text));
    snprintf(name, sizeof name, "s%03d.cls", i);
    snprintf(text, sizeof text, "%d", label);
    tar_add(ctx, name, text, strlen(text));
}

/* Samples of fields (.bfs version 3): a JSONL manifest of the fixture's images, and a
 * WebDataset shard of them with captions, boxes and classes. */
START_TEST(pack_fields_manifest)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/m.jsonl", tmp);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    each_image(manifest_line, f);
    ck_assert_int_eq(fclose(f), 0);
    pack_walk("pack a manifest's fields", path);
}
END_TEST

START_TEST(pack_fields_wds)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/s.tar", tmp);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    each_image(tar_sample, f);
    static const char end[1024];
    ck_assert_int_eq(fwrite(end, 1, sizeof end, f), sizeof end);
    ck_assert_int_eq(fclose(f), 0);
    pack_walk("pack a WebDataset shard's fields", path);
}
END_TEST

/* ---- a cache_dir store: save and load ------------------------------------------------ */

typedef struct store_scenario {
    scenario s;
    bfs_store_opts o;
    char root[4200];
    uint8_t payload[50000];
} store_scenario;

static const bfs_store_key KEY = {.fingerprint = 0x0123456789abcdefull, .epoch = 3, .batch = 7};

/* Open t's store, claim KEY and hand the claim and the claim's result to use (which must
 * close a claim it got); close the store. use's result, or the open's error. */
static int with_claim(store_scenario *t, int (*use)(store_scenario *t, bfs_claim *c, int rc))
{
    bfs_store *st;
    int rc = bfs_store_open(t->root, &t->o, &st, NULL, 0);
    if (rc)
        return rc;
    bfs_claim c;
    rc = use(t, &c, bfs_store_claim(st, KEY, &c));
    bfs_store_close(st);
    return rc;
}

/* A claim must be MINE: publish the payload. */
static int save_claimed(store_scenario *t, bfs_claim *c, int rc)
{
    if (!rc && c->state != BFS_STORE_MINE) {
        bfs_store_claim_close(c);
        rc = -EEXIST;
    }
    if (!rc)
        rc = bfs_store_publish(c, t->payload, sizeof t->payload);
    return rc;
}

/* A HIT's bytes go to out; a miss "recomputes" (out = the payload). */
static int load_claimed(store_scenario *t, bfs_claim *c, int rc)
{
    if (!rc && c->state == BFS_STORE_HIT) {
        memcpy(t->s.out, c->data, c->size);
        t->s.out_len = c->size;
    } else if (!rc && c->state == BFS_STORE_MINE) {
        memcpy(t->s.out, t->payload, sizeof t->payload);
        t->s.out_len = sizeof t->payload;
        t->s.recompute = 1;
    } else if (!rc) {
        rc = -EBUSY; /* nobody else claims it */
    }
    bfs_store_claim_close(c);
    return rc;
}

/* Open, claim and publish the payload (the key must be free). */
static int save(store_scenario *t)
{
    return with_claim(t, save_claimed);
}

/* Open and claim: a HIT's bytes go to out; a miss "recomputes" (out = the payload). */
static int load(store_scenario *t)
{
    return with_claim(t, load_claimed);
}

static int run_save(scenario *sc, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    int rc = save((store_scenario *)sc);
    if (!rc) {
        /* the output of a save is what a later load serves */
        memcpy(sc->out, ((store_scenario *)sc)->payload, sizeof((store_scenario *)sc)->payload);
        sc->out_len = sizeof((store_scenario *)sc)->payload;
    }
    return rc;
}

static int run_load(scenario *sc, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    return load((store_scenario *)sc);
}

static void store_fresh(scenario *sc)
{
    tu_rmtree(((store_scenario *)sc)->root);
}

static void store_saved(scenario *sc)
{
    store_scenario *t = (store_scenario *)sc;
    tu_rmtree(t->root);
    ck_assert_int_eq(save(t), 0);
}

/* Files a closed store may hold besides entries (*.st) and directories. */
static int store_own_file(const char *name)
{
    return !strcmp(name, ".usage") || !strcmp(name, ".tmp.guard") || !strcmp(name, ".evict.lock");
}

/* Fail on any file under dir (relative rel) but entries and the store's own files: a lock
 * or temporary file left behind by a claim the run finished. */
static void no_leftovers(const char *dir, const char *what)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char p[8192];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        ck_assert_int_eq(lstat(p, &st), 0);
        size_t n = strlen(e->d_name);
        if (S_ISDIR(st.st_mode))
            no_leftovers(p, what);
        else
            ck_assert_msg(store_own_file(e->d_name) || (n > 3 && !strcmp(e->d_name + n - 3, ".st")),
                          "%s: left %s behind", what, p);
    }
    closedir(d);
}

/* After a save, faulted or not: nothing left but entries, and an unfaulted load serves
 * the saved bytes (a save that returned 0 must have stored them) or misses (a failed
 * save), never other bytes. After a load: nothing left behind. */
static void store_after(scenario *sc, int rc, const char *what)
{
    store_scenario *t = (store_scenario *)sc;
    char v2[4300];
    snprintf(v2, sizeof v2, "%s/v2", t->root);
    no_leftovers(v2, what);
    if (sc->run != run_save)
        return;
    size_t keep_len = sc->out_len;
    sc->out_len = 0;
    sc->recompute = 0;
    int lrc = load(t);
    ck_assert_msg(lrc == 0, "%s: then unfaulted load: %s", what, bfs_strerror(lrc));
    ck_assert_msg(sc->out_len == sizeof t->payload &&
                      !memcmp(sc->out, t->payload, sizeof t->payload),
                  "%s: then the store serves other bytes", what);
    ck_assert_msg(rc != 0 || !sc->recompute, "%s: succeeded, but stored nothing", what);
    sc->recompute = 0;
    sc->out_len = keep_len; /* out holds the payload either way */
}

static void store_walk(const char *name, int save_not_load, int fallbacks)
{
    store_scenario *t = calloc(1, sizeof *t);
    ck_assert_ptr_nonnull(t);
    scenario s = SCENARIO(name, save_not_load ? store_fresh : store_saved,
                          save_not_load ? run_save : run_load, store_after, 0);
    t->s = s;
    t->o.sync = BFS_STORE_SYNC_FULL;
    t->o.named_temps = fallbacks;
    t->o.trailer_in_file = fallbacks;
    snprintf(t->root, sizeof t->root, "%s/store", tmp);
    uint64_t seed = 99;
    for (size_t i = 0; i < sizeof t->payload; i++)
        t->payload[i] = (uint8_t)tu_rand(&seed);
    static const fault_class save_expect[] = {FAULT_ALLOC, FAULT_OPEN, FAULT_WRITE,
                                              FAULT_SYNC,  FAULT_DIR,  FAULT_MAP};
    static const fault_class load_expect[] = {FAULT_ALLOC, FAULT_OPEN, FAULT_DIR, FAULT_MAP};
    if (save_not_load)
        walk(&t->s, save_expect, 6);
    else
        walk(&t->s, load_expect, 4);
    free(t);
}

/* The store walks, one a loop index: save and load, each plain and with the fallbacks. */
static const struct {
    const char *name;
    int save_not_load, fallbacks;
} store_walks[] = {
    {"store save", 1, 0},
    {"store save (named temps, trailer in file)", 1, 1},
    {"store load", 0, 0},
    {"store load (trailer in file)", 0, 1},
};

START_TEST(store_save_and_load)
{
    store_walk(store_walks[_i].name, store_walks[_i].save_not_load, store_walks[_i].fallbacks);
}
END_TEST

/* ---- PNG and WebP decoding ------------------------------------------------------------ */

/* Every allocation of a PNG decode (libspng's, through image.c's allocator, and image.c's
 * own row buffer) failed in turn, through the engine's decoder: -ENOMEM, never a verdict
 * that the file is corrupt, and the decoder works afterwards. A palette PNG, so the rows
 * are converted through the buffer; WebP's allocations are libwebp's own, out of reach. */
START_TEST(decode_png_out_of_memory)
{
    enum { PW = 61, PH = 33 };
    static uint8_t rows[PW * PH], want[PW * PH * 3], got[PW * PH * 3];
    static const uint8_t plte[6] = {1, 2, 3, 200, 100, 50};
    for (int i = 0; i < PW * PH; i++) {
        rows[i] = (uint8_t)(i * 7 % 3); /* index 2: past the palette, black */
        for (int c = 0; c < 3; c++)
            want[i * 3 + c] = rows[i] < 2 ? plte[rows[i] * 3 + c] : 0;
    }
    uint8_t *png;
    size_t len;
    ck_assert_int_eq(tu_make_png(rows, PW, PH, 3, 8, plte, 2, NULL, 0, &png, &len), 0);
    bfs_decoder *d;
    ck_assert_int_eq(bfs_decoder_create(&d), 0);
    bfs_image_info info;
    ck_assert_int_eq(bfs_decoder_probe(png, len, &info), 0);
    uint64_t n = 1, failed = 0;
    for (;; n++) {
        memset(got, 0, sizeof got);
        fault_arm(FAULT_ALLOC, n, FAULT_FAIL, 0);
        int rc = bfs_decoder_decode_image(d, png, len, &info, 1, got, sizeof got);
        fault_stop();
        if (!fault_fired()) {
            ck_assert_int_eq(rc, 0);
            break;
        }
        ck_assert_msg(rc == -ENOMEM, "allocation %" PRIu64 " failed: %d", n, rc);
        failed++;
    }
    ck_assert_int_eq(memcmp(got, want, sizeof got), 0);
    ck_assert_uint_ge(failed, 2); /* libspng's context and the row buffer at least */
    bfs_pixels px;                /* the decoder's own buffer, grown once: its failure too */
    fault_arm(FAULT_ALLOC, 1, FAULT_FAIL, 1);
    int rc = bfs_decoder_decode(d, png, len, &info, 1, 0, 0, PW, PH, &px);
    fault_stop();
    ck_assert_int_eq(rc, -ENOMEM);
    ck_assert_int_eq(bfs_decoder_decode(d, png, len, &info, 1, 0, 0, PW, PH, &px), 0);
    ck_assert_int_eq(memcmp(px.rgb, want, sizeof want), 0);
    bfs_decoder_destroy(d);
    free(png);
}
END_TEST

/* ---- a worker's value into Redis -------------------------------------------------------- */

/* bfs_remote_put sends the batch from where it lies (sendmsg, no copy): every send fails in
 * turn (once, then from there on) and every send is short. A put that returns 0 stored the
 * exact bytes; one that fails says why; the connection recovers for the next put. */
START_TEST(remote_put_sends)
{
    tu_redis srv = {0};
    ck_assert_msg(tu_redis_start(&srv, 0, NULL) == 0, "redis-server did not start");
    bfs_remote_url u = {.port = srv.port};
    snprintf(u.host, sizeof u.host, "127.0.0.1");
    bfs_remote *r;
    char err[512];
    ck_assert_msg(bfs_remote_connect(&u, 0x5e11d, 2000, &r, err, sizeof err) == 0, "%s", err);
    const uint64_t size = 3u << 20;
    uint8_t *batch = malloc(size), *got = malloc(size);
    ck_assert(batch && got);
    for (uint64_t i = 0; i < size; i++)
        batch[i] = (uint8_t)(i * 2654435761u >> 13);
    fault_count_start();
    ck_assert_int_eq(bfs_remote_put(r, 0, 0, batch, size, 60000), 0);
    fault_stop();
    uint64_t sends = fault_count(FAULT_WRITE);
    ck_assert_uint_ge(sends, 1);
    uint64_t k = 1;
    for (int persist = 0; persist <= 1; persist++)
        for (uint64_t n = 1; n <= sends + 1; n++, k++) {
            fault_arm(FAULT_WRITE, n, FAULT_FAIL, persist);
            int rc = bfs_remote_put(r, 0, k, batch, size, 60000);
            fault_stop();
            if (rc == 0) {
                ck_assert_int_eq(bfs_remote_fetch(r, 0, k, got, size), 1);
                ck_assert(memcmp(got, batch, size) == 0);
            } else {
                ck_assert_msg(persist && fault_fired(), "send %" PRIu64 ": %d %s", n, rc,
                              bfs_remote_error(r));
                ck_assert_int_eq(rc, BFS_E_REMOTE);
                ck_assert_msg(strstr(bfs_remote_error(r), "SET to 127.0.0.1"), "%s",
                              bfs_remote_error(r));
                ck_assert_int_eq(bfs_remote_fetch(r, 0, k, got, size), 0); /* nothing kept */
            }
            /* the next put finds a working connection */
            ck_assert_int_eq(bfs_remote_put(r, 1, k, batch, size, 60000), 0);
            ck_assert_int_eq(bfs_remote_fetch(r, 1, k, got, size), 1);
            ck_assert(memcmp(got, batch, size) == 0);
        }
    /* every send moves half of what it is given: the value arrives whole */
    fault_arm(FAULT_WRITE, 1, FAULT_SHORT, 1);
    ck_assert_int_eq(bfs_remote_put(r, 2, 0, batch, size, 60000), 0);
    fault_stop();
    ck_assert_uint_ge(fault_fired(), 20);
    ck_assert_int_eq(bfs_remote_fetch(r, 2, 0, got, size), 1);
    ck_assert(memcmp(got, batch, size) == 0);
    bfs_remote_close(r);
    tu_redis_free(&srv);
    free(batch);
    free(got);
}
END_TEST

/* ---- the facility itself ------------------------------------------------------------- */

/* The shims count and fail what they say, from any thread. */
START_TEST(shims_count_and_fail)
{
    fault_count_start();
    void *volatile p = malloc(16); /* volatile: gcc may drop an unused malloc/free pair */
    char *volatile q = strdup(folder);
    fault_stop();
    ck_assert_uint_eq(fault_count(FAULT_ALLOC), 2);
    free(p);
    free(q);
    fault_arm(FAULT_ALLOC, 2, FAULT_FAIL, 0);
    void *a = malloc(8), *b = malloc(8), *c = malloc(8);
    fault_stop();
    ck_assert(a && !b && c);
    ck_assert_uint_eq(fault_fired(), 1);
    free(a);
    free(c);
    char path[4300];
    snprintf(path, sizeof path, "%s/f", tmp);
    ck_assert_int_eq(tu_write_file(path, "0123456789", 10), 0);
    int fd = open(path, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    char buf[10];
    fault_arm(FAULT_READ, 1, FAULT_SHORT, 1);
    ssize_t n1 = pread(fd, buf, 10, 0), n2 = pread(fd, buf, 1, 0);
    fault_arm(FAULT_READ, 1, FAULT_FAIL, 0);
    ssize_t n3 = pread(fd, buf, 10, 0);
    int e3 = errno;
    fault_arm(FAULT_SYNC, 1, FAULT_FAIL, 0);
    int s1 = fsync(fd);
    fault_stop();
    close(fd);
    ck_assert_int_eq(n1, 5);
    ck_assert_int_eq(n2, 1); /* never shortened to 0 (end of file) */
    ck_assert_int_eq(n3, -1);
    ck_assert_int_eq(e3, EIO);
    ck_assert_int_eq(s1, -1);
}
END_TEST

static Suite *fault_suite(void)
{
    Suite *s = suite_create("fault");
    TCase *tc = tcase_create("walk");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, shims_count_and_fail);
    tcase_add_test(tc, decode_png_out_of_memory);
    tcase_add_test(tc, remote_put_sends);
    tcase_add_test(tc, batch_from_bfs);
    tcase_add_test(tc, resource_failure_not_kept);
    tcase_add_test(tc, batch_from_folder);
    tcase_add_test(tc, batch_substitute);
    tcase_add_test(tc, batch_recipe);
    tcase_add_test(tc, batch_tokens_concat);
    tcase_add_test(tc, batch_tokens_bucket);
    tcase_add_test(tc, batch_tokens_pieces);
    tcase_add_test(tc, batch_through_store);
    tcase_add_test(tc, pack_folder);
    tcase_add_test(tc, pack_bfs);
    tcase_add_test(tc, pack_fields_manifest);
    tcase_add_test(tc, pack_fields_wds);
    tcase_add_loop_test(tc, store_save_and_load, 0,
                        (int)(sizeof store_walks / sizeof store_walks[0]));
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(fault_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
