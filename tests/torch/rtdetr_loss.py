"""rtdetr_loss.py -- RT-DETR's training targets, contrastive denoising and loss in PyTorch, as
our C trainer computes them (trainer/nn/cdn.c, matcher.c, hungarian.c, loss.c), which follow
Ultralytics 8.1.34 (/work/shared/docs/rtdetr.md sections 3-4):

- targets_of(batch): Ultralytics' RTDETRDetectionModel.loss targets (gt_groups per image).
- get_cdn_group: noisy positive/negative copies of the GT as denoising queries, their slot
  layout, attention mask and dn_meta. The noise is drawn with torch's generator in
  Ultralytics' order; `batch["dn_noise"] = (classes (2GN,), box_logits (2GN,4))` supplies
  the noisy rows instead (what `ddpdbg-train dump` writes), so that a step can be repeated.
- HungarianMatcher: focal class cost (alpha 0.25, gamma 2), L1 and GIoU costs with gains
  2 / 5 / 2, NaN/Inf -> 0, one assignment per image (linear_sum_assignment below).
- RTDETRLoss: per output VFL (alpha 0.75, gamma 2: 8.1.34's values, ours) or focal loss
  (alpha 0.25, gamma 1.5) when nothing matched, L1 x 5 and (1 - GIoU) x 2 over the matched
  pairs; the encoder's proposals and decoder layers 0..4 as aux terms with their own matching,
  the denoising outputs with the fixed matching; constant zeros where Ultralytics has them.

linear_sum_assignment is scipy's when scipy imports (what Ultralytics calls); otherwise our
numpy port of trainer/nn/hungarian.c (the shortest augmenting path method, with scipy's
choice among tied optima), checked against scipy's recorded answers in
tests/golden/hungarian.bin by tests/cli/torch_ref.sh. MATCHER names which one runs.
"""
import collections

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from scipy.optimize import linear_sum_assignment
    MATCHER = "scipy"
except ImportError:  # Debian's python3-torch does not pull scipy in
    linear_sum_assignment = None
    MATCHER = "numpy port of trainer/nn/hungarian.c"

KEYS = ["loss_class", "loss_bbox", "loss_giou", "loss_class_aux", "loss_bbox_aux", "loss_giou_aux",
        "loss_class_dn", "loss_bbox_dn", "loss_giou_dn", "loss_class_aux_dn", "loss_bbox_aux_dn",
        "loss_giou_aux_dn"]


# ---- the optimal assignment ----

