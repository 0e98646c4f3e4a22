/*
 * huff.c — a baseline Huffman decoder for restart windows (see huff.h).
 *
 * The bit buffer holds nb bits at the top of a 64-bit word, zeros below them. A refill
 * brings nb to 56 or more: 7 bytes at once when the 8 ahead hold no 0xFF, else byte by
 * byte, un-stuffing FF 00; at a marker (or the end of the data) it stops and appends
 * zero bits, counted in `fake`. Decoding a bit of those is what libjpeg-turbo warns
 * about ("premature end of data segment"): nb < fake after an MCU stops the decode.
 *
 * A table of 2^LOOK entries per Huffman table, indexed by the next LOOK bits, gives the
 * bits to drop for a code and its value, the run of zeros before the coefficient and,
 * where the value's bits are in the lookahead too (code length + size <= LOOK: over 95% of
 * the AC symbols of /var/tmp/batchfs-corpus-l24), the coefficient itself, read and
 * extended when the table was built: such a symbol is a load, a shift and a store. The
 * others (E_SLOW) branch to read the value from the bit buffer (and, for a code longer
 * than LOOK bits or none, to the canonical search first). The branch mispredicts on them,
 * and is still cheaper than the arithmetic on every symbol: this decoder read every value
 * without a branch before (1.09-1.11x libjpeg-turbo on bench_huff), and the table's value
 * with that read as a select on every symbol measured 1.12-1.15x against 1.28-1.31x for
 * the branch (`build/bench/bench_huff /var/tmp/batchfs-corpus-l24 300 8`, alternated).
 * LOOK 11 measured the same as 10 (1.30-1.32x, 4 runs each) for tables twice the size.
 *
 * The AC symbols go two at a time where they can: a second table (pair), LOOK2 bits ahead,
 * holds in one 64-bit entry a symbol and, where a whole second one (code and value) fits
 * in the bits after it, that one too, with the drop of both. The lookups form a chain (the
 * index shifted out of acc, the load, acc shifted by the drop), which a pair spends on two
 * coefficients: 59% of the lookups up to k 47 were pairs on that corpus (LOOK2 11, 100
 * files). bench_huff measured 1.40-1.46x against 1.32x for one symbol a lookup (5 runs
 * each, alternated); LOOK2 12, for tables twice the size, 1.38-1.42x against LOOK2 11's
 * 1.40-1.43x (2 runs each); LOOK2 10 no better (1.35-1.42x against 1.35-1.46x, 3 runs
 * each). The chain is not all that bounds it: a lookup takes ~7.8 ns on this VM
 * (bench_huff, ~65,000 lookups a crop), a loop of that chain alone 3.4 ns a step, and two
 * MCUs decoded at once, their chains side by side (each segment of restart interval 1 is
 * independent), were no faster: the second reader's registers spilled (cachegrind: +10%
 * instructions, +59% loads). Nor was a refill on a fixed schedule (every other lookup, no
 * test): what bounds the loop needs hardware counters to find, which this VM has none of
 * (docs/engine.md, "Toward 2x").
 * A second symbol belongs to the block only while the first is not its last coefficient:
 * an EOB never takes one, and up to k 47 no first symbol (run <= 15) reaches 63, so that
 * loop takes pairs without a test; from k 48 on, a first that lands on 63 or past drops
 * its own bits only (P_DROP1), with a select. k stays <= 127 either way: a first at <= 62
 * and a second's run, or an EOB's 64.
 * The tables (the pair table's 2^LOOK2 entries: twice the look table's) are built again
 * only when the file's Huffman tables differ from those they were built of: the next
 * window of a file, or a file of the same encoder's tables, skips the build.
 *
 * Every AC symbol stores its coefficient, an EOB or ZRL a 0 where nothing was stored yet
 * (k only grows); an EOB's run is 64, so the loop's k < 64 ends the block without a test
 * of its own. k goes up to 78 on corrupt runs (127 after an EOB); ZZ maps 64..127 to 63,
 * as libjpeg-turbo's jpeg_natural_order does, so such a block decodes as it does there.
 */
#include "engine/huff.h"

#include <jerror.h>
#include <jpegint.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LOOK   10
#define NLOOK  (1 << LOOK)
#define LOOK2  11 /* the AC pair table's lookahead */
#define NLOOK2 (1 << LOOK2)

