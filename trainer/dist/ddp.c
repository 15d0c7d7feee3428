/* ddp.c -- DistributedDataParallel's construction and forward steps (ddp.h), after
 * torch/nn/parallel/distributed.py and reducer.cpp's verify_params_across_processes. */
#include "trainer/dist/ddp.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base.h" // CHECK, xmalloc

// _DEFAULT_BROADCAST_BUCKET_SIZE's role: DDP's broadcast_bucket_size, 250 MiB.
#define BROADCAST_BUCKET_BYTES (250 * 1024 * 1024)

void ddp_config_default(DdpConfig *c) {
    *c = (DdpConfig){.reducer = {.bucket_bytes_cap = REDUCER_BUCKET_BYTES_CAP,
                                 .first_bucket_bytes_cap = REDUCER_FIRST_BUCKET_BYTES},
                     .broadcast_buffers = true,
                     .check_settings = true};
    DebugLevel level = DEBUG_OFF;
    if (debug_level_parse(getenv("TORCH_DISTRIBUTED_DEBUG"), &level) == 0)
        c->reducer.debug = level;
}

static int ddp_fail(Ddp *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int ddp_fail(Ddp *d, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *text = xvasprintf(fmt, ap);
    va_end(ap);
    free(d->error);
    d->error = text;
    if (d->reducer_ok) reducer_fail(&d->reducer, "%s", text); // observers see it too
    return -1;
}

const char *ddp_error(const Ddp *d) {
    if (d->error) return d->error;
    return d->reducer_ok ? reducer_error(&d->reducer) : "";
}

static float *stage(Ddp *d, int64_t n) {
    if (n > d->stage_n) {
        free(d->stage);
        d->stage = xmalloc(sizeof(float) * (size_t)n);
        d->stage_n = n;
    }
    return d->stage;
}

// One broadcast from rank 0, reported to observers; -1 with the group's error.
static int broadcast(Ddp *d, float *data, int64_t n, const char *what) {
    char err[1024];
    uint64_t seq = pg_seq(d->pg) + 1; // the collective about to launch (1-based)
    if (d->reducer_ok) reducer_note_collective(&d->reducer, "broadcast", what, n, seq, false, true);
    int rc = pg_broadcast(d->pg, data, n, 0, err, sizeof err);
    if (d->reducer_ok) reducer_note_collective(&d->reducer, "broadcast", what, n, seq, true, rc == 0);
    return rc ? ddp_fail(d, "%s", err) : 0;
}

// _broadcast_coalesced of float tensors: packed into chunks of at most 250 MiB (a chunk closes
// once it reaches the size, as bucket assignment does), one broadcast per chunk, unpacked.
// ptrs are the model's device memory: packed into the host staging buffer by to_host and
// unpacked by to_device (the process group broadcasts host memory).
static int broadcast_floats(Ddp *d, float **ptrs, const int64_t *ns, int count, const char *what) {
    const Backend *be = backend_need(d->reg->params[0]->dev);
    int first = 0;
    while (first < count) {
        int64_t total = 0;
        int last = first;
        while (last < count) {
            total += ns[last++];
            if (total * (int64_t)sizeof(float) >= BROADCAST_BUCKET_BYTES) break;
        }
        float *buf = stage(d, total);
        int64_t at = 0;
        for (int k = first; k < last; k++, at += ns[k - 1])
            be->to_host(buf + at, ptrs[k], sizeof(float) * (size_t)ns[k]);
        if (broadcast(d, buf, total, what)) return -1;
        at = 0;
        for (int k = first; k < last; k++, at += ns[k - 1])
            be->to_device(ptrs[k], buf + at, sizeof(float) * (size_t)ns[k]);
        first = last;
    }
    return 0;
}

// The int64 counters (num_batches_tracked): one more broadcast, the 8 bytes of each carried
// bit for bit (a broadcast copies bytes; nothing is summed).
static int broadcast_counters(Ddp *d, const char *what) {
    int n = 0;
    for (int b = 0; b < d->reg->n_buffers; b++)
        n += d->reg->buffers[b].count != NULL;
    if (n == 0) return 0;
    float *buf = stage(d, 2 * (int64_t)n);
    int at = 0;
    for (int b = 0; b < d->reg->n_buffers; b++)
        if (d->reg->buffers[b].count) memcpy(buf + 2 * at++, d->reg->buffers[b].count, 8);
    if (broadcast(d, buf, 2 * (int64_t)n, what)) return -1;
    at = 0;
    for (int b = 0; b < d->reg->n_buffers; b++)
        if (d->reg->buffers[b].count) memcpy(d->reg->buffers[b].count, buf + 2 * at++, 8);
    return 0;
}

// Collects the float tensors to broadcast: parameters (when with_params) then float buffers,
// in state-dict order. Returns how many; the caller frees both arrays.
static int float_states(const Ddp *d, bool with_params, float ***ptrs, int64_t **ns) {
    const Registry *r = d->reg;
    int cap = r->n_params + r->n_buffers, n = 0;
    *ptrs = xmalloc(sizeof(float *) * (size_t)MAX(cap, 1));
    *ns = xmalloc(sizeof(int64_t) * (size_t)MAX(cap, 1));
    if (with_params)
        for (int i = 0; i < r->n_params; i++) {
            (*ptrs)[n] = r->params[i]->data;
            (*ns)[n++] = r->params[i]->n;
        }
    for (int b = 0; b < r->n_buffers; b++)
        if (r->buffers[b].t) {
            (*ptrs)[n] = r->buffers[b].t->data;
            (*ns)[n++] = r->buffers[b].t->n;
        }
    return n;
}

static int sync_states(Ddp *d, bool with_params, const char *what) {
    float **ptrs;
    int64_t *ns;
    int n = float_states(d, with_params, &ptrs, &ns);
    int rc = n ? broadcast_floats(d, ptrs, ns, n, what) : 0;
    free(ptrs);
    free(ns);
    return rc ? rc : broadcast_counters(d, what);
}

static void format_sizes(const Tensor *t, char *out, size_t len) {
    size_t at = (size_t)snprintf(out, len, "[");
    for (int k = 0; k < t->ndim && at < len; k++)
        at += (size_t)snprintf(out + at, len - at, "%s%lld", k ? ", " : "", (long long)t->shape[k]);
    if (at < len) snprintf(out + at, len - at, "]");
}

// The settings that decide the bucket layouts and the collective sequence; every rank must
// agree, else the ranks' collectives pair up wrongly later (a hang or a crash, never an
// error). PyTorch does not check these; we do, at construction, unless check_settings is off
// (train argument check_ddp_settings=false: then the ranks go on as PyTorch's would).
typedef struct Settings {
    int64_t first_cap, cap;
    int32_t find_unused, static_graph, grad_as_view, broadcast_buffers;
} Settings;

static void settings_text(const Settings *s, char *out, size_t len) {
    snprintf(out, len,
             "find_unused_parameters=%s static_graph=%s gradient_as_bucket_view=%s "
             "broadcast_buffers=%s bucket_cap_bytes=%lld first_bucket_bytes=%lld",
             s->find_unused ? "True" : "False", s->static_graph ? "True" : "False",
             s->grad_as_view ? "True" : "False", s->broadcast_buffers ? "True" : "False",
             (long long)s->cap, (long long)s->first_cap);
}

// verify_params_across_processes (plus our settings check): an allgather of the parameter
// count (and, ours, the metadata length and the settings, so that no later collective can
// be given mismatched sizes), then rank 0's sizes and strides by broadcast, compared here.
static int verify_params_across_processes(Ddp *d) {
    int rank = pg_rank(d->pg), world = pg_world(d->pg);
    const Registry *r = d->reg;
    int64_t meta_len = 0;
    for (int i = 0; i < r->n_params; i++)
        meta_len += 2 * r->params[i]->ndim;
    typedef struct Head {
        int64_t count, meta_len;
        Settings settings;
    } Head;
    const ReducerConfig *rc = &d->cfg.reducer;
    Head mine = {.count = r->n_params,
                 .meta_len = meta_len,
                 .settings = {.first_cap = rc->first_bucket_bytes_cap,
                              .cap = rc->bucket_bytes_cap,
                              .find_unused = rc->find_unused_parameters,
                              .static_graph = rc->static_graph,
                              .grad_as_view = rc->gradient_as_bucket_view,
                              .broadcast_buffers = d->cfg.broadcast_buffers}};
    Head *all = xcalloc((size_t)world, sizeof(Head));
    char err[1024];
    if (pg_allgather(d->pg, &mine, sizeof mine, all, err, sizeof err)) {
        free(all);
        return ddp_fail(d, "%s", err);
    }
    int64_t max_len = 0;
    for (int i = 0; i < world; i++) {
        if (all[i].count != mine.count) {
            int64_t theirs = all[i].count;
            free(all);
            return ddp_fail(d,
                            "DDP expects same model across all ranks, but Rank %d has %d "
                            "params, while rank %d has inconsistent %lld params.",
                            rank, r->n_params, i, (long long)theirs);
        }
        if (d->cfg.check_settings &&
            memcmp(&all[i].settings, &mine.settings, sizeof mine.settings)) {
            char a[256], b[256];
            settings_text(&mine.settings, a, sizeof a);
            settings_text(&all[i].settings, b, sizeof b);
            free(all);
            return ddp_fail(d,
                            "DDP settings differ across ranks, so their bucket layouts and "
                            "collectives would not match: rank %d has %s, while rank %d has %s.",
                            rank, a, i, b);
        }
        max_len = MAX(max_len, all[i].meta_len);
    }
    free(all);
    // Rank 0's sizes and strides (padded to the longest rank's length), as exact floats.
    float *meta = xcalloc((size_t)MAX(max_len, 1), sizeof(float));
    int64_t at = 0;
    for (int i = 0; i < r->n_params; i++) {
        const Tensor *t = r->params[i];
        int64_t stride = 1;
        for (int k = 0; k < t->ndim; k++)
            meta[at + k] = (float)t->shape[k];
        for (int k = t->ndim - 1; k >= 0; k--) {
            meta[at + t->ndim + k] = (float)stride;
            stride *= t->shape[k];
        }
        at += 2 * t->ndim;
    }
    float *mine_meta = xmalloc(sizeof(float) * (size_t)MAX(max_len, 1));
    memcpy(mine_meta, meta, sizeof(float) * (size_t)MAX(max_len, 1));
    int status = broadcast(d, meta, max_len, "param_metadata");
    at = 0;
    for (int i = 0; status == 0 && i < r->n_params; i++) {
        const Tensor *t = r->params[i];
        char sizes[128];
        format_sizes(t, sizes, sizeof sizes);
        for (int k = 0; k < t->ndim && status == 0; k++)
            if (meta[at + k] != mine_meta[at + k])
                status = ddp_fail(d,
                                  "[%d]: params[%d] in this process with sizes %s appears not "
                                  "to match sizes of the same param in process 0.",
                                  rank, i, sizes);
        for (int k = 0; k < t->ndim && status == 0; k++)
            if (meta[at + t->ndim + k] != mine_meta[at + t->ndim + k])
                status = ddp_fail(d,
                                  "params[%d] in this process with sizes %s appears not to "
                                  "match strides of the same param in process 0.",
                                  i, sizes);
        at += 2 * t->ndim;
    }
    free(meta);
    free(mine_meta);
    return status;
}

int ddp_init(Ddp *d, ProcessGroup *pg, Registry *reg, Tape *tape, const DdpConfig *cfg,
             ReducerObserver observer, void *user) {
    *d = (Ddp){.pg = pg,
               .reg = reg,
               .tape = tape,
               .cfg = *cfg,
               .require_backward_grad_sync = true,
               .require_forward_param_sync = true};
    if (reg->n_params == 0)
        return ddp_fail(d, "DistributedDataParallel is not needed when a module doesn't have any "
                           "parameter that requires a gradient.");
    // The reducer exists first so that observers see the construction collectives; it issues
    // none itself until the first backward.
    reducer_init(&d->reducer, pg, tape, reg->params, reg->names, reg->n_params, &cfg->reducer,
                 observer, user);
    d->reducer_ok = true;
    if (verify_params_across_processes(d)) return -1;
    if (sync_states(d, true, "module_states")) return -1; // _sync_module_states
    return 0;
}

void ddp_free(Ddp *d) {
    if (d->reducer_ok) reducer_free(&d->reducer);
    free(d->stage);
    free(d->error);
    *d = (Ddp){0};
}

int ddp_pre_forward(Ddp *d) {
    bool grad = d->tape->grad_enabled;
    if (grad && d->require_backward_grad_sync) reducer_prepare_for_forward(&d->reducer);
    if (grad) {
        int rebuilt = reducer_rebuild_buckets(&d->reducer);
        if (rebuilt < 0) return -1;
        if (rebuilt && d->cfg.reducer.debug != DEBUG_OFF)
            fprintf(stderr, "Reducer buckets have been rebuilt in this iteration.\n");
    }
    // will_sync_module_buffers: require_forward_param_sync and broadcast_buffers and buffers.
    if (d->require_forward_param_sync && d->cfg.broadcast_buffers && d->reg->n_buffers > 0)
        return sync_states(d, false, "buffers");
    return 0;
}

void ddp_post_forward(Ddp *d, Tensor *const *outputs, int n_outputs) {
    const ReducerConfig *rc = &d->cfg.reducer;
    if (d->tape->grad_enabled && d->require_backward_grad_sync) {
        d->require_forward_param_sync = true;
        if (rc->find_unused_parameters && !rc->static_graph)
            reducer_prepare_for_backward(&d->reducer, outputs, n_outputs);
        else
            reducer_prepare_for_backward(&d->reducer, NULL, 0);
    } else {
        d->require_forward_param_sync = false;
    }
    // _DDPSink's backward queues the delayed allreduce in static graph's first iteration.
    if (rc->static_graph && d->reducer.num_iterations == 1) reducer_queue_delay_all_reduce(&d->reducer);
}

void ddp_no_sync(Ddp *d, bool on) { d->require_backward_grad_sync = !on; }