def lsap_port(cost):
    """(rows, cols) of a minimum-cost assignment of a (n, m) cost array, rows ascending: every
    row assigned when n <= m, every column when n > m (as scipy's linear_sum_assignment).
    trainer/nn/hungarian.c's algorithm; its comments prove it. Vectorised over the columns."""
    cost = np.asarray(cost, dtype=np.float64)
    if not np.isfinite(cost).all():
        raise ValueError("linear_sum_assignment: the costs must be finite")
    tall = cost.shape[0] > cost.shape[1]
    c = cost.T if tall else cost
    n_rows, n_cols = c.shape
    row_dual, col_dual = np.zeros(n_rows), np.zeros(n_cols)
    col_of_row = np.full(n_rows, -1, dtype=np.int64)
    row_of_col = np.full(n_cols, -1, dtype=np.int64)
    descending = np.arange(n_cols - 1, -1, -1)  # the scan order every search starts from
    for start in range(n_rows):
        # The first relaxation (from start: dual 0, distance 0) reaches every column; done in
        # index order, where scan order's first tied column is the highest index and its last
        # free tied one the lowest. Most searches end here, at a free column.
        dist = c[start] - col_dual
        via_row = np.full(n_cols, start, dtype=np.int64)
        order = descending.copy()  # settled columns swap to the back
        nearest = dist.min()
        tied = np.flatnonzero(dist == nearest)
        free = tied[row_of_col[tied] < 0]
        col = free[0] if len(free) else tied[-1]
        pick, n_unsettled = n_cols - 1 - col, n_cols
        while row_of_col[col] >= 0:  # settle col; its row joins the tree
            n_unsettled -= 1
            order[pick], order[n_unsettled] = order[n_unsettled], col
            row, row_dist = row_of_col[col], nearest
            cols = order[:n_unsettled]
            through = row_dist + c[row, cols] - row_dual[row] - col_dual[cols]
            better = through < dist[cols]
            dist[cols[better]] = through[better]
            via_row[cols[better]] = row
            d = dist[cols]
            nearest = d.min()
            tied = np.flatnonzero(d == nearest)
            free = tied[row_of_col[cols[tied]] < 0]
            pick = free[-1] if len(free) else tied[0]  # the last free tied column, else the first
            col = cols[pick]
        settled = order[n_unsettled:]
        row_dual[start] += nearest
        row_dual[row_of_col[settled]] += nearest - dist[settled]
        col_dual[settled] -= nearest - dist[settled]
        while True:  # flip the alternating path that ends at col
            row = via_row[col]
            released = col_of_row[row]
            row_of_col[col], col_of_row[row] = row, col
            if row == start:
                break
            col = released
    if tall:  # the wide problem's rows were the columns: pair each with its row, rows ascending
        by_row = np.argsort(col_of_row)
        return col_of_row[by_row], by_row
    return np.arange(n_rows), col_of_row


def assign(cost):
    """(rows, cols) of cost (a CPU tensor), by scipy when present, else by lsap_port."""
    if cost.shape[0] == 0 or cost.shape[1] == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if linear_sum_assignment is not None:
        return linear_sum_assignment(cost.numpy())
    return lsap_port(cost.numpy())


# ---- targets and denoising (rtdetr.md 2.14, 3) ----

def targets_of(batch):
    """RTDETRDetectionModel.loss's targets: cls (N,) long, bboxes (N,4), batch_idx (N,) long,
    gt_groups (B,) ints; plus dn_noise when the batch carries it."""
    img = batch["img"]
    batch_idx = batch["batch_idx"].to(img.device, dtype=torch.long).view(-1)
    if len(batch_idx) > 1 and bool((batch_idx[1:] < batch_idx[:-1]).any()):
        raise ValueError("batch_idx must be ascending (boxes grouped by image, as collated)")
    counts = torch.bincount(batch_idx, minlength=img.shape[0]) if len(batch_idx) else None
    gt_groups = counts.tolist() if counts is not None else [0] * img.shape[0]
    return {"cls": batch["cls"].to(img.device, dtype=torch.long).view(-1),
            "bboxes": batch["bboxes"].to(img.device, dtype=img.dtype).view(-1, 4),
            "batch_idx": batch_idx, "gt_groups": gt_groups, "dn_noise": batch.get("dn_noise")}


DnGroup = collections.namedtuple("DnGroup", "embed box_logits attn_mask pos_idx num_group num_split")


