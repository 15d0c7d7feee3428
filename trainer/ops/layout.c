/* layout.c -- shape and layout ops: reshape, permute, transpose, concat, split, slice, detach.
 * reshape and detach share the input's data; the rest materialise a contiguous output.
 * Each records one node, as PyTorch's View/Permute/Transpose/Cat/SplitWithSizes/Slice
 * backward nodes. Kernels: kernels/cpu/layout.c (permute_*, block_copy, block_add). */
#include "kernels/base.h"
#include "trainer/ops/ops.h"

// "2x3x4" for a shape that is not (yet) a tensor's.
static char *dims_str(int ndim, const int64_t *shape, char *buf, size_t len) {
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; i < ndim && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, i ? "x%lld" : "%lld", (long long)shape[i]);
    return buf;
}

static int norm_dim(const char *op, const Tensor *x, int dim) {
    int d = dim < 0 ? dim + x->ndim : dim;
    char s[96];
    CHECK(d >= 0 && d < x->ndim, "%s: dim %d out of range for x %s", op, dim,
          tensor_shape_str(x, s, sizeof s));
    return d;
}

static int64_t prod(const int64_t *shape, int from, int to) {
    int64_t n = 1;
    for (int i = from; i < to; i++) n *= shape[i];
    return n;
}

// ---- reshape ----
static void reshape_backward(Tape *t, Node *n) {
    Tensor *x = n->in[0], *y = n->out[0];
    if (!x->requires_grad) return;
    if (!tape_grad_take(t, x, y)) tape_grad_add(t, x, y->grad, 1.0f); // taken: y's, as it is
}

static const OpInfo reshape_info = {.name = "reshape", .backward = reshape_backward};

Tensor *op_reshape(Tape *t, Tensor *x, int ndim, const int64_t *shape) {
    char s[96], r[96];
    CHECK(ndim >= 0 && ndim <= TENSOR_MAX_DIMS, "op_reshape: ndim %d out of range", ndim);
    int64_t want[TENSOR_MAX_DIMS], known = 1;
    int infer = -1;
    for (int i = 0; i < ndim; i++) {
        want[i] = shape[i];
        if (shape[i] == -1) {
            CHECK(infer < 0, "op_reshape: more than one -1 in %s",
                  dims_str(ndim, shape, r, sizeof r));
            infer = i;
        } else {
            CHECK(shape[i] >= 0, "op_reshape: bad size in %s", dims_str(ndim, shape, r, sizeof r));
            known *= shape[i];
        }
    }
    if (infer >= 0) {
        CHECK(known > 0 && x->n % known == 0, "op_reshape: x %s does not fit %s",
              tensor_shape_str(x, s, sizeof s), dims_str(ndim, shape, r, sizeof r));
        want[infer] = x->n / known;
    }
    CHECK(shape_numel(ndim, want) == x->n, "op_reshape: x %s (%lld elements) into %s",
          tensor_shape_str(x, s, sizeof s), (long long)x->n, dims_str(ndim, shape, r, sizeof r));
    Tensor *y = tensor_view(t->arena, x->data, ndim, want);
    tape_record(t, &reshape_info, &x, 1, &y, 1);
    return y;
}

// ---- permute, transpose ----
static void permute_backward(Tape *t, Node *n) {
    Tensor *x = n->in[0], *y = n->out[0];
    if (!x->requires_grad) return;
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, permute_bwd);
    be->permute_bwd(&t->kc, tape_grad(t, x), y->grad, x->ndim, x->shape, (const int *)n->ctx);
}

static const OpInfo permute_info = {.name = "permute", .backward = permute_backward};

Tensor *op_permute(Tape *t, Tensor *x, const int *perm) {
    char s[96];
    int p[TENSOR_MAX_DIMS];
    bool seen[TENSOR_MAX_DIMS] = {false};
    int64_t shape[TENSOR_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) {
        int d = perm[i] < 0 ? perm[i] + x->ndim : perm[i];
        CHECK(d >= 0 && d < x->ndim && !seen[d],
              "op_permute: perm[%d] = %d is not a new dim of x %s", i, perm[i],
              tensor_shape_str(x, s, sizeof s));
        seen[d] = true;
        p[i] = d;
        shape[i] = x->shape[d];
    }
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, permute_fwd);
    Tensor *y = tensor_new(t->arena, x->ndim, shape);
    be->permute_fwd(&t->kc, y->data, x->data, x->ndim, x->shape, p);
    Node *n = tape_record(t, &permute_info, &x, 1, &y, 1);
    if (n) {
        int *saved = tape_alloc(t, sizeof p);
        memcpy(saved, p, sizeof p);
        n->ctx = saved;
    }
    return y;
}

