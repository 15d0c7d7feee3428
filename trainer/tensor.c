/* tensor.c -- Arena (chunked bump allocator) and tensor constructors. */
#include "trainer/tensor.h"

#include "kernels/base.h"

struct ArenaChunk {
    ArenaChunk *next;
    char *mem;
    size_t size, off;
};

void arena_init(Arena *a, Device dev, size_t chunk_bytes) {
    memset(a, 0, sizeof *a);
    a->be = backend_need(dev);
    a->chunk_bytes = chunk_bytes ? chunk_bytes : ((size_t)64 << 20);
}

static void free_chunks(Arena *a) {
    for (ArenaChunk *c = a->chunks, *next; c; c = next) {
        next = c->next;
        a->be->free(c->mem);
        free(c);
    }
    a->chunks = NULL;
    a->reserved = 0;
}

void arena_free(Arena *a) {
    if (!a->be) return;
    free_chunks(a);
    a->used = 0;
}

void arena_reset(Arena *a) {
    // More than one chunk means the last step outgrew the block: replace them by one block of
    // the peak size plus an eighth, so the next step allocates nothing new even when its shapes
    // grow a little with the number of boxes (denoising queries, matcher and loss tensors).
    // Without the margin a step that grew by a few KiB regrew the block, and the step after it
    // faulted in every page of a fresh 1.5 GB block (rtdetr-l 320 px: 2.5-3x the median step).
    // The margin costs no memory until touched: large blocks are mapped lazily.
    if (a->chunks && a->chunks->next) {
        size_t want = a->peak + a->peak / 8 + 64 * 1024;
        free_chunks(a);
        ArenaChunk *c = xcalloc(1, sizeof *c);
        c->mem = a->be->alloc(want);
        c->size = want;
        a->chunks = c;
        a->reserved = want;
    } else if (a->chunks) {
        a->chunks->off = 0;
    }
    a->used = 0;
}

void *arena_alloc(Arena *a, size_t nbytes) {
    CHECK(a->be, "arena used before arena_init");
    size_t need = (MAX(nbytes, (size_t)1) + 63) & ~(size_t)63;
    ArenaChunk *c = a->chunks;
    if (!c || c->off + need > c->size) {
        c = xcalloc(1, sizeof *c);
        c->size = MAX(need, a->chunk_bytes);
        c->mem = a->be->alloc(c->size);
        c->next = a->chunks;
        a->chunks = c;
        a->reserved += c->size;
    }
    void *p = c->mem + c->off;
    c->off += need;
    a->used += need;
    if (a->used > a->peak) a->peak = a->used;
    return p;
}

int64_t shape_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

static Tensor *header(Arena *a, int ndim, const int64_t *shape) {
    CHECK(ndim >= 0 && ndim <= TENSOR_MAX_DIMS, "ndim %d out of range", ndim);
    Tensor *t = arena_alloc(a, sizeof *t);
    memset(t, 0, sizeof *t);
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        CHECK(shape[i] >= 0, "negative dim %lld", (long long)shape[i]);
        t->shape[i] = shape[i];
    }
    t->n = shape_numel(ndim, shape);
    t->dev = a->be->dev;
    t->param_index = -1;
    return t;
}

Tensor *tensor_new(Arena *a, int ndim, const int64_t *shape) {
    Tensor *t = header(a, ndim, shape);
    t->data = arena_alloc(a, (size_t)t->n * sizeof(float));
    return t;
}

Tensor *tensor_zeros(Arena *a, int ndim, const int64_t *shape) {
    Tensor *t = tensor_new(a, ndim, shape);
    if (t->n) memset(t->data, 0, (size_t)t->n * sizeof(float)); // CPU only: arenas are host here
    return t;
}

Tensor *tensor_scalar(Arena *a, float value) {
    Tensor *t = tensor_new(a, 0, NULL);
    t->data[0] = value;
    return t;
}

Tensor *tensor_like(Arena *a, const Tensor *like) { return tensor_new(a, like->ndim, like->shape); }

Tensor *tensor_view(Arena *a, float *data, int ndim, const int64_t *shape) {
    Tensor *t = header(a, ndim, shape);
    t->data = data;
    return t;
}

Tensor *tensor_1d(Arena *a, int64_t d0) { return tensor_new(a, 1, (int64_t[]){d0}); }
Tensor *tensor_2d(Arena *a, int64_t d0, int64_t d1) { return tensor_new(a, 2, (int64_t[]){d0, d1}); }
Tensor *tensor_3d(Arena *a, int64_t d0, int64_t d1, int64_t d2) {
    return tensor_new(a, 3, (int64_t[]){d0, d1, d2});
}
Tensor *tensor_4d(Arena *a, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    return tensor_new(a, 4, (int64_t[]){d0, d1, d2, d3});
}

Tensor *tensor_leaf(Arena *a, int ndim, const int64_t *shape) {
    Tensor *t = tensor_zeros(a, ndim, shape);
    t->grad = arena_alloc(a, (size_t)MAX(t->n, 1) * sizeof(float));
    t->requires_grad = true;
    t->grad_defined = false;
    return t;
}

bool tensor_same_shape(const Tensor *a, const Tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

int64_t tensor_dim(const Tensor *t, int d) {
    if (d < 0) d += t->ndim;
    CHECK(d >= 0 && d < t->ndim, "dim %d out of range for a %d-d tensor", d, t->ndim);
    return t->shape[d];
}

char *tensor_shape_str(const Tensor *t, char *buf, size_t len) {
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; i < t->ndim && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, i ? "x%lld" : "%lld", (long long)t->shape[i]);
    return buf;
}
