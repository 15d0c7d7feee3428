/* elementwise.c -- unary activations and loss-side unary ops, binary ops with NumPy
 * broadcasting (forward and the reduce-to-shape backward), BCE with logits.
 * Formulas and their operation order follow PyTorch's CPU kernels (ATen) so results agree to
 * the last bits where the math allows. Reductions and norms are in reduce.c and norm.c. */
#include "kernels/cpu/cpu_kernels.h"

#include <math.h>
#include <string.h>

#include "kernels/base.h" // CHECK, MIN, CEIL_DIV

// Loops over fewer elements than this run on one thread: the fork costs more than the work.
// Loops without libm calls are also `omp simd`: at -O2 GCC vectorises only what it is told to.
#define PAR_MIN 32768

// ---- unary activations ----
// The loops are `omp simd` and branch-free, so that GCC vectorises them: a select whose
// operands are all loaded unconditionally (relu_bwd reads dout even where it adds 0), and
// expf_simd in place of libm's expf, which no loop can vectorise.
void relu_fwd_cpu(KernelCtx *kc, float *out, const float *inp, int64_t n) {
#pragma omp parallel for simd num_threads(kc->n_threads) if (parallel : n > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

void relu_bwd_cpu(KernelCtx *kc, float *dinp, const float *inp, const float *dout, int64_t n) {
#pragma omp parallel for simd num_threads(kc->n_threads) if (parallel : n > PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float d = dout[i];
        dinp[i] = inp[i] > 0.0f ? d : 0.0f;
    }
}

// expf_simd: cpu_kernels.h (norm.c's fused BatchNorm + SiLU uses it too).

void silu_fwd_cpu(KernelCtx *kc, float *out, const float *inp, int64_t n) {
#pragma omp parallel for simd num_threads(kc->n_threads) if (parallel : n > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        out[i] = silu_value(inp[i]);
}

void silu_bwd_cpu(KernelCtx *kc, float *dinp, const float *inp, const float *dout, int64_t n) {
#pragma omp parallel for simd num_threads(kc->n_threads) if (parallel : n > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        dinp[i] = silu_grad(inp[i], dout[i]);
}

void gelu_fwd_cpu(KernelCtx *kc, float *out, const float *inp, int64_t n) {
    const float alpha = (float)M_SQRT1_2;
#pragma omp parallel for num_threads(kc->n_threads) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        out[i] = inp[i] * 0.5f * (1.0f + erff(inp[i] * alpha));
}

// d/dx [x Phi(x)] = Phi(x) + x phi(x), phi(x) = exp(-x^2/2) / sqrt(2 pi).
void gelu_bwd_cpu(KernelCtx *kc, float *dinp, const float *inp, const float *dout, int64_t n) {
    const float alpha = (float)M_SQRT1_2;
    const float beta = (float)(M_2_SQRTPI * M_SQRT1_2 * 0.5);
#pragma omp parallel for num_threads(kc->n_threads) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float x = inp[i];
        float cdf = 0.5f * (1.0f + erff(x * alpha));
        float pdf = beta * expf(x * x * -0.5f);
        dinp[i] = dout[i] * (cdf + x * pdf);
    }
}

void sigmoid_fwd_cpu(KernelCtx *kc, float *out, const float *inp, int64_t n) {
#pragma omp parallel for simd num_threads(kc->n_threads) if (parallel : n > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        out[i] = 1.0f / (1.0f + expf_simd(-inp[i]));
}

void sigmoid_bwd_cpu(KernelCtx *kc, float *dinp, const float *out, const float *dout, int64_t n) {
#pragma omp parallel for simd num_threads(kc->n_threads) if (parallel : n > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        dinp[i] = dout[i] * (1.0f - out[i]) * out[i];
}

// ---- inverse sigmoid: the Ultralytics composition, unrolled ----
#define INVSIG_EPS 1e-5f

static float clamp01(float x) {
    float y = x < 0.0f ? 0.0f : x;
    return y > 1.0f ? 1.0f : y;
}

