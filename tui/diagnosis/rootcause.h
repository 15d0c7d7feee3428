/* rootcause.h -- the short form of the diagnosis: the root cause in the dozen lines that a
 * first screen (the TUI's Diagnosis view, which the live view and `ddpdbg tui` open on when
 * there is one), `ddpdbg report --short` and the end of a failed `ddpdbg run` have room for.
 * The same text in all three places, built from the findings (diagnose.h) and the Model they
 * were made from; pure functions, no I/O but report_print_root_cause. */
#ifndef TUI_ROOTCAUSE_H
#define TUI_ROOTCAUSE_H

#include <stdio.h>

#include "tui/diagnosis/diagnose.h"
#include "tui/model/model.h"

// The root cause among the n findings: the first error that follows from no other finding;
// -1 when there is none (a healthy run, warnings only).
int rootcause_find(const Finding *f, int n);

// The short form of the root cause, one logical line per '\n' (each starts with its indent;
// lines are not wrapped), malloc'd; NULL when rootcause_find finds none. For the field report:
//   root cause [1]: rank 0 never marked 25 parameters ready at iteration 1; rank 1 did (...)
//     never reported on rank 0 at iteration 1:
//       model.27.dec_bbox_head.{0..2}.layers.{0..2}.{weight,bias}  18 tensors
//       model.27.enc_bbox_head.layers.{0..2}.{weight,bias}  6 tensors
//       model.27.denoising_class_embed.weight  1 tensor
//     why: rank 0's batch at iteration 1 had 0 ground-truth boxes (rank 1's had 3)
//     bucket 0 never launched on rank 0: 91 of its 116 parameters were ready
//     rank 1 waits in collective #12 (allreduce of bucket 0, 264524 elements), which rank 0 never issued
//     fix: find_unused_parameters=True: ... Cost: ...
//     follows from it: [2] rank 0 raised at iteration 2: Expected to have finished reduction ...
// The never-reported names are grouped per rank (ranks with the same set share a line); the
// bucket line names each rank that never launched it; the wait line each other rank whose
// collective is still open ("waits"; "waited ..., until it was stopped" for a rank that died).
char *rootcause_text(const Model *m, const Finding *f, int n);

// Loads the trace directory dir, diagnoses it and prints the short form to out, wrapped at 100
// columns (continuations indented 2 more), after a header line naming `ddpdbg report DIR` for
// the whole report. Returns 1 when it printed a root cause, 0 when the trace holds none (it
// prints nothing), -1 when the trace cannot be read (one line on out saying so).
int report_print_root_cause(const char *dir, FILE *out);

// Prints text (rootcause_text's lines) wrapped at width columns, each continuation indented 2
// more than its line. Shared by the report and the launcher.
void rootcause_print(FILE *out, const char *text, int width);

#endif
