/* reducer.c -- the DDP Reducer (reducer.h), following reducer.cpp function by function; the
 * PyTorch name of each piece is in its comment, so the two can be read side by side. */
#include "trainer/dist/reducer.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base.h" // CHECK, xmalloc
#include "trainer/dist/reducer_errors.h"

int debug_level_parse(const char *text, DebugLevel *out) {
    if (!text || !*text || !strcmp(text, "OFF")) *out = DEBUG_OFF;
    else if (!strcmp(text, "INFO")) *out = DEBUG_INFO;
    else if (!strcmp(text, "DETAIL")) *out = DEBUG_DETAIL;
    else return -1;
    return 0;
}

void bucket_layout_free(BucketLayout *l) {
    free(l->start);
    free(l->vars);
    free(l->limit);
    *l = (BucketLayout){0};
}

// ---- compute_bucket_assignment_by_size ------------------------------------------------------
void bucket_assign_by_size(const int64_t *bytes, int n, const int *order, const int64_t *limits,
                           int n_limits, BucketLayout *out) {
    CHECK(n >= 1 && n_limits >= 1, "bucket_assign_by_size: %d tensors, %d limits", n, n_limits);
    // Buckets as they are closed: each a run of `vars` (emission order), its limit.
    int *vars = xmalloc(sizeof(int) * (size_t)n), *start = xmalloc(sizeof(int) * (size_t)(n + 1));
    int64_t *limit = xmalloc(sizeof(int64_t) * (size_t)n);
    int nb = 0, cursor = 0, open_first = 0;
    int64_t open_bytes = 0;
    start[0] = 0;
    for (int k = 0; k < n; k++) {
        int i = order ? order[k] : k;
        vars[k] = i;
        open_bytes += bytes[i];
        // The size test comes after appending: a bucket may exceed its limit by one tensor.
        if (open_bytes >= limits[cursor]) {
            limit[nb] = limits[cursor];
            start[++nb] = k + 1;
            open_first = k + 1;
            open_bytes = 0;
            if (cursor + 1 < n_limits) cursor++;
        }
    }
    if (open_first < n) { // the open bucket
        limit[nb] = limits[cursor];
        start[++nb] = n;
    }
    *out = (BucketLayout){.n_buckets = nb, .n_vars = n};
    out->start = xmalloc(sizeof(int) * (size_t)(nb + 1));
    out->vars = xmalloc(sizeof(int) * (size_t)n);
    out->limit = xmalloc(sizeof(int64_t) * (size_t)nb);
    // First construction sorts the buckets by their smallest index (in definition order that
    // is the first element); a rebuild keeps the gradient-ready emission order.
    int *perm = xmalloc(sizeof(int) * (size_t)nb);
    for (int b = 0; b < nb; b++)
        perm[b] = b;
    if (!order) {
        for (int b = 1; b < nb; b++) { // insertion sort: few buckets
            int p = perm[b], j = b;
            while (j > 0 && vars[start[perm[j - 1]]] > vars[start[p]]) {
                perm[j] = perm[j - 1];
                j--;
            }
            perm[j] = p;
        }
    }
    int at = 0;
    out->start[0] = 0;
    for (int b = 0; b < nb; b++) {
        int src = perm[b];
        for (int k = start[src]; k < start[src + 1]; k++)
            out->vars[at++] = vars[k];
        out->start[b + 1] = at;
        out->limit[b] = limit[src];
    }
    free(perm);
    free(vars);
    free(start);
    free(limit);
}

// Reverses the bucket order of l (not the order inside a bucket): Python DDP passes the
// initial buckets reversed, so bucket 0 holds the last-defined parameters.
static void layout_reverse(BucketLayout *l) {
    BucketLayout r = {.n_buckets = l->n_buckets, .n_vars = l->n_vars};
    r.start = xmalloc(sizeof(int) * (size_t)(l->n_buckets + 1));
    r.vars = xmalloc(sizeof(int) * (size_t)l->n_vars);
    r.limit = xmalloc(sizeof(int64_t) * (size_t)l->n_buckets);
    int at = 0;
    r.start[0] = 0;
    for (int b = 0; b < l->n_buckets; b++) {
        int src = l->n_buckets - 1 - b;
        for (int k = l->start[src]; k < l->start[src + 1]; k++)
            r.vars[at++] = l->vars[k];
        r.start[b + 1] = at;
        r.limit[b] = l->limit[src];
    }
    bucket_layout_free(l);
    *l = r;
}

