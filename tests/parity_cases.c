/* parity_cases.c -- the case table of the parity harness (tests/parity.h): every Backend field
 * is called by at least one row (test_parity --list), at odd sizes, empty sizes, broadcasts and,
 * in the `special` rows, with NaN and infinities among the inputs. A case function reads its
 * shape from p->v (the meaning is in the comment above it), makes its buffers with the p*()
 * helpers and calls the kernels; a backward is run on the outputs of its forward on the same
 * backend, its gradients starting at nonzero values (accumulation checked). */
#include "tests/parity.h"

#include <math.h>
#include <stdlib.h>

#include "kernels/base.h"

// Tolerances: atol, rtol and the reason, for the rows below.
#define EXACT                                                                                      \
    0.0, 0.0, "data movement or one correctly rounded IEEE operation per element: bit for bit"
#define LIBM                                                                                       \
    1e-6, 1e-5,                                                                                    \
        "one libm call (exp, log, erf, pow: CUDA's are within 1-4 ulp of glibc's) and a "          \
        "few float steps after it"
#define SUM                                                                                        \
    1e-6, 1e-5,                                                                                    \
        "sums in double in another order (block trees, chunks): the float result moves "           \
        "by an ulp at most"
#define FSUM                                                                                       \
    1e-5, 1e-5,                                                                                    \
        "float sums of up to a few hundred terms in another order (the CPU's vector "              \
        "lanes, the GPU's trees), or terms that went through libm"
#define GEMM                                                                                       \
    1e-4, 1e-5,                                                                                    \
        "fp32 dot products of K <= 64 terms in |x| <= 2 in another order (cuBLAS's tiles, "        \
        "OpenBLAS's): K * 2^-24 * sum|a||b| <= 1e-4"
#define NONDET                                                                                     \
    1e-5, 1e-5,                                                                                    \
        "the value gradient is scattered by atomicAdd (as PyTorch's kernel): sums of a "           \
        "few float terms in run-dependent order"

#define KC (&p->kc)
#define BE (p->be)

// ---- memory: v = {n} ----
// Partial copies at odd offsets through to_host and to_device, the alignment alloc promises,
// free(NULL), set_threads, set_device (index 0 exists, a huge index fails with a reason).
static void c_memory(Pc *p) {
    const int64_t n = p->v[0];
    const float *x = pin(p, "x", n, -1, 1);
    float *o = pout(p, "copied", n);
    float *h = xmalloc(sizeof(float) * (size_t)n);
    BE->to_host(h, x + 1, sizeof(float) * (size_t)(n - 2));
    BE->to_device(o + 2, h, sizeof(float) * (size_t)(n - 3));
    free(h);
    void *a = BE->alloc(37);
    float aligned = (uintptr_t)a % 64 == 0 ? 1.0f : 0.0f;
    BE->free(a);
    BE->free(NULL);
    BE->set_threads(2);
    char why[200] = "";
    float device0 = BE->set_device(0, why, sizeof why) == 0 ? 1.0f : 0.0f; // index 0 exists
    float no_device = BE->set_device(1 << 20, why, sizeof why) == -1 && why[0] ? 1.0f : 0.0f;
    BE->to_device(pout(p, "aligned", 1), &aligned, sizeof aligned);
    BE->to_device(pout(p, "device0", 1), &device0, sizeof device0);
    BE->to_device(pout(p, "no_device", 1), &no_device, sizeof no_device);
}

// ---- basic: v = {n, value * 4} ----
static void c_fill(Pc *p) {
    float value = p->row->special ? NAN : (float)p->v[1] / 4;
    BE->fill(KC, pout(p, "out", p->v[0]), value, p->v[0]);
}

static void c_copy(Pc *p) {
    const float *x = pin_sp(p, "x", p->v[0], -3, 3);
    BE->copy(KC, pout(p, "out", p->v[0]), x, p->v[0]);
}

static void c_axpy(Pc *p) {
    const float *x = pin_sp(p, "x", p->v[0], -3, 3);
    BE->axpy(KC, pout(p, "out", p->v[0]), (float)p->v[1] / 4, x, p->v[0]);
}

// ---- GEMM ----
// v = {M, N, K, trans_a, trans_b, pad (added to every leading dimension), alpha * 4, beta * 4}
static void c_gemm(Pc *p) {
    const int64_t M = p->v[0], N = p->v[1], K = p->v[2], pad = p->v[5];
    const bool ta = p->v[3], tb = p->v[4];
    const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    const float *A = pin_sp(p, "A", (ta ? K : M) * lda, -1, 1);
    const float *B = pin(p, "B", (tb ? N : K) * ldb, -1, 1);
    float *C = pout_sp(p, "C", M * ldc);
    BE->gemm(KC, ta, tb, M, N, K, (float)p->v[6] / 4, A, lda, B, ldb, (float)p->v[7] / 4, C, ldc);
}

// v = {batch, M, N, K, trans_a, trans_b, broadcast (1: A, 2: B shared by the batch), gap
//      (added to each stride), alpha * 4, beta * 4}
static void c_gemm_batched(Pc *p) {
    const int64_t batch = p->v[0], M = p->v[1], N = p->v[2], K = p->v[3], gap = p->v[7];
    const bool ta = p->v[4], tb = p->v[5];
    const int64_t lda = ta ? M : K, ldb = tb ? K : N, ldc = N;
    const int64_t size_a = (ta ? K : M) * lda, size_b = (tb ? N : K) * ldb;
    const int64_t sa = p->v[6] == 1 ? 0 : size_a + gap, sb = p->v[6] == 2 ? 0 : size_b + gap;
    const int64_t sc = M * ldc + gap;
    const float *A = pin(p, "A", sa ? batch * sa : size_a, -1, 1);
    const float *B = pin(p, "B", sb ? batch * sb : size_b, -1, 1);
    float *C = pout(p, "C", batch * sc);
    BE->gemm_batched(KC, batch, ta, tb, M, N, K, (float)p->v[8] / 4, A, lda, sa, B, ldb, sb,
                     (float)p->v[9] / 4, C, ldc, sc);
}

// ---- unary activations: v = {n} (pow: e * 4; clamp: lo * 4, hi * 4, 99 meaning infinity) ----
typedef void (*UnaryFwd)(KernelCtx *, float *, const float *, int64_t);
typedef void (*UnaryBwd)(KernelCtx *, float *, const float *, const float *, int64_t);

// y = fwd(x); dx += bwd(x or y, dy), x uniform in [lo, hi).
static void unary(Pc *p, UnaryFwd fwd, UnaryBwd bwd, bool bwd_reads_out, float lo, float hi) {
    const int64_t n = p->v[0];
    const float *x = pin_sp(p, "x", n, lo, hi);
    float *y = pout(p, "y", n);
    fwd(KC, y, x, n);
    const float *dy = pin(p, "dy", n, -1, 1);
    bwd(KC, pout(p, "dx", n), bwd_reads_out ? y : x, dy, n);
}

static void c_relu(Pc *p) {
    unary(p, BE->relu_fwd, BE->relu_bwd, false, -3, 3);
}
static void c_silu(Pc *p) {
    unary(p, BE->silu_fwd, BE->silu_bwd, false, -8, 8);
}
static void c_gelu(Pc *p) {
    unary(p, BE->gelu_fwd, BE->gelu_bwd, false, -5, 5);
}
static void c_sigmoid(Pc *p) {
    unary(p, BE->sigmoid_fwd, BE->sigmoid_bwd, true, -8, 8);
}
static void c_inverse_sigmoid(Pc *p) {
    unary(p, BE->inverse_sigmoid_fwd, BE->inverse_sigmoid_bwd, false, -0.2f, 1.2f);
}
static void c_exp(Pc *p) {
    unary(p, BE->exp_fwd, BE->exp_bwd, true, -10, 10);
}
static void c_log(Pc *p) {
    unary(p, BE->log_fwd, BE->log_bwd, false, 1e-3f, 50);
}
static void c_abs(Pc *p) {
    unary(p, BE->abs_fwd, BE->abs_bwd, false, -3, 3);
}

static float quarter_or_inf(int64_t v) {
    return v == 99 ? INFINITY : v == -99 ? -INFINITY : (float)v / 4;
}

