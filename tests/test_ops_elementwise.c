/* test_ops_elementwise.c -- unary ops, dropout, broadcasting binary ops, BCE with logits,
 * sum/mean and softmax: forward values against hand-computed numbers (checked against
 * PyTorch 1.13) and naive loops, gradients at kinks as PyTorch defines them, every backward
 * against finite differences (points kept away from kinks and ties), and big broadcast and
 * reduction cases against naive references on 1 and 2 threads (results must be identical). */
#include <math.h>

#include "tests/expect.h"
#include "tests/gradcheck.h"
#include "trainer/ops/ops.h"

#include "kernels/base.h"

static Arena leaves; // test inputs, alive for the whole run

static Tensor *leaf(int ndim, const int64_t *shape, uint64_t seed, float lo, float hi) {
    Tensor *x = tensor_leaf(&leaves, ndim, shape);
    gc_fill_uniform(x, seed, lo, hi);
    return x;
}

static Tensor *leaf_values(int64_t n, const float *v) {
    Tensor *x = tensor_leaf(&leaves, 1, (int64_t[]){n});
    for (int64_t i = 0; i < n; i++)
        x->data[i] = v[i];
    return x;
}

// |x| in [lo, hi] with a pseudo-random sign: keeps points off a kink at 0.
static void away_from_zero(Tensor *x, uint64_t seed, float lo, float hi) {
    gc_fill_uniform(x, seed, lo, hi);
    for (int64_t i = 0; i < x->n; i++)
        if ((i * 2654435761u + seed) % 3 == 0) x->data[i] = -x->data[i];
}

// Runs backward of sum(y) and returns x's gradient (y's elements weighted 1).
static const float *grad_of_sum(Tape *t, Tensor *y, Tensor *x) {
    x->grad_defined = false;
    EXPECT(tape_backward(t, op_sum(t, y), NULL) == 0, "backward failed");
    return x->grad;
}

static const GcOptions gc_train = {.training = true};

// ---- unary ops ----
typedef Tensor *(*UnaryFn)(Tape *t, Tensor *x);

static void expect_unary(const char *name, UnaryFn fn, int64_t n, const float *in,
                         const double *want, const double *want_grad) {
    GcTape f;
    Tape *t = gc_tape_init(&f, 1);
    Tensor *x = leaf_values(n, in);
    Tensor *y = fn(t, x);
    EXPECT(y->ndim == 1 && y->shape[0] == n, "%s: output shape", name);
    for (int64_t i = 0; i < n; i++) {
        EXPECT_NEAR(y->data[i], want[i], 1e-6, 1e-6);
        if (fabs(y->data[i] - want[i]) > 1e-6 + 1e-6 * fabs(want[i]))
            fprintf(stderr, "  %s(%g)\n", name, (double)in[i]);
    }
    const float *g = grad_of_sum(t, y, x);
    for (int64_t i = 0; i < n && want_grad; i++) {
        EXPECT_NEAR(g[i], want_grad[i], 1e-6, 1e-6);
        if (fabs(g[i] - want_grad[i]) > 1e-6 + 1e-6 * fabs(want_grad[i]))
            fprintf(stderr, "  %s'(%g)\n", name, (double)in[i]);
    }
    gc_tape_free(&f);
}

// relu_ (in place on a fresh output, as conv blocks use it) against relu: the same values and
// the same gradient bit for bit, with no buffer of its own.
static void test_relu_in_place(void) {
    const int64_t n = 1 << 16;       // over PAR_MIN: the threaded loop reads and writes one buffer
    float *vals[2], *grads[2];       // [relu, relu_]
    for (int in_place = 0; in_place < 2; in_place++) {
        GcTape f;
        Tape *t = gc_tape_init(&f, 2);
        Tensor *x = tensor_leaf(&leaves, 1, (int64_t[]){n});
        away_from_zero(x, 7, 0.01f, 2.0f);
        Tensor *pre = op_scale(t, x, 1.5f); // a fresh output whose backward reads no data
        Tensor *y = in_place ? op_relu_(t, pre) : op_relu(t, pre);
        if (in_place) EXPECT(y->data == pre->data && !y->owns_data, "relu_ allocated a buffer");
        vals[in_place] = tensor_host_copy(y);
        const float *g = grad_of_sum(t, op_mul(t, y, y), x); // d/dx sum(relu(1.5x)^2)
        grads[in_place] = xmalloc(sizeof(float) * (size_t)n);
        memcpy(grads[in_place], g, sizeof(float) * (size_t)n);
        gc_tape_free(&f);
    }
    EXPECT(!memcmp(vals[0], vals[1], sizeof(float) * (size_t)n), "relu_ values differ from relu's");
    EXPECT(!memcmp(grads[0], grads[1], sizeof(float) * (size_t)n),
           "relu_ gradient differs from relu's");
    for (int k = 0; k < 2; k++) free(vals[k]), free(grads[k]);
}