/* A table entry: the bits to drop (code and value: <= 31) and the run of zeros before the
 * coefficient (RUN_EOB for an EOB) a byte each (the compiler takes them as bytes, and
 * shifts by the entry itself: its bits 5..7 are 0), then the coefficient, signed, in the
 * top 14 bits (|v| <= 2^(LOOK-1) - 1 in the table) or, with E_SLOW, what gives it: E_LONG
 * (a code longer than LOOK bits, or none: the canonical search), or E_PART with the code's
 * length and the value's size (the value's bits go past the lookahead). */
#define E_DROP(e)  ((e)&255u)
#define E_RUN(e)   (((e) >> 8) & 255u)
#define E_LONG     (1u << 16)
#define E_PART     (1u << 17) /* the value's bits go past the lookahead */
#define E_SLOW     (E_LONG | E_PART)
#define E_VALUE(e) ((int32_t)(e) >> 18) /* (GCC and Clang shift a negative arithmetically) */
#define E_LEN(e)   (((e) >> 18) & 31u)  /* (E_PART only) */
#define E_SIZE(e)  (((e) >> 23) & 15u)  /* (E_PART only) */
#define RUN_EOB    64                   /* k >= 64 after it: the block ends */
_Static_assert(LOOK <= 14 && LOOK2 <= 14, "a table's coefficients fit E_VALUE's 14 bits");

/* A pair entry: the low 32 bits an entry as above for the first symbol, but for the drop,
 * that of both symbols; E_SLOW in it sends to the look table. The high 32 bits: ADV, the
 * steps from the first coefficient to the second (1 + its run; RUN_EOB + 1 for an EOB), in
 * bits 32..39, and the second coefficient, signed, in the top 16 bits; without a second
 * symbol, ADV 0 and the first coefficient again (stored twice at the same place). */
#define P_ADV(e)    ((unsigned)((e) >> 32) & 255u)
#define P_DROP1(e)  ((unsigned)((e) >> 40) & 255u) /* the first's drop alone */
#define P_VALUE2(e) ((int)((int64_t)(e) >> 48))    /* (arithmetic, as E_VALUE) */

#if JPEG_LIB_VERSION >= 70
#define SCALED_SIZE(comp) ((comp)->DCT_h_scaled_size)
#else
#define SCALED_SIZE(comp) ((comp)->DCT_scaled_size)
#endif

typedef struct htab {
    uint32_t look[NLOOK];
    uint64_t *pair; /* AC: NLOOK2 entries (in bfs_huff); DC: NULL */
    int built;      /* bits and val below are those the tables were built of */
    uint8_t bits[17];
    int32_t maxcode[17]; /* largest code of each length; -1: none of that length */
    int32_t valoff[17];  /* the symbol of code x of length l is val[valoff[l] + x] */
    uint8_t val[256];    /* the table's symbols (huffval) */
    int dc;
} htab;

struct bfs_huff {
    struct jpeg_entropy_decoder pub; /* first: c->entropy points here */
    j_decompress_ptr c;
    htab dc[NUM_HUFF_TBLS], ac[NUM_HUFF_TBLS];
    uint64_t pair[NUM_HUFF_TBLS][NLOOK2];
    const htab *dct[D_MAX_BLOCKS_IN_MCU], *act[D_MAX_BLOCKS_IN_MCU];
    int ci[D_MAX_BLOCKS_IN_MCU];
    uint8_t dc_needed[D_MAX_BLOCKS_IN_MCU], ac_needed[D_MAX_BLOCKS_IN_MCU];
    int blocks;
    int last_dc[MAX_COMPS_IN_SCAN];
    const uint8_t *pos, *end;
    uint64_t acc;
    int nb, fake, hit;
    unsigned restarts_to_go;
    int next_rst;
    JCOEF scratch[64]; /* ACs nobody needs go here */
};

/* zigzag to natural order; 64 more entries for runs past the end (see above) and EOBs
 * (the pair loop keeps to 127 as well: decode) */
static const uint8_t ZZ[128] = {
    0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,  12, 19, 26, 33, 40, 48,
    41, 34, 27, 20, 13, 6,  7,  14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23,
    30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63, 63, 63,
    63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63,
    63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63,
    63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63};

