/* test_ops_conv.c -- op_conv2d, op_maxpool2d, op_pad2d, op_upsample_nearest2d.
 * Conv: forward and all three gradients against a naive 7-loop reference (double accumulation)
 * over a table of configurations that reaches every kernel path (depthwise, pointwise,
 * im2col incl. a chunked one, grouped), equal results on 1 and 2 threads, then
 * finite-difference gradchecks per path.
 * Pooling, padding, upsampling: hand-computed cases (PyTorch's ceil_mode and tie rules) and
 * gradchecks. */
#include <math.h>

#include "tests/expect.h"
#include "tests/gradcheck.h"
#include "trainer/ops/ops.h"

#include "kernels/base.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/conv_winograd.h"

// ---- conv reference ----
typedef struct ConvCase {
    const char *name;
    int64_t B, C, H, W, OC;
    int KH, KW;
    Conv2dParams p;
    bool bias;
} ConvCase;

#define P(sh, sw, ph, pw, dh, dw, g) ((Conv2dParams){sh, sw, ph, pw, dh, dw, g})

static const ConvCase conv_cases[] = {
    {"1x1 pointwise", 2, 5, 7, 6, 3, 1, 1, P(1, 1, 0, 0, 1, 1, 1), true},
    {"1x1 pointwise groups 2", 2, 6, 5, 5, 4, 1, 1, P(1, 1, 0, 0, 1, 1, 2), false},
    {"1x1 stride 2", 2, 4, 7, 9, 3, 1, 1, P(2, 2, 0, 0, 1, 1, 1), true},
    {"1x1 pad 1", 1, 3, 4, 5, 2, 1, 1, P(1, 1, 1, 1, 1, 1, 1), false},
    {"2x2 HGStem", 2, 6, 9, 9, 4, 2, 2, P(1, 1, 0, 0, 1, 1, 1), false},
    {"3x3 s1 p1", 2, 5, 8, 7, 6, 3, 3, P(1, 1, 1, 1, 1, 1, 1), true},
    {"3x3 s2 p1 odd", 2, 4, 9, 11, 5, 3, 3, P(2, 2, 1, 1, 1, 1, 1), false},
    {"3x3 s1 p0", 1, 3, 6, 6, 2, 3, 3, P(1, 1, 0, 0, 1, 1, 1), true},
    {"3x3 dil 2 p2", 2, 3, 9, 8, 4, 3, 3, P(1, 1, 2, 2, 2, 2, 1), false},
    {"3x3 dil 2 s2 p1", 1, 3, 11, 10, 3, 3, 3, P(2, 2, 1, 1, 2, 2, 1), true},
    {"3x3 groups 2", 2, 6, 7, 7, 4, 3, 3, P(1, 1, 1, 1, 1, 1, 2), true},
    {"3x3 groups 3 s2", 1, 6, 8, 9, 9, 3, 3, P(2, 2, 1, 1, 1, 1, 3), false},
    {"5x5 s1 p2", 1, 3, 7, 8, 2, 5, 5, P(1, 1, 2, 2, 1, 1, 1), false},
    {"7x7 s2 p3 stem", 2, 3, 13, 12, 4, 7, 7, P(2, 2, 3, 3, 1, 1, 1), false},
    {"3x5 mixed strides", 2, 3, 9, 11, 4, 3, 5, P(2, 1, 1, 2, 1, 2, 1), true},
    {"depthwise 3x3 s2 p1", 2, 8, 9, 10, 8, 3, 3, P(2, 2, 1, 1, 1, 1, 8), false},
    {"depthwise 3x3 s1 p1 bias", 2, 5, 7, 6, 5, 3, 3, P(1, 1, 1, 1, 1, 1, 5), true},
    {"depthwise 5x5 s1 p2", 2, 6, 8, 8, 6, 5, 5, P(1, 1, 2, 2, 1, 1, 6), false},
    {"depthwise 5x5 s2 p2 odd", 1, 4, 11, 9, 4, 5, 5, P(2, 2, 2, 2, 1, 1, 4), true},
    {"depthwise 7x7 s2 p3 dil 2", 1, 3, 15, 14, 3, 7, 7, P(2, 2, 3, 3, 2, 2, 3), false},
    {"depthwise 3x3 p0 big", 2, 32, 40, 40, 32, 3, 3, P(1, 1, 0, 0, 1, 1, 32), false},
    {"depthwise 3x3 s1 dil 2 pad 2x1", 2, 4, 9, 8, 4, 3, 3, P(1, 1, 2, 1, 2, 2, 4), true},
    {"depthwise 5x3 s1 pad 3x0", 1, 3, 6, 9, 3, 5, 3, P(1, 1, 3, 0, 1, 1, 3), false},
    {"channel multiplier 2", 2, 4, 7, 7, 8, 3, 3, P(1, 1, 1, 1, 1, 1, 4), false},
    // 576 column rows x 8100 outputs exceed one im2col chunk (4M floats): two chunks
    {"3x3 chunked", 1, 64, 90, 90, 4, 3, 3, P(1, 1, 1, 1, 1, 1, 1), true},
    {"3x3 threads", 2, 16, 24, 24, 16, 3, 3, P(1, 1, 1, 1, 1, 1, 1), true},
};

