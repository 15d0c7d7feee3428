/* teach.c -- the teaching mode's replay and its explanations (teach.h). The loader is
 * teach_load.c; the view is view_teach.c. The explanations follow ../shared/docs/ddp-reducer.md
 * §1.5 (rebuild), §2.2 (one iteration), §3 (find_unused_parameters) and §5 (hang or error). */
#include "tui/teach/teach.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base.h" // MIN, MAX, xcalloc, xmalloc
#include "probe/probe.h"  // ProbeKind, ProbeOp
#include "tui/views/facts.h"
#include "tui/model/paramgroup.h"
#include "tui/views/ui.h" // UiKey

static const int speeds[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000};
enum { N_SPEEDS = sizeof speeds / sizeof *speeds };

// ---- replay ------------------------------------------------------------------------------------

static void use_layout(TeachRank *tr, const ModelRank *rk, int layout, int n_params) {
    tr->layout = layout;
    free(tr->pending);
    tr->pending = NULL;
    tr->n_buckets = 0;
    for (int p = 0; p < n_params; p++)
        tr->bucket_of[p] = -1;
    if (layout < 0 || layout >= rk->n_layouts) return;
    const ModelLayout *l = &rk->layouts[layout];
    tr->n_buckets = l->n_buckets;
    tr->pending = xcalloc((size_t)MAX(l->n_buckets, 1), sizeof(int));
    for (int b = 0; b < l->n_buckets; b++) {
        tr->pending[b] = l->start[b + 1] - l->start[b];
        for (int k = l->start[b]; k < l->start[b + 1]; k++)
            if (l->vars[k] >= 0 && l->vars[k] < n_params) tr->bucket_of[l->vars[k]] = b;
    }
}

static int layout_of_generation(const ModelRank *rk, int generation) {
    for (int i = 0; i < rk->n_layouts; i++)
        if (rk->layouts[i].generation == generation) return i;
    return -1;
}

// Back to before the first event: every rank in the layout its first loaded iteration used.
static void reset(Teach *t, const Model *m) {
    for (int r = 0; r < t->world; r++) {
        TeachRank *tr = &t->ranks[r];
        const ModelRank *rk = &m->ranks[r];
        int *bucket_of = tr->bucket_of, *pending = tr->pending;
        uint8_t *marked = tr->marked;
        *tr = (TeachRank){.iter = -1, .bucket_of = bucket_of, .pending = pending, .marked = marked};
        memset(tr->marked, 0, (size_t)(t->n_params + 7) / 8 + 1);
        const ModelIter *it = model_rank_iter(rk, t->iter_lo);
        int layout = it ? it->layout : layout_of_generation(rk, 0);
        use_layout(tr, rk, layout, t->n_params);
    }
    t->pos = -1;
}

static void close_open(TeachRank *tr, const Teach *t, int64_t seq) {
    for (int i = 0; i < tr->n_open; i++)
        if (t->ev[tr->open[i]].c == seq) {
            tr->open[i] = tr->open[--tr->n_open];
            return;
        }
}

static void apply(Teach *t, const Model *m, int i) {
    const TeachEvent *e = &t->ev[i];
    if (e->rank < 0 || e->rank >= t->world) return;
    TeachRank *tr = &t->ranks[e->rank];
    const ModelRank *rk = &m->ranks[e->rank];
    tr->last_kind = e->kind;
    if (e->iter > tr->iter) tr->iter = e->iter, tr->n_images = tr->n_boxes = 0;
    switch (e->kind) {
    case PROBE_LAYOUT:
        use_layout(tr, rk, layout_of_generation(rk, e->a), t->n_params);
        break;
    case PROBE_BACKWARD_BEGIN:
        use_layout(tr, rk, tr->layout, t->n_params); // every bucket pending again
        memset(tr->marked, 0, (size_t)(t->n_params + 7) / 8 + 1);
        tr->next_bucket = tr->n_marked = tr->n_unused = 0;
        tr->in_backward = true, tr->finalized = tr->unfinished = false;
        break;
    case PROBE_MARK_READY:
        if (e->a >= 0 && e->a < t->n_params && !model_bit(tr->marked, e->a)) {
            tr->marked[e->a >> 3] |= (uint8_t)(1u << (e->a & 7));
            tr->n_marked++;
            tr->n_unused += e->c != 0;
            int b = tr->bucket_of[e->a];
            if (b >= 0) tr->pending[b]--;
        }
        break;
    case PROBE_COLL_LAUNCH:
        if (e->b >= 0) tr->next_bucket = MAX(tr->next_bucket, e->b + 1);
        if (tr->n_open < TEACH_MAX_OPEN) tr->open[tr->n_open++] = i;
        break;
    case PROBE_COLL_DONE:
        close_open(tr, t, e->c);
        break;
    case PROBE_FINALIZE:
        tr->finalized = true;
        break;
    case PROBE_BACKWARD_END:
        tr->in_backward = false;
        tr->unfinished = !tr->finalized;
        break;
    case PROBE_BATCH:
        tr->n_images++, tr->n_boxes += e->b;
        break;
    case PROBE_ERROR:
        tr->errored = true;
        break;
    default:
        break;
    }
}

