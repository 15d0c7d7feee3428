/* activation.c -- unary elementwise ops: activations, inverse_sigmoid, dropout and the
 * loss-side unary ops (neg, exp, log, abs, pow, clamp, scale, add_scalar).
 * Kernels: kernels/cpu/elementwise.c. Each backward reads what PyTorch's formula reads
 * (the input, or the output for sigmoid and exp). */
#include "trainer/ops/ops.h"

#include "kernels/base.h" // CHECK, xmalloc
#include "trainer/rng.h"

typedef void (*UnaryFwd)(KernelCtx *kc, float *out, const float *inp, int64_t n);
// dinp += dout * f'(x), f' computed from `saved`: the forward's input x or its output y.
typedef void (*UnaryBwd)(KernelCtx *kc, float *dinp, const float *saved, const float *dout,
                         int64_t n);

// The ops whose kernels take no parameter: op_<name> runs fwd (be-><name>_fwd) through
// unary, and <name>_backward runs be-><name>_bwd through unary_backward. The kernel is CHECKed
// here, with KERNEL_CHECK's message.
static Tensor *unary(Tape *t, Tensor *x, UnaryFwd fwd, const OpInfo *info) {
    CHECK(fwd != NULL, "%s_fwd: no %s kernel (missing from the backend table)", info->name,
          backend_need(x->dev)->name);
    Tensor *y = tensor_like(t->arena, x);
    fwd(&t->kc, y->data, x->data, x->n);
    tape_record(t, info, &x, 1, &y, 1);
    return y;
}

static void unary_backward(Tape *t, Node *n, UnaryBwd bwd, const Tensor *saved) {
    Tensor *x = n->in[0], *y = n->out[0];
    CHECK(bwd != NULL, "%s_bwd: no %s kernel (missing from the backend table)", n->info->name,
          backend_need(x->dev)->name);
    float *dx = tape_grad_to_write(t, x); // the kernels WRITE (kernels/backend.h)
    bwd(&t->kc, dx, saved->data, y->grad, x->n);
    tape_grad_written(t, x, dx);
}

// Also relu_'s backward: then in[0]'s data holds relu(x), whose mask relu(x) > 0 is x > 0.
static void relu_backward(Tape *t, Node *n) {
    unary_backward(t, n, backend_need(n->in[0]->dev)->relu_bwd, n->in[0]);
}

static void silu_backward(Tape *t, Node *n) {
    unary_backward(t, n, backend_need(n->in[0]->dev)->silu_bwd, n->in[0]);
}

static void gelu_backward(Tape *t, Node *n) {
    unary_backward(t, n, backend_need(n->in[0]->dev)->gelu_bwd, n->in[0]);
}

static void sigmoid_backward(Tape *t, Node *n) {
    unary_backward(t, n, backend_need(n->in[0]->dev)->sigmoid_bwd, n->out[0]);
}

static void inverse_sigmoid_backward(Tape *t, Node *n) {
    unary_backward(t, n, backend_need(n->in[0]->dev)->inverse_sigmoid_bwd, n->in[0]);
}

static void exp_backward(Tape *t, Node *n) {
    unary_backward(t, n, backend_need(n->in[0]->dev)->exp_bwd, n->out[0]);
}

static void log_backward(Tape *t, Node *n) {
    unary_backward(t, n, backend_need(n->in[0]->dev)->log_bwd, n->in[0]);
}

static void abs_backward(Tape *t, Node *n) {
    unary_backward(t, n, backend_need(n->in[0]->dev)->abs_bwd, n->in[0]);
}

// relu_ over its input again (its output is a view of it); silu from its input.
static void relu__recompute(Tape *t, Node *n) {
    backend_need(n->in[0]->dev)->relu_fwd(&t->kc, n->in[0]->data, n->in[0]->data, n->in[0]->n);
}

static void silu_recompute(Tape *t, Node *n) {
    backend_need(n->in[0]->dev)->silu_fwd(&t->kc, n->out[0]->data, n->in[0]->data, n->in[0]->n);
}

static const OpInfo relu_info = {.name = "relu", .backward = relu_backward};
static const OpInfo relu__info = {
    .name = "relu", .backward = relu_backward, .recompute = relu__recompute, .in_place = true};
static const OpInfo silu_info = {
    .name = "silu", .backward = silu_backward, .recompute = silu_recompute};
