/* scenario.c -- the failure catalog (scenario.h). */
#include "tui/teach/scenario.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tui/launch/launch.h"
#include "tui/model/model.h"
#include "tui/diagnosis/report.h"

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

static const Scenario CATALOG[] = {
    {"healthy", "two ranks train one epoch without a fault: the diagnosis finds nothing wrong",
     2, ARGS("epochs=1"), SCENARIO_HEALTHY},
    {"field_report", "rank 0's batch at iteration 1 has no boxes: 25 tensors get no gradient, "
                     "rank 0 raises, rank 1 waits in its allreduce",
     2, ARGS("fault=nogt:rank=0,iter=1"), FINDING_UNUSED_SOME_RANKS},
    {"unused_all", "one decoder score head never reaches the loss on any rank: every rank "
                   "raises at its next forward",
     2, ARGS("fault=unused:param=*dec_score_head.2.*,rank=0",
             "fault=unused:param=*dec_score_head.2.*,rank=1"),
     FINDING_UNUSED_ALL_RANKS},
    {"unused_head", "one decoder score head is left out of the loss on rank 1 only",
     2, ARGS("fault=unused:param=*dec_score_head.2.*,rank=1"), FINDING_UNUSED_SOME_RANKS},
    {"find_unused", "the field report with find_unused_parameters=true: it trains through",
     2, ARGS("fault=nogt:rank=0,iter=1", "find_unused_parameters=true"), FINDING_UNUSED_HANDLED},
    {"skip_backward", "rank 1 skips one backward: its collectives fall one iteration behind "
                      "and the ranks hang",
     2, ARGS("fault=skip_backward:rank=1,iter=1", "epochs=2"), FINDING_SKIPPED_BACKWARD},
    {"uneven", "rank 1 runs 2 fewer batches: the ranks' collectives stop matching",
     2, ARGS("fault=uneven:rank=1,batches=2", "epochs=2"), FINDING_UNEVEN_BATCHES},
    {"no_sync_one_rank", "rank 1 alone runs iteration 1 under no_sync(): collective sequences "
                         "diverge",
     2, ARGS("fault=no_sync:rank=1,iter=1"), FINDING_NO_SYNC_MISMATCH},
    {"bucket_cap", "rank 1 builds DDP with bucket_cap_mb=1 and the settings check is off, as in "
                   "PyTorch: the ranks' buckets and allreduces differ",
     2, ARGS("fault=bucket_cap:rank=1,mb=1", "check_ddp_settings=false",
             "find_unused_parameters=true"),
     FINDING_LAYOUT_MISMATCH},
    {"kill", "rank 1 is SIGKILLed in the middle of backward at iteration 2",
     2, ARGS("fault=kill:rank=1,iter=2,phase=backward"), FINDING_DEAD_RANK},
    {"straggler", "rank 1 sleeps 400 ms in every forward: the other waits for it",
     2, ARGS("fault=slow:rank=1,ms=400"), FINDING_STRAGGLER},
    {"shape", "rank 1's model has one class more: a parameter of another shape at construction",
     2, ARGS("fault=shape:rank=1"), FINDING_MODEL_MISMATCH},
};
#define N_CATALOG ((int)(sizeof CATALOG / sizeof CATALOG[0]))

const Scenario *scenario_catalog(int *n) {
    *n = N_CATALOG;
    return CATALOG;
}

const Scenario *scenario_find(const char *name) {
    for (int k = 0; k < N_CATALOG; k++)
        if (!strcmp(CATALOG[k].name, name)) return &CATALOG[k];
    return NULL;
}