int bfs_huff_wanted(void)
{
    /* read once; decoders are made on several threads at once: an atomic (a race would
     * only store the same value, but ThreadSanitizer would rightly say so) */
    static _Atomic int wanted = -1;
    int w = atomic_load_explicit(&wanted, memory_order_relaxed);
    if (w < 0) {
        const char *v = getenv("BATCHFS_ENTROPY");
        w = !(v && strcmp(v, "libjpeg") == 0);
        atomic_store_explicit(&wanted, w, memory_order_relaxed);
    }
    return w;
}

bfs_huff *bfs_huff_create(void)
{
    return calloc(1, sizeof(bfs_huff));
}

void bfs_huff_destroy(bfs_huff *h)
{
    free(h);
}

/* Stop the decode with libjpeg's error (decode.c's error_exit longjmps). */
static void fail(j_decompress_ptr c, int code, int p0, int p1)
{
    c->err->msg_code = code;
    c->err->msg_parm.i[0] = p0;
    c->err->msg_parm.i[1] = p1;
    (*c->err->error_exit)((j_common_ptr)c);
    abort(); /* (error_exit does not return) */
}

/* v, s bits read, extended to the coefficient (F.2.2.1): below half the size's range it
 * is negative, v - (2^s - 1); 0 for s = 0. */
static inline int extend(uint32_t v, unsigned s)
{
    int neg = s && v < (1u << s >> 1);
    return (int)v - (neg ? (int)((1u << s) - 1) : 0);
}

/* The entry of symbol sym, a code of l bits followed by n known bits, after. DC: sym is
 * the size (<= 15: checked by libjpeg). AC: run << 4 | size; size 0 is EOB, or ZRL (16
 * zeros) with run 15; an EOB's run is dropped (libjpeg-turbo ends the block on any of
 * them). */
static uint32_t entry(int dc, int sym, int l, uint32_t after, int n)
{
    unsigned s = (unsigned)sym & 15, r = dc ? 0 : (unsigned)sym >> 4;
    if (!dc && s == 0 && r != 15)
        r = RUN_EOB;
    uint32_t e = ((unsigned)l + s) | r << 8;
    if ((int)s > n)
        return e | E_PART | (unsigned)l << 18 | s << 23;
    return e | (uint32_t)extend(after >> (n - (int)s), s) << 18;
}

/* tab[0..n) = e, four at a time, then the rest: GCC's -O2 vectorizes no loop of unknown
 * count, but it does make four adjacent stores of one value vector stores. */
static void fill32(uint32_t *tab, int n, uint32_t e)
{
    int i = 0;
    for (; i + 4 <= n; i += 4)
        tab[i] = e, tab[i + 1] = e, tab[i + 2] = e, tab[i + 3] = e;
    for (; i < n; i++)
        tab[i] = e;
}

static void fill64(uint64_t *tab, int n, uint64_t e)
{
    int i = 0;
    for (; i + 4 <= n; i += 4)
        tab[i] = e, tab[i + 1] = e, tab[i + 2] = e, tab[i + 3] = e;
    for (; i < n; i++)
        tab[i] = e;
}

/* tab (2^look entries) for src: each code of at most look bits, with each value of the
 * look - l bits after it, gets its entry (entry()); the rest E_LONG. Built in runs: the
 * entry of a code of size s depends only on the top s of the bits after it (none where s
 * is 0, or where s > look - l: E_PART), so each value's entry is made once and stored over
 * the 2^(look - l - s) indices that share it; and the codes, canonical, take the table
 * from index 0 on without a gap, so E_LONG goes only after the last of them. (Each photo
 * brings its own optimized tables, so they are built for nearly every one: one entry()
 * per index, the builds were 2.7-3.1% of the samples of `batchfs --bench`, threads=1;
 * in runs, 1.4-1.6%. Same entries: tests/check_huff.c.) */
