/* blas.c -- OpenBLAS, loaded at first use (dlopen) rather than linked, for two reasons:
 * 1. Debian 12's OpenBLAS 0.3.21 does not recognise CPUs newer than itself (e.g. Sapphire
 *    Rapids) and falls back to its SSE3 "Prescott" kernels, 5x slower. Its core type can only
 *    be chosen by OPENBLAS_CORETYPE before the library initialises, so when the user has not
 *    set it we pick one from cpuid (AVX-512 -> SkylakeX, AVX2 -> Haswell) before loading.
 * 2. The OpenMP build (libopenblas0-openmp) shares our kernels' OpenMP thread pool; the default
 *    pthread build keeps threads of its own that spin against ours on a 2-core machine. We
 *    load the OpenMP build when it is installed, else the default one.
 * blas_sgemm, blas_set_threads and blas_openmp are the entry points; kernels/cpu/gemm.c uses them. */
#include "kernels/cpu/blas.h"

#include <cpuid.h>
#include <dlfcn.h>
#include <pthread.h>

#include "kernels/base.h"

typedef void (*SgemmFn)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, int, int,
                        int, float, const float *, int, const float *, int, float, float *, int);
typedef void (*SetThreadsFn)(int);
typedef char *(*CorenameFn)(void);
typedef int (*ParallelFn)(void);

static SgemmFn sgemm;
static SetThreadsFn set_threads;
static CorenameFn corename;
static ParallelFn parallel_kind;
static const char *loaded_path;
static pthread_once_t once = PTHREAD_ONCE_INIT;

// The OpenBLAS core type this CPU can run, or NULL to leave OpenBLAS's own detection alone.
static const char *core_for_cpu(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return NULL;
    bool avx2 = b & (1u << 5), avx512f = b & (1u << 16), avx512dq = b & (1u << 17);
    bool avx512bw = b & (1u << 30), avx512vl = b & (1u << 31);
    if (avx512f && avx512dq && avx512bw && avx512vl) return "SkylakeX";
    if (avx2) return "Haswell";
    return NULL;
}

static void load(void) {
    if (!getenv("OPENBLAS_CORETYPE")) {
        const char *core = core_for_cpu();
        if (core) setenv("OPENBLAS_CORETYPE", core, 0);
    }
    static const char *const candidates[] = {
        "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0",
        "/usr/lib/aarch64-linux-gnu/openblas-openmp/libopenblas.so.0",
        "libopenblas.so.0",
    };
    void *h = NULL;
    for (size_t i = 0; i < sizeof candidates / sizeof *candidates && !h; i++) {
        h = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL);
        if (h) loaded_path = candidates[i];
    }
    if (!h) DIE(1, "cannot load OpenBLAS (libopenblas.so.0): %s\nHINT: run `make deps`", dlerror());
    sgemm = (SgemmFn)dlsym(h, "cblas_sgemm");
    set_threads = (SetThreadsFn)dlsym(h, "openblas_set_num_threads");
    corename = (CorenameFn)dlsym(h, "openblas_get_corename");
    parallel_kind = (ParallelFn)dlsym(h, "openblas_get_parallel");
    if (!sgemm || !set_threads) DIE(1, "%s lacks cblas_sgemm or openblas_set_num_threads", loaded_path);
}

void blas_sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A,
                int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    pthread_once(&once, load);
    sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
          M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void blas_set_threads(int n) {
    pthread_once(&once, load);
    set_threads(n);
}

bool blas_openmp(void) {
    pthread_once(&once, load);
    return parallel_kind && parallel_kind() == 2; // 0 sequential, 1 pthreads, 2 OpenMP
}

const char *blas_describe(void) {
    pthread_once(&once, load);
    static char buf[256];
    snprintf(buf, sizeof buf, "OpenBLAS %s core %s", loaded_path,
             corename ? corename() : "(unknown)");
    return buf;
}
