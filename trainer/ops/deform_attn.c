/* deform_attn.c -- op_msdeform_attn (Ultralytics multi_scale_deformable_attn_pytorch) and
 * op_grid_sample (bilinear, zeros, align_corners=False), which share one bilinear sampler in
 * kernels/cpu/deform_attn.c. Backward derivation: trainer/ops/README.md. */
#include "trainer/ops/ops.h"

#include "kernels/base.h"

// ---- multi-scale deformable attention ----
typedef struct MsDeformCtx {
    int n_levels;
    int64_t shapes[]; // (H_l, W_l) pairs, host memory, copied from the caller
} MsDeformCtx;

static void msdeform_attn_backward(Tape *t, Node *n) {
    Tensor *value = n->in[0], *loc = n->in[1], *aw = n->in[2], *out = n->out[0];
    const MsDeformCtx *c = n->ctx;
    const Backend *be = backend_need(value->dev);
    be->msdeform_attn_bwd(
        &t->kc, value->requires_grad ? tape_grad(t, value) : NULL,
        loc->requires_grad ? tape_grad(t, loc) : NULL, aw->requires_grad ? tape_grad(t, aw) : NULL,
        out->grad, value->data, loc->data, aw->data, c->shapes, value->shape[0], value->shape[1],
        (int)value->shape[2], (int)value->shape[3], c->n_levels, loc->shape[1], (int)loc->shape[4]);
}

static const OpInfo msdeform_attn_info = {.name = "msdeform_attn",
                                          .backward = msdeform_attn_backward};

Tensor *op_msdeform_attn(Tape *t, Tensor *value, const int64_t *shapes, int n_levels,
                         Tensor *sampling_locations, Tensor *attention_weights) {
    Tensor *loc = sampling_locations, *aw = attention_weights;
    char vs[64], ls[64], as[64];
    CHECK(value->ndim == 4 && loc->ndim == 6 && aw->ndim == 5 && loc->shape[5] == 2 &&
              loc->shape[0] == value->shape[0] && loc->shape[2] == value->shape[2] &&
              loc->shape[3] == n_levels && aw->shape[0] == loc->shape[0] &&
              aw->shape[1] == loc->shape[1] && aw->shape[2] == loc->shape[2] &&
              aw->shape[3] == loc->shape[3] && aw->shape[4] == loc->shape[4],
          "op_msdeform_attn: value %s, sampling_locations %s, attention_weights %s for %d "
          "levels: need (B,N,NH,D), (B,Lq,NH,L,P,2), (B,Lq,NH,L,P)",
          tensor_shape_str(value, vs, 64), tensor_shape_str(loc, ls, 64),
          tensor_shape_str(aw, as, 64), n_levels);
    int64_t tokens = 0;
    for (int l = 0; l < n_levels; l++) {
        CHECK(shapes[2 * l] > 0 && shapes[2 * l + 1] > 0, "op_msdeform_attn: level %d is %lldx%lld",
              l, (long long)shapes[2 * l], (long long)shapes[2 * l + 1]);
        tokens += shapes[2 * l] * shapes[2 * l + 1];
    }
    CHECK(tokens == value->shape[1], "op_msdeform_attn: levels hold %lld tokens, value %s",
          (long long)tokens, tensor_shape_str(value, vs, 64));
    CHECK(loc->dev == value->dev && aw->dev == value->dev, "op_msdeform_attn: mixed devices");
    const Backend *be = backend_need(value->dev);
    KERNEL_CHECK(be, msdeform_attn_fwd);
    KERNEL_CHECK(be, msdeform_attn_bwd);

    int64_t B = value->shape[0], N = value->shape[1], Lq = loc->shape[1];
    int NH = (int)value->shape[2], D = (int)value->shape[3], P = (int)loc->shape[4];
    Tensor *out = tensor_3d(t->arena, B, Lq, (int64_t)NH * D);
    be->msdeform_attn_fwd(&t->kc, out->data, value->data, loc->data, aw->data, shapes, B, N, NH, D,
                          n_levels, Lq, P);

    Node *n = tape_record(t, &msdeform_attn_info, (Tensor *[]){value, loc, aw}, 3, &out, 1);
    if (n) {
        size_t bytes = sizeof(MsDeformCtx) + sizeof(int64_t) * 2 * (size_t)n_levels;
        MsDeformCtx *c = tape_alloc(t, bytes);
        c->n_levels = n_levels;
        memcpy(c->shapes, shapes, sizeof(int64_t) * 2 * (size_t)n_levels);
        n->ctx = c;
    }
    return out;
}

// ---- grid_sample ----
static void grid_sample_backward(Tape *t, Node *n) {
    Tensor *x = n->in[0], *grid = n->in[1], *out = n->out[0];
    const Backend *be = backend_need(x->dev);
    be->grid_sample_bwd(&t->kc, x->requires_grad ? tape_grad(t, x) : NULL,
                        grid->requires_grad ? tape_grad(t, grid) : NULL, out->grad, x->data,
                        grid->data, x->shape[0], x->shape[1], x->shape[2], x->shape[3],
                        grid->shape[1], grid->shape[2]);
}

static const OpInfo grid_sample_info = {.name = "grid_sample", .backward = grid_sample_backward};

Tensor *op_grid_sample(Tape *t, Tensor *x, Tensor *grid) {
    char xs[64], gs[64];
    CHECK(x->ndim == 4 && grid->ndim == 4 && grid->shape[0] == x->shape[0] && grid->shape[3] == 2,
          "op_grid_sample: x %s, grid %s: need (B,C,H,W), (B,Ho,Wo,2)", tensor_shape_str(x, xs, 64),
          tensor_shape_str(grid, gs, 64));
    CHECK(x->dev == grid->dev, "op_grid_sample: mixed devices");
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, grid_sample_fwd);
    KERNEL_CHECK(be, grid_sample_bwd);
    int64_t B = x->shape[0], C = x->shape[1], Ho = grid->shape[1], Wo = grid->shape[2];
    Tensor *out = tensor_4d(t->arena, B, C, Ho, Wo);
    be->grid_sample_fwd(&t->kc, out->data, x->data, grid->data, B, C, x->shape[2], x->shape[3], Ho,
                        Wo);
    tape_record(t, &grid_sample_info, (Tensor *[]){x, grid}, 2, &out, 1);
    return out;
}
