/* view_timeline.c -- the Timeline view: per rank two rows over time, compute (F forward,
 * B backward, o optimizer step; blank: data loading, waiting) and communication (= allreduce,
 * ~ other collectives, in flight until completed; # where a collective's GPU kernel ran, from
 * CUPTI; ! where a collective never completed, X where the rank errored), with the time cursor as a column of '|'. + and - zoom around the window's
 * centre, h and l pan, j and k scroll through the ranks. */
#include <stdio.h>
#include <string.h>

#include "kernels/base.h" // MIN, MAX
#include "probe/probe.h"  // ProbeOp
#include "tui/views/facts.h"
#include "tui/views/views.h"

enum { LABEL_W = 10 };

typedef struct {
    int64_t lo, hi; // the window
    int cols;       // columns of the plot
} Axis;

static int col_of(const Axis *a, int64_t t) {
    double f = (double)(t - a->lo) / (double)MAX(a->hi - a->lo, 1);
    return (int)(f * a->cols);
}

// Paints [t0, t1) on row (relative to plot), at least one column when it intersects the window.
static void paint(Screen *s, Rect plot, int row, const Axis *a, int64_t t0, int64_t t1, char ch,
                  Style style) {
    if (t1 < a->lo || t0 > a->hi || t1 < t0) return;
    int c0 = MAX(col_of(a, t0), 0), c1 = MIN(MAX(col_of(a, t1), c0 + 1), a->cols);
    char run[2] = {ch, 0};
    for (int c = c0; c < c1; c++)
        rect_put(s, plot, row, c, style, run);
}

static void draw_rank(Screen *s, Rect plot, int row, const Axis *a, const Model *m, int r,
                      int64_t end) {
    const ModelRank *rk = &m->ranks[r];
    // a rank that stopped did nothing after its last event
    if (rk->state != RANK_RUNNING && rk->state != RANK_WAITING) end = MIN(end, rk->last_event_ns);
    for (int i = 0; i < rk->n_iters; i++) {
        const ModelIter *it = &rk->iters[i];
        const ModelIter *nx = i + 1 < rk->n_iters ? &rk->iters[i + 1] : NULL;
        int64_t next = !nx ? 0 : nx->t_first_ns ? nx->t_first_ns : nx->t_forward_ns;
        // forward ends at FORWARD_END, else when backward begins
        int64_t fwd_end = it->t_forward_end_ns ? it->t_forward_end_ns : it->t_backward_ns;
        if (!fwd_end) fwd_end = next ? next : end;
        if (it->t_forward_ns) paint(s, plot, row, a, it->t_forward_ns, fwd_end, 'F', ST_FWD);
        if (it->t_backward_ns)
            paint(s, plot, row, a, it->t_backward_ns,
                  it->t_backward_end_ns ? it->t_backward_end_ns : end, 'B', ST_BWD);
        // OPTIM_STEP is recorded when the step is done: it began when backward ended
        if (it->t_optim_ns)
            paint(s, plot, row, a, it->t_backward_end_ns ? it->t_backward_end_ns : it->t_optim_ns,
                  it->t_optim_ns, 'o', ST_OPTIM);
    }
    for (int i = 0; i < rk->n_colls; i++) {
        const ModelCollective *c = &rk->colls[i];
        char ch = c->op == PROBE_OP_ALLREDUCE ? '=' : '~';
        if (c->t_done_ns)
            paint(s, plot, row + 1, a, c->t_launch_ns, c->t_done_ns, ch, c->ok ? ST_COMM : ST_BAD);
        else {
            paint(s, plot, row + 1, a, c->t_launch_ns, end, ch, ST_WARN);
            paint(s, plot, row + 1, a, c->t_launch_ns, c->t_launch_ns, '!', ST_BAD);
        }
    }
    for (int i = 0; i < rk->n_gpu; i++) { // kernels under their collective
        const ModelGpu *g = &rk->gpu[i];
        if (g->kind == PROBE_GPU_KERNEL && g->coll_seq > 0 && g->t_start_ns)
            paint(s, plot, row + 1, a, g->t_start_ns, g->t_end_ns ? g->t_end_ns : end, '#',
                  ST_COMM);
    }
    if (rk->state == RANK_ERRORED)
        paint(s, plot, row, a, rk->last_event_ns, rk->last_event_ns, 'X', ST_BAD);
}