// Runs argv (a NULL-terminated program and arguments) and waits; its exit status, or -1.
static int run_program(char *const *argv, bool quiet) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        if (quiet && !freopen("/dev/null", "w", stdout)) _exit(127);
        execv(argv[0], argv);
        fprintf(stderr, "ddpdbg scenario: cannot execute %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int run_scenario(const Scenario *s, const char *trace_dir, const char *work_dir,
                        bool no_tui) {
    char train[PATH_MAX];
    if (launch_rank_program(train, sizeof train)) return 2;
    char dir[PATH_MAX];
    if (trace_dir) {
        snprintf(dir, sizeof dir, "%s", trace_dir);
    } else {
        char stamp[32];
        time_t t = time(NULL);
        struct tm tm;
        localtime_r(&t, &tm);
        strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
        snprintf(dir, sizeof dir, "traces/%s-scenario-%s", stamp, s->name);
    }
    // the run's dataset and checkpoints: in the work directory, else beside the trace
    char data[PATH_MAX + 64], out_dir[PATH_MAX + 64], data_arg[PATH_MAX + 200],
        out_arg[PATH_MAX + 200], yaml[PATH_MAX + 100];
    data_arg[0] = 0;
    snprintf(data, sizeof data, work_dir ? "%s/data" : "%s.data", work_dir ? work_dir : dir);
    snprintf(out_dir, sizeof out_dir, work_dir ? "%s/run" : "%s.run", work_dir ? work_dir : dir);
    snprintf(data_arg, sizeof data_arg, "out=%s", data);
    snprintf(yaml, sizeof yaml, "%s/data.yaml", data);
    if (access(yaml, R_OK) != 0) {
        char *synth[] = {train, "synth", data_arg, "n=16", "imgsz=96", "classes=3", "empty=0",
                         "seed=1", NULL};
        if (run_program(synth, true) != 0) {
            fprintf(stderr, "ddpdbg scenario: writing the dataset into %s failed\n", data);
            return 2;
        }
    }
    snprintf(data_arg, sizeof data_arg, "data=%s", yaml);
    snprintf(out_arg, sizeof out_arg, "out=%s", out_dir);
    char nproc[16];
    snprintf(nproc, sizeof nproc, "%d", s->nproc);
    char *argv[64];
    int argc = 0;
    const char *head[] = {"run", "--nproc-per-node", nproc, "--trace", dir, "--hang-timeout", "3",
                          "--on-hang", "kill"};
    for (size_t k = 0; k < sizeof head / sizeof head[0]; k++)
        argv[argc++] = (char *)head[k];
    if (no_tui) argv[argc++] = "--no-tui";
    // augment=false: a mosaic crop can leave a batch without boxes (the field report's own
    // mechanism), which would add a failure the scenario did not ask for
    const char *train_args[] = {"--", "train", "model=rtdetr-tiny.yaml", data_arg, "imgsz=96",
                                "batch=1", "val=false", "augment=false", out_arg};
    for (size_t k = 0; k < sizeof train_args / sizeof train_args[0]; k++)
        argv[argc++] = (char *)train_args[k];
    bool epochs_given = false;
    for (int k = 0; s->args[k]; k++) {
        epochs_given |= !strncmp(s->args[k], "epochs=", 7);
        argv[argc++] = (char *)s->args[k];
    }
    if (!epochs_given) argv[argc++] = "epochs=1";
    argv[argc] = NULL;
    printf("scenario %s: %s\n", s->name, s->description);
    fflush(stdout);
    int status = launch_run_command(argc, argv);
    printf("\nscenario %s: the run exited %d; its trace: %s\n\n", s->name, status, dir);

    Model m;
    char err[512];
    if (model_load(&m, dir, err, sizeof err)) {
        fprintf(stderr, "ddpdbg scenario: %s\n", err);
        return 2;
    }
    Finding *f = NULL;
    int n = diagnose(&m, &f);
    report_text(stdout, &m, f, n);
    bool healthy = s->expect == SCENARIO_HEALTHY;
    bool found = healthy && findings_max_severity(f, n) <= SEVERITY_INFO;
    for (int k = 0; k < n && !healthy; k++)
        found |= f[k].kind == s->expect;
    printf("\nscenario %s: expected %s: %s\n", s->name,
           healthy ? "nothing wrong" : finding_kind_name(s->expect), found ? "found" : "NOT FOUND");
    findings_free(f, n);
    model_free(&m);
    return found ? 0 : 1;
}

int scenario_command(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "list")) {
        int n;
        const Scenario *c = scenario_catalog(&n);
        for (int k = 0; k < n; k++)
            printf("%-18s %s\n", c[k].name, c[k].description);
        return 0;
    }
    if (argc >= 3 && !strcmp(argv[1], "run")) {
        const Scenario *s = scenario_find(argv[2]);
        if (!s) {
            fprintf(stderr, "ddpdbg scenario: no scenario '%s' (ddpdbg scenario list)\n", argv[2]);
            return 2;
        }
        const char *trace = NULL, *work = NULL;
        bool no_tui = false;
        for (int k = 3; k < argc; k++) {
            if (!strcmp(argv[k], "--no-tui")) no_tui = true;
            else if (!strcmp(argv[k], "--trace") && k + 1 < argc) trace = argv[++k];
            else if (!strncmp(argv[k], "--trace=", 8)) trace = argv[k] + 8;
            else if (!strcmp(argv[k], "--work") && k + 1 < argc) work = argv[++k];
            else if (!strncmp(argv[k], "--work=", 7)) work = argv[k] + 7;
            else {
                fprintf(stderr, "ddpdbg scenario run: unexpected '%s' (expected --no-tui, "
                                "--trace DIR or --work DIR)\n", argv[k]);
                return 2;
            }
        }
        return run_scenario(s, trace, work, no_tui);
    }
    fprintf(stderr, "usage: ddpdbg scenario list | ddpdbg scenario run NAME [--no-tui] "
                    "[--trace DIR] [--work DIR]\n");
    return 2;
}
