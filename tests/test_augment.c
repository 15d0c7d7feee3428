/* test_augment.c -- the geometric training transforms (augment.h): boxes follow the pixels
 * through Mosaic, RandomPerspective (scale and translation as RT-DETR configures it, rotation
 * and shear too) and the whole sample pipeline; the boxes the filter drops are the ones it
 * should; close_mosaic's epoch; determinism. The images are solid rectangles (one colour per
 * class) on a grey background, so "the pixels under a box" are checkable exactly. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/base.h"
#include "tests/expect.h"
#include "trainer/data/augment.h"

#define S 64 // the sample size (imgsz)

static const uint8_t BACKGROUND[3] = {40, 40, 40};

// Class k's rectangle colour: far from the background, from 114 grey and from each other.
static void class_colour(int k, uint8_t c[3]) {
    c[0] = (uint8_t)(200 - 40 * k), c[1] = (uint8_t)(60 + 45 * k), c[2] = (uint8_t)(k & 1 ? 230 : 10);
}

static bool pixel_is(const Image *im, int x, int y, const uint8_t c[3]) {
    return !memcmp(im->rgb + ((size_t)y * im->w + x) * 3, c, 3);
}

// An S x S image with one rectangle of class k's colour over [x1, x2) x [y1, y2), and its box.
static void rect_image(Image *im, Box *box, int k, int x1, int y1, int x2, int y2) {
    image_init(im, S, S);
    for (int p = 0; p < S * S; p++)
        memcpy(im->rgb + 3 * p, BACKGROUND, 3);
    uint8_t c[3];
    class_colour(k, c);
    for (int y = y1; y < y2; y++)
        for (int x = x1; x < x2; x++)
            memcpy(im->rgb + ((size_t)y * S + x) * 3, c, 3);
    *box = (Box){.cls = k,
                 .cx = (x1 + x2) / 2.0f / S,
                 .cy = (y1 + y2) / 2.0f / S,
                 .w = (float)(x2 - x1) / S,
                 .h = (float)(y2 - y1) / S};
}

// Pixel corners xyxy of box k in an image of size w x h: every pixel whose centre is at least
// `inside` px inside is class cls's colour; the pixels `outside` px beyond each edge (where
// still in the image) are not. Returns whether all held.
static bool box_follows_pixels(const Image *im, const float *b, int cls, int inside, int outside) {
    uint8_t c[3];
    class_colour(cls, c);
    bool ok = true;
    for (int y = (int)(b[1] + inside); y < (int)(b[3] - inside); y++)
        for (int x = (int)(b[0] + inside); x < (int)(b[2] - inside); x++)
            ok &= pixel_is(im, x, y, c);
    int cx = (int)((b[0] + b[2]) / 2), cy = (int)((b[1] + b[3]) / 2);
    int left = (int)b[0] - outside, right = (int)b[2] + outside - 1;
    int top = (int)b[1] - outside, bottom = (int)b[3] + outside - 1;
    if (left >= 0) ok &= !pixel_is(im, left, cy, c);
    if (right < im->w) ok &= !pixel_is(im, right, cy, c);
    if (top >= 0) ok &= !pixel_is(im, cx, top, c);
    if (bottom < im->h) ok &= !pixel_is(im, cx, bottom, c);
    return ok;
}

static void test_mosaic(void) {
    int kept_total = 0, cut_total = 0;
    for (uint64_t seed = 0; seed < 40; seed++) {
        Image im[4], canvas;
        Box box[4];
        // four tiles, one rectangle each at different places (class = tile)
        rect_image(&im[0], &box[0], 0, 8, 8, 30, 24);
        rect_image(&im[1], &box[1], 1, 36, 4, 60, 20);
        rect_image(&im[2], &box[2], 2, 4, 40, 20, 60);
        rect_image(&im[3], &box[3], 3, 30, 30, 50, 50);
        Image *tiles[4] = {&im[0], &im[1], &im[2], &im[3]};
        const Box *boxes[4] = {&box[0], &box[1], &box[2], &box[3]};
        int counts[4] = {1, 1, 1, 1}, cls[4];
        float xyxy[16];
        Rng rng;
        rng_init(&rng, seed);
        int n = augment_mosaic4(tiles, boxes, counts, &rng, &canvas, cls, xyxy);
        EXPECT(canvas.w == 2 * S && canvas.h == 2 * S, "the canvas is 2s x 2s");
        // tile 0 sits left of and above the centre, tile 3 right of and below it: the drawn
        // centre (xc, yc) in [s/2, 3s/2) is where their corners meet
        for (int k = 0; k < n; k++) {
            EXPECT(box_follows_pixels(&canvas, xyxy + 4 * k, cls[k], 0, 1),
                   "seed %llu: box of class %d [%.1f %.1f %.1f %.1f] is not over its rectangle",
                   (unsigned long long)seed, cls[k], xyxy[4 * k], xyxy[4 * k + 1],
                   xyxy[4 * k + 2], xyxy[4 * k + 3]);
            EXPECT(xyxy[4 * k] >= 0 && xyxy[4 * k + 2] <= 2 * S && xyxy[4 * k + 1] >= 0 &&
                       xyxy[4 * k + 3] <= 2 * S,
                   "clipped to the canvas");
        }
        // a rectangle cut off by the canvas edge has no box; one that shows has a box
        for (int t = 0; t < 4; t++) {
            uint8_t c[3];
            class_colour(t, c);
            bool shown = false, boxed = false;
            for (int p = 0; p < 4 * S * S && !shown; p++)
                shown = !memcmp(canvas.rgb + 3 * p, c, 3);
            for (int k = 0; k < n; k++)
                boxed |= cls[k] == t;
            EXPECT(shown == boxed, "seed %llu: class %d %s but %s", (unsigned long long)seed, t,
                   shown ? "shows" : "is cut off", boxed ? "has a box" : "has none");
            cut_total += !shown;
        }
        kept_total += n;
        for (int t = 0; t < 4; t++)
            image_free(&im[t]);
        image_free(&canvas);
    }
    printf("mosaic: 40 canvases, %d boxes kept, %d rectangles cut off by the edge\n", kept_total,
           cut_total);
    EXPECT(kept_total > 100 && cut_total > 0, "the draws vary the centre");
}

static void test_perspective(void) {
    // RT-DETR's configuration (translate 0.1, scale 0.5), then rotation and shear as well
    const AugmentConfig configs[] = {{.translate = 0.1f, .scale = 0.5f},
                                     {.degrees = 30, .translate = 0.1f, .scale = 0.3f, .shear = 5}};
    for (int c = 0; c < 2; c++) {
        int kept = 0;
        for (uint64_t seed = 0; seed < 40; seed++) {
            Image im;
            Box box;
            rect_image(&im, &box, 1, 20, 16, 44, 40);
            int cls[1] = {1};
            float xyxy[4] = {20, 16, 44, 40};
            Rng rng;
            rng_init(&rng, seed);
            int n = augment_perspective(&configs[c], &im, 0, cls, xyxy, 1, &rng);
            EXPECT(im.w == S && im.h == S, "border 0 keeps the size");
            if (n == 1) {
                kept++;
                // scale and translation map the rectangle onto its box to within 2 px: 1 of
                // interpolation at the edges, and up to the scale (0.5-1.5) because, as in
                // Ultralytics, box corners are continuous (pixel i spans [i, i+1)) while the
                // warp maps pixel indices; a rotation's box is the rotated rectangle's
                // bounding box, so only its middle is the rectangle's colour
                if (c == 0)
                    EXPECT(box_follows_pixels(&im, xyxy, 1, 2, 3), "seed %llu: [%.1f %.1f %.1f %.1f]",
                           (unsigned long long)seed, xyxy[0], xyxy[1], xyxy[2], xyxy[3]);
                uint8_t col[3];
                class_colour(1, col);
                EXPECT(pixel_is(&im, (int)((xyxy[0] + xyxy[2]) / 2), (int)((xyxy[1] + xyxy[3]) / 2),
                                col),
                       "config %d seed %llu: the box's centre is the rectangle's colour", c,
                       (unsigned long long)seed);
            }
            image_free(&im);
        }
        EXPECT(kept >= 35, "config %d: %d of 40 boxes kept (a 24-px square near the middle)", c,
               kept);
    }
    // Mosaic's border: a 2s canvas comes out s x s
    Image big;
    image_init(&big, 2 * S, 2 * S);
    memset(big.rgb, 7, (size_t)4 * S * S * 3);
    AugmentConfig rt = {.translate = 0.1f, .scale = 0.5f};
    Rng rng;
    rng_init(&rng, 3);
    augment_perspective(&rt, &big, -S / 2, NULL, NULL, 0, &rng);
    EXPECT(big.w == S && big.h == S, "border -s/2 crops 2s to s: %dx%d", big.w, big.h);
    image_free(&big);
    // box_candidates: a box that leaves the image, or shrinks under 2 px, is dropped
    AugmentConfig shrink = {.translate = 0, .scale = 0.9f};
    int kept_tiny = 0;
    for (uint64_t seed = 0; seed < 40; seed++) {
        Image im;
        image_init(&im, S, S);
        memset(im.rgb, 40, (size_t)S * S * 3);
        int cls[2] = {0, 1};
        float xyxy[8] = {30, 30, 33, 33, /* a 3-px box */ 0, 0, 64, 64};
        Rng r;
        rng_init(&r, seed);
        int n = augment_perspective(&shrink, &im, 0, cls, xyxy, 2, &r);
        // the whole-image box always survives (clipped, at least 10 % of the scaled area)
        EXPECT(n >= 1 && cls[n - 1] == 1, "seed %llu: the big box survives", (unsigned long long)seed);
        kept_tiny += n == 2;
        image_free(&im);
    }
    EXPECT(kept_tiny > 0 && kept_tiny < 40, "the 3-px box survives only when scaled up: %d of 40",
           kept_tiny);
}