// ---- errors and events ----------------------------------------------------------------------
static void emit(Reducer *r, ReducerEvent e) {
    e.iteration = r->num_iterations;
    if (r->observer) r->observer(r->observer_user, &e);
}

int reducer_fail(Reducer *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *text = xvasprintf(fmt, ap);
    va_end(ap);
    free(r->error);
    r->error = text;
    emit(r, (ReducerEvent){.kind = REDUCER_EV_ERROR, .param = -1, .bucket = -1, .text = text});
    return -1;
}

const char *reducer_error(const Reducer *r) { return r->error ? r->error : ""; }

void reducer_note_collective(Reducer *r, const char *op, const char *what, int64_t numel,
                             uint64_t seq, bool done, bool ok) {
    ReducerEvent e = {.kind = done ? REDUCER_EV_COLLECTIVE_DONE : REDUCER_EV_COLLECTIVE,
                      .param = -1,
                      .bucket = -1,
                      .op = op,
                      .what = what,
                      .numel = numel,
                      .seq = seq,
                      .ok = ok};
    emit(r, e);
    if (!done && strcmp(what, "local_used_map") != 0) { // blocking: the wait starts now
        e.kind = REDUCER_EV_COLLECTIVE_WAIT;
        emit(r, e);
    }
}

// ---- buckets: initialize_buckets / initialize_bucket_views ----------------------------------
static void free_buckets(Reducer *r) {
    for (int b = 0; b < r->n_buckets; b++) {
        Bucket *k = &r->buckets[b];
        if (k->work) pg_work_free(k->work);
        r->be->free(k->flat);
        free(k->host);
    }
    free(r->buckets);
    r->buckets = NULL;
    r->n_buckets = 0;
}

// Installs `layout` (taking it over): one flat gradient buffer per bucket, the locators, and
// with gradient_as_bucket_view each parameter's grad pointed at its view, an existing
// gradient copied there first (initialize_bucket_views + the rebuild's copy_).
static void install_layout(Reducer *r, BucketLayout *layout, bool rebuilt) {
    CHECK(layout->n_vars == r->n_params, "bucket layout covers %d of %d parameters",
          layout->n_vars, r->n_params);
    Bucket *old = r->buckets;
    int n_old = r->n_buckets;
    r->buckets = xcalloc((size_t)layout->n_buckets, sizeof(Bucket));
    r->n_buckets = layout->n_buckets;
    for (int b = 0; b < layout->n_buckets; b++) {
        Bucket *k = &r->buckets[b];
        CHECK(layout->start[b + 1] > layout->start[b], "Empty bucket specified.");
        k->n_vars = layout->start[b + 1] - layout->start[b];
        k->vars = layout->vars + layout->start[b];
        k->offset = xmalloc(sizeof(int64_t) * (size_t)k->n_vars);
        for (int j = 0; j < k->n_vars; j++) {
            int i = k->vars[j];
            k->offset[j] = k->numel;
            k->numel += r->params[i]->n;
            r->locator_bucket[i] = b;
            r->locator_pos[i] = j;
        }
        k->flat = r->be->alloc(sizeof(float) * (size_t)MAX(k->numel, 1));
        r->be->fill(&r->tape->kc, k->flat, 0.0f, k->numel);
        if (r->be->dev != DEV_CPU) k->host = xcalloc((size_t)MAX(k->numel, 1), sizeof(float));
        if (r->cfg.gradient_as_bucket_view)
            for (int j = 0; j < k->n_vars; j++) {
                Tensor *p = r->params[k->vars[j]];
                float *view = k->flat + k->offset[j];
                if (p->grad_defined) r->be->copy(&r->tape->kc, view, p->grad, p->n);
                p->grad = view;
            }
    }
    for (int b = 0; b < n_old; b++) {
        if (old[b].work) pg_work_free(old[b].work);
        free(old[b].offset);
        r->be->free(old[b].flat);
        free(old[b].host);
    }
    free(old);
    bucket_layout_free(&r->layout);
    r->layout = *layout;
    *layout = (BucketLayout){0};
    emit(r, (ReducerEvent){.kind = REDUCER_EV_LAYOUT,
                           .param = -1,
                           .bucket = -1,
                           .rebuilt = rebuilt,
                           .layout = &r->layout});
}

