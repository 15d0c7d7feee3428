/* backend_cuda.c -- the CUDA backend table: every field filled by a launcher in kernels/cuda/
 * (declared in cuda_kernels.h), plus device memory. Plain C: the .cu files export extern "C"
 * launchers, so no C++ reaches the table (house style §2.3).
 * Memory is device memory from cudaMalloc (256-byte aligned, above the 64 the contract asks).
 * to_device and to_host are cudaMemcpy: they return when the copy is done, and are ordered
 * after every kernel already launched on the default stream and on any stream created
 * blocking (cudaStreamCreate without cudaStreamNonBlocking), so a to_host after a step sees
 * its results. The table holds no state: the cuBLAS handles live in gemm.cu, one per thread. */
#include <omp.h>
#include <stdatomic.h>

#include "kernels/base.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

// Out of device memory, or no device at all: the user's machine, not our code, so one line
// and exit 1 (no core), naming the size and the runtime's reason.
static void die_alloc(cudaError_t e, size_t nbytes, const char *what) {
    DIE(1, "%s: cannot allocate %zu bytes of GPU memory: %s (%s)", what, nbytes,
        cudaGetErrorString(e), cudaGetErrorName(e));
}

void *alloc_cuda(size_t nbytes) {
    CHECK(nbytes > 0, "alloc_cuda(0)");
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, nbytes);
    if (e != cudaSuccess) die_alloc(e, nbytes, "alloc_cuda");
    return p;
}

void free_cuda(void *p) {
    if (p) CUDA_CHECK(cudaFree(p));
}

void to_device_cuda(void *dst, const void *src, size_t nbytes) {
    if (nbytes) CUDA_CHECK(cudaMemcpy(dst, src, nbytes, cudaMemcpyHostToDevice));
}

void to_host_cuda(void *dst, const void *src, size_t nbytes) {
    if (nbytes) CUDA_CHECK(cudaMemcpy(dst, src, nbytes, cudaMemcpyDeviceToHost));
}

// The GPU threads itself; the count is the host loops' over staging copies (the optimizer's,
// trainer/optim/host_loop.h: an OpenMP team of the calling thread's default size).
void set_threads_cuda(int n) {
    CHECK(n >= 1, "threads must be >= 1, got %d", n);
    omp_set_num_threads(n);
}

int set_device_cuda(int index, char *why, size_t len) {
    char none[160] = "";
    int n = cuda_device_count(none, sizeof none);
    if (index < 0 || index >= n) {
        snprintf(why, len, "CUDA device %d: %s", index,
                 n ? "no such device (this machine has fewer)" : none);
        return -1;
    }
    cudaError_t e = cudaSetDevice(index);
    if (e != cudaSuccess) {
        snprintf(why, len, "CUDA device %d: %s", index, cudaGetErrorString(e));
        return -1;
    }
    return 0;
}

int cuda_device_count(char *why, size_t len) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        if (why && len) snprintf(why, len, "%s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
        return 0;
    }
    if (n == 0 && why && len) snprintf(why, len, "no CUDA device");
    return n;
}

// Devices whose default pool already keeps its memory (a bit per device id below 64).
static atomic_ullong pool_kept;

// The default pool returns freed memory to the driver at every synchronisation unless its
// release threshold says otherwise; a step would then map its scratch afresh each time.
static void keep_pool_memory(void) {
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    unsigned long long bit = dev < 64 ? 1ull << dev : 0;
    if (bit && (atomic_load(&pool_kept) & bit)) return;
    cudaMemPool_t pool;
    CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
    uint64_t keep = UINT64_MAX;
    CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    atomic_fetch_or(&pool_kept, bit);
}

void *scratch_alloc(KernelCtx *kc, size_t nbytes) {
    if (nbytes == 0) return NULL;
    keep_pool_memory();
    void *p = NULL;
    cudaError_t e = cudaMallocAsync(&p, nbytes, (cudaStream_t)kc->stream);
    if (e != cudaSuccess) die_alloc(e, nbytes, "scratch_alloc");
    return p;
}

void scratch_free(KernelCtx *kc, void *p) {
    if (p) CUDA_CHECK(cudaFreeAsync(p, (cudaStream_t)kc->stream));
}

