/* synth.c -- the synthetic shapes dataset (synth.h): backgrounds (gradients, stripes, blobby
 * value noise, all muted and noisy), distractor marks (dots and short strokes, too small to be
 * objects), then the objects, drawn with 4x4 supersampled coverage and a light shading. */
#include "trainer/data/synth.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <sys/stat.h>

#include "kernels/base.h" // CHECK, xmalloc, mkdir_p
#include "trainer/rng.h"

enum { SHAPE_RECT, SHAPE_ELLIPSE, SHAPE_TRIANGLE, N_SHAPES };
static const char *shape_names[N_SHAPES] = {"rectangle", "ellipse", "triangle"};

#define N_COLOURS (SYNTH_MAX_CLASSES / N_SHAPES)
static const struct {
    const char *name;
    uint8_t rgb[3];
} palette[N_COLOURS] = {
    {"red", {220, 40, 40}},    {"green", {40, 175, 60}},   {"blue", {40, 80, 225}},
    {"yellow", {240, 205, 40}}, {"magenta", {200, 50, 200}}, {"cyan", {40, 200, 215}},
    {"orange", {245, 135, 30}}, {"white", {245, 245, 240}},
};

void synth_class_name(int k, int classes, char *out, size_t outlen) {
    CHECK(classes >= 1 && classes <= SYNTH_MAX_CLASSES && k >= 0 && k < classes, "class %d of %d",
          k, classes);
    if (classes <= N_SHAPES) snprintf(out, outlen, "%s", shape_names[k]);
    else snprintf(out, outlen, "%s_%s", palette[k / N_SHAPES].name, shape_names[k % N_SHAPES]);
}

static uint8_t clamp_u8(float v) { return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : lrintf(v)); }

// ---- backgrounds ----
// A muted colour: a grey level with a small tint, so that the palette colours stand out.
static void muted_colour(Rng *r, float out[3]) {
    float grey = rng_range(r, 50, 200);
    for (int c = 0; c < 3; c++) out[c] = grey + rng_range(r, -28, 28);
}

static void background(Image *im, Rng *r) {
    const int S = im->w;
    float a[3], b[3];
    muted_colour(r, a);
    muted_colour(r, b);
    int kind = (int)rng_below(r, 3);
    float angle = rng_range(r, 0, (float)M_PI), dx = cosf(angle), dy = sinf(angle);
    float period = rng_range(r, 0.05f, 0.18f) * S, phase = rng_range(r, 0, 6.2832f);
    // value noise: a coarse grid of random levels, bilinearly interpolated
    enum { GRID = 6 };
    float grid[GRID + 1][GRID + 1];
    for (int i = 0; i <= GRID; i++)
        for (int j = 0; j <= GRID; j++) grid[i][j] = rng_uniform(r);
    float grain = rng_range(r, 4, 14);
    for (int y = 0; y < S; y++)
        for (int x = 0; x < S; x++) {
            float u = (float)x / S, v = (float)y / S, t;
            if (kind == 0) t = 0.5f + (u - 0.5f) * dx + (v - 0.5f) * dy; // linear gradient
            else if (kind == 1) t = 0.5f + 0.5f * sinf((x * dx + y * dy) * 6.2832f / period + phase);
            else {
                float gx = u * GRID, gy = v * GRID;
                int i = (int)gx, j = (int)gy;
                float fx = gx - i, fy = gy - j;
                t = (grid[j][i] * (1 - fx) + grid[j][i + 1] * fx) * (1 - fy) +
                    (grid[j + 1][i] * (1 - fx) + grid[j + 1][i + 1] * fx) * fy;
            }
            float noise = rng_range(r, -grain, grain);
            uint8_t *px = im->rgb + ((size_t)y * S + x) * 3;
            for (int c = 0; c < 3; c++) px[c] = clamp_u8(a[c] + (b[c] - a[c]) * t + noise);
        }
}

static void blend(Image *im, int x, int y, const float rgb[3], float alpha) {
    if (x < 0 || y < 0 || x >= im->w || y >= im->h || alpha <= 0) return;
    uint8_t *px = im->rgb + ((size_t)y * im->w + x) * 3;
    for (int c = 0; c < 3; c++) px[c] = clamp_u8(px[c] + (rgb[c] - px[c]) * alpha);
}

