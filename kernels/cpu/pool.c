/* pool.c -- nn.MaxPool2d on the CPU, planes in parallel. Each window makes the same compares
 * as PyTorch's cpu_max_pool (aten/src/ATen/native/cpu/MaxPoolKernel.cpp): clipped to the
 * image (padding is -inf, so it never wins), the first maximum in row-major order is kept,
 * and a NaN always replaces the running maximum. The index it records routes the gradient. */
#include <math.h>

#include "kernels/base.h"
#include "kernels/cpu/cpu_kernels.h"

// Output columns ow whose window column ow*stride + off lies in [0, W): [*lo, *hi).
static void valid_cols(int64_t off, int stride, int64_t W, int64_t OW, int64_t *lo, int64_t *hi) {
    int64_t a = off >= 0 ? 0 : CEIL_DIV(-off, stride);
    int64_t b = W - 1 - off >= 0 ? (W - 1 - off) / stride + 1 : 0;
    *lo = MIN(a, OW);
    *hi = MAX(*lo, MIN(b, OW));
}

// One window element for n neighbouring windows: lane j compares src[j * sw] (flat index
// base + j * sw in the plane) with its running maximum m[j] and index best[j] (NULL: no
// indices). A NaN always wins. int32 indices and counter keep the loop in 4-lane vectors;
// the callers pass sw = 1 as a constant, which turns the strided loads into plain ones.
static inline void window_step(float *restrict m, int32_t *restrict best, const float *restrict src,
                               int32_t base, int sw, int32_t n) {
    if (best) {
#pragma omp simd
        for (int32_t j = 0; j < n; j++) {
            float v = src[j * sw];
            bool take = (v > m[j]) | (v != v);
            m[j] = take ? v : m[j];
            best[j] = take ? base + j * sw : best[j];
        }
    } else {
#pragma omp simd
        for (int32_t j = 0; j < n; j++) {
            float v = src[j * sw];
            m[j] = (v > m[j]) | (v != v) ? v : m[j];
        }
    }
}

// One output row at a time, vectorised across its windows: the window elements are visited
// in row-major order (ih, then kw), each lane keeping its running maximum in the output row
// and its offset in the index row, so every window sees PyTorch's sequence of compares.
void maxpool2d_fwd_cpu(KernelCtx *kc, float *out, int32_t *idx, const float *x, int64_t n_planes,
                       int64_t H, int64_t W, int64_t OH, int64_t OW, Pool2dParams p) {
    CHECK(H * W <= INT32_MAX, "maxpool2d: plane of %lld elements too large for int32 indices",
          (long long)(H * W));
    const int64_t work = n_planes * OH * OW * p.k_h * p.k_w, sw = p.stride_w;
#pragma omp parallel for num_threads(kc->n_threads) if (work > (1 << 15))
    for (int64_t pl = 0; pl < n_planes; pl++) {
        const float *xp = x + pl * H * W;
        for (int64_t oh = 0; oh < OH; oh++) {
            int64_t h0 = oh * p.stride_h - p.pad_h, h1 = MIN(h0 + p.k_h, H);
            h0 = MAX(h0, 0);
            float *m = out + (pl * OH + oh) * OW;
            int32_t *best = idx ? idx + (pl * OH + oh) * OW : NULL;
#pragma omp simd
            for (int64_t ow = 0; ow < OW; ow++) m[ow] = -INFINITY;
            if (best) { // the first in-image element, kept when nothing beats -inf
                const int32_t row0 = (int32_t)(h0 * W), s = (int32_t)sw, pad = p.pad_w;
#pragma omp simd
                for (int32_t ow = 0; ow < (int32_t)OW; ow++)
                    best[ow] = row0 + MAX(ow * s - pad, 0);
            }
            for (int64_t ih = h0; ih < h1; ih++)
                for (int kw = 0; kw < p.k_w; kw++) {
                    const int64_t off = kw - p.pad_w;
                    int64_t lo, hi;
                    valid_cols(off, p.stride_w, W, OW, &lo, &hi);
                    const int64_t first = ih * W + lo * sw + off; // in-plane index of window lo
                    const int32_t n = (int32_t)(hi - lo);
                    int32_t *b = best ? best + lo : NULL;
                    if (sw == 1)
                        window_step(m + lo, b, xp + first, (int32_t)first, 1, n);
                    else
                        window_step(m + lo, b, xp + first, (int32_t)first, (int)sw, n);
                }
        }
    }
}

// Planes in parallel: windows of one plane may share a maximum, so a plane is one thread's.
// idx says where each gradient goes: the window geometry p is not needed here.
void maxpool2d_bwd_cpu(KernelCtx *kc, float *dx, const float *dout, const int32_t *idx,
                       int64_t n_planes, int64_t H, int64_t W, int64_t OH, int64_t OW,
                       Pool2dParams p) {
#pragma omp parallel for num_threads(kc->n_threads) if (n_planes * OH * OW > (1 << 16))
    for (int64_t pl = 0; pl < n_planes; pl++) {
        float *dxp = dx + pl * H * W;
        const float *dp = dout + pl * OH * OW;
        const int32_t *ip = idx + pl * OH * OW;
        for (int64_t i = 0; i < OH * OW; i++) dxp[ip[i]] += dp[i];
    }
}
