/* test_golden_ops.c -- ops whose semantics are easy to get subtly wrong, forward and backward,
 * against PyTorch (tests/golden/ops.bin; cases and generation in tests/golden/README.md).
 * Each case builds its inputs as leaves, runs our op, compares the output, runs backward with
 * PyTorch's upstream gradient and compares every input gradient.
 *
 * Tolerances: the reference is float64 arithmetic on the same float32 inputs, so the error
 * measured is only our float32 rounding. Data movement (pad, upsample, maxpool forward) must be
 * exact. Elementwise maps allow a few ulps of libm error (ELEM). Ops that reduce over at most
 * ~100 terms of O(1) values allow about n * 2^-24 relative error (REDUCE). Measured when this
 * was written: <= 5e-7 absolute on O(1) values, about 10x inside every tolerance. */
#include "tests/expect.h"
#include "tests/golden.h"
#include "trainer/ops/ops.h"

#include "kernels/base.h"

typedef struct Tol {
    double atol, rtol;
} Tol;

static const Tol EXACT = {0, 0};
// erf/exp/log in float32 are within 1-2 ulps; derivatives like silu' = s(1 + x(1 - s)) add a
// cancellation of terms of size ~|x|, hence the small absolute part.
static const Tol ELEM = {2e-6, 1e-5};
// Sums of a handful of float32 values (upsample/maxpool/pad backward): rounding only.
static const Tol SUM = {1e-6, 1e-6};
// Reductions over <= 100 terms (norms, softmax, attention, bilinear sampling weights). The
// widest case is layernorm/b: its mean is 50x its std, so centring costs ~6 bits (5e-6 rel).
static const Tol REDUCE = {5e-6, 5e-5};

static Golden G;

// ---- per-case fixture ----
typedef struct Case {
    char name[64];
    Arena arena;
    Tape tape;
} Case;

static void begin(Case *c, const char *name) {
    snprintf(c->name, sizeof c->name, "%s", name);
    arena_init(&c->arena, DEV_CPU, 1 << 20);
    tape_init(&c->tape, &c->arena, 1);
}

static void end(Case *c) {
    tape_free(&c->tape);
    arena_free(&c->arena);
}

static const GoldenArray *arr(const Case *c, const char *field) {
    return golden_get(&G, "%s/%s", c->name, field);
}

static Tensor *leaf(Case *c, const char *field) {
    return golden_leaf(&c->arena, arr(c, field));
}
static Tensor *constant(Case *c, const char *field) {
    return golden_tensor(&c->arena, arr(c, field));
}

// An integer parameter stored as a float in `<case>/params`.
static int param(const Case *c, int i) {
    const GoldenArray *p = arr(c, "params");
    CHECK(i < p->n, "%s/params has %lld values", c->name, (long long)p->n);
    return (int)p->data[i];
}

static void expect_values(const Case *c, const char *field, const float *got, int64_t n, Tol tol) {
    char what[128];
    snprintf(what, sizeof what, "%s/%s", c->name, field);
    EXPECT(golden_compare(what, got, n, arr(c, field), tol.atol, tol.rtol) == 0,
           "%s differs from PyTorch", what);
}

static void expect_tensor(const Case *c, const char *field, const Tensor *y, Tol tol) {
    const GoldenArray *want = arr(c, field);
    bool same = y->ndim == want->ndim;
    for (int d = 0; same && d < y->ndim; d++)
        same = y->shape[d] == want->shape[d];
    char buf[64];
    EXPECT(same, "%s/%s: shape %s, PyTorch has %d dims", c->name, field,
           tensor_shape_str(y, buf, sizeof buf), want->ndim);
    if (same) expect_values(c, field, y->data, y->n, tol);
}

// Backward from y with PyTorch's upstream gradient `dy`.
static void backward(Case *c, Tensor *y) {
    const GoldenArray *dy = arr(c, "dy");
    CHECK(dy->n == y->n, "%s: dy has %lld values, y %lld", c->name, (long long)dy->n,
          (long long)y->n);
    EXPECT(tape_backward(&c->tape, y, dy->data) == 0, "%s: backward failed", c->name);
}

static void expect_grad(const Case *c, const char *field, const Tensor *x, Tol tol) {
    EXPECT(x->grad_defined, "%s: no gradient for %s", c->name, field);
    if (x->grad_defined) expect_values(c, field, x->grad, x->n, tol);
}

