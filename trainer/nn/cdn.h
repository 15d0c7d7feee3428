/* cdn.h -- contrastive denoising: Ultralytics' get_cdn_group (models/utils/ops.py, 8.1.34;
 * rtdetr.md §3) as the head's denoising hook (rtdetr.h), and the batch's ground truth as
 * RTDETRDetectionModel.loss hands it to get_cdn_group and to the criterion (loss.h).
 * Noise comes from trainer/rng.h seeded per step, so it matches Ultralytics in distribution,
 * not draw for draw. The denoising loss itself is in loss.h. */
#ifndef TRAINER_NN_CDN_H
#define TRAINER_NN_CDN_H

#include <stdbool.h>
#include <stdint.h>

#include "trainer/nn/rtdetr.h"
#include "trainer/rng.h"

// The ground truth of one local batch, as collated (trainer/data/batch.h): the boxes of every
// image concatenated in image order, image b owning the counts[b] boxes after those of b-1.
typedef struct Targets {
    int n_images;        // B
    int n_boxes;         // N = sum of counts
    const int *cls;      // (N) classes in [0, K)
    const float *bboxes; // (N,4) cx, cy, w, h normalised to [0, 1]
    const int *counts;   // (B) boxes per image (Ultralytics' gt_groups)
} Targets;

// get_cdn_group's arguments (RTDETRDecoder: num_denoising, label_noise_ratio, box_noise_scale).
typedef struct CdnConfig {
    int num_dn;            // 100
    float cls_noise_ratio; // 0.5: each class is replaced with probability ratio / 2
    float box_noise_scale; // 1.0
} CdnConfig;

CdnConfig cdn_config_default(void);

// One step's denoising layout (get_cdn_group's dn_meta and what built the queries). Row r of
// the 2*G*N copies is GT r mod N of copy c = r div N; copies [0, G) are positives, [G, 2G)
// negatives; its query slot within its image is c*max_gt + j, j the GT's index in the image.
// Every array lives in the tape's step arena.
typedef struct CdnGroup {
    int64_t n_images;   // B
    int64_t n_boxes;    // N
    int64_t max_gt;     // max over images of the GT count
    int64_t n_groups;   // G = max(num_dn div max_gt, 1)  (dn_num_group)
    int64_t n_dn;       // Ndn = 2*G*max_gt               (dn_num_split[0])
    int64_t n_queries;  // Q                              (dn_num_split[1])
    int32_t *cls;       // (2GN) noisy classes
    float *box_logits;  // (2GN,4) noisy cxcywh boxes, logit(box, eps 1e-6)
    int64_t *pos_start; // (B+1) image b's positive slots are pos_idx[pos_start[b] ..
    int64_t *pos_idx;   //   pos_start[b+1]): c*max_gt + j, c < G, j < n_b, copy-major (dn_pos_idx)
    uint8_t *attn_mask; // (Ndn+Q, Ndn+Q), nonzero = blocked
} CdnGroup;

// get_cdn_group. Returns false, g zeroed and out untouched, when t is not training, num_dn <= 0
// or no image of the batch has a box. Otherwise fills g and out: out->embed (B,Ndn,hd) holds
// class_embed's row of each noisy class at its slot (an embedding lookup, so the gradient
// reaches class_embed) and zeros at the unused slots (no gradient); out->bbox_logits
// (B,Ndn,4) the noisy box logits, zero at unused slots; out->attn_mask = g->attn_mask.
// class_embed (K,hd); draws from rng in torch's order: class mask, new classes, box signs,
// box magnitudes.
bool cdn_get_group(Tape *t, const CdnConfig *cfg, const Targets *tg, Tensor *class_embed, int nc,
                   int nq, Rng *rng, CdnGroup *g, RtdetrDn *out);

// The head's hook (rtdetr.h) over cdn_get_group: set cfg, tg and seed, pass cdn_hook(&h) to
// rtdetr_forward; afterwards active says whether denoising ran and group holds its layout.
typedef struct CdnHook {
    CdnConfig cfg;
    const Targets *tg;
    uint64_t seed; // the step's noise seed
    bool active;
    CdnGroup group;
} CdnHook;

RtdetrDnHook cdn_hook(CdnHook *h);

#endif
