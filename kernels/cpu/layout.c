/* layout.c -- data movement: permute (a tiled transpose after merging dims), strided block
 * copies for concat/split/slice, and row gather / scatter-add for index_select, gather and
 * embedding. No arithmetic beyond the backward accumulations; contracts in kernels/backend.h. */
#include "kernels/base.h" // CHECK, MIN, CEIL_DIV
#include "kernels/cpu/cpu_kernels.h"

#define PERMUTE_MAX_DIMS 8
// 32x32 floats: a source and a destination tile (4 KiB each) stay in L1 while transposed.
#define TILE 32
// Work below this many floats runs on one thread: a fork costs more than the copy.
#define PARALLEL_MIN 65536
// Rows of contiguous work are cut into pieces of this many floats to feed the threads.
#define CHUNK 16384

// A permute reduced to its essentials: k output dims, size-1 dims dropped and output dims
// that are also adjacent (in the same order) in the input merged. istride: the input stride
// of each output dim; ostride: the (contiguous) output stride. A (B,C,H,W) -> (B,H,W,C)
// permute becomes (B, H*W, C) over input strides (C*H*W, 1, H*W): a batched transpose.
typedef struct Perm {
    int k;
    int64_t size[PERMUTE_MAX_DIMS], istride[PERMUTE_MAX_DIMS], ostride[PERMUTE_MAX_DIMS];
    int64_t numel;
} Perm;

static void perm_simplify(Perm *p, int ndim, const int64_t *shape, const int *perm) {
    CHECK(ndim >= 0 && ndim <= PERMUTE_MAX_DIMS, "permute: ndim %d > %d", ndim, PERMUTE_MAX_DIMS);
    int64_t in_stride[PERMUTE_MAX_DIMS], s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        in_stride[i] = s;
        s *= shape[i];
    }
    p->numel = s;
    p->k = 0;
    for (int i = 0; i < ndim; i++) {
        int64_t n = shape[perm[i]], st = in_stride[perm[i]];
        if (n == 1) continue;
        if (p->k > 0 && p->istride[p->k - 1] == st * n) {
            p->size[p->k - 1] *= n;
            p->istride[p->k - 1] = st;
        } else {
            p->size[p->k] = n;
            p->istride[p->k] = st;
            p->k++;
        }
    }
    s = 1;
    for (int i = p->k - 1; i >= 0; i--) {
        p->ostride[i] = s;
        s *= p->size[i];
    }
}

// Input and output offsets of the `flat`-th combination of the dims other than skip0/skip1
// (row-major over the remaining dims).
static void outer_offsets(const Perm *p, int skip0, int skip1, int64_t flat, int64_t *ioff,
                          int64_t *ooff) {
    int64_t io = 0, oo = 0;
    for (int d = p->k - 1; d >= 0; d--) {
        if (d == skip0 || d == skip1) continue;
        int64_t c = flat % p->size[d];
        flat /= p->size[d];
        io += c * p->istride[d];
        oo += c * p->ostride[d];
    }
    *ioff = io;
    *ooff = oo;
}

// out (the permuted layout) = or += inp. Three shapes of work after simplification:
// a plain copy (k <= 1), contiguous rows (the innermost input dim stays innermost: rows of
// size[k-1] floats move as blocks), or a tiled 2-D transpose between the output's innermost
// dim `a` and the input's innermost dim `b`, looped over every other dim.
static void permute_impl(KernelCtx *kc, float *out, const float *inp, int ndim,
                         const int64_t *shape, const int *perm, bool acc) {
    Perm p;
    perm_simplify(&p, ndim, shape, perm);
    if (p.numel == 0) return;
    if (p.k <= 1) {
        if (acc) axpy_cpu(kc, out, 1.0f, inp, p.numel);
        else block_copy_cpu(kc, out, p.numel, inp, p.numel, 1, p.numel);
        return;
    }
    const int a = p.k - 1;
    if (p.istride[a] == 1) {
        const int64_t row = p.size[a], n_rows = p.numel / row;
#pragma omp parallel for num_threads(kc->n_threads) if (p.numel > PARALLEL_MIN)
        for (int64_t r = 0; r < n_rows; r++) {
            int64_t io, oo;
            outer_offsets(&p, a, -1, r, &io, &oo);
            float *dst = out + oo;
            const float *src = inp + io;
            if (acc) {
#pragma omp simd
                for (int64_t j = 0; j < row; j++) dst[j] += src[j];
            } else memcpy(dst, src, (size_t)row * sizeof(float));
        }
        return;
    }
    int b = 0;
    while (p.istride[b] != 1) b++; // the input's innermost dim, always present after merging
    const int64_t na = p.size[a], nb = p.size[b], sa = p.istride[a], sb = p.ostride[b];
    const int64_t tiles_a = CEIL_DIV(na, TILE), tiles_b = CEIL_DIV(nb, TILE);
    const int64_t n_units = p.numel / (na * nb) * tiles_a * tiles_b;
#pragma omp parallel for num_threads(kc->n_threads) if (p.numel > PARALLEL_MIN)
    for (int64_t u = 0; u < n_units; u++) {
        const int64_t a0 = (u % tiles_a) * TILE, b0 = (u / tiles_a % tiles_b) * TILE;
        const int64_t a1 = MIN(a0 + TILE, na), b1 = MIN(b0 + TILE, nb);
        int64_t io, oo;
        outer_offsets(&p, a, b, u / (tiles_a * tiles_b), &io, &oo);
        for (int64_t ib = b0; ib < b1; ib++) {
            float *dst = out + oo + ib * sb;
            const float *src = inp + io + ib;
            if (acc)
                for (int64_t ia = a0; ia < a1; ia++) dst[ia] += src[ia * sa];
            else
                for (int64_t ia = a0; ia < a1; ia++) dst[ia] = src[ia * sa];
        }
    }
}

