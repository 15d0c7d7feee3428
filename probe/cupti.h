/* cupti.h -- GPU activity in a rank's trace: the CUDA kernels, memcpys and memsets CUPTI's
 * Activity API reports, each as one probe record (GPU_KERNEL, GPU_MEMCPY, GPU_MEMSET) with its
 * start and end moved onto the probe's clock (CLOCK_REALTIME ns), and GPU_CORRELATION records
 * that tie the CUDA calls made between a correlate push and pop (an NCCL collective's launch)
 * to that collective's sequence number, the c of its COLL_LAUNCH; NCCL kernels are also tied
 * by their stream's launch order, and a step writes a bounded number of other rows
 * (probe/gpu_activity.h, which every record goes through). Columns: traces/README.md.
 *
 * Built with CUPTI where the Makefile finds it (-DDDPDBG_HAVE_CUPTI, needs NCCL's CUDA
 * runtime); elsewhere the same functions are stubs: start fails with NO_CUPTI_LINE, the rest do
 * nothing. Like the probe, this never stops training: a failure prints one warning and the
 * GPU activity is off from then on. One probe per process records GPU activity at a time. */
#ifndef PROBE_CUPTI_H
#define PROBE_CUPTI_H

#include "probe/probe.h"

#include <stddef.h>
#include <stdint.h>

// What a build without CUPTI says when asked to start.
#define PROBE_CUPTI_NO_CUPTI_LINE                                                                  \
    "this build has no CUPTI (rebuild where $CUDA_HOME has include/cupti.h, lib64/libcupti.so "    \
    "and NCCL)"
// How a build with CUPTI starts its line when no GPU is visible (the CUDA error follows, then ')').
#define PROBE_CUPTI_NO_DEVICE_PREFIX "no CUDA device visible (cudaGetDeviceCount: "

// Starts recording this process's GPU activity into p: enables CUPTI's kernel, memcpy, memset,
// driver/runtime API and external-correlation activity, calibrates CUPTI's clock against the
// probe's, and records in table meta cupti_version, cupti_clock_offset_ns and
// cupti_clock_bound_ns (the error bound of the clock move). Call it before the first CUDA work
// worth seeing (a collective launched earlier is still seen, its context's creation is not).
// Returns 0, or -1 after printing one warning, with that line in err (NULL allowed):
// PROBE_CUPTI_NO_CUPTI_LINE, PROBE_CUPTI_NO_DEVICE_PREFIX..., "CUPTI: <call>: <CUPTI error>"
// (another CUPTI client such as nsys holds CUPTI), or "already recording" for a second start.
// NULL p (tracing off): 0, nothing is recorded.
int probe_cupti_start(Probe *p, char *err, size_t errlen);

// Stops recording into p: turns CUPTI's activity off, flushes every record CUPTI still holds
// into p (cuptiActivityFlushAll, forced: a kernel still running gets end 0), and records in
// table meta cupti_events and cupti_dropped (records CUPTI lost, also warned about). Call it
// before probe_close(p), from any thread but not from a CUPTI callback. A no-op for NULL, for a
// probe that is not recording, and in a build without CUPTI.
void probe_cupti_stop(Probe *p);

// Marks the CUDA calls the calling thread makes until the matching pop as work for collective
// seq (its group sequence number): CUPTI emits one GPU_CORRELATION per call, which ties the
// kernels and copies it launched to the COLL_LAUNCH with that c. Pushes nest per thread; a pop
// without its push is ignored. One relaxed load when not recording; safe from any thread.
void probe_cupti_correlate_push(uint64_t seq);
void probe_cupti_correlate_pop(void);

// Collective seq is on cuda_stream (a cudaStream_t) now, after every collective named earlier
// there: its NCCL kernel is the next one that stream runs (probe/gpu_activity.h ties them by
// that order). Call it in launch order, once NCCL has the call on the stream.
void probe_cupti_collective(void *cuda_stream, uint64_t seq);
// Training step iter begins now: the per-step bound on GPU rows (DDPDBG_GPU_ROWS_PER_STEP,
// probe/gpu_activity.h) counts from here. Both: one relaxed load when not recording.
void probe_cupti_step(int64_t iter);

#endif
