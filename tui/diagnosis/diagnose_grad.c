/* diagnose_grad.c -- the rules about gradients (diagnose_rules.h): parameters that got no
 * gradient on some ranks or on all, find_unused_parameters at work or idle, a skipped backward,
 * no_sync() on some ranks only, uneven numbers of batches, bucket layouts that differ. Each
 * names the ranks, iteration, bucket, collective and parameters, says the likely cause from the
 * recorded context (the batch's boxes, the ranks' arguments) and the fixes with their costs. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base.h"       // xcalloc, xstrdup, MIN, MAX
#include "tui/diagnosis/diagnose_rules.h" // Diag, Str, the shared helpers

// ---- the fixes, worded once (diagnose_rules.h; explain.c offers them for logs) -------------

bool bucket_caps_text(const ModelRank *r, char *out, size_t len) {
    out[0] = '\0';
    if (r->bucket_cap_bytes <= 0) return false;
    char cap[32], first[32];
    snprintf(cap, sizeof cap, "%g MiB", (double)r->bucket_cap_bytes / (1024.0 * 1024.0));
    snprintf(first, sizeof first, "%g MiB", (double)r->first_bucket_bytes / (1024.0 * 1024.0));
    if (r->first_bucket_bytes <= 0 || r->first_bucket_bytes == r->bucket_cap_bytes)
        snprintf(out, len, "%s", cap);
    else
        snprintf(out, len, "%s/%s", first, cap);
    return true;
}

void fix_find_unused(Str *fx, int n_missing, int n_params, const char *caps) {
    char bitmap[64] = "", digits[16];
    snprintf(digits, sizeof digits, "%d", n_params); // "an 18-", "an 8-", "an 11000-element"
    size_t nd = strlen(digits);
    bool an = digits[0] == '8' ||
              ((nd % 3 == 2) && (!strncmp(digits, "11", 2) || !strncmp(digits, "18", 2)));
    if (n_params > 0) snprintf(bitmap, sizeof bitmap, "%s %d-element", an ? "an" : "a", n_params);
    str_addf(
        fx,
        "find_unused_parameters=True: after every forward DDP searches the autograd graph from "
        "the outputs and marks what it cannot reach as ready, so the %d %s would be marked "
        "unused and their bucket would launch with zeros. Cost: one graph traversal per "
        "iteration and one allreduce of %s used-parameter bitmap; the buckets keep "
        "their %s%slayout, no rebuild.\n",
        n_missing, plural(n_missing, "parameter", "parameters"),
        n_params > 0 ? bitmap : "a one-element-per-parameter", caps && *caps ? caps : "",
        caps && *caps ? " " : "");
}

void fix_skip_empty_batches(Str *fx) {
    str_addf(fx, "Skip empty batches on all ranks together: allreduce a has-boxes flag (MIN) "
                 "before the forward and skip the step on every rank when any batch is empty. "
                 "Cost: one 1-element allreduce per step, and the skipped batches.\n");
}

void fix_static_graph(Str *fx, const char *used_where) {
    if (used_where) {
        str_addf(fx,
                 "static_graph=True is not a fix here: it needs the same parameters unused in "
                 "every iteration on every rank, and these were used %s.\n",
                 used_where);
        return;
    }
    str_addf(fx, "static_graph=True: DDP records the unused set in the first iteration and marks "
                 "those parameters ready itself from then on; allowed here because the same "
                 "set is unused in every iteration recorded. Cost: none after the first "
                 "iteration; the graph must then never change.\n");
    str_addf(fx, "Freeze or remove them (requires_grad=False) if they are not meant to "
                 "train: DDP leaves frozen parameters out of its buckets. Cost: none.\n");
}

void fix_same_model(Str *fx) {
    str_addf(fx, "Give every rank the same model, the same DDP settings (bucket_cap_mb, "
                 "find_unused_parameters, static_graph) and the same parameter registration order "
                 "(never iterate a set() to build modules). Cost: none.\n");
}

void fix_reach_loss(Str *fx, const Model *m, const int *params, int n) {
    if (names_contain(m, params, n, "bbox_head"))
        str_addf(fx,
                 "Make every output reach the loss: add 0 * pred_bboxes.sum() (the decoder's box "
                 "outputs) to the loss, so the box heads get a zero gradient on every rank, boxes "
                 "or not. Cost: nothing measurable; no DDP setting changes.\n");
    else
        str_addf(fx, "Make every output reach the loss: add 0 * out.sum() for each output these "
                     "parameters produce, so they get a zero gradient whatever the branch. Cost: "
                     "nothing measurable; no DDP setting changes.\n");
}

// ---- rule: parameters that got no gradient (find_unused_parameters off) ---------------------

// Boxes at iteration iter over the given ranks: 1 if every listed rank's batch had no box (and
// at least one image), 0 otherwise; *total gets their boxes.
static bool batches_empty(const Model *m, const int *ranks, int n, int64_t iter) {
    for (int k = 0; k < n; k++) {
        const ModelIter *it = model_iter(m, ranks[k], iter);
        if (!it || it->n_images == 0 || it->n_boxes != 0) return false;
    }
    return n > 0;
}

static void explain_unused_cause(Str *ex, const Model *m, const int *miss, int n_miss,
                                 const int *rep, int n_rep, int64_t iter, char *who_miss) {
    bool others_boxes = n_rep > 0;
    for (int k = 0; k < n_rep; k++) {
        const ModelIter *it = model_iter(m, rep[k], iter);
        if (!it || it->n_boxes == 0) others_boxes = false;
    }
    if (batches_empty(m, miss, n_miss, iter) && (others_boxes || n_rep == 0)) {
        str_addf(ex,
                 "%s's batch at iteration %lld had 0 ground-truth boxes, so the box losses were "
                 "constants and nothing reached the loss through these parameters",
                 who_miss, (long long)iter);
        for (int k = 0; k < n_rep; k++) {
            const ModelIter *it = model_iter(m, rep[k], iter);
            str_addf(ex, "%s rank %d's batch had %d %s", k ? "," : ";", rep[k], it->n_boxes,
                     plural(it->n_boxes, "box", "boxes"));
        }
        str_addf(ex, ".\n");
    } else {
        str_addf(ex,
                 "Nothing recorded on %s explains why: these parameters' outputs did not reach its "
                 "loss at iteration %lld (a data-dependent branch, an output left out of the loss, "
                 "or an early exit on this rank).\n",
                 who_miss, (long long)iter);
    }
}

// What the first missing rank's buckets did: the bucket that blocks and the ones after it.
static int explain_buckets(Str *ex, const Model *m, int r0, const ModelIter *it,
                           const uint8_t *miss) {
    const ModelRank *mr = &m->ranks[r0];
    const ModelLayout *l = model_rank_layout(mr, it);
    if (!l) return -1;
    int k = -1;
    for (int b = 0; b < l->n_buckets && k < 0; b++)
        for (int v = l->start[b]; v < l->start[b + 1]; v++)
            if (model_bit(miss, l->vars[v])) {
                k = b;
                break;
            }
    if (k < 0) return -1;
    int size = l->start[k + 1] - l->start[k];
    str_addf(ex,
             "rank %d's bucket %d (%d parameters, %lld elements) had only %d of them ready, so "
             "it never launched its allreduce",
             r0, k, size, (long long)l->numel[k], it->bucket_ready[k]);
    int n_later_ready = 0;
    for (int b = k + 1; b < l->n_buckets; b++)
        n_later_ready += it->bucket_ready_ns[b] != 0;
    if (n_later_ready)
        str_addf(ex,
                 "; buckets launch in index order, so %s after it, although ready, could not "
                 "launch either",
                 n_later_ready == 1 ? "the bucket" : "the buckets");
    int n_launched = 0;
    for (int b = 0; b < l->n_buckets; b++)
        n_launched += it->bucket_seq[b] != 0;
    if (!n_launched)
        str_addf(ex, ": rank %d issued no bucket allreduce at iteration %lld", r0,
                 (long long)it->iter);
    str_addf(ex, "%s.\n", it->finalized ? "" : " and its backward ended without finalizing");
    return k;
}

void rule_unused(Diag *d) {
    const Model *m = d->m;
    int n_found = 0;
    int *miss = xcalloc((size_t)m->world, sizeof(int)),
        *rep = xcalloc((size_t)m->world, sizeof(int));
    int *rep_count = xcalloc((size_t)m->world, sizeof(int));
    size_t bytes = (size_t)(m->n_params + 7) / 8 + 1;
    for (int64_t i = m->min_iter; i <= m->max_iter && n_found < 3 && m->n_params; i++) {
        uint8_t *uni = xcalloc(bytes, 1);
        int n_miss = 0, n_rep = 0, first_count = 0;
        bool cut_short = false;
        for (int r = 0; r < m->world; r++) {
            const ModelIter *it = m->ranks[r].present ? model_iter(m, r, i) : NULL;
            if (!it || !it->t_backward_ns) continue;
            if (!it->t_backward_end_ns) {
                cut_short = true;
                continue;
            }
            if (it->finalized) continue;
            if (!it->n_marked && it->n_grad_ready) continue; // no_sync(): rule_no_sync's case
            uint8_t *want = expected_bits(m, &m->ranks[r], it);
            int count = 0;
            for (int p = 0; p < m->n_params; p++)
                if (model_bit(want, p) && !model_bit(it->marked, p)) {
                    if (!n_miss) uni[p >> 3] |= (uint8_t)(1u << (p & 7));
                    count++;
                }
            free(want);
            if (count) {
                if (!n_miss) first_count = count;
                miss[n_miss++] = r;
            }
        }
        if (!n_miss) {
            free(uni);
            continue;
        }
        for (int r = 0; r < m->world; r++) { // who marked the first rank's missing ones
            bool is_miss = false;
            for (int k = 0; k < n_miss; k++)
                is_miss |= miss[k] == r;
            const ModelIter *it = m->ranks[r].present && !is_miss ? model_iter(m, r, i) : NULL;
            if (!it) continue;
            int count = 0;
            for (int p = 0; p < m->n_params; p++)
                count += model_bit(uni, p) && model_bit(it->marked, p);
            if (count) {
                rep_count[n_rep] = count;
                rep[n_rep++] = r;
            }
        }
        n_found++;
        int r0 = miss[0];
        const ModelIter *it0 = model_iter(m, r0, i);
        char who_miss[256], who_rep[256];
        ranks_text(who_miss, sizeof who_miss, miss, n_miss);
        ranks_text(who_rep, sizeof who_rep, rep, n_rep);
        bool some = n_rep > 0;
        Finding *f = add_finding(d, some ? FINDING_UNUSED_SOME_RANKS : FINDING_UNUSED_ALL_RANKS,
                                 SEVERITY_ERROR);
        for (int k = 0; k < n_miss; k++)
            add_rank(f, miss[k]);
        f->iter = i;
        set_params(f, uni, m->n_params);
        Str ex = {0}, fx = {0};
        if (some) {
            set_title(
                f, "%s never marked %d %s ready at iteration %lld; %s did (unused on some ranks)",
                who_miss, first_count, plural(first_count, "parameter", "parameters"), (long long)i,
                who_rep);
            str_addf(&ex,
                     "At iteration %lld, %d of rank %d's %d parameters got no gradient: their "
                     "gradient-ready hooks never fired, so DDP never marked them ready.",
                     (long long)i, first_count, r0, m->n_params);
            for (int k = 0; k < n_rep; k++)
                str_addf(&ex, " rank %d marked %s%d of them ready in the same iteration%s.", rep[k],
                         rep_count[k] == first_count ? "all " : "", rep_count[k],
                         model_iter(m, rep[k], i)->t_backward_end_ns ? "" : " before it stopped");
            str_addf(&ex, "\n");
        } else {
            set_title(f,
                      "%d %s got no gradient on any rank at iteration %lld (unused on all ranks)",
                      first_count, plural(first_count, "parameter", "parameters"), (long long)i);
            str_addf(&ex,
                     "At iteration %lld, the same %d parameters got no gradient on %s: their "
                     "gradient-ready hooks never fired on any rank%s.\n",
                     (long long)i, first_count, who_miss,
                     cut_short ? " that finished its backward (another rank stopped during it)"
                               : "");
        }
        explain_unused_cause(&ex, m, miss, n_miss, rep, n_rep, i, who_miss);
        f->bucket = explain_buckets(&ex, m, r0, it0, uni);
        for (int k = 0; k < n_rep && f->bucket >= 0; k++) {
            const ModelIter *it = model_iter(m, rep[k], i);
            const ModelRank *mr = &m->ranks[rep[k]];
            if (!model_rank_layout(mr, it) || f->bucket >= model_rank_layout(mr, it)->n_buckets ||
                !it->bucket_seq[f->bucket])
                continue;
            int64_t seq = it->bucket_seq[f->bucket];
            const ModelCollective *c = model_rank_coll(mr, seq);
            if (!f->seq) f->seq = seq;
            str_addf(&ex,
                     "rank %d launched bucket %d's allreduce as collective #%lld (%lld elements)",
                     rep[k], f->bucket, (long long)seq, c ? (long long)c->numel : 0LL);
            if (c && !c->t_done_ns) {
                str_addf(&ex, " and waited in it for %s, which never issued it", who_miss);
                if (mr->pending_seq == seq && mr->state == RANK_DEAD)
                    str_addf(&ex, "; it was still waiting when it was stopped");
                else if (mr->state == RANK_WAITING)
                    str_addf(&ex, "; it is still waiting");
            }
            str_addf(&ex, ".\n");
        }
        const ModelRank *mr0 = &m->ranks[r0];
        if (mr0->error && mr0->error_iter > i &&
            !strncmp(mr0->error, "Expected to have finished reduction", 35))
            str_addf(&ex,
                     "rank %d raised DDP's error at its next forward (iteration %lld), not in the "
                     "backward that failed: the reducer checks for an unfinished reduction only "
                     "when the next iteration starts.\n",
                     r0, (long long)mr0->error_iter);
        if (!some)
            str_addf(&ex, "No rank launched the unfinished bucket, so nobody waits: every rank "
                          "raises at its next forward instead of hanging.\n");
        // Was the set used in other iterations (then static_graph cannot help)?
        bool used_elsewhere = false, every_iter = true;
        for (int64_t j = m->min_iter; j <= m->max_iter; j++) {
            const ModelIter *it = model_iter(m, r0, j);
            if (!it || !it->t_backward_end_ns || j == i) continue;
            bool any = false;
            for (int p = 0; p < m->n_params && !any; p++)
                any = model_bit(uni, p) && model_bit(it->marked, p);
            used_elsewhere |= any;
            every_iter &= !any;
        }
        char caps[64];
        bucket_caps_text(&m->ranks[r0], caps, sizeof caps);
        fix_find_unused(&fx, first_count, m->n_params, caps);
        fix_reach_loss(&fx, m, f->params, f->n_params);
        if (some && batches_empty(m, miss, n_miss, i)) fix_skip_empty_batches(&fx);
        if (!some && every_iter && !used_elsewhere)
            fix_static_graph(&fx, NULL);
        else if (some || used_elsewhere)
            fix_static_graph(&fx,
                             some ? "on other ranks in the same iteration" : "in other iterations");
        f->explanation = str_take(&ex);
        f->fixes = str_take(&fx);
        free(uni);
    }
    free(miss);
    free(rep);
    free(rep_count);
}

// ---- rule: find_unused_parameters at work (information) ------------------------------------

void rule_find_unused(Diag *d) {
    const Model *m = d->m;
    if (!find_unused_on(m)) return;
    int n_iters = 0, n_with = 0, first_rank = -1;
    int64_t first_iter = -1;
    for (int64_t i = m->min_iter; i <= m->max_iter; i++) {
        bool any = false, ran = false;
        for (int r = 0; r < m->world; r++) {
            const ModelIter *it = m->ranks[r].present ? model_iter(m, r, i) : NULL;
            if (!it || !it->t_backward_end_ns) continue;
            ran = true;
            if (it->n_marked_unused && !any) {
                any = true;
                if (first_iter < 0) {
                    first_iter = i;
                    first_rank = r;
                }
            }
        }
        n_iters += ran;
        n_with += any;
    }
    if (!n_iters) return;
    if (!n_with) {
        Finding *f = add_finding(d, FINDING_FIND_UNUSED_IDLE, SEVERITY_INFO);
        set_title(f, "find_unused_parameters=True, but no parameter was unused in %d %s", n_iters,
                  plural(n_iters, "iteration", "iterations"));
        Str ex = {0}, fx = {0};
        str_addf(&ex,
                 "Every parameter got a gradient on every rank in every iteration recorded, so the "
                 "graph search after each forward found nothing (PyTorch warns about this once). "
                 "It still costs a graph traversal and an allreduce of the %d-element "
                 "used-parameter bitmap every iteration.\n",
                 m->n_params);
        str_addf(&fx,
                 "find_unused_parameters=False, if no batch can ever leave a parameter unused (a "
                 "zero-box batch does, in a detection model: check a whole epoch first). Saves "
                 "one graph traversal and one small allreduce per iteration.\n");
        f->explanation = str_take(&ex);
        f->fixes = str_take(&fx);
        return;
    }
    const ModelIter *it = model_iter(m, first_rank, first_iter);
    Finding *f = add_finding(d, FINDING_UNUSED_HANDLED, SEVERITY_INFO);
    f->iter = first_iter;
    set_params(f, it->marked_unused, m->n_params);
    add_rank(f, first_rank);
    int *others = xcalloc((size_t)m->world, sizeof(int));
    int n_others = 0; // ranks that used them in the same iteration
    for (int r = 0; r < m->world; r++) {
        const ModelIter *o =
            r != first_rank && m->ranks[r].present ? model_iter(m, r, first_iter) : NULL;
        if (!o) continue;
        if (o->n_marked_unused)
            add_rank(f, r);
        else if (f->n_params && model_bit(o->grad_ready, f->params[0]))
            others[n_others++] = r;
    }
    for (int k = 0; k < m->ranks[first_rank].n_colls; k++) {
        const ModelCollective *c = &m->ranks[first_rank].colls[k];
        if (c->iter == first_iter && !strcmp(c->what, "local_used_map")) f->seq = c->seq;
    }
    set_title(
        f,
        "find_unused_parameters=True marked parameters unused in %d of %d iterations (first: rank "
        "%d at iteration %lld, %d %s)",
        n_with, n_iters, first_rank, (long long)first_iter, it->n_marked_unused,
        plural(it->n_marked_unused, "parameter", "parameters"));
    Str ex = {0}, fx = {0};
    str_addf(
        &ex,
        "DDP's graph search found %d parameters unreachable from rank %d's outputs at iteration "
        "%lld and marked them ready with zero gradients",
        it->n_marked_unused, first_rank, (long long)first_iter);
    if (f->seq)
        str_addf(&ex,
                 "; the used-parameter bitmap allreduce (collective #%lld, %d elements) told the "
                 "other ranks",
                 (long long)f->seq, m->n_params);
    str_addf(&ex, ".\n");
    int r0[1] = {first_rank};
    char who[64];
    snprintf(who, sizeof who, "rank %d", first_rank);
    explain_unused_cause(&ex, m, r0, 1, others, n_others, first_iter, who);
    if (n_others) {
        char who_used[256];
        ranks_text(who_used, sizeof who_used, others, n_others);
        str_addf(&ex,
                 "%s used them in the same iteration: without find_unused_parameters=True, rank %d "
                 "would have raised at its next forward and %s would have hung in the allreduce "
                 "of their bucket.\n",
                 who_used, first_rank, who_used);
    }
    str_addf(&fx,
             "Nothing to fix: the run is correct. To drop the per-iteration cost (a graph "
             "traversal and a %d-element allreduce), make every output reach the loss (",
             m->n_params);
    if (names_contain(m, f->params, f->n_params, "bbox_head"))
        str_addf(&fx, "0 * pred_bboxes.sum()");
    else
        str_addf(&fx, "0 * out.sum()");
    str_addf(&fx, ") and turn find_unused_parameters off.\n");
    f->explanation = str_take(&ex);
    f->fixes = str_take(&fx);
    free(others);
}

// ---- rule: a forward without its backward ---------------------------------------------------

void rule_skipped_backward(Diag *d) {
    const Model *m = d->m;
    for (int r = 0; r < m->world; r++) {
        const ModelRank *mr = &m->ranks[r];
        if (!mr->present) continue;
        for (int k = 0; k + 1 < mr->n_iters; k++) { // not the last: it may still be running
            const ModelIter *it = &mr->iters[k];
            if (!it->t_forward_ns || it->t_backward_ns) continue;
            int other = -1;
            for (int o = 0; o < m->world && other < 0; o++) {
                const ModelIter *oi =
                    o != r && m->ranks[o].present ? model_iter(m, o, it->iter) : NULL;
                if (oi && oi->t_backward_ns) other = o;
            }
            if (other < 0) continue;
            const ModelRank *om = &m->ranks[other];
            const ModelIter *oi = model_iter(m, other, it->iter);
            Finding *f = add_finding(d, FINDING_SKIPPED_BACKWARD, SEVERITY_ERROR);
            add_rank(f, r);
            f->iter = it->iter;
            set_title(f, "rank %d ran iteration %lld's forward and skipped its backward", r,
                      (long long)it->iter);
            Str ex = {0}, fx = {0};
            str_addf(&ex,
                     "rank %d ran iteration %lld's forward and then skipped the backward and the "
                     "optimiser step (a per-rank `continue`): its reducer saw no gradient-ready "
                     "hook, so it raised nothing and launched none of iteration %lld's bucket "
                     "allreduces",
                     r, (long long)it->iter, (long long)it->iter);
            int n_launched = 0;
            int64_t first_seq = 0;
            const ModelLayout *ol = model_rank_layout(om, oi);
            for (int b = 0; ol && b < ol->n_buckets; b++)
                if (oi->bucket_seq[b]) {
                    if (!first_seq || oi->bucket_seq[b] < first_seq) {
                        first_seq = oi->bucket_seq[b];
                        f->bucket = b;
                    }
                    n_launched++;
                }
            if (n_launched) str_addf(&ex, ", while rank %d launched %d", other, n_launched);
            str_addf(&ex, ".\n");
            f->seq = first_seq;
            const ModelCollective *mine = first_seq ? model_rank_coll(mr, first_seq) : NULL;
            const ModelCollective *theirs = first_seq ? model_rank_coll(om, first_seq) : NULL;
            if (mine && theirs) {
                char a[96], b[96];
                coll_text(a, sizeof a, mine);
                coll_text(b, sizeof b, theirs);
                str_addf(
                    &ex,
                    "From #%lld on, rank %d's collectives are one step behind: its #%lld is %s "
                    "(iteration %lld), where rank %d's #%lld is %s (iteration %lld). Collectives "
                    "pair by issue order, not by name: the ranks wait for each other (a hang) "
                    "or, where the sizes happen to match, average the wrong tensors.\n",
                    (long long)first_seq, r, (long long)first_seq, a, (long long)mine->iter, other,
                    (long long)first_seq, b, (long long)theirs->iter);
            } else if (first_seq) {
                str_addf(&ex, "rank %d never issued #%lld, which rank %d waits in.\n", r,
                         (long long)first_seq, other);
            }
            str_addf(
                &fx,
                "Skip on every rank together: allreduce a has-valid-data flag (MIN) before the "
                "backward and let all ranks skip the step when any must. Cost: one 1-element "
                "allreduce per step.\n");
            str_addf(
                &fx,
                "Run the backward anyway on a zero loss ((loss * 0).backward()): every hook "
                "fires and the bucket allreduces stay matched. Cost: a full backward and its "
                "allreduces for that step, and this rank's zeros dilute the averaged gradient.\n");
            str_addf(&fx,
                     "TORCH_DISTRIBUTED_DEBUG=DETAIL turns such a hang into an immediate "
                     "'Collectives differ' error naming both ops. Cost: a check (an extra Gloo "
                     "collective) before every collective: for debugging only.\n");
            f->explanation = str_take(&ex);
            f->fixes = str_take(&fx);
            break; // one per rank: what follows is its consequence
        }
    }
}

// ---- rule: no_sync() on some ranks only ----------------------------------------------------

// Under no_sync() the hooks fire but the reducer marks nothing and launches nothing; on every
// rank at once that is gradient accumulation, on some only the others' allreduces go unpaired.
void rule_no_sync(Diag *d) {
    const Model *m = d->m;
    int *quiet = xcalloc((size_t)m->world, sizeof(int)),
        *synced = xcalloc((size_t)m->world, sizeof(int));
    for (int64_t i = m->min_iter; i <= m->max_iter; i++) {
        int n_quiet = 0, n_synced = 0;
        for (int r = 0; r < m->world; r++) {
            const ModelIter *it = m->ranks[r].present ? model_iter(m, r, i) : NULL;
            if (!it || !it->t_backward_ns) continue;
            if (!it->n_marked && it->n_grad_ready && it->t_backward_end_ns)
                quiet[n_quiet++] = r;
            else if (it->n_marked)
                synced[n_synced++] = r;
        }
        if (!n_quiet || !n_synced) continue;
        char who_q[256], who_s[256];
        ranks_text(who_q, sizeof who_q, quiet, n_quiet);
        ranks_text(who_s, sizeof who_s, synced, n_synced);
        const ModelIter *qi = model_iter(m, quiet[0], i), *si = model_iter(m, synced[0], i);
        Finding *f = add_finding(d, FINDING_NO_SYNC_MISMATCH, SEVERITY_ERROR);
        for (int k = 0; k < n_quiet; k++)
            add_rank(f, quiet[k]);
        f->iter = i;
        set_title(f, "%s ran iteration %lld under no_sync() while %s synchronised", who_q,
                  (long long)i, who_s);
        Str ex = {0};
        str_addf(
            &ex,
            "At iteration %lld, %s's gradient-ready hooks fired (%d) but its reducer marked no "
            "parameter ready and launched no bucket allreduce, as inside no_sync(); %s marked "
            "%d and launched ",
            (long long)i, who_q, qi->n_grad_ready, who_s, si->n_marked);
        const ModelRank *sr = &m->ranks[synced[0]];
        const ModelLayout *l = model_rank_layout(sr, si);
        int n_launched = 0;
        for (int b = 0; l && b < l->n_buckets; b++)
            if (si->bucket_seq[b]) {
                if (!f->seq || si->bucket_seq[b] < f->seq)
                    f->seq = si->bucket_seq[b], f->bucket = b;
                n_launched++;
            }
        str_addf(&ex, "%d. ", n_launched);
        const ModelCollective *mine = f->seq ? model_rank_coll(&m->ranks[quiet[0]], f->seq) : NULL;
        const ModelCollective *theirs = f->seq ? model_rank_coll(sr, f->seq) : NULL;
        if (mine && theirs) {
            char a[96], b[96];
            coll_text(a, sizeof a, mine);
            coll_text(b, sizeof b, theirs);
            bool same = mine->op == theirs->op && mine->numel == theirs->numel;
            str_addf(
                &ex,
                "From #%lld on the ranks' collectives are one step apart: rank %d's #%lld is %s of "
                "iteration %lld, rank %d's is %s of iteration %lld%s",
                (long long)f->seq, quiet[0], (long long)f->seq, a, (long long)mine->iter, synced[0],
                b, (long long)theirs->iter,
                same ? ": the same size, so they average gradients of different iterations "
                       "without any error, until the sequences reach collectives that differ."
                     : ", and they no longer pair.");
        }
        str_addf(&ex, "\n");
        f->explanation = str_take(&ex);
        f->fixes = xstrdup(
            "Enter no_sync() on every rank together: gradient accumulation must use the same "
            "accumulation steps everywhere (derive them from the global step, not from "
            "per-rank data). Cost: none.\n");
        break; // the first is the cause; the rest follows from it
    }
    free(quiet);
    free(synced);
}

// ---- rule: uneven numbers of batches --------------------------------------------------------

void rule_uneven(Diag *d) {
    const Model *m = d->m;
    int64_t longest = -1;
    int long_rank = -1;
    for (int r = 0; r < m->world; r++) {
        const ModelRank *mr = &m->ranks[r];
        for (int k = mr->present ? mr->n_iters - 1 : -1; k >= 0; k--)
            if (mr->iters[k].t_forward_ns) {
                if (mr->iters[k].iter > longest) longest = mr->iters[k].iter, long_rank = r;
                break;
            }
    }
    for (int r = 0; r < m->world; r++) {
        const ModelRank *mr = &m->ranks[r];
        if (!mr->present || mr->error || !mr->n_iters) continue;
        const ModelIter *last = NULL;
        int n_batches = 0;
        for (int k = 0; k < mr->n_iters; k++)
            if (mr->iters[k].t_forward_ns) last = &mr->iters[k], n_batches++;
        // A rank that left the loop: its last batch finished (finalized) and nothing followed.
        if (!last || last->iter >= longest || !last->finalized || !last->t_backward_end_ns)
            continue;
        int long_batches = 0;
        for (int k = 0; k < m->ranks[long_rank].n_iters; k++)
            long_batches += m->ranks[long_rank].iters[k].t_forward_ns != 0;
        Finding *f = add_finding(d, FINDING_UNEVEN_BATCHES, SEVERITY_ERROR);
        add_rank(f, r);
        f->iter = last->iter + 1;
        set_title(f, "rank %d ran %d batches, rank %d ran %d: uneven inputs", r, n_batches,
                  long_rank, long_batches);
        Str ex = {0}, fx = {0};
        str_addf(&ex, "rank %d's last iteration was %lld; rank %d went on to iteration %lld", r,
                 (long long)last->iter, long_rank, (long long)last->iter + 1);
        const ModelRank *lr = &m->ranks[long_rank];
        for (int k = 0; k < lr->n_colls; k++)
            if (lr->colls[k].iter == last->iter + 1) {
                const ModelCollective *mine = model_rank_coll(mr, lr->colls[k].seq);
                char a[96], b[96];
                coll_text(a, sizeof a, &lr->colls[k]);
                coll_text(b, sizeof b, mine);
                f->seq = lr->colls[k].seq;
                str_addf(&ex, ", where its collective #%lld (%s) pairs with rank %d's %s",
                         (long long)f->seq, a, r, mine ? b : "nothing: it never issued one");
                break;
            }
        str_addf(&ex,
                 ". Nothing tells DDP that a rank ran out of data: the longer ranks wait for "
                 "partners that left the training loop (a hang until the timeout), or pair with "
                 "whatever the short rank does next.\n");
        str_addf(&fx,
                 "ddp.join() (torch.distributed.algorithms.Join): a rank out of data shadows the "
                 "others' collectives with zeros until all are done. Cost: one extra allreduce per "
                 "iteration to count the ranks still joined, and shadow collectives.\n");
        str_addf(&fx,
                 "Equal shards: DistributedSampler pads by repeating samples (default) or, with "
                 "drop_last=True, drops the remainder. Cost: up to world-1 samples per epoch "
                 "repeated or dropped.\n");
        f->explanation = str_take(&ex);
        f->fixes = str_take(&fx);
    }
}

// ---- rule: bucket layouts that differ across ranks ------------------------------------------

void rule_layouts(Diag *d) {
    const Model *m = d->m;
    int ref = -1;
    for (int r = 0; r < m->world && ref < 0; r++)
        if (m->ranks[r].present && m->ranks[r].n_layouts) ref = r;
    if (ref < 0) return;
    const ModelRank *a = &m->ranks[ref];
    for (int r = ref + 1; r < m->world; r++) {
        const ModelRank *b = &m->ranks[r];
        if (!b->present || !b->n_layouts) continue;
        int g = 0, bucket = -1;
        for (; g < MIN(a->n_layouts, b->n_layouts); g++) {
            const ModelLayout *la = &a->layouts[g], *lb = &b->layouts[g];
            for (int k = 0; k < MIN(la->n_buckets, lb->n_buckets) && bucket < 0; k++) {
                int na = la->start[k + 1] - la->start[k], nb = lb->start[k + 1] - lb->start[k];
                if (na != nb || memcmp(la->vars + la->start[k], lb->vars + lb->start[k],
                                       sizeof(int) * (size_t)na))
                    bucket = k;
            }
            if (bucket < 0 && la->n_buckets != lb->n_buckets)
                bucket = MIN(la->n_buckets, lb->n_buckets);
            if (bucket >= 0) break;
        }
        bool rebuilt_differs = bucket < 0 && a->n_layouts != b->n_layouts;
        if (bucket < 0 && !rebuilt_differs) continue;
        Finding *f = add_finding(d, FINDING_LAYOUT_MISMATCH, SEVERITY_ERROR);
        add_rank(f, ref);
        add_rank(f, r);
        f->bucket = bucket;
        Str ex = {0}, fx = {0};
        if (rebuilt_differs) {
            const ModelRank *more = a->n_layouts > b->n_layouts ? a : b, *less = more == a ? b : a;
            const ModelLayout *extra = &more->layouts[less->n_layouts];
            f->iter = extra->first_iter;
            set_title(f, "rank %d rebuilt its buckets at iteration %lld, rank %d did not",
                      more->rank, (long long)extra->first_iter, less->rank);
            str_addf(
                &ex,
                "rank %d installed bucket layout %d (%d buckets) at iteration %lld; rank %d kept "
                "layout %d. From then on the ranks' bucket allreduces differ in size and count.\n",
                more->rank, extra->generation, extra->n_buckets, (long long)extra->first_iter,
                less->rank, less->layouts[less->n_layouts - 1].generation);
        } else {
            const ModelLayout *la = &a->layouts[g], *lb = &b->layouts[g];
            f->iter = la->first_iter;
            set_title(
                f, "bucket layouts differ: rank %d and rank %d disagree on bucket %d of layout %d",
                ref, r, bucket, la->generation);
            str_addf(
                &ex, "In layout %d (from iteration %lld) rank %d has %d buckets and rank %d has %d",
                la->generation, (long long)la->first_iter, ref, la->n_buckets, r, lb->n_buckets);
            if (bucket < MIN(la->n_buckets, lb->n_buckets))
                str_addf(&ex,
                         "; bucket %d holds %d parameters (%lld elements) on rank %d and %d (%lld "
                         "elements) on rank %d",
                         bucket, la->start[bucket + 1] - la->start[bucket],
                         (long long)la->numel[bucket], ref,
                         lb->start[bucket + 1] - lb->start[bucket], (long long)lb->numel[bucket],
                         r);
            str_addf(
                &ex,
                ". Allreduces pair by issue order: different buckets mean different sizes in the "
                "same slot (a hang or a size error with Gloo, a hang or memory corruption with "
                "NCCL) or, with equal sizes, gradients averaged with the wrong parameters.\n");
        }
        static const char *keys[] = {"bucket_cap_mb", "find_unused_parameters", "static_graph",
                                     "gradient_as_bucket_view", "model"};
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
            char va[64], vb[64];
            arg_value(a, keys[k], va, sizeof va);
            arg_value(b, keys[k], vb, sizeof vb);
            if (strcmp(va, vb))
                str_addf(
                    &ex,
                    "The ranks' arguments differ: rank %d ran with %s=%s, rank %d with %s=%s.\n",
                    ref, keys[k], va[0] ? va : "(default)", r, keys[k], vb[0] ? vb : "(default)");
        }
        fix_same_model(&fx);
        str_addf(&fx,
                 "TORCH_DISTRIBUTED_DEBUG=DETAIL checks every collective's shapes across ranks and "
                 "raises instead of hanging. Cost: an extra collective per collective: for "
                 "debugging only.\n");
        f->explanation = str_take(&ex);
        f->fixes = str_take(&fx);
        return; // one is enough: every later slot differs too
    }
}
