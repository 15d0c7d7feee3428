/* reduce.c -- sum and mean over one dim (viewed as (outer, r, inner)) and softmax over rows.
 * Sums accumulate in double, in an order that does not depend on the thread count, so a
 * result is the same on 1 or 16 threads. `omp simd` marks the loops GCC should vectorise
 * (at -O2 it vectorises only those). */
#include "kernels/cpu/cpu_kernels.h"

#include <math.h>

#include "kernels/base.h" // MIN, CEIL_DIV

#define PAR_MIN 32768
// Chunk of a whole-tensor sum: partial sums of fixed chunks, added in chunk order.
#define SUM_CHUNK 16384
// Run of inner positions one task of a strided reduction accumulates at once.
#define INNER_TILE 256

// Sum of `n` contiguous floats in double, deterministic for any thread count.
static double sum_contiguous(KernelCtx *kc, const float *x, int64_t n) {
    if (n <= SUM_CHUNK) {
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < n; i++)
            s += x[i];
        return s;
    }
    int64_t n_chunks = CEIL_DIV(n, SUM_CHUNK);
    double *part = xmalloc(sizeof(double) * (size_t)n_chunks);
#pragma omp parallel for num_threads(kc->n_threads)
    for (int64_t c = 0; c < n_chunks; c++) {
        const float *p = x + c * SUM_CHUNK;
        int64_t m = MIN(SUM_CHUNK, n - c * SUM_CHUNK);
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < m; i++)
            s += p[i];
        part[c] = s;
    }
    double s = 0;
    for (int64_t c = 0; c < n_chunks; c++)
        s += part[c];
    free(part);
    return s;
}

// out[o, i] = scale(sum_k inp[o, k, i]); `mean` divides by r in float, as PyTorch's
// sum(...).div_(r).
static void reduce_mid(KernelCtx *kc, float *out, const float *inp, int64_t outer, int64_t r,
                       int64_t inner, bool mean) {
    if (outer == 1 && inner == 1) {
        float s = (float)sum_contiguous(kc, inp, r);
        out[0] = mean ? s / (float)r : s;
        return;
    }
    if (inner == 1) { // contiguous rows
#pragma omp parallel for num_threads(kc->n_threads) if (outer * r > PAR_MIN)
        for (int64_t o = 0; o < outer; o++) {
            const float *p = inp + o * r;
            double s = 0;
#pragma omp simd reduction(+ : s)
            for (int64_t k = 0; k < r; k++)
                s += p[k];
            out[o] = mean ? (float)s / (float)r : (float)s;
        }
        return;
    }
    // Strided: a task owns INNER_TILE outputs of one outer slice and walks r rows of them.
    int64_t per = CEIL_DIV(inner, INNER_TILE), n_tasks = outer * per;
#pragma omp parallel for num_threads(kc->n_threads) if (outer * r * inner > PAR_MIN)
    for (int64_t t = 0; t < n_tasks; t++) {
        int64_t o = t / per, i0 = (t % per) * INNER_TILE, m = MIN(INNER_TILE, inner - i0);
        double acc[INNER_TILE];
        for (int64_t i = 0; i < m; i++)
            acc[i] = 0;
        for (int64_t k = 0; k < r; k++) {
            const float *p = inp + (o * r + k) * inner + i0;
#pragma omp simd
            for (int64_t i = 0; i < m; i++)
                acc[i] += p[i];
        }
        float *q = out + o * inner + i0;
        for (int64_t i = 0; i < m; i++)
            q[i] = mean ? (float)acc[i] / (float)r : (float)acc[i];
    }
}

// dinp[o, k, i] += g(dout[o, i]) with g = identity or / r (PyTorch's mean backward divides).
static void expand_mid(KernelCtx *kc, float *dinp, const float *dout, int64_t outer, int64_t r,
                       int64_t inner, bool mean) {
    int64_t rows = outer * r;
#pragma omp parallel for num_threads(kc->n_threads) if (rows * inner > PAR_MIN)
    for (int64_t row = 0; row < rows; row++) {
        const float *g = dout + (row / r) * inner;
        float *d = dinp + row * inner;
        float div = mean ? (float)r : 1.0f; // x / 1 is exact: one loop serves both
#pragma omp simd
        for (int64_t i = 0; i < inner; i++)
            d[i] += g[i] / div;
    }
}

void sum_dim_fwd_cpu(KernelCtx *kc, float *out, const float *inp, int64_t outer, int64_t r,
                     int64_t inner) {
    reduce_mid(kc, out, inp, outer, r, inner, false);
}

void mean_dim_fwd_cpu(KernelCtx *kc, float *out, const float *inp, int64_t outer, int64_t r,
                      int64_t inner) {
    reduce_mid(kc, out, inp, outer, r, inner, true);
}

void sum_dim_bwd_cpu(KernelCtx *kc, float *dinp, const float *dout, int64_t outer, int64_t r,
                     int64_t inner) {
    expand_mid(kc, dinp, dout, outer, r, inner, false);
}

void mean_dim_bwd_cpu(KernelCtx *kc, float *dinp, const float *dout, int64_t outer, int64_t r,
                      int64_t inner) {
    expand_mid(kc, dinp, dout, outer, r, inner, true);
}

// ---- softmax over the last dim ----
// As ATen's _vec_softmax_lastdim: y = exp(x - max) * (1 / sum). A row of all -inf is NaN.
void softmax_fwd_cpu(KernelCtx *kc, float *out, const float *inp, int64_t rows, int64_t cols) {
#pragma omp parallel for num_threads(kc->n_threads) if (rows * cols > PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *x = inp + r * cols;
        float *y = out + r * cols;
        // A NaN the max skips still makes the whole row NaN through exp and the sum.
        float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
        for (int64_t j = 0; j < cols; j++)
            mx = x[j] > mx ? x[j] : mx;
        for (int64_t j = 0; j < cols; j++)
            y[j] = expf(x[j] - mx);
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < cols; j++)
            s += y[j];
        float inv = 1.0f / (float)s;
#pragma omp simd
        for (int64_t j = 0; j < cols; j++)
            y[j] *= inv;
    }
}

void softmax_bwd_cpu(KernelCtx *kc, float *dinp, const float *out, const float *dout, int64_t rows,
                     int64_t cols) {
#pragma omp parallel for num_threads(kc->n_threads) if (rows * cols > PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *y = out + r * cols, *g = dout + r * cols;
        float *d = dinp + r * cols;
        double dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int64_t j = 0; j < cols; j++)
            dot += (double)g[j] * y[j];
        float s = (float)dot;
#pragma omp simd
        for (int64_t j = 0; j < cols; j++)
            d[j] += y[j] * (g[j] - s);
    }
}
