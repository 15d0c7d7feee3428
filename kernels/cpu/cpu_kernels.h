/* cpu_kernels.h -- declarations of the CPU kernels that backend_cpu.c puts in the table.
 * Signatures must equal the Backend fields (the table initialiser checks them). Contracts are
 * in kernels/backend.h, not repeated here. Private to kernels/cpu. */
#ifndef KERNELS_CPU_CPU_KERNELS_H
#define KERNELS_CPU_CPU_KERNELS_H

#include <stdint.h>
#include <string.h>

#include "kernels/backend.h"

// A hot loop's function compiled three times, for AVX-512, AVX2 and the x86-64 baseline (SSE2,
// all the default -O2 build may assume), the CPU choosing at load time. For compute-bound
// loops (exp, the transforms): 16 floats an instruction instead of 4. Code under it uses only
// operations that round once (+ - * /, no FMA contraction in this ISO C build), so elementwise
// results are the same in every clone; an `omp simd` reduction's order follows the vector
// width, so a sum can differ in its last bits between CPUs, never between runs on one CPU.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CPU_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CPU_VECTOR_CLONES
#endif

// Sums over short rows (a deformable-attention head's 32 channels) in SUM_LANES lanes: lane z
// adds elements z, z + SUM_LANES, ... (one AVX-512 register), then lanes_sum adds the lanes
// pairwise, 4 additions deep, in the same order on every CPU. An `omp simd` reduction ends by
// adding its 16 lanes one after another through memory: for a 32-float row that tail cost as
// much as the row (the deformable-attention backward took 5.2-5.9 ms a layer with three such
// reductions a sampling point, 3.2-3.7 ms with these). Long rows (softmax, norms) gain
// nothing and keep `omp simd`.
#define SUM_LANES 16
typedef float SumLanes __attribute__((vector_size(SUM_LANES * sizeof(float))));

// n <= SUM_LANES floats from p, the other lanes 0.
static inline __attribute__((always_inline)) SumLanes load_lanes(const float *p, int n) {
    SumLanes v = {0};
    memcpy(&v, p, sizeof(float) * (size_t)n);
    return v;
}

static inline __attribute__((always_inline)) float lanes_sum(SumLanes v) {
    v += __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
    v += __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
    v += __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
    v += __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
    return v[0];
}

// ---- memory, threads (backend_cpu.c) ----
void *alloc_cpu(size_t nbytes);
void free_cpu(void *p);
void memcpy_cpu(void *dst, const void *src, size_t nbytes);
void set_threads_cpu(int n);
int set_device_cpu(int index, char *why, size_t len);

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
// expf for `omp simd` loops, within 1 ulp of exp (Cephes' expf): x = n ln2 + r, |r| <= ln2/2,
// exp(r) by a degree-7 polynomial, times 2^n built in the exponent bits. n = round(x / ln2)
// comes from adding 1.5 * 2^23, which leaves n in the low mantissa bits, so no float->int
// conversion (SSE2 has none for vectors). Below EXP_LO the result (< 2.4e-38) is 0, above
// EXP_HI +inf, set through bit masks: a compare-and-select here would be if-converted by GCC
// only without -ftrapping-math. A NaN stays NaN.
#define EXP_LO -86.6f    // n >= -125, so that 2^(n-1) is a normal float
#define EXP_HI 88.72283f // log(FLT_MAX)
static inline __attribute__((always_inline)) float expf_simd(float x) {
    const float magic = 12582912.0f; // 1.5 * 2^23
    float t = x * 1.44269504088896341f + magic;
    float n = t - magic;
    float r = x - n * 0.693359375f - n * -2.12194440e-4f; // ln2 in two parts: n * hi is exact
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    uint32_t bits, scale_bits, y_bits;
    memcpy(&bits, &t, sizeof bits);           // 0x4B400000 + n
    scale_bits = (bits << 23) + (126u << 23); // (n - 1 + 127) << 23: 2^(n-1), n <= 128
    float scale, y;
    memcpy(&scale, &scale_bits, sizeof scale);
    y = 2.0f * p * scale;
    memcpy(&y_bits, &y, sizeof y_bits);
    uint32_t zero = -(uint32_t)(x < EXP_LO), inf = -(uint32_t)(x > EXP_HI); // all ones or 0
    y_bits = (y_bits & ~(zero | inf)) | (inf & 0x7F800000u);
    memcpy(&y, &y_bits, sizeof y);
    return y;
}

