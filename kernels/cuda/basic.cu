/* basic.cu -- fill, copy, axpy on the GPU: the memory-level kernels the tape and optimiser use.
 * One element per thread; copy is a device-to-device cudaMemcpyAsync. */
#include "kernels/cuda/cuda_util.h"

extern "C" __global__ void fill_kernel(float *out, float value, int64_t n) {
    int64_t i = thread_index();
    if (i >= n) return;
    out[i] = value;
}

extern "C" __global__ void axpy_kernel(float *out, float alpha, const float *inp, int64_t n) {
    int64_t i = thread_index();
    if (i >= n) return;
    out[i] += alpha * inp[i];
}

void fill_cuda(KernelCtx *kc, float *out, float value, int64_t n) {
    if (n <= 0) return;
    fill_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(out, value, n);
    CUDA_CHECK(cudaGetLastError());
}

void copy_cuda(KernelCtx *kc, float *out, const float *inp, int64_t n) {
    if (n <= 0) return;
    CUDA_CHECK(cudaMemcpyAsync(out, inp, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice,
                               stream_of(kc)));
}

void axpy_cuda(KernelCtx *kc, float *out, float alpha, const float *inp, int64_t n) {
    if (n <= 0) return;
    axpy_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(out, alpha, inp, n);
    CUDA_CHECK(cudaGetLastError());
}
