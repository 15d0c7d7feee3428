/* view_collectives.c -- the Collectives view: the ranks' collective sequences side by side,
 * one row per sequence number (op, what or bucket, elements, state per rank), the first
 * divergence highlighted and explained on the context line; h/l scroll through the ranks. The
 * side panel lists the selected collective on every rank. As of the time cursor: what was
 * launched later is not shown. */
#include <stdio.h>
#include <string.h>

#include "kernels/base.h" // MIN, MAX
#include "probe/probe.h"  // ProbeOp
#include "tui/views/facts.h"
#include "tui/views/views.h"

enum { SEQ_W = 10, COLL_CELL_W = 35 };

static const char *op_short(int op) {
    switch (op) {
    case PROBE_OP_ALLREDUCE:
        return "allred";
    case PROBE_OP_BROADCAST:
        return "bcast";
    case PROBE_OP_ALLGATHER:
        return "gather";
    case PROBE_OP_BARRIER:
        return "barrier";
    }
    return "?";
}

// The collective as rank rk had it at t: NULL when not launched by then.
static const ModelCollective *coll_at(const ModelRank *rk, int64_t seq, int64_t t) {
    const ModelCollective *c = rk->present ? model_rank_coll(rk, seq) : NULL;
    return c && c->t_launch_ns <= t ? c : NULL;
}

static const char *coll_state(const ModelCollective *c, int64_t t, Style *style) {
    if (c->t_done_ns && c->t_done_ns <= t) {
        *style = c->ok ? ST_NORMAL : ST_BAD;
        return c->ok ? "done" : "FAIL";
    }
    *style = ST_WARN;
    return "open";
}

static void cell_text(const ModelCollective *c, int64_t t, char *buf, size_t n, Style *style) {
    char what[32], numel[16];
    if (c->bucket >= 0)
        snprintf(what, sizeof what, "bucket %d", c->bucket);
    else
        snprintf(what, sizeof what, "%s", c->what);
    const char *st = coll_state(c, t, style);
    snprintf(buf, n, "%-7s %-14.14s %6s %-4s", op_short(c->op), what,
             facts_fmt_count(c->numel, numel, sizeof numel), st);
}

static void colls_side(Screen *s, Rect side, const Model *m, const Ui *ui, int64_t seq, int64_t t) {
    char title[64];
    snprintf(title, sizeof title, "collective #%lld on every rank", (long long)seq);
    Rect r = view_side_title(s, side, title);
    int first = MAX(0, MIN(ui->rank, m->world - r.h));
    for (int i = 0; i < r.h && first + i < m->world; i++) {
        int rank = first + i;
        const ModelCollective *c = coll_at(&m->ranks[rank], seq, t);
        rect_printf(s, r, i, 0, ST_NORMAL, "rank %-4d", rank);
        if (!c) {
            rect_put(s, r, i, 10, ST_DIM, m->ranks[rank].present ? "never issued" : "no database");
            continue;
        }
        char cell[64], at[16], dt[16] = "";
        Style style;
        cell_text(c, t, cell, sizeof cell, &style);
        if (c->t_done_ns && c->t_done_ns <= t)
            facts_fmt_age(c->t_done_ns - c->t_launch_ns, dt, sizeof dt);
        rect_printf(s, r, i, 10, style, "%s  iter %lld  at +%s%s%s", cell, (long long)c->iter,
                    facts_fmt_age(c->t_launch_ns - m->t0_ns, at, sizeof at), dt[0] ? " took " : "",
                    dt);
    }
}

// The first sequence number any rank recorded: the rows start there (a trace's first
// collective is #2 when the probe started after the construction's allgather, and a Flight
// Recorder import starts wherever PyTorch's ring did). 1 when nothing was recorded.
static int64_t first_seq(const Model *m) {
    int64_t lo = 0;
    for (int rank = 0; rank < m->world; rank++) {
        const ModelRank *rk = &m->ranks[rank];
        for (int i = 0; rk->present && i < rk->n_colls; i++)
            if (rk->colls[i].seq > 0 && (!lo || rk->colls[i].seq < lo)) lo = rk->colls[i].seq;
    }
    return lo ? lo : 1;
}