static void fill_table(uint32_t *tab, int look, const JHUFF_TBL *src, int dc)
{
    int32_t code = 0;
    int k = 0, end = 0; /* end: the entries filled so far */
    for (int l = 1; l <= look; l++) {
        int shift = look - l;
        for (int i = 0; i < src->bits[l]; i++, k++, code++) {
            int sym = src->huffval[k], s = sym & 15;
            uint32_t *t = tab + ((int)code << shift);
            if (s == 0 || s > shift) { /* one entry for the whole code */
                fill32(t, 1 << shift, entry(dc, sym, l, 0, shift));
            } else {
                int run = 1 << (shift - s); /* the bits after the value's */
                for (uint32_t v = 0; v < 1u << s; v++, t += run)
                    fill32(t, run, entry(dc, sym, l, v << (shift - s), shift));
            }
        }
        end = (int)code << shift;
        code <<= 1;
    }
    fill32(tab + end, (1 << look) - end, E_LONG);
}

/* The AC pair table of one, src's entries with LOOK2 bits of lookahead (fill_table): each
 * index's first symbol, and its second read from the bits after the first's. One first
 * entry holds over a run of 2^(LOOK2 - drop) indices (its code and value, then the bits
 * of the second: those the run's indices differ in), 2^(LOOK2 - l) for an E_PART, and
 * E_LONG from the first such index to the end (fill_table); an E_SLOW or EOB first takes
 * no second, and its pair entry is the same over the whole run. The seconds of a run
 * depend on its width w only: they are read from one once per w, for all the firsts of
 * that drop (every value of a code, and codes of other lengths and sizes). */
static void build_pair(uint64_t *pair, const uint32_t *one)
{
    /* the seconds of the runs of w bits at second + 2^w (w < LOOK2), where have >> w & 1:
     * the high 32 bits of the pair entry and the drop of both (so never 0), or 0 where
     * none fits */
    uint64_t second[NLOOK2]; /* (16 KiB) */
    unsigned have = 0;
    for (int i = 0; i < NLOOK2;) {
        uint32_t e = one[i];
        unsigned d = E_DROP(e);
        uint64_t p = e | (uint64_t)d << 40 | (uint64_t)(uint16_t)E_VALUE(e) << 48;
        int run = e & E_LONG ? NLOOK2 - i : 1 << (LOOK2 - (e & E_PART ? E_LEN(e) : d));
        if ((e & E_SLOW) || E_RUN(e) == RUN_EOB) { /* an EOB ends the block */
            fill64(pair + i, run, p);
            i += run;
            continue;
        }
        int w = LOOK2 - (int)d; /* run = 2^w; d >= 1 */
        uint64_t *sec = second + run;
        if (!(have >> w & 1)) {
            for (int r = 0; r < run; r++) { /* index i + r's second is at r << d */
                uint32_t e2 = one[r << d];
                /* the second's code and value within the bits left (their entry depends
                 * on those only) */
                int fits = !(e2 & E_SLOW) && d + E_DROP(e2) <= LOOK2;
                sec[r] = fits ? (d + E_DROP(e2)) | (uint64_t)(E_RUN(e2) + 1) << 32 |
                                    (uint64_t)(uint16_t)E_VALUE(e2) << 48
                              : 0;
            }
            have |= 1u << w;
        }
        uint64_t two = (e & ~255u) | (uint64_t)d << 40;
        for (int r = 0; r < run; r++)
            pair[i + r] = sec[r] ? two | sec[r] : p;
        i += run;
    }
}

/* Tables for t from libjpeg's JHUFF_TBL src, which jpeg_make_d_derived_tbl checked when
 * the scan started (counts, no code too long for its length, DC sizes <= 15). */
static void build(htab *t, const JHUFF_TBL *src, int dc)
{
    if (t->built && t->dc == dc && memcmp(t->bits, src->bits, sizeof t->bits) == 0 &&
        memcmp(t->val, src->huffval, sizeof t->val) == 0)
        return;
    fill_table(t->look, LOOK, src, dc);
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
    if (!dc) {
        uint32_t one[NLOOK2]; /* (8 KiB) */
        fill_table(one, LOOK2, src, 0);
        build_pair(t->pair, one);
    }
    memcpy(t->bits, src->bits, sizeof t->bits);
    memcpy(t->val, src->huffval, sizeof t->val);
    t->dc = dc;
    t->built = 1;
}

/* The entry of a code longer than LOOK bits at the top of acc (E_PART but for size 0). */
static uint32_t long_entry(j_decompress_ptr c, const htab *t, uint64_t acc)
{
    for (int l = LOOK + 1; l <= 16; l++) {
        int32_t code = (int32_t)(acc >> (64 - l));
        if (code <= t->maxcode[l]) {
            int32_t i = t->valoff[l] + code;
            if (i < 0 || i > 255)
                break;
            return entry(t->dc, t->val[i], l, 0, 0);
        }
    }
    fail(c, JWRN_HUFF_BAD_CODE, 0, 0);
    return 0;
}

