/* cuda_kernels.h -- the extern "C" launchers that backend_cuda.c puts in the CUDA table, and the
 * memory helpers the .cu files share. Signatures must equal the Backend fields (the table's
 * initialiser checks them); contracts are in kernels/backend.h, not repeated here. Each
 * launcher enqueues its kernels on kc->stream (a cudaStream_t; NULL is the default stream) and
 * returns without waiting: no launcher synchronises the host. Private to kernels/cuda and its
 * tests. */
#ifndef KERNELS_CUDA_CUDA_KERNELS_H
#define KERNELS_CUDA_CUDA_KERNELS_H

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- memory, devices (backend_cuda.c) ----
void *alloc_cuda(size_t nbytes);
void free_cuda(void *p);
void to_device_cuda(void *dst, const void *src, size_t nbytes);
void to_host_cuda(void *dst, const void *src, size_t nbytes);
void set_threads_cuda(int n);
// The number of CUDA devices this process can use; 0 when there is none or no driver, with
// the runtime's reason in why[0..len) (why may be NULL). Creates no context on a device.
int cuda_device_count(char *why, size_t len);
int set_device_cuda(int index, char *why, size_t len);
// Stream-ordered scratch for a kernel's own temporaries (im2col columns, partial sums):
// cudaMallocAsync / cudaFreeAsync on kc->stream from the device's pool, which keeps freed
// memory for the next call (no host synchronisation, no page mapping per step).
// scratch_alloc(kc, 0) returns NULL; scratch_free(kc, NULL) is a no-op.
void *scratch_alloc(KernelCtx *kc, size_t nbytes);
void scratch_free(KernelCtx *kc, void *p);

// ---- basic.cu ----
void fill_cuda(KernelCtx *kc, float *out, float value, int64_t n);
void copy_cuda(KernelCtx *kc, float *out, const float *inp, int64_t n);
void axpy_cuda(KernelCtx *kc, float *out, float alpha, const float *inp, int64_t n);

// ---- gemm.cu ----
void gemm_cuda(KernelCtx *kc, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
               float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
               float *C, int64_t ldc);
void gemm_batched_cuda(KernelCtx *kc, int64_t batch, bool trans_a, bool trans_b, int64_t M,
                       int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                       int64_t stride_a, const float *B, int64_t ldb, int64_t stride_b, float beta,
                       float *C, int64_t ldc, int64_t stride_c);

// BEGIN elementwise
// ---- elementwise.cu ----
void relu_fwd_cuda(KernelCtx *kc, float *out, const float *inp, int64_t n);
void relu_bwd_cuda(KernelCtx *kc, float *dinp, const float *inp, const float *dout, int64_t n);
void silu_fwd_cuda(KernelCtx *kc, float *out, const float *inp, int64_t n);
void silu_bwd_cuda(KernelCtx *kc, float *dinp, const float *inp, const float *dout, int64_t n);
void gelu_fwd_cuda(KernelCtx *kc, float *out, const float *inp, int64_t n);
void gelu_bwd_cuda(KernelCtx *kc, float *dinp, const float *inp, const float *dout, int64_t n);
void sigmoid_fwd_cuda(KernelCtx *kc, float *out, const float *inp, int64_t n);
void sigmoid_bwd_cuda(KernelCtx *kc, float *dinp, const float *out, const float *dout, int64_t n);
void inverse_sigmoid_fwd_cuda(KernelCtx *kc, float *out, const float *inp, int64_t n);
void inverse_sigmoid_bwd_cuda(KernelCtx *kc, float *dinp, const float *inp, const float *dout,
                              int64_t n);
void exp_fwd_cuda(KernelCtx *kc, float *out, const float *inp, int64_t n);
void exp_bwd_cuda(KernelCtx *kc, float *dinp, const float *out, const float *dout, int64_t n);
void log_fwd_cuda(KernelCtx *kc, float *out, const float *inp, int64_t n);
void log_bwd_cuda(KernelCtx *kc, float *dinp, const float *inp, const float *dout, int64_t n);
void abs_fwd_cuda(KernelCtx *kc, float *out, const float *inp, int64_t n);
void abs_bwd_cuda(KernelCtx *kc, float *dinp, const float *inp, const float *dout, int64_t n);
void pow_scalar_fwd_cuda(KernelCtx *kc, float *out, const float *inp, float e, int64_t n);
void pow_scalar_bwd_cuda(KernelCtx *kc, float *dinp, const float *inp, const float *dout, float e,
                         int64_t n);
void clamp_fwd_cuda(KernelCtx *kc, float *out, const float *inp, float lo, float hi, int64_t n);
void clamp_bwd_cuda(KernelCtx *kc, float *dinp, const float *inp, const float *dout, float lo,
                    float hi, int64_t n);
