/* main.c -- bin/ddpdbg-train, the command line: `ddpdbg-train COMMAND key=value ...`, with
 * Ultralytics-style key=value arguments. Commands: params (the parameter listing of a
 * model). Bad input is one line on stderr and exit status 2; --help prints the usage. */
#include <stdlib.h>

#include "kernels/base.h"       // DIE
#include "trainer/nn/builtin.h" // builtin_models (listed by the usage)
#include "trainer/nn/rtdetr.h"

static void usage(FILE *f) {
    fprintf(f, "usage: ddpdbg-train COMMAND key=value ...\n"
               "commands:\n"
               "  params model=M [nc=K]  print every parameter of model M (index, state-dict\n"
               "                         name, shape) and the totals; nc=K overrides the\n"
               "                         yaml's class count\n"
               "models: a yaml path, or a built-in:");
    for (int i = 0; i < n_builtin_models; i++)
        fprintf(f, " %s", builtin_models[i].name);
    fprintf(f, "\n");
}

// One key=value argument of a command: `key` names it, *value receives the text.
typedef struct KeyArg {
    const char *key;
    const char **value;
} KeyArg;

// Matches every argv entry against keys; a missing '=', an unknown or a repeated key is
// fatal (exit 2) with one line naming it.
static void parse_keys(const char *cmd, int argc, char **argv, const KeyArg *keys, int n_keys) {
    for (int i = 0; i < argc; i++) {
        const char *eq = strchr(argv[i], '=');
        if (!eq || eq == argv[i])
            DIE(2, "ddpdbg-train %s: expected key=value, got '%s'", cmd, argv[i]);
        size_t len = (size_t)(eq - argv[i]);
        int k = 0;
        while (k < n_keys && (strlen(keys[k].key) != len || strncmp(keys[k].key, argv[i], len)))
            k++;
        if (k == n_keys) {
            char expected[256] = "";
            for (int j = 0; j < n_keys; j++)
                snprintf(expected + strlen(expected), sizeof expected - strlen(expected),
                         "%s%s=", j ? ", " : "", keys[j].key);
            DIE(2, "ddpdbg-train %s: unknown argument '%s' (expected %s)", cmd, argv[i], expected);
        }
        if (*keys[k].value) DIE(2, "ddpdbg-train %s: '%s' given twice", cmd, keys[k].key);
        *keys[k].value = eq + 1;
    }
}

static int parse_positive(const char *cmd, const char *key, const char *text) {
    char *end;
    long v = strtol(text, &end, 10);
    if (!*text || *end || v < 1 || v > 1000000)
        DIE(2, "ddpdbg-train %s: %s must be a positive integer, got '%s'", cmd, key, text);
    return (int)v;
}

static int cmd_params(int argc, char **argv) {
    const char *model = NULL, *nc_text = NULL;
    const KeyArg keys[] = {{"model", &model}, {"nc", &nc_text}};
    parse_keys("params", argc, argv, keys, 2);
    if (!model) DIE(2, "ddpdbg-train params: missing model= (a yaml path or a built-in name)");
    int nc = nc_text ? parse_positive("params", "nc", nc_text) : 0;

    Rtdetr m;
    char err[1024];
    if (rtdetr_init(&m, model, nc, 0, err, sizeof err)) DIE(2, "%s", err);
    rtdetr_print_params(&m, stdout);
    rtdetr_free(&m);
    return 0;
}

int main(int argc, char **argv) {
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
    DIE(2, "ddpdbg-train: unknown command '%s' (expected params; see --help)", cmd);
}
