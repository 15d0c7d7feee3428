#!/usr/bin/env python3
"""make_golden.py OUTDIR -- writes the PyTorch reference vectors the C tests compare against.

OUTDIR/ops.bin    forward and backward of single ops      (read by tests/test_golden_ops.c)
OUTDIR/hooks.bin  inputs, parameters and gradients of small graphs  (tests/test_hooks_torch.c)
OUTDIR/hooks.txt  the order in which those graphs' AccumulateGrad hooks fire

Needs torch (Debian's python3-torch 1.13, CPU); `make golden` runs it. The file format and the
list of cases are in tests/golden/README.md. Inputs are drawn in float32 and the reference is
computed in float64 from those exact values, then rounded to float32 (unless a case says fp32).
"""
import sys

import numpy as np
import torch
import torch.nn.functional as F
from golden_writer import GoldenWriter  # noqa: E402 (this folder is on sys.path)



# ---- helpers ----
def gen(seed):
    return torch.Generator().manual_seed(seed)


def uniform(g, shape, lo, hi):
    """float32 values, returned as float64 (exactly representable in float32)."""
    return (lo + (hi - lo) * torch.rand(shape, generator=g)).float().double()


def normal(g, shape, mean=0.0, std=1.0):
    return (mean + std * torch.randn(shape, generator=g)).float().double()


def distinct(g, shape, lo=-1.0, hi=1.0):
    """Values without ties (a shuffled ramp), for max pooling."""
    n = int(np.prod(shape))
    ramp = torch.linspace(lo, hi, n, dtype=torch.float64).float().double()
    return ramp[torch.randperm(n, generator=g)].reshape(shape)


def leaves(*ts):
    """Float64 leaves that require grad (inputs of an op case, parameters of a graph)."""
    return [t.clone().requires_grad_(True) for t in ts]


def backward(y, g):
    """Backward with a fixed random upstream gradient; returns it."""
    dy = uniform(g, y.shape, -1, 1)
    y.backward(dy)
    return dy


def assert_off_grid(px, what):
    """Bilinear gradients jump at integer pixel coordinates, where the fp32 op and the fp64
    reference could pick different cells: every sampled coordinate keeps 1e-3 away."""
    d = (px - px.round()).abs().min().item()
    assert d > 1e-3, "%s: a sample lies %g from an integer pixel; change the seed" % (what, d)


def pixel_coords(grid, H, W):
    """grid_sample(align_corners=False) source pixel of normalised (x, y)."""
    return ((grid[..., 0] + 1) * W - 1) / 2, ((grid[..., 1] + 1) * H - 1) / 2


# ---- op cases ----
def case_grid_sample(w):
    for c, (shape, gshape, seed) in {"a": ((2, 3, 4, 5), (2, 3, 4, 2), 1),
                                     "b": ((1, 2, 5, 3), (1, 4, 3, 2), 2)}.items():
        g = gen(seed)
        x = uniform(g, shape, -1, 1)
        grid = uniform(g, gshape, -1.3, 1.3)
        if c == "a":
            # Border points: the exact corners +-1 (pixel -0.5 and W-0.5), half outside on the
            # left and on the right, fully outside to the right and above.
            pins = [(-1.0, -1.0), (1.0, 1.0), (-1.1, 0.3), (1.15, -0.4), (1.55, 0.2), (0.3, -1.7)]
            pins = torch.tensor(pins).float().double()
            grid[0, 0, :4] = pins[:4]
            grid[1, 2, :2] = pins[4:]
        px, py = pixel_coords(grid, shape[2], shape[3])
        assert_off_grid(px, "grid_sample/" + c)
        assert_off_grid(py, "grid_sample/" + c)
        xl, gl = leaves(x, grid)
        y = F.grid_sample(xl, gl, mode="bilinear", padding_mode="zeros", align_corners=False)
        dy = backward(y, g)
        p = "grid_sample/" + c + "/"
        for k, v in [("x", x), ("grid", grid), ("y", y), ("dy", dy), ("dx", xl.grad),
                     ("dgrid", gl.grad)]:
            w.add(p + k, v)


