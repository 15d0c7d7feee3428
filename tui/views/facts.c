/* facts.c -- what the views read off a Model (facts.h). */
#include "tui/views/facts.h"

#include <stdio.h>
#include <string.h>

#include "kernels/base.h" // MIN, MAX
#include "probe/probe.h"  // ProbePhase, ProbeOp

const char *facts_phase_name(int phase) {
    static const char *names[] = {"idle",    "startup", "data",     "forward",    "backward",
                                  "in coll", "optim",   "validate", "checkpoint", "done"};
    return phase >= 0 && phase < (int)(sizeof names / sizeof *names) ? names[phase] : "?";
}

// Start of an iteration: its first recorded time.
static int64_t iter_start(const ModelIter *it) {
    if (it->t_first_ns) return it->t_first_ns;
    int64_t t[4] = {it->t_forward_ns, it->t_backward_ns, it->t_backward_end_ns, it->t_optim_ns};
    for (int i = 0; i < 4; i++)
        if (t[i]) return t[i];
    return 0;
}

RankNow facts_rank_now(const Model *m, int r, int64_t t_ns) {
    const ModelRank *rk = &m->ranks[r];
    RankNow now = {.state = RANK_DEAD, .iter = -1};
    if (!rk->present) {
        now.missing = true;
        return now;
    }
    // the last collective launched by t_ns, and whether it (or an earlier one) is still open
    int lo = 0, hi = rk->n_colls; // first collective launched after t_ns
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (rk->colls[mid].t_launch_ns <= t_ns)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (int i = lo - 1; i >= 0 && i >= lo - 64; i--) {
        const ModelCollective *c = &rk->colls[i];
        if (i == lo - 1) now.coll_seq = c->seq;
        if (c->t_done_ns == 0 || c->t_done_ns > t_ns || !c->ok) now.open = c; // where it stopped
    }

    if (t_ns >= rk->last_event_ns) { // the present: the Model's own state
        now.state = rk->state;
        now.phase = rk->phase;
        now.last_event_ns = rk->last_event_ns;
        now.iter = rk->n_iters ? rk->iters[rk->n_iters - 1].iter : -1;
        if (rk->state == RANK_ERRORED) now.iter = MAX(now.iter, rk->error_iter);
        if (rk->state == RANK_WAITING) {
            now.wait_seq = rk->wait_seq;
            now.wait_since_ns = rk->phase_t_ns;
            now.wait = model_rank_coll(rk, rk->wait_seq);
        }
        return now;
    }

    // the past: reconstructed from the times the Model keeps
    now.state = RANK_RUNNING;
    now.phase = PROBE_PHASE_STARTUP;
    const ModelIter *cur = NULL;
    for (int i = rk->n_iters - 1; i >= 0; i--) {
        int64_t s = iter_start(&rk->iters[i]);
        if (s && s <= t_ns) {
            cur = &rk->iters[i];
            break;
        }
    }
    int64_t last = 0;
    if (cur) {
        now.iter = cur->iter;
        int64_t t[4] = {cur->t_forward_ns, cur->t_backward_ns, cur->t_backward_end_ns,
                        cur->t_optim_ns};
        int phases[4] = {PROBE_PHASE_FORWARD, PROBE_PHASE_BACKWARD, PROBE_PHASE_OPTIM,
                         PROBE_PHASE_DATA}; // OPTIM_STEP: recorded when the step is done
        for (int i = 0; i < 4; i++)
            if (t[i] && t[i] <= t_ns) now.phase = phases[i], last = MAX(last, t[i]);
    }
    if (lo > 0) {
        const ModelCollective *c = &rk->colls[lo - 1];
        last = MAX(last, c->t_launch_ns);
        if (c->t_done_ns && c->t_done_ns <= t_ns) last = MAX(last, c->t_done_ns);
    }
    now.last_event_ns = last;
    if (now.open) {
        // a bucket allreduce overlaps the backward; anything else blocks the rank
        bool computing = now.phase == PROBE_PHASE_BACKWARD && now.open->bucket >= 0;
        if (!computing) {
            now.state = RANK_WAITING;
            now.phase = PROBE_PHASE_COLLECTIVE;
            now.wait = now.open;
            now.wait_seq = now.open->seq;
            now.wait_since_ns = now.open->t_launch_ns;
        }
    }
    return now;
}

