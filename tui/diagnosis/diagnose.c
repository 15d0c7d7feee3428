/* diagnose.c -- the diagnosis engine (diagnose.h): the helpers the rules share, the rules
 * about the run itself (a dead rank, the first divergent collective, the watchdog's hang, the
 * errors, a straggler, an incomplete trace), the order the rules run in and the links from each
 * consequence to its cause. The gradient rules are in diagnose_grad.c. The texts follow
 * ../shared/docs/ddp-reducer.md §5 (which situation errors, which hangs, and why). */
#include "tui/diagnosis/diagnose.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base.h"       // xcalloc, xrealloc, xstrdup, MIN, MAX
#include "probe/probe.h"        // ProbePhase
#include "tui/diagnosis/diagnose_rules.h" // Diag, Str, the gradient rules
#include "tui/model/paramgroup.h"     // paramgroup_build: one grouping for the views and the texts

// ---- text ----------------------------------------------------------------------------------

void str_addf(Str *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n <= 0) return;
    if (b->len + (size_t)n + 1 > b->cap) {
        b->cap = MAX(2 * b->cap, b->len + (size_t)n + 64);
        b->s = xrealloc(b->s, b->cap);
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

char *str_take(Str *b) {
    return b->s ? b->s : xstrdup("");
}

const char *plural(int64_t n, const char *one, const char *many) {
    return n == 1 ? one : many;
}

// "rank 3", "ranks 0 and 2", "ranks 0-5, 7 and 9": runs of three or more as a-b.
void ranks_text(char *out, size_t len, const int *ranks, int n) {
    size_t at = (size_t)snprintf(out, len, "%s", n == 1 ? "rank " : "ranks ");
    int parts = 0, n_parts = 0;
    for (int i = 0; i < n; n_parts++) { // count the parts first, for the "and"
        int j = i;
        while (j + 1 < n && ranks[j + 1] == ranks[j] + 1)
            j++;
        i = j - i >= 2 ? j + 1 : i + 1;
    }
    for (int i = 0; i < n && at < len;) {
        int j = i;
        while (j + 1 < n && ranks[j + 1] == ranks[j] + 1)
            j++;
        const char *sep = parts == 0 ? "" : parts == n_parts - 1 ? " and " : ", ";
        if (j - i >= 2) {
            at += (size_t)snprintf(out + at, len - at, "%s%d-%d", sep, ranks[i], ranks[j]);
            i = j + 1;
        } else {
            at += (size_t)snprintf(out + at, len - at, "%s%d", sep, ranks[i]);
            i++;
        }
        parts++;
    }
}

// "allreduce of bucket 0, 264524 elements": as the watchdog words it.
void coll_text(char *out, size_t len, const ModelCollective *c) {
    const char *unit = c && c->numel == 1 ? "element" : "elements";
    if (!c)
        snprintf(out, len, "nothing");
    else if (c->bucket >= 0 && !strcmp(c->what, "bucket"))
        snprintf(out, len, "%s of bucket %d, %lld %s", model_op_name(c->op), c->bucket,
                 (long long)c->numel, unit);
    else
        snprintf(out, len, "%s of %s, %lld %s", model_op_name(c->op), c->what, (long long)c->numel,
                 unit);
}

// ---- the model, read the way the rules need it ---------------------------------------------

// Whether parameter p is one DDP expects a gradient for at this iteration: in the layout in
// effect (frozen parameters are in none), or any parameter when no layout was recorded.
uint8_t *expected_bits(const Model *m, const ModelRank *r, const ModelIter *it) {
    uint8_t *bits = xcalloc((size_t)(m->n_params + 7) / 8 + 1, 1);
    const ModelLayout *l = model_rank_layout(r, it);
    for (int p = 0; p < m->n_params; p++)
        if (!l) bits[p >> 3] |= (uint8_t)(1u << (p & 7));
    for (int k = 0; l && k < l->start[l->n_buckets]; k++)
        if (l->vars[k] >= 0 && l->vars[k] < m->n_params)
            bits[l->vars[k] >> 3] |= (uint8_t)(1u << (l->vars[k] & 7));
    return bits;
}

bool names_contain(const Model *m, const int *params, int n, const char *part) {
    for (int i = 0; i < n; i++)
        if (params[i] < m->n_params && strstr(m->param_names[params[i]], part)) return true;
    return false;
}

// The value of key in a rank's "k=v k=v" arguments, copied to out ("" when absent).
void arg_value(const ModelRank *r, const char *key, char *out, size_t len) {
    out[0] = '\0';
    size_t klen = strlen(key);
    for (const char *p = r->args; (p = strstr(p, key)); p += klen)
        if ((p == r->args || p[-1] == ' ') && p[klen] == '=') {
            size_t n = strcspn(p + klen + 1, " ");
            snprintf(out, len, "%.*s", (int)MIN(n, len - 1), p + klen + 1);
            return;
        }
}

bool find_unused_on(const Model *m) {
    for (int r = 0; r < m->world; r++) {
        const ModelRank *mr = &m->ranks[r];
        char v[16];
        arg_value(mr, "find_unused_parameters", v, sizeof v);
        if (!strcmp(v, "true") || !strcmp(v, "True") || !strcmp(v, "1")) return true;
        for (int i = 0; i < mr->n_colls; i++)
            if (!strcmp(mr->colls[i].what, "local_used_map")) return true;
    }
    return false;
}

// ---- the findings being built --------------------------------------------------------------

Finding *add_finding(Diag *d, FindingKind kind, int severity) {
    if (d->n == d->cap)
        d->f = xrealloc(d->f, sizeof(Finding) * (size_t)(d->cap = d->cap ? 2 * d->cap : 8));
    Finding *f = &d->f[d->n++];
    *f = (Finding){.kind = kind, .severity = severity, .iter = -1, .bucket = -1, .cause = -1};
    return f;
}

void set_title(Finding *f, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->title, sizeof f->title, fmt, ap);
    va_end(ap);
}