static int64_t *param_bytes(const Reducer *r) {
    int64_t *bytes = xmalloc(sizeof(int64_t) * (size_t)r->n_params);
    for (int i = 0; i < r->n_params; i++)
        bytes[i] = r->params[i]->n * (int64_t)sizeof(float);
    return bytes;
}

static int hook_trampoline(void *user, Tensor *leaf) {
    Reducer *r = user;
    CHECK(leaf->param_index >= 0 && leaf->param_index < r->n_params &&
              r->params[leaf->param_index] == leaf,
          "gradient-ready hook of a tensor outside the reducer's parameters");
    return reducer_autograd_hook(r, leaf->param_index);
}

void reducer_init(Reducer *r, ProcessGroup *pg, Tape *tape, Tensor **params, const char **names,
                  int n, const ReducerConfig *cfg, ReducerObserver observer, void *user) {
    CHECK(n >= 1, "DistributedDataParallel is not needed when a module doesn't have any "
                  "parameter that requires a gradient.");
    *r = (Reducer){.pg = pg,
                   .tape = tape,
                   .cfg = *cfg,
                   .n_params = n,
                   .params = params,
                   .names = names,
                   .div_factor = -1.0,
                   .observer = observer,
                   .observer_user = user};
    r->be = backend_need(params[0]->dev);
    r->own_grad = xmalloc(sizeof(float *) * (size_t)n);
    for (int i = 0; i < n; i++) {
        CHECK(params[i]->requires_grad && params[i]->grad && params[i]->param_index == i,
              "reducer: parameter %d is not a leaf of index %d with a grad buffer", i, i);
        CHECK(params[i]->dev == params[0]->dev, "reducer: parameters on two devices");
        r->own_grad[i] = params[i]->grad;
    }
    r->locator_bucket = xmalloc(sizeof(int) * (size_t)n);
    r->locator_pos = xmalloc(sizeof(int) * (size_t)n);
    r->ready = xcalloc((size_t)n, sizeof(bool));
    r->unused = xmalloc(sizeof(int) * (size_t)n);
    r->cap_rebuilt = n;
    r->rebuilt = xmalloc(sizeof(int) * (size_t)n);
    r->local_used = xcalloc((size_t)n, sizeof(float));
    r->local_used_dev = xcalloc((size_t)n, sizeof(float));
    r->hook_count = xcalloc((size_t)n, sizeof(int));
    r->hook_budget = xcalloc((size_t)n, sizeof(int));

    // _ddp_init_helper: one bucket per (dtype, device) unless find_unused_parameters (and not
    // static), then [first cap, cap]; reversed before the Reducer sees them.
    int64_t *bytes = param_bytes(r);
    BucketLayout l;
    if (cfg->static_graph || !cfg->find_unused_parameters)
        bucket_assign_by_size(bytes, n, NULL, (int64_t[]){INT64_MAX}, 1, &l);
    else
        bucket_assign_by_size(bytes, n, NULL,
                              (int64_t[]){cfg->first_bucket_bytes_cap, cfg->bucket_bytes_cap}, 2,
                              &l);
    free(bytes);
    layout_reverse(&l);
    install_layout(r, &l, false);
    tape->on_grad_ready = hook_trampoline;
    tape->hook_user = r;
}

void reducer_free(Reducer *r) {
    if (!r->params) return;
    for (int i = 0; i < r->n_params; i++) {
        Tensor *p = r->params[i];
        if (p->grad != r->own_grad[i]) {
            if (p->grad_defined) r->be->copy(&r->tape->kc, r->own_grad[i], p->grad, p->n);
            p->grad = r->own_grad[i];
        }
    }
    if (r->local_used_work) pg_work_free(r->local_used_work);
    for (int b = 0; b < r->n_buckets; b++)
        free(r->buckets[b].offset);
    free_buckets(r);
    bucket_layout_free(&r->layout);
    if (r->tape && r->tape->hook_user == r) {
        r->tape->on_grad_ready = NULL;
        r->tape->hook_user = NULL;
    }
    free(r->own_grad);
    free(r->locator_bucket);
    free(r->locator_pos);
    free(r->ready);
    free(r->unused);
    free(r->rebuilt);
    free(r->local_used);
    free(r->local_used_dev);
    free(r->hook_count);
    free(r->hook_budget);
    free(r->error);
    *r = (Reducer){0};
}