static const OpInfo gelu_info = {.name = "gelu", .backward = gelu_backward};
static const OpInfo sigmoid_info = {.name = "sigmoid", .backward = sigmoid_backward};
static const OpInfo inverse_sigmoid_info = {.name = "inverse_sigmoid",
                                            .backward = inverse_sigmoid_backward};
static const OpInfo exp_info = {.name = "exp", .backward = exp_backward};
static const OpInfo log_info = {.name = "log", .backward = log_backward};
static const OpInfo abs_info = {.name = "abs", .backward = abs_backward};

Tensor *op_relu(Tape *t, Tensor *x) {
    return unary(t, x, backend_need(x->dev)->relu_fwd, &relu_info);
}

Tensor *op_relu_(Tape *t, Tensor *x) {
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, relu_fwd);
    CHECK(x->grad_fn || !x->requires_grad, "relu_ of a leaf that requires grad");
    be->relu_fwd(&t->kc, x->data, x->data, x->n);
    Tensor *y = tensor_view(t->arena, x->data, x->ndim, x->shape);
    tape_record(t, &relu__info, &x, 1, &y, 1);
    return y;
}

Tensor *op_silu(Tape *t, Tensor *x) {
    return unary(t, x, backend_need(x->dev)->silu_fwd, &silu_info);
}

Tensor *op_gelu(Tape *t, Tensor *x) {
    return unary(t, x, backend_need(x->dev)->gelu_fwd, &gelu_info);
}

Tensor *op_sigmoid(Tape *t, Tensor *x) {
    return unary(t, x, backend_need(x->dev)->sigmoid_fwd, &sigmoid_info);
}

Tensor *op_inverse_sigmoid(Tape *t, Tensor *x) {
    return unary(t, x, backend_need(x->dev)->inverse_sigmoid_fwd, &inverse_sigmoid_info);
}

Tensor *op_exp(Tape *t, Tensor *x) {
    return unary(t, x, backend_need(x->dev)->exp_fwd, &exp_info);
}

Tensor *op_log(Tape *t, Tensor *x) {
    return unary(t, x, backend_need(x->dev)->log_fwd, &log_info);
}

Tensor *op_abs(Tape *t, Tensor *x) {
    return unary(t, x, backend_need(x->dev)->abs_fwd, &abs_info);
}

// ---- scale, neg, add_scalar: gradients are axpy's ----
typedef struct ScaleCtx {
    float s;
} ScaleCtx;

static void scale_backward(Tape *t, Node *n) {
    Tensor *x = n->in[0], *y = n->out[0];
    const ScaleCtx *c = n->ctx;
    backend_need(x->dev)->axpy(&t->kc, tape_grad(t, x), c->s, y->grad, x->n);
}

static void scale_recompute(Tape *t, Node *n) {
    Tensor *x = n->in[0];
    backend_need(x->dev)->scale_fwd(&t->kc, n->out[0]->data, x->data, ((ScaleCtx *)n->ctx)->s,
                                    x->n);
}

static const OpInfo scale_info = {
    .name = "scale", .backward = scale_backward, .recompute = scale_recompute};
static const OpInfo neg_info = {.name = "neg", .backward = scale_backward};

static Tensor *scale_op(Tape *t, Tensor *x, float s, const OpInfo *info) {
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, scale_fwd);
    Tensor *y = tensor_like(t->arena, x);
    be->scale_fwd(&t->kc, y->data, x->data, s, x->n);
    Node *n = tape_record(t, info, &x, 1, &y, 1);
    if (n) {
        ScaleCtx *c = tape_alloc(t, sizeof *c);
        c->s = s;
        n->ctx = c;
    }
    return y;
}

Tensor *op_scale(Tape *t, Tensor *x, float s) {
    return scale_op(t, x, s, &scale_info);
}

// -x is exactly (-1) * x in IEEE arithmetic, and its gradient exactly -dout.
Tensor *op_neg(Tape *t, Tensor *x) {
    return scale_op(t, x, -1.0f, &neg_info);
}

static void add_scalar_backward(Tape *t, Node *n) {
    Tensor *x = n->in[0], *y = n->out[0];
    backend_need(x->dev)->axpy(&t->kc, tape_grad(t, x), 1.0f, y->grad, x->n);
}

static const OpInfo add_scalar_info = {.name = "add_scalar", .backward = add_scalar_backward};

Tensor *op_add_scalar(Tape *t, Tensor *x, float s) {
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, add_scalar_fwd);
    Tensor *y = tensor_like(t->arena, x);
    be->add_scalar_fwd(&t->kc, y->data, x->data, s, x->n);
    tape_record(t, &add_scalar_info, &x, 1, &y, 1);
    return y;
}

