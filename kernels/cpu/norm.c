/* norm.c -- LayerNorm over the last dim and BatchNorm2d (train and eval), forward and
 * backward. Statistics accumulate in double. BatchNorm mirrors PyTorch's CPU kernels
 * (batch_norm_kernel.cpp, Normalization.cpp) step by step, float and double where they use
 * them, so that the running buffers track PyTorch's to the last bits. */
#include "kernels/cpu/cpu_kernels.h"

#include <math.h>

#include "kernels/base.h" // MIN, CEIL_DIV

#define PAR_MIN 32768
// Columns of a LayerNorm weight gradient one task accumulates (over all rows).
#define COL_TILE 64

// ---- LayerNorm ----
// y = (x * rstd + (-rstd * mean)) * w + b: PyTorch 1.13's layer_norm_kernel order.
void layernorm_fwd_cpu(KernelCtx *kc, float *out, float *mean, float *rstd, const float *inp,
                       const float *weight, const float *bias, int64_t rows, int64_t E, float eps) {
#pragma omp parallel for num_threads(kc->n_threads) if (rows * E > PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *x = inp + r * E;
        float *y = out + r * E;
        double s = 0, v = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < E; j++)
            s += x[j];
        double mu = s / (double)E;
#pragma omp simd reduction(+ : v)
        for (int64_t j = 0; j < E; j++)
            v += ((double)x[j] - mu) * ((double)x[j] - mu);
        float m = (float)mu;
        float rs = 1.0f / sqrtf((float)(v / (double)E) + eps);
        float shift = -rs * m;
        if (weight && bias) {
#pragma omp simd
            for (int64_t j = 0; j < E; j++)
                y[j] = (x[j] * rs + shift) * weight[j] + bias[j];
        } else {
            for (int64_t j = 0; j < E; j++)
                y[j] = (x[j] * rs + shift) * (weight ? weight[j] : 1.0f) + (bias ? bias[j] : 0.0f);
        }
        mean[r] = m;
        rstd[r] = rs;
    }
}

// g[j] = dy[j] * w[j] (w NULL: 1), n <= COL_TILE.
static void ln_dy_times_w(float *g, const float *dy, const float *w, int64_t n) {
    if (w) {
#pragma omp simd
        for (int64_t j = 0; j < n; j++)
            g[j] = dy[j] * w[j];
    } else {
        for (int64_t j = 0; j < n; j++)
            g[j] = dy[j];
    }
}

// With xhat = (x - mean) rstd and g = dout * w:
// dx = rstd * (g - mean_j(g) - xhat * mean_j(g * xhat)), dw = sum_rows dout * xhat,
// db = sum_rows dout.
void layernorm_bwd_cpu(KernelCtx *kc, float *dinp, float *dweight, float *dbias, const float *dout,
                       const float *inp, const float *mean, const float *rstd, const float *weight,
                       int64_t rows, int64_t E) {
    if (dinp) {
#pragma omp parallel for num_threads(kc->n_threads) if (rows * E > PAR_MIN)
        for (int64_t r = 0; r < rows; r++) {
            const float *x = inp + r * E, *dy = dout + r * E;
            float *dx = dinp + r * E;
            float m = mean[r], rs = rstd[r];
            // g = dy * w is formed one stack tile at a time (for the sums, then again for
            // dx), so that the loops vectorise without a branch on w.
            double sg = 0, sgx = 0;
            for (int64_t j0 = 0; j0 < E; j0 += COL_TILE) {
                int64_t n = MIN(COL_TILE, E - j0);
                float g[COL_TILE];
                ln_dy_times_w(g, dy + j0, weight ? weight + j0 : NULL, n);
#pragma omp simd reduction(+ : sg, sgx)
                for (int64_t j = 0; j < n; j++) {
                    sg += g[j];
                    sgx += (double)g[j] * (double)((x[j0 + j] - m) * rs);
                }
            }
            float mg = (float)(sg / (double)E), mgx = (float)(sgx / (double)E);
            for (int64_t j0 = 0; j0 < E; j0 += COL_TILE) {
                int64_t n = MIN(COL_TILE, E - j0);
                float g[COL_TILE];
                ln_dy_times_w(g, dy + j0, weight ? weight + j0 : NULL, n);
#pragma omp simd
                for (int64_t j = 0; j < n; j++)
                    dx[j0 + j] += rs * (g[j] - mg - (x[j0 + j] - m) * rs * mgx);
            }
        }
    }
    if (!dweight && !dbias) return;
    int64_t n_tiles = CEIL_DIV(E, COL_TILE);
#pragma omp parallel for num_threads(kc->n_threads) if (rows * E > PAR_MIN)
    for (int64_t t = 0; t < n_tiles; t++) {
        int64_t j0 = t * COL_TILE, m = MIN(COL_TILE, E - j0);
        double aw[COL_TILE] = {0}, ab[COL_TILE] = {0};
        for (int64_t r = 0; r < rows; r++) {
            const float *x = inp + r * E + j0, *dy = dout + r * E + j0;
            float mu = mean[r], rs = rstd[r];
#pragma omp simd
            for (int64_t j = 0; j < m; j++) {
                aw[j] += (double)dy[j] * (double)((x[j] - mu) * rs);
                ab[j] += dy[j];
            }
        }
        for (int64_t j = 0; j < m; j++) {
            if (dweight) dweight[j0 + j] += (float)aw[j];
            if (dbias) dbias[j0 + j] += (float)ab[j];
        }
    }
}

