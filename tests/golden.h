/* golden.h -- reads the PyTorch reference files in tests/golden/ (written by make_golden.py;
 * format in tests/golden/README.md): named float32 arrays with shapes, plus helpers that turn
 * them into tensors and compare results against them. Test-only; never linked into the trainer. */
#ifndef TESTS_GOLDEN_H
#define TESTS_GOLDEN_H

#include <stdint.h>

#include "trainer/tensor.h"

#define GOLDEN_MAGIC 0x47444450 // int32 0 of the header: the bytes "PDDG"
#define GOLDEN_VERSION 1
#define GOLDEN_HEADER_INTS 256
#define GOLDEN_NAME_LEN 64
#define GOLDEN_HINT "HINT: run the tests from the repository root, or regenerate with `make golden`"

typedef struct GoldenArray {
    char name[GOLDEN_NAME_LEN];
    int ndim;
    int64_t shape[TENSOR_MAX_DIMS];
    int64_t n;
    const float *data; // n floats inside the owning Golden's blob
} GoldenArray;

typedef struct Golden {
    char *path;
    void *blob; // the whole file
    GoldenArray *arrays;
    int n_arrays;
} Golden;

// Reads a whole golden file. Returns 0, or -1 after printing what is wrong and GOLDEN_HINT
// (missing file, wrong magic or version, truncated). golden_free undoes it; also after -1.
int golden_load(Golden *g, const char *path);
void golden_free(Golden *g);

// The array named by the printf-style name, or NULL.
const GoldenArray *golden_find(const Golden *g, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
// Same, but a missing array is fatal (exit 1 with GOLDEN_HINT): the test and the committed
// file disagree, which regenerating may fix.
const GoldenArray *golden_get(const Golden *g, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

// New tensors with the array's shape and a copy of its data: a constant (no grad), or a
// tensor_leaf (requires grad, grad buffer allocated).
Tensor *golden_tensor(Arena *a, const GoldenArray *ga);
Tensor *golden_leaf(Arena *a, const GoldenArray *ga);

// Compares got[0..n) with want: each |got - want| <= atol + rtol * |want|, NaN/Inf failing.
// Prints the first few mismatches and the worst one, prefixed by `what`. Returns the number
// of mismatching elements (all n when the sizes differ).
int64_t golden_compare(const char *what, const float *got, int64_t n, const GoldenArray *want,
                       double atol, double rtol);

#endif
