/* view_buckets.c -- the Buckets view: a rank x bucket grid for the selected iteration, each
 * cell "ready/total" and a flag (D done, L launched and in flight, R ready but not launched,
 * * the bucket that blocks every later one); the side panel shows the selected cell: its size,
 * its collective and the parameters it still waits for, grouped. Launches and completions are
 * shown as of the time cursor; ready counts are the iteration's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base.h" // MIN, MAX, xmalloc
#include "tui/views/facts.h"
#include "tui/model/paramgroup.h"
#include "tui/views/views.h"

enum { CELL_W = 11, RANK_W = 6 };

typedef enum { CELL_PENDING, CELL_READY, CELL_LAUNCHED, CELL_DONE } CellState;

static CellState cell_state(const ModelIter *it, const ModelLayout *l, int b, int64_t t) {
    if (it->bucket_done_ns && it->bucket_done_ns[b] && it->bucket_done_ns[b] <= t) return CELL_DONE;
    if (it->bucket_launch_ns && it->bucket_launch_ns[b] && it->bucket_launch_ns[b] <= t)
        return CELL_LAUNCHED;
    if (it->bucket_ready && it->bucket_ready[b] >= facts_bucket_size(l, b)) return CELL_READY;
    return CELL_PENDING;
}

static void buckets_side(Screen *s, Rect side, const Model *m, const Ui *ui, int64_t t) {
    const ModelRank *rk = &m->ranks[ui->rank];
    const ModelIter *it = model_rank_iter(rk, ui->iter);
    const ModelLayout *l = model_rank_layout(rk, it);
    char title[128];
    snprintf(title, sizeof title, "rank %d, iteration %lld, bucket %d", ui->rank,
             (long long)ui->iter, ui->bucket);
    Rect r = view_side_title(s, side, title);
    if (!l || ui->bucket >= l->n_buckets) {
        rect_put(s, r, 0, 0, ST_DIM, "no such bucket on this rank in this iteration");
        return;
    }
    int b = ui->bucket, total = facts_bucket_size(l, b), row = 0;
    char numel[16];
    CellState st = cell_state(it, l, b, t);
    static const char *state_text[] = {"waiting for gradients", "ready, not launched",
                                       "launched, in flight", "done"};
    row = view_para(
        s, r, row, ST_NORMAL, "%d/%d parameters ready, %s elements, layout generation %d: %s",
        it->bucket_ready ? it->bucket_ready[b] : 0, total,
        facts_fmt_count(l->numel[b], numel, sizeof numel), l->generation, state_text[st]);
    if (it->bucket_seq && it->bucket_seq[b]) {
        char at[16], dt[16];
        row = view_para(
            s, r, row, ST_NORMAL, "allreduce #%lld launched at +%s%s%s",
            (long long)it->bucket_seq[b],
            facts_fmt_age(it->bucket_launch_ns[b] - m->t0_ns, at, sizeof at),
            it->bucket_done_ns[b] ? ", done after " : ", never completed",
            it->bucket_done_ns[b]
                ? facts_fmt_age(it->bucket_done_ns[b] - it->bucket_launch_ns[b], dt, sizeof dt)
                : "");
    }
    if (facts_blocking_bucket(rk, it) == b)
        row = view_para(s, r, row, ST_BAD,
                        "blocks every later bucket: buckets launch strictly in index order");
    int *pending = xmalloc((size_t)MAX(total, 1) * sizeof(int));
    int n = facts_pending(rk, it, b, pending, total);
    if (n && row < r.h) {
        rect_printf(s, r, row++, 0, ST_BOLD, "never reported (%d):", n);
        ParamGroup *g;
        int ng = paramgroup_build(m->param_names, pending, n, &g);
        for (int i = 0; i < ng && row < r.h; i++, row++) {
            char count[24];
            snprintf(count, sizeof count, "  %d tensor%s", g[i].n, g[i].n == 1 ? "" : "s");
            int cw = (int)strlen(count);
            rect_put_fit(s, r, row, 2, r.w - 2 - cw, ST_NORMAL, g[i].pattern);
            rect_put_right(s, r, row, ST_DIM, count);
        }
        paramgroup_free(g, ng);
    }
    free(pending);
}

void view_buckets(Screen *s, const Layout *lay, const Model *m, Ui *ui) {
    Rect r = lay->main;
    int64_t t = ui_time(ui, m);
    UiCursor *c = &ui->cur[VIEW_BUCKETS];
    c->sel = ui->rank;
    int max_buckets = 0, generation = -1;
    for (int rank = 0; rank < m->world; rank++) {
        const ModelIter *it = model_rank_iter(&m->ranks[rank], ui->iter);
        const ModelLayout *l = model_rank_layout(&m->ranks[rank], it);
        if (l && l->n_buckets > max_buckets) max_buckets = l->n_buckets, generation = l->generation;
    }
    r = view_context(
        s, r,
        "iteration %lld: %d bucket%s (layout generation %d)  D done L launched R ready * blocks",
        (long long)ui->iter, max_buckets, max_buckets == 1 ? "" : "s", generation);
    view_clamp(c, m->world, r.h - 1);
    ui->bucket = MIN(MAX(ui->bucket, 0), MAX(max_buckets - 1, 0));
    int fit = MAX((r.w - RANK_W) / CELL_W, 1);
    if (ui->bucket < c->col) c->col = ui->bucket;
    if (ui->bucket >= c->col + fit) c->col = ui->bucket - fit + 1;
    c->col = MAX(0, MIN(c->col, MAX(max_buckets - fit, 0)));

    rect_put(s, r, 0, 0, ST_BOLD, " rank");
    for (int k = 0; k < fit && c->col + k < max_buckets; k++) {
        char head[16];
        int len = snprintf(head, sizeof head, "b%d", c->col + k);
        rect_put(s, r, 0, RANK_W + k * CELL_W + CELL_W - 4 - len, ST_BOLD, head);
    }
    if (c->col > 0) rect_put(s, r, 0, RANK_W - 1, ST_DIM, "<");
    if (c->col + fit < max_buckets) rect_put_right(s, r, 0, ST_DIM, ">");
    for (int i = 0; i < r.h - 1 && c->top + i < m->world; i++) {
        int rank = c->top + i, row = i + 1;
        const ModelRank *rk = &m->ranks[rank];
        const ModelIter *it = model_rank_iter(rk, ui->iter);
        const ModelLayout *l = model_rank_layout(rk, it);
        rect_printf(s, r, row, 0, ST_NORMAL, "%5d", rank);
        if (!l || !it->t_backward_ns) {
            rect_put(s, r, row, RANK_W, ST_DIM,
                     !rk->present ? "  no database"
                     : !it        ? "  no events in this iteration"
                                  : "  no backward in this iteration");
        } else {
            int blocker = facts_blocking_bucket(rk, it);
            for (int k = 0; k < fit && c->col + k < l->n_buckets; k++) {
                int b = c->col + k;
                CellState st = cell_state(it, l, b, t);
                static const char flag[] = {' ', 'R', 'L', 'D'};
                static const Style style[] = {ST_NORMAL, ST_WARN, ST_WARN, ST_OK};
                char cell[32];
                snprintf(cell, sizeof cell, "%d/%d %c%c",
                         it->bucket_ready ? it->bucket_ready[b] : 0, facts_bucket_size(l, b),
                         flag[st], b == blocker ? '*' : ' ');
                int x = RANK_W + k * CELL_W + CELL_W - 1 - (int)strlen(cell);
                rect_put(s, r, row, x, b == blocker ? ST_BAD : style[st], cell);
                if (rank == ui->rank && b == ui->bucket)
                    screen_restyle(s, r.y + row, r.x + RANK_W + k * CELL_W, CELL_W - 1, ST_SELECT);
            }
        }
        if (rank == ui->rank) screen_restyle(s, r.y + row, r.x, RANK_W - 1, ST_SELECT);
    }
    if (!rect_empty(lay->side)) buckets_side(s, lay->side, m, ui, t);
}

void view_buckets_enter(Ui *ui, const Model *m) {
    ui->back_view = VIEW_BUCKETS;
    ui->view = VIEW_PARAMS;
    ui->cur[VIEW_PARAMS].sel = ui->cur[VIEW_PARAMS].top = 0;
    ui->expanded = -1;
}