void view_collectives(Screen *s, const Layout *lay, const Model *m, Ui *ui) {
    Rect r = lay->main;
    int64_t t = ui_time(ui, m);
    UiCursor *c = &ui->cur[VIEW_COLLECTIVES];
    int64_t max_seq = 0;
    for (int rank = 0; rank < m->world; rank++) {
        const ModelRank *rk = &m->ranks[rank];
        for (int i = rk->n_colls - 1; rk->present && i >= 0; i--)
            if (rk->colls[i].t_launch_ns <= t) {
                max_seq = MAX(max_seq, rk->colls[i].seq);
                break;
            }
    }
    char why[256];
    int64_t div = facts_first_divergence(m, t, why, sizeof why);
    if (div)
        r = view_context(s, r, "first divergence at #%lld: %s", (long long)div, why);
    else
        r = view_context(s, r, "no divergence: every rank issued the same collectives, #%lld to #%lld",
                         (long long)first_seq(m), (long long)max_seq);
    int64_t base = first_seq(m); // row i shows #base + i
    int n_rows = max_seq >= base ? (int)(max_seq - base + 1) : 0;
    bool first_frame = c->n == 0 && c->page == 0;
    view_clamp(c, n_rows, r.h - 1);
    if (first_frame && div) {
        c->sel = (int)(div - base);
        view_clamp(c, n_rows, r.h - 1);
    }
    int fit = MAX((r.w - SEQ_W) / COLL_CELL_W, 1);
    c->col = MIN(MAX(c->col, 0), MAX(m->world - fit, 0));
    rect_put(s, r, 0, 0, ST_BOLD, "  seq  it");
    for (int k = 0; k < fit && c->col + k < m->world; k++)
        rect_printf(s, r, 0, SEQ_W + k * COLL_CELL_W, ST_BOLD, "rank %d%s", c->col + k,
                    k == 0 && c->col > 0 ? "  (h: more)" : "");
    if (c->col + fit < m->world) rect_put_right(s, r, 0, ST_DIM, "(l: more) ");
    for (int i = 0; i < r.h - 1 && c->top + i < n_rows; i++) {
        int64_t seq = base + c->top + i;
        int row = i + 1;
        int64_t iter = 0;
        bool have_iter = false;
        for (int k = 0; k < fit && c->col + k < m->world; k++) {
            const ModelCollective *cc = coll_at(&m->ranks[c->col + k], seq, t);
            int x = SEQ_W + k * COLL_CELL_W;
            if (!cc) {
                rect_put(s, r, row, x, ST_DIM, "-");
                continue;
            }
            if (!have_iter) iter = cc->iter, have_iter = true;
            char cell[64];
            Style style;
            cell_text(cc, t, cell, sizeof cell, &style);
            rect_put_fit(s, r, row, x, COLL_CELL_W - 1, style, cell);
        }
        char it[16] = "";
        if (have_iter) snprintf(it, sizeof it, "%lld", (long long)iter);
        rect_printf(s, r, row, 0, ST_NORMAL, "%c%4lld %3s", seq == div ? '>' : ' ', (long long)seq,
                    it);
        if (seq == div) screen_restyle(s, r.y + row, r.x, r.w, ST_BAD);
        if (c->top + i == c->sel) screen_restyle(s, r.y + row, r.x, r.w, ST_SELECT);
    }
    if (!max_seq) rect_put(s, r, 1, 2, ST_DIM, "no collective recorded yet");
    if (!rect_empty(lay->side) && max_seq) colls_side(s, lay->side, m, ui, base + c->sel, t);
}

void view_collectives_enter(Ui *ui, const Model *m) {
    int64_t seq = first_seq(m) + ui->cur[VIEW_COLLECTIVES].sel;
    for (int rank = 0; rank < m->world; rank++) {
        const ModelCollective *c = m->ranks[rank].present ? model_rank_coll(&m->ranks[rank], seq) : NULL;
        if (!c || c->bucket < 0) continue;
        ui->back_view = VIEW_COLLECTIVES;
        ui->view = VIEW_BUCKETS;
        ui->iter = c->iter;
        ui->bucket = c->bucket;
        return;
    }
    snprintf(ui->message, sizeof ui->message, "collective #%lld is not a bucket's", (long long)seq);
}
