/* conv_winograd.c -- Winograd F(4x4, 3x3) for dense 3x3 stride-1 convs (Lavin & Gray 2015,
 * "Fast Algorithms for Convolutional Neural Networks"), forward and both gradients.
 *
 * The output is cut into m x m tiles (m = TILE = 4); tile t of image b reads the a x a input
 * window (a = WIN = m + 2) at (ty*m - pad_h, tx*m - pad_w). Per tile and channel pair,
 *   Y = AT [ (G g G^T) (.) (BT d BT^T) ] AT^T    ((.) elementwise, a x a)
 * so with U[xi] (OC, C) = the weights' transforms and V[xi] (C, tiles) = the windows'
 * transforms, each of the a*a positions xi is one GEMM  M[xi] (OC, tiles) = U[xi] @ V[xi],
 * over all images' tiles at once, and AT M AT^T gives the outputs. That is a*a/(m*m)
 * multiply-adds per output and channel pair instead of 9: 2.25 for F(4x4, 3x3).
 *
 * The backward is this computation's exact adjoint, sharing dM[xi] = A dY A^T (A = AT^T):
 *   dV[xi] (C, tiles) = U[xi]^T @ dM[xi],  then dx += B dV BT per window (overlapping windows
 *                                            add up; B = BT^T)
 *   dU[xi] (OC, C)    = dM[xi] @ V[xi]^T summed over tiles,  then dw += G^T dU G.
 *
 * Transforms run on LANES tiles (or input channels, for the weights) at a time: every
 * small-matrix product is a loop of vector updates over the lanes, skipping zero
 * coefficients. Tiles are processed in chunks (CHUNK_FLOATS bounds V and M); transforms are
 * OpenMP loops over channels, each channel's tiles on one thread in a fixed order, and the
 * GEMMs are OpenBLAS's (which splits M and N, never K, across threads), so results do not
 * depend on the thread count.
 *
 * Accuracy: F(4x4, 3x3)'s transforms have entries up to 8 (AT) and 5 (BT), so float32 rounding
 * grows about 100x over im2col's direct sum, to ~1e-5 of the outputs' scale; test_ops_conv
 * states and checks the bounds. */
#include "kernels/cpu/conv_winograd.h"

#include "kernels/base.h"
#include "kernels/cpu/cpu_kernels.h"

#define LANES 16
// Floats of one chunk's V or M (8 MiB each): RT-DETR-L's largest, 256 channels at 40x40,
// batch 2, fits in one chunk.
#define CHUNK_FLOATS ((int64_t)1 << 21)
// Below these, the transforms and 36 small GEMMs cost more than they save and conv.c's
// im2col path stays (measured with tests/bench_ops_conv, 1 thread: 48 channels at 80x80
// 1.5x faster on Winograd; 256 channels at 10x10, 18 tiles, 2x slower). Tiles are
// B * ceil(OH/4) * ceil(OW/4): 20x20 maps at batch 2 (50) qualify, 10x10 (18) do not.
#define MIN_CHANNELS 32
#define MIN_TILES 40
// The transforms' per-channel loops are CPU_VECTOR_CLONES (cpu_kernels.h): LANES = 16 floats
// are one AVX-512 register.
// The 36 GEMMs of a chunk run side by side, one per thread at a time (OpenBLAS's OpenMP build
// runs single-threaded inside a parallel region): GEMMs of a few hundred columns split across
// threads lost more than they gained. Each GEMM's result is the same on any thread.
#define PAR_GEMMS schedule(static)
// Transform work (floats moved) below which a transform loop stays on one thread.
#define PAR_MIN_WORK ((int64_t)1 << 15)

// Output tiles TILE x TILE, input windows WIN x WIN (F(4x4, 3x3)).
#define TILE 4
#define WIN (TILE + 2)
#define WIN2 (WIN * WIN)

