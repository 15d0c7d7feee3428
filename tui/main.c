/* main.c -- bin/ddpdbg, the command line: `ddpdbg COMMAND ...`: run (the launcher,
 * tui/launch/launch.h), tui (the viewer on a saved trace, tui/views/tui.h), report (the diagnosis
 * as text or JSON, tui/diagnosis/report.h), export (Chrome trace JSON, tui/diagnosis/export.h),
 * scenario (the failure catalog, tui/teach/scenario.h), and the post-mortems of runs ddpdbg did not
 * trace: explain (a pasted log, tui/postmortem/explain.h) and import-fr (Flight Recorder dumps,
 * tui/postmortem/fr_import.h). Bad usage is one line on stderr and exit status 2; --help prints
 * the usage. */
#include <stdio.h>
#include <string.h>

#include "tui/diagnosis/export.h" // export_command
#include "tui/launch/foreign.h" // env_command
#include "tui/launch/launch.h" // launch_run_command
#include "tui/postmortem/explain.h"   // explain_command
#include "tui/postmortem/fr_import.h" // import_fr_command
#include "tui/diagnosis/report.h" // report_command
#include "tui/teach/scenario.h" // scenario_command
#include "tui/views/tui.h"    // tui_command

static void usage(FILE *f) {
    fprintf(f, "usage: ddpdbg COMMAND ...\n"
               "commands:\n"
               "  run [options] -- TRAIN-ARGS   start the ranks of bin/ddpdbg-train, torchrun\n"
               "                                style (ddpdbg run --help); or of any program:\n"
               "      -- python3 train.py ...   a PyTorch job, traced (also -- torchrun ...)\n"
               "  env --trace DIR               the exports that make a PyTorch job's ranks,\n"
               "                                started by any launcher, trace themselves\n"
               "  tui [--teach] DIR             the views on a saved trace (ddpdbg tui --help)\n"
               "  report DIR [--json]           what went wrong, why, and the fixes; exit 0\n"
               "                                healthy, 1 findings, 2 unreadable trace\n"
               "  export DIR --chrome FILE      the trace as Chrome trace JSON (Perfetto)\n"
               "  scenario list | run NAME      the failure catalog: each scenario runs the real\n"
               "                                trainer with a fault and diagnoses its trace\n"
               "  explain FILE|- [--model M]    the DDP errors in a training log, explained as\n"
               "          [--json]              report does (ddpdbg explain --help)\n"
               "  import-fr DIR [--out OUT]     PyTorch's Flight Recorder dumps as ddpdbg traces\n"
               "                                for report, tui and export\n");
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
    if (!strcmp(cmd, "env")) return env_command(argc - 1, argv + 1);
    if (!strcmp(cmd, "tui")) return tui_command(argc - 1, argv + 1);
    if (!strcmp(cmd, "report")) return report_command(argc - 1, argv + 1);
    if (!strcmp(cmd, "export")) return export_command(argc - 1, argv + 1);
    if (!strcmp(cmd, "scenario")) return scenario_command(argc - 1, argv + 1);
    if (!strcmp(cmd, "explain")) return explain_command(argc - 1, argv + 1);
    if (!strcmp(cmd, "import-fr")) return import_fr_command(argc - 1, argv + 1);
    fprintf(stderr,
            "ddpdbg: unknown command '%s' (expected run, env, tui, report, export, scenario, explain or "
            "import-fr; see ddpdbg --help)\n",
            cmd);
    return 2;
}