void scale_fwd_cuda(KernelCtx *kc, float *out, const float *inp, float s, int64_t n);
void add_scalar_fwd_cuda(KernelCtx *kc, float *out, const float *inp, float s, int64_t n);
void add_fwd_cuda(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                  const int64_t *a_shape, const int64_t *b_shape);
void sub_fwd_cuda(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                  const int64_t *a_shape, const int64_t *b_shape);
void mul_fwd_cuda(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                  const int64_t *a_shape, const int64_t *b_shape);
void div_fwd_cuda(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                  const int64_t *a_shape, const int64_t *b_shape);
void maximum_fwd_cuda(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                      const int64_t *a_shape, const int64_t *b_shape);
void minimum_fwd_cuda(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                      const int64_t *a_shape, const int64_t *b_shape);
void add_bwd_cuda(KernelCtx *kc, float *da, float *db, const float *dout, int ndim,
                  const int64_t *a_shape, const int64_t *b_shape);
void sub_bwd_cuda(KernelCtx *kc, float *da, float *db, const float *dout, int ndim,
                  const int64_t *a_shape, const int64_t *b_shape);
void mul_bwd_cuda(KernelCtx *kc, float *da, float *db, const float *dout, const float *a,
                  const float *b, int ndim, const int64_t *a_shape, const int64_t *b_shape);
void div_bwd_cuda(KernelCtx *kc, float *da, float *db, const float *dout, const float *a,
                  const float *b, int ndim, const int64_t *a_shape, const int64_t *b_shape);
void maximum_bwd_cuda(KernelCtx *kc, float *da, float *db, const float *dout, const float *a,
                      const float *b, int ndim, const int64_t *a_shape, const int64_t *b_shape);
void minimum_bwd_cuda(KernelCtx *kc, float *da, float *db, const float *dout, const float *a,
                      const float *b, int ndim, const int64_t *a_shape, const int64_t *b_shape);
void bce_logits_fwd_cuda(KernelCtx *kc, float *out, const float *x, const float *y, int64_t n);
void bce_logits_bwd_cuda(KernelCtx *kc, float *dx, float *dy, const float *dout, const float *x,
                         const float *y, int64_t n);
// ---- reduce.cu ----
void sum_dim_fwd_cuda(KernelCtx *kc, float *out, const float *inp, int64_t outer, int64_t r,
                      int64_t inner);
void mean_dim_fwd_cuda(KernelCtx *kc, float *out, const float *inp, int64_t outer, int64_t r,
                       int64_t inner);
void sum_dim_bwd_cuda(KernelCtx *kc, float *dinp, const float *dout, int64_t outer, int64_t r,
                      int64_t inner);
void mean_dim_bwd_cuda(KernelCtx *kc, float *dinp, const float *dout, int64_t outer, int64_t r,
                       int64_t inner);
void softmax_fwd_cuda(KernelCtx *kc, float *out, const float *inp, int64_t rows, int64_t cols);
void softmax_bwd_cuda(KernelCtx *kc, float *dinp, const float *out, const float *dout, int64_t rows,
                      int64_t cols);
// ---- norm.cu ----
void layernorm_fwd_cuda(KernelCtx *kc, float *out, float *mean, float *rstd, const float *inp,
                        const float *weight, const float *bias, int64_t rows, int64_t E, float eps);
void layernorm_bwd_cuda(KernelCtx *kc, float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *mean, const float *rstd, const float *weight,
                        int64_t rows, int64_t E);
void batchnorm_train_fwd_cuda(KernelCtx *kc, float *out, float *save_mean, float *save_invstd,
                              float *running_mean, float *running_var, const float *inp,
                              const float *weight, const float *bias, int64_t B, int64_t C,
                              int64_t HW, float momentum, double eps, BnAct act);
void batchnorm_apply_cuda(KernelCtx *kc, float *out, const float *inp, const float *weight,
                          const float *bias, const float *save_mean, const float *save_invstd,
                          int64_t B, int64_t C, int64_t HW, BnAct act);
void batchnorm_eval_fwd_cuda(KernelCtx *kc, float *out, float *save_mean, float *save_invstd,
                             const float *inp, const float *running_mean, const float *running_var,
                             const float *weight, const float *bias, int64_t B, int64_t C,
                             int64_t HW, double eps, BnAct act);
void batchnorm_bwd_cuda(KernelCtx *kc, float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, const float *bias,
                        const float *save_mean, const float *save_invstd, int64_t B, int64_t C,
                        int64_t HW, bool training, BnAct act);
// END elementwise

// BEGIN conv
// ---- conv.cu ----
void conv2d_fwd_cuda(KernelCtx *kc, float *out, const float *x, const float *w, const float *bias,
                     int64_t B, int64_t C, int64_t H, int64_t W, int64_t OC, int64_t OH, int64_t OW,
                     int KH, int KW, Conv2dParams p);
