/* test_tui_layout.c -- the TUI's layout (tui/views/layout.h) as a pure function, over every terminal
 * size from 0x0 to 130x330 and every view: below the minimum it says too_small and nothing else;
 * at or above it the header, tabs, main, side and status panels lie inside the screen, never
 * overlap, keep their minimum sizes, tile the screen (up to the one separator row or column),
 * and the side panel is where layout.h says. Plus the sizes people use: 80x24 has a detail
 * panel below main, 40x12 is usable, 300x100 puts it on the right.
 *
 * tui/ is not in the library the tests link, so the file under test is compiled in here. */
#include "tui/views/layout.c"

#include <stdio.h>
#include <string.h>

#include "tests/expect.h"

static bool inside(Rect r, int rows, int cols) {
    return rect_empty(r) || (r.y >= 0 && r.x >= 0 && r.y + r.h <= rows && r.x + r.w <= cols);
}

static bool overlap(Rect a, Rect b) {
    if (rect_empty(a) || rect_empty(b)) return false;
    return a.y < b.y + b.h && b.y < a.y + a.h && a.x < b.x + b.w && b.x < a.x + a.w;
}

static long long area(Rect r) {
    return rect_empty(r) ? 0 : (long long)r.h * r.w;
}

// All the invariants for one size and view; returns the number of failed checks so that a
// broken rule reports once per size rather than flooding.
static int check_one(int rows, int cols, ViewId view) {
    int before = expect_failures;
    Layout l = layout_compute(rows, cols, view);
    bool small = rows < LAYOUT_MIN_ROWS || cols < LAYOUT_MIN_COLS;
    EXPECT(l.too_small == small, "%dx%d view %d: too_small %d", cols, rows, view, l.too_small);
    if (l.too_small) {
        EXPECT(rect_empty(l.header) && rect_empty(l.tabs) && rect_empty(l.main) &&
                   rect_empty(l.side) && rect_empty(l.status),
               "%dx%d: too small but has panels", cols, rows);
        return expect_failures - before;
    }
    Rect all[5] = {l.header, l.tabs, l.main, l.side, l.status};
    const char *names[5] = {"header", "tabs", "main", "side", "status"};
    for (int i = 0; i < 5; i++) {
        EXPECT(inside(all[i], rows, cols), "%dx%d view %d: %s (%d,%d %dx%d) outside", cols, rows,
               view, names[i], all[i].y, all[i].x, all[i].w, all[i].h);
        for (int j = i + 1; j < 5; j++)
            EXPECT(!overlap(all[i], all[j]), "%dx%d view %d: %s overlaps %s", cols, rows, view,
                   names[i], names[j]);
    }
    // fixed rows
    EXPECT(l.header.y == 0 && l.header.w == cols && l.header.h == (rows >= 16 ? 2 : 1),
           "%dx%d: header %d rows", cols, rows, l.header.h);
    EXPECT(l.tabs.y == l.header.h && l.tabs.h == 1 && l.tabs.w == cols, "%dx%d: tabs", cols, rows);
    EXPECT(l.status.y == rows - 1 && l.status.h == 1 && l.status.w == cols, "%dx%d: status", cols,
           rows);
    // main: always there, at its minimum or more, starting under the tabs at column 0
    EXPECT(l.main.y == l.tabs.y + 1 && l.main.x == 0, "%dx%d view %d: main at %d,%d", cols, rows,
           view, l.main.y, l.main.x);
    EXPECT(l.main.h >= LAYOUT_MAIN_MIN_ROWS, "%dx%d view %d: main %d rows", cols, rows, view,
           l.main.h);
    bool has_side = !rect_empty(l.side);
    EXPECT(l.main.w >= (l.side_right ? LAYOUT_MAIN_MIN_COLS : cols), "%dx%d view %d: main %d cols",
           cols, rows, view, l.main.w);
    // side: where layout.h says
    int body_h = rows - l.header.h - 2;
    if (!layout_view_has_side(view))
        EXPECT(!has_side, "%dx%d view %d: unexpected side", cols, rows, view);
    else if (view == VIEW_TEACH)
        EXPECT(has_side, "%dx%d: teaching without its explanation", cols, rows);
    else
        EXPECT(has_side == (cols >= LAYOUT_SIDE_RIGHT_FROM || body_h >= LAYOUT_SIDE_BELOW_FROM),
               "%dx%d view %d: side %d", cols, rows, view, has_side);
    if (has_side && l.side_right) {
        EXPECT(l.side.w >= LAYOUT_SIDE_MIN_COLS && l.side.h == l.main.h && l.side.y == l.main.y,
               "%dx%d view %d: right side %dx%d", cols, rows, view, l.side.w, l.side.h);
        EXPECT(l.side.x == l.main.w + 1 && l.side.x + l.side.w == cols, "%dx%d view %d: side x %d",
               cols, rows, view, l.side.x);
    } else if (has_side) {
        EXPECT(l.side.h >= LAYOUT_MAIN_MIN_ROWS && l.side.w == cols &&
                   l.side.y == l.main.y + l.main.h + 1,
               "%dx%d view %d: side below %dx%d at %d", cols, rows, view, l.side.w, l.side.h,
               l.side.y);
    }
    // tiling: everything but one separator row or column belongs to a panel
    long long covered = 0;
    for (int i = 0; i < 5; i++)
        covered += area(all[i]);
    long long separator = !has_side ? 0 : l.side_right ? l.main.h : cols;
    EXPECT(covered + separator == (long long)rows * cols,
           "%dx%d view %d: %lld of %lld cells covered", cols, rows, view, covered,
           (long long)rows * cols);
    return expect_failures - before;
}

