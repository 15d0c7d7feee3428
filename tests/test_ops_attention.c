/* test_ops_attention.c -- linear, matmul, bmm, the MHA core, grid_sample and multi-scale
 * deformable attention: forward values against naive loops and hand-computed cases,
 * msdeform_attn against a slow reference built from grid_sample per level, every backward
 * against finite differences, the attention softmax against double precision over exp's whole
 * range, and thread-count independence of the attention and deformable kernels.
 * Sample points are kept off integer pixel coordinates (bilinear kinks), some partly or wholly
 * outside the image so the zero padding is exercised. */
#include <math.h>

#include "tests/expect.h"
#include "tests/gradcheck.h"
#include "trainer/ops/ops.h"

#include "kernels/base.h"

static Arena leaves; // test inputs, alive for the whole run

static Tensor *leaf(int ndim, const int64_t *shape, uint64_t seed, float lo, float hi) {
    Tensor *x = tensor_leaf(&leaves, ndim, shape);
    gc_fill_uniform(x, seed, lo, hi);
    return x;
}

static uint64_t rng_state = 88172645463325252ull;
static double rnd(void) { // uniform [0, 1)
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

// A normalised coordinate in [0, 1] whose pixel coordinate loc*size - 0.5 is k + frac with
// k in [-2, size] (so some points are partly or wholly outside) and frac in [0.2, 0.8]: at
// least 0.2 - size*h from a kink for the gradcheck step h.
static float off_grid_coord(int64_t size) {
    int64_t k = -2 + (int64_t)(rnd() * (double)(size + 3));
    double frac = 0.2 + 0.6 * rnd();
    return (float)(((double)k + frac + 0.5) / (double)size);
}

// ---- linear, matmul, bmm ----
static void test_linear_forward(void) {
    Arena a;
    arena_init(&a, DEV_CPU, 1 << 16);
    Tape t;
    tape_init(&t, &a, 1);
    Tensor *x = leaf(3, (int64_t[]){2, 3, 4}, 1, -1, 1);
    Tensor *w = leaf(2, (int64_t[]){5, 4}, 2, -1, 1);
    Tensor *b = leaf(1, (int64_t[]){5}, 3, -1, 1);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        Tensor *y = op_linear(&t, x, w, with_bias ? b : NULL);
        EXPECT(y->ndim == 3 && y->shape[0] == 2 && y->shape[1] == 3 && y->shape[2] == 5,
               "linear output shape");
        for (int m = 0; m < 6; m++)
            for (int o = 0; o < 5; o++) {
                double ref = with_bias ? b->data[o] : 0.0;
                for (int i = 0; i < 4; i++)
                    ref += (double)x->data[m * 4 + i] * w->data[o * 4 + i];
                EXPECT_NEAR(y->data[m * 5 + o], ref, 1e-6, 1e-6);
            }
        // edges in addmm's order: bias, x, w
        Node *n = y->grad_fn;
        EXPECT(n && n->n_in == 3 && n->in[0] == (with_bias ? b : NULL) && n->in[1] == x &&
                   n->in[2] == w,
               "linear edges are not (bias, x, w)");
    }
    tape_free(&t);
    arena_free(&a);
}

static Tensor *fwd_linear(Tape *t, Tensor *const *in, void *user) {
    return op_linear(t, in[0], in[1], user ? NULL : in[2]);
}
static Tensor *fwd_matmul(Tape *t, Tensor *const *in, void *user) {
    return op_matmul(t, in[0], in[1]);
}
static Tensor *fwd_bmm(Tape *t, Tensor *const *in, void *user) {
    return op_bmm(t, in[0], in[1]);
}

