/*
 * gen_fields — write a small multi-field .bfs (version 3) for tests, with the values it
 * holds as a reference, until the importers write such files.
 *
 *   gen_fields OUT.bfs N SEED [--classic A.bfs B.bfs] [--corrupt FIELD:SAMPLE]
 *   gen_fields --from SRC.bfs OUT.bfs SEED
 *
 * Sample i has the fields jpg (a JPEG, the primary image), caption (text: ASCII, é, ☕
 * and 😀, 0..70 bytes), depth (a second JPEG), boxes (0..5 rows of 4 f32), box_classes
 * (i64, one per box), emb (fixed f32 [3]), meta (optional bytes: a JSON document, absent
 * for every 4th sample) and tok (u16 tokens, 1..9). Labels are i % 3. Deterministic for a
 * seed. stdout: one JSON line per sample with every value (texts and bytes as hex), for
 * the Python reference of tests/mount/fields.sh. --classic writes A.bfs and B.bfs, version
 * 1 files of the same samples' jpg and depth images (same labels, same order), whose
 * batches' images the multi-field batches must equal. --corrupt flips a byte of sample
 * SAMPLE's value of FIELD after the file is written (a checksum error on read).
 * --from writes OUT.bfs with the images of a version 1 SRC.bfs (same records, labels and
 * classes) as field jpg and a caption of 20..200 bytes each (tests/bench/bench_fields.sh:
 * image + caption against the images alone).
 */
#include "engine/dataset/bfs.h"
#include "engine/dataset/jpeg.h"
#include "base/hash.h"
#include "tests/testutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NF 8

