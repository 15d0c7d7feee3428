/* basic.c -- fill, copy, axpy: the memory-level kernels the tape and optimiser use.
 * Big buffers are split into PIECE-float pieces over the threads: one core alone does not
 * reach the memory bandwidth (the tape zero-fills every gradient buffer before it is used). */
#include "kernels/cpu/cpu_kernels.h"

#include <string.h>

#include "kernels/base.h" // MIN, CEIL_DIV

// Buffers below this many floats stay on one thread: the fork costs more than the copy.
#define PAR_MIN 65536
#define PIECE 16384

void fill_cpu(KernelCtx *kc, float *out, float value, int64_t n) {
    const int64_t pieces = CEIL_DIV(n, PIECE);
#pragma omp parallel for num_threads(kc->n_threads) if (n > PAR_MIN)
    for (int64_t k = 0; k < pieces; k++) {
        float *o = out + k * PIECE;
        const int64_t m = MIN(PIECE, n - k * PIECE);
        if (value == 0.0f) {
            memset(o, 0, (size_t)m * sizeof(float));
            continue;
        }
        for (int64_t i = 0; i < m; i++)
            o[i] = value;
    }
}

void copy_cpu(KernelCtx *kc, float *out, const float *inp, int64_t n) {
    const int64_t pieces = CEIL_DIV(n, PIECE);
#pragma omp parallel for num_threads(kc->n_threads) if (n > PAR_MIN)
    for (int64_t k = 0; k < pieces; k++)
        memcpy(out + k * PIECE, inp + k * PIECE, (size_t)MIN(PIECE, n - k * PIECE) * sizeof(float));
}

void axpy_cpu(KernelCtx *kc, float *out, float alpha, const float *inp, int64_t n) {
#pragma omp parallel for simd num_threads(kc->n_threads) if (parallel : n > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        out[i] += alpha * inp[i];
}
