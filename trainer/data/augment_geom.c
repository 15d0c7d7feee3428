/* augment_geom.c -- Mosaic, RandomPerspective and a training sample's whole pipeline
 * (augment.h), after Ultralytics' data/augment.py (Mosaic._mosaic4, _cat_labels,
 * RandomPerspective.affine_transform, apply_bboxes, box_candidates). Boxes travel as pixel
 * corners (x1 y1 x2 y2) between the geometric steps, normalised cx cy w h outside them. */
#include "trainer/data/augment.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base.h" // CHECK, MIN, MAX, xmalloc

#define BORDER_GREY 114 // Ultralytics' fill for mosaic canvases and warps

// uniform(lo, hi) as Python's random.uniform: lo + (hi - lo) * u.
static double uniform(Rng *rng, double lo, double hi) { return lo + (hi - lo) * rng_uniform(rng); }

static void clip_box(float *b, float w, float h) {
    b[0] = fminf(fmaxf(b[0], 0), w), b[2] = fminf(fmaxf(b[2], 0), w);
    b[1] = fminf(fmaxf(b[1], 0), h), b[3] = fminf(fmaxf(b[3], 0), h);
}

int augment_mosaic4(Image *const tiles[4], const Box *const tile_boxes[4], const int counts[4],
                    Rng *rng, Image *canvas, int *cls, float *xyxy) {
    const int s = tiles[0]->w, s2 = 2 * s;
    // yc, xc = (int(random.uniform(-x, 2 * s + x)) for x in border), border = (-s // 2, -s // 2)
    int half = s / 2; // -(-s // 2) is ceil(s / 2): the same for even s (imgsz is a multiple of 32)
    int yc = (int)uniform(rng, half, s2 - half), xc = (int)uniform(rng, half, s2 - half);
    image_init(canvas, s2, s2);
    memset(canvas->rgb, BORDER_GREY, (size_t)s2 * s2 * 3);
    int n = 0;
    for (int i = 0; i < 4; i++) {
        const Image *t = tiles[i];
        int w = t->w, h = t->h, x1a, y1a, x2a, y2a, x1b, y1b;
        if (i == 0) { // top left
            x1a = MAX(xc - w, 0), y1a = MAX(yc - h, 0), x2a = xc, y2a = yc;
            x1b = w - (x2a - x1a), y1b = h - (y2a - y1a);
        } else if (i == 1) { // top right
            x1a = xc, y1a = MAX(yc - h, 0), x2a = MIN(xc + w, s2), y2a = yc;
            x1b = 0, y1b = h - (y2a - y1a);
        } else if (i == 2) { // bottom left
            x1a = MAX(xc - w, 0), y1a = yc, x2a = xc, y2a = MIN(s2, yc + h);
            x1b = w - (x2a - x1a), y1b = 0;
        } else { // bottom right
            x1a = xc, y1a = yc, x2a = MIN(xc + w, s2), y2a = MIN(s2, yc + h);
            x1b = 0, y1b = 0;
        }
        for (int y = 0; y < y2a - y1a; y++)
            memcpy(canvas->rgb + ((size_t)(y1a + y) * s2 + x1a) * 3,
                   t->rgb + ((size_t)(y1b + y) * w + x1b) * 3, (size_t)(x2a - x1a) * 3);
        float padw = (float)(x1a - x1b), padh = (float)(y1a - y1b);
        for (int k = 0; k < counts[i]; k++) { // _update_labels: xyxy, denormalise, add padding
            const Box *b = &tile_boxes[i][k];
            float *o = xyxy + 4 * n;
            o[0] = (b->cx - b->w / 2) * w + padw, o[1] = (b->cy - b->h / 2) * h + padh;
            o[2] = (b->cx + b->w / 2) * w + padw, o[3] = (b->cy + b->h / 2) * h + padh;
            clip_box(o, (float)s2, (float)s2); // _cat_labels: clip to the canvas ...
            if ((o[2] - o[0]) * (o[3] - o[1]) > 0) cls[n++] = b->cls; // ... drop zero areas
        }
    }
    return n;
}

