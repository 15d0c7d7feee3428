#!/usr/bin/env python3
"""make_loss.py OUTDIR -- writes OUTDIR/loss.bin, the reference for tests/test_loss.c: the
RT-DETR criterion of Ultralytics 8.1.34 (RTDETRDetectionModel.loss after the forward,
RTDETRDetectionLoss, DETRLoss, HungarianMatcher, VarifocalLoss alpha 0.75 gamma 2.0,
FocalLoss, bbox_iou; rtdetr.md section 4) written again in torch float64, on small fixed
inputs given as leaves: the model's four training outputs and a denoising layout stated
explicitly (no random draws), so the C test can feed the same layout.

Needs Debian's python3-torch and python3-scipy:
    /usr/bin/python3 tests/golden/make_loss.py tests/golden
Deterministic (seeded numpy generator). Format: tests/golden/README.md (named float32 arrays).

Per case <c> (dn: GT and denoising; nodn: the same GT without denoising; empty: no GT):
  <c>/enc_bboxes (B,Q,4), <c>/enc_scores (B,Q,K), <c>/dec_bboxes (L,B,Ndn+Q,4),
  <c>/dec_scores (L,B,Ndn+Q,K): the inputs (float32, sigmoid boxes and logits);
  <c>/gt_cls (N), <c>/gt_bboxes (N,4), <c>/counts (B); <c>/dn = [G, Ndn, max_gt];
  <c>/pos_start (B+1), <c>/pos_idx (G*N): dn_pos_idx concatenated (dn case only);
  <c>/keys (12): the loss dict in Ultralytics' order, <c>/total: their sum;
  <c>/d_enc_bboxes, d_enc_scores, d_dec_bboxes, d_dec_scores: d total / d input
  (zeros where torch's grad is None).
"""
import sys

import numpy as np
import torch
import torch.nn.functional as F
from scipy.optimize import linear_sum_assignment
from golden_writer import GoldenWriter  # noqa: E402 (this folder is on sys.path)

KEYS = ["loss_class", "loss_bbox", "loss_giou", "loss_class_aux", "loss_bbox_aux", "loss_giou_aux"]
KEYS = KEYS + [k + "_dn" for k in KEYS]


# ---- Ultralytics utils/metrics.py bbox_iou (xywh=True) ----
def bbox_iou(box1, box2, giou=False, eps=1e-7):
    (x1, y1, w1, h1), (x2, y2, w2, h2) = box1.chunk(4, -1), box2.chunk(4, -1)
    w1_, h1_, w2_, h2_ = w1 / 2, h1 / 2, w2 / 2, h2 / 2
    b1_x1, b1_x2, b1_y1, b1_y2 = x1 - w1_, x1 + w1_, y1 - h1_, y1 + h1_
    b2_x1, b2_x2, b2_y1, b2_y2 = x2 - w2_, x2 + w2_, y2 - h2_, y2 + h2_
    inter = (b1_x2.minimum(b2_x2) - b1_x1.maximum(b2_x1)).clamp(0) * \
            (b1_y2.minimum(b2_y2) - b1_y1.maximum(b2_y1)).clamp(0)
    union = w1 * h1 + w2 * h2 - inter + eps
    iou = inter / union
    if not giou:
        return iou
    cw = b1_x2.maximum(b2_x2) - b1_x1.minimum(b2_x1)
    ch = b1_y2.maximum(b2_y2) - b1_y1.minimum(b2_y1)
    c_area = cw * ch + eps
    return iou - (c_area - union) / c_area


# ---- HungarianMatcher (cost gains 2/5/2, focal cost alpha 0.25 gamma 2) ----
def hungarian(pred_bboxes, pred_scores, gt_bboxes, gt_cls, gt_groups, alpha=0.25, gamma=2.0):
    bs, nq, nc = pred_scores.shape
    if sum(gt_groups) == 0:
        return [(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)) for _ in range(bs)]
    p = pred_scores.detach().view(-1, nc).sigmoid()[:, gt_cls]
    boxes = pred_bboxes.detach().view(-1, 4)
    neg = (1 - alpha) * (p ** gamma) * (-(1 - p + 1e-8).log())
    pos = alpha * ((1 - p) ** gamma) * (-(p + 1e-8).log())
    cost_bbox = (boxes.unsqueeze(1) - gt_bboxes.unsqueeze(0)).abs().sum(-1)
    cost_giou = 1.0 - bbox_iou(boxes.unsqueeze(1), gt_bboxes.unsqueeze(0), giou=True).squeeze(-1)
    c = 2 * (pos - neg) + 5 * cost_bbox + 2 * cost_giou
    c[c.isnan() | c.isinf()] = 0.0
    c = c.view(bs, nq, -1)
    indices = [linear_sum_assignment(blk[i].numpy()) for i, blk in enumerate(c.split(gt_groups, -1))]
    start = np.concatenate([[0], np.cumsum(gt_groups)[:-1]])
    return [(torch.as_tensor(i, dtype=torch.long), torch.as_tensor(j, dtype=torch.long) + int(start[k]))
            for k, (i, j) in enumerate(indices)]


