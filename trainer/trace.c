/* trace.c -- the trainer's probe glue (trace.h). */
#include "trainer/trace.h"

#include "probe/cupti.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#ifndef DDPDBG_REVISION
#define DDPDBG_REVISION "unknown"
#endif

void trace_open(TrainTrace *t, const char *dir, int rank, int world, bool gpu, int argc,
                char **argv) {
    *t = (TrainTrace){.phase = PROBE_PHASE_STARTUP};
    if (!dir || !*dir) return;
    // The writer commits once a second, with the heartbeat: a commit costs as much as a few
    // hundred rows (bench_probe, rows at a training run's pace: 0.92-1.04 us a row with commits
    // every 200 ms, 0.63-0.70 us every 1000 ms), and on busy cores the ranks lose what the
    // writer runs. The live view shows what is at most a second old; the watchdog reads the
    // rings, not the databases; a dying rank loses nothing by it: the launcher drains its ring.
    ProbeConfig cfg = {.dir = dir, .rank = rank, .heartbeat_ms = 1000, .flush_ms = 1000};
    t->probe = probe_open(&cfg);
    if (!t->probe) return; // probe_open warned once; training goes on untraced
    // GPU activity (kernels, copies, NCCL kernels tied to their collective); a failure warns
    // once and training goes on
    if (gpu) probe_cupti_start(t->probe, NULL, 0);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    probe_meta(t->probe, "world", "%d", world);
    probe_meta(t->probe, "host", "%s", host);
    probe_meta(t->probe, "pid", "%d", (int)getpid());
    probe_meta(t->probe, "revision", "%s", DDPDBG_REVISION);
    char args[4096] = "";
    size_t at = 0;
    for (int i = 0; i < argc && at < sizeof args; i++)
        at += (size_t)snprintf(args + at, sizeof args - at, "%s%s", i ? " " : "", argv[i]);
    probe_meta(t->probe, "args", "%s", args);
    probe_set_phase(t->probe, PROBE_PHASE_STARTUP, -1);
}

void trace_close(TrainTrace *t) {
    if (t->probe) probe_set_phase(t->probe, PROBE_PHASE_DONE, t->iter);
    probe_cupti_stop(t->probe); // CUPTI's last records go in before the database closes
    probe_close(t->probe);
    t->probe = NULL;
}

void trace_params(TrainTrace *t, const Registry *reg) {
    t->reg = reg;
    if (!t->probe) return;
    for (int i = 0; i < reg->n_params; i++) {
        const Tensor *p = reg->params[i];
        probe_param(t->probe, i, reg->names[i], p->ndim, p->shape, p->n);
    }
}

void trace_iteration(TrainTrace *t, int64_t iter) {
    t->iter = iter;
    t->hook_order = 0;
}

void trace_phase(TrainTrace *t, ProbeKind kind, ProbePhase phase) {
    if (!t->probe) return;
    if (kind) probe_emit(t->probe, kind, t->iter, 0, 0, 0, 0, NULL);
    if (kind == PROBE_FORWARD_BEGIN) probe_cupti_step(t->iter); // the GPU rows' per-step bound
    t->phase = phase;
    probe_set_phase(t->probe, phase, t->iter);
}

void trace_batch(TrainTrace *t, int n_images, const int64_t *indices, const int *boxes) {
    for (int k = 0; t->probe && k < n_images; k++)
        probe_emit(t->probe, PROBE_BATCH, t->iter, (int32_t)indices[k], boxes[k], k, 0, NULL);
}

void trace_error(TrainTrace *t, const char *text) {
    if (t->probe) probe_emit(t->probe, PROBE_ERROR, t->iter, 0, 0, 0, 0, text);
}

static ProbeOp op_code(const char *op) {
    if (!strcmp(op, "broadcast")) return PROBE_OP_BROADCAST;
    if (!strcmp(op, "allgather")) return PROBE_OP_ALLGATHER;
    if (!strcmp(op, "barrier")) return PROBE_OP_BARRIER;
    return PROBE_OP_ALLREDUCE;
}

// Writes the pending hook's row; marked_bucket >= 0: the hook marked its parameter ready there.
static void write_hook(TrainTrace *t, int marked_bucket) {
    TraceHook *h = &t->hook;
    if (!h->pending) return;
    h->pending = false;
    probe_emit_at(t->probe, h->t_ns, PROBE_GRAD_READY, marked_bucket >= 0 ? PROBE_FLAG_MARKED : 0,
                  t->iter, h->param, h->order, h->grad_defined,
                  marked_bucket >= 0 ? marked_bucket : 0);
}

