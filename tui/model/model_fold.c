/* model_fold.c -- one event folded into a ModelRank (model_fold.h): iterations and their
 * bitmaps and bucket times, layouts from LAYOUT records, collectives by sequence number, GPU
 * records with interned kernel names, and the names of the state words (model.h). */
#include "tui/model/model_fold.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/base.h" // xcalloc, xrealloc, xstrdup, MIN, MAX
#include "probe/probe.h"  // ProbeKind, ProbePhase, ProbeOp

const char *model_op_name(int op) {
    static const char *names[] = {"?", "allreduce", "broadcast", "allgather", "barrier"};
    return op >= 1 && op <= 4 ? names[op] : names[0];
}

const char *model_phase_name(int phase) {
    static const char *names[] = {"idle",       "startup", "data",     "forward",    "backward",
                                  "collective", "optim",   "validate", "checkpoint", "done"};
    return phase >= 0 && phase <= PROBE_PHASE_DONE ? names[phase] : "?";
}

const char *model_state_name(RankState state) {
    switch (state) {
    case RANK_RUNNING:
        return "running";
    case RANK_WAITING:
        return "waiting";
    case RANK_FINISHED:
        return "finished";
    case RANK_ERRORED:
        return "errored";
    case RANK_DEAD:
        return "dead";
    }
    return "?";
}

// ---- iterations ----------------------------------------------------------------------------

void fold_iter_free(ModelIter *it) {
    free(it->grad_ready);
    free(it->marked);
    free(it->marked_unused);
    free(it->bucket_ready);
    free(it->bucket_launch_ns);
    free(it->bucket_done_ns);
    free(it->bucket_seq);
    free(it->bucket_ready_ns);
}

// (Re)allocates it's bucket arrays for layout index li (zeroed; old values kept where the
// bucket exists in both).
static void iter_set_layout(const ModelRank *r, ModelIter *it, int li) {
    int old_n = it->layout >= 0 && it->bucket_ready ? r->layouts[it->layout].n_buckets : 0;
    it->layout = li;
    int n = li >= 0 ? r->layouts[li].n_buckets : 0;
    if (n == old_n) return;
    size_t keep = (size_t)MIN(n, old_n);
#define RESIZE(field, type)                                                                        \
    do {                                                                                           \
        type *fresh = n ? xcalloc((size_t)n, sizeof(type)) : NULL;                                 \
        if (keep) memcpy(fresh, it->field, keep * sizeof(type));                                   \
        free(it->field);                                                                           \
        it->field = fresh;                                                                         \
    } while (0)
    RESIZE(bucket_ready, int);
    RESIZE(bucket_launch_ns, int64_t);
    RESIZE(bucket_done_ns, int64_t);
    RESIZE(bucket_seq, int64_t);
    RESIZE(bucket_ready_ns, int64_t);
#undef RESIZE
}

// The layout in effect at iteration iter: the newest one recorded at or before it.
static int layout_at(const ModelRank *r, int64_t iter) {
    int li = -1;
    for (int k = 0; k < r->n_layouts; k++)
        if (r->layouts[k].first_iter <= iter) li = k;
    return li;
}

// The ModelIter of iteration iter, created (in order) when absent.
ModelIter *fold_iter(ModelRank *r, RankLoader *L, int64_t iter) {
    if (L->cur >= 0 && r->iters[L->cur].iter == iter) return &r->iters[L->cur];
    int lo = 0, hi = r->n_iters; // first index with iters[i].iter >= iter
    if (hi > 0 && r->iters[hi - 1].iter < iter) lo = hi;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (r->iters[mid].iter < iter)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < r->n_iters && r->iters[lo].iter == iter) return &r->iters[L->cur = lo];
    r->iters = xrealloc(r->iters, sizeof(ModelIter) * (size_t)(r->n_iters + 1));
    memmove(&r->iters[lo + 1], &r->iters[lo], sizeof(ModelIter) * (size_t)(r->n_iters - lo));
    r->n_iters++;
    ModelIter *it = &r->iters[lo];
    *it = (ModelIter){.iter = iter, .layout = -1};
    if (L->bitmap_bytes) {
        it->grad_ready = xcalloc((size_t)L->bitmap_bytes, 1);
        it->marked = xcalloc((size_t)L->bitmap_bytes, 1);
        it->marked_unused = xcalloc((size_t)L->bitmap_bytes, 1);
    }
    iter_set_layout(r, it, layout_at(r, iter));
    L->cur = lo;
    return it;
}