// The activations as elementwise.c's kernels compute them, for norm.c's fused BatchNorm:
// silu(x) = x / (1 + exp(-x)); its gradient dout * s * (1 + x (1 - s)), s = sigmoid(x); relu's
// gradient passes dout where x > 0 (relu(x) > 0 exactly there).
static inline __attribute__((always_inline)) float silu_value(float x) {
    return x / (1.0f + expf_simd(-x));
}

static inline __attribute__((always_inline)) float silu_grad(float x, float dout) {
    float s = 1.0f / (1.0f + expf_simd(-x));
    return dout * s * (1.0f + x * (1.0f - s));
}

// ---- elementwise.c ----
void relu_fwd_cpu(KernelCtx *kc, float *out, const float *inp, int64_t n);
void relu_bwd_cpu(KernelCtx *kc, float *dinp, const float *inp, const float *dout, int64_t n);
void silu_fwd_cpu(KernelCtx *kc, float *out, const float *inp, int64_t n);
void silu_bwd_cpu(KernelCtx *kc, float *dinp, const float *inp, const float *dout, int64_t n);
void gelu_fwd_cpu(KernelCtx *kc, float *out, const float *inp, int64_t n);
void gelu_bwd_cpu(KernelCtx *kc, float *dinp, const float *inp, const float *dout, int64_t n);
void sigmoid_fwd_cpu(KernelCtx *kc, float *out, const float *inp, int64_t n);
void sigmoid_bwd_cpu(KernelCtx *kc, float *dinp, const float *out, const float *dout, int64_t n);
void inverse_sigmoid_fwd_cpu(KernelCtx *kc, float *out, const float *inp, int64_t n);
void inverse_sigmoid_bwd_cpu(KernelCtx *kc, float *dinp, const float *inp, const float *dout,
                             int64_t n);
void exp_fwd_cpu(KernelCtx *kc, float *out, const float *inp, int64_t n);
void exp_bwd_cpu(KernelCtx *kc, float *dinp, const float *out, const float *dout, int64_t n);
void log_fwd_cpu(KernelCtx *kc, float *out, const float *inp, int64_t n);
void log_bwd_cpu(KernelCtx *kc, float *dinp, const float *inp, const float *dout, int64_t n);
void abs_fwd_cpu(KernelCtx *kc, float *out, const float *inp, int64_t n);
void abs_bwd_cpu(KernelCtx *kc, float *dinp, const float *inp, const float *dout, int64_t n);
void pow_scalar_fwd_cpu(KernelCtx *kc, float *out, const float *inp, float e, int64_t n);
void pow_scalar_bwd_cpu(KernelCtx *kc, float *dinp, const float *inp, const float *dout, float e,
                        int64_t n);
void clamp_fwd_cpu(KernelCtx *kc, float *out, const float *inp, float lo, float hi, int64_t n);
void clamp_bwd_cpu(KernelCtx *kc, float *dinp, const float *inp, const float *dout, float lo,
                   float hi, int64_t n);
void scale_fwd_cpu(KernelCtx *kc, float *out, const float *inp, float s, int64_t n);
void add_scalar_fwd_cpu(KernelCtx *kc, float *out, const float *inp, float s, int64_t n);
void add_fwd_cpu(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                 const int64_t *a_shape, const int64_t *b_shape);
void sub_fwd_cpu(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                 const int64_t *a_shape, const int64_t *b_shape);
void mul_fwd_cpu(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                 const int64_t *a_shape, const int64_t *b_shape);
void div_fwd_cpu(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                 const int64_t *a_shape, const int64_t *b_shape);
void maximum_fwd_cpu(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                     const int64_t *a_shape, const int64_t *b_shape);
void minimum_fwd_cpu(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                     const int64_t *a_shape, const int64_t *b_shape);
void add_bwd_cpu(KernelCtx *kc, float *da, float *db, const float *dout, int ndim,
                 const int64_t *a_shape, const int64_t *b_shape);
void sub_bwd_cpu(KernelCtx *kc, float *da, float *db, const float *dout, int ndim,
                 const int64_t *a_shape, const int64_t *b_shape);