// F(4x4, 3x3) on the points 0, +-1, +-2 and infinity (Lavin & Gray, section 4.2):
// V = BT d BT^T (BT: WIN x WIN), U = G g G^T (G: WIN x 3), Y = AT M AT^T (AT: TILE x WIN).
static const float BT[] = {
    4, 0,  -5, 0,  1, 0, //
    0, -4, -4, 1,  1, 0, //
    0, 4,  -4, -1, 1, 0, //
    0, -2, -1, 2,  1, 0, //
    0, 2,  -1, -2, 1, 0, //
    0, 4,  0,  -5, 0, 1,
};
static const float G[] = {
    1.0f / 4,  0,          0,         //
    -1.0f / 6, -1.0f / 6,  -1.0f / 6, //
    -1.0f / 6, 1.0f / 6,   -1.0f / 6, //
    1.0f / 24, 1.0f / 12,  1.0f / 6,  //
    1.0f / 24, -1.0f / 12, 1.0f / 6,  //
    0,         0,          1,
};
static const float AT[] = {
    1, 1, 1,  1, 1,  0, //
    0, 1, -1, 2, -2, 0, //
    0, 1, 1,  4, 4,  0, //
    0, 1, -1, 8, -8, 1,
};

// out (rows, rows, LANES) = M in M^T for in (cols, cols, LANES), lane by lane, where
// M(i, k) = v[i*rs + k*cs] is one of the matrices above or its transpose. Always inlined into
// callers that pass constants, and unrolled, so that zero coefficients vanish and the others
// become immediates: a generic loop over the matrices was half of a small conv's time.
__attribute__((always_inline)) static inline void
transform(const float *v, int rows, int cols, int rs, int cs, const float *in, float *out) {
    float tmp[WIN2 * LANES]; // (rows, cols, LANES) = M in
#pragma GCC unroll 6
    for (int i = 0; i < rows; i++)
#pragma GCC unroll 6
        for (int l = 0; l < cols; l++) {
            float t[LANES] = {0};
#pragma GCC unroll 6
            for (int k = 0; k < cols; k++) {
                const float c = v[i * rs + k * cs];
                if (c == 0.0f) continue;
                const float *s = in + (k * cols + l) * LANES;
#pragma omp simd
                for (int z = 0; z < LANES; z++)
                    t[z] += c * s[z];
            }
            memcpy(tmp + (i * cols + l) * LANES, t, sizeof t);
        }
#pragma GCC unroll 6
    for (int i = 0; i < rows; i++)
#pragma GCC unroll 6
        for (int j = 0; j < rows; j++) {
            float o[LANES] = {0};
#pragma GCC unroll 6
            for (int l = 0; l < cols; l++) {
                const float c = v[j * rs + l * cs];
                if (c == 0.0f) continue;
                const float *s = tmp + (i * cols + l) * LANES;
#pragma omp simd
                for (int z = 0; z < LANES; z++)
                    o[z] += c * s[z];
            }
            memcpy(out + (i * rows + j) * LANES, o, sizeof o);
        }
}

// ---- tiles and their windows ----

typedef struct Plan {
    const WinoShape *s;
    int64_t TH, TW, T; // tiles down, across, in all (B * TH * TW)
    int64_t chunk;     // tiles per chunk, a multiple of LANES
} Plan;

static Plan plan(const WinoShape *s) {
    Plan pl = {s, 0, 0, 0, 0};
    pl.TH = CEIL_DIV(s->OH, TILE), pl.TW = CEIL_DIV(s->OW, TILE), pl.T = s->B * pl.TH * pl.TW;
    // Chunks of equal size (up to LANES): the largest that fits CHUNK_FLOATS, split evenly.
    int64_t max_chunk = MAX(LANES, CHUNK_FLOATS / (WIN2 * MAX(s->C, s->OC)) / LANES * LANES);
    int64_t n_chunks = CEIL_DIV(pl.T, max_chunk);
    pl.chunk = CEIL_DIV(CEIL_DIV(pl.T, n_chunks), LANES) * LANES;
    return pl;
}

// Where tile t's window lies in its image's plane: computed once per chunk, not once per
// channel (the divisions of a tile's coordinates cost as much as moving its window).
typedef struct TileSpot {
    int64_t offset;     // image * img_stride + y0 * cols + x0 (the window's first element)
    int32_t image, y0, x0;
    bool inside;        // the whole window lies within the plane
} TileSpot;

// The windows of one plane per tile: tile t's window is the n x n block at
// (ty*m - off_h, tx*m - off_w) of the plane (rows, cols) of its image, planes img_stride apart.
// spot[t - spot_t0] for the tiles of the current chunk.
typedef struct Windows {
    int64_t rows, cols, img_stride;
    int n, off_h, off_w;
    const TileSpot *spot;
    int64_t spot_t0;
} Windows;

