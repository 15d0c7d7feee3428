/* augment.c -- RandomHSV and the horizontal flip (augment.h; Mosaic, RandomPerspective and
 * the whole sample's pipeline are augment_geom.c). The colour conversions follow
 * OpenCV's 8-bit code paths (color_hsv.simd.hpp: RGB2HSV_b with 12-bit fixed-point division
 * tables, HSV2RGB_b through float) so that the lookup tables act on the same H, S, V values. */
#include "trainer/data/augment.h"

#include <math.h>

#include "kernels/base.h" // CHECK

AugmentConfig augment_default(void) {
    return (AugmentConfig){.mosaic = 1.0f,
                           .close_mosaic = 10,
                           .translate = 0.1f,
                           .scale = 0.5f,
                           .hsv_h = 0.015f,
                           .hsv_s = 0.7f,
                           .hsv_v = 0.4f,
                           .fliplr = 0.5f};
}

bool augment_mosaic_on(const AugmentConfig *cfg, int epoch, int epochs) {
    int closed_from = epochs - cfg->close_mosaic; // BaseTrainer: epoch == epochs - close_mosaic
    return cfg->mosaic > 0 && !(closed_from >= 0 && epoch >= closed_from);
}

enum { HSV_SHIFT = 12 };

void augment_rgb_to_hsv(const uint8_t rgb[3], uint8_t hsv[3]) {
    int r = rgb[0], g = rgb[1], b = rgb[2];
    int v = MAX(MAX(r, g), b), vmin = MIN(MIN(r, g), b), diff = v - vmin;
    // OpenCV's table entries sdiv[v] = round((255 << 12) / v), hdiv[d] = round((180 << 12) / 6d),
    // computed here instead of kept in a static table (no shared state between threads).
    int sdiv = v ? (int)lrint((255 << HSV_SHIFT) / (1.0 * v)) : 0;
    int hdiv = diff ? (int)lrint((180 << HSV_SHIFT) / (6.0 * diff)) : 0;
    int s = (diff * sdiv + (1 << (HSV_SHIFT - 1))) >> HSV_SHIFT;
    int h = v == r ? g - b : v == g ? b - r + 2 * diff : r - g + 4 * diff;
    h = (h * hdiv + (1 << (HSV_SHIFT - 1))) >> HSV_SHIFT;
    if (h < 0) h += 180;
    hsv[0] = (uint8_t)h, hsv[1] = (uint8_t)s, hsv[2] = (uint8_t)v;
}

static uint8_t to_u8(float x) {
    long v = lrintf(x * 255.0f);
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

void augment_hsv_to_rgb(const uint8_t hsv[3], uint8_t rgb[3]) {
    float h = hsv[0], s = hsv[1] * (1.0f / 255.0f), v = hsv[2] * (1.0f / 255.0f);
    float r = v, g = v, b = v;
    if (s != 0) {
        // OpenCV's HSV2RGB_native: the sector picks which of tab[] each of b, g, r takes.
        static const int sector_bgr[6][3] = {{1, 3, 0}, {1, 0, 2}, {3, 0, 1},
                                             {0, 2, 1}, {0, 1, 3}, {2, 1, 0}};
        h = fmodf(h * (6.0f / 180.0f), 6.0f);
        int sector = (int)floorf(h);
        h -= (float)sector;
        if ((unsigned)sector >= 6u) sector = 0, h = 0.0f;
        float tab[4] = {v, v * (1.0f - s), v * (1.0f - s * h), v * (1.0f - s * (1.0f - h))};
        b = tab[sector_bgr[sector][0]];
        g = tab[sector_bgr[sector][1]];
        r = tab[sector_bgr[sector][2]];
    }
    rgb[0] = to_u8(r), rgb[1] = to_u8(g), rgb[2] = to_u8(b);
}

void augment_hsv(Image *im, float hgain, float sgain, float vgain, Rng *rng) {
    if (!hgain && !sgain && !vgain) return;
    double gain[3] = {hgain, sgain, vgain}, r[3];
    for (int k = 0; k < 3; k++) r[k] = rng_range(rng, -1.0f, 1.0f) * gain[k] + 1.0;
    // numpy: x * r in float64, then astype(uint8) truncates (the values are >= 0).
    uint8_t lut[3][256];
    for (int x = 0; x < 256; x++) {
        lut[0][x] = (uint8_t)fmod(x * r[0], 180.0);
        lut[1][x] = (uint8_t)fmin(fmax(x * r[1], 0.0), 255.0);
        lut[2][x] = (uint8_t)fmin(fmax(x * r[2], 0.0), 255.0);
    }
    size_t n = (size_t)im->w * im->h;
    for (size_t i = 0; i < n; i++) {
        uint8_t *px = im->rgb + 3 * i, hsv[3];
        augment_rgb_to_hsv(px, hsv);
        for (int k = 0; k < 3; k++) hsv[k] = lut[k][hsv[k]];
        augment_hsv_to_rgb(hsv, px);
    }
}

bool augment_flip_lr(Image *im, Box *boxes, int n_boxes, float p, Rng *rng) {
    if (rng_uniform(rng) >= p) return false;
    for (int y = 0; y < im->h; y++) {
        uint8_t *row = im->rgb + (size_t)y * im->w * 3;
        for (int a = 0, b = im->w - 1; a < b; a++, b--)
            for (int c = 0; c < 3; c++) {
                uint8_t t = row[a * 3 + c];
                row[a * 3 + c] = row[b * 3 + c];
                row[b * 3 + c] = t;
            }
    }
    for (int i = 0; i < n_boxes; i++) boxes[i].cx = 1.0f - boxes[i].cx;
    return true;
}
