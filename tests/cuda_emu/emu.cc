/* emu.cc -- the host emulation of CUDA and cuBLAS declared in tests/cuda_emu/emu.h: the block
 * runner (a pool of host threads, one per thread of a block), the barriers, the runtime's
 * memory calls over host memory, and cuBLAS's sgemm as a column-major triple loop. */
#include "tests/cuda_emu/emu.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

thread_local dim3 threadIdx, blockIdx, blockDim;

static cudaError_t last_error = cudaSuccess;

// A barrier of `count` threads that aborts, naming itself, when its threads do not all arrive
// within 60 s: on a GPU such a kernel hangs or worse (a __syncthreads some threads skip).
struct Barrier {
    const char *what;
    std::mutex m;
    std::condition_variable cv;
    unsigned count = 0, waiting = 0;
    unsigned long long gen = 0;

    void wait() {
        std::unique_lock<std::mutex> lk(m);
        unsigned long long g = gen;
        if (++waiting == count) {
            waiting = 0;
            gen++;
            cv.notify_all();
            return;
        }
        if (!cv.wait_for(lk, std::chrono::seconds(60), [&] { return gen != g; })) {
            fprintf(stderr,
                    "cuda emulation: %s: %u of %u threads of block %u arrived within 60 s; the "
                    "others never will (a __syncthreads() that not every thread of the block "
                    "reaches)\n",
                    what, waiting, count, blockIdx.x);
            abort();
        }
    }
};

// The pool: worker i plays threadIdx.x = i of every block of the current launch. Its state is
// never destroyed: the workers wait on it until the process ends (a condition variable
// destroyed at exit under a waiting thread would block the exit).
struct Pool {
    Barrier sync{"__syncthreads", {}, {}}, block{"the end of the block", {}, {}};
    std::mutex mu;
    std::condition_variable cv_start, cv_done;
    unsigned n_workers = 0, finished = 0;
    unsigned long long generation = 0;
    unsigned grid = 0, block_size = 0;
    void (*fn)(void *) = nullptr;
    void *ctx = nullptr;
};
static Pool &pool = *new Pool;

static void worker(unsigned id) {
    Pool &p = pool;
    unsigned long long seen = 0;
    for (;;) {
        std::unique_lock<std::mutex> lk(p.mu);
        p.cv_start.wait(lk, [&] { return p.generation != seen; });
        seen = p.generation;
        if (id >= p.block_size) continue;
        void (*fn)(void *) = p.fn;
        void *ctx = p.ctx;
        unsigned grid = p.grid, block = p.block_size;
        lk.unlock();
        threadIdx = {id, 0, 0};
        blockDim = {block, 1, 1};
        for (unsigned b = 0; b < grid; b++) {
            blockIdx = {b, 0, 0};
            fn(ctx);
            p.block.wait();
        }
        lk.lock();
        if (++p.finished == block) p.cv_done.notify_one();
    }
}

// Runs the launch on the pool: the threads of a block really run side by side.
static void run_on_pool(unsigned grid, unsigned block, void (*fn)(void *), void *ctx) {
    Pool &p = pool;
    std::unique_lock<std::mutex> lk(p.mu);
    for (; p.n_workers < block; p.n_workers++)
        std::thread(worker, p.n_workers).detach();
    p.sync.count = p.block.count = block;
    p.grid = grid, p.block_size = block, p.fn = fn, p.ctx = ctx;
    p.finished = 0;
    p.generation++;
    p.cv_start.notify_all();
    p.cv_done.wait(lk, [&] { return p.finished == block; });
}

// Whether each kernel met a __syncthreads in its first launch (which ran on the pool): one that
// did not runs its later launches on the calling thread, one thread after another, which is
// hundreds of times faster than waking 256 threads per block.
#define MAX_KERNELS 512
static struct {
    const void *kernel;
    bool syncs;
} seen_kernels[MAX_KERNELS];
static int n_seen;
static bool sequential, saw_sync;

extern "C" void emu_run(const void *kernel, unsigned grid, unsigned block, void (*fn)(void *),
                        void *ctx) {
    if (grid == 0 || block == 0 || block > 1024) { // as CUDA: the launch does not happen
        last_error = cudaErrorInvalidConfiguration;
        return;
    }
    int k = 0;
    while (k < n_seen && seen_kernels[k].kernel != kernel)
        k++;
    if (k < n_seen && !seen_kernels[k].syncs) {
        sequential = true;
        blockDim = {block, 1, 1};
        for (unsigned b = 0; b < grid; b++)
            for (unsigned t = 0; t < block; t++) {
                blockIdx = {b, 0, 0};
                threadIdx = {t, 0, 0};
                fn(ctx);
            }
        sequential = false;
        return;
    }
    saw_sync = false;
    run_on_pool(grid, block, fn, ctx);
    if (k == n_seen) {
        if (n_seen == MAX_KERNELS) abort();
        seen_kernels[n_seen++] = {kernel, saw_sync};
    }
}

extern "C" void emu_syncthreads(void) {
    if (sequential) {
        fprintf(stderr, "cuda emulation: a kernel that met no __syncthreads() in its first "
                        "launch met one now (a __syncthreads() behind a condition)\n");
        abort();
    }
    saw_sync = true; // every thread writes the same value; read after the launch's end
    pool.sync.wait();
}

