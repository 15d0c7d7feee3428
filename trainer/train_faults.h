/* train_faults.h -- where the trainer applies the faults of fault.h: each at the point of the
 * real mechanism (a cut graph edge, a SIGKILL in the middle of backward, a sleep), never a
 * faked event. The reducer's observer passes through here so that fault=kill can strike at a
 * reducer event (the middle of backward, the first bucket wait). */
#ifndef TRAINER_TRAIN_FAULTS_H
#define TRAINER_TRAIN_FAULTS_H

#include "trainer/fault.h"
#include "trainer/trace.h"

typedef struct FaultObserver {
    TrainTrace *trace; // events go on to the probe
    const Fault *faults;
    int n_faults;
    int rank, n_params;
    int64_t iter;      // the trainer's iteration (set per batch)
    int hooks;         // gradient-ready hooks so far in this backward
} FaultObserver;

// The reducer's observer (user: a FaultObserver): the trace, then fault=kill with
// phase=backward (once the hook of half the parameters has returned) and phase=allreduce
// (when the rank starts waiting for its first bucket).
void fault_observer(void *user, const ReducerEvent *e);
// fault=kill with this phase at iteration ni on this rank: SIGKILL now (says so first).
void fault_kill_point(const Fault *faults, int n, int rank, int64_t ni, FaultPhase phase);
void fault_sleep_ms(int64_t ms);
// fault=unused: cuts every recorded edge of the tape into a parameter whose name matches glob
// (fnmatch), so backward never reaches it: no gradient, no hook, as if its output were
// detached from the loss.
void fault_cut_params(Tape *t, const Registry *reg, const char *glob);

#endif