// ---- BatchNorm2d ----
// Channel c's normalised output y = x * alpha + beta: alpha = invstd * w, beta = b - mean *
// alpha, all float (batch_norm_cpu_collect_linear_and_constant_terms). The forwards apply it;
// the backward recomputes y with it, and alpha is also dx's w * invstd.
static void bn_affine(float *alpha, float *beta, const float *weight, const float *bias,
                      int64_t c, float mean, float invstd) {
    *alpha = invstd * (weight ? weight[c] : 1.0f);
    *beta = (bias ? bias[c] : 0.0f) - mean * *alpha;
}

// out = act(y) (BnAct) for channel c, each act a loop of its own so that every loop
// vectorises.
static void bn_apply(float *out, const float *inp, const float *weight, const float *bias,
                     int64_t B, int64_t C, int64_t HW, int64_t c, float mean, float invstd,
                     BnAct act) {
    float alpha, beta;
    bn_affine(&alpha, &beta, weight, bias, c, mean, invstd);
    for (int64_t b = 0; b < B; b++) {
        const float *x = inp + (b * C + c) * HW;
        float *y = out + (b * C + c) * HW;
        if (act == BN_ACT_RELU) {
#pragma omp simd
            for (int64_t i = 0; i < HW; i++) {
                float v = x[i] * alpha + beta;
                y[i] = v > 0.0f ? v : 0.0f;
            }
        } else if (act == BN_ACT_SILU) {
#pragma omp simd
            for (int64_t i = 0; i < HW; i++)
                y[i] = silu_value(x[i] * alpha + beta);
        } else {
#pragma omp simd
            for (int64_t i = 0; i < HW; i++)
                y[i] = x[i] * alpha + beta;
        }
    }
}

// One parallel task per channel (batch_norm_cpu_collect_stats_contiguous_impl): the channel's
// B*HW values are read three times while they sit in cache. PyTorch sums in double in index
// order; our double sums run in vector lanes, which moves them by ~1e-16 relative: the float
// mean and variance almost never change by even an ulp.
void batchnorm_train_fwd_cpu(KernelCtx *kc, float *out, float *save_mean, float *save_invstd,
                             float *running_mean, float *running_var, const float *inp,
                             const float *weight, const float *bias, int64_t B, int64_t C,
                             int64_t HW, float momentum, double eps, BnAct act) {
    const int64_t N = B * HW;
    CHECK(N > 1, "batchnorm: expected more than 1 value per channel when training, got %lld",
          (long long)N);
#pragma omp parallel for num_threads(kc->n_threads) if (B * C * HW > PAR_MIN)
    for (int64_t c = 0; c < C; c++) {
        double sum = 0;
        for (int64_t b = 0; b < B; b++) {
            const float *x = inp + (b * C + c) * HW;
#pragma omp simd reduction(+ : sum)
            for (int64_t i = 0; i < HW; i++)
                sum += x[i];
        }
        float mean = (float)(sum / (double)N);
        double var_acc = 0;
        for (int64_t b = 0; b < B; b++) {
            const float *x = inp + (b * C + c) * HW;
#pragma omp simd reduction(+ : var_acc)
            for (int64_t i = 0; i < HW; i++) {
                float d = x[i] - mean;
                var_acc += d * d;
            }
        }
        // batch_norm_cpu_update_stats_template: var_sum is stored as float and divided as
        // float; the running mean updates in float, the running var's first term in double.
        float var_sum = (float)var_acc;
        float invstd = (float)(1.0 / sqrt((double)(var_sum / (float)N) + eps));
        float unbiased = var_sum / (float)(N - 1);
        running_mean[c] = momentum * mean + (1.0f - momentum) * running_mean[c];
        running_var[c] =
            (float)((double)momentum * unbiased + (double)((1.0f - momentum) * running_var[c]));
        save_mean[c] = mean;
        save_invstd[c] = invstd;
        bn_apply(out, inp, weight, bias, B, C, HW, c, mean, invstd, act);
    }
}