// ---- state predicates (reducer.hpp) ---------------------------------------------------------
static bool dynamic_graph_find_unused(const Reducer *r) {
    return !r->cfg.static_graph && r->cfg.find_unused_parameters;
}
static bool static_graph_first_iteration(const Reducer *r) {
    return r->cfg.static_graph && r->num_bwd_calls == 1;
}
static bool static_graph_after_first_iteration(const Reducer *r) {
    return r->cfg.static_graph && r->num_bwd_calls > 1;
}
static bool should_rebuild_buckets(const Reducer *r) {
    return (r->cfg.static_graph || !r->cfg.find_unused_parameters) && !r->has_rebuilt;
}

// ---- collectives --------------------------------------------------------------------------
static void all_reduce_bucket(Reducer *r, int b) {
    Bucket *k = &r->buckets[b];
    CHECK(!k->work, "bucket %d launched twice in one iteration", b);
    uint64_t seq = pg_seq(r->pg) + 1; // the collective about to launch (1-based)
    // the event first: its time is the launch, not the return of the queueing call
    emit(r, (ReducerEvent){.kind = REDUCER_EV_COLLECTIVE,
                           .param = -1,
                           .bucket = b,
                           .op = "allreduce",
                           .what = "bucket",
                           .numel = k->numel,
                           .seq = seq});
    // Off the CPU the bucket is staged through host memory (to_host now, to_device after the
    // wait, in finalize_backward), as PyTorch's Gloo does with CUDA tensors.
    if (k->host) r->be->to_host(k->host, k->flat, sizeof(float) * (size_t)k->numel);
    k->work = pg_allreduce_sum(r->pg, k->host ? k->host : k->flat, k->numel);
    k->seq = seq;
}

static void all_reduce_local_used_map(Reducer *r) {
    memcpy(r->local_used_dev, r->local_used, sizeof(float) * (size_t)r->n_params);
    uint64_t seq = pg_seq(r->pg) + 1; // the collective about to launch (1-based)
    CHECK(!r->local_used_work, "local_used_map allreduce launched twice");
    reducer_note_collective(r, "allreduce", "local_used_map", r->n_params, seq, false, true);
    r->local_used_work = pg_allreduce_sum(r->pg, r->local_used_dev, r->n_params);
    r->local_used_seq = seq;
    r->local_used_reduced = false;
}

// Waits for a work handle, emits COLLECTIVE_DONE and frees it. -1 with the error set.
static int wait_work(Reducer *r, PgWork **work, int bucket, const char *what, int64_t numel,
                     uint64_t seq) {
    char err[1024];
    ReducerEvent e = {.kind = REDUCER_EV_COLLECTIVE_WAIT,
                      .param = -1,
                      .bucket = bucket,
                      .op = "allreduce",
                      .what = what,
                      .numel = numel,
                      .seq = seq};
    emit(r, e); // also when already complete: observers (fault=kill phase=allreduce) rely on it
    int rc = pg_work_wait(*work, err, sizeof err);
    pg_work_free(*work);
    *work = NULL;
    emit(r, (ReducerEvent){.kind = REDUCER_EV_COLLECTIVE_DONE,
                           .param = -1,
                           .bucket = bucket,
                           .op = "allreduce",
                           .what = what,
                           .numel = numel,
                           .seq = seq,
                           .ok = rc == 0});
    return rc ? reducer_fail(r, "%s", err) : 0;
}

// Waits for the used-bitmap allreduce and copies the reduced counts back (the D2H copy).
static int fetch_local_used(Reducer *r) {
    if (r->local_used_work &&
        wait_work(r, &r->local_used_work, -1, "local_used_map", r->n_params, r->local_used_seq))
        return -1;
    memcpy(r->local_used, r->local_used_dev, sizeof(float) * (size_t)r->n_params);
    r->local_used_reduced = true;
    return 0;
}

// ---- hooks: autograd_hook, mark_variable_ready ----------------------------------------------
static void set_divide_factor(Reducer *r) {
    if (r->div_factor < 0) r->div_factor = (double)pg_world(r->pg);
}

