/* layout.h -- where the panels of the TUI go, as a pure function of the terminal size and the
 * active view (the nvtop model: computed here, tested over a grid of sizes, drawn elsewhere).
 *
 *   header   1 row (2 from 16 rows on: the second one is the hang / error banner)
 *   tabs     1 row: the views, 1-6
 *   main     the active view
 *   side     the detail panel: right of main from 110 columns on (teaching: 100), else below
 *            it when there is room; absent otherwise (teaching always has one)
 *   status   the last row: keys and the state of the run
 *
 * main and side are separated by one blank column (side on the right) or one blank row (side
 * below). Below LAYOUT_MIN_ROWS x LAYOUT_MIN_COLS the layout is too_small and the TUI shows
 * only "terminal too small". */
#ifndef TUI_LAYOUT_H
#define TUI_LAYOUT_H

#include <stdbool.h>

#include "tui/views/screen.h" // Rect

typedef enum ViewId {
    VIEW_RANKS,
    VIEW_BUCKETS,
    VIEW_PARAMS,
    VIEW_COLLECTIVES,
    VIEW_TIMELINE,
    VIEW_DIAGNOSIS,
    VIEW_TEACH, // only in `ddpdbg tui --teach`
    VIEW_COUNT
} ViewId;

enum {
    LAYOUT_MIN_ROWS = 8,
    LAYOUT_MIN_COLS = 32,
    LAYOUT_MAIN_MIN_ROWS = 2,     // main and side each keep at least this many rows
    LAYOUT_MAIN_MIN_COLS = 32,    // a side panel on the right leaves main at least this wide
    LAYOUT_SIDE_MIN_COLS = 34,    // a side panel on the right is at least this wide
    LAYOUT_SIDE_RIGHT_FROM = 110, // columns from which a detail panel goes on the right
    LAYOUT_TEACH_RIGHT_FROM = 100,
    LAYOUT_SIDE_BELOW_FROM = 18, // body rows from which a detail panel goes below main
};

typedef struct Layout {
    bool too_small;  // below the minimum: every Rect is empty
    bool side_right; // side is right of main (else below it, or absent)
    Rect header, tabs, main, side, status;
} Layout;

// Whether the view has a detail panel at all (Timeline and Diagnosis use the whole body).
bool layout_view_has_side(ViewId view);
// The panels for a rows x cols terminal (any values, negative included) showing view.
Layout layout_compute(int rows, int cols, ViewId view);

#endif
