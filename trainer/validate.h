/* validate.h -- Ultralytics' RTDETRValidator over a dataset split (8.1.34): the model in eval
 * mode without gradients (BatchNorm running statistics, only the last decoder layer), every
 * query a prediction (its box x imgsz as xyxy, its best class and that class's sigmoid score,
 * kept when the score exceeds conf), matched against the ground truth in the same imgsz pixel
 * frame by the mAP evaluator (eval/map.h), and the printed table. IoU is unchanged by the
 * stretch back to the original size, so the frame does not matter. Not here: the EMA copy. */
#ifndef TRAINER_VALIDATE_H
#define TRAINER_VALIDATE_H

#include <stdbool.h>
#include <stdio.h>

#include "trainer/data/dataset.h"
#include "trainer/eval/map.h"
#include "trainer/nn/rtdetr.h"

// Runs ds through m in batches of `batch` images at imgsz (Ultralytics' val loader uses twice
// the training batch). t: a tape over a step arena, reset after every batch; its mode is
// restored on return. Fills *out (map_result_free it). Returns 0, or -1 with the failing
// image's one-line message in err.
int validate_run(Rtdetr *m, Tape *t, const Dataset *ds, int imgsz, int batch, double conf,
                 MapResult *out, char *err, size_t errlen);

// The table header ("Class Images Instances Box(P R mAP50 mAP50-95)"), the `all` row and,
// when per_class is set and there is more than one class, one row per class with ground truth.
void validate_print_table(FILE *f, const MapResult *r, const Dataset *ds, bool per_class);

// Ultralytics' fitness: 0.1 mAP50 + 0.9 mAP50-95.
double validate_fitness(const MapResult *r);

#endif
