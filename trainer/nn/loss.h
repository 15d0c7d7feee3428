/* loss.h -- the RT-DETR training loss: Ultralytics 8.1.34's RTDETRDetectionLoss (DETRLoss with
 * VFL, Hungarian matching per decoder output, the fixed denoising matching; rtdetr.md §4),
 * composed from ops so its backward is the tape's, and rtdetr_loss, the model's training
 * forward with the denoising hook and the criterion (RTDETRDetectionModel.loss).
 * Not here: the matcher's cost and assignment (matcher.h), the denoising queries (cdn.h). */
#ifndef TRAINER_NN_LOSS_H
#define TRAINER_NN_LOSS_H

#include <stdint.h>

#include "trainer/nn/cdn.h"
#include "trainer/nn/matcher.h"
#include "trainer/nn/rtdetr.h"

// The 12 entries of the loss dict, in Ultralytics' order (their sum is the loss).
typedef enum LossKey {
    LOSS_CLASS,
    LOSS_BBOX,
    LOSS_GIOU,
    LOSS_CLASS_AUX,
    LOSS_BBOX_AUX,
    LOSS_GIOU_AUX,
    LOSS_CLASS_DN,
    LOSS_BBOX_DN,
    LOSS_GIOU_DN,
    LOSS_CLASS_AUX_DN,
    LOSS_BBOX_AUX_DN,
    LOSS_GIOU_AUX_DN,
    LOSS_N_KEYS
} LossKey;

// "loss_class", "loss_bbox_aux_dn", ...: the dict keys.
const char *loss_key_name(LossKey k);

typedef struct LossConfig {
    int nc;                                 // K
    float gain_class, gain_bbox, gain_giou; // loss_gain: 1, 5, 2
    float vfl_alpha, vfl_gamma;             // VarifocalLoss, U81: 0.75, 2.0
    float focal_alpha, focal_gamma;         // FocalLoss (used when nothing is matched): 0.25, 1.5
    MatcherConfig matcher;                  // matcher_config_default()
} LossConfig;

LossConfig loss_config_default(int nc);

// What a step reports: every key's value, their sum, and the three the trainer displays
// (giou_loss, cls_loss, l1_loss = loss_giou, loss_class, loss_bbox, gains included).
typedef struct LossItems {
    float value[LOSS_N_KEYS];
    float total;
    float giou, cls, l1;
} LossItems;

// RTDETRDetectionModel.loss after the forward: o's decoder outputs are split into the
// denoising part (the first o->n_dn queries) and the matching part, the encoder proposals are
// prepended as one more layer, and RTDETRDetectionLoss runs over them. dn: the step's
// denoising layout, NULL exactly when o->n_dn == 0 (then the six *_dn keys are constant
// zeros). Every key is a scalar; a box loss without matched pairs is a constant zero with no
// graph. keys (LOSS_N_KEYS) and items may be NULL. Returns the sum of the keys.
Tensor *loss_criterion(Tape *t, const LossConfig *cfg, const RtdetrOutput *o, const CdnGroup *dn,
                       const Targets *tg, Tensor **keys, LossItems *items);

// The model's training loss for one batch: rtdetr_forward with the denoising hook (noise seeded
// by step_seed; num_dn, noise ratio and scale from the decoder's arguments), then
// loss_criterion. images (B,3,H,W) with B == tg->n_images. items may be NULL.
Tensor *rtdetr_loss(Rtdetr *m, Tape *t, Tensor *images, const Targets *tg, uint64_t step_seed,
                    LossItems *items);

#endif