static Tensor *pow3(Tape *t, Tensor *x) {
    return op_pow_scalar(t, x, 3.0f);
}
static Tensor *pow_half(Tape *t, Tensor *x) {
    return op_pow_scalar(t, x, 0.5f);
}
static Tensor *pow_zero(Tape *t, Tensor *x) {
    return op_pow_scalar(t, x, 0.0f);
}
static Tensor *clamp_fixed(Tape *t, Tensor *x) {
    return op_clamp(t, x, -0.5f, 0.7f);
}
static Tensor *clamp_low(Tape *t, Tensor *x) {
    return op_clamp(t, x, 0.0f, INFINITY);
}
static Tensor *scale_fixed(Tape *t, Tensor *x) {
    return op_scale(t, x, -2.5f);
}
static Tensor *add_fixed(Tape *t, Tensor *x) {
    return op_add_scalar(t, x, 0.75f);
}

// Values from the formulas (and PyTorch 1.13). The gradients at kinks are PyTorch's
// conventions: relu'(0) = 0, |x|'(0) = 0, a clamp passes at its bounds (inclusive).
static void test_unary_values(void) {
    expect_unary("relu", op_relu, 3, (float[]){-1, 0, 2}, (double[]){0, 0, 2}, (double[]){0, 0, 1});
    expect_unary("gelu", op_gelu, 4, (float[]){1, -1, 0.5f, 0},
                 (double[]){0.8413447460685429, -0.15865525393145707, 0.34573123063700656, 0},
                 (double[]){1.0833154705876864, -0.08331547058768642, 0.8674951, 0.5});
    expect_unary("silu", op_silu, 2, (float[]){1, 0}, (double[]){0.7310585786300049, 0},
                 (double[]){0.9276705118714869, 0.5});
    expect_unary("sigmoid", op_sigmoid, 2, (float[]){0, 2}, (double[]){0.5, 0.8807970779778823},
                 (double[]){0.25, 0.10499358540350662});
    expect_unary("exp", op_exp, 2, (float[]){0, 1}, (double[]){1, M_E}, (double[]){1, M_E});
    expect_unary("log", op_log, 2, (float[]){1, 4}, (double[]){0, log(4.0)}, (double[]){1, 0.25});
    expect_unary("abs", op_abs, 3, (float[]){-3, 0, 2}, (double[]){3, 0, 2}, (double[]){-1, 0, 1});
    expect_unary("neg", op_neg, 2, (float[]){-3, 2}, (double[]){3, -2}, (double[]){-1, -1});
    expect_unary("pow3", pow3, 2, (float[]){2, -1}, (double[]){8, -1}, (double[]){12, 3});
    expect_unary("pow0.5", pow_half, 2, (float[]){4, 0.25f}, (double[]){2, 0.5},
                 (double[]){0.25, 1});
    expect_unary("pow0", pow_zero, 2, (float[]){0, 3}, (double[]){1, 1}, (double[]){0, 0});
    expect_unary("clamp", clamp_fixed, 5, (float[]){-1, -0.5f, 0.2f, 0.7f, 0.8f},
                 (double[]){-0.5, -0.5, 0.2f, 0.7f, 0.7f}, (double[]){0, 1, 1, 1, 0});
    expect_unary("clamp_min", clamp_low, 3, (float[]){-1, 0, 1e30f}, (double[]){0, 0, 1e30f},
                 (double[]){0, 1, 1});
    expect_unary("scale", scale_fixed, 2, (float[]){2, -1}, (double[]){-5, 2.5},
                 (double[]){-2.5, -2.5});
    expect_unary("add_scalar", add_fixed, 2, (float[]){2, -1}, (double[]){2.75, -0.25},
                 (double[]){1, 1});
    // inverse_sigmoid: the clamps decide which path carries the gradient. Inside it is
    // 1/(x(1-x)); at 0 and 1 only the other clamp's path passes (1); at x = eps both pass
    // (1/eps + 1/(1-eps) = 100001, PyTorch 1.13); outside [0, 1] nothing does.
    double big = log(1.0 / 1e-5f);
    expect_unary("inverse_sigmoid", op_inverse_sigmoid, 7,
                 (float[]){0.5f, 0.25f, 0, 1, 1.5f, -0.5f, 1e-5f},
                 (double[]){0, log(1.0 / 3.0), -big, big, big, -big, log(1e-5f / (1 - 1e-5f))},
                 (double[]){4, 16.0 / 3.0, 1, 1, 0, 0, 100001});
}

// A NaN stays NaN through clamp, as in PyTorch (a plain fminf/fmaxf would drop it).
static void test_clamp_nan(void) {
    GcTape f;
    Tape *t = gc_tape_init(&f, 1);
    Tensor *x = leaf_values(1, (float[]){NAN});
    EXPECT(isnan(op_clamp(t, x, 0, 1)->data[0]), "clamp(NaN) is not NaN");
    gc_tape_free(&f);
}