Tensor *op_transpose(Tape *t, Tensor *x, int d0, int d1) {
    int a = norm_dim("op_transpose", x, d0), b = norm_dim("op_transpose", x, d1);
    int perm[TENSOR_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) perm[i] = i;
    perm[a] = b;
    perm[b] = a;
    return op_permute(t, x, perm);
}

// ---- concat, split, slice ----
// Around `dim`, a tensor is (outer, shape[dim], inner): a piece of len along dim is `outer`
// blocks of len*inner contiguous floats, shape[dim]*inner floats apart -- one block_copy.
typedef struct DimCtx {
    int dim;
    int64_t start; // slice only
} DimCtx;

static void save_dim(Tape *t, Node *n, int dim, int64_t start) {
    DimCtx *c = tape_alloc(t, sizeof *c);
    c->dim = dim;
    c->start = start;
    n->ctx = c;
}

static void concat_backward(Tape *t, Node *n) {
    Tensor *y = n->out[0];
    const int d = ((DimCtx *)n->ctx)->dim;
    const int64_t outer = prod(y->shape, 0, d), inner = prod(y->shape, d + 1, y->ndim);
    const Backend *be = backend_need(y->dev);
    KERNEL_CHECK(be, block_add);
    KERNEL_CHECK(be, block_copy);
    int64_t off = 0;
    for (int i = 0; i < n->n_in; i++) {
        Tensor *x = n->in[i];
        const int64_t len = x->shape[d] * inner;
        if (x->requires_grad) {
            bool fresh; // a first gradient is copied, not added to zeros
            float *dx = tape_grad_fresh(t, x, &fresh);
            (fresh ? be->block_copy : be->block_add)(&t->kc, dx, len, y->grad + off,
                                                     y->shape[d] * inner, outer, len);
        }
        off += len;
    }
}

// y = the n inputs side by side along dim d (shapes checked by op_concat).
static void concat_into(Tape *t, Tensor *y, Tensor *const *xs, int n, int d) {
    const Backend *be = backend_need(y->dev);
    KERNEL_CHECK(be, block_copy);
    const int64_t outer = prod(y->shape, 0, d), inner = prod(y->shape, d + 1, y->ndim);
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        const int64_t len = xs[i]->shape[d] * inner;
        be->block_copy(&t->kc, y->data + off, y->shape[d] * inner, xs[i]->data, len, outer, len);
        off += len;
    }
}

static void concat_recompute(Tape *t, Node *n) {
    concat_into(t, n->out[0], n->in, n->n_in, ((DimCtx *)n->ctx)->dim);
}

static const OpInfo concat_info = {
    .name = "concat", .backward = concat_backward, .recompute = concat_recompute};

Tensor *op_concat(Tape *t, Tensor *const *xs, int n, int dim) {
    char s[96], r[96];
    CHECK(n >= 1, "op_concat: no inputs");
    const Tensor *x0 = xs[0];
    const int d = norm_dim("op_concat", x0, dim);
    int64_t shape[TENSOR_MAX_DIMS];
    memcpy(shape, x0->shape, sizeof shape);
    shape[d] = 0;
    for (int i = 0; i < n; i++) {
        const Tensor *x = xs[i];
        bool ok = x->ndim == x0->ndim && x->dev == x0->dev;
        for (int j = 0; ok && j < x->ndim; j++) ok = j == d || x->shape[j] == x0->shape[j];
        CHECK(ok, "op_concat: input %d is %s, input 0 is %s (dim %d)", i,
              tensor_shape_str(x, s, sizeof s), tensor_shape_str(x0, r, sizeof r), dim);
        shape[d] += x->shape[d];
    }
    Tensor *y = tensor_new(t->arena, x0->ndim, shape);
    concat_into(t, y, xs, n, d);
    Node *node = tape_record(t, &concat_info, xs, n, &y, 1);
    if (node) save_dim(t, node, d, 0);
    return y;
}

