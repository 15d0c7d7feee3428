/* test_image.c -- PNG/JPEG decoding of the committed fixtures in tests/fixtures/data (made by
 * make_fixtures.py: known pixel values), the error lines for bad files, PNG round trips
 * through our encoder, and the cv2.INTER_LINEAR resize against hand-computed values (pixel
 * centres, border clamps, 11-bit weights). Run from the repository root. */
#include <stdbool.h>

#include "kernels/base.h"
#include "tests/expect.h"
#include "trainer/data/image.h"
#include "trainer/rng.h"

#define FIX "tests/fixtures/data/"

static char err[1024];

static const uint8_t *px(const Image *im, int x, int y) { return im->rgb + ((size_t)y * im->w + x) * 3; }

static void test_png_rgb(void) {
    Image im;
    if (image_load(&im, FIX "rgb_3x2.png", err, sizeof err)) {
        EXPECT(false, "%s", err);
        return;
    }
    EXPECT(im.w == 3 && im.h == 2, "%dx%d", im.w, im.h);
    for (int y = 0; y < 2; y++)
        for (int x = 0; x < 3; x++) {
            const uint8_t *p = px(&im, x, y);
            EXPECT(p[0] == 40 * x + 10 && p[1] == 100 * y + 5 && p[2] == 200 - 30 * x - 50 * y,
                   "(%d, %d) = %d %d %d", x, y, p[0], p[1], p[2]);
        }
    image_free(&im);
}

static void test_png_grey_and_alpha(void) {
    Image im;
    EXPECT(image_load(&im, FIX "gray_2x2.png", err, sizeof err) == 0, "%s", err);
    const int grey[4] = {0, 64, 128, 255};
    for (int i = 0; i < 4 && im.rgb; i++)
        EXPECT(im.rgb[3 * i] == grey[i] && im.rgb[3 * i + 1] == grey[i] && im.rgb[3 * i + 2] == grey[i],
               "grey pixel %d = %d", i, im.rgb[3 * i]);
    image_free(&im);
    EXPECT(image_load(&im, FIX "rgba_2x1.png", err, sizeof err) == 0, "%s", err);
    if (im.rgb) {
        EXPECT(px(&im, 0, 0)[0] == 255 && px(&im, 0, 0)[1] == 0, "opaque red kept");
        EXPECT(px(&im, 1, 0)[0] == 0 && px(&im, 1, 0)[1] == 0 && px(&im, 1, 0)[2] == 0,
               "transparent green composited on black: %d %d %d", px(&im, 1, 0)[0], px(&im, 1, 0)[1],
               px(&im, 1, 0)[2]);
    }
    image_free(&im);
}

static void test_jpeg(void) {
    Image im;
    if (image_load(&im, FIX "smooth_16x8.jpg", err, sizeof err)) {
        EXPECT(false, "%s", err);
        return;
    }
    EXPECT(im.w == 16 && im.h == 8, "%dx%d", im.w, im.h);
    int worst = 0;
    for (int y = 0; y < 8; y++)
        for (int x = 0; x < 16; x++) {
            const uint8_t *p = px(&im, x, y);
            int want[3] = {8 * x + 40, 12 * y + 60, 150};
            for (int c = 0; c < 3; c++) worst = MAX(worst, abs(p[c] - want[c]));
        }
    EXPECT(worst <= 4, "JPEG q95 4:4:4 of a smooth ramp: worst error %d", worst);
    image_free(&im);
}

static void test_errors(void) {
    Image im;
    EXPECT(image_load(&im, FIX "not_image.png", err, sizeof err) == -1 &&
               !strcmp(err, FIX "not_image.png: not a PNG or JPEG image"),
           "%s", err);
    EXPECT(image_load(&im, FIX "none.png", err, sizeof err) == -1 &&
               !strcmp(err, FIX "none.png: cannot open: No such file or directory"),
           "%s", err);
    EXPECT(image_load(&im, FIX "truncated.png", err, sizeof err) == -1 &&
               !strncmp(err, FIX "truncated.png: bad PNG: ", strlen(FIX "truncated.png: bad PNG: ")),
           "%s", err);
    EXPECT(im.rgb == NULL && im.w == 0, "a failed load leaves the image zeroed");
    EXPECT(image_save_png(&(Image){1, 1, (uint8_t[3]){0}}, "/nonexistent/x.png", 1, err, sizeof err) == -1 &&
               !strcmp(err, "/nonexistent/x.png: cannot create: No such file or directory"),
           "%s", err);
}