static uint64_t rnd(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static bfs_field fld(const char *name, int kind, int dtype, int flags, int rank, uint32_t d0)
{
    bfs_field f = {.kind = (uint8_t)kind,
                   .dtype = (uint8_t)dtype,
                   .flags = (uint8_t)flags,
                   .rank = (uint8_t)rank,
                   .follows = BFS_FIELD_NONE};
    snprintf(f.name, sizeof f.name, "%s", name);
    f.shape[0] = d0;
    return f;
}

static bfs_value_in val(const void *d, size_t len, uint32_t count)
{
    return (bfs_value_in){
        .data = len ? d : NULL, .len = len, .checksum = bfs_xxh64(d, len, 0), .raw_size = count};
}

static void hex(const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        printf("%02x", ((const uint8_t *)p)[i]);
}

/* A JPEG image value (width, height and flags from its header). */
static int image(uint64_t seed, int w, int h, uint8_t **jpg, size_t *len, bfs_value_in *v)
{
    tu_jpeg_opts o = {.width = w, .height = h, .quality = 90, .subsamp = 2, .seed = seed};
    bfs_jpeg_header hd;
    if (tu_make_jpeg(&o, jpg, len) || bfs_jpeg_parse_header(*jpg, *len, &hd))
        return -1;
    *v = val(*jpg, *len, 0);
    v->width = (uint16_t)w, v->height = (uint16_t)h;
    v->flags = bfs_jpeg_sample_flags(&hd);
    return 0;
}

static int classic(const char *path, int n, uint8_t **jpgs, size_t *lens, const bfs_value_in *vs)
{
    char err[512];
    bfs_writer *w;
    if (bfs_writer_create(path, 0, &w, err, sizeof err))
        return fprintf(stderr, "gen_fields: %s\n", err), -1;
    for (int c = 0; c < 3; c++) {
        char name[8];
        snprintf(name, sizeof name, "c%d", c);
        bfs_writer_add_class(w, name);
    }
    for (int i = 0; i < n; i++) {
        bfs_sample_in s = {.label = (uint32_t)(i % 3),
                           .width = vs[i].width,
                           .height = vs[i].height,
                           .flags = vs[i].flags};
        if (bfs_writer_add(w, &s, jpgs[i], lens[i]))
            return bfs_writer_abort(w), -1;
    }
    if (bfs_writer_finish(w, 0, err, sizeof err))
        return fprintf(stderr, "gen_fields: %s\n", err), -1;
    return 0;
}

/* --from: SRC's images with captions */
static int from_classic(const char *src, const char *out, uint64_t seed)
{
    char err[512];
    bfs_reader *r;
    bfs_writer *w;
    if (bfs_open(src, &r, err, sizeof err) || bfs_writer_create(out, 0, &w, err, sizeof err))
        return fprintf(stderr, "gen_fields: %s\n", err), 1;
    bfs_field fs[2] = {fld("jpg", BFS_FIELD_IMAGE, BFS_FDT_U8, 0, 0, 0),
                       fld("caption", BFS_FIELD_TEXT, BFS_FDT_U8, BFS_FIELDF_VARIABLE, 0, 0)};
    if (bfs_writer_set_fields(w, fs, 2, err, sizeof err))
        return fprintf(stderr, "gen_fields: %s\n", err), 1;
    const bfs_info *in = bfs_get_info(r);
    for (uint32_t c = 0; c < in->class_count; c++) {
        const char *name;
        size_t len;
        if (bfs_class_name(r, c, &name, &len) || bfs_writer_add_class(w, name))
            return fprintf(stderr, "gen_fields: %s: class %u\n", src, c), 1;
    }
    uint8_t *buf = NULL;
    size_t cap = 0;
    uint64_t s = seed;
    for (uint64_t i = 0; i < in->sample_count; i++) {
        bfs_sample smp;
        int rc = bfs_get_sample(r, i, &smp);
        if (!rc && smp.length > cap) {
            free(buf);
            cap = smp.length;
            if (!(buf = malloc(cap)))
                return 1;
        }
        if (rc || (rc = bfs_read_sample(r, i, BFS_VERIFY_NONE, &smp, buf, cap)))
            return fprintf(stderr, "gen_fields: %s: sample %llu unreadable\n", src,
                           (unsigned long long)i),
                   1;
        char cap_[200];
        size_t cl = 20 + rnd(&s) % 181;
        for (size_t k = 0; k < cl; k++)
            cap_[k] = (char)("abcdefghijklmnopqrstuvwxyz  ,."[rnd(&s) % 30]);
        bfs_value_in v[2] = {val(buf, smp.length, smp.raw_size), val(cap_, cl, (uint32_t)cl)};
        v[0].width = smp.width, v[0].height = smp.height, v[0].flags = smp.flags;
        if (bfs_writer_add_record(w, smp.label, v))
            return fprintf(stderr, "gen_fields: sample %llu refused\n", (unsigned long long)i), 1;
    }
    free(buf);
    bfs_close(r);
    if (bfs_writer_finish(w, 0, err, sizeof err))
        return fprintf(stderr, "gen_fields: %s\n", err), 1;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "--from"))
        return from_classic(argv[2], argv[3], strtoull(argv[4], NULL, 10));
    if (argc < 4) {
        fprintf(stderr,
                "usage: gen_fields OUT.bfs N SEED [--classic A.bfs B.bfs] "
                "[--corrupt FIELD:SAMPLE]\n       gen_fields --from SRC.bfs OUT.bfs SEED\n");
        return 2;
    }
    const char *out = argv[1], *ca = NULL, *cb = NULL;
    int n = atoi(argv[2]), corrupt_f = -1, corrupt_i = -1;
    uint64_t seed = strtoull(argv[3], NULL, 10);
    for (int a = 4; a < argc; a++) {
        if (!strcmp(argv[a], "--classic") && a + 2 < argc)
            ca = argv[++a], cb = argv[++a];
        else if (!strcmp(argv[a], "--corrupt") && a + 1 < argc &&
                 sscanf(argv[++a], "%d:%d", &corrupt_f, &corrupt_i) == 2)
            ;
        else
            return fprintf(stderr, "gen_fields: bad argument %s\n", argv[a]), 2;
    }
    if (n < 1 || n > 100000)
        return fprintf(stderr, "gen_fields: N must be 1..100000\n"), 2;
    bfs_field fs[NF] = {
        fld("jpg", BFS_FIELD_IMAGE, BFS_FDT_U8, 0, 0, 0),
        fld("caption", BFS_FIELD_TEXT, BFS_FDT_U8, BFS_FIELDF_VARIABLE, 0, 0),
        fld("depth", BFS_FIELD_IMAGE, BFS_FDT_U8, 0, 0, 0),
        fld("boxes", BFS_FIELD_BOXES, BFS_FDT_F32, BFS_FIELDF_VARIABLE, 1, 4),
        fld("box_classes", BFS_FIELD_ARRAY, BFS_FDT_I64, BFS_FIELDF_VARIABLE, 0, 0),
        fld("emb", BFS_FIELD_ARRAY, BFS_FDT_F32, 0, 1, 3),
        fld("meta", BFS_FIELD_BYTES, BFS_FDT_U8, BFS_FIELDF_VARIABLE | BFS_FIELDF_OPTIONAL, 0, 0),
        fld("tok", BFS_FIELD_TOKENS, BFS_FDT_U16, BFS_FIELDF_VARIABLE, 0, 0),
    };
    fs[4].follows = 3;
    char err[512];
    bfs_writer *w;
    if (bfs_writer_create(out, 0, &w, err, sizeof err) ||
        bfs_writer_set_fields(w, fs, NF, err, sizeof err))
        return fprintf(stderr, "gen_fields: %s\n", err), 1;
    for (int c = 0; c < 3; c++) {
        char name[8];
        snprintf(name, sizeof name, "c%d", c);
        bfs_writer_add_class(w, name);
    }
    uint8_t **jpgs = calloc((size_t)n * 2, sizeof *jpgs);
    size_t *lens = calloc((size_t)n * 2, sizeof *lens);
    bfs_value_in *ims = calloc((size_t)n * 2, sizeof *ims);
    if (!jpgs || !lens || !ims)
        return 1;
    static const char *const pieces[] = {
        "a ", "dog ", "caf\xc3\xa9 ", "\xe2\x98\x95", "\xf0\x9f\x98\x80", "on the grass ", "x"};
    uint64_t s = seed * 7919 + 1;
    for (int i = 0; i < n; i++) {
        int iw = 40 + (int)(rnd(&s) % 90), ih = 40 + (int)(rnd(&s) % 90);
        if (image(seed * 1000003 + (uint64_t)i * 2, iw, ih, &jpgs[i], &lens[i], &ims[i]) ||
            image(seed * 1000003 + (uint64_t)i * 2 + 1, iw, ih, &jpgs[n + i], &lens[n + i],
                  &ims[n + i]))
            return fprintf(stderr, "gen_fields: cannot make a JPEG\n"), 1;
        char cap[128] = "";
        size_t cl = 0;
        for (int k = (int)(rnd(&s) % 12); k > 0; k--) {
            const char *p = pieces[rnd(&s) % (sizeof pieces / sizeof *pieces)];
            if (cl + strlen(p) > 70)
                break;
            memcpy(cap + cl, p, strlen(p));
            cl += strlen(p);
        }
        uint32_t nb = (uint32_t)(rnd(&s) % 6);
        float boxes[5 * 4];
        int64_t cls[5];
        for (uint32_t b = 0; b < nb; b++) {
            float x0 = (float)(rnd(&s) % (uint64_t)iw), y0 = (float)(rnd(&s) % (uint64_t)ih);
            boxes[4 * b] = x0, boxes[4 * b + 1] = y0;
            boxes[4 * b + 2] = x0 + 0.5f + (float)(rnd(&s) % 20);
            boxes[4 * b + 3] = y0 + 0.25f + (float)(rnd(&s) % 20);
            cls[b] = (int64_t)(rnd(&s) % 80) - 1;
        }
        float emb[3] = {(float)i, -1.5f * (float)i, 1.0f / (float)(i + 1)};
        char meta[64];
        size_t ml =
            i % 4 == 3 ? 0 : (size_t)snprintf(meta, sizeof meta, "{\"id\": %d, \"w\": %d}", i, iw);
        uint16_t tok[9];
        uint32_t nt = 1 + (uint32_t)(rnd(&s) % 9);
        for (uint32_t t = 0; t < nt; t++)
            tok[t] = (uint16_t)rnd(&s);
        bfs_value_in v[NF] = {ims[i],
                              val(cap, cl, (uint32_t)cl),
                              ims[n + i],
                              val(boxes, nb * 16, nb * 4),
                              val(cls, nb * 8, nb),
                              val(emb, 12, 3),
                              val(meta, ml, (uint32_t)ml),
                              val(tok, nt * 2, nt)};
        if (bfs_writer_add_record(w, (uint32_t)(i % 3), v))
            return fprintf(stderr, "gen_fields: sample %d refused\n", i), 1;
        printf("{\"label\": %d, \"caption\": \"", i % 3);
        hex(cap, cl);
        printf("\", \"boxes\": \"");
        hex(boxes, nb * 16);
        printf("\", \"box_classes\": \"");
        hex(cls, nb * 8);
        printf("\", \"emb\": \"");
        hex(emb, 12);
        printf("\", \"meta\": \"");
        hex(meta, ml);
        printf("\", \"tok\": \"");
        hex(tok, nt * 2);
        printf("\"}\n");
    }
    if (bfs_writer_finish(w, 0, err, sizeof err))
        return fprintf(stderr, "gen_fields: %s\n", err), 1;
    if (ca && (classic(ca, n, jpgs, lens, ims) || classic(cb, n, jpgs + n, lens + n, ims + n)))
        return 1;
    if (corrupt_f >= 0) {
        bfs_reader *r;
        bfs_sample v;
        if (bfs_open(out, &r, err, sizeof err) ||
            bfs_get_value(r, (uint64_t)corrupt_i, (uint32_t)corrupt_f, &v) || !v.length)
            return fprintf(stderr, "gen_fields: no value %d of sample %d\n", corrupt_f, corrupt_i),
                   1;
        uint64_t at = bfs_get_info(r)->heap_offset + v.offset;
        bfs_close(r);
        int fd = open(out, O_RDWR);
        uint8_t b;
        if (fd < 0 || pread(fd, &b, 1, (off_t)at) != 1)
            return 1;
        b ^= 0x20;
        if (pwrite(fd, &b, 1, (off_t)at) != 1 || close(fd))
            return 1;
    }
    for (int i = 0; i < 2 * n; i++)
        free(jpgs[i]);
    free(jpgs), free(lens), free(ims);
    return 0;
}