// silu and sigmoid run on a vectorised exp (not libm's): over [-100, 100] and the special
// values, forward and gradient against PyTorch's formulas in double, on a tensor long enough
// for the threaded path, with identical results on 1 and 2 threads. relu's gradient is 0
// wherever x <= 0, even where dout is inf or NaN (threshold_backward selects).
#define ACT_N 100003
static void test_activation_range(void) {
    Tensor *x = tensor_leaf(&leaves, 1, (int64_t[]){ACT_N});
    for (int64_t i = 0; i < ACT_N; i++)
        x->data[i] = -100.0f + 200.0f * (float)i / (float)(ACT_N - 1);
    const float special[] = {-INFINITY, INFINITY, NAN, -87.0f, -86.5f, 88.7f, 88.8f, 0.0f};
    for (int k = 0; k < 8; k++)
        x->data[k * 977] = special[k];
    float *got[2][2]; // [threads - 1][silu, sigmoid], forward then gradient
    for (int th = 1; th <= 2; th++)
        for (int which = 0; which < 2; which++) {
            GcTape f;
            Tape *t = gc_tape_init(&f, th);
            Tensor *y = which ? op_sigmoid(t, x) : op_silu(t, x);
            float *keep = xmalloc(sizeof(float) * 2 * ACT_N);
            memcpy(keep, y->data, sizeof(float) * ACT_N);
            memcpy(keep + ACT_N, grad_of_sum(t, y, x), sizeof(float) * ACT_N);
            got[th - 1][which] = keep;
            gc_tape_free(&f);
        }
    int64_t bad = 0;
    for (int64_t i = 0; i < ACT_N; i++) {
        // PyTorch's formulas in double: silu(-inf) and silu'(+-inf) are NaN there too
        double v = x->data[i], s = 1.0 / (1.0 + exp(-v));
        double want[4] = {v / (1.0 + exp(-v)), s * (1 + v * (1 - s)), s, s * (1 - s)};
        float have[4] = {got[0][0][i], got[0][0][ACT_N + i], got[0][1][i], got[0][1][ACT_N + i]};
        for (int k = 0; k < 4; k++) {
            bool ok = isnan(want[k])   ? isnan(have[k])
                      : isinf(want[k]) ? have[k] == want[k]
                                       : fabs(have[k] - want[k]) <= 2e-6 + 1e-5 * fabs(want[k]);
            if (!ok && bad++ < 5)
                EXPECT(false, "activation %d at x = %g: %.9g, want %.9g", k, v, have[k], want[k]);
        }
    }
    EXPECT(bad == 0, "%lld activation values off", (long long)bad);
    for (int which = 0; which < 2; which++) {
        EXPECT(memcmp(got[0][which], got[1][which], sizeof(float) * 2 * ACT_N) == 0,
               "activation %d differs on 1 and 2 threads", which);
        free(got[0][which]);
        free(got[1][which]);
    }

    const float xr[4] = {-1, 0, -2, 3}, dr[4] = {INFINITY, NAN, -INFINITY, 2};
    float gr[4] = {0};
    KernelCtx kc = {.n_threads = 1};
    backend_need(DEV_CPU)->relu_bwd(&kc, gr, xr, dr, 4);
    EXPECT(gr[0] == 0 && gr[1] == 0 && gr[2] == 0 && gr[3] == 2, "relu grad %g %g %g %g", gr[0],
           gr[1], gr[2], gr[3]);
}

typedef struct UnaryCase {
    const char *name;
    UnaryFn fn;
    float lo, hi; // input range
    bool signed_; // |x| in [lo, hi] with random signs (kink at 0)
} UnaryCase;

static Tensor *fwd_unary(Tape *t, Tensor *const *in, void *user) {
    return ((const UnaryCase *)user)->fn(t, in[0]);
}

static Tensor *pow2(Tape *t, Tensor *x) {
    return op_pow_scalar(t, x, 2.0f);
}
static Tensor *pow_15(Tape *t, Tensor *x) {
    return op_pow_scalar(t, x, 1.5f);
}
static Tensor *pow_m1(Tape *t, Tensor *x) {
    return op_pow_scalar(t, x, -1.0f);
}
static Tensor *pow_m2(Tape *t, Tensor *x) {
    return op_pow_scalar(t, x, -2.0f);
}
static Tensor *pow_mhalf(Tape *t, Tensor *x) {
    return op_pow_scalar(t, x, -0.5f);
}
// Points inside (-0.5, 0.7) and outside, at least 0.05 from either bound.
static Tensor *clamp_wide(Tape *t, Tensor *x) {
    return op_clamp(t, x, -0.55f, 0.75f);
}

static void test_unary_grads(void) {
    static const UnaryCase cases[] = {
        {"relu", op_relu, 0.05f, 2, true},
        {"silu", op_silu, -4, 4, false},
        {"gelu", op_gelu, -4, 4, false},
        {"sigmoid", op_sigmoid, -5, 5, false},
        {"inverse_sigmoid", op_inverse_sigmoid, 0.15f, 0.85f, false}, // f''' ~ 2/x^3: FD error
        {"neg", op_neg, -2, 2, false},
        {"exp", op_exp, -2, 2, false},
        {"log", op_log, 0.3f, 3, false},
        {"abs", op_abs, 0.05f, 2, true},
        {"pow2", pow2, -2, 2, false},
        {"pow3", pow3, 0.3f, 2, true}, // the FD error h^2 swamps 3x^2 near 0
        {"pow1.5", pow_15, 0.2f, 2, false},
        {"pow0.5", pow_half, 0.2f, 2, false},
        {"pow-0.5", pow_mhalf, 0.3f, 2, false},
        {"pow-1", pow_m1, 0.3f, 2, true},
        {"pow-2", pow_m2, 0.3f, 2, true},
        {"clamp", clamp_fixed, 0, 0, false}, // filled below
        {"scale", scale_fixed, -2, 2, false},
        {"add_scalar", add_fixed, -2, 2, false},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        Tensor *x = leaf(3, (int64_t[]){3, 4, 5}, 10 + c, cases[c].lo, cases[c].hi);
        if (cases[c].signed_) away_from_zero(x, 10 + c, cases[c].lo, cases[c].hi);
        UnaryCase uc = cases[c];
        if (uc.fn == clamp_fixed) { // alternate points inside and outside, off the bounds
            uc.fn = clamp_wide;
            for (int64_t i = 0; i < x->n; i++)
                x->data[i] = -1.2f + 0.05f * (float)(i % 50) + 0.0125f;
        }
        EXPECT(gradcheck(uc.name, fwd_unary, &uc, &x, 1, gc_train) == 0, "gradcheck %s", uc.name);
    }
    // inverse_sigmoid outside [0, 1]: the gradient is 0 and finite differences agree.
    UnaryCase outside = {"inverse_sigmoid_outside", op_inverse_sigmoid, 0, 0, false};
    Tensor *x = leaf_values(4, (float[]){-0.5f, -0.1f, 1.1f, 1.7f});
    EXPECT(gradcheck(outside.name, fwd_unary, &outside, &x, 1, gc_train) == 0,
           "gradcheck inverse_sigmoid outside [0, 1]");
}

