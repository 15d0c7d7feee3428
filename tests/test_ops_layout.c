/* test_ops_layout.c -- the layout and indexing ops (trainer/ops/layout.c, index.c): forward
 * values against index arithmetic written here, finite-difference gradients of every op,
 * the kernels' tiled and threaded paths on RT-DETR-sized shapes, reshape sharing memory and
 * detach copying it, and the hook order of a concat of four parameters (PyTorch's, torch 1.13). */
#include "tests/expect.h"
#include "tests/gradcheck.h"
#include "trainer/ops/ops.h"

#include "kernels/base.h"

typedef struct Env {
    Arena arena;
    Tape tape;
} Env;

static void env_init(Env *e, int n_threads) {
    arena_init(&e->arena, DEV_CPU, 1 << 20);
    tape_init(&e->tape, &e->arena, n_threads);
}

static void env_free(Env *e) {
    tape_free(&e->tape);
    arena_free(&e->arena);
}

// x[i] = i: every output value names the input element it came from.
static Tensor *iota(Arena *a, int ndim, const int64_t *shape) {
    Tensor *x = tensor_new(a, ndim, shape);
    for (int64_t i = 0; i < x->n; i++) x->data[i] = (float)i;
    return x;
}

static Tensor *leaf(Arena *a, int ndim, const int64_t *shape, uint64_t seed) {
    Tensor *x = tensor_leaf(a, ndim, shape);
    gc_fill_uniform(x, seed, -1.0f, 1.0f);
    return x;
}

// Row-major flat index of coordinates c in shape.
static int64_t flat(int ndim, const int64_t *shape, const int64_t *c) {
    int64_t f = 0;
    for (int i = 0; i < ndim; i++) f = f * shape[i] + c[i];
    return f;
}

static void unflat(int ndim, const int64_t *shape, int64_t f, int64_t *c) {
    for (int i = ndim - 1; i >= 0; i--) {
        c[i] = f % shape[i];
        f /= shape[i];
    }
}

// How many elements of y differ from want (exact: these ops only move floats).
static int64_t mismatches(const float *y, const float *want, int64_t n) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += y[i] != want[i];
    return bad;
}

// ---- reshape, detach ----
static void test_reshape_forward(void) {
    Env e;
    env_init(&e, 1);
    Tensor *x = iota(e.tape.arena, 3, (int64_t[]){2, 3, 4});
    Tensor *y = op_reshape(&e.tape, x, 2, (int64_t[]){-1, 6});
    EXPECT(y->ndim == 2 && y->shape[0] == 4 && y->shape[1] == 6, "reshape -1 inferred %lld",
           (long long)y->shape[0]);
    EXPECT(y->data == x->data, "reshape copied the data");
    Tensor *z = op_reshape(&e.tape, y, 4, (int64_t[]){1, 24, 1, -1});
    EXPECT(z->shape[3] == 1 && z->n == 24 && z->data == x->data, "reshape with unit dims");
    EXPECT(e.tape.n_nodes == 0, "reshape of a constant recorded a node");
    env_free(&e);
}

static void test_detach(void) {
    Env e;
    env_init(&e, 1);
    Tensor *x = leaf(e.tape.arena, 2, (int64_t[]){2, 3}, 1);
    Tensor *d = op_detach(&e.tape, x);
    // a copy of its own (layout.c: its data outlives a release of x's)
    EXPECT(d->data != x->data, "detach shares x's data");
    EXPECT(!memcmp(d->data, x->data, sizeof(float) * 6), "detach: values differ from x's");
    EXPECT(!d->requires_grad && d->grad_fn == NULL, "detach: requires_grad %d, grad_fn %p",
           d->requires_grad, (void *)d->grad_fn);
    EXPECT(e.tape.n_nodes == 0, "detach recorded %lld nodes", (long long)e.tape.n_nodes);
    // cat([x, x.detach()]) with d(y) = 1: only the first half reaches x.
    Tensor *y = op_concat(&e.tape, (Tensor *[]){x, d}, 2, 0);
    float ones[12];
    for (int i = 0; i < 12; i++) ones[i] = 1.0f;
    EXPECT(tape_backward(&e.tape, y, ones) == 0, "backward failed");
    for (int i = 0; i < 6; i++)
        EXPECT(x->grad[i] == 1.0f, "x.grad[%d] = %g, want 1", i, x->grad[i]);
    env_free(&e);
}