void teach_init(Teach *t, const Model *m, TeachEvent *ev, int n, int64_t iter_lo, int64_t iter_hi) {
    *t = (Teach){.ev = ev, .n = n, .iter_lo = iter_lo, .iter_hi = iter_hi, .speed = 5};
    t->world = m->world, t->n_params = m->n_params;
    t->ranks = xcalloc((size_t)MAX(t->world, 1), sizeof(TeachRank));
    for (int r = 0; r < t->world; r++) {
        t->ranks[r].bucket_of = xmalloc((size_t)MAX(t->n_params, 1) * sizeof(int));
        t->ranks[r].marked = xcalloc((size_t)(t->n_params + 7) / 8 + 1, 1);
        if (strstr(m->ranks[r].args, "find_unused_parameters=true") ||
            strstr(m->ranks[r].args, "find_unused_parameters=True"))
            t->find_unused = true;
    }
    reset(t, m);
}

void teach_free(Teach *t) {
    for (int i = 0; i < t->n; i++)
        free(t->ev[i].text);
    free(t->ev);
    for (int r = 0; r < t->world; r++)
        free(t->ranks[r].bucket_of), free(t->ranks[r].pending), free(t->ranks[r].marked);
    free(t->ranks);
    *t = (Teach){0};
}

void teach_seek(Teach *t, const Model *m, int pos) {
    pos = MIN(MAX(pos, -1), t->n - 1);
    if (pos < t->pos) reset(t, m);
    while (t->pos < pos)
        apply(t, m, ++t->pos);
}

static bool is_hook(int kind) {
    return kind == PROBE_GRAD_READY || kind == PROBE_MARK_READY;
}

bool teach_key(Teach *t, const Model *m, int key) {
    int i;
    switch (key) {
    case ' ':
        teach_seek(t, m, t->pos + 1), t->playing = false;
        return true;
    case 'b':
        teach_seek(t, m, t->pos - 1), t->playing = false;
        return true;
    case 'p':
        t->playing = !t->playing, t->carry_ms = 0;
        return true;
    case 'n':
        for (i = t->pos + 1; i < t->n && is_hook(t->ev[i].kind); i++) {
        }
        teach_seek(t, m, i);
        return true;
    case '+':
    case '=':
        for (i = 0; i < N_SPEEDS - 1 && speeds[i] <= t->speed; i++) {
        }
        t->speed = speeds[i];
        return true;
    case '-':
    case '_':
        for (i = N_SPEEDS - 1; i > 0 && speeds[i] >= t->speed; i--) {
        }
        t->speed = speeds[i];
        return true;
    case 'g':
    case UI_KEY_HOME:
        teach_seek(t, m, -1);
        return true;
    case 'G':
    case UI_KEY_END:
        teach_seek(t, m, t->n - 1);
        return true;
    }
    return false;
}

bool teach_tick(Teach *t, const Model *m, int elapsed_ms) {
    if (!t->playing) return false;
    t->carry_ms += elapsed_ms;
    int steps = (int)((int64_t)t->carry_ms * t->speed / 1000);
    if (steps <= 0) return false;
    t->carry_ms -= (int)((int64_t)steps * 1000 / t->speed);
    int before = t->pos;
    teach_seek(t, m, t->pos + steps);
    if (t->pos >= t->n - 1) t->playing = false;
    return t->pos != before;
}

// ---- words
// ---------------------------------------------------------------------------------------

typedef struct {
    char *buf;
    size_t cap, len;
} Text;

