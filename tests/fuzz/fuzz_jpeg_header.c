/*
 * fuzz_jpeg_header.c — libFuzzer target for the JPEG path of engine/dataset/jpeg.c.
 *
 * bfs_jpeg_parse_header walks markers over untrusted bytes (every file mkbatchfs packs,
 * every payload --verify checks); bfs_jpeg_sample_flags turns its result into the .bfs
 * sample flags. For small inputs whose header parses, bfs_jpeg_decode_rgb decodes the
 * whole image through libjpeg-turbo, which checks that what the walker accepts is what
 * the decoder sizes its buffer for. The pixel limit keeps one input's decode under the
 * fuzzer's time and memory limits (4 Mpx of RGB is 12 MiB).
 * bfs_jpeg_check (mkbatchfs's verdict on every image) must agree with the engine's
 * decoder reading the whole file: its whole-image decode, and a checked decode of a
 * corner (a folder sample's first use), both at full scale: the pack and the mount call
 * the same files corrupt.
 * Files with restart markers also go through the crop decoder (engine/decode.c builds a
 * restart-segment window from the scan's markers: untrusted bytes too) at a few regions
 * and scales, by engine/huff.h's entropy decoder and by libjpeg-turbo's (where that is
 * clean, the same pixels), and through bfs_jpeg_add_restarts (mkbatchfs --restart), whose
 * output must parse as the same image with a marker after every MCU.
 */
#include "engine/dataset/bfs.h"
#include "engine/decode.h"
#include "base/err.h"
#include "engine/dataset/jpeg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DECODE_MAX_INPUT  (64u << 10)
#define DECODE_MAX_PIXELS (4ull << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_jpeg_header: %s:%d: contract violated: %s\n", __FILE__,          \
                    __LINE__, #cond);                                                              \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static volatile uint8_t sink;

static void touch(const uint8_t *p, size_t n)
{
    uint8_t x = 0;
    for (size_t i = 0; i < n; i++)
        x ^= p[i];
    sink = x;
}

static int decode_error(int rc)
{
    return rc == BFS_E_JPEG_DATA || rc == BFS_E_JPEG_HEADER || rc == BFS_E_NOT_JPEG ||
           rc == BFS_E_JPEG_UNSUPPORTED || rc == BFS_E_JPEG_TOO_LARGE || rc == -EINVAL ||
           rc == -ENOMEM;
}

/* Crops of a restart-marked file: windows (or the plain path when the markers lie). When
 * the whole image decoded cleanly (whole != NULL), a crop at full scale must hold its very
 * pixels. Then the same crops with a table entry that disagrees with the file (one pixel
 * narrower; sampling flags claimed croppable): errors, never a crash. */
static void crops(const uint8_t *data, size_t size, const uint8_t *whole)
{
    static bfs_decoder *d, *lib;
    if (!d && bfs_decoder_create(&d))
        return;
    if (!lib && (bfs_decoder_create(&lib) || bfs_decoder_set_own_entropy(lib, 0))) {
        bfs_decoder_destroy(lib);
        lib = NULL;
        return;
    }
    if (bfs_decoder_set_own_entropy(d, 1))
        return;
    bfs_image_info info;
    if (bfs_decoder_probe(data, size, &info))
        return;
    for (int pass = 0; pass < 2; pass++) {
        bfs_image_info in = info;
        if (pass) {
            if (in.width < 2)
                return;
            in.width--;
            in.flags &= (uint16_t)~BFS_F_ODD_SAMPLING;
        }
        for (int s = 1; s <= 2; s++) {
            int sw = (in.width + s - 1) / s, sh = (in.height + s - 1) / s;
            const int r[3][4] = {{sw / 2, sh / 2, sw, sh},
                                 {0, sh / 3, sw / 3 + 1, sh},
                                 {sw / 4, 0, sw / 2 + 1, sh / 2 + 1}};
            for (int i = 0; i < 3; i++) {
                bfs_pixels px, lp;
                int rc = bfs_decoder_decode(d, data, size, &in, s, r[i][0], r[i][1], r[i][2],
                                            r[i][3], &px);
                /* engine/huff.h's entropy decoder against libjpeg-turbo's: what that
                 * decodes without a warning, this decodes to the same pixels (it may refuse
                 * less: bytes left over in a segment, see huff.c restart) */
                int lrc = bfs_decoder_decode(lib, data, size, &in, s, r[i][0], r[i][1], r[i][2],
                                             r[i][3], &lp);
                CHECK(lrc != 0 || rc == 0);
                if (rc) {
                    CHECK(decode_error(rc));
                    continue;
                }
                CHECK(lrc || (px.x0 == lp.x0 && px.y0 == lp.y0 && px.w == lp.w && px.h == lp.h));
                for (int y = 0; !lrc && y < px.h; y++)
                    CHECK(memcmp(px.rgb + (size_t)y * px.stride, lp.rgb + (size_t)y * lp.stride,
                                 3 * (size_t)px.w) == 0);
                CHECK(!pass); /* a size other than the file's is never decoded */
                CHECK(px.img_w == sw && px.img_h == sh);
                CHECK(px.x0 <= r[i][0] && px.y0 <= r[i][1] && px.x0 + px.w >= r[i][2] &&
                      px.y0 + px.h >= r[i][3]);
                for (int y = r[i][1]; y < r[i][3]; y++) {
                    const uint8_t *row =
                        px.rgb + (size_t)(y - px.y0) * px.stride + 3 * (size_t)(r[i][0] - px.x0);
                    size_t n = 3 * (size_t)(r[i][2] - r[i][0]);
                    touch(row, n);
                    if (whole && s == 1)
                        CHECK(memcmp(row, whole + ((size_t)y * (size_t)sw + (size_t)r[i][0]) * 3,
                                     n) == 0);
                }
            }
        }
    }
}

