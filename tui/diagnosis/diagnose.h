/* diagnose.h -- the diagnosis engine the report and the TUI share: rules over a loaded Model
 * (model.h) that name what went wrong in a DDP run -- which ranks, iteration, buckets,
 * parameters (grouped by module), collective numbers -- the likely cause from the recorded
 * context (the batch's box counts, the ranks' arguments), and concrete fixes with what each
 * costs. Pure functions of the Model: no I/O, no SQL, no terminal. */
#ifndef TUI_DIAGNOSE_H
#define TUI_DIAGNOSE_H

#include <stdint.h>

#include "tui/model/model.h"

// Values are stable (the report's JSON names them by finding_kind_name). Rules run, and
// findings come out, in this order (a kind added later is appended, its rule placed in order): root causes first, then their consequences, then
// performance and trace-quality notes, then information.
typedef enum FindingKind {
    FINDING_UNUSED_SOME_RANKS,   // parameters without a gradient on some ranks only (error + hang)
    FINDING_UNUSED_ALL_RANKS,    // the same parameters without a gradient on every rank (error)
    FINDING_SKIPPED_BACKWARD,    // a rank ran a forward and skipped its backward
    FINDING_NO_SYNC_MISMATCH,    // a rank ran an iteration under no_sync() while others synced
    FINDING_UNEVEN_BATCHES,      // ranks ran different numbers of batches
    FINDING_LAYOUT_MISMATCH,     // bucket layouts differ across ranks
    FINDING_DEAD_RANK,           // a rank stopped without an error while the others went on
    FINDING_COLLECTIVE_MISMATCH, // the first collective number whose op, size or purpose differ
    FINDING_HANG,                // the launcher's watchdog recorded a hang
    FINDING_ERROR,               // a rank's error, in full
    FINDING_STRAGGLER,           // a rank that reaches the collectives late, over many of them
    FINDING_TRACE_INCOMPLETE,    // a rank's file missing or unreadable, or events dropped
    FINDING_UNUSED_HANDLED,      // information: find_unused_parameters marked parameters unused
    FINDING_FIND_UNUSED_IDLE,    // information: find_unused_parameters on, nothing ever unused
    FINDING_MODEL_MISMATCH,      // DDP's construction found different models (a root cause: its
                                 // rule runs first; the value is last, values never change)
    FINDING_KIND_COUNT
} FindingKind;

typedef enum FindingSeverity {
    SEVERITY_INFO = 0,    // nothing wrong: the report's exit status stays 0
    SEVERITY_WARNING = 1, // worth a look (a straggler, a partial trace)
    SEVERITY_ERROR = 2,   // the run failed or will: an error, a hang, silently wrong gradients
} FindingSeverity;

// One finding. Every pointer is owned by the finding (findings_free).
typedef struct Finding {
    FindingKind kind;
    int severity;      // FindingSeverity
    char title[256];   // one line: "rank 0 never marked 25 parameters ready at iteration 1; ..."
    char *explanation; // what happened and why, in sentences; paragraphs separated by '\n'
    char *fixes;       // one fix per line, "<fix>: <what it does>. Cost: <cost>."; "" if none
    char *causes;      // the likely causes, one per line, most likely first; NULL when the
                       // evidence names the cause (a trace), set by the explain of a log
    int *ranks;        // the ranks it is about (at fault, or stuck), ascending
    int n_ranks;
    int64_t iter; // the iteration, -1: none
    int bucket;   // the bucket that blocks (or differs), -1: none
    int64_t seq;  // the collective number involved, 0: none
    int *params;  // parameter indices (Model.param_names), ascending
    int n_params;
    int cause; // index (in the same array) of the finding this one follows from, -1
} Finding;

// Runs every rule over m. *out gets the findings (NULL when there are none). Returns how many.
int diagnose(const Model *m, Finding **out);
void findings_free(Finding *f, int n);

// "unused_some_ranks", "hang", ...: the stable names of the kinds (JSON, tests).
const char *finding_kind_name(FindingKind kind);
// "info", "warning", "error".
const char *finding_severity_name(int severity);
// The highest severity of the n findings, -1 when n is 0.
int findings_max_severity(const Finding *f, int n);

// Groups parameter names by module prefix into lines (paramgroup.h does the grouping, the
// same as the Parameters view), biggest group first (ties: the group whose first name comes
// first), each a pattern, two spaces, the count and "tensor" or "tensors":
//   model.28.dec_bbox_head.{0..5}.layers.{0..2}.{weight,bias}  36 tensors
//   model.28.enc_bbox_head.layers.{0..2}.{weight,bias}  6 tensors
//   model.28.denoising_class_embed.weight  1 tensor
// Names are split at '.'; names with the same number of parts that differ in one part merge
// into a set there when that part is the last (weight, bias) or numeric on both sides (module
// indices), so each line is exactly the cartesian product it shows. Numeric sets print
// ascending with runs of three or more as a..b ({0..2,5}, {0,1}); others in first-seen order.
// *lines gets the malloc'd lines (group_lines_free); returns how many (0 for n == 0).
int group_param_names(const char *const *names, int n, char ***lines);
void group_lines_free(char **lines, int n);

#endif
