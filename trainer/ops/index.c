/* index.c -- row-indexing ops: index_select, gather_rows (top-k selection), embedding.
 * All three are one row gather, (outer, n_src, inner) -> (outer, n_idx, inner), whose
 * backward is a scatter-add (PyTorch's index_add / scatter_add / embedding_backward), so
 * repeated indices accumulate. Kernels: kernels/cpu/layout.c (gather_rows_*). */
#include "kernels/base.h"
#include "trainer/ops/ops.h"

// The gather as the kernel sees it; idx is a copy on the tensors' device, so the caller's
// array may go away after the op returns.
typedef struct GatherCtx {
    const int64_t *idx;
    int64_t idx_stride, outer, n_src, n_idx, inner;
} GatherCtx;

// Checks every index against [0, n_src) on the host, then copies them to x's device.
static const int64_t *device_indices(Tape *t, const Backend *be, const char *op, const int64_t *idx,
                                     int64_t n, int64_t n_src) {
    for (int64_t i = 0; i < n; i++)
        CHECK(idx[i] >= 0 && idx[i] < n_src, "%s: index %lld at %lld out of range [0, %lld)", op,
              (long long)idx[i], (long long)i, (long long)n_src);
    int64_t *d = arena_alloc_data(t->arena, (size_t)MAX(n, 1) * sizeof(int64_t));
    be->to_device(d, idx, (size_t)n * sizeof(int64_t));
    return d;
}

static void gather_backward(Tape *t, Node *n) {
    Tensor *x = n->in[0], *y = n->out[0];
    if (!x->requires_grad) return;
    const GatherCtx *c = n->ctx;
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, gather_rows_bwd);
    be->gather_rows_bwd(&t->kc, tape_grad(t, x), y->grad, c->idx, c->idx_stride, c->outer,
                        c->n_src, c->n_idx, c->inner);
}

static const OpInfo index_select_info = {.name = "index_select", .backward = gather_backward};
static const OpInfo gather_rows_info = {.name = "gather_rows", .backward = gather_backward};
static const OpInfo embedding_info = {.name = "embedding", .backward = gather_backward};

// Runs the gather of x into a new tensor of `shape` and records it under `info`.
static Tensor *gather(Tape *t, const OpInfo *info, Tensor *x, int ndim, const int64_t *shape,
                      GatherCtx c) {
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, gather_rows_fwd);
    Tensor *y = tensor_new(t->arena, ndim, shape);
    be->gather_rows_fwd(&t->kc, y->data, x->data, c.idx, c.idx_stride, c.outer, c.n_src, c.n_idx,
                        c.inner);
    Node *n = tape_record(t, info, &x, 1, &y, 1);
    if (n) {
        GatherCtx *saved = tape_alloc(t, sizeof *saved);
        *saved = c;
        n->ctx = saved;
    }
    return y;
}

Tensor *op_index_select(Tape *t, Tensor *x, int dim, const int64_t *idx, int64_t n) {
    char s[96];
    int d = dim < 0 ? dim + x->ndim : dim;
    CHECK(d >= 0 && d < x->ndim, "op_index_select: dim %d out of range for x %s", dim,
          tensor_shape_str(x, s, sizeof s));
    CHECK(n >= 0, "op_index_select: %lld indices", (long long)n);
    int64_t shape[TENSOR_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[d] = n;
    GatherCtx c = {.idx_stride = 0, .n_src = x->shape[d], .n_idx = n, .outer = 1, .inner = 1};
    for (int i = 0; i < d; i++) c.outer *= x->shape[i];
    for (int i = d + 1; i < x->ndim; i++) c.inner *= x->shape[i];
    c.idx = device_indices(t, backend_need(x->dev), "op_index_select", idx, n, x->shape[d]);
    return gather(t, &index_select_info, x, x->ndim, shape, c);
}

Tensor *op_gather_rows(Tape *t, Tensor *x, const int64_t *idx, int64_t k) {
    char s[96];
    CHECK(x->ndim == 3 && k >= 0, "op_gather_rows: x %s must be (B,N,C), k = %lld",
          tensor_shape_str(x, s, sizeof s), (long long)k);
    const int64_t B = x->shape[0], N = x->shape[1], C = x->shape[2];
    GatherCtx c = {.idx_stride = k, .outer = B, .n_src = N, .n_idx = k, .inner = C};
    c.idx = device_indices(t, backend_need(x->dev), "op_gather_rows", idx, B * k, N);
    return gather(t, &gather_rows_info, x, 3, (int64_t[]){B, k, C}, c);
}

Tensor *op_embedding(Tape *t, Tensor *weight, const int64_t *idx, int64_t n) {
    char s[96];
    CHECK(weight->ndim == 2 && n >= 0, "op_embedding: weight %s must be (V,E), n = %lld",
          tensor_shape_str(weight, s, sizeof s), (long long)n);
    const int64_t V = weight->shape[0], E = weight->shape[1];
    GatherCtx c = {.idx_stride = 0, .outer = 1, .n_src = V, .n_idx = n, .inner = E};
    c.idx = device_indices(t, backend_need(weight->dev), "op_embedding", idx, n, V);
    return gather(t, &embedding_info, weight, 2, (int64_t[]){n, E}, c);
}