static void c_pow_scalar(Pc *p) {
    const int64_t n = p->v[0];
    const float e = (float)p->v[1] / 4;
    // a negative base only where the exponent is an integer (else NaN on both, which is fine
    // but tests nothing)
    const float *x = pin_sp(p, "x", n, e == floorf(e) ? -2.0f : 0.05f, 2.0f);
    BE->pow_scalar_fwd(KC, pout(p, "y", n), x, e, n);
    const float *dy = pin(p, "dy", n, -1, 1);
    BE->pow_scalar_bwd(KC, pout(p, "dx", n), x, dy, e, n);
}

static void c_clamp(Pc *p) {
    const int64_t n = p->v[0];
    const float lo = quarter_or_inf(p->v[1]), hi = quarter_or_inf(p->v[2]);
    const float *x = pin_sp(p, "x", n, -3, 3);
    BE->clamp_fwd(KC, pout(p, "y", n), x, lo, hi, n);
    const float *dy = pin(p, "dy", n, -1, 1);
    BE->clamp_bwd(KC, pout(p, "dx", n), x, dy, lo, hi, n);
}

static void c_scale(Pc *p) {
    const int64_t n = p->v[0];
    const float *x = pin_sp(p, "x", n, -3, 3);
    BE->scale_fwd(KC, pout(p, "scaled", n), x, -0.75f, n);
    BE->add_scalar_fwd(KC, pout(p, "shifted", n), x, 1.25f, n);
}

static float wave(int64_t i, float lo, float hi);

// ---- binary ops with broadcasting ----
// v = {op (0 add, 1 sub, 2 mul, 3 div, 4 maximum, 5 minimum), ndim, a_shape[6], b_shape[6],
//      grads (0: da and db, 1: da only, 2: db only), ties (operands in {0, 1, 2})}
static int64_t numel(int nd, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++)
        n *= shape[d];
    return n;
}

static void c_binary(Pc *p) {
    const int op = (int)p->v[0], nd = (int)p->v[1];
    const int64_t *as = p->v + 2, *bs = p->v + 8;
    int64_t os[6];
    for (int d = 0; d < nd; d++)
        os[d] = as[d] == 1 ? bs[d] : as[d];
    const int64_t na = numel(nd, as), nb = numel(nd, bs), no = numel(nd, os);
    const float *a, *b;
    if (p->v[15]) { // small integers: equal operands (ties) are common
        float *va = xmalloc(sizeof(float) * (size_t)MAX(na + nb, 1)), *vb = va + na;
        for (int64_t i = 0; i < na + nb; i++)
            va[i] = floorf(wave(i, 0, 3));
        a = pin_values(p, "a", na, va);
        b = pin_values(p, "b", nb, vb);
        free(va);
    } else { // div: b away from 0 (a zero b is in the special rows)
        a = pin_sp(p, "a", na, -2, 2);
        b = op == 3 ? pin_sp(p, "b", nb, 0.5f, 2) : pin_sp(p, "b", nb, -2, 2);
    }
    float *out = pout(p, "out", no);
    typedef void (*Fwd)(KernelCtx *, float *, const float *, const float *, int, const int64_t *,
                        const int64_t *);
    typedef void (*Bwd)(KernelCtx *, float *, float *, const float *, const float *, const float *,
                        int, const int64_t *, const int64_t *);
    const Fwd fwd[] = {BE->add_fwd, BE->sub_fwd,     BE->mul_fwd,
                       BE->div_fwd, BE->maximum_fwd, BE->minimum_fwd};
    const Bwd bwd[] = {NULL, NULL, BE->mul_bwd, BE->div_bwd, BE->maximum_bwd, BE->minimum_bwd};
    fwd[op](KC, out, a, b, nd, as, bs);
    const float *dout = pin(p, "dout", no, -1, 1);
    float *da = p->v[14] == 2 ? NULL : pout(p, "da", na);
    float *db = p->v[14] == 1 ? NULL : pout(p, "db", nb);
    if (op == 0)
        BE->add_bwd(KC, da, db, dout, nd, as, bs);
    else if (op == 1)
        BE->sub_bwd(KC, da, db, dout, nd, as, bs);
    else
        bwd[op](KC, da, db, dout, a, b, nd, as, bs);
}

// ---- BCE with logits: v = {n, grads (0: dx and dy, 1: dx only)} ----
static void c_bce(Pc *p) {
    const int64_t n = p->v[0];
    const float *x = pin_sp(p, "x", n, -12, 12), *y = pin(p, "y", n, 0, 1);
    BE->bce_logits_fwd(KC, pout(p, "out", n), x, y, n);
    const float *dout = pin(p, "dout", n, -1, 1);
    BE->bce_logits_bwd(KC, pout(p, "dx", n), p->v[1] ? NULL : pout(p, "dy", n), dout, x, y, n);
}

// ---- reductions: v = {outer, r, inner, mean} ----
static void c_reduce(Pc *p) {
    const int64_t outer = p->v[0], r = p->v[1], inner = p->v[2];
    const float *x = pin_sp(p, "x", outer * r * inner, -2, 2);
    float *out = pout(p, "out", outer * inner);
    (p->v[3] ? BE->mean_dim_fwd : BE->sum_dim_fwd)(KC, out, x, outer, r, inner);
    const float *dout = pin(p, "dout", outer * inner, -1, 1);
    (p->v[3] ? BE->mean_dim_bwd : BE->sum_dim_bwd)(KC, pout(p, "dx", outer * r * inner), dout,
                                                   outer, r, inner);
}

// A value in [lo, hi) for inputs a case writes itself: the same on every run.
static float wave(int64_t i, float lo, float hi) {
    return lo + (hi - lo) * (float)((uint64_t)(i + 1) * 2654435761u % 1000u) / 1000.0f;
}

// ---- softmax: v = {rows, cols, masked (1: row 0 all -inf, so NaN)} ----
static void c_softmax(Pc *p) {
    const int64_t rows = p->v[0], cols = p->v[1];
    const float *x;
    if (p->v[2]) {
        float *v = xmalloc(sizeof(float) * (size_t)(rows * cols));
        for (int64_t i = 0; i < rows * cols; i++)
            v[i] = i < cols ? -INFINITY : wave(i, -6, 6);
        x = pin_values(p, "x", rows * cols, v);
        free(v);
    } else {
        x = pin_sp(p, "x", rows * cols, -6, 6);
    }
    float *y = pout(p, "y", rows * cols);
    BE->softmax_fwd(KC, y, x, rows, cols);
    const float *dy = pin(p, "dy", rows * cols, -1, 1);
    BE->softmax_bwd(KC, pout(p, "dx", rows * cols), y, dy, rows, cols);
}

// ---- LayerNorm: v = {rows, E, weight, bias, grads (0 all, 1: dinp only, 2: no dinp)} ----
static void c_layernorm(Pc *p) {
    const int64_t rows = p->v[0], E = p->v[1];
    const float *x = pin_sp(p, "x", rows * E, -3, 3);
    const float *w = p->v[2] ? pin(p, "w", E, 0.5f, 1.5f) : NULL;
    const float *b = p->v[3] ? pin(p, "b", E, -1, 1) : NULL;
    float *y = pout(p, "y", rows * E), *mean = pout(p, "mean", rows), *rstd = pout(p, "rstd", rows);
    BE->layernorm_fwd(KC, y, mean, rstd, x, w, b, rows, E, 1e-5f);
    const float *dy = pin(p, "dy", rows * E, -1, 1);
    float *dx = p->v[4] == 2 ? NULL : pout(p, "dx", rows * E);
    float *dw = p->v[4] == 1 ? NULL : pout(p, "dw", E);
    float *db = p->v[4] == 1 ? NULL : pout(p, "db", E);
    BE->layernorm_bwd(KC, dx, dw, db, dy, x, mean, rstd, w, rows, E);
}

