/* cpu_kernels.h -- declarations of the CPU kernels that backend_cpu.c puts in the table.
 * Signatures must equal the Backend fields (the table initialiser checks them). Contracts are
 * in kernels/backend.h, not repeated here. Private to kernels/cpu. */
#ifndef KERNELS_CPU_CPU_KERNELS_H
#define KERNELS_CPU_CPU_KERNELS_H

#include "kernels/backend.h"

// ---- memory, threads (backend_cpu.c) ----
void *alloc_cpu(size_t nbytes);
void free_cpu(void *p);
void memcpy_cpu(void *dst, const void *src, size_t nbytes);
void set_threads_cpu(int n);

// ---- basic.c ----
void fill_cpu(KernelCtx *kc, float *out, float value, int64_t n);
void copy_cpu(KernelCtx *kc, float *out, const float *inp, int64_t n);
void axpy_cpu(KernelCtx *kc, float *out, float alpha, const float *inp, int64_t n);

// ---- gemm.c ----
void gemm_cpu(KernelCtx *kc, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
              float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
              float *C, int64_t ldc);
void gemm_batched_cpu(KernelCtx *kc, int64_t batch, bool trans_a, bool trans_b, int64_t M,
                      int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                      int64_t stride_a, const float *B, int64_t ldb, int64_t stride_b, float beta,
                      float *C, int64_t ldc, int64_t stride_c);

// BEGIN elementwise
// END elementwise

// BEGIN conv
// END conv

// BEGIN attention
// END attention

// BEGIN layout
// END layout

#endif
