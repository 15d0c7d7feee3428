/* trace.h -- what the trainer tells its probe (probe/probe.h), in one place: the run's
 * metadata and parameter table at start, per iteration the phases (forward, backward,
 * optimiser step), the batch (ground-truth boxes per image), and through the reducer's
 * observer every gradient-ready hook, mark, bucket and collective (reducer.h), the live phase
 * the launcher's watchdog reads (waiting in collective N), and errors with their full text.
 * With no trace directory every call is a no-op (the probe is NULL). */
#ifndef TRAINER_TRACE_H
#define TRAINER_TRACE_H

#include <stdbool.h>
#include <stdint.h>

#include "probe/probe.h"
#include "trainer/dist/ddp.h"
#include "trainer/nn/module.h"

// A gradient-ready hook not yet recorded: its row waits for the mark that usually follows
// (then it is one GRAD_READY row flagged PROBE_FLAG_MARKED, half the rows of a trace) and is
// written, with the hook's time, by the next reducer event, at the latest when the hook
// returns. A rank killed inside a hook loses that hook's row.
typedef struct TraceHook {
    bool pending;
    int param, order;
    bool grad_defined;
    int64_t t_ns;
} TraceHook;

typedef struct TrainTrace {
    Probe *probe;        // NULL: tracing off
    int64_t iter;        // the trainer's iteration (batches so far, all epochs)
    int hook_order;      // gradient-ready hooks so far in this backward
    TraceHook hook;      // the hook being run, until its row is written
    int generation;      // bucket layouts installed so far
    ProbePhase phase;    // the phase a collective wait returns to
    const Registry *reg; // from trace_params: parameter sizes for layout offsets
} TrainTrace;

// Opens the probe in dir (NULL or "": off) for rank. gpu: also record CUPTI's GPU activity
// (a run on a CUDA device). argv: the train arguments, recorded as metadata with the world size,
// pid, host and the build's revision.
void trace_open(TrainTrace *t, const char *dir, int rank, int world, bool gpu, int argc,
                char **argv);
void trace_close(TrainTrace *t);

// The parameter table (index, name, shape, numel), once after the model exists and before
// DDP is constructed (its layout events need the sizes).
void trace_params(TrainTrace *t, const Registry *reg);
// The DDP settings in effect, defaults included (meta: find_unused_parameters, static_graph,
// gradient_as_bucket_view, broadcast_buffers, bucket_cap_bytes, first_bucket_bytes, backend,
// torch_distributed_debug).
void trace_ddp_settings(TrainTrace *t, const DdpConfig *c, const char *backend);
// An iteration begins: iter is the trainer's ni.
void trace_iteration(TrainTrace *t, int64_t iter);
// A phase boundary: emits kind (FORWARD_BEGIN, ..., OPTIM_STEP; 0 for none) and sets the live
// phase.
void trace_phase(TrainTrace *t, ProbeKind kind, ProbePhase phase);
// The batch: per image its index in the dataset and its ground-truth boxes.
void trace_batch(TrainTrace *t, int n_images, const int64_t *indices, const int *boxes);
// An error that stops the rank: its full text.
void trace_error(TrainTrace *t, const char *text);
// The reducer's observer (user: the TrainTrace).
void trace_reducer_event(void *user, const ReducerEvent *e);

#endif
