/* views.h -- the six views (and the teaching view) as drawing functions, for ui.c only. Each
 * draws the main panel of the layout and, when the layout has one, its side panel, from the
 * Model and the Ui, clamping its own cursor (ui->cur[view]) to what it shows. Besides drawing,
 * a view may answer Enter (drill down) through its *_enter function. */
#ifndef TUI_VIEWS_H
#define TUI_VIEWS_H

#include "tui/views/layout.h"
#include "tui/model/model.h"
#include "tui/views/screen.h"
#include "tui/views/ui.h"

void view_ranks(Screen *s, const Layout *l, const Model *m, Ui *ui);
void view_buckets(Screen *s, const Layout *l, const Model *m, Ui *ui);
void view_params(Screen *s, const Layout *l, const Model *m, Ui *ui);
void view_collectives(Screen *s, const Layout *l, const Model *m, Ui *ui);
void view_timeline(Screen *s, const Layout *l, const Model *m, Ui *ui);
void view_diagnosis(Screen *s, const Layout *l, const Model *m, Ui *ui);
void view_teach(Screen *s, const Layout *l, const Model *m, Ui *ui);

// Drill-downs (Enter): each may switch ui->view and set the selection of the target view.
void view_ranks_enter(Ui *ui, const Model *m);
void view_buckets_enter(Ui *ui, const Model *m);
void view_params_enter(Ui *ui, const Model *m);
void view_collectives_enter(Ui *ui, const Model *m);

// Shared by the views: keeps c->sel in [0, n) and visible among page rows, and records n and
// page for the keys.
void view_clamp(UiCursor *c, int n, int page);
// The side panel's title bar (row 0 of side, reversed) and the panel below it.
Rect view_side_title(Screen *s, Rect side, const char *title);
// A word-wrapped paragraph at row of r; returns the row after it.
int view_para(Screen *s, Rect r, int row, Style style, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
// "rank 0, iteration 1" context line in ST_BOLD at row 0 of r; returns r below it.
Rect view_context(Screen *s, Rect r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
