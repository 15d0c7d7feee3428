/* map.h -- the detection metrics of Ultralytics' validation (8.1.34: DetectionValidator with
 * RTDETRValidator's predictions, BaseValidator.match_predictions, utils/metrics.py
 * ap_per_class and DetMetrics): per class precision and recall at the max-F1 confidence,
 * AP at IoU 0.50:0.05:0.95 by 101-point interpolation, and their means over the classes that
 * have ground truth (the 'all' row). Images are added one by one; nothing here knows about
 * tensors, files or the model. Not pycocotools: the numbers are Ultralytics' own. */
#ifndef TRAINER_EVAL_MAP_H
#define TRAINER_EVAL_MAP_H

#include <stdint.h>

#define MAP_N_IOU 10 // IoU thresholds 0.50, 0.55, ..., 0.95

typedef struct MapEval MapEval;

typedef struct MapClass {
    int64_t n_gt;             // instances of the class in the ground truth
    double precision, recall; // at the confidence where the smoothed mean F1 peaks
    double ap[MAP_N_IOU];     // AP at each IoU threshold; ap[0] is AP50
    double ap50_95;           // mean of ap
} MapClass;

typedef struct MapResult {
    int n_classes;
    MapClass *classes;     // (n_classes); a class without GT is all zero and not in the means
    int n_classes_with_gt; // how many classes the means are over
    int64_t n_images, n_gt;
    // The 'all' row: means over the classes with GT. All zero when no prediction is a true
    // positive at any threshold (Ultralytics then skips the computation), per class values too.
    double precision, recall, map50, map75, map50_95;
} MapResult;

// An evaluator for classes [0, n_classes). map_eval_free(NULL) is a no-op.
MapEval *map_eval_new(int n_classes);
void map_eval_free(MapEval *e);

// Adds one image: n_pred predictions (xyxy pixel boxes (n_pred,4), finite scores, classes) and
// n_gt ground truths (xyxy pixel boxes (n_gt,4), classes), in the same pixel frame; either may
// be empty. Classes outside [0, n_classes) and non-finite scores are a bug (CHECK): the caller
// filters predictions by confidence first, as Ultralytics' `score > conf` drops NaN.
// Within the image, predictions are matched to GT of their class per IoU threshold exactly
// as match_predictions does on score-sorted predictions (RTDETRValidator sorts them): each
// prediction picks its highest-IoU GT (IoU >= threshold); each GT keeps the highest-scoring of
// the predictions that picked it; the others are false positives (they do not fall back to
// their second-best GT).
void map_eval_add_image(MapEval *e,
                        int64_t n_pred,          // predictions of this image
                        const float *pred_xyxy,  // (n_pred,4)
                        const float *pred_score, // (n_pred)
                        const int32_t *pred_cls, // (n_pred)
                        int64_t n_gt,            // ground-truth boxes of this image
                        const float *gt_xyxy,    // (n_gt,4)
                        const int32_t *gt_cls);  // (n_gt)

// The metrics over every image added so far. Fills *out; map_result_free releases it.
void map_eval_compute(const MapEval *e, MapResult *out);
void map_result_free(MapResult *r); // a zeroed MapResult is a no-op

#endif
