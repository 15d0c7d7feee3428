/* resample.cu -- zero padding (F.pad) and integer-scale nearest upsampling on the GPU, one
 * element per thread. Both move memory only; each backward thread sums what its forward
 * copied, in the CPU's order (PyTorch's: block rows, then columns). */
#include "kernels/cuda/cuda_util.h"

extern "C" __global__ void pad2d_fwd_kernel(float *out, const float *x, int64_t n_planes, int64_t H,
                                            int64_t W, int left, int top, int64_t OH, int64_t OW) {
    int64_t t = thread_index();
    if (t >= n_planes * OH * OW) return;
    int64_t w = t % OW - left, h = t / OW % OH - top, pl = t / (OH * OW);
    out[t] = h >= 0 && h < H && w >= 0 && w < W ? x[(pl * H + h) * W + w] : 0.0f;
}

extern "C" __global__ void pad2d_bwd_kernel(float *dx, const float *dout, int64_t n_planes,
                                            int64_t H, int64_t W, int left, int top, int64_t OH,
                                            int64_t OW) {
    int64_t t = thread_index();
    if (t >= n_planes * H * W) return;
    int64_t w = t % W, h = t / W % H, pl = t / (H * W);
    dx[t] += dout[(pl * OH + top + h) * OW + left + w];
}

void pad2d_fwd_cuda(KernelCtx *kc, float *out, const float *x, int64_t n_planes, int64_t H,
                    int64_t W, int left, int right, int top, int bottom) {
    const int64_t OH = top + H + bottom, OW = left + W + right, n = n_planes * OH * OW;
    if (n <= 0) return;
    pad2d_fwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(out, x, n_planes, H, W,
                                                                        left, top, OH, OW);
    CUDA_CHECK(cudaGetLastError());
}

void pad2d_bwd_cuda(KernelCtx *kc, float *dx, const float *dout, int64_t n_planes, int64_t H,
                    int64_t W, int left, int right, int top, int bottom) {
    const int64_t OH = top + H + bottom, OW = left + W + right, n = n_planes * H * W;
    if (n <= 0) return;
    pad2d_bwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(dx, dout, n_planes, H, W,
                                                                        left, top, OH, OW);
    CUDA_CHECK(cudaGetLastError());
}

// out (n_planes, sH, sW): out[i][j] = x[i / s][j / s] (for integer s PyTorch's
// floor(o * (1/s)) is o / s, see kernels/cpu/resample.c).
extern "C" __global__ void upsample_nearest2d_fwd_kernel(float *out, const float *x,
                                                         int64_t n_planes, int64_t H, int64_t W,
                                                         int scale) {
    const int64_t OH = H * scale, OW = W * scale;
    int64_t t = thread_index();
    if (t >= n_planes * OH * OW) return;
    int64_t ow = t % OW, oh = t / OW % OH, pl = t / (OH * OW);
    out[t] = x[(pl * H + oh / scale) * W + ow / scale];
}

extern "C" __global__ void upsample_nearest2d_bwd_kernel(float *dx, const float *dout,
                                                         int64_t n_planes, int64_t H, int64_t W,
                                                         int scale) {
    const int64_t OW = W * scale;
    int64_t t = thread_index();
    if (t >= n_planes * H * W) return;
    int64_t w = t % W, ph = t / W; // ph: the input row over all planes
    const float *src = dout + ph * scale * OW + w * scale;
    float s = 0.0f;
    for (int r = 0; r < scale; r++)
        for (int q = 0; q < scale; q++)
            s += src[r * OW + q];
    dx[t] += s;
}

void upsample_nearest2d_fwd_cuda(KernelCtx *kc, float *out, const float *x, int64_t n_planes,
                                 int64_t H, int64_t W, int scale) {
    const int64_t n = n_planes * H * W * scale * scale;
    if (n <= 0) return;
    upsample_nearest2d_fwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(
        out, x, n_planes, H, W, scale);
    CUDA_CHECK(cudaGetLastError());
}

void upsample_nearest2d_bwd_cuda(KernelCtx *kc, float *dx, const float *dout, int64_t n_planes,
                                 int64_t H, int64_t W, int scale) {
    const int64_t n = n_planes * H * W;
    if (n <= 0 || scale <= 0) return;
    upsample_nearest2d_bwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(
        dx, dout, n_planes, H, W, scale);
    CUDA_CHECK(cudaGetLastError());
}