void batchnorm_eval_fwd_cpu(KernelCtx *kc, float *out, float *save_mean, float *save_invstd,
                            const float *inp, const float *running_mean, const float *running_var,
                            const float *weight, const float *bias, int64_t B, int64_t C,
                            int64_t HW, double eps, BnAct act) {
#pragma omp parallel for num_threads(kc->n_threads) if (B * C * HW > PAR_MIN)
    for (int64_t c = 0; c < C; c++) {
        float invstd = 1.0f / sqrtf(running_var[c] + (float)eps);
        save_mean[c] = running_mean[c];
        save_invstd[c] = invstd;
        bn_apply(out, inp, weight, bias, B, C, HW, c, running_mean[c], invstd, act);
    }
}

void batchnorm_apply_cpu(KernelCtx *kc, float *out, const float *inp, const float *weight,
                         const float *bias, const float *save_mean, const float *save_invstd,
                         int64_t B, int64_t C, int64_t HW, BnAct act) {
#pragma omp parallel for num_threads(kc->n_threads) if (B * C * HW > PAR_MIN)
    for (int64_t c = 0; c < C; c++)
        bn_apply(out, inp, weight, bias, B, C, HW, c, save_mean[c], save_invstd[c], act);
}

// g (HW) = the gradient of the normalised output y = x * alpha + beta from dout, the gradient
// of act(y) for act ReLU or SiLU: relu_bwd's or silu_bwd's formula on y computed as bn_apply
// computes it. The backward below forms it twice per element (for the sums, then for dx)
// instead of storing it.
static inline __attribute__((always_inline)) void
bn_act_grad(float *g, const float *x, const float *dout, float alpha, float beta, BnAct act,
            int64_t HW) {
    if (act == BN_ACT_RELU) {
#pragma omp simd
        for (int64_t i = 0; i < HW; i++) {
            float d = dout[i];
            g[i] = x[i] * alpha + beta > 0.0f ? d : 0.0f;
        }
    } else {
#pragma omp simd
        for (int64_t i = 0; i < HW; i++)
            g[i] = silu_grad(x[i] * alpha + beta, dout[i]);
    }
}

// Elements of the stack tile the fused backward forms its gradient in.
#define BN_TILE 512

// batch_norm_cpu_backward_contiguous_impl: per channel sum = sum dy, dotp = sum (x - mean) dy;
// train: dx = (dy - sum/N - (x - mean) * dotp invstd^2 / N) * invstd * w; eval: dy * invstd * w.
// With an act, dy is bn_act_grad's, formed tile by tile on the stack.
void batchnorm_bwd_cpu(KernelCtx *kc, float *dinp, float *dweight, float *dbias, const float *dout,
                       const float *inp, const float *weight, const float *bias,
                       const float *save_mean, const float *save_invstd, int64_t B, int64_t C,
                       int64_t HW, bool training, BnAct act) {
    const int64_t N = B * HW;
#pragma omp parallel for num_threads(kc->n_threads) if (B * C * HW > PAR_MIN)
    for (int64_t c = 0; c < C; c++) {
        float mean = save_mean[c], invstd = save_invstd[c], alpha, beta;
        bn_affine(&alpha, &beta, weight, bias, c, mean, invstd);
        float tile[BN_TILE];
        double sum_acc = 0, dotp_acc = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t i0 = 0; i0 < HW; i0 += BN_TILE) {
                const int64_t at = (b * C + c) * HW + i0, m = MIN(BN_TILE, HW - i0);
                const float *x = inp + at, *dy = dout + at;
                if (act != BN_ACT_NONE) {
                    bn_act_grad(tile, x, dy, alpha, beta, act, m);
                    dy = tile;
                }
#pragma omp simd reduction(+ : sum_acc, dotp_acc)
                for (int64_t i = 0; i < m; i++) {
                    sum_acc += dy[i];
                    dotp_acc += (x[i] - mean) * dy[i];
                }
            }
        float sum = (float)sum_acc, dotp = (float)dotp_acc;
        if (dinp) {
            float k = dotp * invstd * invstd / (float)N, grad_mean = sum / (float)N;
            for (int64_t b = 0; b < B; b++)
                for (int64_t i0 = 0; i0 < HW; i0 += BN_TILE) {
                    const int64_t at = (b * C + c) * HW + i0, m = MIN(BN_TILE, HW - i0);
                    const float *x = inp + at, *dy = dout + at;
                    float *dx = dinp + at;
                    if (act != BN_ACT_NONE) {
                        bn_act_grad(tile, x, dy, alpha, beta, act, m);
                        dy = tile;
                    }
                    if (training) {
#pragma omp simd
                        for (int64_t i = 0; i < m; i++)
                            dx[i] = (dy[i] - grad_mean - (x[i] - mean) * k) * alpha;
                    } else {
#pragma omp simd
                        for (int64_t i = 0; i < m; i++)
                            dx[i] = dy[i] * alpha;
                    }
                }
        }
        if (dweight) dweight[c] += dotp * invstd;
        if (dbias) dbias[c] += sum;
    }
}
