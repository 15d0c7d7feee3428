/* scenario.h -- `ddpdbg scenario list|run NAME`: the failure catalog. Each scenario runs the
 * real trainer (rtdetr-tiny, 2 ranks, a small synthetic dataset written into the trace
 * directory) under `ddpdbg run` with one or more faults (trainer/fault.h), then diagnoses the
 * trace it recorded (diagnose.h) and checks that the diagnosis names the scenario's cause. */
#ifndef TUI_SCENARIO_H
#define TUI_SCENARIO_H

#include "tui/diagnose.h"

typedef struct Scenario {
    const char *name;
    const char *description; // one line
    int nproc;
    const char *const *args; // extra train arguments (faults, DDP flags), NULL-terminated
    FindingKind expect;      // the finding its diagnosis must contain
} Scenario;

// The catalog, in listing order; *n gets how many.
const Scenario *scenario_catalog(int *n);
const Scenario *scenario_find(const char *name);

// Runs `ddpdbg scenario ARGS...` (argv[0] "scenario"): list prints "name  description" per
// line; run NAME [--no-tui] [--trace DIR] runs it and prints the report; exit 0 when the
// diagnosis named the expected cause, 1 when not, 2 for bad usage.
int scenario_command(int argc, char **argv);

#endif
