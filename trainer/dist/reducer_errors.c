/* reducer_errors.c -- the reducer's two long PyTorch messages, built exactly as reducer.cpp
 * builds them (ddp-reducer.md §4.1, §4.2): "Expected to have finished reduction in the prior
 * iteration ..." and "Expected to mark a variable ready only once ...". */
#include "trainer/dist/reducer_errors.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/base.h" // CHECK, xmalloc

int reducer_unmarked(const Reducer *r, int *out) {
    int n = 0;
    for (int i = 0; i < r->n_params; i++)
        if (!r->ready[i]) out[n++] = i;
    return n;
}

// Appends printf output to a growing string.
typedef struct Text {
    char *s;
    size_t len, cap;
} Text;
static void text_add(Text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_add(Text *t, const char *fmt, ...) {
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        size_t room = t->cap - t->len;
        int n = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? room : 0, fmt, ap);
        va_end(ap);
        CHECK(n >= 0, "text_add: bad format");
        if (t->s && (size_t)n < room) {
            t->len += (size_t)n;
            return;
        }
        t->cap = (t->len + (size_t)n + 1) * 2;
        t->s = xrealloc(t->s, t->cap);
    }
}

int reducer_check_prior_reduction(Reducer *r) {
    if (!r->require_finalize) return 0;
    int *unmarked = xmalloc(sizeof(int) * (size_t)r->n_params);
    int n = reducer_unmarked(r, unmarked);
    CHECK(n > 0, "require_finalize with every parameter marked");
    const char *outputs_not_used = "making sure all `forward` function outputs participate in "
                                   "calculating loss. ";
    const char *ddp_bug =
        "\nIf you already have done the above, then the distributed data parallel module "
        "wasn't able to locate the output tensors in the return value of your module's "
        "`forward` function. Please include the loss function and the structure of the return "
        "value of `forward` of your module when reporting this issue (e.g. list, dict, "
        "iterable).";
    Text t = {0};
    if (r->cfg.static_graph) {
        text_add(&t, "Expected to have finished reduction in the prior iteration before starting "
                     "a new one. This error indicates that your training graph has changed in "
                     "this iteration, e.g., one parameter is used in first iteration, but then "
                     "got unused in the second iteration. this is not compatible with "
                     "static_graph set to True.");
    } else {
        text_add(&t, "Expected to have finished reduction in the prior iteration before starting "
                     "a new one. This error indicates that your module has parameters that were "
                     "not used in producing loss. ");
        if (!r->cfg.find_unused_parameters)
            text_add(&t, "You can enable unused parameter detection by passing the keyword "
                         "argument `find_unused_parameters=True` to "
                         "`torch.nn.parallel.DistributedDataParallel`, and by \n");
        else
            text_add(&t, "Since `find_unused_parameters=True` is enabled, this likely  means "
                         "that not all `forward` outputs participate in computing loss. You can "
                         "fix this by ");
        text_add(&t, "%s%s", outputs_not_used, ddp_bug);
    }
    int rank = pg_rank(r->pg);
    if (r->cfg.debug != DEBUG_OFF) {
        // PyTorch walks param_names_, an unordered_map filled in index order: libstdc++ then
        // iterates the newest first, i.e. descending indices (as the field report shows).
        text_add(&t, "\nParameters which did not receive grad for rank %d: ", rank);
        for (int k = n - 1; k >= 0; k--)
            text_add(&t, "%s%s", k == n - 1 ? "" : ", ", r->names[unmarked[k]]);
        for (int k = n - 1; k >= 0; k--)
            fprintf(stderr, "[Rank %d] Parameter: %s did not get gradient in backwards pass.\n",
                    rank, r->names[unmarked[k]]);
    }
    text_add(&t, "\nParameter indices which did not receive grad for rank %d:", rank);
    for (int k = 0; k < n; k++)
        text_add(&t, " %d", unmarked[k]);
    if (r->cfg.debug == DEBUG_OFF)
        text_add(&t, "\n In addition, you can set the environment variable "
                     "TORCH_DISTRIBUTED_DEBUG to either INFO or DETAIL to print out information "
                     "about which particular parameters did not receive gradient on this rank "
                     "as part of this error");
    free(unmarked);
    int rc = reducer_fail(r, "%s", t.s);
    free(t.s);
    return rc;
}

// checkAndRaiseMarkedTwiceError
int reducer_raise_marked_twice(Reducer *r, int i) {
    const char *common =
        "Expected to mark a variable ready only once. This error is caused by one of the "
        "following reasons: 1) Use of a module parameter outside the `forward` function. Please "
        "make sure model parameters are not shared across multiple concurrent forward-backward "
        "passes. or try to use _set_static_graph() as a workaround if this module graph does "
        "not change during training loop.2) Reused parameters in multiple reentrant backward "
        "passes. For example, if you use multiple `checkpoint` functions to wrap the same part "
        "of your model, it would result in the same set of parameters been used by different "
        "reentrant backward passes multiple times, and hence marking a variable ready multiple "
        "times. DDP does not support such use cases in default. You can try to use "
        "_set_static_graph() as a workaround if your module graph does not change over "
        "iterations.";
    const char *tail = " has been marked as ready twice. This means that multiple autograd "
                       "engine  hooks have fired for this particular parameter during this "
                       "iteration.";
    const char *third =
        "3) Incorrect unused parameter detection. The return value of the `forward` function "
        "is inspected by the distributed data parallel wrapper to figure out if any of the "
        "module's parameters went unused. For unused parameters, DDP would not expect "
        "gradients from then. However, if an unused parameter becomes part of the autograd "
        "graph at a later point in time (e.g., in a reentrant backward when using "
        "`checkpoint`), the gradient will show up unexpectedly. If all parameters in the "
        "model participate in the backward pass, you can disable unused parameter detection "
        "by passing the keyword argument `find_unused_parameters=False` to "
        "`torch.nn.parallel.DistributedDataParallel`. If unused parameters in the model do "
        "not change over iterations, You can try to use _set_static_graph() as a workaround "
        "if this module graph does not change during training loop.";
    bool named = r->cfg.debug != DEBUG_OFF;
    return reducer_fail(r, "%s\nParameter at index %d%s%s%s%s%s", common, i,
                        named ? " with name " : "", named ? r->names[i] : "", tail,
                        named ? ""
                              : " You can set the environment variable TORCH_DISTRIBUTED_DEBUG "
                                "to either INFO or DETAIL to print parameter names for further "
                                "debugging.",
                        r->has_marked_unused_parameters ? "" : third);
}
