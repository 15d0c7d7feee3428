/* attention.c -- the non-GEMM pieces of linear layers (addmm's broadcast bias and its
 * column-sum gradient) and the attention of the MHA core: per (batch, head), scores, masked
 * softmax and the product with the values, forward and backward. One thread takes a whole
 * (batch, head) at a time, so that its (Lq, Lk) scores stay in its cache from one GEMM to the
 * next; its GEMMs run single-threaded (OpenBLAS's OpenMP build does so inside a parallel
 * region). A mask's row groups (row_groups) limit each group of query rows to the columns
 * they can see: where every probability is exactly 0, nothing is computed. The GEMMs are
 * gemm_cpu (kernels/cpu/gemm.c, OpenBLAS). */
#include <math.h>

#include "kernels/base.h"
#include "kernels/cpu/cpu_kernels.h"

void bias_rows_fwd_cpu(KernelCtx *kc, float *out, const float *bias, int64_t M, int64_t N) {
#pragma omp parallel for num_threads(kc->n_threads) if (M * N > 65536)
    for (int64_t m = 0; m < M; m++)
        memcpy(out + m * N, bias, (size_t)N * sizeof(float));
}

// Columns are summed in double, one block of BIAS_COLS columns per task: every row segment
// is read contiguously (the block's sums stay in registers or L1), no two threads write the
// same dbias entry, and the order of the sum does not depend on the thread count.
#define BIAS_COLS 128

void bias_rows_bwd_cpu(KernelCtx *kc, float *dbias, const float *dout, int64_t M, int64_t N) {
#pragma omp parallel for num_threads(kc->n_threads) if (M * N > 65536)
    for (int64_t n0 = 0; n0 < N; n0 += BIAS_COLS) {
        double acc[BIAS_COLS] = {0};
        int64_t nb = MIN(BIAS_COLS, N - n0);
        for (int64_t m = 0; m < M; m++) {
            const float *row = dout + m * N + n0;
#pragma omp simd
            for (int64_t j = 0; j < nb; j++)
                acc[j] += row[j];
        }
        for (int64_t j = 0; j < nb; j++)
            dbias[n0 + j] += (float)acc[j];
    }
}

// exp(x) for x <= 0 or NaN (scores minus their row max), by the algorithm of Sleef's expf_u10,
// which PyTorch's vectorised CPU softmax calls: x = q ln2 + r with q = rint(x / ln2) and ln2
// split in two so that r is exact, exp(r) from a degree-7 polynomial, then times 2^q in two
// halves so that results down to the denormals are right. Within 1.3 ulp of exp over
// [-104, 0] (measured against double exp); 0 below -104 and for -inf, NaN for NaN.
// Branch-free, with the final select done on the bits, so that `omp simd` loops vectorise it.
static inline __attribute__((always_inline)) float exp_nonpos(float x) {
    float q = (x * 1.442695040888963407359924681001892137f + 12582912.0f) - 12582912.0f;
    float r = x - q * 0.693145751953125f;
    r = r - q * 1.428606765330187045e-06f;
    float u = 0.000198527617612853646278381f;
    u = u * r + 0.00139304355252534151077271f;
    u = u * r + 0.00833336077630519866943359f;
    u = u * r + 0.0416664853692054748535156f;
    u = u * r + 0.166666671633720397949219f;
    u = u * r + 0.5f;
    u = (r * r) * u + (r + 1.0f);
    q = q > -150.0f ? q : -150.0f; // also maps NaN to a number before the int conversion
    int32_t qi = (int32_t)q, q1 = qi / 2, q2 = qi - q1;
    int32_t b1 = (q1 + 127) << 23, b2 = (q2 + 127) << 23; // 2^q1, 2^q2 as float bits
    float s1, s2;
    memcpy(&s1, &b1, sizeof s1);
    memcpy(&s2, &b2, sizeof s2);
    u = (u * s1) * s2;
    int32_t bits, keep = x < -104.0f ? 0 : -1; // all ones, or 0 where exp(x) is 0
    memcpy(&bits, &u, sizeof bits);
    bits &= keep;
    memcpy(&u, &bits, sizeof u);
    return u;
}

// PyTorch's CPU softmax over one row of Lk scores, with s[k] taken as -inf where m[k] != 0
// (m NULL: no mask): max, exp(x - max), then a multiply by 1/sum. out may equal in. A fully
// masked row has max = -inf and -inf - -inf = NaN, which propagates: NaN, as PyTorch.
// Inlined into softmax_rows' clones (a call would run the baseline build).
static inline __attribute__((always_inline)) void softmax_row(float *out, const float *in, const uint8_t *m, int64_t Lk) {
    float max = -INFINITY;
    if (m) {
#pragma omp simd reduction(max : max)
        for (int64_t k = 0; k < Lk; k++) {
            float x = in[k]; // read before the select, so that it vectorises
            float v = m[k] ? -INFINITY : x;
            out[k] = v;
            max = v > max ? v : max;
        }
    } else {
#pragma omp simd reduction(max : max)
        for (int64_t k = 0; k < Lk; k++) {
            out[k] = in[k];
            max = in[k] > max ? in[k] : max;
        }
    }
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t k = 0; k < Lk; k++) {
        out[k] = exp_nonpos(out[k] - max);
        sum += out[k];
    }
    float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t k = 0; k < Lk; k++)
        out[k] *= inv;
}

