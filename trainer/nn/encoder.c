/* encoder.c -- the hybrid encoder's blocks: AIFI (a post-norm transformer encoder layer over
 * the P5 tokens with a 2-D sin-cos position embedding) and RepC3 (RepConvs in training form).
 * ultralytics/nn/modules/{transformer,block,conv}.py. */
#include "trainer/nn/blocks.h"

#include <math.h>

#include "kernels/base.h" // CHECK

// ---- AIFI(c1, cm, num_heads) ----
void aifi_init(Aifi *m, Registry *r, const AifiArgs *a) {
    m->a = *a;
    mha_init(&m->ma, r, "ma", a->c1, a->n_heads);
    linear_init(&m->fc1, r, "fc1", a->c1, a->cm);
    linear_init(&m->fc2, r, "fc2", a->cm, a->c1);
    layernorm_init(&m->norm1, r, "norm1", a->c1);
    layernorm_init(&m->norm2, r, "norm2", a->c1);
}

// meshgrid(arange(w), arange(h), indexing="ij") flattened: token t has grid_w = t div h and
// grid_h = t mod h, so for a non-square map the "w" coordinate is not the column. Computed in
// fp32 like the PyTorch code: omega_i = 1 / 10000^(i/D), D = C/4.
void aifi_sincos_embedding(float *pos, int64_t h, int64_t w, int64_t c) {
    CHECK(c % 4 == 0, "AIFI: embed dim %lld must be divisible by 4", (long long)c);
    int64_t d = c / 4;
    for (int64_t t = 0; t < h * w; t++) {
        float a = (float)(t / h), b = (float)(t % h);
        float *p = pos + t * c;
        for (int64_t i = 0; i < d; i++) {
            float omega = 1.0f / powf(10000.0f, (float)i / (float)d);
            p[i] = sinf(a * omega);
            p[d + i] = cosf(a * omega);
            p[2 * d + i] = sinf(b * omega);
            p[3 * d + i] = cosf(b * omega);
        }
    }
}

Tensor *aifi_forward(Aifi *m, Tape *t, Tensor *x) {
    int64_t b = x->shape[0], c = x->shape[1], h = x->shape[2], w = x->shape[3];
    CHECK(x->ndim == 4 && c == m->a.c1, "AIFI: input has %lld channels, expected %d", (long long)c,
          m->a.c1);
    Tensor *pos = tensor_new(t->arena, 3, (int64_t[]){1, h * w, c});
    float *host_pos = tape_alloc(t, sizeof(float) * (size_t)(h * w * c)); // made here, uploaded
    aifi_sincos_embedding(host_pos, h, w, c);
    tensor_write(pos, host_pos);

    // (B,C,H,W) -> (B,HW,C), token = row * W + col
    Tensor *src = op_reshape(t, x, 3, (int64_t[]){b, c, h * w});
    src = op_permute(t, src, (int[]){0, 2, 1});

    // TransformerEncoderLayer.forward_post; the dropouts (p = 0) are the identity and, as in
    // ATen, record nothing.
    Tensor *q = op_add(t, src, pos);
    Tensor *src2 = mha_forward(&m->ma, t, q, q, src, NULL);
    src = layernorm_forward(&m->norm1, t, op_add(t, src, src2));
    src2 = linear_forward(&m->fc2, t, op_gelu(t, linear_forward(&m->fc1, t, src)));
    src = layernorm_forward(&m->norm2, t, op_add(t, src, src2));

    // (B,HW,C) -> (B,C,H,W)
    src = op_permute(t, src, (int[]){0, 2, 1});
    return op_reshape(t, src, 4, (int64_t[]){b, c, h, w});
}

// ---- RepC3(c1, c2, n, e) with RepConv(c_, c_) in training form (bn = None) ----
void repc3_init(RepC3 *m, Registry *r, const RepC3Args *a) {
    m->a = *a;
    int c_ = (int)(a->c2 * a->e);
    ConvShape s1 = {.c1 = a->c1, .c2 = c_, .k = 1, .s = 1, .pad = -1, .g = 1, .d = 1};
    conv_init(&m->cv1, r, "cv1", s1, ACT_SILU);
    conv_init(&m->cv2, r, "cv2", s1, ACT_SILU);
    m->rep1 = registry_alloc(r, sizeof(Conv) * (size_t)a->n);
    m->rep2 = registry_alloc(r, sizeof(Conv) * (size_t)a->n);
    for (int j = 0; j < a->n; j++) {
        registry_push(r, "m.%d", j);
        ConvShape k3 = {.c1 = c_, .c2 = c_, .k = 3, .s = 1, .pad = 1, .g = 1, .d = 1};
        ConvShape k1 = {.c1 = c_, .c2 = c_, .k = 1, .s = 1, .pad = 0, .g = 1, .d = 1};
        conv_init(&m->rep1[j], r, "conv1", k3, ACT_NONE);
        conv_init(&m->rep2[j], r, "conv2", k1, ACT_NONE);
        registry_pop(r);
    }
    m->has_cv3 = c_ != a->c2;
    if (m->has_cv3) {
        ConvShape s3 = {.c1 = c_, .c2 = a->c2, .k = 1, .s = 1, .pad = -1, .g = 1, .d = 1};
        conv_init(&m->cv3, r, "cv3", s3, ACT_SILU);
    }
}

// RepConv.forward is act(conv1(x) + conv2(x) + id_out) with id_out = 0 when bn is None. The
// "+ 0" is a pass-through node created right after the sum, with nothing created between
// them, so leaving it out changes no gradient and no hook order.
static Tensor *repconv_forward(Conv *conv1, Conv *conv2, Tape *t, Tensor *x) {
    Tensor *a = conv_forward(conv1, t, x);
    Tensor *b = conv_forward(conv2, t, x);
    return op_silu(t, op_add(t, a, b));
}

Tensor *repc3_forward(RepC3 *m, Tape *t, Tensor *x) {
    Tensor *y = conv_forward(&m->cv1, t, x);
    for (int j = 0; j < m->a.n; j++)
        y = repconv_forward(&m->rep1[j], &m->rep2[j], t, y);
    y = op_add(t, y, conv_forward(&m->cv2, t, x));
    return m->has_cv3 ? conv_forward(&m->cv3, t, y) : y;
}
