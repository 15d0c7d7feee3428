/* main.c -- bin/ddpdbg, the command line: `ddpdbg COMMAND ...`. Today one command, run (the
 * launcher, tui/launch.h); the live view, reports and exports are later issues. Bad usage is
 * one line on stderr and exit status 2; --help prints the usage. */
#include <stdio.h>
#include <string.h>

#include "tui/launch.h" // launch_run_command, launch_print_usage

static void usage(FILE *f) {
    fprintf(f, "usage: ddpdbg COMMAND ...\n"
               "commands:\n"
               "  run [options] -- TRAIN-ARGS   start the ranks of bin/ddpdbg-train, torchrun\n"
               "                                style (ddpdbg run --help)\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "run")) return launch_run_command(argc - 1, argv + 1);
    fprintf(stderr, "ddpdbg: unknown command '%s' (expected run; see ddpdbg --help)\n", cmd);
    return 2;
}