/* bfs_jpeg_check's verdict against the engine's whole decodes (see the top). */
static void verdicts(const uint8_t *data, size_t size, int w, int h)
{
    static bfs_decoder *d;
    if (!d && bfs_decoder_create(&d))
        return;
    char why[200];
    int ck = bfs_jpeg_check(data, size, why, sizeof why);
    CHECK(ck == 0 || ck == BFS_E_JPEG_DATA || ck == -ENOMEM);
    CHECK(ck != BFS_E_JPEG_DATA || why[0]); /* a corrupt file is told why */
    bfs_image_info info;
    CHECK(bfs_decoder_probe(data, size, &info) == 0);
    uint8_t *dst = malloc((size_t)w * (size_t)h * 3);
    if (!dst || ck == -ENOMEM) {
        free(dst);
        return;
    }
    int whole = bfs_decoder_decode_image(d, data, size, &info, 1, dst, (size_t)w * (size_t)h * 3);
    bfs_pixels px;
    int corner =
        bfs_decoder_decode_checked(d, data, size, &info, 1, 0, 0, (w + 1) / 2, (h + 1) / 2, &px);
    free(dst);
    if (whole == -ENOMEM || corner == -ENOMEM)
        return;
    CHECK((ck == 0) == (whole == 0));
    CHECK((ck == 0) == (corner == 0));
}

static void add_restarts(const uint8_t *data, size_t size, const bfs_jpeg_header *h)
{
    uint8_t *out = NULL;
    size_t n = 0;
    int rc = bfs_jpeg_add_restarts(data, size, 1, &out, &n);
    if (rc) {
        CHECK(rc == 1 || decode_error(rc));
        CHECK(out == NULL);
        return;
    }
    bfs_jpeg_header nh;
    CHECK(bfs_jpeg_parse_header(out, n, &nh) == 0);
    CHECK(nh.width == h->width && nh.height == h->height && nh.components == 3);
    CHECK(nh.restart_interval == 1 && !nh.progressive && nh.scan_components == 3);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bfs_jpeg_header h;
    int rc = bfs_jpeg_parse_header(data, size, &h);
    uint16_t flags = bfs_jpeg_sample_flags(&h); /* defined for any parse result */
    CHECK((flags & ~BFS_FLAGS_KNOWN) == 0 && (flags & BFS_KIND_MASK) == BFS_KIND_JPEG);
    if (rc) {
        CHECK(rc == BFS_E_NOT_JPEG || rc == BFS_E_JPEG_HEADER || rc == BFS_E_JPEG_UNSUPPORTED ||
              rc == BFS_E_JPEG_TOO_LARGE);
        return 0;
    }
    /* jpeg.h: a parsed header describes an image libjpeg-turbo can decode */
    CHECK(h.width >= 1 && h.width <= 65535 && h.height >= 1 && h.height <= 65535);
    CHECK(h.components == 1 || h.components == 3 || h.components == 4);
    for (int c = 0; c < h.components; c++)
        CHECK(h.hs[c] >= 1 && h.hs[c] <= 4 && h.vs[c] >= 1 && h.vs[c] <= 4);
    CHECK(h.adobe_transform >= -1 && h.adobe_transform <= 255);
    unsigned color = flags & BFS_COLOR_MASK;
    CHECK(color == (h.components == 1   ? BFS_COLOR_GRAY
                    : h.components == 4 ? BFS_COLOR_CMYK
                                        : BFS_COLOR_YCC));
    CHECK(!!(flags & BFS_F_PROGRESSIVE) == !!h.progressive);
    CHECK(!!(flags & BFS_F_ARITHMETIC) == !!h.arithmetic);
    CHECK(((flags >> BFS_SAMP_H_SHIFT) & 3) == (unsigned)h.hs[0] - 1);
    CHECK(((flags >> BFS_SAMP_V_SHIFT) & 3) == (unsigned)h.vs[0] - 1);
    if (h.components != 3)
        CHECK(!(flags & BFS_F_ODD_SAMPLING));

    CHECK(h.restart_interval >= 0 && h.restart_interval <= 65535);
    CHECK(h.sof_offset > 0 && h.sof_offset < h.scan_offset && h.scan_offset <= size);
    CHECK(h.scan_components >= 1 && h.scan_components <= 4);
    if (size >= DECODE_MAX_INPUT || (uint64_t)h.width * (uint64_t)h.height > DECODE_MAX_PIXELS)
        return 0;
    verdicts(data, size, h.width, h.height);
    if (h.components == 3)
        add_restarts(data, size, &h);
    uint8_t *rgb = NULL;
    int w = 0, ht = 0;
    rc = bfs_jpeg_decode_rgb(data, size, &rgb, &w, &ht);
    if (rc) {
        CHECK(rc == BFS_E_JPEG_DATA || rc == -ENOMEM);
        CHECK(rgb == NULL);
    } else {
        CHECK(rgb != NULL && w == h.width && ht == h.height);
        touch(rgb, (size_t)w * (size_t)ht * 3); /* the whole buffer the caller may read */
    }
    if (h.restart_interval > 0)
        crops(data, size, rgb);
    free(rgb);
    return 0;
}
