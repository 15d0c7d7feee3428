/* test_data.c -- the dataset readers and the per-sample pipeline: YOLO label files (every bad
 * input with its exact line, missing = background, duplicates dropped), img2label_paths, data
 * yaml resolution (path, lists, .txt lists, names list/mapping, nc), COCO json (category
 * order, crowd/empty boxes skipped, clipping, malformed json with its position), the
 * colour and flip augmentations (OpenCV HSV values, LUT draws, flip of pixels and boxes,
 * determinism; Mosaic and RandomPerspective are test_augment's) and
 * batch collation. Fixtures: tests/fixtures/data. Run from the repository root. */
#include <stdbool.h>

#include "kernels/base.h"
#include "tests/expect.h"
#include "trainer/data/augment.h"
#include "trainer/data/batch.h"
#include "trainer/data/dataset.h"
#include "trainer/data/json.h"

#define FIX "tests/fixtures/data/"

static char err[1024];

static void expect_label_error(const char *file, int nc, const char *want) {
    Box *b;
    int n;
    int rc = labels_read(file, nc, &b, &n, err, sizeof err);
    EXPECT(rc == -1 && n == 0 && b == NULL && !strcmp(err, want), "%s:\n  got      %s\n  expected %s",
           file, rc ? err : "success", want);
}

static void test_labels(void) {
    Box *b;
    int n = -1;
    EXPECT(labels_read(FIX "yolo/labels/train/a.txt", 2, &b, &n, err, sizeof err) == 0, "%s", err);
    EXPECT(n == 2, "a.txt: 3 rows, one a duplicate: got %d boxes", n);
    if (n == 2) {
        EXPECT(b[0].cls == 0 && b[0].cx == 0.5f && b[0].cy == 0.5f && b[0].w == 0.25f && b[0].h == 0.5f,
               "box 0");
        EXPECT(b[1].cls == 1 && b[1].cx == 0.1f && b[1].h == 0.2f, "box 1");
    }
    free(b);
    EXPECT(labels_read(FIX "labels/none.txt", 2, &b, &n, err, sizeof err) == 0 && n == 0 && !b,
           "a missing label file is a background image");
    EXPECT(labels_read(FIX "labels/empty.txt", 2, &b, &n, err, sizeof err) == 0 && n == 0 && !b,
           "an empty label file is a background image");
    expect_label_error(FIX "labels/columns.txt", 2,
                       FIX "labels/columns.txt:1: expected 5 columns (cls cx cy w h), got 4");
    expect_label_error(FIX "labels/segment.txt", 2,
                       FIX "labels/segment.txt:1: expected 5 columns (cls cx cy w h), got 7");
    expect_label_error(FIX "labels/number.txt", 2,
                       FIX "labels/number.txt:2: column 3: expected a number, got 'abc'");
    expect_label_error(FIX "labels/class_range.txt", 2,
                       FIX "labels/class_range.txt:1: class '2' is not an integer in [0, 2)");
    expect_label_error(FIX "labels/class_fraction.txt", 2,
                       FIX "labels/class_fraction.txt:1: class '0.5' is not an integer in [0, 2)");
    expect_label_error(FIX "labels/coord_range.txt", 2,
                       FIX "labels/coord_range.txt:3: cy = 1.25 is outside [0, 1] (labels are normalised)");
}

static void expect_label_path(const char *image, const char *want) {
    char out[256];
    label_path_for_image(image, out, sizeof out);
    EXPECT(!strcmp(out, want), "%s -> %s, expected %s", image, out, want);
}

static void test_label_paths(void) {
    expect_label_path("d/images/train/x.png", "d/labels/train/x.txt");
    expect_label_path("/a/images/b/images/c.v1.jpg", "/a/images/b/labels/c.v1.txt"); // the last /images/
    expect_label_path("d/pics/x.jpeg", "d/pics/x.txt");
    expect_label_path("d.v2/images/x", "d.v2/labels/x.txt");
}