const Backend backend_cuda = {
    .name = "cuda",
    .dev = DEV_CUDA,
    .alloc = alloc_cuda,
    .free = free_cuda,
    .to_device = to_device_cuda,
    .to_host = to_host_cuda,
    .set_threads = set_threads_cuda,
    .set_device = set_device_cuda,

    .fill = fill_cuda,
    .copy = copy_cuda,
    .axpy = axpy_cuda,
    .gemm = gemm_cuda,
    .gemm_batched = gemm_batched_cuda,

    // BEGIN elementwise
    .relu_fwd = relu_fwd_cuda,
    .relu_bwd = relu_bwd_cuda,
    .silu_fwd = silu_fwd_cuda,
    .silu_bwd = silu_bwd_cuda,
    .gelu_fwd = gelu_fwd_cuda,
    .gelu_bwd = gelu_bwd_cuda,
    .sigmoid_fwd = sigmoid_fwd_cuda,
    .sigmoid_bwd = sigmoid_bwd_cuda,
    .inverse_sigmoid_fwd = inverse_sigmoid_fwd_cuda,
    .inverse_sigmoid_bwd = inverse_sigmoid_bwd_cuda,
    .exp_fwd = exp_fwd_cuda,
    .exp_bwd = exp_bwd_cuda,
    .log_fwd = log_fwd_cuda,
    .log_bwd = log_bwd_cuda,
    .abs_fwd = abs_fwd_cuda,
    .abs_bwd = abs_bwd_cuda,
    .pow_scalar_fwd = pow_scalar_fwd_cuda,
    .pow_scalar_bwd = pow_scalar_bwd_cuda,
    .clamp_fwd = clamp_fwd_cuda,
    .clamp_bwd = clamp_bwd_cuda,
    .scale_fwd = scale_fwd_cuda,
    .add_scalar_fwd = add_scalar_fwd_cuda,
    .add_fwd = add_fwd_cuda,
    .add_bwd = add_bwd_cuda,
    .sub_fwd = sub_fwd_cuda,
    .sub_bwd = sub_bwd_cuda,
    .mul_fwd = mul_fwd_cuda,
    .mul_bwd = mul_bwd_cuda,
    .div_fwd = div_fwd_cuda,
    .div_bwd = div_bwd_cuda,
    .maximum_fwd = maximum_fwd_cuda,
    .maximum_bwd = maximum_bwd_cuda,
    .minimum_fwd = minimum_fwd_cuda,
    .minimum_bwd = minimum_bwd_cuda,
    .bce_logits_fwd = bce_logits_fwd_cuda,
    .bce_logits_bwd = bce_logits_bwd_cuda,
    .sum_dim_fwd = sum_dim_fwd_cuda,
    .sum_dim_bwd = sum_dim_bwd_cuda,
    .mean_dim_fwd = mean_dim_fwd_cuda,
    .mean_dim_bwd = mean_dim_bwd_cuda,
    .softmax_fwd = softmax_fwd_cuda,
    .softmax_bwd = softmax_bwd_cuda,
    .layernorm_fwd = layernorm_fwd_cuda,
    .layernorm_bwd = layernorm_bwd_cuda,
    .batchnorm_train_fwd = batchnorm_train_fwd_cuda,
    .batchnorm_eval_fwd = batchnorm_eval_fwd_cuda,
    .batchnorm_apply = batchnorm_apply_cuda,
    .batchnorm_bwd = batchnorm_bwd_cuda,
    // END elementwise

    // BEGIN conv
    .conv2d_fwd = conv2d_fwd_cuda,
    .conv2d_bwd = conv2d_bwd_cuda,
    .maxpool2d_fwd = maxpool2d_fwd_cuda,
    .maxpool2d_bwd = maxpool2d_bwd_cuda,
    .pad2d_fwd = pad2d_fwd_cuda,
    .pad2d_bwd = pad2d_bwd_cuda,
    .upsample_nearest2d_fwd = upsample_nearest2d_fwd_cuda,
    .upsample_nearest2d_bwd = upsample_nearest2d_bwd_cuda,
    // END conv

    // BEGIN attention
    .bias_rows_fwd = bias_rows_fwd_cuda,
    .bias_rows_bwd = bias_rows_bwd_cuda,
    .attention_fwd = attention_fwd_cuda,
    .attention_bwd = attention_bwd_cuda,
    .grid_sample_fwd = grid_sample_fwd_cuda,
    .grid_sample_bwd = grid_sample_bwd_cuda,
    .msdeform_attn_fwd = msdeform_attn_fwd_cuda,
    .msdeform_attn_bwd = msdeform_attn_bwd_cuda,
    // END attention

    // BEGIN layout
    .permute_fwd = permute_fwd_cuda,
    .permute_bwd = permute_bwd_cuda,
    .block_copy = block_copy_cuda,
    .block_add = block_add_cuda,
    .gather_rows_fwd = gather_rows_fwd_cuda,
    .gather_rows_bwd = gather_rows_bwd_cuda,
    // END layout
};