// Dots and short strokes, at most 4% of the image side: texture, never labelled.
static void distractors(Image *im, Rng *r) {
    const int S = im->w;
    int n = 3 + (int)rng_below(r, 10);
    for (int k = 0; k < n; k++) {
        float rgb[3];
        if (rng_below(r, 2)) {
            const uint8_t *p = palette[rng_below(r, N_COLOURS)].rgb;
            for (int c = 0; c < 3; c++) rgb[c] = p[c];
        } else
            muted_colour(r, rgb);
        float x0 = rng_range(r, 0, (float)S), y0 = rng_range(r, 0, (float)S);
        float size = rng_range(r, 0.01f, 0.04f) * S;
        if (rng_below(r, 2)) { // a dot of radius size / 2
            float rad = MAX(size / 2, 0.8f);
            for (int y = (int)(y0 - rad) - 1; y <= (int)(y0 + rad) + 1; y++)
                for (int x = (int)(x0 - rad) - 1; x <= (int)(x0 + rad) + 1; x++) {
                    float d = hypotf(x + 0.5f - x0, y + 0.5f - y0);
                    blend(im, x, y, rgb, fminf(1, fmaxf(0, rad + 0.5f - d)));
                }
        } else { // a one-pixel stroke of length 2 size
            float angle = rng_range(r, 0, 6.2832f);
            int steps = (int)(4 * size) + 1;
            for (int s = 0; s <= steps; s++) {
                float t = 2 * size * s / steps;
                blend(im, (int)(x0 + t * cosf(angle)), (int)(y0 + t * sinf(angle)), rgb, 0.8f);
            }
        }
    }
}

// ---- objects ----
typedef struct Object {
    int cls, shape;
    float x0, y0, x1, y1; // the tight box, in pixels
    int apex_side;        // triangle: 0 top, 1 bottom, 2 left, 3 right
    float apex_t;         // triangle: where along that side the apex sits, in [0, 1]
    float rgb[3];
} Object;

static float edge(float ax, float ay, float bx, float by, float px, float py) {
    return (bx - ax) * (py - ay) - (by - ay) * (px - ax);
}

static bool inside(const Object *o, float x, float y) {
    if (x < o->x0 || x > o->x1 || y < o->y0 || y > o->y1) return false;
    if (o->shape == SHAPE_RECT) return true;
    float w = o->x1 - o->x0, h = o->y1 - o->y0;
    if (o->shape == SHAPE_ELLIPSE) {
        float u = (x - o->x0) / w * 2 - 1, v = (y - o->y0) / h * 2 - 1;
        return u * u + v * v <= 1;
    }
    // The apex on one side of the box, the base the whole opposite side.
    float v[3][2];
    switch (o->apex_side) {
    case 0: v[0][0] = o->x0 + o->apex_t * w, v[0][1] = o->y0;
            v[1][0] = o->x0, v[1][1] = o->y1, v[2][0] = o->x1, v[2][1] = o->y1; break;
    case 1: v[0][0] = o->x0 + o->apex_t * w, v[0][1] = o->y1;
            v[1][0] = o->x0, v[1][1] = o->y0, v[2][0] = o->x1, v[2][1] = o->y0; break;
    case 2: v[0][0] = o->x0, v[0][1] = o->y0 + o->apex_t * h;
            v[1][0] = o->x1, v[1][1] = o->y0, v[2][0] = o->x1, v[2][1] = o->y1; break;
    default: v[0][0] = o->x1, v[0][1] = o->y0 + o->apex_t * h;
             v[1][0] = o->x0, v[1][1] = o->y0, v[2][0] = o->x0, v[2][1] = o->y1; break;
    }
    float e0 = edge(v[0][0], v[0][1], v[1][0], v[1][1], x, y);
    float e1 = edge(v[1][0], v[1][1], v[2][0], v[2][1], x, y);
    float e2 = edge(v[2][0], v[2][1], v[0][0], v[0][1], x, y);
    return (e0 >= 0 && e1 >= 0 && e2 >= 0) || (e0 <= 0 && e1 <= 0 && e2 <= 0);
}

// Coverage from 4x4 samples per pixel, and a shading of +-12% across the object.
static void draw(Image *im, const Object *o, float shade_dx, float shade_dy) {
    float cx = (o->x0 + o->x1) / 2, cy = (o->y0 + o->y1) / 2;
    float hw = (o->x1 - o->x0) / 2, hh = (o->y1 - o->y0) / 2;
    for (int y = (int)o->y0; y <= (int)o->y1 && y < im->h; y++)
        for (int x = (int)o->x0; x <= (int)o->x1 && x < im->w; x++) {
            int hits = 0;
            for (int sy = 0; sy < 4; sy++)
                for (int sx = 0; sx < 4; sx++)
                    hits += inside(o, x + (sx + 0.5f) / 4, y + (sy + 0.5f) / 4);
            if (!hits) continue;
            float shade = 1 + 0.12f * ((x + 0.5f - cx) / hw * shade_dx + (y + 0.5f - cy) / hh * shade_dy);
            float rgb[3] = {o->rgb[0] * shade, o->rgb[1] * shade, o->rgb[2] * shade};
            blend(im, x, y, rgb, hits / 16.0f);
        }
}