void mul_bwd_cpu(KernelCtx *kc, float *da, float *db, const float *dout, const float *a,
                 const float *b, int ndim, const int64_t *a_shape, const int64_t *b_shape);
void div_bwd_cpu(KernelCtx *kc, float *da, float *db, const float *dout, const float *a,
                 const float *b, int ndim, const int64_t *a_shape, const int64_t *b_shape);
void maximum_bwd_cpu(KernelCtx *kc, float *da, float *db, const float *dout, const float *a,
                     const float *b, int ndim, const int64_t *a_shape, const int64_t *b_shape);
void minimum_bwd_cpu(KernelCtx *kc, float *da, float *db, const float *dout, const float *a,
                     const float *b, int ndim, const int64_t *a_shape, const int64_t *b_shape);
void bce_logits_fwd_cpu(KernelCtx *kc, float *out, const float *x, const float *y, int64_t n);
void bce_logits_bwd_cpu(KernelCtx *kc, float *dx, float *dy, const float *dout, const float *x,
                        const float *y, int64_t n);
// ---- reduce.c ----
void sum_dim_fwd_cpu(KernelCtx *kc, float *out, const float *inp, int64_t outer, int64_t r,
                     int64_t inner);
void mean_dim_fwd_cpu(KernelCtx *kc, float *out, const float *inp, int64_t outer, int64_t r,
                      int64_t inner);
void sum_dim_bwd_cpu(KernelCtx *kc, float *dinp, const float *dout, int64_t outer, int64_t r,
                     int64_t inner);
void mean_dim_bwd_cpu(KernelCtx *kc, float *dinp, const float *dout, int64_t outer, int64_t r,
                      int64_t inner);
void softmax_fwd_cpu(KernelCtx *kc, float *out, const float *inp, int64_t rows, int64_t cols);
void softmax_bwd_cpu(KernelCtx *kc, float *dinp, const float *out, const float *dout,
                     int64_t rows, int64_t cols);
// ---- norm.c ----
void layernorm_fwd_cpu(KernelCtx *kc, float *out, float *mean, float *rstd, const float *inp,
                       const float *weight, const float *bias, int64_t rows, int64_t E,
                       float eps);
void layernorm_bwd_cpu(KernelCtx *kc, float *dinp, float *dweight, float *dbias,
                       const float *dout, const float *inp, const float *mean, const float *rstd,
                       const float *weight, int64_t rows, int64_t E);
void batchnorm_train_fwd_cpu(KernelCtx *kc, float *out, float *save_mean, float *save_invstd,
                             float *running_mean, float *running_var, const float *inp,
                             const float *weight, const float *bias, int64_t B, int64_t C,
                             int64_t HW, float momentum, double eps, BnAct act);
void batchnorm_apply_cpu(KernelCtx *kc, float *out, const float *inp, const float *weight,
                         const float *bias, const float *save_mean, const float *save_invstd,
                         int64_t B, int64_t C, int64_t HW, BnAct act);
void batchnorm_eval_fwd_cpu(KernelCtx *kc, float *out, float *save_mean, float *save_invstd,
                            const float *inp, const float *running_mean, const float *running_var,
                            const float *weight, const float *bias, int64_t B, int64_t C,
                            int64_t HW, double eps, BnAct act);
void batchnorm_bwd_cpu(KernelCtx *kc, float *dinp, float *dweight, float *dbias,
                       const float *dout, const float *inp, const float *weight, const float *bias,
                       const float *save_mean, const float *save_invstd, int64_t B, int64_t C,
                       int64_t HW, bool training, BnAct act);
// END elementwise

// BEGIN conv
// ---- conv.c ----
void conv2d_fwd_cpu(KernelCtx *kc, float *out, const float *x, const float *w, const float *bias,
                    int64_t B, int64_t C, int64_t H, int64_t W, int64_t OC, int64_t OH,
                    int64_t OW, int KH, int KW, Conv2dParams p);
void conv2d_bwd_cpu(KernelCtx *kc, float *dx, float *dw, float *dbias, const float *dout,
                    const float *x, const float *w, int64_t B, int64_t C, int64_t H, int64_t W,
                    int64_t OC, int64_t OH, int64_t OW, int KH, int KW, Conv2dParams p);
