"""rtdetr_torch.py -- our RT-DETR models (trainer/models/*.yaml) as a trainable PyTorch module
with the loss of our C trainer: the reference that benchmarks and tests hold ours against.

    model = build_model("rtdetr-l")                 # or a yaml path; nc= overrides the class count
    loss, items = model(batch)                      # Ultralytics' `model(batch)` in train mode
    terms = model.loss_terms(batch)                 # the 12 loss keys (rtdetr_loss.py)

batch is Ultralytics' collated dict: img (B,3,H,W) floats in [0,1], batch_idx (N,) the image of
each box (ascending), cls (N,) or (N,1), bboxes (N,4) normalised cxcywh. items are the detached
(giou, cls, l1) main-layer losses, as Ultralytics' trainer shows them.

What matches our trainer (trainer/nn/), and so Ultralytics 8.1.34 (/work/shared/docs/rtdetr.md):
- parameter names, shapes and order equal `ddpdbg-train params` (tests/cli/torch_ref.sh checks
  all five yamls), and buffers those of our checkpoints (check_same_loss.py checks the layout);
- the forward, op for op (sections 2.1-2.14): HGStem/HGBlock/LightConv, ResNet layers, RepC3,
  AIFI with its sin-cos embedding, the decoder with anchors, top-k query selection, detached
  references and "look forward twice" boxes, multi-scale deformable attention by grid_sample;
- the initialisation (torch defaults, BatchNorm eps 1e-3 momentum 0.03, _reset_parameters,
  decoder layers as copies of the first), equal in distribution (not bit for bit: our weights
  load from our checkpoints through ddpdbg_files.read_checkpoint);
- denoising and the loss: rtdetr_loss.py.
Dropouts (p = 0) are left out: a p = 0 dropout returns its input. One addition: contiguous_grad,
around torch 1.13's wrong BatchNorm gradients at batch 1 (see there). Training only: the forward
always runs every decoder layer and computes the loss (no eval/inference path).

Run as a script it is the step benchmark: `python3 rtdetr_torch.py --help` (bench_step.py).
Needs torch (1.13 or 2.x) and PyYAML; see README.md in this folder.
"""
import copy
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import yaml

import rtdetr_loss

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS_DIR = os.path.join(REPO, "trainer", "models")


# ---- convolutions (rtdetr.md 2.1-2.7) ----

class Conv(nn.Module):
    """Conv2d without bias -> BatchNorm2d(eps 1e-3, momentum 0.03) -> act (None: identity);
    pad None = autopad (dilation * (k - 1) + 1) // 2."""

    def __init__(self, c1, c2, k=1, s=1, p=None, g=1, d=1, act=F.silu):
        super().__init__()
        p = (d * (k - 1) + 1) // 2 if p is None else p
        self.conv = nn.Conv2d(c1, c2, k, s, p, dilation=d, groups=g, bias=False)
        self.bn = nn.BatchNorm2d(c2, eps=1e-3, momentum=0.03)
        self.act = act

    def forward(self, x):
        x = self.bn(self.conv(x))
        return x if self.act is None else self.act(x)


