/* conv.c -- op_conv2d: nn.Conv2d / F.conv2d with stride, symmetric zero padding, dilation and
 * groups. Edges are (x, w, bias) as ATen's convolution_backward lists them, bias NULL when
 * absent. Kernels: kernels/cpu/conv.c (depthwise direct, pointwise GEMM, im2col + GEMM). */
#include "trainer/ops/ops.h"

#include "kernels/base.h"

static void conv2d_backward(Tape *t, Node *n) {
    Tensor *x = n->in[0], *w = n->in[1], *bias = n->in[2], *y = n->out[0];
    const Conv2dParams *p = n->ctx;
    const Backend *be = backend_need(x->dev);
    be->conv2d_bwd(&t->kc, x->requires_grad ? tape_grad(t, x) : NULL,
                   w->requires_grad ? tape_grad(t, w) : NULL,
                   bias && bias->requires_grad ? tape_grad(t, bias) : NULL, y->grad, x->data,
                   w->data, x->shape[0], x->shape[1], x->shape[2], x->shape[3], w->shape[0],
                   y->shape[2], y->shape[3], (int)w->shape[2], (int)w->shape[3], *p);
}

static const OpInfo conv2d_info = {.name = "conv2d", .backward = conv2d_backward};

Tensor *op_conv2d(Tape *t, Tensor *x, Tensor *w, Tensor *bias, Conv2dParams p) {
    char xs[64], ws[64];
    CHECK(x->ndim == 4 && w->ndim == 4, "op_conv2d: x %s, w %s: need (B,C,H,W), (OC,C/g,KH,KW)",
          tensor_shape_str(x, xs, 64), tensor_shape_str(w, ws, 64));
    int64_t B = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    int64_t OC = w->shape[0];
    int KH = (int)w->shape[2], KW = (int)w->shape[3];
    CHECK(p.groups >= 1 && C % p.groups == 0 && OC % p.groups == 0 && w->shape[1] == C / p.groups,
          "op_conv2d: x %s, w %s with groups %d: C and OC must be multiples of groups and "
          "w.shape[1] = C/groups", xs, ws, p.groups);
    CHECK(p.stride_h >= 1 && p.stride_w >= 1 && p.dil_h >= 1 && p.dil_w >= 1 && p.pad_h >= 0 &&
              p.pad_w >= 0,
          "op_conv2d: stride %dx%d, dilation %dx%d must be >= 1 and padding %dx%d >= 0",
          p.stride_h, p.stride_w, p.dil_h, p.dil_w, p.pad_h, p.pad_w);
    int64_t OH = (H + 2 * p.pad_h - (int64_t)p.dil_h * (KH - 1) - 1) / p.stride_h + 1;
    int64_t OW = (W + 2 * p.pad_w - (int64_t)p.dil_w * (KW - 1) - 1) / p.stride_w + 1;
    CHECK(H + 2 * p.pad_h >= (int64_t)p.dil_h * (KH - 1) + 1 &&
              W + 2 * p.pad_w >= (int64_t)p.dil_w * (KW - 1) + 1,
          "op_conv2d: x %s padded by %dx%d is smaller than the dilated kernel of w %s", xs,
          p.pad_h, p.pad_w, ws);
    CHECK(!bias || (bias->ndim == 1 && bias->shape[0] == OC), "op_conv2d: bias %s for w %s",
          tensor_shape_str(bias, xs, 64), ws);
    CHECK(w->dev == x->dev && (!bias || bias->dev == x->dev), "op_conv2d: mixed devices");
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, conv2d_fwd);
    KERNEL_CHECK(be, conv2d_bwd);

    Tensor *y = tensor_4d(t->arena, B, OC, OH, OW);
    be->conv2d_fwd(&t->kc, y->data, x->data, w->data, bias ? bias->data : NULL, B, C, H, W, OC,
                   OH, OW, KH, KW, p);
    Node *n = tape_record(t, &conv2d_info, (Tensor *[]){x, w, bias}, 3, &y, 1);
    if (n) {
        Conv2dParams *saved = tape_alloc(t, sizeof *saved);
        *saved = p;
        n->ctx = saved;
    }
    return y;
}