// ---- dropout ----
static void test_dropout(void) {
    GcTape f;
    Tape *t = gc_tape_init(&f, 2);
    const int64_t n = 100000;
    Tensor *x = leaf(1, (int64_t[]){n}, 3, 0.5f, 1.5f);
    const float p = 0.3f;

    Tensor *y = op_dropout(t, x, p, 42);
    int64_t zeros = 0;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        if (y->data[i] == 0.0f)
            zeros++;
        else if (fabsf(y->data[i] - x->data[i] / (1.0f - p)) > 1e-6f)
            bad++;
    }
    // Binomial(n, p): sd = sqrt(n p (1-p)) ~ 145; allow 5 sd.
    EXPECT(fabs((double)zeros - p * (double)n) < 5 * sqrt(n * p * (1 - p)),
           "dropout zeroed %lld of %lld, expected about %.0f", (long long)zeros, (long long)n,
           p * (double)n);
    EXPECT(bad == 0, "%d kept values are not x / (1 - p)", bad);

    // The gradient is the mask: dout * (kept ? 1/(1-p) : 0).
    const float *g = grad_of_sum(t, y, x);
    int gbad = 0;
    for (int64_t i = 0; i < n; i++) {
        float want = y->data[i] == 0.0f ? 0.0f : 1.0f / (1.0f - p);
        if (fabsf(g[i] - want) > 1e-6f) gbad++;
    }
    EXPECT(gbad == 0, "%d dropout gradients differ from the mask", gbad);

    // Determinism: the same seed gives the same mask (on another thread count too), another
    // seed another one.
    GcTape f1;
    Tape *t1 = gc_tape_init(&f1, 1);
    Tensor *y_same = op_dropout(t1, x, p, 42), *y_other = op_dropout(t1, x, p, 43);
    EXPECT(memcmp(y->data, y_same->data, sizeof(float) * (size_t)n) == 0,
           "dropout with the same seed differs");
    int64_t differ = 0;
    for (int64_t i = 0; i < n; i++)
        differ += (y->data[i] == 0) != (y_other->data[i] == 0);
    EXPECT(differ > n / 10, "dropout masks of seeds 42 and 43 differ in only %lld places",
           (long long)differ);
    gc_tape_free(&f1);

    // Identity (the same tensor, no node) in eval mode and for p == 0.
    int64_t nodes = t->n_nodes;
    EXPECT(op_dropout(t, x, 0.0f, 1) == x, "dropout p=0 is not the identity");
    t->training = false;
    EXPECT(op_dropout(t, x, 0.5f, 1) == x, "dropout in eval mode is not the identity");
    EXPECT(t->n_nodes == nodes, "identity dropout recorded a node");
    t->training = true;
    Tensor *all = op_dropout(t, x, 1.0f, 7);
    int nonzero = 0;
    for (int64_t i = 0; i < n; i++)
        nonzero += all->data[i] != 0.0f;
    EXPECT(nonzero == 0, "dropout p=1 kept %d values", nonzero);
    gc_tape_free(&f);
}

static Tensor *fwd_dropout(Tape *t, Tensor *const *in, void *user) {
    return op_dropout(t, in[0], 0.4f, 1234); // fixed seed: the same mask in every evaluation
}

static void test_dropout_grad(void) {
    Tensor *x = leaf(2, (int64_t[]){6, 7}, 4, -1, 1);
    EXPECT(gradcheck("dropout", fwd_dropout, NULL, &x, 1, gc_train) == 0, "gradcheck dropout");
}

// ---- binary ops with broadcasting ----
typedef Tensor *(*BinaryFn)(Tape *t, Tensor *a, Tensor *b);
typedef double (*RefFn)(double a, double b);

static double ref_add(double a, double b) {
    return a + b;
}
static double ref_sub(double a, double b) {
    return a - b;
}
static double ref_mul(double a, double b) {
    return a * b;
}
static double ref_div(double a, double b) {
    return a / b;
}
static double ref_max(double a, double b) {
    return a > b ? a : b;
}
static double ref_min(double a, double b) {
    return a < b ? a : b;
}

static const struct {
    const char *name;
    BinaryFn fn;
    RefFn ref;
} binops[] = {
    {"add", op_add, ref_add}, {"sub", op_sub, ref_sub},         {"mul", op_mul, ref_mul},
    {"div", op_div, ref_div}, {"maximum", op_maximum, ref_max}, {"minimum", op_minimum, ref_min},
};

