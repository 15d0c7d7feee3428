/* explain_rules.c -- a log's DDP errors as findings (explain_rules.h): root causes first (the
 * unfinished reduction, marked twice, a changed static graph, the construction checks, DETAIL's
 * collective mismatch), then what follows from them on other ranks (Gloo's timeout and closed
 * connection, the NCCL watchdog, DETAIL's monitored barrier). The texts say what the log shows,
 * what it means in the reducer (../shared/docs/ddp-reducer.md §2-§6), the likely causes ranked
 * and the diagnosis' fixes; nothing the log does not hold is stated as fact. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base.h" // xcalloc, xstrdup, MAX
#include "tui/postmortem/explain_rules.h"

const char *explain_rank(int rank, char *buf, size_t len) {
    if (rank < 0)
        snprintf(buf, len, "a rank");
    else
        snprintf(buf, len, "rank %d", rank);
    return buf;
}

// who: "rank 0", "ranks 0 and 1" ("a rank" when none is known); f gets the ranks.
static void who_text(Finding *f, const int *ranks, int n, char *who, size_t len) {
    for (int k = 0; k < n; k++)
        if (ranks[k] >= 0) add_rank(f, ranks[k]);
    if (f->n_ranks)
        ranks_text(who, len, f->ranks, f->n_ranks);
    else
        snprintf(who, len, "a rank");
}

static bool names_like(const ExplainLog *log, const ErrorParams *p, const char *part) {
    return log->m.param_names && names_contain(&log->m, p->params, p->n, part);
}

// RT-DETR's box heads (Ultralytics' names): what a batch without boxes leaves without gradient.
static bool box_heads(const ExplainLog *log, const ErrorParams *p) {
    return names_like(log, p, "bbox_head") || names_like(log, p, "denoising_class_embed");
}

// The finding's texts from what was written: the causes NULL when there are none.
static void finish(Finding *f, Str *ex, Str *ca, Str *fx) {
    f->explanation = str_take(ex);
    f->causes = ca && ca->s ? str_take(ca) : NULL;
    f->fixes = str_take(fx);
}

static void take_params(Finding *f, const ErrorParams *p) {
    f->n_params = p->n;
    f->params = p->n ? xcalloc((size_t)p->n, sizeof(int)) : NULL;
    if (p->n) memcpy(f->params, p->params, sizeof(int) * (size_t)p->n);
}

// "12 parameters", "at least 9 parameters", "its parameters" (count unknown).
static void count_text(const ErrorParams *p, char *out, size_t len) {
    if (!p->n)
        snprintf(out, len, "some parameters");
    else
        snprintf(out, len, "%s%d %s", p->cut ? "at least " : "", p->n,
                 plural(p->n, "parameter", "parameters"));
}

// What the log says about the error's list: names, indices, where it was cut.
static void list_text(Str *ex, const ExplainLog *log, const LogError *e, const ErrorParams *p) {
    if (e->names.present && e->indices.present)
        str_addf(ex,
                 "It names them and gives their indices (TORCH_DISTRIBUTED_DEBUG=INFO or DETAIL)");
    else if (e->names.present)
        str_addf(ex, "It names them (TORCH_DISTRIBUTED_DEBUG=INFO or DETAIL)");
    else if (e->indices.present)
        str_addf(ex, "It gives their indices only (TORCH_DISTRIBUTED_DEBUG=OFF): positions in the "
                     "list of parameters DDP reduces, model.parameters() in order without frozen, "
                     "ignored or shared ones, not state_dict keys");
    else
        str_addf(ex, "It lists no parameter (PyTorch 1.8 or older prints none)");
    if (log->model && log->indices && (e->indices.present || e->names.present))
        str_addf(ex, "; --model %s %s them (the trainer's registry, in DDP's order)", log->model,
                 e->names.present ? "gives the indices of" : "names");
    else if (e->indices.present && !e->names.present)
        str_addf(ex, "; --model M names them (any built-in model or a yaml), or run again with "
                     "TORCH_DISTRIBUTED_DEBUG=INFO");
    str_addf(ex, ".");
    const LogList *cut = e->names.cut ? &e->names : e->indices.cut ? &e->indices : NULL;
    if (cut)
        str_addf(
            ex,
            " The log ends inside the list of %s (line %d): %d %s read%s%s%s; the list "
            "may have held more.",
            cut == &e->names ? "names" : "indices", cut->line, cut->n,
            cut == &e->names ? plural(cut->n, "name", "names") : plural(cut->n, "index", "indices"),
            cut->partial[0] ? ", then '" : "", cut->partial, cut->partial[0] ? "' is cut off" : "");
    if (p->from_info)
        str_addf(ex,
                 " The reducer's INFO lines before it ('Parameter: ... did not get gradient in "
                 "backwards pass') name %d, the whole set.",
                 p->n);
    str_addf(ex, "\n");
}

// ---- the unfinished reduction ----------------------------------------------------------------

// Ranks in the log that did not raise it but show they waited (a timeout, a closed connection,
// a monitored barrier): the ranks whose bucket allreduce had no partner.
static int waiting_ranks(const ExplainLog *log, const int *raised, int n_raised, int *out) {
    int n = 0;
    for (int i = 0; i < log->scan.n; i++) {
        const LogError *e = &log->scan.errors[i];
        if (e->rank < 0 || (e->kind != LOG_GLOO_TIMEOUT && e->kind != LOG_PEER_CLOSED &&
                            e->kind != LOG_NCCL_WATCHDOG && e->kind != LOG_MONITORED_BARRIER))
            continue;
        bool dup = false;
        for (int k = 0; k < n_raised; k++)
            dup |= raised[k] == e->rank;
        for (int k = 0; k < n; k++)
            dup |= out[k] == e->rank;
        if (!dup) out[n++] = e->rank;
    }
    return n;
}

static void unfinished(Diag *d, const ExplainLog *log, const LogError *e0, const int *ranks,
                       int n_ranks, const ErrorParams *p) {
    const LogScan *s = &log->scan;
    int *waiting = xcalloc((size_t)s->n + 1, sizeof(int));
    int n_waiting = waiting_ranks(log, ranks, n_ranks, waiting);
    int world = MAX(s->world, s->max_rank + 1);
    bool all = n_ranks >= 2 && n_ranks >= world && !n_waiting;
    bool stat = e0->variant == VARIANT_STATIC;
    Finding *f =
        add_finding(d, all ? FINDING_UNUSED_ALL_RANKS : FINDING_UNUSED_SOME_RANKS, SEVERITY_ERROR);
    take_params(f, p);
    char who[256], count[64], others[256];
    who_text(f, ranks, n_ranks, who, sizeof who);
    count_text(p, count, sizeof count);
    ranks_text(others, sizeof others, waiting, n_waiting);
    if (all)
        set_title(f, "%s got no gradient on every rank (unused on all ranks)", count);
    else if (stat)
        set_title(
            f, "%s never marked %s ready that it used in the first iteration (static_graph=True)",
            who, count);
    else if (n_waiting)
        set_title(f, "%s never marked %s ready; %s waited for them (unused on some ranks)", who,
                  count, others);
    else
        set_title(f, "%s never marked %s ready (unused on some ranks, or on all)", who, count);
    Str ex = {0}, ca = {0}, fx = {0};
    str_addf(&ex, "The log shows PyTorch's error from %s at line %d: '%s' ", who, e0->line,
             e0->first);
    list_text(&ex, log, e0, p);
    if (stat)
        str_addf(&ex, "With static_graph=True DDP counted each parameter's gradient-ready hooks in "
                      "the first iteration and expects as many in every later one; in the "
                      "iteration before the error these parameters' hooks did not fire, so the "
                      "reducer never marked them ready and never finished the reduction.");
    else
        str_addf(&ex,
                 "In the reducer: in %s's previous backward the gradient-ready hooks of these "
                 "parameters never fired, so it never marked them ready.",
                 who);
    if (e0->variant == VARIANT_FIND_UNUSED)
        str_addf(&ex,
                 " find_unused_parameters=True was on, so DDP marks ready itself what it cannot "
                 "reach from the tensors it finds in the forward's return value: these it "
                 "could reach, or it did not find the outputs at all.");
    str_addf(&ex,
             " The bucket holding them never launched its allreduce; buckets launch strictly in "
             "index order, so no later bucket did either, and the backward ended without "
             "finalizing. The reducer checks for an unfinished reduction only when the next "
             "forward starts (DDP's _pre_forward calls reducer._rebuild_buckets()), which is "
             "why the error points at a forward, not at the backward that failed.\n");
    if (all)
        str_addf(&ex, "Every rank in the log raised it for the same parameters: no rank launched "
                      "that bucket, so nobody waits; each raises at its next forward.\n");
    else if (n_waiting)
        str_addf(&ex,
                 "%s did not raise it: %s got these gradients, launched the bucket's allreduce "
                 "and waited in it for %s, which never issued it (see the findings that "
                 "follow from this one).\n",
                 others, n_waiting == 1 ? "it" : "they", who);
    else
        str_addf(&ex,
                 "Only %s's error is in the log. Had every rank missed the same parameters, "
                 "every rank would raise this and none would wait; a rank that got them "
                 "launched the bucket's allreduce and waits for %s: a hang until the timeout "
                 "(30 min with Gloo, 10 min with NCCL) or 'Connection closed by peer' once %s "
                 "exits.\n",
                 who, who, who);
    // Likely causes, most likely first.
    bool boxes = box_heads(log, p), empty = false;
    for (int k = 0; k < n_ranks; k++)
        empty |= ranks[k] >= 0 && ranks[k] <= s->max_rank && s->boxes[ranks[k]] == 0;
    if (boxes || empty) {
        str_addf(&ca,
                 "A batch without ground-truth boxes on %s: with no boxes, RT-DETR's loss "
                 "(Ultralytics' DETRLoss._get_loss_bbox) makes the box terms constant zeros, "
                 "so nothing reaches the loss through the box heads (dec_bbox_head, "
                 "enc_bbox_head: 42 tensors in rtdetr-l) and no denoising queries use "
                 "denoising_class_embed: 43 tensors get no gradient on that rank only. "
                 "Background images, a small batch per GPU and filtered labels make it likely.",
                 who);
        if (boxes) str_addf(&ca, " The parameters are RT-DETR's box heads.");
        if (empty)
            str_addf(&ca,
                     " %s's last progress line before the error shows 0 instances "
                     "(ground-truth boxes) in its batch.",
                     who);
        str_addf(&ca, "\n");
    }
    if (stat)
        str_addf(&ca,
                 "The graph changed after the first iteration on %s: a part of the model, or "
                 "of the loss, that depends on the data (for RT-DETR, a batch without boxes) "
                 "left these parameters out.\n",
                 who);
    str_addf(&ca,
             "A data-dependent branch: part of the model runs, or reaches the loss, only for "
             "some inputs, and %s's batch took the other way.\n",
             who);
    if (e0->variant == VARIANT_FIND_UNUSED)
        str_addf(&ca, "The forward returns its outputs inside an object DDP does not search (it "
                      "looks in tensors, lists, tuples, dicts and dataclasses), so its graph "
                      "search started from nothing.\n");
    if (!boxes && !stat)
        str_addf(&ca, "An output (or a head) the loss never uses%s.\n",
                 all ? "" : "; less likely here, since then every rank would raise, not only some");
    // Fixes, with what each costs (the diagnosis' texts).
    if (e0->variant != VARIANT_FIND_UNUSED && !stat)
        fix_find_unused(&fx, MAX(p->n, 1), log->n_params_model, NULL); // a log holds no caps
    if (stat)
        str_addf(&fx, "static_graph=False with find_unused_parameters=True: DDP then searches the "
                      "graph every iteration instead of expecting the first one's. Cost: one graph "
                      "traversal and one bitmap allreduce per iteration.\n");
    fix_reach_loss(&fx, &log->m, p->params, p->n);
    // only when the log shows the empty batch: box-head names alone do not establish it
    if (empty && !all) fix_skip_empty_batches(&fx);
    if (!all && !stat && n_waiting) fix_static_graph(&fx, "on other ranks in the same iteration");
    finish(f, &ex, &ca, &fx);
    free(waiting);
}

// ---- the other root causes -------------------------------------------------------------------

static void marked_twice(Diag *d, const ExplainLog *log, const LogError *e, const int *ranks,
                         int n_ranks, const ErrorParams *p) {
    Finding *f = add_finding(d, FINDING_ERROR, SEVERITY_ERROR);
    take_params(f, p);
    char who[256], name[300] = "";
    who_text(f, ranks, n_ranks, who, sizeof who);
    if (p->n == 1 && log->m.param_names && p->params[0] < log->m.n_params)
        snprintf(name, sizeof name, " (%s)", log->m.param_names[p->params[0]]);
    if (e->indices.n)
        set_title(f, "%s marked parameter %lld%s ready twice in one backward", who,
                  (long long)e->indices.values[0], name);
    else
        set_title(f, "%s marked a parameter ready twice in one backward", who);
    Str ex = {0}, ca = {0}, fx = {0};
    str_addf(&ex,
             "The log shows PyTorch's error from %s at line %d: '%s' Two gradient-ready hooks "
             "fired for the same parameter in one iteration, and the reducer, which counts "
             "each parameter once per bucket, raised inside the backward at the second.\n",
             who, e->line, e->first);
    bool find_unused = log->scan.find_unused == 1;
    str_addf(&ca,
             "Reentrant activation checkpointing (torch.utils.checkpoint with "
             "use_reentrant=True, or a model's gradient checkpointing) with "
             "find_unused_parameters=True: at the forward's end the checkpointed parameters "
             "are out of the graph, so DDP marks them unused, then the recomputation's "
             "backward fires their real hooks%s.\n",
             find_unused ? " (this run's DDP summary says find_unused_parameters: 1)" : "");
    str_addf(&ca, "The same module under two checkpoints, or a parameter used in two reentrant "
                  "backward passes.\n");
    str_addf(&ca, "A parameter used outside forward (in the loss, a regulariser), or two forwards "
                  "through DDP before one backward.\n");
    str_addf(&fx,
             "use_reentrant=False in torch.utils.checkpoint: the recomputation runs in the same "
             "backward and each parameter's hook fires once. Cost: none; the same "
             "recomputation.\n");
    str_addf(&fx, "static_graph=True: DDP counts each parameter's hooks in the first iteration and "
                  "expects as many every time. Cost: none after the first iteration; the graph "
                  "must never change.\n");
    str_addf(&fx, "find_unused_parameters=False when nothing is unused. Cost: none; it saves the "
                  "graph search.\n");
    finish(f, &ex, &ca, &fx);
}

static void graph_changed(Diag *d, const LogError *e, const int *ranks, int n_ranks) {
    Finding *f = add_finding(d, FINDING_ERROR, SEVERITY_ERROR);
    char who[256];
    who_text(f, ranks, n_ranks, who, sizeof who);
    set_title(f,
              "%s: the training graph changed under static_graph=True: a parameter unused in the "
              "first iteration got a gradient",
              who);
    Str ex = {0}, ca = {0}, fx = {0};
    str_addf(&ex,
             "The log shows PyTorch's error from %s at line %d: '%s' With static_graph=True "
             "DDP records in the first iteration which parameters are unused and marks them "
             "ready itself from then on; a hook fired for one of them, and the reducer "
             "raised inside the backward.\n",
             who, e->line, e->first);
    str_addf(&ca, "The first iteration was special: part of the model ran only later (for RT-DETR, "
                  "a first batch without boxes leaves the box heads out).\n");
    str_addf(&ca, "A branch that switches on after some iterations (a loss term enabled late, a "
                  "warm-up).\n");
    str_addf(&fx, "static_graph=False with find_unused_parameters=True: DDP then searches the "
                  "graph every iteration. Cost: one graph traversal and one bitmap allreduce per "
                  "iteration.\n");
    str_addf(&fx, "Make the first iteration use every parameter (a batch that exercises every "
                  "head). Cost: none.\n");
    finish(f, &ex, &ca, &fx);
}

static void construction(Diag *d, const ExplainLog *log, const LogError *e, const int *ranks,
                         int n_ranks, const ErrorParams *p) {
    Finding *f = add_finding(d, FINDING_ERROR, SEVERITY_ERROR);
    take_params(f, p);
    char who[256], name[300] = "";
    who_text(f, ranks, n_ranks, who, sizeof who);
    Str ex = {0}, ca = {0}, fx = {0};
    if (e->kind == LOG_PARAM_COUNT) {
        set_title(f,
                  "the ranks built different models: rank %d has %lld parameter tensors, rank %d "
                  "has %lld",
                  e->rank, (long long)e->a, e->other_rank, (long long)e->b);
        str_addf(&ex,
                 "The log shows PyTorch's error from %s (first at line %d): '%s' When DDP is "
                 "constructed it allgathers each rank's number of parameters (those that "
                 "require a gradient, shared ones once) and raises when they differ: before "
                 "any training step, on every rank.\n",
                 who, e->line, e->first);
        str_addf(&ca, "A model that depends on the rank or the node: a branch on the rank, a "
                      "config or checkpoint file that differs between machines.\n");
        str_addf(&ca, "Different frozen parameters: requires_grad set differently on some "
                      "ranks.\n");
    } else {
        if (p->n == 1 && log->m.param_names && p->params[0] < log->m.n_params)
            snprintf(name, sizeof name, " (%s)", log->m.param_names[p->params[0]]);
        set_title(f, "rank %d's parameter %lld%s has sizes %s, not rank 0's", e->rank,
                  (long long)e->a, name, e->what);
        str_addf(&ex,
                 "The log shows PyTorch's error from %s at line %d: '%s' When DDP is "
                 "constructed rank 0 broadcasts every parameter's sizes and each rank "
                 "compares its own, index by index: rank %d's parameter %lld has sizes %s.\n",
                 who, e->line, e->first, e->rank, (long long)e->a, e->what);
        str_addf(&ca, "A different configuration on that rank: for a detector, a different class "
                      "count (nc, from another data yaml) changes the score heads' shapes.\n");
        str_addf(&ca, "Parameters created in a different order (modules built by iterating a "
                      "set()), so the same index holds another parameter.\n");
    }
    fix_same_model(&fx);
    finish(f, &ex, &ca, &fx);
}

static void collectives_differ(Diag *d, const LogError *e) {
    Finding *f = add_finding(d, FINDING_COLLECTIVE_MISMATCH, SEVERITY_ERROR);
    if (e->rank >= 0) add_rank(f, e->rank);
    char who[32];
    explain_rank(e->rank, who, sizeof who);
    set_title(f, "the ranks' collectives differ (TORCH_DISTRIBUTED_DEBUG=DETAIL's check, %s)", who);
    Str ex = {0}, fx = {0};
    str_addf(&ex,
             "The log shows the check TORCH_DISTRIBUTED_DEBUG=DETAIL runs before every "
             "collective, from %s at line %d: '%s' Process groups pair collectives by issue "
             "order; without this check the ranks would have hung or averaged the wrong "
             "tensors.\n",
             who, e->line, e->first);
    fix_same_model(&fx);
    fix_detail_check(&fx);
    finish(f, &ex, NULL, &fx);
}

// ---- what follows on the other ranks ---------------------------------------------------------

// The root finding a consequence on rank follows from: one about another rank, else any.
static int root_for(const Diag *d, int n_roots, int rank, int peer) {
    int any = -1;
    for (int i = 0; i < n_roots; i++) {
        bool mine = false, theirs = false;
        for (int k = 0; k < d->f[i].n_ranks; k++) {
            mine |= d->f[i].ranks[k] == rank;
            theirs |= d->f[i].ranks[k] == peer;
        }
        if (peer >= 0 && theirs) return i;
        if (!mine && any < 0) any = i;
    }
    return any >= 0 ? any : n_roots ? 0 : -1;
}

static void consequence(Diag *d, const ExplainLog *log, const LogError *e, int n_roots) {
    bool hang = e->kind == LOG_GLOO_TIMEOUT || e->kind == LOG_NCCL_WATCHDOG;
    Finding *f = add_finding(d, hang ? FINDING_HANG : FINDING_ERROR, SEVERITY_ERROR);
    if (e->rank >= 0) add_rank(f, e->rank);
    f->cause = root_for(d, n_roots, e->rank, e->other_rank);
    char who[32];
    explain_rank(e->rank, who, sizeof who);
    Str ex = {0}, ca = {0}, fx = {0};
    str_addf(&ex, "The log shows, from %s at line %d: '%s' ", who, e->line, e->first);
    switch (e->kind) {
    case LOG_GLOO_TIMEOUT:
        set_title(f,
                  "%s waited %lld ms in a Gloo %s that never completed: a collective its peer "
                  "did not issue",
                  who, (long long)e->a, e->what);
        str_addf(&ex,
                 "Gloo pairs collectives by issue order: %s was inside one (a bucket's "
                 "allreduce, if its traceback shows loss.backward()) and no peer issued the "
                 "matching one within the process group's timeout (%lld ms here; 30 min by "
                 "default).\n",
                 who, (long long)e->a);
        break;
    case LOG_PEER_CLOSED:
        set_title(f,
                  "%s lost its Gloo connection%s%s: a peer process exited while %s waited for it",
                  who, e->what[0] ? " to " : "", e->what, who);
        str_addf(&ex,
                 "A peer's process exited (after an error, or killed) while %s was in a "
                 "collective with it: this error is the consequence, the cause is in the "
                 "peer's output.\n",
                 who);
        break;
    case LOG_NCCL_WATCHDOG:
        set_title(f,
                  "%s's NCCL watchdog timed out collective #%lld (%s, %lld elements) after %lld ms",
                  who, (long long)e->a, e->what[0] ? e->what : "?", (long long)e->b,
                  (long long)e->ran_ms);
        str_addf(&ex,
                 "NCCL's watchdog counts from when the collective was enqueued; after %lld ms "
                 "(the process group's timeout: 10 min by default) it takes the process down.",
                 (long long)e->timeout_ms);
        if (e->last_enqueued >= 0)
            str_addf(&ex, " %s had enqueued up to #%lld and completed up to #%lld.", who,
                     (long long)e->last_enqueued, (long long)e->last_completed);
        str_addf(&ex, " For a DDP bucket's allreduce, the elements (NumelIn) are the bucket's: "
                      "they say which bucket never completed.\n");
        str_addf(&fx,
                 "TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1: every rank "
                 "dumps its last collectives when the watchdog fires, and `ddpdbg import-fr` "
                 "reads the dumps and names the rank that never joined #%lld. Cost: a ring of "
                 "2000 entries per process, and the dump at the timeout.\n",
                 (long long)e->a);
        break;
    default: // the monitored barrier
        if (e->other_rank >= 0)
            set_title(f,
                      "%s's monitored barrier failed waiting for rank %d "
                      "(TORCH_DISTRIBUTED_DEBUG=DETAIL)",
                      who, e->other_rank);
        else
            set_title(f, "%s's monitored barrier failed (TORCH_DISTRIBUTED_DEBUG=DETAIL)", who);
        str_addf(&ex,
                 "Under TORCH_DISTRIBUTED_DEBUG=DETAIL every collective is preceded by a "
                 "monitored barrier; %s reached it and a peer did not.\n",
                 who);
        break;
    }
    if (f->cause < 0 && e->kind != LOG_MONITORED_BARRIER) {
        str_addf(&ca, "A rank that raised or died: its output is not in this log (look for its "
                      "traceback).\n");
        str_addf(&ca, "A rank on another path: parameters without a gradient there (its bucket "
                      "never launched), a skipped backward, uneven numbers of batches.\n");
        str_addf(&ca, "A rank slower than the timeout (data loading, another job on its GPU).\n");
        fix_detail_check(&fx);
    }
    finish(f, &ex, &ca, &fx);
}

// ---- the engine ------------------------------------------------------------------------------

static bool same_params(const ErrorParams *a, const ErrorParams *b) {
    return a->n == b->n && (!a->n || !memcmp(a->params, b->params, sizeof(int) * (size_t)a->n));
}

int explain_findings(const ExplainLog *log, Finding **out) {
    const LogScan *s = &log->scan;
    Diag d = {.m = &log->m};
    bool *done = xcalloc((size_t)s->n + 1, sizeof(bool));
    int *ranks = xcalloc((size_t)s->n + 1, sizeof(int));
    for (int i = 0; i < s->n; i++) { // the unfinished reductions, ranks with the same list as one
        const LogError *e = &s->errors[i];
        if (done[i] || e->kind != LOG_UNFINISHED_REDUCTION) continue;
        int n = 0;
        for (int k = i; k < s->n; k++)
            if (!done[k] && s->errors[k].kind == e->kind && s->errors[k].variant == e->variant &&
                same_params(&log->params[i], &log->params[k])) {
                ranks[n++] = s->errors[k].rank;
                done[k] = true;
            }
        unfinished(&d, log, e, ranks, n, &log->params[i]);
    }
    for (int i = 0; i < s->n; i++) { // the other roots, the ranks that raised the same as one
        const LogError *e = &s->errors[i];
        if (done[i] || e->kind == LOG_UNFINISHED_REDUCTION || e->kind == LOG_GLOO_TIMEOUT ||
            e->kind == LOG_PEER_CLOSED || e->kind == LOG_NCCL_WATCHDOG ||
            e->kind == LOG_MONITORED_BARRIER)
            continue;
        int n = 0;
        for (int k = i; k < s->n; k++)
            if (!done[k] && s->errors[k].kind == e->kind &&
                same_params(&log->params[i], &log->params[k]) &&
                (e->kind != LOG_PARAM_SHAPE || s->errors[k].a == e->a)) {
                ranks[n++] = s->errors[k].rank;
                done[k] = true;
            }
        if (e->kind == LOG_MARKED_TWICE)
            marked_twice(&d, log, e, ranks, n, &log->params[i]);
        else if (e->kind == LOG_GRAPH_CHANGED)
            graph_changed(&d, e, ranks, n);
        else if (e->kind == LOG_PARAM_COUNT || e->kind == LOG_PARAM_SHAPE)
            construction(&d, log, e, ranks, n, &log->params[i]);
        else
            collectives_differ(&d, e);
    }
    int n_roots = d.n;
    for (int i = 0; i < s->n; i++) {
        LogKind k = s->errors[i].kind;
        if (k == LOG_GLOO_TIMEOUT || k == LOG_PEER_CLOSED || k == LOG_NCCL_WATCHDOG ||
            k == LOG_MONITORED_BARRIER)
            consequence(&d, log, &s->errors[i], n_roots);
    }
    free(done);
    free(ranks);
    *out = d.f;
    return d.n;
}
