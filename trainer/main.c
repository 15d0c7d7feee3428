/* main.c -- bin/ddpdbg-train, the command line: `ddpdbg-train COMMAND key=value ...`, with
 * Ultralytics-style key=value arguments (trainer/cli.h). Commands: params (the parameter
 * listing of a model), synth (writes the synthetic dataset, trainer/cmd_synth.c), train (single-process
 * training, trainer/cmd_train.c), dump (one step written out for tests/torch/, trainer/cmd_dump.c).
 * Bad input is one line on stderr and exit status 2; --help prints the usage. */
#include <signal.h>
#include <stdlib.h>

#include "kernels/base.h"       // DIE
#include "trainer/cli.h"
#include "trainer/cmd_dump.h"   // cmd_dump
#include "trainer/cmd_synth.h"  // cmd_synth
#include "trainer/cmd_train.h"  // cmd_train
#include "trainer/nn/builtin.h" // builtin_models (listed by the usage)
#include "trainer/nn/rtdetr.h"

static void usage(FILE *f) {
    fprintf(f, "usage: ddpdbg-train COMMAND key=value ...\n"
               "commands:\n"
               "  params model=M [nc=K]  print every parameter of model M (index, state-dict\n"
               "                         name, shape) and the totals; nc=K overrides the\n"
               "                         yaml's class count\n"
               "  synth out=DIR [n=1000 imgsz=128 classes=3 empty=0.1 seed=0]\n"
               "                         write a synthetic YOLO dataset of shapes (train/val\n"
               "                         split, DIR/data.yaml)\n"
               "  train model=M data=D.yaml [imgsz=640 batch=16 epochs=100 optimizer=auto\n"
               "        lr0=0.01 seed=0 val=true threads=CORES out=DIR resume=PATH\n"
               "        device=cpu|fake|0|0,1 ...]\n"
               "                         train in one process, validating every epoch and\n"
               "                         writing DIR/last.ckpt (default runs/detect/train)\n"
               "  dump model=M data=D.yaml out=DIR [imgsz=128 batch=2 seed=0 weights=CKPT]\n"
               "                         one training step of a fresh (or CKPT's) model on the first\n"
               "                         train images: DIR/model.ckpt and DIR/step.bin (loss\n"
               "                         terms, gradients) for tests/torch/\n"
               "models: a yaml path, or a built-in:");
    for (int i = 0; i < n_builtin_models; i++)
        fprintf(f, " %s", builtin_models[i].name);
    fprintf(f, "\n");
}

static int cmd_params(int argc, char **argv) {
    const char *model = NULL, *nc_text = NULL;
    const KeyArg keys[] = {{"model", &model}, {"nc", &nc_text}};
    cli_parse_keys("params", argc, argv, keys, 2);
    if (!model) DIE(2, "ddpdbg-train params: missing model= (a yaml path or a built-in name)");
    int nc = nc_text ? (int)cli_parse_int("params", "nc", nc_text, 1, 100000) : 0;

    Rtdetr m;
    char err[1024];
    if (rtdetr_init(&m, model, nc, 0, err, sizeof err)) DIE(2, "%s", err);
    rtdetr_print_params(&m, stdout);
    rtdetr_free(&m);
    return 0;
}

int main(int argc, char **argv) {
    // A peer that died closes its sockets; writing to one must be an error the process group
    // reports, not a SIGPIPE that kills this rank silently (Python, hence PyTorch, ignores it).
    signal(SIGPIPE, SIG_IGN);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    for (int i = 2; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        }
    if (strcmp(cmd, "params") == 0) return cmd_params(argc - 2, argv + 2);
    if (strcmp(cmd, "synth") == 0) return cmd_synth(argc - 2, argv + 2);
    if (strcmp(cmd, "train") == 0) return cmd_train(argc - 2, argv + 2);
    if (strcmp(cmd, "dump") == 0) return cmd_dump(argc - 2, argv + 2);
    DIE(2, "ddpdbg-train: unknown command '%s' (expected params, synth, train or dump; see --help)",
        cmd);
}
