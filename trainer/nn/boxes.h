/* boxes.h -- box conversions and overlap measures as plain functions over float arrays: no
 * tensors, no autograd. A box is 4 consecutive floats, cxcywh (centre, size) or xyxy (corners).
 * The matcher, the loss's IoU target and the mAP metric use these; the differentiable L1/GIoU
 * of the loss is composed from ops elsewhere. Semantics are Ultralytics' (8.1.34):
 * utils/metrics.py bbox_iou(xywh=True, GIoU) and box_iou, both with eps = 1e-7. */
#ifndef TRAINER_NN_BOXES_H
#define TRAINER_NN_BOXES_H

#include <stdint.h>

#define BOXES_EPS 1e-7 // Ultralytics' eps in bbox_iou and box_iou

// (n,4) cxcywh -> (n,4) xyxy and back. in == out is allowed.
void boxes_cxcywh_to_xyxy(int64_t n, const float *cxcywh, float *xyxy);
void boxes_xyxy_to_cxcywh(int64_t n, const float *xyxy, float *cxcywh);

// Ultralytics bbox_iou(a, b, xywh=True) for one pair of cxcywh boxes, in double:
//   union = wa*ha + wb*hb - inter + eps,  iou = inter / union.
double boxes_iou_pair(const float *a, const float *b);
// bbox_iou(a, b, xywh=True, GIoU=True): with c the smallest enclosing box,
//   c_area = cw*ch + eps,  giou = iou - (c_area - union) / c_area   (in [-1, 1]).
double boxes_giou_pair(const float *a, const float *b);

// Elementwise over n pairs of cxcywh boxes: out[i] = (G)IoU(a[i], b[i]), rounded to float.
// (The loss's VFL target is boxes_iou of the matched, detached predictions and their GTs.)
void boxes_iou(int64_t n, const float *a, const float *b, float *out);
void boxes_giou(int64_t n, const float *a, const float *b, float *out);

// Ultralytics metrics.box_iou for xyxy boxes, in float32 arithmetic in torch's operation
// order (area_a + area_b - inter + eps), because the mAP compares it against float32 IoU
// thresholds and a box on a threshold must land on the same side as in Ultralytics.
// a (n_a,4), b (n_b,4) -> out (n_a,n_b) row-major.
void boxes_iou_xyxy_matrix(int64_t n_a, const float *a, int64_t n_b, const float *b, float *out);

#endif