typedef struct Shapes {
    int na, nb;
    int64_t a[4], b[4];
} Shapes;

static const Shapes patterns[] = {
    {3, 2, {2, 3, 4}, {3, 1}},          // (2,3,4) + (3,1)
    {2, 3, {3, 1}, {2, 3, 4}},          // the same, swapped
    {4, 4, {2, 3, 2, 2}, {1, 3, 1, 1}}, // (B,C,H,W) * (1,C,1,1)
    {2, 2, {3, 1}, {1, 4}},             // both broadcast: outer product
    {3, 0, {2, 3, 2}, {0}},             // tensor op scalar
    {0, 2, {0}, {3, 2}},                // scalar op tensor
    {2, 2, {3, 4}, {3, 4}},             // same shape
    {3, 3, {2, 1, 4}, {1, 3, 1}},       // alternating
    {3, 1, {2, 3, 4}, {4}},             // bias-like: inner dim kept
};

// out[i] = ref(a[ia], b[ib]) by explicit index arithmetic over the broadcast shape.
static void check_broadcast_forward(const char *name, RefFn ref, const Tensor *a, const Tensor *b,
                                    const Tensor *y) {
    int nd = y->ndim;
    for (int64_t i = 0; i < y->n; i++) {
        int64_t rem = i, ia = 0, ib = 0, sa = 1, sb = 1;
        for (int d = nd - 1; d >= 0; d--) {
            int64_t idx = rem % y->shape[d];
            rem /= y->shape[d];
            int da = d - (nd - a->ndim), db = d - (nd - b->ndim);
            if (da >= 0) {
                if (a->shape[da] > 1) ia += idx * sa;
                sa *= a->shape[da];
            }
            if (db >= 0) {
                if (b->shape[db] > 1) ib += idx * sb;
                sb *= b->shape[db];
            }
        }
        double want = ref(a->data[ia], b->data[ib]);
        EXPECT(fabs(y->data[i] - want) <= 1e-6 * (1 + fabs(want)), "%s: out[%lld] = %g, want %g",
               name, (long long)i, (double)y->data[i], want);
    }
}

typedef struct BinCase {
    BinaryFn fn;
} BinCase;

static Tensor *fwd_binary(Tape *t, Tensor *const *in, void *user) {
    return ((const BinCase *)user)->fn(t, in[0], in[1]);
}

static void test_binary(void) {
    for (size_t p = 0; p < sizeof patterns / sizeof patterns[0]; p++) {
        const Shapes *s = &patterns[p];
        for (size_t o = 0; o < sizeof binops / sizeof binops[0]; o++) {
            // Operands in [0.5, 2] and [-2.5, -0.5] + 3 = [0.5, 2.5]: positive (div) and
            // with a and b drawn independently; ties for max/min are avoided below.
            Tensor *a = leaf(s->na, s->a, 100 + p, 0.5f, 2.0f);
            Tensor *b = leaf(s->nb, s->b, 200 + p, 0.5f, 2.5f);
            if (binops[o].fn == op_maximum || binops[o].fn == op_minimum)
                for (int64_t i = 0; i < b->n; i++) // b on a grid of step 0.1 + 0.05, a off it
                    b->data[i] = 0.55f + 0.1f * (float)((i * 7) % 17);
            if (binops[o].fn == op_maximum || binops[o].fn == op_minimum)
                for (int64_t i = 0; i < a->n; i++)
                    a->data[i] = 0.5f + 0.1f * (float)((i * 5) % 19);
            GcTape f;
            Tape *t = gc_tape_init(&f, 1);
            Tensor *y = binops[o].fn(t, a, b);
            check_broadcast_forward(binops[o].name, binops[o].ref, a, b, y);
            gc_tape_free(&f);
            BinCase bc = {binops[o].fn};
            char name[64];
            snprintf(name, sizeof name, "%s pattern %zu", binops[o].name, p);
            EXPECT(gradcheck(name, fwd_binary, &bc, (Tensor *[]){a, b}, 2, gc_train) == 0,
                   "gradcheck %s", name);
        }
    }
}

