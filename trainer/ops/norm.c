/* norm.c -- LayerNorm (last dim) and BatchNorm2d (train: batch statistics and the running
 * buffer update; eval: running statistics), as PyTorch's native_layer_norm and
 * native_batch_norm. Edges: x, weight, bias. Kernels: kernels/cpu/norm.c. */
#include "trainer/ops/ops.h"

#include <stdio.h>
#include <stdlib.h>

#include "kernels/base.h" // CHECK

static float *grad_or_null(Tape *t, Tensor *x) {
    return x && x->requires_grad ? tape_grad(t, x) : NULL;
}

static const float *data_or_null(const Tensor *x) {
    return x ? x->data : NULL;
}

// ---- LayerNorm ----
typedef struct LayerNormCtx {
    Tensor *mean, *rstd; // (rows)
    float eps;
} LayerNormCtx;

static void layernorm_backward(Tape *t, Node *n) {
    Tensor *x = n->in[0], *w = n->in[1], *b = n->in[2], *y = n->out[0];
    const LayerNormCtx *c = n->ctx;
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, layernorm_bwd);
    int64_t E = tensor_dim(x, -1);
    be->layernorm_bwd(&t->kc, grad_or_null(t, x), grad_or_null(t, w), grad_or_null(t, b), y->grad,
                      x->data, c->mean->data, c->rstd->data, data_or_null(w), E ? x->n / E : 0, E);
}

// The forward again (its mean and rstd, written over the saved ones, come out the same).
static void layernorm_recompute(Tape *t, Node *n) {
    Tensor *x = n->in[0], *w = n->in[1], *b = n->in[2];
    const LayerNormCtx *c = n->ctx;
    int64_t E = tensor_dim(x, -1);
    backend_need(x->dev)->layernorm_fwd(&t->kc, n->out[0]->data, c->mean->data, c->rstd->data,
                                        x->data, data_or_null(w), data_or_null(b), E ? x->n / E : 0,
                                        E, c->eps);
}

static const OpInfo layernorm_info = {
    .name = "layernorm", .backward = layernorm_backward, .recompute = layernorm_recompute};

// A (E) parameter or NULL.
static void check_param(const char *op, const char *what, const Tensor *p, const Tensor *x,
                        int64_t size) {
    if (!p) return;
    CHECK(p->ndim == 1 && p->shape[0] == size, "%s: %s has %lld elements (%d-d), want (%lld)", op,
          what, (long long)p->n, p->ndim, (long long)size);
    CHECK(p->dev == x->dev, "%s: %s on another device than x", op, what);
}

Tensor *op_layernorm(Tape *t, Tensor *x, Tensor *weight, Tensor *bias, float eps) {
    CHECK(x->ndim >= 1, "op_layernorm: x is a scalar");
    int64_t E = tensor_dim(x, -1), rows = E ? x->n / E : 0;
    check_param("op_layernorm", "weight", weight, x, E);
    check_param("op_layernorm", "bias", bias, x, E);
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, layernorm_fwd);
    Tensor *y = tensor_like(t->arena, x);
    Tensor *mean = tensor_1d(t->arena, rows), *rstd = tensor_1d(t->arena, rows);
    be->layernorm_fwd(&t->kc, y->data, mean->data, rstd->data, x->data, data_or_null(weight),
                      data_or_null(bias), rows, E, eps);
    Node *n = tape_record(t, &layernorm_info, (Tensor *[]){x, weight, bias}, 3, &y, 1);
    if (n) {
        LayerNormCtx *c = tape_alloc(t, sizeof *c);
        *c = (LayerNormCtx){mean, rstd, eps};
        n->ctx = c;
    }
    return y;
}

// ---- BatchNorm2d ----
typedef struct BatchNormCtx {
    Tensor *save_mean, *save_invstd; // (C): what the forward normalised with
    bool training;                   // the forward's mode (decides the backward formula)
    BnAct act;                       // the activation the output went through
} BatchNormCtx;