// The softmax backward over one row, in place: d (the gradient of the probabilities y) becomes
// the gradient of the scores, y * (d - sum_k d*y).
static inline __attribute__((always_inline)) void softmax_row_bwd(float *d, const float *y, int64_t Lk) {
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t k = 0; k < Lk; k++)
        dot += d[k] * y[k];
#pragma omp simd
    for (int64_t k = 0; k < Lk; k++)
        d[k] = (d[k] - dot) * y[k];
}

// Rows of one head's scores, ld floats apart, softmax over `width` keys (mask rows mask_ld
// bytes apart, or NULL), and its backward.
CPU_VECTOR_CLONES static void softmax_rows(float *s, int64_t ld, const uint8_t *mask,
                                           int64_t mask_ld, int64_t rows, int64_t width) {
    for (int64_t q = 0; q < rows; q++)
        softmax_row(s + q * ld, s + q * ld, mask ? mask + q * mask_ld : NULL, width);
}

CPU_VECTOR_CLONES static void softmax_rows_bwd(float *d, const float *y, int64_t ld, int64_t rows,
                                               int64_t width) {
    for (int64_t q = 0; q < rows; q++)
        softmax_row_bwd(d + q * ld, y + q * ld, width);
}

// Query rows r0..r1-1 whose unmasked keys all lie in columns c0..c1-1: outside them every
// probability is exactly 0, so the scores, the products and their gradients are computed over
// those columns only. RT-DETR's decoder self-attention: the 300 matching queries never see the
// 200 denoising keys (a quarter of the scores). A row with no unmasked key keeps all columns
// (its NaN, as PyTorch's).
typedef struct RowGroup {
    int64_t r0, r1, c0, c1;
} RowGroup;

// Merging a run of rows into the group before it may add up to GROUP_SLACK_ROWS rows' worth
// of scores that the two apart would not compute (each GEMM call and softmax pass has its
// overhead; RT-DETR's 20 denoising groups of 10 rows merge into one).
#define GROUP_SLACK_ROWS 32

// The groups of mask (Lq, Lk) into g (at most Lq); returns their count. Rows with the same
// unmasked column range form a run; a run joins the group before it when the union costs at
// most the slack more. NULL mask: one group.
static int64_t row_groups(const uint8_t *mask, int64_t Lq, int64_t Lk, RowGroup *g) {
    if (!mask || Lq == 0) {
        g[0] = (RowGroup){0, Lq, 0, Lk};
        return 1;
    }
    int64_t n = 0;
    for (int64_t q = 0; q < Lq;) {
        RowGroup run = {q, q, 0, Lk};
        for (; q < Lq; q++) { // the run: rows with the first row's range
            const uint8_t *m = mask + q * Lk;
            int64_t c0 = 0, c1 = Lk;
            while (c0 < Lk && m[c0]) c0++;
            while (c1 > c0 && m[c1 - 1]) c1--;
            if (c0 == c1) c0 = 0, c1 = Lk; // fully masked: every column, NaN as PyTorch
            if (q > run.r0 && (c0 != run.c0 || c1 != run.c1)) break;
            run.c0 = c0, run.c1 = c1, run.r1 = q + 1;
        }
        if (n > 0) {
            RowGroup *p = &g[n - 1];
            int64_t u0 = MIN(p->c0, run.c0), u1 = MAX(p->c1, run.c1);
            int64_t joined = (run.r1 - p->r0) * (u1 - u0);
            int64_t apart = (p->r1 - p->r0) * (p->c1 - p->c0) + (run.r1 - run.r0) * (run.c1 - run.c0);
            if (joined <= apart + GROUP_SLACK_ROWS * Lk) {
                p->r1 = run.r1, p->c0 = u0, p->c1 = u1;
                continue;
            }
        }
        g[n++] = run;
    }
    return n;
}

