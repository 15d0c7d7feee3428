/* backbone.c -- HGNetv2 (HGStem, HGBlock, LightConv) and Ultralytics' ResNet (ResNetBlock,
 * ResNetLayer): ultralytics/nn/modules/block.py. Conv and DWConv are in module.c. */
#include "trainer/nn/blocks.h"

#include "kernels/base.h" // CHECK

static ConvShape shape(int c1, int c2, int k, int s) {
    return (ConvShape){.c1 = c1, .c2 = c2, .k = k, .s = s, .pad = -1, .g = 1, .d = 1};
}

// ---- HGStem(c1, cm, c2): every conv ReLU ----
void hgstem_init(HGStem *m, Registry *r, const HGStemArgs *a) {
    int cm = a->cm, half = a->cm / 2;
    conv_init(&m->stem1, r, "stem1", shape(a->c1, cm, 3, 2), ACT_RELU);
    ConvShape s2a = shape(cm, half, 2, 1), s2b = shape(half, cm, 2, 1);
    s2a.pad = s2b.pad = 0;
    conv_init(&m->stem2a, r, "stem2a", s2a, ACT_RELU);
    conv_init(&m->stem2b, r, "stem2b", s2b, ACT_RELU);
    conv_init(&m->stem3, r, "stem3", shape(2 * cm, cm, 3, 2), ACT_RELU);
    conv_init(&m->stem4, r, "stem4", shape(cm, a->c2, 1, 1), ACT_RELU);
}

Tensor *hgstem_forward(HGStem *m, Tape *t, Tensor *x) {
    x = conv_forward(&m->stem1, t, x);
    x = op_pad2d(t, x, 0, 1, 0, 1);
    Tensor *x2 = conv_forward(&m->stem2a, t, x);
    x2 = op_pad2d(t, x2, 0, 1, 0, 1);
    x2 = conv_forward(&m->stem2b, t, x2);
    Pool2dParams pool = {.k_h = 2, .k_w = 2, .stride_h = 1, .stride_w = 1, .ceil_mode = true};
    Tensor *x1 = op_maxpool2d(t, x, pool);
    x = op_concat(t, (Tensor *[]){x1, x2}, 2, 1); // the pooled branch first
    x = conv_forward(&m->stem3, t, x);
    return conv_forward(&m->stem4, t, x);
}

// ---- HGBlock(c1, cm, c2, k, n, lightconv, shortcut) ----
void hgblock_init(HGBlock *m, Registry *r, const HGBlockArgs *a) {
    m->a = *a;
    m->m1 = registry_alloc(r, sizeof(Conv) * (size_t)a->n);
    m->m2 = a->light ? registry_alloc(r, sizeof(Conv) * (size_t)a->n) : NULL;
    for (int j = 0; j < a->n; j++) {
        int cin = j == 0 ? a->c1 : a->cm;
        registry_push(r, "m.%d", j);
        if (a->light) { // LightConv(cin, cm, k): conv1 1x1 no act, conv2 DWConv(cm, cm, k) ReLU
            conv_init(&m->m1[j], r, "conv1", shape(cin, a->cm, 1, 1), ACT_NONE);
            ConvShape dw = shape(a->cm, a->cm, a->k, 1);
            dw.g = a->cm;
            conv_init(&m->m2[j], r, "conv2", dw, ACT_RELU);
        } else {
            conv_init(&m->m1[j], r, NULL, shape(cin, a->cm, a->k, 1), ACT_RELU);
        }
        registry_pop(r);
    }
    conv_init(&m->sc, r, "sc", shape(a->c1 + a->n * a->cm, a->c2 / 2, 1, 1), ACT_RELU);
    conv_init(&m->ec, r, "ec", shape(a->c2 / 2, a->c2, 1, 1), ACT_RELU);
    m->add = a->shortcut && a->c1 == a->c2;
}

Tensor *hgblock_forward(HGBlock *m, Tape *t, Tensor *x) {
    int n = m->a.n;
    Tensor **ys = tape_alloc(t, sizeof(Tensor *) * (size_t)(n + 1));
    ys[0] = x;
    for (int j = 0; j < n; j++) {
        Tensor *y = conv_forward(&m->m1[j], t, ys[j]);
        if (m->m2) y = conv_forward(&m->m2[j], t, y);
        ys[j + 1] = y;
    }
    Tensor *y = op_concat(t, ys, n + 1, 1);
    y = conv_forward(&m->ec, t, conv_forward(&m->sc, t, y));
    return m->add ? op_add(t, y, x) : y;
}

// ---- ResNetBlock(c1, c2, s, e=4) and ResNetLayer(c1, c2, s, is_first, n, e=4) ----
static void resnetblock_init(ResNetBlock *b, Registry *r, int c1, int c2, int s) {
    int c3 = 4 * c2;
    conv_init(&b->cv1, r, "cv1", shape(c1, c2, 1, 1), ACT_SILU);
    ConvShape s2 = shape(c2, c2, 3, s);
    s2.pad = 1;
    conv_init(&b->cv2, r, "cv2", s2, ACT_SILU);
    conv_init(&b->cv3, r, "cv3", shape(c2, c3, 1, 1), ACT_NONE);
    b->has_shortcut = s != 1 || c1 != c3;
    if (b->has_shortcut) {
        registry_push(r, "shortcut");
        conv_init(&b->shortcut, r, "0", shape(c1, c3, 1, s), ACT_NONE);
        registry_pop(r);
    }
}

static Tensor *resnetblock_forward(ResNetBlock *b, Tape *t, Tensor *x) {
    Tensor *y = conv_forward(&b->cv3, t, conv_forward(&b->cv2, t, conv_forward(&b->cv1, t, x)));
    Tensor *s = b->has_shortcut ? conv_forward(&b->shortcut, t, x) : x;
    return op_relu_(t, op_add(t, y, s));
}

void resnetlayer_init(ResNetLayer *m, Registry *r, const ResNetLayerArgs *a) {
    m->a = *a;
    registry_push(r, "layer");
    if (a->is_first) {
        ConvShape s = shape(a->c1, a->c2, 7, 2);
        s.pad = 3;
        conv_init(&m->stem, r, "0", s, ACT_SILU);
    } else {
        m->blocks = registry_alloc(r, sizeof(ResNetBlock) * (size_t)a->n);
        for (int j = 0; j < a->n; j++) {
            registry_push(r, "%d", j);
            resnetblock_init(&m->blocks[j], r, j == 0 ? a->c1 : 4 * a->c2, a->c2,
                             j == 0 ? a->s : 1);
            registry_pop(r);
        }
    }
    registry_pop(r);
}

Tensor *resnetlayer_forward(ResNetLayer *m, Tape *t, Tensor *x) {
    if (m->a.is_first) {
        x = conv_forward(&m->stem, t, x);
        Pool2dParams pool = {
            .k_h = 3, .k_w = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1};
        return op_maxpool2d(t, x, pool);
    }
    for (int j = 0; j < m->a.n; j++)
        x = resnetblock_forward(&m->blocks[j], t, x);
    return x;
}