static void test_linear_grads(void) {
    Tensor *x = leaf(3, (int64_t[]){2, 3, 4}, 4, -1, 1);
    Tensor *w = leaf(2, (int64_t[]){5, 4}, 5, -1, 1);
    Tensor *b = leaf(1, (int64_t[]){5}, 6, -1, 1);
    GcOptions o = {0};
    EXPECT(gradcheck("linear", fwd_linear, NULL, (Tensor *[]){x, w, b}, 3, o) == 0,
           "linear gradcheck");
    EXPECT(gradcheck("linear_nobias", fwd_linear, (void *)1, (Tensor *[]){x, w}, 2, o) == 0,
           "linear (no bias) gradcheck");
    Tensor *a = leaf(2, (int64_t[]){3, 4}, 7, -1, 1), *m = leaf(2, (int64_t[]){4, 5}, 8, -1, 1);
    EXPECT(gradcheck("matmul", fwd_matmul, NULL, (Tensor *[]){a, m}, 2, o) == 0,
           "matmul gradcheck");
    Tensor *ba = leaf(3, (int64_t[]){2, 3, 4}, 9, -1, 1);
    Tensor *bb = leaf(3, (int64_t[]){2, 4, 5}, 10, -1, 1);
    EXPECT(gradcheck("bmm", fwd_bmm, NULL, (Tensor *[]){ba, bb}, 2, o) == 0, "bmm gradcheck");
}

// ---- MHA core ----
enum { MB = 2, MLQ = 3, MLK = 4, ME = 8, MNH = 2 };

// Blocks some but not all keys of every query row.
static const uint8_t partial_mask[MLQ * MLK] = {0, 1, 0, 1, 1, 0, 0, 0, 0, 0, 1, 0};

// Naive double-precision multi_head_attention_forward without out_proj.
static void mha_reference(double *out, const Tensor *query, const Tensor *key, const Tensor *value,
                          const Tensor *w, const Tensor *bias, const uint8_t *mask) {
    const int D = ME / MNH;
    double q[MB][MLQ][ME], k[MB][MLK][ME], v[MB][MLK][ME];
    for (int b = 0; b < MB; b++)
        for (int o = 0; o < ME; o++) {
            for (int i = 0; i < MLQ; i++) {
                q[b][i][o] = bias->data[o];
                for (int e = 0; e < ME; e++)
                    q[b][i][o] += (double)query->data[(b * MLQ + i) * ME + e] * w->data[o * ME + e];
            }
            for (int j = 0; j < MLK; j++) {
                k[b][j][o] = bias->data[ME + o];
                v[b][j][o] = bias->data[2 * ME + o];
                for (int e = 0; e < ME; e++) {
                    k[b][j][o] +=
                        (double)key->data[(b * MLK + j) * ME + e] * w->data[(ME + o) * ME + e];
                    v[b][j][o] += (double)value->data[(b * MLK + j) * ME + e] *
                                  w->data[(2 * ME + o) * ME + e];
                }
            }
        }
    for (int b = 0; b < MB; b++)
        for (int h = 0; h < MNH; h++)
            for (int i = 0; i < MLQ; i++) {
                double s[MLK], max = -INFINITY, sum = 0;
                for (int j = 0; j < MLK; j++) {
                    s[j] = 0;
                    for (int d = 0; d < D; d++)
                        s[j] += q[b][i][h * D + d] * k[b][j][h * D + d];
                    s[j] = mask && mask[i * MLK + j] ? -INFINITY : s[j] / sqrt((double)D);
                    max = fmax(max, s[j]);
                }
                for (int j = 0; j < MLK; j++)
                    sum += (s[j] = exp(s[j] - max));
                for (int d = 0; d < D; d++) {
                    double acc = 0;
                    for (int j = 0; j < MLK; j++)
                        acc += s[j] / sum * v[b][j][h * D + d];
                    out[(b * MLQ + i) * ME + h * D + d] = acc;
                }
            }
}

static Tensor *mha_inputs[5];

static void make_mha_inputs(void) {
    mha_inputs[0] = leaf(3, (int64_t[]){MB, MLQ, ME}, 20, -1, 1);
    mha_inputs[1] = leaf(3, (int64_t[]){MB, MLK, ME}, 21, -1, 1);
    mha_inputs[2] = leaf(3, (int64_t[]){MB, MLK, ME}, 22, -1, 1);
    mha_inputs[3] = leaf(2, (int64_t[]){3 * ME, ME}, 23, -0.5f, 0.5f);
    mha_inputs[4] = leaf(1, (int64_t[]){3 * ME}, 24, -0.5f, 0.5f);
}

