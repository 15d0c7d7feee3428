/* test_parity.c -- every CUDA kernel of the Backend table against its CPU twin, through the
 * parity harness (tests/parity.h, the case table in tests/parity_cases.c): the same inputs on
 * both, outputs and accumulated gradients compared within each row's stated tolerance, NaN and
 * infinities by class, guards around every buffer, and each row run twice on the GPU for bit
 * equality (except the atomics-scattered gradients a row marks).
 *   test_parity            runs every row; skips (77) in a build without CUDA or without a GPU
 *   test_parity -o A,B     the rows whose name starts with A or B, or that call the field A or B
 *   test_parity --list     the coverage list: every field, whether CUDA fills it, its rows;
 *                          fails when a field has no row (needs no GPU)
 * The harness itself is proven on the CPU by test_parity_harness. */
#include <string.h>

#include "tests/expect.h"
#include "tests/parity.h"

#ifdef USE_CUDA
#include "kernels/cuda/cuda_kernels.h" // cuda_device_count
#endif

int main(int argc, char **argv) {
    const char *only = NULL;
    bool list = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--list"))
            list = true;
        else if (!strcmp(argv[i], "-o") && i + 1 < argc)
            only = argv[++i];
        else {
            fprintf(stderr, "usage: test_parity [--list] [-o NAME]\n");
            return 2;
        }
    }
    const Backend *cpu = backend_get(DEV_CPU), *cuda = backend_get(DEV_CUDA);
    if (list) {
        int gaps = parity_coverage(parity_cases, parity_n_cases, cuda ? cuda : cpu, stdout);
        if (!cuda)
            printf("(this build has no CUDA backend: the column shows the CPU's; make CUDA=1)\n");
        return gaps ? 1 : 0;
    }
    if (!cuda) SKIP("this build has no CUDA backend (make CUDA=1)");
#ifdef USE_CUDA
    char why[256] = "";
    if (cuda_device_count(why, sizeof why) < 1) SKIP("no CUDA device: %s", why);
#endif
    EXPECT(parity_coverage(parity_cases, parity_n_cases, cuda, stdout) == 0,
           "every Backend field has a parity row");
    ParityResult r = parity_run(cpu, cuda, only, stdout);
    printf("%d rows: %d failed (%d elements outside tolerance, %d not deterministic, %d with a "
           "missing kernel)\n",
           r.rows, r.failed, r.mismatches, r.nondet, r.missing);
    EXPECT(r.rows > 0, "rows matching '%s'", only ? only : "");
    EXPECT(r.failed == 0, "%d rows failed (above)", r.failed);
    return expect_report();
}