static float iou(const Object *a, const Object *b) {
    float w = fminf(a->x1, b->x1) - fmaxf(a->x0, b->x0), h = fminf(a->y1, b->y1) - fmaxf(a->y0, b->y0);
    if (w <= 0 || h <= 0) return 0;
    float inter = w * h;
    return inter / ((a->x1 - a->x0) * (a->y1 - a->y0) + (b->x1 - b->x0) * (b->y1 - b->y0) - inter);
}

// A random object of a random class that overlaps none of placed[0..n) by IoU > 0.15;
// false when 30 tries found no room.
static bool place(Rng *r, int S, int classes, const Object *placed, int n, Object *o) {
    for (int attempt = 0; attempt < 30; attempt++) {
        memset(o, 0, sizeof *o);
        o->cls = (int)rng_below(r, (uint64_t)classes);
        o->shape = o->cls % N_SHAPES;
        const uint8_t *rgb = palette[classes <= N_SHAPES ? rng_below(r, N_COLOURS) : (uint64_t)(o->cls / N_SHAPES)].rgb;
        for (int c = 0; c < 3; c++) o->rgb[c] = rgb[c] + rng_range(r, -12, 12);
        float w = rng_range(r, 0.12f, 0.4f) * S, h = rng_range(r, 0.12f, 0.4f) * S;
        o->x0 = rng_range(r, 1, S - 1 - w), o->y0 = rng_range(r, 1, S - 1 - h);
        o->x1 = o->x0 + w, o->y1 = o->y0 + h;
        o->apex_side = (int)rng_below(r, 4);
        o->apex_t = rng_range(r, 0.15f, 0.85f);
        bool free_spot = true;
        for (int k = 0; k < n && free_spot; k++) free_spot = iou(o, &placed[k]) <= 0.15f;
        if (free_spot) return true;
    }
    return false;
}

void synth_render(uint64_t seed, int imgsz, int classes, bool empty, Image *im, Box *boxes,
                  int *n_boxes) {
    CHECK(imgsz >= 32 && classes >= 1 && classes <= SYNTH_MAX_CLASSES, "synth_render(%d, %d)",
          imgsz, classes);
    Rng r;
    rng_init(&r, seed);
    image_init(im, imgsz, imgsz);
    background(im, &r);
    distractors(im, &r);
    *n_boxes = 0;
    if (empty) return;
    Object objs[SYNTH_MAX_OBJECTS];
    int want = 1 + (int)rng_below(&r, SYNTH_MAX_OBJECTS);
    for (int k = 0; k < want; k++)
        if (place(&r, imgsz, classes, objs, *n_boxes, &objs[*n_boxes])) (*n_boxes)++;
    for (int k = 0; k < *n_boxes; k++) {
        float shade_dx = rng_range(&r, -1, 1), shade_dy = rng_range(&r, -1, 1);
        draw(im, &objs[k], shade_dx, shade_dy);
        const Object *o = &objs[k];
        boxes[k] = (Box){o->cls, (o->x0 + o->x1) / 2 / imgsz, (o->y0 + o->y1) / 2 / imgsz,
                         (o->x1 - o->x0) / imgsz, (o->y1 - o->y0) / imgsz};
    }
}

// ---- the dataset on disk ----
// mkdir -p path (kernels/base.h), or -1 with err naming the component that failed.
static int make_dir(const char *path, char *err, size_t errlen) {
    char failed[PATH_MAX];
    int e = mkdir_p(path, failed, sizeof failed);
    if (!e) return 0;
    snprintf(err, errlen, "%s: cannot create folder: %s", e == ENAMETOOLONG ? path : failed,
             strerror(e));
    return -1;
}

// out may not exist yet (created with its parents) or must be an empty folder.
static int prepare_out(const char *out, char *err, size_t errlen) {
    struct stat st;
    if (stat(out, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) {
            snprintf(err, errlen, "%s: exists and is not a folder (expected a new or empty folder)", out);
            return -1;
        }
        char probe[PATH_MAX];
        const char *sub[] = {"images", "labels", "data.yaml"};
        for (int i = 0; i < 3; i++) {
            snprintf(probe, sizeof probe, "%s/%s", out, sub[i]);
            if (stat(probe, &st) == 0) {
                snprintf(err, errlen, "%s: already holds %s (expected a new or empty folder)",
                         out, sub[i]);
                return -1;
            }
        }
    }
    char path[PATH_MAX];
    const char *dirs[] = {"images/train", "images/val", "labels/train", "labels/val"};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", out, dirs[i]);
        if (make_dir(path, err, errlen)) return -1;
    }
    return 0;
}