static void test_mha_forward(void) {
    Arena a;
    arena_init(&a, DEV_CPU, 1 << 16);
    Tape t;
    tape_init(&t, &a, 1);
    Tensor **in = mha_inputs;
    for (int masked = 0; masked < 2; masked++) {
        const uint8_t *mask = masked ? partial_mask : NULL;
        Tensor *y = op_mha_core(&t, in[0], in[1], in[2], in[3], in[4], MNH, mask);
        double ref[MB * MLQ * ME];
        mha_reference(ref, in[0], in[1], in[2], in[3], in[4], mask);
        for (int i = 0; i < MB * MLQ * ME; i++)
            EXPECT_NEAR(y->data[i], ref[i], 1e-5, 1e-5);
        Node *n = y->grad_fn;
        EXPECT(n && n->n_in == 5 && n->in[0] == in[0] && n->in[1] == in[1] && n->in[2] == in[2] &&
                   n->in[3] == in[4] && n->in[4] == in[3],
               "mha edges are not (query, key, value, in_proj_bias, in_proj_weight)");
    }
    // A query row with every key masked is NaN (PyTorch: softmax of all -inf); others are not.
    uint8_t full[MLQ * MLK] = {1, 1, 1, 1};
    Tensor *y = op_mha_core(&t, in[0], in[1], in[2], in[3], in[4], MNH, full);
    for (int b = 0; b < MB; b++)
        for (int i = 0; i < MLQ; i++)
            for (int e = 0; e < ME; e++) {
                float v = y->data[(b * MLQ + i) * ME + e];
                EXPECT(i == 0 ? isnan(v) : isfinite(v), "fully masked row: b %d q %d = %g", b, i,
                       v);
            }
    tape_free(&t);
    arena_free(&a);
}

static Tensor *fwd_mha(Tape *t, Tensor *const *in, void *user) {
    return op_mha_core(t, in[0], in[1], in[2], in[3], in[4], MNH, user);
}
// Self-attention as AIFI calls it: query and key are one tensor.
static Tensor *fwd_mha_shared_qk(Tape *t, Tensor *const *in, void *user) {
    return op_mha_core(t, in[0], in[0], in[1], in[2], in[3], MNH, NULL);
}

static void test_mha_grads(void) {
    // h = 2e-2, not 1e-2: several in_proj gradients are near zero (the key bias's is exactly
    // zero, softmax ignoring a per-row constant), where the fp32 rounding of the forward divided
    // by 2h (~1e-5 at h = 1e-2) reaches the 1e-5 absolute floor of the check.
    GcOptions o = {.h = 2e-2};
    EXPECT(gradcheck("mha", fwd_mha, NULL, mha_inputs, 5, o) == 0, "mha gradcheck");
    EXPECT(gradcheck("mha_masked", fwd_mha, (void *)partial_mask, mha_inputs, 5, o) == 0,
           "mha (masked) gradcheck");
    Tensor *qk = leaf(3, (int64_t[]){MB, MLQ, ME}, 25, -1, 1);
    Tensor *v = leaf(3, (int64_t[]){MB, MLQ, ME}, 26, -1, 1);
    EXPECT(gradcheck("mha_shared_qk", fwd_mha_shared_qk, NULL,
                     (Tensor *[]){qk, v, mha_inputs[3], mha_inputs[4]}, 4, o) == 0,
           "mha (query is key) gradcheck");
}