// Ties split the gradient half/half; x op x gets both contributions; edges are (a, b).
static void test_binary_special(void) {
    GcTape f;
    Tape *t = gc_tape_init(&f, 1);
    Tensor *a = leaf_values(3, (float[]){1, 2, 3}), *b = leaf_values(3, (float[]){1, 1, 4});
    Tensor *y = op_maximum(t, a, b);
    EXPECT(y->grad_fn && y->grad_fn->in[0] == a && y->grad_fn->in[1] == b, "maximum edges");
    EXPECT(tape_backward(t, op_sum(t, y), NULL) == 0, "backward failed");
    const float want_a[3] = {0.5f, 1, 0}, want_b[3] = {0.5f, 0, 1};
    for (int i = 0; i < 3; i++) {
        EXPECT(a->grad[i] == want_a[i], "maximum da[%d] = %g, want %g", i, (double)a->grad[i],
               (double)want_a[i]);
        EXPECT(b->grad[i] == want_b[i], "maximum db[%d] = %g, want %g", i, (double)b->grad[i],
               (double)want_b[i]);
    }
    a->grad_defined = b->grad_defined = false;
    EXPECT(tape_backward(t, op_sum(t, op_minimum(t, a, b)), NULL) == 0, "backward failed");
    const float mina[3] = {0.5f, 0, 1}, minb[3] = {0.5f, 1, 0};
    for (int i = 0; i < 3; i++)
        EXPECT(a->grad[i] == mina[i] && b->grad[i] == minb[i], "minimum grads at %d: %g %g", i,
               (double)a->grad[i], (double)b->grad[i]);
    // d(x*x)/dx = 2x, d(x/x)/dx = 0.
    const float *g = grad_of_sum(t, op_mul(t, a, a), a);
    for (int i = 0; i < 3; i++)
        EXPECT_NEAR(g[i], 2 * a->data[i], 0, 1e-7);
    g = grad_of_sum(t, op_div(t, a, a), a);
    for (int i = 0; i < 3; i++)
        EXPECT_NEAR(g[i], 0, 1e-7, 0);
    // NaN propagates through maximum.
    Tensor *nan = leaf_values(3, (float[]){NAN, 0, 5});
    Tensor *m = op_maximum(t, nan, b);
    EXPECT(isnan(m->data[0]) && m->data[1] == 1 && m->data[2] == 5, "maximum with NaN");
    gc_tape_free(&f);
}

// A binary op's forward and both gradients on n_threads, for the big-tensor paths.
static void run_big(int n_threads, BinaryFn fn, Tensor *a, Tensor *b, float *y, float *ga,
                    float *gb) {
    GcTape f;
    Tape *t = gc_tape_init(&f, n_threads);
    a->grad_defined = b->grad_defined = false;
    Tensor *out = fn(t, a, b);
    memcpy(y, out->data, sizeof(float) * (size_t)out->n);
    EXPECT(tape_backward(t, op_sum(t, out), NULL) == 0, "backward failed");
    memcpy(ga, a->grad, sizeof(float) * (size_t)a->n);
    memcpy(gb, b->grad, sizeof(float) * (size_t)b->n);
    gc_tape_free(&f);
}

// Broadcasts large enough for the threaded and tiled paths: the gradients are sums of the
// other operand over the broadcast dims, computed here in double.
static void test_binary_big(void) {
    static const Shapes big[] = {
        {4, 4, {2, 16, 40, 40}, {1, 16, 1, 1}}, // per-channel scale: reduced inner dim
        {2, 1, {70, 2000}, {2000}},             // bias-like: kept inner dim > tile
        {2, 2, {3000, 3}, {1, 3}},              // many short rows
        {3, 3, {2, 3000, 16}, {2, 3000, 16}},   // same shape
    };
    for (size_t p = 0; p < sizeof big / sizeof big[0]; p++) {
        Tensor *a = leaf(big[p].na, big[p].a, 300 + p, -1, 1);
        Tensor *b = leaf(big[p].nb, big[p].b, 400 + p, 0.5f, 1.5f);
        int64_t n = MAX(a->n, b->n);
        float *y1 = xmalloc(sizeof(float) * (size_t)n), *y2 = xmalloc(sizeof(float) * (size_t)n);
        float *ga1 = xmalloc(sizeof(float) * (size_t)a->n),
              *ga2 = xmalloc(sizeof(float) * (size_t)a->n);
        float *gb1 = xmalloc(sizeof(float) * (size_t)b->n),
              *gb2 = xmalloc(sizeof(float) * (size_t)b->n);
        run_big(1, op_mul, a, b, y1, ga1, gb1);
        run_big(2, op_mul, a, b, y2, ga2, gb2);
        EXPECT(memcmp(y1, y2, sizeof(float) * (size_t)n) == 0 &&
                   memcmp(ga1, ga2, sizeof(float) * (size_t)a->n) == 0 &&
                   memcmp(gb1, gb2, sizeof(float) * (size_t)b->n) == 0,
               "big pattern %zu: 1 and 2 threads differ", p);
        // d sum(a*b)/db[j] = sum of a over the elements that use b[j]; likewise for a.
        double *wb = xcalloc((size_t)b->n, sizeof(double)),
               *wa = xcalloc((size_t)a->n, sizeof(double));
        int64_t inner_b = big[p].b[big[p].nb - 1];
        for (int64_t i = 0; i < n; i++) {
            int64_t ib;
            if (p == 0)
                ib = (i / 1600) % 16;
            else if (p == 3)
                ib = i;
            else
                ib = i % inner_b;
            wb[ib] += a->data[i];
            wa[i] += b->data[ib];
            EXPECT_NEAR(y1[i], (double)a->data[i] * b->data[ib], 1e-6, 1e-6);
        }
        for (int64_t j = 0; j < b->n; j++)
            EXPECT_NEAR(gb1[j], wb[j], 1e-4, 1e-5);
        for (int64_t i = 0; i < a->n; i++)
            EXPECT_NEAR(ga1[i], wa[i], 1e-6, 1e-6);
        free(wa), free(wb), free(y1), free(y2), free(ga1), free(ga2), free(gb1), free(gb2);
    }
}

