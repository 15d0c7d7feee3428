# rtdetr_hooks.py -- writes rtdetr-l.hooks.txt: the order in which PyTorch fires the 575
# AccumulateGrad hooks (what DDP's reducer listens to) in one training-mode backward of
# rtdetr-l at 160 px, batch 1, with the 8 denoising queries of tests/test_model.c's dn_hook and
# its loss (weighted sums of the four outputs). The model is our own small PyTorch rendering of
# the modules described in ../shared/docs/rtdetr.md section 2, keeping the operation order of
# Ultralytics 8.3's forward passes (Ultralytics itself is not needed), built from
# trainer/models/rtdetr-l.yaml by a small parse_model. Only the graph's structure matters, not
# the values. Run with Debian's python3-torch (1.13) and python3-yaml from the repository root:
#   /usr/bin/python3 tests/golden/params/rtdetr_hooks.py > tests/golden/params/rtdetr-l.hooks.txt
import math, sys, copy
import torch, torch.nn as nn, torch.nn.functional as F
import yaml

def autopad(k, p=None, d=1):
    if d > 1: k = d * (k - 1) + 1
    return k // 2 if p is None else p

class Conv(nn.Module):
    default_act = nn.SiLU()
    def __init__(s, c1, c2, k=1, st=1, p=None, g=1, d=1, act=True):
        super().__init__()
        s.conv = nn.Conv2d(c1, c2, k, st, autopad(k, p, d), groups=g, dilation=d, bias=False)
        s.bn = nn.BatchNorm2d(c2)
        s.act = s.default_act if act is True else act if isinstance(act, nn.Module) else nn.Identity()
    def forward(s, x): return s.act(s.bn(s.conv(x)))

class DWConv(Conv):
    def __init__(s, c1, c2, k=1, st=1, d=1, act=True):
        super().__init__(c1, c2, k, st, g=math.gcd(c1, c2), d=d, act=act)

class Concat(nn.Module):
    def __init__(s, d=1): super().__init__(); s.d = d
    def forward(s, x): return torch.cat(x, s.d)

