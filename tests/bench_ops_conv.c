/* bench_ops_conv.c -- timings of the conv-family kernels on RT-DETR-L's shapes at 320 px,
 * batch 2, on 1 and 2 threads (median of 5 after one warm-up). Every conv of the backbone and
 * encoder is listed with how often it occurs, so the weighted total is the conv time of one
 * training step. Backward computes dx and dw (no dx for stem1, whose input is the image).
 * The dense 3x3 stride-1 rows are timed again with conv.c's Winograd path switched off
 * (conv2d_cpu_use_winograd), so the two algorithms compare in one time window.
 * Prints timings only; never fails. */
#include <time.h>

#include "kernels/backend.h"
#include "kernels/cpu/conv_winograd.h"

#include "kernels/base.h"

#define REPS 5
#define BATCH 2

typedef struct ConvRow {
    const char *name;
    int64_t C, OC, H; // input channels, output channels, input size (square)
    int K, S, pad, groups, count;
} ConvRow;

// rtdetr.md §1.1 and §2.2-2.6 at 320 px: strides 4/8/16/32 are 80/40/20/10 px.
static const ConvRow rows[] = {
    {"stem1 3x3 s2", 3, 32, 320, 3, 2, 1, 1, 1},
    {"stem2a 2x2", 32, 16, 161, 2, 1, 0, 1, 1},
    {"stem2b 2x2", 16, 32, 161, 2, 1, 0, 1, 1},
    {"stem3 3x3 s2", 64, 32, 160, 3, 2, 1, 1, 1},
    {"stem4 1x1", 32, 48, 80, 1, 1, 0, 1, 1},
    {"hg1.m 3x3", 48, 48, 80, 3, 1, 1, 1, 6},
    {"hg1.sc 1x1", 336, 64, 80, 1, 1, 0, 1, 1},
    {"hg1.ec 1x1", 64, 128, 80, 1, 1, 0, 1, 1},
    {"dw2 3x3 s2", 128, 128, 80, 3, 2, 1, 128, 1},
    {"hg3.m0 3x3", 128, 96, 40, 3, 1, 1, 1, 1},
    {"hg3.m 3x3", 96, 96, 40, 3, 1, 1, 1, 5},
    {"hg3.sc 1x1", 704, 256, 40, 1, 1, 0, 1, 1},
    {"hg3.ec 1x1", 256, 512, 40, 1, 1, 0, 1, 1},
    {"dw4 3x3 s2", 512, 512, 40, 3, 2, 1, 512, 1},
    {"hg5.m0.conv1 1x1", 512, 192, 20, 1, 1, 0, 1, 1},
    {"hg6.m0.conv1 1x1", 1024, 192, 20, 1, 1, 0, 1, 2},
    {"hg5-7.conv1 1x1", 192, 192, 20, 1, 1, 0, 1, 15},
    {"hg5-7.conv2 dw 5x5", 192, 192, 20, 5, 1, 2, 192, 18},
    {"hg5.sc 1x1", 1664, 512, 20, 1, 1, 0, 1, 1},
    {"hg6.sc 1x1", 2176, 512, 20, 1, 1, 0, 1, 2},
    {"hg5-7.ec 1x1", 512, 1024, 20, 1, 1, 0, 1, 3},
    {"dw8 3x3 s2", 1024, 1024, 20, 3, 2, 1, 1024, 1},
    {"hg9.m0.conv1 1x1", 1024, 384, 10, 1, 1, 0, 1, 1},
    {"hg9.conv1 1x1", 384, 384, 10, 1, 1, 0, 1, 5},
    {"hg9.conv2 dw 5x5", 384, 384, 10, 5, 1, 2, 384, 6},
    {"hg9.sc 1x1", 3328, 1024, 10, 1, 1, 0, 1, 1},
    {"hg9.ec 1x1", 1024, 2048, 10, 1, 1, 0, 1, 1},
    {"enc10 1x1", 2048, 256, 10, 1, 1, 0, 1, 1},
    {"enc14 1x1", 1024, 256, 20, 1, 1, 0, 1, 1},
    {"enc19 1x1", 512, 256, 40, 1, 1, 0, 1, 1},
    {"repc3.cv 1x1 @40", 512, 256, 40, 1, 1, 0, 1, 4},
    {"repc3.cv 1x1 @20", 512, 256, 20, 1, 1, 0, 1, 4},
    {"repc3.cv 1x1 @10", 512, 256, 10, 1, 1, 0, 1, 2},
    {"rep 3x3 256 @40", 256, 256, 40, 3, 1, 1, 1, 3},
    {"rep 3x3 256 @20", 256, 256, 20, 3, 1, 1, 1, 6},
    {"rep 3x3 256 @10", 256, 256, 10, 3, 1, 1, 1, 3},
    {"1x1 256 @40", 256, 256, 40, 1, 1, 0, 1, 4},  // RepConv 1x1 + input_proj
    {"1x1 256 @20", 256, 256, 20, 1, 1, 0, 1, 8},  // RepConv 1x1, enc17, input_proj
    {"1x1 256 @10", 256, 256, 10, 1, 1, 0, 1, 5},  // RepConv 1x1, enc12, input_proj
    {"down 3x3 s2 @40", 256, 256, 40, 3, 2, 1, 1, 1},
    {"down 3x3 s2 @20", 256, 256, 20, 3, 2, 1, 1, 1},
};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v) {
    qsort(v, REPS, sizeof *v, cmp_double);
    return v[REPS / 2];
}

