/* binary.c -- add, sub, mul, div, maximum, minimum with NumPy broadcasting, and BCE with
 * logits. Each backward sums its gradient back to the input's own shape (the kernels do the
 * reduction). Kernels: kernels/cpu/elementwise.c. */
#include "trainer/ops/ops.h"

#include "kernels/base.h" // CHECK, MAX

// Right-aligns a and b, pads the shorter with leading 1s into as/bs and writes the broadcast
// shape into os. Returns its ndim. A dim of size 1 broadcasts (also against 0).
static int broadcast(const char *op, const Tensor *a, const Tensor *b, int64_t *as, int64_t *bs,
                     int64_t *os) {
    char sa[64], sb[64];
    CHECK(a->dev == b->dev, "%s: operands on different devices", op);
    int nd = MAX(a->ndim, b->ndim);
    for (int d = 0; d < nd; d++) {
        int da = d - (nd - a->ndim), db = d - (nd - b->ndim);
        as[d] = da >= 0 ? a->shape[da] : 1;
        bs[d] = db >= 0 ? b->shape[db] : 1;
        CHECK(as[d] == bs[d] || as[d] == 1 || bs[d] == 1,
              "%s: shapes [%s] and [%s] do not broadcast", op, tensor_shape_str(a, sa, 64),
              tensor_shape_str(b, sb, 64));
        os[d] = as[d] == 1 ? bs[d] : as[d];
    }
    return nd;
}

static float *grad_or_null(Tape *t, Tensor *x) {
    return x->requires_grad ? tape_grad(t, x) : NULL;
}

typedef void (*BinaryFwd)(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                          const int64_t *a_shape, const int64_t *b_shape);
// The two backward kernel shapes: add and sub read dout alone, the others also the operands.
typedef void (*BinaryBwdDout)(KernelCtx *kc, float *da, float *db, const float *dout, int ndim,
                              const int64_t *a_shape, const int64_t *b_shape);
typedef void (*BinaryBwd)(KernelCtx *kc, float *da, float *db, const float *dout, const float *a,
                          const float *b, int ndim, const int64_t *a_shape, const int64_t *b_shape);

// op_<name> runs be-><name>_fwd through binary, <name>_backward runs be-><name>_bwd through
// add_sub_backward or binary_backward. The kernel is CHECKed here, with KERNEL_CHECK's
// message.
static Tensor *binary(Tape *t, Tensor *a, Tensor *b, BinaryFwd fwd, const OpInfo *info) {
    CHECK(fwd != NULL, "%s_fwd: no %s kernel (missing from the backend table)", info->name,
          backend_need(a->dev)->name);
    int64_t as[TENSOR_MAX_DIMS], bs[TENSOR_MAX_DIMS], os[TENSOR_MAX_DIMS];
    int nd = broadcast(info->name, a, b, as, bs, os);
    Tensor *y = tensor_new(t->arena, nd, os);
    fwd(&t->kc, y->data, a->data, b->data, nd, as, bs);
    tape_record(t, info, (Tensor *[]){a, b}, 2, &y, 1);
    return y;
}

static void binary_backward(Tape *t, Node *n, BinaryBwd bwd) {
    Tensor *a = n->in[0], *b = n->in[1], *y = n->out[0];
    int64_t as[TENSOR_MAX_DIMS], bs[TENSOR_MAX_DIMS], os[TENSOR_MAX_DIMS];
    int nd = broadcast(n->info->name, a, b, as, bs, os);
    CHECK(bwd != NULL, "%s_bwd: no %s kernel (missing from the backend table)", n->info->name,
          backend_need(y->dev)->name);
    bwd(&t->kc, grad_or_null(t, a), grad_or_null(t, b), y->grad, a->data, b->data, nd, as, bs);
}

// add and sub: an operand of y's shape takes dout (or -dout) through tape_grad_add, a's first
// gradient by taking y's buffer itself (tape_grad_take); a broadcast one through the kernel's
// reduction. dout is read through its pointer taken first (a may take y's buffer).
static void add_sub_backward(Tape *t, Node *n, BinaryBwdDout bwd, float b_sign) {
    Tensor *a = n->in[0], *b = n->in[1], *y = n->out[0];
    const float *dout = y->grad;
    int64_t as[TENSOR_MAX_DIMS], bs[TENSOR_MAX_DIMS], os[TENSOR_MAX_DIMS];
    int nd = broadcast(n->info->name, a, b, as, bs, os);
    CHECK(bwd != NULL, "%s_bwd: no %s kernel (missing from the backend table)", n->info->name,
          backend_need(y->dev)->name);
    float *da = NULL, *db = NULL;
    if (a->requires_grad) {
        if (a->n != y->n) da = tape_grad(t, a);
        else if (!tape_grad_take(t, a, y)) tape_grad_add(t, a, dout, 1.0f);
    }
    if (b->requires_grad) {
        if (b->n == y->n) tape_grad_add(t, b, dout, b_sign);
        else db = tape_grad(t, b);
    }
    if (da || db) bwd(&t->kc, da, db, dout, nd, as, bs);
}

