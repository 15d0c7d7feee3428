/* cuda_check.h -- the error wrappers of kernels/cuda (house style §2.6): CUDA_CHECK for the CUDA
 * runtime, CUBLAS_CHECK for cuBLAS. A failed call is a bug or a broken device, not bad input:
 * the wrapper prints "file:line: <call> failed: <library's error string>" and aborts (a core
 * and a backtrace, as CHECK). Out of device memory is the exception: alloc_cuda says so and
 * exits (backend_cuda.c). C and CUDA C++ alike. */
#ifndef KERNELS_CUDA_CUDA_CHECK_H
#define KERNELS_CUDA_CUDA_CHECK_H

#include <cublas_v2.h>        // cublasStatus_t, cublasGetStatusString
#include <cuda_runtime_api.h> // cudaError_t, cudaGetErrorString

#include <stdio.h>
#include <stdlib.h>

#define CUDA_CHECK(call)                                                                           \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call,              \
                    cudaGetErrorString(e_), cudaGetErrorName(e_));                                 \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define CUBLAS_CHECK(call)                                                                         \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,                   \
                    cublasGetStatusString(s_));                                                    \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#endif