static int64_t out_size(int64_t n, int k, int s, int pad, int dil) {
    return (n + 2 * pad - (int64_t)dil * (k - 1) - 1) / s + 1;
}

// Naive forward and its adjoint. out, dx, dw, dbias in double; dx/dw/dbias ACCUMULATE.
static void ref_conv(const ConvCase *c, double *out, double *dx, double *dw, double *dbias,
                     const float *dout, const float *x, const float *w, const float *bias) {
    const Conv2dParams *p = &c->p;
    int64_t OH = out_size(c->H, c->KH, p->stride_h, p->pad_h, p->dil_h);
    int64_t OW = out_size(c->W, c->KW, p->stride_w, p->pad_w, p->dil_w);
    int64_t Cg = c->C / p->groups, OCg = c->OC / p->groups;
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t oc = 0; oc < c->OC; oc++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    int64_t o = ((b * c->OC + oc) * OH + oh) * OW + ow;
                    double s = bias ? bias[oc] : 0.0, d = dout ? dout[o] : 0.0;
                    if (dbias) dbias[oc] += d;
                    for (int64_t ci = 0; ci < Cg; ci++)
                        for (int kh = 0; kh < c->KH; kh++)
                            for (int kw = 0; kw < c->KW; kw++) {
                                int64_t ih = oh * p->stride_h - p->pad_h + kh * p->dil_h;
                                int64_t iw = ow * p->stride_w - p->pad_w + kw * p->dil_w;
                                if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                                int64_t cin = oc / OCg * Cg + ci;
                                int64_t xi = ((b * c->C + cin) * c->H + ih) * c->W + iw;
                                int64_t wi = ((oc * Cg + ci) * c->KH + kh) * c->KW + kw;
                                s += (double)x[xi] * w[wi];
                                if (dx) dx[xi] += (double)w[wi] * d;
                                if (dw) dw[wi] += (double)x[xi] * d;
                            }
                    if (out) out[o] = s;
                }
}

// One EXPECT per array: the worst |got - want| against atol + rtol |want|.
static void expect_close(const char *what, const char *name, const float *got,
                         const double *want, int64_t n, double atol, double rtol) {
    int64_t worst = -1;
    double worst_excess = 0;
    for (int64_t i = 0; i < n; i++) {
        double excess = fabs(got[i] - want[i]) - (atol + rtol * fabs(want[i]));
        if (!isfinite(got[i]) || excess > worst_excess) {
            worst_excess = isfinite(got[i]) ? excess : INFINITY;
            worst = i;
        }
    }
    EXPECT(worst < 0, "%s, %s: element %lld is %.9g, want %.9g", name, what, (long long)worst,
           worst >= 0 ? got[worst] : 0.0, worst >= 0 ? want[worst] : 0.0);
}

static float *rand_floats(int64_t n, uint64_t seed) {
    Arena a; // gc_fill_uniform works on tensors; borrow one header for raw memory
    arena_init(&a, DEV_CPU, 1 << 12);
    float *v = xmalloc(sizeof(float) * (size_t)n);
    Tensor *t = tensor_view(&a, v, 1, (int64_t[]){n});
    gc_fill_uniform(t, seed, -1.0f, 1.0f);
    arena_free(&a);
    return v;
}