// The attention kernel's softmax against double precision over the whole range of exp: one
// query, one head, scores qs . k_j = k_j[0] from 0 (the row max) down to -110, where
// exp(x) passes through the denormals to 0 (below -104). Scores of -inf weigh 0; one NaN
// score makes the whole row NaN, as in PyTorch.
static void test_attention_softmax_range(void) {
    const Backend *be = backend_need(DEV_CPU);
    KernelCtx kc = {.n_threads = 1};
    enum { N = 2003 };
    // E = N columns: qs = e_0 makes key j's score its column 0, and v = the identity makes
    // the output row the probabilities themselves (the kernel keeps no other copy of them).
    float *qs = xcalloc(N, sizeof(float)), *k = xcalloc((size_t)N * N, sizeof(float));
    float *v = xcalloc((size_t)N * N, sizeof(float)), *p = xmalloc(sizeof(float) * N);
    qs[0] = 1.0f;
    for (int j = 0; j < N; j++) {
        k[(size_t)j * N] = j < N - 2 ? (float)(-0.055 * j) : -INFINITY;
        v[(size_t)j * N + j] = 1.0f;
    }
    be->attention_fwd(&kc, p, qs, k, v, NULL, 1, 1, 1, N, N);
    double sum = 0;
    for (int j = 0; j < N; j++)
        sum += exp((double)k[(size_t)j * N]);
    int bad = 0;
    for (int j = 0; j < N; j++) {
        double ref = exp((double)k[(size_t)j * N]) / sum;
        // 4 ulps (exp within 1.3, the float sum and the scaling), at least 2 denormal ulps
        if (fabs(p[j] - ref) > 5e-7 * ref + 3e-45) bad++;
    }
    EXPECT(bad == 0, "%d of %d softmax probabilities off their double reference", bad, N);
    EXPECT(p[N - 1] == 0.0f && p[N - 2] == 0.0f && p[1999] == 0.0f && p[1800] > 0.0f,
           "exp of -inf and of scores below -104 must be 0, of -99 positive");

    k[(size_t)7 * N] = NAN;
    be->attention_fwd(&kc, p, qs, k, v, NULL, 1, 1, 1, N, N);
    bool all_nan = true;
    for (int j = 0; j < N; j++)
        all_nan = all_nan && isnan(p[j]);
    EXPECT(all_nan, "a NaN score must make the row NaN");
    free(p);
    free(v);
    free(k);
    free(qs);
}

// RT-DETR's denoising mask shape, at 200 queries: rows 0-79 are 8 groups of 10 that see their
// own group's keys and keys 80-199, rows 80-199 see keys 80-199 only. The CPU kernels then
// compute the scores over each row group's unmasked column range (kernels/cpu/attention.c);
// forward and backward against a naive double-precision attention over whole rows.
static void test_attention_block_mask(void) {
    enum { B = 2, NH = 2, L = 200, E = 16, D = E / NH, DN = 80, G = 10 };
    const Backend *be = backend_need(DEV_CPU);
    KernelCtx kc = {.n_threads = 2};
    uint8_t *mask = xmalloc(L * L);
    for (int q = 0; q < L; q++)
        for (int j = 0; j < L; j++)
            mask[q * L + j] = j < DN && (q >= DN || j / G != q / G);
    float *qs = xmalloc(sizeof(float) * B * L * E), *k = xmalloc(sizeof(float) * B * L * E);
    float *v = xmalloc(sizeof(float) * B * L * E), *dout = xmalloc(sizeof(float) * B * L * E);
    for (int i = 0; i < B * L * E; i++) {
        qs[i] = (float)(rnd() * 2 - 1), k[i] = (float)(rnd() * 2 - 1);
        v[i] = (float)(rnd() * 2 - 1), dout[i] = (float)(rnd() * 2 - 1);
    }
    float *out = xmalloc(sizeof(float) * B * L * E), *dqs = xcalloc(B * L * E, sizeof(float));
    float *dk = xcalloc(B * L * E, sizeof(float)), *dv = xcalloc(B * L * E, sizeof(float));
    be->attention_fwd(&kc, out, qs, k, v, mask, B, NH, L, L, E);
    be->attention_bwd(&kc, dqs, dk, dv, dout, qs, k, v, mask, B, NH, L, L, E);
    double *p = xmalloc(sizeof(double) * L * L), *ds = xmalloc(sizeof(double) * L * L);
    double *rq = xcalloc(B * L * E, sizeof(double)), *rk = xcalloc(B * L * E, sizeof(double));
    double *rv = xcalloc(B * L * E, sizeof(double)), *ro = xcalloc(B * L * E, sizeof(double));
#define AT(x, b, i, h, d) x[((b) * L + (i)) * E + (h) * D + (d)]
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            for (int q = 0; q < L; q++) { // P, out
                double max = -INFINITY, sum = 0;
                for (int j = 0; j < L; j++) {
                    double sc = 0;
                    for (int d = 0; d < D; d++) sc += (double)AT(qs, b, q, h, d) * AT(k, b, j, h, d);
                    p[q * L + j] = mask[q * L + j] ? -INFINITY : sc;
                    max = fmax(max, p[q * L + j]);
                }
                for (int j = 0; j < L; j++) sum += (p[q * L + j] = exp(p[q * L + j] - max));
                for (int j = 0; j < L; j++) p[q * L + j] /= sum;
                for (int d = 0; d < D; d++)
                    for (int j = 0; j < L; j++) AT(ro, b, q, h, d) += p[q * L + j] * AT(v, b, j, h, d);
            }
            for (int q = 0; q < L; q++) { // dP, dv, dS
                double dot = 0;
                for (int j = 0; j < L; j++) {
                    double dp = 0;
                    for (int d = 0; d < D; d++) {
                        dp += (double)AT(dout, b, q, h, d) * AT(v, b, j, h, d);
                        AT(rv, b, j, h, d) += p[q * L + j] * AT(dout, b, q, h, d);
                    }
                    ds[q * L + j] = dp;
                    dot += dp * p[q * L + j];
                }
                for (int j = 0; j < L; j++) ds[q * L + j] = p[q * L + j] * (ds[q * L + j] - dot);
            }
            for (int q = 0; q < L; q++) // dqs, dk
                for (int j = 0; j < L; j++)
                    for (int d = 0; d < D; d++) {
                        AT(rq, b, q, h, d) += ds[q * L + j] * AT(k, b, j, h, d);
                        AT(rk, b, j, h, d) += ds[q * L + j] * AT(qs, b, q, h, d);
                    }
        }