static void batchnorm2d_backward(Tape *t, Node *n) {
    Tensor *x = n->in[0], *w = n->in[1], *b = n->in[2], *y = n->out[0];
    const BatchNormCtx *c = n->ctx;
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, batchnorm_bwd);
    float *dx = x->requires_grad ? tape_grad_to_write(t, x) : NULL; // WRITTEN by the kernel
    be->batchnorm_bwd(&t->kc, dx, grad_or_null(t, w), grad_or_null(t, b), y->grad, x->data,
                      data_or_null(w), data_or_null(b), c->save_mean->data, c->save_invstd->data,
                      x->shape[0], x->shape[1], x->shape[2] * x->shape[3], c->training, c->act);
    if (dx) tape_grad_written(t, x, dx);
}

// Either mode's output from its input and saved statistics (tape_drop).
static void batchnorm2d_recompute(Tape *t, Node *n) {
    Tensor *x = n->in[0], *w = n->in[1], *b = n->in[2], *y = n->out[0];
    const BatchNormCtx *c = n->ctx;
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, batchnorm_apply);
    be->batchnorm_apply(&t->kc, y->data, x->data, data_or_null(w), data_or_null(b),
                        c->save_mean->data, c->save_invstd->data, x->shape[0], x->shape[1],
                        x->shape[2] * x->shape[3], c->act);
}

static const OpInfo batchnorm2d_info = {
    .name = "batchnorm2d", .backward = batchnorm2d_backward, .recompute = batchnorm2d_recompute};

// The double a user wrote for this float (1e-3f -> 1e-3): the shortest decimal that rounds
// back to it. PyTorch's train-mode invstd adds eps as a double (a Python float); the widened
// float would move it in the last bits. (Momentum it casts to float, as we store it.)
static double decimal_of(float f) {
    char buf[32];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        double d = strtod(buf, NULL);
        if ((float)d == f) return d;
    }
    return (double)f;
}

Tensor *op_batchnorm2d(Tape *t, Tensor *x, Tensor *weight, Tensor *bias, BatchNormState *st) {
    return op_batchnorm2d_act(t, x, weight, bias, st, BN_ACT_NONE);
}

Tensor *op_batchnorm2d_act(Tape *t, Tensor *x, Tensor *weight, Tensor *bias, BatchNormState *st,
                           BnAct act) {
    char xs[64];
    CHECK(x->ndim == 4, "op_batchnorm2d: x [%s] is not (B,C,H,W)", tensor_shape_str(x, xs, 64));
    int64_t B = x->shape[0], C = x->shape[1], HW = x->shape[2] * x->shape[3];
    check_param("op_batchnorm2d", "weight", weight, x, C);
    check_param("op_batchnorm2d", "bias", bias, x, C);
    CHECK(st && st->running_mean && st->running_var, "op_batchnorm2d: no running buffers");
    check_param("op_batchnorm2d", "running_mean", st->running_mean, x, C);
    check_param("op_batchnorm2d", "running_var", st->running_var, x, C);
    const Backend *be = backend_need(x->dev);
    Tensor *y = tensor_like(t->arena, x);
    Tensor *save_mean = tensor_1d(t->arena, C), *save_invstd = tensor_1d(t->arena, C);
    double eps = decimal_of(st->eps);
    if (t->training) {
        CHECK(B * HW > 1,
              "op_batchnorm2d: expected more than 1 value per channel when training, x [%s]",
              tensor_shape_str(x, xs, 64));
        KERNEL_CHECK(be, batchnorm_train_fwd);
        be->batchnorm_train_fwd(&t->kc, y->data, save_mean->data, save_invstd->data,
                                st->running_mean->data, st->running_var->data, x->data,
                                data_or_null(weight), data_or_null(bias), B, C, HW, st->momentum,
                                eps, act);
        st->num_batches_tracked++;
    } else {
        KERNEL_CHECK(be, batchnorm_eval_fwd);
        be->batchnorm_eval_fwd(&t->kc, y->data, save_mean->data, save_invstd->data, x->data,
                               st->running_mean->data, st->running_var->data, data_or_null(weight),
                               data_or_null(bias), B, C, HW, eps, act);
    }
    Node *n = tape_record(t, &batchnorm2d_info, (Tensor *[]){x, weight, bias}, 3, &y, 1);
    if (n) {
        BatchNormCtx *c = tape_alloc(t, sizeof *c);
        *c = (BatchNormCtx){save_mean, save_invstd, t->training, act};
        n->ctx = c;
    }
    return y;
}
