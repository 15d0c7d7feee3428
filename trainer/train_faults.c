/* train_faults.c -- applying faults in the trainer (train_faults.h). */
#include "trainer/train_faults.h"

#include <fnmatch.h>
#include <signal.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static void kill_now(int rank, int64_t ni, const char *where) {
    fprintf(stderr, "fault kill: rank %d killed (SIGKILL) at iteration %lld, %s\n", rank,
            (long long)ni, where);
    fflush(stderr);
    raise(SIGKILL);
}

void fault_kill_point(const Fault *faults, int n, int rank, int64_t ni, FaultPhase phase) {
    const Fault *f = fault_find(faults, n, FAULT_KILL, rank, ni);
    if (f && f->phase == phase && phase == FAULT_PHASE_FORWARD) kill_now(rank, ni, "in forward");
}

void fault_observer(void *user, const ReducerEvent *e) {
    FaultObserver *o = user;
    trace_reducer_event(o->trace, e);
    if (e->kind == REDUCER_EV_HOOK) o->hooks++;
    if (e->kind == REDUCER_EV_FINALIZE) o->hooks = 0;
    const Fault *f = fault_find(o->faults, o->n_faults, FAULT_KILL, o->rank, o->iter);
    if (!f) return;
    // after the hook that makes half the parameters' hooks has returned: its row is recorded
    if (f->phase == FAULT_PHASE_BACKWARD && e->kind == REDUCER_EV_HOOK_DONE &&
        o->hooks == o->n_params / 2)
        kill_now(o->rank, o->iter, "in the middle of backward");
    if (f->phase == FAULT_PHASE_ALLREDUCE && e->kind == REDUCER_EV_COLLECTIVE_WAIT && e->what &&
        e->bucket >= 0)
        kill_now(o->rank, o->iter, "waiting in a bucket allreduce");
}

void fault_sleep_ms(int64_t ms) {
    struct timespec t = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    while (nanosleep(&t, &t) != 0) {
    }
}

void fault_cut_params(Tape *t, const Registry *reg, const char *glob) {
    for (int64_t k = 0; k < t->n_nodes; k++) {
        Node *n = t->nodes[k];
        for (int i = 0; i < n->n_in; i++) {
            Tensor *x = n->in[i];
            if (!x || x->param_index < 0 || x->param_index >= reg->n_params ||
                reg->params[x->param_index] != x || fnmatch(glob, reg->names[x->param_index], 0))
                continue;
            // the node now sees a constant with the parameter's values: no edge, no gradient
            n->in[i] = tensor_view(t->arena, x->data, x->ndim, x->shape);
        }
    }
}
