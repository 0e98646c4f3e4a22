/*
 * st_tool — write and inspect safetensors batch files (engine/safetensors) for the CLI
 * tests (tests/cli/safetensors_python.sh) and by hand.
 *
 *   st_tool write [-e EPOCH] [-k BATCH] [-f FINGERPRINT] [-m KEY=VALUE]... OUT DTYPE LAYOUT B H W
 *       a whole batch file with deterministic content: images element k (in file order)
 *       is k % 251 in DTYPE (u8|f16|bf16|f32, exact in all four), labels[i] = i,
 *       indices[i] = 1000 + i. Defaults: epoch 0, batch 0, fingerprint 0123456789abcdef.
 *   st_tool check FILE   parse FILE with bfs_st_parse; print each tensor on a line,
 *                        "name DTYPE [d0,d1,...]"; exit 1 (message on stderr) if invalid
 *   st_tool meta FILE    print each metadata pair as "key=value"
 *   st_tool batch FILE   check that FILE is a batchfs batch; print "DTYPE LAYOUT B H W
 *                        EPOCH BATCH FINGERPRINT"
 *   st_tool size DTYPE LAYOUT B H W   print bfs_st_batch_size
 *
 * Exit status: 0 success, 1 invalid file or failed write, 2 usage. Names and values are
 * printed with bytes below 0x20, 0x7f and '\' written as \xNN, so every entry is one line.
 */
#include "engine/safetensors.h"
#include "tests/testutil.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static int usage(void)
{
    fprintf(stderr, "usage: st_tool write [-e EPOCH] [-k BATCH] [-f FINGERPRINT] [-m KEY=VALUE]... "
                    "OUT DTYPE LAYOUT B H W\n"
                    "       st_tool check FILE | meta FILE | batch FILE\n"
                    "       st_tool size DTYPE LAYOUT B H W\n"
                    "DTYPE: u8 f16 bf16 f32; LAYOUT: nhwc nchw\n");
    return 2;
}

static int parse_u64(const char *s, int base, uint64_t *v)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, base);
    if (errno || !*s || *end || *s == '-')
        return -1;
    *v = x;
    return 0;
}

/* DTYPE LAYOUT B H W from argv[0..4] into d. */
static int parse_shape(char **argv, bfs_st_batch_desc *d)
{
    static const struct {
        const char *name;
        bfs_dtype dt;
    } names[] = {
        {"u8", BFS_DT_U8}, {"f16", BFS_DT_F16}, {"bf16", BFS_DT_BF16}, {"f32", BFS_DT_F32}};
    size_t i;
    for (i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcasecmp(argv[0], names[i].name))
            break;
    if (i == sizeof names / sizeof *names) {
        fprintf(stderr, "st_tool: unknown dtype '%s' (u8, f16, bf16, f32)\n", argv[0]);
        return -1;
    }
    d->dtype = names[i].dt;
    if (!strcasecmp(argv[1], "nhwc"))
        d->nchw = 0;
    else if (!strcasecmp(argv[1], "nchw"))
        d->nchw = 1;
    else {
        fprintf(stderr, "st_tool: unknown layout '%s' (nhwc, nchw)\n", argv[1]);
        return -1;
    }
    uint64_t v[3];
    for (int k = 0; k < 3; k++)
        if (parse_u64(argv[2 + k], 10, &v[k]) || v[k] == 0 || v[k] > UINT32_MAX) {
            fprintf(stderr, "st_tool: bad dimension '%s'\n", argv[2 + k]);
            return -1;
        }
    d->batch = (uint32_t)v[0];
    d->height = (uint32_t)v[1];
    d->width = (uint32_t)v[2];
    return 0;
}

