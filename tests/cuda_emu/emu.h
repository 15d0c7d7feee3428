/* emu.h -- a host emulation of the little of CUDA and cuBLAS that kernels/cuda uses, so that the
 * CUDA kernels' index arithmetic, launch shapes, reductions and cuBLAS calls are tested on any
 * machine (test_parity_emu, in make test), not only where a GPU is lent. It is a test aid: it
 * says nothing of speed, memory coalescing or the GPU's memory model, and CUDA's libm is the
 * host's here; test_parity on a GPU remains the check of the arithmetic.
 * How: the .cu files are compiled by the host C++ compiler after `kernel<<<g, b, s, st>>>(...)`
 * is rewritten to emu_launch(EmuCfg{g, b, s, st}, kernel, ...) (tests/cuda_emu/chevrons.pl).
 * The kernels are built with 32 threads a block here (CUDA_THREADS; 256 on the GPU): they must
 * not depend on it, and barriers of 256 host threads on 2 cores are slow.
 * A launch runs its blocks one after another on a pool of blockDim.x host threads, each with
 * its own threadIdx; __syncthreads is a barrier among them, and a barrier some threads of a
 * block never reach (a divergent __syncthreads: undefined on a GPU) aborts with a message
 * instead of hanging. A kernel that met no barrier in its first launch runs its threads one
 * after another on the calling thread afterwards (fast). __shared__ arrays are statics, which
 * one block at a time makes right.
 * Device memory is host memory. cuBLAS's sgemm is a plain column-major triple loop written from
 * cuBLAS's documentation, with its argument checks (leading dimensions), so that the row-major
 * identity in kernels/cuda/gemm.cu is tested against an independent reading of the API.
 * Launch errors are CUDA's: a grid or block of 0 threads, or a block over 1024, makes
 * cudaGetLastError return cudaErrorInvalidConfiguration. C-compatible apart from the launch. */
#ifndef TESTS_CUDA_EMU_EMU_H
#define TESTS_CUDA_EMU_EMU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// ---- runtime ----
typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
} cudaError_t;
typedef struct EmuStream *cudaStream_t;
typedef struct EmuPool *cudaMemPool_t;
enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};
enum cudaMemPoolAttr { cudaMemPoolAttrReleaseThreshold = 4 };

const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaGetDevice(int *dev);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaMalloc(void **p, size_t nbytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t nbytes, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t nbytes, enum cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind kind,
                              cudaStream_t stream);
cudaError_t cudaMallocAsync(void **p, size_t nbytes, cudaStream_t stream);
cudaError_t cudaFreeAsync(void *p, cudaStream_t stream);
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int dev);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *value);

// ---- cuBLAS ----
typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_INVALID_VALUE = 7,
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0 } cublasMath_t;
typedef struct EmuBlas *cublasHandle_t;

const char *cublasGetStatusString(cublasStatus_t s);
cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t stream);
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb,
                           int m, int n, int k, const float *alpha, const float *A, int lda,
                           const float *B, int ldb, const float *beta, float *C, int ldc);
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const float *alpha, const float *A, int lda,
                                         long long stride_a, const float *B, int ldb,
                                         long long stride_b, const float *beta, float *C, int ldc,
                                         long long stride_c, int batch);

// ---- the launch (tests/cuda_emu/emu.cc) ----
// Runs fn(ctx) once per thread of every block, blocks in order; a bad configuration sets the
// error cudaGetLastError returns. `kernel` identifies the kernel (see emu.cc: the first launch
// of each runs its threads side by side, later ones one by one unless it synchronises).
void emu_run(const void *kernel, unsigned grid, unsigned block, void (*fn)(void *ctx), void *ctx);
void emu_syncthreads(void);
float emu_atomic_add(float *p, float v);

#ifdef __cplusplus
}

// ---- device code: what a .cu file sees ----
struct dim3 {
    unsigned x, y, z;
};
extern thread_local dim3 threadIdx, blockIdx, blockDim;
#define __global__
#define __device__
#define __shared__ static
#define __syncthreads() emu_syncthreads()
static inline float atomicAdd(float *p, float v) {
    return emu_atomic_add(p, v);
}

struct EmuCfg {
    unsigned grid;
    int block;
    size_t shmem;
    cudaStream_t stream;
};

// kernel<<<cfg>>>(args...), rewritten: every thread calls kernel(args...).
template <typename... P, typename... A>
void emu_launch(EmuCfg cfg, void (*kernel)(P...), A... args) {
    auto body = [&]() { kernel(static_cast<P>(args)...); };
    using Body = decltype(body);
    emu_run((const void *)kernel, cfg.grid, cfg.block < 0 ? 0u : (unsigned)cfg.block,
            [](void *ctx) { (*static_cast<Body *>(ctx))(); }, &body);
}
#endif

#endif
