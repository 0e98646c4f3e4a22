/*
 * gen_imagefolder — write a small synthetic ImageFolder for tests and `make demo`.
 *
 *   gen_imagefolder DIR [CLASSES [PER_CLASS [MIN_SIDE [MAX_SIDE [SEED]]]]]
 *
 * Deterministic for a seed. Every 7th image is progressive, every 11th grayscale, every
 * 13th 4:4:4 (see tests/testutil.c), so packs exercise every header flag.
 */
#include "tests/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int arg(int argc, char **argv, int i, int def)
{
    return argc > i ? atoi(argv[i]) : def;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 7 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fprintf(stderr, "usage: gen_imagefolder DIR [CLASSES [PER_CLASS [MIN_SIDE [MAX_SIDE "
                        "[SEED]]]]]\n");
        return 2;
    }
    int classes = arg(argc, argv, 2, 4), per = arg(argc, argv, 3, 50);
    int lo = arg(argc, argv, 4, 160), hi = arg(argc, argv, 5, 400);
    if (classes < 1 || per < 1 || lo < 1 || hi < lo || hi > 8192) {
        fprintf(stderr, "gen_imagefolder: bad sizes\n");
        return 2;
    }
    int rc = tu_make_imagefolder(argv[1], classes, per, lo, hi, (uint64_t)arg(argc, argv, 6, 1));
    if (rc) {
        fprintf(stderr, "gen_imagefolder: %s: %s\n", argv[1], strerror(-rc));
        return 1;
    }
    return 0;
}
