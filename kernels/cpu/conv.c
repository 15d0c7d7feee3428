/* conv.c -- nn.Conv2d forward and backward on the CPU, four paths:
 * - depthwise (groups == C == OC): a direct kernel, parallel over planes (forward) or
 *   channels (backward), with no GEMM; stride 1 runs over zero-padded planes;
 * - pointwise (1x1, stride 1, no padding): the image is already the column matrix, so one
 *   GEMM per image and group, no copy;
 * - Winograd F(4x4, 3x3) (conv_winograd.c) for dense 3x3 stride-1 convs with >= 32 channels
 *   in and out and >= 40 output tiles (winograd_applies): 2.25 instead of 9 multiply-adds per
 *   output and channel pair, as 36 GEMMs over both images' tiles. RT-DETR-L's dense 3x3
 *   stride-1 convs of a training step (forward + backward, 320 px, batch 2) take 433 ms on 1
 *   thread and 241 ms on 2 instead of im2col's 813 and 467 (1.9x; the 256-channel RepConvs
 *   at 40x40 2.3x; tests/bench_ops_conv prints both). Smaller maps and channel counts stay on
 *   im2col, where the transforms cost more than they save. Results differ from im2col's by
 *   ~1e-5 of the outputs' scale (test_ops_conv states the bound);
 * - everything else: im2col in chunks of output rows, then per image, group and chunk
 *   out_g (OCg, rows*OW) = W_g (OCg, Cg*KH*KW) @ col (Cg*KH*KW, rows*OW); backward
 *   dW_g += dout_g @ col^T and dcol = W_g^T @ dout_g, folded back into dx by col2im.
 * Threads: OpenBLAS threads the GEMMs; im2col (over column rows), col2im (over channels) and
 * the depthwise loops are OpenMP loops. Both share libgomp's thread pool (blas.c loads the
 * OpenMP build of OpenBLAS), so the regions do not fight over cores. Our loops compute each
 * element on one thread in a fixed order, so their results do not depend on the thread count. */
#include "kernels/base.h"
#include "kernels/cpu/conv_winograd.h"
#include "kernels/cpu/cpu_kernels.h"

// Column scratch cap, in floats (16 MiB): RT-DETR-L's largest im2col at 320 px (3x3 over
// 64 channels at 80x80, 3.7M floats) fits in one chunk; bigger inputs are chunked by rows.
#define COL_MAX_FLOATS ((int64_t)1 << 22)
// The forward's chunk target (1 MiB): a chunk the GEMM reads back from L2 right after
// im2col wrote it. Thin convs gain most (HGStem's 2x2 conv over 32 channels: 5.1 -> 3.5 ms
// at 320 px); the backward keeps whole images (smaller chunks made 2-thread dW GEMMs slower).
#define COL_CHUNK_FLOATS ((int64_t)1 << 18)
// GEMM columns (rows * OW) below which a chunk is not cut further: narrower GEMMs lose
// more to OpenBLAS's per-call packing than the cache saves.
#define COL_MIN_N 1024

// Multiply-adds (depthwise) or copied floats (im2col, col2im) below which a loop stays on
// one thread.
#define PAR_MIN_WORK ((int64_t)1 << 15)

// The scratch of the calling thread (im2col's column buffer, at most COL_MAX_FLOATS, or
// conv_winograd.c's transforms), kept between calls and grown on demand: a fresh multi-MiB
// allocation per call came back from the kernel as new pages, one page fault per 4 KiB the
// im2col then touched. Never freed.
static _Thread_local float *col_buf;
static _Thread_local int64_t col_buf_floats;

float *conv_scratch_cpu(int64_t n) {
    if (n > col_buf_floats) {
        free_cpu(col_buf);
        col_buf = alloc_cpu(sizeof(float) * (size_t)n);
        col_buf_floats = n;
    }
    return col_buf;
}

typedef struct Geom {
    int64_t B, C, H, W, OC, OH, OW;
    int KH, KW;
    Conv2dParams p;
    int64_t Cg, OCg; // channels per group, in and out
    int64_t K;       // rows of the column matrix: Cg*KH*KW
} Geom;