#undef AT
    int bad = 0;
    const float *got[4] = {out, dqs, dk, dv};
    const double *want[4] = {ro, rq, rk, rv};
    for (int t = 0; t < 4; t++)
        for (int i = 0; i < B * L * E; i++)
            bad += !(fabs(got[t][i] - want[t][i]) <= 1e-5 + 1e-4 * fabs(want[t][i]));
    EXPECT(bad == 0, "%d of %d attention values off the double reference", bad, 4 * B * L * E);
    free(p), free(ds), free(rq), free(rk), free(rv), free(ro);
    free(out), free(dqs), free(dk), free(dv), free(qs), free(k), free(v), free(dout), free(mask);
}

// op_mha_core forward and backward at decoder-like widths give bit-identical results on 1 and
// 4 threads: the attention kernels give every (batch, head) to one thread.
static void test_mha_threads(void) {
    enum { B = 2, L = 40, E = 32, NH = 4 };
    Tensor *qk = leaf(3, (int64_t[]){B, L, E}, 30, -1, 1);
    Tensor *v = leaf(3, (int64_t[]){B, L, E}, 31, -1, 1);
    Tensor *w = leaf(2, (int64_t[]){3 * E, E}, 32, -0.3f, 0.3f);
    Tensor *bias = leaf(1, (int64_t[]){3 * E}, 33, -0.3f, 0.3f);
    Tensor *in[4] = {qk, v, w, bias};
    uint8_t *mask = xmalloc(L * L);
    for (int i = 0; i < L * L; i++)
        mask[i] = (i * 7) % 5 == 0;
    float *dy = xmalloc(sizeof(float) * B * L * E);
    for (int i = 0; i < B * L * E; i++)
        dy[i] = (float)(rnd() * 2 - 1);
    float *res[2][5];
    for (int run = 0; run < 2; run++) {
        Arena a;
        arena_init(&a, DEV_CPU, 1 << 20);
        Tape t;
        tape_init(&t, &a, run == 0 ? 1 : 4);
        for (int i = 0; i < 4; i++)
            in[i]->grad_defined = false;
        Tensor *y = op_mha_core(&t, qk, qk, v, w, bias, NH, mask);
        EXPECT(tape_backward(&t, y, dy) == 0, "backward failed");
        res[run][0] = xmalloc(sizeof(float) * (size_t)y->n);
        memcpy(res[run][0], y->data, sizeof(float) * (size_t)y->n);
        for (int i = 0; i < 4; i++) {
            res[run][i + 1] = xmalloc(sizeof(float) * (size_t)in[i]->n);
            memcpy(res[run][i + 1], in[i]->grad, sizeof(float) * (size_t)in[i]->n);
        }
        tape_free(&t);
        arena_free(&a);
    }
    int64_t n[5] = {B * L * E, qk->n, v->n, w->n, bias->n};
    for (int k = 0; k < 5; k++) {
        EXPECT(memcmp(res[0][k], res[1][k], sizeof(float) * (size_t)n[k]) == 0,
               "mha tensor %d differs between 1 and 4 threads", k);
        free(res[0][k]);
        free(res[1][k]);
    }
    free(dy);
    free(mask);
}

