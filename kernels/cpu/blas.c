/* blas.c -- OpenBLAS, loaded at first use (dlopen) rather than linked, for two reasons:
 * 1. Its core type (which kernels it runs) is ours to choose. Debian 12's OpenBLAS 0.3.21 does
 *    not recognise CPUs newer than itself (e.g. Sapphire Rapids) and falls back to its SSE3
 *    "Prescott" kernels, 5x slower; machines are therefore often set up with a blanket
 *    OPENBLAS_CORETYPE=Haswell, which on an AVX-512 CPU halves our convolutions' speed while
 *    PyTorch's (oneDNN, dispatched from cpuid) keep AVX-512: on a Zen 5 EPYC, sgemm at 255
 *    GFLOP/s on 2 threads with Haswell against 470 with SkylakeX. So, as oneDNN and our own
 *    kernels (CPU_VECTOR_CLONES) do, the core comes from cpuid and the OS's saved register
 *    state (blas_core); OPENBLAS_CORETYPE is set to it only while OpenBLAS initialises, then
 *    restored, so child processes see the user's. DDPDBG_BLAS_CORE names a core instead.
 * 2. The OpenMP build (libopenblas0-openmp) shares our kernels' OpenMP thread pool; the default
 *    pthread build keeps threads of its own that spin against ours on a 2-core machine. We
 *    load the OpenMP build when it is installed, else the default one.
 * blas_sgemm, blas_set_threads and blas_openmp are the entry points; kernels/cpu/gemm.c uses them. */
#include "kernels/cpu/blas.h"

#include <cpuid.h>
#include <dlfcn.h>
#include <pthread.h>
#include <strings.h>

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

// What the CPU and the OS give us: AVX2 with FMA, and AVX-512 (F, DQ, BW, VL: what OpenBLAS's
// SkylakeX kernels use), each only when the OS saves the registers it needs (XCR0), so that a
// VM hiding the state never gets kernels that would fault.
typedef struct Isa {
    bool avx2, avx512;
} Isa;

static Isa isa(void) {
    Isa r = {false, false};
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return r;
    bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28);
    if (!osxsave || !avx) return r;
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    bool ymm_state = (lo & 0x6) == 0x6, zmm_state = (lo & 0xe6) == 0xe6;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return r;
    r.avx2 = ymm_state && fma && (b & (1u << 5));
    r.avx512 = r.avx2 && zmm_state && (b & (1u << 16)) && (b & (1u << 17)) && (b & (1u << 30)) &&
               (b & (1u << 31));
#endif
    return r;
}

// The cores DDPDBG_BLAS_CORE may name (OpenBLAS 0.3.21's names for x86-64, newest first), what
// each needs, and whether its results are the same bits however gemm.c cuts C into panels
// (blas_panels_exact; measured for SkylakeX, Cooperlake and Haswell).
typedef struct Core {
    const char *name;
    bool avx2, avx512, panels_exact;
} Core;

static const Core cores[] = {
    {"Cooperlake", true, true, true},    {"SkylakeX", true, true, true},
    {"Zen", true, false, false},         {"Haswell", true, false, false},
    {"Sandybridge", false, false, false}, {"Nehalem", false, false, false},
    {"Prescott", false, false, false},
};
#define N_CORES (sizeof cores / sizeof *cores)

// The entry of cores named name (any case), or NULL.
static const Core *core_named(const char *name) {
    for (size_t i = 0; i < N_CORES; i++)
        if (!strcasecmp(name, cores[i].name)) return &cores[i];
    return NULL;
}

const char *blas_core(void) {
    const char *want = getenv("DDPDBG_BLAS_CORE");
    Isa cpu = isa();
    if (want && *want) {
        const Core *c = core_named(want);
        if (!c) {
            char names[256] = "";
            for (size_t i = 0; i < N_CORES; i++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                         i ? ", " : "", cores[i].name);
            DIE(2, "DDPDBG_BLAS_CORE=%s: expected one of %s", want, names);
        }
        if ((c->avx512 && !cpu.avx512) || (c->avx2 && !cpu.avx2))
            DIE(2, "DDPDBG_BLAS_CORE=%s: this CPU (or its OS) lacks the %s that core needs", want,
                c->avx512 ? "AVX-512" : "AVX2");
        return c->name;
    }
    return cpu.avx512 ? "SkylakeX" : cpu.avx2 ? "Haswell" : NULL;
}

static void load(void) {
    // OpenBLAS reads OPENBLAS_CORETYPE once, while dlopen runs its constructor.
    const char *core = blas_core(), *user = getenv("OPENBLAS_CORETYPE");
    char *saved = user ? strdup(user) : NULL;
    if (core) setenv("OPENBLAS_CORETYPE", core, 1);
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
    if (core && saved) setenv("OPENBLAS_CORETYPE", saved, 1);
    else if (core) unsetenv("OPENBLAS_CORETYPE");
    free(saved);
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

bool blas_panels_exact(void) {
    pthread_once(&once, load);
    const Core *c = corename ? core_named(corename()) : NULL;
    return c && c->panels_exact;
}

const char *blas_describe(void) {
    pthread_once(&once, load);
    static char buf[256];
    snprintf(buf, sizeof buf, "OpenBLAS %s core %s", loaded_path,
             corename ? corename() : "(unknown)");
    return buf;
}