static Geom geom(int64_t B, int64_t C, int64_t H, int64_t W, int64_t OC, int64_t OH, int64_t OW,
                 int KH, int KW, Conv2dParams p) {
    CHECK(p.groups >= 1 && C % p.groups == 0 && OC % p.groups == 0,
          "conv2d: groups %d must divide C %lld and OC %lld", p.groups, (long long)C,
          (long long)OC);
    Geom g = {B, C, H, W, OC, OH, OW, KH, KW, p, C / p.groups, OC / p.groups, 0};
    g.K = g.Cg * KH * KW;
    return g;
}

// The outputs o in [*lo, *hi) whose input index o*stride + off lies in [0, n); n_out outputs.
static void valid_range(int64_t off, int stride, int64_t n, int64_t n_out, int64_t *lo,
                        int64_t *hi) {
    int64_t a = off >= 0 ? 0 : CEIL_DIV(-off, stride);
    int64_t b = n - 1 - off >= 0 ? (n - 1 - off) / stride + 1 : 0;
    *lo = MIN(a, n_out);
    *hi = MAX(*lo, MIN(b, n_out));
}

// Where tap (kh, kw) reaches inside the input: output (oh, ow) reads input row
// oh*stride_h + offh and column ow*stride_w + off, inside for oh in [oh_lo, oh_hi) and ow in
// [lo, hi).
typedef struct TapReach {
    int64_t offh, oh_lo, oh_hi, off, lo, hi;
} TapReach;

static TapReach tap_reach(const Geom *g, int kh, int kw) {
    const Conv2dParams *p = &g->p;
    TapReach r;
    r.offh = (int64_t)kh * p->dil_h - p->pad_h;
    r.off = (int64_t)kw * p->dil_w - p->pad_w;
    valid_range(r.offh, p->stride_h, g->H, g->OH, &r.oh_lo, &r.oh_hi);
    valid_range(r.off, p->stride_w, g->W, g->OW, &r.lo, &r.hi);
    return r;
}

static bool is_pointwise(const Geom *g) {
    const Conv2dParams *p = &g->p;
    return g->KH == 1 && g->KW == 1 && p->stride_h == 1 && p->stride_w == 1 && p->pad_h == 0 &&
           p->pad_w == 0;
}

static bool is_depthwise(const Geom *g) { return g->p.groups == g->C && g->OC == g->C; }

// The inner loops of im2col, col2im and the depthwise kernels, over n outputs of one row.
// Strides 1 and 2 (all that RT-DETR uses) get loops of their own, with a constant stride the
// compiler turns into vector loads and shuffles instead of element-by-element gathers.
// y[i] = x[i * stride]
static void copy_gather(float *restrict y, const float *restrict x, int64_t stride, int64_t n) {
    if (stride == 1) {
        if (n > 0) memcpy(y, x, sizeof(float) * (size_t)n);
    } else if (stride == 2) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) y[i] = x[i * 2];
    } else {
        for (int64_t i = 0; i < n; i++) y[i] = x[i * stride];
    }
}

// y[i] += a * x[i * stride]
static void axpy_gather(float *restrict y, float a, const float *restrict x, int64_t stride,
                        int64_t n) {
    if (stride == 1) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
    } else if (stride == 2) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) y[i] += a * x[i * 2];
    } else {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) y[i] += a * x[i * stride];
    }
}

// y[i * stride] += a * x[i]
static void axpy_scatter(float *restrict y, int64_t stride, float a, const float *restrict x,
                         int64_t n) {
    if (stride == 1) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
    } else if (stride == 2) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) y[i * 2] += a * x[i];
    } else {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) y[i * stride] += a * x[i];
    }
}

// y[i] += a[i] * x[i * stride]
static void mul_add_gather(float *restrict y, const float *restrict a, const float *restrict x,
                           int64_t stride, int64_t n) {
    if (stride == 1) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) y[i] += a[i] * x[i];
    } else if (stride == 2) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) y[i] += a[i] * x[i * 2];
    } else {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) y[i] += a[i] * x[i * stride];
    }
}

