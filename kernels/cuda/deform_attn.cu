/* deform_attn.cu -- bilinear sampling as PyTorch's grid_sampler_2d (bilinear, zeros padding,
 * align_corners=False) and its two users on the GPU: grid_sample on (B,C,H,W) images and
 * Ultralytics' multi-scale deformable attention on (B,N,NH,D) token maps. The taps of a point
 * are the CPU's float operations in the CPU's order (kernels/cpu/deform_attn.c).
 * Determinism: every output and gradient is summed by one thread in a fixed order, except the
 * deformable attention's value gradient, which many points scatter into: atomicAdd, as
 * PyTorch's CUDA kernel (ms_deform_attn_cuda) does, so its last bits vary from run to run. */
#include <math.h>

#include "kernels/cuda/cuda_util.h"

// Levels of one deformable-attention call (RT-DETR uses 3).
#define MSDEFORM_MAX_LEVELS 16

typedef struct Taps {
    int64_t off[4];   // pixel index y*W + x of the nw, ne, sw, se corners (0 where outside)
    bool in[4];       // corner inside [0,W) x [0,H); outside corners read 0, get no gradient
    float wt[4];      // interpolation weights of nw, ne, sw, se
    float n, s, w, e; // distances from the point to its north, south, west and east pixels
} Taps;

// Grid coordinates (gx, gy) in [-1, 1] -> the taps on an H x W plane: unnormalised with
// (g + 1) * (size / 2) - 0.5, weights from the fractional parts. Bounds are tested on the
// floored floats, so a NaN or huge coordinate is never converted to an integer: it reads
// zeros and its NaN weights make the sample NaN, as in PyTorch.
static __device__ inline Taps bilinear_taps(float gx, float gy, int64_t H, int64_t W) {
    Taps t;
    float x = (gx + 1.0f) * ((float)W / 2) - 0.5f;
    float y = (gy + 1.0f) * ((float)H / 2) - 0.5f;
    float xw = floorf(x), yn = floorf(y);
    t.w = x - xw;
    t.e = 1.0f - t.w;
    t.n = y - yn;
    t.s = 1.0f - t.n;
    t.wt[0] = t.s * t.e;
    t.wt[1] = t.s * t.w;
    t.wt[2] = t.n * t.e;
    t.wt[3] = t.n * t.w;
    bool w_in = xw >= 0.0f && xw < (float)W, e_in = xw >= -1.0f && xw < (float)(W - 1);
    bool n_in = yn >= 0.0f && yn < (float)H, s_in = yn >= -1.0f && yn < (float)(H - 1);
    t.in[0] = n_in && w_in;
    t.in[1] = n_in && e_in;
    t.in[2] = s_in && w_in;
    t.in[3] = s_in && e_in;
    int64_t nw = 0; // any corner inside puts xw in [-1, W-1], yn in [-1, H-1]: safe to convert
    if (t.in[0] || t.in[1] || t.in[2] || t.in[3]) nw = (int64_t)yn * W + (int64_t)xw;
    int64_t off[4] = {nw, nw + 1, nw + W, nw + W + 1};
    for (int k = 0; k < 4; k++)
        t.off[k] = t.in[k] ? off[k] : 0;
    return t;
}

static __device__ inline float tap(const float *plane, int64_t stride, const Taps &t, int k) {
    return t.in[k] ? plane[t.off[k] * stride] : 0.0f;
}

// ---- grid_sample ----
extern "C" __global__ void grid_sample_fwd_kernel(float *out, const float *x, const float *grid,
                                                  int64_t B, int64_t C, int64_t H, int64_t W,
                                                  int64_t P) {
    int64_t t = thread_index();
    if (t >= B * C * P) return;
    int64_t pt = t % P, bc = t / P, b = bc / C;
    const float *g = grid + 2 * (b * P + pt);
    Taps tp = bilinear_taps(g[0], g[1], H, W);
    const float *plane = x + bc * H * W;
    out[t] = tap(plane, 1, tp, 0) * tp.wt[0] + tap(plane, 1, tp, 1) * tp.wt[1] +
             tap(plane, 1, tp, 2) * tp.wt[2] + tap(plane, 1, tp, 3) * tp.wt[3];
}

// dx: a thread per (b, c) plane walks the points in order and scatters into its own plane.
extern "C" __global__ void grid_sample_bwd_kernel(float *dx, const float *dout, const float *grid,
                                                  int64_t B, int64_t C, int64_t H, int64_t W,
                                                  int64_t P) {
    int64_t bc = thread_index();
    if (bc >= B * C) return;
    int64_t b = bc / C;
    float *dplane = dx + bc * H * W;
    for (int64_t pt = 0; pt < P; pt++) {
        const float *g = grid + 2 * (b * P + pt);
        Taps tp = bilinear_taps(g[0], g[1], H, W);
        float go = dout[bc * P + pt];
        for (int k = 0; k < 4; k++)
            if (tp.in[k]) dplane[tp.off[k]] += tp.wt[k] * go;
    }
}