int facts_blocking_bucket(const ModelRank *rk, const ModelIter *it) {
    const ModelLayout *l = model_rank_layout(rk, it);
    if (!l || !it->t_backward_ns || !it->bucket_ready || !it->bucket_launch_ns) return -1;
    int first_unlaunched = -1;
    for (int b = 0; b < l->n_buckets; b++) {
        if (first_unlaunched < 0 && !it->bucket_launch_ns[b])
            first_unlaunched = b;
        else if (first_unlaunched >= 0 && it->bucket_ready[b] >= facts_bucket_size(l, b))
            return first_unlaunched;
    }
    return -1;
}

int facts_first_unlaunched(const ModelRank *rk, const ModelIter *it) {
    const ModelLayout *l = model_rank_layout(rk, it);
    if (!l || !it->t_backward_ns || !it->bucket_launch_ns) return -1;
    for (int b = 0; b < l->n_buckets; b++)
        if (!it->bucket_launch_ns[b]) return b;
    return -1;
}

int facts_pending(const ModelRank *rk, const ModelIter *it, int b, int *out, int cap) {
    const ModelLayout *l = model_rank_layout(rk, it);
    if (!l || b < 0 || b >= l->n_buckets) return 0;
    int n = 0;
    for (int k = l->start[b]; k < l->start[b + 1]; k++) {
        int p = l->vars[k];
        if (model_bit(it->marked, p)) continue;
        if (n < cap) out[n] = p;
        n++;
    }
    return n;
}

static bool same_collective(const ModelCollective *a, const ModelCollective *b) {
    return a->op == b->op && a->bucket == b->bucket && a->numel == b->numel &&
           !strcmp(a->what, b->what);
}

static void describe(const ModelCollective *c, char *buf, size_t n) {
    if (c->bucket >= 0)
        snprintf(buf, n, "#%lld (%s bucket %d)", (long long)c->seq, model_op_name(c->op),
                 c->bucket);
    else
        snprintf(buf, n, "#%lld (%s %s)", (long long)c->seq, model_op_name(c->op), c->what);
}

int64_t facts_first_divergence(const Model *m, int64_t t_ns, char *why, size_t n) {
    if (why && n) why[0] = 0;
    int64_t max_seq = 0;
    for (int r = 0; r < m->world; r++) {
        const ModelRank *rk = &m->ranks[r];
        if (rk->present && rk->n_colls) max_seq = MAX(max_seq, rk->colls[rk->n_colls - 1].seq);
    }
    // a rank that has stopped issuing is the only one whose missing collective means anything;
    // an imported Flight Recorder dump is a snapshot: none of its ranks issues anything more
    bool stopped[m->world > 0 ? m->world : 1];
    for (int r = 0; r < m->world; r++) {
        RankNow now = facts_rank_now(m, r, t_ns);
        stopped[r] = !now.missing && (now.state != RANK_RUNNING || m->ranks[r].snapshot);
    }
    int cursor[m->world > 0 ? m->world
                            : 1]; // per rank: index of the first collective with seq >= s
    memset(cursor, 0, sizeof cursor);
    for (int64_t s = 1; s <= max_seq; s++) {
        const ModelCollective *ref = NULL;
        int ref_rank = -1;
        for (int r = 0; r < m->world; r++) {
            const ModelRank *rk = &m->ranks[r];
            if (!rk->present) continue;
            while (cursor[r] < rk->n_colls && rk->colls[cursor[r]].seq < s)
                cursor[r]++;
            const ModelCollective *c = cursor[r] < rk->n_colls && rk->colls[cursor[r]].seq == s
                                           ? &rk->colls[cursor[r]]
                                           : NULL;
            if (!c) continue;
            if (!ref) {
                ref = c, ref_rank = r;
            } else if (!same_collective(ref, c)) {
                char a[96], b[96];
                describe(ref, a, sizeof a), describe(c, b, sizeof b);
                if (why) snprintf(why, n, "rank %d issued %s, rank %d %s", ref_rank, a, r, b);
                return s;
            }
        }
        if (!ref) continue;
        for (int r = 0; r < m->world; r++) {
            const ModelRank *rk = &m->ranks[r];
            if (!rk->present || !stopped[r]) continue;
            bool has = cursor[r] < rk->n_colls && rk->colls[cursor[r]].seq == s;
            if (!has) {
                char a[96];
                describe(ref, a, sizeof a);
                if (why) { // and who waits for whom: the ranks still in it
                    int waiting[m->world > 0 ? m->world : 1], n_waiting = 0;
                    for (int o = 0; o < m->world; o++) {
                        RankNow on = facts_rank_now(m, o, t_ns);
                        if (o != r && on.state == RANK_WAITING && on.wait_seq == s)
                            waiting[n_waiting++] = o;
                    }
                    char who[64];
                    if (n_waiting) {
                        facts_fmt_ranks(waiting, n_waiting, who, sizeof who);
                        snprintf(why, n, "rank %d never issued %s; %s %s wait%s in it", r, a,
                                 n_waiting == 1 ? "rank" : "ranks", who, n_waiting == 1 ? "s" : "");
                    } else
                        snprintf(why, n, "rank %d never issued %s, which rank %d did", r, a,
                                 ref_rank);
                }
                return s;
            }
        }
    }
    return 0;
}