static void test_data_yaml(void) {
    Dataset ds;
    if (dataset_load_yaml(&ds, FIX "yolo/data.yaml", "train", err, sizeof err)) {
        EXPECT(false, "%s", err);
        return;
    }
    EXPECT(ds.n_images == 3, "train: %d images (a.png, b.png, sub/c.png)", ds.n_images);
    EXPECT(ds.nc == 2 && !strcmp(ds.names[0], "cat") && !strcmp(ds.names[1], "dog"),
           "names mapping in any order");
    if (ds.n_images == 3) {
        EXPECT(!strcmp(ds.image_paths[0], FIX "yolo/images/train/a.png") &&
                   !strcmp(ds.image_paths[2], FIX "yolo/images/train/sub/c.png"),
               "sorted, relative to the yaml's folder: %s, %s", ds.image_paths[0], ds.image_paths[2]);
        EXPECT(ds.box_start[1] == 2 && ds.box_start[2] == 2 && ds.box_start[3] == 2,
               "a: 2 boxes, b (no label file) and c (empty file): none");
    }
    dataset_free(&ds);
    EXPECT(dataset_load_yaml(&ds, FIX "yolo/data.yaml", "val", err, sizeof err) == 0, "%s", err);
    EXPECT(ds.n_images == 1 && !strcmp(ds.image_paths[0], FIX "yolo/images/val/v.png") &&
               ds.box_start[1] == 1 && ds.boxes[0].cls == 1 && ds.boxes[0].cx == 0.75f,
           "val from a .txt list with ./ entries");
    dataset_free(&ds);
    EXPECT(dataset_load_yaml(&ds, FIX "names_list.yaml", "val", err, sizeof err) == 0, "%s", err);
    EXPECT(ds.n_images == 2 && ds.nc == 2 && !strcmp(ds.names[1], "dog"),
           "val as a list of a folder and a .txt list: %d images", ds.n_images);
    dataset_free(&ds);
    EXPECT(dataset_load_yaml(&ds, FIX "nc_only.yaml", "train", err, sizeof err) == 0 && ds.nc == 2 &&
               !strcmp(ds.names[1], "class1"),
           "nc alone names the classes: %s", err);
    dataset_free(&ds);
    DataYaml y;
    EXPECT(data_yaml_load(&y, FIX "yolo/data.yaml", err, sizeof err) == 0 && !strcmp(y.root, FIX "yolo") &&
               y.n_train == 1 && !strcmp(y.train[0], FIX "yolo/images/train") &&
               !strcmp(y.val[0], FIX "yolo/val.txt"),
           "path: . resolves to the yaml's folder: %s", y.root ? y.root : err);
    data_yaml_free(&y);

    struct { const char *file, *want; } bad[] = {
        {"bad_nc.yaml", FIX "bad_nc.yaml:4: nc is 3 but names has 2 entries"},
        {"missing_train.yaml",
         FIX "missing_train.yaml: missing 'train' (a folder, a .txt list, or a list of those)"},
        {"bad_names.yaml", FIX "bad_names.yaml:5: names: expected the class indices 0..1 as keys, got '2'"},
        {"malformed.yaml", FIX "malformed.yaml:4: malformed yaml: did not find expected ',' or ']'"},
        {"missing_folder.yaml",
         FIX "missing_folder.yaml: train: '" FIX "yolo/images/nowhere' does not exist"},
        {"none.yaml", FIX "none.yaml: cannot open: No such file or directory"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char path[256];
        snprintf(path, sizeof path, FIX "%s", bad[i].file);
        int rc = dataset_load_yaml(&ds, path, "train", err, sizeof err);
        EXPECT(rc == -1 && !strcmp(err, bad[i].want), "%s:\n  got      %s\n  expected %s",
               bad[i].file, rc ? err : "success", bad[i].want);
    }
}

static void test_json(void) {
    Json v;
    const char *text = "{\"a\": [1, -2.5e1, true, null], \"s\": \"x\\u00e9\\n\\ud83d\\ude00\"}";
    EXPECT(json_parse(&v, "t.json", text, strlen(text), err, sizeof err) == 0, "%s", err);
    const Json *a = json_get(&v, "a"), *s = json_get(&v, "s");
    EXPECT(a && a->n == 4 && a->items[1].number == -25 && a->items[2].boolean &&
               a->items[3].type == JSON_NULL,
           "array values");
    EXPECT(s && !strcmp(s->string, "x\xc3\xa9\n\xf0\x9f\x98\x80"), "escapes and surrogate pairs");
    json_free(&v);
    struct { const char *text, *want; } bad[] = {
        {"{\"a\": 1,}", "t.json:1:9: expected a string key, got '}'"},
        {"[1 2]", "t.json:1:4: expected ',' or ']' in an array, got '2'"},
        {"{\"a\"\n  1}", "t.json:2:3: expected ':' after a key, got '1'"},
        {"[01]", "t.json:1:3: expected ',' or ']' in an array, got '1'"},
        {"\"abc", "t.json:1:1: unterminated string"},
        {"[1] x", "t.json:1:5: expected the end of the file, got 'x'"},
        {"", "t.json:1:1: expected a value, got the end of the file"},
        {"[tru]", "t.json:1:2: expected a value, got 't'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = json_parse(&v, "t.json", bad[i].text, strlen(bad[i].text), err, sizeof err);
        EXPECT(rc == -1 && !strcmp(err, bad[i].want), "'%s':\n  got      %s\n  expected %s",
               bad[i].text, rc ? err : "success", bad[i].want);
    }
}

static void test_coco(void) {
    Dataset ds;
    if (dataset_load_coco(&ds, FIX "coco.json", "imgs", err, sizeof err)) {
        EXPECT(false, "%s", err);
        return;
    }
    EXPECT(ds.nc == 2 && !strcmp(ds.names[0], "cat") && !strcmp(ds.names[1], "dog"),
           "classes in ascending category id (3 cat, 7 dog)");
    EXPECT(ds.n_images == 2 && !strcmp(ds.image_paths[0], "imgs/a.png") &&
               !strcmp(ds.image_paths[1], "imgs/b.jpg"),
           "images in json order");
    EXPECT(ds.box_start[1] == 2 && ds.box_start[2] == 3, "a: 2 boxes (crowd, zero width skipped), b: 1");
    if (ds.box_start[2] == 3) {
        const Box *b = ds.boxes;
        // [20, 10, 40, 30] in 200 x 100 -> centre (40, 25), size 40 x 30
        EXPECT(b[0].cls == 1 && b[0].cx == 0.2f && b[0].cy == 0.25f && b[0].w == 0.2f && b[0].h == 0.3f,
               "box 0: %d %g %g %g %g", b[0].cls, b[0].cx, b[0].cy, b[0].w, b[0].h);
        // [180, 50, 40, 60] clipped to x 180..200, y 50..100
        EXPECT(b[1].cls == 0 && b[1].cx == 0.95f && b[1].cy == 0.75f && b[1].w == 0.1f && b[1].h == 0.5f,
               "box 1 clipped: %g %g %g %g", b[1].cx, b[1].cy, b[1].w, b[1].h);
        EXPECT(b[2].cls == 0 && b[2].cx == 0.25f && b[2].w == 0.5f && b[2].h == 1.0f, "box 2");
    }
    dataset_free(&ds);
    EXPECT(dataset_load_coco(&ds, FIX "coco_malformed.json", "i", err, sizeof err) == -1 &&
               !strcmp(err, FIX "coco_malformed.json:3:36: expected ',' or '}' in an object, got '\"'"),
           "%s", err);
    EXPECT(dataset_load_coco(&ds, FIX "coco_bad_image.json", "i", err, sizeof err) == -1 &&
               !strcmp(err, FIX "coco_bad_image.json:2:31: annotations[0].image_id: no image has id 2"),
           "%s", err);
}

static void test_hsv_conversions(void) {
    struct { uint8_t rgb[3], hsv[3]; } known[] = {
        {{255, 0, 0}, {0, 255, 255}},   {{0, 255, 0}, {60, 255, 255}},
        {{0, 0, 255}, {120, 255, 255}}, {{128, 128, 128}, {0, 0, 128}},
        {{255, 128, 0}, {15, 255, 255}}, {{255, 0, 128}, {165, 255, 255}},
    };
    for (size_t i = 0; i < sizeof known / sizeof *known; i++) {
        uint8_t hsv[3], rgb[3];
        augment_rgb_to_hsv(known[i].rgb, hsv);
        EXPECT(!memcmp(hsv, known[i].hsv, 3), "rgb %d %d %d -> hsv %d %d %d", known[i].rgb[0],
               known[i].rgb[1], known[i].rgb[2], hsv[0], hsv[1], hsv[2]);
        augment_hsv_to_rgb(known[i].hsv, rgb);
        EXPECT(abs(rgb[0] - known[i].rgb[0]) <= 1 && abs(rgb[1] - known[i].rgb[1]) <= 1 &&
                   abs(rgb[2] - known[i].rgb[2]) <= 1,
               "hsv back to rgb %d %d %d", rgb[0], rgb[1], rgb[2]);
    }
    int worst = 0;
    for (int r = 0; r < 256; r += 15)
        for (int g = 0; g < 256; g += 15)
            for (int b = 0; b < 256; b += 15) {
                uint8_t in[3] = {(uint8_t)r, (uint8_t)g, (uint8_t)b}, hsv[3], out[3];
                augment_rgb_to_hsv(in, hsv);
                augment_hsv_to_rgb(hsv, out);
                for (int c = 0; c < 3; c++) worst = MAX(worst, abs(out[c] - in[c]));
            }
    EXPECT(worst <= 5, "8-bit HSV round trip (2-degree hue steps): worst error %d", worst);
}

static Image ramp_image(void) {
    Image im;
    image_init(&im, 5, 2);
    for (int i = 0; i < 30; i++) im.rgb[i] = (uint8_t)(i * 8);
    return im;
}

static void test_augment(void) {
    Image a = ramp_image(), b = ramp_image();
    Rng r;
    rng_init(&r, 1);
    Box boxes[2] = {{0, 0.2f, 0.5f, 0.1f, 0.1f}, {1, 0.9f, 0.3f, 0.2f, 0.2f}};
    EXPECT(augment_flip_lr(&a, boxes, 2, 1.0f, &r), "p = 1 always flips");
    EXPECT(!memcmp(a.rgb, b.rgb + 12, 3) && !memcmp(a.rgb + 12, b.rgb, 3) && !memcmp(a.rgb + 6, b.rgb + 6, 3),
           "row 0 mirrored, middle pixel kept");
    EXPECT(!memcmp(a.rgb + 15, b.rgb + 27, 3), "row 1 mirrored");
    EXPECT(boxes[0].cx == 0.8f && boxes[1].cx == 1.0f - 0.9f && boxes[0].cy == 0.5f && boxes[1].w == 0.2f,
           "boxes: cx -> 1 - cx, the rest kept");
    Image c = ramp_image();
    EXPECT(!augment_flip_lr(&c, boxes, 2, 0.0f, &r) && !memcmp(c.rgb, b.rgb, 30), "p = 0 never flips");
    int flips = 0;
    for (int i = 0; i < 1000; i++) flips += augment_flip_lr(&c, boxes, 0, 0.5f, &r);
    EXPECT(flips > 430 && flips < 570, "p = 0.5: %d of 1000", flips);

    // gains 0: no change and no draws
    Rng before = r;
    augment_hsv(&c, 0, 0, 0, &r);
    EXPECT(!memcmp(&before, &r, sizeof r), "zero gains draw nothing");
    // a grey pixel keeps S = 0 whatever the gains: only V' = trunc(V * r2) shows
    Image g;
    image_init(&g, 1, 1);
    memset(g.rgb, 100, 3);
    Rng copy = r;
    float draws[3];
    for (int k = 0; k < 3; k++) draws[k] = rng_range(&copy, -1.0f, 1.0f);
    augment_hsv(&g, 0.015f, 0.7f, 0.4f, &r);
    int want = (int)(100 * (draws[2] * (double)0.4f + 1));
    EXPECT(g.rgb[0] == want && g.rgb[1] == want && g.rgb[2] == want, "grey 100 -> %d, expected %d",
           g.rgb[0], want);
    EXPECT(!memcmp(&copy, &r, sizeof r), "RandomHSV draws exactly three numbers");
    image_free(&g);

    // determinism: the same seed gives the same pixels (HSV and flip; the geometric steps and
    // the whole pipeline: test_augment)
    AugmentConfig cfg = {.hsv_h = 0.015f, .hsv_s = 0.7f, .hsv_v = 0.4f, .fliplr = 0.5f};
    Image x = ramp_image(), y = ramp_image();
    Box *bx = xmalloc(sizeof(Box)), *by = xmalloc(sizeof(Box));
    bx[0] = by[0] = (Box){0, 0.3f, 0.3f, 0.2f, 0.2f};
    int nx = 1, ny = 1;
    Rng rx, ry;
    rng_init(&rx, 42), rng_init(&ry, 42);
    Dataset none = {0};
    // a 5x2 image is not square: augment_sample needs s x s; use 2x2 corners of the ramp
    image_free(&x), image_free(&y);
    image_init(&x, 2, 2), image_init(&y, 2, 2);
    memcpy(x.rgb, b.rgb, 12), memcpy(y.rgb, b.rgb, 12);
    EXPECT(augment_sample(&cfg, &none, &x, &bx, &nx, &rx, err, sizeof err) == 0 &&
               augment_sample(&cfg, &none, &y, &by, &ny, &ry, err, sizeof err) == 0,
           "%s", err);
    EXPECT(!memcmp(x.rgb, y.rgb, 12) && nx == 1 && ny == 1 && bx[0].cx == by[0].cx,
           "same seed, same augmentation");
    EXPECT(memcmp(x.rgb, b.rgb, 12) != 0, "the default gains change a colourful image");
    free(bx), free(by);
    image_free(&a), image_free(&b), image_free(&c), image_free(&x), image_free(&y);
}

static void test_batch(void) {
    Dataset ds;
    if (dataset_load_yaml(&ds, FIX "yolo/data.yaml", "train", err, sizeof err)) {
        EXPECT(false, "%s", err);
        return;
    }
    Batch b;
    int64_t idx[3] = {2, 0, 1};
    EXPECT(batch_load(&b, &ds, idx, 3, 8, NULL, 0, err, sizeof err) == 0, "%s", err);
    const size_t plane = 64;
    EXPECT(b.n_images == 3 && b.imgsz == 8 && b.orig_w[0] == 4 && b.orig_h[1] == 4, "shape");
    // image 0 is c.png (0, 0, 200): channel 2 is 200/255 everywhere, channel 0 zero
    EXPECT(b.images[2 * plane + 17] == 200 / 255.0f && b.images[5] == 0, "CHW, RGB, /255");
    // image 1 is a.png (200, 0, 0)
    EXPECT(b.images[3 * plane + 0] == 200 / 255.0f && b.images[3 * plane + plane] == 0, "image 1 red");
    EXPECT(b.counts[0] == 0 && b.counts[1] == 2 && b.counts[2] == 0 && b.n_boxes == 2, "counts");
    EXPECT(b.n_boxes == 2 && b.batch_idx[0] == 1 && b.batch_idx[1] == 1 && b.cls[1] == 1 &&
               b.boxes[0] == 0.5f && b.boxes[7] == 0.2f,
           "boxes of a.png with batch_idx 1");
    batch_free(&b);

    AugmentConfig flip = {.fliplr = 1.0f};
    int64_t one = 0;
    EXPECT(batch_load(&b, &ds, &one, 1, 8, &flip, 7, err, sizeof err) == 0 && b.boxes[0] == 0.5f &&
               b.boxes[4] == 1.0f - 0.1f,
           "fliplr 1 mirrors cx");
    batch_free(&b);
    // a sample's augmentation depends on (seed, index), not its place in the batch
    AugmentConfig cfg = augment_default();
    Batch p, q;
    int64_t order1[2] = {0, 2}, order2[2] = {2, 0};
    EXPECT(batch_load(&p, &ds, order1, 2, 8, &cfg, 3, err, sizeof err) == 0 &&
               batch_load(&q, &ds, order2, 2, 8, &cfg, 3, err, sizeof err) == 0,
           "%s", err);
    EXPECT(!memcmp(p.images, q.images + 3 * plane, sizeof(float) * 3 * plane) &&
               !memcmp(p.images + 3 * plane, q.images, sizeof(float) * 3 * plane),
           "same pixels whatever the batch order");
    batch_free(&p), batch_free(&q);
    free(ds.image_paths[1]);
    ds.image_paths[1] = xstrdup(FIX "none.png");
    int64_t all[3] = {0, 1, 2};
    EXPECT(batch_load(&b, &ds, all, 3, 8, NULL, 0, err, sizeof err) == -1 &&
               !strcmp(err, FIX "none.png: cannot open: No such file or directory") && !b.images,
           "%s", err);
    dataset_free(&ds);
}

int main(void) {
    test_labels();
    test_label_paths();
    test_data_yaml();
    test_json();
    test_coco();
    test_hsv_conversions();
    test_augment();
    test_batch();
    return expect_report();
}
