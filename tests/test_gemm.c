/* test_gemm.c -- the CPU backend's gemm and gemm_batched (kernels/cpu/gemm.c): all four
 * layouts against a naive double-precision product, inside wider leading dimensions whose
 * padding must stay untouched; beta 0 overwrites (NaN in C does not survive) and beta 1
 * accumulates; products that split into one panel per thread (rows or columns, ragged last
 * panels, fewer panels than threads) give the same bits on 1, 2 and 3 threads, and so do
 * products too small to split and calls from inside a parallel region, where the loaded
 * OpenBLAS core's results do not depend on the panels' edges (blas_panels_exact: SkylakeX).
 * The core OpenBLAS loads with (kernels/cpu/blas.c): the CPU's, whatever OPENBLAS_CORETYPE
 * says, which the process's environment keeps; DDPDBG_BLAS_CORE's when set; exit 2 with one
 * line for a name it does not know. (On an AVX2-only CPU the first case cannot tell ours from OPENBLAS_CORETYPE=Haswell.) */
#include <math.h>
#include <omp.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/expect.h"

#include "kernels/base.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu_kernels.h"
#include "trainer/rng.h"

#define PAD 5        // extra columns of every matrix's leading dimension
#define SENTINEL 7.5f // what the padding holds before and must hold after

typedef struct Shape {
    int64_t M, N, K;
} Shape;

// M >= N splits by rows, N > M by columns, sides not multiples of the panel blocks; 64x1111x33
// splits in 2 panels on 3 threads (3 would fall to OpenBLAS's small-matrix size), 120x100x100
// not at all (2 would), and the last two are small-matrix products themselves.
static const Shape shapes[] = {
    {1000, 80, 256}, {1003, 37, 129}, {37, 1037, 96}, {64, 1111, 33},
    {120, 100, 100}, {9, 9, 9},       {300, 12, 40},
};

// rows x cols uniform in [-1, 1), rows ld apart, the padding SENTINEL.
static float *matrix(int64_t rows, int64_t cols, int64_t ld, uint64_t seed) {
    Rng r;
    rng_init(&r, seed);
    float *m = xmalloc(sizeof(float) * (size_t)(rows * ld));
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < ld; j++) m[i * ld + j] = j < cols ? rng_range(&r, -1.0f, 1.0f) : SENTINEL;
    return m;
}

// C (M, N, ldc) for op(A) op(B) with the given beta, computed on `threads` threads.
static float *product(int threads, bool ta, bool tb, Shape s, float beta, const float *A,
                      int64_t lda, const float *B, int64_t ldb, const float *C0, int64_t ldc) {
    float *C = xmalloc(sizeof(float) * (size_t)(s.M * ldc));
    memcpy(C, C0, sizeof(float) * (size_t)(s.M * ldc));
    KernelCtx kc = {.n_threads = threads};
    set_threads_cpu(threads); // as the trainer: OpenBLAS's threads are the KernelCtx's
    gemm_cpu(&kc, ta, tb, s.M, s.N, s.K, 0.5f, A, lda, B, ldb, beta, C, ldc);
    return C;
}

