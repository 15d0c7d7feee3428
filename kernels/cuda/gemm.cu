/* gemm.cu -- row-major GEMM through cuBLAS (column-major), by the usual identity: a row-major
 * (M,N) matrix with row stride ldc is the column-major (N,M) matrix C^T with leading dimension
 * ldc, and C^T = op(B)^T op(A)^T. So cuBLAS is asked for an (N,M) result from B then A, each
 * transposed exactly when the caller asked for it.
 * Precision: the handles use CUBLAS_DEFAULT_MATH, which for fp32 keeps at least fp32's mantissa
 * in every phase: no TF32 tensor cores (those need CUBLAS_TF32_TENSOR_OP_MATH), so results
 * agree with the CPU's sgemm to fp32 rounding (test_parity). cuBLAS is deterministic for one
 * handle and stream on one GPU model.
 * Handles: one per host thread (a cuBLAS handle must not be shared by threads that set its
 * stream), created on first use on the thread's current device, never freed. */
#include "kernels/cuda/cuda_util.h"

// The calling thread's cuBLAS handle, set to kc's stream.
static cublasHandle_t handle_for(KernelCtx *kc) {
    static thread_local cublasHandle_t h;
    if (!h) {
        CUBLAS_CHECK(cublasCreate(&h));
        CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
    }
    CUBLAS_CHECK(cublasSetStream(h, stream_of(kc)));
    return h;
}

// C = beta * C over a batch of (M,N) matrices: the K = 0 case, written out because BLAS leaves
// C alone for beta = 1 only implicitly. beta = 0 writes zeros (a NaN in C does not survive).
extern "C" __global__ void gemm_scale_kernel(float *C, float beta, int64_t M, int64_t N,
                                             int64_t ldc, int64_t stride_c, int64_t total) {
    int64_t i = thread_index();
    if (i >= total) return;
    int64_t b = i / (M * N), r = i / N % M, c = i % N;
    float *p = C + b * stride_c + r * ldc + c;
    *p = beta == 0.0f ? 0.0f : beta * *p;
}

static void scale_c(KernelCtx *kc, int64_t batch, int64_t M, int64_t N, float beta, float *C,
                    int64_t ldc, int64_t stride_c) {
    int64_t total = batch * M * N;
    if (total <= 0 || beta == 1.0f) return;
    gemm_scale_kernel<<<blocks_for(total), CUDA_THREADS, 0, stream_of(kc)>>>(C, beta, M, N, ldc,
                                                                             stride_c, total);
    CUDA_CHECK(cudaGetLastError());
}

static void check_int(const char *what, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                      int64_t ldc) {
    CHECK(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX && lda <= INT32_MAX &&
              ldb <= INT32_MAX && ldc <= INT32_MAX,
          "%s: %lldx%lldx%lld (lda %lld ldb %lld ldc %lld) too large for cuBLAS's int", what,
          (long long)M, (long long)N, (long long)K, (long long)lda, (long long)ldb, (long long)ldc);
}

static cublasOperation_t op(bool trans) {
    return trans ? CUBLAS_OP_T : CUBLAS_OP_N;
}

void gemm_cuda(KernelCtx *kc, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
               float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
               float *C, int64_t ldc) {
    if (M == 0 || N == 0) return;
    if (K == 0) {
        scale_c(kc, 1, M, N, beta, C, ldc, 0);
        return;
    }
    check_int("gemm_cuda", M, N, K, lda, ldb, ldc);
    CUBLAS_CHECK(cublasSgemm(handle_for(kc), op(trans_b), op(trans_a), (int)N, (int)M, (int)K,
                             &alpha, B, (int)ldb, A, (int)lda, &beta, C, (int)ldc));
}

// stride_a or stride_b 0 broadcasts that operand, which cuBLAS's strided batch allows.
void gemm_batched_cuda(KernelCtx *kc, int64_t batch, bool trans_a, bool trans_b, int64_t M,
                       int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                       int64_t stride_a, const float *B, int64_t ldb, int64_t stride_b, float beta,
                       float *C, int64_t ldc, int64_t stride_c) {
    if (batch <= 0 || M == 0 || N == 0) return;
    if (K == 0) {
        scale_c(kc, batch, M, N, beta, C, ldc, stride_c);
        return;
    }
    check_int("gemm_batched_cuda", M, N, K, lda, ldb, ldc);
    CHECK(batch <= INT32_MAX, "gemm_batched_cuda: batch %lld too large", (long long)batch);
    CUBLAS_CHECK(cublasSgemmStridedBatched(handle_for(kc), op(trans_b), op(trans_a), (int)N, (int)M,
                                           (int)K, &alpha, B, (int)ldb, stride_b, A, (int)lda,
                                           stride_a, &beta, C, (int)ldc, stride_c, (int)batch));
}
