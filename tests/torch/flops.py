"""flops.py -- where a training step of rtdetr_torch's model spends its time and its arithmetic,
per op family: conv, GEMM/linear, deformable attention (grid_sample), norms, elementwise and
the rest, loss/matcher, optimizer (issue 14 wants each family's time against its FLOPs).

FLOPs (count_step): forward hooks count each module's multiply-adds x 2 in the forward:
  conv   Conv2d: 2 B Cout Hout Wout (Cin/g) k k
  gemm   Linear: 2 rows in out; MultiheadAttention: its q/k/v/out projections and the two
         attention products (2 B Lq Lk E each)
  deform MSDeformAttn's sampling: 10 flops per channel per sample (4 bilinear taps, multiply
         and add, and the attention weight), B Lq heads levels points samples of dh channels;
         its four Linears count as gemm
  norms  BatchNorm2d / LayerNorm: 7 flops per element (mean, variance, normalise, affine)
The backward is counted as 2 x the forward for every family (a conv or linear's input and
weight gradients each cost what its forward does; an estimate for the others). Elementwise
ops, the loss and the optimizer are not counted (they are memory-bound; their time is shown).

Time (profile_step): one step under torch.profiler (record_shapes on). Ops inside the
"loss" scope (RTDETR.loss_terms' criterion: targets, matching, the loss terms; forward only)
and the "optimizer" scope (clip, AdamW, zero_grad, EMA) count as those families, as the
scope's whole time on CPU (Python, numpy and scipy included); every other op's self time goes
to the family of the nearest op on its call path whose name says one (so the bias sum inside
a linear's backward counts as gemm). On CUDA the device time of the ops' kernels is summed
the same way. "other" is the step's wall time not covered (Python, the autograd engine).
The profiler's own overhead makes the profiled step slower than an unprofiled one (about
1.5-2x for rtdetr-tiny, less for bigger models): compare families, and take step times from
the unprofiled steps.
"""
import torch
import torch.nn as nn

import rtdetr_torch

FAMILIES = ["conv", "gemm", "deform", "norms", "elementwise", "loss/matcher", "optimizer", "other"]
LABELS = {"conv": "conv", "gemm": "GEMM/linear", "deform": "deformable attn (grid_sample)",
          "norms": "norms", "elementwise": "elementwise and the rest", "loss/matcher": "loss/matcher",
          "optimizer": "optimizer (clip, AdamW, EMA)", "other": "other (Python, autograd engine)"}
# Op-name fragments of each family, tried in this order (lower case).
NAME_FAMILIES = [("deform", ("grid_sampler",)),
                 ("conv", ("conv",)),
                 ("norms", ("batch_norm", "layer_norm", "batchnorm", "layernorm")),
                 ("gemm", ("addmm", "::mm", "bmm", "matmul", "linear", "mmbackward"))]
SCOPES = {"loss": "loss/matcher", "optimizer": "optimizer"}
STEP_SCOPES = ("forward_and_loss", "backward")  # bench_step's: their self time is Python


# ---- FLOPs ----

