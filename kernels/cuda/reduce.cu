/* reduce.cu -- sum and mean over the middle dim of (outer, r, inner), their backward, and
 * softmax over rows, on the GPU. Sums run in double with a fixed order (no atomics), so a
 * result is the same on every run:
 * - contiguous rows (inner == 1): a thread per row for short rows, else a block per row with
 *   its fixed tree;
 * - strided (inner > 1): a thread per output walking r in order, reads coalesced across the
 *   inner dim; for long r, partial sums of RCHUNK rows into scratch first, then a second pass
 *   adds the chunks in order.
 * reduce_mid_cuda is also the column sum of attention.cu's bias_rows_bwd. */
#include <math.h>

#include "kernels/cuda/cuda_util.h"

// Rows of a strided reduction one thread of the first pass sums.
#define RCHUNK 64
// Contiguous rows at least this long take a block each.
#define ROW_BLOCK_MIN 256

// How an output is written: out = sum, out = sum / r (in float, as PyTorch's sum().div_(r)),
// or out += sum.
static __device__ inline void store(float *out, double s, int64_t r, int mode) {
    if (mode == REDUCE_MEAN)
        *out = (float)s / (float)r;
    else if (mode == REDUCE_ADD)
        *out += (float)s;
    else
        *out = (float)s;
}

extern "C" __global__ void sum_rows_kernel(float *out, const float *inp, int64_t outer, int64_t r,
                                           int mode) {
    int64_t o = thread_index();
    if (o >= outer) return;
    double s = 0;
    for (int64_t k = 0; k < r; k++)
        s += inp[o * r + k];
    store(out + o, s, r, mode);
}

extern "C" __global__ void sum_rows_block_kernel(float *out, const float *inp, int64_t outer,
                                                 int64_t r, int mode) {
    int64_t o = blockIdx.x;
    if (o >= outer) return; // the whole block leaves together
    double s = 0;
    for (int64_t k = threadIdx.x; k < r; k += CUDA_THREADS)
        s += inp[o * r + k];
    s = block_reduce<double>(s, BLOCK_SUM);
    if (threadIdx.x == 0) store(out + o, s, r, mode);
}

extern "C" __global__ void sum_mid_kernel(float *out, const float *inp, int64_t outer, int64_t r,
                                          int64_t inner, int mode) {
    int64_t t = thread_index();
    if (t >= outer * inner) return;
    int64_t o = t / inner, i = t % inner;
    double s = 0;
    for (int64_t k = 0; k < r; k++)
        s += inp[(o * r + k) * inner + i];
    store(out + t, s, r, mode);
}

// First pass: part[c, o, i] = the sum over rows [c*RCHUNK, (c+1)*RCHUNK) of inp[o, :, i].
extern "C" __global__ void sum_mid_part_kernel(double *part, const float *inp, int64_t outer,
                                               int64_t r, int64_t inner, int64_t n_chunks) {
    int64_t t = thread_index();
    if (t >= n_chunks * outer * inner) return;
    int64_t c = t / (outer * inner), oi = t % (outer * inner), o = oi / inner, i = oi % inner;
    int64_t k1 = MIN(r, (c + 1) * RCHUNK);
    double s = 0;
    for (int64_t k = c * RCHUNK; k < k1; k++)
        s += inp[(o * r + k) * inner + i];
    part[t] = s;
}

// Second pass: the chunks in order.
extern "C" __global__ void sum_mid_chunks_kernel(float *out, const double *part, int64_t n_out,
                                                 int64_t n_chunks, int64_t r, int mode) {
    int64_t t = thread_index();
    if (t >= n_out) return;
    double s = 0;
    for (int64_t c = 0; c < n_chunks; c++)
        s += part[c * n_out + t];
    store(out + t, s, r, mode);
}

void reduce_mid_cuda(KernelCtx *kc, float *out, const float *inp, int64_t outer, int64_t r,
                     int64_t inner, int mode) {
    const int64_t n_out = outer * inner;
    if (n_out <= 0) return;
    CHECK(r >= 1, "reduce over %lld rows (need r >= 1)", (long long)r);
    cudaStream_t st = stream_of(kc);
    if (inner == 1 && r >= ROW_BLOCK_MIN) {
        sum_rows_block_kernel<<<grid_of(outer), CUDA_THREADS, 0, st>>>(out, inp, outer, r, mode);
    } else if (inner == 1) {
        sum_rows_kernel<<<blocks_for(outer), CUDA_THREADS, 0, st>>>(out, inp, outer, r, mode);
    } else if (r <= RCHUNK) {
        sum_mid_kernel<<<blocks_for(n_out), CUDA_THREADS, 0, st>>>(out, inp, outer, r, inner, mode);
    } else {
        const int64_t n_chunks = CEIL_DIV(r, (int64_t)RCHUNK);
        double *part = (double *)scratch_alloc(kc, sizeof(double) * (size_t)(n_chunks * n_out));
        sum_mid_part_kernel<<<blocks_for(n_chunks * n_out), CUDA_THREADS, 0, st>>>(
            part, inp, outer, r, inner, n_chunks);
        CUDA_CHECK(cudaGetLastError());
        sum_mid_chunks_kernel<<<blocks_for(n_out), CUDA_THREADS, 0, st>>>(out, part, n_out,
                                                                          n_chunks, r, mode);
        scratch_free(kc, part);
    }
    CUDA_CHECK(cudaGetLastError());
}

