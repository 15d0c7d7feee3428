# rtdetr_hooks.py -- writes rtdetr-l.hooks.txt: the order in which PyTorch fires the 575
# AccumulateGrad hooks (what DDP's reducer listens to) in one training-mode backward of rtdetr-l
# at 160 px, batch 1, with the fixed 8-query denoising group of tests/test_model.c's dn_hook and
# its loss (seeded weighted sums of the four head outputs). The model is our own PyTorch
# rendering of the modules described in /work/shared/docs/rtdetr.md sections 1-2, built from
# trainer/models/rtdetr-l.yaml; Ultralytics is neither used nor needed. Only the graph's structure
# matters (which ops, in which order), not the values. It is not a trainable model: no weight
# init, no real denoising, no loss. Needs Debian's python3-torch (1.13) and python3-yaml; run
# from the repository root:
#   /usr/bin/python3 tests/golden/params/rtdetr_hooks.py > tests/golden/params/rtdetr-l.hooks.txt
import math
import torch, torch.nn as nn, torch.nn.functional as F
import yaml

YAML_PATH = "trainer/models/rtdetr-l.yaml"
PARAMS_PATH = "tests/golden/params/rtdetr-l.params.txt"
IMAGE_SIZE = 160
DN_QUERIES = 8      # tests/test_model.c DN_N: two mask groups of 4 slots
DN_GROUP_SLOTS = 4

# PyTorch orders the backward by node creation, so every run_* below performs the operations of
# rtdetr.md in exactly the documented order. Dropouts (p = 0) are left out: on CPU a p = 0
# dropout returns its input and adds no graph node.


class Unit(nn.Module):
    """A module built by one of the builders below: its children (named as in the Ultralytics
    state dict, registered in keyword order, which fixes the parameter indices), plain
    settings, and the run_* function that performs its forward."""

    def __init__(self, run, **items):
        super().__init__()
        self.run = run
        for name, item in items.items():
            setattr(self, name, item)

    def forward(self, *inputs):
        return self.run(self, *inputs)


def apply_act(act, x):
    return x if act is None else act(x)


# ---- convolutions (rtdetr.md 2.1-2.6) ----

def conv_bn(c_in, c_out, k=1, stride=1, pad=None, groups=1, act=F.silu):
    """Conv2d without bias -> BatchNorm2d -> act (None = identity); pad defaults to k // 2."""
    pad = k // 2 if pad is None else pad
    return Unit(run_conv_bn, act=act,
                conv=nn.Conv2d(c_in, c_out, k, stride, pad, groups=groups, bias=False),
                bn=nn.BatchNorm2d(c_out))


def run_conv_bn(u, x):
    return apply_act(u.act, u.bn(u.conv(x)))


def depthwise_conv_bn(c_in, c_out, k, stride=1, act=F.silu):
    return conv_bn(c_in, c_out, k, stride, groups=math.gcd(c_in, c_out), act=act)


