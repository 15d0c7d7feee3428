/* scenario.h -- `ddpdbg scenario list|run NAME`: the failure catalog. Each scenario runs the
 * real trainer (rtdetr-tiny, 2 ranks, a small synthetic dataset, augment=false: no crop may
 * empty a batch the scenario did not choose) under `ddpdbg run` with one
 * or more faults (trainer/fault.h), then diagnoses the trace it recorded (diagnose.h) and
 * checks that the diagnosis names the scenario's cause. The first, healthy, has no fault: its
 * diagnosis must find nothing wrong. `make examples` records every one into traces/examples/. */
#ifndef TUI_SCENARIO_H
#define TUI_SCENARIO_H

#include "tui/diagnosis/diagnose.h"

typedef struct Scenario {
    const char *name;
    const char *description; // one line
    int nproc;
    const char *const *args; // extra train arguments (faults, DDP flags), NULL-terminated
    FindingKind expect;      // the finding kind its diagnosis must contain (its own kind, never
                             // FINDING_ERROR: any error would pass); SCENARIO_HEALTHY: none
                             // above information
} Scenario;

#define SCENARIO_HEALTHY FINDING_KIND_COUNT

// The catalog, in listing order; *n gets how many.
const Scenario *scenario_catalog(int *n);
const Scenario *scenario_find(const char *name);

// Runs `ddpdbg scenario ARGS...` (argv[0] "scenario"): list prints "name  description" per
// line; run NAME [--no-tui] [--trace DIR] [--work DIR] runs it and prints the report; exit 0
// when the diagnosis named the expected cause, 1 when not, 2 for bad usage. The dataset and
// checkpoints go to WORK/data and WORK/run (default: TRACE.data and TRACE.run beside the
// trace); a dataset already there is reused.
int scenario_command(int argc, char **argv);

#endif