void add_rank(Finding *f, int rank) {
    int at = 0;
    while (at < f->n_ranks && f->ranks[at] < rank)
        at++;
    if (at < f->n_ranks && f->ranks[at] == rank) return;
    f->ranks = xrealloc(f->ranks, sizeof(int) * (size_t)(f->n_ranks + 1));
    memmove(f->ranks + at + 1, f->ranks + at, sizeof(int) * (size_t)(f->n_ranks - at));
    f->ranks[at] = rank;
    f->n_ranks++;
}

void set_params(Finding *f, const uint8_t *bits, int n_params) {
    f->n_params = 0;
    for (int p = 0; p < n_params; p++)
        f->n_params += model_bit(bits, p);
    f->params = f->n_params ? xcalloc((size_t)f->n_params, sizeof(int)) : NULL;
    for (int p = 0, k = 0; p < n_params; p++)
        if (model_bit(bits, p)) f->params[k++] = p;
}

int first_of(const Diag *d, FindingKind kind, int rank) {
    for (int i = 0; i < d->n; i++) {
        if (d->f[i].kind != kind) continue;
        if (rank < 0) return i;
        for (int k = 0; k < d->f[i].n_ranks; k++)
            if (d->f[i].ranks[k] == rank) return i;
    }
    return -1;
}

// ---- rule: a rank that died -----------------------------------------------------------------

