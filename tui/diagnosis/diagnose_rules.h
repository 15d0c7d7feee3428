/* diagnose_rules.h -- for tui/diagnosis/diagnose.c and tui/diagnosis/diagnose_grad.c: the findings
 * being built, the text and model helpers the rules share, and the rules about gradients (which
 * live in diagnose_grad.c; the rules about the run's collectives, errors and ranks in diagnose.c).
 * The post-mortem of a pasted log (tui/postmortem/explain.c) builds its findings with the same
 * helpers and offers the same fixes. */
#ifndef TUI_DIAGNOSE_RULES_H
#define TUI_DIAGNOSE_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tui/diagnosis/diagnose.h"

// A growing string.
typedef struct Str {
    char *s;
    size_t len, cap;
} Str;
void str_addf(Str *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
char *str_take(Str *b); // the text (never NULL), now the caller's
const char *plural(int64_t n, const char *one, const char *many);
// "rank 3", "ranks 0 and 2", "ranks 0-5, 7 and 9"
void ranks_text(char *out, size_t len, const int *ranks, int n);
// "allreduce of bucket 0, 264524 elements", "broadcast of buffers, 9264 elements"
void coll_text(char *out, size_t len, const ModelCollective *c);

// The parameters DDP expects a gradient for at it (its layout's; all without one), as bits.
uint8_t *expected_bits(const Model *m, const ModelRank *r, const ModelIter *it);
bool names_contain(const Model *m, const int *params, int n, const char *part);
// The value of key in a rank's "k=v k=v" arguments ("" when absent).
void arg_value(const ModelRank *r, const char *key, char *out, size_t len);
bool find_unused_on(const Model *m);

typedef struct Diag {
    const Model *m;
    Finding *f;
    int n, cap;
} Diag;
Finding *add_finding(Diag *d, FindingKind kind, int severity);
void set_title(Finding *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void add_rank(Finding *f, int rank);
void set_params(Finding *f, const uint8_t *bits, int n_params);
// The first finding of kind (about rank, unless rank < 0), or -1.
int first_of(const Diag *d, FindingKind kind, int rank);

// The fixes, each worded once: append one line "<fix>: <what it does>. Cost: <cost>.\n".
// n_params 0: the model's parameter count is not known (a log).
// caps: the bucket layout as the trace recorded it ("1 MiB/25 MiB": bucket_caps_text), NULL when
// not known (a log): the fix then names no sizes.
void fix_find_unused(Str *fx, int n_missing, int n_params, const char *caps);
// "1 MiB/25 MiB" (first bucket / the others) or "25 MiB" (one cap for all) from rank r's
// recorded caps into out; false (out "") when the trace did not record them.
bool bucket_caps_text(const ModelRank *r, char *out, size_t len);
// "add 0 * pred_bboxes.sum() ..." when the parameters are box heads, else the general form.
void fix_reach_loss(Str *fx, const Model *m, const int *params, int n);
void fix_skip_empty_batches(Str *fx);
// used_where NULL: static_graph=True (and freezing) as fixes; else why it is no fix ("on other
// ranks in the same iteration").
void fix_static_graph(Str *fx, const char *used_where);
void fix_same_model(Str *fx);
void fix_detail_check(Str *fx); // TORCH_DISTRIBUTED_DEBUG=DETAIL's collective checks

// The gradient rules (diagnose_grad.c), in the order diagnose runs them.
void rule_unused(Diag *d);
void rule_skipped_backward(Diag *d);
void rule_no_sync(Diag *d);
void rule_uneven(Diag *d);
void rule_layouts(Diag *d);
void rule_find_unused(Diag *d);
// The construction rule (diagnose_setup.c): ranks whose models differ.
void rule_model_mismatch(Diag *d);

#endif