def ms_deform_attn_ref(value, shapes, loc, attw):
    """Ultralytics multi_scale_deformable_attn_pytorch, as described in trainer/ops/ops.h.
    value (B,N,NH,D), loc (B,Lq,NH,L,P,2) as (x,y) in [0,1], attw (B,Lq,NH,L,P) -> (B,Lq,NH*D)."""
    B, _, NH, D = value.shape
    _, Lq, _, L, P, _ = loc.shape
    value_list = value.split([h * w for h, w in shapes], dim=1)
    grids = 2 * loc - 1
    sampled = []
    for lvl, (h, w) in enumerate(shapes):
        value_l = value_list[lvl].flatten(2).transpose(1, 2).reshape(B * NH, D, h, w)
        grid_l = grids[:, :, :, lvl].transpose(1, 2).flatten(0, 1)      # (B*NH, Lq, P, 2)
        sampled.append(F.grid_sample(value_l, grid_l, mode="bilinear", padding_mode="zeros",
                                     align_corners=False))               # (B*NH, D, Lq, P)
    attw = attw.transpose(1, 2).reshape(B * NH, 1, Lq, L * P)
    out = (torch.stack(sampled, dim=-2).flatten(-2) * attw).sum(-1).view(B, NH * D, Lq)
    return out.transpose(1, 2).contiguous()


def case_msdeform_attn(w):
    shapes = [(4, 5), (2, 3)]
    N = sum(h * w_ for h, w_ in shapes)
    # a: locations inside [0,1]; b: some outside (zero padding), as offsets can push them.
    for c, (lo, hi, seed) in {"a": (0.02, 0.98, 3), "b": (-0.15, 1.15, 4)}.items():
        g = gen(seed)
        B, Lq, NH, D, L, P = 2, 3, 2, 3, 2, 2
        value = uniform(g, (B, N, NH, D), -1, 1)
        loc = uniform(g, (B, Lq, NH, L, P, 2), lo, hi)
        attw = uniform(g, (B, Lq, NH, L, P), 0, 1)
        for lvl, (h, w_) in enumerate(shapes):
            assert_off_grid(loc[:, :, :, lvl, :, 0] * w_ - 0.5, "msdeform_attn/" + c)
            assert_off_grid(loc[:, :, :, lvl, :, 1] * h - 0.5, "msdeform_attn/" + c)
        vl, ll, al = leaves(value, loc, attw)
        y = ms_deform_attn_ref(vl, shapes, ll, al)
        dy = backward(y, g)
        p = "msdeform_attn/" + c + "/"
        for k, v in [("value", value), ("shapes", torch.tensor(shapes).flatten()), ("loc", loc),
                     ("attw", attw), ("y", y), ("dy", dy), ("dvalue", vl.grad),
                     ("dloc", ll.grad), ("dattw", al.grad)]:
            w.add(p + k, v)


def case_batchnorm(w):
    momentum, eps = 0.03, 1e-3
    for c, (shape, seed) in {"a": ((2, 3, 4, 5), 5), "b": ((4, 2, 1, 1), 6)}.items():
        g = gen(seed)
        C = shape[1]
        x = normal(g, shape, 2.0, 1.5)
        wt = uniform(g, (C,), 0.5, 1.5)
        b = uniform(g, (C,), -0.5, 0.5)
        rm = uniform(g, (C,), -0.2, 0.2)
        rv = uniform(g, (C,), 0.5, 1.5)
        for mode in ("train", "eval"):
            xl, wl, bl = leaves(x, wt, b)
            rm_new, rv_new = rm.clone(), rv.clone()
            y = F.batch_norm(xl, rm_new, rv_new, wl, bl, training=mode == "train",
                             momentum=momentum, eps=eps)
            dy = backward(y, g)
            p = "batchnorm_%s/%s/" % (mode, c)
            arrays = [("x", x), ("weight", wt), ("bias", b), ("running_mean", rm),
                      ("running_var", rv), ("params", [momentum, eps]), ("y", y), ("dy", dy),
                      ("dx", xl.grad), ("dweight", wl.grad), ("dbias", bl.grad)]
            if mode == "train":
                arrays += [("running_mean_new", rm_new), ("running_var_new", rv_new)]
            for k, v in arrays:
                w.add(p + k, v)