// ---- grid_sample ----
static void test_grid_sample_hand(void) {
    Arena a;
    arena_init(&a, DEV_CPU, 1 << 16);
    Tape t;
    tape_init(&t, &a, 1);
    Tensor *x = tensor_4d(&a, 1, 1, 2, 2);
    for (int i = 0; i < 4; i++)
        x->data[i] = (float)(i + 1); // [[1, 2], [3, 4]]
    Tensor *g = tensor_4d(&a, 1, 1, 3, 2);
    const float pts[6] = {0, 0, -0.75f, 0, -2, 0};
    memcpy(g->data, pts, sizeof pts);
    Tensor *y = op_grid_sample(&t, x, g);
    // (0,0) -> pixel (0.5, 0.5): the mean of the four pixels.
    EXPECT_NEAR(y->data[0], 2.5, 1e-6, 0);
    // (-0.75, 0) -> pixel (-0.25, 0.5): the west column is outside (zero), the east column
    // x = 0 has weight 0.75: 0.75 * (0.5*1 + 0.5*3).
    EXPECT_NEAR(y->data[1], 1.5, 1e-6, 0);
    // (-2, 0) -> pixel (-1.5, 0.5): wholly outside.
    EXPECT(y->data[2] == 0.0f, "outside sample = %g", y->data[2]);
    tape_free(&t);
    arena_free(&a);
}

static Tensor *fwd_grid_sample(Tape *t, Tensor *const *in, void *user) {
    return op_grid_sample(t, in[0], in[1]);
}

static void test_grid_sample_grads(void) {
    Tensor *x = leaf(4, (int64_t[]){2, 3, 3, 4}, 30, -1, 1);
    Tensor *g = leaf(4, (int64_t[]){2, 2, 3, 2}, 31, 0, 1);
    for (int64_t i = 0; i < g->n; i += 2) { // grid = 2 * loc - 1 on a 3 (H) x 4 (W) image
        g->data[i] = 2 * off_grid_coord(4) - 1;
        g->data[i + 1] = 2 * off_grid_coord(3) - 1;
    }
    GcOptions o = {0};
    EXPECT(gradcheck("grid_sample", fwd_grid_sample, NULL, (Tensor *[]){x, g}, 2, o) == 0,
           "grid_sample gradcheck");
}

// ---- multi-scale deformable attention ----
typedef struct DeformCase {
    int64_t B, NH, D, L, P, Lq;
    int64_t shapes[6];
} DeformCase;

static const DeformCase small = {2, 2, 3, 2, 2, 3, {3, 4, 2, 2}};
// RT-DETR's 32 channels a head: deform_attn.c compiles this width apart (a constant channel
// count, whole vectors), so it is checked on its own.
static const DeformCase wide = {1, 2, 32, 2, 2, 3, {3, 4, 2, 2}};

