/* matcher.h -- Ultralytics' HungarianMatcher (models/utils/ops.py, rtdetr.md §4.2) over raw
 * float arrays: the per-image cost matrix of predictions against ground truths and its
 * optimal assignment (hungarian.h). No autograd: callers pass tensor->data of detached
 * outputs. The fixed matching of the denoising queries is not here. */
#ifndef TRAINER_NN_MATCHER_H
#define TRAINER_NN_MATCHER_H

#include <stdint.h>

// HungarianMatcher's constructor arguments with use_fl=True, with_mask=False.
typedef struct MatcherConfig {
    double gain_class, gain_bbox, gain_giou; // cost_gain: 2, 5, 2
    double alpha, gamma;                     // focal cost: 0.25, 2.0
} MatcherConfig;

// The values RTDETRDetectionLoss builds its matcher with.
MatcherConfig matcher_config_default(void);

// The cost of one image, C (Q, n) row-major, in double:
//   p = sigmoid(logits[q][gt_cls[g]])
//   class = alpha (1-p)^gamma (-log(p + 1e-8)) - (1-alpha) p^gamma (-log(1-p + 1e-8))
//   bbox  = sum_k |box[q][k] - gt_box[g][k]|              (L1 over cxcywh)
//   giou  = 1 - GIoU(box[q], gt_box[g])                    (boxes_giou_pair)
//   C = gain_class class + gain_bbox bbox + gain_giou giou, a NaN or Inf entry replaced by 0.
// boxes (Q,4) sigmoid cxcywh, logits (Q,K), gt_cls (n) in [0,K), gt_boxes (n,4) cxcywh in [0,1].
void matcher_cost(const MatcherConfig *cfg, int64_t Q, int64_t K, const float *boxes,
                  const float *logits, int64_t n, const int32_t *gt_cls, const float *gt_boxes,
                  double *cost);

// The matched (query, gt) pairs of a batch, as the list HungarianMatcher returns: image b's
// pairs are [start[b], start[b+1]), sorted by query ascending (linear_sum_assignment's row
// order), min(Q, n_b) of them; gt is an index into the whole batch's GT arrays (image b's
// own index plus its cumulative GT start). An image without GT has no pairs.
typedef struct Match {
    int64_t n_images;
    int64_t *start; // (n_images + 1)
    int64_t *query; // (n_pairs) query index within the image, in [0, Q)
    int64_t *gt;    // (n_pairs) GT index within the batch, in [0, N)
    int64_t n_pairs;
} Match;

// Matches one decoder output against the batch's GT. boxes (B,Q,4) sigmoid cxcywh, logits
// (B,Q,K), gt_cls (N), gt_boxes (N,4) cxcywh normalised, gt_groups (B) per-image GT counts
// summing to N, the GTs of image b following those of image b-1 (Ultralytics' batch order).
// Fills *out (matcher_match_free releases it). N == 0 gives no pairs.
void matcher_match(const MatcherConfig *cfg, int64_t B, int64_t Q, int64_t K, const float *boxes,
                   const float *logits, int64_t N, const int32_t *gt_cls, const float *gt_boxes,
                   const int64_t *gt_groups, Match *out);
void matcher_match_free(Match *m); // a zeroed Match is a no-op

#endif