static uint16_t f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, mant = x & 0x7fffffu;
    int exp = (int)((x >> 23) & 0xff) - 127 + 15;
    if (((x >> 23) & 0xff) == 0xff)
        return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
    if (exp >= 31)
        return (uint16_t)(sign | 0x7c00u);
    if (exp <= 0) {
        if (exp < -10)
            return (uint16_t)sign;
        mant |= 0x800000u;
        unsigned shift = (unsigned)(14 - exp);
        uint32_t h = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1)))
            h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = sign | (uint32_t)exp << 10 | mant >> 13, rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
        h++;
    return (uint16_t)h;
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

/* Element k of the images tensor, encoded in dt, into out; returns its size. */
static size_t image_element(bfs_dtype dt, uint64_t k, uint8_t *out)
{
    unsigned v = (unsigned)(k % 251);
    uint16_t h;
    float f = (float)v;
    switch (dt) {
    case BFS_DT_U8:
        out[0] = (uint8_t)v;
        return 1;
    case BFS_DT_F16:
        h = f32_to_f16(f);
        memcpy(out, &h, 2);
        return 2;
    case BFS_DT_BF16:
        h = f32_to_bf16(f);
        memcpy(out, &h, 2);
        return 2;
    default:
        memcpy(out, &f, 4);
        return 4;
    }
}