// sum_i x[i]
static float sum_row(const float *x, int64_t n) {
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = 0; i < n; i++) acc += x[i];
    return acc;
}

// sum_i x[i] * y[i]
static float dot_row(const float *x, const float *y, int64_t n) {
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = 0; i < n; i++) acc += x[i] * y[i];
    return acc;
}

// Output rows per im2col chunk: about `target` floats of column matrix, at least COL_MIN_N
// columns, at most COL_MAX_FLOATS floats.
static int64_t chunk_rows(const Geom *g, int64_t target) {
    int64_t rows = MAX(target / (g->K * g->OW), CEIL_DIV(COL_MIN_N, g->OW));
    rows = MIN(rows, COL_MAX_FLOATS / (g->K * g->OW));
    return MAX(1, MIN(g->OH, rows));
}

// col (K, n_oh*OW) for output rows [oh0, oh0+n_oh) of one group's input x (Cg,H,W).
// Row r = (c*KH + kh)*KW + kw; zero where the window reads padding.
static void im2col(KernelCtx *kc, const Geom *g, float *col, const float *x, int64_t oh0,
                   int64_t n_oh) {
    const Conv2dParams *p = &g->p;
    const int64_t OW = g->OW, n = n_oh * OW;
#pragma omp parallel for num_threads(kc->n_threads) if (g->K * n > PAR_MIN_WORK)
    for (int64_t r = 0; r < g->K; r++) {
        int64_t c = r / (g->KH * g->KW);
        int kh = (int)(r / g->KW % g->KH), kw = (int)(r % g->KW);
        int64_t off = (int64_t)kw * p->dil_w - p->pad_w, lo, hi;
        valid_range(off, p->stride_w, g->W, OW, &lo, &hi);
        const float *xc = x + c * g->H * g->W;
        float *dst = col + r * n;
        for (int64_t oh = oh0; oh < oh0 + n_oh; oh++, dst += OW) {
            int64_t ih = oh * p->stride_h - p->pad_h + (int64_t)kh * p->dil_h;
            if (ih < 0 || ih >= g->H) {
                memset(dst, 0, (size_t)OW * sizeof(float));
                continue;
            }
            const float *src = xc + ih * g->W;
            for (int64_t ow = 0; ow < lo; ow++) dst[ow] = 0.0f;
            copy_gather(dst + lo, src + lo * p->stride_w + off, p->stride_w, hi - lo);
            for (int64_t ow = hi; ow < OW; ow++) dst[ow] = 0.0f;
        }
    }
}

// dx (Cg,H,W) += the columns of dcol (K, n_oh*OW), im2col's adjoint.
// Parallel over input channels: channel c's plane only receives the rows of channel c.
static void col2im(KernelCtx *kc, const Geom *g, float *dx, const float *dcol, int64_t oh0,
                   int64_t n_oh) {
    const Conv2dParams *p = &g->p;
    const int64_t OW = g->OW, n = n_oh * OW;
#pragma omp parallel for num_threads(kc->n_threads) if (g->K * n > PAR_MIN_WORK)
    for (int64_t c = 0; c < g->Cg; c++) {
        float *dxc = dx + c * g->H * g->W;
        for (int kh = 0; kh < g->KH; kh++)
            for (int kw = 0; kw < g->KW; kw++) {
                const float *src = dcol + ((c * g->KH + kh) * g->KW + kw) * n;
                int64_t off = (int64_t)kw * p->dil_w - p->pad_w, lo, hi;
                valid_range(off, p->stride_w, g->W, OW, &lo, &hi);
                for (int64_t oh = oh0; oh < oh0 + n_oh; oh++, src += OW) {
                    int64_t ih = oh * p->stride_h - p->pad_h + (int64_t)kh * p->dil_h;
                    if (ih < 0 || ih >= g->H) continue;
                    axpy_scatter(dxc + ih * g->W + lo * p->stride_w + off, p->stride_w, 1.0f,
                                 src + lo, hi - lo);
                }
            }
    }
}