static void add_backward(Tape *t, Node *n) {
    add_sub_backward(t, n, backend_need(n->out[0]->dev)->add_bwd, 1.0f);
}

static void sub_backward(Tape *t, Node *n) {
    add_sub_backward(t, n, backend_need(n->out[0]->dev)->sub_bwd, -1.0f);
}

static void mul_backward(Tape *t, Node *n) {
    binary_backward(t, n, backend_need(n->out[0]->dev)->mul_bwd);
}

static void div_backward(Tape *t, Node *n) {
    binary_backward(t, n, backend_need(n->out[0]->dev)->div_bwd);
}

static void maximum_backward(Tape *t, Node *n) {
    binary_backward(t, n, backend_need(n->out[0]->dev)->maximum_bwd);
}

static void minimum_backward(Tape *t, Node *n) {
    binary_backward(t, n, backend_need(n->out[0]->dev)->minimum_bwd);
}

// The result again from the operands (tape_drop).
static void binary_recompute(Tape *t, Node *n, BinaryFwd fwd) {
    Tensor *a = n->in[0], *b = n->in[1];
    int64_t as[TENSOR_MAX_DIMS], bs[TENSOR_MAX_DIMS], os[TENSOR_MAX_DIMS];
    int nd = broadcast(n->info->name, a, b, as, bs, os);
    fwd(&t->kc, n->out[0]->data, a->data, b->data, nd, as, bs);
}

static void add_recompute(Tape *t, Node *n) {
    binary_recompute(t, n, backend_need(n->out[0]->dev)->add_fwd);
}

static void sub_recompute(Tape *t, Node *n) {
    binary_recompute(t, n, backend_need(n->out[0]->dev)->sub_fwd);
}

static void mul_recompute(Tape *t, Node *n) {
    binary_recompute(t, n, backend_need(n->out[0]->dev)->mul_fwd);
}

static void div_recompute(Tape *t, Node *n) {
    binary_recompute(t, n, backend_need(n->out[0]->dev)->div_fwd);
}

static const OpInfo add_info = {
    .name = "add", .backward = add_backward, .recompute = add_recompute};
static const OpInfo sub_info = {
    .name = "sub", .backward = sub_backward, .recompute = sub_recompute};
static const OpInfo mul_info = {
    .name = "mul", .backward = mul_backward, .recompute = mul_recompute};
static const OpInfo div_info = {
    .name = "div", .backward = div_backward, .recompute = div_recompute};
static const OpInfo maximum_info = {.name = "maximum", .backward = maximum_backward};
static const OpInfo minimum_info = {.name = "minimum", .backward = minimum_backward};

Tensor *op_add(Tape *t, Tensor *a, Tensor *b) {
    return binary(t, a, b, backend_need(a->dev)->add_fwd, &add_info);
}

Tensor *op_sub(Tape *t, Tensor *a, Tensor *b) {
    return binary(t, a, b, backend_need(a->dev)->sub_fwd, &sub_info);
}

Tensor *op_mul(Tape *t, Tensor *a, Tensor *b) {
    return binary(t, a, b, backend_need(a->dev)->mul_fwd, &mul_info);
}

Tensor *op_div(Tape *t, Tensor *a, Tensor *b) {
    return binary(t, a, b, backend_need(a->dev)->div_fwd, &div_info);
}

Tensor *op_maximum(Tape *t, Tensor *a, Tensor *b) {
    return binary(t, a, b, backend_need(a->dev)->maximum_fwd, &maximum_info);
}

Tensor *op_minimum(Tape *t, Tensor *a, Tensor *b) {
    return binary(t, a, b, backend_need(a->dev)->minimum_fwd, &minimum_info);
}

// ---- BCE with logits (reduction none) ----
static void bce_with_logits_backward(Tape *t, Node *n) {
    Tensor *x = n->in[0], *y = n->in[1], *out = n->out[0];
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, bce_logits_bwd);
    be->bce_logits_bwd(&t->kc, grad_or_null(t, x), grad_or_null(t, y), out->grad, x->data, y->data,
                       x->n);
}

static const OpInfo bce_with_logits_info = {.name = "bce_with_logits",
                                            .backward = bce_with_logits_backward};

// Edges: x, y (binary_cross_entropy_with_logits's self, target).
Tensor *op_bce_with_logits(Tape *t, Tensor *x, Tensor *y) {
    char xs[64], ys[64];
    CHECK(tensor_same_shape(x, y), "op_bce_with_logits: x [%s] and y [%s] differ",
          tensor_shape_str(x, xs, 64), tensor_shape_str(y, ys, 64));
    CHECK(x->dev == y->dev, "op_bce_with_logits: x and y on different devices");
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, bce_logits_fwd);
    Tensor *out = tensor_like(t->arena, x);
    be->bce_logits_fwd(&t->kc, out->data, x->data, y->data, x->n);
    tape_record(t, &bce_with_logits_info, (Tensor *[]){x, y}, 2, &out, 1);
    return out;
}
