/* main.c -- bin/ddpdbg-train: the command line. Subcommands are filled in by later issues. */
#include "kernels/base.h"

int main(int argc, char **argv) {
    if (argc < 2) DIE(2, "usage: ddpdbg-train params|synth|train ...");
    DIE(2, "ddpdbg-train: unknown command '%s'", argv[1]);
}