# ---- DETRLoss / RTDETRDetectionLoss ----
def varifocal(pred, gt_score, label, alpha=0.75, gamma=2.0):
    weight = alpha * pred.sigmoid().pow(gamma) * (1 - label) + gt_score * label
    return (F.binary_cross_entropy_with_logits(pred, gt_score, reduction="none") * weight).mean(1).sum()


def focal(pred, label, gamma=1.5, alpha=0.25):
    loss = F.binary_cross_entropy_with_logits(pred, label, reduction="none")
    p = pred.sigmoid()
    p_t = label * p + (1 - label) * (1 - p)
    loss = loss * (1.0 - p_t) ** gamma
    loss = loss * (label * alpha + (1 - label) * (1 - alpha))
    return loss.mean(1).sum()


def get_loss(pred_bboxes, pred_scores, gt_bboxes, gt_cls, gt_groups, nc, postfix, match):
    if match is None:
        match = hungarian(pred_bboxes, pred_scores, gt_bboxes, gt_cls, gt_groups)
    batch_idx = torch.cat([torch.full_like(src, i) for i, (src, _) in enumerate(match)])
    src_idx = torch.cat([src for src, _ in match])
    dst_idx = torch.cat([dst for _, dst in match])
    idx = (batch_idx, src_idx)
    pred_b, gt_b = pred_bboxes[idx], gt_bboxes[dst_idx]
    bs, nq = pred_scores.shape[:2]
    targets = torch.full((bs, nq), nc, dtype=torch.long)
    targets[idx] = gt_cls[dst_idx]
    gt_scores = torch.zeros(bs, nq, dtype=pred_scores.dtype)
    if len(gt_b):
        gt_scores[idx] = bbox_iou(pred_b.detach(), gt_b).squeeze(-1)
    m = len(gt_b)
    one_hot = torch.zeros((bs, nq, nc + 1), dtype=torch.int64)
    one_hot.scatter_(2, targets.unsqueeze(-1), 1)
    one_hot = one_hot[..., :-1]
    gt_scores = gt_scores.view(bs, nq, 1) * one_hot
    if m:
        loss_cls = varifocal(pred_scores, gt_scores, one_hot)
    else:
        loss_cls = focal(pred_scores, one_hot.to(pred_scores.dtype))
    loss_cls = loss_cls / (max(m, 1) / nq)
    out = {"loss_class" + postfix: loss_cls.squeeze() * 1.0}
    if m == 0:
        out["loss_bbox" + postfix] = torch.tensor(0.0, dtype=pred_scores.dtype)
        out["loss_giou" + postfix] = torch.tensor(0.0, dtype=pred_scores.dtype)
        return out
    out["loss_bbox" + postfix] = 5.0 * F.l1_loss(pred_b, gt_b, reduction="sum") / m
    out["loss_giou" + postfix] = 2.0 * ((1.0 - bbox_iou(pred_b, gt_b, giou=True)).sum() / m)
    return out


def detr_loss(pred_bboxes, pred_scores, gt_bboxes, gt_cls, gt_groups, nc, postfix="", match=None):
    total = get_loss(pred_bboxes[-1], pred_scores[-1], gt_bboxes, gt_cls, gt_groups, nc, postfix, match)
    aux = torch.zeros(3, dtype=pred_scores.dtype)
    for b, s in zip(pred_bboxes[:-1], pred_scores[:-1]):
        l = get_loss(b, s, gt_bboxes, gt_cls, gt_groups, nc, postfix, match)
        aux[0] += l["loss_class" + postfix]
        aux[1] += l["loss_bbox" + postfix]
        aux[2] += l["loss_giou" + postfix]
    total.update({"loss_class_aux" + postfix: aux[0], "loss_bbox_aux" + postfix: aux[1],
                  "loss_giou_aux" + postfix: aux[2]})
    return total


def dn_match_indices(pos_idx, groups, gt_groups):
    out, start = [], 0
    for i, n in enumerate(gt_groups):
        if n > 0:
            gt_idx = (torch.arange(n, dtype=torch.long) + start).repeat(groups)
            assert len(pos_idx[i]) == len(gt_idx)
            out.append((pos_idx[i], gt_idx))
        else:
            out.append((torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)))
        start += n
    return out


