/* cmd_synth.c -- the `synth` command: validates out= n= imgsz= classes= empty= seed=, writes
 * the dataset with synth_generate and prints one summary line. Arguments follow trainer/cli.h
 * (unknown, repeated, malformed keys are exit 2). */
#include "trainer/cmd_synth.h"

#include "kernels/base.h" // DIE
#include "trainer/cli.h"
#include "trainer/data/synth.h"

int cmd_synth(int argc, char **argv) {
    const char *out = NULL, *n = "1000", *imgsz = "128", *classes = "3", *empty = "0.1",
               *seed = "0";
    const KeyArg keys[] = {{"out", &out},         {"n", &n},         {"imgsz", &imgsz},
                           {"classes", &classes}, {"empty", &empty}, {"seed", &seed}};
    cli_parse_keys("synth", argc, argv, keys, 6);
    if (!out || !out[0]) DIE(2, "ddpdbg-train synth: missing out= (the dataset folder to create)");
    SynthConfig cfg = {.out = out};
    cfg.n = (int)cli_parse_int("synth", "n", n, 2, 10000000);
    cfg.imgsz = (int)cli_parse_int("synth", "imgsz", imgsz, 32, 4096);
    cfg.classes = (int)cli_parse_int("synth", "classes", classes, 1, SYNTH_MAX_CLASSES);
    cfg.seed = (uint64_t)cli_parse_int("synth", "seed", seed, 0, INT64_MAX);
    cfg.empty = cli_parse_double("synth", "empty", empty, 0, 1, "a fraction in [0, 1]");

    SynthSummary sum;
    char err[1024];
    if (synth_generate(&cfg, &sum, err, sizeof err)) DIE(2, "%s", err);
    printf("synth: %d images (%d train, %d val), %d without objects, %d boxes, %d classes -> "
           "%s/data.yaml\n",
           cfg.n, sum.n_train, sum.n_val, sum.n_empty, sum.n_boxes, cfg.classes, cfg.out);
    return 0;
}
