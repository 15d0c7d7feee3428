/* gemm.c -- row-major GEMM through OpenBLAS's sgemm (kernels/cpu/blas.c loads it).
 * A (M,K) or its transpose stored (K,M); B (K,N) or stored (N,K); C (M,N).
 * Threads: C is cut along its longer side into one panel per thread, each panel one
 * single-threaded sgemm on its own thread (split_gemm says why); gemm_batched runs the batch
 * sequentially and lets each GEMM use every thread, which suits our few-but-large batches. */
#include <omp.h>

#include "kernels/base.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu_kernels.h"

// OpenBLAS (0.3.21, SkylakeX) computes products of at most 100^3 multiply-adds with its
// small-matrix kernels, whose rounding differs from its blocked kernels'. Every panel stays
// above that size, so every panel runs the kernels the whole product runs, and smaller
// products are not split at all.
#define SMALL_MNK 1e6
// Panel edges are rounded to 16 columns or 8 rows of C, multiples of the tiles OpenBLAS's
// x86-64 sgemm kernels compute, so their remainder code runs in the last panel only.
#define PANEL_COLS 16
#define PANEL_ROWS 8

// Why we split rather than let OpenBLAS thread the product: on 2 cores its own split of the
// transformer's products (M = 1000-4200 rows, N = 80-1024 columns, K = 96-1024) ran at
// 130-180 GFLOP/s where two single-threaded panels ran at 180-200 (best of 30 each, both
// layouts of each linear's forward and backward), and on the convolutions' larger products
// the two were within 2 %. In the full rtdetr-l step (steps alternating between the two in
// one process) panels were 3-4 % faster on average, up to 9 % in the machine's slow minutes
// (OpenBLAS's threads wait on each other for every shared packed block; panels share
// nothing), and level in quiet ones. Every element of C is one thread's whole K sum in
// OpenBLAS's order, so the result does not depend on the number of panels (test_gemm).
// Returns false (nothing done) when the product is small, the caller already runs in a
// parallel region, or the loaded OpenBLAS would start threads of its own inside ours.
static bool split_gemm(int threads, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                       float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                       float beta, float *C, int64_t ldc) {
    const bool by_rows = M >= N;
    const int64_t side = by_rows ? M : N, block = by_rows ? PANEL_ROWS : PANEL_COLS;
    const double rest = (double)(by_rows ? N : M) * (double)K; // multiply-adds per unit of side
    // fewer panels until the smallest (its side rounded down to blocks) is above SMALL_MNK
    int panels = (int)MIN((int64_t)threads, side / block);
    while (panels > 1 && (double)(side / panels - block) * rest <= SMALL_MNK) panels--;
    if (panels < 2 || omp_in_parallel() || !blas_openmp()) return false;
#pragma omp parallel for num_threads(panels) schedule(static, 1)
    for (int p = 0; p < panels; p++) {
        int64_t lo = side * p / panels / block * block;
        int64_t hi = p == panels - 1 ? side : side * (p + 1) / panels / block * block;
        if (by_rows) // rows lo..hi of C: rows of A (columns of A when it is stored transposed)
            blas_sgemm(trans_a, trans_b, (int)(hi - lo), (int)N, (int)K, alpha,
                       A + (trans_a ? lo : lo * lda), (int)lda, B, (int)ldb, beta, C + lo * ldc,
                       (int)ldc);
        else // columns lo..hi of C: columns of B (rows of B when it is stored transposed)
            blas_sgemm(trans_a, trans_b, (int)M, (int)(hi - lo), (int)K, alpha, A, (int)lda,
                       B + (trans_b ? lo * ldb : lo), (int)ldb, beta, C + lo, (int)ldc);
    }
    return true;
}

void gemm_cpu(KernelCtx *kc, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
              float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
              float *C, int64_t ldc) {
    if (M == 0 || N == 0) return;
    if (K == 0) { // BLAS leaves C untouched for K = 0 only when beta = 1; be explicit
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
        return;
    }
    CHECK(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX, "gemm too large for cblas int");
    if (split_gemm(kc->n_threads, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
        return;
    blas_sgemm(trans_a, trans_b, (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C,
               (int)ldc);
}

void gemm_batched_cpu(KernelCtx *kc, int64_t batch, bool trans_a, bool trans_b, int64_t M,
                      int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                      int64_t stride_a, const float *B, int64_t ldb, int64_t stride_b, float beta,
                      float *C, int64_t ldc, int64_t stride_c) {
    for (int64_t b = 0; b < batch; b++)
        gemm_cpu(kc, trans_a, trans_b, M, N, K, alpha, A + b * stride_a, lda, B + b * stride_b,
                 ldb, beta, C + b * stride_c, ldc);
}
