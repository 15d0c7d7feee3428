/* norm.cu -- LayerNorm over the last dim and BatchNorm2d (train and eval), forward and
 * backward, on the GPU. The statistics are the CPU's (kernels/cpu/norm.c: PyTorch's steps,
 * float and double where it uses them), summed in double by fixed block trees: deterministic.
 * - LayerNorm: a block per row; the weight and bias gradients are column sums over the rows
 *   in two passes (partial sums of RCHUNK rows, then the chunks in order).
 * - BatchNorm: a block per channel for the statistics, then one thread per element applies
 *   y = x * alpha + beta, or the gradient. */
#include <math.h>

#include "kernels/cuda/cuda_util.h"

#define RCHUNK 64 // rows per partial sum of the LayerNorm weight and bias gradients

// ---- LayerNorm ----
// y = (x * rstd + (-rstd * mean)) * w + b, PyTorch 1.13's layer_norm_kernel order.
extern "C" __global__ void layernorm_fwd_kernel(float *out, float *mean, float *rstd,
                                                const float *inp, const float *weight,
                                                const float *bias, int64_t rows, int64_t E,
                                                float eps) {
    int64_t r = blockIdx.x;
    if (r >= rows) return;
    const float *x = inp + r * E;
    float *y = out + r * E;
    double s = 0;
    for (int64_t j = threadIdx.x; j < E; j += CUDA_THREADS)
        s += x[j];
    double mu = block_reduce<double>(s, BLOCK_SUM) / (double)E;
    double v = 0;
    for (int64_t j = threadIdx.x; j < E; j += CUDA_THREADS)
        v += ((double)x[j] - mu) * ((double)x[j] - mu);
    v = block_reduce<double>(v, BLOCK_SUM);
    float m = (float)mu;
    float rs = 1.0f / sqrtf((float)(v / (double)E) + eps);
    float shift = -rs * m;
    for (int64_t j = threadIdx.x; j < E; j += CUDA_THREADS)
        y[j] = (x[j] * rs + shift) * (weight ? weight[j] : 1.0f) + (bias ? bias[j] : 0.0f);
    if (threadIdx.x == 0) {
        mean[r] = m;
        rstd[r] = rs;
    }
}

void layernorm_fwd_cuda(KernelCtx *kc, float *out, float *mean, float *rstd, const float *inp,
                        const float *weight, const float *bias, int64_t rows, int64_t E,
                        float eps) {
    if (rows <= 0 || E <= 0) return;
    layernorm_fwd_kernel<<<grid_of(rows), CUDA_THREADS, 0, stream_of(kc)>>>(
        out, mean, rstd, inp, weight, bias, rows, E, eps);
    CUDA_CHECK(cudaGetLastError());
}

// With xhat = (x - mean) rstd and g = dout * w:
// dx += rstd * (g - mean_j(g) - xhat * mean_j(g * xhat)). A block per row.
extern "C" __global__ void layernorm_bwd_kernel(float *dinp, const float *dout, const float *inp,
                                                const float *mean, const float *rstd,
                                                const float *weight, int64_t rows, int64_t E) {
    int64_t r = blockIdx.x;
    if (r >= rows) return;
    const float *x = inp + r * E, *dy = dout + r * E;
    float m = mean[r], rs = rstd[r];
    double sg = 0, sgx = 0;
    for (int64_t j = threadIdx.x; j < E; j += CUDA_THREADS) {
        float g = dy[j] * (weight ? weight[j] : 1.0f);
        sg += g;
        sgx += (double)g * (double)((x[j] - m) * rs);
    }
    float mg = (float)(block_reduce<double>(sg, BLOCK_SUM) / (double)E);
    float mgx = (float)(block_reduce<double>(sgx, BLOCK_SUM) / (double)E);
    for (int64_t j = threadIdx.x; j < E; j += CUDA_THREADS) {
        float g = dy[j] * (weight ? weight[j] : 1.0f);
        dinp[r * E + j] += rs * (g - mg - (x[j] - m) * rs * mgx);
    }
}

