/* tui.h -- the ncurses TUI: `ddpdbg tui DIR` on a saved trace, `ddpdbg tui --teach DIR` the
 * teaching mode, and tui_live, the live view `ddpdbg run` opens when stdout is a terminal.
 * The views, keys and layout are ui.h's; this is the terminal around them. The TUI never writes
 * to a trace (the model and the teaching loader open every database read-only). */
#ifndef TUI_TUI_H
#define TUI_TUI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

// `ddpdbg tui [--teach] [--iters A:B] [--once [--size COLSxROWS] [--view N] [--keys KEYS]] DIR`
// (argv[0] is "tui"). --once prints one frame as text to stdout instead of opening the
// terminal (scripts, tests): the view N (1-7), after the keys KEYS ("\n" Enter, "\t" Tab,
// "\e" Esc), at COLSxROWS (default 80x24). --iters: the iterations the teaching mode replays
// (default: the two before the first error or hang and its own). Returns the exit status: 0;
// 2 for bad usage or an unreadable trace (one line on stderr naming it).
int tui_command(int argc, char **argv);
void tui_print_usage(FILE *f);

typedef enum TuiRunState {
    TUI_RUN_GOING,       // the ranks run
    TUI_RUN_ENDED,       // every rank exited: *exit_status is the run's status
    TUI_RUN_INTERRUPTED, // the launcher got SIGINT / SIGTERM: the view closes at once
} TuiRunState;

// What `ddpdbg run` tells the live view. The TUI calls both functions from its own (the
// caller's) thread once per frame, at least 10 times a second, and never blocks longer than
// 100 ms between two calls.
typedef struct TuiRun {
    // Where the run is. Once it returns anything but TUI_RUN_GOING it is not called again;
    // *exit_status is then the status `ddpdbg run` will return (shown by the view).
    TuiRunState (*state)(void *ctx, int *exit_status);
    // Optional (NULL: none): the launcher's own work -- reading the ranks' pipes, reaping
    // children, the watchdog -- done here so that the launcher needs no thread. Must return
    // within ~50 ms and must not write to the terminal.
    void (*poll)(void *ctx);
    void *ctx;
    // After TUI_RUN_ENDED: true keeps the view open on the final state ("run ended: exit
    // status N", until the user presses q); false returns at once.
    bool linger;
} TuiRun;

typedef enum TuiLiveResult {
    TUI_LIVE_ENDED = 0, // the run ended or was interrupted (and, with linger, the user then left)
    TUI_LIVE_QUIT = 1,  // the user pressed q while the run was going: the launcher stops it
    TUI_LIVE_NO_TERMINAL = -1, // stdin / stdout is not a terminal, it could not be opened, or it
                               // went away (hung up) while the view ran: err says which; the
                               // launcher goes on without the view
} TuiLiveResult;

// The live view of the trace directory dir while the run writes it: the same views as
// `ddpdbg tui`, loaded as soon as a rank database exists ("waiting for the trace" until then),
// refreshed with model_refresh every 200 ms (5 times a second), ages measured against the wall
// clock. Returns as TuiLiveResult says, with the terminal restored. Contract for the launcher:
// nothing else may write to the terminal while it runs (send the ranks' output to files); it
// installs no signal handler: the launcher's SIGINT / SIGTERM handlers stay, and make
// run->state return TUI_RUN_INTERRUPTED. In the terminal Ctrl-C is a SIGINT as usual.
int tui_live(const char *dir, const TuiRun *run, char *err, size_t errlen);

#endif
