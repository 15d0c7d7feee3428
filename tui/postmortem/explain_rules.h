/* explain_rules.h -- private to tui/postmortem/explain.c and explain_rules.c: the log as
 * explain reads it (its scan, the parameter names it can give), and the findings made from
 * its errors (explain_rules.c), built with the diagnosis' helpers (diagnose_rules.h). */
#ifndef TUI_POSTMORTEM_EXPLAIN_RULES_H
#define TUI_POSTMORTEM_EXPLAIN_RULES_H

#include <stdbool.h>

#include "tui/diagnosis/diagnose_rules.h" // Diag, Str, Finding, the fix texts
#include "tui/postmortem/logscan.h"

// The parameters one error is about, in the explain's parameter space (ExplainLog.m).
typedef struct ErrorParams {
    int *params; // ascending, unique
    int n;
    bool cut;          // the log ends inside the error's list: there may be more
    bool from_info;    // completed from the reducer's INFO lines
    char partial[128]; // the cut token, "" when none
    int n_listed;      // names or indices the error's own text lists
} ErrorParams;

typedef struct ExplainLog {
    const char *path;
    const char *model;    // --model, NULL when none or set aside
    char model_note[512]; // why --model was set aside, "" when it was not
    LogScan scan;
    // The parameter space of every finding: m.param_names[i] is parameter i's name. With the
    // model: its registry (indices are DDP's); without, with names in the log: those names in
    // the order first seen (positions); with indices only: no names (m.param_names NULL).
    Model m;
    bool indices;        // params are DDP's indices
    int n_params_model;  // the model's parameter count (registry or DDP's summary), 0 unknown
    ErrorParams *params; // per scan error
} ExplainLog;

// The findings of log's errors into *out (root causes first, then what follows from them).
// Returns how many.
int explain_findings(const ExplainLog *log, Finding **out);

// "rank 0", "ranks 0 and 1", for a rank that may be -1 ("a rank").
const char *explain_rank(int rank, char *buf, size_t len);

#endif
