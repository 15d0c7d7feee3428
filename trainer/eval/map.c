/* map.c -- see map.h. Two halves: map_eval_add_image turns each prediction into a record
 * (score, class, one true-positive bit per IoU threshold), as BaseValidator.match_predictions
 * does; map_eval_compute runs ap_per_class over all records. numpy's interp, linspace, trapz
 * and Ultralytics' smooth are written out so that the numbers follow theirs step by step,
 * e.g. a perfect detector scores AP 0.995, not 1: compute_ap closes the envelope with
 * precision 0 at recall 1, and the last of the 101 trapezoids averages 1 and 0. */
#include "trainer/eval/map.h"

#include <math.h>
#include <stdbool.h>

#include "kernels/base.h"     // CHECK, xmalloc
#include "trainer/nn/boxes.h" // boxes_iou_xyxy_matrix

#define CURVE_POINTS 1000 // ap_per_class: x = np.linspace(0, 1, 1000), the confidence axis
#define AP_POINTS 101     // compute_ap: 101-point interpolation (COCO)
// smooth(f1, f=0.1): nf = round(1000 * 0.1 * 2) // 2 + 1 = 101 taps, 50 of padding per side.
#define SMOOTH_TAPS 101

typedef struct Record {
    float score;
    int32_t cls;
    uint16_t tp;   // bit t: true positive at IoU threshold t
    int64_t order; // position of arrival, so that sorting by score is stable
} Record;

struct MapEval {
    int n_classes;
    int64_t n_images;
    int64_t *n_gt; // (n_classes)
    Record *records;
    int64_t n_records, cap_records;
    float iou_thresholds[MAP_N_IOU];
};

// torch.linspace(0.5, 0.95, 10) in float32 as its CPU kernel computes it (the scalar path:
// start + step*i for the first half, end - step*(steps-1-i) for the second), because
// match_predictions compares float32 IoUs against exactly these values.
static void iou_thresholds(float *t) {
    const float start = 0.5f, end = 0.95f, step = (end - start) / (float)(MAP_N_IOU - 1);
    for (int i = 0; i < MAP_N_IOU; i++)
        t[i] =
            i < MAP_N_IOU / 2 ? start + step * (float)i : end - step * (float)(MAP_N_IOU - 1 - i);
}

MapEval *map_eval_new(int n_classes) {
    CHECK(n_classes > 0, "n_classes %d", n_classes);
    MapEval *e = xcalloc(1, sizeof *e);
    e->n_classes = n_classes;
    e->n_gt = xcalloc((size_t)n_classes, sizeof(int64_t));
    iou_thresholds(e->iou_thresholds);
    return e;
}

void map_eval_free(MapEval *e) {
    if (!e) return;
    free(e->n_gt);
    free(e->records);
    free(e);
}

// Descending score, then arrival order: a stable sort (numpy's argsort leaves ties unordered).
static int by_score_desc(const void *pa, const void *pb) {
    const Record *a = pa, *b = pb;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    return (a->order > b->order) - (a->order < b->order);
}

// match_predictions for one image and one threshold. iou (n_gt, n_pred) with wrong-class
// pairs zeroed, predictions in descending score. Sets bit t of rec[d].tp for each winner.
// best_gt (n_pred) is scratch.
static void match_threshold(const float *iou, int64_t n_gt, int64_t n_pred, float threshold, int t,
                            Record *rec, int64_t *best_gt) {
    // Each prediction's highest-IoU GT among those at or above the threshold. numpy sorts
    // the (gt, pred) pairs by IoU and reverses, so among equal IoUs the larger GT index comes
    // first (for small arrays, where its sort is stable; unspecified beyond).
    for (int64_t d = 0; d < n_pred; d++) {
        best_gt[d] = -1;
        float best = 0;
        for (int64_t g = 0; g < n_gt; g++) {
            float v = iou[g * n_pred + d];
            if (v >= threshold && (best_gt[d] < 0 || v >= best)) best = v, best_gt[d] = g;
        }
    }
    // Each GT keeps the first (highest-scoring) prediction that picked it: np.unique over the
    // GT column of the pairs, which by then are in prediction order.
    for (int64_t g = 0; g < n_gt; g++) {
        for (int64_t d = 0; d < n_pred; d++) {
            if (best_gt[d] == g) {
                rec[d].tp |= (uint16_t)(1u << t);
                break;
            }
        }
    }
}