// ---- pool.c ----
void maxpool2d_fwd_cpu(KernelCtx *kc, float *out, int32_t *idx, const float *x, int64_t n_planes,
                       int64_t H, int64_t W, int64_t OH, int64_t OW, Pool2dParams p);
void maxpool2d_bwd_cpu(KernelCtx *kc, float *dx, const float *dout, const int32_t *idx,
                       int64_t n_planes, int64_t H, int64_t W, int64_t OH, int64_t OW,
                       Pool2dParams p);
// ---- resample.c ----
void pad2d_fwd_cpu(KernelCtx *kc, float *out, const float *x, int64_t n_planes, int64_t H,
                   int64_t W, int left, int right, int top, int bottom);
void pad2d_bwd_cpu(KernelCtx *kc, float *dx, const float *dout, int64_t n_planes, int64_t H,
                   int64_t W, int left, int right, int top, int bottom);
void upsample_nearest2d_fwd_cpu(KernelCtx *kc, float *out, const float *x, int64_t n_planes,
                                int64_t H, int64_t W, int scale);
void upsample_nearest2d_bwd_cpu(KernelCtx *kc, float *dx, const float *dout, int64_t n_planes,
                                int64_t H, int64_t W, int scale);
// END conv

// BEGIN attention
// ---- attention.c ----
void bias_rows_fwd_cpu(KernelCtx *kc, float *out, const float *bias, int64_t M, int64_t N);
void bias_rows_bwd_cpu(KernelCtx *kc, float *dbias, const float *dout, int64_t M, int64_t N);
void attention_fwd_cpu(KernelCtx *kc, float *out, const float *qs, const float *k, const float *v,
                       const uint8_t *mask, int64_t B, int NH, int64_t Lq, int64_t Lk, int64_t E);
void attention_bwd_cpu(KernelCtx *kc, float *dqs, float *dk, float *dv, const float *dout,
                       const float *qs, const float *k, const float *v, const uint8_t *mask,
                       int64_t B, int NH, int64_t Lq, int64_t Lk, int64_t E);
// ---- deform_attn.c ----
void grid_sample_fwd_cpu(KernelCtx *kc, float *out, const float *x, const float *grid, int64_t B,
                         int64_t C, int64_t H, int64_t W, int64_t Ho, int64_t Wo);
void grid_sample_bwd_cpu(KernelCtx *kc, float *dx, float *dgrid, const float *dout,
                         const float *x, const float *grid, int64_t B, int64_t C, int64_t H,
                         int64_t W, int64_t Ho, int64_t Wo);
void msdeform_attn_fwd_cpu(KernelCtx *kc, float *out, const float *value, const float *loc,
                           const float *aw, const int64_t *shapes, int64_t B, int64_t N, int NH,
                           int D, int L, int64_t Lq, int P);
void msdeform_attn_bwd_cpu(KernelCtx *kc, float *dvalue, float *dloc, float *daw,
                           const float *dout, const float *value, const float *loc,
                           const float *aw, const int64_t *shapes, int64_t B, int64_t N, int NH,
                           int D, int L, int64_t Lq, int P);
// END attention

// BEGIN layout
void permute_fwd_cpu(KernelCtx *kc, float *out, const float *inp, int ndim, const int64_t *shape,
                     const int *perm);
void permute_bwd_cpu(KernelCtx *kc, float *dinp, const float *dout, int ndim,
                     const int64_t *shape, const int *perm);
void block_copy_cpu(KernelCtx *kc, float *out, int64_t out_stride, const float *inp,
                    int64_t in_stride, int64_t outer, int64_t inner);
void block_add_cpu(KernelCtx *kc, float *out, int64_t out_stride, const float *inp,
                   int64_t in_stride, int64_t outer, int64_t inner);
void gather_rows_fwd_cpu(KernelCtx *kc, float *out, const float *inp, const int64_t *idx,
                         int64_t idx_stride, int64_t outer, int64_t n_src, int64_t n_idx,
                         int64_t inner);
void gather_rows_bwd_cpu(KernelCtx *kc, float *dinp, const float *dout, const int64_t *idx,
                         int64_t idx_stride, int64_t outer, int64_t n_src, int64_t n_idx,
                         int64_t inner);
// END layout

#endif
