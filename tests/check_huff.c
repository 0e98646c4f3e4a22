/*
 * check_huff.c — engine/huff.c's lookup tables, built from random valid Huffman tables
 * (DC and AC: counts within the Kraft inequality, as jpeg_make_d_derived_tbl checks them,
 * symbols in random order), are those of the straightforward builder below, entry for
 * entry: the look table, the AC pair table, the canonical search's maxcode and valoff.
 * huff.c builds its tables in runs of equal entries; this keeps the builder it replaced,
 * one entry() per index, as the reference. (That the tables decode what libjpeg-turbo
 * decodes is check_restart's.)
 *
 * The tables are huff.c's own (static, in an opaque bfs_huff): this file includes
 * engine/huff.c itself rather than give the library a hook for tests. It then defines
 * bfs_huff_*, so the linker takes no huff.o from libbatchfs.a.
 */
#include "engine/huff.c"

#include <check.h>

/* ---- the reference: huff.c's builder before the runs -------------------------------- */

/* (entry(), a symbol's entry, is huff.c's own: the runs changed which indices get it, not
 * what it is; that it decodes what libjpeg-turbo decodes is check_restart's) */

static void ref_fill_table(uint32_t *tab, int look, const JHUFF_TBL *src, int dc)
{
    for (int i = 0; i < 1 << look; i++)
        tab[i] = E_LONG;
    int32_t code = 0;
    int k = 0;
    for (int l = 1; l <= look; l++) {
        for (int i = 0; i < src->bits[l]; i++, k++, code++) {
            int shift = look - l, base = (int)code << shift;
            for (int j = 0; j < 1 << shift; j++)
                tab[base + j] = entry(dc, src->huffval[k], l, (uint32_t)j, shift);
        }
        code <<= 1;
    }
}

static void ref_build_pair(uint64_t *pair, const JHUFF_TBL *src)
{
    static uint32_t one[NLOOK2];
    ref_fill_table(one, LOOK2, src, 0);
    for (int i = 0; i < NLOOK2; i++) {
        uint32_t e = one[i];
        uint64_t p = e | (uint64_t)E_DROP(e) << 40 | (uint64_t)(uint16_t)E_VALUE(e) << 48;
        if (!(e & E_SLOW) && E_RUN(e) != RUN_EOB) {
            unsigned d = E_DROP(e);
            uint32_t e2 = one[((unsigned)i << d) & (NLOOK2 - 1)];
            if (!(e2 & E_SLOW) && d + E_DROP(e2) <= LOOK2)
                p = (e & ~255u) | (d + E_DROP(e2)) | (uint64_t)(E_RUN(e2) + 1) << 32 |
                    (uint64_t)d << 40 | (uint64_t)(uint16_t)E_VALUE(e2) << 48;
        }
        pair[i] = p;
    }
}

static void ref_build(htab *t, const JHUFF_TBL *src, int dc)
{
    ref_fill_table(t->look, LOOK, src, dc);
    int32_t code = 0;
    int k = 0;
    t->maxcode[0] = -1;
    t->valoff[0] = 0;
    for (int l = 1; l <= 16; l++) {
        int n = src->bits[l];
        t->valoff[l] = k - code;
        t->maxcode[l] = n ? code + n - 1 : -1;
        k += n, code += n;
        code <<= 1;
    }
    if (!dc)
        ref_build_pair(t->pair, src);
}

/* ---- random valid tables ------------------------------------------------------------- */

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static int below(uint64_t *s, int n)
{
    return (int)(rnd(s) % (uint64_t)n);
}

/* A table libjpeg takes: bits[l] at most the codes of length l left unused (free), the
 * Kraft inequality as jpeg_make_d_derived_tbl checks it (a code of all ones included);
 * at most 16 symbols for a DC table (sizes 0..15), 256 for an AC one, in random order.
 * The counts per length come uniform, small, or all that is left, by turns, so tables
 * come complete and not, with short codes and long, and empty. */
static void random_table(JHUFF_TBL *t, int dc, uint64_t *s)
{
    memset(t, 0, sizeof *t);
    int most = dc ? 16 : 256, want = below(s, most + 1), n = 0, mode = below(s, 3);
    long free = 2; /* unused codes of length l */
    for (int l = 1; l <= 16; l++) {
        int cap = (int)(free < want - n ? free : want - n);
        int c = 0;
        if (cap > 0)
            c = mode == 0 ? below(s, cap + 1) : mode == 1 ? below(s, cap / 4 + 2) : cap;
        if (c > cap)
            c = cap;
        t->bits[l] = (UINT8)c;
        n += c;
        free = (free - c) * 2;
        if (free > 1 << 17)
            free = 1 << 17;
    }
    uint8_t sym[256];
    for (int i = 0; i < most; i++)
        sym[i] = (uint8_t)i;
    for (int i = most - 1; i > 0; i--) { /* Fisher-Yates */
        int j = below(s, i + 1);
        uint8_t x = sym[i];
        sym[i] = sym[j], sym[j] = x;
    }
    memcpy(t->huffval, sym, (size_t)n);
}

/* (a test per entry would be a mark_point of libcheck's per entry: a write, in a fork) */
static void same_tables(const htab *got, const htab *want, int dc, int round)
{
    for (int i = 0; i < NLOOK; i++)
        if (got->look[i] != want->look[i])
            ck_abort_msg("round %d %s look[%d]: %08x, want %08x", round, dc ? "DC" : "AC", i,
                         got->look[i], want->look[i]);
    ck_assert(memcmp(got->maxcode, want->maxcode, sizeof got->maxcode) == 0);
    ck_assert(memcmp(got->valoff, want->valoff, sizeof got->valoff) == 0);
    if (dc)
        return;
    for (int i = 0; i < NLOOK2; i++)
        if (got->pair[i] != want->pair[i])
            ck_abort_msg("round %d AC pair[%d]: %016llx, want %016llx", round, i,
                         (unsigned long long)got->pair[i], (unsigned long long)want->pair[i]);
}

/* Each round a new random table into the same htab (the rebuild over the last one's
 * entries, as install does for the next photo), DC and AC by turns. */
START_TEST(tables_equal_reference)
{
    static htab got, want;
    static uint64_t got_pair[NLOOK2], want_pair[NLOOK2];
    got.pair = got_pair, want.pair = want_pair;
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    int complete = 0, empty = 0, long_codes = 0;
    for (int round = 0; round < 20000; round++) {
        int dc = round & 1;
        JHUFF_TBL src;
        random_table(&src, dc, &seed);
        build(&got, &src, dc);
        ref_build(&want, &src, dc);
        same_tables(&got, &want, dc, round);
        ck_assert(got.built && got.dc == dc);
        ck_assert(memcmp(got.bits, src.bits, sizeof got.bits) == 0);
        ck_assert(memcmp(got.val, src.huffval, sizeof got.val) == 0);
        long kraft = 0; /* in units of 2^-16 */
        int n = 0;
        for (int l = 1; l <= 16; l++)
            kraft += (long)src.bits[l] << (16 - l), n += src.bits[l];
        complete += kraft == 1 << 16, empty += n == 0;
        for (int l = LOOK + 1; l <= 16; l++)
            long_codes += src.bits[l] != 0;
    }
    /* the generator reached the cases it is for */
    ck_assert_int_gt(complete, 100);
    ck_assert_int_gt(empty, 0);
    ck_assert_int_gt(long_codes, 100);
}
END_TEST

static Suite *huff_suite(void)
{
    Suite *s = suite_create("huff");
    TCase *t = tcase_create("tables");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, tables_equal_reference);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *r = srunner_create(huff_suite());
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