void inverse_sigmoid_fwd_cpu(KernelCtx *kc, float *out, const float *inp, int64_t n) {
#pragma omp parallel for num_threads(kc->n_threads) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float x = clamp01(inp[i]);
        float x1 = x < INVSIG_EPS ? INVSIG_EPS : x;
        float x2 = 1.0f - x < INVSIG_EPS ? INVSIG_EPS : 1.0f - x;
        out[i] = logf(x1 / x2);
    }
}

// The chain autograd runs: log (g / q), div (g / x2 and -g * ((x1 / x2) / x2)), the two
// clamps at eps, the rsub 1 - x (negates), the clamp to [0, 1].
void inverse_sigmoid_bwd_cpu(KernelCtx *kc, float *dinp, const float *inp, const float *dout,
                             int64_t n) {
#pragma omp parallel for num_threads(kc->n_threads) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float x = clamp01(inp[i]);
        float x1 = x < INVSIG_EPS ? INVSIG_EPS : x;
        float omx = 1.0f - x;
        float x2 = omx < INVSIG_EPS ? INVSIG_EPS : omx;
        float gq = dout[i] / (x1 / x2);
        float g1 = gq / x2;
        float g2 = -gq * ((x1 / x2) / x2);
        float gx = (x >= INVSIG_EPS ? g1 : 0.0f) + -(omx >= INVSIG_EPS ? g2 : 0.0f);
        dinp[i] = inp[i] >= 0.0f && inp[i] <= 1.0f ? gx : 0.0f;
    }
}

// ---- loss-side unary ops ----
void exp_fwd_cpu(KernelCtx *kc, float *out, const float *inp, int64_t n) {
#pragma omp parallel for num_threads(kc->n_threads) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        out[i] = expf(inp[i]);
}

void exp_bwd_cpu(KernelCtx *kc, float *dinp, const float *out, const float *dout, int64_t n) {
#pragma omp parallel for simd num_threads(kc->n_threads) if (parallel : n > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        dinp[i] = dout[i] * out[i];
}

void log_fwd_cpu(KernelCtx *kc, float *out, const float *inp, int64_t n) {
#pragma omp parallel for num_threads(kc->n_threads) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        out[i] = logf(inp[i]);
}

void log_bwd_cpu(KernelCtx *kc, float *dinp, const float *inp, const float *dout, int64_t n) {
#pragma omp parallel for simd num_threads(kc->n_threads) if (parallel : n > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        dinp[i] = dout[i] / inp[i];
}

void abs_fwd_cpu(KernelCtx *kc, float *out, const float *inp, int64_t n) {
#pragma omp parallel for simd num_threads(kc->n_threads) if (parallel : n > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        out[i] = fabsf(inp[i]);
}

void abs_bwd_cpu(KernelCtx *kc, float *dinp, const float *inp, const float *dout, int64_t n) {
#pragma omp parallel for simd num_threads(kc->n_threads) if (parallel : n > PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float sgn = (float)(inp[i] > 0.0f) - (float)(inp[i] < 0.0f);
        dinp[i] = dout[i] * sgn;
    }
}

// torch.pow(x, e) on a float tensor: the exponents ATen special-cases, else powf.
static float pow_torch(float x, float e) {
    if (e == 0.5f) return sqrtf(x);
    if (e == 2.0f) return x * x;
    if (e == 3.0f) return x * x * x;
    if (e == -0.5f) return 1.0f / sqrtf(x);
    if (e == -1.0f) return 1.0f / x;
    if (e == -2.0f) return 1.0f / (x * x);
    return powf(x, e);
}

void pow_scalar_fwd_cpu(KernelCtx *kc, float *out, const float *inp, float e, int64_t n) {
#pragma omp parallel for num_threads(kc->n_threads) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        out[i] = pow_torch(inp[i], e);
}

void pow_scalar_bwd_cpu(KernelCtx *kc, float *dinp, const float *inp, const float *dout, float e,
                        int64_t n) {
#pragma omp parallel for num_threads(kc->n_threads) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++) // e == 0: zeros, whatever x is (PyTorch)
        dinp[i] = e == 0.0f ? 0.0f : dout[i] * (e * pow_torch(inp[i], e - 1.0f));
}

