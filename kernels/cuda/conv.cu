/* conv.cu -- nn.Conv2d forward and backward on the GPU, three paths as on the CPU:
 * - depthwise (groups == C == OC): kernels of our own, one thread per output (forward) or
 *   input pixel (dx), a block per filter tap for dw;
 * - pointwise (1x1, stride 1, no padding): the image is already the column matrix, so cuBLAS
 *   directly, batched over the images;
 * - everything else: im2col for a chunk of images into stream-ordered scratch (at most
 *   COL_MAX_FLOATS, at least one image), then per group a strided-batched cuBLAS GEMM
 *   out_b (OCg, OH*OW) = W_g (OCg, Cg*KH*KW) @ col_b; backward dW_g += dout_b @ col_b^T one
 *   image at a time (beta = 1, in image order) and dcol_b = W_g^T @ dout_b, gathered back into
 *   dx by col2im (each input pixel sums the columns that read it, in tap order).
 * Everything is deterministic: no atomics; cuBLAS is deterministic on one stream.
 * Why not cuDNN: im2col + cuBLAS needs no library beyond cuBLAS, keeps the CPU's summation
 * structure for parity, and stays deterministic without choosing algorithms per shape;
 * cuDNN is the first place to look when the rtdetr-l step time says convolutions are slow. */
#include "kernels/cuda/cuda_util.h"

// Column scratch cap in floats (256 MiB): a chunk of images whose columns fit, at least one.
#define COL_MAX_FLOATS ((int64_t)1 << 26)

typedef struct Geom {
    int64_t B, C, H, W, OC, OH, OW;
    int KH, KW;
    Conv2dParams p;
    int64_t Cg, OCg; // channels per group, in and out
    int64_t K;       // rows of the column matrix: Cg*KH*KW
} Geom;

static Geom geom(int64_t B, int64_t C, int64_t H, int64_t W, int64_t OC, int64_t OH, int64_t OW,
                 int KH, int KW, Conv2dParams p) {
    CHECK(p.groups >= 1 && C % p.groups == 0 && OC % p.groups == 0,
          "conv2d: groups %d must divide C %lld and OC %lld", p.groups, (long long)C,
          (long long)OC);
    Geom g = {B, C, H, W, OC, OH, OW, KH, KW, p, C / p.groups, OC / p.groups, 0};
    g.K = g.Cg * KH * KW;
    return g;
}

static bool is_pointwise(const Geom *g) {
    const Conv2dParams *p = &g->p;
    return g->KH == 1 && g->KW == 1 && p->stride_h == 1 && p->stride_w == 1 && p->pad_h == 0 &&
           p->pad_w == 0;
}

static bool is_depthwise(const Geom *g) {
    return g->p.groups == g->C && g->OC == g->C;
}

// The output index o along one dim whose tap k reads input index i (o*stride - pad + k*dil
// == i), or -1 when none does.
static __device__ inline int64_t out_of(int64_t i, int k, int stride, int pad, int dil,
                                        int64_t n_out) {
    int64_t t = i + pad - (int64_t)k * dil;
    if (t < 0 || t % stride != 0) return -1;
    t /= stride;
    return t < n_out ? t : -1;
}

// ---- im2col / col2im over a chunk of nb images and one group ----
// col (nb, K, OH*OW): row r = (c*KH + kh)*KW + kw of image b is channel g*Cg + c of x shifted
// by the tap; 0 where the window reads padding.
extern "C" __global__ void im2col_kernel(float *col, const float *x, Geom g, int64_t b0, int group,
                                         int64_t nb) {
    const int64_t OHW = g.OH * g.OW, n = nb * g.K * OHW;
    int64_t t = thread_index();
    if (t >= n) return;
    int64_t pix = t % OHW, r = t / OHW % g.K, b = b0 + t / (OHW * g.K);
    int64_t c = r / (g.KH * g.KW);
    int kh = (int)(r / g.KW % g.KH), kw = (int)(r % g.KW);
    int64_t ih = pix / g.OW * g.p.stride_h - g.p.pad_h + (int64_t)kh * g.p.dil_h;
    int64_t iw = pix % g.OW * g.p.stride_w - g.p.pad_w + (int64_t)kw * g.p.dil_w;
    bool in = ih >= 0 && ih < g.H && iw >= 0 && iw < g.W;
    col[t] = in ? x[((b * g.C + group * g.Cg + c) * g.H + ih) * g.W + iw] : 0.0f;
}