class HGStem(nn.Module):
    def __init__(s, c1, cm, c2):
        super().__init__()
        s.stem1 = Conv(c1, cm, 3, 2, act=nn.ReLU())
        s.stem2a = Conv(cm, cm // 2, 2, 1, 0, act=nn.ReLU())
        s.stem2b = Conv(cm // 2, cm, 2, 1, 0, act=nn.ReLU())
        s.stem3 = Conv(cm * 2, cm, 3, 2, act=nn.ReLU())
        s.stem4 = Conv(cm, c2, 1, 1, act=nn.ReLU())
        s.pool = nn.MaxPool2d(kernel_size=2, stride=1, padding=0, ceil_mode=True)
    def forward(s, x):
        x = s.stem1(x); x = F.pad(x, [0, 1, 0, 1])
        x2 = s.stem2a(x); x2 = F.pad(x2, [0, 1, 0, 1]); x2 = s.stem2b(x2)
        x1 = s.pool(x); x = torch.cat([x1, x2], dim=1)
        x = s.stem3(x); return s.stem4(x)

class LightConv(nn.Module):
    def __init__(s, c1, c2, k=1, act=nn.ReLU()):
        super().__init__(); s.conv1 = Conv(c1, c2, 1, act=False); s.conv2 = DWConv(c2, c2, k, act=act)
    def forward(s, x): return s.conv2(s.conv1(x))

class HGBlock(nn.Module):
    def __init__(s, c1, cm, c2, k=3, n=6, lightconv=False, shortcut=False, act=nn.ReLU()):
        super().__init__()
        block = LightConv if lightconv else Conv
        s.m = nn.ModuleList(block(c1 if i == 0 else cm, cm, k=k, act=act) for i in range(n))
        s.sc = Conv(c1 + n * cm, c2 // 2, 1, 1, act=act)
        s.ec = Conv(c2 // 2, c2, 1, 1, act=act)
        s.add = shortcut and c1 == c2
    def forward(s, x):
        y = [x]; y.extend(m(y[-1]) for m in s.m)
        y = s.ec(s.sc(torch.cat(y, 1)))
        return y + x if s.add else y

class RepConv(nn.Module):
    def __init__(s, c1, c2, k=3, st=1, p=1, g=1, d=1, act=True, bn=False):
        super().__init__()
        s.act = Conv.default_act if act is True else act
        s.bn = None
        s.conv1 = Conv(c1, c2, k, st, p=p, g=g, act=False)
        s.conv2 = Conv(c1, c2, 1, st, p=(p - k // 2), g=g, act=False)
    def forward(s, x):
        id_out = 0 if s.bn is None else s.bn(x)
        return s.act(s.conv1(x) + s.conv2(x) + id_out)

class RepC3(nn.Module):
    def __init__(s, c1, c2, n=3, e=1.0):
        super().__init__(); c_ = int(c2 * e)
        s.cv1 = Conv(c1, c_, 1, 1); s.cv2 = Conv(c1, c_, 1, 1)
        s.m = nn.Sequential(*[RepConv(c_, c_) for _ in range(n)])
        s.cv3 = Conv(c_, c2, 1, 1) if c_ != c2 else nn.Identity()
    def forward(s, x): return s.cv3(s.m(s.cv1(x)) + s.cv2(x))

class AIFI(nn.Module):
    def __init__(s, c1, cm=2048, num_heads=8, dropout=0, act=nn.GELU()):
        super().__init__()
        s.ma = nn.MultiheadAttention(c1, num_heads, dropout=dropout, batch_first=True)
        s.fc1 = nn.Linear(c1, cm); s.fc2 = nn.Linear(cm, c1)
        s.norm1 = nn.LayerNorm(c1); s.norm2 = nn.LayerNorm(c1)
        s.dropout = nn.Dropout(dropout); s.dropout1 = nn.Dropout(dropout); s.dropout2 = nn.Dropout(dropout)
        s.act = act
    def forward_post(s, src, pos):
        q = k = src + pos
        src2 = s.ma(q, k, value=src)[0]
        src = src + s.dropout1(src2); src = s.norm1(src)
        src2 = s.fc2(s.dropout(s.act(s.fc1(src))))
        src = src + s.dropout2(src2); return s.norm2(src)
    def forward(s, x):
        c, h, w = x.shape[1:]
        pos = s.pe(w, h, c)
        x = s.forward_post(x.flatten(2).permute(0, 2, 1), pos.to(device=x.device, dtype=x.dtype))
        return x.permute(0, 2, 1).view([-1, c, h, w]).contiguous()
    @staticmethod
    def pe(w, h, embed_dim=256, temperature=10000.0):
        grid_w = torch.arange(w, dtype=torch.float32); grid_h = torch.arange(h, dtype=torch.float32)
        grid_w, grid_h = torch.meshgrid(grid_w, grid_h, indexing="ij")
        pos_dim = embed_dim // 4
        omega = torch.arange(pos_dim, dtype=torch.float32) / pos_dim
        omega = 1.0 / (temperature**omega)
        out_w = grid_w.flatten()[..., None] @ omega[None]; out_h = grid_h.flatten()[..., None] @ omega[None]
        return torch.cat([torch.sin(out_w), torch.cos(out_w), torch.sin(out_h), torch.cos(out_h)], 1)[None]

class MLP(nn.Module):
    def __init__(s, input_dim, hidden_dim, output_dim, num_layers):
        super().__init__(); s.num_layers = num_layers; h = [hidden_dim] * (num_layers - 1)
        s.layers = nn.ModuleList(nn.Linear(n, k) for n, k in zip([input_dim, *h], [*h, output_dim]))
        s.act = nn.ReLU()
    def forward(s, x):
        for i, layer in enumerate(s.layers):
            x = s.act(layer(x)) if i < s.num_layers - 1 else layer(x)
        return x

def msda(value, shapes, loc, aw):
    bs, _, nh, ed = value.shape
    _, nq, nh, nl, npnt, _ = loc.shape
    vl = value.split([H * W for H, W in shapes], dim=1)
    grids = 2 * loc - 1
    out = []
    for lvl, (H, W) in enumerate(shapes):
        v = vl[lvl].flatten(2).transpose(1, 2).reshape(bs * nh, ed, H, W)
        g = grids[:, :, :, lvl].transpose(1, 2).flatten(0, 1)
        out.append(F.grid_sample(v, g, mode="bilinear", padding_mode="zeros", align_corners=False))
    aw = aw.transpose(1, 2).reshape(bs * nh, 1, nq, nl * npnt)
    o = (torch.stack(out, dim=-2).flatten(-2) * aw).sum(-1).view(bs, nh * ed, nq)
    return o.transpose(1, 2).contiguous()

class MSDeformAttn(nn.Module):
    def __init__(s, d_model=256, n_levels=4, n_heads=8, n_points=4):
        super().__init__()
        s.d_model, s.n_levels, s.n_heads, s.n_points = d_model, n_levels, n_heads, n_points
        s.sampling_offsets = nn.Linear(d_model, n_heads * n_levels * n_points * 2)
        s.attention_weights = nn.Linear(d_model, n_heads * n_levels * n_points)
        s.value_proj = nn.Linear(d_model, d_model); s.output_proj = nn.Linear(d_model, d_model)
    def forward(s, query, refer_bbox, value, shapes):
        bs, len_q = query.shape[:2]; len_v = value.shape[1]
        value = s.value_proj(value)
        value = value.view(bs, len_v, s.n_heads, s.d_model // s.n_heads)
        so = s.sampling_offsets(query).view(bs, len_q, s.n_heads, s.n_levels, s.n_points, 2)
        aw = s.attention_weights(query).view(bs, len_q, s.n_heads, s.n_levels * s.n_points)
        aw = F.softmax(aw, -1).view(bs, len_q, s.n_heads, s.n_levels, s.n_points)
        add = so / s.n_points * refer_bbox[:, :, None, :, None, 2:] * 0.5
        loc = refer_bbox[:, :, None, :, None, :2] + add
        return s.output_proj(msda(value, shapes, loc, aw))

class DecLayer(nn.Module):
    def __init__(s, d_model=256, n_heads=8, d_ffn=1024, n_levels=4, n_points=4):
        super().__init__()
        s.self_attn = nn.MultiheadAttention(d_model, n_heads, dropout=0.0)
        s.dropout1 = nn.Dropout(0.0); s.norm1 = nn.LayerNorm(d_model)
        s.cross_attn = MSDeformAttn(d_model, n_levels, n_heads, n_points)
        s.dropout2 = nn.Dropout(0.0); s.norm2 = nn.LayerNorm(d_model)
        s.linear1 = nn.Linear(d_model, d_ffn); s.act = nn.ReLU(); s.dropout3 = nn.Dropout(0.0)
        s.linear2 = nn.Linear(d_ffn, d_model); s.dropout4 = nn.Dropout(0.0); s.norm3 = nn.LayerNorm(d_model)
    def forward(s, embed, refer_bbox, feats, shapes, attn_mask=None, query_pos=None):
        q = k = embed + query_pos
        tgt = s.self_attn(q.transpose(0, 1), k.transpose(0, 1), embed.transpose(0, 1), attn_mask=attn_mask)[0].transpose(0, 1)
        embed = embed + s.dropout1(tgt); embed = s.norm1(embed)
        tgt = s.cross_attn(embed + query_pos, refer_bbox.unsqueeze(2), feats, shapes)
        embed = embed + s.dropout2(tgt); embed = s.norm2(embed)
        tgt2 = s.linear2(s.dropout3(s.act(s.linear1(embed))))
        embed = embed + s.dropout4(tgt2); return s.norm3(embed)

def inverse_sigmoid(x, eps=1e-5):
    x = x.clamp(min=0, max=1); return torch.log(x.clamp(min=eps) / (1 - x).clamp(min=eps))

class Decoder(nn.Module):
    def __init__(s, layer, n):
        super().__init__(); s.layers = nn.ModuleList([copy.deepcopy(layer) for _ in range(n)])
    def forward(s, embed, refer_bbox, feats, shapes, bbox_head, score_head, pos_mlp, attn_mask):
        output = embed; dec_bboxes = []; dec_cls = []; last = None
        refer_bbox = refer_bbox.sigmoid()
        for i, layer in enumerate(s.layers):
            output = layer(output, refer_bbox, feats, shapes, attn_mask, pos_mlp(refer_bbox))
            bbox = bbox_head[i](output)
            refined = torch.sigmoid(bbox + inverse_sigmoid(refer_bbox))
            dec_cls.append(score_head[i](output))
            dec_bboxes.append(refined if i == 0 else torch.sigmoid(bbox + inverse_sigmoid(last)))
            last = refined; refer_bbox = refined.detach()
        return torch.stack(dec_bboxes), torch.stack(dec_cls)

DN = 8
class RTDETRDecoder(nn.Module):
    def __init__(s, nc=80, ch=(512, 1024, 2048), hd=256, nq=300, ndp=4, nh=8, ndl=6, d_ffn=1024):
        super().__init__()
        s.nc, s.nq, s.hd = nc, nq, hd
        s.input_proj = nn.ModuleList(nn.Sequential(nn.Conv2d(x, hd, 1, bias=False), nn.BatchNorm2d(hd)) for x in ch)
        s.decoder = Decoder(DecLayer(hd, nh, d_ffn, len(ch), ndp), ndl)
        s.denoising_class_embed = nn.Embedding(nc, hd)
        s.query_pos_head = MLP(4, 2 * hd, hd, 2)
        s.enc_output = nn.Sequential(nn.Linear(hd, hd), nn.LayerNorm(hd))
        s.enc_score_head = nn.Linear(hd, nc)
        s.enc_bbox_head = MLP(hd, hd, 4, 3)
        s.dec_score_head = nn.ModuleList([nn.Linear(hd, nc) for _ in range(ndl)])
        s.dec_bbox_head = nn.ModuleList([MLP(hd, hd, 4, 3) for _ in range(ndl)])
    def forward(s, x):
        x = [s.input_proj[i](f) for i, f in enumerate(x)]
        feats, shapes = [], []
        for f in x:
            h, w = f.shape[2:]; feats.append(f.flatten(2).permute(0, 2, 1)); shapes.append([h, w])
        feats = torch.cat(feats, 1)
        # the C test's denoising hook: classes (i*7)%nc, fixed box logits, group mask
        cls = torch.tensor([(i * 7) % s.nc for i in range(DN)])
        dn_embed = s.denoising_class_embed.weight[cls].reshape(1, DN, s.hd)
        dn_bbox = torch.tensor([(i % 5) * 0.3 - 0.6 for i in range(DN * 4)]).view(1, DN, 4)
        tgt = DN + s.nq
        mask = torch.zeros(tgt, tgt, dtype=torch.bool)
        for r in range(tgt):
            for c in range(DN):
                mask[r, c] = r >= DN or r // 4 != c // 4
        anchors, valid = s.anchors(shapes)
        features = s.enc_output(valid * feats)
        enc_scores_all = s.enc_score_head(features)
        topk = torch.topk(enc_scores_all.max(-1).values, s.nq, dim=1).indices.view(-1)
        bi = torch.arange(end=1, dtype=topk.dtype).unsqueeze(-1).repeat(1, s.nq).view(-1)
        topf = features[bi, topk].view(1, s.nq, -1)
        topa = anchors[:, topk].view(1, s.nq, -1)
        refer = s.enc_bbox_head(topf) + topa
        enc_bboxes = refer.sigmoid()
        refer = torch.cat([dn_bbox, refer], 1)
        enc_scores = enc_scores_all[bi, topk].view(1, s.nq, -1)
        emb = topf
        refer = refer.detach(); emb = emb.detach()
        emb = torch.cat([dn_embed, emb], 1)
        db, ds = s.decoder(emb, refer, feats, shapes, s.dec_bbox_head, s.dec_score_head, s.query_pos_head, mask)
        return db, ds, enc_bboxes, enc_scores
    def anchors(s, shapes, grid_size=0.05, eps=1e-2):
        a = []
        for i, (h, w) in enumerate(shapes):
            gy, gx = torch.meshgrid(torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32), indexing="ij")
            gxy = (torch.stack([gx, gy], -1).unsqueeze(0) + 0.5) / torch.tensor([w, h], dtype=torch.float32)
            wh = torch.ones_like(gxy) * grid_size * (2.0**i)
            a.append(torch.cat([gxy, wh], -1).view(-1, h * w, 4))
        a = torch.cat(a, 1)
        v = ((a > eps) & (a < 1 - eps)).all(-1, keepdim=True)
        a = torch.log(a / (1 - a)).masked_fill(~v, float("inf"))
        return a, v

def build(path):
    d = yaml.safe_load(open(path)); nc = d["nc"]
    ch = [3]; layers = []
    for i, (f, n, m, args) in enumerate(d["backbone"] + d["head"]):
        args = [nc if a == "nc" else (None if a == "None" else a) for a in args]
        M = {"Conv": Conv, "DWConv": DWConv, "HGStem": HGStem, "HGBlock": HGBlock, "AIFI": AIFI, "RepC3": RepC3,
             "nn.Upsample": nn.Upsample, "Concat": Concat, "RTDETRDecoder": RTDETRDecoder}[m]
        if M in (Conv, DWConv, RepC3):
            c1, c2 = ch[f], args[0]; args = [c1, c2, *args[1:]]
            if M is RepC3: args.insert(2, n); n = 1
        elif M is AIFI: args = [ch[f], *args]; c2 = ch[f]
        elif M in (HGStem, HGBlock):
            c1, cm, c2 = ch[f], args[0], args[1]; args = [c1, cm, c2, *args[2:]]
            if M is HGBlock: args.insert(4, n); n = 1
        elif M is Concat: c2 = sum(ch[x] for x in f)
        elif M is RTDETRDecoder: args.insert(1, [ch[x] for x in f])
        else: c2 = ch[f]
        mod = M(*args); mod.f = f; layers.append(mod)
        if i == 0: ch = []
        ch.append(c2)
    return nn.ModuleList(layers)

def forward(model, x):
    y = []
    for m in model[:-1]:
        if m.f != -1: x = y[m.f] if isinstance(m.f, int) else [x if j == -1 else y[j] for j in m.f]
        x = m(x); y.append(x)
    return model[-1]([y[j] for j in model[-1].f])

torch.manual_seed(0)
model = build("trainer/models/rtdetr-l.yaml"); model.train()
params = list(model.parameters())
assert len(params) == 575 and sum(p.numel() for p in params) == 32970476
order = []
accs = []  # DDP keeps the AccumulateGrad objects alive, or their hooks vanish
for i, p in enumerate(params):
    acc = p.expand_as(p).grad_fn.next_functions[0][0]
    acc.register_hook(lambda *a, i=i: order.append(i))
    accs.append(acc)
x = torch.rand(1, 3, 160, 160)
db, ds, eb, es = forward(model, x)
w = lambda t, s: (torch.rand(t.shape, generator=torch.Generator().manual_seed(s)) * 0.02 - 0.01)
loss = (db * w(db, 1)).sum() + (ds * w(ds, 2)).sum()
loss = loss + (eb * w(eb, 3)).sum()
loss = loss + (es * w(es, 4)).sum()
loss.backward()
assert sorted(order) == list(range(575))
print("# rtdetr-l training backward, 160 px, batch 1, 8 denoising queries: parameter indices in")
print("# AccumulateGrad hook order, from tests/golden/params/rtdetr_hooks.py (torch %s)" % torch.__version__)
print(" ".join(map(str, order)))