// ---- depthwise: out[b,c] = sum_{kh,kw} w[c,kh,kw] * x[b,c] shifted, one plane at a time ----
// Loops run tap by tap (kh, kw), then over the rows and columns the tap reaches inside the
// image, so the bounds are computed once per tap and the inner loop is a plain vector update.

static void depthwise_fwd(KernelCtx *kc, const Geom *g, float *out, const float *x,
                          const float *w, const float *bias) {
    const Conv2dParams *p = &g->p;
    const int64_t n_planes = g->B * g->C, sw = p->stride_w;
    const int64_t work = n_planes * g->OH * g->OW * g->KH * g->KW;
#pragma omp parallel for num_threads(kc->n_threads) if (work > PAR_MIN_WORK)
    for (int64_t bc = 0; bc < n_planes; bc++) {
        const int64_t c = bc % g->C;
        const float *xp = x + bc * g->H * g->W, *wc = w + c * g->KH * g->KW;
        float *op = out + bc * g->OH * g->OW;
        const float b0 = bias ? bias[c] : 0.0f;
        for (int64_t i = 0; i < g->OH * g->OW; i++) op[i] = b0;
        for (int kh = 0; kh < g->KH; kh++)
            for (int kw = 0; kw < g->KW; kw++) {
                const TapReach r = tap_reach(g, kh, kw);
                const float wv = wc[kh * g->KW + kw];
                for (int64_t oh = r.oh_lo; oh < r.oh_hi; oh++) {
                    const float *xrow = xp + (oh * p->stride_h + r.offh) * g->W;
                    axpy_gather(op + oh * g->OW + r.lo, wv, xrow + r.lo * sw + r.off, sw,
                                r.hi - r.lo);
                }
            }
    }
}

// Parallel over channels, images inside: dx planes are disjoint per (b,c), and dw[c] sums over
// every image, so one thread owns channel c for both. A tap's weight gradient adds the
// products of its rows column by column (prod) and sums them once at the end: a sum per row
// (10-40 floats at RT-DETR's strided depthwise convs) spent most of its time in the omp simd
// reduction's serial end (see SumLanes in cpu_kernels.h).
static void depthwise_bwd(KernelCtx *kc, const Geom *g, float *dx, float *dw, const float *dout,
                          const float *x, const float *w) {
    const Conv2dParams *p = &g->p;
    const int64_t sw = p->stride_w;
    const int64_t work = g->B * g->C * g->OH * g->OW * g->KH * g->KW;
#pragma omp parallel num_threads(kc->n_threads) if (work > PAR_MIN_WORK)
    {
        float *prod = alloc_cpu(sizeof(float) * (size_t)MAX(g->OW, 1));
#pragma omp for
        for (int64_t c = 0; c < g->C; c++) {
            for (int64_t b = 0; b < g->B; b++) {
                const int64_t bc = b * g->C + c;
                const float *xp = x + bc * g->H * g->W, *dop = dout + bc * g->OH * g->OW;
                float *dxp = dx ? dx + bc * g->H * g->W : NULL;
                for (int tap = 0; tap < g->KH * g->KW; tap++) {
                    const TapReach r = tap_reach(g, tap / g->KW, tap % g->KW);
                    const int64_t n = r.hi - r.lo;
                    const float wv = w[c * g->KH * g->KW + tap];
                    if (dw) memset(prod, 0, sizeof(float) * (size_t)n); // n >= 0: valid_range
                    for (int64_t oh = r.oh_lo; oh < r.oh_hi; oh++) {
                        const int64_t at = (oh * p->stride_h + r.offh) * g->W + r.lo * sw + r.off;
                        const float *drow = dop + oh * g->OW + r.lo;
                        if (dxp) axpy_scatter(dxp + at, sw, wv, drow, n);
                        if (dw) mul_add_gather(prod, drow, xp + at, sw, n);
                    }
                    if (dw) dw[c * g->KH * g->KW + tap] += sum_row(prod, n);
                }
            }
        }
        free_cpu(prod);
    }
}

