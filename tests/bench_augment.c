/* bench_augment.c -- what the training transforms cost the data loader: batch_load of 16
 * images at 128 px (synth, 3 classes) with HSV and the flip only (the trainer before Mosaic
 * and RandomPerspective) against Ultralytics' full RT-DETR transforms (augment_default(): each
 * sample decodes and stretches three mosaic partners too, then the warp). Alternates the two
 * (ABAB, 15 pairs) so that a shared machine's load falls on both alike; prints the medians and
 * their ratio. `BENCH=augment make bench`; timings are never asserted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/base.h"
#include "trainer/data/augment.h"
#include "trainer/data/batch.h"
#include "trainer/data/dataset.h"
#include "trainer/data/synth.h"

#define PAIRS 15
#define BATCH 16
#define IMGSZ 128

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double load_once(const Dataset *ds, const AugmentConfig *cfg, int rep, int *boxes) {
    int64_t idx[BATCH];
    for (int i = 0; i < BATCH; i++)
        idx[i] = (rep * BATCH + i) % ds->n_images;
    Batch b;
    char err[512];
    double t0 = now_s();
    CHECK(batch_load(&b, ds, idx, BATCH, IMGSZ, cfg, (uint64_t)rep, err, sizeof err) == 0, "%s",
          err);
    double dt = now_s() - t0;
    *boxes += b.n_boxes;
    batch_free(&b);
    return dt;
}

int main(void) {
    char dir[64] = "/tmp/bench_augment.XXXXXX", data[128], yaml[160], err[1024];
    CHECK(mkdtemp(dir), "mkdtemp");
    snprintf(data, sizeof data, "%s/synth", dir);
    SynthConfig sc = {.out = data, .n = 80, .imgsz = IMGSZ, .classes = 3, .empty = 0.1, .seed = 0};
    SynthSummary sum;
    CHECK(synth_generate(&sc, &sum, err, sizeof err) == 0, "synth: %s", err);
    snprintf(yaml, sizeof yaml, "%s/data.yaml", data);
    Dataset ds;
    CHECK(dataset_load_yaml(&ds, yaml, "train", err, sizeof err) == 0, "%s", err);
    AugmentConfig full = augment_default(), colour = {.hsv_h = full.hsv_h,
                                                      .hsv_s = full.hsv_s,
                                                      .hsv_v = full.hsv_v,
                                                      .fliplr = full.fliplr};
    double a[PAIRS], b[PAIRS];
    int boxes_a = 0, boxes_b = 0;
    for (int r = 0; r < PAIRS; r++) {
        a[r] = load_once(&ds, &colour, r, &boxes_a);
        b[r] = load_once(&ds, &full, r, &boxes_b);
    }
    qsort(a, PAIRS, sizeof *a, cmp_double);
    qsort(b, PAIRS, sizeof *b, cmp_double);
    printf("bench_augment: batch_load of %d images at %d px, median of %d (ABAB)\n", BATCH, IMGSZ,
           PAIRS);
    printf("  HSV + flip only            %7.2f ms  (%.1f boxes a batch)\n", a[PAIRS / 2] * 1e3,
           (double)boxes_a / PAIRS);
    printf("  Mosaic + RandomPerspective + HSV + flip  %7.2f ms  (%.1f boxes a batch)\n",
           b[PAIRS / 2] * 1e3, (double)boxes_b / PAIRS);
    printf("  ratio %.2f\n", b[PAIRS / 2] / a[PAIRS / 2]);
    dataset_free(&ds);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench_augment: could not remove %s\n", dir);
    return 0;
}
