/* loss.c -- RTDETRDetectionLoss / DETRLoss of Ultralytics 8.1.34 (models/utils/loss.py;
 * rtdetr.md §4) and RTDETRDetectionModel.loss (nn/tasks.py). Every differentiable term is
 * composed from ops as torch composes it (same operations, same operands), so the gradient is
 * the tape's and a term consumes exactly the outputs PyTorch's consumes; matching, targets and
 * the IoU target are plain arrays over detached data. The order of nodes inside the loss does
 * not move any gradient-ready hook: all of them are created after the model's, so the engine
 * runs every loss node before any model node. */
#include "trainer/nn/loss.h"

#include <math.h>

#include "kernels/base.h" // CHECK
#include "trainer/nn/boxes.h"
#include "trainer/ops/ops.h"

static const char *const key_names[LOSS_N_KEYS] = {
    "loss_class",    "loss_bbox",         "loss_giou",        "loss_class_aux",
    "loss_bbox_aux", "loss_giou_aux",     "loss_class_dn",    "loss_bbox_dn",
    "loss_giou_dn",  "loss_class_aux_dn", "loss_bbox_aux_dn", "loss_giou_aux_dn"};

const char *loss_key_name(LossKey k) {
    CHECK(k >= 0 && k < LOSS_N_KEYS, "loss_key_name(%d)", (int)k);
    return key_names[k];
}

LossConfig loss_config_default(int nc) {
    return (LossConfig){.nc = nc,
                        .gain_class = 1.0f,
                        .gain_bbox = 5.0f,
                        .gain_giou = 2.0f,
                        .vfl_alpha = 0.75f,
                        .vfl_gamma = 2.0f,
                        .focal_alpha = 0.25f,
                        .focal_gamma = 1.5f,
                        .matcher = matcher_config_default()};
}

// Matched (image, query, gt) triples of one output: _get_index's (batch_idx, src_idx), dst_idx.
typedef struct Pairs {
    int64_t n; // M
    int64_t *image, *query, *gt;
} Pairs;

static Pairs pairs_alloc(Tape *t, int64_t n) {
    size_t bytes = sizeof(int64_t) * (size_t)MAX(n, (int64_t)1);
    return (Pairs){n, tape_alloc(t, bytes), tape_alloc(t, bytes), tape_alloc(t, bytes)};
}

// HungarianMatcher on one output (its data only: the matcher works on detached values, copied
// to the host).
static Pairs hungarian_pairs(Tape *t, const LossConfig *cfg, const Tensor *boxes,
                             const Tensor *logits, const Targets *tg, const int64_t *gt_groups) {
    Match m = {0};
    float *host_boxes = tensor_host_copy(boxes), *host_logits = tensor_host_copy(logits);
    matcher_match(&cfg->matcher, boxes->shape[0], boxes->shape[1], logits->shape[2], host_boxes,
                  host_logits, tg->n_boxes, tg->cls, tg->bboxes, gt_groups, &m);
    free(host_boxes);
    free(host_logits);
    Pairs p = pairs_alloc(t, m.n_pairs);
    for (int64_t b = 0; b < m.n_images; b++)
        for (int64_t k = m.start[b]; k < m.start[b + 1]; k++)
            p.image[k] = b, p.query[k] = m.query[k], p.gt[k] = m.gt[k];
    matcher_match_free(&m);
    return p;
}

// get_dn_match_indices: image b's positive slots dn_pos_idx[b] against its GTs
// arange(n_b) + start_b repeated G times.
static Pairs dn_pairs(Tape *t, const CdnGroup *dn, const Targets *tg) {
    Pairs p = pairs_alloc(t, dn->pos_start[dn->n_images]);
    for (int64_t b = 0, gt_start = 0; b < dn->n_images; gt_start += tg->counts[b], b++)
        for (int64_t k = dn->pos_start[b]; k < dn->pos_start[b + 1]; k++)
            p.image[k] = b, p.query[k] = dn->pos_idx[k],
            p.gt[k] = gt_start + (k - dn->pos_start[b]) % tg->counts[b];
    return p;
}

