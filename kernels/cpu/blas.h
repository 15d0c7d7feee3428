/* blas.h -- the OpenBLAS entry points the CPU kernels use (see blas.c for why it is loaded at
 * run time). Private to kernels/cpu. */
#ifndef KERNELS_CPU_BLAS_H
#define KERNELS_CPU_BLAS_H

#include <stdbool.h>

#include <cblas.h> // CBLAS_ORDER, CBLAS_TRANSPOSE (types only; nothing is linked)

// Row-major C = alpha * op(A) op(B) + beta * C, as cblas_sgemm.
void blas_sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A,
                int lda, const float *B, int ldb, float beta, float *C, int ldc);
// OpenBLAS's own thread count (shares the OpenMP pool when the OpenMP build is loaded).
void blas_set_threads(int n);
// True when the loaded OpenBLAS is the OpenMP build: called inside one of our parallel regions
// it runs single-threaded on the calling thread (the pthread build would start its own).
bool blas_openmp(void);
// "OpenBLAS <path> core <name>", for logs and benchmarks.
const char *blas_describe(void);

#endif
