/* test_parity_harness.c -- the parity harness (tests/parity.h) proven on the CPU, so that a
 * GPU run of test_parity can be trusted before any GPU has run it:
 * - the CPU table against itself: every row runs (buffer sizes right: make debug runs this under
 *   ASan), passes, and is deterministic; and against every other backend of this build that is
 *   not CUDA (the fake device, whose memory the host cannot read: a host access to a device
 *   buffer in the harness crashes there);
 * - the coverage list: complete for the table, and it counts the fields of a table missing rows;
 * - broken copies of the CPU table, each with one kernel that does a wrong thing a GPU kernel
 *   might do (overwrite instead of accumulate, skip an element, write past its buffer, change
 *   its input, lose a NaN, drift past the tolerance, differ between runs, be missing): the
 *   harness must fail the rows that call it, saying why; one within the tolerance must pass. */
#include <math.h>
#include <string.h>

#include "kernels/base.h"
#include "tests/expect.h"
#include "tests/parity.h"

static const Backend *cpu;

// ---- the broken kernels (CPU memory: they may touch the buffers directly) ----
// relu_bwd WRITES dinp (kernels/backend.h): one that adds to what dinp held is wrong.
static void relu_bwd_accumulates(KernelCtx *kc, float *dinp, const float *inp, const float *dout,
                                 int64_t n) {
    for (int64_t i = 0; i < n; i++)
        dinp[i] += inp[i] > 0.0f ? dout[i] : 0.0f;
}

static void softmax_fwd_skips_last(KernelCtx *kc, float *out, const float *inp, int64_t rows,
                                   int64_t cols) {
    if (rows * cols == 0) return;
    float keep = out[rows * cols - 1];
    cpu->softmax_fwd(kc, out, inp, rows, cols);
    out[rows * cols - 1] = keep;
}

static void gemm_ignores_beta(KernelCtx *kc, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                              float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                              float beta, float *C, int64_t ldc) {
    cpu->gemm(kc, ta, tb, M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc);
}

static void axpy_overruns(KernelCtx *kc, float *out, float alpha, const float *inp, int64_t n) {
    cpu->axpy(kc, out, alpha, inp, n);
    if (n > 0) out[n] += 1.0f;
}

static void permute_scribbles_input(KernelCtx *kc, float *out, const float *inp, int ndim,
                                    const int64_t *shape, const int *perm) {
    cpu->permute_fwd(kc, out, inp, ndim, shape, perm);
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    if (n > 1) ((float *)inp)[n - 1] = 0.0f;
}

static void maximum_loses_nan(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                              const int64_t *as, const int64_t *bs) {
    cpu->maximum_fwd(kc, out, a, b, ndim, as, bs);
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= MAX(as[d], bs[d]);
    for (int64_t i = 0; i < n; i++)
        if (isnan(out[i])) out[i] = 0.0f;
}

// silu off by a relative `drift`: 2 ulp must pass the LIBM tolerance, 1e-3 must not.
static float drift;
static void silu_fwd_drifts(KernelCtx *kc, float *out, const float *inp, int64_t n) {
    cpu->silu_fwd(kc, out, inp, n);
    for (int64_t i = 0; i < n; i++)
        out[i] *= 1.0f + drift;
}

// Every other call differs in its first element: the run-twice check must notice.
static void fill_alternates(KernelCtx *kc, float *out, float value, int64_t n) {
    static int calls;
    cpu->fill(kc, out, value, n);
    if (n > 0 && calls++ % 2) out[0] = value + 1.0f;
}

// Runs the rows calling `field` against a copy of the CPU table with `field` broken; the log
// must hold `says`. Returns the result.
static ParityResult broken(const char *field, const Backend *mutant, const char *says) {
    char *log = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&log, &len);
    ParityResult r = parity_run(cpu, mutant, field, f);
    fclose(f);
    printf("--- %s broken:\n%s", field, log);
    EXPECT(r.rows > 0, "%s: some row calls it", field);
    EXPECT(strstr(log, says) != NULL, "%s: the log says '%s'", field, says);
    free(log);
    return r;
}