// A constant of x's shape made on the host (n = x->n floats) and uploaded.
static Tensor *host_constant(Tape *t, const Tensor *like, const float *host) {
    Tensor *c = tensor_like(t->arena, like);
    tensor_write(c, host);
    return c;
}

// VarifocalLoss (U81): w = alpha sigmoid(x)^gamma (1 - label) + target label, w not detached;
// BCE-with-logits(x, target) w, mean over queries, summed. target = target label already.
// label: the one-hot labels on the host (x->n floats).
static Tensor *varifocal(Tape *t, const LossConfig *cfg, Tensor *x, Tensor *target,
                         const float *label) {
    float *h = tape_alloc(t, sizeof(float) * (size_t)MAX(x->n, 1));
    for (int64_t i = 0; i < x->n; i++)
        h[i] = 1.0f - label[i];
    Tensor *not_label = host_constant(t, x, h);
    Tensor *w = op_pow_scalar(t, op_sigmoid(t, x), cfg->vfl_gamma);
    w = op_mul(t, op_scale(t, w, cfg->vfl_alpha), not_label);
    w = op_add(t, w, target);
    Tensor *loss = op_mul(t, op_bce_with_logits(t, x, target), w);
    return op_sum(t, op_mean_dim(t, loss, 1, false));
}

// FocalLoss: BCE (1 - p_t)^gamma (label alpha + (1 - label)(1 - alpha)), mean(1).sum().
// label: the tensor and its host values.
static Tensor *focal(Tape *t, const LossConfig *cfg, Tensor *x, Tensor *label,
                     const float *host_label) {
    float *h_not = tape_alloc(t, sizeof(float) * (size_t)MAX(x->n, 1));
    float *h_alpha = tape_alloc(t, sizeof(float) * (size_t)MAX(x->n, 1));
    for (int64_t i = 0; i < label->n; i++) {
        h_not[i] = 1.0f - host_label[i];
        h_alpha[i] = host_label[i] * cfg->focal_alpha + h_not[i] * (1 - cfg->focal_alpha);
    }
    Tensor *not_label = host_constant(t, label, h_not), *alpha = host_constant(t, label, h_alpha);
    Tensor *loss = op_bce_with_logits(t, x, label);
    Tensor *p = op_sigmoid(t, x);
    Tensor *p_t =
        op_add(t, op_mul(t, label, p), op_mul(t, not_label, op_add_scalar(t, op_neg(t, p), 1)));
    Tensor *modulating = op_pow_scalar(t, op_add_scalar(t, op_neg(t, p_t), 1), cfg->focal_gamma);
    loss = op_mul(t, op_mul(t, loss, modulating), alpha);
    return op_sum(t, op_mean_dim(t, loss, 1, false));
}