// A rank the launcher drained without an error died (killed, crashed, OOM) or was stopped by
// the launcher after another rank ended. The launcher's meta "exit" and "failed_first" say
// which; without them the drained rank that stopped first outside a collective is taken for
// the one that died.
// When some rank errored or the watchdog saw a hang, the drained ranks are its victims.
// "in its forward", "while waiting in a collective", ...
static const char *phase_words(int phase) {
    switch (phase) {
    case PROBE_PHASE_FORWARD:
        return "in its forward";
    case PROBE_PHASE_BACKWARD:
        return "in its backward";
    case PROBE_PHASE_COLLECTIVE:
        return "while waiting in a collective";
    case PROBE_PHASE_OPTIM:
        return "in its optimiser step";
    case PROBE_PHASE_VALIDATE:
        return "in validation";
    case PROBE_PHASE_CHECKPOINT:
        return "writing a checkpoint";
    case PROBE_PHASE_DATA:
        return "loading data";
    default:
        return "starting up";
    }
}

static void rule_dead(Diag *d) {
    const Model *m = d->m;
    // Without the launcher's exit records, other ranks' errors or a hang explain the stop
    // better; with them, a rank killed by a signal is a dead rank even when a peer then raised
    // ("Connection closed by peer": it follows from the death).
    bool have_exit_any = false;
    for (int r = 0; r < m->world; r++)
        have_exit_any |= m->ranks[r].present && m->ranks[r].exit[0] != '\0';
    for (int r = 0; r < m->world && !have_exit_any; r++)
        if (m->ranks[r].present && (m->ranks[r].error || m->ranks[r].hang)) return;
    // The one that died: the launcher's failed_first, else (older traces, no exit records) the
    // drained rank that stopped first outside a collective.
    int first = -1;
    bool have_exit = false;
    for (int r = 0; r < m->world; r++) {
        const ModelRank *mr = &m->ranks[r];
        if (!mr->present || mr->state != RANK_DEAD) continue;
        have_exit |= mr->exit[0] != '\0';
        if (mr->failed_first) first = r;
    }
    for (int r = 0; r < m->world && first < 0 && !have_exit; r++) {
        const ModelRank *mr = &m->ranks[r];
        if (mr->present && mr->state == RANK_DEAD && mr->phase != PROBE_PHASE_COLLECTIVE &&
            (first < 0 || mr->last_event_ns < m->ranks[first].last_event_ns))
            first = r;
    }
    for (int r = 0; r < m->world; r++) {
        const ModelRank *mr = &m->ranks[r];
        if (!mr->present || mr->state != RANK_DEAD) continue;
        bool died =
            r == first || (have_exit && mr->exit[0] && !strstr(mr->exit, "sent by ddpdbg") &&
                           strcmp(mr->exit, "exitcode 0"));
        if (!died) continue;
        int64_t iter = mr->n_iters ? mr->iters[mr->n_iters - 1].iter : -1;
        int64_t last_seq = mr->n_colls ? mr->colls[mr->n_colls - 1].seq : 0;
        Finding *f = add_finding(d, FINDING_DEAD_RANK, SEVERITY_ERROR);
        add_rank(f, r);
        f->iter = iter;
        set_title(f, "rank %d stopped at iteration %lld %s with no error: it died%s%s%s", r,
                  (long long)iter, phase_words(mr->phase), mr->exit[0] ? " (" : "", mr->exit,
                  mr->exit[0] ? ")" : "");
        Str ex = {0}, fx = {0};
        str_addf(&ex,
                 "rank %d's last event was at iteration %lld, %s; it recorded no error, and the "
                 "launcher drained its flight recorder after it exited: it was killed by a signal, "
                 "crashed or was OOM-killed. Its last collective was #%lld.",
                 r, (long long)iter, phase_words(mr->phase), (long long)last_seq);
        if (!have_exit && !mr->failed_first)
            str_addf(&ex,
                     " (Of the ranks that stopped without an error it stopped first; the launcher "
                     "stops the others once one exits, so their traces end a moment later.)");
        str_addf(&ex, "\n");
        for (int o = 0; o < m->world; o++) {
            const ModelRank *om = &m->ranks[o];
            if (o == r || !om->present || om->pending_seq <= last_seq) continue;
            const ModelCollective *c = model_rank_coll(om, om->pending_seq);
            char a[96];
            coll_text(a, sizeof a, c);
            if (!f->seq) f->seq = om->pending_seq;
            str_addf(&ex, "rank %d was left waiting in #%lld (%s), which rank %d never issued.\n",
                     o, (long long)om->pending_seq, a, r);
        }
        str_addf(
            &fx,
            "Find why it exited: the launcher's line for rank %d (its exit status or signal) and "
            "the kernel log (dmesg: oom-kill). Cost: none.\n",
            r);
        str_addf(
            &fx,
            "With NCCL a dead peer shows only as the watchdog's timeout (10 min by default): keep "
            "the timeout short while debugging (timeout=). Cost: none.\n");
        f->explanation = str_take(&ex);
        f->fixes = str_take(&fx);
    }
}