static inline uint64_t load_be64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return __builtin_bswap64(v);
}

/* The bytes of w (big-endian) before its first 0xFF: 0..8. Exact: z has the high bit of
 * each byte of ~w that is 0, and no carry crosses a byte (has_ff below may also flag an FE
 * just before an FF, where the FF's borrow reaches it). */
static inline int before_ff(uint64_t w)
{
    const uint64_t lo7 = 0x7F7F7F7F7F7F7F7Full;
    uint64_t v = ~w, z = ~(((v & lo7) + lo7) | v | lo7);
    return z ? __builtin_clzll(z) >> 3 : 8;
}

/* The refill where the fast one cannot (see the top): the bytes before an FF at once, an
 * FF byte by byte (FF 00, fill bytes, a marker), and zero bits past a marker. */
static void refill_slow(bfs_huff *h)
{
    while (h->nb <= 56) {
        if (h->hit) { /* 8 zero bits at a time up to more than 56, counted */
            int add = (64 - h->nb) & ~7;
            h->nb += add;
            h->fake += add;
            return;
        }
        if (h->end - h->pos >= 8) {
            uint64_t w = load_be64(h->pos);
            int n = (63 - h->nb) >> 3, j = before_ff(w); /* n: whole bytes that fit, 0..7 */
            if (n > j)
                n = j;
            if (n > 0) {
                h->acc |= (w & ~(~0ull >> (8 * n))) >> h->nb;
                h->pos += n;
                h->nb += 8 * n;
                continue;
            }
        }
        if (h->pos >= h->end) /* no marker before the end: libjpeg-turbo warns */
            fail(h->c, JWRN_JPEG_EOF, 0, 0);
        unsigned b = *h->pos;
        if (b == 0xFF) {
            const uint8_t *q = h->pos + 1;
            while (q < h->end && *q == 0xFF) /* fill bytes */
                q++;
            if (q < h->end && *q == 0) {
                h->pos = q + 1; /* FF 00: a data byte FF */
            } else {
                h->hit = 1; /* a marker: the segment's data ends here */
                continue;
            }
        } else {
            h->pos++;
        }
        h->acc |= (uint64_t)b << (56 - h->nb);
        h->nb += 8;
    }
}

/* At an MCU that starts a restart interval: the bits left of the last segment dropped,
 * then on to the next marker, which must be the expected RSTn. Bytes left over before it
 * are skipped without a word: libjpeg-turbo warns of them only when its bit reader has not
 * reached the marker yet (jdmarker.c next_marker), and otherwise counts them for a warning
 * it may never give (when no later marker is searched for), so a file it decodes whole
 * without a warning can hold such bytes; refusing them here would call a clean file
 * corrupt. (Windows are only built of clean files: huff.h.) */
static void restart(bfs_huff *h, j_decompress_ptr c)
{
    const uint8_t *q = h->pos;
    for (;;) {
        while (q < h->end && *q != 0xFF)
            q++;
        while (q < h->end && *q == 0xFF) /* fill bytes */
            q++;
        if (q >= h->end)
            fail(c, JWRN_JPEG_EOF, 0, 0);
        if (*q != 0) /* (FF 00 is data) */
            break;
        q++;
    }
    if (*q != 0xD0 + h->next_rst)
        fail(c, JWRN_MUST_RESYNC, *q, h->next_rst);
    h->pos = q + 1;
    h->next_rst = (h->next_rst + 1) & 7;
    c->marker->next_restart_num = h->next_rst;
    h->acc = 0;
    h->nb = h->fake = h->hit = 0;
    memset(h->last_dc, 0, sizeof h->last_dc);
    h->restarts_to_go = c->restart_interval;
}

/* any byte of w 0xFF */
static inline int has_ff(uint64_t w)
{
    uint64_t x = ~w;
    return ((x - 0x0101010101010101ull) & ~x & 0x8080808080808080ull) != 0;
}