def _noisy_rows(targets, num_group, nc, cls_noise_ratio, box_noise_scale):
    """The 2GN noisy (class, box logit) rows, copy-major (row r is GT r mod N); rows
    [G N, 2G N) are the negatives. Drawn in Ultralytics' order, or taken from dn_noise."""
    cls, boxes, n = targets["cls"], targets["bboxes"], len(targets["cls"])
    rows = 2 * num_group * n
    if targets["dn_noise"] is not None:
        noisy_cls, noisy_box = targets["dn_noise"]
        if tuple(noisy_cls.shape) != (rows,) or tuple(noisy_box.shape) != (rows, 4):
            raise ValueError("dn_noise must be (%d,) classes and (%d,4) box logits, got %s and %s"
                             % (rows, rows, tuple(noisy_cls.shape), tuple(noisy_box.shape)))
        return noisy_cls.to(cls.device, torch.long), noisy_box.to(boxes.device, boxes.dtype)
    noisy_cls, noisy_box = cls.repeat(2 * num_group), boxes.repeat(2 * num_group, 1)
    if cls_noise_ratio > 0:
        replace = torch.rand(noisy_cls.shape, device=cls.device) < cls_noise_ratio * 0.5
        idx = torch.nonzero(replace).squeeze(-1)
        noisy_cls[idx] = torch.randint_like(idx, 0, nc)
    if box_noise_scale > 0:
        half = noisy_box[:, 2:] / 2
        corners = torch.cat([noisy_box[:, :2] - half, noisy_box[:, :2] + half], -1)  # xywh2xyxy
        diff = (noisy_box[:, 2:] * 0.5).repeat(1, 2) * box_noise_scale
        sign = torch.randint_like(noisy_box, 0, 2) * 2.0 - 1.0
        part = torch.rand_like(noisy_box)
        part[num_group * n:] += 1.0
        corners = (corners + part * sign * diff).clip(0.0, 1.0)
        noisy_box = torch.cat([(corners[:, :2] + corners[:, 2:]) / 2, corners[:, 2:] - corners[:, :2]], -1)
        noisy_box = torch.logit(noisy_box, eps=1e-6)
    return noisy_cls, noisy_box