static void test_layouts(void) {
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
        for (int layout = 0; layout < 4; layout++) {
            const Shape s = shapes[si];
            const bool ta = layout & 1, tb = layout & 2;
            const int64_t a_rows = ta ? s.K : s.M, a_cols = ta ? s.M : s.K;
            const int64_t b_rows = tb ? s.N : s.K, b_cols = tb ? s.K : s.N;
            const int64_t lda = a_cols + PAD, ldb = b_cols + PAD, ldc = s.N + PAD;
            float *A = matrix(a_rows, a_cols, lda, 11 + si), *B = matrix(b_rows, b_cols, ldb, 23 + si);
            float *C0 = matrix(s.M, s.N, ldc, 37 + si);
            for (int use_beta = 0; use_beta < 2; use_beta++) {
                const float beta = (float)use_beta;
                float *Cn = xmalloc(sizeof(float) * (size_t)(s.M * ldc));
                memcpy(Cn, C0, sizeof(float) * (size_t)(s.M * ldc));
                if (!use_beta) // beta 0 must overwrite, NaN included (BLAS semantics)
                    for (int64_t i = 0; i < s.M; i++) Cn[i * ldc] = NAN;
                float *got[3];
                for (int t = 1; t <= 3; t++)
                    got[t - 1] = product(t, ta, tb, s, beta, A, lda, B, ldb, Cn, ldc);
                int bad = 0, differ = 0, padding = 0;
                for (int64_t i = 0; i < s.M; i++)
                    for (int64_t j = 0; j < ldc; j++) {
                        const float g = got[0][i * ldc + j];
                        if (j >= s.N) {
                            padding += g != SENTINEL;
                            continue;
                        }
                        double ref = beta * (double)C0[i * ldc + j];
                        for (int64_t k = 0; k < s.K; k++)
                            ref += 0.5 * (double)(ta ? A[k * lda + i] : A[i * lda + k]) *
                                   (double)(tb ? B[j * ldb + k] : B[k * ldb + j]);
                        bad += !(fabs(g - ref) <= 1e-4 + 1e-5 * (double)s.K);
                        for (int t = 1; t < 3; t++)
                            differ += memcmp(&got[t][i * ldc + j], &g, sizeof g) != 0;
                    }
                EXPECT(bad == 0, "%lldx%lldx%lld %c%c beta %g: %d elements off the reference",
                       (long long)s.M, (long long)s.N, (long long)s.K, ta ? 'T' : 'N',
                       tb ? 'T' : 'N', beta, bad);
                EXPECT(differ == 0 || !blas_panels_exact(),
                       "%lldx%lldx%lld %c%c beta %g: %d elements differ between 1, 2 and 3 "
                       "threads", (long long)s.M, (long long)s.N, (long long)s.K,
                       ta ? 'T' : 'N', tb ? 'T' : 'N', beta, differ);
                EXPECT(padding == 0, "%lldx%lldx%lld: %d padding elements of C written",
                       (long long)s.M, (long long)s.N, (long long)s.K, padding);
                for (int t = 0; t < 3; t++) free(got[t]);
                free(Cn);
            }
            free(A);
            free(B);
            free(C0);
        }
}

// Called from inside a parallel region (as the Winograd path and attention heads do), each
// thread's product is whole and equal to the one made outside.
static void test_inside_parallel(void) {
    const Shape s = {512, 96, 200};
    float *A = matrix(s.M, s.K, s.K, 3), *B = matrix(s.K, s.N, s.N, 4), *C0 = matrix(s.M, s.N, s.N, 5);
    float *want = product(2, false, false, s, 0.0f, A, s.K, B, s.N, C0, s.N);
    int differ[2] = {0, 0};
#pragma omp parallel num_threads(2)
    {
        float *got = product(2, false, false, s, 0.0f, A, s.K, B, s.N, C0, s.N);
        differ[omp_get_thread_num()] = memcmp(got, want, sizeof(float) * (size_t)(s.M * s.N)) != 0;
        free(got);
    }
    EXPECT((!differ[0] && !differ[1]) || !blas_panels_exact(),
           "inside a parallel region: thread 0 %s, thread 1 %s",
           differ[0] ? "differs" : "equal", differ[1] ? "differs" : "equal");
    free(A);
    free(B);
    free(C0);
    free(want);
}

// gemm_batched: each batch element is its own product at its strides.
static void test_batched(void) {
    const int64_t batch = 3, M = 70, N = 40, K = 50;
    float *A = matrix(batch * M, K, K, 7), *B = matrix(batch * K, N, N, 8);
    float *C = xcalloc((size_t)(batch * M * N), sizeof(float));
    KernelCtx kc = {.n_threads = 2};
    gemm_batched_cpu(&kc, batch, false, false, M, N, K, 1.0f, A, K, M * K, B, N, K * N, 0.0f, C, N,
                     M * N);
    int bad = 0;
    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double ref = 0;
                for (int64_t k = 0; k < K; k++)
                    ref += (double)A[(b * M + i) * K + k] * (double)B[(b * K + k) * N + j];
                bad += !(fabs(C[(b * M + i) * N + j] - ref) <= 1e-4);
            }
    EXPECT(bad == 0, "gemm_batched: %d elements off the reference", bad);
    free(A);
    free(B);
    free(C);
}