// ---- cases ----
static void test_grid_sample(const char *name) {
    Case c;
    begin(&c, name);
    Tensor *x = leaf(&c, "x"), *grid = leaf(&c, "grid");
    Tensor *y = op_grid_sample(&c.tape, x, grid);
    expect_tensor(&c, "y", y, REDUCE);
    backward(&c, y);
    expect_grad(&c, "dx", x, REDUCE);
    expect_grad(&c, "dgrid", grid, REDUCE);
    end(&c);
}

static void test_msdeform_attn(const char *name) {
    Case c;
    begin(&c, name);
    Tensor *value = leaf(&c, "value"), *loc = leaf(&c, "loc"), *attw = leaf(&c, "attw");
    const GoldenArray *s = arr(&c, "shapes");
    int64_t shapes[8];
    CHECK(s->n <= 8 && s->n % 2 == 0, "%s: bad shapes", name);
    for (int i = 0; i < s->n; i++)
        shapes[i] = (int64_t)s->data[i];
    Tensor *y = op_msdeform_attn(&c.tape, value, shapes, (int)s->n / 2, loc, attw);
    expect_tensor(&c, "y", y, REDUCE);
    backward(&c, y);
    expect_grad(&c, "dvalue", value, REDUCE);
    expect_grad(&c, "dloc", loc, REDUCE);
    expect_grad(&c, "dattw", attw, REDUCE);
    end(&c);
}

static void test_batchnorm(const char *name, bool training) {
    Case c;
    begin(&c, name);
    c.tape.training = training;
    Tensor *x = leaf(&c, "x"), *w = leaf(&c, "weight"), *b = leaf(&c, "bias");
    const GoldenArray *p = arr(&c, "params");
    BatchNormState st = {.running_mean = constant(&c, "running_mean"),
                         .running_var = constant(&c, "running_var"),
                         .momentum = p->data[0],
                         .eps = p->data[1]};
    Tensor *y = op_batchnorm2d(&c.tape, x, w, b, &st);
    expect_tensor(&c, "y", y, REDUCE);
    if (training) {
        // Running stats: (1 - m) * old + m * batch stat (unbiased variance), fp32 rounding.
        expect_values(&c, "running_mean_new", st.running_mean->data, st.running_mean->n, ELEM);
        expect_values(&c, "running_var_new", st.running_var->data, st.running_var->n, ELEM);
        EXPECT(st.num_batches_tracked == 1, "%s: num_batches_tracked %lld, want 1", name,
               (long long)st.num_batches_tracked);
    } else {
        expect_values(&c, "running_mean", st.running_mean->data, st.running_mean->n, EXACT);
        expect_values(&c, "running_var", st.running_var->data, st.running_var->n, EXACT);
        EXPECT(st.num_batches_tracked == 0, "%s: eval forward counted a batch", name);
    }
    backward(&c, y);
    expect_grad(&c, "dx", x, REDUCE);
    expect_grad(&c, "dweight", w, REDUCE);
    expect_grad(&c, "dbias", b, REDUCE);
    end(&c);
}

static void test_maxpool(const char *name) {
    Case c;
    begin(&c, name);
    Pool2dParams p = {.k_h = param(&c, 0),
                      .k_w = param(&c, 1),
                      .stride_h = param(&c, 2),
                      .stride_w = param(&c, 3),
                      .pad_h = param(&c, 4),
                      .pad_w = param(&c, 5),
                      .ceil_mode = param(&c, 6) != 0};
    Tensor *x = leaf(&c, "x");
    Tensor *y = op_maxpool2d(&c.tape, x, p);
    expect_tensor(&c, "y", y, EXACT);
    backward(&c, y);
    expect_grad(&c, "dx", x, SUM);
    end(&c);
}

static void test_layernorm(const char *name) {
    Case c;
    begin(&c, name);
    Tensor *x = leaf(&c, "x"), *w = leaf(&c, "weight"), *b = leaf(&c, "bias");
    Tensor *y = op_layernorm(&c.tape, x, w, b, arr(&c, "params")->data[0]);
    expect_tensor(&c, "y", y, REDUCE);
    backward(&c, y);
    expect_grad(&c, "dx", x, REDUCE);
    expect_grad(&c, "dweight", w, REDUCE);
    expect_grad(&c, "dbias", b, REDUCE);
    end(&c);
}