void clamp_fwd_cpu(KernelCtx *kc, float *out, const float *inp, float lo, float hi, int64_t n) {
#pragma omp parallel for simd num_threads(kc->n_threads) if (parallel : n > PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float y = inp[i] < lo ? lo : inp[i]; // comparisons with NaN are false: NaN stays
        out[i] = y > hi ? hi : y;
    }
}

void clamp_bwd_cpu(KernelCtx *kc, float *dinp, const float *inp, const float *dout, float lo,
                   float hi, int64_t n) {
#pragma omp parallel for simd num_threads(kc->n_threads) if (parallel : n > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        dinp[i] = inp[i] >= lo && inp[i] <= hi ? dout[i] : 0.0f;
}

void scale_fwd_cpu(KernelCtx *kc, float *out, const float *inp, float s, int64_t n) {
#pragma omp parallel for simd num_threads(kc->n_threads) if (parallel : n > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        out[i] = s * inp[i];
}

void add_scalar_fwd_cpu(KernelCtx *kc, float *out, const float *inp, float s, int64_t n) {
#pragma omp parallel for simd num_threads(kc->n_threads) if (parallel : n > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        out[i] = inp[i] + s;
}

// ---- broadcasting ----
// The iteration space of a binary op: the broadcast shape with size-1 dims dropped and
// neighbouring dims merged wherever both operands stay linear across them. Same shapes
// become one dim with unit strides, (B,C,H,W) * (1,C,1,1) becomes (B, C, H*W).
#define BC_MAX 8

typedef struct Bcast {
    int nd;                         // >= 1
    int64_t shape[BC_MAX];          // of the output
    int64_t sa[BC_MAX], sb[BC_MAX]; // element strides of a and b, 0 where broadcast
    int64_t n;                      // numel of the output
} Bcast;

static void bcast_init(Bcast *bc, int ndim, const int64_t *as, const int64_t *bs) {
    CHECK(ndim >= 0 && ndim <= BC_MAX, "broadcast: ndim %d out of range", ndim);
    int64_t ra = 1, rb = 1; // running contiguous strides, innermost first
    int64_t shape[BC_MAX], sa[BC_MAX], sb[BC_MAX];
    int nd = 0;
    for (int d = ndim - 1; d >= 0; d--) { // collect kept dims innermost first
        CHECK(as[d] == bs[d] || as[d] == 1 || bs[d] == 1, "broadcast: dim %d is %lld vs %lld", d,
              (long long)as[d], (long long)bs[d]);
        int64_t size = MAX(as[d], bs[d]);
        int64_t stride_a = as[d] == 1 ? 0 : ra, stride_b = bs[d] == 1 ? 0 : rb;
        ra *= as[d];
        rb *= bs[d];
        if (size == 1) continue;
        if (nd > 0 && stride_a == sa[nd - 1] * shape[nd - 1] &&
            stride_b == sb[nd - 1] * shape[nd - 1]) {
            shape[nd - 1] *= size; // linear across both: merge into the inner dim
            continue;
        }
        shape[nd] = size;
        sa[nd] = stride_a;
        sb[nd] = stride_b;
        nd++;
    }
    if (nd == 0) { // every dim is 1: one element
        shape[0] = 1;
        sa[0] = sb[0] = 0;
        nd = 1;
    }
    bc->nd = nd;
    bc->n = 1;
    for (int d = 0; d < nd; d++) { // store outermost first
        bc->shape[d] = shape[nd - 1 - d];
        bc->sa[d] = sa[nd - 1 - d];
        bc->sb[d] = sb[nd - 1 - d];
        bc->n *= bc->shape[d];
    }
}

// Offsets into a and b of outer multi-index `row` over dims [0, nd-1) (the inner dim is
// walked by the row functions).
static void bcast_row(const Bcast *bc, int64_t row, int64_t *oa, int64_t *ob) {
    int64_t a = 0, b = 0;
    for (int d = bc->nd - 2; d >= 0; d--) {
        int64_t i = row % bc->shape[d];
        row /= bc->shape[d];
        a += i * bc->sa[d];
        b += i * bc->sb[d];
    }
    *oa = a;
    *ob = b;
}