static float *buffer(const Backend *be, int64_t n, float value) {
    float *p = be->alloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) p[i] = value * (float)((i * 37) % 101 - 50) / 50.0f;
    return p;
}

// Median forward and backward milliseconds of one row at the current thread count.
static void time_conv(const Backend *be, KernelCtx *kc, const ConvRow *r, double *fwd,
                      double *bwd) {
    Conv2dParams p = {r->S, r->S, r->pad, r->pad, 1, 1, r->groups};
    int64_t OH = (r->H + 2 * r->pad - r->K) / r->S + 1;
    int64_t nx = BATCH * r->C * r->H * r->H, ny = BATCH * r->OC * OH * OH;
    int64_t nw = r->OC * (r->C / r->groups) * r->K * r->K;
    float *x = buffer(be, nx, 1), *w = buffer(be, nw, 0.1f), *y = buffer(be, ny, 0);
    float *dy = buffer(be, ny, 1), *dx = buffer(be, nx, 0), *dw = buffer(be, nw, 0);
    bool want_dx = r->C != 3;
    double tf[REPS], tb[REPS];
    for (int rep = -1; rep < REPS; rep++) {
        double t0 = now_ms();
        be->conv2d_fwd(kc, y, x, w, NULL, BATCH, r->C, r->H, r->H, r->OC, OH, OH, r->K, r->K, p);
        double t1 = now_ms();
        be->conv2d_bwd(kc, want_dx ? dx : NULL, dw, NULL, dy, x, w, BATCH, r->C, r->H, r->H,
                       r->OC, OH, OH, r->K, r->K, p);
        double t2 = now_ms();
        if (rep >= 0) tf[rep] = t1 - t0, tb[rep] = t2 - t1;
    }
    *fwd = median(tf);
    *bwd = median(tb);
    be->free(x), be->free(w), be->free(y), be->free(dy), be->free(dx), be->free(dw);
}

// HGStem's pool/pad and the encoder's upsampling, fwd + bwd.
static void time_misc(const Backend *be, KernelCtx *kc, int which, double *fwd, double *bwd) {
    int64_t planes = BATCH * (which == 0 || which == 1 ? 32 : 256);
    int64_t H = which == 0 ? 161 : which == 1 ? 160 : which == 2 ? 20 : 40;
    int64_t OH = which == 0 ? 160 : which == 1 ? 161 : 2 * H;
    float *x = buffer(be, planes * H * H, 1), *y = buffer(be, planes * OH * OH, 0);
    float *dy = buffer(be, planes * OH * OH, 1), *dx = buffer(be, planes * H * H, 0);
    int32_t *idx = be->alloc(sizeof(int32_t) * (size_t)(planes * OH * OH));
    Pool2dParams pp = {2, 2, 1, 1, 0, 0, true};
    double tf[REPS], tb[REPS];
    for (int rep = -1; rep < REPS; rep++) {
        double t0 = now_ms();
        if (which == 0) be->maxpool2d_fwd(kc, y, idx, x, planes, H, H, OH, OH, pp);
        else if (which == 1) be->pad2d_fwd(kc, y, x, planes, H, H, 0, 1, 0, 1);
        else be->upsample_nearest2d_fwd(kc, y, x, planes, H, H, 2);
        double t1 = now_ms();
        if (which == 0) be->maxpool2d_bwd(kc, dx, dy, idx, planes, H, H, OH, OH, pp);
        else if (which == 1) be->pad2d_bwd(kc, dx, dy, planes, H, H, 0, 1, 0, 1);
        else be->upsample_nearest2d_bwd(kc, dx, dy, planes, H, H, 2);
        double t2 = now_ms();
        if (rep >= 0) tf[rep] = t1 - t0, tb[rep] = t2 - t1;
    }
    *fwd = median(tf);
    *bwd = median(tb);
    be->free(x), be->free(y), be->free(dy), be->free(dx), be->free(idx);
}

