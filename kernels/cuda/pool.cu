/* pool.cu -- nn.MaxPool2d on the GPU. Forward: a thread per output window, making the CPU's
 * (and PyTorch's cpu_max_pool's) compares in row-major order: padding never wins, the first
 * maximum is kept, a NaN always replaces the running maximum. Backward: a thread per input
 * pixel gathers dout from the windows that cover it and chose it, in row-major output order:
 * the same additions, in the same order, as the CPU's scatter, and no atomics. */
#include <math.h>

#include "kernels/cuda/cuda_util.h"

extern "C" __global__ void maxpool2d_fwd_kernel(float *out, int32_t *idx, const float *x,
                                                int64_t n_planes, int64_t H, int64_t W, int64_t OH,
                                                int64_t OW, Pool2dParams p) {
    int64_t t = thread_index();
    if (t >= n_planes * OH * OW) return;
    int64_t ow = t % OW, oh = t / OW % OH, pl = t / (OH * OW);
    int64_t h0 = oh * p.stride_h - p.pad_h, w0 = ow * p.stride_w - p.pad_w;
    int64_t h1 = MIN(h0 + p.k_h, H), w1 = MIN(w0 + p.k_w, W);
    h0 = MAX(h0, (int64_t)0);
    w0 = MAX(w0, (int64_t)0);
    const float *xp = x + pl * H * W;
    float m = -INFINITY;
    int64_t best = h0 * W + w0; // kept when nothing beats -inf
    for (int64_t ih = h0; ih < h1; ih++)
        for (int64_t iw = w0; iw < w1; iw++) {
            float v = xp[ih * W + iw];
            if (v > m || isnan(v)) {
                m = v;
                best = ih * W + iw;
            }
        }
    out[t] = m;
    if (idx) idx[t] = (int32_t)best;
}

// The outputs along one dim whose window [o*stride - pad, + k) holds input index i:
// [*lo, *hi], clipped to [0, n_out).
static __device__ inline void windows_over(int64_t i, int k, int stride, int pad, int64_t n_out,
                                           int64_t *lo, int64_t *hi) {
    int64_t a = i + pad - k + 1; // the first window start that still reaches i
    *lo = a <= 0 ? 0 : (a + stride - 1) / stride;
    *hi = MIN((i + pad) / stride, n_out - 1);
}

extern "C" __global__ void maxpool2d_bwd_kernel(float *dx, const float *dout, const int32_t *idx,
                                                int64_t n_planes, int64_t H, int64_t W, int64_t OH,
                                                int64_t OW, Pool2dParams p) {
    int64_t t = thread_index();
    if (t >= n_planes * H * W) return;
    int64_t iw = t % W, ih = t / W % H, pl = t / (H * W), at = ih * W + iw;
    int64_t oh0, oh1, ow0, ow1;
    windows_over(ih, p.k_h, p.stride_h, p.pad_h, OH, &oh0, &oh1);
    windows_over(iw, p.k_w, p.stride_w, p.pad_w, OW, &ow0, &ow1);
    const int32_t *ip = idx + pl * OH * OW;
    const float *dp = dout + pl * OH * OW;
    float acc = dx[t];
    for (int64_t oh = oh0; oh <= oh1; oh++)
        for (int64_t ow = ow0; ow <= ow1; ow++)
            if (ip[oh * OW + ow] == at) acc += dp[oh * OW + ow];
    dx[t] = acc;
}

void maxpool2d_fwd_cuda(KernelCtx *kc, float *out, int32_t *idx, const float *x, int64_t n_planes,
                        int64_t H, int64_t W, int64_t OH, int64_t OW, Pool2dParams p) {
    CHECK(H * W <= INT32_MAX, "maxpool2d: plane of %lld elements too large for int32 indices",
          (long long)(H * W));
    int64_t n = n_planes * OH * OW;
    if (n <= 0) return;
    maxpool2d_fwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(out, idx, x, n_planes,
                                                                            H, W, OH, OW, p);
    CUDA_CHECK(cudaGetLastError());
}

void maxpool2d_bwd_cuda(KernelCtx *kc, float *dx, const float *dout, const int32_t *idx,
                        int64_t n_planes, int64_t H, int64_t W, int64_t OH, int64_t OW,
                        Pool2dParams p) {
    int64_t n = n_planes * H * W;
    if (n <= 0 || OH * OW <= 0) return;
    maxpool2d_bwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(dx, dout, idx, n_planes,
                                                                            H, W, OH, OW, p);
    CUDA_CHECK(cudaGetLastError());
}
