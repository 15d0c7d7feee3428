/* foreign.h -- ranks that are not ddpdbg-train: `ddpdbg run -- python train.py ...` (any
 * program), torchrun commands rewritten (torchrun_args.h), and the environment through which a
 * Python rank loads ddpdbg's attach (python/sitecustomize.py, python/ddpdbg/, and the probe as
 * libddpdbg_probe.so); `ddpdbg env` prints that environment for ranks another launcher starts. */
#ifndef TUI_LAUNCH_FOREIGN_H
#define TUI_LAUNCH_FOREIGN_H

#include <stdbool.h>
#include <stdio.h>

#include "tui/launch/torchrun_args.h"

// True when argv[0] names a ddpdbg-train command (train, synth, params, dump) or is a
// key=value argument: the rank program is then ddpdbg-train.
bool foreign_is_trainer_command(const char *arg0);

// The rank program of a foreign command: *argc/*argv (the arguments after --) are rewritten
// when they are a torchrun command (*torchrun filled, return 1) and then argv[0] is looked up
// in PATH (or taken as a path) into program. Returns 0 (or 1 for torchrun), or 2 after one line
// on stderr (no such program). *argv then holds the program's arguments (argv[0] excluded).
int foreign_program(int *argc, char ***argv, char *program, size_t size, TorchrunArgs *torchrun);

// Sets, in this process (the ranks inherit it), what a Python rank needs to trace itself:
// PYTHONPATH with python/ first and DDPDBG_PROBE_LIB. A program that is not Python (neither
// named python* nor a #! script of one) gets one line on stderr saying its ranks run untraced,
// and nothing else. Returns true when the ranks will trace themselves.
bool foreign_python_environment(const char *program);

// `ddpdbg env --trace DIR`: prints the shell exports for ranks started by another launcher.
// Returns the exit status (2 after one line for bad usage).
int env_command(int argc, char **argv);

#endif