void permute_fwd_cpu(KernelCtx *kc, float *out, const float *inp, int ndim, const int64_t *shape,
                     const int *perm) {
    permute_impl(kc, out, inp, ndim, shape, perm, false);
}

// dout has the permuted shape; walking it back to inp's layout is the permute by the
// inverse permutation.
void permute_bwd_cpu(KernelCtx *kc, float *dinp, const float *dout, int ndim,
                     const int64_t *shape, const int *perm) {
    CHECK(ndim >= 0 && ndim <= PERMUTE_MAX_DIMS, "permute: ndim %d > %d", ndim, PERMUTE_MAX_DIMS);
    int64_t out_shape[PERMUTE_MAX_DIMS];
    int inv[PERMUTE_MAX_DIMS];
    for (int i = 0; i < ndim; i++) {
        out_shape[i] = shape[perm[i]];
        inv[perm[i]] = i;
    }
    permute_impl(kc, dinp, dout, ndim, out_shape, inv, true);
}

// ---- strided blocks ----
static void blocks_impl(KernelCtx *kc, float *out, int64_t out_stride, const float *inp,
                        int64_t in_stride, int64_t outer, int64_t inner, bool acc) {
    if (outer <= 0 || inner <= 0) return;
    if (out_stride == inner && in_stride == inner) { // one contiguous run
        inner *= outer;
        outer = 1;
    }
    const int64_t per_row = CEIL_DIV(inner, CHUNK), n_units = outer * per_row;
#pragma omp parallel for num_threads(kc->n_threads) if (outer * inner > PARALLEL_MIN)
    for (int64_t u = 0; u < n_units; u++) {
        const int64_t o = u / per_row, j0 = (u % per_row) * CHUNK, len = MIN(CHUNK, inner - j0);
        float *dst = out + o * out_stride + j0;
        const float *src = inp + o * in_stride + j0;
        if (acc) {
#pragma omp simd
            for (int64_t j = 0; j < len; j++) dst[j] += src[j];
        } else memcpy(dst, src, (size_t)len * sizeof(float));
    }
}

void block_copy_cpu(KernelCtx *kc, float *out, int64_t out_stride, const float *inp,
                    int64_t in_stride, int64_t outer, int64_t inner) {
    blocks_impl(kc, out, out_stride, inp, in_stride, outer, inner, false);
}

void block_add_cpu(KernelCtx *kc, float *out, int64_t out_stride, const float *inp,
                   int64_t in_stride, int64_t outer, int64_t inner) {
    blocks_impl(kc, out, out_stride, inp, in_stride, outer, inner, true);
}

// ---- row gather and scatter-add ----
// inp (outer, n_src, inner), out (outer, n_idx, inner)
void gather_rows_fwd_cpu(KernelCtx *kc, float *out, const float *inp, const int64_t *idx,
                         int64_t idx_stride, int64_t outer, int64_t n_src, int64_t n_idx,
                         int64_t inner) {
    const int64_t n_rows = outer * n_idx;
#pragma omp parallel for num_threads(kc->n_threads) if (n_rows * inner > PARALLEL_MIN)
    for (int64_t r = 0; r < n_rows; r++) {
        const int64_t o = r / n_idx, i = r % n_idx;
        const float *src = inp + (o * n_src + idx[o * idx_stride + i]) * inner;
        float *dst = out + r * inner;
        memcpy(dst, src, (size_t)inner * sizeof(float));
    }
}

// dout (outer, n_idx, inner), dinp (outer, n_src, inner). Threads split (outer slice, column
// piece) pairs, which no two indices share, and each walks the indices in order: race-free
// with repeated indices, and the sums come out the same for any thread count.
void gather_rows_bwd_cpu(KernelCtx *kc, float *dinp, const float *dout, const int64_t *idx,
                         int64_t idx_stride, int64_t outer, int64_t n_src, int64_t n_idx,
                         int64_t inner) {
    if (inner <= 0) return;
    const int64_t piece = 256, per_slice = CEIL_DIV(inner, piece), n_units = outer * per_slice;
#pragma omp parallel for num_threads(kc->n_threads) if (outer * n_idx * inner > PARALLEL_MIN)
    for (int64_t u = 0; u < n_units; u++) {
        const int64_t o = u / per_slice, j0 = (u % per_slice) * piece;
        const int64_t len = MIN(piece, inner - j0);
        for (int64_t i = 0; i < n_idx; i++) {
            float *dst = dinp + (o * n_src + idx[o * idx_stride + i]) * inner + j0;
            const float *src = dout + (o * n_idx + i) * inner + j0;
#pragma omp simd
            for (int64_t j = 0; j < len; j++) dst[j] += src[j];
        }
    }
}
