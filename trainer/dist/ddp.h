/* ddp.h -- torch.nn.parallel.DistributedDataParallel's Python half, in C: construction
 * (_verify_params_across_processes, _sync_module_states, the initial buckets), the steps
 * around every forward (_pre_forward: prepare_for_forward, _rebuild_buckets -- where the
 * "Expected to have finished reduction" error surfaces -- and the buffer broadcast;
 * _post_forward: prepare_for_backward, static graph's delayed allreduce) and no_sync().
 * The reducer itself is reducer.h. All collectives go to one process group, in a sequence
 * identical on every rank that runs the same program (ddp-reducer.md §6.1):
 *   construction  allgather [count], broadcast [shape metadata], broadcast params+buffers
 *   each forward  (iteration 2, or 3 with static_graph: 2 broadcasts, the rebuilt layout)
 *                 broadcast of the buffers from rank 0 (broadcast_buffers)
 *   each backward one allreduce per bucket in bucket order (+ the used bitmap with
 *                 find_unused_parameters) */
#ifndef TRAINER_DIST_DDP_H
#define TRAINER_DIST_DDP_H

#include "trainer/dist/reducer.h"
#include "trainer/nn/module.h"

typedef struct DdpConfig {
    ReducerConfig reducer;
    bool broadcast_buffers; // true: rank 0's buffers before every synced forward
    bool check_settings;    // ours, not PyTorch's: the construction check that every rank has
                            // the same settings (false: PyTorch's behaviour, no check)
} DdpConfig;

// PyTorch's defaults: find_unused_parameters and static_graph off, 1 MiB / 25 MiB caps,
// gradient_as_bucket_view off, broadcast_buffers on, debug from TORCH_DISTRIBUTED_DEBUG;
// and our settings check on.
void ddp_config_default(DdpConfig *c);

typedef struct Ddp {
    ProcessGroup *pg;
    Registry *reg;
    Tape *tape;
    DdpConfig cfg;
    Reducer reducer;
    bool reducer_ok;
    bool require_backward_grad_sync; // false inside no_sync()
    bool require_forward_param_sync;
    float *stage;                    // broadcast staging
    int64_t stage_n;
    char *error;                     // construction / broadcast errors (else the reducer's)
} Ddp;

// Wraps the registry's parameters (all of them: the index space) and buffers. Runs the
// construction collectives; on a mismatch returns -1 with PyTorch's message (or, for DDP
// settings that differ when cfg->check_settings, ours) in ddp_error. observer (may be NULL) sees the reducer's events.
int ddp_init(Ddp *d, ProcessGroup *pg, Registry *reg, Tape *tape, const DdpConfig *cfg,
             ReducerObserver observer, void *user);
void ddp_free(Ddp *d);

// Before the forward (the tape's grad mode decides what runs, as torch.is_grad_enabled()
// does). -1 with ddp_error: the prior iteration did not finalize, or a broadcast failed.
int ddp_pre_forward(Ddp *d);
// After the forward, with the tensors it returned.
void ddp_post_forward(Ddp *d, Tensor *const *outputs, int n_outputs);
// with ddp.no_sync(): true on entering, false on leaving.
void ddp_no_sync(Ddp *d, bool on);
// The last error's full text ("" when none).
const char *ddp_error(const Ddp *d);

#endif