// dgrid: a thread per (b, point) sums the coordinate gradient over the channels in order.
extern "C" __global__ void grid_sample_bwd_grid_kernel(float *dgrid, const float *dout,
                                                       const float *x, const float *grid, int64_t B,
                                                       int64_t C, int64_t H, int64_t W, int64_t P) {
    int64_t t = thread_index();
    if (t >= B * P) return;
    int64_t b = t / P, pt = t % P;
    Taps tp = bilinear_taps(grid[2 * t], grid[2 * t + 1], H, W);
    float gx = 0.0f, gy = 0.0f;
    for (int64_t c = 0; c < C; c++) {
        const float *plane = x + (b * C + c) * H * W;
        float go = dout[(b * C + c) * P + pt];
        float nw = tap(plane, 1, tp, 0), ne = tap(plane, 1, tp, 1);
        float sw = tap(plane, 1, tp, 2), se = tap(plane, 1, tp, 3);
        gx += ((ne - nw) * tp.s + (se - sw) * tp.n) * go;
        gy += ((sw - nw) * tp.e + (se - ne) * tp.w) * go;
    }
    dgrid[2 * t] += gx * ((float)W / 2);
    dgrid[2 * t + 1] += gy * ((float)H / 2);
}

void grid_sample_fwd_cuda(KernelCtx *kc, float *out, const float *x, const float *grid, int64_t B,
                          int64_t C, int64_t H, int64_t W, int64_t Ho, int64_t Wo) {
    const int64_t P = Ho * Wo, n = B * C * P;
    if (n <= 0) return;
    grid_sample_fwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(out, x, grid, B, C, H,
                                                                              W, P);
    CUDA_CHECK(cudaGetLastError());
}

void grid_sample_bwd_cuda(KernelCtx *kc, float *dx, float *dgrid, const float *dout, const float *x,
                          const float *grid, int64_t B, int64_t C, int64_t H, int64_t W, int64_t Ho,
                          int64_t Wo) {
    const int64_t P = Ho * Wo;
    if (B * P <= 0) return;
    if (dx && B * C > 0) {
        grid_sample_bwd_kernel<<<blocks_for(B * C), CUDA_THREADS, 0, stream_of(kc)>>>(
            dx, dout, grid, B, C, H, W, P);
        CUDA_CHECK(cudaGetLastError());
    }
    if (dgrid) {
        grid_sample_bwd_grid_kernel<<<blocks_for(B * P), CUDA_THREADS, 0, stream_of(kc)>>>(
            dgrid, dout, x, grid, B, C, H, W, P);
        CUDA_CHECK(cudaGetLastError());
    }
}

// ---- multi-scale deformable attention ----
typedef struct Levels {
    int L;
    int64_t start[MSDEFORM_MAX_LEVELS]; // first token of level l in value's N
    int64_t H[MSDEFORM_MAX_LEVELS], W[MSDEFORM_MAX_LEVELS];
} Levels;

static Levels levels_of(const int64_t *shapes, int L, int64_t N) {
    CHECK(L >= 1 && L <= MSDEFORM_MAX_LEVELS, "msdeform_attn: %d levels (1..%d supported)", L,
          MSDEFORM_MAX_LEVELS);
    Levels lv = {};
    lv.L = L;
    int64_t n = 0;
    for (int l = 0; l < L; l++) {
        lv.start[l] = n;
        lv.H[l] = shapes[2 * l];
        lv.W[l] = shapes[2 * l + 1];
        n += lv.H[l] * lv.W[l];
    }
    CHECK(n == N, "msdeform_attn: levels hold %lld tokens, value has %lld", (long long)n,
          (long long)N);
    return lv;
}

// A point j = ((b*Lq + q)*NH + h)*L + l)*P + p: its taps on level l (grid = 2 * loc - 1, as the
// PyTorch code computes it before grid_sample) and the offset of its head's row 0 in value.
static __device__ inline Taps point_taps(const Levels &lv, const float *loc, int64_t j, int l,
                                         int64_t b, int64_t h, int64_t N, int NH, int D,
                                         int64_t *base) {
    *base = (b * N + lv.start[l]) * NH * D + h * D;
    return bilinear_taps(2.0f * loc[2 * j] - 1.0f, 2.0f * loc[2 * j + 1] - 1.0f, lv.H[l], lv.W[l]);
}

// out[b, q, h*D + d]: a thread per output element sums its L*P points in order.
extern "C" __global__ void msdeform_attn_fwd_kernel(float *out, const float *value,
                                                    const float *loc, const float *aw, Levels lv,
                                                    int64_t B, int64_t N, int NH, int D, int64_t Lq,
                                                    int P) {
    int64_t t = thread_index();
    if (t >= B * Lq * NH * D) return;
    int64_t d = t % D, i = t / D, h = i % NH, b = i / (Lq * NH); // i = (b*Lq + q)*NH + h
    const int64_t stride = (int64_t)NH * D;
    float o = 0.0f;
    for (int l = 0; l < lv.L; l++)
        for (int p = 0; p < P; p++) {
            int64_t j = (i * lv.L + l) * P + p, base;
            Taps tp = point_taps(lv, loc, j, l, b, h, N, NH, D, &base);
            const float *plane = value + base + d;
            o += (tap(plane, stride, tp, 0) * tp.wt[0] + tap(plane, stride, tp, 1) * tp.wt[1] +
                  tap(plane, stride, tp, 2) * tp.wt[2] + tap(plane, stride, tp, 3) * tp.wt[3]) *
                 aw[j];
        }
    out[t] = o;
}

