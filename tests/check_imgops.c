/*
 * check_imgops.c — engine/imgops.h: names, bad magnitudes, and the identities each op
 * must keep. Exactness against torchvision is tests/cli/augment_torch.sh's.
 */
#include "engine/imgops.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A w x h image of pseudo-random pixels (xorshift), rows padded to stride. */
static bfs_img make(int w, int h, size_t pad, uint32_t seed)
{
    bfs_img im = {NULL, w, h, (size_t)w * 3 + pad};
    im.rgb = malloc(im.stride * (size_t)h);
    ck_assert_ptr_nonnull(im.rgb);
    uint32_t x = seed | 1;
    for (size_t i = 0; i < im.stride * (size_t)h; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        im.rgb[i] = (uint8_t)x;
    }
    return im;
}

static int same_pixels(const bfs_img *a, const bfs_img *b)
{
    for (int y = 0; y < a->h; y++)
        if (memcmp(a->rgb + y * a->stride, b->rgb + y * b->stride, (size_t)a->w * 3))
            return 0;
    return 1;
}

static bfs_img copy(const bfs_img *a)
{
    bfs_img c = *a;
    c.rgb = malloc(a->stride * (size_t)a->h);
    ck_assert_ptr_nonnull(c.rgb);
    memcpy(c.rgb, a->rgb, a->stride * (size_t)a->h);
    return c;
}

START_TEST(names_round_trip)
{
    for (int op = 0; op < BFS_OP_COUNT; op++) {
        const char *n = bfs_imgop_name(op);
        ck_assert_ptr_nonnull(n);
        ck_assert_int_eq(bfs_imgop_lookup(n), op);
    }
    ck_assert_ptr_null(bfs_imgop_name(BFS_OP_COUNT));
    ck_assert_ptr_null(bfs_imgop_name(-1));
    ck_assert_int_eq(bfs_imgop_lookup("shearx"), -1); /* names are exact */
    ck_assert_int_eq(bfs_imgop_lookup(""), -1);
}
END_TEST