// ---- BatchNorm2d: v = {B, C, HW, training, weight, bias, grads (0 all, 1: dinp only), act
// (BnAct)}; the forward's output again from its saved statistics (batchnorm_apply) ----
static void c_batchnorm(Pc *p) {
    const int64_t B = p->v[0], C = p->v[1], HW = p->v[2], n = B * C * HW;
    const bool training = p->v[3];
    const BnAct act = (BnAct)p->v[7];
    const float *x = pin_sp(p, "x", n, -3, 3);
    const float *w = p->v[4] ? pin(p, "w", C, 0.5f, 1.5f) : NULL;
    const float *b = p->v[5] ? pin(p, "b", C, -1, 1) : NULL;
    float *y = pout(p, "y", n), *mean = pout(p, "save_mean", C),
          *invstd = pout(p, "save_invstd", C);
    if (training) {
        float *rm = pout(p, "running_mean", C), *rv = pout(p, "running_var", C);
        BE->batchnorm_train_fwd(KC, y, mean, invstd, rm, rv, x, w, b, B, C, HW, 0.03f, 1e-5, act);
    } else {
        const float *rm = pin(p, "running_mean", C, -1, 1), *rv = pin(p, "running_var", C, 0.2f, 3);
        BE->batchnorm_eval_fwd(KC, y, mean, invstd, x, rm, rv, w, b, B, C, HW, 1e-5, act);
    }
    BE->batchnorm_apply(KC, pout(p, "y_again", n), x, w, b, mean, invstd, B, C, HW, act);
    const float *dy = pin(p, "dy", n, -1, 1);
    float *dw = p->v[6] ? NULL : pout(p, "dw", C), *db = p->v[6] ? NULL : pout(p, "db", C);
    BE->batchnorm_bwd(KC, pout(p, "dx", n), dw, db, dy, x, w, b, mean, invstd, B, C, HW, training,
                      act);
}

// ---- Conv2d ----
// v = {B, C, H, W, OC, KH, KW, stride, pad, dil, groups, bias, grads (0 all, 1: dx only,
//      2: dw and dbias only)}
static void c_conv(Pc *p) {
    const int64_t B = p->v[0], C = p->v[1], H = p->v[2], W = p->v[3], OC = p->v[4];
    const int KH = (int)p->v[5], KW = (int)p->v[6], s = (int)p->v[7], pad = (int)p->v[8];
    const int dil = (int)p->v[9], groups = (int)p->v[10];
    const Conv2dParams cp = {s, s, pad, pad, dil, dil, groups};
    const int64_t OH = (H + 2 * pad - dil * (KH - 1) - 1) / s + 1;
    const int64_t OW = (W + 2 * pad - dil * (KW - 1) - 1) / s + 1;
    const float *x = pin_sp(p, "x", B * C * H * W, -1, 1);
    const float *w = pin(p, "w", OC * (C / groups) * KH * KW, -1, 1);
    const float *bias = p->v[11] ? pin(p, "bias", OC, -1, 1) : NULL;
    BE->conv2d_fwd(KC, pout(p, "out", B * OC * OH * OW), x, w, bias, B, C, H, W, OC, OH, OW, KH, KW,
                   cp);
    const float *dout = pin(p, "dout", B * OC * OH * OW, -1, 1);
    float *dx = p->v[12] == 2 ? NULL : pout(p, "dx", B * C * H * W);
    float *dw = p->v[12] == 1 ? NULL : pout(p, "dw", OC * (C / groups) * KH * KW);
    float *db = p->v[12] == 1 || !p->v[11] ? NULL : pout(p, "dbias", OC);
    BE->conv2d_bwd(KC, dx, dw, db, dout, x, w, B, C, H, W, OC, OH, OW, KH, KW, cp);
}

// ---- MaxPool2d: v = {planes, H, W, k, stride, pad, ceil_mode, ties, no_idx} ----
// ties: the inputs are the integers 0..2, so that windows hold equal maxima (the first wins)
// and several windows choose one pixel (its gradient is their sum, in window order).
static int64_t pool_out(int64_t n, int k, int s, int pad, bool ceil_mode) { // PyTorch's
    int64_t num = n + 2 * pad - k + (ceil_mode ? s - 1 : 0);
    int64_t out = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
    if (ceil_mode && (out - 1) * s >= n + pad) out--;
    return out;
}

static void c_maxpool(Pc *p) {
    const int64_t planes = p->v[0], H = p->v[1], W = p->v[2];
    const int k = (int)p->v[3], s = (int)p->v[4], pad = (int)p->v[5];
    const Pool2dParams pp = {k, k, s, s, pad, pad, p->v[6] != 0};
    const int64_t OH = pool_out(H, k, s, pad, pp.ceil_mode),
                  OW = pool_out(W, k, s, pad, pp.ceil_mode);
    const float *x;
    if (p->v[7]) {
        float *v = xmalloc(sizeof(float) * (size_t)MAX(planes * H * W, 1));
        for (int64_t i = 0; i < planes * H * W; i++)
            v[i] = (float)((i * 7 + i / 5) % 3);
        x = pin_values(p, "x", planes * H * W, v);
        free(v);
    } else {
        x = pin_sp(p, "x", planes * H * W, -3, 3);
    }
    float *y = pout(p, "y", planes * OH * OW);
    if (p->v[8]) {
        BE->maxpool2d_fwd(KC, y, NULL, x, planes, H, W, OH, OW, pp);
        return;
    }
    int32_t *idx = pout_i32(p, "idx", planes * OH * OW);
    BE->maxpool2d_fwd(KC, y, idx, x, planes, H, W, OH, OW, pp);
    const float *dy = pin(p, "dy", planes * OH * OW, -1, 1);
    BE->maxpool2d_bwd(KC, pout(p, "dx", planes * H * W), dy, idx, planes, H, W, OH, OW, pp);
}

// ---- padding and upsampling ----
// v = {planes, H, W, left, right, top, bottom}
static void c_pad2d(Pc *p) {
    const int64_t planes = p->v[0], H = p->v[1], W = p->v[2];
    const int l = (int)p->v[3], r = (int)p->v[4], t = (int)p->v[5], b = (int)p->v[6];
    const int64_t n_out = planes * (t + H + b) * (l + W + r);
    const float *x = pin_sp(p, "x", planes * H * W, -3, 3);
    BE->pad2d_fwd(KC, pout(p, "y", n_out), x, planes, H, W, l, r, t, b);
    const float *dy = pin(p, "dy", n_out, -1, 1);
    BE->pad2d_bwd(KC, pout(p, "dx", planes * H * W), dy, planes, H, W, l, r, t, b);
}

// v = {planes, H, W, scale}
static void c_upsample(Pc *p) {
    const int64_t planes = p->v[0], H = p->v[1], W = p->v[2];
    const int s = (int)p->v[3];
    const int64_t n_out = planes * H * W * s * s;
    const float *x = pin_sp(p, "x", planes * H * W, -3, 3);
    BE->upsample_nearest2d_fwd(KC, pout(p, "y", n_out), x, planes, H, W, s);
    const float *dy = pin(p, "dy", n_out, -1, 1);
    BE->upsample_nearest2d_bwd(KC, pout(p, "dx", planes * H * W), dy, planes, H, W, s);
}

// ---- linear bias and attention ----
// v = {M, N}
static void c_bias_rows(Pc *p) {
    const int64_t M = p->v[0], N = p->v[1];
    const float *bias = pin_sp(p, "bias", N, -2, 2);
    BE->bias_rows_fwd(KC, pout(p, "out", M * N), bias, M, N);
    const float *dout = pin_sp(p, "dout", M * N, -1, 1);
    BE->bias_rows_bwd(KC, pout(p, "dbias", N), dout, M, N);
}

// v = {B, NH, Lq, Lk, E, mask (0 none, 1 about a third of the keys, 2 that and query row 0
//      masked whole: NaN)}
static void c_attention(Pc *p) {
    const int64_t B = p->v[0], Lq = p->v[2], Lk = p->v[3], E = p->v[4];
    const int NH = (int)p->v[1];
    const float *qs = pin_sp(p, "qs", B * Lq * E, -1, 1);
    const float *k = pin(p, "k", B * Lk * E, -1, 1), *v = pin(p, "v", B * Lk * E, -1, 1);
    const uint8_t *mask = NULL;
    if (p->v[5]) { // about a third of the keys masked; with 2, query row 0 wholly
        uint8_t *m = xmalloc((size_t)MAX(Lq * Lk, 1));
        for (int64_t i = 0; i < Lq * Lk; i++)
            m[i] = (p->v[5] == 2 && i < Lk) || wave(i, 0, 1) < 0.3f;
        mask = pin_bytes(p, "mask", Lq * Lk, m);
        free(m);
    }
    BE->attention_fwd(KC, pout(p, "out", B * Lq * E), qs, k, v, mask, B, NH, Lq, Lk, E);
    const float *dout = pin(p, "dout", B * Lq * E, -1, 1);
    float *dqs = pout(p, "dqs", B * Lq * E), *dk = pout(p, "dk", B * Lk * E);
    BE->attention_bwd(KC, dqs, dk, pout(p, "dv", B * Lk * E), dout, qs, k, v, mask, B, NH, Lq, Lk, E);
}

