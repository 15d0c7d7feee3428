/* basic.c -- fill, copy, axpy: the memory-level kernels the tape and optimiser use. */
#include "kernels/cpu/cpu_kernels.h"

#include <string.h>

void fill_cpu(KernelCtx *kc, float *out, float value, int64_t n) {
    if (value == 0.0f) {
        memset(out, 0, (size_t)n * sizeof(float));
        return;
    }
#pragma omp parallel for num_threads(kc->n_threads) if (n > 65536)
    for (int64_t i = 0; i < n; i++) out[i] = value;
}

void copy_cpu(KernelCtx *kc, float *out, const float *inp, int64_t n) {
    (void)kc;
    memcpy(out, inp, (size_t)n * sizeof(float));
}

void axpy_cpu(KernelCtx *kc, float *out, float alpha, const float *inp, int64_t n) {
#pragma omp parallel for num_threads(kc->n_threads) if (n > 65536)
    for (int64_t i = 0; i < n; i++) out[i] += alpha * inp[i];
}