static int64_t case_tokens(const DeformCase *c) {
    int64_t n = 0;
    for (int l = 0; l < c->L; l++)
        n += c->shapes[2 * l] * c->shapes[2 * l + 1];
    return n;
}

// in[0] value (B,N,NH,D), in[1] loc (B,Lq,NH,L,P,2), in[2] aw (B,Lq,NH,L,P).
static void make_deform_inputs(const DeformCase *c, Tensor **in, uint64_t seed) {
    in[0] = leaf(4, (int64_t[]){c->B, case_tokens(c), c->NH, c->D}, seed, -1, 1);
    in[1] = leaf(6, (int64_t[]){c->B, c->Lq, c->NH, c->L, c->P, 2}, seed + 1, 0, 1);
    in[2] = leaf(5, (int64_t[]){c->B, c->Lq, c->NH, c->L, c->P}, seed + 2, 0.1f, 1);
    for (int64_t j = 0; j < in[1]->n / 2; j++) {
        int64_t l = (j / c->P) % c->L;
        in[1]->data[2 * j] = off_grid_coord(c->shapes[2 * l + 1]);
        in[1]->data[2 * j + 1] = off_grid_coord(c->shapes[2 * l]);
    }
}

static Tensor *fwd_deform(Tape *t, Tensor *const *in, void *user) {
    const DeformCase *c = user;
    return op_msdeform_attn(t, in[0], c->shapes, (int)c->L, in[1], in[2]);
}

// multi_scale_deformable_attn_pytorch spelled out with op_grid_sample per level.
static void deform_reference(Tape *t, const DeformCase *c, Tensor *const *in, float *out) {
    int64_t B = c->B, NH = c->NH, D = c->D, L = c->L, P = c->P, Lq = c->Lq, N = case_tokens(c);
    memset(out, 0, sizeof(float) * (size_t)(B * Lq * NH * D));
    int64_t start = 0;
    for (int64_t l = 0; l < L; l++) {
        int64_t H = c->shapes[2 * l], W = c->shapes[2 * l + 1];
        Tensor *v = tensor_4d(t->arena, B * NH, D, H, W);
        Tensor *g = tensor_4d(t->arena, B * NH, Lq, P, 2);
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < NH; h++) {
                for (int64_t d = 0; d < D; d++)
                    for (int64_t pix = 0; pix < H * W; pix++)
                        v->data[((b * NH + h) * D + d) * H * W + pix] =
                            in[0]->data[((b * N + start + pix) * NH + h) * D + d];
                for (int64_t q = 0; q < Lq; q++)
                    for (int64_t p = 0; p < P; p++)
                        for (int k = 0; k < 2; k++)
                            g->data[(((b * NH + h) * Lq + q) * P + p) * 2 + k] =
                                2.0f * in[1]->data[((((b * Lq + q) * NH + h) * L + l) * P + p) * 2 +
                                                   k] -
                                1.0f;
            }
        Tensor *s = op_grid_sample(t, v, g); // (B*NH, D, Lq, P)
        for (int64_t b = 0; b < B; b++)
            for (int64_t q = 0; q < Lq; q++)
                for (int64_t h = 0; h < NH; h++)
                    for (int64_t d = 0; d < D; d++)
                        for (int64_t p = 0; p < P; p++)
                            out[((b * Lq + q) * NH + h) * D + d] +=
                                s->data[(((b * NH + h) * D + d) * Lq + q) * P + p] *
                                in[2]->data[(((b * Lq + q) * NH + h) * L + l) * P + p];
        start += H * W;
    }
}

static void test_deform_forward(const DeformCase *c) {
    Arena a;
    arena_init(&a, DEV_CPU, 1 << 18);
    Tape t;
    tape_init(&t, &a, 1);
    Tensor *in[3];
    make_deform_inputs(c, in, 40);
    Tensor *y = fwd_deform(&t, in, (void *)c);
    EXPECT(y->ndim == 3 && y->shape[0] == c->B && y->shape[1] == c->Lq &&
               y->shape[2] == c->NH * c->D,
           "msdeform_attn output shape");
    float *ref = xmalloc(sizeof(float) * (size_t)y->n);
    deform_reference(&t, c, in, ref);
    int nonzero = 0;
    for (int64_t i = 0; i < y->n; i++) {
        EXPECT_NEAR(y->data[i], ref[i], 1e-6, 1e-6);
        nonzero += ref[i] != 0.0f;
    }
    EXPECT(nonzero > y->n / 2, "reference mostly zero (%d of %lld)", nonzero, (long long)y->n);
    free(ref);
    tape_free(&t);
    arena_free(&a);
}

