/* view_diagnosis.c -- the Diagnosis view: the findings' titles and bodies (explanation, fixes
 * and what each costs), scrolled with j/k.
 *
 * HOOK (diagnosis engine): the findings come from tui/diagnosis/diagnose.h's diagnose(), which tui.c
 * turns into ui->findings (UiFinding). Until the engine is linked, ui->findings is NULL and this
 * view says so and shows what the other views know: the banner, each rank's error, the first
 * divergence of the collectives, and the blocking buckets of the selected iteration. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base.h" // MIN, MAX, xmalloc
#include "tui/views/facts.h"
#include "tui/model/paramgroup.h"
#include "tui/views/views.h"

// Draws a title line and a wrapped body at line y (relative to r, may be negative: scrolled
// off); returns the line after them.
static int block(Screen *s, Rect r, int y, Style title_style, const char *title, const char *body) {
    if (title) rect_put_fit(s, r, y, 0, r.w, title_style, title), y++;
    if (body) y += rect_wrap(s, rect_make(r.y, r.x + 2, r.h, r.w - 2), y, 0, ST_NORMAL, body);
    return y + 1;
}

static int facts_only(Screen *s, Rect r, int y, const Model *m, const Ui *ui) {
    y = block(
        s, r, y, ST_DIM,
        "The diagnosis engine (tui/diagnosis/diagnose.h) is not linked in this build; what the trace shows:",
        NULL);
    char text[1024];
    int64_t t = ui_time(ui, m);
    if (facts_banner(m, t, ui->now_ns, text, sizeof text) != BANNER_NONE)
        y = block(s, r, y, ST_BAD, text, NULL);
    for (int rank = 0; rank < m->world; rank++) {
        const ModelRank *rk = &m->ranks[rank];
        char title[96];
        if (rk->error) {
            snprintf(title, sizeof title, "rank %d errored at iteration %lld:", rank,
                     (long long)rk->error_iter);
            y = block(s, r, y, ST_BOLD, title, rk->error);
        }
        const ModelIter *it = model_rank_iter(rk, ui->iter);
        int b = it ? facts_blocking_bucket(rk, it) : -1;
        if (b < 0) continue;
        const ModelLayout *l = model_rank_layout(rk, it);
        int total = facts_bucket_size(l, b);
        int *pending = xmalloc((size_t)MAX(total, 1) * sizeof(int));
        int n = facts_pending(rk, it, b, pending, total);
        ParamGroup *g;
        int ng = paramgroup_build(m->param_names, pending, n, &g);
        int len =
            snprintf(text, sizeof text, "Its %d parameters got no gradient on rank %d%s:", n, rank,
                     it->n_images && !it->n_boxes ? " (its batch had 0 ground-truth boxes)" : "");
        for (int i = 0; i < ng && len < (int)sizeof text - 100; i++)
            len += snprintf(text + len, sizeof text - (size_t)len, "\n%s  %d tensor%s",
                            g[i].pattern, g[i].n, g[i].n == 1 ? "" : "s");
        snprintf(title, sizeof title,
                 "rank %d, iteration %lld: bucket %d blocks every later bucket", rank,
                 (long long)ui->iter, b);
        y = block(s, r, y, ST_BOLD, title, text);
        paramgroup_free(g, ng);
        free(pending);
    }
    int64_t div = facts_first_divergence(m, t, text, sizeof text);
    if (div) {
        char title[64];
        snprintf(title, sizeof title, "collectives diverge at #%lld:", (long long)div);
        y = block(s, r, y, ST_BOLD, title, text);
    }
    return y;
}

// The root cause's short form (rootcause.h's lines): each line at its indent, wrapped within
// it; a grouped-names line ("<pattern>  N tensors") kept on one row (cut with ".." when the
// screen is narrower). The title in red, the names highlighted, the fix in green.
static int root_card(Screen *s, Rect r, int y, const char *text) {
    char line[1024];
    for (const char *p = text; *p;) {
        size_t len = strcspn(p, "\n");
        snprintf(line, sizeof line, "%.*s", (int)MIN(len, sizeof line - 1), p);
        p += len + (p[len] == '\n');
        int indent = MIN((int)strspn(line, " "), MAX(r.w - 8, 0));
        const char *body = line + strspn(line, " ");
        Rect in = rect_make(r.y, r.x + indent, r.h, r.w - indent);
        bool title = !strncmp(body, "root cause", 10), group = strstr(body, " tensor") && indent >= 6;
        Style st = title                            ? ST_BAD
                   : group                          ? ST_ACCENT
                   : !strncmp(body, "fix:", 4)       ? ST_OK
                   : !strncmp(body, "follows from", 12) ? ST_DIM
                                                    : ST_NORMAL;
        if (group) {
            if (y >= 0 && y < r.h) rect_put_fit(s, in, y, 0, in.w, st, body);
            y++;
        } else
            y += rect_wrap(s, in, y, 0, st, body);
    }
    return y + 1;
}

void view_diagnosis(Screen *s, const Layout *lay, const Model *m, Ui *ui) {
    Rect r = lay->main;
    UiCursor *c = &ui->cur[VIEW_DIAGNOSIS];
    int y = -c->top;
    if (ui->root_cause) {
        y = root_card(s, r, y, ui->root_cause);
        y = block(s, r, y, ST_DIM, "All findings, root cause first (j/k scroll):", NULL) - 1;
    }
    if (!ui->findings)
        y = facts_only(s, r, y, m, ui);
    else if (!ui->n_findings)
        y = block(s, r, y, ST_OK, "No finding: the trace looks healthy.", NULL);
    for (int i = 0; ui->findings && i < ui->n_findings; i++) {
        const UiFinding *f = &ui->findings[i];
        Style st = f->severity >= 2 ? ST_BAD : f->severity == 1 ? ST_WARN : ST_BOLD;
        char title[512];
        snprintf(title, sizeof title, "%d. %s", i + 1, f->title);
        y = block(s, r, y, st, title, f->body);
    }
    int total = y + c->top;
    c->n = total, c->page = r.h;
    c->top = MIN(c->top, MAX(total - r.h, 0));
}