// ---- depthwise, stride 1: one long vector loop per tap over a zero-padded plane ----
// With the input plane zero-padded to (Hp, Wp), output (oh, ow) reads
// xp[(oh + kh*dil_h) * Wp + ow + kw*dil_w]. An output plane stored with row pitch Wp is then,
// tap by tap, ONE axpy over L = (OH-1)*Wp + OW elements of xp at offset kh*dil_h*Wp + kw*dil_w,
// instead of OH short ones (RT-DETR's 5x5 depthwise convs run on 20- and 10-wide rows). The
// Wp - OW columns after each output row are scratch; in the backward they hold zeros.

typedef struct Padded {
    int64_t Hp, Wp, L;
} Padded;

static Padded padded(const Geom *g) {
    Padded q = {g->H + 2 * g->p.pad_h, g->W + 2 * g->p.pad_w, 0};
    q.L = (g->OH - 1) * q.Wp + g->OW;
    return q;
}

// Offset in the padded plane of tap (kh, kw).
static int64_t tap_offset(const Geom *g, const Padded *q, int kh, int kw) {
    return (int64_t)kh * g->p.dil_h * q->Wp + (int64_t)kw * g->p.dil_w;
}

// xp (Hp, Wp) = the plane x (H, W) inside a border of zeros.
static void pad_plane(const Geom *g, const Padded *q, float *xp, const float *x) {
    memset(xp, 0, sizeof(float) * (size_t)(q->Hp * q->Wp));
    for (int64_t h = 0; h < g->H; h++)
        memcpy(xp + (h + g->p.pad_h) * q->Wp + g->p.pad_w, x + h * g->W,
               sizeof(float) * (size_t)g->W);
}

static void depthwise_s1_fwd(KernelCtx *kc, const Geom *g, float *out, const float *x,
                             const float *w, const float *bias) {
    const Padded q = padded(g);
    const int64_t n_planes = g->B * g->C, taps = g->KH * g->KW;
#pragma omp parallel num_threads(kc->n_threads) if (n_planes * q.L * taps > PAR_MIN_WORK)
    {
        float *xp = alloc_cpu(sizeof(float) * (size_t)(q.Hp * q.Wp + q.L)), *acc = xp + q.Hp * q.Wp;
#pragma omp for
        for (int64_t bc = 0; bc < n_planes; bc++) {
            const int64_t c = bc % g->C;
            pad_plane(g, &q, xp, x + bc * g->H * g->W);
            const float b0 = bias ? bias[c] : 0.0f;
            for (int64_t i = 0; i < q.L; i++) acc[i] = b0;
            for (int kh = 0; kh < g->KH; kh++)
                for (int kw = 0; kw < g->KW; kw++)
                    axpy_gather(acc, w[c * taps + kh * g->KW + kw], xp + tap_offset(g, &q, kh, kw),
                                1, q.L);
            float *op = out + bc * g->OH * g->OW;
            for (int64_t oh = 0; oh < g->OH; oh++)
                memcpy(op + oh * g->OW, acc + oh * q.Wp, sizeof(float) * (size_t)g->OW);
        }
        free_cpu(xp);
    }
}