// ---- sampling ----
// v = {B, C, H, W, Ho, Wo, grads (0: dx and dgrid, 1: dx only, 2: dgrid only)}
static void c_grid_sample(Pc *p) {
    const int64_t B = p->v[0], C = p->v[1], H = p->v[2], W = p->v[3], Ho = p->v[4], Wo = p->v[5];
    const float *x = pin(p, "x", B * C * H * W, -2, 2);
    const float *grid = pin_sp(p, "grid", B * Ho * Wo * 2, -1.2f, 1.2f); // some points outside
    BE->grid_sample_fwd(KC, pout(p, "out", B * C * Ho * Wo), x, grid, B, C, H, W, Ho, Wo);
    const float *dout = pin(p, "dout", B * C * Ho * Wo, -1, 1);
    float *dx = p->v[6] == 2 ? NULL : pout(p, "dx", B * C * H * W);
    float *dgrid = p->v[6] == 1 ? NULL : pout(p, "dgrid", B * Ho * Wo * 2);
    BE->grid_sample_bwd(KC, dx, dgrid, dout, x, grid, B, C, H, W, Ho, Wo);
}

// v = {B, NH, D, L, Lq, P, H_0, W_0, H_1, W_1, H_2, W_2, grads (0 all, 1: no dvalue)}
static void c_msdeform(Pc *p) {
    const int64_t B = p->v[0], Lq = p->v[4];
    const int NH = (int)p->v[1], D = (int)p->v[2], L = (int)p->v[3], P = (int)p->v[5];
    const int64_t *shapes = p->v + 6;
    int64_t N = 0;
    for (int l = 0; l < L; l++)
        N += shapes[2 * l] * shapes[2 * l + 1];
    const int64_t n_pts = B * Lq * NH * L * P;
    const float *value = pin(p, "value", B * N * NH * D, -2, 2);
    const float *loc = pin_sp(p, "loc", n_pts * 2, -0.1f, 1.1f); // some points outside
    const float *aw = pin(p, "aw", n_pts, 0, 1);
    BE->msdeform_attn_fwd(KC, pout(p, "out", B * Lq * NH * D), value, loc, aw, shapes, B, N, NH, D,
                          L, Lq, P);
    const float *dout = pin(p, "dout", B * Lq * NH * D, -1, 1);
    float *dvalue = NULL;
    if (!p->v[12]) {
        dvalue = pout(p, "dvalue", B * N * NH * D);
        pnondet(p); // atomics, as PyTorch's CUDA kernel
    }
    float *dloc = pout(p, "dloc", n_pts * 2), *daw = pout(p, "daw", n_pts);
    BE->msdeform_attn_bwd(KC, dvalue, dloc, daw, dout, value, loc, aw, shapes, B, N, NH, D, L, Lq,
                          P);
}

// ---- layout ----
// v = {ndim, shape[6], perm[6]}
static void c_permute(Pc *p) {
    const int nd = (int)p->v[0];
    const int64_t *shape = p->v + 1;
    int perm[6];
    for (int i = 0; i < nd; i++)
        perm[i] = (int)p->v[7 + i];
    const int64_t n = numel(nd, shape);
    const float *x = pin_sp(p, "x", n, -3, 3);
    BE->permute_fwd(KC, pout(p, "y", n), x, nd, shape, perm);
    const float *dy = pin(p, "dy", n, -1, 1);
    BE->permute_bwd(KC, pout(p, "dx", n), dy, nd, shape, perm);
}

// v = {outer, inner, out_stride, in_stride}
static void c_blocks(Pc *p) {
    const int64_t outer = p->v[0], inner = p->v[1], os = p->v[2], is = p->v[3];
    const float *x = pin_sp(p, "x", outer * is, -3, 3);
    BE->block_copy(KC, pout(p, "copied", outer * os), os, x, is, outer, inner);
    BE->block_add(KC, pout(p, "added", outer * os), os, x, is, outer, inner);
}

// v = {outer, n_src, n_idx, inner, shared (idx_stride 0)}
static void c_gather(Pc *p) {
    const int64_t outer = p->v[0], n_src = p->v[1], n_idx = p->v[2], inner = p->v[3];
    const int64_t stride = p->v[4] ? 0 : n_idx;
    const float *x = pin_sp(p, "x", outer * n_src * inner, -3, 3);
    const int64_t *idx = pin_idx(p, "idx", stride ? outer * n_idx : n_idx, n_src);
    BE->gather_rows_fwd(KC, pout(p, "y", outer * n_idx * inner), x, idx, stride, outer, n_src,
                        n_idx, inner);
    const float *dy = pin(p, "dy", outer * n_idx * inner, -1, 1);
    BE->gather_rows_bwd(KC, pout(p, "dx", outer * n_src * inner), dy, idx, stride, outer, n_src,
                        n_idx, inner);
}