// mark_variable_ready_dense: the gradient / div_factor into the bucket view (divided in place
// when the grad already is the view), or zeros when the grad is undefined.
static int mark_variable_ready_dense(Reducer *r, int i) {
    Bucket *k = &r->buckets[r->locator_bucket[i]];
    Tensor *p = r->params[i];
    float *view = k->flat + k->offset[r->locator_pos[i]];
    float scale = (float)(1.0 / r->div_factor);
    KernelCtx *kc = &r->tape->kc;
    if (p->grad_defined) {
        if (p->grad == view) { // view /= div_factor: div_fwd by a one-element device divisor
            float *divisor = tape_alloc_data(r->tape, sizeof(float));
            float div = (float)r->div_factor;
            r->be->to_device(divisor, &div, sizeof div);
            r->be->div_fwd(kc, view, view, divisor, 1, (int64_t[]){p->n}, (int64_t[]){1});
        } else {
            r->be->scale_fwd(kc, view, p->grad, scale, p->n); // grad * (1 / div_factor)
            if (r->cfg.gradient_as_bucket_view) {
                p->grad = view;
            }
        }
    } else {
        if ((dynamic_graph_find_unused(r) || static_graph_first_iteration(r)) &&
            r->local_used[i] != 0.0f)
            return reducer_fail(r, "Encountered gradient which is undefined, but still "
                                   "allreduced by DDP reducer. This indicates a bug in DDP "
                                   "implementation, please report a bug with a repro to "
                                   "PyTorch.");
        r->be->fill(kc, view, 0.0f, p->n);
    }
    return 0;
}

static int finalize_backward(Reducer *r);
static int finalize_callback(void *user);

static void mark_bucket_ready(Reducer *r, int b) {
    CHECK(b >= r->next_bucket, "bucket %d ready after bucket %d launched", b, r->next_bucket);
    // Buckets launch strictly in index order: a ready bucket waits for every earlier one.
    if (b > r->next_bucket) return;
    for (; r->next_bucket < r->n_buckets && r->buckets[r->next_bucket].pending == 0;
         r->next_bucket++) {
        r->num_buckets_ready++;
        all_reduce_bucket(r, r->next_bucket);
    }
}

static int mark_variable_ready(Reducer *r, int i, bool unused) {
    CHECK(i >= 0 && i < r->n_params, "Out of range variable index.");
    if (r->ready[i]) return reducer_raise_marked_twice(r, i);
    r->ready[i] = true;
    // Any marked variable requires a finalize before the next forward: the error's trigger.
    r->require_finalize = true;
    int b = r->locator_bucket[i];
    set_divide_factor(r);
    if (mark_variable_ready_dense(r, i)) return -1;
    emit(r, (ReducerEvent){.kind = REDUCER_EV_MARK_READY, .param = i, .bucket = b, .unused = unused});
    if (--r->buckets[b].pending == 0) {
        emit(r, (ReducerEvent){.kind = REDUCER_EV_BUCKET_READY, .param = -1, .bucket = b});
        mark_bucket_ready(r, b);
    }
    if (r->next_bucket == r->n_buckets && !r->finalize_queued) {
        if (dynamic_graph_find_unused(r)) all_reduce_local_used_map(r);
        r->finalize_queued = true;
        tape_queue_callback(r->tape, finalize_callback, r);
    }
    return 0;
}

// rebuilt_param_indices_.push_back: may exceed n_params when hooks fire twice (the error
// follows at once), so it grows.
static void push_rebuilt_params(Reducer *r, int i) {
    if (r->n_rebuilt == r->cap_rebuilt) {
        r->cap_rebuilt *= 2;
        r->rebuilt = xrealloc(r->rebuilt, sizeof(int) * (size_t)r->cap_rebuilt);
    }
    r->rebuilt[r->n_rebuilt++] = i;
}

static int autograd_hook(Reducer *r, int i);

int reducer_autograd_hook(Reducer *r, int i) {
    emit(r, (ReducerEvent){.kind = REDUCER_EV_HOOK,
                           .param = i,
                           .bucket = -1,
                           .grad_defined = r->params[i]->grad_defined});
    int rc = autograd_hook(r, i);
    emit(r, (ReducerEvent){.kind = REDUCER_EV_HOOK_DONE, .param = i, .bucket = -1});
    return rc;
}

