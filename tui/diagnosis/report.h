/* report.h -- `ddpdbg report DIR [--json]`: the diagnosis (diagnose.h) of a trace directory as
 * text for people or JSON for programs. Exit status: 0 healthy (no finding, or information
 * only), 1 findings (a warning or an error), 2 unreadable trace or bad usage (one line on
 * stderr). The text prints no times of day and no durations of its own, so a saved trace
 * always gives the same report (record texts quoted verbatim, like the watchdog's, keep
 * theirs).
 *
 * The JSON format, version 1 (one object; new keys may be added, none renamed):
 *   format      "ddpdbg-report"
 *   version     1
 *   trace       the directory, as given
 *   world       ranks (rank files found, or the world size their metadata names)
 *   params      parameter tensors of the model
 *   iterations  {"first": F, "last": L}; first 0 and last -1 when no iteration was recorded
 *   status      "healthy" (exit 0) or "findings" (exit 1)
 *   ranks       per rank, in rank order: {"rank", "present" (false: no readable trace),
 *               "load_error" (why not, or null), "state" ("running", "waiting", "finished",
 *               "errored", "dead"), "phase" ("forward", "backward", "collective", ...),
 *               "iteration" (its last, or null), "pending_collective" (the first collective it
 *               launched that never completed, or null), "error" (its first error, or null)}
 *   findings    in order, root causes first: {"id" (1-based), "kind" (finding_kind_name:
 *               "unused_some_ranks", "unused_all_ranks", "skipped_backward", "uneven_batches",
 *               "layout_mismatch", "dead_rank", "collective_mismatch", "hang", "error",
 *               "straggler", "trace_incomplete", "unused_handled", "find_unused_idle"),
 *               "severity" ("error", "warning", "info"), "title", "ranks" ([int]),
 *               "iteration" (or null), "bucket" (or null), "collective" (its number, or null),
 *               "parameters" ([index]), "parameter_names" ([name]), "parameter_groups"
 *               (["pattern  N tensors"], as group_param_names writes them), "explanation"
 *               (text, paragraphs separated by "\n"), "fixes" (["<fix>: ... Cost: ..."]),
 *               "root_cause" (true for the first error that follows from no other finding:
 *               the one to fix; false otherwise),
 *               "follows_from" (the id of the finding it is a consequence of, or null)}
 * Findings come root causes first: errors that follow from nothing, then their consequences
 * (one link away, then two, ...), then warnings and notes. */
#ifndef TUI_REPORT_H
#define TUI_REPORT_H

#include <stdio.h>

#include "tui/diagnosis/diagnose.h"
#include "tui/model/model.h"

// Runs `ddpdbg report ARGS...` (argv[0] is "report"); returns the exit status above.
int report_command(int argc, char **argv);

// The report of m with its n findings f, as text (lines of at most 100 columns where the words
// allow) or as the JSON above.
void report_text(FILE *out, const Model *m, const Finding *f, int n);
void report_json(FILE *out, const Model *m, const Finding *f, int n);

// Writes s as a JSON string literal (quotes included); NULL writes null. Shared with export.c.
void json_string(FILE *out, const char *s);

// The parts of the report, shared with the explain of a log (tui/postmortem/explain.c), whose
// Model holds only parameter names (param_names NULL: indices alone, printed as such):
// "2 findings: 2 errors, 0 warnings, 0 notes"; finding i as report_text prints it (a blank
// line first; its likely causes when it has them); the JSON array of the findings as
// report_json writes it (with "causes" when a finding has them).
void report_summary_line(FILE *out, const Finding *f, int n);
void report_finding_text(FILE *out, const Model *m, const Finding *f, int i);
void report_json_findings(FILE *out, const Model *m, const Finding *f, int n);

#endif
