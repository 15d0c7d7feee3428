/* test_parity_emu.c -- the CUDA kernels of kernels/cuda/, compiled for the host by the CUDA
 * emulation (tests/cuda_emu/emu.h: launches run block by block on host threads, __syncthreads
 * is a barrier, cuBLAS a column-major loop from its documentation), against the CPU through the
 * whole parity table (tests/parity_cases.c). In every build and in make debug (ASan sees the
 * kernels' reads and writes), so the CUDA kernels' index arithmetic, launch shapes, bounds
 * checks, empty sizes, block reductions, accumulation, NaN handling and cuBLAS calls are
 * tested without a GPU. What it cannot show, test_parity shows on a GPU: CUDA's own libm, the
 * GPU's memory model, real concurrency between blocks, speed.
 *   test_parity_emu [-o A,B]   every row, or the rows whose name starts with A or B or that
 *                              call the field A or B */
#include <string.h>

#include "tests/cuda_emu/emu.h" // emu_run, cudaGetLastError, cublasSgemm: the emulation itself
#include "tests/expect.h"
#include "tests/parity.h"

extern const Backend backend_cuda; // the emulated build of kernels/cuda/backend_cuda.c

int main(int argc, char **argv) {
    const char *only = argc == 3 && !strcmp(argv[1], "-o") ? argv[2] : NULL;
    if (argc != 1 && !only) {
        fprintf(stderr, "usage: test_parity_emu [-o NAME,...]\n");
        return 2;
    }
    // The emulation refuses what CUDA and cuBLAS refuse: an empty grid, a block over 1024
    // threads, a leading dimension below the rows of the matrix as stored.
    emu_run((const void *)main, 0, 32, NULL, NULL);
    EXPECT(cudaGetLastError() == cudaErrorInvalidConfiguration, "a grid of 0 blocks is refused");
    emu_run((const void *)main, 1, 1025, NULL, NULL);
    EXPECT(cudaGetLastError() == cudaErrorInvalidConfiguration, "a block of 1025 is refused");
    EXPECT(cudaGetLastError() == cudaSuccess, "the error is cleared once read");
    cublasHandle_t h;
    float one = 1, zero = 0, a[6] = {0}, b[6] = {0}, c[6] = {0};
    EXPECT(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS, "cublasCreate");
    EXPECT(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 3, 2, 2, &one, a, 2, b, 2, &zero, c, 3) ==
               CUBLAS_STATUS_INVALID_VALUE,
           "lda 2 < m 3 is refused");
    EXPECT(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, 3, 2, 2, &one, a, 2, b, 2, &zero, c, 3) ==
               CUBLAS_STATUS_SUCCESS,
           "lda 2 >= k 2 for a transposed A");

    const Backend *cpu = backend_get(DEV_CPU);
    EXPECT(parity_coverage(parity_cases, parity_n_cases, &backend_cuda, stdout) == 0,
           "every Backend field has a parity row and an (emulated) CUDA kernel");
    ParityResult r = parity_run(cpu, &backend_cuda, only, stdout);
    printf("%d rows: %d failed (%d elements outside tolerance, %d not deterministic, %d with a "
           "missing kernel)\n",
           r.rows, r.failed, r.mismatches, r.nondet, r.missing);
    EXPECT(r.rows == (only ? r.rows : parity_n_cases) && r.rows > 0, "%d rows ran", r.rows);
    EXPECT(r.failed == 0, "%d rows failed (above)", r.failed);
    return expect_report();
}
