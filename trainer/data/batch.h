/* batch.h -- one training or validation batch from a Dataset: every image decoded, stretched
 * to imgsz x imgsz (no letterbox, as Ultralytics' RT-DETR dataset), augmented when asked, and
 * collated as Ultralytics' collate_fn + preprocess_batch leave it: images (B, 3, S, S) RGB
 * floats in [0, 1] (uint8 / 255, no mean/std), the boxes of all images concatenated with their
 * batch_idx, and per-image GT counts. Plain host arrays: making tensors is the caller's job. */
#ifndef TRAINER_DATA_BATCH_H
#define TRAINER_DATA_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "trainer/data/augment.h"
#include "trainer/data/dataset.h"

typedef struct Batch {
    int n_images, imgsz;
    float *images;    // n_images * 3 * imgsz * imgsz, CHW per image, RGB
    int64_t *indices; // n_images dataset indices
    int *orig_w, *orig_h; // n_images: the decoded size before the stretch (for rescaling preds)
    int *counts;      // n_images: GT boxes per image (0 = background image)
    int n_boxes;      // sum of counts
    int *cls;         // n_boxes classes
    float *boxes;     // n_boxes * 4: cx, cy, w, h normalised (after augmentation)
    int *batch_idx;   // n_boxes: which image of the batch each box belongs to (ascending)
} Batch;

// Loads ds's images `indices[0..n)`. aug NULL: no augmentation (validation). Otherwise image
// indices[i] goes through augment_sample (Mosaic, RandomPerspective, HSV, flip: its box count
// may change) with an Rng seeded from (aug_seed, indices[i]) alone, so a sample
// looks the same whichever rank or batch position loads it; vary aug_seed per epoch. Images
// are decoded in parallel (OpenMP). Returns 0, or -1 with the first failing image's message.
int batch_load(Batch *b, const Dataset *ds, const int64_t *indices, int n, int imgsz,
               const AugmentConfig *aug, uint64_t aug_seed, char *err, size_t errlen);
void batch_free(Batch *b); // a zeroed Batch is a no-op

#endif