// Grows every iteration's bitmaps to bytes (a live trace whose params arrived late).
void fold_grow_bitmaps(ModelRank *r, RankLoader *L, int bytes) {
    if (bytes <= L->bitmap_bytes) return;
    for (int i = 0; i < r->n_iters; i++) {
        uint8_t **maps[] = {&r->iters[i].grad_ready, &r->iters[i].marked,
                            &r->iters[i].marked_unused};
        for (int k = 0; k < 3; k++) {
            uint8_t *fresh = xcalloc((size_t)bytes, 1);
            if (*maps[k]) memcpy(fresh, *maps[k], (size_t)L->bitmap_bytes);
            free(*maps[k]);
            *maps[k] = fresh;
        }
    }
    L->bitmap_bytes = bytes;
}

const ModelIter *model_rank_iter(const ModelRank *rk, int64_t iter) {
    int lo = 0, hi = rk->n_iters;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (rk->iters[mid].iter < iter)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < rk->n_iters && rk->iters[lo].iter == iter ? &rk->iters[lo] : NULL;
}

const ModelIter *model_iter(const Model *m, int r, int64_t iter) {
    return r >= 0 && r < m->world ? model_rank_iter(&m->ranks[r], iter) : NULL;
}

const ModelCollective *model_rank_coll(const ModelRank *rk, int64_t seq) {
    int lo = 0, hi = rk->n_colls;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (rk->colls[mid].seq < seq)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < rk->n_colls && rk->colls[lo].seq == seq ? &rk->colls[lo] : NULL;
}

const ModelLayout *model_rank_layout(const ModelRank *rk, const ModelIter *it) {
    return it && it->layout >= 0 && it->layout < rk->n_layouts ? &rk->layouts[it->layout] : NULL;
}

// ---- layouts -------------------------------------------------------------------------------

// Turns the LAYOUT records read so far into a ModelLayout (they end at the first other event).
void fold_finish_layout(ModelRank *r, RankLoader *L) {
    if (L->building < 0) return;
    int n_buckets = 0;
    for (int k = 0; k < L->n_b; k++)
        n_buckets = MAX(n_buckets, L->b_bucket[k] + 1);
    r->layouts = xrealloc(r->layouts, sizeof(ModelLayout) * (size_t)(r->n_layouts + 1));
    ModelLayout *l = &r->layouts[r->n_layouts++];
    *l = (ModelLayout){
        .generation = L->building, .first_iter = L->building_iter, .n_buckets = n_buckets};
    l->start = xcalloc((size_t)n_buckets + 1, sizeof(int));
    l->vars = xcalloc((size_t)MAX(L->n_b, 1), sizeof(int));
    l->numel = xcalloc((size_t)MAX(n_buckets, 1), sizeof(int64_t));
    for (int k = 0; k < L->n_b; k++)
        l->start[L->b_bucket[k] + 1]++;
    for (int b = 0; b < n_buckets; b++)
        l->start[b + 1] += l->start[b];
    int *fill = xcalloc((size_t)n_buckets + 1, sizeof(int));
    for (int k = 0; k < L->n_b; k++) { // records come bucket by bucket, so this keeps their order
        int b = L->b_bucket[k], v = L->b_var[k];
        l->vars[l->start[b] + fill[b]++] = v;
        if (v >= 0 && v < r->n_params) l->numel[b] += L->param_numel[v];
    }
    free(fill);
    L->building = -1;
    L->n_b = 0;
    // The iteration of a rebuild already began (its forward rebuilt the buckets): it and any
    // later one switch to the new layout.
    int li = r->n_layouts - 1;
    for (int i = 0; i < r->n_iters; i++)
        if (r->iters[i].iter >= l->first_iter && r->iters[i].layout < li)
            iter_set_layout(r, &r->iters[i], li);
}