char *facts_fmt_age(int64_t ns, char *buf, size_t n) {
    double s = (double)MAX(ns, 0) / 1e9;
    if (s < 10)
        snprintf(buf, n, "%.1fs", s);
    else if (s < 120)
        snprintf(buf, n, "%.0fs", s);
    else if (s < 7200)
        snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else
        snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
    return buf;
}

char *facts_fmt_offset(int64_t ns, int64_t span_ns, char *buf, size_t n) {
    double s = (double)ns / 1e9;
    if (span_ns < 2000000000)
        snprintf(buf, n, "%.3fs", s);
    else if (span_ns < 20000000000)
        snprintf(buf, n, "%.2fs", s);
    else if (span_ns < 200000000000 && s < 1000)
        snprintf(buf, n, "%.1fs", s);
    else
        facts_fmt_age(ns, buf, n);
    return buf;
}

char *facts_fmt_at(int64_t ns, int64_t span_ns, char *buf, size_t n) {
    char mag[24];
    facts_fmt_offset(ns < 0 ? -ns : ns, span_ns, mag, sizeof mag);
    bool zero = strspn(mag, "0.") == strcspn(mag, "smh"); // only zeros before the unit
    snprintf(buf, n, "%c%s", ns < 0 && !zero ? '-' : '+', mag);
    return buf;
}

char *facts_fmt_count(int64_t v, char *buf, size_t n) {
    if (v < 10000)
        snprintf(buf, n, "%lld", (long long)v);
    else if (v < 1000000)
        snprintf(buf, n, "%.1fk", (double)v / 1e3);
    else if (v < 1000000000)
        snprintf(buf, n, "%.1fM", (double)v / 1e6);
    else
        snprintf(buf, n, "%.1fG", (double)v / 1e9);
    return buf;
}

char *facts_fmt_ranks(const int *ranks, int count, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < count && len + 1 < n;) {
        int j = i;
        while (j + 1 < count && ranks[j + 1] == ranks[j] + 1)
            j++;
        const char *sep = i ? "," : "";
        int w = j > i ? snprintf(buf + len, n - len, "%s%d-%d", sep, ranks[i], ranks[j])
                      : snprintf(buf + len, n - len, "%s%d", sep, ranks[i]);
        len = MIN(len + (size_t)MAX(w, 0), n - 1);
        i = j + 1;
    }
    return buf;
}

char *facts_first_sentence(const char *text, char *buf, size_t n) {
    size_t len = strcspn(text, "\n");
    const char *dot = strstr(text, ". ");
    if (dot && (size_t)(dot - text) + 1 < len) len = (size_t)(dot - text) + 1;
    len = MIN(len, n - 1);
    memcpy(buf, text, len);
    buf[len] = 0;
    return buf;
}

// The rank that holds up collective seq: the first stopped-or-running rank that never issued it.
static int holder_of(const Model *m, int64_t seq) {
    for (int r = 0; r < m->world; r++)
        if (m->ranks[r].present && !model_rank_coll(&m->ranks[r], seq)) return r;
    return -1;
}

// "; rank 0 never launched it: its bucket 0 still waits for 43 parameters" for the rank that
// holds up c, appended to text.
// Or, when every rank issued it, where their collectives diverge.
static void append_holder(const Model *m, const ModelCollective *c, int64_t t_ns, char *text,
                          size_t n) {
    int h = holder_of(m, c->seq);
    size_t len = strlen(text);
    if (len + 1 >= n) return;
    if (h < 0) {
        char why[256];
        int64_t div = facts_first_divergence(m, t_ns, why, sizeof why);
        if (div)
            snprintf(text + len, n - len, "; the ranks diverge at #%lld: %s", (long long)div, why);
        return;
    }
    const ModelRank *hk = &m->ranks[h];
    const ModelIter *it = model_rank_iter(hk, c->iter);
    int b = it ? facts_blocking_bucket(hk, it) : -1;
    if (b < 0 && c->bucket >= 0 && it) b = c->bucket;
    int pending = b >= 0 ? facts_pending(hk, it, b, NULL, 0) : 0;
    if (b >= 0 && pending)
        snprintf(text + len, n - len,
                 "; rank %d never issued it: its bucket %d waits for %d parameter%s", h, b, pending,
                 pending == 1 ? "" : "s");
    else
        snprintf(text + len, n - len, "; rank %d never issued it", h);
}

