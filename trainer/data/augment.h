/* augment.h -- Ultralytics' RT-DETR training transforms (v8_transforms(..., stretch=True) as
 * RTDETRDataset builds them, with cfg/default.yaml's values): Mosaic (4 images on a 2s x 2s
 * canvas, p = mosaic), RandomPerspective (degrees, translate, scale, shear; perspective 0, as
 * RT-DETR configures it: the mosaic's border -s/2 crops the canvas back to s x s), RandomHSV,
 * then the horizontal flip. close_mosaic turns Mosaic off for the last epochs as the trainer
 * does. Not here: MixUp, CopyPaste and CutMix (p = 0 for rtdetr), Albumentations (only with
 * the package installed), the vertical flip (p = 0).
 * Differences from Ultralytics, on purpose: Mosaic's partners are drawn from the whole dataset
 * (Ultralytics draws them from its loader's buffer of recent images, a cache detail); the warp
 * interpolates in float (cv2.warpAffine in 5-bit fixed point: a pixel may differ by 1); one
 * generator (trainer/rng.h) draws every number, so the sequence is not Python's or numpy's;
 * and with degrees, translate, scale and shear all 0 RandomPerspective is skipped (Ultralytics
 * still applies the identity and drops boxes under 2 px then).
 * All randomness comes from the caller's Rng: same seed, same result. */
#ifndef TRAINER_DATA_AUGMENT_H
#define TRAINER_DATA_AUGMENT_H

#include <stdbool.h>

#include "trainer/data/dataset.h" // Box
#include "trainer/data/image.h"
#include "trainer/rng.h"

typedef struct AugmentConfig {
    float mosaic;              // Mosaic probability (Ultralytics mosaic 1.0; 0: off)
    int close_mosaic;          // Mosaic off for the last close_mosaic epochs (10; 0: never)
    float degrees, translate, scale, shear; // RandomPerspective (0, 0.1, 0.5, 0)
    float hsv_h, hsv_s, hsv_v; // RandomHSV gains (Ultralytics hsv_h 0.015, hsv_s 0.7, hsv_v 0.4)
    float fliplr;              // horizontal flip probability (Ultralytics fliplr 0.5)
} AugmentConfig;

// Ultralytics' training defaults for rtdetr-*.
AugmentConfig augment_default(void);

// Whether Mosaic runs in epoch (0-based) of a run of `epochs`: BaseTrainer closes it when
// epoch == epochs - close_mosaic, so from that epoch on; when close_mosaic >= epochs that
// epoch never comes (Ultralytics' rule: the mosaic then stays on throughout, unless the
// two are equal, which closes it from epoch 0).
bool augment_mosaic_on(const AugmentConfig *cfg, int epoch, int epochs);

// One training sample through the whole pipeline. im: dataset image idx already stretched to
// s x s (s = im->w = im->h); it is replaced by the result, s x s. *boxes (malloc'd or NULL,
// *n of them, normalised cx cy w h): idx's boxes, replaced by the sample's (malloc'd; fewer
// when the crop or the filter drops some, more with a mosaic). Mosaic's three partners are
// loaded from ds and stretched the same way. Returns 0, or -1 with a partner's load error
// (im and *boxes then unchanged: still the caller's to free).
int augment_sample(const AugmentConfig *cfg, const Dataset *ds, Image *im, Box **boxes, int *n,
                   Rng *rng, char *err, size_t errlen);

// The steps, exposed for tests. Boxes here are pixel corners: x1 y1 x2 y2 per box.
// Mosaic's 4-tile canvas (2s x 2s, grey 114) with tile 0 = the four images' top-left at the
// drawn centre (xc, yc) in [s/2, 3s/2): xyxy[k] receives tile k's boxes (counts[k] of them)
// moved onto the canvas, clipped, zero-area ones dropped; returns how many remain (in cls,
// xyxy: room for the sum of counts).
int augment_mosaic4(Image *const tiles[4], const Box *const tile_boxes[4], const int counts[4],
                    Rng *rng, Image *canvas, int *cls, float *xyxy);
// RandomPerspective on im (any size) with the given border (Mosaic's -s/2, else 0): im becomes
// (w + 2 border) x (h + 2 border); the n boxes (cls, xyxy) are mapped by the same matrix,
// clipped, and filtered as box_candidates does (width and height > 2 px, area > 10 % of the
// scaled original, aspect < 100). Returns how many remain (compacted in place).
int augment_perspective(const AugmentConfig *cfg, Image *im, int border, int *cls, float *xyxy,
                        int n, Rng *rng);

// RandomHSV: gains r = uniform(-1, 1, 3) * (h, s, v) + 1 (three draws, in that order), then
// in OpenCV's 8-bit HSV space (H in [0, 180), S and V in [0, 255]) the lookup tables
// H' = (H * r0) mod 180, S' = clip(S * r1, 0, 255), V' = clip(V * r2, 0, 255), truncated to
// integers, and back to RGB. No draws happen when all three gains are 0.
void augment_hsv(Image *im, float hgain, float sgain, float vgain, Rng *rng);

// RandomFlip(direction="horizontal"): with probability p (one uniform draw, flipped when it is
// below p) mirrors the image and every box (cx -> 1 - cx). Returns whether it flipped.
bool augment_flip_lr(Image *im, Box *boxes, int n_boxes, float p, Rng *rng);

// OpenCV's 8-bit colour conversions (cv2.COLOR_RGB2HSV, cv2.COLOR_HSV2RGB), exposed for tests.
void augment_rgb_to_hsv(const uint8_t rgb[3], uint8_t hsv[3]);
void augment_hsv_to_rgb(const uint8_t hsv[3], uint8_t rgb[3]);

#endif
