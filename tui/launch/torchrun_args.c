/* torchrun_args.c -- torchrun's command line into the launcher's (torchrun_args.h). Options as
 * torch/distributed/run.py declares them (1.13 and 2.x): topology ones are honoured, the
 * elastic agent's (rendezvous backend, restarts, logging) are read and ignored, since ddpdbg's
 * launcher does that job; anything else is an error, never a silent guess. */
#include "tui/launch/torchrun_args.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base.h" // xcalloc

// torchrun's options that take a value and that ddpdbg reads and ignores: the elastic
// agent's (restarts, monitoring, rendezvous identity, logs, output redirection).
static const char *const IGNORED_WITH_VALUE[] = {
    "--rdzv-backend", "--rdzv-id", "--rdzv-conf", "--max-restarts", "--monitor-interval",
    "--start-method", "--role", "--log-dir", "--redirects", "-r", "--tee", "-t", "--local-addr",
    "--local-ranks-filter", "--logs-specs", "--rdzv-timeout", NULL};
// ... and flags without a value
static const char *const IGNORED_FLAGS[] = {"--standalone", NULL};

static bool in_list(const char *const *list, const char *name) {
    for (; *list; list++)
        if (!strcmp(*list, name)) return true;
    return false;
}

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

// "python", "python3", "python3.11": an interpreter's name
static bool is_python(const char *path) {
    const char *b = base_name(path);
    if (strncmp(b, "python", 6)) return false;
    for (b += 6; *b; b++)
        if (!(*b >= '0' && *b <= '9') && *b != '.') return false;
    return true;
}

static int parse_int(const char *name, const char *text, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi) {
        fprintf(stderr, "ddpdbg run: torchrun's %s must be an integer in [%ld, %ld], got '%s'\n",
                name, lo, hi, text);
        return -1;
    }
    *out = (int)v;
    return 0;
}

// Applies one topology option. Returns 0, or -1 after one line.
static int apply(TorchrunArgs *t, const char *name, const char *value) {
    if (!strcmp(name, "--nproc-per-node")) {
        if (!strcmp(value, "cpu") || !strcmp(value, "gpu") || !strcmp(value, "auto")) {
            fprintf(stderr, "ddpdbg run: torchrun's --nproc-per-node=%s counts devices; give the "
                            "number of ranks (e.g. --nproc-per-node=2)\n", value);
            return -1;
        }
        return parse_int(name, value, 1, 1024, &t->nproc_per_node);
    }
    if (!strcmp(name, "--nnodes")) {
        const char *colon = strchr(value, ':'); // MIN:MAX, elastic unless MIN == MAX
        if (colon && (strlen(colon + 1) != (size_t)(colon - value) ||
                      strncmp(value, colon + 1, (size_t)(colon - value)))) {
            fprintf(stderr, "ddpdbg run: torchrun's --nnodes=%s is an elastic range; ddpdbg runs a "
                            "fixed number of nodes (e.g. --nnodes=2)\n", value);
            return -1;
        }
        char first[32];
        snprintf(first, sizeof first, "%.*s", colon ? (int)(colon - value) : 31, value);
        return parse_int(name, first, 1, 1 << 16, &t->nnodes);
    }
    if (!strcmp(name, "--node-rank")) return parse_int(name, value, 0, (1 << 16) - 1, &t->node_rank);
    if (!strcmp(name, "--master-port")) return parse_int(name, value, 1, 65535, &t->master_port);
    if (!strcmp(name, "--master-addr")) {
        t->master_addr = value;
        return 0;
    }
    if (!strcmp(name, "--rdzv-endpoint")) { // host:port, as master_addr and master_port
        const char *colon = strrchr(value, ':');
        if (!colon) {
            t->master_addr = value;
            return 0;
        }
        static char host[256];
        snprintf(host, sizeof host, "%.*s", (int)(colon - value), value);
        t->master_addr = host;
        return parse_int(name, colon + 1, 1, 65535, &t->master_port);
    }
    return 1; // not a topology option
}

int torchrun_rewrite(int argc, char **argv, const char *python, TorchrunArgs *out) {
    if (argc < 1) return 0;
    int i;
    const char *interpreter;
    char **python_opts = NULL;
    int n_python_opts = 0;
    if (!strcmp(base_name(argv[0]), "torchrun")) {
        interpreter = python && *python ? python : "python3";
        i = 1;
    } else if (is_python(argv[0])) {
        // python [its options] -m torch.distributed.run ...; the options stay the interpreter's
        int k = 1;
        while (k < argc && argv[k][0] == '-' && strcmp(argv[k], "-m") && strcmp(argv[k], "-c"))
            k += !strcmp(argv[k], "-X") || !strcmp(argv[k], "-W") ? 2 : 1;
        if (k + 1 >= argc || strcmp(argv[k], "-m") || strcmp(argv[k + 1], "torch.distributed.run"))
            return 0;
        interpreter = argv[0];
        python_opts = argv + 1;
        n_python_opts = k - 1;
        i = k + 2;
    } else {
        return 0;
    }
    TorchrunArgs t = {.nproc_per_node = -1, .nnodes = -1, .node_rank = -1, .master_port = -1};
    bool module = false, no_python = false;
    for (; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--")) {
            i++;
            break;
        }
        if (arg[0] != '-') break; // the script
        char name[64];
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        if (len >= sizeof name) len = sizeof name - 1;
        for (size_t k = 0; k < len; k++) // torchrun spells both --nproc_per_node and --nproc-per-node
            name[k] = k >= 2 && arg[k] == '_' ? '-' : arg[k];
        name[len] = 0;
        if (!strcmp(name, "-m") || !strcmp(name, "--module")) {
            module = true;
            continue;
        }
        if (!strcmp(name, "--no-python")) {
            no_python = true;
            continue;
        }
        if (in_list(IGNORED_FLAGS, name)) continue;
        bool topology = !strcmp(name, "--nproc-per-node") || !strcmp(name, "--nnodes") ||
                        !strcmp(name, "--node-rank") || !strcmp(name, "--master-addr") ||
                        !strcmp(name, "--master-port") || !strcmp(name, "--rdzv-endpoint");
        if (!topology && !in_list(IGNORED_WITH_VALUE, name)) {
            fprintf(stderr, "ddpdbg run: torchrun option '%s' is not one ddpdbg understands "
                            "(give ddpdbg run's own options before --; see ddpdbg run --help)\n",
                    arg);
            return 2;
        }
        const char *value = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!value || !*value) {
            fprintf(stderr, "ddpdbg run: torchrun's %s needs a value\n", name);
            return 2;
        }
        if (topology && apply(&t, name, value) < 0) return 2;
    }
    if (i >= argc) {
        fprintf(stderr, "ddpdbg run: the torchrun command names no script to run\n");
        return 2;
    }
    if (module && no_python) {
        fprintf(stderr, "ddpdbg run: torchrun's --module and --no-python exclude each other\n");
        return 2;
    }
    int rest = argc - i;
    t.argv = xcalloc((size_t)(rest + n_python_opts + 3), sizeof(char *));
    if (!no_python) {
        t.argv[t.argc++] = (char *)interpreter;
        for (int k = 0; k < n_python_opts; k++)
            t.argv[t.argc++] = python_opts[k];
        if (module) t.argv[t.argc++] = "-m";
    }
    for (; i < argc; i++)
        t.argv[t.argc++] = argv[i];
    *out = t;
    return 1;
}
