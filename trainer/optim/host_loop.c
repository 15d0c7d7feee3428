/* host_loop.c -- one parallel pass over many arrays (see host_loop.h). */
#include "trainer/optim/host_loop.h"

#include <omp.h>

#include "kernels/base.h"

// This thread's slice [*begin, *end) of [0, n): contiguous, in thread order, starting at
// multiples of 16 elements (a 64-byte cache line of floats).
static void thread_slice(int64_t n, int64_t *begin, int64_t *end) {
    int64_t threads = omp_get_num_threads(), me = omp_get_thread_num();
    int64_t lines = (n + 15) / 16, per_thread = (lines + threads - 1) / threads;
    *begin = MIN(me * per_thread * 16, n);
    *end = MIN(*begin + per_thread * 16, n);
}

void host_loop_run(int n_arrays, const int64_t *lengths, HostLoopPiece piece, void *ctx) {
    int64_t total = 0;
    for (int i = 0; i < n_arrays; i++) total += lengths[i];
#pragma omp parallel if (total >= HOST_LOOP_PARALLEL_MIN)
    {
        int64_t begin, end;
        thread_slice(total, &begin, &end);
        int64_t start = 0; // array i's first element in the concatenation
        for (int i = 0; i < n_arrays && start < end; start += lengths[i], i++) {
            int64_t lo = MAX(begin, start), hi = MIN(end, start + lengths[i]);
            if (lo < hi) piece(ctx, i, lo - start, hi - start);
        }
    }
}
