/* backend_cpu.c -- the CPU backend table: every field filled by a kernel in kernels/cpu/.
 * Memory is host memory; threads are OpenMP threads plus OpenBLAS's own. */
#include <cblas.h> // openblas_set_num_threads
#include <omp.h>

#include "kernels/base.h"
#include "kernels/cpu/cpu_kernels.h"

void *alloc_cpu(size_t nbytes) {
    CHECK(nbytes > 0, "alloc_cpu(0)");
    void *p = NULL;
    // 64-byte alignment: one cache line, and what AVX-512 loads like.
    if (posix_memalign(&p, 64, (nbytes + 63) & ~(size_t)63) != 0)
        DIE(1, "out of memory allocating %zu bytes", nbytes);
    return p;
}

void free_cpu(void *p) { free(p); }

void memcpy_cpu(void *dst, const void *src, size_t nbytes) {
    if (nbytes) memcpy(dst, src, nbytes);
}

void set_threads_cpu(int n) {
    CHECK(n >= 1, "threads must be >= 1, got %d", n);
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

const Backend backend_cpu = {
    .name         = "cpu",
    .dev          = DEV_CPU,
    .alloc        = alloc_cpu,
    .free         = free_cpu,
    .to_device    = memcpy_cpu,
    .to_host      = memcpy_cpu,
    .set_threads  = set_threads_cpu,

    .fill         = fill_cpu,
    .copy         = copy_cpu,
    .axpy         = axpy_cpu,
    .gemm         = gemm_cpu,
    .gemm_batched = gemm_batched_cpu,

    // BEGIN elementwise
    // END elementwise

    // BEGIN conv
    // END conv

    // BEGIN attention
    // END attention

    // BEGIN layout
    // END layout
};
