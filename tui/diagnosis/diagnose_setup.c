/* diagnose_setup.c -- the rule about DDP's construction (diagnose_rules.h): ranks that built
 * different models, as DDP's construction checks report it (PyTorch's
 * _verify_params_across_processes: the parameter count, then each parameter's sizes and
 * strides against rank 0's). The trace holds the error text and rank 0's parameter table; the
 * finding names the parameter and both shapes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base.h"
#include "tui/diagnosis/diagnose_rules.h"

// "params[282] in this process with sizes [4, 64] appears not to match sizes": 282 and
// "[4, 64]", or -1 when the text is not that message.
static int mismatched_param(const char *error, char *sizes, size_t len) {
    const char *at = strstr(error, "params[");
    if (!at || !strstr(error, "appears not to match")) return -1;
    int index = atoi(at + 7);
    const char *open = strstr(at, "with sizes [");
    const char *close = open ? strchr(open, ']') : NULL;
    if (!open || !close) return -1;
    open += 11;
    snprintf(sizes, len, "%.*s", (int)(close - open + 1), open);
    return index;
}

// The model's "3x64" as PyTorch prints sizes: "[3, 64]".
static void torch_sizes(const char *shape, char *out, size_t len) {
    size_t at = (size_t)snprintf(out, len, "[");
    for (const char *c = shape; *c && at + 3 < len; c++)
        at += (size_t)snprintf(out + at, len - at, *c == 'x' ? ", " : "%c", *c);
    snprintf(out + MIN(at, len - 2), len - MIN(at, len - 2), "]");
}

void rule_model_mismatch(Diag *d) {
    const Model *m = d->m;
    for (int r = 0; r < m->world; r++) {
        const ModelRank *mr = &m->ranks[r];
        if (!mr->present || !mr->error) continue;
        char sizes[96];
        int index = mismatched_param(mr->error, sizes, sizeof sizes);
        bool count = strstr(mr->error, "DDP expects same model across all ranks") != NULL;
        if (index < 0 && !count) continue;
        Finding *f = add_finding(d, FINDING_MODEL_MISMATCH, SEVERITY_ERROR);
        f->iter = mr->error_iter;
        Str ex = {0}, fx = {0};
        if (index >= 0) {
            add_rank(f, 0);
            add_rank(f, r);
            bool named = index < m->n_params;
            char theirs[96] = "others";
            if (named) torch_sizes(m->param_shapes[index], theirs, sizeof theirs);
            if (named) {
                f->params = xmalloc(sizeof(int));
                f->params[0] = index, f->n_params = 1;
            }
            set_title(f, "the ranks built different models: params[%d]%s%s%s has sizes %s on rank "
                         "%d, %s on rank 0",
                      index, named ? " (" : "", named ? m->param_names[index] : "",
                      named ? ")" : "", sizes, r, theirs);
            str_addf(&ex,
                     "DDP's construction broadcasts rank 0's parameter sizes and every rank "
                     "compares its own: on rank %d params[%d] has sizes %s",
                     r, index, sizes);
            if (named)
                str_addf(&ex, ", where rank 0's %s has %s", m->param_names[index], theirs);
            str_addf(&ex, ". A different class count, a config or checkpoint that differs between "
                          "ranks, or code that builds the model from rank-local data does this; "
                          "the ranks never start training.\n");
        } else {
            for (int k = 0; k < m->world; k++)
                if (m->ranks[k].present) add_rank(f, k);
            set_title(f, "the ranks built different models: rank %d has %d parameter tensors",
                      r, mr->n_params);
            str_addf(&ex,
                     "DDP's construction gathers every rank's parameter count and they differ "
                     "(%s). A different model config or code path per rank does this; the ranks "
                     "never start training.\n",
                     mr->error);
        }
        fix_same_model(&fx);
        f->explanation = str_take(&ex);
        f->fixes = str_take(&fx);
        return; // every rank that checked says the same: one finding
    }
}