// part[0][c][j], part[1][c][j]: sums over rows [c*RCHUNK, ...) of dout * xhat and of dout.
extern "C" __global__ void layernorm_bwd_wb_part_kernel(double *part, const float *dout,
                                                        const float *inp, const float *mean,
                                                        const float *rstd, int64_t rows, int64_t E,
                                                        int64_t n_chunks) {
    int64_t t = thread_index();
    if (t >= n_chunks * E) return;
    int64_t c = t / E, j = t % E, r1 = MIN(rows, (c + 1) * RCHUNK);
    double aw = 0, ab = 0;
    for (int64_t r = c * RCHUNK; r < r1; r++) {
        float dy = dout[r * E + j];
        aw += (double)dy * (double)((inp[r * E + j] - mean[r]) * rstd[r]);
        ab += dy;
    }
    part[t] = aw;
    part[n_chunks * E + t] = ab;
}

extern "C" __global__ void layernorm_bwd_wb_kernel(float *dweight, float *dbias, const double *part,
                                                   int64_t E, int64_t n_chunks) {
    int64_t j = thread_index();
    if (j >= E) return;
    double aw = 0, ab = 0;
    for (int64_t c = 0; c < n_chunks; c++) {
        aw += part[c * E + j];
        ab += part[(n_chunks + c) * E + j];
    }
    if (dweight) dweight[j] += (float)aw;
    if (dbias) dbias[j] += (float)ab;
}

void layernorm_bwd_cuda(KernelCtx *kc, float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *mean, const float *rstd, const float *weight,
                        int64_t rows, int64_t E) {
    if (rows <= 0 || E <= 0) return;
    cudaStream_t st = stream_of(kc);
    if (dinp) {
        layernorm_bwd_kernel<<<grid_of(rows), CUDA_THREADS, 0, st>>>(dinp, dout, inp, mean, rstd,
                                                                     weight, rows, E);
        CUDA_CHECK(cudaGetLastError());
    }
    if (!dweight && !dbias) return;
    const int64_t n_chunks = CEIL_DIV(rows, (int64_t)RCHUNK);
    double *part = (double *)scratch_alloc(kc, sizeof(double) * (size_t)(2 * n_chunks * E));
    layernorm_bwd_wb_part_kernel<<<blocks_for(n_chunks * E), CUDA_THREADS, 0, st>>>(
        part, dout, inp, mean, rstd, rows, E, n_chunks);
    CUDA_CHECK(cudaGetLastError());
    layernorm_bwd_wb_kernel<<<blocks_for(E), CUDA_THREADS, 0, st>>>(dweight, dbias, part, E,
                                                                    n_chunks);
    CUDA_CHECK(cudaGetLastError());
    scratch_free(kc, part);
}

// ---- BatchNorm2d ----
// act(y) and the gradient of y from dout = the gradient of act(y) (BnAct), with
// elementwise.cu's formulas for relu and silu (silu's from cuda_util.h), so that the fused
// kernels give the unfused pair's results.
static __device__ inline float bn_act_value(float y, BnAct act) {
    if (act == BN_ACT_RELU) return y > 0.0f ? y : 0.0f;
    if (act == BN_ACT_SILU) return silu_value(y);
    return y;
}

static __device__ inline float bn_act_grad(float y, float dout, BnAct act) {
    if (act == BN_ACT_RELU) return y > 0.0f ? dout : 0.0f;
    if (act == BN_ACT_SILU) return silu_grad(y, dout);
    return dout;
}

// The normalised output's alpha (scale) and beta (shift) of channel c, as batchnorm_apply
// computes them.
static __device__ inline void bn_affine(float *alpha, float *beta, int64_t c,
                                        const float *save_mean, const float *save_invstd,
                                        const float *weight, const float *bias) {
    *alpha = save_invstd[c] * (weight ? weight[c] : 1.0f);
    *beta = (bias ? bias[c] : 0.0f) - save_mean[c] * *alpha;
}

// Element t of a (B, C, HW) tensor that is the i-th of channel c's N = B*HW values.
static __device__ inline int64_t bn_at(int64_t i, int64_t c, int64_t C, int64_t HW) {
    return (i / HW * C + c) * HW + i % HW;
}