void map_eval_add_image(MapEval *e, int64_t n_pred, const float *pred_xyxy, const float *pred_score,
                        const int32_t *pred_cls, int64_t n_gt, const float *gt_xyxy,
                        const int32_t *gt_cls) {
    CHECK(n_pred >= 0 && n_gt >= 0, "n_pred %lld n_gt %lld", (long long)n_pred, (long long)n_gt);
    e->n_images++;
    for (int64_t g = 0; g < n_gt; g++) {
        CHECK(gt_cls[g] >= 0 && gt_cls[g] < e->n_classes, "gt class %d outside [0, %d)", gt_cls[g],
              e->n_classes);
        e->n_gt[gt_cls[g]]++;
    }
    if (n_pred == 0) return;

    if (e->n_records + n_pred > e->cap_records) {
        e->cap_records = MAX(2 * e->cap_records, e->n_records + n_pred);
        e->records = xrealloc(e->records, (size_t)e->cap_records * sizeof(Record));
    }
    Record *rec = e->records + e->n_records;
    for (int64_t d = 0; d < n_pred; d++) {
        CHECK(pred_cls[d] >= 0 && pred_cls[d] < e->n_classes, "predicted class %d outside [0, %d)",
              pred_cls[d], e->n_classes);
        CHECK(isfinite(pred_score[d]), "prediction %lld has score %g", (long long)d, pred_score[d]);
        rec[d] = (Record){.score = pred_score[d], .cls = pred_cls[d], .tp = 0, .order = d};
    }
    qsort(rec, (size_t)n_pred, sizeof *rec, by_score_desc);

    if (n_gt > 0) {
        float *boxes = xmalloc((size_t)n_pred * 4 * sizeof(float));
        for (int64_t d = 0; d < n_pred; d++)
            memcpy(boxes + 4 * d, pred_xyxy + 4 * rec[d].order, 16);
        float *iou = xmalloc((size_t)(n_gt * n_pred) * sizeof(float));
        boxes_iou_xyxy_matrix(n_gt, gt_xyxy, n_pred, boxes, iou);
        for (int64_t g = 0; g < n_gt; g++)
            for (int64_t d = 0; d < n_pred; d++)
                if (gt_cls[g] != rec[d].cls) iou[g * n_pred + d] = 0;
        int64_t *best_gt = xmalloc((size_t)n_pred * sizeof(int64_t));
        for (int t = 0; t < MAP_N_IOU; t++)
            match_threshold(iou, n_gt, n_pred, e->iou_thresholds[t], t, rec, best_gt);
        free(best_gt);
        free(iou);
        free(boxes);
    }
    for (int64_t d = 0; d < n_pred; d++)
        rec[d].order = e->n_records + d;
    e->n_records += n_pred;
}

// ---- numpy, as ap_per_class uses it ----

// np.linspace(0, 1, n)[k]: k * (1/(n-1)), the last point exactly 1.
static double linspace01(int k, int n) {
    return k == n - 1 ? 1.0 : k * (1.0 / (n - 1));
}

// np.interp(x, xp, fp, left, right) for xp ascending (repeats allowed, n >= 1): outside
// [xp[0], xp[n-1]] left or right; else j = the last index with xp[j] <= x, and fp[j] when
// x == xp[j] or j == n-1, the straight line from j to j+1 otherwise.
static double interp(double x, const double *xp, const double *fp, int64_t n, double left,
                     double right) {
    if (x > xp[n - 1]) return right;
    if (x < xp[0]) return left;
    int64_t lo = 0, hi = n; // bisect for the first index with xp > x
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (x >= xp[mid])
            lo = mid + 1;
        else
            hi = mid;
    }
    int64_t j = lo - 1;
    if (j == n - 1 || xp[j] == x) return fp[j];
    double slope = (fp[j + 1] - fp[j]) / (xp[j + 1] - xp[j]);
    double y = slope * (x - xp[j]) + fp[j];
    if (isnan(y)) { // numpy: if we get NaN in one direction, try the other
        y = slope * (x - xp[j + 1]) + fp[j + 1];
        if (isnan(y) && fp[j] == fp[j + 1]) y = fp[j];
    }
    return y;
}