class HGStem(nn.Module):
    def __init__(self, c1, cm, c2):
        super().__init__()
        self.stem1 = Conv(c1, cm, 3, 2, act=F.relu)
        self.stem2a = Conv(cm, cm // 2, 2, 1, 0, act=F.relu)
        self.stem2b = Conv(cm // 2, cm, 2, 1, 0, act=F.relu)
        self.stem3 = Conv(cm * 2, cm, 3, 2, act=F.relu)
        self.stem4 = Conv(cm, c2, 1, 1, act=F.relu)

    def forward(self, x):
        x = F.pad(self.stem1(x), [0, 1, 0, 1])
        branch = self.stem2b(F.pad(self.stem2a(x), [0, 1, 0, 1]))
        pooled = F.max_pool2d(x, kernel_size=2, stride=1, padding=0, ceil_mode=True)
        return self.stem4(self.stem3(torch.cat([pooled, branch], 1)))  # the pooled branch first


class LightConv(nn.Module):
    def __init__(self, c1, c2, k):
        super().__init__()
        self.conv1 = Conv(c1, c2, 1, act=None)
        self.conv2 = Conv(c2, c2, k, g=c2, act=F.relu)

    def forward(self, x):
        return self.conv2(self.conv1(x))


class HGBlock(nn.Module):
    """n inner convs (the yaml's repeats), their outputs and the input concatenated, then a
    squeeze (sc) and an excitation (ec) 1x1 conv; the input is added when shortcut and c1 == c2."""

    def __init__(self, c1, cm, c2, k, n, light, shortcut):
        super().__init__()
        inner = (lambda c: LightConv(c, cm, k)) if light else (lambda c: Conv(c, cm, k, act=F.relu))
        self.m = nn.ModuleList(inner(c1 if j == 0 else cm) for j in range(n))
        self.sc = Conv(c1 + n * cm, c2 // 2, 1, act=F.relu)
        self.ec = Conv(c2 // 2, c2, 1, act=F.relu)
        self.add = shortcut and c1 == c2

    def forward(self, x):
        ys = [x]
        for conv in self.m:
            ys.append(conv(ys[-1]))
        y = self.ec(self.sc(torch.cat(ys, 1)))
        return y + x if self.add else y


class RepConv(nn.Module):
    """Training form as RT-DETR builds it: 3x3 and 1x1 branches, no identity BatchNorm."""

    def __init__(self, c):
        super().__init__()
        self.conv1 = Conv(c, c, 3, 1, 1, act=None)
        self.conv2 = Conv(c, c, 1, 1, 0, act=None)

    def forward(self, x):
        return F.silu(self.conv1(x) + self.conv2(x))


class RepC3(nn.Module):
    def __init__(self, c1, c2, n, e=1.0):
        super().__init__()
        hidden = int(c2 * e)
        self.cv1 = Conv(c1, hidden, 1)
        self.cv2 = Conv(c1, hidden, 1)
        self.m = nn.Sequential(*[RepConv(hidden) for _ in range(n)])
        self.cv3 = Conv(hidden, c2, 1) if hidden != c2 else None  # absent in every shipped yaml

    def forward(self, x):
        y = self.m(self.cv1(x)) + self.cv2(x)
        return y if self.cv3 is None else self.cv3(y)


class ResNetBlock(nn.Module):
    def __init__(self, c1, c2, s):
        super().__init__()
        self.cv1 = Conv(c1, c2, 1)
        self.cv2 = Conv(c2, c2, 3, s, 1)
        self.cv3 = Conv(c2, 4 * c2, 1, act=None)
        has_shortcut = s != 1 or c1 != 4 * c2
        self.shortcut = nn.Sequential(Conv(c1, 4 * c2, 1, s, act=None)) if has_shortcut else None

    def forward(self, x):
        y = self.cv3(self.cv2(self.cv1(x)))
        return F.relu(y + (x if self.shortcut is None else self.shortcut(x)))


class ResNetLayer(nn.Module):
    def __init__(self, c1, c2, s, is_first, n):
        super().__init__()
        if is_first:  # the stem: 7x7 stride 2 conv, then a 3x3 stride 2 max pool
            self.layer = nn.Sequential(Conv(c1, c2, 7, 2, 3), nn.MaxPool2d(3, 2, 1))
        else:
            self.layer = nn.Sequential(*[ResNetBlock(c1 if j == 0 else 4 * c2, c2, s if j == 0 else 1)
                                         for j in range(n)])

    def forward(self, x):
        return self.layer(x)


class Upsample(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return F.interpolate(x, scale_factor=float(self.scale), mode="nearest")


class Concat(nn.Module):
    def forward(self, xs):
        return torch.cat(xs, 1)


# ---- transformer parts (rtdetr.md 2.8-2.11) ----

def contiguous_grad(x):
    """x, whose gradient is made contiguous before it flows back into x's producer. Where a
    BatchNorm2d's output is flattened and permuted to tokens (AIFI's input, the head's
    input_proj), its gradient arrives with channels-last strides, and torch 1.13's CPU
    BatchNorm backward then computes wrong weight and bias gradients when the batch is 1
    (tests/torch/README.md has the three-line reproduction). Our C trainer is right; this
    keeps the rendering right too. A no-op outside autograd."""
    if x.requires_grad:
        x.register_hook(lambda g: g.contiguous())
    return x


def sincos_embedding(h, w, c, device):
    """(1, h*w, c): token t uses a = t div h and b = t mod h (meshgrid(w, h, 'ij') flattened)."""
    quarter = c // 4
    omega = 1.0 / 10000 ** (torch.arange(quarter, dtype=torch.float32, device=device) / quarter)
    token = torch.arange(h * w, device=device)
    a = (token // h).to(torch.float32)[:, None] * omega[None]
    b = (token % h).to(torch.float32)[:, None] * omega[None]
    return torch.cat([a.sin(), a.cos(), b.sin(), b.cos()], 1)[None]


class AIFI(nn.Module):
    """Post-norm transformer encoder layer over one map's row-major tokens, position on q, k."""

    def __init__(self, c1, cm, heads):
        super().__init__()
        self.ma = nn.MultiheadAttention(c1, heads, dropout=0.0, batch_first=True)
        self.fc1 = nn.Linear(c1, cm)
        self.fc2 = nn.Linear(cm, c1)
        self.norm1 = nn.LayerNorm(c1)
        self.norm2 = nn.LayerNorm(c1)

    def forward(self, x):
        c, h, w = x.shape[1:]
        tokens = contiguous_grad(x).flatten(2).permute(0, 2, 1)
        query_key = tokens + sincos_embedding(h, w, c, x.device).to(x.dtype)
        tokens = self.norm1(tokens + self.ma(query_key, query_key, tokens)[0])
        tokens = self.norm2(tokens + self.fc2(F.gelu(self.fc1(tokens))))
        return tokens.permute(0, 2, 1).view([-1, c, h, w]).contiguous()


class MLP(nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims, dims[1:]))

    def forward(self, x):
        for j, linear in enumerate(self.layers):
            x = linear(x) if j == len(self.layers) - 1 else F.relu(linear(x))
        return x


class MSDeformAttn(nn.Module):
    def __init__(self, d, levels, heads, points):
        super().__init__()
        self.levels, self.heads, self.points = levels, heads, points
        self.sampling_offsets = nn.Linear(d, heads * levels * points * 2)
        self.attention_weights = nn.Linear(d, heads * levels * points)
        self.value_proj = nn.Linear(d, d)
        self.output_proj = nn.Linear(d, d)
        # _reset_parameters: offsets start on a ring of head directions, (p + 1) apart
        nn.init.constant_(self.sampling_offsets.weight, 0.0)
        theta = torch.arange(heads, dtype=torch.float32) * (2.0 * math.pi / heads)
        grid = torch.stack([theta.cos(), theta.sin()], -1)
        grid = (grid / grid.abs().max(-1, keepdim=True)[0]).view(heads, 1, 1, 2).repeat(1, levels, points, 1)
        grid = grid * torch.arange(1, points + 1, dtype=torch.float32).view(1, 1, points, 1)
        with torch.no_grad():
            self.sampling_offsets.bias.copy_(grid.view(-1))
        nn.init.constant_(self.attention_weights.weight, 0.0)
        nn.init.constant_(self.attention_weights.bias, 0.0)
        for linear in (self.value_proj, self.output_proj):
            nn.init.xavier_uniform_(linear.weight)
            nn.init.constant_(linear.bias, 0.0)

    def forward(self, query, ref, value, shapes):
        """query (B,Lq,d), ref (B,Lq,4) sigmoid cxcywh, value (B,Lv,d), shapes [(h,w)] per level."""
        B, Lq, d = query.shape
        H, L, P = self.heads, self.levels, self.points
        value = self.value_proj(value).view(B, value.shape[1], H, d // H)
        offsets = self.sampling_offsets(query).view(B, Lq, H, L, P, 2)
        weights = F.softmax(self.attention_weights(query).view(B, Lq, H, L * P), -1).view(B, Lq, H, L, P)
        ref = ref.unsqueeze(2)  # (B,Lq,1,4): Ultralytics' refer_bbox.unsqueeze(2)
        where = ref[:, :, None, :, None, :2] + offsets / P * ref[:, :, None, :, None, 2:] * 0.5
        return self.output_proj(sample_levels(value, shapes, where, weights))


def sample_levels(value, shapes, where, weights):
    """Ultralytics' multi_scale_deformable_attn_pytorch: bilinear grid_sample of every level at
    where (B,Lq,H,L,P,2 in [0,1]), weighted over levels x points -> (B, Lq, H*dh)."""
    B, _, H, dh = value.shape
    Lq, L, P = where.shape[1], where.shape[3], where.shape[4]
    per_level = value.split([h * w for h, w in shapes], dim=1)
    grid = 2 * where - 1
    sampled = []
    for level, (h, w) in enumerate(shapes):
        image = per_level[level].flatten(2).transpose(1, 2).reshape(B * H, dh, h, w)
        level_grid = grid[:, :, :, level].transpose(1, 2).flatten(0, 1)
        sampled.append(F.grid_sample(image, level_grid, mode="bilinear", padding_mode="zeros",
                                     align_corners=False))
    weights = weights.transpose(1, 2).reshape(B * H, 1, Lq, L * P)
    mixed = (torch.stack(sampled, dim=-2).flatten(-2) * weights).sum(-1).view(B, H * dh, Lq)
    return mixed.transpose(1, 2).contiguous()


class DecoderLayer(nn.Module):
    def __init__(self, d, heads, ffn, levels, points):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d, heads, dropout=0.0)  # (L, B, E) inputs
        self.norm1 = nn.LayerNorm(d)
        self.cross_attn = MSDeformAttn(d, levels, heads, points)
        self.norm2 = nn.LayerNorm(d)
        self.linear1 = nn.Linear(d, ffn)
        self.linear2 = nn.Linear(ffn, d)
        self.norm3 = nn.LayerNorm(d)

    def forward(self, embed, ref, feats, shapes, attn_mask, query_pos):
        query_key = embed + query_pos  # transposed twice, for q and for k, as Ultralytics does
        attended = self.self_attn(query_key.transpose(0, 1), query_key.transpose(0, 1),
                                  embed.transpose(0, 1), attn_mask=attn_mask)[0]
        embed = self.norm1(embed + attended.transpose(0, 1))
        embed = self.norm2(embed + self.cross_attn(embed + query_pos, ref, feats, shapes))
        return self.norm3(embed + self.linear2(F.relu(self.linear1(embed))))


def inverse_sigmoid(x, eps=1e-5):
    x = x.clamp(min=0, max=1)
    return torch.log(x.clamp(min=eps) / (1 - x).clamp(min=eps))


class Decoder(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.layers = nn.ModuleList(layers)


# ---- the head (rtdetr.md 2.12-2.13, 3) ----

class RTDETRDecoder(nn.Module):
    def __init__(self, nc, ch, hd=256, nq=300, ndp=4, nh=8, ndl=6, d_ffn=1024, eval_idx=-1, nd=100,
                 label_noise_ratio=0.5, box_noise_scale=1.0, learnt_init_query=False):
        super().__init__()
        self.nc, self.hd, self.nq, self.nd = nc, hd, nq, nd
        self.label_noise_ratio, self.box_noise_scale = label_noise_ratio, box_noise_scale
        self.input_proj = nn.ModuleList(
            nn.Sequential(nn.Conv2d(c, hd, 1, bias=False), nn.BatchNorm2d(hd, eps=1e-3, momentum=0.03))
            for c in ch)
        first = DecoderLayer(hd, nh, d_ffn, len(ch), ndp)  # _get_clones: copies of one layer
        self.decoder = Decoder([first] + [copy.deepcopy(first) for _ in range(ndl - 1)])
        self.denoising_class_embed = nn.Embedding(nc, hd)
        self.tgt_embed = nn.Embedding(nq, hd) if learnt_init_query else None
        self.query_pos_head = MLP([4, 2 * hd, hd])
        self.enc_output = nn.Sequential(nn.Linear(hd, hd), nn.LayerNorm(hd))
        self.enc_score_head = nn.Linear(hd, nc)
        self.enc_bbox_head = MLP([hd, hd, hd, 4])
        self.dec_score_head = nn.ModuleList(nn.Linear(hd, nc) for _ in range(ndl))
        self.dec_bbox_head = nn.ModuleList(MLP([hd, hd, hd, 4]) for _ in range(ndl))
        self._anchors = {}
        self._reset_parameters()

    def _reset_parameters(self):
        bias_cls = -math.log((1 - 0.01) / 0.01) / 80 * self.nc  # bias_init_with_prob(0.01) / 80 * nc
        nn.init.constant_(self.enc_score_head.bias, bias_cls)
        for head in [self.enc_bbox_head] + list(self.dec_bbox_head):
            nn.init.constant_(head.layers[-1].weight, 0.0)
            nn.init.constant_(head.layers[-1].bias, 0.0)
        for score in self.dec_score_head:
            nn.init.constant_(score.bias, bias_cls)
        bound = 1.0 / math.sqrt(self.hd)  # Ultralytics' linear_init, then xavier on the weight
        nn.init.uniform_(self.enc_output[0].weight, -bound, bound)
        nn.init.uniform_(self.enc_output[0].bias, -bound, bound)
        nn.init.xavier_uniform_(self.enc_output[0].weight)
        if self.tgt_embed is not None:
            nn.init.xavier_uniform_(self.tgt_embed.weight)
        for linear in self.query_pos_head.layers:
            nn.init.xavier_uniform_(linear.weight)
        for proj in self.input_proj:
            nn.init.xavier_uniform_(proj[0].weight)

    def anchors(self, shapes, device, grid_size=0.05, eps=0.01):
        """(1,N,4) anchor logits, +inf where invalid, and the (1,N,1) valid mask; cached."""
        key = (tuple(map(tuple, shapes)), str(device))
        if key not in self._anchors:
            boxes = []
            for level, (h, w) in enumerate(shapes):
                y, x = torch.meshgrid(torch.arange(h, dtype=torch.float32, device=device),
                                      torch.arange(w, dtype=torch.float32, device=device), indexing="ij")
                centre = (torch.stack([x, y], -1) + 0.5) / torch.tensor([w, h], dtype=torch.float32, device=device)
                size = torch.full_like(centre, grid_size * 2.0 ** level)
                boxes.append(torch.cat([centre, size], -1).view(1, h * w, 4))
            boxes = torch.cat(boxes, 1)
            valid = ((boxes > eps) & (boxes < 1 - eps)).all(-1, keepdim=True)
            self._anchors[key] = (torch.log(boxes / (1 - boxes)).masked_fill(~valid, float("inf")), valid)
        return self._anchors[key]

    def forward(self, levels, targets):
        """levels: the from-list outputs; targets: rtdetr_loss.targets_of(batch). Returns the
        training outputs (dec_boxes (L,B,Ndn+Q,4), dec_logits (L,B,Ndn+Q,nc), enc_boxes
        (B,Q,4), enc_logits (B,Q,nc)) and the denoising layout (None without denoising)."""
        projected = [contiguous_grad(proj(x)) for proj, x in zip(self.input_proj, levels)]
        shapes = [list(x.shape[2:]) for x in projected]
        feats = torch.cat([x.flatten(2).permute(0, 2, 1) for x in projected], 1)
        bs = feats.shape[0]
        dn = rtdetr_loss.get_cdn_group(targets, self.nc, self.nq, self.denoising_class_embed.weight,
                                       self.nd, self.label_noise_ratio, self.box_noise_scale, self.training)

        anchors, valid = self.anchors(shapes, feats.device)
        memory = self.enc_output(valid * feats)  # invalid positions zeroed before Linear + LN
        enc_logits_all = self.enc_score_head(memory)
        chosen = torch.topk(enc_logits_all.max(-1).values, self.nq, dim=1).indices.view(-1)
        image = torch.arange(bs, dtype=chosen.dtype, device=chosen.device).repeat_interleave(self.nq)
        chosen_feats = memory[image, chosen].view(bs, self.nq, -1)
        ref_logits = self.enc_bbox_head(chosen_feats) + anchors[:, chosen].view(bs, self.nq, -1)
        enc_boxes = ref_logits.sigmoid()
        if dn is not None:
            ref_logits = torch.cat([dn.box_logits, ref_logits], 1)
        enc_logits = enc_logits_all[image, chosen].view(bs, self.nq, -1)
        content = chosen_feats if self.tgt_embed is None else self.tgt_embed.weight.unsqueeze(0).repeat(bs, 1, 1)
        if self.training:
            ref_logits = ref_logits.detach()
            if self.tgt_embed is None:
                content = content.detach()
        if dn is not None:
            content = torch.cat([dn.embed, content], 1)
        dec_boxes, dec_logits = self.run_decoder(content, ref_logits, feats, shapes,
                                                 None if dn is None else dn.attn_mask)
        return (dec_boxes, dec_logits, enc_boxes, enc_logits), dn

    def run_decoder(self, out, ref_logits, feats, shapes, attn_mask):
        """Box i uses the undetached refinement of layer i-1 ("look forward twice"); the next
        layer's reference is the detached refinement."""
        ref = ref_logits.sigmoid()
        boxes, logits, previous = [], [], None
        for i, layer in enumerate(self.decoder.layers):
            out = layer(out, ref, feats, shapes, attn_mask, self.query_pos_head(ref))
            delta = self.dec_bbox_head[i](out)
            refined = torch.sigmoid(delta + inverse_sigmoid(ref))
            logits.append(self.dec_score_head[i](out))
            boxes.append(refined if i == 0 else torch.sigmoid(delta + inverse_sigmoid(previous)))
            previous, ref = refined, refined.detach()
        return torch.stack(boxes), torch.stack(logits)


# ---- the model from a yaml (rtdetr.md 1, trainer/nn/yaml_model.c's rules) ----

def _scale_width(c2, nc, width, max_channels):
    """parse_model: make_divisible(min(c2, max_channels) * width, 8), except c2 == nc."""
    return c2 if c2 == nc else int(math.ceil(min(c2, max_channels) * width / 8) * 8)


def _layer(kind, c_in, repeats, args, nc, scale):
    """One yaml row -> (module, output channels). c_in is a list for multi-input rows."""
    width, max_channels = scale
    if kind in ("Conv", "DWConv"):
        if kind == "Conv":
            c2, k, s, p, g, d, act = (args + [1, 1, None, 1, 1, True][len(args) - 1:])[:7]
        else:
            c2, k, s, d, act = (args + [1, 1, 1, True][len(args) - 1:])[:5]
            p, g = None, None
        c2 = _scale_width(c2, nc, width, max_channels)
        g = math.gcd(c_in, c2) if g is None else g
        return Conv(c_in, c2, k, s, p, g, d, F.silu if act else None), c2
    if kind == "HGStem":
        return HGStem(c_in, args[0], args[1]), args[1]
    if kind == "HGBlock":
        cm, c2, k, light, shortcut = (args + [3, False, False][len(args) - 2:])[:5]
        return HGBlock(c_in, cm, c2, k, repeats, light, shortcut), c2
    if kind == "ResNetLayer":
        c1, c2, s, is_first, n = (args + [1])[:5]
        return ResNetLayer(c1, c2, s, is_first, n), c2 if is_first else 4 * c2
    if kind == "AIFI":
        cm, heads = (args + [2048, 8][len(args):])[:2]
        return AIFI(c_in, cm, heads), c_in
    if kind == "RepC3":
        c2 = _scale_width(args[0], nc, width, max_channels)
        return RepC3(c_in, c2, repeats, *(args[1:2])), c2
    if kind == "nn.Upsample":
        return Upsample(args[1]), c_in
    if kind == "Concat":
        return Concat(), sum(c_in)
    if kind == "RTDETRDecoder":
        names = ["hd", "nq", "ndp", "nh", "ndl", "d_ffn", "dropout", "act", "eval_idx", "nd",
                 "label_noise_ratio", "box_noise_scale", "learnt_init_query"]
        kw = dict(zip(names, args[1:]))
        kw.pop("dropout", None), kw.pop("act", None)  # 0.0 and ReLU, checked by our yaml reader
        return RTDETRDecoder(args[0], c_in, **kw), kw.get("hd", 256)
    raise ValueError("unknown module %r (expected one of our yaml's modules)" % kind)


def model_path(model):
    """A yaml path, or a built-in name (trainer/models/, '.yaml' optional)."""
    if "/" in model or os.path.exists(model):
        return model
    return os.path.join(MODELS_DIR, model if model.endswith(".yaml") else model + ".yaml")


class RTDETR(nn.Module):
    """model.<i> for every yaml row; sources[i] the absolute indices a row reads (-1 = image)."""

    def __init__(self, spec, nc=None):
        super().__init__()
        self.nc = nc or spec["nc"]
        scales = spec.get("scales")
        depth, width, max_channels = (list(scales.values())[0] if scales else
                                      [spec.get("depth_multiple", 1.0), spec.get("width_multiple", 1.0), 1 << 30])
        layers, channels, self.sources = [], [], []
        for i, (source, repeats, kind, args) in enumerate(spec["backbone"] + spec["head"]):
            args = [self.nc if a == "nc" else None if a == "None" else a for a in args]
            if repeats > 1:  # parse_model: max(round(n * depth), 1); HGBlock/RepC3 take it as n
                repeats = max(round(repeats * depth), 1)
            many = isinstance(source, list)
            sources = [s + i if s < 0 else s for s in (source if many else [source])]
            c_in = [channels[s] for s in sources] if many else (3 if i == 0 else channels[sources[0]])
            layer, c_out = _layer(kind, c_in, repeats, args, self.nc, (width, max_channels))
            layers.append(layer)
            channels.append(c_out)
            self.sources.append(sources if many else sources[0])
        self.model = nn.ModuleList(layers)
        self.criterion = rtdetr_loss.RTDETRLoss(self.nc)

    def predict(self, img, targets):
        outputs, x = [], img
        for layer, source in zip(self.model, self.sources):
            if isinstance(source, list):
                x = [outputs[s] for s in source]
            elif source != -1 and source != len(outputs) - 1:
                x = outputs[source]
            if isinstance(layer, RTDETRDecoder):
                return layer(x, targets)
            x = layer(x)
            outputs.append(x)
        raise ValueError("the model has no RTDETRDecoder")

    def loss_terms(self, batch):
        """{key: scalar tensor} of the 12 loss keys (rtdetr_loss.KEYS order)."""
        targets = rtdetr_loss.targets_of(batch)
        outputs, dn = self.predict(batch["img"], targets)
        with torch.profiler.record_function("loss"):  # a family of flops.py's profile
            return self.criterion(outputs, dn, targets)

    def forward(self, batch):
        terms = self.loss_terms(batch)
        items = torch.stack([terms[k].detach() for k in ("loss_giou", "loss_class", "loss_bbox")])
        return sum(terms.values()), items


def params_listing(model):
    """`ddpdbg-train params`'s lines: "<index> <name> <d0>x<d1>..." per parameter, then the totals."""
    lines = ["%d %s %s" % (i, name, "x".join(map(str, p.shape)))
             for i, (name, p) in enumerate(model.named_parameters())]
    total = sum(p.numel() for p in model.parameters())
    return lines + ["total %d tensors %d parameters" % (len(lines), total)]


def build_model(model="rtdetr-l", nc=None):
    """The RTDETR of a yaml path or built-in name; nc overrides the yaml's class count."""
    path = model_path(model)
    with open(path) as f:
        spec = yaml.safe_load(f)
    return RTDETR(spec, nc)


if __name__ == "__main__":
    import bench_step
    bench_step.main()