/* At least 32 bits in the buffer: enough for any code and its value bits (16 + 15). */
#define REFILL()                                                                                   \
    do {                                                                                           \
        if (nb >= 32)                                                                              \
            break;                                                                                 \
        if (end - pos >= 8) {                                                                      \
            uint64_t w_ = load_be64(pos);                                                          \
            if (!has_ff(w_)) {                                                                     \
                int n_ = (63 - nb) >> 3; /* whole bytes that fit: 4..7 */                          \
                acc |= (w_ & ~(~0ull >> (8 * n_))) >> nb;                                          \
                pos += n_;                                                                         \
                nb += 8 * n_;                                                                      \
                break;                                                                             \
            }                                                                                      \
        }                                                                                          \
        h->acc = acc, h->nb = nb, h->pos = pos;                                                    \
        refill_slow(h);                                                                            \
        acc = h->acc, nb = h->nb, pos = h->pos;                                                    \
    } while (0)

#define DROP(n) (acc <<= (n), nb -= (n))

/* The coefficient of entry *e with E_SLOW, for the code at the top of acc; *e becomes the
 * code's entry (for its drop and run). */
static inline int slow_value(j_decompress_ptr c, const htab *t, uint64_t acc, uint32_t *e)
{
    if (*e & E_LONG)
        *e = long_entry(c, t, acc);
    if (!(*e & E_PART))
        return E_VALUE(*e);
    unsigned s = E_SIZE(*e); /* (>= 1) */
    return extend((uint32_t)((acc << E_LEN(*e)) >> (64 - s)), s);
}

/* The coefficient of the code at the top of acc by the look table (the slow path where
 * its entry says so); *e its entry (for its drop and run). For the DC and where a pair
 * entry is E_SLOW. */
static inline int single(j_decompress_ptr c, const htab *t, uint64_t acc, uint32_t *e)
{
    *e = t->look[acc >> (64 - LOOK)];
    if (__builtin_expect((*e & E_SLOW) != 0, 0))
        return slow_value(c, t, acc, e);
    return E_VALUE(*e);
}

static inline __attribute__((always_inline)) boolean decode(j_decompress_ptr c, JBLOCKROW *MCU_data)
{
    bfs_huff *h = (bfs_huff *)(void *)c->entropy;
    if (c->restart_interval) {
        if (h->restarts_to_go == 0)
            restart(h, c);
        h->restarts_to_go--;
    }
    uint64_t acc = h->acc;
    int nb = h->nb;
    const uint8_t *pos = h->pos, *end = h->end;
    for (int b = 0; b < h->blocks; b++) {
        JCOEF *blk = MCU_data ? MCU_data[b][0] : NULL;
        const htab *t = h->dct[b];
        REFILL();
        uint32_t e;
        int diff = single(c, t, acc, &e);
        DROP(E_DROP(e));
        if (h->dc_needed[b]) { /* wraps as libjpeg-turbo's int does, without the UB */
            int ci = h->ci[b];
            int v = (int)((unsigned)h->last_dc[ci] + (unsigned)diff);
            h->last_dc[ci] = v;
            if (blk)
                blk[0] = (JCOEF)v;
        }
        JCOEF *out = h->ac_needed[b] && blk ? blk : h->scratch;
        t = h->act[b];
        /* an EOB or ZRL stores a 0 where nothing was stored (see the top) */
        int k = 1;
        const uint64_t *pt = t->pair;
        while (k < 48) {
            REFILL();
            uint64_t p = pt[acc >> (64 - LOOK2)];
            e = (uint32_t)p;
            int v = E_VALUE(e), v2 = P_VALUE2(p);
            unsigned adv = P_ADV(p);
            if (__builtin_expect((e & E_SLOW) != 0, 0)) {
                v = v2 = single(c, t, acc, &e);
                adv = 0;
            }
            DROP(E_DROP(e));
            k += (int)E_RUN(e);
            out[ZZ[k]] = (JCOEF)v;
            k += (int)adv;
            out[ZZ[k]] = (JCOEF)v2;
            k++;
        }
        for (; k < 64; k++) {
            REFILL();
            uint64_t p = pt[acc >> (64 - LOOK2)];
            e = (uint32_t)p;
            int v = E_VALUE(e), v2 = P_VALUE2(p);
            unsigned adv = P_ADV(p), drop = E_DROP(e), drop1 = P_DROP1(p);
            if (__builtin_expect((e & E_SLOW) != 0, 0)) {
                v = v2 = single(c, t, acc, &e);
                adv = 0, drop = drop1 = E_DROP(e);
            }
            k += (int)E_RUN(e);
            if (k >= 63) /* the block ends at the first: the second is the next block's */
                v2 = v, adv = 0, drop = drop1;
            DROP(drop);
            out[ZZ[k]] = (JCOEF)v;
            k += (int)adv;
            out[ZZ[k]] = (JCOEF)v2;
        }
    }
    h->acc = acc, h->nb = nb, h->pos = pos;
    if (nb < h->fake) /* bits past the segment's data were decoded */
        fail(c, JWRN_HIT_MARKER, 0, 0);
    c->src->next_input_byte = pos;
    c->src->bytes_in_buffer = (size_t)(end - pos);
    return TRUE;
}