void trace_reducer_event(void *user, const ReducerEvent *e) {
    TrainTrace *t = user;
    Probe *p = t->probe;
    if (!p) return;
    // The hook's own mark, before anything else happened: one row. Anything else first writes
    // the hook's row as it is (a hook under no_sync, a static graph's counting hooks, the
    // unused parameters find_unused_parameters marks at the first hook).
    if (e->kind == REDUCER_EV_MARK_READY && t->hook.pending && t->hook.param == e->param &&
        !e->unused) {
        write_hook(t, e->bucket);
        return;
    }
    write_hook(t, -1);
    switch (e->kind) {
    case REDUCER_EV_HOOK:
        t->hook = (TraceHook){.pending = true,
                              .param = e->param,
                              .order = t->hook_order++,
                              .grad_defined = e->grad_defined,
                              .t_ns = probe_now_ns()};
        break;
    case REDUCER_EV_HOOK_DONE:
        break;
    case REDUCER_EV_MARK_READY:
        probe_emit(p, PROBE_MARK_READY, t->iter, e->param, e->bucket, e->unused, 0, NULL);
        break;
    case REDUCER_EV_BUCKET_READY:
        probe_emit(p, PROBE_BUCKET_READY, t->iter, 0, e->bucket, 0, 0, NULL);
        break;
    case REDUCER_EV_COLLECTIVE:
        probe_emit(p, PROBE_COLL_LAUNCH, t->iter, op_code(e->op), e->bucket, (int64_t)e->seq,
                   e->numel, e->what);
        break;
    case REDUCER_EV_COLLECTIVE_WAIT:
        probe_set_phase(p, PROBE_PHASE_COLLECTIVE, t->iter);
        break;
    case REDUCER_EV_COLLECTIVE_DONE:
        probe_emit_text(p, PROBE_COLL_DONE, e->ok ? PROBE_FLAG_OK : 0, t->iter, op_code(e->op),
                        e->bucket, (int64_t)e->seq, e->numel, e->what, strlen(e->what));
        probe_set_phase(p, t->phase, t->iter);
        break;
    case REDUCER_EV_FINALIZE:
        probe_emit(p, PROBE_FINALIZE, t->iter, 0, 0, 0, 0, NULL);
        break;
    case REDUCER_EV_LAYOUT: {
        const BucketLayout *l = e->layout;
        int gen = t->generation++;
        for (int b = 0; b < l->n_buckets; b++) {
            int64_t offset = 0; // the parameter's first element in the bucket's flat buffer
            for (int k = l->start[b]; k < l->start[b + 1]; k++) {
                probe_emit(p, PROBE_LAYOUT, t->iter, gen, b, l->vars[k], offset, NULL);
                offset += t->reg ? t->reg->params[l->vars[k]]->n : 0;
            }
        }
        break;
    }
    case REDUCER_EV_ERROR:
        probe_emit(p, PROBE_ERROR, t->iter, 0, 0, 0, 0, e->text);
        break;
    }
}

void trace_ddp_settings(TrainTrace *t, const DdpConfig *c, const char *backend) {
    if (!t->probe) return;
    const ReducerConfig *r = &c->reducer;
    probe_meta(t->probe, "backend", "%s", backend);
    probe_meta(t->probe, "find_unused_parameters", "%s",
               r->find_unused_parameters ? "true" : "false");
    probe_meta(t->probe, "static_graph", "%s", r->static_graph ? "true" : "false");
    probe_meta(t->probe, "gradient_as_bucket_view", "%s",
               r->gradient_as_bucket_view ? "true" : "false");
    probe_meta(t->probe, "broadcast_buffers", "%s", c->broadcast_buffers ? "true" : "false");
    probe_meta(t->probe, "bucket_cap_bytes", "%lld", (long long)r->bucket_bytes_cap);
    probe_meta(t->probe, "first_bucket_bytes", "%lld", (long long)r->first_bucket_bytes_cap);
    static const char *levels[] = {"OFF", "INFO", "DETAIL"};
    probe_meta(t->probe, "torch_distributed_debug", "%s", levels[r->debug]);
}
