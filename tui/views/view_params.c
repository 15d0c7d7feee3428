/* view_params.c -- the Parameters view: for the selected rank and iteration, the parameters
 * that never reported (no MARK_READY), grouped into brace patterns (paramgroup.h), each with
 * its count and the ranks that did report all of it; Enter lists a group member by member.
 * When every parameter reported, the ones find_unused_parameters marked as unused are listed
 * the same way. With a search (/), every parameter whose name contains the text, with its
 * shape, bucket and the ranks that reported it. The side panel details the selected row. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base.h" // MIN, MAX, xmalloc
#include "tui/views/facts.h"
#include "tui/model/paramgroup.h"
#include "tui/views/views.h"

typedef struct {
    int group;  // index into the groups
    int member; // index into its members, -1 for the group's own row
} Item;

// Ranks other than skip whose iteration marked every one of idx[0..n), as a list; "none".
static void reported_by(const Model *m, int64_t iter, int skip, const int *idx, int n, char *buf,
                        size_t cap) {
    int *ranks = xmalloc((size_t)MAX(m->world, 1) * sizeof(int)), k = 0;
    for (int r = 0; r < m->world; r++) {
        if (r == skip) continue;
        const ModelIter *it = model_rank_iter(&m->ranks[r], iter);
        if (!it || !it->t_backward_ns) continue;
        bool all = true;
        for (int i = 0; i < n && all; i++)
            all = model_bit(it->marked, idx[i]);
        if (all) ranks[k++] = r;
    }
    if (k)
        facts_fmt_ranks(ranks, k, buf, cap);
    else
        snprintf(buf, cap, "none");
    free(ranks);
}

static int bucket_of(const ModelLayout *l, int p) {
    for (int b = 0; l && b < l->n_buckets; b++)
        for (int k = l->start[b]; k < l->start[b + 1]; k++)
            if (l->vars[k] == p) return b;
    return -1;
}

static void params_side(Screen *s, Rect side, const Model *m, const Ui *ui, const ModelIter *it,
                        const ModelLayout *l, const int *idx, int n, const char *what) {
    Rect r = view_side_title(s, side, what);
    int row = 0;
    if (it && it->n_images)
        row = view_para(s, r, row, it->n_boxes ? ST_NORMAL : ST_WARN,
                        "rank %d's batch at iteration %lld: %d image%s, %d ground-truth box%s%s",
                        ui->rank, (long long)ui->iter, it->n_images, it->n_images == 1 ? "" : "s",
                        it->n_boxes, it->n_boxes == 1 ? "" : "es",
                        it->n_boxes ? "" : ": the box losses are constants");
    int64_t numel = 0;
    int buckets[64], nb = 0;
    for (int i = 0; i < n; i++) {
        numel += m->param_numel ? m->param_numel[idx[i]] : 0;
        int b = bucket_of(l, idx[i]);
        bool seen = false;
        for (int k = 0; k < nb; k++)
            seen |= buckets[k] == b;
        if (!seen && b >= 0 && nb < 64) buckets[nb++] = b;
    }
    char el[16], bl[128] = "", rb[128];
    for (int k = 0, len = 0; k < nb && len < 100; k++)
        len += snprintf(bl + len, sizeof bl - (size_t)len, "%s%d", k ? "," : "", buckets[k]);
    reported_by(m, ui->iter, ui->rank, idx, n, rb, sizeof rb);
    row = view_para(s, r, row, ST_NORMAL,
                    "%d tensor%s, %s elements, in bucket%s %s; reported by rank%s %s", n,
                    n == 1 ? "" : "s", facts_fmt_count(numel, el, sizeof el), nb == 1 ? "" : "s",
                    bl[0] ? bl : "-", strchr(rb, ',') || strchr(rb, '-') ? "s" : "", rb);
    for (int i = 0; i < n && row < r.h; i++, row++) {
        int p = idx[i];
        bool ok = it && model_bit(it->marked, p);
        rect_printf(s, r, row, 0, ST_DIM, "%5d", p);
        int c = rect_put_fit(s, r, row, 6, r.w - 26, ok ? ST_NORMAL : ST_BAD, m->param_names[p]);
        rect_printf(s, r, row, c + 1, ST_DIM, "%s", m->param_shapes ? m->param_shapes[p] : "");
    }
}

void view_params(Screen *s, const Layout *lay, const Model *m, Ui *ui) {
    Rect r = lay->main;
    UiCursor *c = &ui->cur[VIEW_PARAMS];
    const ModelRank *rk = &m->ranks[ui->rank];
    const ModelIter *it = model_rank_iter(rk, ui->iter);
    const ModelLayout *l = model_rank_layout(rk, it);
    int *idx = xmalloc((size_t)MAX(m->n_params, 1) * sizeof(int)), n = 0;

    if (ui->search[0]) { // every matching parameter, one per row
        for (int p = 0; p < m->n_params; p++)
            if (strcasestr(m->param_names[p], ui->search)) idx[n++] = p;
        r = view_context(s, r, "rank %d, iteration %lld: %d of %d parameters match \"%s\"",
                         ui->rank, (long long)ui->iter, n, m->n_params, ui->search);
        view_clamp(c, n, r.h - 1);
        rect_put(s, r, 0, 0, ST_BOLD, "  idx  name");
        rect_put_right(s, r, 0, ST_BOLD, "bucket  here  reported by");
        for (int i = 0; i < r.h - 1 && c->top + i < n; i++) {
            int p = idx[c->top + i], row = i + 1;
            bool ok = it && model_bit(it->marked, p);
            char rb[64], right[128];
            reported_by(m, ui->iter, ui->rank, &p, 1, rb, sizeof rb);
            snprintf(right, sizeof right, "%6d  %4s  %11s", bucket_of(l, p),
                     !it  ? "-"
                     : ok ? "yes"
                          : "NO",
                     rb);
            int rc = rect_put_right(s, r, row, ok ? ST_NORMAL : ST_BAD, right);
            rect_printf(s, r, row, 0, ST_DIM, "%5d", p);
            rect_put_fit(s, r, row, 7, rc - 8, ok ? ST_NORMAL : ST_BAD, m->param_names[p]);
            if (c->top + i == c->sel) screen_restyle(s, r.y + row, r.x, r.w, ST_SELECT);
        }
        if (!n) rect_put(s, r, 1, 2, ST_DIM, "no parameter name contains that text (Esc clears)");
        if (!rect_empty(lay->side) && n) {
            char what[96];
            snprintf(what, sizeof what, "parameter %d", idx[c->sel]);
            params_side(s, lay->side, m, ui, it, l, &idx[c->sel], 1, what);
        }
        free(idx);
        return;
    }

    if (!rk->present || !it || !it->t_backward_ns) {
        view_context(s, r, "rank %d, iteration %lld", ui->rank, (long long)ui->iter);
        rect_printf(s, r, 2, 2, ST_DIM, "%s",
                    !rk->present ? "no database for this rank"
                                 : "no backward on this rank in this iteration ([ ] change it)");
        view_clamp(c, 0, 1);
        free(idx);
        return;
    }
    bool unused_mode = false;
    for (int p = 0; p < m->n_params; p++)
        if (!model_bit(it->marked, p)) idx[n++] = p;
    if (!n) { // every one reported: show what find_unused_parameters marked as unused
        for (int p = 0; p < m->n_params; p++)
            if (model_bit(it->marked_unused, p)) idx[n++] = p;
        unused_mode = n > 0;
    }
    bool ended = it->t_backward_end_ns || rk->state != RANK_RUNNING;
    if (unused_mode)
        r = view_context(s, r,
                         "rank %d, iteration %lld: all reported; %d marked ready as unused "
                         "(find_unused_parameters)",
                         ui->rank, (long long)ui->iter, n);
    else if (n)
        r = view_context(s, r, "rank %d, iteration %lld: %d of %d parameters %s", ui->rank,
                         (long long)ui->iter, n, m->n_params,
                         ended ? "never reported" : "not reported yet (backward running)");
    else
        r = view_context(s, r, "rank %d, iteration %lld: all %d parameters reported", ui->rank,
                         (long long)ui->iter, m->n_params);

    ParamGroup *g = NULL;
    int ng = paramgroup_build(m->param_names, idx, n, &g);
    // rows: the groups, and the members of the expanded one under it
    int n_items = ng + (ui->expanded >= 0 && ui->expanded < ng ? g[ui->expanded].n : 0);
    Item *items = xmalloc((size_t)MAX(n_items, 1) * sizeof(Item));
    for (int i = 0, k = 0; i < ng; i++) {
        items[k++] = (Item){i, -1};
        if (i == ui->expanded)
            for (int j = 0; j < g[i].n; j++)
                items[k++] = (Item){i, j};
    }
    view_clamp(c, n_items, r.h - 1);
    if (ng) {
        rect_put(s, r, 0, 0, ST_BOLD,
                 unused_mode ? "marked unused, grouped" : "never reported, grouped");
        rect_put_right(s, r, 0, ST_BOLD, "  n  reported by");
    }
    for (int i = 0; i < r.h - 1 && c->top + i < n_items; i++) {
        Item item = items[c->top + i];
        const ParamGroup *grp = &g[item.group];
        int row = i + 1;
        char rb[64], right[96];
        if (item.member < 0) {
            reported_by(m, ui->iter, ui->rank, grp->members, grp->n, rb, sizeof rb);
            snprintf(right, sizeof right, "  %3d  %11s", grp->n, rb);
            int rc = rect_put_right(s, r, row, ST_NORMAL, right);
            rect_put_fit(s, r, row, 0, rc, unused_mode ? ST_WARN : ST_BAD, grp->pattern);
        } else {
            int p = grp->members[item.member];
            reported_by(m, ui->iter, ui->rank, &p, 1, rb, sizeof rb);
            snprintf(right, sizeof right, "%s  %11s", m->param_shapes ? m->param_shapes[p] : "",
                     rb);
            int rc = rect_put_right(s, r, row, ST_DIM, right);
            rect_printf(s, r, row, 2, ST_DIM, "%5d", p);
            rect_put_fit(s, r, row, 8, rc - 9, ST_NORMAL, m->param_names[p]);
        }
        if (c->top + i == c->sel) screen_restyle(s, r.y + row, r.x, r.w, ST_SELECT);
    }
    ui->params_group = n_items ? items[c->sel].group : -1;
    ui->params_member = n_items && items[c->sel].member >= 0;
    if (!rect_empty(lay->side) && n_items) {
        Item item = items[c->sel];
        const ParamGroup *grp = &g[item.group];
        char what[96];
        if (item.member < 0) {
            snprintf(what, sizeof what, "group %d of %d: %d tensor%s", item.group + 1, ng, grp->n,
                     grp->n == 1 ? "" : "s");
            params_side(s, lay->side, m, ui, it, l, grp->members, grp->n, what);
        } else {
            snprintf(what, sizeof what, "parameter %d", grp->members[item.member]);
            params_side(s, lay->side, m, ui, it, l, &grp->members[item.member], 1, what);
        }
    }
    free(items);
    paramgroup_free(g, ng);
    free(idx);
}

void view_params_enter(Ui *ui, const Model *m) {
    // opens the selected group, or closes it (from its own row or a member's); the selection
    // goes to the group's row, whose index is the group's own once no group above it is open
    UiCursor *c = &ui->cur[VIEW_PARAMS];
    if (ui->search[0] || ui->params_group < 0) return;
    int g = ui->params_group;
    ui->expanded = ui->params_member || ui->expanded == g ? -1 : g;
    c->sel = g;
}