// 1 - bbox_iou(pred, gt, xywh=True, GIoU=True), eps 1e-7, elementwise: pred (M,4) requires
// grad, gt (M,4) a constant. Corners of gt are computed in float as torch computes them.
static Tensor *one_minus_giou(Tape *t, Tensor *pred, const float *gt, int64_t m) {
    Tensor *c[4];
    op_split(t, pred, -1, (int64_t[]){1, 1, 1, 1}, 4, c); // x1, y1, w1, h1 = box1.chunk(4, -1)
    // The GT corners and areas on the host (5 columns of m), then uploaded.
    float *h = tape_alloc(t, sizeof(float) * 5 * (size_t)MAX(m, 1));
    for (int64_t i = 0; i < m; i++) {
        const float *g = gt + 4 * i;
        float hw = g[2] / 2, hh = g[3] / 2;
        h[i] = g[0] - hw, h[m + i] = g[0] + hw;
        h[2 * m + i] = g[1] - hh, h[3 * m + i] = g[1] + hh;
        h[4 * m + i] = g[2] * g[3];
    }
    Tensor *gx1 = tensor_2d(t->arena, m, 1), *gx2 = tensor_2d(t->arena, m, 1);
    Tensor *gy1 = tensor_2d(t->arena, m, 1), *gy2 = tensor_2d(t->arena, m, 1);
    Tensor *garea = tensor_2d(t->arena, m, 1);
    tensor_write(gx1, h), tensor_write(gx2, h + m), tensor_write(gy1, h + 2 * m);
    tensor_write(gy2, h + 3 * m), tensor_write(garea, h + 4 * m);
    Tensor *hw = op_div(t, c[2], tensor_scalar(t->arena, 2.0f));
    Tensor *hh = op_div(t, c[3], tensor_scalar(t->arena, 2.0f));
    Tensor *x1 = op_sub(t, c[0], hw), *x2 = op_add(t, c[0], hw);
    Tensor *y1 = op_sub(t, c[1], hh), *y2 = op_add(t, c[1], hh);
    Tensor *iw =
        op_clamp(t, op_sub(t, op_minimum(t, x2, gx2), op_maximum(t, x1, gx1)), 0, INFINITY);
    Tensor *ih =
        op_clamp(t, op_sub(t, op_minimum(t, y2, gy2), op_maximum(t, y1, gy1)), 0, INFINITY);
    Tensor *inter = op_mul(t, iw, ih);
    Tensor *uni = op_add(t, op_mul(t, c[2], c[3]), garea);
    uni = op_add_scalar(t, op_sub(t, uni, inter), (float)BOXES_EPS);
    Tensor *iou = op_div(t, inter, uni);
    Tensor *cw = op_sub(t, op_maximum(t, x2, gx2), op_minimum(t, x1, gx1));
    Tensor *ch = op_sub(t, op_maximum(t, y2, gy2), op_minimum(t, y1, gy1));
    Tensor *c_area = op_add_scalar(t, op_mul(t, cw, ch), (float)BOXES_EPS);
    Tensor *giou = op_sub(t, iou, op_div(t, op_sub(t, c_area, uni), c_area));
    return op_add_scalar(t, op_neg(t, giou), 1.0f);
}

// DETRLoss._get_loss on one output: boxes (B,Q,4), logits (B,Q,K). Writes class, bbox, giou.
static void layer_loss(Tape *t, const LossConfig *cfg, Tensor *boxes, Tensor *logits,
                       const Pairs *p, const Targets *tg, Tensor **out) {
    int64_t b = logits->shape[0], q = logits->shape[1], k = logits->shape[2], m = p->n;
    CHECK(k == cfg->nc, "loss: logits have %lld classes, nc is %d", (long long)k, cfg->nc);
    // one_hot of the targets (background column dropped) and target = IoU(pred.detach(), gt)
    // at the matched slot's class; made on the host (the predicted boxes copied there), uploaded.
    Tensor *label = tensor_new(t->arena, 3, (int64_t[]){b, q, k});
    Tensor *target = tensor_new(t->arena, 3, (int64_t[]){b, q, k});
    float *host_label = tape_alloc(t, sizeof(float) * (size_t)MAX(label->n, 1));
    float *host_target = xcalloc((size_t)MAX(label->n, 1), sizeof(float));
    memset(host_label, 0, sizeof(float) * (size_t)label->n);
    float *host_boxes = tensor_host_copy(boxes);
    float *pred = xmalloc(sizeof(float) * 4 * (size_t)MAX(m, (int64_t)1));
    float *gt = tape_alloc(t, sizeof(float) * 4 * (size_t)MAX(m, (int64_t)1));
    float *iou = xmalloc(sizeof(float) * (size_t)MAX(m, (int64_t)1));
    int64_t *rows = tape_alloc(t, sizeof(int64_t) * (size_t)MAX(m, (int64_t)1));
    for (int64_t i = 0; i < m; i++) {
        CHECK(p->image[i] < b && p->query[i] < q && p->gt[i] < tg->n_boxes, "loss: bad pair %lld",
              (long long)i);
        rows[i] = p->image[i] * q + p->query[i];
        memcpy(pred + 4 * i, host_boxes + 4 * rows[i], 4 * sizeof(float));
        memcpy(gt + 4 * i, tg->bboxes + 4 * p->gt[i], 4 * sizeof(float));
    }
    boxes_iou(m, pred, gt, iou);
    for (int64_t i = 0; i < m; i++) {
        int64_t at = rows[i] * k + tg->cls[p->gt[i]];
        host_label[at] = 1.0f;
        host_target[at] = iou[i];
    }
    tensor_write(label, host_label);
    tensor_write(target, host_target);
    free(host_target);
    free(host_boxes);
    free(pred);
    free(iou);

    Tensor *cls = m > 0 ? varifocal(t, cfg, logits, target, host_label)
                        : focal(t, cfg, logits, label, host_label);
    // loss_cls /= max(num_gts, 1) / nq, then the gain
    cls = op_div(t, cls, tensor_scalar(t->arena, (float)((double)MAX(m, (int64_t)1) / (double)q)));
    out[0] = op_scale(t, cls, cfg->gain_class);

    if (m == 0) { // _get_loss_bbox's fresh constants: nothing consumes the boxes
        out[1] = tensor_scalar(t->arena, 0.0f);
        out[2] = tensor_scalar(t->arena, 0.0f);
        return;
    }
    Tensor *matched =
        op_index_select(t, op_reshape(t, boxes, 2, (int64_t[]){b * q, 4}), 0, rows, m);
    Tensor *gt_t = tensor_2d(t->arena, m, 4);
    tensor_write(gt_t, gt);
    Tensor *count = tensor_scalar(t->arena, (float)m);
    Tensor *l1 = op_sum(t, op_abs(t, op_sub(t, matched, gt_t)));
    out[1] = op_div(t, op_scale(t, l1, cfg->gain_bbox), count);
    Tensor *giou = op_div(t, op_sum(t, one_minus_giou(t, matched, gt, m)), count);
    out[2] = op_scale(t, giou, cfg->gain_giou);
}