// The spots of tiles t0 .. t0+n-1 (those that exist) into spot.
static void locate_tiles(const Plan *pl, const Windows *win, int64_t t0, int64_t n, TileSpot *spot) {
    const int64_t per_image = pl->TH * pl->TW;
    for (int64_t t = t0; t < MIN(t0 + n, pl->T); t++) {
        const int64_t b = t / per_image, r = t % per_image;
        const int64_t y0 = r / pl->TW * TILE - win->off_h, x0 = r % pl->TW * TILE - win->off_w;
        spot[t - t0] = (TileSpot){
            .offset = b * win->img_stride + y0 * win->cols + x0,
            .image = (int32_t)b, .y0 = (int32_t)y0, .x0 = (int32_t)x0,
            .inside = y0 >= 0 && x0 >= 0 && y0 + win->n <= win->rows && x0 + win->n <= win->cols};
    }
}

// d (n, n, LANES): lane z holds tile t0+z's window of plane, zeros outside the plane and past
// the last tile.
static void gather_windows(const Plan *pl, const Windows *win, const float *plane, int64_t t0,
                           float *d) {
    const int n = win->n;
    for (int z = 0; z < LANES; z++) {
        if (t0 + z >= pl->T) {
            for (int i = 0; i < n * n; i++)
                d[i * LANES + z] = 0.0f;
            continue;
        }
        const TileSpot *sp = &win->spot[t0 + z - win->spot_t0];
        if (sp->inside) {
            const float *p = plane + sp->offset;
            for (int i = 0; i < n; i++)
                for (int j = 0; j < n; j++)
                    d[(i * n + j) * LANES + z] = p[i * win->cols + j];
            continue;
        }
        const float *p = plane + sp->image * win->img_stride;
        for (int i = 0; i < n; i++) {
            const int64_t y = sp->y0 + i;
            const bool row_in = y >= 0 && y < win->rows;
            for (int j = 0; j < n; j++) {
                const int64_t x = sp->x0 + j;
                d[(i * n + j) * LANES + z] =
                    row_in && x >= 0 && x < win->cols ? p[y * win->cols + x] : 0.0f;
            }
        }
    }
}

// The windows of tiles t0 .. t0+LANES-1 of plane = d (n, n, LANES), or += d when accumulate;
// the parts outside the plane and lanes past the last tile are dropped.
static void scatter_windows(const Plan *pl, const Windows *win, float *plane, int64_t t0,
                            const float *d, bool accumulate) {
    const int n = win->n;
    for (int z = 0; z < LANES && t0 + z < pl->T; z++) {
        const TileSpot *sp = &win->spot[t0 + z - win->spot_t0];
        if (sp->inside) {
            float *p = plane + sp->offset;
            for (int i = 0; i < n; i++)
                for (int j = 0; j < n; j++) {
                    float *q = p + i * win->cols + j;
                    *q = accumulate ? *q + d[(i * n + j) * LANES + z] : d[(i * n + j) * LANES + z];
                }
            continue;
        }
        float *p = plane + sp->image * win->img_stride;
        for (int i = 0; i < n; i++) {
            const int64_t y = sp->y0 + i;
            if (y < 0 || y >= win->rows) continue;
            for (int j = 0; j < n; j++) {
                const int64_t x = sp->x0 + j;
                if (x < 0 || x >= win->cols) continue;
                const float v = d[(i * n + j) * LANES + z];
                p[y * win->cols + x] = accumulate ? p[y * win->cols + x] + v : v;
            }
        }
    }
}

// Windows of the input x (a x a, shifted by the padding) and of the output (m x m).
static Windows input_windows(const Plan *pl) {
    const WinoShape *s = pl->s;
    return (Windows){s->H, s->W, s->C * s->H * s->W, WIN, s->pad_h, s->pad_w, NULL, 0};
}

static Windows output_windows(const Plan *pl) {
    const WinoShape *s = pl->s;
    return (Windows){s->OH, s->OW, s->OC * s->OH * s->OW, TILE, 0, 0, NULL, 0};
}

// ---- the transforms and their adjoints; xi = i*WIN + j indexes the WIN x WIN positions ----