// Reducer::autograd_hook: what the hook of parameter i does.
static int autograd_hook(Reducer *r, int i) {
    Tensor *p = r->params[i];
    if (!r->first_autograd_hook_called) {
        r->first_autograd_hook_called = true;
        r->num_bwd_calls++;
    }
    // Used this iteration (also under no_sync, so usage builds up over an accumulation
    // window), but only when a gradient is defined.
    if ((dynamic_graph_find_unused(r) || static_graph_first_iteration(r)) && p->grad_defined)
        r->local_used[i] = 1.0f;
    if (static_graph_first_iteration(r)) { // the first static backward only counts
        r->hook_count[i]++;
        return 0;
    }
    if (!r->expect_autograd_hooks) return 0; // no_sync, or not prepared
    // Unused parameters are marked ready at the first real hook of the backward.
    if (!r->has_marked_unused_parameters) {
        r->has_marked_unused_parameters = true;
        for (int k = 0; k < r->n_unused; k++)
            if (mark_variable_ready(r, r->unused[k], true)) return -1;
    }
    if (static_graph_after_first_iteration(r)) {
        if (r->hook_budget[i] <= 0)
            return reducer_fail(r, "Your training graph has changed in this iteration, e.g., one "
                                   "parameter is unused in first iteration, but then got used in "
                                   "the second iteration. this is not compatible with "
                                   "static_graph set to True.");
        if (--r->hook_budget[i] == 0) {
            if (should_rebuild_buckets(r)) push_rebuilt_params(r, i);
            return mark_variable_ready(r, i, false);
        }
        return 0;
    }
    if (should_rebuild_buckets(r)) push_rebuilt_params(r, i);
    return mark_variable_ready(r, i, false);
}

// ---- finalize --------------------------------------------------------------------------------
// finalize_bucket_dense + copy_bucket_to_grad: the averaged gradient back into each param's
// grad, except for globally unused parameters (their grad stays as it was, None included).
static int finalize_bucket_dense(Reducer *r, Bucket *k) {
    for (int j = 0; j < k->n_vars; j++) {
        int i = k->vars[j];
        Tensor *p = r->params[i];
        float *view = k->flat + k->offset[j];
        bool global_unused = false;
        if (r->cfg.static_graph || r->cfg.find_unused_parameters) {
            // A locally used parameter is globally used; only a locally unused one needs the
            // reduced bitmap, so the wait is lazy.
            global_unused = r->local_used[i] == 0.0f;
            if (global_unused && !r->local_used_reduced) {
                if (fetch_local_used(r)) return -1;
                global_unused = r->local_used[i] == 0.0f;
            }
        }
        if (global_unused) continue;
        if (!r->cfg.gradient_as_bucket_view) {
            r->be->copy(&r->tape->kc, p->grad, view, p->n);
            p->grad_defined = true;
        } else {
            if (p->grad_defined && p->grad != view)
                return reducer_fail(
                    r, "Detected at least one parameter gradient is not the expected DDP bucket "
                       "view with gradient_as_bucket_view=True. This may happen (for example) if "
                       "multiple allreduce hooks were registered onto the same parameter. If you "
                       "hit this error, please file an issue with a minimal repro.");
            p->grad = view;
            p->grad_defined = true;
        }
    }
    return 0;
}

static int finalize_backward(Reducer *r) {
    CHECK(r->expect_autograd_hooks && r->require_finalize, "finalize_backward out of turn");
    r->expect_autograd_hooks = false;
    r->require_finalize = false;
    r->first_autograd_hook_called = false;
    int rc = 0;
    for (int b = 0; b < r->n_buckets && rc == 0; b++) {
        Bucket *k = &r->buckets[b];
        CHECK(k->work, "Expected bucket.future_work not to be null. This may indicate that "
                       "communication hook was not properly installed.");
        rc = wait_work(r, &k->work, b, "bucket", k->numel, k->seq);
        if (rc == 0 && k->host) r->be->to_device(k->flat, k->host, sizeof(float) * (size_t)k->numel);
        r->div_factor = -1.0;
        if (rc == 0) rc = finalize_bucket_dense(r, k);
    }
    if (rc == 0 && (dynamic_graph_find_unused(r) || static_graph_first_iteration(r)) &&
        !r->local_used_reduced)
        rc = fetch_local_used(r);
    if (dynamic_graph_find_unused(r)) {
        memset(r->local_used, 0, sizeof(float) * (size_t)r->n_params);
        r->local_used_reduced = false;
    }
    if (rc == 0) emit(r, (ReducerEvent){.kind = REDUCER_EV_FINALIZE, .param = -1, .bucket = -1});
    return rc;
}