// dst(x, y) = src(A^-1 (x, y)), bilinear, grey outside src (cv2.warpAffine, INTER_LINEAR,
// BORDER_CONSTANT 114; in float where OpenCV uses 5-bit fixed-point weights).
static void warp_affine(const Image *src, const double m[6], int dw, int dh, Image *dst) {
    double det = m[0] * m[4] - m[1] * m[3];
    CHECK(det != 0, "a singular affine matrix (scale 0?)");
    double i0 = m[4] / det, i1 = -m[1] / det, i3 = -m[3] / det, i4 = m[0] / det;
    double i2 = -(i0 * m[2] + i1 * m[5]), i5 = -(i3 * m[2] + i4 * m[5]);
    image_init(dst, dw, dh);
    for (int y = 0; y < dh; y++)
        for (int x = 0; x < dw; x++) {
            double sx = i0 * x + i1 * y + i2, sy = i3 * x + i4 * y + i5;
            int x0 = (int)floor(sx), y0 = (int)floor(sy);
            float fx = (float)(sx - x0), fy = (float)(sy - y0);
            uint8_t *o = dst->rgb + ((size_t)y * dw + x) * 3;
            for (int c = 0; c < 3; c++) {
                float v[2][2];
                for (int dy = 0; dy < 2; dy++)
                    for (int dx = 0; dx < 2; dx++) {
                        int px = x0 + dx, py = y0 + dy;
                        v[dy][dx] = px < 0 || py < 0 || px >= src->w || py >= src->h
                                        ? BORDER_GREY
                                        : src->rgb[((size_t)py * src->w + px) * 3 + c];
                    }
                float top = v[0][0] + (v[0][1] - v[0][0]) * fx;
                float bottom = v[1][0] + (v[1][1] - v[1][0]) * fx;
                o[c] = (uint8_t)lrintf(fminf(fmaxf(top + (bottom - top) * fy, 0), 255));
            }
        }
}

int augment_perspective(const AugmentConfig *cfg, Image *im, int border, int *cls, float *xyxy,
                        int n, Rng *rng) {
    const double deg = M_PI / 180;
    int w = im->w + 2 * border, h = im->h + 2 * border; // self.size
    CHECK(w > 0 && h > 0, "border %d leaves nothing of %dx%d", border, im->w, im->h);
    // The draws in affine_transform's order: perspective x and y (0 for RT-DETR: drawn, unused),
    // angle, scale, shear x, shear y, translation x, y.
    uniform(rng, 0, 0), uniform(rng, 0, 0);
    double a = uniform(rng, -cfg->degrees, cfg->degrees) * deg;
    double sc = uniform(rng, 1 - cfg->scale, 1 + cfg->scale);
    double shx = tan(uniform(rng, -cfg->shear, cfg->shear) * deg);
    double shy = tan(uniform(rng, -cfg->shear, cfg->shear) * deg);
    double tx = uniform(rng, 0.5 - cfg->translate, 0.5 + cfg->translate) * w;
    double ty = uniform(rng, 0.5 - cfg->translate, 0.5 + cfg->translate) * h;
    // M = T @ S @ R @ C: C centres the image, R = getRotationMatrix2D(a, (0, 0), sc) rotates and
    // scales, S shears, T translates into the output.
    double ca = sc * cos(a), sa = sc * sin(a), cx = -im->w / 2.0, cy = -im->h / 2.0;
    double r[6] = {ca, sa, ca * cx + sa * cy, -sa, ca, -sa * cx + ca * cy}; // R @ C
    double m[6] = {r[0] + shx * r[3], r[1] + shx * r[4], r[2] + shx * r[5] + tx,
                   shy * r[0] + r[3], shy * r[1] + r[4], shy * r[2] + r[5] + ty}; // T @ S @ (R C)
    bool identity = m[0] == 1 && m[1] == 0 && m[2] == 0 && m[3] == 0 && m[4] == 1 && m[5] == 0;
    if (border != 0 || !identity) {
        Image out;
        warp_affine(im, m, w, h, &out);
        image_free(im);
        *im = out;
    }
    int kept = 0;
    for (int i = 0; i < n; i++) {
        const float *b = xyxy + 4 * i;
        // apply_bboxes: the four corners through M, their bounding box; then clip to the size
        const float corners[4][2] = {{b[0], b[1]}, {b[2], b[3]}, {b[0], b[3]}, {b[2], b[1]}};
        float nb[4] = {INFINITY, INFINITY, -INFINITY, -INFINITY};
        for (int k = 0; k < 4; k++) {
            float x = (float)(m[0] * corners[k][0] + m[1] * corners[k][1] + m[2]);
            float y = (float)(m[3] * corners[k][0] + m[4] * corners[k][1] + m[5]);
            nb[0] = fminf(nb[0], x), nb[1] = fminf(nb[1], y);
            nb[2] = fmaxf(nb[2], x), nb[3] = fmaxf(nb[3], y);
        }
        clip_box(nb, (float)w, (float)h);
        // box_candidates(box1 = the original scaled by sc, box2 = nb): wh_thr 2, ar_thr 100,
        // area_thr 0.1, eps 1e-16
        double w1 = (b[2] - b[0]) * sc, h1 = (b[3] - b[1]) * sc;
        double w2 = nb[2] - nb[0], h2 = nb[3] - nb[1];
        double ar = fmax(w2 / (h2 + 1e-16), h2 / (w2 + 1e-16));
        if (!(w2 > 2 && h2 > 2 && w2 * h2 / (w1 * h1 + 1e-16) > 0.1 && ar < 100)) continue;
        memcpy(xyxy + 4 * kept, nb, sizeof nb);
        cls[kept++] = cls[i];
    }
    return kept;
}