// Forward through op_conv2d, backward by calling the kernel directly on gradients that start
// at 0.5 (the kernel must add, not overwrite), on 2 threads.
static void test_conv_reference(void) {
    const Backend *be = backend_need(DEV_CPU);
    for (size_t k = 0; k < sizeof conv_cases / sizeof conv_cases[0]; k++) {
        const ConvCase *c = &conv_cases[k];
        const Conv2dParams *p = &c->p;
        int64_t OH = out_size(c->H, c->KH, p->stride_h, p->pad_h, p->dil_h);
        int64_t OW = out_size(c->W, c->KW, p->stride_w, p->pad_w, p->dil_w);
        int64_t nx = c->B * c->C * c->H * c->W, nw = c->OC * (c->C / p->groups) * c->KH * c->KW;
        int64_t ny = c->B * c->OC * OH * OW;

        Arena arena;
        arena_init(&arena, DEV_CPU, 1 << 20);
        Tape tape;
        tape_init(&tape, &arena, 2);
        Tensor *x = tensor_4d(&arena, c->B, c->C, c->H, c->W);
        Tensor *w = tensor_4d(&arena, c->OC, c->C / p->groups, c->KH, c->KW);
        Tensor *bias = c->bias ? tensor_1d(&arena, c->OC) : NULL;
        gc_fill_uniform(x, 1 + k, -1, 1);
        gc_fill_uniform(w, 100 + k, -1, 1);
        if (bias) gc_fill_uniform(bias, 200 + k, -1, 1);
        Tensor *y = op_conv2d(&tape, x, w, bias, *p);
        EXPECT(y->ndim == 4 && y->shape[0] == c->B && y->shape[1] == c->OC &&
                   y->shape[2] == OH && y->shape[3] == OW,
               "%s: output %lldx%lldx%lldx%lld", c->name, (long long)y->shape[0],
               (long long)y->shape[1], (long long)y->shape[2], (long long)y->shape[3]);

        float *dout = rand_floats(ny, 300 + k);
        double *out = xcalloc((size_t)ny, sizeof(double));
        double *dx = xcalloc((size_t)nx, sizeof(double)), *dw = xcalloc((size_t)nw, sizeof(double));
        double *db = xcalloc((size_t)c->OC, sizeof(double));
        const float *b_data = bias ? bias->data : NULL;
        ref_conv(c, out, dx, dw, bias ? db : NULL, dout, x->data, w->data, b_data);
        expect_close("forward", c->name, y->data, out, ny, 1e-4, 1e-4);

        float *gx = xmalloc(sizeof(float) * (size_t)nx), *gw = xmalloc(sizeof(float) * (size_t)nw);
        float *gb = xmalloc(sizeof(float) * (size_t)c->OC);
        for (int64_t i = 0; i < nx; i++) gx[i] = 0.5f, dx[i] += 0.5;
        for (int64_t i = 0; i < nw; i++) gw[i] = 0.5f, dw[i] += 0.5;
        for (int64_t i = 0; i < c->OC; i++) gb[i] = 0.5f, db[i] += 0.5;
        be->conv2d_bwd(&tape.kc, gx, gw, bias ? gb : NULL, dout, x->data, w->data, c->B, c->C,
                       c->H, c->W, c->OC, OH, OW, c->KH, c->KW, *p);
        expect_close("dx", c->name, gx, dx, nx, 1e-4, 1e-4);
        expect_close("dw", c->name, gw, dw, nw, 1e-3, 1e-4); // sums over B*OH*OW terms
        if (bias) expect_close("dbias", c->name, gb, db, c->OC, 1e-3, 1e-4);

        // Only dx wanted: dw must be left alone (NULL), and dx must not change.
        for (int64_t i = 0; i < nx; i++) gx[i] = 0.5f;
        be->conv2d_bwd(&tape.kc, gx, NULL, NULL, dout, x->data, w->data, c->B, c->C, c->H, c->W,
                       c->OC, OH, OW, c->KH, c->KW, *p);
        expect_close("dx alone", c->name, gx, dx, nx, 1e-4, 1e-4);

        free(gx), free(gw), free(gb), free(out), free(dx), free(dw), free(db), free(dout);
        tape_free(&tape);
        arena_free(&arena);
    }
}

// The threaded paths (im2col over rows, col2im over channels, the chunked forward, the
// depthwise loops) against themselves: y, dx and dw bit-identical on 1 and 2 threads.
static void test_conv_threads(void) {
    static const ConvCase cases[] = {
        {"3x3 chunked forward", 2, 16, 48, 48, 16, 3, 3, P(1, 1, 1, 1, 1, 1, 1), true},
        {"2x2 stem", 2, 8, 41, 41, 8, 2, 2, P(1, 1, 0, 0, 1, 1, 1), false},
        {"depthwise 5x5 s1", 2, 32, 20, 20, 32, 5, 5, P(1, 1, 2, 2, 1, 1, 32), false},
        {"depthwise 3x3 s2", 2, 32, 20, 20, 32, 3, 3, P(2, 2, 1, 1, 1, 1, 32), false},
        {"winograd", 2, 64, 21, 19, 64, 3, 3, P(1, 1, 1, 1, 1, 1, 1), true},
    };
    const Backend *be = backend_need(DEV_CPU);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const ConvCase *c = &cases[k];
        const Conv2dParams *p = &c->p;
        int64_t OH = out_size(c->H, c->KH, p->stride_h, p->pad_h, p->dil_h);
        int64_t OW = out_size(c->W, c->KW, p->stride_w, p->pad_w, p->dil_w);
        int64_t nx = c->B * c->C * c->H * c->W, nw = c->OC * (c->C / p->groups) * c->KH * c->KW;
        int64_t ny = c->B * c->OC * OH * OW, n = ny + nx + nw + c->OC;
        float *x = rand_floats(nx, 400 + k), *w = rand_floats(nw, 500 + k);
        float *bias = rand_floats(c->OC, 600 + k), *dout = rand_floats(ny, 700 + k);
        float *got[2]; // y, dx, dw, dbias back to back
        for (int th = 1; th <= 2; th++) {
            KernelCtx kc = {.n_threads = th};
            float *r = got[th - 1] = xcalloc((size_t)n, sizeof(float));
            be->conv2d_fwd(&kc, r, x, w, c->bias ? bias : NULL, c->B, c->C, c->H, c->W, c->OC, OH,
                           OW, c->KH, c->KW, *p);
            be->conv2d_bwd(&kc, r + ny, r + ny + nx, c->bias ? r + ny + nx + nw : NULL, dout, x, w,
                           c->B, c->C, c->H, c->W, c->OC, OH, OW, c->KH, c->KW, *p);
        }
        // The GEMM paths are bit for bit where OpenBLAS's panels are (blas_panels_exact).
        EXPECT(memcmp(got[0], got[1], sizeof(float) * (size_t)n) == 0 ||
                   (p->groups == 1 && !blas_panels_exact()),
               "%s: results differ on 1 and 2 threads", c->name);
        free(got[0]), free(got[1]), free(x), free(w), free(bias), free(dout);
    }
}

