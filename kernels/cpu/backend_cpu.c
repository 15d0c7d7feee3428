/* backend_cpu.c -- the CPU backend table: every field filled by a kernel in kernels/cpu/.
 * Memory is host memory; threads are OpenMP threads plus OpenBLAS's own. */
#include <omp.h>

#include "kernels/base.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu_kernels.h"

void *alloc_cpu(size_t nbytes) {
    CHECK(nbytes > 0, "alloc_cpu(0)");
    void *p = NULL;
    // 64-byte alignment: one cache line, and what AVX-512 loads like.
    if (posix_memalign(&p, 64, (nbytes + 63) & ~(size_t)63) != 0)
        DIE(1, "out of memory allocating %zu bytes", nbytes);
    return p;
}

void free_cpu(void *p) { free(p); }

void memcpy_cpu(void *dst, const void *src, size_t nbytes) {
    if (nbytes) memcpy(dst, src, nbytes);
}

int set_device_cpu(int index, char *why, size_t len) {
    if (index == 0) return 0;
    snprintf(why, len, "device index %d: the host has only index 0", index);
    return -1;
}

void set_threads_cpu(int n) {
    CHECK(n >= 1, "threads must be >= 1, got %d", n);
    omp_set_num_threads(n);
    blas_set_threads(n);
}

const Backend backend_cpu = {
    .name         = "cpu",
    .dev          = DEV_CPU,
    .alloc        = alloc_cpu,
    .free         = free_cpu,
    .to_device    = memcpy_cpu,
    .to_host      = memcpy_cpu,
    .set_threads  = set_threads_cpu,
    .set_device   = set_device_cpu,

    .fill         = fill_cpu,
    .copy         = copy_cpu,
    .axpy         = axpy_cpu,
    .gemm         = gemm_cpu,
    .gemm_batched = gemm_batched_cpu,

    // BEGIN elementwise
    .relu_fwd              = relu_fwd_cpu,
    .relu_bwd              = relu_bwd_cpu,
    .silu_fwd              = silu_fwd_cpu,
    .silu_bwd              = silu_bwd_cpu,
    .gelu_fwd              = gelu_fwd_cpu,
    .gelu_bwd              = gelu_bwd_cpu,
    .sigmoid_fwd           = sigmoid_fwd_cpu,
    .sigmoid_bwd           = sigmoid_bwd_cpu,
    .inverse_sigmoid_fwd   = inverse_sigmoid_fwd_cpu,
    .inverse_sigmoid_bwd   = inverse_sigmoid_bwd_cpu,
    .exp_fwd               = exp_fwd_cpu,
    .exp_bwd               = exp_bwd_cpu,
    .log_fwd               = log_fwd_cpu,
    .log_bwd               = log_bwd_cpu,
    .abs_fwd               = abs_fwd_cpu,
    .abs_bwd               = abs_bwd_cpu,
    .pow_scalar_fwd        = pow_scalar_fwd_cpu,
    .pow_scalar_bwd        = pow_scalar_bwd_cpu,
    .clamp_fwd             = clamp_fwd_cpu,
    .clamp_bwd             = clamp_bwd_cpu,
    .scale_fwd             = scale_fwd_cpu,
    .add_scalar_fwd        = add_scalar_fwd_cpu,
    .add_fwd               = add_fwd_cpu,
    .add_bwd               = add_bwd_cpu,
    .sub_fwd               = sub_fwd_cpu,
    .sub_bwd               = sub_bwd_cpu,
    .mul_fwd               = mul_fwd_cpu,
    .mul_bwd               = mul_bwd_cpu,
    .div_fwd               = div_fwd_cpu,
    .div_bwd               = div_bwd_cpu,
    .maximum_fwd           = maximum_fwd_cpu,
    .maximum_bwd           = maximum_bwd_cpu,
    .minimum_fwd           = minimum_fwd_cpu,
    .minimum_bwd           = minimum_bwd_cpu,
    .bce_logits_fwd        = bce_logits_fwd_cpu,
    .bce_logits_bwd        = bce_logits_bwd_cpu,
    .sum_dim_fwd           = sum_dim_fwd_cpu,
    .sum_dim_bwd           = sum_dim_bwd_cpu,
    .mean_dim_fwd          = mean_dim_fwd_cpu,
    .mean_dim_bwd          = mean_dim_bwd_cpu,
    .softmax_fwd           = softmax_fwd_cpu,
    .softmax_bwd           = softmax_bwd_cpu,
    .layernorm_fwd         = layernorm_fwd_cpu,
    .layernorm_bwd         = layernorm_bwd_cpu,
    .batchnorm_train_fwd   = batchnorm_train_fwd_cpu,
    .batchnorm_eval_fwd    = batchnorm_eval_fwd_cpu,
    .batchnorm_apply       = batchnorm_apply_cpu,
    .batchnorm_bwd         = batchnorm_bwd_cpu,
    // END elementwise

    // BEGIN conv
    .conv2d_fwd             = conv2d_fwd_cpu,
    .conv2d_bwd             = conv2d_bwd_cpu,
    .maxpool2d_fwd          = maxpool2d_fwd_cpu,
    .maxpool2d_bwd          = maxpool2d_bwd_cpu,
    .pad2d_fwd              = pad2d_fwd_cpu,
    .pad2d_bwd              = pad2d_bwd_cpu,
    .upsample_nearest2d_fwd = upsample_nearest2d_fwd_cpu,
    .upsample_nearest2d_bwd = upsample_nearest2d_bwd_cpu,
    // END conv

    // BEGIN attention
    .bias_rows_fwd     = bias_rows_fwd_cpu,
    .bias_rows_bwd     = bias_rows_bwd_cpu,
    .attention_fwd     = attention_fwd_cpu,
    .attention_bwd     = attention_bwd_cpu,
    .grid_sample_fwd   = grid_sample_fwd_cpu,
    .grid_sample_bwd   = grid_sample_bwd_cpu,
    .msdeform_attn_fwd = msdeform_attn_fwd_cpu,
    .msdeform_attn_bwd = msdeform_attn_bwd_cpu,
    // END attention

    // BEGIN layout
    .permute_fwd     = permute_fwd_cpu,
    .permute_bwd     = permute_bwd_cpu,
    .block_copy      = block_copy_cpu,
    .block_add       = block_add_cpu,
    .gather_rows_fwd = gather_rows_fwd_cpu,
    .gather_rows_bwd = gather_rows_bwd_cpu,
    // END layout
};