// Parallel over channels, as depthwise_bwd. Per image: dout spread to pitch Wp (zeros in the
// scratch columns, so they add nothing), then dw[c, tap] += dot(dout, xp shifted) and
// dxp (padded) += w[c, tap] * dout shifted, whose interior is added to dx.
static void depthwise_s1_bwd(KernelCtx *kc, const Geom *g, float *dx, float *dw, const float *dout,
                             const float *x, const float *w) {
    const Padded q = padded(g);
    const int64_t taps = g->KH * g->KW, plane = q.Hp * q.Wp;
#pragma omp parallel num_threads(kc->n_threads) if (g->B * g->C * q.L * taps > PAR_MIN_WORK)
    {
        float *xp = alloc_cpu(sizeof(float) * (size_t)(2 * plane + q.L));
        float *dxp = xp + plane, *dpw = dxp + plane;
#pragma omp for
        for (int64_t c = 0; c < g->C; c++)
            for (int64_t b = 0; b < g->B; b++) {
                const int64_t bc = b * g->C + c;
                const float *dop = dout + bc * g->OH * g->OW;
                memset(dpw, 0, sizeof(float) * (size_t)q.L);
                for (int64_t oh = 0; oh < g->OH; oh++)
                    memcpy(dpw + oh * q.Wp, dop + oh * g->OW, sizeof(float) * (size_t)g->OW);
                if (dw) {
                    pad_plane(g, &q, xp, x + bc * g->H * g->W);
                    for (int kh = 0; kh < g->KH; kh++)
                        for (int kw = 0; kw < g->KW; kw++)
                            dw[c * taps + kh * g->KW + kw] +=
                                dot_row(dpw, xp + tap_offset(g, &q, kh, kw), q.L);
                }
                if (!dx) continue;
                memset(dxp, 0, sizeof(float) * (size_t)plane);
                for (int kh = 0; kh < g->KH; kh++)
                    for (int kw = 0; kw < g->KW; kw++)
                        axpy_scatter(dxp + tap_offset(g, &q, kh, kw), 1,
                                     w[c * taps + kh * g->KW + kw], dpw, q.L);
                float *dxb = dx + bc * g->H * g->W;
                for (int64_t h = 0; h < g->H; h++)
                    axpy_gather(dxb + h * g->W, 1.0f, dxp + (h + g->p.pad_h) * q.Wp + g->p.pad_w, 1,
                                g->W);
            }
        free_cpu(xp);
    }
}

// ---- entry points ----

static bool use_winograd = true;

void conv2d_cpu_use_winograd(bool on) { use_winograd = on; }

// The pointwise and im2col paths of the forward: out = conv(x, w), no bias.
static void gemm_conv_fwd(KernelCtx *kc, const Geom *g, float *out, const float *x,
                          const float *w) {
    const int64_t HW = g->H * g->W, OHW = g->OH * g->OW, OW = g->OW;
    const int64_t rows = chunk_rows(g, COL_CHUNK_FLOATS);
    const bool pointwise = is_pointwise(g);
    float *col = pointwise ? NULL : conv_scratch_cpu(g->K * rows * OW);
    for (int64_t b = 0; b < g->B; b++)
        for (int grp = 0; grp < g->p.groups; grp++) {
            const float *xg = x + (b * g->C + grp * g->Cg) * HW, *wg = w + grp * g->OCg * g->K;
            float *og = out + (b * g->OC + grp * g->OCg) * OHW;
            if (pointwise) {
                gemm_cpu(kc, false, false, g->OCg, HW, g->Cg, 1.0f, wg, g->K, xg, HW, 0.0f, og,
                         HW);
                continue;
            }
            for (int64_t oh0 = 0; oh0 < g->OH; oh0 += rows) {
                const int64_t n_oh = MIN(rows, g->OH - oh0), n = n_oh * OW;
                im2col(kc, g, col, xg, oh0, n_oh);
                gemm_cpu(kc, false, false, g->OCg, n, g->K, 1.0f, wg, g->K, col, n, 0.0f,
                         og + oh0 * OW, OHW);
            }
        }
}

void conv2d_fwd_cpu(KernelCtx *kc, float *out, const float *x, const float *w, const float *bias,
                    int64_t B, int64_t C, int64_t H, int64_t W, int64_t OC, int64_t OH,
                    int64_t OW, int KH, int KW, Conv2dParams p) {
    const Geom g = geom(B, C, H, W, OC, OH, OW, KH, KW, p);
    if (is_depthwise(&g)) {
        if (p.stride_h == 1 && p.stride_w == 1)
            depthwise_s1_fwd(kc, &g, out, x, w, bias);
        else
            depthwise_fwd(kc, &g, out, x, w, bias);
        return;
    }
    WinoShape ws;
    if (use_winograd && winograd_applies(&ws, B, C, H, W, OC, OH, OW, KH, KW, p))
        winograd_conv2d_fwd(kc, &ws, out, x, w);
    else
        gemm_conv_fwd(kc, &g, out, x, w);
    if (!bias) return;
    const int64_t OHW = OH * OW;
    for (int64_t bo = 0; bo < B * OC; bo++) {
        float *o = out + bo * OHW;
        const float v = bias[bo % OC];
        for (int64_t i = 0; i < OHW; i++) o[i] += v;
    }
}