def unary_case(w, name, fn, x, seed):
    g = gen(seed)
    (xl,) = leaves(x)
    y = fn(xl)
    dy = backward(y, g)
    for k, v in [("x", x), ("y", y), ("dy", dy), ("dx", xl.grad)]:
        w.add(name + "/" + k, v)


def case_maxpool(w):
    # (kernel, stride, pad, ceil, H, W): HGStem's k2 s1 on odd and even sizes; the ResNet stem's
    # k3 s2 p1 with and without ceil (H=6 gets a partial last window under ceil); k3 s2 p0
    # ceil on 6 (partial window without padding); k2 s2 p1 ceil on 5, whose extra ceil window
    # would start in the padding and is dropped.
    cases = {"k2s1p0c1_5x5": (2, 1, 0, True, 5, 5), "k2s1p0c1_6x6": (2, 1, 0, True, 6, 6),
             "k3s2p1c0_6x7": (3, 2, 1, False, 6, 7), "k3s2p1c1_6x7": (3, 2, 1, True, 6, 7),
             "k3s2p0c1_6x6": (3, 2, 0, True, 6, 6), "k2s2p1c1_5x5": (2, 2, 1, True, 5, 5)}
    for i, (c, (k, s, pad, ceil, H, W)) in enumerate(cases.items()):
        g = gen(10 + i)
        x = distinct(g, (2, 2, H, W))
        name = "maxpool/" + c
        unary_case(w, name, lambda t: F.max_pool2d(t, k, s, pad, ceil_mode=ceil), x, 20 + i)
        w.add(name + "/params", [k, k, s, s, pad, pad, int(ceil)])


def case_layernorm(w):
    eps = 1e-5
    # b: tiny variance, where eps is 10% of it and a wrong eps shows.
    for c, (shape, std, seed) in {"a": ((2, 3, 16), 1.0, 30), "b": ((3, 8), 0.01, 31)}.items():
        g = gen(seed)
        E = shape[-1]
        x = normal(g, shape, 0.5, std)
        wt = uniform(g, (E,), 0.5, 1.5)
        b = uniform(g, (E,), -0.5, 0.5)
        xl, wl, bl = leaves(x, wt, b)
        y = F.layer_norm(xl, (E,), wl, bl, eps)
        dy = backward(y, g)
        p = "layernorm/%s/" % c
        for k, v in [("x", x), ("weight", wt), ("bias", b), ("params", [eps]), ("y", y),
                     ("dy", dy), ("dx", xl.grad), ("dweight", wl.grad), ("dbias", bl.grad)]:
            w.add(p + k, v)


def case_mha(w):
    B, L, E, NH = 2, 5, 8, 2
    # Every row keeps at least one key; row 2 keeps exactly one.
    mask = torch.tensor([[0, 1, 0, 0, 1], [1, 0, 0, 1, 0], [1, 1, 1, 0, 1], [0, 0, 0, 0, 0],
                         [0, 1, 1, 1, 0]], dtype=torch.bool)
    for c, (m, seed) in {"nomask": (None, 40), "mask": (mask, 41)}.items():
        g = gen(seed)
        qk = uniform(g, (B, L, E), -1, 1)
        v = uniform(g, (B, L, E), -1, 1)
        in_w = uniform(g, (3 * E, E), -0.5, 0.5)
        in_b = uniform(g, (3 * E,), -0.5, 0.5)
        out_w = uniform(g, (E, E), -0.5, 0.5)
        out_b = uniform(g, (E,), -0.5, 0.5)
        mha = torch.nn.MultiheadAttention(E, NH, dropout=0.0, batch_first=True).double()
        with torch.no_grad():
            mha.in_proj_weight.copy_(in_w)
            mha.in_proj_bias.copy_(in_b)
            mha.out_proj.weight.copy_(out_w)
            mha.out_proj.bias.copy_(out_b)
        qkl, vl = leaves(qk, v)
        y = mha(qkl, qkl, vl, attn_mask=m)[0]   # query is key, as RT-DETR's q = k = src + pos
        dy = backward(y, g)
        p = "mha/%s/" % c
        arrays = [("qk", qk), ("value", v), ("in_proj_weight", in_w), ("in_proj_bias", in_b),
                  ("out_proj_weight", out_w), ("out_proj_bias", out_b), ("params", [NH]),
                  ("y", y), ("dy", dy), ("dqk", qkl.grad), ("dvalue", vl.grad),
                  ("din_proj_weight", mha.in_proj_weight.grad),
                  ("din_proj_bias", mha.in_proj_bias.grad),
                  ("dout_proj_weight", mha.out_proj.weight.grad),
                  ("dout_proj_bias", mha.out_proj.bias.grad)]
        if m is not None:
            arrays.append(("mask", m.double()))
        for k, val in arrays:
            w.add(p + k, val)