def get_cdn_group(targets, nc, nq, class_embed, num_dn=100, cls_noise_ratio=0.5, box_noise_scale=1.0,
                  training=False):
    """The denoising queries (a DnGroup), or None when not training, num_dn <= 0 or the batch
    has no box. Slot of copy c, GT j of image b: c * max_gt + j; unused slots keep zero content
    and a zero box logit. Mask (True = blocked): matching queries see no dn slot, dn group g
    (slots [2 max_gt g, 2 max_gt (g+1))) sees no other group's slots."""
    gt_groups = targets["gt_groups"]
    max_gt = max(gt_groups) if gt_groups else 0
    if not training or num_dn <= 0 or max_gt == 0:
        return None
    num_group = max(num_dn // max_gt, 1)
    n, bs, device = len(targets["cls"]), len(gt_groups), class_embed.device
    noisy_cls, noisy_box = _noisy_rows(targets, num_group, nc, cls_noise_ratio, box_noise_scale)
    n_dn = 2 * num_group * max_gt
    local = torch.cat([torch.arange(k, dtype=torch.long) for k in gt_groups]).to(device)
    slots = torch.cat([local + max_gt * c for c in range(2 * num_group)])
    images = targets["batch_idx"].repeat(2 * num_group)
    embed = torch.zeros(bs, n_dn, class_embed.shape[-1], device=device, dtype=class_embed.dtype)
    box_logits = torch.zeros(bs, n_dn, 4, device=device, dtype=class_embed.dtype)
    embed[(images, slots)] = class_embed[noisy_cls]
    box_logits[(images, slots)] = noisy_box
    size = n_dn + nq
    row = torch.arange(size, device=device)[:, None]
    col = torch.arange(size, device=device)[None, :]
    group = 2 * max_gt
    attn_mask = (col < n_dn) & ((row >= n_dn) | (row // group != col // group))
    positives = torch.stack([local.cpu() + max_gt * c for c in range(num_group)])  # (G, N)
    pos_idx = [p.reshape(-1) for p in positives.split(list(gt_groups), dim=1)]
    return DnGroup(embed, box_logits, attn_mask, pos_idx, num_group, [n_dn, nq])


# ---- matching (rtdetr.md 4.2) ----

def box_iou(a, b, giou=False, eps=1e-7):
    """Ultralytics' bbox_iou(xywh=True) of cxcywh boxes broadcast against each other; the last
    dim of each is 4 and the result drops it."""
    (x1, y1, w1, h1), (x2, y2, w2, h2) = a.unbind(-1), b.unbind(-1)
    a_x1, a_x2, a_y1, a_y2 = x1 - w1 / 2, x1 + w1 / 2, y1 - h1 / 2, y1 + h1 / 2
    b_x1, b_x2, b_y1, b_y2 = x2 - w2 / 2, x2 + w2 / 2, y2 - h2 / 2, y2 + h2 / 2
    inter = (a_x2.minimum(b_x2) - a_x1.maximum(b_x1)).clamp(0) * \
            (a_y2.minimum(b_y2) - a_y1.maximum(b_y1)).clamp(0)
    union = w1 * h1 + w2 * h2 - inter + eps
    iou = inter / union
    if not giou:
        return iou
    c_area = (a_x2.maximum(b_x2) - a_x1.minimum(b_x1)) * (a_y2.maximum(b_y2) - a_y1.minimum(b_y1)) + eps
    return iou - (c_area - union) / c_area


class HungarianMatcher:
    def __init__(self, gain_class=2.0, gain_bbox=5.0, gain_giou=2.0, alpha=0.25, gamma=2.0):
        self.gains, self.alpha, self.gamma = (gain_class, gain_bbox, gain_giou), alpha, gamma

    def __call__(self, boxes, logits, targets):
        """Per image (query indices, global GT indices) of the optimal assignment."""
        bs, nq, nc = logits.shape
        gt_groups, gt_cls, gt_boxes = targets["gt_groups"], targets["cls"], targets["bboxes"]
        empty = torch.zeros(0, dtype=torch.long)
        if sum(gt_groups) == 0:
            return [(empty, empty) for _ in range(bs)]
        p = logits.detach().view(-1, nc).sigmoid()[:, gt_cls]
        boxes = boxes.detach().view(-1, 4)
        neg = (1 - self.alpha) * (p ** self.gamma) * (-(1 - p + 1e-8).log())
        pos = self.alpha * ((1 - p) ** self.gamma) * (-(p + 1e-8).log())
        cost_bbox = (boxes.unsqueeze(1) - gt_boxes.unsqueeze(0)).abs().sum(-1)
        cost_giou = 1.0 - box_iou(boxes.unsqueeze(1), gt_boxes.unsqueeze(0), giou=True)
        cost = self.gains[0] * (pos - neg) + self.gains[1] * cost_bbox + self.gains[2] * cost_giou
        cost[cost.isnan() | cost.isinf()] = 0.0
        cost = cost.view(bs, nq, -1).cpu()
        pairs, start = [], 0
        for b, block in enumerate(cost.split(gt_groups, -1)):
            rows, cols = assign(block[b])
            pairs.append((torch.as_tensor(rows, dtype=torch.long),
                          torch.as_tensor(cols, dtype=torch.long) + start))
            start += gt_groups[b]
        return pairs


def dn_pairs(dn, targets):
    """get_dn_match_indices: image b's positive slots against its GTs repeated G times."""
    pairs, start, empty = [], 0, torch.zeros(0, dtype=torch.long)
    for b, n in enumerate(targets["gt_groups"]):
        gts = (torch.arange(n, dtype=torch.long) + start).repeat(dn.num_group)
        pairs.append((dn.pos_idx[b], gts) if n > 0 else (empty, empty))
        start += n
    return pairs


# ---- the criterion (rtdetr.md 4.3-4.4) ----

def varifocal(logits, target, label, alpha=0.75, gamma=2.0):
    weight = alpha * logits.sigmoid().pow(gamma) * (1 - label) + target * label  # not detached
    bce = F.binary_cross_entropy_with_logits(logits.float(), target.float(), reduction="none")
    return (bce * weight).mean(1).sum()


def focal(logits, label, gamma=1.5, alpha=0.25):
    loss = F.binary_cross_entropy_with_logits(logits, label, reduction="none")
    p = logits.sigmoid()
    p_t = label * p + (1 - label) * (1 - p)
    loss = loss * (1.0 - p_t) ** gamma * (label * alpha + (1 - label) * (1 - alpha))
    return loss.mean(1).sum()


class RTDETRLoss(nn.Module):
    def __init__(self, nc, gain_class=1.0, gain_bbox=5.0, gain_giou=2.0):
        super().__init__()
        self.nc, self.gains = nc, (gain_class, gain_bbox, gain_giou)
        self.matcher = HungarianMatcher()

    def layer_loss(self, boxes, logits, pairs, targets):
        """DETRLoss._get_loss: (class, bbox, giou) of one output (B,Q,4), (B,Q,nc)."""
        bs, nq = logits.shape[:2]
        image = torch.cat([torch.full_like(q, b) for b, (q, _) in enumerate(pairs)]).to(logits.device)
        query = torch.cat([q for q, _ in pairs]).to(logits.device)
        gt = torch.cat([g for _, g in pairs]).to(logits.device)
        matched, gt_boxes = boxes[image, query], targets["bboxes"][gt]
        classes = torch.full((bs, nq), self.nc, device=logits.device, dtype=torch.long)
        classes[image, query] = targets["cls"][gt]
        scores = torch.zeros(bs, nq, device=logits.device, dtype=logits.dtype)
        if len(gt):
            scores[image, query] = box_iou(matched.detach(), gt_boxes)
        label = F.one_hot(classes, self.nc + 1)[..., :-1].to(logits.dtype)
        target = scores.view(bs, nq, 1) * label
        m = len(gt)
        cls = varifocal(logits, target, label) if m else focal(logits, label)
        cls = cls / (max(m, 1) / nq) * self.gains[0]
        if m == 0:  # _get_loss_bbox's fresh constants: nothing consumes the boxes
            zero = torch.tensor(0.0, device=logits.device)
            return cls, zero, zero.clone()
        l1 = self.gains[1] * F.l1_loss(matched, gt_boxes, reduction="sum") / m
        giou = self.gains[2] * (1.0 - box_iou(matched, gt_boxes, giou=True)).sum() / m
        return cls, l1, giou

    def detr_loss(self, boxes, logits, targets, fixed_pairs, suffix):
        """The last output is the main loss, the others sum into the _aux keys."""
        n = len(boxes)
        terms = {}
        for step in range(n):
            i = n - 1 if step == 0 else step - 1
            pairs = fixed_pairs if fixed_pairs is not None else self.matcher(boxes[i], logits[i], targets)
            values = self.layer_loss(boxes[i], logits[i], pairs, targets)
            for name, value in zip(("loss_class", "loss_bbox", "loss_giou"), values):
                key = name + ("" if step == 0 else "_aux") + suffix
                terms[key] = value if key not in terms else terms[key] + value
        for name in ("loss_class", "loss_bbox", "loss_giou"):
            terms.setdefault(name + "_aux" + suffix, torch.tensor(0.0, device=logits.device))
        return terms

    def forward(self, outputs, dn, targets):
        """outputs: RTDETRDecoder's (dec_boxes, dec_logits, enc_boxes, enc_logits); dn its
        DnGroup or None. Returns {key: scalar} in KEYS order."""
        dec_boxes, dec_logits, enc_boxes, enc_logits = outputs
        if dn is not None:
            dn_boxes, dec_boxes = torch.split(dec_boxes, dn.num_split, dim=2)
            dn_logits, dec_logits = torch.split(dec_logits, dn.num_split, dim=2)
        boxes = torch.cat([enc_boxes.unsqueeze(0), dec_boxes])
        logits = torch.cat([enc_logits.unsqueeze(0), dec_logits])
        terms = self.detr_loss(boxes, logits, targets, None, "")
        if dn is not None:
            terms.update(self.detr_loss(dn_boxes, dn_logits, targets, dn_pairs(dn, targets), "_dn"))
        else:
            terms.update({k: torch.tensor(0.0, device=enc_boxes.device) for k in KEYS[6:]})
        return {k: terms[k] for k in KEYS}
