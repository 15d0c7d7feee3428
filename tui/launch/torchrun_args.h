/* torchrun_args.h -- `ddpdbg run -- torchrun ...` and `ddpdbg run -- python -m
 * torch.distributed.run ...` (the seed's commands): torchrun's options, spelled as torchrun
 * spells them (--nproc_per_node and --nproc-per-node, "--opt value" and "--opt=value"), become
 * the launcher's, and the rest becomes the rank program's command line (python SCRIPT ARGS,
 * python -m MODULE ARGS, or with --no-python the program itself). ddpdbg starts the ranks
 * itself: torchrun's elastic agent is not used (Debian's torch 1.13 torchrun fails on Python
 * 3.11). Pure: no file system, no environment. */
#ifndef TUI_LAUNCH_TORCHRUN_ARGS_H
#define TUI_LAUNCH_TORCHRUN_ARGS_H

#include <stddef.h>

typedef struct TorchrunArgs {
    // torchrun's topology options; -1 / NULL where the command did not give them
    int nproc_per_node, nnodes, node_rank, master_port;
    const char *master_addr;
    // the rank program's command line: argv[0] is the interpreter (or, with --no-python, the
    // program), NULL-terminated; an array owned by the caller (free), strings borrowed from
    // the input or static
    char **argv;
    int argc;
} TorchrunArgs;

// Recognises a torchrun command in argv (argc entries): argv[0] is "torchrun" (any folder), or
// a python interpreter ("python", "python3", "python3.11", any folder) with its own options
// and "-m torch.distributed.run". The torchrun form runs its script with `python`, the
// interpreter given (torchrun's own, from its #! line; NULL: "python3"). Returns 0 when argv
// is no torchrun command (*out untouched), 1 when rewritten into *out, 2 after one line on
// stderr (an option torchrun has but ddpdbg cannot honour, a bad value, no script).
int torchrun_rewrite(int argc, char **argv, const char *python, TorchrunArgs *out);

#endif
