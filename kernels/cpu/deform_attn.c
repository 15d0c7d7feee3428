/* deform_attn.c -- bilinear sampling exactly as PyTorch's CPU grid_sampler_2d (bilinear,
 * padding_mode='zeros', align_corners=False), and its two users: grid_sample on (B,C,H,W)
 * images and Ultralytics' multi-scale deformable attention on (B,N,NH,D) token maps.
 * One helper computes a point's four taps. grid_sample samples channel by channel, each an
 * image plane; deformable attention reads each corner's D channels as one contiguous row of
 * the token map, so that its channel loops vectorise. */
#include <math.h>
#include <stdbool.h>

#include "kernels/base.h"
#include "kernels/cpu/cpu_kernels.h"

// Levels of one deformable-attention call (RT-DETR uses 3; the level offsets live on the stack).
#define MSDEFORM_MAX_LEVELS 16
// Channels per head (RT-DETR: 256 / 8 = 32): the size of zero_row and of a stack row.
#define MSDEFORM_MAX_D 256

typedef struct Taps {
    int64_t off[4];   // pixel index y*W + x of the nw, ne, sw, se corners (0 where outside)
    bool in[4];       // corner inside [0,W) x [0,H); outside corners read 0, get no gradient
    float wt[4];      // interpolation weights of nw, ne, sw, se
    float n, s, w, e; // distances from the point to its north, south, west and east pixels
} Taps;

// Grid coordinates (gx, gy) in [-1, 1] -> the taps on an H x W plane. PyTorch unnormalises
// with (g + 1) * (size / 2) - 0.5 and builds the weights from the fractional parts
// (w = x - floor(x), e = 1 - w, ...); the same float operations run here in the same order.
// Bounds are tested on the floored floats so that a NaN or huge coordinate is never converted
// to an integer: it reads zeros, and its NaN weights make the sample NaN, as in PyTorch.
static inline __attribute__((always_inline)) Taps bilinear_taps(float gx, float gy, int64_t H,
                                                                 int64_t W) {
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
    // Any corner inside puts xw in [-1, W-1] and yn in [-1, H-1]: the conversion is safe.
    int64_t nw = 0;
    if (t.in[0] || t.in[1] || t.in[2] || t.in[3]) nw = (int64_t)yn * W + (int64_t)xw;
    int64_t off[4] = {nw, nw + 1, nw + W, nw + W + 1};
    for (int k = 0; k < 4; k++)
        t.off[k] = t.in[k] ? off[k] : 0;
    return t;
}

static inline float tap(const float *plane, int64_t stride, const Taps *t, int k) {
    return t->in[k] ? plane[t->off[k] * stride] : 0.0f;
}

// One channel's sample; PyTorch's sum order (nw + ne) + sw + se.
static inline float bilinear_sample(const float *plane, int64_t stride, const Taps *t) {
    return tap(plane, stride, t, 0) * t->wt[0] + tap(plane, stride, t, 1) * t->wt[1] +
           tap(plane, stride, t, 2) * t->wt[2] + tap(plane, stride, t, 3) * t->wt[3];
}

// The adjoint of bilinear_sample for one channel, given go = d(sample): scatters wt[k] * go
// into the inside corners of dplane (skipped when NULL) and adds this channel's share of the
// gradient w.r.t. the pixel coordinates (x, y) to *gx, *gy. The caller multiplies the sums by
// d(x)/d(gx) = W/2 and d(y)/d(gy) = H/2, as PyTorch does after its channel loop.
static inline void bilinear_backward(float *dplane, const float *plane, int64_t stride,
                                     const Taps *t, float go, float *gx, float *gy) {
    if (dplane)
        for (int k = 0; k < 4; k++)
            if (t->in[k]) dplane[t->off[k] * stride] += t->wt[k] * go;
    float nw = tap(plane, stride, t, 0), ne = tap(plane, stride, t, 1);
    float sw = tap(plane, stride, t, 2), se = tap(plane, stride, t, 3);
    *gx += ((ne - nw) * t->s + (se - sw) * t->n) * go;
    *gy += ((sw - nw) * t->e + (se - ne) * t->w) * go;
}