static boolean decode_mcu(j_decompress_ptr c, JBLOCKROW *MCU_data)
{
    return decode(c, MCU_data);
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The same with BMI2's shifts (shlx, shrx: one cycle, no flags), on the chain from one
 * code to the next, where the CPU has them. */
__attribute__((target("bmi2"))) static boolean decode_mcu_bmi2(j_decompress_ptr c,
                                                               JBLOCKROW *MCU_data)
{
    return decode(c, MCU_data);
}
#endif

/* A second scan would call this: never, as install took only single-scan files. */
static void start_pass(j_decompress_ptr c)
{
    fail(c, JERR_NOT_COMPILED, 0, 0);
}

int bfs_huff_install(bfs_huff *h, struct jpeg_decompress_struct *c)
{
    if (!h || c->progressive_mode || c->arith_code || c->data_precision != 8 || c->Ss != 0 ||
        c->Se != DCTSIZE2 - 1 || c->Ah != 0 || c->Al != 0 || c->buffered_image ||
        c->inputctl->has_multiple_scans || c->input_iMCU_row != 0 || c->unread_marker != 0 ||
        c->blocks_in_MCU > D_MAX_BLOCKS_IN_MCU || c->comps_in_scan < 1 ||
        c->comps_in_scan > MAX_COMPS_IN_SCAN || !c->src || !c->src->next_input_byte)
        return 0;
    unsigned built = 0;
    for (int ci = 0; ci < c->comps_in_scan; ci++) {
        const jpeg_component_info *comp = c->cur_comp_info[ci];
        int dn = comp->dc_tbl_no, an = comp->ac_tbl_no;
        if (dn < 0 || dn >= NUM_HUFF_TBLS || an < 0 || an >= NUM_HUFF_TBLS ||
            !c->dc_huff_tbl_ptrs[dn] || !c->ac_huff_tbl_ptrs[an])
            return 0;
        if (!(built & 1u << dn))
            build(&h->dc[dn], c->dc_huff_tbl_ptrs[dn], 1);
        if (!(built & 16u << an)) {
            h->ac[an].pair = h->pair[an];
            build(&h->ac[an], c->ac_huff_tbl_ptrs[an], 0);
        }
        built |= 1u << dn | 16u << an;
    }
    for (int b = 0; b < c->blocks_in_MCU; b++) {
        int ci = c->MCU_membership[b];
        const jpeg_component_info *comp = c->cur_comp_info[ci];
        h->ci[b] = ci;
        h->dct[b] = &h->dc[comp->dc_tbl_no];
        h->act[b] = &h->ac[comp->ac_tbl_no];
        h->dc_needed[b] = comp->component_needed != 0;
        h->ac_needed[b] = comp->component_needed && SCALED_SIZE(comp) > 1;
    }
    h->blocks = c->blocks_in_MCU;
    h->c = c;
    h->pos = c->src->next_input_byte;
    h->end = h->pos + c->src->bytes_in_buffer;
    h->acc = 0;
    h->nb = h->fake = h->hit = 0;
    memset(h->last_dc, 0, sizeof h->last_dc);
    h->restarts_to_go = c->restart_interval;
    h->next_rst = c->marker->next_restart_num;
    h->pub.start_pass = start_pass;
    h->pub.decode_mcu = decode_mcu;
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("bmi2"))
        h->pub.decode_mcu = decode_mcu_bmi2;
#endif
    h->pub.insufficient_data = FALSE;
    c->entropy = &h->pub;
    return 1;
}