static void test_png_round_trip(void) {
    Image a, b;
    image_init(&a, 37, 11);
    Rng r;
    rng_init(&r, 5);
    for (int i = 0; i < 37 * 11 * 3; i++) a.rgb[i] = (uint8_t)rng_below(&r, 256);
    const char *path = "build/test_image_round_trip.png";
    for (int level = 0; level <= 9; level += 9) {
        EXPECT(image_save_png(&a, path, level, err, sizeof err) == 0, "%s", err);
        EXPECT(image_load(&b, path, err, sizeof err) == 0, "%s", err);
        EXPECT(b.w == 37 && b.h == 11 && b.rgb && !memcmp(a.rgb, b.rgb, 37 * 11 * 3),
               "level %d: round trip differs", level);
        image_free(&b);
    }
    remove(path);
    image_free(&a);
}

// A grey image (all three channels v[i]) of w x h.
static Image grey(int w, int h, const int *v) {
    Image im;
    image_init(&im, w, h);
    for (int i = 0; i < w * h; i++) memset(im.rgb + 3 * i, v[i], 3);
    return im;
}

static void expect_resize(const char *what, int sw, int sh, const int *src, int dw, int dh,
                          const int *want) {
    Image s = grey(sw, sh, src), d;
    image_resize(&s, dw, dh, &d);
    for (int i = 0; i < dw * dh; i++)
        for (int c = 0; c < 3; c++)
            EXPECT(d.rgb[3 * i + c] == want[i], "%s: pixel %d channel %d = %d, expected %d", what, i,
                   c, d.rgb[3 * i + c], want[i]);
    image_free(&s);
    image_free(&d);
}

static void test_resize(void) {
    // 2 -> 4: sx = (dx + 0.5) / 2 - 0.5 = -0.25 (clamped to pixel 0), 0.25, 0.75, 1.25 (clamped).
    expect_resize("2x1 -> 4x1", 2, 1, (int[]){0, 100}, 4, 1, (int[]){0, 25, 75, 100});
    expect_resize("1x2 -> 1x4", 1, 2, (int[]){0, 100}, 1, 4, (int[]){0, 25, 75, 100});
    // 4 -> 2: sx = 0.5, 2.5: the mean of each pair.
    expect_resize("4x1 -> 2x1", 4, 1, (int[]){0, 100, 200, 250}, 2, 1, (int[]){50, 225});
    // 3x3 -> 2x2 at v = 10x + 100y: taps 0.25 and 1.75 on both axes, halves round up.
    expect_resize("3x3 -> 2x2", 3, 3, (int[]){0, 10, 20, 100, 110, 120, 200, 210, 220}, 2, 2,
                  (int[]){28, 43, 178, 193});
    // 3 -> 7: scale 3/7; tap 1 is 1/7 of the way (weights 1755 and 293 of 2048): 14.3 -> 14;
    // taps 0 and 6 lie outside the first and last pixel centres and clamp to them.
    expect_resize("3x1 -> 7x1", 3, 1, (int[]){0, 100, 200}, 7, 1,
                  (int[]){0, 14, 57, 100, 143, 186, 200});
    expect_resize("identity", 3, 1, (int[]){7, 99, 255}, 3, 1, (int[]){7, 99, 255});
    // colour channels are interpolated independently
    Image s, d;
    image_init(&s, 2, 1);
    memcpy(s.rgb, (uint8_t[]){255, 0, 10, 0, 255, 90}, 6);
    image_resize(&s, 4, 1, &d);
    EXPECT(d.rgb[3] == 191 && d.rgb[4] == 64 && d.rgb[5] == 30, "colour tap 1: %d %d %d", d.rgb[3],
           d.rgb[4], d.rgb[5]);
    image_free(&s);
    image_free(&d);
}

int main(void) {
    test_png_rgb();
    test_png_grey_and_alpha();
    test_jpeg();
    test_errors();
    test_png_round_trip();
    test_resize();
    return expect_report();
}
