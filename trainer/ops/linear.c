/* linear.c -- op_linear (PyTorch's addmm(bias, x, w.t()) on x flattened to rows), op_matmul
 * and op_bmm, all through the backend's gemm/gemm_batched. Backward accumulates with
 * beta = 1 straight into the gradient buffers. Kernels: kernels/cpu/{gemm,attention}.c. */
#include "trainer/ops/ops.h"

#include "kernels/base.h"

// ---- linear ----
static void linear_backward(Tape *t, Node *n) {
    Tensor *bias = n->in[0], *x = n->in[1], *w = n->in[2], *y = n->out[0];
    const Backend *be = backend_need(x->dev);
    int64_t out_f = w->shape[0], in_f = w->shape[1], M = x->n / in_f;
    const float *dy = y->grad;
    if (bias && bias->requires_grad) {
        KERNEL_CHECK(be, bias_rows_bwd);
        be->bias_rows_bwd(&t->kc, tape_grad(t, bias), dy, M, out_f);
    }
    // dx (M, IN) += dy (M, OUT) @ w (OUT, IN)
    if (x->requires_grad)
        be->gemm(&t->kc, false, false, M, in_f, out_f, 1.0f, dy, out_f, w->data, in_f, 1.0f,
                 tape_grad(t, x), in_f);
    // dw (OUT, IN) += dy^T (OUT, M) @ x (M, IN)
    if (w->requires_grad)
        be->gemm(&t->kc, true, false, out_f, in_f, M, 1.0f, dy, out_f, x->data, in_f, 1.0f,
                 tape_grad(t, w), in_f);
}

static const OpInfo linear_info = {.name = "linear", .backward = linear_backward};

Tensor *op_linear(Tape *t, Tensor *x, Tensor *w, Tensor *bias) {
    char xs[64], ws[64];
    CHECK(x->ndim >= 1 && w->ndim == 2 && tensor_dim(x, -1) == w->shape[1],
          "op_linear: x %s, w %s: x's last dim must equal w's second", tensor_shape_str(x, xs, 64),
          tensor_shape_str(w, ws, 64));
    CHECK(!bias || (bias->ndim == 1 && bias->shape[0] == w->shape[0]),
          "op_linear: bias of %lld elements for w %s", (long long)bias->n,
          tensor_shape_str(w, ws, 64));
    CHECK(x->dev == w->dev && (!bias || bias->dev == x->dev), "op_linear: mixed devices");
    const Backend *be = backend_need(x->dev);
    int64_t out_f = w->shape[0], in_f = w->shape[1], M = x->n / in_f;

    int64_t shape[TENSOR_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = out_f;
    Tensor *y = tensor_new(t->arena, x->ndim, shape);
    if (bias) {
        KERNEL_CHECK(be, bias_rows_fwd);
        be->bias_rows_fwd(&t->kc, y->data, bias->data, M, out_f);
    }
    be->gemm(&t->kc, false, true, M, out_f, in_f, 1.0f, x->data, in_f, w->data, in_f,
             bias ? 1.0f : 0.0f, y->data, out_f);
    tape_record(t, &linear_info, (Tensor *[]){bias, x, w}, 3, &y, 1);
    return y;
}

// ---- matmul ----
static void matmul_backward(Tape *t, Node *n) {
    Tensor *a = n->in[0], *b = n->in[1], *c = n->out[0];
    const Backend *be = backend_need(a->dev);
    int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1];
    // da (M,K) += dc (M,N) @ b^T;  db (K,N) += a^T @ dc
    if (a->requires_grad)
        be->gemm(&t->kc, false, true, M, K, N, 1.0f, c->grad, N, b->data, N, 1.0f, tape_grad(t, a),
                 K);
    if (b->requires_grad)
        be->gemm(&t->kc, true, false, K, N, M, 1.0f, a->data, K, c->grad, N, 1.0f, tape_grad(t, b),
                 N);
}

static const OpInfo matmul_info = {.name = "matmul", .backward = matmul_backward};

Tensor *op_matmul(Tape *t, Tensor *a, Tensor *b) {
    char as[64], bs[64];
    CHECK(a->ndim == 2 && b->ndim == 2 && a->shape[1] == b->shape[0],
          "op_matmul: a %s @ b %s: need (M,K) @ (K,N)", tensor_shape_str(a, as, 64),
          tensor_shape_str(b, bs, 64));
    CHECK(a->dev == b->dev, "op_matmul: mixed devices");
    const Backend *be = backend_need(a->dev);
    int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1];
    Tensor *c = tensor_2d(t->arena, M, N);
    be->gemm(&t->kc, false, false, M, N, K, 1.0f, a->data, K, b->data, N, 0.0f, c->data, N);
    tape_record(t, &matmul_info, (Tensor *[]){a, b}, 2, &c, 1);
    return c;
}

// ---- bmm ----
static void bmm_backward(Tape *t, Node *n) {
    Tensor *a = n->in[0], *b = n->in[1], *c = n->out[0];
    const Backend *be = backend_need(a->dev);
    int64_t Bt = a->shape[0], M = a->shape[1], K = a->shape[2], N = b->shape[2];
    if (a->requires_grad)
        be->gemm_batched(&t->kc, Bt, false, true, M, K, N, 1.0f, c->grad, N, M * N, b->data, N,
                         K * N, 1.0f, tape_grad(t, a), K, M * K);
    if (b->requires_grad)
        be->gemm_batched(&t->kc, Bt, true, false, K, N, M, 1.0f, a->data, K, M * K, c->grad, N,
                         M * N, 1.0f, tape_grad(t, b), N, K * N);
}

static const OpInfo bmm_info = {.name = "bmm", .backward = bmm_backward};

Tensor *op_bmm(Tape *t, Tensor *a, Tensor *b) {
    char as[64], bs[64];
    CHECK(a->ndim == 3 && b->ndim == 3 && a->shape[0] == b->shape[0] && a->shape[2] == b->shape[1],
          "op_bmm: a %s @ b %s: need (Bt,M,K) @ (Bt,K,N)", tensor_shape_str(a, as, 64),
          tensor_shape_str(b, bs, 64));
    CHECK(a->dev == b->dev, "op_bmm: mixed devices");
    const Backend *be = backend_need(a->dev);
    int64_t Bt = a->shape[0], M = a->shape[1], K = a->shape[2], N = b->shape[2];
    Tensor *c = tensor_3d(t->arena, Bt, M, N);
    be->gemm_batched(&t->kc, Bt, false, false, M, N, K, 1.0f, a->data, K, M * K, b->data, N, K * N,
                     0.0f, c->data, N, M * N);
    tape_record(t, &bmm_info, (Tensor *[]){a, b}, 2, &c, 1);
    return c;
}
