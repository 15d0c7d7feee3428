/* attention.c -- op_mha_core: F.multi_head_attention_forward (torch 2.x, need_weights=True
 * path, dropout 0) for batch-first tensors, up to and excluding out_proj. Heads are column
 * blocks of the (B, L, E) projections, so the per-(batch, head) products need no permutes.
 * Kernels: gemm (kernels/cpu/gemm.c) for the projections; bias rows and the attention itself
 * (scores, masked softmax, values; kernels/cpu/attention.c). Backward derivation:
 * trainer/ops/README.md. */
#include <math.h>

#include "trainer/ops/ops.h"

#include "kernels/base.h"

// Saved for backward (step arena): the projections after scaling (qs = q * scale, what the
// score GEMM read) and the mask. Not the attention probabilities: attention_bwd computes them
// again, bit for bit (kernels/backend.h), because they are the largest thing the forward
// would hold (rtdetr-l's decoder self-attention, 500 queries: 16 MB a layer; the step's saved
// contexts went from 128 MB to 36) and cheap to compute again (the scores of its six decoder
// layers: ~1.5 GFLOP of the step's 212).
typedef struct MhaCtx {
    float *qs;           // (B, Lq, E)
    float *k, *v;        // (B, Lk, E)
    const uint8_t *mask; // (Lq, Lk) on the device, or NULL
    int n_heads;
    float scale; // sqrt(1 / D)
} MhaCtx;

// y (M, E) = x (M, E) @ w_rows^T + b_rows, w_rows the E rows of in_proj_weight starting at
// row `block` * E (PyTorch chunks in_proj_weight/in_proj_bias into q, k, v blocks).
static void project(Tape *t, const Backend *be, float *y, const float *x, const Tensor *w,
                    const Tensor *b, int block, int64_t M, int64_t E) {
    be->bias_rows_fwd(&t->kc, y, b->data + block * E, M, E);
    be->gemm(&t->kc, false, true, M, E, E, 1.0f, x, E, w->data + block * E * E, E, 1.0f, y, E);
}

// The adjoint of project for dy (M, E): dx += dy @ w_rows, dw_rows += dy^T @ x,
// db_rows += column sums of dy.
static void project_backward(Tape *t, const Backend *be, const float *dy, Tensor *x, Tensor *w,
                             Tensor *b, int block, int64_t M, int64_t E) {
    if (x->requires_grad)
        be->gemm(&t->kc, false, false, M, E, E, 1.0f, dy, E, w->data + block * E * E, E, 1.0f,
                 tape_grad(t, x), E);
    if (w->requires_grad)
        be->gemm(&t->kc, true, false, E, E, M, 1.0f, dy, E, x->data, E, 1.0f,
                 tape_grad(t, w) + block * E * E, E);
    if (b->requires_grad) be->bias_rows_bwd(&t->kc, tape_grad(t, b) + block * E, dy, M, E);
}

static void mha_core_backward(Tape *t, Node *n) {
    Tensor *query = n->in[0], *key = n->in[1], *value = n->in[2];
    Tensor *bias = n->in[3], *w = n->in[4], *out = n->out[0];
    const MhaCtx *c = n->ctx;
    const Backend *be = backend_need(query->dev);
    int64_t B = query->shape[0], Lq = query->shape[1], E = query->shape[2], Lk = key->shape[1];

    // the backward's temporaries (tape_take: released buffers of this step where they fit)
    const int64_t n_q = B * Lq * E, n_k = B * Lk * E;
    float *dqs = tape_take(t, n_q), *dq = tape_take(t, n_q);
    float *dk = tape_take(t, n_k), *dv = tape_take(t, n_k);
    be->fill(&t->kc, dqs, 0.0f, n_q);
    be->fill(&t->kc, dk, 0.0f, n_k);
    be->fill(&t->kc, dv, 0.0f, n_k);
    be->attention_bwd(&t->kc, dqs, dk, dv, out->grad, c->qs, c->k, c->v, c->mask, B, c->n_heads,
                      Lq, Lk, E);
    // qs = q * scale, so dq = dqs * scale, the product rounded once as in PyTorch
    be->scale_fwd(&t->kc, dq, dqs, c->scale, n_q);

    project_backward(t, be, dq, query, w, bias, 0, B * Lq, E);
    project_backward(t, be, dk, key, w, bias, 1, B * Lk, E);
    project_backward(t, be, dv, value, w, bias, 2, B * Lk, E);
    tape_give(t, dv, n_k);
    tape_give(t, dk, n_k);
    tape_give(t, dq, n_q);
    tape_give(t, dqs, n_q);
}