// Dataset image idx, stretched to s x s as the loader does, and its boxes.
static int load_partner(const Dataset *ds, int64_t idx, int s, Image *im, const Box **boxes,
                        int *n, char *err, size_t errlen) {
    Image raw;
    if (image_load(&raw, ds->image_paths[idx], err, errlen)) return -1;
    image_resize(&raw, s, s, im);
    image_free(&raw);
    *n = ds->box_start[idx + 1] - ds->box_start[idx];
    *boxes = *n ? ds->boxes + ds->box_start[idx] : NULL;
    return 0;
}

int augment_sample(const AugmentConfig *cfg, const Dataset *ds, Image *im, Box **boxes, int *n,
                   Rng *rng, char *err, size_t errlen) {
    const int s = im->w;
    CHECK(im->h == s && cfg->fliplr >= 0 && cfg->fliplr <= 1 && cfg->mosaic >= 0 &&
              cfg->mosaic <= 1,
          "augment_sample: %dx%d image, fliplr %g, mosaic %g", im->w, im->h, cfg->fliplr,
          cfg->mosaic);
    // Mosaic (BaseMixTransform: skipped when uniform(0, 1) > p), three partners from ds
    bool mosaic = cfg->mosaic > 0 && rng_uniform(rng) <= cfg->mosaic && ds->n_images > 0;
    int total = *n;
    Image partners[3] = {{0}};
    const Box *partner_boxes[3] = {NULL};
    int partner_n[3] = {0};
    for (int k = 0; mosaic && k < 3; k++) {
        int64_t idx = (int64_t)rng_below(rng, (uint64_t)ds->n_images);
        if (load_partner(ds, idx, s, &partners[k], &partner_boxes[k], &partner_n[k], err,
                         errlen)) {
            for (int j = 0; j < k; j++)
                image_free(&partners[j]);
            return -1;
        }
        total += partner_n[k];
    }
    int *cls = xmalloc(sizeof(int) * (size_t)MAX(total, 1));
    float *xyxy = xmalloc(sizeof(float) * 4 * (size_t)MAX(total, 1));
    int m;
    if (mosaic) {
        Image *tiles[4] = {im, &partners[0], &partners[1], &partners[2]};
        const Box *tile_boxes[4] = {*boxes, partner_boxes[0], partner_boxes[1], partner_boxes[2]};
        int counts[4] = {*n, partner_n[0], partner_n[1], partner_n[2]};
        Image canvas;
        m = augment_mosaic4(tiles, tile_boxes, counts, rng, &canvas, cls, xyxy);
        for (int k = 0; k < 3; k++)
            image_free(&partners[k]);
        image_free(im);
        *im = canvas;
    } else {
        for (m = 0; m < *n; m++) {
            const Box *b = &(*boxes)[m];
            float *o = xyxy + 4 * m;
            o[0] = (b->cx - b->w / 2) * s, o[1] = (b->cy - b->h / 2) * s;
            o[2] = (b->cx + b->w / 2) * s, o[3] = (b->cy + b->h / 2) * s;
            cls[m] = b->cls;
        }
    }
    if (cfg->degrees || cfg->translate || cfg->scale || cfg->shear)
        m = augment_perspective(cfg, im, mosaic ? -(s / 2) : 0, cls, xyxy, m, rng);
    CHECK(im->w == s && im->h == s, "the sample is %dx%d, expected %dx%d", im->w, im->h, s, s);
    free(*boxes);
    *boxes = xmalloc(sizeof(Box) * (size_t)MAX(m, 1));
    for (int i = 0; i < m; i++) {
        const float *b = xyxy + 4 * i;
        (*boxes)[i] = (Box){.cls = cls[i],
                            .cx = (b[0] + b[2]) / 2 / s,
                            .cy = (b[1] + b[3]) / 2 / s,
                            .w = (b[2] - b[0]) / s,
                            .h = (b[3] - b[1]) / s};
    }
    *n = m;
    free(cls);
    free(xyxy);
    augment_hsv(im, cfg->hsv_h, cfg->hsv_s, cfg->hsv_v, rng);
    augment_flip_lr(im, *boxes, m, cfg->fliplr, rng);
    return 0;
}