// Channel c's batch statistics, a block per channel: the mean, the variance's sum of float
// squares in double, then PyTorch's float/double steps for invstd and the running buffers.
extern "C" __global__ void batchnorm_train_fwd_kernel(float *save_mean, float *save_invstd,
                                                      float *running_mean, float *running_var,
                                                      const float *inp, int64_t B, int64_t C,
                                                      int64_t HW, float momentum, double eps) {
    int64_t c = blockIdx.x;
    if (c >= C) return;
    const int64_t N = B * HW;
    double sum = 0;
    for (int64_t i = threadIdx.x; i < N; i += CUDA_THREADS)
        sum += inp[bn_at(i, c, C, HW)];
    float mean = (float)(block_reduce<double>(sum, BLOCK_SUM) / (double)N);
    double var_acc = 0;
    for (int64_t i = threadIdx.x; i < N; i += CUDA_THREADS) {
        float d = inp[bn_at(i, c, C, HW)] - mean;
        var_acc += d * d;
    }
    var_acc = block_reduce<double>(var_acc, BLOCK_SUM);
    if (threadIdx.x != 0) return;
    float var_sum = (float)var_acc;
    float invstd = (float)(1.0 / sqrt((double)(var_sum / (float)N) + eps));
    float unbiased = var_sum / (float)(N - 1);
    running_mean[c] = momentum * mean + (1.0f - momentum) * running_mean[c];
    running_var[c] =
        (float)((double)momentum * unbiased + (double)((1.0f - momentum) * running_var[c]));
    save_mean[c] = mean;
    save_invstd[c] = invstd;
}

// Eval: the running statistics, a thread per channel.
extern "C" __global__ void batchnorm_eval_fwd_kernel(float *save_mean, float *save_invstd,
                                                     const float *running_mean,
                                                     const float *running_var, int64_t C,
                                                     double eps) {
    int64_t c = thread_index();
    if (c >= C) return;
    save_mean[c] = running_mean[c];
    save_invstd[c] = 1.0f / sqrtf(running_var[c] + (float)eps);
}

// y = x * alpha + beta with alpha = invstd * w, beta = b - mean * alpha, all float
// (batch_norm_cpu_collect_linear_and_constant_terms). A thread per element.
extern "C" __global__ void batchnorm_apply_kernel(float *out, const float *inp,
                                                  const float *save_mean, const float *save_invstd,
                                                  const float *weight, const float *bias, int64_t C,
                                                  int64_t HW, int64_t n, BnAct act) {
    int64_t t = thread_index();
    if (t >= n) return;
    float alpha, beta;
    bn_affine(&alpha, &beta, t / HW % C, save_mean, save_invstd, weight, bias);
    out[t] = bn_act_value(inp[t] * alpha + beta, act);
}

static void bn_apply(KernelCtx *kc, float *out, const float *inp, const float *save_mean,
                     const float *save_invstd, const float *weight, const float *bias, int64_t B,
                     int64_t C, int64_t HW, BnAct act) {
    int64_t n = B * C * HW;
    batchnorm_apply_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(
        out, inp, save_mean, save_invstd, weight, bias, C, HW, n, act);
    CUDA_CHECK(cudaGetLastError());
}

void batchnorm_train_fwd_cuda(KernelCtx *kc, float *out, float *save_mean, float *save_invstd,
                              float *running_mean, float *running_var, const float *inp,
                              const float *weight, const float *bias, int64_t B, int64_t C,
                              int64_t HW, float momentum, double eps, BnAct act) {
    CHECK(B * HW > 1, "batchnorm: expected more than 1 value per channel when training, got %lld",
          (long long)(B * HW));
    if (C <= 0) return;
    batchnorm_train_fwd_kernel<<<grid_of(C), CUDA_THREADS, 0, stream_of(kc)>>>(
        save_mean, save_invstd, running_mean, running_var, inp, B, C, HW, momentum, eps);
    CUDA_CHECK(cudaGetLastError());
    bn_apply(kc, out, inp, save_mean, save_invstd, weight, bias, B, C, HW, act);
}

void batchnorm_eval_fwd_cuda(KernelCtx *kc, float *out, float *save_mean, float *save_invstd,
                             const float *inp, const float *running_mean, const float *running_var,
                             const float *weight, const float *bias, int64_t B, int64_t C,
                             int64_t HW, double eps, BnAct act) {
    if (C <= 0) return;
    batchnorm_eval_fwd_kernel<<<blocks_for(C), CUDA_THREADS, 0, stream_of(kc)>>>(
        save_mean, save_invstd, running_mean, running_var, C, eps);
    CUDA_CHECK(cudaGetLastError());
    if (B * HW > 0) bn_apply(kc, out, inp, save_mean, save_invstd, weight, bias, B, C, HW, act);
}