def model_loss(dec_bboxes, dec_scores, enc_bboxes, enc_scores, gt_cls, gt_bboxes, gt_groups, nc, dn):
    """RTDETRDetectionModel.loss from the head's outputs; dn = (pos_idx list, G, Ndn) or None."""
    if dn is not None:
        q = dec_bboxes.shape[2] - dn[2]
        dn_bboxes, dec_bboxes = torch.split(dec_bboxes, [dn[2], q], dim=2)
        dn_scores, dec_scores = torch.split(dec_scores, [dn[2], q], dim=2)
    dec_bboxes = torch.cat([enc_bboxes.unsqueeze(0), dec_bboxes])
    dec_scores = torch.cat([enc_scores.unsqueeze(0), dec_scores])
    loss = detr_loss(dec_bboxes, dec_scores, gt_bboxes, gt_cls, gt_groups, nc)
    if dn is not None:
        match = dn_match_indices(dn[0], dn[1], gt_groups)
        loss.update(detr_loss(dn_bboxes, dn_scores, gt_bboxes, gt_cls, gt_groups, nc, "_dn", match))
    else:
        loss.update({k + "_dn": torch.tensor(0.0, dtype=dec_scores.dtype) for k in list(loss.keys())})
    assert list(loss.keys()) == KEYS, list(loss.keys())
    return loss


def random_boxes(rng, shape):
    cxcy = rng.uniform(0.2, 0.8, shape + (2,))
    wh = rng.uniform(0.08, 0.5, shape + (2,))
    return np.concatenate([cxcy, wh], -1).astype(np.float32)


def add_case(w, name, rng, counts, num_dn, nc=3, nq=6, ndl=3):
    b, n = len(counts), sum(counts)
    max_gt = max(counts) if counts else 0
    with_dn = num_dn > 0 and max_gt > 0
    groups = max(num_dn // max_gt, 1) if with_dn else 0
    n_dn = 2 * groups * max_gt
    gt_cls = rng.integers(0, nc, n)
    gt_bboxes = random_boxes(rng, (n,))
    inputs = {
        "enc_bboxes": random_boxes(rng, (b, nq)),
        "enc_scores": rng.normal(-1.0, 1.5, (b, nq, nc)).astype(np.float32),
        "dec_bboxes": random_boxes(rng, (ndl, b, n_dn + nq)),
        "dec_scores": rng.normal(-1.0, 1.5, (ndl, b, n_dn + nq, nc)).astype(np.float32),
    }
    for k, v in inputs.items():
        w.add("%s/%s" % (name, k), v)
    w.add(name + "/gt_cls", gt_cls)
    w.add(name + "/gt_bboxes", gt_bboxes)
    w.add(name + "/counts", counts)
    w.add(name + "/dn", [groups, n_dn, max_gt])
    dn = None
    if with_dn:  # get_cdn_group's dn_pos_idx: per image c*max_gt + j, c < G, j < n_b
        pos = [torch.tensor([c * max_gt + j for c in range(groups) for j in range(nb)], dtype=torch.long)
               for nb in counts]
        w.add(name + "/pos_start", np.concatenate([[0], np.cumsum([len(p) for p in pos])]))
        w.add(name + "/pos_idx", torch.cat(pos).numpy())
        dn = (pos, groups, n_dn)
    leaves = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in inputs.items()}
    loss = model_loss(leaves["dec_bboxes"], leaves["dec_scores"], leaves["enc_bboxes"],
                      leaves["enc_scores"], torch.as_tensor(gt_cls, dtype=torch.long),
                      torch.tensor(gt_bboxes, dtype=torch.float64), list(counts), nc, dn)
    total = sum(loss.values())
    total.backward()
    w.add(name + "/keys", [float(loss[k]) for k in KEYS])
    w.add(name + "/total", float(total))
    for k, v in leaves.items():
        w.add("%s/d_%s" % (name, k), v.grad if v.grad is not None else torch.zeros_like(v))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/golden"
    torch.set_grad_enabled(True)
    rng = np.random.default_rng(20240334)
    w = GoldenWriter()
    # B = 3 (image 1 without GT: only padding slots), max_gt 2, num_dn 4 -> G = 2, Ndn = 8
    add_case(w, "dn", rng, [2, 0, 1], 4)
    add_case(w, "nodn", rng, [2, 0, 1], 0)
    add_case(w, "empty", rng, [0, 0], 0)
    w.save(out + "/loss.bin")


if __name__ == "__main__":
    main()
