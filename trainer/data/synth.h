/* synth.h -- the synthetic detection dataset behind `ddpdbg-train synth` and the project's
 * default training data: rectangles, ellipses and triangles over textured backgrounds with
 * small unlabelled distractor marks, written as a YOLO dataset (images/, labels/, data.yaml).
 *
 * Classes: with K <= 3 class k is a shape (0 rectangle, 1 ellipse, 2 triangle) in any of the
 * palette's colours; with K > 3 (at most SYNTH_MAX_CLASSES) class k is shape k % 3 in palette
 * colour k / 3, so colour matters. An image has 1-4 objects, or none for a fraction `empty`
 * of each split; the last round(n / 5) images (at least 1) are the val split, the rest train.
 * Deterministic for a seed: image i depends only on (seed, i, imgsz, classes, empty). */
#ifndef TRAINER_DATA_SYNTH_H
#define TRAINER_DATA_SYNTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trainer/data/dataset.h" // Box
#include "trainer/data/image.h"

#define SYNTH_MAX_CLASSES 24
#define SYNTH_MAX_OBJECTS 4

typedef struct SynthConfig {
    const char *out; // the dataset folder: created; must not exist or be empty
    int n;           // images, >= 2
    int imgsz;       // square images of imgsz pixels, >= 32
    int classes;     // 1..SYNTH_MAX_CLASSES
    double empty;    // fraction of images without objects, in [0, 1]
    uint64_t seed;
} SynthConfig;

typedef struct SynthSummary {
    int n_train, n_val;
    int n_empty; // images without objects, both splits
    int n_boxes; // objects, both splits
} SynthSummary;

// The class name of class k of `classes` ("ellipse", or "red_ellipse" when colour counts).
void synth_class_name(int k, int classes, char *out, size_t outlen);

// Renders one image: *n_boxes (0 when empty, else 1..SYNTH_MAX_OBJECTS) boxes into boxes.
// im is allocated here (image_free it). Deterministic in (seed, imgsz, classes, empty).
void synth_render(uint64_t seed, int imgsz, int classes, bool empty, Image *im, Box *boxes,
                  int *n_boxes);

// Writes the dataset: out/images/{train,val}/NNNNNN.png, out/labels/{train,val}/NNNNNN.txt
// (empty for background images), out/data.yaml (path: out's absolute path). Images are
// rendered in parallel (OpenMP). Returns 0, or -1 with one line in err.
int synth_generate(const SynthConfig *cfg, SynthSummary *sum, char *err, size_t errlen);

#endif
