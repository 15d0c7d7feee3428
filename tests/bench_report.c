/* bench_report.c -- `ddpdbg report` on a 10 M-event trace (issue: at most 3 s): 2 ranks of a
 * 575-parameter model (rtdetr-l's count) in 6 buckets, ~4250 iterations each, written once by
 * tests/trace_synth.c into build/bench/report-10m/ (kept for later runs) through the probe's
 * own database layer. Times model_load (which includes probe_db_check's quick_check), diagnose
 * and the text and JSON reports, then the whole command as a user runs it. A timing, never
 * asserted: the goal is printed beside it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include "tests/trace_synth.h"
#include "tui/diagnosis/diagnose.h"
#include "tui/model/model.h"
#include "tui/diagnosis/report.h"

// CPU seconds of this process (all threads): what the load costs whatever else runs.
static double cpu_s(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_utime.tv_usec / 1e6 +
           (double)u.ru_stime.tv_sec + (double)u.ru_stime.tv_usec / 1e6;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    const char *dir = "build/bench/report-10m";
    SynthSpec s = synth_default();
    s.n_params = 575;
    s.n_buckets = 6;
    s.n_iters = 4245; // 2 ranks x 4245 x 1178 events = 10.0 M
    s.iter_ns = 1000000000;
    char marker[512], err[512];
    snprintf(marker, sizeof marker, "%s/complete", dir);
    struct stat sb;
    if (stat(marker, &sb) < 0) {
        mkdir("build", 0755);
        mkdir("build/bench", 0755);
        double t = now_s();
        int64_t events = 0;
        if (synth_trace(dir, &s, &events, err, sizeof err) < 0) {
            fprintf(stderr, "bench_report: %s\n", err);
            return 1;
        }
        FILE *f = fopen(marker, "w");
        if (f) fprintf(f, "%lld\n", (long long)events), fclose(f);
        printf("generated %s: %lld events in %.1f s\n", dir, (long long)events, now_s() - t);
    }
    FILE *devnull = fopen("/dev/null", "w");
    double best[4] = {1e9, 1e9, 1e9, 1e9}, best_cpu = 1e9;
    int64_t n_events = 0;
    int n_findings = 0;
    for (int rep = 0; rep < 3; rep++) {
        Model m;
        double c0 = cpu_s(), t0 = now_s();
        if (model_load(&m, dir, err, sizeof err) < 0) {
            fprintf(stderr, "bench_report: %s\n", err);
            return 1;
        }
        double t1 = now_s();
        Finding *f;
        int n = diagnose(&m, &f);
        double t2 = now_s();
        report_text(devnull, &m, f, n);
        report_json(devnull, &m, f, n);
        double t3 = now_s();
        n_events = m.ranks[0].n_events + m.ranks[1].n_events;
        n_findings = n;
        findings_free(f, n);
        model_free(&m);
        double dt[4] = {t1 - t0, t2 - t1, t3 - t2, t3 - t0};
        best_cpu = cpu_s() - c0 < best_cpu ? cpu_s() - c0 : best_cpu;
        for (int k = 0; k < 4; k++)
            best[k] = dt[k] < best[k] ? dt[k] : best[k];
    }
    fclose(devnull);
    printf("report on %lld events (%d findings), best of 3: load %.2f s, diagnose %.3f s, "
           "text+json %.3f s, "
           "total %.2f s (goal <= 3 s); CPU %.2f s over all threads\n",
           (long long)n_events, n_findings, best[0], best[1], best[2], best[3], best_cpu);
    const char *bin = argc > 1 ? argv[1] : "bin/ddpdbg-train"; // run_bench.sh passes TRAIN
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%.*sddpdbg",
             (int)(strrchr(bin, '/') ? strrchr(bin, '/') - bin + 1 : 0), bin);
    if (stat(cmd, &sb) == 0) {
        char run[1400];
        snprintf(run, sizeof run, "%s report %s >/dev/null", cmd, dir);
        double t = now_s();
        int rc = system(run);
        printf("`ddpdbg report %s`: %.2f s, exit %d (goal <= 3 s)\n", dir, now_s() - t,
               WEXITSTATUS(rc));
    }
    return 0;
}