// A row function computes n consecutive outputs from a[j*sa], b[j*sb] (strides 0 or 1).
typedef void (*FwdRow)(float *o, const float *a, int64_t sa, const float *b, int64_t sb, int64_t n);
// A gradient row: dx[j] += term(g[j], a[j*sa], b[j*sb]) for one operand x.
typedef void (*GradRow)(float *dx, const float *g, const float *a, int64_t sa, const float *b,
                        int64_t sb, int64_t n);

// The per-element formulas: forward f(x, y), gradient term(g, x, y) with x, y the operands.
typedef float (*FwdElem)(float x, float y);
typedef float (*GradElem)(float g, float x, float y);

// The loops of every row function. Each *_row below passes a constant elem, which GCC inlines
// (static inline, then the call through the constant pointer), so the unit-stride branch -- the
// same-shape fast path -- vectorises as if the formula were written in the loop.
static inline void fwd_row(FwdElem elem, float *restrict o, const float *restrict a, int64_t sa,
                           const float *restrict b, int64_t sb, int64_t n) {
    if (sa == 1 && sb == 1) {
#pragma omp simd
        for (int64_t j = 0; j < n; j++)
            o[j] = elem(a[j], b[j]);
        return;
    }
    for (int64_t j = 0; j < n; j++)
        o[j] = elem(a[j * sa], b[j * sb]);
}

static inline void grad_row(GradElem elem, float *restrict dx, const float *restrict g,
                            const float *a, int64_t sa, const float *b, int64_t sb, int64_t n) {
    if (sa == 1 && sb == 1) {
#pragma omp simd
        for (int64_t j = 0; j < n; j++)
            dx[j] += elem(g[j], a[j], b[j]);
        return;
    }
    for (int64_t j = 0; j < n; j++)
        dx[j] += elem(g[j], a[j * sa], b[j * sb]);
}

// PyTorch's maximum/minimum propagate NaN from either side.
static inline float nan_or(float x, float y, float value) {
    return isnan(x) ? x : isnan(y) ? y : value;
}

static inline float add_elem(float x, float y) {
    return x + y;
}
static inline float sub_elem(float x, float y) {
    return x - y;
}
static inline float mul_elem(float x, float y) {
    return x * y;
}
static inline float div_elem(float x, float y) {
    return x / y;
}
static inline float maximum_elem(float x, float y) {
    return nan_or(x, y, x > y ? x : y);
}
static inline float minimum_elem(float x, float y) {
    return nan_or(x, y, x < y ? x : y);
}

// derivatives.yaml: maximum's self grad is where(a == b, g / 2, g).masked_fill(a < b, 0).
static inline float pass_elem(float g, float x, float y) {
    return g;
}
static inline float negate_elem(float g, float x, float y) {
    return -g;
}
static inline float mul_da_elem(float g, float x, float y) {
    return g * y;
}
static inline float mul_db_elem(float g, float x, float y) {
    return g * x;
}
static inline float div_da_elem(float g, float x, float y) {
    return g / y;
}
static inline float div_db_elem(float g, float x, float y) {
    return -g * ((x / y) / y);
}
static inline float maximum_da_elem(float g, float x, float y) {
    return x == y ? g / 2.0f : (x < y ? 0.0f : g);
}
static inline float maximum_db_elem(float g, float x, float y) {
    return x == y ? g / 2.0f : (y < x ? 0.0f : g);
}
static inline float minimum_da_elem(float g, float x, float y) {
    return x == y ? g / 2.0f : (x > y ? 0.0f : g);
}
static inline float minimum_db_elem(float g, float x, float y) {
    return x == y ? g / 2.0f : (y > x ? 0.0f : g);
}

static void add_row(float *o, const float *a, int64_t sa, const float *b, int64_t sb, int64_t n) {
    fwd_row(add_elem, o, a, sa, b, sb, n);
}
static void sub_row(float *o, const float *a, int64_t sa, const float *b, int64_t sb, int64_t n) {
    fwd_row(sub_elem, o, a, sa, b, sb, n);
}
static void mul_row(float *o, const float *a, int64_t sa, const float *b, int64_t sb, int64_t n) {
    fwd_row(mul_elem, o, a, sa, b, sb, n);
}
static void div_row(float *o, const float *a, int64_t sa, const float *b, int64_t sb, int64_t n) {
    fwd_row(div_elem, o, a, sa, b, sb, n);
}
static void maximum_row(float *o, const float *a, int64_t sa, const float *b, int64_t sb,
                        int64_t n) {
    fwd_row(maximum_elem, o, a, sa, b, sb, n);
}
static void minimum_row(float *o, const float *a, int64_t sa, const float *b, int64_t sb,
                        int64_t n) {
    fwd_row(minimum_elem, o, a, sa, b, sb, n);
}