// ---- the table ----
// One row per line (clang-format would split each over several):
// clang-format off
const ParityCase parity_cases[] = {
    {"memory", "alloc free to_device to_host set_threads set_device", c_memory, {1031}, false, EXACT},

    {"fill", "fill", c_fill, {1031, 3}, false, EXACT},
    {"fill/one", "fill", c_fill, {1, -7}, false, EXACT},
    {"fill/empty", "fill", c_fill, {0, 1}, false, EXACT},
    {"fill/nan", "fill", c_fill, {37, 0}, true, EXACT},
    {"copy", "copy", c_copy, {4099}, false, EXACT},
    {"copy/empty", "copy", c_copy, {0}, false, EXACT},
    {"copy/special", "copy", c_copy, {37}, true, EXACT},
    {"axpy", "axpy", c_axpy, {4099, 3}, false, EXACT},
    {"axpy/empty", "axpy", c_axpy, {0, 3}, false, EXACT},
    {"axpy/special", "axpy", c_axpy, {37, -2}, true, EXACT},

    // {M, N, K, trans_a, trans_b, pad, alpha * 4, beta * 4}
    {"gemm/nn", "gemm", c_gemm, {17, 13, 31, 0, 0, 0, 4, 0}, false, GEMM},
    {"gemm/tn-padded", "gemm", c_gemm, {17, 13, 31, 1, 0, 3, 3, 5}, false, GEMM},
    {"gemm/nt-accumulate", "gemm", c_gemm, {5, 33, 64, 0, 1, 1, 4, 4}, false, GEMM},
    {"gemm/tt-1x1", "gemm", c_gemm, {1, 1, 1, 1, 1, 2, -4, 2}, false, GEMM},
    {"gemm/k0", "gemm", c_gemm, {7, 5, 0, 0, 0, 1, 4, 2}, false, GEMM},
    {"gemm/k0-beta0", "gemm", c_gemm, {7, 5, 0, 0, 0, 0, 4, 0}, true, GEMM},
    {"gemm/m0", "gemm", c_gemm, {0, 5, 3, 0, 0, 0, 4, 0}, false, GEMM},
    {"gemm/n0", "gemm", c_gemm, {4, 0, 3, 0, 0, 0, 4, 0}, false, GEMM},
    {"gemm/special-beta0", "gemm", c_gemm, {9, 7, 11, 0, 0, 0, 4, 0}, true, GEMM},
    // {batch, M, N, K, trans_a, trans_b, broadcast, gap, alpha * 4, beta * 4}
    {"gemm_batched", "gemm_batched", c_gemm_batched, {3, 7, 5, 9, 0, 0, 0, 2, 4, 0}, false, GEMM},
    {"gemm_batched/shared-b", "gemm_batched", c_gemm_batched, {4, 6, 5, 7, 1, 0, 2, 0, 4, 4}, false, GEMM},
    {"gemm_batched/shared-a", "gemm_batched", c_gemm_batched, {4, 6, 5, 7, 0, 1, 1, 3, 3, 0}, false, GEMM},
    {"gemm_batched/k0", "gemm_batched", c_gemm_batched, {2, 3, 4, 0, 0, 0, 0, 1, 4, 2}, false, GEMM},
    {"gemm_batched/empty", "gemm_batched", c_gemm_batched, {0, 3, 4, 5, 0, 0, 0, 0, 4, 0}, false, GEMM},

    {"relu", "relu_fwd relu_bwd", c_relu, {1031}, false, EXACT},
    {"relu/special", "relu_fwd relu_bwd", c_relu, {37}, true, EXACT},
    {"silu", "silu_fwd silu_bwd", c_silu, {1031}, false, LIBM},
    {"silu/special", "silu_fwd silu_bwd", c_silu, {37}, true, LIBM},
    {"gelu", "gelu_fwd gelu_bwd", c_gelu, {1031}, false, LIBM},
    {"gelu/special", "gelu_fwd gelu_bwd", c_gelu, {37}, true, LIBM},
    {"sigmoid", "sigmoid_fwd sigmoid_bwd", c_sigmoid, {1031}, false, LIBM},
    {"sigmoid/special", "sigmoid_fwd sigmoid_bwd", c_sigmoid, {37}, true, LIBM},
    {"inverse_sigmoid", "inverse_sigmoid_fwd inverse_sigmoid_bwd", c_inverse_sigmoid, {1031}, false, LIBM},
    {"inverse_sigmoid/special", "inverse_sigmoid_fwd inverse_sigmoid_bwd", c_inverse_sigmoid, {37}, true, LIBM},
    {"exp", "exp_fwd exp_bwd", c_exp, {1031}, false, LIBM},
    {"exp/special", "exp_fwd exp_bwd", c_exp, {37}, true, LIBM},
    {"log", "log_fwd log_bwd", c_log, {1031}, false, LIBM},
    {"log/special", "log_fwd log_bwd", c_log, {37}, true, LIBM},
    {"abs", "abs_fwd abs_bwd", c_abs, {1031}, false, EXACT},
    {"abs/special", "abs_fwd abs_bwd", c_abs, {37}, true, EXACT},
    // {n, e * 4}: PyTorch's special exponents, a general one, 0
    {"pow/0.5", "pow_scalar_fwd pow_scalar_bwd", c_pow_scalar, {1031, 2}, false, LIBM},
    {"pow/2", "pow_scalar_fwd pow_scalar_bwd", c_pow_scalar, {1031, 8}, false, LIBM},
    {"pow/3", "pow_scalar_fwd pow_scalar_bwd", c_pow_scalar, {1031, 12}, false, LIBM},
    {"pow/-0.5", "pow_scalar_fwd pow_scalar_bwd", c_pow_scalar, {1031, -2}, false, LIBM},
    {"pow/-1", "pow_scalar_fwd pow_scalar_bwd", c_pow_scalar, {1031, -4}, false, LIBM},
    {"pow/-2", "pow_scalar_fwd pow_scalar_bwd", c_pow_scalar, {1031, -8}, false, LIBM},
    {"pow/1.75", "pow_scalar_fwd pow_scalar_bwd", c_pow_scalar, {1031, 7}, false, LIBM},
    {"pow/0", "pow_scalar_fwd pow_scalar_bwd", c_pow_scalar, {1031, 0}, false, LIBM},
    {"pow/special", "pow_scalar_fwd pow_scalar_bwd", c_pow_scalar, {37, 8}, true, LIBM},
    // {n, lo * 4, hi * 4} (99: infinity)
    {"clamp", "clamp_fwd clamp_bwd", c_clamp, {1031, -4, 8}, false, EXACT},
    {"clamp/no-low", "clamp_fwd clamp_bwd", c_clamp, {1031, -99, 0}, false, EXACT},
    {"clamp/special", "clamp_fwd clamp_bwd", c_clamp, {37, -4, 4}, true, EXACT},
    {"scale", "scale_fwd add_scalar_fwd", c_scale, {1031}, false, EXACT},
    {"scale/special", "scale_fwd add_scalar_fwd", c_scale, {37}, true, EXACT},

    // {op, ndim, a_shape[6], b_shape[6], grads, ties}: same shapes, a broadcast of both,
    // 0-d, a reduction to one element over 1320 terms (the GPU's block path), empty, ties
    {"binary/add/same", "add_fwd add_bwd", c_binary, {0, 3, 3, 5, 7, 1, 1, 1, 3, 5, 7, 1, 1, 1}, false, SUM},
    {"binary/add/broadcast", "add_fwd add_bwd", c_binary, {0, 4, 2, 1, 4, 5, 1, 1, 1, 3, 1, 5, 1, 1}, false, SUM},
    {"binary/add/scalar", "add_fwd add_bwd", c_binary, {0, 0}, false, SUM},
    {"binary/add/to-scalar", "add_fwd add_bwd", c_binary, {0, 2, 40, 33, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, false, SUM},
    {"binary/add/empty", "add_fwd add_bwd", c_binary, {0, 2, 0, 5, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1}, false, SUM},
    {"binary/add/ties", "add_fwd add_bwd", c_binary, {0, 2, 6, 5, 1, 1, 1, 1, 6, 5, 1, 1, 1, 1, 0, 1}, false, SUM},
    {"binary/add/special", "add_fwd add_bwd", c_binary, {0, 2, 2, 7, 1, 1, 1, 1, 2, 7, 1, 1, 1, 1}, true, SUM},
    {"binary/sub/same", "sub_fwd sub_bwd", c_binary, {1, 3, 3, 5, 7, 1, 1, 1, 3, 5, 7, 1, 1, 1}, false, SUM},
    {"binary/sub/broadcast", "sub_fwd sub_bwd", c_binary, {1, 4, 2, 1, 4, 5, 1, 1, 1, 3, 1, 5, 1, 1}, false, SUM},
    {"binary/sub/scalar", "sub_fwd sub_bwd", c_binary, {1, 0}, false, SUM},
    {"binary/sub/to-scalar", "sub_fwd sub_bwd", c_binary, {1, 2, 40, 33, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, false, SUM},
    {"binary/sub/empty", "sub_fwd sub_bwd", c_binary, {1, 2, 0, 5, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1}, false, SUM},
    {"binary/sub/ties", "sub_fwd sub_bwd", c_binary, {1, 2, 6, 5, 1, 1, 1, 1, 6, 5, 1, 1, 1, 1, 0, 1}, false, SUM},
    {"binary/sub/special", "sub_fwd sub_bwd", c_binary, {1, 2, 2, 7, 1, 1, 1, 1, 2, 7, 1, 1, 1, 1}, true, SUM},
    {"binary/mul/same", "mul_fwd mul_bwd", c_binary, {2, 3, 3, 5, 7, 1, 1, 1, 3, 5, 7, 1, 1, 1}, false, SUM},
    {"binary/mul/broadcast", "mul_fwd mul_bwd", c_binary, {2, 4, 2, 1, 4, 5, 1, 1, 1, 3, 1, 5, 1, 1}, false, SUM},
    {"binary/mul/scalar", "mul_fwd mul_bwd", c_binary, {2, 0}, false, SUM},
    {"binary/mul/to-scalar", "mul_fwd mul_bwd", c_binary, {2, 2, 40, 33, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, false, SUM},
    {"binary/mul/empty", "mul_fwd mul_bwd", c_binary, {2, 2, 0, 5, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1}, false, SUM},
    {"binary/mul/ties", "mul_fwd mul_bwd", c_binary, {2, 2, 6, 5, 1, 1, 1, 1, 6, 5, 1, 1, 1, 1, 0, 1}, false, SUM},
    {"binary/mul/special", "mul_fwd mul_bwd", c_binary, {2, 2, 2, 7, 1, 1, 1, 1, 2, 7, 1, 1, 1, 1}, true, SUM},
    {"binary/div/same", "div_fwd div_bwd", c_binary, {3, 3, 3, 5, 7, 1, 1, 1, 3, 5, 7, 1, 1, 1}, false, SUM},
    {"binary/div/broadcast", "div_fwd div_bwd", c_binary, {3, 4, 2, 1, 4, 5, 1, 1, 1, 3, 1, 5, 1, 1}, false, SUM},
    {"binary/div/scalar", "div_fwd div_bwd", c_binary, {3, 0}, false, SUM},
    {"binary/div/to-scalar", "div_fwd div_bwd", c_binary, {3, 2, 40, 33, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, false, SUM},
    {"binary/div/empty", "div_fwd div_bwd", c_binary, {3, 2, 0, 5, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1}, false, SUM},
    {"binary/div/ties", "div_fwd div_bwd", c_binary, {3, 2, 6, 5, 1, 1, 1, 1, 6, 5, 1, 1, 1, 1, 0, 1}, false, SUM},
    {"binary/div/special", "div_fwd div_bwd", c_binary, {3, 2, 2, 7, 1, 1, 1, 1, 2, 7, 1, 1, 1, 1}, true, SUM},
    {"binary/maximum/same", "maximum_fwd maximum_bwd", c_binary, {4, 3, 3, 5, 7, 1, 1, 1, 3, 5, 7, 1, 1, 1}, false, SUM},
    {"binary/maximum/broadcast", "maximum_fwd maximum_bwd", c_binary, {4, 4, 2, 1, 4, 5, 1, 1, 1, 3, 1, 5, 1, 1}, false, SUM},
    {"binary/maximum/scalar", "maximum_fwd maximum_bwd", c_binary, {4, 0}, false, SUM},
    {"binary/maximum/to-scalar", "maximum_fwd maximum_bwd", c_binary, {4, 2, 40, 33, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, false, SUM},
    {"binary/maximum/empty", "maximum_fwd maximum_bwd", c_binary, {4, 2, 0, 5, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1}, false, SUM},
    {"binary/maximum/ties", "maximum_fwd maximum_bwd", c_binary, {4, 2, 6, 5, 1, 1, 1, 1, 6, 5, 1, 1, 1, 1, 0, 1}, false, SUM},
    {"binary/maximum/special", "maximum_fwd maximum_bwd", c_binary, {4, 2, 2, 7, 1, 1, 1, 1, 2, 7, 1, 1, 1, 1}, true, SUM},
    {"binary/minimum/same", "minimum_fwd minimum_bwd", c_binary, {5, 3, 3, 5, 7, 1, 1, 1, 3, 5, 7, 1, 1, 1}, false, SUM},
    {"binary/minimum/broadcast", "minimum_fwd minimum_bwd", c_binary, {5, 4, 2, 1, 4, 5, 1, 1, 1, 3, 1, 5, 1, 1}, false, SUM},
    {"binary/minimum/scalar", "minimum_fwd minimum_bwd", c_binary, {5, 0}, false, SUM},
    {"binary/minimum/to-scalar", "minimum_fwd minimum_bwd", c_binary, {5, 2, 40, 33, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, false, SUM},
    {"binary/minimum/empty", "minimum_fwd minimum_bwd", c_binary, {5, 2, 0, 5, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1}, false, SUM},
    {"binary/minimum/ties", "minimum_fwd minimum_bwd", c_binary, {5, 2, 6, 5, 1, 1, 1, 1, 6, 5, 1, 1, 1, 1, 0, 1}, false, SUM},
    {"binary/minimum/special", "minimum_fwd minimum_bwd", c_binary, {5, 2, 2, 7, 1, 1, 1, 1, 2, 7, 1, 1, 1, 1}, true, SUM},
    {"binary/mul/da-only", "mul_fwd mul_bwd", c_binary, {2, 2, 4, 6, 1, 1, 1, 1, 1, 6, 1, 1, 1, 1, 1}, false, SUM},
    {"binary/div/db-only", "div_fwd div_bwd", c_binary, {3, 2, 4, 6, 1, 1, 1, 1, 4, 1, 1, 1, 1, 1, 2}, false, SUM},
    {"binary/add/rank5", "add_fwd add_bwd", c_binary, {0, 5, 2, 1, 3, 1, 2, 1, 1, 2, 1, 3, 1, 1}, false, SUM},

    {"bce_logits", "bce_logits_fwd bce_logits_bwd", c_bce, {1031, 0}, false, LIBM},
    {"bce_logits/dx-only", "bce_logits_fwd bce_logits_bwd", c_bce, {1031, 1}, false, LIBM},
    {"bce_logits/special", "bce_logits_fwd bce_logits_bwd", c_bce, {37, 0}, true, LIBM},

    // {outer, r, inner, mean}
    {"sum_dim/whole", "sum_dim_fwd sum_dim_bwd", c_reduce, {1, 100003, 1, 0}, false, SUM},
    {"sum_dim/rows", "sum_dim_fwd sum_dim_bwd", c_reduce, {7, 300, 1, 0}, false, SUM},
    {"sum_dim/short-rows", "sum_dim_fwd sum_dim_bwd", c_reduce, {5, 3, 1, 0}, false, SUM},
    {"sum_dim/middle", "sum_dim_fwd sum_dim_bwd", c_reduce, {3, 17, 5, 0}, false, SUM},
    {"sum_dim/middle-long", "sum_dim_fwd sum_dim_bwd", c_reduce, {2, 200, 33, 0}, false, SUM},
    {"sum_dim/r1", "sum_dim_fwd sum_dim_bwd", c_reduce, {4, 1, 6, 0}, false, SUM},
    {"sum_dim/empty", "sum_dim_fwd sum_dim_bwd", c_reduce, {0, 5, 3, 0}, false, SUM},
    {"sum_dim/special", "sum_dim_fwd sum_dim_bwd", c_reduce, {2, 9, 3, 0}, true, SUM},
    {"mean_dim/whole", "mean_dim_fwd mean_dim_bwd", c_reduce, {1, 100003, 1, 1}, false, SUM},
    {"mean_dim/rows", "mean_dim_fwd mean_dim_bwd", c_reduce, {7, 300, 1, 1}, false, SUM},
    {"mean_dim/middle-long", "mean_dim_fwd mean_dim_bwd", c_reduce, {2, 200, 33, 1}, false, SUM},
    {"mean_dim/special", "mean_dim_fwd mean_dim_bwd", c_reduce, {2, 9, 3, 1}, true, SUM},

    // {rows, cols, row 0 all -inf}
    {"softmax", "softmax_fwd softmax_bwd", c_softmax, {13, 7, 0}, false, LIBM},
    {"softmax/long", "softmax_fwd softmax_bwd", c_softmax, {3, 1000, 0}, false, LIBM},
    {"softmax/1x1", "softmax_fwd softmax_bwd", c_softmax, {1, 1, 0}, false, LIBM},
    {"softmax/empty", "softmax_fwd softmax_bwd", c_softmax, {0, 5, 0}, false, LIBM},
    {"softmax/all-inf-row", "softmax_fwd softmax_bwd", c_softmax, {4, 9, 1}, false, LIBM},
    {"softmax/special", "softmax_fwd softmax_bwd", c_softmax, {3, 11, 0}, true, LIBM},

    // {rows, E, weight, bias, grads}
    {"layernorm", "layernorm_fwd layernorm_bwd", c_layernorm, {37, 48, 1, 1, 0}, false, FSUM},
    {"layernorm/no-affine", "layernorm_fwd layernorm_bwd", c_layernorm, {5, 7, 0, 0, 0}, false, FSUM},
    {"layernorm/many-rows", "layernorm_fwd layernorm_bwd", c_layernorm, {200, 32, 1, 1, 0}, false, FSUM},
    {"layernorm/e1", "layernorm_fwd layernorm_bwd", c_layernorm, {9, 1, 1, 1, 0}, false, FSUM},
    {"layernorm/dx-only", "layernorm_fwd layernorm_bwd", c_layernorm, {6, 16, 1, 0, 1}, false, FSUM},
    {"layernorm/no-dx", "layernorm_fwd layernorm_bwd", c_layernorm, {6, 16, 0, 1, 2}, false, FSUM},
    {"layernorm/empty", "layernorm_fwd layernorm_bwd", c_layernorm, {0, 8, 1, 1, 0}, false, FSUM},
    {"layernorm/special", "layernorm_fwd layernorm_bwd", c_layernorm, {4, 9, 1, 1, 0}, true, FSUM},

    // {B, C, HW, training, weight, bias, dinp only}
    {"batchnorm/train", "batchnorm_train_fwd batchnorm_apply batchnorm_bwd", c_batchnorm, {3, 5, 7, 1, 1, 1, 0}, false, FSUM},
    {"batchnorm/train-no-affine", "batchnorm_train_fwd batchnorm_apply batchnorm_bwd", c_batchnorm, {2, 4, 9, 1, 0, 0, 0}, false, FSUM},
    {"batchnorm/train-dx-only", "batchnorm_train_fwd batchnorm_apply batchnorm_bwd", c_batchnorm, {2, 3, 5, 1, 1, 1, 1}, false, FSUM},
    {"batchnorm/train-big", "batchnorm_train_fwd batchnorm_apply batchnorm_bwd", c_batchnorm, {4, 3, 300, 1, 1, 1, 0}, false, FSUM},
    {"batchnorm/train-special", "batchnorm_train_fwd batchnorm_apply batchnorm_bwd", c_batchnorm, {2, 3, 6, 1, 1, 1, 0}, true, FSUM},
    {"batchnorm/eval", "batchnorm_eval_fwd batchnorm_apply batchnorm_bwd", c_batchnorm, {3, 5, 7, 0, 1, 1, 0}, false, FSUM},
    {"batchnorm/eval-no-weight", "batchnorm_eval_fwd batchnorm_apply batchnorm_bwd", c_batchnorm, {2, 3, 5, 0, 0, 1, 0}, false, FSUM},
    {"batchnorm/eval-special", "batchnorm_eval_fwd batchnorm_apply batchnorm_bwd", c_batchnorm, {2, 3, 6, 0, 1, 1, 0}, true, FSUM},
    {"batchnorm/train-relu", "batchnorm_train_fwd batchnorm_apply batchnorm_bwd", c_batchnorm, {3, 5, 7, 1, 1, 1, 0, BN_ACT_RELU}, false, FSUM},
    {"batchnorm/train-silu", "batchnorm_train_fwd batchnorm_apply batchnorm_bwd", c_batchnorm, {4, 3, 1100, 1, 1, 1, 0, BN_ACT_SILU}, false, FSUM},
    {"batchnorm/train-silu-no-affine", "batchnorm_train_fwd batchnorm_apply batchnorm_bwd", c_batchnorm, {2, 4, 9, 1, 0, 0, 0, BN_ACT_SILU}, false, FSUM},
    {"batchnorm/eval-relu", "batchnorm_eval_fwd batchnorm_apply batchnorm_bwd", c_batchnorm, {3, 5, 7, 0, 1, 1, 0, BN_ACT_RELU}, false, FSUM},
    {"batchnorm/eval-silu", "batchnorm_eval_fwd batchnorm_apply batchnorm_bwd", c_batchnorm, {2, 3, 6, 0, 1, 1, 0, BN_ACT_SILU}, false, FSUM},

    // {B, C, H, W, OC, KH, KW, stride, pad, dil, groups, bias, grads}
    {"conv/3x3", "conv2d_fwd conv2d_bwd", c_conv, {2, 3, 9, 11, 4, 3, 3, 1, 1, 1, 1, 1, 0}, false, GEMM},
    {"conv/3x3-s2", "conv2d_fwd conv2d_bwd", c_conv, {2, 4, 10, 9, 6, 3, 3, 2, 1, 1, 1, 0, 0}, false, GEMM},
    {"conv/groups2", "conv2d_fwd conv2d_bwd", c_conv, {2, 4, 7, 8, 6, 3, 3, 1, 0, 1, 2, 1, 0}, false, GEMM},
    {"conv/dilated", "conv2d_fwd conv2d_bwd", c_conv, {1, 3, 11, 10, 5, 3, 3, 1, 2, 2, 1, 1, 0}, false, GEMM},
    {"conv/pointwise", "conv2d_fwd conv2d_bwd", c_conv, {3, 5, 6, 7, 4, 1, 1, 1, 0, 1, 1, 1, 0}, false, GEMM},
    {"conv/pointwise-groups2", "conv2d_fwd conv2d_bwd", c_conv, {2, 4, 5, 5, 6, 1, 1, 1, 0, 1, 2, 1, 0}, false, GEMM},
    {"conv/1x1-s2", "conv2d_fwd conv2d_bwd", c_conv, {2, 3, 7, 7, 5, 1, 1, 2, 0, 1, 1, 1, 0}, false, GEMM},
    {"conv/2x2", "conv2d_fwd conv2d_bwd", c_conv, {2, 3, 8, 8, 4, 2, 2, 1, 0, 1, 1, 0, 0}, false, GEMM},
    {"conv/dx-only", "conv2d_fwd conv2d_bwd", c_conv, {2, 3, 6, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1}, false, GEMM},
    {"conv/dw-only", "conv2d_fwd conv2d_bwd", c_conv, {2, 3, 6, 6, 4, 3, 3, 1, 1, 1, 1, 1, 2}, false, GEMM},
    {"conv/empty-batch", "conv2d_fwd conv2d_bwd", c_conv, {0, 3, 6, 6, 4, 3, 3, 1, 1, 1, 1, 1, 0}, false, GEMM},
    {"conv/special", "conv2d_fwd conv2d_bwd", c_conv, {1, 2, 6, 6, 3, 3, 3, 1, 1, 1, 1, 1, 0}, true, GEMM},
    {"conv/depthwise-3x3", "conv2d_fwd conv2d_bwd", c_conv, {2, 6, 9, 11, 6, 3, 3, 1, 1, 1, 6, 1, 0}, false, GEMM},
    {"conv/depthwise-5x5", "conv2d_fwd conv2d_bwd", c_conv, {2, 4, 10, 10, 4, 5, 5, 1, 2, 1, 4, 0, 0}, false, GEMM},
    {"conv/depthwise-s2", "conv2d_fwd conv2d_bwd", c_conv, {2, 5, 9, 8, 5, 3, 3, 2, 1, 1, 5, 1, 0}, false, GEMM},
    {"conv/depthwise-dilated", "conv2d_fwd conv2d_bwd", c_conv, {1, 3, 9, 9, 3, 3, 3, 1, 2, 2, 3, 1, 0}, false, GEMM},
    {"conv/depthwise-dx-only", "conv2d_fwd conv2d_bwd", c_conv, {2, 4, 7, 7, 4, 3, 3, 1, 1, 1, 4, 1, 1}, false, GEMM},
    {"conv/depthwise-dw-only", "conv2d_fwd conv2d_bwd", c_conv, {2, 4, 7, 7, 4, 3, 3, 1, 1, 1, 4, 1, 2}, false, GEMM},
    {"conv/channel-multiplier", "conv2d_fwd conv2d_bwd", c_conv, {2, 3, 7, 7, 6, 3, 3, 1, 1, 1, 3, 1, 0}, false, GEMM},

    // {planes, H, W, k, stride, pad, ceil_mode, ties, no idx}
    {"maxpool/3x3-s2", "maxpool2d_fwd maxpool2d_bwd", c_maxpool, {6, 9, 10, 3, 2, 1, 0, 0, 0}, false, EXACT},
    {"maxpool/2x2-s1-ceil", "maxpool2d_fwd maxpool2d_bwd", c_maxpool, {4, 8, 8, 2, 1, 0, 1, 0, 0}, false, EXACT},
    {"maxpool/overlap", "maxpool2d_fwd maxpool2d_bwd", c_maxpool, {3, 7, 9, 3, 1, 1, 0, 0, 0}, false, EXACT},
    {"maxpool/ties", "maxpool2d_fwd maxpool2d_bwd", c_maxpool, {3, 7, 9, 3, 1, 1, 0, 1, 0}, false, EXACT},
    {"maxpool/ties-2x2-s1", "maxpool2d_fwd maxpool2d_bwd", c_maxpool, {2, 6, 6, 2, 1, 0, 1, 1, 0}, false, EXACT},
    {"maxpool/ceil-edge", "maxpool2d_fwd maxpool2d_bwd", c_maxpool, {2, 7, 7, 3, 2, 1, 1, 0, 0}, false, EXACT},
    {"maxpool/no-idx", "maxpool2d_fwd", c_maxpool, {2, 5, 5, 2, 2, 0, 0, 0, 1}, false, EXACT},
    {"maxpool/empty", "maxpool2d_fwd maxpool2d_bwd", c_maxpool, {0, 5, 5, 2, 2, 0, 0, 0, 0}, false, EXACT},
    {"maxpool/special", "maxpool2d_fwd maxpool2d_bwd", c_maxpool, {2, 6, 6, 3, 2, 1, 0, 0, 0}, true, EXACT},

    // {planes, H, W, left, right, top, bottom}
    {"pad2d", "pad2d_fwd pad2d_bwd", c_pad2d, {3, 5, 7, 1, 2, 0, 3}, false, EXACT},
    {"pad2d/none", "pad2d_fwd pad2d_bwd", c_pad2d, {2, 4, 4, 0, 0, 0, 0}, false, EXACT},
    {"pad2d/empty", "pad2d_fwd pad2d_bwd", c_pad2d, {0, 3, 3, 1, 1, 1, 1}, false, EXACT},
    {"pad2d/special", "pad2d_fwd pad2d_bwd", c_pad2d, {2, 3, 4, 1, 0, 2, 1}, true, EXACT},
    // {planes, H, W, scale}
    {"upsample/x2", "upsample_nearest2d_fwd upsample_nearest2d_bwd", c_upsample, {3, 5, 7, 2}, false, EXACT},
    {"upsample/x3", "upsample_nearest2d_fwd upsample_nearest2d_bwd", c_upsample, {2, 3, 4, 3}, false, EXACT},
    {"upsample/x1", "upsample_nearest2d_fwd upsample_nearest2d_bwd", c_upsample, {2, 3, 3, 1}, false, EXACT},
    {"upsample/special", "upsample_nearest2d_fwd upsample_nearest2d_bwd", c_upsample, {2, 2, 3, 2}, true, EXACT},

    // {M, N}
    {"bias_rows", "bias_rows_fwd bias_rows_bwd", c_bias_rows, {7, 13}, false, SUM},
    {"bias_rows/many-rows", "bias_rows_fwd bias_rows_bwd", c_bias_rows, {300, 5}, false, SUM},
    {"bias_rows/1x1", "bias_rows_fwd bias_rows_bwd", c_bias_rows, {1, 1}, false, SUM},
    {"bias_rows/empty", "bias_rows_fwd bias_rows_bwd", c_bias_rows, {0, 4}, false, SUM},
    {"bias_rows/special", "bias_rows_fwd bias_rows_bwd", c_bias_rows, {3, 6}, true, SUM},
    // {B, NH, Lq, Lk, E, mask}
    {"attention", "attention_fwd attention_bwd", c_attention, {2, 2, 5, 7, 8, 0}, false, GEMM},
    {"attention/mask", "attention_fwd attention_bwd", c_attention, {2, 2, 5, 7, 8, 1}, false, GEMM},
    {"attention/masked-row", "attention_fwd attention_bwd", c_attention, {1, 4, 9, 11, 16, 2}, false, GEMM},
    {"attention/one-key", "attention_fwd attention_bwd", c_attention, {2, 1, 3, 1, 4, 0}, false, GEMM},
    {"attention/long-rows", "attention_fwd attention_bwd", c_attention, {1, 2, 6, 300, 8, 0}, false, GEMM},
    {"attention/special", "attention_fwd attention_bwd", c_attention, {1, 2, 4, 5, 8, 0}, true, GEMM},
    // {B, C, H, W, Ho, Wo, grads}
    {"grid_sample", "grid_sample_fwd grid_sample_bwd", c_grid_sample, {2, 3, 5, 6, 4, 3, 0}, false, SUM},
    {"grid_sample/dx-only", "grid_sample_fwd grid_sample_bwd", c_grid_sample, {1, 2, 4, 4, 7, 5, 1}, false, SUM},
    {"grid_sample/dgrid-only", "grid_sample_fwd grid_sample_bwd", c_grid_sample, {1, 2, 4, 4, 7, 5, 2}, false, SUM},
    {"grid_sample/1x1", "grid_sample_fwd grid_sample_bwd", c_grid_sample, {2, 1, 1, 1, 3, 3, 0}, false, SUM},
    {"grid_sample/special", "grid_sample_fwd grid_sample_bwd", c_grid_sample, {1, 2, 3, 3, 2, 3, 0}, true, SUM},
    // {B, NH, D, L, Lq, P, H_0, W_0, H_1, W_1, H_2, W_2, no dvalue}
    {"msdeform", "msdeform_attn_fwd msdeform_attn_bwd", c_msdeform, {2, 2, 4, 2, 5, 3, 3, 4, 2, 2, 0, 0, 0}, false, NONDET},
    {"msdeform/rtdetr", "msdeform_attn_fwd msdeform_attn_bwd", c_msdeform, {1, 8, 32, 3, 7, 4, 8, 8, 4, 4, 2, 2, 0}, false, NONDET},
    {"msdeform/1x1-level", "msdeform_attn_fwd msdeform_attn_bwd", c_msdeform, {1, 2, 3, 1, 4, 2, 1, 1, 0, 0, 0, 0, 0}, false, NONDET},
    {"msdeform/no-dvalue", "msdeform_attn_fwd msdeform_attn_bwd", c_msdeform, {1, 2, 4, 2, 3, 2, 3, 3, 2, 2, 0, 0, 1}, false, NONDET},
    {"msdeform/special", "msdeform_attn_fwd msdeform_attn_bwd", c_msdeform, {1, 2, 4, 1, 3, 2, 3, 3, 0, 0, 0, 0, 0}, true, NONDET},

    // {ndim, shape[6], perm[6]}
    {"permute/nchw-nhwc", "permute_fwd permute_bwd", c_permute, {4, 2, 3, 4, 5, 0, 0, 0, 2, 3, 1}, false, EXACT},
    {"permute/size1", "permute_fwd permute_bwd", c_permute, {3, 5, 1, 7, 0, 0, 0, 2, 1, 0}, false, EXACT},
    {"permute/identity", "permute_fwd permute_bwd", c_permute, {2, 3, 4, 0, 0, 0, 0, 0, 1}, false, EXACT},
    {"permute/scalar", "permute_fwd permute_bwd", c_permute, {0}, false, EXACT},
    {"permute/empty", "permute_fwd permute_bwd", c_permute, {2, 0, 3, 0, 0, 0, 0, 1, 0}, false, EXACT},
    {"permute/rank6", "permute_fwd permute_bwd", c_permute, {6, 2, 1, 3, 1, 2, 3, 5, 4, 3, 2, 1, 0}, false, EXACT},
    {"permute/special", "permute_fwd permute_bwd", c_permute, {2, 3, 4, 0, 0, 0, 0, 1, 0}, true, EXACT},
    // {outer, inner, out_stride, in_stride}
    {"blocks", "block_copy block_add", c_blocks, {7, 5, 9, 6}, false, EXACT},
    {"blocks/contiguous", "block_copy block_add", c_blocks, {4, 6, 6, 6}, false, EXACT},
    {"blocks/no-rows", "block_copy block_add", c_blocks, {0, 5, 5, 5}, false, EXACT},
    {"blocks/no-columns", "block_copy block_add", c_blocks, {3, 0, 4, 4}, false, EXACT},
    {"blocks/special", "block_copy block_add", c_blocks, {2, 5, 7, 5}, true, EXACT},
    // {outer, n_src, n_idx, inner, shared}
    {"gather_rows", "gather_rows_fwd gather_rows_bwd", c_gather, {2, 7, 9, 3, 0}, false, EXACT},
    {"gather_rows/shared", "gather_rows_fwd gather_rows_bwd", c_gather, {3, 5, 4, 6, 1}, false, EXACT},
    {"gather_rows/repeats", "gather_rows_fwd gather_rows_bwd", c_gather, {1, 3, 40, 2, 0}, false, EXACT},
    {"gather_rows/no-index", "gather_rows_fwd gather_rows_bwd", c_gather, {1, 10, 0, 4, 0}, false, EXACT},
    {"gather_rows/no-columns", "gather_rows_fwd gather_rows_bwd", c_gather, {2, 4, 6, 0, 0}, false, EXACT},
    {"gather_rows/special", "gather_rows_fwd gather_rows_bwd", c_gather, {1, 6, 8, 2, 0}, true, EXACT},
};
// clang-format on
const int parity_n_cases = (int)(sizeof parity_cases / sizeof parity_cases[0]);