void sum_dim_fwd_cuda(KernelCtx *kc, float *out, const float *inp, int64_t outer, int64_t r,
                      int64_t inner) {
    reduce_mid_cuda(kc, out, inp, outer, r, inner, REDUCE_SUM);
}

void mean_dim_fwd_cuda(KernelCtx *kc, float *out, const float *inp, int64_t outer, int64_t r,
                       int64_t inner) {
    reduce_mid_cuda(kc, out, inp, outer, r, inner, REDUCE_MEAN);
}

// dinp[o, k, i] += dout[o, i] / div (div = r for mean, 1 for sum: x / 1 is exact).
extern "C" __global__ void sum_dim_bwd_kernel(float *dinp, const float *dout, int64_t outer,
                                              int64_t r, int64_t inner, float div) {
    int64_t t = thread_index();
    if (t >= outer * r * inner) return;
    int64_t o = t / (r * inner), i = t % inner;
    dinp[t] += dout[o * inner + i] / div;
}

static void expand_mid(KernelCtx *kc, float *dinp, const float *dout, int64_t outer, int64_t r,
                       int64_t inner, float div) {
    int64_t n = outer * r * inner;
    if (n <= 0) return;
    sum_dim_bwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(dinp, dout, outer, r,
                                                                          inner, div);
    CUDA_CHECK(cudaGetLastError());
}

void sum_dim_bwd_cuda(KernelCtx *kc, float *dinp, const float *dout, int64_t outer, int64_t r,
                      int64_t inner) {
    expand_mid(kc, dinp, dout, outer, r, inner, 1.0f);
}

void mean_dim_bwd_cuda(KernelCtx *kc, float *dinp, const float *dout, int64_t outer, int64_t r,
                       int64_t inner) {
    expand_mid(kc, dinp, dout, outer, r, inner, (float)r);
}

// ---- softmax over the last dim: one block per row ----
// As ATen's softmax: y = exp(x - max) * (1 / sum), the sum in double. A row of all -inf, or
// holding a NaN, is NaN (through -inf - -inf, or the NaN's exp).
extern "C" __global__ void softmax_fwd_kernel(float *out, const float *inp, int64_t rows,
                                              int64_t cols) {
    int64_t r = blockIdx.x;
    if (r >= rows) return;
    const float *x = inp + r * cols;
    float *y = out + r * cols;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < cols; j += CUDA_THREADS)
        mx = x[j] > mx ? x[j] : mx;
    mx = block_reduce<float>(mx, BLOCK_MAX);
    double s = 0;
    for (int64_t j = threadIdx.x; j < cols; j += CUDA_THREADS) {
        y[j] = expf(x[j] - mx);
        s += y[j];
    }
    float inv = 1.0f / (float)block_reduce<double>(s, BLOCK_SUM);
    for (int64_t j = threadIdx.x; j < cols; j += CUDA_THREADS)
        y[j] *= inv;
}

// dinp += y * (g - sum_j g*y), the dot in double.
extern "C" __global__ void softmax_bwd_kernel(float *dinp, const float *out, const float *dout,
                                              int64_t rows, int64_t cols) {
    int64_t r = blockIdx.x;
    if (r >= rows) return;
    const float *y = out + r * cols, *g = dout + r * cols;
    double dot = 0;
    for (int64_t j = threadIdx.x; j < cols; j += CUDA_THREADS)
        dot += (double)g[j] * y[j];
    float s = (float)block_reduce<double>(dot, BLOCK_SUM);
    for (int64_t j = threadIdx.x; j < cols; j += CUDA_THREADS)
        dinp[r * cols + j] += y[j] * (g[j] - s);
}

void softmax_fwd_cuda(KernelCtx *kc, float *out, const float *inp, int64_t rows, int64_t cols) {
    if (rows <= 0 || cols <= 0) return;
    softmax_fwd_kernel<<<grid_of(rows), CUDA_THREADS, 0, stream_of(kc)>>>(out, inp, rows, cols);
    CUDA_CHECK(cudaGetLastError());
}

void softmax_bwd_cuda(KernelCtx *kc, float *dinp, const float *out, const float *dout, int64_t rows,
                      int64_t cols) {
    if (rows <= 0 || cols <= 0) return;
    softmax_bwd_kernel<<<grid_of(rows), CUDA_THREADS, 0, stream_of(kc)>>>(dinp, out, dout, rows,
                                                                          cols);
    CUDA_CHECK(cudaGetLastError());
}