// ---- rule: the first collective that differs across ranks -----------------------------------

static void rule_mismatch(Diag *d) {
    const Model *m = d->m;
    int64_t max_seq = 0;
    for (int r = 0; r < m->world; r++)
        if (m->ranks[r].present && m->ranks[r].n_colls)
            max_seq = MAX(max_seq, m->ranks[r].colls[m->ranks[r].n_colls - 1].seq);
    for (int64_t s = 1; s <= max_seq; s++) {
        const ModelCollective *ref = NULL;
        bool differs = false;
        for (int r = 0; r < m->world && !differs; r++) {
            const ModelCollective *c = m->ranks[r].present ? model_rank_coll(&m->ranks[r], s) : NULL;
            if (!c) continue;
            if (!ref)
                ref = c;
            else
                differs = c->op != ref->op || c->numel != ref->numel || strcmp(c->what, ref->what);
        }
        if (!differs) continue;
        Finding *f = add_finding(d, FINDING_COLLECTIVE_MISMATCH, SEVERITY_ERROR);
        f->seq = s;
        Str ex = {0}, lines = {0};
        int n_kinds = 0;
        for (int r = 0; r < m->world; r++) { // one line per distinct collective, with its ranks
            const ModelCollective *c = m->ranks[r].present ? model_rank_coll(&m->ranks[r], s) : NULL;
            if (!c) continue;
            add_rank(f, r);
            bool seen = false;
            for (int o = 0; o < r && !seen; o++) {
                const ModelCollective *p = m->ranks[o].present ? model_rank_coll(&m->ranks[o], s) : NULL;
                seen = p && p->op == c->op && p->numel == c->numel && !strcmp(p->what, c->what);
            }
            if (seen) continue;
            int *who = xcalloc((size_t)m->world, sizeof(int));
            int n_who = 0;
            for (int o = r; o < m->world; o++) {
                const ModelCollective *p = m->ranks[o].present ? model_rank_coll(&m->ranks[o], s) : NULL;
                if (p && p->op == c->op && p->numel == c->numel && !strcmp(p->what, c->what))
                    who[n_who++] = o;
            }
            char names[256], a[96];
            ranks_text(names, sizeof names, who, n_who);
            coll_text(a, sizeof a, c);
            str_addf(&lines, "%s%s: %s", n_kinds++ ? "; " : "", names, a);
            if (c->iter >= 0) str_addf(&lines, " (iteration %lld)", (long long)c->iter);
            if (f->iter < 0) f->iter = c->iter;
            if (f->bucket < 0 && c->bucket >= 0) f->bucket = c->bucket;
            free(who);
        }
        set_title(f, "collectives diverge at #%lld: %.200s", (long long)s, lines.s ? lines.s : "");
        str_addf(
            &ex,
            "Up to #%lld the ranks issued the same collectives; at #%lld they differ: %s. "
            "Process groups pair collectives by issue order, not by name or bucket: Gloo waits "
            "for a partner of the same size or fails with a size error, NCCL hangs or corrupts "
            "memory, and no DDP check sees it.\n",
            (long long)s - 1, (long long)s, lines.s ? lines.s : "");
        f->explanation = str_take(&ex);
        Str fx = {0};
        fix_detail_check(&fx);
        f->fixes = str_take(&fx);
        free(lines.s);
        return;
    }
}