// ---- pow with a scalar exponent ----
static void pow_scalar_backward(Tape *t, Node *n) {
    Tensor *x = n->in[0], *y = n->out[0];
    const ScaleCtx *c = n->ctx;
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, pow_scalar_bwd);
    float *dx = tape_grad_to_write(t, x);
    be->pow_scalar_bwd(&t->kc, dx, x->data, y->grad, c->s, x->n);
    tape_grad_written(t, x, dx);
}

static const OpInfo pow_scalar_info = {.name = "pow_scalar", .backward = pow_scalar_backward};

Tensor *op_pow_scalar(Tape *t, Tensor *x, float exponent) {
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, pow_scalar_fwd);
    Tensor *y = tensor_like(t->arena, x);
    be->pow_scalar_fwd(&t->kc, y->data, x->data, exponent, x->n);
    Node *n = tape_record(t, &pow_scalar_info, &x, 1, &y, 1);
    if (n) {
        ScaleCtx *c = tape_alloc(t, sizeof *c);
        c->s = exponent;
        n->ctx = c;
    }
    return y;
}

// ---- clamp ----
typedef struct ClampCtx {
    float lo, hi;
} ClampCtx;

static void clamp_backward(Tape *t, Node *n) {
    Tensor *x = n->in[0], *y = n->out[0];
    const ClampCtx *c = n->ctx;
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, clamp_bwd);
    float *dx = tape_grad_to_write(t, x);
    be->clamp_bwd(&t->kc, dx, x->data, y->grad, c->lo, c->hi, x->n);
    tape_grad_written(t, x, dx);
}

static const OpInfo clamp_info = {.name = "clamp", .backward = clamp_backward};

Tensor *op_clamp(Tape *t, Tensor *x, float lo, float hi) {
    CHECK(!(lo > hi), "op_clamp: lo %g > hi %g", (double)lo, (double)hi);
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, clamp_fwd);
    Tensor *y = tensor_like(t->arena, x);
    be->clamp_fwd(&t->kc, y->data, x->data, lo, hi, x->n);
    Node *n = tape_record(t, &clamp_info, &x, 1, &y, 1);
    if (n) {
        ClampCtx *c = tape_alloc(t, sizeof *c);
        c->lo = lo;
        c->hi = hi;
        n->ctx = c;
    }
    return y;
}

// ---- dropout ----
// As PyTorch's CPU _dropout_impl: noise = bernoulli(1 - p) / (1 - p); y = x * noise; the
// gradient is dout * noise. The mask comes from one Rng seeded by `seed`, drawn in element
// order, so it is the same for any thread count and on any device.
static void dropout_backward(Tape *t, Node *n) {
    Tensor *x = n->in[0], *y = n->out[0], *mask = n->ctx;
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, mul_bwd);
    be->mul_bwd(&t->kc, tape_grad(t, x), NULL, y->grad, x->data, mask->data, x->ndim, x->shape,
                x->shape);
}

static const OpInfo dropout_info = {.name = "dropout", .backward = dropout_backward};

Tensor *op_dropout(Tape *t, Tensor *x, float p, uint64_t seed) {
    CHECK(p >= 0.0f && p <= 1.0f, "op_dropout: p = %g outside [0, 1]", (double)p);
    if (!t->training || p == 0.0f) return x;
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, mul_fwd);
    Tensor *mask = tensor_like(t->arena, x);
    if (x->n > 0) {
        // p == 1 keeps nothing; PyTorch then multiplies by zeros (no 0 * inf).
        float keep = (float)(1.0 - (double)p), scale = p < 1.0f ? 1.0f / keep : 0.0f;
        float *host = xmalloc(sizeof(float) * (size_t)x->n);
        Rng rng;
        rng_init(&rng, seed);
        for (int64_t i = 0; i < x->n; i++)
            host[i] = rng_uniform(&rng) < keep ? scale : 0.0f;
        be->to_device(mask->data, host, sizeof(float) * (size_t)x->n);
        free(host);
    }
    Tensor *y = tensor_like(t->arena, x);
    be->mul_fwd(&t->kc, y->data, x->data, mask->data, x->ndim, x->shape, x->shape);
    Node *n = tape_record(t, &dropout_info, &x, 1, &y, 1);
    if (n) n->ctx = mask;
    return y;
}