void batchnorm_apply_cuda(KernelCtx *kc, float *out, const float *inp, const float *weight,
                          const float *bias, const float *save_mean, const float *save_invstd,
                          int64_t B, int64_t C, int64_t HW, BnAct act) {
    if (B * C * HW > 0) bn_apply(kc, out, inp, save_mean, save_invstd, weight, bias, B, C, HW, act);
}

// Per channel (a block each): sum = sum dy, dotp = sum (x - mean) dy (float products summed in
// double), dy = bn_act_grad of dout; dweight += dotp * invstd, dbias += sum; coef[c] = sum / N,
// coef[C + c] = dotp invstd^2 / N for the input gradient.
extern "C" __global__ void batchnorm_bwd_stats_kernel(float *coef, float *dweight, float *dbias,
                                                      const float *dout, const float *inp,
                                                      const float *weight, const float *bias,
                                                      const float *save_mean,
                                                      const float *save_invstd, int64_t B,
                                                      int64_t C, int64_t HW, BnAct act) {
    int64_t c = blockIdx.x;
    if (c >= C) return;
    const int64_t N = B * HW;
    float mean = save_mean[c], invstd = save_invstd[c], alpha, beta;
    bn_affine(&alpha, &beta, c, save_mean, save_invstd, weight, bias);
    double sum_acc = 0, dotp_acc = 0;
    for (int64_t i = threadIdx.x; i < N; i += CUDA_THREADS) {
        int64_t at = bn_at(i, c, C, HW);
        float dy = bn_act_grad(inp[at] * alpha + beta, dout[at], act);
        sum_acc += dy;
        dotp_acc += (inp[at] - mean) * dy;
    }
    float sum = (float)block_reduce<double>(sum_acc, BLOCK_SUM),
          dotp = (float)block_reduce<double>(dotp_acc, BLOCK_SUM);
    if (threadIdx.x != 0) return;
    if (dweight) dweight[c] += dotp * invstd;
    if (dbias) dbias[c] += sum;
    coef[c] = sum / (float)N;
    coef[C + c] = dotp * invstd * invstd / (float)N;
}

// train: dx += (dy - grad_mean - (x - mean) * k) * invstd * w; eval: dx += dy * invstd * w.
extern "C" __global__ void batchnorm_bwd_kernel(float *dinp, const float *dout, const float *inp,
                                                const float *weight, const float *bias,
                                                const float *save_mean, const float *save_invstd,
                                                const float *coef, int64_t C, int64_t HW, int64_t n,
                                                bool training, BnAct act) {
    int64_t t = thread_index();
    if (t >= n) return;
    int64_t c = t / HW % C;
    float alpha, beta;
    bn_affine(&alpha, &beta, c, save_mean, save_invstd, weight, bias);
    float dy = bn_act_grad(inp[t] * alpha + beta, dout[t], act);
    if (training) // alpha is w * invstd
        dinp[t] = (dy - coef[c] - (inp[t] - save_mean[c]) * coef[C + c]) * alpha;
    else
        dinp[t] = dy * alpha;
}

void batchnorm_bwd_cuda(KernelCtx *kc, float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, const float *bias,
                        const float *save_mean, const float *save_invstd, int64_t B, int64_t C,
                        int64_t HW, bool training, BnAct act) {
    const int64_t n = B * C * HW;
    if (n <= 0) return;
    cudaStream_t st = stream_of(kc);
    float *coef = (float *)scratch_alloc(kc, sizeof(float) * (size_t)(2 * C));
    batchnorm_bwd_stats_kernel<<<grid_of(C), CUDA_THREADS, 0, st>>>(
        coef, dweight, dbias, dout, inp, weight, bias, save_mean, save_invstd, B, C, HW, act);
    CUDA_CHECK(cudaGetLastError());
    if (dinp) {
        batchnorm_bwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, st>>>(
            dinp, dout, inp, weight, bias, save_mean, save_invstd, coef, C, HW, n, training, act);
        CUDA_CHECK(cudaGetLastError());
    }
    scratch_free(kc, coef);
}
