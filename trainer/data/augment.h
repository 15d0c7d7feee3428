/* augment.h -- the two augmentations of Ultralytics' RT-DETR training pipeline that ddpdbg
 * implements, as its RandomHSV and RandomFlip do them. Mosaic and the random affine are not
 * implemented (ddpdbg trains to reproduce DDP behaviour, not Ultralytics' accuracy).
 * All randomness comes from the caller's Rng (trainer/rng.h): same seed, same result. */
#ifndef TRAINER_DATA_AUGMENT_H
#define TRAINER_DATA_AUGMENT_H

#include <stdbool.h>

#include "trainer/data/dataset.h" // Box
#include "trainer/data/image.h"
#include "trainer/rng.h"

typedef struct AugmentConfig {
    float hsv_h, hsv_s, hsv_v; // RandomHSV gains (Ultralytics hsv_h 0.015, hsv_s 0.7, hsv_v 0.4)
    float fliplr;              // horizontal flip probability (Ultralytics fliplr 0.5)
} AugmentConfig;

// Ultralytics' training defaults.
AugmentConfig augment_default(void);

// RandomHSV: gains r = uniform(-1, 1, 3) * (h, s, v) + 1 (three draws, in that order), then
// in OpenCV's 8-bit HSV space (H in [0, 180), S and V in [0, 255]) the lookup tables
// H' = (H * r0) mod 180, S' = clip(S * r1, 0, 255), V' = clip(V * r2, 0, 255), truncated to
// integers, and back to RGB. No draws happen when all three gains are 0.
void augment_hsv(Image *im, float hgain, float sgain, float vgain, Rng *rng);

// RandomFlip(direction="horizontal"): with probability p (one uniform draw, flipped when it is
// below p) mirrors the image and every box (cx -> 1 - cx). Returns whether it flipped.
bool augment_flip_lr(Image *im, Box *boxes, int n_boxes, float p, Rng *rng);

// RandomHSV then the flip, in Ultralytics' order.
void augment_apply(const AugmentConfig *cfg, Image *im, Box *boxes, int n_boxes, Rng *rng);

// OpenCV's 8-bit colour conversions (cv2.COLOR_RGB2HSV, cv2.COLOR_HSV2RGB), exposed for tests.
void augment_rgb_to_hsv(const uint8_t rgb[3], uint8_t hsv[3]);
void augment_hsv_to_rgb(const uint8_t hsv[3], uint8_t rgb[3]);

#endif