static const OpInfo mha_core_info = {.name = "mha_core", .backward = mha_core_backward};

Tensor *op_mha_core(Tape *t, Tensor *query, Tensor *key, Tensor *value, Tensor *in_proj_weight,
                    Tensor *in_proj_bias, int n_heads, const uint8_t *attn_mask) {
    char qs_[64], ks[64], vs[64], ws[64];
    CHECK(query->ndim == 3 && key->ndim == 3 && tensor_same_shape(key, value) &&
              query->shape[0] == key->shape[0] && query->shape[2] == key->shape[2],
          "op_mha_core: query %s, key %s, value %s: need (B,Lq,E), (B,Lk,E), (B,Lk,E)",
          tensor_shape_str(query, qs_, 64), tensor_shape_str(key, ks, 64),
          tensor_shape_str(value, vs, 64));
    int64_t B = query->shape[0], Lq = query->shape[1], E = query->shape[2], Lk = key->shape[1];
    CHECK(in_proj_weight->ndim == 2 && in_proj_weight->shape[0] == 3 * E &&
              in_proj_weight->shape[1] == E && in_proj_bias->ndim == 1 &&
              in_proj_bias->shape[0] == 3 * E,
          "op_mha_core: in_proj_weight %s, in_proj_bias of %lld for E = %lld: need (3E,E), (3E)",
          tensor_shape_str(in_proj_weight, ws, 64), (long long)in_proj_bias->n, (long long)E);
    CHECK(n_heads >= 1 && E % n_heads == 0, "op_mha_core: E = %lld is not divisible by %d heads",
          (long long)E, n_heads);
    CHECK(key->dev == query->dev && value->dev == query->dev && in_proj_weight->dev == query->dev &&
              in_proj_bias->dev == query->dev,
          "op_mha_core: mixed devices");
    const Backend *be = backend_need(query->dev);
    KERNEL_CHECK(be, bias_rows_fwd);
    KERNEL_CHECK(be, bias_rows_bwd);
    KERNEL_CHECK(be, attention_fwd);
    KERNEL_CHECK(be, attention_bwd);
    KERNEL_CHECK(be, scale_fwd);
    int NH = n_heads;
    int64_t D = E / NH, LL = Lq * Lk;
    // math.sqrt(1.0 / float(E)) in Python's double, applied to a float tensor as a float
    float scale = (float)sqrt(1.0 / (double)D);

    MhaCtx c = {.n_heads = NH, .scale = scale};
    c.qs = arena_alloc_data(t->arena, sizeof(float) * (size_t)(B * Lq * E));
    c.k = arena_alloc_data(t->arena, sizeof(float) * (size_t)(B * Lk * E));
    c.v = arena_alloc_data(t->arena, sizeof(float) * (size_t)(B * Lk * E));

    float *q = tape_take(t, B * Lq * E);
    project(t, be, q, query->data, in_proj_weight, in_proj_bias, 0, B * Lq, E);
    be->scale_fwd(&t->kc, c.qs, q, scale, B * Lq * E); // q * scale, rounded once
    tape_give(t, q, B * Lq * E);
    project(t, be, c.k, key->data, in_proj_weight, in_proj_bias, 1, B * Lk, E);
    project(t, be, c.v, value->data, in_proj_weight, in_proj_bias, 2, B * Lk, E);

    // The mask goes to the tensors' device; the kernels read it there.
    uint8_t *mask = NULL;
    if (attn_mask) {
        mask = arena_alloc_data(t->arena, (size_t)LL);
        be->to_device(mask, attn_mask, (size_t)LL);
    }

    c.mask = mask;
    Tensor *out = tensor_3d(t->arena, B, Lq, E);
    be->attention_fwd(&t->kc, out->data, c.qs, c.k, c.v, mask, B, NH, Lq, Lk, E);

    Node *n =
        tape_record(t, &mha_core_info,
                    (Tensor *[]){query, key, value, in_proj_bias, in_proj_weight}, 5, &out, 1);
    if (n) {
        MhaCtx *saved = tape_alloc(t, sizeof *saved);
        *saved = c;
        n->ctx = saved;
    }
    return out;
}
