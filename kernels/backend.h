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

// DEV_FAKE: the CPU kernels over memory host code cannot read (kernels/cpu/backend_fake.c),
// so every build can prove that the trainer touches tensor data only through the backend.
typedef enum { DEV_CPU = 0, DEV_CUDA = 1, DEV_FAKE = 2 } Device;

// Per-call execution context. n_threads: CPU worker threads for this call (>= 1).
typedef struct KernelCtx {
    int n_threads;
    void *stream; // cudaStream_t on CUDA, unused on CPU
} KernelCtx;

// ---- parameter structs for kernels with options ----
// The activation a BatchNorm2d kernel applies to its output: nn.Conv's BatchNorm and
// activation in one pass over the map. BN_ACT_RELU: x > 0 ? x : 0; BN_ACT_SILU:
// x / (1 + exp(-x)); each with the same float operations as relu_fwd / silu_fwd and their
// backward kernels, so that the fused op gives the unfused pair's results bit for bit.
typedef enum { BN_ACT_NONE = 0, BN_ACT_RELU = 1, BN_ACT_SILU = 2 } BnAct;

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
    // Device memory: host code never dereferences it (the fake device faults if it does);
    // it is read and written only by this table's kernels and the two copies below.
    void *(*alloc)(size_t nbytes); // aborts on failure; 64-byte aligned
    void (*free)(void *p);         // free(NULL) is a no-op
    // dst (device) = src (host), and dst (host) = src (device); synchronous: when they
    // return the copy is done and src may be reused.
    void (*to_device)(void *dst, const void *src, size_t nbytes);
    void (*to_host)(void *dst, const void *src, size_t nbytes);
    // Sets the worker-thread count used by this backend's kernels and its BLAS (n >= 1).
    void (*set_threads)(int n);
    // Makes device `index` (>= 0) the one this thread's later calls and allocations use
    // (CUDA: cudaSetDevice). Returns 0, or -1 with one line in why when there is no such
    // device. The CPU and the fake device have the single index 0.
    int (*set_device)(int index, char *why, size_t len);

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
    // Unary activations, fwd: out[i] = f(inp[i]); bwd: dinp[i] = f'(.) * dout[i]. Every
    // pointer (n). The bwd kernels read the forward's input, except sigmoid_bwd and exp_bwd,
    // which read its output (as PyTorch's formulas do). bwd kernels WRITE every dinp[i] (they
    // do not accumulate: the op adds into an existing gradient itself, tape_grad_fresh).
    // relu: max(x, 0); gradient where x > 0. out may be inp (relu_, in place).
    void (*relu_fwd)(KernelCtx *kc, float *out, const float *inp, int64_t n);
    void (*relu_bwd)(KernelCtx *kc, float *dinp, const float *inp, const float *dout, int64_t n);
    // silu: x * sigmoid(x).
    void (*silu_fwd)(KernelCtx *kc, float *out, const float *inp, int64_t n);
    void (*silu_bwd)(KernelCtx *kc, float *dinp, const float *inp, const float *dout, int64_t n);
    // gelu, exact: x * 0.5 * (1 + erf(x / sqrt 2)).
    void (*gelu_fwd)(KernelCtx *kc, float *out, const float *inp, int64_t n);
    void (*gelu_bwd)(KernelCtx *kc, float *dinp, const float *inp, const float *dout, int64_t n);
    // sigmoid: 1 / (1 + exp(-x)); bwd from the output y: dout * (1 - y) * y.
    void (*sigmoid_fwd)(KernelCtx *kc, float *out, const float *inp, int64_t n);
    void (*sigmoid_bwd)(KernelCtx *kc, float *dinp, const float *out, const float *dout,
                        int64_t n);
    // Ultralytics inverse_sigmoid, eps 1e-5: x' = clamp(x, 0, 1),
    // log(clamp(x', min=eps) / clamp(1 - x', min=eps)); bwd is autograd's through each clamp
    // (a clamp passes the gradient where lo <= value <= hi).
    void (*inverse_sigmoid_fwd)(KernelCtx *kc, float *out, const float *inp, int64_t n);
    void (*inverse_sigmoid_bwd)(KernelCtx *kc, float *dinp, const float *inp, const float *dout,
                                int64_t n);
    // exp; bwd from the output y: dout * y.
    void (*exp_fwd)(KernelCtx *kc, float *out, const float *inp, int64_t n);
    void (*exp_bwd)(KernelCtx *kc, float *dinp, const float *out, const float *dout, int64_t n);
    // natural log; bwd dout / x.
    void (*log_fwd)(KernelCtx *kc, float *out, const float *inp, int64_t n);
    void (*log_bwd)(KernelCtx *kc, float *dinp, const float *inp, const float *dout, int64_t n);
    // |x|; bwd dout * sign(x), 0 at 0.
    void (*abs_fwd)(KernelCtx *kc, float *out, const float *inp, int64_t n);
    void (*abs_bwd)(KernelCtx *kc, float *dinp, const float *inp, const float *dout, int64_t n);
    // x^e as torch.pow(x, e) (e = 0.5, 2, 3, -0.5, -1, -2 take PyTorch's exact special cases);
    // bwd dout * (e * x^(e-1)), and 0 when e == 0 (written too).
    void (*pow_scalar_fwd)(KernelCtx *kc, float *out, const float *inp, float e, int64_t n);
    void (*pow_scalar_bwd)(KernelCtx *kc, float *dinp, const float *inp, const float *dout,
                           float e, int64_t n);
    // clamp(x, lo, hi) (+-INFINITY for one side; NaN stays NaN); bwd passes dout where
    // lo <= x <= hi, else 0.
    void (*clamp_fwd)(KernelCtx *kc, float *out, const float *inp, float lo, float hi, int64_t n);
    void (*clamp_bwd)(KernelCtx *kc, float *dinp, const float *inp, const float *dout, float lo,
                      float hi, int64_t n);
    // out = s * inp (scale, neg) and out = inp + s. Their gradients are axpy's.
    void (*scale_fwd)(KernelCtx *kc, float *out, const float *inp, float s, int64_t n);
    void (*add_scalar_fwd)(KernelCtx *kc, float *out, const float *inp, float s, int64_t n);

    // Binary ops with NumPy broadcasting. a_shape, b_shape: host arrays of ndim entries each
    // (the shorter operand padded with leading 1s; ndim 0 is a scalar); every dim pair is
    // equal or has a 1. out has the broadcast shape (the max per dim), contiguous.
    void (*add_fwd)(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                    const int64_t *a_shape, const int64_t *b_shape);
    void (*sub_fwd)(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                    const int64_t *a_shape, const int64_t *b_shape);
    void (*mul_fwd)(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                    const int64_t *a_shape, const int64_t *b_shape);
    void (*div_fwd)(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                    const int64_t *a_shape, const int64_t *b_shape);
    // Elementwise max / min; a NaN on either side gives NaN.
    void (*maximum_fwd)(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                        const int64_t *a_shape, const int64_t *b_shape);
    void (*minimum_fwd)(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                        const int64_t *a_shape, const int64_t *b_shape);
    // Their gradients from dout (broadcast shape), each summed back over the dims that
    // input broadcast: da (a_shape), db (b_shape), either NULL when not wanted. div: da from
    // dout / b, db from -dout * ((a / b) / b). maximum/minimum: the winner gets dout, a tie
    // gives dout / 2 to each. ACCUMULATES.
    void (*add_bwd)(KernelCtx *kc, float *da, float *db, const float *dout, int ndim,
                    const int64_t *a_shape, const int64_t *b_shape);
    void (*sub_bwd)(KernelCtx *kc, float *da, float *db, const float *dout, int ndim,
                    const int64_t *a_shape, const int64_t *b_shape);
    void (*mul_bwd)(KernelCtx *kc, float *da, float *db, const float *dout, const float *a,
                    const float *b, int ndim, const int64_t *a_shape, const int64_t *b_shape);
    void (*div_bwd)(KernelCtx *kc, float *da, float *db, const float *dout, const float *a,
                    const float *b, int ndim, const int64_t *a_shape, const int64_t *b_shape);
    void (*maximum_bwd)(KernelCtx *kc, float *da, float *db, const float *dout, const float *a,
                        const float *b, int ndim, const int64_t *a_shape,
                        const int64_t *b_shape);
    void (*minimum_bwd)(KernelCtx *kc, float *da, float *db, const float *dout, const float *a,
                        const float *b, int ndim, const int64_t *a_shape,
                        const int64_t *b_shape);
    // BCE with logits, reduction none (PyTorch's stable form). out, x (logits), y (targets):
    // (n). bwd: dx += (sigmoid(x) - y) * dout, dy += -x * dout; dx or dy may be NULL.
    // ACCUMULATES.
    void (*bce_logits_fwd)(KernelCtx *kc, float *out, const float *x, const float *y, int64_t n);
    void (*bce_logits_bwd)(KernelCtx *kc, float *dx, float *dy, const float *dout, const float *x,
                           const float *y, int64_t n);

    // Reductions over the middle dim of inp (outer, r, inner) -> out (outer, inner), summed
    // in double; mean divides the sum by r. r >= 1.
    void (*sum_dim_fwd)(KernelCtx *kc, float *out, const float *inp, int64_t outer, int64_t r,
                        int64_t inner);
    void (*mean_dim_fwd)(KernelCtx *kc, float *out, const float *inp, int64_t outer, int64_t r,
                         int64_t inner);
    // dinp[o, k, i] += dout[o, i] (mean: dout[o, i] / r). ACCUMULATES.
    void (*sum_dim_bwd)(KernelCtx *kc, float *dinp, const float *dout, int64_t outer, int64_t r,
                        int64_t inner);
    void (*mean_dim_bwd)(KernelCtx *kc, float *dinp, const float *dout, int64_t outer, int64_t r,
                         int64_t inner);
    // Softmax over each row, max-subtracted: out, inp (rows, cols).
    void (*softmax_fwd)(KernelCtx *kc, float *out, const float *inp, int64_t rows, int64_t cols);
    // dinp += out * (dout - sum_j dout*out) per row. All (rows, cols). ACCUMULATES.
    void (*softmax_bwd)(KernelCtx *kc, float *dinp, const float *out, const float *dout,
                        int64_t rows, int64_t cols);

    // LayerNorm over the last dim: inp, out (rows, E); weight, bias (E) or NULL (1 and 0);
    // writes mean and rstd = 1/sqrt(biased var + eps), each (rows), for the backward.
    void (*layernorm_fwd)(KernelCtx *kc, float *out, float *mean, float *rstd, const float *inp,
                          const float *weight, const float *bias, int64_t rows, int64_t E,
                          float eps);
    // Gradients of layernorm_fwd from dout (rows, E): dinp (rows, E), dweight, dbias (E), each
    // NULL when not wanted; mean, rstd as the forward wrote them. ACCUMULATES.
    void (*layernorm_bwd)(KernelCtx *kc, float *dinp, float *dweight, float *dbias,
                          const float *dout, const float *inp, const float *mean,
                          const float *rstd, const float *weight, int64_t rows, int64_t E);
    // BatchNorm2d, training mode, as PyTorch's CPU kernel: inp, out (B, C, HW); per channel the
    // batch mean and biased variance normalise; weight, bias (C) or NULL. Updates (C) buffers
    // running_mean = (1-m) running_mean + m mean, running_var = (1-m) running_var +
    // m unbiased var, and writes save_mean, save_invstd = 1/sqrt(biased var + eps) (C) for
    // the backward. B*HW >= 2. momentum in float and eps in double, as PyTorch uses them.
    // out = act(the normalised inp) (BnAct).
    void (*batchnorm_train_fwd)(KernelCtx *kc, float *out, float *save_mean, float *save_invstd,
                                float *running_mean, float *running_var, const float *inp,
                                const float *weight, const float *bias, int64_t B, int64_t C,
                                int64_t HW, float momentum, double eps, BnAct act);
    // BatchNorm2d, eval mode: normalises with running_mean, running_var (C), which it only
    // reads; writes save_mean (= running_mean) and save_invstd (C) for the backward.
    void (*batchnorm_eval_fwd)(KernelCtx *kc, float *out, float *save_mean, float *save_invstd,
                               const float *inp, const float *running_mean,
                               const float *running_var, const float *weight, const float *bias,
                               int64_t B, int64_t C, int64_t HW, double eps, BnAct act);
    // out = act(the normalisation either forward applied), again, from its save_mean and
    // save_invstd (C): the same bits as that forward's out (backward recomputation).
    void (*batchnorm_apply)(KernelCtx *kc, float *out, const float *inp, const float *weight,
                            const float *bias, const float *save_mean, const float *save_invstd,
                            int64_t B, int64_t C, int64_t HW, BnAct act);
    // Gradients of either forward from dout (B, C, HW), the gradient of its activated output:
    // with an act, the kernel forms the normalised output's gradient dout * act'(y) itself, y
    // recomputed from inp as batchnorm_apply does (hence bias). dinp (B, C, HW), dweight,
    // dbias (C), each NULL when not wanted. training: dinp includes the terms through the
    // batch mean and variance. save_mean, save_invstd as the forward wrote them. WRITES every
    // element of dinp; ACCUMULATES into dweight and dbias.
    void (*batchnorm_bwd)(KernelCtx *kc, float *dinp, float *dweight, float *dbias,
                          const float *dout, const float *inp, const float *weight,
                          const float *bias, const float *save_mean, const float *save_invstd,
                          int64_t B, int64_t C, int64_t HW, bool training, BnAct act);
    // END elementwise

    // ---- convolution, pooling, padding, resampling (kernels/cpu/conv.c, pool.c, resample.c) ----
    // BEGIN conv
    // nn.Conv2d (cross-correlation). out (B,OC,OH,OW), x (B,C,H,W), w (OC,C/groups,KH,KW),
    // bias (OC) or NULL. OH = (H + 2 pad_h - dil_h (KH-1) - 1) / stride_h + 1, likewise OW.
    // C and OC are multiples of groups. Allocates its own bounded scratch (im2col chunks).
    void (*conv2d_fwd)(KernelCtx *kc, float *out, const float *x, const float *w,
                       const float *bias, int64_t B, int64_t C, int64_t H, int64_t W, int64_t OC,
                       int64_t OH, int64_t OW, int KH, int KW, Conv2dParams p);
    // Gradients of conv2d_fwd from dout (B,OC,OH,OW): dx (B,C,H,W), dw (like w), dbias (OC),
    // each NULL when not wanted (its work is skipped). x and w: the forward's inputs, never
    // NULL. ACCUMULATES.
    void (*conv2d_bwd)(KernelCtx *kc, float *dx, float *dw, float *dbias, const float *dout,
                       const float *x, const float *w, int64_t B, int64_t C, int64_t H,
                       int64_t W, int64_t OC, int64_t OH, int64_t OW, int KH, int KW,
                       Conv2dParams p);
    // nn.MaxPool2d over n_planes = B*C planes: out (n_planes,OH,OW), x (n_planes,H,W); the
    // caller sizes OH/OW (ceil_mode is only in that size). Window (oh,ow) covers rows
    // oh*stride_h - pad_h + [0, k_h) clipped to the image. idx (n_planes,OH,OW) or NULL: the
    // row-major offset in the plane of the first maximum (a NaN wins, as PyTorch's CPU kernel).
    void (*maxpool2d_fwd)(KernelCtx *kc, float *out, int32_t *idx, const float *x,
                          int64_t n_planes, int64_t H, int64_t W, int64_t OH, int64_t OW,
                          Pool2dParams p);
    // dx[plane][idx] += dout, in row-major output order where several windows share a maximum.
    // dx (n_planes,H,W), dout and idx (n_planes,OH,OW); p: the forward's (a GPU kernel gathers
    // each pixel's gradient from the windows that cover it, which idx alone does not tell).
    // ACCUMULATES.
    void (*maxpool2d_bwd)(KernelCtx *kc, float *dx, const float *dout, const int32_t *idx,
                          int64_t n_planes, int64_t H, int64_t W, int64_t OH, int64_t OW,
                          Pool2dParams p);
    // F.pad with zeros, all pads >= 0: out (n_planes, top+H+bottom, left+W+right),
    // x (n_planes,H,W).
    void (*pad2d_fwd)(KernelCtx *kc, float *out, const float *x, int64_t n_planes, int64_t H,
                      int64_t W, int left, int right, int top, int bottom);
    // dx += the interior of dout. dx (n_planes,H,W), dout as pad2d_fwd's out. ACCUMULATES.
    void (*pad2d_bwd)(KernelCtx *kc, float *dx, const float *dout, int64_t n_planes, int64_t H,
                      int64_t W, int left, int right, int top, int bottom);
    // Nearest upsampling by an integer scale s: out (n_planes,sH,sW), out[i][j] = x[i/s][j/s].
    void (*upsample_nearest2d_fwd)(KernelCtx *kc, float *out, const float *x, int64_t n_planes,
                                   int64_t H, int64_t W, int scale);
    // dx[i][j] += sum of dout over its s x s block. dx (n_planes,H,W). ACCUMULATES.
    void (*upsample_nearest2d_bwd)(KernelCtx *kc, float *dx, const float *dout,
                                   int64_t n_planes, int64_t H, int64_t W, int scale);
    // END conv

    // ---- attention: linear helpers, MHA core, deformable attention (kernels/cpu/attention.c,
    //      kernels/cpu/deform_attn.c) ----
    // BEGIN attention
    // out[m, n] = bias[n]: the bias broadcast over rows, before a beta = 1 GEMM adds x W^T
    // (PyTorch's addmm). out: (M, N), bias: (N).
    void (*bias_rows_fwd)(KernelCtx *kc, float *out, const float *bias, int64_t M, int64_t N);
    // dbias[n] += sum_m dout[m, n] (the bias gradient of addmm). dbias: (N), dout: (M, N).
    // ACCUMULATES.
    void (*bias_rows_bwd)(KernelCtx *kc, float *dbias, const float *dout, int64_t M, int64_t N);
    // The attention of the MHA core, per batch b and head h, head h being the D = E / NH
    // column block h*D of each row-major (L, E) matrix: P = softmax over keys of
    // qs_h k_h^T, with a score taken as -inf where mask[q*Lk + k] != 0, then
    // out_h = P v_h. qs (already scaled), out: (B, Lq, E); k, v: (B, Lk, E); mask: (Lq, Lk)
    // bytes on the kernel's device, or NULL. A row with every key masked is NaN, as in
    // PyTorch. P is the kernel's own scratch, never kept: the backward computes it again.
    void (*attention_fwd)(KernelCtx *kc, float *out, const float *qs, const float *k,
                          const float *v, const uint8_t *mask, int64_t B, int NH, int64_t Lq,
                          int64_t Lk, int64_t E);
    // Its backward from dout (B, Lq, E): P computed again from qs, k and mask exactly as the
    // forward computed it, then with dP = dO v_h^T and dS = P * (dP - rowsum(dP * P)),
    // dv_h += P^T dO, dqs_h += dS k_h, dk_h += dS^T qs_h. dqs like qs; dk, dv like k.
    // ACCUMULATES.
    void (*attention_bwd)(KernelCtx *kc, float *dqs, float *dk, float *dv, const float *dout,
                          const float *qs, const float *k, const float *v, const uint8_t *mask,
                          int64_t B, int NH, int64_t Lq, int64_t Lk, int64_t E);
    // grid_sample(x, grid, bilinear, padding zeros, align_corners=False): x (B, C, H, W),
    // grid (B, Ho, Wo, 2) as (x, y) in [-1, 1] -> out (B, C, Ho, Wo).
    void (*grid_sample_fwd)(KernelCtx *kc, float *out, const float *x, const float *grid,
                            int64_t B, int64_t C, int64_t H, int64_t W, int64_t Ho, int64_t Wo);
    // Its backward: dx (B, C, H, W) and dgrid (B, Ho, Wo, 2) from dout (B, C, Ho, Wo); either
    // gradient may be NULL (not wanted). ACCUMULATES.
    void (*grid_sample_bwd)(KernelCtx *kc, float *dx, float *dgrid, const float *dout,
                            const float *x, const float *grid, int64_t B, int64_t C, int64_t H,
                            int64_t W, int64_t Ho, int64_t Wo);
    // Multi-scale deformable attention (Ultralytics multi_scale_deformable_attn_pytorch):
    // out[b, q, h*D + d] = sum_l sum_p aw[b,q,h,l,p] * bilinear_l(value[b, :, h, d], loc),
    // the bilinear sample being grid_sample's above at grid = 2*loc - 1 on level l.
    // value (B, N, NH, D): the L levels concatenated, level l has shapes[2l] x shapes[2l+1]
    // (H_l x W_l) tokens in row-major order, N = sum of them; loc (B, Lq, NH, L, P, 2) as
    // (x, y) in [0, 1]; aw (B, Lq, NH, L, P) -> out (B, Lq, NH*D). shapes: a host array (2L).
    void (*msdeform_attn_fwd)(KernelCtx *kc, float *out, const float *value, const float *loc,
                              const float *aw, const int64_t *shapes, int64_t B, int64_t N,
                              int NH, int D, int L, int64_t Lq, int P);
    // Its backward: dvalue, dloc, daw (shapes as value, loc, aw) from dout (B, Lq, NH*D); any
    // gradient may be NULL (not wanted). ACCUMULATES.
    void (*msdeform_attn_bwd)(KernelCtx *kc, float *dvalue, float *dloc, float *daw,
                              const float *dout, const float *value, const float *loc,
                              const float *aw, const int64_t *shapes, int64_t B, int64_t N,
                              int NH, int D, int L, int64_t Lq, int P);
    // END attention

    // ---- data movement: permute, concat, slice, gather, embedding (kernels/cpu/layout.c) ----
    // BEGIN layout
    // out = inp with its dims permuted: out.shape[i] = shape[perm[i]]. inp: shape[0..ndim-1],
    // out: the permuted shape (same numel); no overlap. ndim <= 8; shape, perm: host arrays.
    void (*permute_fwd)(KernelCtx *kc, float *out, const float *inp, int ndim,
                        const int64_t *shape, const int *perm);
    // The adjoint: dinp += dout permuted back. shape and perm are the forward's (inp's shape).
    // ACCUMULATES.
    void (*permute_bwd)(KernelCtx *kc, float *dinp, const float *dout, int ndim,
                        const int64_t *shape, const int *perm);
    // `outer` blocks of `inner` contiguous floats: out[o*out_stride + j] = inp[o*in_stride + j]
    // for o < outer, j < inner (strides in floats, >= inner). Concat, split and slice are this
    // with offset base pointers. out and inp may not overlap.
    void (*block_copy)(KernelCtx *kc, float *out, int64_t out_stride, const float *inp,
                       int64_t in_stride, int64_t outer, int64_t inner);
    // The same with out[...] += inp[...]. ACCUMULATES.
    void (*block_add)(KernelCtx *kc, float *out, int64_t out_stride, const float *inp,
                      int64_t in_stride, int64_t outer, int64_t inner);
    // Row gather: inp (outer, n_src, inner) -> out (outer, n_idx, inner),
    // out[o, i, :] = inp[o, idx[o*idx_stride + i], :]. idx on the kernel's device, every entry
    // in [0, n_src) (callers check); idx_stride 0 shares one list of n_idx rows by all `outer`.
    void (*gather_rows_fwd)(KernelCtx *kc, float *out, const float *inp, const int64_t *idx,
                            int64_t idx_stride, int64_t outer, int64_t n_src, int64_t n_idx,
                            int64_t inner);
    // The adjoint, a scatter-add: dinp[o, idx[o*idx_stride + i], :] += dout[o, i, :];
    // repeated indices accumulate, deterministically in index order. ACCUMULATES.
    void (*gather_rows_bwd)(KernelCtx *kc, float *dinp, const float *dout, const int64_t *idx,
                            int64_t idx_stride, int64_t outer, int64_t n_src, int64_t n_idx,
                            int64_t inner);
    // END layout
} Backend;

// "cpu", "cuda" or "fake".
const char *device_name(Device dev);

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