int main(void) {
    cpu = backend_get(DEV_CPU);
    setvbuf(stdout, NULL, _IOLBF, 0);

    // The table is complete, and a table without its memory row is not.
    EXPECT(parity_coverage(parity_cases, parity_n_cases, cpu, stdout) == 0, "coverage complete");
    EXPECT(!strcmp(parity_cases[0].name, "memory"), "row 0 is the memory row");
    EXPECT(parity_coverage(parity_cases + 1, parity_n_cases - 1, cpu, stdout) == 6,
           "without the memory row, its 6 fields are uncovered");

    // The CPU against itself: every row passes, deterministically.
    ParityResult r = parity_run(cpu, cpu, NULL, stdout);
    EXPECT(r.rows == parity_n_cases, "%d of %d rows ran", r.rows, parity_n_cases);
    EXPECT(r.failed == 0, "%d rows of the CPU against itself failed", r.failed);

    // A selection: row-name prefixes and field names, comma-separated.
    r = parity_run(cpu, cpu, "relu,fill/one,gemm_batched", stdout);
    EXPECT(r.rows == 8 && r.failed == 0, "relu* (2), fill/one, gemm_batched* (5): %d rows", r.rows);

    // Every other non-CUDA backend of this build (the fake device) against the CPU.
    for (int d = 0; d < 8; d++) {
        const Backend *be = backend_get((Device)d);
        if (!be || be == cpu || be->dev == DEV_CUDA) continue;
        r = parity_run(cpu, be, NULL, stdout);
        EXPECT(r.rows == parity_n_cases && r.failed == 0, "%s: %d of %d rows failed", be->name,
               r.failed, r.rows);
    }

    Backend m = *cpu;
    m.name = "mutant";
    m.relu_bwd = relu_bwd_accumulates;
    r = broken("relu_bwd", &m, "elements outside");
    EXPECT(r.failed == r.rows, "an accumulating backward fails every relu row");

    m = *cpu, m.name = "mutant", m.softmax_fwd = softmax_fwd_skips_last;
    r = broken("softmax_fwd", &m, "y: 1 of");
    EXPECT(r.failed >= 4, "an unwritten element fails the softmax rows that have elements");

    m = *cpu, m.name = "mutant", m.gemm = gemm_ignores_beta;
    r = broken("gemm", &m, "C:");
    EXPECT(r.failed >= 3, "a GEMM ignoring beta fails the rows with beta != 0");

    m = *cpu, m.name = "mutant", m.axpy = axpy_overruns;
    r = broken("axpy", &m, "wrote after its buffer");
    EXPECT(r.failed >= 2, "a write past the end fails");

    m = *cpu, m.name = "mutant", m.permute_fwd = permute_scribbles_input;
    r = broken("permute_fwd", &m, "changed this input");
    EXPECT(r.failed >= 4, "a kernel writing its input fails");

    m = *cpu, m.name = "mutant", m.maximum_fwd = maximum_loses_nan;
    r = broken("maximum_fwd", &m, "binary/maximum/special");
    EXPECT(r.failed == 1, "a lost NaN fails the special row only (%d failed)", r.failed);

    m = *cpu, m.name = "mutant", m.silu_fwd = silu_fwd_drifts;
    drift = 1e-3f;
    r = broken("silu_fwd", &m, "elements outside");
    EXPECT(r.failed == 2, "a 1e-3 drift fails both silu rows");
    drift = 2.4e-7f; // 2 ulp
    r = parity_run(cpu, &m, "silu_fwd", stdout);
    EXPECT(r.rows == 2 && r.failed == 0, "a 2-ulp drift is within the LIBM tolerance");

    m = *cpu, m.name = "mutant", m.fill = fill_alternates;
    r = broken("fill", &m, "not deterministic");
    EXPECT(r.nondet >= 1, "a kernel that differs between runs is caught");

    m = *cpu, m.name = "mutant", m.layernorm_bwd = NULL;
    r = broken("layernorm_bwd", &m, "no mutant kernel for layernorm_bwd");
    EXPECT(r.missing == r.rows && r.failed == r.rows, "a NULL field fails its rows");

    return expect_report();
}