void conv2d_bwd_cpu(KernelCtx *kc, float *dx, float *dw, float *dbias, const float *dout,
                    const float *x, const float *w, int64_t B, int64_t C, int64_t H, int64_t W,
                    int64_t OC, int64_t OH, int64_t OW, int KH, int KW, Conv2dParams p) {
    const Geom g = geom(B, C, H, W, OC, OH, OW, KH, KW, p);
    const int64_t HW = H * W, OHW = OH * OW;
    if (dbias) {
        for (int64_t oc = 0; oc < OC; oc++) {
            float acc = 0.0f;
            for (int64_t b = 0; b < B; b++) {
                const float *d = dout + (b * OC + oc) * OHW;
                float s = 0.0f;
#pragma omp simd reduction(+ : s)
                for (int64_t i = 0; i < OHW; i++) s += d[i];
                acc += s;
            }
            dbias[oc] += acc;
        }
    }
    if (!dx && !dw) return;
    if (is_depthwise(&g)) {
        if (p.stride_h == 1 && p.stride_w == 1)
            depthwise_s1_bwd(kc, &g, dx, dw, dout, x, w);
        else
            depthwise_bwd(kc, &g, dx, dw, dout, x, w);
        return;
    }
    WinoShape ws;
    if (use_winograd && winograd_applies(&ws, B, C, H, W, OC, OH, OW, KH, KW, p)) {
        winograd_conv2d_bwd(kc, &ws, dx, dw, dout, x, w);
        return;
    }
    const int64_t rows = chunk_rows(&g, COL_MAX_FLOATS);
    const bool pointwise = is_pointwise(&g);
    float *col = pointwise ? NULL : conv_scratch_cpu(g.K * rows * OW);
    for (int64_t b = 0; b < B; b++)
        for (int grp = 0; grp < p.groups; grp++) {
            const float *xg = x + (b * C + grp * g.Cg) * HW, *wg = w + grp * g.OCg * g.K;
            const float *dg = dout + (b * OC + grp * g.OCg) * OHW;
            float *dxg = dx ? dx + (b * C + grp * g.Cg) * HW : NULL;
            float *dwg = dw ? dw + grp * g.OCg * g.K : NULL;
            if (pointwise) {
                if (dwg) // dW_g += dout_g @ x_g^T
                    gemm_cpu(kc, false, true, g.OCg, g.Cg, HW, 1.0f, dg, HW, xg, HW, 1.0f, dwg,
                             g.K);
                if (dxg) // dx_g += W_g^T @ dout_g
                    gemm_cpu(kc, true, false, g.Cg, HW, g.OCg, 1.0f, wg, g.K, dg, HW, 1.0f, dxg,
                             HW);
                continue;
            }
            for (int64_t oh0 = 0; oh0 < OH; oh0 += rows) {
                const int64_t n_oh = MIN(rows, OH - oh0), n = n_oh * OW;
                const float *dchunk = dg + oh0 * OW;
                if (dwg) {
                    im2col(kc, &g, col, xg, oh0, n_oh);
                    gemm_cpu(kc, false, true, g.OCg, g.K, n, 1.0f, dchunk, OHW, col, n, 1.0f, dwg,
                             g.K);
                }
                if (dxg) { // the column buffer is free again: reuse it for dcol
                    gemm_cpu(kc, true, false, g.K, n, g.OCg, 1.0f, wg, g.K, dchunk, OHW, 0.0f, col,
                             n);
                    col2im(kc, &g, dxg, col, oh0, n_oh);
                }
            }
        }
}
