/* trace_synth.h -- synthetic trace directories for the viewer's tests and benchmarks: each
 * rank<R>.db written through the probe's own database layer (probe/tracedb.h), with the events
 * a DDP trainer records (traces/README.md) for a small scripted run: per iteration a forward
 * (a buffer broadcast, a batch), a backward (one gradient-ready hook per parameter in reverse
 * order, each marking its parameter ready, buckets launched in index order as they fill), the
 * bucket allreduces, a
 * finalize and an optimiser step. One fault at a time bends the script the way the real
 * mechanism would; what each one leaves is documented at its field. */
#ifndef TESTS_TRACE_SYNTH_H
#define TESTS_TRACE_SYNTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct SynthSpec {
    int world;        // ranks (rank<R>.db for each)
    int n_params;     // parameters "model.<i/8>.block.<i%8>.weight", numel 64 each
    int n_iters;      // iterations every rank runs when nothing goes wrong
    int n_buckets;    // buckets of the one layout (equal shares, reverse parameter order)
    int64_t t0_ns;    // time of the first event (0: 1e18)
    int64_t iter_ns;  // duration of an iteration (0: 10 ms)
    bool find_unused; // unused parameters are marked unused at the start of backward and
                      // a local_used_map allreduce follows the buckets
    // Faults (rank -1: off).
    int unused_rank;     // at unused_iter this rank's parameters [unused_first, +unused_count)
    int64_t unused_iter; // get no hook; -2 means every rank. Without find_unused the rank's
    int unused_first, unused_count; // bucket holding them never launches, its next forward
                                    // records the reducer's error and it ends; the others launch
                                    // it, wait, and are drained. With find_unused the run goes on.
    int empty_rank;                 // this rank's batch at unused_iter has 0 boxes (the others' 2)
    int skip_rank;     // runs skip_iter's forward, no backward, then the next forward; every
    int64_t skip_iter; // rank stops at the first collective that then differs (drained)
    int short_rank;    // runs n_iters - short_by iterations, then broadcasts "stop"; the
    int short_by;      // others' next forward pairs with it; all are drained
    int dead_rank;     // dies (drained, no error) mid-backward at dead_iter after 3 hooks; the
    int64_t dead_iter; // others launch bucket 0 and are drained waiting in it
    int layout_rank;   // builds n_buckets + 1 buckets: its allreduces differ in size
    int slow_rank;     // launches every bucket allreduce slow_ns later than the others
    int64_t slow_ns;
    int gpu_kernels;  // GPU_KERNEL records per iteration (CUPTI-style: iter = correlation)
    int64_t overruns; // meta overruns of rank 0
    int user_version; // PRAGMA user_version to set on rank 0 afterwards (0: leave it)
    bool split_marks; // a version 1 trace: each hook's mark is a MARK_READY row after its
                      // GRAD_READY (not a GRAD_READY flagged marked); user_version 1 on every rank
} SynthSpec;

// A spec with every fault off: world 2, 16 parameters, 3 iterations, 2 buckets.
SynthSpec synth_default(void);

// Writes the trace directory dir (created; rank files replaced). Returns 0, or -1 with one line
// in err. events_out (may be NULL) gets the events written over all ranks.
int synth_trace(const char *dir, const SynthSpec *s, int64_t *events_out, char *err, size_t errlen);

#endif