__attribute__((format(printf, 2, 3))) static void say(Text *x, const char *fmt, ...) {
    if (x->len + 1 >= x->cap) return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(x->buf + x->len, x->cap - x->len, fmt, ap);
    va_end(ap);
    x->len = MIN(x->len + (size_t)MAX(w, 0), x->cap - 1);
}

static const char *pname(const Model *m, int p) {
    return p >= 0 && p < m->n_params && m->param_names ? m->param_names[p] : "?";
}

void teach_describe(const Teach *t, const Model *m, int i, char *buf, size_t n) {
    const TeachEvent *e = &t->ev[i];
    const char *kind = probe_kind_name(e->kind);
    char at[16];
    int len = snprintf(buf, n, "r%d it%lld %s %-13s ", e->rank, (long long)e->iter,
                       facts_fmt_at(e->t_ns - m->t0_ns, m->t1_ns - m->t0_ns, at, sizeof at),
                       kind ? kind : "?");
    size_t rest = n - (size_t)MIN(MAX(len, 0), (int)n - 1);
    char *p = buf + (n - rest);
    switch (e->kind) {
    case PROBE_GRAD_READY:
        snprintf(p, rest, "%s%s", pname(m, e->a), e->c ? "" : " (undefined grad)");
        break;
    case PROBE_MARK_READY:
        snprintf(p, rest, "%s -> bucket %d%s", pname(m, e->a), e->b, e->c ? " (unused)" : "");
        break;
    case PROBE_BUCKET_READY:
        snprintf(p, rest, "bucket %d", e->b);
        break;
    case PROBE_COLL_LAUNCH:
    case PROBE_COLL_DONE:
        if (e->b >= 0)
            snprintf(p, rest, "#%lld %s bucket %d", (long long)e->c, model_op_name(e->a), e->b);
        else
            snprintf(p, rest, "#%lld %s %s", (long long)e->c, model_op_name(e->a),
                     e->text ? e->text : "");
        if (e->kind == PROBE_COLL_DONE && !(e->flags & PROBE_FLAG_OK))
            strncat(p, " FAILED", rest - strlen(p) - 1);
        break;
    case PROBE_BATCH:
        snprintf(p, rest, "image %d: %d boxes", e->a, e->b);
        break;
    case PROBE_LAYOUT:
        snprintf(p, rest, "generation %d", e->a);
        break;
    case PROBE_ERROR:
    case PROBE_HANG:
        facts_first_sentence(e->text ? e->text : "", p, rest);
        break;
    default:
        p[0] = 0;
    }
}

// "P parameters: <patterns>" for bucket b of rank r's replayed state (those not yet marked).
static void say_pending(Text *x, const Teach *t, const Model *m, int r, int b) {
    const TeachRank *tr = &t->ranks[r];
    const ModelRank *rk = &m->ranks[r];
    if (tr->layout < 0 || b < 0 || b >= tr->n_buckets) return;
    const ModelLayout *l = &rk->layouts[tr->layout];
    int total = l->start[b + 1] - l->start[b], n = 0;
    int *idx = xcalloc((size_t)MAX(total, 1), sizeof(int));
    for (int k = l->start[b]; k < l->start[b + 1]; k++)
        if (!model_bit(tr->marked, l->vars[k])) idx[n++] = l->vars[k];
    ParamGroup *g;
    int ng = paramgroup_build(m->param_names, idx, n, &g);
    say(x, "%d parameter%s: ", n, n == 1 ? "" : "s");
    for (int i = 0; i < ng && i < 4; i++)
        say(x, "%s%s (%d)", i ? ", " : "", g[i].pattern, g[i].n);
    if (ng > 4) say(x, " and %d more groups", ng - 4);
    paramgroup_free(g, ng);
    free(idx);
}

// Ranks whose collective seq the Model says was launched by time t, and those that did not.
static void who_launched(const Model *m, int64_t seq, int64_t t, int *yes, int *n_yes, int *no,
                         int *n_no) {
    *n_yes = *n_no = 0;
    for (int r = 0; r < m->world; r++) {
        const ModelCollective *c = m->ranks[r].present ? model_rank_coll(&m->ranks[r], seq) : NULL;
        if (c && c->t_launch_ns <= t)
            yes[(*n_yes)++] = r;
        else
            no[(*n_no)++] = r;
    }
}