// ---- BCE with logits ----
static void test_bce(void) {
    GcTape f;
    Tape *t = gc_tape_init(&f, 1);
    Tensor *x = leaf_values(5, (float[]){0, 2, -100, 100, -1});
    Tensor *y = leaf_values(5, (float[]){0.5f, 1, 0, 0, 0.25f});
    Tensor *l = op_bce_with_logits(t, x, y);
    // max(x,0) - x y + log(1 + exp(-|x|)); the +-100 cases must not overflow.
    const double want[5] = {log(2.0), log1p(exp(-2.0)), 0, 100, 0.25 + log1p(exp(-1.0))};
    for (int i = 0; i < 5; i++)
        EXPECT_NEAR(l->data[i], want[i], 1e-6, 1e-6);
    EXPECT(tape_backward(t, op_sum(t, l), NULL) == 0, "backward failed");
    for (int i = 0; i < 5; i++) {
        double s = 1 / (1 + exp(-(double)x->data[i]));
        EXPECT_NEAR(x->grad[i], s - y->data[i], 1e-6, 1e-6);
        EXPECT_NEAR(y->grad[i], -x->data[i], 1e-6, 1e-6);
    }
    gc_tape_free(&f);
    Tensor *xs = leaf(2, (int64_t[]){4, 6}, 5, -3, 3), *ys = leaf(2, (int64_t[]){4, 6}, 6, 0, 1);
    BinCase bc = {op_bce_with_logits};
    EXPECT(gradcheck("bce_with_logits", fwd_binary, &bc, (Tensor *[]){xs, ys}, 2, gc_train) == 0,
           "gradcheck bce_with_logits");
}

// ---- reductions ----
typedef struct DimCase {
    int dim;
    bool keepdim, mean;
} DimCase;

static Tensor *fwd_reduce_dim(Tape *t, Tensor *const *in, void *user) {
    const DimCase *c = user;
    return c->mean ? op_mean_dim(t, in[0], c->dim, c->keepdim)
                   : op_sum_dim(t, in[0], c->dim, c->keepdim);
}

static Tensor *fwd_sum(Tape *t, Tensor *const *in, void *user) {
    return op_sum(t, in[0]);
}
static Tensor *fwd_mean(Tape *t, Tensor *const *in, void *user) {
    return op_mean(t, in[0]);
}

static void test_reductions(void) {
    GcTape f;
    Tape *t = gc_tape_init(&f, 1);
    // x (2,3,2) = 0..11
    Tensor *x = tensor_leaf(&leaves, 3, (int64_t[]){2, 3, 2});
    for (int i = 0; i < 12; i++)
        x->data[i] = (float)i;
    EXPECT(op_sum(t, x)->data[0] == 66 && op_sum(t, x)->ndim == 0, "sum of 0..11");
    EXPECT(op_mean(t, x)->data[0] == 5.5f, "mean of 0..11");
    Tensor *s1 = op_sum_dim(t, x, 1, false); // (2,2): [[6,9],[24,27]]
    EXPECT(s1->ndim == 2 && s1->shape[0] == 2 && s1->shape[1] == 2, "sum_dim(1) shape");
    const float want1[4] = {6, 9, 24, 27};
    for (int i = 0; i < 4; i++)
        EXPECT(s1->data[i] == want1[i], "sum_dim(1)[%d] = %g", i, (double)s1->data[i]);
    Tensor *m2 = op_mean_dim(t, x, -1, true); // (2,3,1): 0.5, 2.5, ...
    EXPECT(m2->ndim == 3 && m2->shape[2] == 1, "mean_dim(-1, keepdim) shape");
    for (int i = 0; i < 6; i++)
        EXPECT(m2->data[i] == 2 * i + 0.5f, "mean_dim(-1)[%d]", i);
    Tensor *s0 = op_sum_dim(t, x, 0, true); // (1,3,2)
    EXPECT(s0->ndim == 3 && s0->shape[0] == 1, "sum_dim(0, keepdim) shape");
    for (int i = 0; i < 6; i++)
        EXPECT(s0->data[i] == 2 * i + 6, "sum_dim(0)[%d]", i);
    // mean's gradient is 1/n everywhere
    const float *g = grad_of_sum(t, op_mean_dim(t, x, 1, false), x);
    for (int i = 0; i < 12; i++)
        EXPECT_NEAR(g[i], 1.0 / 3, 1e-7, 0);
    gc_tape_free(&f);

    Tensor *xg = leaf(3, (int64_t[]){3, 4, 5}, 7, -1, 1);
    EXPECT(gradcheck("sum", fwd_sum, NULL, &xg, 1, gc_train) == 0, "gradcheck sum");
    EXPECT(gradcheck("mean", fwd_mean, NULL, &xg, 1, gc_train) == 0, "gradcheck mean");
    for (int d = -3; d < 3; d++)
        for (int k = 0; k < 4; k++) {
            DimCase c = {d, k & 1, k & 2};
            EXPECT(gradcheck(c.mean ? "mean_dim" : "sum_dim", fwd_reduce_dim, &c, &xg, 1,
                             gc_train) == 0,
                   "gradcheck %s dim %d keepdim %d", c.mean ? "mean_dim" : "sum_dim", d, c.keepdim);
        }
}

