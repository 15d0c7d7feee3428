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
            for (int64_t ow = 0; ow < OW; ow++) m[ow] = -INFINITY;
            if (best) // the first in-image element, kept when nothing beats -inf
                for (int64_t ow = 0; ow < OW; ow++)
                    best[ow] = (int32_t)(h0 * W + MAX(ow * sw - p.pad_w, 0));
            for (int64_t ih = h0; ih < h1; ih++)
                for (int kw = 0; kw < p.k_w; kw++) {
                    const int64_t off = kw - p.pad_w;
                    const float *row = xp + ih * W;
                    int64_t lo, hi;
                    valid_cols(off, p.stride_w, W, OW, &lo, &hi);
                    if (best) {
#pragma omp simd
                        for (int64_t ow = lo; ow < hi; ow++) {
                            float v = row[ow * sw + off];
                            bool take = (v > m[ow]) | (v != v); // a NaN always wins
                            m[ow] = take ? v : m[ow];
                            best[ow] = take ? (int32_t)(ih * W + ow * sw + off) : best[ow];
                        }
                    } else {
#pragma omp simd
                        for (int64_t ow = lo; ow < hi; ow++) {
                            float v = row[ow * sw + off];
                            m[ow] = (v > m[ow]) | (v != v) ? v : m[ow];
                        }
                    }
                }
        }
    }
}

// Planes in parallel: windows of one plane may share a maximum, so a plane is one thread's.
void maxpool2d_bwd_cpu(KernelCtx *kc, float *dx, const float *dout, const int32_t *idx,
                       int64_t n_planes, int64_t H, int64_t W, int64_t OH, int64_t OW) {
#pragma omp parallel for num_threads(kc->n_threads) if (n_planes * OH * OW > (1 << 16))
    for (int64_t pl = 0; pl < n_planes; pl++) {
        float *dxp = dx + pl * H * W;
        const float *dp = dout + pl * OH * OW;
        const int32_t *ip = idx + pl * OH * OW;
        for (int64_t i = 0; i < OH * OW; i++) dxp[ip[i]] += dp[i];
    }
}
