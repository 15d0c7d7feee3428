/* resample.c -- op_pad2d (F.pad with zeros on the last two dims) and op_upsample_nearest2d
 * (nn.Upsample(scale_factor=s, mode='nearest'), integer s). Kernels: kernels/cpu/resample.c. */
#include "trainer/ops/ops.h"

#include "kernels/base.h"

// ---- pad ----
typedef struct PadCtx {
    int left, right, top, bottom;
} PadCtx;

static void pad2d_backward(Tape *t, Node *n) {
    Tensor *x = n->in[0], *y = n->out[0];
    const PadCtx *c = n->ctx;
    const Backend *be = backend_need(x->dev);
    be->pad2d_bwd(&t->kc, tape_grad(t, x), y->grad, x->shape[0] * x->shape[1], x->shape[2],
                  x->shape[3], c->left, c->right, c->top, c->bottom);
}

static void pad2d_recompute(Tape *t, Node *n) {
    Tensor *x = n->in[0];
    const PadCtx *c = n->ctx;
    backend_need(x->dev)->pad2d_fwd(&t->kc, n->out[0]->data, x->data, x->shape[0] * x->shape[1],
                                    x->shape[2], x->shape[3], c->left, c->right, c->top, c->bottom);
}

static const OpInfo pad2d_info = {
    .name = "pad2d", .backward = pad2d_backward, .recompute = pad2d_recompute};

Tensor *op_pad2d(Tape *t, Tensor *x, int left, int right, int top, int bottom) {
    char xs[64];
    CHECK(x->ndim == 4, "op_pad2d: x %s: need (B,C,H,W)", tensor_shape_str(x, xs, 64));
    CHECK(left >= 0 && right >= 0 && top >= 0 && bottom >= 0,
          "op_pad2d: pads [%d,%d,%d,%d] must be >= 0 (cropping is not supported)", left, right,
          top, bottom);
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, pad2d_fwd);
    KERNEL_CHECK(be, pad2d_bwd);

    int64_t H = x->shape[2], W = x->shape[3], n_planes = x->shape[0] * x->shape[1];
    Tensor *y = tensor_4d(t->arena, x->shape[0], x->shape[1], top + H + bottom, left + W + right);
    be->pad2d_fwd(&t->kc, y->data, x->data, n_planes, H, W, left, right, top, bottom);
    Node *n = tape_record(t, &pad2d_info, &x, 1, &y, 1);
    if (n) {
        PadCtx *c = tape_alloc(t, sizeof *c);
        *c = (PadCtx){left, right, top, bottom};
        n->ctx = c;
    }
    return y;
}

// ---- nearest upsampling ----
typedef struct UpsampleCtx {
    int scale;
} UpsampleCtx;

static void upsample_nearest2d_backward(Tape *t, Node *n) {
    Tensor *x = n->in[0], *y = n->out[0];
    const UpsampleCtx *c = n->ctx;
    const Backend *be = backend_need(x->dev);
    be->upsample_nearest2d_bwd(&t->kc, tape_grad(t, x), y->grad, x->shape[0] * x->shape[1],
                               x->shape[2], x->shape[3], c->scale);
}

static void upsample_nearest2d_recompute(Tape *t, Node *n) {
    Tensor *x = n->in[0];
    backend_need(x->dev)->upsample_nearest2d_fwd(&t->kc, n->out[0]->data, x->data,
                                                 x->shape[0] * x->shape[1], x->shape[2],
                                                 x->shape[3], ((UpsampleCtx *)n->ctx)->scale);
}

static const OpInfo upsample_nearest2d_info = {.name = "upsample_nearest2d",
                                               .backward = upsample_nearest2d_backward,
                                               .recompute = upsample_nearest2d_recompute};

Tensor *op_upsample_nearest2d(Tape *t, Tensor *x, int scale) {
    char xs[64];
    CHECK(x->ndim == 4, "op_upsample_nearest2d: x %s: need (B,C,H,W)",
          tensor_shape_str(x, xs, 64));
    CHECK(scale >= 1, "op_upsample_nearest2d: scale %d must be >= 1", scale);
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, upsample_nearest2d_fwd);
    KERNEL_CHECK(be, upsample_nearest2d_bwd);

    int64_t H = x->shape[2], W = x->shape[3], n_planes = x->shape[0] * x->shape[1];
    Tensor *y = tensor_4d(t->arena, x->shape[0], x->shape[1], H * scale, W * scale);
    be->upsample_nearest2d_fwd(&t->kc, y->data, x->data, n_planes, H, W, scale);
    Node *n = tape_record(t, &upsample_nearest2d_info, &x, 1, &y, 1);
    if (n) {
        UpsampleCtx *c = tape_alloc(t, sizeof *c);
        c->scale = scale;
        n->ctx = c;
    }
    return y;
}