// ---- Winograd F(4x4, 3x3) against im2col ----
// Shapes the Winograd path takes (>= 32 channels, >= 40 tiles) that end mid-tile (sizes not
// multiples of 4), with padding 0, 1, 2 and channel counts that are not multiples of the
// transforms' 16 lanes. Forward, dx and dw of both paths against the float64 reference, and
// Winograd against im2col.
//
// Tolerances. Inputs and weights are uniform in [-1, 1], so an output sums 9C terms of size
// <= 1 and is O(sqrt(9C)) ~ 25-35. im2col's GEMM rounds each sum once per term: error
// ~ sqrt(9C) * 2^-24 * |terms|, ~1e-6 here. Winograd adds the transforms' rounding: BT and AT
// have entries up to 5 and 8, so the transformed values are ~10-60x the inputs and their
// float32 rounding, carried through the channel sum and AT, lands on the outputs ~100x larger
// than im2col's. Measured when this was written: forward <= 3.1e-4 absolute (128 channels),
// dx <= 1.3e-4, dw <= 1.9e-4, i.e. ~1e-5 of the outputs' scale. We allow 1e-3 absolute plus
// 1e-4 relative, 3x the worst of these; training does not notice 1e-5 relative (the model's
// weights are ~1/sqrt(9C) and its activations O(1), so its errors are smaller still).
#define WINO_ATOL 1e-3
#define WINO_RTOL 1e-4

// One shape on both paths; against the float64 reference too when `reference`. Gradients
// start at 0.5: the kernels must add to them.
static void check_winograd(const ConvCase *c, uint64_t seed, bool reference) {
    const Backend *be = backend_need(DEV_CPU);
    KernelCtx kc = {.n_threads = 2};
    const Conv2dParams *p = &c->p;
    int64_t OH = out_size(c->H, 3, 1, p->pad_h, 1), OW = out_size(c->W, 3, 1, p->pad_w, 1);
    int64_t nx = c->B * c->C * c->H * c->W, nw = c->OC * c->C * 9, ny = c->B * c->OC * OH * OW;
    WinoShape ws;
    EXPECT(winograd_applies(&ws, c->B, c->C, c->H, c->W, c->OC, OH, OW, 3, 3, *p),
           "%s: not a Winograd shape", c->name);
    float *x = rand_floats(nx, seed), *w = rand_floats(nw, seed + 1);
    float *dout = rand_floats(ny, seed + 2);
    float *got[2][3]; // [im2col, winograd][y, dx, dw]
    for (int wino = 0; wino < 2; wino++) {
        float *y = got[wino][0] = xmalloc(sizeof(float) * (size_t)ny);
        float *gx = got[wino][1] = xmalloc(sizeof(float) * (size_t)nx);
        float *gw = got[wino][2] = xmalloc(sizeof(float) * (size_t)nw);
        for (int64_t i = 0; i < nx; i++) gx[i] = 0.5f;
        for (int64_t i = 0; i < nw; i++) gw[i] = 0.5f;
        conv2d_cpu_use_winograd(wino);
        be->conv2d_fwd(&kc, y, x, w, NULL, c->B, c->C, c->H, c->W, c->OC, OH, OW, 3, 3, *p);
        be->conv2d_bwd(&kc, gx, gw, NULL, dout, x, w, c->B, c->C, c->H, c->W, c->OC, OH, OW, 3,
                       3, *p);
    }
    conv2d_cpu_use_winograd(true);
    if (reference) {
        double *out = xcalloc((size_t)ny, sizeof(double));
        double *dx = xcalloc((size_t)nx, sizeof(double)), *dw = xcalloc((size_t)nw, sizeof(double));
        ref_conv(c, out, dx, dw, NULL, dout, x, w, NULL);
        for (int64_t i = 0; i < nx; i++) dx[i] += 0.5;
        for (int64_t i = 0; i < nw; i++) dw[i] += 0.5;
        expect_close("im2col forward", c->name, got[0][0], out, ny, 1e-4, 1e-4);
        expect_close("im2col dx", c->name, got[0][1], dx, nx, 1e-4, 1e-4);
        expect_close("im2col dw", c->name, got[0][2], dw, nw, 1e-3, 1e-4);
        expect_close("winograd forward", c->name, got[1][0], out, ny, WINO_ATOL, WINO_RTOL);
        expect_close("winograd dx", c->name, got[1][1], dx, nx, WINO_ATOL, WINO_RTOL);
        expect_close("winograd dw", c->name, got[1][2], dw, nw, WINO_ATOL, WINO_RTOL);
        free(out), free(dx), free(dw);
    }
    const char *what[3] = {"winograd vs im2col forward", "winograd vs im2col dx",
                           "winograd vs im2col dw"};
    const int64_t n[3] = {ny, nx, nw};
    for (int i = 0; i < 3; i++) {
        double *im2col = xmalloc(sizeof(double) * (size_t)n[i]);
        for (int64_t j = 0; j < n[i]; j++) im2col[j] = got[0][i][j];
        expect_close(what[i], c->name, got[1][i], im2col, n[i], WINO_ATOL, WINO_RTOL);
        free(im2col);
    }
    for (int i = 0; i < 6; i++) free(got[i / 3][i % 3]);
    free(x), free(w), free(dout);
}

