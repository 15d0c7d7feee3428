/* test_map.c -- the Ultralytics validation metrics (trainer/eval/map.h) on hand-made
 * detections, each expected number derived in the comment above it from ap_per_class /
 * compute_ap / match_predictions (Ultralytics 8.1.34). Reminders used throughout:
 * - compute_ap pads recall with 0 and 1 and precision with 1 and 0, takes the envelope
 *   (running max from the right), and integrates np.interp of it at recall 0, 0.01, ..., 1
 *   with trapezoids. np.interp at a repeated xp takes the last one, so at recall 1 the value
 *   is the padding 0: a perfect class scores 0.99 * 1 + 0.01 * (1 + 0) / 2 = 0.995.
 * - P and R are read on the 1000-point confidence axis where the mean F1 over classes,
 *   smoothed by a 101-tap box filter, first peaks; when F1 is flat from confidence 0 up to
 *   the lowest score, that is confidence 0, i.e. P and R over all of the class's predictions. */
#include <math.h>
#include <string.h>

#include "tests/expect.h"
#include "trainer/eval/map.h"

#define TOL 1e-9

typedef struct Det {
    float x1, y1, x2, y2, score;
    int32_t cls;
} Det;

typedef struct Gt {
    float x1, y1, x2, y2;
    int32_t cls;
} Gt;

static void add(MapEval *e, int n_pred, const Det *det, int n_gt, const Gt *gt) {
    float pb[64 * 4], ps[64], gb[64 * 4];
    int32_t pc[64], gc[64];
    for (int i = 0; i < n_pred; i++) {
        float b[4] = {det[i].x1, det[i].y1, det[i].x2, det[i].y2};
        memcpy(pb + 4 * i, b, sizeof b);
        ps[i] = det[i].score, pc[i] = det[i].cls;
    }
    for (int i = 0; i < n_gt; i++) {
        float b[4] = {gt[i].x1, gt[i].y1, gt[i].x2, gt[i].y2};
        memcpy(gb + 4 * i, b, sizeof b);
        gc[i] = gt[i].cls;
    }
    map_eval_add_image(e, n_pred, pb, ps, pc, n_gt, gb, gc);
}

static void expect_all_ap(const MapClass *c, double want, const char *what) {
    for (int t = 0; t < MAP_N_IOU; t++)
        EXPECT(fabs(c->ap[t] - want) <= TOL, "%s: ap[%d] = %.12g, want %.12g", what, t, c->ap[t],
               want);
    EXPECT_NEAR(c->ap50_95, want, TOL, 0);
}

// Five disjoint 10x10 squares in a row, GT i at x = 20 i.
static Gt square(int i, int cls) {
    return (Gt){20.0f * i, 0, 20.0f * i + 10, 10, cls};
}
static Det on(Gt g, float score) {
    return (Det){g.x1, g.y1, g.x2, g.y2, score, g.cls};
}

// Every GT found exactly (IoU 1 >= 0.95), all with score 0.9. Each class: recall 1/n..1,
// precision 1 -> AP 0.995 at every threshold. F1 is 1 below confidence 0.9 and 0 above, so P
// and R are 1. The 'all' row is the same.
static void test_perfect(void) {
    MapEval *e = map_eval_new(2);
    Gt gt[5] = {square(0, 0), square(1, 0), square(2, 0), square(3, 1), square(4, 1)};
    Det det[5];
    for (int i = 0; i < 5; i++)
        det[i] = on(gt[i], 0.9f);
    add(e, 5, det, 5, gt);
    MapResult r;
    map_eval_compute(e, &r);
    EXPECT(r.n_images == 1 && r.n_gt == 5 && r.n_classes_with_gt == 2, "counts");
    EXPECT(r.classes[0].n_gt == 3 && r.classes[1].n_gt == 2, "per class counts");
    for (int c = 0; c < 2; c++) {
        expect_all_ap(&r.classes[c], 0.995, "perfect");
        EXPECT_NEAR(r.classes[c].precision, 1.0, TOL, 0);
        EXPECT_NEAR(r.classes[c].recall, 1.0, TOL, 0);
    }
    EXPECT_NEAR(r.map50, 0.995, TOL, 0);
    EXPECT_NEAR(r.map75, 0.995, TOL, 0);
    EXPECT_NEAR(r.map50_95, 0.995, TOL, 0);
    EXPECT_NEAR(r.precision, 1.0, TOL, 0);
    EXPECT_NEAR(r.recall, 1.0, TOL, 0);
    map_result_free(&r);
    map_eval_free(e);
}