void view_timeline(Screen *s, const Layout *lay, const Model *m, Ui *ui) {
    Rect r = lay->main;
    UiCursor *c = &ui->cur[VIEW_TIMELINE];
    int64_t whole = MAX(m->t1_ns - m->t0_ns, 1);
    Axis a;
    a.hi = ui->tl_end_ns ? ui->tl_end_ns : m->t1_ns;
    a.lo = a.hi - (ui->tl_span_ns ? ui->tl_span_ns : whole);
    a.cols = MAX(r.w - LABEL_W, 1);
    char lo[16], hi[16], span[16];
    int64_t w = a.hi - a.lo;
    facts_fmt_at(a.lo - m->t0_ns, w, lo, sizeof lo), facts_fmt_at(a.hi - m->t0_ns, w, hi, sizeof hi);
    facts_fmt_offset(w, w, span, sizeof span);
    r = view_context(
        s, r,
        "%s .. %s (%s, zoom %.0fx)  F fwd B bwd o optim = allreduce ~ other # its GPU kernel "
        "! never done X error",
        lo, hi, span, (double)whole / (double)(a.hi - a.lo));
    int per_page = MAX((r.h - 1) / 2, 1);
    if (m->world > per_page) per_page = MAX((r.h - 2) / 2, 1); // and a line saying which ranks
    c->n = m->world, c->page = per_page;
    c->top = MIN(MAX(c->top, 0), MAX(m->world - per_page, 0));
    Rect plot = rect_make(r.y + 1, r.x + LABEL_W, r.h - 1, a.cols);
    // the axis: a tick every 16 columns
    for (int col = 0; col + 8 <= a.cols; col += 16) {
        char tick[16];
        int64_t t = a.lo + (int64_t)((double)col / a.cols * (double)(a.hi - a.lo));
        snprintf(tick, sizeof tick, "|%s", facts_fmt_at(t - m->t0_ns, w, span, sizeof span));
        rect_put(s, rect_make(r.y, r.x + LABEL_W, 1, a.cols), 0, col, ST_DIM, tick);
    }
    int64_t end = ui_time(ui, m) == INT64_MAX ? (ui->live ? MAX(ui->now_ns, m->t1_ns) : m->t1_ns)
                                              : ui_time(ui, m);
    for (int i = 0; i < per_page && c->top + i < m->world; i++) {
        int rank = c->top + i, row = 2 * i;
        rect_printf(s, r, row + 1, 0, rank == ui->rank ? ST_BOLD : ST_NORMAL, "r%-4d cpu ", rank);
        rect_put(s, r, row + 2, 0, ST_DIM, "      net ");
        if (!m->ranks[rank].present) {
            rect_put(s, plot, row, 1, ST_DIM, "no database");
            continue;
        }
        screen_fill(s, rect_make(plot.y + row, plot.x, 2, plot.w), ' ', ST_NORMAL);
        draw_rank(s, plot, row, &a, m, rank, end);
    }
    if (ui_time(ui, m) != INT64_MAX) {
        int col = col_of(&a, ui_time(ui, m));
        for (int y = 0; col >= 0 && col < a.cols && y < plot.h; y++) {
            Cell *cell = screen_at(s, plot.y + y, plot.x + col);
            if (cell && cell->ch == ' ')
                *cell = (Cell){'|', ST_ACCENT};
            else if (cell)
                cell->style = ST_ACCENT;
        }
    }
    if (m->world > per_page)
        rect_printf(s, r, r.h - 1, 0, ST_DIM, "ranks %d-%d of %d (j/k)", c->top,
                    MIN(c->top + per_page, m->world) - 1, m->world);
}