static void test_conv_winograd(void) {
    static const ConvCase cases[] = {
        {"winograd 64->64 17x19 p1", 2, 64, 17, 19, 64, 3, 3, P(1, 1, 1, 1, 1, 1, 1), false},
        {"winograd 64->80 23x21 p0", 2, 64, 23, 21, 80, 3, 3, P(1, 1, 0, 0, 1, 1, 1), false},
        {"winograd 72->64 10x26 p1", 2, 72, 10, 26, 64, 3, 3, P(1, 1, 1, 1, 1, 1, 1), false},
        {"winograd 96->72 15x14 p2x1", 2, 96, 15, 14, 72, 3, 3, P(1, 1, 2, 1, 1, 1, 1), false},
        {"winograd 128->64 one image 26x30", 1, 128, 26, 30, 64, 3, 3, P(1, 1, 1, 1, 1, 1, 1),
         false},
        {"winograd 40->33 18x18 p1", 2, 40, 18, 18, 33, 3, 3, P(1, 1, 1, 1, 1, 1, 1), false},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        check_winograd(&cases[k], 800 + 10 * k, true);
    // 1058 tiles of 64 channels exceed one chunk (CHUNK_FLOATS / (36 * 64) = 896 tiles): two
    // chunks, dw summed over both. Against im2col only (the float64 reference takes seconds).
    const ConvCase chunked = {"winograd two chunks", 2, 64, 90, 90, 64, 3, 3,
                              P(1, 1, 1, 1, 1, 1, 1), false};
    check_winograd(&chunked, 900, false);
}

// ---- conv gradchecks, one per path ----
typedef struct ConvGc {
    Conv2dParams p;
    Tensor *x; // non-NULL: a constant input (no grad); inputs are then (w, bias)
} ConvGc;

static Tensor *conv_fwd(Tape *t, Tensor *const *in, void *user) {
    ConvGc *u = user;
    if (u->x) return op_conv2d(t, u->x, in[0], in[1], u->p);
    return op_conv2d(t, in[0], in[1], in[2], u->p);
}

static Tensor *conv_fwd_nobias(Tape *t, Tensor *const *in, void *user) {
    ConvGc *u = user;
    return op_conv2d(t, in[0], in[1], NULL, u->p);
}

static void gc_conv(const char *name, int64_t B, int64_t C, int64_t H, int64_t W, int64_t OC,
                    int K, Conv2dParams p, bool bias, bool x_const) {
    Arena a;
    arena_init(&a, DEV_CPU, 1 << 20);
    Tensor *x = x_const ? tensor_4d(&a, B, C, H, W) : tensor_leaf(&a, 4, (int64_t[]){B, C, H, W});
    Tensor *w = tensor_leaf(&a, 4, (int64_t[]){OC, C / p.groups, K, K});
    Tensor *b = tensor_leaf(&a, 1, (int64_t[]){OC});
    gc_fill_uniform(x, 11, -1, 1);
    gc_fill_uniform(w, 12, -1, 1);
    gc_fill_uniform(b, 13, -1, 1);
    ConvGc u = {p, x_const ? x : NULL};
    int fails;
    if (x_const) fails = gradcheck(name, conv_fwd, &u, (Tensor *[]){w, b}, 2, (GcOptions){0});
    else if (bias) fails = gradcheck(name, conv_fwd, &u, (Tensor *[]){x, w, b}, 3, (GcOptions){0});
    else fails = gradcheck(name, conv_fwd_nobias, &u, (Tensor *[]){x, w}, 2, (GcOptions){0});
    EXPECT(fails == 0, "gradcheck %s: %d coordinates off", name, fails);
    arena_free(&a);
}

static void test_conv_gradcheck(void) {
    gc_conv("conv pointwise", 2, 4, 5, 6, 3, 1, P(1, 1, 0, 0, 1, 1, 1), true, false);
    gc_conv("conv im2col 3x3 s2", 2, 3, 7, 6, 4, 3, P(2, 2, 1, 1, 1, 1, 1), true, false);
    gc_conv("conv im2col dil 2", 1, 2, 7, 7, 3, 3, P(1, 1, 2, 2, 2, 2, 1), false, false);
    gc_conv("conv depthwise 3x3 s2", 2, 4, 7, 8, 4, 3, P(2, 2, 1, 1, 1, 1, 4), true, false);
    gc_conv("conv depthwise 5x5", 1, 3, 6, 7, 3, 5, P(1, 1, 2, 2, 1, 1, 3), false, false);
    gc_conv("conv grouped", 2, 4, 5, 5, 6, 3, P(1, 1, 1, 1, 1, 1, 2), true, false);
    gc_conv("conv x constant", 2, 3, 5, 5, 2, 3, P(1, 1, 1, 1, 1, 1, 1), true, true);
}

// ---- maxpool ----
static Tensor *from_values(Arena *a, int64_t H, int64_t W, const float *v) {
    Tensor *x = tensor_4d(a, 1, 1, H, W);
    memcpy(x->data, v, sizeof(float) * (size_t)(H * W));
    return x;
}

static void expect_values(const char *name, const Tensor *y, int64_t OH, int64_t OW,
                          const float *want) {
    EXPECT(y->shape[2] == OH && y->shape[3] == OW, "%s: output %lldx%lld, want %lldx%lld", name,
           (long long)y->shape[2], (long long)y->shape[3], (long long)OH, (long long)OW);
    if (y->shape[2] != OH || y->shape[3] != OW) return;
    for (int64_t i = 0; i < OH * OW; i++)
        EXPECT(y->data[i] == want[i] || (isnan(y->data[i]) && isnan(want[i])),
               "%s: element %lld is %g, want %g", name, (long long)i, y->data[i], want[i]);
}

#define POOL(k, s, pad, ceil) ((Pool2dParams){k, k, s, s, pad, pad, ceil})

// maxpool of the single plane v (H, W), checked against want (OH, OW).
static void expect_pool(Tape *t, const char *name, int64_t H, int64_t W, const float *v,
                        Pool2dParams p, int64_t OH, int64_t OW, const float *want) {
    expect_values(name, op_maxpool2d(t, from_values(t->arena, H, W, v), p), OH, OW, want);
}

static void test_maxpool_forward(void) {
    Arena a;
    arena_init(&a, DEV_CPU, 1 << 16);
    Tape t;
    tape_init(&t, &a, 1);
    const float x33[] = {1, 5, 2,
                         4, 3, 9,
                         8, 0, 6};
    // HGStem's pool: kernel 2, stride 1, no padding, ceil_mode (same size as floor here)
    expect_pool(&t, "k2 s1 ceil", 3, 3, x33, POOL(2, 1, 0, true), 2, 2, (float[]){5, 9, 8, 9});
    // ResNet stem's pool: kernel 3, stride 2, pad 1 -> windows rows/cols [0,2) and [1,4)
    const float x44[] = {1, 2, 3, 4,
                         8, 7, 6, 5,
                         9, 10, 11, 12,
                         16, 15, 14, 13};
    expect_pool(&t, "k3 s2 p1", 4, 4, x44, POOL(3, 2, 1, false), 2, 2, (float[]){8, 7, 16, 15});
    // 5x5, kernel 2 stride 2: floor gives 2x2; ceil adds the partial last row/column window
    float x55[25];
    for (int i = 0; i < 25; i++) x55[i] = (float)((i * 7) % 25);
    // x55 rows: 0 7 14 21 3 | 10 17 24 6 13 | 20 2 9 16 23 | 5 12 19 1 8 | 15 22 4 11 18
    expect_pool(&t, "k2 s2 floor", 5, 5, x55, POOL(2, 2, 0, false), 2, 2,
                (float[]){17, 24, 20, 19});
    expect_pool(&t, "k2 s2 ceil", 5, 5, x55, POOL(2, 2, 0, true), 3, 3,
                (float[]){17, 24, 13, 20, 19, 23, 22, 11, 18});
    // 6x6 kernel 3 stride 3 pad 1, ceil: (6+2-3+2)/3+1 = 3 windows, the last one [5,8) -> [5,6)
    float x66[36];
    for (int i = 0; i < 36; i++) x66[i] = (float)i;
    expect_pool(&t, "k3 s3 p1 ceil", 6, 6, x66, POOL(3, 3, 1, true), 3, 3,
                (float[]){7, 10, 11, 25, 28, 29, 31, 34, 35});
    // 3x3 kernel 2 stride 2 pad 1, ceil: 3 windows by the formula, but the third would start at
    // row 3 = H + pad (inside the bottom padding), so PyTorch drops it: 2x2.
    expect_pool(&t, "k2 s2 p1 ceil drop", 3, 3, x33, POOL(2, 2, 1, true), 2, 2,
                (float[]){1, 5, 8, 9});
    // NaN propagates (PyTorch CPU: a NaN replaces the running maximum)
    const float xnan[] = {1, NAN, 3, 4};
    expect_pool(&t, "nan", 2, 2, xnan, POOL(2, 2, 0, false), 1, 1, (float[]){NAN});
    tape_free(&t);
    arena_free(&a);
}

// The kernel against PyTorch's scalar loop (cpu_max_pool) on 2 threads, over random planes
// with ties (values on a coarse grid) and NaNs: values and argmax offsets must be identical.
static void test_maxpool_reference(void) {
    const Backend *be = backend_need(DEV_CPU);
    KernelCtx kc = {.n_threads = 2};
    const Pool2dParams cases[] = {POOL(2, 1, 0, true), POOL(3, 2, 1, false), POOL(3, 2, 1, true),
                                  POOL(2, 2, 0, true), POOL(5, 3, 2, true)};
    const int64_t n_planes = 24, H = 23, W = 29;
    Arena arena;
    arena_init(&arena, DEV_CPU, 1 << 16);
    Tape tape;
    tape_init(&tape, &arena, 1);
    float *x = rand_floats(n_planes * H * W, 77);
    for (int64_t i = 0; i < n_planes * H * W; i++) x[i] = i % 97 == 5 ? NAN : roundf(4 * x[i]);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        Pool2dParams p = cases[k];
        Tensor *shape_probe = op_maxpool2d(&tape, tensor_4d(&arena, 1, 1, H, W), p);
        int64_t OH = shape_probe->shape[2], OW = shape_probe->shape[3]; // tested above
        int64_t n = n_planes * OH * OW, bad = 0;
        float *y = xmalloc(sizeof(float) * (size_t)n);
        int32_t *idx = xmalloc(sizeof(int32_t) * (size_t)n);
        be->maxpool2d_fwd(&kc, y, idx, x, n_planes, H, W, OH, OW, p);
        for (int64_t pl = 0; pl < n_planes; pl++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    int64_t h0 = oh * p.stride_h - p.pad_h, w0 = ow * p.stride_w - p.pad_w;
                    int64_t h1 = MIN(h0 + p.k_h, H), w1 = MIN(w0 + p.k_w, W);
                    h0 = MAX(h0, 0), w0 = MAX(w0, 0);
                    int64_t best = h0 * W + w0;
                    float m = -INFINITY;
                    for (int64_t ih = h0; ih < h1; ih++)
                        for (int64_t iw = w0; iw < w1; iw++) {
                            float v = x[pl * H * W + ih * W + iw];
                            if (v > m || isnan(v)) m = v, best = ih * W + iw;
                        }
                    int64_t o = (pl * OH + oh) * OW + ow;
                    bool same = idx[o] == best && (y[o] == m || (isnan(y[o]) && isnan(m)));
                    if (!same && bad++ == 0)
                        EXPECT(same, "maxpool case %zu at %lld: %g @%d, want %g @%lld", k,
                               (long long)o, y[o], idx[o], m, (long long)best);
                }
        EXPECT(bad == 0, "maxpool case %zu: %lld windows differ", k, (long long)bad);
        free(y), free(idx);
    }
    free(x);
    tape_free(&tape);
    arena_free(&arena);
}