def hg_stem(c_in, mid, c_out):
    return Unit(run_hg_stem,
                stem1=conv_bn(c_in, mid, 3, 2, act=F.relu),
                stem2a=conv_bn(mid, mid // 2, 2, 1, 0, act=F.relu),
                stem2b=conv_bn(mid // 2, mid, 2, 1, 0, act=F.relu),
                stem3=conv_bn(mid * 2, mid, 3, 2, act=F.relu),
                stem4=conv_bn(mid, c_out, 1, 1, act=F.relu))


def run_hg_stem(u, x):
    pad_right_bottom = [0, 1, 0, 1]
    x = F.pad(u.stem1(x), pad_right_bottom)
    branch = u.stem2b(F.pad(u.stem2a(x), pad_right_bottom))
    pooled = F.max_pool2d(x, kernel_size=2, stride=1, padding=0, ceil_mode=True)
    return u.stem4(u.stem3(torch.cat([pooled, branch], dim=1)))  # pool output first


def light_conv(c_in, c_out, k):
    return Unit(run_light_conv,
                conv1=conv_bn(c_in, c_out, 1, act=None),
                conv2=depthwise_conv_bn(c_out, c_out, k, act=F.relu))


def run_light_conv(u, x):
    return u.conv2(u.conv1(x))


def hg_block(c_in, mid, c_out, k, n, light, shortcut):
    def inner(c):
        return light_conv(c, mid, k) if light else conv_bn(c, mid, k, act=F.relu)
    return Unit(run_hg_block, residual=shortcut and c_in == c_out,
                m=nn.ModuleList(inner(c_in if j == 0 else mid) for j in range(n)),
                sc=conv_bn(c_in + n * mid, c_out // 2, 1, act=F.relu),
                ec=conv_bn(c_out // 2, c_out, 1, act=F.relu))


def run_hg_block(u, x):
    chain = [x]
    for conv in u.m:
        chain.append(conv(chain[-1]))
    out = u.ec(u.sc(torch.cat(chain, 1)))
    return out + x if u.residual else out


def rep_conv(c):
    """Training form of RepConv in RT-DETR: 3x3 and 1x1 branches, no identity-BN branch."""
    return Unit(run_rep_conv,
                conv1=conv_bn(c, c, 3, 1, 1, act=None),
                conv2=conv_bn(c, c, 1, 1, 0, act=None))


def run_rep_conv(u, x):
    return F.silu(u.conv1(x) + u.conv2(x))


def rep_c3(c_in, c_out, n):
    """Hidden width = c_out (e = 1), so the output conv is an identity and has no params."""
    return Unit(run_rep_c3,
                cv1=conv_bn(c_in, c_out, 1), cv2=conv_bn(c_in, c_out, 1),
                m=nn.Sequential(*[rep_conv(c_out) for _ in range(n)]))


def run_rep_c3(u, x):
    return u.m(u.cv1(x)) + u.cv2(x)


def upsample_nearest():
    return Unit(lambda u, x: F.interpolate(x, scale_factor=2.0, mode="nearest"))


def concat_channels():
    return Unit(lambda u, xs: torch.cat(xs, 1))


# ---- transformer parts (rtdetr.md 2.8-2.11) ----

def sincos_2d(h, w, c):
    """(1, h*w, c) embedding: token t uses a = t div h and b = t mod h (rtdetr.md 2.8)."""
    quarter = c // 4
    omega = 1.0 / 10000.0 ** (torch.arange(quarter, dtype=torch.float32) / quarter)
    token = torch.arange(h * w)
    a = (token // h).to(torch.float32)[:, None] * omega[None]
    b = (token % h).to(torch.float32)[:, None] * omega[None]
    return torch.cat([a.sin(), a.cos(), b.sin(), b.cos()], 1)[None]


def aifi(c, hidden, heads):
    return Unit(run_aifi,
                ma=nn.MultiheadAttention(c, heads, dropout=0.0, batch_first=True),
                fc1=nn.Linear(c, hidden), fc2=nn.Linear(hidden, c),
                norm1=nn.LayerNorm(c), norm2=nn.LayerNorm(c))


def run_aifi(u, x):
    """Post-norm encoder layer over the row-major tokens of one map; pos on q and k only."""
    c, h, w = x.shape[1:]
    pos = sincos_2d(h, w, c)
    tokens = x.flatten(2).permute(0, 2, 1)
    query_key = tokens + pos  # the same tensor is passed as query and key
    tokens = u.norm1(tokens + u.ma(query_key, query_key, tokens)[0])
    tokens = u.norm2(tokens + u.fc2(F.gelu(u.fc1(tokens))))
    return tokens.permute(0, 2, 1).view([-1, c, h, w]).contiguous()


def mlp(dims):
    """Linear layers dims[0] -> ... -> dims[-1], ReLU between them, none after the last."""
    return Unit(run_mlp, layers=nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims, dims[1:])))


def run_mlp(u, x):
    last = len(u.layers) - 1
    for j, linear in enumerate(u.layers):
        x = linear(x) if j == last else F.relu(linear(x))
    return x


def deform_attn(d, levels, heads, points):
    return Unit(run_deform_attn, levels=levels, heads=heads, points=points,
                sampling_offsets=nn.Linear(d, heads * levels * points * 2),
                attention_weights=nn.Linear(d, heads * levels * points),
                value_proj=nn.Linear(d, d), output_proj=nn.Linear(d, d))


def run_deform_attn(u, query, ref, value, shapes):
    """query (B,Lq,d), ref (B,Lq,1,4) sigmoid cxcywh, value (B,Lv,d), shapes [(h,w)] per level."""
    B, Lq, d = query.shape
    H, L, P = u.heads, u.levels, u.points
    value = u.value_proj(value).view(B, value.shape[1], H, d // H)
    offsets = u.sampling_offsets(query).view(B, Lq, H, L, P, 2)
    weights = u.attention_weights(query).view(B, Lq, H, L * P)
    weights = F.softmax(weights, -1).view(B, Lq, H, L, P)
    shift = offsets / P * ref[:, :, None, :, None, 2:] * 0.5
    where = ref[:, :, None, :, None, :2] + shift
    return u.output_proj(sample_levels(value, shapes, where, weights))


def sample_levels(value, shapes, where, weights):
    """Bilinear sampling of every level at where (B,Lq,H,L,P,2 in [0,1]), weighted sum over
    levels x points, heads concatenated -> (B, Lq, H*dh)."""
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


def decoder_layer(d, heads, ffn, levels, points):
    return Unit(run_decoder_layer,
                self_attn=nn.MultiheadAttention(d, heads, dropout=0.0),  # (L, B, E) inputs
                norm1=nn.LayerNorm(d),
                cross_attn=deform_attn(d, levels, heads, points),
                norm2=nn.LayerNorm(d),
                linear1=nn.Linear(d, ffn), linear2=nn.Linear(ffn, d), norm3=nn.LayerNorm(d))


def run_decoder_layer(u, embed, ref, feats, shapes, attn_mask, query_pos):
    query_key = embed + query_pos
    attended = u.self_attn(query_key.transpose(0, 1), query_key.transpose(0, 1),
                           embed.transpose(0, 1), attn_mask=attn_mask)[0].transpose(0, 1)
    embed = u.norm1(embed + attended)
    embed = u.norm2(embed + u.cross_attn(embed + query_pos, ref.unsqueeze(2), feats, shapes))
    return u.norm3(embed + u.linear2(F.relu(u.linear1(embed))))


def inverse_sigmoid(x, eps=1e-5):
    x = x.clamp(min=0, max=1)
    return torch.log(x.clamp(min=eps) / (1 - x).clamp(min=eps))


# ---- the head (rtdetr.md 2.12-2.13) ----

def rtdetr_head(nc, chans, hd=256, nq=300, points=4, heads=8, layers=6, ffn=1024):
    return Unit(run_rtdetr_head, nc=nc, nq=nq, hd=hd,
                input_proj=nn.ModuleList(
                    nn.Sequential(nn.Conv2d(c, hd, 1, bias=False), nn.BatchNorm2d(hd)) for c in chans),
                decoder=Unit(None, layers=nn.ModuleList(
                    decoder_layer(hd, heads, ffn, len(chans), points) for _ in range(layers))),
                denoising_class_embed=nn.Embedding(nc, hd),
                query_pos_head=mlp([4, 2 * hd, hd]),
                enc_output=nn.Sequential(nn.Linear(hd, hd), nn.LayerNorm(hd)),
                enc_score_head=nn.Linear(hd, nc),
                enc_bbox_head=mlp([hd, hd, hd, 4]),
                dec_score_head=nn.ModuleList(nn.Linear(hd, nc) for _ in range(layers)),
                dec_bbox_head=nn.ModuleList(mlp([hd, hd, hd, 4]) for _ in range(layers)))


def fixed_dn_group(u):
    """tests/test_model.c's dn_hook: classes (i*7) % nc, box logits (i%5)*0.3-0.6, and the
    mask (True = blocked) where matching queries see no dn slot and each dn group of 4 slots
    sees only itself and the matching queries."""
    classes = torch.tensor([(i * 7) % u.nc for i in range(DN_QUERIES)])
    embed = u.denoising_class_embed.weight[classes].reshape(1, DN_QUERIES, u.hd)
    box_logits = torch.tensor([(i % 5) * 0.3 - 0.6 for i in range(DN_QUERIES * 4)]).view(1, DN_QUERIES, 4)
    size = DN_QUERIES + u.nq
    row = torch.arange(size)[:, None]
    col = torch.arange(size)[None, :]
    mask = (col < DN_QUERIES) & ((row >= DN_QUERIES) | (row // DN_GROUP_SLOTS != col // DN_GROUP_SLOTS))
    return embed, box_logits, mask


def anchor_logits(shapes, size=0.05, eps=0.01):
    """(1, N, 4) anchor logits (cxcywh, row-major per level, size 0.05 * 2^level) and the
    (1, N, 1) valid mask (all coords in (eps, 1-eps)); invalid anchors are +inf."""
    boxes = []
    for level, (h, w) in enumerate(shapes):
        cy, cx = torch.meshgrid(torch.arange(h, dtype=torch.float32),
                                torch.arange(w, dtype=torch.float32), indexing="ij")
        centre = torch.stack([(cx.flatten() + 0.5) / w, (cy.flatten() + 0.5) / h], -1)
        boxes.append(torch.cat([centre, torch.full_like(centre, size * 2.0 ** level)], -1))
    boxes = torch.cat(boxes, 0)[None]
    valid = ((boxes > eps) & (boxes < 1 - eps)).all(-1, keepdim=True)
    return torch.log(boxes / (1 - boxes)).masked_fill(~valid, float("inf")), valid


def run_rtdetr_head(u, levels):
    projected = [proj(x) for proj, x in zip(u.input_proj, levels)]
    shapes = [list(x.shape[2:]) for x in projected]
    feats = torch.cat([x.flatten(2).permute(0, 2, 1) for x in projected], 1)
    dn_embed, dn_box_logits, attn_mask = fixed_dn_group(u)
    anchors, valid = anchor_logits(shapes)
    memory = u.enc_output(valid * feats)  # invalid positions zeroed before Linear + LN
    enc_logits = u.enc_score_head(memory)
    chosen = torch.topk(enc_logits.max(-1).values, u.nq, dim=1).indices.view(-1)
    image = torch.zeros(u.nq, dtype=chosen.dtype)  # batch 1
    chosen_feats = memory[image, chosen].view(1, u.nq, -1)
    chosen_anchors = anchors[:, chosen].view(1, u.nq, -1)
    ref_logits = u.enc_bbox_head(chosen_feats) + chosen_anchors
    enc_boxes = ref_logits.sigmoid()
    ref_logits = torch.cat([dn_box_logits, ref_logits], 1)
    enc_scores = enc_logits[image, chosen].view(1, u.nq, -1)
    content = chosen_feats
    ref_logits, content = ref_logits.detach(), content.detach()
    content = torch.cat([dn_embed, content], 1)
    dec_boxes, dec_logits = run_decoder(u, content, ref_logits, feats, shapes, attn_mask)
    return dec_boxes, dec_logits, enc_boxes, enc_scores


def run_decoder(u, out, ref_logits, feats, shapes, attn_mask):
    """Training loop of rtdetr.md 2.12: box_i uses the undetached refinement of layer i-1
    ("look forward twice"), the next layer's reference is the detached refinement."""
    ref = ref_logits.sigmoid()
    boxes, logits, previous = [], [], None
    for i, layer in enumerate(u.decoder.layers):
        out = layer(out, ref, feats, shapes, attn_mask, u.query_pos_head(ref))
        delta = u.dec_bbox_head[i](out)
        refined = torch.sigmoid(delta + inverse_sigmoid(ref))
        logits.append(u.dec_score_head[i](out))
        boxes.append(refined if i == 0 else torch.sigmoid(delta + inverse_sigmoid(previous)))
        previous, ref = refined, refined.detach()
    return torch.stack(boxes), torch.stack(logits)


# ---- the model from the yaml (rtdetr.md 1.1) ----

def build_layer(kind, c_in, repeats, args, nc):
    """One yaml row -> (module, output channels). c_in is a list for multi-input rows."""
    if kind == "HGStem":
        mid, c_out = args
        return hg_stem(c_in, mid, c_out), c_out
    if kind == "HGBlock":  # the yaml repeat count is the block's inner conv count
        mid, c_out, k, light, shortcut = (args + [False, False])[:5]
        return hg_block(c_in, mid, c_out, k, repeats, light, shortcut), c_out
    if kind == "Conv":
        c_out, k, stride, pad, groups, dilation, act = (args + [None, 1, 1, True])[:7]
        assert dilation == 1
        return conv_bn(c_in, c_out, k, stride, pad, groups, F.silu if act else None), c_out
    if kind == "DWConv":
        c_out, k, stride, dilation, act = args
        assert dilation == 1
        return depthwise_conv_bn(c_in, c_out, k, stride, F.silu if act else None), c_out
    if kind == "AIFI":
        hidden, heads = args
        return aifi(c_in, hidden, heads), c_in
    if kind == "RepC3":  # the yaml repeat count is the number of RepConvs
        return rep_c3(c_in, args[0], repeats), args[0]
    if kind == "nn.Upsample":
        return upsample_nearest(), c_in
    if kind == "Concat":
        return concat_channels(), sum(c_in)
    if kind == "RTDETRDecoder":
        return rtdetr_head(nc, c_in), None
    raise ValueError("%s: unknown module %r" % (YAML_PATH, kind))


def build_model(path):
    """Root module whose state-dict names are model.{i}.... Each layer records `sources`:
    absolute indices of the earlier outputs it reads, or None for the previous output."""
    spec = yaml.safe_load(open(path))
    nc = spec["nc"]
    channels, layers = [], []
    for i, (source, repeats, kind, args) in enumerate(spec["backbone"] + spec["head"]):
        args = [nc if a == "nc" else None if a == "None" else a for a in args]  # yaml None is a string
        many = isinstance(source, list)
        sources = [s + i if s < 0 else s for s in (source if many else [source])]
        c_in = [channels[s] for s in sources] if many else (3 if i == 0 else channels[sources[0]])
        layer, c_out = build_layer(kind, c_in, repeats, args, nc)
        layer.sources = sources if many or source != -1 else None
        layer.many = many
        layers.append(layer)
        channels.append(c_out)
    root = nn.Module()
    root.model = nn.ModuleList(layers)
    return root


def run_model(root, image):
    outputs, x = [], image
    for layer in root.model:
        if layer.sources is not None:
            x = [outputs[s] for s in layer.sources] if layer.many else outputs[layer.sources[0]]
        x = layer(x)
        outputs.append(x)
    return x


def check_params(root):
    """The parameter list must be rtdetr-l.params.txt line by line: the hook indices are
    positions in it."""
    expected = [line.split()[1:] for line in open(PARAMS_PATH) if not line.startswith("total")]
    actual = [[name, "x".join(map(str, p.shape))] for name, p in root.named_parameters()]
    assert len(actual) == 575 and actual == expected, "parameters differ from " + PARAMS_PATH


def weighted_sum(t, seed):
    weight = torch.rand(t.shape, generator=torch.Generator().manual_seed(seed)) * 0.02 - 0.01
    return (t * weight).sum()


def main():
    torch.manual_seed(0)
    root = build_model(YAML_PATH)
    root.train()
    check_params(root)
    params = list(root.parameters())
    order = []
    # The AccumulateGrad node of p is the next function of any view of p; DDP holds these
    # objects too (their hooks vanish if the node is freed).
    grad_accumulators = []
    for index, p in enumerate(params):
        accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
        accumulator.register_hook(lambda *unused, index=index: order.append(index))
        grad_accumulators.append(accumulator)
    image = torch.rand(1, 3, IMAGE_SIZE, IMAGE_SIZE)
    outputs = run_model(root, image)  # dec boxes, dec logits, enc boxes, enc scores
    loss = None
    for seed, t in enumerate(outputs, start=1):
        term = weighted_sum(t, seed)
        loss = term if loss is None else loss + term
    loss.backward()
    assert sorted(order) == list(range(len(params)))
    print("# rtdetr-l training backward, %d px, batch 1, %d denoising queries: parameter indices in"
          % (IMAGE_SIZE, DN_QUERIES))
    print("# AccumulateGrad hook order, from tests/golden/params/rtdetr_hooks.py (torch %s)"
          % torch.__version__)
    print(" ".join(map(str, order)))


if __name__ == "__main__":
    main()