def inverse_sigmoid(x, eps=1e-5):
    """Ultralytics ultralytics/nn/modules/utils.py inverse_sigmoid."""
    x = x.clamp(min=0, max=1)
    x1 = x.clamp(min=eps)
    x2 = (1 - x).clamp(min=eps)
    return torch.log(x1 / x2)


def case_elementwise(w):
    g = gen(50)
    unary_case(w, "gelu", F.gelu, uniform(g, (3, 7), -4, 4), 51)
    big = torch.tensor([-100.0, -30.0, 30.0, 100.0], dtype=torch.float64)
    unary_case(w, "sigmoid", torch.sigmoid, torch.cat([uniform(g, (17,), -8, 8), big]), 52)
    unary_case(w, "silu", F.silu, torch.cat([uniform(g, (17,), -8, 8), big]), 53)
    unary_case(w, "softmax/a", lambda t: torch.softmax(t, -1), uniform(g, (2, 3, 7), -3, 3), 54)
    # b: large logits, where exp overflows without subtracting the row max.
    unary_case(w, "softmax/b", lambda t: torch.softmax(t, -1), uniform(g, (2, 5), 80, 100), 55)
    unary_case(w, "inverse_sigmoid/a", inverse_sigmoid, uniform(g, (4, 8), -0.3, 1.3), 56)
    # Bounds, in float32 (so eps is float32's 1e-5, as in a float32 model): clamp passes the
    # gradient where x equals a bound, so x = 0 and x = 1 get d/dx of the unclamped side.
    b = torch.tensor([0.0, 1.0, 1e-6, 1 - 2 ** -20, 1e-5, -0.0, 0.5, 1 - 1e-5], dtype=torch.float32)
    (bl,) = leaves(b)
    y = inverse_sigmoid(bl)
    dy = uniform(gen(57), y.shape, -1, 1).float()
    y.backward(dy)
    for k, v in [("x", b), ("y", y), ("dy", dy), ("dx", bl.grad)]:
        w.add("inverse_sigmoid/bounds/" + k, v)

    x = uniform(g, (2, 3, 3, 4), -1, 1)
    unary_case(w, "upsample_nearest", lambda t: F.interpolate(t, scale_factor=2, mode="nearest"),
               x, 58)
    w.add("upsample_nearest/params", [2])
    x = uniform(g, (2, 3, 4, 5), -1, 1)
    unary_case(w, "pad", lambda t: F.pad(t, [0, 1, 0, 1]), x, 59)
    w.add("pad/params", [0, 1, 0, 1])


# ---- gradient-ready hook order ----
def record_hooks(params, run):
    """Registers a hook on every parameter's AccumulateGrad (what DDP's reducer listens to),
    runs run() (which calls backward) and returns the firing order of parameter indices."""
    order, accs = [], []
    for i, p in enumerate(params):
        acc = p.expand_as(p).grad_fn.next_functions[0][0]
        acc.register_hook(lambda gi, go, i=i: order.append(i))
        accs.append(acc)   # the tensor holds its accumulator weakly: keep the hooks alive
    run()
    return order


def hook_case(w, orders, name, params, inputs, run):
    """params: float64 leaves in index order. inputs: name -> tensor (leaf or constant);
    run() builds the graph and calls backward. Stores everything under hooks/<name>/."""
    order = record_hooks(params, run)
    nohook = [i for i, p in enumerate(params) if p.grad is None]
    assert sorted(order + nohook) == list(range(len(params))), (name, order, nohook)
    for i, p in enumerate(params):
        w.add("%s/p%d" % (name, i), p.detach())
        if p.grad is not None:
            w.add("%s/g%d" % (name, i), p.grad)
    for k, t in inputs.items():
        w.add("%s/%s" % (name, k), t.detach())
        if t.requires_grad and t.grad is not None:
            w.add("%s/d%s" % (name, k), t.grad)
    orders.append((name, len(params), order, nohook))