// Big sums: exact in double where a float running sum drifts, identical on 1 and 2 threads.
static void test_reductions_big(void) {
    const int64_t n = 1 << 20;
    Tensor *x = tensor_leaf(&leaves, 2, (int64_t[]){1024, 1024});
    for (int64_t i = 0; i < n; i++)
        x->data[i] = 0.1f;
    double exact = (double)n * (double)0.1f;
    float r[2][3];
    for (int th = 1; th <= 2; th++) {
        GcTape f;
        Tape *t = gc_tape_init(&f, th);
        r[th - 1][0] = op_sum(t, x)->data[0];
        r[th - 1][1] = op_sum_dim(t, x, 0, false)->data[17];
        r[th - 1][2] = op_mean_dim(t, x, 1, false)->data[5];
        gc_tape_free(&f);
    }
    EXPECT(r[0][0] == (float)exact, "sum of 2^20 x 0.1f = %.9g, want %.9g", (double)r[0][0], exact);
    EXPECT(r[0][1] == (float)(1024 * (double)0.1f), "column sum %.9g", (double)r[0][1]);
    EXPECT(r[0][2] == 0.1f, "row mean %.9g", (double)r[0][2]);
    EXPECT(memcmp(r[0], r[1], sizeof r[0]) == 0, "reductions differ on 1 and 2 threads");
}

// ---- softmax ----
static Tensor *fwd_softmax(Tape *t, Tensor *const *in, void *user) {
    return op_softmax(t, in[0], -1);
}

static void test_softmax(void) {
    GcTape f;
    Tape *t = gc_tape_init(&f, 1);
    // softmax(0, ln 2, ln 3) = (1, 2, 3) / 6; huge logits must not overflow.
    Tensor *x = tensor_leaf(&leaves, 2, (int64_t[]){2, 3});
    const float v[6] = {0, (float)log(2.0), (float)log(3.0), 1000, 1001, 999};
    memcpy(x->data, v, sizeof v);
    Tensor *y = op_softmax(t, x, 1);
    for (int j = 0; j < 3; j++)
        EXPECT_NEAR(y->data[j], (j + 1) / 6.0, 1e-6, 0);
    double z = 1 + exp(1.0) + exp(-1.0);
    EXPECT_NEAR(y->data[3], 1 / z, 1e-6, 0);
    EXPECT_NEAR(y->data[4], exp(1.0) / z, 1e-6, 0);
    gc_tape_free(&f);

    Tensor *xr = leaf(3, (int64_t[]){3, 5, 17}, 8, -4, 4);
    t = gc_tape_init(&f, 1);
    Tensor *yr = op_softmax(t, xr, -1);
    for (int r = 0; r < 15; r++) {
        double s = 0;
        for (int j = 0; j < 17; j++) {
            EXPECT(yr->data[r * 17 + j] > 0, "softmax output not positive");
            s += yr->data[r * 17 + j];
        }
        EXPECT_NEAR(s, 1, 1e-6, 0);
    }
    gc_tape_free(&f);
    EXPECT(gradcheck("softmax", fwd_softmax, NULL, &xr, 1, gc_train) == 0, "gradcheck softmax");
}

// A first gradient is written or taken, later ones added (tape_grad_fresh, tape_grad_to_write,
// tape_grad_take): x feeds relu, silu, a double reshape and sub, and relu(x) feeds add and
// sub, so each op's backward meets x's (and relu(x)'s) gradient both fresh and already holding
// a sum; the outer reshape and the add hand their gradient buffer on, the root's stays. x is a leaf whose
// stale buffer holds 1e6 (grad_defined false: the first write must replace it, not add to it).
// loss = sum(concat([relu(x) + silu(x), x reshaped], 1)) + sum(x - relu(x)), so
// dx = silu'(x) + 1 + 1 (relu(x)'s gradient is 1 - 1 = 0).
static void test_first_gradient_written(void) {
    for (int threads = 1; threads <= 2; threads++) {
        GcTape f;
        Tape *t = gc_tape_init(&f, threads);
        Tensor *x = leaf(2, (int64_t[]){2, 6}, 41, -2.0f, 2.0f);
        for (int64_t i = 0; i < x->n; i++) x->grad[i] = 1e6f;
        x->grad_defined = false;
        Tensor *a = op_relu(t, x);
        Tensor *c = op_add(t, op_silu(t, x), a); // silu(x) takes c's gradient buffer
        Tensor *d = op_reshape(t, op_reshape(t, x, 2, (int64_t[]){3, 4}), 2, (int64_t[]){2, 6});
        Tensor *cat = op_concat(t, (Tensor *[]){c, d}, 2, 1);
        Tensor *loss = op_add(t, op_sum(t, cat), op_sum(t, op_sub(t, x, a)));
        EXPECT(tape_backward(t, loss, NULL) == 0, "backward failed");
        EXPECT(x->grad_defined, "x's gradient is defined");
        EXPECT(loss->grad && loss->grad[0] == 1.0f, "the root keeps its gradient");
        for (int64_t i = 0; i < x->n; i++) {
            double v = x->data[i], s = 1.0 / (1.0 + exp(-v));
            EXPECT_NEAR(x->grad[i], s * (1.0 + v * (1.0 - s)) + 2.0, 1e-6, 1e-6);
        }
        gc_tape_free(&f);
    }
}

int main(void) {
    arena_init(&leaves, DEV_CPU, 1 << 24);
    test_first_gradient_written();
    test_unary_values();
    test_relu_in_place();
    test_clamp_nan();
    test_activation_range();
    test_unary_grads();
    test_dropout();
    test_dropout_grad();
    test_binary();
    test_binary_special();
    test_binary_big();
    test_bce();
    test_reductions();
    test_reductions_big();
    test_softmax();
    arena_free(&leaves);
    return expect_report();
}
