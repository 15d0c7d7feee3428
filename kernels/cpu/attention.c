/* attention.c -- the non-GEMM pieces of linear layers and of multi-head attention: bias rows
 * (addmm's broadcast bias and its column-sum gradient) and the masked softmax over keys.
 * The GEMMs themselves are the backend's gemm/gemm_batched (OpenBLAS). */
#include <math.h>

#include "kernels/base.h"
#include "kernels/cpu/cpu_kernels.h"

void bias_rows_fwd_cpu(KernelCtx *kc, float *out, const float *bias, int64_t M, int64_t N) {
#pragma omp parallel for num_threads(kc->n_threads) if (M * N > 65536)
    for (int64_t m = 0; m < M; m++)
        memcpy(out + m * N, bias, (size_t)N * sizeof(float));
}

// Columns are summed in double, one block of 16 columns (a cache line) per task: every row
// is read contiguously and no two threads write the same dbias entry.
void bias_rows_bwd_cpu(KernelCtx *kc, float *dbias, const float *dout, int64_t M, int64_t N) {
    const int64_t block = 16;
#pragma omp parallel for num_threads(kc->n_threads) if (M * N > 65536)
    for (int64_t n0 = 0; n0 < N; n0 += block) {
        double acc[16] = {0};
        int64_t nb = MIN(block, N - n0);
        for (int64_t m = 0; m < M; m++) {
            const float *row = dout + m * N + n0;
            for (int64_t j = 0; j < nb; j++)
                acc[j] += row[j];
        }
        for (int64_t j = 0; j < nb; j++)
            dbias[n0 + j] += (float)acc[j];
    }
}

// PyTorch's CPU softmax over the last dim: max, exp(x - max), then a multiply by 1/sum.
// A fully masked row has max = -inf and -inf - -inf = NaN, which propagates: NaN, as PyTorch.
void attn_softmax_fwd_cpu(KernelCtx *kc, float *p, const float *s, const uint8_t *mask, int64_t BH,
                          int64_t Lq, int64_t Lk) {
    int64_t rows = BH * Lq;
#pragma omp parallel for num_threads(kc->n_threads) if (rows * Lk > 32768)
    for (int64_t r = 0; r < rows; r++) {
        const float *in = s + r * Lk;
        float *out = p + r * Lk;
        const uint8_t *m = mask ? mask + (r % Lq) * Lk : NULL;
        float max = -INFINITY;
        for (int64_t k = 0; k < Lk; k++) {
            float v = m && m[k] ? -INFINITY : in[k];
            out[k] = v;
            max = v > max ? v : max;
        }
        float sum = 0.0f;
        for (int64_t k = 0; k < Lk; k++) {
            out[k] = expf(out[k] - max);
            sum += out[k];
        }
        float inv = 1.0f / sum;
        for (int64_t k = 0; k < Lk; k++)
            out[k] *= inv;
    }
}

void attn_softmax_bwd_cpu(KernelCtx *kc, float *ds, const float *dp, const float *p, int64_t R,
                          int64_t Lk) {
#pragma omp parallel for num_threads(kc->n_threads) if (R * Lk > 32768)
    for (int64_t r = 0; r < R; r++) {
        const float *g = dp + r * Lk, *y = p + r * Lk;
        float dot = 0.0f;
        for (int64_t k = 0; k < Lk; k++)
            dot += g[k] * y[k];
        float *d = ds + r * Lk;
        for (int64_t k = 0; k < Lk; k++)
            d[k] += (g[k] - dot) * y[k];
    }
}