void fix_detail_check(Str *fx) {
    str_addf(fx, "TORCH_DISTRIBUTED_DEBUG=DETAIL checks op and shapes across ranks before every "
                 "collective and raises 'Collectives differ' at the first divergence instead of "
                 "hanging. Cost: an extra collective per collective: for debugging only.\n");
}

// ---- rules: the hang record, the errors, a straggler, the trace itself ----------------------

static void rule_hang(Diag *d) {
    const Model *m = d->m;
    for (int r = 0; r < m->world; r++) {
        const ModelRank *mr = &m->ranks[r];
        if (!mr->present || !mr->hang) continue;
        Finding *f = add_finding(d, FINDING_HANG, SEVERITY_ERROR);
        // The launcher's watchdog writes "hang: ...", ddpdbg import-fr "Flight Recorder: ..."
        // (PyTorch's dumps, read after the run).
        const char *text = mr->hang, *who = "the launcher's watchdog saw a hang";
        if (!strncmp(text, "hang: ", 6)) text += 6;
        if (!strncmp(text, "Flight Recorder: ", 17))
            text += 17, who = "PyTorch's Flight Recorder shows a hang";
        size_t first = strcspn(text, "\n");
        set_title(f, "%s: %.*s", who, (int)MIN(first, 200), text);
        if (mr->hang_rank >= 0) add_rank(f, mr->hang_rank);
        f->iter = mr->hang_iter;
        if (mr->hang_rank >= 0 && mr->hang_rank < m->world)
            f->seq = m->ranks[mr->hang_rank].pending_seq;
        f->explanation = xstrdup(mr->hang);
        f->fixes = xstrdup("");
        return; // every rank holds the same record
    }
}

static void rule_errors(Diag *d) {
    const Model *m = d->m;
    for (int r = 0; r < m->world; r++) {
        const ModelRank *mr = &m->ranks[r];
        if (!mr->present || !mr->error) continue;
        Finding *f = add_finding(d, FINDING_ERROR, SEVERITY_ERROR);
        add_rank(f, r);
        f->iter = mr->error_iter;
        const char *dot = strstr(mr->error, ". ");
        size_t first = strcspn(mr->error, "\n");
        if (dot && (size_t)(dot - mr->error) + 1 < first) first = (size_t)(dot - mr->error) + 1;
        set_title(f, "rank %d raised at iteration %lld: %.*s", r, (long long)mr->error_iter,
                  (int)MIN(first, 200), mr->error);
        f->explanation = xstrdup(mr->error);
        f->fixes = xstrdup("");
    }
}

