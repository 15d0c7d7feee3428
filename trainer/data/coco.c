/* coco.c -- a COCO instances json as a Dataset (dataset.h): images, annotations and
 * categories; bbox [x, y, w, h] in pixels becomes a normalised (cx, cy, w, h). Errors name the
 * json, the line:column of the offending value and the field (annotations[3].bbox). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>

#include "kernels/base.h" // CHECK, xmalloc
#include "trainer/data/dataset.h"
#include "trainer/data/json.h"

typedef struct Ctx {
    const char *file;
    char *err;
    size_t errlen;
} Ctx;

static int fail(Ctx *c, const Json *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(Ctx *c, const Json *at, const char *fmt, ...) {
    int off = snprintf(c->err, c->errlen, "%s:%d:%d: ", c->file, at->line, at->col);
    if (off >= 0 && (size_t)off < c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err + off, c->errlen - (size_t)off, fmt, ap);
        va_end(ap);
    }
    return -1;
}

// obj[key] of the wanted type; NULL (message in err) when absent or of another type.
static const Json *field(Ctx *c, const Json *obj, const char *what, int index, const char *key,
                         JsonType type) {
    const Json *v = json_get(obj, key);
    if (!v) {
        fail(c, obj, "%s[%d]: missing \"%s\"", what, index, key);
        return NULL;
    }
    if (v->type != type) {
        fail(c, v, "%s[%d].%s: expected %s, got %s", what, index, key, json_type_name(type),
             json_type_name(v->type));
        return NULL;
    }
    return v;
}

static int int_field(Ctx *c, const Json *obj, const char *what, int index, const char *key,
                     long long *out) {
    const Json *v = field(c, obj, what, index, key, JSON_NUMBER);
    if (!v) return -1;
    if (v->number != floor(v->number) || fabs(v->number) > 9e15)
        return fail(c, v, "%s[%d].%s: expected an integer, got %g", what, index, key, v->number);
    *out = (long long)v->number;
    return 0;
}

static const Json *top_array(Ctx *c, const Json *root, const char *key) {
    const Json *v = json_get(root, key);
    if (!v) {
        fail(c, root, "missing \"%s\" (a COCO instances file has images, annotations, categories)",
             key);
        return NULL;
    }
    if (v->type != JSON_ARRAY) {
        fail(c, v, "%s: expected an array, got %s", key, json_type_name(v->type));
        return NULL;
    }
    return v;
}

typedef struct IdIndex {
    long long id;
    int index;
} IdIndex;

static int compare_ids(const void *a, const void *b) {
    long long x = ((const IdIndex *)a)->id, y = ((const IdIndex *)b)->id;
    return x < y ? -1 : x > y;
}

static int find_id(const IdIndex *ids, int n, long long id) {
    IdIndex key = {id, 0};
    const IdIndex *hit = bsearch(&key, ids, (size_t)n, sizeof key, compare_ids);
    return hit ? hit->index : -1;
}

// Sorted (id, position) pairs of an array of objects with an integer "id"; duplicates fail.
static IdIndex *index_ids(Ctx *c, const Json *arr, const char *what) {
    IdIndex *ids = xmalloc(sizeof(IdIndex) * (size_t)MAX(arr->n, 1));
    for (int i = 0; i < arr->n; i++) {
        if (arr->items[i].type != JSON_OBJECT) {
            fail(c, &arr->items[i], "%s[%d]: expected an object", what, i);
            return free(ids), NULL;
        }
        if (int_field(c, &arr->items[i], what, i, "id", &ids[i].id)) return free(ids), NULL;
        ids[i].index = i;
    }
    qsort(ids, (size_t)arr->n, sizeof(IdIndex), compare_ids);
    for (int i = 1; i < arr->n; i++)
        if (ids[i].id == ids[i - 1].id) {
            fail(c, &arr->items[ids[i].index], "%s: id %lld appears twice", what, ids[i].id);
            return free(ids), NULL;
        }
    return ids;
}

// One annotation as a normalised box; 1 when it is skipped (crowd, empty), -1 on error.
static int read_annotation(Ctx *c, const Json *a, int i, const Json *images, const IdIndex *img_ids,
                           const IdIndex *cat_ids, int nc, int *image, Box *box) {
    if (a->type != JSON_OBJECT) return fail(c, a, "annotations[%d]: expected an object", i);
    long long image_id, cat_id, crowd = 0;
    if (int_field(c, a, "annotations", i, "image_id", &image_id) ||
        int_field(c, a, "annotations", i, "category_id", &cat_id))
        return -1;
    if (json_get(a, "iscrowd") && int_field(c, a, "annotations", i, "iscrowd", &crowd)) return -1;
    const Json *bbox = field(c, a, "annotations", i, "bbox", JSON_ARRAY);
    if (!bbox) return -1;
    if (bbox->n != 4) return fail(c, bbox, "annotations[%d].bbox: expected [x, y, w, h]", i);
    double xywh[4];
    for (int k = 0; k < 4; k++) {
        if (bbox->items[k].type != JSON_NUMBER)
            return fail(c, &bbox->items[k], "annotations[%d].bbox: expected 4 numbers", i);
        xywh[k] = bbox->items[k].number;
    }
    *image = find_id(img_ids, images->n, image_id);
    if (*image < 0)
        return fail(c, json_get(a, "image_id"), "annotations[%d].image_id: no image has id %lld", i,
                    image_id);
    int cls = -1;
    for (int k = 0; k < nc && cls < 0; k++)
        if (cat_ids[k].id == cat_id) cls = k;
    if (cls < 0)
        return fail(c, json_get(a, "category_id"),
                    "annotations[%d].category_id: no category has id %lld", i, cat_id);
    if (crowd) return 1;
    const Json *img = &images->items[*image];
    double w = json_get(img, "width")->number, h = json_get(img, "height")->number;
    double x0 = fmax(xywh[0], 0), y0 = fmax(xywh[1], 0);
    double x1 = fmin(xywh[0] + xywh[2], w), y1 = fmin(xywh[1] + xywh[3], h);
    if (xywh[2] <= 0 || xywh[3] <= 0 || x1 <= x0 || y1 <= y0) return 1;
    *box = (Box){cls, (float)((x0 + x1) / 2 / w), (float)((y0 + y1) / 2 / h), (float)((x1 - x0) / w),
                 (float)((y1 - y0) / h)};
    return 0;
}

static int read_coco(Ctx *c, const Json *root, const char *image_dir, Dataset *ds) {
    if (root->type != JSON_OBJECT) return fail(c, root, "expected an object");
    const Json *images = top_array(c, root, "images"), *anns = NULL, *cats = NULL;
    if (!images || !(anns = top_array(c, root, "annotations")) ||
        !(cats = top_array(c, root, "categories")))
        return -1;
    if (images->n == 0) return fail(c, images, "images: expected at least one image");
    if (cats->n == 0) return fail(c, cats, "categories: expected at least one category");
    IdIndex *img_ids = index_ids(c, images, "images"), *cat_ids = NULL;
    if (!img_ids || !(cat_ids = index_ids(c, cats, "categories"))) return free(img_ids), -1;
    int rc = 0;
    ds->nc = cats->n;
    ds->names = xcalloc((size_t)cats->n, sizeof(char *));
    for (int k = 0; k < cats->n && !rc; k++) {
        const Json *name = field(c, &cats->items[cat_ids[k].index], "categories", cat_ids[k].index,
                                 "name", JSON_STRING);
        if (name) ds->names[k] = xstrdup(name->string);
        else rc = -1;
    }
    ds->n_images = images->n;
    ds->image_paths = xcalloc((size_t)images->n, sizeof(char *));
    for (int i = 0; i < images->n && !rc; i++) {
        const Json *img = &images->items[i], *file;
        long long w, h;
        if (!(file = field(c, img, "images", i, "file_name", JSON_STRING)) ||
            int_field(c, img, "images", i, "width", &w) || int_field(c, img, "images", i, "height", &h))
            rc = -1;
        else if (w < 1 || h < 1)
            rc = fail(c, img, "images[%d]: width and height must be positive, got %lld x %lld", i, w, h);
        else {
            size_t n = strlen(image_dir) + strlen(file->string) + 2;
            ds->image_paths[i] = xmalloc(n);
            snprintf(ds->image_paths[i], n, "%s/%s", image_dir, file->string);
        }
    }
    // Boxes grouped by image in annotation order: count, prefix-sum, fill.
    int *image_of = xmalloc(sizeof(int) * (size_t)MAX(anns->n, 1));
    Box *box_of = xmalloc(sizeof(Box) * (size_t)MAX(anns->n, 1));
    ds->box_start = xcalloc((size_t)images->n + 1, sizeof(int));
    for (int i = 0; i < anns->n && !rc; i++) {
        int r = read_annotation(c, &anns->items[i], i, images, img_ids, cat_ids, cats->n,
                                &image_of[i], &box_of[i]);
        if (r < 0) rc = -1;
        if (r != 0) image_of[i] = -1;
        else ds->box_start[image_of[i] + 1]++;
    }
    if (!rc) {
        for (int i = 0; i < images->n; i++) ds->box_start[i + 1] += ds->box_start[i];
        ds->boxes = xmalloc(sizeof(Box) * (size_t)MAX(ds->box_start[images->n], 1));
        int *fill = xmalloc(sizeof(int) * (size_t)images->n);
        memcpy(fill, ds->box_start, sizeof(int) * (size_t)images->n);
        for (int i = 0; i < anns->n; i++)
            if (image_of[i] >= 0) ds->boxes[fill[image_of[i]]++] = box_of[i];
        free(fill);
    }
    free(image_of), free(box_of), free(img_ids), free(cat_ids);
    return rc;
}

int dataset_load_coco(Dataset *ds, const char *json_path, const char *image_dir, char *err,
                      size_t errlen) {
    memset(ds, 0, sizeof *ds);
    FILE *f = fopen(json_path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", json_path, strerror(errno));
        return -1;
    }
    size_t cap = 1 << 16, len = 0;
    char *text = xmalloc(cap);
    while ((len += fread(text + len, 1, cap - len, f)) == cap) text = xrealloc(text, cap *= 2);
    bool read_error = ferror(f);
    fclose(f);
    if (read_error) {
        snprintf(err, errlen, "%s: cannot read: %s", json_path, strerror(errno));
        return free(text), -1;
    }
    Json root;
    int rc = json_parse(&root, json_path, text, len, err, errlen);
    free(text);
    if (rc) return -1;
    Ctx c = {json_path, err, errlen};
    rc = read_coco(&c, &root, image_dir, ds);
    json_free(&root);
    if (rc) {
        // dataset_free walks nc names and n_images paths, some of which may still be NULL.
        dataset_free(ds);
    }
    return rc;
}