// Ties: the gradient of each window goes to its first maximum in row-major order.
static void test_maxpool_ties(void) {
    Arena a;
    arena_init(&a, DEV_CPU, 1 << 16);
    Tape t;
    tape_init(&t, &a, 1);
    Tensor *x = tensor_leaf(&a, 4, (int64_t[]){1, 1, 3, 3});
    for (int i = 0; i < 9; i++) x->data[i] = 2.0f; // every window ties everywhere
    x->data[8] = 1.0f;
    Tensor *y = op_maxpool2d(&t, x, POOL(2, 1, 0, true)); // 2x2 windows starting at 0,1,3,4
    EXPECT(tape_backward(&t, y, (float[]){1, 10, 100, 1000}) == 0, "backward failed");
    const float want[9] = {1, 10, 0, 100, 1000, 0, 0, 0, 0};
    for (int i = 0; i < 9; i++)
        EXPECT(x->grad[i] == want[i], "tie grad[%d] = %g, want %g", i, x->grad[i], want[i]);
    tape_free(&t);
    arena_free(&a);
}

static Tensor *maxpool_fwd(Tape *t, Tensor *const *in, void *user) {
    return op_maxpool2d(t, in[0], *(Pool2dParams *)user);
}

// Distinct values 0.05 apart (a random permutation), so that no +-h step changes an argmax.
static void fill_distinct(Tensor *x, uint64_t seed) {
    for (int64_t i = 0; i < x->n; i++) x->data[i] = (float)i;
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
    for (int64_t i = x->n - 1; i > 0; i--) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        int64_t j = (int64_t)(s % (uint64_t)(i + 1));
        float tmp = x->data[i];
        x->data[i] = x->data[j];
        x->data[j] = tmp;
    }
    for (int64_t i = 0; i < x->n; i++) x->data[i] = 0.05f * x->data[i] - 1.0f;
}