def lin_params(g, out_f, in_f):
    return uniform(g, (out_f, in_f), -0.5, 0.5), uniform(g, (out_f,), -0.5, 0.5)


def backward_with(w, name, y, g):
    dy = uniform(g, y.shape, -1, 1)
    w.add(name + "/dy", dy)
    y.backward(dy)


def hooks_linear_graphs(w, orders):
    E = 6
    g = gen(100)
    x = uniform(g, (4, E), -1, 1)

    # (a) Linear-ReLU-Linear: params w1 b1 w2 b2.
    p = leaves(*lin_params(g, E, E), *lin_params(g, 3, E))
    hook_case(w, orders, "mlp", p, {"x": x}, lambda: backward_with(
        w, "mlp", F.linear(F.relu(F.linear(x, p[0], p[1])), p[2], p[3]), g))

    # (b) fan-out: a trunk Linear(+ReLU) feeding two heads whose outputs are added.
    p = leaves(*lin_params(g, E, E), *lin_params(g, 3, E), *lin_params(g, 3, E))

    def fanout():
        t = F.relu(F.linear(x, p[0], p[1]))
        backward_with(w, "fanout", F.linear(t, p[2], p[3]) + F.linear(t, p[4], p[5]), g)
    hook_case(w, orders, "fanout", p, {"x": x}, fanout)

    # (c) one weight (p0) used by the first and the last Linear.
    p = leaves(*lin_params(g, E, E), *lin_params(g, E, E), uniform(g, (E,), -0.5, 0.5))

    def shared():
        h = F.relu(F.linear(F.relu(F.linear(x, p[0], p[1])), p[2], p[3]))
        backward_with(w, "shared", F.linear(h, p[0], p[4]), g)
    hook_case(w, orders, "shared", p, {"x": x}, shared)

    # (d) detached branches: lin2 reads lin0's output detached; lin3's output is detached
    # before the add, so lin3 gets no hook.
    p = leaves(*lin_params(g, E, E), *lin_params(g, 3, E), *lin_params(g, 3, E),
                  *lin_params(g, 3, E))

    def detached():
        h = F.linear(x, p[0], p[1])
        y = F.linear(h, p[2], p[3]) + F.linear(h.detach(), p[4], p[5])
        backward_with(w, "detached", y + F.linear(x, p[6], p[7]).detach(), g)
    hook_case(w, orders, "detached", p, {"x": x}, detached)

    # (e) a head computed in forward whose loss term is torch.tensor(0.): no hook, grad None.
    p = leaves(*lin_params(g, E, E), *lin_params(g, 3, E), *lin_params(g, 4, E))

    def zero_loss():
        h = F.relu(F.linear(x, p[0], p[1]))
        loss_a = F.linear(h, p[2], p[3]).sum()
        F.linear(h, p[4], p[5])
        (loss_a + torch.tensor(0.0, dtype=torch.float64)).backward()
    hook_case(w, orders, "zero_loss", p, {"x": x}, zero_loss)


def hooks_conv_bn(w, orders):
    # (f) conv3x3 (no bias) -> BN -> SiLU -> conv1x1 (no bias) -> BN, loss = sum(out * r).
    g = gen(110)
    x = uniform(g, (2, 3, 5, 5), -1, 1)
    r = uniform(g, (2, 4, 5, 5), -1, 1)
    p = leaves(uniform(g, (4, 3, 3, 3), -0.5, 0.5), uniform(g, (4,), 0.5, 1.5),
                  uniform(g, (4,), -0.5, 0.5), uniform(g, (4, 4, 1, 1), -0.5, 0.5),
                  uniform(g, (4,), 0.5, 1.5), uniform(g, (4,), -0.5, 0.5))

    def run():
        rm, rv = torch.zeros(4, dtype=torch.float64), torch.ones(4, dtype=torch.float64)
        a = F.batch_norm(F.conv2d(x, p[0], None, 1, 1), rm, rv, p[1], p[2], True, 0.03, 1e-3)
        rm, rv = torch.zeros(4, dtype=torch.float64), torch.ones(4, dtype=torch.float64)
        a = F.batch_norm(F.conv2d(F.silu(a), p[3]), rm, rv, p[4], p[5], True, 0.03, 1e-3)
        (a * r).sum().backward()
    hook_case(w, orders, "conv_bn", p, {"x": x, "r": r}, run)