// U[xi] (OC, C) = (G w[oc, c] G^T)[xi]; lanes are input channels. U is stored (OC, WIN2, C):
// U[xi] is the matrix at U + xi*C with rows WIN2*C apart, so that one output channel's 36
// transforms land in one 36*C-float block instead of 36 blocks OC*C floats apart (the
// scattered stores, and the adjoint's scattered loads of dU, the same layout, made the weight
// transforms a fifth of a 256-channel conv's time at 20x20).
CPU_VECTOR_CLONES static void transform_weights_row(const WinoShape *s, float *U, const float *w,
                                                int64_t oc) {
    for (int64_t c0 = 0; c0 < s->C; c0 += LANES) {
        float g[9 * LANES], u[WIN2 * LANES];
        const int64_t nz = MIN(LANES, s->C - c0);
        for (int z = 0; z < LANES; z++)
            for (int k = 0; k < 9; k++)
                g[k * LANES + z] = z < nz ? w[(oc * s->C + c0 + z) * 9 + k] : 0.0f;
        transform(G, WIN, 3, 3, 1, g, u); // G g G^T
        for (int xi = 0; xi < WIN2; xi++)
            memcpy(U + (oc * WIN2 + xi) * s->C + c0, u + xi * LANES, sizeof(float) * (size_t)nz);
    }
}

// transform_weights: transform_weights_row over all channels, parallel.
static void transform_weights(KernelCtx *kc, const Plan *pl, float *U, const float *w) {
    const WinoShape *s = pl->s;
#pragma omp parallel for num_threads(kc->n_threads) if (s->OC * s->C * WIN2 > PAR_MIN_WORK)
    for (int64_t oc = 0; oc < s->OC; oc++)
        transform_weights_row(s, U, w, oc);
}

// dw[oc, c] += G^T dU[., oc, c] G, the adjoint of transform_weights.
CPU_VECTOR_CLONES static void adjoint_weights_row(const WinoShape *s, float *dw, const float *dU,
                                              int64_t oc) {
    for (int64_t c0 = 0; c0 < s->C; c0 += LANES) {
        float u[WIN2 * LANES], g[9 * LANES];
        const int64_t nz = MIN(LANES, s->C - c0);
        for (int xi = 0; xi < WIN2; xi++)
            for (int z = 0; z < LANES; z++)
                u[xi * LANES + z] = z < nz ? dU[(oc * WIN2 + xi) * s->C + c0 + z] : 0.0f;
        transform(G, 3, WIN, 1, 3, u, g); // G^T u G
        for (int64_t z = 0; z < nz; z++)
            for (int k = 0; k < 9; k++)
                dw[(oc * s->C + c0 + z) * 9 + k] += g[k * LANES + z];
    }
}

// adjoint_weights: adjoint_weights_row over all channels, parallel.
static void adjoint_weights(KernelCtx *kc, const Plan *pl, float *dw, const float *dU) {
    const WinoShape *s = pl->s;
#pragma omp parallel for num_threads(kc->n_threads) if (s->OC * s->C * WIN2 > PAR_MIN_WORK)
    for (int64_t oc = 0; oc < s->OC; oc++)
        adjoint_weights_row(s, dw, dU, oc);
}

// V[xi] (C, n) = (BT d BT^T)[xi] for the windows d of x of tiles t0 .. t0+n-1.
CPU_VECTOR_CLONES static void transform_inputs_channel(const Plan *pl, const Windows *win, float *V,
                                                   const float *x, int64_t n, int64_t t0,
                                                   int64_t c) {
    const WinoShape *s = pl->s;
    for (int64_t g = 0; g < n; g += LANES) {
        float d[WIN2 * LANES], v[WIN2 * LANES];
        gather_windows(pl, win, x + c * s->H * s->W, t0 + g, d);
        transform(BT, WIN, WIN, WIN, 1, d, v); // BT d BT^T
        for (int xi = 0; xi < WIN2; xi++)
            memcpy(V + (xi * s->C + c) * n + g, v + xi * LANES, sizeof(float) * LANES);
    }
}