static int write_labels(const char *path, const Box *boxes, int n, char *err, size_t errlen) {
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        return -1;
    }
    for (int k = 0; k < n; k++)
        fprintf(f, "%d %.6f %.6f %.6f %.6f\n", boxes[k].cls, boxes[k].cx, boxes[k].cy, boxes[k].w,
                boxes[k].h);
    if (fclose(f) != 0) {
        snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

static int write_yaml(const SynthConfig *cfg, char *err, size_t errlen) {
    char path[PATH_MAX], root[PATH_MAX];
    if (!realpath(cfg->out, root)) {
        snprintf(err, errlen, "%s: cannot resolve: %s", cfg->out, strerror(errno));
        return -1;
    }
    snprintf(path, sizeof path, "%s/data.yaml", cfg->out);
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        return -1;
    }
    fprintf(f, "# ddpdbg-train synth n=%d imgsz=%d classes=%d empty=%g seed=%llu\n", cfg->n,
            cfg->imgsz, cfg->classes, cfg->empty, (unsigned long long)cfg->seed);
    fputs("path: '", f); // single-quoted: any path is a valid yaml scalar, ' doubled
    for (const char *p = root; *p; p++) fputs(*p == '\'' ? "''" : (char[2]){*p, 0}, f);
    fprintf(f, "'\ntrain: images/train\nval: images/val\nnc: %d\nnames:\n", cfg->classes);
    for (int k = 0; k < cfg->classes; k++) {
        char name[64];
        synth_class_name(k, cfg->classes, name, sizeof name);
        fprintf(f, "  %d: %s\n", k, name);
    }
    if (fclose(f) != 0) {
        snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

// Marks round(empty * count) images of [first, first + count) empty, picked by a shuffle.
static void pick_empty(bool *is_empty, int first, int count, double empty, Rng *r) {
    int *order = xmalloc(sizeof(int) * (size_t)count);
    for (int i = 0; i < count; i++) order[i] = first + i;
    for (int i = count - 1; i > 0; i--) {
        int j = (int)rng_below(r, (uint64_t)i + 1), t = order[i];
        order[i] = order[j], order[j] = t;
    }
    int n_empty = (int)lround(empty * count);
    for (int i = 0; i < n_empty; i++) is_empty[order[i]] = true;
    free(order);
}

int synth_generate(const SynthConfig *cfg, SynthSummary *sum, char *err, size_t errlen) {
    CHECK(cfg->n >= 2 && cfg->imgsz >= 32 && cfg->classes >= 1 &&
              cfg->classes <= SYNTH_MAX_CLASSES && cfg->empty >= 0 && cfg->empty <= 1,
          "synth_generate: unchecked config");
    if (prepare_out(cfg->out, err, errlen)) return -1;
    memset(sum, 0, sizeof *sum);
    sum->n_val = MAX(1, (int)lround(cfg->n / 5.0));
    sum->n_train = cfg->n - sum->n_val;
    bool *is_empty = xcalloc((size_t)cfg->n, sizeof(bool));
    Rng split_rng;
    rng_init(&split_rng, cfg->seed ^ 0x5EEDE3B7Full);
    pick_empty(is_empty, 0, sum->n_train, cfg->empty, &split_rng);
    pick_empty(is_empty, sum->n_train, sum->n_val, cfg->empty, &split_rng);
    int failed = -1, n_boxes = 0;
    char *errs = xcalloc((size_t)cfg->n, errlen);
#pragma omp parallel for schedule(dynamic, 8) reduction(+ : n_boxes)
    for (int i = 0; i < cfg->n; i++) {
        Image im;
        Box boxes[SYNTH_MAX_OBJECTS];
        int n;
        synth_render(cfg->seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(i + 1)), cfg->imgsz,
                     cfg->classes, is_empty[i], &im, boxes, &n);
        n_boxes += n;
        const char *split = i < sum->n_train ? "train" : "val";
        char png[PATH_MAX], txt[PATH_MAX], *e = errs + (size_t)i * errlen;
        snprintf(png, sizeof png, "%s/images/%s/%06d.png", cfg->out, split, i);
        snprintf(txt, sizeof txt, "%s/labels/%s/%06d.txt", cfg->out, split, i);
        if (image_save_png(&im, png, 3, e, errlen) || write_labels(txt, boxes, n, e, errlen)) {
#pragma omp critical
            if (failed < 0 || i < failed) failed = i;
        }
        image_free(&im);
    }
    if (failed >= 0) snprintf(err, errlen, "%s", errs + (size_t)failed * errlen);
    for (int i = 0; i < cfg->n; i++) sum->n_empty += is_empty[i];
    sum->n_boxes = n_boxes;
    free(errs);
    free(is_empty);
    if (failed >= 0) return -1;
    return write_yaml(cfg, err, errlen);
}
