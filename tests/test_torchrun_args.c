/* test_torchrun_args.c -- torchrun_rewrite (tui/launch/torchrun_args.h): the seed's commands
 * (`torchrun --nproc_per_node=3 main.py`, `python -m torch.distributed.run --nproc_per_node=3
 * main.py`) and torchrun's other spellings become the launcher's topology and the rank
 * program's command line; what is not torchrun is left alone; what ddpdbg cannot honour is one
 * line and 2. */
#include "tests/expect.h"
#include "tui/launch/torchrun_args.h"

#include <stdlib.h>
#include <string.h>

// Rewrites the NULL-terminated words; returns torchrun_rewrite's result, *t filled on 1.
static int rewrite(const char *python, TorchrunArgs *t, const char **words) {
    int n = 0;
    while (words[n])
        n++;
    memset(t, 0, sizeof *t);
    return torchrun_rewrite(n, (char **)words, python, t);
}

// The rewritten argv equals the NULL-terminated want.
static int argv_is(const TorchrunArgs *t, const char **want) {
    int n = 0;
    while (want[n])
        n++;
    if (t->argc != n) return 0;
    for (int i = 0; i < n; i++)
        if (strcmp(t->argv[i], want[i])) return 0;
    return t->argv[n] == NULL;
}

int main(void) {
    TorchrunArgs t;
    // the seed's torchrun command: torchrun's own interpreter runs the script
    int r = rewrite("/usr/bin/python3", &t,
                    (const char *[]){"torchrun", "--nproc_per_node=3", "main.py", "--epochs", "2", NULL});
    EXPECT(r == 1, "torchrun: %d", r);
    EXPECT(t.nproc_per_node == 3 && t.nnodes == -1 && t.master_port == -1 && !t.master_addr,
           "torchrun topology %d %d %d", t.nproc_per_node, t.nnodes, t.master_port);
    EXPECT(argv_is(&t, (const char *[]){"/usr/bin/python3", "main.py", "--epochs", "2", NULL}),
           "torchrun argv");
    free(t.argv);
    // the seed's python -m torch.distributed.run, '-' spelling and a separate value, the
    // interpreter's own options kept
    r = rewrite(NULL, &t, (const char *[]){"/usr/bin/python3", "-u", "-m", "torch.distributed.run",
                                           "--nproc-per-node", "2", "--nnodes=1", "--master_port",
                                           "29611", "main.py", "--nproc_per_node=9", NULL});
    EXPECT(r == 1, "python -m: %d", r);
    EXPECT(t.nproc_per_node == 2 && t.nnodes == 1 && t.master_port == 29611,
           "python -m topology %d %d %d", t.nproc_per_node, t.nnodes, t.master_port);
    EXPECT(argv_is(&t, (const char *[]){"/usr/bin/python3", "-u", "main.py", "--nproc_per_node=9",
                                        NULL}),
           "python -m argv: the script's own options are the script's");
    free(t.argv);
    // rendezvous endpoint, node rank, ignored agent options, --module, no python given
    r = rewrite(NULL, &t, (const char *[]){"/opt/bin/torchrun", "--standalone", "--nnodes", "2:2",
                                           "--node_rank=1", "--rdzv_endpoint=node0:29400",
                                           "--rdzv-backend=c10d", "--max_restarts", "0", "-m",
                                           "pkg.train", "x", NULL});
    EXPECT(r == 1, "module: %d", r);
    EXPECT(t.nnodes == 2 && t.node_rank == 1 && t.master_port == 29400 && t.master_addr &&
               !strcmp(t.master_addr, "node0"),
           "rendezvous topology");
    EXPECT(argv_is(&t, (const char *[]){"python3", "-m", "pkg.train", "x", NULL}), "module argv");
    free(t.argv);
    // --no-python runs the program itself
    r = rewrite(NULL, &t, (const char *[]){"torchrun", "--no_python", "--nproc_per_node", "2",
                                           "./run.sh", "a", NULL});
    EXPECT(r == 1 && argv_is(&t, (const char *[]){"./run.sh", "a", NULL}), "no-python");
    free(t.argv);
    // not torchrun: untouched
    EXPECT(rewrite(NULL, &t, (const char *[]){"python3", "train.py", NULL}) == 0, "python script");
    EXPECT(rewrite(NULL, &t, (const char *[]){"python3", "-m", "pkg.train", NULL}) == 0,
           "python -m other");
    EXPECT(rewrite(NULL, &t, (const char *[]){"/usr/bin/env", "torchrun", NULL}) == 0, "env");
    EXPECT(rewrite(NULL, &t, (const char *[]){"pythonista", "-m", "torch.distributed.run", "x.py",
                                              NULL}) == 0,
           "not an interpreter's name");
    // what ddpdbg cannot honour: one line (stderr), 2
    EXPECT(rewrite(NULL, &t, (const char *[]){"torchrun", "--nnodes=1:4", "x.py", NULL}) == 2,
           "elastic range");
    EXPECT(rewrite(NULL, &t, (const char *[]){"torchrun", "--nproc_per_node=gpu", "x.py", NULL}) == 2,
           "device count");
    EXPECT(rewrite(NULL, &t, (const char *[]){"torchrun", "--nproc_per_node=0", "x.py", NULL}) == 2,
           "zero ranks");
    EXPECT(rewrite(NULL, &t, (const char *[]){"torchrun", "--frobnicate", "x.py", NULL}) == 2,
           "unknown option");
    EXPECT(rewrite(NULL, &t, (const char *[]){"torchrun", "--nproc_per_node=2", NULL}) == 2,
           "no script");
    EXPECT(rewrite(NULL, &t, (const char *[]){"torchrun", "--master_port", NULL}) == 2,
           "missing value");
    return expect_report();
}
