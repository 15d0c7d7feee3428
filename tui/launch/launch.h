/* launch.h -- `ddpdbg run`: spawns the ranks of bin/ddpdbg-train with torchrun's environment,
 * prefixes every output line with "[rankN]:", and stops every rank when one fails or the user
 * presses Ctrl-C. Not the rendezvous itself (the trainer's store does that) and not the live
 * view (a later issue): --no-tui is the only mode. */
#ifndef TUI_LAUNCH_H
#define TUI_LAUNCH_H

#include <stdio.h>

// Prints the usage of `ddpdbg run` to f.
void launch_print_usage(FILE *f);

// Runs `ddpdbg run ARGS...` (argv[0] is "run"). Returns the process exit status: 0 when every
// rank exits 0; the first failed rank's status (128+signal when killed by one); 130/143 when
// the launcher got SIGINT/SIGTERM; 2 for bad usage (one line on stderr).
int launch_run_command(int argc, char **argv);

// The rank program into path: $DDPDBG_TRAIN, else ddpdbg-train in this executable's folder.
// 0, or -1 after one line on stderr when it is not an executable.
int launch_rank_program(char *path, size_t size);

#endif
