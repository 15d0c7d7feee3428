/* host_loop.h -- how the optimizer's host loops (AdamW/SGD, clipping, EMA) use several threads
 * and the vector unit without changing a single bit of their results.
 *
 * Threads: one OpenMP parallel region per pass over all the parameters (host_loop_run), without
 * a num_threads clause, so the team is the count the backend's set_threads gave the calling
 * thread (set_threads_cpu is omp_set_num_threads plus OpenBLAS's count; train.c calls it with
 * threads=, the benchmarks with theirs). The pass's arrays are split as if concatenated into one
 * contiguous slice per thread; every element is computed by one thread with the same float
 * operations as a serial loop, so the results do not depend on the number of threads
 * (tests/test_optim.c checks 1 thread against 2 and 3). One region per pass, not one per
 * tensor: rtdetr-l has 575 parameters, and on a loaded machine every join can wait for a
 * descheduled thread's next time slice.
 *
 * Vectors: the per-piece loops are `omp simd` loops (which lifts -O2's "very cheap" vectoriser
 * cost model, nothing else) in HOST_LOOP_VECTORIZED functions, compiled twice on x86-64
 * (AVX2+FMA, chosen at load time when the CPU has it, and the baseline). Both are exact: the
 * loops use only IEEE operations that round once in any width (+ - * / sqrtf fmaf).
 * trainer/optim/ is compiled with -ffp-contract=off (never a * and a + fused into one FMA) and
 * -fno-math-errno (sqrtf without its errno branch, so that it vectorises): see the Makefile. */
#ifndef TRAINER_OPTIM_HOST_LOOP_H
#define TRAINER_OPTIM_HOST_LOOP_H

#include <stdint.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HOST_LOOP_VECTORIZED __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define HOST_LOOP_VECTORIZED
#endif

// Elements [begin, end) of array `i` of a pass; ctx: the pass's arrays and scalars.
typedef void (*HostLoopPiece)(void *ctx, int i, int64_t begin, int64_t end);

// Calls piece over every element of arrays 0..n_arrays-1 (lengths[i] elements each; 0 skips
// one), each element exactly once, on the calling thread's OpenMP team (alone when there are
// fewer than HOST_LOOP_PARALLEL_MIN elements in all). Pieces of one thread come in array order.
void host_loop_run(int n_arrays, const int64_t *lengths, HostLoopPiece piece, void *ctx);

// Below this many elements in all, a pass runs on the calling thread: waking the team costs
// more than the loop (a few microseconds against ~1 ns an element).
#define HOST_LOOP_PARALLEL_MIN 32768

#endif