// A rank that arrives last, by at least 0.1 s, at two thirds or more of the collectives where
// anyone arrived that late (at least 3 of them, 1 s of waiting in all), among the collectives
// every present rank issued alike.
static void rule_straggler(Diag *d) {
    const Model *m = d->m;
    if (m->n_present < 2) return;
    int ref = 0;
    while (!m->ranks[ref].present)
        ref++;
    const ModelRank *a = &m->ranks[ref];
    int *n_late = xcalloc((size_t)m->world, sizeof(int));
    int64_t *sum_lag = xcalloc((size_t)m->world, sizeof(int64_t)),
            *max_lag = xcalloc((size_t)m->world, sizeof(int64_t));
    int n_any = 0;
    for (int k = 0; k < a->n_colls; k++) {
        const ModelCollective *c = &a->colls[k];
        if (c->iter < 0) continue;
        int64_t t_min = c->t_launch_ns, t_max = c->t_launch_ns;
        int last = ref;
        bool all = true;
        for (int r = 0; r < m->world && all; r++) {
            if (!m->ranks[r].present) continue;
            const ModelCollective *o = model_rank_coll(&m->ranks[r], c->seq);
            all = o && o->op == c->op && o->numel == c->numel;
            if (!all) break;
            t_min = MIN(t_min, o->t_launch_ns);
            if (o->t_launch_ns > t_max) t_max = o->t_launch_ns, last = r;
        }
        if (!all || t_max - t_min < 100000000) continue;
        n_any++;
        n_late[last]++;
        sum_lag[last] += t_max - t_min;
        max_lag[last] = MAX(max_lag[last], t_max - t_min);
    }
    for (int r = 0; r < m->world; r++) {
        if (n_late[r] < 3 || 3 * n_late[r] < 2 * n_any || sum_lag[r] < 1000000000) continue;
        Finding *f = add_finding(d, FINDING_STRAGGLER, SEVERITY_WARNING);
        add_rank(f, r);
        double mean = (double)sum_lag[r] / n_late[r] / 1e9;
        set_title(
            f, "rank %d is a straggler: it arrived last, %.2f s late on average, at %d collectives",
            r, mean, n_late[r]);
        Str ex = {0};
        str_addf(
            &ex,
            "Of the %d collectives where some rank arrived at least 0.1 s after the first, rank %d "
            "was the last at %d, %.2f s late on average (at worst %.2f s); the others waited "
            "for it in each, %.1f s in all. DDP is not at fault: look at what differs on rank %d "
            "(its data loading, a slower device or host, other jobs on its cores).\n",
            n_any, r, n_late[r], mean, (double)max_lag[r] / 1e9, (double)sum_lag[r] / 1e9, r);
        f->explanation = str_take(&ex);
        f->fixes =
            xstrdup("Balance the work: the same image sizes and batch per rank, enough data-loader "
                    "workers, no other jobs on the straggler's cores. Cost: none.\n");
    }
    free(n_late);
    free(sum_lag);
    free(max_lag);
}

static void rule_incomplete(Diag *d) {
    const Model *m = d->m;
    for (int r = 0; r < m->world; r++) {
        const ModelRank *mr = &m->ranks[r];
        if (mr->present && mr->overruns <= 0) continue;
        Finding *f = add_finding(d, FINDING_TRACE_INCOMPLETE, SEVERITY_WARNING);
        add_rank(f, r);
        Str ex = {0};
        if (!mr->present) {
            set_title(f, "rank %d's trace could not be read", r);
            str_addf(&ex, "%s. Every finding above is about the other ranks only.\n",
                     mr->load_error);
        } else {
            set_title(f, "rank %d's trace dropped %lld events (its ring was full)", r,
                      (long long)mr->overruns);
            str_addf(
                &ex,
                "The probe never overwrites: when the writer falls behind, new events are "
                "dropped and counted. Findings about rank %d may miss what those events said.\n",
                r);
        }
        f->explanation = str_take(&ex);
        f->fixes = xstrdup(
            mr->present ? "A bigger ring (ProbeConfig.capacity) or a faster disk for the trace. "
                          "Cost: 64 bytes of memory per ring record.\n"
                        : "");
    }
}

// ---- the engine ----------------------------------------------------------------------------

// Gloo's words for a peer that went away: its process exited (after an error of its own, or
// killed), which closed its sockets, so this rank's collective failed.
static bool peer_gone(const char *error) {
    return error && (strstr(error, "Connection closed by peer") ||
                     strstr(error, "Connection reset by peer"));
}

// The finding a rank's "Connection closed by peer" follows from: the error of another rank
// that raised something else (the first to stop, when several did), else that rank's death;
// -1 when the trace shows neither.
static int peer_cause(const Diag *d, int rank) {
    const Model *m = d->m;
    int best = -1;
    for (int i = 0; i < d->n; i++) {
        const Finding *g = &d->f[i];
        if (g->kind != FINDING_ERROR || g->ranks[0] == rank || peer_gone(g->explanation)) continue;
        if (best < 0 || m->ranks[g->ranks[0]].last_event_ns <
                            m->ranks[d->f[best].ranks[0]].last_event_ns)
            best = i;
    }
    if (best >= 0) return best;
    for (int i = 0; i < d->n; i++)
        if (d->f[i].kind == FINDING_DEAD_RANK && d->f[i].ranks[0] != rank) return i;
    return -1;
}