// ---- permute, transpose ----
static void ref_permute(float *out, const float *in, int ndim, const int64_t *shape,
                        const int *perm) {
    int64_t oshape[TENSOR_MAX_DIMS], oc[TENSOR_MAX_DIMS], ic[TENSOR_MAX_DIMS];
    for (int i = 0; i < ndim; i++) oshape[i] = shape[perm[i]];
    int64_t n = shape_numel(ndim, shape);
    for (int64_t f = 0; f < n; f++) {
        unflat(ndim, oshape, f, oc);
        for (int i = 0; i < ndim; i++) ic[perm[i]] = oc[i];
        out[f] = in[flat(ndim, shape, ic)];
    }
}

typedef struct PermCase {
    int ndim;
    int64_t shape[TENSOR_MAX_DIMS];
    int perm[TENSOR_MAX_DIMS];
} PermCase;

// Covers every kernel path: plain copy (identity, unit dims), contiguous rows, tiled
// transposes with ragged tiles, merged dims (NCHW -> NHWC), and the RT-DETR flatten.
static const PermCase perm_cases[] = {
    {2, {37, 53}, {1, 0}},
    {2, {1, 70}, {1, 0}},
    {3, {2, 5, 70}, {0, 2, 1}},
    {3, {3, 33, 65}, {2, 0, 1}},
    {3, {4, 6, 5}, {1, 0, 2}},
    {3, {2, 3, 4}, {0, 1, 2}},
    {4, {2, 3, 4, 5}, {0, 2, 3, 1}},
    {4, {2, 3, 4, 5}, {3, 1, 0, 2}},
    {4, {2, 40, 3, 36}, {0, 2, 1, 3}},
    {4, {2, 8, 1, 9}, {2, 3, 0, 1}},
    {5, {2, 3, 1, 4, 5}, {4, 2, 0, 3, 1}},
    {6, {2, 3, 2, 1, 3, 2}, {5, 0, 4, 2, 1, 3}},
    {3, {2, 256, 6400}, {0, 2, 1}},
    {4, {2, 256, 20, 20}, {0, 2, 3, 1}},
};

static void test_permute_forward(void) {
    Env e;
    env_init(&e, 2);
    const Backend *be = backend_need(DEV_CPU);
    for (size_t c = 0; c < sizeof perm_cases / sizeof *perm_cases; c++) {
        const PermCase *pc = &perm_cases[c];
        Tensor *x = iota(e.tape.arena, pc->ndim, pc->shape);
        Tensor *y = op_permute(&e.tape, x, pc->perm);
        for (int i = 0; i < pc->ndim; i++)
            EXPECT(y->shape[i] == pc->shape[pc->perm[i]], "case %zu: out dim %d", c, i);
        float *want = xmalloc(sizeof(float) * (size_t)x->n);
        ref_permute(want, x->data, pc->ndim, pc->shape, pc->perm);
        EXPECT(mismatches(y->data, want, x->n) == 0, "permute case %zu: %lld wrong", c,
               (long long)mismatches(y->data, want, x->n));
        // The adjoint accumulates: dinp = 1 + (y permuted back) must be 1 + x.
        float *dinp = xmalloc(sizeof(float) * (size_t)x->n);
        for (int64_t i = 0; i < x->n; i++) dinp[i] = 1.0f;
        be->permute_bwd(&e.tape.kc, dinp, y->data, pc->ndim, pc->shape, pc->perm);
        int64_t bad = 0;
        for (int64_t i = 0; i < x->n; i++) bad += dinp[i] != 1.0f + x->data[i];
        EXPECT(bad == 0, "permute_bwd case %zu: %lld wrong", c, (long long)bad);
        free(dinp);
        free(want);
        tape_reset(&e.tape);
    }
    // Negative perm entries and transpose with negative dims.
    Tensor *x = iota(e.tape.arena, 3, (int64_t[]){2, 3, 4});
    Tensor *a = op_permute(&e.tape, x, (int[]){-1, 0, -2});
    Tensor *b = op_transpose(&e.tape, x, -1, 0);
    float want[24];
    ref_permute(want, x->data, 3, x->shape, (int[]){2, 0, 1});
    EXPECT(mismatches(a->data, want, 24) == 0, "permute with negative dims");
    ref_permute(want, x->data, 3, x->shape, (int[]){2, 1, 0});
    EXPECT(mismatches(b->data, want, 24) == 0 && b->shape[0] == 4 && b->shape[2] == 2,
           "transpose(-1, 0)");
    env_free(&e);
}

