/* attention.cu -- the non-GEMM pieces of linear layers (addmm's broadcast bias and its column
 * sum) and the attention of the MHA core on the GPU. Head h of batch b is the D = E / NH
 * column block h*D of each row-major (L, E) matrix, so for one b the NH heads are a strided
 * batch (stride D, leading dimension E) for cuBLAS: a loop over b of strided-batched GEMMs,
 * and one kernel for the (masked) softmax of every row, a block per row. Deterministic. */
#include <math.h>

#include "kernels/cuda/cuda_util.h"

extern "C" __global__ void bias_rows_fwd_kernel(float *out, const float *bias, int64_t M,
                                                int64_t N) {
    int64_t t = thread_index();
    if (t >= M * N) return;
    out[t] = bias[t % N];
}

void bias_rows_fwd_cuda(KernelCtx *kc, float *out, const float *bias, int64_t M, int64_t N) {
    if (M * N <= 0) return;
    bias_rows_fwd_kernel<<<blocks_for(M * N), CUDA_THREADS, 0, stream_of(kc)>>>(out, bias, M, N);
    CUDA_CHECK(cudaGetLastError());
}

// dbias[n] += sum_m dout[m, n]: reduce.cu's column sum, in double.
void bias_rows_bwd_cuda(KernelCtx *kc, float *dbias, const float *dout, int64_t M, int64_t N) {
    if (M <= 0 || N <= 0) return;
    reduce_mid_cuda(kc, dbias, dout, 1, M, N, REDUCE_ADD);
}

// Softmax over the keys of row r of p (rows = B*NH*Lq, each Lk long), in place, a score taken
// as -inf where mask[q*Lk + k] != 0 (q = r % Lq). max, exp(x - max), times 1 / sum (a float
// sum, as the CPU's). A fully masked row is NaN (-inf - -inf), as in PyTorch.
extern "C" __global__ void attention_softmax_fwd_kernel(float *p, const uint8_t *mask, int64_t rows,
                                                        int64_t Lq, int64_t Lk) {
    int64_t r = blockIdx.x;
    if (r >= rows) return;
    float *row = p + r * Lk;
    const uint8_t *m = mask ? mask + r % Lq * Lk : NULL;
    float mx = -INFINITY;
    for (int64_t k = threadIdx.x; k < Lk; k += CUDA_THREADS) {
        float v = m && m[k] ? -INFINITY : row[k];
        row[k] = v;
        mx = v > mx ? v : mx;
    }
    mx = block_reduce<float>(mx, BLOCK_MAX);
    float s = 0.0f;
    for (int64_t k = threadIdx.x; k < Lk; k += CUDA_THREADS) {
        row[k] = expf(row[k] - mx);
        s += row[k];
    }
    float inv = 1.0f / block_reduce<float>(s, BLOCK_SUM);
    for (int64_t k = threadIdx.x; k < Lk; k += CUDA_THREADS)
        row[k] *= inv;
}

// The softmax backward of row r, in place: d (the probabilities' gradient) becomes the
// scores' gradient, y * (d - sum_k d*y), the dot in float as the CPU's.
extern "C" __global__ void attention_softmax_bwd_kernel(float *ds, const float *p, int64_t rows,
                                                        int64_t Lk) {
    int64_t r = blockIdx.x;
    if (r >= rows) return;
    float *d = ds + r * Lk;
    const float *y = p + r * Lk;
    float dot = 0.0f;
    for (int64_t k = threadIdx.x; k < Lk; k += CUDA_THREADS)
        dot += d[k] * y[k];
    dot = block_reduce<float>(dot, BLOCK_SUM);
    for (int64_t k = threadIdx.x; k < Lk; k += CUDA_THREADS)
        d[k] = (d[k] - dot) * y[k];
}

