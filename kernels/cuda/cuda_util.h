/* cuda_util.h -- what every .cu file of kernels/cuda shares: the launch shape, the stream of a
 * KernelCtx, and deterministic block reductions. CUDA C++ only; private to kernels/cuda.
 * Every kernel takes one element (or one row, one channel) per thread or block and starts
 * with its bounds check; launchers return before launching on an empty range (a grid of 0
 * blocks is a launch error) and end with CUDA_CHECK(cudaGetLastError()). */
#ifndef KERNELS_CUDA_CUDA_UTIL_H
#define KERNELS_CUDA_CUDA_UTIL_H

#include <cuda_runtime.h>
#include <math.h> // fmax

#include "kernels/base.h" // CHECK, CEIL_DIV
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

// Threads per block for every kernel here (reductions rely on a power of two). The host
// emulation of the tests (tests/cuda_emu/emu.h) builds with 32: the kernels must not depend on
// the value, and a barrier of 256 host threads is slow.
#ifndef CUDA_THREADS
#define CUDA_THREADS 256
#endif

// How reduce_mid_cuda writes each output: out = sum, out = sum / r, out += sum.
enum ReduceMode { REDUCE_SUM, REDUCE_MEAN, REDUCE_ADD };
// out[o, i] = (or +=) the sum over k of inp[o, k, i], in double, the same on every run:
// sum_dim_fwd and mean_dim_fwd, and the column sums of bias gradients (reduce.cu).
void reduce_mid_cuda(KernelCtx *kc, float *out, const float *inp, int64_t outer, int64_t r,
                     int64_t inner, int mode);

static inline cudaStream_t stream_of(const KernelCtx *kc) {
    return (cudaStream_t)kc->stream;
}

// Blocks of CUDA_THREADS that cover n >= 1 elements, one per thread.
static inline unsigned blocks_for(int64_t n) {
    int64_t b = CEIL_DIV(n, (int64_t)CUDA_THREADS);
    CHECK(n >= 1 && b <= INT32_MAX, "cuda launch: %lld elements (1 .. 2^31 blocks)", (long long)n);
    return (unsigned)b;
}

// A grid of n >= 1 blocks (one block per row, channel or output).
static inline unsigned grid_of(int64_t n) {
    CHECK(n >= 1 && n <= INT32_MAX, "cuda launch: %lld blocks (1 .. 2^31 - 1)", (long long)n);
    return (unsigned)n;
}

// The global index of this thread in a 1-D launch.
static __device__ inline int64_t thread_index(void) {
    return (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
}

// Block reductions over the block's CUDA_THREADS threads: each thread brings its own partial,
// a fixed tree in shared memory pairs them (the same order on every run: deterministic), and
// every thread gets the result. Every thread of the block must call it (it synchronises).
// BLOCK_MAX skips NaN, as the CPU's `x > m ? x : m` scan does (fmax returns the number): -inf
// when every value is NaN or -inf.
enum BlockOp { BLOCK_SUM, BLOCK_MAX };

template <typename T> static __device__ inline T block_reduce(T v, BlockOp op) {
    __shared__ T sh[CUDA_THREADS]; // one array per T, reused by the next call after the last sync
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = CUDA_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            sh[threadIdx.x] = op == BLOCK_MAX ? fmax(sh[threadIdx.x], sh[threadIdx.x + s])
                                              : sh[threadIdx.x] + sh[threadIdx.x + s];
        __syncthreads();
    }
    T r = sh[0];
    __syncthreads();
    return r;
}

// The activations' formulas, for elementwise.cu's kernels and norm.cu's fused BatchNorm:
// sigmoid, silu(x) = x / (1 + exp(-x)) and silu's gradient dout * s * (1 + x (1 - s)).
static __device__ inline float sigmoidf(float x) {
    return 1.0f / (1.0f + expf(-x));
}

static __device__ inline float silu_value(float x) {
    return x / (1.0f + expf(-x));
}

static __device__ inline float silu_grad(float x, float dout) {
    float s = sigmoidf(x);
    return dout * s * (1.0f + x * (1.0f - s));
}

#endif