// ---- concat, split, slice ----
static void test_concat_forward(void) {
    Env e;
    env_init(&e, 2);
    const int64_t base[3] = {3, 4, 5};
    for (int dim = -1; dim < 3; dim++) {
        int d = dim < 0 ? dim + 3 : dim;
        Tensor *xs[3];
        for (int i = 0; i < 3; i++) {
            int64_t s[3] = {base[0], base[1], base[2]};
            s[d] = i + 1;
            xs[i] = iota(e.tape.arena, 3, s);
            for (int64_t j = 0; j < xs[i]->n; j++) xs[i]->data[j] += 1000.0f * (float)i;
        }
        Tensor *y = op_concat(&e.tape, xs, 3, dim);
        EXPECT(y->shape[d] == 6, "concat dim %d size %lld", dim, (long long)y->shape[d]);
        int64_t bad = 0, c[3];
        for (int64_t f = 0; f < y->n; f++) {
            unflat(3, y->shape, f, c);
            int i = c[d] < 1 ? 0 : c[d] < 3 ? 1 : 2;
            c[d] -= i == 0 ? 0 : i == 1 ? 1 : 3;
            bad += y->data[f] != xs[i]->data[flat(3, xs[i]->shape, c)];
        }
        EXPECT(bad == 0, "concat dim %d: %lld wrong", dim, (long long)bad);
    }
    // Large enough for the threaded block path: the CCFM channel concat (B,C,H,W) along 1.
    Tensor *p = iota(e.tape.arena, 4, (int64_t[]){2, 64, 40, 40});
    Tensor *q = iota(e.tape.arena, 4, (int64_t[]){2, 32, 40, 40});
    Tensor *y = op_concat(&e.tape, (Tensor *[]){p, q}, 2, 1);
    int64_t bad = 0;
    for (int64_t b = 0; b < 2; b++)
        for (int64_t j = 0; j < 96 * 1600; j++) {
            float want = j < 64 * 1600 ? p->data[b * 64 * 1600 + j]
                                       : q->data[b * 32 * 1600 + j - 64 * 1600];
            bad += y->data[b * 96 * 1600 + j] != want;
        }
    EXPECT(bad == 0, "large concat: %lld wrong", (long long)bad);
    env_free(&e);
}

static void test_split_slice_forward(void) {
    Env e;
    env_init(&e, 2);
    Tensor *x = iota(e.tape.arena, 3, (int64_t[]){3, 7, 4});
    for (int dim = -2; dim < 3; dim += 2) { // dims -2 (= 1) and 0 and 2
        int d = dim < 0 ? dim + 3 : dim;
        int64_t n = x->shape[d], sizes[3] = {1, n - 2, 1};
        Tensor *outs[3];
        op_split(&e.tape, x, dim, sizes, 3, outs);
        int64_t bad = 0, c[3], off = 0;
        for (int k = 0; k < 3; k++) {
            EXPECT(outs[k]->shape[d] == sizes[k], "split dim %d piece %d", dim, k);
            for (int64_t f = 0; f < outs[k]->n; f++) {
                unflat(3, outs[k]->shape, f, c);
                c[d] += off;
                bad += outs[k]->data[f] != x->data[flat(3, x->shape, c)];
            }
            off += sizes[k];
        }
        EXPECT(bad == 0, "split dim %d: %lld wrong", dim, (long long)bad);
    }
    // Slices, negative bounds included: x[:, -5:-1] is x[:, 2:6].
    struct {
        int dim;
        int64_t start, end, from, len;
    } cases[] = {{1, -5, -1, 2, 4}, {0, 1, 3, 1, 2}, {-1, 0, 4, 0, 4}, {2, 3, 3, 3, 0}};
    for (int k = 0; k < 4; k++) {
        int d = cases[k].dim < 0 ? cases[k].dim + 3 : cases[k].dim;
        Tensor *y = op_slice(&e.tape, x, cases[k].dim, cases[k].start, cases[k].end);
        EXPECT(y->shape[d] == cases[k].len, "slice %d: size %lld", k, (long long)y->shape[d]);
        int64_t bad = 0, c[3];
        for (int64_t f = 0; f < y->n; f++) {
            unflat(3, y->shape, f, c);
            c[d] += cases[k].from;
            bad += y->data[f] != x->data[flat(3, x->shape, c)];
        }
        EXPECT(bad == 0, "slice %d: %lld wrong", k, (long long)bad);
    }
    env_free(&e);
}

