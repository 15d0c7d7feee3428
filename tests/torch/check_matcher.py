"""check_matcher.py [tests/golden/hungarian.bin] -- rtdetr_loss's assignment against scipy's
recorded answers (tests/golden/make_scipy.py: scipy.optimize.linear_sum_assignment on random
and on tie-heavy integer costs, wide and tall, and Ultralytics' HungarianMatcher on four
batches). The numpy port (lsap_port) is checked always, scipy's own function too when scipy
imports: the same columns for every row (so the same choice among tied optima), the same
total; the matcher's (query, GT) pairs of every image equal. Exit 0 when all agree, 1 with
the first difference, 2 when the file cannot be read.
"""
import os
import sys

import numpy as np
import torch

import ddpdbg_files
import rtdetr_loss
import rtdetr_torch

GOLDEN = os.path.join(rtdetr_torch.REPO, "tests", "golden", "hungarian.bin")


def check_lsap(arrays, solvers):
    n = 0
    for key in arrays:
        if not key.endswith("/cost") or not key.startswith("lsap"):
            continue
        case = key[:-len("/cost")]
        cost = arrays[key].double().numpy()
        want = arrays[case + "/col"].long().numpy()
        for name, solve in solvers:
            rows, cols = solve(cost)
            got = -np.ones(cost.shape[0], dtype=np.int64)
            got[rows] = cols
            if not (got == want).all() or not np.all(np.diff(rows) > 0):
                return "%s: %s assigns %s, scipy recorded %s" % (case, name, got.tolist(), want.tolist())
            total = float(cost[rows, cols].sum())
            if abs(total - arrays[case + "/total"].item()) > 1e-5 * max(1.0, abs(total)):
                return "%s: %s's total %.9g, scipy's %.9g" % (case, name, total, arrays[case + "/total"].item())
        n += 1
    return n


def check_matcher(arrays):
    n = 0
    matcher = rtdetr_loss.HungarianMatcher()
    while "matcher/%d/boxes" % n in arrays:
        name = "matcher/%d" % n
        groups = [int(g) for g in arrays[name + "/gt_groups"].tolist()]
        targets = {"gt_groups": groups, "cls": arrays[name + "/gt_cls"].long(),
                   "bboxes": arrays[name + "/gt_boxes"]}
        pairs = matcher(arrays[name + "/boxes"], arrays[name + "/logits"], targets)
        query = torch.cat([q for q, _ in pairs]).tolist()
        gt = torch.cat([g for _, g in pairs]).tolist()
        if query != arrays[name + "/query"].long().tolist() or gt != arrays[name + "/gt"].long().tolist():
            return "%s: pairs %s, scipy's %s" % (name, list(zip(query, gt)), list(zip(
                arrays[name + "/query"].long().tolist(), arrays[name + "/gt"].long().tolist())))
        n += 1
    return n


def main(path):
    try:
        arrays = ddpdbg_files.read_arrays(path)
    except (OSError, ValueError) as e:
        print("check_matcher: %s" % e, file=sys.stderr)
        return 2
    solvers = [("lsap_port", rtdetr_loss.lsap_port)]
    if rtdetr_loss.linear_sum_assignment is not None:
        solvers.append(("scipy", rtdetr_loss.linear_sum_assignment))
    lsap = check_lsap(arrays, solvers)
    matched = check_matcher(arrays) if isinstance(lsap, int) else None
    for result in (lsap, matched):
        if isinstance(result, str):
            print("DIFFERENT: " + result)
            return 1
    print("SAME: %d assignment cases (%s) and %d matcher batches (with %s) as scipy's recorded answers"
          % (lsap, ", ".join(n for n, _ in solvers), matched, rtdetr_loss.MATCHER))
    return 0 if lsap > 0 and matched > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else GOLDEN))
