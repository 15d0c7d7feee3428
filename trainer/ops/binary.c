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

static Tensor *binary(Tape *t, Tensor *a, Tensor *b, BinaryFwd fwd, const OpInfo *info) {
    int64_t as[TENSOR_MAX_DIMS], bs[TENSOR_MAX_DIMS], os[TENSOR_MAX_DIMS];
    int nd = broadcast(info->name, a, b, as, bs, os);
    Tensor *y = tensor_new(t->arena, nd, os);
    fwd(&t->kc, y->data, a->data, b->data, nd, as, bs);
    tape_record(t, info, (Tensor *[]){a, b}, 2, &y, 1);
    return y;
}

// op_<name>, <name>_info and <name>_backward. BWD_CALL is the <name>_bwd call: with the
// operands (mul, div, maximum, minimum) or with dout alone (add, sub).
#define BINARY_OP(name, BWD_CALL)                                                                  \
    static void name##_backward(Tape *t, Node *n) {                                                \
        Tensor *a = n->in[0], *b = n->in[1], *y = n->out[0];                                       \
        int64_t as[TENSOR_MAX_DIMS], bs[TENSOR_MAX_DIMS], os[TENSOR_MAX_DIMS];                     \
        int nd = broadcast(#name, a, b, as, bs, os);                                               \
        const Backend *be = backend_need(y->dev);                                                  \
        KERNEL_CHECK(be, name##_bwd);                                                              \
        float *da = grad_or_null(t, a), *db = grad_or_null(t, b);                                  \
        BWD_CALL;                                                                                  \
    }                                                                                              \
    static const OpInfo name##_info = {#name, name##_backward};                                    \
    Tensor *op_##name(Tape *t, Tensor *a, Tensor *b) {                                             \
        const Backend *be = backend_need(a->dev);                                                  \
        KERNEL_CHECK(be, name##_fwd);                                                              \
        return binary(t, a, b, be->name##_fwd, &name##_info);                                      \
    }

#define DOUT_ONLY(name) be->name##_bwd(&t->kc, da, db, y->grad, nd, as, bs)
#define WITH_AB(name) be->name##_bwd(&t->kc, da, db, y->grad, a->data, b->data, nd, as, bs)

BINARY_OP(add, DOUT_ONLY(add))
BINARY_OP(sub, DOUT_ONLY(sub))
BINARY_OP(mul, WITH_AB(mul))
BINARY_OP(div, WITH_AB(div))
BINARY_OP(maximum, WITH_AB(maximum))
BINARY_OP(minimum, WITH_AB(minimum))

// ---- BCE with logits (reduction none) ----
static void bce_with_logits_backward(Tape *t, Node *n) {
    Tensor *x = n->in[0], *y = n->in[1], *out = n->out[0];
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, bce_logits_bwd);
    be->bce_logits_bwd(&t->kc, grad_or_null(t, x), grad_or_null(t, y), out->grad, x->data, y->data,
                       x->n);
}

static const OpInfo bce_with_logits_info = {"bce_with_logits", bce_with_logits_backward};

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
