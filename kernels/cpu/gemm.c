/* gemm.c -- row-major GEMM through OpenBLAS's sgemm (kernels/cpu/blas.c loads it).
 * A (M,K) or its transpose stored (K,M); B (K,N) or stored (N,K); C (M,N).
 * OpenBLAS threads itself (set_threads_cpu sets its count); gemm_batched runs the batch
 * sequentially and lets each GEMM use every thread, which suits our few-but-large batches. */
#include "kernels/base.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu_kernels.h"

void gemm_cpu(KernelCtx *kc, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
              float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
              float *C, int64_t ldc) {
    (void)kc;
    if (M == 0 || N == 0) return;
    if (K == 0) { // BLAS leaves C untouched for K = 0 only when beta = 1; be explicit
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
        return;
    }
    CHECK(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX, "gemm too large for cblas int");
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