static void test_deform_grads(void) {
    Tensor *in[3];
    make_deform_inputs(&small, in, 50);
    GcOptions o = {0};
    EXPECT(gradcheck("msdeform_attn", fwd_deform, (void *)&small, in, 3, o) == 0,
           "msdeform_attn gradcheck");
    // Single batch, and sampling locations that need no gradient (the kernel's NULL path).
    const DeformCase one = {1, 2, 3, 2, 2, 3, {3, 4, 2, 2}};
    make_deform_inputs(&one, in, 60);
    in[1]->requires_grad = false;
    EXPECT(gradcheck("msdeform_attn_b1", fwd_deform, (void *)&one, in, 3, o) == 0,
           "msdeform_attn (B=1, constant locations) gradcheck");
    make_deform_inputs(&wide, in, 80);
    EXPECT(gradcheck("msdeform_attn_d32", fwd_deform, (void *)&wide, in, 3, o) == 0,
           "msdeform_attn (32 channels a head) gradcheck");
}

// Forward and backward at RT-DETR-like widths give bit-identical results on 1 and 4 threads:
// the (b, h) partition of backward must have no races.
static void test_deform_threads(void) {
    const DeformCase big = {2, 8, 32, 3, 4, 50, {8, 8, 4, 4, 2, 2}};
    Tensor *in[3];
    make_deform_inputs(&big, in, 70);
    int64_t n_out = big.B * big.Lq * big.NH * big.D;
    float *dy = xmalloc(sizeof(float) * (size_t)n_out);
    for (int64_t i = 0; i < n_out; i++)
        dy[i] = (float)(rnd() * 2 - 1);
    float *res[2][4];
    for (int run = 0; run < 2; run++) {
        Arena a;
        arena_init(&a, DEV_CPU, 1 << 20);
        Tape t;
        tape_init(&t, &a, run == 0 ? 1 : 4);
        for (int i = 0; i < 3; i++)
            in[i]->grad_defined = false;
        Tensor *y = fwd_deform(&t, in, (void *)&big);
        EXPECT(tape_backward(&t, y, dy) == 0, "backward failed");
        res[run][0] = xmalloc(sizeof(float) * (size_t)y->n);
        memcpy(res[run][0], y->data, sizeof(float) * (size_t)y->n);
        for (int i = 0; i < 3; i++) {
            res[run][i + 1] = xmalloc(sizeof(float) * (size_t)in[i]->n);
            memcpy(res[run][i + 1], in[i]->grad, sizeof(float) * (size_t)in[i]->n);
        }
        tape_free(&t);
        arena_free(&a);
    }
    free(dy);
    int64_t n[4] = {n_out, in[0]->n, in[1]->n, in[2]->n};
    for (int k = 0; k < 4; k++) {
        EXPECT(memcmp(res[0][k], res[1][k], sizeof(float) * (size_t)n[k]) == 0,
               "tensor %d differs between 1 and 4 threads", k);
        free(res[0][k]);
        free(res[1][k]);
    }
}

int main(void) {
    arena_init(&leaves, DEV_CPU, 1 << 20);
    test_linear_forward();
    test_linear_grads();
    make_mha_inputs();
    test_mha_forward();
    test_mha_grads();
    test_attention_softmax_range();
    test_attention_block_mask();
    test_mha_threads();
    test_grid_sample_hand();
    test_grid_sample_grads();
    test_deform_forward(&small);
    test_deform_forward(&wide);
    test_deform_grads();
    test_deform_threads();
    arena_free(&leaves);
    return expect_report();
}
