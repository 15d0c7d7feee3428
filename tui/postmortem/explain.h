/* explain.h -- `ddpdbg explain FILE|- [--model M] [--json]`: the DDP errors in a training log
 * (logscan.h finds them: pasted with torchrun's [rankN]: prefixes or none, wrapped or cut,
 * among any other text), explained as `ddpdbg report` explains a trace: which ranks, which
 * parameters grouped by module, what it means in the reducer, the likely causes ranked (for
 * RT-DETR-like names, a batch without ground-truth boxes first), and the fixes with what each
 * costs -- as far as the log allows, and saying where it does not (a list cut off, indices
 * without names).
 *
 * Parameters: by name when the log names them (TORCH_DISTRIBUTED_DEBUG=INFO or DETAIL, or the
 * reducer's INFO lines); by index when it does not (OFF), and then named by --model M (a
 * built-in model or a yaml path: the trainer's registry, registry.h, in DDP's index order), which
 * also gives the indices of names. A model the log's names or indices do not fit is set aside,
 * with a note.
 *
 * Output: a header (the log, its ranks, each error with its line; where the log was cut), then
 * the findings as report_text prints them (tui/diagnosis/report.h), with the diagnosis' kinds
 * and fix texts. --json: one object,
 *   format "ddpdbg-explain", version 1, log (the path as given, "-" for standard input), lines,
 *   model (--model or null), indices (true: a finding's "parameters" are DDP's indices; false:
 *   positions in the log's list of names, when it gives names and no --model says their index),
 *   world (the ranks the log shows, or null), status ("findings" or "no_ddp_error"),
 *   errors [{"rank", "line", "kind" (log_kind_name), "count", "text" (its first sentence),
 *   "names" (read, or null), "indices" (read, or null), "cut" (the list the log ends in: null,
 *   or {"list": "names"|"indices", "read": N, "partial": "model.28.dec_bbox"})}],
 *   findings (report_json_findings' array: "causes" holds the likely causes, most likely first).
 * Exit status: 0 no DDP error found ("no DDP error found"), 1 findings, 2 bad usage, an
 * unreadable log or a bad --model (one line on stderr). */
#ifndef TUI_POSTMORTEM_EXPLAIN_H
#define TUI_POSTMORTEM_EXPLAIN_H

// Runs `ddpdbg explain ARGS...` (argv[0] is "explain"); returns the exit status above.
int explain_command(int argc, char **argv);

#endif