// dx += B dV[., c, t] BT over the windows of tiles t0 .. t0+n-1, the adjoint of
// transform_inputs_channel. Channel c's plane only receives channel c's windows, so channels
// run in parallel.
CPU_VECTOR_CLONES static void adjoint_inputs_channel(const Plan *pl, const Windows *win, float *dx,
                                                 const float *dV, int64_t n, int64_t t0,
                                                 int64_t c) {
    const WinoShape *s = pl->s;
    for (int64_t g = 0; g < n; g += LANES) {
        float v[WIN2 * LANES], d[WIN2 * LANES];
        for (int xi = 0; xi < WIN2; xi++)
            memcpy(v + xi * LANES, dV + (xi * s->C + c) * n + g, sizeof(float) * LANES);
        transform(BT, WIN, WIN, 1, WIN, v, d); // B v BT
        scatter_windows(pl, win, dx + c * s->H * s->W, t0 + g, d, true);
    }
}

// out (tiles t0 .. t0+n-1) = AT M[., oc, t] AT^T.
CPU_VECTOR_CLONES static void transform_outputs_channel(const Plan *pl, const Windows *win, float *out,
                                                    const float *M, int64_t n, int64_t t0,
                                                    int64_t oc) {
    const WinoShape *s = pl->s;
    for (int64_t g = 0; g < n; g += LANES) {
        float mv[WIN2 * LANES], y[WIN2 * LANES];
        for (int xi = 0; xi < WIN2; xi++)
            memcpy(mv + xi * LANES, M + (xi * s->OC + oc) * n + g, sizeof(float) * LANES);
        transform(AT, TILE, WIN, WIN, 1, mv, y); // AT m AT^T
        scatter_windows(pl, win, out + oc * s->OH * s->OW, t0 + g, y, false);
    }
}

// dM[xi] (OC, n) = (A dY AT)[xi] for the output windows dY of dout, the adjoint of
// transform_outputs_channel.
CPU_VECTOR_CLONES static void adjoint_outputs_channel(const Plan *pl, const Windows *win, float *dM,
                                                  const float *dout, int64_t n, int64_t t0,
                                                  int64_t oc) {
    const WinoShape *s = pl->s;
    for (int64_t g = 0; g < n; g += LANES) {
        float y[WIN2 * LANES], mv[WIN2 * LANES];
        gather_windows(pl, win, dout + oc * s->OH * s->OW, t0 + g, y);
        transform(AT, WIN, TILE, 1, WIN, y, mv); // A y AT
        for (int xi = 0; xi < WIN2; xi++)
            memcpy(dM + (xi * s->OC + oc) * n + g, mv + xi * LANES, sizeof(float) * LANES);
    }
}

// One of the four per-channel tile transforms above: channel c's windows of tiles
// t0 .. t0+n-1 between the plane(s) of src and dst.
typedef void (*ChannelTransform)(const Plan *pl, const Windows *win, float *dst,
                                 const float *src, int64_t n, int64_t t0, int64_t c);

// fn over channels 0 .. n_channels-1, parallel (each channel writes only its own rows of dst,
// or its own plane), with the windows of the input (x, dx) or of the output (out, dout).
static void over_channels(KernelCtx *kc, const Plan *pl, ChannelTransform fn, bool input_side,
                          float *dst, const float *src, int64_t n, int64_t t0) {
    const WinoShape *s = pl->s;
    const int64_t n_channels = input_side ? s->C : s->OC;
    Windows win = input_side ? input_windows(pl) : output_windows(pl);
    TileSpot *spot = xmalloc(sizeof(TileSpot) * (size_t)n);
    locate_tiles(pl, &win, t0, n, spot);
    win.spot = spot, win.spot_t0 = t0;
#pragma omp parallel for num_threads(kc->n_threads) if (n_channels * n * WIN2 > PAR_MIN_WORK)
    for (int64_t c = 0; c < n_channels; c++)
        fn(pl, &win, dst, src, n, t0, c);
    free(spot);
}

// ---- entry points ----

// The tiles of a chunk of n lanes from tile t0 that exist: the GEMMs run over these columns
// only. The chunk's last lanes (n is a multiple of LANES) hold no tile; what the GEMMs leave
// there is never stored (scatter_windows drops lanes past the last tile). RT-DETR-L's 20x20
// maps at batch 2 have 50 tiles in 64 lanes: the GEMMs did 28 % more work than needed.
static int64_t real_tiles(const Plan *pl, int64_t n, int64_t t0) { return MIN(n, pl->T - t0); }

