/* resample.c -- zero padding (F.pad) and integer-scale nearest upsampling on the CPU, planes
 * in parallel. Both move memory only; backward sums what forward copied. */
#include "kernels/base.h"
#include "kernels/cpu/cpu_kernels.h"

// Element moves below which a loop stays on one thread.
#define PAR_MIN_MOVES ((int64_t)1 << 16)

void pad2d_fwd_cpu(KernelCtx *kc, float *out, const float *x, int64_t n_planes, int64_t H,
                   int64_t W, int left, int right, int top, int bottom) {
    const int64_t OH = top + H + bottom, OW = left + W + right;
#pragma omp parallel for num_threads(kc->n_threads) if (n_planes * OH * OW > PAR_MIN_MOVES)
    for (int64_t pl = 0; pl < n_planes; pl++) {
        const float *xp = x + pl * H * W;
        float *op = out + pl * OH * OW;
        memset(op, 0, sizeof(float) * (size_t)(top * OW + left));
        for (int64_t h = 0; h < H; h++) {
            float *row = op + (top + h) * OW;
            memcpy(row + left, xp + h * W, sizeof(float) * (size_t)W);
            // right pad of this row and left pad of the next one are adjacent
            int64_t gap = h + 1 < H ? right + left : right;
            memset(row + left + W, 0, sizeof(float) * (size_t)gap);
        }
        memset(op + (top + H) * OW, 0, sizeof(float) * (size_t)(bottom * OW));
    }
}

void pad2d_bwd_cpu(KernelCtx *kc, float *dx, const float *dout, int64_t n_planes, int64_t H,
                   int64_t W, int left, int right, int top, int bottom) {
    const int64_t OH = top + H + bottom, OW = left + W + right;
#pragma omp parallel for num_threads(kc->n_threads) if (n_planes * H * W > PAR_MIN_MOVES)
    for (int64_t pl = 0; pl < n_planes; pl++)
        for (int64_t h = 0; h < H; h++) {
            float *d = dx + (pl * H + h) * W;
            const float *s = dout + (pl * OH + top + h) * OW + left;
#pragma omp simd
            for (int64_t w = 0; w < W; w++) d[w] += s[w];
        }
}

// PyTorch computes the source index as floor(o * (float)(1/s)) (exactly o >> 1 for s = 2);
// for integer s that equals o / s for every o below 10^5 (checked for s <= 16).
void upsample_nearest2d_fwd_cpu(KernelCtx *kc, float *out, const float *x, int64_t n_planes,
                                int64_t H, int64_t W, int scale) {
    const int64_t OW = W * scale, moves = n_planes * H * OW * scale;
#pragma omp parallel for num_threads(kc->n_threads) if (moves > PAR_MIN_MOVES)
    for (int64_t ph = 0; ph < n_planes * H; ph++) { // one input row -> scale output rows
        const float *src = x + ph * W;
        float *dst = out + ph * scale * OW;
        for (int64_t w = 0; w < W; w++)
            for (int q = 0; q < scale; q++) dst[w * scale + q] = src[w];
        for (int r = 1; r < scale; r++) memcpy(dst + r * OW, dst, sizeof(float) * (size_t)OW);
    }
}

void upsample_nearest2d_bwd_cpu(KernelCtx *kc, float *dx, const float *dout, int64_t n_planes,
                                int64_t H, int64_t W, int scale) {
    const int64_t OW = W * scale, moves = n_planes * H * OW * scale;
#pragma omp parallel for num_threads(kc->n_threads) if (moves > PAR_MIN_MOVES)
    for (int64_t ph = 0; ph < n_planes * H; ph++) {
        float *d = dx + ph * W;
        const float *src = dout + ph * scale * OW;
        for (int64_t w = 0; w < W; w++) { // PyTorch's order: block rows, then columns
            float s = 0.0f;
            for (int r = 0; r < scale; r++)
                for (int q = 0; q < scale; q++) s += src[r * OW + w * scale + q];
            d[w] += s;
        }
    }
}