// Head bh = b*NH + h's probabilities into ph (Lq rows, Lk apart; group gr's rows hold its
// columns only): the scores qs_h k_h^T (one thread's GEMM), then the masked softmax of each
// row. The forward and the backward both call this, so the backward's probabilities are the
// forward's bit for bit.
static void group_probabilities(float *ph, const float *qs, const float *k, const uint8_t *mask,
                                const RowGroup *gr, int64_t bh, int NH, int64_t Lq, int64_t Lk,
                                int64_t E) {
    int64_t D = E / NH, b = bh / NH, col = (bh % NH) * D, rows = gr->r1 - gr->r0;
    int64_t w = gr->c1 - gr->c0;
    KernelCtx one = {.n_threads = 1};
    float *pg = ph + gr->r0 * Lk + gr->c0;
    gemm_cpu(&one, false, true, rows, w, D, 1.0f, qs + (b * Lq + gr->r0) * E + col, E,
             k + (b * Lk + gr->c0) * E + col, E, 0.0f, pg, Lk);
    softmax_rows(pg, Lk, mask ? mask + gr->r0 * Lk + gr->c0 : NULL, Lk, rows, w);
}

// One (batch, head) a task; each thread's (Lq, Lk) probabilities in its own scratch.
void attention_fwd_cpu(KernelCtx *kc, float *out, const float *qs, const float *k, const float *v,
                       const uint8_t *mask, int64_t B, int NH, int64_t Lq, int64_t Lk, int64_t E) {
    int64_t D = E / NH, LL = Lq * Lk;
    KernelCtx one = {.n_threads = 1, .stream = kc->stream};
    RowGroup *groups = xmalloc(sizeof(RowGroup) * (size_t)MAX(Lq, 1));
    const int64_t n_groups = row_groups(mask, Lq, Lk, groups);
#pragma omp parallel num_threads(kc->n_threads)
    {
        float *ph = xmalloc(sizeof(float) * (size_t)MAX(LL, 1));
#pragma omp for schedule(static)
        for (int64_t bh = 0; bh < B * NH; bh++) {
            int64_t b = bh / NH, col = (bh % NH) * D;
            for (int64_t i = 0; i < n_groups; i++) {
                const RowGroup *gr = &groups[i];
                group_probabilities(ph, qs, k, mask, gr, bh, NH, Lq, Lk, E);
                gemm_cpu(&one, false, false, gr->r1 - gr->r0, D, gr->c1 - gr->c0, 1.0f,
                         ph + gr->r0 * Lk + gr->c0, Lk, v + (b * Lk + gr->c0) * E + col, E, 0.0f,
                         out + (b * Lq + gr->r0) * E + col, E);
            }
        }
        free(ph);
    }
    free(groups);
}

// Per (batch, head) and row group, in two per-thread (Lq, Lk) scratches: P again
// (group_probabilities), dP = dO v^T, dv += P^T dO, dS in place of dP, dqs += dS k,
// dk += dS^T qs, each over the group's columns. Each task writes only its own head's columns.
// P stays in the thread's cache from its recomputation to its two uses.
void attention_bwd_cpu(KernelCtx *kc, float *dqs, float *dk, float *dv, const float *dout,
                       const float *qs, const float *k, const float *v, const uint8_t *mask,
                       int64_t B, int NH, int64_t Lq, int64_t Lk, int64_t E) {
    int64_t D = E / NH, LL = Lq * Lk;
    KernelCtx one = {.n_threads = 1, .stream = kc->stream};
    RowGroup *groups = xmalloc(sizeof(RowGroup) * (size_t)MAX(Lq, 1));
    const int64_t n_groups = row_groups(mask, Lq, Lk, groups);
#pragma omp parallel num_threads(kc->n_threads)
    {
        float *ph = xmalloc(sizeof(float) * (size_t)MAX(2 * LL, 1)), *ds = ph + LL;
#pragma omp for schedule(static)
        for (int64_t bh = 0; bh < B * NH; bh++) {
            int64_t b = bh / NH, col = (bh % NH) * D;
            for (int64_t i = 0; i < n_groups; i++) {
                const RowGroup *gr = &groups[i];
                const int64_t rows = gr->r1 - gr->r0, w = gr->c1 - gr->c0;
                const int64_t oq = (b * Lq + gr->r0) * E + col, ok = (b * Lk + gr->c0) * E + col;
                const float *g = dout + oq;
                float *pg = ph + gr->r0 * Lk + gr->c0, *dsg = ds + gr->r0 * Lk + gr->c0;
                group_probabilities(ph, qs, k, mask, gr, bh, NH, Lq, Lk, E);
                gemm_cpu(&one, false, true, rows, w, D, 1.0f, g, E, v + ok, E, 0.0f, dsg, Lk);
                gemm_cpu(&one, true, false, w, D, rows, 1.0f, pg, Lk, g, E, 1.0f, dv + ok, E);
                softmax_rows_bwd(dsg, pg, Lk, rows, w);
                gemm_cpu(&one, false, false, rows, D, w, 1.0f, dsg, Lk, k + ok, E, 1.0f, dqs + oq, E);
                gemm_cpu(&one, true, false, w, D, rows, 1.0f, dsg, Lk, qs + oq, E, 1.0f, dk + ok, E);
            }
        }
        free(ph);
    }
    free(groups);
}
