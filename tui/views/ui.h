/* ui.h -- the TUI without the terminal: the UI state (which view, which rank, iteration and
 * time are selected, scroll positions, search, help), what each key does to it, and the frame:
 * ui_render draws a Model and a Ui into a Screen. Rendering is a pure function of (Model, Ui,
 * size) and key handling a pure function of (Ui, Model, key), so that both are tested and
 * benchmarked without a terminal; tui.c only translates ncurses keys into UiKeys and blits.
 *
 * Keys (htop / k9s conventions, tooling.md §E): q or F10 quit, ? or F1 help, Tab / Shift-Tab
 * or 1-6 (7 in teaching) switch views, arrows and h j k l move, PgUp PgDn g G page, Enter
 * drills down, Esc goes back, / searches parameter names, [ ] step the selected iteration,
 * < > step the time cursor (. returns to the present), + - zoom the timeline, p pauses the
 * live view; teaching: space step, b back, p play/pause, + - speed, n next milestone. */
#ifndef TUI_UI_H
#define TUI_UI_H

#include <stdbool.h>
#include <stdint.h>

#include "tui/views/layout.h"
#include "tui/model/model.h"
#include "tui/views/screen.h"

// Keys as the UI sees them: printable ASCII as itself, the rest above 0xff.
typedef enum UiKey {
    UI_KEY_NONE = 0,
    UI_KEY_UP = 0x100,
    UI_KEY_DOWN,
    UI_KEY_LEFT,
    UI_KEY_RIGHT,
    UI_KEY_PGUP,
    UI_KEY_PGDN,
    UI_KEY_HOME,
    UI_KEY_END,
    UI_KEY_ENTER,
    UI_KEY_ESC,
    UI_KEY_TAB,
    UI_KEY_BTAB,
    UI_KEY_BACKSPACE,
    UI_KEY_F1,
    UI_KEY_F10,
    UI_KEY_RESIZE,
} UiKey;

// One finding of the diagnosis as the Diagnosis view shows it: a title and a body (the
// explanation, then the fixes with their costs; '\n' separates paragraphs). tui.c fills these
// from the diagnosis engine (tui/diagnosis/diagnose.h); the view itself never calls the engine.
typedef struct UiFinding {
    const char *title;
    char *body;
    int severity; // 0 note, 1 warning, 2 error
} UiFinding;

// Per view: the cursor and scroll position. n and page are what the last frame had, so that
// keys can page before the next frame clamps sel into [0, n).
typedef struct UiCursor {
    int sel;  // selected item
    int top;  // first item shown
    int col;  // first column shown (ranks or buckets scrolled sideways)
    int n;    // items the last frame had
    int page; // items the last frame showed
} UiCursor;

typedef struct Teach Teach; // tui/teach/teach.h

typedef struct Ui {
    ViewId view, back_view; // back_view: where Esc returns to after a drill-down
    bool teach_mode;        // VIEW_TEACH exists
    bool live;              // the run is going on: ages are measured against now_ns
    bool paused;            // live: refreshing is paused ('p')
    bool help;              // the help overlay is up
    bool searching;         // typing into search
    char search[64];        // parameter-name filter ("" none)
    int rank;               // selected rank
    int bucket;             // selected bucket (Buckets)
    int64_t iter;           // selected iteration (the scrubber)
    bool iter_follow;       // live: the iteration follows the newest one (or a stuck one)
    int64_t stuck_iter;     // live: the older iteration that never finished, shown while
                            // following (-1 none)
    int64_t t_ns;           // time cursor; INT64_MAX: the present
    int64_t now_ns;         // the clock ages are measured against (post-mortem: the trace's end)
    int64_t tl_span_ns;     // timeline: width of the window (0: the whole trace)
    int64_t tl_end_ns;      // timeline: right edge of the window (0: the trace's end)
    int expanded;           // Parameters: the group listed member by member, -1 none
    int params_group;       // Parameters: the group of the selected row (set by each frame)
    bool params_member;     // Parameters: the selected row is one of its members
    UiCursor cur[VIEW_COUNT];
    const UiFinding *findings; // Diagnosis: from the engine, NULL when it is not linked
    int n_findings;
    const char *root_cause; // Diagnosis, on top: the short form of the root cause
                            // (tui/diagnosis/rootcause.h), NULL while there is none
    bool root_cause_seen;   // a root cause was set once: the view went to it (ui_set_root_cause)
    bool view_chosen;       // the user switched views: a root cause appearing later stays
                            // where the user is (the status line says so)
    Teach *teach;        // teaching: the replay (NULL otherwise)
    char run_status[96]; // live: "running", "run ended: exit status 1"
    char message[160];   // a one-line notice on the status line, cleared by the next key
} Ui;

typedef enum UiAction { UI_CONTINUE, UI_QUIT } UiAction;

// A fresh state for m: the Ranks view (teaching: the Teach view), the most telling iteration
// (the newest one in which a rank ran backward without finalizing, else the newest), the rank
// that holds the others up (else 0), time at the present. teach may be NULL.
void ui_init(Ui *ui, const Model *m, bool live, Teach *teach);
// After a refresh of a live model: keeps the selection valid and, while following, moves the
// iteration to the newest, or to an older one some rank never finished (selecting, once, the
// rank that holds the others up), so that a hang shows where it is stuck.
void ui_model_changed(Ui *ui, const Model *m);
// The root cause's short form (owned by the caller, valid until the next call; NULL: none).
// The first time there is one the frame opens on it -- the Diagnosis view, scrolled to the top
// -- unless the user has chosen a view already (any view key) or the teaching mode is on.
// Whenever a root cause is set and another view is on screen, the status line says
// "6: root cause" (left of the run's status).
void ui_set_root_cause(Ui *ui, const char *text);
// Applies one key (a UiKey or printable ASCII).
UiAction ui_key(Ui *ui, const Model *m, int key);
// Time passing (teaching: playback). Returns true when the frame changed.
bool ui_tick(Ui *ui, const Model *m, int elapsed_ms);
// Draws the whole frame into s (already sized to the terminal).
void ui_render(Screen *s, const Model *m, Ui *ui);

// The time the views show state at: ui->t_ns clamped to the trace (the present: its end).
int64_t ui_time(const Ui *ui, const Model *m);

#endif
