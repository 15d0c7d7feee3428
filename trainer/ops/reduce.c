/* reduce.c -- sum and mean, over everything (to a scalar) or over one dim (keepdim or not).
 * A reduction over dim d views x as (outer, x.shape[d], inner). Kernels: kernels/cpu/reduce.c. */
#include "trainer/ops/ops.h"

#include "kernels/base.h" // CHECK

typedef struct ReduceCtx {
    int64_t outer, r, inner;
} ReduceCtx;

static void sum_backward(Tape *t, Node *n) {
    Tensor *x = n->in[0], *y = n->out[0];
    const ReduceCtx *c = n->ctx;
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, sum_dim_bwd);
    be->sum_dim_bwd(&t->kc, tape_grad(t, x), y->grad, c->outer, c->r, c->inner);
}

static void mean_backward(Tape *t, Node *n) {
    Tensor *x = n->in[0], *y = n->out[0];
    const ReduceCtx *c = n->ctx;
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, mean_dim_bwd);
    be->mean_dim_bwd(&t->kc, tape_grad(t, x), y->grad, c->outer, c->r, c->inner);
}

static const OpInfo sum_info = {.name = "sum", .backward = sum_backward};
static const OpInfo mean_info = {.name = "mean", .backward = mean_backward};
static const OpInfo sum_dim_info = {.name = "sum_dim", .backward = sum_backward};
static const OpInfo mean_dim_info = {.name = "mean_dim", .backward = mean_backward};

// y = reduce(x) viewed as (outer, r, inner) -> y (shape given).
static Tensor *reduce(Tape *t, Tensor *x, int64_t outer, int64_t r, int64_t inner, int ndim,
                      const int64_t *shape, bool mean, const OpInfo *info) {
    const Backend *be = backend_need(x->dev);
    Tensor *y = tensor_new(t->arena, ndim, shape);
    if (mean) {
        KERNEL_CHECK(be, mean_dim_fwd);
        be->mean_dim_fwd(&t->kc, y->data, x->data, outer, r, inner);
    } else {
        KERNEL_CHECK(be, sum_dim_fwd);
        be->sum_dim_fwd(&t->kc, y->data, x->data, outer, r, inner);
    }
    Node *n = tape_record(t, info, &x, 1, &y, 1);
    if (n) {
        ReduceCtx *c = tape_alloc(t, sizeof *c);
        *c = (ReduceCtx){outer, r, inner};
        n->ctx = c;
    }
    return y;
}

Tensor *op_sum(Tape *t, Tensor *x) {
    return reduce(t, x, 1, x->n, 1, 0, NULL, false, &sum_info);
}

// The mean of no elements is NaN (0 / 0), as in PyTorch.
Tensor *op_mean(Tape *t, Tensor *x) {
    return reduce(t, x, 1, x->n, 1, 0, NULL, true, &mean_info);
}

static Tensor *reduce_dim(Tape *t, Tensor *x, int dim, bool keepdim, bool mean,
                          const OpInfo *info) {
    CHECK(dim >= -x->ndim && dim < x->ndim, "op_%s: dim %d out of range for a %d-d tensor",
          info->name, dim, x->ndim);
    int d = dim < 0 ? dim + x->ndim : dim;
    int64_t outer = 1, inner = 1, shape[TENSOR_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < x->ndim; i++) {
        if (i < d) outer *= x->shape[i];
        if (i > d) inner *= x->shape[i];
        if (i != d)
            shape[nd++] = x->shape[i];
        else if (keepdim)
            shape[nd++] = 1;
    }
    return reduce(t, x, outer, x->shape[d], inner, nd, shape, mean, info);
}

Tensor *op_sum_dim(Tape *t, Tensor *x, int dim, bool keepdim) {
    return reduce_dim(t, x, dim, keepdim, false, &sum_dim_info);
}

Tensor *op_mean_dim(Tape *t, Tensor *x, int dim, bool keepdim) {
    return reduce_dim(t, x, dim, keepdim, true, &mean_dim_info);
}
