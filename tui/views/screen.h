/* screen.h -- the in-memory terminal every view draws into: a rows x cols grid of cells (one
 * ASCII character and one style each). Views never talk to ncurses; tui.c blits a finished
 * Screen to the terminal once per frame, and the tests and benchmarks read the grid back as
 * text. Every drawing helper clips: to the screen, and to the Rect it is given, so that a view
 * can never write outside its panel whatever the terminal size. */
#ifndef TUI_SCREEN_H
#define TUI_SCREEN_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// What a cell looks like. tui.c maps each style to a colour pair (or, monochrome, to bold /
// reverse / dim); the tests compare styles, never colours.
typedef enum Style {
    ST_NORMAL,
    ST_DIM,        // secondary text, "nothing here"
    ST_BOLD,       // column heads, names that matter
    ST_TITLE,      // the header line
    ST_TAB,        // an inactive tab
    ST_TAB_ACTIVE, // the active tab
    ST_SELECT,     // the selected row or cell
    ST_OK,         // finished, done, healthy
    ST_WARN,       // waiting, in flight, a straggler
    ST_BAD,        // errored, dead, the blocking bucket, the first divergence
    ST_BANNER,     // the hang / error banner
    ST_ACCENT,     // keys in help and status, the time cursor
    ST_FWD,        // timeline: forward
    ST_BWD,        // timeline: backward
    ST_COMM,       // timeline: a collective in flight
    ST_OPTIM,      // timeline: optimizer step
    ST_COUNT
} Style;

typedef struct Cell {
    char ch;       // printable ASCII (32..126)
    uint8_t style; // a Style
} Cell;

typedef struct Screen {
    int rows, cols;
    Cell *cells; // rows * cols, row-major
} Screen;

// A panel: rows y .. y+h-1, columns x .. x+w-1. h or w 0: absent.
typedef struct Rect {
    int y, x, h, w;
} Rect;

// Sizes the screen (reallocating when the size changed) and clears it. rows, cols >= 0.
void screen_resize(Screen *s, int rows, int cols);
void screen_free(Screen *s);
// Every cell to ' ' in ST_NORMAL.
void screen_clear(Screen *s);

static inline Rect rect_make(int y, int x, int h, int w) {
    return (Rect){y, x, h, w};
}
static inline bool rect_empty(Rect r) {
    return r.h <= 0 || r.w <= 0;
}
// r without its first n rows (h never below 0).
Rect rect_below(Rect r, int n);

// The cell at (y, x), or NULL outside the screen.
Cell *screen_at(Screen *s, int y, int x);
// Fills r (clipped to the screen) with ch in style.
void screen_fill(Screen *s, Rect r, char ch, Style style);
// Restyles w cells of row y from column x, keeping their characters (selection bars).
void screen_restyle(Screen *s, int y, int x, int w, Style style);

// Writes text at (row, col) relative to r, clipped to r: stops at r's right edge and at the
// first '\n'; control characters and non-ASCII bytes show as '?'. Returns the column (relative
// to r) after the last character written, so that calls can be chained.
int rect_put(Screen *s, Rect r, int row, int col, Style style, const char *text);
int rect_printf(Screen *s, Rect r, int row, int col, Style style, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
// As rect_put, but at most maxw columns; a text that does not fit ends in "..".
int rect_put_fit(Screen *s, Rect r, int row, int col, int maxw, Style style, const char *text);
// Writes text right-aligned so that it ends at r's right edge on row. Returns its start column.
int rect_put_right(Screen *s, Rect r, int row, Style style, const char *text);
// Word-wraps text into r from row on (an explicit '\n' starts a new line, a blank line stays
// blank), skipping the first skip lines of the wrapped text. Returns the number of wrapped lines
// the whole text needs at r's width (drawn or not), for scrolling.
int rect_wrap(Screen *s, Rect r, int row, int skip, Style style, const char *text);
// Draws a frame around r (ASCII + - |) and a title on its top edge.
void rect_box(Screen *s, Rect r, Style style, const char *title);

// Row y as a NUL-terminated string of cols characters (trailing blanks kept) in buf, which
// holds at least cols + 1 bytes.
void screen_row_text(const Screen *s, int y, char *buf);
// The first row whose text contains needle, or -1.
int screen_find(const Screen *s, const char *needle);
// Whether needle occurs anywhere on the screen (within one row).
static inline bool screen_has(const Screen *s, const char *needle) {
    return screen_find(s, needle) >= 0;
}
// The whole screen as text, one '\n'-terminated line per row (trailing blanks trimmed).
// Returns a malloc'd string.
char *screen_text(const Screen *s);

#endif
