/* blas.h -- the OpenBLAS entry points the CPU kernels use (see blas.c for why it is loaded at
 * run time). Private to kernels/cpu. */
#ifndef KERNELS_CPU_BLAS_H
#define KERNELS_CPU_BLAS_H

#include <stdbool.h>

#include <cblas.h> // CBLAS_ORDER, CBLAS_TRANSPOSE (types only; nothing is linked)

// Row-major C = alpha * op(A) op(B) + beta * C, as cblas_sgemm.
void blas_sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A,
                int lda, const float *B, int ldb, float beta, float *C, int ldc);
// The OpenBLAS core type loaded (or to be loaded) in this process: DDPDBG_BLAS_CORE when set
// (exit 2 with a one-line error when it names no x86-64 core or one this CPU cannot run), else
// SkylakeX where the CPU and the OS give AVX-512, Haswell where AVX2, NULL otherwise (OpenBLAS
// then detects for itself, or follows OPENBLAS_CORETYPE). Does not load OpenBLAS.
const char *blas_core(void);
// OpenBLAS's own thread count (shares the OpenMP pool when the OpenMP build is loaded).
void blas_set_threads(int n);
// True when the loaded OpenBLAS is the OpenMP build: called inside one of our parallel regions
// it runs single-threaded on the calling thread (the pthread build would start its own).
bool blas_openmp(void);
// True when the loaded core's results do not depend on where C is cut into panels at
// kernels/cpu/gemm.c's edges (16 columns, 8 rows): SkylakeX and Cooperlake (measured). With
// Haswell's kernels a cut by columns changed bits at every edge tried (multiples of 4 up to 96)
// and a cut by rows unless at multiples of 24, so there a product's last bits depend on the
// thread count.
bool blas_panels_exact(void);
// "OpenBLAS <path> core <name>", for logs and benchmarks.
const char *blas_describe(void);

#endif
