/* test_boxes.c -- box conversions, IoU and GIoU (trainer/nn/boxes.h) against values worked
 * out by hand, including Ultralytics' eps placement and the float32 IoU of the mAP. */
#include <math.h>

#include "tests/expect.h"
#include "trainer/nn/boxes.h"

static void test_conversions(void) {
    float c[8] = {0.5f, 0.5f, 0.2f, 0.4f, 10, 20, 4, 6}, x[8], back[8];
    boxes_cxcywh_to_xyxy(2, c, x);
    const float want[8] = {0.4f, 0.3f, 0.6f, 0.7f, 8, 17, 12, 23};
    for (int k = 0; k < 8; k++)
        EXPECT_NEAR(x[k], want[k], 1e-7, 0);
    boxes_xyxy_to_cxcywh(2, x, back);
    for (int k = 0; k < 8; k++)
        EXPECT_NEAR(back[k], c[k], 1e-7, 0);
    boxes_cxcywh_to_xyxy(2, c, c); // in place
    for (int k = 0; k < 8; k++)
        EXPECT_NEAR(c[k], want[k], 1e-7, 0);
}

// A box given by its corners, as cxcywh.
static void box(float *out, float x1, float y1, float x2, float y2) {
    float xyxy[4] = {x1, y1, x2, y2};
    boxes_xyxy_to_cxcywh(1, xyxy, out);
}

static void test_iou_giou(void) {
    const double eps = 1e-7;
    float a[4], b[4];

    // Overlapping 2x2 squares offset by (1,1): inter 1, union 4+4-1 = 7, enclosing box 3x3.
    // Ultralytics: iou = 1/(7+eps); giou = iou - ((9+eps) - (7+eps))/(9+eps) ~ 1/7 - 2/9 = -5/63.
    box(a, 0, 0, 2, 2), box(b, 1, 1, 3, 3);
    EXPECT_NEAR(boxes_iou_pair(a, b), 1.0 / (7 + eps), 1e-15, 0);
    EXPECT_NEAR(boxes_giou_pair(a, b), 1.0 / (7 + eps) - 2.0 / (9 + eps), 1e-15, 0);
    EXPECT_NEAR(boxes_giou_pair(a, b), -5.0 / 63.0, 1e-7, 0);
    EXPECT_NEAR(boxes_giou_pair(b, a), boxes_giou_pair(a, b), 1e-15, 0); // symmetric

    // Identical boxes: iou = area/(area+eps) just below 1, giou the same (enclosing = union).
    EXPECT_NEAR(boxes_iou_pair(a, a), 4.0 / (4 + eps), 1e-15, 0);
    EXPECT(boxes_iou_pair(a, a) < 1.0, "eps keeps iou below 1");
    EXPECT_NEAR(boxes_giou_pair(a, a), 4.0 / (4 + eps), 1e-15, 0);

    // Disjoint unit squares one unit apart: iou 0, enclosing 3x1 = 3, union 2: giou = -1/3.
    box(a, 0, 0, 1, 1), box(b, 2, 0, 3, 1);
    EXPECT_NEAR(boxes_iou_pair(a, b), 0.0, 0, 0);
    EXPECT_NEAR(boxes_giou_pair(a, b), -1.0 / 3.0, 1e-7, 0);

    // Containment: a 1x1 box inside a 4x4 one: iou 1/16, enclosing = the big box: giou = iou.
    box(a, 0, 0, 4, 4), box(b, 1, 1, 2, 2);
    EXPECT_NEAR(boxes_iou_pair(a, b), 1.0 / 16.0, 1e-8, 0);
    EXPECT_NEAR(boxes_giou_pair(a, b), 1.0 / 16.0, 1e-8, 0);

    // Tiny boxes far apart: giou tends to -1 (union/enclosing -> 0).
    box(a, 0, 0, 0.01f, 0.01f), box(b, 0.99f, 0.99f, 1, 1);
    EXPECT(boxes_giou_pair(a, b) < -0.999, "giou %g", boxes_giou_pair(a, b));

    // The array forms are the pair forms rounded to float.
    float pa[8], pb[8], iou[2], giou[2];
    box(pa, 0, 0, 2, 2), box(pb, 1, 1, 3, 3), box(pa + 4, 0, 0, 4, 4), box(pb + 4, 1, 1, 2, 2);
    boxes_iou(2, pa, pb, iou);
    boxes_giou(2, pa, pb, giou);
    for (int i = 0; i < 2; i++) {
        EXPECT(iou[i] == (float)boxes_iou_pair(pa + 4 * i, pb + 4 * i), "iou[%d]", i);
        EXPECT(giou[i] == (float)boxes_giou_pair(pa + 4 * i, pb + 4 * i), "giou[%d]", i);
    }
}

static void test_iou_xyxy_matrix(void) {
    // gt (2,4) against predictions (3,4), pixels.
    const float gt[8] = {0, 0, 10, 10, 20, 20, 30, 40};
    const float pred[12] = {0,  0,  10, 10,  // = gt 0
                            5,  0,  15, 10,  // half-overlaps gt 0: inter 50, union 150
                            20, 20, 30, 30}; // inside gt 1: inter 100, union 200
    float m[6];
    boxes_iou_xyxy_matrix(2, gt, 3, pred, m);
    const double want[6] = {1, 1.0 / 3, 0, 0, 0, 0.5};
    for (int k = 0; k < 6; k++)
        EXPECT_NEAR(m[k], want[k], 1e-6, 0);

    // In float32, 200 + 1e-7 rounds to 200: a box with IoU exactly 1/2 gets exactly 0.5f, as
    // in Ultralytics' float32 box_iou, so it passes the 0.5 threshold of the mAP. In double
    // the eps would push it just below.
    EXPECT(m[5] == 0.5f, "float32 iou %.9g", m[5]);
    float g1[4], p2[4];
    boxes_xyxy_to_cxcywh(1, gt + 4, g1);
    boxes_xyxy_to_cxcywh(1, pred + 8, p2);
    EXPECT(boxes_iou_pair(g1, p2) < 0.5, "double iou %.17g", boxes_iou_pair(g1, p2));

    // Empty sides are fine.
    boxes_iou_xyxy_matrix(0, gt, 3, pred, m);
    boxes_iou_xyxy_matrix(2, gt, 0, pred, m);
}

int main(void) {
    test_conversions();
    test_iou_giou();
    test_iou_xyxy_matrix();
    return expect_report();
}