class FlopCounter:
    """Forward FLOPs per family while active (a context manager over model's modules)."""

    def __init__(self, model):
        self.model, self.fwd, self.handles = model, dict.fromkeys(FAMILIES[:4], 0), []

    def __enter__(self):
        for m in self.model.modules():
            hook = self.hook_for(m)
            if hook:
                self.handles.append(m.register_forward_hook(hook))
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()

    def hook_for(self, m):
        def conv(mod, inp, out):
            k = mod.kernel_size[0] * mod.kernel_size[1] * mod.in_channels // mod.groups
            self.fwd["conv"] += 2 * out.numel() * k

        def linear(mod, inp, out):
            self.fwd["gemm"] += 2 * inp[0].numel() // mod.in_features * mod.in_features * mod.out_features

        def mha(mod, inp, out):
            q, k = inp[0], inp[1]
            lq, lk, e = q.numel() // q.shape[-1], k.numel() // k.shape[-1], mod.embed_dim
            batch = q.shape[0] if mod.batch_first else q.shape[1]
            self.fwd["gemm"] += 2 * e * e * (2 * lq + 2 * lk) + 2 * 2 * (lq // batch) * lk * e

        def deform(mod, inp, out):
            query = inp[0]
            samples = query.shape[0] * query.shape[1] * mod.heads * mod.levels * mod.points
            self.fwd["deform"] += 10 * samples * (query.shape[2] // mod.heads)

        def norm(mod, inp, out):
            self.fwd["norms"] += 7 * out.numel()

        if isinstance(m, nn.Conv2d):
            return conv
        if isinstance(m, nn.Linear) and not isinstance(m, nn.modules.linear.NonDynamicallyQuantizableLinear):
            return linear  # MHA's out_proj is applied by F.multi_head_attention_forward: counted there
        if isinstance(m, nn.MultiheadAttention):
            return mha
        if isinstance(m, rtdetr_torch.MSDeformAttn):
            return deform
        if isinstance(m, (nn.BatchNorm2d, nn.LayerNorm)):
            return norm
        return None

    def table(self):
        """{family: (forward GFLOP, forward + backward GFLOP)}."""
        return {f: (v / 1e9, 3 * v / 1e9) for f, v in self.fwd.items()}


def count_step(model, batch):
    """FLOP table of one training forward (and its estimated backward) on batch."""
    with FlopCounter(model) as counter:
        loss, _ = model(batch)
    del loss
    return {"flops": counter.table(), "times": None}


# ---- time per family ----

def _family_by_name(event):
    """The family of the nearest op on event's call path whose name says one, or None;
    stops at a scope."""
    e = event
    while e is not None and e.name not in SCOPES:
        name = e.name.lower()
        for family, fragments in NAME_FAMILIES:
            if any(f in name for f in fragments):
                return family
        e = e.cpu_parent
    return None


def _scope_of(event):
    e = event.cpu_parent
    while e is not None:
        if e.name in SCOPES:
            return SCOPES[e.name]
        e = e.cpu_parent
    return None


def _device_self_us(e):
    for attr in ("self_device_time_total", "self_cuda_time_total"):  # torch 2.x, then 1.13
        if hasattr(e, attr):
            return getattr(e, attr)
    return 0


def profile_step(run_step, model, device):
    """Runs run_step() (-> forward, backward, optimizer seconds) once under the profiler with
    the FLOP counter on; returns {"flops": ..., "times": {family: seconds}, "wall": s}."""
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with FlopCounter(model) as counter, profile(activities=activities, record_shapes=True) as prof:
        parts = run_step()
    wall = sum(parts)
    times = dict.fromkeys(FAMILIES, 0.0)
    on_cuda = device.type == "cuda"
    for e in prof.events():
        if e.name in STEP_SCOPES:
            continue  # their self time (Python between ops) is left to "other"
        if e.name in SCOPES and not on_cuda:
            times[SCOPES[e.name]] += e.cpu_time_total / 1e6  # the scope's whole CPU time
            continue
        scope = _scope_of(e)
        if scope and not on_cuda:
            continue  # inside a scope counted whole
        us = _device_self_us(e) if on_cuda else e.self_cpu_time_total
        times[scope or _family_by_name(e) or "elementwise"] += us / 1e6
    times["other"] = max(wall - sum(times.values()), 0.0)
    return {"flops": counter.table(), "times": times, "wall": wall}


def print_table(table, result):
    """The per-family table; adds it to result (the JSON line) when given."""
    flops_t, times = table["flops"], table["times"]
    head = "%-34s %10s %12s %12s" % ("family", "time s", "GFLOP f+b", "GFLOP/s")
    print("# " + ("time per op family of one profiled step (wall %.3f s) and its FLOPs"
                  % table["wall"] if times else "FLOPs of one training step (backward = 2 x forward)"))
    print(head)
    rows = {}
    for f in FAMILIES:
        gf = flops_t.get(f, (None, None))[1]
        t = times[f] if times else None
        rate = gf / t if gf is not None and t else None
        rows[f] = {"s": None if t is None else round(t, 4), "gflop": None if gf is None else round(gf, 3)}
        print("%-34s %10s %12s %12s" % (LABELS[f], "-" if t is None else "%.3f" % t,
                                         "-" if gf is None else "%.2f" % gf,
                                         "-" if rate is None else "%.1f" % rate))
    total = sum(v[1] for v in flops_t.values())
    print("%-34s %10s %12.2f" % ("total counted", "%.3f" % table["wall"] if times else "-", total))
    if result is not None:
        result["families"] = rows
        result["gflop_counted"] = round(total, 3)
