/*
 * batchfs — the daemon's entry point.
 *
 *   batchfs SOURCE MOUNTPOINT [-o OPTIONS] [-f] [-d] [-s]     mount (not yet: issue "The mount")
 *   batchfs --bench SOURCE [-o OPTIONS] [--batches N] [--epoch E] [--json]
 *
 * Exit status: 0 success, 1 failure, 2 usage error.
 */
#include "engine/bench.h"
#include "engine/err.h"
#include "engine/pipeline.h"
#include "engine/version.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: batchfs SOURCE MOUNTPOINT [-o OPTIONS] [-f] [-d] [-s]\n"
            "       batchfs --bench SOURCE [-o OPTIONS] [--batches N] [--epoch E] [--json]\n"
            "\n"
            "SOURCE is a .bfs file (see mkbatchfs) or an ImageFolder directory.\n"
            "--bench runs the pipeline in-process, without mounting, and prints images/s,\n"
            "time per stage and, on the same files, libjpeg-turbo's single-core full-decode\n"
            "rate and the ratio per core.\n"
            "  --batches N   batches of the epoch to read (default 20)\n"
            "  --epoch E     epoch to read (default 0)\n"
            "  --reference N images decoded for the reference rate (default 400)\n"
            "  --json        print one JSON object\n"
            "\n"
            "pipeline options (-o key=value,...; -o may repeat):\n%s",
            bfs_pipeline_help());
}

static int parse_u64(const char *s, const char *what, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-') {
        fprintf(stderr, "batchfs: %s: '%s' is not a non-negative integer\n", what, s);
        return -1;
    }
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    enum { OPT_BENCH = 256, OPT_BATCHES, OPT_EPOCH, OPT_JSON, OPT_REFERENCE };
    static const struct option longopts[] = {
        {"bench", no_argument, NULL, OPT_BENCH},
        {"batches", required_argument, NULL, OPT_BATCHES},
        {"epoch", required_argument, NULL, OPT_EPOCH},
        {"reference", required_argument, NULL, OPT_REFERENCE},
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    bfs_pipeline_opts o;
    bfs_pipeline_defaults(&o);
    bfs_bench_opts b = {0};
    int bench = 0, c;
    char err[1024];
    uint64_t v;
    while ((c = getopt_long(argc, argv, "o:fdshV", longopts, NULL)) != -1) {
        switch (c) {
        case 'o':
            if (bfs_pipeline_parse(&o, optarg, err, sizeof err)) {
                fprintf(stderr, "batchfs: -o %s\n", err);
                return 2;
            }
            break;
        case 'f':
        case 'd':
        case 's':
            break; /* mount flags: accepted for the mount mode */
        case OPT_BENCH:
            bench = 1;
            break;
        case OPT_BATCHES:
            if (parse_u64(optarg, "--batches", &b.batches))
                return 2;
            break;
        case OPT_EPOCH:
            if (parse_u64(optarg, "--epoch", &b.epoch))
                return 2;
            break;
        case OPT_REFERENCE:
            if (parse_u64(optarg, "--reference", &v) || v > 1000000)
                return 2;
            b.reference = (int)v;
            break;
        case OPT_JSON:
            b.json = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("batchfs %s\n", BATCHFS_VERSION);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (bfs_pipeline_finish(&o, err, sizeof err)) {
        fprintf(stderr, "batchfs: %s\n", err);
        return 2;
    }
    int nargs = argc - optind;
    if (bench) {
        if (nargs != 1) {
            fprintf(stderr, "batchfs: --bench takes one SOURCE\n\n");
            usage(stderr);
            return 2;
        }
        if (b.epoch >= o.epochs) {
            fprintf(stderr, "batchfs: --epoch %llu: the pipeline has epochs 0..%u\n",
                    (unsigned long long)b.epoch, o.epochs - 1);
            return 2;
        }
        return bfs_bench_run(argv[optind], &o, &b, stdout) ? 1 : 0;
    }
    if (nargs != 2) {
        usage(stderr);
        return 2;
    }
    fprintf(stderr, "batchfs: mounting is not implemented yet; use --bench to run the "
                    "pipeline in-process\n");
    return 1;
}