static void pass_row(float *dx, const float *g, const float *a, int64_t sa, const float *b,
                     int64_t sb, int64_t n) {
    grad_row(pass_elem, dx, g, a, sa, b, sb, n);
}
static void negate_row(float *dx, const float *g, const float *a, int64_t sa, const float *b,
                       int64_t sb, int64_t n) {
    grad_row(negate_elem, dx, g, a, sa, b, sb, n);
}
static void mul_da_row(float *dx, const float *g, const float *a, int64_t sa, const float *b,
                       int64_t sb, int64_t n) {
    grad_row(mul_da_elem, dx, g, a, sa, b, sb, n);
}
static void mul_db_row(float *dx, const float *g, const float *a, int64_t sa, const float *b,
                       int64_t sb, int64_t n) {
    grad_row(mul_db_elem, dx, g, a, sa, b, sb, n);
}
static void div_da_row(float *dx, const float *g, const float *a, int64_t sa, const float *b,
                       int64_t sb, int64_t n) {
    grad_row(div_da_elem, dx, g, a, sa, b, sb, n);
}
static void div_db_row(float *dx, const float *g, const float *a, int64_t sa, const float *b,
                       int64_t sb, int64_t n) {
    grad_row(div_db_elem, dx, g, a, sa, b, sb, n);
}
static void maximum_da_row(float *dx, const float *g, const float *a, int64_t sa, const float *b,
                           int64_t sb, int64_t n) {
    grad_row(maximum_da_elem, dx, g, a, sa, b, sb, n);
}
static void maximum_db_row(float *dx, const float *g, const float *a, int64_t sa, const float *b,
                           int64_t sb, int64_t n) {
    grad_row(maximum_db_elem, dx, g, a, sa, b, sb, n);
}
static void minimum_da_row(float *dx, const float *g, const float *a, int64_t sa, const float *b,
                           int64_t sb, int64_t n) {
    grad_row(minimum_da_elem, dx, g, a, sa, b, sb, n);
}
static void minimum_db_row(float *dx, const float *g, const float *a, int64_t sa, const float *b,
                           int64_t sb, int64_t n) {
    grad_row(minimum_db_elem, dx, g, a, sa, b, sb, n);
}

// Work unit along the inner dim: small enough for the stack buffers below, large enough that
// per-tile index arithmetic is noise.
#define TILE 1024

static void binary_fwd(KernelCtx *kc, FwdRow row, float *out, const float *a, const float *b,
                       int ndim, const int64_t *as, const int64_t *bs) {
    Bcast bc;
    bcast_init(&bc, ndim, as, bs);
    if (bc.n == 0) return;
    int64_t inner = bc.shape[bc.nd - 1], rows = bc.n / inner;
    int64_t per_row = CEIL_DIV(inner, TILE), n_tiles = rows * per_row;
    int64_t sa = bc.sa[bc.nd - 1], sb = bc.sb[bc.nd - 1];
#pragma omp parallel for num_threads(kc->n_threads) if (bc.n > PAR_MIN)
    for (int64_t t = 0; t < n_tiles; t++) {
        int64_t r = t / per_row, j0 = (t % per_row) * TILE, oa, ob;
        bcast_row(&bc, r, &oa, &ob);
        row(out + r * inner + j0, a + oa + j0 * sa, sa, b + ob + j0 * sb, sb,
            MIN(TILE, inner - j0));
    }
}