extern "C" float emu_atomic_add(float *p, float v) {
    uint32_t *u = reinterpret_cast<uint32_t *>(p), old = __atomic_load_n(u, __ATOMIC_RELAXED);
    for (;;) {
        float f, nf;
        uint32_t nu;
        memcpy(&f, &old, sizeof f);
        nf = f + v;
        memcpy(&nu, &nf, sizeof nu);
        if (__atomic_compare_exchange_n(u, &old, nu, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
            return f;
    }
}

// ---- runtime ----
extern "C" const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess:
        return "no error";
    case cudaErrorInvalidValue:
        return "invalid argument";
    case cudaErrorMemoryAllocation:
        return "out of memory";
    case cudaErrorInvalidConfiguration:
        return "invalid configuration argument";
    }
    return "unknown error";
}

extern "C" const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess:
        return "cudaSuccess";
    case cudaErrorInvalidValue:
        return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
        return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
        return "cudaErrorInvalidConfiguration";
    }
    return "cudaErrorUnknown";
}

extern "C" cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

extern "C" cudaError_t cudaGetDeviceCount(int *n) {
    *n = 1;
    return cudaSuccess;
}

extern "C" cudaError_t cudaSetDevice(int dev) {
    return dev == 0 ? cudaSuccess : cudaErrorInvalidValue;
}

extern "C" cudaError_t cudaGetDevice(int *dev) {
    *dev = 0;
    return cudaSuccess;
}

extern "C" cudaError_t cudaMalloc(void **p, size_t nbytes) {
    *p = NULL;
    if (posix_memalign(p, 256, nbytes ? nbytes : 1) != 0) return cudaErrorMemoryAllocation;
    return cudaSuccess;
}

extern "C" cudaError_t cudaFree(void *p) {
    free(p);
    return cudaSuccess;
}

static cudaError_t copy(void *dst, const void *src, size_t nbytes, enum cudaMemcpyKind kind) {
    if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return cudaErrorInvalidValue;
    if (nbytes) memmove(dst, src, nbytes);
    return cudaSuccess;
}

extern "C" cudaError_t cudaMemcpy(void *dst, const void *src, size_t nbytes,
                                  enum cudaMemcpyKind kind) {
    return copy(dst, src, nbytes, kind);
}

extern "C" cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t nbytes,
                                       enum cudaMemcpyKind kind, cudaStream_t) {
    return copy(dst, src, nbytes, kind);
}

// CUDA's rules: each pitch at least the width.
extern "C" cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                                         size_t width, size_t height, enum cudaMemcpyKind kind,
                                         cudaStream_t) {
    if (dpitch < width || spitch < width) return cudaErrorInvalidValue;
    for (size_t r = 0; r < height; r++) {
        cudaError_t e = copy((char *)dst + r * dpitch, (const char *)src + r * spitch, width, kind);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

extern "C" cudaError_t cudaMallocAsync(void **p, size_t nbytes, cudaStream_t) {
    return cudaMalloc(p, nbytes);
}

extern "C" cudaError_t cudaFreeAsync(void *p, cudaStream_t) {
    return cudaFree(p);
}

extern "C" cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int dev) {
    *pool = NULL;
    return dev == 0 ? cudaSuccess : cudaErrorInvalidValue;
}

extern "C" cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, enum cudaMemPoolAttr, void *) {
    return cudaSuccess;
}

// ---- cuBLAS ----
extern "C" const char *cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS:
        return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "an invalid numeric value was used as an argument";
    }
    return "unknown status";
}

static int emu_handle;

extern "C" cublasStatus_t cublasCreate(cublasHandle_t *h) {
    *h = reinterpret_cast<cublasHandle_t>(&emu_handle);
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t) {
    return h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

extern "C" cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t) {
    return h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

static int imax(int a, int b) {
    return a > b ? a : b;
}

// cuBLAS's definition, column-major: C = alpha op(A) op(B) + beta C with op(A) m x k, op(B)
// k x n, C m x n; op(X) = X (N) or X^T (T), X stored with leading dimension ldx. Its argument
// rules: lda >= max(1, rows of A as stored), likewise ldb, ldc >= max(1, m). beta = 0: C is
// not read.
extern "C" cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t transa,
                                      cublasOperation_t transb, int m, int n, int k,
                                      const float *alpha, const float *A, int lda, const float *B,
                                      int ldb, const float *beta, float *C, int ldc) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    bool ta = transa == CUBLAS_OP_T, tb = transb == CUBLAS_OP_T;
    if (m < 0 || n < 0 || k < 0 || lda < imax(1, ta ? k : m) || ldb < imax(1, tb ? n : k) ||
        ldc < imax(1, m))
        return CUBLAS_STATUS_INVALID_VALUE;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float s = 0.0f;
            for (int l = 0; l < k; l++) {
                float a = ta ? A[l + (size_t)i * lda] : A[i + (size_t)l * lda];
                float b = tb ? B[j + (size_t)l * ldb] : B[l + (size_t)j * ldb];
                s += a * b;
            }
            float *c = C + i + (size_t)j * ldc;
            *c = *beta == 0.0f ? *alpha * s : *alpha * s + *beta * *c;
        }
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t transa,
                                                    cublasOperation_t transb, int m, int n, int k,
                                                    const float *alpha, const float *A, int lda,
                                                    long long stride_a, const float *B, int ldb,
                                                    long long stride_b, const float *beta, float *C,
                                                    int ldc, long long stride_c, int batch) {
    if (batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
    for (int b = 0; b < batch; b++) {
        cublasStatus_t s = cublasSgemm(h, transa, transb, m, n, k, alpha, A + b * stride_a, lda,
                                       B + b * stride_b, ldb, beta, C + b * stride_c, ldc);
        if (s != CUBLAS_STATUS_SUCCESS) return s;
    }
    return CUBLAS_STATUS_SUCCESS;
}
