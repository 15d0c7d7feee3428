/* labels.c -- YOLO txt label files and Ultralytics' image -> label path mapping (dataset.h).
 * Also dataset_free, the one destructor of the module's Dataset. */
#include <errno.h>
#include <math.h>

#include "kernels/base.h" // CHECK, xmalloc
#include "trainer/data/dataset.h"

void dataset_free(Dataset *ds) {
    for (int i = 0; i < ds->n_images; i++) free(ds->image_paths[i]);
    for (int i = 0; i < ds->nc; i++) free(ds->names[i]);
    free(ds->image_paths);
    free(ds->box_start);
    free(ds->boxes);
    free(ds->names);
    memset(ds, 0, sizeof *ds);
}

void label_path_for_image(const char *image_path, char *out, size_t outlen) {
    const char *images = NULL;
    for (const char *p = strstr(image_path, "/images/"); p; p = strstr(p + 1, "/images/"))
        images = p;
    const char *slash = strrchr(image_path, '/');
    const char *dot = strrchr(image_path, '.');
    size_t stem_end = dot && (!slash || dot > slash) ? (size_t)(dot - image_path) : strlen(image_path);
    if (images)
        snprintf(out, outlen, "%.*s/labels/%.*s.txt", (int)(images - image_path), image_path,
                 (int)(stem_end - (size_t)(images - image_path) - 8), images + 8);
    else
        snprintf(out, outlen, "%.*s.txt", (int)stem_end, image_path);
}

// The fields of one line, split on blanks and tabs (in place).
static int split_fields(char *line, char **fields, int max_fields) {
    int n = 0;
    for (char *tok = strtok(line, " \t\r"); tok; tok = strtok(NULL, " \t\r")) {
        if (n < max_fields) fields[n] = tok;
        n++;
    }
    return n;
}

static bool parse_number(const char *text, double *v) {
    char *end;
    errno = 0;
    *v = strtod(text, &end);
    return end != text && *end == '\0' && errno == 0 && isfinite(*v);
}

// Parses one non-blank line into *b; -1 with the message (prefix "<path>:<line>: ") in err.
static int parse_line(char *line, const char *path, int line_no, int nc, Box *b, char *err,
                      size_t errlen) {
    char *f[6];
    int n = split_fields(line, f, 6);
    if (n != 5) {
        snprintf(err, errlen, "%s:%d: expected 5 columns (cls cx cy w h), got %d", path, line_no, n);
        return -1;
    }
    double v[5];
    for (int k = 0; k < 5; k++)
        if (!parse_number(f[k], &v[k])) {
            snprintf(err, errlen, "%s:%d: column %d: expected a number, got '%s'", path, line_no,
                     k + 1, f[k]);
            return -1;
        }
    if (v[0] != floor(v[0]) || v[0] < 0 || v[0] >= nc) {
        snprintf(err, errlen, "%s:%d: class '%s' is not an integer in [0, %d)", path, line_no, f[0],
                 nc);
        return -1;
    }
    static const char *coord[] = {"", "cx", "cy", "w", "h"};
    for (int k = 1; k < 5; k++)
        if (v[k] < 0 || v[k] > 1) {
            snprintf(err, errlen, "%s:%d: %s = %s is outside [0, 1] (labels are normalised)", path,
                     line_no, coord[k], f[k]);
            return -1;
        }
    *b = (Box){(int)v[0], (float)v[1], (float)v[2], (float)v[3], (float)v[4]};
    return 0;
}

static bool box_equal(const Box *a, const Box *b) {
    return a->cls == b->cls && a->cx == b->cx && a->cy == b->cy && a->w == b->w && a->h == b->h;
}

int labels_read(const char *path, int nc, Box **boxes, int *n, char *err, size_t errlen) {
    CHECK(nc > 0, "labels_read: nc %d", nc);
    *boxes = NULL;
    *n = 0;
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT) return 0; // no label file: a background image
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t cap = 0, box_cap = 0;
    int line_no = 0, rc = 0;
    while (getline(&line, &cap, f) >= 0) {
        line_no++;
        if (strspn(line, " \t\r\n") == strlen(line)) continue;
        line[strcspn(line, "\n")] = '\0';
        Box b;
        if ((rc = parse_line(line, path, line_no, nc, &b, err, errlen))) break;
        bool duplicate = false;
        for (int i = 0; i < *n && !duplicate; i++) duplicate = box_equal(&(*boxes)[i], &b);
        if (duplicate) continue;
        if ((size_t)*n == box_cap) {
            box_cap = box_cap ? 2 * box_cap : 8;
            *boxes = xrealloc(*boxes, box_cap * sizeof(Box));
        }
        (*boxes)[(*n)++] = b;
    }
    if (!rc && ferror(f)) {
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        rc = -1;
    }
    free(line);
    fclose(f);
    if (rc) {
        free(*boxes);
        *boxes = NULL;
        *n = 0;
    }
    return rc;
}