void conv2d_bwd_cuda(KernelCtx *kc, float *dx, float *dw, float *dbias, const float *dout,
                     const float *x, const float *w, int64_t B, int64_t C, int64_t H, int64_t W,
                     int64_t OC, int64_t OH, int64_t OW, int KH, int KW, Conv2dParams p);
// ---- pool.cu ----
void maxpool2d_fwd_cuda(KernelCtx *kc, float *out, int32_t *idx, const float *x, int64_t n_planes,
                        int64_t H, int64_t W, int64_t OH, int64_t OW, Pool2dParams p);
void maxpool2d_bwd_cuda(KernelCtx *kc, float *dx, const float *dout, const int32_t *idx,
                        int64_t n_planes, int64_t H, int64_t W, int64_t OH, int64_t OW,
                        Pool2dParams p);
// ---- resample.cu ----
void pad2d_fwd_cuda(KernelCtx *kc, float *out, const float *x, int64_t n_planes, int64_t H,
                    int64_t W, int left, int right, int top, int bottom);
void pad2d_bwd_cuda(KernelCtx *kc, float *dx, const float *dout, int64_t n_planes, int64_t H,
                    int64_t W, int left, int right, int top, int bottom);
void upsample_nearest2d_fwd_cuda(KernelCtx *kc, float *out, const float *x, int64_t n_planes,
                                 int64_t H, int64_t W, int scale);
void upsample_nearest2d_bwd_cuda(KernelCtx *kc, float *dx, const float *dout, int64_t n_planes,
                                 int64_t H, int64_t W, int scale);
// END conv

// BEGIN attention
// ---- attention.cu ----
void bias_rows_fwd_cuda(KernelCtx *kc, float *out, const float *bias, int64_t M, int64_t N);
void bias_rows_bwd_cuda(KernelCtx *kc, float *dbias, const float *dout, int64_t M, int64_t N);
void attention_fwd_cuda(KernelCtx *kc, float *out, const float *qs, const float *k, const float *v,
                        const uint8_t *mask, int64_t B, int NH, int64_t Lq, int64_t Lk, int64_t E);
void attention_bwd_cuda(KernelCtx *kc, float *dqs, float *dk, float *dv, const float *dout,
                        const float *qs, const float *k, const float *v, const uint8_t *mask,
                        int64_t B, int NH, int64_t Lq, int64_t Lk, int64_t E);
// ---- deform_attn.cu ----
void grid_sample_fwd_cuda(KernelCtx *kc, float *out, const float *x, const float *grid, int64_t B,
                          int64_t C, int64_t H, int64_t W, int64_t Ho, int64_t Wo);
void grid_sample_bwd_cuda(KernelCtx *kc, float *dx, float *dgrid, const float *dout, const float *x,
                          const float *grid, int64_t B, int64_t C, int64_t H, int64_t W, int64_t Ho,
                          int64_t Wo);
void msdeform_attn_fwd_cuda(KernelCtx *kc, float *out, const float *value, const float *loc,
                            const float *aw, const int64_t *shapes, int64_t B, int64_t N, int NH,
                            int D, int L, int64_t Lq, int P);
void msdeform_attn_bwd_cuda(KernelCtx *kc, float *dvalue, float *dloc, float *daw,
                            const float *dout, const float *value, const float *loc,
                            const float *aw, const int64_t *shapes, int64_t B, int64_t N, int NH,
                            int D, int L, int64_t Lq, int P);
// END attention

// BEGIN layout
// ---- layout.cu ----
void permute_fwd_cuda(KernelCtx *kc, float *out, const float *inp, int ndim, const int64_t *shape,
                      const int *perm);
void permute_bwd_cuda(KernelCtx *kc, float *dinp, const float *dout, int ndim, const int64_t *shape,
                      const int *perm);
void block_copy_cuda(KernelCtx *kc, float *out, int64_t out_stride, const float *inp,
                     int64_t in_stride, int64_t outer, int64_t inner);
void block_add_cuda(KernelCtx *kc, float *out, int64_t out_stride, const float *inp,
                    int64_t in_stride, int64_t outer, int64_t inner);
void gather_rows_fwd_cuda(KernelCtx *kc, float *out, const float *inp, const int64_t *idx,
                          int64_t idx_stride, int64_t outer, int64_t n_src, int64_t n_idx,
                          int64_t inner);
void gather_rows_bwd_cuda(KernelCtx *kc, float *dinp, const float *dout, const int64_t *idx,
                          int64_t idx_stride, int64_t outer, int64_t n_src, int64_t n_idx,
                          int64_t inner);
// END layout

#ifdef __cplusplus
}
#endif

#endif
