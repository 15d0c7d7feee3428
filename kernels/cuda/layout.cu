/* layout.cu -- data movement on the GPU: permute (a thread per element; the backward walks
 * the same map, which is one-to-one, so no two threads write one gradient), strided block
 * copies (cudaMemcpy2DAsync) and adds for concat/split/slice, and row gather / scatter-add for
 * index_select, gather and embedding. The scatter-add walks the indices in order, one thread
 * per (slice, column): repeated indices accumulate as on the CPU, deterministically. */
#include "kernels/cuda/cuda_util.h"

#define PERMUTE_MAX_DIMS 8

// The output's shape, and for each output dim the input stride it walks.
typedef struct PermArgs {
    int nd;
    int64_t out_shape[PERMUTE_MAX_DIMS], in_stride[PERMUTE_MAX_DIMS];
    int64_t numel;
} PermArgs;

static PermArgs perm_args(int ndim, const int64_t *shape, const int *perm) {
    CHECK(ndim >= 0 && ndim <= PERMUTE_MAX_DIMS, "permute: ndim %d > %d", ndim, PERMUTE_MAX_DIMS);
    int64_t stride[PERMUTE_MAX_DIMS], s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        stride[i] = s;
        s *= shape[i];
    }
    PermArgs a = {};
    a.nd = ndim;
    a.numel = s;
    for (int i = 0; i < ndim; i++) {
        CHECK(perm[i] >= 0 && perm[i] < ndim, "permute: perm[%d] = %d", i, perm[i]);
        a.out_shape[i] = shape[perm[i]];
        a.in_stride[i] = stride[perm[i]];
    }
    return a;
}

// The input offset of output element t.
static __device__ inline int64_t perm_source(const PermArgs &a, int64_t t) {
    int64_t off = 0;
    for (int d = a.nd - 1; d >= 0; d--) {
        off += t % a.out_shape[d] * a.in_stride[d];
        t /= a.out_shape[d];
    }
    return off;
}

extern "C" __global__ void permute_fwd_kernel(float *out, const float *inp, PermArgs a) {
    int64_t t = thread_index();
    if (t >= a.numel) return;
    out[t] = inp[perm_source(a, t)];
}

extern "C" __global__ void permute_bwd_kernel(float *dinp, const float *dout, PermArgs a) {
    int64_t t = thread_index();
    if (t >= a.numel) return;
    dinp[perm_source(a, t)] += dout[t];
}

void permute_fwd_cuda(KernelCtx *kc, float *out, const float *inp, int ndim, const int64_t *shape,
                      const int *perm) {
    PermArgs a = perm_args(ndim, shape, perm);
    if (a.numel <= 0) return;
    permute_fwd_kernel<<<blocks_for(a.numel), CUDA_THREADS, 0, stream_of(kc)>>>(out, inp, a);
    CUDA_CHECK(cudaGetLastError());
}

// dout has the permuted shape; element t of it came from input offset perm_source(t).
void permute_bwd_cuda(KernelCtx *kc, float *dinp, const float *dout, int ndim, const int64_t *shape,
                      const int *perm) {
    PermArgs a = perm_args(ndim, shape, perm);
    if (a.numel <= 0) return;
    permute_bwd_kernel<<<blocks_for(a.numel), CUDA_THREADS, 0, stream_of(kc)>>>(dinp, dout, a);
    CUDA_CHECK(cudaGetLastError());
}

// ---- strided blocks ----
void block_copy_cuda(KernelCtx *kc, float *out, int64_t out_stride, const float *inp,
                     int64_t in_stride, int64_t outer, int64_t inner) {
    if (outer <= 0 || inner <= 0) return;
    CUDA_CHECK(cudaMemcpy2DAsync(out, (size_t)out_stride * sizeof(float), inp,
                                 (size_t)in_stride * sizeof(float), (size_t)inner * sizeof(float),
                                 (size_t)outer, cudaMemcpyDeviceToDevice, stream_of(kc)));
}

extern "C" __global__ void block_add_kernel(float *out, int64_t out_stride, const float *inp,
                                            int64_t in_stride, int64_t outer, int64_t inner) {
    int64_t t = thread_index();
    if (t >= outer * inner) return;
    int64_t o = t / inner, j = t % inner;
    out[o * out_stride + j] += inp[o * in_stride + j];
}

void block_add_cuda(KernelCtx *kc, float *out, int64_t out_stride, const float *inp,
                    int64_t in_stride, int64_t outer, int64_t inner) {
    if (outer <= 0 || inner <= 0) return;
    block_add_kernel<<<blocks_for(outer * inner), CUDA_THREADS, 0, stream_of(kc)>>>(
        out, out_stride, inp, in_stride, outer, inner);
    CUDA_CHECK(cudaGetLastError());
}

// ---- row gather and scatter-add: inp (outer, n_src, inner), out (outer, n_idx, inner) ----
extern "C" __global__ void gather_rows_fwd_kernel(float *out, const float *inp, const int64_t *idx,
                                                  int64_t idx_stride, int64_t outer, int64_t n_src,
                                                  int64_t n_idx, int64_t inner) {
    int64_t t = thread_index();
    if (t >= outer * n_idx * inner) return;
    int64_t c = t % inner, r = t / inner, o = r / n_idx, i = r % n_idx;
    out[t] = inp[(o * n_src + idx[o * idx_stride + i]) * inner + c];
}

extern "C" __global__ void gather_rows_bwd_kernel(float *dinp, const float *dout,
                                                  const int64_t *idx, int64_t idx_stride,
                                                  int64_t outer, int64_t n_src, int64_t n_idx,
                                                  int64_t inner) {
    int64_t t = thread_index();
    if (t >= outer * inner) return;
    int64_t o = t / inner, c = t % inner;
    for (int64_t i = 0; i < n_idx; i++)
        dinp[(o * n_src + idx[o * idx_stride + i]) * inner + c] +=
            dout[(o * n_idx + i) * inner + c];
}

void gather_rows_fwd_cuda(KernelCtx *kc, float *out, const float *inp, const int64_t *idx,
                          int64_t idx_stride, int64_t outer, int64_t n_src, int64_t n_idx,
                          int64_t inner) {
    const int64_t n = outer * n_idx * inner;
    if (n <= 0) return;
    gather_rows_fwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(
        out, inp, idx, idx_stride, outer, n_src, n_idx, inner);
    CUDA_CHECK(cudaGetLastError());
}

void gather_rows_bwd_cuda(KernelCtx *kc, float *dinp, const float *dout, const int64_t *idx,
                          int64_t idx_stride, int64_t outer, int64_t n_src, int64_t n_idx,
                          int64_t inner) {
    if (outer * inner <= 0 || n_idx <= 0) return;
    gather_rows_bwd_kernel<<<blocks_for(outer * inner), CUDA_THREADS, 0, stream_of(kc)>>>(
        dinp, dout, idx, idx_stride, outer, n_src, n_idx, inner);
    CUDA_CHECK(cudaGetLastError());
}