// The end-of-backward callback mark_variable_ready queues once every bucket has launched.
static int finalize_callback(void *user) {
    Reducer *r = user;
    r->finalize_queued = false;
    CHECK(r->next_bucket == r->n_buckets, "finalize with buckets not launched");
    if (static_graph_after_first_iteration(r) && should_rebuild_buckets(r))
        for (int k = 0; k < r->n_unused; k++)
            push_rebuilt_params(r, r->unused[k]);
    return finalize_backward(r);
}

// delay_all_reduce: static graph, after the first backward: the used bitmap, the unused set
// (frozen from now on), every parameter into its bucket, every bucket launched, finalize.
static int delay_all_reduce(void *user) {
    Reducer *r = user;
    all_reduce_local_used_map(r);
    r->n_unused = 0;
    r->require_finalize = true;
    for (int i = 0; i < r->n_params; i++) {
        if (r->hook_count[i] == 0) r->unused[r->n_unused++] = i;
        set_divide_factor(r);
        if (mark_variable_ready_dense(r, i)) return -1;
    }
    if (r->cfg.debug != DEBUG_OFF && r->n_unused > 0) {
        fprintf(stderr, "[Rank %d]: Parameter(s) (in the format of {param_name, index}): ",
                pg_rank(r->pg));
        for (int k = 0; k < r->n_unused; k++)
            fprintf(stderr, "{%s,%d}", r->names[r->unused[k]], r->unused[k]);
        fprintf(stderr, " is(are) unused during first iteration. Since static_graph=True is "
                        "enabled for DDP, we expect this set of unused parameters to remain "
                        "consistent on this rank throughout the training.\n");
    }
    for (int b = 0; b < r->n_buckets; b++)
        all_reduce_bucket(r, b);
    return finalize_backward(r);
}

void reducer_queue_delay_all_reduce(Reducer *r) {
    CHECK(r->cfg.static_graph, "delay_all_reduce without static_graph");
    if (r->delay_all_reduce_enqueued) return;
    r->delay_all_reduce_enqueued = true;
    tape_queue_callback(r->tape, delay_all_reduce, r);
}

// ---- the iteration's start ------------------------------------------------------------------
void reducer_prepare_for_forward(Reducer *r) { r->num_iterations++; }

// sync_bucket_indices: rank 0's layout to every rank, as two broadcasts (indices plus the
// bucket count, then the bucket sizes), ints carried exactly as floats.
static int sync_bucket_indices(Reducer *r, BucketLayout *l) {
    int total = l->n_vars;
    float *indices = xmalloc(sizeof(float) * (size_t)(total + 1));
    for (int k = 0; k < total; k++)
        indices[k] = (float)l->vars[k];
    indices[total] = (float)l->n_buckets;
    char err[1024];
    uint64_t seq = pg_seq(r->pg) + 1; // the collective about to launch (1-based)
    reducer_note_collective(r, "broadcast", "bucket_indices", total + 1, seq, false, true);
    int rc = pg_broadcast(r->pg, indices, total + 1, 0, err, sizeof err);
    reducer_note_collective(r, "broadcast", "bucket_indices", total + 1, seq, true, rc == 0);
    if (rc) {
        free(indices);
        return reducer_fail(r, "%s", err);
    }
    int nb = (int)indices[total];
    float *sizes = xmalloc(sizeof(float) * (size_t)nb);
    for (int b = 0; b < nb; b++) // a rank with fewer buckets repeats its last size
        sizes[b] = (float)(l->start[MIN(b, l->n_buckets - 1) + 1] -
                           l->start[MIN(b, l->n_buckets - 1)]);
    seq = pg_seq(r->pg) + 1;
    reducer_note_collective(r, "broadcast", "bucket_sizes", nb, seq, false, true);
    rc = pg_broadcast(r->pg, sizes, nb, 0, err, sizeof err);
    reducer_note_collective(r, "broadcast", "bucket_sizes", nb, seq, true, rc == 0);
    if (rc == 0) {
        BucketLayout synced = {.n_buckets = nb, .n_vars = total};
        synced.start = xmalloc(sizeof(int) * (size_t)(nb + 1));
        synced.vars = xmalloc(sizeof(int) * (size_t)total);
        synced.limit = xcalloc((size_t)nb, sizeof(int64_t));
        synced.start[0] = 0;
        for (int b = 0; b < nb; b++) {
            synced.start[b + 1] = synced.start[b] + (int)sizes[b];
            if (b < l->n_buckets && b < nb) synced.limit[b] = l->limit[b];
        }
        CHECK(synced.start[nb] == total, "rank 0's bucket sizes sum to %d, not %d",
              synced.start[nb], total);
        for (int k = 0; k < total; k++)
            synced.vars[k] = (int)indices[k];
        bucket_layout_free(l);
        *l = synced;
    }
    free(sizes);
    free(indices);
    return rc ? reducer_fail(r, "%s", err) : 0;
}