static void test_maxpool_gradcheck(void) {
    const Pool2dParams cases[] = {POOL(2, 1, 0, true), POOL(3, 2, 1, false), POOL(3, 2, 1, true),
                                  POOL(2, 2, 0, true)};
    const char *names[] = {"maxpool k2 s1 ceil", "maxpool k3 s2 p1", "maxpool k3 s2 p1 ceil",
                           "maxpool k2 s2 ceil"};
    for (int k = 0; k < 4; k++) {
        Arena a;
        arena_init(&a, DEV_CPU, 1 << 16);
        Tensor *x = tensor_leaf(&a, 4, (int64_t[]){2, 3, 7, 6});
        fill_distinct(x, (uint64_t)k + 1);
        Pool2dParams p = cases[k];
        // h = 1e-2 keeps a step well inside the 0.05 gap between values
        int fails = gradcheck(names[k], maxpool_fwd, &p, &x, 1, (GcOptions){0});
        EXPECT(fails == 0, "gradcheck %s: %d coordinates off", names[k], fails);
        arena_free(&a);
    }
}

// ---- pad and upsample ----
static void test_pad_forward(void) {
    Arena a;
    arena_init(&a, DEV_CPU, 1 << 16);
    Tape t;
    tape_init(&t, &a, 1);
    const float x[] = {1, 2, 3, 4, 5, 6}; // 2x3
    // HGStem's F.pad(x, [0, 1, 0, 1])
    expect_values("pad [0,1,0,1]", op_pad2d(&t, from_values(&a, 2, 3, x), 0, 1, 0, 1), 3, 4,
                  (float[]){1, 2, 3, 0, 4, 5, 6, 0, 0, 0, 0, 0});
    expect_values("pad [2,1,1,0]", op_pad2d(&t, from_values(&a, 2, 3, x), 2, 1, 1, 0), 3, 6,
                  (float[]){0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 0, 4, 5, 6, 0});
    expect_values("pad none", op_pad2d(&t, from_values(&a, 2, 3, x), 0, 0, 0, 0), 2, 3, x);
    tape_free(&t);
    arena_free(&a);
}