// p (B, NH, Lq, Lk) = the probabilities: per b a strided batch of score GEMMs over the heads,
// then the masked softmax of every row. The forward and the backward both call this, so the
// backward's probabilities are the forward's bit for bit.
static void probabilities(KernelCtx *kc, float *p, const float *qs, const float *k,
                          const uint8_t *mask, int64_t B, int NH, int64_t Lq, int64_t Lk,
                          int64_t E) {
    const int64_t D = E / NH, LL = Lq * Lk, rows = B * NH * Lq;
    for (int64_t b = 0; b < B; b++) // scores p[b,h] = qs_h k_h^T
        gemm_batched_cuda(kc, NH, false, true, Lq, Lk, D, 1.0f, qs + b * Lq * E, E, D,
                          k + b * Lk * E, E, D, 0.0f, p + b * NH * LL, Lk, LL);
    if (Lk > 0) {
        attention_softmax_fwd_kernel<<<grid_of(rows), CUDA_THREADS, 0, stream_of(kc)>>>(
            p, mask, rows, Lq, Lk);
        CUDA_CHECK(cudaGetLastError());
    }
}

void attention_fwd_cuda(KernelCtx *kc, float *out, const float *qs, const float *k, const float *v,
                        const uint8_t *mask, int64_t B, int NH, int64_t Lq, int64_t Lk, int64_t E) {
    CHECK(NH >= 1 && E % NH == 0, "attention: E %lld is not a multiple of %d heads", (long long)E,
          NH);
    const int64_t D = E / NH, LL = Lq * Lk, rows = B * NH * Lq;
    if (rows <= 0) return;
    float *p = (float *)scratch_alloc(kc, sizeof(float) * (size_t)(B * NH * LL));
    probabilities(kc, p, qs, k, mask, B, NH, Lq, Lk, E);
    for (int64_t b = 0; b < B; b++) // out_h = p[b,h] v_h
        gemm_batched_cuda(kc, NH, false, false, Lq, D, Lk, 1.0f, p + b * NH * LL, Lk, LL,
                          v + b * Lk * E, E, D, 0.0f, out + b * Lq * E, E, D);
    scratch_free(kc, p);
}

// P again (probabilities), dP = dO v^T into scratch, dv += P^T dO, dS = the softmax backward of
// dP in place, dqs += dS k, dk += dS^T qs: per b, each a strided batch over the heads.
void attention_bwd_cuda(KernelCtx *kc, float *dqs, float *dk, float *dv, const float *dout,
                        const float *qs, const float *k, const float *v, const uint8_t *mask,
                        int64_t B, int NH, int64_t Lq, int64_t Lk, int64_t E) {
    CHECK(NH >= 1 && E % NH == 0, "attention: E %lld is not a multiple of %d heads", (long long)E,
          NH);
    const int64_t D = E / NH, LL = Lq * Lk, rows = B * NH * Lq;
    if (rows <= 0 || Lk <= 0) return;
    float *p = (float *)scratch_alloc(kc, sizeof(float) * (size_t)(2 * B * NH * LL));
    float *ds = p + B * NH * LL;
    probabilities(kc, p, qs, k, mask, B, NH, Lq, Lk, E);
    for (int64_t b = 0; b < B; b++) {
        const float *g = dout + b * Lq * E, *pb = p + b * NH * LL;
        gemm_batched_cuda(kc, NH, false, true, Lq, Lk, D, 1.0f, g, E, D, v + b * Lk * E, E, D, 0.0f,
                          ds + b * NH * LL, Lk, LL);
        gemm_batched_cuda(kc, NH, true, false, Lk, D, Lq, 1.0f, pb, Lk, LL, g, E, D, 1.0f,
                          dv + b * Lk * E, E, D);
    }
    attention_softmax_bwd_kernel<<<grid_of(rows), CUDA_THREADS, 0, stream_of(kc)>>>(ds, p, rows,
                                                                                    Lk);
    CUDA_CHECK(cudaGetLastError());
    for (int64_t b = 0; b < B; b++) {
        const float *dsb = ds + b * NH * LL;
        gemm_batched_cuda(kc, NH, false, false, Lq, D, Lk, 1.0f, dsb, Lk, LL, k + b * Lk * E, E, D,
                          1.0f, dqs + b * Lq * E, E, D);
        gemm_batched_cuda(kc, NH, true, false, Lk, D, Lq, 1.0f, dsb, Lk, LL, qs + b * Lq * E, E, D,
                          1.0f, dk + b * Lk * E, E, D);
    }
    scratch_free(kc, p);
}