// In a child process (OpenBLAS loads once a process): set OPENBLAS_CORETYPE and
// DDPDBG_BLAS_CORE (NULL: unset), load OpenBLAS, and write "<core loaded> <OPENBLAS_CORETYPE
// afterwards, or -> " into out (stderr's first line into err). Returns the exit status.
static int load_in_child(const char *openblas_coretype, const char *ddpdbg_blas_core, char *out,
                         size_t out_len, char *err, size_t err_len) {
    int fd[2], fe[2];
    REQUIRE(pipe(fd) == 0 && pipe(fe) == 0, "pipe");
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        dup2(fe[1], 2);
        if (openblas_coretype) setenv("OPENBLAS_CORETYPE", openblas_coretype, 1);
        else unsetenv("OPENBLAS_CORETYPE");
        if (ddpdbg_blas_core) setenv("DDPDBG_BLAS_CORE", ddpdbg_blas_core, 1);
        else unsetenv("DDPDBG_BLAS_CORE");
        const char *d = strstr(blas_describe(), " core "), *env = getenv("OPENBLAS_CORETYPE");
        dprintf(fd[1], "%s %s", d ? d + 6 : "?", env ? env : "-");
        _exit(0);
    }
    close(fd[1]);
    close(fe[1]);
    ssize_t n = read(fd[0], out, out_len - 1), m = read(fe[0], err, err_len - 1);
    out[n > 0 ? n : 0] = 0;
    err[m > 0 ? m : 0] = 0;
    err[strcspn(err, "\n")] = 0;
    close(fd[0]);
    close(fe[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void test_core_choice(void) {
    char out[256], err[512], want[256];
    // the CPU's choice, with DDPDBG_BLAS_CORE out of the way (restored for this process's load)
    const char *given = getenv("DDPDBG_BLAS_CORE");
    char *saved = given ? strdup(given) : NULL;
    unsetenv("DDPDBG_BLAS_CORE");
    const char *cpu = blas_core(); // SkylakeX, Haswell or NULL (then OpenBLAS detects)
    if (saved) setenv("DDPDBG_BLAS_CORE", saved, 1);
    free(saved);
    int rc = load_in_child("Haswell", NULL, out, sizeof out, err, sizeof err);
    snprintf(want, sizeof want, "%s Haswell", cpu ? cpu : "Haswell");
    EXPECT(rc == 0 && !strcasecmp(out, want),
           "OPENBLAS_CORETYPE=Haswell on a CPU for %s: exit %d, loaded and left \"%s\", want "
           "\"%s\"",
           cpu ? cpu : "(none)", rc, out, want);
    rc = load_in_child(NULL, "haswell", out, sizeof out, err, sizeof err);
    EXPECT(rc == 0 && !strcasecmp(out, "Haswell -"),
           "DDPDBG_BLAS_CORE=haswell: exit %d, loaded and left \"%s\", want \"Haswell -\"", rc,
           out);
    rc = load_in_child(NULL, "Pentium", out, sizeof out, err, sizeof err);
    EXPECT(rc == 2 && strstr(err, "DDPDBG_BLAS_CORE=Pentium: expected one of"),
           "DDPDBG_BLAS_CORE=Pentium: exit %d, stderr \"%s\"", rc, err);
}

int main(void) {
    test_core_choice(); // first: forks before this process loads OpenBLAS or starts threads
    set_threads_cpu(3);
    if (!blas_panels_exact())
        printf("note: %s: results are checked against the reference only, not bit for bit "
               "across thread counts (blas.h: blas_panels_exact)\n", blas_describe());
    test_layouts();
    test_inside_parallel();
    test_batched();
    return expect_report();
}
