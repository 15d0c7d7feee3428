#!/usr/bin/env python3
"""make_optim.py OUTDIR -- writes OUTDIR/optim.bin, the torch reference for tests/test_optim.c:
torch.optim.AdamW and torch.optim.SGD(nesterov) over several steps (with parameters whose grad
is None at some steps), torch.nn.utils.clip_grad_norm_, and Ultralytics' ModelEMA update.

Needs Debian's python3-torch (1.13, CPU): /usr/bin/python3 tests/golden/make_optim.py tests/golden
Everything runs in float32, as in training: the C code must match these values bit for bit.
Every hyper-parameter (lr, weight decay, momentum) is a float32 value used as a Python float,
so that the float32 array in the file gives the C side the very double Python used.
Same file format as make_golden.py (tests/golden/README.md), whose writer it imports.
"""
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_writer import GoldenWriter  # noqa: E402

SHAPES = [(37,), (5, 7), (16,)]   # 37 and 35 elements: vector body plus a scalar tail
STEPS = 6
NONE_AT = {1: {1, 3}, 2: {0}}     # parameter -> steps at which its grad is None
LRS = [1e-3, 2e-3, 5e-3, 1e-2, 1e-2, 3e-3]


class Snapshot(GoldenWriter):
    """GoldenWriter that copies tensors when added: the optimizers and clip_grad_norm_ change
    them in place afterwards, and GoldenWriter keeps a numpy view."""

    def add(self, name, value):
        if isinstance(value, torch.Tensor):
            value = value.detach().clone()
        super().add(name, value)


def f32(x):
    return float(np.float32(x))


def gen(seed):
    return torch.Generator().manual_seed(seed)


def initial_params(g):
    return [torch.randn(s, generator=g) for s in SHAPES]


def step_grads(g, s):
    """Grads of step s: None where NONE_AT says, else normal draws (p0 also has tiny entries,
    where eps matters, and exact zeros)."""
    grads = []
    for i, shape in enumerate(SHAPES):
        gr = torch.randn(shape, generator=g) * (0.5 + i)
        if i == 0:
            gr[:4] *= 1e-7
            gr[4:6] = 0.0
        grads.append(None if s in NONE_AT.get(i, ()) else gr)
    return grads


def run_optimizer(w, name, make, hyper):
    """Runs STEPS steps of the optimizer make(params) builds; hyper(opt, s) sets lr/momentum."""
    g = gen(11)
    params = [p.clone().requires_grad_(True) for p in initial_params(g)]
    for i, p in enumerate(params):
        w.add("%s/p%d/init" % (name, i), p)
    opt = make(params)
    for s in range(STEPS):
        hyper(opt, s)
        for i, gr in enumerate(step_grads(g, s)):
            params[i].grad = gr
            if gr is not None:
                w.add("%s/g%d/%d" % (name, s, i), gr)
        opt.step()
        for i, p in enumerate(params):
            w.add("%s/p%d/after%d" % (name, i, s), p)
    return opt, params


def case_adamw(w):
    wd = f32(0.05)
    lrs = [f32(x) for x in LRS]
    w.add("adamw/lr", lrs)
    w.add("adamw/wd", [wd])

    def make(params):
        # p0, p1 decay (like conv weights), p2 does not (like a bias)
        return torch.optim.AdamW([{"params": params[:2], "weight_decay": wd},
                                  {"params": params[2:], "weight_decay": 0.0}],
                                 lr=lrs[0], betas=(0.9, 0.999), eps=1e-8, foreach=False)

    def hyper(opt, s):
        for gr in opt.param_groups:
            gr["lr"] = lrs[s]

    opt, params = run_optimizer(w, "adamw", make, hyper)
    for i, p in enumerate(params):
        st = opt.state[p]
        w.add("adamw/exp_avg/%d" % i, st["exp_avg"])
        w.add("adamw/exp_avg_sq/%d" % i, st["exp_avg_sq"])
        w.add("adamw/step/%d" % i, [float(st["step"])])


def case_sgd(w):
    wd = f32(5e-4)
    lrs = [f32(x * 10) for x in LRS]
    moms = [f32(0.8 + 0.137 * s / (STEPS - 1)) for s in range(STEPS)]  # a warmup-like ramp
    w.add("sgd/lr", lrs)
    w.add("sgd/momentum", moms)
    w.add("sgd/wd", [wd])

    def make(params):
        return torch.optim.SGD([{"params": params[:2], "weight_decay": wd},
                                {"params": params[2:], "weight_decay": 0.0}],
                               lr=lrs[0], momentum=moms[0], nesterov=True, foreach=False)

    def hyper(opt, s):
        for gr in opt.param_groups:
            gr["lr"] = lrs[s]
            gr["momentum"] = moms[s]

    opt, params = run_optimizer(w, "sgd", make, hyper)
    for i, p in enumerate(params):
        w.add("sgd/momentum_buffer/%d" % i, opt.state[p]["momentum_buffer"])


def case_clip(w):
    g = gen(12)
    for c, scale in (("big", 3.0), ("small", 0.1)):
        params = [torch.zeros(s, requires_grad=True) for s in SHAPES]
        for i, p in enumerate(params):
            if i != 1:   # p1's grad stays None
                p.grad = torch.randn(p.shape, generator=g) * scale
                w.add("clip/%s/g%d" % (c, i), p.grad)
        total = torch.nn.utils.clip_grad_norm_(params, max_norm=10.0)
        w.add("clip/%s/total" % c, [total.item()])
        for i, p in enumerate(params):
            if p.grad is not None:
                w.add("clip/%s/clipped%d" % (c, i), p.grad)


def case_ema(w):
    """ModelEMA.update over a state dict of two weights and a float buffer (the int64 counter
    it skips is the C test's business), from updates = 0 and from updates = 3000."""
    g = gen(13)
    for c, updates in (("fresh", 0), ("late", 3000)):
        ema = {k: torch.randn(s, generator=g) for k, s in zip(("w0", "w1", "rm"), SHAPES)}
        for k, v in ema.items():
            w.add("ema/%s/init/%s" % (c, k), v)
        w.add("ema/%s/updates" % c, [updates])
        for u in range(4):
            model = {k: torch.randn(v.shape, generator=g) for k, v in ema.items()}
            updates += 1
            d = 0.9999 * (1 - math.exp(-updates / 2000))   # ModelEMA.decay
            for k, v in ema.items():
                w.add("ema/%s/model%d/%s" % (c, u, k), model[k])
                v *= d
                v += (1 - d) * model[k].detach()
        for k, v in ema.items():
            w.add("ema/%s/after/%s" % (c, k), v)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_optim.py OUTDIR")
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    w = Snapshot()
    for case in (case_adamw, case_sgd, case_clip, case_ema):
        case(w)
    w.save(sys.argv[1] + "/optim.bin")


if __name__ == "__main__":
    main()
