/* fuzz_labels.c -- libFuzzer target: the YOLO label parser (trainer/data/labels.c,
 * labels_read) on arbitrary bytes written to a label file, with 3 classes. Beyond "no crash,
 * leak or undefined behaviour" it checks labels_read's contract (trainer/data/dataset.h): a
 * rejected file gets one message "<path>:<line>: ..." or "<path>: ..." and no boxes; an
 * accepted one gives boxes with a class in [0, 3), coordinates in [0, 1], no exact duplicate,
 * and NULL exactly when there are none. Seeds: every .txt under tests/fixtures. */
#include "tests/fuzz_util.h"
#include "trainer/data/dataset.h"

enum { N_CLASSES = 3 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[FUZZ_PATH_MAX], err[FUZZ_PATH_MAX + 256] = "";
    fuzz_path(path, "input");
    fuzz_write_file(path, data, size);
    Box *boxes = (Box *)1; // must be overwritten
    int n = -1;
    if (labels_read(path, N_CLASSES, &boxes, &n, err, sizeof err)) {
        size_t plen = strlen(path);
        FUZZ_CHECK(!strncmp(err, path, plen) && err[plen] == ':',
                   "rejected without a '<path>:...' message: '%s'", err);
        FUZZ_CHECK(!boxes && n == 0, "rejected, but %d boxes returned", n);
        return 0;
    }
    FUZZ_CHECK(n >= 0 && (n == 0) == (boxes == NULL), "accepted: %d boxes at %p", n,
               (void *)boxes);
    for (int i = 0; i < n; i++) {
        const Box *b = &boxes[i];
        FUZZ_CHECK(b->cls >= 0 && b->cls < N_CLASSES, "box %d: class %d", i, b->cls);
        const float v[4] = {b->cx, b->cy, b->w, b->h};
        for (int k = 0; k < 4; k++)
            FUZZ_CHECK(v[k] >= 0 && v[k] <= 1, "box %d: coordinate %d is %g", i, k, (double)v[k]);
        for (int j = 0; j < i; j++)
            FUZZ_CHECK(memcmp(&boxes[j], b, sizeof *b) != 0, "boxes %d and %d are equal", j, i);
    }
    free(boxes);
    return 0;
}