// Whether rank r has a collective that completed unsuccessfully (a peer left).
static bool failed_coll(const Model *m, int r) {
    const ModelRank *rk = &m->ranks[r];
    for (int i = 0; i < rk->n_colls; i++)
        if (rk->colls[i].t_done_ns && !rk->colls[i].ok) return true;
    return false;
}

BannerKind facts_banner(const Model *m, int64_t t_ns, int64_t now_ns, char *text, size_t n) {
    text[0] = 0;
    int waiting = -1, errored = -1, dead = -1, hang = -1, running = 0;
    int64_t longest = -1;
    RankNow wnow = {0};
    for (int r = 0; r < m->world; r++) {
        RankNow now = facts_rank_now(m, r, t_ns);
        const ModelRank *rk = &m->ranks[r];
        if (rk->hang && hang < 0 && t_ns >= rk->last_event_ns) hang = r;
        if (now.state == RANK_RUNNING) running++;
        // an error raised because a collective failed follows from another rank's: prefer the rest
        if (now.state == RANK_ERRORED &&
            (errored < 0 || (failed_coll(m, errored) && !failed_coll(m, r))))
            errored = r;
        if (now.state == RANK_DEAD && dead < 0) dead = r;
        if (now.state == RANK_WAITING && now_ns - now.wait_since_ns > longest) {
            longest = now_ns - now.wait_since_ns, waiting = r, wnow = now;
        }
    }
    bool hung = hang >= 0 ||
                (waiting >= 0 && !running && longest > (int64_t)FACTS_HANG_WAIT_S * 1000000000);
    if (hung && waiting >= 0) {
        char age[16], what[96] = "";
        if (wnow.wait)
            describe(wnow.wait, what, sizeof what);
        else
            snprintf(what, sizeof what, "#%lld", (long long)wnow.wait_seq);
        snprintf(text, n, "HANG  rank %d waits in collective %s for %s", waiting, what,
                 facts_fmt_age(longest, age, sizeof age));
        if (wnow.wait) append_holder(m, wnow.wait, t_ns, text, n);
        return BANNER_HANG;
    }
    if (hung) {
        char first[200];
        snprintf(text, n, "HANG  %s",
                 facts_first_sentence(m->ranks[hang].hang, first, sizeof first));
        return BANNER_HANG;
    }
    if (errored >= 0) {
        const ModelRank *rk = &m->ranks[errored];
        const ModelIter *prev = model_rank_iter(rk, rk->error_iter - 1);
        int b = prev && !prev->finalized ? facts_first_unlaunched(rk, prev) : -1;
        char first[200];
        if (b >= 0) {
            int pending = facts_pending(rk, prev, b, NULL, 0);
            snprintf(text, n,
                     "ERROR  rank %d at iter %lld: bucket %d of iter %lld never launched, %d "
                     "param%s missing",
                     errored, (long long)rk->error_iter, b, (long long)prev->iter, pending,
                     pending == 1 ? "" : "s");
        } else {
            snprintf(
                text, n, "ERROR  rank %d at iteration %lld: %s", errored, (long long)rk->error_iter,
                rk->error ? facts_first_sentence(rk->error, first, sizeof first) : "(no text)");
        }
        // where the others were left
        for (int r = 0; r < m->world; r++) {
            RankNow now = facts_rank_now(m, r, t_ns);
            size_t len = strlen(text);
            if (r == errored || !now.open || now.state == RANK_RUNNING || len + 1 >= n) continue;
            char what[96];
            describe(now.open, what, sizeof what);
            snprintf(text + len, n - len, "; rank %d %s in %s", r,
                     now.state == RANK_WAITING ? "waits" : "stopped", what);
        }
        return BANNER_ERROR;
    }
    if (dead >= 0) {
        RankNow now = facts_rank_now(m, dead, t_ns);
        if (now.missing)
            snprintf(text, n, "DEAD  rank %d: %s", dead, m->ranks[dead].load_error);
        else
            snprintf(text, n, "DEAD  rank %d stopped at iteration %lld without an error", dead,
                     (long long)now.iter);
        return BANNER_DEAD;
    }
    return BANNER_NONE;
}