// dx (the group's channels of images b0..) += the columns that read each pixel, taps in order.
extern "C" __global__ void col2im_kernel(float *dx, const float *dcol, Geom g, int64_t b0,
                                         int group, int64_t nb) {
    const int64_t HW = g.H * g.W, OHW = g.OH * g.OW, n = nb * g.Cg * HW;
    int64_t t = thread_index();
    if (t >= n) return;
    int64_t iw = t % g.W, ih = t / g.W % g.H, c = t / HW % g.Cg, bl = t / (HW * g.Cg);
    const float *dc = dcol + bl * g.K * OHW;
    float acc = dx[((b0 + bl) * g.C + group * g.Cg + c) * HW + ih * g.W + iw];
    for (int kh = 0; kh < g.KH; kh++) {
        int64_t oh = out_of(ih, kh, g.p.stride_h, g.p.pad_h, g.p.dil_h, g.OH);
        if (oh < 0) continue;
        for (int kw = 0; kw < g.KW; kw++) {
            int64_t ow = out_of(iw, kw, g.p.stride_w, g.p.pad_w, g.p.dil_w, g.OW);
            if (ow < 0) continue;
            acc += dc[((c * g.KH + kh) * g.KW + kw) * OHW + oh * g.OW + ow];
        }
    }
    dx[((b0 + bl) * g.C + group * g.Cg + c) * HW + ih * g.W + iw] = acc;
}

// out[b, oc, :] += bias[oc]
extern "C" __global__ void conv2d_bias_fwd_kernel(float *out, const float *bias, int64_t OC,
                                                  int64_t OHW, int64_t n) {
    int64_t t = thread_index();
    if (t >= n) return;
    out[t] += bias[t / OHW % OC];
}

// dbias[oc] += the sum of dout[:, oc, :], a block per channel.
extern "C" __global__ void conv2d_bias_bwd_kernel(float *dbias, const float *dout, int64_t B,
                                                  int64_t OC, int64_t OHW) {
    int64_t oc = blockIdx.x;
    if (oc >= OC) return;
    double s = 0;
    for (int64_t i = threadIdx.x; i < B * OHW; i += CUDA_THREADS)
        s += dout[(i / OHW * OC + oc) * OHW + i % OHW];
    s = block_reduce<double>(s, BLOCK_SUM);
    if (threadIdx.x == 0) dbias[oc] += (float)s;
}

// ---- depthwise ----
// out[b, c, oh, ow] = bias[c] + the window's taps in (kh, kw) order.
extern "C" __global__ void depthwise_conv2d_fwd_kernel(float *out, const float *x, const float *w,
                                                       const float *bias, Geom g) {
    const int64_t n = g.B * g.C * g.OH * g.OW;
    int64_t t = thread_index();
    if (t >= n) return;
    int64_t ow = t % g.OW, oh = t / g.OW % g.OH, bc = t / (g.OH * g.OW), c = bc % g.C;
    const float *xp = x + bc * g.H * g.W, *wc = w + c * g.KH * g.KW;
    float acc = bias ? bias[c] : 0.0f;
    for (int kh = 0; kh < g.KH; kh++) {
        int64_t ih = oh * g.p.stride_h - g.p.pad_h + (int64_t)kh * g.p.dil_h;
        if (ih < 0 || ih >= g.H) continue;
        for (int kw = 0; kw < g.KW; kw++) {
            int64_t iw = ow * g.p.stride_w - g.p.pad_w + (int64_t)kw * g.p.dil_w;
            if (iw < 0 || iw >= g.W) continue;
            acc += wc[kh * g.KW + kw] * xp[ih * g.W + iw];
        }
    }
    out[t] = acc;
}

// dx[b, c, ih, iw] += the taps' w * dout that read the pixel, summed in (kh, kw) order first.
extern "C" __global__ void depthwise_conv2d_bwd_kernel(float *dx, const float *dout, const float *w,
                                                       Geom g) {
    const int64_t n = g.B * g.C * g.H * g.W;
    int64_t t = thread_index();
    if (t >= n) return;
    int64_t iw = t % g.W, ih = t / g.W % g.H, bc = t / (g.H * g.W), c = bc % g.C;
    const float *dp = dout + bc * g.OH * g.OW, *wc = w + c * g.KH * g.KW;
    float acc = 0.0f;
    for (int kh = 0; kh < g.KH; kh++) {
        int64_t oh = out_of(ih, kh, g.p.stride_h, g.p.pad_h, g.p.dil_h, g.OH);
        if (oh < 0) continue;
        for (int kw = 0; kw < g.KW; kw++) {
            int64_t ow = out_of(iw, kw, g.p.stride_w, g.p.pad_w, g.p.dil_w, g.OW);
            if (ow < 0) continue;
            acc += wc[kh * g.KW + kw] * dp[oh * g.OW + ow];
        }
    }
    dx[t] += acc;
}

