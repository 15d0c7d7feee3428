/* backend.h -- every kernel signature, written once, as a field of Backend.
 * kernels/cpu/backend_cpu.c fills the table for the CPU (the readable reference);
 * kernels/cuda/backend_cuda.c fills it for CUDA. A NULL field is a missing kernel: callers
 * CHECK it by name (backend_need), there is never a silent fallback to another device.
 *
 * Conventions (house style §2.3):
 * - argument order: kc, outputs, inputs, sizes. Backward: kc, input grads, weight grads,
 *   dout, saved tensors, sizes. Read-only pointers are const.
 * - every tensor argument is contiguous, row-major (NCHW for images), fp32.
 * - backward kernels ACCUMULATE (+=) into every gradient they write.
 * - kernels know nothing of tensors, autograd or the tape. */
#ifndef KERNELS_BACKEND_H
#define KERNELS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { DEV_CPU = 0, DEV_CUDA = 1 } Device;

// Per-call execution context. n_threads: CPU worker threads for this call (>= 1).
typedef struct KernelCtx {
    int n_threads;
    void *stream; // cudaStream_t on CUDA, unused on CPU
} KernelCtx;

// ---- parameter structs for kernels with options ----
typedef struct Conv2dParams {
    int stride_h, stride_w;
    int pad_h, pad_w; // symmetric zero padding
    int dil_h, dil_w;
    int groups;
} Conv2dParams;

typedef struct Pool2dParams {
    int k_h, k_w;
    int stride_h, stride_w;
    int pad_h, pad_w; // implicit -inf padding, as nn.MaxPool2d
    bool ceil_mode;
} Pool2dParams;

typedef struct Backend {
    const char *name;
    Device dev;

    // ---- memory ----
    void *(*alloc)(size_t nbytes); // aborts on failure; 64-byte aligned
    void (*free)(void *p);         // free(NULL) is a no-op
    void (*to_device)(void *dst, const void *src, size_t nbytes);
    void (*to_host)(void *dst, const void *src, size_t nbytes);
    // Sets the worker-thread count used by this backend's kernels and its BLAS (n >= 1).
    void (*set_threads)(int n);

    // ---- basic (kernels/cpu/basic.c) ----
    // out[i] = value. out: (n)
    void (*fill)(KernelCtx *kc, float *out, float value, int64_t n);
    // out[i] = inp[i]. out, inp: (n), may not overlap
    void (*copy)(KernelCtx *kc, float *out, const float *inp, int64_t n);
    // out[i] += alpha * inp[i]. out, inp: (n). ACCUMULATES.
    void (*axpy)(KernelCtx *kc, float *out, float alpha, const float *inp, int64_t n);

    // ---- GEMM (kernels/cpu/gemm.c, OpenBLAS) ----
    // C = alpha * op(A) @ op(B) + beta * C, row-major. op(A): (M,K), op(B): (K,N), C: (M,N).
    // lda/ldb/ldc are row strides of the stored (untransposed) matrices.
    void (*gemm)(KernelCtx *kc, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                 float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                 float *C, int64_t ldc);
    // `batch` independent GEMMs; matrix b of A/B/C starts at A + b*stride_a etc.
    // stride_b == 0 broadcasts one B over the batch (likewise A).
    void (*gemm_batched)(KernelCtx *kc, int64_t batch, bool trans_a, bool trans_b, int64_t M,
                         int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                         int64_t stride_a, const float *B, int64_t ldb, int64_t stride_b, float beta,
                         float *C, int64_t ldc, int64_t stride_c);

    // ---- elementwise, activations, reductions, softmax, norms (kernels/cpu/elementwise.c,
    //      kernels/cpu/reduce.c, kernels/cpu/norm.c) ----
    // BEGIN elementwise
    // END elementwise

    // ---- convolution, pooling, padding, resampling (kernels/cpu/conv.c, pool.c, resample.c) ----
    // BEGIN conv
    // END conv

    // ---- attention: linear helpers, MHA core, deformable attention (kernels/cpu/attention.c,
    //      kernels/cpu/deform_attn.c) ----
    // BEGIN attention
    // END attention

    // ---- data movement: permute, concat, slice, gather, embedding (kernels/cpu/layout.c) ----
    // BEGIN layout
    // END layout
} Backend;

// The table for `dev`, or NULL if this build has no such backend.
const Backend *backend_get(Device dev);

// The table for `dev`; aborts with a message naming `dev` if this build lacks it.
const Backend *backend_need(Device dev);

// Aborts with "<kernel>: no <backend> kernel" when a kernel field is NULL. Use before a call:
// KERNEL_CHECK(be, gelu_fwd);
#define KERNEL_CHECK(be, field)                                                                    \
    CHECK((be)->field != NULL, "%s: no %s kernel (missing from the backend table)", #field,        \
          (be)->name)

#endif
