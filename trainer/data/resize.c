/* resize.c -- bilinear resize with cv2.INTER_LINEAR's rules for 8-bit images (image.h):
 * the pixel-centre mapping, the border clamp, and the 11-bit fixed-point weights of
 * OpenCV's resize.cpp (HResizeLinear then VResizeLinear with FixedPtCast). */
#include <math.h>

#include "kernels/base.h" // CHECK, xmalloc
#include "trainer/data/image.h"

enum { COEF_BITS = 11, COEF_ONE = 1 << COEF_BITS };

// For every destination coordinate d in [0, dn): the first source index and the two weights
// (summing to about COEF_ONE). OpenCV computes scale as 1 / (dn / sn) in double and the
// coordinate in float; both are kept so that the floor lands where OpenCV's does.
static void linear_taps(int sn, int dn, int *first, short (*weight)[2]) {
    double scale = 1.0 / ((double)dn / sn);
    for (int d = 0; d < dn; d++) {
        float f = (float)((d + 0.5) * scale - 0.5);
        int s = (int)floorf(f);
        f -= (float)s;
        if (s < 0) f = 0, s = 0;
        if (s >= sn - 1) f = 0, s = sn - 1;
        first[d] = s;
        weight[d][0] = (short)lrintf((1.f - f) * COEF_ONE);
        weight[d][1] = (short)lrintf(f * COEF_ONE);
    }
}

// One source row resized horizontally, in fixed point (scale COEF_ONE): out is dw * 3 ints.
static void resize_row(const uint8_t *row, int sw, int dw, const int *xs, const short (*xw)[2],
                       int *out) {
    for (int x = 0; x < dw; x++) {
        int s0 = xs[x], s1 = MIN(xs[x] + 1, sw - 1);
        for (int c = 0; c < 3; c++)
            out[x * 3 + c] = row[s0 * 3 + c] * xw[x][0] + row[s1 * 3 + c] * xw[x][1];
    }
}

void image_resize(const Image *src, int dw, int dh, Image *dst) {
    CHECK(src->rgb && src->w > 0 && src->h > 0, "image_resize: empty source");
    image_init(dst, dw, dh);
    int *xs = xmalloc(sizeof(int) * dw), *ys = xmalloc(sizeof(int) * dh);
    short(*xw)[2] = xmalloc(sizeof(short[2]) * dw), (*yw)[2] = xmalloc(sizeof(short[2]) * dh);
    linear_taps(src->w, dw, xs, xw);
    linear_taps(src->h, dh, ys, yw);
    int *row0 = xmalloc(sizeof(int) * dw * 3), *row1 = xmalloc(sizeof(int) * dw * 3);
    const size_t stride = (size_t)src->w * 3;
    for (int y = 0; y < dh; y++) {
        int s0 = ys[y], s1 = MIN(ys[y] + 1, src->h - 1);
        resize_row(src->rgb + s0 * stride, src->w, dw, xs, xw, row0);
        resize_row(src->rgb + s1 * stride, src->w, dw, xs, xw, row1);
        uint8_t *out = dst->rgb + (size_t)y * dw * 3;
        for (int i = 0; i < dw * 3; i++) {
            // at most 255 * 2049 * 2049 < 2^31: int is enough, as in OpenCV
            int v = row0[i] * yw[y][0] + row1[i] * yw[y][1];
            v = (v + (1 << (2 * COEF_BITS - 1))) >> (2 * COEF_BITS);
            out[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
    free(xs), free(ys), free(xw), free(yw), free(row0), free(row1);
}