// One false positive (score 0.95, on no GT) above three true positives (0.9, 0.8, 0.7).
// recall 0, 1/3, 2/3, 1; precision 0, 1/2, 2/3, 3/4. Padded: mrec 0 0 1/3 2/3 1 1,
// mpre 1 0 .5 .667 .75 0 -> envelope 1 .75 .75 .75 .75 0. At recall 0 np.interp takes the
// second 0, i.e. 0.75; 0.75 up to 0.99; 0 at 1. AP = 0.99 * 0.75 + 0.01 * 0.75 / 2 = 0.74625.
// F1 below confidence 0.7 is 2 * 0.75 * 1 / 1.75 (flat), less above: P 0.75, R 1.
static void test_fp_above_tps(MapEval *e) {
    Gt gt[3] = {square(0, 0), square(1, 0), square(2, 0)};
    Det det[4] = {
        {200, 200, 210, 210, 0.95f, 0}, on(gt[0], 0.9f), on(gt[1], 0.8f), on(gt[2], 0.7f)};
    add(e, 4, det, 3, gt);
}

// Half recall: 4 GT, true positives with scores 0.9 and 0.8 only. recall 1/4, 1/2,
// precision 1, 1 -> mrec 0 .25 .5 1, envelope 1 1 1 0: 1 on [0, 0.5], then the line down to
// 0 at recall 1. AP = 0.5 + 0.5 * 1 / 2 = 0.75 (trapezoids are exact on lines; 0.5 is a grid
// point). F1 = 2 * 1 * .5 / 1.5 = 2/3 below 0.8, less above: P 1, R 0.5.
static void test_half_recall(MapEval *e, int cls) {
    Gt gt[4] = {square(0, cls), square(1, cls), square(2, cls), square(3, cls)};
    Det det[2] = {on(gt[2], 0.8f), on(gt[0], 0.9f)}; // any order: the image is sorted by score
    add(e, 2, det, 4, gt);
}

static void test_single_cases(void) {
    MapEval *e = map_eval_new(1);
    test_fp_above_tps(e);
    MapResult r;
    map_eval_compute(e, &r);
    expect_all_ap(&r.classes[0], 0.74625, "fp above tps");
    EXPECT_NEAR(r.classes[0].precision, 0.75, TOL, 0);
    EXPECT_NEAR(r.classes[0].recall, 1.0, TOL, 0);
    map_result_free(&r);
    map_eval_free(e);

    e = map_eval_new(1);
    test_half_recall(e, 0);
    map_eval_compute(e, &r);
    expect_all_ap(&r.classes[0], 0.75, "half recall");
    EXPECT_NEAR(r.classes[0].precision, 1.0, TOL, 0);
    EXPECT_NEAR(r.classes[0].recall, 0.5, TOL, 0);
    map_result_free(&r);
    map_eval_free(e);
}

// Both cases in one evaluator, in two images and two classes. Mean F1 is flat below 0.7
// (class 0's lowest score) and lower above, so P and R are read at confidence 0 for both:
// P = (0.75 + 1) / 2, R = (1 + 0.5) / 2, mAP = (0.74625 + 0.75) / 2 at every threshold.
// A third image holds only GT of class 2 and no predictions: AP, P, R 0 for it, and the
// means are over 3 classes. A prediction of class 3, which has no GT, is ignored.
static void test_all_row(void) {
    MapEval *e = map_eval_new(4);
    test_fp_above_tps(e);
    test_half_recall(e, 1);
    Gt lonely[2] = {square(0, 2), square(1, 2)};
    Det stray = {0, 0, 10, 10, 0.99f, 3};
    add(e, 1, &stray, 2, lonely);
    MapResult r;
    map_eval_compute(e, &r);
    EXPECT(r.n_images == 3 && r.n_gt == 9 && r.n_classes_with_gt == 3, "counts %lld %lld %d",
           (long long)r.n_images, (long long)r.n_gt, r.n_classes_with_gt);
    expect_all_ap(&r.classes[0], 0.74625, "class 0");
    expect_all_ap(&r.classes[1], 0.75, "class 1");
    expect_all_ap(&r.classes[2], 0.0, "class 2");
    expect_all_ap(&r.classes[3], 0.0, "class 3");
    EXPECT_NEAR(r.classes[0].precision, 0.75, TOL, 0);
    EXPECT_NEAR(r.classes[1].recall, 0.5, TOL, 0);
    EXPECT(r.classes[2].precision == 0 && r.classes[2].recall == 0, "class without predictions");
    EXPECT_NEAR(r.precision, (0.75 + 1.0 + 0.0) / 3, TOL, 0);
    EXPECT_NEAR(r.recall, (1.0 + 0.5 + 0.0) / 3, TOL, 0);
    EXPECT_NEAR(r.map50, (0.74625 + 0.75) / 3, TOL, 0);
    EXPECT_NEAR(r.map50_95, (0.74625 + 0.75) / 3, TOL, 0);
    map_result_free(&r);
    map_eval_free(e);
}