// dvalue: a thread per (point, channel) adds wt * dout * a into the corners, by atomicAdd.
extern "C" __global__ void msdeform_attn_bwd_value_kernel(float *dvalue, const float *dout,
                                                          const float *loc, const float *aw,
                                                          Levels lv, int64_t B, int64_t N, int NH,
                                                          int D, int64_t Lq, int P) {
    int64_t t = thread_index();
    const int64_t n_points = B * Lq * NH * lv.L * P;
    if (t >= n_points * D) return;
    int64_t d = t % D, j = t / D, i = j / ((int64_t)lv.L * P);
    int l = (int)(j / P % lv.L);
    int64_t h = i % NH, b = i / (Lq * NH), base;
    Taps tp = point_taps(lv, loc, j, l, b, h, N, NH, D, &base);
    float go = dout[i * D + d] * aw[j];
    for (int k = 0; k < 4; k++)
        if (tp.in[k]) atomicAdd(dvalue + base + tp.off[k] * NH * D + d, tp.wt[k] * go);
}

// dloc, daw: a thread per point sums over its D channels in order.
extern "C" __global__ void msdeform_attn_bwd_kernel(float *dloc, float *daw, const float *dout,
                                                    const float *value, const float *loc,
                                                    const float *aw, Levels lv, int64_t B,
                                                    int64_t N, int NH, int D, int64_t Lq, int P) {
    int64_t j = thread_index();
    if (j >= B * Lq * NH * lv.L * P) return;
    int64_t i = j / ((int64_t)lv.L * P), h = i % NH, b = i / (Lq * NH), base;
    int l = (int)(j / P % lv.L);
    Taps tp = point_taps(lv, loc, j, l, b, h, N, NH, D, &base);
    const int64_t stride = (int64_t)NH * D;
    const float *g = dout + i * D;
    float a = aw[j], gx = 0.0f, gy = 0.0f, ga = 0.0f;
    for (int d = 0; d < D; d++) {
        const float *plane = value + base + d;
        float nw = tap(plane, stride, tp, 0), ne = tap(plane, stride, tp, 1);
        float sw = tap(plane, stride, tp, 2), se = tap(plane, stride, tp, 3);
        float go = g[d] * a;
        gx += ((ne - nw) * tp.s + (se - sw) * tp.n) * go;
        gy += ((sw - nw) * tp.e + (se - ne) * tp.w) * go;
        ga += g[d] * (nw * tp.wt[0] + ne * tp.wt[1] + sw * tp.wt[2] + se * tp.wt[3]);
    }
    if (daw) daw[j] += ga;
    if (dloc) { // d(loc) = 2 d(grid): the grid is 2 * loc - 1
        dloc[2 * j] += 2.0f * (gx * ((float)lv.W[l] / 2));
        dloc[2 * j + 1] += 2.0f * (gy * ((float)lv.H[l] / 2));
    }
}

void msdeform_attn_fwd_cuda(KernelCtx *kc, float *out, const float *value, const float *loc,
                            const float *aw, const int64_t *shapes, int64_t B, int64_t N, int NH,
                            int D, int L, int64_t Lq, int P) {
    const Levels lv = levels_of(shapes, L, N);
    const int64_t n = B * Lq * NH * D;
    if (n <= 0) return;
    msdeform_attn_fwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(
        out, value, loc, aw, lv, B, N, NH, D, Lq, P);
    CUDA_CHECK(cudaGetLastError());
}

void msdeform_attn_bwd_cuda(KernelCtx *kc, float *dvalue, float *dloc, float *daw,
                            const float *dout, const float *value, const float *loc,
                            const float *aw, const int64_t *shapes, int64_t B, int64_t N, int NH,
                            int D, int L, int64_t Lq, int P) {
    const Levels lv = levels_of(shapes, L, N);
    const int64_t n_points = B * Lq * NH * L * P;
    if (n_points <= 0) return;
    if (dvalue && D > 0) {
        msdeform_attn_bwd_value_kernel<<<blocks_for(n_points * D), CUDA_THREADS, 0,
                                         stream_of(kc)>>>(dvalue, dout, loc, aw, lv, B, N, NH, D,
                                                          Lq, P);
        CUDA_CHECK(cudaGetLastError());
    }
    if (dloc || daw) {
        msdeform_attn_bwd_kernel<<<blocks_for(n_points), CUDA_THREADS, 0, stream_of(kc)>>>(
            dloc, daw, dout, value, loc, aw, lv, B, N, NH, D, Lq, P);
        CUDA_CHECK(cudaGetLastError());
    }
}