static void test_upsample_forward(void) {
    Arena a;
    arena_init(&a, DEV_CPU, 1 << 16);
    Tape t;
    tape_init(&t, &a, 1);
    const float x[] = {1, 2, 3, 4, 5, 6}; // 2x3
    const float want2[] = {1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3,
                           4, 4, 5, 5, 6, 6, 4, 4, 5, 5, 6, 6};
    Tensor *y2 = op_upsample_nearest2d(&t, from_values(&a, 2, 3, x), 2);
    expect_values("upsample 2", y2, 4, 6, want2);
    Tensor *y3 = op_upsample_nearest2d(&t, from_values(&a, 2, 3, x), 3);
    EXPECT(y3->shape[2] == 6 && y3->shape[3] == 9, "upsample 3: output %lldx%lld",
           (long long)y3->shape[2], (long long)y3->shape[3]);
    EXPECT(y3->data[5 * 9 + 8] == 6 && y3->data[2 * 9 + 3] == 2 && y3->data[3 * 9 + 2] == 4,
           "upsample 3: wrong source pixels");
    tape_free(&t);
    arena_free(&a);
}

typedef struct PadArgs {
    int l, r, t, b;
} PadArgs;

static Tensor *pad_fwd(Tape *t, Tensor *const *in, void *user) {
    PadArgs *p = user;
    return op_pad2d(t, in[0], p->l, p->r, p->t, p->b);
}

static Tensor *upsample_fwd(Tape *t, Tensor *const *in, void *user) {
    return op_upsample_nearest2d(t, in[0], *(int *)user);
}

static void test_resample_gradcheck(void) {
    Arena a;
    arena_init(&a, DEV_CPU, 1 << 16);
    Tensor *x = tensor_leaf(&a, 4, (int64_t[]){2, 3, 4, 5});
    gc_fill_uniform(x, 21, -1, 1);
    PadArgs pa = {1, 2, 0, 3};
    EXPECT(gradcheck("pad2d", pad_fwd, &pa, &x, 1, (GcOptions){0}) == 0, "gradcheck pad2d");
    int s2 = 2, s3 = 3;
    EXPECT(gradcheck("upsample 2", upsample_fwd, &s2, &x, 1, (GcOptions){0}) == 0,
           "gradcheck upsample 2");
    EXPECT(gradcheck("upsample 3", upsample_fwd, &s3, &x, 1, (GcOptions){0}) == 0,
           "gradcheck upsample 3");
    arena_free(&a);
}

int main(void) {
    test_conv_reference();
    test_conv_threads();
    test_conv_winograd();
    test_conv_gradcheck();
    test_maxpool_forward();
    test_maxpool_reference();
    test_maxpool_ties();
    test_maxpool_gradcheck();
    test_pad_forward();
    test_upsample_forward();
    test_resample_gradcheck();
    return expect_report();
}