static int write_all(FILE *fp, const void *p, size_t n, const char *path)
{
    if (fwrite(p, 1, n, fp) != n) {
        fprintf(stderr, "st_tool: %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

static int cmd_write(int argc, char **argv)
{
    bfs_st_batch_desc d = {.fingerprint = 0x0123456789abcdefull};
    bfs_st_kv extra[BFS_ST_MAX_EXTRA];
    uint32_t n_extra = 0;
    int opt;
    optind = 1;
    while ((opt = getopt(argc, argv, "e:k:f:m:")) != -1) {
        switch (opt) {
        case 'e':
            if (parse_u64(optarg, 10, &d.epoch))
                return usage();
            break;
        case 'k':
            if (parse_u64(optarg, 10, &d.batch_index))
                return usage();
            break;
        case 'f':
            if (strlen(optarg) != 16 || parse_u64(optarg, 16, &d.fingerprint))
                return usage();
            break;
        case 'm': {
            char *eq = strchr(optarg, '=');
            if (!eq || n_extra == BFS_ST_MAX_EXTRA)
                return usage();
            *eq = 0;
            extra[n_extra].key = optarg;
            extra[n_extra].value = eq + 1;
            n_extra++;
            break;
        }
        default:
            return usage();
        }
    }
    if (argc - optind != 6)
        return usage();
    const char *out = argv[optind];
    if (parse_shape(argv + optind + 1, &d))
        return 2;
    d.extra = extra;
    d.n_extra = n_extra;

    bfs_st_layout l;
    int rc = bfs_st_batch_layout(&d, &l);
    if (rc) {
        fprintf(stderr, "st_tool: bad batch description: %s\n", strerror(-rc));
        return 2;
    }
    uint8_t *hdr = malloc(l.header_size);
    if (!hdr)
        return 1;
    rc = bfs_st_write_header(&d, hdr, l.header_size);
    if (rc) {
        fprintf(stderr, "st_tool: header: %s\n", strerror(-rc));
        free(hdr);
        return 1;
    }
    FILE *fp = fopen(out, "wb");
    if (!fp) {
        fprintf(stderr, "st_tool: %s: %s\n", out, strerror(errno));
        free(hdr);
        return 1;
    }
    int bad = write_all(fp, hdr, l.header_size, out);
    free(hdr);
    /* the data in file order: labels, indices, images (safetensors.h) */
    uint8_t buf[65536];
    size_t n = 0, es = bfs_dtype_size(d.dtype);
    for (int t = 0; t < 2 && !bad; t++)
        for (uint64_t i = 0; i < d.batch && !bad; i++) {
            int64_t v = (int64_t)i + (t ? 1000 : 0);
            memcpy(buf + n, &v, 8);
            n += 8;
            if (n + 8 > sizeof buf) {
                bad = write_all(fp, buf, n, out);
                n = 0;
            }
        }
    uint64_t count = l.images_bytes / es;
    for (uint64_t k = 0; k < count && !bad; k++) {
        n += image_element(d.dtype, k, buf + n);
        if (n + 8 > sizeof buf) {
            bad = write_all(fp, buf, n, out);
            n = 0;
        }
    }
    if (!bad)
        bad = write_all(fp, buf, n, out);
    if (fclose(fp) && !bad) {
        fprintf(stderr, "st_tool: %s: %s\n", out, strerror(errno));
        bad = 1;
    }
    return bad ? 1 : 0;
}

static void print_escaped(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f || c == '\\')
            printf("\\x%02x", c);
        else
            putchar(c);
    }
}

/* Read and parse path into *f (heap); prints the parser's message on failure. */
static int load(const char *path, bfs_st_file **f)
{
    uint8_t *data;
    size_t len;
    int rc = tu_read_file(path, &data, &len);
    if (rc) {
        fprintf(stderr, "st_tool: %s: %s\n", path, strerror(-rc));
        return 1;
    }
    *f = malloc(sizeof **f);
    if (!*f) {
        free(data);
        return 1;
    }
    rc = bfs_st_parse(data, len, *f);
    free(data);
    if (rc) {
        fprintf(stderr, "st_tool: %s: invalid safetensors file (%s): %s\n", path, strerror(-rc),
                (*f)->err);
        free(*f);
        return 1;
    }
    return 0;
}

static int cmd_check(const char *path)
{
    bfs_st_file *f;
    if (load(path, &f))
        return 1;
    for (uint32_t i = 0; i < f->n_tensors; i++) {
        const bfs_st_tensor *t = &f->tensors[i];
        print_escaped(t->name, t->name_len);
        printf(" %s [", bfs_dtype_name(t->dtype));
        for (uint32_t k = 0; k < t->ndim; k++)
            printf("%s%llu", k ? "," : "", (unsigned long long)t->shape[k]);
        printf("]\n");
    }
    free(f);
    return 0;
}

static int cmd_meta(const char *path)
{
    bfs_st_file *f;
    if (load(path, &f))
        return 1;
    for (uint32_t i = 0; i < f->n_meta; i++) {
        print_escaped(f->meta[i].key, f->meta[i].key_len);
        putchar('=');
        print_escaped(f->meta[i].value, f->meta[i].value_len);
        putchar('\n');
    }
    free(f);
    return 0;
}

static int cmd_batch(const char *path)
{
    bfs_st_file *f;
    if (load(path, &f))
        return 1;
    bfs_st_batch_desc d;
    char err[256];
    int rc = bfs_st_batch_from_file(f, &d, err, sizeof err);
    free(f);
    if (rc) {
        fprintf(stderr, "st_tool: %s: not a batchfs batch: %s\n", path, err);
        return 1;
    }
    printf("%s %s %u %u %u %llu %llu %016llx\n", bfs_dtype_name(d.dtype), d.nchw ? "nchw" : "nhwc",
           d.batch, d.height, d.width, (unsigned long long)d.epoch,
           (unsigned long long)d.batch_index, (unsigned long long)d.fingerprint);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    const char *cmd = argv[1];
    if (!strcmp(cmd, "write"))
        return cmd_write(argc - 1, argv + 1);
    if (!strcmp(cmd, "check") && argc == 3)
        return cmd_check(argv[2]);
    if (!strcmp(cmd, "meta") && argc == 3)
        return cmd_meta(argv[2]);
    if (!strcmp(cmd, "batch") && argc == 3)
        return cmd_batch(argv[2]);
    if (!strcmp(cmd, "size") && argc == 7) {
        bfs_st_batch_desc d = {0};
        if (parse_shape(argv + 2, &d))
            return 2;
        uint64_t size = bfs_st_batch_size(&d);
        if (!size) {
            fprintf(stderr, "st_tool: the batch file size overflows\n");
            return 1;
        }
        printf("%llu\n", (unsigned long long)size);
        return 0;
    }
    return usage();
}