// ---- grid_sample ----
void grid_sample_fwd_cpu(KernelCtx *kc, float *out, const float *x, const float *grid, int64_t B,
                         int64_t C, int64_t H, int64_t W, int64_t Ho, int64_t Wo) {
    int64_t HW = H * W, P = Ho * Wo;
#pragma omp parallel for num_threads(kc->n_threads) if (B * P * C > 32768)
    for (int64_t bp = 0; bp < B * P; bp++) {
        int64_t b = bp / P, pt = bp % P;
        Taps t = bilinear_taps(grid[2 * bp], grid[2 * bp + 1], H, W);
        for (int64_t c = 0; c < C; c++)
            out[(b * C + c) * P + pt] = bilinear_sample(x + (b * C + c) * HW, 1, &t);
    }
}

// One task per image: each thread owns dx[b], so the scatter has no races.
void grid_sample_bwd_cpu(KernelCtx *kc, float *dx, float *dgrid, const float *dout, const float *x,
                         const float *grid, int64_t B, int64_t C, int64_t H, int64_t W, int64_t Ho,
                         int64_t Wo) {
    int64_t HW = H * W, P = Ho * Wo;
#pragma omp parallel for num_threads(kc->n_threads) if (B > 1 && B * P * C > 32768)
    for (int64_t b = 0; b < B; b++) {
        for (int64_t pt = 0; pt < P; pt++) {
            const float *g = grid + 2 * (b * P + pt);
            Taps t = bilinear_taps(g[0], g[1], H, W);
            float gx = 0.0f, gy = 0.0f;
            for (int64_t c = 0; c < C; c++) {
                int64_t plane = (b * C + c) * HW;
                bilinear_backward(dx ? dx + plane : NULL, x + plane, 1, &t,
                                  dout[(b * C + c) * P + pt], &gx, &gy);
            }
            if (dgrid) {
                dgrid[2 * (b * P + pt)] += gx * ((float)W / 2);
                dgrid[2 * (b * P + pt) + 1] += gy * ((float)H / 2);
            }
        }
    }
}

// ---- multi-scale deformable attention ----
// start[l] = first token of level l; checks that the levels fill value's N tokens.
static void level_starts(int64_t *start, const int64_t *shapes, int L, int64_t N) {
    CHECK(L >= 1 && L <= MSDEFORM_MAX_LEVELS, "msdeform_attn: %d levels (1..%d supported)", L,
          MSDEFORM_MAX_LEVELS);
    int64_t n = 0;
    for (int l = 0; l < L; l++) {
        start[l] = n;
        n += shapes[2 * l] * shapes[2 * l + 1];
    }
    CHECK(n == N, "msdeform_attn: levels hold %lld tokens, value has %lld", (long long)n,
          (long long)N);
}

// Value rows of a point's four corners in a token map (pixels, NH*D) whose row for pixel 0 is
// `plane`: corner k's D channels are the contiguous floats rows[k][0..D), and an outside corner
// reads zero_row, so the channel loops below run over plain rows and vectorise.
static const float zero_row[MSDEFORM_MAX_D];

static inline void corner_rows(const float *rows[4], const float *plane, int64_t stride,
                               const Taps *t) {
    for (int k = 0; k < 4; k++)
        rows[k] = t->in[k] ? plane + t->off[k] * stride : zero_row;
}

// A head's slice value[b, :, h, :] (N rows of D floats, NH*D apart) copied to N*D contiguous
// floats, and the adjoint: dvalue[b, :, h, :] += the contiguous dslice. In place the rows lie
// 1 KiB apart (RT-DETR: NH*D = 256 floats), so they fall into 1/8 of the cache's sets: a
// head's 2100 rows of value and dvalue (2 x 268 KB at 320 px) thrashed the L2 they would fit
// in. Copied, they do fit: with points spread evenly over the maps (batch 2, 500 queries,
// 2100 tokens, 2 threads) the backward took ~5 ms instead of ~7. RT-DETR's points cluster
// around their reference boxes, so its step gains less (bench_families' deformable-attention
// backward, 6 layers at 320 px: 31 ms before, 28-31 after).
static void copy_head(float *slice, const float *value, int64_t N, int64_t stride, int D) {
    for (int64_t n = 0; n < N; n++)
        memcpy(slice + n * D, value + n * stride, sizeof(float) * (size_t)D);
}

