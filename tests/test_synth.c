/* test_synth.c -- the synthetic dataset: rendering is deterministic per seed, boxes lie in the
 * image with the documented sizes, every class occurs, empty images have no boxes; a
 * generated dataset has the documented split,
 * empty fraction and files, and reads back through dataset_load_yaml with the class names.
 * Writes under build/ (removed at the end). */
#include <dirent.h>
#include <stdbool.h>
#include <sys/stat.h>

#include "kernels/base.h"
#include "tests/expect.h"
#include "trainer/data/dataset.h"
#include "trainer/data/synth.h"

static char err[1024];

static void test_render(void) {
    Image a, b, c;
    Box ba[SYNTH_MAX_OBJECTS], bb[SYNTH_MAX_OBJECTS], bc[SYNTH_MAX_OBJECTS];
    int na, nb, nc;
    synth_render(9, 64, 3, false, &a, ba, &na);
    synth_render(9, 64, 3, false, &b, bb, &nb);
    synth_render(10, 64, 3, false, &c, bc, &nc);
    EXPECT(na == nb && !memcmp(a.rgb, b.rgb, 64 * 64 * 3) && !memcmp(ba, bb, sizeof(Box) * na),
           "same seed, same image and boxes");
    EXPECT(memcmp(a.rgb, c.rgb, 64 * 64 * 3) != 0, "another seed, another image");
    image_free(&a), image_free(&b), image_free(&c);

    int total = 0, hist[6] = {0};
    for (uint64_t seed = 0; seed < 200; seed++) {
        Image im;
        Box boxes[SYNTH_MAX_OBJECTS];
        int n;
        synth_render(seed, 96, 6, false, &im, boxes, &n);
        EXPECT(n >= 1 && n <= SYNTH_MAX_OBJECTS, "seed %llu: %d objects", (unsigned long long)seed, n);
        for (int k = 0; k < n; k++) {
            const Box *bx = &boxes[k];
            EXPECT(bx->cls >= 0 && bx->cls < 6 && bx->w >= 0.1f && bx->w <= 0.41f &&
                       bx->cx - bx->w / 2 >= 0 && bx->cx + bx->w / 2 <= 1 && bx->cy - bx->h / 2 >= 0 &&
                       bx->cy + bx->h / 2 <= 1,
                   "seed %llu box %d: %d %g %g %g %g", (unsigned long long)seed, k, bx->cls, bx->cx,
                   bx->cy, bx->w, bx->h);
            hist[bx->cls]++;
        }
        total += n;
        image_free(&im);
    }
    for (int k = 0; k < 6; k++) EXPECT(hist[k] > total / 12, "class %d: %d of %d boxes", k, hist[k], total);
    Image e;
    Box eb[SYNTH_MAX_OBJECTS];
    int en = -1;
    synth_render(3, 64, 3, true, &e, eb, &en);
    EXPECT(en == 0, "an empty image has no boxes");
    image_free(&e);

    char name[64];
    synth_class_name(1, 3, name, sizeof name);
    EXPECT(!strcmp(name, "ellipse"), "%s", name);
    synth_class_name(5, 6, name, sizeof name);
    EXPECT(!strcmp(name, "green_triangle"), "%s", name);
}

static int count_files(const char *dir, const char *suffix, int *empty_files) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 4, suffix)) continue;
        n++;
        if (empty_files) {
            char path[512];
            struct stat st;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            if (stat(path, &st) == 0 && st.st_size == 0) (*empty_files)++;
        }
    }
    closedir(d);
    return n;
}

static void test_generate(void) {
    const char *out = "build/test_synth_out";
    (void)system("rm -rf build/test_synth_out");
    SynthConfig cfg = {.out = out, .n = 52, .imgsz = 48, .classes = 6, .empty = 0.25, .seed = 5};
    SynthSummary sum;
    if (synth_generate(&cfg, &sum, err, sizeof err)) {
        EXPECT(false, "%s", err);
        return;
    }
    // val = round(52 / 5) = 10, train 42; empty round(0.25 * 42) = 11 (10.5 rounds away) + 3 (2.5)
    EXPECT(sum.n_train == 42 && sum.n_val == 10 && sum.n_empty == 14, "split %d/%d, %d empty",
           sum.n_train, sum.n_val, sum.n_empty);
    int empty_train = 0, empty_val = 0;
    EXPECT(count_files("build/test_synth_out/images/train", ".png", NULL) == 42, "train pngs");
    EXPECT(count_files("build/test_synth_out/images/val", ".png", NULL) == 10, "val pngs");
    EXPECT(count_files("build/test_synth_out/labels/train", ".txt", &empty_train) == 42 && empty_train == 11,
           "train labels: %d empty", empty_train);
    EXPECT(count_files("build/test_synth_out/labels/val", ".txt", &empty_val) == 10 && empty_val == 3,
           "val labels: %d empty", empty_val);

    Dataset tr, va;
    EXPECT(dataset_load_yaml(&tr, "build/test_synth_out/data.yaml", "train", err, sizeof err) == 0, "%s", err);
    EXPECT(dataset_load_yaml(&va, "build/test_synth_out/data.yaml", "val", err, sizeof err) == 0, "%s", err);
    EXPECT(tr.n_images == 42 && va.n_images == 10 && tr.nc == 6 && !strcmp(tr.names[3], "green_rectangle"),
           "data.yaml reads back: %d/%d images, nc %d", tr.n_images, va.n_images, tr.nc);
    EXPECT(tr.box_start[tr.n_images] + va.box_start[va.n_images] == sum.n_boxes, "box count");
    int background = 0;
    for (int i = 0; i < tr.n_images; i++) background += tr.box_start[i + 1] == tr.box_start[i];
    EXPECT(background == 11, "train background images %d", background);
    dataset_free(&tr), dataset_free(&va);

    EXPECT(synth_generate(&cfg, &sum, err, sizeof err) == -1 &&
               !strcmp(err, "build/test_synth_out: already holds images (expected a new or empty folder)"),
           "%s", err);
    (void)system("rm -rf build/test_synth_out");
}

int main(void) {
    test_render();
    test_generate();
    return expect_report();
}
