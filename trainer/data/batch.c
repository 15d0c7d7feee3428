/* batch.c -- decode, stretch, augment and collate one batch (batch.h). */
#include "trainer/data/batch.h"

#include "kernels/base.h" // CHECK, xmalloc
#include "trainer/rng.h"

void batch_free(Batch *b) {
    free(b->images), free(b->indices), free(b->orig_w), free(b->orig_h), free(b->counts);
    free(b->cls), free(b->boxes), free(b->batch_idx);
    memset(b, 0, sizeof *b);
}

// Image i of the batch: stretched, augmented, written as CHW floats; its boxes (malloc'd,
// augmentation decides how many) into *boxes and b->counts[i].
static int load_one(Batch *b, const Dataset *ds, int i, const AugmentConfig *aug,
                    uint64_t aug_seed, Box **boxes, char *err, size_t errlen) {
    int64_t idx = b->indices[i];
    Image raw, im;
    if (image_load(&raw, ds->image_paths[idx], err, errlen)) return -1;
    b->orig_w[i] = raw.w, b->orig_h[i] = raw.h;
    image_resize(&raw, b->imgsz, b->imgsz, &im);
    image_free(&raw);
    int n = ds->box_start[idx + 1] - ds->box_start[idx];
    *boxes = xmalloc(sizeof(Box) * (size_t)MAX(n, 1));
    if (n > 0) // a dataset without any box has ds->boxes NULL: no arithmetic on it
        memcpy(*boxes, ds->boxes + ds->box_start[idx], sizeof(Box) * (size_t)n);
    if (aug) {
        Rng rng;
        rng_init(&rng, aug_seed + (uint64_t)idx * 0x9E3779B97F4A7C15ull);
        if (augment_sample(aug, ds, &im, boxes, &n, &rng, err, errlen)) {
            image_free(&im);
            return -1;
        }
    }
    b->counts[i] = n;
    size_t plane = (size_t)b->imgsz * b->imgsz;
    float *out = b->images + (size_t)i * 3 * plane;
    for (size_t p = 0; p < plane; p++)
        for (int c = 0; c < 3; c++) out[c * plane + p] = im.rgb[p * 3 + c] / 255.0f;
    image_free(&im);
    return 0;
}

int batch_load(Batch *b, const Dataset *ds, const int64_t *indices, int n, int imgsz,
               const AugmentConfig *aug, uint64_t aug_seed, char *err, size_t errlen) {
    CHECK(n > 0 && imgsz > 0, "batch_load(n %d, imgsz %d)", n, imgsz);
    memset(b, 0, sizeof *b);
    b->n_images = n, b->imgsz = imgsz;
    b->images = xmalloc(sizeof(float) * (size_t)n * 3 * imgsz * imgsz);
    b->indices = xmalloc(sizeof(int64_t) * (size_t)n);
    b->orig_w = xmalloc(sizeof(int) * (size_t)n), b->orig_h = xmalloc(sizeof(int) * (size_t)n);
    b->counts = xcalloc((size_t)n, sizeof(int));
    Box **boxes = xcalloc((size_t)n, sizeof(Box *)); // image i's boxes, after augmentation
    for (int i = 0; i < n; i++) {
        CHECK(indices[i] >= 0 && indices[i] < ds->n_images, "index %lld of %d images",
              (long long)indices[i], ds->n_images);
        b->indices[i] = indices[i];
    }
    int failed = -1; // the lowest failing image, so that the message does not depend on timing
    char *errs = xcalloc((size_t)n, errlen);
#pragma omp parallel for schedule(dynamic)
    for (int i = 0; i < n; i++) {
        if (load_one(b, ds, i, aug, aug_seed, &boxes[i], errs + (size_t)i * errlen, errlen)) {
#pragma omp critical
            if (failed < 0 || i < failed) failed = i;
        }
    }
    if (failed >= 0) snprintf(err, errlen, "%s", errs + (size_t)failed * errlen);
    free(errs);
    if (failed < 0) {
        for (int i = 0; i < n; i++)
            b->n_boxes += b->counts[i];
        size_t m = (size_t)MAX(b->n_boxes, 1);
        b->cls = xmalloc(sizeof(int) * m);
        b->boxes = xmalloc(sizeof(float) * 4 * m);
        b->batch_idx = xmalloc(sizeof(int) * m);
        for (int i = 0, k = 0; i < n; i++)
            for (int j = 0; j < b->counts[i]; j++, k++) {
                const Box *x = &boxes[i][j];
                b->cls[k] = x->cls;
                float *o = b->boxes + 4 * k;
                o[0] = x->cx, o[1] = x->cy, o[2] = x->w, o[3] = x->h;
                b->batch_idx[k] = i;
            }
    }
    for (int i = 0; i < n; i++)
        free(boxes[i]);
    free(boxes);
    if (failed >= 0) batch_free(b);
    return failed >= 0 ? -1 : 0;
}
