/* pool.c -- op_maxpool2d: nn.MaxPool2d (dilation 1) with implicit -inf padding and ceil_mode.
 * Forward records the argmax of every window; backward routes dout there (the first maximum
 * in row-major order, as PyTorch's CPU kernel). Kernels: kernels/cpu/pool.c. */
#include "trainer/ops/ops.h"

#include "kernels/base.h"

// Saved for backward: the argmax offsets within each plane, (B,C,OH,OW), and the window.
typedef struct MaxPoolCtx {
    int32_t *idx;
    Pool2dParams p;
} MaxPoolCtx;

// PyTorch's pooling_output_shape: with ceil_mode the last window may hang over the edge, but
// one that would start inside the right/bottom padding is dropped.
static int64_t pool_out_size(int64_t n, int k, int s, int pad, bool ceil_mode) {
    int64_t num = n + 2 * pad - k + (ceil_mode ? s - 1 : 0);
    int64_t out = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1; // floor division
    if (ceil_mode && (out - 1) * s >= n + pad) out--;
    return out;
}

static void maxpool2d_backward(Tape *t, Node *n) {
    Tensor *x = n->in[0], *y = n->out[0];
    const MaxPoolCtx *c = n->ctx;
    const Backend *be = backend_need(x->dev);
    be->maxpool2d_bwd(&t->kc, tape_grad(t, x), y->grad, c->idx, x->shape[0] * x->shape[1],
                      x->shape[2], x->shape[3], y->shape[2], y->shape[3], c->p);
}

// The forward again (its argmax, written over the saved one, comes out the same).
static void maxpool2d_recompute(Tape *t, Node *n) {
    Tensor *x = n->in[0], *y = n->out[0];
    const MaxPoolCtx *c = n->ctx;
    backend_need(x->dev)->maxpool2d_fwd(&t->kc, y->data, c->idx, x->data, x->shape[0] * x->shape[1],
                                        x->shape[2], x->shape[3], y->shape[2], y->shape[3], c->p);
}

static const OpInfo maxpool2d_info = {
    .name = "maxpool2d", .backward = maxpool2d_backward, .recompute = maxpool2d_recompute};

Tensor *op_maxpool2d(Tape *t, Tensor *x, Pool2dParams p) {
    char xs[64];
    CHECK(x->ndim == 4, "op_maxpool2d: x %s: need (B,C,H,W)", tensor_shape_str(x, xs, 64));
    CHECK(p.k_h >= 1 && p.k_w >= 1 && p.stride_h >= 1 && p.stride_w >= 1,
          "op_maxpool2d: kernel %dx%d and stride %dx%d must be >= 1", p.k_h, p.k_w, p.stride_h,
          p.stride_w);
    CHECK(p.pad_h >= 0 && p.pad_w >= 0 && p.pad_h <= p.k_h / 2 && p.pad_w <= p.k_w / 2,
          "op_maxpool2d: pad %dx%d should be at most half of kernel %dx%d", p.pad_h, p.pad_w,
          p.k_h, p.k_w);
    int64_t H = x->shape[2], W = x->shape[3];
    int64_t OH = pool_out_size(H, p.k_h, p.stride_h, p.pad_h, p.ceil_mode);
    int64_t OW = pool_out_size(W, p.k_w, p.stride_w, p.pad_w, p.ceil_mode);
    CHECK(OH >= 1 && OW >= 1, "op_maxpool2d: x %s gives output %lldx%lld, too small",
          tensor_shape_str(x, xs, 64), (long long)OH, (long long)OW);
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, maxpool2d_fwd);
    KERNEL_CHECK(be, maxpool2d_bwd);

    int64_t n_planes = x->shape[0] * x->shape[1];
    Tensor *y = tensor_4d(t->arena, x->shape[0], x->shape[1], OH, OW);
    int32_t *idx = NULL;
    if (tape_needs_grad(t, &x, 1))
        idx = tape_alloc_data(t, sizeof(int32_t) * (size_t)(n_planes * OH * OW));
    be->maxpool2d_fwd(&t->kc, y->data, idx, x->data, n_planes, H, W, OH, OW, p);
    Node *n = tape_record(t, &maxpool2d_info, &x, 1, &y, 1);
    if (n) {
        MaxPoolCtx *c = tape_alloc(t, sizeof *c);
        c->idx = idx;
        c->p = p;
        n->ctx = c;
    }
    return y;
}