def hooks_attention(w, orders):
    # (g) nn.MultiheadAttention (batch_first) + residual + LayerNorm, q = k = x + pos, v = x.
    B, L, E, NH = 2, 4, 8, 2
    g = gen(120)
    x = uniform(g, (B, L, E), -1, 1).requires_grad_(True)
    pos = uniform(g, (1, L, E), -1, 1)
    mha = torch.nn.MultiheadAttention(E, NH, dropout=0.0, batch_first=True).double()
    vals = [uniform(g, (3 * E, E), -0.5, 0.5), uniform(g, (3 * E,), -0.5, 0.5),
            uniform(g, (E, E), -0.5, 0.5), uniform(g, (E,), -0.5, 0.5)]
    with torch.no_grad():
        for q, v in zip([mha.in_proj_weight, mha.in_proj_bias, mha.out_proj.weight,
                         mha.out_proj.bias], vals):
            q.copy_(v)
    ln_w, ln_b = leaves(uniform(g, (E,), 0.5, 1.5), uniform(g, (E,), -0.5, 0.5))
    p = [mha.in_proj_weight, mha.in_proj_bias, mha.out_proj.weight, mha.out_proj.bias, ln_w, ln_b]

    def run():
        q = x + pos
        y = F.layer_norm(x + mha(q, q, value=x)[0], (E,), ln_w, ln_b, 1e-5)
        backward_with(w, "mha_ln", y, g)
    hook_case(w, orders, "mha_ln", p, {"x": x, "pos": pos}, run)

    # (i) AIFI-like block: x + Linear(GELU(Linear(LayerNorm(x)))).
    x = uniform(g, (B, L, E), -1, 1).requires_grad_(True)
    p = leaves(uniform(g, (E,), 0.5, 1.5), uniform(g, (E,), -0.5, 0.5),
                  *lin_params(g, 2 * E, E), *lin_params(g, E, 2 * E))

    def aifi():
        h = F.layer_norm(x, (E,), p[0], p[1], 1e-5)
        h = F.linear(F.gelu(F.linear(h, p[2], p[3])), p[4], p[5])
        backward_with(w, "aifi", x + h, g)
    hook_case(w, orders, "aifi", p, {"x": x}, aifi)


def hooks_cat(w, orders):
    # (h) torch.cat of leaf parameters: one node freeing n leaves; the heap's tie order shows.
    g = gen(130)
    for n in (4, 5):
        name = "cat%d" % n
        p = leaves(*[uniform(g, (i + 2,), -1, 1) for i in range(n)])
        hook_case(w, orders, name, p, {}, lambda: backward_with(w, name, torch.cat(p), g))


def write_orders(path, orders):
    with open(path, "w") as f:
        f.write("# Gradient-ready hook order from PyTorch %s (make_golden.py; format: README.md)\n"
                % torch.__version__)
        f.write("# name n_params : fired param indices in order ; params with no hook\n")
        for name, n, order, nohook in orders:
            f.write("%s %d : %s ;%s\n" % (name, n, " ".join(map(str, order)),
                                          "".join(" %d" % i for i in nohook)))
    print("wrote %s: %d graphs" % (path, len(orders)))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_golden.py OUTDIR")
    out = sys.argv[1]
    torch.use_deterministic_algorithms(True)
    ops = GoldenWriter()
    for case in (case_grid_sample, case_msdeform_attn, case_batchnorm, case_maxpool,
                 case_layernorm, case_mha, case_elementwise):
        case(ops)
    ops.save(out + "/ops.bin")

    hooks, orders = GoldenWriter(), []
    hooks_linear_graphs(hooks, orders)
    hooks_conv_bn(hooks, orders)
    hooks_attention(hooks, orders)
    hooks_cat(hooks, orders)
    hooks.save(out + "/hooks.bin")
    write_orders(out + "/hooks.txt", orders)


if __name__ == "__main__":
    main()