// The whole pipeline on a dataset on disk: 4 images of one rectangle each (class = image).
static void test_sample(void) {
    char dir[] = "/tmp/test_augment.XXXXXX";
    if (!mkdtemp(dir)) {
        EXPECT(0, "mkdtemp %s: %s", dir, strerror(errno));
        return;
    }
    Dataset ds = {.n_images = 4}; // no class names: nc 0
    ds.image_paths = xmalloc(sizeof(char *) * 4);
    ds.box_start = xmalloc(sizeof(int) * 5);
    ds.boxes = xmalloc(sizeof(Box) * 4);
    const int rects[4][4] = {{8, 8, 30, 24}, {36, 4, 60, 20}, {4, 40, 20, 60}, {30, 30, 50, 50}};
    char err[512];
    for (int k = 0; k < 4; k++) {
        Image im;
        rect_image(&im, &ds.boxes[k], k, rects[k][0], rects[k][1], rects[k][2], rects[k][3]);
        char path[256];
        snprintf(path, sizeof path, "%s/%d.png", dir, k);
        EXPECT(image_save_png(&im, path, 1, err, sizeof err) == 0, "%s", err);
        ds.image_paths[k] = xstrdup(path);
        ds.box_start[k] = k;
        image_free(&im);
    }
    ds.box_start[4] = 4;
    AugmentConfig cfg = augment_default();
    cfg.hsv_h = cfg.hsv_s = cfg.hsv_v = 0; // colours stay checkable
    int mosaics = 0, total = 0;
    for (uint64_t seed = 0; seed < 30; seed++) {
        Image im;
        Box *boxes = xmalloc(sizeof(Box)), unused;
        rect_image(&im, &unused, 0, 8, 8, 30, 24); // sample 0, stretched already (S x S)
        boxes[0] = ds.boxes[0];
        int n = 1;
        Rng rng;
        rng_init(&rng, seed);
        Rng copy = rng;
        bool mosaic = rng_uniform(&copy) <= cfg.mosaic;
        mosaics += mosaic;
        EXPECT(augment_sample(&cfg, &ds, &im, &boxes, &n, &rng, err, sizeof err) == 0, "%s", err);
        EXPECT(im.w == S && im.h == S, "the sample is s x s");
        for (int k = 0; k < n; k++) {
            const Box *b = &boxes[k];
            float xyxy[4] = {(b->cx - b->w / 2) * S, (b->cy - b->h / 2) * S,
                             (b->cx + b->w / 2) * S, (b->cy + b->h / 2) * S};
            EXPECT(box_follows_pixels(&im, xyxy, b->cls, 2, 3),
                   "seed %llu: class %d box [%.1f %.1f %.1f %.1f] is not over its rectangle",
                   (unsigned long long)seed, b->cls, xyxy[0], xyxy[1], xyxy[2], xyxy[3]);
        }
        total += n;
        free(boxes);
        image_free(&im);
    }
    printf("pipeline: 30 samples, %d mosaics, %d boxes\n", mosaics, total);
    EXPECT(mosaics == 30, "mosaic = 1.0: every sample is a mosaic (%d)", mosaics);
    EXPECT(total > 30, "a mosaic holds more than the sample's own box: %d boxes", total);
    // mosaic 0: the sample's own box only, through the affine (no partner is loaded)
    AugmentConfig plain = cfg;
    plain.mosaic = 0;
    Image im;
    Box *boxes = xmalloc(sizeof(Box)), unused;
    rect_image(&im, &unused, 0, 8, 8, 30, 24);
    boxes[0] = ds.boxes[0];
    int n = 1;
    free(ds.image_paths[1]);
    ds.image_paths[1] = xstrdup("/nonexistent/1.png"); // a partner load would fail
    Rng rng;
    rng_init(&rng, 5);
    EXPECT(augment_sample(&plain, &ds, &im, &boxes, &n, &rng, err, sizeof err) == 0 && n <= 1 &&
               (n == 0 || boxes[0].cls == 0),
           "mosaic 0 loads no partner: %s", err);
    free(boxes);
    image_free(&im);
    // a partner that cannot be read is the loader's error, in one line
    int failures = 0;
    for (uint64_t seed = 0; seed < 10; seed++) {
        rect_image(&im, &unused, 0, 8, 8, 30, 24);
        boxes = xmalloc(sizeof(Box));
        boxes[0] = ds.boxes[0];
        n = 1;
        rng_init(&rng, seed);
        if (augment_sample(&cfg, &ds, &im, &boxes, &n, &rng, err, sizeof err)) {
            failures++;
            EXPECT(!strcmp(err, "/nonexistent/1.png: cannot open: No such file or directory"), "%s",
                   err);
        }
        image_free(&im); // the result, or on failure the caller's image, untouched
        free(boxes);
    }
    EXPECT(failures > 0, "some mosaic drew partner 1 in 10 seeds");
    for (int k = 0; k < 4; k++) {
        char path[256];
        snprintf(path, sizeof path, "%s/%d.png", dir, k);
        unlink(path);
    }
    rmdir(dir);
    dataset_free(&ds);
}

static void test_close_mosaic(void) {
    AugmentConfig c = augment_default(); // close_mosaic 10
    EXPECT(augment_mosaic_on(&c, 0, 100) && augment_mosaic_on(&c, 89, 100), "on before epoch 90");
    EXPECT(!augment_mosaic_on(&c, 90, 100) && !augment_mosaic_on(&c, 99, 100),
           "off from epoch 90 of 100 (the last 10)");
    // BaseTrainer closes it at epoch == epochs - close_mosaic: never reached when negative
    EXPECT(augment_mosaic_on(&c, 0, 5) && augment_mosaic_on(&c, 4, 5), "epochs 5 < 10: always on");
    EXPECT(!augment_mosaic_on(&c, 0, 10), "epochs == close_mosaic: off from epoch 0");
    c.close_mosaic = 0;
    EXPECT(augment_mosaic_on(&c, 99, 100), "close_mosaic 0: never closed");
    c.mosaic = 0;
    EXPECT(!augment_mosaic_on(&c, 0, 100), "mosaic 0: never on");
}

int main(void) {
    test_mosaic();
    test_perspective();
    test_sample();
    test_close_mosaic();
    return expect_report();
}