int main(void) {
    const Backend *be = backend_need(DEV_CPU);
    const int n_rows = (int)(sizeof rows / sizeof rows[0]);
    static double f[2][64], b[2][64];
    for (int ti = 0; ti < 2; ti++) {
        KernelCtx kc = {.n_threads = ti + 1};
        be->set_threads(kc.n_threads);
        for (int i = 0; i < n_rows; i++) time_conv(be, &kc, &rows[i], &f[ti][i], &b[ti][i]);
        for (int i = 0; i < 4; i++) time_misc(be, &kc, i, &f[ti][n_rows + i], &b[ti][n_rows + i]);
    }

    printf("conv family, RT-DETR-L 320 px, batch %d, median of %d (ms)\n", BATCH, REPS);
    printf("%-22s %5s %5s %4s %3s %4s %4s | %8s %8s | %8s %8s\n", "conv", "C", "OC", "H", "k",
           "s", "x", "fwd 1t", "bwd 1t", "fwd 2t", "bwd 2t");
    double tot[2][2] = {{0}};
    for (int i = 0; i < n_rows; i++) {
        const ConvRow *r = &rows[i];
        printf("%-22s %5lld %5lld %4lld %3d %4d %4d | %8.2f %8.2f | %8.2f %8.2f\n", r->name,
               (long long)r->C, (long long)r->OC, (long long)r->H, r->K, r->S, r->count, f[0][i],
               b[0][i], f[1][i], b[1][i]);
        for (int ti = 0; ti < 2; ti++) {
            tot[ti][0] += r->count * f[ti][i];
            tot[ti][1] += r->count * b[ti][i];
        }
    }
    const char *misc[] = {"maxpool k2 s1 ceil 161", "pad [0,1,0,1] 160", "upsample x2 20->40",
                          "upsample x2 40->80"};
    for (int i = 0; i < 4; i++)
        printf("%-22s %34s | %8.2f %8.2f | %8.2f %8.2f\n", misc[i], "", f[0][n_rows + i],
               b[0][n_rows + i], f[1][n_rows + i], b[1][n_rows + i]);
    printf("%-22s %34s | %8.1f %8.1f | %8.1f %8.1f\n", "total (x count)", "", tot[0][0],
           tot[0][1], tot[1][0], tot[1][1]);
    printf("conv fwd+bwd per step: %.0f ms on 1 thread, %.0f ms on 2 threads\n",
           tot[0][0] + tot[0][1], tot[1][0] + tot[1][1]);

    // The same rows on im2col (where conv.c chose Winograd above, else the same path again).
    printf("\ndense 3x3 stride 1 on im2col (Winograd off), ms; x count summed below\n");
    conv2d_cpu_use_winograd(false);
    double im[2][2] = {{0}}, wi[2][2] = {{0}};
    for (int i = 0; i < n_rows; i++) {
        const ConvRow *r = &rows[i];
        if (r->K != 3 || r->S != 1 || r->groups != 1) continue;
        double fi[2], bi[2];
        for (int ti = 0; ti < 2; ti++) {
            KernelCtx kc = {.n_threads = ti + 1};
            be->set_threads(kc.n_threads);
            time_conv(be, &kc, r, &fi[ti], &bi[ti]);
            im[ti][0] += r->count * fi[ti], im[ti][1] += r->count * bi[ti];
            wi[ti][0] += r->count * f[ti][i], wi[ti][1] += r->count * b[ti][i];
        }
        printf("%-22s %34s | %8.2f %8.2f | %8.2f %8.2f\n", r->name, "", fi[0], bi[0], fi[1],
               bi[1]);
    }
    conv2d_cpu_use_winograd(true);
    printf("%-22s %34s | %8.1f %8.1f | %8.1f %8.1f\n", "im2col total (x count)", "", im[0][0],
           im[0][1], im[1][0], im[1][1]);
    printf("%-22s %34s | %8.1f %8.1f | %8.1f %8.1f\n", "as run above (x count)", "", wi[0][0],
           wi[0][1], wi[1][0], wi[1][1]);
    return 0;
}
