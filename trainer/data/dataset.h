/* dataset.h -- a detection dataset in memory: image paths, every image's boxes, class names.
 * Two readers fill it: an Ultralytics data yaml over YOLO txt labels (datayaml.c, labels.c)
 * and a COCO instances json (coco.c). Images are not decoded here (image.h, batch.h).
 * Errors are one line naming the file (and line) and what was expected; callers exit 2. */
#ifndef TRAINER_DATA_DATASET_H
#define TRAINER_DATA_DATASET_H

#include <stdbool.h>
#include <stddef.h>

// One ground-truth box, normalised to the image: centre (cx, cy) and size (w, h) in [0, 1].
typedef struct Box {
    int cls;
    float cx, cy, w, h;
} Box;

typedef struct Dataset {
    int n_images;
    char **image_paths; // n_images paths, as found (relative to the cwd or absolute)
    int *box_start;     // n_images + 1: image i's boxes are boxes[box_start[i] .. box_start[i+1])
    Box *boxes;         // box_start[n_images] boxes; an image without boxes is a background image
    int nc;
    char **names; // nc class names
} Dataset;

void dataset_free(Dataset *ds); // a zeroed Dataset is a no-op

// ---- YOLO txt labels (labels.c) ----
// Ultralytics' img2label_paths: the last "/images/" of the path becomes "/labels/" and the
// extension ".txt" (a path without "/images/" keeps its folder). Writes into out (outlen).
void label_path_for_image(const char *image_path, char *out, size_t outlen);

// Reads one label file: a line is `cls cx cy w h` (blank lines skipped), cls an integer in
// [0, nc), the four coordinates in [0, 1]. A missing or empty file is a background image
// (*n = 0). Exact duplicate rows are dropped, as Ultralytics does. *boxes is malloc'd (NULL
// when *n is 0). Returns 0, or -1 with "<path>:<line>: ..." in err.
int labels_read(const char *path, int nc, Box **boxes, int *n, char *err, size_t errlen);

// ---- Ultralytics data yaml (datayaml.c) ----
// The yaml's keys: path (the dataset root; absent: the yaml's folder; relative: against the
// yaml's folder, where Ultralytics would use its datasets_dir), train and val (each a folder
// searched recursively for .png/.jpg/.jpeg, a .txt list of image paths (relative ones are
// against the list's folder, where Ultralytics takes only "./x" so), or a list of those;
// relative to the root), names (a
// list, or a mapping 0..nc-1 -> name), nc (optional; must equal the number of names; alone it
// names the classes class0..). Other keys (test, download, ...) are ignored. Images in a
// format we cannot decode (.bmp, .webp, ...) are an error, not skipped.
typedef struct DataYaml {
    char *root;    // the resolved `path`
    char **train;  // n_train resolved entries (folders or list files)
    int n_train;
    char **val;
    int n_val;
    int nc;
    char **names;
} DataYaml;

int data_yaml_load(DataYaml *y, const char *yaml_path, char *err, size_t errlen);
void data_yaml_free(DataYaml *y);

// The split ("train" or "val") of a data yaml, with every label file read: sorted image paths
// as Ultralytics lists them. An empty split is an error.
int dataset_load_yaml(Dataset *ds, const char *yaml_path, const char *split, char *err,
                      size_t errlen);

// ---- COCO instances json (coco.c) ----
// images [{id, file_name, width, height}], annotations [{image_id, category_id, bbox
// [x, y, w, h] in pixels, iscrowd}], categories [{id, name}]. Class k is the k-th category in
// ascending id order; crowd annotations and boxes with w or h <= 0 are skipped (as
// Ultralytics' convert_coco); a box is clipped to the image. Image paths are image_dir +
// "/" + file_name, in the json's image order. Errors name the json and the line:column.
int dataset_load_coco(Dataset *ds, const char *json_path, const char *image_dir, char *err,
                      size_t errlen);

#endif
