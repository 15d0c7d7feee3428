/* registry.h -- a model's parameter names in DDP's index order, as the trainer's registry
 * gives them: `ddpdbg-train params model=M` (any built-in name or a yaml path), run as a
 * subprocess, its "<index> <name> <d0>x<d1>..." lines read.
 *
 * Why a subprocess rather than linking the registry into bin/ddpdbg: the registry names a
 * parameter by building the model (tensors, arenas, the kernels and their OpenBLAS, the yaml
 * reader), while bin/ddpdbg links only the probe from the library and none of that; the
 * `params` command is the trainer's stable interface (its output is pinned byte for byte by
 * tests/golden/params), and its errors for a bad yaml are already one line each. It costs one
 * process and the model's construction (rtdetr-l: 0.34 s on an idle 2-core machine). */
#ifndef TUI_POSTMORTEM_REGISTRY_H
#define TUI_POSTMORTEM_REGISTRY_H

#include <stddef.h>

// model's names into *names (n of them, malloc'd; registry_free). 0, or -1 with one line in
// err: the trainer's own message for a bad model ("rtdetr-q.yaml: ..."), or why it did not run
// ("" when no trainer was found: launch_rank_program has said so on stderr).
int registry_names(const char *model, char ***names, int *n, char *err, size_t errlen);
void registry_free(char **names, int n);

#endif
