/* view_ranks.c -- the Ranks view: one row per rank with its state (running / waiting in
 * collective N for X s / finished / errored / dead), iteration, phase, the age of its newest
 * event and its last collective; the side panel shows the selected rank: where it is, its
 * batch and backward at the selected iteration, and its error text. */
#include <stdio.h>
#include <string.h>

#include "kernels/base.h" // MIN, MAX
#include "tui/views/facts.h"
#include "tui/views/views.h"

static Style state_style(RankState st) {
    switch (st) {
    case RANK_RUNNING:
        return ST_NORMAL;
    case RANK_WAITING:
        return ST_WARN;
    case RANK_FINISHED:
        return ST_OK;
    case RANK_ERRORED:
    case RANK_DEAD:
        return ST_BAD;
    }
    return ST_NORMAL;
}

static void coll_text(const ModelCollective *c, int64_t seq, char *buf, size_t n) {
    if (!c)
        snprintf(buf, n, "collective #%lld", (long long)seq);
    else if (c->bucket >= 0)
        snprintf(buf, n, "%s #%lld (bucket %d)", model_op_name(c->op), (long long)c->seq,
                 c->bucket);
    else
        snprintf(buf, n, "%s #%lld (%s)", model_op_name(c->op), (long long)c->seq, c->what);
}

// The detail column: what the rank is doing or why it stopped.
static void rank_detail(const Model *m, int r, const RankNow *now, int64_t clock, char *buf,
                        size_t n) {
    const ModelRank *rk = &m->ranks[r];
    char what[96], age[16];
    buf[0] = 0;
    if (now->missing) {
        snprintf(buf, n, "%s", rk->load_error[0] ? rk->load_error : "no database");
        return;
    }
    switch (now->state) {
    case RANK_WAITING:
        coll_text(now->wait, now->wait_seq, what, sizeof what);
        snprintf(buf, n, "in %s for %s", what,
                 facts_fmt_age(clock - now->wait_since_ns, age, sizeof age));
        break;
    case RANK_ERRORED:
        if (rk->error) facts_first_sentence(rk->error, buf, n);
        break;
    case RANK_DEAD:
        if (now->open) {
            coll_text(now->open, now->open->seq, what, sizeof what);
            snprintf(buf, n, "stopped in %s", what);
        } else
            snprintf(buf, n, "stopped without an error");
        break;
    case RANK_FINISHED:
        snprintf(buf, n, "closed cleanly");
        break;
    case RANK_RUNNING:
        if (now->open) {
            coll_text(now->open, now->open->seq, what, sizeof what);
            snprintf(buf, n, "%s in flight", what);
        }
        break;
    }
}

static void ranks_side(Screen *s, Rect side, const Model *m, const Ui *ui, int64_t t) {
    const ModelRank *rk = &m->ranks[ui->rank];
    char title[96];
    snprintf(title, sizeof title, "rank %d", ui->rank);
    Rect r = view_side_title(s, side, title);
    if (!rk->present) {
        rect_wrap(s, r, 0, 0, ST_BAD,
                  rk->load_error[0] ? rk->load_error : "no database for this rank");
        return;
    }
    RankNow now = facts_rank_now(m, ui->rank, t);
    int row = view_para(s, r, 0, ST_NORMAL, "pid %d on %s; %s at iteration %lld, phase %s", rk->pid,
                        rk->host, model_state_name(now.state), (long long)now.iter,
                        facts_phase_name(now.phase));
    const ModelIter *it = model_rank_iter(rk, ui->iter);
    if (it) {
        char line[256];
        int len =
            snprintf(line, sizeof line, "iteration %lld: batch of %d image%s, %d boxes",
                     (long long)ui->iter, it->n_images, it->n_images == 1 ? "" : "s", it->n_boxes);
        if (it->t_backward_ns)
            snprintf(line + len, sizeof line - (size_t)len,
                     "; backward: %d/%d parameters reported%s", it->n_marked, m->n_params,
                     it->finalized ? ", finalized" : ", NOT finalized");
        row = view_para(s, r, row, it->n_boxes == 0 && it->n_images ? ST_WARN : ST_NORMAL, "%s",
                        line);
        int b = facts_blocking_bucket(rk, it);
        if (b >= 0)
            row = view_para(s, r, row, ST_BAD,
                            "bucket %d blocks every later bucket: %d parameters pending", b,
                            facts_pending(rk, it, b, NULL, 0));
    } else {
        row = view_para(s, r, row, ST_DIM, "no events at iteration %lld", (long long)ui->iter);
    }
    if (rk->error && row < r.h) {
        rect_put(s, r, row++, 0, ST_BAD, "error:");
        row += rect_wrap(s, rect_below(r, row), 0, 0, ST_NORMAL, rk->error);
    } else if (rk->hang && row < r.h) {
        rect_put(s, r, row++, 0, ST_WARN, "watchdog:");
        row += rect_wrap(s, rect_below(r, row), 0, 0, ST_NORMAL, rk->hang);
    }
    if (row < r.h) {
        char args[1100];
        snprintf(args, sizeof args, "args: %s", rk->args);
        rect_wrap(s, rect_below(r, row), 0, 0, ST_DIM, args);
    }
}

void view_ranks(Screen *s, const Layout *l, const Model *m, Ui *ui) {
    Rect r = l->main;
    int64_t t = ui_time(ui, m);
    int64_t clock = t == INT64_MAX ? ui->now_ns : t;
    UiCursor *c = &ui->cur[VIEW_RANKS];
    c->sel = ui->rank;
    view_clamp(c, m->world, r.h - 1);
    rect_printf(s, r, 0, 0, ST_BOLD, "%4s  %-8s %5s %-9s %6s %5s  %s", "rank", "state", "iter",
                "phase", "age", "coll", "detail");
    for (int i = 0; i < r.h - 1 && c->top + i < m->world; i++) {
        int rank = c->top + i, row = i + 1;
        RankNow now = facts_rank_now(m, rank, t);
        char age[16] = "-", iter[24] = "-", seq[24] = "-", detail[256];
        if (now.last_event_ns) facts_fmt_age(clock - now.last_event_ns, age, sizeof age);
        if (now.iter >= 0) snprintf(iter, sizeof iter, "%lld", (long long)now.iter);
        if (now.coll_seq) snprintf(seq, sizeof seq, "%lld", (long long)now.coll_seq);
        rank_detail(m, rank, &now, clock, detail, sizeof detail);
        rect_printf(s, r, row, 0, ST_NORMAL, "%4d", rank);
        rect_put(s, r, row, 6, state_style(now.state),
                 now.missing ? "missing" : model_state_name(now.state));
        rect_printf(s, r, row, 15, ST_NORMAL, "%5s %-9.9s %6s %5s", iter,
                    now.missing ? "-" : facts_phase_name(now.phase), age, seq);
        rect_put_fit(s, r, row, 45, r.w - 45, state_style(now.state) == ST_BAD ? ST_BAD : ST_NORMAL,
                     detail);
        if (rank == ui->rank) screen_restyle(s, r.y + row, r.x, r.w, ST_SELECT);
    }
    if (!rect_empty(l->side)) ranks_side(s, l->side, m, ui, t);
}

void view_ranks_enter(Ui *ui, const Model *m) {
    ui->back_view = VIEW_RANKS;
    ui->view = VIEW_BUCKETS;
    ui->cur[VIEW_BUCKETS].sel = ui->rank;
}