// Links each consequence to the root cause it follows from.
static void link_causes(Diag *d) {
    static const FindingKind roots[] = {FINDING_UNUSED_SOME_RANKS, FINDING_UNUSED_ALL_RANKS,
                                        FINDING_SKIPPED_BACKWARD,  FINDING_NO_SYNC_MISMATCH,
                                        FINDING_UNEVEN_BATCHES,    FINDING_LAYOUT_MISMATCH,
                                        FINDING_DEAD_RANK,         FINDING_MODEL_MISMATCH};
    int root = -1;
    for (size_t k = 0; k < sizeof roots / sizeof *roots && root < 0; k++)
        root = first_of(d, roots[k], -1);
    for (int i = 0; i < d->n; i++) {
        Finding *f = &d->f[i];
        if (f->kind == FINDING_ERROR) {
            if (strstr(f->explanation, "appears not to match") ||
                strstr(f->explanation, "DDP expects same model across all ranks"))
                f->cause = first_of(d, FINDING_MODEL_MISMATCH, -1); // construction's check
            if (!strncmp(f->explanation, "Expected to have finished reduction", 35)) {
                int c = first_of(d, FINDING_UNUSED_SOME_RANKS, f->ranks[0]);
                if (c < 0) c = first_of(d, FINDING_UNUSED_ALL_RANKS, f->ranks[0]);
                f->cause = c;
            } else if (peer_gone(f->explanation) && (f->cause = peer_cause(d, f->ranks[0])) >= 0) {
                const Finding *g = &d->f[f->cause];
                Str ex = {0};
                str_addf(&ex,
                         "This follows from rank %d's %s: rank %d's process exited, which "
                         "closed its connections, so rank %d's collective failed. It is a "
                         "consequence, not a cause.\n%s",
                         g->ranks[0], g->kind == FINDING_ERROR ? "error" : "death", g->ranks[0],
                         f->ranks[0], f->explanation);
                free(f->explanation);
                f->explanation = str_take(&ex);
            }
        } else if (f->kind == FINDING_COLLECTIVE_MISMATCH || f->kind == FINDING_HANG) {
            f->cause = root;
        } else if (f->kind == FINDING_DEAD_RANK && root >= 0 && root < i) {
            f->cause = root; // it died in a collective the root cause had already mispaired
        }
    }
}

