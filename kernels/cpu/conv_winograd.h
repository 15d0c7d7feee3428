/* conv_winograd.h -- the CPU conv kernel's Winograd path for dense 3x3 stride-1 convs
 * (kernels/cpu/conv_winograd.c; conv.c chooses it). Private to kernels/cpu and its tests. */
#ifndef KERNELS_CPU_CONV_WINOGRAD_H
#define KERNELS_CPU_CONV_WINOGRAD_H

#include "kernels/backend.h"

// A 3x3, stride 1, dilation 1, groups 1 conv: x (B,C,H,W), w (OC,C,3,3), out (B,OC,OH,OW) with
// OH = H + 2*pad_h - 2, OW = W + 2*pad_w - 2.
typedef struct WinoShape {
    int64_t B, C, H, W, OC, OH, OW;
    int pad_h, pad_w;
} WinoShape;

// Whether conv.c should take the Winograd path for this conv: 3x3, stride 1, dilation 1,
// groups 1, padding <= 2, and channels and output tiles enough to amortise the transforms.
// Fills *s when it returns true.
bool winograd_applies(WinoShape *s, int64_t B, int64_t C, int64_t H, int64_t W, int64_t OC,
                      int64_t OH, int64_t OW, int KH, int KW, Conv2dParams p);

// out = conv(x, w), no bias (out is overwritten).
void winograd_conv2d_fwd(KernelCtx *kc, const WinoShape *s, float *out, const float *x,
                         const float *w);

// dx += dL/dx, dw += dL/dw for the upstream gradient dout; either may be NULL (not wanted).
void winograd_conv2d_bwd(KernelCtx *kc, const WinoShape *s, float *dx, float *dw,
                         const float *dout, const float *x, const float *w);

// conv.c's per-thread scratch of at least n floats, kept between calls (contents undefined).
float *conv_scratch_cpu(int64_t n);

// For tests and benchmarks: false makes conv.c take its im2col path for every conv that
// would otherwise go to Winograd (the default is true). Not thread-safe; set it between calls.
void conv2d_cpu_use_winograd(bool on);

#endif