// nn.MultiheadAttention = op_mha_core + op_linear(out_proj); query and key are one tensor.
static void test_mha(const char *name) {
    Case c;
    begin(&c, name);
    Tensor *qk = leaf(&c, "qk"), *v = leaf(&c, "value");
    Tensor *in_w = leaf(&c, "in_proj_weight"), *in_b = leaf(&c, "in_proj_bias");
    Tensor *out_w = leaf(&c, "out_proj_weight"), *out_b = leaf(&c, "out_proj_bias");
    uint8_t *mask = NULL;
    const GoldenArray *m = golden_find(&G, "%s/mask", name);
    if (m) {
        mask = arena_alloc_data(&c.arena, (size_t)m->n);
        for (int64_t i = 0; i < m->n; i++)
            mask[i] = m->data[i] != 0;
    }
    Tensor *h = op_mha_core(&c.tape, qk, qk, v, in_w, in_b, param(&c, 0), mask);
    Tensor *y = op_linear(&c.tape, h, out_w, out_b);
    expect_tensor(&c, "y", y, REDUCE);
    backward(&c, y);
    expect_grad(&c, "dqk", qk, REDUCE);
    expect_grad(&c, "dvalue", v, REDUCE);
    expect_grad(&c, "din_proj_weight", in_w, REDUCE);
    expect_grad(&c, "din_proj_bias", in_b, REDUCE);
    expect_grad(&c, "dout_proj_weight", out_w, REDUCE);
    expect_grad(&c, "dout_proj_bias", out_b, REDUCE);
    end(&c);
}

typedef enum Unary {
    U_GELU,
    U_SIGMOID,
    U_SILU,
    U_SOFTMAX,
    U_INVERSE_SIGMOID,
    U_UPSAMPLE,
    U_PAD
} Unary;

static void test_unary(const char *name, Unary op, Tol fwd, Tol bwd) {
    Case c;
    begin(&c, name);
    Tensor *x = leaf(&c, "x"), *y = NULL;
    switch (op) {
    case U_GELU:
        y = op_gelu(&c.tape, x);
        break;
    case U_SIGMOID:
        y = op_sigmoid(&c.tape, x);
        break;
    case U_SILU:
        y = op_silu(&c.tape, x);
        break;
    case U_SOFTMAX:
        y = op_softmax(&c.tape, x, -1);
        break;
    case U_INVERSE_SIGMOID:
        y = op_inverse_sigmoid(&c.tape, x);
        break;
    case U_UPSAMPLE:
        y = op_upsample_nearest2d(&c.tape, x, param(&c, 0));
        break;
    case U_PAD:
        y = op_pad2d(&c.tape, x, param(&c, 0), param(&c, 1), param(&c, 2), param(&c, 3));
        break;
    }
    expect_tensor(&c, "y", y, fwd);
    backward(&c, y);
    expect_grad(&c, "dx", x, bwd);
    end(&c);
}

int main(void) {
    if (golden_load(&G, "tests/golden/ops.bin") != 0) {
        EXPECT(0, "cannot load tests/golden/ops.bin");
        return expect_report();
    }
    test_grid_sample("grid_sample/a");
    test_grid_sample("grid_sample/b");
    test_msdeform_attn("msdeform_attn/a");
    test_msdeform_attn("msdeform_attn/b");
    test_batchnorm("batchnorm_train/a", true);
    test_batchnorm("batchnorm_train/b", true);
    test_batchnorm("batchnorm_eval/a", false);
    test_batchnorm("batchnorm_eval/b", false);
    const char *pools[] = {"k2s1p0c1_5x5", "k2s1p0c1_6x6", "k3s2p1c0_6x7",
                           "k3s2p1c1_6x7", "k3s2p0c1_6x6", "k2s2p1c1_5x5"};
    for (int i = 0; i < 6; i++) {
        char name[64];
        snprintf(name, sizeof name, "maxpool/%s", pools[i]);
        test_maxpool(name);
    }
    test_layernorm("layernorm/a");
    test_layernorm("layernorm/b");
    test_mha("mha/nomask");
    test_mha("mha/mask");
    test_unary("gelu", U_GELU, ELEM, ELEM);
    test_unary("sigmoid", U_SIGMOID, ELEM, ELEM);
    test_unary("silu", U_SILU, ELEM, ELEM);
    test_unary("softmax/a", U_SOFTMAX, REDUCE, REDUCE);
    test_unary("softmax/b", U_SOFTMAX, REDUCE, REDUCE);
    test_unary("inverse_sigmoid/a", U_INVERSE_SIGMOID, ELEM, ELEM);
    test_unary("inverse_sigmoid/bounds", U_INVERSE_SIGMOID, ELEM, ELEM);
    test_unary("upsample_nearest", U_UPSAMPLE, EXACT, SUM);
    test_unary("pad", U_PAD, EXACT, EXACT);
    golden_free(&G);
    return expect_report();
}