int reducer_rebuild_buckets(Reducer *r) {
    if (reducer_check_prior_reduction(r)) return -1;
    if (!should_rebuild_buckets(r) || r->n_rebuilt == 0) return 0;
    CHECK(r->n_rebuilt == r->n_params,
          "rebuilt parameter indices size is not same as original model parameters size."
          "Original model param size is: %d versus rebuilt params size of: %d",
          r->n_params, r->n_rebuilt);
    bool last_small = getenv("DDP_SET_LAST_BUCKET_CAP") &&
                      !strcmp(getenv("DDP_SET_LAST_BUCKET_CAP"), "1");
    int n = r->n_params;
    if (last_small)
        for (int k = 0; k < n / 2; k++) {
            int tmp = r->rebuilt[k];
            r->rebuilt[k] = r->rebuilt[n - 1 - k];
            r->rebuilt[n - 1 - k] = tmp;
        }
    int64_t *bytes = param_bytes(r);
    BucketLayout l;
    bucket_assign_by_size(bytes, n, r->rebuilt,
                          (int64_t[]){r->cfg.first_bucket_bytes_cap, r->cfg.bucket_bytes_cap}, 2,
                          &l);
    free(bytes);
    if (last_small) layout_reverse(&l);
    if (r->cfg.debug != DEBUG_OFF) {
        fprintf(stderr, "%d buckets rebuilt with size limits: ", l.n_buckets);
        for (int b = 0; b < l.n_buckets; b++)
            fprintf(stderr, "%s%lld", b ? ", " : "", (long long)l.limit[b]);
        fprintf(stderr, " bytes.\n");
    }
    if (sync_bucket_indices(r, &l)) {
        bucket_layout_free(&l);
        return -1;
    }
    r->has_rebuilt = true;
    r->n_rebuilt = 0;
    install_layout(r, &l, true);
    return 1;
}

// ---- prepare_for_backward and search_unused_parameters --------------------------------------
static void search_unused_parameters(Reducer *r, Tensor *const *outputs, int n_outputs) {
    bool *unused = xmalloc(sizeof(bool) * (size_t)r->n_params);
    tape_find_unreachable(r->tape, outputs, n_outputs, r->params, r->n_params, unused);
    r->n_unused = 0;
    for (int i = 0; i < r->n_params; i++)
        if (unused[i]) {
            r->unused[r->n_unused++] = i;
            if (r->cfg.debug == DEBUG_DETAIL)
                fprintf(stderr, "[Rank %d]: Parameter %s at index %d is marked as unused.\n",
                        pg_rank(r->pg), r->names[i], i);
        }
    free(unused);
    static bool warned; // TORCH_WARN_ONCE: once per process
    if (r->n_unused == 0 && !warned) {
        warned = true;
        fprintf(stderr,
                "[W reducer.c] Warning: find_unused_parameters=True was specified in DDP "
                "constructor, but did not find any unused parameters in the forward pass. This "
                "flag results in an extra traversal of the autograd graph every iteration,  "
                "which can adversely affect performance. If your model indeed never has any "
                "unused parameters in the forward pass, consider turning this flag off. Note "
                "that this warning may be a false positive if your model has flow control "
                "causing later iterations to have unused parameters. (function operator())\n");
    }
}

void reducer_prepare_for_backward(Reducer *r, Tensor *const *outputs, int n_outputs) {
    r->expect_autograd_hooks = true;
    // reset_bucket_counting
    r->next_bucket = 0;
    r->num_buckets_ready = 0;
    for (int b = 0; b < r->n_buckets; b++)
        r->buckets[b].pending = r->buckets[b].n_vars;
    if (r->cfg.static_graph)
        memcpy(r->hook_budget, r->hook_count, sizeof(int) * (size_t)r->n_params);
    r->has_marked_unused_parameters = false;
    memset(r->ready, 0, sizeof(bool) * (size_t)r->n_params);
    if (dynamic_graph_find_unused(r)) search_unused_parameters(r, outputs, n_outputs);
}