// compute_ap(recall, precision) with the 'interp' method. mrec, mpre are scratch (n + 2).
static double compute_ap(const double *recall, const double *precision, int64_t n, double *mrec,
                         double *mpre) {
    mrec[0] = 0.0, mpre[0] = 1.0;
    for (int64_t i = 0; i < n; i++)
        mrec[i + 1] = recall[i], mpre[i + 1] = precision[i];
    mrec[n + 1] = 1.0, mpre[n + 1] = 0.0;
    for (int64_t i = n; i >= 0; i--)
        mpre[i] = fmax(mpre[i], mpre[i + 1]); // the envelope

    double ap = 0, x0 = 0, y0 = interp(0.0, mrec, mpre, n + 2, mpre[0], mpre[n + 1]);
    for (int k = 1; k < AP_POINTS; k++) { // np.trapz
        double x1 = linspace01(k, AP_POINTS);
        double y1 = interp(x1, mrec, mpre, n + 2, mpre[0], mpre[n + 1]);
        ap += (x1 - x0) * (y0 + y1) / 2.0;
        x0 = x1, y0 = y1;
    }
    return ap;
}

// ---- ap_per_class ----

// One class: its precision and recall curves over the confidence axis (p_curve, r_curve,
// CURVE_POINTS each) and AP per threshold. rec: the class's records by descending score.
// Scratch: 5 * n_rec + 4 doubles in work.
static void class_curves(const Record *rec, int64_t n_rec, int64_t n_gt, double *p_curve,
                         double *r_curve, double *ap, double *work) {
    double *neg_conf = work, *recall = work + n_rec, *precision = work + 2 * n_rec;
    double *mrec = work + 3 * n_rec, *mpre = mrec + n_rec + 2;
    for (int64_t i = 0; i < n_rec; i++)
        neg_conf[i] = -(double)rec[i].score;

    for (int t = 0; t < MAP_N_IOU; t++) {
        double tpc = 0, fpc = 0;
        for (int64_t i = 0; i < n_rec; i++) {
            bool tp = rec[i].tp >> t & 1;
            tpc += tp, fpc += !tp;
            recall[i] = tpc / ((double)n_gt + 1e-16);
            precision[i] = tpc / (tpc + fpc);
        }
        ap[t] = compute_ap(recall, precision, n_rec, mrec, mpre);
        if (t == 0) { // the curves are those at IoU 0.5
            for (int k = 0; k < CURVE_POINTS; k++) {
                double nx = -linspace01(k, CURVE_POINTS);
                r_curve[k] = interp(nx, neg_conf, recall, n_rec, 0.0, recall[n_rec - 1]);
                p_curve[k] = interp(nx, neg_conf, precision, n_rec, 1.0, precision[n_rec - 1]);
            }
        }
    }
}

// smooth(y, 0.1).argmax(): y padded with 50 copies of each end, box filter of 101 taps
// (np.convolve with np.ones(101)/101), the first index of the maximum.
static int smoothed_argmax(const double *y) {
    const int half = SMOOTH_TAPS / 2;
    const double tap = 1.0 / SMOOTH_TAPS;
    int best = 0;
    double best_v = -INFINITY;
    for (int i = 0; i < CURVE_POINTS; i++) {
        double s = 0;
        for (int k = i - half; k <= i + half; k++)
            s += y[MIN(MAX(k, 0), CURVE_POINTS - 1)] * tap;
        if (s > best_v) best_v = s, best = i;
    }
    return best;
}