static void add_head(float *dvalue, const float *dslice, int64_t N, int64_t stride, int D) {
    for (int64_t n = 0; n < N; n++) {
        float *dst = dvalue + n * stride;
        const float *src = dslice + n * D;
#pragma omp simd
        for (int d = 0; d < D; d++)
            dst[d] += src[d];
    }
}

// One task per (b, h) = bh: the head's value slice is copied (copy_head), then each query q
// writes its own output row i = (b*Lq + q)*NH + h from loc/aw's (B, Lq, NH) blocks of L*P
// points. The sample is bilinear_sample's sum, in its order, for each channel.
static inline __attribute__((always_inline)) void
msdeform_head_fwd(float *out, const float *slice, const float *loc, const float *aw,
                  const int64_t *shapes, const int64_t *start, int64_t b, int64_t h, int NH,
                  const int D, int L, int64_t Lq, int P) {
    for (int64_t q = 0; q < Lq; q++) {
        const int64_t i = (b * Lq + q) * NH + h;
        float *o = out + i * D;
        for (int d = 0; d < D; d++)
            o[d] = 0.0f;
        for (int l = 0; l < L; l++) {
            const float *plane = slice + start[l] * D;
            for (int p = 0; p < P; p++) {
                int64_t j = (i * L + l) * P + p;
                // grid = 2 * loc - 1, as the PyTorch code computes it before grid_sample
                Taps t = bilinear_taps(2.0f * loc[2 * j] - 1.0f, 2.0f * loc[2 * j + 1] - 1.0f,
                                       shapes[2 * l], shapes[2 * l + 1]);
                const float *c[4];
                corner_rows(c, plane, D, &t);
                float a = aw[j];
#pragma omp simd
                for (int d = 0; d < D; d++)
                    o[d] += (c[0][d] * t.wt[0] + c[1][d] * t.wt[1] + c[2][d] * t.wt[2] +
                             c[3][d] * t.wt[3]) *
                            a;
            }
        }
    }
}

void msdeform_attn_fwd_cpu(KernelCtx *kc, float *out, const float *value, const float *loc,
                           const float *aw, const int64_t *shapes, int64_t B, int64_t N, int NH,
                           int D, int L, int64_t Lq, int P) {
    int64_t start[MSDEFORM_MAX_LEVELS];
    level_starts(start, shapes, L, N);
    CHECK(D <= MSDEFORM_MAX_D, "msdeform_attn: head dim %d (at most %d)", D, MSDEFORM_MAX_D);
    const int64_t stride = (int64_t)NH * D;
#pragma omp parallel num_threads(kc->n_threads) if (B * NH * Lq * L * P * D > 32768)
    {
        float *slice = xmalloc(sizeof(float) * (size_t)MAX(N * D, 1));
#pragma omp for schedule(static)
        for (int64_t bh = 0; bh < B * NH; bh++) {
            const int64_t b = bh / NH, h = bh % NH;
            copy_head(slice, value + b * N * stride + h * D, N, stride, D);
            // D = 32 (every RT-DETR: 256 channels, 8 heads) compiles with the channel count a
            // constant: each channel loop is two whole vectors, no remainder code (the
            // backward's loops ran 2x slower with D a variable).
            if (D == 32)
                msdeform_head_fwd(out, slice, loc, aw, shapes, start, b, h, NH, 32, L, Lq, P);
            else
                msdeform_head_fwd(out, slice, loc, aw, shapes, start, b, h, NH, D, L, Lq, P);
        }
        free(slice);
    }
}

