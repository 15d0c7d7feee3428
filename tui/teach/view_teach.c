/* view_teach.c -- the teaching view: the replayed events, the current one highlighted in the
 * middle of the main panel, and its explanation in the side panel (teach.h), scrolled with
 * j/k. The selected iteration, rank and time follow the current event, so that the other
 * views show the moment being explained. */
#include <stdio.h>
#include <string.h>

#include "kernels/base.h" // MIN, MAX
#include "probe/probe.h"  // ProbeKind
#include "tui/teach/teach.h"
#include "tui/views/views.h"

static Style event_style(int kind) {
    switch (kind) {
    case PROBE_GRAD_READY:
    case PROBE_MARK_READY:
        return ST_DIM;
    case PROBE_COLL_LAUNCH:
    case PROBE_COLL_DONE:
        return ST_COMM;
    case PROBE_ERROR:
    case PROBE_HANG:
        return ST_BAD;
    case PROBE_BATCH:
    case PROBE_LAYOUT:
        return ST_WARN;
    default:
        return ST_NORMAL;
    }
}

void view_teach(Screen *s, const Layout *lay, const Model *m, Ui *ui) {
    Rect r = lay->main;
    Teach *t = ui->teach;
    if (!t) {
        rect_put(s, r, 0, 0, ST_DIM, "no replay loaded");
        return;
    }
    if (t->pos >= 0) {
        ui->iter = t->ev[t->pos].iter;
        ui->rank = t->ev[t->pos].rank;
        ui->t_ns = t->ev[t->pos].t_ns; // the time cursor too ('.' in another view: the end)
    }
    r = view_context(s, r, "event %d of %d, iterations %lld-%lld, %s at %d/s", t->pos + 1, t->n,
                     (long long)t->iter_lo, (long long)t->iter_hi,
                     t->playing ? "playing" : "paused", t->speed);
    int half = r.h / 2;
    for (int row = 0; row < r.h; row++) {
        int i = t->pos - half + row;
        if (i < -1 || i >= t->n) continue;
        if (i == -1) {
            rect_put(s, r, row, 2, ST_DIM, "(start)");
        } else {
            char line[512];
            teach_describe(t, m, i, line, sizeof line);
            rect_put_fit(s, r, row, 2, r.w - 2, event_style(t->ev[i].kind), line);
        }
        if (i == t->pos) {
            rect_put(s, r, row, 0, ST_ACCENT, ">");
            screen_restyle(s, r.y + row, r.x, r.w, ST_SELECT);
        }
    }
    if (rect_empty(lay->side)) return;
    Rect side = view_side_title(s, lay->side, "what happens here");
    static char text[8192];
    teach_explain(t, m, text, sizeof text);
    UiCursor *c = &ui->cur[VIEW_TEACH];
    int lines = rect_wrap(s, side, 0, c->top, ST_NORMAL, text);
    c->n = lines, c->page = side.h;
    c->top = MIN(c->top, MAX(lines - side.h, 0));
}