// a + b where either may be NULL (the running sum's start).
static Tensor *accumulate(Tape *t, Tensor *sum, Tensor *x) {
    return sum ? op_add(t, sum, x) : x;
}

// (L,B,Q,C) -> L tensors (B,Q,C), one split node.
static void unstack(Tape *t, Tensor *x, Tensor **layers) {
    int64_t n = x->shape[0];
    int64_t *ones = tape_alloc(t, sizeof(int64_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        ones[i] = 1;
    op_split(t, x, 0, ones, (int)n, layers);
    for (int64_t i = 0; i < n; i++)
        layers[i] = op_reshape(t, layers[i], 3, x->shape + 1);
}

// DETRLoss.forward: the last of the n outputs is the main loss (keys[0..2]), the others, in
// order, sum into the aux keys (keys[3..5]; constant zeros when n == 1). fixed NULL: each
// output gets its own Hungarian matching; else every output uses that matching.
static void detr_loss(Tape *t, const LossConfig *cfg, Tensor **boxes, Tensor **logits, int n,
                      const Pairs *fixed, const Targets *tg, const int64_t *gt_groups,
                      Tensor **keys) {
    for (int step = 0; step < n; step++) {
        int i = step == 0 ? n - 1 : step - 1; // main first, then aux 0 .. n-2
        Pairs p = fixed ? *fixed : hungarian_pairs(t, cfg, boxes[i], logits[i], tg, gt_groups);
        Tensor *l[3];
        layer_loss(t, cfg, boxes[i], logits[i], &p, tg, l);
        for (int j = 0; j < 3; j++)
            if (step == 0)
                keys[j] = l[j];
            else
                keys[3 + j] = accumulate(t, keys[3 + j], l[j]);
    }
    for (int j = 0; j < 3; j++)
        if (!keys[3 + j]) keys[3 + j] = tensor_scalar(t->arena, 0.0f);
}

Tensor *loss_criterion(Tape *t, const LossConfig *cfg, const RtdetrOutput *o, const CdnGroup *dn,
                       const Targets *tg, Tensor **keys_out, LossItems *items) {
    int64_t ndl = o->dec_bboxes->shape[0], b = o->dec_bboxes->shape[1];
    int64_t n_dn = o->n_dn, q = o->dec_bboxes->shape[2] - n_dn;
    CHECK((dn != NULL) == (n_dn > 0) && (!dn || dn->n_dn == n_dn),
          "loss: denoising layout and outputs disagree (%lld dn queries)", (long long)n_dn);
    CHECK(b == tg->n_images, "loss: %lld images, targets for %d", (long long)b, tg->n_images);
    int64_t *gt_groups = tape_alloc(t, sizeof(int64_t) * (size_t)b), total = 0;
    for (int64_t i = 0; i < b; i++)
        total += gt_groups[i] = tg->counts[i];
    CHECK(total == tg->n_boxes, "loss: counts sum to %lld, n_boxes %d", (long long)total,
          tg->n_boxes);
    for (int i = 0; i < tg->n_boxes; i++)
        CHECK(tg->cls[i] >= 0 && tg->cls[i] < cfg->nc, "loss: box %d has class %d, nc is %d", i,
              tg->cls[i], cfg->nc);

    // RTDETRDetectionModel.loss: split off the dn queries, prepend the encoder's proposals.
    Tensor *dec_boxes = o->dec_bboxes, *dec_scores = o->dec_scores, *dn_boxes = NULL,
           *dn_scores = NULL;
    if (n_dn > 0) {
        Tensor *parts[2];
        op_split(t, o->dec_bboxes, 2, (int64_t[]){n_dn, q}, 2, parts);
        dn_boxes = parts[0], dec_boxes = parts[1];
        op_split(t, o->dec_scores, 2, (int64_t[]){n_dn, q}, 2, parts);
        dn_scores = parts[0], dec_scores = parts[1];
    }
    Tensor **boxes = tape_alloc(t, sizeof(Tensor *) * (size_t)(ndl + 1));
    Tensor **logits = tape_alloc(t, sizeof(Tensor *) * (size_t)(ndl + 1));
    boxes[0] = o->enc_bboxes, logits[0] = o->enc_scores;
    unstack(t, dec_boxes, boxes + 1);
    unstack(t, dec_scores, logits + 1);

    Tensor *keys[LOSS_N_KEYS] = {0};
    detr_loss(t, cfg, boxes, logits, (int)ndl + 1, NULL, tg, gt_groups, keys);
    if (dn) { // RTDETRDetectionLoss: the dn outputs of the decoder layers, fixed matching
        Pairs p = dn_pairs(t, dn, tg);
        unstack(t, dn_boxes, boxes);
        unstack(t, dn_scores, logits);
        detr_loss(t, cfg, boxes, logits, (int)ndl, &p, tg, gt_groups, keys + LOSS_CLASS_DN);
    } else {
        for (int k = LOSS_CLASS_DN; k < LOSS_N_KEYS; k++)
            keys[k] = tensor_scalar(t->arena, 0.0f);
    }

    Tensor *sum = NULL;
    for (int k = 0; k < LOSS_N_KEYS; k++)
        sum = accumulate(t, sum, keys[k]);
    if (keys_out) memcpy(keys_out, keys, sizeof keys);
    if (items) {
        for (int k = 0; k < LOSS_N_KEYS; k++)
            items->value[k] = tensor_item(keys[k]);
        items->total = tensor_item(sum);
        items->giou = items->value[LOSS_GIOU];
        items->cls = items->value[LOSS_CLASS];
        items->l1 = items->value[LOSS_BBOX];
    }
    return sum;
}

Tensor *rtdetr_loss(Rtdetr *m, Tape *t, Tensor *images, const Targets *tg, uint64_t step_seed,
                    LossItems *items) {
    const DecoderArgs *a = &m->head->a;
    CHECK(images->ndim == 4 && images->shape[0] == tg->n_images,
          "rtdetr_loss: images and targets disagree on the batch size");
    CdnHook h = {.cfg = {.num_dn = a->nd,
                         .cls_noise_ratio = (float)a->label_noise_ratio,
                         .box_noise_scale = (float)a->box_noise_scale},
                 .tg = tg,
                 .seed = step_seed};
    RtdetrDnHook hook = cdn_hook(&h);
    RtdetrOutput o;
    rtdetr_forward(m, t, images, &hook, &o);
    LossConfig cfg = loss_config_default(a->nc);
    return loss_criterion(t, &cfg, &o, h.active ? &h.group : NULL, tg, NULL, items);
}