int main(void) {
    int bad_sizes = 0;
    for (int rows = 0; rows <= 130; rows++)
        for (int cols = 0; cols <= 330; cols++)
            for (int v = 0; v < VIEW_COUNT; v++)
                if (check_one(rows, cols, (ViewId)v) && ++bad_sizes >= 20) {
                    fprintf(stderr, "stopping after 20 sizes with failures\n");
                    return expect_report();
                }
    check_one(-5, -5, VIEW_RANKS);
    check_one(100000, 100000, VIEW_TEACH);

    // the sizes people use
    Layout l = layout_compute(24, 80, VIEW_BUCKETS);
    EXPECT(!l.too_small && !l.side_right && l.side.h >= 6 && l.main.h >= 10,
           "80x24 buckets: main %d rows, side %d rows", l.main.h, l.side.h);
    l = layout_compute(24, 80, VIEW_TIMELINE);
    EXPECT(l.main.h == 20 && rect_empty(l.side), "80x24 timeline: main %d rows", l.main.h);
    l = layout_compute(24, 80, VIEW_TEACH);
    EXPECT(l.main.h >= 8 && l.side.h >= 8, "80x24 teach: main %d, side %d rows", l.main.h,
           l.side.h);
    l = layout_compute(12, 40, VIEW_RANKS);
    EXPECT(!l.too_small && l.main.h >= 8 && l.main.w == 40, "40x12 ranks: main %dx%d", l.main.w,
           l.main.h);
    l = layout_compute(12, 40, VIEW_TEACH);
    EXPECT(l.main.h >= 4 && l.side.h >= 4, "40x12 teach: main %d, side %d rows", l.main.h,
           l.side.h);
    l = layout_compute(100, 300, VIEW_PARAMS);
    EXPECT(l.side_right && l.side.w == 80 && l.main.w == 219,
           "300x100 params: main %d, side %d cols", l.main.w, l.side.w);
    l = layout_compute(7, 80, VIEW_RANKS);
    EXPECT(l.too_small, "80x7 is too small");
    l = layout_compute(24, 31, VIEW_RANKS);
    EXPECT(l.too_small, "31x24 is too small");
    return expect_report();
}
