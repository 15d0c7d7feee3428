/* boxes.c -- see boxes.h. The (G)IoU of cxcywh boxes follows Ultralytics' bbox_iou line by
 * line (corners from centre +- size/2, eps inside the union and the enclosing area) but in
 * double, so the matcher's costs carry no float32 rounding of their own. */
#include "trainer/nn/boxes.h"

#include <math.h>

#include "kernels/base.h" // CHECK

void boxes_cxcywh_to_xyxy(int64_t n, const float *cxcywh, float *xyxy) {
    for (int64_t i = 0; i < n; i++) {
        const float *s = cxcywh + 4 * i;
        float cx = s[0], cy = s[1], hw = s[2] / 2, hh = s[3] / 2;
        float *d = xyxy + 4 * i;
        d[0] = cx - hw, d[1] = cy - hh, d[2] = cx + hw, d[3] = cy + hh;
    }
}

void boxes_xyxy_to_cxcywh(int64_t n, const float *xyxy, float *cxcywh) {
    for (int64_t i = 0; i < n; i++) {
        const float *s = xyxy + 4 * i;
        float x1 = s[0], y1 = s[1], x2 = s[2], y2 = s[3];
        float *d = cxcywh + 4 * i;
        d[0] = (x1 + x2) / 2, d[1] = (y1 + y2) / 2, d[2] = x2 - x1, d[3] = y2 - y1;
    }
}

// The parts of bbox_iou(xywh=True) that IoU and GIoU share.
typedef struct Overlap {
    double iou, union_eps; // union_eps = union + eps, as Ultralytics' `union`
    double cw, ch;         // the smallest enclosing box's size
} Overlap;

static Overlap overlap(const float *a, const float *b) {
    double ax1 = (double)a[0] - a[2] / 2.0, ax2 = (double)a[0] + a[2] / 2.0;
    double ay1 = (double)a[1] - a[3] / 2.0, ay2 = (double)a[1] + a[3] / 2.0;
    double bx1 = (double)b[0] - b[2] / 2.0, bx2 = (double)b[0] + b[2] / 2.0;
    double by1 = (double)b[1] - b[3] / 2.0, by2 = (double)b[1] + b[3] / 2.0;

    double iw = fmax(fmin(ax2, bx2) - fmax(ax1, bx1), 0.0);
    double ih = fmax(fmin(ay2, by2) - fmax(ay1, by1), 0.0);
    double inter = iw * ih;
    Overlap o;
    o.union_eps = (double)a[2] * a[3] + (double)b[2] * b[3] - inter + BOXES_EPS;
    o.iou = inter / o.union_eps;
    o.cw = fmax(ax2, bx2) - fmin(ax1, bx1);
    o.ch = fmax(ay2, by2) - fmin(ay1, by1);
    return o;
}

double boxes_iou_pair(const float *a, const float *b) {
    return overlap(a, b).iou;
}

double boxes_giou_pair(const float *a, const float *b) {
    Overlap o = overlap(a, b);
    double c_area = o.cw * o.ch + BOXES_EPS;
    return o.iou - (c_area - o.union_eps) / c_area;
}

void boxes_iou(int64_t n, const float *a, const float *b, float *out) {
    for (int64_t i = 0; i < n; i++)
        out[i] = (float)boxes_iou_pair(a + 4 * i, b + 4 * i);
}

void boxes_giou(int64_t n, const float *a, const float *b, float *out) {
    for (int64_t i = 0; i < n; i++)
        out[i] = (float)boxes_giou_pair(a + 4 * i, b + 4 * i);
}

void boxes_iou_xyxy_matrix(int64_t n_a, const float *a, int64_t n_b, const float *b, float *out) {
    CHECK(n_a >= 0 && n_b >= 0, "box counts %lld, %lld", (long long)n_a, (long long)n_b);
    const float eps = (float)BOXES_EPS;
    for (int64_t i = 0; i < n_a; i++) {
        const float *p = a + 4 * i;
        float area_a = (p[2] - p[0]) * (p[3] - p[1]);
        for (int64_t j = 0; j < n_b; j++) {
            const float *q = b + 4 * j;
            float area_b = (q[2] - q[0]) * (q[3] - q[1]);
            float iw = fmaxf(fminf(p[2], q[2]) - fmaxf(p[0], q[0]), 0.0f);
            float ih = fmaxf(fminf(p[3], q[3]) - fmaxf(p[1], q[1]), 0.0f);
            float inter = iw * ih;
            float denom = area_a + area_b - inter + eps;
            out[i * n_b + j] = inter / denom;
        }
    }
}
