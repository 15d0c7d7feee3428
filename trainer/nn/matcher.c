/* matcher.c -- see matcher.h. HungarianMatcher.forward, one image at a time: Ultralytics
 * builds the (B*Q, N) cost of every prediction against every GT of the batch and then solves
 * only each image's (Q, n_b) block, so building just the blocks gives the same assignment.
 * Costs are computed in double from the float inputs (Ultralytics: float32); they differ only
 * in the last float32 bits, which can matter only where two assignments tie. */
#include "trainer/nn/matcher.h"

#include <math.h>

#include "kernels/base.h"     // CHECK, xmalloc
#include "trainer/nn/boxes.h" // boxes_giou_pair
#include "trainer/nn/hungarian.h"

MatcherConfig matcher_config_default(void) {
    return (MatcherConfig){
        .gain_class = 2.0, .gain_bbox = 5.0, .gain_giou = 2.0, .alpha = 0.25, .gamma = 2.0};
}

void matcher_cost(const MatcherConfig *cfg, int64_t Q, int64_t K, const float *boxes,
                  const float *logits, int64_t n, const int32_t *gt_cls, const float *gt_boxes,
                  double *cost) {
    for (int64_t g = 0; g < n; g++)
        CHECK(gt_cls[g] >= 0 && gt_cls[g] < K, "gt class %d of GT %lld outside [0, %lld)",
              gt_cls[g], (long long)g, (long long)K);
    for (int64_t q = 0; q < Q; q++) {
        const float *box = boxes + 4 * q;
        for (int64_t g = 0; g < n; g++) {
            const float *gt = gt_boxes + 4 * g;
            double p = 1.0 / (1.0 + exp(-(double)logits[q * K + gt_cls[g]]));
            double pos = cfg->alpha * pow(1.0 - p, cfg->gamma) * -log(p + 1e-8);
            double neg = (1.0 - cfg->alpha) * pow(p, cfg->gamma) * -log(1.0 - p + 1e-8);
            double l1 = 0;
            for (int k = 0; k < 4; k++)
                l1 += fabs((double)box[k] - gt[k]);
            double c = cfg->gain_class * (pos - neg) + cfg->gain_bbox * l1 +
                       cfg->gain_giou * (1.0 - boxes_giou_pair(box, gt));
            cost[q * n + g] = isfinite(c) ? c : 0.0; // Ultralytics: C[C.isnan() | C.isinf()] = 0
        }
    }
}

void matcher_match(const MatcherConfig *cfg, int64_t B, int64_t Q, int64_t K, const float *boxes,
                   const float *logits, int64_t N, const int32_t *gt_cls, const float *gt_boxes,
                   const int64_t *gt_groups, Match *out) {
    CHECK(B > 0 && Q > 0 && K > 0 && N >= 0, "B %lld Q %lld K %lld N %lld", (long long)B,
          (long long)Q, (long long)K, (long long)N);
    int64_t sum = 0, max_n = 0;
    for (int64_t b = 0; b < B; b++) {
        CHECK(gt_groups[b] >= 0, "gt_groups[%lld] = %lld", (long long)b, (long long)gt_groups[b]);
        sum += gt_groups[b];
        max_n = MAX(max_n, gt_groups[b]);
    }
    CHECK(sum == N, "gt_groups sum to %lld, N is %lld", (long long)sum, (long long)N);

    out->n_images = B;
    out->start = xcalloc((size_t)B + 1, sizeof(int64_t));
    int64_t max_pairs = 0;
    for (int64_t b = 0; b < B; b++)
        max_pairs += MIN(Q, gt_groups[b]);
    out->query = xmalloc((size_t)MAX(max_pairs, 1) * sizeof(int64_t));
    out->gt = xmalloc((size_t)MAX(max_pairs, 1) * sizeof(int64_t));
    out->n_pairs = 0;
    if (N == 0) return; // Ultralytics returns empty index pairs for every image

    double *cost = xmalloc((size_t)(Q * max_n) * sizeof(double));
    int64_t *col_for_row = xmalloc((size_t)Q * sizeof(int64_t));
    int64_t gt_start = 0;
    for (int64_t b = 0; b < B; b++) {
        int64_t n = gt_groups[b];
        out->start[b] = out->n_pairs;
        if (n > 0) {
            matcher_cost(cfg, Q, K, boxes + b * Q * 4, logits + b * Q * K, n, gt_cls + gt_start,
                         gt_boxes + gt_start * 4, cost);
            hungarian_solve(Q, n, cost, col_for_row);
            for (int64_t q = 0; q < Q; q++) {
                if (col_for_row[q] < 0) continue;
                out->query[out->n_pairs] = q;
                out->gt[out->n_pairs] = gt_start + col_for_row[q];
                out->n_pairs++;
            }
        }
        gt_start += n;
    }
    out->start[B] = out->n_pairs;
    free(cost);
    free(col_for_row);
}

void matcher_match_free(Match *m) {
    free(m->start);
    free(m->query);
    free(m->gt);
    memset(m, 0, sizeof *m);
}
