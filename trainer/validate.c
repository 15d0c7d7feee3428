/* validate.c -- the validation pass and its table (validate.h). */
#include "trainer/validate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base.h" // CHECK, xmalloc
#include "trainer/data/batch.h"

typedef struct ScoredQuery {
    float score;
    int32_t index;
} ScoredQuery;

// Descending score, ties by query index (a deterministic order).
static int by_score_desc(const void *a, const void *b) {
    const ScoredQuery *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? 1 : -1;
    return (x->index > y->index) - (x->index < y->index);
}

static float sigmoidf(float x) {
    return 1.0f / (1.0f + expf(-x));
}

// cx, cy, w, h (normalised) -> x1, y1, x2, y2 in pixels of size s.
static void cxcywh_to_xyxy(const float *c, float s, float *xyxy) {
    xyxy[0] = (c[0] - 0.5f * c[2]) * s;
    xyxy[1] = (c[1] - 0.5f * c[3]) * s;
    xyxy[2] = (c[0] + 0.5f * c[2]) * s;
    xyxy[3] = (c[1] + 0.5f * c[3]) * s;
}

// One image's predictions: bboxes (Q,4) sigmoid cxcywh, logits (Q,K); then its ground truth.
static void add_image(MapEval *e, const float *bboxes, const float *logits, int64_t nq, int nc,
                      double conf, int imgsz, const Batch *b, int image, const int *box_first) {
    ScoredQuery *q = xmalloc(sizeof *q * (size_t)nq);
    int32_t *cls_of = xmalloc(sizeof *cls_of * (size_t)nq);
    int64_t n_kept = 0;
    for (int64_t i = 0; i < nq; i++) {
        const float *row = logits + i * nc;
        int best = 0;
        for (int k = 1; k < nc; k++)
            if (row[k] > row[best]) best = k;
        float score = sigmoidf(row[best]);
        cls_of[i] = best;
        if (score > conf) q[n_kept++] = (ScoredQuery){score, (int32_t)i}; // drops NaN too
    }
    qsort(q, (size_t)n_kept, sizeof *q, by_score_desc);
    float *pred_xyxy = xmalloc(sizeof(float) * 4 * (size_t)(n_kept + 1));
    float *pred_score = xmalloc(sizeof(float) * (size_t)(n_kept + 1));
    int32_t *pred_cls = xmalloc(sizeof(int32_t) * (size_t)(n_kept + 1));
    for (int64_t j = 0; j < n_kept; j++) {
        cxcywh_to_xyxy(bboxes + 4 * q[j].index, (float)imgsz, pred_xyxy + 4 * j);
        pred_score[j] = q[j].score;
        pred_cls[j] = cls_of[q[j].index];
    }
    int n_gt = b->counts[image], first = box_first[image];
    float *gt_xyxy = xmalloc(sizeof(float) * 4 * (size_t)(n_gt + 1));
    int32_t *gt_cls = xmalloc(sizeof(int32_t) * (size_t)(n_gt + 1));
    for (int j = 0; j < n_gt; j++) {
        cxcywh_to_xyxy(b->boxes + 4 * (first + j), (float)imgsz, gt_xyxy + 4 * j);
        gt_cls[j] = b->cls[first + j];
    }
    map_eval_add_image(e, n_kept, pred_xyxy, pred_score, pred_cls, n_gt, gt_xyxy, gt_cls);
    free(gt_cls);
    free(gt_xyxy);
    free(pred_cls);
    free(pred_score);
    free(pred_xyxy);
    free(cls_of);
    free(q);
}

int validate_run(Rtdetr *m, Tape *t, const Dataset *ds, int imgsz, int batch, double conf,
                 MapResult *out, char *err, size_t errlen) {
    CHECK(batch >= 1 && imgsz % 32 == 0, "batch %d imgsz %d", batch, imgsz);
    int nc = ds->nc;
    MapEval *e = map_eval_new(nc);
    bool was_training = t->training, had_grad = t->grad_enabled;
    t->training = false;
    t->grad_enabled = false;
    int64_t *indices = xmalloc(sizeof(int64_t) * (size_t)batch);
    int *box_first = xmalloc(sizeof(int) * (size_t)batch);
    int rc = 0;
    for (int start = 0; start < ds->n_images && rc == 0; start += batch) {
        int n = ds->n_images - start < batch ? ds->n_images - start : batch;
        for (int i = 0; i < n; i++)
            indices[i] = start + i;
        Batch b = {0};
        if (batch_load(&b, ds, indices, n, imgsz, NULL, 0, err, errlen)) {
            rc = -1;
            break;
        }
        tape_reset(t);
        Tensor *images = tensor_4d(t->arena, n, 3, imgsz, imgsz); // the batch upload
        tensor_write(images, b.images);
        RtdetrOutput o;
        rtdetr_forward(m, t, images, NULL, &o);
        // eval mode: one decoder layer, (1, B, Q, 4) and (1, B, Q, K), no denoising queries
        int64_t nq = o.dec_bboxes->shape[2];
        CHECK(o.n_dn == 0 && o.dec_scores->shape[3] == nc, "eval output n_dn %lld",
              (long long)o.n_dn);
        for (int i = 0, first = 0; i < n; first += b.counts[i], i++)
            box_first[i] = first;
        float *bboxes = tensor_host_copy(o.dec_bboxes), *scores = tensor_host_copy(o.dec_scores);
        for (int i = 0; i < n; i++)
            add_image(e, bboxes + (int64_t)i * nq * 4, scores + (int64_t)i * nq * nc, nq, nc,
                      conf, imgsz, &b, i, box_first);
        free(bboxes);
        free(scores);
        batch_free(&b);
    }
    tape_reset(t);
    t->training = was_training;
    t->grad_enabled = had_grad;
    free(box_first);
    free(indices);
    if (rc == 0) map_eval_compute(e, out);
    map_eval_free(e);
    return rc;
}

void validate_print_table(FILE *f, const MapResult *r, const Dataset *ds, bool per_class) {
    fprintf(f, "%22s%11s%11s%11s%11s%11s%11s\n", "Class", "Images", "Instances", "Box(P", "R",
            "mAP50", "mAP50-95)");
    fprintf(f, "%22s%11lld%11lld%11.3g%11.3g%11.3g%11.3g\n", "all", (long long)r->n_images,
            (long long)r->n_gt, r->precision, r->recall, r->map50, r->map50_95);
    if (!per_class || r->n_classes < 2) return;
    for (int k = 0; k < r->n_classes; k++) {
        const MapClass *c = &r->classes[k];
        if (c->n_gt == 0) continue;
        fprintf(f, "%22s%11lld%11lld%11.3g%11.3g%11.3g%11.3g\n", ds->names[k],
                (long long)r->n_images, (long long)c->n_gt, c->precision, c->recall, c->ap[0],
                c->ap50_95);
    }
}

double validate_fitness(const MapResult *r) {
    return 0.1 * r->map50 + 0.9 * r->map50_95;
}