static const char *what_collective(const char *what) {
    if (!what) return "";
    if (!strcmp(what, "param_metadata"))
        return "DDP's construction checks that every rank has the same parameters (counts, then "
               "shapes).";
    if (!strcmp(what, "module_states"))
        return "DDP's construction broadcasts rank 0's parameters and buffers, so that every "
               "replica starts identical.";
    if (!strcmp(what, "buffers"))
        return "broadcast_buffers: at every forward rank 0's buffers (BatchNorm running "
               "statistics) are broadcast.";
    if (!strcmp(what, "bucket_indices") || !strcmp(what, "bucket_sizes"))
        return "The bucket rebuild: rank 0 broadcasts its new layout, and every rank adopts it, so "
               "that all ranks "
               "reduce the same buckets in the same order.";
    if (!strcmp(what, "local_used_map"))
        return "find_unused_parameters: after the last bucket, the bitmap of parameters used on "
               "each rank is summed "
               "over the ranks; a parameter no rank used keeps its .grad untouched.";
    return "";
}

static void explain_event(Text *x, const Teach *t, const Model *m) {
    const TeachEvent *e = &t->ev[t->pos];
    const TeachRank *tr = &t->ranks[e->rank];
    int r = e->rank;
    switch (e->kind) {
    case PROBE_FORWARD_BEGIN:
        say(x,
            "Rank %d begins the forward of iteration %lld. DDP's _pre_forward first checks that "
            "the previous "
            "iteration's reduction finished. ",
            r, (long long)e->iter);
        if (tr->unfinished)
            say(x,
                "It did not: bucket %d and the ones after it were never launched, so this forward "
                "raises "
                "\"Expected to have finished reduction in the prior iteration before starting a "
                "new one\". The "
                "check is local: the rank that errors is the one whose gradients went missing, one "
                "iteration late.",
                tr->next_bucket);
        else
            say(x, "Then, once in the run (after the first iteration, unless "
                   "find_unused_parameters), it rebuilds the "
                   "buckets in the order gradients became ready, and broadcasts rank 0's buffers.");
        break;
    case PROBE_FORWARD_END:
        say(x, "The forward is done. ");
        if (t->find_unused)
            say(x, "With find_unused_parameters=True, DDP now walks the autograd graph from the "
                   "outputs; every parameter "
                   "it cannot reach is marked ready as unused at the first hook, so that no bucket "
                   "waits for it. The cost: "
                   "this traversal every iteration and one more allreduce (the used-parameter "
                   "bitmap).");
        else
            say(x, "find_unused_parameters is off, so DDP expects a gradient for every parameter. "
                   "With "
                   "find_unused_parameters=True it would now search the graph from the outputs and "
                   "mark the parameters "
                   "it cannot reach as ready (with zero gradients), so that their buckets need not "
                   "wait for them.");
        break;
    case PROBE_BACKWARD_BEGIN:
        say(x,
            "Backward begins on rank %d. Each parameter's hook fires when autograd has its "
            "gradient and marks it "
            "ready in its bucket; a bucket whose parameters are all ready launches its allreduce, "
            "but only in index "
            "order: bucket 0 first. This layout has %d bucket%s.",
            r, tr->n_buckets, tr->n_buckets == 1 ? "" : "s");
        break;
    case PROBE_GRAD_READY:
        say(x, "The gradient of %s is ready (hook %d of this backward)%s. DDP marks it ready next.",
            pname(m, e->a), e->b + 1, e->c ? "" : ", but undefined: it did not reach the loss");
        break;
    case PROBE_MARK_READY: {
        int b = tr->bucket_of[e->a >= 0 && e->a < t->n_params ? e->a : 0];
        say(x, "%s is marked ready%s in bucket %d", pname(m, e->a),
            e->c ? " as unused (find_unused_parameters: its "
                   "slot stays zero)"
                 : "",
            e->b);
        if (b >= 0 && b < tr->n_buckets) {
            const ModelLayout *l = &m->ranks[r].layouts[tr->layout];
            int total = l->start[b + 1] - l->start[b];
            say(x, ", which now has %d of %d ready.", total - tr->pending[b], total);
            if (tr->pending[b] > 0 && tr->pending[b] <= 8) {
                say(x, " Still pending: ");
                say_pending(x, t, m, r, b);
                say(x, ".");
            }
            if (b > tr->next_bucket)
                say(x,
                    " Even complete, it cannot launch before bucket %d: buckets launch strictly in "
                    "index order.",
                    tr->next_bucket);
        } else
            say(x, ".");
        break;
    }
    case PROBE_BUCKET_READY:
        if (e->b > tr->next_bucket) {
            say(x,
                "Bucket %d has all its gradients but cannot launch yet: buckets launch strictly in "
                "index order, and "
                "bucket %d has not launched: it still waits for ",
                e->b, tr->next_bucket);
            say_pending(x, t, m, r, tr->next_bucket);
            say(x, ". Every later bucket waits with it.");
        } else {
            say(x,
                "Bucket %d is complete and every bucket before it has launched, so its allreduce "
                "launches now.",
                e->b);
        }
        break;
    case PROBE_COLL_LAUNCH: {
        int yes[m->world > 0 ? m->world : 1], no[m->world > 0 ? m->world : 1], ny, nn;
        who_launched(m, e->c, e->t_ns, yes, &ny, no, &nn);
        char yl[64], nl[64];
        if (e->b >= 0)
            say(x,
                "Rank %d launches allreduce #%lld of bucket %d (%lld elements), asynchronously: "
                "backward goes on "
                "meanwhile. ",
                r, (long long)e->c, e->b, (long long)e->d);
        else
            say(x, "Rank %d enters %s #%lld (%s). %s ", r, model_op_name(e->a), (long long)e->c,
                e->text ? e->text : "", what_collective(e->text));
        say(x,
            "Collectives are matched by their order on the group, not by name: every rank must "
            "issue #%lld the same "
            "way. Launched so far by rank%s %s",
            (long long)e->c, ny == 1 ? "" : "s", facts_fmt_ranks(yes, ny, yl, sizeof yl));
        if (nn)
            say(x, "; not yet by %s.", facts_fmt_ranks(no, nn, nl, sizeof nl));
        else
            say(x, ".");
        break;
    }
    case PROBE_COLL_DONE:
        if (e->flags & PROBE_FLAG_OK)
            say(x, "Collective #%lld completed on rank %d: every rank contributed.",
                (long long)e->c, r);
        else
            say(x, "Collective #%lld FAILED on rank %d (a peer left or timed out).",
                (long long)e->c, r);
        break;
    case PROBE_FINALIZE:
        say(x,
            "Every bucket of rank %d launched and completed: finalize copies the averaged "
            "gradients back into .grad, "
            "so the optimizer sees the same gradients on every rank.",
            r);
        break;
    case PROBE_BACKWARD_END:
        if (tr->unfinished && tr->next_bucket < tr->n_buckets) {
            say(x,
                "Backward is over on rank %d, but bucket %d and every bucket after it never "
                "launched. Bucket %d waits "
                "for ",
                r, tr->next_bucket, tr->next_bucket);
            say_pending(x, t, m, r, tr->next_bucket);
            say(x,
                ", which got no gradient on this rank%s. DDP does not notice now: the error comes "
                "at the next "
                "forward. Meanwhile every rank that launched bucket %d's allreduce waits for this "
                "rank, which will "
                "never issue it.",
                tr->n_images && !tr->n_boxes ? " (its batch had no ground-truth boxes)" : "",
                tr->next_bucket);
            if (!t->find_unused)
                say(x, " With find_unused_parameters=True they would have been marked ready as "
                       "unused at the first hook "
                       "and the bucket would have launched (with zeros for them).");
        } else
            say(x, "Backward is over on rank %d and its gradients are averaged.", r);
        break;
    case PROBE_OPTIM_STEP:
        say(x, "Rank %d steps its optimizer%s.", r,
            tr->unfinished ? " on gradients that were never averaged: the "
                             "replicas start to differ"
                           : " with the averaged gradients: every replica stays identical");
        break;
    case PROBE_BATCH:
        say(x, "Rank %d's batch, image %d: %d ground-truth box%s.", r, e->a, e->b,
            e->b == 1 ? "" : "es");
        if (!e->b)
            say(x, " No box at all: RT-DETR's box losses (L1, GIoU) become constants, so the "
                   "box-regression heads get no "
                   "gradient on this rank in this iteration, and their bucket will wait for them.");
        break;
    case PROBE_LAYOUT: {
        const ModelRank *rk = &m->ranks[r];
        int now = tr->layout, before = layout_of_generation(rk, e->a - 1);
        if (now >= 0 && before >= 0)
            say(x,
                "The bucket rebuild (generation %d): DDP rebuilds the buckets once, from the order "
                "in which gradients "
                "became ready in the first iteration: %d bucket%s before, %d now, filled up to the "
                "size caps. Rank 0's "
                "layout is the one every rank uses.",
                e->a, rk->layouts[before].n_buckets, rk->layouts[before].n_buckets == 1 ? "" : "s",
                rk->layouts[now].n_buckets);
        else
            say(x, "Bucket layout generation %d takes effect.", e->a);
        break;
    }
    case PROBE_ERROR:
        say(x, "Rank %d raises: %s", r, e->text ? e->text : "(no text)");
        break;
    case PROBE_HANG:
        say(x, "The launcher's watchdog saw every rank waiting: %s", e->text ? e->text : "");
        break;
    default:
        say(x, "%s", probe_kind_name(e->kind) ? probe_kind_name(e->kind) : "?");
        break;
    }
}