// dw[c, kh, kw] += sum over images and outputs of dout * the input the tap read; a block per
// (c, tap), the sum in double.
extern "C" __global__ void depthwise_conv2d_dw_kernel(float *dw, const float *dout, const float *x,
                                                      Geom g) {
    const int64_t taps = (int64_t)g.KH * g.KW;
    int64_t ct = blockIdx.x;
    if (ct >= g.C * taps) return;
    int64_t c = ct / taps;
    int kh = (int)(ct % taps / g.KW), kw = (int)(ct % g.KW);
    const int64_t OHW = g.OH * g.OW;
    double s = 0;
    for (int64_t i = threadIdx.x; i < g.B * OHW; i += CUDA_THREADS) {
        int64_t b = i / OHW, oh = i % OHW / g.OW, ow = i % g.OW;
        int64_t ih = oh * g.p.stride_h - g.p.pad_h + (int64_t)kh * g.p.dil_h;
        int64_t iw = ow * g.p.stride_w - g.p.pad_w + (int64_t)kw * g.p.dil_w;
        if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) continue;
        s += dout[(b * g.C + c) * OHW + oh * g.OW + ow] * x[((b * g.C + c) * g.H + ih) * g.W + iw];
    }
    s = block_reduce<double>(s, BLOCK_SUM);
    if (threadIdx.x == 0) dw[ct] += (float)s;
}

// ---- entry points ----
// Images per im2col chunk.
static int64_t chunk_images(const Geom *g) {
    int64_t per = g->K * g->OH * g->OW;
    return MAX((int64_t)1, MIN(g->B, COL_MAX_FLOATS / MAX(per, (int64_t)1)));
}

static void im2col(KernelCtx *kc, const Geom *g, float *col, const float *x, int64_t b0, int grp,
                   int64_t nb) {
    int64_t n = nb * g->K * g->OH * g->OW;
    if (n <= 0) return;
    im2col_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(col, x, *g, b0, grp, nb);
    CUDA_CHECK(cudaGetLastError());
}

void conv2d_fwd_cuda(KernelCtx *kc, float *out, const float *x, const float *w, const float *bias,
                     int64_t B, int64_t C, int64_t H, int64_t W, int64_t OC, int64_t OH, int64_t OW,
                     int KH, int KW, Conv2dParams p) {
    const Geom g = geom(B, C, H, W, OC, OH, OW, KH, KW, p);
    const int64_t HW = H * W, OHW = OH * OW;
    if (B * OC * OHW <= 0) return;
    if (is_depthwise(&g)) {
        depthwise_conv2d_fwd_kernel<<<blocks_for(B * OC * OHW), CUDA_THREADS, 0, stream_of(kc)>>>(
            out, x, w, bias, g);
        CUDA_CHECK(cudaGetLastError());
        return;
    }
    if (is_pointwise(&g)) {
        for (int grp = 0; grp < p.groups; grp++)
            gemm_batched_cuda(kc, B, false, false, g.OCg, HW, g.Cg, 1.0f, w + grp * g.OCg * g.K,
                              g.K, 0, x + grp * g.Cg * HW, HW, C * HW, 0.0f,
                              out + grp * g.OCg * OHW, OHW, OC * OHW);
    } else {
        const int64_t nb_max = chunk_images(&g);
        float *col = (float *)scratch_alloc(kc, sizeof(float) * (size_t)(nb_max * g.K * OHW));
        for (int64_t b0 = 0; b0 < B; b0 += nb_max) {
            const int64_t nb = MIN(nb_max, B - b0);
            for (int grp = 0; grp < p.groups; grp++) {
                im2col(kc, &g, col, x, b0, grp, nb);
                gemm_batched_cuda(kc, nb, false, false, g.OCg, OHW, g.K, 1.0f,
                                  w + grp * g.OCg * g.K, g.K, 0, col, OHW, g.K * OHW, 0.0f,
                                  out + (b0 * OC + grp * g.OCg) * OHW, OHW, OC * OHW);
            }
        }
        scratch_free(kc, col);
    }
    if (!bias) return;
    conv2d_bias_fwd_kernel<<<blocks_for(B * OC * OHW), CUDA_THREADS, 0, stream_of(kc)>>>(
        out, bias, OC, OHW, B * OC * OHW);
    CUDA_CHECK(cudaGetLastError());
}