void map_eval_compute(const MapEval *e, MapResult *out) {
    int K = e->n_classes;
    memset(out, 0, sizeof *out);
    out->n_classes = K;
    out->classes = xcalloc((size_t)K, sizeof(MapClass));
    out->n_images = e->n_images;
    for (int c = 0; c < K; c++) {
        out->classes[c].n_gt = e->n_gt[c];
        out->n_gt += e->n_gt[c];
        out->n_classes_with_gt += e->n_gt[c] > 0;
    }
    // DetectionValidator.get_stats: `if len(stats) and stats["tp"].any()`, else all zero.
    bool any_tp = false;
    for (int64_t i = 0; i < e->n_records && !any_tp; i++)
        any_tp = e->records[i].tp != 0;
    if (!any_tp || out->n_classes_with_gt == 0) return;

    // All records by descending score, then grouped by class keeping that order.
    int64_t n = e->n_records;
    Record *sorted = xmalloc((size_t)n * sizeof(Record)),
           *by_class = xmalloc((size_t)n * sizeof(Record));
    memcpy(sorted, e->records, (size_t)n * sizeof(Record));
    qsort(sorted, (size_t)n, sizeof(Record), by_score_desc);
    int64_t *start = xcalloc((size_t)K + 1, sizeof(int64_t));
    for (int64_t i = 0; i < n; i++)
        start[sorted[i].cls + 1]++;
    for (int c = 0; c < K; c++)
        start[c + 1] += start[c];
    int64_t *fill = xmalloc((size_t)K * sizeof(int64_t));
    memcpy(fill, start, (size_t)K * sizeof(int64_t));
    for (int64_t i = 0; i < n; i++)
        by_class[fill[sorted[i].cls]++] = sorted[i];

    // Curves of the classes with GT (ap_per_class's unique target classes); a class with GT
    // but no prediction keeps zero curves and zero AP.
    int n_u = out->n_classes_with_gt;
    double *p_curve = xcalloc((size_t)n_u * CURVE_POINTS, sizeof(double));
    double *r_curve = xcalloc((size_t)n_u * CURVE_POINTS, sizeof(double));
    int *class_of = xmalloc((size_t)n_u * sizeof(int));
    double *work = xmalloc((size_t)(5 * n + 4) * sizeof(double)); // class_curves' scratch
    for (int c = 0, u = 0; c < K; c++) {
        if (e->n_gt[c] == 0) continue;
        class_of[u] = c;
        int64_t n_rec = start[c + 1] - start[c];
        if (n_rec > 0)
            class_curves(by_class + start[c], n_rec, e->n_gt[c], p_curve + u * CURVE_POINTS,
                         r_curve + u * CURVE_POINTS, out->classes[c].ap, work);
        u++;
    }

    // The confidence where the smoothed mean F1 over classes peaks; P and R are read there.
    double *f1_mean = xcalloc(CURVE_POINTS, sizeof(double));
    for (int k = 0; k < CURVE_POINTS; k++) {
        for (int u = 0; u < n_u; u++) {
            double p = p_curve[u * CURVE_POINTS + k], r = r_curve[u * CURVE_POINTS + k];
            f1_mean[k] += 2 * p * r / (p + r + 1e-16);
        }
        f1_mean[k] /= n_u;
    }
    int at = smoothed_argmax(f1_mean);

    for (int u = 0; u < n_u; u++) {
        MapClass *mc = &out->classes[class_of[u]];
        mc->precision = p_curve[u * CURVE_POINTS + at];
        mc->recall = r_curve[u * CURVE_POINTS + at];
        for (int t = 0; t < MAP_N_IOU; t++)
            mc->ap50_95 += mc->ap[t] / MAP_N_IOU;
        out->precision += mc->precision / n_u;
        out->recall += mc->recall / n_u;
        out->map50 += mc->ap[0] / n_u;
        out->map75 += mc->ap[5] / n_u;
        out->map50_95 += mc->ap50_95 / n_u;
    }

    free(f1_mean);
    free(work);
    free(class_of);
    free(r_curve);
    free(p_curve);
    free(fill);
    free(start);
    free(by_class);
    free(sorted);
}

void map_result_free(MapResult *r) {
    free(r->classes);
    memset(r, 0, sizeof *r);
}