// One line on what rank r is doing after the current event, and if it is blocked, on whom.
static void explain_rank(Text *x, const Teach *t, const Model *m, int r, int64_t t_ns) {
    const TeachRank *tr = &t->ranks[r];
    say(x, "\nrank %d: ", r);
    if (!tr->last_kind) {
        say(x, "nothing yet");
        return;
    }
    if (tr->errored) {
        say(x, "errored at iteration %lld", (long long)tr->iter);
        return;
    }
    if (tr->n_open) { // the oldest open collective
        const TeachEvent *o = &t->ev[tr->open[0]];
        for (int i = 1; i < tr->n_open; i++)
            if (t->ev[tr->open[i]].c < o->c) o = &t->ev[tr->open[i]];
        int yes[m->world > 0 ? m->world : 1], no[m->world > 0 ? m->world : 1], ny, nn;
        who_launched(m, o->c, t_ns, yes, &ny, no, &nn);
        if (o->b >= 0)
            say(x, "allreduce #%lld (bucket %d) in flight", (long long)o->c, o->b);
        else
            say(x, "in %s #%lld (%s)", model_op_name(o->a), (long long)o->c,
                o->text ? o->text : "");
        if (nn) {
            char nl[64];
            say(x, ", waiting for rank%s %s, which ha%s not issued it", nn == 1 ? "" : "s",
                facts_fmt_ranks(no, nn, nl, sizeof nl), nn == 1 ? "s" : "ve");
            const TeachRank *h = &t->ranks[no[0]];
            if (h->errored || (h->unfinished && h->iter == o->iter))
                say(x, " and never will (bucket %d there waits for gradients that never come)",
                    h->next_bucket);
        }
        return;
    }
    if (tr->in_backward && tr->next_bucket < tr->n_buckets) {
        const ModelLayout *l = &m->ranks[r].layouts[tr->layout];
        int b = tr->next_bucket, total = l->start[b + 1] - l->start[b];
        say(x,
            "backward of iteration %lld, %d/%d parameters marked; next to launch: bucket %d "
            "(%d/%d ready)",
            (long long)tr->iter, tr->n_marked, t->n_params, b, total - tr->pending[b], total);
        return;
    }
    if (tr->unfinished) {
        say(x, "iteration %lld, backward ended with bucket %d never launched", (long long)tr->iter,
            tr->next_bucket);
        return;
    }
    const char *k = probe_kind_name(tr->last_kind);
    say(x, "iteration %lld, after %s", (long long)tr->iter, k ? k : "?");
}

void teach_explain(const Teach *t, const Model *m, char *buf, size_t n) {
    Text x = {buf, n, 0};
    buf[0] = 0;
    if (t->pos < 0) {
        say(&x,
            "%d events of %d rank%s, iterations %lld to %lld. Space steps to the first event; p "
            "plays, + and - change "
            "the speed, n skips the gradient hooks, b steps back.",
            t->n, t->world, t->world == 1 ? "" : "s", (long long)t->iter_lo, (long long)t->iter_hi);
        return;
    }
    explain_event(&x, t, m);
    say(&x, "\n\nNow:");
    for (int r = 0; r < t->world && x.len + 1 < x.cap; r++)
        explain_rank(&x, t, m, r, t->ev[t->pos].t_ns);
}