static void add_layout_record(ModelRank *r, RankLoader *L, int64_t iter, int gen, int bucket,
                              int var) {
    if (L->building != gen) {
        fold_finish_layout(r, L);
        L->building = gen;
        L->building_iter = iter;
    }
    if (bucket < 0 || bucket > 1 << 20) return; // not a bucket: a foreign or damaged record
    if (L->n_b == L->cap_b) {
        L->cap_b = L->cap_b ? 2 * L->cap_b : 1024;
        L->b_bucket = xrealloc(L->b_bucket, sizeof(int) * (size_t)L->cap_b);
        L->b_var = xrealloc(L->b_var, sizeof(int) * (size_t)L->cap_b);
    }
    L->b_bucket[L->n_b] = bucket;
    L->b_var[L->n_b++] = var;
}

// ---- collectives ---------------------------------------------------------------------------

static ModelCollective *coll_by_seq(ModelRank *r, RankLoader *L, int64_t seq) {
    if (seq <= 0 || seq >= L->cap_seq || !L->coll_by_seq[seq]) return NULL;
    return &r->colls[L->coll_by_seq[seq] - 1];
}

static void add_collective(ModelRank *r, RankLoader *L, int64_t t, int64_t iter, int op, int bucket,
                           int64_t seq, int64_t numel, const char *what) {
    r->colls = xrealloc(r->colls, sizeof(ModelCollective) * (size_t)(r->n_colls + 1));
    ModelCollective *c = &r->colls[r->n_colls++];
    *c = (ModelCollective){
        .seq = seq, .iter = iter, .op = op, .bucket = bucket, .numel = numel, .t_launch_ns = t};
    snprintf(c->what, sizeof c->what, "%s", what ? what : "");
    if (seq <= 0 || seq > (int64_t)1 << 30) return;
    if (seq >= L->cap_seq) {
        int64_t cap = MAX(2 * L->cap_seq, seq + 1024);
        L->coll_by_seq = xrealloc(L->coll_by_seq, sizeof(int) * (size_t)cap);
        memset(L->coll_by_seq + L->cap_seq, 0, sizeof(int) * (size_t)(cap - L->cap_seq));
        L->cap_seq = cap;
    }
    L->coll_by_seq[seq] = r->n_colls;
}

// ---- GPU records ---------------------------------------------------------------------------