// PyTorch's SplitWithSizesBackward: the engine hands a zeroed gradient to any output whose
// gradient never arrived, so every piece is added back unconditionally.
static void split_backward(Tape *t, Node *n) {
    Tensor *x = n->in[0];
    if (!x->requires_grad) return;
    const int d = ((DimCtx *)n->ctx)->dim;
    const int64_t outer = prod(x->shape, 0, d), inner = prod(x->shape, d + 1, x->ndim);
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, block_add);
    float *dx = tape_grad(t, x);
    int64_t off = 0;
    for (int k = 0; k < n->n_out; k++) {
        const int64_t len = n->out[k]->shape[d] * inner;
        be->block_add(&t->kc, dx + off, x->shape[d] * inner, n->out[k]->grad, len, outer, len);
        off += len;
    }
}

static const OpInfo split_info = {.name = "split", .backward = split_backward};

void op_split(Tape *t, Tensor *x, int dim, const int64_t *sizes, int n, Tensor **outs) {
    char s[96];
    const int d = norm_dim("op_split", x, dim);
    CHECK(n >= 1, "op_split: no outputs");
    int64_t total = 0;
    for (int k = 0; k < n; k++) {
        CHECK(sizes[k] >= 0, "op_split: size %d is %lld", k, (long long)sizes[k]);
        total += sizes[k];
    }
    CHECK(total == x->shape[d], "op_split: sizes sum to %lld, x %s has %lld along dim %d",
          (long long)total, tensor_shape_str(x, s, sizeof s), (long long)x->shape[d], dim);
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, block_copy);
    const int64_t outer = prod(x->shape, 0, d), inner = prod(x->shape, d + 1, x->ndim);
    int64_t shape[TENSOR_MAX_DIMS], off = 0;
    memcpy(shape, x->shape, sizeof shape);
    for (int k = 0; k < n; k++) {
        shape[d] = sizes[k];
        outs[k] = tensor_new(t->arena, x->ndim, shape);
        const int64_t len = sizes[k] * inner;
        be->block_copy(&t->kc, outs[k]->data, len, x->data + off, x->shape[d] * inner, outer, len);
        off += len;
    }
    Node *node = tape_record(t, &split_info, &x, 1, outs, n);
    if (node) save_dim(t, node, d, 0);
}

static void slice_backward(Tape *t, Node *n) {
    Tensor *x = n->in[0], *y = n->out[0];
    if (!x->requires_grad) return;
    const DimCtx *c = n->ctx;
    const int64_t outer = prod(x->shape, 0, c->dim), inner = prod(x->shape, c->dim + 1, x->ndim);
    const int64_t len = y->shape[c->dim] * inner;
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, block_add);
    be->block_add(&t->kc, tape_grad(t, x) + c->start * inner, x->shape[c->dim] * inner, y->grad,
                  len, outer, len);
}

static const OpInfo slice_info = {.name = "slice", .backward = slice_backward};

// Negative start/end count from the end, as in Python; out-of-range bounds are a CHECK
// failure rather than PyTorch's silent clamping, because every caller here knows its sizes.
Tensor *op_slice(Tape *t, Tensor *x, int dim, int64_t start, int64_t end) {
    char s[96];
    const int d = norm_dim("op_slice", x, dim);
    const int64_t size = x->shape[d];
    int64_t a = start < 0 ? start + size : start, b = end < 0 ? end + size : end;
    CHECK(0 <= a && a <= b && b <= size, "op_slice: [%lld:%lld] along dim %d of x %s",
          (long long)start, (long long)end, dim, tensor_shape_str(x, s, sizeof s));
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, block_copy);
    int64_t shape[TENSOR_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[d] = b - a;
    Tensor *y = tensor_new(t->arena, x->ndim, shape);
    const int64_t outer = prod(x->shape, 0, d), inner = prod(x->shape, d + 1, x->ndim);
    const int64_t len = (b - a) * inner;
    be->block_copy(&t->kc, y->data, len, x->data + a * inner, size * inner, outer, len);
    Node *n = tape_record(t, &slice_info, &x, 1, &y, 1);
    if (n) save_dim(t, n, d, a);
    return y;
}

// ---- detach ----
// A copy, where PyTorch shares storage: PyTorch's storage lives while the detached tensor
// does, and a copy of its own gives it that lifetime here, where the tape may release x's
// data during backward (tape.h, release_activations) while the detached copy is still read.
// RT-DETR detaches only reference boxes and the selected queries (a few hundred KiB).
Tensor *op_detach(Tape *t, Tensor *x) {
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, copy);
    Tensor *y = tensor_like(t->arena, x);
    if (x->n) be->copy(&t->kc, y->data, x->data, x->n);
    return y;
}