bool winograd_applies(WinoShape *s, int64_t B, int64_t C, int64_t H, int64_t W, int64_t OC,
                      int64_t OH, int64_t OW, int KH, int KW, Conv2dParams p) {
    if (KH != 3 || KW != 3 || p.stride_h != 1 || p.stride_w != 1 || p.dil_h != 1 || p.dil_w != 1 ||
        p.groups != 1 || p.pad_h > 2 || p.pad_w > 2)
        return false;
    if (C < MIN_CHANNELS || OC < MIN_CHANNELS ||
        B * CEIL_DIV(OH, TILE) * CEIL_DIV(OW, TILE) < MIN_TILES)
        return false;
    *s = (WinoShape){B, C, H, W, OC, OH, OW, p.pad_h, p.pad_w};
    return true;
}

void winograd_conv2d_fwd(KernelCtx *kc, const WinoShape *s, float *out, const float *x,
                         const float *w) {
    const Plan pl = plan(s);
    const int64_t nU = WIN2 * s->OC * s->C;
    float *U = conv_scratch_cpu(nU + WIN2 * (s->C + s->OC) * pl.chunk);
    float *V = U + nU, *M = V + WIN2 * s->C * pl.chunk;
    transform_weights(kc, &pl, U, w);
    for (int64_t t0 = 0; t0 < pl.T; t0 += pl.chunk) {
        const int64_t n = MIN(pl.chunk, CEIL_DIV(pl.T - t0, LANES) * LANES);
        const int64_t real = real_tiles(&pl, n, t0);
        over_channels(kc, &pl, transform_inputs_channel, true, V, x, n, t0);
#pragma omp parallel for num_threads(kc->n_threads) PAR_GEMMS
        for (int64_t xi = 0; xi < WIN2; xi++) // M[xi] = U[xi] @ V[xi]
            gemm_cpu(kc, false, false, s->OC, real, s->C, 1.0f, U + xi * s->C, WIN2 * s->C,
                     V + xi * s->C * n, n, 0.0f, M + xi * s->OC * n, n);
        over_channels(kc, &pl, transform_outputs_channel, false, out, M, n, t0);
    }
}

void winograd_conv2d_bwd(KernelCtx *kc, const WinoShape *s, float *dx, float *dw, const float *dout,
                         const float *x, const float *w) {
    if (!dx && !dw) return;
    const Plan pl = plan(s);
    const int64_t nU = WIN2 * s->OC * s->C;
    float *U = conv_scratch_cpu(2 * nU + WIN2 * (s->C + s->OC) * pl.chunk);
    float *dU = U + nU, *V = dU + nU, *dM = V + WIN2 * s->C * pl.chunk;
    if (dx) transform_weights(kc, &pl, U, w);
    for (int64_t t0 = 0; t0 < pl.T; t0 += pl.chunk) {
        const int64_t n = MIN(pl.chunk, CEIL_DIV(pl.T - t0, LANES) * LANES);
        const int64_t real = real_tiles(&pl, n, t0);
        over_channels(kc, &pl, adjoint_outputs_channel, false, dM, dout, n, t0);
        if (dw) {
            over_channels(kc, &pl, transform_inputs_channel, true, V, x, n, t0);
#pragma omp parallel for num_threads(kc->n_threads) PAR_GEMMS
            for (int64_t xi = 0; xi < WIN2; xi++) // dU[xi] (+)= dM[xi] @ V[xi]^T
                gemm_cpu(kc, false, true, s->OC, s->C, real, 1.0f, dM + xi * s->OC * n, n,
                         V + xi * s->C * n, n, t0 == 0 ? 0.0f : 1.0f, dU + xi * s->C, WIN2 * s->C);
        }
        if (dx) { // V is free again: dV[xi] = U[xi]^T @ dM[xi]
#pragma omp parallel for num_threads(kc->n_threads) PAR_GEMMS
            for (int64_t xi = 0; xi < WIN2; xi++)
                gemm_cpu(kc, true, false, s->C, real, s->OC, 1.0f, U + xi * s->C, WIN2 * s->C,
                         dM + xi * s->OC * n, n, 0.0f, V + xi * s->C * n, n);
            over_channels(kc, &pl, adjoint_inputs_channel, true, dx, V, n, t0);
        }
    }
    if (dw) adjoint_weights(kc, &pl, dw, dU);
}