void conv2d_bwd_cuda(KernelCtx *kc, float *dx, float *dw, float *dbias, const float *dout,
                     const float *x, const float *w, int64_t B, int64_t C, int64_t H, int64_t W,
                     int64_t OC, int64_t OH, int64_t OW, int KH, int KW, Conv2dParams p) {
    const Geom g = geom(B, C, H, W, OC, OH, OW, KH, KW, p);
    const int64_t HW = H * W, OHW = OH * OW;
    cudaStream_t st = stream_of(kc);
    if (dbias && OC > 0) {
        conv2d_bias_bwd_kernel<<<grid_of(OC), CUDA_THREADS, 0, st>>>(dbias, dout, B, OC, OHW);
        CUDA_CHECK(cudaGetLastError());
    }
    if ((!dx && !dw) || B * C * HW <= 0 || OC * OHW <= 0) return;
    if (is_depthwise(&g)) {
        if (dx) {
            depthwise_conv2d_bwd_kernel<<<blocks_for(B * C * HW), CUDA_THREADS, 0, st>>>(dx, dout,
                                                                                         w, g);
            CUDA_CHECK(cudaGetLastError());
        }
        if (dw) {
            depthwise_conv2d_dw_kernel<<<grid_of(C * KH * KW), CUDA_THREADS, 0, st>>>(dw, dout, x,
                                                                                      g);
            CUDA_CHECK(cudaGetLastError());
        }
        return;
    }
    if (is_pointwise(&g)) {
        for (int grp = 0; grp < p.groups; grp++) {
            const float *wg = w + grp * g.OCg * g.K;
            for (int64_t b = 0; dw && b < B; b++) // dW_g += dout_b,g @ x_b,g^T, images in order
                gemm_cuda(kc, false, true, g.OCg, g.Cg, HW, 1.0f,
                          dout + (b * OC + grp * g.OCg) * OHW, HW, x + (b * C + grp * g.Cg) * HW,
                          HW, 1.0f, dw + grp * g.OCg * g.K, g.K);
            if (dx) // dx_b,g += W_g^T @ dout_b,g
                gemm_batched_cuda(kc, B, true, false, g.Cg, HW, g.OCg, 1.0f, wg, g.K, 0,
                                  dout + grp * g.OCg * OHW, HW, OC * OHW, 1.0f,
                                  dx + grp * g.Cg * HW, HW, C * HW);
        }
        return;
    }
    const int64_t nb_max = chunk_images(&g);
    float *col = (float *)scratch_alloc(kc, sizeof(float) * (size_t)(nb_max * g.K * OHW));
    for (int64_t b0 = 0; b0 < B; b0 += nb_max) {
        const int64_t nb = MIN(nb_max, B - b0);
        for (int grp = 0; grp < p.groups; grp++) {
            const float *wg = w + grp * g.OCg * g.K;
            const float *dg = dout + (b0 * OC + grp * g.OCg) * OHW;
            if (dw) {
                im2col(kc, &g, col, x, b0, grp, nb);
                for (int64_t b = 0; b < nb; b++)
                    gemm_cuda(kc, false, true, g.OCg, g.K, OHW, 1.0f, dg + b * OC * OHW, OHW,
                              col + b * g.K * OHW, OHW, 1.0f, dw + grp * g.OCg * g.K, g.K);
            }
            if (dx) { // the columns are free again: dcol_b = W_g^T @ dout_b, then col2im
                gemm_batched_cuda(kc, nb, true, false, g.K, OHW, g.OCg, 1.0f, wg, g.K, 0, dg, OHW,
                                  OC * OHW, 0.0f, col, OHW, g.K * OHW);
                col2im_kernel<<<blocks_for(nb * g.Cg * HW), CUDA_THREADS, 0, st>>>(dx, col, g, b0,
                                                                                   grp, nb);
                CUDA_CHECK(cudaGetLastError());
            }
        }
    }
    scratch_free(kc, col);
}