// A false positive below the true positives, in an image without GT (score 0.1) after half
// recall: recall .25 .5 .5, precision 1 1 2/3 -> mrec 0 .25 .5 .5 1, envelope 1 1 1 2/3 0.
// At recall 0.5 np.interp takes the last 0.5, i.e. 2/3: y = 1 up to 0.49, 2/3 at 0.5, then
// the line to 0 at 1. AP = 0.49 + 0.01 * (1 + 2/3) / 2 + 0.5 * (2/3) / 2 = 0.665.
static void test_fp_below(void) {
    MapEval *e = map_eval_new(1);
    test_half_recall(e, 0);
    Det fp = {50, 50, 60, 60, 0.1f, 0};
    add(e, 1, &fp, 0, NULL);
    MapResult r;
    map_eval_compute(e, &r);
    expect_all_ap(&r.classes[0], 0.49 + 0.01 * (5.0 / 3) / 2 + 0.5 * (2.0 / 3) / 2, "fp below");
    EXPECT(r.n_images == 2, "images %lld", (long long)r.n_images);
    map_result_free(&r);
    map_eval_free(e);
}

// match_predictions is not COCO's greedy matching. GTs A = [0,10]x[0,10], B = [4,14]x[0,10].
// det0 (0.9) = A: IoU 1 with A, 60/140 with B. det1 (0.8) = [1.5,11.5]x[0,10]: 85/115 = .74
// with A, 75/125 = .6 with B. det1 picks its best GT, A, which det0 (higher score) keeps; det1
// does not fall back to B and is a false positive at every threshold (COCO would match it to
// B at 0.5 and 0.55). recall .5 .5, precision 1 .5 -> envelope 1 1 .5 0 over mrec 0 .5 .5 1:
// 1 up to 0.49, .5 at 0.5 (the last 0.5), the line to 0 at 1.
// AP = 0.49 + 0.01 * 1.5 / 2 + 0.5 * 0.5 / 2 = 0.6225.
static void test_no_fallback(void) {
    MapEval *e = map_eval_new(1);
    Gt gt[2] = {{0, 0, 10, 10, 0}, {4, 0, 14, 10, 0}};
    Det det[2] = {{1.5f, 0, 11.5f, 10, 0.8f, 0}, {0, 0, 10, 10, 0.9f, 0}};
    add(e, 2, det, 2, gt);
    MapResult r;
    map_eval_compute(e, &r);
    expect_all_ap(&r.classes[0], 0.6225, "no fallback");
    map_result_free(&r);
    map_eval_free(e);
}

// A box with IoU exactly 1/2 (10x10 inside a 10x20 GT) counts at 0.5 only: float32 IoU is
// exactly 0.5f (200 + 1e-7 rounds to 200). AP50 0.995 (one GT, one hit), 0 at 0.55 and above
// (recall 0: envelope 1 0 0 over mrec 0 0 1, and interp at 0 takes the second 0 -> 0).
// AP50-95 = 0.0995.
static void test_threshold_edge(void) {
    MapEval *e = map_eval_new(1);
    Gt gt = {0, 0, 10, 20, 0};
    Det det = {0, 0, 10, 10, 0.6f, 0};
    add(e, 1, &det, 1, &gt);
    MapResult r;
    map_eval_compute(e, &r);
    EXPECT_NEAR(r.classes[0].ap[0], 0.995, TOL, 0);
    for (int t = 1; t < MAP_N_IOU; t++)
        EXPECT_NEAR(r.classes[0].ap[t], 0.0, TOL, 0);
    EXPECT_NEAR(r.map50_95, 0.0995, TOL, 0);
    EXPECT_NEAR(r.map50, 0.995, TOL, 0);
    map_result_free(&r);
    map_eval_free(e);
}

// No true positive anywhere (right box, wrong class; or no predictions): Ultralytics skips
// ap_per_class and reports zeros. The GT counts are still there.
static void test_no_true_positive(void) {
    MapEval *e = map_eval_new(2);
    Gt gt = square(0, 0);
    Det wrong = on(gt, 0.9f);
    wrong.cls = 1;
    add(e, 1, &wrong, 1, &gt);
    add(e, 0, NULL, 1, &gt);
    MapResult r;
    map_eval_compute(e, &r);
    EXPECT(r.n_images == 2 && r.n_gt == 2 && r.classes[0].n_gt == 2, "counts");
    EXPECT(r.map50 == 0 && r.map50_95 == 0 && r.precision == 0 && r.recall == 0, "all zero");
    EXPECT(r.classes[0].ap[0] == 0 && r.classes[1].ap[0] == 0, "class zero");
    map_result_free(&r);
    map_eval_free(e);

    e = map_eval_new(3); // nothing added
    map_eval_compute(e, &r);
    EXPECT(r.n_images == 0 && r.n_gt == 0 && r.map50 == 0, "empty evaluator");
    map_result_free(&r);
    map_eval_free(e);
    map_eval_free(NULL);
    MapResult zero = {0};
    map_result_free(&zero);
}

int main(void) {
    test_perfect();
    test_single_cases();
    test_all_row();
    test_fp_below();
    test_no_fallback();
    test_threshold_edge();
    test_no_true_positive();
    return expect_report();
}
