/* golden.c -- see golden.h. The file is read whole and the arrays point into it; layout:
 * int32 header[256] (magic, version, array count), then per array a 64-byte NUL-padded name,
 * int32 ndim, int32 dims[6], and ndim-product little-endian float32 values. */
#include "tests/golden.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>

#include "kernels/base.h"

#define RECORD_BYTES (GOLDEN_NAME_LEN + 7 * 4)

static int fail(Golden *g, const char *why) {
    fprintf(stderr, "%s: %s\n%s\n", g->path, why, GOLDEN_HINT);
    return -1;
}

static int32_t read_i32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

int golden_load(Golden *g, const char *path) {
    memset(g, 0, sizeof *g);
    g->path = xstrdup(path);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open: %s\n%s\n", path, strerror(errno), GOLDEN_HINT);
        return -1;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (size < GOLDEN_HEADER_INTS * 4) {
        fclose(f);
        return fail(g, "shorter than the 1024-byte header");
    }
    g->blob = xmalloc((size_t)size);
    size_t got = fread(g->blob, 1, (size_t)size, f);
    fclose(f);
    if (got != (size_t)size) return fail(g, "read error");

    const unsigned char *p = g->blob, *end = p + size;
    if (read_i32(p) != GOLDEN_MAGIC) return fail(g, "bad magic: not a golden file");
    if (read_i32(p + 4) != GOLDEN_VERSION) {
        fprintf(stderr, "%s: format version %d, this test reads version %d\n%s\n", path,
                read_i32(p + 4), GOLDEN_VERSION, GOLDEN_HINT);
        return -1;
    }
    int n = read_i32(p + 8);
    if (n <= 0) return fail(g, "no arrays");
    g->arrays = xcalloc((size_t)n, sizeof *g->arrays);
    p += GOLDEN_HEADER_INTS * 4;
    for (int i = 0; i < n; i++) {
        if (end - p < RECORD_BYTES) return fail(g, "truncated array header");
        GoldenArray *a = &g->arrays[i];
        memcpy(a->name, p, GOLDEN_NAME_LEN);
        a->name[GOLDEN_NAME_LEN - 1] = '\0';
        a->ndim = read_i32(p + GOLDEN_NAME_LEN);
        if (a->ndim < 0 || a->ndim > TENSOR_MAX_DIMS) return fail(g, "bad ndim");
        a->n = 1;
        for (int d = 0; d < a->ndim; d++) {
            a->shape[d] = read_i32(p + GOLDEN_NAME_LEN + 4 + 4 * d);
            if (a->shape[d] < 0) return fail(g, "negative dim");
            a->n *= a->shape[d];
        }
        p += RECORD_BYTES;
        if ((end - p) / 4 < a->n) return fail(g, "truncated array data");
        // The records have 4-byte aligned sizes, so the data is float-aligned in the blob.
        a->data = (const float *)p;
        p += 4 * a->n;
    }
    g->n_arrays = n;
    if (p != end) return fail(g, "trailing bytes after the last array");
    return 0;
}

void golden_free(Golden *g) {
    free(g->path);
    free(g->blob);
    free(g->arrays);
    memset(g, 0, sizeof *g);
}

static const GoldenArray *vfind(const Golden *g, char *name, size_t len, const char *fmt,
                                va_list ap) {
    vsnprintf(name, len, fmt, ap);
    for (int i = 0; i < g->n_arrays; i++)
        if (strcmp(g->arrays[i].name, name) == 0) return &g->arrays[i];
    return NULL;
}

const GoldenArray *golden_find(const Golden *g, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    const GoldenArray *a = vfind(g, name, sizeof name, fmt, ap);
    va_end(ap);
    return a;
}

const GoldenArray *golden_get(const Golden *g, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    const GoldenArray *a = vfind(g, name, sizeof name, fmt, ap);
    va_end(ap);
    if (!a) DIE(1, "%s: no array '%s'\n%s", g->path, name, GOLDEN_HINT);
    return a;
}

Tensor *golden_tensor(Arena *a, const GoldenArray *ga) {
    Tensor *t = tensor_new(a, ga->ndim, ga->shape);
    memcpy(t->data, ga->data, sizeof(float) * (size_t)ga->n);
    return t;
}

Tensor *golden_leaf(Arena *a, const GoldenArray *ga) {
    Tensor *t = tensor_leaf(a, ga->ndim, ga->shape);
    memcpy(t->data, ga->data, sizeof(float) * (size_t)ga->n);
    return t;
}

int64_t golden_compare(const char *what, const float *got, int64_t n, const GoldenArray *want,
                       double atol, double rtol) {
    if (n != want->n) {
        fprintf(stderr, "%s: %lld values, PyTorch has %lld\n", what, (long long)n,
                (long long)want->n);
        return n > want->n ? n : want->n;
    }
    int64_t bad = 0, worst = -1;
    double worst_excess = 0, max_err = 0;
    for (int64_t i = 0; i < n; i++) {
        double a = got[i], b = want->data[i], err = fabs(a - b);
        bool ok = isfinite(a) && isfinite(b) && err <= atol + rtol * fabs(b);
        if (isfinite(err) && err > max_err) max_err = err;
        if (ok) continue;
        double excess = isfinite(err) ? err / (atol + rtol * fabs(b)) : INFINITY;
        if (bad < 4)
            fprintf(stderr, "%s[%lld]: got %.9g, PyTorch %.9g (err %.3g)\n", what, (long long)i, a,
                    b, err);
        if (worst < 0 || excess > worst_excess) worst = i, worst_excess = excess;
        bad++;
    }
    if (bad)
        fprintf(stderr,
                "%s: %lld of %lld values off (atol %g rtol %g); worst [%lld] got %.9g, "
                "PyTorch %.9g; max abs err %.3g\n",
                what, (long long)bad, (long long)n, atol, rtol, (long long)worst,
                (double)got[worst], (double)want->data[worst], max_err);
    return bad;
}