static uint64_t hash_bytes(const char *s) {
    uint64_t h = 1469598103934665603ull; // FNV-1a
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int intern_name(ModelRank *r, RankLoader *L, const char *name) {
    if (2 * (r->n_gpu_names + 1) > L->cap_names) { // grow and rehash
        int cap = L->cap_names ? 2 * L->cap_names : 64;
        int *slots = xcalloc((size_t)cap, sizeof(int));
        for (int i = 0; i < r->n_gpu_names; i++) {
            uint64_t h = hash_bytes(r->gpu_names[i]) & (uint64_t)(cap - 1);
            while (slots[h])
                h = (h + 1) & (uint64_t)(cap - 1);
            slots[h] = i + 1;
        }
        free(L->name_slots);
        L->name_slots = slots;
        L->cap_names = cap;
    }
    uint64_t h = hash_bytes(name) & (uint64_t)(L->cap_names - 1);
    for (; L->name_slots[h]; h = (h + 1) & (uint64_t)(L->cap_names - 1))
        if (!strcmp(r->gpu_names[L->name_slots[h] - 1], name)) return L->name_slots[h] - 1;
    r->gpu_names = xrealloc(r->gpu_names, sizeof(char *) * (size_t)(r->n_gpu_names + 1));
    r->gpu_names[r->n_gpu_names] = xstrdup(name);
    L->name_slots[h] = ++r->n_gpu_names;
    return r->n_gpu_names - 1;
}

static int64_t *corr_slot(RankLoader *L, int64_t key) {
    uint64_t h = ((uint64_t)key * 11400714819323198485ull) & (uint64_t)(L->cap_corr - 1);
    while (L->corr_keys[h] && L->corr_keys[h] != key)
        h = (h + 1) & (uint64_t)(L->cap_corr - 1);
    return &L->corr_keys[h];
}

static void add_correlation(RankLoader *L, int64_t corr, int64_t seq) {
    if (corr == 0) return;
    if (2 * (L->n_corr + 1) > L->cap_corr) {
        int64_t *keys = L->corr_keys, *seqs = L->corr_seqs;
        int old = L->cap_corr;
        L->cap_corr = old ? 2 * old : 256;
        L->corr_keys = xcalloc((size_t)L->cap_corr, sizeof(int64_t));
        L->corr_seqs = xcalloc((size_t)L->cap_corr, sizeof(int64_t));
        for (int i = 0; i < old; i++)
            if (keys[i]) {
                int64_t *k = corr_slot(L, keys[i]);
                *k = keys[i];
                L->corr_seqs[k - L->corr_keys] = seqs[i];
            }
        free(keys);
        free(seqs);
    }
    int64_t *k = corr_slot(L, corr);
    if (!*k) L->n_corr++;
    *k = corr;
    L->corr_seqs[k - L->corr_keys] = seq;
}

static void add_gpu(ModelRank *r, RankLoader *L, int kind, int a, int b, int64_t corr, int64_t c,
                    int64_t d, const char *text) {
    r->gpu = xrealloc(r->gpu, sizeof(ModelGpu) * (size_t)(r->n_gpu + 1));
    ModelGpu *g = &r->gpu[r->n_gpu++];
    *g = (ModelGpu){.kind = kind,
                    .device = a,
                    .stream = b,
                    .t_start_ns = c,
                    .t_end_ns = d,
                    .correlation = corr,
                    .name = -1};
    if (kind == PROBE_GPU_KERNEL)
        g->name = intern_name(r, L, text ? text : "?");
    else if (text)
        g->bytes = atoll(text);
    if (L->cap_corr && corr) {
        int64_t *k = corr_slot(L, corr);
        if (*k) g->coll_seq = L->corr_seqs[k - L->corr_keys];
    }
}

// ---- one event -----------------------------------------------------------------------------

// The phase a trainer event implies (-1: it says nothing about the phase).
static int implied_phase(int kind) {
    switch (kind) {
    case PROBE_FORWARD_BEGIN:
        return PROBE_PHASE_FORWARD;
    case PROBE_BACKWARD_BEGIN:
    case PROBE_GRAD_READY:
    case PROBE_MARK_READY:
    case PROBE_BUCKET_READY:
    case PROBE_FINALIZE:
        return PROBE_PHASE_BACKWARD;
    case PROBE_OPTIM_STEP:
        return PROBE_PHASE_OPTIM;
    default:
        return -1;
    }
}

// Parameter p (checked by the caller) marked ready in bucket b: a MARK_READY row, or a
// GRAD_READY row whose hook marked it (PROBE_FLAG_MARKED, the bucket in d).
static void fold_mark(const ModelRank *r, ModelIter *it, int p, int64_t b, bool unused) {
    if (!model_bit(it->marked, p)) {
        fold_set_bit(it->marked, p);
        it->n_marked++;
    }
    if (unused && !model_bit(it->marked_unused, p)) {
        fold_set_bit(it->marked_unused, p);
        it->n_marked_unused++;
    }
    int n_buckets = it->layout >= 0 ? r->layouts[it->layout].n_buckets : 0;
    if (b >= 0 && b < n_buckets) it->bucket_ready[b]++;
}

void fold_event(ModelRank *r, RankLoader *L, const Event *e) {
    if (e->kind != PROBE_LAYOUT) fold_finish_layout(r, L);
    switch (e->kind) { // GPU records: iter is CUPTI's correlation id, not an iteration
    case PROBE_GPU_KERNEL:
    case PROBE_GPU_MEMCPY:
    case PROBE_GPU_MEMSET:
        add_gpu(r, L, e->kind, e->a, e->b, e->iter, e->c, e->d, e->text);
        return;
    case PROBE_GPU_CORRELATION:
        add_correlation(L, e->a, e->c);
        return;
    default:
        if (e->kind < PROBE_META || e->kind >= PROBE_KIND_END) return; // a kind newer than us
    }
    if (e->kind == PROBE_HEARTBEAT) {
        L->hb_phase = e->a;
        L->hb_phase_t = e->d;
        r->last_heartbeat_ns = MAX(r->last_heartbeat_ns, e->t);
        return;
    }
    if (e->kind == PROBE_HANG) {
        if (!r->hang) {
            r->hang = xstrdup(e->text ? e->text : "");
            r->hang_rank = e->a;
            r->hang_iter = e->iter;
        }
        return;
    }
    r->last_event_ns = MAX(r->last_event_ns, e->t);
    if (e->seq > L->newest_seq) { // the newest trainer event says what the rank does now
        L->newest_seq = e->seq;
        L->last_trainer_t = e->t;
        L->last_kind = e->kind;
        int ph = implied_phase(e->kind);
        if (ph >= 0 && ph != L->ev_phase) {
            L->ev_phase = ph;
            L->ev_phase_t = e->t;
        }
    }
    switch (e->kind) {
    case PROBE_META:
    case PROBE_PARAM:
    case PROBE_TEXT:
        return; // tables meta and params
    case PROBE_LAYOUT:
        add_layout_record(r, L, e->iter, e->a, e->b, (int)e->c);
        return;
    case PROBE_ERROR:
        if (!r->error) {
            r->error = xstrdup(e->text ? e->text : "");
            r->error_iter = e->iter;
        }
        r->n_errors++;
        break;
    case PROBE_COLL_LAUNCH:
        add_collective(r, L, e->t, e->iter, e->a, e->b, e->c, e->d, e->text);
        break;
    case PROBE_COLL_DONE: {
        ModelCollective *c = coll_by_seq(r, L, e->c);
        if (c && !c->t_done_ns) {
            c->t_done_ns = e->t;
            c->ok = e->flags & PROBE_FLAG_OK;
        }
        break;
    }
    default:
        break;
    }
    if (e->iter < 0) return; // construction: no iteration
    ModelIter *it = fold_iter(r, L, e->iter);
    if (!it->t_first_ns) it->t_first_ns = e->t;
    if (!it->seq_first || e->seq < it->seq_first) it->seq_first = e->seq;
    it->t_last_ns = MAX(it->t_last_ns, e->t);
    int n_buckets = it->layout >= 0 ? r->layouts[it->layout].n_buckets : 0;
    bool param_ok = e->a >= 0 && e->a < L->bitmap_bytes * 8 && e->a < r->n_params;
    bool bucket_ok = e->b >= 0 && e->b < n_buckets;
    switch (e->kind) {
    case PROBE_FORWARD_BEGIN:
        if (!it->t_forward_ns) it->t_forward_ns = e->t;
        if (!it->seq_forward) it->seq_forward = e->seq;
        break;
    case PROBE_FORWARD_END:
        it->t_forward_end_ns = e->t;
        break;
    case PROBE_BACKWARD_BEGIN:
        if (!it->t_backward_ns) it->t_backward_ns = e->t;
        break;
    case PROBE_BACKWARD_END:
        it->t_backward_end_ns = e->t;
        break;
    case PROBE_OPTIM_STEP:
        it->t_optim_ns = e->t;
        break;
    case PROBE_FINALIZE:
        it->finalized = true;
        it->t_finalize_ns = e->t;
        break;
    case PROBE_BATCH:
        it->n_images++;
        it->n_boxes += e->b;
        break;
    case PROBE_GRAD_READY:
        if (!param_ok) break;
        if (!e->c)
            it->n_grad_undefined++;
        else if (!model_bit(it->grad_ready, e->a)) {
            fold_set_bit(it->grad_ready, e->a);
            it->n_grad_ready++;
        }
        if (e->flags & PROBE_FLAG_MARKED) fold_mark(r, it, e->a, e->d, false);
        break;
    case PROBE_MARK_READY:
        if (param_ok) fold_mark(r, it, e->a, e->b, e->c != 0);
        break;
    case PROBE_BUCKET_READY:
        if (bucket_ok && !it->bucket_ready_ns[e->b]) it->bucket_ready_ns[e->b] = e->t;
        break;
    case PROBE_COLL_LAUNCH:
        if (bucket_ok && e->text && !strcmp(e->text, "bucket")) {
            it->bucket_launch_ns[e->b] = e->t;
            it->bucket_seq[e->b] = e->c;
        }
        break;
    case PROBE_COLL_DONE:
        if (bucket_ok && (e->flags & PROBE_FLAG_OK) && it->bucket_seq[e->b] == e->c)
            it->bucket_done_ns[e->b] = e->t;
        break;
    default:
        break;
    }
}