// dx += the gradient term summed over the dims where x (strides sx: bc.sa or bc.sb) is
// broadcast. Work is split by x's own elements, so no two threads write the same dx entry
// and the summation order does not depend on the thread count:
// - inner dim kept by x: a task owns a TILE-long run of dx and walks every reduced index;
// - inner dim reduced: a task owns one dx element and sums contiguous runs of dout.
static void binary_grad(KernelCtx *kc, GradRow row, float *dx, const int64_t *sx, const Bcast *bc,
                        const float *dout, const float *a, const float *b) {
    const int last = bc->nd - 1;
    const int64_t inner = bc->shape[last], sa = bc->sa[last], sb = bc->sb[last];
    int kept[BC_MAX], red[BC_MAX], nk = 0, nr = 0;
    int64_t so[BC_MAX]; // contiguous strides of dout
    so[last] = 1;
    for (int d = last - 1; d >= 0; d--)
        so[d] = so[d + 1] * bc->shape[d + 1];
    int64_t n_kept = 1, n_red = 1;
    for (int d = 0; d < last; d++) {
        if (sx[d] != 0) {
            kept[nk++] = d;
            n_kept *= bc->shape[d];
        } else {
            red[nr++] = d;
            n_red *= bc->shape[d];
        }
    }
    const bool inner_kept = sx[last] != 0;
    const int64_t per_kept = inner_kept ? CEIL_DIV(inner, TILE) : 1;
    const int64_t n_tasks = n_kept * per_kept;
#pragma omp parallel for num_threads(kc->n_threads) if (bc->n > PAR_MIN && n_tasks > 1)
    for (int64_t t = 0; t < n_tasks; t++) {
        int64_t k = t / per_kept, j0 = (t % per_kept) * TILE;
        int64_t ko = 0, ka = 0, kb = 0, kx = 0;
        for (int i = nk - 1; i >= 0; i--) {
            int d = kept[i];
            int64_t idx = k % bc->shape[d];
            k /= bc->shape[d];
            ko += idx * so[d], ka += idx * bc->sa[d], kb += idx * bc->sb[d], kx += idx * sx[d];
        }
        float tmp[TILE];
        double acc[TILE];
        int64_t len = inner_kept ? MIN(TILE, inner - j0) : 0;
        if (inner_kept && n_red == 1) { // x not broadcast at all: write dx directly
            row(dx + kx + j0, dout + ko + j0, a + ka + j0 * sa, sa, b + kb + j0 * sb, sb, len);
            continue;
        }
        double sum = 0;
        for (int64_t j = 0; j < len; j++)
            acc[j] = 0;
        for (int64_t r = 0; r < n_red; r++) {
            int64_t ro = ko, ra = ka, rb = kb, rr = r;
            for (int i = nr - 1; i >= 0; i--) {
                int d = red[i];
                int64_t idx = rr % bc->shape[d];
                rr /= bc->shape[d];
                ro += idx * so[d], ra += idx * bc->sa[d], rb += idx * bc->sb[d];
            }
            if (inner_kept) {
                memset(tmp, 0, sizeof(float) * (size_t)len);
                row(tmp, dout + ro + j0, a + ra + j0 * sa, sa, b + rb + j0 * sb, sb, len);
#pragma omp simd
                for (int64_t j = 0; j < len; j++)
                    acc[j] += tmp[j];
                continue;
            }
            for (int64_t c0 = 0; c0 < inner; c0 += TILE) {
                int64_t m = MIN(TILE, inner - c0);
                memset(tmp, 0, sizeof(float) * (size_t)m);
                row(tmp, dout + ro + c0, a + ra + c0 * sa, sa, b + rb + c0 * sb, sb, m);
#pragma omp simd reduction(+ : sum)
                for (int64_t j = 0; j < m; j++)
                    sum += tmp[j];
            }
        }
        if (inner_kept)
            for (int64_t j = 0; j < len; j++)
                dx[kx + j0 + j] += (float)acc[j];
        else
            dx[kx] += (float)sum;
    }
}

static void binary_bwd(KernelCtx *kc, GradRow row_a, GradRow row_b, float *da, float *db,
                       const float *dout, const float *a, const float *b, int ndim,
                       const int64_t *as, const int64_t *bs) {
    Bcast bc;
    bcast_init(&bc, ndim, as, bs);
    if (bc.n == 0) return; // an empty output: every gradient stays as it is
    if (da) binary_grad(kc, row_a, da, bc.sa, &bc, dout, a, b);
    if (db) binary_grad(kc, row_b, db, bc.sb, &bc, dout, a, b);
}

