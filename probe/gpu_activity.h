/* gpu_activity.h -- what becomes of GPU activity records on their way into the trace, in every
 * build: probe/cupti.c turns each CUPTI record into a GpuRecord and hands it here, so the CPU
 * tests feed synthetic records through the same code (tests/test_probe_cupti.c).
 *
 * Two jobs:
 * - NCCL kernels to their collective by stream and launch order. The process group says, in
 *   launch order, which collective it queued on which stream (gpu_activity_collective, right
 *   after NCCL accepted the call); a stream runs its work in that order, so the k-th NCCL kernel
 *   recorded on a stream belongs to the k-th collective queued there. CUPTI's correlation id
 *   cannot do it: a nonblocking communicator may launch the kernel from a thread of its own,
 *   outside the caller's correlation push. The tie is one GPU_CORRELATION row (a = the kernel's
 *   correlation id, b = 1: by stream order, c = the collective's sequence number) written just
 *   before the kernel's row, so a reader that folds rows in order has it when the kernel comes.
 *   An NCCL kernel on a stream no collective was queued on (NCCL moved the launch to a stream
 *   of its own) takes the same order when only one stream carries collectives; else it is
 *   written untied.
 * - A bound on rows per training step: the compute stream of one rtdetr-l step launches
 *   thousands of kernels. Work on a stream that carries collectives (NCCL kernels, the staging
 *   copies) is always written; other records are written while their step (the last
 *   gpu_activity_step at or before their start) has written fewer than rows_per_step of them,
 *   and counted as filtered after. A record older than the steps kept counts as the oldest kept.
 * Thread-safe: records come from CUPTI's threads, collectives and steps from the trainer's. */
#ifndef PROBE_GPU_ACTIVITY_H
#define PROBE_GPU_ACTIVITY_H

#include "probe/probe.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum { GPU_RECORD_KERNEL, GPU_RECORD_MEMCPY, GPU_RECORD_MEMSET } GpuRecordKind;

typedef struct GpuRecord {
    GpuRecordKind kind;
    uint32_t correlation; // CUPTI's correlation id of the launching call
    int32_t device;
    uint32_t stream;   // CUPTI's stream id
    int32_t copy_kind; // memcpy: CUPTI's copy kind (traces/README.md)
    int64_t start_ns, end_ns; // on the probe's clock; 0: CUPTI had no time
    uint64_t bytes;           // memcpy, memset
    const char *name;         // kernel: its shown name (demangled, cut), else NULL
} GpuRecord;

// The default bound: a step's collectives and about a dozen of its kernels per layer of
// rtdetr-l; 0 in DDPDBG_GPU_ROWS_PER_STEP writes every record.
enum { GPU_ROWS_PER_STEP_DEFAULT = 2048 };

typedef struct GpuActivity GpuActivity;

typedef struct GpuActivityStats {
    uint64_t rows;       // GPU_KERNEL, GPU_MEMCPY and GPU_MEMSET rows written
    uint64_t filtered;   // records the per-step bound kept out
    uint64_t tied;       // NCCL kernels tied to a collective by stream order (one row each)
    uint64_t nccl_untied; // NCCL kernels on a stream with no collective waiting for one
} GpuActivityStats;

// Rows go to p. rows_per_step 0: no bound.
GpuActivity *gpu_activity_new(Probe *p, int rows_per_step);
void gpu_activity_free(GpuActivity *g);
// The bound DDPDBG_GPU_ROWS_PER_STEP asks for (a count >= 0), else the default; a value that
// is not a count warns once and gives the default.
int gpu_activity_rows_per_step_from_env(void);

// Collective seq was queued on stream; its NCCL kernel is the next one there.
void gpu_activity_collective(GpuActivity *g, uint32_t stream, uint64_t seq);
// Step iter began at t_ns (probe clock). Steps come in increasing order of time.
void gpu_activity_step(GpuActivity *g, int64_t iter, int64_t t_ns);
// One record: written, tied, or filtered (see the top). Records of one stream come in the
// order the stream ran them (CUPTI writes a stream's records as its work completes).
void gpu_activity_record(GpuActivity *g, const GpuRecord *r);
GpuActivityStats gpu_activity_stats(GpuActivity *g);

// True for the name of a kernel NCCL launches (ncclKernel_*, ncclDevKernel_*, ...).
bool gpu_activity_is_nccl_kernel(const char *name);

#endif