// Puts the errors that follow from no other finding first, then their consequences (those one
// link away, then two, ...), then warnings and notes, each group in rule order; remaps cause.
static void order_findings(Diag *d) {
    int n = d->n;
    int *key = xcalloc((size_t)MAX(n, 1), sizeof(int)), *order = xcalloc((size_t)MAX(n, 1), sizeof(int)),
        *where = xcalloc((size_t)MAX(n, 1), sizeof(int));
    for (int i = 0; i < n; i++) {
        int depth = 0;
        for (int c = d->f[i].cause; c >= 0 && depth <= n; c = d->f[c].cause)
            depth++;
        key[i] = d->f[i].severity == SEVERITY_ERROR ? depth : n + 1;
        order[i] = i;
    }
    for (int i = 1; i < n; i++) // insertion sort: stable, n is small
        for (int j = i; j > 0 && key[order[j - 1]] > key[order[j]]; j--) {
            int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    Finding *sorted = xcalloc((size_t)MAX(n, 1), sizeof(Finding));
    for (int i = 0; i < n; i++)
        where[order[i]] = i;
    for (int i = 0; i < n; i++) {
        sorted[i] = d->f[order[i]];
        if (sorted[i].cause >= 0) sorted[i].cause = where[sorted[i].cause];
    }
    free(d->f);
    d->f = sorted;
    d->cap = MAX(n, 1);
    free(key);
    free(order);
    free(where);
}

int diagnose(const Model *m, Finding **out) {
    Diag d = {.m = m};
    void (*rules[])(Diag *) = {
        rule_model_mismatch, rule_unused, rule_skipped_backward, rule_no_sync, rule_uneven,
        rule_layouts,
        rule_dead,       rule_mismatch,         rule_hang,    rule_errors, rule_straggler,
        rule_incomplete, rule_find_unused};
    for (size_t k = 0; k < sizeof rules / sizeof *rules; k++)
        rules[k](&d);
    link_causes(&d);
    order_findings(&d);
    if (!d.n) free(d.f), d.f = NULL;
    *out = d.f;
    return d.n;
}

void findings_free(Finding *f, int n) {
    for (int i = 0; i < n; i++) {
        free(f[i].explanation);
        free(f[i].fixes);
        free(f[i].causes);
        free(f[i].ranks);
        free(f[i].params);
    }
    free(f);
}

const char *finding_kind_name(FindingKind kind) {
    static const char *names[FINDING_KIND_COUNT] = {
        [FINDING_UNUSED_SOME_RANKS] = "unused_some_ranks",
        [FINDING_UNUSED_ALL_RANKS] = "unused_all_ranks",
        [FINDING_SKIPPED_BACKWARD] = "skipped_backward",
        [FINDING_UNEVEN_BATCHES] = "uneven_batches",
        [FINDING_NO_SYNC_MISMATCH] = "no_sync_mismatch",
        [FINDING_LAYOUT_MISMATCH] = "layout_mismatch",
        [FINDING_DEAD_RANK] = "dead_rank",
        [FINDING_COLLECTIVE_MISMATCH] = "collective_mismatch",
        [FINDING_HANG] = "hang",
        [FINDING_ERROR] = "error",
        [FINDING_STRAGGLER] = "straggler",
        [FINDING_TRACE_INCOMPLETE] = "trace_incomplete",
        [FINDING_UNUSED_HANDLED] = "unused_handled",
        [FINDING_FIND_UNUSED_IDLE] = "find_unused_idle",
        [FINDING_MODEL_MISMATCH] = "model_mismatch"};
    return kind >= 0 && kind < FINDING_KIND_COUNT ? names[kind] : "?";
}

const char *finding_severity_name(int severity) {
    return severity >= SEVERITY_ERROR ? "error" : severity == SEVERITY_WARNING ? "warning" : "info";
}

int findings_max_severity(const Finding *f, int n) {
    int s = -1;
    for (int i = 0; i < n; i++)
        s = MAX(s, f[i].severity);
    return s;
}

// ---- grouping parameter names (the views' paramgroup.h does the work) -----------------------

int group_param_names(const char *const *names, int n, char ***lines) {
    *lines = NULL;
    if (n <= 0) return 0;
    int *idx = xcalloc((size_t)n, sizeof(int));
    for (int i = 0; i < n; i++)
        idx[i] = i;
    ParamGroup *g;
    int n_groups = paramgroup_build((char *const *)names, idx, n, &g);
    *lines = xcalloc((size_t)MAX(n_groups, 1), sizeof(char *));
    for (int i = 0; i < n_groups; i++) {
        Str line = {0};
        str_addf(&line, "%s  %d %s", g[i].pattern, g[i].n, g[i].n == 1 ? "tensor" : "tensors");
        (*lines)[i] = str_take(&line);
    }
    paramgroup_free(g, n_groups);
    free(idx);
    return n_groups;
}

void group_lines_free(char **lines, int n) {
    for (int i = 0; lines && i < n; i++)
        free(lines[i]);
    free(lines);
}