void add_fwd_cpu(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                 const int64_t *a_shape, const int64_t *b_shape) {
    binary_fwd(kc, add_row, out, a, b, ndim, a_shape, b_shape);
}

void sub_fwd_cpu(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                 const int64_t *a_shape, const int64_t *b_shape) {
    binary_fwd(kc, sub_row, out, a, b, ndim, a_shape, b_shape);
}

void mul_fwd_cpu(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                 const int64_t *a_shape, const int64_t *b_shape) {
    binary_fwd(kc, mul_row, out, a, b, ndim, a_shape, b_shape);
}

void div_fwd_cpu(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                 const int64_t *a_shape, const int64_t *b_shape) {
    binary_fwd(kc, div_row, out, a, b, ndim, a_shape, b_shape);
}

void maximum_fwd_cpu(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                     const int64_t *a_shape, const int64_t *b_shape) {
    binary_fwd(kc, maximum_row, out, a, b, ndim, a_shape, b_shape);
}

void minimum_fwd_cpu(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                     const int64_t *a_shape, const int64_t *b_shape) {
    binary_fwd(kc, minimum_row, out, a, b, ndim, a_shape, b_shape);
}

// add and sub read neither operand: dout stands in for both, which is in bounds for every
// offset of either (an operand never has more elements than the output).
void add_bwd_cpu(KernelCtx *kc, float *da, float *db, const float *dout, int ndim,
                 const int64_t *a_shape, const int64_t *b_shape) {
    binary_bwd(kc, pass_row, pass_row, da, db, dout, dout, dout, ndim, a_shape, b_shape);
}

void sub_bwd_cpu(KernelCtx *kc, float *da, float *db, const float *dout, int ndim,
                 const int64_t *a_shape, const int64_t *b_shape) {
    binary_bwd(kc, pass_row, negate_row, da, db, dout, dout, dout, ndim, a_shape, b_shape);
}

void mul_bwd_cpu(KernelCtx *kc, float *da, float *db, const float *dout, const float *a,
                 const float *b, int ndim, const int64_t *a_shape, const int64_t *b_shape) {
    binary_bwd(kc, mul_da_row, mul_db_row, da, db, dout, a, b, ndim, a_shape, b_shape);
}

void div_bwd_cpu(KernelCtx *kc, float *da, float *db, const float *dout, const float *a,
                 const float *b, int ndim, const int64_t *a_shape, const int64_t *b_shape) {
    binary_bwd(kc, div_da_row, div_db_row, da, db, dout, a, b, ndim, a_shape, b_shape);
}

void maximum_bwd_cpu(KernelCtx *kc, float *da, float *db, const float *dout, const float *a,
                     const float *b, int ndim, const int64_t *a_shape, const int64_t *b_shape) {
    binary_bwd(kc, maximum_da_row, maximum_db_row, da, db, dout, a, b, ndim, a_shape, b_shape);
}

void minimum_bwd_cpu(KernelCtx *kc, float *da, float *db, const float *dout, const float *a,
                     const float *b, int ndim, const int64_t *a_shape, const int64_t *b_shape) {
    binary_bwd(kc, minimum_da_row, minimum_db_row, da, db, dout, a, b, ndim, a_shape, b_shape);
}

// ---- BCE with logits ----
// PyTorch 1.13's form: with m = max(-x, 0), (1 - y) x + m + log(exp(-m) + exp(-x - m)); the
// exponents are <= 0, so nothing overflows.
void bce_logits_fwd_cpu(KernelCtx *kc, float *out, const float *x, const float *y, int64_t n) {
#pragma omp parallel for num_threads(kc->n_threads) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float m = -x[i] > 0.0f ? -x[i] : 0.0f;
        out[i] = (1.0f - y[i]) * x[i] + m + logf(expf(-m) + expf(-x[i] - m));
    }
}

void bce_logits_bwd_cpu(KernelCtx *kc, float *dx, float *dy, const float *dout, const float *x,
                        const float *y, int64_t n) {
#pragma omp parallel for num_threads(kc->n_threads) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        if (dx) dx[i] += (1.0f / (1.0f + expf(-x[i])) - y[i]) * dout[i];
        if (dy) dy[i] += -x[i] * dout[i];
    }
}