// ---- index_select, gather_rows, embedding ----
static void test_index_forward(void) {
    Env e;
    env_init(&e, 2);
    Tensor *x = iota(e.tape.arena, 3, (int64_t[]){3, 5, 4});
    const int64_t idx[6] = {2, 0, 2, 1, 2, 0};
    for (int dim = -1; dim < 3; dim++) {
        int d = dim < 0 ? dim + 3 : dim;
        const int64_t n = 6;
        Tensor *y = op_index_select(&e.tape, x, dim, idx, n);
        EXPECT(y->shape[d] == n, "index_select dim %d", dim);
        int64_t bad = 0, c[3];
        for (int64_t f = 0; f < y->n; f++) {
            unflat(3, y->shape, f, c);
            c[d] = idx[c[d]];
            bad += y->data[f] != x->data[flat(3, x->shape, c)];
        }
        EXPECT(bad == 0, "index_select dim %d: %lld wrong", dim, (long long)bad);
    }
    // gather_rows: out[b, k] = x[b, idx[b, k]]
    const int64_t rows[2 * 4] = {4, 0, 4, 3, 1, 1, 2, 0};
    Tensor *g = op_gather_rows(&e.tape, op_reshape(&e.tape, x, 3, (int64_t[]){2, 5, 6}), rows, 4);
    EXPECT(g->shape[0] == 2 && g->shape[1] == 4 && g->shape[2] == 6, "gather_rows shape");
    int64_t bad = 0;
    for (int64_t b = 0; b < 2; b++)
        for (int64_t k = 0; k < 4; k++)
            for (int64_t j = 0; j < 6; j++)
                bad += g->data[(b * 4 + k) * 6 + j] != x->data[(b * 5 + rows[b * 4 + k]) * 6 + j];
    EXPECT(bad == 0, "gather_rows: %lld wrong", (long long)bad);
    // embedding: out[i] = weight[idx[i]]
    Tensor *w = iota(e.tape.arena, 2, (int64_t[]){5, 3});
    Tensor *m = op_embedding(&e.tape, w, idx, 6);
    bad = 0;
    for (int64_t i = 0; i < 6; i++)
        for (int64_t j = 0; j < 3; j++) bad += m->data[i * 3 + j] != w->data[idx[i] * 3 + j];
    EXPECT(bad == 0 && m->shape[0] == 6 && m->shape[1] == 3, "embedding: %lld wrong",
           (long long)bad);
    // The top-k gather at RT-DETR's size, threaded: (2, 8400, 256) -> (2, 300, 256), and its
    // scatter-add with repeated rows checked by summing counts.
    Tensor *feat = iota(e.tape.arena, 3, (int64_t[]){2, 8400, 256});
    int64_t *top = xmalloc(sizeof(int64_t) * 600);
    for (int64_t i = 0; i < 600; i++) top[i] = (i * 37) % 250 * 33; // 50 repeats per image
    Tensor *sel = op_gather_rows(&e.tape, feat, top, 300);
    bad = 0;
    for (int64_t b = 0; b < 2; b++)
        for (int64_t k = 0; k < 300; k++)
            for (int64_t j = 0; j < 256; j += 17)
                bad += sel->data[(b * 300 + k) * 256 + j] !=
                       feat->data[(b * 8400 + top[b * 300 + k]) * 256 + j];
    EXPECT(bad == 0, "large gather_rows: %lld wrong", (long long)bad);
    float *dx = calloc((size_t)feat->n, sizeof(float));
    float *dy = xmalloc(sizeof(float) * (size_t)sel->n);
    for (int64_t i = 0; i < sel->n; i++) dy[i] = 1.0f;
    backend_need(DEV_CPU)->gather_rows_bwd(&e.tape.kc, dx, dy, top, 300, 2, 8400, 300, 256);
    double got = 0, want_count = 0;
    for (int64_t i = 0; i < feat->n; i++) got += dx[i];
    want_count = 600.0 * 256.0;
    EXPECT(got == want_count, "scatter-add total %g, want %g", got, want_count);
    int64_t r = top[3], count = 0; // a row picked twice in image 0
    for (int64_t k = 0; k < 300; k++) count += top[k] == r;
    EXPECT(count == 2 && dx[r * 256 + 5] == 2.0f, "row %lld picked %lld times got %g",
           (long long)r, (long long)count, dx[r * 256 + 5]);
    free(dx);
    free(dy);
    free(top);
    env_free(&e);
}

