#!/usr/bin/env python3
"""make_scipy.py OUTDIR -- writes OUTDIR/hungarian.bin, the scipy reference for
tests/test_hungarian.c and tests/test_matcher.c.

Needs numpy and scipy only (Debian's python3-numpy 1.24, python3-scipy 1.10; no torch):
    /usr/bin/python3 tests/golden/make_scipy.py tests/golden
The output is deterministic (seeded numpy generators). Same file format as make_golden.py
(tests/golden/README.md: named float32 arrays, read by tests/golden.h); integers are stored
as float32, exactly.

lsap/<i>/cost (r,c)    random float32 costs (no ties)   lsap/<i>/col (r)  scipy's column per
lsap/<i>/total ()      scipy's minimum total, float64   row or -1 (linear_sum_assignment)
                       rounded to float32
lsap_int/<i>/...       the same for small integer costs (many ties)

matcher/<i>/boxes (B,Q,4), logits (B,Q,K), gt_cls (N), gt_boxes (N,4), gt_groups (B): inputs;
matcher/<i>/cost/<b> (Q,n_b): HungarianMatcher's cost of image b, float64 rounded to float32;
matcher/<i>/query, matcher/<i>/gt (n_pairs): the matched pairs of every image in batch order,
gt offset by the image's cumulative GT start (what HungarianMatcher.forward returns).
The matcher reference is Ultralytics 8.1.34's formula (models/utils/ops.py HungarianMatcher,
utils/metrics.py bbox_iou) written again in float64 numpy: cost gains 2/5/2, alpha 0.25, gamma 2.
"""
import sys

import numpy as np
from scipy.optimize import linear_sum_assignment
from golden_writer import GoldenWriter  # noqa: E402 (this folder is on sys.path)



def f32(a):
    """float64 values that float32 holds exactly, so C and scipy see the same costs."""
    return np.asarray(a, dtype=np.float32).astype(np.float64)


def add_lsap(w, name, cost):
    rows, cols = linear_sum_assignment(cost)
    col = -np.ones(cost.shape[0])
    col[rows] = cols
    w.add(name + "/cost", cost)
    w.add(name + "/col", col)
    w.add(name + "/total", cost[rows, cols].sum())


LSAP_SHAPES = [(1, 1), (2, 2), (3, 3), (5, 5), (8, 8), (7, 4), (4, 7), (20, 6), (6, 20), (60, 15),
               (1, 5), (5, 1)]


def lsap_cases(w):
    rng = np.random.default_rng(1234)
    for i, (r, c) in enumerate(LSAP_SHAPES):
        add_lsap(w, "lsap/%d" % i, f32(rng.uniform(-5.0, 5.0, (r, c))))
    for i, (r, c) in enumerate(LSAP_SHAPES):
        add_lsap(w, "lsap_int/%d" % i, rng.integers(0, 4, (r, c)).astype(np.float64))


# ---- HungarianMatcher in float64 numpy ----
def giou_cxcywh(a, b, eps=1e-7):
    """bbox_iou(a[:, None], b[None], xywh=True, GIoU=True): (P,4), (G,4) -> (P,G)."""
    a, b = a[:, None, :], b[None, :, :]
    ax1, ax2 = a[..., 0] - a[..., 2] / 2, a[..., 0] + a[..., 2] / 2
    ay1, ay2 = a[..., 1] - a[..., 3] / 2, a[..., 1] + a[..., 3] / 2
    bx1, bx2 = b[..., 0] - b[..., 2] / 2, b[..., 0] + b[..., 2] / 2
    by1, by2 = b[..., 1] - b[..., 3] / 2, b[..., 1] + b[..., 3] / 2
    inter = (np.minimum(ax2, bx2) - np.maximum(ax1, bx1)).clip(0) * \
            (np.minimum(ay2, by2) - np.maximum(ay1, by1)).clip(0)
    union = a[..., 2] * a[..., 3] + b[..., 2] * b[..., 3] - inter + eps
    iou = inter / union
    cw = np.maximum(ax2, bx2) - np.minimum(ax1, bx1)
    ch = np.maximum(ay2, by2) - np.minimum(ay1, by1)
    c_area = cw * ch + eps
    return iou - (c_area - union) / c_area


def matcher_cost(boxes, logits, gt_cls, gt_boxes, alpha=0.25, gamma=2.0):
    p = (1.0 / (1.0 + np.exp(-logits)))[:, gt_cls]
    neg = (1 - alpha) * (p ** gamma) * (-np.log(1 - p + 1e-8))
    pos = alpha * ((1 - p) ** gamma) * (-np.log(p + 1e-8))
    cost_bbox = np.abs(boxes[:, None, :] - gt_boxes[None, :, :]).sum(-1)
    cost_giou = 1.0 - giou_cxcywh(boxes, gt_boxes)
    c = 2.0 * (pos - neg) + 5.0 * cost_bbox + 2.0 * cost_giou
    c[~np.isfinite(c)] = 0.0
    return c


def random_boxes(rng, shape):
    cxcy = rng.uniform(0.15, 0.85, shape + (2,))
    wh = rng.uniform(0.05, 0.5, shape + (2,))
    return f32(np.concatenate([cxcy, wh], -1))


# (B, Q, K, gt_groups): a bigger Q than n as in RT-DETR, an empty image, more GT than queries.
MATCHER_CASES = [(1, 6, 3, [3]), (3, 10, 5, [2, 0, 4]), (2, 30, 4, [7, 5]), (2, 4, 3, [6, 2])]


def matcher_cases(w):
    rng = np.random.default_rng(5678)
    for i, (B, Q, K, groups) in enumerate(MATCHER_CASES):
        N = sum(groups)
        boxes = random_boxes(rng, (B, Q))
        logits = f32(rng.normal(0.0, 2.0, (B, Q, K)))
        gt_cls = rng.integers(0, K, N)
        gt_boxes = random_boxes(rng, (N,))
        name = "matcher/%d" % i
        for key, value in (("boxes", boxes), ("logits", logits), ("gt_cls", gt_cls),
                           ("gt_boxes", gt_boxes), ("gt_groups", groups)):
            w.add("%s/%s" % (name, key), value)
        queries, gts, start = [], [], 0
        for b, n in enumerate(groups):
            c = matcher_cost(boxes[b], logits[b], gt_cls[start:start + n], gt_boxes[start:start + n])
            w.add("%s/cost/%d" % (name, b), c)
            rows, cols = linear_sum_assignment(c)
            queries += list(rows)
            gts += list(cols + start)
            start += n
        w.add(name + "/query", queries)
        w.add(name + "/gt", gts)


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "tests/golden"
    w = GoldenWriter()
    lsap_cases(w)
    matcher_cases(w)
    w.save(outdir + "/hungarian.bin")


if __name__ == "__main__":
    main()