START_TEST(bad_magnitudes_rejected)
{
    bfs_img im = make(9, 7, 0, 1), before = copy(&im);
    uint8_t tmp[9 * 7 * 3];
    static const struct {
        int op;
        double mag;
    } bad[] = {
        {BFS_OP_BRIGHTNESS, -0.01}, {BFS_OP_COLOR, -1},       {BFS_OP_CONTRAST, -2},
        {BFS_OP_SHARPNESS, -0.5},   {BFS_OP_POSTERIZE, -1},   {BFS_OP_POSTERIZE, 9},
        {BFS_OP_POSTERIZE, 3.5},    {BFS_OP_SOLARIZE, 255.5}, {BFS_OP_HUE, 0.51},
        {BFS_OP_HUE, -0.6},         {BFS_OP_ROTATE, 1e300},   {BFS_OP_TRANSLATE_X, 1e12},
        {BFS_OP_BRIGHTNESS, 1e10},  {BFS_OP_COUNT, 0},        {-1, 0},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_int_eq(bfs_imgop_apply(&im, bad[i].op, bad[i].mag, tmp), -EINVAL);
    for (int op = 0; op < BFS_OP_COUNT; op++)
        if (op != BFS_OP_IDENTITY)
            ck_assert_int_eq(bfs_imgop_apply(&im, op, 0.0 / 0.0, tmp), -EINVAL);
    ck_assert(same_pixels(&im, &before)); /* a refused op leaves the image alone */
    free(im.rgb);
    free(before.rgb);
}
END_TEST

/* ops that must leave any image as it was, on odd sizes and padded rows */
START_TEST(identities_hold)
{
    static const struct {
        int op;
        double mag;
    } ident[] = {
        {BFS_OP_IDENTITY, 0},      {BFS_OP_ROTATE, 0},
        {BFS_OP_ROTATE, 360},      {BFS_OP_ROTATE, -720},
        {BFS_OP_SHEAR_X, 0},       {BFS_OP_SHEAR_Y, 0},
        {BFS_OP_TRANSLATE_X, 0.9}, /* int(0.9) == 0 */ {BFS_OP_TRANSLATE_Y, -0.5},
        {BFS_OP_BRIGHTNESS, 1},    {BFS_OP_COLOR, 1},
        {BFS_OP_CONTRAST, 1},      {BFS_OP_SHARPNESS, 1},
        {BFS_OP_POSTERIZE, 8},
    };
    for (size_t i = 0; i < sizeof ident / sizeof ident[0]; i++) {
        bfs_img im = make(13, 11, 5, (uint32_t)i + 7), before = copy(&im);
        uint8_t tmp[13 * 11 * 3];
        ck_assert_msg(bfs_imgop_apply(&im, ident[i].op, ident[i].mag, tmp) == 0, "%s",
                      bfs_imgop_name(ident[i].op));
        ck_assert_msg(same_pixels(&im, &before), "%s(%g) changed the image",
                      bfs_imgop_name(ident[i].op), ident[i].mag);
        free(im.rgb);
        free(before.rgb);
    }
}
END_TEST

START_TEST(involutions_hold)
{
    bfs_img im = make(12, 12, 3, 99), before = copy(&im);
    uint8_t tmp[12 * 12 * 3];
    ck_assert_int_eq(bfs_imgop_apply(&im, BFS_OP_INVERT, 0, tmp), 0);
    ck_assert(!same_pixels(&im, &before));
    ck_assert_int_eq(bfs_imgop_apply(&im, BFS_OP_INVERT, 0, tmp), 0);
    ck_assert(same_pixels(&im, &before));
    ck_assert_int_eq(bfs_imgop_apply(&im, BFS_OP_ROTATE, 180, tmp), 0);
    ck_assert_int_eq(bfs_imgop_apply(&im, BFS_OP_ROTATE, -180, tmp), 0);
    ck_assert(same_pixels(&im, &before));
    for (int i = 0; i < 4; i++) /* square: torch.rot90's path, four quarter turns */
        ck_assert_int_eq(bfs_imgop_apply(&im, BFS_OP_ROTATE, 90, tmp), 0);
    ck_assert(same_pixels(&im, &before));
    free(im.rgb);
    free(before.rgb);
}
END_TEST

START_TEST(translate_out_of_frame_is_black)
{
    bfs_img im = make(10, 6, 0, 3);
    uint8_t tmp[10 * 6 * 3], zero[10 * 6 * 3] = {0};
    ck_assert_int_eq(bfs_imgop_apply(&im, BFS_OP_TRANSLATE_X, 10, tmp), 0);
    ck_assert_mem_eq(im.rgb, zero, sizeof zero);
    free(im.rgb);
    im = make(10, 6, 0, 4);
    ck_assert_int_eq(bfs_imgop_apply(&im, BFS_OP_TRANSLATE_Y, -6, tmp), 0);
    ck_assert_mem_eq(im.rgb, zero, sizeof zero);
    free(im.rgb);
}
END_TEST

START_TEST(constant_image_keeps_equalize_and_autocontrast)
{
    uint8_t px[5 * 4 * 3], tmp[5 * 4 * 3];
    for (size_t i = 0; i < sizeof px; i++)
        px[i] = (uint8_t)(i % 3 == 0 ? 40 : i % 3 == 1 ? 90 : 200);
    bfs_img im = {px, 5, 4, 15};
    uint8_t before[sizeof px];
    memcpy(before, px, sizeof px);
    ck_assert_int_eq(bfs_imgop_apply(&im, BFS_OP_EQUALIZE, 0, tmp), 0); /* step 0 */
    ck_assert_mem_eq(px, before, sizeof px);
    ck_assert_int_eq(bfs_imgop_apply(&im, BFS_OP_AUTOCONTRAST, 0, tmp), 0); /* min == max */
    ck_assert_mem_eq(px, before, sizeof px);
    ck_assert_int_eq(bfs_imgop_apply(&im, BFS_OP_GRAYSCALE, 0, tmp), 0);
    for (size_t i = 0; i < sizeof px; i += 3) /* 40*.2989 + 90*.587 + 200*.114 = 87.589 */
        ck_assert(px[i] == 87 && px[i + 1] == 87 && px[i + 2] == 87);
}
END_TEST

START_TEST(linspace_endpoints)
{
    ck_assert(bfs_imgop_linspace(0, 0.9, 31, 0) == 0.0f);
    ck_assert(bfs_imgop_linspace(0, 0.9, 31, 30) == 0.9f);
    ck_assert(bfs_imgop_linspace(1, 0, 31, 30) == 0.0f);
    ck_assert(bfs_imgop_linspace(0, 30, 31, 9) == 9.0f);
}
END_TEST

static Suite *imgops_suite(void)
{
    Suite *s = suite_create("imgops");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, names_round_trip);
    tcase_add_test(tc, bad_magnitudes_rejected);
    tcase_add_test(tc, identities_hold);
    tcase_add_test(tc, involutions_hold);
    tcase_add_test(tc, translate_out_of_frame_is_black);
    tcase_add_test(tc, constant_image_keeps_equalize_and_autocontrast);
    tcase_add_test(tc, linspace_endpoints);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(imgops_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed != 0;
}