// ---- gradient checks ----
typedef struct GcArgs {
    int which; // the op under test
    int dim;
    int perm[TENSOR_MAX_DIMS];
    const int64_t *idx;
    int64_t n_idx;
} GcArgs;

enum { G_RESHAPE, G_PERMUTE, G_CONCAT, G_SPLIT, G_SLICE, G_INDEX, G_GATHER, G_EMBED };

static Tensor *gc_forward(Tape *t, Tensor *const *in, void *user) {
    const GcArgs *a = user;
    switch (a->which) {
    case G_RESHAPE: return op_reshape(t, in[0], 3, (int64_t[]){4, -1, 2});
    case G_PERMUTE: return op_permute(t, in[0], a->perm);
    case G_CONCAT: return op_concat(t, in, 3, a->dim);
    case G_SPLIT: { // the loss sees pieces 0 and 2 only: piece 1's gradient never arrives
        Tensor *outs[3];
        op_split(t, in[0], a->dim, (int64_t[]){2, 3, 1}, 3, outs);
        return op_concat(t, (Tensor *[]){outs[2], outs[0]}, 2, a->dim);
    }
    case G_SLICE: return op_slice(t, in[0], a->dim, 1, -1);
    case G_INDEX: return op_index_select(t, in[0], a->dim, a->idx, a->n_idx);
    case G_GATHER: return op_gather_rows(t, in[0], a->idx, a->n_idx);
    case G_EMBED: return op_embedding(t, in[0], a->idx, a->n_idx);
    }
    CHECK(0, "unknown gradcheck op %d", a->which);
    return NULL;
}

static void test_gradcheck(void) {
    Arena a;
    arena_init(&a, DEV_CPU, 1 << 20);
    GcOptions opt = {0};
    const int64_t rep[7] = {1, 3, 1, 0, 3, 3, 2};

    Tensor *x24 = leaf(&a, 3, (int64_t[]){2, 3, 4}, 1);
    GcArgs r = {.which = G_RESHAPE};
    EXPECT(gradcheck("reshape", gc_forward, &r, &x24, 1, opt) == 0, "reshape");

    GcArgs p3 = {.which = G_PERMUTE, .perm = {2, 0, 1}};
    EXPECT(gradcheck("permute3", gc_forward, &p3, &x24, 1, opt) == 0, "permute 3-d");
    Tensor *x4 = leaf(&a, 4, (int64_t[]){2, 3, 4, 5}, 2);
    GcArgs p4 = {.which = G_PERMUTE, .perm = {0, 2, 3, 1}};
    EXPECT(gradcheck("permute4", gc_forward, &p4, &x4, 1, opt) == 0, "permute 4-d nhwc");
    GcArgs p4b = {.which = G_PERMUTE, .perm = {3, 1, 0, 2}};
    EXPECT(gradcheck("permute4b", gc_forward, &p4b, &x4, 1, opt) == 0, "permute 4-d");

    for (int dim = 0; dim < 3; dim++) {
        int d = dim == 2 ? -1 : dim;
        Tensor *xs[3];
        for (int i = 0; i < 3; i++) {
            int64_t s[3] = {2, 3, 4};
            s[dim] = i + 1;
            xs[i] = leaf(&a, 3, s, 10 + (uint64_t)i);
        }
        GcArgs c = {.which = G_CONCAT, .dim = d};
        EXPECT(gradcheck("concat", gc_forward, &c, xs, 3, opt) == 0, "concat dim %d", d);
    }

    Tensor *xs6 = leaf(&a, 3, (int64_t[]){2, 6, 3}, 3);
    GcArgs s = {.which = G_SPLIT, .dim = 1};
    EXPECT(gradcheck("split", gc_forward, &s, &xs6, 1, opt) == 0, "split");
    // The unused piece's rows get exactly zero.
    bool zero = true;
    for (int b = 0; b < 2; b++)
        for (int j = 2 * 3; j < 5 * 3; j++) zero = zero && xs6->grad[b * 18 + j] == 0.0f;
    EXPECT(xs6->grad_defined && zero, "split: unused piece has a gradient");

    GcArgs sl = {.which = G_SLICE, .dim = -2};
    EXPECT(gradcheck("slice", gc_forward, &sl, &x4, 1, opt) == 0, "slice");

    for (int dim = -1; dim < 3; dim++) {
        Tensor *xi = leaf(&a, 3, (int64_t[]){4, 4, 4}, 4);
        GcArgs ix = {.which = G_INDEX, .dim = dim, .idx = rep, .n_idx = 7};
        EXPECT(gradcheck("index_select", gc_forward, &ix, &xi, 1, opt) == 0, "index_select %d",
               dim);
    }

    Tensor *xg = leaf(&a, 3, (int64_t[]){2, 5, 3}, 5);
    const int64_t rows[2 * 4] = {4, 1, 4, 4, 0, 2, 2, 3};
    GcArgs g = {.which = G_GATHER, .idx = rows, .n_idx = 4};
    EXPECT(gradcheck("gather_rows", gc_forward, &g, &xg, 1, opt) == 0, "gather_rows");

    Tensor *w = leaf(&a, 2, (int64_t[]){4, 5}, 6);
    GcArgs em = {.which = G_EMBED, .idx = rep, .n_idx = 7};
    EXPECT(gradcheck("embedding", gc_forward, &em, &w, 1, opt) == 0, "embedding");
    arena_free(&a);
}