// One head's backward (see msdeform_attn_bwd_cpu) over its copied value slice and its
// gradient dslice (NULL: no dvalue).
static inline __attribute__((always_inline)) void
msdeform_head_bwd(float *dslice, float *dloc, float *daw, const float *dout, const float *slice,
                  const float *loc, const float *aw, const int64_t *shapes, const int64_t *start,
                  int64_t b, int64_t h, int NH, const int D, int L, int64_t Lq, int P) {
    float go[MSDEFORM_MAX_D];
    for (int64_t q = 0; q < Lq; q++) {
        int64_t i = (b * Lq + q) * NH + h;
        const float *g = dout + i * D;
        for (int l = 0; l < L; l++) {
            int64_t Hl = shapes[2 * l], Wl = shapes[2 * l + 1], base = start[l] * D;
            for (int p = 0; p < P; p++) {
                int64_t j = (i * L + l) * P + p;
                Taps t = bilinear_taps(2.0f * loc[2 * j] - 1.0f, 2.0f * loc[2 * j + 1] - 1.0f,
                                       Hl, Wl);
                const float *c[4];
                corner_rows(c, slice + base, D, &t);
                float a = aw[j];
#pragma omp simd
                for (int d = 0; d < D; d++)
                    go[d] = g[d] * a;
                for (int k = 0; dslice && k < 4; k++) {
                    if (!t.in[k]) continue;
                    float *dc = dslice + base + t.off[k] * D, wk = t.wt[k];
#pragma omp simd
                    for (int d = 0; d < D; d++)
                        dc[d] += wk * go[d];
                }
                SumLanes lx = {0}, ly = {0}, la = {0}; // the three sums over the channels
                for (int d0 = 0; d0 < D; d0 += SUM_LANES) {
                    const int n = MIN(SUM_LANES, D - d0);
                    SumLanes nw = load_lanes(c[0] + d0, n), ne = load_lanes(c[1] + d0, n);
                    SumLanes sw = load_lanes(c[2] + d0, n), se = load_lanes(c[3] + d0, n);
                    SumLanes gd = load_lanes(g + d0, n), god = load_lanes(go + d0, n);
                    lx += ((ne - nw) * t.s + (se - sw) * t.n) * god;
                    ly += ((sw - nw) * t.e + (se - ne) * t.w) * god;
                    la += gd * (nw * t.wt[0] + ne * t.wt[1] + sw * t.wt[2] + se * t.wt[3]);
                }
                const float gx = lanes_sum(lx), gy = lanes_sum(ly), ga = lanes_sum(la);
                if (daw) daw[j] += ga;
                // d(loc) = 2 d(grid): the grid is 2 * loc - 1
                if (dloc) {
                    dloc[2 * j] += 2.0f * (gx * ((float)Wl / 2));
                    dloc[2 * j + 1] += 2.0f * (gy * ((float)Hl / 2));
                }
            }
        }
    }
}

// One task per (b, h): it alone touches value[b, :, h, :] (so the dvalue scatter, into a
// contiguous copy that add_head adds back, has no races) and the loc/aw entries of head h of
// batch b. Per point: the sample's gradient is go = g*a (g = dout row), daw = sum_d g*sample,
// and the coordinate gradient is bilinear_backward's, summed over the channels.
void msdeform_attn_bwd_cpu(KernelCtx *kc, float *dvalue, float *dloc, float *daw, const float *dout,
                           const float *value, const float *loc, const float *aw,
                           const int64_t *shapes, int64_t B, int64_t N, int NH, int D, int L,
                           int64_t Lq, int P) {
    int64_t start[MSDEFORM_MAX_LEVELS];
    level_starts(start, shapes, L, N);
    CHECK(D <= MSDEFORM_MAX_D, "msdeform_attn: head dim %d (at most %d)", D, MSDEFORM_MAX_D);
    const int64_t stride = (int64_t)NH * D;
#pragma omp parallel num_threads(kc->n_threads) if (B * NH * Lq * L * P * D > 32768)
    {
        float *slice = xmalloc(sizeof(float) * (size_t)MAX(2 * N * D, 1));
        float *dslice = dvalue ? slice + N * D : NULL;
#pragma omp for schedule(static)
        for (int64_t bh = 0; bh < B * NH; bh++) {
            const int64_t b = bh / NH, h = bh % NH, head = b * N * stride + h * D;
            copy_head(slice, value + head, N, stride, D);
            if (dslice) memset(dslice, 0, sizeof(float) * (size_t)(N * D));
            if (D == 32) // a constant, as in the forward
                msdeform_head_bwd(dslice, dloc, daw, dout, slice, loc, aw, shapes, start, b, h,
                                  NH, 32, L, Lq, P);
            else
                msdeform_head_bwd(dslice, dloc, daw, dout, slice, loc, aw, shapes, start, b, h,
                                  NH, D, L, Lq, P);
            if (dslice) add_head(dvalue + head, dslice, N, stride, D);
        }
        free(slice);
    }
}
