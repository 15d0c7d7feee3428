/* layout.c -- the panels as a pure function of (rows, cols, view): layout.h. */
#include "tui/views/layout.h"

#include "kernels/base.h" // MIN, MAX

bool layout_view_has_side(ViewId view) {
    return view != VIEW_TIMELINE && view != VIEW_DIAGNOSIS;
}

static int clamp(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

Layout layout_compute(int rows, int cols, ViewId view) {
    Layout l = {0};
    if (rows < LAYOUT_MIN_ROWS || cols < LAYOUT_MIN_COLS) {
        l.too_small = true;
        return l;
    }
    int header_h = rows >= 16 ? 2 : 1;
    l.header = rect_make(0, 0, header_h, cols);
    l.tabs = rect_make(header_h, 0, 1, cols);
    l.status = rect_make(rows - 1, 0, 1, cols);
    Rect body = rect_make(header_h + 1, 0, rows - header_h - 2, cols); // >= 4 rows
    l.main = body;
    if (!layout_view_has_side(view)) return l;

    bool teach = view == VIEW_TEACH;
    int right_from = teach ? LAYOUT_TEACH_RIGHT_FROM : LAYOUT_SIDE_RIGHT_FROM;
    if (cols >= right_from) {
        // the explanation of the teaching mode wants more width than a detail panel
        int want = teach ? cols * 9 / 20 : cols * 2 / 5;
        int side_w = clamp(want, LAYOUT_SIDE_MIN_COLS, teach ? 90 : 80);
        side_w = MIN(side_w, cols - 1 - LAYOUT_MAIN_MIN_COLS);
        l.side_right = true;
        l.main = rect_make(body.y, 0, body.h, cols - side_w - 1);
        l.side = rect_make(body.y, cols - side_w, body.h, side_w);
        return l;
    }
    if (teach || body.h >= LAYOUT_SIDE_BELOW_FROM) {
        // below: a detail panel gets 2/5 of the body, the explanation half of it
        int side_h = teach ? body.h / 2 : body.h * 2 / 5;
        side_h = clamp(side_h, LAYOUT_MAIN_MIN_ROWS, body.h - 1 - LAYOUT_MAIN_MIN_ROWS);
        int main_h = body.h - side_h - 1;
        l.main = rect_make(body.y, 0, main_h, cols);
        l.side = rect_make(body.y + main_h + 1, 0, side_h, cols);
    }
    return l;
}