// Repeated indices accumulate, checked by value (not only by finite differences).
static void test_scatter_add_values(void) {
    Env e;
    env_init(&e, 1);
    Tensor *w = leaf(e.tape.arena, 2, (int64_t[]){3, 2}, 7);
    Tensor *y = op_embedding(&e.tape, w, (int64_t[]){2, 0, 2, 2}, 4);
    EXPECT(y->grad_fn && y->grad_fn->n_in == 1 && y->grad_fn->in[0] == w, "embedding edges");
    float dy[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    EXPECT(tape_backward(&e.tape, y, dy) == 0, "backward failed");
    const float want[6] = {3, 4, 0, 0, 1 + 5 + 7, 2 + 6 + 8};
    EXPECT(mismatches(w->grad, want, 6) == 0, "embedding grad %g %g %g %g %g %g", w->grad[0],
           w->grad[1], w->grad[2], w->grad[3], w->grad[4], w->grad[5]);
    env_free(&e);
}

// ---- hooks ----
typedef struct Rec {
    int order[8];
    int n;
} Rec;

static int on_ready(void *user, Tensor *leaf_) {
    Rec *r = user;
    if (r->n < 8) r->order[r->n] = leaf_->param_index;
    r->n++;
    return 0;
}

// torch.cat of four parameter leaves frees them from one node: the engine's heap pops the
// ties as libstdc++ does, giving 0, 2, 1, 3 (checked against torch 1.13).
static void test_concat_hook_order(void) {
    Env e;
    env_init(&e, 1);
    Arena params;
    arena_init(&params, DEV_CPU, 1 << 16);
    Rec rec = {{0}, 0};
    e.tape.on_grad_ready = on_ready;
    e.tape.hook_user = &rec;
    Tensor *p[4];
    for (int i = 0; i < 4; i++) {
        p[i] = leaf(&params, 1, (int64_t[]){2}, 20 + (uint64_t)i);
        p[i]->param_index = i;
    }
    Tensor *y = op_concat(&e.tape, p, 4, 0);
    EXPECT(y->grad_fn && y->grad_fn->n_in == 4 && y->grad_fn->in[2] == p[2], "concat edges");
    float dy[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    EXPECT(tape_backward(&e.tape, y, dy) == 0, "backward failed");
    const int want[4] = {0, 2, 1, 3};
    EXPECT(rec.n == 4, "%d hooks fired, want 4", rec.n);
    for (int i = 0; i < MIN(rec.n, 4); i++)
        EXPECT(rec.order[i] == want[i], "hook %d is param %d, want %d", i, rec.order[i], want[i]);
    EXPECT(p[3]->grad[1] == 8.0f && p[1]->grad[0] == 3.0f, "concat grads %g %g", p[3]->grad[1],
           p[1]->grad[0]);
    arena_free(&params);
    env_free(&e);
}

int main(void) {
    test_reshape_forward();
    test_detach();
    test_permute_forward();
    test_concat_forward();
    test_split_slice_forward();
    test_index_forward();
    test_gradcheck();
    test_scatter_add_values();
    test_concat_hook_order();
    return expect_report();
}
