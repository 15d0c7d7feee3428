/* softmax.c -- softmax over the last dim (the only one RT-DETR's heads and deformable
 * attention weights use). Backward: dx = y * (dy - <dy, y>) per row, from the saved output.
 * Kernels: kernels/cpu/reduce.c. */
#include "trainer/ops/ops.h"

#include "kernels/base.h" // CHECK

static void softmax_backward(Tape *t, Node *n) {
    Tensor *x = n->in[0], *y = n->out[0];
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, softmax_bwd);
    int64_t cols = tensor_dim(x, -1);
    be->softmax_bwd(&t->kc, tape_grad(t, x), y->data, y->grad, cols ? x->n / cols : 0, cols);
}

static const OpInfo softmax_info = {.name = "softmax", .backward = softmax_backward};

Tensor *op_softmax(Tape *t, Tensor *x, int dim) {
    CHECK(x->ndim >= 1 && (dim == -1 || dim == x->ndim - 1),
          "op_softmax: dim %d of a %d-d tensor; only the last dim is supported", dim, x->ndim);
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, softmax_fwd);
    int64_t cols = tensor_dim(x, -1);
    Tensor *y = tensor_like(t->arena, x);
    be->softmax_fwd(&t->kc, y->data, x->data, cols ? x->n / cols : 0, cols);
    tape_record(t, &softmax_info, &x, 1, &y, 1);
    return y;
}
